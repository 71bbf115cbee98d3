//! The package's exception classes (defined in `hostcopy/_errors.py`) as
//! every file of the binding raises them, and the one mapping from the Rust
//! crate's errors to them.
//!
//! The classes are fetched once, when the extension module loads
//! ([`load`]), into a table indexed by [`Class`]: a class the Python half
//! lacks fails the import, and a name misspelt here fails to compile.
//!
//! The mapping matches the crate's errors through their `kind()`
//! (`hostcopy_driver::cuda::ErrorKind`, `PackErrorKind`, `PoolErrorKind`,
//! `HostBufferErrorKind`), which are exhaustive where the errors
//! themselves are `#[non_exhaustive]` for the crate's other users: no arm
//! is a wildcard, so a variant added to the crate fails to compile here
//! until it has a class. Each class carries the variant's numbers as
//! attributes; `hostcopy/_errors.py` documents which.
//!
//! A refused argument is a `hostcopy.Error` too, never a bare built-in:
//! the binding raises [`wrong_type`] (`ArgumentTypeError`), [`wrong_value`]
//! (`ArgumentError`) or a class that says more; the integers and flags it
//! converts itself (`crate::integers`), never through pyo3's extraction in
//! a signature; and what an argument's own code, Python or pyo3 raised
//! while the argument was read goes through [`refusal`], which calls the
//! package's one mapping (`hostcopy._errors.refused`).

use hostcopy_driver::awaiting::Failure;
use hostcopy_driver::cuda::{BlockSide, DriverError, Error, ErrorKind};
use hostcopy_driver::{HostBufferError, HostBufferErrorKind, PackErrorKind, PoolErrorKind, Side};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};

/// Declares [`Class`] and the names its variants have in
/// `hostcopy._errors`, one for one.
macro_rules! classes {
    ($($name:ident),* $(,)?) => {
        /// A class of `hostcopy._errors`, by the name it has there.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Class {
            $($name),*
        }

        /// Every class's name in `hostcopy._errors`, in [`Class`]'s order.
        const NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

// The bases `PackError` and `TransferError` are raised only as the
// classes below them; `Error` is here to tell hostcopy's exceptions from
// others ([`refusal`]).
classes!(
    Error,
    ArgumentTypeError,
    ArgumentError,
    ArgumentRuntimeError,
    OutOfBounds,
    Overlap,
    AddressOverflow,
    NullWithLength,
    NotHostAccessible,
    NotContiguous,
    ReadOnlyBuffer,
    IntegerOutOfRange,
    BlockOutOfBounds,
    BlocksOverlap,
    OrderNotKept,
    ReadOnlyDevice,
    StagerClosed,
    CudaUnavailable,
    CudaError,
    NotDeviceMemory,
    MemoryNotHeld,
    WrongDevice,
    StreamCapturing,
    InvalidOption,
    NoCurrentContext,
    NotPrimaryContext,
    StreamMemoryWaitsUnsupported,
    ForeignNode,
    ScopeOpen,
    RecordPoolError,
    HostMemoryError,
    WorkerStartError,
);

/// A class as loaded: itself, and its first base that Python defines
/// (`ValueError`, `TypeError`, `RuntimeError`, `MemoryError`, `OSError`), raised
/// instead where no Python code may run.
struct Loaded {
    class: Py<PyType>,
    builtin: Py<PyType>,
}

static CLASSES: PyOnceLock<Vec<Loaded>> = PyOnceLock::new();

/// `hostcopy._errors.refused`: the one mapping of an argument's error
/// that Python, numpy or the argument's own code raised to hostcopy's
/// classes, shared by the package's Python code and this module.
static REFUSED: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Fetches every class from `hostcopy._errors`, and `refused`: called when
/// the extension module loads, so that a raise never looks one up.
pub(crate) fn load(py: Python<'_>) -> PyResult<()> {
    classes(py)?;
    refused_function(py).map(drop)
}

fn refused_function(py: Python<'_>) -> PyResult<&Py<PyAny>> {
    REFUSED.get_or_try_init(py, || {
        Ok(py.import("hostcopy._errors")?.getattr("refused")?.unbind())
    })
}

fn classes(py: Python<'_>) -> PyResult<&Vec<Loaded>> {
    CLASSES.get_or_try_init(py, || {
        let module = py.import("hostcopy._errors")?;
        NAMES
            .iter()
            .map(|name| {
                let class = module.getattr(*name)?.cast_into::<PyType>()?;
                let builtin = builtin_base(&class)?;
                Ok(Loaded {
                    class: class.unbind(),
                    builtin: builtin.unbind(),
                })
            })
            .collect()
    })
}

/// The first class of `class`'s method resolution order that Python
/// itself defines: made and raised without running any Python code.
fn builtin_base<'py>(class: &Bound<'py, PyType>) -> PyResult<Bound<'py, PyType>> {
    for base in class.getattr("__mro__")?.try_iter()? {
        let base = base?.cast_into::<PyType>()?;
        if base.getattr("__module__")?.extract::<String>()? == "builtins" {
            return Ok(base);
        }
    }
    Ok(class.clone())
}

