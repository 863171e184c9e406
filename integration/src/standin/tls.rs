//! The serving certificate (from a fresh CA made with `gpufair-certs`) and the kubeconfig
//! clients use to reach the stand-in: the CA as `certificate-authority-data` and a bearer
//! token.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use gpufair_certs::{CertificateAuthority, ServingCertificate};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Certs(#[from] gpufair_certs::CertError),
    #[error("serving certificate is not usable: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("serving certificate PEM is not readable: {0}")]
    Pem(#[from] rustls::pki_types::pem::Error),
    #[error("could not write kubeconfig {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A CA and a certificate for 127.0.0.1 and localhost.
pub struct Certificates {
    pub ca: CertificateAuthority,
    pub serving: ServingCertificate,
}

impl Certificates {
    pub fn generate() -> Result<Self, TlsError> {
        let ca = CertificateAuthority::generate("gpufair API-server stand-in CA", 2)?;
        let serving = ca.issue_serving(&["127.0.0.1".into(), "localhost".into()], 2)?;
        Ok(Self { ca, serving })
    }

    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let chain = CertificateDer::pem_slice_iter(self.serving.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_slice(self.serving.key_pem.as_bytes())?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// A kubeconfig with one context, `gpufair-standin`, for `address`.
pub fn kubeconfig(address: SocketAddr, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: gpufair-standin
  cluster:
    server: https://{address}
    certificate-authority-data: {ca}
users:
- name: gpufair-standin
  user:
    token: {token}
contexts:
- name: gpufair-standin
  context:
    cluster: gpufair-standin
    user: gpufair-standin
    namespace: default
current-context: gpufair-standin
"
    )
}

pub fn write_kubeconfig(path: &Path, text: &str) -> Result<(), TlsError> {
    gpufair_certs::write_atomically(path, text, true).map_err(|err| match err {
        gpufair_certs::CertError::Write { path, source } => TlsError::Write {
            path: path.display().to_string(),
            source,
        },
        other => TlsError::Certs(other),
    })
}
