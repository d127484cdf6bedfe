//! The leader's state machine for one log: fencing and acknowledgement of
//! follower fetches (SPEC §3.2), the high watermark (§3.3), ISR shrink and
//! expand proposals (§3.4), and the divergence check of a fetch (§3.2 step 2,
//! §3.6).
//!
//! It owns the leader's *view* of the log (its offsets) and of every follower
//! (their progress), and the accepted ISR with at most one pending change.
//! It does not append, read, talk to the coordinator or look at a clock: the
//! caller does those and reports the results here, passing `now` in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::high_watermark::{next_high_watermark, HighWatermarkInputs, HighWatermarkUpdate};
use super::isr::{
    maximal_isr, FetchArrival, FetchCounted, FollowerProgress, IsrChangeKind, IsrProposal,
    PendingIsrChange,
};
use super::{EpochEndOffset, LogOffsets};
use crate::error::{Error, Result};
use crate::types::{Incarnation, LeaderEpoch, NodeId, Offset};

/// Per-log settings the leader's decisions depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaderConfig {
    /// `acks=all` needs at least this many ISR members, and the high
    /// watermark does not advance while the ISR is smaller than
    /// `min(min_insync_replicas, replication_factor)`.
    pub(crate) min_insync_replicas: usize,
    /// A follower not caught up for longer than this leaves the ISR.
    pub(crate) replica_lag_time_max: Duration,
}

/// What the coordinator says about a log when this node becomes its leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeaderAssignment {
    /// This node, the new leader.
    pub(crate) local: NodeId,
    /// Every replica of the log, in assignment order.
    pub(crate) replicas: Vec<NodeId>,
    /// The accepted ISR.
    pub(crate) in_sync_replicas: Vec<NodeId>,
    /// The coordinator's version of that ISR (compare-and-set key).
    pub(crate) isr_version: u64,
    /// The epoch this node leads in.
    pub(crate) leader_epoch: LeaderEpoch,
}

/// Why a follower's fetch is neither served nor counted as an
/// acknowledgement. The caller answers with the matching error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FetchRejection {
    /// The follower's view of the leader epoch is older than the leader's:
    /// it must learn the new epoch (from the coordinator) first.
    FencedLeaderEpoch {
        /// The epoch in the request.
        request: LeaderEpoch,
        /// The leader's epoch.
        current: LeaderEpoch,
    },
    /// The follower knows a newer epoch than this leader: this leader is
    /// probably deposed and must re-read coordinator state.
    UnknownLeaderEpoch {
        /// The epoch in the request.
        request: LeaderEpoch,
        /// The leader's epoch.
        current: LeaderEpoch,
    },
    /// The sender is not a follower of this log (not a replica, or the
    /// leader itself).
    UnknownFollower {
        /// The sender.
        node: NodeId,
    },
    /// The fetch comes from an incarnation of the follower older than one
    /// whose fetches were already counted (SPEC 3.2).
    StaleIncarnation {
        /// The sender.
        node: NodeId,
        /// The incarnation in the request.
        incarnation: Incarnation,
    },
    /// The fetch offset is below the leader's log start or above its log
    /// end (Kafka: `OFFSET_OUT_OF_RANGE`). Below the start, the follower
    /// resets its log to the leader's log start (SPEC §3.6).
    OffsetOutOfRange {
        /// The offset asked for.
        fetch_offset: Offset,
        /// The leader's log start offset.
        log_start_offset: Offset,
        /// The leader's log end offset.
        log_end_offset: Offset,
    },
}

/// What the leader made of a follower's fetch.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FetchDecision {
    /// The fetch acknowledged everything below its offset: serve records
    /// from it, apply the high-watermark update, and send the ISR proposal
    /// to the coordinator if there is one.
    Accepted {
        /// What the fetch did to the high watermark.
        high_watermark: HighWatermarkUpdate,
        /// An ISR expansion to propose (the follower caught up).
        isr_proposal: Option<IsrProposal>,
    },
    /// The fetch changed nothing; answer with the error.
    Rejected(FetchRejection),
}

/// The outcome of the divergence check of a fetch (SPEC §3.2 step 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Divergence {
    /// The follower's log agrees with the leader's up to its fetch offset:
    /// the fetch goes on to `LeaderState::on_fetch`.
    Consistent,
    /// Answer `diverging { epoch, end_offset }` with no records; the fetch
    /// acknowledges nothing.
    Diverging(EpochEndOffset),
    /// The leader cannot say where the follower's last epoch ends (it is
    /// newer than every epoch the leader knows, or the leader's cache is
    /// empty). Kafka answers `OFFSET_OUT_OF_RANGE` here
    /// (`Partition.readRecords`); the fetch acknowledges nothing.
    UndefinedEpoch,
}

/// How far behind a follower is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FollowerLag {
    /// Records between its log end offset and the leader's; `None` before
    /// its first fetch in this epoch.
    pub(crate) records: Option<u64>,
    /// Time since it last held everything the leader had.
    pub(crate) since_caught_up: Duration,
}

/// The coordinator refused the pending ISR change: this leader may be stale
/// (deposed, or behind on the ISR version). The caller must re-read the log's
/// coordinator state and step down if deposed, or else feed the current ISR
/// back through `LeaderState::on_isr_accepted`.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RereadCoordinatorState;

/// How long a leader waits before proposing an ISR expansion again after
/// the node withdrew one (the replica's node was not alive).
pub(crate) const EXPAND_PAUSE_AFTER_WITHDRAWAL: Duration = Duration::from_secs(1);

/// Progress of an `acks=all` append (SPEC §3.1) as of now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AcksAllProgress {
    /// The high watermark is past the batch: report success.
    Committed,
    /// Not committed yet; keep waiting (until the request deadline).
    Waiting,
    /// Not committed and the accepted ISR is below `min_insync_replicas`:
    /// fail with `NotEnoughReplicasAfterAppend` (the batch stays in the log).
    NotEnoughReplicasAfterAppend {
        /// Size of the accepted ISR.
        in_sync: usize,
        /// The configured minimum.
        min_insync_replicas: usize,
    },
}

/// The divergence check of a follower's fetch, SPEC §3.2 step 2, exactly as
/// Kafka's `Partition.readRecords` does it.
///
/// `leader_lookup` is the leader's `end_offset_for_epoch(last_fetched_epoch)`
/// (`None`: undefined). A follower with an empty log sends no
/// `last_fetched_epoch` and never diverges. Otherwise the logs diverge when
/// the leader's answer names another epoch (its own log has a different
/// epoch at the follower's last offsets) or ends that epoch before the
/// follower's fetch offset (the follower holds records of that epoch the
/// leader never had).
///
/// The caller runs this after `LeaderState::validate_fetch` (fencing comes
/// first) and before `LeaderState::on_fetch` (a diverging fetch must not be
/// taken as an acknowledgement).
pub(crate) fn check_divergence(
    fetch_offset: Offset,
    last_fetched_epoch: Option<LeaderEpoch>,
    leader_lookup: Option<EpochEndOffset>,
) -> Divergence {
    let Some(last_fetched_epoch) = last_fetched_epoch else {
        return Divergence::Consistent;
    };
    match leader_lookup {
        None => Divergence::UndefinedEpoch,
        Some(end) if end.epoch != last_fetched_epoch || end.end_offset < fetch_offset => {
            Divergence::Diverging(end)
        }
        Some(_) => Divergence::Consistent,
    }
}

/// The leader's state for one log, for one leader epoch. A new epoch (or a
/// step-down) means a new `LeaderState` (or none).
#[derive(Clone, Debug)]
pub(crate) struct LeaderState {
    /// This node.
    local: NodeId,
    /// Every replica, in assignment order.
    replicas: Vec<NodeId>,
    /// The epoch this node leads in.
    leader_epoch: LeaderEpoch,
    /// The leader's log end offset when it became leader: the start offset
    /// of its epoch in its epoch cache (SPEC §3.5).
    epoch_start_offset: Offset,
    /// The ISR the coordinator accepted.
    /// Invariant: contains `local`, is a subset of `replicas`, no duplicates.
    in_sync_replicas: Vec<NodeId>,
    /// The coordinator's version of `in_sync_replicas`.
    isr_version: u64,
    /// The one ISR change in flight, if any (SPEC §3.4).
    /// Invariant: its `proposed` ISR contains `local` and is a subset of
    /// `replicas`.
    pending_isr_change: Option<PendingIsrChange>,
    /// The pending change was sent but the coordinator's answer was lost
    /// (SPEC §3.4: a write whose outcome is unknown): it stays pending, and
    /// keeps counting for the high watermark, until a read of the stored
    /// state settles it. Invariant: only with `pending_isr_change`.
    pending_outcome_unknown: bool,
    /// After the node withdrew an expansion (the replica's node was not
    /// alive), no expansion is proposed before this time: a replica that
    /// keeps fetching without a live session would otherwise cost a
    /// liveness query on every fetch.
    expand_paused_until: Option<Instant>,
    /// One entry per replica other than `local`.
    followers: BTreeMap<NodeId, FollowerProgress>,
    /// Invariant: log_start_offset <= high_watermark <= log_end_offset.
    high_watermark: Offset,
    /// The leader's log end offset; only grows (a leader never truncates).
    log_end_offset: Offset,
    /// The leader's log start offset; only grows (retention).
    log_start_offset: Offset,
    config: LeaderConfig,
}

