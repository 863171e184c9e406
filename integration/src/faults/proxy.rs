//! The proxy itself: a rustls listener, one hyper HTTP/1.1 connection to kube-apiserver per
//! client connection (made again when the last one cannot be reused), and the rules consulted
//! before each request is forwarded.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use gpufair_certs::CertificateAuthority;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::CancellationToken;

use super::FaultProxyError;
use super::request::{self, Target};
use super::rules::{Fault, Rules, Verb};
use super::status;

type Body = UnsyncBoxBody<Bytes, hyper::Error>;

#[derive(Default)]
pub(super) struct Counters {
    pub requests: AtomicU64,
    pub open_watches: AtomicI64,
    pub watches_cut: AtomicU64,
    pub gone_from_server: AtomicU64,
}

/// What every connection shares.
pub(super) struct State {
    pub rules: Rules,
    pub drop_watches: watch::Sender<u64>,
    pub counters: Counters,
    pub shutdown: CancellationToken,
    upstream: SocketAddr,
    upstream_name: ServerName<'static>,
    connector: TlsConnector,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl State {
    pub async fn new(
        ca: &CertificateAuthority,
        upstream: &str,
    ) -> Result<(State, TcpListener, TlsAcceptor), FaultProxyError> {
        let address: SocketAddr = upstream
            .strip_prefix("https://")
            .and_then(|a| a.trim_end_matches('/').parse().ok())
            .ok_or_else(|| FaultProxyError::Upstream(upstream.to_string()))?;
        let upstream_name = ServerName::from(address.ip());

        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca.cert_pem().as_bytes()) {
            roots.add(cert?)?;
        }
        let mut client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];

        let serving = ca.issue_serving(&["127.0.0.1".into(), "localhost".into()], 2)?;
        let chain = CertificateDer::pem_slice_iter(serving.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes())?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        // HTTP/1.1 only: one watch per connection, which the proxy can end on its own.
        server.alpn_protocols = vec![b"http/1.1".to_vec()];

        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let state = State {
            rules: Rules::default(),
            drop_watches: watch::channel(0).0,
            counters: Counters::default(),
            shutdown: CancellationToken::new(),
            upstream: address,
            upstream_name,
            connector: TlsConnector::from(Arc::new(client)),
        };
        Ok((state, listener, TlsAcceptor::from(Arc::new(server))))
    }

    /// A new HTTP/1.1 connection to the API server.
    async fn connect(&self) -> Result<SendRequest<Incoming>, String> {
        let tcp = TcpStream::connect(self.upstream)
            .await
            .map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let tls = self
            .connector
            .connect(self.upstream_name.clone(), tcp)
            .await
            .map_err(|e| e.to_string())?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = connection => {}
                _ = shutdown.cancelled() => {}
            }
        });
        Ok(sender)
    }
}

