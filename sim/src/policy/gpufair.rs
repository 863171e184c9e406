//! gpufair and its ablations: each cycle hands `gpufair_core::admission::decide` a snapshot of
//! the simulated cluster and applies what it returns. The snapshot is kept up to date event by
//! event instead of being rebuilt, and the ledger is fed the exact piecewise-constant allocation.

use std::collections::{BTreeMap, BTreeSet};

use gpufair_core::admission::{CycleMemory, DecideOptions, PreemptionReason, decide};
use gpufair_core::labels::{Tier, Urgency, UserTier};
use gpufair_core::ledger::{QueueLedger, UsageSample};
use gpufair_core::params::{FairShareParams, PreemptionParams};
use gpufair_core::snapshot::{
    LedgerShares, Node, NodeId, PendingWorkload, PodRequest, Pool, PoolId, QueueId, QueueState,
    ResourceKind, RunningPod, Snapshot,
};
use gpufair_core::units::WHOLE_GPU_RESOURCE;

use super::{Actions, EvictionCause, HoldCost, Policy};
use crate::engine::world::{JobId, World};
use crate::metrics::entitlement::entitlements;
use crate::scenario::{PolicyName, Scenario};

/// A resource no node has: a stand-in workload asking for one never fits anywhere.
const UNPLACEABLE_RESOURCE: &str = "gpufair-sim/unplaceable";
/// The snapshot's index of the scenario's resource `r`: whole GPUs first, then the stand-ins'
/// resource, then the slices.
fn snapshot_resource(r: usize) -> usize {
    if r == 0 { 0 } else { r + 1 }
}

/// A pod's request vector: `units` of the scenario's resource `r` (just `[units]` for whole
/// GPUs, as before slices existed).
fn request(r: usize, units: u32) -> Vec<u32> {
    let mut requests = vec![0; snapshot_resource(r) + 1];
    requests[snapshot_resource(r)] = units;
    requests
}

/// Which mechanisms are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    pub ledger: bool,
    pub hold: bool,
    pub preemption: bool,
}

impl Variant {
    pub fn of(name: PolicyName) -> Self {
        match name {
            PolicyName::Gpufair => Self {
                ledger: true,
                hold: true,
                preemption: true,
            },
            PolicyName::GpufairNoHold => Self {
                ledger: true,
                hold: false,
                preemption: false,
            },
            PolicyName::StatelessHold => Self {
                ledger: false,
                hold: true,
                preemption: true,
            },
            _ => Self {
                ledger: false,
                hold: false,
                preemption: false,
            },
        }
    }
}

pub struct GpufairPolicy {
    options: DecideOptions,
    snapshot: Snapshot,
    /// Parallel to `snapshot.pending`: the job of each workload (`None` for a stand-in).
    pending_job: Vec<Option<JobId>>,
    /// Per job while it waits: its workload as the snapshot shows it.
    workloads: Vec<Option<PendingWorkload>>,
    /// Per queue, waiting jobs in release order: (time queued, job).
    waiting: Vec<BTreeSet<(u64, JobId)>>,
    /// Parallel to `snapshot.running`: the job and pod index of each pod.
    running_pod: Vec<(JobId, u32)>,
    /// Per job: the index in `snapshot.running` of each of its pods while it runs.
    running_pos: Vec<Vec<u32>>,
    variant: Variant,
    ledgers: Vec<QueueLedger>,
    pool_capacity: Vec<f64>,
    /// The instantaneous K = 0 entitlement the ledger integrates (what `QueueOutcome::entitled`
    /// reports), recomputed with core's `divide` whenever demand changes, so the ledger sees it
    /// change at the exact instant and not only at the next cycle.
    entitled: Vec<f64>,
    entitled_version: Option<u64>,
    /// Per pool, how many pending pods of each size there are (to skip cycles that cannot
    /// release anything).
    pending_pod_sizes: Vec<BTreeMap<u32, usize>>,
    weights: Vec<f64>,
    /// Holds, backfill and preemption history from one cycle to the next, as the controller
    /// keeps them.
    memory: CycleMemory,
    last_recorded: f64,
    /// Open holds by held workload: the job and the GPU-seconds it has left idle after warm-up.
    episodes: BTreeMap<String, (JobId, f64)>,
    warmup_s: f64,
    cost: HoldCost,
    /// Per queue: the stand-in for its waiting workloads left out of the snapshot (see
    /// `fill_pending`), built once; each cycle sets only how many GPUs it stands for.
    stand_ins: Vec<PendingWorkload>,
    /// `fill_pending`'s per-queue scratch, kept between cycles so that it allocates once:
    /// the workloads it looked at, and how many of each size it kept.
    considered: Vec<(JobId, bool)>,
    kept_of_size: Vec<u32>,
}

