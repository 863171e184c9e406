use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use gpufair_device_plugin::cli::{Args, LogFormat};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_tracing(args.log_format);
    match serve(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("gpufair-device-plugin: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: Args) -> anyhow::Result<()> {
    // Two workers are plenty for a handful of gRPC servers and keep the footprint small.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let stop = CancellationToken::new();
        gpufair_device_plugin::shutdown::cancel_on_signal(stop.clone())?;
        gpufair_device_plugin::run(args, stop).await?;
        Ok(())
    })
}
