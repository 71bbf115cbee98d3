//! `hostcopy_stager`: a [`Stager`] behind a mutex (so C may call it from
//! any thread; its calls run one at a time), with its options as a C
//! structure.

use std::sync::{Mutex, MutexGuard};

use hostcopy_driver::cuda::Context;
use hostcopy_driver::cuda::staging::{Stager, StagingOptions, Stores};

use crate::status::{Failure, HOSTCOPY_ERROR_PANIC, entry, hostcopy_status};
use crate::{out, reference};

/// `HOSTCOPY_WORKERS_DEFAULT`: the builder's default worker count.
const WORKERS_DEFAULT: usize = usize::MAX;
/// `HOSTCOPY_CURRENT_CONTEXT`.
const CURRENT_CONTEXT: i32 = -1;
/// `HOSTCOPY_STORES_CACHED`, `HOSTCOPY_STORES_STREAMING` and
/// `HOSTCOPY_STORES_BY_UPLOAD` (the default: each upload's plan chooses).
const STORES_CACHED: u32 = 0;
const STORES_STREAMING: u32 = 1;
const STORES_BY_UPLOAD: u32 = 2;

/// `hostcopy_stager_options`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types, missing_docs)]
pub struct hostcopy_stager_options {
    pub struct_size: usize,
    pub chunk: usize,
    pub h2d_chunk: usize,
    pub edge_chunk: usize,
    pub buffers: usize,
    pub streams: usize,
    pub workers: usize,
    pub stagers: usize,
    pub d2h_workers: usize,
    pub driver_path_below: usize,
    pub kernel_below: usize,
    pub prefault: u32,
    pub h2d_stores: u32,
}

// The header's layout checks, with the same numbers.
const _: () = assert!(size_of::<hostcopy_stager_options>() == 96);
const _: () = assert!(core::mem::offset_of!(hostcopy_stager_options, prefault) == 88);

impl hostcopy_stager_options {
    /// The defaults, as `StagingOptions::default()` has them, with the
    /// worker count left to the builder.
    fn defaults() -> hostcopy_stager_options {
        let defaults = StagingOptions::default();
        hostcopy_stager_options {
            struct_size: size_of::<hostcopy_stager_options>(),
            chunk: defaults.chunk(),
            h2d_chunk: defaults.h2d_chunk(),
            edge_chunk: defaults.edge_chunk(),
            buffers: defaults.buffers(),
            streams: defaults.streams(),
            workers: WORKERS_DEFAULT,
            stagers: 1,
            d2h_workers: defaults.d2h_workers(),
            driver_path_below: defaults.driver_path_below(),
            kernel_below: defaults.kernel_below(),
            prefault: u32::from(defaults.prefault()),
            h2d_stores: stores_value(defaults.h2d_stores()),
        }
    }

    /// The options a stager was made with, as C has them.
    fn of(options: &StagingOptions) -> hostcopy_stager_options {
        hostcopy_stager_options {
            workers: options.workers(),
            chunk: options.chunk(),
            h2d_chunk: options.h2d_chunk(),
            edge_chunk: options.edge_chunk(),
            buffers: options.buffers(),
            streams: options.streams(),
            d2h_workers: options.d2h_workers(),
            driver_path_below: options.driver_path_below(),
            kernel_below: options.kernel_below(),
            prefault: u32::from(options.prefault()),
            h2d_stores: stores_value(options.h2d_stores()),
            ..hostcopy_stager_options::defaults()
        }
    }

    /// Reads `*options`: its `struct_size` first, alone, so that a
    /// structure of another size (a caller built against another header)
    /// is refused before any byte past its `struct_size` is read.
    ///
    /// # Safety
    ///
    /// `options` points to a readable structure (unaligned allowed) that
    /// starts with its `size_t struct_size` and is that many bytes.
    unsafe fn read(options: *const hostcopy_stager_options) -> Result<Self, Failure> {
        // SAFETY: the caller's contract: the first field is readable.
        let struct_size = unsafe { options.cast::<usize>().read_unaligned() };
        if struct_size != size_of::<hostcopy_stager_options>() {
            return Err(Failure::invalid(format!(
                "hostcopy_stager_options.struct_size is {struct_size}, not \
                 sizeof(hostcopy_stager_options) = {} (fill it with \
                 hostcopy_stager_options_default)",
                size_of::<hostcopy_stager_options>()
            )));
        }
        // SAFETY: the caller's contract, and the structure is this
        // header's size; read as a copy, so an unaligned or later-changed
        // structure is no concern after.
        Ok(unsafe { options.read_unaligned() })
    }

    /// The Rust options; the builder checks each range.
    fn build(&self) -> Result<StagingOptions, Failure> {
        let stores = match self.h2d_stores {
            STORES_CACHED => Some(Stores::Cached),
            STORES_STREAMING => Some(Stores::Streaming),
            STORES_BY_UPLOAD => None,
            other => {
                return Err(Failure::invalid(format!(
                    "h2d_stores is {other}: HOSTCOPY_STORES_CACHED (0), HOSTCOPY_STORES_STREAMING (1) or HOSTCOPY_STORES_BY_UPLOAD (2)"
                )));
            }
        };
        let prefault = match self.prefault {
            0 => false,
            1 => true,
            other => return Err(Failure::invalid(format!("prefault is {other}: 0 or 1"))),
        };
        let mut builder = StagingOptions::builder()
            .chunk(self.chunk)
            .h2d_chunk(self.h2d_chunk)
            .edge_chunk(self.edge_chunk)
            .buffers(self.buffers)
            .streams(self.streams)
            .stagers(self.stagers)
            .d2h_workers(self.d2h_workers)
            .driver_path_below(self.driver_path_below)
            .kernel_below(self.kernel_below)
            .prefault(prefault);
        if let Some(stores) = stores {
            builder = builder.h2d_stores(stores);
        }
        if self.workers != WORKERS_DEFAULT {
            builder = builder.workers(self.workers);
        }
        Ok(builder.build()?)
    }
}

