//! Turning SIGTERM / SIGINT into a cancellation every task watches.

use gpufair_signal::StopSignals;
use tokio_util::sync::CancellationToken;

/// Installs the stop signals' handlers now and cancels `stop` on the first of them. Fails only
/// if the handlers cannot be installed.
pub fn cancel_on_signal(stop: CancellationToken) -> std::io::Result<()> {
    let mut signals = StopSignals::install()?;
    tokio::spawn(async move {
        tokio::select! {
            signal = signals.recv() => tracing::info!(%signal, "shutting down"),
            () = stop.cancelled() => return,
        }
        stop.cancel();
    });
    Ok(())
}
