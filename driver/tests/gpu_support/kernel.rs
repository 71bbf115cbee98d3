//! Kernels from PTX text (the driver compiles it for the device at load):
//! one that spins for a while, to keep a stream busy, and one that traps,
//! to put the context into a sticky error.
//!
//! The module entry points are looked up here, in libcuda opened at run
//! time as the layer opens it, since the layer has no use for them.

use core::ffi::{c_char, c_uint, c_void};
use std::sync::OnceLock;

use hostcopy_driver::cuda::{CUstream, StreamRef};

type LaunchKernel = unsafe extern "C" fn(
    function: *mut c_void,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> c_uint;

/// The module entry points, from the driver the layer loaded.
struct Modules {
    load_data: unsafe extern "C" fn(module: *mut *mut c_void, image: *const c_void) -> c_uint,
    get_function: unsafe extern "C" fn(
        function: *mut *mut c_void,
        module: *mut c_void,
        name: *const c_char,
    ) -> c_uint,
    launch_kernel: LaunchKernel,
}

fn modules() -> Result<&'static Modules, String> {
    static MODULES: OnceLock<Result<Modules, String>> = OnceLock::new();
    MODULES
        .get_or_init(|| {
            let name = std::env::var("HOSTCOPY_LIBCUDA").unwrap_or_else(|_| "libcuda.so.1".into());
            // SAFETY: the driver's initializers expect nothing of us; the
            // library is already loaded by the layer (this adds a reference).
            let library = unsafe { libloading::Library::new(&name) }
                .map_err(|error| format!("{name}: {error}"))?;
            let library: &'static libloading::Library = Box::leak(Box::new(library));
            // SAFETY: each type is the entry point's prototype in cuda.h.
            unsafe {
                Ok(Modules {
                    load_data: *library
                        .get(b"cuModuleLoadData\0")
                        .map_err(|e| e.to_string())?,
                    get_function: *library
                        .get(b"cuModuleGetFunction\0")
                        .map_err(|e| e.to_string())?,
                    launch_kernel: *library
                        .get(b"cuLaunchKernel\0")
                        .map_err(|e| e.to_string())?,
                })
            }
        })
        .as_ref()
        .map_err(Clone::clone)
}

const PTX: &str = "
.version 7.0
.target sm_70
.address_size 64

.visible .entry hostcopy_trap()
{
    trap;
}

.visible .entry hostcopy_spin(.param .u64 nanoseconds)
{
    .reg .u64 %start, %now, %wait, %elapsed;
    .reg .pred %more;
    ld.param.u64 %wait, [nanoseconds];
    mov.u64 %start, %globaltimer;
LOOP:
    mov.u64 %now, %globaltimer;
    sub.u64 %elapsed, %now, %start;
    setp.lt.u64 %more, %elapsed, %wait;
    @%more bra LOOP;
    ret;
}
\0";

/// The test kernels, loaded into the current context.
pub struct Kernels {
    trap: *mut c_void,
    spin: *mut c_void,
}

impl Kernels {
    pub fn load() -> Result<Kernels, String> {
        let driver = modules()?;
        let mut module = core::ptr::null_mut();
        // SAFETY: a NUL-terminated PTX image; the module lives until the
        // context goes (never unloaded: the tests end with the process).
        let code = unsafe { (driver.load_data)(&mut module, PTX.as_ptr().cast()) };
        if code != 0 {
            return Err(format!("cuModuleLoadData: {code}"));
        }
        let function = |name: &str| {
            let name = std::ffi::CString::new(name).unwrap();
            let mut function = core::ptr::null_mut();
            // SAFETY: the module is loaded; writes one handle.
            let code = unsafe { (driver.get_function)(&mut function, module, name.as_ptr()) };
            if code == 0 {
                Ok(function)
            } else {
                Err(format!("cuModuleGetFunction: {code}"))
            }
        };
        Ok(Kernels {
            trap: function("hostcopy_trap")?,
            spin: function("hostcopy_spin")?,
        })
    }

    /// Queues a kernel that executes `trap`: the context fails for good.
    pub fn trap(&self, stream: StreamRef<'_>) -> Result<(), String> {
        let launch = modules()?.launch_kernel;
        // SAFETY: the kernel takes no parameters.
        let code = unsafe {
            launch(
                self.trap,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream.raw(),
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        };
        if code == 0 {
            Ok(())
        } else {
            Err(format!("cuLaunchKernel(trap): {code}"))
        }
    }

    /// Queues a kernel that spins for `nanoseconds`, keeping `stream` busy.
    pub fn spin(&self, stream: StreamRef<'_>, nanoseconds: u64) -> Result<(), String> {
        let mut nanoseconds = nanoseconds;
        let mut params = [(&mut nanoseconds as *mut u64).cast::<c_void>()];
        let launch = modules()?.launch_kernel;
        // SAFETY: one u64 parameter, read at launch.
        let code = unsafe {
            launch(
                self.spin,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                stream.raw(),
                params.as_mut_ptr(),
                core::ptr::null_mut(),
            )
        };
        if code == 0 {
            Ok(())
        } else {
            Err(format!("cuLaunchKernel(spin): {code}"))
        }
    }
}
