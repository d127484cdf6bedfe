//! A leader's hand-over of its log in the node core: a reassignment's,
//! which removes the leader (SPEC 3.10), and a stuck application's, whose
//! application is behind the log start (SPEC 3.9, issue 25). The core
//! keeps every log's hand-over ([`HandOver`]); the control pass moves it
//! on ([`NodeCore::progress_hand_over`]) through its phases, whose
//! transitions are the pure [`phase_step`], and through the coordinator
//! calls that name a successor, each a [`Continuation::HandOver`]. The
//! short wait for the high watermark after appends stop is the driver's
//! ([`Action::WaitHighWatermark`]): the threaded one blocks for it on the
//! real clock, the simulator does not wait. What this does not own: the
//! controlled shutdown's hand-over (`shutdown.rs`), which shares only
//! [`caught_up_successor`] and [`hand_over_update`], and the lock under
//! which a shutdown begins, which it takes through
//! [`NodeCore::wind_down`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Action, Continuation, CoordinatorCall, NodeCore, ReplicaRef};
use crate::coordinator::{CasOutcome, LogState, LogUpdate};
use crate::error::Result;
use crate::replication::{Replica, Role};
use crate::sync::{Arc, Ordering};
use crate::types::{LeaderEpoch, LogId, NodeId, Offset};

/// A leader's hand-over (a reassignment's, SPEC 3.10, or a stuck
/// application's, SPEC 3.9): how long it waits, with its appends stopped,
/// for the high watermark to reach their end and a successor to be named
/// before it gives appends back and tries again after [`HAND_OVER_RETRY`].
/// This bounds the stall its appenders see. The controller completes a
/// move without the hand-over after its own, longer, wait
/// (`REASSIGNMENT_HAND_OVER_WAIT_MAX` in the controller).
pub(crate) const HAND_OVER_WAIT: Duration = Duration::from_secs(2);
/// A leader's hand-over: how long the control thread waits, right after
/// stopping appends, for the high watermark to reach their end (usually one
/// fetch round) before it goes on with its other work and looks again on
/// its next tick.
pub(crate) const HAND_OVER_HW_WAIT: Duration = Duration::from_millis(20);
/// A leader's hand-over: the pause between two attempts of one log.
pub(crate) const HAND_OVER_RETRY: Duration = Duration::from_secs(1);

/// A leader's hand-over of a log, moved on by the control pass without
/// blocking it (see [`NodeCore::progress_hand_over`]): for one leader
/// `epoch`, for a `cause`, in a `phase`. A log has at most one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HandOver {
    /// The leader epoch it hands over; it ends once the replica leads in
    /// no other.
    epoch: LeaderEpoch,
    /// Why, which says who may take over.
    cause: HandOverCause,
    /// Where it stands.
    phase: HandOverPhase,
}

/// Why a leader hands its log over, which says who may take it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HandOverCause {
    /// A reassignment removes this leader (SPEC 3.10); the target replicas
    /// are the move's, and one of them takes over.
    Reassignment {
        /// The move's target replicas.
        target: Vec<NodeId>,
    },
    /// This leader's application is behind its log start (SPEC 3.9, issue
    /// 25): a replica whose application reaches the log start takes over.
    StuckApplication,
}

impl HandOverCause {
    /// The hand-over's name in log lines.
    fn label(&self) -> &'static str {
        match self {
            HandOverCause::Reassignment { .. } => "reassignment hand-over",
            HandOverCause::StuckApplication => "stuck application's hand-over",
        }
    }
}

/// Where a [`HandOver`] stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandOverPhase {
    /// The hand-over is due: appends stop as soon as a replica that may
    /// take over has caught up lately (held everything this leader had
    /// within twice `fetch_wait_max`: under continuous appends its last
    /// fetch trails the log end by what was appended since), so that they
    /// stop for about one fetch round rather than for a slow follower's
    /// whole catch-up.
    Ready,
    /// Appends stopped at log end `end`: once the high watermark reaches
    /// it, a caught-up live replica in the ISR that may take over is named
    /// leader. Until `deadline`.
    Waiting {
        /// The log end at which appends stopped.
        end: Offset,
        /// When the wait is over.
        deadline: Instant,
    },
    /// The last attempt found nobody in time; appends run again and the
    /// hand-over is ready again at `retry_at`.
    Failed {
        /// When it is ready again.
        retry_at: Instant,
    },
}

/// What a log's stored state, or its leader's application, asks of the
/// log's hand-over ([`reassignment_hand_over`],
/// [`stuck_application_hand_over`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Begin {
    /// Leave the hand-over as it is (or leave the log without one).
    Keep,
    /// End the hand-over under way, giving back the appends it stopped.
    End,
    /// Make this the log's hand-over (its phase carried over from the one
    /// under way in the same epoch, if any).
    Start(HandOver),
}

/// SPEC 3.10: what the stored `state` asks of node `me`'s reassignment
/// hand-over, `current` being the log's hand-over under way. Due when
/// `me` leads a log its reassignment removes it from and every target
/// replica is in the ISR: a stuck application's hand-over in the same
/// epoch becomes this one, its phase kept (appends stopped or not), since
/// the move's target replicas come first. Not due (a cancelled move,
/// another epoch): a reassignment hand-over under way ends.
pub(crate) fn reassignment_hand_over(
    state: &LogState,
    me: NodeId,
    current: Option<&HandOver>,
) -> Begin {
    let target = state.target_replicas();
    let due = state.leader == Some(me)
        && state.removing_replicas.contains(&me)
        && target.iter().all(|node| state.is_in_sync(*node));
    if !due {
        return match current {
            Some(hand_over) if matches!(hand_over.cause, HandOverCause::Reassignment { .. }) => {
                Begin::End
            }
            _ => Begin::Keep,
        };
    }
    let cause = HandOverCause::Reassignment { target };
    let phase = match current {
        Some(hand_over) if hand_over.epoch == state.leader_epoch => {
            if hand_over.cause == cause {
                return Begin::Keep;
            }
            hand_over.phase
        }
        _ => HandOverPhase::Ready,
    };
    Begin::Start(HandOver {
        epoch: state.leader_epoch,
        cause,
        phase,
    })
}

/// SPEC 3.9: what a leader in `epoch` whose application is `behind` its
/// log start (or not) asks of the log's hand-over, `current` being the
/// one under way. Behind, it begins a stuck application's hand-over,
/// unless one in this epoch (a reassignment's, or this one) moves the
/// leadership anyway; caught up again, a stuck application's hand-over
/// under way ends.
pub(crate) fn stuck_application_hand_over(
    behind: bool,
    epoch: LeaderEpoch,
    current: Option<&HandOver>,
) -> Begin {
    if !behind {
        return match current {
            Some(hand_over) if hand_over.cause == HandOverCause::StuckApplication => Begin::End,
            _ => Begin::Keep,
        };
    }
    if current.is_some_and(|hand_over| hand_over.epoch == epoch) {
        return Begin::Keep;
    }
    Begin::Start(HandOver {
        epoch,
        cause: HandOverCause::StuckApplication,
        phase: HandOverPhase::Ready,
    })
}

/// What one control pass does with a hand-over, by its phase
/// ([`phase_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PhaseStep {
    /// Nothing on this pass.
    Stay,
    /// Failed, and its retry is due: ready again.
    Retry,
    /// Ready, a replica that may take over has caught up lately and the
    /// ISR is fetching: read the live nodes, then stop appends.
    ReadLiveNodes,
    /// Waiting, past its deadline or `stalled` (an ISR member stopped
    /// fetching below the stopped end): give appends back, failed until
    /// `retry_at`.
    GiveUp {
        /// When it is ready again.
        retry_at: Instant,
        /// Whether it stalled (else its deadline passed).
        stalled: bool,
    },
    /// Waiting at `end` until `deadline`, the high watermark reached the
    /// stopped end and a replica that may take over has fetched
    /// everything: read the stored state to name a successor.
    ReadState {
        /// The log end at which appends stopped.
        end: Offset,
        /// When the wait is over.
        deadline: Instant,
    },
}

