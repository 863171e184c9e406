//! The ValidatingAdmissionPolicies in `deploy/base/admission-policies.yaml`, evaluated with a
//! CEL interpreter the way the API server does: resource rules' operations, then every match
//! condition, then variables, then each validation in order (the first false one denies with
//! its message). Each expression gets pods it must allow and pods it must deny, read from the
//! rendered manifests, so a change to the shipped YAML is a change to what is tested.

use serde_json::{Value, json};

use super::{INSTALL_NAMESPACE, find, rendered};

/// Evaluates one CEL expression to a bool with the given variables.
pub fn eval_bool(expression: &str, variables: &[(&str, &Value)]) -> Result<bool, String> {
    let program = cel::Program::compile(expression)
        .map_err(|e| format!("does not parse: {e}\n{expression}"))?;
    let mut context = cel::Context::default();
    for (name, value) in variables {
        context
            .add_variable(*name, *value)
            .map_err(|e| format!("variable {name}: {e}"))?;
    }
    match program.execute(&context) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("returned {other:?}, not a bool\n{expression}")),
        Err(e) => Err(format!("failed: {e}\n{expression}")),
    }
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// The policy does not apply to this request.
    NotMatched,
    Allowed,
    Denied(String),
}

pub const CONTROLLER: &str = "system:serviceaccount:gpufair-system:gpufair-webhook";

/// Runs `policy` on a request; an evaluation error fails the test (with failurePolicy Fail it
/// would deny, and no shipped expression should ever error).
pub fn evaluate(
    policy: &Value,
    operation: &str,
    user: &str,
    object: &Value,
    old: &Value,
) -> Outcome {
    let name = policy["metadata"]["name"].as_str().unwrap();
    let spec = &policy["spec"];
    let operations = spec["matchConstraints"]["resourceRules"][0]["operations"]
        .as_array()
        .unwrap();
    if !operations.iter().any(|o| o == operation) {
        return Outcome::NotMatched;
    }
    let request = json!({"operation": operation, "userInfo": {"username": user}});
    let mut context: Vec<(&str, &Value)> = vec![
        ("object", object),
        ("oldObject", old),
        ("request", &request),
    ];
    for condition in spec["matchConditions"].as_array().into_iter().flatten() {
        let expression = condition["expression"].as_str().unwrap();
        match eval_bool(expression, &context) {
            Ok(true) => {}
            Ok(false) => return Outcome::NotMatched,
            Err(e) => panic!("{name}: match condition {}: {e}", condition["name"]),
        }
    }
    let mut variables = serde_json::Map::new();
    for variable in spec["variables"].as_array().into_iter().flatten() {
        let expression = variable["expression"].as_str().unwrap();
        let value = eval_bool(expression, &context)
            .unwrap_or_else(|e| panic!("{name}: variable {}: {e}", variable["name"]));
        variables.insert(
            variable["name"].as_str().unwrap().into(),
            Value::Bool(value),
        );
    }
    let variables = Value::Object(variables);
    context.push(("variables", &variables));
    for validation in spec["validations"].as_array().unwrap() {
        let expression = validation["expression"].as_str().unwrap();
        match eval_bool(expression, &context) {
            Ok(true) => {}
            Ok(false) => {
                return Outcome::Denied(validation["message"].as_str().unwrap().to_string());
            }
            Err(e) => panic!("{name}: validation: {e}"),
        }
    }
    Outcome::Allowed
}

fn policy(name: &str) -> Value {
    let objects = rendered("base");
    let policy = find(&objects, "ValidatingAdmissionPolicy", name).clone();
    let binding = find(&objects, "ValidatingAdmissionPolicyBinding", name);
    assert_eq!(binding["spec"]["policyName"], name);
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    policy
}

/// A pod as users write it: `gpus` in the first container's limits (none when 0).
pub fn pod(labels: Value, gpus: u32, gates: &[&str]) -> Value {
    let resources = if gpus > 0 {
        json!({"limits": {"nvidia.com/gpu": gpus.to_string()}})
    } else {
        json!({"requests": {"cpu": "1"}})
    };
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": resources}]}
    });
    if !labels.is_null() {
        pod["metadata"]["labels"] = labels;
    }
    if !gates.is_empty() {
        pod["spec"]["schedulingGates"] = gates.iter().map(|g| json!({"name": g})).collect();
    }
    pod
}

const GATE: &str = "gpufair.io/admission";
const USER: &str = "alice";

fn managed_labels() -> Value {
    json!({"gpufair.io/managed": "true", "gpufair.io/queue": "llm", "ai-task-type": "train",
           "urgency-level": "high", "deadline": "2026-12-01T00-00-00Z"})
}