fn workload_uid(job: JobId) -> String {
    // Zero-padded so UID order is submission order.
    format!("job-{job:07}")
}

impl GpufairPolicy {
    pub fn new(scenario: &Scenario, variant: Variant) -> Self {
        let fairshare: FairShareParams = if variant.ledger {
            scenario.fairshare.clone()
        } else {
            scenario.fairshare.stateless()
        };
        let preemption = PreemptionParams {
            enabled: variant.preemption && scenario.preemption.enabled,
            ..scenario.preemption.clone()
        };
        // Without the ledger, every pool's parameters lose the time-aware term, but a pool
        // whose time-aware sharing is switched off stays off: there gpufair is stateless fair
        // share without holds, and `stateless-hold` (gpufair less the ledger) must be too, or
        // it would compare holds in that pool against none.
        let pool_fairshare = if variant.ledger {
            scenario.pool_fairshare.clone()
        } else {
            scenario
                .pool_fairshare
                .iter()
                .map(|(pool, params)| (pool.clone(), params.stateless()))
                .collect()
        };
        let options = DecideOptions {
            fairshare,
            pool_fairshare,
            preemption,
            hold_capacity: variant.hold,
            score: scenario.release_score.clone(),
        };
        let mut nodes = Vec::new();
        for (pool, spec) in scenario.pools.iter().enumerate() {
            for (i, capacity) in spec.node_sizes().into_iter().enumerate() {
                let mut allocatable = vec![capacity];
                if scenario.has_slices() {
                    allocatable.resize(scenario.resources.len() + 1, 0);
                    for &(r, units) in &spec.slices {
                        allocatable[snapshot_resource(r)] = units;
                    }
                }
                nodes.push(Node {
                    name: format!("{}-node-{i:04}", spec.name),
                    pool: PoolId::new(pool),
                    free: allocatable.clone(),
                    allocatable,
                });
            }
        }
        let pool_capacity: Vec<f64> = scenario.pools.iter().map(|p| p.capacity).collect();
        let queues = scenario
            .queues
            .iter()
            .map(|q| QueueState {
                name: q.name.clone(),
                pool: PoolId::new(q.pool),
                weight: q.weight,
                guaranteed: q.guaranteed,
                limit: q.limit,
                min_run_time_s: q.min_run_time_s,
                shares: LedgerShares::NEUTRAL,
                last_preemption_at: None,
                last_evicted_at: None,
            })
            .collect();
        let ledgers = scenario
            .queues
            .iter()
            .map(|q| {
                QueueLedger::seeded(
                    0.0,
                    options.fairshare_of(&scenario.pools[q.pool].name),
                    pool_capacity[q.pool],
                    q.initial_usage,
                )
            })
            .collect();
        let mut resources = vec![
            ResourceKind {
                name: WHOLE_GPU_RESOURCE.to_string(),
                gpu_equivalents: 1.0,
            },
            ResourceKind {
                name: UNPLACEABLE_RESOURCE.to_string(),
                gpu_equivalents: 0.0,
            },
        ];
        resources.extend(scenario.resources[1..].iter().map(|r| ResourceKind {
            name: r.name.clone(),
            gpu_equivalents: r.gpu_equivalents,
        }));
        let snapshot = Snapshot {
            now: 0.0,
            resources,
            pools: scenario
                .pools
                .iter()
                .map(|p| Pool {
                    name: p.name.clone(),
                })
                .collect(),
            nodes: nodes.into(),
            queues,
            running: Vec::new(),
            pending: Vec::new(),
            recent_preemptions: Vec::new(),
            previous_holds: Vec::new(),
            refused_victims: Vec::new(),
            backfill: Vec::new(),
            given_up_holds: Vec::new(),
        };
        Self {
            options,
            snapshot,
            pending_job: Vec::new(),
            workloads: vec![None; scenario.jobs.len()],
            waiting: vec![BTreeSet::new(); scenario.queues.len()],
            running_pod: Vec::new(),
            running_pos: vec![Vec::new(); scenario.jobs.len()],
            ledgers,
            variant,
            pool_capacity,
            entitled: vec![0.0; scenario.queues.len()],
            entitled_version: None,
            pending_pod_sizes: vec![BTreeMap::new(); scenario.pools.len()],
            weights: scenario.queues.iter().map(|q| q.weight).collect(),
            memory: CycleMemory::default(),
            last_recorded: 0.0,
            episodes: BTreeMap::new(),
            warmup_s: scenario.warmup_s,
            cost: HoldCost::default(),
            stand_ins: (0..scenario.queues.len()).map(stand_in).collect(),
            considered: Vec::new(),
            kept_of_size: Vec::new(),
        }
    }

