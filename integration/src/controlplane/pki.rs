//! The control plane's credentials: a CA and kube-apiserver's serving certificate (for
//! 127.0.0.1 and localhost), the service-account signing key, the static token file with the
//! admin's token, and kubeconfigs.

use std::path::{Path, PathBuf};

use base64::Engine;
use gpufair_certs::CertificateAuthority;

use super::ControlPlaneError;

/// The admin user of the token file (group `system:masters`).
pub const ADMIN_USER: &str = "gpufair-e2e-admin";

/// Files kube-apiserver and kube-controller-manager are started with.
pub struct Credentials {
    pub ca: CertificateAuthority,
    pub ca_file: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_public_key: PathBuf,
    pub token_file: PathBuf,
    pub admin_token: String,
}

fn write(path: &Path, text: &str) -> Result<(), ControlPlaneError> {
    gpufair_certs::write_atomically(path, text, true).map_err(|e| ControlPlaneError::Start {
        name: "credentials".into(),
        message: e.to_string(),
    })
}

fn failed(what: &str, error: impl std::fmt::Display) -> ControlPlaneError {
    ControlPlaneError::Start {
        name: "credentials".into(),
        message: format!("{what}: {error}"),
    }
}

/// A random token of 32 hex digits.
fn random_token() -> Result<String, ControlPlaneError> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| failed("/dev/urandom", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Credentials {
    pub fn generate(dir: &Path) -> Result<Credentials, ControlPlaneError> {
        let ca = CertificateAuthority::generate("gpufair end-to-end cluster CA", 2)
            .map_err(|e| failed("CA", e))?;
        let serving = ca
            .issue_serving(
                &[
                    "127.0.0.1".into(),
                    "localhost".into(),
                    "kubernetes.default.svc".into(),
                ],
                2,
            )
            .map_err(|e| failed("kube-apiserver certificate", e))?;
        let ca_file = dir.join("ca.crt");
        let serving_cert = dir.join("apiserver.crt");
        let serving_key = dir.join("apiserver.key");
        write(&ca_file, &ca.cert_pem())?;
        write(&serving_cert, &serving.cert_pem)?;
        write(&serving_key, &serving.key_pem)?;

        let signing = rcgen::KeyPair::generate().map_err(|e| failed("service-account key", e))?;
        let service_account_key = dir.join("sa.key");
        let service_account_public_key = dir.join("sa.pub");
        write(&service_account_key, &signing.serialize_pem())?;
        write(&service_account_public_key, &signing.public_key_pem())?;

        let admin_token = random_token()?;
        let token_file = dir.join("tokens.csv");
        write(
            &token_file,
            &format!("{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n"),
        )?;
        Ok(Credentials {
            ca,
            ca_file,
            serving_cert,
            serving_key,
            service_account_key,
            service_account_public_key,
            token_file,
            admin_token,
        })
    }
}

/// A kubeconfig with one context for `server`, trusting `ca_pem`, authenticating with `token`.
pub fn kubeconfig(server: &str, ca_pem: &str, user: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: gpufair-e2e
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    token: {token}
contexts:
- name: gpufair-e2e
  context:
    cluster: gpufair-e2e
    user: {user}
    namespace: default
current-context: gpufair-e2e
"
    )
}

pub fn write_kubeconfig(path: &Path, text: &str) -> Result<(), ControlPlaneError> {
    write(path, text)
}
