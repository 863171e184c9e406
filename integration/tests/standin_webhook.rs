//! The real `gpufair-webhook serve`, reading Queues through the stand-in with kube-rs, called by
//! the stand-in's admission for pods created with a kube-rs client: the gate, the priority
//! class and the node pool land on the stored pod, the priority is resolved from the class,
//! the scheduler leaves the gated pod alone and binds it once the gate is removed.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use gpufair_certs::{CertificateAuthority, write_bundle};
use gpufair_integration::standin::{NodeSpec, StandIn, StandInOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);
const GATE: &str = "gpufair.io/admission";

struct Webhook {
    child: Child,
    listen: String,
    metrics: String,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the webhook with the stand-in's kubeconfig and no queues file, so it watches Queues
/// through the stand-in.
fn start_webhook(standin: &StandIn, dir: &std::path::Path, ca: &CertificateAuthority) -> Webhook {
    let binary = gpufair_integration::binary("gpufair-webhook", "gpufair-webhook");
    let serving = ca
        .issue_serving(&["127.0.0.1".into(), "localhost".into()], 2)
        .unwrap();
    let (cert, key) = write_bundle(dir, ca, &serving).unwrap();
    let mut child = Command::new(binary)
        .args([
            "--log-format",
            "json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .args(["--shutdown-delay", "0s", "--shutdown-grace", "1s"])
        .env("KUBECONFIG", standin.kubeconfig_path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("GPUFAIR_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpufair-webhook");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(entry) = serde_json::from_str::<Value>(&line)
                && entry["fields"]["message"] == "gpufair-webhook serving"
                && let Some(tx) = tx.take()
            {
                let fields = &entry["fields"];
                let _ = tx.send((
                    fields["listen"].as_str().unwrap_or("").to_string(),
                    fields["metrics"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
    });
    let (listen, metrics) = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("webhook serving");
    Webhook {
        child,
        listen,
        metrics,
    }
}

/// `GET /readyz` on the metrics port: ready once the Queue watch through the stand-in synced.
async fn ready(metrics: &str) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut tcp) = tokio::net::TcpStream::connect(metrics).await else {
        return false;
    };
    let request = format!("GET /readyz HTTP/1.1\r\nhost: {metrics}\r\nconnection: close\r\n\r\n");
    if tcp.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut response = String::new();
    let _ = tcp.read_to_string(&mut response).await;
    response.starts_with("HTTP/1.1 200")
}

fn training_pod(namespace: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"generateName": "trainer-", "namespace": namespace, "labels": {"ai-task-type": "train"}},
        "spec": {"containers": [{"name": "main", "image": "trainer:1",
            "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn real_webhook_admits_pods_created_through_the_stand_in() {
    let standin = StandIn::start(StandInOptions::for_tests()).await.unwrap();
    let root = gpufair_integration::workspace_root();
    let classes = std::fs::read_to_string(root.join("deploy/base/priorityclasses.yaml")).unwrap();
    standin
        .create_yaml(&classes, "priorityclasses.yaml")
        .await
        .unwrap();
    standin.ensure_namespace("ml", &[]).await.unwrap();
    standin
        .ensure_namespace("skipped", &[("gpufair.io/webhook", "skip")])
        .await
        .unwrap();
    standin
        .create_queue("research", json!({"weight": 2, "namespaces": ["ml"], "nodePool": {"matchLabels": {"gpufair.io/pool": "a100"}}}))
        .await
        .unwrap();
    standin
        .add_node(
            NodeSpec::new("gpu-1")
                .gpus(4)
                .label("gpufair.io/pool", "a100"),
        )
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::generate("webhook test CA", 2).unwrap();
    let webhook = start_webhook(&standin, dir.path(), &ca);
    let deadline = std::time::Instant::now() + WAIT;
    while !ready(&webhook.metrics).await {
        assert!(
            std::time::Instant::now() < deadline,
            "webhook never became ready through the stand-in"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The MutatingWebhookConfiguration from deploy/base, pointed at the webhook process.
    let text = std::fs::read_to_string(root.join("deploy/base/mutatingwebhook.yaml")).unwrap();
    let mut configuration: Value = serde_yaml::from_str(&text).unwrap();
    configuration["webhooks"][0]["clientConfig"] = json!({
        "url": format!("https://{}/mutate", webhook.listen),
        "caBundle": base64::engine::general_purpose::STANDARD.encode(ca.cert_pem()),
    });
    standin.create(configuration).await.unwrap();

    let client = standin.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ml");
    let created = pods
        .create(&PostParams::default(), &training_pod("ml"))
        .await
        .unwrap();
    let name = created.metadata.name.clone().unwrap();
    assert!(
        name.starts_with("trainer-"),
        "name generated after admission: {name}"
    );
    let spec = created.spec.as_ref().unwrap();
    let gates: Vec<&str> = spec
        .scheduling_gates
        .iter()
        .flatten()
        .map(|g| g.name.as_str())
        .collect();
    assert_eq!(gates, [GATE]);
    assert_eq!(spec.priority_class_name.as_deref(), Some("gpufair-elastic"));
    assert_eq!(
        spec.priority,
        Some(100_000),
        "priority resolved from the class the webhook chose"
    );
    let labels = created.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["gpufair.io/managed"], "true");
    assert_eq!(labels["gpufair.io/queue"], "research");
    let terms = &spec
        .affinity
        .as_ref()
        .unwrap()
        .node_affinity
        .as_ref()
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap()
        .node_selector_terms;
    assert_eq!(
        terms[0].match_expressions.as_ref().unwrap()[0].key,
        "gpufair.io/pool"
    );

    // Gated: the scheduler leaves it alone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let still = pods.get(&name).await.unwrap();
    assert!(still.spec.unwrap().node_name.is_none());

    // Released as the controller releases: a JSON patch guarded by `test`.
    let release: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": GATE},
        {"op": "remove", "path": "/spec/schedulingGates/0"}
    ]))
    .unwrap();
    pods.patch(&name, &PatchParams::default(), &Patch::Json::<()>(release))
        .await
        .unwrap();
    let running = standin
        .wait_for("v1", "Pod", "ml", &name, WAIT, |p| {
            p.is_some_and(|p| p["status"]["phase"] == "Running")
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(running["spec"]["nodeName"], "gpu-1");

    // The namespaceSelector is honoured: a pod in a skipped namespace is not sent.
    let skipped: Api<Pod> = Api::namespaced(client.clone(), "skipped");
    let untouched = skipped
        .create(&PostParams::default(), &training_pod("skipped"))
        .await
        .unwrap();
    assert!(untouched.spec.unwrap().scheduling_gates.is_none());
    assert!(
        !untouched
            .metadata
            .labels
            .unwrap()
            .contains_key("gpufair.io/managed")
    );

    // failurePolicy Fail: with the webhook gone, pod creation is refused.
    drop(webhook);
    let refused = pods
        .create(&PostParams::default(), &training_pod("ml"))
        .await;
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 500);
            assert!(
                status
                    .message
                    .contains("failed calling webhook \"pods.gpufair.io\""),
                "{}",
                status.message
            );
        }
        other => panic!("expected the create to fail closed, got {other:?}"),
    }
}