/// The pure transition of a hand-over in `phase` on a control pass at
/// `now`. What it needs of the leader is read only when the phase needs
/// it, in the order the inline code read it: ready, whether a replica
/// that may take over has caught up lately (`caught_up_lately`: appends
/// run, so its last fetch may trail the log end, and requiring it at the
/// end would need a lucky sample, twice, under load); whether every other
/// ISR member fetched lately (`isr_fetching`); waiting, the high watermark
/// (`high_watermark`, read again after the deadline check, as it may have
/// moved) and whether such a replica has fetched everything
/// (`caught_up`: appends are stopped, so the end stays put).
pub(crate) fn phase_step(
    phase: HandOverPhase,
    now: Instant,
    caught_up_lately: &dyn Fn() -> bool,
    caught_up: &dyn Fn() -> bool,
    isr_fetching: &dyn Fn() -> bool,
    high_watermark: &dyn Fn() -> Offset,
) -> PhaseStep {
    match phase {
        HandOverPhase::Failed { retry_at } if now >= retry_at => PhaseStep::Retry,
        HandOverPhase::Failed { .. } => PhaseStep::Stay,
        HandOverPhase::Ready if caught_up_lately() && isr_fetching() => PhaseStep::ReadLiveNodes,
        HandOverPhase::Ready => PhaseStep::Stay,
        HandOverPhase::Waiting { end, deadline } => {
            let stalled = high_watermark() < end && !isr_fetching();
            if now >= deadline || stalled {
                return PhaseStep::GiveUp {
                    retry_at: now + HAND_OVER_RETRY,
                    stalled,
                };
            }
            if high_watermark() < end || !caught_up() {
                return PhaseStep::Stay;
            }
            PhaseStep::ReadState { end, deadline }
        }
    }
}

/// Who a leader, node `me`, hands `state`'s leadership to (controlled
/// shutdown, reassignment, stuck application): the first of `candidates`
/// other than `me` that is in the ISR, `live` and has fetched everything
/// the leader holds (`has_caught_up`), so that nothing it acknowledged is
/// missing on it.
pub(crate) fn caught_up_successor(
    state: &LogState,
    me: NodeId,
    candidates: &[NodeId],
    live: &[NodeId],
    has_caught_up: impl Fn(NodeId) -> bool,
) -> Option<NodeId> {
    candidates.iter().copied().find(|&node| {
        node != me && state.is_in_sync(node) && live.contains(&node) && has_caught_up(node)
    })
}

/// The update that hands `state`'s leadership from node `me` to
/// `successor` in the next epoch: `me` leaves the ISR, and below
/// `min_insync_replicas` joins the ELR (it holds everything, and its
/// clean stop keeps it eligible), as Kafka's controller puts a broker in
/// controlled shutdown there (KIP-966).
pub(crate) fn hand_over_update(
    state: &LogState,
    me: NodeId,
    successor: NodeId,
    min_insync_replicas: usize,
) -> LogUpdate {
    let in_sync_replicas: Vec<NodeId> = state
        .in_sync_replicas
        .iter()
        .copied()
        .filter(|&node| node != me)
        .collect();
    let update = LogUpdate {
        leader: Some(successor),
        leader_epoch: state.leader_epoch.next(),
        eligible_leader_replicas: state
            .eligible_leader_replicas_after(&in_sync_replicas, min_insync_replicas),
        in_sync_replicas,
        unclean_report: None,
        assignment: None,
    };
    debug_assert!(
        !update.in_sync_replicas.contains(&me),
        "a hand-over leaves its leader in the ISR"
    );
    update
}

/// One control pass's hand-over of a log, as its continuations carry it:
/// the leader's `replica`, the `epoch` and `cause` of the hand-over as the
/// pass found them, and the pass's `now`, on which its timers are set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HandOverPass {
    /// The leader's replica.
    replica: ReplicaRef,
    /// The leader epoch handed over.
    epoch: LeaderEpoch,
    /// Why.
    cause: HandOverCause,
    /// The pass's time (the node's clock).
    now: Instant,
}

impl HandOverPass {
    /// The leader's replica.
    pub(crate) fn replica(&self) -> &ReplicaRef {
        &self.replica
    }
}

/// Which call of a hand-over's pass is answered
/// ([`Continuation::HandOver`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum HandOverStage {
    /// Ready: the live nodes, read before appends stop.
    LiveBeforeStop,
    /// Waiting at `end` until `deadline`: the stored state, read to name a
    /// successor.
    ReadState {
        /// The log end at which appends stopped.
        end: Offset,
        /// When the wait is over.
        deadline: Instant,
    },
    /// The live nodes, read to name a successor in the stored `state`.
    LiveBeforeWrite {
        /// The stored state (boxed: a continuation stays small).
        state: Box<LogState>,
    },
    /// The compare-and-set that names `successor`.
    Write {
        /// The replica named leader.
        successor: NodeId,
    },
}

/// A hand-over's pass that stopped appends at `end` (waiting until
/// `deadline`) and goes on once the driver has waited for the high
/// watermark ([`Action::WaitHighWatermark`], [`super::Input::HighWatermarkWaited`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HandOverWait {
    /// The pass.
    pass: HandOverPass,
    /// The log end at which appends stopped.
    end: Offset,
    /// When the wait is over.
    deadline: Instant,
}

impl HandOverWait {
    /// The leader's replica.
    pub(crate) fn replica(&self) -> &ReplicaRef {
        self.pass.replica()
    }
}

/// Writes `phase` into the hand-over of `log` if `hand_overs` holds one of
/// leader `epoch` (its cause unchanged); `None` ends it. Whether it wrote.
fn set_phase(
    hand_overs: &mut HashMap<LogId, HandOver>,
    log: LogId,
    epoch: LeaderEpoch,
    phase: Option<HandOverPhase>,
) -> bool {
    match hand_overs.get_mut(&log) {
        Some(current) if current.epoch == epoch => {
            match phase {
                Some(phase) => current.phase = phase,
                None => {
                    hand_overs.remove(&log);
                }
            }
            true
        }
        _ => false,
    }
}

/// How recently a replica that may take over must have held everything
/// the leader holds ([`NodeCore::progress_hand_over`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CaughtUp {
    /// Within twice `fetch_wait_max` (Kafka's `lastCaughtUpTime`), before
    /// appends stop: they run on, so its last fetch trails the log end by
    /// what was appended since.
    Lately,
    /// At the log end now, once appends stopped: nothing was appended
    /// since, and the successor must hold every acknowledged record.
    AtLogEnd,
}

impl NodeCore {
    /// Sets the node winding down (a controlled shutdown begins) under
    /// the hand-overs' lock: no hand-over gives back appends after this
    /// (see [`give_appends_back`](Self::give_appends_back)), since the
    /// shutdown stops them too and owns the stop from then on.
    pub(crate) fn wind_down(&self) {
        let _hand_overs = self.hand_overs.lock();
        self.winding_down.store(true, Ordering::SeqCst);
    }

    /// The hand-over of `log` under way, if any (tests).
    #[cfg(test)]
    pub(crate) fn hand_over_of(&self, log: LogId) -> Option<HandOver> {
        self.hand_overs.lock().get(&log).cloned()
    }

    /// Forgets the hand-over of `log`, whose replica here was removed.
    pub(crate) fn forget_hand_over(&self, log: LogId) {
        self.hand_overs.lock().remove(&log);
    }

