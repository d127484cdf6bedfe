//! The coordinator: the strongly consistent metadata service the application
//! supplies (ZooKeeper or KRaft in Kafka, SPEC §1, §3.4, §3.5, §3.7).
//!
//! This module owns the contract — the [`Coordinator`] trait, the per-log
//! record it stores ([`LogState`]), the rules an update must obey
//! ([`LogState::validate_update`]) and the events it sends — plus an
//! in-process implementation ([`MemoryCoordinator`]), replica assignment
//! ([`assign_replicas`]) and the decisions of online reassignment (SPEC
//! 3.10: the updates that start, replace, cancel and complete a move). It
//! does not decide anything about replication: the controller that elects
//! leaders and the leaders that shrink or expand the
//! ISR live in the replication layer and only *propose* updates here, as
//! compare-and-set writes that fence whoever raced and lost.

mod assignment;
mod controller;
mod memory;
mod reassignment;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::types::{
    ClusterId, DirectoryId, Incarnation, LeaderEpoch, LogId, NodeId, Offset, ProducerId,
};

pub use assignment::assign_replicas;
#[cfg(any(test, feature = "testing"))]
pub(crate) use controller::SteppedController;
pub use controller::{Controller, ControllerConfig};
pub use memory::MemoryCoordinator;
pub(crate) use reassignment::completion_update;
pub(crate) use reassignment::{cancel_reassignment, reassign_log, replace_node};
pub use reassignment::{AddingReplica, ReassignmentProgress};
#[cfg(feature = "zookeeper")]
pub use zookeeper::{ZkCoordinator, ZkCoordinatorConfig};

/// What the coordinator stores for one log.
///
/// Invariants (checked by [`LogState::check_invariants`]):
/// - `replicas` is non-empty and holds no node twice;
/// - `leader`, if any, is one of `replicas` and is in `in_sync_replicas`;
/// - `in_sync_replicas` is a subset of `replicas` with no node twice, and is
///   non-empty while there is a leader;
/// - `eligible_leader_replicas` is a subset of `replicas` with no node twice
///   and no node of `in_sync_replicas`;
/// - `adding_replicas` and `removing_replicas` are disjoint subsets of
///   `replicas` without repeats, and `removing_replicas` leaves at least one
///   replica (the reassignment's target is never empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogState {
    /// The log.
    pub log: LogId,
    /// Nodes hosting a replica, in assignment order; `replicas[0]` is the
    /// preferred leader. Set at creation; changed only by a reassignment
    /// (SPEC 3.10), during which it is the target followed by the original
    /// replicas that are not in the target (Kafka's KIP-455 order).
    pub replicas: Vec<NodeId>,
    /// Replicas a reassignment in progress adds: in `replicas` and in the
    /// target, not in the original replicas (KIP-455's `adding_replicas`).
    /// Empty when no reassignment runs.
    pub adding_replicas: Vec<NodeId>,
    /// Replicas a reassignment in progress removes: in `replicas` and in the
    /// original replicas, not in the target (KIP-455's `removing_replicas`).
    /// They stay replicas, and may stay in the ISR and lead, until the
    /// controller completes the move.
    pub removing_replicas: Vec<NodeId>,
    /// The current leader; `None` when no replica may lead (SPEC 3.5, seed
    /// 003: every ISR member is down and unclean election is off).
    pub leader: Option<NodeId>,
    /// Grows on every leader change (SPEC §1).
    pub leader_epoch: LeaderEpoch,
    /// The in-sync replicas (SPEC 3.4).
    pub in_sync_replicas: Vec<NodeId>,
    /// The eligible leader replicas (ELR, SPEC 3.5, Kafka's KIP-966):
    /// replicas that left the ISR while it was below `min_insync_replicas`,
    /// in assignment order. The high watermark cannot advance while the ISR
    /// is that small (SPEC 3.3), so each of them holds every committed
    /// record and may lead cleanly when no ISR member is live. Empty once
    /// the ISR is back at `min_insync_replicas`; a replica whose node
    /// restarted after an unclean shutdown is removed
    /// ([`LogState::unclean_shutdown_update`]).
    pub eligible_leader_replicas: Vec<NodeId>,
    /// Replicas that left the ISR or ELR because their node restarted
    /// after an unclean shutdown, or because they resigned a leadership
    /// their storage could not keep ([`UncleanReplica::acknowledged_end`]),
    /// each with the end of its log as it reported it, in assignment order
    /// (Kafka's `LastKnownElr` plus the log ends its unclean recovery asks
    /// for, KIP-966). Each of them held every committed record when it
    /// left and may or may not have lost some since. When the ISR and ELR are both empty, the controller
    /// elects the one whose log holds the most of the newest line, once
    /// that one is live ([`LogState::recovery_leader`]). A replica leaves this list when it
    /// is back in the ISR.
    pub unclean_replicas: Vec<UncleanReplica>,
    /// Bumped by the coordinator on every accepted update; the second half of
    /// the compare-and-set key.
    pub version: u64,
}

/// Warns that `node`'s `log_end` will be reported as not known because
/// its last epoch is above `state`'s ([`LogState::possible_log_end`]),
/// saying what an operator can do about it.
pub(crate) fn warn_impossible_log_end(state: &LogState, node: NodeId, log_end: Option<&LogEnd>) {
    tracing::warn!(log = %state.log, %node, ?log_end, leader_epoch = %state.leader_epoch,
        "this replica's log ends in a batch of, is on the line of, or lists an epoch the log never reached: its data is corrupt (a changed epoch field, with an epoch cache rebuilt from the batches) and its end is reported as not known. Like a replica that cannot open, it holds the log's unclean recovery until the unclean switch passes it over or its directory is deleted (it then fetches the log again)");
}

/// Where a replica's log ends, as a node reports it after an unclean
/// shutdown ([`Coordinator::report_unclean_shutdown`]), with what unclean
/// recovery needs to tell which replicas' logs are prefixes of which
/// ([`LogState::recovery_leader`]): the replica's line epoch and the newest
/// entries of its epoch cache.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LogEnd {
    /// The leader epoch of the log's last batch; `None` if it has none.
    pub last_epoch: Option<LeaderEpoch>,
    /// The log end offset (the offset the next record would get).
    pub log_end_offset: Offset,
    /// The log start offset: records below it were deleted once committed
    /// (SPEC 3.9). 0 in a report that predates it.
    pub log_start_offset: Offset,
    /// The replica's high watermark when it reported (after a restart, as
    /// last checkpointed): every record below it was committed in the
    /// history it followed. 0 in a report that predates it. (A follower
    /// whose high watermark a new leader's lower one lowered stores no
    /// checkpoint for it, so a restart may bring back the higher value;
    /// the records below it are the same ones, as every truncation stores
    /// a lowered checkpoint first.)
    pub high_watermark: Offset,
    /// The newest leader epoch whose leader's log this log is known to be
    /// a prefix of: the epoch the replica last led, or the last one in
    /// which its fetch passed the leader's divergence check
    /// ([`Log::line_epoch`](crate::Log::line_epoch)). `None` in a report
    /// that predates it; [`LogEnd::line`] then falls back on `last_epoch`.
    pub line_epoch: Option<LeaderEpoch>,
    /// The newest entries of the replica's epoch cache, `(epoch, start
    /// offset)` oldest first, at most [`LogEnd::EPOCHS_REPORTED`]: where
    /// each epoch's records begin in this log, so that recovery can tell
    /// whether it holds another replica's last batch. Empty in a report
    /// that predates it.
    pub epochs: Vec<(LeaderEpoch, Offset)>,
    /// An epoch whose leader's log held, at some point of that epoch,
    /// exactly this log's records below its start: the epoch that the
    /// leader whose snapshot the replica installed, or at whose log start
    /// it restarted, named for them (the epoch of its record below that
    /// offset; at its own log start, its start line or the epoch of its
    /// batch there); without one, that leader's own epoch; or the first
    /// batch it fetched there
    /// is of that epoch (a leader that held that batch held the same
    /// records below it); or
    /// its epoch cache names that epoch at its start (the
    /// epoch of the batch there, even one a recovery cut removed, or of a
    /// leader that appended nothing there). `None` when not known (a
    /// report that predates it). Recovery uses it for a log that holds no
    /// batch ([`LogEnd::extends`]).
    pub start_line: Option<LeaderEpoch>,
}

impl LogEnd {
    /// How many of the newest epoch cache entries a report carries
    /// ([`LogEnd::epochs`]). Recovery looks up one epoch: the last batch's
    /// of a replica on a newer line, in a longer log on an older line
    /// ([`LogEnd::extends`]); that log saw fewer leaders append since
    /// than this, or recovery keeps the newer line.
    pub const EPOCHS_REPORTED: usize = 64;

    /// A report of a log whose last batch is in `last_epoch` and that ends
    /// at `log_end_offset`, with no line epoch or epoch cache: what a
    /// report that predates them says.
    pub fn new(last_epoch: Option<LeaderEpoch>, log_end_offset: Offset) -> LogEnd {
        LogEnd {
            last_epoch,
            log_end_offset,
            ..LogEnd::default()
        }
    }

    /// The log's line: the newest leader epoch whose leader's log it is
    /// known to be a prefix of, never below its last batch's epoch
    /// ([`LogEnd::line_epoch`]). Two logs on one line are prefixes of one
    /// leader's log, so the shorter is a prefix of the longer.
    pub fn line(&self) -> Option<LeaderEpoch> {
        self.line_epoch.max(self.last_epoch)
    }

    /// Whether this log is longer than `other` and holds all that `other`
    /// may hold of what was committed:
    /// - its high watermark is at or above `other`'s end, and `other`
    ///   holds no batch of an epoch newer than this log's line: everything
    ///   of this log below `other`'s end was committed, so where `other`
    ///   differs there it holds no committed record (G2). This covers a
    ///   log that deleted up to there too (its start is at most its high
    ///   watermark), and the reviews of c3e63a5 and 4c6f4ba (an ELR member
    ///   holding committed records above a newer line's log that lost
    ///   them, or that restarted empty at its start). The epoch condition
    ///   is for histories that forked: an unclean election (or a recovery
    ///   the unclean switch let pass over a replica) starts a second one,
    ///   and a replica that never followed it keeps its old high
    ///   watermark; `other`'s batches of an epoch this log never reached
    ///   are then the newer history's, maybe committed (review of
    ///   4caeeaf);
    /// - or it holds `other`'s last batch (one leader writes an epoch's
    ///   batches, each on top of the log it had: two logs with the same
    ///   batch at an offset agree below it, KIP-279's premise): its last
    ///   batch is in `other`'s last epoch, or in a later one with that
    ///   epoch among its reported [`epochs`](LogEnd::epochs) covering the
    ///   batch's offset;
    /// - or `other` holds no batch (empty at its end: its start moved
    ///   there, or it restarted there from a leader's start, end or
    ///   snapshot)
    ///   and this log is on its line, or on its
    ///   [`start_line`](LogEnd::start_line) `e`, or holds a batch of `e`
    ///   at or past the offset below `other`'s end: this log then agrees
    ///   with `e`'s leader's log up to that offset, as `other` does below
    ///   its end, and above it `other` holds nothing to lose (simulator seed 60267254:
    ///   empty at 1467, where it had installed epoch 12's leader's
    ///   snapshot, a replica that had led epoch 13 was kept over epoch
    ///   12's leader, which held the acknowledged record at 1467). Not a
    ///   log on a line newer than `e`: a leader after `e` may have
    ///   replaced records below that end which a later one committed in
    ///   `e`'s version.
    ///
    /// Otherwise `false`: recovery keeps `other`, on the newer line. So a
    /// log on an older line whose high watermark, as last checkpointed,
    /// lies below `other`'s end and that holds no batch of `other`'s is
    /// not taken, whatever it holds, unless `other`'s start came from its
    /// line: under a leader of a newer epoch empty
    /// at 1610, such a log held a deposed leader's tail below it
    /// (simulator seed 60219295).
    pub fn extends(&self, other: &LogEnd) -> bool {
        if self.log_end_offset <= other.log_end_offset {
            return false;
        }
        if other.log_end_offset <= self.high_watermark
            && other.holds_nothing_newer_than(self.line())
        {
            return true;
        }
        let Some(epoch) = other.last_epoch else {
            return self.line() == other.line()
                || other.start_line.is_some_and(|start_line| {
                    self.line() == Some(start_line)
                        || other
                            .log_end_offset
                            .0
                            .checked_sub(1)
                            .is_some_and(|below| self.epoch_reaches(start_line, Offset(below)))
                });
        };
        // A log with a batch ends past it.
        debug_assert!(other.log_end_offset > Offset::ZERO, "{other:?}");
        let last_offset = Offset(other.log_end_offset.0 - 1);
        match self.last_epoch {
            Some(mine) if mine == epoch => true,
            Some(mine) if mine > epoch => self.epoch_holds(epoch, last_offset),
            _ => false,
        }
    }

