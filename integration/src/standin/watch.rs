//! Watch streams: newline-delimited `{"type", "object"}` events over a chunked response.
//!
//! A watch without a resourceVersion (or with "0") first gets a synthetic ADDED for every
//! matching object, then changes. A watch from version N gets the kept history after N, then
//! changes; when N is older than the kept history it gets one ERROR event carrying a 410
//! `Expired` Status and the stream ends (what the real watch cache sends). With
//! `sendInitialEvents=true` the current objects come first, then a BOOKMARK annotated
//! `k8s.io/initial-events-end`. With `allowWatchBookmarks=true`, BOOKMARK events carry the
//! latest version the stream has passed, every bookmark interval. Selectors apply to old and
//! new object, so an object leaving the selection is sent as DELETED and one entering it as
//! ADDED. `timeoutSeconds` ends the stream; so do a dropped-watch fault and a lagging client.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::StreamBody;
use http_body_util::combinators::BoxBody;
use hyper::body::Frame;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::State;
use super::resources::ResourceKind;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{Change, EventType};

/// What a client asked to watch.
pub struct WatchRequest {
    pub kind: Arc<ResourceKind>,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// `None` for "" or "0": start with the current objects.
    pub resource_version: Option<u64>,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
}

impl WatchRequest {
    fn selects(&self, object: &Value) -> bool {
        self.labels.matches(&object["metadata"]["labels"]) && self.fields.matches(object)
    }

    /// The event this change is for this watch, if any.
    fn event(&self, change: &Change) -> Option<(&'static str, Value)> {
        if change.resource != self.kind.key() {
            return None;
        }
        if let Some(namespace) = &self.namespace
            && *namespace != change.namespace
        {
            return None;
        }
        let now = self.selects(&change.object);
        let before = change.previous.as_ref().is_some_and(|p| self.selects(p));
        let kind = match change.event_type {
            EventType::Added if now => "ADDED",
            EventType::Deleted if now || before => "DELETED",
            EventType::Modified if now && before => "MODIFIED",
            EventType::Modified if now => "ADDED",
            EventType::Modified if before => "DELETED",
            _ => return None,
        };
        Some((kind, change.object.clone()))
    }

    fn bookmark(&self, resource_version: u64, initial_end: bool) -> Value {
        let mut metadata = json!({"resourceVersion": resource_version.to_string()});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        json!({"type": "BOOKMARK", "object": {"kind": self.kind.kind, "apiVersion": self.kind.api_version(), "metadata": metadata}})
    }
}

fn line(event: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(event).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

pub type Body = BoxBody<Bytes, Infallible>;

/// The body of a watch that ends at once after one ERROR event (410 and other refusals).
pub fn error_stream(error: &ApiError) -> Body {
    let event = json!({"type": "ERROR", "object": error.to_status()});
    let (tx, rx) = mpsc::channel(1);
    let _ = tx.try_send(line(&event));
    body(rx)
}

fn body(rx: mpsc::Receiver<Bytes>) -> Body {
    BodyExt::boxed(StreamBody::new(
        ReceiverStream::new(rx).map(|b| Ok::<_, Infallible>(Frame::data(b))),
    ))
}

use http_body_util::BodyExt;

/// Starts a watch; `drop_at_once` closes it right after the initial events.
pub fn start(state: Arc<State>, request: WatchRequest, drop_at_once: bool) -> Body {
    let mut changes = state.store.subscribe();
    let mut drops = state.faults.watch_drops();
    drops.mark_unchanged();
    let initial = {
        let inner = state.store.lock();
        let current = inner.resource_version();
        let backlog: Result<Vec<Value>, ApiError> =
            match (request.resource_version, request.send_initial_events) {
                (None, _) | (_, true) => Ok(inner
                    .iter(&request.kind, request.namespace.as_deref())
                    .filter(|o| request.selects(o))
                    .map(|o| json!({"type": "ADDED", "object": o}))
                    .collect()),
                (Some(since), false) if since > current => Err(ApiError::timeout(format!(
                    "Too large resource version: {since}, current: {current}"
                ))),
                (Some(since), false) => inner.changes_since(since).map(|list| {
                    list.iter()
                        .filter_map(|c| request.event(c))
                        .map(|(t, o)| json!({"type": t, "object": o}))
                        .collect()
                }),
            };
        backlog.map(|b| (b, current))
    };
    let (mut events, mut last) = match initial {
        Ok(initial) => initial,
        Err(error) => return error_stream(&error),
    };
    if request.send_initial_events && request.bookmarks {
        events.push(request.bookmark(last, true));
    }
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let bookmark_every = state.bookmark_interval;
    let shutdown = state.shutdown.clone();
    tokio::spawn(async move {
        for event in &events {
            if tx.send(line(event)).await.is_err() {
                return;
            }
        }
        if drop_at_once {
            return;
        }
        let deadline = request.timeout.map(|t| tokio::time::Instant::now() + t);
        let mut ticker = tokio::time::interval(bookmark_every);
        ticker.tick().await;
        loop {
            let timeout = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                received = changes.recv() => match received {
                    Ok(change) => {
                        if change.resource_version <= last {
                            continue;
                        }
                        last = change.resource_version;
                        if let Some((kind, object)) = request.event(&change)
                            && tx.send(line(&json!({"type": kind, "object": object}))).await.is_err()
                        {
                            return;
                        }
                    }
                    // A client too slow to keep up is cut off; it re-watches from its last
                    // version, as after any closed watch.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
                _ = ticker.tick(), if request.bookmarks => {
                    if tx.send(line(&request.bookmark(last, false))).await.is_err() {
                        return;
                    }
                }
                _ = timeout => return,
                _ = drops.changed() => return,
                _ = shutdown.cancelled() => return,
                _ = tx.closed() => return,
            }
        }
    });
    body(rx)
}
