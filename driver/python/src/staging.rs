//! Staged transfers between GPU memory and the host memory Python already
//! has (`hostcopy_driver::cuda::staging`): `hostcopy.Stager`, this module's
//! class, and `Transfer` handles for the non-blocking copies. Conversion
//! only: each of the Python API's copies (the stager's four methods, and
//! the module's functions through `crate::default_stager`) names its
//! [`Direction`] and [`Batch`] and calls [`copy`], which takes the other
//! arguments as Python gave them (`crate::sides` reads the arrays and the
//! stream, `crate::blocks` the batch) and checks a range once; the crate
//! stages, orders and keeps ownership, and `hostcopy_driver::awaiting`
//! decides who ends a shared stager's transfers, how an event loop learns
//! of it, and what a transfer dropped unwaited does
//! (`SharedTransfer::drop_unwaited`). The GIL is released for every driver
//! call and for the whole of a blocking transfer.
//!
//! A `Transfer` holds the crate's `SharedTransfer` and the host memory,
//! which it lets go of once the transfer has ended (or hands to the
//! shared transfer, to be let go of when it ends, if it is dropped
//! before).

use std::sync::{Arc, Mutex, MutexGuard};

use hostcopy_driver::awaiting::{
    Begin, Closing, SharedStager, SharedTransfer, Start, keep_if_abandoned,
};
use hostcopy_driver::cuda::staging::{
    Block, Stager, StagingOptions, StagingOptionsBuilder, Stores, to_device, to_host,
};
use hostcopy_driver::cuda::{CUdeviceptr, CUstream, Context, DeviceView, Error, StreamRef};
use hostcopy_driver::{HostRange, RawHostMemory};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyTuple};

use crate::awaiting::Wakeup;
use crate::blocks::{private_table, to_blocks};
use crate::buffer::HostMemory;
use crate::errors::{self, closed, invalid_option, layer_error, out_of_bounds, transfer_failure};
use crate::integers::{argument, word};
use crate::life;
use crate::sides::{self, Sides};

/// A Python object that keeps device memory allocated, held by the layer
/// for as long as queued copies may use the memory (for good after an
/// error that leaves them running). Dropped without the GIL, its reference
/// is released the next time Python runs (pyo3's reference pool).
struct PyOwner(#[allow(dead_code)] Py<PyAny>);

/// A stager's options in force, as `Stager.options` shows them.
#[derive(Clone, Copy)]
struct InForce {
    chunk: usize,
    buffers: usize,
    workers: usize,
    /// `None`: chosen per upload (the Rust layer's default).
    h2d_streaming: Option<bool>,
    driver_path_below: usize,
    prefault: bool,
}

/// Pinned staging buffers, one stream each, and copy workers of its own,
/// on one device: what ``copy_to_host`` and ``copy_to_device`` use.
///
/// Options left ``None`` take the Rust layer's defaults, measured on an
/// H200 host: 16 MiB chunks, 4 staging buffers, workers = cores - 4 (on
/// machines of more than 8 cores; cores - 1 on smaller ones), each upload's
/// stores chosen for it (streaming for a blocking one staging up to
/// 256 MiB, cached otherwise; ``h2d_streaming=`` sets one kind for all),
/// the driver's own path below 2 MiB. ``chunk``,
/// ``buffers``, ``workers`` and ``driver_path_below`` are integers
/// (``int``, numpy integers) in the ranges ``InvalidOption`` names (chunk
/// 4 KiB to 1 GiB, 1 to 64 buffers, 0 to 1024 workers); anything else
/// raises ``InvalidOption``, a ``ValueError``, before any driver call.
/// ``close()`` (or leaving a ``with`` block) frees the staging buffers.
///
/// ``prefault`` (on by default): a transfer to the host samples a few of
/// the destination's pages (``mincore``) as it starts; where they are not
/// present yet (a fresh ``np.empty``), the copier makes each range's pages
/// present (``MADV_POPULATE_WRITE``: contents unchanged) just before its
/// chunks are copied, and advises transparent huge pages on the whole huge
/// pages of a private anonymous destination where the kernel has them in
/// ``madvise`` mode (a policy that stays on that part of the mapping;
/// never on file-backed or shared memory). ``prefault=False``: no system
/// call, the copy takes the page faults as it writes. Memory made for
/// copying into, such as a KV pool, is better made with ``hostcopy.empty``.
///
/// Threads: a stager may be shared by any number of threads (the default
/// stager of each device is, made once under a lock). One transfer starts
/// or finishes on it at a time, with the GIL released while it waits: a
/// blocking copy holds the stager until its bytes are in, so blocking
/// copies of several threads through one stager run one after another,
/// and a ``blocking=False`` call waits for them too, on an event loop's
/// thread as well (a ``wait()`` or an ``await`` waits for its own copies
/// without holding the stager, and holds it only briefly to settle the
/// transfer afterwards). For copies
/// of several threads that overlap, give each thread a ``Stager`` of its
/// own, or start them with ``blocking=False``. In asyncio code, start
/// transfers with ``blocking=False`` and ``await`` them: see ``Transfer``.
///
/// A transfer holds both of its sides alive, not their storage. torch
/// frees a CPU tensor's memory under any reference (``resize_()``,
/// ``set_()``, ``share_memory_()``), so a ``blocking=False`` transfer
/// refuses a torch CPU tensor as its host side, and a numpy array over one
/// or over a DLPack export (``MemoryNotHeld``): pass memory numpy owns
/// (``torch.from_numpy`` views it). Do not free the device side's memory
/// while a transfer runs (a cuda.core ``Buffer``'s ``close()``), nor
/// either side's from another thread during a blocking transfer, which
/// releases the GIL. A ``Stager`` may be subclassed (overriding
/// ``__new__`` to take other arguments) and weakly referenced.
//
// Shared by Python threads: one transfer starts or finishes at a time;
// the copies themselves overlap.
#[pyclass(
    module = "hostcopy._native",
    name = "Stager",
    frozen,
    weakref,
    subclass
)]
pub(crate) struct PyStager {
    /// The options in force, read without the lock (which a blocking
    /// transfer holds).
    options: InForce,
    /// Shared with its transfers, and through them with the stager's
    /// finish thread: no Python object in it, so that the thread never
    /// needs the GIL.
    shared: Arc<SharedStager>,
}

