//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    gpufair_core::fuzz_entry::replay_corpus(&fuzz, target, body);
}

#[test]
fn admission_review_corpus_replays_cleanly() {
    replay(
        "admission_review",
        gpufair_webhook::fuzz_entry::admission_review,
    );
}

#[test]
fn queues_file_corpus_replays_cleanly() {
    replay("queues_file", gpufair_webhook::fuzz_entry::queues_file);
}
