//! Pod mutation plans: what the admission webhook changes on a GPU pod being created.
//!
//! The webhook reads the AdmissionReview into [`PodFacts`], looks up queues, calls [`plan`] and
//! only translates the returned [`Mutation`]s into a JSON patch. Everything that decides — which
//! pods are touched, the queue, the priority class, the gate, node affinity, tolerations, what
//! is refused and why — lives here, where it is tested without a server.

mod admitted;
mod plan;
mod policy;
mod queue;
mod resources;
mod types;

#[cfg(test)]
mod tests;

pub use crate::quantity::is_zero as quantity_is_zero;
pub use admitted::{AdmittedLabels, read_admitted_labels};
pub use plan::{Decision, Mutation, Plan, plan};
pub use policy::{
    ADMITTED_DEADLINE_ANNOTATION, AdmissionPolicy, AffinityRule, DEFAULT_GATE,
    DEFAULT_GPU_RESOURCES, KUBERNETES_DEFAULT_GRACE_PERIOD_S, ResourcePattern, RuleCondition,
    TIER_ANNOTATION, TierClasses,
};
pub use queue::{QueueError, QueueLookup, resolve_queue};
pub use resources::requested_gpu_resource;
pub use types::{
    ContainerResources, NODE_NAME_FIELD, NodeSelectorRequirement, NodeSelectorTerm,
    OP_DOES_NOT_EXIST, OP_EXISTS, OP_GT, OP_IN, OP_LT, OP_NOT_IN, PodFacts,
    PreferredSchedulingTerm, QueueFacts, Toleration,
};