    /// Whether this log holds no batch of an epoch above `line`: its last
    /// batch's and its reported epochs that begin below its end (an epoch
    /// entry at the end, a leader's that appended nothing, holds none).
    fn holds_nothing_newer_than(&self, line: Option<LeaderEpoch>) -> bool {
        self.last_epoch <= line
            && self
                .epochs
                .iter()
                .filter(|(_, start)| *start < self.log_end_offset)
                .all(|(epoch, _)| Some(*epoch) <= line)
    }

    /// Whether this log holds a batch of `epoch` at or past `offset`: its
    /// last batch is of `epoch`, or its records of `epoch` (as
    /// [`epochs`](LogEnd::epochs) gives them) end past `offset`.
    fn epoch_reaches(&self, epoch: LeaderEpoch, offset: Offset) -> bool {
        if self.log_end_offset <= offset || self.last_epoch.is_none() {
            return false;
        }
        self.last_epoch == Some(epoch)
            || self.epoch_range(epoch).is_some_and(|(_, end)| end > offset)
    }

    /// Whether [`epochs`](LogEnd::epochs) says this log's records of
    /// `epoch` cover `offset`.
    fn epoch_holds(&self, epoch: LeaderEpoch, offset: Offset) -> bool {
        self.epoch_range(epoch)
            .is_some_and(|(start, end)| start <= offset && offset < end)
    }

    /// Where this log's records of `epoch` begin and end, as
    /// [`epochs`](LogEnd::epochs) gives them; `None` if it lists no such
    /// epoch.
    fn epoch_range(&self, epoch: LeaderEpoch) -> Option<(Offset, Offset)> {
        let index = self.epochs.iter().position(|(e, _)| *e == epoch)?;
        let end = self
            .epochs
            .get(index + 1)
            .map_or(self.log_end_offset, |(_, next)| *next);
        Some((self.epochs[index].1, end))
    }

    /// Whether the log lost everything: it ends at offset 0. Such a log is
    /// never "the longest" in unclean recovery
    /// ([`LogState::recovery_leader`]): electing it would truncate every
    /// other replica to nothing. A log that restarted at an offset with no
    /// batch since (after a snapshot install, or a log start moved to its
    /// end) has no last epoch but is not empty: its application holds
    /// everything below its end (simulator seed 20020251: counted as
    /// empty, the only replica holding what was acknowledged up to 1090
    /// lost to a fresh one, elected at offset 0, with the unclean switch
    /// off).
    pub fn is_empty(&self) -> bool {
        self.log_end_offset == Offset::ZERO
    }
}

/// A replica taken out of the ISR or ELR by its node's unclean restart,
/// with the end of its log at that restart, or a leader that resigned
/// because its storage failed ([`LogState::unclean_replicas`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UncleanReplica {
    /// The replica's node.
    pub node: NodeId,
    /// Set only when the replica listed itself as it resigned a
    /// leadership it could not keep (its storage failed): every record
    /// acknowledged with `acks=all` before the resignation lies below
    /// this offset, by this leader (it stopped acknowledging before
    /// reading it) or an earlier one. A replica whose log reaches it
    /// holds every such record ([`LogState::unclean_shutdown_update`]).
    /// `None` in an entry an unclean restart wrote; the node's own later
    /// report replaces the entry and clears it.
    pub acknowledged_end: Option<Offset>,
    /// Where its log ended when it reported; `None` while its end is not
    /// known: the node could not open the replica when it reported (its
    /// recovery needed a cut that waits for the report to be stored, or
    /// the open failed), and reports the end once it opens. Unclean
    /// recovery waits for such a replica as for one that has not reported
    /// (SPEC G1(c)): it may hold the longest log.
    pub log_end: Option<LogEnd>,
}

impl UncleanReplica {
    /// Whether its reported log is known to hold no record (a lost disk,
    /// a replica that never held any): never whether its end is unknown.
    pub fn reported_empty(&self) -> bool {
        self.log_end.as_ref().is_some_and(LogEnd::is_empty)
    }
}

impl LogState {
    /// The state of a freshly created log: the first replica leads in epoch
    /// 0, every replica is in sync, version 0. Errs if `replicas` is empty or
    /// names a node twice.
    pub fn initial(log: LogId, replicas: Vec<NodeId>) -> Result<LogState> {
        if replicas.is_empty() {
            return Err(coordinator_error(format!(
                "cannot create {log}: replicas is empty"
            )));
        }
        if let Some(node) = first_duplicate(&replicas) {
            return Err(coordinator_error(format!(
                "cannot create {log}: replicas {replicas:?} names {node} twice"
            )));
        }
        let state = LogState {
            log,
            leader: Some(replicas[0]),
            leader_epoch: LeaderEpoch::ZERO,
            in_sync_replicas: replicas.clone(),
            eligible_leader_replicas: Vec::new(),
            unclean_replicas: Vec::new(),
            replicas,
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
            version: 0,
        };
        state.check_invariants();
        Ok(state)
    }

    /// Whether a reassignment runs: some replica is being added or removed.
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    /// The replicas the log will have once its reassignment completes
    /// (`replicas` without `removing_replicas`, in order); `replicas` when
    /// none runs.
    pub fn target_replicas(&self) -> Vec<NodeId> {
        self.replicas
            .iter()
            .copied()
            .filter(|node| !self.removing_replicas.contains(node))
            .collect()
    }

    /// The replicas the log had before its reassignment began (`replicas`
    /// without `adding_replicas`, in order): where a cancellation returns
    /// it. `replicas` when none runs.
    pub fn original_replicas(&self) -> Vec<NodeId> {
        self.replicas
            .iter()
            .copied()
            .filter(|node| !self.adding_replicas.contains(node))
            .collect()
    }

    /// Whether `node` is in the ISR.
    pub fn is_in_sync(&self, node: NodeId) -> bool {
        self.in_sync_replicas.contains(&node)
    }

    /// Whether `node` is in the ELR.
    pub fn is_eligible(&self, node: NodeId) -> bool {
        self.eligible_leader_replicas.contains(&node)
    }

    /// Whether `node` is in [`LogState::unclean_replicas`].
    pub fn is_unclean(&self, node: NodeId) -> bool {
        self.unclean_replicas.iter().any(|r| r.node == node)
    }

    /// The replica to elect when neither the ISR nor the ELR has a member
    /// left: the one of [`LogState::unclean_replicas`] whose log holds the
    /// most of the newest line ([`LogState::longest_line`]), or `None` if
    /// the ISR or ELR is not empty or no listed replica reported a log
    /// that holds records ([`LogEnd::is_empty`]: an empty log is never the
    /// longest; the controller then waits for a replica that may hold
    /// more). Each of these replicas held every record committed while it
    /// was in the ISR or ELR, and a log only loses a suffix in a crash, so
    /// if any of them came back with its disk, the choice holds every
    /// record committed while one that came back was a member (where the
    /// reports can tell: see [`LogEnd::extends`] for what they cannot). The caller
    /// elects it only once it is live: waiting for it, rather than taking
    /// whichever is live first, is what keeps the records a replica still
    /// holds from being truncated away by one that lost them (SPEC G1(c)).
    pub fn recovery_leader(&self) -> Option<UncleanReplica> {
        if !self.in_sync_replicas.is_empty() || !self.eligible_leader_replicas.is_empty() {
            return None;
        }
        self.longest_line(
            self.replicas
                .iter()
                .filter_map(|node| self.unclean_replicas.iter().find(|r| r.node == *node)),
        )
        .cloned()
    }

