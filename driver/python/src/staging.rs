//! Staged transfers between GPU memory and the host memory Python already
//! has (`hostcopy_driver::cuda::staging`): a `Stager` per device, and
//! `Transfer` handles for the non-blocking ones. Conversion only: the
//! Python half classifies the arrays; the Rust layer stages, orders and
//! keeps ownership. The GIL is released for every driver call and for the
//! whole of a blocking transfer.

use std::sync::{Arc, Mutex, MutexGuard};

use hostcopy_driver::cuda::staging::{PendingTransfer, Stager, StagingOptions, Stores};
use hostcopy_driver::cuda::{CUdeviceptr, CUstream, Context, DeviceView, Error, StreamRef};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use hostcopy_driver::HostRange;

use crate::buffer::HostMemory;
use crate::errors::layer_error;

/// A Python object that keeps device memory allocated, held by the layer
/// for as long as queued copies may use the memory (for good after an
/// error that leaves them running). Dropped without the GIL, its reference
/// is released the next time Python runs.
struct PyOwner(#[allow(dead_code)] Py<PyAny>);

/// A stager of one device, shared by Python threads (one transfer starts
/// or finishes at a time; the copies themselves overlap).
#[pyclass(module = "hostcopy._native", name = "Stager", frozen)]
pub(crate) struct PyStager {
    context: Context,
    /// `None` once closed.
    stager: Mutex<Option<Stager>>,
}

/// A non-blocking transfer: `wait()` for it; dropped unwaited, it waits.
#[pyclass(module = "hostcopy._native", frozen)]
pub(crate) struct Transfer {
    stager: Py<PyStager>,
    pending: Mutex<Option<PendingTransfer>>,
    /// The host memory, held until the transfer is finished.
    host: Mutex<Option<Py<HostMemory>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while one of these is held; the values stay whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl PyStager {
    /// Runs `f` on the stager with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        operation: &str,
        f: impl FnOnce(&mut Stager, &Context) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut stager = lock(&self.stager);
            match stager.as_mut() {
                Some(stager) => crate::keeping_current(|| f(stager, &self.context)).map_err(Some),
                None => Err(None),
            }
        })
        .map_err(|failure| match failure {
            Some(failure) => layer_error(py, operation, "device", failure),
            None => PyValueError::new_err("the stager is closed"),
        })
    }
}

