//! HTTP routing: authentication, URL → resource, verb dispatch, faults, and the responses
//! (JSON objects, lists, `Status` errors, watch streams).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use serde_json::{Value, json};

use super::State;
use super::discovery;
use super::eviction;
use super::faults::{Fault, Verb};
use super::patch::{PatchType, apply_json_patch, apply_merge_patch, apply_strategic_patch};
use super::resources::ResourceKind;
use super::scheduler;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{DeleteOptions, Target, name_of, namespace_of};
use super::verbs;
use super::watch::{self, Body, WatchRequest};

/// Largest request body accepted (the real server's limit is 3 MiB for most requests).
const MAX_BODY: usize = 3 * 1024 * 1024;

fn full(status: StatusCode, value: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(
            Full::new(Bytes::from(bytes)).map_err(|never: Infallible| match never {}),
        ))
        .unwrap_or_default()
}

fn error_response(error: &ApiError) -> Response<Body> {
    let mut response = full(
        StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        &error.to_status(),
    );
    if let Some(seconds) = error.retry_after
        && let Ok(value) = http::HeaderValue::from_str(&seconds.to_string())
    {
        response.headers_mut().insert("retry-after", value);
    }
    response
}

fn plain(text: &'static str) -> Response<Body> {
    Response::builder()
        .header("content-type", "text/plain")
        .body(BodyExt::boxed(
            Full::new(Bytes::from_static(text.as_bytes()))
                .map_err(|never: Infallible| match never {}),
        ))
        .unwrap_or_default()
}

/// The parsed resource part of a URL.
struct Route {
    kind: Arc<ResourceKind>,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Route {
    fn fault_label(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.kind.plural),
            None => self.kind.plural.clone(),
        }
    }

    fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }
}

fn route(
    state: &State,
    group: &str,
    version: &str,
    segments: &[&str],
    path: &str,
) -> Result<Route, ApiError> {
    let inner = state.store.lock();
    let find = |plural: &str| inner.registry.find(group, version, plural);
    let (namespace, rest) =
        if segments.len() >= 3 && segments[0] == "namespaces" && find(segments[2]).is_some() {
            (Some(segments[1].to_string()), &segments[2..])
        } else {
            (None, segments)
        };
    if rest.is_empty() || rest.len() > 3 {
        return Err(ApiError::not_found_path(path));
    }
    let kind = find(rest[0]).ok_or_else(|| ApiError::not_found_path(path))?;
    let name = rest.get(1).map(|s| s.to_string());
    let subresource = rest.get(2).map(|s| s.to_string());
    if namespace.is_some() && !kind.namespaced {
        return Err(ApiError::not_found_path(path));
    }
    if kind.namespaced && name.is_some() && namespace.is_none() {
        return Err(ApiError::not_found_path(path));
    }
    if let Some(sub) = &subresource
        && !kind.subresources().contains(&sub.as_str())
    {
        return Err(ApiError::not_found_path(path));
    }
    Ok(Route {
        kind,
        namespace,
        name,
        subresource,
    })
}

async fn read_body(request: Request<Incoming>) -> Result<Bytes, ApiError> {
    Limited::new(request.into_body(), MAX_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|err| ApiError::bad_request(format!("could not read the request body: {err}")))
}

fn json_body(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|err| {
        ApiError::bad_request(format!("the body of the request is not valid JSON: {err}"))
    })
}

/// Serves one request.
pub async fn handle(state: Arc<State>, request: Request<Incoming>) -> Response<Body> {
    let authorized = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|token| token == state.token);
    let path = request.uri().path().to_string();
    if matches!(path.as_str(), "/healthz" | "/readyz" | "/livez") {
        return plain("ok");
    }
    if !authorized {
        return error_response(&ApiError::unauthorized());
    }
    match serve(state, request).await {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(%path, code = error.code, message = %error.message, "refused");
            error_response(&error)
        }
    }
}

