//! Issue 13, part 1 (SPEC 3.5, G1c; Kafka's KIP-966): acknowledged writes
//! survive the power loss of the last in-sync replica when a replica that
//! left the ISR while it was below `min_insync_replicas` comes back with its
//! disk.
//!
//! The bug: 3 nodes, replication factor 3, `min_insync_replicas` 2, unclean
//! election off, the default `FlushPolicy::Never`. "a" is committed; follower
//! 1 crashes and the ISR becomes {leader, follower 2}; "b" is acknowledged;
//! follower 2 crashes and the ISR becomes {leader}; the leader loses power,
//! dropping its unflushed "a" and "b", restarts and — still the only ISR
//! member — was re-elected with log end 0; the followers came back and
//! truncated to it: "a" and "b" were gone, though follower 2 still held
//! both. The fix: follower 2 is kept in the eligible leader replicas (ELR)
//! when it leaves the ISR of one; the leader, restarting without its
//! clean-shutdown marker, reports an unclean shutdown and leaves the ISR;
//! the log stays leaderless until follower 2 is back; then the replica with
//! the longest log (of the newest line) among those that restarted
//! uncleanly leads
//! (`LogState::recovery_leader`): follower 2.
//!
//! Run three ways: controllers on the cluster's nodes (the seat moves as the
//! nodes crash), one controller outside the cluster that runs throughout,
//! and that outside controller crashed and restarted between the steps (the
//! ELR lives in the coordinator, not in a controller's memory); each with
//! the default flush policy and with `FlushPolicy::Always`, under which the
//! leader loses nothing but, as in Kafka, a crash still counts as unclean.

use std::sync::Arc;
use std::time::Duration;

use crate::failover_support::*;
use isrlog::testing::Cluster;
use isrlog::{
    Acks, Controller, ControllerConfig, Coordinator, FlushPolicy, LogConfig, LogId, NodeId, Offset,
    PreviousShutdown, ReplicationConfig,
};

const LOG: LogId = LogId(0);
const LEADER: NodeId = NodeId(0);
const FOLLOWER_1: NodeId = NodeId(1);
const FOLLOWER_2: NodeId = NodeId(2);
/// The node id of the controller that runs outside the cluster.
const OUTSIDE: NodeId = NodeId(9);
/// Generous on a loaded 2-core machine: every wait is a wait-until loop.
const WAIT: Duration = Duration::from_secs(20);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Controllers {
    /// Every node runs a controller (the usual set-up).
    OnTheNodes,
    /// One controller outside the cluster, running throughout.
    OutsideSteady,
    /// The outside controller crashes and a new one starts after each of
    /// the crash steps.
    OutsideRestarted,
}

/// A controller outside the cluster, with its own coordinator session.
struct OutsideController {
    coordinator: isrlog::MemoryCoordinator,
    controller: Option<Controller>,
}

impl OutsideController {
    fn config() -> ControllerConfig {
        ControllerConfig {
            unclean_leader_election: false,
            poll_interval: Duration::from_millis(100),
            min_insync_replicas: 2,
            ..ControllerConfig::default()
        }
    }

    fn start(cluster: &Cluster) -> OutsideController {
        let coordinator = cluster.coordinator.for_node(OUTSIDE);
        let mut outside = OutsideController {
            coordinator,
            controller: None,
        };
        outside.launch();
        outside
    }