    /// Adds to each open hold what it left idle since the last cycle (after warm-up only), and
    /// to the cost what of that nothing waiting could use.
    fn accrue_idle(&mut self, now: f64) {
        for hold in &self.snapshot.previous_holds {
            let from = hold.at.max(self.warmup_s);
            if let Some((_, idle)) = self.episodes.get_mut(&hold.workload) {
                let since = (now - from).max(0.0);
                *idle += hold.cost.idle_gpu_equivalents * since;
                self.cost.unwanted_idle_gpu_seconds +=
                    hold.cost.unwanted_idle_gpu_equivalents * since;
            }
        }
    }

    /// Closes the holds that `held` no longer lists: paid off when their job has started (or
    /// starts now, in `starting`), abandoned otherwise; opens the new ones.
    fn close_holds(&mut self, world: &World<'_>, held: &[(String, JobId)], starting: &[JobId]) {
        let ended: Vec<String> = self
            .episodes
            .keys()
            .filter(|uid| !held.iter().any(|(h, _)| h == *uid))
            .cloned()
            .collect();
        for uid in ended {
            let Some((job, idle)) = self.episodes.remove(&uid) else {
                continue;
            };
            self.cost.idle_gpu_seconds += idle;
            let started = starting.contains(&job)
                || world.jobs[job].phase == crate::engine::world::Phase::Running;
            if started {
                self.cost.paid_off_idle_gpu_seconds += idle;
            } else if world.now >= self.warmup_s {
                self.cost.abandoned += 1;
            }
        }
        for (uid, job) in held {
            if !self.episodes.contains_key(uid) {
                self.episodes.insert(uid.clone(), (*job, 0.0));
                if world.now >= self.warmup_s {
                    self.cost.holds += 1;
                }
            }
        }
    }

    fn add_pending(&mut self, world: &World<'_>, job: JobId) {
        let spec = world.spec(job);
        let uid = workload_uid(job);
        let pods = spec
            .pods
            .iter()
            .map(|&gpus| PodRequest {
                requests: request(spec.resource, gpus),
            })
            .collect();
        let sizes = &mut self.pending_pod_sizes[world.pool_of_queue(spec.queue)];
        for &gpus in &spec.pods {
            *sizes.entry(gpus).or_default() += 1;
        }
        let queued_at = world.jobs[job].queued_at;
        self.waiting[spec.queue].insert((queued_at.to_bits(), job));
        self.workloads[job] = Some(PendingWorkload {
            uid,
            queue: QueueId::new(spec.queue),
            tier: spec.tier(),
            deadline: spec.deadline_s,
            urgency: spec.urgency,
            user_tier: spec.user_tier,
            created_at: queued_at,
            min_member: spec.pods.len() as u32,
            pods,
        });
    }

    fn remove_pending(&mut self, world: &World<'_>, job: JobId) {
        let spec = world.spec(job);
        let sizes = &mut self.pending_pod_sizes[world.pool_of_queue(spec.queue)];
        for gpus in &spec.pods {
            decrement(sizes, *gpus);
        }
        if let Some(workload) = self.workloads[job].take() {
            self.waiting[spec.queue].remove(&(workload.created_at.to_bits(), job));
        }
    }

