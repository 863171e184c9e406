//! End-to-end tests of `gpufair-webhook serve`: the real binary, fresh certificates, HTTPS with
//! a client that trusts only the test CA, and pods shaped as the API server sends them.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gpufair_certs::{CertificateAuthority, ServingCertificate, write_atomically, write_bundle};
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::core::v1::Pod;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

const QUEUES: &str = r#"apiVersion: gpufair.io/v1alpha1
kind: Queue
metadata: {name: research}
spec:
  weight: 2
  namespaces: [ml, shared]
  nodePool:
    matchLabels: {gpufair.io/pool: a100}
  priorityClasses: [research-high]
---
apiVersion: gpufair.io/v1alpha1
kind: Queue
metadata: {name: serving}
spec:
  namespaces: [web]
"#;

const GATE: &str = "gpufair.io/admission";

// ---------- the server process ----------

struct Server {
    child: Child,
    addr: SocketAddr,
    metrics: SocketAddr,
    dir: tempfile::TempDir,
    ca: Arc<CertificateAuthority>,
    logs: Arc<Mutex<Vec<String>>>,
}

struct Options {
    queues: Option<&'static str>,
    config: Option<&'static str>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            queues: Some(QUEUES),
            config: None,
        }
    }
}

fn serving_cert(ca: &CertificateAuthority) -> ServingCertificate {
    ca.issue_serving(&["localhost".into(), "127.0.0.1".into()], 2)
        .unwrap()
}

impl Server {
    fn start(options: Options) -> Server {
        let binary = gpufair_integration::binary("gpufair-webhook");
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("gpufair test CA", 2).unwrap();
        let (cert, key) = write_bundle(dir.path(), &ca, &serving_cert(&ca)).unwrap();
        let queues = dir.path().join("queues.yaml");
        if let Some(text) = options.queues {
            std::fs::write(&queues, text).unwrap();
        }
        let mut command = Command::new(binary);
        command
            .args(["--log-format", "json", "serve", "--listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .arg("--tls-cert")
            .arg(&cert)
            .arg("--tls-key")
            .arg(&key)
            .arg("--queues-file")
            .arg(&queues)
            // The SIGTERM test reads readiness and sends a review within the shutdown delay;
            // two seconds leave room for a loaded machine (other tests end by SIGKILL).
            .args(["--reload-interval", "0.1s", "--shutdown-delay", "2s"])
            .args(["--shutdown-grace", "5s"])
            .env("GPUFAIR_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(text) = options.config {
            let path = dir.path().join("config.yaml");
            std::fs::write(&path, text).unwrap();
            command.arg("--config").arg(path);
        }
        let mut child = command.spawn().expect("start gpufair-webhook");
        let stderr = child.stderr.take().unwrap();
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = logs.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(entry) = serde_json::from_str::<Value>(&line) {
                    let fields = &entry["fields"];
                    if fields["message"] == "gpufair-webhook serving"
                        && let Some(tx) = tx.take()
                    {
                        let listen = fields["listen"].as_str().unwrap_or("").to_string();
                        let metrics = fields["metrics"].as_str().unwrap_or("").to_string();
                        let _ = tx.send((listen, metrics));
                    }
                }
                sink.lock().unwrap().push(line);
            }
        });
        let (listen, metrics) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("server did not start: {:?}", logs.lock().unwrap()));
        Server {
            child,
            addr: listen.parse().unwrap(),
            metrics: metrics.parse().unwrap(),
            dir,
            ca: Arc::new(ca),
            logs,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------- an HTTPS client that trusts only the test CA ----------

fn client_config(
    ca: &CertificateAuthority,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
        .unwrap();
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

async fn tls_connect(
    addr: SocketAddr,
    config: rustls::ClientConfig,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// A keep-alive HTTP/1.1 connection over TLS.
struct Connection {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    peer_cert: Vec<u8>,
}

impl Connection {
    async fn open(addr: SocketAddr, ca: &CertificateAuthority) -> Connection {
        let stream = tls_connect(addr, client_config(ca, &[&rustls::version::TLS13]))
            .await
            .expect("TLS connection to the webhook");
        let peer_cert = stream.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(connection);
        Connection { sender, peer_cert }
    }

    async fn send(&mut self, method: &str, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = self.sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body.to_vec())
    }
}

async fn get_plain(addr: SocketAddr, path: &str) -> (u16, String) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = http::Request::builder()
        .uri(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Writes `head` and `body` on a fresh TLS connection (in the background, ignoring write errors:
/// the server may stop reading early) and returns the response head.
async fn raw_exchange(
    addr: SocketAddr,
    ca: &CertificateAuthority,
    head: String,
    body: Vec<u8>,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tls_connect(addr, client_config(ca, &[&rustls::version::TLS13]))
        .await
        .unwrap();
    let (mut reader, mut writer) = tokio::io::split(stream);
    let writing = tokio::spawn(async move {
        let _ = writer.write_all(head.as_bytes()).await;
        let _ = writer.write_all(&body).await;
        let _ = writer.flush().await;
        writer
    });
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        while !received.windows(4).any(|w| w == b"\r\n\r\n") {
            match reader.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    });
    read.await.expect("a response within 10 s");
    writing.abort();
    String::from_utf8_lossy(&received).into_owned()
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

// ---------- pods as the API server sends them ----------

fn container(name: &str, resources: Value) -> Value {
    json!({
        "name": name,
        "image": "registry.example.com/trainer:1.0",
        "resources": resources,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "volumeMounts": [{
            "name": "kube-api-access-x7k2p",
            "readOnly": true,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"
        }]
    })
}

fn gpu(resource: &str, count: &str) -> Value {
    json!({"limits": {resource: count}, "requests": {resource: count}})
}

/// A pod after the API server's defaulting and its admission plugins that run before webhooks
/// (ServiceAccount volume, DefaultTolerationSeconds, Priority with no class: priority 0).
fn api_server_pod(namespace: &str, labels: Value, containers: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer-0", "namespace": namespace, "labels": labels},
        "spec": {
            "volumes": [{"name": "kube-api-access-x7k2p", "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
                ],
                "defaultMode": 420
            }}],
            "containers": containers,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "priority": 0,
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {}
    })
}

fn train_pod(namespace: &str, labels: Value) -> Value {
    api_server_pod(
        namespace,
        labels,
        vec![container("main", gpu("nvidia.com/gpu", "1"))],
    )
}

fn review_body(kind: &str, operation: &str, namespace: &str, object: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": kind},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller", "groups": ["system:serviceaccounts"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    }))
    .unwrap()
}

