//! Load benchmark of `gpufair-webhook serve` (not a timed test; numbers go to BENCHMARKS.md).
//!
//! `cargo bench -p gpufair-runtime --bench load` starts, as separate processes, the real webhook
//! (release build) and a bare rustls server that answers a fixed "allowed" review without
//! parsing, then drives both from this process over keep-alive HTTPS on loopback:
//!
//! 1. open loop at 1,000 requests/s: latency percentiles (client-observed, which bounds the
//!    server-side time from above) and the server's own histogram;
//! 2. closed loop with a few connections: maximum throughput of each server, in the same run,
//!    in rounds that alternate the two, with the CPU each request cost the server and the client;
//! 3. one HTTP/2 connection with many streams in flight, as the API server sends reviews: the
//!    rate one connection (so one admission thread) reaches, against the bare server's;
//! 4. resident memory of a webhook with 10,000 Queues loaded, after serving requests.
//!
//! Every loop is bounded in time and count; only loopback addresses are used.
//! `GPUFAIR_BENCH_WEBHOOK=<path>` runs another build of the webhook binary (say, a copy kept
//! from before a change) in place of this build's.

#[path = "../../webhook/benches/shared/review.rs"]
mod shared;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use gpufair_certs::{CertificateAuthority, write_bundle};
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const RATE: u64 = 1_000;
const RATE_SECONDS: u64 = 10;
const RATE_CONNECTIONS: usize = 4;
const MAX_SECONDS: u64 = 5;
const MAX_CONNECTIONS: usize = 8;
const MAX_ROUNDS: usize = 3;
/// Streams in flight on the one HTTP/2 connection.
const H2_STREAMS: usize = 32;
const MANY_QUEUES: usize = 10_000;

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type H2Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--bare-server") {
        bare_server(&args[at + 1], &args[at + 2]);
        return;
    }
    // `cargo bench` passes `--bench`; anything else (e.g. a test filter) is ignored.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run());
}

// ---------- the bare server (a child process) ----------

fn bare_server(cert: &str, key: &str) {
    use hyper::service::service_fn;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let config = gpufair_webhook::tls::load_server_config(cert.as_ref(), key.as_ref())
        .expect("bare server certificate");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        println!("listening {}", listener.local_addr().expect("address"));
        let answer = Bytes::from_static(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true,"status":{}}}"#,
        );
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            let acceptor = acceptor.clone();
            let answer = answer.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                    let answer = answer.clone();
                    async move {
                        // Read the body (a real server must) but do not parse it.
                        let _ = request.into_body().collect().await;
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(answer)))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
}

// ---------- processes ----------

struct Proc {
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the webhook and returns it with its TLS and metrics addresses.
fn start_webhook(
    dir: &std::path::Path,
    queues: &std::path::Path,
) -> (Proc, SocketAddr, SocketAddr) {
    // `GPUFAIR_BENCH_WEBHOOK` runs another build of the webhook (say, a copy kept from before a
    // change) against the same client and bare server.
    let binary = std::env::var_os("GPUFAIR_BENCH_WEBHOOK")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_gpufair-webhook").into());
    let mut child = Command::new(binary)
        .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .arg("--tls-cert")
        .arg(dir.join("tls.crt"))
        .arg("--tls-key")
        .arg(dir.join("tls.key"))
        .arg("--queues-file")
        .arg(queues)
        .args(["--shutdown-delay", "0s"])
        .env(
            "GPUFAIR_LOG",
            "warn,gpufair_webhook=info,gpufair_runtime=info",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpufair-webhook");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let Ok(entry) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if entry["fields"]["message"] == "gpufair-webhook serving"
                && let Some(tx) = tx.take()
            {
                let listen = entry["fields"]["listen"].as_str().unwrap_or("").to_string();
                let metrics = entry["fields"]["metrics"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let _ = tx.send((listen, metrics));
            }
        }
    });
    let (listen, metrics) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("webhook started");
    (
        Proc { child },
        listen.parse().expect("listen address"),
        metrics.parse().expect("metrics address"),
    )
}

