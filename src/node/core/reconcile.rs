//! A log's reconciliation (SPEC 3.5, 3.10): what this node does with its
//! replica of a log when it follows the log's stored state. The core owns
//! the decisions: a stopped node changes nothing; a state that no longer
//! lists this node removes its replica unless it is older than the
//! replica's role ([`NodeCore::reconcile`]); a replica that cannot be
//! opened tells the log's unclean recovery what it may
//! ([`NodeCore::replica_unopened`]); and a hosted, placed replica reports
//! to the log and takes its role in a fixed order ([`placed_steps`]).
//!
//! It does not own the work: hosting and opening a replica, removing its
//! files, the set of placed replicas, and reading where a replica's log
//! ends are the driver's ([`Action::HostReplica`],
//! [`Action::RemoveReplica`], [`Action::ReconcilePlaced`]).

use super::{Action, Continuation, CoordinatorCall, NodeCore};
use crate::coordinator::{LogEnd, LogState};
use crate::error::Error;
use crate::replication::Role;
use crate::types::{LeaderEpoch, NodeId};

/// What the driver knows of this node and of its replica of a log when it
/// follows the log's stored state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LocalReplica {
    /// Whether the node has stopped (shutdown, halt, crash).
    pub(crate) stopped: bool,
    /// The hosted replica's role and leader epoch, if one is hosted.
    pub(crate) hosted: Option<(Role, LeaderEpoch)>,
}

/// One step of following a log's stored state with a replica that is
/// hosted and placed on this node's data directory, in the order
/// [`placed_steps`] gives. Each step reads where the replica's log ends
/// when its turn comes, as the reports made inline did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlacedStep {
    /// Report the replica's log end to the log's unclean recovery as a
    /// candidate ([`NodeCore::report_recovery_candidate_end`]).
    ReportRecoveryCandidateEnd,
    /// Replace a log end reported as not known with where the log ends
    /// now that it opened ([`NodeCore::report_end_after_open`]).
    ReportEndAfterOpen,
    /// Take the role the state gives the replica
    /// ([`NodeCore::take_role`]).
    TakeRole,
}

/// Whether a hosted replica's `(role, epoch)` says it has taken no role
/// yet: hosted and Offline at epoch 0 (its directory record failed, and it
/// serves nothing until it can). Such a replica has no epoch to tell a
/// stale state by, so [`NodeCore::reconcile`] removes it only on an
/// up-to-date read, and the driver only if it still has none.
pub(crate) fn has_taken_no_role((role, epoch): (Role, LeaderEpoch)) -> bool {
    role == Role::Offline && epoch == LeaderEpoch::ZERO
}

/// The steps, in order, by which node `node` follows `state` with its
/// replica, hosted and placed, whose role is in epoch `epoch`: none for a
/// state older than that role (a stale notification); else a candidate's
/// report to the log's unclean recovery while the log is in one and does
/// not list this node as unclean, the log end after an open unless the
/// replica is known `lost` (SPEC 2.8: its end is reported as empty, and
/// stays so), then the role.
pub(crate) fn placed_steps(
    state: &LogState,
    node: NodeId,
    epoch: LeaderEpoch,
    lost: bool,
) -> Vec<PlacedStep> {
    if state.leader_epoch < epoch {
        return Vec::new();
    }
    let mut steps = Vec::with_capacity(3);
    if state.in_unclean_recovery() && !state.is_unclean(node) {
        steps.push(PlacedStep::ReportRecoveryCandidateEnd);
    }
    if !lost {
        steps.push(PlacedStep::ReportEndAfterOpen);
    }
    steps.push(PlacedStep::TakeRole);
    steps
}

