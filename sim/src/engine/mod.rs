//! The discrete-event loop: arrivals, job ends and decision cycles, in time order.
//!
//! A cycle runs on the `cycle` grid after anything changed (an arrival or an end), and every
//! `resync` while jobs wait, so time-dependent policies see their history move. Evictions take
//! effect at once; the evicted job loses its progress and waits again.

pub mod events;
pub mod world;

use events::EndQueue;
use world::{Phase, StartError, World};

use crate::metrics::{Curves, PolicyReport, Recorder, summarize};
use crate::policy;
use crate::scenario::{PolicyName, Scenario};
use gpufair_core::labels::Tier;

/// One policy's run over a scenario.
pub struct PolicyRun {
    pub report: PolicyReport,
    pub curves: Curves,
}

#[derive(Debug, thiserror::Error)]
#[error("policy {policy} at t={time:.0}s: {source}")]
pub struct EngineError {
    pub policy: PolicyName,
    pub time: f64,
    pub source: StartError,
}

fn next_grid(t: f64, step: f64) -> f64 {
    ((t / step).floor() + 1.0) * step
}

/// Simulates `scenario` under one policy; `progress` is told the simulated time now and then.
pub fn simulate(
    scenario: &Scenario,
    name: PolicyName,
    progress: &mut dyn FnMut(f64),
) -> Result<PolicyRun, EngineError> {
    let mut world = World::new(scenario);
    let mut policy = policy::build(name, scenario);
    let mut recorder = Recorder::new(&world);
    let mut ends = EndQueue::default();
    let mut next_arrival = 0usize;
    let mut next_cycle: Option<f64> = None;
    let horizon = scenario.duration_s;
    let jobs = &scenario.jobs;
    let mut last_progress = 0.0;

    loop {
        let arrival_at = jobs.get(next_arrival).map_or(f64::INFINITY, |j| j.submit_s);
        let end_at = ends.next_time().unwrap_or(f64::INFINITY);
        let cycle_at = next_cycle.unwrap_or(f64::INFINITY);
        let t = arrival_at.min(end_at).min(cycle_at);
        if t >= horizon {
            break;
        }
        recorder.advance(&world, t);
        policy.advance(&world, t);
        world.now = t;
        let mut changed = false;

        while let Some((job, epoch)) = ends.pop_due(t) {
            if world.jobs[job].phase == Phase::Running && world.jobs[job].epoch == epoch {
                world.finish(job);
                policy.on_stop(&world, job, false);
                changed = true;
            }
        }
        while next_arrival < jobs.len() && jobs[next_arrival].submit_s <= t {
            world.arrive(next_arrival);
            policy.on_arrival(&world, next_arrival);
            next_arrival += 1;
            changed = true;
        }

        if next_cycle.is_some_and(|c| c <= t) {
            next_cycle = None;
            let actions = policy.cycle(&world);
            recorder.on_cycle(t, policy.weights());
            for &(job, cause) in &actions.preempt {
                if world.jobs[job].phase == Phase::Running {
                    let lost = world.preempt(job);
                    let gap_filling = world.spec(job).tier() == Tier::Backfill;
                    recorder.on_preemption(t, lost, gap_filling, cause);
                    policy.on_stop(&world, job, true);
                }
            }
            for (job, placement) in actions.start {
                let first = world.jobs[job].first_start.is_none();
                world.start(job, placement).map_err(|source| EngineError {
                    policy: name,
                    time: t,
                    source,
                })?;
                if first {
                    recorder.on_first_start(&world, job);
                }
                policy.on_start(&world, job);
                ends.push(t + jobs[job].duration_s, job, world.jobs[job].epoch);
            }
            if !actions.preempt.is_empty() {
                next_cycle = Some(next_grid(t, scenario.cycle_s));
            } else if !world.pending_all.is_empty() {
                next_cycle = Some(t + scenario.resync_s);
            }
        }
        if changed {
            let grid = next_grid(t, scenario.cycle_s);
            if next_cycle.is_none_or(|c| c > grid) {
                next_cycle = Some(grid);
            }
        }
        if t - last_progress >= 3600.0 {
            progress(t);
            last_progress = t;
        }
    }
    recorder.advance(&world, horizon);
    recorder.hold_cost = policy.hold_cost(horizon);
    world.now = horizon;
    recorder.finish(&world);
    progress(horizon);
    let (report, curves) = summarize(name.as_str(), &world, &recorder);
    Ok(PolicyRun { report, curves })
}

#[cfg(test)]
mod tests {
    use super::next_grid;

    #[test]
    fn grid_is_strictly_after() {
        assert_eq!(next_grid(0.0, 30.0), 30.0);
        assert_eq!(next_grid(29.9, 30.0), 30.0);
        assert_eq!(next_grid(30.0, 30.0), 60.0);
    }
}
