//! One control-plane program as a child process: its command line kept so it can be started
//! again after a kill, its output in a log file read for failure messages.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::ControlPlaneError;

/// A program and its arguments, and the process now running them (if any).
pub struct Process {
    pub name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
}

impl Process {
    /// Starts `program` with `args`, appending its stdout and stderr to `log`.
    pub fn start(
        name: &str,
        program: &Path,
        args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
    ) -> Result<Process, ControlPlaneError> {
        let mut process = Process {
            name: name.to_string(),
            program: program.to_path_buf(),
            args,
            env,
            log,
            child: None,
        };
        process.spawn()?;
        Ok(process)
    }

    /// A program not started yet: a placeholder while the control plane comes up.
    pub fn not_started(name: &str) -> Process {
        Process {
            name: name.to_string(),
            program: PathBuf::new(),
            args: Vec::new(),
            env: Vec::new(),
            log: PathBuf::new(),
            child: None,
        }
    }

    fn spawn(&mut self) -> Result<(), ControlPlaneError> {
        let open = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
        };
        let (out, err) = match (open(), open()) {
            (Ok(out), Ok(err)) => (out, err),
            (Err(e), _) | (_, Err(e)) => {
                return Err(ControlPlaneError::Start {
                    name: self.name.clone(),
                    message: format!("log file {}: {e}", self.log.display()),
                });
            }
        };
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| ControlPlaneError::Start {
                name: self.name.clone(),
                message: format!("could not run {}: {e}", self.program.display()),
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// Whether the process has exited (or was never started again after a kill).
    pub fn exited(&mut self) -> Option<String> {
        match self.child.as_mut() {
            None => Some("stopped".into()),
            Some(child) => match child.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                Ok(None) => None,
                Err(e) => Some(e.to_string()),
            },
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, and waits for the exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub async fn terminate(&mut self, grace: Duration) {
        let Some(pid) = self.pid() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline {
            if self.exited().is_some() {
                self.child = None;
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.kill();
    }

    /// Starts the same command line again (after [`kill`](Self::kill) or
    /// [`terminate`](Self::terminate)).
    pub fn restart(&mut self) -> Result<(), ControlPlaneError> {
        self.kill();
        self.spawn()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port nobody listens on now. The kernel hands out ports in sequence, so two calls
/// close together get different ones.
pub fn free_port() -> Result<u16, ControlPlaneError> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| ControlPlaneError::Start {
            name: "port".into(),
            message: format!("no free loopback port: {e}"),
        })?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| ControlPlaneError::Start {
            name: "port".into(),
            message: e.to_string(),
        })
}
