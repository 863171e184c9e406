//! Running pods grouped into the workloads they belong to. Preemption takes or spares a workload
//! whole: evicting one pod of a gang stops all of it, so every guard must see the gang's full
//! size and the work it would lose.

use crate::labels::Tier;
use crate::snapshot::{QueueId, Snapshot};

/// A running workload: one pod, or every running pod of a gang.
#[derive(Debug, Clone, PartialEq)]
pub struct RunningWorkload {
    /// `RunningPod::workload`, shared by its pods.
    pub id: String,
    /// The queue charged for it (its first pod's, in UID order).
    pub queue: QueueId,
    /// Indices into `Snapshot::running`, in UID order.
    pub pods: Vec<usize>,
    /// GPU-equivalents held by all its pods.
    pub size: f64,
    /// The most important tier among its pods: a gang is as protected as its best pod.
    pub tier: Tier,
    /// When its most recently started pod started: `minRunTime` protects the whole workload
    /// until its youngest pod has run that long.
    pub latest_start: f64,
    /// GPU-seconds delivered since its pods started: the work an eviction throws away.
    pub work: f64,
    /// When it was queued: its earliest pod's `RunningPod::queued_at`.
    pub queued_at: f64,
}

/// Groups `pods` (indices into `snapshot.running`, already in canonical UID order and already
/// filtered to valid queues and nodes) by workload. `size_of` gives a pod's GPU-equivalents.
/// Returns the workloads, in order of first appearance, and each running pod's workload index
/// (`usize::MAX` for pods not in `pods`).
pub fn group_running(
    snapshot: &Snapshot,
    pods: &[usize],
    size_of: impl Fn(usize) -> f64,
) -> (Vec<RunningWorkload>, Vec<usize>) {
    // Keyed by workload identities the cluster chose; foldhash is seeded per process and much
    // cheaper than SipHash over tens of thousands of running pods.
    // Sized for one workload per pod, the usual case, so that neither grows while filled.
    let mut index: foldhash::HashMap<&str, usize> =
        foldhash::HashMap::with_capacity_and_hasher(pods.len(), Default::default());
    let mut workloads: Vec<RunningWorkload> = Vec::with_capacity(pods.len());
    let mut of_pod = vec![usize::MAX; snapshot.running.len()];
    for &i in pods {
        let pod = &snapshot.running[i];
        let key = pod.workload_id();
        let size = size_of(i);
        let ran_for = (snapshot.now - pod.started_at).max(0.0);
        let work = if ran_for.is_finite() {
            size * ran_for
        } else {
            0.0
        };
        let w = *index.entry(key).or_insert_with(|| {
            workloads.push(RunningWorkload {
                id: key.to_owned(),
                queue: pod.queue,
                pods: Vec::new(),
                size: 0.0,
                tier: pod.tier,
                latest_start: f64::NEG_INFINITY,
                work: 0.0,
                queued_at: f64::INFINITY,
            });
            workloads.len() - 1
        });
        let workload = &mut workloads[w];
        workload.pods.push(i);
        workload.size += size;
        workload.tier = workload.tier.min(pod.tier);
        workload.latest_start = workload.latest_start.max(pod.started_at);
        workload.work += work;
        workload.queued_at = workload.queued_at.min(pod.queued_at);
        of_pod[i] = w;
    }
    (workloads, of_pod)
}
