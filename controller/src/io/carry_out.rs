//! Sends what one cycle's step planned, in order, and gathers what became of each request for
//! the model. Every outcome is logged and counted here; the model only sees it as plain data.

use futures::StreamExt;

use crate::apply::{Applier, ApplyError, EvictionOutcome, announce_eviction};
use crate::family_status;
use crate::kube_api::EventType;
use crate::leader_model::EvictionSettled;
use crate::metrics::{ControllerMetrics, PreemptionLabels};
use crate::plan::Eviction;
use crate::release::ReleasePipeline;
use crate::step::{Actions, Expiry, Outcomes, StatusWrite};

/// Explanation Events and Queue status writes in flight at once.
const WRITES_IN_FLIGHT: usize = 16;

/// Sends `actions`, decided at `now`. Returns the outcomes, and false when a write found that
/// this replica no longer leads (what came after it was not sent).
pub async fn carry_out(
    actions: Actions,
    applier: &Applier,
    metrics: &ControllerMetrics,
    releases: &mut ReleasePipeline,
    now: f64,
) -> (Outcomes, bool) {
    let mut outcomes = Outcomes::default();
    for expiry in actions.expiries {
        if expire(applier, &expiry).await {
            outcomes.expired.push(expiry.pod.uid.to_string());
        }
    }
    for (workload, pods) in actions.retried_evictions {
        let result = applier.evict(&workload, &pods).await;
        match &result {
            Ok(_) | Err(ApplyError::Blocked { .. }) => {}
            Err(err) => tracing::warn!(error = %err, workload, "eviction failed"),
        }
        outcomes
            .retried_evictions
            .push((workload, pods, eviction_settled(&result)));
    }
    for eviction in actions.evictions {
        let settled = evict(applier, metrics, &eviction).await;
        outcomes.evictions.push((eviction, settled));
    }
    // Releases go to the pipeline; this cycle does not wait for them.
    for workload in actions.releases {
        releases.submit(workload, now);
    }
    // A few at a time: one after another, the first cycle of a large backlog spent a round
    // trip per waiting pod before the next cycle could run.
    futures::stream::iter(&actions.explanations)
        .for_each_concurrent(WRITES_IN_FLIGHT, |explanation| {
            applier.event(
                &explanation.pod,
                EventType::Normal,
                "Waiting",
                "Hold",
                explanation.message.clone(),
                None,
            )
        })
        .await;
    if !write_statuses(applier, actions.statuses).await {
        return (outcomes, false);
    }
    match family_status::write(applier, actions.families).await {
        Ok(written) => outcomes.families_written = written,
        Err(_) => return (outcomes, false),
    }
    (outcomes, true)
}

/// Tells an expired pod why, and deletes it when it is to be. True when it no longer holds
/// capacity; a failed delete leaves it to the next cycle.
async fn expire(applier: &Applier, expiry: &Expiry) -> bool {
    applier
        .event(
            &expiry.pod,
            EventType::Warning,
            "NotScheduledAfterRelease",
            "Expire",
            expiry.note.clone(),
            None,
        )
        .await;
    if expiry.delete
        && let Err(err) = applier.delete_unbound(&expiry.pod).await
    {
        tracing::warn!(error = %err, pod = %expiry.pod.name, "could not delete an unbound pod");
        return false;
    }
    true
}

/// Evicts one victim for its preemptor, counts it and tells both pods' owners.
async fn evict(
    applier: &Applier,
    metrics: &ControllerMetrics,
    eviction: &Eviction,
) -> EvictionSettled {
    let result = applier.evict(&eviction.workload, &eviction.pods).await;
    match &result {
        Ok(_) => {
            metrics
                .preemptions
                .get_or_create(&PreemptionLabels {
                    victim_queue: eviction.victim_queue.clone(),
                    preemptor_queue: eviction.preemptor_queue.clone(),
                })
                .inc();
            announce_eviction(applier, eviction).await;
        }
        Err(ApplyError::Blocked { workload, why }) => {
            tracing::info!(
                workload,
                why,
                "preemption blocked by a disruption budget; other victims are chosen for a minute"
            );
        }
        Err(err) => {
            tracing::warn!(error = %err, workload = %eviction.workload, "eviction failed")
        }
    }
    eviction_settled(&result)
}

/// An eviction's outcome as the model reads it.
fn eviction_settled(result: &Result<EvictionOutcome, ApplyError>) -> EvictionSettled {
    match result {
        Ok(EvictionOutcome::Evicted) => EvictionSettled::Evicted,
        Ok(EvictionOutcome::Partial { remaining }) => EvictionSettled::Partial {
            remaining: remaining.clone(),
        },
        Err(ApplyError::Blocked { .. }) => EvictionSettled::Blocked,
        Err(_) => EvictionSettled::Failed,
    }
}

/// Writes the Queue statuses a few at a time. False when one found this replica no longer
/// leads.
async fn write_statuses(applier: &Applier, statuses: Vec<StatusWrite>) -> bool {
    let results: Vec<_> = futures::stream::iter(statuses)
        .map(|write| async move {
            let result = applier
                .write_status(&write.queue, write.resource_version, &write.status)
                .await;
            (write.queue, result)
        })
        .buffer_unordered(WRITES_IN_FLIGHT)
        .collect()
        .await;
    let mut leading = true;
    for (queue, result) in results {
        match result {
            Ok(()) => {}
            Err(ApplyError::NotLeader(_)) => leading = false,
            Err(err) => tracing::warn!(error = %err, queue, "Queue status write failed"),
        }
    }
    leading
}
