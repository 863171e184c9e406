//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    gpufair_core::fuzz_entry::replay_corpus(&fuzz, target, body);
}

#[test]
fn scenario_corpus_replays_cleanly() {
    replay("scenario", gpufair_sim::fuzz_entry::scenario);
}

#[test]
fn philly_trace_corpus_replays_cleanly() {
    replay("philly_trace", gpufair_sim::fuzz_entry::philly_trace);
}

#[test]
fn helios_trace_corpus_replays_cleanly() {
    replay("helios_trace", gpufair_sim::fuzz_entry::helios_trace);
}
