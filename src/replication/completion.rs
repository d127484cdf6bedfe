//! The completion hand-off of a pipelined append: one cell per append,
//! written once by whichever thread learns the outcome (the *resolver*) and
//! read by the append's owner — a thread blocked in
//! [`AppendHandle::wait`], an async task polling the handle as a
//! [`Future`], or a callback registered with
//! [`AppendHandle::on_complete`]. Modelled with loom in `tests/loom.rs`.
//!
//! The cell is a mutex over the outcome, the last waker and the callback,
//! plus a condition variable for blocked threads. The resolver stores the
//! outcome under the lock and wakes blocked threads there (no application
//! code runs for that); a waker or callback it takes out is handed to the
//! node's [`CompletionRunner`], the one thread per node that runs the
//! application's completion code, in the order the outcomes were decided.
//! Replication's threads (fetch answers, the control loop, the deadline
//! timer) therefore never run a callback or a waker: one that blocks —
//! even one that appends and waits on another handle — stalls only the
//! runner, never a fetch answer, a heartbeat or a timeout.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::append::AppendOutcome;
use crate::error::Result;
use crate::sync::{Arc, AtomicBool, Condvar, Mutex, Ordering};
use crate::types::LeaderEpoch;

/// A callback registered with [`AppendHandle::on_complete`].
type Callback = Box<dyn FnOnce(Result<AppendOutcome>) + Send + 'static>;

#[derive(Default)]
struct CellState {
    /// The outcome, from resolution until an owner that consumes the
    /// handle takes it (`wait`, `wait_timeout`, `on_complete`); polling as
    /// a future hands out a copy and leaves it, so the handle can be asked
    /// again.
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
#[derive(Default)]
pub struct Completion {
    state: Mutex<CellState>,
    ready: Condvar,
    /// Set once the outcome is written (with `state.resolved`, under the
    /// lock), read without the lock by a handle spinning for it
    /// ([`AppendHandle::spin_for_outcome`]) and by
    /// [`is_resolved`](Self::is_resolved); the outcome itself is always
    /// read under the lock.
    resolved_hint: AtomicBool,
    /// Where the callback or waker runs.
    runs_on: RunsOn,
}

/// Where a cell's callback or waker runs.
#[derive(Default)]
enum RunsOn {
    /// On the resolving thread (a handle resolved at creation, and the loom
    /// models).
    #[default]
    ResolvingThread,
    /// On this runner's thread (made only by `Completion::new_pair_on`,
    /// which the tests and the loom models use).
    #[cfg_attr(not(any(test, feature = "testing")), allow(dead_code))]
    Runner(Arc<CompletionRunner>),
    /// On the runner of the pass that resolves it
    /// ([`Wakeups::on`]): a pipelined append's cell, resolved by its
    /// replica, which hands its node's runner to every pass (and, should
    /// it be dropped with appends still queued, to their last one, see
    /// `PendingAppends`' `Drop`). Resolved outside a pass with a runner,
    /// it runs on the resolving thread. This saves each pipelined append
    /// a clone and a drop of the runner's `Arc`: two read-modify-writes of
    /// one count that every appending thread shares (about 1% of all
    /// samples of 256 async clients appending 100 B records, in
    /// `append_pipelined` alone).
    PassRunner,
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("state", &*self.state.lock())
            .field(
                "runs_on",
                &match self.runs_on {
                    RunsOn::ResolvingThread => "resolving thread",
                    RunsOn::Runner(_) => "runner",
                    RunsOn::PassRunner => "pass runner",
                },
            )
            .finish()
    }
}

impl Completion {
    /// A cell and the handle that reads it; its callback or waker runs on
    /// the resolving thread.
    pub fn new_pair() -> (Arc<Completion>, AppendHandle) {
        Self::pair(RunsOn::ResolvingThread)
    }

    /// A cell and the handle that reads it; its callback or waker runs on
    /// `runner`'s thread.
    #[cfg(any(test, feature = "testing"))]
    pub fn new_pair_on(runner: &Arc<CompletionRunner>) -> (Arc<Completion>, AppendHandle) {
        Self::pair(RunsOn::Runner(Arc::clone(runner)))
    }

