//! Command-line tools the tests run besides the control plane: `helm`, `promtool` and the
//! Prometheus server, each built from its project's Go module under `integration/tools/`
//! (`build.sh`), pinned by that module's `go.mod` and `go.sum`, once per change of the pins,
//! under the target directory. `GPUFAIR_HELM`, `GPUFAIR_PROMTOOL` or `GPUFAIR_PROMETHEUS` names
//! a binary to use instead. Without Go and without those variables,
//! [`Tool::locate`] fails with a message that says what to install or set. It never skips.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// A tool `integration/tools/build.sh` builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `helm.sh/helm/v3`'s `cmd/helm`.
    Helm,
    /// `github.com/prometheus/prometheus`'s `cmd/promtool`.
    Promtool,
    /// `github.com/prometheus/prometheus`'s `cmd/prometheus`: the server, without its web UI.
    Prometheus,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the tests need {tool}, and it could not be found or built: {reason}\n\
     Install Go 1.26 or newer (your distribution's golang package, or go.dev/dl) so the tests \
     build it from its Go module under integration/tools/ on first use, or set {variable} to a \
     {tool} binary."
)]
pub struct ToolError {
    tool: &'static str,
    variable: &'static str,
    reason: String,
}

static HELM: OnceLock<Result<PathBuf, ToolError>> = OnceLock::new();
static PROMTOOL: OnceLock<Result<PathBuf, ToolError>> = OnceLock::new();
static PROMETHEUS: OnceLock<Result<PathBuf, ToolError>> = OnceLock::new();

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Helm => "helm",
            Tool::Promtool => "promtool",
            Tool::Prometheus => "prometheus",
        }
    }

    /// The variable that names a binary to use instead of building one.
    pub fn variable(self) -> &'static str {
        match self {
            Tool::Helm => "GPUFAIR_HELM",
            Tool::Promtool => "GPUFAIR_PROMTOOL",
            Tool::Prometheus => "GPUFAIR_PROMETHEUS",
        }
    }

    /// The tool's path, building it on first use; the answer is kept for the process.
    pub fn locate(self) -> Result<PathBuf, ToolError> {
        let cell = match self {
            Tool::Helm => &HELM,
            Tool::Promtool => &PROMTOOL,
            Tool::Prometheus => &PROMETHEUS,
        };
        cell.get_or_init(|| self.locate_uncached()).clone()
    }

    fn error(self, reason: String) -> ToolError {
        ToolError {
            tool: self.name(),
            variable: self.variable(),
            reason,
        }
    }

    fn locate_uncached(self) -> Result<PathBuf, ToolError> {
        if let Some(path) = std::env::var_os(self.variable()) {
            let path = PathBuf::from(path);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(self.error(format!(
                    "{} names {}, which is no file",
                    self.variable(),
                    path.display()
                )))
            };
        }
        // Progress (stderr) goes straight to the terminal: a cold build takes minutes.
        let script = crate::workspace_root().join("integration/tools/build.sh");
        let output = Command::new("bash")
            .arg(&script)
            .arg(crate::target_dir())
            .arg(self.name())
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| self.error(format!("could not run {}: {e}", script.display())))?;
        if !output.status.success() {
            return Err(self.error(format!(
                "{} exited with {}",
                script.display(),
                output.status
            )));
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        stdout
            .lines()
            .last()
            .map(PathBuf::from)
            .filter(|p| p.is_file())
            .ok_or_else(|| self.error(format!("{} printed no binary: {stdout}", script.display())))
    }
}