impl Drop for PyStager {
    fn drop(&mut self) {
        // The stager's drop would wait for a copier and workers this
        // process does not have (forked), or for a device the exit handler
        // gave up on: its memory is left as it is.
        keep_if_abandoned(|| Arc::clone(&self.shared));
    }
}

/// Closes a shared stager once the Python `Stager` and every transfer of
/// it are gone (`SharedStager`'s `on_drop`): the stager's drop waits for
/// the work queued on its streams, so without the GIL, which the thread
/// dropping it may hold (a Python object's dealloc) and which that work may
/// need (a Python host callback); and the thread's current context is put
/// back afterwards, as after every call (`crate::keeping_current`).
fn close_dropped(closing: Closing) {
    let close = move || match Context::save_current() {
        Ok(saved) => {
            closing();
            drop(saved);
        }
        // Closed all the same.
        Err(_) => closing(),
    };
    // SAFETY: reads the thread's Python thread state, if any (a
    // thread-local slot of the runtime); callable with or without the
    // GIL, before, during and after finalisation.
    if unsafe { pyo3::ffi::PyGILState_GetThisThreadState() }.is_null() {
        // A thread Python does not know: the stager's finish thread,
        // dropping the transfer that held the last reference. It holds no
        // GIL, so there is nothing to let go of, and it must never ask for
        // it: a thread that asks as finalisation begins blocks in
        // the interpreter, or is ended there mid-call (see `life`), and
        // `life::exiting()` read first cannot rule that out (the flag may
        // be set just after; this thread is not counted). Closed here,
        // without Python.
        close();
        return;
    }
    // A Python thread: the dealloc of the `Stager` or of a `Transfer`,
    // which holds the GIL (nothing else drops the last reference on a
    // Python thread), so the attach below never waits for it.
    if life::exiting() {
        // The interpreter may begin to finalise at any moment: closed here
        // with the GIL kept, as every call keeps it from the exit handler
        // on.
        close();
        return;
    }
    // Attached already; as the interpreter shuts down, the closure,
    // stager and all, is dropped on this thread as it is.
    Python::try_attach(move |py| life::detach(py, close));
}

/// A non-blocking transfer: `wait()` or `await` it; dropped unwaited, it
/// waits, unless the stager's finish thread has it (awaited, or dropped on
/// an event loop's thread), which then ends it.
#[pyclass(module = "hostcopy._native", frozen)]
pub(crate) struct Transfer {
    state: Arc<SharedTransfer>,
    /// The host memory, held until the transfer has ended; when dropped
    /// unended, handed to `state`, which lets it go once no copy can touch
    /// it.
    host: Mutex<Option<Py<HostMemory>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while one of these is held; the values stay whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// When a copy call returns: once the bytes have arrived, or once every
/// chunk is queued.
fn begin(blocking: bool) -> Begin {
    if blocking {
        Begin::Blocking
    } else {
        Begin::Queued
    }
}

impl PyStager {
    /// The device ordinal.
    pub(crate) fn ordinal(&self) -> usize {
        self.shared.context().ordinal()
    }

    /// Whether `close()` was called (or the exit handler closed it).
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.is_closed()
    }

