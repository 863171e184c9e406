//! Command line; every flag also reads an environment variable, so a Deployment is just env.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "gpufair-webhook",
    version,
    about = "gpufair's admission webhook for GPU pods"
)]
pub struct Cli {
    /// Log line format.
    #[arg(long, env = "GPUFAIR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the mutating admission webhook over HTTPS.
    Serve(ServeArgs),
}

fn duration(text: &str) -> Result<Duration, String> {
    let seconds = gpufair_core::duration::parse_duration(text).map_err(|e| e.to_string())?;
    Duration::try_from_secs_f64(seconds).map_err(|e| e.to_string())
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the HTTPS server.
    #[arg(long, env = "GPUFAIR_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// PEM certificate chain (reloaded when it changes).
    #[arg(long, env = "GPUFAIR_WEBHOOK_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// PEM private key (reloaded when it changes).
    #[arg(long, env = "GPUFAIR_WEBHOOK_TLS_KEY")]
    pub tls_key: PathBuf,
    /// gpufair config file (YAML; reloaded when it changes). Defaults apply without one.
    #[arg(long, env = "GPUFAIR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Queue manifests, one YAML document each, used instead of watching the cluster.
    #[arg(long, env = "GPUFAIR_WEBHOOK_QUEUES_FILE")]
    pub queues_file: Option<PathBuf>,
    /// Address of the plain-HTTP metrics server (`/metrics`, `/healthz`, `/readyz`).
    #[arg(
        long,
        env = "GPUFAIR_WEBHOOK_METRICS_LISTEN",
        default_value = "0.0.0.0:9090"
    )]
    pub metrics_listen: SocketAddr,
    /// How often certificate, config and queues files are checked for changes.
    #[arg(long, env = "GPUFAIR_WEBHOOK_RELOAD_INTERVAL", default_value = "2s", value_parser = duration)]
    pub reload_interval: Duration,
    /// After SIGTERM, time spent not ready but still serving, so endpoints drop this pod first.
    #[arg(long, env = "GPUFAIR_WEBHOOK_SHUTDOWN_DELAY", default_value = "2s", value_parser = duration)]
    pub shutdown_delay: Duration,
    /// Then, time in-flight requests get to finish before connections are closed.
    #[arg(long, env = "GPUFAIR_WEBHOOK_SHUTDOWN_GRACE", default_value = "20s", value_parser = duration)]
    pub shutdown_grace: Duration,
    /// Most TLS connections served at once.
    #[arg(long, env = "GPUFAIR_WEBHOOK_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_with_defaults() {
        let cli = Cli::try_parse_from([
            "gpufair-webhook",
            "serve",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--reload-interval",
            "500ms",
        ]);
        // `ms` is not a unit gpufair accepts; the error names the accepted forms.
        let err = cli.unwrap_err().to_string();
        assert!(err.contains("30s"), "{err}");
        let cli = Cli::try_parse_from([
            "gpufair-webhook",
            "serve",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--reload-interval",
            "0.5s",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command;
        assert_eq!(args.reload_interval, Duration::from_millis(500));
        assert_eq!(args.listen.port(), 8443);
        assert!(args.queues_file.is_none());
    }
}
