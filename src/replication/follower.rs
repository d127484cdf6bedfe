//! A follower's state machine for one log: what to ask the leader for, what
//! to make of its answers (high watermark, log start), and how far to
//! truncate when the leader says the logs diverge (SPEC §3.2, §3.6).
//!
//! It owns the follower's view of its own log's offsets and of its leader.
//! It does not fetch, append, truncate or read the epoch cache: the caller
//! does, and reports the results here.

use super::{EpochEndOffset, LogOffsets};
use crate::types::{LeaderEpoch, NodeId, Offset};

/// How far a follower truncates after a `diverging` answer.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Truncation {
    /// Remove every record at or above this offset.
    pub(crate) truncate_to: Offset,
    /// `true`: the logs now agree, fetch normally. `false`: the follower
    /// does not know the leader's epoch and truncated only to the end of its
    /// own older epoch; the next fetch (with the new last epoch) may
    /// diverge again (the KIP-279 loop).
    pub(crate) resolved: bool,
}

/// SPEC §3.6: where a follower truncates when the leader answered
/// `diverging { epoch: e, end_offset: off }`, given the follower's own
/// `end_offset_for_epoch(e)` as `local_lookup = (fe, fo)` and its log end.
/// (Kafka's `AbstractFetcherThread.getOffsetTruncationState`.)
///
/// - `fe == e`: both logs hold epoch `e`, ending at `fo` here and at `off`
///   there; they agree up to the smaller end: `min(fo, off, LEO)`, done.
/// - `fe != e` (then `fe < e`): the follower never saw epoch `e`; its
///   epoch `fe` ends at `fo`, and whatever it holds past that may be in
///   epochs the leader does not have: `min(fo, LEO)`, and ask again.
/// - no answer (an empty cache, or `e` newer than every epoch it knows):
///   trust the leader's end: `min(off, LEO)`, done.
///
/// The SPEC's "knows no epoch `<= e`" also covers `e` older than the
/// follower's first epoch, but an epoch cache answers that with `(e, start
/// of its first epoch)`, so it takes the `fe == e` branch and truncates to
/// `min(first epoch start, off, LEO)`, as Kafka does. That is the right
/// answer: every record the follower holds from its first epoch's start on
/// is in an epoch newer than `e`, while the leader's records below `off`
/// are in epochs `<= e`, so none of them can match; `min(off, LEO)` alone
/// would keep them.
pub(crate) fn truncation_for_divergence(
    leader: EpochEndOffset,
    local_lookup: Option<EpochEndOffset>,
    own_log_end_offset: Offset,
) -> Truncation {
    match local_lookup {
        Some(local) if local.epoch == leader.epoch => Truncation {
            truncate_to: local
                .end_offset
                .min(leader.end_offset)
                .min(own_log_end_offset),
            resolved: true,
        },
        Some(local) => Truncation {
            truncate_to: local.end_offset.min(own_log_end_offset),
            resolved: false,
        },
        None => Truncation {
            truncate_to: leader.end_offset.min(own_log_end_offset),
            resolved: true,
        },
    }
}

/// The per-log fields of a follower's next fetch (SPEC §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FetchPosition {
    /// The follower's log end offset: it acknowledges everything below.
    pub(crate) fetch_offset: Offset,
    /// Epoch of the follower's last batch; `None` for an empty log.
    pub(crate) last_fetched_epoch: Option<LeaderEpoch>,
    /// The follower's view of the leader epoch, for fencing.
    pub(crate) current_leader_epoch: LeaderEpoch,
}

/// What applying a fetch answer did.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FetchedUpdate {
    /// The answer was applied.
    Applied {
        /// The follower's high watermark now.
        high_watermark: Offset,
        /// The follower's log start offset now; if it rose, the caller
        /// deletes its own segments below it.
        log_start_offset: Offset,
    },
    /// The follower's log ends below the leader's log start: the caller
    /// discards the whole local log and restarts it, empty, at
    /// `log_start_offset` (SPEC §3.6). The state already says so.
    ResetTo {
        /// The leader's log start offset, the new start and end here.
        log_start_offset: Offset,
    },
}

/// The follower's state for one log under one leader epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FollowerState {
    /// The node this follower fetches from.
    leader: NodeId,
    /// The epoch of that leader.
    leader_epoch: LeaderEpoch,
    /// The follower's log end offset.
    log_end_offset: Offset,
    /// Invariant: log_start_offset <= high_watermark <= log_end_offset.
    /// May move backwards (a new leader may know a lower one); the leader's
    /// never does.
    high_watermark: Offset,
    /// The follower's log start offset.
    log_start_offset: Offset,
}

