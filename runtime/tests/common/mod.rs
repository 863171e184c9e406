//! Shared by the reliability tests and the reliability benchmark: the real webhook as a child
//! process, certificate rotation, and an open-loop HTTPS load generator that tells requests
//! that failed (sent, never answered) from connections that were refused (nothing sent).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gpufair_certs::{CertificateAuthority, write_bundle};
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::json;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const QUEUES: &str = "apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {name: research}\nspec:\n  namespaces: [ml]\n";

/// What `serve` reads at start: a CA, a serving pair it issued for `localhost`, and a queues
/// file, all in a fresh directory.
pub struct ServeFiles {
    pub dir: tempfile::TempDir,
    pub ca: CertificateAuthority,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub queues: PathBuf,
}

impl ServeFiles {
    pub fn new() -> ServeFiles {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = CertificateAuthority::generate("gpufair test CA", 2).expect("CA");
        let serving = ca
            .issue_serving(&["localhost".into()], 2)
            .expect("serving certificate");
        let (cert, key) = write_bundle(dir.path(), &ca, &serving).expect("write certificates");
        let queues = dir.path().join("queues.yaml");
        std::fs::write(&queues, QUEUES).expect("queues");
        ServeFiles {
            dir,
            ca,
            cert,
            key,
            queues,
        }
    }
}

pub struct Webhook {
    pub child: Child,
    pub addr: SocketAddr,
    pub metrics: SocketAddr,
    pub dir: tempfile::TempDir,
    pub ca: CertificateAuthority,
    logs: Arc<Mutex<Vec<String>>>,
}

impl Webhook {
    /// Starts `gpufair-webhook serve` on loopback with fresh certificates and `extra` flags.
    pub fn start(extra: &[&str]) -> Webhook {
        Self::start_binary(env!("CARGO_BIN_EXE_gpufair-webhook").as_ref(), extra)
    }

    pub fn start_binary(binary: &std::path::Path, extra: &[&str]) -> Webhook {
        let ServeFiles {
            dir,
            ca,
            cert,
            key,
            queues,
        } = ServeFiles::new();
        let mut child = Command::new(binary)
            .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .arg("--queues-file")
            .arg(&queues)
            .args(extra)
            .env("GPUFAIR_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpufair-webhook");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) {
                    let fields = &entry["fields"];
                    if fields["message"] == "gpufair-webhook serving"
                        && let Some(tx) = tx.take()
                    {
                        let listen = fields["listen"].as_str().unwrap_or("").to_string();
                        let metrics = fields["metrics"].as_str().unwrap_or("").to_string();
                        let _ = tx.send((listen, metrics));
                    }
                }
                sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
            }
        });
        let (listen, metrics) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("webhook started");
        let webhook = Webhook {
            child,
            addr: listen.parse().expect("listen address"),
            metrics: metrics.parse().expect("metrics address"),
            dir,
            ca,
            logs,
        };
        webhook.wait_ready();
        webhook
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(mut stream) = std::net::TcpStream::connect(self.metrics) {
                use std::io::{Read, Write};
                let _ = stream.write_all(
                    b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
                );
                let mut answer = String::new();
                let _ = stream.read_to_string(&mut answer);
                if answer.starts_with("HTTP/1.1 200") {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("webhook not ready within 20 s:\n{}", self.logs());
    }

    pub fn ca_pem(&self) -> String {
        self.ca.cert_pem()
    }

    pub fn logs(&self) -> String {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n")
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Resident and peak memory of the webhook process, in KiB.
    pub fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Issues a new serving certificate from the same CA and swaps both files in (each written
/// atomically, as a Secret volume update does), for the webhook's reload to pick up.
pub fn rotate(webhook: &Webhook) {
    let serving = webhook
        .ca
        .issue_serving(&["localhost".into()], 2)
        .expect("serving certificate");
    write_bundle(webhook.dir.path(), &webhook.ca, &serving).expect("write certificates");
}

/// `GET /metrics` on the plain-HTTP metrics port.
pub async fn scrape(metrics: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(metrics).await.expect("metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut text = String::new();
    stream.read_to_string(&mut text).await.expect("read");
    text
}

fn client_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA"))
        .expect("CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

pub async fn tls_connect(addr: SocketAddr, ca_pem: String) -> TlsStream<TcpStream> {
    try_tls_connect(addr, &client_config(&ca_pem))
        .await
        .expect("TLS connection")
}

async fn try_tls_connect(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let _ = tcp.set_nodelay(true);
    TlsConnector::from(config.clone())
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
}

/// An AdmissionReview for a one-GPU training pod in namespace `ml`, as the API server sends it.
pub fn review() -> Bytes {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "trainer-", "namespace": "ml", "labels": {"app": "trainer"}},
        "spec": {
            "containers": [{"name": "main", "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}],
            "restartPolicy": "Always", "schedulerName": "default-scheduler", "priority": 0
        }
    });
    Bytes::from(
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "ml",
                "operation": "CREATE", "userInfo": {"username": "load"}, "object": pod, "dryRun": false}
        }))
        .expect("review"),
    )
}

