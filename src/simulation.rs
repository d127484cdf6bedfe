//! The simulation guard: what a deterministic simulator (issue 28) sets on
//! its thread so that the node code it drives cannot leave simulated time or
//! draw randomness the seed does not fix.
//!
//! This module owns a per-thread "simulating" flag, the seeded id source of
//! the simulation running on the thread, the check that every blocking
//! primitive and every thread spawn on the node's path calls first, and
//! the note node code leaves of a `Corrupt` error it handled itself (see
//! [`note_handled_error`]), for the simulator's checks. It does
//! not own simulated time (that is a [`ManualClock`](crate::ManualClock)),
//! the simulated network or disk, nor the simulator itself.
//!
//! Why a check and not a different code path: inside a simulation one
//! thread steps every node, so a node that parks, sleeps or waits on a
//! condition variable would stop the whole run (or let real time into it),
//! and a thread it spawns would run outside the simulator's schedule. Such
//! a call is a bug in the step being driven, and the check turns it into a
//! panic that names the call site instead of a hang or a run that does not
//! replay. Outside a simulation the check costs one thread-local read.

// Without the `testing` feature nothing enters a simulation: the guard is
// public only through `isrlog::testing`.
#![cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]

use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::panic::Location;

use crate::error::Error;
use crate::rng::{mix64, SplitMix64};

thread_local! {
    /// Set while a [`SimulationGuard`] lives on this thread. A `const`
    /// initialiser keeps the read free of lazy-initialisation checks: the
    /// append path pays one thread-local load.
    static SIMULATING: Cell<bool> = const { Cell::new(false) };

    /// The seeded source of random ids of the simulation on this thread,
    /// present exactly while [`SIMULATING`] is set.
    static IDS: RefCell<Option<SplitMix64>> = const { RefCell::new(None) };

    /// The `Corrupt` errors node code handled itself on this thread while
    /// a simulation ran ([`note_handled_error`]), oldest first, at most
    /// [`HANDLED_CORRUPTION_MAX`]; the simulator takes them after every
    /// step ([`take_handled_corruption`]).
    static HANDLED_CORRUPTION: RefCell<Vec<Error>> = const { RefCell::new(Vec::new()) };
}

/// The most `Corrupt` errors [`note_handled_error`] keeps between two
/// [`take_handled_corruption`] calls; later ones are dropped (a simulator
/// takes them after every step, and one damaged batch gives the same error
/// over and over).
const HANDLED_CORRUPTION_MAX: usize = 64;

/// Marks the current thread as running a deterministic simulation seeded
/// with one seed, until dropped.
///
/// While it lives, the crate's blocking waits, sleeps and thread spawns on
/// a node's path panic, naming where they were called from (they would
/// stop the one thread that steps every node), and random ids
/// ([`DirectoryId::random`](crate::DirectoryId::random),
/// [`ClusterId::random`](crate::ClusterId::random)) are drawn from a
/// generator seeded from the seed, so the same seed gives the same ids.
/// Guards nest: dropping one restores what was there before it. The guard
/// is tied to the thread that made it (it is neither `Send` nor `Sync`).
#[derive(Debug)]
#[must_use = "the simulation ends when the guard is dropped"]
pub struct SimulationGuard {
    was_simulating: bool,
    outer_ids: Option<SplitMix64>,
    outer_corruption: Vec<Error>,
    /// A raw pointer makes the guard `!Send` and `!Sync`: the flag it
    /// restores on drop belongs to the thread that set it.
    _this_thread: PhantomData<*const ()>,
}

impl SimulationGuard {
    /// Starts a simulation seeded with `seed` on the current thread.
    pub fn enter(seed: u64) -> SimulationGuard {
        let was_simulating = SIMULATING.with(|flag| flag.replace(true));
        // The id stream is derived from the seed, not the seed itself, so
        // that it differs from other streams a simulator seeds with it.
        let ids = SplitMix64::new(mix64(seed ^ ID_STREAM_SALT));
        let outer_ids = IDS.with(|cell| cell.replace(Some(ids)));
        let outer_corruption = HANDLED_CORRUPTION.with(|cell| cell.take());
        SimulationGuard {
            was_simulating,
            outer_ids,
            outer_corruption,
            _this_thread: PhantomData,
        }
    }
}

impl Drop for SimulationGuard {
    fn drop(&mut self) {
        SIMULATING.with(|flag| flag.set(self.was_simulating));
        let outer = self.outer_ids.take();
        IDS.with(|cell| *cell.borrow_mut() = outer);
        let outer = std::mem::take(&mut self.outer_corruption);
        HANDLED_CORRUPTION.with(|cell| *cell.borrow_mut() = outer);
    }
}

/// Salt mixed into a simulation's seed for its id stream.
const ID_STREAM_SALT: u64 = 0x1D5_1D5_1D5_1D5;

/// Whether a simulation guard is live on the current thread.
#[inline]
pub(crate) fn simulating() -> bool {
    SIMULATING.with(Cell::get)
}

/// Panics, naming the caller and `what`, if the current thread runs a
/// simulation: `what` (a wait, a sleep, a thread spawn) would block the one
/// thread that steps every node, or run outside its schedule.
#[track_caller]
#[inline]
pub(crate) fn forbid_in_simulation(what: &str) {
    if simulating() {
        blocked_in_simulation(what, Location::caller());
    }
}

