//! SPEC 2.6 / 3.9: with `retain_until_applied`, deletion never passes the
//! lowest applied position over a log's replicas (a replica that is down
//! keeps the last one it reported, and a new leader knows them), unless the
//! configured cap has passed; `delete_records_before` deletes exactly, within
//! the same bound, on every replica, and the new log start survives restarts
//! and failover.

use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{
    Acks, Error, Isolation, LogConfig, LogId, NodeId, Offset, ReplicatedLog, ReplicationConfig,
};

pub(super) const LOG: LogId = LogId(0);
pub(super) const WAIT: Duration = Duration::from_secs(10);

pub(super) fn cluster(replication: ReplicationConfig, log: LogConfig) -> Cluster {
    let cluster = Cluster::builder()
        .nodes(3)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            ..replication
        })
        .log_config(log)
        .retention_check_interval(Duration::from_millis(10))
        .build()
        .expect("cluster starts");
    cluster.create_log(LOG, 3).expect("log created");
    cluster
}

pub(super) fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes_max: 8 * 1024,
        retention_bytes: Some(16 * 1024),
        ..LogConfig::default()
    }
}

fn held(retain: bool) -> ReplicationConfig {
    ReplicationConfig {
        retain_until_applied: retain,
        ..ReplicationConfig::default()
    }
}

/// Appends `count` records of 1000 bytes, `acks=all`.
pub(super) fn append(leader: &ReplicatedLog, count: usize) {
    let value = vec![7u8; 1000];
    for _ in 0..count {
        leader
            .append_values(&[&value[..]], Acks::All)
            .expect("append");
    }
}

/// Waits until the leader knows every running replica's position as that
/// replica reports it.
fn wait_leader_knows_all(cluster: &Cluster, leader: &ReplicatedLog) {
    for log in all_logs(cluster) {
        let own = log.applied_positions().get(&log.node_id()).copied();
        if let Some(applied) = own {
            wait_leader_knows(cluster, leader, log.node_id(), applied);
        }
    }
}

/// Waits until the leader has `node`'s position `applied` from its fetches.
pub(super) fn wait_leader_knows(
    cluster: &Cluster,
    leader: &ReplicatedLog,
    node: NodeId,
    applied: Offset,
) {
    assert!(
        cluster.wait_until(WAIT, |_| leader.applied_positions().get(&node)
            == Some(&applied)),
        "the leader never learned {node}'s position {applied}: {:?}",
        leader.applied_positions()
    );
}

/// Waits until every replica's high watermark is `hw`.
pub(super) fn wait_high_watermark_everywhere(cluster: &Cluster, hw: Offset) {
    for log in all_logs(cluster) {
        assert!(
            cluster.wait_until(WAIT, |_| log.high_watermark() == hw),
            "{} has high watermark {}, not {hw}",
            log.node_id(),
            log.high_watermark()
        );
    }
}

/// The replicas of the running nodes.
pub(super) fn all_logs(cluster: &Cluster) -> Vec<ReplicatedLog> {
    cluster
        .node_ids()
        .into_iter()
        .filter(|node| cluster.is_running(*node))
        .map(|node| cluster.log(node, LOG).expect("replica"))
        .collect()
}

/// Every replica applies up to its high watermark, except `stuck`, whose
/// application applied `stuck_at` and stopped.
fn apply_all_but(cluster: &Cluster, stuck: NodeId, stuck_at: Offset) {
    for log in all_logs(cluster) {
        let applied = if log.node_id() == stuck {
            stuck_at
        } else {
            log.high_watermark()
        };
        log.set_applied(applied).expect("set_applied");
    }
}

