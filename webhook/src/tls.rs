//! The serving certificate: loaded from PEM files, swapped atomically when they change.
//!
//! Each new connection takes the current `ServerConfig`; connections already open keep the one
//! they started with, so a rotation never drops an in-flight request. A pair that does not
//! load (unreadable, not PEM, key not matching the certificate) is refused and the old pair
//! stays in service.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::metrics::{Metrics, ReloadOutcome};
use crate::reload::{Fingerprint, fingerprint, watch_files};
use crate::shutdown::Shutdown;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} holds no PEM certificate: {message}")]
    NoCertificate { path: PathBuf, message: String },
    #[error("{path} holds no PEM private key: {message}")]
    NoKey { path: PathBuf, message: String },
    #[error("certificate {cert} and key {key} do not form a usable pair: {source}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

/// A rustls server config for the pair, TLS 1.2 and 1.3 only, ring provider, HTTP/2 and 1.1.
pub fn load_server_config(cert: &Path, key: &Path) -> Result<ServerConfig, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })
    };
    let cert_pem = read(cert)?;
    let key_pem = read(key)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|err| TlsError::NoCertificate {
            path: cert.to_path_buf(),
            message: err.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.to_path_buf(),
            message: "no CERTIFICATE block".into(),
        });
    }
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|err| TlsError::NoKey {
        path: key.to_path_buf(),
        message: err.to_string(),
    })?;
    let pair_error = |source| TlsError::Pair {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        source,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // `with_single_cert` also checks that the key belongs to the certificate.
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(pair_error)?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(pair_error)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The config new connections use.
pub struct TlsState {
    current: ArcSwap<ServerConfig>,
    cert: PathBuf,
    key: PathBuf,
    /// The files as they were just before `current` was read from them: the watcher starts
    /// from this, so a rotation between loading and watching is still seen.
    loaded_from: Fingerprint,
}

impl TlsState {
    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let paths = [cert.to_path_buf(), key.to_path_buf()];
        let loaded_from = fingerprint(&paths);
        Ok(Self {
            current: ArcSwap::from_pointee(load_server_config(cert, key)?),
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            loaded_from,
        })
    }

    pub fn current(&self) -> Arc<ServerConfig> {
        self.current.load_full()
    }

    /// Loads the pair again; on failure the old one stays.
    pub fn reload(&self, metrics: &Metrics) {
        match load_server_config(&self.cert, &self.key) {
            Ok(config) => {
                self.current.store(Arc::new(config));
                metrics.tls_reload(ReloadOutcome::Success);
                tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
            }
            Err(err) => {
                metrics.tls_reload(ReloadOutcome::Error);
                tracing::error!(error = %err, "new certificate refused; still serving the previous one");
            }
        }
    }

    /// Reloads whenever either file changes, until draining begins.
    pub async fn watch(
        self: Arc<Self>,
        metrics: Arc<Metrics>,
        interval: Duration,
        shutdown: Shutdown,
    ) {
        let paths = vec![self.cert.clone(), self.key.clone()];
        let initial = self.loaded_from.clone();
        watch_files(paths, interval, initial, shutdown, move || {
            self.reload(&metrics)
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpufair_certs::{CertificateAuthority, write_bundle};

    #[test]
    fn refuses_a_mismatched_pair_and_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("ca", 1).unwrap();
        let first = ca.issue_serving(&["localhost".into()], 1).unwrap();
        let (cert, key) = write_bundle(dir.path(), &ca, &first).unwrap();
        let state = TlsState::load(&cert, &key).unwrap();
        let before = state.current();
        let second = ca.issue_serving(&["localhost".into()], 1).unwrap();
        std::fs::write(&key, &second.key_pem).unwrap();
        let metrics = Metrics::new();
        state.reload(&metrics);
        assert!(Arc::ptr_eq(&before, &state.current()));
        assert!(
            metrics
                .encode()
                .contains("tls_reloads_total{outcome=\"error\"} 1")
        );
        std::fs::write(&cert, &second.cert_pem).unwrap();
        state.reload(&metrics);
        assert!(!Arc::ptr_eq(&before, &state.current()));
        std::fs::write(&cert, "not pem").unwrap();
        assert!(matches!(
            load_server_config(&cert, &key),
            Err(TlsError::NoCertificate { .. })
        ));
    }

    #[tokio::test]
    async fn a_rotation_between_loading_and_watching_is_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("ca", 1).unwrap();
        let first = ca.issue_serving(&["localhost".into()], 1).unwrap();
        let (cert, key) = write_bundle(dir.path(), &ca, &first).unwrap();
        let state = Arc::new(TlsState::load(&cert, &key).unwrap());
        let before = state.current();
        // Rotated before the watcher has looked at the files even once.
        let second = ca.issue_serving(&["localhost".into()], 1).unwrap();
        write_bundle(dir.path(), &ca, &second).unwrap();
        let shutdown = Shutdown::new();
        let watching = tokio::spawn(state.clone().watch(
            Arc::new(Metrics::new()),
            Duration::from_millis(10),
            shutdown.clone(),
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while Arc::ptr_eq(&before, &state.current()) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.begin_draining();
        watching.await.unwrap();
        assert!(
            !Arc::ptr_eq(&before, &state.current()),
            "the rotation made before watching began was not loaded"
        );
    }
}
