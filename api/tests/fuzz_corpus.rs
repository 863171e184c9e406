//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

#[test]
fn config_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus("config", gpufair_api::fuzz_entry::config);
}

#[test]
fn queue_manifest_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus("queue_manifest", gpufair_api::fuzz_entry::queue_manifest);
}
