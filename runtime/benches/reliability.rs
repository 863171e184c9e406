//! The webhook under sustained load, with faults (not a timed test; numbers go to
//! RELIABILITY.md).
//!
//! `cargo bench -p gpufair-runtime --bench reliability [-- rotation|sigterm|idle]` starts the
//! real webhook (release build) as a child process and drives it from this process with
//! 2,000 AdmissionReviews/s over 8 keep-alive HTTPS connections on loopback for 60 s
//! (`GPUFAIR_BENCH_SECONDS` shortens it) while:
//!
//! - `rotation`: the serving certificate is replaced 10 times;
//! - `sigterm`: SIGTERM arrives half-way; the load keeps going until the process has exited;
//! - `idle`: 1,000 TLS connections that never send a request and one client that sends its
//!   request head a byte at a time are opened; resident memory and latency are recorded.
//!
//! A request counts as failed when it was handed to an open connection and not answered with
//! an AdmissionReview; a connection refused before anything was sent is counted apart.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{Load, Report, Webhook, rotate, scrape};
use tokio::io::AsyncWriteExt;

const RATE: u64 = 2_000;
const LANES: usize = 8;
const ROTATIONS: u32 = 10;
const IDLE_CONNECTIONS: usize = 1_000;

fn seconds() -> u64 {
    std::env::var("GPUFAIR_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let wanted: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let runs = |name: &str| wanted.is_empty() || wanted.iter().any(|w| w == name);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        if runs("rotation") {
            rotation().await;
        }
        if runs("sigterm") {
            sigterm().await;
        }
        if runs("idle") {
            idle().await;
        }
    });
}

fn summary(name: &str, report: &Report, took: Duration) {
    println!(
        "{name}: {} ok, {} failed, {} refused before sending, {} reconnects, {} sent >1 ms late, over {took:.1?} ({:.0} req/s answered)",
        report.ok,
        report.failed,
        report.refused,
        report.reconnects,
        report.late,
        report.ok as f64 / took.as_secs_f64()
    );
    println!(
        "  latency p50 {:?}  p99 {:?}  p99.9 {:?}  max {:?}",
        report.percentile(50.0),
        report.percentile(99.0),
        report.percentile(99.9),
        report.percentile(100.0)
    );
    for error in &report.errors {
        println!("  error: {error}");
    }
}

async fn rotation() {
    let webhook = Webhook::start_binary(
        env!("CARGO_BIN_EXE_gpufair-webhook").as_ref(),
        &["--reload-interval", "0.5s"],
    );
    let total = Duration::from_secs(seconds());
    let started = Instant::now();
    let load = Load::start(webhook.addr, webhook.ca_pem(), RATE, LANES);
    let every = total / (ROTATIONS + 1);
    for _ in 0..ROTATIONS {
        tokio::time::sleep(every).await;
        rotate(&webhook);
    }
    tokio::time::sleep_until((started + total).into()).await;
    let report = load.finish().await;
    summary("rotation", &report, started.elapsed());
    let metrics = scrape(webhook.metrics).await;
    for line in metrics.lines().filter(|l| l.contains("tls_reloads_total")) {
        println!("  {line}");
    }
}

async fn sigterm() {
    let mut webhook = Webhook::start_binary(
        env!("CARGO_BIN_EXE_gpufair-webhook").as_ref(),
        &["--shutdown-delay", "2s", "--shutdown-grace", "20s"],
    );
    let total = Duration::from_secs(seconds());
    let started = Instant::now();
    let load = Load::start(webhook.addr, webhook.ca_pem(), RATE, LANES);
    tokio::time::sleep(total / 2).await;
    webhook.sigterm();
    let signalled = Instant::now();
    let status = loop {
        if let Some(status) = webhook.child.try_wait().expect("wait") {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let exit = signalled.elapsed();
    // Keep knocking for a second: every attempt must be refused, none may hang or fail.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = load.finish().await;
    summary("sigterm", &report, started.elapsed());
    println!("  exit status {status} {exit:?} after SIGTERM (2 s not-ready delay included)");
    let logs = webhook.logs();
    for line in logs
        .lines()
        .filter(|l| l.contains("drained") || l.contains("grace"))
    {
        println!("  log: {line}");
    }
}

async fn idle() {
    let webhook = Webhook::start_binary(env!("CARGO_BIN_EXE_gpufair-webhook").as_ref(), &[]);
    let total = Duration::from_secs(seconds());
    let started = Instant::now();
    let load = Load::start(webhook.addr, webhook.ca_pem(), RATE, LANES);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (before, _) = webhook.rss_kib();
    let mut idle = Vec::with_capacity(IDLE_CONNECTIONS);
    for _ in 0..IDLE_CONNECTIONS {
        idle.push(common::tls_connect(webhook.addr, webhook.ca_pem()).await);
    }
    let opened = Instant::now();
    let mut slow = common::tls_connect(webhook.addr, webhook.ca_pem()).await;
    let (with_idle, _) = webhook.rss_kib();
    let open_line = scrape(webhook.metrics)
        .await
        .lines()
        .find(|l| l.starts_with("gpufair_webhook_open_connections"))
        .map(str::to_string)
        .unwrap_or_default();
    // One byte every 500 ms: never a whole head.
    let head = b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n";
    let mut slow_closed = None;
    for byte in head.iter().cycle() {
        if slow.write_all(&[*byte]).await.is_err() || slow.flush().await.is_err() {
            slow_closed = Some(opened.elapsed());
            break;
        }
        if opened.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (after_timeout, peak) = webhook.rss_kib();
    let metrics = scrape(webhook.metrics).await;
    tokio::time::sleep_until((started + total).into()).await;
    let report = load.finish().await;
    summary("idle", &report, started.elapsed());
    println!(
        "  RSS: {before} KiB under load, {with_idle} KiB with {IDLE_CONNECTIONS} idle TLS connections + 1 slow client open, {after_timeout} KiB after the timeout; peak {peak} KiB"
    );
    println!("  while open: {open_line}");
    println!("  slow-header client closed by the server after {slow_closed:?} (write failed)");
    for line in metrics.lines().filter(|l| {
        l.starts_with("gpufair_webhook_connection_timeouts")
            || l.starts_with("gpufair_webhook_open_connections")
    }) {
        println!("  {line}");
    }
    drop(idle);
}
