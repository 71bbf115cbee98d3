//! Packs records from fuzzed bytes and arguments, runs every record that
//! packs, and checks the bytes against a model. `harness.rs` holds the logic;
//! `driver/tests/fuzz_corpus.rs` replays the seed corpus through it in CI.

#![no_main]

#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::run(data));