/// The stream a handle names, in `context`: the legacy default stream of
/// `context` for handles 0 to 2 (0 and 1 name it; 2, the per-thread one,
/// is the calling thread's), any other stream as the driver says, checked
/// against `context` by the call that uses it.
fn with_stream<T>(
    context: &Context,
    handle: usize,
    f: impl FnOnce(StreamRef<'_>) -> Result<T, Error>,
) -> Result<T, Error> {
    let raw = handle as CUstream;
    if handle <= 2 {
        // SAFETY: the special handles are valid in every context.
        return f(unsafe { StreamRef::from_raw(context, raw) });
    }
    // SAFETY: the Python API documents the caller's promise: the stream is
    // valid for the call.
    let owner = unsafe { Context::of_stream(raw) }?;
    // SAFETY: as above; its context is the one the driver named.
    f(unsafe { StreamRef::from_raw(&owner, raw) })
}

#[pymethods]
impl PyStager {
    /// A stager on device `device` (its primary context), with the Rust
    /// layer's defaults for every option left `None`.
    #[new]
    #[pyo3(signature = (device, chunk=None, buffers=None, workers=None, h2d_streaming=None, driver_path_below=None))]
    fn new(
        py: Python<'_>,
        device: usize,
        chunk: Option<usize>,
        buffers: Option<usize>,
        workers: Option<usize>,
        h2d_streaming: Option<bool>,
        driver_path_below: Option<usize>,
    ) -> PyResult<Self> {
        let mut options = StagingOptions::builder();
        if let Some(chunk) = chunk {
            options = options.chunk(chunk);
        }
        if let Some(buffers) = buffers {
            options = options.buffers(buffers);
        }
        if let Some(workers) = workers {
            options = options.workers(workers);
        }
        if let Some(streaming) = h2d_streaming {
            options = options.h2d_stores(if streaming {
                Stores::Streaming
            } else {
                Stores::Cached
            });
        }
        if let Some(below) = driver_path_below {
            options = options.driver_path_below(below);
        }
        let options = options.build();
        let made = py.detach(|| {
            crate::keeping_current(|| {
                let context = Context::primary(device)?;
                let stager = Stager::with_options(&context, options)?;
                Ok((context, stager))
            })
        });
        let (context, stager) =
            made.map_err(|failure| layer_error(py, "Stager", "device", failure))?;
        Ok(PyStager {
            context,
            stager: Mutex::new(Some(stager)),
        })
    }

    /// The device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.context.ordinal()
    }

    /// `(chunk, buffers, workers, h2d_streaming, driver_path_below)`.
    fn options(&self) -> PyResult<(usize, usize, usize, bool, usize)> {
        let stager = lock(&self.stager);
        let stager = stager
            .as_ref()
            .ok_or_else(|| PyValueError::new_err("the stager is closed"))?;
        let options = stager.options();
        Ok((
            options.chunk(),
            options.buffers(),
            stager.workers(),
            options.h2d_stores() == Stores::Streaming,
            options.driver_path_below(),
        ))
    }

    /// Frees the staging buffers and stops the workers, once every
    /// transfer queued has finished. Later calls raise.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let stager = py.detach(|| lock(&self.stager).take());
        py.detach(move || {
            crate::keeping_current(move || {
                drop(stager);
                Ok(())
            })
        })
        .map_err(|failure| layer_error(py, "Stager.close", "device", failure))
    }

    /// Copies `nbytes` bytes from device memory at `src` (kept allocated by
    /// `src_owner`) to byte `dst_offset` of `dst`, after the work queued on
    /// each stream of `wait_for`. Blocking: returns `None` when the bytes
    /// have arrived; otherwise a `Transfer`.
    #[pyo3(signature = (dst, dst_offset, src, src_owner, nbytes, wait_for, blocking))]
    #[allow(clippy::too_many_arguments)]
    fn device_to_host(
        slf: Bound<'_, Self>,
        dst: Bound<'_, HostMemory>,
        dst_offset: usize,
        src: CUdeviceptr,
        src_owner: Py<PyAny>,
        nbytes: usize,
        wait_for: Vec<usize>,
        blocking: bool,
    ) -> PyResult<Option<Transfer>> {
        let py = slf.py();
        let host = host_range(py, dst.get(), dst_offset, nbytes, "copy_to_host", "dst")?;
        let started = slf.get().with(py, "copy_to_host", move |stager, context| {
            // SAFETY: the owner keeps the memory allocated (the Python
            // API's promise for the arrays it was given).
            let view =
                unsafe { DeviceView::new(context, src, nbytes, Arc::new(PyOwner(src_owner))) }?;
            for &stream in &wait_for {
                with_stream(context, stream, |stream| stager.wait_for(stream))?;
            }
            // SAFETY: `dst`'s export is held until the transfer finishes:
            // below for a blocking one, by the `Transfer` otherwise.
            let pending = unsafe { stager.start_device_to_host_unchecked(host, &view, 0) }?;
            if blocking {
                stager.finish_pending(pending)?;
                return Ok(None);
            }
            Ok(Some(pending))
        })?;
        Ok(started.map(|pending| Transfer::new(slf.unbind(), pending, dst.unbind())))
    }

    /// Copies `nbytes` bytes from byte `src_offset` of `src` to device
    /// memory at `dst` (kept allocated by `dst_owner`), after the work
    /// queued on each stream of `wait_for`. Blocking: returns `None` when
    /// the bytes have arrived; otherwise a `Transfer`, and work queued
    /// later on `order_before` waits for it.
    #[pyo3(signature = (dst, dst_owner, src, src_offset, nbytes, wait_for, order_before, blocking))]
    #[allow(clippy::too_many_arguments)]
    fn host_to_device(
        slf: Bound<'_, Self>,
        dst: CUdeviceptr,
        dst_owner: Py<PyAny>,
        src: Bound<'_, HostMemory>,
        src_offset: usize,
        nbytes: usize,
        wait_for: Vec<usize>,
        order_before: Option<usize>,
        blocking: bool,
    ) -> PyResult<Option<Transfer>> {
        let py = slf.py();
        let host = host_range(py, src.get(), src_offset, nbytes, "copy_to_device", "src")?;
        let started = slf
            .get()
            .with(py, "copy_to_device", move |stager, context| {
                // SAFETY: as in `device_to_host`.
                let view =
                    unsafe { DeviceView::new(context, dst, nbytes, Arc::new(PyOwner(dst_owner))) }?;
                for &stream in &wait_for {
                    with_stream(context, stream, |stream| stager.wait_for(stream))?;
                }
                // SAFETY: `src`'s export is held until the transfer finishes;
                // the device range is the caller's to keep unshared meanwhile
                // (the Python API's promise).
                let pending = unsafe { stager.start_host_to_device_unchecked(&view, 0, host) }?;
                if blocking {
                    stager.finish_pending(pending)?;
                    return Ok(None);
                }
                let ordered = order_before.map_or(Ok(()), |stream| {
                    with_stream(context, stream, |stream| pending.order_before(stream))
                });
                if let Err(failure) = ordered {
                    // Started: finish it before reporting, so nothing is left queued.
                    let _ = stager.finish_pending(pending);
                    return Err(failure);
                }
                Ok(Some(pending))
            })?;
        Ok(started.map(|pending| Transfer::new(slf.unbind(), pending, src.unbind())))
    }
}

