//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

#[test]
fn labels_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus("labels", gpufair_core::fuzz_entry::labels);
}

#[test]
fn duration_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus("duration", gpufair_core::fuzz_entry::duration);
}