#[test]
fn a_stopped_apply_loop_keeps_every_record_it_has_not_applied_under_retention_by_size() {
    let cluster = cluster(held(true), small_segments());
    let leader = cluster.leader_log(LOG).expect("leader");
    let stuck = cluster
        .node_ids()
        .into_iter()
        .find(|n| *n != leader.node_id())
        .expect("a follower");
    for _ in 0..10 {
        append(&leader, 20);
        apply_all_but(&cluster, stuck, Offset(20));
    }
    // Retention ran (the others' positions are far ahead), and it stopped
    // at the stuck replica's position.
    let bound = leader.deletion_bound().expect("bound");
    println!("deletion bound with {stuck} stuck at 20: {bound:?}");
    assert_eq!(bound.bound, Offset(20), "{bound:?}");
    assert_eq!(bound.held_by, Some(stuck), "{bound:?}");
    assert_eq!(bound.held_by_applied, Some(Offset(20)), "{bound:?}");
    assert!(bound.held_bytes > 16 * 1024, "{bound:?}");
    std::thread::sleep(Duration::from_millis(200));
    for log in all_logs(&cluster) {
        assert!(
            log.log_start_offset() <= Offset(20),
            "{}: log start {} passed the stuck application's position 20",
            log.node_id(),
            log.log_start_offset()
        );
    }
    let from_stuck = cluster.log(stuck, LOG).expect("stuck replica");
    let batches = from_stuck
        .read(Offset(20), 4096, Isolation::Committed)
        .expect("the unapplied records are still there");
    assert_eq!(batches.first().map(|b| b.base_offset()), Some(Offset(20)));

    // The application catches up: retention goes on, past 20.
    apply_all_but(&cluster, stuck, from_stuck.high_watermark());
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(20)),
        "retention never went on after the stuck replica applied; bound {:?}",
        leader.deletion_bound()
    );
    cluster.shutdown().expect("shutdown");
}

#[test]
fn without_retain_until_applied_retention_ignores_the_applications() {
    // The control for the test above: the same run deletes past 20 when
    // the applications are not waited for (as in Kafka).
    let cluster = cluster(held(false), small_segments());
    let leader = cluster.leader_log(LOG).expect("leader");
    let stuck = NodeId((leader.node_id().0 + 1) % 3);
    for _ in 0..10 {
        append(&leader, 20);
        apply_all_but(&cluster, stuck, Offset(20));
    }
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(20)),
        "retention by size did not run"
    );
    cluster.shutdown().expect("shutdown");
}

#[test]
fn a_replica_that_never_reported_and_a_stopped_one_hold_deletion_until_the_cap() {
    let cluster = cluster(
        ReplicationConfig {
            applied_hold_bytes_max: Some(64 * 1024),
            ..held(true)
        },
        LogConfig {
            retention_bytes: None,
            retention_age: Some(Duration::from_millis(1)),
            ..small_segments()
        },
    );
    let leader = cluster.leader_log(LOG).expect("leader");
    let silent = NodeId((leader.node_id().0 + 1) % 3);
    // `silent` never reports: nothing is deleted however old.
    append(&leader, 30);
    for log in all_logs(&cluster) {
        if log.node_id() != silent {
            log.set_applied(log.high_watermark()).expect("set_applied");
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let bound = leader.deletion_bound().expect("bound");
    assert_eq!(
        (
            bound.bound,
            bound.held_by,
            bound.held_by_applied,
            bound.capped
        ),
        (Offset(0), Some(silent), None, false),
        "{bound:?}"
    );
    assert_eq!(leader.log_start_offset(), Offset(0));
    // Past 64 KiB held back, the cap lets retention delete up to the HW.
    append(&leader, 80);
    for log in all_logs(&cluster) {
        if log.node_id() != silent {
            log.set_applied(log.high_watermark()).expect("set_applied");
        }
    }
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(0)),
        "the cap never let retention go on: {:?}",
        leader.deletion_bound()
    );
    // Deleted past the silent replica's position (none), up to what the
    // leader's application and min_insync_replicas = 2 applications have
    // applied.
    let bound = leader.deletion_bound().expect("bound");
    println!(
        "past the cap: log start {}, {bound:?}",
        leader.log_start_offset()
    );
    assert!(bound.capped, "{bound:?}");
    assert_ne!(bound.held_by, Some(silent), "{bound:?}");
    assert!(leader.log_start_offset() <= bound.bound, "{bound:?}");
    cluster.shutdown().expect("shutdown");
}