impl FollowerState {
    /// The state of a replica that follows `leader` in `leader_epoch`, with
    /// its log as it is. The log is *not* truncated to the high watermark
    /// (SPEC §3.6): that pre-0.11 rule loses committed data; divergence is
    /// found through epochs on the first fetch instead.
    pub(crate) fn become_follower(
        leader: NodeId,
        leader_epoch: LeaderEpoch,
        log: LogOffsets,
    ) -> FollowerState {
        let log = log.with_high_watermark_clamped();
        let state = FollowerState {
            leader,
            leader_epoch,
            log_end_offset: log.log_end_offset,
            high_watermark: log.high_watermark,
            log_start_offset: log.log_start_offset,
        };
        state.debug_check_invariants();
        state
    }

    /// The per-log fields of the next fetch. `last_fetched_epoch` is the
    /// epoch of the follower's last batch (the caller's epoch cache knows).
    pub(crate) fn next_fetch(&self, last_fetched_epoch: Option<LeaderEpoch>) -> FetchPosition {
        FetchPosition {
            fetch_offset: self.log_end_offset,
            last_fetched_epoch,
            current_leader_epoch: self.leader_epoch,
        }
    }

    /// A fetch answer without divergence was applied: the caller appended
    /// its batches (if any) and the log now ends at `new_log_end_offset`;
    /// the answer carried the leader's high watermark and log start.
    ///
    /// The high watermark becomes `min(leader HW, own LEO)` (SPEC §3.2): a
    /// follower never claims as committed what it does not hold. The log
    /// start rises to the leader's, unless the whole log is below it; then
    /// the follower must reset.
    pub(crate) fn on_fetched(
        &mut self,
        leader_high_watermark: Offset,
        leader_log_start_offset: Offset,
        new_log_end_offset: Offset,
    ) -> FetchedUpdate {
        self.log_end_offset = new_log_end_offset;
        if self.log_end_offset < leader_log_start_offset {
            tracing::warn!(
                leader = %self.leader,
                log_end_offset = %self.log_end_offset,
                leader_log_start_offset = %leader_log_start_offset,
                "follower log ends below the leader's log start; resetting"
            );
            self.reset_to(leader_log_start_offset);
            return FetchedUpdate::ResetTo {
                log_start_offset: leader_log_start_offset,
            };
        }
        self.log_start_offset = self.log_start_offset.max(leader_log_start_offset);
        self.high_watermark = leader_high_watermark
            .min(self.log_end_offset)
            .max(self.log_start_offset);
        self.debug_check_invariants();
        FetchedUpdate::Applied {
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
        }
    }

    /// The leader answered `diverging`; `local_lookup` is this follower's
    /// `end_offset_for_epoch(leader.epoch)`. Returns where the caller must
    /// truncate the log (before applying anything else from that answer)
    /// and moves this state there.
    pub(crate) fn on_diverging(
        &mut self,
        leader: EpochEndOffset,
        local_lookup: Option<EpochEndOffset>,
    ) -> Truncation {
        let truncation = truncation_for_divergence(leader, local_lookup, self.log_end_offset);
        tracing::info!(
            leader = %self.leader,
            diverging_epoch = %leader.epoch,
            diverging_end_offset = %leader.end_offset,
            truncate_to = %truncation.truncate_to,
            resolved = truncation.resolved,
            "follower log diverges from the leader's; truncating"
        );
        self.on_truncated(truncation.truncate_to);
        truncation
    }

    /// The log was truncated to end at `log_end_offset`. A truncation below
    /// the log start leaves an empty log starting there (Kafka's
    /// `truncateFullyAndStartAt`).
    pub(crate) fn on_truncated(&mut self, log_end_offset: Offset) {
        self.log_end_offset = log_end_offset;
        self.log_start_offset = self.log_start_offset.min(log_end_offset);
        self.high_watermark = self.high_watermark.min(log_end_offset);
        self.debug_check_invariants();
    }

    /// A new leader (or epoch) for this log. The log stays as it is.
    pub(crate) fn on_new_leader(&mut self, leader: NodeId, leader_epoch: LeaderEpoch) {
        self.leader = leader;
        self.leader_epoch = leader_epoch;
    }

    /// The node this follower fetches from.
    pub(crate) fn leader(&self) -> NodeId {
        self.leader
    }

    /// The epoch of that leader.
    pub(crate) fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    /// The follower's log end offset.
    pub(crate) fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }

    /// The follower's high watermark; reads stop below it.
    pub(crate) fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// The follower's log start offset.
    pub(crate) fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }

    /// The invariants of the follower state; `Err` names the broken one.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        if self.log_start_offset <= self.high_watermark
            && self.high_watermark <= self.log_end_offset
        {
            Ok(())
        } else {
            Err(format!(
                "log start {} <= high watermark {} <= log end {} does not hold",
                self.log_start_offset, self.high_watermark, self.log_end_offset
            ))
        }
    }

    fn debug_check_invariants(&self) {
        debug_assert_eq!(self.check_invariants(), Ok(()), "{self:?}");
    }

    fn reset_to(&mut self, log_start_offset: Offset) {
        self.log_start_offset = log_start_offset;
        self.log_end_offset = log_start_offset;
        self.high_watermark = log_start_offset;
        self.debug_check_invariants();
    }
}
