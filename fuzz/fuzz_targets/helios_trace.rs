//! Fuzzes Helios trace CSV; the body lives in `gpufair_sim::fuzz_entry` so the kept corpus also runs on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpufair_sim::fuzz_entry::helios_trace(data));
