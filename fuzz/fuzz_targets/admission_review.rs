//! Fuzzes AdmissionReview decoding, mutation planning and the JSON patch; the body lives in `gpufair_webhook::fuzz_entry` so the kept corpus also runs on stable.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gpufair_webhook::fuzz_entry::admission_review(data));
