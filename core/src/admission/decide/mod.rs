//! The decision cycle: `decide` sets a cycle up from the snapshot and runs each pool's pass.
//!
//! The files read one way, from the cycle's flow down to plain data:
//! - here: the cycle's state, its set-up from the stages below, and the run over the pools;
//! - `pool_pass`: one pool's turns, each on a queue's next waiting workload, which `release`
//!   starts or keeps waiting (`blocking` says what stops it first); `holding` keeps capacity
//!   for a workload that does not fit, within its `idle_budget`, with the `eviction`s it orders
//!   (for a share or a drain ended early, on the nodes where they lose least: `least_loss`),
//!   judging a kept hold without what its queue started while it waited (`ran_ahead`);
//!   `backfill` hands what the pass left idle to waiting work;
//! - the set-up: `setup` holds what every stage reads, and each stage sits in the file of what
//!   it builds: node `capacity`, the pending workloads (`entries`) in `release_order`, the
//!   `pool_division` into shares and claims, and what the `running` pods come to;
//! - plain helpers: `open_nodes`, `held_fit`, `hold_split`, `requests`, `canonical` order.

mod aging;
mod backfill;
mod blocking;
mod canonical;
mod capacity;
mod entries;
mod eviction;
mod given_up;
mod held_fit;
mod hold_split;
mod holding;
mod idle_budget;
mod least_loss;
mod loan;
mod open_nodes;
mod past_holds;
mod pool_division;
mod pool_kinds;
mod pool_pass;
mod ran_ahead;
mod release;
mod release_order;
mod requests;
mod running;
mod setup;
mod unwanted_idle;

use self::canonical::by_name;
use self::capacity::NodeCapacity;
use self::entries::Entry;
use self::held_fit::HeldFitCache;
use self::open_nodes::OpenNodes;
use self::pool_division::Demand;
pub use self::pool_division::{REACHABLE_FRACTION, earning_bound_s};
use self::release_order::ReleaseEntries;
use self::running::RunningGroups;
use self::setup::Setup;
use crate::admission::decision::Decisions;
use crate::admission::options::{DecideOptions, PoolSettings};
use crate::admission::preempt::QueueView;
use crate::index::IndexVec;
use crate::snapshot::{NodeId, PoolId, QueueId, Snapshot};

const EPSILON: f64 = 1e-9;

/// Decides one cycle. Pure and deterministic: the same snapshot, in any order of its vectors,
/// gives the same decisions (entries are processed in a canonical order of names and UIDs).
/// Entries that refer to a pool, node or queue that does not exist are ignored.
pub fn decide(snapshot: &Snapshot, options: &DecideOptions) -> Decisions {
    Cycle::new(snapshot, options).run()
}

