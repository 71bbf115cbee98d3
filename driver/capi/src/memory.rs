//! `hostcopy_device_buffer` and `hostcopy_host_buffer`: memory a transfer
//! holds a share of, so that C may free the handle while a transfer uses
//! it (the Rust rule: a transfer in flight keeps what it needs alive).

use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, TryLockError};

use hostcopy_driver::HostBuffer;
use hostcopy_driver::cuda::registration::{Register, Registration};
use hostcopy_driver::cuda::{Context, DeviceBuffer, DeviceView};

use crate::stager::hostcopy_stager;
use crate::status::{
    Failure, HOSTCOPY_ERROR_BUSY, HOSTCOPY_ERROR_OUT_OF_MEMORY, HOSTCOPY_ERROR_PANIC,
    HOSTCOPY_ERROR_UNSUPPORTED, entry, entry_void, hostcopy_status,
};
use crate::{out, reference};

/// Device memory shared by its handle and the transfers that use it.
#[derive(Debug)]
pub(crate) struct DeviceMemory {
    context: Context,
    ptr: u64,
    len: usize,
    /// Frees it: our allocation, or the caller's release callback.
    _owner: DeviceOwner,
}

/// Held only to be dropped: the memory goes with it.
#[derive(Debug)]
#[allow(dead_code)]
enum DeviceOwner {
    Allocated(DeviceBuffer),
    Foreign(Release),
}

/// A C callback that frees foreign device memory, called once from the
/// drop of the last share.
#[derive(Debug)]
struct Release {
    release: Option<unsafe extern "C" fn(*mut c_void)>,
    user_data: *mut c_void,
}

// SAFETY: the header tells the caller that `release(user_data)` may run
// on whichever thread lets go last, so the pointer may move between them.
unsafe impl Send for Release {}
// SAFETY: the pointer is only passed back to the callback, once, from the
// drop; shared access reads nothing through it.
unsafe impl Sync for Release {}

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(release) = self.release {
            // SAFETY: the caller gave this callback and pointer for this
            // one call, made once nothing uses the memory.
            unsafe { release(self.user_data) };
        }
    }
}

impl DeviceMemory {
    /// A view of all of it in `context`, holding a share of it (the
    /// driver checks the range and its device first).
    pub(crate) fn view(self: &Arc<Self>, context: &Context) -> Result<DeviceView, Failure> {
        let owner: Arc<dyn Send + Sync> = self.clone();
        // SAFETY: `owner` is a share of this memory, which frees it only
        // when the last share goes: our allocation, or a foreign one that
        // its release callback frees only then (the header's rule for
        // `hostcopy_device_buffer_wrap`). Ordering with other work on the
        // memory is the C caller's, as for any CUDA memory.
        Ok(unsafe { DeviceView::new(context, self.ptr, self.len, owner) }?)
    }
}

/// `hostcopy_device_buffer`: a handle's share of device memory.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct hostcopy_device_buffer {
    pub(crate) memory: Arc<DeviceMemory>,
}

fn new_device_handle(memory: DeviceMemory) -> *mut hostcopy_device_buffer {
    Box::into_raw(Box::new(hostcopy_device_buffer {
        memory: Arc::new(memory),
    }))
}

/// Allocates device memory on the stager's device.
///
/// # Safety
///
/// `stager` is null or a live stager; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_device_buffer_new(
    stager: *const hostcopy_stager,
    len: usize,
    out: *mut *mut hostcopy_device_buffer,
) -> hostcopy_status {
    entry("hostcopy_device_buffer_new", || {
        // SAFETY: the caller's contract.
        let (stager, out) = unsafe { (reference(stager, "stager")?, crate::out(out, "out")?) };
        let _saved = Context::save_current()?;
        let buffer = DeviceBuffer::new(&stager.context, len)?;
        out.write(new_device_handle(DeviceMemory {
            context: stager.context.clone(),
            ptr: buffer.raw(),
            len,
            _owner: DeviceOwner::Allocated(buffer),
        }));
        Ok(())
    })
}

