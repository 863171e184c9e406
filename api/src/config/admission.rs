//! The `admission` section: what the webhook does to GPU pods.
//!
//! ```yaml
//! admission:
//!   gpuResources: [nvidia.com/gpu, nvidia.com/gpu.shared, "nvidia.com/mig-*"]
//!   tiers: {inference: gpufair-realtime, train: gpufair-elastic, processing: gpufair-backfill}
//!   defaultTaskType: train
//!   gate: gpufair.io/admission
//!   affinity:
//!     - {taskType: inference, weight: 50,
//!        preference: {matchExpressions: [{key: nvidia.com/mig.capable, operator: In, values: ["true"]}]}}
//!     - {deadlineWithin: 24h, weight: 80,
//!        preference: {matchExpressions: [{key: gpu-type, operator: In, values: [h100]}]}}
//!   tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
//!   trainTerminationGracePeriodSeconds: 300
//!   replaceablePriorityClasses: []
//! ```

use gpufair_core::duration::parse_duration;
use gpufair_core::labels::TaskType;
use gpufair_core::mutation::{
    AdmissionPolicy, AffinityRule, DEFAULT_GATE, DEFAULT_GPU_RESOURCES, NodeSelectorRequirement,
    NodeSelectorTerm, OP_DOES_NOT_EXIST, OP_EXISTS, OP_GT, OP_IN, OP_LT, OP_NOT_IN,
    ResourcePattern, RuleCondition, TierClasses, Toleration,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::right_sizing::RightSizingConfig;

/// The `admission` section.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct AdmissionConfig {
    /// Resource names that make a pod a GPU pod; a trailing `*` matches a prefix.
    pub gpu_resources: Vec<String>,
    /// Priority class per `ai-task-type`.
    pub tiers: TierMappingConfig,
    /// Task type of a pod without the `ai-task-type` label.
    pub default_task_type: String,
    /// Scheduling gate added to every GPU pod.
    pub gate: String,
    /// Preferred node affinity added by task type or deadline nearness.
    pub affinity: Vec<AffinityRuleConfig>,
    /// Tolerations added to every GPU pod (GPU nodes are usually tainted).
    pub tolerations: Vec<TolerationConfig>,
    /// Grace period given to training pods so they can checkpoint when preempted; null leaves
    /// pods as they are.
    pub train_termination_grace_period_seconds: Option<i64>,
    /// Classes treated as "no class named", e.g. a cluster's globalDefault PriorityClass.
    pub replaceable_priority_classes: Vec<String>,
    /// Right-sizing opted-in whole-GPU pods to a slice, from their family's history.
    pub right_sizing: RightSizingConfig,
}

/// `admission.tiers`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct TierMappingConfig {
    pub inference: String,
    pub train: String,
    pub processing: String,
}

impl Default for TierMappingConfig {
    fn default() -> Self {
        let classes = TierClasses::default();
        Self {
            inference: classes.inference,
            train: classes.train,
            processing: classes.processing,
        }
    }
}

/// One entry of `admission.affinity`: exactly one of `taskType` and `deadlineWithin`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AffinityRuleConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_type: Option<String>,
    /// A duration such as `24h`: applies to pods whose deadline is at most this far away.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_within: Option<String>,
    /// 1..=100, as in a pod's preferred node affinity.
    pub weight: i32,
    pub preference: PreferenceConfig,
}

/// A node selector term (only `matchExpressions`: node names are no preference).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreferenceConfig {
    pub match_expressions: Vec<RequirementConfig>,
}

/// A node selector requirement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequirementConfig {
    pub key: String,
    pub operator: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A toleration, as in a pod spec.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TolerationConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

fn expression(key: &str, values: &[&str]) -> PreferenceConfig {
    PreferenceConfig {
        match_expressions: vec![RequirementConfig {
            key: key.into(),
            operator: OP_IN.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }],
    }
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        Self {
            gpu_resources: DEFAULT_GPU_RESOURCES.map(String::from).to_vec(),
            tiers: TierMappingConfig::default(),
            default_task_type: "train".into(),
            gate: DEFAULT_GATE.into(),
            affinity: vec![
                // MIG slices suit inference: small, isolated, many per GPU.
                AffinityRuleConfig {
                    task_type: Some("inference".into()),
                    deadline_within: None,
                    weight: 50,
                    preference: expression("nvidia.com/mig.capable", &["true"]),
                },
                // Work due within a day goes to the fastest GPUs when it can.
                AffinityRuleConfig {
                    task_type: None,
                    deadline_within: Some("24h".into()),
                    weight: 80,
                    preference: expression("gpu-type", &["h100"]),
                },
            ],
            tolerations: vec![TolerationConfig {
                key: Some("nvidia.com/gpu".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..TolerationConfig::default()
            }],
            train_termination_grace_period_seconds: Some(300),
            replaceable_priority_classes: Vec::new(),
            right_sizing: RightSizingConfig::default(),
        }
    }
}

