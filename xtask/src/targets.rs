//! The targets `cargo xtask abi` checks, and what each needs on this machine.
//!
//! One row per target: how clang names it, the facts its layout must show, and
//! the cross tools (Debian package names) that link and run code for it. The
//! host is x86_64 Debian: 32-bit x86 runs natively, other Linux targets run
//! under qemu-user, Windows, bare-metal and wasm code is built but not run.

/// Byte order of a target, for decoding the layout reports in its objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endian {
    Little,
    Big,
}

impl Endian {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Endian::Little => "little",
            Endian::Big => "big",
        }
    }
}

/// The object format of a target: only ELF symbols carry a type (STT_FUNC) to check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ObjectFormat {
    Elf,
    Coff,
    Wasm,
}

/// A program or file that some check needs, and the Debian package that provides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Need {
    pub(crate) what: Provides,
    pub(crate) package: &'static str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Provides {
    /// A program found on `PATH`.
    Program(&'static str),
    /// A file whose presence shows that a library package is installed.
    File(&'static str),
}

impl Need {
    const fn program(name: &'static str, package: &'static str) -> Self {
        Need {
            what: Provides::Program(name),
            package,
        }
    }

    const fn file(path: &'static str, package: &'static str) -> Self {
        Need {
            what: Provides::File(path),
            package,
        }
    }

    /// What is missing, for messages: the program's name or the file's path.
    pub(crate) fn name(&self) -> &'static str {
        match self.what {
            Provides::Program(name) | Provides::File(name) => name,
        }
    }

    /// As [`name`](Self::name), with a file's directory left out, for the table.
    pub(crate) fn short_name(&self) -> &'static str {
        let name = self.name();
        match self.what {
            Provides::Program(_) => name,
            Provides::File(_) => name.rsplit('/').next().unwrap_or(name),
        }
    }
}

/// Compiles `hostcopy.h` and the symbol probe for every target (clang, not
/// gcc: one compiler that knows every target, freestanding where there is no
/// C library).
pub(crate) const CLANG: Need = Need::program("clang", "clang");

/// Lists the symbols of objects and archives of every format here (ELF, COFF,
/// wasm). Debian 12's llvm-nm is LLVM 14: it reads rustc's objects but not the
/// newer bitcode that std's objects embed, so it runs with `--no-llvm-bc`.
pub(crate) const LLVM_NM: Need = Need::program("llvm-nm", "llvm");

/// Lists the export table of a Windows DLL (what `GetProcAddress` finds).
pub(crate) const LLVM_READOBJ: Need = Need::program("llvm-readobj", "llvm");

/// A C compiler that links programs for a target, with that target's C library.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CToolchain {
    /// The compiler driver; also the linker cargo uses for the target.
    pub(crate) gcc: &'static str,
    pub(crate) needs: &'static [Need],
    /// Link everything statically (`-static`, `+crt-static`): the programs then
    /// need no loader or shared C library of the target's on this machine.
    pub(crate) link_static: bool,
}

/// How programs built for a target run on this x86_64 Linux host.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Runner {
    /// Directly (x86_64, and statically linked i686 through the kernel's 32-bit support).
    Native,
    /// Under qemu-user, with the cross C library's directory as its root for the loader.
    Qemu {
        program: &'static str,
        sysroot: &'static str,
    },
    /// Nothing here runs it; the reason goes into the table.
    Unavailable(&'static str),
}

const QEMU_PACKAGE: &str = "qemu-user";

impl Runner {
    pub(crate) fn needs(&self) -> Vec<Need> {
        match *self {
            Runner::Qemu { program, .. } => vec![Need::program(program, QEMU_PACKAGE)],
            Runner::Native | Runner::Unavailable(_) => Vec::new(),
        }
    }

    /// The command prefix that runs a program (cargo's `runner` setting).
    pub(crate) fn command(&self) -> Option<Vec<String>> {
        match *self {
            Runner::Native => Some(Vec::new()),
            Runner::Qemu { program, sysroot } => Some(vec![
                program.to_owned(),
                "-L".to_owned(),
                sysroot.to_owned(),
            ]),
            Runner::Unavailable(_) => None,
        }
    }

