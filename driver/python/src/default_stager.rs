//! The default stager of each device: `hostcopy.default_stager(device)`,
//! made on first use and shared by every thread, and the module's copies
//! (`hostcopy.copy_to_host` and the rest), which find the device of their
//! device side (`crate::sides::device_of`) and copy through its stager
//! (`crate::staging::copy`).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pyo3::prelude::*;
use pyo3::sync::MutexExt;

use crate::sides;
use crate::staging::{Batch, Direction, Given, PyStager, Transfer, check_usable, read_call, start};

/// The default stagers made so far, by device ordinal. Locked only to look
/// one up or to put one in, never across Python code (a stager's
/// constructor runs some, which may ask for a default stager itself).
type Stagers = Mutex<Vec<(usize, Py<PyStager>)>>;

/// The registry in use: held only to clone it out, with the GIL, so never
/// across a fork (which Python makes holding the GIL); a forked child
/// starts a registry of its own (`forget_in_child`), since the lock of
/// this one may be held by a parent's thread that the fork left behind.
static REGISTRY: Mutex<Option<Arc<Stagers>>> = Mutex::new(None);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while one of these is held; the values stay whole.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The open default stager of `ordinal` in `stagers`, if there is one.
fn open_stager<'py>(
    py: Python<'py>,
    stagers: &Stagers,
    ordinal: usize,
) -> Option<Bound<'py, PyStager>> {
    let stagers = stagers
        .lock_py_attached(py)
        .unwrap_or_else(PoisonError::into_inner);
    stagers
        .iter()
        .find(|(made, stager)| *made == ordinal && !stager.get().is_closed())
        .map(|(_, stager)| stager.bind(py).clone())
}

/// The default stager of the device `device` names (an ordinal as an
/// integer object: the stager's constructor converts and refuses it),
/// made on first use with the Rust layer's default options, and made anew
/// once the one made was closed (`with hostcopy.default_stager(d):`).
/// Made with the registry unlocked: two threads that ask at once may both
/// make one; the first put in is kept, and the other closes its own.
fn stager_of<'py>(py: Python<'py>, device: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyStager>> {
    let stagers = Arc::clone(lock(&REGISTRY).get_or_insert_with(Default::default));
    if let Ok(ordinal) = device.extract::<usize>()
        && let Some(found) = open_stager(py, &stagers, ordinal)
    {
        return Ok(found);
    }
    let made = Bound::new(
        py,
        PyStager::new(py, device, Default::default(), Default::default())?,
    )?;
    let ordinal = made.get().ordinal();
    // What the registry lets go of (a closed stager), dropped once it is
    // unlocked: a stager's drop may release the GIL.
    let (kept, replaced) = {
        let mut entries = stagers
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        match entries.iter_mut().find(|(entry, _)| *entry == ordinal) {
            Some((_, stager)) if !stager.get().is_closed() => (Some(stager.bind(py).clone()), None),
            Some((_, stager)) => (
                None,
                Some(core::mem::replace(stager, made.clone().unbind())),
            ),
            None => {
                entries.push((ordinal, made.clone().unbind()));
                (None, None)
            }
        }
    };
    drop(replaced);
    match kept {
        Some(kept) => {
            // Another thread's came first: this one is a spare, closed
            // now rather than when it is dropped. It never copied, so
            // closing it has nothing to report.
            let _ = made.get().close(py);
            Ok(kept)
        }
        None => Ok(made),
    }
}

/// The child's half of `os.register_at_fork`: a registry of its own. The
/// parent's stagers are of no use here (every copy refuses in a child
/// forked after CUDA was used), and are left as they are.
#[pyfunction]
fn forget_in_child() {
    if let Some(parent) = lock(&REGISTRY).take() {
        core::mem::forget(parent);
    }
}

/// Registers the fork handler, when the extension module is imported.
pub(crate) fn install(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let os = m.py().import("os")?;
    if os.hasattr("register_at_fork")? {
        let kwargs = pyo3::types::PyDict::new(m.py());
        kwargs.set_item("after_in_child", wrap_pyfunction!(forget_in_child, m)?)?;
        os.call_method("register_at_fork", (), Some(&kwargs))?;
    }
    Ok(())
}

