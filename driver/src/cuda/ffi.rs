//! Every CUDA driver entry point the layer calls, declared in one place,
//! and the driver library, opened at run time.
//!
//! libcuda is opened the first time the layer calls the driver
//! (`libcuda.so.1`, `nvcuda.dll` on Windows, or the path in
//! `HOSTCOPY_LIBCUDA`), never linked: a binary built with the `cuda`
//! feature starts on any machine, and where there is no driver, or one too
//! old, every call fails with a [`DriverError`](super::DriverError) that
//! says which (and what to install), not a loader error before `main`.
//! The library stays loaded for the life of the process: host functions,
//! user-object destructors and graphs in flight belong to it.
//!
//! cuda-driver-sys supplies the handle types, structs and input enums. Its
//! functions are not called: they return its `CUresult` enum, which holds
//! only CUDA 10.2's codes, and a driver returning any other code (34 from a
//! stub, 222, 911, ...) would put an invalid value in a Rust enum, which is
//! undefined behaviour. Here every entry point returns [`CuResult`], a plain
//! integer, and every output the driver writes is an integer or a handle.
//! Entry points newer than CUDA 10.2 (user objects, capture info with the
//! graph, instantiate with flags, stream memory waits, mapped pointers of
//! pinned memory) are declared here by hand, by the names `cuda.h` binds
//! them to. The list needs a driver for CUDA 11.7 or later: the newest of
//! them, `cuStreamWaitValue32_v2`, exists from 11.7 on (the `_v2` stream
//! memory operations need no device attribute, unlike the first ones, which
//! an H200 reports as unusable).
//!
//! The list below is the one place an entry point is named: a macro makes of
//! each line a field of the table of resolved symbols and a
//! `pub(crate) unsafe fn` of the same name and signature that the layer
//! calls. The wrapper forwards to libcuda or, with feature `simulator` once
//! the simulator has given this module its [`Simulated`] table
//! (`sim::install`), to the simulator's function of that name (one atomic
//! load decides). The simulator hands the table in, so this module never
//! names it: the layers stay one-way. Under Miri, which cannot load
//! libcuda, a wrapper the simulator does not answer fails as a machine
//! without a driver does.
//!
//! A missing entry point of that list makes the driver unusable (the load
//! fails and names it). Entry points that only newer drivers export are
//! optional instead, and kept out of the list: the batch copy
//! ([`memcpy_batch_async`], CUDA 12.8 on) is looked up when the library
//! loads, beside the table, into an `Option` that its wrapper consults, and
//! it answers `None` where the driver lacks it. The simulator hands its
//! optional entry points in with its table, as a [`SimulatedOptional`],
//! where each is always present.

#![allow(non_snake_case)]

use core::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};
use std::string::{String, ToString};
use std::sync::OnceLock;

pub(crate) use cuda_driver_sys::{
    CUDA_HOST_NODE_PARAMS, CUcontext, CUdevice, CUdeviceptr, CUevent, CUgraph, CUgraphExec,
    CUgraphNode, CUhostFn, CUstream, CUstreamCaptureMode,
};
pub(crate) use cuda_driver_sys::{CUfunction, CUmodule};

/// A `CUresult` as the driver returns it: any code, known to this build or not.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CuResult(pub(crate) c_uint);

/// `CUuserObject` (CUDA 11.3), an opaque handle.
pub(crate) type CUuserObject = *mut c_void;

