//! `gpufair-certs apply` against a mock API server: the kube client is built on a tower service
//! that hands each request to the test (the pattern of kube-rs's tower-test examples, written
//! with a channel so the tests do not pull tokio's test-util into the dependency tree). Every
//! request the command makes is checked, answered, and counted, so "idempotent" means "made no
//! write at all".

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use gpufair_api::access::Scope;
use gpufair_certs::apply::{ApplyError, ApplyOptions, SecretAction, apply};
use gpufair_certs::kube_api::CALLS;
use gpufair_certs::{CertificateAuthority, service_dns_names};
use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const DAY: Duration = Duration::from_secs(86_400);
const SECRET_PATH: &str = "/api/v1/namespaces/gpufair-system/secrets/gpufair-webhook-tls";
const SECRETS_PATH: &str = "/api/v1/namespaces/gpufair-system/secrets";
const WEBHOOK_PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpufair";

fn options() -> ApplyOptions {
    ApplyOptions {
        namespace: "gpufair-system".into(),
        secret: "gpufair-webhook-tls".into(),
        webhook_configuration: "gpufair".into(),
        service: "gpufair-webhook".into(),
        extra_names: vec![],
        renew_before: 30 * DAY,
        days: 365,
        ca_days: 3650,
    }
}

/// One expected request and the answer to give.
struct Exchange {
    method: Method,
    path: &'static str,
    status: StatusCode,
    /// Builds the response body from the request body.
    respond: Box<dyn FnOnce(Value) -> Value + Send>,
}

fn exchange(
    method: Method,
    path: &'static str,
    status: StatusCode,
    respond: impl FnOnce(Value) -> Value + Send + 'static,
) -> Exchange {
    Exchange {
        method,
        path,
        status,
        respond: Box::new(respond),
    }
}

/// Whether a request is one of those `kube_api::CALLS` declares: its verb, group, resource,
/// scope and name, read from the method and path.
fn declared(method: &Method, path: &str) -> bool {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return false,
    };
    let (scope, rest) = match rest {
        ["namespaces", "gpufair-system", rest @ ..] => (Scope::InstallNamespace, rest),
        ["namespaces", ..] => return false,
        rest => (Scope::Cluster, rest),
    };
    let (resource, name) = match rest {
        [resource] => (*resource, None),
        [resource, name] => (*resource, Some(*name)),
        _ => return false,
    };
    let verb = match (method.as_str(), name) {
        ("GET", Some(_)) => "get",
        ("GET", None) => "list",
        ("POST", None) => "create",
        ("PUT", Some(_)) => "update",
        ("PATCH", Some(_)) => "patch",
        ("DELETE", Some(_)) => "delete",
        _ => return false,
    };
    CALLS.iter().any(|call| {
        call.scope == scope
            && call.group == group
            && call.resource == resource
            && call.verb == verb
            && (call.names.is_empty() || name.is_some_and(|n| call.names.contains(&n)))
    })
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})
}

/// Runs `apply` against a mock server that expects exactly `script`, in order; returns the
/// result and the request bodies seen.
async fn run(
    script: Vec<Exchange>,
) -> (
    Result<gpufair_certs::apply::ApplyReport, ApplyError>,
    Vec<Value>,
) {
    let (service, mut requests) = mock_service();
    let server = tokio::spawn(async move {
        let mut bodies = Vec::new();
        for step in script {
            let (request, send) = requests.recv().await.unwrap_or_else(|| {
                panic!(
                    "expected {} {} but the client stopped",
                    step.method, step.path
                )
            });
            assert_eq!(request.method(), step.method, "{}", request.uri());
            assert_eq!(request.uri().path(), step.path);
            assert!(
                declared(request.method(), request.uri().path()),
                "{} {} is not in kube_api::CALLS",
                request.method(),
                request.uri()
            );
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body: Value = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap()
            };
            bodies.push(body.clone());
            let answer = (step.respond)(body);
            let response = Response::builder()
                .status(step.status)
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap();
            let _ = send.send(response);
        }
        // Nothing more: a further request here would be an unexpected write. The channel
        // closes when the client, and with it the service, is dropped.
        if let Some((request, _)) = requests.recv().await {
            panic!("unexpected request {} {}", request.method(), request.uri());
        }
        bodies
    });
    let client = Client::new(service, "default");
    let result = apply(client, &options(), SystemTime::now()).await;
    let bodies = server.await.unwrap();
    (result, bodies)
}

type Pending = (Request<Body>, oneshot::Sender<Response<Body>>);

