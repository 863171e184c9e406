//! `gpufair-certs apply`: keep the webhook's TLS Secret and its configuration's caBundle right.
//!
//! Idempotent: a run that finds a certificate valid for longer than the renewal threshold and a
//! caBundle that trusts its CA changes nothing. Otherwise it issues a new CA and serving
//! certificate, writes them into the Secret (created, or replaced at the version it read, so
//! two concurrent runs cannot both win), and patches caBundle into every webhook of the
//! configuration that calls the Service.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, TestOperation};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;

use crate::check::{Verdict, ca_bundle, judge};
use crate::kube_api::{CertsApi, KubeCertsApi};
use crate::{
    CA_CERT_FILE, CERT_FILE, CertError, CertificateAuthority, KEY_FILE, service_dns_names,
};

/// The Secret type the webhook's volume expects; it cannot be changed on an existing Secret.
pub const TLS_SECRET_TYPE: &str = "kubernetes.io/tls";

/// Where the certificate lives and how it is made.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    pub namespace: String,
    pub secret: String,
    pub webhook_configuration: String,
    pub service: String,
    pub extra_names: Vec<String>,
    /// Renew when the certificate would no longer verify this far ahead.
    pub renew_before: Duration,
    pub days: u32,
    pub ca_days: u32,
}

impl ApplyOptions {
    /// Every name the serving certificate must be valid for.
    pub fn names(&self) -> Vec<String> {
        let mut names = service_dns_names(&self.service, &self.namespace);
        names.extend(self.extra_names.iter().cloned());
        names
    }
}

/// What happened to the Secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretAction {
    Created,
    Rotated { reason: String },
    Unchanged,
}

/// What one run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    pub secret: SecretAction,
    /// Names of the webhooks whose caBundle was patched.
    pub patched_webhooks: Vec<String>,
}

/// Why a run failed; each names the object and, for API errors, what the API server said.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("{action} Secret {namespace}/{name}: {source}{hint}", hint = hint(source))]
    Secret {
        action: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "Secret {namespace}/{name} has type {found:?}, expected {TLS_SECRET_TYPE}; the type \
         cannot be changed, so delete the Secret and run again"
    )]
    SecretType {
        namespace: String,
        name: String,
        found: String,
    },
    #[error("{action} MutatingWebhookConfiguration {name}: {source}{hint}", hint = hint(source))]
    Webhook {
        action: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "MutatingWebhookConfiguration {name} does not exist; apply the manifests (kubectl \
         apply -k deploy/base) before running gpufair-certs apply"
    )]
    WebhookMissing { name: String },
    #[error(
        "no webhook in MutatingWebhookConfiguration {name} calls Service {namespace}/{service}; \
         check --service and --namespace"
    )]
    NoMatchingWebhook {
        name: String,
        namespace: String,
        service: String,
    },
    #[error(transparent)]
    Certificate(#[from] CertError),
}

fn hint(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(status) if status.is_forbidden() => {
            " (the gpufair-certs ServiceAccount's Role and ClusterRole grant exactly what apply needs)"
        }
        kube::Error::Api(status) if status.code == 409 => {
            " (another run changed it at the same time; running again is safe)"
        }
        _ => "",
    }
}

fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// Runs one `apply` against the cluster `client` talks to, as of `now`.
pub async fn apply(
    client: Client,
    options: &ApplyOptions,
    now: SystemTime,
) -> Result<ApplyReport, ApplyError> {
    let api = KubeCertsApi::new(client, &options.namespace);
    let secret_error = |action, source| ApplyError::Secret {
        action,
        namespace: options.namespace.clone(),
        name: options.secret.clone(),
        source,
    };
    let existing = api
        .secret(&options.secret)
        .await
        .map_err(|e| secret_error("reading", e))?;
    if let Some(secret) = &existing {
        let found = secret.type_.clone().unwrap_or_default();
        if found != TLS_SECRET_TYPE {
            return Err(ApplyError::SecretType {
                namespace: options.namespace.clone(),
                name: options.secret.clone(),
                found,
            });
        }
    }
    let existing_data = existing.as_ref().map(secret_data);
    let names = options.names();
    let (action, ca_pem, previous_ca) =
        match judge(existing_data.as_ref(), &names, now, options.renew_before) {
            Verdict::Keep { ca_pem } => (SecretAction::Unchanged, ca_pem, None),
            Verdict::Renew(reason) => {
                let ca = CertificateAuthority::generate(
                    &format!("gpufair webhook CA ({})", options.namespace),
                    options.ca_days,
                )?;
                let serving = ca.issue_serving(&names, options.days)?;
                let data = BTreeMap::from([
                    (
                        CA_CERT_FILE.to_string(),
                        ByteString(ca.cert_pem().into_bytes()),
                    ),
                    (
                        CERT_FILE.to_string(),
                        ByteString(serving.cert_pem.into_bytes()),
                    ),
                    (
                        KEY_FILE.to_string(),
                        ByteString(serving.key_pem.into_bytes()),
                    ),
                ]);
                let previous_ca = existing_data
                    .as_ref()
                    .and_then(|d| d.get(CA_CERT_FILE))
                    .and_then(|b| String::from_utf8(b.clone()).ok());
                let action = match existing {
                    None => {
                        let secret = Secret {
                            metadata: ObjectMeta {
                                name: Some(options.secret.clone()),
                                namespace: Some(options.namespace.clone()),
                                labels: Some(BTreeMap::from([(
                                    "app.kubernetes.io/managed-by".to_string(),
                                    "gpufair-certs".to_string(),
                                )])),
                                ..ObjectMeta::default()
                            },
                            type_: Some(TLS_SECRET_TYPE.to_string()),
                            data: Some(data),
                            ..Secret::default()
                        };
                        api.create_secret(&secret)
                            .await
                            .map_err(|e| secret_error("creating", e))?;
                        SecretAction::Created
                    }
                    Some(mut secret) => {
                        // Replaced at the resourceVersion read above: a concurrent writer makes
                        // this fail with a conflict instead of one run silently undoing another.
                        secret.data = Some(data);
                        api.replace_secret(&options.secret, &secret)
                            .await
                            .map_err(|e| secret_error("replacing", e))?;
                        SecretAction::Rotated { reason }
                    }
                };
                (action, ca.cert_pem(), previous_ca)
            }
        };
    let patched_webhooks = patch_ca_bundle(&api, options, &ca_pem, previous_ca.as_deref()).await?;
    Ok(ApplyReport {
        secret: action,
        patched_webhooks,
    })
}

/// Makes every webhook of the configuration that calls the Service trust `ca_pem`.
async fn patch_ca_bundle(
    api: &impl CertsApi,
    options: &ApplyOptions,
    ca_pem: &str,
    previous_ca: Option<&str>,
) -> Result<Vec<String>, ApplyError> {
    let name = &options.webhook_configuration;
    let webhook_error = |action, source| ApplyError::Webhook {
        action,
        name: name.clone(),
        source,
    };
    let configuration = api
        .webhook_configuration(name)
        .await
        .map_err(|e| webhook_error("reading", e))?
        .ok_or_else(|| ApplyError::WebhookMissing { name: name.clone() })?;
    let mut operations = Vec::new();
    let mut patched = Vec::new();
    let mut matched = false;
    for (index, webhook) in configuration.webhooks.iter().flatten().enumerate() {
        let calls_service = webhook
            .client_config
            .service
            .as_ref()
            .is_some_and(|s| s.name == options.service && s.namespace == options.namespace);
        if !calls_service {
            continue;
        }
        matched = true;
        let current = webhook
            .client_config
            .ca_bundle
            .as_ref()
            .map(|b| b.0.as_slice());
        if let Some(bundle) = ca_bundle(current, ca_pem, previous_ca) {
            // `test` pins the index to the webhook read above, so a reordered list fails the
            // patch rather than writing the bundle into another webhook.
            let at = |tokens: &[&str]| {
                let index = index.to_string();
                PointerBuf::from_tokens(
                    ["webhooks", index.as_str()]
                        .into_iter()
                        .chain(tokens.iter().copied()),
                )
            };
            operations.push(PatchOperation::Test(TestOperation {
                path: at(&["name"]),
                value: serde_json::Value::String(webhook.name.clone()),
            }));
            operations.push(PatchOperation::Add(AddOperation {
                path: at(&["clientConfig", "caBundle"]),
                value: serde_json::Value::String(BASE64.encode(bundle)),
            }));
            patched.push(webhook.name.clone());
        }
    }
    if !matched {
        return Err(ApplyError::NoMatchingWebhook {
            name: name.clone(),
            namespace: options.namespace.clone(),
            service: options.service.clone(),
        });
    }
    if !operations.is_empty() {
        api.patch_webhook_configuration(name, json_patch::Patch(operations))
            .await
            .map_err(|e| webhook_error("patching", e))?;
    }
    Ok(patched)
}