/// Wraps device memory another runtime allocated.
///
/// # Safety
///
/// `stager` is null or a live stager; `out` is null or writable;
/// `release`, if not null, may be called once with `user_data` on any
/// thread, and nothing frees the memory before that call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_device_buffer_wrap(
    stager: *const hostcopy_stager,
    ptr: u64,
    len: usize,
    release: Option<unsafe extern "C" fn(*mut c_void)>,
    user_data: *mut c_void,
    out: *mut *mut hostcopy_device_buffer,
) -> hostcopy_status {
    entry("hostcopy_device_buffer_wrap", || {
        // SAFETY: the caller's contract.
        let (stager, out) = unsafe { (reference(stager, "stager")?, crate::out(out, "out")?) };
        let _saved = Context::save_current()?;
        // Checked now, so that a wrong address is refused here; the check
        // view's owner is a placeholder, dropped with it.
        // SAFETY: the view lives only for this statement and is not used
        // for any transfer.
        drop(unsafe { DeviceView::new(&stager.context, ptr, len, Arc::new(())) }?);
        let release = Release { release, user_data };
        out.write(new_device_handle(DeviceMemory {
            context: stager.context.clone(),
            ptr,
            len,
            _owner: DeviceOwner::Foreign(release),
        }));
        Ok(())
    })
}

/// Frees the handle; the memory goes once no transfer uses it.
///
/// # Safety
///
/// `buffer` is null or a live device buffer no other call uses now or
/// later.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_device_buffer_free(buffer: *mut hostcopy_device_buffer) {
    entry_void("hostcopy_device_buffer_free", || {
        if !buffer.is_null() {
            let _saved = Context::save_current();
            // SAFETY: the caller's contract.
            drop(unsafe { Box::from_raw(buffer) });
        }
    });
}

/// Its device address and length.
///
/// # Safety
///
/// `buffer` is null or live; `ptr` and `len` are each null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_device_buffer_get(
    buffer: *const hostcopy_device_buffer,
    ptr: *mut u64,
    len: *mut usize,
) -> hostcopy_status {
    entry("hostcopy_device_buffer_get", || {
        // SAFETY: the caller's contract.
        let buffer = unsafe { reference(buffer, "buffer") }?;
        if !ptr.is_null() {
            // SAFETY: the caller's contract: non-null means writable.
            unsafe { ptr.write(buffer.memory.ptr) };
        }
        if !len.is_null() {
            // SAFETY: as above.
            unsafe { len.write(buffer.memory.len) };
        }
        Ok(())
    })
}

#[cfg(feature = "bench")]
impl hostcopy_device_buffer {
    /// The allocation, where the handle holds the only share of memory
    /// `hostcopy_device_buffer_new` made.
    pub(crate) fn allocated_mut(&mut self) -> Option<&mut DeviceBuffer> {
        match &mut Arc::get_mut(&mut self.memory)?._owner {
            DeviceOwner::Allocated(buffer) => Some(buffer),
            DeviceOwner::Foreign(_) => None,
        }
    }
}

impl DeviceMemory {
    /// The context it was made or wrapped in.
    pub(crate) fn context(&self) -> &Context {
        &self.context
    }
}

/// A host buffer shared by its handle and the transfers that copy it.
///
/// Transfers never take the buffer's lock: what they need (its address
/// and length, and their claims on its bytes) is read without it, so no
/// transfer's caller waits behind a registration. The lock is taken for
/// writing only by the first `register` call (the one that starts a
/// registration, whose driver work for `HOSTCOPY_REGISTER_NOW` runs in
/// the call), and for reading by the registration queries.
#[derive(Debug)]
pub(crate) struct HostMemory {
    buffer: RwLock<HostBuffer>,
    /// The transfers holding it and where a registration stands, each
    /// call holding the mutex only for a few steps.
    state: Mutex<State>,
    /// Its first byte (exposed provenance) and length, read without the
    /// lock.
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

/// What a [`HostMemory`]'s mutex guards.
#[derive(Debug, Default)]
struct State {
    /// The transfers holding the buffer, with the bytes each reads or
    /// writes.
    claims: Vec<Claim>,
    /// The next claim's id.
    next: u64,
    /// A first `register` call is under way (under the write lock).
    registering: bool,
    /// A registration was started: later `register` calls only report it.
    started: bool,
}

/// The bytes a transfer holding the buffer reads or writes: offsets in
/// the buffer, sorted, disjoint, none empty.
#[derive(Debug)]
struct Claim {
    id: u64,
    writes: bool,
    ranges: Vec<(usize, usize)>,
}

/// Whether two sorted lists of disjoint `[start, end)` ranges share a
/// byte.
fn overlap(a: &[(usize, usize)], b: &[(usize, usize)]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].1 <= b[j].0 {
            i += 1;
        } else if b[j].1 <= a[i].0 {
            j += 1;
        } else {
            return true;
        }
    }
    false
}

