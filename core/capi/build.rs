//! Link settings of the shared library that rustc does not choose itself.
//!
//! On Linux the shared library gets the SONAME `libhostcopy.so.MAJOR`, so a
//! program linked against it records that name and keeps loading any later
//! library of the same major version (`cargo xtask dist` installs the
//! file as `libhostcopy.so.MAJOR.MINOR.PATCH` with the two usual links).
//!
//! Makes the i686 MinGW DLL linkable from C through `hostcopy.h`. On 32-bit x86 Windows `hostcopy_fn` is `__stdcall` (`CUDA_CB`), so a C
//! caller that includes the header references the decorated `_hostcopy_fn@4`.
//! The static library defines that name. The DLL does not export it: rustc
//! hands GNU ld a `.def` file that lists the plain name `hostcopy_fn`, so the
//! DLL's export table and its import library `libhostcopy.dll.a` carry
//! only `hostcopy_fn`, and a C program linked against the DLL fails with an
//! undefined reference to `hostcopy_fn@4`. `-Wl,--add-stdcall-alias` does not
//! help: ld applies it only to automatic exports, never to a `.def` file's.
//!
//! So for those targets this writes a second `.def` file that exports
//! `hostcopy_fn@4` as well; ld merges every `.def` file on its command line.
//! The plain `hostcopy_fn` stays exported for `GetProcAddress` and ctypes.
//! `cargo xtask abi` links the C consumer against the import library to prove it.

use std::env;
use std::fs;
use std::path::PathBuf;

/// The `.def` entry for the stdcall name: 4 bytes of arguments (`void *user_data`).
const STDCALL_EXPORTS: &str = "\
; Written by hostcopy-capi's build.rs: the name a C caller of hostcopy.h
; links against on i686 Windows, next to the plain one rustc exports.
EXPORTS
  hostcopy_fn@4
";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let major = env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhostcopy.so.{major}");
    }
    if !links_with_gnu_ld_as_stdcall() {
        return;
    }
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let def = out_dir.join("hostcopy_stdcall.def");
    if let Err(error) = fs::write(&def, STDCALL_EXPORTS) {
        panic!("writing {}: {error}", def.display());
    }
    // gcc hands a file it does not compile to the linker as an input, which is
    // how ld reads a `.def` file; only the DLL build gets it.
    println!("cargo:rustc-cdylib-link-arg={}", def.display());
}

/// 32-bit x86 Windows with the GNU toolchain (i686-pc-windows-gnu): where
/// `CUDA_CB` is `__stdcall` and rustc links DLLs with GNU ld and a `.def`
/// file. The `gnullvm` targets (lld) and MSVC (link.exe) are left alone: other
/// linkers, not verified here.
fn links_with_gnu_ld_as_stdcall() -> bool {
    let cfg = |key: &str| env::var(key).unwrap_or_default();
    cfg("CARGO_CFG_TARGET_ARCH") == "x86"
        && cfg("CARGO_CFG_TARGET_OS") == "windows"
        && cfg("CARGO_CFG_TARGET_ENV") == "gnu"
        && cfg("CARGO_CFG_TARGET_ABI") != "llvm"
}
