//! The targets `cargo xtask abi` checks: one row each, as data.
//!
//! A row says how clang names the target (for the layout and symbol checks),
//! what the layout must show, which Debian packages link and run code for it,
//! cargo's per-target settings (`CARGO_TARGET_<TRIPLE>_LINKER`, `_RUNNER`,
//! `_RUSTFLAGS`, so that `cargo test --target T` runs through the runner), and
//! how the C consumer is built and what runs the core's tests. The host is
//! x86_64 Debian: Linux targets run natively or under qemu-user, bare-metal
//! ones under QEMU system emulation with semihosting, Windows ones under wine,
//! wasm32 under node. Runner scripts live in `xtask/scripts/`.

/// Byte order of a target, for decoding the layout reports in its objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endian {
    Little,
    Big,
}

/// The object format: only ELF symbols carry a type (STT_FUNC) to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Elf,
    Coff,
    Wasm,
}

/// What runs the core's contract on the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tests {
    /// `cargo test -p hostcopy-core --target T`, through the runner.
    Cargo,
    /// `abi-tests/firmware` (no_std, its own panic handler), `cargo run` through the runner.
    Firmware,
    /// The runner on the C library's `hostcopy.wasm`: `abi-tests/wasm/run.mjs`
    /// calls the exported `hostcopy_fn` on records in linear memory.
    WasmExports,
    /// Nothing on this machine can: the reason, shown in the table.
    NotRun(&'static str),
}

/// Which C libraries `core/capi` builds for the target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Libraries {
    /// Its crate types: the static library, and the shared one wherever
    /// rustc makes one (not on bare metal).
    All,
    /// The static library alone; the shared one is not built, for this
    /// reason (shown in the table).
    StaticOnly(&'static str),
}

/// One supported target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Target {
    pub(crate) triple: &'static str,
    /// clang's `--target` and the flags that select the same ABI as rustc.
    pub(crate) clang: &'static [&'static str],
    pub(crate) pointer_width: u32,
    pub(crate) endian: Endian,
    pub(crate) format: Format,
    /// Debian packages that link and run its programs (clang, llvm, lld: every row).
    pub(crate) apt: &'static [&'static str],
    /// `CARGO_TARGET_<T>_LINKER`; None where rustc's default linker works.
    pub(crate) linker: Option<&'static str>,
    /// `CARGO_TARGET_<T>_RUSTFLAGS`.
    pub(crate) rustflags: &'static str,
    /// `CARGO_TARGET_<T>_RUNNER` (a script path is relative to the workspace); empty: native.
    pub(crate) runner: &'static [&'static str],
    /// The C consumer's compiler and link flags; `clang` gets [`clang`](Self::clang) too.
    pub(crate) cc: &'static [&'static str],
    /// The C consumer's entry point and platform files, in `abi-tests/c`.
    pub(crate) c_main: &'static [&'static str],
    /// `.def` files in `abi-tests/c` that become import libraries
    /// (`llvm-dlltool`) for the C consumer's link.
    pub(crate) import_libs: &'static [&'static str],
    pub(crate) libraries: Libraries,
    pub(crate) tests: Tests,
}

impl Target {
    /// The `CARGO_TARGET_<TRIPLE>_` prefix of cargo's per-target settings.
    pub(crate) fn cargo_env_prefix(&self) -> String {
        let triple = self.triple.to_ascii_uppercase().replace(['-', '.'], "_");
        format!("CARGO_TARGET_{triple}_")
    }

    /// The file name rustc gives the static library: `hostcopy.lib` with the
    /// MSVC toolchain, `libhostcopy.a` everywhere else.
    pub(crate) fn staticlib_name(&self) -> &'static str {
        if self.triple.ends_with("-msvc") { "hostcopy.lib" } else { "libhostcopy.a" }
    }
}

/// Every row needs these: clang for the layout and symbol checks (and the
/// bare-metal and wasm C consumers, with lld), llvm-nm and llvm-readobj.
pub(crate) const COMMON_APT: &[&str] = &["clang", "llvm", "lld"];

const HOSTED: &[&str] = &["main.c"];
const QEMU_SYSTEM: &str = "xtask/scripts/qemu-system.sh";
/// The Windows rows' runner; `wineserver.rs` starts and stops its servers.
pub(crate) const WINE: &str = "xtask/scripts/wine-runner.sh";
const RISCV_VIRT: &str = "abi-tests/c/bare/riscv_virt.ld";
const MPS2_AN386: &str = "abi-tests/c/bare/mps2_an386.ld";
const LE32: (u32, Endian) = (32, Endian::Little);
const LE64: (u32, Endian) = (64, Endian::Little);

