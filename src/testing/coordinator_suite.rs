//! Conformance suite for [`Coordinator`] implementations: every coordinator
//! an application plugs in must pass it (STYLE: "trait conformance suites").
//!
//! It owns the checks of the trait's contract, each named after the behaviour
//! it proves, each run on a fresh coordinator from the caller's factory. It
//! does not test anything specific to one implementation (fault injection,
//! manual expiry), which belongs with that implementation.
//!
//! Time: session expiry is forced either by moving a manual clock the
//! coordinator reads ([`SuiteTime::Manual`]) or by letting short real
//! timeouts run out ([`SuiteTime::Real`], sessions of 1 s, long enough for a
//! loaded machine). In both cases the suite then *waits for the event*, so an
//! implementation must announce an expiry on its own, without being called.
//! The whole suite takes well under two seconds with manual time, a few
//! seconds with real time.
//!
//! Assumption: a subscriber's event queue holds at most 65 536 events (the
//! overflow check grows its burst up to that size).
//!
//! ```
//! # use std::sync::Arc;
//! # use isrlog::{ManualClock, MemoryCoordinator};
//! # use isrlog::testing::coordinator_suite::{self, SuiteTime};
//! coordinator_suite::run_with_time(|| {
//!     let clock = ManualClock::default();
//!     let coordinator = MemoryCoordinator::new(Arc::new(clock.clone()));
//!     (coordinator, SuiteTime::manual(move |by| clock.advance(by)))
//! });
//! ```

use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};

use crate::coordinator::{
    CasOutcome, ControllerEpoch, Coordinator, CoordinatorEvent, LogEnd, LogState, LogUpdate,
    UncleanReplica,
};
use crate::error::Error;
use crate::types::{LeaderEpoch, LogId, NodeId, Offset, ProducerId};

/// How the suite makes time pass for the coordinator under test.
pub enum SuiteTime {
    /// The coordinator reads a clock that this closure moves forward.
    Manual(Box<dyn Fn(Duration) + Send + Sync>),
    /// The coordinator reads real time; the suite uses short timeouts and
    /// sleeps.
    Real,
}

impl SuiteTime {
    /// Manual time moved by `advance`.
    pub fn manual(advance: impl Fn(Duration) + Send + Sync + 'static) -> SuiteTime {
        SuiteTime::Manual(Box::new(advance))
    }

    /// A session timeout that the suite lets expire.
    fn short_session(&self) -> Duration {
        match self {
            SuiteTime::Manual(_) => Duration::from_secs(1),
            // Long enough that a loaded machine does not expire it early.
            SuiteTime::Real => Duration::from_secs(1),
        }
    }

    /// A session timeout that never expires during a check.
    fn long_session(&self) -> Duration {
        match self {
            SuiteTime::Manual(_) => Duration::from_secs(3600),
            SuiteTime::Real => Duration::from_secs(60),
        }
    }

    /// Lets `by` pass for the coordinator.
    fn pass(&self, by: Duration) {
        match self {
            SuiteTime::Manual(advance) => advance(by),
            SuiteTime::Real => std::thread::sleep(by),
        }
    }

    /// Makes every short session expire: moves manual time past it; with
    /// real time the caller just waits for the expiry event.
    fn expire_short_sessions(&self) {
        if let SuiteTime::Manual(advance) = self {
            advance(self.short_session() * 2);
        }
    }
}

/// How long the suite waits for an event it expects.
/// (Generous: it only bounds how long a failing check takes.)
const EVENT_WAIT_MAX: Duration = Duration::from_secs(10);
/// How long the suite watches for an event it must not see.
const QUIET_WAIT: Duration = Duration::from_millis(30);

/// Runs every check with real time and short session timeouts, on a fresh
/// coordinator from `make` each time.
pub fn run<C: Coordinator>(mut make: impl FnMut() -> C) {
    run_with_time(|| (make(), SuiteTime::Real));
}

/// Runs every check on a fresh `(coordinator, time)` from `make` each time.
/// Panics naming the first check that fails.
pub fn run_with_time<C: Coordinator>(mut make: impl FnMut() -> (C, SuiteTime)) {
    for (name, check) in checks::<C>() {
        let (coordinator, time) = make();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| check(&coordinator, &time)));
        if let Err(cause) = outcome {
            let message = cause
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| cause.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)");
            panic!("coordinator conformance check `{name}` failed: {message}");
        }
    }
}

type Check<C> = fn(&C, &SuiteTime);

/// Every check, by name.
pub fn checks<C: Coordinator>() -> Vec<(&'static str, Check<C>)> {
    vec![
        ("create_and_read", create_and_read::<C>),
        (
            "compare_and_set_applies_and_bumps_version",
            compare_and_set_applies_and_bumps_version::<C>,
        ),
        (
            "compare_and_set_with_stale_epoch_or_version_changes_nothing",
            compare_and_set_with_stale_epoch_or_version_changes_nothing::<C>,
        ),
        (
            "invalid_updates_are_rejected",
            invalid_updates_are_rejected::<C>,
        ),
        (
            "eligible_leader_replicas_are_stored_and_checked",
            eligible_leader_replicas_are_stored_and_checked::<C>,
        ),
        (
            "report_unclean_shutdown_takes_the_node_out_of_isr_and_elr",
            report_unclean_shutdown_takes_the_node_out_of_isr_and_elr::<C>,
        ),
        (
            "a_resigning_leaders_entry_is_stored_until_its_restart_replaces_it",
            a_resigning_leaders_entry_is_stored_until_its_restart_replaces_it::<C>,
        ),
        (
            "an_unclean_report_fences_isr_changes_built_before_it",
            an_unclean_report_fences_isr_changes_built_before_it::<C>,
        ),
        (
            "concurrent_compare_and_set_has_one_winner_per_version",
            concurrent_compare_and_set_has_one_winner_per_version::<C>,
        ),
        (
            "session_expiry_removes_the_node_and_notifies",
            session_expiry_removes_the_node_and_notifies::<C>,
        ),
        (
            "heartbeats_keep_a_session_alive",
            heartbeats_keep_a_session_alive::<C>,
        ),
        (
            "a_registration_after_the_session_ended_gets_a_larger_incarnation",
            a_registration_after_the_session_ended_gets_a_larger_incarnation::<C>,
        ),
        (
            "unregister_ends_the_session_and_frees_the_controller_seat",
            unregister_ends_the_session_and_frees_the_controller_seat::<C>,
        ),
        ("one_controller_at_a_time", one_controller_at_a_time::<C>),
        (
            "new_controller_with_higher_epoch_after_session_expiry",
            new_controller_with_higher_epoch_after_session_expiry::<C>,
        ),
        (
            "controller_writes_are_fenced_by_controller_epoch",
            controller_writes_are_fenced_by_controller_epoch::<C>,
        ),
        (
            "resign_frees_the_seat_and_keeps_the_session",
            resign_frees_the_seat_and_keeps_the_session::<C>,
        ),
        (
            "log_subscribers_get_log_changed_in_order",
            log_subscribers_get_log_changed_in_order::<C>,
        ),
        (
            "subscribe_all_gets_every_log_changed",
            subscribe_all_gets_every_log_changed::<C>,
        ),
        (
            "producer_ids_are_unique_under_concurrency",
            producer_ids_are_unique_under_concurrency::<C>,
        ),
        (
            "overflowing_subscriber_gets_resync",
            overflowing_subscriber_gets_resync::<C>,
        ),
        (
            "dropped_receiver_is_harmless",
            dropped_receiver_is_harmless::<C>,
        ),
        (
            "cluster_id_is_stable_and_replica_directories_are_recorded",
            cluster_id_is_stable_and_replica_directories_are_recorded::<C>,
        ),
        (
            "a_write_whose_answer_was_lost_is_settled_by_a_read",
            a_write_whose_answer_was_lost_is_settled_by_a_read::<C>,
        ),
        (
            "a_reassignment_is_stored_and_a_removed_replica_hears_of_it",
            a_reassignment_is_stored_and_a_removed_replica_hears_of_it::<C>,
        ),
    ]
}