/// An exception of `class` with `message` and the given attributes.
///
/// The class's `__init__` is Python code (see `life::python_code`): from
/// the exit handler on, its built-in base carries the message instead.
pub(crate) fn error<'py, const N: usize>(
    py: Python<'py>,
    class: Class,
    message: String,
    fields: [(&str, Bound<'py, PyAny>); N],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let loaded = &classes(py)?[class as usize];
        let kwargs = PyDict::new(py);
        for (key, value) in fields {
            kwargs.set_item(key, value)?;
        }
        let class = loaded.class.bind(py);
        match crate::life::python_code(|| class.call((message.as_str(),), Some(&kwargs))) {
            Some(made) => Ok(PyErr::from_value(made?)),
            None => {
                let base = loaded.builtin.bind(py);
                Ok(PyErr::from_value(
                    base.call1((message,))
                        .unwrap_or_else(|_| base.clone().into_any()),
                ))
            }
        }
    };
    build().unwrap_or_else(|failure| failure)
}

/// `hostcopy.ArgumentTypeError`: the argument `argument`, given `value`,
/// is of a type hostcopy does not take.
pub(crate) fn wrong_type(argument: &str, value: &Bound<'_, PyAny>, message: String) -> PyErr {
    argument_error(Class::ArgumentTypeError, argument, value, message)
}

/// `hostcopy.ArgumentError`: the argument `argument`, given `value`, has
/// a value hostcopy refuses (and no class of its own says more).
pub(crate) fn wrong_value(argument: &str, value: &Bound<'_, PyAny>, message: String) -> PyErr {
    argument_error(Class::ArgumentError, argument, value, message)
}

/// `hostcopy.ArgumentRuntimeError`: the argument `argument`, given
/// `value`, is in a state its own library refuses to lend memory in (a
/// torch tensor that requires grad), as that library would raise a
/// `RuntimeError`.
pub(crate) fn wrong_state(argument: &str, value: &Bound<'_, PyAny>, message: String) -> PyErr {
    argument_error(Class::ArgumentRuntimeError, argument, value, message)
}

fn argument_error(
    class: Class,
    argument: &str,
    value: &Bound<'_, PyAny>,
    message: String,
) -> PyErr {
    let py = value.py();
    match text(py, argument) {
        Ok(name) => error(
            py,
            class,
            message,
            [("argument", name), ("value", value.clone())],
        ),
        Err(failure) => failure,
    }
}

