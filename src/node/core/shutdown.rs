//! A controlled shutdown in the node core (SPEC 3.5): once this node's
//! fetchers stopped, it leaves the in-sync replica set of every log it
//! follows ([`NodeCore::leave_in_sync_replica`]), one compare-and-set per
//! log, each a [`Continuation::LeaveIsr`], whose decision is the pure
//! [`leave_isr`]. Both drivers run it: the threaded one on its bounded
//! pool of shutdown workers, where no call starts past the shutdown's
//! deadline (the driver checks it, the core reads no clock), the
//! simulator's stepped node one log after the other. What this does not
//! own yet: the shutdown's hand-over of the logs this node leads
//! (`NodeShared::hand_over` and `hand_over_step` in `node.rs`, which share
//! [`caught_up_successor`](super::caught_up_successor) and
//! [`hand_over_update`](super::hand_over_update) with the core), the
//! shutdown gate, and the order of the shutdown's steps.

use super::{Action, Continuation, CoordinatorCall, NodeCore};
use crate::coordinator::{CasOutcome, LogState, LogUpdate};
use crate::error::Result;
use crate::types::{LogId, NodeId};

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
    use crate::sync::{Arc, AtomicBool};
    use crate::types::LeaderEpoch;

    fn n(id: u32) -> NodeId {
        NodeId(id)
    }

    fn nodes(ids: &[u32]) -> Vec<NodeId> {
        ids.iter().copied().map(NodeId).collect()
    }

    /// Node 2's core, stopping, for two in-sync replicas at least.
    fn core() -> NodeCore {
        NodeCore::new(
            n(2),
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
}
