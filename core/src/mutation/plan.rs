//! The mutation plan: what the webhook does to a GPU pod being created.

use crate::labels::{
    DEADLINE_ANNOTATION, DEADLINE_LABEL, DeadlineSource, MANAGED_LABEL, QUEUE_LABEL, TaskType,
    parse_workload_labels,
};

use super::policy::{
    ADMITTED_DEADLINE_ANNOTATION, AdmissionPolicy, KUBERNETES_DEFAULT_GRACE_PERIOD_S,
    RuleCondition, TIER_ANNOTATION,
};
use super::queue::{QueueLookup, resolve_queue};
use super::resources::requested_gpu_resource;
use super::types::{
    NODE_NAME_FIELD, NodeSelectorRequirement, NodeSelectorTerm, OP_IN, PodFacts,
    PreferredSchedulingTerm, QueueFacts, Toleration,
};

/// One change to the pod. The webhook turns each into JSON patch operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    SetLabel {
        key: String,
        value: String,
    },
    SetAnnotation {
        key: String,
        value: String,
    },
    /// An annotation only gpufair may write, present on the pod as created: a user's forgery.
    RemoveAnnotation(String),
    /// Always followed by removing `spec.priority` and `spec.preemptionPolicy` where present:
    /// the API server's Priority plugin runs again after webhooks and refuses a pod whose
    /// class changed while its integer priority stayed.
    SetPriorityClassName(String),
    RemovePriority,
    RemovePreemptionPolicy,
    AddSchedulingGate(String),
    /// A gate cannot sit beside `spec.nodeName`; the node moves into required affinity instead.
    RemoveNodeName,
    /// The pod had no required node affinity: this term becomes the only one.
    CreateRequiredNodeAffinity(NodeSelectorTerm),
    /// Append requirements to the existing term at `index`. Terms are ORed, so narrowing every
    /// term is the only way to narrow the selector; adding a term would widen it.
    ExtendRequiredNodeTerm {
        index: usize,
        match_expressions: Vec<NodeSelectorRequirement>,
        match_fields: Vec<NodeSelectorRequirement>,
    },
    AddPreferredNodeTerm(PreferredSchedulingTerm),
    AddToleration(Toleration),
    SetTerminationGracePeriodSeconds(i64),
    /// Right-sizing: the container at `container` (an index into `PodFacts::containers`) asks
    /// for one `to` instead of one `from`, in requests (if `requests`) and limits (if
    /// `limits`): the webhook's patch removes the old key where the pod has it.
    ReplaceGpuResource {
        container: usize,
        from: String,
        to: String,
        requests: bool,
        limits: bool,
    },
}

/// What to do with an admitted GPU pod.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub queue: String,
    pub task_type: Option<TaskType>,
    pub mutations: Vec<Mutation>,
    /// Shown to the user by kubectl; the pod is still admitted.
    pub warnings: Vec<String>,
}

/// The outcome for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Requests no configured GPU resource: left exactly as it is.
    Unmanaged,
    /// Refused; the message names the label, annotation or field and what is accepted.
    Deny(String),
    Admit(Plan),
}

/// Mutations planned for a GPU pod admitted for the first time, give or take a few.
const PLANNED_MUTATIONS: usize = 12;