    fn launch(&mut self) {
        self.coordinator
            .register_node(OUTSIDE, Duration::from_secs(3600))
            .unwrap();
        let controller = Controller::start(
            OUTSIDE,
            Arc::new(self.coordinator.clone()),
            OutsideController::config(),
        )
        .unwrap();
        self.controller = Some(controller);
        let deadline = std::time::Instant::now() + WAIT;
        while self.coordinator.controller().unwrap().map(|(node, _)| node) != Some(OUTSIDE) {
            assert!(
                std::time::Instant::now() < deadline,
                "the outside controller never took the seat"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A crash of the controller's process: the seat is freed when its
    /// session ends (at once here), and a new controller starts from
    /// nothing but the coordinator's state.
    fn crash_and_restart(&mut self) {
        if let Some(mut controller) = self.controller.take() {
            controller.halt_for_crash();
        }
        self.coordinator.fail_node(OUTSIDE);
        self.launch();
    }
}

fn cluster(controllers: Controllers, flush_policy: FlushPolicy) -> Cluster {
    let controller = match controllers {
        Controllers::OnTheNodes => Some(ControllerConfig {
            unclean_leader_election: false,
            poll_interval: Duration::from_millis(100),
            ..ControllerConfig::default()
        }),
        Controllers::OutsideSteady | Controllers::OutsideRestarted => None,
    };
    Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(3600))
        .replication(ReplicationConfig {
            replica_lag_time_max: Duration::from_secs(10),
            ..replication(2)
        })
        .log_config(LogConfig {
            flush_policy,
            ..LogConfig::default()
        })
        .controller(controller)
        .build()
        .unwrap()
}

fn eligible_leader_replicas(cluster: &Cluster) -> Vec<NodeId> {
    cluster
        .coordinator
        .log_state(LOG)
        .unwrap()
        .map(|state| state.eligible_leader_replicas)
        .unwrap_or_default()
}

fn wait_for(cluster: &Cluster, what: &str, condition: impl FnMut(&Cluster) -> bool) {
    assert!(
        cluster.wait_until(WAIT, condition),
        "timed out waiting until {what}: {:?}",
        cluster.coordinator.log_state(LOG).unwrap()
    );
}

fn previous_shutdown(cluster: &Cluster, node: NodeId) -> PreviousShutdown {
    cluster.with_node(node, |n| n.previous_shutdown()).unwrap()
}

fn reproduction(controllers: Controllers, flush_policy: FlushPolicy) {
    let cluster = cluster(controllers, flush_policy);
    let mut outside = match controllers {
        Controllers::OnTheNodes => None,
        _ => Some(OutsideController::start(&cluster)),
    };
    let restart_controller = |outside: &mut Option<OutsideController>| {
        if controllers == Controllers::OutsideRestarted {
            outside.as_mut().unwrap().crash_and_restart();
        }
    };
    assert_eq!(
        cluster.create_log(LOG, 3).unwrap(),
        vec![LEADER, FOLLOWER_1, FOLLOWER_2]
    );
    for node in [LEADER, FOLLOWER_1, FOLLOWER_2] {
        assert_eq!(previous_shutdown(&cluster, node), PreviousShutdown::Fresh);
    }
    let leader = cluster.leader_log(LOG).unwrap();
    assert_eq!(leader.node_id(), LEADER);

    // 1. "a" committed; follower 1 crashes and leaves the ISR.
    leader.append_values(&["a"], Acks::All).unwrap();
    cluster.crash(FOLLOWER_1);
    wait_for(&cluster, "the ISR is {leader, follower 2}", |c| {
        c.in_sync_replicas(LOG) == vec![LEADER, FOLLOWER_2]
    });
    assert_eq!(
        eligible_leader_replicas(&cluster),
        vec![],
        "ISR at the minimum: no ELR"
    );
    restart_controller(&mut outside);

    // 2. "b" acknowledged.
    let b = leader.append_values(&["b"], Acks::All).unwrap();
    assert_eq!(b.last_offset, Offset(1));

    // 3. Follower 2 crashes; the ISR is the leader alone, and follower 2,
    //    which held everything up to the high watermark, is eligible.
    cluster.crash(FOLLOWER_2);
    wait_for(&cluster, "the ISR is the leader alone", |c| {
        c.in_sync_replicas(LOG) == vec![LEADER]
    });
    assert_eq!(eligible_leader_replicas(&cluster), vec![FOLLOWER_2]);
    restart_controller(&mut outside);

    // 4. The leader loses power (and, by default, its unflushed "a" and
    //    "b"), then restarts: no clean-shutdown marker, so it reports an
    //    unclean shutdown and is not re-elected; follower 2 is still out.
    cluster.crash_losing_unflushed(LEADER, 13);
    cluster.restart(LEADER).unwrap();
    assert_eq!(
        previous_shutdown(&cluster, LEADER),
        PreviousShutdown::Unclean
    );
    restart_controller(&mut outside);
    let state = cluster.coordinator.log_state(LOG).unwrap().unwrap();
    assert_eq!(
        state.leader, None,
        "the leader that lost power leads again: {state:?}"
    );
    assert!(state.in_sync_replicas.is_empty(), "{state:?}");
    assert_eq!(
        state.eligible_leader_replicas,
        vec![FOLLOWER_2],
        "{state:?}"
    );

    // 5. Both followers come back, follower 1 first: it was never eligible,
    //    so the log stays leaderless until follower 2 is back.
    cluster.restart(FOLLOWER_1).unwrap();
    assert_eq!(
        previous_shutdown(&cluster, FOLLOWER_1),
        PreviousShutdown::Unclean
    );
    // Long enough for a (wrong) election to happen; the state must not move.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cluster.leader_of(LOG), None, "nobody eligible is back yet");
    cluster.restart(FOLLOWER_2).unwrap();
    assert_eq!(
        previous_shutdown(&cluster, FOLLOWER_2),
        PreviousShutdown::Unclean
    );
    // Follower 2 restarted uncleanly too: the ISR and ELR are empty, and
    // the controller elects the longest log among the replicas that
    // restarted uncleanly (unclean recovery, `LogState::recovery_leader`):
    // follower 2, which kept "a" and "b", where the old leader lost them
    // under `FlushPolicy::Never`. Under `FlushPolicy::Always` the old leader
    // kept them too; the tie goes to assignment order.
    let expected_leader = if flush_policy == FlushPolicy::Always {
        LEADER
    } else {
        FOLLOWER_2
    };
    wait_for(&cluster, "the longest log leads", |c| {
        c.leader_of(LOG) == Some(expected_leader)
    });
    let new_leader = cluster.leader_log(LOG).unwrap();
    assert_eq!(new_leader.node_id(), expected_leader);

    // Everyone catches up from the new leader; the log takes writes again.
    wait_for(&cluster, "the ISR is whole again", |c| {
        c.in_sync_replicas(LOG).len() == 3
    });
    assert_eq!(eligible_leader_replicas(&cluster), vec![]);
    new_leader.append_values(&["c"], Acks::All).unwrap();
    let handles: Vec<_> = [LEADER, FOLLOWER_1, FOLLOWER_2]
        .iter()
        .map(|&node| cluster.log(node, LOG).unwrap())
        .collect();
    assert!(
        wait_converged(&cluster, &handles.iter().collect::<Vec<_>>(), Offset(3)),
        "the replicas did not converge on offset 3"
    );
    for handle in &handles {
        assert_eq!(
            committed_values(handle),
            vec![(0, "a".into()), (1, "b".into()), (2, "c".into())],
            "on {}",
            handle.node_id()
        );
    }
}

#[test]
fn elr_keeps_acknowledged_writes_after_power_loss_controllers_on_the_nodes() {
    reproduction(Controllers::OnTheNodes, FlushPolicy::Never);
}

#[test]
fn elr_keeps_acknowledged_writes_after_power_loss_steady_controller() {
    reproduction(Controllers::OutsideSteady, FlushPolicy::Never);
}

#[test]
fn elr_keeps_acknowledged_writes_after_power_loss_restarted_controller() {
    reproduction(Controllers::OutsideRestarted, FlushPolicy::Never);
}

#[test]
fn elr_keeps_acknowledged_writes_after_power_loss_flush_always_controllers_on_the_nodes() {
    reproduction(Controllers::OnTheNodes, FlushPolicy::Always);
}

#[test]
fn elr_keeps_acknowledged_writes_after_power_loss_flush_always_restarted_controller() {
    reproduction(Controllers::OutsideRestarted, FlushPolicy::Always);
}
