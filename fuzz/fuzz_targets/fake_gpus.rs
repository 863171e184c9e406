//! Fuzzes the fake-GPU file; the body lives in `gpufair_device_plugin::fuzz_entry` so the kept corpus also runs on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpufair_device_plugin::fuzz_entry::fake_gpus(data));