/// Plans the mutation of `pod` at time `now_unix_s` (seconds since the Unix epoch, UTC).
///
/// Every step compares against what the pod already has, so planning a pod that already went
/// through this plan yields no mutations: the API server may call the webhook again
/// (`reinvocationPolicy: IfNeeded`) and must then get an empty patch.
pub fn plan<L: QueueLookup + ?Sized>(
    pod: &PodFacts,
    queues: &L,
    policy: &AdmissionPolicy,
    now_unix_s: i64,
) -> Decision {
    if requested_gpu_resource(pod, policy).is_none() {
        return Decision::Unmanaged;
    }
    let labels = match parse_workload_labels(&pod.labels, &pod.annotations) {
        Ok(labels) => labels,
        Err(err) => return Decision::Deny(err.to_string()),
    };
    let queue = match resolve_queue(labels.queue.as_deref(), &pod.namespace, queues) {
        Ok(queue) => queue,
        Err(err) => return Decision::Deny(err.to_string()),
    };
    let task = labels.task_type.unwrap_or(policy.default_task_type);
    // Room for a typical first admission (class, priority fields, gate, affinity, toleration,
    // grace period, labels, annotations) in one allocation rather than three growing ones.
    let mut mutations = Vec::with_capacity(PLANNED_MUTATIONS);

    if let Err(denial) = plan_priority_class(pod, queue, policy, task, &mut mutations) {
        return Decision::Deny(denial);
    }
    if !pod.scheduling_gates.iter().any(|g| g == &policy.gate) {
        mutations.push(Mutation::AddSchedulingGate(policy.gate.clone()));
    }
    plan_required_affinity(pod, queue, &mut mutations);
    let deadline_in_s = labels.deadline.map(|d| d.at_unix_seconds - now_unix_s);
    for rule in &policy.affinity_rules {
        let applies = match rule.when {
            RuleCondition::TaskType(t) => t == task,
            RuleCondition::DeadlineWithin { seconds } => {
                deadline_in_s.is_some_and(|d| d <= seconds)
            }
        };
        // Compared in place and cloned only when added: this runs for every GPU pod.
        let same = |t: &PreferredSchedulingTerm| {
            t.weight == rule.weight && t.preference == rule.preference
        };
        let planned = mutations
            .iter()
            .any(|m| matches!(m, Mutation::AddPreferredNodeTerm(t) if same(t)));
        if applies && !planned && !pod.preferred_node_terms.iter().any(same) {
            mutations.push(Mutation::AddPreferredNodeTerm(PreferredSchedulingTerm {
                weight: rule.weight,
                preference: rule.preference.clone(),
            }));
        }
    }
    for toleration in &policy.tolerations {
        let planned = mutations
            .iter()
            .any(|m| matches!(m, Mutation::AddToleration(t) if t == toleration));
        if !planned && !pod.tolerations.contains(toleration) {
            mutations.push(Mutation::AddToleration(toleration.clone()));
        }
    }
    if task == TaskType::Train
        && let Some(grace) = policy.train_grace_period_seconds
        && pod.termination_grace_period_seconds != Some(grace)
        && matches!(
            pod.termination_grace_period_seconds,
            None | Some(KUBERNETES_DEFAULT_GRACE_PERIOD_S)
        )
    {
        mutations.push(Mutation::SetTerminationGracePeriodSeconds(grace));
    }

    set_label(pod, MANAGED_LABEL, "true", &mut mutations);
    set_label(pod, QUEUE_LABEL, &queue.name, &mut mutations);
    set_annotation(pod, TIER_ANNOTATION, task.tier().as_str(), &mut mutations);
    let mut warnings = Vec::new();
    // The controller orders a queue's pods by this annotation, so only the webhook writes it:
    // one a user put on a pod without a deadline would jump the queue.
    if labels.deadline.is_none() && pod.annotations.contains_key(ADMITTED_DEADLINE_ANNOTATION) {
        mutations.push(Mutation::RemoveAnnotation(
            ADMITTED_DEADLINE_ANNOTATION.to_string(),
        ));
    }
    if let Some(deadline) = labels.deadline {
        let text = deadline.to_rfc3339();
        set_annotation(pod, ADMITTED_DEADLINE_ANNOTATION, &text, &mut mutations);
        if deadline.at_unix_seconds < now_unix_s {
            let (kind, key) = match deadline.source {
                DeadlineSource::Label => ("label", DEADLINE_LABEL),
                DeadlineSource::Annotation => ("annotation", DEADLINE_ANNOTATION),
            };
            warnings.push(format!(
                "{kind} {key}: deadline {text} has already passed; the pod is admitted and \
                 ordered first among its tier"
            ));
        }
    }
    Decision::Admit(Plan {
        queue: queue.name.clone(),
        task_type: labels.task_type,
        mutations,
        warnings,
    })
}

/// Sets the tier's class unless the pod names a class its queue allows (or already has it).
fn plan_priority_class(
    pod: &PodFacts,
    queue: &QueueFacts,
    policy: &AdmissionPolicy,
    task: TaskType,
    mutations: &mut Vec<Mutation>,
) -> Result<(), String> {
    let tier_class = policy.tier_classes.for_task(task);
    let chosen = pod
        .priority_class_name
        .as_deref()
        .filter(|c| !c.is_empty() && !policy.replaceable_priority_classes.iter().any(|r| r == c));
    match chosen {
        Some(class) if class == tier_class || queue.allows_priority_class(class) => Ok(()),
        Some(class) => {
            let allowed = match queue.priority_classes.as_deref() {
                Some(list) if !list.is_empty() => list.join(", "),
                _ => "none".to_string(),
            };
            Err(format!(
                "spec.priorityClassName={class:?} is not allowed for Queue {:?} (its \
                 spec.priorityClasses: {allowed}): remove priorityClassName to get \
                 {tier_class:?} from ai-task-type={task}, or ask for the class to be added to \
                 the Queue",
                queue.name
            ))
        }
        None => {
            mutations.push(Mutation::SetPriorityClassName(tier_class.to_string()));
            if pod.has_priority {
                mutations.push(Mutation::RemovePriority);
            }
            if pod.has_preemption_policy {
                mutations.push(Mutation::RemovePreemptionPolicy);
            }
            Ok(())
        }
    }
}

