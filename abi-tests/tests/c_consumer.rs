//! The header, compiled by the C compiler, agrees with the Rust record; the
//! host function keeps its contract when C calls it.

use abi_tests::layout::{Layout, RUST_LAYOUT};

#[test]
fn c_and_rust_agree_on_the_record_layout() {
    assert_eq!(abi_tests::c_layout(), RUST_LAYOUT);
}

#[test]
fn rust_layout_is_three_words() {
    let word = size_of::<usize>() as u32;
    assert_eq!(RUST_LAYOUT.size, 3 * word);
    assert_eq!(RUST_LAYOUT.align, word);
    assert_eq!(
        (RUST_LAYOUT.dst, RUST_LAYOUT.src, RUST_LAYOUT.nbytes),
        (0, word, 2 * word)
    );
    assert_eq!(
        (
            RUST_LAYOUT.dst_size,
            RUST_LAYOUT.src_size,
            RUST_LAYOUT.nbytes_size
        ),
        (word, word, word)
    );
    assert_eq!(RUST_LAYOUT.pointer_size, word);
}

#[test]
fn report_values_follow_the_field_order() {
    let values: [u32; Layout::FIELDS] = [24, 8, 0, 8, 16, 8, 8, 4, 1, 8];
    let layout = Layout::from_values(values);
    assert_eq!(
        (layout.dst_size, layout.src_size, layout.nbytes_size),
        (8, 8, 4)
    );
    assert_eq!((layout.abi_version, layout.pointer_size), (1, 8));
}

#[test]
fn c_consumer_contract_checks_pass() {
    if let Err(line) = abi_tests::c_contract() {
        panic!("abi-tests/c/consumer.c:{line}: check failed");
    }
}