/// `failure`, raised while the argument `argument` (`value`) was read, as
/// hostcopy raises a refusal (`hostcopy._errors.refused`, the one mapping):
/// a `hostcopy.Error` as it is; a `TypeError` (pyo3's extraction, an
/// argument's own `__index__` or protocol method) as `ArgumentTypeError`,
/// an `OverflowError` as `IntegerOutOfRange`, a `ValueError` as
/// `ArgumentError`, a `RuntimeError` (a producer's `__dlpack__` refusing,
/// a stream's property raising) as `ArgumentRuntimeError`, a `BufferError`
/// as `ArgumentBufferError`, with `failure` as the cause; anything else
/// (a `MemoryError`, a `RecursionError`) as it is.
/// From the exit handler on (no Python code), `failure` as it is.
pub(crate) fn refusal(
    py: Python<'_>,
    failure: PyErr,
    argument: &str,
    value: Option<&Bound<'_, PyAny>>,
) -> PyErr {
    let known = classes(py)
        .map(|loaded| failure.is_instance(py, loaded[Class::Error as usize].class.bind(py)))
        .unwrap_or(true);
    if known {
        return failure;
    }
    let map = || -> PyResult<PyErr> {
        let refused = refused_function(py)?.bind(py);
        let value = value.map_or_else(|| py.None().into_bound(py), Clone::clone);
        let made = refused.call1((failure.value(py), argument, value))?;
        Ok(PyErr::from_value(made))
    };
    match crate::life::python_code(map) {
        Some(Ok(made)) => made,
        Some(Err(mapping)) => mapping,
        None => failure,
    }
}

fn int(py: Python<'_>, value: usize) -> PyResult<Bound<'_, PyAny>> {
    Ok(value.into_pyobject(py)?.into_any())
}

fn text<'py>(py: Python<'py>, value: &str) -> PyResult<Bound<'py, PyAny>> {
    Ok(value.into_pyobject(py)?.into_any())
}

/// The CUDA layer's `failure` of the call `operation` (a Python-level name,
/// such as `"copy_to_host"`), with `side` naming the device side where the
/// error is about device memory.
pub(crate) fn layer_error(py: Python<'_>, operation: &str, side: &str, failure: Error) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let message = failure.to_string();
        Ok(match failure.kind() {
            ErrorKind::Driver(driver) => driver_error(py, operation, driver),
            ErrorKind::Pack(packing) => pack_kind(py, message, packing)?,
            ErrorKind::Pool(pool) => {
                let (field, value) = match pool {
                    PoolErrorKind::Exhausted { capacity } => ("capacity", capacity),
                    PoolErrorKind::NotFromThisPool { user_data } => ("user_data", user_data),
                    PoolErrorKind::NotHeld { index } => ("index", index),
                };
                error(
                    py,
                    Class::RecordPoolError,
                    message,
                    [(field, int(py, value)?)],
                )
            }
            ErrorKind::DeviceOutOfBounds {
                offset,
                nbytes,
                len,
            } => out_of_bounds(py, message, side, offset, nbytes, len)?,
            ErrorKind::NotDeviceMemory { addr } => error(
                py,
                Class::NotDeviceMemory,
                message,
                [("side", text(py, side)?), ("addr", int(py, addr)?)],
            ),
            ErrorKind::ContextMismatch { expected, found } => error(
                py,
                Class::WrongDevice,
                message,
                [("expected", int(py, expected)?), ("found", int(py, found)?)],
            ),
            ErrorKind::Capturing => error(py, Class::StreamCapturing, message, []),
            ErrorKind::BlockOutOfBounds {
                index,
                side: block_side,
                offset,
                nbytes,
                len,
            } => {
                let block_side = match block_side {
                    BlockSide::Host => "host",
                    BlockSide::Device => "device",
                };
                error(
                    py,
                    Class::BlockOutOfBounds,
                    message,
                    [
                        ("index", int(py, index)?),
                        ("side", text(py, block_side)?),
                        ("offset", int(py, offset)?),
                        ("nbytes", int(py, nbytes)?),
                        ("len", int(py, len)?),
                    ],
                )
            }
            ErrorKind::BlocksOverlap { first, second } => error(
                py,
                Class::BlocksOverlap,
                message,
                [("first", int(py, first)?), ("second", int(py, second)?)],
            ),
            ErrorKind::ForeignNode => error(py, Class::ForeignNode, message, []),
            ErrorKind::ScopeOpen => error(py, Class::ScopeOpen, message, []),
            ErrorKind::NoCurrentContext => error(py, Class::NoCurrentContext, message, []),
            ErrorKind::NotPrimaryContext { device } => error(
                py,
                Class::NotPrimaryContext,
                message,
                [("device", int(py, device)?)],
            ),
            ErrorKind::InvalidOption {
                option,
                value,
                min,
                max,
            } => invalid_option(py, message, option, int(py, value)?, min, max)?,
            // Refusals of cudarc's memory, which the package never hands
            // the layer.
            ErrorKind::OrderNotKept => error(py, Class::OrderNotKept, message, []),
            ErrorKind::ReadOnlyDevice => error(
                py,
                Class::ReadOnlyDevice,
                message,
                [("side", text(py, side)?)],
            ),
            ErrorKind::StreamMemoryWaitsUnsupported { device } => error(
                py,
                Class::StreamMemoryWaitsUnsupported,
                message,
                [("device", int(py, device)?)],
            ),
        })
    };
    build().unwrap_or_else(|failure| failure)
}

