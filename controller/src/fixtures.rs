//! Kubernetes objects as the webhook and kubelet leave them, built in code: for tests, the
//! benchmark and end-to-end harnesses.

use std::sync::Arc;

use gpufair_api::Queue;
use gpufair_core::mutation::DEFAULT_GATE;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{Value, json};

/// A Ready node with `gpus` whole GPUs, 64 CPUs, 512 GiB and 110 pod slots.
pub fn node(name: &str, gpus: u32, labels: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus.to_string(), "cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .expect("a valid Node")
}

/// A Queue with the given spec (JSON) and no status.
pub fn queue(name: &str, spec: Value) -> Queue {
    serde_json::from_value(json!({
        "apiVersion": "gpufair.io/v1alpha1", "kind": "Queue",
        "metadata": {"name": name, "resourceVersion": "1", "generation": 1},
        "spec": spec
    }))
    .expect("a valid Queue")
}

/// A pod as the webhook admitted it: managed, labelled with its queue, gated.
pub fn gated_pod(namespace: &str, name: &str, queue: &str, gpus: u32, created_s: i64) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "namespace": namespace, "name": name, "uid": format!("uid-{namespace}-{name}"),
            "resourceVersion": "7",
            "creationTimestamp": k8s_openapi::jiff::Timestamp::from_second(created_s)
                .expect("a valid time").to_string(),
            "labels": {"gpufair.io/managed": "true", "gpufair.io/queue": queue},
            "annotations": {"gpufair.io/tier": "elastic"}
        },
        "spec": {
            "containers": [{"name": "main", "resources": {
                "requests": {"cpu": "1", "memory": "4Gi"},
                "limits": {"nvidia.com/gpu": gpus.to_string()}
            }}],
            "schedulingGates": [{"name": DEFAULT_GATE}]
        },
        "status": {"phase": "Pending"}
    }))
    .expect("a valid Pod")
}

/// The same pod, bound to `node` and running since `started_s`.
pub fn bound_pod(
    namespace: &str,
    name: &str,
    queue: &str,
    gpus: u32,
    node: &str,
    started_s: i64,
) -> Pod {
    let mut pod = gated_pod(namespace, name, queue, gpus, started_s);
    let spec = pod.spec.as_mut().expect("fixture pods have a spec");
    spec.scheduling_gates = None;
    spec.node_name = Some(node.to_string());
    let status = pod.status.as_mut().expect("fixture pods have a status");
    status.phase = Some("Running".into());
    status.start_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(started_s).expect("a valid time"),
    ));
    pod
}

/// Makes `pod` a member of gang `group` of `min_member` pods.
pub fn in_gang(mut pod: Pod, group: &str, min_member: u32) -> Pod {
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert("gpufair.io/pod-group".into(), group.into());
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert("gpufair.io/min-member".into(), min_member.to_string());
    pod
}

/// A cluster at scale: `queues` queues, `nodes` 8-GPU nodes about 80% busy with running pods,
/// and `pending` gated pods of 1, 2, 4 or 8 GPUs spread over the queues.
pub struct Cluster {
    pub pods: Vec<Arc<Pod>>,
    pub nodes: Vec<Arc<Node>>,
    pub queues: Vec<Arc<Queue>>,
}

pub fn cluster(queues: usize, pending: usize, nodes: usize) -> Cluster {
    let queue_objects: Vec<Arc<Queue>> = (0..queues)
        .map(|q| {
            Arc::new(queue(
                &format!("team-{q:04}"),
                json!({"weight": 1 + q % 3, "guaranteed": (q % 4) as f64, "namespaces": [format!("ns-{q:04}")]}),
            ))
        })
        .collect();
    let node_objects: Vec<Arc<Node>> = (0..nodes)
        .map(|n| Arc::new(node(&format!("node-{n:05}"), 8, json!({}))))
        .collect();
    Cluster {
        pods: cluster_pods(queues, pending, nodes).map(Arc::new).collect(),
        nodes: node_objects,
        queues: queue_objects,
    }
}

/// The pods of [`cluster`], made one at a time (as a watch delivers them).
pub fn cluster_pods(queues: usize, pending: usize, nodes: usize) -> impl Iterator<Item = Pod> {
    // Running: three pods per node (4 + 2 + 1 GPUs), so one GPU per node stays free.
    let running = (0..nodes).flat_map(move |n| {
        [4u32, 2, 1].into_iter().enumerate().map(move |(i, gpus)| {
            let q = (n * 3 + i) % queues.max(1);
            bound_pod(
                &format!("ns-{q:04}"),
                &format!("run-{n:05}-{i}"),
                &format!("team-{q:04}"),
                gpus,
                &format!("node-{n:05}"),
                1_700_000_000 - 3600,
            )
        })
    });
    let waiting = (0..pending).map(move |p| {
        let q = p % queues.max(1);
        gated_pod(
            &format!("ns-{q:04}"),
            &format!("wait-{p:06}"),
            &format!("team-{q:04}"),
            [1u32, 2, 4, 8][p % 4],
            1_700_000_000 + (p as i64 % 3600),
        )
    });
    running.chain(waiting)
}