/// SPEC 3.10: an update with an [`Assignment`](crate::coordinator::Assignment)
/// stores the new replicas with KIP-455's adding and removing lists, the
/// replicas it adds hear of the log, and so does a replica it removes (it
/// must stop and delete its copy, and no later change of the log would
/// reach it); a change of the replica set that keeps the leader epoch, or
/// an assignment that breaks its rules, is refused.
fn a_reassignment_is_stored_and_a_removed_replica_hears_of_it<C: Coordinator>(
    c: &C,
    _time: &SuiteTime,
) {
    use crate::coordinator::Assignment;
    let added = c.subscribe(NodeId(4)).unwrap();
    let removed = c.subscribe(NodeId(3)).unwrap();
    let created = c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();
    let moving = LogUpdate {
        leader_epoch: created.leader_epoch.next(),
        assignment: Some(Assignment {
            replicas: nodes(&[4, 1, 2, 3]),
            adding_replicas: nodes(&[4]),
            removing_replicas: nodes(&[3]),
        }),
        ..isr_update(&created, &[1, 2, 3])
    };
    let kept_epoch = LogUpdate {
        leader_epoch: created.leader_epoch,
        ..moving.clone()
    };
    assert!(matches!(
        c.compare_and_set(LogId(1), created.leader_epoch, created.version, kept_epoch),
        Err(Error::Coordinator { .. })
    ));
    let empty_target = LogUpdate {
        assignment: Some(Assignment {
            replicas: nodes(&[1, 2, 3]),
            adding_replicas: Vec::new(),
            removing_replicas: nodes(&[1, 2, 3]),
        }),
        ..moving.clone()
    };
    assert!(matches!(
        c.compare_and_set(
            LogId(1),
            created.leader_epoch,
            created.version,
            empty_target
        ),
        Err(Error::Coordinator { .. })
    ));
    let started = applied(
        c.compare_and_set(LogId(1), created.leader_epoch, created.version, moving)
            .unwrap(),
    );
    assert_eq!(stored(c, LogId(1)), started);
    assert_eq!(started.replicas, nodes(&[4, 1, 2, 3]));
    assert_eq!(started.adding_replicas, nodes(&[4]));
    assert_eq!(started.removing_replicas, nodes(&[3]));
    wait_for_event(
        &added,
        "LogChanged for an added replica",
        |event| matches!(event, CoordinatorEvent::LogChanged(state) if *state == started),
    );
    let completed = applied(
        c.compare_and_set(
            LogId(1),
            started.leader_epoch,
            started.version,
            LogUpdate {
                leader_epoch: started.leader_epoch.next(),
                assignment: Some(Assignment {
                    replicas: nodes(&[4, 1, 2]),
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                }),
                ..isr_update(&started, &[1, 2, 4])
            },
        )
        .unwrap(),
    );
    assert_eq!(stored(c, LogId(1)), completed);
    assert!(!completed.is_reassigning());
    wait_for_event(
        &removed,
        "LogChanged for a removed replica",
        |event| matches!(event, CoordinatorEvent::LogChanged(state) if *state == completed),
    );
}

/// SPEC 3.4: what settling a write whose outcome is unknown
/// ([`Error::CoordinatorOutcomeUnknown`]) relies on. The suite cannot make
/// an implementation lose an answer — that takes fault injection below its
/// API (the memory coordinator's `lose_compare_and_set_replies`, the
/// ZooKeeper tests' `ZkProxy::lose_reply_to_next_write`) — so it models a
/// lost answer by ignoring one and checks, for any implementation: a read
/// then shows the write ([`LogState::is_result_of`]); the same
/// compare-and-set sent again (a blind retry) is stale and changes nothing,
/// so a write is never applied twice; a write never sent leaves the version
/// where it was, which is how a read says "not applied"; and writes the
/// implementation refused are plain errors, never an unknown outcome.
fn a_write_whose_answer_was_lost_is_settled_by_a_read<C: Coordinator>(c: &C, _time: &SuiteTime) {
    let log = LogId(50);
    let before = c.create_log(log, nodes(&[1, 2, 3])).unwrap();
    let shrink = isr_update(&before, &[1, 2]);
    // Applied; the answer is "lost".
    let _ = c.compare_and_set(log, before.leader_epoch, before.version, shrink.clone());
    let settled = stored(c, log);
    assert!(
        settled.is_result_of(&before, &shrink),
        "the read does not show the write: {settled:?}"
    );
    assert_eq!(settled.version, before.version + 1);
    // A blind retry of the same write cannot apply it twice.
    match c.compare_and_set(log, before.leader_epoch, before.version, shrink.clone()) {
        Ok(CasOutcome::Stale(current)) => assert_eq!(current, settled),
        other => panic!("a retried compare-and-set must be stale, got {other:?}"),
    }
    assert_eq!(stored(c, log), settled, "a retry changed the log");
    // A write never sent: the read shows the version where it was.
    let expand = isr_update(&settled, &[1, 2, 3]);
    let unsent = stored(c, log);
    assert_eq!(unsent.version, settled.version);
    assert!(!unsent.is_result_of(&settled, &expand));
    // Refusals are answers, not unknown outcomes.
    let refusals = [
        (
            "a stale compare-and-set",
            c.compare_and_set(log, before.leader_epoch, before.version, expand.clone())
                .map(|_| ()),
        ),
        (
            "an invalid update",
            c.compare_and_set(
                log,
                settled.leader_epoch,
                settled.version,
                LogUpdate {
                    in_sync_replicas: nodes(&[2, 3]),
                    ..expand.clone()
                },
            )
            .map(|_| ()),
        ),
        (
            "an unknown log",
            c.compare_and_set(LogId(51), LeaderEpoch::ZERO, 0, expand.clone())
                .map(|_| ()),
        ),
        (
            "an existing log created again",
            c.create_log(log, nodes(&[1])).map(|_| ()),
        ),
        (
            "a controller write without the seat",
            c.compare_and_set_as_controller(
                NodeId(9),
                ControllerEpoch(u64::MAX),
                log,
                settled.leader_epoch,
                settled.version,
                expand,
            )
            .map(|_| ()),
        ),
    ];
    for (what, outcome) in refusals {
        assert!(
            !outcome.as_ref().is_err_and(Error::is_outcome_unknown),
            "{what} must be refused, not left unknown: {outcome:?}"
        );
    }
    assert_eq!(stored(c, log), settled, "a refused write changed the log");
}

/// SPEC 2.8: the cluster id is the same on every call, and each replica's
/// directory is kept per node and log, replaced by a later record, and
/// changes no log state.
fn cluster_id_is_stable_and_replica_directories_are_recorded<C: Coordinator>(
    c: &C,
    _time: &SuiteTime,
) {
    use crate::types::DirectoryId;
    let cluster_id = c.cluster_id().unwrap();
    assert_eq!(c.cluster_id().unwrap(), cluster_id, "cluster id changed");
    let (node, other) = (NodeId(40), NodeId(41));
    let created = c.create_log(LogId(40), vec![node, other]).unwrap();
    assert_eq!(c.replica_directories(node).unwrap(), vec![]);
    let (first, second) = (DirectoryId(1), DirectoryId(u128::MAX));
    c.record_replica_directories(node, first, &[LogId(41), LogId(40)])
        .unwrap();
    c.record_replica_directories(other, second, &[LogId(40)])
        .unwrap();
    assert_eq!(
        c.replica_directories(node).unwrap(),
        vec![(LogId(40), first), (LogId(41), first)]
    );
    c.record_replica_directories(node, second, &[LogId(41)])
        .unwrap();
    assert_eq!(
        c.replica_directories(node).unwrap(),
        vec![(LogId(40), first), (LogId(41), second)]
    );
    assert_eq!(
        c.replica_directories(other).unwrap(),
        vec![(LogId(40), second)]
    );
    assert_eq!(
        stored(c, LogId(40)),
        created,
        "recording a directory changed the log"
    );
}

