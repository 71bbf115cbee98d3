//! Memory: pinned host and device allocations are real allocations of host
//! memory (a device pointer is its address), freed for real; host
//! registrations are recorded; copies really copy bytes, one at a time or
//! in a batch.

use core::alloc::Layout;
use core::ffi::{c_uint, c_void};
use std::format;
use std::vec::Vec;

use super::super::ffi::{
    CU_MEMCPY_SRC_ACCESS_ORDER_ANY, CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, CUdeviceptr,
    CUmemcpyAttributes, CUstream, CuResult,
};
use super::codes::{self, result};
use super::execution::wait_for_room;
use super::registry::{
    Allocation, DeviceSide, Guard, MemCopy, OpKind, Registration, SendPtr, State, Work, current,
    id_of, lock,
};

/// The driver aligns allocations to at least 256 bytes.
const ALIGN: usize = 256;

/// Which allocation table a call works on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Space {
    Host,
    Device,
}

impl State {
    /// Allocates `bytes` in the current context.
    fn allocate(
        &mut self,
        entry: &'static str,
        space: Space,
        bytes: usize,
    ) -> Result<*mut u8, u32> {
        let ctx = self.current_context(entry)?;
        self.enter(ctx, entry, false)?;
        let layout = Layout::from_size_align(bytes, ALIGN).map_err(|_| codes::OUT_OF_MEMORY)?;
        if bytes == 0 {
            return Err(codes::INVALID_VALUE);
        }
        // Zeroed: the driver's memory is always defined (the OS hands it
        // zeroed pages), so reading a fresh allocation is no undefined
        // behaviour there, and must not be here, where Miri would see it.
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(codes::OUT_OF_MEMORY);
        }
        let device = self.contexts[&ctx].device;
        let allocation = Allocation {
            ctx,
            device,
            ptr: SendPtr(ptr),
            layout,
        };
        match space {
            Space::Host => self.host_allocations.insert(ptr.addr(), allocation),
            Space::Device => self
                .device_allocations
                .insert(ptr.expose_provenance(), allocation),
        };
        Ok(ptr)
    }

    /// Frees the allocation at `addr`; misuse if a queued or running copy
    /// still uses it.
    fn free(&mut self, entry: &'static str, space: Space, addr: usize) -> Result<(), u32> {
        let table = match space {
            Space::Host => &self.host_allocations,
            Space::Device => &self.device_allocations,
        };
        let Some(allocation) = table.get(&addr) else {
            let device = self.current_device();
            self.violation(
                device,
                format!("{entry}: {addr:#x} is not the start of a live allocation"),
            );
            return Err(codes::INVALID_VALUE);
        };
        let (ctx, device, len) = (allocation.ctx, allocation.device, allocation.layout.size());
        self.enter(ctx, entry, true)?;
        let context = &self.contexts[&ctx];
        let mut kinds = context
            .queue
            .iter()
            .map(|op| op.kind)
            .chain(context.running.map(|(_, kind)| kind));
        let in_use = kinds.find(|kind| match kind {
            OpKind::Work(Work::Copy(c)) => c.touches(addr, len),
            OpKind::WaitValue { addr: flag, .. } => (addr..addr + len).contains(flag),
            _ => false,
        });
        if let Some(kind) = in_use {
            let what = match kind {
                OpKind::WaitValue { .. } => "stream memory wait",
                _ => "copy",
            };
            self.violation(
                Some(device),
                format!("{entry}: {addr:#x} is freed while a queued {what} still uses it"),
            );
        }
        let allocation = match space {
            Space::Host => self.host_allocations.remove(&addr),
            Space::Device => self.device_allocations.remove(&addr),
        };
        deallocate(allocation.expect("checked"));
        Ok(())
    }

    /// Checks that `[addr, addr + bytes)` is live device memory of the
    /// current context.
    pub(super) fn device_range(
        &mut self,
        entry: &str,
        addr: CUdeviceptr,
        bytes: usize,
    ) -> Result<*mut u8, u32> {
        let addr = addr as usize;
        let owner = self
            .device_allocations
            .range(..=addr)
            .next_back()
            .filter(|(start, a)| addr.saturating_add(bytes) <= *start + a.layout.size())
            .map(|(_, a)| (a.ctx, a.device));
        let Some((ctx, device)) = owner else {
            let device = self.current_device();
            self.violation(
                device,
                format!("{entry}: {bytes} bytes at {addr:#x} are not in a live device allocation"),
            );
            return Err(codes::INVALID_VALUE);
        };
        if ctx != current() {
            self.violation(
                Some(device),
                format!("{entry}: device memory of context {ctx:#x} used from another context"),
            );
            return Err(codes::INVALID_CONTEXT);
        }
        Ok(core::ptr::with_exposed_provenance_mut(addr))
    }

    /// Whether `addr` lies in a live device allocation (of any context).
    pub(super) fn in_device_allocation(&self, addr: usize) -> bool {
        self.device_allocations
            .range(..=addr)
            .next_back()
            .is_some_and(|(&start, a)| addr < start + a.layout.size())
    }

    /// Entry `index` of a batch copy, checked: exactly one side in device
    /// memory (which [`device_range`](Self::device_range) checks), the
    /// other a non-null host address.
    fn batch_entry(
        &mut self,
        entry: &str,
        index: usize,
        dst: CUdeviceptr,
        src: CUdeviceptr,
        bytes: usize,
    ) -> Result<MemCopy, u32> {
        let (dst_addr, src_addr) = (dst as usize, src as usize);
        let device_side = match (
            self.in_device_allocation(dst_addr),
            self.in_device_allocation(src_addr),
        ) {
            (true, false) if src_addr != 0 => DeviceSide::Dst,
            (false, true) if dst_addr != 0 => DeviceSide::Src,
            (dst_device, src_device) => {
                let device = self.current_device();
                let what = match (dst_device, src_device) {
                    (true, true) => "both sides are device memory",
                    (false, false) => "neither side is device memory",
                    _ => "the host side is null",
                };
                self.violation(
                    device,
                    format!("{entry}: copy {index} ({dst_addr:#x} <- {src_addr:#x}): {what}"),
                );
                return Err(codes::INVALID_VALUE);
            }
        };
        Ok(match device_side {
            DeviceSide::Dst => MemCopy {
                dst: SendPtr(self.device_range(entry, dst, bytes)?),
                src: SendPtr(core::ptr::with_exposed_provenance_mut(src_addr)),
                bytes,
                device_side,
            },
            DeviceSide::Src => MemCopy {
                dst: SendPtr(core::ptr::with_exposed_provenance_mut(dst_addr)),
                src: SendPtr(self.device_range(entry, src, bytes)?),
                bytes,
                device_side,
            },
            DeviceSide::Both => unreachable!("refused above: both sides are device memory"),
        })
    }

    /// Frees what a destroyed context allocated.
    pub(super) fn free_context_memory(&mut self, ctx: u64) {
        for table in [&mut self.host_allocations, &mut self.device_allocations] {
            let gone: std::vec::Vec<usize> = table
                .iter()
                .filter(|(_, a)| a.ctx == ctx)
                .map(|(addr, _)| *addr)
                .collect();
            for addr in gone {
                deallocate(table.remove(&addr).expect("listed"));
            }
        }
        self.registrations.retain(|_, r| r.ctx != ctx);
    }
}