    /// Whether a controlled shutdown has begun: it owns the appends' stop
    /// and hands the leaderships over itself.
    fn is_winding_down(&self) -> bool {
        self.winding_down.load(Ordering::SeqCst)
    }

    /// SPEC 3.10: keeps `replica`'s reassignment hand-over in line with
    /// the stored `state` it leads in (see [`reassignment_hand_over`]).
    /// The leadership is to go to a target replica as a controlled
    /// shutdown hands it over (KIP-455 leaves the new leader to the
    /// controller; here the leader, which alone knows which follower has
    /// fetched everything, names it, so that a target replica cut off from
    /// it, still in the ISR until `replica_lag_time_max` passes, is not
    /// chosen). The control pass carries it out
    /// ([`progress_hand_over`](Self::progress_hand_over)).
    pub(crate) fn begin_reassignment_hand_over(&self, replica: &Replica, state: &LogState) {
        // A stopping node's controlled shutdown owns the appends' stop:
        // nothing here may give them back (or start another hand-over).
        if self.is_winding_down() {
            return;
        }
        let me = self.node;
        let log = state.log;
        let mut hand_overs = self.hand_overs.lock();
        let current = hand_overs.get(&log).cloned();
        match reassignment_hand_over(state, me, current.as_ref()) {
            Begin::Keep => {}
            Begin::End => {
                if let Some(hand_over) = hand_overs.remove(&log) {
                    if self.give_appends_back(&hand_overs, replica, &hand_over) {
                        tracing::info!(%log, node = %me, "reassignment hand-over no longer due; appends resume");
                    }
                }
            }
            Begin::Start(hand_over) => {
                debug_assert!(
                    hand_over.epoch == state.leader_epoch
                        && matches!(hand_over.cause, HandOverCause::Reassignment { .. }),
                    "a reassignment hand-over is the move's, in the stored epoch"
                );
                if let HandOverCause::Reassignment { target } = &hand_over.cause {
                    tracing::info!(%log, node = %me, epoch = %state.leader_epoch, ?target,
                        "reassignment removes this leader: handing the log to a target replica once one has caught up");
                }
                hand_overs.insert(log, hand_over);
            }
        }
    }

    /// SPEC 3.9, issue 25: a leader whose application has applied less
    /// than its log start (`Replica::leader_application_behind`: it was
    /// elected while its application lagged past the cap) hands the
    /// leadership over ([`progress_hand_over`](Self::progress_hand_over)
    /// carries it out) to the first replica (target replicas of a
    /// reassignment first, then assignment order) that is in the ISR,
    /// live, has fetched everything this leader holds, and whose
    /// application has applied at least this log start; as a follower it
    /// then installs that replica's snapshot (the follower path of SPEC
    /// 3.9). This begins the hand-over (or ends it, once this replica no
    /// longer leads behind its application; see
    /// [`stuck_application_hand_over`]); it says so once per epoch (and
    /// through `ReplicatedLog::needs_snapshot`). With no such replica it
    /// leads on, appends included.
    ///
    /// SPEC 3.9 is silent; Kafka has no applied positions. Of the ways
    /// out, this one keeps the rest as it is. Appends stop only for the
    /// hand-over itself, as a controlled shutdown stops them (for about
    /// one fetch round, at most [`HAND_OVER_WAIT`], and only once a
    /// successor has caught up lately): under continuous `acks=all` load
    /// the leader always holds a record its followers have not fetched
    /// yet, so a hand-over that waited for a moment with nothing in flight
    /// could wait for ever (review of the first version), and one that
    /// waited for a successor at the log end before stopping them
    /// depended on lucky timing (CI flake under CPU contention). The
    /// successor is an ISR member that fetched up to the stopped log end,
    /// so it holds every acknowledged record, and only a follower ever
    /// receives a snapshot, so the transfer and install paths stay the
    /// ones tested. Fetching a snapshot as leader from a follower would
    /// keep the leadership but need a second transfer path; a controller
    /// that preferred replicas not needing one would need the applied
    /// positions in the coordinator. This leader leaves the ISR, as in
    /// [`hand_over_update`] (below `min_insync_replicas` it joins the ELR:
    /// it holds everything), where Kafka's preferred-leader election keeps
    /// the old leader in: here it stops fetching while its snapshot
    /// downloads and would hold the new leader's high watermark until
    /// `replica_lag_time_max`; it rejoins by rule 3.4 once rebuilt. So
    /// with two replicas, `acks=all` appends fail with
    /// `NotEnoughReplicas` while it installs the snapshot, if
    /// `min_insync_replicas` is 2.
    pub(crate) fn hand_over_from_a_stuck_application(&self, replica: &Replica) {
        // A stopping node's controlled shutdown hands the leadership over.
        if self.is_winding_down() {
            return;
        }
        let me = self.node;
        let log = replica.log_id();
        let behind = replica.leader_application_behind();
        let (_, epoch) = replica.role();
        let mut hand_overs = self.hand_overs.lock();
        let current = hand_overs.get(&log).cloned();
        if let Some((applied, log_start)) = behind {
            if replica.stuck_application_warning_due(epoch) {
                let candidate_seen = replica.in_sync_replicas().into_iter().any(|node| {
                    node != me
                        && replica.has_caught_up(node)
                        && replica.application_reaches_log_start(node)
                });
                tracing::warn!(%log, node = %me, %epoch, %applied, %log_start, candidate_seen,
                    "leading with this replica's application behind its log start: it needs a snapshot, which only a follower receives; handing the leadership to an in-sync replica whose application reaches the log start once one has caught up (appends stop briefly for it), leading on meanwhile");
            }
        }
        match stuck_application_hand_over(behind.is_some(), epoch, current.as_ref()) {
            Begin::Keep => {}
            Begin::End => {
                if let Some(hand_over) = hand_overs.remove(&log) {
                    if self.give_appends_back(&hand_overs, replica, &hand_over) {
                        tracing::info!(%log, node = %me, "this replica's application reaches its log start again: stuck application's hand-over ended; appends resume");
                    }
                }
            }
            Begin::Start(hand_over) => {
                hand_overs.insert(log, hand_over);
            }
        }
    }

    /// Gives back the appends `hand_over` stopped, if it stopped them (it
    /// is waiting), unless a controlled shutdown has begun: that stops them
    /// too, for its own hand-over, and owns the stop from then on. Whether
    /// it gave them back. `hand_overs` is the locked map, under which the
    /// shutdown sets `winding_down` ([`wind_down`](Self::wind_down)), so
    /// the check cannot pass just before the shutdown stops the appends.
    fn give_appends_back(
        &self,
        _hand_overs: &HashMap<LogId, HandOver>,
        replica: &Replica,
        hand_over: &HandOver,
    ) -> bool {
        if !matches!(hand_over.phase, HandOverPhase::Waiting { .. }) || self.is_winding_down() {
            return false;
        }
        replica.resume_appends_after_hand_over(hand_over.epoch);
        true
    }

    /// Writes the next phase of `pass`'s hand-over (`None`: ends it), but
    /// only if the map still holds a hand-over of the pass's epoch: the
    /// event thread may have ended it (a cancelled move, a caught-up
    /// application) or given it another cause while this pass ran (review
    /// of f31c327, finding 2), and a copy taken at the start must not bring
    /// it back. The cause stays the map's: the event thread owns it, the
    /// phase carries over. Whether it wrote.
    fn set_pass_phase(&self, pass: &HandOverPass, phase: Option<HandOverPhase>) -> bool {
        let mut hand_overs = self.hand_overs.lock();
        set_phase(
            &mut hand_overs,
            pass.replica.get().log_id(),
            pass.epoch,
            phase,
        )
    }