const RESOURCE_FORMS: &str = "a non-empty list of resource names such as nvidia.com/gpu, or \
                              prefixes ending in * such as nvidia.com/mig-*";
const CLASS_FORMS: &str = "a PriorityClass name: lowercase letters, digits, '-' and '.', \
                           at most 253 characters";
const GATE_FORMS: &str = "a qualified name such as gpufair.io/admission: an optional DNS \
                          prefix and '/', then at most 63 letters, digits, '-', '_' or '.'";
const RULE_FORMS: &str = "exactly one of taskType (train, inference or processing) or \
                          deadlineWithin (a duration such as 24h)";
const WEIGHT_FORMS: &str = "an integer from 1 to 100";
const REQUIREMENT_FORMS: &str = "a non-empty list of {key, operator, values} with operator In or \
                                 NotIn (one or more values), Exists or DoesNotExist (no values), \
                                 Gt or Lt (one integer value)";
const TOLERATION_FORMS: &str = "operator Equal or Exists (Exists takes no value; an empty key \
                                needs Exists), effect NoSchedule, PreferNoSchedule or NoExecute, \
                                tolerationSeconds only with NoExecute";

impl AdmissionConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.to_policy().map(|_| ())
    }

    /// The plain policy the mutation plan applies, after checking every value.
    pub fn to_policy(&self) -> Result<AdmissionPolicy, ConfigError> {
        if self.gpu_resources.is_empty() {
            return Err(ConfigError::out_of_range(
                "admission.gpuResources",
                "[]",
                RESOURCE_FORMS,
            ));
        }
        let mut gpu_resources = Vec::new();
        for name in &self.gpu_resources {
            let stem = name.strip_suffix('*').unwrap_or(name);
            if !stem.contains('/') || stem.contains('*') || stem.chars().any(char::is_whitespace) {
                return Err(ConfigError::out_of_range(
                    "admission.gpuResources",
                    format!("{name:?}"),
                    RESOURCE_FORMS,
                ));
            }
            gpu_resources.push(ResourcePattern::parse(name));
        }
        for (key, class) in [
            ("admission.tiers.inference", &self.tiers.inference),
            ("admission.tiers.train", &self.tiers.train),
            ("admission.tiers.processing", &self.tiers.processing),
        ] {
            if !is_dns_subdomain(class) {
                return Err(ConfigError::out_of_range(
                    key,
                    format!("{class:?}"),
                    CLASS_FORMS,
                ));
            }
        }
        for class in &self.replaceable_priority_classes {
            if !is_dns_subdomain(class) {
                return Err(ConfigError::out_of_range(
                    "admission.replaceablePriorityClasses",
                    format!("{class:?}"),
                    CLASS_FORMS,
                ));
            }
        }
        let default_task_type = TaskType::parse(&self.default_task_type).ok_or_else(|| {
            ConfigError::out_of_range(
                "admission.defaultTaskType",
                format!("{:?}", self.default_task_type),
                TaskType::FORMS,
            )
        })?;
        if !is_qualified_name(&self.gate) {
            return Err(ConfigError::out_of_range(
                "admission.gate",
                format!("{:?}", self.gate),
                GATE_FORMS,
            ));
        }
        let mut affinity_rules = Vec::new();
        for (index, rule) in self.affinity.iter().enumerate() {
            affinity_rules.push(rule.to_rule(index)?);
        }
        let mut tolerations = Vec::new();
        for (index, toleration) in self.tolerations.iter().enumerate() {
            tolerations.push(toleration.to_toleration(index)?);
        }
        if let Some(grace) = self.train_termination_grace_period_seconds
            && grace < 0
        {
            return Err(ConfigError::out_of_range(
                "admission.trainTerminationGracePeriodSeconds",
                grace,
                "whole seconds >= 0, or null to leave pods unchanged",
            ));
        }
        let right_sizing = self.right_sizing.to_policy(&gpu_resources)?;
        Ok(AdmissionPolicy {
            right_sizing,
            gpu_resources,
            tier_classes: TierClasses {
                inference: self.tiers.inference.clone(),
                train: self.tiers.train.clone(),
                processing: self.tiers.processing.clone(),
            },
            default_task_type,
            gate: self.gate.clone(),
            affinity_rules,
            tolerations,
            train_grace_period_seconds: self.train_termination_grace_period_seconds,
            replaceable_priority_classes: self.replaceable_priority_classes.clone(),
        })
    }
}