#[test]
fn delete_records_before_deletes_exactly_within_the_bound_on_every_replica_and_survives_restart_and_failover(
) {
    let cluster = cluster(held(true), small_segments());
    let leader = cluster.leader_log(LOG).expect("leader");
    let follower = NodeId((leader.node_id().0 + 1) % 3);
    // Batches of 5 records: offset 37 is inside one.
    let value = [3u8; 100];
    let values: Vec<&[u8]> = (0..5).map(|_| &value[..]).collect();
    for _ in 0..20 {
        leader.append_values(&values, Acks::All).expect("append");
    }
    assert_eq!(leader.high_watermark(), Offset(100));
    wait_high_watermark_everywhere(&cluster, Offset(100));
    // Every application applied everything: above the high watermark is
    // still refused, nothing deleted.
    apply_all_but(&cluster, follower, Offset(100));
    wait_leader_knows_all(&cluster, &leader);
    match leader.delete_records_before(Offset(101)) {
        Err(Error::LogStartAboveHighWatermark {
            requested,
            high_watermark,
        }) => assert_eq!((requested, high_watermark), (Offset(101), Offset(100))),
        other => panic!("above the HW: {other:?}"),
    }
    // The follower's application goes back to an older checkpoint.
    apply_all_but(&cluster, follower, Offset(30));
    wait_leader_knows_all(&cluster, &leader);
    // Above a replica's applied position: refused, naming it.
    match leader.delete_records_before(Offset(37)) {
        Err(error @ Error::DeletionHeldBack { .. }) => {
            let text = error.to_string();
            assert!(text.contains(&follower.to_string()), "{text}");
            assert!(text.contains("30"), "{text}");
            assert!(error.is_retriable());
        }
        other => panic!("above a replica's applied position: {other:?}"),
    }
    assert_eq!(leader.log_start_offset(), Offset(0));
    // A follower cannot delete.
    let on_follower = cluster.log(follower, LOG).expect("follower");
    assert!(matches!(
        on_follower.delete_records_before(Offset(10)),
        Err(Error::NotLeader { .. })
    ));
    // The follower applies: 37 is allowed, exactly, inside a batch.
    apply_all_but(&cluster, follower, Offset(40));
    wait_leader_knows_all(&cluster, &leader);
    assert_eq!(
        leader.delete_records_before(Offset(37)).expect("delete"),
        Offset(37)
    );
    assert_eq!(
        leader.delete_records_before(Offset(20)).expect("lower"),
        Offset(37)
    );
    let expect_start = |cluster: &Cluster, what: &str| {
        for log in all_logs(cluster) {
            assert!(
                cluster.wait_until(WAIT, |_| log.log_start_offset() == Offset(37)),
                "{what}: {} has log start {}",
                log.node_id(),
                log.log_start_offset()
            );
            match log.read(Offset(36), 4096, Isolation::Committed) {
                Err(Error::OffsetOutOfRange {
                    requested,
                    log_start,
                    log_end,
                }) => {
                    assert_eq!((requested, log_start), (Offset(36), Offset(37)));
                    assert!(log_end >= Offset(100), "{log_end}");
                }
                other => panic!("{what}: read below the log start gave {other:?}"),
            }
            // The batch holding the log start comes whole, as in Kafka.
            let batches = log
                .read(Offset(37), 4096, Isolation::Committed)
                .expect("read at the log start");
            let first = batches.first().expect("a batch at the log start");
            assert_eq!(
                (first.base_offset(), first.last_offset()),
                (Offset(35), Offset(39)),
                "{what}"
            );
        }
    };
    // One more append carries the log start to the followers.
    leader.append_values(&values, Acks::All).expect("append");
    expect_start(&cluster, "after the deletion");

    // Every node restarts.
    for node in cluster.node_ids() {
        cluster.stop_node(node).expect("stop");
    }
    for node in cluster.node_ids() {
        cluster.start_node(node).expect("start");
    }
    assert!(cluster.wait_until(WAIT, |c| c.leader_of(LOG).is_some()));
    expect_start(&cluster, "after a restart of every node");

    // Failover: the new leader keeps the log start and the positions.
    let old = cluster.leader_of(LOG).expect("leader");
    cluster.crash(old);
    assert!(
        cluster.wait_until(WAIT, |c| c.leader_of(LOG).is_some_and(|l| l != old)),
        "no new leader"
    );
    let new_leader = cluster.leader_log(LOG).expect("new leader");
    assert_eq!(new_leader.log_start_offset(), Offset(37));
    let positions = new_leader.applied_positions();
    assert!(
        positions.contains_key(&old),
        "the new leader does not know the old leader's position: {positions:?}"
    );
    cluster.shutdown().expect("shutdown");
}

