//! Opening this node's replicas, as decisions: whether an open may run
//! now or is put off by the pause after its last failed attempts
//! ([`NodeCore::open_due`]), what each attempt's result means for the set
//! of replicas that could not be opened ([`NodeCore::open_attempted`]),
//! and that set itself, which the control pass retries
//! ([`NodeCore::retry_unopened`]), a stop reads
//! ([`NodeCore::unopened_logs`]) and a node reports
//! ([`NodeCore::logs_not_opened`]).
//!
//! Not owned here: the open (`NodeShared::open_replica`: the disk, the
//! log's recovery), whether it may cut damage (`NodeShared::open_may_cut`,
//! which the driver passes in) and the time: the driver reads its clock
//! and passes `now`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Action, Continuation, CoordinatorCall, NodeCore};
use crate::error::Error;
use crate::node::{OPEN_RETRY_BACKOFF_MAX, UNCLEAN_REPORT_RETRY_INTERVAL};
use crate::sync::Mutex;
use crate::types::LogId;

/// Whether an open of a replica may run now ([`NodeCore::open_due`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum OpenDue {
    /// Open it now.
    Now,
    /// Not before the pause after its last failed attempt is over: the
    /// driver answers [`Error::ReplicaOpenDeferred`].
    Deferred {
        /// The last attempt's error.
        last_error: String,
        /// How long until the next attempt may run.
        retry_in: Duration,
    },
}

/// The replicas of this node that could not be opened, each with its last
/// failed attempt. A log leaves it when its replica opens, is removed, or
/// no longer lists this node.
#[derive(Debug, Default)]
pub(super) struct Unopened {
    /// The last failed attempt of each replica not opened.
    failures: Mutex<HashMap<LogId, OpenFailure>>,
}

impl NodeCore {
    /// Whether `log`'s replica, which is not hosted, may be opened at
    /// `now` by an attempt that `may_cut` damage or not: not before the
    /// pause after its last failed attempt is over ([`OpenFailure`]),
    /// unless the attempt may do what those could not.
    pub(crate) fn open_due(&self, log: LogId, may_cut: bool, now: Instant) -> OpenDue {
        let failures = self.unopened.failures.lock();
        let Some(failure) = failures.get(&log) else {
            return OpenDue::Now;
        };
        match failure.retry_in(now, may_cut) {
            Some(retry_in) => OpenDue::Deferred {
                last_error: failure.error.clone(),
                retry_in,
            },
            None => OpenDue::Now,
        }
    }

    /// The attempt at `now` to open `log`'s replica, which `may_cut`
    /// damage or not, ended: opened (`error` `None`), which forgets its
    /// failures, or failed with `error`, one more failure in a row if the
    /// ones before could cut as much, else the first.
    pub(crate) fn open_attempted(
        &self,
        log: LogId,
        may_cut: bool,
        now: Instant,
        error: Option<&Error>,
    ) {
        let mut failures = self.unopened.failures.lock();
        let Some(error) = error else {
            failures.remove(&log);
            return;
        };
        let before = failures
            .get(&log)
            .filter(|failure| failure.may_cut == may_cut)
            .map_or(0, |failure| failure.failures);
        failures.insert(log, OpenFailure::after(before + 1, may_cut, error, now));
    }

    /// Forgets that `log`'s replica could not be opened: this node is no
    /// longer its replica, the log is gone, or the replica was removed.
    pub(crate) fn forget_unopened(&self, log: LogId) {
        self.unopened.failures.lock().remove(&log);
    }

    /// Whether `log`'s replica here could not be opened.
    pub(crate) fn is_unopened(&self, log: LogId) -> bool {
        self.unopened.failures.lock().contains_key(&log)
    }

    /// The logs whose replica here could not be opened, in log order.
    pub(crate) fn unopened_logs(&self) -> Vec<LogId> {
        let mut logs: Vec<LogId> = self.unopened.failures.lock().keys().copied().collect();
        logs.sort();
        logs
    }

    /// The logs whose replica here could not be opened, in log order,
    /// each with the last error and, as of `now`, when the next attempt
    /// may run and after how many failed attempts in a row
    /// (`Node::logs_not_opened`): "<error>; next attempt in 3.2s (3 failed
    /// attempts)", or "...; next attempt on the next retry (...)" once the
    /// pause is over.
    pub(crate) fn logs_not_opened(&self, now: Instant) -> Vec<(LogId, String)> {
        let mut logs: Vec<(LogId, String)> = self
            .unopened
            .failures
            .lock()
            .iter()
            .map(|(log, failure)| (*log, failure.describe(now)))
            .collect();
        logs.sort();
        logs
    }

    /// Reads again, in log order, every log whose replica here could not
    /// be opened, as the set is now ([`Action::RetryUnopened`]), and
    /// follows it while this node is its replica ([`Action::Reconcile`]),
    /// which tries to open it again; one that no longer lists this node is
    /// removed ([`Action::RemoveUnopened`]: its copy is deleted and its
    /// directory record unassigned), and one that is gone is forgotten.
    pub(crate) fn retry_unopened(&self, out: &mut Vec<Action>) {
        for log in self.unopened_logs() {
            Self::call(
                out,
                CoordinatorCall::LogState(log),
                Continuation::RetryUnopened(log),
            );
        }
    }
}

/// The last failed attempt to open a replica ([`NodeCore::open_attempted`]).
///
/// Invariant: `failures >= 1`, and `retry_at` is the attempt's time plus
/// [`open_retry_pause`]`(failures)`.
#[derive(Debug)]
struct OpenFailure {
    /// Its error, for `Node::logs_not_opened`.
    error: String,
    /// Failed attempts in a row, each with the same `may_cut`.
    failures: u32,
    /// Whether the attempts could cut damage
    /// (`NodeShared::open_may_cut`).
    may_cut: bool,
    /// No attempt before this.
    retry_at: Instant,
}

