//! A libcuda that forwards to this process's simulator, for libraries that
//! load the driver themselves (cudarc): built once per test binary with
//! rustc, it exports every name `sim::c_entry_points` gives, each a naked
//! function that jumps to the simulator's C function of that name, and has
//! `libcuda.so` as its soname, so that once it is loaded here, cudarc's
//! `dlopen("libcuda.so")` is answered with it (the loader matches a loaded
//! library's soname before it searches any path).

use std::fmt::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use hostcopy_driver::cuda::sim;

/// The jump through the table's `index`-th slot, per architecture.
fn jump(index: usize) -> Option<String> {
    let offset = 8 * index;
    if cfg!(target_arch = "x86_64") {
        Some(format!("jmp qword ptr [rip + {{table}} + {offset}]"))
    } else if cfg!(target_arch = "aarch64") {
        Some(format!(
            "adrp x16, {{table}}\", \"add x16, x16, :lo12:{{table}}\", \
             \"ldr x16, [x16, #{offset}]\", \"br x16"
        ))
    } else {
        None
    }
}

/// The library's source: a table of addresses filled in by
/// `hostcopy_sim_register`, and one exported jump per name.
fn source(names: &[&str]) -> Option<String> {
    let n = names.len();
    let mut text = format!(
        "use std::sync::atomic::{{AtomicUsize, Ordering}};\n\
         static TABLE: [AtomicUsize; {n}] = [const {{ AtomicUsize::new(0) }}; {n}];\n\
         /// Sets the address slot `index` jumps to.\n\
         #[unsafe(no_mangle)]\n\
         pub extern \"C\" fn hostcopy_sim_register(index: usize, function: usize) {{\n\
         \x20   TABLE[index].store(function, Ordering::SeqCst);\n\
         }}\n"
    );
    for (index, name) in names.iter().enumerate() {
        let jump = jump(index)?;
        writeln!(
            text,
            "#[allow(non_snake_case)]\n#[unsafe(naked)]\n#[unsafe(no_mangle)]\n\
             pub unsafe extern \"C\" fn {name}() {{\n\
             \x20   core::arch::naked_asm!(\"{jump}\", table = sym TABLE)\n}}"
        )
        .expect("writing to a String");
    }
    Some(text)
}

/// Builds and loads the forwarding libcuda once per process and points it
/// at the simulator (installed here); why not, where it cannot be.
pub(crate) fn load() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED.get_or_init(build_and_load).clone()
}

fn build_and_load() -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err("the forwarding libcuda relies on the Linux loader's soname matching".into());
    }
    sim::install();
    let entries = sim::c_entry_points();
    let names: Vec<&str> = entries.iter().map(|(name, _)| *name).collect();
    let source =
        source(&names).ok_or("the forwarding libcuda is written for x86_64 and aarch64")?;
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sim-libcuda");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Per process: test binaries may build theirs at the same time.
    let src = dir.join(format!("libcuda-{}.rs", std::process::id()));
    let library = dir.join(format!("libcuda-{}.so", std::process::id()));
    std::fs::write(&src, source).map_err(|e| format!("{}: {e}", src.display()))?;
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let output = Command::new(&rustc)
        .args(["--edition", "2024", "--crate-type", "cdylib", "-O"])
        .args(["-C", "link-arg=-Wl,-soname,libcuda.so", "-o"])
        .arg(&library)
        .arg(&src)
        .output()
        .map_err(|e| format!("running {rustc}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{rustc} could not build the forwarding libcuda:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    // SAFETY: loading it runs only the Rust standard library's own
    // initializers (the generated source defines none), which expect
    // nothing of the caller.
    let opened = unsafe { libloading::Library::new(&library) }.map_err(|e| e.to_string())?;
    // Never unloaded: cudarc keeps its own handle and function pointers.
    let opened: &'static libloading::Library = Box::leak(Box::new(opened));
    // SAFETY: the prototype the generated source gives it.
    let register =
        unsafe { opened.get::<unsafe extern "C" fn(usize, usize)>(b"hostcopy_sim_register\0") }
            .map_err(|e| e.to_string())?;
    for (index, (_, function)) in entries.iter().enumerate() {
        // SAFETY: `index` is a slot of the table, which has one per name;
        // nothing calls through the library before it is filled.
        unsafe { register(index, function.addr()) };
    }
    let _ = std::fs::remove_file(&library);
    let _ = std::fs::remove_file(&src);
    Ok(())
}
