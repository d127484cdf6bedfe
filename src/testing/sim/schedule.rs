//! `Schedule`: the simulator's agenda, the events still to happen, ordered by
//! simulated time and, among events due at the same instant, by the order in
//! which they were scheduled.
//!
//! It owns only the ordering. What an event is and what happening means are
//! the simulator's; time is a [`Duration`] since the run began, so that no
//! real clock takes part.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::time::Duration;

/// One scheduled event with its due time and its place among events due at
/// the same time.
#[derive(Debug)]
struct Entry<E> {
    at: Duration,
    /// Scheduling order: ties at `at` happen first in, first out, so that a
    /// run depends on nothing but its seed.
    sequence: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.sequence) == (other.at, other.sequence)
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.sequence).cmp(&(other.at, other.sequence))
    }
}

/// Events to happen, earliest first; see the module docs.
///
/// Invariant: `now` never moves backwards, and no entry is due before it.
#[derive(Debug)]
pub(crate) struct Schedule<E> {
    entries: BinaryHeap<Reverse<Entry<E>>>,
    now: Duration,
    scheduled: u64,
}

impl<E> Default for Schedule<E> {
    fn default() -> Self {
        Schedule {
            entries: BinaryHeap::new(),
            now: Duration::ZERO,
            scheduled: 0,
        }
    }
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
        self.entries.push(Reverse(Entry {
            at,
            sequence: self.scheduled,
            event,
        }));
        self.scheduled += 1;
    }

    /// Takes the next event and moves time to it, or `None` when nothing is
    /// scheduled.
    pub(crate) fn next(&mut self) -> Option<(Duration, E)> {
        let Reverse(entry) = self.entries.pop()?;
        debug_assert!(entry.at >= self.now, "an event due before now");
        self.now = entry.at;
        Some((entry.at, entry.event))
    }

    /// When the next event is due, if any.
    pub(crate) fn next_due(&self) -> Option<Duration> {
        self.entries.peek().map(|Reverse(entry)| entry.at)
    }

    /// Events scheduled and not yet taken.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is scheduled.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
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
