//! Rules the real API server enforces on particular kinds, applied by the store on every
//! create and update:
//!
//! - Pods: a create needs containers with names and images, valid quantities and scheduling
//!   gate names, and no `nodeName` while gated; the status is reset to Pending (with
//!   `PodScheduled=False/SchedulingGated` for a gated pod). `priorityClassName` is resolved into
//!   `spec.priority` and `spec.preemptionPolicy` (403 when the pod names a class and sets another
//!   value). An update may change only what `ValidatePodUpdate` allows: container images,
//!   `activeDeadlineSeconds`, tolerations (additions), scheduling gates (removals), and, while the
//!   pod was gated, `nodeSelector` additions and node affinity narrowing (KEP-3838).
//! - PriorityClasses: `value` is required, at most 1e9, and immutable; one global default.
//! - Namespaces: the `kubernetes.io/metadata.name` label.
//! - PodDisruptionBudgets: `minAvailable` and `maxUnavailable` are exclusive.
//! - MutatingWebhookConfigurations: a client config and `v1` among the review versions
//!   (`matchConditions` are evaluated with a CEL interpreter at admission time).

use serde_json::{Value, json};

use super::quantity::parse_milli;
use super::resources::ResourceKind;
use super::status::ApiError;
use super::store::{Inner, name_of};

type Causes = Vec<(String, String)>;

/// Built-in classes every cluster has.
const SYSTEM_CLASSES: &[(&str, i64)] = &[
    ("system-cluster-critical", 2_000_000_000),
    ("system-node-critical", 2_000_001_000),
];

pub fn on_create(
    inner: &mut Inner,
    kind: &ResourceKind,
    object: &mut Value,
) -> Result<(), ApiError> {
    match (kind.group.as_str(), kind.plural.as_str()) {
        ("", "pods") => create_pod(inner, object),
        ("", "namespaces") => {
            let name = name_of(object).to_string();
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            object["status"] = json!({"phase": "Active"});
            Ok(())
        }
        ("scheduling.k8s.io", "priorityclasses") => validate_priority_class(inner, object, None),
        ("policy", "poddisruptionbudgets") => validate_pdb(object),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            validate_webhook_configuration(object)
        }
        _ => Ok(()),
    }
}

pub fn on_update(
    inner: &mut Inner,
    kind: &ResourceKind,
    old: &Value,
    new: &mut Value,
) -> Result<(), ApiError> {
    match (kind.group.as_str(), kind.plural.as_str()) {
        ("", "pods") => validate_pod_update(old, new),
        ("", "namespaces") => {
            let name = name_of(old).to_string();
            new["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            Ok(())
        }
        ("scheduling.k8s.io", "priorityclasses") => validate_priority_class(inner, new, Some(old)),
        ("policy", "poddisruptionbudgets") => validate_pdb(new),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations") => {
            validate_webhook_configuration(new)
        }
        _ => Ok(()),
    }
}

pub fn on_status_update(kind: &ResourceKind, old: &Value, new: &Value) -> Result<(), ApiError> {
    if kind.is("", "pods") {
        let old_phase = old["status"]["phase"].as_str().unwrap_or("Pending");
        let new_phase = new["status"]["phase"].as_str().unwrap_or("Pending");
        if matches!(old_phase, "Succeeded" | "Failed") && new_phase != old_phase {
            return Err(ApiError::invalid(
                "Pod",
                name_of(old),
                &[(
                    "status.phase".into(),
                    format!(
                        "Forbidden: cannot transition from terminal phase {old_phase} to {new_phase}"
                    ),
                )],
            ));
        }
    }
    Ok(())
}

/// Seconds a pod deletion waits for the kubelet: none for a pod on no node or already
/// finished (nothing runs it), else the request's, the pod's, or 30.
pub fn pod_deletion_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let bound = pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let terminal = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    if !bound || terminal {
        return 0;
    }
    requested
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30)
}

/// A pod in graceful deletion on a node: only the kubelet removes it.
pub fn pod_awaits_kubelet(pod: &Value) -> bool {
    pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty())
        && pod["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .is_some_and(|g| g > 0)
}

fn invalid(kind: &str, object: &Value, causes: Causes) -> Result<(), ApiError> {
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(kind, name_of(object), &causes))
    }
}

fn valid_qualified_name(name: &str) -> bool {
    let (prefix, local) = match name.rsplit_once('/') {
        Some((p, l)) => (Some(p), l),
        None => (None, name),
    };
    let local_ok = !local.is_empty()
        && local.len() <= 63
        && local
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && local.starts_with(|c: char| c.is_ascii_alphanumeric())
        && local.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
    });
    local_ok && prefix_ok
}

