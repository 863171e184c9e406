//! Fuzzes one stored Queue: spec validation and the status ledger; the body lives in `gpufair_api::fuzz_entry` so the kept corpus also runs on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpufair_api::fuzz_entry::queue_manifest(data));
