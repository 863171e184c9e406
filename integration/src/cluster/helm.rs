//! gpufair's Helm chart (deploy/helm/gpufair) installed, upgraded and uninstalled with the real
//! `helm` (built from its Go module, [`crate::tools`]) against the control plane, as an admin
//! would: everything the chart renders goes to the API server, workloads included. The webhook
//! Deployment's, the certificate Job's and the device-plugin DaemonSet's pods cannot run here
//! (no container runtime), so the harness runs the same binaries as processes instead, with
//! tokens of the chart's ServiceAccounts, the chart's config file as kubelet would project its
//! ConfigMap, and the chart's `webhook.url` pointing admission at the local replica.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{ClusterError, NAMESPACE};
use crate::controlplane::ControlPlane;
use crate::tools::Tool;

/// The release name the harness installs the chart as.
pub const RELEASE: &str = "gpufair";

/// One release of the chart on one control plane.
#[derive(Debug, Clone)]
pub struct HelmRelease {
    binary: PathBuf,
    kubeconfig: PathBuf,
    /// Helm's config, cache and data directories, apart from the user's.
    home: PathBuf,
    /// The values file of the last install or upgrade.
    values: PathBuf,
}

fn setup(what: &str, error: impl std::fmt::Display) -> ClusterError {
    ClusterError::Setup(format!("{what}: {error}"))
}

impl HelmRelease {
    /// A release whose files live under `dir`, talking to `plane` as its admin.
    pub fn new(plane: &ControlPlane, dir: &Path) -> Result<HelmRelease, ClusterError> {
        let binary = Tool::Helm.locate().map_err(|e| setup("helm", e))?;
        Ok(HelmRelease {
            binary,
            kubeconfig: plane.kubeconfig_path().to_path_buf(),
            home: dir.join("helm"),
            values: dir.join("helm-values.yaml"),
        })
    }

    /// The chart's directory in the workspace.
    pub fn chart() -> PathBuf {
        crate::workspace_root().join("deploy/helm/gpufair")
    }

    /// `helm install` into gpufair's namespace (created), with `values` (a values file's text).
    /// Helm installs the chart's `crds/` first and waits until they are established.
    pub fn install(&self, values: &str) -> Result<String, ClusterError> {
        self.with_values("install", values, &["--create-namespace"])
    }

    /// `helm upgrade` of the release to `values` (replacing, not merging with, the last ones).
    pub fn upgrade(&self, values: &str) -> Result<String, ClusterError> {
        self.with_values("upgrade", values, &[])
    }

    /// `helm uninstall`, waiting until every object of the release is gone.
    pub fn uninstall(&self) -> Result<String, ClusterError> {
        self.run(&[
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            "60s",
        ])
    }

    fn with_values(
        &self,
        verb: &str,
        values: &str,
        extra: &[&str],
    ) -> Result<String, ClusterError> {
        std::fs::write(&self.values, values).map_err(|e| setup("helm values", e))?;
        let chart = Self::chart().display().to_string();
        let values = self.values.display().to_string();
        let mut args = vec![
            verb,
            RELEASE,
            &chart,
            "--namespace",
            NAMESPACE,
            "-f",
            &values,
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    fn run(&self, args: &[&str]) -> Result<String, ClusterError> {
        let mut command = Command::new(&self.binary);
        command.args(args).arg("--kubeconfig").arg(&self.kubeconfig);
        for (variable, dir) in [
            ("HELM_CONFIG_HOME", "config"),
            ("HELM_CACHE_HOME", "cache"),
            ("HELM_DATA_HOME", "data"),
        ] {
            command.env(variable, self.home.join(dir));
        }
        let output = command
            .output()
            .map_err(|e| setup(&format!("could not run {}", self.binary.display()), e))?;
        if !output.status.success() {
            return Err(ClusterError::Setup(format!(
                "helm {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// `values` (a values file's text) with `webhook.url` set to a replica listening on `listen`,
/// merged into the caller's `webhook` map as `--set` would.
pub fn values_with_url(values: &str, listen: &str) -> Result<String, ClusterError> {
    let mut document: serde_yaml::Value = if values.trim().is_empty() {
        serde_yaml::Value::Mapping(Default::default())
    } else {
        serde_yaml::from_str(values).map_err(|e| setup("helm values", e))?
    };
    let serde_yaml::Value::Mapping(map) = &mut document else {
        return Err(setup("helm values", "not a map of values"));
    };
    let webhook = map
        .entry("webhook".into())
        .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()));
    let serde_yaml::Value::Mapping(webhook) = webhook else {
        return Err(setup("helm values", "webhook is not a map"));
    };
    webhook.insert("url".into(), format!("https://{listen}/mutate").into());
    serde_yaml::to_string(&document).map_err(|e| setup("helm values", e))
}

/// A free loopback address for the replica the chart's `webhook.url` names: the port is taken
/// and given back at once, so the replica binds it a moment later.
pub fn free_listen_address() -> Result<String, ClusterError> {
    let port = crate::controlplane::process::free_port().map_err(|e| setup("a free port", e))?;
    Ok(format!("127.0.0.1:{port}"))
}
