//! Fuzzes the webhook's --queues-file (Queue manifests, many documents); the body lives in `gpufair_webhook::fuzz_entry` so the kept corpus also runs on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpufair_webhook::fuzz_entry::queues_file(data));