    /// Of `reported` (in assignment order), the replica unclean recovery
    /// elects: the longest log on the newest line. It starts from a
    /// replica on the newest line ([`LogEnd::line`]; the longest of them,
    /// ties to assignment order), then takes, newest line first, each log
    /// that holds all of the one taken and more ([`LogEnd::extends`]).
    /// Only reports whose end is known, possible and not empty count
    /// ([`holding_records`](Self::holding_records)).
    ///
    /// Why lines and not the last batch's epoch, as KIP-966 compares: a
    /// leader may commit older epochs' records and append none of its
    /// own, so its followers' last batches stay in an older epoch than a
    /// deposed leader's uncommitted appends, which then won (simulator
    /// seeds 60208586, 60219295 and 60238744). A record committed in
    /// epoch `e` is held by members that fetched in `e` (line `e` or
    /// newer), and by every later leader, so where a log on an older line
    /// parts from one on a newer line, its records there were never
    /// committed. But a log on a newer line may be short (a replica that
    /// was still catching up, or lost its tail), and one on an older line
    /// that holds all of it and more holds what was committed above it
    /// (named seeds 20005277 and 60040931): it is taken.
    pub fn longest_line<'a>(
        &self,
        reported: impl Iterator<Item = &'a UncleanReplica>,
    ) -> Option<&'a UncleanReplica> {
        let mut candidates: Vec<(&UncleanReplica, LogEnd)> = reported
            .filter_map(|r| self.holding_records(r).map(|end| (r, end)))
            .collect();
        // Stable: ties keep assignment order.
        candidates.sort_by(|(_, a), (_, b)| {
            b.line()
                .cmp(&a.line())
                .then(b.log_end_offset.cmp(&a.log_end_offset))
        });
        let mut candidates = candidates.into_iter();
        let (mut best, mut best_end) = candidates.next()?;
        for (reported, end) in candidates {
            if end.extends(&best_end) {
                debug_assert!(end.line() <= best_end.line());
                (best, best_end) = (reported, end);
            }
        }
        Some(best)
    }

    /// `reported`'s log end if it is known, possible
    /// ([`possible_log_end`](Self::possible_log_end)) and holds records:
    /// the candidates unclean recovery compares.
    pub fn holding_records(&self, reported: &UncleanReplica) -> Option<LogEnd> {
        self.possible_log_end(reported.log_end.clone())
            .filter(|end| !end.is_empty())
    }

    /// Whether unclean recovery still lacks `node`'s log end: it is a
    /// replica outside the unclean list (it has not reported), or in the
    /// list with its end not known yet ([`UncleanReplica::log_end`]).
    pub fn log_end_unknown(&self, node: NodeId) -> bool {
        match self.unclean_replicas.iter().find(|r| r.node == node) {
            Some(reported) => self.possible_log_end(reported.log_end.clone()).is_none(),
            None => true,
        }
    }

    /// The ELR that goes with changing this state's ISR to
    /// `in_sync_replicas` when the log's `min_insync_replicas` is
    /// `min_insync_replicas` (SPEC 3.5). As Kafka's
    /// `PartitionChangeBuilder.maybePopulateTargetElr`: if the new ISR has
    /// at least `min_insync_replicas` members the ELR is empty; otherwise it
    /// is the current ELR plus the current ISR, minus the new ISR. Every
    /// replica leaving an ISR that ends up below the minimum therefore
    /// joins: it was in the ISR, so it holds everything up to the high
    /// watermark, which is frozen from then on (SPEC 3.3). The result is in
    /// assignment order.
    pub fn eligible_leader_replicas_after(
        &self,
        in_sync_replicas: &[NodeId],
        min_insync_replicas: usize,
    ) -> Vec<NodeId> {
        if in_sync_replicas.len() >= min_insync_replicas {
            return Vec::new();
        }
        self.replicas
            .iter()
            .copied()
            .filter(|node| self.is_in_sync(*node) || self.is_eligible(*node))
            .filter(|node| !in_sync_replicas.contains(node))
            .collect()
    }

    /// The update that takes `node`, restarted after an unclean shutdown
    /// with its log ending at `log_end` (it may have lost unflushed
    /// records, SPEC 3.5), out of this log's ISR and ELR and into
    /// [`LogState::unclean_replicas`], or `None` if nothing changes. If
    /// `node` leads, the log becomes leaderless in the next epoch, so the
    /// controller elects an eligible replica. A node already in the
    /// unclean list gets its log end replaced (its log may have shrunk
    /// again).
    ///
    /// As Kafka's `ReplicationControlManager.handleBrokerUncleanShutdown`,
    /// with one difference: when `node` is the only member left of the ISR
    /// and the ELR, no other replica is in the unclean list and its log is
    /// not empty, it stays. A leader that resigned because its storage
    /// failed lists itself ([`UncleanReplica::acknowledged_end`]) and counts as
    /// another replica in the list unless `node`'s log reaches the end of
    /// what was acknowledged before it resigned (simulator seed 60336922: node 0 resigned from epoch 9
    /// holding the acknowledged 348, node 1, left alone in the ISR, lost
    /// 348 in a power loss and, staying, led without it).
    /// Kafka removes it and then, with ISR and ELR empty, elects the last
    /// known leader anyway (`PartitionChangeBuilder.canElectLastKnownLeader`,
    /// whatever `unclean.leader.election.enable` says). With nobody else
    /// known to have held the committed records, keeping it is the same
    /// outcome without a leaderless window. When others are in the list,
    /// `node` joins them and the controller elects the longest log of the
    /// newest line among them ([`LogState::recovery_leader`]): the replicas that
    /// restarted first may be the ones that kept the records. A replica
    /// that comes back with its log ending at offset 0 (a lost or swapped
    /// disk, SPEC 2.8) always leaves: a replica outside the ISR may still hold what it lost, and
    /// unclean recovery waits for such replicas before an empty log leads.
    /// So does one whose `log_end` is `None`, not known because its node
    /// could not open the replica ([`UncleanReplica::log_end`]), and one
    /// whose last batch claims an epoch the log never reached
    /// ([`possible_log_end`](Self::possible_log_end)).
    pub fn unclean_shutdown_update(
        &self,
        node: NodeId,
        log_end: Option<LogEnd>,
    ) -> Option<LogUpdate> {
        let log_end = self.possible_log_end(log_end);
        let holds_records = log_end
            .as_ref()
            .is_some_and(|end| end.log_end_offset != Offset::ZERO);
        let reported = UncleanReplica {
            node,
            acknowledged_end: None,
            log_end,
        };
        if !self.is_in_sync(node) && !self.is_eligible(node) {
            match self.unclean_replicas.iter().find(|r| r.node == node) {
                Some(known) if *known == reported => return None,
                Some(_) => {}
                // Outside the list: it joins only as a candidate of an
                // unclean recovery (see `recovery_candidate_update`).
                None if self.in_unclean_recovery() && self.replicas.contains(&node) => {}
                None => return None,
            }
            return Some(LogUpdate {
                leader: self.leader,
                leader_epoch: self.leader_epoch,
                in_sync_replicas: self.in_sync_replicas.clone(),
                eligible_leader_replicas: self.eligible_leader_replicas.clone(),
                unclean_report: Some(reported),
                assignment: None,
            });
        }
        let without = |nodes: &[NodeId]| -> Vec<NodeId> {
            nodes.iter().copied().filter(|n| *n != node).collect()
        };
        let in_sync_replicas = without(&self.in_sync_replicas);
        let eligible_leader_replicas = without(&self.eligible_leader_replicas);
        // A resigned leader's entry counts only while this log may lack a
        // record acknowledged before the resignation: this replica, a
        // member since, holds the same records below its end.
        let reported_end = reported
            .log_end
            .as_ref()
            .map_or(Offset::ZERO, |end| end.log_end_offset);
        let covered =
            |r: &UncleanReplica| r.acknowledged_end.is_some_and(|end| end <= reported_end);
        let others_unclean = self
            .unclean_replicas
            .iter()
            .any(|r| r.node != node && !covered(r));
        // A log that restarted at an offset with no batch since (after a
        // snapshot install, say) holds what it must: only one that ends at
        // offset 0 lost everything. One whose end is not known may have
        // lost anything, and leaves.
        if in_sync_replicas.is_empty()
            && eligible_leader_replicas.is_empty()
            && !others_unclean
            && holds_records
        {
            return None;
        }
        let (leader, leader_epoch) = if self.leader == Some(node) {
            (None, self.leader_epoch.next())
        } else {
            (self.leader, self.leader_epoch)
        };
        Some(LogUpdate {
            leader,
            leader_epoch,
            in_sync_replicas,
            eligible_leader_replicas,
            unclean_report: Some(reported),
            assignment: None,
        })
    }

    /// Whether this log is in unclean recovery (SPEC 3.5): no leader, the
    /// ISR and the ELR empty, and some replica that held the committed
    /// records reported an unclean restart or resigned a failed
    /// leadership.
    pub fn in_unclean_recovery(&self) -> bool {
        self.leader.is_none()
            && self.in_sync_replicas.is_empty()
            && self.eligible_leader_replicas.is_empty()
            && !self.unclean_replicas.is_empty()
    }

    /// The update by which `node`, a replica outside the ISR, the ELR and
    /// the unclean list, reports where its log ends while this log is in
    /// unclean recovery, or `None` when it need not. It left the ISR
    /// earlier without losing its disk (a session that expired, a lag) and
    /// holds every record committed while it was a member, which every
    /// later member may have lost since in power losses: SPEC G1(c) counts
    /// it as a replica that came back with its disk, so unclean recovery
    /// compares its log end with the others' (and waits for its report
    /// while it is live). Kafka's
    /// KIP-966 compares only the last ISR and ELR members; this is
    /// stronger. The report joins the unclean list like an unclean
    /// restart's would.
    pub fn recovery_candidate_update(
        &self,
        node: NodeId,
        log_end: Option<LogEnd>,
    ) -> Option<LogUpdate> {
        if !self.in_unclean_recovery() || !self.replicas.contains(&node) || self.is_unclean(node) {
            return None;
        }
        self.unclean_shutdown_update(node, log_end)
    }

    /// `log_end` as a report may carry it: not known (`None`) if its last
    /// batch's epoch, its line or an epoch it lists is above this log's
    /// leader epoch; without its start line if that is. No leader ever
    /// wrote in an epoch the log has not reached, so such a log is corrupt:
    /// the epoch field, which the batch CRC does not cover (nor does
    /// Kafka's), changed on the disk, and the epoch cache that would have
    /// caught it was rebuilt from the batches because its own file was
    /// damaged too. Compared as it is, it would win unclean recovery
    /// ([`recovery_leader`](Self::recovery_leader) takes the newest line
    /// first) and truncate the replicas that hold the committed records
    /// (the simulator, seed 4009053: a flipped epoch 1048577 at offset 134
    /// beat a log ending at 498 in epoch 10). Kafka has no such check;
    /// SPEC G5 asks that a changed byte never be served as a record.
    ///
    /// Ends stored before this check existed are read through it too
    /// ([`holding_records`](Self::holding_records),
    /// [`log_end_unknown`](Self::log_end_unknown)): the leader epoch only
    /// grows, so no end it let through is refused later.
    pub fn possible_log_end(&self, log_end: Option<LogEnd>) -> Option<LogEnd> {
        // The line is never below the last batch's epoch.
        let above = |epoch: &LeaderEpoch| *epoch > self.leader_epoch;
        match log_end {
            Some(end)
                if end.line().as_ref().is_some_and(above)
                    || end.epochs.iter().any(|(epoch, _)| above(epoch)) =>
            {
                None
            }
            // A start line above it only lets fewer logs be taken over
            // this one ([`LogEnd::extends`]): it is dropped, the end stands.
            Some(end) if end.start_line.as_ref().is_some_and(above) => Some(LogEnd {
                start_line: None,
                ..end
            }),
            other => other,
        }
    }

    /// The unclean list that goes with storing `update` on this state:
    /// the current list without the members of the new ISR (a replica back
    /// in the ISR holds every committed record again), with
    /// `update.unclean_report` added or replacing that node's entry, in
    /// assignment order.
    fn unclean_replicas_after(&self, update: &LogUpdate) -> Vec<UncleanReplica> {
        let replicas = match &update.assignment {
            Some(assignment) => &assignment.replicas,
            None => &self.replicas,
        };
        replicas
            .iter()
            .filter(|node| !update.in_sync_replicas.contains(node))
            .filter_map(|node| match &update.unclean_report {
                Some(report) if report.node == *node => Some(report.clone()),
                _ => self
                    .unclean_replicas
                    .iter()
                    .find(|r| r.node == *node)
                    .cloned(),
            })
            .collect()
    }

    /// Checks `update` against this (current) state and returns a
    /// [`Error::Coordinator`] naming the offending field and value if the
    /// update would break an invariant or move the leader epoch backwards.
    ///
    /// Rules: the leader, if any, is a replica; the ISR is a subset of the
    /// replicas without repeats; with a leader, the ISR is non-empty and
    /// contains it; the epoch never decreases, and a change of leader
    /// (including to or from "no leader") raises it, as Kafka's controller
    /// does in both ZooKeeper and KRaft mode, so that a replica can tell two
    /// leaderships apart by epoch alone.
    ///
    /// An update with an [`Assignment`] is checked against its replicas
    /// (every other field must fit the new set), and must raise the leader
    /// epoch when the set of replicas changes: the leader learns of its new
    /// followers, and stops counting removed ones, by leading in a new
    /// epoch, and the epoch fences a removed replica's fetches (as Kafka's
    /// ZooKeeper controller bumped the leader epoch at each step of a
    /// reassignment).
    pub fn validate_update(&self, update: &LogUpdate) -> Result<()> {
        let log = self.log;
        let replicas = match &update.assignment {
            Some(assignment) => {
                assignment.validate(log)?;
                if !same_set(&assignment.replicas, &self.replicas)
                    && update.leader_epoch <= self.leader_epoch
                {
                    return Err(coordinator_error(format!(
                        "invalid update of {log}: replicas change from {:?} to {:?} but leader_epoch stays {}",
                        self.replicas, assignment.replicas, update.leader_epoch
                    )));
                }
                &assignment.replicas
            }
            None => &self.replicas,
        };
        if let Some(leader) = update.leader {
            if !replicas.contains(&leader) {
                return Err(coordinator_error(format!(
                    "invalid update of {log}: leader {leader} is not one of the replicas {:?}",
                    replicas
                )));
            }
            if !update.in_sync_replicas.contains(&leader) {
                return Err(coordinator_error(format!(
                    "invalid update of {log}: in_sync_replicas {:?} does not contain the leader {leader}",
                    update.in_sync_replicas
                )));
            }
        }
        if let Some(node) = update
            .in_sync_replicas
            .iter()
            .find(|node| !replicas.contains(node))
        {
            return Err(coordinator_error(format!(
                "invalid update of {log}: in_sync_replicas {:?} contains {node}, which is not one of the replicas {:?}",
                update.in_sync_replicas, replicas
            )));
        }
        if let Some(node) = first_duplicate(&update.in_sync_replicas) {
            return Err(coordinator_error(format!(
                "invalid update of {log}: in_sync_replicas {:?} names {node} twice",
                update.in_sync_replicas
            )));
        }
        let elr = &update.eligible_leader_replicas;
        if let Some(node) = elr.iter().find(|node| !replicas.contains(node)) {
            return Err(coordinator_error(format!(
                "invalid update of {log}: eligible_leader_replicas {elr:?} contains {node}, which is not one of the replicas {:?}",
                replicas
            )));
        }
        if let Some(node) = first_duplicate(elr) {
            return Err(coordinator_error(format!(
                "invalid update of {log}: eligible_leader_replicas {elr:?} names {node} twice"
            )));
        }
        if let Some(node) = elr
            .iter()
            .find(|node| update.in_sync_replicas.contains(node))
        {
            return Err(coordinator_error(format!(
                "invalid update of {log}: {node} is in both in_sync_replicas {:?} and eligible_leader_replicas {elr:?}",
                update.in_sync_replicas
            )));
        }
        // A replica becomes eligible only by leaving the ISR (or by staying
        // eligible): only then is it known to hold every committed record.
        if let Some(node) = elr
            .iter()
            .find(|node| !self.is_in_sync(**node) && !self.is_eligible(**node))
        {
            return Err(coordinator_error(format!(
                "invalid update of {log}: eligible_leader_replicas {elr:?} adds {node}, which is in neither the current in_sync_replicas {:?} nor eligible_leader_replicas {:?}",
                self.in_sync_replicas, self.eligible_leader_replicas
            )));
        }
        if let Some(report) = &update.unclean_report {
            let node = report.node;
            // Or a recovery candidate (`recovery_candidate_update`).
            let candidate = self.in_unclean_recovery() && replicas.contains(&node);
            if !self.is_in_sync(node)
                && !self.is_eligible(node)
                && !self.is_unclean(node)
                && !candidate
            {
                return Err(coordinator_error(format!(
                    "invalid update of {log}: unclean_report names {node}, which is in none of in_sync_replicas {:?}, eligible_leader_replicas {:?} and the unclean replicas, and the log is not in unclean recovery",
                    self.in_sync_replicas, self.eligible_leader_replicas
                )));
            }
            if update.in_sync_replicas.contains(&node) || elr.contains(&node) {
                return Err(coordinator_error(format!(
                    "invalid update of {log}: unclean_report names {node}, which the update keeps in in_sync_replicas {:?} or eligible_leader_replicas {elr:?}",
                    update.in_sync_replicas
                )));
            }
            if let Some(epoch) = report
                .log_end
                .as_ref()
                .and_then(|end| end.last_epoch)
                .filter(|epoch| *epoch > self.leader_epoch)
            {
                return Err(coordinator_error(format!(
                    "invalid update of {log}: unclean_report says {node}'s log ends in a batch of epoch {epoch}, above the log's leader_epoch {}",
                    self.leader_epoch
                )));
            }
            // Only a leader's resignation writes an acknowledged end, with
            // its log end, which bounds it.
            if let Some(acknowledged_end) = report.acknowledged_end {
                let resigns = self.leader == Some(node)
                    && update.leader.is_none()
                    && update.leader_epoch > self.leader_epoch;
                let bounded = report
                    .log_end
                    .as_ref()
                    .is_some_and(|end| acknowledged_end <= end.log_end_offset);
                if !resigns || !bounded {
                    return Err(coordinator_error(format!(
                        "invalid update of {log}: unclean_report gives {node} an acknowledged_end {acknowledged_end}, which only the leader ({:?}) resigning into a leaderless later epoch may, at most at its known log end ({:?})",
                        self.leader,
                        report.log_end.as_ref().map(|end| end.log_end_offset)
                    )));
                }
            }
        }
        if update.leader_epoch < self.leader_epoch {
            return Err(coordinator_error(format!(
                "invalid update of {log}: leader_epoch {} is older than the current {}",
                update.leader_epoch, self.leader_epoch
            )));
        }
        if update.leader != self.leader && update.leader_epoch == self.leader_epoch {
            return Err(coordinator_error(format!(
                "invalid update of {log}: leader changes from {:?} to {:?} but leader_epoch stays {}",
                self.leader, update.leader, update.leader_epoch
            )));
        }
        Ok(())
    }

    /// This state with `update` applied and the version bumped. The caller
    /// has validated the update with [`LogState::validate_update`].
    pub fn with_update(&self, update: LogUpdate) -> LogState {
        let unclean_replicas = self.unclean_replicas_after(&update);
        let assignment = update.assignment.unwrap_or_else(|| Assignment {
            replicas: self.replicas.clone(),
            adding_replicas: self.adding_replicas.clone(),
            removing_replicas: self.removing_replicas.clone(),
        });
        let next = LogState {
            log: self.log,
            replicas: assignment.replicas,
            adding_replicas: assignment.adding_replicas,
            removing_replicas: assignment.removing_replicas,
            leader: update.leader,
            leader_epoch: update.leader_epoch,
            in_sync_replicas: update.in_sync_replicas,
            eligible_leader_replicas: update.eligible_leader_replicas,
            unclean_replicas,
            version: self.version + 1,
        };
        next.check_invariants();
        next
    }

    /// Whether this stored state is exactly what `update` over `before`
    /// stores: how a caller whose compare-and-set ended with
    /// [`Error::CoordinatorOutcomeUnknown`] tells, from a later read, that
    /// its write was applied (SPEC 3.4). Another write reaching the same
    /// state at the same version is indistinguishable, and as good.
    pub fn is_result_of(&self, before: &LogState, update: &LogUpdate) -> bool {
        before.validate_update(update).is_ok() && *self == before.with_update(update.clone())
    }

    /// Asserts the invariants listed on [`LogState`]. A coordinator only
    /// stores states that pass, so a failure here is a bug, not bad input.
    pub fn check_invariants(&self) {
        assert!(!self.replicas.is_empty(), "{}: no replicas", self.log);
        // Only a resigning leader writes an acknowledged end, with its
        // known log end, which bounds it (`validate_update`, `decode_log`).
        assert!(
            self.unclean_replicas
                .iter()
                .all(|r| r.acknowledged_end.is_none_or(|acknowledged| r
                    .log_end
                    .as_ref()
                    .is_some_and(|end| acknowledged <= end.log_end_offset))),
            "{}: an acknowledged end past its log end in {:?}",
            self.log,
            self.unclean_replicas
        );
        assert!(
            first_duplicate(&self.replicas).is_none(),
            "{}: repeated replica in {:?}",
            self.log,
            self.replicas
        );
        assert!(
            self.in_sync_replicas
                .iter()
                .all(|node| self.replicas.contains(node)),
            "{}: ISR {:?} is not a subset of replicas {:?}",
            self.log,
            self.in_sync_replicas,
            self.replicas
        );
        assert!(
            first_duplicate(&self.in_sync_replicas).is_none(),
            "{}: repeated node in ISR {:?}",
            self.log,
            self.in_sync_replicas
        );
        if let Some(leader) = self.leader {
            assert!(
                self.in_sync_replicas.contains(&leader),
                "{}: leader {leader} not in ISR {:?}",
                self.log,
                self.in_sync_replicas
            );
        }
        assert!(
            self.eligible_leader_replicas
                .iter()
                .all(|node| self.replicas.contains(node) && !self.in_sync_replicas.contains(node)),
            "{}: ELR {:?} is not a subset of replicas {:?} outside ISR {:?}",
            self.log,
            self.eligible_leader_replicas,
            self.replicas,
            self.in_sync_replicas
        );
        assert!(
            first_duplicate(&self.eligible_leader_replicas).is_none(),
            "{}: repeated node in ELR {:?}",
            self.log,
            self.eligible_leader_replicas
        );
        let unclean: Vec<NodeId> = self.unclean_replicas.iter().map(|r| r.node).collect();
        assert!(
            unclean.iter().all(|node| self.replicas.contains(node)
                && !self.in_sync_replicas.contains(node)
                && !self.eligible_leader_replicas.contains(node)),
            "{}: unclean replicas {:?} are not a subset of replicas {:?} outside ISR {:?} and ELR {:?}",
            self.log,
            unclean,
            self.replicas,
            self.in_sync_replicas,
            self.eligible_leader_replicas
        );
        assert!(
            first_duplicate(&unclean).is_none(),
            "{}: repeated node in the unclean replicas {:?}",
            self.log,
            unclean
        );
        let assignment = Assignment {
            replicas: self.replicas.clone(),
            adding_replicas: self.adding_replicas.clone(),
            removing_replicas: self.removing_replicas.clone(),
        };
        if let Err(error) = assignment.validate(self.log) {
            panic!("{error}");
        }
    }
}

