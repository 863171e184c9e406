//! Node allocatable from the real device plugin: runs `gpufair-device-plugin` with fake GPUs
//! against a fake kubelet registration socket, and sets the node's `capacity` (all devices) and
//! `allocatable` (healthy devices) for each resource it registers, from every ListAndWatch
//! update, through the API server, as kubelet's device manager does. The plugin writes its
//! GpuNodeReport itself, with its own ServiceAccount's kubeconfig.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gpufair_device_plugin::testkit::{FakeKubelet, Registered};
use tokio::task::JoinHandle;

use super::api::KubeApi;

#[derive(Debug, thiserror::Error)]
#[error("device plugin node {node}: {message}")]
pub struct DeviceError {
    pub node: String,
    pub message: String,
}

/// A running device plugin feeding one node. Dropping it kills the plugin.
pub struct DevicePluginNode {
    /// Where the plugin serves its Prometheus metrics (`host:port`, plain HTTP).
    pub metrics: String,
    child: Child,
    tasks: Vec<JoinHandle<()>>,
    dir: tempfile::TempDir,
}

/// The address the plugin's metrics server bound, from its log line
/// `... serving metrics bound=127.0.0.1:PORT`.
fn metrics_address(log: &str) -> Option<String> {
    log.lines()
        .filter(|line| line.contains("serving metrics"))
        .find_map(|line| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix("bound="))
        })
        .map(str::to_string)
}

/// Reads one registration's ListAndWatch stream into the node's status.
async fn follow(api: KubeApi, node: String, mut registered: Registered) {
    let resource = registered.request.resource_name.clone();
    while let Some(list) = registered.lists.recv().await {
        let healthy = list
            .devices
            .iter()
            .filter(|d| d.health == "Healthy")
            .count();
        if let Err(error) = api
            .set_node_resource(&node, &resource, list.devices.len(), healthy)
            .await
        {
            tracing::warn!(%node, %resource, %error, "could not set node allocatable");
        }
    }
}

impl DevicePluginNode {
    /// Starts the plugin binary at `binary` for `node` (which must exist) with the fake GPUs
    /// described by `fake_gpus_yaml`, an optional plugin config, and `kubeconfig` for its
    /// reports.
    pub async fn start(
        api: &KubeApi,
        binary: &Path,
        node: &str,
        fake_gpus_yaml: &str,
        config_yaml: Option<&str>,
        kubeconfig: Option<&Path>,
    ) -> Result<DevicePluginNode, DeviceError> {
        let setup = |message: String| DeviceError {
            node: node.to_string(),
            message,
        };
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
            .arg("--metrics-listen")
            .arg("127.0.0.1:0")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(kubeconfig) = kubeconfig {
            command.env("KUBECONFIG", kubeconfig);
        }
        if let Some(config) = config_yaml {
            let path = dir.path().join("config.yaml");
            std::fs::write(&path, config).map_err(|e| setup(format!("{}: {e}", path.display())))?;
            command.arg("--config").arg(path);
        }
        let mut child = command
            .spawn()
            .map_err(|e| setup(format!("could not start {}: {e}", binary.display())))?;
        let log_path = dir.path().join("device-plugin.log");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        let metrics = loop {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if let Some(address) = metrics_address(&log) {
                break address;
            }
            if tokio::time::Instant::now() > deadline || matches!(child.try_wait(), Ok(Some(_))) {
                let _ = child.kill();
                return Err(setup(format!(
                    "the plugin never said where it serves metrics:\n{log}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let api = api.clone();
        let node_name = node.to_string();
        let registrations = tokio::spawn(async move {
            let mut followers = Vec::new();
            while let Some(registered) = kubelet.next_registration(Duration::from_secs(3600)).await
            {
                followers.push(tokio::spawn(follow(
                    api.clone(),
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
            metrics,
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
