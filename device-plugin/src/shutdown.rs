//! Turning SIGTERM / SIGINT into a cancellation every task watches.

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Cancels `stop` on the first SIGTERM or SIGINT. Fails only if the handlers cannot be installed.
pub fn cancel_on_signal(stop: CancellationToken) -> std::io::Result<()> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            () = stop.cancelled() => return,
        }
        stop.cancel();
    });
    Ok(())
}
