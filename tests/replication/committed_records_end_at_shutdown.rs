//! SPEC 6 apply loop (issue 15): `committed_records()` used in a `for` loop
//! yields every committed record in order, waits at the high watermark,
//! and ends when the node shuts down (before, `next()` never returned
//! `None`, so the loop blocked for ever).

use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{Acks, LogId, Offset};

const LOG: LogId = LogId(0);

#[test]
fn a_for_loop_over_committed_records_ends_when_its_node_stops() {
    let cluster = Cluster::builder().nodes(3).build().unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    leader.append_values(&["a", "b"], Acks::All).unwrap();
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|&node| node != leader.node_id())
        .unwrap();
    let handle = cluster.log(follower, LOG).unwrap();
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    let applier = std::thread::spawn(move || {
        let mut applied = Vec::new();
        for record in handle.committed_records(Offset(0)) {
            let record = record.unwrap();
            applied.push(String::from_utf8(record.value.to_vec()).unwrap());
            seen_tx.send(applied.len()).unwrap();
        }
        applied
    });
    leader.append_values(&["c"], Acks::All).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = seen_rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the apply loop saw all three records");
        if seen == 3 {
            break;
        }
    }
    // Waiting at the high watermark, then the node stops: the loop ends.
    std::thread::sleep(Duration::from_millis(50));
    assert!(!applier.is_finished(), "the loop must wait for more");
    cluster.stop_node(follower).unwrap();
    let stopped = Instant::now();
    while !applier.is_finished() {
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "the apply loop did not end after its node stopped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(applier.join().unwrap(), vec!["a", "b", "c"]);
}