#[test]
fn the_controller_identity_is_the_webhook_service_account() {
    let objects = rendered("base");
    let deployment = find(&objects, "Deployment", "gpufair-webhook");
    let account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .unwrap();
    assert_eq!(
        CONTROLLER,
        format!("system:serviceaccount:{INSTALL_NAMESPACE}:{account}")
    );
    let text =
        std::fs::read_to_string(super::deploy_dir().join("base/admission-policies.yaml")).unwrap();
    let identities = text.match_indices("system:serviceaccount:").count();
    assert!(identities >= 2);
    assert_eq!(
        identities,
        text.match_indices(CONTROLLER).count(),
        "every identity in the policies is the controller's"
    );
}

#[test]
fn only_the_controller_removes_the_gate() {
    let gate = policy("gpufair-gate");
    let gated = pod(managed_labels(), 1, &[GATE]);
    let released = pod(managed_labels(), 1, &[]);
    assert_eq!(
        evaluate(&gate, "UPDATE", CONTROLLER, &released, &gated),
        Outcome::Allowed
    );
    assert!(matches!(
        evaluate(&gate, "UPDATE", USER, &released, &gated),
        Outcome::Denied(m) if m.contains("only gpufair's controller")
    ));
    // Removing another gate while keeping gpufair's is anyone's right.
    let two = pod(managed_labels(), 1, &["other.io/gate", GATE]);
    assert_eq!(
        evaluate(&gate, "UPDATE", USER, &gated, &two),
        Outcome::Allowed
    );
    let other_removed = pod(managed_labels(), 1, &["other.io/gate"]);
    assert!(matches!(
        evaluate(&gate, "UPDATE", USER, &other_removed, &two),
        Outcome::Denied(_)
    ));
    // Pods that never had the gate, and creations, are not this policy's business.
    let plain = pod(Value::Null, 0, &[]);
    assert_eq!(
        evaluate(&gate, "UPDATE", USER, &plain, &plain),
        Outcome::NotMatched
    );
    assert_eq!(
        evaluate(&gate, "CREATE", USER, &gated, &Value::Null),
        Outcome::NotMatched
    );
}

