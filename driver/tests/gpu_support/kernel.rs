//! Kernels from PTX text (the driver compiles it for the device at load):
//! one that spins for a while, to keep a stream busy, and one that traps,
//! to put the context into a sticky error.
//!
//! The module entry points are declared here, as the layer has no use for
//! them; `build.rs` adds them to the stub libcuda.

use core::ffi::{c_char, c_uint, c_void};

use hostcopy_driver::cuda::{CUstream, StreamRef};

#[link(name = "cuda")]
unsafe extern "C" {
    fn cuModuleLoadData(module: *mut *mut c_void, image: *const c_void) -> c_uint;
    fn cuModuleGetFunction(
        function: *mut *mut c_void,
        module: *mut c_void,
        name: *const c_char,
    ) -> c_uint;
    fn cuLaunchKernel(
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
        let mut module = core::ptr::null_mut();
        // SAFETY: a NUL-terminated PTX image; the module lives until the
        // context goes (never unloaded: the tests end with the process).
        let code = unsafe { cuModuleLoadData(&mut module, PTX.as_ptr().cast()) };
        if code != 0 {
            return Err(format!("cuModuleLoadData: {code}"));
        }
        let function = |name: &str| {
            let name = std::ffi::CString::new(name).unwrap();
            let mut function = core::ptr::null_mut();
            // SAFETY: the module is loaded; writes one handle.
            let code = unsafe { cuModuleGetFunction(&mut function, module, name.as_ptr()) };
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
        // SAFETY: the kernel takes no parameters.
        let code = unsafe {
            cuLaunchKernel(
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
        // SAFETY: one u64 parameter, read at launch.
        let code = unsafe {
            cuLaunchKernel(
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