/// The AdmissionReview response for `pod`, checked for the envelope every answer must have.
async fn admit(conn: &mut Connection, namespace: &str, pod: &Value) -> Value {
    let (status, body) = conn
        .send(
            "POST",
            "/mutate",
            review_body("Pod", "CREATE", namespace, pod),
        )
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let review: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    assert_eq!(
        review["response"]["uid"],
        "705ab4f5-6393-11e8-b7cc-42010a800002"
    );
    review["response"].clone()
}

/// Applies the response's patch to `pod`; returns the JSON and the typed Pod.
fn patched(pod: &Value, response: &Value) -> (Value, Pod) {
    assert_eq!(response["allowed"], true, "{response}");
    let mut doc = pod.clone();
    if let Some(encoded) = response.get("patch") {
        assert_eq!(response["patchType"], "JSONPatch");
        // Go's JSON decoder, which the API server uses, reads a []byte from either a base64
        // string or an array of numbers; kube's AdmissionResponse writes the latter.
        let bytes = match encoded {
            Value::String(text) => base64_decode(text),
            Value::Array(numbers) => numbers
                .iter()
                .map(|n| u8::try_from(n.as_u64().unwrap()).unwrap())
                .collect(),
            other => panic!("patch is neither base64 nor bytes: {other}"),
        };
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
    }
    let typed: Pod = serde_json::from_value(doc.clone()).expect("patched object is a valid Pod");
    (doc, typed)
}

fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0;
    for byte in text.bytes().filter(|b| *b != b'=') {
        let value = ALPHABET.iter().position(|a| *a == byte).expect("base64") as u32;
        buffer = (buffer << 6) | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
    }
    out
}

fn gates(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .unwrap()
        .scheduling_gates
        .iter()
        .flatten()
        .map(|g| g.name.clone())
        .collect()
}

