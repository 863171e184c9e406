//! Bodies of the fuzz targets that exercise this crate, behind a plain API so the same code runs
//! under libFuzzer (`fuzz/`, nightly) and in the stable replay of the kept corpus
//! (`tests/fuzz_corpus.rs`). Each body panics only when a promise is broken.

use gpufair_core::ledger::{QueueLedger, UsageSample};
use gpufair_core::params::FairShareParams;

use crate::config::Config;
use crate::queue::Queue;

/// The gpufair config file (webhook and controller): parsed and validated, or refused with an
/// error naming a key. A config that validates converts into every policy form it feeds.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::from_yaml(text, "fuzz.yaml") else {
        return;
    };
    let policy = config
        .admission
        .to_policy()
        .expect("a validated admission config converts");
    assert!(!policy.gpu_resources.is_empty());
    let options = config
        .decide_options()
        .expect("a validated config converts into decision options");
    let params = options.fairshare;
    // The ledger runs on these parameters every cycle: one window of use must stay cheap.
    let mut ledger = QueueLedger::new(0.0, &params);
    ledger.record(&params, params.window_s, sample());
    let shares = ledger.shares(&params, params.window_s);
    assert!(shares.usage_share.is_finite() && shares.fair_share.is_finite());
}

/// A Queue manifest as the API server stores it (YAML or JSON), spec and status: validation
/// either accepts the spec or names the field, and a stored ledger is either refused or can be
/// used as the controller uses it after a restart.
pub fn queue_manifest(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(queue) = serde_yaml::from_str::<Queue>(text) else {
        return;
    };
    let name = queue.metadata.name.as_deref().unwrap_or_default();
    match queue.spec.validate(name) {
        Ok(()) => {
            let min_run = queue.spec.min_run_time_s().expect("validated minRunTime");
            assert!(min_run.is_finite() && min_run >= 0.0);
        }
        Err(err) => assert!(
            err.to_string().contains(err.field),
            "error does not name its field: {err}"
        ),
    }
    let Some(stored) = queue.status.as_ref().and_then(|s| s.ledger.as_ref()) else {
        return;
    };
    let Ok(mut ledger) = QueueLedger::try_from(stored) else {
        return;
    };
    let params = FairShareParams::default();
    let now = 1_700_000_000.0;
    let _ = ledger.shares(&params, now);
    ledger.record(&params, now, sample());
    let shares = ledger.shares(&params, now);
    assert!(
        shares.usage_share.is_finite() && shares.fair_share.is_finite(),
        "{shares:?}"
    );
}

fn sample() -> UsageSample {
    UsageSample {
        allocated: 4.0,
        utilized: 2.0,
        entitled: 3.0,
        capacity: 16.0,
    }
}
