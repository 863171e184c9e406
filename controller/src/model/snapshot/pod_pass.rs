//! The pass over the pods: each pod's facts are read once, running pods go into the snapshot's
//! running list, waiting ones are grouped into workloads, and each pod's shape is kept for when
//! the resources are known.
//!
//! One pass reads each pod's facts once: at 200,000 pods every read of a pod's facts misses the
//! cache, and three passes over them cost more than everything else. What needs the resource
//! list (request vectors, sizes, capacity taken) is filled in afterwards from the shape each pod
//! was given here.

use std::sync::Arc;

use gpufair_api::Queue;
use gpufair_core::index::IndexVec;
use gpufair_core::snapshot::{NodeId, PendingWorkload, PodRequest, QueueId, RunningPod};
use k8s_openapi::api::core::v1::Node;

use super::{Built, FastMap, Memory, PendingPod, QueueUse, RunningRef, held_since};
use crate::eligibility::Constraints;
use crate::facts::{FactsCache, PodFacts, PodState, RequestShape};
use crate::grouped::Grouped;
use crate::prefetch::ahead;

/// What the pass over the pods found, by index into its own lists: request shapes and
/// constraint classes, each distinct one once.
pub(super) struct PodPass {
    pub(super) shapes: Vec<Arc<RequestShape>>,
    pub(super) classes: Vec<Arc<Constraints>>,
    /// Capacity taken on each node, by shape: every pod counted as running, queue or not.
    pub(super) taken: Vec<(NodeId, usize)>,
    /// Parallel to `built.snapshot.running`: each pod's shape.
    pub(super) running_shapes: Vec<usize>,
    /// Every pending pod's workload, place in it, shape and constraint class, in pod order.
    pub(super) pending_shapes: Vec<(usize, usize, usize, Option<usize>)>,
    /// Pods that ran and finished, with their queue, shape, start and end.
    pub(super) finished: Vec<(QueueId, usize, f64, f64)>,
}

/// One pass over the pods: running pods into `built.snapshot.running`, waiting ones grouped
/// into workloads in `built.snapshot.pending`, each with its shape for later.
pub(super) fn read_pods(
    pods: &FactsCache,
    queues: &[&Queue],
    nodes: &[&Node],
    memory: &Memory,
    built: &mut Built,
) -> PodPass {
    let names = Names::new(queues, nodes);
    let mut reader = PodReader::new(&names, memory, pods, built);
    for facts in ahead(pods.pods(), |facts| Some(&**facts)) {
        reader.read(facts, built);
    }
    reader.finish(built)
}

/// Each Queue's and node's index, by name.
struct Names<'c> {
    queues: FastMap<&'c str, QueueId>,
    nodes: FastMap<&'c str, NodeId>,
}

impl<'c> Names<'c> {
    fn new(queues: &[&'c Queue], nodes: &[&'c Node]) -> Self {
        Self {
            queues: queues
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    (
                        q.metadata.name.as_deref().unwrap_or_default(),
                        QueueId::new(i),
                    )
                })
                .collect(),
            nodes: nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    (
                        n.metadata.name.as_deref().unwrap_or_default(),
                        NodeId::new(i),
                    )
                })
                .collect(),
        }
    }
}

/// The pass as it goes: what it found so far, the distinct shapes, classes and names it has
/// met, and the gangs it has seen.
struct PodReader<'p, 'n> {
    names: &'n Names<'n>,
    memory: &'p Memory,
    found: PodPass,
    /// Shapes are interned by the pod store: each distinct one gets an index, by address.
    shape_index: FastMap<*const RequestShape, usize>,
    class_index: FastMap<*const Constraints, usize>,
    /// Queue and node names are interned by the pod store, so pods naming the same one share
    /// its text: each distinct name is looked up by text once per build, then by address. (Two
    /// copies of one text would only be looked up twice, never mistaken.)
    queue_by_address: FastMap<*const u8, Option<QueueId>>,
    node_by_address: FastMap<*const u8, Option<NodeId>>,
    /// Each waiting pod and its workload, in pod order; grouped by workload at the end.
    pending_pods: Vec<(usize, PendingPod)>,
    gangs_started: FastMap<&'p str, u32>,
    /// Gang workloads: their key, and the `min-member` of their first pod.
    gang_workload: FastMap<&'p str, usize>,
    gang_minimums: Vec<(usize, &'p str, u32)>,
}

impl<'p, 'n> PodReader<'p, 'n> {
    /// A reader with room for every pod in the state that fills each list, so that none grows
    /// by copying; `built`'s lists get the same room, and a use per Queue.
    fn new(names: &'n Names<'n>, memory: &'p Memory, pods: &FactsCache, built: &mut Built) -> Self {
        built.usage = IndexVec::from_elem(QueueUse::default(), names.queues.len());
        let counts = pods.counts();
        built.snapshot.running.reserve(counts.placed);
        built.running.reserve(counts.placed);
        built.snapshot.pending.reserve(counts.gated);
        Self {
            names,
            memory,
            found: PodPass {
                shapes: Vec::new(),
                classes: Vec::new(),
                taken: Vec::with_capacity(counts.placed),
                running_shapes: Vec::with_capacity(counts.placed),
                pending_shapes: Vec::with_capacity(counts.gated),
                finished: Vec::new(),
            },
            shape_index: FastMap::default(),
            class_index: FastMap::default(),
            queue_by_address: FastMap::default(),
            node_by_address: FastMap::default(),
            pending_pods: Vec::with_capacity(counts.gated),
            gangs_started: FastMap::default(),
            gang_workload: FastMap::default(),
            gang_minimums: Vec::new(),
        }
    }

