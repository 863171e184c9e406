//! Fuzzes the controller's cycle over arbitrary cached objects; the body lives in `gpufair_controller::fuzz_entry` so the kept corpus also runs on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(
    |data: &[u8]| gpufair_controller::fuzz_entry::controller_snapshot(data)
);
