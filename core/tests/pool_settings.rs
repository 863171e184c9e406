//! A pool with time-aware sharing off decides exactly as stateless fair share decides, cycle
//! by cycle, whatever its queues' history and whatever the other pools do.

mod common;

use common::arb_snapshot;
use gpufair_core::admission::{DecideOptions, Decisions, decide};
use gpufair_core::params::FairShareParams;
use gpufair_core::snapshot::{LedgerShares, PoolId, Snapshot};
use proptest::prelude::*;

/// The decisions that concern pool `pool`: its queues' outcomes, its workloads' releases, holds,
/// preemptions and wait reasons, as text.
fn of_pool(snapshot: &Snapshot, decisions: &Decisions, pool: PoolId) -> Vec<String> {
    let in_pool = |w: usize| snapshot.queues[snapshot.pending[w].queue].pool == pool;
    let mut out = Vec::new();
    for outcome in &decisions.queues {
        if snapshot.queues[outcome.queue].pool == pool {
            out.push(format!("{outcome:?}"));
        }
    }
    out.extend(
        decisions
            .releases
            .iter()
            .filter(|r| in_pool(r.workload))
            .map(|r| format!("{r:?}")),
    );
    out.extend(
        decisions
            .holds
            .iter()
            .filter(|h| h.pool == pool)
            .map(|h| format!("{h:?}")),
    );
    out.extend(
        decisions
            .preemptions
            .iter()
            .filter(|p| in_pool(p.for_workload))
            .map(|p| format!("{p:?}")),
    );
    out.extend(
        decisions
            .waiting
            .iter()
            .filter(|w| in_pool(w.workload))
            .map(|w| format!("{w:?}")),
    );
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_pool_switched_off_decides_as_stateless_fair_share(
        snapshot in arb_snapshot(),
        history in prop::collection::vec((0.0..1.0f64, 0.0..1.0f64, 0.0..50.0f64), 8),
    ) {
        // Give every queue a history, so the ledger would move weights if it counted.
        let mut snapshot = snapshot;
        for (queue, (fair, usage, recent)) in snapshot.queues.iter_mut().zip(history.iter().cycle()) {
            queue.shares = LedgerShares {
                fair_share: *fair,
                usage_share: *usage,
                decayed_capacity: 3.6e6,
                recent_entitled: *recent,
            };
        }
        let mut switched_off = DecideOptions::default();
        switched_off.pool_fairshare.insert(
            "pool-0".into(),
            FairShareParams { time_aware: false, ..FairShareParams::default() },
        );
        // Stateless fair share as the simulator's `stateless` policy runs it: no history at all.
        let stateless = DecideOptions {
            fairshare: FairShareParams::default().stateless(),
            hold_capacity: false,
            ..DecideOptions::default()
        };
        let mut forgotten = snapshot.clone();
        for queue in &mut forgotten.queues {
            queue.shares = LedgerShares::NEUTRAL;
        }
        let ours = decide(&snapshot, &switched_off);
        let theirs = decide(&forgotten, &stateless);
        prop_assert_eq!(of_pool(&snapshot, &ours, PoolId::new(0)), of_pool(&forgotten, &theirs, PoolId::new(0)));
        prop_assert!(ours.holds.iter().all(|h| h.pool != PoolId::new(0)));
    }
}