impl LeaderState {
    /// The state of a node that just became leader of a log in
    /// `assignment.leader_epoch`, whose log is bounded by `log`.
    ///
    /// Followers start with an unknown log end offset and a catch-up time of
    /// `now` (Kafka's `Replica.resetReplicaState` for a new leader). The
    /// high watermark is evaluated once here, as Kafka's `makeLeader` does:
    /// a leader alone in its ISR can commit its tail at once.
    ///
    /// Errs with `Error::Coordinator` if the assignment is inconsistent (the
    /// ISR does not contain this node, names a non-replica, or names a node
    /// twice): such a state must come from a broken coordinator, and leading
    /// on it could commit data that is not replicated.
    pub(crate) fn become_leader(
        assignment: LeaderAssignment,
        log: LogOffsets,
        now: Instant,
        config: LeaderConfig,
    ) -> Result<LeaderState> {
        let LeaderAssignment {
            local,
            replicas,
            in_sync_replicas,
            isr_version,
            leader_epoch,
        } = assignment;
        if let Some(node) = first_duplicate(&replicas) {
            return Err(coordinator_error(format!(
                "replicas {replicas:?} name {node} twice"
            )));
        }
        validate_isr(local, &replicas, &in_sync_replicas)?;
        let log = log.with_high_watermark_clamped();
        let followers = replicas
            .iter()
            .filter(|node| **node != local)
            .map(|node| (*node, FollowerProgress::new(now)))
            .collect();
        let mut state = LeaderState {
            local,
            replicas,
            leader_epoch,
            epoch_start_offset: log.log_end_offset,
            in_sync_replicas,
            isr_version,
            pending_isr_change: None,
            pending_outcome_unknown: false,
            expand_paused_until: None,
            followers,
            high_watermark: log.high_watermark,
            log_end_offset: log.log_end_offset,
            log_start_offset: log.log_start_offset,
            config,
        };
        // Nobody waits on a leader that does not exist yet; the caller
        // reads the result through `high_watermark()`.
        let _ = state.advance_high_watermark();
        state.debug_check_invariants();
        Ok(state)
    }

    /// The leader appended locally; its log now ends at
    /// `new_log_end_offset`. Re-evaluates the high watermark (SPEC §3.3).
    pub(crate) fn on_local_append(&mut self, new_log_end_offset: Offset) -> HighWatermarkUpdate {
        if new_log_end_offset < self.log_end_offset {
            // A leader never truncates its own log (SPEC §3.5); a smaller
            // end is a caller bug, and taking it could drop the high
            // watermark below committed data.
            debug_assert!(
                false,
                "leader log end offset moved back from {} to {new_log_end_offset}",
                self.log_end_offset
            );
            tracing::error!(
                current = %self.log_end_offset,
                reported = %new_log_end_offset,
                "leader log end offset moved back; ignored"
            );
            return HighWatermarkUpdate::Unchanged;
        }
        self.log_end_offset = new_log_end_offset;
        let update = self.advance_high_watermark();
        self.debug_check_invariants();
        update
    }

    /// Step 1 of SPEC §3.2 plus the request's shape, without changing
    /// anything: fencing (`FencedLeaderEpoch` for an older epoch,
    /// `UnknownLeaderEpoch` for a newer one), the sender must be a follower
    /// of this log, and a fetch offset below the log start is out of range
    /// whatever the divergence check would say (as in Kafka's
    /// `Partition.readRecords`).
    pub(crate) fn validate_fetch(
        &self,
        follower: NodeId,
        fetch_offset: Offset,
        request_epoch: LeaderEpoch,
    ) -> Result<(), FetchRejection> {
        if request_epoch < self.leader_epoch {
            return Err(FetchRejection::FencedLeaderEpoch {
                request: request_epoch,
                current: self.leader_epoch,
            });
        }
        if request_epoch > self.leader_epoch {
            return Err(FetchRejection::UnknownLeaderEpoch {
                request: request_epoch,
                current: self.leader_epoch,
            });
        }
        if !self.followers.contains_key(&follower) {
            return Err(FetchRejection::UnknownFollower { node: follower });
        }
        if fetch_offset < self.log_start_offset {
            return Err(self.out_of_range(fetch_offset));
        }
        Ok(())
    }

    /// A fetch from `follower` at `fetch_offset` that passed the divergence
    /// check (`check_divergence` answered `Consistent`), as of `arrival`.
    ///
    /// Re-checks `validate_fetch` (the state machine does not trust the
    /// caller's order) and rejects a fetch offset above the leader's log
    /// end. Otherwise, SPEC §3.2 step 3: records `fetch_offset` as the
    /// follower's log end offset, updates its catch-up time (§3.4), then the
    /// high watermark (§3.3), then proposes adding the follower to the ISR if
    /// it qualifies and no change is in flight (§3.4).
    ///
    /// A fetch vouches for its follower only as of its arrival (§3.4). The
    /// caller evaluates a fetch it holds in a long poll again each time data
    /// arrives, as `FetchArrival::Held`: that may raise what it acknowledges
    /// (under `FlushPolicy::Always`, the leader's flushed end caps it) and so
    /// the high watermark, but it never moves the catch-up time past the
    /// arrival and never proposes an ISR expansion, as Kafka's delayed fetch
    /// only reads. Without this a follower cut off just after sending its
    /// fetch, and removed from the ISR, was re-admitted by the next append,
    /// and held every `acks=all` append until `replica_lag_time_max`
    /// removed it again. A follower left outside is considered again at its
    /// next fetch. A fetch that arrived before the last one counted is
    /// ignored (the newer one spoke for a later state of the follower).
    ///
    /// The fetch comes from the follower's `incarnation`, which the caller
    /// checked is its current registration with the coordinator (SPEC 3.2,
    /// Kafka's broker epoch, KIP-903). A fetch from an incarnation older
    /// than one already counted is rejected (`StaleIncarnation`); one below
    /// the follower's recorded log end in the same incarnation, while no
    /// truncation was asked for, is served but counts for nothing
    /// (`FollowerProgress::record_fetch`).
    ///
    /// Kafka (`Partition.updateFollowerFetchState`) tries the expansion
    /// before the high watermark; the order makes no difference, since a
    /// follower may join only with a log end offset at or above the high
    /// watermark, so counting it cannot change the minimum the rule takes.
    #[cfg(test)]
    pub(crate) fn on_fetch(
        &mut self,
        follower: NodeId,
        fetch_offset: Offset,
        request_epoch: LeaderEpoch,
        arrival: FetchArrival,
        incarnation: Incarnation,
    ) -> FetchDecision {
        self.on_fetch_of_line(
            follower,
            fetch_offset,
            request_epoch,
            arrival,
            incarnation,
            true,
        )
    }

    /// [`on_fetch`](Self::on_fetch) of a fetch that says whether the
    /// follower's log is durably on this epoch's line (`on_line`: its
    /// stored line epoch, [`Log::line_epoch`](crate::Log::line_epoch), is
    /// this epoch). Until a fetch says so, it counts as a fetch at no more
    /// than the high watermark: it commits nothing, and the follower is not
    /// caught up with records above the high watermark (so a follower that
    /// cannot store its line, and so holds the high watermark, leaves the
    /// ISR after `replica_lag_time_max`, and one outside cannot join).
    ///
    /// Why (SPEC 3.5, G2; simulator seed 70100050): a follower stores its
    /// line on the first answer of an epoch it can apply. A fetch sent
    /// before that answer arrived says nothing durable: if the follower
    /// crashes before the answer, it comes back on its older line, while
    /// records it held from before the epoch were committed by that fetch.
    /// If the leader then loses its copy, unclean recovery weighs those
    /// records as the older line's, and a replica that parted on a line in
    /// between (a deposed leader's uncommitted tail) wins over them. Kafka
    /// reaches the same end another way: a KRaft leader commits nothing
    /// before a record of its own epoch (its leader-change record), which
    /// a follower holds only on the new leader's line. Here the cost is one
    /// fetch round trip after each election (and each follower's restart)
    /// before older epochs' records commit: a fetch not on the line is
    /// answered at once, never parked (`FetchLook::off_line`); appends of
    /// the epoch itself wait for the follower's next fetch anyway, which
    /// says so.
    pub(crate) fn on_fetch_of_line(
        &mut self,
        follower: NodeId,
        fetch_offset: Offset,
        request_epoch: LeaderEpoch,
        arrival: FetchArrival,
        incarnation: Incarnation,
        on_line: bool,
    ) -> FetchDecision {
        if let Err(rejection) = self.validate_fetch(follower, fetch_offset, request_epoch) {
            return FetchDecision::Rejected(rejection);
        }
        if fetch_offset > self.log_end_offset {
            // Counting it would mark the follower caught up with records
            // the leader does not have.
            return FetchDecision::Rejected(self.out_of_range(fetch_offset));
        }
        let fetch_offset = if on_line {
            fetch_offset
        } else {
            fetch_offset.min(self.high_watermark)
        };
        let leader_log_end_offset = self.log_end_offset;
        let Some(progress) = self.followers.get_mut(&follower) else {
            return FetchDecision::Rejected(FetchRejection::UnknownFollower { node: follower });
        };
        let counted =
            progress.record_fetch(fetch_offset, leader_log_end_offset, arrival, incarnation);

        let (high_watermark, isr_proposal) = match counted {
            FetchCounted::OlderIncarnation => {
                return FetchDecision::Rejected(FetchRejection::StaleIncarnation {
                    node: follower,
                    incarnation,
                });
            }
            // Not on the line, it may hold records of this epoch's
            // commits only on an older line: no ISR for it yet (review of
            // 611925e: clipped to a high watermark at the epoch's start,
            // it would have qualified).
            FetchCounted::New if !on_line => (self.advance_high_watermark(), None),
            FetchCounted::New => (
                self.advance_high_watermark(),
                self.maybe_propose_expand(follower, arrival.arrived_at()),
            ),
            FetchCounted::Held | FetchCounted::Stale | FetchCounted::Backwards => {
                (self.advance_high_watermark(), None)
            }
        };
        self.debug_check_invariants();
        FetchDecision::Accepted {
            high_watermark,
            isr_proposal,
        }
    }