    /// A stager on the device `device` (an ordinal, converted here: the
    /// constructor's and the default stager's), its primary context, with
    /// the Rust layer's defaults for every option left `None`: the counts
    /// `chunk`, `buffers`, `workers`, `driver_path_below`, and the flags
    /// `h2d_streaming`, `prefault`.
    pub(crate) fn new(
        py: Python<'_>,
        device: &Bound<'_, PyAny>,
        [chunk, buffers, workers, driver_path_below]: [Option<Bound<'_, PyAny>>; 4],
        [h2d_streaming, prefault]: [Option<Bound<'_, PyAny>>; 2],
    ) -> PyResult<Self> {
        if life::exiting() {
            // Before the options, whose `__index__` may be Python code.
            return Err(closed(py));
        }
        let device: usize = argument(device, "device")?;
        let flag = |value: Option<Bound<'_, PyAny>>, name| {
            value
                .filter(|value| !value.is_none())
                .map(|value| argument::<bool>(&value, name))
                .transpose()
        };
        let h2d_streaming = flag(h2d_streaming, "h2d_streaming")?;
        let prefault = flag(prefault, "prefault")?;
        type Set = fn(StagingOptionsBuilder, usize) -> StagingOptionsBuilder;
        let counts: [(&'static str, Set, _); 4] = [
            ("chunk", StagingOptionsBuilder::chunk, chunk),
            ("buffers", StagingOptionsBuilder::buffers, buffers),
            ("workers", StagingOptionsBuilder::workers, workers),
            (
                "driver_path_below",
                StagingOptionsBuilder::driver_path_below,
                driver_path_below,
            ),
        ];
        let mut options = StagingOptions::builder();
        for (option, set, value) in counts {
            if let Some(value) = value {
                options = set(options, count_option(py, option, set, &value)?);
            }
        }
        if let Some(streaming) = h2d_streaming {
            options = options.h2d_stores(if streaming {
                Stores::Streaming
            } else {
                Stores::Cached
            });
        }
        if let Some(prefault) = prefault {
            options = options.prefault(prefault);
        }
        // Checked before `Context::primary`: a bad option is refused without
        // a driver call (and without a driver).
        let options = options
            .build()
            .map_err(|failure| layer_error(py, "Stager", "device", failure))?;
        life::use_cuda()?;
        if life::exiting() {
            return Err(closed(py));
        }
        let made = life::detach(py, || {
            crate::keeping_current(|| {
                let context = Context::primary(device)?;
                let stager = Stager::with_options(&context, options)?;
                Ok((context, stager))
            })
        });
        let (context, stager) =
            made.map_err(|failure| layer_error(py, "Stager", "device", failure))?;
        let workers = stager.workers();
        let shared = SharedStager::new(context, stager, close_dropped);
        if !life::register(py, Arc::downgrade(shared.slot()))? {
            // The exit handler ran meanwhile, and did not see this one.
            life::detach(py, || shared.close());
            return Err(closed(py));
        }
        Ok(PyStager {
            options: InForce {
                chunk: options.chunk(),
                buffers: options.buffers(),
                workers,
                h2d_streaming: options
                    .h2d_stores()
                    .map(|stores| stores == Stores::Streaming),
                driver_path_below: options.driver_path_below(),
                prefault: options.prefault(),
            },
            shared,
        })
    }

    /// A staged transfer in `direction` between `nbytes` bytes of device
    /// memory at `device` (kept allocated by `owner`) and the host memory
    /// `host`, of the range or of each block, after the work queued on each
    /// stream of `wait_for`; work queued later on `order_before` waits for
    /// a non-blocking one. The crate decides the rest
    /// (`SharedStager::transfer`).
    ///
    /// # Safety
    ///
    /// `host` lies inside host memory that the caller holds until the
    /// transfer has ended (by this call when blocking, by the `Transfer` it
    /// returns otherwise), writable for a copy to the host; until then
    /// nothing else writes it, nor reads it for a copy to the host (the
    /// Python API's promise: see `copy_to_host`).
    #[allow(clippy::too_many_arguments)]
    unsafe fn stage(
        &self,
        py: Python<'_>,
        operation: &str,
        direction: Direction,
        host: HostRange,
        blocks: Option<Vec<Block>>,
        (device, nbytes, owner): (CUdeviceptr, usize, Py<PyAny>),
        wait_for: Vec<usize>,
        order_before: Option<usize>,
        begin: Begin,
    ) -> PyResult<Option<Arc<SharedTransfer>>> {
        if life::forked() {
            // The stager's lock may be held by a thread the fork left
            // behind.
            return Err(errors::forked(py));
        }
        let device_side = match direction {
            Direction::ToHost => "src",
            Direction::ToDevice => "dst",
        };
        let owner: Arc<dyn Send + Sync> = Arc::new(PyOwner(owner));
        let shared = &self.shared;
        life::detach(py, || {
            crate::keeping_current(|| {
                let context = shared.context();
                let handles = || wait_for.iter().chain(&order_before);
                let owners = handles()
                    .map(|&handle| stream_context(context, handle))
                    .collect::<Result<Vec<_>, Error>>()?;
                // SAFETY: the Python API documents the caller's promise:
                // each stream is valid for the call, and no other code
                // begins or ends a capture on it meanwhile (a broken
                // capture or a driver error otherwise, not a memory
                // error); its context is the one the driver named (the
                // special handles are valid in every context).
                let streams: Vec<StreamRef<'_>> = handles()
                    .zip(&owners)
                    .map(|(&handle, owner)| unsafe {
                        StreamRef::from_raw(owner, handle as CUstream)
                    })
                    .collect();
                let (after, before) = streams.split_at(wait_for.len());
                // SAFETY: the owner keeps the memory allocated (the Python
                // API's promise for the arrays it was given).
                let mut view = unsafe { DeviceView::new(context, device, nbytes, owner) }?;
                let start: Start = Box::new(move |stager, blocking| {
                    // SAFETY: the range is host memory our caller holds
                    // until the transfer has ended, writable for a copy to
                    // the host (this function's contract).
                    let mut host = unsafe { RawHostMemory::new(host) };
                    let spec = match direction {
                        Direction::ToHost => to_host(&mut host, &view),
                        Direction::ToDevice => to_device(&mut view, &host),
                    };
                    let spec = match &blocks {
                        Some(blocks) => spec.blocks(blocks),
                        None => spec,
                    };
                    if blocking {
                        // Below the crossover it takes the driver's path
                        // whatever it must wait for.
                        stager.run(spec)?;
                        return Ok(None);
                    }
                    // SAFETY: the host memory, as above; the view's owner
                    // keeps the device memory allocated until the transfer
                    // is finished, or for good if it is dropped with copies
                    // still running (the layer keeps the view's share); the
                    // device range stays unshared by the caller's promise
                    // (the Python API's).
                    unsafe { stager.start_unchecked(spec) }.map(Some)
                });
                Ok(shared.transfer(begin, after, before.first().copied(), start))
            })
        })
        .map_err(|failure| layer_error(py, operation, device_side, failure))?
        .map_err(|failure| transfer_failure(py, operation, device_side, failure))
    }
}

/// Which way a staged transfer of the binding goes.
#[derive(Clone, Copy)]
pub(crate) enum Direction {
    ToHost,
    ToDevice,
}

/// The `usize` of a count option given to the builder's `set`, converted
/// as `operator.index` converts: `int` and integer types with `__index__`
/// (numpy's), not `float` or `str`, nor `bool` (`buffers=True` is a
/// mistake, not 1). What is not an integer, or not a `usize` (negative, too
/// large), raises `InvalidOption` with the range `build` checks, the class
/// a value `build` refuses raises: a caller catches one class, `ValueError`.
fn count_option(
    py: Python<'_>,
    option: &'static str,
    set: fn(StagingOptionsBuilder, usize) -> StagingOptionsBuilder,
    value: &Bound<'_, PyAny>,
) -> PyResult<usize> {
    let integer = if value.is_instance_of::<PyBool>() {
        Err(PyTypeError::new_err("a bool is not a count"))
    } else {
        // An `__index__` may be Python code (see `life::python_code`).
        let index = py.import("operator")?.getattr("index")?;
        life::python_code(|| index.call1((value,))).ok_or_else(crate::errors::exiting)?
    };
    // The range is asked of the builder itself, with a value no range
    // holds, so that the binding does not restate the bounds; an option it
    // does not bound takes any `usize`.
    let (min, max) = match set(StagingOptions::builder(), usize::MAX).build() {
        Err(Error::InvalidOption {
            option: refused,
            min,
            max,
            ..
        }) if refused == option => (min, max),
        _ => (0, usize::MAX),
    };
    match integer {
        Ok(integer) => match integer.extract::<usize>() {
            Ok(count) => Ok(count),
            Err(_) => {
                let message =
                    format!("staging option {option} = {integer} is outside {min}..={max}");
                Err(invalid_option(py, message, option, integer, min, max)?)
            }
        },
        Err(not_integer) => {
            let message = format!(
                "staging option {option} = {} is not an integer: it takes {min}..={max}",
                value.repr()?
            );
            let refused = invalid_option(py, message, option, value.clone(), min, max)?;
            refused.set_cause(py, Some(not_integer));
            Err(refused)
        }
    }
}

/// The context of the stream `handle` names, for a stager of `context`:
/// `context` itself for the special handles 0 to 2 (0 and 1 name its
/// legacy default stream; 2, the per-thread one, is the calling thread's),
/// any other stream's as the driver says, checked against `context` by the
/// call that uses it.
fn stream_context(context: &Context, handle: usize) -> Result<Context, Error> {
    if handle <= 2 {
        return Ok(context.clone());
    }
    // SAFETY: the Python API documents the caller's promise: the stream is
    // valid for the call.
    unsafe { Context::of_stream_in(handle as CUstream, context) }
}

#[pymethods]
impl PyStager {
    #[new]
    #[pyo3(
        signature = (device=None, *, chunk=None, buffers=None, workers=None, h2d_streaming=None, driver_path_below=None, prefault=None),
        text_signature = "(device=None, *, chunk=None, buffers=None, workers=None, h2d_streaming=None, driver_path_below=None, prefault=None)"
    )]
    #[allow(clippy::too_many_arguments)] // one per keyword of `hostcopy.Stager`
    fn py_new(
        py: Python<'_>,
        device: Option<Bound<'_, PyAny>>,
        chunk: Option<Bound<'_, PyAny>>,
        buffers: Option<Bound<'_, PyAny>>,
        workers: Option<Bound<'_, PyAny>>,
        h2d_streaming: Option<Bound<'_, PyAny>>,
        driver_path_below: Option<Bound<'_, PyAny>>,
        prefault: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let device = sides::device_ordinal(py, device.as_ref())?;
        PyStager::new(
            py,
            &device,
            [chunk, buffers, workers, driver_path_below],
            [h2d_streaming, prefault],
        )
    }

