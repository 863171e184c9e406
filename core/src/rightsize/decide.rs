//! The admission-time decision: rewrite an opted-in whole-GPU pod to a slice, or say why not.

use std::collections::BTreeMap;

use crate::labels::LabelError;
use crate::mutation::{AdmissionPolicy, Mutation, PodFacts, QueueFacts, quantity_is_zero};

use super::family::{family_of, parse_opt_in};
use super::history::FamilyHistory;
use super::slices::{RightSizePolicy, choose_slice, needed_bytes, pool_slices};

/// Records what right-sizing did to the pod, or why it declined.
pub const RIGHT_SIZE_RESULT_ANNOTATION: &str = "gpufair.io/right-size-result";

/// Read access to family histories, however they are stored.
pub trait FamilyLookup {
    fn history(&self, namespace: &str, family: &str) -> Option<FamilyHistory>;
}

impl FamilyLookup for BTreeMap<(String, String), FamilyHistory> {
    fn history(&self, namespace: &str, family: &str) -> Option<FamilyHistory> {
        self.get(&(namespace.to_string(), family.to_string()))
            .copied()
    }
}

/// A rewrite to a slice.
#[derive(Debug, Clone, PartialEq)]
pub struct RightSizeRewrite {
    /// Index into `PodFacts::containers`.
    pub container: usize,
    pub from: String,
    pub to: String,
    pub family: String,
    pub history: FamilyHistory,
    pub needed_bytes: u64,
    pub slice_bytes: u64,
}

/// Why an opted-in pod was left as it asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RightSizeDecline {
    pub reason: String,
}

/// The outcome for one pod.
#[derive(Debug, Clone, PartialEq)]
pub enum RightSize {
    /// The pod did not opt in, or was already decided (a reinvocation): nothing to do.
    NotRequested,
    Declined(RightSizeDecline),
    Rewrite(RightSizeRewrite),
}

fn gib(bytes: f64) -> String {
    format!("{:.1} GiB", bytes / f64::from(1u32 << 30))
}

impl RightSize {
    /// The annotation value and the warning shown to the user (the same sentence).
    pub fn message(&self) -> Option<String> {
        match self {
            RightSize::NotRequested => None,
            RightSize::Declined(d) => Some(format!("right-size declined: {}", d.reason)),
            RightSize::Rewrite(r) => Some(format!(
                "right-sized: {} replaced by {} ({}): family {} peaks at {} smoothed over {} \
                 pods, {} with headroom",
                r.from,
                r.to,
                gib(r.slice_bytes as f64),
                r.family,
                gib(r.history.smoothed_peak_bytes),
                r.history.samples,
                gib(r.needed_bytes as f64),
            )),
        }
    }

    /// What the webhook changes on the pod: the resource in the one container, and the
    /// annotation in every case but `NotRequested`.
    pub fn mutations(&self, pod: &PodFacts) -> Vec<Mutation> {
        let mut out = Vec::new();
        if let RightSize::Rewrite(r) = self {
            let container = pod.containers.get(r.container);
            out.push(Mutation::ReplaceGpuResource {
                container: r.container,
                from: r.from.clone(),
                to: r.to.clone(),
                requests: container.is_some_and(|c| c.requests.contains_key(&r.from)),
                limits: container.is_some_and(|c| c.limits.contains_key(&r.from)),
            });
        }
        if let Some(message) = self.message()
            && pod.annotations.get(RIGHT_SIZE_RESULT_ANNOTATION) != Some(&message)
        {
            out.push(Mutation::SetAnnotation {
                key: RIGHT_SIZE_RESULT_ANNOTATION.to_string(),
                value: message,
            });
        }
        out
    }
}

fn decline(reason: impl Into<String>) -> Result<RightSize, LabelError> {
    Ok(RightSize::Declined(RightSizeDecline {
        reason: reason.into(),
    }))
}

/// The container asking for exactly one whole GPU, when that is the pod's only GPU request.
fn single_whole_gpu(
    pod: &PodFacts,
    admission: &AdmissionPolicy,
    whole: &str,
) -> Result<usize, String> {
    let mut found = None;
    for (index, container) in pod.containers.iter().enumerate() {
        for (name, quantity) in container.requests.iter().chain(&container.limits) {
            if !admission.is_gpu_resource(name) || quantity_is_zero(quantity) {
                continue;
            }
            if name != whole || quantity.trim() != "1" {
                return Err(format!(
                    "container {:?} asks for {name}: {quantity}; only a pod asking for one \
                     whole {whole} is right-sized",
                    container.name
                ));
            }
            match found {
                Some(other) if other != index => {
                    return Err(format!(
                        "more than one container asks for {whole}; only a pod asking for one \
                         whole GPU is right-sized"
                    ));
                }
                _ => found = Some(index),
            }
        }
    }
    found.ok_or_else(|| format!("the pod asks for no {whole}"))
}

/// Decides right-sizing for `pod`, admitted into `queue`. A bad `gpufair.io/family` or
/// `gpufair.io/right-size` value is an error (the pod is denied), whether or not it opted in.
pub fn right_size<F: FamilyLookup + ?Sized>(
    pod: &PodFacts,
    queue: &QueueFacts,
    admission: &AdmissionPolicy,
    policy: &RightSizePolicy,
    families: &F,
) -> Result<RightSize, LabelError> {
    let family = family_of(&pod.labels, pod.owner.as_ref())?;
    if !parse_opt_in(&pod.labels)? || pod.annotations.contains_key(RIGHT_SIZE_RESULT_ANNOTATION) {
        return Ok(RightSize::NotRequested);
    }
    let container = match single_whole_gpu(pod, admission, &policy.whole_gpu_resource) {
        Ok(index) => index,
        Err(reason) => return decline(reason),
    };
    let Some(family) = family else {
        return decline(
            "the pod has no family: label it gpufair.io/family or create it through a \
             controller (Job, Deployment, ...)",
        );
    };
    let offers = match pool_slices(policy, queue) {
        Some(pool) if !pool.slices.is_empty() => &pool.slices,
        _ => {
            return decline(format!(
                "the node pool of Queue {:?} offers no MIG profile or shared slice \
                 (rightSizing.pools)",
                queue.name
            ));
        }
    };
    let history = families
        .history(&pod.namespace, &family)
        .unwrap_or_default();
    if history.samples < policy.min_samples.max(1) {
        return decline(format!(
            "family {family} has {} of the {} pods of history needed",
            history.samples,
            policy.min_samples.max(1)
        ));
    }
    let needed = needed_bytes(history.smoothed_peak_bytes, policy.headroom_percent);
    let Some(slice) = choose_slice(needed, offers) else {
        return decline(format!(
            "family {family} peaks at {}, {} with headroom: no slice of Queue {:?}'s pool is \
             that large",
            gib(history.smoothed_peak_bytes),
            gib(needed as f64),
            queue.name
        ));
    };
    Ok(RightSize::Rewrite(RightSizeRewrite {
        container,
        from: policy.whole_gpu_resource.clone(),
        to: slice.resource.clone(),
        family,
        history,
        needed_bytes: needed,
        slice_bytes: slice.memory_bytes,
    }))
}