    /// A cell and the handle that reads it; its callback or waker runs on
    /// the runner of the pass that resolves it (see [`Wakeups::on`]): for
    /// a replica's pipelined appends, whose passes all name the node's
    /// runner.
    pub(crate) fn new_pair_on_pass_runner() -> (Arc<Completion>, AppendHandle) {
        Self::pair(RunsOn::PassRunner)
    }

    fn pair(runs_on: RunsOn) -> (Arc<Completion>, AppendHandle) {
        let cell = Arc::new(Completion {
            runs_on,
            ..Completion::default()
        });
        let handle = AppendHandle {
            cell: Arc::clone(&cell),
            spin: Duration::ZERO,
            placed_in: None,
        };
        (cell, handle)
    }

    /// Writes the outcome and hands it to whoever waits: wakes blocked
    /// threads at once, and hands the last waker or the registered
    /// callback to the runner (or, without one, runs it on this thread
    /// after the cell's lock is released). A panicking callback or waker
    /// is caught and logged. A second resolution is a bug; it is ignored
    /// (and asserted against in debug builds).
    pub fn resolve(&self, outcome: Result<AppendOutcome>) {
        let mut wakeups = Wakeups::default();
        self.resolve_into(outcome, &mut wakeups);
        wakeups.hand_over();
    }

    /// [`resolve`](Self::resolve), but the waker or callback it owes is
    /// added to `wakeups`, to go to the runner with the others of the same
    /// pass in one step ([`Wakeups::hand_over`]).
    pub(crate) fn resolve_into(&self, outcome: Result<AppendOutcome>, wakeups: &mut Wakeups) {
        let job = {
            let mut state = self.state.lock();
            debug_assert!(!state.resolved, "a pipelined append resolved twice");
            if state.resolved {
                return;
            }
            state.resolved = true;
            self.resolved_hint.store(true, Ordering::Release);
            match state.callback.take() {
                // The callback is the one owner: the outcome goes to it.
                Some(callback) => Some(Job::Callback(callback, outcome)),
                None => {
                    state.outcome = Some(outcome);
                    self.ready.notify_all();
                    state.waker.take().map(Job::Wake)
                }
            }
        };
        if let Some(job) = job {
            match &self.runs_on {
                RunsOn::ResolvingThread => wakeups.push(None, job),
                RunsOn::Runner(runner) => wakeups.push(Some(runner), job),
                RunsOn::PassRunner => wakeups.push_on_pass_runner(job),
            }
        }
    }

    /// Whether the outcome is known. Read without the lock: the flag is
    /// set with `state.resolved` and never cleared, and an owner that then
    /// takes the outcome does so under the lock, which the resolver holds
    /// until the outcome is written. (The simulator asks this of every
    /// append in flight after every step; the lock pair was a third of
    /// its own loop's time.)
    pub fn is_resolved(&self) -> bool {
        self.resolved_hint.load(Ordering::Acquire)
    }
}

/// Application code a resolution owes: a callback with its outcome, or a
/// waker to wake.
enum Job {
    Callback(Callback, Result<AppendOutcome>),
    Wake(Waker),
}

impl Job {
    /// Runs the application's code, catching (and logging) a panic: it
    /// must not unwind into the thread that runs it.
    fn run(self) {
        let _application = ApplicationCode::enter();
        match self {
            Job::Callback(callback, outcome) => {
                if catch_unwind(AssertUnwindSafe(move || callback(outcome))).is_err() {
                    tracing::error!("a pipelined append's on_complete callback panicked; ignored");
                }
            }
            Job::Wake(waker) => {
                if catch_unwind(AssertUnwindSafe(|| waker.wake())).is_err() {
                    tracing::error!("a waker of a pipelined append panicked; ignored");
                }
            }
        }
    }
}