    /// How it runs, for the table.
    pub(crate) fn describe(&self) -> &'static str {
        match *self {
            Runner::Native => "native",
            Runner::Qemu { program, .. } => program,
            Runner::Unavailable(reason) => reason,
        }
    }
}

/// Whether the core's own test suite (`cargo test -p hostcopy-core`) can run for a target.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CoreTests {
    Run,
    /// Built (compiled and linked) but not run; the reason goes into the table.
    BuildOnly(&'static str),
    NotRun(&'static str),
}

/// One supported target and everything `cargo xtask abi` needs to know about it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AbiTarget {
    /// The Rust target triple.
    pub(crate) rust: &'static str,
    /// clang's `--target` and the flags that select the same ABI as rustc.
    pub(crate) clang: &'static [&'static str],
    pub(crate) pointer_width: u32,
    pub(crate) endian: Endian,
    pub(crate) object_format: ObjectFormat,
    /// None: no C library for the target here, so no C program to link.
    pub(crate) c_toolchain: Option<CToolchain>,
    pub(crate) runner: Runner,
    pub(crate) core_tests: CoreTests,
}

impl AbiTarget {
    /// The `CARGO_TARGET_<TRIPLE>_...` prefix of cargo's per-target environment settings.
    pub(crate) fn cargo_env_prefix(&self) -> String {
        format!(
            "CARGO_TARGET_{}_",
            self.rust.to_ascii_uppercase().replace(['-', '.'], "_")
        )
    }
}

// Debian 12's wine (8.0) was tried: it lacks bcryptprimitives.dll, which
// Rust's std imports on Windows, so neither the tests nor the C consumer
// (which links std through the static library) start under it.
const NO_WINDOWS_RUNTIME: &str = "no Windows runtime (wine)";
const NO_WASM_RUNTIME: &str = "no wasm runtime here";
const BARE_METAL: &str = "no_std target: no test harness, no OS";

const fn cross_gcc(
    gcc: &'static str,
    needs: &'static [Need],
    link_static: bool,
) -> Option<CToolchain> {
    Some(CToolchain {
        gcc,
        needs,
        link_static,
    })
}

