//! Certificates for gpufair's admission webhook.
//!
//! The API server calls the webhook over HTTPS and checks its certificate against the
//! `caBundle` of the MutatingWebhookConfiguration. This crate makes a private CA and a serving
//! certificate for the webhook Service's DNS names, and writes them as PEM files named like the
//! keys of a `kubernetes.io/tls` Secret, so the same files serve a local run, a test and a
//! mounted Secret.

pub mod apply;
pub mod check;
pub mod kube_api;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// File names inside an output directory (the keys of a `kubernetes.io/tls` Secret plus the CA).
pub const CA_CERT_FILE: &str = "ca.crt";
pub const CA_KEY_FILE: &str = "ca.key";
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";

/// Why certificates could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("could not generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("name {name:?} is not a valid DNS name or IP address for a certificate")]
    BadName { name: String },
    #[error("validity of {days} days is out of range: expected 1 to 36500 days")]
    BadValidity { days: u32 },
    #[error("could not write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The names the API server may use to reach Service `service` in `namespace`.
pub fn service_dns_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        service.to_string(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.svc.cluster.local"),
    ]
}

/// A private certificate authority that signs serving certificates.
pub struct CertificateAuthority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A serving certificate and its private key, PEM encoded.
#[derive(Clone)]
pub struct ServingCertificate {
    pub cert_pem: String,
    pub key_pem: String,
}

fn validity(params: &mut CertificateParams, days: u32) -> Result<(), CertError> {
    if !(1..=36_500).contains(&days) {
        return Err(CertError::BadValidity { days });
    }
    let ymd = |date: jiff::civil::Date| {
        rcgen::date_time_ymd(
            i32::from(date.year()),
            date.month().unsigned_abs(),
            date.day().unsigned_abs(),
        )
    };
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date();
    // Start a day early so a node whose clock runs a little behind still accepts it.
    let start = today.yesterday().unwrap_or(today);
    let end = today
        .checked_add(jiff::Span::new().days(i64::from(days)))
        .map_err(|_| CertError::BadValidity { days })?;
    params.not_before = ymd(start);
    params.not_after = ymd(end);
    Ok(())
}

impl CertificateAuthority {
    /// A new CA with a fresh ECDSA P-256 key.
    pub fn generate(common_name: &str, validity_days: u32) -> Result<Self, CertError> {
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, common_name);
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut params, validity_days)?;
        let key = KeyPair::generate()?;
        Ok(Self {
            issuer: CertifiedIssuer::self_signed(params, key)?,
        })
    }

    /// The CA certificate: what goes into the webhook configuration's `caBundle`.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    pub fn key_pem(&self) -> String {
        self.issuer.key().serialize_pem()
    }

    /// A serving certificate for `names` (DNS names or IP addresses) with a fresh key.
    pub fn issue_serving(
        &self,
        names: &[String],
        validity_days: u32,
    ) -> Result<ServingCertificate, CertError> {
        for name in names {
            if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '/') {
                return Err(CertError::BadName { name: name.clone() });
            }
        }
        let mut params =
            CertificateParams::new(names.to_vec()).map_err(|_| CertError::BadName {
                name: names.join(","),
            })?;
        let mut subject = DistinguishedName::new();
        subject.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.distinguished_name = subject;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, validity_days)?;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(ServingCertificate {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// Writes `contents` to `path` through a temporary file and a rename, so a process watching
/// the file never reads half of it.
pub fn write_atomically(path: &Path, contents: &str, private: bool) -> Result<(), CertError> {
    let fail = |source| CertError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp"));
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if private { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut file = options.open(&tmp).map_err(fail)?;
    file.write_all(contents.as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    fs::rename(&tmp, path).map_err(fail)
}

/// Writes the CA and serving certificate into `dir` (created if needed); returns the paths of
/// `tls.crt` and `tls.key`.
pub fn write_bundle(
    dir: &Path,
    ca: &CertificateAuthority,
    serving: &ServingCertificate,
) -> Result<(PathBuf, PathBuf), CertError> {
    fs::create_dir_all(dir).map_err(|source| CertError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    write_atomically(&dir.join(CA_CERT_FILE), &ca.cert_pem(), false)?;
    write_atomically(&dir.join(CA_KEY_FILE), &ca.key_pem(), true)?;
    let cert = dir.join(CERT_FILE);
    let key = dir.join(KEY_FILE);
    // Key first: a reader that sees the new certificate must also find its key.
    write_atomically(&key, &serving.key_pem, true)?;
    write_atomically(&cert, &serving.cert_pem, false)?;
    Ok((cert, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    #[test]
    fn service_names_cover_every_form() {
        assert_eq!(
            service_dns_names("gpufair-webhook", "gpufair-system"),
            vec![
                "gpufair-webhook",
                "gpufair-webhook.gpufair-system",
                "gpufair-webhook.gpufair-system.svc",
                "gpufair-webhook.gpufair-system.svc.cluster.local",
            ]
        );
    }

    #[test]
    fn issued_certificate_verifies_against_the_ca_only() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = CertificateAuthority::generate("test CA", 30).unwrap();
        let serving = ca
            .issue_serving(&["localhost".into(), "127.0.0.1".into()], 30)
            .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.cert_pem().as_bytes()).unwrap())
            .unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder(roots.into())
            .build()
            .unwrap();
        let leaf = CertificateDer::from_pem_slice(serving.cert_pem.as_bytes()).unwrap();
        let now = rustls::pki_types::UnixTime::now();
        for name in ["localhost", "127.0.0.1"] {
            let server_name = rustls::pki_types::ServerName::try_from(name).unwrap();
            verifier
                .verify_server_cert(&leaf, &[], &server_name, &[], now)
                .unwrap();
        }
        let wrong = rustls::pki_types::ServerName::try_from("example.com").unwrap();
        assert!(
            verifier
                .verify_server_cert(&leaf, &[], &wrong, &[], now)
                .is_err()
        );
        let other_ca = CertificateAuthority::generate("other", 30).unwrap();
        let stranger = other_ca.issue_serving(&["localhost".into()], 30).unwrap();
        let stranger = CertificateDer::from_pem_slice(stranger.cert_pem.as_bytes()).unwrap();
        let localhost = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        assert!(
            verifier
                .verify_server_cert(&stranger, &[], &localhost, &[], now)
                .is_err()
        );
        PrivateKeyDer::from_pem_slice(serving.key_pem.as_bytes()).unwrap();
    }

    #[test]
    fn bundle_files_are_written_with_private_keys_protected() {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::generate("test CA", 1).unwrap();
        let serving = ca.issue_serving(&["svc".into()], 1).unwrap();
        let (cert, key) = write_bundle(dir.path(), &ca, &serving).unwrap();
        assert_eq!(std::fs::read_to_string(cert).unwrap(), serving.cert_pem);
        assert_eq!(std::fs::read_to_string(&key).unwrap(), serving.key_pem);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(matches!(
            ca.issue_serving(&["bad name".into()], 1),
            Err(CertError::BadName { .. })
        ));
        assert!(matches!(
            CertificateAuthority::generate("x", 0),
            Err(CertError::BadValidity { .. })
        ));
    }
}
