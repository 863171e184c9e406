//! gpufair's mutating admission webhook.
//!
//! Every GPU pod creation passes through here: the pod is read into plain facts, gpufair-core
//! plans its mutation (queue, priority class, scheduling gate, node affinity, tolerations,
//! labels), and this crate only turns the plan into a JSON patch and serves it over HTTPS.

pub mod admission;
pub mod cli;
pub mod config;
pub mod facts;
pub mod http;
pub mod metrics;
pub mod patch;
pub mod pod;
pub mod queues;
pub mod reload;
pub mod server;
pub mod shutdown;
pub mod state;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;

use crate::cli::ServeArgs;
use crate::metrics::Metrics;
use crate::queues::QueueStore;
use crate::shutdown::Shutdown;
use crate::state::AppState;
use crate::tls::TlsState;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] config::ConfigFileError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot reach the Kubernetes API to watch Queues (use --queues-file outside a cluster): {0}"
    )]
    Kube(#[from] kube::Error),
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Runs `serve` until SIGTERM (or Ctrl-C), then shuts down in order.
pub async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    // kube's client and our server share one process-wide provider: ring, not aws-lc.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let metrics = Arc::new(Metrics::new());
    let shutdown = Shutdown::new();
    let policy = config::load_policy(args.config.as_deref())?;
    let tls = Arc::new(TlsState::load(&args.tls_cert, &args.tls_key)?);
    let queues = Arc::new(QueueStore::default());
    let state = Arc::new(AppState {
        policy: ArcSwap::from_pointee(policy),
        queues: queues.clone(),
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
    });
    let listener = bind(args.listen).await?;
    let metrics_listener = bind(args.metrics_listen).await?;
    tracing::info!(
        listen = %listener.local_addr().unwrap_or(args.listen),
        metrics = %metrics_listener.local_addr().unwrap_or(args.metrics_listen),
        "gpufair-webhook serving"
    );

    let mut background = tokio::task::JoinSet::new();
    match &args.queues_file {
        Some(path) => {
            let (file, store, m) = (path.clone(), queues.clone(), metrics.clone());
            // A missing or bad file at start leaves the webhook running but not ready, so a
            // ConfigMap mounted a moment later still brings it up.
            tokio::task::spawn_blocking(move || queues::reload_file(&file, &store, &m))
                .await
                .ok();
            background.spawn(queues::watch_file(
                path.clone(),
                queues.clone(),
                metrics.clone(),
                args.reload_interval,
                shutdown.clone(),
            ));
        }
        None => {
            let client = kube::Client::try_default().await?;
            background.spawn(queues::watch_cluster(
                client,
                queues.clone(),
                metrics.clone(),
                shutdown.clone(),
            ));
        }
    }
    if let Some(path) = &args.config {
        background.spawn(config::watch(
            path.clone(),
            state.clone(),
            metrics.clone(),
            args.reload_interval,
            shutdown.clone(),
        ));
    }
    background.spawn(
        tls.clone()
            .watch(metrics.clone(), args.reload_interval, shutdown.clone()),
    );
    let metrics_app = http::metrics_router(state.clone());
    let metrics_shutdown = shutdown.clone();
    background.spawn(async move {
        let result = axum::serve(metrics_listener, metrics_app)
            .with_graceful_shutdown(async move { metrics_shutdown.draining().await })
            .await;
        if let Err(err) = result {
            tracing::error!(error = %err, "metrics server failed");
        }
    });
    let sequence = shutdown.clone();
    let delay = args.shutdown_delay;
    background.spawn(async move {
        tokio::select! {
            _ = shutdown::signal() => {}
            _ = sequence.stopping() => {}
        }
        tracing::info!(delay = ?delay, "stopping: readiness off, draining after the delay");
        sequence.begin_stopping();
        tokio::time::sleep(delay).await;
        sequence.begin_draining();
    });

    server::serve_tls(
        listener,
        tls,
        http::webhook_router(state),
        shutdown.clone(),
        args.max_connections,
        args.shutdown_grace,
    )
    .await;
    // Background tasks all end on draining; bound the wait anyway.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        while background.join_next().await.is_some() {}
    })
    .await;
    tracing::info!("gpufair-webhook stopped");
    Ok(())
}
