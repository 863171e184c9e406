//! Mutating admission: on CREATE, every stored MutatingWebhookConfiguration whose rules,
//! namespaceSelector and objectSelector match is called with a real AdmissionReview v1 over
//! HTTPS, trusting only its `caBundle`, within its `timeoutSeconds`; the JSONPatch it returns
//! is applied before the object is stored. A failed call follows `failurePolicy` (`Fail`, the
//! default, refuses the request; `Ignore` skips the webhook). Webhooks with
//! `reinvocationPolicy: IfNeeded` are called once more when a later webhook changed the object.
//! Configurations are called in name order, webhooks in their listed order.
//!
//! `clientConfig.url` is dialled directly; `clientConfig.service` is looked up in the
//! [`ServiceDirectory`] (there is no cluster DNS), and the TLS name is `<name>.<namespace>.svc`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use super::resources::ResourceKind;
use super::selectors::LabelSelector;
use super::status::ApiError;
use super::store::{Store, name_of, random_u64};

/// Where Services named in webhook configurations are reachable.
#[derive(Default)]
pub struct ServiceDirectory {
    addresses: Mutex<HashMap<(String, String, u16), SocketAddr>>,
}

impl ServiceDirectory {
    pub fn register(&self, namespace: &str, name: &str, port: u16, address: SocketAddr) {
        self.addresses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((namespace.into(), name.into(), port), address);
    }

    fn lookup(&self, namespace: &str, name: &str, port: u16) -> Option<SocketAddr> {
        self.addresses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(namespace.to_string(), name.to_string(), port))
            .copied()
    }
}

/// Whether a webhook's `rules` cover this operation on this resource.
fn rules_match(webhook: &Value, kind: &ResourceKind, operation: &str) -> bool {
    let contains = |list: &Value, value: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|v| v == "*" || v == value))
    };
    webhook["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|rule| {
            let scope_ok = match rule["scope"].as_str().unwrap_or("*") {
                "Namespaced" => kind.namespaced,
                "Cluster" => !kind.namespaced,
                _ => true,
            };
            let resource_ok = rule["resources"].as_array().is_some_and(|l| {
                l.iter()
                    .any(|r| r == "*" || r == "*/*" || *r == json!(kind.plural))
            });
            scope_ok
                && resource_ok
                && contains(&rule["operations"], operation)
                && contains(&rule["apiGroups"], &kind.group)
                && contains(&rule["apiVersions"], &kind.version)
        })
}

/// One webhook to call, with what the request needs from its configuration.
struct Call {
    name: String,
    webhook: Value,
}

fn calls_for(
    store: &Store,
    kind: &ResourceKind,
    object: &Value,
    operation: &str,
) -> Result<Vec<Call>, ApiError> {
    let inner = store.lock();
    let configurations = inner.kind(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
    )?;
    let namespace_labels = if kind.namespaced {
        let namespaces = inner.kind("", "namespaces")?;
        let namespace = object["metadata"]["namespace"].as_str().unwrap_or_default();
        inner
            .try_get(&namespaces, "", namespace)
            .map(|n| n["metadata"]["labels"].clone())
            .unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let mut calls = Vec::new();
    for configuration in inner.iter(&configurations, None) {
        for webhook in configuration["webhooks"].as_array().into_iter().flatten() {
            if !rules_match(webhook, kind, operation) {
                continue;
            }
            let name = webhook["name"].as_str().unwrap_or_default().to_string();
            let selector = |field: &str| {
                LabelSelector::from_object(&webhook[field], field)
                    .map_err(|e| ApiError::internal(format!("webhook {name:?}: {e}")))
            };
            if kind.namespaced && !selector("namespaceSelector")?.matches(&namespace_labels) {
                continue;
            }
            if !selector("objectSelector")?.matches(&object["metadata"]["labels"]) {
                continue;
            }
            if !match_conditions_hold(webhook, &name, object, operation)? {
                continue;
            }
            calls.push(Call {
                name,
                webhook: webhook.clone(),
            });
        }
    }
    Ok(calls)
}

/// Evaluates the webhook's `matchConditions` (CEL) as the API server does: the request is sent
/// only if every condition is true. `object`, `oldObject` (null on CREATE) and `request` (its
/// operation) are bound. A condition that fails to evaluate is an error the caller reports, as
/// the API server does under `failurePolicy: Fail`.
fn match_conditions_hold(
    webhook: &Value,
    name: &str,
    object: &Value,
    operation: &str,
) -> Result<bool, ApiError> {
    let request = serde_json::json!({ "operation": operation });
    for condition in webhook["matchConditions"].as_array().into_iter().flatten() {
        let expression = condition["expression"].as_str().unwrap_or_default();
        let failed = |why: String| {
            ApiError::internal(format!(
                "webhook {name:?}: matchCondition {:?} {why}",
                condition["name"].as_str().unwrap_or_default()
            ))
        };
        let program = cel::Program::compile(expression)
            .map_err(|e| failed(format!("does not parse: {e}")))?;
        let mut context = cel::Context::default();
        for (variable, value) in [
            ("object", object),
            ("oldObject", &Value::Null),
            ("request", &request),
        ] {
            context
                .add_variable(variable, value)
                .map_err(|e| failed(format!("cannot bind {variable}: {e}")))?;
        }
        match program.execute(&context) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Ok(false),
            Ok(other) => return Err(failed(format!("returned {other:?}, not a bool"))),
            Err(e) => return Err(failed(format!("failed: {e}"))),
        }
    }
    Ok(true)
}

