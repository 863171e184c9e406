//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    gpufair_core::fuzz_entry::replay_corpus(&fuzz, target, body);
}

#[test]
fn device_plugin_config_corpus_replays_cleanly() {
    replay(
        "device_plugin_config",
        gpufair_device_plugin::fuzz_entry::device_plugin_config,
    );
}

#[test]
fn fake_gpus_corpus_replays_cleanly() {
    replay("fake_gpus", gpufair_device_plugin::fuzz_entry::fake_gpus);
}
