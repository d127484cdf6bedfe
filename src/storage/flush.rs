//! Flush policy and group commit (SPEC 2.5), and the poison flag.
//!
//! This module owns the hand-off between appenders that must wait for an
//! fsync: who performs the next one, what it covers, and how the others
//! learn it finished. It does not know about files: the caller passes the
//! sync as a closure, which snapshots (under the log's lock) what to sync and
//! up to which offset, then syncs outside it.
//!
//! Protocol: an appender that needs its data durable calls
//! [`GroupCommit::wait_flushed`] with the end offset it needs covered. If an
//! fsync already covers it, it returns. Otherwise, if no fsync is in flight,
//! it becomes the syncer: it runs the closure with no lock held, publishes
//! the offset the closure covered, and wakes everyone. If one is in flight,
//! it waits for it to finish and checks again: appends that arrived during
//! an fsync share the next one. A failed fsync poisons the log for good: we
//! never retry one (the kernel may have dropped the pages it failed to
//! write, so a later success would prove nothing).
//!
//! Truncation lowers the flushed offset and bumps a generation number, so a
//! sync that snapshotted the log before the truncation cannot publish an
//! offset the truncated log no longer has on disk.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::sync::{AtomicBool, Condvar, Mutex, Ordering};
use crate::types::Offset;

/// When the log fsyncs its data (SPEC 2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// No fsync for the append's own records; the operating system writes
    /// the data back when it likes (Kafka's default). Data reaches the disk
    /// when a segment rolls, on `flush` and on `close`. A node's logs make
    /// a rolled segment durable on a background thread, as Kafka does; a
    /// standalone [`Log`](crate::Log) has no such thread, so the
    /// append that rolls a segment also fsyncs it (seconds per GiB of
    /// unsynced data): call `flush` from a thread of your own, or keep
    /// segments small, if that stall matters.
    #[default]
    Never,
    /// Fsync once `messages` records were appended since the last fsync, or
    /// `interval` passed since it (checked on append), whichever comes first.
    Every {
        /// Records appended since the last fsync that trigger one.
        messages: u64,
        /// Time since the last fsync that triggers one.
        interval: Duration,
    },
    /// Fsync before an append returns; concurrent appends share one fsync
    /// (group commit).
    Always,
}

/// What one sync covered: everything below `covered`, as of the log state
/// with truncation generation `generation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SyncOutcome {
    /// Every offset below this is durable.
    pub covered: Offset,
    /// The truncation generation the sync snapshotted.
    pub generation: u64,
}

#[derive(Debug)]
struct CommitState {
    /// Invariant: every offset below it was fsynced (and is still in the log).
    flushed_offset: Offset,
    /// Whether a syncer is running the sync closure right now.
    sync_in_flight: bool,
    /// Bumped by every truncation.
    generation: u64,
    /// Why the log is poisoned, once it is.
    poisoned: Option<String>,
}

/// The group commit hand-off and the log's poison flag.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    state: Mutex<CommitState>,
    synced: Condvar,
    /// Mirrors `state.poisoned.is_some()` so the hot path checks it without
    /// taking the lock.
    poisoned: AtomicBool,
}

/// How long a waiter sleeps before re-checking; a wake-up is never missed
/// (the state is checked under the mutex), this only bounds each wait as
/// STYLE asks. An append under `Always` keeps waiting as long as the fsync
/// takes: returning before it would break the promise.
const RECHECK_INTERVAL: Duration = Duration::from_millis(100);