/// A tower service for `kube::Client::new` that passes each request, with a way to answer it,
/// to the receiver.
fn mock_service() -> (
    impl tower::Service<
        Request<Body>,
        Response = Response<Body>,
        Error = BoxError,
        Future = impl Send + 'static,
    > + Send
    + 'static,
    mpsc::UnboundedReceiver<Pending>,
) {
    let (sender, receiver) = mpsc::unbounded_channel::<Pending>();
    let service = tower::service_fn(move |request: Request<Body>| {
        let sender = sender.clone();
        async move {
            let (respond, response) = oneshot::channel();
            sender
                .send((request, respond))
                .map_err(|_| BoxError::from("the mock server has stopped"))?;
            response
                .await
                .map_err(|_| BoxError::from("the mock server dropped the request"))
        }
    });
    (service, receiver)
}

fn webhook_configuration(ca_bundle: Option<&str>) -> Value {
    let mut client_config = json!({"service": {"name": "gpufair-webhook", "namespace": "gpufair-system", "path": "/mutate"}});
    if let Some(bundle) = ca_bundle {
        client_config["caBundle"] = json!(BASE64.encode(bundle));
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "gpufair", "resourceVersion": "7"},
        "webhooks": [
            {"name": "other.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
             "clientConfig": {"url": "https://example.com/"}},
            {"name": "pods.gpufair.io", "admissionReviewVersions": ["v1"], "sideEffects": "None",
             "clientConfig": client_config}
        ]
    })
}

fn tls_secret(days: u32) -> (Value, String) {
    let names = service_dns_names("gpufair-webhook", "gpufair-system");
    let ca = CertificateAuthority::generate("test CA", 3650).unwrap();
    let serving = ca.issue_serving(&names, days).unwrap();
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": "gpufair-webhook-tls", "namespace": "gpufair-system", "resourceVersion": "41"},
        "data": {
            "ca.crt": BASE64.encode(ca.cert_pem()),
            "tls.crt": BASE64.encode(&serving.cert_pem),
            "tls.key": BASE64.encode(&serving.key_pem),
        }
    });
    (secret, ca.cert_pem())
}

fn decoded(data: &Value, key: &str) -> String {
    String::from_utf8(BASE64.decode(data[key].as_str().unwrap()).unwrap()).unwrap()
}

fn ders(pem: &str) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.unwrap().as_ref().to_vec())
        .collect()
}

