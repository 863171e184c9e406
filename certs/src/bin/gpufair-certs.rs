//! `gpufair-certs generate`: a CA and a serving certificate for the webhook Service.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
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

#[derive(Subcommand)]
enum Command {
    /// Make a new CA and a serving certificate; write ca.crt, ca.key, tls.crt and tls.key.
    Generate {
        /// Name of the webhook's Service.
        #[arg(long, env = "GPUFAIR_CERTS_SERVICE", default_value = "gpufair-webhook")]
        service: String,
        /// Namespace of the webhook's Service.
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
        /// Directory to write the PEM files to.
        #[arg(long, env = "GPUFAIR_CERTS_OUT_DIR")]
        out_dir: PathBuf,
        /// Validity of the serving certificate, in days.
        #[arg(long, env = "GPUFAIR_CERTS_DAYS", default_value_t = 365)]
        days: u32,
        /// Validity of the CA, in days.
        #[arg(long, env = "GPUFAIR_CERTS_CA_DAYS", default_value_t = 3650)]
        ca_days: u32,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Generate {
            service,
            namespace,
            extra_names,
            out_dir,
            days,
            ca_days,
        } => {
            let mut names = service_dns_names(&service, &namespace);
            names.extend(extra_names);
            let ca = CertificateAuthority::generate(
                &format!("gpufair webhook CA ({namespace})"),
                ca_days,
            )
            .context("generating the CA")?;
            let serving = ca
                .issue_serving(&names, days)
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
    }
}
