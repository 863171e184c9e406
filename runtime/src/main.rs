use std::io::IsTerminal;

use clap::Parser;
use gpufair_runtime::cli::{Cli, Command, LogFormat};
use tracing_subscriber::EnvFilter;

/// The controller's cycle and the admission path allocate many small, short-lived values;
/// mimalloc serves them at about half the CPU of glibc's allocator (BENCHMARKS.md, controller
/// cycle).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = EnvFilter::try_from_env("GPUFAIR_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.init(),
    }
    // The controller, watches and metrics; admission runs on a runtime of its own
    // (`--worker-threads`, `admission_runtime`).
    let runtime = gpufair_runtime::main_runtime::build()?;
    match cli.command {
        Command::Serve(args) => runtime.block_on(gpufair_runtime::serve(args))?,
    }
    Ok(())
}