#[test]
fn a_new_leader_holds_deletion_for_a_replica_that_is_down() {
    let cluster = cluster(held(true), small_segments());
    let leader = cluster.leader_log(LOG).expect("leader");
    let down = NodeId((leader.node_id().0 + 1) % 3);
    append(&leader, 40);
    apply_all_but(&cluster, down, Offset(10));
    // Every replica learns every position (leader from fetches, followers
    // from the leader's answers).
    for log in all_logs(&cluster) {
        assert!(
            cluster.wait_until(WAIT, |_| log.applied_positions().get(&down)
                == Some(&Offset(10))),
            "{} never learned {down}'s position: {:?}",
            log.node_id(),
            log.applied_positions()
        );
    }
    cluster.crash(down);
    let old = leader.node_id();
    cluster.crash(old);
    cluster.restart(old).expect("restart");
    assert!(
        cluster.wait_until(WAIT, |c| c.leader_log(LOG).is_ok()
            && c.in_sync_replicas(LOG).len() >= 2),
        "no leader with an ISR of two after the crash"
    );
    let new_leader = cluster.leader_log(LOG).expect("leader");
    append(&new_leader, 60);
    apply_all_but(&cluster, down, Offset(10));
    std::thread::sleep(Duration::from_millis(200));
    let bound = new_leader.deletion_bound().expect("bound");
    assert_eq!(bound.held_by, Some(down), "{bound:?}");
    assert_eq!(bound.bound, Offset(10), "{bound:?}");
    assert!(
        new_leader.log_start_offset() <= Offset(10),
        "log start {} passed the down replica's position",
        new_leader.log_start_offset()
    );
    cluster.shutdown().expect("shutdown");
}

#[test]
fn set_applied_above_the_log_end_is_refused() {
    let cluster = cluster(held(true), LogConfig::default());
    let leader = cluster.leader_log(LOG).expect("leader");
    append(&leader, 3);
    match leader.set_applied(Offset(4)) {
        Err(Error::OffsetOutOfRange {
            requested, log_end, ..
        }) => assert_eq!((requested, log_end), (Offset(4), Offset(3))),
        other => panic!("{other:?}"),
    }
    leader.set_applied(Offset(3)).expect("at the log end");
    assert_eq!(
        leader.applied_positions().get(&leader.node_id()),
        Some(&Offset(3))
    );
    // So does a follower that does not wait for a snapshot (one whose log
    // ends below its leader's log start takes it: simulator seed
    // 60060809).
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|node| *node != leader.node_id())
        .expect("a follower");
    let on_follower = cluster.log(follower, LOG).expect("follower");
    assert!(on_follower.log_end_offset() <= Offset(3));
    assert!(!on_follower.needs_snapshot());
    assert!(matches!(
        on_follower.set_applied(Offset(10)),
        Err(Error::OffsetOutOfRange { .. })
    ));
    cluster.shutdown().expect("shutdown");
}

