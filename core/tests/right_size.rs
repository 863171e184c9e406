//! Right-sizing at admission: what it rewrites, what it declines, and the two promises it
//! keeps whatever the input (property tests): it never picks a slice smaller than the
//! prediction with headroom, and never rewrites a pod that did not opt in or whose family has
//! too little history.

use std::collections::BTreeMap;

use gpufair_core::mutation::{
    AdmissionPolicy, ContainerResources, Mutation, NodeSelectorRequirement, OP_IN, PodFacts,
    QueueFacts,
};
use gpufair_core::rightsize::{
    FAMILY_LABEL, FamilyHistory, OwnerFacts, PoolSlices, RIGHT_SIZE_LABEL,
    RIGHT_SIZE_RESULT_ANNOTATION, RightSize, RightSizePolicy, SliceOffer, right_size,
};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;

fn admission() -> AdmissionPolicy {
    AdmissionPolicy::bare()
}

fn offer(resource: &str, memory_bytes: u64) -> SliceOffer {
    SliceOffer {
        resource: resource.into(),
        memory_bytes,
    }
}

fn h100_pool(slices: Vec<SliceOffer>) -> RightSizePolicy {
    RightSizePolicy {
        min_samples: 3,
        pools: vec![PoolSlices {
            node_selector: BTreeMap::from([("pool".to_string(), "h100".to_string())]),
            slices,
        }],
        ..RightSizePolicy::default()
    }
}

fn h100_offers() -> Vec<SliceOffer> {
    vec![
        offer("nvidia.com/mig-1g.10gb", 10 * GIB),
        offer("nvidia.com/mig-3g.40gb", 40 * GIB),
        offer("nvidia.com/gpu.shared", 20 * GIB),
    ]
}

fn queue() -> QueueFacts {
    QueueFacts {
        name: "research".into(),
        namespaces: vec!["ml".into()],
        node_pool: vec![NodeSelectorRequirement::new("pool", OP_IN, &["h100"])],
        priority_classes: None,
    }
}

fn pod(labels: &[(&str, &str)], gpus: &str) -> PodFacts {
    PodFacts {
        namespace: "ml".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        containers: vec![
            ContainerResources {
                name: "init".into(),
                ..ContainerResources::default()
            },
            ContainerResources {
                name: "main".into(),
                limits: BTreeMap::from([("nvidia.com/gpu".into(), gpus.into())]),
                requests: BTreeMap::from([("nvidia.com/gpu".into(), gpus.into())]),
            },
        ],
        owner: Some(OwnerFacts {
            kind: "Job".into(),
            name: "finetune-17".into(),
        }),
        ..PodFacts::default()
    }
}

fn history(gib: f64, samples: u32) -> BTreeMap<(String, String), FamilyHistory> {
    BTreeMap::from([(
        ("ml".to_string(), "job.finetune".to_string()),
        FamilyHistory {
            smoothed_peak_bytes: gib * GIB as f64,
            samples,
        },
    )])
}

fn decide(pod: &PodFacts, policy: &RightSizePolicy, gib: f64, samples: u32) -> RightSize {
    right_size(pod, &queue(), &admission(), policy, &history(gib, samples)).unwrap()
}

#[test]
fn an_opted_in_whole_gpu_pod_moves_to_the_smallest_fitting_slice() {
    let pod = pod(&[(RIGHT_SIZE_LABEL, "true")], "1");
    // 15 GiB x 1.2 = 18 GiB: the 20 GiB shared slice, not the 40 GiB profile.
    let outcome = decide(&pod, &h100_pool(h100_offers()), 15.0, 3);
    let RightSize::Rewrite(rewrite) = &outcome else {
        panic!("expected a rewrite, got {outcome:?}");
    };
    assert_eq!(rewrite.to, "nvidia.com/gpu.shared");
    assert_eq!(rewrite.family, "job.finetune");
    let mutations = outcome.mutations(&pod);
    assert!(mutations.contains(&Mutation::ReplaceGpuResource {
        container: 1,
        from: "nvidia.com/gpu".into(),
        to: "nvidia.com/gpu.shared".into(),
        requests: true,
        limits: true,
    }));
    let message = outcome.message().unwrap();
    assert!(
        message.contains("18.0 GiB") && message.contains("3 pods"),
        "{message}"
    );

    // Applied, the pod asks for the slice, and a second pass (reinvocation) changes nothing.
    let after = pod.apply(&mutations);
    assert_eq!(after.containers[1].limits["nvidia.com/gpu.shared"], "1");
    assert!(!after.containers[1].limits.contains_key("nvidia.com/gpu"));
    assert_eq!(
        decide(&after, &h100_pool(h100_offers()), 15.0, 3),
        RightSize::NotRequested
    );
}