/// Queues a copy on `stream`, or on the current context's legacy default
/// stream and waits for it (`None`).
fn copy(
    mut guard: Guard,
    entry: &'static str,
    stream: Option<CUstream>,
    copy: impl FnOnce(&mut State) -> Result<MemCopy, u32>,
) -> CuResult {
    let sync = stream.is_none();
    let state = &mut *guard;
    let stream = match stream {
        Some(stream) => state.stream_call(entry, stream),
        None => state.current_context(entry).and_then(|ctx| {
            state.enter(ctx, entry, false)?;
            Ok(state.contexts[&ctx].default_stream)
        }),
    };
    let outcome = stream.and_then(|stream| {
        let work = Work::Copy(copy(state)?);
        let queued = if state.capture_work(stream, work)? {
            None
        } else {
            let seq = state.enqueue(stream, OpKind::Work(work), None);
            Some((state.streams[&stream].ctx, seq))
        };
        if !sync {
            let device = state.streams[&stream].device;
            state.devices[device].async_copy_calls += 1;
        }
        Ok(queued)
    });
    match outcome {
        // As the legacy stream does, with the work queued before it.
        Ok(Some((ctx, seq))) if sync => {
            result(State::wait_until(guard, ctx, |state| state.ran_through(ctx, seq)).1)
        }
        Ok(_) => CuResult(codes::SUCCESS),
        Err(code) => CuResult(code),
    }
}

