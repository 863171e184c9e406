//! Installing gpufair on a real API server.
//!
//! 1. `kubectl apply --server-side --dry-run=server -k` of deploy/base and of every overlay is
//!    accepted by kube-apiserver (schemas, defaulting, CEL of the admission policies, field
//!    ownership), once the CRDs the kustomizations create objects of are established: gpufair's
//!    own, and cert-manager's and the Prometheus Operator's from small fixtures.
//! 2. `gpufair-certs apply`, with the token of the `gpufair-certs` ServiceAccount deploy/base
//!    ships, creates and rotates the real TLS Secret and the real MutatingWebhookConfiguration's
//!    `caBundle`, and the webhook keeps answering throughout: the API server calls it through
//!    its Service (an ExternalName Service pointing at the local replica, so the API server
//!    verifies the certificate for the Service's DNS name against the bundle `gpufair-certs`
//!    wrote), the replica serves the Secret's files projected the way kubelet projects them and
//!    reloads them when they change, and GPU pods submitted all along are admitted gated.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use gpufair_integration::cluster::install::{WEBHOOK_CONFIGURATION, wait_admission_through};
use gpufair_integration::cluster::pods::gpu_pod;
use gpufair_integration::cluster::{ClusterOptions, NAMESPACE, Replica, ReplicaSettings};
use gpufair_integration::controlplane::{ControlPlane, ControlPlaneOptions, audit};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};

use crate::common::{check_audit, start, wait_until};

const CERTS_ACCOUNT: &str = "gpufair-certs";
const SECRET: &str = "gpufair-webhook-tls";
const SERVICE: &str = "gpufair-webhook";
const MWC: &str = "admissionregistration.k8s.io/v1";

fn fixture(name: &str) -> String {
    gpufair_integration::workspace_root()
        .join("integration/tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn deploy(dir: &str) -> String {
    gpufair_integration::workspace_root()
        .join("deploy")
        .join(dir)
        .display()
        .to_string()
}

pub async fn base_and_every_overlay_apply_server_side_dry_run() -> anyhow::Result<()> {
    let plane = ControlPlane::start(ControlPlaneOptions::default()).await?;
    // What has to exist before a dry run can be judged: the CRDs (a dry-run CRD does not make
    // its kind servable) and the install namespace (a dry-run Namespace holds nothing).
    for source in [
        deploy("crds"),
        fixture("cert-manager-crds.yaml"),
        fixture("prometheus-operator-crds.yaml"),
        deploy("base/namespace.yaml"),
    ] {
        let flag = if source.ends_with(".yaml") {
            "-f"
        } else {
            "-k"
        };
        plane.kubectl(&["apply", "--server-side", flag, &source], None)?;
    }
    plane.wait_crds_established()?;
    let mut overlays: Vec<String> =
        std::fs::read_dir(gpufair_integration::workspace_root().join("deploy/overlays"))?
            .map(|e| e.map(|e| format!("overlays/{}", e.file_name().to_string_lossy())))
            .collect::<Result<_, _>>()?;
    overlays.sort();
    let mut kustomizations = vec!["base".to_string()];
    kustomizations.extend(overlays);
    let mut failures = Vec::new();
    let mut applied = Vec::new();
    for kustomization in &kustomizations {
        let started = Instant::now();
        match plane.kubectl(
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "-k",
                &deploy(kustomization),
            ],
            None,
        ) {
            Ok(output) => {
                let objects = output
                    .lines()
                    .filter(|l| l.contains("(server dry run)"))
                    .count();
                ensure!(
                    objects > 10,
                    "deploy/{kustomization}: only {objects} objects in the dry run:\n{output}"
                );
                applied.push(format!(
                    "{kustomization} ({objects} objects, {:.1}s)",
                    started.elapsed().as_secs_f64()
                ));
            }
            Err(error) => failures.push(format!("deploy/{kustomization}: {error}")),
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
    println!("  server-side dry runs accepted: {}", applied.join(", "));
    Ok(())
}

/// Runs `gpufair-certs apply` with `kubeconfig` and the flags deploy/base's Job passes, and
/// `--renew-before` `renew_before`; returns its log.
fn certs_apply(kubeconfig: &Path, renew_before: &str) -> anyhow::Result<String> {
    let binary = gpufair_integration::binary("gpufair-certs");
    let output = std::process::Command::new(&binary)
        .args([
            "apply",
            "--secret=gpufair-webhook-tls",
            "--webhook-configuration=gpufair",
            "--service=gpufair-webhook",
        ])
        .arg(format!("--renew-before={renew_before}"))
        .env("KUBECONFIG", kubeconfig)
        .env("GPUFAIR_CERTS_NAMESPACE", NAMESPACE)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("RUST_LOG", "info")
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    ensure!(
        output.status.success(),
        "gpufair-certs apply --renew-before={renew_before} failed ({}):\n{log}",
        output.status
    );
    Ok(log)
}

/// Projects the Secret's data into `dir` as kubelet does: the files live in a fresh
/// timestamped directory, `..data` points at it and is swapped by an atomic rename, and each
/// key is a symlink through `..data`.
fn project(dir: &Path, secret: &Value, generation: u32) -> anyhow::Result<()> {
    let target = format!("..{generation}");
    let fresh = dir.join(&target);
    std::fs::create_dir_all(&fresh)?;
    let data = secret["data"].as_object().context("Secret data")?;
    for (key, value) in data {
        std::fs::write(
            fresh.join(key),
            BASE64.decode(value.as_str().unwrap_or_default())?,
        )?;
    }
    let link = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link)?;
    std::fs::rename(&link, dir.join("..data"))?;
    for key in data.keys() {
        let path = dir.join(key);
        if std::fs::symlink_metadata(&path).is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(key), &path)?;
        }
    }
    Ok(())
}