impl OpenFailure {
    /// The `failures`-th failed attempt in a row, at `now`.
    fn after(failures: u32, may_cut: bool, error: &Error, now: Instant) -> OpenFailure {
        debug_assert!(failures >= 1, "a failure counts itself");
        OpenFailure {
            error: error.to_string(),
            failures,
            may_cut,
            retry_at: now + open_retry_pause(failures),
        }
    }

    /// The last error, with when the next attempt may run as of `now`
    /// (the pause for an attempt that cuts as much as these) and how many
    /// attempts failed in a row.
    fn describe(&self, now: Instant) -> String {
        let attempts = if self.failures == 1 {
            "1 failed attempt".to_owned()
        } else {
            format!("{} failed attempts", self.failures)
        };
        match self.retry_in(now, self.may_cut) {
            Some(pause) => format!(
                "{}; next attempt in {:.1}s ({attempts})",
                self.error,
                pause.as_secs_f64()
            ),
            None => format!(
                "{}; next attempt on the next retry ({attempts})",
                self.error
            ),
        }
    }

    /// How long from `now` until the next attempt, which `may_cut` or
    /// not, may run, if it may not run now: at once if it may do what
    /// these attempts could not.
    fn retry_in(&self, now: Instant, may_cut: bool) -> Option<Duration> {
        if may_cut != self.may_cut {
            return None;
        }
        Some(self.retry_at.saturating_duration_since(now)).filter(|pause| !pause.is_zero())
    }
}

/// The pause after the `failures`-th failed attempt in a row to open a
/// replica: [`UNCLEAN_REPORT_RETRY_INTERVAL`], doubled per further failure,
/// at most [`OPEN_RETRY_BACKOFF_MAX`].
fn open_retry_pause(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    UNCLEAN_REPORT_RETRY_INTERVAL
        .saturating_mul(1 << doublings)
        .min(OPEN_RETRY_BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::core::tests::core;

    #[test]
    fn a_failing_open_is_retried_after_a_doubling_pause() {
        let pauses: Vec<u64> = (1..=6).map(|n| open_retry_pause(n).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 8, 8]);
        assert_eq!(open_retry_pause(u32::MAX), OPEN_RETRY_BACKOFF_MAX);
        let now = Instant::now();
        let error = Error::Shutdown;
        let failure = OpenFailure::after(3, false, &error, now);
        assert_eq!(failure.retry_in(now, false), Some(Duration::from_secs(4)));
        assert_eq!(
            failure.retry_in(now + Duration::from_secs(3), false),
            Some(Duration::from_secs(1))
        );
        assert_eq!(failure.retry_in(now + Duration::from_secs(4), false), None);
        assert_eq!(failure.retry_in(now + Duration::from_secs(60), false), None);
        // Once the node's report is stored, the open that may cut is tried
        // at once.
        assert_eq!(failure.retry_in(now, true), None);
    }

    /// The core counts failed attempts in a row, defers the next one by
    /// the pause their count gives on the time the driver passes, starts
    /// the count again for an attempt that may cut what they could not,
    /// and forgets a replica once it opens or is forgotten.
    #[test]
    fn an_open_is_deferred_after_failures_and_forgotten_once_it_opens() {
        let core = core();
        let log = LogId(1);
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let deferred = |retry_in: u64| OpenDue::Deferred {
            last_error: Error::Shutdown.to_string(),
            retry_in: Duration::from_secs(retry_in),
        };
        assert_eq!(core.open_due(log, false, at(0)), OpenDue::Now);
        core.open_attempted(log, false, at(0), Some(&Error::Shutdown));
        assert_eq!(core.open_due(log, false, at(0)), deferred(1));
        assert_eq!(core.open_due(log, true, at(0)), OpenDue::Now, "may cut");
        assert_eq!(core.open_due(log, false, at(1)), OpenDue::Now);
        core.open_attempted(log, false, at(1), Some(&Error::Shutdown));
        assert_eq!(core.open_due(log, false, at(1)), deferred(2), "doubled");
        assert_eq!(core.unopened_logs(), vec![log]);
        // The report says the last error, when the next attempt may run
        // and how many failed (review: it said only the error).
        let error = Error::Shutdown.to_string();
        assert_eq!(
            core.logs_not_opened(at(1)),
            vec![(
                log,
                format!("{error}; next attempt in 2.0s (2 failed attempts)")
            )]
        );
        assert_eq!(
            core.logs_not_opened(at(2) + Duration::from_millis(500)),
            vec![(
                log,
                format!("{error}; next attempt in 0.5s (2 failed attempts)")
            )]
        );
        assert_eq!(
            core.logs_not_opened(at(3)),
            vec![(
                log,
                format!("{error}; next attempt on the next retry (2 failed attempts)")
            )]
        );
        // An attempt that may cut starts the count again.
        core.open_attempted(log, true, at(3), Some(&Error::Shutdown));
        assert_eq!(core.open_due(log, true, at(3)), deferred(1));
        core.open_attempted(log, true, at(4), None);
        assert_eq!(core.open_due(log, true, at(4)), OpenDue::Now);
        assert_eq!(core.unopened_logs(), vec![]);
        core.open_attempted(LogId(3), false, at(4), Some(&Error::Shutdown));
        core.open_attempted(LogId(2), false, at(4), Some(&Error::Shutdown));
        assert_eq!(core.unopened_logs(), vec![LogId(2), LogId(3)]);
        core.forget_unopened(LogId(3));
        assert_eq!(core.unopened_logs(), vec![LogId(2)]);
    }
}
