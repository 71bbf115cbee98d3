//! User objects: refcounted; a destructor runs late, on a destructor thread,
//! once the last reference is gone.
//!
//! Graphs and executables hold references, and an executable keeps its own
//! until its queued launches have run (see `execution`), so a count of zero
//! means no launch that could use the object is queued or running.

use core::ffi::{c_uint, c_void};
use std::format;

use super::super::ffi::{CU_USER_OBJECT_NO_DESTRUCTOR_SYNC, CUhostFn, CUuserObject, CuResult};
use super::codes::{self, result};
use super::registry::{
    Destructor, Guard, HostCall, Kind, SendPtr, State, UserObject, handle, id_of, lock,
    mark_driver_thread, notify,
};

impl State {
    /// Drops `count` references to `object`; at zero its destructor is
    /// queued for the destructor thread.
    pub(super) fn release_object(&mut self, object: u64, count: u32) {
        let Some(entry) = self.objects.get_mut(&object) else {
            return;
        };
        let device = entry.device;
        if count > entry.refs {
            let refs = entry.refs;
            self.violation(
                Some(device),
                format!("user object {object:#x}: {count} references released, {refs} held"),
            );
        }
        let entry = self.objects.get_mut(&object).expect("looked up above");
        entry.refs = entry.refs.saturating_sub(count);
        if entry.refs > 0 {
            return;
        }
        let entry = self.objects.remove(&object).expect("looked up above");
        self.bury(object, Kind::UserObject, device);
        self.devices[device].destructors_pending += 1;
        self.destructors.push_back(Destructor {
            device,
            call: HostCall {
                f: entry.destroy,
                user_data: entry.ptr,
            },
        });
        if !self.destructor_thread {
            self.destructor_thread = true;
            // The previous destructor thread has finished its queue and
            // touches nothing after releasing the lock: joining is immediate.
            if let Some(previous) = self.destructor_handle.take() {
                let _ = previous.join();
            }
            let thread = std::thread::Builder::new()
                .name("hostcopy-sim-destructors".into())
                .spawn(run_destructors)
                .expect("spawn the destructor thread");
            self.destructor_handle = Some(thread);
        }
    }

    /// Adds references held by a graph or an executable.
    pub(super) fn retain_objects(&mut self, objects: &std::collections::BTreeMap<u64, u32>) {
        for (&object, &count) in objects {
            if let Some(entry) = self.objects.get_mut(&object) {
                entry.refs += count;
            }
        }
    }

    /// Drops references held by a graph or an executable.
    pub(super) fn release_objects(&mut self, objects: std::collections::BTreeMap<u64, u32>) {
        for (object, count) in objects {
            self.release_object(object, count);
        }
    }
}

/// The destructor thread: runs queued destructors in order, then ends (the
/// next release starts another).
fn run_destructors() {
    mark_driver_thread();
    let mut state: Guard = lock();
    while let Some(Destructor { device, call }) = state.destructors.pop_front() {
        drop(state);
        // SAFETY: the destructor and its pointer were given to
        // `cuUserObjectCreate`, whose caller promised they stay valid until
        // the driver calls it, once, which is now.
        unsafe { (call.f)(call.user_data.0) };
        state = lock();
        state.devices[device].destructors_pending -= 1;
        state.devices[device].destructors_run += 1;
        notify();
    }
    state.destructor_thread = false;
    notify();
}

/// Waits until no destructor is queued or running and the destructor
/// thread has ended, so that no thread of the simulator outlives the work
/// (Miri requires every thread to end before the process does).
pub(super) fn settle_destructors() {
    let mut state = lock();
    while state.destructor_thread {
        state = super::registry::wait(state);
    }
    let thread = state.destructor_handle.take();
    drop(state);
    if let Some(thread) = thread {
        let _ = thread.join();
    }
}

/// `cuUserObjectCreate`, in the current context.
///
/// # Safety
///
/// `object` is writable; `destroy(ptr)` is valid to call once, on any thread,
/// after the last reference is gone.
pub(crate) unsafe fn cuUserObjectCreate(
    object: *mut CUuserObject,
    ptr: *mut c_void,
    destroy: CUhostFn,
    initial_refcount: c_uint,
    flags: c_uint,
) -> CuResult {
    const ENTRY: &str = "cuUserObjectCreate";
    let mut state = lock();
    result((|| {
        let ctx = state.current_context(ENTRY)?;
        state.enter(ctx, ENTRY, false)?;
        let Some(destroy) = destroy else {
            return Err(codes::INVALID_VALUE);
        };
        if object.is_null() || initial_refcount == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC {
            return Err(codes::INVALID_VALUE);
        }
        let id = state.new_id();
        let device = state.contexts[&ctx].device;
        state.objects.insert(
            id,
            UserObject {
                device,
                refs: initial_refcount,
                ptr: SendPtr(ptr),
                destroy,
            },
        );
        // SAFETY: non-null and writable (our caller).
        unsafe { object.write(handle(id)) };
        Ok(())
    })())
}

/// `cuUserObjectRelease`: user objects belong to no context, so any thread
/// may release (the object's device's sticky error and faults apply).
///
/// # Safety
///
/// The caller owns `count` references.
pub(crate) unsafe fn cuUserObjectRelease(object: CUuserObject, count: c_uint) -> CuResult {
    const ENTRY: &str = "cuUserObjectRelease";
    let mut state = lock();
    result((|| {
        let id = state.object(ENTRY, id_of(object))?;
        let device = state.objects[&id].device;
        if let Some(ctx) = state.devices[device].context {
            state.enter(ctx, ENTRY, false)?;
        }
        if count == 0 {
            return Err(codes::INVALID_VALUE);
        }
        state.release_object(id, count);
        Ok(())
    })())
}