    /// The device ordinal.
    #[getter]
    fn device(&self) -> usize {
        self.ordinal()
    }

    /// The options in force (defaults filled in), read without waiting for
    /// a transfer: ``chunk``, ``buffers``, ``workers``, ``h2d_streaming``
    /// (``None``: chosen per upload, streaming stores for a blocking one of
    /// up to 256 MiB), ``driver_path_below``, ``prefault``.
    // A fresh dict each read, in `hostcopy.StagerOptions`' shape.
    #[getter]
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let InForce {
            chunk,
            buffers,
            workers,
            h2d_streaming,
            driver_path_below,
            prefault,
        } = self.options;
        let options = PyDict::new(py);
        options.set_item("chunk", chunk)?;
        options.set_item("buffers", buffers)?;
        options.set_item("workers", workers)?;
        options.set_item("h2d_streaming", h2d_streaming)?;
        options.set_item("driver_path_below", driver_path_below)?;
        options.set_item("prefault", prefault)?;
        Ok(options)
    }

    /// Waits for every transfer in flight, then frees the staging buffers.
    /// Later transfers raise ``StagerClosed`` (a ``ValueError``); ``wait()`` on an earlier
    /// ``Transfer`` returns how it ended.
    //
    // The `Stager`'s drop waits for all the work queued on its streams,
    // then frees the staging buffers and stops the workers, all under the
    // stager's lock; after an error that leaves copies running it keeps
    // them instead.
    pub(crate) fn close(&self, py: Python<'_>) -> PyResult<()> {
        if life::forked() {
            return Err(errors::forked(py));
        }
        let shared = &self.shared;
        life::detach(py, || {
            crate::keeping_current(|| {
                shared.close();
                Ok(())
            })
        })
        .map_err(|failure| layer_error(py, "Stager.close", "device", failure))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the stager (``close()``), whatever happened in the block.
    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    /// Copies ``nbytes`` (default: all of ``src`` past ``src_offset``)
    /// from GPU memory ``src`` into host memory ``dst``; see
    /// ``hostcopy.copy_to_host``.
    #[pyo3(
        signature = (dst, src, nbytes=None, *, stream=None, blocking=Given::ABSENT, dst_offset=Given::ABSENT, src_offset=Given::ABSENT),
        text_signature = "($self, dst, src, nbytes=None, *, stream=None, blocking=True, dst_offset=0, src_offset=0)"
    )]
    #[allow(clippy::too_many_arguments)] // the Python API's arguments
    fn copy_to_host(
        slf: &Bound<'_, Self>,
        dst: Bound<'_, PyAny>,
        src: Bound<'_, PyAny>,
        nbytes: Option<Bound<'_, PyAny>>,
        stream: Option<Bound<'_, PyAny>>,
        blocking: Given<'_>,
        dst_offset: Given<'_>,
        src_offset: Given<'_>,
    ) -> PyResult<Option<Transfer>> {
        check_usable(slf.py())?;
        let batch = Batch::Range {
            nbytes,
            dst_offset,
            src_offset,
        };
        copy(slf, Direction::ToHost, batch, &dst, &src, stream, blocking)
    }

    /// Copies ``nbytes`` (default: all of ``src`` past ``src_offset``)
    /// from host memory ``src`` into GPU memory ``dst``; see
    /// ``hostcopy.copy_to_device``.
    #[pyo3(
        signature = (dst, src, nbytes=None, *, stream=None, blocking=Given::ABSENT, dst_offset=Given::ABSENT, src_offset=Given::ABSENT),
        text_signature = "($self, dst, src, nbytes=None, *, stream=None, blocking=True, dst_offset=0, src_offset=0)"
    )]
    #[allow(clippy::too_many_arguments)] // the Python API's arguments
    fn copy_to_device(
        slf: &Bound<'_, Self>,
        dst: Bound<'_, PyAny>,
        src: Bound<'_, PyAny>,
        nbytes: Option<Bound<'_, PyAny>>,
        stream: Option<Bound<'_, PyAny>>,
        blocking: Given<'_>,
        dst_offset: Given<'_>,
        src_offset: Given<'_>,
    ) -> PyResult<Option<Transfer>> {
        check_usable(slf.py())?;
        let batch = Batch::Range {
            nbytes,
            dst_offset,
            src_offset,
        };
        copy(
            slf,
            Direction::ToDevice,
            batch,
            &dst,
            &src,
            stream,
            blocking,
        )
    }

    /// Copies each block ``(device_offset, host_offset, nbytes)`` of
    /// ``blocks`` from GPU memory ``src`` into host memory ``dst``; see
    /// ``hostcopy.copy_blocks_to_host``.
    #[pyo3(
        signature = (dst, src, blocks, *, stream=None, blocking=Given::ABSENT),
        text_signature = "($self, dst, src, blocks, *, stream=None, blocking=True)"
    )]
    fn copy_blocks_to_host(
        slf: &Bound<'_, Self>,
        dst: Bound<'_, PyAny>,
        src: Bound<'_, PyAny>,
        blocks: Bound<'_, PyAny>,
        stream: Option<Bound<'_, PyAny>>,
        blocking: Given<'_>,
    ) -> PyResult<Option<Transfer>> {
        check_usable(slf.py())?;
        let batch = Batch::Blocks(blocks);
        copy(slf, Direction::ToHost, batch, &dst, &src, stream, blocking)
    }

    /// Copies each block ``(device_offset, host_offset, nbytes)`` of
    /// ``blocks`` from host memory ``src`` into GPU memory ``dst``; see
    /// ``hostcopy.copy_blocks_to_device``.
    #[pyo3(
        signature = (dst, src, blocks, *, stream=None, blocking=Given::ABSENT),
        text_signature = "($self, dst, src, blocks, *, stream=None, blocking=True)"
    )]
    fn copy_blocks_to_device(
        slf: &Bound<'_, Self>,
        dst: Bound<'_, PyAny>,
        src: Bound<'_, PyAny>,
        blocks: Bound<'_, PyAny>,
        stream: Option<Bound<'_, PyAny>>,
        blocking: Given<'_>,
    ) -> PyResult<Option<Transfer>> {
        check_usable(slf.py())?;
        let batch = Batch::Blocks(blocks);
        copy(
            slf,
            Direction::ToDevice,
            batch,
            &dst,
            &src,
            stream,
            blocking,
        )
    }
}

