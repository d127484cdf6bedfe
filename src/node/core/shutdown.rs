//! A controlled shutdown in the node core (SPEC 3.5), one machine for both
//! drivers. First every log this node leads is handed over
//! ([`NodeCore::begin_shutdown_hand_over`]): its stored state read, the
//! live nodes read, a caught-up successor named by a compare-and-set,
//! each call a [`Continuation::ShutdownHandOver`] of one attempt
//! ([`ShutdownPass`]), at most [`HAND_OVER_ATTEMPTS_MAX`] of them. Then,
//! once its fetchers stopped, the node leaves the in-sync replica set of
//! every log it follows ([`NodeCore::leave_in_sync_replica`]), each call a
//! [`Continuation::LeaveIsr`]. The decisions are pure ([`still_leads`],
//! [`another_in_sync_replica_live`], [`leave_isr`], and the shared
//! [`caught_up_successor`] and [`hand_over_update`]).
//!
//! What the drivers do differently is theirs, asked for with
//! [`Action::ShutdownWait`]: the threaded driver runs each log on its
//! bounded pool of shutdown workers, starts no call of these past the
//! shutdown's deadline (it checks it, the core reads no clock), blocks for
//! the high watermark until then and polls for a caught-up successor
//! every millisecond; the simulator's stepped node makes the calls of each
//! log one after the other, never waits, and begins a waiting attempt
//! again on its next step. The order of the shutdown's steps is the
//! core's too ([`controlled_shutdown_steps`], the session's end
//! [`NodeCore::end_session`]); what each step does is the driver's. What
//! this does not own: the stop of appends, and the gate that keeps a late
//! answer from changing a node that closed its logs (`node.rs`). Whether a
//! stop may then write the clean-shutdown marker is the core's decision
//! too ([`clean_marker`]); writing it is the driver's.

use super::{
    caught_up_successor, hand_over_update, Action, Continuation, CoordinatorCall, NodeCore,
    ReplicaRef,
};
use crate::coordinator::{CasOutcome, LogState, LogUpdate};
use crate::error::Result;
use crate::replication::Replica;
use crate::sync::Arc;
use crate::types::{Incarnation, LeaderEpoch, LogId, NodeId, Offset};

/// Controlled shutdown: compare-and-set attempts per log (a lost race
/// reads the state again) before leaving it to the controller.
pub(crate) const HAND_OVER_ATTEMPTS_MAX: u32 = 5;

/// Which call of a log's [`Continuation::LeaveIsr`] is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaveIsrStage {
    /// The log's stored state is being read.
    ReadState,
    /// The ISR without this node is being written.
    Write,
}

/// One attempt of a controlled shutdown to hand over a log this node leads:
/// the leader's replica, the epoch in which its appends stopped, the log
/// end at which they stopped (the high watermark must pass it before
/// anyone can take over), and the attempt, counted from 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ShutdownPass {
    /// The leader's replica.
    replica: ReplicaRef,
    /// The leader epoch in which appends stopped.
    epoch: LeaderEpoch,
    /// The log end at which appends stopped.
    end: Offset,
    /// The attempt, below [`HAND_OVER_ATTEMPTS_MAX`].
    attempt: u32,
}

impl ShutdownPass {
    /// The log handed over.
    pub(crate) fn log(&self) -> LogId {
        self.replica.get().log_id()
    }

    /// The leader's replica.
    pub(crate) fn replica(&self) -> &Replica {
        self.replica.get()
    }

    /// The attempt, counted from 0 (read by the stepped driver only).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// Which call of a [`Continuation::ShutdownHandOver`] is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ShutdownStage {
    /// The log's stored state is being read.
    ReadState,
    /// The live nodes (with their incarnations) are being read; `state` is
    /// the stored state the first read gave.
    LiveNodes {
        /// The stored state (boxed: a continuation stays small).
        state: Box<LogState>,
    },
    /// The live nodes are read again after the wait for the high
    /// watermark: a follower seen live before it may have died since.
    LiveAfterWait {
        /// The stored state.
        state: Box<LogState>,
    },
    /// The compare-and-set naming `successor` is being written.
    Write {
        /// The replica named leader.
        successor: NodeId,
    },
}

/// What a controlled shutdown's hand-over waits for
/// ([`Action::ShutdownWait`]); the driver hands it back with
/// [`Input::ShutdownWaited`](super::Input::ShutdownWaited) when it is over, or begins the attempt again
/// later.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ShutdownWait {
    /// The high watermark to pass `above` (the stopped end's last record),
    /// on the first attempt: usually one fetch round, as followers park
    /// their fetches on the leader and are woken by every append. The
    /// live nodes are read again after it.
    HighWatermark {
        /// The offset the high watermark is to pass.
        above: Offset,
        /// The stored state.
        state: Box<LogState>,
    },
    /// A live in-sync follower to catch up to the stopped end, among
    /// `live`: looked for again after the wait, unless the wait expired.
    Successor {
        /// The stored state.
        state: Box<LogState>,
        /// The live nodes.
        live: Vec<NodeId>,
    },
    /// The next attempt, after a compare-and-set lost a race: the pass
    /// already counts it.
    NextAttempt,
}