impl NodeCore {
    /// Brings this node's replica of `state`'s log in line with it (SPEC
    /// 3.5), with up to `epoch_bumps` attempts to move a restarted leader
    /// to a new epoch (`None`: `state` is the result of such a move, lead
    /// in it). A stopped node changes nothing: its threads are being
    /// joined, and each coordinator call may take the call timeout. A
    /// state that does not list this node removes the hosted replica
    /// ([`Action::RemoveReplica`]), unless it is older than the hosted
    /// replica's role; an unopened one, which has no role to tell a stale
    /// state by, is removed once an up-to-date read of the log confirms it
    /// ([`Continuation::RetryUnopened`](super::Continuation::RetryUnopened)).
    /// Else the unclean-shutdown report this node still
    /// owes the log is written first
    /// ([`report_unclean_stop`](Self::report_unclean_stop)), and the
    /// replica is hosted once it is stored ([`Action::HostReplica`]).
    pub(crate) fn reconcile(
        &self,
        state: &LogState,
        epoch_bumps: Option<u32>,
        local: LocalReplica,
        out: &mut Vec<Action>,
    ) {
        if local.stopped {
            return;
        }
        if !state.replicas.contains(&self.node) {
            // SPEC 3.10: a reassignment removed this replica, and the
            // coordinator stored it: only now may its copy go. A state
            // older than the replica's role (a stale notification from
            // before a move added it back) removes nothing: every change
            // of the replica set raises the epoch.
            if let Some((role, epoch)) = local.hosted {
                if state.leader_epoch < epoch {
                    return;
                }
                // One hosted that has taken no role yet (its directory
                // record failed: it serves nothing until it can) has no
                // epoch to tell a stale state by either, as an unopened
                // one has none: its copy goes once an up-to-date read
                // confirms (`ConfirmRemoval`). Removed at once, a stale
                // read of the log list (a ZooKeeper server behind, after a
                // new session) from before a move added it back deleted
                // the copy of a replica the stored ISR still named, and it
                // came back empty (review of the reassignment code,
                // helper-151).
                if has_taken_no_role((role, epoch)) {
                    Self::call(
                        out,
                        CoordinatorCall::LogState(state.log),
                        Continuation::ConfirmRemoval(state.log),
                    );
                    return;
                }
                out.push(Action::RemoveReplica(state.log));
                return;
            }
            // One that never opened has no role to tell a stale state by:
            // its copy (and the directory record an earlier start made of
            // it) goes once an up-to-date read of the log confirms
            // (`RetryUnopened`, which removes it), as a start deletes a
            // stray only after such a read (review: it was only
            // forgotten, its files and record left behind).
            if self.is_unopened(state.log) {
                Self::call(
                    out,
                    CoordinatorCall::LogState(state.log),
                    Continuation::RetryUnopened(state.log),
                );
            }
            return;
        }
        self.report_unclean_stop(state, epoch_bumps, out);
    }

