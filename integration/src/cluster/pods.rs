//! Pods as users submit them: GPU requests, `ai-task-type`, an optional gang, and how
//! long kwok runs them.

use serde_json::{Value, json};

use super::monitor::GPU;

/// A training pod asking for `gpus` whole GPUs.
pub fn gpu_pod(namespace: &str, name: &str, gpus: u32) -> Value {
    json!({
        "metadata": {"name": name, "namespace": namespace, "labels": {"ai-task-type": "train"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "trainer:1",
                "resources": {"requests": {GPU: gpus.to_string()}, "limits": {GPU: gpus.to_string()}}}]
        }
    })
}

/// Member `index` of gang `group` (`members` pods of `gpus` GPUs each).
pub fn gang_pod(namespace: &str, group: &str, index: u32, members: u32, gpus: u32) -> Value {
    let mut pod = gpu_pod(namespace, &format!("{group}-{index}"), gpus);
    pod["metadata"]["labels"]["gpufair.io/pod-group"] = json!(group);
    pod["metadata"]["annotations"]["gpufair.io/min-member"] = json!(members.to_string());
    pod
}
