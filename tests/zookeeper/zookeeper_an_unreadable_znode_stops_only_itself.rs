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
    Acks, Coordinator, Error, LeaderEpoch, LogId, LogUpdate, NodeId, ReplicatedLog, ZkCoordinator,
    ZkCoordinatorConfig,
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
        Err(Error::CoordinatorDocument { path, reason }) => {
            assert!(path == "/logs/7" && reason.contains("EOF"), "{reason}")
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
        Err(Error::CoordinatorDocument { path, reason }) => assert!(
            path == "/logs/1" && reason.contains("from_a_newer_node"),
            "{reason}"
        ),
        other => panic!("a write over an unknown field must be refused, got {other:?}"),
    }
    let (after, after_version) = raw.get("/logs/1").unwrap();
    assert_eq!(after_version, version, "nothing was written");
    assert_eq!(String::from_utf8(after).unwrap(), newer);

    // The controller epoch record is one per cluster: readable, and an
    // election writes the unknown field back unchanged rather than being
    // refused, which would stop every election (issue 24 review).
    let record = raw.get("/controller_epoch").unwrap().0;
    let record = String::from_utf8(record).unwrap();
    assert_eq!(record, r#"{"format":1,"epoch":0,"controller":null}"#);
    raw.set(
        "/controller_epoch",
        br#"{"format":1,"epoch":1,"controller":2,"term":3}"#,
    )
    .unwrap();
    assert_eq!(c.controller().unwrap(), None, "the record reads; no seat");
    let epoch = c
        .try_become_controller(a)
        .expect("an unknown field does not stop elections")
        .expect("the seat is free");
    assert_eq!(epoch.0, 2);
    let record = String::from_utf8(raw.get("/controller_epoch").unwrap().0).unwrap();
    assert!(record.contains(r#""term":3"#), "{record}");
}

/// The same two documents under a running cluster, the rolling-upgrade case:
/// a newer node has written a field this version does not know into one
/// log's document and a newer format version into another's. The log with
/// the unknown field keeps serving `acks=all` appends (its data path needs
/// no coordinator write while its ISR is stable), the log with the newer
/// format is unavailable alone with an error that names its znode and the
/// format, and every other log keeps failing over while nodes stop and
/// start. Nothing writes over the newer node's field.
#[test]
fn newer_documents_in_a_running_cluster_stop_only_their_own_changes() {
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .build()
        .expect("cluster");
    let (plain, unknown_field, newer_format) = (LogId(0), LogId(1), LogId(2));
    for log in [plain, unknown_field, newer_format] {
        cluster.create_log(log, 3).expect("create log");
        let leader = cluster.leader_log(log).expect("a leader");
        leader
            .append_values(&[b"before the upgrade"], Acks::All)
            .expect("append before the upgrade");
    }

    let raw = ZkShell::connect(&server.connect_string(), cluster.chroot()).expect("shell");
    let (data, _) = raw.get("/logs/1").unwrap();
    let newer = String::from_utf8(data)
        .unwrap()
        .replacen('{', "{\"from_a_newer_node\":[1,2],", 1);
    raw.set("/logs/1", newer.as_bytes()).unwrap();
    let (data, _) = raw.get("/logs/2").unwrap();
    let text = String::from_utf8(data).unwrap();
    assert!(text.contains("\"format\":1"), "{text}");
    raw.set(
        "/logs/2",
        text.replacen("\"format\":1", "\"format\":2", 1).as_bytes(),
    )
    .unwrap();

    let coordinator = cluster.coordinator();
    let mut readable: Vec<LogId> = coordinator
        .logs()
        .expect("the other logs read")
        .iter()
        .map(|state| state.log)
        .collect();
    readable.sort_unstable();
    assert_eq!(readable, vec![plain, unknown_field]);
    match coordinator.log_state(newer_format) {
        Err(Error::CoordinatorDocument { path, reason }) => {
            assert!(path == "/logs/2" && reason.contains("format 2"), "{reason}")
        }
        other => panic!("a newer format must be a clear error, got {other:?}"),
    }

    // The log with the unknown field serves acks=all appends.
    let serving = cluster.leader_log(unknown_field).expect("a leader");
    for i in 0..20u32 {
        serving
            .append_values(&[format!("during the upgrade {i}")], Acks::All)
            .expect("acks=all on a log whose document has an unknown field");
    }

    // A node stops and starts again; the plain log then fails over when
    // its leader crashes.
    // The node bounced first led the newer-format log, the one crashed next
    // leads the plain log but not the one with the unknown field (whose
    // leader no election of this version can replace).
    let bounced = coordinator
        .live_nodes()
        .unwrap()
        .into_iter()
        .find(|node| {
            Some(*node) != cluster.leader_of(plain)
                && Some(*node) != cluster.leader_of(unknown_field)
        })
        .expect("a third node");
    cluster.stop_node(bounced).expect("stop a node");
    cluster
        .restart(bounced)
        .expect("a node starts beside newer documents");
    // Back in the plain log's ISR first, so that a failover has a second
    // in-sync replica to satisfy min.insync.replicas.
    wait_for_full_isr(&cluster, plain, bounced);
    eprintln!(
        "after {bounced} stopped and started: ISR of {plain} {:?}, of {unknown_field} {:?}",
        cluster.in_sync_replicas(plain),
        cluster.in_sync_replicas(unknown_field)
    );
    let old_leader = cluster.leader_of(plain).expect("a leader");
    assert_ne!(Some(old_leader), cluster.leader_of(unknown_field));
    cluster.crash(old_leader);
    assert!(
        cluster.wait_until(Duration::from_secs(20), |c| {
            c.leader_of(plain)
                .is_some_and(|leader| leader != old_leader)
        }),
        "{plain} did not fail over away from {old_leader}: {:?}",
        cluster.leader_of(plain)
    );
    let after = cluster.leader_log(plain).expect("the new leader");
    after
        .append_values(&[b"after the failover"], Acks::All)
        .expect("append after the failover");
    assert_eq!(after.high_watermark(), isrlog::Offset(2));
    // The crashed node starts, although its unclean-shutdown report cannot
    // be written into log 1's document: it stays out of log 1 (neither
    // leads nor fetches, SPEC 3.5) and takes part in the others.
    cluster
        .restart(old_leader)
        .expect("a node that crashed starts beside a document it cannot change");
    wait_for_full_isr(&cluster, plain, old_leader);
    // Both reports are pending. Log 2's document could not be read at
    // start, so the report at start never saw that log: the end pending
    // for it is what the replica holds (one record), not "empty", which
    // would let unclean recovery pass over it.
    let pending = cluster
        .with_node(old_leader, |node| node.pending_unclean_reports())
        .expect("running");
    let pending_logs: Vec<LogId> = pending.iter().map(|(log, _)| *log).collect();
    assert_eq!(
        pending_logs,
        vec![unknown_field, newer_format],
        "{pending:?}"
    );
    let end = pending[1]
        .1
        .clone()
        .expect("the replica opened: its end is known");
    assert_eq!(end.log_end_offset, isrlog::Offset(1), "{pending:?}");
    assert!(end.last_epoch.is_some(), "{pending:?}");
    let stored = coordinator
        .log_state(unknown_field)
        .unwrap()
        .expect("log 1");
    assert!(
        stored.in_sync_replicas.contains(&old_leader) && stored.leader != Some(old_leader),
        "the report could not be written, so the document is unchanged: {stored:?}"
    );
    let (kept, _) = raw.get("/logs/1").unwrap();
    assert!(
        String::from_utf8(kept)
            .unwrap()
            .contains("\"from_a_newer_node\":[1,2]"),
        "the newer node's field was written over"
    );
    let stayed_out = cluster.log(old_leader, unknown_field).expect("hosted");
    assert!(!stayed_out.is_leader());
    let end_while_out = stayed_out.log_end_offset();
    let log_one_leader = stored.leader.expect("log 1 keeps its leader");
    let serving = cluster
        .log(log_one_leader, unknown_field)
        .expect("log 1's leader");
    assert_stays_out(
        &serving,
        &stayed_out,
        end_while_out,
        "a replica whose unclean shutdown is unreported must not fetch",
    );

    // A clean stop while the report is pending writes no clean-shutdown
    // marker: the next start reports again and still stays out.
    cluster.stop_node(old_leader).expect("a clean stop");
    cluster
        .restart(old_leader)
        .expect("a start after the clean stop");
    let stayed_out = cluster.log(old_leader, unknown_field).expect("hosted");
    assert_stays_out(
        &serving,
        &stayed_out,
        end_while_out,
        "a clean stop must not make the pending report forgotten",
    );

    // An upgraded node finishes its change and drops the field: the
    // document notifies, the report is recorded, and the replica fetches.
    raw.set("/logs/1", text_without_field(&raw, "/logs/1").as_bytes())
        .unwrap();
    assert!(
        cluster.wait_until(Duration::from_secs(20), |_| {
            stayed_out.log_end_offset() == serving.log_end_offset()
        }),
        "the replica did not take part in log 1 once its report could be recorded: {} of {}",
        stayed_out.log_end_offset(),
        serving.log_end_offset()
    );

    // Log 2 goes back to this version's format: the last pending report is
    // recorded and the log takes acks=all appends again.
    raw.set("/logs/2", text.as_bytes()).unwrap();
    assert!(
        cluster.wait_until(Duration::from_secs(20), |c| {
            c.with_node(old_leader, |node| node.pending_unclean_reports().is_empty())
                .unwrap_or(false)
        }),
        "the report for log 2 was not recorded once its document was readable"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let appended = cluster
            .leader_log(newer_format)
            .and_then(|leader| leader.append_values(&[b"after the downgrade"], Acks::All));
        match appended {
            Ok(_) => break,
            Err(error) if std::time::Instant::now() < deadline => {
                eprintln!("log 2 not writable yet: {error}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("log 2 never took acks=all again: {error}"),
        }
    }
    cluster.shutdown().expect("shutdown");
}

/// The document at `path` with the newer node's field removed, as an
/// upgraded node that finished its change would write it.
fn text_without_field(raw: &ZkShell, path: &str) -> String {
    let (data, _) = raw.get(path).unwrap();
    String::from_utf8(data)
        .unwrap()
        .replacen("\"from_a_newer_node\":[1,2],", "", 1)
}

/// Waits until every replica of `log` is in its ISR again, after `rejoined`
/// stopped and started.
fn wait_for_full_isr(cluster: &ZkCluster, log: LogId, rejoined: NodeId) {
    assert!(
        cluster.wait_until(Duration::from_secs(20), |c| c.in_sync_replicas(log).len()
            == 3),
        "{rejoined} did not rejoin the ISR of {log}: {:?}",
        cluster.in_sync_replicas(log)
    );
}

/// Appends to `serving` (acks=1) and checks, half a second later, that the
/// kept-out replica `out` neither leads nor fetched: its log end is still
/// `end`.
fn assert_stays_out(serving: &ReplicatedLog, out: &ReplicatedLog, end: isrlog::Offset, why: &str) {
    serving
        .append_values(&[b"while a replica stays out"], Acks::Leader)
        .expect("acks=1 on the log");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!out.is_leader(), "{why}");
    assert_eq!(out.log_end_offset(), end, "{why}");
}