fn required_terms(pod: &Pod) -> Vec<k8s_openapi::api::core::v1::NodeSelectorTerm> {
    pod.spec
        .as_ref()
        .unwrap()
        .affinity
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()
        .node_selector_terms
        .clone()
}

fn has_requirement(
    list: &Option<Vec<k8s_openapi::api::core::v1::NodeSelectorRequirement>>,
    key: &str,
    value: &str,
) -> bool {
    list.iter().flatten().any(|r| {
        r.key == key && r.operator == "In" && r.values.as_deref() == Some(&[value.to_string()][..])
    })
}

/// Sends the mutated pod again, as the API server does with `reinvocationPolicy: IfNeeded`.
async fn assert_reinvocation_is_empty(conn: &mut Connection, namespace: &str, mutated: &Value) {
    let again = admit(conn, namespace, mutated).await;
    assert_eq!(again["allowed"], true);
    assert!(
        again.get("patch").is_none(),
        "reinvocation patched again: {again}"
    );
}

// ---------- tests ----------

#[tokio::test]
async fn pod_shapes_are_mutated_correctly_and_idempotently() {
    let server = Server::start(Options::default());
    let mut conn = Connection::open(server.addr, &server.ca).await;

    // A Deployment's pod: generateName, ownerReferences, no name yet.
    let mut pod = train_pod(
        "ml",
        json!({"app": "trainer", "pod-template-hash": "7d9f8c"}),
    );
    pod["metadata"] = json!({
        "generateName": "trainer-7d9f8c-",
        "namespace": "ml",
        "labels": {"app": "trainer", "pod-template-hash": "7d9f8c", "ai-task-type": "train"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "trainer-7d9f8c",
            "uid": "a1b2c3", "controller": true, "blockOwnerDeletion": true}]
    });
    let response = admit(&mut conn, "ml", &pod).await;
    assert!(response.get("warnings").is_none());
    let (mutated, typed) = patched(&pod, &response);
    let spec = typed.spec.as_ref().unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("gpufair-elastic"));
    assert_eq!(
        spec.priority, None,
        "priority must go when the class is set"
    );
    assert_eq!(spec.preemption_policy, None);
    assert_eq!(gates(&typed), vec![GATE]);
    assert_eq!(spec.termination_grace_period_seconds, Some(300));
    let labels = typed.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["gpufair.io/managed"], "true");
    assert_eq!(labels["gpufair.io/queue"], "research");
    assert_eq!(labels["app"], "trainer");
    let annotations = typed.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["gpufair.io/tier"], "elastic");
    assert_eq!(
        typed.metadata.owner_references.as_ref().unwrap()[0].kind,
        "ReplicaSet"
    );
    let terms = required_terms(&typed);
    assert_eq!(terms.len(), 1);
    assert!(has_requirement(
        &terms[0].match_expressions,
        "gpufair.io/pool",
        "a100"
    ));
    let tolerations = spec.tolerations.as_ref().unwrap();
    assert_eq!(
        tolerations.len(),
        3,
        "default tolerations kept, GPU toleration added"
    );
    assert_eq!(tolerations[2].key.as_deref(), Some("nvidia.com/gpu"));
    assert_eq!(
        spec.volumes.as_ref().unwrap()[0].name,
        "kube-api-access-x7k2p"
    );
    assert_reinvocation_is_empty(&mut conn, "ml", &mutated).await;

    // Existing required affinity with two terms: the pool narrows both, no third term.
    let mut pod = train_pod("ml", json!({}));
    pod["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}]},
        {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["h100"]}]}
    ]}}});
    let response = admit(&mut conn, "ml", &pod).await;
    let (mutated, typed) = patched(&pod, &response);
    let terms = required_terms(&typed);
    assert_eq!(terms.len(), 2);
    assert!(has_requirement(
        &terms[0].match_expressions,
        "topology.kubernetes.io/zone",
        "zone-a"
    ));
    assert!(has_requirement(
        &terms[1].match_expressions,
        "gpu-type",
        "h100"
    ));
    for term in &terms {
        assert!(has_requirement(
            &term.match_expressions,
            "gpufair.io/pool",
            "a100"
        ));
    }
    assert_reinvocation_is_empty(&mut conn, "ml", &mutated).await;

    // A pod created with nodeName: the node moves into required affinity, the pod is gated.
    let mut pod = train_pod("ml", json!({}));
    pod["spec"]["nodeName"] = json!("gpu-node-17");
    let response = admit(&mut conn, "ml", &pod).await;
    let (mutated, typed) = patched(&pod, &response);
    assert_eq!(typed.spec.as_ref().unwrap().node_name, None);
    assert_eq!(gates(&typed), vec![GATE]);
    let terms = required_terms(&typed);
    assert_eq!(terms.len(), 1);
    assert!(has_requirement(
        &terms[0].match_fields,
        "metadata.name",
        "gpu-node-17"
    ));
    assert!(has_requirement(
        &terms[0].match_expressions,
        "gpufair.io/pool",
        "a100"
    ));
    assert_reinvocation_is_empty(&mut conn, "ml", &mutated).await;

    // Existing tolerations and a foreign scheduling gate are kept.
    let mut pod = train_pod("ml", json!({}));
    pod["spec"]["schedulingGates"] = json!([{"name": "example.com/quota-check"}]);
    pod["spec"]["tolerations"].as_array_mut().unwrap().push(
        json!({"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}),
    );
    let response = admit(&mut conn, "ml", &pod).await;
    let (mutated, typed) = patched(&pod, &response);
    assert_eq!(gates(&typed), vec!["example.com/quota-check", GATE]);
    let keys: Vec<_> = typed
        .spec
        .as_ref()
        .unwrap()
        .tolerations
        .iter()
        .flatten()
        .map(|t| t.key.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        keys,
        [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
            "dedicated",
            "nvidia.com/gpu"
        ]
    );
    assert_reinvocation_is_empty(&mut conn, "ml", &mutated).await;

    // Only an init container asks for a GPU: still a GPU pod. Several containers, one GPU.
    let mut pod = api_server_pod(
        "ml",
        json!({"ai-task-type": "processing"}),
        vec![
            container("main", json!({"requests": {"cpu": "2"}})),
            container("sidecar", json!({})),
        ],
    );
    pod["spec"]["initContainers"] = json!([container("warmup", gpu("nvidia.com/gpu", "1"))]);
    let response = admit(&mut conn, "ml", &pod).await;
    let (mutated, typed) = patched(&pod, &response);
    let spec = typed.spec.as_ref().unwrap();
    assert_eq!(
        spec.priority_class_name.as_deref(),
        Some("gpufair-backfill")
    );
    assert_eq!(
        spec.termination_grace_period_seconds,
        Some(30),
        "only train pods get longer grace"
    );
    assert_eq!(spec.containers.len(), 2);
    assert_reinvocation_is_empty(&mut conn, "ml", &mutated).await;

    // MIG slice for inference: realtime class and the MIG preference.
    let pod = api_server_pod(
        "web",
        json!({"ai-task-type": "inference"}),
        vec![
            container("server", gpu("nvidia.com/mig-1g.10gb", "1")),
            container("metrics", json!({"requests": {"cpu": "100m"}})),
        ],
    );
    let response = admit(&mut conn, "web", &pod).await;
    let (mutated, typed) = patched(&pod, &response);
    let spec = typed.spec.as_ref().unwrap();
    assert_eq!(
        spec.priority_class_name.as_deref(),
        Some("gpufair-realtime")
    );
    assert_eq!(
        typed.metadata.labels.as_ref().unwrap()["gpufair.io/queue"],
        "serving"
    );
    let preferred = spec
        .affinity
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .preferred_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap();
    assert_eq!(preferred.len(), 1);
    assert!(has_requirement(
        &preferred[0].preference.match_expressions,
        "nvidia.com/mig.capable",
        "true"
    ));
    assert!(
        spec.affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .is_none(),
        "serving has no node pool"
    );
    assert_reinvocation_is_empty(&mut conn, "web", &mutated).await;

    // A shared GPU slice with an explicit queue label and an allowed own priority class.
    let mut pod = api_server_pod(
        "shared",
        json!({"gpufair.io/queue": "research"}),
        vec![container("notebook", gpu("nvidia.com/gpu.shared", "1"))],
    );
    pod["spec"]["priorityClassName"] = json!("research-high");
    pod["spec"]["priority"] = json!(5000);
    let response = admit(&mut conn, "shared", &pod).await;
    let (mutated, typed) = patched(&pod, &response);
    let spec = typed.spec.as_ref().unwrap();
    assert_eq!(spec.priority_class_name.as_deref(), Some("research-high"));
    assert_eq!(
        spec.priority,
        Some(5000),
        "an allowed class keeps its resolved priority"
    );
    assert_eq!(gates(&typed), vec![GATE]);
    assert_reinvocation_is_empty(&mut conn, "shared", &mutated).await;

    // A CPU-only pod is returned unchanged, whatever its labels say.
    let pod = api_server_pod(
        "nowhere",
        json!({"ai-task-type": "bogus"}),
        vec![container(
            "web",
            json!({"requests": {"cpu": "1", "memory": "1Gi"}}),
        )],
    );
    let response = admit(&mut conn, "nowhere", &pod).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());

    let (status, metrics) = get_plain(server.metrics, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("gpufair_webhook_admission_requests_total{outcome=\"patched\"} 7"),
        "{metrics}"
    );
    assert!(metrics.contains("gpufair_webhook_admission_requests_total{outcome=\"unchanged\"} 7"));
    assert!(metrics.contains("gpufair_webhook_admission_duration_seconds_count"));
}

