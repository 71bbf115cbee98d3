//! libcuda, opened at run time the first time a launch function needs it.
//!
//! Only the entry points the launches call are looked up. Each returns a
//! `CUresult` as a plain integer: drivers return codes no header of ours
//! lists, and `cuGetErrorName` names them.

use core::ffi::{c_char, c_uint, c_void};
use std::ffi::CStr;
use std::sync::OnceLock;

use libloading::Library;
use pyo3::prelude::*;

pub(crate) type CuResult = c_uint;
pub(crate) type HostFn = unsafe extern "C" fn(*mut c_void);
/// `CUstream`, `CUgraph`, `CUgraphNode`, `CUuserObject`: opaque handles.
pub(crate) type Handle = *mut c_void;

/// `CUDA_HOST_NODE_PARAMS`.
#[repr(C)]
pub(crate) struct HostNodeParams {
    pub(crate) host_fn: Option<HostFn>,
    pub(crate) user_data: *mut c_void,
}

pub(crate) const CU_STREAM_CAPTURE_STATUS_ACTIVE: c_uint = 1;
/// Required by `cuUserObjectCreate`: its destructor cannot be waited on.
pub(crate) const CU_USER_OBJECT_NO_DESTRUCTOR_SYNC: c_uint = 1;
/// Moves the caller's reference into the graph instead of adding one.
pub(crate) const CU_GRAPH_USER_OBJECT_MOVE: c_uint = 1;

/// The entry points, resolved once; the library stays loaded for the
/// process (host functions and destructors in flight point into it).
#[derive(Debug)]
pub(crate) struct Driver {
    pub(crate) get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
    pub(crate) launch_host_func: unsafe extern "C" fn(Handle, HostFn, *mut c_void) -> CuResult,
    pub(crate) stream_get_capture_info: unsafe extern "C" fn(
        Handle,
        *mut c_uint,
        *mut u64,
        *mut Handle,
        *mut *const Handle,
        *mut usize,
    ) -> CuResult,
    pub(crate) user_object_create:
        unsafe extern "C" fn(*mut Handle, *mut c_void, HostFn, c_uint, c_uint) -> CuResult,
    pub(crate) user_object_release: unsafe extern "C" fn(Handle, c_uint) -> CuResult,
    pub(crate) graph_retain_user_object:
        unsafe extern "C" fn(Handle, Handle, c_uint, c_uint) -> CuResult,
    pub(crate) graph_add_host_node: unsafe extern "C" fn(
        *mut Handle,
        Handle,
        *const Handle,
        usize,
        *const HostNodeParams,
    ) -> CuResult,
}

/// A driver call that failed: which, and the code.
#[derive(Debug)]
pub(crate) struct CudaError {
    pub(crate) function: &'static str,
    pub(crate) code: CuResult,
}

/// The library to open: `HOSTCOPY_LIBCUDA` if set (for tests against a
/// stand-in), else the driver's soname.
fn library_name() -> String {
    std::env::var("HOSTCOPY_LIBCUDA").unwrap_or_else(|_| {
        if cfg!(windows) {
            "nvcuda.dll".into()
        } else {
            "libcuda.so.1".into()
        }
    })
}

fn open() -> Result<Driver, String> {
    let name = library_name();
    // SAFETY: loading the NVIDIA driver runs its initializers, which expect
    // nothing of the loader's caller.
    let library = unsafe { Library::new(&name) }.map_err(|error| {
        format!(
            "the NVIDIA driver could not be loaded ({name}: {error}); hostcopy's launch functions need it. Packing and HOST_COPY_FN work without it."
        )
    })?;
    // The library is never unloaded: in-flight host functions, user-object
    // destructors and graphs belong to it.
    let library: &'static Library = Box::leak(Box::new(library));
    macro_rules! symbol {
        ($name:literal) => {
            // SAFETY: each field's type is the entry point's C prototype in
            // cuda.h, with `CUresult` as a plain integer (same size, any
            // code allowed).
            *unsafe { library.get(concat!($name, "\0").as_bytes()) }.map_err(|error| {
                format!(
                    "{name} lacks {}: {error} (a driver older than CUDA 11.3?)",
                    $name
                )
            })?
        };
    }
    let init: unsafe extern "C" fn(c_uint) -> CuResult = symbol!("cuInit");
    let driver = Driver {
        get_error_name: symbol!("cuGetErrorName"),
        launch_host_func: symbol!("cuLaunchHostFunc"),
        stream_get_capture_info: symbol!("cuStreamGetCaptureInfo_v2"),
        user_object_create: symbol!("cuUserObjectCreate"),
        user_object_release: symbol!("cuUserObjectRelease"),
        graph_retain_user_object: symbol!("cuGraphRetainUserObject"),
        graph_add_host_node: symbol!("cuGraphAddHostNode"),
    };
    // Whoever made the stream initialized the driver already; a second
    // cuInit is a no-op, and without it a raw handle from elsewhere fails
    // with CUDA_ERROR_NOT_INITIALIZED instead of working.
    // SAFETY: cuInit(0) has no preconditions.
    let code = unsafe { init(0) };
    if code != 0 {
        let named = CudaError {
            function: "cuInit",
            code,
        };
        return Err(format!(
            "the NVIDIA driver did not initialize: {}",
            named.describe(&driver)
        ));
    }
    Ok(driver)
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

/// The driver, opened on first use; `hostcopy.CudaUnavailable` where it
/// cannot be.
pub(crate) fn driver(py: Python<'_>) -> PyResult<&'static Driver> {
    match DRIVER.get_or_init(open) {
        Ok(driver) => Ok(driver),
        Err(message) => Err(crate::packing::error(
            py,
            "CudaUnavailable",
            message.clone(),
            [],
        )),
    }
}

/// Opens the driver now (launch functions do it on first use).
#[pyfunction]
pub(crate) fn load_driver(py: Python<'_>) -> PyResult<()> {
    driver(py).map(|_| ())
}

impl Driver {
    pub(crate) fn check(&self, function: &'static str, code: CuResult) -> Result<(), CudaError> {
        if code == 0 {
            Ok(())
        } else {
            Err(CudaError { function, code })
        }
    }
}

impl CudaError {
    fn name(&self, driver: &Driver) -> String {
        let mut name: *const c_char = core::ptr::null();
        // SAFETY: writes a pointer to a static string, or fails.
        let known = unsafe { (driver.get_error_name)(self.code, &mut name) } == 0;
        if known && !name.is_null() {
            // SAFETY: the driver's static, NUL-terminated name.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        } else {
            "an unknown code".into()
        }
    }

    fn describe(&self, driver: &Driver) -> String {
        format!(
            "{} failed: {} ({})",
            self.function,
            self.name(driver),
            self.code
        )
    }

    /// As `hostcopy.CudaError`, with `code`, `name` and `function`.
    pub(crate) fn into_py(self, py: Python<'_>, driver: &Driver) -> PyErr {
        let name = self.name(driver);
        let message = self.describe(driver);
        let fields = || -> PyResult<_> {
            Ok([
                ("code", self.code.into_pyobject(py)?.into_any()),
                ("name", name.into_pyobject(py)?.into_any()),
                ("function", self.function.into_pyobject(py)?.into_any()),
            ])
        };
        match fields() {
            Ok(fields) => crate::packing::error(py, "CudaError", message, fields),
            Err(failure) => failure,
        }
    }
}
