//! `Watch`: a monotonically increasing `u64` that threads publish and wait on.
//!
//! This is the one hand-off between the threads of the data path: a leader
//! publishes its high watermark and producers waiting with `acks=all` wait for
//! it to pass their offsets; appenders publish a data sequence number and
//! parked long-poll fetches wait for it to move. It is modelled with loom in
//! `tests/loom.rs`.
//!
//! Waking a parked thread on the other core costs about 20 µs on the machines
//! we measure on, while a short spin costs well under one: a waiter first
//! spins for a bounded time, then parks. A publisher takes the lock and
//! notifies only when somebody is parked.

use std::time::{Duration, Instant};

use crate::sync::{AtomicU64, Condvar, Mutex, Ordering};

/// How a wait on a [`Watch`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    /// The value reached the target; carries the value seen.
    Reached(u64),
    /// The watch was closed (for a high watermark: the replica stopped
    /// being leader) before the value reached the target.
    Closed,
    /// The deadline passed first.
    TimedOut,
}

/// A published, monotonically increasing value with blocking waits.
///
/// The value, a "closed" flag and a "somebody is parked" flag share one
/// atomic word, so that a publisher and a waiter about to park always
/// agree through read-modify-write operations on a single location (which
/// are totally ordered) instead of relying on store-load ordering between
/// two locations, which is easy to get wrong and which loom cannot check.
#[derive(Debug)]
pub struct Watch {
    /// `value << 2 | closed << 1 | parked`.
    word: AtomicU64,
    /// Threads spinning on this watch right now. Spinning pays only for a
    /// few waiters: with many (64 producers waiting for one high
    /// watermark) spinners steal the two cores from the threads they wait
    /// for, so beyond `SPINNERS_MAX` a waiter parks at once.
    spinners: AtomicU64,
    lock: Mutex<()>,
    changed: Condvar,
}

const PARKED: u64 = 0b01;
const CLOSED: u64 = 0b10;
const SHIFT: u32 = 2;
/// Largest value a watch holds (offsets and counters stay far below).
const VALUE_MAX: u64 = u64::MAX >> SHIFT;
/// At most this many threads spin on one watch at a time.
const SPINNERS_MAX: u64 = 2;

impl Watch {
    /// A watch starting at `value`, open.
    pub fn new(value: u64) -> Watch {
        Watch {
            word: AtomicU64::new(value.min(VALUE_MAX) << SHIFT),
            spinners: AtomicU64::new(0),
            lock: Mutex::new(()),
            changed: Condvar::new(),
        }
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.word.load(Ordering::SeqCst) >> SHIFT
    }

