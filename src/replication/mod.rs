//! Replication: the pure state machines that decide SPEC §3.2–3.6, and the
//! runtime pieces of a replica built around them.
//!
//! The machines, `follower`, `high_watermark`, `isr`, `leader` and
//! `recent_writes`: the leader's view of its followers (ISR, high
//! watermark, fencing of fetches, divergence checks) and a follower's view
//! of its own log (high watermark, truncation after divergence, reset below
//! the leader's log start). They do no I/O, start no thread, take no lock
//! and read no clock. Every input is a method call carrying the event and,
//! where time matters, the caller's `now`; every output is the new state
//! plus what the caller must do (propose an ISR change, truncate the log,
//! wake waiters). (The shape follows openraft's `engine/`.)
//!
//! The runtime pieces, which do lock, wait, read the clock or reach the
//! log, the transport and the disk: `replica` (a hosted replica: its log,
//! role and the machines' state behind locks), `fetcher` (a follower's
//! fetch loop, threaded or stepped), `pending` and `completion` (appends
//! waiting for the high watermark, and the thread that completes them),
//! `combiner` (appends that arrive together written as one batch),
//! `applied` (applications' applied positions), `snapshot_transfer` and
//! `stepped_snapshot` (snapshot downloads, threaded and stepped: how the
//! bytes move) around `snapshot_download` (the chunk checks, restarts and
//! install both call),
//! `incarnations` and `watch`. The node's decisions live in
//! `crate::node::core`; the coordinator and the storage layer elsewhere.

mod applied;
mod combiner;
pub(crate) mod completion;
mod fetcher;
mod follower;
mod high_watermark;
mod incarnations;
mod isr;
mod leader;
mod pending;
mod recent_writes;
mod replica;
mod snapshot_download;
mod snapshot_transfer;
mod stepped_snapshot;
#[cfg(test)]
mod tests;
mod watch;

// The machines' types, for the table tests in `tests.rs`; the runtime
// pieces name them by their modules.
#[cfg(test)]
pub(crate) use follower::{
    truncation_for_divergence, DivergenceAction, FetchPosition, FetchedUpdate, FollowerState,
    Truncation,
};
#[cfg(test)]
pub(crate) use high_watermark::HighWatermarkUpdate;
#[cfg(test)]
pub(crate) use isr::IsrChangeKind;
pub(crate) use isr::{FetchArrival, IsrProposal};
#[cfg(test)]
pub(crate) use leader::{
    check_divergence, Divergence, FetchDecision, LeaderAssignment, LeaderConfig, LeaderState,
};

#[cfg(any(test, feature = "testing"))]
pub use combiner::{Combine, Combiner, Deferral};
pub use completion::{AppendHandle, Completion, CompletionRunner};
pub(crate) use fetcher::Fetcher;
#[cfg(any(test, feature = "testing"))]
pub(crate) use fetcher::{FetchSession, InFlight as FetchInFlight, NextFetch};
pub(crate) use incarnations::{IncarnationCheck, PeerIncarnations};
#[cfg(any(test, feature = "testing"))]
pub use pending::PendingAppends;
pub(crate) use replica::{BelowLeaderStart, DeferredWriter, Replica};
pub use replica::{DeletionBound, Role};
#[cfg(any(test, feature = "testing"))]
pub use watch::WaitOutcome;
pub use watch::Watch;

use crate::types::Offset;

pub(crate) use crate::types::EpochEndOffset;

/// The three offsets that bound a replica's log, as handed to a state
/// machine when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LogOffsets {
    /// First offset still in the log.
    pub(crate) log_start_offset: Offset,
    /// Every offset below it is committed.
    pub(crate) high_watermark: Offset,
    /// The offset the next record will get.
    pub(crate) log_end_offset: Offset,
}

impl LogOffsets {
    /// These offsets with the high watermark moved into
    /// `[log_start_offset, log_end_offset]`, as Kafka's
    /// `UnifiedLog.updateHighWatermark` does with a checkpointed value that
    /// no longer fits the log (a torn tail was truncated on recovery).
    pub(crate) fn with_high_watermark_clamped(self) -> LogOffsets {
        let high_watermark = self
            .high_watermark
            .min(self.log_end_offset)
            .max(self.log_start_offset);
        if high_watermark != self.high_watermark {
            tracing::warn!(
                given = %self.high_watermark,
                clamped = %high_watermark,
                log_start_offset = %self.log_start_offset,
                log_end_offset = %self.log_end_offset,
                "high watermark outside the log; clamped"
            );
        }
        LogOffsets {
            high_watermark,
            ..self
        }
    }
}