/// One step of a controlled shutdown (SPEC 3.5), in the order
/// [`controlled_shutdown_steps`] gives. What each step does is the
/// driver's (threads, a pool of workers and a deadline for the threaded
/// runtime, one step after the other for the simulator's stepped node);
/// the order is the core's, so that both drivers follow the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ControlledShutdownStep {
    /// The node winds down ([`NodeCore::wind_down`]): its control makes
    /// no coordinator call of its own from here on, and no hand-over gives
    /// stopped appends back.
    WindDown,
    /// Every log this node leads stops taking appends, at an end the
    /// high watermark must pass before anyone takes over.
    StopAppends,
    /// Each of those logs is handed over to a caught-up in-sync replica
    /// ([`NodeCore::begin_shutdown_hand_over`]) until the shutdown's
    /// deadline.
    HandOver,
    /// The node's stop is raised: a stopping node never registers again,
    /// so the session's end below revives nothing.
    RaiseStop,
    /// The node's session ends ([`NodeCore::end_session`]): live no more,
    /// it frees the controller seat and cannot be added back to an ISR it
    /// leaves. A driver may carry this call on alongside the steps that
    /// follow, but waits for it (for a bounded time) before
    /// [`CloseLogs`](Self::CloseLogs).
    EndSession,
    /// The node's threads (or stepped work) stop: the control, the
    /// fetchers, the deadlines, the roll flushes, the completions.
    StopThreads,
    /// Once its fetchers stopped, the node leaves the in-sync replica set
    /// of every log it follows ([`NodeCore::leave_in_sync_replica`]).
    LeaveIsrs,
    /// The logs are flushed and closed, and the clean-shutdown marker is
    /// written if every one closed.
    CloseLogs,
}

/// The steps of a controlled shutdown that hands its logs over (its
/// timeout is not zero).
const HANDING_OVER_STEPS: [ControlledShutdownStep; 8] = [
    ControlledShutdownStep::WindDown,
    ControlledShutdownStep::StopAppends,
    ControlledShutdownStep::HandOver,
    ControlledShutdownStep::RaiseStop,
    ControlledShutdownStep::EndSession,
    ControlledShutdownStep::StopThreads,
    ControlledShutdownStep::LeaveIsrs,
    ControlledShutdownStep::CloseLogs,
];

/// The steps of a shutdown with a zero timeout: it only stops, ends the
/// session and closes; nothing is handed over and no ISR is left.
const STOPPING_STEPS: [ControlledShutdownStep; 3] = [
    ControlledShutdownStep::StopThreads,
    ControlledShutdownStep::EndSession,
    ControlledShutdownStep::CloseLogs,
];

/// The steps of a controlled shutdown, in order: with `hands_over` (a
/// timeout above zero) the node winds down, stops its leaders' appends,
/// hands those logs over, raises its stop, ends its session, stops its
/// threads, leaves the ISRs it is in and closes its logs; without, it
/// stops its threads, ends its session and closes its logs.
pub(crate) fn controlled_shutdown_steps(hands_over: bool) -> &'static [ControlledShutdownStep] {
    let steps: &'static [ControlledShutdownStep] = if hands_over {
        &HANDING_OVER_STEPS
    } else {
        &STOPPING_STEPS
    };
    debug_assert!(
        shutdown_order_holds(steps),
        "a controlled shutdown's steps out of order: {steps:?}"
    );
    steps
}

/// Whether a stop may write the clean-shutdown marker (SPEC 3.5), and if
/// not, why ([`clean_marker`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CleanMarker {
    /// Nothing stands in the way: the stop writes the marker (once every
    /// log closed).
    Write,
    /// Replicas of this unclean start never opened, so they were never
    /// recovered: a marker would have the next start open them as after a
    /// clean stop, which refuses the damage a power loss left instead of
    /// cutting it (review of c6bd2e8, finding 3).
    Unopened(Vec<LogId>),
    /// This node's unclean-shutdown report is still not recorded in these
    /// logs. The pending reports live only in memory, so a marker would
    /// make the next start clean and let this replica take part in those
    /// logs as if it had lost nothing; without it the next start reports
    /// again.
    Unreported(Vec<LogId>),
}

/// The clean-marker decision of a stop: `reported_unclean` when this start
/// followed an unclean stop (or lost data) and reported it, `unopened` the
/// logs whose replica never opened, `unreported` those whose report is
/// still pending, each in log order.
pub(crate) fn clean_marker(
    reported_unclean: bool,
    unopened: Vec<LogId>,
    unreported: Vec<LogId>,
) -> CleanMarker {
    if reported_unclean && !unopened.is_empty() {
        CleanMarker::Unopened(unopened)
    } else if !unreported.is_empty() {
        CleanMarker::Unreported(unreported)
    } else {
        CleanMarker::Write
    }
}

impl NodeCore {
    /// [`clean_marker`] on this node's unopened replicas and pending
    /// unclean-shutdown reports.
    pub(crate) fn clean_marker(&self, reported_unclean: bool) -> CleanMarker {
        let unreported = self
            .pending_unclean_reports()
            .into_iter()
            .map(|(log, _)| log)
            .collect();
        clean_marker(reported_unclean, self.unopened_logs(), unreported)
    }
}

