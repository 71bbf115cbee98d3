//! cudarc's device memory in staged transfers (feature `cudarc`).
//!
//! A program that already uses [cudarc](https://docs.rs/cudarc) keeps its
//! `CudaSlice`s, views and streams: [`Context::from_cudarc`] gives the
//! stager the same primary context, and the `*_cudarc*` calls of
//! [`Stager`] take cudarc's memory and stream as they are, in safe code.
//!
//! ```no_run
//! use cudarc::driver::CudaContext;
//! use hostcopy_driver::cuda::{Context, staging::Stager};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let cuda = CudaContext::new(0)?;
//! let stream = cuda.new_stream()?;
//! let device = stream.clone_htod(&vec![1.5f32; 1 << 28])?; // 1 GiB
//! // ... kernels on `stream` write `device` ...
//! let mut stager = Stager::new(&Context::from_cudarc(&cuda)?)?;
//! let mut host = vec![0f32; 1 << 28];
//! // After the kernels queued on `stream`, and before whatever is queued next.
//! stager.cudarc_to_host(&mut host, &device, &stream)?;
//! # Ok(())
//! # }
//! ```
//!
//! # Order and lifetime
//!
//! Each call orders itself as a copy of cudarc's on `stream` would be:
//!
//! - before it reads (writes) the device memory, `stream` waits for the
//!   memory's last writer (and readers), through cudarc's own events
//!   (`DevicePtr::device_ptr`, `DevicePtrMut::device_ptr_mut`), and the
//!   stager's streams wait for `stream` ([`Stager::wait_for`]): the kernel
//!   that wrote the data, on `stream` or on any other cudarc stream, comes
//!   first;
//! - after it, cudarc records the memory's read (write) event on `stream`,
//!   so later writers, readers and the slice's release wait for it.
//!
//! The calls block until the bytes have arrived, and they borrow the
//! memory until then: safe code cannot drop a `CudaSlice` (which frees it)
//! while the stager uses it. If a transfer fails and the stager's streams
//! cannot be drained (queued copies may still run), `stream` is first made
//! to wait for everything queued on them, so the read (write) event that
//! cudarc records, and with it the slice's release, come after those
//! copies; where even that is refused, the context has a sticky error and
//! the driver refuses every later call in it, the release included. (A
//! [`DeviceBuffer`](crate::cuda::DeviceBuffer) is kept allocated for good
//! in that case instead: the stager owns a share of it, but only borrows a
//! `CudaSlice`.)
//!
//! A context where cudarc's event tracking was turned off
//! (`CudaContext::disable_event_tracking`, an `unsafe` call) has no events
//! to order by: there, as for cudarc's own copies, the caller orders work
//! on other streams with `stream`.
//!
//! Transfers that return at once ([`Stager::scope`]) take this layer's
//! [`DeviceBuffer`](crate::cuda::DeviceBuffer) and
//! [`DeviceView`] only: cudarc's ordering is
//! tied to a guard that a scope's transfer would have to hold until it
//! is waited for.

use ::cudarc::driver::{CudaContext, CudaStream, DevicePtr, DevicePtrMut};

use super::driver_path::DeviceSide;
use super::{Block, Blocks, Stager};
use crate::cuda::capture::RelaxedCapture;
use crate::cuda::{Context, DeviceView, Error, Event, StreamRef};
use crate::{HostMemory, HostMemoryMut};

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

