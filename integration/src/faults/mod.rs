//! A fault-injecting proxy in front of kube-apiserver. It listens on 127.0.0.1 over HTTPS
//! (a serving certificate from the control plane's CA, so a kubeconfig for it differs from
//! the API server's only in its address) and forwards every request to the API server as is
//! (the client's bearer token included, bodies streamed so watches work), except those an
//! armed [`FaultRule`] hits: those get a 500, a 429 with `Retry-After`, a delay, a 410 Gone
//! (a Status, or for a watch an ERROR event), a 409 Conflict, or a watch cut short. Every
//! answer it makes up is a Kubernetes `Status`. gpufair's replicas go through it when a
//! cluster is started with `ClusterOptions::fault_proxy`; the harness, the scheduler and the
//! rest of the control plane talk to the API server directly.

mod proxy;
pub mod request;
pub mod rules;
pub mod status;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use gpufair_certs::CertificateAuthority;
use tokio::task::JoinHandle;

pub use request::{Target, target};
pub use rules::{Fault, FaultRule, Verb};

#[derive(Debug, thiserror::Error)]
pub enum FaultProxyError {
    #[error("fault proxy certificate: {0}")]
    Certs(#[from] gpufair_certs::CertError),
    #[error("fault proxy TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("fault proxy PEM: {0}")]
    Pem(#[from] rustls::pki_types::pem::Error),
    #[error("fault proxy: {0}")]
    Io(#[from] std::io::Error),
    #[error("fault proxy: upstream {0} is not https://IP:PORT")]
    Upstream(String),
}

/// A running proxy; dropping it stops it (open connections end with it).
pub struct FaultProxy {
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    pub address: SocketAddr,
    state: Arc<proxy::State>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`https://127.0.0.1:PORT`, serving a certificate of `ca`),
    /// serving a certificate of `ca` for 127.0.0.1 itself.
    pub async fn start(
        ca: &CertificateAuthority,
        upstream: &str,
    ) -> Result<FaultProxy, FaultProxyError> {
        let (state, listener, acceptor) = proxy::State::new(ca, upstream).await?;
        let address = listener.local_addr()?;
        let state = Arc::new(state);
        let task = tokio::spawn(proxy::serve(Arc::clone(&state), listener, acceptor));
        Ok(FaultProxy {
            url: format!("https://{address}"),
            address,
            state,
            task,
        })
    }

    /// Arms a rule: the next `rule.remaining` matching requests get its fault.
    pub fn arm(&self, rule: FaultRule) {
        self.state.rules.arm(rule);
    }

    /// Disarms every rule (faults already under way, a delay or a cut watch, go on).
    pub fn clear(&self) {
        self.state.rules.clear();
    }

    /// Requests the armed rules may still hit.
    pub fn remaining(&self) -> usize {
        self.state.rules.remaining()
    }

    /// Every fault injected so far: (resource, verb, fault).
    pub fn injected(&self) -> Vec<(String, Verb, Fault)> {
        self.state.rules.injected()
    }

    /// Ends every watch open now: each client sees its stream end and must watch again.
    pub fn drop_all_watches(&self) {
        self.state.drop_watches.send_modify(|n| *n += 1);
    }

    /// Watches open through the proxy now.
    pub fn open_watches(&self) -> i64 {
        self.state.counters.open_watches.load(Ordering::Relaxed)
    }

    /// Watches the proxy has ended (dropped or cut).
    pub fn watches_cut(&self) -> u64 {
        self.state.counters.watches_cut.load(Ordering::Relaxed)
    }

    /// 410 Gone answers the API server itself gave (410 Statuses, and ERROR events with a 410
    /// Status on watches) that passed through.
    pub fn gone_from_server(&self) -> u64 {
        self.state.counters.gone_from_server.load(Ordering::Relaxed)
    }

    /// Requests received so far.
    pub fn requests(&self) -> u64 {
        self.state.counters.requests.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
        // Connections in flight notice through their watch drops.
        self.drop_all_watches();
    }
}
