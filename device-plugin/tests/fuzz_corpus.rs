//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

#[test]
fn device_plugin_config_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus(
        "device_plugin_config",
        gpufair_device_plugin::fuzz_entry::device_plugin_config,
    );
}

#[test]
fn fake_gpus_corpus_replays_cleanly() {
    gpufair_testkit::replay_corpus("fake_gpus", gpufair_device_plugin::fuzz_entry::fake_gpus);
}
