//! The one-pass reading of a review answers byte for byte as the two-pass reading does, on the
//! kept fuzz corpus, its regressions, and hand-made reviews aimed at where the two could part:
//! escaped strings (which cannot be borrowed), wrong types in borrowed fields, objects that are
//! not pods, deep nesting, duplicate keys, and malformed bodies.

use std::path::Path;

use serde_json::{Value, json};

use super::*;
use crate::fuzz_entry::{NOW_UNIX_S, state};

fn corpus() -> Vec<Vec<u8>> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut bodies = Vec::new();
    for kind in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join("admission_review")) else {
            continue;
        };
        for entry in entries {
            bodies.push(std::fs::read(entry.unwrap().path()).unwrap());
        }
    }
    assert!(bodies.len() >= 40, "only {} corpus entries", bodies.len());
    bodies
}

/// A Deployment's GPU training pod as the API server sends it (the benches' review).
fn training_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "trainer-7d9f8c-", "namespace": "llm-research",
            "labels": {"app": "trainer", "ai-task-type": "train", "deadline": "20300101"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "trainer-7d9f8c", "uid": "a1b2", "controller": true}]},
        "spec": {
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}],
                "defaultMode": 420}}],
            "containers": [{"name": "main", "image": "registry.example.com/trainer:1.0",
                "resources": {"limits": {"nvidia.com/gpu": "1"},
                    "requests": {"nvidia.com/gpu": "1", "cpu": "4"}}}],
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0, "preemptionPolicy": "PreemptLowerPriority"
        }
    })
}

fn review_of(kind: &str, operation: &str, namespace: Value, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": kind},
            "namespace": namespace, "operation": operation, "object": object}
    })
}

fn with(mut value: Value, pointer: &str, field: &str, set: Value) -> Value {
    value.pointer_mut(pointer).unwrap()[field] = set;
    value
}

