//! Reading and validating a scenario file.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use gpufair_core::params::{FairShareParams, ReleaseScoreParams};
use gpufair_core::schema::{ChargeBasisConfig, SchemaError};

use super::check::Check;
use super::model::ScenarioFile;
use super::node_shape::{node_slices, whole_gpus_only};
use super::trace_files::{TraceReader, read_trace_file};
use super::workload::build_jobs;
use super::{
    KaiParams, KueueAfsParams, PolicyName, PoolSpec, QueueSpec, ResourceSpec, Scenario,
    ScenarioError,
};

const DEFAULT_GPUS_PER_NODE: u32 = 8;
const DEFAULT_CYCLE_S: f64 = 30.0;
const DEFAULT_RESYNC_S: f64 = 300.0;
const DEFAULT_AFS_SAMPLING_S: f64 = 300.0;
/// The most nodes one pool may have: twenty times the largest trace's cluster, and a bound on
/// what one job's pods (one per node at most) can cost.
pub const MAX_NODES_PER_POOL: u32 = 100_000;

/// Reads a scenario file; relative trace paths are resolved against its folder.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, &text)
}

/// Parses scenario text as if it were read from `path`.
pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
    parse_with_traces(path, text, &read_trace_file)
}

/// Parses scenario text, reading the traces it names through `traces`.
pub fn parse_with_traces(
    path: &Path,
    text: &str,
    traces: TraceReader<'_>,
) -> Result<Scenario, ScenarioError> {
    let file: ScenarioFile = serde_yaml::from_str(text).map_err(|err| syntax(path, &err))?;
    validate(path, file, traces)
}

fn syntax(path: &Path, err: &serde_yaml::Error) -> ScenarioError {
    let mut message = err.to_string();
    if let Some(at) = message.rfind(" at line ") {
        message.truncate(at);
    }
    match err.location() {
        Some(location) => ScenarioError::Syntax {
            path: path.to_path_buf(),
            line: location.line(),
            column: location.column(),
            message,
        },
        None => ScenarioError::SyntaxNoLocation {
            path: path.to_path_buf(),
            message,
        },
    }
}

fn validate(
    path: &Path,
    file: ScenarioFile,
    traces: TraceReader<'_>,
) -> Result<Scenario, ScenarioError> {
    let check = Check { path };
    if file.name.trim().is_empty() {
        return Err(check.fail("name", "expected a non-empty name"));
    }
    let duration_s = check.positive("duration", file.duration.get())?;
    let warmup_s = file.warmup.map_or(0.0, |w| w.get());
    if warmup_s >= duration_s {
        return Err(check.fail("warmup", "expected a warm-up shorter than the duration"));
    }
    let cycle_s = check.positive("cycle", file.cycle.map_or(DEFAULT_CYCLE_S, |c| c.get()))?;
    let resync_s = check.positive("resync", file.resync.map_or(DEFAULT_RESYNC_S, |c| c.get()))?;

    let mut resources = whole_gpus_only();
    let pools = pools(&check, &file, &mut resources)?;
    let queues = queues(&check, &file, &pools)?;
    let fairshare = fairshare(&check, &file)?;
    let pool_fairshare = pool_fairshare(&check, &file, &pools)?;
    let preemption = file
        .preemption
        .to_params()
        .map_err(|e| schema(&check, &e))?;
    let release_score = match &file.release_score {
        None => ReleaseScoreParams::default(),
        Some(block) => block.to_params().map_err(|e| schema(&check, &e))?,
    };
    let policies = match &file.policies {
        None => PolicyName::ALL.to_vec(),
        Some(list) if list.is_empty() => {
            return Err(check.fail(
                "policies",
                format!("expected at least one of {}", PolicyName::FORMS),
            ));
        }
        Some(list) => {
            let mut names: Vec<PolicyName> = Vec::new();
            for name in list {
                if !names.contains(name) {
                    names.push(*name);
                }
            }
            names
        }
    };
    let kai = KaiParams {
        k: check.non_negative("rivals.kai.k", file.rivals.kai.k.unwrap_or(fairshare.k))?,
        window_s: check.positive(
            "rivals.kai.window",
            file.rivals
                .kai
                .window
                .map_or(fairshare.window_s, |w| w.get()),
        )?,
        half_life_s: match file.rivals.kai.half_life {
            Some(h) if h.get() > 0.0 => Some(h.get()),
            _ => None,
        },
        reclaim: file.rivals.kai.reclaim.unwrap_or(true),
        reclaim_min_runtime_s: file.rivals.kai.reclaim_min_runtime.map_or(0.0, |d| d.get()),
    };
    let decay_half_life = match fairshare.decay_rate_per_s() {
        rate if rate > 0.0 => std::f64::consts::LN_2 / rate,
        _ => fairshare.window_s,
    };
    let kueue_afs = KueueAfsParams {
        half_life_s: check.positive(
            "rivals.kueueAfs.halfLife",
            file.rivals
                .kueue_afs
                .half_life
                .map_or(decay_half_life, |h| h.get()),
        )?,
        sampling_interval_s: check.positive(
            "rivals.kueueAfs.samplingInterval",
            file.rivals
                .kueue_afs
                .sampling_interval
                .map_or(DEFAULT_AFS_SAMPLING_S, |s| s.get()),
        )?,
    };
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let (jobs, labelled) = build_jobs(
        &check, &file, &base_dir, &pools, &queues, &resources, duration_s, traces,
    )?;
    Ok(Scenario {
        name: file.name,
        description: file.description,
        path: path.to_path_buf(),
        duration_s,
        warmup_s,
        seed: file.seed,
        cycle_s,
        resync_s,
        pools,
        queues,
        fairshare,
        pool_fairshare,
        preemption,
        policies,
        resources,
        release_score,
        labelled,
        kai,
        kueue_afs,
        jobs,
    })
}

