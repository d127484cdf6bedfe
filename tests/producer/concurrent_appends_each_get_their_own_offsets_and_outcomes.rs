//! Issue 27: appends that arrive together share the leader's work — its
//! pipeline merges them into few batches, written with one write — yet
//! each caller keeps its own offsets and its own outcome, blocking and
//! pipelined alike, and a write that fails fails the appends it carried,
//! not those committed before it.

use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{
    Acks, Error, Isolation, LogId, NodeId, Offset, RecordBatch, RecordBatchBuilder, ReplicatedLog,
    ReplicationConfig,
};

const LOG: LogId = LogId(0);
/// Generous bound for anything that should happen "soon" on a loaded
/// 2-core machine.
const SOON: Duration = Duration::from_secs(30);

fn cluster() -> Cluster {
    Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(3600))
        .controlled_shutdown_timeout(Duration::ZERO)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(60),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(60),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap()
}

/// A batch of one record naming its appender and its number, stamped
/// `timestamp` (appenders' clocks differ).
fn batch(appender: u32, number: u32, timestamp: i64) -> RecordBatch {
    let mut builder = RecordBatchBuilder::new(timestamp);
    builder.push(format!("{appender}/{number}").as_bytes());
    builder.build().unwrap()
}

fn full_isr(leader: &ReplicatedLog) {
    let started = Instant::now();
    while leader.in_sync_replicas().len() < 3 {
        assert!(started.elapsed() < SOON, "the ISR never filled");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The committed records of `log` from 0 to `end`: (offset, value,
/// timestamp), and how many batches held them.
fn committed(log: &ReplicatedLog, end: u64) -> (Vec<(u64, String, i64)>, usize) {
    let started = Instant::now();
    while log.high_watermark() < Offset(end) {
        assert!(started.elapsed() < SOON, "never committed up to {end}");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut records = Vec::new();
    let mut batches = 0;
    while (records.len() as u64) < end {
        let from = records.len() as u64;
        for batch in log
            .read(Offset(from), 1 << 20, Isolation::Committed)
            .unwrap()
        {
            batches += 1;
            for record in batch.records() {
                let record = record.unwrap();
                if record.offset.0 < records.len() as u64 {
                    continue;
                }
                assert_eq!(record.offset.0, records.len() as u64, "offsets are dense");
                records.push((
                    record.offset.0,
                    String::from_utf8(record.value.to_vec()).unwrap(),
                    record.timestamp,
                ));
            }
        }
    }
    (records, batches)
}

/// Eight threads of blocking `acks=all` appends and two threads pipelining
/// at once: every outcome names the offset that holds that caller's own
/// record (with its own timestamp), on every replica, and the leader wrote
/// them as fewer batches than appends.
#[test]
fn concurrent_appends_each_get_their_own_offsets_and_outcomes() {
    let cluster = cluster();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    full_isr(&leader);
    let per_appender = 300u32;
    let blocking: Vec<_> = (0..8u32)
        .map(|appender| {
            let leader = leader.clone();
            std::thread::spawn(move || {
                (0..per_appender)
                    .map(|number| {
                        let timestamp = 1_000 * i64::from(appender) + i64::from(number);
                        let outcome = leader
                            .append(&batch(appender, number, timestamp), Acks::All)
                            .unwrap();
                        (appender, number, timestamp, outcome)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let pipelining: Vec<_> = (8..10u32)
        .map(|appender| {
            let leader = leader.clone();
            std::thread::spawn(move || {
                let handles: Vec<_> = (0..per_appender)
                    .map(|number| {
                        let timestamp = 1_000 * i64::from(appender) + i64::from(number);
                        let handle = leader
                            .append_pipelined(&batch(appender, number, timestamp), Acks::All)
                            .unwrap();
                        (number, timestamp, handle)
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|(number, timestamp, handle)| {
                        (appender, number, timestamp, handle.wait().unwrap())
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for thread in blocking.into_iter().chain(pipelining) {
        outcomes.extend(thread.join().unwrap());
    }
    let total = outcomes.len() as u64;
    assert_eq!(total, 10 * u64::from(per_appender));
    let writes = leader.log_stats();
    for node in cluster.node_ids() {
        let log = cluster.log(node, LOG).unwrap();
        let (records, batches) = committed(&log, total);
        for (appender, number, timestamp, outcome) in &outcomes {
            assert_eq!(outcome.base_offset, outcome.last_offset);
            let (_, value, stored_timestamp) = &records[outcome.base_offset.0 as usize];
            assert_eq!(value, &format!("{appender}/{number}"), "on {node}");
            assert_eq!(stored_timestamp, timestamp, "on {node}");
        }
        assert!(
            (batches as u64) < total,
            "{batches} batches on {node} for {total} appends: none merged"
        );
    }
    assert!(
        writes.batches_appended < total,
        "the leader appended {} batches for {total} appends",
        writes.batches_appended
    );
}

/// A write that fails fails every append it carried — blocking and
/// pipelined callers coalesced into it each get an error (never a success,
/// never a hang) — while appends committed before it keep their success.
#[test]
fn a_failed_write_fails_the_appends_it_carried_and_not_those_before() {
    let cluster = cluster();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    full_isr(&leader);
    let before: Vec<_> = (0..50u32)
        .map(|number| {
            leader
                .append_pipelined(&batch(0, number, 1), Acks::All)
                .unwrap()
        })
        .collect();
    let before: Vec<_> = before.into_iter().map(|h| h.wait().unwrap()).collect();
    for (number, outcome) in before.iter().enumerate() {
        assert_eq!(outcome.base_offset, Offset(number as u64));
    }
    // Followers cut off: what comes next stays queued or uncommitted.
    let id = leader.node_id();
    let followers: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|&n| n != id)
        .collect();
    cluster.network.partition(&[id], &followers);
    let carried: Vec<_> = (0..50u32)
        .map(|number| {
            leader
                .append_pipelined(&batch(1, number, 2), Acks::All)
                .unwrap()
        })
        .collect();
    leader.fail_storage_for_test();
    let blocked = {
        let leader = leader.clone();
        std::thread::spawn(move || leader.append(&batch(2, 0, 3), Acks::All))
    };
    let started = Instant::now();
    for handle in carried {
        let outcome = handle.wait_timeout(SOON).expect("resolved");
        assert!(
            matches!(
                outcome,
                Err(Error::Poisoned { .. } | Error::NotLeader { .. })
            ),
            "{outcome:?}"
        );
    }
    let blocked = blocked.join().unwrap();
    assert!(
        matches!(
            blocked,
            Err(Error::Poisoned { .. } | Error::NotLeader { .. })
        ),
        "{blocked:?}"
    );
    assert!(started.elapsed() < SOON);
    cluster.network.heal();
    // The successes before the failure stand: those records are committed
    // on the followers, one of which leads now.
    let follower = cluster.log(followers[0], LOG).unwrap();
    let (records, _) = committed(&follower, 50);
    for (number, (_, value, _)) in records.iter().enumerate() {
        assert_eq!(value, &format!("0/{number}"));
    }
}
