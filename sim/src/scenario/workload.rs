//! Turning streams, explicit jobs and traces into one sorted list of jobs.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rand_core::{Rng, SeedableRng};
use rand_pcg::Pcg64;

use gpufair_core::labels::{TaskType, Urgency, UserTier};

use super::check::Check;
use super::gang::{equal_pods, node_sized_pods};
use super::labels::{WorkloadLabels, parse_labels};
use super::model::{DurationDistribution, QueueBy, ScenarioFile, TraceFile, TraceFormat};
use super::trace_files::{TraceReader, resolve};
use super::{JobSpec, PoolSpec, QueueSpec, ResourceSpec, ScenarioError};
use crate::trace::TraceJob;

/// The most jobs a scenario may generate: far beyond any real trace (Philly has 82,247), and a
/// clear error instead of exhausting memory when a stream's interarrival is a typo.
pub const MAX_JOBS: usize = 2_000_000;
/// The most pods a stream may generate in all, for the same reason (a stream of large gangs).
pub const MAX_STREAM_PODS: usize = 20_000_000;

/// A uniform draw in [0, 1).
pub(crate) fn uniform(rng: &mut Pcg64) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// An exponential draw with the given mean.
pub(crate) fn exponential(rng: &mut Pcg64, mean: f64) -> f64 {
    -mean * (1.0 - uniform(rng)).ln()
}

/// A job of `pods` with `labels`; its GPU-equivalents from its resource's value.
fn labelled_job(
    name: Option<String>,
    queue: usize,
    submit_s: f64,
    duration_s: f64,
    pods: Vec<u32>,
    labels: &WorkloadLabels,
    resources: &[ResourceSpec],
) -> JobSpec {
    let units: u32 = pods.iter().sum();
    JobSpec {
        name,
        queue,
        submit_s,
        duration_s,
        gpu_equivalents: f64::from(units) * resources[labels.resource].gpu_equivalents,
        pods,
        resource: labels.resource,
        task_type: labels.task_type,
        urgency: labels.urgency,
        user_tier: labels.user_tier,
        deadline_s: labels.deadline.map(|d| d.at(submit_s)),
    }
}

