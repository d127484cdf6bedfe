//! `Combiner`: flat combining, the hand-off behind the leader's append
//! pipeline. Threads push work into a shared state under a short lock; one
//! of them at a time holds the writer *seat* and performs everything
//! pending (one `write` for many appends). A thread that finds the seat
//! taken leaves: the seat holder re-checks for pending work after giving
//! the seat up, so nothing pushed is ever stranded.
//!
//! A push may also be *deferred* ([`Combiner::push_deferred`]): the pusher
//! leaves without writing, and a thread that will need the data soon anyway
//! (on a leader, the next follower fetch) drains it, seeing it through
//! [`Combiner::has_deferred`]; only the first deferred push since the last
//! take must wake that thread ([`Deferral::First`]), the later ones are
//! taken with it. Many deferred pushes then share one write
//! even when they come one after another from one thread (an async
//! executor's worker running many appending tasks), which the seat alone
//! never combines. A seat holder's re-check after its write looks only for
//! work left to it: pushes that did not defer, and deferred ones whose
//! drainer ([`Combiner::drain_deferred`]) found the seat taken. Deferred
//! pushes made during the write otherwise wait for the next drainer,
//! instead of being written by the holder in a loop of small writes while
//! pushes keep coming (on a leader under load, the fetch that drained wrote
//! about three appends per write that way).
//!
//! It owns only the protocol (who writes, and that every push is written
//! exactly once, in push order); what is pushed and how it is written is
//! the caller's. Modelled with loom in `tests/loom.rs`.

use crate::sync::{AtomicBool, AtomicUsize, Mutex, Ordering};

/// The shared state of a [`Combiner`]: a queue that pushes fill and the
/// seat holder empties.
pub trait Combine {
    /// What one write takes out of the queue.
    type Taken;
    /// Takes everything pending, or `None` if nothing is.
    fn take(&mut self) -> Option<Self::Taken>;
    /// Whether anything is pending.
    fn is_pending(&self) -> bool;
}

/// How [`Combiner::push_deferred`] left a push.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferral {
    /// Not deferred: the caller drains, as after [`Combiner::push`].
    Drain,
    /// Deferred, with no other deferred push waiting: the caller must make
    /// sure a thread that drains learns of it (through
    /// [`Combiner::has_deferred`]) after `push_deferred` returns.
    First,
    /// Deferred behind a deferred push not taken yet: whoever learns of
    /// that one (the caller of its `First`) takes this one with it, since
    /// a take takes everything. The caller owes no wake-up.
    Behind,
}

impl Deferral {
    /// Whether the push was deferred (the caller does not drain).
    pub fn is_deferred(self) -> bool {
        self != Deferral::Drain
    }
}

/// Shared state plus a writer seat; see the module docs.
#[derive(Debug)]
pub struct Combiner<S> {
    state: Mutex<S>,
    seat: Mutex<()>,
    /// Whether deferred pushes not taken yet wait. Changed only under
    /// `state`'s lock (set by the first `push_deferred` after a take,
    /// cleared by every take, which takes everything), read without it.
    /// Set once per take rather than counted per push: the later pushes
    /// only read it, so the line stays shared with the fetch threads that
    /// read it too (a read-modify-write per pipelined append was 2% of
    /// the samples of 256 async clients appending 100 B records).
    deferred: AtomicBool,
    /// Callers since the last take that count on the seat holder's
    /// re-check should they find the seat taken: pushes that did not
    /// defer, and drains of deferred pushes. Raised under `state`'s lock
    /// before the caller tries the seat, zeroed by every take, read by the
    /// holder under the lock after it let the seat go.
    left_to_holder: AtomicUsize,
}

impl<S: Combine> Combiner<S> {
    /// A combiner around `state`.
    pub fn new(state: S) -> Combiner<S> {
        Combiner {
            state: Mutex::new(state),
            seat: Mutex::new(()),
            deferred: AtomicBool::new(false),
            left_to_holder: AtomicUsize::new(0),
        }
    }

    /// Runs `push` with the state locked, as [`push`](Self::push); when it
    /// answers `true` (it defers), marks it as deferred: the caller will
    /// not drain, and, if it is the first deferred push since the last
    /// take ([`Deferral::First`]), must make sure a thread that drains
    /// learns of it (through [`has_deferred`](Self::has_deferred)) after
    /// this returns. When it answers `false` the caller drains as after
    /// `push`.
    pub fn push_deferred<R>(&self, push: impl FnOnce(&mut S) -> (R, bool)) -> (R, Deferral) {
        let mut state = self.state.lock();
        let (result, deferred) = push(&mut state);
        if !deferred {
            self.left_to_holder.fetch_add(1, Ordering::SeqCst);
            return (result, Deferral::Drain);
        }
        if self.deferred.load(Ordering::SeqCst) {
            return (result, Deferral::Behind);
        }
        self.deferred.store(true, Ordering::SeqCst);
        (result, Deferral::First)
    }

    /// Whether a deferred push waits for a drain (read without the lock: a
    /// push deferred before this call, by this thread or by one whose
    /// signal this thread received, is seen).
    pub fn has_deferred(&self) -> bool {
        self.deferred.load(Ordering::SeqCst)
    }