fn start_bare(dir: &std::path::Path) -> (Proc, SocketAddr) {
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .arg("--bare-server")
        .arg(dir.join("tls.crt"))
        .arg(dir.join("tls.key"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start bare server");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("bare server address");
    let addr = line
        .trim()
        .trim_start_matches("listening ")
        .parse()
        .expect("address");
    (Proc { child }, addr)
}

/// User + system CPU time of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Context switches of all a process's threads so far: (voluntary, involuntary). Voluntary
/// ones are a thread going to sleep for want of work (each is a later wake-up); involuntary
/// ones are a thread preempted while it had work, i.e. the cores were contended.
fn context_switches(pid: u32) -> (u64, u64) {
    let mut total = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return total;
    };
    for task in tasks.flatten() {
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        for line in status.lines() {
            let value = |l: &str| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if line.starts_with("voluntary_ctxt_switches:") {
                total.0 += value(line);
            } else if line.starts_with("nonvoluntary_ctxt_switches:") {
                total.1 += value(line);
            }
        }
    }
    total
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
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

// ---------- client ----------

/// A TLS connection to `addr` trusting `ca_pem`, offering the ALPN protocols `alpn`.
async fn tls_stream(
    addr: SocketAddr,
    ca_pem: &str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("CA"))
        .expect("CA");
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("TLS")
}

async fn connect(addr: SocketAddr, ca_pem: &str) -> Sender {
    let tls = tls_stream(addr, ca_pem, &[]).await;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .expect("HTTP handshake");
    tokio::spawn(connection);
    sender
}

async fn call(sender: &mut Sender, body: &Bytes) -> bool {
    let path = if body.is_empty() {
        "/healthz"
    } else {
        "/mutate"
    };
    let method = if body.is_empty() { "GET" } else { "POST" };
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(body.clone()))
        .expect("request");
    match sender.send_request(request).await {
        Ok(response) => {
            let ok = response.status() == 200;
            ok && response.into_body().collect().await.is_ok()
        }
        Err(_) => false,
    }
}

fn review(index: usize) -> Bytes {
    Bytes::from(shared::training_pod_review(&format!("uid-{index}")))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Open loop: request `i` is due at `start + i / RATE`; latency is measured from the moment it
/// is sent. Late sends are counted, so a server that cannot keep up is visible.
async fn fixed_rate(addr: SocketAddr, ca_pem: &str, body: &Bytes) -> (Vec<Duration>, usize, usize) {
    let total = (RATE * RATE_SECONDS) as usize;
    let start = Instant::now() + Duration::from_millis(100);
    let mut tasks = Vec::new();
    for lane in 0..RATE_CONNECTIONS {
        let mut sender = connect(addr, ca_pem).await;
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(total / RATE_CONNECTIONS + 1);
            let (mut late, mut failed) = (0, 0);
            for i in (lane..total).step_by(RATE_CONNECTIONS) {
                let due = start + Duration::from_micros(i as u64 * 1_000_000 / RATE);
                let now = Instant::now();
                if now < due {
                    tokio::time::sleep_until(due.into()).await;
                } else if now - due > Duration::from_millis(1) {
                    late += 1;
                }
                let sent = Instant::now();
                if call(&mut sender, &body).await {
                    latencies.push(sent.elapsed());
                } else {
                    failed += 1;
                }
            }
            (latencies, late, failed)
        }));
    }
    let (mut all, mut late, mut failed) = (Vec::new(), 0, 0);
    for task in tasks {
        let (latencies, l, f) = task.await.expect("lane");
        all.extend(latencies);
        late += l;
        failed += f;
    }
    all.sort();
    (all, late, failed)
}

