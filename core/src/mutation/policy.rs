//! The admission settings the plan applies, in plain form (the api crate validates the YAML and
//! converts it into this).

use crate::labels::TaskType;

use super::types::{NodeSelectorTerm, Toleration};

/// Default gate that holds a pod until the controller releases it.
pub const DEFAULT_GATE: &str = "gpufair.io/admission";
/// Annotation recording the tier a pod was admitted with.
pub const TIER_ANNOTATION: &str = "gpufair.io/tier";
/// Annotation recording the deadline a pod was admitted with (RFC 3339, UTC).
pub const ADMITTED_DEADLINE_ANNOTATION: &str = "gpufair.io/admitted-deadline";
/// The grace period the API server fills in when a pod names none. It cannot be told apart from
/// a pod that asked for exactly this value, so the plan treats it as "not chosen".
pub const KUBERNETES_DEFAULT_GRACE_PERIOD_S: i64 = 30;

/// A resource name the webhook treats as a GPU: exact, or a prefix written with a trailing `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourcePattern {
    Exact(String),
    Prefix(String),
}

/// The GPU resources admission treats as such unless configured otherwise: whole GPUs, shared
/// slices and every MIG profile.
pub const DEFAULT_GPU_RESOURCES: [&str; 3] = [
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
];

impl ResourcePattern {
    /// `nvidia.com/mig-*` is a prefix pattern; anything else must match exactly.
    pub fn parse(text: &str) -> Self {
        match text.strip_suffix('*') {
            Some(prefix) => Self::Prefix(prefix.to_string()),
            None => Self::Exact(text.to_string()),
        }
    }

    pub fn matches(&self, name: &str) -> bool {
        match self {
            Self::Exact(exact) => name == exact,
            Self::Prefix(prefix) => name.len() > prefix.len() && name.starts_with(prefix.as_str()),
        }
    }
}

/// When an affinity preference applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleCondition {
    /// The pod's task type (after the default is applied) is this one.
    TaskType(TaskType),
    /// The pod's deadline is at most this many seconds away (a past deadline counts).
    DeadlineWithin { seconds: i64 },
}

/// A preferred node affinity term added to pods that meet `when`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityRule {
    pub when: RuleCondition,
    pub weight: i32,
    pub preference: NodeSelectorTerm,
}

/// Priority class per task type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierClasses {
    pub inference: String,
    pub train: String,
    pub processing: String,
}

impl TierClasses {
    pub fn for_task(&self, task: TaskType) -> &str {
        match task {
            TaskType::Inference => &self.inference,
            TaskType::Train => &self.train,
            TaskType::Processing => &self.processing,
        }
    }
}

impl Default for TierClasses {
    fn default() -> Self {
        Self {
            inference: "gpufair-realtime".into(),
            train: "gpufair-elastic".into(),
            processing: "gpufair-backfill".into(),
        }
    }
}

/// Everything the plan needs besides the pod and its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionPolicy {
    pub gpu_resources: Vec<ResourcePattern>,
    pub tier_classes: TierClasses,
    /// Task type of a pod without an `ai-task-type` label.
    pub default_task_type: TaskType,
    pub gate: String,
    pub affinity_rules: Vec<AffinityRule>,
    pub tolerations: Vec<Toleration>,
    /// Grace period given to training pods (time to checkpoint when preempted); `None` leaves
    /// pods as they are.
    pub train_grace_period_seconds: Option<i64>,
    /// Classes treated as if the pod named none, e.g. a cluster's `globalDefault` class, which
    /// the API server writes into every pod that names no class.
    pub replaceable_priority_classes: Vec<String>,
    /// Which opted-in whole-GPU pods move to a slice (`crate::rightsize`).
    pub right_sizing: crate::rightsize::RightSizePolicy,
}

impl AdmissionPolicy {
    /// The default GPU resources, tier classes, task type (`train`), gate and right-sizing,
    /// and nothing more: no affinity rules, tolerations, grace period or replaceable classes.
    /// What admission does to a pod before an admin adds any of those.
    pub fn bare() -> Self {
        Self {
            gpu_resources: DEFAULT_GPU_RESOURCES
                .into_iter()
                .map(ResourcePattern::parse)
                .collect(),
            tier_classes: TierClasses::default(),
            default_task_type: TaskType::Train,
            gate: DEFAULT_GATE.into(),
            affinity_rules: Vec::new(),
            tolerations: Vec::new(),
            train_grace_period_seconds: None,
            replaceable_priority_classes: Vec::new(),
            right_sizing: crate::rightsize::RightSizePolicy::default(),
        }
    }

    /// Whether `name` is one of the configured GPU resources.
    pub fn is_gpu_resource(&self, name: &str) -> bool {
        self.gpu_resources.iter().any(|p| p.matches(name))
    }
}