    /// The caller answered a fetch of `follower`'s `incarnation` with
    /// `diverging` (SPEC 3.2 step 2): the follower truncates, so its next
    /// fetch may be below the log end recorded for it (SPEC 3.6).
    pub(crate) fn on_diverging_answer(&mut self, follower: NodeId, incarnation: Incarnation) {
        if let Some(progress) = self.followers.get_mut(&follower) {
            progress.truncation_asked(incarnation);
        }
    }

    /// Time passed; proposes removing every ISR follower that has not been
    /// caught up for strictly longer than `replica_lag_time_max` (SPEC §3.4),
    /// unless an ISR change is already in flight.
    ///
    /// As in Kafka 3.x, the shrink is proposed even when it takes the ISR
    /// below `min_insync_replicas`: the ISR must tell the truth, and the
    /// high watermark then freezes (§3.3) so nothing more commits.
    pub(crate) fn tick(&mut self, now: Instant) -> Option<IsrProposal> {
        if self.pending_isr_change.is_some() {
            return None;
        }
        let lagging: Vec<NodeId> = self
            .in_sync_replicas
            .iter()
            .filter(|node| {
                self.followers.get(node).is_some_and(|progress| {
                    progress.is_out_of_sync(now, self.config.replica_lag_time_max)
                })
            })
            .copied()
            .collect();
        if lagging.is_empty() {
            return None;
        }
        for node in &lagging {
            tracing::info!(
                follower = %node,
                epoch = %self.leader_epoch,
                "follower out of sync; proposing ISR shrink"
            );
        }
        let proposed = self
            .in_sync_replicas
            .iter()
            .filter(|node| !lagging.contains(node))
            .copied()
            .collect();
        let proposal = self.propose(PendingIsrChange {
            proposed,
            kind: IsrChangeKind::Shrink(lagging),
        });
        self.debug_check_invariants();
        Some(proposal)
    }

    /// The coordinator accepted an ISR at `new_version`: the pending change,
    /// or the current ISR re-read after a rejection. It takes effect now
    /// (SPEC §3.4), clears the pending change, and the high watermark is
    /// re-evaluated (§3.3).
    ///
    /// Errs with `Error::Coordinator`, leaving the accepted ISR as it was,
    /// if the ISR is inconsistent or the version is older than the one
    /// already held (a late or reordered answer).
    pub(crate) fn on_isr_accepted(
        &mut self,
        new_isr: Vec<NodeId>,
        new_version: u64,
    ) -> Result<HighWatermarkUpdate> {
        self.pending_isr_change = None;
        self.pending_outcome_unknown = false;
        if new_version < self.isr_version {
            return Err(coordinator_error(format!(
                "ISR version {new_version} is older than the leader's {}",
                self.isr_version
            )));
        }
        validate_isr(self.local, &self.replicas, &new_isr)?;
        self.in_sync_replicas = new_isr;
        self.isr_version = new_version;
        let update = self.advance_high_watermark();
        self.debug_check_invariants();
        Ok(update)
    }

    /// The coordinator rejected the pending change. The ISR stays as last
    /// accepted and the change is dropped. The high watermark is not
    /// re-evaluated: this leader may be stale and should not make progress
    /// before it re-reads the coordinator state (the next append or fetch
    /// re-evaluates it anyway).
    pub(crate) fn on_isr_rejected(&mut self) -> RereadCoordinatorState {
        self.pending_outcome_unknown = false;
        if let Some(change) = self.pending_isr_change.take() {
            tracing::warn!(
                epoch = %self.leader_epoch,
                version = self.isr_version,
                ?change,
                "ISR change rejected by the coordinator; leader may be stale"
            );
        }
        self.debug_check_invariants();
        RereadCoordinatorState
    }

    /// The pending change was sent but its answer was lost (the
    /// coordinator failed with `Error::CoordinatorOutcomeUnknown`): it may
    /// or may not be stored. It stays pending — neither taking effect nor
    /// dropped, and still counting in the maximal ISR for the high
    /// watermark (a pending expansion's replica, a pending shrink's removed
    /// replicas) — until the caller reads the stored state and reports it
    /// with `on_isr_accepted` (the version moved on: adopt what is stored)
    /// or `on_isr_not_applied` (it did not). SPEC §3.4; Kafka's
    /// `PendingExpandIsr`/`PendingShrinkIsr` stay until the controller's
    /// answer or a new LeaderAndIsr settles them.
    pub(crate) fn on_isr_outcome_unknown(&mut self) {
        if let Some(change) = &self.pending_isr_change {
            tracing::warn!(
                epoch = %self.leader_epoch,
                version = self.isr_version,
                ?change,
                "ISR change outcome unknown; keeping it pending until a read settles it"
            );
            self.pending_outcome_unknown = true;
        }
        self.debug_check_invariants();
    }

    /// The pending change whose outcome is unknown, as the
    /// `(leader_epoch, expected_version)` it was sent with: the caller
    /// reads the stored state and settles it. `None` when nothing waits.
    pub(crate) fn unsettled_isr_change(&self) -> Option<(LeaderEpoch, u64)> {
        (self.pending_outcome_unknown && self.pending_isr_change.is_some())
            .then_some((self.leader_epoch, self.isr_version))
    }

    /// A read of the stored state shows the pending change, whose outcome
    /// was unknown, was not applied (same epoch, same version): it is
    /// dropped and may be proposed again by a later fetch or tick. The
    /// high watermark is re-evaluated, since a dropped expansion no longer
    /// holds it back.
    pub(crate) fn on_isr_not_applied(&mut self) -> HighWatermarkUpdate {
        self.pending_outcome_unknown = false;
        if let Some(change) = self.pending_isr_change.take() {
            tracing::info!(epoch = %self.leader_epoch, version = self.isr_version, ?change,
                "ISR change whose outcome was unknown was not applied");
        }
        let update = self.advance_high_watermark();
        self.debug_check_invariants();
        update
    }

    /// The node withdrew the pending ISR change without sending it (it
    /// would add a replica whose node is not alive, KIP-841): a fetch
    /// after `EXPAND_PAUSE_AFTER_WITHDRAWAL` may propose again.
    pub(crate) fn on_isr_withdrawn(&mut self, now: Instant) {
        if self.pending_outcome_unknown {
            // Sent already: only a read of the stored state may drop it.
            return;
        }
        if let Some(change) = self.pending_isr_change.take() {
            tracing::debug!(epoch = %self.leader_epoch, ?change, "ISR change withdrawn");
            self.expand_paused_until = Some(now + EXPAND_PAUSE_AFTER_WITHDRAWAL);
        }
        self.debug_check_invariants();
    }

    /// Retention raised the leader's log start offset. Ignored if it does
    /// not move forward, or if it passes the high watermark, which retention
    /// never does (SPEC §2.6).
    pub(crate) fn on_log_start_offset(&mut self, log_start_offset: Offset) {
        if log_start_offset <= self.log_start_offset {
            return;
        }
        if log_start_offset > self.high_watermark {
            tracing::error!(
                log_start_offset = %log_start_offset,
                high_watermark = %self.high_watermark,
                "log start offset past the high watermark; ignored"
            );
            return;
        }
        self.log_start_offset = log_start_offset;
        self.debug_check_invariants();
    }

    /// Every offset below it is committed.
    pub(crate) fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    /// Whether `offset` is committed (below the high watermark).
    pub(crate) fn is_committed(&self, offset: Offset) -> bool {
        offset < self.high_watermark
    }

    /// The ISR the coordinator accepted.
    #[cfg(test)]
    pub(crate) fn in_sync_replicas(&self) -> &[NodeId] {
        &self.in_sync_replicas
    }

    /// The coordinator's version of the accepted ISR.
    #[cfg(test)]
    pub(crate) fn isr_version(&self) -> u64 {
        self.isr_version
    }

    /// The accepted ISR plus a pending addition (SPEC §3.3).
    pub(crate) fn maximal_isr(&self) -> Vec<NodeId> {
        maximal_isr(&self.in_sync_replicas, self.pending_isr_change.as_ref())
    }

    /// The ISR change in flight, if any.
    #[cfg(test)]
    pub(crate) fn pending_isr_change(&self) -> Option<&PendingIsrChange> {
        self.pending_isr_change.as_ref()
    }

    /// The epoch this node leads in.
    pub(crate) fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    /// The start offset of this leader's epoch.
    pub(crate) fn epoch_start_offset(&self) -> Offset {
        self.epoch_start_offset
    }

    /// The committed end of the log, once this leader knows it: `None`
    /// while its high watermark is below the start offset of its own epoch
    /// (SPEC §3.8). A new leader starts from the high watermark it had as
    /// a follower, which can be below what the previous leader already
    /// acknowledged; only when its high watermark reaches its epoch's start
    /// offset has everything the previous leaders wrote been committed and
    /// counted. Kafka's rule for `ListOffsets` "latest"
    /// (`OFFSET_NOT_AVAILABLE` while the epoch start offset is above the
    /// high watermark, `Partition.fetchOffsetForTimestamp`).
    pub(crate) fn committed_end(&self) -> Option<Offset> {
        (self.high_watermark >= self.epoch_start_offset).then_some(self.high_watermark)
    }