    /// Ends the wait of `hand_over` (waiting with appends stopped), past
    /// its deadline or stalled: gives the appends back and makes it ready
    /// again at `retry_at`. Needs no coordinator, so the control pass runs
    /// it even while an ISR change waits to be settled with a coordinator
    /// that does not answer (review of f31c327, finding 1: appends stayed
    /// stopped for as long as the coordinator was away).
    fn give_up_hand_over(
        &self,
        replica: &Replica,
        hand_over: &HandOver,
        retry_at: Instant,
        stalled: bool,
    ) {
        debug_assert!(matches!(hand_over.phase, HandOverPhase::Waiting { .. }));
        let log = replica.log_id();
        let mut hand_overs = self.hand_overs.lock();
        let failed = Some(HandOverPhase::Failed { retry_at });
        // Ended or replaced meanwhile: whoever did it gave the appends
        // back, or owns them.
        if !set_phase(&mut hand_overs, log, hand_over.epoch, failed) {
            return;
        }
        let resumed = self.give_appends_back(&hand_overs, replica, hand_over);
        tracing::warn!(%log, node = %self.node, epoch = %hand_over.epoch, stalled, resumed,
            "{}: the high watermark did not reach the stopped appends' end, or nobody could take over, in time; appends resume, trying again later", hand_over.cause.label());
    }

    /// The hand-over deadline alone, at `now`, for a pass on which
    /// `replica` has an ISR change to settle first (see
    /// [`give_up_hand_over`](Self::give_up_hand_over)).
    pub(crate) fn end_overdue_hand_over_while_unsettled(&self, replica: &Replica, now: Instant) {
        if self.is_winding_down() {
            return;
        }
        let Some(hand_over) = self.hand_overs.lock().get(&replica.log_id()).cloned() else {
            return;
        };
        if replica.role() != (Role::Leader, hand_over.epoch) {
            return;
        }
        if let HandOverPhase::Waiting { deadline, .. } = hand_over.phase {
            if now >= deadline {
                self.give_up_hand_over(replica, &hand_over, now + HAND_OVER_RETRY, false);
            }
        }
    }

    /// Whether node `node` may take over `pass`'s log from this leader: a
    /// target replica of the move; a replica whose application reaches
    /// the log start.
    fn may_take_over(&self, pass: &HandOverPass, node: NodeId) -> bool {
        node != self.node
            && match &pass.cause {
                HandOverCause::Reassignment { target } => target.contains(&node),
                HandOverCause::StuckApplication => {
                    pass.replica.get().application_reaches_log_start(node)
                }
            }
    }

    /// Whether a replica that may take over `pass`'s log has caught up
    /// as `how` says (and is in `live`, if given).
    fn successor_caught_up(
        &self,
        pass: &HandOverPass,
        live: Option<&[NodeId]>,
        how: CaughtUp,
    ) -> bool {
        let replica = pass.replica.get();
        let candidates = match &pass.cause {
            HandOverCause::Reassignment { target } => target.clone(),
            HandOverCause::StuckApplication => replica.in_sync_replicas(),
        };
        candidates.into_iter().any(|node| {
            self.may_take_over(pass, node)
                && match how {
                    CaughtUp::Lately => replica.has_caught_up_within(node, self.fetching_window()),
                    CaughtUp::AtLogEnd => replica.has_caught_up(node),
                }
                && live.is_none_or(|live| live.contains(&node))
        })
    }

    /// How lately a follower that keeps up has held everything this leader
    /// had: within about one fetch round, a long poll included.
    fn fetching_window(&self) -> Duration {
        self.fetch_wait_max * 2
    }

    /// Whether every other ISR member of `replica` fetched lately. One that
    /// did not (cut off, stuck) holds the high watermark until
    /// `replica_lag_time_max` drops it from the ISR: stopping appends for
    /// the hand-over then would refuse `acks=1` and `acks=0` appends for
    /// nothing, and the control pass, which serves every log, must not
    /// wait for it either.
    fn isr_fetching(&self, replica: &Replica) -> bool {
        let fresh = self.fetching_window();
        replica.in_sync_replicas().iter().all(|node| {
            *node == self.node
                || replica
                    .follower_lag(*node)
                    .is_some_and(|(_, since_caught_up)| since_caught_up <= fresh)
        })
    }

    /// One step, at `now` (the node's clock, so that a simulator moves
    /// the hand-over's timers), of `replica`'s hand-over, if one is due
    /// (see [`begin_reassignment_hand_over`](Self::begin_reassignment_hand_over)
    /// and [`hand_over_from_a_stuck_application`](Self::hand_over_from_a_stuck_application)),
    /// as a controlled shutdown hands over, but without blocking (see
    /// [`phase_step`]): stops appends once a replica that may take over
    /// (a target replica; a replica whose application reaches the log
    /// start) is live and has caught up lately and every other ISR member
    /// is fetching; once the high watermark reached the log end at which
    /// they stopped, names the first such replica that is in the ISR, live and
    /// has fetched everything, by compare-and-set; past
    /// [`HAND_OVER_WAIT`], or as soon as an ISR member stops fetching,
    /// gives appends back and is ready again after [`HAND_OVER_RETRY`].
    /// Stopped appends fail with `NotLeader` (retriable) and never wait.
    /// Under continuous load this is what lets the hand-over complete:
    /// without the stop the leader keeps a record its followers have not
    /// fetched yet. The control pass calls it on every tick.
    pub(crate) fn progress_hand_over(
        &self,
        replica: &Arc<Replica>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        // A stopping node's controlled shutdown owns the appends' stop
        // (review of fa7cb9a: the pass began before it wound down).
        if self.is_winding_down() {
            return;
        }
        let log = replica.log_id();
        let Some(hand_over) = self.hand_overs.lock().get(&log).cloned() else {
            return;
        };
        let pass = HandOverPass {
            replica: ReplicaRef(Arc::clone(replica)),
            epoch: hand_over.epoch,
            cause: hand_over.cause.clone(),
            now,
        };
        if replica.role() != (Role::Leader, pass.epoch) {
            // Someone else moved the leadership: appends in that epoch are
            // over anyway.
            self.set_pass_phase(&pass, None);
            return;
        }
        self.hand_over_phase_step(pass, hand_over.phase, out);
    }

    /// Takes the [`phase_step`] of `pass`'s hand-over in `phase`.
    fn hand_over_phase_step(
        &self,
        pass: HandOverPass,
        phase: HandOverPhase,
        out: &mut Vec<Action>,
    ) {
        let replica = pass.replica.get();
        let step = phase_step(
            phase,
            pass.now,
            &|| self.successor_caught_up(&pass, None, CaughtUp::Lately),
            &|| self.successor_caught_up(&pass, None, CaughtUp::AtLogEnd),
            &|| self.isr_fetching(replica),
            &|| replica.high_watermark(),
        );
        match step {
            PhaseStep::Stay => {}
            PhaseStep::Retry => {
                self.set_pass_phase(&pass, Some(HandOverPhase::Ready));
            }
            // The caught-up replica may have died since its last fetch (a
            // leader elected while the others go down sees one fetch from
            // a replica that then crashes, still in the ISR): stopping
            // appends for it would refuse them for nothing until the stall
            // gives them back. One coordinator call, made only when this
            // leader's own view shows a replica to hand over to.
            PhaseStep::ReadLiveNodes => Self::call(
                out,
                CoordinatorCall::LiveNodes,
                Continuation::HandOver {
                    pass,
                    stage: HandOverStage::LiveBeforeStop,
                },
            ),
            PhaseStep::GiveUp { retry_at, stalled } => {
                let hand_over = HandOver {
                    epoch: pass.epoch,
                    cause: pass.cause.clone(),
                    phase,
                };
                self.give_up_hand_over(replica, &hand_over, retry_at, stalled);
            }
            PhaseStep::ReadState { end, deadline } => {
                Self::call(
                    out,
                    CoordinatorCall::LogState(replica.log_id()),
                    Continuation::HandOver {
                        pass,
                        stage: HandOverStage::ReadState { end, deadline },
                    },
                );
            }
        }
    }

