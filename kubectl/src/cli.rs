//! The command line, with kubectl's own flags for the cluster and namespace.

use clap::{Args, Parser, Subcommand};

use crate::output::Format;

/// gpufair's queues and waiting workloads, and why a pod waits.
#[derive(Debug, Parser)]
#[command(name = "kubectl gpufair", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub kube: KubeArgs,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// The scheduling gate gpufair's webhook adds (its `--gate`).
    #[arg(long, global = true, env = "GPUFAIR_GATE", default_value = gpufair_core::mutation::DEFAULT_GATE)]
    pub gate: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Per queue: weight, effective weight, guarantee, fair share, allocated, usage share over
    /// the window, waiting workloads and the oldest wait.
    Queues,
    /// Waiting workloads in release order: per pool, queues in their order of service, each
    /// queue's workloads in its release order (the first of each queue that its status lists).
    Pending {
        /// Only this queue.
        queue: Option<String>,
    },
    /// Why a pod waits: its queue, its place, the reason, its release score part by part and
    /// what would release it.
    Why {
        /// The pod's name (in --namespace, else the context's namespace).
        pod: String,
    },
}

/// Which cluster and namespace, as kubectl takes them. `KUBECONFIG` is read as kubectl reads it.
#[derive(Debug, Args, Clone, Default)]
pub struct KubeArgs {
    /// Path to the kubeconfig file (else `KUBECONFIG`, else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, global = true)]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// The pod's namespace (`why`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_flags_parse_before_and_after_the_command() {
        let cli = Cli::try_parse_from([
            "kubectl-gpufair",
            "--context",
            "prod",
            "why",
            "train-0",
            "-n",
            "research",
            "-o",
            "yaml",
        ])
        .unwrap();
        assert_eq!(cli.kube.context.as_deref(), Some("prod"));
        assert_eq!(cli.kube.namespace.as_deref(), Some("research"));
        assert_eq!(cli.output, Format::Yaml);
        assert!(matches!(cli.command, Command::Why { ref pod } if pod == "train-0"));
        let err = Cli::try_parse_from(["kubectl-gpufair", "queues", "-o", "wide"]).unwrap_err();
        assert!(err.to_string().contains("table, json, yaml"), "{err}");
    }
}