async fn serve(state: Arc<State>, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let path = request.uri().path().trim_end_matches('/').to_string();
    let query: HashMap<String, String> = request
        .uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let registry = state.store.lock().registry.clone();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Ok(full(StatusCode::OK, &discovery::version())),
        ["api"] => return Ok(full(StatusCode::OK, &discovery::core_versions())),
        ["apis"] => return Ok(full(StatusCode::OK, &discovery::groups(&registry))),
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(ApiError::not_found_path(&path)),
    };
    if rest.is_empty() {
        return discovery::resources(&registry, group, version)
            .map(|list| full(StatusCode::OK, &list))
            .ok_or_else(|| ApiError::not_found_path(&path));
    }
    let route = route(&state, group, version, rest, &path)?;
    let method = request.method().clone();
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (&method, route.name.is_some()) {
        (&Method::GET, true) => Verb::Get,
        (&Method::GET, false) if watching => Verb::Watch,
        (&Method::GET, false) => Verb::List,
        (&Method::POST, _) => Verb::Create,
        (&Method::PUT, true) => Verb::Update,
        (&Method::PATCH, true) => Verb::Patch,
        (&Method::DELETE, true) => Verb::Delete,
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on {path} by the API-server stand-in (no deletecollection, no collection-level PUT/PATCH)"
            )));
        }
    };
    let dry_run = dry_run(&query, verb, &route)?;
    let mut drop_watch = false;
    if let Some(fault) = state.faults.take(&route.fault_label(), verb) {
        match fault {
            Fault::ServerError => {
                return Err(ApiError::internal(
                    "Internal error occurred: injected fault",
                ));
            }
            Fault::TooManyRequests {
                retry_after_seconds,
            } => {
                return Err(ApiError::too_many_requests(
                    "Too many requests, please try again later.",
                    retry_after_seconds,
                ));
            }
            Fault::Delay(delay) => tokio::time::sleep(delay).await,
            Fault::Gone if verb == Verb::Watch => {
                return Ok(streaming(watch::error_stream(&ApiError::gone(
                    "too old resource version: injected fault",
                ))));
            }
            Fault::Gone => return Err(ApiError::gone("too old resource version: injected fault")),
            Fault::Conflict => {
                return Err(ApiError::conflict(
                    &route.kind.group,
                    &route.kind.plural,
                    route.name(),
                ));
            }
            Fault::DropWatch => drop_watch = true,
        }
    }
    match verb {
        Verb::Get => {
            let object = state
                .store
                .lock()
                .get(&route.kind, route.namespace(), route.name())?;
            Ok(full(StatusCode::OK, &object))
        }
        Verb::List => list(&state, &route, &query),
        Verb::Watch => {
            let request = watch_request(&route, &query)?;
            Ok(streaming(watch::start(state, request, drop_watch)))
        }
        Verb::Create => {
            let body = json_body(&read_body(request).await?)?;
            create(&state, &route, body, dry_run).await
        }
        Verb::Update => {
            let target = match route.subresource.as_deref() {
                None => Target::Main,
                Some("status") => Target::Status,
                Some(other) => {
                    return Err(ApiError::method_not_allowed(format!(
                        "PUT is not supported on {other}"
                    )));
                }
            };
            let body = json_body(&read_body(request).await?)?;
            let object = state.store.lock().update(
                &route.kind,
                route.namespace(),
                route.name(),
                body,
                target,
            )?;
            Ok(full(StatusCode::OK, &object))
        }
        Verb::Patch => {
            let content_type = request
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = read_body(request).await?;
            patch(&state, &route, &content_type, &body)
        }
        Verb::Delete => {
            let body = read_body(request).await?;
            let options = delete_options(&query, &body)?;
            let object = state.store.lock().delete(
                &route.kind,
                route.namespace(),
                route.name(),
                &options,
            )?;
            Ok(full(StatusCode::OK, &object))
        }
    }
}

fn streaming(body: Body) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .body(body)
        .unwrap_or_default()
}

fn selectors(
    route: &Route,
    query: &HashMap<String, String>,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels =
        LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))?;
    let fields = FieldSelector::parse(
        query.get("fieldSelector").map(String::as_str).unwrap_or(""),
        route.kind.field_labels,
    )?;
    Ok((labels, fields))
}

fn parse_version(text: Option<&String>) -> Result<Option<u64>, ApiError> {
    match text.map(String::as_str) {
        None | Some("") | Some("0") => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| {
            ApiError::bad_request(format!(
                "resourceVersion {v:?} is not a resource version this server issued"
            ))
        }),
    }
}

fn watch_request(route: &Route, query: &HashMap<String, String>) -> Result<WatchRequest, ApiError> {
    let (labels, fields) = selectors(route, query)?;
    let timeout = match query.get("timeoutSeconds") {
        Some(t) => Some(Duration::from_secs(t.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "timeoutSeconds {t:?} is not a whole number of seconds"
            ))
        })?)),
        None => None,
    };
    let flag = |name: &str| matches!(query.get(name).map(String::as_str), Some("true" | "1"));
    Ok(WatchRequest {
        kind: Arc::clone(&route.kind),
        namespace: route.namespace.clone(),
        labels,
        fields,
        resource_version: parse_version(query.get("resourceVersion"))?,
        send_initial_events: flag("sendInitialEvents"),
        bookmarks: flag("allowWatchBookmarks"),
        timeout,
    })
}

/// A `continue` token: the list's version and the last key returned.
fn encode_continue(version: u64, namespace: &str, name: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(json!([version, namespace, name]).to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: it must come from a previous list response",
        )
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let (version, namespace, name): (u64, String, String) =
        serde_json::from_slice(&bytes).map_err(|_| bad())?;
    Ok((version, namespace, name))
}