/// `cuMemcpyHtoD_v2` from pageable memory, as the driver does it: waits
/// for the work queued so far (the legacy stream synchronizes before the
/// copy starts), copies the source into a staging buffer, queues the copy
/// from there on the legacy stream and returns. Refused on a legacy stream
/// that an event wait joined to a capture.
///
/// # Safety
///
/// `src` is readable for `bytes` bytes.
unsafe fn staged_upload(guard: Guard, dst: CUdeviceptr, src: *const u8, bytes: usize) -> CuResult {
    const ENTRY: &str = "cuMemcpyHtoD_v2";
    let mut guard = guard;
    let ctx = match guard.current_context(ENTRY) {
        Ok(ctx) => ctx,
        Err(code) => return CuResult(code),
    };
    if let Err(code) = guard.enter(ctx, ENTRY, false) {
        return CuResult(code);
    }
    let upto = guard.contexts[&ctx].submitted;
    let (mut guard, waited) = State::wait_until(guard, ctx, |state| state.ran_through(ctx, upto));
    if let Err(code) = waited {
        return CuResult(code);
    }
    let state = &mut *guard;
    let queued = (|| {
        let stream = state.contexts[&ctx].default_stream;
        if state.streams[&stream].capture.is_some() {
            return Err(codes::STREAM_CAPTURE_UNSUPPORTED);
        }
        let dst = state.device_range(ENTRY, dst, bytes)?;
        // SAFETY: `src` is readable for `bytes` bytes (our caller).
        let source = unsafe { core::slice::from_raw_parts(src, bytes) };
        // A `Vec`: moving it into the table keeps the pointer valid.
        let staging: Vec<u8> = source.to_vec();
        let copy = MemCopy {
            dst: SendPtr(dst),
            src: SendPtr(staging.as_ptr().cast_mut()),
            bytes,
            device_side: DeviceSide::Dst,
        };
        let seq = state.enqueue(stream, OpKind::Work(Work::Copy(copy)), None);
        // Read by the queued copy; freed once it has run or been dropped.
        state.staged.insert((ctx, seq), staging);
        Ok(())
    })();
    result(queued)
}

impl State {
    /// Whether `[addr, addr + len)` lies in one page-locked range: a pinned
    /// allocation or a registration.
    pub(super) fn page_locked(&self, addr: usize, len: usize) -> bool {
        let end = addr.saturating_add(len);
        let pinned = self
            .host_allocations
            .range(..=addr)
            .next_back()
            .is_some_and(|(start, a)| end <= start + a.layout.size());
        let registered = self
            .registrations
            .range(..=addr)
            .next_back()
            .is_some_and(|(start, r)| end <= start + r.len);
        pinned || registered
    }
}

fn deallocate(allocation: Allocation) {
    // SAFETY: allocated in `allocate` with this layout, freed once (removed
    // from its table first).
    unsafe { std::alloc::dealloc(allocation.ptr.0, allocation.layout) };
}

/// `cuMemHostAlloc`: zeroed host memory, in the current context.
///
/// # Safety
///
/// `ptr` is writable.
pub(crate) unsafe fn cuMemHostAlloc(
    ptr: *mut *mut c_void,
    bytes: usize,
    _flags: c_uint,
) -> CuResult {
    let mut state = lock();
    result((|| {
        if ptr.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let allocated = state.allocate("cuMemHostAlloc", Space::Host, bytes)?;
        // SAFETY: non-null and writable (our caller).
        unsafe { ptr.write(allocated.cast()) };
        Ok(())
    })())
}

/// `cuMemFreeHost`; refused where the thread's capture mode prohibits it
/// (as every free is).
///
/// # Safety
///
/// Nothing uses the memory after the call.
pub(crate) unsafe fn cuMemFreeHost(ptr: *mut c_void) -> CuResult {
    let mut state = lock();
    result(
        state
            .refuse_unsafe_call()
            .and_then(|()| state.free("cuMemFreeHost", Space::Host, ptr.addr())),
    )
}