impl AffinityRuleConfig {
    fn to_rule(&self, index: usize) -> Result<AffinityRule, ConfigError> {
        let when = match (&self.task_type, &self.deadline_within) {
            (Some(task), None) => {
                RuleCondition::TaskType(TaskType::parse(task).ok_or_else(|| {
                    ConfigError::out_of_range(
                        "admission.affinity.taskType",
                        format!("{task:?} (rule {index})"),
                        RULE_FORMS,
                    )
                })?)
            }
            (None, Some(within)) => {
                let seconds = parse_duration(within).map_err(|_| {
                    ConfigError::out_of_range(
                        "admission.affinity.deadlineWithin",
                        format!("{within:?} (rule {index})"),
                        RULE_FORMS,
                    )
                })?;
                RuleCondition::DeadlineWithin {
                    seconds: seconds.round() as i64,
                }
            }
            _ => {
                return Err(ConfigError::out_of_range(
                    "admission.affinity",
                    format!(
                        "rule {index} with taskType and deadlineWithin both set or both absent"
                    ),
                    RULE_FORMS,
                ));
            }
        };
        if !(1..=100).contains(&self.weight) {
            return Err(ConfigError::out_of_range(
                "admission.affinity.weight",
                format!("{} (rule {index})", self.weight),
                WEIGHT_FORMS,
            ));
        }
        let requirements = &self.preference.match_expressions;
        let bad_requirement = |what: String| {
            ConfigError::out_of_range(
                "admission.affinity.preference.matchExpressions",
                format!("{what} (rule {index})"),
                REQUIREMENT_FORMS,
            )
        };
        if requirements.is_empty() {
            return Err(bad_requirement("[]".into()));
        }
        let mut match_expressions = Vec::new();
        for r in requirements {
            let values_ok = match r.operator.as_str() {
                OP_IN | OP_NOT_IN => !r.values.is_empty(),
                OP_EXISTS | OP_DOES_NOT_EXIST => r.values.is_empty(),
                OP_GT | OP_LT => r.values.len() == 1 && r.values[0].parse::<i64>().is_ok(),
                _ => false,
            };
            if r.key.is_empty() || !values_ok {
                return Err(bad_requirement(format!(
                    "{{key: {:?}, operator: {:?}, values: {:?}}}",
                    r.key, r.operator, r.values
                )));
            }
            match_expressions.push(NodeSelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone(),
            });
        }
        Ok(AffinityRule {
            when,
            weight: self.weight,
            preference: NodeSelectorTerm {
                match_expressions,
                match_fields: Vec::new(),
            },
        })
    }
}

impl TolerationConfig {
    fn to_toleration(&self, index: usize) -> Result<Toleration, ConfigError> {
        let operator = self.operator.as_deref().unwrap_or("Equal");
        let key_empty = self.key.as_deref().unwrap_or_default().is_empty();
        let value_empty = self.value.as_deref().unwrap_or_default().is_empty();
        let effect = self.effect.as_deref().unwrap_or_default();
        let ok = match operator {
            "Equal" => !key_empty,
            "Exists" => value_empty,
            _ => false,
        } && matches!(effect, "" | "NoSchedule" | "PreferNoSchedule" | "NoExecute")
            && (self.toleration_seconds.is_none() || effect == "NoExecute");
        if !ok {
            return Err(ConfigError::out_of_range(
                "admission.tolerations",
                format!(
                    "{{key: {:?}, operator: {:?}, value: {:?}, effect: {:?}}} (toleration {index})",
                    self.key, self.operator, self.value, self.effect
                ),
                TOLERATION_FORMS,
            ));
        }
        Ok(Toleration {
            key: self.key.clone(),
            operator: self.operator.clone(),
            value: self.value.clone(),
            effect: self.effect.clone(),
            toleration_seconds: self.toleration_seconds,
        })
    }
}

/// RFC 1123 subdomain, the form of PriorityClass names.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !part.starts_with('-')
                && !part.ends_with('-')
        })
}