/// The process's shared ``Stager`` of ``device`` (an ordinal, or a device
/// object with ``device_id``, ``index`` or ``id``: cuda.core's ``Device``,
/// ``torch.device``, cupy's ``Device``; default 0), made on first use
/// with the default options and shared by every thread: the one the
/// module's copies use for memory of that device. Once it is closed
/// (``close()``, or its ``with`` block ended), the next call makes a new
/// one.
#[pyfunction]
#[pyo3(signature = (device=None), text_signature = "(device=None)")]
pub(crate) fn default_stager<'py>(
    py: Python<'py>,
    device: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyStager>> {
    check_usable(py)?;
    let device = sides::device_ordinal(py, device.as_ref())?;
    stager_of(py, &device)
}

/// The default stager of the device holding the device memory `memory`,
/// given as the argument `side`: what the module's copies use for it, and
/// `hostcopy.offload` looks up once for the memory it copies to.
#[pyfunction]
#[pyo3(name = "default_stager_of")]
pub(crate) fn stager_for<'py>(
    memory: &Bound<'py, PyAny>,
    side: &str,
) -> PyResult<Bound<'py, PyStager>> {
    let py = memory.py();
    check_usable(py)?;
    stager_of(py, &sides::device_of(memory, side)?)
}

/// A copy of the module's: its arguments read (`crate::staging::read_call`),
/// then copied through the default stager of the device holding its device
/// side, which reading that side told (no second look at the array).
fn copy_on_default<'py>(
    direction: Direction,
    batch: Batch<'py>,
    dst: &Bound<'py, PyAny>,
    src: &Bound<'py, PyAny>,
    stream: Option<Bound<'py, PyAny>>,
    blocking: Given<'py>,
) -> PyResult<Option<Transfer>> {
    let py = dst.py();
    check_usable(py)?;
    let call = read_call(py, direction, &batch, dst, src, stream, blocking)?;
    let stager = stager_of(py, &call.device_ordinal(direction)?)?;
    start(&stager, direction, batch, call)
}

