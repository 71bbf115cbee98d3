//! The gather kernel, loaded into a context: many small blocks to or from
//! one staging range per launch (see `kernels`), where the copy engine
//! would take one copy per block.

use core::ffi::c_void;
use core::fmt;

use super::context::Context;
use super::error::{DriverError, Error};
use super::ffi::{self, CUdeviceptr, CUfunction, CUmodule};
use super::kernels::{
    GATHER_ENTRIES, GATHER_NAME, GATHER_PTX, GATHER_THREADS, GatherEntry, GatherTable,
};
use super::stream::StreamRef;

/// `hostcopy_gather` in a module of its own, in a context it keeps alive;
/// the module is unloaded on drop.
pub(crate) struct GatherKernel {
    context: Context,
    module: CUmodule,
    function: CUfunction,
}

// SAFETY: module and function handles may be used from any thread; every
// call binds the module's context first.
unsafe impl Send for GatherKernel {}
// SAFETY: as above; launches of one function from several threads are
// independent calls to the driver.
unsafe impl Sync for GatherKernel {}

impl GatherKernel {
    /// Loads the kernel into `context` (the driver compiles the PTX for
    /// the context's device, once per process where it caches the result).
    pub(crate) fn load(context: &Context) -> Result<GatherKernel, DriverError> {
        context.bind()?;
        let mut module: CUmodule = core::ptr::null_mut();
        // SAFETY: the image is NUL-terminated PTX text that lives for the
        // process; the driver writes one handle, unloaded in `Drop`.
        unsafe { ffi::cuModuleLoadData(&mut module, GATHER_PTX.as_ptr().cast()) }.ok()?;
        let mut function: CUfunction = core::ptr::null_mut();
        // SAFETY: the module is alive and the name NUL-terminated; the
        // driver writes one handle, owned by the module.
        let found =
            unsafe { ffi::cuModuleGetFunction(&mut function, module, GATHER_NAME.as_ptr()) };
        if let Err(error) = found.ok() {
            // SAFETY: loaded just above; nothing was launched from it.
            let _ = unsafe { ffi::cuModuleUnload(module) };
            return Err(error);
        }
        Ok(GatherKernel {
            context: context.clone(),
            module,
            function,
        })
    }

    /// Queues on `stream` the launches that move every block of `entries`
    /// between its device address and `staging` plus its offset: to the
    /// staging range (gather), or from it with `scatter`. One launch per
    /// [`GATHER_ENTRIES`] entries, in order; the entries travel in the
    /// launches' parameters, so `entries` may go once this returns.
    ///
    /// On an error, the launches before the one that failed stay queued.
    ///
    /// # Safety
    ///
    /// For every entry: `device .. device + len` lies in device memory of
    /// the stream's context, and `staging + offset .. + len` in memory the
    /// device can reach (device memory, or mapped pinned memory), both
    /// valid until the launch has run in stream order, the side written
    /// touched by nothing else until then and the side read unchanged; no
    /// two entries write overlapping bytes; the kernel is not dropped
    /// before its launches have run.
    pub(crate) unsafe fn launch(
        &self,
        stream: StreamRef<'_>,
        staging: CUdeviceptr,
        entries: &[GatherEntry],
        scatter: bool,
    ) -> Result<(), Error> {
        self.context.expect_same(stream.context())?;
        self.context.bind()?;
        let mut staging: u64 = staging;
        let mut scatter = u32::from(scatter);
        let mut table = GatherTable([GatherEntry::default(); GATHER_ENTRIES]);
        for launch in entries.chunks(GATHER_ENTRIES) {
            table.0[..launch.len()].copy_from_slice(launch);
            let mut count = launch.len() as u32;
            let mut params: [*mut c_void; 4] = [
                (&raw mut staging).cast(),
                (&raw mut count).cast(),
                (&raw mut scatter).cast(),
                (&raw mut table).cast(),
            ];
            // SAFETY: the function is alive (its module is ours); one
            // pointer per kernel parameter, each to a value of the type
            // and size `gather.ptx` declares, read during the call; the
            // entries' ranges are our caller's; the stream is alive.
            unsafe {
                ffi::cuLaunchKernel(
                    self.function,
                    count,
                    1,
                    1,
                    GATHER_THREADS,
                    1,
                    1,
                    0,
                    stream.raw(),
                    params.as_mut_ptr(),
                    core::ptr::null_mut(),
                )
            }
            .ok()?;
        }
        Ok(())
    }
}

impl Drop for GatherKernel {
    fn drop(&mut self) {
        let _ = self.context.bind();
        // SAFETY: loaded in `load`, unloaded once, here; no launch of it is
        // pending (`launch`'s contract).
        let _ = unsafe { ffi::cuModuleUnload(self.module) };
    }
}

impl fmt::Debug for GatherKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatherKernel")
            .field("module", &self.module)
            .finish()
    }
}
