//! Modules and kernel launches: the one kernel hostcopy loads,
//! `hostcopy_gather`, run on the host. A launch is checked whole before
//! anything is queued (its parameters, every entry's device range in live
//! device memory of the context and its staging range in device memory of
//! the context or in page-locked memory, no two entries writing the same
//! bytes), then each entry becomes
//! one copy op on the stream, in order. Unloading a module while a launch
//! of it is queued is a violation.

use core::ffi::{CStr, c_char, c_uint, c_void};
use std::format;
use std::vec::Vec;

use super::super::ffi::{CUdeviceptr, CUfunction, CUmodule, CUstream, CuResult};
use super::super::kernels::{GATHER_ENTRIES, GATHER_NAME, GatherTable};
use super::codes::{self, result};
use super::execution::wait_for_room;
use super::registry::{
    DeviceSide, Function, Kind, MemCopy, Module, OpKind, SendPtr, State, Work, handle, id_of, lock,
};

/// What an image must declare to be the gather kernel's.
const GATHER_DECLARATION: &str = ".visible .entry hostcopy_gather(";

impl State {
    fn module(&mut self, entry: &str, raw: u64) -> Result<u64, u32> {
        if self.modules.contains_key(&raw) {
            Ok(raw)
        } else {
            Err(self.bad_handle(entry, Kind::Module, raw))
        }
    }

    fn function(&mut self, entry: &str, raw: u64) -> Result<u64, u32> {
        if self.functions.contains_key(&raw) {
            Ok(raw)
        } else {
            Err(self.bad_handle(entry, Kind::Function, raw))
        }
    }

    /// Removes `module` and its functions, as unloading it or destroying
    /// its context does.
    pub(super) fn unload_module(&mut self, module: u64) {
        let device = self.modules.remove(&module).expect("live").device;
        self.bury(module, Kind::Module, device);
        let functions: Vec<u64> = self
            .functions
            .iter()
            .filter(|(_, f)| f.module == module)
            .map(|(id, _)| *id)
            .collect();
        for function in functions {
            self.functions.remove(&function);
            self.bury(function, Kind::Function, device);
        }
    }

    /// One entry of a launch, checked: the copy it makes.
    fn gather_entry(
        &mut self,
        entry: &'static str,
        index: usize,
        device_addr: u64,
        staging: usize,
        len: usize,
        scatter: bool,
    ) -> Result<MemCopy, u32> {
        let device_ptr = SendPtr(self.device_range(entry, device_addr as CUdeviceptr, len)?);
        let staging_on_device = self.in_device_allocation(staging);
        if staging_on_device {
            self.device_range(entry, staging as CUdeviceptr, len)?;
        } else if !self.page_locked(staging, len) {
            let device = self.current_device();
            self.violation(
                device,
                format!(
                    "{entry}: entry {index} reaches {len} bytes at {staging:#x}, which are \
                     neither device memory nor page-locked host memory (an illegal address \
                     on a device)"
                ),
            );
            return Err(codes::INVALID_VALUE);
        }
        let staging_ptr = SendPtr(core::ptr::with_exposed_provenance_mut(staging));
        let device_side = match (staging_on_device, scatter) {
            (true, _) => DeviceSide::Both,
            (false, true) => DeviceSide::Dst,
            (false, false) => DeviceSide::Src,
        };
        let (dst, src) = if scatter {
            (device_ptr, staging_ptr)
        } else {
            (staging_ptr, device_ptr)
        };
        Ok(MemCopy {
            dst,
            src,
            bytes: len,
            device_side,
        })
    }
}

/// `cuModuleLoadData`: a module in the current context. The only image
/// it takes is PTX text that declares `hostcopy_gather`
/// (`CUDA_ERROR_INVALID_IMAGE` otherwise).
///
/// # Safety
///
/// `module` is writable; `image` is null or NUL-terminated text.
pub(crate) unsafe fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CuResult {
    const ENTRY: &str = "cuModuleLoadData";
    let mut state = lock();
    result((|| {
        let ctx = state.current_context(ENTRY)?;
        state.enter(ctx, ENTRY, false)?;
        if module.is_null() || image.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: NUL-terminated text (our caller).
        let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
        if !text.to_str().is_ok_and(|t| t.contains(GATHER_DECLARATION)) {
            return Err(codes::INVALID_IMAGE);
        }
        let id = state.new_id();
        let device = state.contexts[&ctx].device;
        state.modules.insert(
            id,
            Module {
                ctx,
                device,
                launches: Vec::new(),
            },
        );
        // SAFETY: writable (our caller).
        unsafe { module.write(handle(id)) };
        Ok(())
    })())
}

/// `cuModuleGetFunction`: `hostcopy_gather`, or `CUDA_ERROR_NOT_FOUND`.
///
/// # Safety
///
/// `function` is writable; `name` is NUL-terminated.
pub(crate) unsafe fn cuModuleGetFunction(
    function: *mut CUfunction,
    module: CUmodule,
    name: *const c_char,
) -> CuResult {
    const ENTRY: &str = "cuModuleGetFunction";
    let mut state = lock();
    result((|| {
        let module = state.module(ENTRY, id_of(module))?;
        let ctx = state.modules[&module].ctx;
        state.enter(ctx, ENTRY, true)?;
        if function.is_null() || name.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: NUL-terminated (our caller).
        if unsafe { CStr::from_ptr(name) } != GATHER_NAME {
            return Err(codes::NOT_FOUND);
        }
        let id = state.new_id();
        state.functions.insert(id, Function { module });
        // SAFETY: writable (our caller).
        unsafe { function.write(handle(id)) };
        Ok(())
    })())
}

