//! The admission server's own threads, apart from the controller's runtime.
//!
//! The controller shares the process (the `gpufair-webhook` binary, gpufair-runtime, runs both):
//! its decision cycle runs inline for tens of milliseconds at scale, and its watches decode
//! large lists. On a shared runtime a review that arrives meanwhile waits behind that work. On
//! threads of its own the admission path is never queued behind the controller, and it is sized
//! for what it does: the accept loop and its share of connections run on one single-threaded
//! runtime, and `--worker-threads` beyond the first add threads that each serve their own
//! connections ([`ConnectionThreads`]).

use std::net::TcpListener as StdTcpListener;
use std::num::NonZeroU16;
use std::sync::Arc;

use axum::Router;
use tokio::sync::oneshot;

use crate::connection_threads::ConnectionThreads;
use crate::metrics::Metrics;
use crate::server::{self, ServeOptions};
use crate::shutdown::Shutdown;
use crate::tls::TlsState;

/// Why the admission server could not start on its threads.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionRuntimeError {
    #[error("cannot start the admission server's threads: {0}")]
    Threads(#[source] std::io::Error),
    #[error("cannot hand the admission listener to its thread: {0}")]
    Listener(#[source] std::io::Error),
    #[error("the admission server's thread stopped without finishing its drain")]
    Stopped,
}

/// What the admission server needs, moved onto its threads.
pub struct AdmissionServer {
    pub listener: tokio::net::TcpListener,
    pub tls: Arc<TlsState>,
    pub app: Router,
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
    pub options: ServeOptions,
}

impl AdmissionServer {
    /// Serves on `threads` threads until draining ends (see [`server::serve_tls`]); resolves
    /// when it has, on whatever runtime awaits it.
    pub async fn run(self, threads: NonZeroU16) -> Result<(), AdmissionRuntimeError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(AdmissionRuntimeError::Threads)?;
        // A tokio listener belongs to the runtime that registered it: hand the socket over.
        let listener: StdTcpListener = self
            .listener
            .into_std()
            .map_err(AdmissionRuntimeError::Listener)?;
        let (done, finished) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("gpufair-admission-0".to_string())
            .spawn(move || {
                let served = runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .map_err(AdmissionRuntimeError::Listener)?;
                    let connection_threads = ConnectionThreads::start(usize::from(threads.get()))
                        .map_err(AdmissionRuntimeError::Threads)?;
                    server::serve_tls(
                        listener,
                        self.tls,
                        self.app,
                        self.shutdown,
                        self.metrics,
                        self.options,
                        &connection_threads,
                    )
                    .await;
                    Ok(connection_threads)
                });
                // Dropping the set stops and joins the other threads, outside any runtime.
                let served = served.map(drop);
                // Connections still open past the drain's grace period are cut here.
                runtime.shutdown_background();
                let _ = done.send(served);
            })
            .map_err(AdmissionRuntimeError::Threads)?;
        let result = finished
            .await
            .unwrap_or(Err(AdmissionRuntimeError::Stopped));
        // The thread has sent its result and only returns now; joining cannot block for long.
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        result
    }
}