/// `nbytes` bytes at `offset` of `memory`, or `OutOfBounds` for `side`.
fn host_range(
    py: Python<'_>,
    memory: &HostMemory,
    offset: usize,
    nbytes: usize,
    operation: &str,
    side: &str,
) -> PyResult<HostRange> {
    let whole = memory.range();
    match offset.checked_add(nbytes) {
        Some(end) if end <= whole.len => Ok(HostRange {
            addr: whole.addr + offset,
            len: nbytes,
        }),
        _ => Err(layer_error(
            py,
            operation,
            side,
            Error::DeviceOutOfBounds {
                offset,
                nbytes,
                len: whole.len,
            },
        )),
    }
}

impl Transfer {
    fn new(stager: Py<PyStager>, pending: PendingTransfer, host: Py<HostMemory>) -> Transfer {
        Transfer {
            stager,
            pending: Mutex::new(Some(pending)),
            host: Mutex::new(Some(host)),
        }
    }

    /// Finishes the transfer if it is not yet; with the GIL released.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        let Some(pending) = lock(&self.pending).take() else {
            return Ok(());
        };
        let finished = self
            .stager
            .get()
            .with(py, "Transfer.wait", move |stager, _| {
                stager.finish_pending(pending)
            });
        // Finished (or given up on and kept by the layer): the host memory
        // may go.
        lock(&self.host).take();
        finished
    }
}

#[pymethods]
impl Transfer {
    /// Waits until the bytes have arrived; the transfer's error, if any.
    /// Waiting again returns at once.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py)
    }

    /// Whether the bytes have arrived, without waiting.
    fn done(&self, py: Python<'_>) -> PyResult<bool> {
        let pending = lock(&self.pending);
        match pending.as_ref() {
            None => Ok(true),
            Some(pending) => pending
                .is_finished()
                .map_err(|failure| layer_error(py, "Transfer.done", "device", failure)),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Waits, whatever happened in the block; an error of the transfer is
    /// raised unless the block raised already.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc_value: Option<Bound<'_, PyAny>>,
        _traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let finished = self.finish(py);
        if exc_type.is_none() {
            finished?;
        }
        Ok(false)
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        if lock(&self.pending).is_none() {
            return;
        }
        // Dropped unwaited: wait here, so that the arrays it holds are
        // released only after the copy. A failure cannot be raised from a
        // destructor; it is reported as an unraisable error.
        Python::attach(|py| {
            if let Err(failure) = self.finish(py) {
                failure.write_unraisable(py, None);
            }
        });
    }
}

/// The ordinal of the device whose memory holds `ptr`, as the driver
/// reports it (`NotDeviceMemory` for host memory and unknown addresses).
#[pyfunction]
pub(crate) fn device_holding(py: Python<'_>, ptr: CUdeviceptr, side: &str) -> PyResult<usize> {
    py.detach(|| crate::keeping_current(|| DeviceView::device_holding(ptr)))
        .map_err(|failure| layer_error(py, "copy", side, failure))
}