    /// Fills `snapshot.pending` with every waiting workload that can matter to this cycle's
    /// decisions, and one never-placeable stand-in per queue for the rest of its demand.
    ///
    /// Within a cycle free capacity only shrinks, so a workload matters only if it might be
    /// released (it could fit what is free now) or might become the held workload (the first of
    /// its queue that fails to fit, or, where its queue has not earned that one, the first later
    /// one its fair share covers). Kept, per queue in release order: single pods of a size `s`
    /// that fits some node's free GPUs, up to `⌊free/s⌋ + 1` of them (at most `⌊free/s⌋` can be
    /// released, so a later one can neither be released nor be the first to fail); gangs no
    /// larger than the free GPUs; and every workload that cannot fit (with nothing free at all,
    /// the first and each later one smaller than all before it); and, because a queue's
    /// turn depends on the size of its next workload, everything before the last of those. What
    /// is left out comes after all of them, cannot be released and cannot be held, and no other
    /// queue's turn depends on it; its GPUs stay in the queue's demand through the stand-in, which asks for a
    /// resource no node has (so it never fits, is never held and never preempts) and sorts last.
    /// The division, the releases, the hold and the preemptions are therefore those of the full
    /// list; only the per-workload wait reasons of the omitted workloads are not reported.
    fn fill_pending(&mut self, world: &World<'_>) {
        // Slots of the last cycle's list are overwritten in place (see `put_pending`) and the
        // rest cut off at the end: `filled` counts the slots written so far.
        let mut filled = 0;
        self.pending_job.clear();
        if world.scenario.has_slices() || world.scenario.labelled {
            // The bound below reasons about whole GPUs released in submission order: with
            // slices, or tiers and scores ordering a queue, every waiting workload is handed
            // over.
            for queue in 0..world.scenario.queues.len() {
                for &(_, job) in &self.waiting[queue] {
                    if let Some(workload) = &self.workloads[job] {
                        put_pending(&mut self.snapshot.pending, &mut filled, workload);
                        self.pending_job.push(Some(job));
                    }
                }
            }
            self.snapshot.pending.truncate(filled);
            return;
        }
        let pools = world.scenario.pools.len();
        let mut free_total = vec![0u32; pools];
        let mut max_free = vec![0u32; pools];
        for node in &self.snapshot.nodes {
            let pool = node.pool.get();
            free_total[pool] += node.free[0];
            max_free[pool] = max_free[pool].max(node.free[0]);
        }
        for queue in 0..world.scenario.queues.len() {
            let pool = world.pool_of_queue(queue);
            let (free, largest) = (free_total[pool], max_free[pool]);
            let kept_of_size = &mut self.kept_of_size;
            kept_of_size.clear();
            kept_of_size.resize(largest as usize + 1, 0);
            let mut kept_gpus = 0u64;
            // With nothing free: the smallest workload kept so far (see below).
            let mut smallest_kept = u32::MAX;
            let considered = &mut self.considered;
            considered.clear();
            for &(_, job) in &self.waiting[queue] {
                let spec = world.spec(job);
                let gpus = spec.gpus();
                if free == 0 {
                    // Nothing is free, so nothing is released and every workload is a misfit:
                    // only the first could be held for, or, where its queue has not earned it,
                    // the first later one its fair share covers (core's
                    // `earned_behind_unearned`), which is smaller than every workload between
                    // them: so the first of each size smaller than all before it is kept, and
                    // nothing after a workload of one GPU.
                    let keep = gpus < smallest_kept;
                    smallest_kept = smallest_kept.min(gpus);
                    considered.push((job, keep));
                    if smallest_kept <= 1 {
                        break;
                    }
                    continue;
                }
                let keep = if spec.pods.len() == 1 && gpus <= largest {
                    let kept = &mut kept_of_size[gpus as usize];
                    *kept += 1;
                    *kept <= free / gpus + 1
                } else if spec.pods.len() > 1 && gpus <= free {
                    true
                } else {
                    // Every workload that cannot fit what is free is kept: with holds for
                    // queues below their guarantee (and backfill in held capacity, where it is
                    // on), the one held is not always the queue's first misfit.
                    true
                };
                considered.push((job, keep));
            }
            // Keep a prefix of the queue, up to its last workload that matters: a queue's turn
            // depends on the size of its next workload, so nothing may be left out before one
            // that is kept.
            let last_kept = considered.iter().rposition(|(_, keep)| *keep);
            for &(job, _) in considered.iter().take(last_kept.map_or(0, |i| i + 1)) {
                if let Some(workload) = &self.workloads[job] {
                    put_pending(&mut self.snapshot.pending, &mut filled, workload);
                    self.pending_job.push(Some(job));
                    kept_gpus += u64::from(world.spec(job).gpus());
                }
            }
            // Whole GPUs only here: the pending total is a whole number.
            let rest = (world.pending_gpus[queue] as u64).saturating_sub(kept_gpus);
            if rest > 0 {
                let stand_in = &mut self.stand_ins[queue];
                stand_in.pods[0].requests[0] = u32::try_from(rest).unwrap_or(u32::MAX);
                put_pending(&mut self.snapshot.pending, &mut filled, stand_in);
                self.pending_job.push(None);
            }
        }
        self.snapshot.pending.truncate(filled);
    }