/// Whether a TLS handshake with `address` by DNS name `name` succeeds trusting only `bundle`.
async fn trusted(address: &str, bundle: &str, name: &str) -> bool {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(bundle.as_bytes()).flatten() {
        let _ = roots.add(cert);
    }
    let Ok(config) = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions() else {
        return false;
    };
    let config = config.with_root_certificates(roots).with_no_client_auth();
    let Ok(tcp) = tokio::net::TcpStream::connect(address).await else {
        return false;
    };
    let Ok(server) = ServerName::try_from(name.to_string()) else {
        return false;
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(server, tcp)
        .await
        .is_ok()
}

fn pem_certificates(pem: &str) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .flatten()
        .map(|c| c.as_ref().to_vec())
        .collect()
}

fn secret_file(secret: &Value, key: &str) -> anyhow::Result<String> {
    let encoded = secret["data"][key]
        .as_str()
        .with_context(|| format!("Secret key {key}"))?;
    Ok(String::from_utf8(BASE64.decode(encoded)?)?)
}

fn ca_bundle(configuration: &Value) -> anyhow::Result<String> {
    let encoded = configuration["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .context("caBundle")?;
    Ok(String::from_utf8(BASE64.decode(encoded)?)?)
}

pub async fn gpufair_certs_rotates_the_real_secret_and_ca_bundle_while_admission_goes_on()
-> anyhow::Result<()> {
    let mut cluster = start(ClusterOptions::default()).await?;
    cluster.queue("team", "team", json!({"weight": 1})).await?;
    let api = cluster.api.clone();
    let certs_kubeconfig = cluster.dir().join("certs.kubeconfig");
    cluster
        .plane
        .service_account_kubeconfig(NAMESPACE, CERTS_ACCOUNT, &certs_kubeconfig)
        .await?;

    // The API server reaches a Service through its ClusterIP, which nothing routes here; an
    // ExternalName Service of the same name resolves to the loopback replica instead, and the
    // API server still verifies the certificate for gpufair-webhook.gpufair-system.svc.
    let shipped = api
        .get("v1", "Service", NAMESPACE, SERVICE)
        .await?
        .context("deploy/base's Service")?;
    api.delete("v1", "Service", NAMESPACE, SERVICE, true)
        .await?;
    api.wait_for(
        "v1",
        "Service",
        NAMESPACE,
        SERVICE,
        Duration::from_secs(10),
        |s| s.is_none(),
    )
    .await?;
    api.create(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE,
            "labels": shipped["metadata"]["labels"].clone()},
        "spec": {"type": "ExternalName", "externalName": "localhost"}}))
        .await?;
    // The webhook calls the Service, as shipped (deploy/base's clientConfig, without the URL
    // the harness points at its first replica).
    let service_config =
        json!({"service": {"name": SERVICE, "namespace": NAMESPACE, "path": "/mutate"}});
    api.modify(
        MWC,
        "MutatingWebhookConfiguration",
        "",
        WEBHOOK_CONFIGURATION,
        |c| {
            c["webhooks"][0]["clientConfig"] = service_config.clone();
        },
    )
    .await?;

    // First run: the Secret is created and the caBundle written.
    let log = certs_apply(&certs_kubeconfig, "30d")?;
    ensure!(log.contains("created the TLS Secret"), "first run: {log}");
    let first = api
        .get("v1", "Secret", NAMESPACE, SECRET)
        .await?
        .context("the Secret gpufair-certs created")?;
    ensure!(first["type"] == "kubernetes.io/tls", "Secret type: {first}");
    let configuration = api
        .get(
            MWC,
            "MutatingWebhookConfiguration",
            "",
            WEBHOOK_CONFIGURATION,
        )
        .await?
        .context("the webhook configuration")?;
    let first_ca = secret_file(&first, "ca.crt")?;
    ensure!(
        pem_certificates(&ca_bundle(&configuration)?) == pem_certificates(&first_ca),
        "the caBundle is the Secret's CA"
    );

    // A replica serving the Secret's files, reloading them every 2 s (the binary's default).
    let tls = cluster.dir().join("tls");
    std::fs::create_dir_all(&tls)?;
    project(&tls, &first, 1)?;
    let settings = ReplicaSettings {
        tls_cert: tls.join("tls.crt"),
        tls_key: tls.join("tls.key"),
        ..cluster.settings.clone()
    };
    let replica = Replica::start(&settings, "replica-tls").await?;
    let port: u16 = replica
        .listen
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .with_context(|| format!("port of {}", replica.listen))?;
    let listen = replica.listen.clone();
    cluster.replicas.push(replica);
    let index = cluster.replicas.len() - 1;
    cluster.wait_ready(index).await?;
    api.modify(
        MWC,
        "MutatingWebhookConfiguration",
        "",
        WEBHOOK_CONFIGURATION,
        |c| {
            c["webhooks"][0]["clientConfig"]["service"]["port"] = json!(port);
        },
    )
    .await?;
    wait_admission_through(&api, &format!("Service {NAMESPACE}/{SERVICE} port {port}")).await?;
    let dns_name = format!("{SERVICE}.{NAMESPACE}.svc");
    ensure!(
        trusted(&listen, &first_ca, &dns_name).await,
        "the replica serves the first certificate"
    );

    // GPU pods all along, each of which must come back gated.
    let stop = Arc::new(AtomicBool::new(false));
    let submitter = {
        let api = api.clone();
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut outcomes: Vec<(String, Result<(), String>)> = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let name = format!("during-{i}");
                let outcome = match api.submit_pod(gpu_pod("team", &name, 1), Some(0.2)).await {
                    Ok(pod)
                        if pod["spec"]["schedulingGates"][0]["name"] == "gpufair.io/admission" =>
                    {
                        Ok(())
                    }
                    Ok(pod) => Err(format!("not gated: {pod}")),
                    Err(error) => Err(error.message()),
                };
                outcomes.push((name, outcome));
                i += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            outcomes
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Second run, with a threshold beyond the certificate's life: a rotation. The bundle
    // trusts the new CA and the old one, so the replica still serving the old certificate
    // stays trusted until it reloads.
    let rotated_at = Instant::now();
    let log = certs_apply(&certs_kubeconfig, "400d")?;
    ensure!(log.contains("rotated the TLS Secret"), "second run: {log}");
    let second = api
        .get("v1", "Secret", NAMESPACE, SECRET)
        .await?
        .context("the rotated Secret")?;
    ensure!(
        second["data"]["tls.crt"] != first["data"]["tls.crt"]
            && second["data"]["ca.crt"] != first["data"]["ca.crt"],
        "the rotation made a new CA and certificate"
    );
    let second_ca = secret_file(&second, "ca.crt")?;
    let configuration = api
        .get(
            MWC,
            "MutatingWebhookConfiguration",
            "",
            WEBHOOK_CONFIGURATION,
        )
        .await?
        .context("the webhook configuration")?;
    let bundle = pem_certificates(&ca_bundle(&configuration)?);
    let mut both = pem_certificates(&second_ca);
    both.extend(pem_certificates(&first_ca));
    ensure!(
        bundle == both,
        "the caBundle holds the new CA, then the old one"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    // kubelet projects the new Secret; the replica picks it up without a restart.
    project(&tls, &second, 2)?;
    let reloaded = wait_until(
        "the replica serving the rotated certificate",
        Duration::from_secs(20),
        || async {
            trusted(&listen, &second_ca, &dns_name)
                .await
                .then(Instant::now)
        },
    )
    .await?;
    ensure!(
        !trusted(&listen, &first_ca, &dns_name).await,
        "the old CA alone no longer verifies what the replica serves"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Third run: nothing to do, nothing written.
    let version = second["metadata"]["resourceVersion"].clone();
    let log = certs_apply(&certs_kubeconfig, "30d")?;
    ensure!(log.contains("kept it"), "third run: {log}");
    let third = api
        .get("v1", "Secret", NAMESPACE, SECRET)
        .await?
        .context("the Secret")?;
    ensure!(
        third["metadata"]["resourceVersion"] == version,
        "an unneeded run writes nothing"
    );

    stop.store(true, Ordering::Relaxed);
    let outcomes = submitter.await?;
    let failed: Vec<String> = outcomes
        .iter()
        .filter_map(|(name, outcome)| outcome.as_ref().err().map(|e| format!("{name}: {e}")))
        .collect();
    ensure!(
        failed.is_empty(),
        "GPU pods not admitted gated during the rotation:\n{}\n{}",
        failed.join("\n"),
        cluster.logs()
    );
    ensure!(
        outcomes.len() >= 10,
        "only {} pods submitted",
        outcomes.len()
    );
    ensure!(
        cluster.replicas[index].pid() > 0 && cluster.replicas[index].ready().await,
        "the replica ran throughout"
    );

    // Every write gpufair-certs made was its own ServiceAccount's, within its RBAC.
    let user = format!("system:serviceaccount:{NAMESPACE}:{CERTS_ACCOUNT}");
    let entries = audit::read(&cluster.plane.audit_log);
    let writes: Vec<String> = entries
        .iter()
        .filter(|e| e.user == user && e.verb != "get")
        .map(|e| format!("{} {} {} {}", e.verb, e.resource, e.name, e.code))
        .collect();
    let denied: Vec<&String> = writes.iter().filter(|w| w.ends_with("403")).collect();
    ensure!(denied.is_empty(), "gpufair-certs was refused: {denied:?}");
    let wanted = [
        ("create", "secrets", "", 201),
        ("update", "secrets", SECRET, 200),
        (
            "patch",
            "mutatingwebhookconfigurations",
            WEBHOOK_CONFIGURATION,
            200,
        ),
    ];
    for (verb, resource, name, code) in wanted {
        let found = entries.iter().any(|e| {
            e.user == user
                && e.verb == verb
                && e.resource == resource
                && (name.is_empty() || e.name == name)
                && e.code == code
        });
        if !found {
            bail!("no {verb} of {resource} {name} ({code}) by {user} in the audit log: {writes:?}");
        }
    }
    println!(
        "  {} GPU pods admitted gated across the rotation; replica reloaded {:.1}s after it",
        outcomes.len(),
        reloaded.duration_since(rotated_at).as_secs_f64()
    );
    // And what it did counts in the suite's comparison with deploy/'s grants, with the
    // replica's and the device plugins'.
    check_audit(&cluster)?;
    Ok(())
}
