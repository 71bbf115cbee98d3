//! Compiles the C consumer against `core/include/hostcopy.h` for the Rust tests.

fn main() {
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../core/include");
    for file in [
        "c/consumer.c",
        "c/consumer.h",
        "c/layout_report.c",
        "c/layout_report.h",
    ] {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-changed={include}/hostcopy.h");
    cc::Build::new()
        .std("c11")
        .include(include)
        .include("c")
        .file("c/consumer.c")
        .file("c/layout_report.c")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("hostcopy_c_consumer");
}
