//! Hands the linker this firmware's memory map and the start-up crate's
//! linker script, for the architecture being built.
//!
//! cortex-m-rt and riscv-rt each provide `link.x`, which includes
//! `memory.x`: the regions of the board the firmware runs on. The two boards
//! are QEMU's models (see `memory/`), so the firmware runs under
//! `qemu-system-arm -machine mps2-an386` and `qemu-system-riscv32 -machine virt`.

use std::env;
use std::fs;
use std::path::PathBuf;

fn main() {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let memory = match arch.as_str() {
        "arm" => "memory/cortex-m4-mps2-an386.x",
        "riscv32" => "memory/riscv32-virt.x",
        other => panic!(
            "hostcopy-firmware builds for thumbv7em-none-eabihf or \
             riscv32imac-unknown-none-elf, not for target_arch `{other}`"
        ),
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    if let Err(error) = fs::copy(memory, out.join("memory.x")) {
        panic!("copying {memory} to {}: {error}", out.display());
    }
    println!("cargo:rustc-link-search={}", out.display());
    // cortex-m-rt's link.x includes memory.x itself; riscv-rt's expects it first.
    if arch == "riscv32" {
        println!("cargo:rustc-link-arg-bins=-Tmemory.x");
    }
    println!("cargo:rustc-link-arg-bins=-Tlink.x");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={memory}");
}
