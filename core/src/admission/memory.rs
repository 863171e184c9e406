//! What one decision cycle hands to the next: the holds it made (kept until their workload
//! starts, and charged for what they leave idle), the backfill released into them (which leaves
//! once their nodes have drained otherwise), and the preemption history that cooldowns and the
//! hourly cap read. It is keyed by queue, workload and node names, never by a snapshot's
//! indices, which each cycle numbers afresh. The controller and the simulator carry one each and
//! drive it the same way: [`CycleMemory::recall`] into the snapshot, `decide`,
//! [`CycleMemory::remember`] the decisions, and [`CycleMemory::evicted`] for each eviction that
//! went through. A controller stores each queue's part ([`CycleMemory::of_queue`]) in the
//! queue's status, and a new leader carries on from it ([`CycleMemory::restore`]), so a restart
//! neither gives a hold a fresh idle budget nor forgets the evictions the hourly cap counts.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::{Decisions, HoldCost, ReleaseReason};
use crate::snapshot::{GivenUpHold, NodeId, PreviousHold, RunningPod, Snapshot};

/// How far back evictions count against `PreemptionParams::max_victims_per_hour`.
pub const PREEMPTION_WINDOW_S: f64 = 3600.0;

/// The most given-up holds remembered per queue; past it the least recently given up are
/// forgotten. A queue's part of the memory is stored in its status, one API object (etcd refuses
/// requests over 1.5 MiB by default), so no list in it may grow without bound or every status
/// write would one day fail. On the traces a queue never had more than one at a time.
pub const MAX_GIVEN_UP_PER_QUEUE: usize = 8;

/// The most blockers remembered per given-up hold; past it the largest are kept (they keep a
/// new hold away from most of the capacity that blocked the old one). On the traces a given-up
/// hold never had more than 32.
pub const MAX_BLOCKERS_PER_GIVEN_UP: usize = 128;

/// A hold made by the last cycle.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KeptHold {
    /// `PendingWorkload::uid` of the held workload.
    pub workload: String,
    /// The name of the held workload's queue.
    pub queue: String,
    /// The names of the nodes held for it, in the order it prefers them.
    pub nodes: Vec<String>,
    /// What the hold had cost by `at`, and what of it stood idle or lent then.
    pub cost: HoldCost,
    /// When that cycle ran, on the snapshot's clock.
    pub at: f64,
}

/// The state one cycle leaves the next.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CycleMemory {
    holds: Vec<KeptHold>,
    /// Running workload released as backfill → the held workload whose capacity it took.
    backfill: BTreeMap<String, String>,
    /// Per queue: when a workload was last evicted to make room for it.
    last_preemption_at: BTreeMap<String, f64>,
    /// Per queue: when it last lost a workload to preemption (not counting backfill leaving).
    last_evicted_at: BTreeMap<String, f64>,
    /// One entry per pod evicted, oldest first: when, and the queue that lost it.
    recent_evictions: VecDeque<(f64, String)>,
    /// Workloads whose hold was given up → their queue, what blocked the drain and when, and
    /// what holds given up after the first spent: kept while the workload waits, each blocker
    /// while it runs (within the bounds above).
    given_up: BTreeMap<String, GivenUpEntry>,
}

/// A hold given up, as remembered.
#[derive(Debug, Clone, PartialEq, Default)]
struct GivenUpEntry {
    queue: String,
    blockers: Vec<String>,
    /// When it was last given up, on the snapshot's clock.
    at: f64,
    /// GPU-seconds its holds given up after the first spent of their idle budgets.
    spent_gpu_s: f64,
    /// When its first hold was given up.
    first_at: f64,
}

/// One queue's part of a [`CycleMemory`]: what a controller stores with the queue so that the
/// next leader carries on where the last one stopped.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueueMemory {
    /// Holds for the queue's workloads, each with the backfill standing in it.
    pub holds: Vec<StoredHold>,
    /// When a workload was last evicted to make room for one of the queue's.
    pub last_preemption_at: Option<f64>,
    /// When the queue last lost a workload to preemption.
    pub last_evicted_at: Option<f64>,
    /// When each of the queue's pods evicted within the last [`PREEMPTION_WINDOW_S`] went,
    /// oldest first: the hourly cap counts them whichever queue they were evicted for.
    pub evicted_at: Vec<f64>,
    /// The queue's workloads whose last hold was given up, with what blocked it.
    pub given_up: Vec<StoredGivenUp>,
}