/// An optional argument as the caller gave it, `None` included, or
/// [`Given::ABSENT`]: read where the copy reads it, so that a bad one is
/// refused in its turn.
pub(crate) struct Given<'py>(Option<Bound<'py, PyAny>>);

impl Given<'static> {
    /// Not given: the argument's default.
    pub(crate) const ABSENT: Given<'static> = Given(None);
}

impl<'a, 'py> FromPyObject<'a, 'py> for Given<'py> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Given(Some(obj.to_owned())))
    }
}

/// What a copy moves: one range, or a batch of blocks.
pub(crate) enum Batch<'py> {
    /// `nbytes` bytes (`None`: all of the source past `src_offset`) from
    /// byte `src_offset` of the source to byte `dst_offset` of the
    /// destination (both 0 when not given).
    Range {
        nbytes: Option<Bound<'py, PyAny>>,
        dst_offset: Given<'py>,
        src_offset: Given<'py>,
    },
    /// `(device_offset, host_offset, nbytes)` rows (`crate::blocks`; `None`
    /// is refused as any other non-table).
    Blocks(Bound<'py, PyAny>),
}

/// The name of the Python API's copy in `direction` of `batch`, which its
/// errors say.
fn operation(direction: Direction, batch: &Batch<'_>) -> &'static str {
    match (direction, batch) {
        (Direction::ToHost, Batch::Range { .. }) => "copy_to_host",
        (Direction::ToDevice, Batch::Range { .. }) => "copy_to_device",
        (Direction::ToHost, Batch::Blocks(_)) => "copy_blocks_to_host",
        (Direction::ToDevice, Batch::Blocks(_)) => "copy_blocks_to_device",
    }
}

/// Every staged copy of the Python API (`Stager`'s four and the module's,
/// through the device's default stager), once the caller has refused it in
/// a forked child or at exit (`check_usable`): `crate::sides` reads `dst`,
/// `src` (`direction` says which is the device side) and `stream`,
/// `crate::blocks` a batch; a range is checked against both sides here,
/// once ([`span`]). The copy starts after the work queued on `stream` (and
/// on the streams the device side names). Blocking (`blocking` true, the
/// default): returns `None` when the bytes have arrived; otherwise a
/// `Transfer`, and work queued later on `stream` waits for it (so that it
/// cannot overwrite the source under the copy).
pub(crate) fn copy(
    stager: &Bound<'_, PyStager>,
    direction: Direction,
    batch: Batch<'_>,
    dst: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
    stream: Option<Bound<'_, PyAny>>,
    blocking: Given<'_>,
) -> PyResult<Option<Transfer>> {
    let call = read_call(stager.py(), direction, &batch, dst, src, stream, blocking)?;
    start(stager, direction, batch, call)
}

/// A copy's arguments as read ([`read_call`]): whether it blocks, the
/// table of its blocks (none for a range), and both sides.
pub(crate) struct Call<'py> {
    blocking: bool,
    table: Option<Bound<'py, PyAny>>,
    sides: Sides<'py>,
}

