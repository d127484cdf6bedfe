//! `Combiner`: flat combining, the hand-off behind the leader's append
//! pipeline. Threads push work into a shared state under a short lock; one
//! of them at a time holds the writer *seat* and performs everything
//! pending (one `write` for many appends). A thread that finds the seat
//! taken leaves: the seat holder re-checks for pending work after giving
//! the seat up, so nothing pushed is ever stranded.
//!
//! It owns only the protocol (who writes, and that every push is written
//! exactly once, in push order); what is pushed and how it is written is
//! the caller's. Modelled with loom in `tests/loom.rs`.

use crate::sync::Mutex;

/// Shared state plus a writer seat; see the module docs.
#[derive(Debug)]
pub struct Combiner<S> {
    state: Mutex<S>,
    seat: Mutex<()>,
}

impl<S> Combiner<S> {
    /// A combiner around `state`.
    pub fn new(state: S) -> Combiner<S> {
        Combiner {
            state: Mutex::new(state),
            seat: Mutex::new(()),
        }
    }

    /// Runs `push` with the state locked (keep it short: reserve, copy).
    pub fn push<R>(&self, push: impl FnOnce(&mut S) -> R) -> R {
        push(&mut self.state.lock())
    }

    /// Reads the state.
    pub fn with_state<R>(&self, read: impl FnOnce(&S) -> R) -> R {
        read(&self.state.lock())
    }

    /// Performs what is pending with `write` (called with the state locked,
    /// holding the seat) unless another thread holds the seat; that thread
    /// then performs it. Call after every `push`.
    pub fn drain(&self, is_pending: impl Fn(&S) -> bool, write: &mut impl FnMut(&mut S)) {
        loop {
            let Some(seat) = self.seat.try_lock() else {
                return;
            };
            {
                let mut state = self.state.lock();
                if is_pending(&state) {
                    write(&mut state);
                }
            }
            drop(seat);
            // Whatever was pushed while we held the seat was left to us by
            // a thread that found it taken.
            if !is_pending(&self.state.lock()) {
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
        is_pending: impl Fn(&S) -> bool,
        write: &mut impl FnMut(&mut S),
        exclusive: impl FnOnce(&mut S) -> R,
    ) -> R {
        let result = {
            let _seat = self.seat.lock();
            let mut state = self.state.lock();
            if is_pending(&state) {
                write(&mut state);
            }
            exclusive(&mut state)
        };
        self.drain(is_pending, write);
        result
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Debug, Default)]
    struct Log {
        pending: Vec<u32>,
        written: Vec<u32>,
        writes: u32,
    }

    fn write(log: &mut Log) {
        let pending = std::mem::take(&mut log.pending);
        log.written.extend(pending);
        log.writes += 1;
    }

    #[test]
    fn every_push_is_written_once_in_push_order_under_contention() {
        let combiner = Arc::new(Combiner::new(Log::default()));
        let threads: Vec<_> = (0..8u32)
            .map(|t| {
                let combiner = Arc::clone(&combiner);
                std::thread::spawn(move || {
                    for i in 0..500 {
                        combiner.push(|log| log.pending.push(t * 1000 + i));
                        combiner.drain(|log| !log.pending.is_empty(), &mut write);
                        if i % 100 == 0 {
                            combiner.exclusive(
                                |log| !log.pending.is_empty(),
                                &mut write,
                                |log| log.written.push(u32::MAX),
                            );
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        combiner.with_state(|log| {
            assert!(log.pending.is_empty());
            let mut values: Vec<u32> = log
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
            assert!(log.writes <= 8 * 500 + 40);
        });
    }
}
