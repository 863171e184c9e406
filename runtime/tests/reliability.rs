//! The real `gpufair-webhook serve` under short bursts of load: certificate rotations lose no
//! request, SIGTERM drains without failing one, slow or silent clients are cut off by the header
//! read timeout while others are served, and HTTP/2 connections idle between requests are
//! closed. (The 60-second, 2,000 requests/s versions are in `benches/reliability.rs`.)

mod common;

use std::time::{Duration, Instant};

use common::{Load, Webhook, rotate, scrape};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotations_under_load_fail_no_request() {
    let webhook = Webhook::start(&["--reload-interval", "0.1s"]);
    let load = Load::start(webhook.addr, webhook.ca_pem(), 200, 4);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        rotate(&webhook);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = load.finish().await;
    assert_eq!(report.failed, 0, "{report:?}");
    assert!(report.ok > 400, "{report:?}");
    let metrics = scrape(webhook.metrics).await;
    // A rotation writes the key, then the certificate. A check that falls between the two
    // reloads once then and again after the certificate lands, so a rotation may count twice.
    let reloads = metrics
        .lines()
        .find_map(|line| {
            line.strip_prefix("gpufair_webhook_tls_reloads_total{outcome=\"success\"} ")
        })
        .and_then(|count| count.trim().parse::<u32>().ok())
        .unwrap_or(0);
    assert!((5..=10).contains(&reloads), "{reloads} reloads: {metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_answers_every_request_sent_and_then_refuses() {
    sigterm_under_load(&[]).await;
}

/// Connections spread over three admission threads drain on each of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_drains_every_admission_thread() {
    sigterm_under_load(&["--worker-threads", "3"]).await;
}

async fn sigterm_under_load(extra: &[&str]) {
    let mut args = vec!["--shutdown-delay", "0.5s", "--shutdown-grace", "5s"];
    args.extend_from_slice(extra);
    let webhook = Webhook::start(&args);
    let load = Load::start(webhook.addr, webhook.ca_pem(), 200, 4);
    tokio::time::sleep(Duration::from_secs(1)).await;
    webhook.sigterm();
    let exited = Instant::now();
    let status = tokio::task::spawn_blocking(move || {
        let mut webhook = webhook;
        let status = webhook.child.wait().expect("wait");
        (status, webhook)
    });
    let (status, webhook) = tokio::time::timeout(Duration::from_secs(10), status)
        .await
        .expect("exits within the grace")
        .expect("join");
    assert!(status.success(), "{status:?}");
    let took = exited.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = load.finish().await;
    assert_eq!(report.failed, 0, "{report:?}");
    assert!(report.ok > 150, "{report:?}");
    assert!(report.refused > 0, "{report:?}");
    // While stopping, clients were moved to new connections rather than cut off.
    assert!(report.reconnects > 0, "{report:?}");
    assert!(took < Duration::from_secs(5), "exit took {took:?}");
    let logs = webhook.logs();
    assert!(logs.contains("all connections drained"), "{logs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_slow_clients_are_cut_off_and_others_are_served() {
    let webhook = Webhook::start(&["--header-read-timeout", "1s"]);
    // Silent: TCP only; TLS done but nothing sent; TLS done and half a request head.
    let mut silent = tokio::net::TcpStream::connect(webhook.addr).await.unwrap();
    let mut idle = common::tls_connect(webhook.addr, webhook.ca_pem()).await;
    let mut slow = common::tls_connect(webhook.addr, webhook.ca_pem()).await;
    slow.write_all(b"POST /mutate HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let load = Load::start(webhook.addr, webhook.ca_pem(), 100, 2);
    let mut buf = [0u8; 64];
    // The slow client dribbles a header byte every 200 ms and never finishes its head; the
    // server must close it about a second after the connection started.
    let slow_closed = loop {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "slow client not cut off"
        );
        match tokio::time::timeout(Duration::from_millis(200), slow.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => break started.elapsed(),
            Ok(Ok(n)) => panic!("unexpected answer to a half request: {n} bytes"),
            Err(_) => {
                if slow.write_all(b"X").await.is_err() {
                    break started.elapsed();
                }
            }
        }
    };
    assert!(slow_closed >= Duration::from_millis(500), "{slow_closed:?}");
    // The idle TLS connection is closed as well (EOF or reset: the read ends).
    let idle_end = tokio::time::timeout(Duration::from_secs(2), idle.read(&mut buf))
        .await
        .expect("idle TLS connection closed");
    assert!(matches!(idle_end, Ok(0) | Err(_)), "{idle_end:?}");
    // TCP without a TLS handshake is left to the handshake timeout (10 s).
    let silent_end = tokio::time::timeout(Duration::from_secs(15), silent.read(&mut buf))
        .await
        .expect("silent TCP connection closed");
    assert!(matches!(silent_end, Ok(0) | Err(_)), "{silent_end:?}");
    let report = load.finish().await;
    assert_eq!(report.failed, 0, "{report:?}");
    let metrics = scrape(webhook.metrics).await;
    assert!(
        metrics.contains("gpufair_webhook_connection_timeouts_total{phase=\"request_headers\"}"),
        "{metrics}"
    );
}

/// One HTTP/2 connection over TLS, as the API server opens them.
async fn h2_connect(
    webhook: &Webhook,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    tokio::task::JoinHandle<()>,
) {
    let tls = common::tls_connect(webhook.addr, webhook.ca_pem()).await;
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tls),
    )
    .await
    .expect("HTTP/2 handshake");
    // Resolves when the server closes the connection.
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, driver)
}

async fn h2_healthz(
    sender: &mut hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
) -> bool {
    let request = http::Request::get("https://localhost/healthz")
        .body(http_body_util::Empty::new())
        .expect("request");
    sender
        .send_request(request)
        .await
        .is_ok_and(|r| r.status() == 200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_connections_are_closed_and_busy_ones_kept() {
    let webhook = Webhook::start(&["--header-read-timeout", "1s"]);
    let (mut idle, idle_closed) = h2_connect(&webhook).await;
    let (mut busy, busy_closed) = h2_connect(&webhook).await;
    assert!(
        h2_healthz(&mut idle).await,
        "first request on the idle connection"
    );
    let started = Instant::now();
    // The busy connection asks every 300 ms for 3 s: longer than two timeouts.
    while started.elapsed() < Duration::from_secs(3) {
        assert!(h2_healthz(&mut busy).await, "busy connection served");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        idle_closed.is_finished(),
        "an HTTP/2 connection idle for 3 s with a 1 s timeout is closed"
    );
    assert!(!busy_closed.is_finished(), "the busy connection stays open");
    let metrics = scrape(webhook.metrics).await;
    assert!(
        metrics.contains("gpufair_webhook_connection_timeouts_total{phase=\"idle\"}"),
        "{metrics}"
    );
}
