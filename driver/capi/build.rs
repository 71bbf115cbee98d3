//! On Linux the shared library gets the SONAME
//! `libhostcopy_stager.so.MAJOR`, as core/capi's `libhostcopy.so.MAJOR`,
//! so that `cargo xtask dist` can install it as
//! `libhostcopy_stager.so.MAJOR.MINOR.PATCH` with the two usual links and
//! programs keep loading any later library of the same major version.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let major = env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhostcopy_stager.so.{major}");
    }
}