/// `cuMemHostGetDevicePointer_v2`: a pinned allocation is mapped at its
/// host address, so an address inside one is its own device address.
/// `CUDA_ERROR_INVALID_VALUE` for any other pointer, for flags other than
/// 0 and for a null `pdptr`.
///
/// # Safety
///
/// `pdptr` is writable.
pub(crate) unsafe fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: c_uint,
) -> CuResult {
    const ENTRY: &str = "cuMemHostGetDevicePointer_v2";
    let mut state = lock();
    result((|| {
        let ctx = state.current_context(ENTRY)?;
        state.enter(ctx, ENTRY, false)?;
        if pdptr.is_null() || flags != 0 {
            return Err(codes::INVALID_VALUE);
        }
        let addr = p.addr();
        let pinned = state
            .host_allocations
            .range(..=addr)
            .next_back()
            .is_some_and(|(&start, a)| addr < start + a.layout.size());
        if !pinned {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: non-null and writable (our caller).
        unsafe { pdptr.write(addr as CUdeviceptr) };
        Ok(())
    })())
}

/// `cuMemAlloc_v2`: device memory is host memory addressed as a
/// `CUdeviceptr`, in the current context.
///
/// # Safety
///
/// `ptr` is writable.
pub(crate) unsafe fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize) -> CuResult {
    let mut state = lock();
    result((|| {
        if ptr.is_null() {
            return Err(codes::INVALID_VALUE);
        }
        let allocated = state.allocate("cuMemAlloc_v2", Space::Device, bytes)?;
        // SAFETY: non-null and writable (our caller).
        unsafe { ptr.write(allocated.addr() as CUdeviceptr) };
        Ok(())
    })())
}

/// `cuMemFree_v2`; refused where the thread's capture mode prohibits it.
///
/// # Safety
///
/// Nothing uses the memory after the call.
pub(crate) unsafe fn cuMemFree_v2(ptr: CUdeviceptr) -> CuResult {
    let mut state = lock();
    result(
        state
            .refuse_unsafe_call()
            .and_then(|()| state.free("cuMemFree_v2", Space::Device, ptr as usize)),
    )
}

/// `cuMemHostRegister_v2`: recorded (the memory stays the caller's), in the
/// current context.
///
/// # Safety
///
/// `bytes` bytes at `ptr` stay allocated until unregistered.
pub(crate) unsafe fn cuMemHostRegister_v2(
    ptr: *mut c_void,
    bytes: usize,
    _flags: c_uint,
) -> CuResult {
    const ENTRY: &str = "cuMemHostRegister_v2";
    let mut state = lock();
    result((|| {
        let ctx = state.current_context(ENTRY)?;
        state.enter(ctx, ENTRY, false)?;
        let addr = ptr.addr();
        if ptr.is_null() || bytes == 0 {
            return Err(codes::INVALID_VALUE);
        }
        let overlaps = state
            .registrations
            .range(..addr.saturating_add(bytes))
            .next_back()
            .is_some_and(|(start, r)| addr < start + r.len);
        if overlaps {
            return Err(codes::HOST_MEMORY_ALREADY_REGISTERED);
        }
        let device = state.contexts[&ctx].device;
        state.registrations.insert(
            addr,
            Registration {
                ctx,
                device,
                len: bytes,
            },
        );
        Ok(())
    })())
}

/// `cuMemHostUnregister`.
///
/// # Safety
///
/// Takes an address only, checked (`unsafe` as the entry point it stands in for).
pub(crate) unsafe fn cuMemHostUnregister(ptr: *mut c_void) -> CuResult {
    const ENTRY: &str = "cuMemHostUnregister";
    let mut state = lock();
    result((|| {
        let addr = ptr.addr();
        let Some(registration) = state.registrations.get(&addr) else {
            let device = state.current_device();
            state.violation(device, format!("{ENTRY}: {addr:#x} is not registered"));
            return Err(codes::HOST_MEMORY_NOT_REGISTERED);
        };
        let ctx = registration.ctx;
        state.enter(ctx, ENTRY, true)?;
        state.registrations.remove(&addr);
        Ok(())
    })())
}

/// `cuMemcpyHtoD_v2`: queued on the current context's default stream. From
/// page-locked memory (pinned or registered) it is waited for. From
/// pageable memory, as the driver does, the source is copied to a staging
/// buffer and the call returns: the copy to the device follows in stream
/// order.
///
/// # Safety
///
/// `src` is readable for `bytes` bytes.
pub(crate) unsafe fn cuMemcpyHtoD_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> CuResult {
    const ENTRY: &str = "cuMemcpyHtoD_v2";
    let guard = lock();
    if bytes > 0 && !src.is_null() && !guard.page_locked(src.addr(), bytes) {
        // SAFETY: forwarded: `src` is readable for `bytes` bytes.
        return unsafe { staged_upload(guard, dst, src.cast(), bytes) };
    }
    copy(guard, ENTRY, None, |state| {
        Ok(MemCopy {
            dst: SendPtr(state.device_range(ENTRY, dst, bytes)?),
            src: SendPtr(src.cast::<u8>().cast_mut()),
            bytes,
            device_side: DeviceSide::Dst,
        })
    })
}

