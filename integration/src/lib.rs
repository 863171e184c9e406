//! Helpers for gpufair's end-to-end tests: find (and if needed build) the real binaries so each
//! test starts them as separate processes, exactly as a cluster would; and [`standin`], an
//! API-server stand-in (with scheduler and kubelet stand-ins) that they run against.

pub mod cluster;
pub mod standin;
pub mod storm;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Serialises builds (several tests in one process may ask for binaries at once) and
/// remembers what was built, so each binary is built once per test process.
static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());

/// The workspace's root directory.
pub fn workspace_root() -> PathBuf {
    // Cargo sets CARGO_MANIFEST_DIR when it runs a test; prefer it to the compile-time value,
    // which is wrong when several checkouts share one target directory and reuse this crate's
    // compiled library.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    Path::new(&manifest_dir)
        .parent()
        .expect("integration/ lives inside the workspace")
        .to_path_buf()
}

fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        None => workspace_root().join("target"),
    }
}

/// Variables cargo sets for the crate it compiles or runs (besides `CARGO_PKG_*`).
const CRATE_VARIABLES: [&str; 9] = [
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
    "OUT_DIR",
];

/// Path to the binary `name` of workspace package `package`, built with the same profile as the
/// tests. The build runs once per test process; cargo makes it a no-op when nothing changed.
pub fn binary(package: &str, name: &str) -> PathBuf {
    let mut built = BUILT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let key = format!("{package}/{name}");
    if let Some((_, path)) = built.iter().find(|(k, _)| *k == key) {
        return path.clone();
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(cargo);
    // Cargo sets these for the test or bench that runs this; build scripts (ring's) declare
    // `rerun-if-env-changed` on some of them, so passing them on would make this build differ
    // from a plain `cargo build` and rebuild ring and everything above it (rustls, kube) each
    // time the two alternate.
    for (key, _) in std::env::vars_os() {
        if key
            .to_str()
            .is_some_and(|k| k.starts_with("CARGO_PKG_") || CRATE_VARIABLES.contains(&k))
        {
            command.env_remove(key);
        }
    }
    let status = command
        .current_dir(workspace_root())
        .args(["build", "--quiet", "-p", package, "--bin", name])
        .status()
        .unwrap_or_else(|err| panic!("could not run cargo to build {name}: {err}"));
    assert!(status.success(), "cargo build of {name} failed: {status}");
    let path = target_dir().join("debug").join(name);
    assert!(
        path.exists(),
        "built {name} but {} does not exist",
        path.display()
    );
    built.push((key, path.clone()));
    path
}