/// The cold half of [`forbid_in_simulation`], kept out of line so the
/// check inlines to a load and a branch.
#[cold]
#[inline(never)]
fn blocked_in_simulation(what: &str, at: &'static Location<'static>) -> ! {
    panic!("{what} at {at} inside a deterministic simulation: it would block or spawn a thread")
}

/// 64 bits from the seeded id stream of the simulation on this thread, or
/// `None` outside a simulation (the caller then draws real randomness).
pub(crate) fn seeded_u64() -> Option<u64> {
    IDS.with(|cell| cell.borrow_mut().as_mut().map(SplitMix64::next_u64))
}

/// Node code that meets an error and handles it itself (answers a
/// follower's fetch with its code, logs it and backs off, leaves a log
/// unopened) reports it here. Inside a simulation a `Corrupt` one is kept
/// for the simulator, which would not see it otherwise: on the wire it is
/// only `ErrorCode::Unknown`, in the node a log line. A `Corrupt` error on
/// a node whose disk never had a bit flipped is a bug (issue 28). Outside
/// a simulation this is one thread-local read.
#[inline]
pub(crate) fn note_handled_error(error: &Error) {
    if simulating() && matches!(error, Error::Corrupt { .. }) {
        keep_handled_corruption(error);
    }
}

/// The cold half of [`note_handled_error`].
#[cold]
#[inline(never)]
fn keep_handled_corruption(error: &Error) {
    // `try_with`: an error handled while the thread's locals are torn
    // down is not kept, rather than a panic.
    let _ = HANDLED_CORRUPTION.try_with(|cell| {
        let mut kept = cell.borrow_mut();
        if kept.len() < HANDLED_CORRUPTION_MAX {
            kept.push(error.duplicate());
        }
    });
}

/// The `Corrupt` errors node code handled itself on this thread
/// ([`note_handled_error`]) since the last call, oldest first.
pub(crate) fn take_handled_corruption() -> Vec<Error> {
    HANDLED_CORRUPTION.with(|cell| cell.take())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DirectoryId;

    fn corrupt(position: u64) -> Error {
        Error::Corrupt {
            path: std::path::PathBuf::from("/sim/node-0/a.log"),
            position,
            reason: "test".to_owned(),
        }
    }

    #[test]
    fn handled_corruption_is_kept_inside_a_guard_only_and_taken_once() {
        note_handled_error(&corrupt(1));
        assert!(take_handled_corruption().is_empty(), "outside a simulation");
        let _guard = SimulationGuard::enter(1);
        note_handled_error(&corrupt(2));
        note_handled_error(&Error::Shutdown);
        let taken = take_handled_corruption();
        assert!(
            matches!(taken[..], [Error::Corrupt { position: 2, .. }]),
            "{taken:?}"
        );
        assert!(take_handled_corruption().is_empty());
        for position in 0..2 * HANDLED_CORRUPTION_MAX as u64 {
            note_handled_error(&corrupt(position));
        }
        assert_eq!(take_handled_corruption().len(), HANDLED_CORRUPTION_MAX);
    }

    #[test]
    fn a_guard_starts_with_no_handled_corruption_and_leaves_the_outer_ones() {
        let outer = SimulationGuard::enter(1);
        note_handled_error(&corrupt(1));
        {
            let _inner = SimulationGuard::enter(2);
            assert!(take_handled_corruption().is_empty());
            note_handled_error(&corrupt(2));
        }
        let taken = take_handled_corruption();
        assert!(
            matches!(taken[..], [Error::Corrupt { position: 1, .. }]),
            "{taken:?}"
        );
        drop(outer);
    }

    #[test]
    fn the_check_panics_inside_a_guard_and_not_outside() {
        forbid_in_simulation("a test wait");
        let panicked = std::panic::catch_unwind(|| {
            let _guard = SimulationGuard::enter(1);
            forbid_in_simulation("a test wait");
        });
        let message = panicked.expect_err("the check must panic inside a guard");
        let text = message
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(text.contains("a test wait"), "{text}");
        assert!(text.contains(file!()), "names the call site: {text}");
        // The guard was dropped while unwinding: the flag is clear again.
        assert!(!simulating());
        forbid_in_simulation("a test wait");
    }

    #[test]
    fn guards_nest_and_restore_the_outer_state() {
        let outer = SimulationGuard::enter(1);
        {
            let _inner = SimulationGuard::enter(2);
            assert!(simulating());
        }
        assert!(simulating());
        drop(outer);
        assert!(!simulating());
        assert_eq!(seeded_u64(), None);
    }

    #[test]
    fn the_same_seed_gives_the_same_ids_and_another_seed_others() {
        let ids = |seed| {
            let _guard = SimulationGuard::enter(seed);
            (0..4).map(|_| DirectoryId::random()).collect::<Vec<_>>()
        };
        assert_eq!(ids(7), ids(7));
        assert_ne!(ids(7), ids(8));
        let outside = DirectoryId::random();
        assert!(!ids(7).contains(&outside));
    }

    #[test]
    fn ids_from_one_guard_differ_from_each_other() {
        let _guard = SimulationGuard::enter(3);
        let first = DirectoryId::random();
        assert_ne!(first, DirectoryId::random());
    }
}