/// One HTTP/2 connection (ALPN `h2`), as the API server's webhook client keeps one per
/// webhook host and sends each review as a stream on it.
async fn connect_h2(addr: SocketAddr, ca_pem: &str) -> H2Sender {
    let tls = tls_stream(addr, ca_pem, &[b"h2"]).await;
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "the server did not agree to HTTP/2"
    );
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    sender
}

/// Answers one review over HTTP/2; the sender is handed back for the next.
async fn call_h2(mut sender: H2Sender, body: Bytes) -> (H2Sender, bool) {
    let request = http::Request::post("/mutate")
        .header("content-type", "application/json")
        .body(Full::new(body))
        .expect("request");
    let answered = match sender.send_request(request).await {
        Ok(response) => response.status() == 200 && response.into_body().collect().await.is_ok(),
        Err(_) => false,
    };
    (sender, answered)
}

/// [`call`], handing the sender back for the next request.
async fn call_h1(mut sender: Sender, body: Bytes) -> (Sender, bool) {
    let answered = call(&mut sender, &body).await;
    (sender, answered)
}

/// Closed loop: each of `senders` sends again as soon as it is answered, until `stop`.
/// Returns requests answered per second since `started`.
async fn closed_loop<S, F, Fut>(
    senders: Vec<S>,
    body: &Bytes,
    send: F,
    started: Instant,
    stop: Instant,
) -> f64
where
    S: Send + 'static,
    F: Fn(S, Bytes) -> Fut + Copy + Send + 'static,
    Fut: std::future::Future<Output = (S, bool)> + Send,
{
    let mut tasks = Vec::new();
    for mut sender in senders {
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while Instant::now() < stop {
                let (next, answered) = send(sender, body.clone()).await;
                sender = next;
                done += u64::from(answered);
            }
            done
        }));
    }
    let mut done = 0;
    for task in tasks {
        done += task.await.expect("sender");
    }
    done as f64 / started.elapsed().as_secs_f64()
}

/// Closed loop over one HTTP/2 connection: `H2_STREAMS` streams in flight, each sent again as
/// soon as it is answered, for `MAX_SECONDS`.
async fn max_throughput_h2(addr: SocketAddr, ca_pem: &str, body: &Bytes) -> f64 {
    let sender = connect_h2(addr, ca_pem).await;
    let (started, stop) = (
        Instant::now(),
        Instant::now() + Duration::from_secs(MAX_SECONDS),
    );
    closed_loop(vec![sender; H2_STREAMS], body, call_h2, started, stop).await
}

/// Closed loop: `MAX_CONNECTIONS` connections each send back-to-back for `MAX_SECONDS`.
async fn max_throughput(addr: SocketAddr, ca_pem: &str, body: &Bytes) -> f64 {
    // The clock starts before the connections are opened, so their handshakes count.
    let (started, stop) = (
        Instant::now(),
        Instant::now() + Duration::from_secs(MAX_SECONDS),
    );
    let mut senders = Vec::with_capacity(MAX_CONNECTIONS);
    for _ in 0..MAX_CONNECTIONS {
        senders.push(connect(addr, ca_pem).await);
    }
    closed_loop(senders, body, call_h1, started, stop).await
}

/// One closed-loop phase against one server, with what it cost the server and this client.
struct Phase {
    rate: f64,
    requests: f64,
    server_cpu: f64,
    client_cpu: f64,
    voluntary: u64,
    involuntary: u64,
}

impl Phase {
    fn per_request(&self, count: u64) -> f64 {
        count as f64 / self.requests
    }

    fn server_cpu_us(&self) -> f64 {
        self.server_cpu * 1e6 / self.requests
    }

    /// The client's CPU includes its own TLS and HTTP work: when it is near one core per
    /// second (the client runs on one thread), the rate measured is the client's, not the
    /// server's.
    fn client_cpu_us(&self) -> f64 {
        self.client_cpu * 1e6 / self.requests
    }
}