/// Whether `steps` keep a controlled shutdown's order: closing the logs
/// comes last; the session ends only once the stop is raised (by
/// [`RaiseStop`](ControlledShutdownStep::RaiseStop) or by stopping the
/// threads), so a failed heartbeat cannot register the node again; the
/// appends stop after the wind-down (no hand-over gives them back) and
/// before the hand-over (which waits for the high watermark to pass the
/// stopped end); the ISRs are left only once the threads (the fetchers)
/// stopped and the session ended; each step comes at most once.
fn shutdown_order_holds(steps: &[ControlledShutdownStep]) -> bool {
    use ControlledShutdownStep as Step;
    let at = |step: Step| steps.iter().position(|s| *s == step);
    let before = |first: Step, then: Step| match (at(first), at(then)) {
        (Some(first), Some(then)) => first < then,
        (None, _) | (_, None) => true,
    };
    let stop_raised = match (at(Step::RaiseStop), at(Step::StopThreads)) {
        (Some(raise), Some(stop)) => raise.min(stop),
        (Some(raise), None) => raise,
        (None, Some(stop)) => stop,
        (None, None) => usize::MAX,
    };
    let once = steps
        .iter()
        .enumerate()
        .all(|(i, step)| !steps[i + 1..].contains(step));
    once && steps.last() == Some(&Step::CloseLogs)
        && at(Step::EndSession).is_some_and(|end| stop_raised < end)
        && before(Step::WindDown, Step::StopAppends)
        && before(Step::StopAppends, Step::HandOver)
        && before(Step::HandOver, Step::RaiseStop)
        && before(Step::StopThreads, Step::LeaveIsrs)
        && before(Step::EndSession, Step::LeaveIsrs)
}

/// Whether this node still leads `state`'s log in `epoch`, in which its
/// appends stopped, or in a later epoch: then it has a leadership to hand
/// over. A later epoch in which it still leads is the same leadership: a
/// reassignment's completion bumps the epoch of a leader it keeps
/// (simulator seed 20009429: the stop gave the log up as moved, and the
/// node stopped leading it).
pub(crate) fn still_leads(state: &LogState, me: NodeId, epoch: LeaderEpoch) -> bool {
    state.leader == Some(me) && state.leader_epoch >= epoch
}

/// Whether another in-sync replica of `state` than `me` is `live`: else
/// there is nobody to hand over to, as when the last live replica of the
/// log stops (a whole cluster stopping), which is not a failure.
pub(crate) fn another_in_sync_replica_live(state: &LogState, me: NodeId, live: &[NodeId]) -> bool {
    state
        .in_sync_replicas
        .iter()
        .any(|&node| node != me && live.contains(&node))
}

/// The update with which this node, stopping, leaves `state`'s in-sync
/// replica set (its ELR follows from the new ISR, as for any ISR change);
/// `None` when it has nothing to leave: it leads the log (a leader that
/// could not hand over stays, the controller elects once its session
/// ends), or it is not in the ISR.
pub(crate) fn leave_isr(
    state: &LogState,
    me: NodeId,
    min_insync_replicas: usize,
) -> Option<LogUpdate> {
    if state.leader == Some(me) || !state.in_sync_replicas.contains(&me) {
        return None;
    }
    let isr: Vec<NodeId> = state
        .in_sync_replicas
        .iter()
        .copied()
        .filter(|&node| node != me)
        .collect();
    let update = LogUpdate::in_sync_replicas(state, isr, min_insync_replicas);
    debug_assert!(
        !update.in_sync_replicas.contains(&me) && update.leader == state.leader,
        "leaving the ISR keeps the leader and drops only this node: {update:?}"
    );
    Some(update)
}

impl NodeCore {
    /// Controlled shutdown: one attempt (`attempt`, from 0) to hand over
    /// the log of `replica`, which this node leads in `epoch` with its
    /// appends stopped at `end` (Kafka's `ControlledShutdownLeaderSelector`):
    /// reads the stored state; then, if this node still leads it, the live
    /// nodes, whose incarnations it learns; on the first attempt, waits for
    /// the high watermark to pass the stopped end and reads the live nodes
    /// again; then names the first live in-sync follower that fetched up
    /// to the stopped end ([`caught_up_successor`]) leader in a new epoch,
    /// without this node in the ISR ([`hand_over_update`]), by a
    /// compare-and-set on the stored epoch and version, so that it loses
    /// cleanly to a concurrent change. A lost race is another attempt;
    /// once one applied, the driver follows the new state
    /// ([`Action::ShutdownHandedOver`]). A log gone, moved by someone else,
    /// with no other live in-sync replica, whose coordinator call fails,
    /// or with no attempt left is left to the controller, as after a
    /// crash. No stop check: the node is stopping by now (the driver's wait
    /// for a successor ends with the stop).
    pub(crate) fn begin_shutdown_hand_over(
        &self,
        replica: &Arc<Replica>,
        epoch: LeaderEpoch,
        end: Offset,
        attempt: u32,
        out: &mut Vec<Action>,
    ) {
        debug_assert!(attempt < HAND_OVER_ATTEMPTS_MAX, "attempt {attempt}");
        let pass = ShutdownPass {
            replica: ReplicaRef(Arc::clone(replica)),
            epoch,
            end,
            attempt,
        };
        Self::read_for_shutdown_hand_over(pass, out);
    }

    /// The first call of an attempt: the log's stored state.
    fn read_for_shutdown_hand_over(pass: ShutdownPass, out: &mut Vec<Action>) {
        let log = pass.log();
        Self::call(
            out,
            CoordinatorCall::LogState(log),
            Continuation::ShutdownHandOver {
                pass,
                stage: ShutdownStage::ReadState,
            },
        );
    }

