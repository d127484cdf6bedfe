//! `Watch`: a `u64` that threads publish (raise) and wait on; only `reset`
//! lowers it.
//!
//! This is the one hand-off between the threads of the data path: a leader
//! publishes its high watermark and producers waiting with `acks=all` wait for
//! it to pass their offsets; appenders publish a data sequence number and
//! parked long-poll fetches wait for it to move. It is modelled with loom in
//! `tests/loom.rs`.
//!
//! Waking a parked thread on the other core costs about 20 µs on the machines
//! we measure on, while a short spin costs well under one: a waiter first
//! spins for a bounded time, then parks. A publisher takes the lock only
//! when somebody is parked, and then wakes exactly the waiters whose target
//! it reached, each directly: with 64 producers waiting for one high
//! watermark, a condition variable's `notify_all` would hand the lock from
//! one woken thread to the next (64 wake-ups in a row, one at a time), and
//! would also wake the waiters whose offsets are not committed yet.

use std::time::{Duration, Instant};

use crate::sync::thread::{self, Thread};
use crate::sync::{Arc, AtomicU64, Mutex, Ordering};

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

/// A published value with blocking waits: `publish` and `bump` only raise
/// it, `reset` may lower it.
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
    /// How many parked waiters the latest release that released any let
    /// go at once: a hint of how many threads wait on this watch together.
    /// Above `SPINNERS_MAX` waiters do not spin (see `wait_at_least`). It
    /// only steers spinning, never who is woken: a stale value costs at
    /// most one park or one spin, after which the next release sets it.
    crowd: AtomicU64,
    /// The parked waiters.
    ///
    /// Invariant: while this list is not empty, the word's `PARKED` bit is
    /// set or a publisher holding this lock is about to set it again, so
    /// every change of the value reaches the list.
    parked: Mutex<Vec<Parked>>,
    /// Released waiters not unparked yet: a publisher unparks a few itself
    /// and leaves the rest here; every released waiter, once running,
    /// unparks a few more (a wake-up tree). Unparking costs a system call
    /// and an inter-processor interrupt each; 64 in a row on the
    /// publisher's thread (a follower's fetch) would stall replication
    /// for a few hundred microseconds while the other core idles.
    to_wake: Mutex<Vec<Arc<Slot>>>,
    /// Length of `to_wake`, read without its lock.
    ///
    /// Invariant: equals `to_wake.len()` whenever the `to_wake` lock is
    /// free; inside it, a publisher raises it *before* queueing (see
    /// `release_parked`).
    to_wake_count: AtomicU64,
}

/// One parked waiter: what it waits for and where its outcome goes.
#[derive(Debug)]
struct Parked {
    target: u64,
    slot: Arc<Slot>,
}

/// A parked waiter's mailbox: the publisher that releases it writes the
/// outcome, then unparks its thread.
#[derive(Debug)]
struct Slot {
    /// `PENDING`, or an outcome encoded by [`encode`].
    outcome: AtomicU64,
    thread: Thread,
}

const PARKED: u64 = 0b01;
const CLOSED: u64 = 0b10;
const SHIFT: u32 = 2;
/// Largest value a watch holds (offsets and counters stay far below).
const VALUE_MAX: u64 = u64::MAX >> SHIFT;
/// At most this many threads spin on one watch at a time.
const SPINNERS_MAX: u64 = 2;
/// Waiters a thread unparks directly when it releases many (the rest are
/// unparked by the released ones, see `Watch::to_wake`).
const WAKE_FANOUT: usize = 2;
/// A slot nobody has released yet.
const PENDING: u64 = 0;

/// Encodes a `Reached` or `Closed` outcome for a [`Slot`] (never `PENDING`).
fn encode(outcome: WaitOutcome) -> u64 {
    match outcome {
        WaitOutcome::Reached(value) => (value << SHIFT) | 0b01,
        WaitOutcome::Closed => 0b10,
        WaitOutcome::TimedOut => 0b11,
    }
}