#[test]
fn under_retention_by_age_a_stopped_apply_loop_holds_deletion_until_the_age_cap() {
    let cap = Duration::from_millis(1500);
    let cluster = cluster(
        ReplicationConfig {
            applied_hold_age_max: Some(cap),
            ..held(true)
        },
        LogConfig {
            retention_bytes: None,
            retention_age: Some(Duration::from_millis(1)),
            ..small_segments()
        },
    );
    let leader = cluster.leader_log(LOG).expect("leader");
    let stuck = NodeId((leader.node_id().0 + 1) % 3);
    // Taken before the appends: no segment's newest record is older.
    let appended = std::time::Instant::now();
    append(&leader, 60);
    apply_all_but(&cluster, stuck, Offset(20));
    wait_leader_knows(&cluster, &leader, stuck, Offset(20));
    // Every segment is past retention's age at once; the stuck position
    // holds them until the cap.
    std::thread::sleep(Duration::from_millis(300));
    if appended.elapsed() < cap {
        assert!(
            leader.log_start_offset() <= Offset(20),
            "log start {} passed the stuck position before the age cap",
            leader.log_start_offset()
        );
        assert!(
            leader.log_start_offset() > Offset(0),
            "retention by age did not run up to the position"
        );
    }
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(20)),
        "the age cap never let retention pass the stuck position: {:?}",
        leader.deletion_bound()
    );
    println!(
        "age cap {cap:?}: retention passed the stuck position after {:?}",
        appended.elapsed()
    );
    assert!(
        appended.elapsed() >= cap,
        "deleted past the position after {:?}",
        appended.elapsed()
    );
    cluster.shutdown().expect("shutdown");
}

/// Regression for a fault-test finding (deletion mode, seed 0 of
/// PowerLossFlushAlways with a 1 KiB cap): past the cap, deletion went up
/// to the high watermark and removed records that no application had
/// applied. It now stops at what the leader's application and
/// `min_insync_replicas` in-sync applications have applied.
#[test]
fn past_the_cap_deletion_stops_at_what_the_leader_and_min_insync_applications_applied() {
    let cluster = cluster(
        ReplicationConfig {
            applied_hold_bytes_max: Some(1024),
            ..held(true)
        },
        small_segments(),
    );
    let leader = cluster.leader_log(LOG).expect("leader");
    let (a, b) = (
        NodeId((leader.node_id().0 + 1) % 3),
        NodeId((leader.node_id().0 + 2) % 3),
    );
    append(&leader, 200);
    wait_high_watermark_everywhere(&cluster, Offset(200));
    let set = |node: NodeId, applied: u64| {
        cluster
            .log(node, LOG)
            .expect("replica")
            .set_applied(Offset(applied))
            .expect("set_applied");
    };
    // The leader's own application is the furthest behind.
    set(leader.node_id(), 20);
    set(a, 120);
    set(b, 150);
    wait_leader_knows_all(&cluster, &leader);
    std::thread::sleep(Duration::from_millis(200));
    let bound = leader.deletion_bound().expect("bound");
    assert!(bound.capped, "{bound:?}");
    assert_eq!(bound.bound, Offset(20), "{bound:?}");
    assert_eq!(bound.held_by, Some(leader.node_id()), "{bound:?}");
    assert!(leader.log_start_offset() <= Offset(20));
    // The leader applied the most (190); a and b hold 120 and 150: two
    // in-sync applications (the leader and b) have applied up to 150.
    set(leader.node_id(), 190);
    wait_leader_knows_all(&cluster, &leader);
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(20)),
        "retention never went on: {:?}",
        leader.deletion_bound()
    );
    std::thread::sleep(Duration::from_millis(200));
    let bound = leader.deletion_bound().expect("bound");
    assert_eq!(bound.bound, Offset(150), "{bound:?}");
    assert!(
        leader.log_start_offset() <= Offset(150),
        "log start {} passed what two applications applied",
        leader.log_start_offset()
    );
    cluster.shutdown().expect("shutdown");
}
