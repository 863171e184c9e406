//! Bodies of the fuzz targets that exercise this crate, behind a plain API so the same code runs
//! under libFuzzer (`fuzz/`, nightly) and in the stable replay of the kept corpus
//! (`tests/fuzz_corpus.rs`). Each body panics only when a promise is broken.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

use crate::admission::review;
use crate::metrics::Metrics;
use crate::queues::{QueueIndex, QueueStore, parse_queues};
use crate::shutdown::Shutdown;
use crate::state::AppState;

/// The queues admission decides against: `examples/queues.yaml`, plus a queue that allows
/// named priority classes, so every lookup path is reachable.
const QUEUES: &str = "apiVersion: gpufair.io/v1alpha1
kind: Queue
metadata: { name: llm }
spec: { weight: 3, guaranteed: 30, namespaces: [llm-research], minRunTime: 2h }
---
apiVersion: gpufair.io/v1alpha1
kind: Queue
metadata: { name: vision }
spec:
  weight: 2
  guaranteed: 20
  namespaces: [vision, shared]
  nodePool: { matchLabels: { gpu-type: a100 } }
---
apiVersion: gpufair.io/v1alpha1
kind: Queue
metadata: { name: batch }
spec: { namespaces: [shared], priorityClasses: [gpufair-backfill] }
";

/// When fuzzed reviews are answered (deadlines are compared with it).
pub(crate) const NOW_UNIX_S: i64 = 1_700_000_000;

pub(crate) fn state() -> &'static AppState {
    static STATE: OnceLock<AppState> = OnceLock::new();
    STATE.get_or_init(|| {
        let queues = QueueStore::default();
        let facts = parse_queues(QUEUES, Path::new("queues.yaml")).expect("built-in queues");
        queues.replace(QueueIndex::from_queues(facts));
        let policy = gpufair_api::config::AdmissionConfig::default()
            .to_policy()
            .expect("the default admission config converts");
        AppState {
            policy: ArcSwap::from_pointee(policy),
            queues: Arc::new(queues),
            families: Arc::default(),
            metrics: Arc::new(Metrics::new()),
            shutdown: Shutdown::new(),
        }
    })
}

/// An AdmissionReview body as the API server would POST it. A body that is not a review is
/// refused (HTTP 400); anything else is answered with a review whose own JSON reads back. When
/// the request reads as a `serde_json::Value` too, the answer is for the same request UID and
/// its patch, when there is one, applies cleanly to the pod it was made for.
///
/// A request need not read as a `Value` to be answered: JSON's grammar allows an escaped lone
/// surrogate (`"\ud800"`), which `Value` refuses and the webhook's reader does not always (Go's
/// decoder, in the API server, reads one as U+FFFD). The API server itself never sends one.
pub fn admission_review(data: &[u8]) {
    let Ok(answer) = review(data, state(), NOW_UNIX_S) else {
        return;
    };
    let out: Value = serde_json::from_slice(&answer.body).expect("the answer is JSON");
    let Ok(request) = serde_json::from_slice::<Value>(data) else {
        assert!(
            out["response"]["allowed"].is_boolean(),
            "an answer without a decision"
        );
        return;
    };
    let response = &out["response"];
    assert_eq!(
        response["uid"], request["request"]["uid"],
        "answer for another request"
    );
    assert!(response["allowed"].is_boolean());
    let Some(patch) = response["patch"].as_str() else {
        return;
    };
    assert_eq!(response["allowed"], true, "a denial carries a patch");
    let bytes = BASE64.decode(patch).expect("the patch is base64");
    let patch: json_patch::Patch =
        serde_json::from_slice(&bytes).expect("the patch is a JSON patch");
    let mut pod = request["request"]["object"].clone();
    if let Err(err) = json_patch::patch(&mut pod, &patch) {
        panic!("the patch does not apply to the pod it was made for: {err}");
    }
}

/// A `--queues-file`: every document a Queue, or the whole file refused naming the document.
pub fn queues_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_queues(text, Path::new("queues.yaml")) {
        Ok(facts) => {
            let count = facts.len();
            let index = QueueIndex::from_queues(facts);
            assert_eq!(index.len(), count, "queue names are unique");
        }
        Err(err) => {
            let message = err.to_string();
            assert!(
                message.contains("queues.yaml"),
                "error does not name the file: {message}"
            );
        }
    }
}
