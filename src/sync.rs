//! The one file that names the synchronisation primitives. The rest of the
//! crate imports locks, condition variables, atomics and `Arc` from here and
//! never from `parking_lot` or `std::sync` directly, so that under
//! `RUSTFLAGS="--cfg loom"` the hand-offs modelled in `tests/loom.rs` run on
//! loom's model-checked types instead.
//!
//! Under loom the lock types are thin wrappers giving loom's `Mutex` and
//! `Condvar` the parking_lot API the crate is written against. A timed wait
//! becomes an untimed one there: a loom model must not depend on time.
#![allow(unused_imports, dead_code)]

#[cfg(not(loom))]
pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Weak};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
// `Arc` stays std's even under loom: the public API hands out
// `Arc<dyn Trait>`, which loom's `Arc` cannot coerce to, and reference
// counting is not one of the hand-offs the models check.
#[cfg(loom)]
pub(crate) use loom_shim::{Condvar, Mutex, MutexGuard, RwLock};
#[cfg(loom)]
pub(crate) use std::sync::{Arc, Weak};

/// Thread parking for hand-offs that wake one chosen thread instead of
/// every sleeper of a condition variable.
#[cfg(not(loom))]
pub(crate) mod thread {
    pub(crate) use std::thread::{current, Thread};
    use std::time::Duration;

    /// Parks the current thread until it is unparked, `timeout` passes, or
    /// a spurious wake-up; the caller re-checks its condition (and, having
    /// read the clock for its deadline, passes what is left of it).
    #[track_caller]
    pub(crate) fn park_for(timeout: Duration) {
        crate::simulation::forbid_in_simulation("a thread park");
        std::thread::park_timeout(timeout);
    }
}

/// Loom's parking: a timed park becomes an untimed one (a model must not
/// depend on time).
#[cfg(loom)]
pub(crate) mod thread {
    pub(crate) use loom::thread::{current, Thread};
    use std::time::Duration;

    pub(crate) fn park_for(_timeout: Duration) {
        loom::thread::park();
    }
}

#[cfg(loom)]
mod loom_shim {
    use std::ops::{Deref, DerefMut};
    use std::time::{Duration, Instant};

    /// parking_lot-style mutex over loom's.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    /// Guard of [`Mutex`]; the `Option` lets `Condvar::wait` move the inner
    /// guard out and back.
    #[derive(Debug)]
    pub(crate) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(value))
        }
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(|e| e.into_inner())))
        }
        pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            self.0.try_lock().ok().map(|g| MutexGuard(Some(g)))
        }
        pub(crate) fn try_lock_until(&self, _deadline: Instant) -> Option<MutexGuard<'_, T>> {
            Some(self.lock())
        }
        pub(crate) fn try_lock_for(&self, _timeout: Duration) -> Option<MutexGuard<'_, T>> {
            Some(self.lock())
        }
        pub(crate) fn into_inner(self) -> T {
            self.0.into_inner().unwrap_or_else(|e| e.into_inner())
        }
        pub(crate) fn get_mut(&mut self) -> &mut T {
            self.0.get_mut().unwrap_or_else(|e| e.into_inner())
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0
                .as_deref()
                .expect("guard present outside Condvar::wait")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0
                .as_deref_mut()
                .expect("guard present outside Condvar::wait")
        }
    }

    /// Result of a timed wait, as parking_lot's.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct WaitTimeoutResult(bool);

    impl WaitTimeoutResult {
        pub(crate) fn timed_out(&self) -> bool {
            self.0
        }
    }

    /// parking_lot-style condition variable over loom's.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Condvar {
            Condvar(loom::sync::Condvar::new())
        }
        pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let inner = guard.0.take().expect("guard present");
            guard.0 = Some(self.0.wait(inner).unwrap_or_else(|e| e.into_inner()));
        }
        pub(crate) fn wait_until<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _deadline: Instant,
        ) -> WaitTimeoutResult {
            self.wait(guard);
            WaitTimeoutResult(false)
        }
        pub(crate) fn wait_for<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _timeout: Duration,
        ) -> WaitTimeoutResult {
            self.wait(guard);
            WaitTimeoutResult(false)
        }
        pub(crate) fn notify_one(&self) -> bool {
            self.0.notify_one();
            true
        }
        pub(crate) fn notify_all(&self) -> usize {
            self.0.notify_all();
            0
        }
    }

    /// parking_lot-style reader-writer lock over loom's.
    #[derive(Debug, Default)]
    pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> RwLock<T> {
            RwLock(loom::sync::RwLock::new(value))
        }
        pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(|e| e.into_inner())
        }
        pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(|e| e.into_inner())
        }
        pub(crate) fn try_read(&self) -> Option<loom::sync::RwLockReadGuard<'_, T>> {
            self.0.try_read().ok()
        }
    }
}
