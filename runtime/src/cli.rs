//! Command line; every flag also reads an environment variable, so a Deployment is just env.

use std::net::SocketAddr;
use std::num::NonZeroU16;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use gpufair_controller::{LeaseTiming, LeaseTimingError};

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
    gpufair_core::duration::parse_std_duration(text).map_err(|e| e.to_string())
}

fn worker_threads(text: &str) -> Result<NonZeroU16, String> {
    match text.parse::<u16>() {
        Ok(threads @ 1..=1024) => Ok(NonZeroU16::new(threads).expect("within 1..=1024")),
        _ => Err(format!(
            "{text:?} is not a thread count: expected a whole number from 1 to 1024"
        )),
    }
}

fn positive_duration(text: &str) -> Result<Duration, String> {
    let value = duration(text)?;
    if value.is_zero() {
        return Err(format!("{text:?} must be longer than zero (e.g. 10s)"));
    }
    Ok(value)
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the HTTPS server.
    #[arg(long, env = "GPUFAIR_WEBHOOK_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// PEM certificate chain (reloaded when it changes); required with --admission=true.
    #[arg(
        long,
        env = "GPUFAIR_WEBHOOK_TLS_CERT",
        required_if_eq("admission", "true")
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key (reloaded when it changes); required with --admission=true.
    #[arg(
        long,
        env = "GPUFAIR_WEBHOOK_TLS_KEY",
        required_if_eq("admission", "true")
    )]
    pub tls_key: Option<PathBuf>,
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
    /// A client must send a request's headers within this, or its connection is closed
    /// (slow-loris guard). A connection idle this long, before or between requests, is closed
    /// too (an HTTP/2 one after one to two times this); the API server reconnects as needed.
    #[arg(long, env = "GPUFAIR_WEBHOOK_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = positive_duration)]
    pub header_read_timeout: Duration,
    /// Threads answering admission requests, apart from the controller, watches and metrics
    /// (so a long decision cycle never delays a review). Each serves its own connections; a
    /// new connection goes to the thread with the fewest. Default: two, or one where the
    /// process may use only one CPU.
    #[arg(long, env = "GPUFAIR_WEBHOOK_WORKER_THREADS", value_parser = worker_threads)]
    pub worker_threads: Option<NonZeroU16>,
    /// Serve admission reviews (off: only the controller runs; no TLS files are needed).
    #[arg(long, env = "GPUFAIR_ADMISSION", default_value_t = true, action = clap::ArgAction::Set)]
    pub admission: bool,
    #[command(flatten)]
    pub controller: ControllerArgs,
}

/// The gate-release controller, run on the replica that holds the Lease.
#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// Run the controller (on the elected leader only). It needs the Kubernetes API (in-cluster
    /// or KUBECONFIG), so it is off unless asked for; deploy/base turns it on.
    #[arg(long = "controller", env = "GPUFAIR_CONTROLLER", default_value_t = false, action = clap::ArgAction::Set)]
    pub enabled: bool,
    /// Name of the coordination.k8s.io/v1 Lease the replicas elect a leader with.
    #[arg(long, env = "GPUFAIR_LEASE_NAME", default_value = "gpufair-controller")]
    pub lease_name: String,
    /// Namespace of the Lease; defaults to the pod's own (from the service account), else
    /// `gpufair-system`.
    #[arg(long, env = "GPUFAIR_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// This replica's identity in the Lease and in Events; defaults to the host name.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How long a replica waits, after the Lease last changed, before taking it over
    /// (kube-controller-manager's --leader-elect-lease-duration). Recorded in whole seconds,
    /// rounded up. A killed leader is replaced within about this plus twice the retry period.
    #[arg(long, env = "GPUFAIR_LEASE_DURATION", default_value = "10s", value_parser = positive_duration)]
    pub lease_duration: Duration,
    /// How long after a renewal began the leader may still write; must be shorter than
    /// --lease-duration (--leader-elect-renew-deadline).
    #[arg(long, env = "GPUFAIR_LEASE_RENEW_DEADLINE", default_value = "7s", value_parser = positive_duration)]
    pub lease_renew_deadline: Duration,
    /// How often every replica tries to acquire or renew the Lease; must be shorter than
    /// --lease-renew-deadline (--leader-elect-retry-period).
    #[arg(long, env = "GPUFAIR_LEASE_RETRY_PERIOD", default_value = "2s", value_parser = positive_duration)]
    pub lease_retry_period: Duration,
    /// A cycle runs on relevant events (debounced) and at least this often.
    #[arg(long, env = "GPUFAIR_CYCLE_INTERVAL", default_value = "10s", value_parser = duration)]
    pub cycle_interval: Duration,
    /// Events are gathered this long before a cycle runs.
    #[arg(long, env = "GPUFAIR_CYCLE_DEBOUNCE", default_value = "0.2s", value_parser = duration)]
    pub debounce: Duration,
    /// Pods released per second, sustained (the token bucket's refill rate).
    #[arg(long, env = "GPUFAIR_RELEASE_RATE", default_value_t = 50.0, value_parser = positive)]
    pub release_rate: f64,
    /// Pods released at once before --release-rate applies (the token bucket's size; it
    /// starts full). 1 gives a flat --release-rate.
    #[arg(long, env = "GPUFAIR_RELEASE_BURST", default_value_t = 1000, value_parser = burst)]
    pub release_burst: u32,
    /// How often Queue status (the usage ledger) is written; a failover loses at most this
    /// much usage.
    #[arg(long, env = "GPUFAIR_STATUS_INTERVAL", default_value = "30s", value_parser = duration)]
    pub status_interval: Duration,
    /// A released pod not scheduled after this long is reported and, if it has an owner,
    /// deleted so the owner recreates it.
    #[arg(long, env = "GPUFAIR_UNBOUND_TIMEOUT", default_value = "5m", value_parser = duration)]
    pub unbound_timeout: Duration,
    /// Most `Waiting` Events a cycle sends (a whole number; 0 sends none). Pods left out are
    /// explained by the next cycles, nearest to release first, so a new leader facing a large
    /// backlog spreads its explanations out instead of holding its first cycle on them.
    #[arg(long, env = "GPUFAIR_EXPLANATIONS_PER_CYCLE", default_value_t = 500)]
    pub explanations_per_cycle: usize,
}

