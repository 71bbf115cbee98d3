//! `hostcopy_copy`, one description of a copy (as Rust's `TransferSpec`),
//! its two fronts (`hostcopy_stager_run` blocks, `hostcopy_stager_start`
//! returns a transfer), and `hostcopy_transfer`, a [`PendingTransfer`]
//! with the shares of the memory it copies.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, PoisonError};

use hostcopy_driver::cuda::staging::{Block, PendingTransfer, TransferSpec, to_device, to_host};
use hostcopy_driver::cuda::{Context, DeviceView};
use hostcopy_driver::{HostRange, RawHostMemory};

use crate::memory::{DeviceMemory, Hold, hostcopy_device_buffer, hostcopy_host_buffer};
use crate::stager::hostcopy_stager;
use crate::status::{Failure, HOSTCOPY_ERROR_OUT_OF_BOUNDS, entry, entry_void, hostcopy_status};
use crate::{out, reference};

/// `HOSTCOPY_TO_HOST` and `HOSTCOPY_TO_DEVICE`.
const TO_HOST: i32 = 0;
const TO_DEVICE: i32 = 1;

/// `hostcopy_block`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types, missing_docs)]
pub struct hostcopy_block {
    pub device_offset: usize,
    pub host_offset: usize,
    pub len: usize,
}

/// `hostcopy_copy`, field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types, missing_docs)]
pub struct hostcopy_copy {
    pub struct_size: usize,
    pub direction: i32,
    pub reserved: i32,
    pub device: *mut hostcopy_device_buffer,
    pub device_offset: usize,
    pub host: *mut c_void,
    pub host_buffer: *mut hostcopy_host_buffer,
    pub host_offset: usize,
    pub host_len: usize,
    pub blocks: *const hostcopy_block,
    pub block_count: usize,
}

// The header's layout checks, with the same numbers.
const _: () = assert!(size_of::<hostcopy_block>() == 24);
const _: () = assert!(size_of::<hostcopy_copy>() == 80);
const _: () = assert!(core::mem::offset_of!(hostcopy_copy, device) == 16);
const _: () = assert!(core::mem::offset_of!(hostcopy_copy, block_count) == 72);

/// A copy read from C and checked as far as it can be without the
/// driver: what a front turns into a [`TransferSpec`].
struct Described {
    to_device: bool,
    device: Arc<DeviceMemory>,
    /// The hold on a host buffer (a share and a claim on the bytes the
    /// copy reads or writes), if the host side is one.
    host_share: Option<Hold>,
    host: HostRange,
    device_offset: usize,
    blocks: Option<Vec<Block>>,
}