/// The JSON patch sent for the caBundle: it tests the webhook at index 1 and adds the bundle.
fn patched_bundle(patch: &Value) -> String {
    let operations = patch.as_array().expect("a JSON patch");
    assert_eq!(operations.len(), 2, "{patch}");
    assert_eq!(operations[0]["op"], "test");
    assert_eq!(operations[0]["path"], "/webhooks/1/name");
    assert_eq!(operations[0]["value"], "pods.gpufair.io");
    assert_eq!(operations[1]["op"], "add");
    assert_eq!(operations[1]["path"], "/webhooks/1/clientConfig/caBundle");
    String::from_utf8(
        BASE64
            .decode(operations[1]["value"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap()
}

fn verify_for_every_service_name(secret_data: &Value) {
    let names = service_dns_names("gpufair-webhook", "gpufair-system");
    let data: BTreeMap<String, Vec<u8>> = ["ca.crt", "tls.crt", "tls.key"]
        .into_iter()
        .map(|k| (k.to_string(), decoded(secret_data, k).into_bytes()))
        .collect();
    assert!(matches!(
        gpufair_certs::check::judge(Some(&data), &names, SystemTime::now(), 300 * DAY),
        gpufair_certs::check::Verdict::Keep { .. }
    ));
}

#[tokio::test]
async fn creates_the_secret_and_patches_the_ca_bundle() {
    let (result, bodies) = run(vec![
        exchange(Method::GET, SECRET_PATH, StatusCode::NOT_FOUND, |_| {
            not_found()
        }),
        exchange(Method::POST, SECRETS_PATH, StatusCode::CREATED, |body| body),
        exchange(Method::GET, WEBHOOK_PATH, StatusCode::OK, |_| {
            webhook_configuration(None)
        }),
        exchange(Method::PATCH, WEBHOOK_PATH, StatusCode::OK, |_| {
            webhook_configuration(None)
        }),
    ])
    .await;
    let report = result.unwrap();
    assert_eq!(report.secret, SecretAction::Created);
    assert_eq!(report.patched_webhooks, ["pods.gpufair.io"]);
    let created = &bodies[1];
    assert_eq!(created["type"], "kubernetes.io/tls");
    assert_eq!(created["metadata"]["name"], "gpufair-webhook-tls");
    verify_for_every_service_name(&created["data"]);
    let bundle = patched_bundle(&bodies[3]);
    assert_eq!(ders(&bundle), ders(&decoded(&created["data"], "ca.crt")));
}

#[tokio::test]
async fn does_nothing_when_the_certificate_is_valid_and_trusted() {
    let (secret, ca) = tls_secret(365);
    let (result, _) = run(vec![
        exchange(Method::GET, SECRET_PATH, StatusCode::OK, move |_| secret),
        exchange(Method::GET, WEBHOOK_PATH, StatusCode::OK, move |_| {
            webhook_configuration(Some(&ca))
        }),
    ])
    .await;
    let report = result.unwrap();
    assert_eq!(report.secret, SecretAction::Unchanged);
    assert!(report.patched_webhooks.is_empty());
}

#[tokio::test]
async fn patches_a_missing_ca_bundle_without_touching_a_valid_secret() {
    let (secret, ca) = tls_secret(365);
    let (result, bodies) = run(vec![
        exchange(Method::GET, SECRET_PATH, StatusCode::OK, move |_| secret),
        exchange(Method::GET, WEBHOOK_PATH, StatusCode::OK, |_| {
            webhook_configuration(None)
        }),
        exchange(Method::PATCH, WEBHOOK_PATH, StatusCode::OK, |_| {
            webhook_configuration(None)
        }),
    ])
    .await;
    let report = result.unwrap();
    assert_eq!(report.secret, SecretAction::Unchanged);
    assert_eq!(ders(&patched_bundle(&bodies[2])), ders(&ca));
}

#[tokio::test]
async fn rotates_near_expiry_and_trusts_old_and_new_ca_meanwhile() {
    let (secret, old_ca) = tls_secret(10);
    let old_data = secret["data"].clone();
    let bundle_before = old_ca.clone();
    let (result, bodies) = run(vec![
        exchange(Method::GET, SECRET_PATH, StatusCode::OK, move |_| secret),
        exchange(Method::PUT, SECRET_PATH, StatusCode::OK, |body| body),
        exchange(Method::GET, WEBHOOK_PATH, StatusCode::OK, move |_| {
            webhook_configuration(Some(&bundle_before))
        }),
        exchange(Method::PATCH, WEBHOOK_PATH, StatusCode::OK, |_| {
            webhook_configuration(None)
        }),
    ])
    .await;
    let report = result.unwrap();
    let SecretAction::Rotated { reason } = &report.secret else {
        panic!("expected a rotation, got {:?}", report.secret);
    };
    assert!(reason.contains("does not verify"), "{reason}");
    let replaced = &bodies[1];
    assert_eq!(
        replaced["metadata"]["resourceVersion"], "41",
        "replaced at the version read, so a concurrent writer conflicts"
    );
    assert_ne!(replaced["data"]["tls.crt"], old_data["tls.crt"]);
    verify_for_every_service_name(&replaced["data"]);
    let bundle = ders(&patched_bundle(&bodies[3]));
    let new_ca = ders(&decoded(&replaced["data"], "ca.crt"));
    assert_eq!(bundle, [new_ca, ders(&old_ca)].concat());
}

#[tokio::test]
async fn errors_name_the_object_and_the_fix() {
    let (result, _) = run(vec![exchange(
        Method::GET,
        SECRET_PATH,
        StatusCode::OK,
        |_| {
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": "gpufair-webhook-tls", "namespace": "gpufair-system"}})
        },
    )])
    .await;
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("gpufair-system/gpufair-webhook-tls")
            && message.contains("delete the Secret"),
        "{message}"
    );

    let (secret, _) = tls_secret(365);
    let (result, _) = run(vec![
        exchange(Method::GET, SECRET_PATH, StatusCode::OK, move |_| secret),
        exchange(Method::GET, WEBHOOK_PATH, StatusCode::NOT_FOUND, |_| {
            not_found()
        }),
    ])
    .await;
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("MutatingWebhookConfiguration gpufair does not exist"),
        "{message}"
    );

    let (result, _) = run(vec![exchange(Method::GET, SECRET_PATH, StatusCode::FORBIDDEN, |_| {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
               "message": "secrets \"gpufair-webhook-tls\" is forbidden"})
    })])
    .await;
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("reading Secret gpufair-system/gpufair-webhook-tls")
            && message.contains("ClusterRole"),
        "{message}"
    );

    let (secret, _) = tls_secret(365);
    let (result, _) = run(vec![
        exchange(Method::GET, SECRET_PATH, StatusCode::OK, move |_| secret),
        exchange(Method::GET, WEBHOOK_PATH, StatusCode::OK, |_| {
            let mut configuration = webhook_configuration(None);
            configuration["webhooks"][1]["clientConfig"]["service"]["name"] = json!("elsewhere");
            configuration
        }),
    ])
    .await;
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("calls Service gpufair-system/gpufair-webhook"),
        "{message}"
    );
}
