//! `kubectl gpufair`: gpufair's queues, the waiting workloads in release order, and why a pod
//! waits. A kubectl plugin: kubectl runs `kubectl-gpufair` from PATH for `kubectl gpufair ...`.
//!
//! It reads what the controller writes: one list of Queues (their status holds each queue's
//! figures and the head of its release order, bounded however many pods wait), and for `why`
//! one pod and that pod's latest `Waiting` Event. Nothing here writes.

mod cli;
mod fetch;
mod output;
mod pending;
mod queues;
mod table;
mod time;
mod why;

use std::io::Write;

use clap::Parser;

use crate::cli::{Cli, Command};

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: could not start: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(text) => match std::io::stdout().lock().write_all(text.as_bytes()) {
            // A reader that stops early (`| head`) closes the pipe: not a failure.
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => {
                std::process::ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("error: writing the output: {err}");
                std::process::ExitCode::FAILURE
            }
        },
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<String> {
    let cluster = fetch::Cluster::connect(&cli.kube).await?;
    let now = time::now();
    match &cli.command {
        Command::Queues => {
            let rows = queues::rows(&cluster.queues().await?);
            output::render(cli.output, &rows, |rows| queues::table(rows, now))
        }
        Command::Pending { queue } => {
            let all = cluster.queues().await?;
            if let Some(name) = queue
                && !all.iter().any(|q| q.metadata.name.as_deref() == Some(name))
            {
                anyhow::bail!("queue {name:?} not found (`kubectl gpufair queues` lists them)");
            }
            let found = pending::pending(&all, queue.as_deref());
            output::render(cli.output, &found, |p| pending::table(p, now))
        }
        Command::Why { pod } => {
            let namespace = cluster.namespace(cli.kube.namespace.as_deref());
            let object = cluster.pod(&namespace, pod).await?;
            let view = why::PodView::of(&object, &cli.gate);
            let queues = cluster.queues().await?;
            let event = match (&object.metadata.uid, view.gated) {
                (Some(uid), true) => cluster.latest_waiting_event(&namespace, uid).await?,
                _ => None,
            };
            let answer = why::why(&view, &queues, event, now)?;
            output::render(cli.output, &answer, |w| why::wrap(&w.paragraph))
        }
    }
}