/// The wakers and callbacks that one pass of resolutions owes (say, every
/// append a high watermark move decided), handed to the completion runner
/// in one step: one lock and at most one wake-up of its thread for the
/// whole pass, instead of one per append. Keeps the order of the pushes.
/// Dropping it hands over what it holds.
#[derive(Default)]
pub(crate) struct Wakeups {
    /// The runner of `jobs` (`None`: run on the handing thread).
    runner: Option<Arc<CompletionRunner>>,
    jobs: Vec<Job>,
    /// The runner of the pass, for cells that run on it
    /// ([`Completion::new_pair_on_pass_runner`]); `None`: the handing
    /// thread.
    pass_runner: Option<Arc<CompletionRunner>>,
}

impl Wakeups {
    /// An empty pass whose cells that run on the pass's runner run on
    /// `runner` (`None`: on the handing thread).
    pub(crate) fn on(runner: Option<Arc<CompletionRunner>>) -> Wakeups {
        Wakeups {
            runner: None,
            jobs: Vec::new(),
            pass_runner: runner,
        }
    }

    /// Adds the job of a cell that runs on the pass's runner.
    fn push_on_pass_runner(&mut self, job: Job) {
        let runner = self.pass_runner.take();
        self.push(runner.as_ref(), job);
        self.pass_runner = runner;
    }

    /// Adds the job of a cell whose runner is `runner`. A job for another
    /// runner than the ones held hands those over first, so order holds.
    fn push(&mut self, runner: Option<&Arc<CompletionRunner>>, job: Job) {
        let same = match (&self.runner, runner) {
            (Some(held), Some(runner)) => Arc::ptr_eq(held, runner),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.hand_over();
            self.runner = runner.cloned();
        }
        self.jobs.push(job);
    }

    /// Hands every job held to its runner (or runs them here, with no
    /// runner), in the order they were pushed.
    pub(crate) fn hand_over(&mut self) {
        if self.jobs.is_empty() {
            return;
        }
        let jobs = std::mem::take(&mut self.jobs);
        match &self.runner {
            Some(runner) => runner.submit_all(jobs),
            None => jobs.into_iter().for_each(Job::run),
        }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        self.hand_over();
    }
}

#[derive(Default)]
struct RunnerState {
    /// Callbacks and wakers to run, in the order their outcomes were
    /// decided. Not bounded: a resolver must never block on a full queue
    /// (it is a replication thread), and `pipelined_bytes_max` does not
    /// bound it either, because an append's bytes are released when its
    /// outcome is decided, before its callback runs. So while a callback
    /// blocks, the queue grows by one small entry (a boxed callback or a
    /// waker and the outcome) per pipelined append resolved meanwhile: the
    /// application that keeps appending while its own callback blocks owns
    /// that growth, as with any unbounded executor queue.
    jobs: VecDeque<Job>,
    /// Set by [`CompletionRunner::stop`]: the thread runs what is queued,
    /// then exits.
    stopping: bool,
    /// Cleared when the thread exited (or never ran): later jobs run on the
    /// resolving thread, since nothing would run them otherwise. By then
    /// the node stopped, so no replication thread is held up.
    accepting: bool,
}

/// The thread of a node that runs its pipelined appends' completion code:
/// every `on_complete` callback and every waker of a handle polled as a
/// future, one at a time, in the order the outcomes were decided (so a
/// log's callbacks run in offset order). Started by the node as
/// `isrlog-completions-<node>`; it stops once the node stopped and
/// everything queued ran.
///
/// A callback that blocks holds up only the callbacks behind it: it may
/// append (even with `acks=all`) and [`wait`](AppendHandle::wait) on
/// another handle, which is resolved without this thread. It must not
/// block waiting for *another callback* to run: that one is queued behind
/// it.
pub struct CompletionRunner {
    state: Mutex<RunnerState>,
    /// Signalled when a job is queued, when stopping, and when the thread
    /// exits.
    work: Condvar,
}

impl std::fmt::Debug for CompletionRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("CompletionRunner")
            .field("jobs", &state.jobs.len())
            .field("stopping", &state.stopping)
            .field("accepting", &state.accepting)
            .finish()
    }
}

