//! Bodies of the fuzz targets that exercise this crate, behind a plain API so the same code runs
//! under libFuzzer (`fuzz/`, nightly) and in the stable replay of the kept corpus
//! (`tests/fuzz_corpus.rs`). Each body panics only when a promise is broken.

use std::collections::BTreeMap;

use crate::labels::{
    LabelError, parse_deadline_annotation, parse_deadline_label, parse_workload_labels,
};

/// Labels and annotations: the input is lines `key=value` (a label) or `@key=value` (an
/// annotation), so the fuzzer can reach every key with short inputs. Every parser must answer
/// without panicking, and every error must quote the key and value it refuses, since the webhook
/// returns these messages verbatim to users.
pub fn labels(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    for line in text.lines() {
        let (target, line) = match line.strip_prefix('@') {
            Some(rest) => (&mut annotations, rest),
            None => (&mut labels, line),
        };
        let (key, value) = line.split_once('=').unwrap_or((line, ""));
        target.insert(key.to_string(), value.to_string());
        check_error(parse_deadline_label(value).err());
        check_error(parse_deadline_annotation(value).err());
    }
    match parse_workload_labels(&labels, &annotations) {
        Ok(parsed) => {
            if let Some(gang) = &parsed.gang {
                assert!(gang.min_member >= 1, "a gang of {}", gang.min_member);
            }
        }
        Err(err) => check_error(Some(err)),
    }
}

fn check_error(err: Option<LabelError>) {
    if let Some(err) = err {
        let message = err.to_string();
        assert!(
            message.contains(err.key) && message.contains(&format!("{:?}", err.value)),
            "error does not name its key and value: {message}"
        );
    }
}

/// Durations: parsing never panics, and a parsed duration prints in a form that parses back
/// to the same whole seconds.
pub fn duration(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(seconds) = crate::duration::parse_duration(text) {
        assert!(
            seconds >= 0.0 && seconds.is_finite(),
            "{text:?} -> {seconds}"
        );
        let printed = crate::duration::format_duration(seconds);
        let again = crate::duration::parse_duration(&printed)
            .unwrap_or_else(|err| panic!("{printed:?} (from {text:?}) does not parse: {err}"));
        // Formatting rounds to whole seconds; far beyond u64 seconds it saturates.
        if seconds < 1e15 {
            assert_eq!(again, seconds.round(), "{text:?} printed as {printed:?}");
        }
    }
}
