//! Sends what `plan` decided: release patches, evictions, deletions of pods that never bound,
//! Queue status, Events. Every write first checks leadership, so a replica that lost the lease
//! stops at the next request.

use gpufair_api::QueueStatus;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use serde_json::json;
use tokio::time::Instant;

use crate::budgets::shortfall;
use crate::kube_api::{ControllerApi, Event, EventType, KubeControllerApi};
use crate::leader::{Leadership, NotLeader};
use crate::plan::{Eviction, PodRelease};
use crate::snapshot::PodRef;
use crate::token_bucket::{ReleaseLimit, TokenBucket};

/// Why a request did not happen or failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    #[error(
        "pod {namespace}/{name} changed since it was read (the patch's test failed); it is re-read"
    )]
    Changed { namespace: String, name: String },
    #[error("eviction of {workload} refused by a disruption budget ({why}); retried later")]
    Blocked { workload: String, why: String },
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// How an eviction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionOutcome {
    /// Every pod is evicted (or already gone).
    Evicted,
    /// Some pods went, the rest were refused: they are retried every cycle until gone, so the
    /// workload is never left half-running on purpose.
    Partial { remaining: Vec<PodRef> },
}

/// Paces releases with a [`TokenBucket`]: up to `burst` at once, then `rate` per second.
pub struct RateLimiter {
    bucket: TokenBucket,
}

impl RateLimiter {
    /// A full bucket, so the first `burst` releases go out without waiting.
    pub fn new(limit: ReleaseLimit) -> Self {
        Self {
            bucket: TokenBucket::new(limit, Instant::now().into_std()),
        }
    }

    /// Takes the next release's token; returns how long to wait before sending it.
    pub fn reserve(&mut self) -> std::time::Duration {
        self.bucket.take(Instant::now().into_std())
    }
}

fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// The client side of applying decisions.
#[derive(Clone)]
pub struct Applier {
    api: KubeControllerApi,
    leadership: Leadership,
}

pub fn object_reference(pod: &PodRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.to_string()),
        name: Some(pod.name.to_string()),
        uid: Some(pod.uid.to_string()),
        ..ObjectReference::default()
    }
}

impl Applier {
    pub fn new(api: KubeControllerApi, leadership: Leadership) -> Self {
        Self { api, leadership }
    }

    /// The API, for writers kept in their own modules (WorkloadFamily status).
    pub(crate) fn api(&self) -> &KubeControllerApi {
        &self.api
    }

    /// Fails when this replica no longer leads.
    pub(crate) fn check_leader(&self) -> Result<(), NotLeader> {
        self.leadership.check()
    }