    /// Reads one pod: a finished one for its span of use, a waiting one into its workload, one
    /// counted as running onto its node; a pod whose requests cannot be read is skipped.
    fn read(&mut self, facts: &'p Arc<PodFacts>, built: &mut Built) {
        if facts.state == PodState::Ignored {
            self.read_finished(facts);
            return;
        }
        let shape = match &facts.requests {
            Ok(shape) => self.shape_of(shape),
            Err(err) => {
                built.skipped.push((
                    facts.reference.clone(),
                    format!("bad resource request: {err}"),
                ));
                return;
            }
        };
        let class = self.class_of(facts);
        let reference = &facts.reference;
        let memory = self.memory;
        let (n, bound) = match &facts.state {
            PodState::Bound(node) => (self.node_of(node), true),
            PodState::Released(pinned) => match pinned {
                Some(node) if !memory.expired.contains(&*reference.uid) => {
                    built.unbound.push((reference.clone(), node.to_string()));
                    (self.node_of(node), false)
                }
                _ => return,
            },
            PodState::Gated(_) if memory.released.contains_key(&*reference.uid) => {
                let node = &memory.released[&*reference.uid];
                built.unbound.push((reference.clone(), node.clone()));
                (self.names.nodes.get(node.as_str()).copied(), false)
            }
            PodState::Gated(gate_index) => {
                self.read_waiting(facts, *gate_index, shape, class, built);
                return;
            }
            PodState::Ignored => return,
        };
        self.read_running(facts, n, bound, shape, built);
    }

    /// A pod that ran and finished, kept for its queue's spans of use when they are asked for.
    fn read_finished(&mut self, facts: &PodFacts) {
        if self.memory.usage_spans
            && let Some(end) = facts.finished_at
            && let Ok(shape) = &facts.requests
            && let Some(queue) = self.queue_of(facts)
        {
            let shape = self.shape_of(shape);
            self.found
                .finished
                .push((queue, shape, held_since(facts), end));
        }
    }

    /// A waiting pod, into its workload: a gang's by its key, else a workload of its own.
    /// Skipped if its queue is not valid or its last release found its gates changed.
    fn read_waiting(
        &mut self,
        facts: &'p Arc<PodFacts>,
        gate_index: usize,
        shape: usize,
        class: Option<usize>,
        built: &mut Built,
    ) {
        let reference = &facts.reference;
        let Some(queue) = self.queue_of(facts) else {
            built.skipped.push((
                reference.clone(),
                "its gpufair.io/queue names no valid Queue".into(),
            ));
            return;
        };
        if self
            .memory
            .stale
            .get(&*reference.uid)
            .is_some_and(|rv| *rv == facts.resource_version)
        {
            built.skipped.push((
                reference.clone(),
                "gates changed under the last release; waiting for the updated pod".into(),
            ));
            return;
        }
        let w = self.workload_of(facts, queue, built);
        let workload = &mut built.snapshot.pending[w];
        workload.created_at = workload.created_at.min(facts.created_at);
        self.found
            .pending_shapes
            .push((w, workload.pods.len(), shape, class));
        workload.pods.push(PodRequest {
            requests: Vec::new(),
        });
        built.usage[queue].pending_pods += 1;
        self.pending_pods
            .push((w, PendingPod::new(facts.clone(), gate_index)));
    }