#[test]
fn the_user_tier_annotation_is_fixed_after_creation() {
    let labels = policy("gpufair-pod-labels");
    let mut before = pod(managed_labels(), 1, &[GATE]);
    before["metadata"]["annotations"] = json!({"user-tier": "basic", "note": "x"});
    let mut unrelated = before.clone();
    unrelated["metadata"]["annotations"]["note"] = json!("y");
    assert_eq!(
        evaluate(&labels, "UPDATE", USER, &unrelated, &before),
        Outcome::Allowed
    );
    let mut raised = before.clone();
    raised["metadata"]["annotations"]["user-tier"] = json!("premium");
    let mut removed = before.clone();
    removed["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("user-tier");
    let mut bare = before.clone();
    bare["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    for (after, old, what) in [
        (&raised, &before, "changed"),
        (&removed, &before, "removed"),
        (&before, &removed, "added"),
        (&before, &bare, "added to a pod without annotations"),
    ] {
        assert!(
            matches!(evaluate(&labels, "UPDATE", USER, after, old), Outcome::Denied(m) if m.contains("user-tier")),
            "user-tier {what}"
        );
    }
    assert_eq!(
        evaluate(&labels, "UPDATE", USER, &bare, &bare),
        Outcome::Allowed
    );
}

#[test]
fn queue_and_tier_labels_are_fixed_after_creation() {
    let labels = policy("gpufair-pod-labels");
    let mut before = pod(managed_labels(), 1, &[GATE]);
    // A gang member of a named family, so that removing those labels is tried too.
    before["metadata"]["labels"]["gpufair.io/pod-group"] = json!("g");
    before["metadata"]["labels"]["gpufair.io/family"] = json!("llama-finetune");
    before["metadata"]["labels"]["gpufair.io/right-size"] = json!("true");
    let mut unrelated = before.clone();
    unrelated["metadata"]["labels"]["team-note"] = json!("x");
    assert_eq!(
        evaluate(&labels, "UPDATE", USER, &unrelated, &before),
        Outcome::Allowed
    );
    for key in [
        "gpufair.io/queue",
        "ai-task-type",
        "urgency-level",
        "deadline",
        "gpufair.io/pod-group",
        "gpufair.io/family",
        "gpufair.io/right-size",
    ] {
        let mut changed = before.clone();
        changed["metadata"]["labels"][key] = json!("other");
        for user in [USER, CONTROLLER] {
            assert!(
                matches!(evaluate(&labels, "UPDATE", user, &changed, &before), Outcome::Denied(m) if m.contains(key)),
                "{user} changes {key}"
            );
        }
        let mut removed = before.clone();
        removed["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove(key);
        assert!(
            matches!(
                evaluate(&labels, "UPDATE", USER, &removed, &before),
                Outcome::Denied(_)
            ),
            "removing {key}"
        );
        let mut added = removed.clone();
        added["metadata"]["labels"][key] = json!("new");
        assert!(
            matches!(
                evaluate(&labels, "UPDATE", USER, &added, &removed),
                Outcome::Denied(_)
            ),
            "adding {key}"
        );
    }
    // The annotations the controller orders and groups gated pods by are fixed the same way.
    let mut annotated = before.clone();
    annotated["metadata"]["annotations"] = json!({
        "gpufair.io/tier": "elastic", "gpufair.io/admitted-deadline": "2026-12-01T00:00:00Z",
        "gpufair.io/deadline": "2026-12-01T00:00:00Z", "gpufair.io/min-member": "2",
        "gpufair.io/right-size-result": "right-size declined: family llama-finetune has 0 of \
            the 3 pods of history needed",
        "team-note": "x"
    });
    let mut note = annotated.clone();
    note["metadata"]["annotations"]["team-note"] = json!("y");
    assert_eq!(
        evaluate(&labels, "UPDATE", USER, &note, &annotated),
        Outcome::Allowed
    );
    for key in [
        "gpufair.io/tier",
        "gpufair.io/admitted-deadline",
        "gpufair.io/deadline",
        "gpufair.io/min-member",
        "gpufair.io/right-size-result",
    ] {
        let mut forged = annotated.clone();
        forged["metadata"]["annotations"][key] = json!("realtime");
        for user in [USER, CONTROLLER] {
            assert!(
                matches!(evaluate(&labels, "UPDATE", user, &forged, &annotated), Outcome::Denied(m) if m.contains(key)),
                "{user} changes {key}"
            );
        }
        let mut removed = annotated.clone();
        removed["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(key);
        assert!(
            matches!(
                evaluate(&labels, "UPDATE", USER, &removed, &annotated),
                Outcome::Denied(_)
            ),
            "removing {key}"
        );
        assert!(
            matches!(
                evaluate(&labels, "UPDATE", USER, &annotated, &removed),
                Outcome::Denied(_)
            ),
            "adding {key}"
        );
    }
    // A pod without any labels at all, before and after, is fine.
    let mut bare = pod(json!({"gpufair.io/managed": "true"}), 1, &[]);
    assert_eq!(
        evaluate(&labels, "UPDATE", USER, &bare, &bare),
        Outcome::Allowed
    );
    bare["metadata"].as_object_mut().unwrap().remove("labels");
    let managed = pod(json!({"gpufair.io/managed": "true"}), 1, &[]);
    assert!(matches!(
        evaluate(&labels, "UPDATE", USER, &bare, &managed),
        Outcome::Allowed
    ));
    // Unmanaged pods may use these label names for their own purposes.
    let mine = pod(json!({"deadline": "friday"}), 0, &[]);
    let moved = pod(json!({"deadline": "monday"}), 0, &[]);
    assert_eq!(
        evaluate(&labels, "UPDATE", USER, &moved, &mine),
        Outcome::NotMatched
    );
}

/// A right-sized pod's opt-in, family and the webhook's record of what it did are fixed: the
/// family names the history the pod's peak teaches, and the opt-in and record say what the pod
/// was admitted as. Turning right-sizing on or off, or renaming the family, after creation is
/// refused for users and the controller alike; creating the pod with them is not this policy's
/// business.
#[test]
fn right_sizing_labels_and_record_are_fixed_after_creation() {
    let labels = policy("gpufair-pod-labels");
    let mut sized = pod(managed_labels(), 0, &[GATE]);
    sized["spec"]["containers"][0]["resources"] =
        json!({"limits": {"nvidia.com/mig-3g.40gb": "1"}});
    sized["metadata"]["labels"]["gpufair.io/family"] = json!("llama-finetune");
    sized["metadata"]["labels"]["gpufair.io/right-size"] = json!("true");
    sized["metadata"]["annotations"] = json!({
        "gpufair.io/right-size-result": "right-sized: nvidia.com/gpu replaced by nvidia.com/mig-3g.40gb"
    });
    assert_eq!(
        evaluate(&labels, "CREATE", USER, &sized, &Value::Null),
        Outcome::NotMatched
    );
    assert_eq!(
        evaluate(&labels, "UPDATE", USER, &sized, &sized),
        Outcome::Allowed
    );
    let mut off = sized.clone();
    off["metadata"]["labels"]["gpufair.io/right-size"] = json!("false");
    let mut renamed = sized.clone();
    renamed["metadata"]["labels"]["gpufair.io/family"] = json!("other-family");
    let mut forgotten = sized.clone();
    forgotten["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("gpufair.io/right-size-result");
    let mut opted_in_later = sized.clone();
    opted_in_later["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("gpufair.io/right-size");
    for (after, before, key) in [
        (&off, &sized, "gpufair.io/right-size"),
        (&renamed, &sized, "gpufair.io/family"),
        (&forgotten, &sized, "gpufair.io/right-size-result"),
        (&sized, &opted_in_later, "gpufair.io/right-size"),
    ] {
        for user in [USER, CONTROLLER] {
            assert!(
                matches!(evaluate(&labels, "UPDATE", user, after, before), Outcome::Denied(m) if m.contains(key)),
                "{user} changes {key}"
            );
        }
    }
}

#[test]
fn users_cannot_set_the_managed_label() {
    let managed = policy("gpufair-managed-label");
    // What the webhook produces: a GPU pod, gated, labelled true.
    let admitted = pod(managed_labels(), 1, &[GATE]);
    assert_eq!(
        evaluate(&managed, "CREATE", USER, &admitted, &Value::Null),
        Outcome::Allowed
    );
    // MIG, shared and init-container requests count as GPU pods too.
    for resource in [
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "nvidia.com/mig-1g.18gb.me",
        "nvidia.com/gpu.shared",
    ] {
        let mut mig = admitted.clone();
        mig["spec"]["containers"][0]["resources"] = json!({"requests": {resource: "1"}});
        assert_eq!(
            evaluate(&managed, "CREATE", USER, &mig, &Value::Null),
            Outcome::Allowed,
            "{resource}"
        );
    }
    let mut init = admitted.clone();
    init["spec"]["containers"][0]["resources"] = json!({});
    init["spec"]["initContainers"] =
        json!([{"name": "i", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]);
    assert_eq!(
        evaluate(&managed, "CREATE", USER, &init, &Value::Null),
        Outcome::Allowed
    );
    // A label the webhook would never have written.
    let deny = |object: &Value| {
        matches!(evaluate(&managed, "CREATE", USER, object, &Value::Null),
                 Outcome::Denied(m) if m.contains("set by gpufair's webhook"))
    };
    assert!(
        deny(&pod(json!({"gpufair.io/managed": "true"}), 0, &[])),
        "CPU pod"
    );
    assert!(
        deny(&pod(json!({"gpufair.io/managed": "true"}), 0, &[GATE])),
        "CPU pod with the gate"
    );
    assert!(
        deny(&pod(json!({"gpufair.io/managed": "true"}), 1, &[])),
        "GPU pod the webhook skipped"
    );
    assert!(
        deny(&pod(json!({"gpufair.io/managed": "false"}), 1, &[GATE])),
        "value other than true"
    );
    // Pods without the label are untouched.
    assert_eq!(
        evaluate(
            &managed,
            "CREATE",
            USER,
            &pod(Value::Null, 0, &[]),
            &Value::Null
        ),
        Outcome::Allowed
    );
    assert_eq!(
        evaluate(
            &managed,
            "CREATE",
            USER,
            &pod(json!({"app": "x"}), 2, &[]),
            &Value::Null
        ),
        Outcome::Allowed
    );
    // After creation: nobody but the controller adds, changes or removes it.
    let plain = pod(json!({"app": "x"}), 0, &[]);
    let mut stamped = plain.clone();
    stamped["metadata"]["labels"]["gpufair.io/managed"] = json!("true");
    let mut unlabelled = admitted.clone();
    unlabelled["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("gpufair.io/managed");
    let mut flipped = admitted.clone();
    flipped["metadata"]["labels"]["gpufair.io/managed"] = json!("false");
    for (after, before, what) in [
        (&stamped, &plain, "adding"),
        (&unlabelled, &admitted, "removing"),
        (&flipped, &admitted, "changing"),
    ] {
        assert!(
            matches!(evaluate(&managed, "UPDATE", USER, after, before), Outcome::Denied(m) if m.contains("cannot be added")),
            "{what}"
        );
        assert_eq!(
            evaluate(&managed, "UPDATE", CONTROLLER, after, before),
            Outcome::Allowed,
            "{what}"
        );
    }
    let released = pod(managed_labels(), 1, &[]);
    assert_eq!(
        evaluate(&managed, "UPDATE", USER, &released, &admitted),
        Outcome::Allowed
    );
    assert_eq!(
        evaluate(&managed, "UPDATE", USER, &plain, &plain),
        Outcome::Allowed
    );
}
