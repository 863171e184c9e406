//! The `gpufair-webhook` binary: its command line, its config file, and the composition of the
//! admission server (gpufair-webhook) with the gate-release controller (gpufair-controller).
//!
//! `serve` runs admission on every replica and the controller on the one holding the Lease, in
//! one process, with one watch per kind feeding both ([`watches`]). Neither library knows of
//! the other: this crate is the only place that starts both.

pub mod cli;
pub mod config;
pub mod controller;
pub mod kube_api;
pub mod main_runtime;
pub mod watches;

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use gpufair_webhook::admission_runtime::{self, AdmissionServer};
use gpufair_webhook::families::{ClusterFamilies, FamilyStore};
use gpufair_webhook::metrics::Metrics;
use gpufair_webhook::queues::{self, ClusterQueues, QueueStore};
use gpufair_webhook::shutdown::Shutdown;
use gpufair_webhook::state::AppState;
use gpufair_webhook::tls::{self, TlsState};
use gpufair_webhook::{http, reload, server};
use tokio::net::TcpListener;

use crate::cli::ServeArgs;
use crate::kube_api::KubeWatchApi;
use crate::watches::{ClusterReaders, QueueReaders};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Args(String),
    #[error(transparent)]
    Config(#[from] config::ConfigFileError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    #[error(transparent)]
    Admission(#[from] admission_runtime::AdmissionRuntimeError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot reach the Kubernetes API (in-cluster or KUBECONFIG) to watch Queues or run the \
         controller; outside a cluster use --queues-file and --controller=false: {0}"
    )]
    Kube(#[from] kube::Error),
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}
/// Runs `serve` until SIGTERM (or Ctrl-C), then shuts down in order: admission on every
/// replica (unless `--admission=false`), the controller on the Lease holder (unless
/// `--controller=false`).
pub async fn serve(args: ServeArgs) -> Result<(), ServeError> {
    // kube's client and our server share one process-wide provider: ring, not aws-lc.
    let _ = rustls::crypto::ring::default_provider().install_default();
    args.check().map_err(ServeError::Args)?;
    let mut metrics = Metrics::new();
    let controller_metrics = gpufair_controller::ControllerMetrics::default();
    if args.controller.enabled {
        controller_metrics.register(&mut metrics.registry);
    }
    let metrics = Arc::new(metrics);
    let shutdown = Shutdown::new();
    // Installed before anything can report ready, so a SIGTERM always meets the orderly stop.
    let signalled = gpufair_signal::stop_requested();
    // Taken before the file is read: the watcher starts from it, so an edit made while
    // starting up is still picked up.
    let config_loaded_from = args
        .config
        .as_ref()
        .map(|path| reload::fingerprint(std::slice::from_ref(path)));
    let loaded = config::load_runtime(args.config.as_deref())?;
    metrics.set_score_weights(&loaded.options.score);
    let policy = loaded.policy;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) if args.admission => Some(Arc::new(TlsState::load(cert, key)?)),
        _ => None,
    };
    let queues = Arc::new(QueueStore::default());
    let families = Arc::new(FamilyStore::default());
    let state = Arc::new(AppState {
        policy: ArcSwap::from_pointee(policy),
        queues: queues.clone(),
        families: families.clone(),
        metrics: metrics.clone(),
        shutdown: shutdown.clone(),
    });
    let listener = match &tls {
        Some(_) => Some(bind(args.listen).await?),
        None => None,
    };
    let metrics_listener = bind(args.metrics_listen).await?;
    let admission_threads = args.admission_threads();
    tracing::info!(
        admission = args.admission,
        controller = args.controller.enabled,
        listen = %listener.as_ref().map_or_else(
            || "off (--admission=false)".to_string(),
            |l| l.local_addr().unwrap_or(args.listen).to_string()
        ),
        metrics = %metrics_listener.local_addr().unwrap_or(args.metrics_listen),
        admission_threads = args.admission.then_some(u16::from(admission_threads)),
        "gpufair-webhook serving"
    );

    let readers = ClusterReaders::of(&args);
    let kube_config = if readers.need_cluster() {
        Some(
            kube::Config::infer()
                .await
                .map_err(kube::Error::InferConfig)?,
        )
    } else {
        None
    };
    let client = kube_config
        .clone()
        .map(kube::Client::try_from)
        .transpose()?;
    let mut background = tokio::task::JoinSet::new();
    // The cluster's Queues, watched once for whoever reads them here.
    let mut queue_readers = QueueReaders {
        admission: None,
        controller: None,
    };
    if args.admission {
        if let Some(path) = &args.queues_file {
            let (file, store, m) = (path.clone(), queues.clone(), metrics.clone());
            // A missing or bad file at start leaves the webhook running but not ready, so a
            // ConfigMap mounted a moment later still brings it up. The fingerprint is taken
            // before the read, so a change while loading is reloaded by the watcher.
            let loaded = tokio::task::spawn_blocking(move || {
                let loaded_from = reload::fingerprint(std::slice::from_ref(&file));
                queues::reload_file(&file, &store, &m);
                loaded_from
            })
            .await;
            let loaded_from = match loaded {
                Ok(loaded_from) => loaded_from,
                // The load panicked: treat the file as unseen, so the first check reloads it.
                Err(_) => reload::Fingerprint::unseen(),
            };
            background.spawn(queues::watch_file(
                path.clone(),
                loaded_from,
                queues.clone(),
                metrics.clone(),
                args.reload_interval,
                shutdown.clone(),
            ));
        }
    } else {
        // Admission is off: there are no Queues to load before this replica is ready.
        queues.replace(queues::QueueIndex::default());
    }
    if let Some(client) = &client
        && readers.admission
    {
        queue_readers.admission = Some(ClusterQueues::new(queues.clone(), metrics.clone()));
        background.spawn(watches::families(
            KubeWatchApi::new(client.clone()),
            ClusterFamilies::new(families.clone()),
            shutdown.clone(),
        ));
    }
    let mut controller_options = None;
    if let Some(kube_config) = &kube_config
        && readers.controller
    {
        let instance = controller::replica_identity(&args.controller);
        let config =
            controller::controller_config(&args.controller, args.config.as_deref(), &instance)?;
        controller_options = Some(config.options.clone());
        let (queue_cache, queue_feed) = gpufair_controller::queue_cache();
        queue_readers.controller = Some(queue_feed);
        controller::spawn(
            &mut background,
            controller::client(kube_config.clone())?,
            &args.controller,
            config,
            controller_metrics,
            queue_cache,
            shutdown.clone(),
        )?;
    }
    // Started after both readers are known. It runs until draining: admission reads Queues
    // until its last request, after the controller has stopped.
    if let Some(client) = &client
        && queue_readers.any()
    {
        background.spawn(watches::queues(
            KubeWatchApi::new(client.clone()),
            queue_readers,
            shutdown.clone(),
        ));
    }
    // The config file feeds admission (its policy) and the controller (score weights and
    // fair-share settings): watched whenever either runs.
    if let (Some(path), Some(loaded_from)) = (&args.config, config_loaded_from) {
        background.spawn(config::watch(
            path.clone(),
            loaded_from,
            state.clone(),
            controller_options,
            metrics.clone(),
            args.reload_interval,
            shutdown.clone(),
        ));
    }
    if let Some(tls) = &tls {
        background.spawn(tls.clone().watch(
            metrics.clone(),
            args.reload_interval,
            shutdown.clone(),
        ));
    }
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
            _ = signalled => {}
            _ = sequence.stopping() => {}
        }
        tracing::info!(delay = ?delay, "stopping: readiness off, draining after the delay");
        sequence.begin_stopping();
        tokio::time::sleep(delay).await;
        sequence.begin_draining();
    });

    let mut served = Ok(());
    match (listener, tls) {
        (Some(listener), Some(tls)) => {
            let options = server::ServeOptions {
                max_connections: args.max_connections,
                header_read_timeout: args.header_read_timeout,
                grace: args.shutdown_grace,
            };
            let admission = AdmissionServer {
                listener,
                tls,
                app: http::webhook_router(state),
                shutdown: shutdown.clone(),
                metrics: metrics.clone(),
                options,
            };
            if let Err(err) = admission.run(admission_threads).await {
                // Stop the rest in order too, then exit with the cause.
                shutdown.begin_draining();
                served = Err(ServeError::Admission(err));
            }
        }
        _ => shutdown.draining().await,
    }
    // Background tasks all end on draining (the controller already on stopping, after giving
    // the Lease up); bound the wait anyway.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        while background.join_next().await.is_some() {}
    })
    .await;
    tracing::info!("gpufair-webhook stopped");
    served
}