/// Copies GPU memory ``src`` into host memory ``dst`` at the link's speed.
///
/// ``src``: a torch or cupy CUDA array, a jax array, a numba device array,
/// a cuda.core ``Buffer``. ``dst``: a numpy array (a fresh ``np.empty`` is
/// fine: the copy workers take its page faults in parallel), a
/// ``bytearray``, an ``mmap``, a CPU tensor. ``nbytes`` defaults to all of
/// ``src`` past ``src_offset``; both sides must hold it (``OutOfBounds``).
/// Offsets and ``nbytes`` are integers (``int``, numpy integers; not
/// ``bool`` or ``float``: ``ArgumentTypeError``, a ``TypeError``); a
/// negative one, or one wider than a word, raises ``IntegerOutOfRange``
/// with its ``name``. Host memory
/// given as ``src`` raises ``NotDeviceMemory`` (``side``, ``addr``); the
/// module's docstring has a table of what each bad argument raises.
///
/// Stream order: the copy starts after the work queued on ``stream``
/// (a cuda.core ``Stream``, a torch or cupy stream, anything with
/// ``__cuda_stream__``, an int handle) and, for DLPack arrays, after the
/// work their library had queued for them (``__dlpack__(stream=...)``);
/// for ``__cuda_array_interface__`` arrays, after their ``stream`` too.
/// With no ``stream``, it waits for the device's legacy default stream,
/// which torch, cupy and cuda.core use unless told otherwise.
///
/// Blocking (the default): returns once the bytes are in ``dst``, the GIL
/// released for the whole copy. ``blocking=False`` returns a ``Transfer``
/// once every chunk of the copy is queued, not once it is done: ``wait()``
/// for it, use it in a ``with`` block, or ``await`` it in a coroutine
/// (``await hostcopy.copy_to_host(dst, src, blocking=False)``: the event
/// loop runs other tasks meanwhile and is woken once, when the bytes are
/// in). Queuing can still block, with the GIL released: for the stager
/// while another thread's blocking copy on it runs, and for room in the driver's queue, which
/// holds about 2,000 chunks (32 GiB in the default 16 MiB chunks; a chunk
/// queues in a few microseconds: 0.2 ms for 64 MiB, 0.6 ms for 1 GiB on
/// the H200, which an event loop's thread spends in the call). Every
/// chunk is queued before the call returns, on an event loop's thread
/// too: work queued on ``stream`` afterwards then waits only for work
/// already queued, which keeps a synchronous call on that stream by any
/// thread (``tensor.cpu()``) from waiting on queuing the driver holds
/// back for it.
/// The ``Transfer`` keeps ``dst`` and ``src`` alive, and a ``bytearray``
/// side unresizable (``BufferError``), until ``wait()`` returns (or the
/// ``with`` block ends, or the ``await`` completes; ``done()`` becoming
/// true does not let go), and waits if dropped unwaited (dropped after an
/// ``await`` was cancelled, or on an event loop's thread, it does
/// not wait: the stager's finish thread finishes it and lets go of both
/// sides once the copy is done); work queued on ``stream`` afterwards waits for the copy, so
/// a kernel there cannot overwrite ``src`` under it (work on other
/// streams is yours to order: wait for the ``Transfer`` first). Keeping an
/// object alive does not stop an explicit free: torch frees a CPU tensor's
/// memory under any reference on ``resize_()``, ``set_()`` or
/// ``share_memory_()``, so with ``blocking=False`` a torch CPU tensor
/// ``dst``, or a numpy array over one (``t.numpy()``) or over a DLPack
/// export, raises ``MemoryNotHeld`` (pass a numpy array and view it with
/// ``torch.from_numpy``). Do not free ``src``'s memory while a transfer
/// runs (a cuda.core ``Buffer``'s ``close()``), nor either side's from
/// another thread during a blocking copy, which releases the GIL. Nor read or write ``dst`` from
/// another thread while the copy runs (the copy writes it without the
/// GIL; what such a thread saw would be torn). Uses one ``Stager`` per
/// device, made on first use and shared by every thread (see ``Stager``:
/// blocking copies of several threads through it run one after another).
#[pyfunction]
#[pyo3(
    signature = (dst, src, nbytes=None, *, stream=None, blocking=Given::ABSENT, dst_offset=Given::ABSENT, src_offset=Given::ABSENT),
    text_signature = "(dst, src, nbytes=None, *, stream=None, blocking=True, dst_offset=0, src_offset=0)"
)]
#[allow(clippy::too_many_arguments)] // the Python API's arguments
pub(crate) fn copy_to_host(
    dst: Bound<'_, PyAny>,
    src: Bound<'_, PyAny>,
    nbytes: Option<Bound<'_, PyAny>>,
    stream: Option<Bound<'_, PyAny>>,
    blocking: Given<'_>,
    dst_offset: Given<'_>,
    src_offset: Given<'_>,
) -> PyResult<Option<Transfer>> {
    let batch = Batch::Range {
        nbytes,
        dst_offset,
        src_offset,
    };
    copy_on_default(Direction::ToHost, batch, &dst, &src, stream, blocking)
}

/// Copies host memory ``src`` into GPU memory ``dst`` at the link's
/// speed: the mirror of ``copy_to_host``, with the same arguments.
///
/// The copy starts after the work queued on ``stream`` (default: the
/// device's legacy default stream); with ``blocking=False``, work queued on
/// ``stream`` afterwards waits for the copy, so a kernel launched there
/// next reads the new bytes. The bytes are written behind the array
/// library's back: a torch tensor's version counter does not move (do not
/// overwrite a tensor autograd saved), and jax arrays, being immutable,
/// are refused as destinations. As for ``copy_to_host``: do not ``resize_`` or
/// free the storage of either side while a transfer runs.
#[pyfunction]
#[pyo3(
    signature = (dst, src, nbytes=None, *, stream=None, blocking=Given::ABSENT, dst_offset=Given::ABSENT, src_offset=Given::ABSENT),
    text_signature = "(dst, src, nbytes=None, *, stream=None, blocking=True, dst_offset=0, src_offset=0)"
)]
#[allow(clippy::too_many_arguments)] // the Python API's arguments
pub(crate) fn copy_to_device(
    dst: Bound<'_, PyAny>,
    src: Bound<'_, PyAny>,
    nbytes: Option<Bound<'_, PyAny>>,
    stream: Option<Bound<'_, PyAny>>,
    blocking: Given<'_>,
    dst_offset: Given<'_>,
    src_offset: Given<'_>,
) -> PyResult<Option<Transfer>> {
    let batch = Batch::Range {
        nbytes,
        dst_offset,
        src_offset,
    };
    copy_on_default(Direction::ToDevice, batch, &dst, &src, stream, blocking)
}

