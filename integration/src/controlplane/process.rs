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

/// Ports [`free_port`] has handed out in this process. The kernel may hand a port given back
/// out again at once; two control planes started side by side that got the same one would share
/// an etcd, each seeing the other's objects.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A loopback port nobody listens on now, and never handed out before by this process.
pub fn free_port() -> Result<u16, ControlPlaneError> {
    let failed = |message: String| ControlPlaneError::Start {
        name: "port".into(),
        message,
    };
    // The ports refused stay bound until one is found, so the kernel does not offer them again.
    let mut refused = Vec::new();
    for _ in 0..256 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .map_err(|e| failed(format!("no free loopback port: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| failed(e.to_string()))?
            .port();
        let fresh = HANDED_OUT
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(port);
        if fresh {
            return Ok(port);
        }
        refused.push(listener);
    }
    Err(failed(format!(
        "{} loopback ports in a row were handed out before",
        refused.len()
    )))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    #[test]
    fn a_port_is_handed_out_once_however_often_the_kernel_offers_it() {
        let ports: Vec<u16> = (0..300)
            .map(|_| super::free_port().expect("a free port"))
            .collect();
        let distinct: BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }
}
