//! Test support shared by gpufair's crates, kept out of the product: nothing here is a
//! dependency of a binary.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// The workspace's `fuzz/` folder: kept corpus in `corpus/<target>`, inputs that once broke a
/// promise in `regressions/<target>`.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// Replays fuzz target `target`'s kept corpus (which must exist) and its regressions (if any)
/// through `body`, the target's body, as the cargo-fuzz target runs it. Each crate's
/// `tests/fuzz_corpus.rs` calls this for its targets, so the fuzzing results are checked on
/// stable in every `cargo test`. Panics naming every input that panics.
pub fn replay_corpus(target: &str, body: fn(&[u8])) {
    replay_corpus_in(&fuzz_dir(), target, body);
}

fn replay_corpus_in(fuzz_dir: &Path, target: &str, body: fn(&[u8])) {
    let mut replayed = 0;
    let mut failed = Vec::new();
    for kind in ["corpus", "regressions"] {
        let dir = fuzz_dir.join(kind).join(target);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refuses_x(data: &[u8]) {
        assert!(!data.contains(&b'x'), "an x");
    }

    #[test]
    fn replays_corpus_and_regressions_and_names_what_panics() {
        let dir = tempfile_dir();
        std::fs::create_dir_all(dir.join("corpus/t")).unwrap();
        std::fs::create_dir_all(dir.join("regressions/t")).unwrap();
        std::fs::write(dir.join("corpus/t/a"), b"fine").unwrap();
        replay_corpus_in(&dir, "t", refuses_x);
        std::fs::write(dir.join("regressions/t/bad"), b"x").unwrap();
        let outcome = catch_unwind(|| replay_corpus_in(&dir, "t", refuses_x));
        let message = *outcome
            .expect_err("a panicking input")
            .downcast::<String>()
            .unwrap();
        assert!(message.contains("regressions/t/bad"), "{message}");
        let missing = catch_unwind(|| replay_corpus_in(&dir, "none", refuses_x));
        assert!(missing.is_err(), "a target without a corpus");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        std::env::temp_dir().join(format!("gpufair-testkit-{}", std::process::id()))
    }

    #[test]
    fn every_kept_corpus_is_found() {
        assert!(
            fuzz_dir().join("corpus").is_dir(),
            "{}",
            fuzz_dir().display()
        );
    }
}