    /// The leader's log end offset.
    pub(crate) fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }

    /// The leader's log start offset.
    #[cfg(test)]
    pub(crate) fn log_start_offset(&self) -> Offset {
        self.log_start_offset
    }

    /// The log end offset `node` last showed by fetching in this epoch;
    /// `None` if it is not a follower or has not fetched yet.
    pub(crate) fn follower_log_end_offset(&self, node: NodeId) -> Option<Offset> {
        self.followers.get(&node)?.log_end_offset()
    }

    /// Whether `node` has fetched in this epoch and held everything this
    /// leader had at some time within `window` before `now` (its catch-up
    /// time, Kafka's `lastCaughtUpTime`, read as the shrink rule reads it
    /// with `replica_lag_time_max`, SPEC 3.4): under continuous appends a
    /// follower that keeps up is, though its last fetch trails the log end
    /// by what was appended since. A new incarnation that has not caught
    /// up yet is not, whatever its predecessor's catch-up time.
    pub(crate) fn follower_caught_up_within(
        &self,
        node: NodeId,
        now: Instant,
        window: Duration,
    ) -> bool {
        self.followers.get(&node).is_some_and(|progress| {
            progress.log_end_offset().is_some() && !progress.is_out_of_sync(now, window)
        })
    }

    /// The incarnation of `node` whose fetches the leader counted in this
    /// epoch: what qualified it for the ISR, if anything did.
    pub(crate) fn follower_incarnation(&self, node: NodeId) -> Option<Incarnation> {
        self.followers.get(&node)?.incarnation()
    }

    /// How far `node` is behind, as of `now`; `None` if it is not a
    /// follower of this log.
    pub(crate) fn follower_lag(&self, node: NodeId, now: Instant) -> Option<FollowerLag> {
        let progress = self.followers.get(&node)?;
        Some(FollowerLag {
            records: progress
                .log_end_offset()
                .map(|offset| self.log_end_offset.distance_from(offset)),
            since_caught_up: progress.time_since_caught_up(now),
        })
    }

    /// [`isr_below_min`](Self::isr_below_min) as the error an `acks=all`
    /// append gets before it is written (SPEC §3.1; the replica reads its
    /// copy of it, the tests ask here).
    #[cfg(test)]
    pub(crate) fn can_accept_acks_all(&self) -> Result<()> {
        match self.isr_below_min() {
            Some((in_sync, min_insync_replicas)) => Err(Error::NotEnoughReplicas {
                in_sync,
                min_insync_replicas,
            }),
            None => Ok(()),
        }
    }

    /// Where an `acks=all` append whose last record is at
    /// `batch_last_offset` stands (SPEC §3.1): committed once the high
    /// watermark is past it; failed if it is not and the accepted ISR has
    /// shrunk below `min_insync_replicas`; else still waiting.
    pub(crate) fn acks_all_progress(&self, batch_last_offset: Offset) -> AcksAllProgress {
        if self.is_committed(batch_last_offset) {
            return AcksAllProgress::Committed;
        }
        if let Some((in_sync, min_insync_replicas)) = self.isr_below_min() {
            return AcksAllProgress::NotEnoughReplicasAfterAppend {
                in_sync,
                min_insync_replicas,
            };
        }
        AcksAllProgress::Waiting
    }

    /// `Some((ISR size, min.insync.replicas))` when the accepted ISR is
    /// below the minimum: a new `acks=all` append is refused before it is
    /// written (SPEC §3.1; Kafka compares with the setting itself, not
    /// capped by the replication factor), and every `acks=all` batch not
    /// committed yet fails with `NotEnoughReplicasAfterAppend` (see
    /// `acks_all_progress`).
    pub(crate) fn isr_below_min(&self) -> Option<(usize, usize)> {
        let in_sync = self.in_sync_replicas.len();
        (in_sync < self.config.min_insync_replicas)
            .then_some((in_sync, self.config.min_insync_replicas))
    }

    /// The invariants of the leader state; `Err` names the first broken one.
    /// Called (under `debug_assert!`) at the end of every mutating method,
    /// and by simulators after every step.
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        if !(self.log_start_offset <= self.high_watermark
            && self.high_watermark <= self.log_end_offset)
        {
            return Err(format!(
                "log start {} <= high watermark {} <= log end {} does not hold",
                self.log_start_offset, self.high_watermark, self.log_end_offset
            ));
        }
        if self.epoch_start_offset > self.log_end_offset {
            return Err(format!(
                "epoch start {} is past the log end {}",
                self.epoch_start_offset, self.log_end_offset
            ));
        }
        if let Err(error) = validate_isr(self.local, &self.replicas, &self.in_sync_replicas) {
            return Err(format!("accepted ISR: {error}"));
        }
        if self.pending_outcome_unknown && self.pending_isr_change.is_none() {
            return Err("an unknown outcome is recorded without a pending change".to_owned());
        }
        if let Some(pending) = &self.pending_isr_change {
            if let Err(error) = validate_isr(self.local, &self.replicas, &pending.proposed) {
                return Err(format!("pending ISR: {error}"));
            }
            let consistent = match &pending.kind {
                IsrChangeKind::Expand(node) => {
                    !self.in_sync_replicas.contains(node) && pending.proposed.contains(node)
                }
                IsrChangeKind::Shrink(nodes) => nodes.iter().all(|node| {
                    self.in_sync_replicas.contains(node) && !pending.proposed.contains(node)
                }),
            };
            if !consistent {
                return Err(format!(
                    "pending change {pending:?} does not fit the ISR {:?}",
                    self.in_sync_replicas
                ));
            }
        }
        let followers_match_replicas = self.followers.len() + 1 == self.replicas.len()
            && self
                .replicas
                .iter()
                .all(|node| *node == self.local || self.followers.contains_key(node));
        if !followers_match_replicas {
            return Err(format!(
                "followers {:?} are not the replicas {:?} without {}",
                self.followers.keys().collect::<Vec<_>>(),
                self.replicas,
                self.local
            ));
        }
        for (node, progress) in &self.followers {
            progress
                .check_invariants()
                .map_err(|error| format!("progress of {node}: {error}"))?;
        }
        Ok(())
    }

    fn debug_check_invariants(&self) {
        debug_assert_eq!(self.check_invariants(), Ok(()), "{self:?}");
    }

    /// SPEC §3.3 over the maximal ISR. Never moves backwards, never passes
    /// the leader's log end.
    fn advance_high_watermark(&mut self) -> HighWatermarkUpdate {
        let members = self.maximal_isr();
        let followers = &self.followers;
        let follower_log_end_offsets =
            members
                .iter()
                .filter(|node| **node != self.local)
                .map(|node| {
                    followers
                        .get(node)
                        .and_then(FollowerProgress::log_end_offset)
                });
        let next = next_high_watermark(HighWatermarkInputs {
            current: self.high_watermark,
            leader_log_end_offset: self.log_end_offset,
            follower_log_end_offsets,
            accepted_isr_len: self.in_sync_replicas.len(),
            min_insync_replicas: self.config.min_insync_replicas,
            replication_factor: self.replicas.len(),
        });
        let previous = self.high_watermark;
        self.high_watermark = next;
        HighWatermarkUpdate::between(previous, next)
    }

    fn maybe_propose_expand(&mut self, follower: NodeId, now: Instant) -> Option<IsrProposal> {
        if self.pending_isr_change.is_some() || self.in_sync_replicas.contains(&follower) {
            return None;
        }
        if self.expand_paused_until.is_some_and(|until| now < until) {
            return None;
        }
        let progress = self.followers.get(&follower)?;
        if !progress.is_eligible_for_isr(self.high_watermark, self.epoch_start_offset) {
            return None;
        }
        tracing::info!(
            follower = %follower,
            epoch = %self.leader_epoch,
            "follower caught up; proposing ISR expansion"
        );
        let mut proposed = self.in_sync_replicas.clone();
        proposed.push(follower);
        Some(self.propose(PendingIsrChange {
            proposed,
            kind: IsrChangeKind::Expand(follower),
        }))
    }

    fn propose(&mut self, change: PendingIsrChange) -> IsrProposal {
        let proposal = IsrProposal {
            leader_epoch: self.leader_epoch,
            expected_version: self.isr_version,
            proposed: change.proposed.clone(),
            kind: change.kind.clone(),
        };
        self.pending_isr_change = Some(change);
        proposal
    }

    fn out_of_range(&self, fetch_offset: Offset) -> FetchRejection {
        FetchRejection::OffsetOutOfRange {
            fetch_offset,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
        }
    }
}

/// An ISR a leader may hold: it contains the leader, names only replicas,
/// and names no node twice.
fn validate_isr(local: NodeId, replicas: &[NodeId], isr: &[NodeId]) -> Result<()> {
    if !isr.contains(&local) {
        return Err(coordinator_error(format!(
            "ISR {isr:?} does not contain the leader {local}"
        )));
    }
    if let Some(node) = isr.iter().find(|node| !replicas.contains(node)) {
        return Err(coordinator_error(format!(
            "ISR {isr:?} names {node}, not a replica of {replicas:?}"
        )));
    }
    if let Some(node) = first_duplicate(isr) {
        return Err(coordinator_error(format!("ISR {isr:?} names {node} twice")));
    }
    Ok(())
}

fn first_duplicate(nodes: &[NodeId]) -> Option<NodeId> {
    nodes
        .iter()
        .enumerate()
        .find(|(i, node)| nodes[..*i].contains(node))
        .map(|(_, node)| *node)
}

