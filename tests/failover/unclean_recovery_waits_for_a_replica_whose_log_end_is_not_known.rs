//! SPEC 3.5 with G1(c): a replica whose node could not open it when it
//! reported its unclean restart (its recovery needed a cut that may be
//! made only once the report is stored, or the open failed) is recorded
//! with its log end not known, and unclean recovery waits for its end as
//! for a replica that has not reported, with no bound; only the unclean
//! switch passes over one that is away, after `unclean_recovery_wait_max`,
//! and that election counts as unclean. Taking the unknown
//! end for an empty log elected a shorter log at once, and the replica
//! then truncated the records only it held (review of dfd9830: every node
//! lost power, C needed the cut, B held 0..50 and led before C reported
//! 0..120).
//!
//! The controller runs against a `MemoryCoordinator` with fake nodes
//! (sessions only); the wait is real time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::{
    CasOutcome, Controller, ControllerConfig, Coordinator, LeaderEpoch, LogEnd, LogId, LogState,
    ManualClock, MemoryCoordinator, NodeId, Offset,
};

const SESSION_LONG: Duration = Duration::from_secs(3600);
const RECOVERY_WAIT: Duration = Duration::from_millis(300);
const LOG: LogId = LogId(1);
/// The replica that needs the cut and holds the most: 0..120.
const C: NodeId = NodeId(1);
/// Holds 0..50.
const B: NodeId = NodeId(2);
/// Holds 0..20.
const A: NodeId = NodeId(3);
/// The controller's node, outside the log's replicas.
const CONTROLLER: NodeId = NodeId(4);

fn stored(coordinator: &MemoryCoordinator) -> LogState {
    coordinator.log_state(LOG).unwrap().unwrap()
}

fn end(offset: u64) -> LogEnd {
    LogEnd {
        last_epoch: Some(LeaderEpoch(0)),
        log_end_offset: Offset(offset),
        ..Default::default()
    }
}

/// Every replica of the log lost power and came back: B and A report
/// their ends, C reports its end as not known. Nodes in `live` are
/// registered again.
fn every_replica_restarted_uncleanly(coordinator: &MemoryCoordinator, live: &[NodeId]) {
    for node in [C, B, A, CONTROLLER] {
        coordinator.register_node(node, SESSION_LONG).unwrap();
    }
    coordinator.create_log(LOG, vec![C, B, A]).unwrap();
    for node in [C, B, A] {
        coordinator.fail_node(node);
    }
    coordinator
        .report_unclean_shutdown(B, &[(LOG, Some(end(50)))])
        .unwrap();
    coordinator
        .report_unclean_shutdown(A, &[(LOG, Some(end(20)))])
        .unwrap();
    coordinator
        .report_unclean_shutdown(C, &[(LOG, None)])
        .unwrap();
    for node in live {
        coordinator.register_node(*node, SESSION_LONG).unwrap();
    }
    let state = stored(coordinator);
    assert!(state.in_unclean_recovery(), "{state:?}");
    assert_eq!(
        state
            .unclean_replicas
            .iter()
            .find(|r| r.node == C)
            .map(|r| r.log_end.clone()),
        Some(None),
        "{state:?}"
    );
}

fn controller(coordinator: &MemoryCoordinator, unclean_leader_election: bool) -> Controller {
    Controller::start(
        CONTROLLER,
        Arc::new(coordinator.for_node(CONTROLLER)),
        ControllerConfig {
            unclean_leader_election,
            unclean_recovery_wait_max: RECOVERY_WAIT,
            poll_interval: Duration::from_millis(20),
            ..ControllerConfig::default()
        },
    )
    .unwrap()
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn unclean_recovery_waits_for_a_live_replica_whose_log_end_is_not_known() {
    let coordinator = MemoryCoordinator::new(Arc::new(ManualClock::default()));
    every_replica_restarted_uncleanly(&coordinator, &[C, B, A]);
    let controller = controller(&coordinator, false);
    wait_until("the controller is active", || controller.is_active());
    // Well past the recovery wait: C is live, so it is still waited for.
    std::thread::sleep(RECOVERY_WAIT * 3);
    let state = stored(&coordinator);
    assert_eq!(state.leader, None, "elected without C's end: {state:?}");

    // C's replica opens (with the cut) and its node reports where it ends.
    let update = state
        .unclean_shutdown_update(C, Some(end(120)))
        .expect("C's end replaces the unknown one");
    let written = coordinator
        .compare_and_set(LOG, state.leader_epoch, state.version, update)
        .unwrap();
    assert!(matches!(written, CasOutcome::Applied(_)), "{written:?}");
    wait_until("C, the longest log, leads", || {
        stored(&coordinator).leader == Some(C)
    });
    assert_eq!(controller.unclean_elections(), 0);
}

#[test]
fn a_replica_whose_log_end_is_not_known_and_stays_away_is_waited_for_without_the_switch() {
    let coordinator = MemoryCoordinator::new(Arc::new(ManualClock::default()));
    every_replica_restarted_uncleanly(&coordinator, &[B, A]);
    let controller = controller(&coordinator, false);
    wait_until("the controller is active", || controller.is_active());
    std::thread::sleep(RECOVERY_WAIT * 3);
    let state = stored(&coordinator);
    assert_eq!(state.leader, None, "elected without C's end: {state:?}");
    // C comes back and reports: it leads.
    coordinator.register_node(C, SESSION_LONG).unwrap();
    let update = state
        .unclean_shutdown_update(C, Some(end(120)))
        .expect("C's end replaces the unknown one");
    coordinator
        .compare_and_set(LOG, state.leader_epoch, state.version, update)
        .unwrap();
    wait_until("C leads", || stored(&coordinator).leader == Some(C));
    assert_eq!(controller.unclean_elections(), 0);
}

#[test]
fn the_unclean_switch_passes_over_a_replica_whose_log_end_is_not_known_after_the_wait() {
    let coordinator = MemoryCoordinator::new(Arc::new(ManualClock::default()));
    every_replica_restarted_uncleanly(&coordinator, &[B, A]);
    let started = Instant::now();
    let controller = controller(&coordinator, true);
    wait_until("B, the longest known log, leads", || {
        stored(&coordinator).leader == Some(B)
    });
    assert!(
        started.elapsed() >= RECOVERY_WAIT,
        "elected after {:?}, before the recovery wait",
        started.elapsed()
    );
    wait_until("the election is counted as unclean", || {
        controller.unclean_elections() == 1
    });
}
