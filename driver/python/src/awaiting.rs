//! `await transfer`: the event loop's side of a transfer's completion.
//! The crate decides it (`hostcopy_driver::awaiting`: the stager's finish
//! thread, the pipe, who ends a transfer); this is the pyclass the loop
//! holds (`hostcopy._awaiting` keeps one per loop while it has awaits
//! outstanding). Nothing here calls into Python from another thread: the
//! finish thread only writes the pipe.

use pyo3::prelude::*;

/// One event loop's wakeup: `fileno()` for `loop.add_reader`, `take()`
/// in its callback for the tokens of the transfers ended since.
#[pyclass(module = "hostcopy._native", frozen)]
pub(crate) struct Wakeup {
    pub(crate) inner: hostcopy_driver::awaiting::Wakeup,
}

#[pymethods]
impl Wakeup {
    #[new]
    fn new() -> PyResult<Wakeup> {
        Ok(Wakeup {
            inner: hostcopy_driver::awaiting::Wakeup::new()?,
        })
    }

    /// The pipe's read end, readable while ended tokens wait.
    fn fileno(&self) -> i32 {
        self.inner.fileno()
    }

    /// The tokens ended since the last call, in the order they ended;
    /// reads the pipe's byte with them.
    fn take(&self) -> PyResult<Vec<u64>> {
        Ok(self.inner.take()?)
    }
}
