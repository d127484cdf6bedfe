//! Issue 12: a fetch cannot make a leader build an answer larger than its
//! `fetch_response_bytes_max`. Before, every log named in a fetch got at
//! least one batch however spent the budget was, and a log could be named
//! any number of times: one 2.9 MB request naming a log 100,000 times made a
//! leader build a 50 MB answer. Now a request naming a log twice, or more
//! logs than the node hosts, is refused with `InvalidRequest`, and, as
//! Kafka's `minOneMessage` does, only the first log of an answer with data
//! may pass the budget, with one batch, so a batch larger than the budget
//! still replicates. Against a live leader, posing as one of its followers,
//! while acks=all appends keep committing.

use std::collections::HashMap;
use std::thread;
use std::time::{Duration, Instant};

use crate::tcp_attack_support::*;
use isrlog::testing::{TcpCluster, TcpTransportFactory};
use isrlog::transport::{
    EpochEndOffsetsRequest, EpochQuery, ErrorCode, FetchLog, FetchRequest, Request, Response,
};
use isrlog::{
    Acks, Incarnation, LeaderEpoch, LogId, NodeId, Offset, ReplicationConfig, TcpTransport,
    Transport,
};

const KIB: usize = 1024;
/// The leader's `fetch_response_bytes_max`.
const RESPONSE_BYTES_MAX: usize = 64 * KIB;
const VALUE_BYTES: usize = 20 * KIB;
const LOGS: u32 = 6;

fn fetch_log(log: LogId, epoch: LeaderEpoch, offset: Offset) -> FetchLog {
    FetchLog {
        log,
        current_leader_epoch: epoch,
        fetch_offset: offset,
        last_fetched_epoch: None,
        line_epoch: Some(epoch),
        log_start_offset: Offset(0),
        bytes_max: u32::MAX,
        applied_offset: None,
    }
}

fn fetch(replica: NodeId, incarnation: Incarnation, logs: Vec<FetchLog>) -> Request {
    Request::Fetch(FetchRequest {
        replica,
        incarnation,
        wait_max: Duration::ZERO,
        bytes_max: u32::MAX,
        logs,
    })
}

