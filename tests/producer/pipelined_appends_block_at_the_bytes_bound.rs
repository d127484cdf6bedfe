//! Issue 14, backpressure (Kafka's `buffer.memory` / `max.block.ms`): when
//! followers stop fetching, pipelined `acks=all` appends stop resolving;
//! once they hold `pipelined_bytes_max` bytes, further callers block up to
//! `pipelined_block_max` and then fail with `PipelineFull`, appending
//! nothing, and the bytes in flight never pass the bound. Room that frees
//! up while a caller is blocked lets it through.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{Acks, Error, LogId, NodeId, RecordBatch, RecordBatchBuilder, ReplicationConfig};

const LOG: LogId = LogId(0);
const BYTES_MAX: usize = 64 * 1024;
const SOON: Duration = Duration::from_secs(20);

fn cluster(block_max: Duration) -> Cluster {
    Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(3600))
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(60),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(60),
            fetch_backoff: Duration::from_millis(5),
            pipelined_bytes_max: BYTES_MAX,
            pipelined_block_max: block_max,
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap()
}

fn kib_batch() -> RecordBatch {
    let mut builder = RecordBatchBuilder::new(0);
    builder.push(&[7u8; 1024]);
    builder.build().unwrap()
}

fn partition_followers(cluster: &Cluster, leader: NodeId) {
    let followers: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|&n| n != leader)
        .collect();
    cluster.network.partition(&[leader], &followers);
}

#[test]
fn callers_block_then_fail_at_the_deadline_with_bytes_in_flight_bounded() {
    let block_max = Duration::from_millis(500);
    let cluster = cluster(block_max);
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    partition_followers(&cluster, leader.node_id());
    let batch = kib_batch();
    let log_end_before = leader.log_end_offset();
    let results: Vec<_> = std::thread::scope(|scope| {
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let (leader, batch) = (&leader, &batch);
                scope.spawn(move || {
                    let mut handles = Vec::new();
                    loop {
                        let started = Instant::now();
                        match leader.append_pipelined(batch, Acks::All) {
                            Ok(handle) => {
                                assert!(leader.pipelined_bytes_in_flight() <= BYTES_MAX);
                                handles.push(handle);
                            }
                            Err(error) => return (handles, error, started.elapsed()),
                        }
                        assert!(handles.len() < 10_000, "never blocked: unbounded");
                    }
                })
            })
            .collect();
        callers.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let mut handles = Vec::new();
    for (mut mine, error, blocked) in results {
        match &error {
            Error::PipelineFull {
                bytes_max,
                bytes_in_flight,
                batch_bytes,
                waited,
                ..
            } => {
                assert_eq!(*bytes_max, BYTES_MAX);
                assert_eq!(*batch_bytes, batch.size_bytes());
                assert!(bytes_in_flight + batch_bytes > BYTES_MAX);
                assert!(*waited >= block_max, "gave up after {waited:?}");
            }
            other => panic!("expected PipelineFull, got {other:?}"),
        }
        assert!(error.to_string().contains("pipelined_bytes_max"), "{error}");
        assert!(blocked >= block_max, "blocked {blocked:?} < {block_max:?}");
        assert!(blocked < SOON, "blocked {blocked:?}");
        handles.append(&mut mine);
    }
    let per_batch = batch.size_bytes();
    assert_eq!(
        handles.len(),
        BYTES_MAX / per_batch,
        "exactly what fits was admitted"
    );
    assert!(leader.pipelined_bytes_in_flight() <= BYTES_MAX);
    assert!(leader.pipelined_bytes_in_flight_peak() <= BYTES_MAX);
    assert_eq!(
        leader.pipelined_bytes_in_flight(),
        handles.len() * per_batch
    );
    // The failed calls appended nothing.
    assert_eq!(
        leader.log_end_offset().0 - log_end_before.0,
        handles.len() as u64
    );
    assert!(handles.iter().all(|h| !h.is_done()));
    // Followers fetch again: everything admitted commits, the bytes free.
    cluster.network.heal();
    for handle in handles {
        let outcome = handle.wait_timeout(SOON).expect("resolved").unwrap();
        assert!(leader.high_watermark() > outcome.last_offset);
    }
    let deadline = Instant::now() + SOON;
    while leader.pipelined_bytes_in_flight() != 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    cluster.shutdown().unwrap();
}

#[test]
fn a_blocked_caller_goes_through_once_room_frees_up() {
    let cluster = cluster(Duration::from_secs(60));
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    partition_followers(&cluster, leader.node_id());
    let batch = kib_batch();
    let mut handles = Vec::new();
    while leader.pipelined_bytes_in_flight() + 2 * batch.size_bytes() <= BYTES_MAX {
        handles.push(leader.append_pipelined(&batch, Acks::All).unwrap());
    }
    handles.push(leader.append_pipelined(&batch, Acks::All).unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let (leader, batch) = (&leader, &batch);
        scope.spawn(move || {
            let _ = tx.send(leader.append_pipelined(batch, Acks::All).map(|h| h.wait()));
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(rx.try_recv().is_err(), "the caller is blocked at the bound");
        cluster.network.heal();
        match rx.recv_timeout(SOON) {
            Ok(Ok(Ok(_))) => {}
            other => panic!("expected the blocked append to go through, got {other:?}"),
        }
    });
    for handle in handles {
        handle.wait_timeout(SOON).expect("resolved").unwrap();
    }
    assert!(leader.pipelined_bytes_in_flight_peak() <= BYTES_MAX);
    cluster.shutdown().unwrap();
}

#[test]
fn a_batch_larger_than_the_bound_fails_at_once() {
    let cluster = cluster(Duration::from_secs(60));
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let mut builder = RecordBatchBuilder::new(0);
    builder.push(&vec![1u8; BYTES_MAX + 1]);
    let started = Instant::now();
    match leader.append_pipelined(&builder.build().unwrap(), Acks::All) {
        Err(Error::PipelineFull {
            bytes_in_flight: 0,
            bytes_max: BYTES_MAX,
            ..
        }) => {}
        other => panic!("expected PipelineFull, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(leader.log_end_offset(), isrlog::Offset(0));
    cluster.shutdown().unwrap();
}
