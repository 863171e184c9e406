//! The HTTPS accept loop: TLS via rustls, HTTP/1.1 and HTTP/2 via hyper, slow-client limits and
//! an orderly drain.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::task::TaskTracker;

use crate::connection_threads::ConnectionThreads;
use crate::first_request::FirstRequest;
use crate::metrics::{Metrics, TimeoutPhase};
use crate::shutdown::Shutdown;
use crate::tls::TlsState;

/// A client that has not finished the TLS handshake by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Once draining has begun, a connection accepted just before gets this long to send its first
/// request (rather than the whole header timeout), so a stop is not held up by idle clients.
const DRAIN_FIRST_REQUEST: Duration = Duration::from_secs(1);

/// Limits of the admission server.
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    /// Most TLS connections served at once; further clients wait in the kernel backlog.
    pub max_connections: usize,
    /// A request's headers must arrive within this (slow-loris guard); it also closes
    /// connections that stay idle this long, before or between requests (HTTP/2 ones after one
    /// to two times this).
    pub header_read_timeout: Duration,
    /// After draining begins, how long open requests get before connections are cut.
    pub grace: Duration,
}

/// Serves `app` over TLS on `listener` until draining begins, then lets open requests finish
/// within `options.grace`.
///
/// Draining is orderly for keep-alive clients: while stopping (before draining) every
/// HTTP/1.1 response says `Connection: close` (see `http`), so clients move to new connections,
/// which land on other replicas once endpoints drop this one. When draining begins the
/// listener closes (new connections are refused by the kernel), every connection with a
/// request in flight finishes it and closes, and a connection accepted just before still gets
/// its first request answered.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<TlsState>,
    app: Router,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
    options: ServeOptions,
    threads: &ConnectionThreads,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .keep_alive(true);
    let connections = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
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
        let connection = Connection {
            peer,
            acceptor: TlsAcceptor::from(tls.current()),
            app: app.clone(),
            builder: builder.clone(),
            shutdown: shutdown.clone(),
            metrics: metrics.clone(),
            header_read_timeout: options.header_read_timeout,
            _permit: permit,
        };
        threads.spawn(&connections, stream, move |stream| connection.serve(stream));
    }
    // Closing the listener makes the kernel refuse new connections (and reset those still in
    // its backlog) instead of leaving them to time out.
    drop(listener);
    connections.close();
    tokio::select! {
        _ = connections.wait() => tracing::info!("all connections drained"),
        _ = tokio::time::sleep(options.grace) => tracing::warn!(
            open = connections.len(),
            "shutdown grace period over; closing open connections"
        ),
    }
}

/// One accepted client and what serving it needs.
struct Connection {
    peer: std::net::SocketAddr,
    acceptor: TlsAcceptor,
    app: Router,
    builder: auto::Builder<TokioExecutor>,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
    header_read_timeout: Duration,
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    async fn serve(self, stream: TcpStream) {
        let peer = self.peer;
        let _open = self.metrics.connection_opened();
        let _ = stream.set_nodelay(true);
        let tls_stream =
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(stream)).await {
                Ok(Ok(tls_stream)) => tls_stream,
                Ok(Err(err)) => {
                    tracing::debug!(%peer, error = %err, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    self.metrics.connection_timeout(TimeoutPhase::Handshake);
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
        let first = FirstRequest::new();
        let marker = first.clone();
        let app = tower::ServiceExt::map_request(self.app.clone(), move |request| {
            marker.mark();
            request
        });
        let connection = self
            .builder
            .serve_connection(TokioIo::new(tls_stream), TowerToHyperService::new(app))
            .into_owned();
        tokio::pin!(connection);

        // Until its first request, the connection runs against our own deadline: hyper's
        // header timeout only starts once HTTP/1.1 is detected (the protocol sniffing before
        // it waits for bytes for ever) and does not exist for HTTP/2, so a client that
        // connects and sends nothing would otherwise hold a connection slot for good.
        let deadline = tokio::time::sleep(self.header_read_timeout);
        tokio::pin!(deadline);
        let mut draining_noticed = false;
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    self.ended(result);
                    return;
                }
                () = first.seen() => break,
                () = &mut deadline => {
                    self.metrics.connection_timeout(TimeoutPhase::RequestHeaders);
                    tracing::debug!(%peer, "no request within the header read timeout; closing");
                    return;
                }
                () = self.shutdown.draining(), if !draining_noticed => {
                    draining_noticed = true;
                    let sooner = tokio::time::Instant::now() + DRAIN_FIRST_REQUEST;
                    if sooner < deadline.deadline() {
                        deadline.as_mut().reset(sooner);
                    }
                }
            }
        }
        // Between requests, hyper's header timer closes an idle HTTP/1.1 connection; HTTP/2 has
        // no such timer, so an HTTP/2 client that sent one request could hold its connection
        // slot for good (and `--max-connections` of them every slot). A connection that sends
        // no new request during a whole header read timeout is closed here, gracefully: after
        // between one and two timeouts of silence. The API server reconnects when it needs to.
        let period = self.header_read_timeout;
        let mut checks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        let mut requests = first.count();
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    self.ended(result);
                    return;
                }
                () = self.shutdown.draining() => break,
                _ = checks.tick() => {
                    let now = first.count();
                    if now == requests {
                        self.metrics.connection_timeout(TimeoutPhase::Idle);
                        tracing::debug!(%peer, "no request within a header read timeout; closing");
                        break;
                    }
                    requests = now;
                }
            }
        }
        // The request in flight (if any) is answered, then the connection closes (HTTP/1.1) or
        // says GOAWAY and finishes its open streams (HTTP/2).
        connection.as_mut().graceful_shutdown();
        let result = connection.await;
        self.ended(result);
    }

    fn ended(&self, result: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
        let Err(err) = result else { return };
        let timed_out = err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_timeout);
        if timed_out {
            self.metrics
                .connection_timeout(TimeoutPhase::RequestHeaders);
            tracing::debug!(peer = %self.peer, "request headers not received in time; closed");
        } else {
            tracing::debug!(peer = %self.peer, error = %err, "connection ended with an error");
        }
    }
}