/// `cuMemcpyDtoH_v2`: queued on the current context's default stream and
/// waited for.
///
/// # Safety
///
/// `dst` is writable for `bytes` bytes.
pub(crate) unsafe fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize) -> CuResult {
    const ENTRY: &str = "cuMemcpyDtoH_v2";
    copy(lock(), ENTRY, None, |state| {
        Ok(MemCopy {
            dst: SendPtr(dst.cast()),
            src: SendPtr(state.device_range(ENTRY, src, bytes)?),
            bytes,
            device_side: DeviceSide::Src,
        })
    })
}

/// `cuMemcpyHtoDAsync_v2`: an op, or a copy node if the stream is capturing.
///
/// # Safety
///
/// `src` stays readable and unchanged for `bytes` bytes until the copy has
/// run in stream order.
pub(crate) unsafe fn cuMemcpyHtoDAsync_v2(
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> CuResult {
    const ENTRY: &str = "cuMemcpyHtoDAsync_v2";
    copy(
        wait_for_room(lock(), stream),
        ENTRY,
        Some(stream),
        |state| {
            Ok(MemCopy {
                dst: SendPtr(state.device_range(ENTRY, dst, bytes)?),
                src: SendPtr(src.cast::<u8>().cast_mut()),
                bytes,
                device_side: DeviceSide::Dst,
            })
        },
    )
}

/// `cuMemcpyDtoHAsync_v2`: an op, or a copy node if the stream is capturing.
///
/// # Safety
///
/// `dst` stays writable and untouched for `bytes` bytes until the copy has
/// run in stream order.
pub(crate) unsafe fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CuResult {
    const ENTRY: &str = "cuMemcpyDtoHAsync_v2";
    copy(
        wait_for_room(lock(), stream),
        ENTRY,
        Some(stream),
        |state| {
            Ok(MemCopy {
                dst: SendPtr(dst.cast()),
                src: SendPtr(state.device_range(ENTRY, src, bytes)?),
                bytes,
                device_side: DeviceSide::Src,
            })
        },
    )
}

/// `cuMemcpyBatchAsync_v2` (CUDA 13's prototype of the batch copy): copy
/// `i` moves `sizes[i]` bytes from `srcs[i]` to `dsts[i]`, host addresses
/// given as `CUdeviceptr` values. Everything is checked first: `count` and
/// `numAttrs` nonzero, no null array, `attrsIdxs` starting at 0, strictly
/// increasing and below `count`, every access order valid, the stream a live
/// one of the current context other than the legacy default stream (which
/// the driver refuses), and every copy with exactly one side in a live
/// device allocation of the current context and the other a non-null host
/// address (`CUDA_ERROR_INVALID_VALUE` otherwise, a violation). Only then
/// is one copy op per entry queued in order, or one copy node each if the
/// stream is capturing: an invalid entry queues nothing. On a device given
/// [`refuse_batch_copies`](super::refuse_batch_copies) it returns
/// `CUDA_ERROR_NOT_SUPPORTED` with no effect.
///
/// # Safety
///
/// `dsts`, `srcs` and `sizes` are readable for `count` elements and
/// `attrs` and `attrsIdxs` for `numAttrs`, or null; every host side stays
/// valid (readable source, writable and untouched destination) for its
/// size until its copy has run in stream order, and its address carries
/// exposed provenance.
// The driver's prototype.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn cuMemcpyBatchAsync_v2(
    dsts: *mut CUdeviceptr,
    srcs: *mut CUdeviceptr,
    sizes: *mut usize,
    count: usize,
    attrs: *mut CUmemcpyAttributes,
    attrs_idxs: *mut usize,
    num_attrs: usize,
    stream: CUstream,
) -> CuResult {
    const ENTRY: &str = "cuMemcpyBatchAsync_v2";
    let mut guard = wait_for_room(lock(), stream);
    let state = &mut *guard;
    result((|| {
        let raw = id_of(stream);
        let stream = state.stream(ENTRY, raw)?;
        let (ctx, device) = (state.streams[&stream].ctx, state.streams[&stream].device);
        if state.devices[device].refuses_batch_copies {
            return Err(codes::NOT_SUPPORTED);
        }
        state.enter(ctx, ENTRY, true)?;
        // `NULL` and `CU_STREAM_LEGACY`; the per-thread stream (2) is a
        // stream of its own to the driver.
        if raw <= 1 {
            return Err(codes::INVALID_VALUE);
        }
        let arrays_null = dsts.is_null()
            || srcs.is_null()
            || sizes.is_null()
            || attrs.is_null()
            || attrs_idxs.is_null();
        if count == 0 || num_attrs == 0 || arrays_null {
            return Err(codes::INVALID_VALUE);
        }
        // SAFETY: non-null, and readable for these lengths (our caller).
        let (dsts, srcs, sizes, attrs, attrs_idxs) = unsafe {
            (
                core::slice::from_raw_parts(dsts, count),
                core::slice::from_raw_parts(srcs, count),
                core::slice::from_raw_parts(sizes, count),
                core::slice::from_raw_parts(attrs, num_attrs),
                core::slice::from_raw_parts(attrs_idxs, num_attrs),
            )
        };
        let indices_valid = attrs_idxs[0] == 0
            && attrs_idxs.windows(2).all(|pair| pair[0] < pair[1])
            && attrs_idxs[num_attrs - 1] < count;
        let orders_valid = attrs.iter().all(|a| {
            (CU_MEMCPY_SRC_ACCESS_ORDER_STREAM..=CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
                .contains(&a.srcAccessOrder)
        });
        if !indices_valid || !orders_valid {
            return Err(codes::INVALID_VALUE);
        }
        let copies = (0..count)
            .map(|i| state.batch_entry(ENTRY, i, dsts[i], srcs[i], sizes[i]))
            .collect::<Result<Vec<MemCopy>, u32>>()?;
        for copy in copies {
            let work = Work::Copy(copy);
            // All or nothing: a capture refuses its first node or none.
            if !state.capture_work(stream, work)? {
                state.enqueue(stream, OpKind::Work(work), None);
            }
        }
        state.devices[device].batch_copy_calls += 1;
        Ok(())
    })())
}

/// `cuPointerGetAttribute`: what the driver tells of an address inside a
/// live allocation (device memory, or pinned host memory); for any other
/// address `CUDA_ERROR_INVALID_VALUE`, as the driver answers for pageable
/// memory. Answers the memory type, device ordinal and range attributes.
///
/// # Safety
///
/// `data` is writable for the attribute's type.
pub(crate) unsafe fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_uint,
    ptr: CUdeviceptr,
) -> CuResult {
    const MEMORY_TYPE: c_uint = 2;
    const DEVICE_ORDINAL: c_uint = 9;
    const RANGE_START_ADDR: c_uint = 11;
    const RANGE_SIZE: c_uint = 12;
    let state = lock();
    let addr = ptr as usize;
    let find = |table: &std::collections::BTreeMap<usize, Allocation>| {
        table
            .range(..=addr)
            .next_back()
            .filter(|(start, a)| addr < *start + a.layout.size())
            .map(|(start, a)| (*start, a.layout.size(), a.device))
    };
    let (memory_type, (start, size, device)) = match find(&state.device_allocations) {
        Some(found) => (2 as c_uint, found),
        None => match find(&state.host_allocations) {
            Some(found) => (1, found),
            None => return CuResult(codes::INVALID_VALUE),
        },
    };
    if data.is_null() {
        return CuResult(codes::INVALID_VALUE);
    }
    // SAFETY: `data` is writable for the attribute's type (our caller),
    // which each arm writes as cuda.h gives it.
    unsafe {
        match attribute {
            MEMORY_TYPE => data.cast::<c_uint>().write(memory_type),
            DEVICE_ORDINAL => data
                .cast::<core::ffi::c_int>()
                .write(device as core::ffi::c_int),
            RANGE_START_ADDR => data.cast::<CUdeviceptr>().write(start as CUdeviceptr),
            RANGE_SIZE => data.cast::<usize>().write(size),
            _ => return CuResult(codes::INVALID_VALUE),
        }
    }
    CuResult(codes::SUCCESS)
}