fn nodes(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().copied().map(NodeId).collect()
}

fn isr_update(state: &LogState, isr: &[u32]) -> LogUpdate {
    LogUpdate::in_sync_replicas(state, nodes(isr), 1)
}

fn applied(outcome: CasOutcome) -> LogState {
    match outcome {
        CasOutcome::Applied(state) => state,
        CasOutcome::Stale(state) => panic!("expected Applied, got Stale({state:?})"),
    }
}

fn stored(c: &impl Coordinator, log: LogId) -> LogState {
    match c.log_state(log) {
        Ok(Some(state)) => state,
        other => panic!("{log} should exist, got {other:?}"),
    }
}

/// Receives events until one satisfies `wanted`, or panics after
/// [`EVENT_WAIT_MAX`] naming `what`.
fn wait_for_event(
    events: &Receiver<CoordinatorEvent>,
    what: &str,
    wanted: impl Fn(&CoordinatorEvent) -> bool,
) -> CoordinatorEvent {
    let deadline = Instant::now() + EVENT_WAIT_MAX;
    loop {
        match events.recv_deadline(deadline) {
            Ok(event) if wanted(&event) => return event,
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout) => {
                panic!("no {what} within {EVENT_WAIT_MAX:?}")
            }
            Err(RecvTimeoutError::Disconnected) => panic!("event stream closed waiting for {what}"),
        }
    }
}

/// Everything already queued or arriving within [`QUIET_WAIT`]. A closed
/// stream is a failure, not an empty one: "no event arrived" must not pass
/// because none could.
fn drain(events: &Receiver<CoordinatorEvent>) -> Vec<CoordinatorEvent> {
    let mut all = Vec::new();
    loop {
        match events.recv_timeout(QUIET_WAIT) {
            Ok(event) => all.push(event),
            Err(RecvTimeoutError::Timeout) => return all,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("event stream closed while draining, after {all:?}")
            }
        }
    }
}

fn create_and_read<C: Coordinator>(c: &C, _time: &SuiteTime) {
    assert_eq!(c.log_state(LogId(1)).unwrap(), None);
    assert!(c.logs().unwrap().is_empty());

    let created = c.create_log(LogId(2), nodes(&[3, 1, 2])).unwrap();
    let expected = LogState {
        log: LogId(2),
        replicas: nodes(&[3, 1, 2]),
        leader: Some(NodeId(3)),
        leader_epoch: LeaderEpoch::ZERO,
        in_sync_replicas: nodes(&[3, 1, 2]),
        eligible_leader_replicas: Vec::new(),
        version: 0,
        unclean_replicas: Vec::new(),
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    };
    assert_eq!(created, expected);
    assert_eq!(stored(c, LogId(2)), expected);
    c.create_log(LogId(1), nodes(&[1])).unwrap();
    let ids: Vec<LogId> = c.logs().unwrap().iter().map(|s| s.log).collect();
    assert_eq!(ids, vec![LogId(1), LogId(2)], "logs() sorted by id");

    assert!(
        matches!(
            c.create_log(LogId(2), nodes(&[1])),
            Err(Error::Coordinator { .. })
        ),
        "creating an existing log must fail"
    );
    assert_eq!(
        stored(c, LogId(2)),
        expected,
        "a failed create changed the log"
    );
    assert!(matches!(
        c.create_log(LogId(3), vec![]),
        Err(Error::Coordinator { .. })
    ));
    assert!(matches!(
        c.create_log(LogId(3), nodes(&[1, 1])),
        Err(Error::Coordinator { .. })
    ));
    assert_eq!(c.log_state(LogId(3)).unwrap(), None);
}

/// The ELR is part of the stored state (SPEC 3.5): written with the ISR,
/// read back by every read, and an ELR that adds a replica from outside the
/// ISR and ELR is refused.
fn eligible_leader_replicas_are_stored_and_checked<C: Coordinator>(c: &C, _time: &SuiteTime) {
    let initial = c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();
    assert!(initial.eligible_leader_replicas.is_empty());
    // min ISR 2: the shrink to {1} puts 2 and 3 in the ELR.
    let shrink = LogUpdate::in_sync_replicas(&initial, nodes(&[1]), 2);
    assert_eq!(shrink.eligible_leader_replicas, nodes(&[2, 3]));
    let shrunk = applied(
        c.compare_and_set(LogId(1), LeaderEpoch(0), 0, shrink)
            .unwrap(),
    );
    assert_eq!(shrunk.eligible_leader_replicas, nodes(&[2, 3]));
    assert_eq!(stored(c, LogId(1)), shrunk);
    assert_eq!(c.logs().unwrap(), vec![shrunk.clone()]);

    let smuggled = LogUpdate {
        eligible_leader_replicas: nodes(&[2, 3]),
        ..LogUpdate::in_sync_replicas(&shrunk, nodes(&[1, 2]), 3)
    };
    assert!(matches!(
        c.compare_and_set(LogId(1), LeaderEpoch(0), 1, smuggled),
        Err(Error::Coordinator { .. })
    ));
    assert_eq!(
        stored(c, LogId(1)),
        shrunk,
        "a refused update changes nothing"
    );

    // 2 rejoins: the ISR is back at 2, the ELR empties.
    let expanded = applied(
        c.compare_and_set(
            LogId(1),
            LeaderEpoch(0),
            1,
            LogUpdate::in_sync_replicas(&shrunk, nodes(&[1, 2]), 2),
        )
        .unwrap(),
    );
    assert!(expanded.eligible_leader_replicas.is_empty());
    assert_eq!(stored(c, LogId(1)), expanded);
}

/// A leader whose storage failed resigns listing itself among the unclean
/// replicas (`UncleanReplica::acknowledged_end`, every field of its log end set):
/// the entry comes back as written, and the node's own unclean restart
/// later replaces it with an ordinary one.
fn a_resigning_leaders_entry_is_stored_until_its_restart_replaces_it<C: Coordinator>(
    c: &C,
    _time: &SuiteTime,
) {
    c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();
    let entry = UncleanReplica {
        node: NodeId(1),
        acknowledged_end: Some(Offset(8)),
        log_end: Some(LogEnd {
            last_epoch: Some(LeaderEpoch(0)),
            log_end_offset: Offset(9),
            log_start_offset: Offset(2),
            high_watermark: Offset(7),
            line_epoch: Some(LeaderEpoch(0)),
            epochs: vec![(LeaderEpoch(0), Offset(2))],
            start_line: Some(LeaderEpoch(0)),
        }),
    };
    let resigned = applied(
        c.compare_and_set(
            LogId(1),
            LeaderEpoch(0),
            0,
            LogUpdate {
                leader: None,
                leader_epoch: LeaderEpoch(1),
                in_sync_replicas: nodes(&[2, 3]),
                eligible_leader_replicas: Vec::new(),
                unclean_report: Some(entry.clone()),
                assignment: None,
            },
        )
        .unwrap(),
    );
    assert_eq!(resigned.unclean_replicas, vec![entry]);
    assert_eq!(stored(c, LogId(1)), resigned);
    let restarted = Some(LogEnd {
        last_epoch: Some(LeaderEpoch(0)),
        log_end_offset: Offset(8),
        ..Default::default()
    });
    c.report_unclean_shutdown(NodeId(1), &[(LogId(1), restarted.clone())])
        .unwrap();
    assert_eq!(
        stored(c, LogId(1)).unclean_replicas,
        vec![UncleanReplica {
            node: NodeId(1),
            acknowledged_end: None,
            log_end: restarted,
        }]
    );
}

