//! Issue 24, item 2: one znode the coordinator cannot read must not stop
//! the whole cluster. Bulk reads (every log, the live nodes) used to fail
//! on a single child znode that is not an id, or a log document that does
//! not decode: then no controller pass completed, no log failed over and no
//! node could start. Now they skip it (with a warning), the rest of the
//! cluster goes on, and only operations on that one log fail, naming its
//! znode and the reason. A newer node's unknown field is read, and writing
//! over it is refused rather than dropping it.

use std::time::Duration;

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::ZkShell;
use isrlog::testing::ZkCluster;
use isrlog::{
    Coordinator, Error, LeaderEpoch, LogId, LogUpdate, NodeId, ZkCoordinator, ZkCoordinatorConfig,
};

const SESSION_TIMEOUT: Duration = Duration::from_secs(1);

#[test]
fn a_foreign_znode_and_a_corrupt_document_do_not_stop_failover_or_node_start() {
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .build()
        .expect("cluster");
    let logs = [LogId(0), LogId(1), LogId(2)];
    for log in logs {
        cluster.create_log(log, 3).expect("create log");
    }
    let raw = ZkShell::connect(&server.connect_string(), cluster.chroot()).expect("shell");
    raw.create("/logs/not-a-log", b"").unwrap();
    raw.create("/logs/7", b"{\"format\":1,\"replicas\":[")
        .unwrap();
    raw.create("/nodes/intruder", b"").unwrap();

    let coordinator = cluster.coordinator();
    let mut readable: Vec<LogId> = coordinator
        .logs()
        .expect("every other log reads")
        .iter()
        .map(|state| state.log)
        .collect();
    readable.sort_unstable();
    assert_eq!(readable, logs.to_vec());
    assert_eq!(
        coordinator.live_nodes().expect("the live nodes read"),
        vec![NodeId(0), NodeId(1), NodeId(2)]
    );
    match coordinator.log_state(LogId(7)) {
        Err(Error::Coordinator { reason }) => {
            assert!(
                reason.contains("/logs/7") && reason.contains("EOF"),
                "{reason}"
            )
        }
        other => panic!("the corrupt log must be a clear error, got {other:?}"),
    }

    // A node starts with the foreign znodes there, and every log fails over
    // when a leader goes.
    let restarted = NodeId(2);
    cluster.stop_node(restarted).expect("stop a node");
    cluster
        .restart(restarted)
        .expect("a node starts despite the foreign znodes");
    let old_leader = cluster.leader_of(LogId(0)).expect("a leader");
    cluster.crash(old_leader);
    assert!(
        cluster.wait_until(Duration::from_secs(20), |c| {
            logs.iter()
                .all(|log| c.leader_of(*log).is_some_and(|leader| leader != old_leader))
        }),
        "the logs did not fail over away from {old_leader}: {:?}",
        logs.map(|log| cluster.leader_of(log))
    );
    assert!(
        coordinator
            .controller()
            .expect("the controller reads")
            .is_some(),
        "no controller sits"
    );
}

#[test]
fn a_newer_nodes_unknown_field_is_read_and_never_written_over() {
    let server = server();
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = "/rolling-upgrade".to_owned();
    let c = ZkCoordinator::connect(config.clone()).expect("connect");
    let (a, b) = (NodeId(1), NodeId(2));
    c.register_node(a, Duration::from_secs(20)).unwrap();
    c.register_node(b, Duration::from_secs(20)).unwrap();
    let created = c.create_log(LogId(1), vec![a, b]).unwrap();
    let raw = ZkShell::connect(&server.connect_string(), &config.chroot).expect("shell");

    // A newer node rewrites the log with a field this version lacks.
    let (data, _) = raw.get("/logs/1").unwrap();
    let text = String::from_utf8(data).unwrap();
    let newer = text.replacen('{', "{\"from_a_newer_node\":{\"x\":[1]},", 1);
    let version = raw.set("/logs/1", newer.as_bytes()).unwrap();
    let read = c.log_state(LogId(1)).unwrap().expect("the log reads");
    assert_eq!(read.version, u64::try_from(version).unwrap());
    assert_eq!(read.in_sync_replicas, created.in_sync_replicas);
    assert_eq!(c.logs().unwrap().len(), 1);

    let update = LogUpdate::in_sync_replicas(&read, vec![a], 1);
    match c.compare_and_set(
        LogId(1),
        LeaderEpoch(read.leader_epoch.0),
        read.version,
        update,
    ) {
        Err(Error::Coordinator { reason }) => assert!(
            reason.contains("/logs/1") && reason.contains("from_a_newer_node"),
            "{reason}"
        ),
        other => panic!("a write over an unknown field must be refused, got {other:?}"),
    }
    let (after, after_version) = raw.get("/logs/1").unwrap();
    assert_eq!(after_version, version, "nothing was written");
    assert_eq!(String::from_utf8(after).unwrap(), newer);

    // The same for the controller record: readable, but no election writes
    // over it.
    let record = raw.get("/controller").unwrap().0;
    let record = String::from_utf8(record).unwrap();
    assert_eq!(record, r#"{"format":1,"epoch":0,"controller":null}"#);
    raw.set(
        "/controller",
        br#"{"format":1,"epoch":1,"controller":2,"term":3}"#,
    )
    .unwrap();
    assert_eq!(c.controller().unwrap(), None, "the record reads; no seat");
    match c.try_become_controller(a) {
        Err(Error::Coordinator { reason }) => {
            assert!(
                reason.contains("/controller") && reason.contains("term"),
                "{reason}"
            )
        }
        other => panic!("an election over an unknown field must be refused, got {other:?}"),
    }
}