impl<'py> Call<'py> {
    /// The ordinal of the device holding the device side, named as the
    /// argument it was (`direction`): what the module's copies look their
    /// default stager up by.
    pub(crate) fn device_ordinal(&self, direction: Direction) -> PyResult<Bound<'py, PyAny>> {
        let side = match direction {
            Direction::ToHost => "src",
            Direction::ToDevice => "dst",
        };
        self.sides.device.ordinal(self.sides.host.py(), side)
    }
}

/// Reads a copy's arguments, each refused by its name: `blocking`, the
/// batch's table, then the sides and the stream (`crate::sides::read`),
/// none of which depends on the stager that will copy.
pub(crate) fn read_call<'py>(
    py: Python<'py>,
    direction: Direction,
    batch: &Batch<'py>,
    dst: &Bound<'py, PyAny>,
    src: &Bound<'py, PyAny>,
    stream: Option<Bound<'py, PyAny>>,
    blocking: Given<'py>,
) -> PyResult<Call<'py>> {
    let to_device = matches!(direction, Direction::ToDevice);
    let blocking = match &blocking.0 {
        // A `bool`, as `prefault=` and `h2d_streaming=`: never any
        // object's truth (`None`, an array, a string).
        Some(blocking) => argument::<bool>(blocking, "blocking")?,
        None => true,
    };
    // The arguments' own code (attributes, exports, `tolist()`) runs from
    // this frame, so not from the exit handler on (`life::python_code`),
    // when every transfer is refused anyway.
    let read = || -> PyResult<_> {
        let table = match batch {
            Batch::Blocks(blocks) => Some(private_table(blocks)?),
            Batch::Range { .. } => None,
        };
        let sides = sides::read(dst, src, to_device, stream.as_ref(), blocking)?;
        Ok(Call {
            blocking,
            table,
            sides,
        })
    };
    life::python_code(read).unwrap_or_else(|| Err(closed(py)))
}

