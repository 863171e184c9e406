//! Orderly stop on SIGTERM: readiness turns off first (so the Service stops sending new
//! reviews), the server keeps answering for `--shutdown-delay`, then stops accepting and lets
//! in-flight requests finish within `--shutdown-grace`.

use tokio::sync::watch;

/// Two one-way switches: `stopping` (readiness off) and `draining` (accept loop stops).
#[derive(Clone)]
pub struct Shutdown {
    stopping: watch::Sender<bool>,
    draining: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        Self {
            stopping: watch::channel(false).0,
            draining: watch::channel(false).0,
        }
    }

    pub fn begin_stopping(&self) {
        self.stopping.send_replace(true);
    }

    pub fn begin_draining(&self) {
        self.stopping.send_replace(true);
        self.draining.send_replace(true);
    }

    pub fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Resolves once stopping has begun.
    pub async fn stopping(&self) {
        let mut rx = self.stopping.subscribe();
        // The sender lives in `self`, so `wait_for` cannot see a closed channel.
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// Resolves once draining has begun.
    pub async fn draining(&self) {
        let mut rx = self.draining.subscribe();
        let _ = rx.wait_for(|drain| *drain).await;
    }
}