/// A row with the defaults of a hosted Linux target: `cc` compiles the C consumer
/// and links (also for cargo), `main.c` is its entry point, `cargo test` runs.
const fn row(
    triple: &'static str,
    clang: &'static [&'static str],
    (pointer_width, endian): (u32, Endian),
    apt: &'static [&'static str],
    cc: &'static [&'static str],
    runner: &'static [&'static str],
) -> Target {
    let (format, linker, rustflags, c_main, tests) = (Format::Elf, Some(cc[0]), "", HOSTED, Tests::Cargo);
    let (import_libs, libraries): (&[&str], _) = (&[], Libraries::All);
    Target {
        triple,
        clang,
        pointer_width,
        endian,
        format,
        apt,
        linker,
        rustflags,
        runner,
        cc,
        c_main,
        import_libs,
        libraries,
        tests,
    }
}

/// The rows: `row(triple, clang flags, (bits, byte order), Debian packages, C
/// compiler and flags (the linker too on hosted targets), runner)`, and what
/// differs from a hosted Linux target.
#[rustfmt::skip]
pub(crate) const TARGETS: &[Target] = &[
    Target { linker: None, ..row("x86_64-unknown-linux-gnu", &["--target=x86_64-linux-gnu"], LE64,
        &["gcc", "libc6-dev"], &["gcc"], &[]) },
    // A static program runs on the x86_64 kernel as it is, with no i386
    // loader or libraries (gcc-multilib would conflict with the cross gccs);
    // rustc makes no shared library with crt-static.
    Target { rustflags: "-C target-feature=+crt-static", libraries: Libraries::StaticOnly("no cdylib with +crt-static"),
        ..row("i686-unknown-linux-gnu", &["--target=i686-linux-gnu"], LE32,
            &["gcc-i686-linux-gnu", "libc6-dev-i386-cross"], &["i686-linux-gnu-gcc", "-static"], &[]) },
    row("aarch64-unknown-linux-gnu", &["--target=aarch64-linux-gnu"], LE64,
        &["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross", "qemu-user"], &["aarch64-linux-gnu-gcc"],
        &["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]),
    row("armv7-unknown-linux-gnueabihf", &["--target=armv7-linux-gnueabihf"], LE32,
        &["gcc-arm-linux-gnueabihf", "libc6-dev-armhf-cross", "qemu-user"], &["arm-linux-gnueabihf-gcc"],
        &["qemu-arm", "-L", "/usr/arm-linux-gnueabihf"]),
    row("powerpc-unknown-linux-gnu", &["--target=powerpc-linux-gnu"], (32, Endian::Big),
        &["gcc-powerpc-linux-gnu", "libc6-dev-powerpc-cross", "qemu-user"], &["powerpc-linux-gnu-gcc"],
        &["qemu-ppc", "-L", "/usr/powerpc-linux-gnu"]),
    row("s390x-unknown-linux-gnu", &["--target=s390x-linux-gnu"], (64, Endian::Big),
        &["gcc-s390x-linux-gnu", "libc6-dev-s390x-cross", "qemu-user"], &["s390x-linux-gnu-gcc"],
        &["qemu-s390x", "-L", "/usr/s390x-linux-gnu"]),
    // POWER systems: the 64-bit little-endian ELFv2 ABI, which CUDA ships for.
    row("powerpc64le-unknown-linux-gnu", &["--target=powerpc64le-linux-gnu"], LE64,
        &["gcc-powerpc64le-linux-gnu", "libc6-dev-ppc64el-cross", "qemu-user"], &["powerpc64le-linux-gnu-gcc"],
        &["qemu-ppc64le", "-L", "/usr/powerpc64le-linux-gnu"]),
    // Bare metal: clang and lld link the C consumer as a firmware with the
    // start-up code and linker script of QEMU's board; semihosting reports.
    Target { linker: None, c_main: &["freestanding.c", "bare/semihosting.c", "bare/riscv.c"], tests: Tests::Firmware,
        ..row("riscv32imac-unknown-none-elf", &["--target=riscv32-unknown-elf", "-march=rv32imac", "-mabi=ilp32"], LE32,
            &["qemu-system-misc"], &["clang", "-nostdlib", "-fuse-ld=lld", "-mno-relax", "-T", RISCV_VIRT],
            &[QEMU_SYSTEM, "riscv32"]) },
    Target { linker: None, c_main: &["freestanding.c", "bare/semihosting.c", "bare/cortex_m.c"], tests: Tests::Firmware,
        ..row("thumbv7em-none-eabihf", &["--target=thumbv7em-none-eabi", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"], LE32,
            &["qemu-system-arm"], &["clang", "-nostdlib", "-fuse-ld=lld", "-T", MPS2_AN386], &[QEMU_SYSTEM, "arm"]) },
    Target { format: Format::Coff, ..row("x86_64-pc-windows-gnu", &["--target=x86_64-w64-windows-gnu"], LE64,
        &["gcc-mingw-w64-x86-64", "wine", "wine64"], &["x86_64-w64-mingw32-gcc"], &[WINE, "x86_64"]) },
    // wine64 runs it in WoW64 mode with wine's i386 PE DLLs (see setup.rs).
    Target { format: Format::Coff, ..row("i686-pc-windows-gnu", &["--target=i686-w64-windows-gnu"], LE32,
        &["gcc-mingw-w64-i686", "wine", "wine64", "libwine:i386"], &["i686-w64-mingw32-gcc"], &[WINE, "i686"]) },
    // The MSVC toolchain, without MSVC: link.exe, the C runtime and the
    // Windows SDK are not packaged for Debian, and rustc links every Rust
    // program and DLL with them, so neither the core's tests nor hostcopy.dll
    // are built. rustc makes the static library `hostcopy.lib` alone; clang's
    // MSVC target compiles the header and the C consumer, and lld-link (LLVM's
    // link.exe) links the consumer with hostcopy.lib, an entry point of its own
    // in place of the CRT's, and import libraries for kernel32.dll and for
    // vcruntime140.dll's memcpy and memmove (as a /MD program imports them),
    // made from `.def` files; wine runs it. The runner builds its
    // bcryptprimitives stub with MinGW's gcc, hence that package.
    Target { format: Format::Coff, linker: None, c_main: &["freestanding.c", "msvc/start.c"],
        import_libs: &["msvc/kernel32.def", "msvc/vcruntime140.def"],
        libraries: Libraries::StaticOnly("a DLL needs MSVC link.exe + CRT"),
        tests: Tests::NotRun("std needs MSVC link.exe, CRT, SDK"),
        ..row("x86_64-pc-windows-msvc", &["--target=x86_64-pc-windows-msvc"], LE64,
            &["wine", "wine64", "gcc-mingw-w64-x86-64"],
            &["clang", "-fuse-ld=lld", "-nostdlib", "-Wl,/entry:hostcopy_msvc_start", "-Wl,/subsystem:console"],
            &[WINE, "x86_64"]) },
    // node runs the C library's exports and the C consumer (clang, wasm-ld).
    Target { format: Format::Wasm, linker: None, c_main: &["freestanding.c", "wasm.c"], tests: Tests::WasmExports,
        ..row("wasm32-unknown-unknown", &["--target=wasm32-unknown-unknown"], LE32, &["nodejs"],
            &["clang", "-nostdlib", "-Wl,--no-entry"], &["node", "abi-tests/wasm/run.mjs"]) },
];

/// Reads `[FLAG] [--target TRIPLE]...`: whether the flag was given, and the
/// rows selected (none: `Ok` with an empty list). `Err` is the exit code
/// after printing help or a usage error.
pub(crate) fn parse_args<'a>(args: &'a [String], flag: &str, usage: &str) -> Result<(bool, Vec<&'a str>), u8> {
    let (mut given, mut triples) = (false, Vec::new());
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.as_slice().first()) {
            ("-h" | "--help", _) => {
                println!("{usage}");
                return Err(0);
            }
            (arg, _) if arg == flag => given = true,
            ("--target", Some(triple)) if TARGETS.iter().any(|t| t.triple == triple) => {
                triples.push(triple.as_str());
                args.next();
            }
            (other, _) => {
                eprintln!("error: unknown option or target `{other}`\n\n{usage}");
                return Err(2);
            }
        }
    }
    Ok((given, triples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_agree_with_their_triples() {
        for t in TARGETS {
            let arch = t.triple.split('-').next().unwrap();
            let big = matches!(arch, "powerpc" | "s390x");
            assert_eq!(t.endian == Endian::Big, big, "{}", t.triple);
            let wide = matches!(arch, "x86_64" | "aarch64" | "s390x" | "powerpc64le");
            assert_eq!(t.pointer_width, if wide { 64 } else { 32 }, "{}", t.triple);
            assert_eq!(t.format == Format::Coff, t.triple.contains("windows"), "{}", t.triple);
            assert_eq!(t.format == Format::Wasm, t.triple.starts_with("wasm"), "{}", t.triple);
            assert!(t.clang[0].starts_with("--target="), "{}", t.triple);
            assert_eq!(t.tests == Tests::Firmware, t.triple.contains("-none"), "{}", t.triple);
            assert_eq!(t.c_main.contains(&"freestanding.c"), t.tests != Tests::Cargo, "{}", t.triple);
            let msvc = t.triple.ends_with("-msvc");
            assert_eq!(!t.import_libs.is_empty(), msvc, "{}", t.triple);
            let static_only = msvc || t.rustflags.contains("+crt-static");
            assert_eq!(t.libraries != Libraries::All, static_only, "{}", t.triple);
            assert_eq!(t.staticlib_name() == "hostcopy.lib", msvc, "{}", t.triple);
        }
        assert!(TARGETS.iter().any(|t| t.pointer_width == 64 && t.endian == Endian::Big));
        assert!(TARGETS.iter().any(|t| t.pointer_width == 32 && t.endian == Endian::Big));
        let armv7 = TARGETS.iter().find(|t| t.triple.starts_with("armv7")).unwrap();
        assert_eq!(armv7.cargo_env_prefix(), "CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_");
    }
}