#[tokio::test]
async fn bad_input_is_denied_or_refused_and_never_breaks_the_server() {
    let server = Server::start(Options::default());
    let mut conn = Connection::open(server.addr, &server.ca).await;

    let denied: [(&str, Value, Value, &[&str]); 9] = [
        (
            "ml",
            json!({"deadline": "2024-13-45"}),
            json!({}),
            &["label deadline=\"2024-13-45\"", "YYYYMMDD"],
        ),
        (
            "ml",
            json!({}),
            json!({"gpufair.io/deadline": "next friday"}),
            &["annotation gpufair.io/deadline=\"next friday\"", "RFC 3339"],
        ),
        (
            "ml",
            json!({"ai-task-type": "training"}),
            json!({}),
            &[
                "ai-task-type=\"training\"",
                "train, inference or processing",
            ],
        ),
        (
            "ml",
            json!({"urgency-level": "asap"}),
            json!({}),
            &["urgency-level=\"asap\"", "high, medium or low"],
        ),
        (
            "ml",
            json!({"gpufair.io/pod-group": "allreduce"}),
            json!({"gpufair.io/min-member": "many"}),
            &["gpufair.io/min-member=\"many\"", "whole number"],
        ),
        (
            "ml",
            json!({}),
            json!({"gpufair.io/min-member": "4"}),
            &["gpufair.io/min-member", "gpufair.io/pod-group"],
        ),
        (
            "ml",
            json!({"gpufair.io/queue": "ghost"}),
            json!({}),
            &["gpufair.io/queue=\"ghost\"", "existing Queue"],
        ),
        (
            "ml",
            json!({"gpufair.io/queue": "serving"}),
            json!({}),
            &[
                "gpufair.io/queue=\"serving\"",
                "does not admit namespace \"ml\"",
            ],
        ),
        (
            "orphans",
            json!({}),
            json!({}),
            &["no Queue lists namespace \"orphans\"", "gpufair.io/queue"],
        ),
    ];
    for (namespace, labels, annotations, expected) in denied {
        let mut pod = train_pod(namespace, labels.clone());
        pod["metadata"]["annotations"] = annotations;
        let response = admit(&mut conn, namespace, &pod).await;
        assert_eq!(response["allowed"], false, "{labels}: {response}");
        assert!(response.get("patch").is_none());
        let message = response["status"]["message"].as_str().unwrap();
        for part in expected {
            assert!(
                message.contains(part),
                "{labels}: {message:?} lacks {part:?}"
            );
        }
    }

    // Self-promotion is refused.
    let mut pod = train_pod("ml", json!({}));
    pod["spec"]["priorityClassName"] = json!("gpufair-realtime");
    let response = admit(&mut conn, "ml", &pod).await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("research-high")
    );

    // A past deadline is admitted with a warning.
    let pod = train_pod("ml", json!({"deadline": "20200101"}));
    let response = admit(&mut conn, "ml", &pod).await;
    let (_, typed) = patched(&pod, &response);
    let warnings = response["warnings"].as_array().unwrap();
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .contains("2020-01-02T00:00:00Z has already passed")
    );
    assert_eq!(
        typed.metadata.annotations.unwrap()["gpufair.io/admitted-deadline"],
        "2020-01-02T00:00:00Z"
    );

    // Other kinds and operations pass unchanged.
    let pod = train_pod("ml", json!({"ai-task-type": "bogus"}));
    for (kind, operation) in [("Pod", "UPDATE"), ("Pod", "DELETE"), ("Service", "CREATE")] {
        let (status, body) = conn
            .send("POST", "/mutate", review_body(kind, operation, "ml", &pod))
            .await;
        assert_eq!(status, 200);
        let review: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(review["response"]["allowed"], true, "{kind} {operation}");
        assert!(review["response"].get("patch").is_none());
    }

    // Malformed bodies: 400 with a reason.
    for body in [
        &b"{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": "[..],
        b"",
        b"\xff\xfe\x00garbage",
        br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#,
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}"#,
    ] {
        let (status, reply) = conn.send("POST", "/mutate", body.to_vec()).await;
        assert_eq!(status, 400, "{:?}", String::from_utf8_lossy(body));
        assert!(!reply.is_empty(), "a 400 says why");
    }

    // Over 3 MiB: 413, whether the length is declared up front or only seen while reading.
    let declared = format!(
        "POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        4 * 1024 * 1024
    );
    let head = raw_exchange(server.addr, &server.ca, declared, vec![b' '; 64 * 1024]).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    let chunked = "POST /mutate HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n".to_string();
    let mut body = Vec::new();
    for _ in 0..49 {
        body.extend_from_slice(format!("{:x}\r\n", 64 * 1024).as_bytes());
        body.extend(std::iter::repeat_n(b' ', 64 * 1024));
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(b"0\r\n\r\n");
    let head = raw_exchange(server.addr, &server.ca, chunked, body).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");

    // Wrong method or path.
    let (status, _) = conn.send("GET", "/mutate", Vec::new()).await;
    assert_eq!(status, 405);
    let (status, _) = conn.send("POST", "/validate", Vec::new()).await;
    assert_eq!(status, 404);

    // A client that opens a connection and says nothing, and one that is not TLS at all, do
    // not stop others from being served.
    let _silent = TcpStream::connect(server.addr).await.unwrap();
    let mut plain = TcpStream::connect(server.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut plain, b"GET / HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut fresh = Connection::open(server.addr, &server.ca).await;
    let response = admit(&mut fresh, "ml", &train_pod("ml", json!({}))).await;
    assert_eq!(response["allowed"], true);
    let (status, _) = fresh.send("GET", "/healthz", Vec::new()).await;
    assert_eq!(status, 200);
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}

#[tokio::test]
async fn serves_tls_1_2_and_1_3_and_rejects_other_cas() {
    let server = Server::start(Options::default());
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let stream = tls_connect(server.addr, client_config(&server.ca, &[version]))
            .await
            .unwrap();
        assert_eq!(stream.get_ref().1.protocol_version(), Some(version.version));
    }
    let stranger = CertificateAuthority::generate("someone else", 1).unwrap();
    assert!(
        tls_connect(
            server.addr,
            client_config(&stranger, &[&rustls::version::TLS13])
        )
        .await
        .is_err()
    );
}

