//! Node allocatable from the real `gpufair-device-plugin` with fake GPUs: the plugin registers
//! with a fake kubelet, its ListAndWatch lists become the node's capacity and allocatable, and
//! the scheduler stand-in places GPU pods by them.

use std::time::Duration;

use gpufair_integration::standin::devices::DevicePluginNode;
use gpufair_integration::standin::{StandIn, StandInOptions};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

const FAKE_GPUS: &str = "gpus:
  - { uuid: GPU-aaaaaaaa-0000-0000-0000-000000000000, model: NVIDIA H100 80GB HBM3, memoryMiB: 81920 }
  - { uuid: GPU-bbbbbbbb-0000-0000-0000-000000000000, model: NVIDIA H100 80GB HBM3, memoryMiB: 81920 }
  - uuid: GPU-dddddddd-0000-0000-0000-000000000000
    model: NVIDIA H100 80GB HBM3
    memoryMiB: 81920
    mig: [ { uuid: MIG-cccccccc-0000-0000-0000-000000000000, profile: 1g.10gb } ]
";

fn gpu_pod(name: &str, gpus: u32) -> Value {
    json!({"metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "cuda:12",
            "resources": {"requests": {"nvidia.com/gpu": gpus.to_string()}, "limits": {"nvidia.com/gpu": gpus.to_string()}}}]}})
}

fn allocatable(node: Option<&Value>, resource: &str) -> Option<String> {
    node.and_then(|n| n["status"]["allocatable"][resource].as_str())
        .map(str::to_string)
}

#[tokio::test]
async fn device_plugin_gives_the_node_its_gpus() {
    let standin = StandIn::start(StandInOptions::for_tests()).await.unwrap();
    let binary = gpufair_integration::binary("gpufair-device-plugin", "gpufair-device-plugin");
    let plugin = DevicePluginNode::start(&standin, &binary, "gpu-node-1", FAKE_GPUS, None)
        .await
        .unwrap();
    let node = standin
        .wait_for("v1", "Node", "", "gpu-node-1", WAIT, |n| {
            allocatable(n, "nvidia.com/gpu").as_deref() == Some("2")
                && allocatable(n, "nvidia.com/mig-1g.10gb").as_deref() == Some("1")
        })
        .await
        .unwrap_or_else(|e| panic!("{e}; plugin log:\n{}", plugin.log()))
        .unwrap();
    assert_eq!(node["status"]["capacity"]["nvidia.com/gpu"], "2");

    // Two GPUs: a 2-GPU pod runs there, then a 1-GPU pod does not fit.
    standin.submit_pod(gpu_pod("pair", 2), None).await.unwrap();
    let pair = standin
        .wait_for("v1", "Pod", "default", "pair", WAIT, |p| {
            p.is_some_and(|p| p["status"]["phase"] == "Running")
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pair["spec"]["nodeName"], "gpu-node-1");
    standin.submit_pod(gpu_pod("third", 1), None).await.unwrap();
    let third = standin
        .wait_for("v1", "Pod", "default", "third", WAIT, |p| {
            p.is_some_and(|p| p["status"]["conditions"][0]["reason"] == "Unschedulable")
        })
        .await
        .unwrap()
        .unwrap();
    assert!(
        third["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("Insufficient nvidia.com/gpu")
    );
    drop(plugin);
}
