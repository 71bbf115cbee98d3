//! The memory of `hostcopy.empty`: a [`HostBuffer`] that numpy views,
//! registered with the driver where `register=` asks for it.

use hostcopy_driver::HostBuffer;
use hostcopy_driver::cuda::Context;
use hostcopy_driver::cuda::registration::{Register, Registration, default_range};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::errors::{self, Class};
use crate::integers::argument;
use crate::life;

/// `register=`'s words, as `hostcopy.Register` spells them.
const WORDS: [(&str, Register); 3] = [
    ("never", Register::Never),
    ("background", Register::Background),
    ("now", Register::Now),
];

/// `register=` recognised, once, as an argument: one of [`WORDS`], or
/// `InvalidOption` (a `ValueError`, which pyo3 raises as it is), before
/// any memory is mapped or driver called.
#[derive(Clone, Copy, Debug)]
pub(crate) struct When(pub(crate) Register);

impl<'a, 'py> FromPyObject<'a, 'py> for When {
    type Error = PyErr;

    fn extract(register: Borrowed<'a, 'py, PyAny>) -> PyResult<When> {
        if let Ok(word) = register.cast::<PyString>()
            && let Some(&(_, when)) = WORDS.iter().find(|(name, _)| word == *name)
        {
            return Ok(When(when));
        }
        let py = register.py();
        let message = format!(
            "hostcopy.empty: register = {} is not one of \"never\", \"background\", \"now\"",
            register.repr()?
        );
        Err(errors::error(
            py,
            Class::InvalidOption,
            message,
            [
                ("option", "register".into_pyobject(py)?.into_any()),
                ("value", register.to_owned()),
            ],
        ))
    }
}

/// `(registered, nbytes, refused, finished)`: how far a registration has
/// got, as `hostcopy.Registration` takes it.
type Told = (usize, usize, Option<String>, bool);

/// Pageable host memory made to be copied into: privately mapped, advised
/// onto transparent huge pages where the kernel has them in `madvise`
/// mode, its pages made present by several threads before it is returned,
/// its bytes zero (`hostcopy_driver::HostBuffer`), and registered with the
/// driver (page-locked, range by range, at once or in the background)
/// where it was asked to be. numpy views it through
/// `__array_interface__`: the array's base is this object, so the memory
/// lives as long as any view of it, and is unregistered and unmapped after
/// the last.
#[pyclass(module = "hostcopy._native", frozen)]
pub(crate) struct PageableMemory {
    /// Never read or written by Rust after it was made (Python writes the
    /// bytes through `addr`): only its registration is read or waited for.
    /// `None` only in `Drop`.
    buffer: Option<HostBuffer>,
    /// Its first byte's address, taken once when it was made.
    addr: usize,
    nbytes: usize,
    /// Whether a registration was asked for: its drop then calls the
    /// driver, otherwise none.
    registers: bool,
}

impl PageableMemory {
    /// `nbytes` zeroed bytes, registered with device `device`'s primary
    /// context as `when` says, in ranges of `range` bytes. The device's
    /// context is had before the memory is mapped (`CudaUnavailable`
    /// without a driver, `CudaError` for a device that does not exist);
    /// a range the driver refuses ends the registration, readable
    /// ([`registration`](Self::registration)), never an error.
    pub(crate) fn made(
        py: Python<'_>,
        nbytes: usize,
        When(when): When,
        device: usize,
        range: usize,
    ) -> PyResult<Self> {
        let context = match when {
            Register::Never => None,
            Register::Background | Register::Now => {
                life::use_cuda()?;
                let context = life::detach(py, || {
                    crate::keeping_current(|| Ok(Context::primary(device)?))
                })
                .map_err(|failure| errors::layer_error(py, "empty", "device", failure))?;
                Some(context)
            }
        };
        let mut buffer = life::detach(py, || HostBuffer::new(nbytes))
            .map_err(|failure| errors::host_buffer_error(py, &failure))?;
        // Through `&mut`: Python writes through this address.
        let addr = buffer.as_mut_ptr().expose_provenance();
        if let Some(context) = &context {
            // `Now` registers every range here, without the GIL;
            // `Background` starts its thread and returns.
            life::detach(py, || {
                crate::keeping_current(|| Ok(buffer.register_in_ranges(context, when, range)))
            })
            .map_err(|failure| errors::layer_error(py, "empty", "device", failure))?;
        }
        Ok(PageableMemory {
            buffer: Some(buffer),
            addr,
            nbytes,
            registers: context.is_some(),
        })
    }

