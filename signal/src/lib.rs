//! The signals that stop gpufair's services, in one place for every binary.
//!
//! Handlers are installed when [`StopSignals::install`] (or [`stop_requested`]) is called, not
//! when a future is first polled: a service calls it before it reports ready, so a SIGTERM that
//! arrives once it is ready always starts the orderly stop and never meets the default action,
//! which would kill the process mid-request.

use std::fmt;
use std::future::Future;

/// Which stop signal arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGTERM: what kubelet sends when a pod is deleted.
    Terminate,
    /// SIGINT: Ctrl-C in a terminal.
    Interrupt,
}

impl fmt::Display for StopSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Terminate => "SIGTERM",
            Self::Interrupt => "SIGINT",
        })
    }
}

/// SIGTERM and SIGINT handlers, installed.
#[cfg(unix)]
pub struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl StopSignals {
    /// Installs both handlers now. Must be called inside a Tokio runtime; fails only if the
    /// operating system refuses a handler.
    pub fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT.
    pub async fn recv(&mut self) -> StopSignal {
        tokio::select! {
            _ = self.terminate.recv() => StopSignal::Terminate,
            _ = self.interrupt.recv() => StopSignal::Interrupt,
        }
    }
}

/// Installs the handlers now and returns a future that resolves on the first stop signal.
/// Where a handler cannot be installed, says so and falls back to Ctrl-C alone, so a service
/// still starts and can still be stopped.
#[cfg(unix)]
pub fn stop_requested() -> impl Future<Output = ()> + Send + 'static {
    let installed = StopSignals::install();
    async move {
        match installed {
            Ok(mut signals) => {
                let signal = signals.recv().await;
                tracing::info!(%signal, "stopping");
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops the process");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Resolves on Ctrl-C, the one stop signal outside Unix.
#[cfg(not(unix))]
pub fn stop_requested() -> impl Future<Output = ()> + Send + 'static {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    fn raise(signal: i32) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(std::process::id().to_string())
            .status()
            .expect("kill(1) runs");
        assert!(status.success(), "kill -{signal} failed");
    }

    // One test for both signals: they are process-wide, and tests run on parallel threads.
    #[tokio::test(flavor = "current_thread")]
    async fn each_stop_signal_is_caught_and_named_once_installed() {
        let mut signals = StopSignals::install().expect("handlers install");
        for (number, expected) in [(15, StopSignal::Terminate), (2, StopSignal::Interrupt)] {
            raise(number);
            let got = tokio::time::timeout(Duration::from_secs(10), signals.recv())
                .await
                .unwrap_or_else(|_| panic!("{expected} not seen within 10 s"));
            assert_eq!(got, expected);
        }
        assert_eq!(StopSignal::Terminate.to_string(), "SIGTERM");
        assert_eq!(StopSignal::Interrupt.to_string(), "SIGINT");
    }
}