/// Copies many scattered blocks of GPU memory ``src`` into host memory
/// ``dst`` in one call, at the speed of one large transfer (a KV-cache
/// offload: blocks of a device cache into slots of a host pool).
///
/// ``blocks``: ``(device_offset, host_offset, nbytes)`` triples, byte
/// offsets into ``src`` and ``dst``: a sequence of 3-item sequences (a list
/// of tuples; not strings) whose items are integers in ``operator.index``'s
/// sense (``int``, numpy integers; a ``bool``, ``float`` or ``str`` raises
/// ``ArgumentTypeError``, a ``TypeError``, naming the block), or an ``(n, 3)`` array of an integer
/// dtype (``int8``, ``int16``, ``int32``, ``int64``, ``uint8``, ``uint16``,
/// ``uint32``, ``uint64``, either byte order, any strides; a float, bool,
/// complex, string or object array raises ``ArgumentTypeError`` naming the dtype,
/// never cast; a CPU tensor or jax array of an integer dtype is read as
/// such an array, through ``__array__``; any other tensor, a CUDA one
/// included, through its ``tolist()``, so a float tensor is refused by its
/// first block). A field that is negative
/// or wider than a word raises ``IntegerOutOfRange`` named
/// ``blocks[i].device_offset``, ``.host_offset`` or ``.nbytes``. Any sizes,
/// in any order; many small blocks share one
/// staging chunk and one driver call. The whole batch is checked before
/// anything is queued: a block outside either memory raises
/// ``BlockOutOfBounds`` (with its ``index`` and ``side``), two blocks
/// writing the same host bytes raise ``BlocksOverlap`` (``first``,
/// ``second``). Blocks may read overlapping device bytes.
///
/// ``stream`` and ``blocking`` work as for ``copy_to_host``, and as
/// there: do not ``resize_`` or free the storage of either side while a
/// transfer runs.
#[pyfunction]
#[pyo3(
    signature = (dst, src, blocks, *, stream=None, blocking=Given::ABSENT),
    text_signature = "(dst, src, blocks, *, stream=None, blocking=True)"
)]
pub(crate) fn copy_blocks_to_host(
    dst: Bound<'_, PyAny>,
    src: Bound<'_, PyAny>,
    blocks: Bound<'_, PyAny>,
    stream: Option<Bound<'_, PyAny>>,
    blocking: Given<'_>,
) -> PyResult<Option<Transfer>> {
    copy_on_default(
        Direction::ToHost,
        Batch::Blocks(blocks),
        &dst,
        &src,
        stream,
        blocking,
    )
}

/// Copies many scattered blocks of host memory ``src`` into GPU memory
/// ``dst`` in one call (a KV-cache restore): the mirror of
/// ``copy_blocks_to_host``. Here no two blocks may write the same device
/// bytes; they may read overlapping host bytes. Do not ``resize_`` or free
/// the storage of either side while a transfer runs.
#[pyfunction]
#[pyo3(
    signature = (dst, src, blocks, *, stream=None, blocking=Given::ABSENT),
    text_signature = "(dst, src, blocks, *, stream=None, blocking=True)"
)]
pub(crate) fn copy_blocks_to_device(
    dst: Bound<'_, PyAny>,
    src: Bound<'_, PyAny>,
    blocks: Bound<'_, PyAny>,
    stream: Option<Bound<'_, PyAny>>,
    blocking: Given<'_>,
) -> PyResult<Option<Transfer>> {
    copy_on_default(
        Direction::ToDevice,
        Batch::Blocks(blocks),
        &dst,
        &src,
        stream,
        blocking,
    )
}