    /// A hand-over pass's answer, at `stage`.
    pub(super) fn hand_over_answered(
        &self,
        pass: HandOverPass,
        stage: HandOverStage,
        answer: super::Answer,
        out: &mut Vec<Action>,
    ) {
        use super::Answer;
        match (stage, answer) {
            (HandOverStage::LiveBeforeStop, Answer::LiveNodes(read)) => {
                if let Some(live) = self.hand_over_live_nodes(&pass, read) {
                    self.stop_appends_for_hand_over(pass, &live, out);
                }
            }
            (HandOverStage::ReadState { end, deadline }, Answer::LogState(read)) => {
                self.hand_over_state_read(pass, end, deadline, read, out)
            }
            (HandOverStage::LiveBeforeWrite { state }, Answer::LiveNodes(read)) => {
                if let Some(live) = self.hand_over_live_nodes(&pass, read) {
                    self.name_successor(pass, &state, &live, out);
                }
            }
            (HandOverStage::Write { successor }, Answer::Cas(written)) => {
                self.hand_over_written(&pass, successor, written, out)
            }
            (stage, answer) => panic!(
                "hand-over stage {stage:?} answered with {answer:?}: the driver paired a call with another call's continuation"
            ),
        }
    }

    /// The live nodes for a hand-over pass; `None` (logged) when they
    /// could not be read: the next pass tries again.
    fn hand_over_live_nodes(
        &self,
        pass: &HandOverPass,
        read: Result<Vec<NodeId>>,
    ) -> Option<Vec<NodeId>> {
        read.map_err(|error| {
            let log = pass.replica.get().log_id();
            tracing::debug!(%log, node = %self.node, %error, "{}: cannot read live nodes; retrying", pass.cause.label());
        })
        .ok()
    }

    /// Ready, with the `live` nodes read: stops appends if a replica that
    /// may take over is live and has caught up lately (not necessarily to
    /// the log end: the appends went on during the call), and waits (up
    /// to [`HAND_OVER_WAIT`]) for the high watermark to reach the stopped
    /// end.
    fn stop_appends_for_hand_over(
        &self,
        pass: HandOverPass,
        live: &[NodeId],
        out: &mut Vec<Action>,
    ) {
        let replica = pass.replica.get();
        let log = replica.log_id();
        let me = self.node;
        let (epoch, now) = (pass.epoch, pass.now);
        if !self.successor_caught_up(&pass, Some(live), CaughtUp::Lately) {
            // The caught-up replica is down but, in this leader's view,
            // still in the ISR until `replica_lag_time_max` drops it (or
            // it stopped fetching during the call): ask the coordinator
            // again after HAND_OVER_RETRY, not on every tick (review of
            // f31c327). Appends were not stopped.
            let retry_at = now + HAND_OVER_RETRY;
            if self.set_pass_phase(&pass, Some(HandOverPhase::Failed { retry_at })) {
                tracing::info!(%log, node = %me, %epoch, ?live,
                    "{}: no replica that may take over is live and caught up lately; trying again in {HAND_OVER_RETRY:?}", pass.cause.label());
            }
            return;
        }
        let Some((stopped, end)) = replica.stop_appends_for_hand_over() else {
            self.set_pass_phase(&pass, None);
            return;
        };
        if stopped != epoch {
            // It leads in another epoch now: give back what this stopped
            // (unless a controlled shutdown stopped it too).
            let hand_overs = self.hand_overs.lock();
            let stray = HandOver {
                epoch: stopped,
                cause: pass.cause.clone(),
                phase: HandOverPhase::Waiting { end, deadline: now },
            };
            self.give_appends_back(&hand_overs, replica, &stray);
            drop(hand_overs);
            self.set_pass_phase(&pass, None);
            return;
        }
        let deadline = now + HAND_OVER_WAIT;
        let waiting = HandOverPhase::Waiting { end, deadline };
        {
            let mut hand_overs = self.hand_overs.lock();
            if !set_phase(&mut hand_overs, log, epoch, Some(waiting)) {
                // Ended while this pass ran: nobody would give back the
                // appends just stopped.
                let stopped = HandOver {
                    epoch,
                    cause: pass.cause.clone(),
                    phase: waiting,
                };
                let resumed = self.give_appends_back(&hand_overs, replica, &stopped);
                tracing::info!(%log, node = %me, %epoch, resumed,
                    "{}: ended while stopping appends; appends resume", pass.cause.label());
                return;
            }
        }
        tracing::info!(%log, node = %me, %epoch, log_end_offset = %end,
            "{}: appends stopped", pass.cause.label());
        // The caught-up replica has its fetch parked here and brings the
        // high watermark to `end` in about one fetch round: the driver
        // waits for that now, briefly, rather than a whole control tick (up
        // to 50 ms) with appends stopped.
        let wait = HandOverWait {
            pass,
            end,
            deadline,
        };
        if end > Offset::ZERO {
            out.push(Action::WaitHighWatermark {
                above: Offset(end.0 - 1),
                until: HAND_OVER_HW_WAIT,
                then: wait,
            });
        } else {
            self.high_watermark_waited(wait, out);
        }
    }

    /// The driver's wait for the high watermark after appends stopped is
    /// over (or was not made): the pass goes on as a waiting hand-over.
    pub(super) fn high_watermark_waited(&self, wait: HandOverWait, out: &mut Vec<Action>) {
        let HandOverWait {
            pass,
            end,
            deadline,
        } = wait;
        self.hand_over_phase_step(pass, HandOverPhase::Waiting { end, deadline }, out);
    }

    /// Waiting at `end` until `deadline`, the stored state `read`: names a
    /// successor if this node still leads in the pass's epoch (and, for a
    /// reassignment, is still being removed).
    fn hand_over_state_read(
        &self,
        pass: HandOverPass,
        end: Offset,
        deadline: Instant,
        read: Result<Option<LogState>>,
        out: &mut Vec<Action>,
    ) {
        let replica = pass.replica.get();
        let log = replica.log_id();
        let me = self.node;
        let epoch = pass.epoch;
        let state = match read {
            Ok(Some(state)) => state,
            Ok(None) => return,
            Err(error) => {
                tracing::debug!(%log, node = %me, %error, "{}: cannot read the log; retrying", pass.cause.label());
                return;
            }
        };
        if state.leader != Some(me) || state.leader_epoch != epoch {
            return; // The event that says so brings the role change.
        }
        // A move cancelled or replaced (its replica set unchanged, so the
        // epoch too) while this ran: the event thread ended this
        // hand-over, and this pass may have put it back (review of
        // f31c327). Nothing to hand over: give the stopped appends back
        // and end it.
        if matches!(pass.cause, HandOverCause::Reassignment { .. })
            && !state.removing_replicas.contains(&me)
        {
            let mut hand_overs = self.hand_overs.lock();
            let waiting = HandOver {
                epoch,
                cause: pass.cause.clone(),
                phase: HandOverPhase::Waiting { end, deadline },
            };
            let resumed = self.give_appends_back(&hand_overs, replica, &waiting);
            tracing::info!(%log, node = %me, %epoch, resumed,
                "{}: this node is no longer being removed; appends resume", pass.cause.label());
            if hand_overs
                .get(&log)
                .is_some_and(|current| current.epoch == epoch)
            {
                hand_overs.remove(&log);
            }
            return;
        }
        Self::call(
            out,
            CoordinatorCall::LiveNodes,
            Continuation::HandOver {
                pass,
                stage: HandOverStage::LiveBeforeWrite {
                    state: Box::new(state),
                },
            },
        );
    }

