//! `gpufair-certs apply` end to end: a small stateful stand-in for the two API objects it
//! touches (the TLS Secret and the MutatingWebhookConfiguration), the Secret projected into a
//! directory the way kubelet does it (timestamped directory, `..data` symlink swapped
//! atomically), the real webhook binary serving those files, and a client that trusts exactly
//! the caBundle `apply` patched in, connecting by each of the Service's DNS names as the API
//! server would. A rotation must reach the running webhook without a restart, and the API
//! server's bundle must trust the webhook before, during and after it.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use gpufair_certs::apply::{ApplyOptions, SecretAction, apply};
use gpufair_certs::service_dns_names;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_rustls::TlsConnector;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const NAMESPACE: &str = "gpufair-system";
const SECRET: &str = "gpufair-webhook-tls";

/// The API objects `apply` reads and writes, with the API server's rules for them: create
/// fails if the Secret exists, replace fails on a stale resourceVersion, patches are JSON
/// patches applied to the stored object.
#[derive(Default)]
struct Store {
    secret: Option<Value>,
    webhook_configuration: Value,
    writes: usize,
}

fn status(code: StatusCode, reason: &str) -> (StatusCode, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
               "code": code.as_u16(), "message": reason}),
    )
}

impl Store {
    fn handle(&mut self, method: &Method, path: &str, body: Value) -> (StatusCode, Value) {
        let secrets = format!("/api/v1/namespaces/{NAMESPACE}/secrets");
        let secret = format!("{secrets}/{SECRET}");
        let configuration =
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpufair";
        match (method.as_str(), path) {
            ("GET", p) if p == secret => match &self.secret {
                Some(s) => (StatusCode::OK, s.clone()),
                None => status(StatusCode::NOT_FOUND, "NotFound"),
            },
            ("POST", p) if p == secrets => {
                if self.secret.is_some() {
                    return status(StatusCode::CONFLICT, "AlreadyExists");
                }
                let mut created = body;
                created["metadata"]["resourceVersion"] = json!("1");
                self.secret = Some(created.clone());
                self.writes += 1;
                (StatusCode::CREATED, created)
            }
            ("PUT", p) if p == secret => {
                let Some(stored) = &self.secret else {
                    return status(StatusCode::NOT_FOUND, "NotFound");
                };
                let version = &stored["metadata"]["resourceVersion"];
                if body["metadata"]["resourceVersion"] != *version {
                    return status(StatusCode::CONFLICT, "Conflict");
                }
                let next: u64 = version.as_str().unwrap().parse::<u64>().unwrap() + 1;
                let mut replaced = body;
                replaced["metadata"]["resourceVersion"] = json!(next.to_string());
                self.secret = Some(replaced.clone());
                self.writes += 1;
                (StatusCode::OK, replaced)
            }
            ("GET", p) if p == configuration => {
                (StatusCode::OK, self.webhook_configuration.clone())
            }
            ("PATCH", p) if p == configuration => {
                let patch: json_patch::Patch = serde_json::from_value(body).unwrap();
                let mut patched = self.webhook_configuration.clone();
                if json_patch::patch(&mut patched, &patch).is_err() {
                    return status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid");
                }
                self.webhook_configuration = patched.clone();
                self.writes += 1;
                (StatusCode::OK, patched)
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
        }
    }

    fn ca_bundle(&self) -> String {
        let encoded = self.webhook_configuration["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .expect("caBundle patched in");
        String::from_utf8(BASE64.decode(encoded).unwrap()).unwrap()
    }
}

/// A kube client whose requests are answered by `store`.
fn client(store: Arc<Mutex<Store>>) -> kube::Client {
    type Pending = (Request<Body>, oneshot::Sender<Response<Body>>);
    let (sender, mut receiver) = mpsc::unbounded_channel::<Pending>();
    tokio::spawn(async move {
        while let Some((request, respond)) = receiver.recv().await {
            let method = request.method().clone();
            let path = request.uri().path().to_string();
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, answer) = store.lock().unwrap().handle(&method, &path, body);
            let _ = respond.send(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
    });
    let service = tower::service_fn(move |request: Request<Body>| {
        let sender = sender.clone();
        async move {
            let (respond, response) = oneshot::channel();
            sender
                .send((request, respond))
                .map_err(|_| BoxError::from("the stand-in has stopped"))?;
            response
                .await
                .map_err(|_| BoxError::from("the stand-in dropped the request"))
        }
    });
    kube::Client::new(service, "default")
}

/// Projects the Secret's data into `dir` as kubelet does: the files live in a fresh
/// timestamped directory, `..data` points at it and is swapped by an atomic rename, and each
/// key is a symlink through `..data`.
fn project(dir: &Path, secret: &Value, generation: u32) {
    let target = format!("..{generation}");
    let fresh = dir.join(&target);
    std::fs::create_dir_all(&fresh).unwrap();
    for (key, value) in secret["data"].as_object().unwrap() {
        std::fs::write(
            fresh.join(key),
            BASE64.decode(value.as_str().unwrap()).unwrap(),
        )
        .unwrap();
    }
    let link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    std::fs::rename(&link, dir.join("..data")).unwrap();
    for key in secret["data"].as_object().unwrap().keys() {
        let path = dir.join(key);
        if std::fs::symlink_metadata(&path).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(key), &path).unwrap();
        }
    }
}

struct Webhook {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_webhook(tls: &Path, queues: &Path) -> Webhook {
    let binary = gpufair_integration::binary("gpufair-webhook");
    let mut child = Command::new(binary)
        .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
        .args([
            "--metrics-listen",
            "127.0.0.1:0",
            "--reload-interval",
            "0.1s",
        ])
        .arg("--tls-cert")
        .arg(tls.join("tls.crt"))
        .arg("--tls-key")
        .arg(tls.join("tls.key"))
        .arg("--queues-file")
        .arg(queues)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpufair-webhook");
    let stderr = child.stderr.take().unwrap();
    let logs = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = logs.clone();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(entry) = serde_json::from_str::<Value>(&line)
                && entry["fields"]["message"] == "gpufair-webhook serving"
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(entry["fields"]["listen"].as_str().unwrap_or("").to_string());
            }
            sink.lock().unwrap().push(line);
        }
    });
    let listen = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("webhook did not start: {:?}", logs.lock().unwrap()));
    Webhook {
        child,
        addr: listen.parse().unwrap(),
    }
}