/// A hold given up, with when.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoredGivenUp {
    pub hold: GivenUpHold,
    /// When it was given up, on the snapshot's clock (seconds since the Unix epoch in a
    /// controller).
    pub at: f64,
}

/// A hold, with the running workloads released as backfill into it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoredHold {
    pub hold: KeptHold,
    /// UIDs of the running workloads (or lone pods) released as backfill into the hold.
    pub backfill: Vec<String>,
}

impl CycleMemory {
    /// A memory holding only `holds` (as a restarted controller or a replayed case sees them).
    pub fn with_holds(holds: Vec<KeptHold>) -> Self {
        Self {
            holds,
            ..Self::default()
        }
    }

    /// The holds the last cycle made.
    pub fn holds(&self) -> &[KeptHold] {
        &self.holds
    }

    /// `queue`'s part of the memory: its holds with their backfill, its preemption times and
    /// its pods evicted within the last hour.
    pub fn of_queue(&self, queue: &str) -> QueueMemory {
        QueueMemory {
            holds: self
                .holds
                .iter()
                .filter(|h| h.queue == queue)
                .map(|hold| StoredHold {
                    hold: hold.clone(),
                    backfill: self
                        .backfill
                        .iter()
                        .filter(|(_, holder)| **holder == hold.workload)
                        .map(|(workload, _)| workload.clone())
                        .collect(),
                })
                .collect(),
            last_preemption_at: self.last_preemption_at.get(queue).copied(),
            last_evicted_at: self.last_evicted_at.get(queue).copied(),
            evicted_at: self
                .recent_evictions
                .iter()
                .filter(|(_, victim)| victim == queue)
                .map(|&(at, _)| at)
                .collect(),
            given_up: self
                .given_up
                .iter()
                .filter(|(_, entry)| entry.queue == queue)
                .map(|(workload, entry)| StoredGivenUp {
                    hold: GivenUpHold {
                        workload: workload.clone(),
                        blockers: entry.blockers.clone(),
                        spent_gpu_s: entry.spent_gpu_s,
                        first_given_up_at: entry.first_at,
                    },
                    at: entry.at,
                })
                .collect(),
        }
    }

    /// The memory the queues' stored parts make up, each part keyed by its queue's name (which
    /// wins over the name a stored hold carries). Evictions are merged in time order.
    pub fn restore(parts: impl IntoIterator<Item = (String, QueueMemory)>) -> Self {
        let mut memory = Self::default();
        let mut evictions = Vec::new();
        for (queue, part) in parts {
            for StoredHold { mut hold, backfill } in part.holds {
                hold.queue.clone_from(&queue);
                for workload in backfill {
                    memory.backfill.insert(workload, hold.workload.clone());
                }
                memory.holds.push(hold);
            }
            if let Some(at) = part.last_preemption_at {
                memory.last_preemption_at.insert(queue.clone(), at);
            }
            if let Some(at) = part.last_evicted_at {
                memory.last_evicted_at.insert(queue.clone(), at);
            }
            evictions.extend(part.evicted_at.into_iter().map(|at| (at, queue.clone())));
            for StoredGivenUp { hold, at } in part.given_up {
                let entry = GivenUpEntry {
                    queue: queue.clone(),
                    blockers: hold.blockers,
                    at,
                    spent_gpu_s: hold.spent_gpu_s,
                    first_at: hold.first_given_up_at,
                };
                memory.given_up.insert(hold.workload, entry);
            }
        }
        evictions.sort_by(|a, b| a.0.total_cmp(&b.0));
        memory.recent_evictions = evictions.into();
        // A part stored by an older build, or edited by hand, may exceed the bounds.
        memory.bound_given_up(|_| 0.0);
        memory
    }