/// LIST, with selectors and `limit`/`continue` paging. Pages after the first are read from
/// the current state (not a snapshot) and report the first page's version; a token older
/// than the kept history is 410, as in the real server.
fn list(
    state: &State,
    route: &Route,
    query: &HashMap<String, String>,
) -> Result<Response<Body>, ApiError> {
    let (labels, fields) = selectors(route, query)?;
    let limit: usize = match query.get("limit") {
        Some(l) => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("limit {l:?} is not a whole number")))?,
        None => 0,
    };
    let inner = state.store.lock();
    let mut items = inner.list(&route.kind, route.namespace.as_deref(), &labels, &fields);
    let mut version = inner.resource_version();
    if let Some(token) = query.get("continue").filter(|t| !t.is_empty()) {
        let (token_version, namespace, name) = decode_continue(token)?;
        inner.changes_since(token_version).map_err(|_| {
            ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
        })?;
        version = token_version;
        items.retain(|o| (namespace_of(o), name_of(o)) > (namespace.as_str(), name.as_str()));
    }
    let mut metadata = json!({"resourceVersion": version.to_string()});
    if limit > 0 && items.len() > limit {
        items.truncate(limit);
        if let Some(last) = items.last() {
            metadata["continue"] =
                json!(encode_continue(version, namespace_of(last), name_of(last)));
        }
    }
    Ok(full(
        StatusCode::OK,
        &json!({"kind": format!("{}List", route.kind.kind), "apiVersion": route.kind.api_version(), "metadata": metadata, "items": items}),
    ))
}

/// `dryRun=All` is honoured where gpufair's components send it (evictions: the controller
/// checks every pod of a workload against its budgets before evicting any). Anywhere else it
/// is refused rather than ignored, so a dry run never writes.
fn dry_run(query: &HashMap<String, String>, verb: Verb, route: &Route) -> Result<bool, ApiError> {
    match query.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") if verb == Verb::Create && route.subresource.as_deref() == Some("eviction") => {
            Ok(true)
        }
        Some("All") => Err(ApiError::bad_request(format!(
            "dryRun is supported by the API-server stand-in only for pods/eviction, not for {}",
            route.fault_label()
        ))),
        Some(other) => Err(ApiError::bad_request(format!(
            "dryRun {other:?} is not valid: the accepted value is All"
        ))),
    }
}

async fn create(
    state: &Arc<State>,
    route: &Route,
    body: Value,
    dry_run: bool,
) -> Result<Response<Body>, ApiError> {
    match (route.subresource.as_deref(), route.name.is_some()) {
        (None, false) => {
            let object = verbs::create(state, &route.kind, route.namespace(), body).await?;
            Ok(full(StatusCode::CREATED, &object))
        }
        (Some("eviction"), true) => {
            let status = eviction::evict(
                &mut state.store.lock(),
                route.namespace(),
                route.name(),
                &body,
                dry_run,
            )?;
            Ok(full(StatusCode::CREATED, &status))
        }
        (Some("binding"), true) => {
            let node = body["target"]["name"]
                .as_str()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    ApiError::invalid(
                        "Binding",
                        route.name(),
                        &[("target.name".into(), "Required value".into())],
                    )
                })?;
            scheduler::bind(
                &mut state.store.lock(),
                route.namespace(),
                route.name(),
                node,
            )?;
            Ok(full(StatusCode::CREATED, &super::status::success(201)))
        }
        _ => Err(ApiError::method_not_allowed(format!(
            "POST is not supported on {}",
            route.fault_label()
        ))),
    }
}

fn patch(
    state: &State,
    route: &Route,
    content_type: &str,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    let target = match route.subresource.as_deref() {
        None => Target::Main,
        Some("status") => Target::Status,
        Some(other) => {
            return Err(ApiError::method_not_allowed(format!(
                "PATCH is not supported on {other}"
            )));
        }
    };
    let patch_type = PatchType::from_content_type(content_type)?;
    match patch_type {
        PatchType::Apply => {
            return Err(ApiError::unsupported_media_type(
                "server-side apply (application/apply-patch+yaml) is not supported by the API-server stand-in: field ownership is not tracked; send a merge patch (application/merge-patch+json) or a JSON patch instead",
            ));
        }
        PatchType::Strategic if route.kind.custom => {
            return Err(ApiError::unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
        _ => {}
    }
    let object = state.store.lock().modify(
        &route.kind,
        route.namespace(),
        route.name(),
        target,
        |old| match patch_type {
            PatchType::Json => apply_json_patch(old, body),
            PatchType::Merge => apply_merge_patch(old, body),
            _ => apply_strategic_patch(old, body),
        },
    )?;
    Ok(full(StatusCode::OK, &object))
}

fn delete_options(query: &HashMap<String, String>, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        json_body(body)?
    };
    let grace = match query.get("gracePeriodSeconds") {
        Some(g) => Some(g.parse().map_err(|_| {
            ApiError::bad_request(format!("gracePeriodSeconds {g:?} is not a whole number"))
        })?),
        None => body["gracePeriodSeconds"].as_i64(),
    };
    Ok(DeleteOptions {
        grace_period_seconds: grace,
        precondition_uid: body["preconditions"]["uid"].as_str().map(str::to_string),
        precondition_resource_version: body["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
    })
}