/// `report_unclean_shutdown` applies `LogState::unclean_shutdown_update` to
/// every log hosted by the node, notifies, and is idempotent.
fn report_unclean_shutdown_takes_the_node_out_of_isr_and_elr<C: Coordinator>(
    c: &C,
    _time: &SuiteTime,
) {
    let events = c.subscribe(NodeId(2)).unwrap();
    // Log 1: node 1 leads with 2 and 3 in sync.
    c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();
    // Log 2: node 1 hosts nothing.
    let untouched = c.create_log(LogId(2), nodes(&[2, 3])).unwrap();
    // Log 3: node 1 is in the ELR, node 2 leads alone.
    let log_3 = c.create_log(LogId(3), nodes(&[1, 2])).unwrap();
    let log_3 = applied(
        c.compare_and_set(
            LogId(3),
            LeaderEpoch(0),
            0,
            LogUpdate {
                leader: Some(NodeId(2)),
                leader_epoch: LeaderEpoch(1),
                in_sync_replicas: nodes(&[2]),
                eligible_leader_replicas: log_3.eligible_leader_replicas_after(&nodes(&[2]), 2),
                unclean_report: None,
                assignment: None,
            },
        )
        .unwrap(),
    );
    assert_eq!(log_3.eligible_leader_replicas, nodes(&[1]));
    // Log 4: node 1 is the only eligible replica, reported not empty: it
    // stays (one reported empty leaves, see `unclean_shutdown_update`).
    c.create_log(LogId(4), nodes(&[3, 1])).unwrap();
    let log_4 = applied(
        c.compare_and_set(
            LogId(4),
            LeaderEpoch(0),
            0,
            LogUpdate {
                leader: None,
                leader_epoch: LeaderEpoch(1),
                in_sync_replicas: nodes(&[1]),
                eligible_leader_replicas: Vec::new(),
                unclean_report: None,
                assignment: None,
            },
        )
        .unwrap(),
    );
    drain(&events);

    // Every field set: each must come back as stored.
    let end_1 = Some(LogEnd {
        last_epoch: Some(LeaderEpoch(0)),
        log_end_offset: Offset(5),
        log_start_offset: Offset(1),
        high_watermark: Offset(4),
        line_epoch: Some(LeaderEpoch(0)),
        epochs: vec![(LeaderEpoch(0), Offset(1))],
        start_line: Some(LeaderEpoch(0)),
    });
    // Log 3's end is not reported: it counts as empty.
    let changed = c
        .report_unclean_shutdown(
            NodeId(1),
            &[(LogId(1), end_1.clone()), (LogId(4), end_1.clone())],
        )
        .unwrap();
    let changed_logs: Vec<LogId> = changed.iter().map(|state| state.log).collect();
    assert_eq!(changed_logs, vec![LogId(1), LogId(3)]);
    let log_1 = stored(c, LogId(1));
    assert_eq!(log_1.leader, None, "its leadership ends in a new epoch");
    assert_eq!(log_1.leader_epoch, LeaderEpoch(1));
    assert_eq!(log_1.in_sync_replicas, nodes(&[2, 3]));
    assert_eq!(
        log_1.unclean_replicas,
        vec![UncleanReplica {
            node: NodeId(1),
            acknowledged_end: None,
            log_end: end_1.clone()
        }],
        "the reported log end is stored"
    );
    assert_eq!(log_1, changed[0]);
    let log_3_after = stored(c, LogId(3));
    assert_eq!(log_3_after.leader, Some(NodeId(2)));
    assert_eq!(log_3_after.leader_epoch, LeaderEpoch(1));
    assert!(log_3_after.eligible_leader_replicas.is_empty());
    assert_eq!(
        log_3_after.unclean_replicas,
        vec![UncleanReplica {
            node: NodeId(1),
            acknowledged_end: None,
            log_end: Some(LogEnd::default())
        }]
    );
    assert_eq!(stored(c, LogId(2)), untouched, "a log without node 1");
    // Log 4 needed no change: the report wrote it unchanged, a fence
    // against ISR changes built before it (see
    // `an_unclean_report_fences_isr_changes_built_before_it`).
    assert_eq!(
        same_version(&stored(c, LogId(4)), &log_4),
        log_4,
        "log 4's content"
    );
    assert!(stored(c, LogId(4)).version > log_4.version, "log 4 fenced");
    let mut announced: Vec<LogId> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while announced.len() < 2 && Instant::now() < deadline {
        if let Ok(CoordinatorEvent::LogChanged(state)) =
            events.recv_timeout(Duration::from_millis(50))
        {
            // Earlier changes may still be on their way: count only the
            // states the report wrote.
            if !announced.contains(&state.log) && (state == log_1 || state == log_3_after) {
                announced.push(state.log);
            }
        }
    }
    announced.sort();
    assert_eq!(announced, vec![LogId(1), LogId(3)], "changes are announced");

    // A second report changes no content (it fences again: versions move).
    let before: Vec<LogState> = c.logs().unwrap();
    assert!(
        c.report_unclean_shutdown(
            NodeId(1),
            &[(LogId(1), end_1.clone()), (LogId(4), end_1.clone())]
        )
        .unwrap()
        .is_empty(),
        "a second report changes nothing"
    );
    for before in before {
        let after = stored(c, before.log);
        assert_eq!(same_version(&after, &before), before, "{}", before.log);
        if before.replicas.contains(&NodeId(1)) {
            assert!(after.version > before.version, "{} not fenced", before.log);
        } else {
            assert_eq!(after.version, before.version, "{} written", before.log);
        }
    }
    // A later unclean restart that lost more replaces the stored log end.
    let shorter = Some(LogEnd {
        last_epoch: Some(LeaderEpoch(0)),
        log_end_offset: Offset(2),
        ..Default::default()
    });
    let changed = c
        .report_unclean_shutdown(
            NodeId(1),
            &[(LogId(1), shorter.clone()), (LogId(4), shorter.clone())],
        )
        .unwrap();
    assert_eq!(changed.len(), 1, "only log 1's end changed: {changed:?}");
    assert_eq!(
        stored(c, LogId(1)).unclean_replicas,
        vec![UncleanReplica {
            node: NodeId(1),
            acknowledged_end: None,
            log_end: shorter.clone()
        }]
    );
    // An end not known (the replica could not be opened) is stored as
    // such, not as an empty log; and the last eligible replica of log 4
    // leaves with it, as with an empty log: it may have lost anything.
    let changed = c
        .report_unclean_shutdown(NodeId(1), &[(LogId(1), None), (LogId(4), None)])
        .unwrap();
    let changed_logs: Vec<LogId> = changed.iter().map(|state| state.log).collect();
    assert_eq!(changed_logs, vec![LogId(1), LogId(4)], "{changed:?}");
    let unknown = vec![UncleanReplica {
        node: NodeId(1),
        acknowledged_end: None,
        log_end: None,
    }];
    assert_eq!(stored(c, LogId(1)).unclean_replicas, unknown);
    let log_4_after = stored(c, LogId(4));
    assert!(
        !log_4_after.is_in_sync(NodeId(1)) && !log_4_after.is_eligible(NodeId(1)),
        "{log_4_after:?}"
    );
    assert_eq!(log_4_after.unclean_replicas, unknown);
}

/// `state` with `other`'s version: to compare contents alone.
fn same_version(state: &LogState, other: &LogState) -> LogState {
    LogState {
        version: other.version,
        ..state.clone()
    }
}