impl Described {
    /// Reads `*copy`.
    ///
    /// # Safety
    ///
    /// `copy` is null or readable; the handles in it are null or live, and
    /// `blocks` is null or points to `block_count` readable blocks.
    unsafe fn read(copy: *const hostcopy_copy) -> Result<Described, Failure> {
        if copy.is_null() {
            return Err(Failure::null("copy"));
        }
        // The size first, alone: a structure of another size (a caller
        // built against another header) is refused before any byte past
        // its `struct_size` is read.
        // SAFETY: the caller's contract: a readable structure starts with
        // its `size_t struct_size`.
        let struct_size = unsafe { copy.cast::<usize>().read_unaligned() };
        if struct_size != size_of::<hostcopy_copy>() {
            return Err(Failure::invalid(format!(
                "hostcopy_copy.struct_size is {struct_size}, not sizeof(hostcopy_copy) = {} \
                 (build it with hostcopy_to_host or hostcopy_to_device)",
                size_of::<hostcopy_copy>()
            )));
        }
        // SAFETY: the caller's contract, and the structure is this
        // header's size.
        let copy = unsafe { reference(copy, "copy") }?;
        let to_device = match copy.direction {
            TO_HOST => false,
            TO_DEVICE => true,
            other => {
                return Err(Failure::invalid(format!(
                    "direction is {other}: HOSTCOPY_TO_HOST (0) or HOSTCOPY_TO_DEVICE (1)"
                )));
            }
        };
        if copy.reserved != 0 {
            return Err(Failure::invalid("hostcopy_copy.reserved is not 0"));
        }
        // SAFETY: the caller's contract.
        let device = unsafe { reference(copy.device.cast_const(), "copy->device") }?;
        let blocks = match (copy.blocks.is_null(), copy.block_count) {
            (_, 0) => None,
            (true, _) => return Err(Failure::null("copy->blocks (block_count > 0)")),
            (false, count) => {
                // SAFETY: the caller's contract: `count` readable blocks.
                let blocks = unsafe { core::slice::from_raw_parts(copy.blocks, count) };
                let blocks: Vec<Block> = blocks
                    .iter()
                    .map(|b| Block::new(b.device_offset, b.host_offset, b.len))
                    .collect();
                Some(blocks)
            }
        };
        let (host, host_share) = match (copy.host.is_null(), copy.host_buffer.is_null()) {
            (false, false) => {
                return Err(Failure::invalid(
                    "hostcopy_copy has both `host` and `host_buffer`: give one",
                ));
            }
            (true, true) => return Err(Failure::null("copy->host and copy->host_buffer")),
            (false, true) => {
                if copy.host_offset != 0 {
                    return Err(Failure::invalid(
                        "hostcopy_copy.host_offset is for host_buffer; with `host` it is 0",
                    ));
                }
                let addr = copy.host.expose_provenance();
                if addr.checked_add(copy.host_len).is_none() {
                    return Err(Failure::invalid(format!(
                        "host memory at {addr:#x} of {} bytes wraps the address space",
                        copy.host_len
                    )));
                }
                let range = HostRange {
                    addr,
                    len: copy.host_len,
                };
                (range, None)
            }
            (true, false) => {
                // SAFETY: the caller's contract.
                let buffer =
                    unsafe { reference(copy.host_buffer.cast_const(), "copy->host_buffer") }?;
                let buffer_len = buffer.len();
                if copy
                    .host_offset
                    .checked_add(copy.host_len)
                    .is_none_or(|end| end > buffer_len)
                {
                    return Err(Failure::new(
                        HOSTCOPY_ERROR_OUT_OF_BOUNDS,
                        format!(
                            "{} bytes at host_offset {} of a host buffer of {} bytes",
                            copy.host_len, copy.host_offset, buffer_len
                        ),
                    ));
                }
                // The bytes the copy reads or writes: each block's (the
                // engine refuses a block past the host side later, and the
                // hold goes with the refusal), or the whole host side.
                let at = copy.host_offset;
                let ranges = match &blocks {
                    Some(blocks) => blocks
                        .iter()
                        .map(|block: &Block| {
                            let start = at.saturating_add(block.host_offset);
                            (start, start.saturating_add(block.len))
                        })
                        .collect(),
                    None => vec![(at, at + copy.host_len)],
                };
                let hold = buffer.hold(!to_device, ranges)?;
                let range = HostRange {
                    addr: hold.memory().addr + copy.host_offset,
                    len: copy.host_len,
                };
                (range, Some(hold))
            }
        };
        Ok(Described {
            to_device,
            device: device.memory.clone(),
            host_share,
            host,
            device_offset: copy.device_offset,
            blocks,
        })
    }

    /// The device side as a view in `context` (the stager's): the driver
    /// checks the memory's device.
    fn view(&self, context: &Context) -> Result<DeviceView, Failure> {
        if self.device.context().ordinal() != context.ordinal() {
            return Err(Failure::new(
                crate::status::HOSTCOPY_ERROR_CONTEXT_MISMATCH,
                format!(
                    "device memory of device {} given to a stager of device {}",
                    self.device.context().ordinal(),
                    context.ordinal()
                ),
            ));
        }
        self.device.view(context)
    }

    /// Runs `front` on the transfer spec over `view` and the host side.
    ///
    /// # Safety
    ///
    /// The host range is memory the C caller gave under the header's
    /// rules (or a share of a host buffer held for as long as the
    /// transfer runs); see the callers.
    unsafe fn with_spec<T>(
        &self,
        view: &mut DeviceView,
        front: impl FnOnce(TransferSpec<'_>) -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        // SAFETY: our caller's contract: the range stays allocated and
        // untouched by others for as long as the transfer may use it.
        let mut host = unsafe { RawHostMemory::new(self.host) };
        let spec = if self.to_device {
            to_device(view, &host)
        } else {
            to_host(&mut host, view)
        };
        let spec = match &self.blocks {
            Some(blocks) => spec.blocks(blocks),
            None => spec.at(self.device_offset),
        };
        front(spec)
    }
}

/// Runs a copy and waits for it.
///
/// # Safety
///
/// `stager` is null or live; `copy` is null or a readable description
/// whose handles are null or live, whose `blocks` point to `block_count`
/// blocks, and whose raw host memory (if any) is `host_len` bytes,
/// allocated and, for a copy to the host, writable, that nothing else
/// reads or writes during the call (nothing else writes, for a copy to
/// the device).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_stager_run(
    stager: *mut hostcopy_stager,
    copy: *const hostcopy_copy,
) -> hostcopy_status {
    entry("hostcopy_stager_run", || {
        // SAFETY: the caller's contract.
        let (stager, described) = unsafe {
            (
                reference(stager.cast_const(), "stager")?,
                Described::read(copy)?,
            )
        };
        let _saved = Context::save_current()?;
        let mut view = described.view(&stager.context)?;
        let mut locked = stager.lock()?;
        // SAFETY: the caller's contract for raw memory, for this call; a
        // host buffer's share is held in `described` until it returns.
        unsafe { described.with_spec(&mut view, |spec| Ok(locked.run(spec)?)) }
    })
}