    /// With the stored `state` and the `live` nodes: names the first
    /// caught-up successor (target replicas first, then assignment
    /// order), if any, by compare-and-set.
    fn name_successor(
        &self,
        pass: HandOverPass,
        state: &LogState,
        live: &[NodeId],
        out: &mut Vec<Action>,
    ) {
        let replica = pass.replica.get();
        let candidates: Vec<NodeId> = match &pass.cause {
            HandOverCause::Reassignment { .. } => state.target_replicas(),
            HandOverCause::StuckApplication => state
                .target_replicas()
                .into_iter()
                .chain(state.replicas.iter().copied())
                .filter(|node| self.may_take_over(&pass, *node))
                .collect(),
        };
        let Some(successor) = caught_up_successor(state, self.node, &candidates, live, |node| {
            replica.has_caught_up(node)
        }) else {
            return;
        };
        debug_assert!(successor != self.node && state.is_in_sync(successor));
        let update = hand_over_update(state, self.node, successor, self.min_insync_replicas);
        Self::call(
            out,
            CoordinatorCall::compare_and_set_on(state, update),
            Continuation::HandOver {
                pass,
                stage: HandOverStage::Write { successor },
            },
        );
    }

    /// The compare-and-set naming `successor` answered: applied, the
    /// hand-over ends and the new state is followed; stale or failed, the
    /// next pass reads the stored state again and decides from it.
    fn hand_over_written(
        &self,
        pass: &HandOverPass,
        successor: NodeId,
        written: Result<CasOutcome>,
        out: &mut Vec<Action>,
    ) {
        let log = pass.replica.get().log_id();
        let me = self.node;
        match written {
            Ok(CasOutcome::Applied(new_state)) => {
                self.set_pass_phase(pass, None);
                match pass.cause {
                    HandOverCause::Reassignment { .. } => {
                        tracing::info!(%log, node = %me, leader = %successor, epoch = %new_state.leader_epoch,
                        "reassignment: leadership handed to a target replica")
                    }
                    HandOverCause::StuckApplication => {
                        tracing::warn!(%log, node = %me, leader = %successor, epoch = %new_state.leader_epoch,
                        "handed the leadership over: this replica's application needs a snapshot, which it installs as a follower")
                    }
                }
                out.push(Action::reconcile(new_state));
            }
            // Lost a race, or the answer was lost: the next pass reads the
            // stored state again and decides from it.
            Ok(CasOutcome::Stale(_)) => {}
            Err(error) => {
                tracing::warn!(%log, node = %me, %error, "{}: compare-and-set failed; retrying", pass.cause.label());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Answer, Input};
    use super::*;
    use crate::clock::Clock;
    use crate::error::Error;
    use crate::node::core::tests::{append_one, fetch_at, leader_fetched_by_2_and_3};
    use crate::sync::AtomicBool;

    const FETCH_WAIT_MAX: Duration = Duration::from_millis(500);

    fn n(id: u32) -> NodeId {
        NodeId(id)
    }

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    /// Node 1's core; `winding_down` is its controlled shutdown's flag.
    fn core_winding(winding_down: Arc<AtomicBool>) -> NodeCore {
        NodeCore::new(
            n(1),
            Duration::from_secs(6),
            2,
            FETCH_WAIT_MAX,
            Arc::new(AtomicBool::new(false)),
            winding_down,
        )
    }

    fn core() -> NodeCore {
        core_winding(Arc::new(AtomicBool::new(false)))
    }

    /// Log 1 led by node 1 in epoch 3 at version 7, replicas 1, 2 and 3
    /// with ISR `isr`; a reassignment removes the `removing` replicas.
    fn state(isr: &[u32], removing: &[u32]) -> LogState {
        LogState {
            leader: Some(n(1)),
            leader_epoch: LeaderEpoch(3),
            version: 7,
            in_sync_replicas: nodes(isr),
            removing_replicas: nodes(removing),
            ..LogState::initial(LogId(1), nodes(&[1, 2, 3])).expect("a valid initial state")
        }
    }

    fn hand_over(epoch: u32, cause: HandOverCause, phase: HandOverPhase) -> HandOver {
        HandOver {
            epoch: LeaderEpoch(epoch),
            cause,
            phase,
        }
    }

    fn to_2_and_3() -> HandOverCause {
        HandOverCause::Reassignment {
            target: nodes(&[2, 3]),
        }
    }

    /// SPEC 3.10: a reassignment hand-over is due while this node leads a
    /// log its move removes it from with every target replica in the ISR;
    /// a stuck application's in the same epoch becomes it, phase kept;
    /// not due, only a reassignment's hand-over ends.
    #[test]
    fn a_reassignment_hand_over_is_due_while_the_move_removes_its_leader() {
        let t0 = Instant::now();
        let waiting = HandOverPhase::Waiting {
            end: Offset(5),
            deadline: t0,
        };
        let due = state(&[1, 2, 3], &[1]);
        let ready = Begin::Start(hand_over(3, to_2_and_3(), HandOverPhase::Ready));
        let reassigning = hand_over(3, to_2_and_3(), waiting);
        let stuck = hand_over(3, HandOverCause::StuckApplication, waiting);
        let earlier = hand_over(2, HandOverCause::StuckApplication, waiting);
        let not_leader = LogState {
            leader: Some(n(2)),
            ..due.clone()
        };
        let cases: Vec<(&str, LogState, Option<&HandOver>, Begin)> = vec![
            ("due, none under way", due.clone(), None, ready.clone()),
            (
                "due, the same under way",
                due.clone(),
                Some(&reassigning),
                Begin::Keep,
            ),
            (
                "due, a stuck application's in the epoch: its phase kept",
                due.clone(),
                Some(&stuck),
                Begin::Start(hand_over(3, to_2_and_3(), waiting)),
            ),
            (
                "due, one of an earlier epoch",
                due.clone(),
                Some(&earlier),
                ready,
            ),
            (
                "a target replica out of the ISR",
                state(&[1, 2], &[1]),
                Some(&reassigning),
                Begin::End,
            ),
            ("not removed", state(&[1, 2, 3], &[]), None, Begin::Keep),
            ("not the leader", not_leader, Some(&reassigning), Begin::End),
            (
                "not due, a stuck application's stays",
                state(&[1, 2, 3], &[]),
                Some(&stuck),
                Begin::Keep,
            ),
        ];
        for (case, state, current, expected) in cases {
            assert_eq!(
                reassignment_hand_over(&state, n(1), current),
                expected,
                "{case}"
            );
        }
    }

    /// SPEC 3.9: a leader behind its application begins a stuck
    /// application's hand-over unless one in its epoch is under way; caught
    /// up again, only a stuck application's ends.
    #[test]
    fn a_stuck_application_hand_over_begins_once_per_epoch_and_ends_when_caught_up() {
        let stuck = hand_over(3, HandOverCause::StuckApplication, HandOverPhase::Ready);
        let reassigning = hand_over(3, to_2_and_3(), HandOverPhase::Ready);
        let earlier = hand_over(2, to_2_and_3(), HandOverPhase::Ready);
        let epoch = LeaderEpoch(3);
        let begin = Begin::Start(stuck.clone());
        assert_eq!(stuck_application_hand_over(true, epoch, None), begin);
        assert_eq!(
            stuck_application_hand_over(true, epoch, Some(&earlier)),
            begin
        );
        assert_eq!(
            stuck_application_hand_over(true, epoch, Some(&stuck)),
            Begin::Keep
        );
        assert_eq!(
            stuck_application_hand_over(true, epoch, Some(&reassigning)),
            Begin::Keep
        );
        assert_eq!(
            stuck_application_hand_over(false, epoch, Some(&stuck)),
            Begin::End
        );
        assert_eq!(
            stuck_application_hand_over(false, epoch, Some(&reassigning)),
            Begin::Keep
        );
        assert_eq!(stuck_application_hand_over(false, epoch, None), Begin::Keep);
    }

    /// The phase transitions of one control pass, and what each phase
    /// reads of the leader (a phase that needs nothing reads nothing):
    /// ready reads whether a successor caught up lately, never whether it
    /// is at the log end; waiting, the reverse.
    #[test]
    fn a_hand_over_moves_through_its_phases_on_the_control_pass() {
        let t0 = Instant::now();
        let second = Duration::from_secs(1);
        let unread = || -> bool { panic!("not read in this phase") };
        let unread_offset = || -> Offset { panic!("not read in this phase") };
        let (yes, no) = (|| true, || false);
        let failed = HandOverPhase::Failed {
            retry_at: t0 + second,
        };
        assert_eq!(
            phase_step(failed, t0, &unread, &unread, &unread, &unread_offset),
            PhaseStep::Stay
        );
        let at_retry = t0 + second;
        assert_eq!(
            phase_step(failed, at_retry, &unread, &unread, &unread, &unread_offset),
            PhaseStep::Retry
        );
        let ready = HandOverPhase::Ready;
        assert_eq!(
            phase_step(ready, t0, &no, &unread, &unread, &unread_offset),
            PhaseStep::Stay
        );
        assert_eq!(
            phase_step(ready, t0, &yes, &unread, &no, &unread_offset),
            PhaseStep::Stay
        );
        assert_eq!(
            phase_step(ready, t0, &yes, &unread, &yes, &unread_offset),
            PhaseStep::ReadLiveNodes
        );
        let waiting = HandOverPhase::Waiting {
            end: Offset(5),
            deadline: t0 + second,
        };
        let (below, at) = (|| Offset(4), || Offset(5));
        let read_state = PhaseStep::ReadState {
            end: Offset(5),
            deadline: t0 + second,
        };
        let give_up = |stalled| PhaseStep::GiveUp {
            retry_at: t0 + second + HAND_OVER_RETRY,
            stalled,
        };
        /// A case: its name, the pass's time, whether a successor caught
        /// up, whether the ISR is fetching, the high watermark, the step.
        type Case<'a> = (
            &'a str,
            Instant,
            &'a dyn Fn() -> bool,
            &'a dyn Fn() -> bool,
            &'a dyn Fn() -> Offset,
            PhaseStep,
        );
        let cases: Vec<Case> = vec![
            (
                "past the deadline",
                t0 + second,
                &yes,
                &yes,
                &at,
                give_up(false),
            ),
            (
                "an ISR member stopped fetching below the end",
                t0 + second,
                &yes,
                &no,
                &below,
                give_up(true),
            ),
            (
                "below the end, fetching",
                t0,
                &yes,
                &yes,
                &below,
                PhaseStep::Stay,
            ),
            (
                "at the end, nobody caught up",
                t0,
                &no,
                &yes,
                &at,
                PhaseStep::Stay,
            ),
            ("at the end, caught up", t0, &yes, &yes, &at, read_state),
            (
                "at the end, an ISR member not fetching",
                t0,
                &yes,
                &no,
                &at,
                read_state,
            ),
        ];
        for (case, now, caught_up, isr_fetching, high_watermark, expected) in cases {
            let step = phase_step(
                waiting,
                now,
                &unread,
                caught_up,
                isr_fetching,
                high_watermark,
            );
            assert_eq!(step, expected, "{case}");
        }
    }

    /// The successor is the first candidate other than the leader that is
    /// in the ISR, live and caught up; the hand-over moves the epoch on
    /// and leaves the leader out of the ISR (in the ELR below
    /// `min_insync_replicas`).
    #[test]
    fn the_successor_is_the_first_caught_up_live_isr_candidate() {
        let state = state(&[1, 2, 3], &[1]);
        let all = nodes(&[1, 2, 3]);
        let caught_up = |node: NodeId| node != n(2);
        assert_eq!(
            caught_up_successor(&state, n(1), &all, &all, |_| true),
            Some(n(2))
        );
        assert_eq!(
            caught_up_successor(&state, n(1), &all, &all, caught_up),
            Some(n(3))
        );
        assert_eq!(
            caught_up_successor(&state, n(1), &all, &nodes(&[1, 2]), caught_up),
            None
        );
        let out_of_isr = LogState {
            in_sync_replicas: nodes(&[1, 2]),
            ..state.clone()
        };
        assert_eq!(
            caught_up_successor(&out_of_isr, n(1), &all, &all, caught_up),
            None
        );
        assert_eq!(
            caught_up_successor(&state, n(1), &nodes(&[1]), &all, |_| true),
            None
        );
        let update = hand_over_update(&state, n(1), n(3), 2);
        assert_eq!(update.leader, Some(n(3)));
        assert_eq!(update.leader_epoch, LeaderEpoch(4));
        assert_eq!(update.in_sync_replicas, nodes(&[2, 3]));
        let pair = LogState {
            in_sync_replicas: nodes(&[1, 2]),
            ..state
        };
        let update = hand_over_update(&pair, n(1), n(2), 2);
        assert_eq!(update.in_sync_replicas, nodes(&[2]));
        assert!(update.eligible_leader_replicas.contains(&n(1)));
    }

    fn answer(core: &NodeCore, then: Continuation, answer: Answer) -> Vec<Action> {
        let mut out = Vec::new();
        core.handle(Input::Answered { then, answer }, &mut out);
        out
    }

    fn only_call(out: Vec<Action>) -> (CoordinatorCall, Continuation) {
        match <[Action; 1]>::try_from(out) {
            Ok([Action::Call { call, then }]) => (call, then),
            other => panic!("expected one call, got {other:?}"),
        }
    }

    fn phase_of(core: &NodeCore) -> Option<HandOverPhase> {
        core.hand_over_of(LogId(1)).map(|hand_over| hand_over.phase)
    }

    /// Stops appends at the log end once the live nodes show a caught-up
    /// target replica, and asks the driver to wait for the high watermark;
    /// returns the wait.
    fn stop_appends(core: &NodeCore, replica: &Arc<Replica>, now: Instant) -> HandOverWait {
        let mut out = Vec::new();
        core.progress_hand_over(replica, now, &mut out);
        let (call, then) = only_call(out);
        assert_eq!(call, CoordinatorCall::LiveNodes);
        let out = answer(core, then, Answer::LiveNodes(Ok(nodes(&[1, 2, 3]))));
        let wait = match <[Action; 1]>::try_from(out) {
            Ok([Action::WaitHighWatermark { above, until, then }]) => {
                assert_eq!((above, until), (Offset(0), HAND_OVER_HW_WAIT));
                then
            }
            other => panic!("expected a wait for the high watermark, got {other:?}"),
        };
        assert_eq!(
            phase_of(core),
            Some(HandOverPhase::Waiting {
                end: Offset(1),
                deadline: now + HAND_OVER_WAIT,
            })
        );
        assert!(matches!(append_one(replica), Err(Error::NotLeader { .. })));
        wait
    }

    /// SPEC 3.10: a leader its move removes stops appends once a target
    /// replica has caught up lately (a live one), waits for the high watermark,
    /// reads the stored state and the live nodes, names the first live
    /// caught-up target replica by compare-and-set and follows the new
    /// state; the hand-over is over.
    #[test]
    fn a_reassignment_hand_over_stops_appends_then_names_a_live_target_replica() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (replica, clock) = leader_fetched_by_2_and_3(dir.path());
        let core = core();
        let stored = state(&[1, 2, 3], &[1]);
        core.begin_reassignment_hand_over(&replica, &stored);
        assert_eq!(phase_of(&core), Some(HandOverPhase::Ready));
        let wait = stop_appends(&core, &replica, clock.now());
        let mut out = Vec::new();
        core.handle(Input::HighWatermarkWaited(wait), &mut out);
        let (call, then) = only_call(out);
        assert_eq!(call, CoordinatorCall::LogState(LogId(1)));
        let (call, then) = only_call(answer(
            &core,
            then,
            Answer::LogState(Ok(Some(stored.clone()))),
        ));
        assert_eq!(call, CoordinatorCall::LiveNodes);
        // Node 2 is down: node 3 is named.
        let (call, then) = only_call(answer(&core, then, Answer::LiveNodes(Ok(nodes(&[1, 3])))));
        let update = hand_over_update(&stored, n(1), n(3), 2);
        assert_eq!(update.leader, Some(n(3)));
        assert_eq!(
            call,
            CoordinatorCall::CompareAndSet {
                log: LogId(1),
                epoch: LeaderEpoch(3),
                version: 7,
                update,
            }
        );
        // Stale: the next pass decides again, the hand-over waits on.
        let stale = answer(
            &core,
            then.clone(),
            Answer::Cas(Ok(CasOutcome::Stale(stored.clone()))),
        );
        assert_eq!(stale, vec![]);
        assert!(matches!(
            phase_of(&core),
            Some(HandOverPhase::Waiting { .. })
        ));
        let handed = LogState {
            leader: Some(n(3)),
            leader_epoch: LeaderEpoch(4),
            version: 8,
            ..stored
        };
        let out = answer(
            &core,
            then,
            Answer::Cas(Ok(CasOutcome::Applied(handed.clone()))),
        );
        assert_eq!(out, vec![Action::reconcile(handed)]);
        assert_eq!(phase_of(&core), None);
    }

