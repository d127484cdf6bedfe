//! The completion hand-off of a pipelined append: one cell per append,
//! written once by whichever thread learns the outcome (the *resolver*) and
//! read once by the append's owner — a thread blocked in
//! [`AppendHandle::wait`], an async task polling the handle as a
//! [`Future`], or a callback registered with
//! [`AppendHandle::on_complete`]. Modelled with loom in `tests/loom.rs`.
//!
//! The cell is a mutex over the outcome, the last waker and the callback,
//! plus a condition variable for blocked threads. The resolver stores the
//! outcome under the lock and takes the waker or callback out; it wakes
//! and runs them only after letting the lock go, so a callback may append
//! again, or wait on another handle, without deadlocking on this one.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::replicated_log::AppendOutcome;
use crate::sync::{Arc, Condvar, Mutex};

/// A callback registered with [`AppendHandle::on_complete`].
type Callback = Box<dyn FnOnce(Result<AppendOutcome>) + Send + 'static>;

#[derive(Default)]
struct CellState {
    /// The outcome, from resolution until the owner takes it.
    outcome: Option<Result<AppendOutcome>>,
    /// Whether the resolver has written the outcome (it stays true after
    /// the owner took it).
    resolved: bool,
    /// The waker of the last poll that found the outcome unknown.
    waker: Option<Waker>,
    /// A callback waiting for the outcome.
    callback: Option<Callback>,
}

impl std::fmt::Debug for CellState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CellState")
            .field("outcome", &self.outcome)
            .field("resolved", &self.resolved)
            .field("waker", &self.waker.is_some())
            .field("callback", &self.callback.is_some())
            .finish()
    }
}

/// The shared cell between a pipelined append's resolver and its
/// [`AppendHandle`]. Resolved exactly once.
#[derive(Debug, Default)]
pub struct Completion {
    state: Mutex<CellState>,
    ready: Condvar,
}

impl Completion {
    /// A cell and the handle that reads it.
    pub fn new_pair() -> (Arc<Completion>, AppendHandle) {
        let cell = Arc::new(Completion::default());
        let handle = AppendHandle {
            cell: Arc::clone(&cell),
        };
        (cell, handle)
    }

    /// Writes the outcome and hands it to whoever waits: wakes blocked
    /// threads and the last waker, or runs the registered callback — on
    /// this thread, after the cell's lock is released. A panicking
    /// callback or waker is caught and logged. A second resolution is a
    /// bug; it is ignored (and asserted against in debug builds).
    pub fn resolve(&self, outcome: Result<AppendOutcome>) {
        let (callback, waker, outcome) = {
            let mut state = self.state.lock();
            debug_assert!(!state.resolved, "a pipelined append resolved twice");
            if state.resolved {
                return;
            }
            state.resolved = true;
            match state.callback.take() {
                // The callback is the one owner: the outcome goes to it.
                Some(callback) => (Some(callback), None, Some(outcome)),
                None => {
                    state.outcome = Some(outcome);
                    self.ready.notify_all();
                    (None, state.waker.take(), None)
                }
            }
        };
        if let (Some(callback), Some(outcome)) = (callback, outcome) {
            run_callback(callback, outcome);
        }
        if let Some(waker) = waker {
            let _application = ApplicationCode::enter();
            if catch_unwind(AssertUnwindSafe(|| waker.wake())).is_err() {
                tracing::error!("a waker of a pipelined append panicked; ignored");
            }
        }
    }

    /// Whether the outcome is known.
    pub fn is_resolved(&self) -> bool {
        self.state.lock().resolved
    }
}

/// Runs a completion callback, catching (and logging) a panic: a panicking
/// callback must not unwind into the thread that resolved the append (a
/// replication or control thread of the node).
fn run_callback(callback: Callback, outcome: Result<AppendOutcome>) {
    let _application = ApplicationCode::enter();
    if catch_unwind(AssertUnwindSafe(move || callback(outcome))).is_err() {
        tracing::error!("a pipelined append's on_complete callback panicked; ignored");
    }
}

thread_local! {
    /// Whether this thread is running the application's code (a callback or
    /// a waker) on the library's behalf.
    static IN_APPLICATION_CODE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the current thread as running application code until dropped, so
/// that a panic there is told apart from a panic of the library's own code
/// ([`in_application_code`]).
struct ApplicationCode {
    was: bool,
}

impl ApplicationCode {
    fn enter() -> ApplicationCode {
        ApplicationCode {
            was: IN_APPLICATION_CODE.with(|flag| flag.replace(true)),
        }
    }
}

impl Drop for ApplicationCode {
    fn drop(&mut self) {
        IN_APPLICATION_CODE.with(|flag| flag.set(self.was));
    }
}

/// Whether the current thread is inside an application's completion
/// callback or waker. The fault test's panic hook uses it: a panicking
/// callback is the application's fault, caught and logged, not the node's.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) fn in_application_code() -> bool {
    IN_APPLICATION_CODE.with(|flag| flag.get())
}

