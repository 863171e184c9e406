//! The config file: loaded at start (a bad file stops the start), reloaded on change (a bad
//! file keeps the previous config).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpufair_api::{Config, ConfigError};
use gpufair_core::mutation::AdmissionPolicy;

use crate::metrics::{Metrics, ReloadOutcome};
use crate::reload::{fingerprint, watch_files};
use crate::shutdown::Shutdown;
use crate::state::AppState;

#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

/// The whole config from `path`, or the defaults when no file is given.
pub fn load_config(path: Option<&Path>) -> Result<Config, ConfigFileError> {
    match path {
        None => Ok(Config::default()),
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            Ok(Config::from_yaml(&text, &path.display().to_string())?)
        }
    }
}

/// The admission policy from `path`, or the defaults when no file is given.
pub fn load_policy(path: Option<&Path>) -> Result<AdmissionPolicy, ConfigFileError> {
    Ok(load_config(path)?.admission.to_policy()?)
}

/// Reloads the config whenever the file changes.
pub async fn watch(
    path: PathBuf,
    state: Arc<AppState>,
    metrics: Arc<Metrics>,
    interval: Duration,
    shutdown: Shutdown,
) {
    let paths = vec![path.clone()];
    let initial = fingerprint(&paths);
    watch_files(
        paths,
        interval,
        initial,
        shutdown,
        move || match load_policy(Some(&path)) {
            Ok(policy) => {
                state.policy.store(Arc::new(policy));
                metrics.config_reload(ReloadOutcome::Success);
                tracing::info!(path = %path.display(), "config reloaded");
            }
            Err(err) => {
                metrics.config_reload(ReloadOutcome::Error);
                tracing::error!(error = %err, "new config refused; keeping the previous one");
            }
        },
    )
    .await;
}