#[tokio::test]
async fn certificate_rotation_keeps_old_connections_and_refuses_broken_pairs() {
    let server = Server::start(Options::default());
    let mut old = Connection::open(server.addr, &server.ca).await;
    let first_cert = old.peer_cert.clone();

    // Rotate: key first, then certificate, as a non-atomic writer would.
    let second = serving_cert(&server.ca);
    write_atomically(&server.path("tls.key"), &second.key_pem, true).unwrap();
    write_atomically(&server.path("tls.crt"), &second.cert_pem, false).unwrap();
    let second_der = CertificateDer::from_pem_slice(second.cert_pem.as_bytes())
        .unwrap()
        .to_vec();
    let (addr, ca) = (server.addr, server.ca.clone());
    eventually("the new certificate to be served", async || {
        Connection::open(addr, &ca).await.peer_cert == second_der
    })
    .await;

    // The connection opened before the rotation still works.
    assert_eq!(old.peer_cert, first_cert);
    let response = admit(&mut old, "ml", &train_pod("ml", json!({}))).await;
    assert_eq!(response["allowed"], true);

    // A key that does not match the certificate is refused; the previous pair keeps serving.
    let stray = serving_cert(&server.ca);
    write_atomically(&server.path("tls.key"), &stray.key_pem, true).unwrap();
    let metrics_addr = server.metrics;
    eventually("the refused reload to be counted", async || {
        get_plain(metrics_addr, "/metrics")
            .await
            .1
            .contains("gpufair_webhook_tls_reloads_total{outcome=\"error\"}")
    })
    .await;
    let after = Connection::open(server.addr, &server.ca).await;
    assert_eq!(after.peer_cert, second_der);
    assert!(server.logs().contains("new certificate refused"));
}