pub(crate) const CUDA_SUCCESS: c_uint = 0;
pub(crate) const CU_STREAM_NON_BLOCKING: c_uint = 1;
pub(crate) const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x01;
pub(crate) const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 0x01;
pub(crate) const CU_EVENT_DEFAULT: c_uint = 0;
pub(crate) const CU_EVENT_DISABLE_TIMING: c_uint = 0x02;
/// `CU_STREAM_WAIT_VALUE_GEQ`: a stream memory wait passes once
/// `(int32_t)(*addr - value) >= 0`, a comparison that survives the u32
/// wrapping around.
pub(crate) const CU_STREAM_WAIT_VALUE_GEQ: c_uint = 0;
pub(crate) const CU_STREAM_CAPTURE_STATUS_NONE: c_uint = 0;
pub(crate) const CU_STREAM_CAPTURE_STATUS_ACTIVE: c_uint = 1;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`: a thread's calls are not checked
/// against other threads' captures.
pub(crate) const CU_STREAM_CAPTURE_MODE_RELAXED: c_uint = 2;
/// Required by `cuUserObjectCreate`: its destructor cannot be waited on.
pub(crate) const CU_USER_OBJECT_NO_DESTRUCTOR_SYNC: c_uint = 1;
/// Moves the caller's reference into the graph instead of adding one.
pub(crate) const CU_GRAPH_USER_OBJECT_MOVE: c_uint = 1;
/// `CU_MEMCPY_SRC_ACCESS_ORDER_STREAM`: a batch copy reads its sources in
/// stream order.
pub(crate) const CU_MEMCPY_SRC_ACCESS_ORDER_STREAM: c_uint = 1;
/// `CU_MEMCPY_SRC_ACCESS_ORDER_ANY`, the last valid access order (1 to 3).
#[cfg_attr(not(feature = "simulator"), allow(dead_code))]
pub(crate) const CU_MEMCPY_SRC_ACCESS_ORDER_ANY: c_uint = 3;
/// `CUDA_ERROR_NOT_SUPPORTED`: what a driver or platform without batch
/// copies answers them.
pub(crate) const CUDA_ERROR_NOT_SUPPORTED: c_uint = 801;

/// `CUmemLocation` (cuda.h): a location type (`CUmemLocationType`) and an
/// id whose meaning depends on it. All zero: no location given.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CUmemLocation {
    /// `CUmemLocationType`; 0 is `CU_MEM_LOCATION_TYPE_INVALID`.
    pub(crate) type_: c_uint,
    pub(crate) id: c_int,
}

/// `CUmemcpyAttributes` (cuda.h, CUDA 12.8): how the copies of a batch that
/// an attributes entry applies to behave.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CUmemcpyAttributes {
    /// `CUmemcpySrcAccessOrder`: 1 (stream), 2 (during the call), 3 (any);
    /// 0 is invalid.
    pub(crate) srcAccessOrder: c_uint,
    pub(crate) srcLocHint: CUmemLocation,
    pub(crate) dstLocHint: CUmemLocation,
    /// `CUmemcpyFlags`; 0 for none.
    pub(crate) flags: c_uint,
}

// The layout cuda.h gives it: six 4-byte fields, two in each location.
const _: () = assert!(core::mem::size_of::<CUmemcpyAttributes>() == 24);
const _: () = assert!(core::mem::align_of::<CUmemcpyAttributes>() == 4);

/// Declares each driver entry point once and wraps it; see the module docs.
///
/// The first token is `$`, passed in so that the macro it defines for the
/// simulator (`simulated_entry_points!`) can have parameters of its own.
macro_rules! entry_points {
    ($d:tt $(
        pub(crate) fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> CuResult;
    )*) => {
        /// The simulator's entry points, one per driver entry point, by name.
        #[cfg(feature = "simulator")]
        #[allow(non_snake_case)]
        pub(crate) struct Simulated {
            $(pub(crate) $name: unsafe fn($($ty),*) -> CuResult,)*
        }

        /// `Simulated` with every entry point taken from module `$module`,
        /// which defines each under the driver's name and signature.
        #[cfg(feature = "simulator")]
        macro_rules! simulated_entry_points {
            ($d module:ident) => {
                $crate::cuda::ffi::Simulated { $($name: $d module::$name,)* }
            };
        }
        #[cfg(feature = "simulator")]
        pub(crate) use simulated_entry_points;

        /// Every entry point as a C function of the driver's prototype,
        /// forwarding to this module's wrapper of that name (so to the
        /// simulator once it is installed), by name.
        #[cfg(feature = "simulator")]
        pub(crate) fn c_entry_points() -> std::vec::Vec<(&'static str, *const c_void)> {
            std::vec![$({
                /// The entry point, called from C.
                ///
                /// # Safety
                ///
                /// The driver's contract for it (see the wrapper).
                #[allow(clippy::too_many_arguments)]
                unsafe extern "C" fn forward($($arg: $ty),*) -> CuResult {
                    // SAFETY: our C caller upholds the driver's contract.
                    unsafe { $name($($arg),*) }
                }
                (stringify!($name), forward as *const c_void)
            }),*]
        }

        /// The name of every entry point in the list.
        #[cfg_attr(not(feature = "simulator"), allow(dead_code))]
        pub(crate) const ENTRY_POINT_NAMES: &[&str] = &[$(stringify!($name)),*];

        /// The driver's entry points, resolved from the loaded library.
        struct Loaded {
            $($name: unsafe extern "C" fn($($ty),*) -> CuResult,)*
            /// The entry points the library may lack.
            optional: Optional,
        }

        impl Loaded {
            /// Resolves every entry point; the name of the first one the
            /// library lacks otherwise.
            #[cfg_attr(miri, allow(dead_code))]
            fn resolve(library: &'static libloading::Library) -> Result<Loaded, &'static str> {
                Ok(Loaded {
                    $(
                        // SAFETY: the type is the entry point's C prototype
                        // in cuda.h, with `CUresult` as a plain integer of
                        // the same size (any code allowed).
                        $name: *unsafe {
                            library.get::<unsafe extern "C" fn($($ty),*) -> CuResult>(
                                concat!(stringify!($name), "\0").as_bytes(),
                            )
                        }
                        .map_err(|_| stringify!($name))?,
                    )*
                    optional: Optional::resolve(library),
                })
            }
        }

        $(
            /// Calls the driver entry point of this name (or the simulator's,
            /// once installed). Returns [`NOT_LOADED`] where the driver
            /// could not be loaded.
            ///
            /// # Safety
            ///
            /// The driver's contract for this entry point: every pointer is
            /// valid for what the driver reads or writes through it, every
            /// handle is alive, and a host function or user data handed over
            /// stays valid for as long as the driver may use it.
            #[inline]
            // Declared for the layer; not every build calls every one. The
            // driver's prototypes (`cuLaunchKernel` takes eleven).
            #[allow(dead_code, clippy::too_many_arguments)]
            pub(crate) unsafe fn $name($($arg: $ty),*) -> CuResult {
                #[cfg(feature = "simulator")]
                if let Some(simulator) = SIMULATED.get() {
                    (simulator.count)(stringify!($name));
                    // SAFETY: the simulator's function of this name has this
                    // entry point's contract, which our caller upholds.
                    return unsafe { (simulator.required.$name)($($arg),*) };
                }
                match loaded() {
                    // SAFETY: forwarded: our caller upholds the driver's
                    // contract for this entry point.
                    Ok(driver) => unsafe { (driver.$name)($($arg),*) },
                    Err(_) => {
                        $(let _ = $arg;)*
                        CuResult(NOT_LOADED)
                    }
                }
            }
        )*
    };
}

/// What a wrapper returns where the driver could not be loaded: no
/// `CUresult` (they are small), turned into a [`DriverError`](super::DriverError)
/// that says why (see [`load_failure`]).
pub(crate) const NOT_LOADED: c_uint = u32::MAX;

/// Why the driver could not be used.
#[derive(Debug)]
pub(crate) struct LoadFailure {
    /// The library asked for.
    pub(crate) library: String,
    /// `None`: the library did not load (`detail` says why); `Some`: it
    /// lacks this entry point (a driver too old).
    pub(crate) missing: Option<&'static str>,
    /// The loader's message.
    pub(crate) detail: String,
}

/// The library the layer opens: `HOSTCOPY_LIBCUDA` if set, else the
/// driver's own name.
fn library_name() -> String {
    std::env::var("HOSTCOPY_LIBCUDA").unwrap_or_else(|_| {
        if cfg!(windows) {
            "nvcuda.dll".to_string()
        } else {
            "libcuda.so.1".to_string()
        }
    })
}

#[cfg(not(miri))]
fn load() -> Result<Loaded, LoadFailure> {
    let library = library_name();
    // SAFETY: loading the NVIDIA driver runs its initializers, which expect
    // nothing of the loader's caller.
    let opened = unsafe { libloading::Library::new(&library) }.map_err(|error| LoadFailure {
        library: library.clone(),
        missing: None,
        detail: error.to_string(),
    })?;
    // Never unloaded: work in flight points into it.
    let opened: &'static libloading::Library = std::boxed::Box::leak(std::boxed::Box::new(opened));
    Loaded::resolve(opened).map_err(|name| LoadFailure {
        library,
        missing: Some(name),
        detail: std::format!("{name} is not exported"),
    })
}

#[cfg(miri)]
fn load() -> Result<Loaded, LoadFailure> {
    Err(LoadFailure {
        library: library_name(),
        missing: None,
        detail: "Miri cannot load a native library".to_string(),
    })
}

static LOADED: OnceLock<Result<Loaded, LoadFailure>> = OnceLock::new();

/// The driver's entry points, the library loaded on first use.
fn loaded() -> Result<&'static Loaded, &'static LoadFailure> {
    LOADED.get_or_init(load).as_ref()
}

/// Why the driver could not be loaded, once a call has tried and failed.
pub(crate) fn load_failure() -> Option<&'static LoadFailure> {
    LOADED.get().and_then(|loaded| loaded.as_ref().err())
}

/// The simulator's tables, set together by one store.
#[cfg(feature = "simulator")]
struct Simulator {
    required: &'static Simulated,
    optional: &'static SimulatedOptional,
    /// Told the name of every entry point called, before the call.
    count: fn(&'static str),
}

/// The simulator's tables once it is installed: every later driver call of
/// the process goes there.
#[cfg(feature = "simulator")]
static SIMULATED: OnceLock<Simulator> = OnceLock::new();

/// Routes every later driver call of this process to `table`, and every
/// optional entry point to `optional`, telling `count` the name of each
/// call first. The first tables installed stay.
#[cfg(feature = "simulator")]
pub(crate) fn route_to_simulator(
    table: &'static Simulated,
    optional: &'static SimulatedOptional,
    count: fn(&'static str),
) {
    let _ = SIMULATED.set(Simulator {
        required: table,
        optional,
        count,
    });
}

/// `cuMemcpyBatchAsync_v2` (CUDA 13's prototype of the batch copy).
type BatchCopyV2 = unsafe extern "C" fn(
    *mut CUdeviceptr,
    *mut CUdeviceptr,
    *mut usize,
    usize,
    *mut CUmemcpyAttributes,
    *mut usize,
    usize,
    CUstream,
) -> CuResult;

/// `cuMemcpyBatchAsync` (CUDA 12.8's prototype): `failIdx` before the
/// stream.
type BatchCopyV1 = unsafe extern "C" fn(
    *mut CUdeviceptr,
    *mut CUdeviceptr,
    *mut usize,
    usize,
    *mut CUmemcpyAttributes,
    *mut usize,
    usize,
    *mut usize,
    CUstream,
) -> CuResult;

/// The batch copy as the loaded driver exports it.
#[derive(Clone, Copy)]
#[cfg_attr(miri, allow(dead_code))]
enum BatchCopy {
    V2(BatchCopyV2),
    V1(BatchCopyV1),
}

/// Entry points that only newer drivers export, resolved from the library
/// when it loads (so once, with [`Loaded`]): `None` for each one it lacks.
struct Optional {
    batch_copy: Option<BatchCopy>,
}

impl Optional {
    /// Looks each one up; the batch copy by its CUDA 13 name first.
    #[cfg_attr(miri, allow(dead_code))]
    fn resolve(library: &'static libloading::Library) -> Optional {
        // SAFETY: `BatchCopyV2` is `cuMemcpyBatchAsync_v2`'s C prototype in
        // cuda.h (CUDA 13), with `CUresult` as a plain integer of the same
        // size.
        let v2 = unsafe { library.get::<BatchCopyV2>(b"cuMemcpyBatchAsync_v2\0") };
        let batch_copy = match v2 {
            Ok(symbol) => Some(BatchCopy::V2(*symbol)),
            // SAFETY: `BatchCopyV1` is `cuMemcpyBatchAsync`'s C prototype in
            // cuda.h (CUDA 12.8 to 12.9), `CUresult` as above.
            Err(_) => unsafe { library.get::<BatchCopyV1>(b"cuMemcpyBatchAsync\0") }
                .ok()
                .map(|symbol| BatchCopy::V1(*symbol)),
        };
        Optional { batch_copy }
    }
}

/// The simulator's optional entry points: each always present there.
#[cfg(feature = "simulator")]
pub(crate) struct SimulatedOptional {
    /// `cuMemcpyBatchAsync_v2`, the prototype [`memcpy_batch_async`] has.
    pub(crate) cuMemcpyBatchAsync_v2: unsafe fn(
        *mut CUdeviceptr,
        *mut CUdeviceptr,
        *mut usize,
        usize,
        *mut CUmemcpyAttributes,
        *mut usize,
        usize,
        CUstream,
    ) -> CuResult,
}

/// The name of every optional entry point the simulator answers.
#[cfg(feature = "simulator")]
pub(crate) const OPTIONAL_ENTRY_POINT_NAMES: &[&str] = &["cuMemcpyBatchAsync_v2"];

/// Queues `count` copies on `stream` in one driver call: copy `i` moves
/// `sizes[i]` bytes from `srcs[i]` to `dsts[i]`; `attrs[j]` applies from
/// copy `attr_idxs[j]` on, up to the next entry's index. Host addresses are
/// passed as `CUdeviceptr` values.
///
/// Calls `cuMemcpyBatchAsync_v2` where the driver exports it, else
/// `cuMemcpyBatchAsync` (CUDA 12.8's, whose index of a failed copy is
/// discarded), or the simulator's `cuMemcpyBatchAsync_v2` once installed.
/// Returns `None` where the loaded driver exports neither (a driver older
/// than CUDA 12.8), and `Some(CuResult(NOT_LOADED))` where no driver could
/// be loaded at all, so that the error says why, as every other wrapper's
/// does.
///
/// # Safety
///
/// The driver's contract for the batch copy: `dsts`, `srcs` and `sizes`
/// are readable for `count` elements and `attrs` and `attr_idxs` for
/// `num_attrs`; every destination stays writable and every source readable
/// for its size until its copy has run in stream order; `stream` is alive.
#[inline]
// Declared for the layer; not every build calls it. The driver's prototype.
#[allow(dead_code, clippy::too_many_arguments)]
pub(crate) unsafe fn memcpy_batch_async(
    dsts: *mut CUdeviceptr,
    srcs: *mut CUdeviceptr,
    sizes: *mut usize,
    count: usize,
    attrs: *mut CUmemcpyAttributes,
    attr_idxs: *mut usize,
    num_attrs: usize,
    stream: CUstream,
) -> Option<CuResult> {
    #[cfg(feature = "simulator")]
    if let Some(simulator) = SIMULATED.get() {
        (simulator.count)("cuMemcpyBatchAsync_v2");
        // SAFETY: the simulator's batch copy has the driver's contract,
        // which our caller upholds.
        return Some(unsafe {
            (simulator.optional.cuMemcpyBatchAsync_v2)(
                dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs, stream,
            )
        });
    }
    let driver = match loaded() {
        Ok(driver) => driver,
        Err(_) => return Some(CuResult(NOT_LOADED)),
    };
    match driver.optional.batch_copy? {
        // SAFETY: forwarded: our caller upholds the driver's contract.
        BatchCopy::V2(f) => Some(unsafe {
            f(
                dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs, stream,
            )
        }),
        BatchCopy::V1(f) => {
            let mut fail_idx = 0usize;
            // SAFETY: as above; `fail_idx` is writable for the call.
            Some(unsafe {
                f(
                    dsts,
                    srcs,
                    sizes,
                    count,
                    attrs,
                    attr_idxs,
                    num_attrs,
                    &mut fail_idx,
                    stream,
                )
            })
        }
    }
}

entry_points! { $
    pub(crate) fn cuInit(flags: c_uint) -> CuResult;
    pub(crate) fn cuDriverGetVersion(version: *mut c_int) -> CuResult;
    pub(crate) fn cuGetErrorName(error: c_uint, name: *mut *const c_char) -> CuResult;

    pub(crate) fn cuDeviceGetCount(count: *mut c_int) -> CuResult;
    pub(crate) fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CuResult;
    pub(crate) fn cuDeviceGetName(name: *mut c_char, len: c_int, device: CUdevice) -> CuResult;
    pub(crate) fn cuDevicePrimaryCtxRetain(context: *mut CUcontext, device: CUdevice) -> CuResult;
    pub(crate) fn cuDevicePrimaryCtxRelease_v2(device: CUdevice) -> CuResult;
    pub(crate) fn cuCtxSetCurrent(context: CUcontext) -> CuResult;
    pub(crate) fn cuCtxSynchronize() -> CuResult;
    pub(crate) fn cuCtxGetCurrent(context: *mut CUcontext) -> CuResult;
    pub(crate) fn cuCtxGetDevice(device: *mut CUdevice) -> CuResult;

    pub(crate) fn cuStreamCreate(stream: *mut CUstream, flags: c_uint) -> CuResult;
    pub(crate) fn cuStreamDestroy_v2(stream: CUstream) -> CuResult;
    pub(crate) fn cuStreamSynchronize(stream: CUstream) -> CuResult;
    pub(crate) fn cuStreamQuery(stream: CUstream) -> CuResult;
    pub(crate) fn cuStreamGetCtx(stream: CUstream, context: *mut CUcontext) -> CuResult;
    pub(crate) fn cuStreamWaitEvent(stream: CUstream, event: CUevent, flags: c_uint) -> CuResult;
    pub(crate) fn cuStreamBeginCapture_v2(stream: CUstream, mode: CUstreamCaptureMode) -> CuResult;
    pub(crate) fn cuThreadExchangeStreamCaptureMode(mode: *mut c_uint) -> CuResult;
    pub(crate) fn cuStreamEndCapture(stream: CUstream, graph: *mut CUgraph) -> CuResult;
    pub(crate) fn cuStreamGetCaptureInfo_v2(
        stream: CUstream,
        status: *mut c_uint,
        id: *mut u64,
        graph: *mut CUgraph,
        dependencies: *mut *const CUgraphNode,
        dependency_count: *mut usize,
    ) -> CuResult;
    pub(crate) fn cuLaunchHostFunc(
        stream: CUstream,
        f: CUhostFn,
        user_data: *mut c_void,
    ) -> CuResult;
    pub(crate) fn cuStreamWaitValue32_v2(
        stream: CUstream,
        addr: CUdeviceptr,
        value: u32,
        flags: c_uint,
    ) -> CuResult;

    pub(crate) fn cuEventCreate(event: *mut CUevent, flags: c_uint) -> CuResult;
    pub(crate) fn cuEventRecord(event: CUevent, stream: CUstream) -> CuResult;
    pub(crate) fn cuEventSynchronize(event: CUevent) -> CuResult;
    pub(crate) fn cuEventQuery(event: CUevent) -> CuResult;
    pub(crate) fn cuEventElapsedTime(
        milliseconds: *mut f32,
        start: CUevent,
        end: CUevent,
    ) -> CuResult;
    pub(crate) fn cuEventDestroy_v2(event: CUevent) -> CuResult;

    pub(crate) fn cuGraphCreate(graph: *mut CUgraph, flags: c_uint) -> CuResult;
    pub(crate) fn cuGraphDestroy(graph: CUgraph) -> CuResult;
    pub(crate) fn cuGraphAddHostNode(
        node: *mut CUgraphNode,
        graph: CUgraph,
        dependencies: *const CUgraphNode,
        dependency_count: usize,
        params: *const CUDA_HOST_NODE_PARAMS,
    ) -> CuResult;
    pub(crate) fn cuGraphInstantiateWithFlags(
        exec: *mut CUgraphExec,
        graph: CUgraph,
        flags: c_ulonglong,
    ) -> CuResult;
    pub(crate) fn cuGraphLaunch(exec: CUgraphExec, stream: CUstream) -> CuResult;
    pub(crate) fn cuGraphExecDestroy(exec: CUgraphExec) -> CuResult;
    pub(crate) fn cuGraphExecHostNodeSetParams(
        exec: CUgraphExec,
        node: CUgraphNode,
        params: *const CUDA_HOST_NODE_PARAMS,
    ) -> CuResult;
    pub(crate) fn cuUserObjectCreate(
        object: *mut CUuserObject,
        ptr: *mut c_void,
        destroy: CUhostFn,
        initial_refcount: c_uint,
        flags: c_uint,
    ) -> CuResult;
    pub(crate) fn cuUserObjectRelease(object: CUuserObject, count: c_uint) -> CuResult;
    pub(crate) fn cuGraphRetainUserObject(
        graph: CUgraph,
        object: CUuserObject,
        count: c_uint,
        flags: c_uint,
    ) -> CuResult;

    pub(crate) fn cuMemAlloc_v2(ptr: *mut CUdeviceptr, bytes: usize) -> CuResult;
    pub(crate) fn cuPointerGetAttribute(
        data: *mut c_void,
        attribute: c_uint,
        ptr: CUdeviceptr,
    ) -> CuResult;
    pub(crate) fn cuMemFree_v2(ptr: CUdeviceptr) -> CuResult;
    pub(crate) fn cuMemHostAlloc(ptr: *mut *mut c_void, bytes: usize, flags: c_uint) -> CuResult;
    pub(crate) fn cuMemFreeHost(ptr: *mut c_void) -> CuResult;
    pub(crate) fn cuMemHostGetDevicePointer_v2(
        pdptr: *mut CUdeviceptr,
        p: *mut c_void,
        flags: c_uint,
    ) -> CuResult;
    pub(crate) fn cuMemHostRegister_v2(ptr: *mut c_void, bytes: usize, flags: c_uint) -> CuResult;
    pub(crate) fn cuMemHostUnregister(ptr: *mut c_void) -> CuResult;
    pub(crate) fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, bytes: usize) -> CuResult;
    pub(crate) fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize) -> CuResult;
    pub(crate) fn cuMemcpyHtoDAsync_v2(
        dst: CUdeviceptr,
        src: *const c_void,
        bytes: usize,
        stream: CUstream,
    ) -> CuResult;
    pub(crate) fn cuMemcpyDtoHAsync_v2(
        dst: *mut c_void,
        src: CUdeviceptr,
        bytes: usize,
        stream: CUstream,
    ) -> CuResult;

    pub(crate) fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CuResult;
    pub(crate) fn cuModuleGetFunction(
        function: *mut CUfunction,
        module: CUmodule,
        name: *const c_char,
    ) -> CuResult;
    pub(crate) fn cuModuleUnload(module: CUmodule) -> CuResult;
    pub(crate) fn cuLaunchKernel(
        function: CUfunction,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_bytes: c_uint,
        stream: CUstream,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> CuResult;
}