/// The outcome of a [`ReplicatedLog::append_pipelined`](crate::ReplicatedLog::append_pipelined),
/// once it is known: exactly what [`ReplicatedLog::append`](crate::ReplicatedLog::append)
/// would have returned for the same batch and `Acks`.
///
/// Read it once, in one of three ways: block a thread
/// ([`wait`](Self::wait), [`wait_timeout`](Self::wait_timeout)), `.await`
/// it (it is a runtime-agnostic [`Future`], woken through the task's
/// [`Waker`] exactly when the outcome is known), or hand it a callback
/// ([`on_complete`](Self::on_complete)). Dropping the handle is harmless:
/// the append goes on, and its outcome is discarded.
#[derive(Debug)]
#[must_use = "an append's outcome is only known through its handle"]
pub struct AppendHandle {
    cell: Arc<Completion>,
}

impl AppendHandle {
    /// A handle whose outcome is already known.
    pub(crate) fn resolved(outcome: Result<AppendOutcome>) -> AppendHandle {
        let (cell, handle) = Completion::new_pair();
        cell.resolve(outcome);
        handle
    }

    /// Whether the outcome is known (a following `wait` returns at once).
    pub fn is_done(&self) -> bool {
        self.cell.is_resolved()
    }

    /// Blocks until the outcome is known and returns it. The library
    /// resolves every handle: at the latest at `request_timeout` after the
    /// append (with [`Error::Timeout`](crate::Error::Timeout)), or when the
    /// node stops (with [`Error::Shutdown`](crate::Error::Shutdown)).
    pub fn wait(self) -> Result<AppendOutcome> {
        let mut state = self.cell.state.lock();
        loop {
            if let Some(outcome) = state.outcome.take() {
                return outcome;
            }
            self.cell.ready.wait(&mut state);
        }
    }

    /// Blocks up to `timeout` for the outcome. Returns it, or gives the
    /// handle back if it is not known yet (the append goes on).
    pub fn wait_timeout(
        self,
        timeout: Duration,
    ) -> std::result::Result<Result<AppendOutcome>, AppendHandle> {
        let deadline = Instant::now() + timeout;
        {
            let mut state = self.cell.state.lock();
            loop {
                if let Some(outcome) = state.outcome.take() {
                    return Ok(outcome);
                }
                if Instant::now() >= deadline {
                    break;
                }
                // Spurious or timed-out wake-ups re-check above.
                let _timed_out = self.cell.ready.wait_until(&mut state, deadline);
            }
        }
        Err(self)
    }

    /// Runs `callback` with the outcome once it is known.
    ///
    /// It runs on the thread that learns the outcome: usually a thread of
    /// the leader's node — the one answering the follower fetch that
    /// committed the batch (`acks=all`), an appending thread that wrote
    /// it (`acks=1`, or `acks=all` on a leader alone in its ISR), the
    /// node's control thread (timeouts, an ISR shrink, a role change), or
    /// the thread stopping the node — and on the calling thread, before
    /// this returns, if the outcome is known already. It runs with no
    /// lock of the library held, so it may append or wait on other
    /// handles, but it holds up replication while it runs: keep it short
    /// (hand the outcome to a channel, bump a counter), as Kafka's
    /// producer asks of its callbacks. A panic in it is caught and logged
    /// (`tracing` error) and goes no further: the node is not affected.
    pub fn on_complete(self, callback: impl FnOnce(Result<AppendOutcome>) + Send + 'static) {
        let ready = {
            let mut state = self.cell.state.lock();
            match state.outcome.take() {
                Some(outcome) => Some((outcome, callback)),
                None => {
                    // Not resolved yet (an owner that took the outcome
                    // consumed the handle, so `resolved` means `outcome`).
                    debug_assert!(!state.resolved);
                    state.callback = Some(Box::new(callback));
                    None
                }
            }
        };
        if let Some((outcome, callback)) = ready {
            run_callback(Box::new(callback), outcome);
        }
    }
}

impl Future for AppendHandle {
    type Output = Result<AppendOutcome>;

    /// Ready with the outcome once it is known; until then the task's
    /// latest waker is kept and woken (once) at resolution. Polling again
    /// after `Ready` returns `Pending` forever (the outcome was handed out).
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<AppendOutcome>> {
        let mut state = self.cell.state.lock();
        if let Some(outcome) = state.outcome.take() {
            return Poll::Ready(outcome);
        }
        if state.resolved {
            tracing::warn!("an AppendHandle was polled after it returned its outcome");
            return Poll::Pending;
        }
        match &state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => state.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}