#[tokio::test]
async fn readiness_waits_for_queues_and_config_reload_keeps_old_on_error() {
    let server = Server::start(Options {
        queues: None,
        config: Some("admission:\n  gate: example.com/first\n"),
    });
    let (status, body) = get_plain(server.metrics, "/readyz").await;
    assert_eq!((status, body.as_str()), (503, "queues not loaded yet\n"));
    let mut conn = Connection::open(server.addr, &server.ca).await;
    let (status, _) = conn.send("GET", "/readyz", Vec::new()).await;
    assert_eq!(status, 503);
    let (status, _) = conn.send("GET", "/healthz", Vec::new()).await;
    assert_eq!(status, 200);

    // A bad queues file does not make it ready; a good one does.
    std::fs::write(
        server.path("queues.yaml"),
        "kind: Queue\nspec: {weight: -1}\n",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(get_plain(server.metrics, "/readyz").await.0, 503);
    std::fs::write(server.path("queues.yaml"), QUEUES).unwrap();
    let metrics_addr = server.metrics;
    eventually("readiness", async || {
        get_plain(metrics_addr, "/readyz").await.0 == 200
    })
    .await;

    let pod = train_pod("ml", json!({}));
    let (_, typed) = patched(&pod, &admit(&mut conn, "ml", &pod).await);
    assert_eq!(gates(&typed), vec!["example.com/first"]);

    // An invalid config is refused and the old one stays.
    std::fs::write(
        server.path("config.yaml"),
        "admission:\n  gate: 'not a gate'\n",
    )
    .unwrap();
    eventually("the refused config to be counted", async || {
        get_plain(metrics_addr, "/metrics")
            .await
            .1
            .contains("gpufair_webhook_config_reloads_total{outcome=\"error\"} 1")
    })
    .await;
    let (_, typed) = patched(&pod, &admit(&mut conn, "ml", &pod).await);
    assert_eq!(gates(&typed), vec!["example.com/first"]);

    // A valid one takes effect.
    std::fs::write(
        server.path("config.yaml"),
        "admission:\n  gate: example.com/second\n",
    )
    .unwrap();
    eventually("the new config", async || {
        let (_, typed) = patched(&pod, &admit(&mut conn, "ml", &pod).await);
        gates(&typed) == vec!["example.com/second"]
    })
    .await;
}

#[tokio::test]
async fn sigterm_turns_readiness_off_then_exits_cleanly() {
    let mut server = Server::start(Options::default());
    let metrics_addr = server.metrics;
    eventually("readiness", async || {
        get_plain(metrics_addr, "/readyz").await.0 == 200
    })
    .await;
    let mut conn = Connection::open(server.addr, &server.ca).await;
    let status = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // During the shutdown delay the server is not ready but still answers.
    eventually("readiness off", async || {
        get_plain(metrics_addr, "/readyz").await.0 == 503
    })
    .await;
    let response = admit(&mut conn, "ml", &train_pod("ml", json!({}))).await;
    assert_eq!(response["allowed"], true);
    drop(conn);
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = server.child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "server did not exit: {}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit:?}");
}