    /// Takes what is pending, under the state's lock.
    fn take_locked(&self, state: &mut S) -> Option<S::Taken> {
        let taken = state.take();
        if taken.is_some() {
            // A take takes everything: no push is left behind.
            self.deferred.store(false, Ordering::SeqCst);
            self.left_to_holder.store(0, Ordering::SeqCst);
        }
        taken
    }

    /// Runs `push` with the state locked (keep it short: reserve, copy).
    pub fn push<R>(&self, push: impl FnOnce(&mut S) -> R) -> R {
        let mut state = self.state.lock();
        self.left_to_holder.fetch_add(1, Ordering::SeqCst);
        push(&mut state)
    }

    /// Reads the state.
    pub fn with_state<R>(&self, read: impl FnOnce(&S) -> R) -> R {
        read(&self.state.lock())
    }

    /// Writes the deferred pushes, if any, as [`drain`](Self::drain)
    /// does; should the seat be taken, its holder writes them after its
    /// write. For a thread that must see them in the log once the holder
    /// is done (a fetch, which then reads).
    pub fn drain_deferred(&self, write: &mut impl FnMut(S::Taken)) {
        if !self.has_deferred() {
            return;
        }
        {
            let _state = self.state.lock();
            if !self.deferred.load(Ordering::SeqCst) {
                return;
            }
            self.left_to_holder.fetch_add(1, Ordering::SeqCst);
        }
        self.drain(write);
    }

    /// Takes what is pending and performs it with `write` (holding the
    /// seat, but not the state's lock: pushes go on meanwhile) unless
    /// another thread holds the seat; that thread then performs it. Call
    /// after every `push`. Deferred pushes made during the write are left
    /// for the next drainer, unless work left to the holder comes with
    /// them (see the module docs).
    pub fn drain(&self, write: &mut impl FnMut(S::Taken)) {
        self.drain_gathering(|| (), write);
    }

    /// [`drain`](Self::drain), calling `gather` after taking the seat and
    /// before taking what is pending: a seat holder that expects more
    /// pushes soon can wait for them there (they find the seat taken and
    /// leave their work to it), so that one write carries more.
    pub fn drain_gathering(&self, gather: impl Fn(), write: &mut impl FnMut(S::Taken)) {
        loop {
            let Some(seat) = self.seat.try_lock() else {
                return;
            };
            gather();
            let taken = self.take_locked(&mut self.state.lock());
            if let Some(taken) = taken {
                write(taken);
            }
            drop(seat);
            // Work left to us by a thread that found the seat taken: its
            // count was raised under the state's lock before that thread
            // tried the seat, so this lock, taken after the seat was let
            // go, sees it (or that thread's try comes after, and succeeds
            // unless another holder, who checks in turn, took the seat).
            // Deferred pushes alone wait for the next drainer, who learns
            // of them through `has_deferred`.
            let state = self.state.lock();
            if !state.is_pending() || self.left_to_holder.load(Ordering::SeqCst) == 0 {
                return;
            }
        }
    }

