//! The HTTPS accept loop: TLS via rustls, HTTP/1.1 and HTTP/2 via hyper, graceful drain.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::shutdown::Shutdown;
use crate::tls::TlsState;

/// A client that has not finished the TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that has not sent its request headers by then is dropped (slow-loris guard).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` over TLS on `listener` until draining begins, then waits up to `grace` for open
/// connections to finish their requests.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<TlsState>,
    app: Router,
    shutdown: Shutdown,
    max_connections: usize,
    grace: Duration,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(max_connections.max(1)));
    loop {
        // Waiting for a free slot before accepting keeps file descriptors bounded: excess
        // clients queue in the kernel backlog instead of being accepted and starved.
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = shutdown.draining() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Usually EMFILE or a connection reset before accept; back off briefly.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            _ = shutdown.draining() => break,
        };
        let _ = stream.set_nodelay(true);
        let acceptor = TlsAcceptor::from(tls.current());
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let tls_stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls_stream)) => tls_stream,
                    Ok(Err(err)) => {
                        tracing::debug!(%peer, error = %err, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let connection = builder
                .serve_connection(TokioIo::new(tls_stream), service)
                .into_owned();
            if let Err(err) = watcher.watch(connection).await {
                tracing::debug!(%peer, error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("all connections drained"),
        _ = tokio::time::sleep(grace) => tracing::warn!("shutdown grace period over; closing open connections"),
    }
}
