//! `include/hostcopy.h` opens with the SPDX identifier of this crate's
//! licence, so a header copied into another project on its own still says
//! under which terms.

const HEADER: &str = include_str!("../include/hostcopy.h");

#[test]
fn the_header_opens_with_the_crates_spdx_licence_identifier() {
    let expected = format!(
        "/* SPDX-License-Identifier: {} */",
        env!("CARGO_PKG_LICENSE")
    );
    assert_eq!(
        HEADER.lines().next(),
        Some(expected.as_str()),
        "make `{expected}` the first line of include/hostcopy.h (the licence of core/Cargo.toml)"
    );
}