    /// The workload a waiting pod of `queue` belongs to, started if it is the first met.
    fn workload_of(&mut self, facts: &'p PodFacts, queue: QueueId, built: &mut Built) -> usize {
        let key = facts.gang.as_deref().unwrap_or(&*facts.reference.uid);
        let mut start_workload = || {
            // Most workloads are one pod: room for exactly one until a gang needs more.
            built.snapshot.pending.push(PendingWorkload {
                uid: key.to_string(),
                queue,
                tier: facts.tier,
                deadline: facts.deadline,
                urgency: facts.urgency,
                user_tier: facts.user_tier,
                created_at: facts.created_at,
                // A gang's is set once its running pods are counted, in `finish`.
                min_member: 1,
                pods: Vec::with_capacity(1),
            });
            built.snapshot.pending.len() - 1
        };
        // A pod outside a gang is a workload of its own (UIDs are unique), so only gangs are
        // looked up: indexing every pod's UID cost a quarter of the build.
        match facts.gang.as_deref() {
            Some(gang) => *self.gang_workload.entry(gang).or_insert_with(|| {
                let w = start_workload();
                self.gang_minimums.push((w, gang, facts.min_member));
                w
            }),
            None => start_workload(),
        }
    }

    /// A pod counted as running on node `n` (bound, or released and pinned there): it takes
    /// capacity there, and runs for its queue if that is valid.
    fn read_running(
        &mut self,
        facts: &'p Arc<PodFacts>,
        n: Option<NodeId>,
        bound: bool,
        shape: usize,
        built: &mut Built,
    ) {
        if let Some(g) = &facts.gang {
            *self.gangs_started.entry(g.as_str()).or_default() += 1;
        }
        let Some(n) = n else {
            return;
        };
        self.found.taken.push((n, shape));
        let Some(queue) = self.queue_of(facts) else {
            return;
        };
        let reference = &facts.reference;
        let now = self.memory.now;
        built.snapshot.running.push(RunningPod {
            uid: reference.uid.to_string(),
            workload: facts
                .gang
                .clone()
                .unwrap_or_else(|| reference.uid.to_string()),
            queue,
            node: n,
            requests: Vec::new(),
            tier: facts.tier,
            started_at: if bound {
                facts.started_at.unwrap_or(now)
            } else {
                now
            },
            queued_at: facts.created_at,
        });
        self.found.running_shapes.push(shape);
        built.running.push(RunningRef {
            facts: facts.clone(),
            bound,
        });
    }

    /// Groups the waiting pods by workload, and sets each gang's `min_member` less the members
    /// already running.
    fn finish(self, built: &mut Built) -> PodPass {
        built.pending = Grouped::from_arrivals(built.snapshot.pending.len(), self.pending_pods);
        for (w, gang, min_member) in self.gang_minimums {
            let started = self.gangs_started.get(gang).copied().unwrap_or(0);
            built.snapshot.pending[w].min_member = min_member.saturating_sub(started).max(1);
        }
        self.found
    }

    /// The index of a distinct request shape.
    fn shape_of(&mut self, shape: &Arc<RequestShape>) -> usize {
        let shapes = &mut self.found.shapes;
        *self
            .shape_index
            .entry(Arc::as_ptr(shape))
            .or_insert_with(|| {
                shapes.push(shape.clone());
                shapes.len() - 1
            })
    }

    /// The index of a pod's distinct constraint class, if it has one.
    fn class_of(&mut self, facts: &PodFacts) -> Option<usize> {
        let classes = &mut self.found.classes;
        let class_index = &mut self.class_index;
        facts.constraints.as_ref().map(|c| {
            *class_index.entry(Arc::as_ptr(c)).or_insert_with(|| {
                classes.push(c.clone());
                classes.len() - 1
            })
        })
    }

    /// The pod's Queue, if it names a valid one.
    fn queue_of(&mut self, facts: &PodFacts) -> Option<QueueId> {
        let name = facts.queue.as_ref()?;
        let queues = &self.names.queues;
        *self
            .queue_by_address
            .entry(name.as_ptr())
            .or_insert_with(|| queues.get(&**name).copied())
    }

    /// The node of that name, if there is one.
    fn node_of(&mut self, name: &Arc<str>) -> Option<NodeId> {
        let nodes = &self.names.nodes;
        *self
            .node_by_address
            .entry(name.as_ptr())
            .or_insert_with(|| nodes.get(&**name).copied())
    }
}
