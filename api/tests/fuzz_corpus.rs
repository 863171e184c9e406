//! Replays the kept fuzz corpus (`fuzz/corpus/<target>`) and every input that once broke a
//! promise (`fuzz/regressions/<target>`) through the same bodies the cargo-fuzz targets run, so
//! the fuzzing results are checked on stable in every `cargo test`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

fn replay(target: &str, body: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut replayed = 0;
    let mut failed = Vec::new();
    for kind in ["corpus", "regressions"] {
        let dir = fuzz.join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            assert_eq!(kind, "regressions", "{} is missing", dir.display());
            continue;
        };
        for entry in entries {
            let path = entry.expect("a readable directory").path();
            let data = std::fs::read(&path).expect("a readable input");
            if catch_unwind(AssertUnwindSafe(|| body(&data))).is_err() {
                failed.push(path.display().to_string());
            }
            replayed += 1;
        }
    }
    assert!(replayed > 0, "no corpus for {target}");
    assert!(
        failed.is_empty(),
        "{target}: these inputs panic: {failed:#?}"
    );
}

#[test]
fn config_corpus_replays_cleanly() {
    replay("config", gpufair_api::fuzz_entry::config);
}

#[test]
fn queue_manifest_corpus_replays_cleanly() {
    replay("queue_manifest", gpufair_api::fuzz_entry::queue_manifest);
}