impl Stager {
    /// Copies `dst.len()` bytes from the start of cudarc's device memory
    /// `src` (a `CudaSlice` or a view of one) into `dst`, in stream order
    /// with `stream` (see the [module documentation](self)), and waits for
    /// them.
    ///
    /// `stream` and `src` are in the stager's context, or the call is
    /// refused before anything is queued ([`Error::ContextMismatch`],
    /// [`Error::NotPrimaryContext`]); `dst` longer than `src` is
    /// [`Error::DeviceOutOfBounds`].
    pub fn cudarc_to_host<T, D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        stream: &CudaStream,
    ) -> Result<(), Error>
    where
        D: HostMemoryMut + ?Sized,
        S: DevicePtr<T>,
    {
        let host = dst.host_range_mut();
        self.read_cudarc(src, stream, |stager, view| {
            stager.run(host, DeviceSide::Source(view), Blocks::One { offset: 0 })
        })
    }

    /// Copies `src` to the start of cudarc's device memory `dst` (a
    /// `CudaSlice` or a mutable view of one), in stream order with
    /// `stream`, and waits for it. Refused as
    /// [`cudarc_to_host`](Self::cudarc_to_host) is.
    pub fn host_to_cudarc<T, D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        stream: &CudaStream,
    ) -> Result<(), Error>
    where
        D: DevicePtrMut<T>,
        S: HostMemory + ?Sized,
    {
        let host = src.host_range();
        self.write_cudarc(dst, stream, |stager, view| {
            stager.run(
                host,
                DeviceSide::Destination(view),
                Blocks::One { offset: 0 },
            )
        })
    }

    /// Copies each block from cudarc's device memory `src` into `dst` (a
    /// batch; offsets and lengths in bytes), in stream order with `stream`,
    /// and waits for them. Checked as
    /// [`device_to_host_blocks`](Self::device_to_host_blocks) checks a
    /// batch, and refused as [`cudarc_to_host`](Self::cudarc_to_host) is.
    pub fn cudarc_to_host_blocks<T, D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        blocks: &[Block],
        stream: &CudaStream,
    ) -> Result<(), Error>
    where
        D: HostMemoryMut + ?Sized,
        S: DevicePtr<T>,
    {
        let host = dst.host_range_mut();
        self.read_cudarc(src, stream, |stager, view| {
            stager.run(host, DeviceSide::Source(view), Blocks::Many(blocks))
        })
    }

    /// Copies each block from `src` into cudarc's device memory `dst` (a
    /// batch; offsets and lengths in bytes), in stream order with `stream`,
    /// and waits for them. Checked as
    /// [`host_to_device_blocks`](Self::host_to_device_blocks) checks a
    /// batch, and refused as [`cudarc_to_host`](Self::cudarc_to_host) is.
    pub fn host_to_cudarc_blocks<T, D, S>(
        &mut self,
        dst: &mut D,
        src: &S,
        blocks: &[Block],
        stream: &CudaStream,
    ) -> Result<(), Error>
    where
        D: DevicePtrMut<T>,
        S: HostMemory + ?Sized,
    {
        let host = src.host_range();
        self.write_cudarc(dst, stream, |stager, view| {
            stager.run(host, DeviceSide::Destination(view), Blocks::Many(blocks))
        })
    }

    /// Runs `transfer`, which reads `src`, between cudarc's wait for the
    /// memory's last writer and its record of this read.
    fn read_cudarc<T, S: DevicePtr<T>>(
        &mut self,
        src: &S,
        stream: &CudaStream,
        transfer: impl FnOnce(&mut Stager, &DeviceView) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.expect_cudarc(stream.context())?;
        self.expect_cudarc(src.stream().context())?;
        let len = src.num_bytes();
        // `stream` waits for the memory's last writer now; `read` records
        // the read on `stream` when dropped, after `in_order` returns.
        let (ptr, read) = src.device_ptr(stream);
        let result = self.in_order(stream, ptr, len, transfer);
        drop(read);
        result
    }

    /// Runs `transfer`, which writes `dst`, between cudarc's wait for the
    /// memory's last readers and writer and its record of this write.
    fn write_cudarc<T, D: DevicePtrMut<T>>(
        &mut self,
        dst: &mut D,
        stream: &CudaStream,
        transfer: impl FnOnce(&mut Stager, &DeviceView) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.expect_cudarc(stream.context())?;
        self.expect_cudarc(dst.stream().context())?;
        let len = dst.num_bytes();
        let (ptr, written) = dst.device_ptr_mut(stream);
        let result = self.in_order(stream, ptr, len, transfer);
        drop(written);
        result
    }

    /// Runs `transfer` on `len` bytes at `ptr` after the work queued on
    /// `stream`, and leaves `stream` ordered after whatever of it the
    /// stager's streams may still run.
    fn in_order(
        &mut self,
        stream: &CudaStream,
        ptr: u64,
        len: usize,
        transfer: impl FnOnce(&mut Stager, &DeviceView) -> Result<(), Error>,
    ) -> Result<(), Error> {
        // The caller borrows the memory for the whole call, and cudarc's
        // bounds are the slice's own.
        let context = self.context.clone();
        let view = DeviceView::borrowed(&context, ptr, len);
        // SAFETY: `stream` is a live stream (borrowed for this call) of the
        // stager's context (checked by the caller).
        let stream = unsafe { StreamRef::from_raw(&context, stream.cu_stream().cast()) };
        self.wait_for(stream)?;
        let result = transfer(self, &view);
        if self.undrained.is_some() {
            self.order_after_queued(stream);
        }
        result
    }

    /// Makes `stream` wait for everything queued on the stager's streams:
    /// after a transfer that could not be drained, so that cudarc's next
    /// use of the memory (its release too) comes after the copies the
    /// driver may still run. Failures are not reported: the transfer's own
    /// error is, and a context that refuses these calls refuses that next
    /// use too (a sticky error).
    fn order_after_queued(&self, stream: StreamRef<'_>) {
        let _relaxed = RelaxedCapture::new();
        for own in &self.lanes.streams {
            if let Ok(event) = Event::ordering(&self.context)
                && event.record(own.as_stream()).is_ok()
            {
                let _ = stream.wait_event(&event);
            }
        }
    }

    /// `Ok` if `context` is the stager's context.
    fn expect_cudarc(&self, context: &CudaContext) -> Result<(), Error> {
        if context.cu_ctx().addr() == self.context.raw().addr() {
            Ok(())
        } else if context.ordinal() == self.context.ordinal() {
            Err(Error::NotPrimaryContext {
                device: context.ordinal(),
            })
        } else {
            Err(Error::ContextMismatch {
                expected: self.context.ordinal(),
                found: context.ordinal(),
            })
        }
    }
}