impl ServeArgs {
    /// `--worker-threads`, else two, or one where the process may use only one CPU (a CPU
    /// limit of one or less): a review costs a few microseconds, so threads beyond two add
    /// wake-ups, not capacity (RELIABILITY.md, "Admission threads").
    pub fn admission_threads(&self) -> NonZeroU16 {
        self.worker_threads.unwrap_or_else(|| {
            let cpus = std::thread::available_parallelism().map_or(1, usize::from);
            if cpus >= 2 {
                NonZeroU16::new(2).expect("two is not zero")
            } else {
                NonZeroU16::MIN
            }
        })
    }

    /// Checks what clap cannot: certificates are needed exactly when admission is served.
    pub fn check(&self) -> Result<(), String> {
        if self.admission && (self.tls_cert.is_none() || self.tls_key.is_none()) {
            return Err("--tls-cert and --tls-key are required to serve admission \
                        (or pass --admission=false to run only the controller)"
                .into());
        }
        if !self.admission && !self.controller.enabled {
            return Err("--admission=false and --controller=false leave nothing to run".into());
        }
        self.controller.lease_timing()?;
        Ok(())
    }
}

impl ControllerArgs {
    /// The Lease timing from the three flags, refused (naming the flags) unless
    /// `--lease-retry-period < --lease-renew-deadline < --lease-duration`.
    pub fn lease_timing(&self) -> Result<LeaseTiming, String> {
        LeaseTiming::new(
            self.lease_duration,
            self.lease_renew_deadline,
            self.lease_retry_period,
        )
        .map_err(|err| match err {
            LeaseTimingError::ZeroRetry(_) => {
                "--lease-retry-period (GPUFAIR_LEASE_RETRY_PERIOD) must be longer than zero \
                 (e.g. 2s)"
                    .to_string()
            }
            LeaseTimingError::RenewNotBeforeExpiry {
                renew_deadline,
                duration,
            } => format!(
                "--lease-renew-deadline (GPUFAIR_LEASE_RENEW_DEADLINE, {renew_deadline:?}) must be \
                 shorter than --lease-duration (GPUFAIR_LEASE_DURATION, {duration:?}), so a \
                 leader stops writing before another replica may take over (e.g. 10s and 7s)"
            ),
            LeaseTimingError::RetryNotBeforeDeadline {
                retry_period,
                renew_deadline,
            } => format!(
                "--lease-retry-period (GPUFAIR_LEASE_RETRY_PERIOD, {retry_period:?}) must be \
                 shorter than --lease-renew-deadline (GPUFAIR_LEASE_RENEW_DEADLINE, \
                 {renew_deadline:?}), so a leader tries to renew before it must stop writing \
                 (e.g. 7s and 2s)"
            ),
        })
    }
}

fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "{text:?} is not a number > 0 (pods per second, e.g. 50)"
        )),
    }
}