    /// An answer for a [`Continuation::ShutdownHandOver`] at `stage`.
    pub(super) fn shutdown_hand_over_answered(
        &self,
        pass: ShutdownPass,
        stage: ShutdownStage,
        answer: super::Answer,
        out: &mut Vec<Action>,
    ) {
        use super::Answer;
        let log = pass.log();
        let me = self.node;
        match (stage, answer) {
            (ShutdownStage::ReadState, Answer::LogState(read)) => {
                let state = match read {
                    Ok(Some(state)) => state,
                    Ok(None) => return,
                    Err(error) => {
                        tracing::warn!(%log, node = %me, %error, "controlled shutdown: cannot read the log's state; leaving it to the controller");
                        return;
                    }
                };
                if !still_leads(&state, me, pass.epoch) {
                    return;
                }
                Self::call(
                    out,
                    CoordinatorCall::LiveNodeIncarnations,
                    Continuation::ShutdownHandOver {
                        pass,
                        stage: ShutdownStage::LiveNodes {
                            state: Box::new(state),
                        },
                    },
                );
            }
            (ShutdownStage::LiveNodes { state }, Answer::Incarnations(read)) => {
                let Some(live) = self.live_for_shutdown_hand_over(log, read) else {
                    return;
                };
                // Nobody to hand over to: no wait. The wait below reads the
                // live nodes again but not the ISR, so it could not find
                // anyone.
                if !another_in_sync_replica_live(&state, me, &live) {
                    tracing::info!(%log, node = %me, isr = ?state.in_sync_replicas,
                        "controlled shutdown: no other in-sync replica is live; leaving the log to the controller");
                    return;
                }
                // The wait may take seconds on the threaded driver: a
                // follower seen live before it may have died since, so the
                // live nodes are read again after it.
                if pass.attempt == 0 && pass.end > Offset::ZERO {
                    let above = Offset(pass.end.0 - 1);
                    out.push(Action::ShutdownWait {
                        pass,
                        wait: ShutdownWait::HighWatermark { above, state },
                    });
                    return;
                }
                self.look_for_successor(pass, state, live, out);
            }
            (ShutdownStage::LiveAfterWait { state }, Answer::Incarnations(read)) => {
                let Some(live) = self.live_for_shutdown_hand_over(log, read) else {
                    return;
                };
                self.look_for_successor(pass, state, live, out);
            }
            (ShutdownStage::Write { successor }, Answer::Cas(written)) => match written {
                Ok(CasOutcome::Applied(state)) => out.push(Action::ShutdownHandedOver {
                    log,
                    successor,
                    state,
                }),
                Ok(CasOutcome::Stale(_)) => {
                    let next = pass.attempt + 1;
                    if next < HAND_OVER_ATTEMPTS_MAX {
                        out.push(Action::ShutdownWait {
                            pass: ShutdownPass {
                                attempt: next,
                                ..pass
                            },
                            wait: ShutdownWait::NextAttempt,
                        });
                    }
                }
                Err(error) => {
                    tracing::warn!(%log, node = %me, %error, "controlled shutdown: hand-over failed; leaving the log to the controller");
                }
            },
            (stage, answer) => {
                // A driver bug, as in `NodeCore::handle`.
                panic!("{stage:?} of a shutdown's hand-over answered with {answer:?}: the driver paired a call with another call's continuation")
            }
        }
    }

    /// The live nodes a hand-over's read gave, whose incarnations this node
    /// learns: a winding-down node's control reads the coordinator no more
    /// (it ignores the announcements of registrations and the unverified
    /// fetches' requests), so without this a follower that registered
    /// after the view was last read (it restarted, or the shutdown began
    /// right after this node's start) has every fetch refused as
    /// unverified, never catches up, and the hand-over waits out its
    /// deadline for nothing (simulator seed 60004986: the shutdown began
    /// at 7 ms, before the first read). `None` (logged) on a failed read.
    fn live_for_shutdown_hand_over(
        &self,
        log: LogId,
        read: Result<Vec<(NodeId, Incarnation)>>,
    ) -> Option<Vec<NodeId>> {
        match read {
            Ok(live) => {
                self.peer_incarnations.learn(&live);
                Some(live.into_iter().map(|(node, _)| node).collect())
            }
            Err(error) => {
                tracing::warn!(%log, node = %self.node, %error, "controlled shutdown: cannot read live nodes; leaving the log to the controller");
                None
            }
        }
    }

    /// Names the first live in-sync follower that caught up with the
    /// stopped end, or waits for one ([`ShutdownWait::Successor`]).
    fn look_for_successor(
        &self,
        pass: ShutdownPass,
        state: Box<LogState>,
        live: Vec<NodeId>,
        out: &mut Vec<Action>,
    ) {
        let me = self.node;
        let replica = pass.replica();
        let Some(successor) = caught_up_successor(&state, me, &state.replicas, &live, |node| {
            replica.has_caught_up(node)
        }) else {
            out.push(Action::ShutdownWait {
                pass,
                wait: ShutdownWait::Successor { state, live },
            });
            return;
        };
        let update = hand_over_update(&state, me, successor, self.min_insync_replicas);
        Self::call(
            out,
            CoordinatorCall::CompareAndSet {
                log: pass.log(),
                epoch: state.leader_epoch,
                version: state.version,
                update,
            },
            Continuation::ShutdownHandOver {
                pass,
                stage: ShutdownStage::Write { successor },
            },
        );
    }

    /// A wait of [`Action::ShutdownWait`] is over: `expired` says that the
    /// wait for a successor ran out (the deadline passed, or the node
    /// stopped).
    pub(super) fn shutdown_waited(
        &self,
        pass: ShutdownPass,
        wait: ShutdownWait,
        expired: bool,
        out: &mut Vec<Action>,
    ) {
        match wait {
            ShutdownWait::HighWatermark { state, .. } => Self::call(
                out,
                CoordinatorCall::LiveNodeIncarnations,
                Continuation::ShutdownHandOver {
                    pass,
                    stage: ShutdownStage::LiveAfterWait { state },
                },
            ),
            ShutdownWait::Successor { state, .. } if expired => {
                tracing::warn!(log = %pass.log(), node = %self.node, isr = ?state.in_sync_replicas,
                    "controlled shutdown: no live in-sync follower caught up in time; leaving the log to the controller");
            }
            ShutdownWait::Successor { state, live } => {
                self.look_for_successor(pass, state, live, out)
            }
            ShutdownWait::NextAttempt => Self::read_for_shutdown_hand_over(pass, out),
        }
    }

