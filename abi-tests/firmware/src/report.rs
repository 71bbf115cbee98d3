//! Where the firmware's outcome goes: printed and turned into the exit status
//! of the emulator through Arm semihosting (`SYS_WRITE0`, `SYS_EXIT`), which
//! QEMU implements for Arm and RISC-V alike (`-semihosting-config
//! enable=on`). `cargo xtask abi` runs it under `qemu-system-arm` and
//! `qemu-system-riscv32` and reads the `N passed, M failed` line.

use core::fmt::{self, Write};

const SYS_WRITE0: usize = 0x04;
const SYS_EXIT: usize = 0x18;
/// `SYS_EXIT` reasons: QEMU exits with status 0 for the first, 1 for any other.
const APPLICATION_EXIT: usize = 0x20026;
const RUN_TIME_ERROR: usize = 0x20023;

/// Prints the outcome of the cases, then ends the run with its verdict.
pub(crate) fn report(passed: u32, failed: u32, first_failure: Option<&'static str>) -> ! {
    let mut line = Line {
        bytes: [0; 160],
        len: 0,
    };
    if let Some(name) = first_failure {
        let _ = writeln!(line, "FAILED: {name}");
        line.flush();
    }
    let _ = writeln!(line, "{passed} passed, {failed} failed");
    line.flush();
    let reason = if failed == 0 {
        APPLICATION_EXIT
    } else {
        RUN_TIME_ERROR
    };
    // SAFETY: SYS_EXIT takes the reason itself as its argument on 32-bit targets.
    unsafe { semihosting(SYS_EXIT, reason) };
    loop {
        core::hint::spin_loop();
    }
}

/// A line of text, NUL-terminated for `SYS_WRITE0` (longer ones are cut).
struct Line {
    bytes: [u8; 160],
    len: usize,
}

impl Write for Line {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let room = self.bytes.len() - 1 - self.len;
        let take = text.len().min(room);
        self.bytes[self.len..self.len + take].copy_from_slice(&text.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

impl Line {
    fn flush(&mut self) {
        self.bytes[self.len] = 0;
        // SAFETY: SYS_WRITE0 reads the NUL-terminated string at the address, which lives here.
        unsafe { semihosting(SYS_WRITE0, self.bytes.as_ptr().expose_provenance()) };
        self.len = 0;
    }
}

/// One semihosting call: the operation and its argument (a value or an address).
///
/// # Safety
///
/// `argument` is what `operation` expects (for `SYS_WRITE0`, the address of a
/// NUL-terminated string), and a debugger or emulator handles the trap.
#[cfg(target_arch = "arm")]
unsafe fn semihosting(operation: usize, argument: usize) -> usize {
    let result;
    // SAFETY: the Thumb semihosting trap; the caller passes what the operation reads.
    unsafe {
        core::arch::asm!("bkpt #0xab", inout("r0") operation => result, in("r1") argument);
    }
    result
}

/// As the Arm version: the RISC-V trap is `ebreak` between two marker
/// instructions, uncompressed and within one 16-byte block.
///
/// # Safety
///
/// As for the Arm version.
#[cfg(target_arch = "riscv32")]
unsafe fn semihosting(operation: usize, argument: usize) -> usize {
    let result;
    // SAFETY: the RISC-V semihosting sequence; the caller passes what the operation reads.
    unsafe {
        core::arch::asm!(
            ".balign 16",
            ".option push",
            ".option norvc",
            "slli x0, x0, 0x1f",
            "ebreak",
            "srai x0, x0, 7",
            ".option pop",
            inout("a0") operation => result,
            in("a1") argument,
        );
    }
    result
}
