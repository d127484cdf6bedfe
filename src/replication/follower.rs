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

/// What a follower does about a `diverging` answer.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DivergenceAction {
    /// Truncate the log as told, then fetch again at once.
    Truncate(Truncation),
    /// The rule cuts nothing here, yet the leader says the logs diverge:
    /// asking again at once would get the same answer. Back off and ask
    /// later (the leader, or this replica's epoch cache, moves on
    /// meanwhile) instead of spinning. The state is unchanged.
    BackOff,
}

/// What a follower does about an `OffsetOutOfRange` answer.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutOfRangeAction {
    /// The follower's log ends below the leader's log start: the caller
    /// discards the whole local log and restarts it, empty, at
    /// `log_start_offset` (SPEC §3.6). The state already says so.
    ResetTo {
        /// The leader's log start offset, the new start and end here.
        log_start_offset: Offset,
    },
    /// The follower's log ends above the leader's (an unclean election of
    /// a shorter log, or a log reopened empty at its old start after a
    /// crash inside a restart, which names no last epoch to check): the
    /// caller truncates the local log to `log_end_offset`, the leader's
    /// end (Kafka's `handleOutOfRangeError`). The state already says so.
    TruncateTo {
        /// The leader's log end offset.
        log_end_offset: Offset,
    },
    /// Nothing this follower can repair: back off and ask again.
    BackOff,
}

