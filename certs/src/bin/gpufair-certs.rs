//! `gpufair-certs`: certificates for the webhook Service.
//!
//! - `generate` writes a CA and a serving certificate to files, for local runs and tests;
//! - `apply` keeps them in the cluster: the TLS Secret the webhook mounts and the caBundle of
//!   its MutatingWebhookConfiguration.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use gpufair_certs::apply::{ApplyOptions, SecretAction, apply};
use gpufair_certs::{CertificateAuthority, service_dns_names, write_bundle};

#[derive(Parser)]
#[command(
    name = "gpufair-certs",
    version,
    about = "Certificates for gpufair's admission webhook"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The Service the certificate is for.
#[derive(Args)]
struct ServiceArgs {
    /// Name of the webhook's Service.
    #[arg(long, env = "GPUFAIR_CERTS_SERVICE", default_value = "gpufair-webhook")]
    service: String,
    /// Namespace of the webhook's Service (and, for apply, of the Secret).
    #[arg(
        long,
        env = "GPUFAIR_CERTS_NAMESPACE",
        default_value = "gpufair-system"
    )]
    namespace: String,
    /// Extra DNS names or IP addresses (repeatable), e.g. localhost for a local run.
    #[arg(
        long = "name",
        env = "GPUFAIR_CERTS_EXTRA_NAMES",
        value_delimiter = ','
    )]
    extra_names: Vec<String>,
    /// Validity of the serving certificate, in days.
    #[arg(long, env = "GPUFAIR_CERTS_DAYS", default_value_t = 365)]
    days: u32,
    /// Validity of the CA, in days.
    #[arg(long, env = "GPUFAIR_CERTS_CA_DAYS", default_value_t = 3650)]
    ca_days: u32,
}

#[derive(Subcommand)]
enum Command {
    /// Make a new CA and a serving certificate; write ca.crt, ca.key, tls.crt and tls.key.
    Generate {
        #[command(flatten)]
        service: ServiceArgs,
        /// Directory to write the PEM files to.
        #[arg(long, env = "GPUFAIR_CERTS_OUT_DIR")]
        out_dir: PathBuf,
    },
    /// Create or rotate the webhook's TLS Secret and patch caBundle into its webhook
    /// configuration. Idempotent: does nothing while the certificate stays valid for longer
    /// than --renew-before. Uses the in-cluster ServiceAccount, else KUBECONFIG.
    Apply {
        #[command(flatten)]
        service: ServiceArgs,
        /// The kubernetes.io/tls Secret the webhook mounts.
        #[arg(
            long,
            env = "GPUFAIR_CERTS_SECRET",
            default_value = gpufair_certs::kube_api::DEFAULT_SECRET
        )]
        secret: String,
        /// The MutatingWebhookConfiguration whose webhooks call the Service.
        #[arg(
            long,
            env = "GPUFAIR_CERTS_WEBHOOK_CONFIGURATION",
            default_value = gpufair_certs::kube_api::DEFAULT_WEBHOOK_CONFIGURATION
        )]
        webhook_configuration: String,
        /// Renew when the certificate expires within this long (e.g. 30d, 720h).
        #[arg(long, env = "GPUFAIR_CERTS_RENEW_BEFORE", default_value = "30d", value_parser = duration)]
        renew_before: Duration,
    },
}

fn duration(text: &str) -> Result<Duration, String> {
    gpufair_core::duration::parse_std_duration(text).map_err(|e| e.to_string())
}

fn generate(service: ServiceArgs, out_dir: PathBuf) -> anyhow::Result<()> {
    let mut names = service_dns_names(&service.service, &service.namespace);
    names.extend(service.extra_names);
    let ca = CertificateAuthority::generate(
        &format!("gpufair webhook CA ({})", service.namespace),
        service.ca_days,
    )
    .context("generating the CA")?;
    let serving = ca
        .issue_serving(&names, service.days)
        .context("issuing the serving certificate")?;
    let (cert, key) = write_bundle(&out_dir, &ca, &serving)?;
    println!(
        "wrote {} and {} for {}",
        cert.display(),
        key.display(),
        names.join(", ")
    );
    Ok(())
}

async fn apply_in_cluster(options: ApplyOptions) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API (in-cluster ServiceAccount or KUBECONFIG)")?;
    let report = apply(client, &options, SystemTime::now()).await?;
    let secret = format!("{}/{}", options.namespace, options.secret);
    match &report.secret {
        SecretAction::Created => tracing::info!(%secret, "created the TLS Secret"),
        SecretAction::Rotated { reason } => {
            tracing::info!(%secret, %reason, "rotated the TLS Secret")
        }
        SecretAction::Unchanged => tracing::info!(
            %secret,
            renew_before_s = options.renew_before.as_secs(),
            "the certificate is valid beyond the renewal threshold; kept it"
        ),
    }
    if report.patched_webhooks.is_empty() {
        tracing::info!(configuration = %options.webhook_configuration, "caBundle already trusts the CA");
    } else {
        tracing::info!(
            configuration = %options.webhook_configuration,
            webhooks = %report.patched_webhooks.join(","),
            "patched caBundle"
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Generate { service, out_dir } => generate(service, out_dir),
        Command::Apply {
            service,
            secret,
            webhook_configuration,
            renew_before,
        } => {
            let options = ApplyOptions {
                namespace: service.namespace,
                secret,
                webhook_configuration,
                service: service.service,
                extra_names: service.extra_names,
                renew_before,
                days: service.days,
                ca_days: service.ca_days,
            };
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?
                .block_on(apply_in_cluster(options))
        }
    }
}
