//! The coordinator's private executor: one thread running a
//! `futures` [`LocalPool`], on which every future of the asynchronous
//! ZooKeeper client runs — the client's session tasks (spawned through the
//! `spawns-core` hook the client uses) and the coordinator's own jobs.
//!
//! This module owns that thread, the bounded queue of jobs into it and the
//! deadline on every synchronous call; it knows nothing of ZooKeeper. The
//! user's threads never poll a future: they hand a job over and wait, up to
//! a deadline, on a bounded channel for its answer.
//!
//! Not owned here: the client's sockets are driven by the process-wide
//! `async-io` reactor, a thread that library starts on first use and that
//! outlives every coordinator (it only waits in `epoll` when idle).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use futures::executor::{LocalPool, LocalSpawner};
use futures::future::{self, Either};
use futures::task::LocalSpawnExt;
use futures::{FutureExt, StreamExt};

use crate::error::{Error, Result};
use crate::sync::Mutex;

/// How many jobs may wait for the executor thread; beyond that a call fails
/// at once (the thread is stuck or the caller floods it).
const JOBS_MAX: usize = 4096;
/// A job is dropped this long after its deadline, so that its own deadline
/// errors (which say what it was waiting for) win over the executor's.
const JOB_SLACK: Duration = Duration::from_millis(100);
/// A caller waits this much longer than the job's deadline, so that the
/// job's answer, even a timeout, wins over the caller's own timeout.
/// Generous, since a loaded machine may be slow to run the job's own
/// timeout; it only matters when the executor thread is stuck.
const ANSWER_SLACK: Duration = Duration::from_secs(1);

type Job = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What a call does to the store, which decides what its time-out means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    /// It only reads: a time-out is a plain retriable [`Error::Coordinator`].
    Read,
    /// It may write: a time-out means a request may have left without its
    /// answer coming back, so the outcome is unknown
    /// ([`Error::CoordinatorOutcomeUnknown`], SPEC 3.4).
    Write,
}

