//! Where the control plane's binaries come from. In order, per binary:
//! 1. `GPUFAIR_CONTROLPLANE_BIN`, a directory holding any of them;
//! 2. `KUBEBUILDER_ASSETS` (envtest's convention) for `etcd`, `kube-apiserver` and `kubectl`;
//! 3. a build from the Go modules under `integration/controlplane/` (`build.sh`), once per
//!    change of their pins, under the target directory, with a lock so that test binaries
//!    running at once build it once.
//!
//! Without Go and without such directories, [`Binaries::locate`] fails with a message that
//! says what to install or set. It never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The variable naming a directory with any of the control plane's binaries.
pub const BIN_VARIABLE: &str = "GPUFAIR_CONTROLPLANE_BIN";
/// envtest's variable: a directory with `etcd`, `kube-apiserver` and `kubectl`.
pub const KUBEBUILDER_ASSETS: &str = "KUBEBUILDER_ASSETS";

/// Paths of every program the harness starts, and kwok's stage files.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kubectl: PathBuf,
    pub kwok: PathBuf,
    /// The stage files kwok's module ships (node initialise and heartbeat, pod ready, delete).
    pub stages: PathBuf,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum BinariesError {
    #[error(
        "the end-to-end tests need a Kubernetes control plane, and none could be found or built: {0}\n\
         Install Go 1.26 or newer (your distribution's golang package, or go.dev/dl) so the tests \
         build kube-apiserver, etcd, kube-scheduler, kube-controller-manager, kubectl and kwok from \
         integration/controlplane/ on first use; or set {KUBEBUILDER_ASSETS} to a directory with etcd, \
         kube-apiserver and kubectl and {BIN_VARIABLE} to one with kube-scheduler, \
         kube-controller-manager and kwok (and kwok's stages/ folder)."
    )]
    Unavailable(String),
}

const NAMES: [&str; 6] = [
    "etcd",
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
    "kubectl",
    "kwok",
];

static LOCATED: OnceLock<Result<Binaries, BinariesError>> = OnceLock::new();

impl Binaries {
    /// Finds (building on first use) every binary; the answer is kept for the process.
    pub fn locate() -> Result<Binaries, BinariesError> {
        LOCATED.get_or_init(locate_uncached).clone()
    }
}

fn from_variable(variable: &str, name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(variable)?;
    let path = Path::new(&dir).join(name);
    path.is_file().then_some(path)
}

fn preset(name: &str) -> Option<PathBuf> {
    from_variable(BIN_VARIABLE, name).or_else(|| {
        matches!(name, "etcd" | "kube-apiserver" | "kubectl")
            .then(|| from_variable(KUBEBUILDER_ASSETS, name))
            .flatten()
    })
}

fn preset_stages() -> Option<PathBuf> {
    let dir = std::env::var_os(BIN_VARIABLE)?;
    let stages = Path::new(&dir).join("stages");
    stages.is_dir().then_some(stages)
}

fn locate_uncached() -> Result<Binaries, BinariesError> {
    let found: Vec<Option<PathBuf>> = NAMES.iter().map(|n| preset(n)).collect();
    let stages = preset_stages();
    let built = if found.iter().all(Option::is_some) && stages.is_some() {
        None
    } else {
        Some(build()?)
    };
    let pick = |index: usize| -> PathBuf {
        found[index].clone().unwrap_or_else(|| {
            built
                .as_ref()
                .map(|b| b.join("bin").join(NAMES[index]))
                .unwrap_or_default()
        })
    };
    Ok(Binaries {
        etcd: pick(0),
        kube_apiserver: pick(1),
        kube_scheduler: pick(2),
        kube_controller_manager: pick(3),
        kubectl: pick(4),
        kwok: pick(5),
        stages: stages
            .or_else(|| built.as_ref().map(|b| b.join("stages")))
            .unwrap_or_default(),
    })
}

/// Runs `integration/controlplane/build.sh`, which prints the finished directory last. Its
/// progress (stderr) goes straight to the terminal: a cold build takes many minutes.
fn build() -> Result<PathBuf, BinariesError> {
    let script = crate::workspace_root().join("integration/controlplane/build.sh");
    let target = crate::target_dir();
    let output = Command::new("bash")
        .arg(&script)
        .arg(&target)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| {
            BinariesError::Unavailable(format!("could not run {}: {e}", script.display()))
        })?;
    if !output.status.success() {
        return Err(BinariesError::Unavailable(format!(
            "{} exited with {}",
            script.display(),
            output.status
        )));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = stdout
        .lines()
        .last()
        .map(PathBuf::from)
        .filter(|d| d.join("complete").is_file())
        .ok_or_else(|| {
            BinariesError::Unavailable(format!(
                "{} printed no finished directory: {stdout}",
                script.display()
            ))
        })?;
    Ok(dir)
}
