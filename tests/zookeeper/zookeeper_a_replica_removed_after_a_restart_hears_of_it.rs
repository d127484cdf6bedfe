//! SPEC 3.10: a replica that a reassignment removes hears of the change
//! that removed it (to stop and delete its copy), also when its process
//! connected after the move added it and nothing wrote the log since.
//!
//! A `ZkCoordinator` tells a change of a log to the replicas of the new
//! state and of the last state it knew. A coordinator that had never read
//! the log knew none, so the completion that removed node 3 reached nodes
//! 4, 1 and 2 only, and node 3 kept its copy and fetched until a reconnect
//! (helper-153's review). It now reads the logs' replicas when it connects.

use std::time::Duration;

use isrlog::{
    Assignment, CasOutcome, Coordinator, CoordinatorEvent, LogId, LogState, LogUpdate, NodeId,
    ZkCoordinator, ZkCoordinatorConfig,
};

fn coordinator(connect: String) -> ZkCoordinator {
    let mut config = ZkCoordinatorConfig::new(connect);
    config.chroot = "/removed-after-restart".to_owned();
    ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"))
}

fn nodes(ids: &[u32]) -> Vec<NodeId> {
    ids.iter().copied().map(NodeId).collect()
}

fn applied(outcome: CasOutcome) -> LogState {
    match outcome {
        CasOutcome::Applied(state) => state,
        other => panic!("not applied: {other:?}"),
    }
}

#[test]
fn a_replica_removed_after_its_process_restarted_hears_of_it() {
    let server = crate::zookeeper_support::server();
    let c = coordinator(server.connect_string());
    let log = LogId(1);
    let created = c.create_log(log, nodes(&[1, 2, 3])).unwrap();
    let move_update = |state: &LogState, isr: &[u32], assignment: Assignment| LogUpdate {
        leader: state.leader,
        leader_epoch: state.leader_epoch.next(),
        in_sync_replicas: nodes(isr),
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: Some(assignment),
    };
    let started = applied(
        c.compare_and_set(
            log,
            created.leader_epoch,
            created.version,
            move_update(
                &created,
                &[1, 2, 3],
                Assignment {
                    replicas: nodes(&[4, 1, 2, 3]),
                    adding_replicas: nodes(&[4]),
                    removing_replicas: nodes(&[3]),
                },
            ),
        )
        .unwrap(),
    );
    // Node 3's process starts now: its coordinator never saw the log.
    let restarted = coordinator(server.connect_string());
    let removed = restarted.subscribe(NodeId(3)).unwrap();
    let completed = applied(
        c.compare_and_set(
            log,
            started.leader_epoch,
            started.version,
            move_update(
                &started,
                &[1, 2, 4],
                Assignment {
                    replicas: nodes(&[4, 1, 2]),
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                },
            ),
        )
        .unwrap(),
    );
    assert!(!completed.replicas.contains(&NodeId(3)));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match removed.recv_timeout(left) {
            Ok(CoordinatorEvent::LogChanged(state)) if state == completed => break,
            Ok(_) => {}
            Err(error) => panic!("node 3 never heard that it was removed ({error})"),
        }
    }
}