fn create_pod(inner: &mut Inner, pod: &mut Value) -> Result<(), ApiError> {
    let mut causes = Causes::new();
    let spec = &pod["spec"];
    let containers = spec["containers"].as_array().cloned().unwrap_or_default();
    if containers.is_empty() {
        causes.push(("spec.containers".into(), "Required value".into()));
    }
    for (list, field) in [
        (&containers, "containers"),
        (
            &spec["initContainers"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            "initContainers",
        ),
    ] {
        let mut seen = Vec::new();
        for (i, container) in list.iter().enumerate() {
            let at = format!("spec.{field}[{i}]");
            match container["name"].as_str() {
                Some(name) if !name.is_empty() => {
                    if seen.contains(&name) {
                        causes.push((format!("{at}.name"), format!("Duplicate value: {name:?}")));
                    }
                    seen.push(name);
                }
                _ => causes.push((format!("{at}.name"), "Required value".into())),
            }
            if container["image"].as_str().is_none_or(str::is_empty) {
                causes.push((format!("{at}.image"), "Required value".into()));
            }
            for section in ["requests", "limits"] {
                for (resource, quantity) in container["resources"][section]
                    .as_object()
                    .into_iter()
                    .flatten()
                {
                    let parsed = quantity
                        .as_str()
                        .map(parse_milli)
                        .or_else(|| quantity.as_f64().map(|n| Ok((n * 1000.0) as i128)));
                    if !matches!(parsed, Some(Ok(_))) {
                        causes.push((
                            format!("{at}.resources.{section}[{resource}]"),
                            format!("Invalid value: {quantity}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"),
                        ));
                    }
                }
            }
        }
    }
    let gates = spec["schedulingGates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut names = Vec::new();
    for (i, gate) in gates.iter().enumerate() {
        let name = gate["name"].as_str().unwrap_or_default();
        if !valid_qualified_name(name) {
            causes.push((
                format!("spec.schedulingGates[{i}].name"),
                format!("Invalid value: {name:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"),
            ));
        } else if names.contains(&name) {
            causes.push((
                format!("spec.schedulingGates[{i}].name"),
                format!("Duplicate value: {name:?}"),
            ));
        }
        names.push(name);
    }
    if !gates.is_empty() && spec["nodeName"].as_str().is_some_and(|n| !n.is_empty()) {
        causes.push((
            "spec.nodeName".into(),
            "Forbidden: cannot be set until all schedulingGates have been cleared".into(),
        ));
    }
    invalid("Pod", pod, causes)?;
    resolve_priority(inner, pod)?;
    if pod["spec"]["terminationGracePeriodSeconds"].is_null() {
        pod["spec"]["terminationGracePeriodSeconds"] = json!(30);
    }
    if pod["spec"]["schedulerName"].is_null() {
        pod["spec"]["schedulerName"] = json!("default-scheduler");
    }
    let mut status = json!({"phase": "Pending"});
    if !gates.is_empty() {
        status["conditions"] = json!([{
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
            "lastTransitionTime": super::store::now_rfc3339(),
            "lastProbeTime": null,
        }]);
    }
    pod["status"] = status;
    Ok(())
}

/// The Priority admission plugin: fills `spec.priority` and `spec.preemptionPolicy` from the
/// named class (or the global default), refusing a pod whose own values disagree.
pub fn resolve_priority(inner: &Inner, pod: &mut Value) -> Result<(), ApiError> {
    let name = name_of(pod).to_string();
    let forbidden =
        |message: String| ApiError::forbidden(format!("pods \"{name}\" is forbidden: {message}"));
    let classes = inner.kind("scheduling.k8s.io", "priorityclasses")?;
    let class_name = pod["spec"]["priorityClassName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (value, policy) = if class_name.is_empty() {
        match inner
            .iter(&classes, None)
            .find(|c| c["globalDefault"] == json!(true))
        {
            Some(class) => {
                pod["spec"]["priorityClassName"] = class["metadata"]["name"].clone();
                (
                    class["value"].as_i64().unwrap_or(0),
                    class["preemptionPolicy"]
                        .as_str()
                        .unwrap_or("PreemptLowerPriority")
                        .to_string(),
                )
            }
            None => (0, "PreemptLowerPriority".to_string()),
        }
    } else if let Some((_, value)) = SYSTEM_CLASSES.iter().find(|(n, _)| *n == class_name) {
        (*value, "PreemptLowerPriority".to_string())
    } else {
        match inner.try_get(&classes, "", &class_name) {
            Some(class) => (
                class["value"].as_i64().unwrap_or(0),
                class["preemptionPolicy"]
                    .as_str()
                    .unwrap_or("PreemptLowerPriority")
                    .to_string(),
            ),
            None => {
                return Err(forbidden(format!(
                    "no PriorityClass with name {class_name} was found"
                )));
            }
        }
    };
    if let Some(given) = pod["spec"]["priority"].as_i64()
        && given != value
    {
        return Err(forbidden(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
        )));
    }
    if let Some(given) = pod["spec"]["preemptionPolicy"].as_str()
        && given != policy
    {
        return Err(forbidden(format!(
            "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
        )));
    }
    pod["spec"]["priority"] = json!(value);
    pod["spec"]["preemptionPolicy"] = json!(policy);
    Ok(())
}

fn array(value: &Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// KEP-3838: terms keep their count; each term's existing expressions and fields stay, in
/// order, and new ones may only be appended. No existing requirement means anything goes.
fn validate_required_affinity(old: &Value, new: &Value, causes: &mut Causes) {
    let field = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    if old.is_null() {
        return;
    }
    let old_terms = array(&old["nodeSelectorTerms"]);
    let new_terms = array(&new["nodeSelectorTerms"]);
    if new.is_null() || old_terms.len() != new_terms.len() {
        causes.push((
            field.into(),
            "Invalid value: no additions/deletions to non-empty NodeSelectorTerms list are allowed"
                .into(),
        ));
        return;
    }
    for (i, (old_term, new_term)) in old_terms.iter().zip(&new_terms).enumerate() {
        for list in ["matchExpressions", "matchFields"] {
            let old_list = array(&old_term[list]);
            let new_list = array(&new_term[list]);
            if old_list.is_empty() {
                continue;
            }
            if new_list.len() < old_list.len() || new_list[..old_list.len()] != old_list[..] {
                causes.push((
                    format!("{field}.nodeSelectorTerms[{i}].{list}"),
                    "Invalid value: only additions are allowed (no mutations or deletions)".into(),
                ));
            }
        }
    }
}

fn validate_pod_update(old: &Value, new: &mut Value) -> Result<(), ApiError> {
    let mut causes = Causes::new();
    let old_spec = &old["spec"];
    let new_spec = &new["spec"];
    // `munged` is the old spec with every change Kubernetes permits taken from the new one;
    // any other difference is refused.
    let mut munged = old_spec.clone();
    for list in ["containers", "initContainers"] {
        let (Some(old_list), Some(new_list)) =
            (old_spec[list].as_array(), new_spec[list].as_array())
        else {
            continue;
        };
        if old_list.len() == new_list.len() {
            for (i, container) in new_list.iter().enumerate() {
                munged[list][i]["image"] = container["image"].clone();
            }
        }
    }
    match (
        old_spec["activeDeadlineSeconds"].as_i64(),
        new_spec["activeDeadlineSeconds"].as_i64(),
    ) {
        (None, Some(_)) => {
            munged["activeDeadlineSeconds"] = new_spec["activeDeadlineSeconds"].clone()
        }
        (Some(a), Some(b)) if b <= a => {
            munged["activeDeadlineSeconds"] = new_spec["activeDeadlineSeconds"].clone()
        }
        _ => {}
    }
    let old_tolerations = array(&old_spec["tolerations"]);
    let new_tolerations = array(&new_spec["tolerations"]);
    if old_tolerations.iter().all(|t| new_tolerations.contains(t)) {
        munged["tolerations"] = new_spec["tolerations"].clone();
    } else {
        causes.push((
            "spec.tolerations".into(),
            "Forbidden: existing toleration can not be modified except its tolerationSeconds"
                .into(),
        ));
    }
    let old_gates = array(&old_spec["schedulingGates"]);
    let new_gates = array(&new_spec["schedulingGates"]);
    for gate in &new_gates {
        if !old_gates.contains(gate) {
            causes.push((
                "spec.schedulingGates".into(),
                format!(
                    "Forbidden: only deletion is allowed, but found new scheduling gate '{}'",
                    gate["name"].as_str().unwrap_or_default()
                ),
            ));
        }
    }
    munged["schedulingGates"] = new_spec["schedulingGates"].clone();
    if !old_gates.is_empty() {
        let old_selector = old_spec["nodeSelector"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let new_selector = new_spec["nodeSelector"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if old_selector
            .iter()
            .all(|(k, v)| new_selector.get(k) == Some(v))
        {
            munged["nodeSelector"] = new_spec["nodeSelector"].clone();
        } else {
            causes.push((
                "spec.nodeSelector".into(),
                "Invalid value: only additions are allowed (no mutations or deletions)".into(),
            ));
        }
        let old_affinity = &old_spec["affinity"]["nodeAffinity"];
        let new_affinity = &new_spec["affinity"]["nodeAffinity"];
        validate_required_affinity(
            &old_affinity["requiredDuringSchedulingIgnoredDuringExecution"],
            &new_affinity["requiredDuringSchedulingIgnoredDuringExecution"],
            &mut causes,
        );
        if new_affinity.is_null() {
            if let Some(affinity) = munged["affinity"].as_object_mut() {
                affinity.remove("nodeAffinity");
            }
        } else {
            munged["affinity"]["nodeAffinity"] = new_affinity.clone();
        }
        if munged["affinity"].as_object().is_some_and(|a| a.is_empty())
            && new_spec["affinity"].is_null()
            && let Some(spec) = munged.as_object_mut()
        {
            spec.remove("affinity");
        }
    }
    // Absent and empty lists/maps are the same to the API server.
    let normalise = |spec: &Value| {
        let mut spec = spec.clone();
        if let Some(map) = spec.as_object_mut() {
            map.retain(|_, v| {
                !(v.is_null()
                    || v.as_array().is_some_and(Vec::is_empty)
                    || v.as_object().is_some_and(|m| m.is_empty()))
            });
        }
        spec
    };
    if causes.is_empty() && normalise(&munged) != normalise(new_spec) {
        let mut changed: Vec<String> = Vec::new();
        let (m, n) = (normalise(&munged), normalise(new_spec));
        let keys = m
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .chain(n.as_object().into_iter().flatten().map(|(k, _)| k.clone()));
        for key in keys {
            if m.get(&key) != n.get(&key) && !changed.contains(&key) {
                changed.push(key);
            }
        }
        causes.push((
            "spec".into(),
            format!(
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative); while scheduling gates remain, also `spec.nodeSelector` (additions) and `spec.affinity.nodeAffinity` (narrowing); changed: spec.{}",
                changed.join(", spec.")
            ),
        ));
    }
    invalid("Pod", old, causes)
}

fn validate_priority_class(
    inner: &Inner,
    class: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let mut causes = Causes::new();
    match class["value"].as_i64() {
        None => causes.push(("value".into(), "Required value".into())),
        Some(v) if v > 1_000_000_000 => causes.push((
            "value".into(),
            format!(
                "Invalid value: {v}: maximum allowed value of a user defined priority is 1000000000"
            ),
        )),
        _ => {}
    }
    if let Some(old) = old
        && old["value"] != class["value"]
    {
        causes.push((
            "value".into(),
            "Forbidden: may not be changed in an update.".into(),
        ));
    }
    if let Some(policy) = class["preemptionPolicy"].as_str()
        && !matches!(policy, "PreemptLowerPriority" | "Never")
    {
        causes.push((
            "preemptionPolicy".into(),
            format!("Unsupported value: {policy:?}: supported values: \"Never\", \"PreemptLowerPriority\""),
        ));
    }
    if class["globalDefault"] == json!(true)
        && let Ok(kind) = inner.kind("scheduling.k8s.io", "priorityclasses")
        && let Some(other) = inner
            .iter(&kind, None)
            .find(|c| c["globalDefault"] == json!(true) && name_of(c) != name_of(class))
    {
        causes.push((
            "globalDefault".into(),
            format!("Forbidden: PriorityClass {} is already marked as default. Only one default can exist", name_of(other)),
        ));
    }
    invalid("PriorityClass", class, causes)
}

fn validate_pdb(pdb: &Value) -> Result<(), ApiError> {
    let spec = &pdb["spec"];
    let mut causes = Causes::new();
    if !spec["minAvailable"].is_null() && !spec["maxUnavailable"].is_null() {
        causes.push((
            "spec".into(),
            "Invalid value: minAvailable and maxUnavailable cannot be both set".into(),
        ));
    }
    for field in ["minAvailable", "maxUnavailable"] {
        match &spec[field] {
            Value::Null => {}
            Value::Number(n) if n.as_i64().is_some_and(|n| n >= 0) => {}
            Value::String(s) if s.strip_suffix('%').and_then(|p| p.parse::<u32>().ok()).is_some_and(|p| p <= 100) => {}
            other => causes.push((
                format!("spec.{field}"),
                format!("Invalid value: {other}: must be a non-negative integer or a percentage like \"50%\""),
            )),
        }
    }
    invalid("PodDisruptionBudget", pdb, causes)
}

fn validate_webhook_configuration(configuration: &Value) -> Result<(), ApiError> {
    let mut causes = Causes::new();
    for (i, webhook) in array(&configuration["webhooks"]).iter().enumerate() {
        let at = format!("webhooks[{i}]");
        if webhook["name"]
            .as_str()
            .is_none_or(|n| n.split('.').count() < 3)
        {
            causes.push((
                format!("{at}.name"),
                "Invalid value: should be a domain with at least three segments separated by dots"
                    .into(),
            ));
        }
        let client = &webhook["clientConfig"];
        if client["url"].is_null() == client["service"].is_null() {
            causes.push((
                format!("{at}.clientConfig"),
                "Required value: exactly one of url or service is required".into(),
            ));
        }
        if !array(&webhook["admissionReviewVersions"]).contains(&json!("v1")) {
            causes.push((format!("{at}.admissionReviewVersions"), "Invalid value: must include at least one of v1 (the only version this server sends)".into()));
        }
        match webhook["sideEffects"].as_str() {
            Some("None" | "NoneOnDryRun") => {}
            other => causes.push((
                format!("{at}.sideEffects"),
                format!(
                    "Unsupported value: {other:?}: supported values: \"None\", \"NoneOnDryRun\""
                ),
            )),
        }
        if let Some(policy) = webhook["failurePolicy"].as_str()
            && !matches!(policy, "Fail" | "Ignore")
        {
            causes.push((
                format!("{at}.failurePolicy"),
                format!("Unsupported value: {policy:?}: supported values: \"Fail\", \"Ignore\""),
            ));
        }
        if let Some(timeout) = webhook["timeoutSeconds"].as_i64()
            && !(1..=30).contains(&timeout)
        {
            causes.push((
                format!("{at}.timeoutSeconds"),
                format!(
                    "Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds"
                ),
            ));
        }
    }
    invalid("MutatingWebhookConfiguration", configuration, causes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_removal_allowed_addition_refused() {
        let old = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}], "schedulingGates": [{"name": "a"}, {"name": "b"}]}});
        let mut new = old.clone();
        new["spec"]["schedulingGates"] = json!([{"name": "b"}]);
        validate_pod_update(&old, &mut new).unwrap();
        new["spec"]["schedulingGates"] = json!([{"name": "a"}, {"name": "b"}, {"name": "c"}]);
        let err = validate_pod_update(&old, &mut new).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(
            err.message
                .contains("only deletion is allowed, but found new scheduling gate 'c'"),
            "{}",
            err.message
        );
    }

    #[test]
    fn kep_3838_narrowing_only_while_gated() {
        let term =
            json!({"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]});
        let old = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}],
            "schedulingGates": [{"name": "g"}], "nodeSelector": {"x": "1"},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}});
        let mut new = old.clone();
        new["spec"]["nodeSelector"]["y"] = json!("2");
        new["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchFields"] =
            json!([{"key": "metadata.name", "operator": "In", "values": ["n1"]}]);
        new["spec"]["schedulingGates"] = json!([]);
        validate_pod_update(&old, &mut new).unwrap();
        let mut widened = old.clone();
        widened["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"][0]["matchExpressions"] = json!([]);
        assert_eq!(
            validate_pod_update(&old, &mut widened).unwrap_err().code,
            422
        );
        let mut changed = old.clone();
        changed["spec"]["nodeSelector"]["x"] = json!("2");
        assert_eq!(
            validate_pod_update(&old, &mut changed).unwrap_err().code,
            422
        );
        let mut ungated = old.clone();
        ungated["spec"]["schedulingGates"] = json!([]);
        let mut later = ungated.clone();
        later["spec"]["nodeSelector"]["y"] = json!("2");
        assert_eq!(
            validate_pod_update(&ungated, &mut later).unwrap_err().code,
            422
        );
        let mut other = old.clone();
        other["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
        let err = validate_pod_update(&old, &mut other).unwrap_err();
        assert!(
            err.message.contains("changed: spec.containers"),
            "{}",
            err.message
        );
        let mut image = old.clone();
        image["spec"]["containers"][0]["image"] = json!("j");
        validate_pod_update(&old, &mut image).unwrap();
    }

    #[test]
    fn webhook_configuration_with_match_conditions_is_accepted() {
        let config = json!({"metadata": {"name": "w"}, "webhooks": [{"name": "a.b.c", "clientConfig": {"url": "https://x"},
            "admissionReviewVersions": ["v1"], "sideEffects": "None", "matchConditions": [{"name": "x", "expression": "true"}]}]});
        assert!(validate_webhook_configuration(&config).is_ok());
    }
}