/// A log's replicas with the ones a reassignment adds and removes (SPEC
/// 3.10, KIP-455): what a [`LogUpdate`] stores when it changes them.
///
/// Invariants ([`Assignment::validate`]): `replicas` is non-empty without
/// repeats; `adding_replicas` and `removing_replicas` are disjoint subsets
/// of it without repeats; `removing_replicas` is not all of `replicas`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The replicas during (or, with nothing added or removed, after) the
    /// move: target ∪ original.
    pub replicas: Vec<NodeId>,
    /// Target replicas that were not original replicas.
    pub adding_replicas: Vec<NodeId>,
    /// Original replicas that are not target replicas.
    pub removing_replicas: Vec<NodeId>,
}

impl Assignment {
    /// An error naming the field and value that break the invariants
    /// listed on [`Assignment`], or `Ok`.
    pub fn validate(&self, log: LogId) -> Result<()> {
        let Assignment {
            replicas,
            adding_replicas,
            removing_replicas,
        } = self;
        if replicas.is_empty() {
            return Err(coordinator_error(format!(
                "invalid assignment of {log}: replicas is empty"
            )));
        }
        for (field, nodes) in [
            ("replicas", replicas),
            ("adding_replicas", adding_replicas),
            ("removing_replicas", removing_replicas),
        ] {
            if let Some(node) = first_duplicate(nodes) {
                return Err(coordinator_error(format!(
                    "invalid assignment of {log}: {field} {nodes:?} names {node} twice"
                )));
            }
            if let Some(node) = nodes.iter().find(|node| !replicas.contains(node)) {
                return Err(coordinator_error(format!(
                    "invalid assignment of {log}: {field} {nodes:?} contains {node}, which is not one of the replicas {replicas:?}"
                )));
            }
        }
        if let Some(node) = adding_replicas
            .iter()
            .find(|node| removing_replicas.contains(node))
        {
            return Err(coordinator_error(format!(
                "invalid assignment of {log}: {node} is in both adding_replicas {adding_replicas:?} and removing_replicas {removing_replicas:?}"
            )));
        }
        if removing_replicas.len() >= replicas.len() {
            return Err(coordinator_error(format!(
                "invalid assignment of {log}: removing_replicas {removing_replicas:?} removes every replica of {replicas:?}"
            )));
        }
        Ok(())
    }
}

/// The part of a [`LogState`] a compare-and-set may change. The replicas
/// change only with an [`Assignment`] (a reassignment, SPEC 3.10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogUpdate {
    /// The new leader, or `None` for "no leader".
    pub leader: Option<NodeId>,
    /// The new leader epoch: never lower than the current one, and higher
    /// when the leader changes.
    pub leader_epoch: LeaderEpoch,
    /// The new ISR.
    pub in_sync_replicas: Vec<NodeId>,
    /// The new ELR: a subset of the current ISR and ELR, disjoint from the
    /// new ISR (normally [`LogState::eligible_leader_replicas_after`]).
    pub eligible_leader_replicas: Vec<NodeId>,
    /// A replica whose node restarted after an unclean shutdown, with its
    /// log end: it joins (or is updated in) [`LogState::unclean_replicas`].
    /// Set by [`LogState::unclean_shutdown_update`], and by a failed
    /// leader's resignation, which lists the leader itself with the end of
    /// what was acknowledged ([`UncleanReplica::acknowledged_end`]); every
    /// other update leaves it `None`, and the stored list then only loses
    /// the members of the new ISR.
    pub unclean_report: Option<UncleanReplica>,
    /// New replicas, with the ones being added and removed (SPEC 3.10), or
    /// `None` to keep the stored ones: only a reassignment, its
    /// cancellation and its completion set it.
    pub assignment: Option<Assignment>,
}

impl LogUpdate {
    /// The update that stores `state` as it is: writing it only moves the
    /// version on, which fences every compare-and-set built on an earlier
    /// version (how [`Coordinator::report_unclean_shutdown`] refuses ISR
    /// expansions checked against a crashed process).
    pub fn unchanged(state: &LogState) -> LogUpdate {
        LogUpdate {
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            in_sync_replicas: state.in_sync_replicas.clone(),
            eligible_leader_replicas: state.eligible_leader_replicas.clone(),
            unclean_report: None,
            assignment: None,
        }
    }

    /// An update that keeps the leader and epoch of `state` and sets the ISR,
    /// with the ELR that follows from it for `min_insync_replicas`
    /// ([`LogState::eligible_leader_replicas_after`]): what a leader
    /// proposes when it shrinks or expands the ISR (SPEC 3.4).
    pub fn in_sync_replicas(
        state: &LogState,
        in_sync_replicas: Vec<NodeId>,
        min_insync_replicas: usize,
    ) -> LogUpdate {
        LogUpdate {
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            eligible_leader_replicas: state
                .eligible_leader_replicas_after(&in_sync_replicas, min_insync_replicas),
            in_sync_replicas,
            unclean_report: None,
            assignment: None,
        }
    }
}

/// The result of [`Coordinator::compare_and_set`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    /// The update was stored; this is the new state.
    Applied(LogState),
    /// The stored epoch or version differed from the expected ones: someone
    /// else updated the log first. Nothing changed; this is the current
    /// state. Losing a race is normal, so this is not an error.
    Stale(LogState),
}

impl CasOutcome {
    /// Whether the update was stored.
    pub fn is_applied(&self) -> bool {
        matches!(self, CasOutcome::Applied(_))
    }

    /// The state after the call: the new one, or the current one.
    pub fn state(&self) -> &LogState {
        match self {
            CasOutcome::Applied(state) | CasOutcome::Stale(state) => state,
        }
    }
}

/// The epoch of the cluster's controller: grows by one every time a new
/// controller is elected, so that orders from a deposed controller can be
/// told apart from the current one's (Kafka's `controller_epoch`). The first
/// controller gets epoch 1, as in Kafka, whose epoch znode starts at 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ControllerEpoch(pub u64);

impl ControllerEpoch {
    /// The epoch after this one.
    #[inline]
    pub fn next(self) -> ControllerEpoch {
        ControllerEpoch(self.0 + 1)
    }
}

impl fmt::Display for ControllerEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A change notification. Events are hints: a receiver re-reads whatever it
/// cares about from the coordinator rather than trusting an event as the
/// whole truth, because a slow receiver may miss some (then it gets
/// [`CoordinatorEvent::Resync`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorEvent {
    /// A log was created or updated: one hosted by the receiving node, or
    /// any log for a receiver from [`Coordinator::subscribe_all`].
    LogChanged(LogState),
    /// A node's session began or ended, or a node registered again (a new
    /// incarnation, the set maybe unchanged); `live` is the new set, sorted.
    NodesChanged {
        /// The live nodes, sorted.
        live: Vec<NodeId>,
    },
    /// The controller seat was taken or emptied.
    ControllerChanged {
        /// The new controller, or `None` when the seat is empty.
        controller: Option<NodeId>,
        /// The controller epoch (the last one when the seat is empty).
        epoch: ControllerEpoch,
    },
    /// Events for this receiver were dropped because its queue was full:
    /// re-read everything.
    Resync,
}