    /// Applies `f` to the word with a compare-exchange loop, clearing the
    /// parked flag, and wakes parked waiters if the flag was set. Returns
    /// the previous word.
    fn update(&self, f: impl Fn(u64) -> u64) -> u64 {
        let mut old = self.word.load(Ordering::SeqCst);
        loop {
            let new = f(old) & !PARKED;
            if new == old & !PARKED && old & PARKED == 0 {
                return old;
            }
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(actual) => old = actual,
            }
        }
        if old & PARKED != 0 {
            // The waiter that set PARKED holds the lock until it sleeps, so
            // taking the lock here means it is asleep and will get this.
            let _guard = self.lock.lock();
            self.changed.notify_all();
        }
        old
    }

    /// Raises the value to `value` (never lowers it) and wakes the waiters.
    /// Returns the value after the call.
    pub fn publish(&self, value: u64) -> u64 {
        let value = value.min(VALUE_MAX);
        let old = self.update(|w| {
            if (w >> SHIFT) < value {
                (value << SHIFT) | (w & CLOSED)
            } else {
                w
            }
        });
        (old >> SHIFT).max(value)
    }

    /// Adds one to the value (used as an event counter) and wakes waiters.
    pub fn bump(&self) {
        self.update(|w| w.wrapping_add(1 << SHIFT));
    }

    /// Sets the value, possibly lowering it, and reopens the watch. Used
    /// when a replica takes a new role: waiters from the old role were
    /// already released by [`close`](Self::close).
    pub fn reset(&self, value: u64) {
        let value = value.min(VALUE_MAX);
        self.update(|_| value << SHIFT);
    }

    /// Closes the watch: every current and future waiter gets `Closed`
    /// until [`reset`](Self::reset).
    pub fn close(&self) {
        self.update(|w| w | CLOSED);
    }

    /// Whether the watch is closed.
    pub fn is_closed(&self) -> bool {
        self.word.load(Ordering::SeqCst) & CLOSED != 0
    }

    fn outcome(word: u64, target: u64) -> Option<WaitOutcome> {
        let value = word >> SHIFT;
        if value >= target {
            return Some(WaitOutcome::Reached(value));
        }
        if word & CLOSED != 0 {
            return Some(WaitOutcome::Closed);
        }
        None
    }

    /// Waits until the value is at least `target`, the watch closes, or
    /// `deadline` passes. Spins for up to `spin` first.
    pub fn wait_at_least(&self, target: u64, deadline: Instant, spin: Duration) -> WaitOutcome {
        if let Some(outcome) = Self::outcome(self.word.load(Ordering::SeqCst), target) {
            return outcome;
        }
        let spinning =
            !spin.is_zero() && self.spinners.fetch_add(1, Ordering::SeqCst) < SPINNERS_MAX;
        if !spin.is_zero() && !spinning {
            self.spinners.fetch_sub(1, Ordering::SeqCst);
        }
        if spinning {
            let outcome = self.spin(target, deadline, spin);
            self.spinners.fetch_sub(1, Ordering::SeqCst);
            if let Some(outcome) = outcome {
                return outcome;
            }
        }
        self.park(target, deadline)
    }

    /// Spins up to `spin` (or `deadline`) for the value to reach `target`.
    fn spin(&self, target: u64, deadline: Instant, spin: Duration) -> Option<WaitOutcome> {
        let spin_until = Instant::now() + spin;
        let mut rounds = 0u32;
        loop {
            for _ in 0..64 {
                std::hint::spin_loop();
            }
            if let Some(outcome) = Self::outcome(self.word.load(Ordering::SeqCst), target) {
                return Some(outcome);
            }
            rounds += 1;
            // With two cores and more runnable threads than cores, a
            // spinner must let the thread it waits for run.
            if rounds % 8 == 0 {
                std::thread::yield_now();
            }
            if rounds % 16 == 0 && Instant::now() >= spin_until.min(deadline) {
                return None;
            }
        }
    }

    /// Sleeps until the value reaches `target`, the watch closes, or
    /// `deadline` passes.
    fn park(&self, target: u64, deadline: Instant) -> WaitOutcome {
        let mut guard = self.lock.lock();
        loop {
            // Announce the waiter and read the value in one atomic step: a
            // publisher either came before (and we see its value) or after
            // (and sees PARKED, so it notifies under the lock we hold until
            // we sleep).
            let word = self.word.fetch_or(PARKED, Ordering::SeqCst);
            if let Some(outcome) = Self::outcome(word, target) {
                return outcome;
            }
            if Instant::now() >= deadline {
                return WaitOutcome::TimedOut;
            }
            // A spurious or timed-out wake-up just re-checks.
            let _ = self.changed.wait_until(&mut guard, deadline);
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    const NO_SPIN: Duration = Duration::ZERO;

    #[test]
    fn wait_returns_at_once_when_already_reached() {
        let w = Watch::new(5);
        let far = Instant::now() + Duration::from_secs(5);
        assert_eq!(w.wait_at_least(5, far, NO_SPIN), WaitOutcome::Reached(5));
    }

    #[test]
    fn publish_never_lowers_the_value() {
        let w = Watch::new(5);
        assert_eq!(w.publish(3), 5);
        assert_eq!(w.get(), 5);
        assert_eq!(w.publish(9), 9);
    }

    #[test]
    fn a_parked_waiter_is_woken_by_publish_and_by_close() {
        for close in [false, true] {
            let w = Arc::new(Watch::new(0));
            let w2 = Arc::clone(&w);
            let waiter = thread::spawn(move || {
                w2.wait_at_least(10, Instant::now() + Duration::from_secs(10), NO_SPIN)
            });
            thread::sleep(Duration::from_millis(20));
            if close {
                w.close();
                assert_eq!(waiter.join().unwrap(), WaitOutcome::Closed);
            } else {
                w.publish(12);
                assert_eq!(waiter.join().unwrap(), WaitOutcome::Reached(12));
            }
        }
    }

    #[test]
    fn wait_times_out_at_its_deadline() {
        let w = Watch::new(0);
        let start = Instant::now();
        let outcome = w.wait_at_least(
            1,
            start + Duration::from_millis(30),
            Duration::from_micros(50),
        );
        assert_eq!(outcome, WaitOutcome::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn reset_reopens_a_closed_watch_at_a_lower_value() {
        let w = Watch::new(7);
        w.close();
        assert!(w.is_closed());
        w.reset(3);
        assert!(!w.is_closed());
        assert_eq!(w.get(), 3);
    }

    #[test]
    fn many_waiters_with_spin_are_all_released_by_one_publish() {
        let w = Arc::new(Watch::new(0));
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let w = Arc::clone(&w);
                thread::spawn(move || {
                    w.wait_at_least(
                        1,
                        Instant::now() + Duration::from_secs(10),
                        Duration::from_millis(5),
                    )
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(20));
        w.publish(1);
        for waiter in waiters {
            assert_eq!(waiter.join().unwrap(), WaitOutcome::Reached(1));
        }
        assert_eq!(w.spinners.load(Ordering::SeqCst), 0);
    }
}
