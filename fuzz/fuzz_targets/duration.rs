//! Fuzzes the one duration grammar; the body lives in `gpufair_core::fuzz_entry` so the kept corpus also runs on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpufair_core::fuzz_entry::duration(data));
