//! One `gpufair-webhook serve` replica (admission and controller) as a separate process, with
//! the addresses it logs at start and its log kept for failure messages.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::ClusterError;

/// Flags every replica of one cluster shares.
#[derive(Debug, Clone)]
pub struct ReplicaSettings {
    pub binary: PathBuf,
    /// The admission server's address (`--listen`): `127.0.0.1:0` for any free port, or a fixed
    /// one that an installed webhook configuration already names.
    pub listen: String,
    pub kubeconfig: PathBuf,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    pub config: PathBuf,
    /// Durations as the flags take them (`1s`, `0.05s`).
    pub cycle_interval: String,
    pub debounce: String,
    pub status_interval: String,
    pub release_rate: f64,
    pub release_burst: u32,
    pub log_filter: String,
    /// Lease timing flags; the binary's defaults without them.
    pub lease: Option<LeaseFlags>,
}

/// `--lease-duration`, `--lease-renew-deadline` and `--lease-retry-period`, as the flags take
/// them (`1s`, `700ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseFlags {
    pub duration: String,
    pub renew_deadline: String,
    pub retry_period: String,
}

impl LeaseFlags {
    pub fn new(duration: &str, renew_deadline: &str, retry_period: &str) -> Self {
        Self {
            duration: duration.into(),
            renew_deadline: renew_deadline.into(),
            retry_period: retry_period.into(),
        }
    }

    fn args(&self) -> [&str; 6] {
        [
            "--lease-duration",
            &self.duration,
            "--lease-renew-deadline",
            &self.renew_deadline,
            "--lease-retry-period",
            &self.retry_period,
        ]
    }
}

/// A running replica. Dropping it kills the process.
pub struct Replica {
    pub identity: String,
    child: Child,
    /// The admission server's address (`host:port`).
    pub listen: String,
    /// The plain-HTTP metrics server's address.
    pub metrics: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Replica {
    /// Starts a replica and waits until it logs the addresses it serves on.
    pub async fn start(
        settings: &ReplicaSettings,
        identity: &str,
    ) -> Result<Replica, ClusterError> {
        let mut command = Command::new(&settings.binary);
        command.args(["--log-format", "json", "serve"]);
        if let Some(lease) = &settings.lease {
            command.args(lease.args());
        }
        let mut child = command
            .args([
                "--listen",
                &settings.listen,
                "--metrics-listen",
                "127.0.0.1:0",
            ])
            .arg("--tls-cert")
            .arg(&settings.tls_cert)
            .arg("--tls-key")
            .arg(&settings.tls_key)
            .arg("--config")
            .arg(&settings.config)
            .args(["--controller=true", "--lease-namespace", "gpufair-system"])
            .args(["--identity", identity])
            .args(["--cycle-interval", &settings.cycle_interval])
            .args(["--debounce", &settings.debounce])
            .args(["--status-interval", &settings.status_interval])
            .args(["--release-rate", &settings.release_rate.to_string()])
            .args(["--release-burst", &settings.release_burst.to_string()])
            .args(["--shutdown-delay", "0s", "--shutdown-grace", "1s"])
            .env("KUBECONFIG", &settings.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env("GPUFAIR_LOG", &settings.log_filter)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                ClusterError::Setup(format!(
                    "could not start {}: {e}",
                    settings.binary.display()
                ))
            })?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let addresses: Arc<Mutex<Option<(String, String)>>> = Arc::new(Mutex::new(None));
        if let Some(stderr) = child.stderr.take() {
            let log = Arc::clone(&log);
            let addresses = Arc::clone(&addresses);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Ok(entry) = serde_json::from_str::<Value>(&line)
                        && entry["fields"]["message"] == "gpufair-webhook serving"
                    {
                        let fields = &entry["fields"];
                        *addresses.lock().unwrap_or_else(|p| p.into_inner()) = Some((
                            fields["listen"].as_str().unwrap_or_default().to_string(),
                            fields["metrics"].as_str().unwrap_or_default().to_string(),
                        ));
                    }
                    log.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                }
            });
        }
        let mut replica = Replica {
            identity: identity.to_string(),
            child,
            listen: String::new(),
            metrics: String::new(),
            log,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let found = addresses.lock().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some((listen, metrics)) = found {
                replica.listen = listen;
                replica.metrics = metrics;
                return Ok(replica);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ClusterError::Setup(format!(
                    "replica {identity} did not log its addresses within 60 s; log:\n{}",
                    replica.log()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lease identity this process campaigns with (the flag plus the process id).
    pub fn lease_identity(&self) -> String {
        format!("{}_{}", self.identity, self.pid())
    }

    /// Everything the replica logged so far.
    pub fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }

    /// Log lines that contain `text`.
    pub fn log_lines_with(&self, text: &str) -> Vec<String> {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|l| l.contains(text))
            .cloned()
            .collect()
    }

    /// SIGKILL: the process gets no chance to give its Lease up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `timeout` for a clean exit (killed after that).
    pub async fn terminate(&mut self, timeout: Duration) -> Result<(), ClusterError> {
        // `kill` runs for a millisecond; no need for an async process API.
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .map_err(|e| ClusterError::Setup(format!("could not run kill: {e}")))?;
        if !status.success() {
            return Err(ClusterError::Setup(format!(
                "kill -TERM {} failed: {status}",
                self.pid()
            )));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        while tokio::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.kill();
        Err(ClusterError::Setup(format!(
            "replica {} did not exit within {timeout:?} of SIGTERM",
            self.identity
        )))
    }

    /// Whether `GET /readyz` on the metrics port answers 200.
    pub async fn ready(&self) -> bool {
        http_get(&self.metrics, "/readyz")
            .await
            .is_some_and(|r| r.starts_with("HTTP/1.1 200"))
    }

    /// The Prometheus text from `/metrics`.
    pub async fn metrics_text(&self) -> Option<String> {
        http_get(&self.metrics, "/metrics").await
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A plain HTTP/1.1 GET, whole response as text.
async fn http_get(address: &str, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.ok()?;
    Some(response)
}

/// Writes the gpufair config file the replicas read.
pub fn write_config(dir: &Path, yaml: &str) -> Result<PathBuf, ClusterError> {
    let path = dir.join("gpufair-config.yaml");
    std::fs::write(&path, yaml)
        .map_err(|e| ClusterError::Setup(format!("{}: {e}", path.display())))?;
    Ok(path)
}
