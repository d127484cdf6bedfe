//! Issue 23 / SPEC 3.5 (KIP-966 balanced unclean recovery): with
//! `unclean_leader_election` on, a log whose ISR and ELR members are away
//! while one of them came back uncleanly and reported its log end waits
//! `unclean_recovery_wait_max` for the others before the unclean switch
//! decides; after the wait, the live replica with the longest reported log
//! leads (counted as unclean). A log without any unclean report is elected
//! uncleanly at once, as before (`controller_elections`,
//! `unclean_election_makes_the_first_live_replica_leader_alone`).
//!
//! The controller runs against a `MemoryCoordinator` with fake nodes
//! (sessions only); the wait is the controller's real time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::{
    Controller, ControllerConfig, Coordinator, LeaderEpoch, LogEnd, LogId, LogState, ManualClock,
    MemoryCoordinator, NodeId, Offset, UncleanReplica,
};

const SESSION_LONG: Duration = Duration::from_secs(3600);
const WAIT_MAX: Duration = Duration::from_secs(10);
const LOG: LogId = LogId(1);
const N1: NodeId = NodeId(1);
const N2: NodeId = NodeId(2);
const N3: NodeId = NodeId(3);
/// The controller's node: a fourth node, outside the log's replicas.
const N4: NodeId = NodeId(4);

fn stored(coordinator: &MemoryCoordinator) -> LogState {
    coordinator.log_state(LOG).unwrap().unwrap()
}

/// Log 1 on nodes 1, 2, 3, led by 1 with all three in sync; nodes 2 and 3
/// are gone (nobody has elected anything yet), and node 1 restarts
/// uncleanly with its log ending at offset 5 in epoch 0: it leaves the ISR
/// for the unclean list, and the log is leaderless with ISR {2, 3}.
fn recovering_log(coordinator: &MemoryCoordinator) {
    for node in [N1, N2, N3, N4] {
        coordinator.register_node(node, SESSION_LONG).unwrap();
    }
    coordinator.create_log(LOG, vec![N1, N2, N3]).unwrap();
    coordinator.fail_node(N2);
    coordinator.fail_node(N3);
    let end = LogEnd {
        last_epoch: Some(LeaderEpoch(0)),
        log_end_offset: Offset(5),
        ..Default::default()
    };
    coordinator.fail_node(N1);
    coordinator
        .report_unclean_shutdown(N1, &[(LOG, Some(end.clone()))])
        .unwrap();
    coordinator.register_node(N1, SESSION_LONG).unwrap();
    let state = stored(coordinator);
    assert_eq!(state.leader, None, "{state:?}");
    assert_eq!(state.in_sync_replicas, vec![N2, N3], "{state:?}");
    assert_eq!(
        state.unclean_replicas,
        vec![UncleanReplica {
            node: N1,
            acknowledged_end: None,
            log_end: Some(end)
        }]
    );
}

fn controller(coordinator: &MemoryCoordinator, wait: Duration) -> Controller {
    Controller::start(
        N4,
        Arc::new(coordinator.for_node(N4)),
        ControllerConfig {
            unclean_leader_election: true,
            unclean_recovery_wait_max: wait,
            poll_interval: Duration::from_millis(50),
            ..ControllerConfig::default()
        },
    )
    .unwrap()
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT_MAX;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_unclean_switch_decides_only_after_the_recovery_wait() {
    let coordinator = MemoryCoordinator::new(Arc::new(ManualClock::default()));
    recovering_log(&coordinator);
    let wait = Duration::from_millis(600);
    let started = Instant::now();
    let controller = controller(&coordinator, wait);
    wait_until("node 4 is controller", || controller.is_active());
    wait_until("the unclean switch elects node 1", || {
        stored(&coordinator).leader == Some(N1)
    });
    assert!(
        started.elapsed() >= wait,
        "elected after {:?}, before the recovery wait of {wait:?}",
        started.elapsed()
    );
    let state = stored(&coordinator);
    assert_eq!(state.in_sync_replicas, vec![N1], "{state:?}");
    assert!(state.unclean_replicas.is_empty(), "{state:?}");
    wait_until("the election is counted as unclean", || {
        controller.unclean_elections() >= 1
    });
    assert_eq!(controller.unclean_elections(), 1);
}

#[test]
fn an_isr_member_back_within_the_recovery_wait_leads_cleanly() {
    let coordinator = MemoryCoordinator::new(Arc::new(ManualClock::default()));
    recovering_log(&coordinator);
    let controller = controller(&coordinator, SESSION_LONG);
    wait_until("node 4 is controller", || controller.is_active());
    // Long enough for a (wrong) unclean election to happen.
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(stored(&coordinator).leader, None, "the switch did not wait");
    // Node 3 comes back cleanly: still in the ISR, it leads.
    coordinator.register_node(N3, SESSION_LONG).unwrap();
    wait_until("node 3 leads", || stored(&coordinator).leader == Some(N3));
    assert_eq!(controller.unclean_elections(), 0);
}