/// SPEC G1, Kafka's broker epoch (KIP-903): an ISR expansion that a leader
/// checked against a node's registration before that node restarted
/// uncleanly and reported it is never applied after the report, even where
/// the report changes nothing (the node was outside the ISR, the ELR and
/// the unclean list): the report writes such a log unchanged, moving its
/// version on, and ends the crashed process's registration, so the
/// leader's check, made again, no longer finds it.
fn an_unclean_report_fences_isr_changes_built_before_it<C: Coordinator>(c: &C, time: &SuiteTime) {
    let session = time.long_session();
    for node in [1, 2, 3] {
        c.register_node(NodeId(node), session).unwrap();
    }
    let created = c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();
    // Node 3 fell behind and left the ISR.
    let shrunk = applied(
        c.compare_and_set(LogId(1), LeaderEpoch(0), 0, isr_update(&created, &[1, 2]))
            .unwrap(),
    );
    // Leader 1 sees node 3 caught up and checks its registration: the
    // process whose fetches it counted is the registered one.
    let live = c.live_node_incarnations().unwrap();
    let counted = live
        .iter()
        .find(|(node, _)| *node == NodeId(3))
        .map(|(_, incarnation)| *incarnation)
        .expect("node 3 is live");
    let expansion = isr_update(&shrunk, &[1, 2, 3]);

    // Node 3 loses power and restarts before the leader writes; nothing
    // in the log names it, yet the report moves the version on.
    let changed = c
        .report_unclean_shutdown(
            NodeId(3),
            &[(
                LogId(1),
                Some(LogEnd {
                    last_epoch: Some(LeaderEpoch(0)),
                    log_end_offset: Offset(3),
                    ..Default::default()
                }),
            )],
        )
        .unwrap();
    assert!(changed.is_empty(), "nothing to report: {changed:?}");
    let fenced = stored(c, LogId(1));
    assert_eq!(same_version(&fenced, &shrunk), shrunk, "content unchanged");
    assert!(fenced.version > shrunk.version, "version moved on");

    // The leader's expansion, built before the report, is refused.
    let outcome = c
        .compare_and_set(LogId(1), LeaderEpoch(0), shrunk.version, expansion)
        .unwrap();
    assert!(!outcome.is_applied(), "{outcome:?}");
    assert_eq!(stored(c, LogId(1)).in_sync_replicas, nodes(&[1, 2]));
    // Checked again, the crashed process's registration is gone.
    let live = c.live_node_incarnations().unwrap();
    assert!(
        !live.iter().any(|(node, _)| *node == NodeId(3)),
        "the crashed process of node 3 is still registered: {live:?}"
    );
    assert!(!c.live_nodes().unwrap().contains(&NodeId(3)));
    // The restarted process registers as usual, with a new incarnation.
    let restarted = c.register_node(NodeId(3), session).unwrap();
    assert!(restarted > counted, "{restarted} after {counted}");
    let live = c.live_node_incarnations().unwrap();
    assert!(live.contains(&(NodeId(3), restarted)), "{live:?}");
}

fn compare_and_set_applies_and_bumps_version<C: Coordinator>(c: &C, _time: &SuiteTime) {
    let initial = c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();

    let shrunk = applied(
        c.compare_and_set(LogId(1), LeaderEpoch(0), 0, isr_update(&initial, &[1, 3]))
            .unwrap(),
    );
    assert_eq!(shrunk.version, 1);
    assert_eq!(shrunk.in_sync_replicas, nodes(&[1, 3]));
    assert_eq!(shrunk.leader, Some(NodeId(1)));
    assert_eq!(stored(c, LogId(1)), shrunk);

    let new_leader = LogUpdate {
        leader: Some(NodeId(3)),
        leader_epoch: LeaderEpoch(1),
        in_sync_replicas: nodes(&[3]),
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: None,
    };
    let elected = applied(
        c.compare_and_set(LogId(1), LeaderEpoch(0), 1, new_leader)
            .unwrap(),
    );
    assert_eq!(
        elected,
        LogState {
            log: LogId(1),
            replicas: nodes(&[1, 2, 3]),
            leader: Some(NodeId(3)),
            leader_epoch: LeaderEpoch(1),
            in_sync_replicas: nodes(&[3]),
            eligible_leader_replicas: Vec::new(),
            version: 2,
            unclean_replicas: Vec::new(),
            adding_replicas: Vec::new(),
            removing_replicas: Vec::new(),
        }
    );
    assert_eq!(stored(c, LogId(1)), elected);

    let leaderless = LogUpdate {
        leader: None,
        leader_epoch: LeaderEpoch(2),
        in_sync_replicas: nodes(&[3]),
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: None,
    };
    let leaderless = applied(
        c.compare_and_set(LogId(1), LeaderEpoch(1), 2, leaderless)
            .unwrap(),
    );
    assert_eq!(leaderless.leader, None);
    assert_eq!(leaderless.version, 3);
}

fn compare_and_set_with_stale_epoch_or_version_changes_nothing<C: Coordinator>(
    c: &C,
    _time: &SuiteTime,
) {
    let initial = c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();
    let current = applied(
        c.compare_and_set(LogId(1), LeaderEpoch(0), 0, isr_update(&initial, &[1, 2]))
            .unwrap(),
    );

    // The loser of a race: right epoch, old version.
    let outcome = c
        .compare_and_set(LogId(1), LeaderEpoch(0), 0, isr_update(&initial, &[1]))
        .unwrap();
    assert_eq!(outcome, CasOutcome::Stale(current.clone()));
    // A deposed leader: old epoch, even with the current version.
    let outcome = c
        .compare_and_set(
            LogId(1),
            LeaderEpoch(5),
            current.version,
            isr_update(&initial, &[1]),
        )
        .unwrap();
    assert_eq!(outcome, CasOutcome::Stale(current.clone()));
    // A version from the future.
    let outcome = c
        .compare_and_set(LogId(1), LeaderEpoch(0), 99, isr_update(&initial, &[1]))
        .unwrap();
    assert!(!outcome.is_applied());
    assert_eq!(outcome.state(), &current);
    assert_eq!(stored(c, LogId(1)), current, "a stale CAS changed the log");

    assert!(matches!(
        c.compare_and_set(LogId(9), LeaderEpoch(0), 0, isr_update(&initial, &[1])),
        Err(Error::UnknownLog(LogId(9)))
    ));
}

fn invalid_updates_are_rejected<C: Coordinator>(c: &C, _time: &SuiteTime) {
    c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();
    let at_epoch_1 = applied(
        c.compare_and_set(
            LogId(1),
            LeaderEpoch(0),
            0,
            LogUpdate {
                leader: Some(NodeId(2)),
                leader_epoch: LeaderEpoch(1),
                in_sync_replicas: nodes(&[2, 3]),
                eligible_leader_replicas: Vec::new(),
                unclean_report: None,
                assignment: None,
            },
        )
        .unwrap(),
    );
    let update = |leader: Option<u32>, epoch: u32, isr: &[u32]| LogUpdate {
        leader: leader.map(NodeId),
        leader_epoch: LeaderEpoch(epoch),
        in_sync_replicas: nodes(isr),
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: None,
    };
    // (what is wrong, the update, a word the error must name)
    let cases = [
        ("leader not a replica", update(Some(7), 2, &[7]), "leader"),
        (
            "ISR lacks the leader",
            update(Some(2), 1, &[3]),
            "in_sync_replicas",
        ),
        (
            "empty ISR with a leader",
            update(Some(2), 1, &[]),
            "in_sync_replicas",
        ),
        (
            "ISR not a subset of replicas",
            update(Some(2), 1, &[2, 5]),
            "in_sync_replicas",
        ),
        (
            "epoch goes backwards",
            update(Some(2), 0, &[2]),
            "leader_epoch",
        ),
        (
            "leader changes without a new epoch",
            update(Some(3), 1, &[3]),
            "leader_epoch",
        ),
    ];
    for (what, update, field) in cases {
        match c.compare_and_set(LogId(1), LeaderEpoch(1), 1, update) {
            Err(Error::Coordinator { reason }) => assert!(
                reason.contains(field),
                "{what}: the error {reason:?} does not name {field}"
            ),
            other => panic!("{what}: expected Error::Coordinator, got {other:?}"),
        }
        assert_eq!(
            stored(c, LogId(1)),
            at_epoch_1,
            "{what}: a rejected update changed the log"
        );
    }
}

