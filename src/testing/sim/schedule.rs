//! `Schedule`: the simulator's agenda, the events still to happen, ordered by
//! simulated time and, among events due at the same instant, by the order in
//! which they were scheduled.
//!
//! It owns only the ordering. What an event is and what happening means are
//! the simulator's; time is a [`Duration`] since the run began, so that no
//! real clock takes part.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Where one scheduled event stands in the queue: its due time (in
/// nanoseconds since the run began), its place among events due at the
/// same time, and the slot that holds the event itself. The heap moves
/// only these small keys; an event, which may carry a whole fetch answer,
/// stays in its slot until it is taken (a heap of whole events spent more
/// on moving them than on anything else it did).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    at_nanos: u64,
    /// Scheduling order: ties at `at_nanos` happen first in, first out, so
    /// that a run depends on nothing but its seed. Unique, so the slot
    /// never decides an order.
    sequence: u64,
    slot: u32,
}

/// Events to happen, earliest first; see the module docs.
///
/// Invariants: `now` never moves backwards, and no entry is due before it;
/// every key in `keys` names a filled slot of `slots`, and every other slot
/// is empty and listed in `free`.
#[derive(Debug)]
pub(crate) struct Schedule<E> {
    keys: BinaryHeap<Reverse<Key>>,
    slots: Vec<Option<E>>,
    free: Vec<u32>,
    now: Duration,
    scheduled: u64,
}

impl<E> Default for Schedule<E> {
    fn default() -> Self {
        Schedule {
            keys: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            now: Duration::ZERO,
            scheduled: 0,
        }
    }
}

/// `at` in whole nanoseconds, saturating (at 584 years of simulated time).
fn nanos(at: Duration) -> u64 {
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)
}

impl<E> Schedule<E> {
    /// Simulated time: that of the last event taken, zero before the first.
    pub(crate) fn now(&self) -> Duration {
        self.now
    }

    /// Schedules `event` to happen `after` from now.
    pub(crate) fn after(&mut self, after: Duration, event: E) {
        let at = self.now.saturating_add(after);
        self.at(at, event);
    }

    /// Schedules `event` to happen at `at`, or now if `at` has passed (an
    /// event cannot happen in the past).
    pub(crate) fn at(&mut self, at: Duration, event: E) {
        let at = at.max(self.now);
        let slot = match self.free.pop() {
            Some(slot) => {
                debug_assert!(self.slots[slot as usize].is_none(), "a free slot is empty");
                self.slots[slot as usize] = Some(event);
                slot
            }
            None => {
                let slot = u32::try_from(self.slots.len())
                    .expect("fewer than 2^32 events scheduled at once");
                self.slots.push(Some(event));
                slot
            }
        };
        self.keys.push(Reverse(Key {
            at_nanos: nanos(at),
            sequence: self.scheduled,
            slot,
        }));
        self.scheduled += 1;
    }

    /// Takes the next event and moves time to it, or `None` when nothing is
    /// scheduled.
    pub(crate) fn next(&mut self) -> Option<(Duration, E)> {
        let Reverse(key) = self.keys.pop()?;
        let at = Duration::from_nanos(key.at_nanos);
        debug_assert!(at >= self.now, "an event due before now");
        let event = self.slots[key.slot as usize]
            .take()
            .expect("a scheduled key names a filled slot");
        self.free.push(key.slot);
        self.now = at;
        Some((at, event))
    }

    /// When the next event is due, if any.
    pub(crate) fn next_due(&self) -> Option<Duration> {
        self.keys
            .peek()
            .map(|Reverse(key)| Duration::from_nanos(key.at_nanos))
    }

    /// Events scheduled and not yet taken.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether nothing is scheduled.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn events_happen_in_time_order_and_ties_in_scheduling_order() {
        let mut schedule = Schedule::default();
        schedule.after(3 * MS, "c");
        schedule.after(MS, "a1");
        schedule.after(2 * MS, "b");
        schedule.after(MS, "a2");
        assert_eq!(schedule.len(), 4);
        assert_eq!(schedule.next_due(), Some(MS));
        let order: Vec<_> = std::iter::from_fn(|| schedule.next()).collect();
        assert_eq!(
            order,
            [(MS, "a1"), (MS, "a2"), (2 * MS, "b"), (3 * MS, "c")]
        );
        assert_eq!(schedule.now(), 3 * MS);
        assert!(schedule.is_empty());
    }

    #[test]
    fn time_moves_with_the_events_taken_and_the_past_is_now() {
        let mut schedule = Schedule::default();
        schedule.after(5 * MS, 1);
        assert_eq!(schedule.next(), Some((5 * MS, 1)));
        // Relative to the new now.
        schedule.after(MS, 2);
        // Already past: happens now, after what is already due now.
        schedule.at(MS, 3);
        assert_eq!(schedule.next(), Some((5 * MS, 3)));
        assert_eq!(schedule.next(), Some((6 * MS, 2)));
        assert_eq!(schedule.next(), None);
        assert_eq!(schedule.now(), 6 * MS);
    }
}