/// A TLS handshake with the webhook by DNS name `name`, trusting only the PEM `bundle`.
async fn handshake(addr: SocketAddr, bundle: &str, name: &str) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(bundle.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(name.to_string()).unwrap(), tcp)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

fn options(renew_before: Duration) -> ApplyOptions {
    ApplyOptions {
        namespace: NAMESPACE.into(),
        secret: SECRET.into(),
        webhook_configuration: "gpufair".into(),
        service: "gpufair-webhook".into(),
        extra_names: vec![],
        renew_before,
        days: 365,
        ca_days: 3650,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_keeps_and_rotates_what_the_running_webhook_serves() {
    let store = Arc::new(Mutex::new(Store {
        webhook_configuration: json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "gpufair"},
            "webhooks": [{"name": "pods.gpufair.io", "admissionReviewVersions": ["v1"],
                          "sideEffects": "None",
                          "clientConfig": {"service": {"name": "gpufair-webhook",
                                                       "namespace": NAMESPACE, "path": "/mutate"}}}]
        }),
        ..Store::default()
    }));
    let month = Duration::from_secs(30 * 86_400);

    let report = apply(client(store.clone()), &options(month), SystemTime::now())
        .await
        .unwrap();
    assert_eq!(report.secret, SecretAction::Created);
    let dir = tempfile::tempdir().unwrap();
    let tls = dir.path().join("tls");
    std::fs::create_dir(&tls).unwrap();
    let first_secret = store.lock().unwrap().secret.clone().unwrap();
    project(&tls, &first_secret, 1);
    let queues = dir.path().join("queues.yaml");
    std::fs::write(
        &queues,
        "apiVersion: gpufair.io/v1alpha1\nkind: Queue\nmetadata: {name: q}\nspec: {}\n",
    )
    .unwrap();
    let mut webhook = start_webhook(&tls, &queues);
    let first_bundle = store.lock().unwrap().ca_bundle();
    for name in service_dns_names("gpufair-webhook", NAMESPACE) {
        handshake(webhook.addr, &first_bundle, &name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(
        handshake(webhook.addr, &first_bundle, "gpufair-webhook.other.svc")
            .await
            .is_err()
    );

    // Idempotent: a second run writes nothing.
    let writes = store.lock().unwrap().writes;
    let report = apply(client(store.clone()), &options(month), SystemTime::now())
        .await
        .unwrap();
    assert_eq!(report.secret, SecretAction::Unchanged);
    assert!(report.patched_webhooks.is_empty());
    assert_eq!(store.lock().unwrap().writes, writes);

    // A threshold beyond the certificate's life forces a rotation.
    let report = apply(
        client(store.clone()),
        &options(400 * 86_400 * Duration::from_secs(1)),
        SystemTime::now(),
    )
    .await
    .unwrap();
    assert!(
        matches!(report.secret, SecretAction::Rotated { .. }),
        "{report:?}"
    );
    let (second_secret, both) = {
        let store = store.lock().unwrap();
        (store.secret.clone().unwrap(), store.ca_bundle())
    };
    let new_ca = String::from_utf8(
        BASE64
            .decode(second_secret["data"]["ca.crt"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_ne!(
        second_secret["data"]["tls.crt"],
        first_secret["data"]["tls.crt"]
    );
    // Before kubelet has projected the new Secret, the patched bundle still trusts the webhook.
    handshake(webhook.addr, &both, "gpufair-webhook.gpufair-system.svc")
        .await
        .unwrap();
    project(&tls, &second_secret, 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        // The bundle trusts the webhook throughout the switch.
        handshake(webhook.addr, &both, "gpufair-webhook.gpufair-system.svc")
            .await
            .unwrap();
        if handshake(webhook.addr, &new_ca, "gpufair-webhook.gpufair-system.svc")
            .await
            .is_ok()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the webhook never served the rotated certificate"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        handshake(
            webhook.addr,
            &first_bundle,
            "gpufair-webhook.gpufair-system.svc"
        )
        .await
        .is_err(),
        "the old CA alone no longer verifies: the new certificate is being served"
    );
    assert!(webhook.child.try_wait().unwrap().is_none(), "no restart");
}