    fn add_running(&mut self, world: &World<'_>, job: JobId) {
        let spec = world.spec(job);
        let state = &world.jobs[job];
        let uid = workload_uid(job);
        let r = snapshot_resource(spec.resource);
        for (i, (&slot, &gpus)) in state.placement.iter().zip(&spec.pods).enumerate() {
            let node = NodeId::new(world.nodes[slot].machine);
            let pod_uid = format!("{uid}-{i}");
            // Kept in UID order, the order `decide` reads running pods in: its sort of them,
            // once a cycle that may evict, then finds them sorted.
            let pos = self
                .snapshot
                .running
                .partition_point(|p| p.uid.as_str() < pod_uid.as_str());
            self.running_pos[job].push(0);
            self.running_pod.insert(pos, (job, i as u32));
            self.snapshot.running.insert(
                pos,
                RunningPod {
                    uid: pod_uid,
                    workload: uid.clone(),
                    queue: QueueId::new(spec.queue),
                    node,
                    requests: request(spec.resource, gpus),
                    tier: spec.tier(),
                    started_at: state.started_at,
                    queued_at: state.queued_at,
                },
            );
            self.reindex_running_from(pos);
            self.snapshot.nodes[node].free[r] -= gpus;
        }
    }

    /// Records where each running pod from `pos` on now stands in `snapshot.running`.
    fn reindex_running_from(&mut self, pos: usize) {
        for (at, &(job, pod)) in self.running_pod.iter().enumerate().skip(pos) {
            self.running_pos[job][pod as usize] = at as u32;
        }
    }

    fn remove_running(&mut self, job: JobId) {
        let mut positions = std::mem::take(&mut self.running_pos[job]);
        // Highest first, so each position still holds the pod it names when removed.
        positions.sort_unstable_by(|a, b| b.cmp(a));
        let lowest = positions.last().map_or(0, |&pos| pos as usize);
        for pos in positions {
            let pos = pos as usize;
            let pod = &self.snapshot.running[pos];
            let (r, units) = pod
                .requests
                .iter()
                .enumerate()
                .rfind(|(_, u)| **u > 0)
                .map_or((0, 0), |(r, u)| (r, *u));
            self.snapshot.nodes[pod.node].free[r] += units;
            self.snapshot.running.remove(pos);
            self.running_pod.remove(pos);
        }
        self.reindex_running_from(lowest);
    }
}

/// Writes `workload` into slot `*filled` of `pending` and advances `*filled`. A slot left from
/// the last cycle is overwritten field by field, keeping its strings' and vectors' buffers:
/// copying every waiting workload that matters into each cycle's snapshot otherwise allocates
/// three times per workload per cycle, and a trace replay runs tens of thousands of cycles.
/// The stand-in for `queue`'s waiting workloads left out of the snapshot: it asks for a
/// resource no node has (so it never fits, is never held and never preempts), in the backfill
/// tier, queued last, so it sorts after every workload of its queue. `fill_pending` sets its
/// GPUs, the first request, each cycle.
fn stand_in(queue: usize) -> PendingWorkload {
    PendingWorkload {
        uid: format!("~rest-of-queue-{queue:05}"),
        queue: QueueId::new(queue),
        tier: Tier::Backfill,
        deadline: None,
        urgency: Urgency::Low,
        user_tier: UserTier::default(),
        created_at: f64::MAX,
        min_member: 1,
        pods: vec![PodRequest {
            requests: vec![0, 1],
        }],
    }
}

fn put_pending(pending: &mut Vec<PendingWorkload>, filled: &mut usize, workload: &PendingWorkload) {
    match pending.get_mut(*filled) {
        Some(slot) => copy_pending(slot, workload),
        None => pending.push(workload.clone()),
    }
    *filled += 1;
}

/// `*slot = from.clone()`, reusing `slot`'s buffers. Destructured, so that a field added to
/// `PendingWorkload` cannot be left uncopied.
fn copy_pending(slot: &mut PendingWorkload, from: &PendingWorkload) {
    let PendingWorkload {
        uid,
        queue,
        tier,
        deadline,
        urgency,
        user_tier,
        created_at,
        min_member,
        pods,
    } = from;
    slot.uid.clone_from(uid);
    slot.queue = *queue;
    slot.tier = *tier;
    slot.deadline = *deadline;
    slot.urgency = *urgency;
    slot.user_tier = *user_tier;
    slot.created_at = *created_at;
    slot.min_member = *min_member;
    slot.pods.truncate(pods.len());
    let reused = slot.pods.len();
    for (to, pod) in slot.pods.iter_mut().zip(pods) {
        to.requests.clone_from(&pod.requests);
    }
    slot.pods.extend(pods[reused..].iter().cloned());
}