pub(crate) const TARGETS: &[AbiTarget] = &[
    AbiTarget {
        rust: "x86_64-unknown-linux-gnu",
        clang: &["--target=x86_64-linux-gnu"],
        pointer_width: 64,
        endian: Endian::Little,
        object_format: ObjectFormat::Elf,
        c_toolchain: cross_gcc(
            "gcc",
            &[
                Need::program("gcc", "gcc"),
                Need::file("/usr/include/stdio.h", "libc6-dev"),
            ],
            false,
        ),
        runner: Runner::Native,
        core_tests: CoreTests::Run,
    },
    AbiTarget {
        rust: "i686-unknown-linux-gnu",
        clang: &["--target=i686-linux-gnu"],
        pointer_width: 32,
        endian: Endian::Little,
        object_format: ObjectFormat::Elf,
        // gcc-multilib would give `gcc -m32`, but on Debian it conflicts with
        // the cross compilers, and a dynamic i686 program would need the i386
        // loader and libraries installed on the host. A static program runs
        // on the x86_64 kernel as it is.
        c_toolchain: cross_gcc(
            "i686-linux-gnu-gcc",
            &[
                Need::program("i686-linux-gnu-gcc", "gcc-i686-linux-gnu"),
                Need::file("/usr/i686-linux-gnu/lib/libc.a", "libc6-dev-i386-cross"),
            ],
            true,
        ),
        runner: Runner::Native,
        core_tests: CoreTests::Run,
    },
    AbiTarget {
        rust: "aarch64-unknown-linux-gnu",
        clang: &["--target=aarch64-linux-gnu"],
        pointer_width: 64,
        endian: Endian::Little,
        object_format: ObjectFormat::Elf,
        c_toolchain: cross_gcc(
            "aarch64-linux-gnu-gcc",
            &[
                Need::program("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"),
                Need::file("/usr/aarch64-linux-gnu/lib/libc.a", "libc6-dev-arm64-cross"),
            ],
            false,
        ),
        runner: Runner::Qemu {
            program: "qemu-aarch64",
            sysroot: "/usr/aarch64-linux-gnu",
        },
        core_tests: CoreTests::Run,
    },
    AbiTarget {
        rust: "armv7-unknown-linux-gnueabihf",
        clang: &["--target=armv7-linux-gnueabihf"],
        pointer_width: 32,
        endian: Endian::Little,
        object_format: ObjectFormat::Elf,
        c_toolchain: cross_gcc(
            "arm-linux-gnueabihf-gcc",
            &[
                Need::program("arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf"),
                Need::file(
                    "/usr/arm-linux-gnueabihf/lib/libc.a",
                    "libc6-dev-armhf-cross",
                ),
            ],
            false,
        ),
        runner: Runner::Qemu {
            program: "qemu-arm",
            sysroot: "/usr/arm-linux-gnueabihf",
        },
        core_tests: CoreTests::Run,
    },
    AbiTarget {
        rust: "powerpc-unknown-linux-gnu",
        clang: &["--target=powerpc-linux-gnu"],
        pointer_width: 32,
        endian: Endian::Big,
        object_format: ObjectFormat::Elf,
        c_toolchain: cross_gcc(
            "powerpc-linux-gnu-gcc",
            &[
                Need::program("powerpc-linux-gnu-gcc", "gcc-powerpc-linux-gnu"),
                Need::file(
                    "/usr/powerpc-linux-gnu/lib/libc.a",
                    "libc6-dev-powerpc-cross",
                ),
            ],
            false,
        ),
        runner: Runner::Qemu {
            program: "qemu-ppc",
            sysroot: "/usr/powerpc-linux-gnu",
        },
        core_tests: CoreTests::Run,
    },
    AbiTarget {
        rust: "s390x-unknown-linux-gnu",
        clang: &["--target=s390x-linux-gnu"],
        pointer_width: 64,
        endian: Endian::Big,
        object_format: ObjectFormat::Elf,
        c_toolchain: cross_gcc(
            "s390x-linux-gnu-gcc",
            &[
                Need::program("s390x-linux-gnu-gcc", "gcc-s390x-linux-gnu"),
                Need::file("/usr/s390x-linux-gnu/lib/libc.a", "libc6-dev-s390x-cross"),
            ],
            false,
        ),
        runner: Runner::Qemu {
            program: "qemu-s390x",
            sysroot: "/usr/s390x-linux-gnu",
        },
        core_tests: CoreTests::Run,
    },
    AbiTarget {
        rust: "riscv32imac-unknown-none-elf",
        clang: &[
            "--target=riscv32-unknown-elf",
            "-march=rv32imac",
            "-mabi=ilp32",
        ],
        pointer_width: 32,
        endian: Endian::Little,
        object_format: ObjectFormat::Elf,
        c_toolchain: None,
        runner: Runner::Unavailable(BARE_METAL),
        core_tests: CoreTests::NotRun(BARE_METAL),
    },
    AbiTarget {
        rust: "thumbv7em-none-eabihf",
        clang: &[
            "--target=thumbv7em-none-eabi",
            "-mfloat-abi=hard",
            "-mfpu=fpv4-sp-d16",
        ],
        pointer_width: 32,
        endian: Endian::Little,
        object_format: ObjectFormat::Elf,
        c_toolchain: None,
        runner: Runner::Unavailable(BARE_METAL),
        core_tests: CoreTests::NotRun(BARE_METAL),
    },
    AbiTarget {
        rust: "x86_64-pc-windows-gnu",
        clang: &["--target=x86_64-w64-windows-gnu"],
        pointer_width: 64,
        endian: Endian::Little,
        object_format: ObjectFormat::Coff,
        c_toolchain: cross_gcc(
            "x86_64-w64-mingw32-gcc",
            &[Need::program(
                "x86_64-w64-mingw32-gcc",
                "gcc-mingw-w64-x86-64",
            )],
            false,
        ),
        runner: Runner::Unavailable(NO_WINDOWS_RUNTIME),
        core_tests: CoreTests::BuildOnly(NO_WINDOWS_RUNTIME),
    },
    AbiTarget {
        rust: "i686-pc-windows-gnu",
        clang: &["--target=i686-w64-windows-gnu"],
        pointer_width: 32,
        endian: Endian::Little,
        object_format: ObjectFormat::Coff,
        c_toolchain: cross_gcc(
            "i686-w64-mingw32-gcc",
            &[Need::program("i686-w64-mingw32-gcc", "gcc-mingw-w64-i686")],
            false,
        ),
        runner: Runner::Unavailable(NO_WINDOWS_RUNTIME),
        core_tests: CoreTests::BuildOnly(NO_WINDOWS_RUNTIME),
    },
    AbiTarget {
        rust: "wasm32-unknown-unknown",
        clang: &["--target=wasm32-unknown-unknown"],
        pointer_width: 32,
        endian: Endian::Little,
        object_format: ObjectFormat::Wasm,
        c_toolchain: None,
        runner: Runner::Unavailable(NO_WASM_RUNTIME),
        core_tests: CoreTests::NotRun(NO_WASM_RUNTIME),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_holds_every_target_the_abi_promises() {
        for required in [
            "x86_64-unknown-linux-gnu",
            "i686-unknown-linux-gnu",
            "aarch64-unknown-linux-gnu",
            "armv7-unknown-linux-gnueabihf",
            "powerpc-unknown-linux-gnu",
            "riscv32imac-unknown-none-elf",
            "thumbv7em-none-eabihf",
            "x86_64-pc-windows-gnu",
            "i686-pc-windows-gnu",
            "wasm32-unknown-unknown",
        ] {
            assert!(
                TARGETS.iter().any(|t| t.rust == required),
                "{required} missing"
            );
        }
        assert!(
            TARGETS
                .iter()
                .any(|t| t.pointer_width == 64 && t.endian == Endian::Big),
            "a 64-bit big-endian target"
        );
        assert!(
            TARGETS
                .iter()
                .any(|t| t.pointer_width == 32 && t.endian == Endian::Big),
            "a 32-bit big-endian target"
        );
    }

    #[test]
    fn rows_agree_with_their_triples() {
        for t in TARGETS {
            let arch = t.rust.split('-').next().unwrap();
            let big = matches!(arch, "powerpc" | "powerpc64" | "s390x" | "mips" | "sparc64");
            assert_eq!(t.endian == Endian::Big, big, "{}", t.rust);
            let wide = matches!(arch, "x86_64" | "aarch64" | "powerpc64" | "s390x");
            assert_eq!(t.pointer_width, if wide { 64 } else { 32 }, "{}", t.rust);
            let format = if t.rust.contains("windows") {
                ObjectFormat::Coff
            } else if t.rust.starts_with("wasm") {
                ObjectFormat::Wasm
            } else {
                ObjectFormat::Elf
            };
            assert_eq!(t.object_format, format, "{}", t.rust);
            assert!(t.clang[0].starts_with("--target="), "{}", t.rust);
        }
    }

    #[test]
    fn a_target_runs_its_tests_only_where_it_can_link_and_run_them() {
        for t in TARGETS {
            match t.core_tests {
                CoreTests::Run => {
                    assert!(t.c_toolchain.is_some(), "{}: a linker", t.rust);
                    assert!(t.runner.command().is_some(), "{}: a runner", t.rust);
                }
                CoreTests::BuildOnly(_) => assert!(t.c_toolchain.is_some(), "{}", t.rust),
                CoreTests::NotRun(_) => {}
            }
            let names: Vec<_> = TARGETS.iter().filter(|u| u.rust == t.rust).collect();
            assert_eq!(names.len(), 1, "{} listed once", t.rust);
        }
    }

    #[test]
    fn cargo_env_prefix_follows_cargos_spelling() {
        let t = TARGETS
            .iter()
            .find(|t| t.rust == "armv7-unknown-linux-gnueabihf")
            .unwrap();
        assert_eq!(
            t.cargo_env_prefix(),
            "CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_"
        );
    }
}