/// Every job of the scenario, sorted by submission, and whether any job carries labels.
#[allow(clippy::too_many_arguments)]
pub(super) fn build_jobs(
    check: &Check<'_>,
    file: &ScenarioFile,
    base_dir: &Path,
    pools: &[PoolSpec],
    queues: &[QueueSpec],
    resources: &[ResourceSpec],
    duration_s: f64,
    traces: TraceReader<'_>,
) -> Result<(Vec<JobSpec>, bool), ScenarioError> {
    let queue_index: HashMap<&str, usize> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.name.as_str(), i))
        .collect();
    let queue_names = || {
        queues
            .iter()
            .map(|q| q.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let find_queue = |key: &str, name: &str| -> Result<usize, ScenarioError> {
        queue_index.get(name).copied().ok_or_else(|| {
            check.fail(
                key,
                format!("unknown queue {name:?}: expected one of {}", queue_names()),
            )
        })
    };
    // Splits explicit GPUs (units of the job's resource) into pods and checks they fit a node
    // of the queue's pool.
    let pods_for = |key: &str,
                    queue: usize,
                    gpus: u32,
                    pods: Option<u32>,
                    resource: usize|
     -> Result<Vec<u32>, ScenarioError> {
        let pool = &pools[queues[queue].pool];
        let per_node = pool.units_per_node(resource);
        let in_pool = if resource == 0 {
            pool.gpus
        } else {
            per_node.saturating_mul(pool.gpus.div_ceil(pool.gpus_per_node))
        };
        let unit = if resource == 0 {
            "GPUs".to_string()
        } else {
            resources[resource].name.clone()
        };
        if gpus == 0 {
            return Err(check.fail(format!("{key}.gpus"), "expected at least 1 GPU"));
        }
        if gpus > in_pool {
            return Err(check.fail(
                format!("{key}.gpus"),
                format!(
                    "{gpus} {unit} can never fit pool {:?} of {in_pool} {unit}",
                    pool.name
                ),
            ));
        }
        let split = match pods {
            None => node_sized_pods(gpus, per_node),
            Some(n) => equal_pods(gpus, n).ok_or_else(|| {
                check.fail(
                    format!("{key}.pods"),
                    format!("expected a pod count that divides {gpus} GPUs evenly, found {n}"),
                )
            })?,
        };
        if split[0] > per_node {
            return Err(check.fail(
                format!("{key}.pods"),
                format!(
                    "pods of {} {unit} do not fit nodes of {per_node} {unit}",
                    split[0]
                ),
            ));
        }
        Ok(split)
    };

    // (submit, source order, job): the source order keeps ties deterministic.
    let mut jobs: Vec<JobSpec> = Vec::new();
    let mut labelled = false;
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, job) in file.workload.jobs.iter().enumerate() {
        let key = format!("workload.jobs[{i}]");
        let queue = find_queue(&format!("{key}.queue"), &job.queue)?;
        let duration = check.positive(&format!("{key}.duration"), job.duration.get())?;
        if let Some(name) = &job.name
            && names.insert(name.clone(), i).is_some()
        {
            return Err(check.fail(
                format!("{key}.name"),
                format!("job name {name:?} is used twice"),
            ));
        }
        let labels = parse_labels(
            check,
            &key,
            &job.labels(),
            resources,
            &pools[queues[queue].pool],
        )?;
        labelled |= labels.is_labelled();
        let pods = pods_for(&key, queue, job.gpus, job.pods, labels.resource)?;
        jobs.push(labelled_job(
            job.name.clone(),
            queue,
            job.submit.get(),
            duration,
            pods,
            &labels,
            resources,
        ));
    }

    for (i, stream) in file.workload.streams.iter().enumerate() {
        let key = format!("workload.streams[{i}]");
        let queue = find_queue(&format!("{key}.queue"), &stream.queue)?;
        let labels = parse_labels(
            check,
            &key,
            &stream.labels(),
            resources,
            &pools[queues[queue].pool],
        )?;
        labelled |= labels.is_labelled();
        let pods = pods_for(&key, queue, stream.gpus, stream.pods, labels.resource)?;
        let mean_gap = check.positive(&format!("{key}.interarrival"), stream.interarrival.get())?;
        let mean_duration = check.positive(&format!("{key}.duration"), stream.duration.get())?;
        let start = stream.start.map_or(0.0, |s| s.get());
        let end = stream.end.map_or(duration_s, |e| e.get());
        if end <= start {
            return Err(check.fail(format!("{key}.end"), "expected an end after the start"));
        }
        let distribution = stream
            .duration_distribution
            .unwrap_or(DurationDistribution::Fixed);
        let mut rng = Pcg64::seed_from_u64(
            file.seed ^ (0x9E37_79B9_7F4A_7C15_u64.wrapping_mul(i as u64 + 1)),
        );
        let mut t = start + exponential(&mut rng, mean_gap);
        let mut stream_pods = 0usize;
        while t < end {
            stream_pods += pods.len();
            if jobs.len() >= MAX_JOBS || stream_pods > MAX_STREAM_PODS {
                return Err(check.fail(
                    format!("{key}.interarrival"),
                    format!(
                        "this stream makes the scenario more than {MAX_JOBS} jobs or more \
                         than {MAX_STREAM_PODS} pods: expected a longer interarrival or a \
                         shorter stream"
                    ),
                ));
            }
            let duration = match distribution {
                DurationDistribution::Fixed => mean_duration,
                DurationDistribution::Exponential => exponential(&mut rng, mean_duration).max(1.0),
            };
            jobs.push(labelled_job(
                None,
                queue,
                t,
                duration,
                pods.clone(),
                &labels,
                resources,
            ));
            t += exponential(&mut rng, mean_gap);
        }
    }

    for (i, source) in file.workload.traces.iter().enumerate() {
        let key = format!("workload.traces[{i}]");
        trace_jobs(
            check,
            &key,
            source,
            base_dir,
            pools,
            queues,
            &queue_index,
            &mut jobs,
            traces,
        )?;
    }

    jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    Ok((jobs, labelled))
}

/// Maps a trace key to a queue: exact keys first, then numeric ranges `a-b`.
struct KeyMap {
    exact: BTreeMap<String, String>,
    ranges: Vec<(u64, u64, String)>,
}

impl KeyMap {
    fn new(
        check: &Check<'_>,
        key: &str,
        map: &BTreeMap<String, String>,
    ) -> Result<Self, ScenarioError> {
        let mut exact = BTreeMap::new();
        let mut ranges = Vec::new();
        for (from, queue) in map {
            let range = from.split_once('-').and_then(|(a, b)| {
                Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?))
            });
            match range {
                Some((lo, hi)) if lo <= hi => ranges.push((lo, hi, queue.clone())),
                Some(_) => {
                    return Err(check.fail(
                        format!("{key}.map.{from}"),
                        "expected a range low-high with low ≤ high",
                    ));
                }
                None => {
                    exact.insert(from.clone(), queue.clone());
                }
            }
        }
        Ok(Self { exact, ranges })
    }

    fn lookup<'a>(&'a self, trace_key: &'a str) -> Option<&'a str> {
        if self.exact.is_empty() && self.ranges.is_empty() {
            return Some(trace_key);
        }
        if let Some(queue) = self.exact.get(trace_key) {
            return Some(queue);
        }
        let number: u64 = trace_key.parse().ok()?;
        self.ranges
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&number))
            .map(|(_, _, q)| q.as_str())
    }
}