fn decrement(counts: &mut BTreeMap<u32, usize>, key: u32) {
    if let Some(count) = counts.get_mut(&key) {
        *count -= 1;
        if *count == 0 {
            counts.remove(&key);
        }
    }
}

impl GpufairPolicy {
    /// Whether the smallest pending pod of some pool fits on some node of that pool.
    fn anything_fits(&self) -> bool {
        if self.snapshot.resources.len() > 2 {
            // The per-size counts are of whole GPUs only.
            return true;
        }
        self.pending_pod_sizes
            .iter()
            .enumerate()
            .any(|(pool, sizes)| {
                sizes.keys().next().is_some_and(|&smallest| {
                    self.snapshot
                        .nodes
                        .iter()
                        .any(|node| node.pool.get() == pool && node.free[0] >= smallest)
                })
            })
    }
}

impl Policy for GpufairPolicy {
    fn advance(&mut self, world: &World<'_>, until: f64) {
        if until <= self.last_recorded || !self.variant.ledger {
            return;
        }
        if self.entitled_version != Some(world.demand_version) {
            entitlements(world, &mut self.entitled);
            self.entitled_version = Some(world.demand_version);
        }
        for (queue, ledger) in self.ledgers.iter_mut().enumerate() {
            let allocated = world.allocated[queue];
            let pool = &self.snapshot.pools[PoolId::new(world.pool_of_queue(queue))].name;
            ledger.record(
                self.options.fairshare_of(pool),
                until,
                UsageSample {
                    allocated,
                    utilized: allocated,
                    entitled: self.entitled[queue],
                    capacity: self.pool_capacity[world.pool_of_queue(queue)],
                },
            );
        }
        self.last_recorded = until;
    }

    fn on_arrival(&mut self, world: &World<'_>, job: JobId) {
        self.add_pending(world, job);
    }

    fn on_start(&mut self, world: &World<'_>, job: JobId) {
        self.remove_pending(world, job);
        self.add_running(world, job);
    }

    fn on_stop(&mut self, world: &World<'_>, job: JobId, preempted: bool) {
        self.remove_running(job);
        if preempted {
            self.add_pending(world, job);
        }
    }

    fn cycle(&mut self, world: &World<'_>) -> Actions {
        let now = world.now;
        if !self.variant.hold && !self.variant.preemption && !self.anything_fits() {
            // Without holds or preemption a cycle can only release, and nothing fits anywhere.
            return Actions::default();
        }
        self.snapshot.now = now;
        self.memory.recall(&mut self.snapshot);
        if self.variant.ledger {
            for (queue, ledger) in self.ledgers.iter().enumerate() {
                let pool = &self.snapshot.pools[PoolId::new(world.pool_of_queue(queue))].name;
                self.snapshot.queues[QueueId::new(queue)].shares =
                    ledger.shares(self.options.fairshare_of(pool), now);
            }
        }
        self.fill_pending(world);
        self.accrue_idle(now);
        let decisions = decide(&self.snapshot, &self.options);
        for outcome in &decisions.queues {
            self.weights[outcome.queue.get()] = outcome.effective_weight;
        }
        self.memory.remember(&self.snapshot, &decisions);
        let held: Vec<(String, JobId)> = decisions
            .holds
            .iter()
            .filter_map(|h| {
                let job = self.pending_job[h.workload]?;
                Some((self.snapshot.pending[h.workload].uid.clone(), job))
            })
            .collect();
        let starting: Vec<JobId> = decisions
            .releases
            .iter()
            .filter_map(|r| self.pending_job[r.workload])
            .collect();
        self.close_holds(world, &held, &starting);
        let mut actions = Actions::default();
        for preemption in &decisions.preemptions {
            // Backfill leaves for the held workload, which takes the room next: its queue is
            // not cooled down for it (the controller does the same).
            let backfill = matches!(preemption.reason, PreemptionReason::Backfill);
            let preemptor = self.snapshot.pending[preemption.for_workload].queue;
            let cause = EvictionCause::from(&preemption.reason);
            for &pod in &preemption.pods {
                let (job, _) = self.running_pod[pod];
                if !actions.preempt.iter().any(|(j, _)| *j == job) {
                    actions.preempt.push((job, cause));
                }
                let victim_queue = self.snapshot.running[pod].queue;
                self.memory.evicted(
                    now,
                    1,
                    &self.snapshot.queues[preemptor].name,
                    &self.snapshot.queues[victim_queue].name,
                    backfill,
                );
            }
        }
        for release in &decisions.releases {
            // A stand-in never fits, so every release is of a real job.
            if let Some(job) = self.pending_job[release.workload] {
                let resource = world.spec(job).resource;
                let slots = release
                    .placements
                    .iter()
                    .map(|&node| world.machine_slots[node.get()][resource].unwrap_or(node.get()))
                    .collect();
                actions.start.push((job, slots));
            }
        }
        actions
    }

