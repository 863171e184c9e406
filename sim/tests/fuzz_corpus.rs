//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

#[test]
fn scenario_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus("scenario", gpufair_sim::fuzz_entry::scenario);
}

#[test]
fn philly_trace_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus("philly_trace", gpufair_sim::fuzz_entry::philly_trace);
}

#[test]
fn helios_trace_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus("helios_trace", gpufair_sim::fuzz_entry::helios_trace);
}