/// Runs mutating admission for a CREATE and returns the object to store.
pub async fn admit_create(
    store: &Store,
    services: &ServiceDirectory,
    kind: &ResourceKind,
    object: Value,
) -> Result<Value, ApiError> {
    let calls = calls_for(store, kind, &object, "CREATE")?;
    if calls.is_empty() {
        return Ok(object);
    }
    let mut object = object;
    // The object as each webhook last left it, to know whom a later change must reinvoke.
    let mut seen_after: Vec<Value> = Vec::with_capacity(calls.len());
    for call in &calls {
        object = call_one(services, call, kind, object).await?;
        seen_after.push(object.clone());
    }
    for (call, after) in calls.iter().zip(&seen_after) {
        if call.webhook["reinvocationPolicy"] == "IfNeeded" && *after != object {
            object = call_one(services, call, kind, object).await?;
        }
    }
    Ok(object)
}

async fn call_one(
    services: &ServiceDirectory,
    call: &Call,
    kind: &ResourceKind,
    object: Value,
) -> Result<Value, ApiError> {
    let fail_closed = call.webhook["failurePolicy"].as_str() != Some("Ignore");
    let timeout = Duration::from_secs(call.webhook["timeoutSeconds"].as_u64().unwrap_or(10));
    let uid = format!("{:016x}{:016x}", random_u64(), random_u64());
    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
            "resource": {"group": kind.group, "version": kind.version, "resource": kind.plural},
            "requestKind": {"group": kind.group, "version": kind.version, "kind": kind.kind},
            "requestResource": {"group": kind.group, "version": kind.version, "resource": kind.plural},
            "name": name_of(&object),
            "namespace": object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "gpufair-standin-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    });
    let outcome = tokio::time::timeout(timeout, send_review(services, &call.webhook, &review))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "context deadline exceeded after {}s",
                timeout.as_secs()
            ))
        });
    let response = match outcome {
        Ok(response) => response,
        Err(err) if fail_closed => {
            return Err(ApiError::internal(format!(
                "Internal error occurred: failed calling webhook \"{}\": failed to call webhook: {err}",
                call.name
            )));
        }
        Err(err) => {
            tracing::warn!(webhook = %call.name, %err, "webhook call failed; failurePolicy Ignore");
            return Ok(object);
        }
    };
    apply_response(call, &uid, object, &response, fail_closed)
}

/// Why a webhook's answer was not applied.
enum Refusal {
    /// The webhook refused the object: the request fails whatever the failure policy.
    Denied(ApiError),
    /// The answer is unusable: the failure policy decides.
    Broken(String),
}

fn apply_response(
    call: &Call,
    uid: &str,
    object: Value,
    review: &Value,
    fail_closed: bool,
) -> Result<Value, ApiError> {
    match interpret(call, uid, &object, review) {
        Ok(Some(patched)) => Ok(patched),
        Ok(None) => Ok(object),
        Err(Refusal::Denied(error)) => Err(error),
        Err(Refusal::Broken(message)) if fail_closed => Err(ApiError::internal(format!(
            "Internal error occurred: failed calling webhook \"{}\": {message}",
            call.name
        ))),
        Err(Refusal::Broken(message)) => {
            tracing::warn!(webhook = %call.name, %message, "unusable webhook answer; failurePolicy Ignore");
            Ok(object)
        }
    }
}

