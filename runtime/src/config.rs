//! The config file: loaded at start (a bad file stops the start), reloaded on change (a bad
//! file keeps the previous config).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpufair_api::{Config, ConfigError};
use gpufair_controller::SharedOptions;
use gpufair_core::admission::DecideOptions;
use gpufair_core::mutation::AdmissionPolicy;

use gpufair_webhook::metrics::{Metrics, ReloadOutcome};
use gpufair_webhook::reload::{Fingerprint, watch_files};
use gpufair_webhook::shutdown::Shutdown;
use gpufair_webhook::state::AppState;

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

/// What a config file sets at run time: the admission policy and the controller's decision
/// options (score weights, fair-share settings per pool).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub policy: AdmissionPolicy,
    pub options: DecideOptions,
}

/// Everything from `path` that can change at run time, validated as a whole: a file that is
/// half right changes nothing.
pub fn load_runtime(path: Option<&Path>) -> Result<Loaded, ConfigFileError> {
    let config = load_config(path)?;
    Ok(Loaded {
        policy: config.admission.to_policy()?,
        options: config.decide_options()?,
    })
}

/// Puts a loaded config into effect: the admission policy for the next request, the decision
/// options for the controller's next cycle, the score weights into the metrics.
pub fn apply(
    loaded: Loaded,
    state: &AppState,
    controller: Option<&SharedOptions>,
    metrics: &Metrics,
) {
    metrics.set_score_weights(&loaded.options.score);
    state.policy.store(Arc::new(loaded.policy));
    if let Some(options) = controller {
        options.replace(loaded.options);
    }
}

/// Reloads the config whenever the file differs from `loaded_from` (the file as it was just
/// before the config in use was read); a file that does not validate is refused whole and the
/// previous config stays.
pub async fn watch(
    path: PathBuf,
    loaded_from: Fingerprint,
    state: Arc<AppState>,
    controller: Option<SharedOptions>,
    metrics: Arc<Metrics>,
    interval: Duration,
    shutdown: Shutdown,
) {
    let paths = vec![path.clone()];
    watch_files(
        paths,
        interval,
        loaded_from,
        shutdown,
        move || match load_runtime(Some(&path)) {
            Ok(loaded) => {
                apply(loaded, &state, controller.as_ref(), &metrics);
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

#[cfg(test)]
mod tests {
    use super::*;
    use gpufair_webhook::queues::QueueStore;

    fn state(metrics: &Arc<Metrics>) -> AppState {
        AppState {
            policy: arc_swap::ArcSwap::from_pointee(load_policy(None).unwrap()),
            queues: Arc::new(QueueStore::default()),
            families: Arc::default(),
            metrics: metrics.clone(),
            shutdown: Shutdown::new(),
        }
    }

    #[test]
    fn a_reloaded_file_reaches_the_controller_and_the_metrics() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "releaseScore: {urgency: 6, userTier: 0}\nfairshare:\n  pools:\n    inference: {enabled: false}\n",
        )
        .unwrap();
        let metrics = Arc::new(Metrics::new());
        let state = state(&metrics);
        let controller = SharedOptions::default();
        let loaded = load_runtime(Some(&path)).unwrap();
        apply(loaded, &state, Some(&controller), &metrics);
        let options = controller.current();
        assert_eq!((options.score.urgency, options.score.user_tier), (6.0, 0.0));
        assert!(!options.fairshare_of("inference").time_aware);
        let text = metrics.encode();
        assert!(
            text.contains("gpufair_release_score_weight{part=\"urgency\"} 6.0"),
            "{text}"
        );
    }

    #[test]
    fn a_file_with_one_bad_value_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "releaseScore: {urgency: -2}\n").unwrap();
        let err = load_runtime(Some(&path)).unwrap_err().to_string();
        assert!(err.contains("releaseScore.urgency"), "{err}");
        std::fs::write(&path, "fairshare: {pools: {a: {k: -1}}}\n").unwrap();
        let err = load_runtime(Some(&path)).unwrap_err().to_string();
        assert!(err.contains("fairshare.pools.a.k"), "{err}");
    }

    #[tokio::test]
    async fn an_edit_between_loading_and_watching_is_reloaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, "releaseScore: {urgency: 2}\n").unwrap();
        let metrics = Arc::new(Metrics::new());
        let state = Arc::new(state(&metrics));
        let controller = SharedOptions::default();
        let loaded_from = gpufair_webhook::reload::fingerprint(std::slice::from_ref(&path));
        apply(
            load_runtime(Some(&path)).unwrap(),
            &state,
            Some(&controller),
            &metrics,
        );
        assert_eq!(controller.current().score.urgency, 2.0);
        // Edited before the watcher has looked at the file even once.
        std::fs::write(&path, "releaseScore: {urgency: 7}\n").unwrap();
        let shutdown = Shutdown::new();
        let watching = tokio::spawn(watch(
            path,
            loaded_from,
            state,
            Some(controller.clone()),
            metrics,
            Duration::from_millis(10),
            shutdown.clone(),
        ));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while controller.current().score.urgency != 7.0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.begin_draining();
        watching.await.unwrap();
        assert_eq!(controller.current().score.urgency, 7.0);
    }
}
