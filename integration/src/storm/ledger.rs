//! The usage ledger in Queue status against the GPU-seconds pods actually ran (bound to
//! finished, as the monitor saw them), per queue.

use serde_json::Value;

use crate::cluster::KubeApi;
use crate::cluster::monitor::PodRecord;

/// (GPU-seconds charged over all buckets, the ledger's last sample time) from a Queue, as the
/// API server holds it now.
pub async fn stored(api: &KubeApi, queue: &str) -> Option<(f64, f64)> {
    let queue = api
        .get(crate::cluster::api::QUEUE_API_VERSION, "Queue", "", queue)
        .await
        .ok()
        .flatten()?;
    ledger_of(&queue)
}

/// (GPU-seconds charged over all buckets, time of the last sample) from a Queue's status.
pub fn ledger_of(queue: &Value) -> Option<(f64, f64)> {
    let ledger = &queue["status"]["ledger"];
    let charged = ledger["buckets"]
        .as_array()?
        .iter()
        .filter_map(|b| b["charged"].as_f64())
        .sum();
    Some((charged, ledger["lastSample"].as_f64()?))
}

/// GPU-seconds the pods of `namespace` ran: GPUs × (finished − bound). A pod bound but not
/// finished yet is an error: the comparison is made once everything has run.
pub fn ran(pods: &[PodRecord], namespace: &str) -> Result<f64, String> {
    let mut total = 0.0;
    for pod in pods.iter().filter(|p| p.namespace == namespace) {
        match (pod.bound, pod.finished) {
            (Some(bound), Some(finished)) => {
                total +=
                    f64::from(pod.gpus) * finished.saturating_duration_since(bound).as_secs_f64();
            }
            (Some(_), None) => return Err(format!("pod {} is still running", pod.key())),
            _ => {}
        }
    }
    Ok(total)
}

/// One queue's comparison.
#[derive(Debug, Clone)]
pub struct LedgerComparison {
    pub queue: String,
    /// GPU-seconds run.
    pub ran: f64,
    /// GPU-seconds the ledger charged.
    pub charged: f64,
    /// Largest `|charged − ran|` allowed: every kill's re-estimated stretch at full capacity.
    pub bound: f64,
}

impl LedgerComparison {
    pub fn error(&self) -> f64 {
        self.charged - self.ran
    }

    pub fn within_bound(&self) -> bool {
        self.error().abs() <= self.bound
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::{Duration, Instant};

    #[test]
    fn ledger_sums_every_bucket() {
        let queue = json!({"status": {"ledger": {"bucketSeconds": 3600, "lastSample": 12.5,
            "buckets": [{"start": 0, "charged": 4.0}, {"start": 3600, "charged": 2.5}]}}});
        assert_eq!(ledger_of(&queue), Some((6.5, 12.5)));
        assert_eq!(ledger_of(&json!({"status": {}})), None);
    }

    #[test]
    fn ran_counts_gpus_times_bound_to_finished_and_refuses_running_pods() {
        let start = Instant::now();
        let pod = |name: &str, gpus: u32, bound: Option<u64>, finished: Option<u64>| PodRecord {
            namespace: "q".into(),
            name: name.into(),
            gpus,
            bound: bound.map(|s| start + Duration::from_secs(s)),
            finished: finished.map(|s| start + Duration::from_secs(s)),
            ..PodRecord::default()
        };
        let pods = vec![
            pod("a", 2, Some(1), Some(4)),
            pod("b", 1, Some(2), Some(3)),
            pod("gated", 1, None, None),
        ];
        assert_eq!(ran(&pods, "q"), Ok(7.0));
        assert_eq!(ran(&pods, "other"), Ok(0.0));
        let running = vec![pod("c", 1, Some(1), None)];
        assert!(ran(&running, "q").unwrap_err().contains("q/c"));
        let comparison = LedgerComparison {
            queue: "q".into(),
            ran: 7.0,
            charged: 6.0,
            bound: 0.5,
        };
        assert_eq!(comparison.error(), -1.0);
        assert!(!comparison.within_bound());
    }
}