fn concurrent_compare_and_set_has_one_winner_per_version<C: Coordinator>(c: &C, _time: &SuiteTime) {
    const THREADS: u32 = 8;
    const ATTEMPTS: usize = 200;
    c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();
    // Each thread reads, then proposes an ISR of its own choosing; the
    // versions it won are collected.
    let won: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|thread| {
                scope.spawn(move || {
                    let mut won = Vec::new();
                    for attempt in 0..ATTEMPTS {
                        let seen = stored(c, LogId(1));
                        let isr = if (thread as usize + attempt).is_multiple_of(2) {
                            vec![1, 2]
                        } else {
                            vec![1, 3]
                        };
                        let outcome = c
                            .compare_and_set(
                                LogId(1),
                                seen.leader_epoch,
                                seen.version,
                                isr_update(&seen, &isr),
                            )
                            .unwrap();
                        match outcome {
                            CasOutcome::Applied(state) => {
                                assert_eq!(state.version, seen.version + 1);
                                won.push(seen.version);
                            }
                            CasOutcome::Stale(state) => assert!(
                                state.version > seen.version,
                                "Stale must report a newer version than the one read"
                            ),
                        }
                    }
                    won
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| match worker.join() {
                Ok(won) => won,
                Err(cause) => panic::resume_unwind(cause),
            })
            .collect()
    });
    let mut all: Vec<u64> = won.into_iter().flatten().collect();
    all.sort_unstable();
    let winners = all.len() as u64;
    assert!(winners > 0, "no CAS ever won");
    assert_eq!(
        all,
        (0..winners).collect::<Vec<_>>(),
        "each version must be won exactly once"
    );
    assert_eq!(stored(c, LogId(1)).version, winners);
}

fn session_expiry_removes_the_node_and_notifies<C: Coordinator>(c: &C, time: &SuiteTime) {
    let (short, long) = (NodeId(1), NodeId(2));
    let events = c.subscribe(long).unwrap();
    c.register_node(long, time.long_session()).unwrap();
    c.register_node(short, time.short_session()).unwrap();
    assert_eq!(c.live_nodes().unwrap(), vec![short, long]);
    wait_for_event(&events, "NodesChanged with both nodes", |event| {
        *event
            == CoordinatorEvent::NodesChanged {
                live: vec![short, long],
            }
    });

    time.expire_short_sessions();
    // Nobody calls in: the coordinator must notice by itself.
    wait_for_event(&events, "NodesChanged without the expired node", |event| {
        *event == CoordinatorEvent::NodesChanged { live: vec![long] }
    });
    assert_eq!(c.live_nodes().unwrap(), vec![long]);
    assert!(
        matches!(c.heartbeat(short), Err(Error::Coordinator { .. })),
        "a heartbeat after expiry must fail"
    );
    c.heartbeat(long).unwrap();

    // The expired node comes back by registering again.
    c.register_node(short, time.long_session()).unwrap();
    assert_eq!(c.live_nodes().unwrap(), vec![short, long]);
}