    /// Writes what earlier cycles left into `snapshot`: each queue's preemption times, the
    /// evictions of the last hour, the holds to keep (on the nodes the snapshot still has) and
    /// the backfill that stands in them.
    pub fn recall(&self, snapshot: &mut Snapshot) {
        let since = snapshot.now - PREEMPTION_WINDOW_S;
        snapshot.recent_preemptions.clear();
        snapshot.recent_preemptions.extend(
            self.recent_evictions
                .iter()
                .map(|&(at, _)| at)
                .filter(|&t| t > since),
        );
        for queue in &mut snapshot.queues {
            queue.last_preemption_at = self.last_preemption_at.get(&queue.name).copied();
            queue.last_evicted_at = self.last_evicted_at.get(&queue.name).copied();
        }
        snapshot.previous_holds = if self.holds.is_empty() {
            Vec::new()
        } else {
            // Built every cycle that keeps a hold, over every node, only to be asked for the
            // held nodes' names: foldhash, as for the other name sets here.
            let node_index: foldhash::HashMap<&str, NodeId> = snapshot
                .nodes
                .iter_enumerated()
                .map(|(i, n)| (n.name.as_str(), i))
                .collect();
            self.holds
                .iter()
                .map(|hold| PreviousHold {
                    workload: hold.workload.clone(),
                    nodes: hold
                        .nodes
                        .iter()
                        .filter_map(|n| node_index.get(n.as_str()).copied())
                        .collect(),
                    cost: hold.cost,
                    at: hold.at,
                })
                .collect()
        };
        snapshot.backfill.clear();
        snapshot.backfill.extend(self.backfill.keys().cloned());
        snapshot.given_up_holds.clear();
        snapshot
            .given_up_holds
            .extend(self.given_up.iter().map(|(workload, entry)| GivenUpHold {
                workload: workload.clone(),
                blockers: entry.blockers.clone(),
                spent_gpu_s: entry.spent_gpu_s,
                first_given_up_at: entry.first_at,
            }));
    }

    /// Keeps what `decisions`, made on `snapshot`, leave for the next cycle: its holds, and the
    /// backfill that runs in them. Backfill whose hold ended, or which no longer runs, is
    /// forgotten: it is ordinary work from then on.
    pub fn remember(&mut self, snapshot: &Snapshot, decisions: &Decisions) {
        self.holds = decisions
            .holds
            .iter()
            .map(|h| KeptHold {
                workload: snapshot.pending[h.workload].uid.clone(),
                queue: snapshot.queues[snapshot.pending[h.workload].queue]
                    .name
                    .clone(),
                nodes: h
                    .nodes
                    .iter()
                    .map(|(n, _)| snapshot.nodes[*n].name.clone())
                    .collect(),
                cost: h.cost,
                at: snapshot.now,
            })
            .collect();
        // What still runs, by workload: backfill and given-up holds' blockers are forgotten
        // once they no longer do. Built only when either has anything to forget. These sets,
        // built every cycle over every running pod and waiting workload, are only asked whether
        // they hold a name: foldhash (as `group_running` uses) costs a fraction of SipHash.
        let running: foldhash::HashSet<&str> = if self.backfill.is_empty()
            && self.given_up.is_empty()
            && decisions.given_up.is_empty()
        {
            foldhash::HashSet::default()
        } else {
            snapshot
                .running
                .iter()
                .map(RunningPod::workload_id)
                .collect()
        };
        if !self.backfill.is_empty() {
            let held: foldhash::HashSet<&str> =
                self.holds.iter().map(|h| h.workload.as_str()).collect();
            self.backfill.retain(|workload, holder| {
                held.contains(holder.as_str()) && running.contains(workload.as_str())
            });
        }
        for release in &decisions.releases {
            if let ReleaseReason::Backfill { for_workload, .. } = release.reason {
                self.backfill.insert(
                    snapshot.pending[release.workload].uid.clone(),
                    snapshot.pending[for_workload].uid.clone(),
                );
            }
        }
        self.remember_given_up(snapshot, decisions, &running);
        self.forget_before(snapshot.now);
    }

    /// Keeps each workload's give-up (when its first hold was given up, what later ones spent)
    /// while it still waits (not released this cycle), and each blocker of its last one for as
    /// long as it runs, within [`MAX_GIVEN_UP_PER_QUEUE`] and [`MAX_BLOCKERS_PER_GIVEN_UP`]. A
    /// first give-up with no blocker and nothing spent leaves nothing to remember.
    fn remember_given_up(
        &mut self,
        snapshot: &Snapshot,
        decisions: &Decisions,
        running: &foldhash::HashSet<&str>,
    ) {
        if self.given_up.is_empty() && decisions.given_up.is_empty() {
            return;
        }
        let released: foldhash::HashSet<&str> = decisions
            .releases
            .iter()
            .map(|r| snapshot.pending[r.workload].uid.as_str())
            .collect();
        // Sized up front: filtered, the names give no size hint, and the set would grow while
        // filled.
        let mut waiting: foldhash::HashSet<&str> =
            foldhash::HashSet::with_capacity_and_hasher(snapshot.pending.len(), Default::default());
        waiting.extend(
            snapshot
                .pending
                .iter()
                .map(|p| p.uid.as_str())
                .filter(|uid| !released.contains(uid)),
        );
        for given_up in &decisions.given_up {
            let spent = crate::units::non_negative(given_up.spent_gpu_s);
            if given_up.blockers.is_empty() && spent <= 0.0 {
                continue;
            }
            let pending = &snapshot.pending[given_up.workload];
            let entry = match self.given_up.entry(pending.uid.clone()) {
                std::collections::btree_map::Entry::Occupied(o) => {
                    let entry = o.into_mut();
                    entry.spent_gpu_s += spent;
                    entry
                }
                std::collections::btree_map::Entry::Vacant(v) => v.insert(GivenUpEntry {
                    first_at: snapshot.now,
                    ..GivenUpEntry::default()
                }),
            };
            entry.queue = snapshot.queues[pending.queue].name.clone();
            // The latest give-up says what stands in the way now; what blocked an earlier one
            // on other nodes no longer keeps the workload from them.
            entry.blockers.clone_from(&given_up.blockers);
            entry.at = snapshot.now;
        }
        self.given_up.retain(|workload, entry| {
            entry.blockers.retain(|b| running.contains(b.as_str()));
            waiting.contains(workload.as_str())
        });
        if self.exceeds_given_up_bounds() {
            let mut size: HashMap<&str, f64> = HashMap::new();
            for pod in &snapshot.running {
                *size.entry(pod.workload_id()).or_default() +=
                    snapshot.gpu_equivalents(&pod.requests);
            }
            self.bound_given_up(|blocker| size.get(blocker).copied().unwrap_or(0.0));
        }
    }

