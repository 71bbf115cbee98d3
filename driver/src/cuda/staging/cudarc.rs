//! cudarc's device memory in staged transfers (feature `cudarc`).
//!
//! A program that already uses [cudarc](https://docs.rs/cudarc) keeps its
//! `CudaSlice`s, views and streams: [`Context::from_cudarc`] gives the
//! stager the same primary context, and [`CudarcMemory`] lends cudarc's
//! memory, with the cudarc stream to order the transfer with, as the
//! device side of a transfer ([`to_host`](super::to_host),
//! [`to_device`](super::to_device)) that [`Stager::run`](super::Stager::run) runs, in safe
//! code.
//!
//! ```no_run
//! use cudarc::driver::CudaContext;
//! use hostcopy_driver::cuda::Context;
//! use hostcopy_driver::cuda::staging::{Stager, cudarc::CudarcMemory, to_device, to_host};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cuda = CudaContext::new(0)?;
//! let stream = cuda.new_stream()?;
//! let device = stream.clone_htod(&vec![1.5f32; 1 << 28])?; // 1 GiB
//! // ... kernels on `stream` write `device` ...
//! let mut stager = Stager::new(&Context::from_cudarc(&cuda)?)?;
//! let mut host = vec![0f32; 1 << 28];
//! // After the kernels queued on `stream`, and before whatever is queued next.
//! stager.run(to_host(&mut host, &CudarcMemory::read(&device, &stream)?))?;
//! // And back, into the second half of a slice of twice the size.
//! let mut twice = stream.alloc_zeros::<f32>(1 << 29)?;
//! let mut half = CudarcMemory::write(&mut twice, &stream)?;
//! stager.run(to_device(&mut half, &host).at(1 << 30))?;
//! # Ok(())
//! # }
//! ```
//!
//! # Order and lifetime
//!
//! Each transfer is ordered as cudarc orders its own copy of that memory on
//! `stream` (`CudaStream::memcpy_dtoh`, `memcpy_htod`), and after the
//! memory's own stream (the one it was allocated on) too:
//!
//! - before it reads the memory, `stream` waits for its last write that
//!   cudarc tracks (before it writes: for its last write and its last read),
//!   through cudarc's events (`DevicePtr::device_ptr`,
//!   `DevicePtrMut::device_ptr_mut`); then the stager's streams wait for
//!   `stream` and for the memory's own stream ([`Stager::wait_for`](super::Stager::wait_for)). A
//!   kernel that wrote the data on `stream`, on the memory's stream or on
//!   another cudarc stream of the same `CudaContext` comes first.
//! - after it, cudarc records the memory's read (write) event on `stream`,
//!   so its later writers, readers and its release wait for it.
//!
//! cudarc tracks one read event per slice, which each reader records
//! again, and tracks nothing in a context with one stream or with event
//! tracking turned off (`CudaContext::disable_event_tracking`, an `unsafe`
//! call): there, as for cudarc's own copies, work on other streams is
//! ordered with `stream` by the caller.
//!
//! [`Stager::run`](super::Stager::run) blocks until the bytes have arrived, and the transfer
//! borrows the memory until then: safe code cannot drop a `CudaSlice`
//! (which frees it) while the stager uses it. Every device copy runs on the stager's own streams
//! (a small transfer too: one asynchronous copy through the stager's own
//! pinned buffer). If a transfer fails and the stager's streams
//! cannot be drained (queued copies may still run), `stream` and the
//! memory's stream are first made to wait for everything queued on them,
//! so that the read (write) event cudarc records, and with it the slice's
//! release, come after those copies. That ordering can itself be refused:
//! with a sticky error the driver then refuses every later call in the
//! context, the release included; for any other refusal (the driver out of
//! memory for an event) the call still returns the error, and the stager
//! refuses further work until its streams drain. (A
//! [`DeviceBuffer`](crate::cuda::DeviceBuffer) is kept allocated for good
//! in that case instead: the stager owns a share of it, but only borrows
//! cudarc's memory.) An error cudarc kept from an earlier call it could not
//! return from (a drop, a wait) is returned before anything is queued, as
//! cudarc's own copies return it. cudarc keeps one such error per
//! `CudaContext`, shared by its threads: a call of cudarc's on another
//! thread in between can take it first (the transfer then runs without
//! that wait, as cudarc's own copy would), or this call can return an
//! error another thread's work left.
//!
//! A call on a stream that is capturing a graph is refused
//! ([`Error::Capturing`]) before anything is queued. Capture a stream only
//! from the thread that uses it: cudarc's captures do not go through this
//! layer's capture lock, so a capture another thread begins on `stream`
//! during the call may take in the stager's streams (the transfer then
//! fails and that capture is invalidated) or the event cudarc records
//! after the transfer.
//!
//! Transfers that return at once ([`StagingScope::start`](super::StagingScope::start),
//! [`Stager::start_unchecked`](super::Stager::start_unchecked)), the pinned copies and a stream's copies
//! refuse cudarc's memory ([`Error::OrderNotKept`]) and take this layer's
//! [`DeviceBuffer`](crate::cuda::DeviceBuffer) and
//! [`DeviceView`](crate::cuda::DeviceView) only: cudarc's ordering is tied
//! to a guard that a scope's transfer would have to hold until it is
//! waited for. Memory lent for reading ([`CudarcMemory::read`]) is refused
//! as a destination ([`Error::ReadOnlyDevice`]).