/// SPEC 3.2 (Kafka's broker epoch, KIP-903): every registration that opens
/// a session gets a larger incarnation than the node's earlier ones (after
/// an unregistration and after an expiry alike), a renewal of a live
/// session never a smaller one, and `live_node_incarnations` lists each
/// live node with its current one, announced with `NodesChanged`.
fn a_registration_after_the_session_ended_gets_a_larger_incarnation<C: Coordinator>(
    c: &C,
    time: &SuiteTime,
) {
    let (a, b) = (NodeId(1), NodeId(2));
    let events = c.subscribe(b).unwrap();
    let b_first = c.register_node(b, time.long_session()).unwrap();
    let first = c.register_node(a, time.long_session()).unwrap();
    assert_eq!(
        c.live_node_incarnations().unwrap(),
        vec![(a, first), (b, b_first)]
    );
    let renewed = c.register_node(a, time.long_session()).unwrap();
    assert!(
        renewed >= first,
        "renewing a live session went back from {first} to {renewed}"
    );
    c.unregister_node(a).unwrap();
    assert_eq!(c.live_node_incarnations().unwrap(), vec![(b, b_first)]);
    drain(&events);
    let second = c.register_node(a, time.short_session()).unwrap();
    assert!(
        second > renewed,
        "a registration after unregistering got {second}, not above {renewed}"
    );
    assert_eq!(
        c.live_node_incarnations().unwrap(),
        vec![(a, second), (b, b_first)]
    );
    wait_for_event(
        &events,
        "NodesChanged after the new registration",
        |event| *event == CoordinatorEvent::NodesChanged { live: vec![a, b] },
    );
    time.expire_short_sessions();
    let give_up = Instant::now() + Duration::from_secs(30);
    while c.live_nodes().unwrap().contains(&a) {
        assert!(
            Instant::now() < give_up,
            "{a}'s short session never expired"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let third = c.register_node(a, time.long_session()).unwrap();
    assert!(
        third > second,
        "a registration after expiry got {third}, not above {second}"
    );
    assert_eq!(
        c.live_node_incarnations().unwrap(),
        vec![(a, third), (b, b_first)]
    );
}

fn heartbeats_keep_a_session_alive<C: Coordinator>(c: &C, time: &SuiteTime) {
    let node = NodeId(1);
    c.register_node(node, time.short_session()).unwrap();
    // Six quarters of the timeout pass, with a heartbeat after each.
    for _ in 0..6 {
        time.pass(time.short_session() / 4);
        c.heartbeat(node).unwrap();
    }
    assert_eq!(c.live_nodes().unwrap(), vec![node]);
    assert!(matches!(
        c.heartbeat(NodeId(9)),
        Err(Error::Coordinator { .. })
    ));
}

fn unregister_ends_the_session_and_frees_the_controller_seat<C: Coordinator>(
    c: &C,
    time: &SuiteTime,
) {
    let (a, b) = (NodeId(1), NodeId(2));
    c.register_node(a, time.long_session()).unwrap();
    c.register_node(b, time.long_session()).unwrap();
    let first = c.try_become_controller(a).unwrap();
    assert!(first.is_some());
    let events = c.subscribe(b).unwrap();
    c.unregister_node(a).unwrap();
    assert_eq!(c.live_nodes().unwrap(), vec![b]);
    assert_eq!(c.controller().unwrap(), None);
    wait_for_event(&events, "NodesChanged after unregister", |event| {
        *event == CoordinatorEvent::NodesChanged { live: vec![b] }
    });
    wait_for_event(&events, "ControllerChanged to no controller", |event| {
        matches!(
            event,
            CoordinatorEvent::ControllerChanged {
                controller: None,
                ..
            }
        )
    });
    // Unregistering twice is not an error.
    c.unregister_node(a).unwrap();
    assert_eq!(
        c.try_become_controller(b).unwrap(),
        first.map(ControllerEpoch::next)
    );
}

fn one_controller_at_a_time<C: Coordinator>(c: &C, time: &SuiteTime) {
    const NODES: u32 = 8;
    assert_eq!(c.controller().unwrap(), None);
    assert!(
        matches!(
            c.try_become_controller(NodeId(99)),
            Err(Error::Coordinator { .. })
        ),
        "a node without a session must not become controller"
    );
    for id in 0..NODES {
        c.register_node(NodeId(id), time.long_session()).unwrap();
    }
    let winners: Vec<(NodeId, ControllerEpoch)> = std::thread::scope(|scope| {
        let tries: Vec<_> = (0..NODES)
            .map(|id| scope.spawn(move || (NodeId(id), c.try_become_controller(NodeId(id)))))
            .collect();
        tries
            .into_iter()
            .filter_map(|attempt| match attempt.join() {
                Ok((node, Ok(Some(epoch)))) => Some((node, epoch)),
                Ok((_, Ok(None))) => None,
                Ok((node, Err(error))) => panic!("{node}: try_become_controller failed: {error}"),
                Err(cause) => panic::resume_unwind(cause),
            })
            .collect()
    });
    assert_eq!(winners.len(), 1, "exactly one controller, got {winners:?}");
    let (controller, epoch) = winners[0];
    assert!(epoch > ControllerEpoch::default());
    assert_eq!(c.controller().unwrap(), Some((controller, epoch)));
    // The holder asking again keeps its epoch; anyone else still loses.
    assert_eq!(c.try_become_controller(controller).unwrap(), Some(epoch));
    let other = NodeId((controller.0 + 1) % NODES);
    assert_eq!(c.try_become_controller(other).unwrap(), None);
}

fn new_controller_with_higher_epoch_after_session_expiry<C: Coordinator>(c: &C, time: &SuiteTime) {
    let (old, new) = (NodeId(1), NodeId(2));
    c.register_node(new, time.long_session()).unwrap();
    c.register_node(old, time.short_session()).unwrap();
    let events = c.subscribe(new).unwrap();
    let first = match c.try_become_controller(old).unwrap() {
        Some(epoch) => epoch,
        None => panic!("the first candidate must win an empty seat"),
    };
    assert_eq!(c.try_become_controller(new).unwrap(), None);
    wait_for_event(
        &events,
        "ControllerChanged to the first controller",
        |event| {
            *event
                == CoordinatorEvent::ControllerChanged {
                    controller: Some(old),
                    epoch: first,
                }
        },
    );

    time.expire_short_sessions();
    wait_for_event(&events, "ControllerChanged to no controller", |event| {
        matches!(
            event,
            CoordinatorEvent::ControllerChanged {
                controller: None,
                ..
            }
        )
    });
    assert_eq!(c.controller().unwrap(), None);
    assert_eq!(c.try_become_controller(new).unwrap(), Some(first.next()));
    assert_eq!(c.controller().unwrap(), Some((new, first.next())));
    wait_for_event(
        &events,
        "ControllerChanged to the new controller",
        |event| {
            *event
                == CoordinatorEvent::ControllerChanged {
                    controller: Some(new),
                    epoch: first.next(),
                }
        },
    );
}

/// Asserts that `outcome` is the refusal of a deposed (or never seated)
/// controller's write: an `Error::Coordinator` naming its controller epoch.
fn assert_fenced(what: &str, outcome: crate::error::Result<CasOutcome>, epoch: ControllerEpoch) {
    match outcome {
        Err(Error::Coordinator { reason }) => assert!(
            reason.contains(&format!("controller epoch {epoch}")),
            "{what}: the error {reason:?} does not name controller epoch {epoch}"
        ),
        other => panic!("{what}: expected Error::Coordinator, got {other:?}"),
    }
}

fn controller_writes_are_fenced_by_controller_epoch<C: Coordinator>(c: &C, time: &SuiteTime) {
    let (old, new, bystander) = (NodeId(1), NodeId(2), NodeId(3));
    c.register_node(old, time.short_session()).unwrap();
    c.register_node(new, time.long_session()).unwrap();
    c.register_node(bystander, time.long_session()).unwrap();
    let created = c.create_log(LogId(1), nodes(&[1, 2, 3])).unwrap();
    let first = c
        .try_become_controller(old)
        .unwrap()
        .expect("an empty seat");

    // The seated controller writes like a plain compare-and-set.
    let shrunk = applied(
        c.compare_and_set_as_controller(
            old,
            first,
            LogId(1),
            LeaderEpoch(0),
            0,
            isr_update(&created, &[1, 2]),
        )
        .unwrap(),
    );
    assert_eq!(shrunk.version, 1);
    assert_eq!(
        c.compare_and_set_as_controller(
            old,
            first,
            LogId(1),
            LeaderEpoch(0),
            0,
            isr_update(&created, &[1]),
        )
        .unwrap(),
        CasOutcome::Stale(shrunk.clone()),
        "the seated controller still loses races on the log"
    );
    assert!(matches!(
        c.compare_and_set_as_controller(
            old,
            first,
            LogId(9),
            LeaderEpoch(0),
            0,
            isr_update(&created, &[1])
        ),
        Err(Error::UnknownLog(LogId(9)))
    ));
    // A node that never held the seat, and the holder with a wrong epoch.
    assert_fenced(
        "a node without the seat",
        c.compare_and_set_as_controller(
            bystander,
            first,
            LogId(1),
            LeaderEpoch(0),
            1,
            isr_update(&shrunk, &[1]),
        ),
        first,
    );
    assert_fenced(
        "the holder with a future epoch",
        c.compare_and_set_as_controller(
            old,
            first.next(),
            LogId(1),
            LeaderEpoch(0),
            1,
            isr_update(&shrunk, &[1]),
        ),
        first.next(),
    );

    // The old controller's session ends and a new one takes the seat: the
    // old one's write, built from the state it last read (which is still
    // current), is refused and changes nothing.
    time.expire_short_sessions();
    let deadline = Instant::now() + EVENT_WAIT_MAX;
    let second = loop {
        if let Some(epoch) = c.try_become_controller(new).unwrap() {
            break epoch;
        }
        assert!(
            Instant::now() < deadline,
            "the old controller never expired"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(second > first);
    let elect_2 = LogUpdate {
        leader: Some(NodeId(2)),
        leader_epoch: LeaderEpoch(1),
        in_sync_replicas: nodes(&[2]),
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: None,
    };
    assert_fenced(
        "the deposed controller",
        c.compare_and_set_as_controller(old, first, LogId(1), LeaderEpoch(0), 1, elect_2.clone()),
        first,
    );
    assert_eq!(
        stored(c, LogId(1)),
        shrunk,
        "a refused write changed the log"
    );
    // The new controller with the old epoch is refused as well.
    assert_fenced(
        "the new controller with the old epoch",
        c.compare_and_set_as_controller(new, first, LogId(1), LeaderEpoch(0), 1, elect_2.clone()),
        first,
    );
    let elected = applied(
        c.compare_and_set_as_controller(new, second, LogId(1), LeaderEpoch(0), 1, elect_2)
            .unwrap(),
    );
    assert_eq!(elected.leader, Some(NodeId(2)));
    assert_eq!(stored(c, LogId(1)), elected);
}

fn resign_frees_the_seat_and_keeps_the_session<C: Coordinator>(c: &C, time: &SuiteTime) {
    let (a, b) = (NodeId(1), NodeId(2));
    c.register_node(a, time.long_session()).unwrap();
    c.register_node(b, time.long_session()).unwrap();
    let created = c.create_log(LogId(1), nodes(&[1, 2])).unwrap();
    let first = c.try_become_controller(a).unwrap().expect("an empty seat");
    let events = c.subscribe(b).unwrap();

    // Someone else resigning changes nothing.
    c.resign_controller(b).unwrap();
    assert_eq!(c.controller().unwrap(), Some((a, first)));

    c.resign_controller(a).unwrap();
    assert_eq!(c.controller().unwrap(), None);
    assert_eq!(
        c.live_nodes().unwrap(),
        vec![a, b],
        "resigning kept the session"
    );
    c.heartbeat(a).unwrap();
    wait_for_event(&events, "ControllerChanged to no controller", |event| {
        *event
            == CoordinatorEvent::ControllerChanged {
                controller: None,
                epoch: first,
            }
    });
    assert_fenced(
        "the resigned controller",
        c.compare_and_set_as_controller(
            a,
            first,
            LogId(1),
            LeaderEpoch(0),
            0,
            isr_update(&created, &[1]),
        ),
        first,
    );
    // Resigning twice is not an error; the next controller gets a new epoch.
    c.resign_controller(a).unwrap();
    assert_eq!(c.try_become_controller(b).unwrap(), Some(first.next()));
    assert_eq!(c.controller().unwrap(), Some((b, first.next())));
}

fn subscribe_all_gets_every_log_changed<C: Coordinator>(c: &C, _time: &SuiteTime) {
    // Node 9 hosts nothing, yet its all-logs subscription hears of both
    // logs, in the order of the changes.
    let everything = c.subscribe_all(NodeId(9)).unwrap();
    let hosting_one = c.subscribe(NodeId(1)).unwrap();
    let first = c.create_log(LogId(1), nodes(&[1, 2])).unwrap();
    let second = c.create_log(LogId(2), nodes(&[2, 3])).unwrap();
    let second = applied(
        c.compare_and_set(LogId(2), LeaderEpoch(0), 0, isr_update(&second, &[2]))
            .unwrap(),
    );
    let log_changes = |events: &Receiver<CoordinatorEvent>| -> Vec<LogState> {
        drain(events)
            .into_iter()
            .filter_map(|event| match event {
                CoordinatorEvent::LogChanged(state) => Some(state),
                _ => None,
            })
            .collect()
    };
    let created_2 = LogState {
        version: 0,
        in_sync_replicas: nodes(&[2, 3]),
        eligible_leader_replicas: Vec::new(),
        ..second.clone()
    };
    let mut seen = Vec::new();
    let deadline = Instant::now() + EVENT_WAIT_MAX;
    while seen.len() < 3 && Instant::now() < deadline {
        seen.extend(log_changes(&everything));
    }
    assert_eq!(seen, vec![first.clone(), created_2, second]);
    // A plain subscription still hears only of the logs its node hosts.
    assert_eq!(log_changes(&hosting_one), vec![first]);
}

fn log_subscribers_get_log_changed_in_order<C: Coordinator>(c: &C, _time: &SuiteTime) {
    let hosting = c.subscribe(NodeId(1)).unwrap();
    let elsewhere = c.subscribe(NodeId(9)).unwrap();
    let created = c.create_log(LogId(1), nodes(&[1, 2])).unwrap();
    assert_eq!(
        wait_for_event(&hosting, "LogChanged on create", |event| matches!(
            event,
            CoordinatorEvent::LogChanged(_)
        )),
        CoordinatorEvent::LogChanged(created.clone())
    );
    let mut expected = created;
    for isr in [&[1][..], &[1, 2], &[1]] {
        expected = applied(
            c.compare_and_set(
                LogId(1),
                expected.leader_epoch,
                expected.version,
                isr_update(&expected, isr),
            )
            .unwrap(),
        );
        assert_eq!(
            wait_for_event(&hosting, "LogChanged after a CAS", |event| matches!(
                event,
                CoordinatorEvent::LogChanged(_)
            )),
            CoordinatorEvent::LogChanged(expected.clone()),
            "events must arrive in the order of the changes"
        );
    }
    let leaked: Vec<CoordinatorEvent> = drain(&elsewhere)
        .into_iter()
        .filter(|event| matches!(event, CoordinatorEvent::LogChanged(_)))
        .collect();
    assert!(
        leaked.is_empty(),
        "a node hosting no replica got {leaked:?}"
    );
}

fn producer_ids_are_unique_under_concurrency<C: Coordinator>(c: &C, _time: &SuiteTime) {
    const THREADS: usize = 8;
    const IDS_PER_THREAD: usize = 200;
    let per_thread: Vec<Vec<ProducerId>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(|| {
                    (0..IDS_PER_THREAD)
                        .map(|_| c.allocate_producer_id().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| match worker.join() {
                Ok(ids) => ids,
                Err(cause) => panic::resume_unwind(cause),
            })
            .collect()
    });
    let mut seen = HashSet::new();
    for ids in &per_thread {
        assert!(
            ids.windows(2).all(|pair| pair[0] < pair[1]),
            "ids from one thread must increase"
        );
        for id in ids {
            assert!(id.is_some(), "{id} is not a valid producer id");
            assert!(seen.insert(*id), "{id} handed out twice");
        }
    }
    assert_eq!(seen.len(), THREADS * IDS_PER_THREAD);
}

fn overflowing_subscriber_gets_resync<C: Coordinator>(c: &C, _time: &SuiteTime) {
    const BURST_MAX: usize = 1 << 16;
    let events = c.subscribe(NodeId(1)).unwrap();
    let mut state = c.create_log(LogId(1), nodes(&[1, 2])).unwrap();
    let mut burst = 64;
    // Grow the burst of updates until the subscriber, which does not read
    // meanwhile, misses some; every update must return without blocking.
    let (received, sent) = loop {
        for _ in 0..burst {
            let isr: &[u32] = if state.in_sync_replicas.len() == 2 {
                &[1]
            } else {
                &[1, 2]
            };
            state = applied(
                c.compare_and_set(
                    LogId(1),
                    state.leader_epoch,
                    state.version,
                    isr_update(&state, isr),
                )
                .unwrap(),
            );
        }
        let received = drain(&events);
        let log_changes = received
            .iter()
            .filter(|event| matches!(event, CoordinatorEvent::LogChanged(_)))
            .count();
        if log_changes < burst || burst >= BURST_MAX {
            break (received, burst);
        }
        burst *= 2;
    };
    let log_changes: Vec<u64> = received
        .iter()
        .filter_map(|event| match event {
            CoordinatorEvent::LogChanged(state) => Some(state.version),
            _ => None,
        })
        .collect();
    assert!(
        log_changes.len() < sent,
        "a queue never overflowed in a burst of {sent} updates"
    );
    assert!(
        log_changes.windows(2).all(|pair| pair[0] < pair[1]),
        "delivered events out of order"
    );
    let resync_seen = received.contains(&CoordinatorEvent::Resync);
    // One more change: if the Resync was not delivered yet, it must come
    // before this change's event.
    state = applied(
        c.compare_and_set(
            LogId(1),
            state.leader_epoch,
            state.version,
            isr_update(&state, &[1, 2]),
        )
        .unwrap(),
    );
    let next = wait_for_event(&events, "an event after the overflow", |_| true);
    assert!(
        resync_seen || next == CoordinatorEvent::Resync,
        "the subscriber missed events but got {next:?} instead of Resync"
    );
    let last = CoordinatorEvent::LogChanged(state);
    if next != last {
        wait_for_event(&events, "LogChanged for the last update", |event| {
            *event == last
        });
    }
}

fn dropped_receiver_is_harmless<C: Coordinator>(c: &C, _time: &SuiteTime) {
    let dropped = c.subscribe(NodeId(1)).unwrap();
    let kept = c.subscribe(NodeId(1)).unwrap();
    drop(dropped);
    let created = c.create_log(LogId(1), nodes(&[1])).unwrap();
    applied(
        c.compare_and_set(LogId(1), LeaderEpoch(0), 0, isr_update(&created, &[1]))
            .unwrap(),
    );
    assert_eq!(
        drain(&kept)
            .iter()
            .filter(|event| matches!(event, CoordinatorEvent::LogChanged(_)))
            .count(),
        2
    );
}
