//! The CUDA layer opens libcuda at run time: a binary starts on a machine
//! without an NVIDIA driver (nothing links libcuda) and every call then
//! fails with an error that says what is missing and what to install.
//!
//! Which library is opened is decided once per process, so each case runs
//! this test binary again as a child, with `HOSTCOPY_LIBCUDA` pointing at
//! the library of the case, and checks what the child reports.

#![cfg(feature = "cuda")]

use std::process::Command;

use hostcopy_driver::cuda::{CUDA_ERROR_INSUFFICIENT_DRIVER, CUDA_ERROR_STUB_LIBRARY, Context};

/// Set in the child: which library it was given.
const CHILD: &str = "HOSTCOPY_LOADING_CHILD";

/// Runs `child_reports_what_loading_gave` in a child process with
/// `HOSTCOPY_LIBCUDA=library`; its report (code, then message).
fn child_report(library: &str) -> (u32, String) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_reports_what_loading_gave", "--nocapture"])
        .env(CHILD, "1")
        .env("HOSTCOPY_LIBCUDA", library)
        .output()
        .expect("run the test binary as a child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "the child failed: {stdout}");
    let line = stdout
        .lines()
        .find_map(|line| line.strip_prefix("loading: "))
        .unwrap_or_else(|| panic!("the child reported nothing: {stdout}"));
    let (code, message) = line.split_once(' ').expect("code, then message");
    (code.parse().expect("a code"), message.to_string())
}

#[test]
fn a_machine_without_a_driver_gets_an_error_naming_the_library_and_what_to_install() {
    let (code, message) = child_report("/nonexistent/libcuda.so.1");
    assert_eq!(code, CUDA_ERROR_STUB_LIBRARY);
    assert!(
        message.contains("no NVIDIA driver")
            && message.contains("/nonexistent/libcuda.so.1")
            && message.contains("install the NVIDIA driver"),
        "{message}"
    );
}

#[test]
fn a_driver_lacking_an_entry_point_is_reported_as_too_old() {
    // A library that loads but exports no CUDA entry point at all.
    let (code, message) = child_report("libc.so.6");
    assert_eq!(code, CUDA_ERROR_INSUFFICIENT_DRIVER);
    assert!(
        message.contains("too old") && message.contains("lacks cu"),
        "{message}"
    );
}

/// The child's half (does nothing unless run as a child): the first driver
/// calls, each failing the same way, and one line with the error.
#[test]
fn child_reports_what_loading_gave() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let error = Context::device_count().expect_err("no driver was given");
    assert!(error.is_driver_missing(), "{error:?}");
    // A second call, of another kind, fails alike: no retry, no panic.
    let again = Context::primary(0).expect_err("no driver was given");
    assert_eq!(again, error);
    println!("loading: {} {error}", error.code());
}
