//! The lists this layer keeps (launched slots, replaced records, launch
//! events): on the heap with `alloc`, fixed-capacity without.

/// A list of at most `N` items without `alloc`; unbounded with it.
pub(crate) struct List<T, const N: usize> {
    #[cfg(feature = "alloc")]
    items: alloc::vec::Vec<T>,
    #[cfg(not(feature = "alloc"))]
    items: heapless::Vec<T, N>,
}

impl<T, const N: usize> List<T, N> {
    pub(crate) fn new() -> Self {
        List {
            items: Default::default(),
        }
    }

    /// Appends `item`, or gives it back when the list is full.
    pub(crate) fn push(&mut self, item: T) -> Result<(), T> {
        #[cfg(feature = "alloc")]
        {
            self.items.push(item);
            Ok(())
        }
        #[cfg(not(feature = "alloc"))]
        self.items.push(item)
    }

    pub(crate) fn is_full(&self) -> bool {
        #[cfg(feature = "alloc")]
        return false;
        #[cfg(not(feature = "alloc"))]
        self.items.is_full()
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn iter(&self) -> core::slice::Iter<'_, T> {
        self.items.iter()
    }

    pub(crate) fn iter_mut(&mut self) -> core::slice::IterMut<'_, T> {
        self.items.iter_mut()
    }

    /// Removes the first `count` items.
    pub(crate) fn drain_front(&mut self, count: usize) -> impl Iterator<Item = T> + '_ {
        self.items.drain(..count)
    }

    pub(crate) fn drain_all(&mut self) -> impl Iterator<Item = T> + '_ {
        self.items.drain(..)
    }
}