/// Runs `phase` (a closed loop returning requests per second) and measures the CPU and context
/// switches of the server `pid` and the CPU of this process over it.
async fn measured<F: std::future::Future<Output = f64>>(
    pid: u32,
    phase: impl FnOnce() -> F,
) -> Phase {
    let (server_before, client_before) = (cpu_seconds(pid), cpu_seconds(std::process::id()));
    let switches_before = context_switches(pid);
    let rate = phase().await;
    let switches = context_switches(pid);
    Phase {
        rate,
        requests: rate * MAX_SECONDS as f64,
        server_cpu: cpu_seconds(pid) - server_before,
        client_cpu: cpu_seconds(std::process::id()) - client_before,
        voluntary: switches.0.saturating_sub(switches_before.0),
        involuntary: switches.1.saturating_sub(switches_before.1),
    }
}

/// The server-side histogram: (count, p99 upper bucket bound in seconds).
async fn server_histogram(metrics: SocketAddr) -> (u64, f64) {
    let tcp = TcpStream::connect(metrics).await.expect("metrics");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("metrics handshake");
    tokio::spawn(connection);
    let request = http::Request::get("/metrics")
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = sender.send_request(request).await.expect("metrics");
    let text = String::from_utf8_lossy(
        &response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes(),
    )
    .into_owned();
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("gpufair_webhook_admission_duration_seconds_bucket"))
    {
        let le = line
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("+Inf");
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::INFINITY)
        };
        let count = line
            .rsplit(' ')
            .next()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        buckets.push((bound, count));
    }
    let total = buckets.last().map(|b| b.1).unwrap_or(0);
    let target = (total as f64 * 0.99).ceil() as u64;
    let p99 = buckets
        .iter()
        .find(|b| b.1 >= target)
        .map(|b| b.0)
        .unwrap_or(f64::INFINITY);
    (total, p99)
}

fn queues_yaml(count: usize) -> String {
    let mut text = String::new();
    for i in 0..count {
        let namespace = if i == 0 {
            "ml".to_string()
        } else {
            format!("team-{i}")
        };
        text.push_str(&format!(
            "apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {{name: queue-{i}}}\nspec:\n  weight: 1\n  guaranteed: 2\n  namespaces: [{namespace}, shared-{}]\n  nodePool:\n    matchLabels: {{gpufair.io/pool: pool-{}}}\n  priorityClasses: [team-high]\n---\n",
            i % 100,
            i % 10
        ));
    }
    text
}