    /// What `hostcopy.Registration` holds; `refused` is the driver's error
    /// as the binding words it.
    fn told(&self, registration: Option<Registration>) -> Told {
        match registration {
            Some(registration) => (
                registration.registered,
                registration.len,
                registration.refused.map(|refused| refused.to_string()),
                registration.finished,
            ),
            // Only while it is dropped: nothing is registered.
            None => (0, self.nbytes, None, true),
        }
    }
}

#[pymethods]
impl PageableMemory {
    /// `nbytes` zeroed bytes, their pages present (made with the GIL
    /// released: 1 GiB takes tens of milliseconds), registered with device
    /// `device`'s primary context (portable to every context) as
    /// `register` says: `"never"` (the default, no driver call),
    /// `"background"` or `"now"`.
    #[new]
    #[pyo3(signature = (nbytes, register=When(Register::Never), device=None))]
    // The default as Python spells it (pyo3 shows a Rust expression as `...`).
    #[pyo3(text_signature = "(nbytes, register='never', device=0)")]
    fn new(
        py: Python<'_>,
        nbytes: &Bound<'_, PyAny>,
        register: When,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let nbytes: usize = argument(nbytes, "nbytes")?;
        let device: usize = device.map_or(Ok(0), |device| argument(device, "device"))?;
        PageableMemory::made(py, nbytes, register, device, default_range(register.0))
    }

    /// Its length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    /// The bytes as a writable one-dimensional `uint8` array (numpy's array
    /// interface, version 3).
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let interface = PyDict::new(py);
        interface.set_item("version", 3)?;
        interface.set_item("shape", (self.nbytes,))?;
        interface.set_item("typestr", "|u1")?;
        interface.set_item("data", (self.addr, false))?;
        Ok(interface)
    }

    /// How far its registration has got, without waiting for it:
    /// `(registered, nbytes, refused, finished)`. `CudaUnavailable` in a
    /// child forked after CUDA was used, for memory registered in the
    /// parent (its registration's state may be held by a thread the child
    /// does not have).
    fn registration(&self, py: Python<'_>) -> PyResult<Told> {
        if self.registers && life::forked() {
            return Err(errors::forked(py));
        }
        Ok(self.told(self.buffer.as_ref().map(HostBuffer::registration)))
    }

    /// Waits, with the GIL released, until its registration has ended
    /// (every range registered, or one refused): `(registered, nbytes,
    /// refused, finished)`. `CudaUnavailable` in a child forked after
    /// CUDA was used, for memory registered in the parent: its
    /// registering thread is not in the child, and joining it would wait
    /// for good.
    fn wait_registered(&self, py: Python<'_>) -> PyResult<Told> {
        if self.registers && life::forked() {
            return Err(errors::forked(py));
        }
        let registration =
            life::detach(py, || self.buffer.as_ref().map(HostBuffer::wait_registered));
        Ok(self.told(registration))
    }
}

impl Drop for PageableMemory {
    /// Unregisters and unmaps the memory. Registered memory's drop waits
    /// for the range under way and unregisters every range, so without the
    /// GIL (the thread holds it: a Python object's dealloc) and with the
    /// thread's current context put back afterwards, as after every call
    /// (`crate::keeping_current`).
    fn drop(&mut self) {
        let buffer = self.buffer.take();
        if !self.registers || life::forked() {
            // No driver call: never registered, or a child forked after
            // CUDA was used, where the buffer's drop leaves the parent's
            // registration (and the mapping) alone.
            drop(buffer);
            return;
        }
        let unregister = move || {
            let saved = Context::save_current().ok();
            drop(buffer);
            drop(saved);
        };
        if life::exiting() {
            // The interpreter may begin to finalise at any moment: dropped
            // here with the GIL kept, as every call keeps it from the exit
            // handler on.
            unregister();
            return;
        }
        // Attached already (a dealloc); as the interpreter shuts down, the
        // closure, buffer and all, is dropped on this thread as it is.
        Python::try_attach(move |py| life::detach(py, unregister));
    }
}
