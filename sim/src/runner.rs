//! Runs every selected policy over a scenario, two at a time on this machine's cores.

use std::sync::Mutex;
use std::time::Instant;

use crate::engine::{EngineError, PolicyRun, simulate};
use crate::scenario::{PolicyName, Scenario};

/// One policy's run and its wall-clock seconds, or why it failed.
type RunResult = Result<(PolicyRun, f64), EngineError>;

/// All policies' results, in the order asked for.
pub struct Comparison {
    pub runs: Vec<PolicyRun>,
    /// Wall-clock seconds per policy (not part of the JSON, which must be reproducible).
    pub elapsed_s: Vec<f64>,
}

/// Runs `policies` in parallel threads; `progress(simulated seconds advanced)` is called from
/// them as they go.
pub fn compare(
    scenario: &Scenario,
    policies: &[PolicyName],
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Comparison, EngineError> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(policies.len())
        .max(1);
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<RunResult>>> =
        Mutex::new((0..policies.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let index = {
                        let mut next = next.lock().unwrap_or_else(|e| e.into_inner());
                        let index = *next;
                        *next += 1;
                        index
                    };
                    let Some(&name) = policies.get(index) else {
                        break;
                    };
                    let started = Instant::now();
                    let mut reported = 0.0;
                    let result = simulate(scenario, name, &mut |t| {
                        progress(t - reported);
                        reported = t;
                    });
                    let elapsed = started.elapsed().as_secs_f64();
                    results.lock().unwrap_or_else(|e| e.into_inner())[index] =
                        Some(result.map(|run| (run, elapsed)));
                }
            });
        }
    });
    let mut runs = Vec::with_capacity(policies.len());
    let mut elapsed_s = Vec::with_capacity(policies.len());
    // Every index below policies.len() was taken by exactly one thread.
    for result in results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .flatten()
    {
        let (run, elapsed) = result?;
        runs.push(run);
        elapsed_s.push(elapsed);
    }
    Ok(Comparison { runs, elapsed_s })
}