    /// A shutdown's [`ControlledShutdownStep::EndSession`]: this node's
    /// session ends, as one [`CoordinatorCall::UnregisterNode`].
    /// `report_failure`: a failure is logged (the session then expires,
    /// which delays the election of every log not handed over by a whole
    /// session timeout); a shutdown without hand-overs ignores it.
    pub(crate) fn end_session(&self, report_failure: bool, out: &mut Vec<Action>) {
        Self::call(
            out,
            CoordinatorCall::UnregisterNode,
            Continuation::EndSession { report_failure },
        );
    }

    /// The answer of [`end_session`](Self::end_session)'s call: nothing
    /// follows it, a failure is only logged.
    pub(super) fn session_ended(&self, report_failure: bool, ended: Result<()>) {
        if let (true, Err(error)) = (report_failure, ended) {
            tracing::warn!(node = %self.node, %error, "controlled shutdown: cannot end the session; it expires");
        }
    }

    /// Controlled shutdown, once this node's fetchers stopped: it leaves
    /// `log`'s in-sync replica set, so the log's leader's `acks=all`
    /// appends and high watermark stop waiting for it now rather than when
    /// the controller sees its session end (or, without a controller,
    /// after `replica_lag_time_max`), as Kafka's controller does for a
    /// broker in controlled shutdown. The stored state is read, then
    /// [`leave_isr`] written as a compare-and-set on its epoch and
    /// version; a lost race reads again, up to
    /// [`HAND_OVER_ATTEMPTS_MAX`] attempts; a failure is only logged. A
    /// log whose unclean-shutdown report is still pending is not left:
    /// leaving the ISR for the ELR would keep this replica eligible with
    /// records it lost (the next start reports again, no clean-shutdown
    /// marker is written). No stop check: the node is stopping by now.
    pub(crate) fn leave_in_sync_replica(&self, log: LogId, out: &mut Vec<Action>) {
        if self.is_unreported(log) {
            return;
        }
        Self::call(
            out,
            CoordinatorCall::LogState(log),
            Continuation::LeaveIsr {
                log,
                attempt: 0,
                stage: LeaveIsrStage::ReadState,
            },
        );
    }

