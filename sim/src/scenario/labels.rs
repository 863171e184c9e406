//! A workload's task type, urgency, user tier, deadline and resource, read with core's grammar
//! (the webhook's), so a value the webhook refuses on a pod is refused in a scenario too.

use gpufair_core::labels::{TaskType, Urgency, UserTier};
use gpufair_core::units::{ResourceTable, WHOLE_GPU_RESOURCE};

use super::check::Check;
use super::model::WorkloadLabelsFile;
use super::{PoolSpec, ResourceIndex, ResourceSpec, ScenarioError};

/// A workload's labels, parsed; a deadline still relative to submission or absolute.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkloadLabels {
    pub task_type: TaskType,
    pub urgency: Urgency,
    pub user_tier: UserTier,
    pub deadline: Option<DeadlineSpec>,
    pub resource: ResourceIndex,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DeadlineSpec {
    /// Seconds after submission.
    After(f64),
    /// Seconds of the scenario.
    At(f64),
}

impl DeadlineSpec {
    pub fn at(self, submit_s: f64) -> f64 {
        match self {
            Self::After(offset) => submit_s + offset,
            Self::At(at) => at,
        }
    }
}

impl WorkloadLabels {
    /// Whether any key differs from what an unlabelled pod gets.
    pub fn is_labelled(&self) -> bool {
        self.task_type != TaskType::default()
            || self.urgency != Urgency::default()
            || self.user_tier != UserTier::default()
            || self.deadline.is_some()
    }
}

fn enum_key<T>(
    check: &Check<'_>,
    key: String,
    value: Option<&str>,
    parse: fn(&str) -> Option<T>,
    forms: &str,
) -> Result<T, ScenarioError>
where
    T: Default,
{
    match value {
        None => Ok(T::default()),
        Some(text) => parse(text)
            .ok_or_else(|| check.fail(key, format!("invalid value {text:?}: expected {forms}"))),
    }
}

/// Reads the keys of the workload at `key` whose jobs run in `pool`.
pub fn parse_labels(
    check: &Check<'_>,
    key: &str,
    file: &WorkloadLabelsFile,
    resources: &[ResourceSpec],
    pool: &PoolSpec,
) -> Result<WorkloadLabels, ScenarioError> {
    let task_type = enum_key(
        check,
        format!("{key}.taskType"),
        file.task_type.as_deref(),
        TaskType::parse,
        TaskType::FORMS,
    )?;
    let urgency = enum_key(
        check,
        format!("{key}.urgency"),
        file.urgency.as_deref(),
        Urgency::parse,
        Urgency::FORMS,
    )?;
    let user_tier = enum_key(
        check,
        format!("{key}.userTier"),
        file.user_tier.as_deref(),
        UserTier::parse,
        UserTier::FORMS,
    )?;
    let deadline = match (file.deadline, file.deadline_at) {
        (Some(_), Some(_)) => {
            return Err(check.fail(
                format!("{key}.deadlineAt"),
                "expected either deadline (an offset from submission) or deadlineAt (a time of \
                 the scenario), not both",
            ));
        }
        (Some(after), None) => Some(DeadlineSpec::After(
            check.positive(&format!("{key}.deadline"), after.get())?,
        )),
        (None, Some(at)) => Some(DeadlineSpec::At(at.get())),
        (None, None) => None,
    };
    let resource = resource_of(check, key, file.resource.as_deref(), resources, pool)?;
    Ok(WorkloadLabels {
        task_type,
        urgency,
        user_tier,
        deadline,
        resource,
    })
}

/// The resource a workload asks for: valued by core's unit table, and offered by its pool.
fn resource_of(
    check: &Check<'_>,
    key: &str,
    name: Option<&str>,
    resources: &[ResourceSpec],
    pool: &PoolSpec,
) -> Result<ResourceIndex, ScenarioError> {
    let key = format!("{key}.resource");
    let name = name.unwrap_or(WHOLE_GPU_RESOURCE);
    ResourceTable::default()
        .gpu_equivalents(name)
        .map_err(|err| check.fail(&key, err.to_string()))?;
    let offered = |r: &usize| pool.units_per_node(*r) > 0;
    match resources.iter().position(|r| r.name == name) {
        Some(index) if offered(&index) => Ok(index),
        _ => {
            let names: Vec<&str> = (0..resources.len())
                .filter(offered)
                .map(|r| resources[r].name.as_str())
                .collect();
            Err(check.fail(
                key,
                format!(
                    "no node of pool {:?} offers {name:?}: expected one of {}",
                    pool.name,
                    names.join(", ")
                ),
            ))
        }
    }
}
