//! The coordinator: the strongly consistent metadata service the application
//! supplies (ZooKeeper or KRaft in Kafka, SPEC §1, §3.4, §3.5, §3.7).
//!
//! This module owns the contract — the [`Coordinator`] trait, the per-log
//! record it stores ([`LogState`]), the rules an update must obey
//! ([`LogState::validate_update`]) and the events it sends — plus an
//! in-process implementation ([`MemoryCoordinator`]) and replica assignment
//! ([`assign_replicas`]). It does not decide anything about replication: the
//! controller that elects leaders and the leaders that shrink or expand the
//! ISR live in the replication layer and only *propose* updates here, as
//! compare-and-set writes that fence whoever raced and lost.

mod assignment;
mod controller;
mod memory;
#[cfg(feature = "zookeeper")]
mod zookeeper;

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::types::{LeaderEpoch, LogId, NodeId, ProducerId};

pub use assignment::assign_replicas;
pub use controller::{Controller, ControllerConfig};
pub use memory::MemoryCoordinator;
#[cfg(feature = "zookeeper")]
pub use zookeeper::{ZkCoordinator, ZkCoordinatorConfig};

/// What the coordinator stores for one log.
///
/// Invariants (checked by [`LogState::check_invariants`]):
/// - `replicas` is non-empty and holds no node twice;
/// - `leader`, if any, is one of `replicas` and is in `in_sync_replicas`;
/// - `in_sync_replicas` is a subset of `replicas` with no node twice, and is
///   non-empty while there is a leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogState {
    /// The log.
    pub log: LogId,
    /// Nodes hosting a replica, in assignment order; `replicas[0]` is the
    /// preferred leader. Fixed at creation.
    pub replicas: Vec<NodeId>,
    /// The current leader; `None` when no replica may lead (SPEC 3.5, seed
    /// 003: every ISR member is down and unclean election is off).
    pub leader: Option<NodeId>,
    /// Grows on every leader change (SPEC §1).
    pub leader_epoch: LeaderEpoch,
    /// The in-sync replicas (SPEC 3.4).
    pub in_sync_replicas: Vec<NodeId>,
    /// Bumped by the coordinator on every accepted update; the second half of
    /// the compare-and-set key.
    pub version: u64,
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
            replicas,
            version: 0,
        };
        state.check_invariants();
        Ok(state)
    }

    /// Whether `node` is in the ISR.
    pub fn is_in_sync(&self, node: NodeId) -> bool {
        self.in_sync_replicas.contains(&node)
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
    pub fn validate_update(&self, update: &LogUpdate) -> Result<()> {
        let log = self.log;
        if let Some(leader) = update.leader {
            if !self.replicas.contains(&leader) {
                return Err(coordinator_error(format!(
                    "invalid update of {log}: leader {leader} is not one of the replicas {:?}",
                    self.replicas
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
            .find(|node| !self.replicas.contains(node))
        {
            return Err(coordinator_error(format!(
                "invalid update of {log}: in_sync_replicas {:?} contains {node}, which is not one of the replicas {:?}",
                update.in_sync_replicas, self.replicas
            )));
        }
        if let Some(node) = first_duplicate(&update.in_sync_replicas) {
            return Err(coordinator_error(format!(
                "invalid update of {log}: in_sync_replicas {:?} names {node} twice",
                update.in_sync_replicas
            )));
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
        let next = LogState {
            log: self.log,
            replicas: self.replicas.clone(),
            leader: update.leader,
            leader_epoch: update.leader_epoch,
            in_sync_replicas: update.in_sync_replicas,
            version: self.version + 1,
        };
        next.check_invariants();
        next
    }

    /// Asserts the invariants listed on [`LogState`]. A coordinator only
    /// stores states that pass, so a failure here is a bug, not bad input.
    pub fn check_invariants(&self) {
        assert!(!self.replicas.is_empty(), "{}: no replicas", self.log);
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
    }
}

/// The part of a [`LogState`] a compare-and-set may change. Replicas are
/// fixed at creation (reassignment is out of scope).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogUpdate {
    /// The new leader, or `None` for "no leader".
    pub leader: Option<NodeId>,
    /// The new leader epoch: never lower than the current one, and higher
    /// when the leader changes.
    pub leader_epoch: LeaderEpoch,
    /// The new ISR.
    pub in_sync_replicas: Vec<NodeId>,
}

impl LogUpdate {
    /// An update that keeps the leader and epoch of `state` and sets the ISR:
    /// what a leader proposes when it shrinks or expands the ISR (SPEC 3.4).
    pub fn in_sync_replicas(state: &LogState, in_sync_replicas: Vec<NodeId>) -> LogUpdate {
        LogUpdate {
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            in_sync_replicas,
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
    /// A node's session began or ended; `live` is the new set, sorted.
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
pub trait Coordinator: Send + Sync + 'static {
    /// Creates a log: leader = first replica, epoch 0, ISR = all replicas,
    /// version 0, and notifies the replicas. Errs if the log exists or
    /// `replicas` is empty or repeats a node.
    fn create_log(&self, log: LogId, replicas: Vec<NodeId>) -> Result<LogState>;

    /// The stored state of `log`, or `None` if there is no such log.
    fn log_state(&self, log: LogId) -> Result<Option<LogState>>;

    /// Every log, sorted by id.
    fn logs(&self) -> Result<Vec<LogState>>;

    /// Compare-and-set: succeeds only if the stored leader epoch and version
    /// equal `expected_epoch` and `expected_version`; then stores `update`
    /// with version + 1, notifies every node hosting the log and returns
    /// [`CasOutcome::Applied`]. On a mismatch it changes nothing and returns
    /// [`CasOutcome::Stale`] with the current state. An update that breaks
    /// the rules of [`LogState::validate_update`] is an
    /// [`Error::Coordinator`]; an unknown log is [`Error::UnknownLog`].
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
    /// Otherwise it behaves exactly as [`Coordinator::compare_and_set`].
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
    fn register_node(&self, node: NodeId, session_timeout: Duration) -> Result<()>;

    /// Keeps `node`'s session alive. Errs if the node has no session,
    /// including when it already expired: the node must register again, and
    /// should assume it lost any role (controller) it held.
    fn heartbeat(&self, node: NodeId) -> Result<()>;

    /// Ends `node`'s session now (a clean shutdown). Releases the controller
    /// seat if the node held it. A node without a session is not an error.
    fn unregister_node(&self, node: NodeId) -> Result<()>;

    /// The nodes with a live session, sorted.
    fn live_nodes(&self) -> Result<Vec<NodeId>>;

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
    /// `node` has no live session.
    fn try_become_controller(&self, node: NodeId) -> Result<Option<ControllerEpoch>>;

    /// Empties the controller seat if `node` holds it (a clean shutdown of
    /// the controller), announced with [`CoordinatorEvent::ControllerChanged`]
    /// so another node can take it at once instead of waiting for `node`'s
    /// session to end. `node` keeps its session. Not holding the seat is not
    /// an error: nothing changes.
    fn resign_controller(&self, node: NodeId) -> Result<()>;

    /// The live controller and its epoch, if the seat is taken.
    fn controller(&self) -> Result<Option<(NodeId, ControllerEpoch)>>;

    /// A producer id never handed out before (SPEC §4).
    fn allocate_producer_id(&self) -> Result<ProducerId>;
}

fn coordinator_error(reason: String) -> Error {
    Error::Coordinator { reason }
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
            version: 4,
        }
    }

    fn update(leader: Option<u32>, epoch: u32, isr: &[u32]) -> LogUpdate {
        LogUpdate {
            leader: leader.map(n),
            leader_epoch: LeaderEpoch(epoch),
            in_sync_replicas: isr.iter().copied().map(n).collect(),
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
