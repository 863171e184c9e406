//! What a cycle's decision says about each queue: the ledger is charged for it, and the figures
//! the driver exports as metrics come back as plain data.

use std::collections::HashMap;

use gpufair_core::admission::DecideOptions;
use gpufair_core::ledger::{UsageSample, UsageSpan};

use crate::leader_model::{Decided, Model};
use crate::waiting_status::oldest_waits;

/// One queue's figures after a cycle, for the metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueFigures {
    pub queue: String,
    /// Its usage share of the pool over the window.
    pub usage_share: f64,
    pub effective_weight: f64,
    /// Whether its history has pushed its weight down to the floor.
    pub at_min_weight: bool,
    pub fair_share: f64,
    pub allocated: f64,
    pub pending_pods: usize,
    /// How long its longest-waiting workload has waited, seconds (0 when none waits).
    pub oldest_wait_s: f64,
}

/// Whether an effective weight sits on its floor (`minWeight` x the base weight), where the
/// history correction cannot push it lower: the queue has used far more than it was owed.
pub fn at_min_weight(effective: f64, base_weight: f64, min_weight: f64) -> bool {
    let floor = min_weight.clamp(0.0, 1.0) * base_weight;
    effective.is_finite() && effective <= floor * (1.0 + 1e-9) + f64::EPSILON
}

impl Model {
    /// Charges the ledgers for the cycle `decided` at `now` (the previous cycle's rates folded
    /// up to now, this cycle's remembered; a new leader's first cycle charges each pod's own span
    /// of use instead), and returns each queue's figures.
    pub fn record_cycle(
        &mut self,
        decided: &Decided,
        options: &DecideOptions,
        now: f64,
    ) -> Vec<QueueFigures> {
        let Decided {
            built, decisions, ..
        } = decided;
        let params_of = |queue: &str| decided.params_of(options, queue);
        let oldest = oldest_waits(&built.snapshot, decisions, now);
        let mut current = HashMap::new();
        let mut figures = Vec::with_capacity(decisions.queues.len());
        for (q, outcome) in decisions.queues.iter_enumerated() {
            let queue = &built.snapshot.queues[q];
            let usage = built.usage[q];
            current.insert(
                queue.name.clone(),
                UsageSample {
                    allocated: usage.allocated,
                    utilized: usage.utilized,
                    entitled: outcome.entitled,
                    capacity: built.pool_capacity.get(queue.pool).copied().unwrap_or(0.0),
                },
            );
            figures.push(QueueFigures {
                queue: queue.name.clone(),
                usage_share: queue.shares.usage_share,
                effective_weight: outcome.effective_weight,
                at_min_weight: at_min_weight(
                    outcome.effective_weight,
                    queue.weight,
                    params_of(&queue.name).min_weight,
                ),
                fair_share: outcome.fair_share,
                allocated: outcome.allocated,
                pending_pods: usage.pending_pods,
                oldest_wait_s: oldest[q],
            });
        }
        let spans: HashMap<&str, &[UsageSpan]> = built
            .snapshot
            .queues
            .iter()
            .zip(&built.usage_spans)
            .map(|(queue, spans)| (queue.name.as_str(), spans.as_slice()))
            .collect();
        let spans_of = |name: &str| spans.get(name).copied();
        self.book.record(params_of, now, &current, spans_of);
        figures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{GpuKinds, Objects, build};
    use gpufair_core::mutation::{DEFAULT_GATE, ResourcePattern};
    use gpufair_core::units::ResourceTable;

    #[test]
    fn a_cycle_charges_each_queue_and_reports_what_it_decided() {
        let world = crate::fixtures::cluster(2, 4, 2);
        let gpus = GpuKinds {
            patterns: vec![ResourcePattern::parse("nvidia.com/gpu")],
            table: ResourceTable::default(),
        };
        let options = DecideOptions::default();
        let mut model = Model::default();
        let objects = Objects {
            pods: &world.pods,
            nodes: &world.nodes,
            queues: &world.queues,
            reports: &[],
        };
        let mut now = 1_700_000_000.0;
        let mut charged = Vec::new();
        for _ in 0..2 {
            model.begin_cycle(now);
            let built = build(&objects, &model.memory, DEFAULT_GATE, &gpus);
            let decided = model.decide(built, &world.queues, &options, now);
            let figures = model.record_cycle(&decided, &options, now);
            assert_eq!(figures.len(), world.queues.len());
            for (f, (q, outcome)) in figures
                .iter()
                .zip(decided.decisions.queues.iter_enumerated())
            {
                let queue = &decided.built.snapshot.queues[q];
                assert_eq!(f.queue, queue.name);
                assert_eq!(f.effective_weight, outcome.effective_weight);
                assert_eq!(f.fair_share, outcome.fair_share);
                assert_eq!(f.allocated, outcome.allocated);
                assert_eq!(f.pending_pods, decided.built.usage[q].pending_pods);
                assert!(f.oldest_wait_s >= 0.0);
            }
            charged.push(model.book.shares(|q| decided.params_of(&options, q), now));
            now += 60.0;
        }
        // The first cycle only remembers the rates; the second charges the minute between them.
        assert!(charged[0].values().all(|s| s.usage_share == 0.0));
        let running: Vec<&String> = charged[1]
            .iter()
            .filter(|(_, s)| s.usage_share > 0.0)
            .map(|(name, _)| name)
            .collect();
        assert!(
            !running.is_empty(),
            "a minute of running pods is charged: {charged:?}"
        );
    }

    #[test]
    fn the_floor_is_minweight_times_the_base_weight() {
        assert!(at_min_weight(0.3, 3.0, 0.1));
        assert!(!at_min_weight(0.31, 3.0, 0.1));
        assert!(at_min_weight(0.0, 3.0, 0.0));
        assert!(!at_min_weight(f64::NAN, 3.0, 0.1));
    }

    #[test]
    fn the_floor_is_met_within_rounding_and_not_above_it() {
        assert!(at_min_weight(0.1, 1.0, 0.1));
        assert!(at_min_weight(0.2 * (1.0 + 1e-12), 2.0, 0.1));
        assert!(!at_min_weight(0.11, 1.0, 0.1));
        assert!(!at_min_weight(f64::NAN, 1.0, 0.1));
        // A floor given outside [0, 1] is read as its nearest end.
        assert!(at_min_weight(1.0, 1.0, 3.0));
    }
}
