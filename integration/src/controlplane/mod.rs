//! A real Kubernetes control plane for the end-to-end tests: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler built from their Go modules, and kwok playing the
//! nodes' kubelets. Every program is a child process on loopback ports with a throwaway data
//! directory; dropping the [`ControlPlane`] stops them all.
//!
//! kube-apiserver runs as envtest runs it, plus RBAC with a static admin token, service-account
//! keys (so the TokenRequest API issues tokens for gpufair's ServiceAccounts) and an audit log
//! of every request at `Metadata` level, which [`audit`] reads.

pub mod audit;
pub mod binaries;
pub mod kwok;
pub mod pki;
pub mod process;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

pub use binaries::{Binaries, BinariesError};
use pki::Credentials;
use process::{Process, free_port};

#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error(transparent)]
    Binaries(#[from] BinariesError),
    #[error("{name}: {message}")]
    Start { name: String, message: String },
    #[error("{what} not ready within {timeout:?}: {detail}")]
    NotReady {
        what: String,
        timeout: Duration,
        detail: String,
    },
    #[error("kube client: {0}")]
    Kube(#[from] kube::Error),
    #[error("kubectl {args}: {message}")]
    Kubectl { args: String, message: String },
}

/// What to start beyond the defaults.
#[derive(Debug, Clone)]
pub struct ControlPlaneOptions {
    /// kube-apiserver's watch cache. Off, watches read etcd directly, so an etcd compaction
    /// answers a watch from an older revision with 410 Gone at once.
    pub watch_cache: bool,
    /// `--max-requests-inflight` and `--max-mutating-requests-inflight`.
    pub max_requests_inflight: u32,
}

impl Default for ControlPlaneOptions {
    fn default() -> Self {
        Self {
            watch_cache: true,
            max_requests_inflight: 800,
        }
    }
}

/// kube-controller-manager's controllers the cases need: budgets' status (disruption), owner
/// clean-up, namespaces, the `default` ServiceAccount and root CA of each namespace, the
/// aggregated `view`/`edit`/`admin` roles, the not-ready taint's removal (node lifecycle),
/// typeChecking of ValidatingAdmissionPolicies, and owned pods.
pub const CONTROLLERS: &[&str] = &[
    "disruption-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    "node-lifecycle-controller",
    "validatingadmissionpolicy-status-controller",
    "replicaset-controller",
    "deployment-controller",
    "job-controller",
    "pod-garbage-collector-controller",
];

/// A running control plane.
pub struct ControlPlane {
    pub binaries: Binaries,
    pub credentials: Credentials,
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    pub etcd_url: String,
    pub admin_kubeconfig: PathBuf,
    pub audit_log: PathBuf,
    pub etcd: Process,
    pub apiserver: Process,
    pub controller_manager: Process,
    pub scheduler: Process,
    pub kwok: Process,
    /// From each kube-apiserver restart until it was ready again: while its RBAC caches fill,
    /// the new server refuses requests its roles allow.
    pub apiserver_warm_ups: Vec<(jiff::Timestamp, jiff::Timestamp)>,
    dir: tempfile::TempDir,
}

fn arg(name: &str, value: impl std::fmt::Display) -> String {
    format!("--{name}={value}")
}

fn path_arg(name: &str, value: &Path) -> String {
    arg(name, value.display())
}

/// Every request at `Metadata` level: user, verb, resource, subresource and response code,
/// without bodies. Logged once, when the response is complete.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
";

impl ControlPlane {
    /// Starts everything and waits until kube-apiserver is ready, the `default` namespace and
    /// its ServiceAccount exist, and the scheduler and kwok run.
    pub async fn start(options: ControlPlaneOptions) -> Result<ControlPlane, ControlPlaneError> {
        let binaries = Binaries::locate()?;
        let dir = tempfile::Builder::new()
            .prefix("gpufair-controlplane-")
            .tempdir()
            .map_err(|e| ControlPlaneError::Start {
                name: "control plane".into(),
                message: format!("temporary directory: {e}"),
            })?;
        let root = dir.path();
        let credentials = Credentials::generate(root)?;

        let etcd_port = free_port()?;
        let peer_port = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = Process::start(
            "etcd",
            &binaries.etcd,
            vec![
                arg("name", "e2e"),
                path_arg("data-dir", &root.join("etcd")),
                arg("listen-client-urls", &etcd_url),
                arg("advertise-client-urls", &etcd_url),
                arg("listen-peer-urls", &peer_url),
                arg("initial-advertise-peer-urls", &peer_url),
                arg("initial-cluster", format!("e2e={peer_url}")),
                arg("unsafe-no-fsync", true),
                arg("log-level", "warn"),
            ],
            Vec::new(),
            root.join("etcd.log"),
        )?;

        let secure_port = free_port()?;
        let server = format!("https://127.0.0.1:{secure_port}");
        let audit_policy = root.join("audit-policy.yaml");
        let audit_log = root.join("audit.log");
        pki::write_kubeconfig(&audit_policy, AUDIT_POLICY)?;
        let inflight = options.max_requests_inflight;
        let apiserver = Process::start(
            "kube-apiserver",
            &binaries.kube_apiserver,
            vec![
                arg("etcd-servers", &etcd_url),
                arg("bind-address", "127.0.0.1"),
                arg("advertise-address", "127.0.0.1"),
                // The `kubernetes` Service's endpoints may not name a loopback address.
                arg("endpoint-reconciler-type", "none"),
                arg("secure-port", secure_port),
                path_arg("cert-dir", &root.join("apiserver-certs")),
                path_arg("tls-cert-file", &credentials.serving_cert),
                path_arg("tls-private-key-file", &credentials.serving_key),
                path_arg("client-ca-file", &credentials.ca_file),
                arg("service-cluster-ip-range", "10.0.0.0/24"),
                arg("allow-privileged", true),
                arg("authorization-mode", "RBAC"),
                path_arg("token-auth-file", &credentials.token_file),
                arg(
                    "service-account-issuer",
                    "https://kubernetes.default.svc.cluster.local",
                ),
                path_arg(
                    "service-account-key-file",
                    &credentials.service_account_public_key,
                ),
                path_arg(
                    "service-account-signing-key-file",
                    &credentials.service_account_key,
                ),
                path_arg("audit-policy-file", &audit_policy),
                path_arg("audit-log-path", &audit_log),
                arg("audit-log-format", "json"),
                arg("audit-log-mode", "blocking"),
                arg("watch-cache", options.watch_cache),
                arg("max-requests-inflight", inflight),
                arg("max-mutating-requests-inflight", inflight / 2),
                arg("profiling", false),
                arg("v", 1),
            ],
            Vec::new(),
            root.join("kube-apiserver.log"),
        )?;

        let admin_kubeconfig = root.join("admin.kubeconfig");
        pki::write_kubeconfig(
            &admin_kubeconfig,
            &pki::kubeconfig(
                &server,
                &credentials.ca.cert_pem(),
                pki::ADMIN_USER,
                &credentials.admin_token,
            ),
        )?;

        let mut plane = ControlPlane {
            binaries: binaries.clone(),
            server,
            etcd_url,
            admin_kubeconfig: admin_kubeconfig.clone(),
            audit_log,
            etcd,
            apiserver,
            // Started below, once the API server answers.
            controller_manager: Process::not_started("kube-controller-manager"),
            scheduler: Process::not_started("kube-scheduler"),
            kwok: Process::not_started("kwok"),
            credentials,
            apiserver_warm_ups: Vec::new(),
            dir,
        };
        plane.wait_apiserver_ready(Duration::from_secs(90)).await?;

        let root = plane.dir.path().to_path_buf();
        plane.controller_manager = Process::start(
            "kube-controller-manager",
            &binaries.kube_controller_manager,
            vec![
                path_arg("kubeconfig", &admin_kubeconfig),
                path_arg("authentication-kubeconfig", &admin_kubeconfig),
                path_arg("authorization-kubeconfig", &admin_kubeconfig),
                arg("leader-elect", false),
                arg("bind-address", "127.0.0.1"),
                arg("secure-port", free_port()?),
                path_arg("cert-dir", &root.join("kcm-certs")),
                arg("controllers", CONTROLLERS.join(",")),
                path_arg(
                    "service-account-private-key-file",
                    &plane.credentials.service_account_key,
                ),
                path_arg("root-ca-file", &plane.credentials.ca_file),
                // Pods of a kwok node that stops heartbeating are left alone: the cases that
                // cut a node off assert on gpufair, not on taint-based eviction.
                arg("node-monitor-grace-period", "60s"),
                arg("v", 1),
            ],
            Vec::new(),
            root.join("kube-controller-manager.log"),
        )?;
        // kube-scheduler's client defaults (50 requests/s, bursts of 100) would make binding
        // the bottleneck of any burst of pods; clusters that schedule hundreds of pods a second
        // raise them, as this does.
        let scheduler_config = root.join("kube-scheduler.yaml");
        pki::write_kubeconfig(
            &scheduler_config,
            &format!(
                "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: {}
  qps: 1000
  burst: 2000
leaderElection:
  leaderElect: false
",
                admin_kubeconfig.display()
            ),
        )?;
        plane.scheduler = Process::start(
            "kube-scheduler",
            &binaries.kube_scheduler,
            vec![
                path_arg("config", &scheduler_config),
                path_arg("authentication-kubeconfig", &admin_kubeconfig),
                path_arg("authorization-kubeconfig", &admin_kubeconfig),
                arg("bind-address", "127.0.0.1"),
                arg("secure-port", free_port()?),
                path_arg("cert-dir", &root.join("scheduler-certs")),
                arg("v", 1),
            ],
            Vec::new(),
            root.join("kube-scheduler.log"),
        )?;
        plane.kwok = kwok::start(&binaries, &admin_kubeconfig, &root)?;
        plane
            .wait_default_service_account(Duration::from_secs(60))
            .await?;
        Ok(plane)
    }

    /// A kube-rs client with the admin's token.
    pub async fn client(&self) -> Result<Client, ControlPlaneError> {
        client_from(&self.admin_kubeconfig).await
    }

    pub fn kubeconfig_path(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// The directory the control plane keeps its files in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Polls `/readyz` until it answers 200.
    pub async fn wait_apiserver_ready(
        &mut self,
        timeout: Duration,
    ) -> Result<(), ControlPlaneError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.apiserver.exited() {
                return Err(ControlPlaneError::Start {
                    name: "kube-apiserver".into(),
                    message: format!("exited ({status}):\n{}", self.apiserver.log_tail(30)),
                });
            }
            let last = match self.readyz().await {
                Ok(()) => return Ok(()),
                Err(detail) => detail,
            };
            if tokio::time::Instant::now() > deadline {
                return Err(ControlPlaneError::NotReady {
                    what: "kube-apiserver".into(),
                    timeout,
                    detail: format!("{last}\n{}", self.apiserver.log_tail(30)),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn readyz(&self) -> Result<(), String> {
        let client = self.client().await.map_err(|e| e.to_string())?;
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let text = client
            .request_text(request)
            .await
            .map_err(|e| e.to_string())?;
        if text.trim() == "ok" {
            Ok(())
        } else {
            Err(text)
        }
    }

    async fn wait_default_service_account(
        &mut self,
        timeout: Duration,
    ) -> Result<(), ControlPlaneError> {
        let client = self.client().await?;
        let accounts: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
            kube::Api::namespaced(client, "default");
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if accounts.get_opt("default").await?.is_some() {
                return Ok(());
            }
            if let Some(status) = self.controller_manager.exited() {
                return Err(ControlPlaneError::Start {
                    name: "kube-controller-manager".into(),
                    message: format!(
                        "exited ({status}):\n{}",
                        self.controller_manager.log_tail(30)
                    ),
                });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ControlPlaneError::NotReady {
                    what: "the default ServiceAccount (kube-controller-manager)".into(),
                    timeout,
                    detail: self.controller_manager.log_tail(30),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Writes a kubeconfig at `path` holding a token from the TokenRequest API for
    /// ServiceAccount `namespace/name`, valid for four hours.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        path: &Path,
    ) -> Result<(), ControlPlaneError> {
        self.service_account_kubeconfig_at(namespace, name, path, &self.server)
            .await
    }

    /// The same kubeconfig for another address of the API server (a proxy in front of it
    /// serving a certificate of the same CA).
    pub async fn service_account_kubeconfig_at(
        &self,
        namespace: &str,
        name: &str,
        path: &Path,
        server: &str,
    ) -> Result<(), ControlPlaneError> {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        let client = self.client().await?;
        let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client, namespace);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: Vec::new(),
                expiration_seconds: Some(4 * 3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let token = accounts
            .create_token_request(name, &Default::default(), &request)
            .await?;
        let token = token
            .status
            .map(|s| s.token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ControlPlaneError::Start {
                name: format!("token for {namespace}/{name}"),
                message: "TokenRequest answered without a token".into(),
            })?;
        pki::write_kubeconfig(
            path,
            &pki::kubeconfig(
                server,
                &self.credentials.ca.cert_pem(),
                &format!("{namespace}-{name}"),
                &token,
            ),
        )
    }

    /// Runs kubectl against this control plane as the admin, with `stdin` as its input.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Result<String, ControlPlaneError> {
        run_kubectl(&self.binaries.kubectl, &self.admin_kubeconfig, args, stdin)
    }

    /// `kubectl apply --server-side --force-conflicts -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<String, ControlPlaneError> {
        self.kubectl(
            &[
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=gpufair-e2e",
                "-f",
                "-",
            ],
            Some(yaml),
        )
    }

    /// The last lines of every component's log, for failure messages.
    pub fn logs(&self, lines: usize) -> String {
        [
            &self.etcd,
            &self.apiserver,
            &self.controller_manager,
            &self.scheduler,
            &self.kwok,
        ]
        .iter()
        .map(|p| format!("--- {} ---\n{}\n", p.name, p.log_tail(lines)))
        .collect()
    }

    /// kube-apiserver SIGKILLed and started again with the same flags; waits until ready.
    pub async fn restart_apiserver(&mut self, down_for: Duration) -> Result<(), ControlPlaneError> {
        self.apiserver.kill();
        tokio::time::sleep(down_for).await;
        let restarted = jiff::Timestamp::now();
        self.apiserver.restart()?;
        self.wait_apiserver_ready(Duration::from_secs(90)).await?;
        self.apiserver_warm_ups
            .push((restarted, jiff::Timestamp::now()));
        Ok(())
    }

    /// Whether `at` falls while a restarted kube-apiserver was not yet ready.
    pub fn while_apiserver_warmed_up(&self, at: jiff::Timestamp) -> bool {
        self.apiserver_warm_ups
            .iter()
            .any(|(from, to)| (*from..=*to).contains(&at))
    }

    /// etcd stopped (SIGTERM) and started again on the same data directory; waits until
    /// kube-apiserver is ready again.
    pub async fn restart_etcd(&mut self, down_for: Duration) -> Result<(), ControlPlaneError> {
        self.etcd.terminate(Duration::from_secs(10)).await;
        tokio::time::sleep(down_for).await;
        self.etcd.restart()?;
        self.wait_apiserver_ready(Duration::from_secs(90)).await
    }

    /// Waits (60 s at most) until every CustomResourceDefinition is established, so its kinds
    /// are served.
    pub fn wait_crds_established(&self) -> Result<String, ControlPlaneError> {
        self.kubectl(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd",
                "--all",
            ],
            None,
        )
    }

    /// Compacts etcd's history up to its current revision (through etcd's JSON gateway), so
    /// any watch or list from an older resourceVersion is answered 410 Gone.
    pub async fn compact_etcd(&self) -> Result<u64, ControlPlaneError> {
        let status = etcd_post(&self.etcd_url, "/v3/kv/range", r#"{"key":"AA=="}"#).await?;
        let revision: u64 = status["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| ControlPlaneError::Start {
                name: "etcd".into(),
                message: format!("no revision in {status}"),
            })?;
        etcd_post(
            &self.etcd_url,
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )
        .await?;
        Ok(revision)
    }
}

/// A kube-rs client from a kubeconfig file.
pub async fn client_from(path: &Path) -> Result<Client, ControlPlaneError> {
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| ControlPlaneError::Start {
        name: "kubeconfig".into(),
        message: format!("{}: {e}", path.display()),
    })?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| ControlPlaneError::Start {
            name: "kubeconfig".into(),
            message: format!("{}: {e}", path.display()),
        })?;
    Ok(Client::try_from(config)?)
}

/// Runs `kubectl` with `--kubeconfig`, returning stdout, or stderr as the error.
pub fn run_kubectl(
    kubectl: &Path,
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> Result<String, ControlPlaneError> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let failed = |message: String| ControlPlaneError::Kubectl {
        args: args.join(" "),
        message,
    };
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", kubeconfig.parent().unwrap_or(Path::new("/tmp")))
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("could not run {}: {e}", kubectl.display())))?;
    if let Some(text) = stdin
        && let Some(mut input) = child.stdin.take()
    {
        input
            .write_all(text.as_bytes())
            .map_err(|e| failed(format!("stdin: {e}")))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| failed(e.to_string()))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(failed(format!(
            "{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )))
    }
}

/// `kubectl kustomize DIR`: the real renderer, no API server needed.
pub fn kustomize(dir: &Path) -> Result<String, ControlPlaneError> {
    let binaries = Binaries::locate()?;
    let output = std::process::Command::new(&binaries.kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .map_err(|e| ControlPlaneError::Kubectl {
            args: format!("kustomize {}", dir.display()),
            message: e.to_string(),
        })?;
    if !output.status.success() {
        return Err(ControlPlaneError::Kubectl {
            args: format!("kustomize {}", dir.display()),
            message: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// One POST to etcd's gRPC-JSON gateway.
async fn etcd_post(
    base: &str,
    path: &str,
    body: &str,
) -> Result<serde_json::Value, ControlPlaneError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let failed = |message: String| ControlPlaneError::Start {
        name: format!("etcd {path}"),
        message,
    };
    let address = base.trim_start_matches("http://");
    let mut tcp = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes())
        .await
        .map_err(|e| failed(e.to_string()))?;
    let mut response = String::new();
    tcp.read_to_string(&mut response)
        .await
        .map_err(|e| failed(e.to_string()))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| failed(format!("no HTTP answer: {response}")))?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(failed(head.lines().next().unwrap_or_default().to_string()));
    }
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    serde_json::from_str(body.trim()).map_err(|e| failed(format!("{e}: {body}")))
}

/// The payload of an HTTP/1.1 chunked body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}
