//! `kubectl gpufair queues`: one line per queue, like `kubectl top`.

use gpufair_api::Queue;
use gpufair_core::time_text;
use serde::Serialize;

use crate::table::{number, percent, render};
use crate::time::{seconds, timestamp};

/// One queue as `queues` shows it. GPU-equivalents are the cycle's; shares are of the pool's
/// capacity over the ledger's window.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueRow {
    pub name: String,
    pub pool: Option<String>,
    pub weight: f64,
    pub effective_weight: Option<f64>,
    pub guaranteed: f64,
    pub limit: Option<f64>,
    /// This cycle's fair share, GPU-equivalents.
    pub fair_share: Option<f64>,
    pub allocated: Option<f64>,
    /// Decayed use ÷ decayed capacity over the window.
    pub usage_share: Option<f64>,
    /// Decayed entitlement ÷ decayed capacity over the window.
    pub fair_share_over_window: Option<f64>,
    pub waiting_workloads: Option<u64>,
    /// RFC 3339.
    pub oldest_waiting_since: Option<String>,
    pub service_order: Option<u32>,
    /// When the controller last wrote the figures, RFC 3339.
    pub observed_at: Option<String>,
}

impl QueueRow {
    pub fn of(queue: &Queue) -> Self {
        let status = queue.status.clone().unwrap_or_default();
        Self {
            name: queue.metadata.name.clone().unwrap_or_default(),
            pool: status.pool.clone(),
            weight: queue.spec.weight,
            effective_weight: status.effective_weight,
            guaranteed: queue.spec.guaranteed,
            limit: queue.spec.limit,
            fair_share: status.fair_share_gpus,
            allocated: status.allocated,
            usage_share: status.usage_share,
            fair_share_over_window: status.fair_share,
            waiting_workloads: status.waiting_workloads,
            oldest_waiting_since: status.oldest_waiting_since.as_ref().map(timestamp),
            service_order: status.service_order,
            observed_at: status.observed_at.as_ref().map(timestamp),
        }
    }
}

/// Every queue, ordered by pool, then by the pool's order of service, then by name.
pub fn rows(queues: &[Queue]) -> Vec<QueueRow> {
    let mut rows: Vec<QueueRow> = queues.iter().map(QueueRow::of).collect();
    rows.sort_by(|a, b| {
        let key = |r: &QueueRow| {
            (
                r.pool.is_none(),
                r.pool.clone(),
                r.service_order.unwrap_or(u32::MAX),
                r.name.clone(),
            )
        };
        key(a).cmp(&key(b))
    });
    rows
}

/// The table, with waits as "12 min" measured to `now` (Unix seconds).
pub fn table(rows: &[QueueRow], now: f64) -> String {
    if rows.is_empty() {
        return "No queues: create a Queue (kind Queue, apiVersion gpufair.io/v1alpha1) for each team.\n"
            .to_string();
    }
    let header = [
        "QUEUE",
        "POOL",
        "WEIGHT",
        "EFFECTIVE",
        "GUARANTEED",
        "FAIR-SHARE",
        "ALLOCATED",
        "USAGE/FAIR(WINDOW)",
        "WAITING",
        "OLDEST-WAIT",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            let oldest = row
                .oldest_waiting_since
                .as_deref()
                .and_then(seconds)
                .map_or_else(|| "-".to_string(), |t| time_text::duration(now - t));
            vec![
                row.name.clone(),
                row.pool.clone().unwrap_or_else(|| "-".into()),
                format!("{:.2}", row.weight),
                number(row.effective_weight),
                format!("{:.2}", row.guaranteed),
                number(row.fair_share),
                number(row.allocated),
                format!(
                    "{} / {}",
                    percent(row.usage_share),
                    percent(row.fair_share_over_window)
                ),
                row.waiting_workloads
                    .map_or_else(|| "-".to_string(), |n| n.to_string()),
                oldest,
            ]
        })
        .collect();
    render(&header, &cells)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub fn queue(name: &str, status: serde_json::Value) -> Queue {
        serde_json::from_value(json!({
            "apiVersion": "gpufair.io/v1alpha1", "kind": "Queue",
            "metadata": {"name": name},
            "spec": {"weight": 2, "guaranteed": 1},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn queues_print_one_line_each_in_order_of_service() {
        let queues = [
            queue(
                "vision",
                json!({"pool": "default", "serviceOrder": 2, "effectiveWeight": 1.5,
                       "fairShareGpus": 3.0, "allocated": 4.0, "usageShare": 0.5, "fairShare": 0.375,
                       "waitingWorkloads": 1, "oldestWaitingSince": "2026-12-02T02:00:00Z"}),
            ),
            queue(
                "llm",
                json!({"pool": "default", "serviceOrder": 1, "effectiveWeight": 2.5,
                       "fairShareGpus": 5.0, "allocated": 4.0, "usageShare": 0.25, "fairShare": 0.625,
                       "waitingWorkloads": 3, "oldestWaitingSince": "2026-12-02T02:48:00Z"}),
            ),
            queue("new", json!({})),
        ];
        let now = seconds("2026-12-02T03:00:00Z").unwrap();
        let text = table(&rows(&queues), now);
        assert_eq!(
            text,
            "\
QUEUE    POOL      WEIGHT   EFFECTIVE   GUARANTEED   FAIR-SHARE   ALLOCATED   USAGE/FAIR(WINDOW)   WAITING   OLDEST-WAIT
llm      default   2.00     2.50        1.00         5.00         4.00        25.0% / 62.5%        3         12 min
vision   default   2.00     1.50        1.00         3.00         4.00        50.0% / 37.5%        1         1 h
new      -         2.00     -           1.00         -            -           - / -                -         -
"
        );
        assert!(table(&[], now).starts_with("No queues"));
    }
}
