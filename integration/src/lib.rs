//! Helpers for gpufair's end-to-end tests: find (and if needed build) the real binaries so each
//! test starts them as separate processes, exactly as a cluster would; [`controlplane`], a real
//! Kubernetes control plane built from its Go modules, that they run against; [`cluster`],
//! gpufair installed on it; and [`faults`], a proxy in front of the API server that answers
//! chosen requests with errors; and [`tools`], helm and promtool built from their Go modules.

pub mod cluster;
pub mod controlplane;
pub mod faults;
pub mod prometheus;
pub mod storm;
pub mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

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

pub(crate) fn target_dir() -> PathBuf {
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

/// gpufair's own binaries the end-to-end tests start.
#[derive(Debug, Clone)]
pub struct GpufairBinaries {
    pub webhook: PathBuf,
    pub device_plugin: PathBuf,
    pub certs: PathBuf,
    pub sim: PathBuf,
    pub try_it: PathBuf,
}

static GPUFAIR_BINARIES: std::sync::OnceLock<Result<GpufairBinaries, String>> =
    std::sync::OnceLock::new();

/// gpufair's binaries, built once per test process by `cargo test --workspace --no-run`: the
/// very build `cargo test --workspace` makes, so under that command it finds everything built
/// and costs a second; run alone (`cargo test -p gpufair-integration`), it builds the rest of
/// the workspace once, with the features `cargo test --workspace` would use, so the two never
/// rebuild each other's dependencies.
pub fn gpufair_binaries() -> Result<GpufairBinaries, cluster::ClusterError> {
    GPUFAIR_BINARIES
        .get_or_init(build_workspace)
        .clone()
        .map_err(cluster::ClusterError::Setup)
}

fn build_workspace() -> Result<GpufairBinaries, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut command = Command::new(cargo);
    // Cargo sets these for the test or bench that runs this; build scripts (ring's) declare
    // `rerun-if-env-changed` on some of them, so passing them on would make this build differ
    // from a plain `cargo test` and rebuild ring and everything above it.
    for (key, _) in std::env::vars_os() {
        if key
            .to_str()
            .is_some_and(|k| k.starts_with("CARGO_PKG_") || CRATE_VARIABLES.contains(&k))
        {
            command.env_remove(key);
        }
    }
    eprintln!(
        "gpufair end-to-end: making sure gpufair's binaries are built (cargo test --workspace --no-run; \
         done already under `cargo test --workspace`, else about 10 minutes cold on two cores)"
    );
    let started = std::time::Instant::now();
    let status = command
        .current_dir(workspace_root())
        .args(["test", "--workspace", "--no-run", "--quiet"])
        .status()
        .map_err(|err| format!("could not run cargo to build gpufair's binaries: {err}"))?;
    if !status.success() {
        return Err(format!("cargo test --workspace --no-run failed: {status}"));
    }
    let elapsed = started.elapsed().as_secs_f64();
    if elapsed > 5.0 {
        eprintln!("gpufair end-to-end: binaries built in {elapsed:.0} s");
    }
    let dir = target_dir().join("debug");
    let path = |name: &str| -> Result<PathBuf, String> {
        let path = dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "cargo built the workspace but {} does not exist",
                path.display()
            ))
        }
    };
    Ok(GpufairBinaries {
        webhook: path("gpufair-webhook")?,
        device_plugin: path("gpufair-device-plugin")?,
        certs: path("gpufair-certs")?,
        sim: path("gpufair-sim")?,
        try_it: path("gpufair-try")?,
    })
}

/// Path to gpufair binary `name` (`gpufair-webhook`, `gpufair-sim`, ...), built by
/// [`gpufair_binaries`]'s one workspace build. Panics with cargo's failure if that build failed:
/// a test cannot go on without the program it starts.
pub fn binary(name: &str) -> PathBuf {
    if let Err(error) = gpufair_binaries() {
        panic!("{error}");
    }
    let path = target_dir().join("debug").join(name);
    assert!(
        path.is_file(),
        "{} was not built by cargo test --workspace --no-run",
        path.display()
    );
    path
}
