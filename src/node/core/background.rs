//! A log's background work, as decisions: a log hands off the flush a
//! roll needs and the file work of a follower's log start moves (issue 27,
//! issue 25); the core asks for it to run in the background
//! ([`NodeCore::background_wanted`], [`Action::Background`]) and decides
//! what its end means ([`NodeCore::background_done`], [`background_end`]).
//!
//! Not owned here: running it (the threaded driver's roll flush thread,
//! the simulator's held jobs, which it runs when its run says), and the
//! work itself (`Log::flush`, `Log::finish_log_start_moves`). Neither
//! decision reads node state: a log's hook reaches the core without a
//! reference to the node (a strong one would keep the node's replicas
//! alive through their own logs), so both are associated functions.

use super::{Action, NodeCore};
use crate::error::{Error, Result};
use crate::storage::BackgroundWork;
use crate::types::LogId;

/// What the end of a log's background work means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackgroundEnd {
    /// It ran.
    Done,
    /// The log refused it, poisoned: the failure that poisoned it was
    /// reported when it happened (or the process was halted), so this is
    /// no news.
    SkippedPoisoned,
    /// It failed: an error to report (the log is poisoned by it, if it
    /// was an fsync's).
    Failed,
}

/// What `result`, the end of a log's background work, means.
pub(crate) fn background_end(result: &Result<()>) -> BackgroundEnd {
    match result {
        Ok(()) => BackgroundEnd::Done,
        Err(Error::Poisoned { .. }) => BackgroundEnd::SkippedPoisoned,
        Err(_) => BackgroundEnd::Failed,
    }
}

impl NodeCore {
    /// `log` handed off `work` (its caller's thread does not do it): asks
    /// for it to run in the background. The driver carries the action out
    /// where the log's hook is called, and tells the log whether the work
    /// was taken (if not, the log's caller does it itself).
    pub(crate) fn background_wanted(log: LogId, work: BackgroundWork, out: &mut Vec<Action>) {
        out.push(Action::Background { log, work });
    }

    /// `log`'s background `work` ended with `result` (the plan's
    /// `Input::BackgroundDone`, an associated function for the reason in
    /// the module doc): a failure other than a poisoned log is reported;
    /// no action is asked for (the log poisoned itself if an fsync failed,
    /// and its next call says so).
    pub(crate) fn background_done(log: LogId, work: BackgroundWork, result: Result<()>) {
        let end = background_end(&result);
        if let Err(error) = result {
            if end == BackgroundEnd::SkippedPoisoned {
                tracing::debug!(%log, ?work, %error, "background log work skipped: the log is poisoned");
            } else {
                tracing::error!(%log, ?work, %error, "background log work failed");
                crate::simulation::note_handled_error(&error);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Runs `background_wanted` for `log`'s `work`; the actions asked for.
    fn wanted(log: LogId, work: BackgroundWork) -> Vec<Action> {
        let mut out = Vec::new();
        NodeCore::background_wanted(log, work, &mut out);
        out
    }

    #[test]
    fn handed_off_work_is_asked_for_in_the_background_once_for_its_log() {
        for work in [
            BackgroundWork::FlushRoll,
            BackgroundWork::FinishLogStartMoves,
        ] {
            assert_eq!(
                wanted(LogId(7), work),
                vec![Action::Background {
                    log: LogId(7),
                    work
                }]
            );
        }
    }

    #[test]
    fn the_end_of_background_work_reports_only_real_failures() {
        let poisoned = Error::Poisoned {
            path: PathBuf::from("/data/log-7"),
            reason: "fsync failed".into(),
        };
        let failed = Error::InvalidBatch {
            reason: "stand-in for an I/O failure".into(),
        };
        let table = [
            (Ok(()), BackgroundEnd::Done),
            (Err(poisoned), BackgroundEnd::SkippedPoisoned),
            (Err(failed), BackgroundEnd::Failed),
        ];
        for (result, end) in table {
            assert_eq!(background_end(&result), end, "{result:?}");
        }
    }
}
