//! With the `cuda` feature, lets cuda-driver-sys's `-lcuda` link on every
//! Linux machine without making libcuda a run-time dependency.
//!
//! The CUDA layer never links the driver: it opens libcuda when first
//! needed (`src/cuda/ffi.rs`), so that a binary starts anywhere and says
//! clearly when there is no driver. cuda-driver-sys, which the layer uses
//! for its types only, still asks the linker for `-lcuda`. With no symbol
//! taken from it, nothing of it ends up in the binary (no `NEEDED` entry:
//! Rust links with `--as-needed`), but the linker must find a library by
//! that name. This script writes one into `OUT_DIR`: a linker script that
//! adds nothing, so the link needs neither a driver nor a C compiler.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "cuda")]
    link_stand_in();
}

#[cfg(feature = "cuda")]
fn link_stand_in() {
    use std::path::PathBuf;
    use std::{env, fs};

    if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return; // Elsewhere cuda-driver-sys finds the toolkit's import library.
    }
    let dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("link");
    fs::create_dir_all(&dir).expect("create the link folder");
    fs::write(
        dir.join("libcuda.so"),
        "/* hostcopy-driver: stands in for libcuda at link time only; the CUDA layer\n   \
         opens the driver at run time, so nothing is taken from here. */\n",
    )
    .expect("write the link-time stand-in for libcuda");
    println!("cargo:rustc-link-search=native={}", dir.display());
}