/// A driver error: `CudaUnavailable` where no usable driver was found,
/// `CudaError` (with `code`, `name` and `function`) otherwise.
pub(crate) fn driver_error(py: Python<'_>, operation: &str, failure: DriverError) -> PyErr {
    if failure.is_driver_missing() {
        return error(
            py,
            Class::CudaUnavailable,
            format!("{failure}. Packing and HOST_COPY_FN work without a driver."),
            [],
        );
    }
    let fields = || -> PyResult<_> {
        Ok([
            ("code", failure.code().into_pyobject(py)?.into_any()),
            ("name", text(py, failure.name())?),
            ("function", text(py, operation)?),
        ])
    };
    match fields() {
        Ok(fields) => error(
            py,
            Class::CudaError,
            format!("{operation}: {failure}"),
            fields,
        ),
        Err(failure) => failure,
    }
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Dst => "dst",
        Side::Src => "src",
    }
}

/// A packing refusal as the `PackError` subclass of the variant's name.
pub(crate) fn pack_error(py: Python<'_>, failure: hostcopy_driver::PackError) -> PyErr {
    pack_kind(py, failure.to_string(), failure.kind()).unwrap_or_else(|failure| failure)
}

fn pack_kind(py: Python<'_>, message: String, failure: PackErrorKind) -> PyResult<PyErr> {
    let side = |value: Side| text(py, side_name(value));
    Ok(match failure {
        PackErrorKind::OutOfBounds {
            side: s,
            offset,
            nbytes,
            len,
        } => out_of_bounds(py, message, side_name(s), offset, nbytes, len)?,
        PackErrorKind::Overlap { dst, src, nbytes } => error(
            py,
            Class::Overlap,
            message,
            [
                ("dst", int(py, dst)?),
                ("src", int(py, src)?),
                ("nbytes", int(py, nbytes)?),
            ],
        ),
        PackErrorKind::AddressOverflow {
            side: s,
            addr,
            nbytes,
        } => error(
            py,
            Class::AddressOverflow,
            message,
            [
                ("side", side(s)?),
                ("addr", int(py, addr)?),
                ("nbytes", int(py, nbytes)?),
            ],
        ),
        PackErrorKind::NullWithLength { side: s, nbytes } => error(
            py,
            Class::NullWithLength,
            message,
            [("side", side(s)?), ("nbytes", int(py, nbytes)?)],
        ),
        PackErrorKind::NotHostAccessible { side: s, addr } => error(
            py,
            Class::NotHostAccessible,
            message,
            [("side", side(s)?), ("addr", int(py, addr)?)],
        ),
    })
}

/// `hostcopy.HostMemoryError` (a `MemoryError`): `hostcopy.empty` could
/// not map `nbytes` bytes.
pub(crate) fn host_buffer_error(py: Python<'_>, failure: &HostBufferError) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let message = format!("hostcopy.empty: {failure}");
        Ok(match failure.kind() {
            HostBufferErrorKind::Map { len, error: os } => error(
                py,
                Class::HostMemoryError,
                message,
                [
                    ("nbytes", int(py, len)?),
                    ("errno", os.raw_os_error().into_pyobject(py)?.into_any()),
                ],
            ),
            HostBufferErrorKind::Unsupported => error(py, Class::HostMemoryError, message, []),
        })
    };
    build().unwrap_or_else(|failure| failure)
}