/// The executor thread and the queue into it. Stopping (or dropping) it
/// drops every task still running on it.
#[derive(Debug)]
pub(crate) struct Executor {
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// Lets the client's `asyncs::spawn` put its tasks on the pool. Only ever
/// used on the executor thread, where it is installed.
struct PoolSpawner {
    pool: LocalSpawner,
}

impl spawns_core::Spawn for PoolSpawner {
    fn spawn(&self, task: spawns_core::Task) {
        let name = task.name().to_owned();
        let guarded = AssertUnwindSafe(Box::into_pin(task.future))
            .catch_unwind()
            .map(move |outcome| {
                if outcome.is_err() {
                    tracing::error!(task = %name, "a ZooKeeper client task panicked");
                }
            });
        if self.pool.spawn_local(guarded).is_err() {
            // The pool is shutting down; the task's handle reports it
            // cancelled, which the client treats as a closed session.
            tracing::debug!("ZooKeeper client task dropped at shutdown");
        }
    }
}

impl Executor {
    /// Starts the executor thread, named `name`.
    pub(crate) fn start(name: &str) -> Result<Executor> {
        let (sender, receiver) = mpsc::channel::<Job>(JOBS_MAX);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || run(receiver))
            .map_err(|e| Error::io(name, "spawn the ZooKeeper executor thread", e))?;
        Ok(Executor {
            jobs: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Runs `job` on the executor thread in the background.
    pub(crate) fn spawn(&self, job: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let mut jobs = self.jobs.lock();
        let Some(sender) = jobs.as_mut() else {
            return Err(Error::Shutdown);
        };
        sender.try_send(Box::pin(job)).map_err(|e| {
            if e.is_full() {
                Error::Coordinator {
                    reason: format!(
                        "the ZooKeeper coordinator already has {JOBS_MAX} calls waiting; retry later"
                    ),
                }
            } else {
                Error::Shutdown
            }
        })
    }

    /// Runs `job` on the executor thread and waits for its answer until
    /// `deadline` (and a little more). A job still running then is dropped
    /// and the call fails, naming `what`: for an [`Effect::Write`] with
    /// [`Error::CoordinatorOutcomeUnknown`] (the job bounds every wait of its
    /// own before sending, so what is still running is a sent request),
    /// for an [`Effect::Read`] with a retriable [`Error::Coordinator`].
    pub(crate) fn call<T: Send + 'static>(
        &self,
        what: &str,
        effect: Effect,
        deadline: Instant,
        job: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        let (answer, answered) = crossbeam_channel::bounded(1);
        let what_owned = what.to_owned();
        self.spawn(async move {
            let job = AssertUnwindSafe(job).catch_unwind();
            let dropped_at = deadline + JOB_SLACK;
            let outcome = match future::select(Box::pin(job), async_io::Timer::at(dropped_at)).await
            {
                Either::Left((Ok(outcome), _)) => outcome,
                // A write job that panicked may have sent its request
                // first (helper-33 finding 7): its outcome is unknown.
                Either::Left((Err(_), _)) => Err(match effect {
                    Effect::Write => Error::CoordinatorOutcomeUnknown {
                        operation: what_owned.clone(),
                        reason: "the ZooKeeper call panicked, maybe after sending the write: re-read before retrying"
                            .to_owned(),
                    },
                    Effect::Read => Error::Coordinator {
                        reason: format!("the ZooKeeper call to {what_owned} panicked"),
                    },
                }),
                Either::Right(_) => Err(timed_out(&what_owned, effect)),
            };
            // The caller may have given up; nobody is left to tell.
            let _ = answer.try_send(outcome);
        })?;
        match answered.recv_deadline(deadline + ANSWER_SLACK) {
            Ok(outcome) => outcome,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(timed_out(what, effect)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => Err(Error::Shutdown),
        }
    }

    /// Closes the queue and joins the thread: every task still on the pool
    /// is dropped. Idempotent; a no-op when called on the executor thread
    /// itself (it cannot join itself).
    pub(super) fn stop(&self) {
        drop(self.jobs.lock().take());
        let thread = self.thread.lock().take();
        if let Some(thread) = thread {
            if thread.thread().id() == std::thread::current().id() {
                return;
            }
            if thread.join().is_err() {
                tracing::error!("the ZooKeeper executor thread panicked");
            }
        }
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        self.stop();
    }
}

fn timed_out(what: &str, effect: Effect) -> Error {
    match effect {
        Effect::Write => Error::CoordinatorOutcomeUnknown {
            operation: what.to_owned(),
            reason: "ZooKeeper did not answer in time (it may be unreachable or the session \
                     reconnecting); the write may or may not have been applied: re-read before retrying"
                .to_owned(),
        },
        Effect::Read => Error::Coordinator {
            reason: format!(
                "ZooKeeper did not answer in time to {what} (it may be unreachable or the session \
                 reconnecting); nothing was changed, retry later"
            ),
        },
    }
}

/// The executor thread: runs jobs until the queue closes.
fn run(jobs: mpsc::Receiver<Job>) {
    let mut pool = LocalPool::new();
    let spawner = pool.spawner();
    let hook = PoolSpawner {
        pool: spawner.clone(),
    };
    let _scope = spawns_core::enter(&hook);
    pool.run_until(jobs.for_each(|job| {
        let guarded = AssertUnwindSafe(job).catch_unwind().map(|outcome| {
            if outcome.is_err() {
                tracing::error!("a ZooKeeper coordinator task panicked");
            }
        });
        if spawner.spawn_local(guarded).is_err() {
            tracing::debug!("ZooKeeper coordinator job dropped at shutdown");
        }
        future::ready(())
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_answer_and_time_out_naming_what() {
        let executor = Executor::start("test-executor").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        assert_eq!(
            executor
                .call("add", Effect::Read, deadline, async { Ok(2 + 2) })
                .unwrap(),
            4
        );
        let deadline = Instant::now() + Duration::from_millis(50);
        let started = Instant::now();
        let outcome: Result<()> =
            executor.call("wait forever", Effect::Read, deadline, future::pending());
        match outcome {
            Err(Error::Coordinator { reason }) => {
                assert!(reason.contains("wait forever"), "{reason}");
                assert!(reason.contains("nothing was changed"), "{reason}");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(2));
        // A write that times out may have been applied: its outcome is
        // unknown, a distinct error naming the write.
        let deadline = Instant::now() + Duration::from_millis(50);
        let outcome: Result<()> =
            executor.call("write forever", Effect::Write, deadline, future::pending());
        match outcome {
            Err(Error::CoordinatorOutcomeUnknown { operation, reason }) => {
                assert_eq!(operation, "write forever");
                assert!(reason.contains("may or may not"), "{reason}");
            }
            other => panic!("expected an unknown outcome, got {other:?}"),
        }
    }

    #[test]
    fn a_panicking_job_fails_its_call_and_the_executor_survives() {
        let executor = Executor::start("test-executor").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let outcome =
            executor.call::<()>("explode", Effect::Read, deadline, async { panic!("boom") });
        assert!(
            matches!(&outcome, Err(Error::Coordinator { reason }) if reason.contains("explode")),
            "{outcome:?}"
        );
        assert_eq!(
            executor
                .call("add", Effect::Read, deadline, async { Ok(1 + 1) })
                .unwrap(),
            2
        );
    }

    #[test]
    fn stop_joins_the_thread_and_later_calls_fail() {
        let executor = Executor::start("test-executor").unwrap();
        executor.spawn(future::pending()).unwrap();
        executor.stop();
        assert!(executor.thread.lock().is_none());
        let deadline = Instant::now() + Duration::from_secs(1);
        assert!(matches!(
            executor.call("add", Effect::Read, deadline, async { Ok(1) }),
            Err(Error::Shutdown)
        ));
    }
}