    /// Under continuous appends a successor's last fetch trails the log
    /// end by what was appended since (CI flake of the stuck
    /// application's hand-over under `acks=all` load: the hand-over wanted
    /// a replica at the log end before the live nodes' call and again
    /// after it, missed the second often under CPU contention, and each
    /// miss cost a [`HAND_OVER_RETRY`]). A target replica that caught up
    /// lately is enough to stop appends, though records were appended
    /// before the pass and during its call; none is named until the high
    /// watermark reaches the stopped end and one has fetched it all.
    #[test]
    fn appends_stop_for_a_successor_caught_up_lately_while_appends_go_on() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (replica, clock) = leader_fetched_by_2_and_3(dir.path());
        let core = core();
        core.begin_reassignment_hand_over(&replica, &state(&[1, 2, 3], &[1]));
        // Appended after nodes 2 and 3 fetched everything.
        clock.advance(FETCH_WAIT_MAX);
        append_one(&replica).expect("appended");
        assert!(!replica.has_caught_up(n(2)) && !replica.has_caught_up(n(3)));
        let now = clock.now();
        let mut out = Vec::new();
        core.progress_hand_over(&replica, now, &mut out);
        let (call, then) = only_call(out);
        assert_eq!(call, CoordinatorCall::LiveNodes);
        // Appended while the coordinator answered.
        append_one(&replica).expect("appended");
        let out = answer(&core, then, Answer::LiveNodes(Ok(nodes(&[1, 2, 3]))));
        let wait = match <[Action; 1]>::try_from(out) {
            Ok([Action::WaitHighWatermark { above, until, then }]) => {
                assert_eq!((above, until), (Offset(2), HAND_OVER_HW_WAIT));
                then
            }
            other => panic!("expected a wait for the high watermark, got {other:?}"),
        };
        assert_eq!(
            phase_of(&core),
            Some(HandOverPhase::Waiting {
                end: Offset(3),
                deadline: now + HAND_OVER_WAIT,
            })
        );
        assert!(matches!(append_one(&replica), Err(Error::NotLeader { .. })));
        // Node 2 holds the stopped end, node 3 not yet: the high watermark
        // is below it, nobody is named.
        fetch_at(&replica, &clock, n(2), Offset(3));
        let mut out = Vec::new();
        core.handle(Input::HighWatermarkWaited(wait), &mut out);
        assert_eq!(out, vec![]);
        fetch_at(&replica, &clock, n(3), Offset(3));
        core.progress_hand_over(&replica, clock.now(), &mut out);
        let (call, _) = only_call(out);
        assert_eq!(call, CoordinatorCall::LogState(LogId(1)));
    }

    /// A successor's catch-up ages: past twice `fetch_wait_max` since the
    /// last, the hand-over does not stop appends for it.
    #[test]
    fn appends_do_not_stop_for_a_successor_caught_up_too_long_ago() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (replica, clock) = leader_fetched_by_2_and_3(dir.path());
        let core = core();
        core.begin_reassignment_hand_over(&replica, &state(&[1, 2, 3], &[1]));
        append_one(&replica).expect("appended");
        clock.advance(FETCH_WAIT_MAX * 2 + Duration::from_millis(1));
        let mut out = Vec::new();
        core.progress_hand_over(&replica, clock.now(), &mut out);
        assert_eq!(out, vec![]);
        assert_eq!(phase_of(&core), Some(HandOverPhase::Ready));
    }

    /// A hand-over whose high watermark does not reach the stopped end in
    /// time gives the appends back and is ready again after the retry
    /// pause; a cancelled move ends it, appends given back too.
    #[test]
    fn an_overdue_hand_over_gives_appends_back_and_tries_again_later() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (replica, clock) = leader_fetched_by_2_and_3(dir.path());
        let core = core();
        let stored = state(&[1, 2, 3], &[1]);
        core.begin_reassignment_hand_over(&replica, &stored);
        let t0 = clock.now();
        let _wait = stop_appends(&core, &replica, t0);
        let mut out = Vec::new();
        core.progress_hand_over(&replica, t0 + HAND_OVER_WAIT, &mut out);
        assert_eq!(out, vec![]);
        let retry_at = t0 + HAND_OVER_WAIT + HAND_OVER_RETRY;
        assert_eq!(phase_of(&core), Some(HandOverPhase::Failed { retry_at }));
        append_one(&replica).expect("appends run again");
        core.progress_hand_over(&replica, retry_at, &mut out);
        assert_eq!(out, vec![]);
        assert_eq!(phase_of(&core), Some(HandOverPhase::Ready));
        // The appended record is not fetched yet, and the followers last
        // caught up long ago: nobody has caught up lately.
        clock.advance(Duration::from_secs(10));
        core.progress_hand_over(&replica, clock.now(), &mut out);
        assert_eq!(out, vec![]);
        // A cancelled move ends the hand-over.
        core.begin_reassignment_hand_over(&replica, &state(&[1, 2, 3], &[]));
        assert_eq!(phase_of(&core), None);
    }

    /// A controlled shutdown owns the appends' stop: a winding-down node
    /// begins no hand-over and moves none on.
    #[test]
    fn a_winding_down_node_begins_and_moves_on_no_hand_over() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (replica, clock) = leader_fetched_by_2_and_3(dir.path());
        let winding_down = Arc::new(AtomicBool::new(false));
        let core = core_winding(Arc::clone(&winding_down));
        let stored = state(&[1, 2, 3], &[1]);
        core.begin_reassignment_hand_over(&replica, &stored);
        core.wind_down();
        assert!(winding_down.load(Ordering::SeqCst));
        let mut out = Vec::new();
        core.progress_hand_over(&replica, clock.now(), &mut out);
        assert_eq!(out, vec![]);
        assert_eq!(phase_of(&core), Some(HandOverPhase::Ready));
        core.begin_reassignment_hand_over(&replica, &state(&[1, 2, 3], &[]));
        assert_eq!(phase_of(&core), Some(HandOverPhase::Ready));
    }
}
