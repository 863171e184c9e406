//! Node allocatable from the real device plugin: runs `gpufair-device-plugin` with fake GPUs
//! against a fake kubelet registration socket, and sets the node's `capacity` (all devices)
//! and `allocatable` (healthy devices) for each resource it registers, from every
//! ListAndWatch update, as kubelet's device manager does.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use gpufair_device_plugin::testkit::{FakeKubelet, Registered};
use serde_json::json;
use tokio::task::JoinHandle;

use super::store::Target;
use super::{NodeSpec, StandIn, StandInError, State};

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device plugin node {node}: {message}")]
    Setup { node: String, message: String },
    #[error(transparent)]
    StandIn(#[from] StandInError),
}

/// A running device plugin feeding one node. Dropping it kills the plugin.
pub struct DevicePluginNode {
    child: Child,
    tasks: Vec<JoinHandle<()>>,
    dir: tempfile::TempDir,
}

fn set_resource(state: &State, node: &str, resource: &str, total: usize, healthy: usize) {
    let mut inner = state.store.lock();
    let Ok(nodes) = inner.kind("", "nodes") else {
        return;
    };
    let result = inner.modify(&nodes, "", node, Target::System, |old| {
        let mut new = old.clone();
        new["status"]["capacity"][resource] = json!(total.to_string());
        new["status"]["allocatable"][resource] = json!(healthy.to_string());
        Ok(new)
    });
    if let Err(error) = result {
        tracing::warn!(%node, %resource, %error, "could not set node allocatable");
    }
}

/// Reads one registration's ListAndWatch stream into the node's status.
async fn follow(state: Arc<State>, node: String, mut registered: Registered) {
    let resource = registered.request.resource_name.clone();
    while let Some(list) = registered.lists.recv().await {
        let healthy = list
            .devices
            .iter()
            .filter(|d| d.health == "Healthy")
            .count();
        set_resource(&state, &node, &resource, list.devices.len(), healthy);
    }
}

impl DevicePluginNode {
    /// Starts the plugin binary at `binary` for `node` (created with no GPUs if absent) with
    /// the fake GPUs described by `fake_gpus_yaml` and an optional plugin config.
    pub async fn start(
        standin: &StandIn,
        binary: &Path,
        node: &str,
        fake_gpus_yaml: &str,
        config_yaml: Option<&str>,
    ) -> Result<DevicePluginNode, DeviceError> {
        let setup = |message: String| DeviceError::Setup {
            node: node.to_string(),
            message,
        };
        if standin.get("v1", "Node", "", node).is_err() {
            standin.add_node(NodeSpec::new(node)).await?;
        }
        let dir = tempfile::tempdir().map_err(|e| setup(format!("temporary directory: {e}")))?;
        let plugins = dir.path().join("device-plugins");
        std::fs::create_dir_all(&plugins)
            .map_err(|e| setup(format!("{}: {e}", plugins.display())))?;
        let fake = dir.path().join("fake-gpus.yaml");
        std::fs::write(&fake, fake_gpus_yaml)
            .map_err(|e| setup(format!("{}: {e}", fake.display())))?;
        let mut kubelet =
            FakeKubelet::start(&plugins).map_err(|e| setup(format!("fake kubelet: {e}")))?;
        let log = std::fs::File::create(dir.path().join("device-plugin.log"))
            .map_err(|e| setup(format!("log file: {e}")))?;
        let mut command = Command::new(binary);
        command
            .arg("--kubelet-dir")
            .arg(&plugins)
            .arg("--fake-gpus")
            .arg(&fake)
            .arg("--pod-resources-socket")
            .arg(dir.path().join("no-pod-resources.sock"))
            .arg("--node-name")
            .arg(node)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(config) = config_yaml {
            let path = dir.path().join("config.yaml");
            std::fs::write(&path, config).map_err(|e| setup(format!("{}: {e}", path.display())))?;
            command.arg("--config").arg(path);
        }
        let child = command
            .spawn()
            .map_err(|e| setup(format!("could not start {}: {e}", binary.display())))?;
        let state = Arc::clone(standin.state());
        let node_name = node.to_string();
        let registrations = tokio::spawn(async move {
            let mut followers = Vec::new();
            while let Some(registered) = kubelet.next_registration(Duration::from_secs(3600)).await
            {
                followers.push(tokio::spawn(follow(
                    Arc::clone(&state),
                    node_name.clone(),
                    registered,
                )));
            }
            drop(kubelet);
            for follower in followers {
                follower.abort();
            }
        });
        Ok(DevicePluginNode {
            child,
            tasks: vec![registrations],
            dir,
        })
    }

    /// The plugin's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("device-plugin.log")).unwrap_or_default()
    }
}

impl Drop for DevicePluginNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for task in &self.tasks {
            task.abort();
        }
    }
}
