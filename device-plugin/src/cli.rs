//! Command-line flags; each has an environment variable for DaemonSet manifests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Parser)]
#[command(
    name = "gpufair-device-plugin",
    version,
    about = "Kubelet device plugin for NVIDIA GPUs: whole, MIG and shared, with health recovery and per-pod usage"
)]
pub struct Args {
    /// Kubelet's device plugin directory (holds kubelet.sock and the plugin sockets).
    #[arg(
        long,
        env = "GPUFAIR_KUBELET_DIR",
        default_value = "/var/lib/kubelet/device-plugins"
    )]
    pub kubelet_dir: PathBuf,
    /// Kubelet's PodResources socket.
    #[arg(
        long,
        env = "GPUFAIR_POD_RESOURCES_SOCKET",
        default_value = "/var/lib/kubelet/pod-resources/kubelet.sock"
    )]
    pub pod_resources_socket: PathBuf,
    /// Plugin configuration (sharing, health, allocation options).
    #[arg(long, env = "GPUFAIR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Use a fake backend described by this YAML file instead of NVML.
    #[arg(long, env = "GPUFAIR_FAKE_GPUS")]
    pub fake_gpus: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR/metrics.
    #[arg(long, env = "GPUFAIR_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// This node's name (the GpuNodeReport's name). Defaults to the host name.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Also write each usage report as JSON to this file.
    #[arg(long, env = "GPUFAIR_REPORT_FILE")]
    pub report_file: Option<PathBuf>,
    /// How often per-pod usage is measured and reported (e.g. 10s). Keep it within the
    /// driver's utilization history (about 14 s): a longer interval averages only its last part.
    #[arg(long, env = "GPUFAIR_UTILIZATION_INTERVAL", default_value = "10s", value_parser = parse_interval)]
    pub utilization_interval: Duration,
    /// Where the host's /proc is mounted (to map GPU processes to pods).
    #[arg(long, env = "GPUFAIR_PROC_ROOT", default_value = "/proc")]
    pub proc_root: PathBuf,
    /// Log format.
    #[arg(long, env = "GPUFAIR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = crate::duration::parse(text).map_err(|err| err.to_string())?;
    if interval < Duration::from_millis(100) {
        return Err(format!(
            "{text:?} is too short: the interval must be at least 100ms"
        ));
    }
    Ok(interval)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_interval_parsing() {
        let args = Args::try_parse_from(["gpufair-device-plugin"]).expect("defaults");
        assert_eq!(
            args.kubelet_dir,
            PathBuf::from("/var/lib/kubelet/device-plugins")
        );
        assert_eq!(args.utilization_interval, Duration::from_secs(10));
        let args =
            Args::try_parse_from(["x", "--utilization-interval", "1m30s"]).expect("interval");
        assert_eq!(args.utilization_interval, Duration::from_secs(90));
        let err = Args::try_parse_from(["x", "--utilization-interval", "fast"])
            .expect_err("bad")
            .to_string();
        assert!(err.contains("250ms, 30s, 10m"), "{err}");
        assert!(Args::try_parse_from(["x", "--utilization-interval", "5ms"]).is_err());
    }
}