/// Accepts connections until aborted.
pub(super) async fn serve(state: Arc<State>, listener: TcpListener, acceptor: TlsAcceptor) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let state = Arc::clone(&state);
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let upstream: Arc<tokio::sync::Mutex<Option<SendRequest<Incoming>>>> = Arc::default();
            let shutdown = state.shutdown.clone();
            let service = hyper::service::service_fn(move |request| {
                handle(Arc::clone(&state), Arc::clone(&upstream), request)
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(tls), service);
            tokio::select! {
                _ = connection => {}
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

fn full(status: StatusCode, bytes: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(bytes))
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A `Status` as the whole answer, with the HTTP code it carries.
fn status_response(status: &Value) -> Response<Body> {
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .and_then(|c| StatusCode::from_u16(c).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    full(code, serde_json::to_vec(status).unwrap_or_default())
}

async fn handle(
    state: Arc<State>,
    upstream: Arc<tokio::sync::Mutex<Option<SendRequest<Incoming>>>>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let target = request::target(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    let fault = target
        .as_ref()
        .and_then(|t| state.rules.take(&t.label(), t.verb));
    let watching = target.as_ref().is_some_and(|t| t.verb == Verb::Watch);
    let mut cut_after = None;
    let answer = match (fault, &target) {
        (None, _) => None,
        (Some(Fault::ServerError), _) => Some(status_response(&status::internal_error())),
        (
            Some(Fault::TooManyRequests {
                retry_after_seconds,
            }),
            _,
        ) => {
            let mut response = status_response(&status::too_many_requests(retry_after_seconds));
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                HeaderValue::from(retry_after_seconds),
            );
            Some(response)
        }
        (Some(Fault::Delay(delay)), _) => {
            tokio::time::sleep(delay).await;
            None
        }
        // A watch is accepted, and its first event says the version is gone.
        (Some(Fault::Gone), _) if watching => Some(full(
            StatusCode::OK,
            status::watch_event("ERROR", &status::gone()),
        )),
        (Some(Fault::Gone), _) => Some(status_response(&status::gone())),
        (Some(Fault::Conflict), Some(target)) => Some(status_response(&status::conflict(target))),
        (Some(Fault::Conflict), None) => None,
        (Some(Fault::CutWatch { after }), _) => {
            cut_after = Some(after);
            None
        }
    };
    if let Some(answer) = answer {
        // Read the request to its end so the connection stays usable.
        let _ = request.into_body().collect().await;
        return Ok(answer);
    }
    Ok(forward(&state, &upstream, request, target.as_ref(), cut_after).await)
}

/// The request as the API server answers it, its body streamed back.
async fn forward(
    state: &Arc<State>,
    upstream: &tokio::sync::Mutex<Option<SendRequest<Incoming>>>,
    request: Request<Incoming>,
    target: Option<&Target>,
    cut_after: Option<Duration>,
) -> Response<Body> {
    let mut cached = upstream.lock().await;
    let reusable = match cached.take() {
        Some(mut sender) => tokio::time::timeout(Duration::from_millis(100), sender.ready())
            .await
            .is_ok_and(|ready| ready.is_ok())
            .then_some(sender),
        None => None,
    };
    let mut sender = match reusable {
        Some(sender) => sender,
        None => match state.connect().await {
            Ok(sender) => sender,
            Err(error) => return unavailable(&error),
        },
    };
    let answered = sender.send_request(request).await;
    *cached = Some(sender);
    drop(cached);
    let response = match answered {
        Ok(response) => response,
        Err(error) => return unavailable(&error.to_string()),
    };
    if response.status() == StatusCode::GONE {
        state
            .counters
            .gone_from_server
            .fetch_add(1, Ordering::Relaxed);
    }
    let watching = target.is_some_and(|t| t.verb == Verb::Watch);
    let (parts, body) = response.into_parts();
    if !(watching && parts.status.is_success()) {
        return Response::from_parts(parts, body.boxed_unsync());
    }
    Response::from_parts(parts, watch_body(Arc::clone(state), body, cut_after))
}

/// A watch's events as they come, counting the API server's own 410s, until the watch ends,
/// every watch is dropped, or `cut_after` has passed.
fn watch_body(state: Arc<State>, body: Incoming, cut_after: Option<Duration>) -> Body {
    // Subscribed now: only drops from here on end this watch.
    let mut drops = state.drop_watches.subscribe();
    let open = OpenWatch::new(Arc::clone(&state));
    let counting = Arc::clone(&state);
    let frames = BodyStream::new(body).inspect(move |frame| {
        if let Ok(data) = frame.as_ref().map(|f| f.data_ref())
            && data.is_some_and(|d| status::carries_gone(d))
        {
            counting
                .counters
                .gone_from_server
                .fetch_add(1, Ordering::Relaxed);
        }
    });
    let stop = async move {
        let cut = async {
            match cut_after {
                Some(after) => tokio::time::sleep(after).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cut => {}
            _ = drops.changed() => {}
        }
        open.cut();
    };
    StreamBody::new(frames.take_until(Box::pin(stop))).boxed_unsync()
}

/// Counts a watch open while it lives.
struct OpenWatch {
    state: Arc<State>,
}

impl OpenWatch {
    fn new(state: Arc<State>) -> OpenWatch {
        state.counters.open_watches.fetch_add(1, Ordering::Relaxed);
        OpenWatch { state }
    }

    fn cut(&self) {
        self.state
            .counters
            .watches_cut
            .fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.state
            .counters
            .open_watches
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// 503, when the API server cannot be reached.
fn unavailable(error: &str) -> Response<Body> {
    status_response(&status::failure(
        503,
        "ServiceUnavailable",
        &format!("fault proxy: the API server did not answer: {error}"),
        None,
    ))
}