/// One cycle as it goes: what the set-up found, what each node still has free, usable and
/// held, and the decisions so far.
struct Cycle<'a> {
    snapshot: &'a Snapshot,
    options: &'a DecideOptions,
    /// Per pool: its fair-share parameters and whether it holds capacity.
    pool_settings: IndexVec<PoolId, PoolSettings>,
    weights: Vec<f64>,
    /// Nodes of each pool in canonical (name) order.
    pool_nodes: IndexVec<PoolId, Vec<NodeId>>,
    /// What is free on each node, less this cycle's placements.
    free: IndexVec<NodeId, Vec<u32>>,
    /// What is held on each node for the pool's held workload.
    held: IndexVec<NodeId, Vec<u32>>,
    allocatable: IndexVec<NodeId, Vec<u32>>,
    /// Free minus held, per node: what an ordinary workload may use.
    usable: IndexVec<NodeId, Vec<u32>>,
    /// Per node: it runs a workload whose eviction was refused (empty when none was).
    refused_on_node: IndexVec<NodeId, bool>,
    /// Running pods grouped for preemption, once it is first tried.
    running: Option<RunningGroups>,
    /// Per node: GPU-seconds its running pods have run, once a hold first chooses nodes.
    node_work: Option<IndexVec<NodeId, f64>>,
    /// Valid pending workloads, queue after queue, each queue's in release order.
    entries: Vec<Entry>,
    /// Per queue: its range of `entries`.
    queue_entries: IndexVec<QueueId, (usize, usize)>,
    queue_rank: IndexVec<QueueId, usize>,
    /// Queues in canonical (name) order: the queue of each rank.
    queue_order: Vec<QueueId>,
    /// Every valid pending pod's request, `width` counts each, entry after entry: one
    /// allocation per cycle instead of one per pod, read front to back as queues are served.
    pod_requests: Vec<u32>,
    width: usize,
    /// Single-pod shapes already checked against capacity ignoring the hold, in this pool.
    held_fit_cache: HeldFitCache,
    views: IndexVec<QueueId, QueueView>,
    /// Per queue: the most it may hold beside the guarantees of the other queues of its pool
    /// that have demand (capacity − Σ others' min(guarantee, demand)).
    headroom: IndexVec<QueueId, f64>,
    /// Per queue: its time-aware share, fair share plus what it is owed spread over the catch-up
    /// period. A hold is made only for a workload this covers.
    earned: IndexVec<QueueId, f64>,
    /// Per queue: the part of its entitlement over the window it did not receive (see `aging`).
    shortfall: IndexVec<QueueId, f64>,
    /// Per pool: how long a queue given nothing takes to claim the whole pool (see `aging`).
    earning_bound_s: IndexVec<PoolId, f64>,
    /// Per queue: how fast its time-aware share grows now, GPU-equivalents per second (what it
    /// is owed grows by its entitlement less what it runs, spread over its claim period); 0 or
    /// less where it does not grow.
    earning_per_s: IndexVec<QueueId, f64>,
    /// GPU-equivalents each pool has in all.
    pool_capacity: IndexVec<PoolId, f64>,
    open: OpenNodes,
    /// Per hold in `Decisions::holds`: what of its held capacity nothing uses yet, per node.
    hold_left: Vec<Vec<(NodeId, Vec<u32>)>>,
    /// Per hold in `Decisions::holds`: it evicts for its workload this cycle. Its capacity takes
    /// no backfill then: what it holds is about to be used, and new backfill would only be
    /// evicted in turn next cycle.
    closing: Vec<bool>,
    /// Per hold in `Decisions::holds`: GPU-equivalents of its capacity lent to work of a queue
    /// standing further below its share (see `past_holds`).
    lent: Vec<f64>,
    /// `Snapshot::backfill`, for lookups.
    backfill: foldhash::HashSet<&'a str>,
    /// Per entry of `Decisions::waiting`: released after all, by backfill.
    backfilled: Vec<bool>,
    decisions: Decisions,
}
impl<'a> Cycle<'a> {
    fn new(snapshot: &'a Snapshot, options: &'a DecideOptions) -> Self {
        let setup = Setup::new(snapshot, options);
        let queues = snapshot.queues.len();
        let queue_order: Vec<QueueId> = by_name(snapshot.queues.indices().collect(), |q| {
            &snapshot.queues[q].name
        });
        let mut queue_rank = IndexVec::from_elem(0, queues);
        for (rank, &q) in queue_order.iter().enumerate() {
            queue_rank[q] = rank;
        }
        let capacity = setup.node_capacity();
        let allocated = setup.allocations();
        let refused_on_node = setup.refused_nodes();
        let pending = setup.release_entries();
        let usable = setup.usable_pool_capacity(&capacity, &pending);
        let ReleaseEntries {
            entries,
            queue_entries,
            pod_requests,
            pending_total,
            pending_within_guarantee,
        } = pending;
        let demand = Demand {
            allocated: &allocated,
            pending: &pending_total,
            pending_within_guarantee: &pending_within_guarantee,
        };
        let division = setup.divide_pools(&capacity, &queue_order, &demand, &usable);
        let pool_capacity: IndexVec<PoolId, f64> = capacity
            .pool_nodes
            .iter()
            .map(|nodes| {
                nodes
                    .iter()
                    .map(|&n| setup.size(&capacity.allocatable[n]))
                    .sum()
            })
            .collect();
        let (earned, earning_per_s) = setup.earned_shares(&division, &pool_capacity, &allocated);
        let shortfall: IndexVec<QueueId, f64> = snapshot
            .queues
            .indices()
            .map(|q| {
                if setup.is_valid(q) {
                    setup.shares_of(q).shortfall()
                } else {
                    0.0
                }
            })
            .collect();
        let views: IndexVec<QueueId, QueueView> = snapshot
            .queues
            .indices()
            .map(|q| QueueView {
                allocated: allocated[q],
                guaranteed: setup.guaranteed_of(q),
                fair_share: division.outcomes[q].fair_share,
                claim: earned[q].max(division.outcomes[q].fair_share),
                received_entitlement: setup.is_valid(q)
                    && setup.shares_of(q).received_entitlement(),
                starved: shortfall[q] >= REACHABLE_FRACTION,
            })
            .collect();
        let exhausted: IndexVec<NodeId, bool> = capacity
            .free
            .iter()
            .map(|free| setup.size(free) <= 0.0)
            .collect();
        let NodeCapacity {
            pool_nodes,
            allocatable,
            free,
        } = capacity;
        let Setup {
            width,
            weights,
            pool_settings,
            ..
        } = setup;
        let earning_bound_s: IndexVec<PoolId, f64> = pool_settings
            .iter()
            .map(|settings| earning_bound_s(&settings.fairshare))
            .collect();
        let held = IndexVec::from_elem(vec![0; width], snapshot.nodes.len());
        let usable = free.clone();
        let open = OpenNodes::new(&pool_nodes, exhausted);
        // Most workloads wait at this scale, and growing the list by doubling would copy it
        // over and over.
        let decisions = Decisions {
            queues: division.outcomes,
            waiting: Vec::with_capacity(entries.len()),
            ..Decisions::default()
        };
        Self {
            snapshot,
            options,
            pool_settings,
            weights,
            pool_nodes,
            free,
            held,
            allocatable,
            usable,
            refused_on_node,
            running: None,
            node_work: None,
            entries,
            queue_entries,
            queue_rank,
            queue_order,
            pod_requests,
            width,
            held_fit_cache: HeldFitCache::default(),
            views,
            headroom: division.headroom,
            earned,
            shortfall,
            earning_bound_s,
            earning_per_s,
            pool_capacity,
            open,
            hold_left: Vec::new(),
            closing: Vec::new(),
            lent: Vec::new(),
            backfill: snapshot.backfill.iter().map(String::as_str).collect(),
            backfilled: Vec::new(),
            decisions,
        }
    }

    /// Whether capacity may be held (and preempted for) in `pool` this cycle.
    fn holds_in(&self, pool: PoolId) -> bool {
        self.pool_settings
            .get(pool)
            .is_some_and(|settings| settings.hold_capacity)
    }

    fn size(&self, v: &[u32]) -> f64 {
        v.iter()
            .zip(&self.weights)
            .map(|(c, w)| f64::from(*c) * w)
            .sum()
    }

    fn run(mut self) -> Decisions {
        // Pools in canonical order: a queue's pods can run on another pool's nodes (its pool
        // was relabelled), and what one pool's pass allocates to a queue is what the next pass's
        // preemption guards read, so the order must not follow the snapshot's.
        let snapshot = self.snapshot;
        let pools = by_name(self.pool_nodes.indices().collect(), |p| {
            snapshot.pools.get(p).map_or("", |pool| pool.name.as_str())
        });
        for pool in pools {
            self.run_pool(pool);
        }
        if self.backfilled.iter().any(|&b| b) {
            let backfilled = std::mem::take(&mut self.backfilled);
            let mut at = 0;
            self.decisions.waiting.retain(|_| {
                at += 1;
                !backfilled.get(at - 1).copied().unwrap_or(false)
            });
        }
        self.decisions
    }
}