/// What a load run saw.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Answered with 200 and an AdmissionReview.
    pub ok: u64,
    /// Sent (handed to an open connection) and not answered correctly.
    pub failed: u64,
    /// Connection attempts refused or reset before a request could be sent.
    pub refused: u64,
    /// New connections opened after the first one of a lane closed.
    pub reconnects: u64,
    /// Requests that went out more than 1 ms after their slot.
    pub late: u64,
    pub latencies: Vec<Duration>,
    pub errors: Vec<String>,
}

impl Report {
    pub fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Open-loop load: `rate` requests per second spread over `lanes` keep-alive connections,
/// until [`Load::finish`].
pub struct Load {
    stop: Arc<AtomicBool>,
    lanes: Vec<tokio::task::JoinHandle<Report>>,
}

impl Load {
    pub fn start(addr: SocketAddr, ca_pem: String, rate: u64, lanes: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let config = client_config(&ca_pem);
        let body = review();
        let start = Instant::now() + Duration::from_millis(50);
        let interval = Duration::from_nanos(1_000_000_000 * lanes as u64 / rate.max(1));
        let lanes = (0..lanes)
            .map(|lane| {
                let offset = interval * lane as u32 / lanes.max(1) as u32;
                tokio::spawn(run_lane(
                    addr,
                    config.clone(),
                    body.clone(),
                    start + offset,
                    interval,
                    stop.clone(),
                ))
            })
            .collect();
        Load { stop, lanes }
    }

    pub async fn finish(self) -> Report {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = Report::default();
        for lane in self.lanes {
            let report = lane.await.expect("load lane");
            total.ok += report.ok;
            total.failed += report.failed;
            total.refused += report.refused;
            total.reconnects += report.reconnects;
            total.late += report.late;
            total.latencies.extend(report.latencies);
            let room = 5usize.saturating_sub(total.errors.len());
            total.errors.extend(report.errors.into_iter().take(room));
        }
        total
    }
}

async fn open(addr: SocketAddr, config: &Arc<rustls::ClientConfig>) -> Result<Sender, String> {
    let tls = try_tls_connect(addr, config)
        .await
        .map_err(|err| err.to_string())?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|err| err.to_string())?;
    tokio::spawn(connection);
    Ok(sender)
}

async fn run_lane(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
    body: Bytes,
    first: Instant,
    interval: Duration,
    stop: Arc<AtomicBool>,
) -> Report {
    let mut report = Report::default();
    let mut sender: Option<Sender> = None;
    let mut opened = 0u64;
    let mut due = first;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < due {
            tokio::time::sleep_until(due.into()).await;
        } else if now - due > Duration::from_millis(1) {
            report.late += 1;
        }
        // A connection the server closed (Connection: close, drain) is replaced; a request is
        // only counted once it has been handed to an open connection.
        let reusable = match sender.take() {
            Some(mut s) => s.ready().await.is_ok().then_some(s),
            None => None,
        };
        let mut current = match reusable {
            Some(s) => s,
            None => match open(addr, &config).await {
                Ok(s) => {
                    opened += 1;
                    if opened > 1 {
                        report.reconnects += 1;
                    }
                    s
                }
                Err(err) => {
                    report.refused += 1;
                    if report.errors.len() < 5 {
                        report.errors.push(format!("connect: {err}"));
                    }
                    due += interval;
                    continue;
                }
            },
        };
        let request = http::Request::post("/mutate")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .expect("request");
        let sent = Instant::now();
        match current.try_send_request(request).await {
            Ok(response) => {
                let status = response.status();
                let answer = response.into_body().collect().await.map(|b| b.to_bytes());
                match answer {
                    Ok(body) if status == 200 && body.starts_with(b"{\"apiVersion\"") => {
                        report.ok += 1;
                        report.latencies.push(sent.elapsed());
                    }
                    other => {
                        report.failed += 1;
                        if report.errors.len() < 5 {
                            report.errors.push(format!("status {status}: {other:?}"));
                        }
                    }
                }
                sender = Some(current);
            }
            Err(mut err) => {
                if err.take_message().is_some() {
                    // Never written: the connection closed first. Not a lost request; retry
                    // the same slot on a new connection.
                    continue;
                }
                report.failed += 1;
                if report.errors.len() < 5 {
                    report.errors.push(format!("send: {}", err.error()));
                }
            }
        }
        due += interval;
    }
    report
}
