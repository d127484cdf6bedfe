//! Replication state machines: the leader's view of its followers (ISR, high
//! watermark, fencing of fetches, divergence checks) and a follower's view of
//! its own log (high watermark, truncation after divergence, reset below the
//! leader's log start).
//!
//! This module owns the *decisions* of SPEC §3.2–3.6 and nothing else: it
//! does no I/O, starts no thread and reads no clock. Every input is a method
//! call carrying the event and, where time matters, the caller's `now`; every
//! output is the new state plus what the caller must do (propose an ISR
//! change, truncate the log, wake waiters). The node's thread loop, the
//! storage layer's epoch cache and the coordinator live elsewhere.
//! (The shape follows openraft's `engine/`.)

// Some getters and table-test helpers are not used by the node yet.
#![allow(dead_code, unused_imports)]

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
mod snapshot_transfer;
mod stepped_snapshot;
#[cfg(test)]
mod tests;
mod watch;

pub(crate) use follower::{
    truncation_for_divergence, DivergenceAction, FetchPosition, FetchedUpdate, FollowerState,
    OutOfRangeAction, Truncation,
};
pub(crate) use high_watermark::{next_high_watermark, HighWatermarkInputs, HighWatermarkUpdate};
pub(crate) use isr::{
    FetchArrival, FetchCounted, FollowerProgress, IsrChangeKind, IsrProposal, PendingIsrChange,
};
pub(crate) use leader::{
    check_divergence, AcksAllProgress, Divergence, FetchDecision, FetchRejection, FollowerLag,
    LeaderAssignment, LeaderConfig, LeaderState, RereadCoordinatorState,
};

pub use combiner::{Combine, Combiner, Deferral};
pub use completion::{AppendHandle, Completion, CompletionRunner};
pub(crate) use fetcher::Fetcher;
#[cfg(any(test, feature = "testing"))]
pub(crate) use fetcher::{FetchSession, InFlight as FetchInFlight, NextFetch};
pub(crate) use incarnations::{IncarnationCheck, PeerIncarnations};
pub use pending::PendingAppends;
pub(crate) use replica::{BelowLeaderStart, DeferredWriter, Replica};
pub use replica::{DeletionBound, Role};
pub use watch::{WaitOutcome, Watch};

use crate::types::{LeaderEpoch, Offset};

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