/// The patched object, `None` for an allowed request without a patch.
fn interpret(
    call: &Call,
    uid: &str,
    object: &Value,
    review: &Value,
) -> Result<Option<Value>, Refusal> {
    let response = &review["response"];
    if review["apiVersion"] != "admission.k8s.io/v1" || review["kind"] != "AdmissionReview" {
        return Err(Refusal::Broken(
            "expected response.apiVersion admission.k8s.io/v1 and kind AdmissionReview".into(),
        ));
    }
    if response["uid"] != uid {
        return Err(Refusal::Broken(format!(
            "expected response.uid={uid:?}, got {}",
            response["uid"]
        )));
    }
    if response["allowed"] != true {
        let result = &response["status"];
        let code = result["code"]
            .as_u64()
            .filter(|c| (400..600).contains(c))
            .unwrap_or(400) as u16;
        let message = result["message"].as_str().unwrap_or_default();
        let mut error = ApiError::bad_request(format!(
            "admission webhook \"{}\" denied the request: {message}",
            call.name
        ));
        error.code = code;
        if code == 403 {
            error.reason = "Forbidden";
        }
        return Err(Refusal::Denied(error));
    }
    let Some(patch) = response["patch"].as_str() else {
        return Ok(None);
    };
    if response["patchType"] != "JSONPatch" {
        return Err(Refusal::Broken(format!(
            "unsupported patchType {}",
            response["patchType"]
        )));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .map_err(|err| Refusal::Broken(format!("patch is not base64: {err}")))?;
    let patch: json_patch::Patch = serde_json::from_slice(&bytes)
        .map_err(|err| Refusal::Broken(format!("patch is not a JSON patch: {err}")))?;
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &patch)
        .map_err(|err| Refusal::Broken(format!("the returned patch does not apply: {err}")))?;
    Ok(Some(patched))
}

/// Where to connect, the TLS name to check, and the request path.
fn endpoint(
    services: &ServiceDirectory,
    client: &Value,
) -> Result<(Option<SocketAddr>, String, u16, String), String> {
    if let Some(url) = client["url"].as_str() {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| format!("clientConfig.url {url:?} is not a URL: {e}"))?;
        if uri.scheme_str() != Some("https") {
            return Err(format!("clientConfig.url {url:?} must use https"));
        }
        let host = uri
            .host()
            .ok_or_else(|| format!("clientConfig.url {url:?} has no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let path = uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_else(|| "/".into());
        return Ok((None, host, port, path));
    }
    let service = &client["service"];
    let namespace = service["namespace"].as_str().unwrap_or_default();
    let name = service["name"].as_str().unwrap_or_default();
    let port = service["port"].as_u64().unwrap_or(443) as u16;
    let path = service["path"].as_str().unwrap_or("/").to_string();
    let address = services.lookup(namespace, name, port).ok_or_else(|| {
        format!("service \"{namespace}/{name}\" port {port} has no endpoints (register its address with the stand-in)")
    })?;
    Ok((Some(address), format!("{name}.{namespace}.svc"), port, path))
}

async fn send_review(
    services: &ServiceDirectory,
    webhook: &Value,
    review: &Value,
) -> Result<Value, String> {
    let client = &webhook["clientConfig"];
    let bundle = client["caBundle"].as_str().unwrap_or_default();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle)
        .map_err(|e| format!("caBundle is not base64: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("caBundle is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("caBundle certificate refused: {e}"))?;
    }
    if roots.is_empty() {
        return Err(
            "clientConfig.caBundle holds no certificate; the stand-in trusts only the caBundle"
                .into(),
        );
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let (address, host, port, path) = endpoint(services, client)?;
    let address = match address {
        Some(address) => address,
        None => tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host} resolves to no address"))?,
    };
    let tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| format!("dial tcp {address}: {e}"))?;
    let server_name =
        ServerName::try_from(host.clone()).map_err(|e| format!("bad server name {host}: {e}"))?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server_name, tcp)
        .await
        .map_err(|e| format!("tls: {e}"))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
    let request = http::Request::builder()
        .method("POST")
        .uri(path.clone())
        .header("host", format!("{host}:{port}"))
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "{path} answered {status}: {}",
            String::from_utf8_lossy(&body)
        ));
    }
    serde_json::from_slice(&body).map_err(|e| format!("response is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::standin::resources::Registry;

    #[test]
    fn rules_match_the_deploy_configuration() {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/base/mutatingwebhook.yaml"
        ))
        .unwrap();
        let config: Value = serde_yaml::from_str(&text).unwrap();
        let webhook = &config["webhooks"][0];
        let registry = Registry::builtin();
        let pods = registry.find("", "v1", "pods").unwrap();
        let nodes = registry.find("", "v1", "nodes").unwrap();
        assert!(rules_match(webhook, &pods, "CREATE"));
        assert!(!rules_match(webhook, &pods, "UPDATE"));
        assert!(!rules_match(webhook, &nodes, "CREATE"));
    }
}
