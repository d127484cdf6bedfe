//! A named thread that can be joined with a deadline.
//!
//! `JoinHandle::join` waits forever; shutting a transport down must not (a
//! handler stuck in a long poll would hang it). Each worker's closure owns the
//! sending half of a channel that nobody sends on: the channel disconnects
//! when the closure returns or unwinds, and the joiner waits for that with a
//! deadline.

use std::io;
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};

/// A running thread and the means to wait for its end.
pub(crate) struct Worker {
    name: String,
    handle: JoinHandle<()>,
    finished: Receiver<()>,
}

impl Worker {
    /// Starts `body` on a new thread called `name`.
    pub(crate) fn spawn<F>(name: String, body: F) -> io::Result<Worker>
    where
        F: FnOnce() + Send + 'static,
    {
        let (finished_sender, finished) = bounded::<()>(0);
        let handle = thread::Builder::new().name(name.clone()).spawn(move || {
            let _finished_sender = finished_sender;
            body();
        })?;
        Ok(Worker {
            name,
            handle,
            finished,
        })
    }

    /// Whether the thread has ended.
    pub(crate) fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Waits until the thread ends or `deadline` passes. A thread still
    /// running at the deadline is detached with a warning; returns whether it
    /// ended.
    pub(crate) fn join_until(self, deadline: Instant) -> bool {
        // A server dropped by one of its own handlers must not wait for the
        // very thread doing the dropping.
        if self.handle.thread().id() == thread::current().id() {
            return false;
        }
        match self.finished.recv_deadline(deadline) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if self.handle.join().is_err() {
                    tracing::warn!(thread = %self.name, "thread panicked");
                }
                true
            }
            Err(RecvTimeoutError::Timeout) => {
                tracing::warn!(thread = %self.name, "thread did not stop by the shutdown deadline; detaching it");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn join_until_waits_for_a_finishing_thread_and_gives_up_on_a_stuck_one() {
        let quick = Worker::spawn("quick".into(), || {}).expect("spawn");
        assert!(quick.join_until(Instant::now() + Duration::from_secs(5)));

        let (release, wait) = bounded::<()>(0);
        let stuck = Worker::spawn("stuck".into(), move || {
            // Disconnected (when `release` drops) or timed out: either way the thread ends.
            let _ = wait.recv_timeout(Duration::from_secs(5));
        })
        .expect("spawn");
        let started = Instant::now();
        assert!(!stuck.join_until(started + Duration::from_millis(20)));
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(release);
    }
}