use core::cell::RefCell;
use std::sync::Arc;

use ::cudarc::driver::{CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, SyncOnDrop};

use crate::cuda::device::sealed::{self, OwnerOrder};
use crate::cuda::device::{DeviceInUse, DeviceMemory};
use crate::cuda::ffi::{CUdeviceptr, CUstream};
use crate::cuda::{Context, DriverError, Error, StreamRef};

/// cudarc's device memory a transfer may read: `CudaSlice<T>`,
/// `CudaView<T>` and `CudaViewMut<T>`. Sealed: their pointer, length and
/// events come from cudarc's safe constructors, which this layer trusts.
pub trait CudarcSource: private::Read {}

/// cudarc's device memory a transfer may write: `CudaSlice<T>` and
/// `CudaViewMut<T>`. Sealed as [`CudarcSource`] is.
pub trait CudarcDestination: private::Write {}

mod private {
    use std::sync::Arc;

    use ::cudarc::driver::{CudaStream, SyncOnDrop};

    use crate::cuda::ffi::CUdeviceptr;

    /// cudarc's `DevicePtr`, without its element type.
    pub trait Read {
        fn own_stream(&self) -> &Arc<CudaStream>;
        fn num_bytes(&self) -> usize;
        /// `stream` waits for the memory's last write; the guard records
        /// this read on `stream` when dropped.
        fn read<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>);
    }

    /// cudarc's `DevicePtrMut`, without its element type.
    pub trait Write: Read {
        /// `stream` waits for the memory's last read and write; the guard
        /// records this write on `stream` when dropped.
        fn write<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>);
    }
}

macro_rules! cudarc_memory {
    ($($memory:ty: $($trait:ident),+;)*) => {$(
        impl<T> private::Read for $memory {
            fn own_stream(&self) -> &Arc<CudaStream> {
                ::cudarc::driver::DeviceSlice::stream(self)
            }
            fn num_bytes(&self) -> usize {
                ::cudarc::driver::DeviceSlice::num_bytes(self)
            }
            fn read<'a>(&'a self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
                ::cudarc::driver::DevicePtr::device_ptr(self, stream)
            }
        }
        $(impl<T> $trait for $memory {})+
    )*};
}

cudarc_memory! {
    CudaSlice<T>: CudarcSource, CudarcDestination;
    CudaView<'_, T>: CudarcSource;
    CudaViewMut<'_, T>: CudarcSource, CudarcDestination;
}

impl<T> private::Write for CudaSlice<T> {
    fn write<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        ::cudarc::driver::DevicePtrMut::device_ptr_mut(self, stream)
    }
}

impl<T> private::Write for CudaViewMut<'_, T> {
    fn write<'a>(&'a mut self, stream: &'a CudaStream) -> (CUdeviceptr, SyncOnDrop<'a>) {
        ::cudarc::driver::DevicePtrMut::device_ptr_mut(self, stream)
    }
}