    fn weights(&self) -> Option<&[f64]> {
        Some(&self.weights)
    }

    fn hold_cost(&self, horizon: f64) -> Option<HoldCost> {
        if !self.variant.hold {
            return None;
        }
        let mut cost = self.cost;
        // Holds still open at the end: their idle time so far counts, and they were neither
        // paid off nor abandoned.
        for hold in self.memory.holds() {
            let idle = self.episodes.get(&hold.workload).map_or(0.0, |e| e.1);
            let since = (horizon - hold.at.max(self.warmup_s)).max(0.0);
            cost.idle_gpu_seconds += idle + hold.cost.idle_gpu_equivalents * since;
            cost.unwanted_idle_gpu_seconds += hold.cost.unwanted_idle_gpu_equivalents * since;
        }
        Some(cost)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use gpufair_core::admission::Decisions;

    use super::*;
    use crate::scenario;

    fn scenario_text() -> String {
        let sizes = [1, 2, 4, 8, 1, 12, 3, 16, 1, 6, 1, 24];
        let mut text = String::from(
            "name: t\nduration: 1d\ncluster: { pools: [ { name: p, gpus: 36, gpusPerNode: 8 } ] }\n\
             queues:\n  - { name: a }\n  - { name: b, weight: 2, guaranteed: 8 }\n  - { name: c }\n\
             workload:\n  jobs:\n",
        );
        for i in 0..90 {
            text.push_str(&format!(
                "    - {{ queue: {}, submit: {}s, gpus: {}, duration: {}s }}\n",
                ["a", "b", "c"][i % 3],
                i * 20,
                sizes[i % sizes.len()],
                300 + (i * 337) % 2400
            ));
        }
        text
    }

    /// Everything a cycle decides, by job rather than by snapshot index, in a canonical order.
    fn decided(pending_job: &[Option<JobId>], decisions: &Decisions) -> Vec<String> {
        let mut out: Vec<String> = decisions
            .releases
            .iter()
            .map(|r| format!("release {:?} {:?}", pending_job[r.workload], r.placements))
            .chain(decisions.holds.iter().map(|h| {
                format!(
                    "hold {:?} {:?} {}",
                    pending_job[h.workload], h.nodes, h.missing_gpu_equivalents
                )
            }))
            .chain(decisions.preemptions.iter().map(|p| {
                format!(
                    "preempt {} {:?} for {:?}",
                    p.victim_workload, p.pods, pending_job[p.for_workload]
                )
            }))
            .collect();
        out.extend(decisions.queues.iter().map(|q| {
            format!(
                "queue {} {:.6} {:.6} {:.6}",
                q.queue.get(),
                q.demand,
                q.entitled,
                q.fair_share
            )
        }));
        out.sort();
        out
    }

    /// The bounded list of waiting workloads decides exactly what the full list decides, and the
    /// incrementally kept snapshot matches the world, its running pods in UID order.
    #[test]
    fn bounded_pending_list_decides_like_the_full_one() {
        let scenario = scenario::parse(Path::new("t.yaml"), &scenario_text()).unwrap();
        let mut world = World::new(&scenario);
        let mut policy = GpufairPolicy::new(&scenario, Variant::of(PolicyName::Gpufair));
        let mut ends: Vec<(f64, JobId)> = Vec::new();
        let mut arrived = 0;
        let (mut truncated_cycles, mut holds) = (0, 0);
        for step in 0..120 {
            let now = f64::from(step) * 30.0;
            world.now = now;
            ends.sort_by(|a, b| a.0.total_cmp(&b.0));
            while ends.first().is_some_and(|&(t, _)| t <= now) {
                let (_, job) = ends.remove(0);
                world.finish(job);
                policy.on_stop(&world, job, false);
            }
            while arrived < scenario.jobs.len() && scenario.jobs[arrived].submit_s <= now {
                world.arrive(arrived);
                policy.on_arrival(&world, arrived);
                arrived += 1;
            }
            for (node, state) in policy.snapshot.nodes.iter().zip(&world.nodes) {
                assert_eq!(node.free[0], state.free);
            }
            let running_pods: usize = world
                .running
                .iter()
                .flatten()
                .map(|&j| scenario.jobs[j].pods.len())
                .sum();
            assert_eq!(policy.snapshot.running.len(), running_pods);
            assert!(
                policy.snapshot.running.is_sorted_by(|a, b| a.uid < b.uid),
                "running pods out of UID order at step {step}"
            );
            for (at, &(job, pod)) in policy.running_pod.iter().enumerate() {
                assert_eq!(policy.running_pos[job][pod as usize] as usize, at);
            }

            policy.snapshot.now = now;
            policy.fill_pending(&world);
            let bounded = decide(&policy.snapshot, &policy.options);
            let mut full = policy.snapshot.clone();
            let mut full_jobs = Vec::new();
            full.pending = policy
                .workloads
                .iter()
                .enumerate()
                .filter_map(|(job, w)| w.clone().inspect(|_| full_jobs.push(Some(job))))
                .collect();
            if full.pending.len() > policy.pending_job.iter().flatten().count() {
                truncated_cycles += 1;
            }
            let unbounded = decide(&full, &policy.options);
            assert_eq!(
                decided(&policy.pending_job, &bounded),
                decided(&full_jobs, &unbounded),
                "step {step}"
            );
            holds += bounded.holds.len();

            let mut preempt: Vec<JobId> = Vec::new();
            for p in &bounded.preemptions {
                for &pod in &p.pods {
                    let (job, _) = policy.running_pod[pod];
                    if !preempt.contains(&job) {
                        preempt.push(job);
                    }
                }
            }
            let starts: Vec<(JobId, Vec<usize>)> = bounded
                .releases
                .iter()
                .map(|r| {
                    (
                        policy.pending_job[r.workload].unwrap(),
                        r.placements.iter().map(|n| n.get()).collect(),
                    )
                })
                .collect();
            for job in preempt {
                world.preempt(job);
                policy.on_stop(&world, job, true);
                ends.retain(|&(_, j)| j != job);
            }
            for (job, nodes) in starts {
                world.start(job, nodes).unwrap();
                policy.on_start(&world, job);
                ends.push((now + scenario.jobs[job].duration_s, job));
            }
        }
        assert!(
            truncated_cycles > 10,
            "the bound was exercised in {truncated_cycles} cycles"
        );
        assert!(holds > 0, "some capacity was held");
    }

    fn workload(uid: &str, queue: usize, pods: &[&[u32]]) -> PendingWorkload {
        PendingWorkload {
            created_at: 1.0,
            ..gpufair_core::fixtures::pending_of(uid, queue, pods)
        }
    }

    /// Slots reused from a longer and a shorter list end equal to what was put, and the list
    /// is as long as what was put once cut at `filled`.
    #[test]
    fn pending_slots_reused_hold_exactly_what_was_put() {
        let mut stand_in = workload("~rest-of-queue-00001", 1, &[&[7, 1]]);
        stand_in.tier = Tier::Backfill;
        stand_in.urgency = Urgency::Low;
        stand_in.created_at = f64::MAX;
        stand_in.deadline = Some(5.0);
        let cycles = [
            vec![
                workload("ns/gang-of-three", 0, &[&[1, 0], &[2, 0], &[4, 0]]),
                workload("ns/a", 0, &[&[1, 0]]),
                workload("ns/b", 2, &[&[8, 0]]),
            ],
            // Fewer workloads, a longer gang where a single pod was, a single pod where the gang
            // was, fields that differ everywhere.
            vec![stand_in, workload("ns/gang-of-two", 2, &[&[3, 0], &[3, 0]])],
            vec![
                workload("x", 1, &[&[1, 0]]),
                workload("ns/gang-of-four", 0, &[&[1, 0], &[1, 0], &[1, 0], &[1, 0]]),
                workload("ns/c", 2, &[&[2, 0]]),
                workload("ns/d", 0, &[&[6, 0]]),
            ],
        ];
        let mut pending = Vec::new();
        for put in &cycles {
            let mut filled = 0;
            for workload in put {
                put_pending(&mut pending, &mut filled, workload);
            }
            pending.truncate(filled);
            assert_eq!(&pending, put);
        }
    }
}