#[test]
fn declines_say_why() {
    let policy = h100_pool(h100_offers());
    let opted = [(RIGHT_SIZE_LABEL, "true")];
    let cases: Vec<(PodFacts, f64, u32, &str)> = vec![
        (pod(&opted, "2"), 5.0, 9, "one whole nvidia.com/gpu"),
        (pod(&opted, "1"), 5.0, 2, "2 of the 3 pods of history"),
        (pod(&opted, "1"), 35.0, 9, "no slice"),
        (
            PodFacts {
                owner: None,
                ..pod(&opted, "1")
            },
            5.0,
            9,
            "no family",
        ),
    ];
    for (pod, gib, samples, expected) in cases {
        let outcome = decide(&pod, &policy, gib, samples);
        let RightSize::Declined(decline) = &outcome else {
            panic!("expected a decline, got {outcome:?}");
        };
        assert!(decline.reason.contains(expected), "{}", decline.reason);
        assert_eq!(
            outcome.mutations(&pod),
            vec![Mutation::SetAnnotation {
                key: RIGHT_SIZE_RESULT_ANNOTATION.into(),
                value: outcome.message().unwrap()
            }]
        );
    }
    // A queue whose pool offers nothing.
    let mut other = queue();
    other.node_pool = vec![NodeSelectorRequirement::new("pool", OP_IN, &["a100"])];
    let outcome = right_size(
        &pod(&opted, "1"),
        &other,
        &admission(),
        &policy,
        &history(5.0, 9),
    );
    assert!(
        matches!(&outcome, Ok(RightSize::Declined(d)) if d.reason.contains("offers no")),
        "{outcome:?}"
    );
}

#[test]
fn bad_labels_are_errors_and_no_opt_in_is_nothing() {
    let policy = h100_pool(h100_offers());
    for labels in [[(RIGHT_SIZE_LABEL, "yes")], [(FAMILY_LABEL, "Bad_Name")]] {
        let err = right_size(
            &pod(&labels, "1"),
            &queue(),
            &admission(),
            &policy,
            &history(1.0, 9),
        )
        .unwrap_err();
        assert!(err.to_string().contains("expected"), "{err}");
    }
    let outcome = decide(&pod(&[], "1"), &policy, 1.0, 9);
    assert_eq!(outcome, RightSize::NotRequested);
    assert!(outcome.mutations(&pod(&[], "1")).is_empty());
}

fn offers_strategy() -> impl Strategy<Value = Vec<SliceOffer>> {
    prop::collection::vec((0u8..6, 1u64..100), 0..6).prop_map(|list| {
        list.into_iter()
            .enumerate()
            .map(|(i, (kind, gib))| {
                let resource = if kind == 0 {
                    "nvidia.com/gpu.shared".to_string()
                } else {
                    format!("nvidia.com/mig-{kind}g.{gib}gb-{i}")
                };
                offer(&resource, gib * GIB / 2)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_a_slice_smaller_than_prediction_with_headroom(
        offers in offers_strategy(),
        peak_mib in 0u64..120_000,
        headroom in 0u32..60,
        samples in 0u32..10,
    ) {
        let mut policy = h100_pool(offers.clone());
        policy.headroom_percent = headroom;
        let prediction = (peak_mib << 20) as f64;
        let outcome = decide(
            &pod(&[(RIGHT_SIZE_LABEL, "true")], "1"),
            &policy,
            prediction / GIB as f64,
            samples,
        );
        if let RightSize::Rewrite(r) = outcome {
            let needed = prediction * (1.0 + f64::from(headroom) / 100.0);
            prop_assert!(r.slice_bytes as f64 >= needed, "{} < {needed}", r.slice_bytes);
            // ...and it is the smallest that holds it.
            for o in &offers {
                prop_assert!(!(o.memory_bytes as f64 >= needed && o.memory_bytes < r.slice_bytes));
            }
            prop_assert!(offers.iter().any(|o| o.resource == r.to && o.memory_bytes == r.slice_bytes));
        }
    }

    #[test]
    fn never_a_rewrite_without_opt_in_or_history(
        opt in prop::option::of(prop::sample::select(vec!["true", "false"])),
        samples in 0u32..8,
        min_samples in 1u32..8,
        peak_gib in 0.0f64..30.0,
    ) {
        let labels: Vec<(&str, &str)> = opt.iter().map(|v| (RIGHT_SIZE_LABEL, *v)).collect();
        let mut policy = h100_pool(h100_offers());
        policy.min_samples = min_samples;
        let outcome = decide(&pod(&labels, "1"), &policy, peak_gib, samples);
        if matches!(outcome, RightSize::Rewrite(_)) {
            prop_assert_eq!(opt, Some("true"));
            prop_assert!(samples >= min_samples);
        }
        if opt != Some("true") {
            prop_assert_eq!(outcome, RightSize::NotRequested);
        }
    }
}