/// `cuModuleUnload`: the module and its functions go. A launch of it
/// still queued is a violation (the driver would run freed code). Refused
/// where the thread's capture mode prohibits it.
///
/// # Safety
///
/// None beyond the handle, which is checked.
pub(crate) unsafe fn cuModuleUnload(module: CUmodule) -> CuResult {
    const ENTRY: &str = "cuModuleUnload";
    let mut state = lock();
    result((|| {
        let module = state.module(ENTRY, id_of(module))?;
        let (ctx, device) = (state.modules[&module].ctx, state.modules[&module].device);
        state.enter(ctx, ENTRY, true)?;
        state.refuse_unsafe_call()?;
        let pending = state.modules[&module]
            .launches
            .iter()
            .filter(|&&seq| !state.ran(ctx, seq))
            .count();
        if pending > 0 {
            state.violation(
                Some(device),
                format!(
                    "{ENTRY}: module {module:#x} unloaded with {pending} launch(es) of it queued"
                ),
            );
        }
        state.unload_module(module);
        Ok(())
    })())
}

/// `cuLaunchKernel` of `hostcopy_gather`: its parameters as `kernels`
/// lays them out, one copy op per entry, queued in order once every entry
/// has been checked. A capturing stream is refused
/// (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, and a violation): kernel
/// nodes are not modelled.
///
/// # Safety
///
/// `params` points to four pointers, to a `u64`, two `u32`s and a
/// [`GatherTable`], readable; every host range an entry names stays valid
/// until its copy has run in stream order, and its address carries exposed
/// provenance.
// The driver's prototype.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn cuLaunchKernel(
    function: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    _shared_bytes: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    const ENTRY: &str = "cuLaunchKernel";
    let mut guard = wait_for_room(lock(), stream);
    let state = &mut *guard;
    result((|| {
        let function = state.function(ENTRY, id_of(function))?;
        let module = state.functions[&function].module;
        let stream = state.stream_call(ENTRY, stream)?;
        let (ctx, device) = (state.streams[&stream].ctx, state.streams[&stream].device);
        if state.modules[&module].ctx != ctx {
            state.violation(
                Some(device),
                format!("{ENTRY}: function {function:#x} of another context"),
            );
            return Err(codes::INVALID_HANDLE);
        }
        let dims = [grid_x, grid_y, grid_z, block_x, block_y, block_z];
        if dims.contains(&0) || u64::from(block_x) * u64::from(block_y) * u64::from(block_z) > 1024
        {
            return Err(codes::INVALID_VALUE);
        }
        if params.is_null() || !extra.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        if state.streams[&stream].capture.is_some() {
            state.violation(
                Some(device),
                format!("{ENTRY}: kernel launch on a capturing stream (not modelled)"),
            );
            return Err(codes::STREAM_CAPTURE_UNSUPPORTED);
        }
        // SAFETY: four readable pointers to values of these types (our
        // caller), read now, as the driver copies parameters at launch.
        let (staging, count, scatter, table) = unsafe {
            let params = core::slice::from_raw_parts(params, 4);
            (
                params[0].cast::<u64>().read_unaligned(),
                params[1].cast::<u32>().read_unaligned(),
                params[2].cast::<u32>().read_unaligned(),
                params[3].cast::<GatherTable>().read_unaligned(),
            )
        };
        let count = count as usize;
        if count > GATHER_ENTRIES {
            state.violation(
                Some(device),
                format!("{ENTRY}: {count} entries, more than the table's {GATHER_ENTRIES}"),
            );
            return Err(codes::INVALID_VALUE);
        }
        let copies = table.0[..count]
            .iter()
            .enumerate()
            .map(|(index, e)| {
                let at = (staging as usize).wrapping_add(e.offset as usize);
                state.gather_entry(ENTRY, index, e.device, at, e.len as usize, scatter != 0)
            })
            .collect::<Result<Vec<MemCopy>, u32>>()?;
        let mut written: Vec<(usize, usize)> =
            copies.iter().map(|c| (c.dst.0.addr(), c.bytes)).collect();
        written.sort_unstable();
        if let Some(pair) = written.windows(2).find(|w| w[0].0 + w[0].1 > w[1].0) {
            state.violation(
                Some(device),
                format!(
                    "{ENTRY}: two entries write overlapping bytes ({:#x}+{}, {:#x})",
                    pair[0].0, pair[0].1, pair[1].0
                ),
            );
            return Err(codes::INVALID_VALUE);
        }
        let mut last = None;
        for copy in copies {
            last = Some(state.enqueue(stream, OpKind::Work(Work::Copy(copy)), None));
        }
        let launches = &mut state.modules.get_mut(&module).expect("live").launches;
        launches.extend(last);
        let mut launches = core::mem::take(launches);
        launches.retain(|&seq| !state.ran(ctx, seq));
        state.modules.get_mut(&module).expect("live").launches = launches;
        state.devices[device].kernel_launches += 1;
        Ok(())
    })())
}
