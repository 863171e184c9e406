//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

#[test]
fn admission_review_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus(
        "admission_review",
        gpufair_webhook::fuzz_entry::admission_review,
    );
}

#[test]
fn queues_file_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus("queues_file", gpufair_webhook::fuzz_entry::queues_file);
}