    /// An answer for a [`Continuation::LeaveIsr`] of `log`'s `attempt`
    /// at `stage`: the state read, then the write.
    pub(super) fn leave_isr_read(
        &self,
        log: LogId,
        attempt: u32,
        read: Result<Option<LogState>>,
        out: &mut Vec<Action>,
    ) {
        let me = self.node;
        let state = match read {
            Ok(Some(state)) => state,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%log, node = %me, %error, "controlled shutdown: cannot read the log's state to leave its ISR");
                return;
            }
        };
        let Some(update) = leave_isr(&state, me, self.min_insync_replicas) else {
            return;
        };
        Self::call(
            out,
            CoordinatorCall::CompareAndSet {
                log,
                epoch: state.leader_epoch,
                version: state.version,
                update,
            },
            Continuation::LeaveIsr {
                log,
                attempt,
                stage: LeaveIsrStage::Write,
            },
        );
    }

    /// The compare-and-set of `log`'s `attempt` to leave its ISR
    /// answered: a lost race reads the state again while attempts are
    /// left.
    pub(super) fn leave_isr_written(
        &self,
        log: LogId,
        attempt: u32,
        written: Result<CasOutcome>,
        out: &mut Vec<Action>,
    ) {
        debug_assert!(
            attempt < HAND_OVER_ATTEMPTS_MAX,
            "attempt {attempt} of {log}"
        );
        match written {
            Ok(CasOutcome::Applied(_)) => {}
            Ok(CasOutcome::Stale(_)) => {
                let next = attempt + 1;
                if next < HAND_OVER_ATTEMPTS_MAX {
                    Self::call(
                        out,
                        CoordinatorCall::LogState(log),
                        Continuation::LeaveIsr {
                            log,
                            attempt: next,
                            stage: LeaveIsrStage::ReadState,
                        },
                    );
                }
            }
            Err(error) => {
                tracing::warn!(%log, node = %self.node, %error, "controlled shutdown: cannot leave the ISR");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::super::{Answer, Input};
    use super::*;
    use crate::error::Error;
    use crate::node::core::tests::{append_one, leader_fetched_by_2_and_3};
    use crate::sync::AtomicBool;

    fn n(id: u32) -> NodeId {
        NodeId(id)
    }

    /// A stop writes the clean-shutdown marker only when no replica of an
    /// unclean start is left unopened and every unclean report is
    /// recorded; unopened replicas of a clean start do not stop it (they
    /// open as after a clean stop next time, as they would have now).
    #[test]
    fn the_clean_marker_waits_for_unopened_replicas_and_unrecorded_reports() {
        let logs = |ids: &[u32]| ids.iter().copied().map(LogId).collect::<Vec<_>>();
        let table = [
            (false, logs(&[]), logs(&[]), CleanMarker::Write),
            (true, logs(&[]), logs(&[]), CleanMarker::Write),
            (false, logs(&[1]), logs(&[]), CleanMarker::Write),
            (
                true,
                logs(&[1]),
                logs(&[]),
                CleanMarker::Unopened(logs(&[1])),
            ),
            (
                true,
                logs(&[1]),
                logs(&[2]),
                CleanMarker::Unopened(logs(&[1])),
            ),
            (
                false,
                logs(&[1]),
                logs(&[2]),
                CleanMarker::Unreported(logs(&[2])),
            ),
            (
                true,
                logs(&[]),
                logs(&[2, 3]),
                CleanMarker::Unreported(logs(&[2, 3])),
            ),
        ];
        for (reported_unclean, unopened, unreported, expected) in table {
            let case = format!("{reported_unclean} {unopened:?} {unreported:?}");
            assert_eq!(
                clean_marker(reported_unclean, unopened, unreported),
                expected,
                "{case}"
            );
        }
    }

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    /// Node 2's core, stopping, for two in-sync replicas at least.
    fn core() -> NodeCore {
        core_of(n(2))
    }

    /// Node `me`'s core, stopping, for two in-sync replicas at least.
    fn core_of(me: NodeId) -> NodeCore {
        NodeCore::new(
            me,
            Duration::from_secs(6),
            2,
            Duration::from_millis(500),
            Arc::new(AtomicBool::new(true)),
            Arc::new(AtomicBool::new(true)),
        )
    }

    /// Log 1 led by `leader` in epoch 3 at version 7, replicas 1, 2 and 3
    /// with ISR `isr`.
    fn state(leader: u32, isr: &[u32]) -> LogState {
        LogState {
            leader: Some(n(leader)),
            leader_epoch: LeaderEpoch(3),
            version: 7,
            in_sync_replicas: nodes(isr),
            ..LogState::initial(LogId(1), nodes(&[1, 2, 3])).expect("a valid initial state")
        }
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

    fn leave(attempt: u32, stage: LeaveIsrStage) -> Continuation {
        Continuation::LeaveIsr {
            log: LogId(1),
            attempt,
            stage,
        }
    }

    /// The order both drivers follow: a shutdown that hands over winds
    /// down, stops its leaders' appends and hands over before it raises
    /// its stop; its session ends only once the stop is raised (a failed
    /// heartbeat must not register it again) and before it leaves the
    /// ISRs, which waits for its threads to stop; closing comes last. A
    /// zero timeout only stops, ends the session and closes. Orders that
    /// break one of these are refused by the check the steps are
    /// asserted with.
    #[test]
    fn a_controlled_shutdown_ends_its_session_once_stopped_and_leaves_the_isrs_after_it() {
        use ControlledShutdownStep as Step;
        assert_eq!(
            controlled_shutdown_steps(true),
            [
                Step::WindDown,
                Step::StopAppends,
                Step::HandOver,
                Step::RaiseStop,
                Step::EndSession,
                Step::StopThreads,
                Step::LeaveIsrs,
                Step::CloseLogs,
            ]
        );
        assert_eq!(
            controlled_shutdown_steps(false),
            [Step::StopThreads, Step::EndSession, Step::CloseLogs]
        );
        let broken: [&[Step]; 7] = [
            &[Step::EndSession, Step::StopThreads, Step::CloseLogs],
            &[Step::StopThreads, Step::CloseLogs],
            &[
                Step::StopThreads,
                Step::EndSession,
                Step::CloseLogs,
                Step::LeaveIsrs,
            ],
            &[
                Step::RaiseStop,
                Step::EndSession,
                Step::LeaveIsrs,
                Step::StopThreads,
                Step::CloseLogs,
            ],
            &[
                Step::StopThreads,
                Step::LeaveIsrs,
                Step::EndSession,
                Step::CloseLogs,
            ],
            &[
                Step::StopAppends,
                Step::WindDown,
                Step::HandOver,
                Step::StopThreads,
                Step::EndSession,
                Step::CloseLogs,
            ],
            &[
                Step::StopThreads,
                Step::EndSession,
                Step::EndSession,
                Step::CloseLogs,
            ],
        ];
        for steps in broken {
            assert!(!shutdown_order_holds(steps), "{steps:?}");
        }
    }

    /// The session's end is one unregister call whose answer, done or
    /// failed, asks for nothing more (a failure is only logged).
    #[test]
    fn ending_the_session_is_one_unregister_call_and_nothing_follows_it() {
        let core = core();
        for report_failure in [true, false] {
            let mut out = Vec::new();
            core.end_session(report_failure, &mut out);
            let (call, then) = only_call(out);
            assert_eq!(call, CoordinatorCall::UnregisterNode);
            assert_eq!(then, Continuation::EndSession { report_failure });
            let failed = || {
                Err(Error::Coordinator {
                    reason: "down".into(),
                })
            };
            for ended in [Ok(()), failed()] {
                assert!(answer(&core, then.clone(), Answer::Done(ended)).is_empty());
            }
        }
    }

    /// A stopping follower leaves the ISR it is in, keeping the leader
    /// and epoch, with the ELR an ISR change gives (below the minimum ISR
    /// it stays eligible); a leader, or a node not in the ISR, has
    /// nothing to leave.
    #[test]
    fn a_stopping_follower_leaves_the_isr_and_a_leader_stays() {
        let left = |isr: &[u32], elr: &[u32]| Some((nodes(isr), nodes(elr)));
        let cases = [
            (state(1, &[1, 2, 3]), left(&[1, 3], &[])),
            (state(1, &[1, 2]), left(&[1], &[2])),
            (state(2, &[1, 2, 3]), None),
            (state(1, &[1, 3]), None),
        ];
        for (stored, expected) in cases {
            let update = leave_isr(&stored, n(2), 2);
            let got = update.as_ref().map(|update| {
                assert_eq!(update.leader, stored.leader, "{stored:?}");
                assert_eq!(update.leader_epoch, stored.leader_epoch, "{stored:?}");
                (
                    update.in_sync_replicas.clone(),
                    update.eligible_leader_replicas.clone(),
                )
            });
            assert_eq!(got, expected, "{stored:?}");
        }
    }

    /// The whole chain of one log: read the state, write the ISR without
    /// this node on its epoch and version; a lost race reads again, up to
    /// `HAND_OVER_ATTEMPTS_MAX` attempts in all; a write that applied, a
    /// failure or a log gone ends it.
    #[test]
    fn leaving_the_isr_reads_then_writes_and_retries_a_lost_race_a_bounded_number_of_times() {
        let core = core();
        let mut out = Vec::new();
        core.leave_in_sync_replica(LogId(1), &mut out);
        let (call, mut then) = only_call(out);
        assert_eq!(call, CoordinatorCall::LogState(LogId(1)));
        assert_eq!(then, leave(0, LeaveIsrStage::ReadState));
        let stored = state(1, &[1, 2, 3]);
        for attempt in 0..HAND_OVER_ATTEMPTS_MAX {
            assert_eq!(then, leave(attempt, LeaveIsrStage::ReadState));
            let (call, write) = only_call(answer(
                &core,
                then,
                Answer::LogState(Ok(Some(stored.clone()))),
            ));
            assert_eq!(
                call,
                CoordinatorCall::CompareAndSet {
                    log: LogId(1),
                    epoch: LeaderEpoch(3),
                    version: 7,
                    update: LogUpdate::in_sync_replicas(&stored, nodes(&[1, 3]), 2),
                }
            );
            assert_eq!(write, leave(attempt, LeaveIsrStage::Write));
            let next = answer(
                &core,
                write,
                Answer::Cas(Ok(CasOutcome::Stale(stored.clone()))),
            );
            if attempt + 1 == HAND_OVER_ATTEMPTS_MAX {
                assert_eq!(
                    next,
                    Vec::new(),
                    "the last attempt lost: left to the controller"
                );
                break;
            }
            let (call, read) = only_call(next);
            assert_eq!(call, CoordinatorCall::LogState(LogId(1)));
            then = read;
        }
        let written = leave(0, LeaveIsrStage::Write);
        assert_eq!(
            answer(
                &core,
                written.clone(),
                Answer::Cas(Ok(CasOutcome::Applied(state(1, &[1, 3]))))
            ),
            Vec::new()
        );
        let failed = Err(Error::Coordinator {
            reason: "down".into(),
        });
        assert_eq!(answer(&core, written, Answer::Cas(failed)), Vec::new());
        let read = leave(0, LeaveIsrStage::ReadState);
        assert_eq!(
            answer(&core, read.clone(), Answer::LogState(Ok(None))),
            Vec::new()
        );
        let failed = Err(Error::Coordinator {
            reason: "down".into(),
        });
        assert_eq!(answer(&core, read, Answer::LogState(failed)), Vec::new());
    }

    /// A log whose unclean-shutdown report is still pending is not left:
    /// in the ELR the replica would stay eligible with records it lost.
    #[test]
    fn a_log_owed_an_unclean_report_is_not_left() {
        let core = core();
        core.set_unreported(HashMap::from([(LogId(1), None)]));
        let mut out = Vec::new();
        core.leave_in_sync_replica(LogId(1), &mut out);
        assert_eq!(out, Vec::new());
        core.leave_in_sync_replica(LogId(2), &mut out);
        assert_eq!(only_call(out).0, CoordinatorCall::LogState(LogId(2)));
    }

    /// Whether a leader still has its log to hand over, and anyone to
    /// hand it to: it leads in the stopped epoch or a later one (seed
    /// 20009429), and another in-sync replica is live.
    #[test]
    fn a_shutdown_hands_over_only_a_log_it_still_leads_to_a_live_in_sync_replica() {
        let cases = [
            (state(2, &[1, 2, 3]), LeaderEpoch(3), true),
            (state(2, &[1, 2, 3]), LeaderEpoch(2), true),
            (state(2, &[1, 2, 3]), LeaderEpoch(4), false),
            (state(1, &[1, 2, 3]), LeaderEpoch(3), false),
        ];
        for (stored, epoch, leads) in cases {
            assert_eq!(
                still_leads(&stored, n(2), epoch),
                leads,
                "{stored:?} {epoch:?}"
            );
        }
        let stored = state(2, &[1, 2]);
        assert!(another_in_sync_replica_live(
            &stored,
            n(2),
            &nodes(&[1, 2, 3])
        ));
        assert!(!another_in_sync_replica_live(
            &stored,
            n(2),
            &nodes(&[2, 3])
        ));
        assert!(!another_in_sync_replica_live(
            &state(2, &[2]),
            n(2),
            &nodes(&[1, 2, 3])
        ));
    }

    fn live(ids: &[u32]) -> Answer {
        Answer::Incarnations(Ok(ids.iter().map(|&id| (n(id), Incarnation(1))).collect()))
    }

    fn only_action(out: Vec<Action>) -> Action {
        match <[Action; 1]>::try_from(out) {
            Ok([action]) => action,
            other => panic!("expected one action, got {other:?}"),
        }
    }

    fn waited(core: &NodeCore, action: Action, expired: bool) -> Vec<Action> {
        let Action::ShutdownWait { pass, wait } = action else {
            panic!("expected a wait, got {action:?}");
        };
        let mut out = Vec::new();
        core.handle(
            Input::ShutdownWaited {
                pass,
                wait,
                expired,
            },
            &mut out,
        );
        out
    }

    /// The whole machine for one log: state, live nodes, on the first
    /// attempt the wait for the high watermark to pass the stopped end and
    /// the live nodes again (node 2 died meanwhile: node 3 is named), a
    /// lost race the next attempt (no wait then), an applied write the
    /// state to follow; the last attempt's lost race ends it.
    #[test]
    fn a_shutdown_hand_over_waits_once_reads_liveness_again_and_names_a_live_caught_up_follower() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (replica, _clock) = leader_fetched_by_2_and_3(dir.path());
        let core = core_of(n(1));
        let stored = state(1, &[1, 2, 3]);
        let mut out = Vec::new();
        core.begin_shutdown_hand_over(&replica, LeaderEpoch(3), Offset(1), 0, &mut out);
        let (call, then) = only_call(out);
        assert_eq!(call, CoordinatorCall::LogState(LogId(1)));
        let (call, then) = only_call(answer(
            &core,
            then,
            Answer::LogState(Ok(Some(stored.clone()))),
        ));
        assert_eq!(call, CoordinatorCall::LiveNodeIncarnations);
        let wait = only_action(answer(&core, then, live(&[1, 2, 3])));
        assert!(
            matches!(
                &wait,
                Action::ShutdownWait {
                    wait: ShutdownWait::HighWatermark {
                        above: Offset(0),
                        ..
                    },
                    ..
                }
            ),
            "{wait:?}"
        );
        assert_eq!(
            core.peer_incarnations().get(n(3)),
            Some(Incarnation(1)),
            "the live nodes' incarnations are learned (seed 60004986)"
        );
        let (call, then) = only_call(waited(&core, wait, false));
        assert_eq!(call, CoordinatorCall::LiveNodeIncarnations);
        let (call, then) = only_call(answer(&core, then, live(&[1, 3])));
        let named_3 = CoordinatorCall::CompareAndSet {
            log: LogId(1),
            epoch: LeaderEpoch(3),
            version: 7,
            update: hand_over_update(&stored, n(1), n(3), 2),
        };
        assert_eq!(call, named_3);
        let next = only_action(answer(
            &core,
            then,
            Answer::Cas(Ok(CasOutcome::Stale(stored.clone()))),
        ));
        assert!(
            matches!(&next, Action::ShutdownWait { pass, wait: ShutdownWait::NextAttempt } if pass.attempt() == 1),
            "{next:?}"
        );
        let (call, then) = only_call(waited(&core, next, false));
        assert_eq!(call, CoordinatorCall::LogState(LogId(1)));
        let (_, then) = only_call(answer(
            &core,
            then,
            Answer::LogState(Ok(Some(stored.clone()))),
        ));
        let (call, then) = only_call(answer(&core, then, live(&[1, 2, 3])));
        let named_2 = CoordinatorCall::CompareAndSet {
            log: LogId(1),
            epoch: LeaderEpoch(3),
            version: 7,
            update: hand_over_update(&stored, n(1), n(2), 2),
        };
        assert_eq!(call, named_2, "no wait on a later attempt");
        let applied = state(2, &[2, 3]);
        assert_eq!(
            answer(
                &core,
                then.clone(),
                Answer::Cas(Ok(CasOutcome::Applied(applied.clone())))
            ),
            vec![Action::ShutdownHandedOver {
                log: LogId(1),
                successor: n(2),
                state: applied,
            }]
        );
        let Continuation::ShutdownHandOver { pass, stage } = then else {
            panic!("a hand-over's continuation");
        };
        let last = Continuation::ShutdownHandOver {
            pass: ShutdownPass {
                attempt: HAND_OVER_ATTEMPTS_MAX - 1,
                ..pass
            },
            stage,
        };
        assert_eq!(
            answer(&core, last, Answer::Cas(Ok(CasOutcome::Stale(stored)))),
            Vec::new(),
            "no attempt left: the log is left to the controller"
        );
    }

    /// A log gone, moved by someone else or with no other live in-sync
    /// replica is not handed over; with nobody caught up the hand-over
    /// waits for a successor, until the wait runs out.
    #[test]
    fn a_shutdown_hand_over_ends_without_a_leadership_or_a_successor_in_time() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (replica, _clock) = leader_fetched_by_2_and_3(dir.path());
        append_one(&replica).expect("a record is appended");
        let core = core_of(n(1));
        let begin = || {
            let mut out = Vec::new();
            core.begin_shutdown_hand_over(&replica, LeaderEpoch(3), Offset(2), 1, &mut out);
            only_call(out).1
        };
        assert_eq!(
            answer(&core, begin(), Answer::LogState(Ok(None))),
            Vec::new()
        );
        let moved = Answer::LogState(Ok(Some(state(2, &[1, 2, 3]))));
        assert_eq!(answer(&core, begin(), moved), Vec::new());
        let stored = state(1, &[1, 2, 3]);
        let (_, then) = only_call(answer(
            &core,
            begin(),
            Answer::LogState(Ok(Some(stored.clone()))),
        ));
        assert_eq!(
            answer(&core, then.clone(), live(&[1])),
            Vec::new(),
            "nobody to hand over to"
        );
        let wait = only_action(answer(&core, then, live(&[1, 2, 3])));
        assert!(
            matches!(
                &wait,
                Action::ShutdownWait {
                    wait: ShutdownWait::Successor { .. },
                    ..
                }
            ),
            "nobody caught up with offset 2: {wait:?}"
        );
        let again = only_action(waited(&core, wait.clone(), false));
        assert_eq!(again, wait, "looks again after the wait");
        assert_eq!(waited(&core, wait, true), Vec::new(), "out of time");
    }
}
