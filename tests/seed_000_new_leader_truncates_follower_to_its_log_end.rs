//! Seed 000 §1.3 (SPEC §5): ISR {a, b}, HW 6, LEO(a) 10, LEO(b) 9; b becomes
//! leader → a ends at 9, the HW reaches 9, offset 9 of a's old log is gone
//! and nothing below 9 is lost.

mod failover_support;

use failover_support::*;
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

    // Offsets 0..6 committed on both.
    for i in 0..6 {
        leader.append_values(&[format!("r{i}")], Acks::All).unwrap();
    }
    // Offsets 6..9 reach b, then b is cut off and offset 9 reaches a only.
    leader
        .append_values(&["r6", "r7", "r8"], Acks::Leader)
        .unwrap();
    assert!(cluster.wait_until(std::time::Duration::from_secs(5), |_| {
        follower.log_end_offset() == Offset(9)
    }));
    cluster.network.partition(&[a], &[b]);
    leader.append_values(&["r9"], Acks::Leader).unwrap();
    assert_eq!(leader.log_end_offset(), Offset(10));
    assert_eq!(follower.log_end_offset(), Offset(9));
    assert!(leader.high_watermark() >= Offset(6) && leader.high_watermark() <= Offset(9));
    assert!(follower.high_watermark() >= Offset(6) && follower.high_watermark() <= Offset(9));
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

    // a crashes; b is elected; a comes back and follows.
    cluster.crash(a);
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