#[test]
fn fetches_are_refused_or_answered_within_the_response_budget() {
    let cluster = TcpCluster::builder()
        .nodes(3)
        .replication(ReplicationConfig {
            replica_lag_time_max: Duration::from_secs(10),
            fetch_wait_max: Duration::from_millis(100),
            request_timeout: Duration::from_secs(5),
            fetch_backoff: Duration::from_millis(10),
            fetch_bytes_max: 128 * KIB as u32,
            fetch_response_bytes_max: RESPONSE_BYTES_MAX as u32,
            ..ReplicationConfig::default()
        })
        .min_insync_replicas(2)
        .build()
        .expect("cluster starts");
    let logs: Vec<LogId> = (0..LOGS).map(LogId).collect();
    for log in &logs {
        cluster.create_log(*log, 3).expect("log created");
    }
    wait_until("a leader for every log", Duration::from_secs(30), || {
        logs.iter().all(|log| cluster.leader_of(*log).is_some())
    });
    // The node leading the most logs is attacked, posing as another node,
    // which follows every log (replication factor 3 on 3 nodes).
    let target = cluster
        .node_ids()
        .into_iter()
        .max_by_key(|node| {
            logs.iter()
                .filter(|log| cluster.leader_of(**log) == Some(*node))
                .count()
        })
        .expect("nodes");
    let led: Vec<LogId> = logs
        .iter()
        .copied()
        .filter(|log| cluster.leader_of(*log) == Some(target))
        .collect();
    assert!(led.len() >= 2, "{target} leads only {led:?}");
    let posing_as = cluster
        .node_ids()
        .into_iter()
        .find(|node| *node != target)
        .expect("another node");
    let value = vec![0x42_u8; VALUE_BYTES];
    for log in &led {
        let handle = cluster.leader_log(*log).expect("leader handle");
        for _ in 0..10 {
            handle
                .append_values(&[&value], Acks::All)
                .expect("committed");
        }
    }
    let epochs: HashMap<LogId, LeaderEpoch> = led
        .iter()
        .map(|log| {
            let handle = cluster.log(target, *log).expect("hosted");
            (*log, handle.leader_epoch())
        })
        .collect();
    // The sender's own incarnation: these fetches pass the incarnation
    // check and are refused or bounded only by the rules under test.
    let incarnation = cluster.incarnation(posing_as).expect("runs");
    let attacker = TcpTransport::new(
        posing_as,
        HashMap::from([(target, cluster.addr(target).expect("listens"))]),
        TcpTransportFactory::test_config(),
    )
    .expect("client");
    let call = |request: Request| {
        attacker
            .call(target, request, Instant::now() + Duration::from_secs(30))
            .expect("answered")
    };

    let writer = Writer::new();
    thread::scope(|scope| {
        scope.spawn(|| writer.run_on(&cluster, led[0]));
        let _stop_writer = writer.stop_when_dropped();
        writer.wait_for_more_commits(5, "commits before the attack");

        // One log named 100,000 times: a 2.9 MB request, refused whole.
        let same = fetch_log(led[0], epochs[&led[0]], Offset(0));
        let started = Instant::now();
        let answer = call(fetch(posing_as, incarnation, vec![same; 100_000]));
        println!(
            "100,000 copies of one log: {answer:?} in {:?}",
            started.elapsed()
        );
        assert_eq!(answer, Response::Error(ErrorCode::InvalidRequest));

        // More logs than the node hosts (every one distinct).
        let many = (0..=LOGS)
            .map(|id| fetch_log(LogId(1000 + id), LeaderEpoch(1), Offset(0)))
            .collect();
        assert_eq!(
            call(fetch(posing_as, incarnation, many)),
            Response::Error(ErrorCode::InvalidRequest)
        );
        // The same rule for epoch queries.
        let query = EpochQuery {
            log: led[0],
            current_leader_epoch: epochs[&led[0]],
            epoch: epochs[&led[0]],
        };
        assert_eq!(
            call(Request::EpochEndOffsets(EpochEndOffsetsRequest {
                replica: posing_as,
                logs: vec![query.clone(), query],
            })),
            Response::Error(ErrorCode::InvalidRequest)
        );

        // Every led log from offset 0, asking for everything: each holds
        // 200 KiB, but the answer stays within the leader's budget. (Before,
        // every log after the budget ran out still got one 20 KiB batch.)
        for round in 0..led.len() {
            let all = led
                .iter()
                .map(|log| fetch_log(*log, epochs[log], Offset(0)))
                .collect();
            let Response::Fetch(answer) = call(fetch(posing_as, incarnation, all)) else {
                panic!("a fetch of hosted logs is answered with records");
            };
            let sizes: Vec<usize> = answer.logs.iter().map(|l| l.records.len()).collect();
            let total: usize = sizes.iter().sum();
            println!("round {round}: records per log {sizes:?}, {total} bytes in all");
            assert!(answer.logs.iter().all(|l| l.error == ErrorCode::None));
            assert!(total > 0, "no progress");
            assert!(
                total <= RESPONSE_BYTES_MAX,
                "answer of {total} bytes over the {RESPONSE_BYTES_MAX}-byte budget"
            );
        }

        // A batch larger than the whole budget still goes out, alone, so
        // the followers replicate it (the acks=all append commits).
        let big = vec![0x43_u8; 2 * RESPONSE_BYTES_MAX];
        let handle = cluster.leader_log(led[1]).expect("leader handle");
        let appended = handle.append_values(&[&big], Acks::All).expect("committed");
        let big_at = appended.base_offset;
        let Response::Fetch(answer) = call(fetch(
            posing_as,
            incarnation,
            vec![fetch_log(led[1], epochs[&led[1]], big_at)],
        )) else {
            panic!("a fetch of a hosted log is answered with records");
        };
        let records = answer.logs[0].records.len();
        assert!(records > RESPONSE_BYTES_MAX, "{records} bytes");
        assert!(
            records < 2 * RESPONSE_BYTES_MAX + KIB,
            "{records} bytes: one batch only"
        );

        writer.wait_for_more_commits(10, "commits after the attack");
        writer.stop();
    });
    assert_eq!(writer.failed(), 0, "an acks=all append failed");
    cluster.shutdown().expect("clean shutdown");
}