/// The metadata service, as the replication layer sees it. Every method may
/// fail with [`Error::Coordinator`] when the service cannot be reached; the
/// caller retries later and, meanwhile, must not act as if its proposal had
/// been accepted (SPEC 3.7).
///
/// **Writes whose outcome is unknown** (SPEC 3.4). A method that writes
/// (each says so) fails with [`Error::CoordinatorOutcomeUnknown`] when the
/// request was sent but no answer came back — the connection dropped, or the
/// call timed out, after the request left — because the store may or may
/// not have applied it. The caller must treat such a write as neither
/// accepted nor refused: whatever it would do on either outcome waits until
/// a read ([`Coordinator::log_state`], which reflects every write applied
/// before the read was made) shows which one happened. An implementation
/// never returns it for a write that certainly did not happen (it was
/// refused, invalid, or never sent): those are [`Error::Coordinator`] (or
/// [`CasOutcome::Stale`]), so that callers are not made to wait for nothing.
pub trait Coordinator: Send + Sync + 'static {
    /// Creates a log: leader = first replica, epoch 0, ISR = all replicas,
    /// version 0, and notifies the replicas. Errs if the log exists or
    /// `replicas` is empty or repeats a node. A write: may fail with
    /// [`Error::CoordinatorOutcomeUnknown`] (then the log may exist).
    fn create_log(&self, log: LogId, replicas: Vec<NodeId>) -> Result<LogState>;

    /// The stored state of `log`, or `None` if there is no such log. It
    /// reflects every write the store applied before this call began,
    /// including one whose caller got [`Error::CoordinatorOutcomeUnknown`]
    /// (a ZooKeeper implementation syncs first, as a read from a lagging
    /// server could miss it): this is the read that settles such a write.
    fn log_state(&self, log: LogId) -> Result<Option<LogState>>;

    /// Every log, sorted by id.
    fn logs(&self) -> Result<Vec<LogState>>;

    /// Compare-and-set: succeeds only if the stored leader epoch and version
    /// equal `expected_epoch` and `expected_version`; then stores `update`
    /// with version + 1, notifies every node hosting the log (and every
    /// replica the update's [`Assignment`] removed, SPEC 3.10) and returns
    /// [`CasOutcome::Applied`]. On a mismatch it changes nothing and returns
    /// [`CasOutcome::Stale`] with the current state. An update that breaks
    /// the rules of [`LogState::validate_update`] is an
    /// [`Error::Coordinator`]; an unknown log is [`Error::UnknownLog`].
    ///
    /// A write: when the request was sent but its answer lost, fails with
    /// [`Error::CoordinatorOutcomeUnknown`]; the caller settles it with
    /// [`Coordinator::log_state`] (stored version above `expected_version`:
    /// something was written, possibly this update; equal: it was not).
    fn compare_and_set(
        &self,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome>;

    /// [`Coordinator::compare_and_set`] on behalf of the controller: in the
    /// same atomic step, first checks that `controller` holds the controller
    /// seat with `controller_epoch` (ZooKeeper multi-op / etcd txn
    /// semantics; Kafka's controller makes each write conditional on its
    /// epoch znode's version). If it does not — it never did, it resigned,
    /// its session ended, or a newer controller took over — nothing changes
    /// and the call fails with [`Error::Coordinator`] naming the refused
    /// controller epoch, whatever the log's state: a deposed controller's
    /// decisions were made from a view that is no longer authoritative.
    /// Otherwise it behaves exactly as [`Coordinator::compare_and_set`],
    /// including [`Error::CoordinatorOutcomeUnknown`] for a lost answer.
    fn compare_and_set_as_controller(
        &self,
        controller: NodeId,
        controller_epoch: ControllerEpoch,
        log: LogId,
        expected_epoch: LeaderEpoch,
        expected_version: u64,
        update: LogUpdate,
    ) -> Result<CasOutcome>;

    /// Opens (or renews) `node`'s session: the node is live until
    /// `session_timeout` passes without a [`Coordinator::heartbeat`].
    /// Registering a node that is already live refreshes its session.
    /// A write ([`Error::CoordinatorOutcomeUnknown`] possible); registering
    /// again settles it.
    ///
    /// Returns the registration's [`Incarnation`] (Kafka's broker epoch,
    /// KIP-903; over ZooKeeper, as in Kafka, the czxid of the node's
    /// ephemeral registration znode). A registration that opens a new
    /// session gets a larger incarnation than every earlier registration of
    /// `node`, so a restarted process always has a larger one than the
    /// process before it; renewing a live session may keep the incarnation
    /// (ZooKeeper: the same session and znode) or hand out a larger one
    /// (the memory coordinator, which cannot tell a renewal from a restart),
    /// never a smaller one. Leaders count a follower's fetches only from its
    /// current incarnation (SPEC 3.2), which they read with
    /// [`Coordinator::live_node_incarnations`].
    fn register_node(&self, node: NodeId, session_timeout: Duration) -> Result<Incarnation>;

    /// Called by a node that starts without proof that it last stopped
    /// cleanly (SPEC 3.5, Kafka's broker registration without a clean
    /// shutdown marker, KIP-966), before it registers: it may have lost
    /// records it had acknowledged as an ISR or ELR member, so for every log
    /// with a replica on `node` this applies
    /// [`LogState::unclean_shutdown_update`] with compare-and-set: `node`
    /// leaves the ISR and the ELR for the log's unclean list with the log
    /// end it reports in `log_ends` (a log missing there counts as empty;
    /// `None`, an end not known yet, see [`UncleanReplica::log_end`]),
    /// and a log it leads becomes leaderless in a new epoch, so the
    /// controller elects another eligible replica. Returns the logs it
    /// changed.
    ///
    /// Doing this before [`Coordinator::register_node`] means a node is
    /// never live while the coordinator still counts it as eligible for a
    /// log whose data it may have lost.
    ///
    /// **Fencing the previous process** (SPEC G1). A leader checks that the
    /// fetches which qualify a follower for the ISR come from the
    /// follower's current registration before it writes the expansion, not
    /// atomically with the write (ZooKeeper's `multi` can only check data
    /// versions; Kafka's controller checks the broker epoch carried by
    /// `AlterPartition` in the same step). An expansion checked against the
    /// crashed process, written after this report, would put the restarted
    /// replica, which may have lost records, into the ISR. So the report
    /// first ends the previous process's registration
    /// ([`Coordinator::unregister_previous_process`]), and then writes
    /// every log with a replica on `node` that needs no change the same
    /// state again, which only moves its version on. An expansion built
    /// before the report either applied before the report read the log
    /// (the report then takes `node` out again) or expects an older version
    /// and is refused as stale; the leader then checks the incarnation
    /// again against a read made after the unregistration, and the old one
    /// is gone. The order matters: fenced first and unregistered after, a
    /// leader could check the old registration after the fence and write
    /// on top of it. These fence writes are not returned as changes.
    ///
    /// Idempotent in content: a second call with the same log ends changes
    /// no log's content (it moves versions on again). The provided
    /// implementation needs nothing but
    /// [`Coordinator::unregister_previous_process`], [`Coordinator::logs`]
    /// and [`Coordinator::compare_and_set`], so it is the same rule for
    /// every coordinator and fails, as they do, with [`Error::Coordinator`]
    /// when the service cannot be reached (the caller retries; logs already
    /// changed stay changed), or with [`Error::CoordinatorOutcomeUnknown`]
    /// when a write's answer was lost: retrying is then the settling read,
    /// since every call starts by reading the stored state and decides from
    /// it (and unregistering again settles the unregistration).
    ///
    /// A log whose document this version must not change
    /// ([`Error::CoordinatorDocument`]: a newer node's fields in it) is
    /// skipped with a warning rather than failing the whole report, so that
    /// one such document cannot keep a node from starting (issue 24). The
    /// caller must then keep `node` out of that log until the stored state
    /// no longer counts it eligible ([`LogState::unclean_shutdown_update`]
    /// returns `None`); [`Node`](crate::Node) does.
    fn report_unclean_shutdown(
        &self,
        node: NodeId,
        log_ends: &[(LogId, Option<LogEnd>)],
    ) -> Result<Vec<LogState>> {
        // First, before any log is read: the fences below only work if
        // the previous process's registration is gone when they are
        // written (see this method's documentation).
        self.unregister_previous_process(node)?;
        let mut changed = Vec::new();
        for state in self.logs()? {
            if !state.replicas.contains(&node) {
                continue;
            }
            let log_end = log_ends
                .iter()
                .find(|(log, _)| *log == state.log)
                .map(|(_, end)| end.clone())
                .unwrap_or(Some(LogEnd::default()));
            if state.possible_log_end(log_end.clone()) != log_end {
                warn_impossible_log_end(&state, node, log_end.as_ref());
            }
            let mut current = state;
            // A lost race means someone else wrote the log meanwhile:
            // decide again from what they wrote. Bounded, as every loop.
            let mut attempts = 0;
            loop {
                let (update, fence) = match current.unclean_shutdown_update(node, log_end.clone()) {
                    Some(update) => (update, false),
                    // Nothing to report: write the state unchanged, so
                    // that its version moves on (see above). Only this
                    // call's own write, applied, ends the loop: a version
                    // that moved under a lost race may have moved before
                    // the unregistration (a read served by a lagging
                    // ZooKeeper server), so it proves nothing.
                    None => (LogUpdate::unchanged(&current), true),
                };
                attempts += 1;
                if attempts > UNCLEAN_SHUTDOWN_ATTEMPTS_MAX {
                    return Err(coordinator_error(format!(
                        "cannot take {node} out of the ISR and ELR of {} (or fence ISR changes \
                         made before its restart): {UNCLEAN_SHUTDOWN_ATTEMPTS_MAX} \
                         compare-and-set attempts lost races",
                        current.log
                    )));
                }
                let written = self.compare_and_set(
                    current.log,
                    current.leader_epoch,
                    current.version,
                    update.clone(),
                );
                match written {
                    Ok(CasOutcome::Applied(stored)) => {
                        if !fence {
                            changed.push(stored);
                        }
                        break;
                    }
                    Ok(CasOutcome::Stale(stored)) => current = stored,
                    // Maybe applied (SPEC 3.4): read what is stored and
                    // decide again from it, as after a lost race.
                    Err(error) if error.is_outcome_unknown() => {
                        tracing::warn!(%node, log = %current.log, %error,
                            "unclean-shutdown report: outcome unknown, re-reading the log");
                        let stored = match self.log_state(current.log) {
                            Ok(Some(stored)) => stored,
                            Ok(None) => break,
                            Err(error @ Error::CoordinatorDocument { .. }) => {
                                skipped(node, current.log, &error);
                                break;
                            }
                            Err(error) => return Err(error),
                        };
                        // A fence whose answer was lost is written again:
                        // an identical state one version up may be another
                        // writer's.
                        if !fence && stored.is_result_of(&current, &update) {
                            changed.push(stored);
                            break;
                        }
                        current = stored;
                    }
                    Err(error @ Error::CoordinatorDocument { .. }) => {
                        skipped(node, current.log, &error);
                        break;
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(changed)
    }

    /// Keeps `node`'s session alive. Errs if the node has no session,
    /// including when it already expired: the node must register again, and
    /// should assume it lost any role (controller) it held.
    fn heartbeat(&self, node: NodeId) -> Result<()>;

    /// Ends `node`'s session now (a clean shutdown). Releases the controller
    /// seat if the node held it. A node without a session is not an error.
    /// A write ([`Error::CoordinatorOutcomeUnknown`] possible); calling it
    /// again settles it.
    fn unregister_node(&self, node: NodeId) -> Result<()>;

    /// Ends the registration `node`'s previous process left behind when it
    /// stopped without unregistering (a crash, a power loss), whichever
    /// session or coordinator client holds it: called by a restarted
    /// process of `node` before it registers
    /// ([`Coordinator::report_unclean_shutdown`] does), so that the old
    /// process's incarnation stops looking current at once instead of when
    /// its session expires. As the process that registered is gone, this is
    /// what its session's expiry would do later (Kafka: a broker that
    /// registers with a new epoch fences the old one at once). Never call
    /// it once this process has registered: it would end that
    /// registration. Having no registration is not an error.
    ///
    /// The provided implementation is [`Coordinator::unregister_node`], right
    /// for a coordinator whose sessions are known to every client (the
    /// memory coordinator); one whose clients only end their own sessions
    /// (ZooKeeper) deletes the registration itself. A write
    /// ([`Error::CoordinatorOutcomeUnknown`] possible); calling it again
    /// settles it.
    fn unregister_previous_process(&self, node: NodeId) -> Result<()> {
        self.unregister_node(node)
    }

    /// The nodes with a live session, sorted.
    fn live_nodes(&self) -> Result<Vec<NodeId>>;

    /// The nodes with a live session, sorted, each with the incarnation its
    /// current registration got from [`Coordinator::register_node`]. A
    /// change of a node's incarnation is announced like a change of the
    /// live set, with [`CoordinatorEvent::NodesChanged`] (the set in it may
    /// be the same as before).
    fn live_node_incarnations(&self) -> Result<Vec<(NodeId, Incarnation)>>;

    /// A bounded stream of events for `node`: changes of logs it hosts, of
    /// the live node set and of the controller. A node may subscribe more
    /// than once; each receiver gets every event (or a `Resync`).
    fn subscribe(&self, node: NodeId) -> Result<crossbeam_channel::Receiver<CoordinatorEvent>>;

    /// Like [`Coordinator::subscribe`], but with a
    /// [`CoordinatorEvent::LogChanged`] for every log, hosted by `node` or
    /// not: what the controller needs to notice a log it does not host (one
    /// created with a dead first replica, say) without waiting for its poll.
    /// `node` still names the receiver for reachability: while `node` is cut
    /// off, it hears nothing, as with `subscribe`.
    fn subscribe_all(&self, node: NodeId) -> Result<crossbeam_channel::Receiver<CoordinatorEvent>>;

    /// Takes the controller seat if no live node holds it and returns the new
    /// controller epoch; returns `None` if another live node holds it. A node
    /// that already holds the seat gets its current epoch back. Errs if
    /// `node` has no live session. A write: after
    /// [`Error::CoordinatorOutcomeUnknown`] `node` may hold the seat; asking
    /// again (which returns its epoch if it does) or
    /// [`Coordinator::controller`] settles it.
    fn try_become_controller(&self, node: NodeId) -> Result<Option<ControllerEpoch>>;

    /// Empties the controller seat if `node` holds it (a clean shutdown of
    /// the controller), announced with [`CoordinatorEvent::ControllerChanged`]
    /// so another node can take it at once instead of waiting for `node`'s
    /// session to end. `node` keeps its session. Not holding the seat is not
    /// an error: nothing changes. A write
    /// ([`Error::CoordinatorOutcomeUnknown`] possible); calling it again
    /// settles it.
    fn resign_controller(&self, node: NodeId) -> Result<()>;

    /// The live controller and its epoch, if the seat is taken.
    fn controller(&self) -> Result<Option<(NodeId, ControllerEpoch)>>;

    /// A producer id never handed out before (SPEC §4). A write: after
    /// [`Error::CoordinatorOutcomeUnknown`] an id may have been used up
    /// (never handed out twice); the caller just asks again.
    fn allocate_producer_id(&self) -> Result<ProducerId>;

    /// The cluster's id (SPEC 2.8): chosen at random when the coordinator's
    /// store is first set up (Kafka's `/cluster/id` znode), the same for
    /// every caller and every call from then on. A node refuses a data
    /// directory whose identity names another.
    fn cluster_id(&self) -> Result<ClusterId>;

    /// The data directory each replica on `node` was placed on, by log
    /// (SPEC 2.8, Kafka's KIP-858 `directories` of a partition), sorted by
    /// log. A replica not listed was never placed on any directory, so it
    /// never held a record. Entries of deleted logs may remain.
    fn replica_directories(&self, node: NodeId) -> Result<Vec<(LogId, DirectoryId)>>;

    /// Records that `node`'s replicas of `logs` live on `directory`,
    /// replacing what was recorded for them. A node calls it before one
    /// of those replicas serves anything, so that a replica which may hold
    /// records always has a directory on record, and with
    /// [`DirectoryId::UNASSIGNED`](crate::DirectoryId::UNASSIGNED) once it
    /// deleted their copies. Changes no [`LogState`]
    /// and sends no event. A write ([`Error::CoordinatorOutcomeUnknown`]
    /// possible): the caller must not let those replicas serve until a
    /// call succeeds (it is idempotent, so calling again settles it).
    fn record_replica_directories(
        &self,
        node: NodeId,
        directory: DirectoryId,
        logs: &[LogId],
    ) -> Result<()>;
}

/// Compare-and-set attempts per log in
/// [`Coordinator::report_unclean_shutdown`] before giving up.
const UNCLEAN_SHUTDOWN_ATTEMPTS_MAX: usize = 16;
/// Logs that [`Coordinator::report_unclean_shutdown`] skipped `log`, whose
/// document this version must not change.
fn skipped(node: NodeId, log: LogId, error: &Error) {
    tracing::warn!(%node, %log, %error,
        "unclean-shutdown report: skipping a log whose document this version cannot change; the node stays out of it until the report is recorded");
}

fn coordinator_error(reason: String) -> Error {
    Error::Coordinator { reason }
}

/// Whether `a` and `b` hold the same nodes, in any order (neither repeats
/// a node).
fn same_set(a: &[NodeId], b: &[NodeId]) -> bool {
    a.len() == b.len() && a.iter().all(|node| b.contains(node))
}

fn first_duplicate(nodes: &[NodeId]) -> Option<NodeId> {
    nodes
        .iter()
        .enumerate()
        .find(|(i, node)| nodes[..*i].contains(node))
        .map(|(_, node)| *node)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(id: u32) -> NodeId {
        NodeId(id)
    }

    fn state(leader: Option<u32>, epoch: u32, isr: &[u32]) -> LogState {
        LogState {
            log: LogId(7),
            replicas: vec![n(1), n(2), n(3)],
            leader: leader.map(n),
            leader_epoch: LeaderEpoch(epoch),
            in_sync_replicas: isr.iter().copied().map(n).collect(),
            eligible_leader_replicas: Vec::new(),
            version: 4,
            unclean_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    }

    fn update(leader: Option<u32>, epoch: u32, isr: &[u32]) -> LogUpdate {
        LogUpdate {
            leader: leader.map(n),
            leader_epoch: LeaderEpoch(epoch),
            in_sync_replicas: isr.iter().copied().map(n).collect(),
            eligible_leader_replicas: Vec::new(),
            unclean_report: None,
            assignment: None,
        }
    }

    #[test]
    fn validate_update_table() {
        // (name, update against state {leader 1, epoch 2, ISR [1,2,3]},
        //  Ok or a fragment the error must contain)
        let cases: &[(&str, LogUpdate, std::result::Result<(), &str>)] = &[
            ("shrink isr", update(Some(1), 2, &[1, 3]), Ok(())),
            ("shrink to leader alone", update(Some(1), 2, &[1]), Ok(())),
            ("new leader, epoch + 1", update(Some(2), 3, &[2, 3]), Ok(())),
            ("epoch jumps ahead", update(Some(2), 9, &[2]), Ok(())),
            (
                "same leader, new epoch",
                update(Some(1), 3, &[1, 2, 3]),
                Ok(()),
            ),
            ("no leader, keeps last isr", update(None, 3, &[1]), Ok(())),
            ("no leader, empty isr", update(None, 3, &[]), Ok(())),
            (
                "leader not a replica",
                update(Some(9), 3, &[9]),
                Err("leader node-9"),
            ),
            (
                "isr without leader",
                update(Some(1), 2, &[2, 3]),
                Err("does not contain the leader node-1"),
            ),
            (
                "empty isr with leader",
                update(Some(1), 2, &[]),
                Err("does not contain the leader"),
            ),
            (
                "isr not a subset",
                update(Some(1), 2, &[1, 4]),
                Err("contains node-4"),
            ),
            (
                "isr repeats a node",
                update(Some(1), 2, &[1, 2, 1]),
                Err("names node-1 twice"),
            ),
            (
                "epoch backwards",
                update(Some(1), 1, &[1]),
                Err("leader_epoch 1 is older than the current 2"),
            ),
            (
                "leader change, same epoch",
                update(Some(2), 2, &[2]),
                Err("leader_epoch stays 2"),
            ),
            (
                "to no leader, same epoch",
                update(None, 2, &[1]),
                Err("leader_epoch stays 2"),
            ),
        ];
        let current = state(Some(1), 2, &[1, 2, 3]);
        for (name, update, expected) in cases {
            let got = current.validate_update(update);
            match (expected, got) {
                (Ok(()), Ok(())) => {}
                (Err(fragment), Err(Error::Coordinator { reason })) => assert!(
                    reason.contains(fragment),
                    "{name}: reason {reason:?} does not mention {fragment:?}"
                ),
                (expected, got) => panic!("{name}: expected {expected:?}, got {got:?}"),
            }
        }
    }

    fn with_elr(mut state: LogState, elr: &[u32]) -> LogState {
        state.eligible_leader_replicas = elr.iter().copied().map(n).collect();
        state.check_invariants();
        state
    }

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(n).collect()
    }

    /// Kafka's `maybePopulateTargetElr` on the pure state: shrinking below
    /// the minimum, re-expansion, and the minimum reached again.
    #[test]
    fn eligible_leader_replicas_after_table() {
        // (name, current ISR, current ELR, new ISR, min ISR, expected ELR)
        type Case = (
            &'static str,
            &'static [u32],
            &'static [u32],
            &'static [u32],
            usize,
            &'static [u32],
        );
        let cases: &[Case] = &[
            (
                "shrink, still at the minimum",
                &[1, 2, 3],
                &[],
                &[1, 2],
                2,
                &[],
            ),
            ("shrink below the minimum", &[1, 2], &[], &[1], 2, &[2]),
            (
                "two leave at once, both join",
                &[1, 2, 3],
                &[],
                &[1],
                2,
                &[2, 3],
            ),
            (
                "one more leaves: joins the others",
                &[1, 3],
                &[2],
                &[1],
                3,
                &[2, 3],
            ),
            ("min ISR 1: never an ELR", &[1, 2], &[], &[1], 1, &[]),
            (
                "re-expansion below the minimum: it leaves the ELR",
                &[1],
                &[2, 3],
                &[1, 2],
                3,
                &[3],
            ),
            (
                "back at the minimum: the ELR empties",
                &[1],
                &[2, 3],
                &[1, 2],
                2,
                &[],
            ),
            ("ISR unchanged keeps the ELR", &[1], &[3], &[1], 2, &[3]),
            (
                "ELR member elected leads alone",
                &[1],
                &[2, 3],
                &[3],
                2,
                &[1, 2],
            ),
            (
                "assignment order, not ISR order",
                &[3, 1, 2],
                &[],
                &[1],
                3,
                &[2, 3],
            ),
        ];
        for (name, isr, elr, new_isr, min, expected) in cases {
            let current = with_elr(state(None, 2, isr), elr);
            let got = current.eligible_leader_replicas_after(&nodes(new_isr), *min);
            assert_eq!(got, nodes(expected), "{name}");
            let update = LogUpdate {
                leader: None,
                leader_epoch: LeaderEpoch(2),
                in_sync_replicas: nodes(new_isr),
                eligible_leader_replicas: got,
                unclean_report: None,
                assignment: None,
            };
            current
                .validate_update(&update)
                .unwrap_or_else(|error| panic!("{name}: {error}"));
        }
    }

    fn end(epoch: u32, offset: u64) -> LogEnd {
        LogEnd {
            last_epoch: Some(LeaderEpoch(epoch)),
            log_end_offset: Offset(offset),
            ..Default::default()
        }
    }

    /// A log end offset standing for an end not known yet in the tables.
    const UNKNOWN: u64 = u64::MAX;

    /// `end(epoch, offset)`, or not known for [`UNKNOWN`].
    fn reported(epoch: u32, offset: u64) -> Option<LogEnd> {
        (offset != UNKNOWN).then(|| end(epoch, offset))
    }

    /// Unclean replicas `(node, log end offset)`, all ending in epoch 1.
    fn unclean(list: &[(u32, u64)]) -> Vec<UncleanReplica> {
        list.iter()
            .map(|&(node, offset)| UncleanReplica {
                node: n(node),
                acknowledged_end: None,
                log_end: reported(1, offset),
            })
            .collect()
    }

    /// The simulator's seed 4009053: a log end in an epoch above the log's
    /// own is corrupt data. It is reported as not known, and an update
    /// that stores it anyway is refused, naming the epochs.
    #[test]
    fn a_log_end_in_an_epoch_the_log_never_reached_counts_as_not_known() {
        let current = state(Some(1), 5, &[1, 2]);
        assert_eq!(current.possible_log_end(Some(end(5, 9))), Some(end(5, 9)));
        assert_eq!(current.possible_log_end(Some(end(6, 9))), None);
        assert_eq!(current.possible_log_end(None), None);
        let update = current
            .unclean_shutdown_update(n(2), Some(end(1_048_577, 135)))
            .expect("node 2 leaves the ISR");
        let not_known = UncleanReplica {
            node: n(2),
            acknowledged_end: None,
            log_end: None,
        };
        assert_eq!(update.unclean_report, Some(not_known));
        current.validate_update(&update).unwrap();
        let mut forged = update;
        forged.unclean_report = Some(UncleanReplica {
            node: n(2),
            acknowledged_end: None,
            log_end: Some(end(6, 135)),
        });
        let error = current.validate_update(&forged).unwrap_err().to_string();
        assert!(
            error.contains("epoch 6, above the log's leader_epoch 5"),
            "{error}"
        );
    }

    /// The fence an unclean-shutdown report writes stores every field as it
    /// was and only moves the version on, whatever the log holds: a leader,
    /// an ELR, an unclean list, a reassignment in progress.
    #[test]
    fn an_unchanged_update_only_moves_the_version() {
        let mut recovering = state(None, 3, &[]);
        recovering.unclean_replicas = unclean(&[(1, 7), (3, UNKNOWN)]);
        let mut moving = state(Some(1), 2, &[1, 2]);
        moving.replicas = nodes(&[1, 2, 3, 4]);
        moving.adding_replicas = nodes(&[4]);
        moving.removing_replicas = nodes(&[3]);
        let mut with_unclean = with_elr(state(Some(2), 5, &[2]), &[1]);
        with_unclean.unclean_replicas = unclean(&[(3, 4)]);
        for before in [
            state(Some(1), 0, &[1, 2, 3]),
            with_unclean,
            recovering,
            moving,
        ] {
            before.check_invariants();
            let update = LogUpdate::unchanged(&before);
            before
                .validate_update(&update)
                .unwrap_or_else(|error| panic!("{before:?}: {error}"));
            let after = before.with_update(update);
            assert_eq!(after.version, before.version + 1, "{before:?}");
            assert_eq!(
                LogState {
                    version: before.version,
                    ..after
                },
                before
            );
        }
    }

    /// A node back from an unclean shutdown leaves the ISR and ELR of its
    /// logs for the unclean list with its log end (a leader it was:
    /// leaderless in a new epoch), unless it is the only replica left that
    /// ever held every committed record.
    #[test]
    fn unclean_shutdown_update_table() {
        // (name, leader, ISR, ELR, unclean list before, the unclean node
        //  and its log end offset, expected (leader, epoch, ISR, ELR,
        //  unclean list after), or None)
        type Expected = Option<(
            Option<u32>,
            u32,
            &'static [u32],
            &'static [u32],
            &'static [(u32, u64)],
        )>;
        type Case = (
            &'static str,
            Option<u32>,
            &'static [u32],
            &'static [u32],
            &'static [(u32, u64)],
            (u32, u64),
            Expected,
        );
        let cases: &[Case] = &[
            (
                "the only eligible replica left, its end not known: it leaves",
                None,
                &[],
                &[2],
                &[],
                (2, UNKNOWN),
                Some((None, 2, &[], &[], &[(2, UNKNOWN)])),
            ),
            (
                "an end not known replaces a known one",
                None,
                &[],
                &[],
                &[(1, 10), (2, 4)],
                (2, UNKNOWN),
                Some((None, 2, &[], &[], &[(1, 10), (2, UNKNOWN)])),
            ),
            (
                "follower in the ISR",
                Some(1),
                &[1, 2, 3],
                &[],
                &[],
                (2, 10),
                Some((Some(1), 2, &[1, 3], &[], &[(2, 10)])),
            ),
            (
                "the leader: leaderless, new epoch",
                Some(1),
                &[1, 2],
                &[],
                &[],
                (1, 4),
                Some((None, 3, &[2], &[], &[(1, 4)])),
            ),
            (
                "an ELR member",
                Some(1),
                &[1],
                &[2, 3],
                &[],
                (3, 9),
                Some((Some(1), 2, &[1], &[2], &[(3, 9)])),
            ),
            (
                "leaderless, last ISR member, an ELR member left",
                None,
                &[1],
                &[2],
                &[],
                (1, 7),
                Some((None, 2, &[], &[2], &[(1, 7)])),
            ),
            (
                "the only eligible replica left, nobody unclean: it stays",
                None,
                &[],
                &[2],
                &[],
                (2, 5),
                None,
            ),
            (
                "the only ISR member, no ELR, nobody unclean: it stays",
                None,
                &[1],
                &[],
                &[],
                (1, 5),
                None,
            ),
            (
                "the sole leader, nobody unclean: it stays (its restart bumps the epoch)",
                Some(1),
                &[1],
                &[],
                &[],
                (1, 5),
                None,
            ),
            (
                "the sole leader came back empty (lost its disk): it leaves, recovery decides",
                Some(1),
                &[1],
                &[],
                &[],
                (1, 0),
                Some((None, 3, &[], &[], &[(1, 0)])),
            ),
            (
                "the last eligible replica joins the unclean ones: recovery decides",
                None,
                &[],
                &[2],
                &[(1, 10), (3, 8)],
                (2, 3),
                Some((None, 2, &[], &[], &[(1, 10), (2, 3), (3, 8)])),
            ),
            (
                "the last ISR member and leader joins the unclean ones",
                Some(3),
                &[3],
                &[],
                &[(1, 10)],
                (3, 2),
                Some((None, 3, &[], &[], &[(1, 10), (3, 2)])),
            ),
            (
                "already unclean, a new log end replaces the old",
                Some(1),
                &[1],
                &[],
                &[(2, 10)],
                (2, 6),
                Some((Some(1), 2, &[1], &[], &[(2, 6)])),
            ),
            (
                "already unclean, same log end: nothing to do",
                Some(1),
                &[1],
                &[],
                &[(2, 10)],
                (2, 10),
                None,
            ),
            (
                "not in the ISR, ELR or unclean list: nothing to do",
                Some(1),
                &[1],
                &[2],
                &[],
                (3, 1),
                None,
            ),
            (
                "outside every list while the log is in unclean recovery: joins as a candidate",
                None,
                &[],
                &[],
                &[(1, 10)],
                (3, 12),
                Some((None, 2, &[], &[], &[(1, 10), (3, 12)])),
            ),
        ];
        for (name, leader, isr, elr, before, (node, offset), expected) in cases {
            let mut current = with_elr(state(*leader, 2, isr), elr);
            current.unclean_replicas = unclean(before);
            current.check_invariants();
            let got = current.unclean_shutdown_update(n(*node), reported(1, *offset));
            let Some((leader, epoch, isr, elr, after)) = expected else {
                assert_eq!(got, None, "{name}");
                continue;
            };
            let update = got.unwrap_or_else(|| panic!("{name}: no update"));
            assert_eq!(
                (
                    update.leader,
                    update.leader_epoch,
                    update.in_sync_replicas.clone(),
                    update.eligible_leader_replicas.clone()
                ),
                (leader.map(n), LeaderEpoch(*epoch), nodes(isr), nodes(elr)),
                "{name}"
            );
            current
                .validate_update(&update)
                .unwrap_or_else(|error| panic!("{name}: {error}"));
            let next = current.with_update(update);
            assert_eq!(next.unclean_replicas, unclean(after), "{name}");
            assert!(
                !next.is_in_sync(n(*node)) && !next.is_eligible(n(*node)),
                "{name}: still eligible"
            );
            assert_eq!(
                next.unclean_shutdown_update(n(*node), reported(1, *offset)),
                None,
                "{name}: idempotent"
            );
        }
    }

    /// A leader that resigned because its storage failed lists itself
    /// (simulator seed 60336922). The last ISR or ELR member, back from
    /// an unclean restart, stays only if its log reaches the end of what
    /// was acknowledged before: below it, it may lack an acknowledged
    /// record the resigned leader holds, and leaves for unclean recovery.
    /// An entry an unclean restart wrote counts whatever its high
    /// watermark (a restarted replica's checkpointed one lags).
    #[test]
    fn a_resigned_leader_keeps_the_last_member_only_if_it_reaches_its_acknowledged_end() {
        let listed = |resigned: bool| UncleanReplica {
            node: n(1),
            acknowledged_end: resigned.then_some(Offset(349)),
            log_end: Some(LogEnd {
                high_watermark: Offset(349),
                ..end(1, 351)
            }),
        };
        // (name, ISR, ELR, node 1's entry, node 2's log end, stays)
        let cases = [
            (
                "below the acknowledged end: it leaves",
                &[2][..],
                &[][..],
                listed(true),
                348,
                false,
            ),
            (
                "at the acknowledged end: it stays",
                &[2],
                &[],
                listed(true),
                349,
                true,
            ),
            (
                "past the leader's end: it stays",
                &[2],
                &[],
                listed(true),
                360,
                true,
            ),
            (
                "the last ELR member, below: it leaves",
                &[],
                &[2],
                listed(true),
                348,
                false,
            ),
            (
                "the last ELR member, at: it stays",
                &[],
                &[2],
                listed(true),
                349,
                true,
            ),
            (
                "a restart's entry, at: it leaves",
                &[2],
                &[],
                listed(false),
                349,
                false,
            ),
        ];
        for (name, isr, elr, entry, offset, stays) in cases {
            let mut stored = with_elr(state(None, 2, isr), elr);
            stored.unclean_replicas = vec![entry.clone()];
            stored.check_invariants();
            let update = stored.unclean_shutdown_update(n(2), reported(1, offset));
            if stays {
                assert_eq!(update, None, "{name}");
                continue;
            }
            let update = update.unwrap_or_else(|| panic!("{name}: it stayed"));
            stored
                .validate_update(&update)
                .unwrap_or_else(|error| panic!("{name}: {error}"));
            let next = stored.with_update(update);
            assert!(next.in_unclean_recovery(), "{name}: {next:?}");
            assert_eq!(
                next.unclean_replicas,
                vec![
                    entry,
                    UncleanReplica {
                        node: n(2),
                        acknowledged_end: None,
                        log_end: reported(1, offset),
                    }
                ],
                "{name}"
            );
        }
    }

    /// The replica unclean recovery elects: only with the ISR and ELR
    /// empty; without line epochs (reports that predate them) the greatest
    /// (last epoch, log end offset), ties to the earliest in assignment
    /// order.
    #[test]
    fn recovery_leader_table() {
        // Unclean list entries: (node, last epoch, log end offset).
        type Entry = (u32, Option<u32>, u64);
        type Case = (
            &'static str,
            &'static [u32],
            &'static [u32],
            &'static [Entry],
            Option<u32>,
        );
        let cases: &[Case] = &[
            ("nobody unclean", &[], &[], &[], None),
            ("an ISR member is left", &[2], &[], &[(1, Some(1), 9)], None),
            ("an ELR member is left", &[], &[2], &[(1, Some(1), 9)], None),
            (
                "every reported log is empty: none is the longest",
                &[],
                &[],
                &[(1, None, 0), (2, Some(1), 0)],
                None,
            ),
            (
                "longest log",
                &[],
                &[],
                &[(1, Some(1), 4), (2, Some(1), 9), (3, Some(1), 7)],
                Some(2),
            ),
            (
                "newer last epoch beats a longer log",
                &[],
                &[],
                &[(1, Some(2), 4), (2, Some(1), 9)],
                Some(1),
            ),
            (
                "an empty log is lowest",
                &[],
                &[],
                &[(1, None, 0), (3, Some(0), 1)],
                Some(3),
            ),
            (
                "an end not known is no candidate",
                &[],
                &[],
                &[(1, None, UNKNOWN), (3, Some(0), 1)],
                Some(3),
            ),
            (
                "a tie goes to assignment order",
                &[],
                &[],
                &[(3, Some(1), 9), (2, Some(1), 9)],
                Some(2),
            ),
        ];
        for (name, isr, elr, list, expected) in cases {
            let mut current = with_elr(state(None, 2, isr), elr);
            current.unclean_replicas = list
                .iter()
                .map(|&(node, epoch, offset)| UncleanReplica {
                    node: n(node),
                    acknowledged_end: None,
                    log_end: (offset != UNKNOWN).then_some(LogEnd {
                        last_epoch: epoch.map(LeaderEpoch),
                        log_end_offset: Offset(offset),
                        ..Default::default()
                    }),
                })
                .collect();
            current.check_invariants();
            assert_eq!(
                current.recovery_leader().map(|r| r.node),
                expected.map(n),
                "{name}"
            );
        }
    }

    /// Node 1's unclean entry: its log empty at 1467 (its start), on line
    /// 14, with `start_line`.
    fn empty_at_1467(start_line: Option<u32>) -> UncleanReplica {
        UncleanReplica {
            node: n(1),
            acknowledged_end: None,
            log_end: Some(LogEnd {
                last_epoch: None,
                log_end_offset: Offset(1467),
                log_start_offset: Offset(1467),
                high_watermark: Offset(1467),
                line_epoch: Some(LeaderEpoch(14)),
                epochs: Vec::new(),
                start_line: start_line.map(LeaderEpoch),
            }),
        }
    }

    /// A log empty at its start (no batch) on a newer line, and a longer
    /// log on an older line whose high watermark is below that start: the
    /// longer one is taken only when the empty one's start came from a
    /// line it is on (simulator seed 60267254), never otherwise (the
    /// deposed tail of seed 60219295 may lie below that start).
    #[test]
    fn recovery_takes_a_longer_log_on_the_line_an_empty_log_started_from() {
        let empty = empty_at_1467;
        let longer = |line: u32| UncleanReplica {
            node: n(2),
            acknowledged_end: None,
            log_end: Some(LogEnd {
                last_epoch: Some(LeaderEpoch(10)),
                log_end_offset: Offset(1468),
                log_start_offset: Offset(391),
                high_watermark: Offset(1464),
                line_epoch: Some(LeaderEpoch(line)),
                epochs: vec![
                    (LeaderEpoch(8), Offset(496)),
                    (LeaderEpoch(10), Offset(1106)),
                ],
                start_line: None,
            }),
        };
        let cases = [
            ("started on the longer log's line", Some(12), 12, 2),
            (
                "the longer log's line is newer than the start's: it may have replaced what was below",
                Some(12),
                13,
                1,
            ),
            ("the start is of a newer line than the longer log's", Some(12), 11, 1),
            ("where the start came from is not known", None, 12, 1),
            ("the longer log holds a batch of the start's epoch past it", Some(10), 13, 2),
            ("the longer log's batches of the start's epoch end below it", Some(8), 13, 1),
        ];
        for (name, start_line, line, expected) in cases {
            let mut current = state(None, 15, &[]);
            current.unclean_replicas = vec![empty(start_line), longer(line)];
            current.check_invariants();
            assert_eq!(
                current.recovery_leader().map(|r| r.node),
                Some(n(expected)),
                "{name}"
            );
        }
    }

    /// A log empty at 1467 whose start line is the epoch of the record
    /// below its start (a snapshot's epoch, as its leader names it): a
    /// longer log holding a record of that epoch at 1466 holds the same
    /// records below 1467 and is taken, even when its records from 1467
    /// on are of a newer epoch; one whose records of that epoch end below
    /// 1466 is not.
    #[test]
    fn recovery_takes_a_longer_log_holding_the_start_lines_epoch_below_the_start() {
        let empty = empty_at_1467(Some(10));
        let longer = |newer_from: u64| UncleanReplica {
            node: n(2),
            acknowledged_end: None,
            log_end: Some(LogEnd {
                last_epoch: Some(LeaderEpoch(12)),
                log_end_offset: Offset(1468),
                log_start_offset: Offset(391),
                high_watermark: Offset(1464),
                line_epoch: Some(LeaderEpoch(12)),
                epochs: vec![
                    (LeaderEpoch(8), Offset(496)),
                    (LeaderEpoch(10), Offset(1106)),
                    (LeaderEpoch(12), Offset(newer_from)),
                ],
                start_line: None,
            }),
        };
        for (newer_from, expected) in [(1467, 2), (1466, 1)] {
            let mut current = state(None, 15, &[]);
            current.unclean_replicas = vec![empty.clone(), longer(newer_from)];
            current.check_invariants();
            assert_eq!(
                current.recovery_leader().map(|r| r.node),
                Some(n(expected)),
                "epoch 12 from {newer_from}"
            );
        }
    }

    /// Unclean recovery takes the newest line, and a longer log on an
    /// older line only if it holds the newer one's last batch (SPEC 3.5,
    /// `LogState::longest_line`). The first two cases are the shapes of
    /// simulator seeds 60208586 (a deposed leader's uncommitted tail in
    /// a newer last epoch) and 20005277 (a log on the newest line, short).
    #[test]
    fn recovery_takes_the_newest_line_and_longer_logs_that_hold_it() {
        // (node, last batch epoch (0: none), log start, high watermark,
        // log end, line epoch, epochs).
        type Entry = (u32, u32, u64, u64, u64, u32, &'static [(u32, u64)]);
        let cases: &[(&str, &[Entry], u32)] = &[
            (
                "a deposed leader's tail of a newer epoch loses to the newer line",
                &[
                    (1, 2, 0, 0, 1744, 6, &[(0, 0), (2, 1000)]),
                    (2, 4, 0, 0, 2334, 4, &[(0, 0), (2, 1000), (4, 1690)]),
                ],
                1,
            ),
            (
                "a longer log on an older line that holds the newer one's last batch",
                &[
                    (1, 3, 0, 0, 619, 5, &[(3, 100)]),
                    (2, 4, 0, 0, 873, 4, &[(3, 100), (4, 700)]),
                ],
                2,
            ),
            (
                "a longer log on an older line that parts from it below its end",
                &[
                    (1, 3, 0, 0, 619, 5, &[(3, 100)]),
                    (2, 4, 0, 0, 873, 4, &[(3, 100), (4, 610)]),
                ],
                1,
            ),
            (
                "a longer log ending in the same epoch holds the shorter",
                &[
                    (1, 3, 0, 0, 619, 5, &[(3, 100)]),
                    (2, 3, 0, 0, 873, 3, &[(3, 100)]),
                ],
                2,
            ),
            (
                "a longer log whose last epoch is older holds nothing newer",
                &[
                    (1, 3, 0, 0, 619, 5, &[(3, 100)]),
                    (2, 2, 0, 0, 873, 2, &[(2, 100)]),
                ],
                1,
            ),
            (
                "the epoch it needs is not among those reported: the newer line stays",
                &[
                    (1, 3, 0, 0, 619, 5, &[(3, 100)]),
                    (2, 4, 0, 0, 873, 4, &[(4, 700)]),
                ],
                1,
            ),
            (
                "a log on the newest line empty at its end is held by a longer one starting there",
                &[
                    (1, 0, 300, 300, 300, 6, &[]),
                    (2, 5, 300, 300, 500, 5, &[(5, 300)]),
                ],
                2,
            ),
            (
                "but not by one on an older line that starts below its end",
                &[
                    (1, 0, 1610, 1610, 1610, 9, &[]),
                    (2, 5, 0, 1538, 1829, 5, &[(5, 1538)]),
                ],
                1,
            ),
            (
                "the newest line's last batch lies below a longer log's start",
                &[
                    (1, 3, 0, 0, 619, 5, &[(3, 100)]),
                    (3, 4, 700, 700, 873, 4, &[(4, 700)]),
                ],
                3,
            ),
            (
                "an ELR member's committed records above a newer line's logs that lost them",
                &[
                    (1, 1, 0, 0, 15, 3, &[(1, 0)]),
                    (2, 0, 20, 20, 20, 2, &[]),
                    (3, 1, 0, 30, 30, 1, &[(1, 0)]),
                ],
                3,
            ),
            (
                "committed records above a newer line's empty log, a deposed tail longer",
                &[
                    (1, 0, 10, 10, 10, 3, &[]),
                    (2, 2, 0, 13, 13, 2, &[(1, 0), (2, 10)]),
                    (3, 1, 10, 10, 15, 1, &[(1, 10)]),
                ],
                2,
            ),
            (
                "a high watermark from before an unclean election: the newer history stays",
                &[
                    (2, 2, 0, 70, 85, 2, &[(1, 0), (2, 70)]),
                    (3, 1, 0, 100, 100, 1, &[(1, 0)]),
                ],
                2,
            ),
            (
                "a chain: a parted log on a middle line is passed over",
                &[
                    (1, 3, 0, 0, 619, 10, &[(3, 100)]),
                    (2, 9, 0, 0, 900, 9, &[(3, 100), (9, 500)]),
                    (3, 4, 0, 0, 873, 4, &[(3, 100), (4, 700)]),
                ],
                3,
            ),
        ];
        for (name, list, expected) in cases {
            let mut current = state(None, 10, &[]);
            current.unclean_replicas = list
                .iter()
                .map(
                    |&(node, last, start, high_watermark, end, line, epochs)| UncleanReplica {
                        node: n(node),
                        acknowledged_end: None,
                        log_end: Some(LogEnd {
                            last_epoch: (last > 0).then_some(LeaderEpoch(last)),
                            log_end_offset: Offset(end),
                            log_start_offset: Offset(start),
                            high_watermark: Offset(high_watermark),
                            line_epoch: Some(LeaderEpoch(line)),
                            epochs: epochs
                                .iter()
                                .map(|&(epoch, start)| (LeaderEpoch(epoch), Offset(start)))
                                .collect(),
                            start_line: None,
                        }),
                    },
                )
                .collect();
            current.check_invariants();
            assert_eq!(
                current.recovery_leader().map(|r| r.node),
                Some(n(*expected)),
                "{name}"
            );
        }
    }

    /// Any update stores the unclean list without the members of its ISR:
    /// a replica back in sync holds every committed record again.
    #[test]
    fn rejoining_the_isr_leaves_the_unclean_list() {
        let mut current = state(Some(1), 2, &[1]);
        current.unclean_replicas = unclean(&[(2, 5), (3, 6)]);
        current.check_invariants();
        let update = LogUpdate::in_sync_replicas(&current, nodes(&[1, 3]), 2);
        current.validate_update(&update).unwrap();
        let next = current.with_update(update);
        assert_eq!(next.unclean_replicas, unclean(&[(2, 5)]));
    }

    #[test]
    fn validate_update_checks_the_unclean_report() {
        let current = state(Some(1), 2, &[1, 2]);
        let report = |node: u32| LogUpdate {
            leader: Some(n(1)),
            leader_epoch: LeaderEpoch(2),
            in_sync_replicas: nodes(&[1]),
            eligible_leader_replicas: Vec::new(),
            unclean_report: Some(UncleanReplica {
                node: n(node),
                acknowledged_end: None,
                log_end: Some(end(1, 3)),
            }),
            assignment: None,
        };
        current.validate_update(&report(2)).unwrap();
        let error = current.validate_update(&report(3)).unwrap_err().to_string();
        assert!(error.contains("unclean_report names node-3"), "{error}");
        let error = current.validate_update(&report(1)).unwrap_err().to_string();
        assert!(error.contains("keeps in in_sync_replicas"), "{error}");
        // An acknowledged end: only the leader's resignation into a
        // leaderless later epoch, at most at its log end.
        let resignation =
            |node: u32, leader: Option<u32>, epoch: u32, acknowledged: u64| LogUpdate {
                leader: leader.map(n),
                leader_epoch: LeaderEpoch(epoch),
                in_sync_replicas: nodes(&[2]),
                eligible_leader_replicas: Vec::new(),
                unclean_report: Some(UncleanReplica {
                    node: n(node),
                    acknowledged_end: Some(Offset(acknowledged)),
                    log_end: Some(end(2, 3)),
                }),
                assignment: None,
            };
        let current = state(Some(1), 2, &[1, 2, 3]);
        current
            .validate_update(&resignation(1, None, 3, 3))
            .unwrap();
        for (name, update) in [
            ("not the leader", resignation(3, None, 3, 3)),
            ("a leader stays", resignation(1, Some(2), 3, 3)),
            ("past the log end", resignation(1, None, 3, 4)),
        ] {
            let error = current.validate_update(&update).unwrap_err().to_string();
            assert!(error.contains("acknowledged_end"), "{name}: {error}");
        }
    }

    #[test]
    fn validate_update_checks_the_elr() {
        let current = with_elr(state(Some(1), 2, &[1, 2]), &[]);
        let with = |isr: &[u32], elr: &[u32]| LogUpdate {
            leader: Some(n(1)),
            leader_epoch: LeaderEpoch(2),
            in_sync_replicas: nodes(isr),
            eligible_leader_replicas: nodes(elr),
            unclean_report: None,
            assignment: None,
        };
        let cases: &[(&str, LogUpdate, std::result::Result<(), &str>)] = &[
            ("a removed ISR member joins", with(&[1], &[2]), Ok(())),
            (
                "not a replica",
                with(&[1], &[9]),
                Err("contains node-9, which is not one of the replicas"),
            ),
            ("twice", with(&[1], &[2, 2]), Err("names node-2 twice")),
            (
                "in both sets",
                with(&[1, 2], &[2]),
                Err("node-2 is in both"),
            ),
            (
                "from outside the ISR and ELR",
                with(&[1], &[3]),
                Err("adds node-3, which is in neither"),
            ),
        ];
        for (name, update, expected) in cases {
            match (expected, current.validate_update(update)) {
                (Ok(()), Ok(())) => {}
                (Err(fragment), Err(Error::Coordinator { reason })) => {
                    assert!(
                        reason.contains(fragment),
                        "{name}: {reason:?} lacks {fragment:?}"
                    )
                }
                (expected, got) => panic!("{name}: expected {expected:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn from_no_leader_a_new_leader_needs_a_new_epoch() {
        let current = state(None, 5, &[2]);
        let new_epoch = current.validate_update(&update(Some(2), 6, &[2]));
        assert!(new_epoch.is_ok(), "{new_epoch:?}");
        match current.validate_update(&update(Some(2), 5, &[2])) {
            Err(Error::Coordinator { reason }) => {
                assert!(reason.contains("but leader_epoch stays 5"), "{reason}")
            }
            other => panic!("a new leader in the same epoch was accepted: {other:?}"),
        }
    }

    #[test]
    fn initial_state_and_with_update() {
        let initial = LogState::initial(LogId(1), vec![n(3), n(1)]).unwrap();
        assert_eq!(initial.leader, Some(n(3)));
        assert_eq!(initial.leader_epoch, LeaderEpoch::ZERO);
        assert_eq!(initial.in_sync_replicas, vec![n(3), n(1)]);
        assert_eq!(initial.version, 0);
        let next = initial.with_update(update(Some(1), 1, &[1]));
        assert_eq!(next.version, 1);
        assert_eq!(next.leader, Some(n(1)));
        assert_eq!(next.replicas, vec![n(3), n(1)]);

        let err = LogState::initial(LogId(1), vec![]).unwrap_err();
        assert!(err.to_string().contains("replicas is empty"), "{err}");
        let err = LogState::initial(LogId(1), vec![n(1), n(2), n(1)]).unwrap_err();
        assert!(err.to_string().contains("names node-1 twice"), "{err}");
    }
}
