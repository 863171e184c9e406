//! `gpufair-apiserver-standin`: the API-server stand-in as a process, for local runs of the
//! real components without a cluster. It writes a kubeconfig, serves until SIGTERM or Ctrl-C,
//! and runs the scheduler and kubelet stand-ins.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use gpufair_integration::standin::{NodeSpec, StandIn, StandInOptions};

#[derive(Debug, Parser)]
#[command(
    name = "gpufair-apiserver-standin",
    version,
    about = "An API-server stand-in (with scheduler and kubelet stand-ins) for running gpufair without a cluster"
)]
struct Cli {
    /// Address of the HTTPS server.
    #[arg(long, env = "GPUFAIR_STANDIN_LISTEN", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write the kubeconfig clients use (KUBECONFIG=...).
    #[arg(long, env = "GPUFAIR_STANDIN_KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Directory of CustomResourceDefinition YAML files to serve.
    #[arg(long, env = "GPUFAIR_STANDIN_CRDS", default_value = "deploy/crds")]
    crds: PathBuf,
    /// YAML manifests to create at start (PriorityClasses, Queues, webhook configurations...).
    #[arg(long = "load", env = "GPUFAIR_STANDIN_LOAD", value_delimiter = ',')]
    load: Vec<PathBuf>,
    /// A static node: NAME or NAME=RESOURCE:QUANTITY,... (e.g. gpu-1=nvidia.com/gpu:8,cpu:32).
    #[arg(long = "node", env = "GPUFAIR_STANDIN_NODES", value_delimiter = ';')]
    nodes: Vec<String>,
    /// Changes kept for watches to resume from; older versions get 410 Gone.
    #[arg(long, env = "GPUFAIR_STANDIN_HISTORY", default_value_t = 1000)]
    history_limit: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, env = "GPUFAIR_STANDIN_BOOKMARK_SECONDS", default_value_t = 1.0)]
    bookmark_seconds: f64,
}

fn node_spec(text: &str) -> anyhow::Result<NodeSpec> {
    let (name, resources) = text.split_once('=').unwrap_or((text, ""));
    anyhow::ensure!(
        !name.is_empty(),
        "--node {text:?}: the node name is empty; expected NAME or NAME=RESOURCE:QUANTITY,..."
    );
    let mut node = NodeSpec::new(name);
    for entry in resources.split(',').filter(|e| !e.is_empty()) {
        let (resource, quantity) = entry.rsplit_once(':').with_context(|| {
            format!("--node {text:?}: {entry:?} is not RESOURCE:QUANTITY (e.g. nvidia.com/gpu:8)")
        })?;
        gpufair_integration::standin::quantity::parse_milli(quantity)
            .map_err(|e| anyhow::anyhow!("--node {text:?}: {e}"))?;
        node = node.resource(resource, quantity);
    }
    Ok(node)
}

async fn terminated() {
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPUFAIR_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    anyhow::ensure!(
        cli.bookmark_seconds.is_finite() && cli.bookmark_seconds > 0.0,
        "--bookmark-seconds {}: expected a positive number of seconds",
        cli.bookmark_seconds
    );
    let nodes = cli
        .nodes
        .iter()
        .map(|n| node_spec(n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let options = StandInOptions {
        listen: cli.listen,
        crd_dir: Some(cli.crds.clone()),
        kubeconfig: Some(cli.kubeconfig.clone()),
        history_limit: cli.history_limit,
        bookmark_interval: Duration::from_secs_f64(cli.bookmark_seconds),
        ..StandInOptions::default()
    };
    let standin = StandIn::start(options)
        .await
        .with_context(|| format!("starting the stand-in on {}", cli.listen))?;
    for path in &cli.load {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        standin
            .create_yaml(&text, &path.display().to_string())
            .await
            .with_context(|| format!("creating the objects of {}", path.display()))?;
    }
    for node in nodes {
        standin.add_node(node).await.context("adding a node")?;
    }
    tracing::info!(
        address = %standin.address(),
        kubeconfig = %cli.kubeconfig.display(),
        "gpufair-apiserver-standin serving"
    );
    terminated().await;
    tracing::info!("shutting down");
    standin.shutdown().await;
    Ok(())
}