/// `ranges` (start, end) sorted and merged, the empty ones dropped.
fn normalized(mut ranges: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
    ranges.retain(|&(start, end)| start < end);
    ranges.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

impl HostMemory {
    fn read(&self) -> Result<RwLockReadGuard<'_, HostBuffer>, Failure> {
        self.buffer.read().map_err(|_| unusable())
    }

    /// The state; a poisoned mutex is taken as it is (no step under it
    /// leaves it half-changed).
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How far its registration has got, without waiting: while the first
    /// `register` call is under way (the lock is its), nothing registered
    /// and not finished.
    fn registration_now(&self) -> Result<hostcopy_registration, Failure> {
        match self.buffer.try_read() {
            Ok(buffer) => Ok(buffer.registration().into()),
            Err(TryLockError::WouldBlock) => Ok(hostcopy_registration {
                registered: 0,
                len: self.len,
                refused: 0,
                finished: 0,
            }),
            Err(TryLockError::Poisoned(_)) => Err(unusable()),
        }
    }
}

fn unusable() -> Failure {
    Failure::new(
        HOSTCOPY_ERROR_PANIC,
        "the host buffer is unusable: an earlier call on it panicked",
    )
}

fn busy(message: impl Into<String>) -> Failure {
    Failure::new(HOSTCOPY_ERROR_BUSY, message)
}

/// `hostcopy_host_buffer`: a handle's share of a [`HostBuffer`].
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct hostcopy_host_buffer {
    memory: Arc<HostMemory>,
}

/// A transfer's hold on a host buffer: a share of it (the memory stays
/// mapped while the hold lives) and its claim on the bytes it reads or
/// writes, let go of when the hold is dropped.
#[derive(Debug)]
pub(crate) struct Hold {
    memory: Arc<HostMemory>,
    id: u64,
}

impl Hold {
    /// The buffer held.
    pub(crate) fn memory(&self) -> &HostMemory {
        &self.memory
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.memory
            .state()
            .claims
            .retain(|claim| claim.id != self.id);
    }
}

impl hostcopy_host_buffer {
    /// Its length.
    pub(crate) fn len(&self) -> usize {
        self.memory.len
    }

    /// A hold for a transfer that reads (`writes` false) or writes the
    /// bytes at `ranges` (offsets in the buffer, `(start, end)`); BUSY
    /// where another transfer holding the buffer writes any of them, or
    /// reads any this one writes, or while the first `register` call is
    /// under way. Never waits for a lock held long.
    pub(crate) fn hold(&self, writes: bool, ranges: Vec<(usize, usize)>) -> Result<Hold, Failure> {
        let ranges = normalized(ranges);
        let mut state = self.memory.state();
        if state.registering {
            return Err(busy(
                "the host buffer is being registered (hostcopy_host_buffer_register has not \
                 returned): start transfers of it once the call has returned",
            ));
        }
        if let Some(other) = state
            .claims
            .iter()
            .find(|claim| (writes || claim.writes) && overlap(&ranges, &claim.ranges))
        {
            return Err(busy(format!(
                "another transfer in flight {} bytes of the host buffer this one {}: wait for it \
                 first",
                if other.writes { "writes" } else { "reads" },
                if writes { "writes" } else { "reads" },
            )));
        }
        let id = state.next;
        state.next += 1;
        state.claims.push(Claim { id, writes, ranges });
        Ok(Hold {
            memory: self.memory.clone(),
            id,
        })
    }
}

/// Maps a host buffer.
///
/// # Safety
///
/// `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_new(
    len: usize,
    out: *mut *mut hostcopy_host_buffer,
) -> hostcopy_status {
    entry("hostcopy_host_buffer_new", || {
        // SAFETY: the caller's contract.
        let out = unsafe { crate::out(out, "out") }?;
        let mut buffer = HostBuffer::new(len).map_err(|error| {
            let status = match error.kind() {
                hostcopy_driver::HostBufferErrorKind::Map { .. } => HOSTCOPY_ERROR_OUT_OF_MEMORY,
                hostcopy_driver::HostBufferErrorKind::Unsupported => HOSTCOPY_ERROR_UNSUPPORTED,
            };
            Failure::new(status, error.to_string())
        })?;
        let addr = if len == 0 {
            0
        } else {
            buffer.as_mut_ptr().expose_provenance()
        };
        out.write(Box::into_raw(Box::new(hostcopy_host_buffer {
            memory: Arc::new(HostMemory {
                buffer: RwLock::new(buffer),
                state: Mutex::default(),
                addr,
                len,
            }),
        })));
        Ok(())
    })
}

