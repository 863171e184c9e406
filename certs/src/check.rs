//! Is the certificate in a TLS Secret still good enough to keep? Pure functions over the
//! Secret's bytes, so the decision is tested without a cluster.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::{CA_CERT_FILE, CERT_FILE, KEY_FILE};

/// What `gpufair-certs apply` should do with the Secret it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The certificate verifies against the Secret's CA for every name until past the renewal
    /// threshold; `ca_pem` is the CA the webhook configuration must trust.
    Keep { ca_pem: String },
    /// Issue a new CA and certificate, for this reason.
    Renew(String),
}

/// Judges a TLS Secret's data (`None`: the Secret does not exist) for `names`, as of `now`,
/// renewing when the certificate would not verify `renew_before` from now.
pub fn judge(
    data: Option<&BTreeMap<String, Vec<u8>>>,
    names: &[String],
    now: SystemTime,
    renew_before: Duration,
) -> Verdict {
    let Some(data) = data else {
        return Verdict::Renew("the Secret does not exist".to_string());
    };
    match verify(data, names, now + renew_before) {
        Ok(ca_pem) => Verdict::Keep { ca_pem },
        Err(reason) => Verdict::Renew(reason),
    }
}

fn text<'a>(data: &'a BTreeMap<String, Vec<u8>>, key: &str) -> Result<&'a str, String> {
    let bytes = data
        .get(key)
        .ok_or_else(|| format!("the Secret has no {key}"))?;
    std::str::from_utf8(bytes).map_err(|_| format!("{key} is not PEM text"))
}

