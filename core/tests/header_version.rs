//! `include/hostcopy.h` carries the versions of this crate: the library
//! version (`HOSTCOPY_VERSION_*`, from Cargo.toml) and the ABI version.

use hostcopy_core::ABI_VERSION;

const HEADER: &str = include_str!("../include/hostcopy.h");

/// The value of `#define NAME value` in the header.
fn define(name: &str) -> u32 {
    let mut values = HEADER.lines().filter_map(|line| {
        let rest = line.strip_prefix("#define ")?.strip_prefix(name)?;
        rest.strip_prefix(' ')?.trim().parse::<u32>().ok()
    });
    let value = values
        .next()
        .unwrap_or_else(|| panic!("hostcopy.h has no `#define {name} <number>`"));
    assert!(values.next().is_none(), "hostcopy.h defines {name} twice");
    value
}

#[test]
fn header_version_is_the_crate_version() {
    let crate_version = [
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_PATCH"),
    ]
    .map(|part| part.parse::<u32>().unwrap());
    let header_version =
        ["MAJOR", "MINOR", "PATCH"].map(|part| define(&format!("HOSTCOPY_VERSION_{part}")));
    assert_eq!(
        header_version, crate_version,
        "update HOSTCOPY_VERSION_* in include/hostcopy.h to the version in core/Cargo.toml"
    );
}

#[test]
fn header_abi_version_is_the_crate_abi_version() {
    assert_eq!(define("HOSTCOPY_ABI_VERSION"), ABI_VERSION);
    assert_eq!(hostcopy_core::hostcopy_abi_version(), ABI_VERSION);
}