    fn exceeds_given_up_bounds(&self) -> bool {
        let mut per_queue: HashMap<&str, usize> = HashMap::new();
        self.given_up.values().any(|entry| {
            let count = per_queue.entry(entry.queue.as_str()).or_default();
            *count += 1;
            *count > MAX_GIVEN_UP_PER_QUEUE || entry.blockers.len() > MAX_BLOCKERS_PER_GIVEN_UP
        })
    }

    /// Forgets the least recently given-up holds of each queue past [`MAX_GIVEN_UP_PER_QUEUE`],
    /// and the smallest blockers (by `size`, GPU-equivalents running) of each past
    /// [`MAX_BLOCKERS_PER_GIVEN_UP`]. Ties go by name, so the result does not depend on order.
    fn bound_given_up(&mut self, size: impl Fn(&str) -> f64) {
        for entry in self.given_up.values_mut() {
            if entry.blockers.len() > MAX_BLOCKERS_PER_GIVEN_UP {
                entry
                    .blockers
                    .sort_by(|a, b| size(b).total_cmp(&size(a)).then_with(|| a.cmp(b)));
                entry.blockers.truncate(MAX_BLOCKERS_PER_GIVEN_UP);
                entry.blockers.sort_unstable();
            }
        }
        let mut by_queue: HashMap<&str, Vec<(f64, &str)>> = HashMap::new();
        for (workload, entry) in &self.given_up {
            by_queue
                .entry(entry.queue.as_str())
                .or_default()
                .push((entry.at, workload.as_str()));
        }
        let mut forget: Vec<String> = Vec::new();
        for mut entries in by_queue.into_values() {
            if entries.len() > MAX_GIVEN_UP_PER_QUEUE {
                entries.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
                forget.extend(
                    entries[MAX_GIVEN_UP_PER_QUEUE..]
                        .iter()
                        .map(|(_, w)| (*w).to_string()),
                );
            }
        }
        for workload in forget {
            self.given_up.remove(&workload);
        }
    }

    /// Records an eviction that went through at `now`: `pods` pods of `victim_queue`, evicted
    /// for `preemptor_queue`. The victim's queue cools down unless the pods were backfill
    /// leaving a hold, which is their condition of running, not a loss, or its own work,
    /// evicted to make room for its own held workload: cooling it would drop that very hold.
    pub fn evicted(
        &mut self,
        now: f64,
        pods: usize,
        preemptor_queue: &str,
        victim_queue: &str,
        backfill: bool,
    ) {
        self.recent_evictions
            .extend(std::iter::repeat_n((now, victim_queue.to_string()), pods));
        self.last_preemption_at
            .insert(preemptor_queue.to_string(), now);
        if !backfill && victim_queue != preemptor_queue {
            self.last_evicted_at.insert(victim_queue.to_string(), now);
        }
    }