/// Starts the copy `call` read, through `stager`: the range checked
/// against both sides ([`span`]) or the blocks by the stager, then staged.
pub(crate) fn start(
    stager: &Bound<'_, PyStager>,
    direction: Direction,
    batch: Batch<'_>,
    call: Call<'_>,
) -> PyResult<Option<Transfer>> {
    let py = stager.py();
    let operation = operation(direction, &batch);
    let to_device = matches!(direction, Direction::ToDevice);
    let Call {
        blocking,
        table,
        sides: Sides {
            device,
            host,
            consumer,
        },
    } = call;
    let (device_range, host_range, blocks) = match (table, batch) {
        // Every block lies inside both sides: the stager checks the batch.
        (Some(table), _) => (
            (device.ptr, device.nbytes),
            host.get().range(),
            Some(to_blocks(&table)?),
        ),
        (
            None,
            Batch::Range {
                nbytes,
                dst_offset,
                src_offset,
            },
        ) => {
            let span_arguments = span_arguments(&dst_offset, &src_offset, nbytes)?;
            let (device_range, host_range) = span(
                py,
                operation,
                to_device,
                (device.ptr, device.nbytes),
                host.get().range(),
                span_arguments,
            )?;
            (device_range, host_range, None)
        }
        (None, Batch::Blocks(_)) => unreachable!("a batch has a table"),
    };
    // SAFETY: `host_range` lies inside `host` (`span`, or the stager's
    // check of the batch), made writable for a copy to the host
    // (`sides::read` checks the destination), and `host` is held until the
    // transfer finishes: by this call when blocking, by the `Transfer`
    // otherwise. What that keeps depends on the memory: a buffer export
    // also stops the exporter resizing it (a `bytearray`); DLPack memory is
    // held only by its capsule, which keeps the owner object alive but not
    // its storage (torch's `resize_` frees it). That, and the device range
    // staying unshared, rest on the caller's promise, stated in the Python
    // API: do not resize or free the storage of either side while a
    // transfer runs.
    let pending = unsafe {
        stager.get().stage(
            py,
            operation,
            direction,
            host_range,
            blocks,
            (device_range.0, device_range.1, device.owner),
            device.wait_for,
            Some(consumer),
            begin(blocking),
        )
    }?;
    Ok(pending.map(|state| Transfer::new(state, host.unbind())))
}

/// `(dst_offset, src_offset, nbytes)` as words, each refused by its name.
fn span_arguments(
    dst_offset: &Given<'_>,
    src_offset: &Given<'_>,
    nbytes: Option<Bound<'_, PyAny>>,
) -> PyResult<(usize, usize, Option<usize>)> {
    let offset = |given: &Given<'_>, name: &'static str| match &given.0 {
        Some(offset) => word(offset, || name.into()),
        None => Ok(0),
    };
    let dst_offset = offset(dst_offset, "dst_offset")?;
    let src_offset = offset(src_offset, "src_offset")?;
    let nbytes = nbytes
        .map(|nbytes| word(&nbytes, || "nbytes".into()))
        .transpose()?;
    Ok((dst_offset, src_offset, nbytes))
}

/// The bounds check of a range transfer: `nbytes` bytes (`None`: all of
/// the source past `src_offset`) at `src_offset` of the source and at
/// `dst_offset` of the destination, the device side's `(address, len)`
/// and the host side's range given, `to_device` saying which is which.
/// The source is checked first; a range past the end of either side is
/// `OutOfBounds` naming it. The device address and the bytes moved, and
/// the host range.
fn span(
    py: Python<'_>,
    operation: &str,
    to_device: bool,
    (device, device_len): (CUdeviceptr, usize),
    host: HostRange,
    (dst_offset, src_offset, nbytes): (usize, usize, Option<usize>),
) -> PyResult<((CUdeviceptr, usize), HostRange)> {
    let (device_side, host_side) = if to_device {
        ("dst", "src")
    } else {
        ("src", "dst")
    };
    let (device_offset, host_offset, src_len) = if to_device {
        (dst_offset, src_offset, host.len)
    } else {
        (src_offset, dst_offset, device_len)
    };
    let nbytes = nbytes.unwrap_or_else(|| src_len.saturating_sub(src_offset));
    let device_range = || {
        let addr = u64::try_from(device_offset)
            .ok()
            .and_then(|offset| device.checked_add(offset));
        match (device_offset.checked_add(nbytes), addr) {
            (Some(end), Some(addr)) if end <= device_len => Ok((addr, nbytes)),
            _ => Err(layer_error(
                py,
                operation,
                device_side,
                Error::DeviceOutOfBounds {
                    offset: device_offset,
                    nbytes,
                    len: device_len,
                },
            )),
        }
    };
    let host_range = || match host_offset.checked_add(nbytes) {
        Some(end) if end <= host.len => Ok(HostRange {
            addr: host.addr + host_offset,
            len: nbytes,
        }),
        _ => {
            let len = host.len;
            let message = format!(
                "host range of {nbytes} bytes at offset {host_offset} is out of bounds \
                 of a {len}-byte buffer"
            );
            Err(out_of_bounds(
                py,
                message,
                host_side,
                host_offset,
                nbytes,
                len,
            )?)
        }
    };
    if to_device {
        let host = host_range()?;
        Ok((device_range()?, host))
    } else {
        let device = device_range()?;
        Ok((device, host_range()?))
    }
}

impl Transfer {
    fn new(state: Arc<SharedTransfer>, host: Py<HostMemory>) -> Transfer {
        Transfer {
            state,
            host: Mutex::new(Some(host)),
        }
    }

    /// Finishes the transfer unless it has ended already (the GIL
    /// released); how it ended. Lets go of the host memory afterwards.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        if life::forked() {
            return Err(errors::forked(py));
        }
        let state = &self.state;
        let ended = life::detach(py, || crate::keeping_current(|| Ok(state.finish())))
            .map_err(|failure| layer_error(py, "Transfer.wait", "device", failure))?;
        // Ended, or given up on with what a copy may touch kept by the
        // layer: the host memory may go (released after the lock: its
        // exporter's code may run and call back into this transfer).
        let host = lock(&self.host).take();
        drop(host);
        ended.map_err(|failure| transfer_failure(py, "Transfer.wait", "device", failure))
    }
}

