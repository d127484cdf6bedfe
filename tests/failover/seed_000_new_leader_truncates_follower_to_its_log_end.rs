//! Seed 000 §1.3 (SPEC §5): ISR {a, b}, HW 6, LEO(a) 10, LEO(b) 9 (asserted
//! exactly); b becomes
//! leader → a ends at 9, the HW reaches 9, offset 9 of a's old log is gone
//! and nothing below 9 is lost.

use crate::failover_support::*;
use std::time::Duration;

use isrlog::{Acks, Isolation, LogId, NodeId, Offset};

#[test]
fn seed_000_new_leader_truncates_follower_to_its_log_end() {
    let cluster = scripted_cluster(2, 2);
    let log = LogId(0);
    let (a, b) = (NodeId(0), NodeId(1));
    cluster.create_log(log, 2).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), a);
    let follower = cluster.log(b, log).unwrap();

    // Offsets 0..6 committed on both: HW 6 everywhere.
    for i in 0..6 {
        leader.append_values(&[format!("r{i}")], Acks::All).unwrap();
    }
    assert!(cluster.wait_until(Duration::from_secs(5), |_| {
        leader.high_watermark() == Offset(6) && follower.high_watermark() == Offset(6)
    }));
    // Offsets 6..9 reach b, but a must not learn that b has them, or its HW
    // would move to 9: every call from now on takes 1.5 s to arrive, so
    // b's next fetch (at offset 9, which would tell a) is still on its way
    // when a crashes. (The fetch at 6 that carries 6..9 may already be
    // parked on a, or arrives 1.5 s later.)
    cluster.network.set_latency(Duration::from_millis(1500));
    leader
        .append_values(&["r6", "r7", "r8"], Acks::Leader)
        .unwrap();
    assert!(cluster.wait_until(Duration::from_secs(5), |_| {
        follower.log_end_offset() == Offset(9)
    }));
    leader.append_values(&["r9"], Acks::Leader).unwrap();
    // The starting state of seed 000 §1.3, exactly.
    assert_eq!(leader.in_sync_replicas(), vec![a, b]);
    assert_eq!(leader.log_end_offset(), Offset(10));
    assert_eq!(follower.log_end_offset(), Offset(9));
    assert_eq!(leader.high_watermark(), Offset(6));
    assert_eq!(follower.high_watermark(), Offset(6));
    let before: Vec<String> = leader
        .read(Offset(0), 1 << 20, Isolation::Uncommitted)
        .unwrap()
        .iter()
        .flat_map(|batch| {
            batch
                .records()
                .map(|r| String::from_utf8_lossy(&r.unwrap().value).into_owned())
        })
        .collect();
    assert_eq!(before.len(), 10);

    // a crashes (before b's fetch at 9 reaches it); b is elected; a comes
    // back and follows.
    cluster.crash(a);
    cluster.network.set_latency(Duration::ZERO);
    elect(&cluster, log, b, &[b]);
    let new_leader = cluster.leader_log(log).unwrap();
    assert_eq!(new_leader.node_id(), b);
    assert_eq!(
        new_leader.log_end_offset(),
        Offset(9),
        "a new leader never truncates"
    );
    cluster.network.heal();
    cluster.restart(a).unwrap();
    let old_leader = cluster.log(a, log).unwrap();
    assert!(
        wait_converged(&cluster, &[&old_leader, &new_leader], Offset(9)),
        "a: leo {} hw {}; b: leo {} hw {}",
        old_leader.log_end_offset(),
        old_leader.high_watermark(),
        new_leader.log_end_offset(),
        new_leader.high_watermark()
    );

    // Offset 9 of a's old log is gone; 0..9 are kept, the same on both.
    let on_a = committed_values(&old_leader);
    let expected: Vec<(u64, String)> = before[..9]
        .iter()
        .enumerate()
        .map(|(i, v)| (i as u64, v.clone()))
        .collect();
    assert_eq!(on_a, expected);
    assert!(!on_a.iter().any(|(_, v)| v == "r9"));
    assert_eq!(
        committed_batches(&old_leader),
        committed_batches(&new_leader)
    );
}
