//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

#[test]
fn controller_snapshot_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus(
        "controller_snapshot",
        gpufair_controller::fuzz_entry::controller_snapshot,
    );
}