/// Frees the handle; the memory goes once no transfer uses it.
///
/// # Safety
///
/// `buffer` is null or a live host buffer no other call uses now or later.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_free(buffer: *mut hostcopy_host_buffer) {
    entry_void("hostcopy_host_buffer_free", || {
        if !buffer.is_null() {
            let _saved = Context::save_current();
            // SAFETY: the caller's contract.
            drop(unsafe { Box::from_raw(buffer) });
        }
    });
}

/// Its first byte, NULL for none (or for a null handle).
///
/// # Safety
///
/// `buffer` is null or a live host buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_data(
    buffer: *const hostcopy_host_buffer,
) -> *mut c_void {
    // SAFETY: the caller's contract.
    match unsafe { buffer.as_ref() } {
        Some(buffer) => core::ptr::with_exposed_provenance_mut(buffer.memory.addr),
        None => core::ptr::null_mut(),
    }
}

/// Its length, 0 for a null handle.
///
/// # Safety
///
/// `buffer` is null or a live host buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_len(buffer: *const hostcopy_host_buffer) -> usize {
    // SAFETY: the caller's contract.
    unsafe { buffer.as_ref() }.map_or(0, |buffer| buffer.memory.len)
}

/// `hostcopy_registration`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types, missing_docs)]
pub struct hostcopy_registration {
    pub registered: usize,
    pub len: usize,
    pub refused: i32,
    pub finished: i32,
}

// The header's layout checks, with the same numbers.
const _: () = assert!(size_of::<hostcopy_registration>() == 24);
const _: () = assert!(core::mem::offset_of!(hostcopy_registration, refused) == 16);

impl From<Registration> for hostcopy_registration {
    fn from(registration: Registration) -> hostcopy_registration {
        hostcopy_registration {
            registered: registration.registered,
            len: registration.len,
            refused: registration
                .refused
                .map_or(0, |error| i32::try_from(error.code()).unwrap_or(i32::MAX)),
            finished: i32::from(registration.finished),
        }
    }
}

/// Writes `registration` where `out` points, if it is not null.
///
/// # Safety
///
/// `out` is null or writable.
unsafe fn report(out: *mut hostcopy_registration, registration: Registration) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(registration.into()) };
    }
}

/// Registers the buffer with the driver.
///
/// # Safety
///
/// `buffer` and `stager` are each null or live; `registration` is null or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_register(
    buffer: *mut hostcopy_host_buffer,
    stager: *const hostcopy_stager,
    when: i32,
    registration: *mut hostcopy_registration,
) -> hostcopy_status {
    entry("hostcopy_host_buffer_register", || {
        // SAFETY: the caller's contract; only shared access is taken.
        let (buffer, stager) = unsafe {
            (
                reference(buffer.cast_const(), "buffer")?,
                reference(stager, "stager")?,
            )
        };
        let when = match when {
            0 => Register::Never,
            1 => Register::Background,
            2 => Register::Now,
            other => {
                return Err(Failure::invalid(format!(
                    "when is {other}: HOSTCOPY_REGISTER_NEVER (0), _BACKGROUND (1) or _NOW (2)"
                )));
            }
        };
        let memory = &buffer.memory;
        let first = {
            let mut state = memory.state();
            if state.started || state.registering {
                false
            } else {
                if !state.claims.is_empty() {
                    return Err(busy(
                        "the host buffer is in use by a transfer: register it before starting \
                         transfers, or once they have been waited for",
                    ));
                }
                state.registering = true;
                true
            }
        };
        if !first {
            // Started (or being started by another call, whose end the
            // read lock waits for): report it.
            let status = memory.read()?.registration();
            // SAFETY: the caller's contract.
            unsafe { report(registration, status) };
            return Ok(());
        }
        // Ends `registering` however the call ends; `started` once a
        // registration was asked for.
        struct Registering<'a>(&'a HostMemory, bool);
        impl Drop for Registering<'_> {
            fn drop(&mut self) {
                let mut state = self.0.state();
                state.registering = false;
                state.started |= self.1;
            }
        }
        let mut registering = Registering(memory, false);
        let status = {
            let mut locked = memory.buffer.write().map_err(|_| unusable())?;
            let _saved = Context::save_current()?;
            locked.register(&stager.context, when)
        };
        registering.1 = !matches!(when, Register::Never);
        drop(registering);
        // SAFETY: the caller's contract.
        unsafe { report(registration, status) };
        Ok(())
    })
}