fn coordinator_error(reason: String) -> Error {
    Error::Coordinator { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: NodeId = NodeId(0);
    const F1: NodeId = NodeId(1);
    const F2: NodeId = NodeId(2);
    const OUTSIDER: NodeId = NodeId(9);
    const EPOCH: LeaderEpoch = LeaderEpoch(5);
    /// The followers' incarnation in every fetch of these tests.
    const INC: Incarnation = Incarnation(1);
    const LAG_MAX: Duration = Duration::from_millis(100);

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    fn offsets(start: u64, high_watermark: u64, end: u64) -> LogOffsets {
        LogOffsets {
            log_start_offset: Offset(start),
            high_watermark: Offset(high_watermark),
            log_end_offset: Offset(end),
        }
    }

    fn assignment(replicas: &[NodeId], isr: &[NodeId]) -> LeaderAssignment {
        LeaderAssignment {
            local: L,
            replicas: replicas.to_vec(),
            in_sync_replicas: isr.to_vec(),
            isr_version: 7,
            leader_epoch: EPOCH,
        }
    }

    fn leader(
        replicas: &[NodeId],
        isr: &[NodeId],
        min_insync_replicas: usize,
        log: LogOffsets,
        now: Instant,
    ) -> LeaderState {
        let config = LeaderConfig {
            min_insync_replicas,
            replica_lag_time_max: LAG_MAX,
        };
        LeaderState::become_leader(assignment(replicas, isr), log, now, config)
            .expect("valid assignment")
    }

    fn fetch(
        state: &mut LeaderState,
        node: NodeId,
        offset: u64,
        now: Instant,
    ) -> (HighWatermarkUpdate, Option<IsrProposal>) {
        match state.on_fetch(node, Offset(offset), EPOCH, FetchArrival::New(now), INC) {
            FetchDecision::Accepted {
                high_watermark,
                isr_proposal,
            } => (high_watermark, isr_proposal),
            FetchDecision::Rejected(rejection) => panic!("fetch rejected: {rejection:?}"),
        }
    }

    /// A new fetch of `node` at `offset` that says whether the follower's
    /// log is durably on this epoch's line.
    fn fetch_of_line(
        state: &mut LeaderState,
        node: NodeId,
        offset: u64,
        now: Instant,
        on_line: bool,
    ) -> HighWatermarkUpdate {
        let arrival = FetchArrival::New(now);
        match state.on_fetch_of_line(node, Offset(offset), EPOCH, arrival, INC, on_line) {
            FetchDecision::Accepted { high_watermark, .. } => high_watermark,
            FetchDecision::Rejected(rejection) => panic!("fetch rejected: {rejection:?}"),
        }
    }

    /// Simulator seed 70100050: a fetch sent before the follower stored
    /// this epoch as its line commits nothing, since a crash would bring
    /// the follower back on its older line; its next fetch, which says it
    /// is on the line, commits what it holds (see `on_fetch_of_line`).
    #[test]
    fn a_follower_not_yet_on_the_epochs_line_holds_the_high_watermark() {
        let now = Instant::now();
        // A new leader whose log holds records of older epochs above the
        // high watermark, which its followers hold too.
        let mut state = leader(&[L, F1, F2], &[L, F1, F2], 2, offsets(0, 150, 181), now);
        assert_eq!(
            fetch_of_line(&mut state, F1, 181, now, false),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(
            fetch_of_line(&mut state, F2, 181, now, false),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.high_watermark(), Offset(150));
        // Not caught up either: it vouches for nothing above the high
        // watermark.
        assert_eq!(state.follower_log_end_offset(F1), Some(Offset(150)));
        assert_eq!(
            fetch_of_line(&mut state, F1, 181, now + ms(1), true),
            HighWatermarkUpdate::Unchanged,
            "F2 is not on the line yet"
        );
        assert_eq!(
            fetch_of_line(&mut state, F2, 181, now + ms(1), true),
            advanced(150, 181)
        );
    }

    /// Review of 611925e: a follower outside the ISR, caught up to the
    /// epoch's start in an older epoch, joins only once a fetch says it
    /// is on the epoch's line, though its clipped offset would qualify.
    #[test]
    fn a_follower_not_yet_on_the_epochs_line_does_not_join_the_isr() {
        let now = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L, F1], 2, offsets(0, 181, 181), now);
        let arrival = FetchArrival::New(now);
        match state.on_fetch_of_line(F2, Offset(181), EPOCH, arrival, INC, false) {
            FetchDecision::Accepted { isr_proposal, .. } => assert_eq!(isr_proposal, None),
            FetchDecision::Rejected(rejection) => panic!("fetch rejected: {rejection:?}"),
        }
        let arrival = FetchArrival::New(now + ms(1));
        match state.on_fetch_of_line(F2, Offset(181), EPOCH, arrival, INC, true) {
            FetchDecision::Accepted { isr_proposal, .. } => assert!(
                isr_proposal.is_some(),
                "on the line and caught up, it qualifies"
            ),
            FetchDecision::Rejected(rejection) => panic!("fetch rejected: {rejection:?}"),
        }
    }

    fn advanced(from: u64, to: u64) -> HighWatermarkUpdate {
        HighWatermarkUpdate::Advanced {
            from: Offset(from),
            to: Offset(to),
        }
    }

    #[test]
    fn become_leader_rejects_inconsistent_assignments() {
        let rows: [(&str, Vec<NodeId>, Vec<NodeId>); 4] = [
            ("leader not in the ISR", vec![L, F1], vec![F1]),
            ("ISR names a non-replica", vec![L, F1], vec![L, OUTSIDER]),
            ("ISR names a node twice", vec![L, F1], vec![L, F1, L]),
            ("replicas name a node twice", vec![L, F1, F1], vec![L]),
        ];
        let config = LeaderConfig {
            min_insync_replicas: 1,
            replica_lag_time_max: LAG_MAX,
        };
        for (name, replicas, isr) in rows {
            let result = LeaderState::become_leader(
                assignment(&replicas, &isr),
                offsets(0, 0, 0),
                Instant::now(),
                config,
            );
            assert!(
                matches!(result, Err(Error::Coordinator { .. })),
                "{name}: {result:?}"
            );
        }
    }

    #[test]
    fn become_leader_evaluates_and_clamps_the_high_watermark() {
        let now = Instant::now();
        // Alone in the ISR with min 1: the tail commits at once.
        let alone = leader(&[L, F1], &[L], 1, offsets(0, 3, 10), now);
        assert_eq!(alone.high_watermark(), Offset(10));
        assert_eq!(alone.epoch_start_offset(), Offset(10));
        // Alone with min 2: frozen where it was.
        let frozen = leader(&[L, F1], &[L], 2, offsets(0, 3, 10), now);
        assert_eq!(frozen.high_watermark(), Offset(3));
        // A checkpointed HW past the log end is clamped to it; one below the
        // log start is raised to it.
        let waiting = leader(&[L, F1], &[L, F1], 1, offsets(0, 12, 10), now);
        assert_eq!(waiting.high_watermark(), Offset(10));
        let raised = leader(&[L, F1], &[L, F1], 1, offsets(4, 2, 10), now);
        assert_eq!(raised.high_watermark(), Offset(4));
        assert_eq!(raised.check_invariants(), Ok(()));
    }

    #[test]
    fn fetch_fencing_and_shape_rejections_change_nothing() {
        let now = Instant::now();
        let mut state = leader(&[L, F1], &[L, F1], 1, offsets(0, 0, 10), now);
        state.on_log_start_offset(Offset(0));
        let rows = [
            (
                "older epoch is fenced",
                F1,
                5,
                LeaderEpoch(4),
                FetchRejection::FencedLeaderEpoch {
                    request: LeaderEpoch(4),
                    current: EPOCH,
                },
            ),
            (
                "newer epoch is unknown",
                F1,
                5,
                LeaderEpoch(6),
                FetchRejection::UnknownLeaderEpoch {
                    request: LeaderEpoch(6),
                    current: EPOCH,
                },
            ),
            (
                "fencing comes before membership",
                OUTSIDER,
                5,
                LeaderEpoch(4),
                FetchRejection::FencedLeaderEpoch {
                    request: LeaderEpoch(4),
                    current: EPOCH,
                },
            ),
            (
                "not a replica",
                OUTSIDER,
                5,
                EPOCH,
                FetchRejection::UnknownFollower { node: OUTSIDER },
            ),
            (
                "the leader itself",
                L,
                5,
                EPOCH,
                FetchRejection::UnknownFollower { node: L },
            ),
            (
                "past the leader's log end",
                F1,
                11,
                EPOCH,
                FetchRejection::OffsetOutOfRange {
                    fetch_offset: Offset(11),
                    log_start_offset: Offset(0),
                    log_end_offset: Offset(10),
                },
            ),
        ];
        for (name, node, offset, epoch, expected) in rows {
            let before = format!("{state:?}");
            assert_eq!(
                state.on_fetch(
                    node,
                    Offset(offset),
                    epoch,
                    FetchArrival::New(now + ms(1)),
                    INC
                ),
                FetchDecision::Rejected(expected),
                "{name}"
            );
            assert_eq!(format!("{state:?}"), before, "{name}: state changed");
        }
        // A follower lagging behind the log start is out of range too, and
        // `validate_fetch` says so before any divergence check. (F1's fetch
        // at 10 commits everything, so the log start may move to 8.)
        assert_eq!(fetch(&mut state, F1, 10, now), (advanced(0, 10), None));
        state.on_log_start_offset(Offset(8));
        let expected = FetchRejection::OffsetOutOfRange {
            fetch_offset: Offset(7),
            log_start_offset: Offset(8),
            log_end_offset: Offset(10),
        };
        assert_eq!(state.validate_fetch(F1, Offset(7), EPOCH), Err(expected));
        assert_eq!(
            state.on_fetch(F1, Offset(7), EPOCH, FetchArrival::New(now), INC),
            FetchDecision::Rejected(expected)
        );
        assert_eq!(state.validate_fetch(F1, Offset(8), EPOCH), Ok(()));
    }

    #[test]
    fn committed_end_is_unknown_until_the_high_watermark_reaches_the_epoch_start() {
        let now = Instant::now();
        // (name, replicas, ISR, min ISR, (log start, HW, LEO) at election,
        //  committed end at election, follower fetches after it, committed
        //  end expected after each)
        type Row = (
            &'static str,
            &'static [NodeId],
            &'static [NodeId],
            usize,
            (u64, u64, u64),
            Option<u64>,
            &'static [(NodeId, u64)],
            &'static [Option<u64>],
        );
        let rows: &[Row] = &[
            (
                "the HW it had as follower is already the epoch start",
                &[L, F1],
                &[L, F1],
                1,
                (0, 3, 3),
                Some(3),
                &[],
                &[],
            ),
            (
                "stale HW: unknown until the follower fetches up to the epoch start",
                &[L, F1],
                &[L, F1],
                1,
                (0, 2, 3),
                None,
                &[(F1, 2), (F1, 3), (F1, 3)],
                &[None, Some(3), Some(3)],
            ),
            (
                "a follower past the epoch start commits the new epoch's records too",
                &[L, F1, F2],
                &[L, F1, F2],
                2,
                (0, 0, 5),
                None,
                &[(F1, 5), (F2, 4), (F2, 5)],
                &[None, None, Some(5)],
            ),
            (
                "alone in the ISR with min ISR 1: the whole tail commits at once",
                &[L, F1],
                &[L],
                1,
                (0, 1, 4),
                Some(4),
                &[],
                &[],
            ),
            (
                "alone below min ISR: the HW is frozen, so the end stays unknown",
                &[L, F1],
                &[L],
                2,
                (0, 1, 4),
                None,
                &[(F1, 4)],
                &[None],
            ),
        ];
        for &(name, replicas, isr, min, (start, hw, leo), at_election, fetches, expected) in rows {
            let mut state = leader(replicas, isr, min, offsets(start, hw, leo), now);
            assert_eq!(state.epoch_start_offset(), Offset(leo), "{name}");
            assert_eq!(
                state.committed_end(),
                at_election.map(Offset),
                "{name}: at election"
            );
            for (step, (&(follower, offset), want)) in fetches.iter().zip(expected).enumerate() {
                let _ = fetch(&mut state, follower, offset, now);
                assert_eq!(
                    state.committed_end(),
                    want.map(Offset),
                    "{name}: after fetch {step} ({follower} at {offset})"
                );
                // Whenever it is known, it is the high watermark.
                if let Some(end) = state.committed_end() {
                    assert_eq!(end, state.high_watermark(), "{name}");
                }
            }
        }
    }

    #[test]
    fn high_watermark_frozen_while_isr_below_min_isr() {
        let now = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L], 2, offsets(0, 0, 0), now);
        assert_eq!(
            state.on_local_append(Offset(5)),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.high_watermark(), Offset(0));
        // F1 catches up and is proposed; a pending addition counts in the
        // maximal ISR but not towards the minimum size.
        let (update, proposal) = fetch(&mut state, F1, 5, now);
        assert_eq!(update, HighWatermarkUpdate::Unchanged);
        assert_eq!(proposal.map(|p| p.kind), Some(IsrChangeKind::Expand(F1)));
        assert_eq!(state.high_watermark(), Offset(0));
        assert_eq!(
            state.on_isr_accepted(vec![L, F1], 8).expect("valid ISR"),
            advanced(0, 5)
        );
    }

    #[test]
    fn high_watermark_counts_a_pending_expansion() {
        let now = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L, F1], 1, offsets(0, 5, 5), now);
        let (_, proposal) = fetch(&mut state, F1, 5, now);
        assert_eq!(proposal, None);
        let (_, proposal) = fetch(&mut state, F2, 5, now);
        assert_eq!(
            proposal,
            Some(IsrProposal {
                leader_epoch: EPOCH,
                expected_version: 7,
                proposed: vec![L, F1, F2],
                kind: IsrChangeKind::Expand(F2),
            })
        );
        assert_eq!(state.maximal_isr(), vec![L, F1, F2]);
        assert_eq!(state.in_sync_replicas(), &[L, F1]);
        assert_eq!(
            state.on_local_append(Offset(10)),
            HighWatermarkUpdate::Unchanged
        );
        // F1 has everything; F2, pending, holds the HW at its LEO.
        assert_eq!(
            fetch(&mut state, F1, 10, now).0,
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.high_watermark(), Offset(5));
        assert_eq!(fetch(&mut state, F2, 8, now).0, advanced(5, 8));
    }

    #[test]
    fn high_watermark_counts_a_pending_shrink_until_accepted() {
        let base = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L, F1, F2], 1, offsets(0, 0, 0), base);
        let unchanged = (HighWatermarkUpdate::Unchanged, None);
        assert_eq!(
            state.on_local_append(Offset(3)),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(fetch(&mut state, F1, 3, base), unchanged, "F2 is at 0");
        assert_eq!(fetch(&mut state, F2, 3, base).0, advanced(0, 3));
        assert_eq!(
            state.on_local_append(Offset(10)),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(fetch(&mut state, F1, 10, base + ms(50)), unchanged);
        // F2 stalls at 3; F1 keeps up.
        assert_eq!(fetch(&mut state, F1, 10, base + ms(150)), unchanged);
        let proposal = state.tick(base + ms(150)).expect("F2 lags");
        assert_eq!(proposal.kind, IsrChangeKind::Shrink(vec![F2]));
        assert_eq!(proposal.proposed, vec![L, F1]);
        // Still counted: the HW stays at F2's 3.
        assert_eq!(
            fetch(&mut state, F1, 10, base + ms(160)).0,
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.high_watermark(), Offset(3));
        assert_eq!(
            state.on_isr_accepted(vec![L, F1], 8).expect("valid ISR"),
            advanced(3, 10)
        );
        assert_eq!(state.isr_version(), 8);
        assert_eq!(state.pending_isr_change(), None);
    }

    #[test]
    fn an_expansion_whose_outcome_is_unknown_keeps_counting_until_settled() {
        // Issue 24 item 1: replicas [L, F1, F2], min ISR 2, ISR {L, F2};
        // F1 catches up, the expansion is sent and its answer lost.
        let now = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L, F2], 2, offsets(0, 5, 5), now);
        assert_eq!(
            fetch(&mut state, F2, 5, now).0,
            HighWatermarkUpdate::Unchanged
        );
        let (_, proposal) = fetch(&mut state, F1, 5, now);
        let proposal = proposal.expect("F1 caught up");
        assert_eq!(proposal.kind, IsrChangeKind::Expand(F1));
        assert_eq!(state.unsettled_isr_change(), None, "not sent yet");
        state.on_isr_outcome_unknown();
        assert_eq!(state.unsettled_isr_change(), Some((EPOCH, 7)));
        // It is neither accepted nor dropped: F1 still holds the HW while
        // F2 acknowledges more, no other change is proposed, and a
        // withdrawal (which only applies before sending) changes nothing.
        assert_eq!(
            state.on_local_append(Offset(10)),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(
            fetch(&mut state, F2, 10, now).0,
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.high_watermark(), Offset(5));
        assert_eq!(state.maximal_isr(), vec![L, F2, F1]);
        assert_eq!(state.tick(now + LAG_MAX * 3), None);
        state.on_isr_withdrawn(now);
        assert_eq!(state.unsettled_isr_change(), Some((EPOCH, 7)));
        assert_eq!(state.high_watermark(), Offset(5));
        // The read shows it stored at version 8: adopted, settled.
        assert_eq!(
            state
                .on_isr_accepted(vec![L, F2, F1], 8)
                .expect("valid ISR"),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.unsettled_isr_change(), None);
        assert_eq!(state.in_sync_replicas(), &[L, F2, F1]);
        assert_eq!(state.high_watermark(), Offset(5), "F1 is still at 5");
    }

    #[test]
    fn an_unknown_outcome_shown_not_applied_is_dropped_and_proposed_again() {
        let now = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L, F2], 2, offsets(0, 5, 5), now);
        let (_, proposal) = fetch(&mut state, F1, 5, now);
        assert!(proposal.is_some());
        state.on_isr_outcome_unknown();
        assert_eq!(
            state.on_local_append(Offset(10)),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(
            fetch(&mut state, F2, 10, now).0,
            HighWatermarkUpdate::Unchanged
        );
        // The read shows version 7 still: not applied. F1 stops counting.
        assert_eq!(state.on_isr_not_applied(), advanced(5, 10));
        assert_eq!(state.pending_isr_change(), None);
        assert_eq!(state.unsettled_isr_change(), None);
        // A later fetch may propose it again, with no pause.
        let (_, proposal) = fetch(&mut state, F1, 10, now);
        assert_eq!(proposal.map(|p| p.kind), Some(IsrChangeKind::Expand(F1)));
    }

    #[test]
    fn a_shrink_whose_outcome_is_unknown_keeps_the_removed_replica_counting() {
        let base = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L, F1, F2], 1, offsets(0, 3, 3), base);
        assert_eq!(
            fetch(&mut state, F2, 3, base).0,
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(
            state.on_local_append(Offset(10)),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(
            fetch(&mut state, F1, 10, base + ms(150)).0,
            HighWatermarkUpdate::Unchanged
        );
        let proposal = state.tick(base + ms(150)).expect("F2 lags");
        assert_eq!(proposal.kind, IsrChangeKind::Shrink(vec![F2]));
        state.on_isr_outcome_unknown();
        assert_eq!(
            fetch(&mut state, F1, 10, base + ms(160)).0,
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.high_watermark(), Offset(3), "F2 still counts");
        assert_eq!(state.unsettled_isr_change(), Some((EPOCH, 7)));
        // Settled as stored: the shrink took effect.
        assert_eq!(
            state.on_isr_accepted(vec![L, F1], 8).expect("valid ISR"),
            advanced(3, 10)
        );
        assert_eq!(state.unsettled_isr_change(), None);
    }

    #[test]
    fn high_watermark_never_moves_backwards() {
        let now = Instant::now();
        let mut state = leader(&[L, F1], &[L, F1], 1, offsets(0, 0, 10), now);
        assert_eq!(fetch(&mut state, F1, 10, now).0, advanced(0, 10));
        // A lower fetch nobody asked for is ignored: the recorded log end
        // stays.
        assert_eq!(
            fetch(&mut state, F1, 4, now + ms(1)).0,
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(
            state.follower_lag(F1, now).map(|lag| lag.records),
            Some(Some(0))
        );
        // A follower that re-fetches lower because it truncated as told
        // does not pull the leader's HW back either.
        state.on_diverging_answer(F1, INC);
        assert_eq!(
            fetch(&mut state, F1, 4, now + ms(2)).0,
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.high_watermark(), Offset(10));
        assert_eq!(
            state.follower_lag(F1, now).map(|lag| lag.records),
            Some(Some(6))
        );
        assert!(state.is_committed(Offset(9)));
        assert!(!state.is_committed(Offset(10)));
    }

    #[test]
    fn isr_shrinks_just_after_replica_lag_time_max_not_at_it() {
        let base = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L, F1, F2], 1, offsets(0, 0, 0), base);
        // F2 keeps fetching at the end; F1 never shows up.
        assert_eq!(
            fetch(&mut state, F2, 0, base + ms(60)),
            (HighWatermarkUpdate::Unchanged, None)
        );
        assert_eq!(state.tick(base + ms(100)), None);
        let proposal = state
            .tick(base + ms(100) + Duration::from_nanos(1))
            .expect("F1 lags");
        assert_eq!(
            proposal,
            IsrProposal {
                leader_epoch: EPOCH,
                expected_version: 7,
                proposed: vec![L, F2],
                kind: IsrChangeKind::Shrink(vec![F1]),
            }
        );
        // A follower that caught up at 50 ms is measured from there.
        let mut state = leader(&[L, F1], &[L, F1], 1, offsets(0, 0, 0), base);
        assert_eq!(
            fetch(&mut state, F1, 0, base + ms(50)),
            (HighWatermarkUpdate::Unchanged, None)
        );
        assert_eq!(state.tick(base + ms(150)), None);
        assert_eq!(
            state
                .tick(base + ms(150) + Duration::from_nanos(1))
                .map(|p| p.kind),
            Some(IsrChangeKind::Shrink(vec![F1]))
        );
    }

    #[test]
    fn follower_keeping_up_under_continuous_load_stays_in_isr() {
        let base = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L, F1, F2], 1, offsets(0, 0, 0), base);
        // Every 10 ms the leader appends 3 records. F1 fetches, each time,
        // up to the leader's end as of its previous fetch: never the current
        // end. F2 fetches too but stays one record short of that, so it
        // never catches up.
        let mut f1_next = Offset(0);
        let mut f2_next = Offset(0);
        let mut shrunk_at = None;
        for step in 1..=100u64 {
            let now = base + ms(10 * step);
            assert_eq!(
                state.on_local_append(state.log_end_offset().plus(3)),
                HighWatermarkUpdate::Unchanged,
                "step {step}: no follower has the new records"
            );
            assert!(f1_next < state.log_end_offset());
            // The HW follows the slowest member (not what this test is
            // about); neither fetch may propose an ISR change: F1 is in the
            // ISR, F2 never catches up.
            assert_eq!(fetch(&mut state, F1, f1_next.0, now).1, None, "step {step}");
            assert_eq!(fetch(&mut state, F2, f2_next.0, now).1, None, "step {step}");
            f1_next = state.log_end_offset();
            f2_next = Offset(state.log_end_offset().0 - 1);
            if let Some(proposal) = state.tick(now) {
                assert_eq!(
                    proposal.kind,
                    IsrChangeKind::Shrink(vec![F2]),
                    "step {step}"
                );
                // F2, at 3 * step - 4, no longer holds the HW below F1's
                // 3 * step - 3.
                assert_eq!(
                    state
                        .on_isr_accepted(proposal.proposed, 8)
                        .expect("valid ISR"),
                    advanced(3 * step - 4, 3 * step - 3),
                    "step {step}"
                );
                shrunk_at.get_or_insert(step);
            }
            let lag = state.follower_lag(F1, now).expect("F1 is a follower");
            assert!(lag.since_caught_up <= ms(10), "step {step}: {lag:?}");
        }
        assert_eq!(state.in_sync_replicas(), &[L, F1]);
        // F2 was last caught up at start (base); it goes at the first tick
        // strictly after 100 ms, i.e. at 110 ms.
        assert_eq!(shrunk_at, Some(11));
    }

    #[test]
    fn expansion_requires_high_watermark_epoch_start_and_a_fetch() {
        let now = Instant::now();
        // min 2 keeps the HW frozen at 6, below the epoch start 10.
        let mut state = leader(&[L, F1], &[L], 2, offsets(0, 6, 10), now);
        assert_eq!(state.epoch_start_offset(), Offset(10));
        assert_eq!(state.high_watermark(), Offset(6));
        assert_eq!(fetch(&mut state, F1, 5, now).1, None, "below the HW");
        assert_eq!(
            fetch(&mut state, F1, 7, now).1,
            None,
            "below the epoch start"
        );
        assert_eq!(
            state.on_local_append(Offset(12)),
            HighWatermarkUpdate::Unchanged,
            "frozen below min ISR"
        );
        let proposal = fetch(&mut state, F1, 10, now).1.expect("caught up");
        assert_eq!(proposal.kind, IsrChangeKind::Expand(F1));
        assert_eq!(proposal.proposed, vec![L, F1]);
        assert_eq!(state.in_sync_replicas(), &[L]);
        assert_eq!(state.maximal_isr(), vec![L, F1]);
        // Not in the accepted ISR yet: acks=all still refused.
        assert!(matches!(
            state.can_accept_acks_all(),
            Err(Error::NotEnoughReplicas {
                in_sync: 1,
                min_insync_replicas: 2
            })
        ));
        assert_eq!(
            state.on_isr_accepted(vec![L, F1], 8).expect("valid ISR"),
            advanced(6, 10)
        );
        let admission = state.can_accept_acks_all();
        assert!(admission.is_ok(), "{admission:?}");
    }

    #[test]
    fn one_isr_change_in_flight_at_a_time() {
        let base = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L], 1, offsets(0, 0, 4), base);
        assert_eq!(state.high_watermark(), Offset(4));
        let first = fetch(&mut state, F1, 4, base).1.expect("F1 caught up");
        assert_eq!(first.kind, IsrChangeKind::Expand(F1));
        assert_eq!(
            fetch(&mut state, F2, 4, base).1,
            None,
            "F1's change in flight"
        );
        assert_eq!(
            state.on_isr_accepted(vec![L, F1], 8).expect("valid ISR"),
            HighWatermarkUpdate::Unchanged,
            "the HW was already at the log end"
        );
        let second = fetch(&mut state, F2, 4, base).1.expect("F2 caught up");
        assert_eq!(second.expected_version, 8);
        assert_eq!(second.proposed, vec![L, F1, F2]);
        // While F2's expansion is pending, a lagging F1 is not shrunk.
        assert_eq!(state.tick(base + ms(500)), None);
        // The coordinator refuses: nothing changes but the pending change
        // is dropped, and the next tick may propose.
        let RereadCoordinatorState = state.on_isr_rejected();
        assert_eq!(state.pending_isr_change(), None);
        assert_eq!(state.in_sync_replicas(), &[L, F1]);
        assert_eq!(
            state.tick(base + ms(500)).map(|p| p.kind),
            Some(IsrChangeKind::Shrink(vec![F1]))
        );
        assert_eq!(state.tick(base + ms(600)), None, "shrink in flight");
    }

    #[test]
    fn a_withdrawn_expansion_is_proposed_again_by_a_later_fetch() {
        let base = Instant::now();
        let mut state = leader(&[L, F1], &[L], 1, offsets(0, 0, 4), base);
        let first = fetch(&mut state, F1, 4, base).1.expect("F1 caught up");
        assert_eq!(first.kind, IsrChangeKind::Expand(F1));
        assert_eq!(fetch(&mut state, F1, 4, base).1, None, "change in flight");
        state.on_isr_withdrawn(base);
        assert_eq!(state.pending_isr_change(), None);
        assert_eq!(state.in_sync_replicas(), &[L]);
        assert_eq!(
            fetch(&mut state, F1, 4, base + ms(10)).1,
            None,
            "paused after a withdrawal"
        );
        let later = base + EXPAND_PAUSE_AFTER_WITHDRAWAL;
        let again = fetch(&mut state, F1, 4, later).1.expect("proposed again");
        assert_eq!(again.proposed, vec![L, F1]);
    }

    /// SPEC §3.4, the long-poll bug: a fetch held by the leader and
    /// evaluated again when data arrives vouches for its follower only as
    /// of its arrival. It neither re-admits a follower removed from the ISR
    /// meanwhile nor keeps one in the ISR past `replica_lag_time_max` from
    /// its arrival; a new fetch still does both.
    #[test]
    fn a_held_fetch_vouches_only_as_of_its_arrival() {
        let base = Instant::now();
        let mut state = leader(&[L, F1, F2], &[L, F1, F2], 1, offsets(0, 4, 4), base);
        // F2's fetch at the leader's end arrives at 10 ms and is held.
        let arrived = base + ms(10);
        let decision = state.on_fetch(F2, Offset(4), EPOCH, FetchArrival::New(arrived), INC);
        assert!(matches!(
            decision,
            FetchDecision::Accepted {
                isr_proposal: None,
                ..
            }
        ));
        // F2 is cut off; the ISR drops it (a controller's change, accepted).
        assert_eq!(
            state.on_isr_accepted(vec![L, F1], 8).expect("valid ISR"),
            HighWatermarkUpdate::Unchanged
        );
        // An append wakes the held fetch, which still qualifies on offsets
        // (at the HW and the epoch start): no expansion, no fresh catch-up.
        assert_eq!(
            state.on_local_append(Offset(5)),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(
            state.on_fetch(F2, Offset(4), EPOCH, FetchArrival::Held(arrived), INC),
            FetchDecision::Accepted {
                high_watermark: HighWatermarkUpdate::Unchanged,
                isr_proposal: None,
            }
        );
        assert_eq!(state.pending_isr_change(), None);
        let lag = state
            .follower_lag(F2, base + ms(500))
            .expect("F2 is a follower");
        assert_eq!(lag.since_caught_up, ms(490));

        // F1's held fetch at the leader's end, evaluated again much later
        // (another log's data woke it), keeps its arrival too: F1 leaves the
        // ISR just after the lag limit counted from that arrival.
        let f1_arrived = base + ms(20);
        assert_eq!(fetch(&mut state, F1, 5, f1_arrived), (advanced(4, 5), None));
        let late = f1_arrived + LAG_MAX + Duration::from_nanos(1);
        assert_eq!(
            state.on_fetch(F1, Offset(5), EPOCH, FetchArrival::Held(f1_arrived), INC),
            FetchDecision::Accepted {
                high_watermark: HighWatermarkUpdate::Unchanged,
                isr_proposal: None,
            }
        );
        assert_eq!(
            state.tick(late).map(|proposal| proposal.kind),
            Some(IsrChangeKind::Shrink(vec![F1]))
        );
        let RereadCoordinatorState = state.on_isr_rejected();

        // A new fetch from F2, at the HW, brings it back.
        let proposal = fetch(&mut state, F2, 5, base + ms(600))
            .1
            .expect("a new fetch at the HW qualifies F2");
        assert_eq!(proposal.kind, IsrChangeKind::Expand(F2));
    }

    #[test]
    fn isr_acceptance_rejects_inconsistent_or_older_state() {
        let now = Instant::now();
        let mut state = leader(&[L, F1], &[L, F1], 1, offsets(0, 0, 0), now);
        let rows: [(&str, Vec<NodeId>, u64); 3] = [
            ("older version", vec![L, F1], 6),
            ("without the leader", vec![F1], 8),
            ("with a non-replica", vec![L, OUTSIDER], 8),
        ];
        for (name, isr, version) in rows {
            let result = state.on_isr_accepted(isr, version);
            assert!(
                matches!(result, Err(Error::Coordinator { .. })),
                "{name}: {result:?}"
            );
            assert_eq!(state.in_sync_replicas(), &[L, F1], "{name}");
            assert_eq!(state.isr_version(), 7, "{name}");
        }
        // Re-reading the same state at the same version is accepted.
        assert_eq!(
            state.on_isr_accepted(vec![L], 7).expect("same version"),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.in_sync_replicas(), &[L]);
    }

    #[test]
    fn acks_all_admission_and_progress() {
        let now = Instant::now();
        let mut state = leader(&[L, F1], &[L, F1], 2, offsets(0, 0, 0), now);
        let admission = state.can_accept_acks_all();
        assert!(admission.is_ok(), "{admission:?}");
        assert_eq!(
            state.on_local_append(Offset(3)),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(state.acks_all_progress(Offset(2)), AcksAllProgress::Waiting);
        assert_eq!(fetch(&mut state, F1, 3, now), (advanced(0, 3), None));
        assert_eq!(
            state.acks_all_progress(Offset(2)),
            AcksAllProgress::Committed
        );
        assert_eq!(
            state.on_local_append(Offset(5)),
            HighWatermarkUpdate::Unchanged
        );
        // Alone below min ISR 2: the HW stays at 3, short of the new batch.
        assert_eq!(
            state.on_isr_accepted(vec![L], 8).expect("valid ISR"),
            HighWatermarkUpdate::Unchanged
        );
        assert_eq!(
            state.acks_all_progress(Offset(4)),
            AcksAllProgress::NotEnoughReplicasAfterAppend {
                in_sync: 1,
                min_insync_replicas: 2
            }
        );
        // Committed before the shrink stays committed.
        assert_eq!(
            state.acks_all_progress(Offset(2)),
            AcksAllProgress::Committed
        );
        assert!(matches!(
            state.can_accept_acks_all(),
            Err(Error::NotEnoughReplicas { .. })
        ));
    }

    #[test]
    fn log_start_offset_only_rises_and_never_past_the_high_watermark() {
        let now = Instant::now();
        let mut state = leader(&[L, F1], &[L, F1], 1, offsets(2, 6, 10), now);
        state.on_log_start_offset(Offset(4));
        assert_eq!(state.log_start_offset(), Offset(4));
        state.on_log_start_offset(Offset(3));
        assert_eq!(state.log_start_offset(), Offset(4));
        state.on_log_start_offset(Offset(7));
        assert_eq!(state.log_start_offset(), Offset(4));
        state.on_log_start_offset(Offset(6));
        assert_eq!(state.log_start_offset(), Offset(6));
    }

    #[test]
    fn check_invariants_names_each_broken_invariant() {
        let now = Instant::now();
        let healthy = leader(&[L, F1, F2], &[L, F1], 1, offsets(2, 4, 10), now);
        assert_eq!(healthy.check_invariants(), Ok(()));
        // (name, a fragment the error must contain, the breakage)
        type Breakage = (&'static str, &'static str, fn(&mut LeaderState));
        let breakages: [Breakage; 7] = [
            (
                "HW past the log end",
                "high watermark 11 <= log end 10",
                |s| s.high_watermark = Offset(11),
            ),
            (
                "HW below the log start",
                "log start 5 <= high watermark 4",
                |s| s.log_start_offset = Offset(5),
            ),
            ("leader missing from the ISR", "accepted ISR: ", |s| {
                s.in_sync_replicas = vec![F1]
            }),
            ("ISR names a non-replica", "accepted ISR: ", |s| {
                s.in_sync_replicas.push(OUTSIDER)
            }),
            (
                "pending expansion of an ISR member",
                "pending change",
                |s| {
                    s.pending_isr_change = Some(PendingIsrChange {
                        proposed: vec![L, F1],
                        kind: IsrChangeKind::Expand(F1),
                    })
                },
            ),
            (
                "pending shrink that keeps the node",
                "pending change",
                |s| {
                    s.pending_isr_change = Some(PendingIsrChange {
                        proposed: vec![L, F1],
                        kind: IsrChangeKind::Shrink(vec![F1]),
                    })
                },
            ),
            ("a replica without progress", "are not the replicas", |s| {
                s.followers.remove(&F2);
            }),
        ];
        for (name, fragment, breakage) in breakages {
            let mut state = healthy.clone();
            breakage(&mut state);
            match state.check_invariants() {
                Err(error) => assert!(error.contains(fragment), "{name}: {error}"),
                Ok(()) => panic!("{name} not detected"),
            }
        }
    }

    #[test]
    fn follower_lag_before_and_after_the_first_fetch() {
        let base = Instant::now();
        let mut state = leader(&[L, F1], &[L, F1], 1, offsets(0, 0, 10), base);
        assert_eq!(
            state.follower_lag(F1, base + ms(30)),
            Some(FollowerLag {
                records: None,
                since_caught_up: ms(30)
            })
        );
        assert_eq!(
            fetch(&mut state, F1, 7, base + ms(40)),
            (advanced(0, 7), None)
        );
        assert_eq!(
            state.follower_lag(F1, base + ms(50)),
            Some(FollowerLag {
                records: Some(3),
                since_caught_up: ms(50)
            })
        );
        assert_eq!(state.follower_lag(OUTSIDER, base), None);
        assert_eq!(state.follower_lag(L, base), None);
    }

    /// A leader's hand-over stops appends for a follower caught up lately
    /// (within the window, by its catch-up time): not before its first
    /// fetch in the epoch, although its catch-up time starts at the
    /// election; yes while it keeps up under appends, its fetches trailing
    /// the end; no once the window has passed since, or for a new
    /// incarnation that has not caught up.
    #[test]
    fn a_follower_caught_up_within_a_window() {
        let base = Instant::now();
        let window = ms(40);
        let mut state = leader(&[L, F1, F2], &[L, F1, F2], 1, offsets(0, 0, 10), base);
        assert!(!state.follower_caught_up_within(F1, base, window));
        let _ = fetch(&mut state, F1, 10, base + ms(10));
        assert!(state.follower_caught_up_within(F1, base + ms(10), window));
        // Appends go on; each fetch trails the end, but reaches it as of
        // the fetch before: caught up at ms 20, until 40 ms after that.
        let _ = state.on_local_append(Offset(12));
        let _ = fetch(&mut state, F1, 10, base + ms(20));
        let _ = state.on_local_append(Offset(14));
        let _ = fetch(&mut state, F1, 12, base + ms(30));
        assert!(state.follower_caught_up_within(F1, base + ms(60), window));
        assert!(!state.follower_caught_up_within(F1, base + ms(61), window));
        // F2 restarts: its new incarnation, behind, is not caught up,
        // though its predecessor was a moment ago.
        let _ = fetch(&mut state, F2, 14, base + ms(70));
        assert!(state.follower_caught_up_within(F2, base + ms(70), window));
        let arrival = FetchArrival::New(base + ms(71));
        let decision = state.on_fetch(F2, Offset(3), EPOCH, arrival, Incarnation(2));
        assert!(matches!(decision, FetchDecision::Accepted { .. }));
        assert!(!state.follower_caught_up_within(F2, base + ms(71), window));
        assert!(!state.follower_caught_up_within(OUTSIDER, base, window));
    }
}