fn plan_required_affinity(pod: &PodFacts, queue: &QueueFacts, mutations: &mut Vec<Mutation>) {
    let expressions = &queue.node_pool;
    let fields: Vec<NodeSelectorRequirement> = pod
        .node_name
        .iter()
        .map(|node| NodeSelectorRequirement::new(NODE_NAME_FIELD, OP_IN, &[node.as_str()]))
        .collect();
    if pod.node_name.is_some() {
        mutations.push(Mutation::RemoveNodeName);
    }
    match pod.required_node_terms.as_deref() {
        None | Some([]) => {
            if !expressions.is_empty() || !fields.is_empty() {
                mutations.push(Mutation::CreateRequiredNodeAffinity(NodeSelectorTerm {
                    match_expressions: dedup(expressions),
                    match_fields: fields,
                }));
            }
        }
        Some(terms) => {
            for (index, term) in terms.iter().enumerate() {
                // An empty term matches no node; filling it would make it match some.
                if term.is_empty() {
                    continue;
                }
                let missing_expressions = missing(&term.match_expressions, expressions);
                let missing_fields = missing(&term.match_fields, &fields);
                if !missing_expressions.is_empty() || !missing_fields.is_empty() {
                    mutations.push(Mutation::ExtendRequiredNodeTerm {
                        index,
                        match_expressions: missing_expressions,
                        match_fields: missing_fields,
                    });
                }
            }
        }
    }
}

fn missing(
    present: &[NodeSelectorRequirement],
    wanted: &[NodeSelectorRequirement],
) -> Vec<NodeSelectorRequirement> {
    let mut out: Vec<NodeSelectorRequirement> = Vec::new();
    for requirement in wanted {
        if !present.contains(requirement) && !out.contains(requirement) {
            out.push(requirement.clone());
        }
    }
    out
}

fn dedup(requirements: &[NodeSelectorRequirement]) -> Vec<NodeSelectorRequirement> {
    missing(&[], requirements)
}

fn set_label(pod: &PodFacts, key: &str, value: &str, mutations: &mut Vec<Mutation>) {
    if pod.labels.get(key).map(String::as_str) != Some(value) {
        mutations.push(Mutation::SetLabel {
            key: key.to_string(),
            value: value.to_string(),
        });
    }
}

fn set_annotation(pod: &PodFacts, key: &str, value: &str, mutations: &mut Vec<Mutation>) {
    if pod.annotations.get(key).map(String::as_str) != Some(value) {
        mutations.push(Mutation::SetAnnotation {
            key: key.to_string(),
            value: value.to_string(),
        });
    }
}

impl PodFacts {
    /// The pod as it is after `mutations`: what the API server stores once it applies the
    /// webhook's patch. Used to check plans (idempotency) and by the simulator.
    pub fn apply(&self, mutations: &[Mutation]) -> PodFacts {
        let mut pod = self.clone();
        for mutation in mutations {
            match mutation {
                Mutation::SetLabel { key, value } => {
                    pod.labels.insert(key.clone(), value.clone());
                }
                Mutation::SetAnnotation { key, value } => {
                    pod.annotations.insert(key.clone(), value.clone());
                }
                Mutation::RemoveAnnotation(key) => {
                    pod.annotations.remove(key);
                }
                Mutation::SetPriorityClassName(class) => {
                    pod.priority_class_name = Some(class.clone());
                }
                Mutation::RemovePriority => pod.has_priority = false,
                Mutation::RemovePreemptionPolicy => pod.has_preemption_policy = false,
                Mutation::AddSchedulingGate(gate) => pod.scheduling_gates.push(gate.clone()),
                Mutation::RemoveNodeName => pod.node_name = None,
                Mutation::CreateRequiredNodeAffinity(term) => {
                    pod.required_node_terms = Some(vec![term.clone()]);
                }
                Mutation::ExtendRequiredNodeTerm {
                    index,
                    match_expressions,
                    match_fields,
                } => {
                    if let Some(term) = pod
                        .required_node_terms
                        .as_mut()
                        .and_then(|terms| terms.get_mut(*index))
                    {
                        term.match_expressions
                            .extend(match_expressions.iter().cloned());
                        term.match_fields.extend(match_fields.iter().cloned());
                    }
                }
                Mutation::AddPreferredNodeTerm(term) => {
                    pod.preferred_node_terms.push(term.clone());
                }
                Mutation::AddToleration(toleration) => pod.tolerations.push(toleration.clone()),
                Mutation::SetTerminationGracePeriodSeconds(grace) => {
                    pod.termination_grace_period_seconds = Some(*grace);
                }
                Mutation::ReplaceGpuResource {
                    container,
                    from,
                    to,
                    ..
                } => {
                    if let Some(c) = pod.containers.get_mut(*container) {
                        for list in [&mut c.requests, &mut c.limits] {
                            if let Some(quantity) = list.remove(from) {
                                list.insert(to.clone(), quantity);
                            }
                        }
                    }
                }
            }
        }
        pod
    }
}