/// The per-log fields of a follower's next fetch (SPEC §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FetchPosition {
    /// The end of what the follower acknowledges (everything below it):
    /// its log end offset, or under `FlushPolicy::Always` the end of what
    /// it has fsynced (SPEC §2.5).
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
    /// Falls only with the log end (a truncation or a reset), never because
    /// a leader reports a lower one: see `on_fetched`.
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
    /// `flushed_offset` is `Some(end of what is fsynced)` under
    /// `FlushPolicy::Always`, `None` when every appended record counts:
    /// with `Always` a follower acknowledges only flushed data, so that
    /// `acks=all` means "on the disk of every ISR member" (SPEC §2.5).
    pub(crate) fn next_fetch(
        &self,
        last_fetched_epoch: Option<LeaderEpoch>,
        flushed_offset: Option<Offset>,
    ) -> FetchPosition {
        let fetch_offset = match flushed_offset {
            Some(flushed) => flushed.min(self.log_end_offset),
            None => self.log_end_offset,
        };
        FetchPosition {
            fetch_offset,
            last_fetched_epoch,
            current_leader_epoch: self.leader_epoch,
        }
    }

    /// A fetch answer without divergence was applied: the caller appended
    /// its batches (if any) and the log now ends at `new_log_end_offset`;
    /// the answer carried the leader's high watermark and log start.
    ///
    /// The high watermark becomes `min(leader HW, own LEO)` (SPEC §3.2): a
    /// follower never claims as committed what it does not hold. As in
    /// Kafka (`UnifiedLog.updateHighWatermark` on a follower) it takes the
    /// leader's value as it is, so a new leader that has not yet learned
    /// its followers' log ends can move it back; nothing committed is lost
    /// by that, reads just wait a little longer.
    ///
    /// The log start rises to the leader's, unless the whole log is below
    /// it; then the follower must reset.
    pub(crate) fn on_fetched(
        &mut self,
        leader_high_watermark: Offset,
        leader_log_start_offset: Offset,
        new_log_end_offset: Offset,
    ) -> FetchedUpdate {
        debug_assert!(
            new_log_end_offset >= self.log_end_offset,
            "an append moved the log end back: {new_log_end_offset} < {self:?}"
        );
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
    /// and moves this state there, or `BackOff` when that cuts nothing.
    pub(crate) fn on_diverging(
        &mut self,
        leader: EpochEndOffset,
        local_lookup: Option<EpochEndOffset>,
    ) -> DivergenceAction {
        let truncation = truncation_for_divergence(leader, local_lookup, self.log_end_offset);
        if truncation.truncate_to >= self.log_end_offset {
            tracing::warn!(
                leader = %self.leader,
                diverging_epoch = %leader.epoch,
                diverging_end_offset = %leader.end_offset,
                log_end_offset = %self.log_end_offset,
                "diverging answer truncates nothing; backing off"
            );
            return DivergenceAction::BackOff;
        }
        tracing::info!(
            leader = %self.leader,
            diverging_epoch = %leader.epoch,
            diverging_end_offset = %leader.end_offset,
            truncate_to = %truncation.truncate_to,
            resolved = truncation.resolved,
            "follower log diverges from the leader's; truncating"
        );
        self.on_truncated(truncation.truncate_to);
        DivergenceAction::Truncate(truncation)
    }

    /// The leader answered `OffsetOutOfRange` and reported its log start
    /// and end. A follower whose log ends below the start restarts there
    /// (SPEC §3.6; Kafka's `AbstractFetcherThread.fetchOffsetAndTruncate`
    /// does `truncateFullyAndStartAt(leaderStartOffset)`); one whose log
    /// ends above the leader's end truncates to it (Kafka's
    /// `handleOutOfRangeError`: `leaderEndOffset < replicaEndOffset`); any
    /// other cause is not this follower's to repair.
    pub(crate) fn on_offset_out_of_range(
        &mut self,
        leader_log_start_offset: Offset,
        leader_log_end_offset: Offset,
    ) -> OutOfRangeAction {
        if self.log_end_offset > leader_log_end_offset
            && leader_log_end_offset >= leader_log_start_offset
        {
            tracing::warn!(
                leader = %self.leader,
                log_end_offset = %self.log_end_offset,
                leader_log_end_offset = %leader_log_end_offset,
                "follower log ends above the leader's log end; truncating to it"
            );
            self.on_truncated(leader_log_end_offset);
            return OutOfRangeAction::TruncateTo {
                log_end_offset: leader_log_end_offset,
            };
        }
        if self.log_end_offset >= leader_log_start_offset {
            return OutOfRangeAction::BackOff;
        }
        tracing::warn!(
            leader = %self.leader,
            log_end_offset = %self.log_end_offset,
            leader_log_start_offset = %leader_log_start_offset,
            "follower log ends below the leader's log start; resetting"
        );
        self.reset_to(leader_log_start_offset);
        OutOfRangeAction::ResetTo {
            log_start_offset: leader_log_start_offset,
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::tests::TestReplica;

    const LEADER: NodeId = NodeId(0);

    fn end(epoch: u32, offset: u64) -> EpochEndOffset {
        EpochEndOffset {
            epoch: LeaderEpoch(epoch),
            end_offset: Offset(offset),
        }
    }

    fn follower(start: u64, high_watermark: u64, end: u64) -> FollowerState {
        FollowerState::become_follower(
            LEADER,
            LeaderEpoch(3),
            LogOffsets {
                log_start_offset: Offset(start),
                high_watermark: Offset(high_watermark),
                log_end_offset: Offset(end),
            },
        )
    }

    #[test]
    fn truncation_for_divergence_table() {
        struct Row {
            name: &'static str,
            leader: EpochEndOffset,
            local_lookup: Option<EpochEndOffset>,
            own_log_end_offset: u64,
            expected: (u64, bool),
        }
        let rows = [
            Row {
                name: "same epoch, leader's end first",
                leader: end(2, 17),
                local_lookup: Some(end(2, 19)),
                own_log_end_offset: 19,
                expected: (17, true),
            },
            Row {
                name: "same epoch, own end of epoch first",
                leader: end(2, 17),
                local_lookup: Some(end(2, 15)),
                own_log_end_offset: 19,
                expected: (15, true),
            },
            Row {
                name: "same epoch, own log end first",
                leader: end(2, 17),
                local_lookup: Some(end(2, 18)),
                own_log_end_offset: 16,
                expected: (16, true),
            },
            Row {
                name: "leader's epoch unknown here: cut to the end of the \
                       older epoch and ask again",
                leader: end(1, 8),
                local_lookup: Some(end(0, 6)),
                own_log_end_offset: 9,
                expected: (6, false),
            },
            Row {
                name: "unknown epoch, own log end first",
                leader: end(1, 8),
                local_lookup: Some(end(0, 6)),
                own_log_end_offset: 5,
                expected: (5, false),
            },
            Row {
                name: "no lookup answer: trust the leader's end",
                leader: end(1, 8),
                local_lookup: None,
                own_log_end_offset: 9,
                expected: (8, true),
            },
            Row {
                name: "no lookup answer, own log end first",
                leader: end(1, 8),
                local_lookup: None,
                own_log_end_offset: 4,
                expected: (4, true),
            },
            Row {
                name: "asked epoch older than the first one known here: the \
                       cache answers (e, first start), so fe == e",
                leader: end(0, 4),
                local_lookup: Some(end(0, 2)),
                own_log_end_offset: 6,
                expected: (2, true),
            },
        ];
        for row in rows {
            let got = truncation_for_divergence(
                row.leader,
                row.local_lookup,
                Offset(row.own_log_end_offset),
            );
            assert_eq!(
                (got.truncate_to.0, got.resolved),
                row.expected,
                "{}",
                row.name
            );
        }
    }

    #[test]
    fn truncation_uses_the_epoch_cache_answer_for_an_epoch_before_the_first() {
        // The follower's log starts at 2 in epoch 1 (an unclean leader wrote
        // 2..6); the leader says its epoch 0 ends at 4. Every record here is
        // in epoch 1, which the leader's log does not have below 4.
        let cache = TestReplica::new(&[(1, 2)], 6);
        let lookup = cache.end_offset_for_epoch(0);
        assert_eq!(lookup, Some(end(0, 2)));
        let mut state = follower(2, 2, 6);
        assert_eq!(
            state.on_diverging(end(0, 4), lookup),
            DivergenceAction::Truncate(Truncation {
                truncate_to: Offset(2),
                resolved: true
            })
        );
        assert_eq!(state.log_end_offset(), Offset(2));
    }

    #[test]
    fn becoming_follower_keeps_the_log_above_the_high_watermark() {
        let state = follower(0, 6, 10);
        assert_eq!(
            (
                state.log_start_offset(),
                state.high_watermark(),
                state.log_end_offset()
            ),
            (Offset(0), Offset(6), Offset(10))
        );
        assert_eq!(state.leader(), LEADER);
        // A checkpointed HW past a log end that recovery cut is clamped.
        assert_eq!(follower(0, 12, 10).high_watermark(), Offset(10));
    }

    #[test]
    fn next_fetch_asks_from_the_log_end_in_the_current_epoch() {
        let state = follower(0, 0, 7);
        assert_eq!(
            state.next_fetch(Some(LeaderEpoch(2)), None),
            FetchPosition {
                fetch_offset: Offset(7),
                last_fetched_epoch: Some(LeaderEpoch(2)),
                current_leader_epoch: LeaderEpoch(3),
            }
        );
        assert_eq!(state.next_fetch(None, None).last_fetched_epoch, None);
    }

    /// SPEC §2.5: under `FlushPolicy::Always` the fetch offset (what the
    /// follower acknowledges) is the end of what it has fsynced.
    #[test]
    fn next_fetch_offset_table() {
        // (name, log end, flushed offset given, expected fetch offset)
        let rows: [(&str, u64, Option<u64>, u64); 4] = [
            ("every appended record counts", 7, None, 7),
            ("Always, all flushed", 7, Some(7), 7),
            (
                "Always, a tail not yet flushed is not acknowledged",
                7,
                Some(5),
                5,
            ),
            (
                "Always, a flushed offset past the end (a truncation lowered \
                 the end first) acknowledges no more than the log holds",
                7,
                Some(9),
                7,
            ),
        ];
        for (name, log_end, flushed, expected) in rows {
            let state = follower(0, 0, log_end);
            let fetch = state.next_fetch(Some(LeaderEpoch(3)), flushed.map(Offset));
            assert_eq!(fetch.fetch_offset, Offset(expected), "{name}");
            assert_eq!(fetch.current_leader_epoch, LeaderEpoch(3), "{name}");
        }
    }

    #[test]
    fn on_fetched_table() {
        struct Row {
            name: &'static str,
            before: (u64, u64, u64), // (start, HW, LEO)
            leader_high_watermark: u64,
            leader_log_start_offset: u64,
            new_log_end_offset: u64,
            expected: FetchedUpdate,
        }
        let applied = |high_watermark: u64, log_start_offset: u64| FetchedUpdate::Applied {
            high_watermark: Offset(high_watermark),
            log_start_offset: Offset(log_start_offset),
        };
        let rows = [
            Row {
                name: "HW is the leader's when the follower holds it",
                before: (0, 0, 1),
                leader_high_watermark: 1,
                leader_log_start_offset: 0,
                new_log_end_offset: 1,
                expected: applied(1, 0),
            },
            Row {
                name: "never above the follower's own LEO",
                before: (0, 0, 0),
                leader_high_watermark: 9,
                leader_log_start_offset: 0,
                new_log_end_offset: 4,
                expected: applied(4, 0),
            },
            Row {
                name: "follows a new leader's lower HW (SPEC 3.2, as Kafka)",
                before: (0, 8, 10),
                leader_high_watermark: 6,
                leader_log_start_offset: 0,
                new_log_end_offset: 10,
                expected: applied(6, 0),
            },
            Row {
                name: "a lower leader HW does not hold it below its log start",
                before: (0, 3, 10),
                leader_high_watermark: 2,
                leader_log_start_offset: 5,
                new_log_end_offset: 10,
                expected: applied(5, 5),
            },
            Row {
                name: "log start rises to the leader's",
                before: (0, 5, 10),
                leader_high_watermark: 9,
                leader_log_start_offset: 4,
                new_log_end_offset: 12,
                expected: applied(9, 4),
            },
            Row {
                name: "log start never falls",
                before: (4, 5, 10),
                leader_high_watermark: 9,
                leader_log_start_offset: 2,
                new_log_end_offset: 10,
                expected: applied(9, 4),
            },
            Row {
                name: "LEO exactly at the leader's log start: no reset",
                before: (0, 3, 5),
                leader_high_watermark: 9,
                leader_log_start_offset: 5,
                new_log_end_offset: 5,
                expected: applied(5, 5),
            },
            Row {
                name: "LEO below the leader's log start: reset there",
                before: (0, 3, 5),
                leader_high_watermark: 9,
                leader_log_start_offset: 8,
                new_log_end_offset: 5,
                expected: FetchedUpdate::ResetTo {
                    log_start_offset: Offset(8),
                },
            },
        ];
        for row in rows {
            let (start, high_watermark, end) = row.before;
            let mut state = follower(start, high_watermark, end);
            let got = state.on_fetched(
                Offset(row.leader_high_watermark),
                Offset(row.leader_log_start_offset),
                Offset(row.new_log_end_offset),
            );
            assert_eq!(got, row.expected, "{}", row.name);
            assert_eq!(state.check_invariants(), Ok(()), "{}", row.name);
            match got {
                FetchedUpdate::Applied {
                    high_watermark,
                    log_start_offset,
                } => {
                    assert_eq!(state.high_watermark(), high_watermark, "{}", row.name);
                    assert_eq!(state.log_start_offset(), log_start_offset, "{}", row.name);
                    assert_eq!(
                        state.log_end_offset(),
                        Offset(row.new_log_end_offset),
                        "{}",
                        row.name
                    );
                }
                FetchedUpdate::ResetTo { log_start_offset } => {
                    assert_eq!(
                        (
                            state.log_start_offset(),
                            state.high_watermark(),
                            state.log_end_offset()
                        ),
                        (log_start_offset, log_start_offset, log_start_offset),
                        "{}",
                        row.name
                    );
                }
            }
        }
    }

    #[test]
    fn truncation_pulls_the_high_watermark_and_log_start_down_with_it() {
        let mut state = follower(4, 8, 10);
        state.on_truncated(Offset(9));
        assert_eq!(
            (
                state.log_start_offset(),
                state.high_watermark(),
                state.log_end_offset()
            ),
            (Offset(4), Offset(8), Offset(9))
        );
        state.on_truncated(Offset(6));
        assert_eq!(state.high_watermark(), Offset(6));
        // Below the log start: an empty log starting at the cut.
        state.on_truncated(Offset(2));
        assert_eq!(
            (
                state.log_start_offset(),
                state.high_watermark(),
                state.log_end_offset()
            ),
            (Offset(2), Offset(2), Offset(2))
        );
    }

    #[test]
    fn on_diverging_table() {
        struct Row {
            name: &'static str,
            log_end_offset: u64,
            leader: EpochEndOffset,
            local_lookup: Option<EpochEndOffset>,
            expected: DivergenceAction,
            log_end_after: u64,
        }
        let truncate = |to: u64, resolved: bool| {
            DivergenceAction::Truncate(Truncation {
                truncate_to: Offset(to),
                resolved,
            })
        };
        let rows = [
            Row {
                name: "same epoch, shorter on the leader: cut to its end",
                log_end_offset: 10,
                leader: end(0, 9),
                local_lookup: Some(end(0, 10)),
                expected: truncate(9, true),
                log_end_after: 9,
            },
            Row {
                name: "leader's epoch unknown here: cut to the end of the older one",
                log_end_offset: 10,
                leader: end(2, 12),
                local_lookup: Some(end(1, 7)),
                expected: truncate(7, false),
                log_end_after: 7,
            },
            Row {
                name: "the rule cuts nothing: back off, do not spin",
                log_end_offset: 10,
                leader: end(0, 12),
                local_lookup: Some(end(0, 11)),
                expected: DivergenceAction::BackOff,
                log_end_after: 10,
            },
            Row {
                name: "no lookup answer and the leader's end past ours: back off",
                log_end_offset: 10,
                leader: end(5, 10),
                local_lookup: None,
                expected: DivergenceAction::BackOff,
                log_end_after: 10,
            },
        ];
        for row in rows {
            let mut state = follower(0, 6, row.log_end_offset);
            let before = state.clone();
            let got = state.on_diverging(row.leader, row.local_lookup);
            assert_eq!(got, row.expected, "{}", row.name);
            assert_eq!(
                state.log_end_offset(),
                Offset(row.log_end_after),
                "{}",
                row.name
            );
            if got == DivergenceAction::BackOff {
                assert_eq!(state, before, "{}: backing off changes nothing", row.name);
            }
            assert_eq!(state.check_invariants(), Ok(()), "{}", row.name);
        }
    }

    #[test]
    fn on_offset_out_of_range_table() {
        struct Row {
            name: &'static str,
            before: (u64, u64, u64), // (start, HW, LEO)
            leader_log_start_offset: u64,
            leader_log_end_offset: u64,
            expected: OutOfRangeAction,
        }
        let reset = |log_start_offset: u64| OutOfRangeAction::ResetTo {
            log_start_offset: Offset(log_start_offset),
        };
        let rows = [
            Row {
                name: "log ends below the leader's log start: reset there",
                before: (0, 3, 5),
                leader_log_start_offset: 8,
                leader_log_end_offset: 20,
                expected: reset(8),
            },
            Row {
                name: "an empty log far behind: reset",
                before: (0, 0, 0),
                leader_log_start_offset: 100,
                leader_log_end_offset: 120,
                expected: reset(100),
            },
            Row {
                name: "log ends exactly at the leader's log start: nothing to reset",
                before: (0, 3, 8),
                leader_log_start_offset: 8,
                leader_log_end_offset: 20,
                expected: OutOfRangeAction::BackOff,
            },
            Row {
                name: "log reaches past the leader's log start: not ours to repair",
                before: (0, 3, 10),
                leader_log_start_offset: 8,
                leader_log_end_offset: 20,
                expected: OutOfRangeAction::BackOff,
            },
            Row {
                name: "log ends above the leader's end: truncate to it",
                before: (0, 9, 12),
                leader_log_start_offset: 0,
                leader_log_end_offset: 7,
                expected: OutOfRangeAction::TruncateTo {
                    log_end_offset: Offset(7),
                },
            },
            Row {
                name: "an empty log reopened above the leader's end: truncate, below its start",
                before: (12, 12, 12),
                leader_log_start_offset: 0,
                leader_log_end_offset: 4,
                expected: OutOfRangeAction::TruncateTo {
                    log_end_offset: Offset(4),
                },
            },
        ];
        for row in rows {
            let (start, high_watermark, end) = row.before;
            let mut state = follower(start, high_watermark, end);
            let before = state.clone();
            let got = state.on_offset_out_of_range(
                Offset(row.leader_log_start_offset),
                Offset(row.leader_log_end_offset),
            );
            assert_eq!(got, row.expected, "{}", row.name);
            match got {
                OutOfRangeAction::ResetTo { log_start_offset } => assert_eq!(
                    (
                        state.log_start_offset(),
                        state.high_watermark(),
                        state.log_end_offset()
                    ),
                    (log_start_offset, log_start_offset, log_start_offset),
                    "{}",
                    row.name
                ),
                OutOfRangeAction::TruncateTo { log_end_offset } => assert_eq!(
                    (state.high_watermark(), state.log_end_offset()),
                    (before.high_watermark().min(log_end_offset), log_end_offset),
                    "{}",
                    row.name
                ),
                OutOfRangeAction::BackOff => assert_eq!(state, before, "{}", row.name),
            }
        }
    }
}