fn handmade() -> Vec<Vec<u8>> {
    let pod = training_pod();
    let reviews = [
        review_of("Pod", "CREATE", json!("llm-research"), pod.clone()),
        review_of("Pod", "CREATE", json!(null), pod.clone()),
        review_of("Pod", "CREATE", json!("ml\u{e9}\n"), pod.clone()),
        review_of("Pod", "CREATE", json!(5), pod.clone()),
        review_of("Pod", "UPDATE", json!("llm-research"), pod.clone()),
        review_of(
            "Deployment",
            "CREATE",
            json!("ml"),
            json!({"spec": {"replicas": 3}}),
        ),
        review_of("Deployment", "CREATE", json!("ml"), json!([1, 2])),
        review_of("Pod", "CREATE", json!("ml"), json!("not an object")),
        review_of("Pod", "CREATE", json!("ml"), json!(null)),
        // Escapes force an owned copy where the clean text is borrowed.
        review_of(
            "Pod",
            "CREATE",
            json!("llm-research"),
            with(
                pod.clone(),
                "/metadata",
                "generateName",
                json!("tr\"ainer\u{1F600}-"),
            ),
        ),
        review_of(
            "Pod",
            "CREATE",
            json!("shared"),
            with(
                with(pod.clone(), "/metadata", "namespace", json!("sh\tared")),
                "/spec",
                "preemptionPolicy",
                json!("Never\\"),
            ),
        ),
        // Wrong types where a string is borrowed.
        review_of(
            "Pod",
            "CREATE",
            json!("ml"),
            with(pod.clone(), "/metadata", "name", json!(7)),
        ),
        review_of(
            "Pod",
            "CREATE",
            json!("ml"),
            with(pod.clone(), "/spec", "preemptionPolicy", json!(["Never"])),
        ),
        review_of(
            "Pod",
            "CREATE",
            json!("ml"),
            with(pod.clone(), "/metadata/ownerReferences/0", "kind", json!(1)),
        ),
        review_of(
            "Pod",
            "CREATE",
            json!("ml"),
            with(pod.clone(), "/spec", "containers", json!("nope")),
        ),
        with(
            review_of("Pod", "CREATE", json!("ml"), pod.clone()),
            "/request",
            "subResource",
            json!("binding"),
        ),
        with(
            review_of("Pod", "CREATE", json!("ml"), pod.clone()),
            "",
            "apiVersion",
            json!("admission.k8s.io/v1beta1"),
        ),
        with(
            review_of("Pod", "CREATE", json!("ml"), pod.clone()),
            "",
            "request",
            json!(null),
        ),
    ];
    let mut bodies: Vec<Vec<u8>> = reviews
        .iter()
        .map(|r| serde_json::to_vec(r).unwrap())
        .collect();
    let clean = String::from_utf8(bodies[0].clone()).unwrap();
    // Text that a `Value` cannot carry: duplicate keys, deep nesting, trailing bytes, cut short.
    bodies.extend(
        [
            clean.replacen(r#""spec":{"#, r#""spec":{"priority":1,"#, 1),
            clean.replacen(r#""metadata":{"#, r#""metadata":{},"metadata":{"#, 1),
            clean.replacen(r#""object":{"#, r#""object":{"x":1},"object":{"#, 1),
            clean.replacen(
                r#""object":{"#,
                &format!(
                    r#""object":{{"deep":{}1{},"#,
                    "[".repeat(126),
                    "]".repeat(126)
                ),
                1,
            ),
            format!("{clean} x"),
            clean[..clean.len() / 2].to_string(),
            // The object ahead of the kind it is read by.
            clean.replacen(r#""request":{"#, r#""request":{"object":{"spec":{}},"#, 1),
        ]
        .map(String::into_bytes),
    );
    bodies.extend([
        b"{".to_vec(),
        b"[]".to_vec(),
        b"null".to_vec(),
        vec![0xff, 0xfe],
    ]);
    // Bytes that are not UTF-8, in a string that is read and in one that is skipped.
    let clean = bodies[0].clone();
    for (field, value) in [
        (&br#""app":"trainer""#[..], &b"\"app\":\"tr\xc3\x28\""[..]),
        (&br#""path":"token""#[..], &b"\"path\":\"tok\xff\""[..]),
    ] {
        let at = clean
            .windows(field.len())
            .position(|w| w == field)
            .expect("the field is in the review");
        bodies.push([&clean[..at], value, &clean[at + field.len()..]].concat());
    }
    bodies
}

#[test]
fn one_pass_answers_as_two_passes_do() {
    let state = state();
    let mut read_in_one_pass = 0;
    let mut patched = 0;
    for body in corpus().into_iter().chain(handmade()) {
        let shown = String::from_utf8_lossy(&body);
        match (
            review(&body, state, NOW_UNIX_S),
            review_in_two_passes(&body, state, NOW_UNIX_S),
        ) {
            (Ok(one), Ok(two)) => {
                assert_eq!(
                    String::from_utf8_lossy(&one.body),
                    String::from_utf8_lossy(&two.body),
                    "for {shown}"
                );
                assert_eq!(one.outcome, two.outcome, "for {shown}");
                patched += usize::from(one.outcome == Outcome::Patched);
            }
            (Err(one), Err(two)) => assert_eq!(one.to_string(), two.to_string(), "for {shown}"),
            (one, two) => panic!(
                "one pass {:?}, two passes {:?} for {shown}",
                one.map(|a| a.outcome),
                two.map(|a| a.outcome)
            ),
        }
        read_in_one_pass += usize::from(super::read_in_one_pass(&body).is_some());
    }
    // The comparison means something only if the one-pass reading is what answered.
    assert!(
        read_in_one_pass >= 30 && patched >= 10,
        "{read_in_one_pass} read in one pass, {patched} patched"
    );
}

#[test]
fn clean_strings_are_borrowed_and_escaped_ones_owned() {
    let clean =
        serde_json::to_vec(&review_of("Pod", "CREATE", json!("ml"), training_pod())).unwrap();
    let envelope: ReviewIn<'_, Pod<'_>> = serde_json::from_slice(&clean).unwrap();
    let request = envelope.request.unwrap();
    assert!(matches!(request.namespace, Some(Text(Cow::Borrowed("ml")))));
    let meta = request.object.unwrap().metadata.unwrap();
    assert!(matches!(
        meta.generate_name,
        Some(Text(Cow::Borrowed("trainer-7d9f8c-")))
    ));

    let escaped =
        serde_json::to_vec(&review_of("Pod", "CREATE", json!("m\"l"), training_pod())).unwrap();
    let envelope: ReviewIn<'_, Pod<'_>> = serde_json::from_slice(&escaped).unwrap();
    let namespace = envelope.request.unwrap().namespace.unwrap();
    assert!(matches!(namespace, Text(Cow::Owned(ref text)) if text == "m\"l"));
}
