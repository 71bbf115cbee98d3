//! What the CUDA layer's tests share on a GPU (`gpu.rs`) and on the
//! simulated driver (`sim_layer.rs`): host memory that records reach only
//! by address, and the launch patterns both run.

#![allow(dead_code, unreachable_pub)]

use hostcopy_driver::cuda::{
    Context, DeviceBuffer, Error, HostCopy, PinnedBuffer, Stream, StreamRef,
};
use hostcopy_driver::{PoolError, RawRegion, Record, RecordPool};

/// Host memory the tests reach only through raw addresses once records
/// point into it, so that no Rust borrow is live while host functions write.
pub struct RawBuffer {
    bytes: Vec<u8>,
    base: *mut u8,
}

// SAFETY: the buffer is plain memory; the tests synchronize before reading.
unsafe impl Send for RawBuffer {}
// SAFETY: as above.
unsafe impl Sync for RawBuffer {}

impl RawBuffer {
    pub fn new(bytes: Vec<u8>) -> RawBuffer {
        let mut bytes = bytes;
        let base = bytes.as_mut_ptr();
        let _ = base.expose_provenance();
        RawBuffer { bytes, base }
    }

    pub fn zeroed(len: usize) -> RawBuffer {
        RawBuffer::new(vec![0u8; len])
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn region(&self) -> RawRegion {
        RawRegion::host(self.base.addr(), self.bytes.len())
    }

    /// The bytes, read after the host functions writing them have finished.
    pub fn read(&self) -> &[u8] {
        // SAFETY: `len` bytes of the vector; the caller synchronized first.
        unsafe { std::slice::from_raw_parts(self.base, self.bytes.len()) }
    }

    /// Overwrites the bytes between launches.
    pub fn write(&self, data: &[u8]) {
        assert_eq!(data.len(), self.bytes.len());
        // SAFETY: `len` bytes of the vector; no host function is running.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base, data.len()) };
    }
}

/// A record between two raw buffers; the tests give it ranges inside both.
pub fn raw_record(
    dst: &RawBuffer,
    dst_offset: usize,
    src: &RawBuffer,
    src_offset: usize,
    nbytes: usize,
) -> Record<'static> {
    // SAFETY: every test keeps the buffers alive until the host functions
    // (or the graphs) using these records are finished.
    unsafe { Record::from_raw_regions(dst.region(), dst_offset, src.region(), src_offset, nbytes) }
        .expect("a record inside both buffers")
}

/// Puts `data` on the device, then brings it back in chunks of `chunk`
/// bytes through one pinned staging buffer on one stream: a copy from the
/// device into the staging buffer, a host copy out of it, then the next
/// chunk's copy into it. Only stream order keeps the chunks apart. Returns
/// the host memory the host copies wrote.
pub fn through_one_staging_buffer(
    context: &Context,
    data: &[u8],
    chunk: usize,
) -> Result<RawBuffer, Error> {
    let mut source = DeviceBuffer::new(context, data.len())?;
    source.copy_from_host(0, data)?;
    let stream = Stream::new(context)?;
    let staging = PinnedBuffer::new(context, chunk)?;
    let staging_ptr = staging.raw_ptr();
    let staging_region = staging.raw_region();
    let dst = RawBuffer::zeroed(data.len());
    stream.as_stream().scope(|scope| -> Result<(), Error> {
        for c in 0..data.len() / chunk {
            // SAFETY: the staging buffer is pinned and outlives the scope;
            // in stream order this copy follows the host copy that read it
            // last.
            unsafe {
                scope
                    .stream()
                    .copy_device_to_host(staging_ptr, &source, c * chunk, chunk)
            }?;
            // SAFETY: both regions outlive the scope.
            let record = unsafe {
                Record::from_raw_regions(dst.region(), c * chunk, staging_region, 0, chunk)
            }?;
            scope.launch(HostCopy::Single, record)?;
        }
        Ok(())
    })??;
    Ok(dst)
}

/// Calls `launch(s, stream, at)` `per_stream` times for each of `streams`,
/// taking the streams in turn, with `at` the offset of the `len` bytes
/// that launch copies (the `i`th round on stream `s`: `(i * streams + s) *
/// len`); then waits for every stream.
pub fn across_streams(
    streams: &[Stream],
    per_stream: usize,
    len: usize,
    mut launch: impl FnMut(usize, StreamRef<'_>, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    for i in 0..per_stream {
        for (s, stream) in streams.iter().enumerate() {
            launch(s, stream.as_stream(), (i * streams.len() + s) * len)?;
        }
    }
    for stream in streams {
        stream.as_stream().synchronize()?;
    }
    Ok(())
}

/// Launches an owned copy with its record in `pool`; while every slot is
/// held, waits for `stream` and tries again (never a wait inside the pool:
/// the caller decides). Returns how many times the pool was exhausted.
pub fn launch_owned_in_retrying<const N: usize>(
    stream: StreamRef<'_>,
    pool: &'static RecordPool<N>,
    copy: HostCopy,
    record: impl Fn() -> Record<'static>,
) -> Result<usize, Error> {
    let mut exhausted = 0;
    loop {
        match stream.launch_owned_in(pool, copy, record()) {
            Ok(_) => return Ok(exhausted),
            Err(Error::Pool(PoolError::Exhausted { .. })) => {
                exhausted += 1;
                stream.synchronize()?;
            }
            Err(other) => return Err(other),
        }
    }
}