#[allow(clippy::too_many_arguments)]
fn trace_jobs(
    check: &Check<'_>,
    key: &str,
    source: &TraceFile,
    base_dir: &Path,
    pools: &[PoolSpec],
    queues: &[QueueSpec],
    queue_index: &HashMap<&str, usize>,
    jobs: &mut Vec<JobSpec>,
    traces: TraceReader<'_>,
) -> Result<(), ScenarioError> {
    let expected_by = match source.format {
        TraceFormat::Philly => QueueBy::Cluster,
        TraceFormat::Helios => QueueBy::User,
    };
    if source.queue_by != expected_by {
        return Err(check.fail(
            format!("{key}.queueBy"),
            format!(
                "a {} trace is grouped by {}",
                match source.format {
                    TraceFormat::Philly => "philly",
                    TraceFormat::Helios => "helios",
                },
                match expected_by {
                    QueueBy::Cluster => "cluster",
                    QueueBy::User => "user",
                }
            ),
        ));
    }
    let path = resolve(base_dir, &source.file);
    let read = traces(source.format, &path);
    let records: Vec<TraceJob> = read.map_err(|err| ScenarioError::Trace {
        scenario: check.path.to_path_buf(),
        key: format!("{key}.file"),
        source: err,
    })?;
    let map = KeyMap::new(check, key, &source.map)?;
    for (from, queue) in map
        .exact
        .iter()
        .chain(map.ranges.iter().map(|(_, _, q)| (q, q)))
    {
        if !queue_index.contains_key(queue.as_str()) {
            return Err(check.fail(
                format!("{key}.map.{from}"),
                format!("unknown queue {queue:?}"),
            ));
        }
    }
    let default_queue = match &source.default_queue {
        Some(name) => Some(*queue_index.get(name.as_str()).ok_or_else(|| {
            check.fail(
                format!("{key}.defaultQueue"),
                format!("unknown queue {name:?}"),
            )
        })?),
        None => None,
    };
    let from = source.from.map_or(0.0, |f| f.get());
    let until = source.until.map_or(f64::INFINITY, |u| u.get());
    let offset = source.offset.map_or(0.0, |o| o.get());
    for record in records {
        if record.gpus == 0 || record.submit_s < from || record.submit_s >= until {
            continue;
        }
        let queue = match map.lookup(&record.key).and_then(|name| queue_index.get(name).copied()) {
            Some(q) => q,
            None => default_queue.ok_or_else(|| ScenarioError::Trace {
                scenario: check.path.to_path_buf(),
                key: format!("{key}.map"),
                source: crate::trace::TraceError::malformed(
                    &path,
                    record.line,
                    format!(
                        "trace key {:?} maps to no queue: add it to the scenario's queues or map, or set defaultQueue",
                        record.key
                    ),
                ),
            })?,
        };
        let pool = &pools[queues[queue].pool];
        // A row asking for more nodes than any pool may have would cost gigabytes of pods.
        if record.gpus / pool.gpus_per_node > super::MAX_NODES_PER_POOL {
            return Err(ScenarioError::Trace {
                scenario: check.path.to_path_buf(),
                key: format!("{key}.file"),
                source: crate::trace::TraceError::malformed(
                    &path,
                    record.line,
                    format!(
                        "a job of {} GPUs needs more than {} nodes of {}",
                        record.gpus,
                        super::MAX_NODES_PER_POOL,
                        pool.gpus_per_node
                    ),
                ),
            });
        }
        // A trace says nothing of labels: every job is what an unlabelled pod is.
        jobs.push(JobSpec {
            name: None,
            queue,
            submit_s: record.submit_s - from + offset,
            duration_s: record.duration_s,
            gpu_equivalents: f64::from(record.gpus),
            pods: node_sized_pods(record.gpus, pool.gpus_per_node),
            resource: 0,
            task_type: TaskType::default(),
            urgency: Urgency::default(),
            user_tier: UserTier::default(),
            deadline_s: None,
        });
    }
    Ok(())
}