/// `hostcopy_transfer`: a transfer in flight and the shares of the memory
/// it copies. Fields drop in order: the transfer first (its drop waits
/// for its copies), then the shares.
#[allow(non_camel_case_types)]
#[derive(Debug)]
pub struct hostcopy_transfer {
    pending: PendingTransfer,
    /// The hold on a host buffer, let go of by the first wait that
    /// returns (the transfer has ended then: see `hostcopy_transfer_wait`)
    /// or by the drop.
    host: Mutex<Option<Hold>>,
    _device: Arc<DeviceMemory>,
}

/// Starts a copy and returns a transfer in flight.
///
/// # Safety
///
/// As `hostcopy_stager_run`, but raw host memory stays allocated and
/// untouched by others until `hostcopy_transfer_wait` or
/// `hostcopy_transfer_free` has returned for the transfer; `out` is null
/// or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_stager_start(
    stager: *mut hostcopy_stager,
    copy: *const hostcopy_copy,
    out: *mut *mut hostcopy_transfer,
) -> hostcopy_status {
    entry("hostcopy_stager_start", || {
        // SAFETY: the caller's contract.
        let (stager, out) = unsafe {
            (
                reference(stager.cast_const(), "stager")?,
                crate::out(out, "out")?,
            )
        };
        // SAFETY: as above.
        let described = unsafe { Described::read(copy) }?;
        let _saved = Context::save_current()?;
        let mut view = described.view(&stager.context)?;
        let mut locked = stager.lock()?;
        // SAFETY: raw host memory: the caller's contract, until the
        // transfer is waited for or freed; a host buffer: the transfer
        // below holds its share, and its claim on the bytes (no other
        // transfer writes them, nor reads those it writes), until a wait
        // has ended it or its drop has waited for the copies;
        // the device memory: the view's owner is a share of it, which the
        // engine holds while its copies may run, and the transfer holds
        // one too.
        let pending =
            unsafe { described.with_spec(&mut view, |spec| Ok(locked.start_unchecked(spec)?)) }?;
        out.write(Box::into_raw(Box::new(hostcopy_transfer {
            pending,
            host: Mutex::new(described.host_share),
            _device: described.device,
        })));
        Ok(())
    })
}

/// Waits for the transfer's bytes; its result, the same at every call.
///
/// # Safety
///
/// `transfer` is null or a live transfer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_transfer_wait(
    transfer: *mut hostcopy_transfer,
) -> hostcopy_status {
    entry("hostcopy_transfer_wait", || {
        // SAFETY: the caller's contract.
        let transfer = unsafe { reference(transfer.cast_const(), "transfer") }?;
        let _saved = Context::save_current()?;
        let result = transfer.pending.finish();
        // `finish` has ended the transfer, whatever it returned: the
        // copier is done with its host memory (it finishes its part of
        // every transfer, after an error too) and its driver copies have
        // run, or, where they may still run after a context error, the
        // engine keeps the registered memory they use for good and puts
        // fresh pages under the bytes they write. Nothing the transfer
        // started touches the host buffer's bytes any more: its hold goes,
        // so that the buffer may be registered, or written by another
        // transfer, without freeing this one.
        drop(
            transfer
                .host
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        Ok(result?)
    })
}

/// Whether the transfer's bytes have arrived, without waiting.
///
/// # Safety
///
/// `transfer` is null or live; `finished` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_transfer_query(
    transfer: *mut hostcopy_transfer,
    finished: *mut i32,
) -> hostcopy_status {
    entry("hostcopy_transfer_query", || {
        // SAFETY: the caller's contract.
        let (transfer, finished) = unsafe {
            (
                reference(transfer.cast_const(), "transfer")?,
                out(finished, "finished")?,
            )
        };
        let _saved = Context::save_current()?;
        // A failed transfer has ended too: wait reports its error.
        finished.write(i32::from(transfer.pending.is_finished().unwrap_or(true)));
        Ok(())
    })
}

/// Frees the transfer, waiting for its copies first.
///
/// # Safety
///
/// `transfer` is null or a live transfer no other call uses now or later.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hostcopy_transfer_free(transfer: *mut hostcopy_transfer) {
    entry_void("hostcopy_transfer_free", || {
        if !transfer.is_null() {
            let _saved = Context::save_current();
            // SAFETY: the caller's contract.
            drop(unsafe { Box::from_raw(transfer) });
        }
    });
}