fn pools(
    check: &Check<'_>,
    file: &ScenarioFile,
    resources: &mut Vec<ResourceSpec>,
) -> Result<Vec<PoolSpec>, ScenarioError> {
    if file.cluster.pools.is_empty() {
        return Err(check.fail("cluster.pools", "expected at least one pool"));
    }
    let mut pools: Vec<PoolSpec> = Vec::new();
    for (i, pool) in file.cluster.pools.iter().enumerate() {
        let key = format!("cluster.pools[{i}]");
        if pools.iter().any(|p| p.name == pool.name) {
            return Err(check.fail(
                format!("{key}.name"),
                format!("pool {:?} is listed twice", pool.name),
            ));
        }
        if pool.gpus == 0 {
            return Err(check.fail(format!("{key}.gpus"), "expected at least 1 GPU"));
        }
        let gpus_per_node = pool.gpus_per_node.unwrap_or(DEFAULT_GPUS_PER_NODE);
        if gpus_per_node == 0 {
            return Err(check.fail(
                format!("{key}.gpusPerNode"),
                "expected at least 1 GPU per node",
            ));
        }
        if pool.gpus / gpus_per_node > MAX_NODES_PER_POOL {
            return Err(check.fail(
                format!("{key}.gpus"),
                format!(
                    "{} GPUs on nodes of {gpus_per_node} make more than {MAX_NODES_PER_POOL} \
                     nodes: expected fewer GPUs or larger nodes",
                    pool.gpus
                ),
            ));
        }
        let slices = node_slices(check, &key, pool, resources)?;
        let nodes = pool.gpus.div_ceil(gpus_per_node);
        let per_node: f64 = slices
            .iter()
            .map(|&(r, units)| f64::from(units) * resources[r].gpu_equivalents)
            .sum();
        pools.push(PoolSpec {
            name: pool.name.clone(),
            gpus: pool.gpus,
            gpus_per_node,
            slices,
            capacity: f64::from(pool.gpus) + f64::from(nodes) * per_node,
        });
    }
    Ok(pools)
}

fn queues(
    check: &Check<'_>,
    file: &ScenarioFile,
    pools: &[PoolSpec],
) -> Result<Vec<QueueSpec>, ScenarioError> {
    if file.queues.is_empty() {
        return Err(check.fail("queues", "expected at least one queue"));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut queues = Vec::new();
    for (i, queue) in file.queues.iter().enumerate() {
        let key = format!("queues[{i}]");
        if queue.name.trim().is_empty() {
            return Err(check.fail(format!("{key}.name"), "expected a non-empty queue name"));
        }
        if seen.insert(&queue.name, i).is_some() {
            return Err(check.fail(
                format!("{key}.name"),
                format!("queue {:?} is listed twice", queue.name),
            ));
        }
        let pool = match &queue.pool {
            None => 0,
            Some(name) => pools.iter().position(|p| &p.name == name).ok_or_else(|| {
                check.fail(
                    format!("{key}.pool"),
                    format!(
                        "unknown pool {name:?}: expected one of {}",
                        pools
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?,
        };
        let limit = match queue.limit {
            Some(l) => Some(check.positive(&format!("{key}.limit"), l)?),
            None => None,
        };
        queues.push(QueueSpec {
            name: queue.name.clone(),
            weight: check.positive(&format!("{key}.weight"), queue.weight.unwrap_or(1.0))?,
            guaranteed: check.non_negative(
                &format!("{key}.guaranteed"),
                queue.guaranteed.unwrap_or(0.0),
            )?,
            limit,
            pool,
            min_run_time_s: queue.min_run_time.map_or(0.0, |d| d.get()),
            initial_usage: check.fraction(
                &format!("{key}.initialUsage"),
                queue.initial_usage.unwrap_or(0.0),
            )?,
        });
    }
    Ok(queues)
}

/// A value core's schema refuses in the `fairshare`, `preemption` or `releaseScore` block.
fn schema(check: &Check<'_>, err: &SchemaError) -> ScenarioError {
    check.fail(err.key(), err.problem())
}

/// The shared `fairshare` parameters, read by core's schema as in the gpufair config file.
fn fairshare(check: &Check<'_>, file: &ScenarioFile) -> Result<FairShareParams, ScenarioError> {
    // A simulated pod uses all it is allocated, so charging measured use would silently be the
    // same as charging the allocation.
    if file.fairshare.charge_basis != ChargeBasisConfig::Allocated {
        return Err(check.fail(
            "fairshare.chargeBasis",
            "the simulator has no measured utilization (a simulated pod uses all it is \
             allocated): expected allocated",
        ));
    }
    file.fairshare.to_params().map_err(|e| schema(check, &e))
}

/// Each pool's own parameters: its `fairshare.pools` keys laid over the shared ones. A pool is
/// named by its `cluster.pools[].name`.
fn pool_fairshare(
    check: &Check<'_>,
    file: &ScenarioFile,
    pools: &[PoolSpec],
) -> Result<BTreeMap<String, FairShareParams>, ScenarioError> {
    for name in file.fairshare.pools.keys() {
        if !pools.iter().any(|p| &p.name == name) {
            let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            return Err(check.fail(
                format!("fairshare.pools.{name}"),
                format!(
                    "expected the name of a pool in cluster.pools: {}",
                    names.join(", ")
                ),
            ));
        }
    }
    file.fairshare.pool_params().map_err(|e| schema(check, &e))
}
