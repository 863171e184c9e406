//! CPU time and heap allocations of one admission review, by phase (not a timed test; numbers
//! go to BENCHMARKS.md).
//!
//! `cargo bench -p gpufair-webhook --bench review` answers the load bench's AdmissionReview
//! (a Deployment's GPU training pod as the API server sends it) on one thread, in this process,
//! with no TLS or HTTP, and prints per call: wall time, and the number and bytes of heap
//! allocations counted by a wrapping global allocator. `GPUFAIR_BENCH_CALLS` sets the calls per
//! phase (default 50,000).

// A global allocator can only be written with `unsafe`; this one only counts and delegates.
#![allow(unsafe_code)]

#[path = "shared/review.rs"]
mod shared;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use gpufair_core::mutation::{Decision, plan};
use gpufair_webhook::admission::{read_in_one_pass, review, review_in_two_passes};
use gpufair_webhook::facts::pod_facts;
use gpufair_webhook::patch::build_patch;
use gpufair_webhook::pod::{Pod, PodShape};
use gpufair_webhook::queues::{QueueIndex, load_queues_file};
use gpufair_webhook::response::ReviewResponse;
use gpufair_webhook::state::AppState;

/// Counts every allocation (and reallocation) made through the system allocator.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: delegates every call to `System` unchanged; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which `System` shares.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc`/`realloc` above, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as for `dealloc`, and the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The load bench's queues, trimmed to the one namespace the review uses and a few others.
const QUEUES: &str = "apiVersion: gpufair.io/v1alpha1
kind: Queue
metadata: {name: queue-0}
spec:
  weight: 1
  guaranteed: 2
  namespaces: [ml, shared-0]
  nodePool:
    matchLabels: {gpufair.io/pool: pool-0}
  priorityClasses: [team-high]
---
apiVersion: gpufair.io/v1alpha1
kind: Queue
metadata: {name: queue-1}
spec:
  weight: 1
  guaranteed: 2
  namespaces: [team-1, shared-1]
  nodePool:
    matchLabels: {gpufair.io/pool: pool-1}
  priorityClasses: [team-high]
";

const NOW_UNIX_S: i64 = 1_700_000_000;

fn main() {
    let calls: u32 = std::env::var("GPUFAIR_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let state = state();
    let body = review_body();
    let object = serde_json::to_vec(
        &serde_json::from_slice::<serde_json::Value>(&body).expect("review")["request"]["object"],
    )
    .expect("object");
    let answer = review(&body, &state, NOW_UNIX_S).expect("the review is answered");
    println!(
        "review {} bytes in, {} bytes out ({:?}); {calls} calls per phase",
        body.len(),
        answer.body.len(),
        answer.outcome
    );

    measure("whole review", calls, || {
        black_box(review(&body, &state, NOW_UNIX_S).expect("answered"));
    });
    measure(
        "whole review, read in two passes (envelope, then pod)",
        calls,
        || {
            black_box(review_in_two_passes(&body, &state, NOW_UNIX_S).expect("answered"));
        },
    );
    measure("  scan of the body, nothing built", calls, || {
        black_box(serde_json::from_slice::<serde::de::IgnoredAny>(&body).expect("json"));
    });
    measure("  review and pod fields read in one pass", calls, || {
        black_box(read_in_one_pass(&body).expect("review"));
    });
    measure("  pod object parse (object alone)", calls, || {
        black_box(serde_json::from_slice::<Pod>(&object).expect("pod"));
    });
    let pod = || serde_json::from_slice::<Pod>(&object).expect("pod");
    measure_with("  pod shape", calls, pod, |pod| {
        black_box(PodShape::of(&pod));
    });
    measure_with("  pod facts (moved out of the parse)", calls, pod, |pod| {
        black_box(pod_facts(pod, "ml"));
    });
    let facts = pod_facts(pod(), "ml");
    let policy = state.policy.load();
    measure("  plan", calls, || {
        black_box(state.queues.read(|q| plan(&facts, q, &policy, NOW_UNIX_S)));
    });
    let Decision::Admit(planned) = state.queues.read(|q| plan(&facts, q, &policy, NOW_UNIX_S))
    else {
        panic!("the bench pod is admitted");
    };
    let shape = PodShape::of(&pod());
    measure("  patch build", calls, || {
        black_box(build_patch(&shape, &planned.mutations));
    });
    let patch = build_patch(&shape, &planned.mutations);
    measure(
        "  patch encode (JSON, buffer sized as admission sizes it)",
        calls,
        || {
            black_box(patch.to_json());
        },
    );
    let mut response = ReviewResponse::allowed("uid-1");
    response.patch = Some(patch.to_json());
    measure("  response encode (patch in base64)", calls, || {
        black_box(response.encode().expect("response"));
    });
}

fn state() -> AppState {
    let queues = gpufair_webhook::queues::QueueStore::default();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("queues.yaml");
    std::fs::write(&file, QUEUES).expect("queues file");
    queues.replace(QueueIndex::from_queues(
        load_queues_file(&file).expect("queues"),
    ));
    AppState {
        policy: arc_swap::ArcSwap::from_pointee(
            gpufair_api::config::AdmissionConfig::default()
                .to_policy()
                .expect("default policy"),
        ),
        queues: Arc::new(queues),
        families: Arc::default(),
        metrics: Arc::new(gpufair_webhook::metrics::Metrics::new()),
        shutdown: gpufair_webhook::shutdown::Shutdown::new(),
    }
}

/// Runs `call` `calls` times after a warm-up and prints time and allocations per call.
fn measure(name: &str, calls: u32, mut call: impl FnMut()) {
    measure_with(name, calls, || (), |()| call());
}

/// Like `measure`, with an input built by `setup` before each call and outside the count.
fn measure_with<T>(name: &str, calls: u32, setup: impl Fn() -> T, mut call: impl FnMut(T)) {
    for _ in 0..calls / 10 {
        call(setup());
    }
    let mut elapsed = Duration::ZERO;
    let (mut allocations, mut bytes) = (0, 0);
    for _ in 0..calls {
        let input = setup();
        let (a, b) = (
            ALLOCATIONS.load(Ordering::Relaxed),
            BYTES.load(Ordering::Relaxed),
        );
        let started = Instant::now();
        call(input);
        elapsed += started.elapsed();
        allocations += ALLOCATIONS.load(Ordering::Relaxed) - a;
        bytes += BYTES.load(Ordering::Relaxed) - b;
    }
    let per = f64::from(calls);
    println!(
        "{name:<58} {:>8.2} us  {:>6.1} allocations  {:>7.0} bytes allocated",
        elapsed.as_secs_f64() * 1e6 / per,
        allocations as f64 / per,
        bytes as f64 / per
    );
}

/// The load bench's review (`benches/load.rs`).
fn review_body() -> Vec<u8> {
    shared::training_pod_review("uid-1")
}