fn burst(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!(
            "{text:?} is not a whole number >= 1 (pods released at once, e.g. 1000; 1 for a flat rate)"
        )),
    }
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
            "500us",
        ]);
        // `us` is not a unit gpufair accepts; the error names the accepted forms.
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
        assert_eq!(args.header_read_timeout, Duration::from_secs(10));
        assert_eq!(args.worker_threads, None);
        assert!(args.queues_file.is_none());
        assert!(args.admission && !args.controller.enabled);
        assert_eq!(args.controller.cycle_interval, Duration::from_secs(10));
        assert_eq!(args.controller.release_rate, 50.0);
        assert_eq!(args.controller.release_burst, 1000);
        assert_eq!(args.controller.lease_name, "gpufair-controller");
    }

    #[test]
    fn controller_alone_needs_no_certificates() {
        let cli = Cli::try_parse_from([
            "gpufair-webhook",
            "serve",
            "--admission=false",
            "--controller=true",
            "--release-rate",
            "20",
            "--lease-namespace",
            "ops",
        ])
        .unwrap();
        let Command::Serve(args) = cli.command;
        assert!(!args.admission && args.controller.enabled);
        assert!(args.tls_cert.is_none());
        assert_eq!(args.controller.release_rate, 20.0);
        assert_eq!(args.controller.lease_namespace.as_deref(), Some("ops"));
        assert_eq!(args.check(), Ok(()));
        let Command::Serve(bare) = Cli::try_parse_from(["gpufair-webhook", "serve"])
            .unwrap()
            .command;
        let err = bare.check().unwrap_err();
        assert!(err.contains("--tls-cert"), "{err}");
        let err = Cli::try_parse_from([
            "gpufair-webhook",
            "serve",
            "--admission=false",
            "--release-rate",
            "0",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("number > 0"), "{err}");
    }

    #[test]
    fn release_burst_is_a_whole_number_of_at_least_one() {
        let parse = |burst: &str| {
            Cli::try_parse_from([
                "gpufair-webhook".to_string(),
                "serve".into(),
                "--admission=false".into(),
                "--controller=true".into(),
                format!("--release-burst={burst}"),
            ])
        };
        let Command::Serve(args) = parse("1").unwrap().command;
        assert_eq!(args.controller.release_burst, 1);
        for bad in ["0", "-3", "2.5", "many", ""] {
            let err = parse(bad).unwrap_err().to_string();
            assert!(
                err.contains("--release-burst") && err.contains("whole number >= 1"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn slow_client_and_thread_flags_are_checked() {
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "gpufair-webhook",
                "serve",
                "--tls-cert",
                "c.pem",
                "--tls-key",
                "k.pem",
            ];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv)
        };
        let Command::Serve(args) = parse(&["--header-read-timeout", "2s", "--worker-threads", "3"])
            .unwrap()
            .command;
        assert_eq!(args.header_read_timeout, Duration::from_secs(2));
        assert_eq!(args.worker_threads.map(NonZeroU16::get), Some(3));
        assert_eq!(args.admission_threads().get(), 3);
        let err = parse(&["--header-read-timeout", "0s"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("header-read-timeout") && err.contains("longer than zero"),
            "{err}"
        );
        for bad in ["0", "1025", "two"] {
            let err = parse(&["--worker-threads", bad]).unwrap_err().to_string();
            assert!(
                err.contains("worker-threads") && err.contains("1 to 1024"),
                "{err}"
            );
        }
    }

    #[test]
    fn lease_timing_flags_are_checked_against_each_other() {
        let serve = |extra: &[&str]| {
            let mut argv = vec![
                "gpufair-webhook",
                "serve",
                "--admission=false",
                "--controller=true",
            ];
            argv.extend_from_slice(extra);
            let Command::Serve(args) = Cli::try_parse_from(argv)?.command;
            Ok::<_, clap::Error>(args)
        };
        let defaults = serve(&[]).unwrap();
        assert_eq!(defaults.controller.lease_timing(), Ok(LeaseTiming::DEFAULT));
        let short = serve(&[
            "--lease-duration",
            "1s",
            "--lease-renew-deadline",
            "700ms",
            "--lease-retry-period",
            "0.2s",
        ])
        .unwrap();
        let timing = short.controller.lease_timing().unwrap();
        assert_eq!(timing.duration, Duration::from_secs(1));
        assert_eq!(timing.renew_deadline, Duration::from_millis(700));
        assert_eq!(timing.retry_period, Duration::from_millis(200));
        assert_eq!(short.check(), Ok(()));

        let err = serve(&["--lease-duration", "5s"])
            .unwrap()
            .check()
            .unwrap_err();
        assert!(
            err.contains("--lease-renew-deadline") && err.contains("--lease-duration"),
            "{err}"
        );
        let err = serve(&["--lease-retry-period", "7s"])
            .unwrap()
            .check()
            .unwrap_err();
        assert!(
            err.contains("--lease-retry-period") && err.contains("--lease-renew-deadline"),
            "{err}"
        );
        let err = serve(&["--lease-duration", "0s"]).unwrap_err().to_string();
        assert!(
            err.contains("lease-duration") && err.contains("longer than zero"),
            "{err}"
        );
        let err = serve(&["--lease-retry-period", "soon"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("lease-retry-period") && err.contains("30s"),
            "{err}"
        );
    }
}
