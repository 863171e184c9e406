//! Noticing that files changed, by polling.
//!
//! Polling rather than inotify: a mounted Secret or ConfigMap is updated by swapping a `..data`
//! symlink, which inotify on the file itself does not report reliably, and polling works the
//! same on every platform. The fingerprint follows symlinks and includes the inode, so a swap
//! is seen even when size and mtime stay equal; small files are also hashed.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::shutdown::Shutdown;

/// Files up to this size are hashed as well, which catches an in-place rewrite within one
/// mtime tick. Certificates and config files are far smaller; a queues file may be larger.
const HASH_LIMIT: u64 = 256 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
    hash: Option<u64>,
}

/// The state of a set of files; `None` entries are files that do not exist or cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Vec<Option<FileStamp>>);

fn stamp(path: &Path) -> Option<FileStamp> {
    let meta = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(&meta);
    #[cfg(not(unix))]
    let inode = 0;
    let hash = if meta.len() <= HASH_LIMIT {
        let bytes = std::fs::read(path).ok()?;
        let mut hasher = DefaultHasher::new();
        bytes.hash(&mut hasher);
        Some(hasher.finish())
    } else {
        None
    };
    Some(FileStamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode,
        hash,
    })
}

impl Fingerprint {
    /// Differs from every real fingerprint: a watcher started from it reloads at its first
    /// check.
    pub fn unseen() -> Self {
        Self(Vec::new())
    }
}

pub fn fingerprint(paths: &[PathBuf]) -> Fingerprint {
    Fingerprint(paths.iter().map(|p| stamp(p)).collect())
}

/// Calls `on_change` whenever the fingerprint of `paths` differs from the last one seen,
/// until draining begins. File checks and `on_change` (which reads and parses files) run on the
/// blocking pool, so a large queues file never stalls request handling.
pub async fn watch_files<F>(
    paths: Vec<PathBuf>,
    interval: Duration,
    initial: Fingerprint,
    shutdown: Shutdown,
    on_change: F,
) where
    F: Fn() + Send + Sync + 'static,
{
    let on_change = std::sync::Arc::new(on_change);
    let mut last = initial;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.draining() => return,
        }
        let to_check = paths.clone();
        let Ok(current) = tokio::task::spawn_blocking(move || fingerprint(&to_check)).await else {
            continue;
        };
        if current != last {
            last = current;
            let callback = on_change.clone();
            // A panic inside the callback would only lose this one reload.
            let _ = tokio::task::spawn_blocking(move || callback()).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_sees_rewrites_and_removal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let paths = vec![path.clone()];
        let missing = fingerprint(&paths);
        std::fs::write(&path, "one").unwrap();
        let first = fingerprint(&paths);
        assert_ne!(missing, first);
        assert_eq!(first, fingerprint(&paths));
        // Same length, possibly the same mtime tick: the hash tells them apart.
        std::fs::write(&path, "two").unwrap();
        assert_ne!(first, fingerprint(&paths));
        std::fs::remove_file(&path).unwrap();
        assert_eq!(missing, fingerprint(&paths));
    }
}