fn decode(code: u64) -> WaitOutcome {
    match code & 0b11 {
        0b01 => WaitOutcome::Reached(code >> SHIFT),
        0b10 => WaitOutcome::Closed,
        _ => WaitOutcome::TimedOut,
    }
}

impl Watch {
    /// A watch starting at `value`, open.
    pub fn new(value: u64) -> Watch {
        Watch {
            word: AtomicU64::new(value.min(VALUE_MAX) << SHIFT),
            spinners: AtomicU64::new(0),
            crowd: AtomicU64::new(0),
            parked: Mutex::new(Vec::new()),
            to_wake: Mutex::new(Vec::new()),
            to_wake_count: AtomicU64::new(0),
        }
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.word.load(Ordering::SeqCst) >> SHIFT
    }

    /// Applies `f` to the word with a compare-exchange loop, clearing the
    /// parked flag, and releases the parked waiters the new word satisfies
    /// if the flag was set. Returns the previous word.
    fn update(&self, f: impl Fn(u64) -> u64) -> u64 {
        let mut old = self.word.load(Ordering::SeqCst);
        loop {
            let new = f(old) & !PARKED;
            if new == old & !PARKED {
                // Nothing changes for any waiter: no wake-up is owed.
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
            self.release_parked();
        }
        old
    }

    /// Releases every parked waiter the current word satisfies, and sets
    /// `PARKED` again for those left. Called by a publisher that cleared
    /// `PARKED`.
    ///
    /// The released slots go to `to_wake` in one step that a released
    /// waiter cannot get ahead of: `to_wake_count` is raised first, then the
    /// outcomes are written, then the slots queued, all under the
    /// `to_wake` lock. A waiter that sees its outcome therefore also sees
    /// a count above zero and takes that lock, so it pops only once every
    /// slot is queued: even a waiter that returns without being unparked
    /// (it had not gone to sleep yet, or its deadline came) passes the
    /// wake-up on. (An earlier version queued the slots after writing the
    /// outcomes; two released waiters that returned early left the rest
    /// asleep. Loom found it at preemption bound 5.)
    fn release_parked(&self) {
        let mut released: Vec<(Arc<Slot>, WaitOutcome)> = Vec::new();
        let mut parked = self.parked.lock();
        let mut word = self.word.load(Ordering::SeqCst);
        loop {
            let value = word >> SHIFT;
            let closed = word & CLOSED != 0;
            parked.retain(|waiter| {
                let outcome = if value >= waiter.target {
                    WaitOutcome::Reached(value)
                } else if closed {
                    WaitOutcome::Closed
                } else {
                    return true;
                };
                released.push((Arc::clone(&waiter.slot), outcome));
                false
            });
            if parked.is_empty() {
                break;
            }
            // Waiters remain: announce them again. A change that landed
            // between our read of the word and this flag did not see the
            // flag, so it is ours to apply: scan again.
            let before = self.word.fetch_or(PARKED, Ordering::SeqCst);
            if before & !PARKED == word & !PARKED {
                break;
            }
            word = before;
        }
        if released.is_empty() {
            return;
        }
        self.crowd.store(released.len() as u64, Ordering::Relaxed);
        {
            // Still under the parked lock: a waiter at its deadline checks
            // its outcome under that lock, and finds it written or finds
            // itself still listed (it is not: it was released) — never
            // neither.
            let mut to_wake = self.to_wake.lock();
            self.to_wake_count
                .fetch_add(released.len() as u64, Ordering::SeqCst);
            for (slot, outcome) in &released {
                slot.outcome.store(encode(*outcome), Ordering::SeqCst);
            }
            to_wake.extend(released.into_iter().map(|(slot, _)| slot));
            debug_assert_eq!(
                self.to_wake_count.load(Ordering::SeqCst),
                to_wake.len() as u64
            );
        }
        drop(parked);
        // Unpark outside the locks (a released thread runs without waiting
        // for them), and only a few ourselves: the released ones pass the
        // wake-up on.
        self.wake_more();
    }

    /// Unparks up to `WAKE_FANOUT` released waiters queued in `to_wake`.
    /// Every released waiter calls this once it has seen its outcome, so
    /// each unparked one unparks more, until the queue is empty.
    fn wake_more(&self) {
        if self.to_wake_count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut batch = Vec::with_capacity(WAKE_FANOUT);
        {
            let mut to_wake = self.to_wake.lock();
            debug_assert_eq!(
                self.to_wake_count.load(Ordering::SeqCst),
                to_wake.len() as u64
            );
            while batch.len() < WAKE_FANOUT {
                match to_wake.pop() {
                    Some(slot) => batch.push(slot),
                    None => break,
                }
            }
            self.to_wake_count
                .store(to_wake.len() as u64, Ordering::SeqCst);
        }
        for slot in batch {
            slot.thread.unpark();
        }
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
    /// when a replica takes a new role (after [`close`](Self::close)
    /// released the old role's parked waiters) and when a follower's high
    /// watermark falls. A waiter that read the value before a `close` and
    /// waits only after the `reset` is not released by the `close`: callers
    /// re-validate what they wait for (a replica's generation) when their
    /// wait ends.
    pub fn reset(&self, value: u64) {
        let value = value.min(VALUE_MAX);
        self.update(|_| value << SHIFT);
    }

    /// Closes the watch: every current and future waiter gets `Closed`
    /// until [`reset`](Self::reset).
    pub fn close(&self) {
        self.update(|w| w | CLOSED);
    }

    /// Whether any thread is waiting on this watch (spinning or parked);
    /// may err towards yes for a moment after the last waiter left.
    pub fn has_waiters(&self) -> bool {
        self.word.load(Ordering::SeqCst) & PARKED != 0 || self.spinners.load(Ordering::SeqCst) > 0
    }

    /// Whether more threads waited on this watch together, last time
    /// several were parked, than may spin at once.
    pub fn is_crowded(&self) -> bool {
        self.crowd.load(Ordering::Relaxed) > SPINNERS_MAX
    }

    /// Whether the watch is closed.
    #[cfg(any(test, feature = "testing"))]
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
    ///
    /// Panics inside a deterministic simulation unless the value is
    /// already there: a wait would stop the thread that steps every node.
    #[track_caller]
    pub fn wait_at_least(&self, target: u64, deadline: Instant, spin: Duration) -> WaitOutcome {
        let word = self.word.load(Ordering::SeqCst);
        if let Some(outcome) = Self::outcome(word, target) {
            return outcome;
        }
        crate::simulation::forbid_in_simulation("a watch wait");
        // Others already parked, or many were released together last time:
        // the wait is long or the cores are busy (64 producers waiting for
        // one high watermark); a spin would only take a core from the
        // threads that move the value. (Right after a release none is
        // parked, yet the released crowd is about to wait again: without
        // the crowd hint the first `SPINNERS_MAX` of it spin every round,
        // each yield a context switch among dozens of runnable threads.)
        let spin = if word & PARKED != 0 || self.is_crowded() {
            Duration::ZERO
        } else {
            spin
        };
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
    ///
    /// The spin is a `yield` loop, not a busy loop: on two cores the
    /// threads this waiter depends on (the follower fetchers, the producer
    /// that appends next) are often runnable on its own core, and a yield
    /// hands them the core at once while costing well under a microsecond
    /// when nothing else wants it. Measured on the single-producer
    /// `acks=all` path: p50 15-17 µs with a yield per check against
    /// 47-58 µs with 64 pause instructions per check and a yield every
    /// eighth.
    fn spin(&self, target: u64, deadline: Instant, spin: Duration) -> Option<WaitOutcome> {
        let spin_until = Instant::now() + spin;
        let mut rounds = 0u32;
        loop {
            std::thread::yield_now();
            if let Some(outcome) = Self::outcome(self.word.load(Ordering::SeqCst), target) {
                return Some(outcome);
            }
            rounds += 1;
            if rounds.is_multiple_of(16) && Instant::now() >= spin_until.min(deadline) {
                return None;
            }
        }
    }

    /// Sleeps until the value reaches `target`, the watch closes, or
    /// `deadline` passes.
    ///
    /// Reads the clock once before it parks and once after each wake-up
    /// that did not release it (each read serves both the deadline check
    /// and the next park's timeout), none after the wake-up that releases
    /// it: on a path where 64 threads park for every append, each clock
    /// read costs about 1% of all samples.
    fn park(&self, target: u64, deadline: Instant) -> WaitOutcome {
        let mut now = Instant::now();
        if now >= deadline {
            return WaitOutcome::TimedOut;
        }
        let slot = Arc::new(Slot {
            outcome: AtomicU64::new(PENDING),
            thread: thread::current(),
        });
        {
            let mut parked = self.parked.lock();
            // Announce the waiter and read the value in one atomic step,
            // holding the list's lock: a publisher either came before (and
            // we see its value) or after (and sees PARKED, so it scans the
            // list, which it can lock only once we are in it).
            let word = self.word.fetch_or(PARKED, Ordering::SeqCst);
            if let Some(outcome) = Self::outcome(word, target) {
                // PARKED may stay set with nobody parked: the next publisher
                // scans an empty list once, which clears it.
                return outcome;
            }
            parked.push(Parked {
                target,
                slot: Arc::clone(&slot),
            });
        }
        loop {
            if let Some(outcome) = self.released(&slot) {
                return outcome;
            }
            if now >= deadline {
                let mut parked = self.parked.lock();
                // Released meanwhile? Its publisher wrote the outcome under
                // this lock, before taking the slot out of the list.
                let code = slot.outcome.load(Ordering::SeqCst);
                if code != PENDING {
                    drop(parked);
                    self.wake_more();
                    return decode(code);
                }
                parked.retain(|waiter| !Arc::ptr_eq(&waiter.slot, &slot));
                // A publisher may have changed the word and not yet taken
                // the lock to release us.
                return Self::outcome(self.word.load(Ordering::SeqCst), target)
                    .unwrap_or(WaitOutcome::TimedOut);
            }
            // A spurious wake-up (or an unpark meant for an earlier wait of
            // this thread) just re-checks.
            thread::park_for(deadline - now);
            if let Some(outcome) = self.released(&slot) {
                return outcome;
            }
            now = Instant::now();
        }
    }

    /// The outcome a publisher wrote to `slot`, if one did; then passes
    /// the wake-up on (before the waiter runs its own work).
    fn released(&self, slot: &Slot) -> Option<WaitOutcome> {
        let code = slot.outcome.load(Ordering::SeqCst);
        if code == PENDING {
            return None;
        }
        self.wake_more();
        Some(decode(code))
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

    #[test]
    fn a_publish_releases_exactly_the_waiters_whose_target_it_reached() {
        let w = Arc::new(Watch::new(0));
        let far = Instant::now() + Duration::from_secs(10);
        let waiters: Vec<_> = [3u64, 5, 10]
            .into_iter()
            .map(|target| {
                let w = Arc::clone(&w);
                (
                    target,
                    thread::spawn(move || w.wait_at_least(target, far, NO_SPIN)),
                )
            })
            .collect();
        while w.parked.lock().len() < 3 {
            thread::yield_now();
        }
        w.publish(5);
        let mut still_parked = Vec::new();
        for (target, waiter) in waiters {
            if target <= 5 {
                assert_eq!(waiter.join().unwrap(), WaitOutcome::Reached(5));
            } else {
                still_parked.push(waiter);
            }
        }
        let targets: Vec<u64> = w.parked.lock().iter().map(|p| p.target).collect();
        assert_eq!(
            targets,
            vec![10],
            "only the unsatisfied waiter stays parked"
        );
        assert_ne!(w.word.load(Ordering::SeqCst) & PARKED, 0);
        w.close();
        assert_eq!(
            still_parked.pop().unwrap().join().unwrap(),
            WaitOutcome::Closed
        );
        assert!(w.parked.lock().is_empty());
    }

    #[test]
    fn a_timed_out_waiter_leaves_the_parked_list() {
        let w = Watch::new(0);
        let outcome = w.wait_at_least(1, Instant::now() + Duration::from_millis(5), NO_SPIN);
        assert_eq!(outcome, WaitOutcome::TimedOut);
        assert!(w.parked.lock().is_empty());
    }

    #[test]
    fn no_waiter_misses_its_publish_under_contention() {
        // 16 waiters park and wake repeatedly while two publishers race;
        // a lost wake-up would hang a waiter until its (long) deadline.
        let w = Arc::new(Watch::new(0));
        let rounds = 2_000u64;
        let waiters: Vec<_> = (0..16u64)
            .map(|i| {
                let w = Arc::clone(&w);
                thread::spawn(move || {
                    let mut target = i % 7 + 1;
                    while target <= rounds {
                        let started = Instant::now();
                        match w.wait_at_least(target, started + Duration::from_secs(20), NO_SPIN) {
                            WaitOutcome::Reached(v) => assert!(v >= target),
                            other => panic!("waiter {i} got {other:?} for {target}"),
                        }
                        assert!(started.elapsed() < Duration::from_secs(10), "lost wake-up");
                        target += 7;
                    }
                })
            })
            .collect();
        let publishers: Vec<_> = (0..2u64)
            .map(|p| {
                let w = Arc::clone(&w);
                thread::spawn(move || {
                    for v in 1..=rounds {
                        if v % 2 == p {
                            w.publish(v);
                        }
                        if v % 64 == 0 {
                            thread::yield_now();
                        }
                    }
                    w.publish(rounds);
                })
            })
            .collect();
        for publisher in publishers {
            publisher.join().unwrap();
        }
        for waiter in waiters {
            waiter.join().unwrap();
        }
    }

    #[test]
    fn waiters_that_time_out_while_released_never_strand_the_others() {
        // Half the waiters use deadlines so short that they often expire
        // just as a publish releases them (they return without being
        // unparked); the others must still be woken at once, not at their
        // own (long) deadline.
        let w = Arc::new(Watch::new(0));
        let rounds = 300u64;
        let waiters: Vec<_> = (0..12u64)
            .map(|i| {
                let w = Arc::clone(&w);
                thread::spawn(move || {
                    for target in 1..=rounds {
                        if i % 2 == 0 {
                            // Released or timed out, both by design; never closed.
                            let outcome = w.wait_at_least(
                                target,
                                Instant::now() + Duration::from_micros(50 + i * 10),
                                NO_SPIN,
                            );
                            assert!(
                                matches!(
                                    outcome,
                                    WaitOutcome::Reached(v) if v >= target
                                ) || outcome == WaitOutcome::TimedOut,
                                "waiter {i} at {target}: {outcome:?}"
                            );
                        } else {
                            let started = Instant::now();
                            let outcome =
                                w.wait_at_least(target, started + Duration::from_secs(20), NO_SPIN);
                            assert!(
                                matches!(outcome, WaitOutcome::Reached(v) if v >= target),
                                "waiter {i} at {target}: {outcome:?}"
                            );
                            assert!(
                                started.elapsed() < Duration::from_secs(5),
                                "waiter {i} stranded at {target}"
                            );
                        }
                    }
                })
            })
            .collect();
        for value in 1..=rounds {
            thread::sleep(Duration::from_micros(100));
            w.publish(value);
        }
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert!(w.parked.lock().is_empty());
    }
}