    /// Drops evictions that no longer count against the hourly cap.
    fn forget_before(&mut self, now: f64) {
        while self
            .recent_evictions
            .front()
            .is_some_and(|&(t, _)| t <= now - PREEMPTION_WINDOW_S)
        {
            self.recent_evictions.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::GivenUp;
    use crate::admission::{DecideOptions, decide};
    use crate::fixtures::{pending, running};
    use crate::snapshot::*;
    use std::collections::HashSet;

    fn snapshot(now: f64) -> Snapshot {
        Snapshot {
            now,
            resources: vec![ResourceKind {
                name: "nvidia.com/gpu".into(),
                gpu_equivalents: 1.0,
            }],
            pools: vec![Pool {
                name: "default".into(),
            }]
            .into(),
            nodes: ["a", "b"]
                .iter()
                .map(|name| Node {
                    name: name.to_string(),
                    pool: PoolId::new(0),
                    allocatable: vec![8],
                    free: vec![8],
                })
                .collect(),
            queues: ["q", "r"]
                .iter()
                .map(|name| QueueState::neutral(name, 0))
                .collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn evictions_count_for_an_hour_and_cool_down_the_queues_involved() {
        let mut memory = CycleMemory::default();
        memory.evicted(100.0, 2, "q", "r", false);
        memory.evicted(200.0, 1, "r", "q", true);
        let mut s = snapshot(300.0);
        memory.recall(&mut s);
        assert_eq!(s.recent_preemptions, vec![100.0, 100.0, 200.0]);
        assert_eq!(s.queues[QueueId::new(0)].last_preemption_at, Some(100.0));
        assert_eq!(s.queues[QueueId::new(1)].last_evicted_at, Some(100.0));
        assert_eq!(s.queues[QueueId::new(1)].last_preemption_at, Some(200.0));
        // Backfill leaving is not a loss: q does not cool down for it.
        assert_eq!(s.queues[QueueId::new(0)].last_evicted_at, None);
        // An hour on, the first two no longer count; the queues' times stay.
        let mut later = snapshot(3700.0);
        memory.recall(&mut later);
        assert_eq!(later.recent_preemptions, vec![200.0]);
        memory.remember(&later, &Decisions::default());
        assert_eq!(
            memory.recent_evictions,
            VecDeque::from([(200.0, "q".to_string())])
        );
        assert_eq!(later.queues[QueueId::new(1)].last_evicted_at, Some(100.0));
    }

    #[test]
    fn a_queue_evicting_its_own_work_does_not_cool_down_as_a_victim() {
        // q evicts its own work for its held workload: cooling q would drop that hold.
        let mut memory = CycleMemory::default();
        memory.evicted(100.0, 1, "q", "q", false);
        let mut s = snapshot(200.0);
        memory.recall(&mut s);
        assert_eq!(s.recent_preemptions, vec![100.0]);
        assert_eq!(s.queues[QueueId::new(0)].last_preemption_at, Some(100.0));
        assert_eq!(s.queues[QueueId::new(0)].last_evicted_at, None);
    }

    #[test]
    fn a_hold_is_recalled_by_node_name_whatever_the_nodes_order() {
        const COST: HoldCost = HoldCost {
            idle_gpu_s: 50.0,
            idle_gpu_equivalents: 2.0,
            lent_gpu_equivalents: 1.0,
            unwanted_idle_gpu_s: 20.0,
            unwanted_idle_gpu_equivalents: 1.5,
        };
        let memory = CycleMemory::with_holds(vec![KeptHold {
            workload: "big".into(),
            queue: "q".into(),
            nodes: vec!["b".into(), "gone".into()],
            cost: COST,
            at: 10.0,
        }]);
        let mut s = snapshot(20.0);
        s.nodes.as_mut_slice().reverse();
        memory.recall(&mut s);
        assert_eq!(
            s.previous_holds,
            vec![PreviousHold {
                workload: "big".into(),
                nodes: vec![NodeId::new(0)],
                cost: COST,
                at: 10.0,
            }]
        );
    }

    #[test]
    fn holds_and_their_backfill_are_kept_while_they_stand() {
        // q's gang of two 8-GPU pods waits for both nodes (its guarantee earns it a hold); r runs 1 GPU on
        // each. What decide holds, the memory keeps by name, with the cycle's time.
        let mut s = snapshot(50.0);
        s.queues[QueueId::new(0)].guaranteed = 16.0;
        s.nodes[NodeId::new(0)].free = vec![7];
        s.nodes[NodeId::new(1)].free = vec![7];
        s.running = vec![running("r-a", 1, 0, 1, 0.0), running("r-b", 1, 1, 1, 0.0)];
        s.pending = vec![pending("big", 0, &[8, 8])];
        let decisions = decide(&s, &DecideOptions::default());
        assert_eq!(decisions.holds.len(), 1, "{decisions:?}");
        let mut memory = CycleMemory::default();
        memory.remember(&s, &decisions);
        assert_eq!(memory.holds().len(), 1);
        assert_eq!(memory.holds()[0].workload, "big");
        assert_eq!(memory.holds()[0].at, 50.0);
        let mut named = memory.holds()[0].nodes.clone();
        named.sort();
        assert_eq!(named, vec!["a".to_string(), "b".to_string()]);

        // Backfill in the hold is remembered while it runs and the hold stands...
        memory.backfill.insert("fill".into(), "big".into());
        s.running.push(running("fill", 1, 0, 2, 0.0));
        memory.remember(&s, &decisions);
        let mut next = snapshot(60.0);
        memory.recall(&mut next);
        assert_eq!(next.backfill, vec!["fill".to_string()]);
        // ...and forgotten once it stops running, or once the hold ends.
        s.running.pop();
        memory.remember(&s, &decisions);
        assert!(memory.backfill.is_empty());
        memory.backfill.insert("fill".into(), "big".into());
        s.running.push(running("fill", 1, 0, 2, 0.0));
        memory.remember(&s, &Decisions::default());
        assert!(memory.backfill.is_empty() && memory.holds().is_empty());
    }

    #[test]
    fn each_queues_part_restores_the_whole_memory() {
        // q holds two nodes for its gang "big", with r's "fill" released into the hold; r lost
        // two pods to q at 100 and q lost one backfill pod at 200.
        let mut s = snapshot(50.0);
        s.queues[QueueId::new(0)].guaranteed = 16.0;
        s.nodes[NodeId::new(0)].free = vec![7];
        s.nodes[NodeId::new(1)].free = vec![7];
        s.running = vec![
            running("r-a", 1, 0, 1, 0.0),
            running("r-b", 1, 1, 1, 0.0),
            running("fill", 1, 0, 2, 0.0),
        ];
        s.pending = vec![pending("big", 0, &[8, 8])];
        let decisions = decide(&s, &DecideOptions::default());
        let mut memory = CycleMemory::default();
        memory.remember(&s, &decisions);
        memory.backfill.insert("fill".into(), "big".into());
        memory.evicted(100.0, 2, "q", "r", false);
        memory.evicted(200.0, 1, "r", "q", true);
        memory.given_up.insert(
            "later".into(),
            GivenUpEntry {
                queue: "q".into(),
                blockers: vec!["r-a".into()],
                at: 40.0,
                spent_gpu_s: 900.0,
                first_at: 20.0,
            },
        );

        let q = memory.of_queue("q");
        assert_eq!(q.given_up.len(), 1);
        assert_eq!(q.holds.len(), 1);
        assert_eq!(q.holds[0].hold.queue, "q");
        assert_eq!(q.holds[0].backfill, vec!["fill".to_string()]);
        assert_eq!(q.last_preemption_at, Some(100.0));
        assert_eq!(q.evicted_at, vec![200.0]);
        let r = memory.of_queue("r");
        assert!(r.holds.is_empty() && r.given_up.is_empty());
        assert_eq!(r.last_evicted_at, Some(100.0));
        assert_eq!(r.evicted_at, vec![100.0, 100.0]);

        // Restored in either order, it is the memory it was, and recalls the same snapshot.
        let restored = CycleMemory::restore([("r".to_string(), r), ("q".to_string(), q)]);
        assert_eq!(restored, memory);
        let (mut before, mut after) = (snapshot(300.0), snapshot(300.0));
        memory.recall(&mut before);
        restored.recall(&mut after);
        assert_eq!(before, after);
        assert_eq!(after.recent_preemptions, vec![100.0, 100.0, 200.0]);
        assert_eq!(after.backfill, vec!["fill".to_string()]);
        assert_eq!(after.given_up_holds[0].blockers, vec!["r-a".to_string()]);
    }

    #[test]
    fn a_given_up_hold_is_remembered_while_its_workload_waits_and_a_blocker_runs() {
        let mut s = snapshot(50.0);
        s.running = vec![running("r-a", 1, 0, 1, 0.0), running("r-b", 1, 1, 1, 0.0)];
        s.pending = vec![pending("big", 0, &[8, 8])];
        let blocked = |blockers: &[&str]| Decisions {
            given_up: vec![GivenUp {
                workload: 0,
                blockers: blockers.iter().map(|b| b.to_string()).collect(),
                spent_gpu_s: 0.0,
            }],
            ..Decisions::default()
        };
        let mut memory = CycleMemory::default();
        memory.remember(&s, &blocked(&["r-a", "r-b"]));
        memory.recall(&mut s);
        assert_eq!(s.given_up_holds.len(), 1);
        // A later give-up says what blocks it now.
        memory.remember(&s, &blocked(&["r-b"]));
        assert_eq!(memory.of_queue("q").given_up[0].hold.blockers, vec!["r-b"]);
        // Its blockers are forgotten once none runs any more, the give-up itself (when it was,
        // what later ones spent) only...
        s.running.retain(|p| p.uid != "r-b");
        memory.remember(&s, &Decisions::default());
        let q = memory.of_queue("q");
        assert!(q.given_up.len() == 1 && q.given_up[0].hold.blockers.is_empty());
        memory.recall(&mut s);
        assert!(s.given_up_holds[0].blockers.is_empty());
        // ...or once the workload no longer waits.
        s.running.push(running("r-b", 1, 1, 1, 0.0));
        memory.remember(&s, &blocked(&["r-b"]));
        s.pending.clear();
        memory.remember(&s, &Decisions::default());
        memory.recall(&mut s);
        assert!(s.given_up_holds.is_empty());
        // A hold given up because its queue no longer earned it leaves nothing to plan around.
        s.pending = vec![pending("big", 0, &[8, 8])];
        memory.remember(&s, &blocked(&[]));
        assert!(memory.of_queue("q").given_up.is_empty());
    }

    #[test]
    fn holds_given_up_after_the_first_add_up_what_they_spent_from_when_the_first_was() {
        let mut s = snapshot(100.0);
        s.pending = vec![pending("big", 0, &[8, 8]), pending("other", 0, &[8])];
        let gave_up = |spent: f64| Decisions {
            given_up: vec![GivenUp {
                workload: 0,
                blockers: Vec::new(),
                spent_gpu_s: spent,
            }],
            ..Decisions::default()
        };
        let mut memory = CycleMemory::default();
        let recalled = |memory: &CycleMemory, s: &mut Snapshot| {
            memory.recall(s);
            s.given_up_holds
                .iter()
                .map(|g| (g.workload.clone(), g.spent_gpu_s, g.first_given_up_at))
                .collect::<Vec<_>>()
        };
        // The first give-up counts from now, and what it spent is not held against it.
        memory.remember(&s, &gave_up(7_200.0));
        assert_eq!(recalled(&memory, &mut s), vec![("big".into(), 0.0, 100.0)]);
        // Each later one adds what it spent; the first's time stands, through a restart too.
        s.now = 5_000.0;
        memory.remember(&s, &gave_up(3_600.0));
        s.now = 9_000.0;
        memory.remember(&s, &gave_up(1_800.0));
        memory = CycleMemory::restore([("q".to_string(), memory.of_queue("q"))]);
        assert_eq!(
            recalled(&memory, &mut s),
            vec![("big".into(), 5_400.0, 100.0)]
        );
        // Forgotten once the workload no longer waits.
        s.pending.remove(0);
        memory.remember(&s, &Decisions::default());
        assert!(recalled(&memory, &mut s).is_empty());
    }

    #[test]
    fn given_up_holds_are_remembered_within_bounds_most_recent_and_largest_first() {
        let mut s = snapshot(0.0);
        // Blockers: "r-000" … of 1 GPU, and one of 8 GPUs named last.
        let small = MAX_BLOCKERS_PER_GIVEN_UP + 5;
        s.running = (0..small)
            .map(|i| running(&format!("r-{i:03}"), 1, 0, 1, 0.0))
            .chain([running("r-zz-large", 1, 1, 8, 0.0)])
            .collect();
        let all_blockers: Vec<String> = s.running.iter().map(|p| p.uid.clone()).collect();
        let waiting = MAX_GIVEN_UP_PER_QUEUE + 3;
        s.pending = (0..waiting)
            .map(|i| pending(&format!("w-{i:02}"), 0, &[8]))
            .collect();
        let mut memory = CycleMemory::default();
        // One of q's workloads given up per cycle, ten seconds apart.
        for i in 0..waiting {
            s.now = 10.0 * i as f64;
            let decisions = Decisions {
                given_up: vec![GivenUp {
                    workload: i,
                    blockers: all_blockers.clone(),
                    spent_gpu_s: 0.0,
                }],
                ..Decisions::default()
            };
            memory.remember(&s, &decisions);
        }
        let q = memory.of_queue("q");
        assert_eq!(q.given_up.len(), MAX_GIVEN_UP_PER_QUEUE);
        // The least recently given up are forgotten.
        let mut kept: Vec<&str> = q
            .given_up
            .iter()
            .map(|g| g.hold.workload.as_str())
            .collect();
        kept.sort_unstable();
        let expected: Vec<String> = (waiting - MAX_GIVEN_UP_PER_QUEUE..waiting)
            .map(|i| format!("w-{i:02}"))
            .collect();
        assert_eq!(kept, expected);
        for g in &q.given_up {
            assert_eq!(g.hold.blockers.len(), MAX_BLOCKERS_PER_GIVEN_UP);
            // The largest blocker is kept although its name sorts last.
            assert!(g.hold.blockers.iter().any(|b| b == "r-zz-large"));
            assert!(g.hold.blockers.is_sorted());
        }
        // A stored part over the bounds (an older build's, or edited) is brought within them.
        let mut over = q.clone();
        over.given_up.extend((0..5).map(|i| StoredGivenUp {
            hold: GivenUpHold {
                workload: format!("old-{i}"),
                blockers: all_blockers.clone(),
                ..GivenUpHold::default()
            },
            at: 0.0,
        }));
        let restored = CycleMemory::restore([("q".to_string(), over)]).of_queue("q");
        assert_eq!(restored.given_up.len(), MAX_GIVEN_UP_PER_QUEUE);
        assert!(
            restored
                .given_up
                .iter()
                .all(|g| !g.hold.workload.starts_with("old-")
                    && g.hold.blockers.len() <= MAX_BLOCKERS_PER_GIVEN_UP)
        );
    }

    /// Removes the items at `indices` (those in range) from `items`, each known by `uid`.
    fn remove_at<T>(items: &mut Vec<T>, indices: &[usize], uid: impl Fn(&T) -> &String) {
        let gone: HashSet<String> = indices
            .iter()
            .filter_map(|&i| items.get(i).map(|item| uid(item).clone()))
            .collect();
        items.retain(|item| !gone.contains(uid(item)));
    }

    proptest::proptest! {
        /// Whatever holds are given up, with however many blockers, over however many cycles,
        /// each queue's stored part stays within the bounds, and keeps only workloads that still
        /// wait with blockers that still run.
        #[test]
        fn given_up_holds_stay_within_their_bounds(
            cycles in proptest::collection::vec(
                (
                    // Given up this cycle: (workload, its blockers, as running pod indices).
                    proptest::collection::vec(
                        (0usize..24, proptest::collection::vec(0usize..400, 0..300)),
                        0..4,
                    ),
                    // Pods that end this cycle, and workloads that start.
                    proptest::collection::vec(0usize..400, 0..40),
                    proptest::collection::vec(0usize..24, 0..3),
                ),
                1..12,
            ),
        ) {
            let mut s = snapshot(0.0);
            s.running = (0..400)
                .map(|i| running(&format!("r-{i:03}"), 1, i % 2, 1 + (i % 3) as u32, 0.0))
                .collect();
            // Workloads 0–11 are q's, 12–23 r's.
            s.pending = (0..24)
                .map(|i| pending(&format!("w-{i:02}"), usize::from(i >= 12), &[8]))
                .collect();
            let mut memory = CycleMemory::default();
            for (t, (given_up, ended, started)) in cycles.into_iter().enumerate() {
                s.now = 10.0 * t as f64;
                let decisions = Decisions {
                    given_up: given_up
                        .iter()
                        .filter(|(w, _)| *w < s.pending.len())
                        .map(|(w, blockers)| GivenUp {
                            workload: *w,
                            blockers: blockers
                                .iter()
                                .filter(|&&b| b < s.running.len())
                                .map(|&b| s.running[b].uid.clone())
                                .collect(),
                            spent_gpu_s: 3_600.0,
                        })
                        .collect(),
                    ..Decisions::default()
                };
                memory.remember(&s, &decisions);
                for part in ["q", "r"].map(|queue| memory.of_queue(queue)) {
                    proptest::prop_assert!(part.given_up.len() <= MAX_GIVEN_UP_PER_QUEUE);
                    for g in &part.given_up {
                        proptest::prop_assert!(g.hold.blockers.len() <= MAX_BLOCKERS_PER_GIVEN_UP);
                        proptest::prop_assert!(s.pending.iter().any(|p| p.uid == g.hold.workload));
                        for b in &g.hold.blockers {
                            proptest::prop_assert!(s.running.iter().any(|p| &p.uid == b));
                        }
                    }
                }
                remove_at(&mut s.running, &ended, |p| &p.uid);
                remove_at(&mut s.pending, &started, |p| &p.uid);
            }
        }
    }
}
