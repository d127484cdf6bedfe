//! Issue 27: at most 5 batches of one producer are in flight per log
//! (Kafka's limit with idempotence); a sixth send waits until the oldest
//! is resolved, then goes out with the next sequence.

use std::time::Duration;

use isrlog::testing::{Lose, SessionEnd};
use isrlog::{IdempotentProducer, Sequence};

use crate::support_idempotent::{cluster, committed_values, quick, LOG};

#[test]
fn a_sixth_pipelined_send_waits_for_the_oldest() {
    let cluster = cluster();
    let producer = IdempotentProducer::init(&cluster.coordinator, &cluster, quick()).unwrap();
    // With both followers gone (noticed only when their sessions expire,
    // and the ISR shrinks only after replica_lag_time_max), nothing commits.
    let leader = cluster.leader_of(LOG).unwrap();
    let followers: Vec<_> = cluster
        .node_ids()
        .into_iter()
        .filter(|&n| n != leader)
        .collect();
    for &follower in &followers {
        cluster.crash_with(follower, Lose::Nothing, SessionEnd::OnExpiry);
    }
    let sends: Vec<_> = (0..5)
        .map(|i| {
            producer
                .send_values_pipelined(LOG, &[format!("v{i}")])
                .unwrap()
        })
        .collect();
    assert_eq!(producer.batches_unresolved(LOG), 5);
    std::thread::scope(|scope| {
        let sixth = scope.spawn(|| {
            producer
                .send_values_pipelined(LOG, &[b"v5"])
                .map(|send| send.wait())
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(!sixth.is_finished(), "the sixth send must wait for room");
        assert!(sends.iter().all(|send| !send.is_done()));
        for &follower in &followers {
            cluster.restart(follower).unwrap();
        }
        let sixth = sixth.join().unwrap().unwrap().unwrap();
        assert_eq!(sixth.base_offset.0, 5);
    });
    let offsets: Vec<u64> = sends
        .into_iter()
        .map(|send| send.wait().unwrap().base_offset.0)
        .collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    assert_eq!(producer.next_sequence(LOG), Sequence(6));
    let expected: Vec<Vec<u8>> = (0..6).map(|i| format!("v{i}").into_bytes()).collect();
    assert_eq!(committed_values(&cluster, 6), expected);
    cluster.shutdown().unwrap();
}