async fn run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertificateAuthority::generate("bench CA", 1).expect("CA");
    let serving = ca.issue_serving(&["localhost".into()], 1).expect("cert");
    write_bundle(dir.path(), &ca, &serving).expect("write certs");
    let ca_pem = ca.cert_pem();
    let small = dir.path().join("queues-small.yaml");
    std::fs::write(&small, queues_yaml(10)).expect("queues");
    let body = review(1);
    println!("review size: {} bytes", body.len());

    in_process(&body, &small);
    let (webhook, addr, metrics) = start_webhook(dir.path(), &small);
    let (_bare, bare_addr) = start_bare(dir.path());
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Warm-up: connections, allocator, caches.
    let mut warm = connect(addr, &ca_pem).await;
    for _ in 0..2_000 {
        assert!(call(&mut warm, &body).await, "warm-up request failed");
    }
    let (before, _) = server_histogram(metrics).await;

    let (latencies, late, failed) = fixed_rate(addr, &ca_pem, &body).await;
    let (after, server_p99) = server_histogram(metrics).await;
    println!(
        "fixed rate {RATE}/s for {RATE_SECONDS}s over {RATE_CONNECTIONS} connections: {} ok, {failed} failed, {late} sent >1ms late",
        latencies.len()
    );
    println!(
        "  client-observed latency: p50 {:?}  p90 {:?}  p99 {:?}  p99.9 {:?}  max {:?}",
        percentile(&latencies, 50.0),
        percentile(&latencies, 90.0),
        percentile(&latencies, 99.0),
        percentile(&latencies, 99.9),
        latencies.last().copied().unwrap_or_default()
    );
    println!(
        "  server histogram: {} requests in the run; p99 (all requests) <= {:.0} us bucket bound",
        after - before,
        server_p99 * 1e6
    );

    let healthz_max = max_throughput(addr, &ca_pem, &Bytes::new()).await;
    println!("webhook GET /healthz (TLS + HTTP plumbing only): {healthz_max:.0}/s");
    // Rounds alternate webhook and bare server, so a change in what else the machine runs
    // shows in one round's ratio rather than skewing every webhook figure against every bare one.
    let mut ratios = Vec::with_capacity(MAX_ROUNDS);
    for round in 1..=MAX_ROUNDS {
        let webhook_phase =
            measured(webhook.child.id(), || max_throughput(addr, &ca_pem, &body)).await;
        let bare_phase = measured(_bare.child.id(), || {
            max_throughput(bare_addr, &ca_pem, &body)
        })
        .await;
        println!("round {round} of {MAX_ROUNDS}:");
        println!(
            "  server CPU per request: webhook {:.1} us, bare {:.1} us",
            webhook_phase.server_cpu_us(),
            bare_phase.server_cpu_us()
        );
        println!(
            "  client CPU per request: against webhook {:.1} us, against bare {:.1} us",
            webhook_phase.client_cpu_us(),
            bare_phase.client_cpu_us()
        );
        println!(
            "  server context switches per request (voluntary / involuntary): webhook {:.2} / {:.2}, bare {:.2} / {:.2}",
            webhook_phase.per_request(webhook_phase.voluntary),
            webhook_phase.per_request(webhook_phase.involuntary),
            bare_phase.per_request(bare_phase.voluntary),
            bare_phase.per_request(bare_phase.involuntary),
        );
        let ratio = 100.0 * webhook_phase.rate / bare_phase.rate;
        println!(
            "max throughput ({MAX_CONNECTIONS} connections, {MAX_SECONDS}s each): webhook {:.0}/s, bare rustls 'allowed' {:.0}/s, ratio {ratio:.0}%",
            webhook_phase.rate, bare_phase.rate
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "max throughput ratio over {MAX_ROUNDS} rounds: median {:.0}%, lowest {:.0}%, highest {:.0}%",
        ratios[ratios.len() / 2],
        ratios[0],
        ratios[ratios.len() - 1]
    );
    let webhook_h2 = measured(webhook.child.id(), || {
        max_throughput_h2(addr, &ca_pem, &body)
    })
    .await;
    let bare_h2 = measured(_bare.child.id(), || {
        max_throughput_h2(bare_addr, &ca_pem, &body)
    })
    .await;
    println!(
        "one HTTP/2 connection, {H2_STREAMS} streams in flight, {MAX_SECONDS}s each: webhook {:.0}/s ({:.1} us server CPU per request), bare {:.0}/s ({:.1} us), ratio {:.0}%",
        webhook_h2.rate,
        webhook_h2.server_cpu_us(),
        bare_h2.rate,
        bare_h2.server_cpu_us(),
        100.0 * webhook_h2.rate / bare_h2.rate
    );
    let (rss, hwm) = rss_kib(webhook.child.id());
    println!(
        "webhook with 10 queues after load: RSS {} KiB (peak {} KiB)",
        rss, hwm
    );
    drop(webhook);

    let many = dir.path().join("queues-many.yaml");
    std::fs::write(&many, queues_yaml(MANY_QUEUES)).expect("queues");
    println!(
        "queues file with {MANY_QUEUES} Queues: {} bytes",
        std::fs::metadata(&many).map(|m| m.len()).unwrap_or(0)
    );
    let (webhook, addr, metrics) = start_webhook(dir.path(), &many);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut sender = connect(addr, &ca_pem).await;
        let ready = {
            let request = http::Request::get("/readyz")
                .header("host", "localhost")
                .body(Full::new(Bytes::new()))
                .expect("request");
            sender
                .send_request(request)
                .await
                .map(|r| r.status() == 200)
                .unwrap_or(false)
        };
        if ready || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut sender = connect(addr, &ca_pem).await;
    for _ in 0..5_000 {
        assert!(
            call(&mut sender, &body).await,
            "request with many queues failed"
        );
    }
    let _ = max_throughput(addr, &ca_pem, &body).await;
    let (count, _) = server_histogram(metrics).await;
    let (rss, hwm) = rss_kib(webhook.child.id());
    println!(
        "webhook with {MANY_QUEUES} queues after {count} requests: RSS {} KiB = {:.1} MiB (peak {:.1} MiB)",
        rss,
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
}

/// Where the handler's time goes, measured in this process on one thread (no TLS, no HTTP).
fn in_process(body: &Bytes, queues_file: &std::path::Path) {
    use gpufair_webhook::queues::{QueueIndex, QueueStore};
    let queues = QueueStore::default();
    queues.replace(QueueIndex::from_queues(
        gpufair_webhook::queues::load_queues_file(queues_file).expect("queues"),
    ));
    let state = gpufair_webhook::state::AppState {
        policy: arc_swap::ArcSwap::from_pointee(
            gpufair_api::config::AdmissionConfig::default()
                .to_policy()
                .unwrap(),
        ),
        queues: Arc::new(queues),
        families: Arc::default(),
        metrics: Arc::new(gpufair_webhook::metrics::Metrics::new()),
        shutdown: gpufair_webhook::shutdown::Shutdown::new(),
    };
    let n = 20_000;
    let t = Instant::now();
    for _ in 0..n {
        let a = gpufair_webhook::admission::review(body, &state, 0).unwrap();
        std::hint::black_box(a.body);
    }
    println!("in-process: whole review {:?} per call", t.elapsed() / n);
    let t = Instant::now();
    for _ in 0..n {
        let v: kube::core::admission::AdmissionReview<k8s_openapi::api::core::v1::Pod> =
            serde_json::from_slice(body).unwrap();
        std::hint::black_box(v);
    }
    println!(
        "  AdmissionReview<Pod> parse {:?} per call",
        t.elapsed() / n
    );
    let t = Instant::now();
    for _ in 0..n {
        let v: serde::de::IgnoredAny = serde_json::from_slice(body).unwrap();
        std::hint::black_box(v);
    }
    println!(
        "  scan without building (lower bound) {:?} per call",
        t.elapsed() / n
    );
    let object = serde_json::to_vec(
        &serde_json::from_slice::<serde_json::Value>(body).unwrap()["request"]["object"],
    )
    .unwrap();
    let t = Instant::now();
    for _ in 0..n {
        let v: gpufair_webhook::pod::Pod = serde_json::from_slice(&object).unwrap();
        std::hint::black_box(v);
    }
    println!(
        "  admission's Pod fields parse (object only) {:?} per call",
        t.elapsed() / n
    );
    let policy = gpufair_api::config::AdmissionConfig::default()
        .to_policy()
        .unwrap();
    let t = Instant::now();
    for _ in 0..n {
        let pod: gpufair_webhook::pod::Pod = serde_json::from_slice(&object).unwrap();
        let shape = gpufair_webhook::pod::PodShape::of(&pod);
        let facts = gpufair_webhook::facts::pod_facts(pod, "ml");
        let d = state
            .queues
            .read(|q| gpufair_core::mutation::plan(&facts, q, &policy, 0));
        if let gpufair_core::mutation::Decision::Admit(p) = d {
            let patch = gpufair_webhook::patch::build_patch(&shape, &p.mutations);
            std::hint::black_box(patch.to_json());
        }
    }
    println!(
        "  pod parse + facts + plan + patch {:?} per call",
        t.elapsed() / n
    );
}
