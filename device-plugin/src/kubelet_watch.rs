//! Detecting kubelet restarts.
//!
//! A restarting kubelet deletes every socket in the device plugin directory and re-creates
//! `kubelet.sock`; registrations do not survive. Watching the directory catches both the
//! re-creation and the loss of our own sockets; after a short debounce the caller restarts its
//! servers and registers again.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::proto::deviceplugin::KUBELET_SOCKET;

/// Collects a burst of file events (a restart deletes many sockets at once) into one restart.
pub const DEBOUNCE: Duration = Duration::from_millis(250);

#[derive(Debug, thiserror::Error)]
#[error("cannot watch {path}: {message}")]
pub struct WatchError {
    pub path: PathBuf,
    pub message: String,
}

/// A directory event that may mean kubelet restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirEvent {
    KubeletSocketCreated,
    Removed(PathBuf),
}

/// Keeps the OS watch alive; dropping it stops the events.
pub struct DirWatch {
    _watcher: notify::RecommendedWatcher,
    pub events: mpsc::UnboundedReceiver<DirEvent>,
}

pub fn watch(dir: &Path) -> Result<DirWatch, WatchError> {
    let (tx, events) = mpsc::unbounded_channel();
    let kubelet = dir.join(KUBELET_SOCKET);
    let mut watcher = notify::recommended_watcher(move |result: notify::Result<notify::Event>| {
        let Ok(event) = result else { return };
        for path in event.paths {
            let mapped = match event.kind {
                EventKind::Create(_) if path == kubelet => Some(DirEvent::KubeletSocketCreated),
                EventKind::Remove(_) => Some(DirEvent::Removed(path)),
                _ => None,
            };
            if let Some(mapped) = mapped {
                let _ = tx.send(mapped);
            }
        }
    })
    .map_err(|err| WatchError {
        path: dir.to_path_buf(),
        message: err.to_string(),
    })?;
    watcher
        .watch(dir, RecursiveMode::NonRecursive)
        .map_err(|err| WatchError {
            path: dir.to_path_buf(),
            message: err.to_string(),
        })?;
    Ok(DirWatch {
        _watcher: watcher,
        events,
    })
}

/// Whether a batch of events calls for re-registration, judged against the directory as it is
/// now: kubelet's socket was re-created and exists, or one of our sockets is gone. Removals we
/// caused ourselves while restarting are harmless: by now the socket is back.
pub fn needs_restart(events: &[DirEvent], kubelet_dir: &Path, our_sockets: &[PathBuf]) -> bool {
    let kubelet_back = events.contains(&DirEvent::KubeletSocketCreated)
        && kubelet_dir.join(KUBELET_SOCKET).exists();
    kubelet_back || our_sockets.iter().any(|s| !s.exists())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sees_kubelet_socket_creation_and_our_socket_removal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ours = dir.path().join("gpufair-gpu.sock");
        std::fs::write(&ours, b"").expect("create");
        let mut watch = watch(dir.path()).expect("watch");
        std::fs::remove_file(&ours).expect("remove");
        std::fs::write(dir.path().join(KUBELET_SOCKET), b"").expect("kubelet");
        let mut seen = Vec::new();
        while seen.len() < 2 {
            let event = tokio::time::timeout(Duration::from_secs(5), watch.events.recv())
                .await
                .expect("event in time")
                .expect("open");
            seen.push(event);
        }
        assert_eq!(
            seen,
            vec![
                DirEvent::Removed(ours.clone()),
                DirEvent::KubeletSocketCreated
            ]
        );
        assert!(needs_restart(
            &seen,
            dir.path(),
            std::slice::from_ref(&ours)
        ));
        // Our own removal, already repaired, is no reason to restart.
        std::fs::write(&ours, b"").expect("recreate");
        assert!(!needs_restart(
            &[DirEvent::Removed(ours.clone())],
            dir.path(),
            &[ours]
        ));
    }
}
