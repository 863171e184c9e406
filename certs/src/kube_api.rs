//! Every call `gpufair-certs` makes to the API server, and the grants they need. No other
//! module of this crate names kube's `Api`.

use std::future::Future;

use gpufair_api::access::ApiCall;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// The Secret and the webhook configuration the deployed manifests name (the defaults of
/// `--secret` and `--webhook-configuration`); the Role and ClusterRole are limited to them.
pub const DEFAULT_SECRET: &str = "gpufair-webhook-tls";
pub const DEFAULT_WEBHOOK_CONFIGURATION: &str = "gpufair";

/// What `gpufair-certs apply` asks of the API server, one method per request.
pub trait CertsApi {
    /// The Secret `name` in the install namespace, if it exists.
    fn secret(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<Secret>, kube::Error>> + Send;
    fn create_secret(
        &self,
        secret: &Secret,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    /// Replaces the Secret at the resourceVersion it carries (a conflict when it changed).
    fn replace_secret(
        &self,
        name: &str,
        secret: &Secret,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
    fn webhook_configuration(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Option<MutatingWebhookConfiguration>, kube::Error>> + Send;
    /// Applies a JSON patch to the webhook configuration `name`.
    fn patch_webhook_configuration(
        &self,
        name: &str,
        patch: json_patch::Patch,
    ) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// The requests [`CertsApi`]'s methods make, in their order.
pub const CALLS: &[ApiCall] = &[
    ApiCall::install_namespace("", "secrets", "get").named(&[DEFAULT_SECRET]),
    // A create cannot be limited by name: the name is in the body.
    ApiCall::install_namespace("", "secrets", "create"),
    ApiCall::install_namespace("", "secrets", "update").named(&[DEFAULT_SECRET]),
    ApiCall::cluster(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "get",
    )
    .named(&[DEFAULT_WEBHOOK_CONFIGURATION]),
    ApiCall::cluster(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "patch",
    )
    .named(&[DEFAULT_WEBHOOK_CONFIGURATION]),
];

/// [`CertsApi`] through a kube client, with the Secret in `namespace`.
pub struct KubeCertsApi {
    secrets: Api<Secret>,
    configurations: Api<MutatingWebhookConfiguration>,
}

impl KubeCertsApi {
    pub fn new(client: Client, namespace: &str) -> Self {
        KubeCertsApi {
            secrets: Api::namespaced(client.clone(), namespace),
            configurations: Api::all(client),
        }
    }
}

impl CertsApi for KubeCertsApi {
    async fn secret(&self, name: &str) -> Result<Option<Secret>, kube::Error> {
        self.secrets.get_opt(name).await
    }

    async fn create_secret(&self, secret: &Secret) -> Result<(), kube::Error> {
        self.secrets.create(&PostParams::default(), secret).await?;
        Ok(())
    }

    async fn replace_secret(&self, name: &str, secret: &Secret) -> Result<(), kube::Error> {
        self.secrets
            .replace(name, &PostParams::default(), secret)
            .await?;
        Ok(())
    }

    async fn webhook_configuration(
        &self,
        name: &str,
    ) -> Result<Option<MutatingWebhookConfiguration>, kube::Error> {
        self.configurations.get_opt(name).await
    }

    async fn patch_webhook_configuration(
        &self,
        name: &str,
        patch: json_patch::Patch,
    ) -> Result<(), kube::Error> {
        self.configurations
            .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await?;
        Ok(())
    }
}