impl GroupCommit {
    /// A hand-off for a log whose data is durable below `flushed_offset`.
    pub(crate) fn new(flushed_offset: Offset) -> GroupCommit {
        GroupCommit {
            state: Mutex::new(CommitState {
                flushed_offset,
                sync_in_flight: false,
                generation: 0,
                poisoned: None,
            }),
            synced: Condvar::new(),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Every offset below this is durable.
    pub(crate) fn flushed_offset(&self) -> Offset {
        self.state.lock().flushed_offset
    }

    /// The current truncation generation (read it under the log's lock,
    /// together with what a sync will cover).
    pub(crate) fn generation(&self) -> u64 {
        self.state.lock().generation
    }

    /// `Err(Poisoned)` once any write or fsync failed.
    pub(crate) fn check_not_poisoned(&self, log_dir: &std::path::Path) -> Result<()> {
        if !self.poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        let reason = self
            .state
            .lock()
            .poisoned
            .clone()
            .unwrap_or_else(|| "unknown failure".to_string());
        Err(Error::Poisoned {
            path: log_dir.to_path_buf(),
            reason,
        })
    }

    /// Whether a write or fsync failed.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Marks the log as poisoned (the first reason wins) and wakes waiters.
    pub(crate) fn poison(&self, reason: String) {
        self.refuse_all(reason, true);
    }

    /// As [`poison`](Self::poison), for a log its owner is done with
    /// ([`Log::retire`](super::Log::retire)): no failure, so no error is
    /// logged.
    pub(crate) fn retire(&self, reason: String) {
        self.refuse_all(reason, false);
    }

    fn refuse_all(&self, reason: String, failed: bool) {
        let mut state = self.state.lock();
        if state.poisoned.is_none() {
            if failed {
                tracing::error!(%reason, "log poisoned: refusing all further work until reopened");
            } else {
                tracing::debug!(%reason, "log retired: refusing all further work");
            }
            state.poisoned = Some(reason);
        }
        self.poisoned.store(true, Ordering::Release);
        drop(state);
        self.synced.notify_all();
    }

    /// The log was truncated to `offset`: nothing at or above it is durable
    /// any more, and in-flight syncs must not publish.
    pub(crate) fn truncated_to(&self, offset: Offset) {
        let mut state = self.state.lock();
        state.flushed_offset = state.flushed_offset.min(offset);
        state.generation += 1;
    }

    /// The log was emptied and restarted at `offset` (nothing in it).
    pub(crate) fn restarted_at(&self, offset: Offset) {
        let mut state = self.state.lock();
        state.flushed_offset = offset;
        state.generation += 1;
    }

    /// Returns once every offset below `offset` is durable, running the sync
    /// itself if no other thread is. `sync` snapshots what to sync under the
    /// log's lock (with the generation), syncs, and says what it covered.
    ///
    /// A log truncated below `offset` since the caller read it (a follower
    /// cutting its divergent tail while the roll flusher or the periodic
    /// flush runs `Log::flush` to the end it read before) no longer holds
    /// the offsets above its new end: once a sync of this generation
    /// covered everything the log held, the wait is over. Before, the
    /// waiter synced again and again for offsets that were gone, for ever
    /// if the log did not grow back past them: a crashing node's stop
    /// joined its roll flusher spinning there, after stopping the fetchers
    /// that could have grown the log (the hang of
    /// `pipelined_appends_resolved_under_power_loss_flush_never`).
    pub(crate) fn wait_flushed(
        &self,
        offset: Offset,
        log_dir: &std::path::Path,
        mut sync: impl FnMut() -> Result<SyncOutcome>,
    ) -> Result<()> {
        let mut state = self.state.lock();
        loop {
            if let Some(reason) = &state.poisoned {
                return Err(Error::Poisoned {
                    path: log_dir.to_path_buf(),
                    reason: reason.clone(),
                });
            }
            if state.flushed_offset >= offset {
                return Ok(());
            }
            if state.sync_in_flight {
                // Bounded wait, then re-check (see RECHECK_INTERVAL).
                crate::simulation::forbid_in_simulation("a wait for another thread's fsync");
                let _timed_out = self.synced.wait_for(&mut state, RECHECK_INTERVAL);
                continue;
            }
            state.sync_in_flight = true;
            drop(state);
            let outcome = sync();
            state = self.state.lock();
            state.sync_in_flight = false;
            match outcome {
                Ok(done) => {
                    let current = done.generation == state.generation;
                    if current && done.covered > state.flushed_offset {
                        state.flushed_offset = done.covered;
                    }
                    if current && done.covered < offset {
                        // The log ended below `offset` when this sync
                        // snapshotted it, and all of it is durable.
                        drop(state);
                        self.synced.notify_all();
                        return Ok(());
                    }
                }
                Err(e) => {
                    let reason = e.to_string();
                    if state.poisoned.is_none() {
                        tracing::error!(%reason, "fsync failed: log poisoned");
                        state.poisoned = Some(reason);
                    }
                    self.poisoned.store(true, Ordering::Release);
                    drop(state);
                    self.synced.notify_all();
                    return Err(e);
                }
            }
            self.synced.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::{Arc, AtomicU64};

    #[test]
    fn a_covered_offset_returns_without_syncing() {
        let commit = GroupCommit::new(Offset(10));
        let dir = std::path::Path::new("/x");
        commit
            .wait_flushed(Offset(10), dir, || panic!("no sync needed"))
            .unwrap();
    }

    #[test]
    fn stale_generation_does_not_publish_and_the_waiter_syncs_again() {
        let commit = GroupCommit::new(Offset(0));
        let dir = std::path::Path::new("/x");
        let mut calls = 0;
        commit
            .wait_flushed(Offset(5), dir, || {
                calls += 1;
                if calls == 1 {
                    // A truncation lands while the first sync runs.
                    commit.truncated_to(Offset(3));
                    Ok(SyncOutcome {
                        covered: Offset(8),
                        generation: 0,
                    })
                } else {
                    Ok(SyncOutcome {
                        covered: Offset(6),
                        generation: commit.generation(),
                    })
                }
            })
            .unwrap();
        assert_eq!(calls, 2);
        assert_eq!(commit.flushed_offset(), Offset(6));
    }

    /// Regression (the hang of `pipelined_appends_resolved_under_power_loss_flush_never`):
    /// a log truncated below the offset a flush waits for, and not growing
    /// back, made the waiter sync for ever (a crashing node's stop then
    /// waited for its roll flusher for ever). The wait ends once a sync of
    /// the current generation covered everything the log holds.
    #[test]
    fn a_wait_for_offsets_truncated_away_ends_once_what_remains_is_durable() {
        let commit = GroupCommit::new(Offset(0));
        let dir = std::path::Path::new("/x");
        let mut calls = 0;
        commit
            .wait_flushed(Offset(10), dir, || {
                calls += 1;
                assert!(
                    calls <= 2,
                    "synced {calls} times for offsets the log no longer has"
                );
                if calls == 1 {
                    // A follower cuts its tail to 4 while this sync runs.
                    commit.truncated_to(Offset(4));
                    Ok(SyncOutcome {
                        covered: Offset(10),
                        generation: 0,
                    })
                } else {
                    Ok(SyncOutcome {
                        covered: Offset(4),
                        generation: commit.generation(),
                    })
                }
            })
            .unwrap();
        assert_eq!(calls, 2);
        assert_eq!(commit.flushed_offset(), Offset(4));
        // A truncation before the call (the flush read the end, then the
        // log was cut): one sync of what remains.
        commit.truncated_to(Offset(2));
        let mut calls = 0;
        commit
            .wait_flushed(Offset(4), dir, || {
                calls += 1;
                assert!(
                    calls <= 1,
                    "synced {calls} times for offsets the log no longer has"
                );
                Ok(SyncOutcome {
                    covered: Offset(2),
                    generation: commit.generation(),
                })
            })
            .unwrap();
        assert_eq!(commit.flushed_offset(), Offset(2));
    }

    #[test]
    fn a_failed_sync_poisons_for_good() {
        let commit = GroupCommit::new(Offset(0));
        let dir = std::path::Path::new("/x");
        let failed = commit.wait_flushed(Offset(1), dir, || {
            Err(Error::io(dir, "fsync", std::io::Error::other("EIO")))
        });
        assert!(matches!(failed, Err(Error::Io { .. })));
        assert!(matches!(
            commit.wait_flushed(Offset(1), dir, || unreachable!()),
            Err(Error::Poisoned { .. })
        ));
        match commit.check_not_poisoned(dir) {
            Err(Error::Poisoned { path, reason }) => {
                assert_eq!(path, dir);
                assert!(reason.contains("EIO"), "the failure is named: {reason}");
            }
            other => panic!("a failed sync did not poison: {other:?}"),
        }
    }

    #[test]
    fn concurrent_waiters_share_syncs() {
        let commit = Arc::new(GroupCommit::new(Offset(0)));
        let end = Arc::new(AtomicU64::new(0));
        let syncs = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (commit, end, syncs) = (commit.clone(), end.clone(), syncs.clone());
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        let mine = Offset(end.fetch_add(1, Ordering::SeqCst) + 1);
                        commit
                            .wait_flushed(mine, std::path::Path::new("/x"), || {
                                syncs.fetch_add(1, Ordering::SeqCst);
                                let covered = Offset(end.load(Ordering::SeqCst));
                                std::thread::sleep(Duration::from_micros(200));
                                Ok(SyncOutcome {
                                    covered,
                                    generation: 0,
                                })
                            })
                            .unwrap();
                        assert!(commit.flushed_offset() >= mine);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(syncs.load(Ordering::SeqCst) <= 200);
    }
}