    /// This node's replica of `state`'s log could not be opened (`error`;
    /// [`Error::ReplicaOpenDeferred`] is an open put off, not a failure).
    /// Unclean recovery waits for this live replica's log end: one that
    /// cannot be opened reports it as not known (review of 56af0b4,
    /// finding 4), which recovery waits for all the same, until only the
    /// unclean switch may pass it over; it reports its real end once it
    /// opens ([`note_reported_unopened`](Self::note_reported_unopened)).
    /// A replica this node knows it `lost` (SPEC 2.8) holds nothing of
    /// what was acknowledged, opened or not: its end is reported as empty,
    /// as the start reports it (simulator seed 20002248: reported as not
    /// known, and never again once it opened, it held a log's unclean
    /// recovery, and the log leaderless, for ever).
    pub(crate) fn replica_unopened(
        &self,
        state: &LogState,
        error: &Error,
        lost: bool,
        out: &mut Vec<Action>,
    ) {
        if matches!(error, Error::ReplicaOpenDeferred { .. }) {
            tracing::debug!(log = %state.log, node = %self.node, %error, "not opening the log yet");
        } else {
            tracing::error!(log = %state.log, node = %self.node, %error, "cannot open the log");
        }
        if !state.in_unclean_recovery() || state.is_unclean(self.node) {
            return;
        }
        if lost {
            self.report_recovery_candidate_end(state, Some(LogEnd::default()), out);
        } else {
            self.report_recovery_candidate_end(state, None, out);
            self.note_reported_unopened(state.log);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;
    use crate::coordinator::{LogUpdate, UncleanReplica};
    use crate::node::core::tests::core;
    use crate::types::LogId;

    fn n(id: u32) -> NodeId {
        NodeId(id)
    }

    /// Log 1 on nodes `replicas`, led by node 2 in epoch 3 at version 7.
    fn led(replicas: &[u32]) -> LogState {
        let replicas: Vec<NodeId> = replicas.iter().copied().map(NodeId).collect();
        LogState {
            leader: Some(n(2)),
            leader_epoch: LeaderEpoch(3),
            version: 7,
            in_sync_replicas: replicas.clone(),
            ..LogState::initial(LogId(1), replicas).expect("a valid initial state")
        }
    }

    /// Log 1 on nodes 1, 2 and 3 in unclean recovery in epoch 3, with
    /// `unclean` in its unclean list.
    fn in_recovery(unclean: &[u32]) -> LogState {
        LogState {
            leader: None,
            in_sync_replicas: vec![],
            unclean_replicas: unclean
                .iter()
                .map(|&id| UncleanReplica {
                    node: n(id),
                    acknowledged_end: None,
                    log_end: None,
                })
                .collect(),
            ..led(&[1, 2, 3])
        }
    }

    fn host(state: &LogState, epoch_bumps: Option<u32>) -> Action {
        Action::HostReplica {
            state: state.clone(),
            epoch_bumps,
        }
    }

    /// SPEC 3.5, 3.10: the decisions of a reconcile, case by case: a
    /// stopped node changes nothing; a state without this node removes a
    /// hosted replica (unless it is older than the replica's role) and
    /// reads the log again, up to date, for an unopened one (which the
    /// read's answer removes, see
    /// `an_unopened_replica_is_opened_again_while_this_node_is_its_replica`);
    /// a state with it hosts the replica, with the attempts given.
    #[test]
    fn a_reconcile_removes_a_replica_the_state_drops_and_hosts_one_it_lists() {
        let listed = led(&[1, 2, 3]);
        let dropped = led(&[2, 3]);
        let removed = Action::RemoveReplica(LogId(1));
        let read_again = Action::Call {
            call: CoordinatorCall::LogState(LogId(1)),
            then: Continuation::RetryUnopened(LogId(1)),
        };
        let confirm = Action::Call {
            call: CoordinatorCall::LogState(LogId(1)),
            then: Continuation::ConfirmRemoval(LogId(1)),
        };
        let hosted = |epoch: u32| Some((Role::Follower { leader: n(2) }, LeaderEpoch(epoch)));
        let cases = [
            ("stopped, listed", &listed, true, hosted(3), vec![]),
            ("stopped, dropped", &dropped, true, hosted(3), vec![]),
            (
                "dropped, not hosted",
                &dropped,
                false,
                None,
                vec![read_again],
            ),
            (
                "dropped, same epoch",
                &dropped,
                false,
                hosted(3),
                vec![removed.clone()],
            ),
            (
                "dropped, newer state",
                &dropped,
                false,
                hosted(2),
                vec![removed],
            ),
            ("dropped, stale state", &dropped, false, hosted(4), vec![]),
            (
                "dropped, hosted without a role",
                &dropped,
                false,
                Some((Role::Offline, LeaderEpoch::ZERO)),
                vec![confirm],
            ),
            (
                "listed, hosted",
                &listed,
                false,
                hosted(4),
                vec![host(&listed, Some(2))],
            ),
            (
                "listed, not hosted",
                &listed,
                false,
                None,
                vec![host(&listed, Some(2))],
            ),
        ];
        for (case, state, stopped, hosted, expected) in cases {
            let core = core();
            let now = std::time::Instant::now();
            if hosted.is_none() {
                core.open_attempted(LogId(1), false, now, Some(&Error::Shutdown));
            }
            let mut out = Vec::new();
            core.reconcile(state, Some(2), LocalReplica { stopped, hosted }, &mut out);
            assert_eq!(out, expected, "{case}");
            // An unopened replica stays so until it is removed or opens.
            let unopened = if hosted.is_none() {
                vec![LogId(1)]
            } else {
                vec![]
            };
            assert_eq!(core.unopened_logs(), unopened, "{case}");
        }
        // A replica neither hosted nor unopened: nothing to remove.
        let mut out = Vec::new();
        let local = LocalReplica {
            stopped: false,
            hosted: None,
        };
        core().reconcile(&dropped, Some(2), local, &mut out);
        assert_eq!(out, vec![], "dropped, neither hosted nor unopened");
    }

    /// SPEC 3.5: a listed replica is hosted only once the unclean-shutdown
    /// report this node owes its log is stored: the reconcile writes it
    /// first.
    #[test]
    fn a_reconcile_writes_an_owed_unclean_report_before_hosting() {
        let core = core();
        core.set_unreported(HashMap::from([(LogId(1), None)]));
        let mut out = Vec::new();
        let local = LocalReplica {
            stopped: false,
            hosted: None,
        };
        core.reconcile(&led(&[1, 2, 3]), None, local, &mut out);
        assert!(
            matches!(
                out.as_slice(),
                [Action::Call {
                    call: CoordinatorCall::CompareAndSet { .. },
                    then: Continuation::UncleanReport {
                        log: LogId(1),
                        epoch_bumps: None
                    },
                }]
            ),
            "{out:?}"
        );
    }

    /// The log end a failed open reports to the log's unclean recovery,
    /// case by case, and whether the replica is noted as reported unopened
    /// (its end then reported once it opens).
    #[test]
    fn a_replica_that_cannot_be_opened_reports_its_end_to_unclean_recovery_as_not_known() {
        let failed = Error::Coordinator {
            reason: "disk gone".into(),
        };
        let deferred = Error::ReplicaOpenDeferred {
            log: LogId(1),
            last_error: "disk gone".into(),
            retry_in: Duration::from_millis(10),
        };
        let empty = Some(LogEnd::default());
        let cases = [
            (
                "not in recovery",
                led(&[1, 2, 3]),
                &failed,
                false,
                None,
                false,
            ),
            (
                "unclean itself",
                in_recovery(&[1, 2]),
                &failed,
                false,
                None,
                false,
            ),
            (
                "candidate",
                in_recovery(&[2]),
                &failed,
                false,
                Some(None),
                true,
            ),
            (
                "candidate, deferred",
                in_recovery(&[2]),
                &deferred,
                false,
                Some(None),
                true,
            ),
            (
                "candidate, lost",
                in_recovery(&[2]),
                &failed,
                true,
                Some(empty),
                false,
            ),
            (
                "lost, unclean itself",
                in_recovery(&[1]),
                &failed,
                true,
                None,
                false,
            ),
        ];
        for (case, state, error, lost, reported, noted) in cases {
            let core = core();
            let mut out = Vec::new();
            core.replica_unopened(&state, error, lost, &mut out);
            let ends: Vec<Option<LogEnd>> = out
                .iter()
                .map(|action| match action {
                    Action::Call {
                        call: CoordinatorCall::CompareAndSet { update, .. },
                        then: Continuation::RecoveryReport { log: LogId(1), end },
                    } => {
                        let LogUpdate { unclean_report, .. } = update;
                        assert_eq!(
                            unclean_report.as_ref().map(|r| r.log_end.clone()),
                            Some(end.clone()),
                            "{case}"
                        );
                        end.clone()
                    }
                    other => panic!("{case}: a recovery report, not {other:?}"),
                })
                .collect();
            assert_eq!(ends, reported.into_iter().collect::<Vec<_>>(), "{case}");
            assert_eq!(
                core.reported_unopened.lock().contains(&LogId(1)),
                noted,
                "{case}"
            );
        }
    }

    /// The steps by which a hosted, placed replica follows a state, case
    /// by case: none for a stale state; a candidate's report only in an
    /// unclean recovery that does not list this node; the end after an
    /// open unless the replica is lost; the role last.
    #[test]
    fn a_placed_replica_reports_then_takes_its_role_unless_the_state_is_stale() {
        use PlacedStep::{
            ReportEndAfterOpen as EndAfterOpen, ReportRecoveryCandidateEnd as Candidate, TakeRole,
        };
        let cases = [
            ("stale", led(&[1, 2, 3]), 4, false, vec![]),
            ("stale in recovery", in_recovery(&[2]), 4, true, vec![]),
            (
                "led",
                led(&[1, 2, 3]),
                3,
                false,
                vec![EndAfterOpen, TakeRole],
            ),
            ("led, lost", led(&[1, 2, 3]), 2, true, vec![TakeRole]),
            (
                "candidate",
                in_recovery(&[2]),
                3,
                false,
                vec![Candidate, EndAfterOpen, TakeRole],
            ),
            (
                "candidate, lost",
                in_recovery(&[2]),
                3,
                true,
                vec![Candidate, TakeRole],
            ),
            (
                "unclean itself",
                in_recovery(&[1]),
                3,
                false,
                vec![EndAfterOpen, TakeRole],
            ),
        ];
        for (case, state, epoch, lost, expected) in cases {
            assert_eq!(
                placed_steps(&state, n(1), LeaderEpoch(epoch), lost),
                expected,
                "{case}"
            );
        }
    }
}