fn stores_value(stores: Option<Stores>) -> u32 {
    match stores {
        None => STORES_BY_UPLOAD,
        Some(Stores::Streaming) => STORES_STREAMING,
        // `Stores` is non-exhaustive; a kind C has no value for reads as
        // cached.
        Some(_) => STORES_CACHED,
    }
}

/// `hostcopy_stager`: the stager, its context (for the buffers made on
/// its device without taking the stager's lock), and its device.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct hostcopy_stager {
    stager: Mutex<Stager>,
    pub(crate) context: Context,
}

impl hostcopy_stager {
    /// The stager, for one call; a stager whose call panicked refuses.
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, Stager>, Failure> {
        self.stager.lock().map_err(|_| {
            Failure::new(
                HOSTCOPY_ERROR_PANIC,
                "the stager is unusable: an earlier call on it panicked",
            )
        })
    }
}

/// Writes the default options into `*options`.
///
/// # Safety
///
/// `options` is null or points to a writable `hostcopy_stager_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_stager_options_default(
    options: *mut hostcopy_stager_options,
) -> hostcopy_status {
    entry("hostcopy_stager_options_default", || {
        // SAFETY: the caller's contract.
        let options = unsafe { out(options, "options") }?;
        options.write(hostcopy_stager_options::defaults());
        Ok(())
    })
}

/// Makes a stager on `device`'s primary context (or the current one).
///
/// # Safety
///
/// `options` is null or points to a readable `hostcopy_stager_options`;
/// `out` is null or points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_stager_new(
    device: i32,
    options: *const hostcopy_stager_options,
    out: *mut *mut hostcopy_stager,
) -> hostcopy_status {
    entry("hostcopy_stager_new", || {
        // SAFETY: the caller's contract.
        let out = unsafe { crate::out(out, "out") }?;
        let options = if options.is_null() {
            StagingOptions::default()
        } else {
            // SAFETY: the caller's contract.
            unsafe { hostcopy_stager_options::read(options) }?.build()?
        };
        let _saved = Context::save_current()?;
        let context = match device {
            CURRENT_CONTEXT => Context::current()?,
            ordinal => {
                let ordinal = usize::try_from(ordinal).map_err(|_| {
                    Failure::invalid(format!(
                        "device {ordinal}: an ordinal from 0, or HOSTCOPY_CURRENT_CONTEXT (-1)"
                    ))
                })?;
                Context::primary(ordinal)?
            }
        };
        let stager = Stager::with_options(&context, options)?;
        out.write(Box::into_raw(Box::new(hostcopy_stager {
            stager: Mutex::new(stager),
            context,
        })));
        Ok(())
    })
}

/// Frees a stager; transfers it started go on.
///
/// # Safety
///
/// `stager` is null or a stager from `hostcopy_stager_new`, not freed
/// before, that no other call uses now or later.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_stager_free(stager: *mut hostcopy_stager) {
    crate::status::entry_void("hostcopy_stager_free", || {
        if !stager.is_null() {
            // The engine's drop may make driver calls: the caller's
            // current context stays theirs.
            let _saved = Context::save_current();
            // SAFETY: the caller's contract: the box is ours and unused.
            drop(unsafe { Box::from_raw(stager) });
        }
    });
}

/// The stager's device ordinal.
///
/// # Safety
///
/// `stager` is null or a live stager; `device` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_stager_device(
    stager: *const hostcopy_stager,
    device: *mut i32,
) -> hostcopy_status {
    entry("hostcopy_stager_device", || {
        // SAFETY: the caller's contract.
        let (stager, device) = unsafe { (reference(stager, "stager")?, out(device, "device")?) };
        device.write(i32::try_from(stager.context.ordinal()).unwrap_or(i32::MAX));
        Ok(())
    })
}

/// The stager's options and its running workers.
///
/// # Safety
///
/// `stager` is null or a live stager; `options` and `workers_running`
/// are each null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_stager_get_options(
    stager: *const hostcopy_stager,
    options: *mut hostcopy_stager_options,
    workers_running: *mut usize,
) -> hostcopy_status {
    entry("hostcopy_stager_get_options", || {
        // SAFETY: the caller's contract.
        let stager = unsafe { reference(stager, "stager") }?;
        let locked = stager.lock()?;
        if !options.is_null() {
            // SAFETY: the caller's contract: non-null means writable.
            unsafe { options.write_unaligned(hostcopy_stager_options::of(locked.options())) };
        }
        if !workers_running.is_null() {
            // SAFETY: as above.
            unsafe { workers_running.write_unaligned(locked.workers()) };
        }
        Ok(())
    })
}