/// How long the runner's thread sleeps between checks when idle (a stop
/// wakes it at once; this only bounds the wait).
const RUNNER_IDLE_WAIT: Duration = Duration::from_secs(1);

impl CompletionRunner {
    /// A runner accepting jobs; [`run`](Self::run) them on a thread of
    /// their own.
    pub fn new() -> Arc<CompletionRunner> {
        Arc::new(CompletionRunner {
            state: Mutex::new(RunnerState {
                accepting: true,
                ..RunnerState::default()
            }),
            work: Condvar::new(),
        })
    }

    /// Queues `jobs`, in order, with one lock and one wake-up of the
    /// thread (or runs them here once the thread is gone).
    fn submit_all(&self, jobs: Vec<Job>) {
        {
            let mut state = self.state.lock();
            if state.accepting {
                state.jobs.extend(jobs);
                self.work.notify_all();
                return;
            }
        }
        jobs.into_iter().for_each(Job::run);
    }

    /// The runner thread's loop: [`run_pending`](Self::run_pending) passes
    /// and waits for more, until [`stop`](Self::stop) was called and the
    /// queue is empty.
    pub fn run(&self) {
        loop {
            if self.run_pending() > 0 {
                continue;
            }
            let mut state = self.state.lock();
            // Queued since the pass looked: run it before sleeping (the
            // submitter's wake-up came before this wait).
            if !state.jobs.is_empty() {
                continue;
            }
            if state.stopping {
                state.accepting = false;
                self.work.notify_all();
                return;
            }
            let _timed_out = self.work.wait_for(&mut state, RUNNER_IDLE_WAIT);
        }
    }

    /// One pass of the runner, on the calling thread and without waiting:
    /// takes everything queued now (one lock, not one per job) and runs it
    /// in order with no lock held. Jobs those queue run on the next pass.
    /// Returns how many ran. The runner's thread loops over it; a
    /// simulator without that thread calls it itself (issue 28).
    pub fn run_pending(&self) -> usize {
        let jobs = std::mem::take(&mut self.state.lock().jobs);
        let ran = jobs.len();
        jobs.into_iter().for_each(Job::run);
        ran
    }

    /// Whether jobs wait for the next pass ([`run_pending`](Self::run_pending)).
    #[cfg(any(test, feature = "testing"))]
    pub fn has_pending(&self) -> bool {
        !self.state.lock().jobs.is_empty()
    }

    /// Asks the thread to exit once everything queued ran.
    pub fn stop(&self) {
        let mut state = self.state.lock();
        state.stopping = true;
        self.work.notify_all();
    }

    /// The thread never started (or is gone): jobs run on the resolving
    /// thread from now on.
    pub(crate) fn run_inline(&self) {
        let jobs = {
            let mut state = self.state.lock();
            state.accepting = false;
            std::mem::take(&mut state.jobs)
        };
        jobs.into_iter().for_each(Job::run);
    }