    /// Takes the seat (waiting for it), performs what is pending, runs
    /// `exclusive` with the state locked, then drains what was pushed
    /// meanwhile. For work that must be ordered after everything pushed
    /// before it and before everything pushed after it.
    pub fn exclusive<R>(
        &self,
        write: &mut impl FnMut(S::Taken),
        exclusive: impl FnOnce(&mut S) -> R,
    ) -> R {
        let result = {
            let _seat = self.seat.lock();
            let taken = self.take_locked(&mut self.state.lock());
            if let Some(taken) = taken {
                write(taken);
            }
            // What was pushed during that write is written with the lock
            // held, so nothing queued can be left between it and
            // `exclusive`.
            let mut state = self.state.lock();
            if let Some(taken) = self.take_locked(&mut state) {
                write(taken);
            }
            exclusive(&mut state)
        };
        self.drain(write);
        result
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Debug, Default)]
    struct Queue {
        /// (reservation number, value), as a log reserves offsets.
        pending: Vec<(u32, u32)>,
        reserved: u32,
    }

    impl Combine for Queue {
        type Taken = Vec<(u32, u32)>;
        fn take(&mut self) -> Option<Vec<(u32, u32)>> {
            (!self.pending.is_empty()).then(|| std::mem::take(&mut self.pending))
        }
        fn is_pending(&self) -> bool {
            !self.pending.is_empty()
        }
    }

    /// What the "log" received, in order, and in how many writes.
    #[derive(Debug, Default)]
    struct Sink {
        written: Vec<u32>,
        /// Reservation numbers in the order they were written.
        reservations: Vec<u32>,
        writes: u32,
    }

    /// Deferred pushes are counted until a take, by any drain, takes them:
    /// a drainer that checks `has_deferred` writes them all with one
    /// write, and a push that does not defer is not counted.
    #[test]
    fn deferred_pushes_wait_for_a_drain_and_share_its_write() {
        let combiner = Combiner::new(Queue::default());
        let mut writes = Vec::new();
        for value in 0..3u32 {
            let ((), deferred) = combiner.push_deferred(|queue| {
                queue.pending.push((value, value));
                ((), true)
            });
            let first = if value == 0 {
                Deferral::First
            } else {
                Deferral::Behind
            };
            assert_eq!(deferred, first, "only the first owes a wake-up");
        }
        assert!(combiner.has_deferred());
        let ((), deferred) = combiner.push_deferred(|queue| {
            queue.pending.push((3, 3));
            ((), false)
        });
        assert_eq!(deferred, Deferral::Drain);
        combiner.drain(&mut |taken| writes.push(taken));
        assert!(!combiner.has_deferred());
        assert_eq!(writes, vec![vec![(0, 0), (1, 1), (2, 2), (3, 3)]]);
        // An exclusive section's take counts too.
        let ((), deferred) = combiner.push_deferred(|queue| {
            queue.pending.push((4, 4));
            ((), true)
        });
        assert_eq!(deferred, Deferral::First, "first since the take");
        combiner.exclusive(&mut |taken| writes.push(taken), |_| ());
        assert!(!combiner.has_deferred());
        assert_eq!(writes.len(), 2);
    }

    /// Issue 27, the tiny-write loop: a seat holder used to re-check for
    /// anything pending after its write, so deferred pushes made during
    /// each write (an executor's tasks appending while a fetch wrote) were
    /// written by the holder one small write after another. They now wait
    /// for the next drainer; a drainer of deferred pushes that finds the
    /// seat taken leaves them to the holder, who writes them after its
    /// write, as it does pushes that did not defer.
    #[test]
    fn deferred_pushes_during_a_write_wait_for_a_drainer_unless_one_left_them_to_the_holder() {
        for drainer_found_the_seat_taken in [false, true] {
            let combiner = Combiner::new(Queue::default());
            let mut writes: Vec<Vec<(u32, u32)>> = Vec::new();
            combiner.push(|queue| queue.pending.push((0, 0)));
            combiner.drain(&mut |taken| {
                writes.push(taken);
                if writes.len() > 1 {
                    return;
                }
                // During the first write: a deferred push, and perhaps a
                // fetch draining deferred pushes (the seat is ours).
                let ((), deferred) = combiner.push_deferred(|queue| {
                    queue.pending.push((1, 1));
                    ((), true)
                });
                assert_eq!(deferred, Deferral::First);
                if drainer_found_the_seat_taken {
                    combiner.drain_deferred(&mut |_| panic!("the seat is taken"));
                }
            });
            if drainer_found_the_seat_taken {
                assert_eq!(writes, vec![vec![(0, 0)], vec![(1, 1)]]);
                assert!(!combiner.has_deferred());
            } else {
                assert_eq!(writes, vec![vec![(0, 0)]]);
                assert!(combiner.has_deferred(), "the deferred push waits");
                combiner.drain_deferred(&mut |taken| writes.push(taken));
                assert_eq!(writes, vec![vec![(0, 0)], vec![(1, 1)]]);
            }
            assert!(combiner.with_state(|queue| queue.pending.is_empty()));
        }
    }

    #[test]
    fn every_push_is_written_once_in_push_order_under_contention() {
        let combiner = Arc::new(Combiner::new(Queue::default()));
        let sink = Arc::new(Mutex::new(Sink::default()));
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let combiner = Arc::clone(&combiner);
                let sink = Arc::clone(&sink);
                std::thread::spawn(move || {
                    let mut write = |taken: Vec<(u32, u32)>| {
                        let mut sink = sink.lock();
                        for (reservation, value) in taken {
                            sink.reservations.push(reservation);
                            sink.written.push(value);
                        }
                        sink.writes += 1;
                    };
                    for i in 0..500 {
                        combiner.push(|queue| {
                            let reservation = queue.reserved;
                            queue.reserved += 1;
                            queue.pending.push((reservation, t * 1000 + i));
                        });
                        combiner.drain(&mut write);
                        if i % 100 == 0 {
                            combiner.exclusive(&mut write, |queue| {
                                assert!(
                                    queue.pending.is_empty(),
                                    "exclusive ran with pushes pending"
                                );
                                sink.lock().written.push(u32::MAX);
                            });
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(combiner.with_state(|queue| queue.pending.is_empty()));
        let sink = sink.lock();
        let mut values: Vec<u32> = sink
            .written
            .iter()
            .copied()
            .filter(|v| *v != u32::MAX)
            .collect();
        assert_eq!(values.len(), 8 * 500);
        // Each thread's own pushes stay in its order.
        for t in 0..8u32 {
            let mine: Vec<u32> = values.iter().copied().filter(|v| v / 1000 == t).collect();
            assert!(mine.windows(2).all(|w| w[0] < w[1]));
        }
        values.sort_unstable();
        values.dedup();
        assert_eq!(values.len(), 8 * 500, "a push was written twice");
        assert!(sink.writes <= 8 * 500 + 40);
        // Across threads too, writes follow reservations exactly (as a log's
        // offsets must).
        let in_order: Vec<u32> = (0..8 * 500).collect();
        assert_eq!(
            sink.reservations, in_order,
            "written out of reservation order"
        );
    }
}
