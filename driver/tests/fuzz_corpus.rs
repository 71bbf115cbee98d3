//! Replays the fuzz target's corpus (`driver/fuzz/corpus/pack_and_copy`)
//! through the same harness, so the target keeps building and every input
//! that once mattered keeps passing. One test in its own binary: the harness
//! checks exact changes of the process-wide rejection count.

#[path = "../fuzz/harness.rs"]
mod harness;

#[test]
fn fuzz_corpus_replays_clean() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/pack_and_copy");
    let mut inputs: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|entry| entry.unwrap().path())
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{dir} holds no inputs");
    for path in &inputs {
        let data = std::fs::read(path).unwrap();
        harness::run(&data);
    }
    println!("replayed {} inputs", inputs.len());
}