/// The CA's PEM when `tls.crt` chains to `ca.crt`, has a usable `tls.key` and is valid for
/// every name at `at`; otherwise why not.
fn verify(
    data: &BTreeMap<String, Vec<u8>>,
    names: &[String],
    at: SystemTime,
) -> Result<String, String> {
    let ca_pem = text(data, CA_CERT_FILE)?;
    let cert_pem = text(data, CERT_FILE)?;
    let key_pem = text(data, KEY_FILE)?;
    PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| format!("{KEY_FILE} is not a PEM private key: {e}"))?;
    let ca = CertificateDer::from_pem_slice(ca_pem.as_bytes())
        .map_err(|e| format!("{CA_CERT_FILE} is not a PEM certificate: {e}"))?;
    let leaf = CertificateDer::from_pem_slice(cert_pem.as_bytes())
        .map_err(|e| format!("{CERT_FILE} is not a PEM certificate: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(ca)
        .map_err(|e| format!("{CA_CERT_FILE} is not a usable CA certificate: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|e| format!("{CA_CERT_FILE} is not a usable CA certificate: {e}"))?;
    let seconds = at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let at_time = UnixTime::since_unix_epoch(Duration::from_secs(seconds));
    for name in names {
        let server_name = ServerName::try_from(name.as_str())
            .map_err(|_| format!("{name:?} is not a DNS name or IP address"))?;
        verifier
            .verify_server_cert(&leaf, &[], &server_name, &[], at_time)
            .map_err(|e| {
                format!(
                    "{CERT_FILE} does not verify for {name} against {CA_CERT_FILE} at {} \
                     (now plus the renewal threshold): {e}",
                    jiff::Timestamp::from_second(seconds as i64)
                        .map(|t| t.to_string())
                        .unwrap_or_else(|_| format!("{seconds}s after the epoch"))
                )
            })?;
    }
    Ok(ca_pem.to_string())
}

/// The DER certificates in a PEM bundle; unreadable blocks are skipped (the bundle is then
/// rewritten without them).
fn certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .map(|c| c.as_ref().to_vec())
        .collect()
}

/// The caBundle a webhook should carry: `current` unchanged when it already trusts `ca_pem`,
/// else `ca_pem` followed by `previous_ca_pem` (the CA being replaced, so the API server keeps
/// trusting the old certificate until every webhook replica has reloaded the new one).
/// `None` means no change is needed.
pub fn ca_bundle(
    current: Option<&[u8]>,
    ca_pem: &str,
    previous_ca_pem: Option<&str>,
) -> Option<Vec<u8>> {
    let wanted = certificates(ca_pem.as_bytes());
    let present = current.map(certificates).unwrap_or_default();
    if !wanted.is_empty() && wanted.iter().all(|c| present.contains(c)) {
        return None;
    }
    let mut bundle = ca_pem.trim_end().to_string();
    bundle.push('\n');
    if let Some(previous) = previous_ca_pem {
        let previous_der = certificates(previous.as_bytes());
        if !previous_der.is_empty() && previous_der != wanted {
            bundle.push_str(previous.trim_end());
            bundle.push('\n');
        }
    }
    Some(bundle.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CertificateAuthority, service_dns_names};

    const DAY: Duration = Duration::from_secs(86_400);

    fn secret(days: u32, names: &[String]) -> (BTreeMap<String, Vec<u8>>, String) {
        let ca = CertificateAuthority::generate("test CA", 3650).unwrap();
        let serving = ca.issue_serving(names, days).unwrap();
        let data = BTreeMap::from([
            (CA_CERT_FILE.to_string(), ca.cert_pem().into_bytes()),
            (CERT_FILE.to_string(), serving.cert_pem.into_bytes()),
            (KEY_FILE.to_string(), serving.key_pem.into_bytes()),
        ]);
        (data, ca.cert_pem())
    }

    #[test]
    fn a_missing_secret_is_created() {
        let names = service_dns_names("svc", "ns");
        assert!(matches!(
            judge(None, &names, SystemTime::now(), 30 * DAY),
            Verdict::Renew(r) if r.contains("does not exist")
        ));
    }

    #[test]
    fn a_valid_certificate_is_kept_for_all_four_service_names() {
        let names = service_dns_names("gpufair-webhook", "gpufair-system");
        assert_eq!(names.len(), 4);
        let (data, ca) = secret(365, &names);
        assert_eq!(
            judge(Some(&data), &names, SystemTime::now(), 30 * DAY),
            Verdict::Keep { ca_pem: ca }
        );
    }

    #[test]
    fn a_certificate_near_expiry_is_renewed() {
        let names = service_dns_names("svc", "ns");
        let (data, _) = secret(10, &names);
        assert!(matches!(
            judge(Some(&data), &names, SystemTime::now(), Duration::ZERO),
            Verdict::Keep { .. }
        ));
        let Verdict::Renew(reason) = judge(Some(&data), &names, SystemTime::now(), 30 * DAY) else {
            panic!("a certificate expiring in 10 days is renewed 30 days ahead");
        };
        assert!(reason.contains("tls.crt does not verify"), "{reason}");
    }

    #[test]
    fn wrong_names_missing_keys_and_foreign_cas_are_renewed() {
        let names = service_dns_names("svc", "ns");
        let (data, _) = secret(365, &names[..2]);
        assert!(matches!(
            judge(Some(&data), &names, SystemTime::now(), DAY),
            Verdict::Renew(r) if r.contains("svc.ns.svc")
        ));
        let (mut data, _) = secret(365, &names);
        data.remove(KEY_FILE);
        assert_eq!(
            judge(Some(&data), &names, SystemTime::now(), DAY),
            Verdict::Renew("the Secret has no tls.key".into())
        );
        let (mut data, _) = secret(365, &names);
        let (other, _) = secret(365, &names);
        data.insert(CA_CERT_FILE.into(), other[CA_CERT_FILE].clone());
        assert!(matches!(
            judge(Some(&data), &names, SystemTime::now(), DAY),
            Verdict::Renew(r) if r.contains("does not verify")
        ));
        let (mut data, _) = secret(365, &names);
        data.insert(CERT_FILE.into(), b"not pem".to_vec());
        assert!(matches!(
            judge(Some(&data), &names, SystemTime::now(), DAY),
            Verdict::Renew(r) if r.contains("tls.crt is not a PEM certificate")
        ));
    }

    #[test]
    fn the_bundle_keeps_the_old_ca_through_a_rotation() {
        let old = CertificateAuthority::generate("old", 30)
            .unwrap()
            .cert_pem();
        let new = CertificateAuthority::generate("new", 30)
            .unwrap()
            .cert_pem();
        assert_eq!(ca_bundle(Some(old.as_bytes()), &old, None), None);
        let rotated = ca_bundle(Some(old.as_bytes()), &new, Some(&old)).unwrap();
        let ders = certificates(&rotated);
        assert_eq!(ders.len(), 2);
        assert_eq!(ders[0], certificates(new.as_bytes())[0]);
        assert_eq!(
            ca_bundle(Some(&rotated), &new, None),
            None,
            "already trusted"
        );
        let fresh = ca_bundle(None, &new, None).unwrap();
        assert_eq!(certificates(&fresh), certificates(new.as_bytes()));
        let same = ca_bundle(Some(b"garbage"), &new, Some(&new)).unwrap();
        assert_eq!(
            certificates(&same).len(),
            1,
            "the same CA is not listed twice"
        );
    }
}