/// `hostcopy.WorkerStartError` (an `OSError`): the copy worker pool
/// started only `started` of the `workers` threads asked for, and keeps
/// those.
pub(crate) fn worker_start_error(
    py: Python<'_>,
    workers: usize,
    started: usize,
    failure: &std::io::Error,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        Ok(error(
            py,
            Class::WorkerStartError,
            format!(
                "starting {workers} copy workers: thread {started} could not start ({failure}); \
                 the pool runs with {started}"
            ),
            [
                ("started", int(py, started)?),
                (
                    "errno",
                    failure.raw_os_error().into_pyobject(py)?.into_any(),
                ),
            ],
        ))
    };
    build().unwrap_or_else(|failure| failure)
}

/// `hostcopy.OutOfBounds`: `nbytes` bytes at `offset` of the `len`-byte
/// buffer on `side`.
pub(crate) fn out_of_bounds(
    py: Python<'_>,
    message: String,
    side: &str,
    offset: usize,
    nbytes: usize,
    len: usize,
) -> PyResult<PyErr> {
    Ok(error(
        py,
        Class::OutOfBounds,
        message,
        [
            ("side", text(py, side)?),
            ("offset", int(py, offset)?),
            ("nbytes", int(py, nbytes)?),
            ("len", int(py, len)?),
        ],
    ))
}

/// `hostcopy.InvalidOption`: `value` (an int as given, or the object that
/// is not one) for `option`, which takes `min..=max`.
pub(crate) fn invalid_option(
    py: Python<'_>,
    message: String,
    option: &str,
    value: Bound<'_, PyAny>,
    min: usize,
    max: usize,
) -> PyResult<PyErr> {
    Ok(error(
        py,
        Class::InvalidOption,
        message,
        [
            ("option", text(py, option)?),
            ("value", value),
            ("min", int(py, min)?),
            ("max", int(py, max)?),
        ],
    ))
}

/// The error of every call in a child forked after CUDA was used.
pub(crate) fn forked(py: Python<'_>) -> PyErr {
    error(
        py,
        Class::CudaUnavailable,
        String::from(
            "this process was forked after hostcopy used CUDA, and CUDA cannot be used in such \
             a child (nor can the parent's stagers, whose threads it lacks): start worker \
             processes with multiprocessing's 'spawn' or 'forkserver' method, or fork before \
             the first transfer",
        ),
        [],
    )
}

impl From<crate::life::Forked> for PyErr {
    fn from(_: crate::life::Forked) -> PyErr {
        Python::attach(forked)
    }
}

/// `hostcopy.StagerClosed` (a `ValueError`): a transfer or stager refused
/// because the stager is closed, or the interpreter is exiting.
pub(crate) fn closed(py: Python<'_>) -> PyErr {
    let message = if crate::life::exiting() {
        "the stager is closed: the interpreter is exiting"
    } else {
        "the stager is closed"
    };
    error(py, Class::StagerClosed, String::from(message), [])
}

/// What a call refused for `life::python_code`'s reason raises: from the
/// exit handler on, where no hostcopy class can be made.
pub(crate) fn exiting() -> PyErr {
    PyValueError::new_err("refused: the interpreter is exiting")
}

/// How a transfer of a shared stager ended, or why it was refused
/// (`hostcopy_driver::awaiting::Failure`, matched without a wildcard).
pub(crate) fn transfer_failure(
    py: Python<'_>,
    operation: &str,
    side: &str,
    failure: Failure,
) -> PyErr {
    match failure {
        Failure::Layer(failure) => layer_error(py, operation, side, failure),
        Failure::Closed => closed(py),
        Failure::NoThread => PyOSError::new_err(format!(
            "{operation}: the stager's thread that starts or finishes transfers could not be \
             started"
        )),
    }
}