    /// Pins and releases one pod with its JSON patch. A failed `test` (422) is reported as
    /// `Changed`: the pod differs from the cached copy, so the caller waits for the cache to
    /// show a newer version and never retries blind. A 409 is not that: the patch tests the
    /// resourceVersion itself and sets none, so a conflict is the server's own (storage
    /// contention) and says nothing about the cache, which may never change; it is an ordinary
    /// failure, retried next cycle from the cache.
    pub async fn release(&self, release: &PodRelease) -> Result<(), ApplyError> {
        self.leadership.check()?;
        let patch: json_patch::Patch =
            serde_json::from_value(release.json_patch()).map_err(kube::Error::SerdeError)?;
        let result = self
            .api
            .patch_pod(&release.pod().namespace, &release.pod().name, patch)
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(err) if status_code(&err) == Some(422) => Err(ApplyError::Changed {
                namespace: release.pod().namespace.to_string(),
                name: release.pod().name.to_string(),
            }),
            Err(err) => Err(err.into()),
        }
    }

    /// Evicts a whole workload through the Eviction API. A workload of several pods first has its
    /// budgets checked for all its pods at once; then every pod is evicted as a dry run, so a
    /// disruption budget that refuses any of them (429) stops the eviction before anything is
    /// lost. A refusal during the real pass (a race with another eviction) leaves the rest to
    /// be retried.
    pub async fn evict(
        &self,
        workload: &str,
        pods: &[PodRef],
    ) -> Result<EvictionOutcome, ApplyError> {
        if pods.len() > 1
            && let Some(why) = self.budget_shortfall(pods).await?
        {
            return Err(ApplyError::Blocked {
                workload: workload.to_string(),
                why,
            });
        }
        for pod in pods {
            self.leadership.check()?;
            match self.evict_pod(pod, true).await {
                Ok(_) => {}
                Err(err) if status_code(&err) == Some(404) => {}
                Err(err) if status_code(&err) == Some(429) => {
                    return Err(ApplyError::Blocked {
                        workload: workload.to_string(),
                        why: format!("429 on pod {}/{}", pod.namespace, pod.name),
                    });
                }
                Err(err) => return Err(err.into()),
            }
        }
        let mut remaining = Vec::new();
        for pod in pods {
            if !remaining.is_empty() {
                remaining.push(pod.clone());
                continue;
            }
            self.leadership.check()?;
            match self.evict_pod(pod, false).await {
                Ok(_) => {}
                Err(err) if status_code(&err) == Some(404) => {}
                Err(err) if status_code(&err) == Some(429) => remaining.push(pod.clone()),
                Err(err) => return Err(err.into()),
            }
        }
        Ok(if remaining.is_empty() {
            EvictionOutcome::Evicted
        } else {
            EvictionOutcome::Partial { remaining }
        })
    }

    /// Whether some disruption budget would refuse evicting all of `pods` at once, though it
    /// passes each pod's dry run on its own (see [`crate::budgets`]). Reads the pods' current
    /// labels and status and their namespaces' budgets.
    async fn budget_shortfall(&self, pods: &[PodRef]) -> Result<Option<String>, ApplyError> {
        let mut namespaces: Vec<&str> = pods.iter().map(|p| &*p.namespace).collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        for namespace in namespaces {
            self.leadership.check()?;
            let listed = self.api.managed_pods(namespace).await?;
            let members: Vec<Pod> = listed
                .into_iter()
                .filter(|p| {
                    let uid = p.metadata.uid.as_deref().unwrap_or_default();
                    pods.iter().any(|r| *r.uid == *uid)
                })
                .collect();
            let budgets = self.api.disruption_budgets(namespace).await?;
            if let Some(why) = shortfall(&budgets, &members) {
                return Ok(Some(why));
            }
        }
        Ok(None)
    }

    /// POSTs a complete `policy/v1` Eviction (kube's own helper leaves out apiVersion and kind)
    /// to the pod's eviction subresource; the pod's UID is a precondition, so a recreated pod of
    /// the same name is never evicted by mistake.
    async fn evict_pod(&self, pod: &PodRef, dry_run: bool) -> Result<(), kube::Error> {
        let eviction = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": &*pod.name, "namespace": &*pod.namespace},
            "deleteOptions": {"preconditions": {"uid": &*pod.uid}}
        });
        self.api
            .evict_pod(&pod.namespace, &pod.name, &eviction, dry_run)
            .await
    }

    /// Deletes a released pod that never bound, so its owner recreates it (gated again).
    pub async fn delete_unbound(&self, pod: &PodRef) -> Result<(), ApplyError> {
        self.leadership.check()?;
        match self
            .api
            .delete_pod(&pod.namespace, &pod.name, &pod.uid)
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if status_code(&err) == Some(404) => Ok(()),
            Err(err) => Err(err.into()),
        }
    }

    /// Writes a Queue's status through the status subresource, with the resourceVersion as
    /// precondition; on a conflict the current version is read and the write retried.
    pub async fn write_status(
        &self,
        queue: &str,
        resource_version: Option<String>,
        status: &QueueStatus,
    ) -> Result<(), ApplyError> {
        let mut version = resource_version;
        let mut attempts = 0;
        loop {
            self.leadership.check()?;
            attempts += 1;
            let mut body = json!({"status": status});
            if let Some(v) = &version {
                body["metadata"] = json!({"resourceVersion": v});
            }
            match self.api.patch_queue_status(queue, &body).await {
                Ok(_) => return Ok(()),
                Err(err) if status_code(&err) == Some(409) && attempts < 4 => {
                    tracing::debug!(queue, "Queue status conflict; re-reading");
                    let current = self.api.queue_status(queue).await?;
                    version = current.metadata.resource_version;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// Publishes an Event about a pod. Events are best effort: a failure is logged, not fatal.
    pub async fn event(
        &self,
        pod: &PodRef,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        related: Option<&PodRef>,
    ) {
        if self.leadership.check().is_err() {
            return;
        }
        // Event notes are limited to 1 kB.
        let mut note = note;
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: related.map(object_reference),
        };
        if let Err(err) = self.api.publish_event(&event, &object_reference(pod)).await {
            tracing::debug!(error = %err, pod = %pod.name, "could not publish an Event");
        }
    }
}

/// Pods of a gang an Event names one by one; the rest are counted (an Event note holds 1 kB).
const GANG_PODS_NAMED: usize = 3;

/// How an Event names a workload: by what people call it, with the UID after. A lone pod by
/// its namespace and name (its workload identity is only its UID), a gang by its
/// `<namespace>/<pod-group>` and size, then its first pods' names and UIDs.
pub fn workload_label(workload: &str, pods: &[PodRef]) -> String {
    match pods {
        [pod] if *pod.uid == *workload => {
            format!("pod {}/{} (uid {})", pod.namespace, pod.name, pod.uid)
        }
        _ => {
            let mut named: Vec<String> = pods
                .iter()
                .take(GANG_PODS_NAMED)
                .map(|p| format!("{} uid {}", p.name, p.uid))
                .collect();
            if pods.len() > GANG_PODS_NAMED {
                named.push(format!("{} more", pods.len() - GANG_PODS_NAMED));
            }
            format!(
                "gang {workload} ({} pod{}: {})",
                pods.len(),
                if pods.len() == 1 { "" } else { "s" },
                named.join(", ")
            )
        }
    }
}

/// An eviction's audit Events: on each victim pod and on each preemptor pod.
pub async fn announce_eviction(applier: &Applier, eviction: &Eviction) {
    let note = format!(
        "{} of queue {} is preempted for {} of queue {}: {}",
        workload_label(&eviction.workload, &eviction.pods),
        eviction.victim_queue,
        workload_label(&eviction.preemptor_workload, &eviction.preemptor_pods),
        eviction.preemptor_queue,
        eviction.reason
    );
    let first_preemptor = eviction.preemptor_pods.first();
    for pod in &eviction.pods {
        applier
            .event(
                pod,
                EventType::Warning,
                "Preempted",
                "Evict",
                note.clone(),
                first_preemptor,
            )
            .await;
    }
    let first_victim = eviction.pods.first();
    for pod in &eviction.preemptor_pods {
        applier
            .event(
                pod,
                EventType::Normal,
                "PreemptedOthers",
                "Evict",
                note.clone(),
                first_victim,
            )
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_name_lone_pods_by_name_and_gangs_by_group() {
        let pod = PodRef::new("research", "sweep-1", "0b6f-uid");
        assert_eq!(
            workload_label("0b6f-uid", std::slice::from_ref(&pod)),
            "pod research/sweep-1 (uid 0b6f-uid)"
        );
        let other = PodRef::new("research", "train-1", "77aa-uid");
        assert_eq!(
            workload_label("research/train", &[pod.clone(), other.clone()]),
            "gang research/train (2 pods: sweep-1 uid 0b6f-uid, train-1 uid 77aa-uid)"
        );
        let five = [pod.clone(), other.clone(), pod.clone(), other, pod];
        assert_eq!(
            workload_label("research/train", &five),
            "gang research/train (5 pods: sweep-1 uid 0b6f-uid, train-1 uid 77aa-uid, sweep-1 uid 0b6f-uid, 2 more)"
        );
    }
}
