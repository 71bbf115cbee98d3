//! The events [`Stager::wait_for`](super::Stager::wait_for) records on the
//! streams a stager's later transfers wait for, held until they are known
//! complete, and bounded however often it is called.

use std::vec::Vec;

use crate::cuda::capture::{self, capture_graph};
use crate::cuda::context::Context;
use crate::cuda::error::Error;
use crate::cuda::event::Event;
use crate::cuda::stream::{Stream, StreamRef};

/// The most events [`Stager::wait_for`](super::Stager::wait_for) keeps for
/// work not known complete: at it, `wait_for` folds them into one
/// (recorded on a stream of the stager's own that waited for each),
/// without waiting on the host.
pub const MAX_ORDER_EVENTS: usize = 64;

/// One event `wait_for` recorded.
#[derive(Debug)]
struct OrderEvent {
    /// Its number, in the order they were recorded.
    number: u64,
    event: Event,
}

/// Events `wait_for` recorded, each numbered, not yet known complete. A
/// stream of the stager's waits for them when a transfer is first queued
/// on it after they were recorded ([`order_lane`](Self::order_lane)), so
/// that a transfer waits once on each stream it uses, not on every stream
/// at every `wait_for`; the stream of a transfer on the driver's path
/// waits for them all when it starts. A staged transfer started after an
/// event, and finished without error, proves it complete: the streams it
/// used waited for every event recorded before it.
#[derive(Debug, Default)]
pub(super) struct OrderEvents {
    pending: Vec<OrderEvent>,
    /// The number the next event gets.
    next: u64,
    /// For each of the stager's streams (by index), the number of the
    /// first event it has not waited for.
    waited_below: Vec<u64>,
    /// Completed events, reused.
    spare: Vec<Event>,
    /// Waits for the events when they are folded into one; made the first
    /// time they are.
    stream: Option<Stream>,
}

impl OrderEvents {
    /// The number the next event gets: a transfer started now is ordered
    /// after every event numbered below it.
    pub(super) fn next(&self) -> u64 {
        self.next
    }

    /// Whether no event is held.
    pub(super) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Records an event on `stream`, which the stager's streams wait for
    /// before their next transfer. Refused on a capturing stream.
    pub(super) fn record(&mut self, context: &Context, stream: StreamRef<'_>) -> Result<(), Error> {
        self.retire(context)?;
        let event = match self.spare.pop() {
            Some(event) => event,
            None => Event::blocking(context)?,
        };
        let recorded = {
            let locked = capture::lock();
            match capture_graph(&locked, stream.context(), stream.raw()) {
                Ok(None) => event.record_known(&locked, stream, false),
                Ok(Some(_)) => Err(Error::Capturing),
                Err(error) => Err(error.into()),
            }
        };
        if let Err(error) = recorded {
            self.spare.push(event);
            return Err(error);
        }
        self.pending.push(OrderEvent {
            number: self.next,
            event,
        });
        self.next += 1;
        Ok(())
    }

    /// Makes `stream` wait for every event held.
    pub(super) fn order(&self, stream: StreamRef<'_>) -> Result<(), Error> {
        for pending in &self.pending {
            stream.wait_event(&pending.event)?;
        }
        Ok(())
    }

    /// Makes the stager's stream `lane` wait for every event held that it
    /// has not waited for: before the first chunk of a transfer queued on
    /// it. Every transfer started before is queued whole (by the call that
    /// started it), so the waits come after them and before this one. The
    /// stream is the stager's own, which never captures.
    pub(super) fn order_lane(&mut self, lane: usize, stream: StreamRef<'_>) -> Result<(), Error> {
        if self.waited_below.len() <= lane {
            self.waited_below.resize(lane + 1, 0);
        }
        let below = self.waited_below[lane];
        for pending in self
            .pending
            .iter()
            .filter(|pending| pending.number >= below)
        {
            stream.wait_event(&pending.event)?;
        }
        self.waited_below[lane] = self.next;
        Ok(())
    }

    /// Every event held is complete (a stream that waited for each has run
    /// past them).
    pub(super) fn all_complete(&mut self) {
        let done = self.pending.drain(..).map(|pending| pending.event);
        self.spare.extend(done);
    }

    /// The events numbered below `upto` are complete: a staged transfer
    /// started after them has finished, on streams that waited for them.
    pub(super) fn complete_below(&mut self, upto: u64) {
        if self.pending.iter().all(|pending| pending.number >= upto) {
            return;
        }
        for pending in core::mem::take(&mut self.pending) {
            if pending.number < upto {
                self.spare.push(pending.event);
            } else {
                self.pending.push(pending);
            }
        }
    }

    /// Lets go of the events the driver reports complete, and once
    /// [`MAX_ORDER_EVENTS`] are held, folds them into one: so that the
    /// events held stay bounded however often `wait_for` is called between
    /// transfers that would prove them complete, without waiting on the
    /// host (a non-blocking call must not block on the user's stream).
    pub(super) fn retire(&mut self, context: &Context) -> Result<(), Error> {
        let mut index = 0;
        while index < self.pending.len() {
            if self.pending[index].event.query()? {
                let done = self.pending.remove(index);
                self.spare.push(done.event);
            } else {
                index += 1;
            }
        }
        if self.pending.len() >= MAX_ORDER_EVENTS {
            self.fold(context)?;
        }
        // Spares beyond the bound are never needed at once again.
        self.spare.truncate(MAX_ORDER_EVENTS);
        Ok(())
    }

    /// Replaces the events by one that completes after all of them:
    /// recorded on a stream of the stager's own that waited for each and
    /// carries no other work. On an error nothing is replaced.
    fn fold(&mut self, context: &Context) -> Result<(), Error> {
        if self.stream.is_none() {
            self.stream = Some(Stream::new(context)?);
        }
        let Some(stream) = &self.stream else {
            unreachable!("made above");
        };
        let stream = stream.as_stream();
        for pending in &self.pending {
            stream.wait_event(&pending.event)?;
        }
        let folded = match self.spare.pop() {
            Some(event) => event,
            None => Event::blocking(context)?,
        };
        if let Err(error) = folded.record(stream) {
            self.spare.push(folded);
            return Err(error);
        }
        // Its number is the newest: `complete_below` compares it, and a
        // stream that waited for that one waited for every one folded in
        // (`order_lane`); one that did not, waits for this.
        let number = self.pending.last().map_or(0, |pending| pending.number);
        let folded_in = self.pending.drain(..).map(|pending| pending.event);
        self.spare.extend(folded_in);
        self.pending.push(OrderEvent {
            number,
            event: folded,
        });
        Ok(())
    }
}