    /// Waits up to `deadline` for the thread to exit after
    /// [`stop`](Self::stop); whether it did.
    pub fn wait_stopped(&self, deadline: Instant) -> bool {
        let mut state = self.state.lock();
        while state.accepting {
            if Instant::now() >= deadline {
                return false;
            }
            let _timed_out = self.work.wait_until(&mut state, deadline);
        }
        true
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
/// Read it in one of three ways: block a thread
/// ([`wait`](Self::wait), [`wait_timeout`](Self::wait_timeout)), `.await`
/// it (it is a runtime-agnostic [`Future`], woken through the task's
/// [`Waker`] exactly when the outcome is known), or hand it a callback
/// ([`on_complete`](Self::on_complete)). A handle that completed as a
/// future still answers: polled again, or asked with `wait`,
/// `wait_timeout` or `on_complete`, it gives the same outcome again.
/// Dropping the handle is harmless: the append goes on, and its outcome is
/// discarded.
///
/// Callbacks and wakers run on the node's completion thread
/// (`isrlog-completions-<node>`), never on a
/// thread replication depends on.
#[derive(Debug)]
#[must_use = "an append's outcome is only known through its handle"]
pub struct AppendHandle {
    cell: Arc<Completion>,
    /// How long its first poll that finds the outcome unknown spins for
    /// it before registering the waker (see [`Self::with_spin`]); zero
    /// once spent.
    spin: Duration,
    /// The leader epoch of the leader that placed the append in its log.
    placed_in: Option<LeaderEpoch>,
}

impl AppendHandle {
    /// The leader epoch of the leader that placed the append in its log
    /// (wrote it, or found it there as an idempotent duplicate); `None`
    /// for a handle that was not made by a leader's append. An idempotent
    /// producer compares it with the epoch of a later `OutOfOrderSequence`
    /// refusal: a leader older than this one does not speak for the log.
    pub fn leader_epoch(&self) -> Option<LeaderEpoch> {
        self.placed_in
    }

    /// This handle, placed in its log by a leader of `epoch`.
    pub(crate) fn placed_in(mut self, epoch: LeaderEpoch) -> AppendHandle {
        self.placed_in = Some(epoch);
        self
    }

    /// A handle whose outcome is already known.
    pub(crate) fn resolved(outcome: Result<AppendOutcome>) -> AppendHandle {
        let (cell, handle) = Completion::new_pair();
        cell.resolve(outcome);
        handle
    }

    /// This handle, whose first poll as a future spins up to `spin` for
    /// the outcome (yielding the core on every check, as a blocked
    /// `append` does before it parks) before it registers the task's
    /// waker. For an append with no other pipelined append of its log in
    /// flight, after a resolution pass that resolved at most one: its outcome is a fetch round trip away, and a waker handed
    /// to the completion thread costs two thread wake-ups (that thread's,
    /// then the executor's, whose worker sleeps on a core gone idle) that
    /// take longer than the round trip itself. Spinning for the outcome,
    /// the task finds it without any: no waker is registered, so no job
    /// is queued for the completion thread. With many appends in flight
    /// the executor has other tasks to run, and the handle does not spin.
    pub(crate) fn with_spin(mut self, spin: Duration) -> AppendHandle {
        self.spin = spin;
        self
    }

    /// Spins (yielding) up to the handle's spin, once, until the outcome
    /// is known.
    fn spin_for_outcome(&mut self) {
        let spin = std::mem::take(&mut self.spin);
        if spin.is_zero() || cfg!(loom) || crate::simulation::simulating() {
            return;
        }
        let until = Instant::now() + spin;
        let mut rounds = 0u32;
        while !self.cell.resolved_hint.load(Ordering::Acquire) {
            rounds += 1;
            if rounds.is_multiple_of(16) && Instant::now() >= until {
                return;
            }
            std::thread::yield_now();
        }
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
    /// It runs on the node's completion thread (`isrlog-completions-<node>`,
    /// one per node), after the callbacks of
    /// outcomes decided before it (a log's callbacks run in offset order),
    /// or on the calling thread, before this returns, if the outcome is
    /// known already. Never on a thread that answers fetches, heartbeats
    /// or enforces deadlines: a callback that blocks — that appends and
    /// waits, even with `acks=all` — holds up only the callbacks queued
    /// behind it, not replication. It must not wait for another
    /// callback's effect, which is queued behind it. It runs with no lock
    /// of the library held. A panic in it is caught and logged (`tracing`
    /// error) and goes no further: the node is not affected.
    pub fn on_complete(self, callback: impl FnOnce(Result<AppendOutcome>) + Send + 'static) {
        let ready = {
            let mut state = self.cell.state.lock();
            match state.outcome.take() {
                Some(outcome) => Some((outcome, callback)),
                None => {
                    // Not resolved yet (only owners that consume the
                    // handle take the outcome, so `resolved` means
                    // `outcome`).
                    debug_assert!(!state.resolved);
                    state.callback = Some(Box::new(callback));
                    None
                }
            }
        };
        if let Some((outcome, callback)) = ready {
            Job::Callback(Box::new(callback), outcome).run();
        }
    }
}

impl Future for AppendHandle {
    type Output = Result<AppendOutcome>;

    /// Ready with the outcome once it is known; until then the task's
    /// latest waker is kept and woken (once, on the node's completion
    /// thread) at resolution. The first poll of the handle of an append
    /// that had no other pipelined append of its log in flight (and at
    /// most one resolved by the latest resolution pass) first spins for
    /// the outcome, up to
    /// [`spin_before_park`](crate::ReplicationConfig::spin_before_park). `Ready` hands out a copy of the outcome and
    /// keeps it: polling again, `wait`, `wait_timeout` and `on_complete`
    /// give the same outcome.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<AppendOutcome>> {
        let this = self.get_mut();
        this.spin_for_outcome();
        let mut state = this.cell.state.lock();
        if let Some(outcome) = &state.outcome {
            return Poll::Ready(duplicate(outcome));
        }
        debug_assert!(!state.resolved, "only consuming owners take the outcome");
        match &state.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => state.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// A copy of an outcome (an `AppendOutcome` is `Copy`; an error is
/// rebuilt field by field).
fn duplicate(outcome: &Result<AppendOutcome>) -> Result<AppendOutcome> {
    match outcome {
        Ok(outcome) => Ok(*outcome),
        Err(error) => Err(error.duplicate()),
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::types::{LeaderEpoch, Offset};

    fn outcome(offset: u64) -> AppendOutcome {
        AppendOutcome {
            base_offset: Offset(offset),
            last_offset: Offset(offset),
            leader_epoch: LeaderEpoch(1),
            duplicate: false,
        }
    }

    /// One pass of resolutions reaches the runner as one submission (the
    /// runner's queue holds all of them before any runs), and the runner's
    /// thread runs them in the order they were decided.
    #[test]
    fn a_pass_of_resolutions_reaches_the_runner_in_one_step_in_order() {
        let runner = CompletionRunner::new();
        let ran = Arc::new(Mutex::new(Vec::new()));
        let cells: Vec<_> = (0..5u64)
            .map(|_| {
                let (cell, handle) = Completion::new_pair_on(&runner);
                let ran = Arc::clone(&ran);
                handle.on_complete(move |result| {
                    if let Ok(outcome) = result {
                        ran.lock().push(outcome.base_offset.0);
                    }
                });
                cell
            })
            .collect();
        let mut wakeups = Wakeups::default();
        for (i, cell) in cells.iter().enumerate() {
            cell.resolve_into(Ok(outcome(i as u64)), &mut wakeups);
            assert!(cell.is_resolved(), "the cell is written at once");
        }
        assert_eq!(runner.state.lock().jobs.len(), 0, "nothing handed over yet");
        wakeups.hand_over();
        assert_eq!(runner.state.lock().jobs.len(), 5);
        assert!(
            ran.lock().is_empty(),
            "nothing runs on the resolving thread"
        );
        runner.stop();
        runner.run();
        assert_eq!(*ran.lock(), vec![0, 1, 2, 3, 4]);
    }

    /// One pass runs, on the calling thread and in order, exactly what was
    /// queued when it began and returns at once: a job queued by a job of
    /// the pass waits for the next one, and an empty queue is no wait.
    #[test]
    fn run_pending_runs_what_is_queued_without_waiting() {
        let runner = CompletionRunner::new();
        assert_eq!(runner.run_pending(), 0, "an empty queue returns at once");
        let ran = Arc::new(Mutex::new(Vec::new()));
        let (later, later_handle) = Completion::new_pair_on(&runner);
        {
            let ran = Arc::clone(&ran);
            later_handle.on_complete(move |_| ran.lock().push(9));
        }
        let mut wakeups = Wakeups::default();
        for i in 0..3u64 {
            let (cell, handle) = Completion::new_pair_on(&runner);
            let ran = Arc::clone(&ran);
            let later = Arc::clone(&later);
            handle.on_complete(move |_| {
                ran.lock().push(i);
                if i == 2 {
                    // Queued on the runner, behind this pass.
                    later.resolve(Ok(outcome(9)));
                }
            });
            cell.resolve_into(Ok(outcome(i)), &mut wakeups);
        }
        wakeups.hand_over();
        assert!(ran.lock().is_empty(), "nothing ran before the pass");
        assert_eq!(runner.run_pending(), 3);
        assert_eq!(*ran.lock(), vec![0, 1, 2]);
        assert_eq!(runner.run_pending(), 1, "the job queued by the pass");
        assert_eq!(*ran.lock(), vec![0, 1, 2, 9]);
        assert_eq!(runner.run_pending(), 0);
        // A waiting handle (no callback) resolved meanwhile needs no pass.
        let (cell, handle) = Completion::new_pair_on(&runner);
        cell.resolve(Ok(outcome(4)));
        assert_eq!(runner.run_pending(), 0);
        assert_eq!(handle.wait().ok().map(|o| o.base_offset), Some(Offset(4)));
    }

    /// Issue 27, the lone async append: its outcome came back through two
    /// thread wake-ups (the completion thread's, then the executor's),
    /// 34 µs p50 against 13 µs for a blocked thread. A handle made with a
    /// spin now finds an outcome decided during its first poll's spin
    /// without registering a waker, so nothing is queued for the
    /// completion thread; a handle without one (or whose spin ran out)
    /// registers its waker and is woken through the runner as before.
    #[test]
    fn a_spinning_first_poll_takes_the_outcome_without_a_waker() {
        let poll = |handle: &mut AppendHandle| {
            let mut cx = Context::from_waker(Waker::noop());
            Pin::new(handle).poll(&mut cx)
        };
        let runner = CompletionRunner::new();
        let (cell, handle) = Completion::new_pair_on(&runner);
        let mut handle = handle.with_spin(Duration::from_secs(10));
        let resolver = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            cell.resolve(Ok(outcome(7)));
        });
        match poll(&mut handle) {
            Poll::Ready(Ok(got)) => assert_eq!(got.base_offset, Offset(7)),
            other => panic!("{other:?}"),
        }
        resolver.join().unwrap();
        assert_eq!(runner.run_pending(), 0, "no waker was handed over");

        // The spin is spent once: a later poll registers the waker at once.
        let (cell, handle) = Completion::new_pair_on(&runner);
        let mut handle = handle.with_spin(Duration::from_millis(1));
        assert!(poll(&mut handle).is_pending(), "the spin ran out");
        assert!(handle.spin.is_zero(), "no second spin");
        assert!(poll(&mut handle).is_pending());
        cell.resolve(Ok(outcome(8)));
        assert_eq!(runner.run_pending(), 1, "the waker went to the runner");
        assert!(matches!(poll(&mut handle), Poll::Ready(Ok(_))));
    }

    /// Jobs of cells with different runners (or none) keep their order:
    /// handing over a job of another runner hands the held ones first.
    #[test]
    fn wakeups_of_different_runners_keep_their_order() {
        let runner = CompletionRunner::new();
        let ran = Arc::new(Mutex::new(Vec::new()));
        let mut wakeups = Wakeups::default();
        for (i, on_runner) in [true, false, true].into_iter().enumerate() {
            let (cell, handle) = if on_runner {
                Completion::new_pair_on(&runner)
            } else {
                Completion::new_pair()
            };
            let ran = Arc::clone(&ran);
            handle.on_complete(move |_| ran.lock().push(i));
            cell.resolve_into(Ok(outcome(i as u64)), &mut wakeups);
        }
        // The runner's first job was handed over when the inline one came;
        // the inline one ran when the runner's second came.
        assert_eq!(runner.state.lock().jobs.len(), 1);
        assert_eq!(*ran.lock(), vec![1]);
        drop(wakeups);
        assert_eq!(runner.state.lock().jobs.len(), 2);
        runner.stop();
        runner.run();
        assert_eq!(*ran.lock(), vec![1, 0, 2]);
    }
}