/// cudarc's device memory lent to a transfer run by [`Stager::run`](super::Stager::run), with
/// the cudarc stream the transfer is ordered with (see the [module
/// documentation](self)): the device side of [`to_host`](super::to_host)
/// and [`to_device`](super::to_device). Offsets (`at`, blocks) count bytes.
///
/// Made by [`read`](Self::read) (the transfer reads the memory) or
/// [`write`](Self::write) (it writes the memory, or reads it), which
/// refuse a stream of a context that is not a primary one
/// ([`Error::NotPrimaryContext`]). Everything else is checked by the
/// transfer, before anything is ordered or queued: `stream` or the memory
/// of another context than the stager's ([`Error::ContextMismatch`],
/// [`Error::NotPrimaryContext`]), a range or block outside the memory
/// ([`Error::DeviceOutOfBounds`], [`Error::BlockOutOfBounds`]), a capturing
/// stream ([`Error::Capturing`]), an error cudarc kept.
pub struct CudarcMemory<'a> {
    /// The primary context `stream` belongs to.
    context: Context,
    lent: Lent<'a>,
    stream: &'a CudaStream,
}

enum Lent<'a> {
    Read(&'a dyn private::Read),
    /// Borrowed mutably only while a transfer takes its address.
    Write(RefCell<&'a mut dyn private::Write>),
}

impl<'a> CudarcMemory<'a> {
    /// Lends `memory` for reading: a transfer to the host reads it on the
    /// stager's streams after `stream` has waited for the memory's last
    /// write, and cudarc then records the read on `stream`.
    pub fn read<S: CudarcSource>(
        memory: &'a S,
        stream: &'a CudaStream,
    ) -> Result<CudarcMemory<'a>, Error> {
        Ok(CudarcMemory {
            context: Context::from_cudarc(stream.context())?,
            lent: Lent::Read(memory),
            stream,
        })
    }

    /// Lends `memory` for writing: a transfer to the device writes it on
    /// the stager's streams after `stream` has waited for the memory's
    /// last read and write, and cudarc then records the write on `stream`.
    /// (A transfer to the host reads it as [`read`](Self::read) would.)
    pub fn write<D: CudarcDestination>(
        memory: &'a mut D,
        stream: &'a CudaStream,
    ) -> Result<CudarcMemory<'a>, Error> {
        Ok(CudarcMemory {
            context: Context::from_cudarc(stream.context())?,
            lent: Lent::Write(RefCell::new(memory)),
            stream,
        })
    }

    /// The memory's own stream (the one cudarc allocated it on).
    fn own_stream(&self) -> Arc<CudaStream> {
        match &self.lent {
            Lent::Read(memory) => Arc::clone(memory.own_stream()),
            Lent::Write(memory) => Arc::clone(memory.borrow().own_stream()),
        }
    }

    /// The transfer on `ptr`, between cudarc's wait (made by our caller)
    /// and its record of this use, which dropping `recorded` makes.
    fn transfer_at(
        &self,
        ptr: CUdeviceptr,
        len: usize,
        recorded: SyncOnDrop<'_>,
        transfer: &mut dyn FnMut(&dyn DeviceMemory) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let result = match cudarc_result(self.stream.context().check_err()) {
            Ok(()) => transfer(&Borrowed {
                context: self.context.clone(),
                ptr,
                len,
            }),
            // cudarc could not make `stream` wait for the earlier uses.
            Err(error) => Err(error),
        };
        drop(recorded);
        result
    }
}

impl DeviceMemory for CudarcMemory<'_> {}

impl sealed::Sealed for CudarcMemory<'_> {
    fn memory_context(&self) -> &Context {
        &self.context
    }
    fn memory_ptr(&self) -> Result<CUdeviceptr, Error> {
        // cudarc hands the address out only with its ordering.
        Err(Error::OrderNotKept)
    }
    fn memory_len(&self) -> usize {
        match &self.lent {
            Lent::Read(memory) => memory.num_bytes(),
            Lent::Write(memory) => memory.borrow().num_bytes(),
        }
    }
    fn memory_in_use(&self) -> DeviceInUse {
        DeviceInUse::borrowed()
    }
    fn memory_order(&self) -> Option<&dyn OwnerOrder> {
        Some(self)
    }
}