/// Kubernetes qualified name (`prefix/name` or `name`), the form of scheduling gate names.
fn is_qualified_name(text: &str) -> bool {
    let (prefix, name) = match text.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, text),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.as_bytes()[name.len() - 1].is_ascii_alphanumeric();
    name_ok && prefix.is_none_or(is_dns_subdomain)
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    #[test]
    fn defaults_match_the_documented_example() {
        let documented = "admission:\n  gpuResources: [nvidia.com/gpu, nvidia.com/gpu.shared, \"nvidia.com/mig-*\"]\n  tiers: {inference: gpufair-realtime, train: gpufair-elastic, processing: gpufair-backfill}\n  defaultTaskType: train\n  gate: gpufair.io/admission\n  affinity:\n    - {taskType: inference, weight: 50, preference: {matchExpressions: [{key: nvidia.com/mig.capable, operator: In, values: [\"true\"]}]}}\n    - {deadlineWithin: 24h, weight: 80, preference: {matchExpressions: [{key: gpu-type, operator: In, values: [h100]}]}}\n  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n  trainTerminationGracePeriodSeconds: 300\n  replaceablePriorityClasses: []\n";
        let config = Config::from_yaml(documented, "c.yaml").unwrap();
        assert_eq!(config.admission, AdmissionConfig::default());
        let policy = config.admission.to_policy().unwrap();
        assert!(policy.is_gpu_resource("nvidia.com/mig-3g.40gb"));
        assert!(!policy.is_gpu_resource("nvidia.com/mig-"));
        assert!(!policy.is_gpu_resource("cpu"));
        assert_eq!(
            policy.affinity_rules[1].when,
            RuleCondition::DeadlineWithin { seconds: 86_400 }
        );
        assert_eq!(policy.default_task_type, TaskType::Train);
        // What an admin adds to the bare policy is all the defaults differ in.
        let bare_with_additions = AdmissionPolicy {
            affinity_rules: policy.affinity_rules.clone(),
            tolerations: policy.tolerations.clone(),
            train_grace_period_seconds: policy.train_grace_period_seconds,
            replaceable_priority_classes: policy.replaceable_priority_classes.clone(),
            ..AdmissionPolicy::bare()
        };
        assert_eq!(policy, bare_with_additions);
    }

    #[test]
    fn bad_values_name_the_key() {
        let cases = [
            ("admission: {gpuResources: []}", "admission.gpuResources"),
            ("admission: {gpuResources: ['*']}", "admission.gpuResources"),
            (
                "admission: {tiers: {train: Elastic}}",
                "admission.tiers.train",
            ),
            (
                "admission: {defaultTaskType: training}",
                "admission.defaultTaskType",
            ),
            ("admission: {gate: 'bad gate'}", "admission.gate"),
            ("admission: {gate: 'x/-y'}", "admission.gate"),
            (
                "admission: {affinity: [{weight: 10, preference: {matchExpressions: [{key: a, operator: Exists}]}}]}",
                "admission.affinity",
            ),
            (
                "admission: {affinity: [{taskType: train, weight: 0, preference: {matchExpressions: [{key: a, operator: Exists}]}}]}",
                "admission.affinity.weight",
            ),
            (
                "admission: {affinity: [{deadlineWithin: soon, weight: 5, preference: {matchExpressions: [{key: a, operator: Exists}]}}]}",
                "admission.affinity.deadlineWithin",
            ),
            (
                "admission: {affinity: [{taskType: train, weight: 5, preference: {matchExpressions: [{key: a, operator: In}]}}]}",
                "admission.affinity.preference.matchExpressions",
            ),
            (
                "admission: {tolerations: [{key: a, operator: Exists, value: b}]}",
                "admission.tolerations",
            ),
            (
                "admission: {tolerations: [{key: a, effect: NoSchedule, tolerationSeconds: 5}]}",
                "admission.tolerations",
            ),
            (
                "admission: {trainTerminationGracePeriodSeconds: -1}",
                "admission.trainTerminationGracePeriodSeconds",
            ),
            ("admission: {gatee: x}", "gatee"),
        ];
        for (yaml, key) in cases {
            let err = Config::from_yaml(yaml, "c.yaml").unwrap_err().to_string();
            assert!(err.contains(key), "{yaml}: {err}");
        }
    }

    #[test]
    fn qualified_names() {
        for good in ["gpufair.io/admission", "admission", "a.b/c_d.e-f"] {
            assert!(is_qualified_name(good), "{good}");
        }
        for bad in ["", "/x", "a/", "UPPER.io/x", "x/y/z", "-x"] {
            assert!(!is_qualified_name(bad), "{bad}");
        }
    }
}
