//! Routes: `POST /mutate`, `GET /healthz`, `GET /readyz` (TLS port) and `GET /metrics`
//! (metrics port, which also answers the probes for kubelets that probe over plain HTTP).

use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, HeaderValue, StatusCode, Version, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::admission::review;
use crate::metrics::Outcome;
use crate::state::AppState;

/// Largest AdmissionReview accepted. The API server caps objects at about 1.5 MiB, and a
/// review can carry the object twice (object and oldObject) plus envelope.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// A client that has not sent its whole body by then is cut off rather than holding a task.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Bodies above this size are parsed on the blocking pool so one huge review cannot stall
/// the workers answering small ones.
const INLINE_PARSE_LIMIT: usize = 256 * 1024;

pub fn webhook_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/mutate", post(mutate))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

pub fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

fn text(status: StatusCode, message: impl Into<String>) -> Response {
    let mut response = (status, message.into()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn healthz() -> Response {
    text(StatusCode::OK, "ok\n")
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.not_ready_reason() {
        None => text(StatusCode::OK, "ok\n"),
        Some(reason) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut response = state.metrics.encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    response
}

// The whole request is taken apart rather than extracted as `HeaderMap` and `Body`: axum's
// `HeaderMap` extractor clones every header, once per review.
async fn mutate(State(state): State<Arc<AppState>>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let version = parts.version;
    let (mut response, outcome) = answer(&state, &parts.headers, body).await;
    state
        .metrics
        .request(outcome, started.elapsed().as_secs_f64());
    // While stopping, move HTTP/1.1 clients off their keep-alive connections now, while this
    // replica still answers, rather than have an idle connection closed under a request later.
    // (HTTP/2 clients get GOAWAY when draining begins; the header is not allowed there.)
    if version <= Version::HTTP_11 && state.shutdown.is_stopping() {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

fn too_large() -> (Response, Outcome) {
    (
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("AdmissionReview larger than {MAX_BODY_BYTES} bytes\n"),
        ),
        Outcome::TooLarge,
    )
}

async fn answer(state: &Arc<AppState>, headers: &HeaderMap, body: Body) -> (Response, Outcome) {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return too_large();
    }
    let mut collect = std::pin::pin!(Limited::new(body, MAX_BODY_BYTES).collect());
    // A review's body nearly always arrives with its headers, so it is taken without arming
    // the timeout: a timer registered and cancelled on every request is CPU for nothing.
    let collected = match futures::poll!(collect.as_mut()) {
        Poll::Ready(result) => Ok(result),
        Poll::Pending => tokio::time::timeout(BODY_TIMEOUT, collect).await,
    };
    let bytes = match collected {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(err)) if err.downcast_ref::<LengthLimitError>().is_some() => return too_large(),
        Ok(Err(err)) => {
            let message = format!("could not read the request body: {err}\n");
            return (text(StatusCode::BAD_REQUEST, message), Outcome::BadRequest);
        }
        Err(_) => {
            let message = "request body not received in time\n";
            return (
                text(StatusCode::REQUEST_TIMEOUT, message),
                Outcome::BadRequest,
            );
        }
    };
    let now = jiff::Timestamp::now().as_second();
    let result = if bytes.len() <= INLINE_PARSE_LIMIT {
        review(&bytes, state, now)
    } else {
        let state = state.clone();
        match tokio::task::spawn_blocking(move || review(&bytes, &state, now)).await {
            Ok(result) => result,
            Err(err) => {
                tracing::error!(error = %err, "admission task failed");
                let message = "internal error while reading the review\n";
                return (
                    text(StatusCode::INTERNAL_SERVER_ERROR, message),
                    Outcome::BadRequest,
                );
            }
        }
    };
    match result {
        Ok(answer) => {
            let mut response = Response::new(Body::from(answer.body));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            (response, answer.outcome)
        }
        Err(err) => (
            text(StatusCode::BAD_REQUEST, format!("{err}\n")),
            Outcome::BadRequest,
        ),
    }
}