impl OwnerOrder for CudarcMemory<'_> {
    fn check(&self, context: &Context, writes: bool) -> Result<(), Error> {
        if writes && matches!(self.lent, Lent::Read(_)) {
            return Err(Error::ReadOnlyDevice);
        }
        let own = self.own_stream();
        expect_cudarc(context, self.stream.context())?;
        expect_cudarc(context, own.context())?;
        // An error cudarc kept from a call that could not return it (a
        // drop, a wait): returned here, as cudarc's own copies return it,
        // rather than left to make the waits that follow fail unseen.
        cudarc_result(self.stream.context().bind_to_thread())?;
        cudarc_result(own.context().bind_to_thread())?;
        Ok(())
    }

    fn check_not_capturing(&self, context: &Context) -> Result<(), Error> {
        let own = self.own_stream();
        for stream in [self.stream, &own] {
            // SAFETY: a live stream (borrowed, or held above, for longer
            // than the query) of `context` (checked by `check`).
            let stream = unsafe { StreamRef::from_raw(context, stream.cu_stream().cast()) };
            if stream.is_capturing()? {
                return Err(Error::Capturing);
            }
        }
        Ok(())
    }

    fn streams(&self) -> (CUstream, Option<CUstream>) {
        let stream = self.stream.cu_stream().cast();
        // The memory's own stream is held by the memory, which `self`
        // borrows: it lives as long as `self`.
        let own: CUstream = self.own_stream().cu_stream().cast();
        (stream, (own != stream).then_some(own))
    }

    fn in_order(
        &self,
        writes: bool,
        transfer: &mut dyn FnMut(&dyn DeviceMemory) -> Result<(), Error>,
    ) -> Result<(), Error> {
        // Asked before the memory is borrowed mutably below.
        let len = sealed::Sealed::memory_len(self);
        match &self.lent {
            Lent::Read(memory) => {
                let (ptr, recorded) = memory.read(self.stream);
                self.transfer_at(ptr, len, recorded, transfer)
            }
            Lent::Write(memory) => {
                let mut memory = memory.borrow_mut();
                let (ptr, recorded) = if writes {
                    memory.write(self.stream)
                } else {
                    memory.read(self.stream)
                };
                self.transfer_at(ptr, len, recorded, transfer)
            }
        }
    }
}

impl core::fmt::Debug for CudarcMemory<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CudarcMemory")
            .field("writable", &matches!(self.lent, Lent::Write(_)))
            .field("len", &sealed::Sealed::memory_len(self))
            .finish()
    }
}

/// A cudarc result as this layer's error.
fn cudarc_result<T>(result: Result<T, ::cudarc::driver::DriverError>) -> Result<T, Error> {
    result.map_err(|error| DriverError::from_code(error.0 as u32).into())
}

/// `Ok` if cudarc's `cudarc` is the context `context`.
fn expect_cudarc(context: &Context, cudarc: &CudaContext) -> Result<(), Error> {
    if cudarc.cu_ctx().addr() == context.raw().addr() {
        Ok(())
    } else if cudarc.ordinal() == context.ordinal() {
        Err(Error::NotPrimaryContext {
            device: cudarc.ordinal(),
        })
    } else {
        Err(Error::ContextMismatch {
            expected: context.ordinal(),
            found: cudarc.ordinal(),
        })
    }
}

/// cudarc's memory for the length of one blocking transfer, which borrows
/// it: nothing here can keep it allocated longer, and nothing needs to.
struct Borrowed {
    context: Context,
    ptr: CUdeviceptr,
    len: usize,
}

impl DeviceMemory for Borrowed {}

impl sealed::Sealed for Borrowed {
    fn memory_context(&self) -> &Context {
        &self.context
    }
    fn memory_ptr(&self) -> Result<CUdeviceptr, Error> {
        Ok(self.ptr)
    }
    fn memory_len(&self) -> usize {
        self.len
    }
    fn memory_in_use(&self) -> DeviceInUse {
        DeviceInUse::borrowed()
    }
}

impl Context {
    /// This layer's handle on the primary context that a cudarc context
    /// retains (`CudaContext::new`): one context, shared. Refused with
    /// [`Error::NotPrimaryContext`] for any other context of cudarc's
    /// (`CudaContext::new_non_primary`, green contexts): this layer works
    /// in primary contexts.
    pub fn from_cudarc(context: &CudaContext) -> Result<Context, Error> {
        let not_primary = Error::NotPrimaryContext {
            device: context.ordinal(),
        };
        if !context.is_primary() {
            return Err(not_primary);
        }
        let primary = Context::primary(context.ordinal())?;
        if primary.raw().addr() != context.cu_ctx().addr() {
            return Err(not_primary);
        }
        Ok(primary)
    }
}