#[pymethods]
impl Transfer {
    /// Waits until the bytes have arrived; the transfer's error, if any.
    /// Waiting again returns the same.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py)
    }

    /// Whether the bytes have arrived, without waiting for them, nor for
    /// the stager: `False` while another thread's `wait()` or the finish
    /// thread is ending it.
    fn done(&self, py: Python<'_>) -> PyResult<bool> {
        if life::forked() {
            return Err(errors::forked(py));
        }
        // The transfer's own mutex only, never the stager's: a blocking
        // copy holds that one for as long as it waits.
        life::detach(py, || crate::keeping_current(|| self.state.is_done()))
            .map_err(|failure| layer_error(py, "Transfer.done", "device", failure))
    }

    /// Has the stager's finish thread tell `wakeup` with `token` once the
    /// transfer has ended: `False`. `True` when it has ended already
    /// (nothing is registered; `wait()` returns at once).
    /// `hostcopy._awaiting` calls this, on the event loop's thread.
    fn _notify_when_finished(&self, py: Python<'_>, wakeup: &Wakeup, token: u64) -> PyResult<bool> {
        if life::forked() {
            // The finish thread is the parent's.
            return Err(errors::forked(py));
        }
        self.state
            .notify_when_finished(&wakeup.inner, token)
            .map_err(|failure| transfer_failure(py, "await", "device", failure))
    }

    /// `await transfer`: `hostcopy._awaiting.wait(transfer).__await__()`.
    fn __await__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        // `hostcopy._awaiting.wait` is Python code (see
        // `life::python_code`); from the exit handler on, `wait()` still
        // works.
        let wait = py.import("hostcopy._awaiting")?.getattr("wait")?;
        life::python_code(|| wait.call1((slf,))?.call_method0("__await__")).ok_or_else(|| {
            PyValueError::new_err(
                "the interpreter is exiting: wait() for the transfer instead of awaiting it",
            )
        })?
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
        // Dropped unwaited: the crate's rule (`SharedTransfer::drop_unwaited`)
        // decides who ends it and when the host memory may go; this side
        // says whether the thread runs an event loop and reports a failure
        // it cannot raise. Python drops a pyclass with the GIL held. A
        // transfer is often dropped while an exception propagates (its
        // frame unwinding): that exception is kept across the Python code
        // and the error reporting below.
        let host: Box<dyn Send> = Box::new(lock(&self.host).take());
        Python::attach(|py| {
            keeping_exception(py, || {
                let host = self.state.drop_unwaited(
                    host,
                    || on_event_loop(py),
                    || {
                        if let Err(failure) = self.finish(py) {
                            failure.write_unraisable(py, None);
                        }
                    },
                );
                // With the GIL: a buffer export's release may run Python.
                drop(host);
            })
        });
    }
}

/// Runs `f` with the exception being raised, if any, set aside, and sets
/// it again afterwards: Python code run meanwhile neither sees it nor
/// replaces it.
fn keeping_exception(_py: Python<'_>, f: impl FnOnce()) {
    /// The fetched exception, set again when dropped: after `f`, or while
    /// a panic in it unwinds.
    struct Kept([*mut pyo3::ffi::PyObject; 3]);
    impl Drop for Kept {
        fn drop(&mut self) {
            let [kind, value, traceback] = self.0;
            // SAFETY: the GIL is held (a `Kept` lives only inside
            // `keeping_exception`'s frame); restoring takes the three
            // references `PyErr_Fetch` gave (nulls clear the indicator,
            // dropping whatever `f` left there).
            unsafe { pyo3::ffi::PyErr_Restore(kind, value, traceback) };
        }
    }
    let mut kept = Kept([core::ptr::null_mut(); 3]);
    let [kind, value, traceback] = &mut kept.0;
    // SAFETY: the GIL is held (`_py`); the three references move out of
    // the thread's error indicator into `kept` (null where there is
    // none), which owns them until its drop moves them back.
    unsafe { pyo3::ffi::PyErr_Fetch(kind, value, traceback) };
    f();
    drop(kept);
}

/// Whether the calling thread runs an asyncio (or uvloop) event loop (not
/// asked once the exit handler has run: `false`).
fn on_event_loop(py: Python<'_>) -> bool {
    let running = || -> PyResult<bool> {
        match crate::sides::modules(py)?.get_item("asyncio")? {
            Some(asyncio) => Ok(!asyncio.call_method0("_get_running_loop")?.is_none()),
            None => Ok(false),
        }
    };
    life::python_code(|| running().unwrap_or(false)).unwrap_or(false)
}

/// Raises what every transfer would once CUDA is unusable to this
/// process: `CudaUnavailable` in a forked child, `StagerClosed` once the
/// exit handler ran. Asked once by each copy, first: before it looks up a
/// device's default stager or reads its arguments, as an array's export
/// would make driver calls of its own (a driver call on another thread
/// than the exiting one may still run when the driver tears its contexts
/// down at exit: none is made).
pub(crate) fn check_usable(py: Python<'_>) -> PyResult<()> {
    if life::forked() {
        return Err(errors::forked(py));
    }
    if life::exiting() {
        return Err(closed(py));
    }
    Ok(())
}

/// `crate::sides::is_capturing` after `check_usable`, for the tests and
/// the benchmarks: whether the stream `handle` is capturing a graph.
#[pyfunction]
pub(crate) fn stream_capturing(py: Python<'_>, handle: usize) -> PyResult<bool> {
    check_usable(py)?;
    sides::is_capturing(py, handle)
}