/// How far its registration has got.
///
/// # Safety
///
/// `buffer` is null or live; `registration` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_registration(
    buffer: *const hostcopy_host_buffer,
    registration: *mut hostcopy_registration,
) -> hostcopy_status {
    entry("hostcopy_host_buffer_registration", || {
        // SAFETY: the caller's contract.
        let (buffer, registration) = unsafe {
            (
                reference(buffer, "buffer")?,
                out(registration, "registration")?,
            )
        };
        registration.write(buffer.memory.registration_now()?);
        Ok(())
    })
}

/// Waits until its registration has ended.
///
/// # Safety
///
/// `buffer` is null or live; `registration` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_host_buffer_wait_registered(
    buffer: *const hostcopy_host_buffer,
    registration: *mut hostcopy_registration,
) -> hostcopy_status {
    entry("hostcopy_host_buffer_wait_registered", || {
        // SAFETY: the caller's contract.
        let (buffer, registration) = unsafe {
            (
                reference(buffer, "buffer")?,
                out(registration, "registration")?,
            )
        };
        registration.write(buffer.memory.read()?.wait_registered().into());
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// A raw handle that may cross to another thread (the handle types are
    /// `Send + Sync`; the pointer is not).
    #[derive(Clone, Copy)]
    struct Handle(*mut hostcopy_host_buffer);
    // SAFETY: the handle is `Sync`; the test frees it only after every
    // thread using it is done.
    unsafe impl Send for Handle {}

    /// While the first `register` call is under way (it holds the
    /// buffer's write lock for the whole of a REGISTER_NOW), the
    /// registration query answers at once ("without waiting", as the
    /// header says), and a transfer taking the buffer is refused at once
    /// (BUSY) rather than waiting for the registration.
    #[test]
    fn nothing_but_a_wait_waits_for_a_registration_under_way() {
        let mut raw = core::ptr::null_mut();
        // SAFETY: a writable pointer.
        assert_eq!(unsafe { hostcopy_host_buffer_new(1 << 20, &mut raw) }, 0);
        let handle = Handle(raw);
        // SAFETY: live until freed below.
        let buffer = unsafe { &*raw };
        // What `hostcopy_host_buffer_register` holds while it registers.
        buffer.memory.state().registering = true;
        let locked = buffer.memory.buffer.write().unwrap();

        let (sent, answers) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let handle = handle;
            let mut registration = core::mem::MaybeUninit::uninit();
            // SAFETY: a live buffer and a writable structure.
            let status =
                unsafe { hostcopy_host_buffer_registration(handle.0, registration.as_mut_ptr()) };
            // SAFETY: written on success.
            let finished = (status == 0).then(|| unsafe { registration.assume_init() }.finished);
            sent.send(("registration", status, finished)).unwrap();
            let status = entry("hold", || {
                // SAFETY: live.
                unsafe { &*handle.0 }.hold(true, vec![(0, 4096)]).map(drop)
            });
            sent.send(("hold", status, None)).unwrap();
        });
        let first = answers.recv_timeout(Duration::from_secs(10));
        let second = answers.recv_timeout(Duration::from_secs(10));
        drop(locked);
        buffer.memory.state().registering = false;
        thread.join().unwrap();
        // SAFETY: no other thread uses it now.
        unsafe { hostcopy_host_buffer_free(handle.0) };
        assert_eq!(
            first.expect("hostcopy_host_buffer_registration waited for the registration"),
            ("registration", 0, Some(0))
        );
        assert_eq!(
            second.expect("a transfer's hold waited for the registration"),
            ("hold", HOSTCOPY_ERROR_BUSY, None)
        );
    }

    #[test]
    fn claims_overlap_by_bytes() {
        assert!(overlap(&[(0, 10)], &[(9, 20)]));
        assert!(!overlap(&[(0, 10)], &[(10, 20)]));
        assert!(!overlap(&[(0, 1), (5, 6), (30, 40)], &[(1, 5), (6, 30)]));
        assert!(overlap(&[(0, 1), (5, 6), (30, 40)], &[(1, 5), (39, 50)]));
        assert_eq!(
            normalized(vec![(5, 9), (0, 0), (0, 3), (2, 5), (10, 12)]),
            vec![(0, 9), (10, 12)]
        );
    }
}
