//! Admission runs on threads of its own: reviews keep being answered, new connections included,
//! while every worker of the process's main runtime is held by blocking work, as the
//! controller's decision cycle holds one while it runs.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use common::{Load, ServeFiles};
use gpufair_runtime::cli::{Cli, Command};

const HELD_FOR: Duration = Duration::from_secs(2);

#[test]
fn reviews_are_answered_while_the_main_runtime_is_held() {
    let files = ServeFiles::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let listen = addr.to_string();
    let (cert, key, queues) = (
        files.cert.display().to_string(),
        files.key.display().to_string(),
        files.queues.display().to_string(),
    );
    let cli = Cli::try_parse_from([
        "gpufair-webhook",
        "serve",
        "--listen",
        &listen,
        "--metrics-listen",
        "127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--queues-file",
        &queues,
        "--controller=false",
        "--shutdown-delay",
        "0s",
    ])
    .expect("flags");
    let Command::Serve(args) = cli.command;

    // One worker, so holding it holds the whole main runtime.
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("main runtime");
    main.spawn(async move {
        if let Err(err) = gpufair_runtime::serve(args).await {
            panic!("serve failed: {err}");
        }
    });
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime");
    let ca_pem = files.ca.cert_pem();
    client.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let probe = Load::start(addr, ca_pem.clone(), 50, 1);
            tokio::time::sleep(Duration::from_millis(200)).await;
            if probe.finish().await.ok > 0 {
                break;
            }
            assert!(Instant::now() < deadline, "webhook not answering");
        }

        let load = Load::start(addr, ca_pem.clone(), 200, 2);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (held, holding) = tokio::sync::oneshot::channel();
        main.spawn(async move {
            let _ = held.send(());
            std::thread::sleep(HELD_FOR);
        });
        holding.await.expect("the main runtime's worker is held");
        // New connections are accepted meanwhile too, not only the open ones served.
        let fresh = Load::start(addr, ca_pem.clone(), 100, 2);
        tokio::time::sleep(HELD_FOR - Duration::from_millis(500)).await;
        let (report, fresh) = (load.finish().await, fresh.finish().await);
        for report in [&report, &fresh] {
            assert_eq!(report.failed, 0, "{report:?}");
            assert_eq!(report.refused, 0, "{report:?}");
            // Had admission waited for the held runtime, some review would have taken about
            // HELD_FOR.
            let slowest = report.percentile(100.0);
            assert!(
                slowest < Duration::from_millis(500),
                "slowest review {slowest:?}"
            );
        }
        assert!(report.ok >= 250, "{report:?}");
        assert!(fresh.ok >= 100, "{fresh:?}");
    });
    main.shutdown_timeout(Duration::from_secs(1));
}
