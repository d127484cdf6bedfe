//! Seed 001 §4.4 ("数据不一致", KIP-101 scenario 2), replayed step by step.
//!
//! B leads and holds m2, which A never got (in the article A lost it in a
//! hard failure; here a partition keeps it from A); the high watermark is 1.
//! Both fail. A comes back first, is elected and writes m3 at offset 1. B
//! comes back: under the pre-0.11 rule both have high watermark 1 and keep
//! different records at offset 1 for ever. With leader epochs B learns that
//! epoch 0 ended at offset 1 on the leader, truncates m2 and fetches m3: the
//! replicas end byte-identical and nothing committed is lost.

use crate::failover_support::*;
use isrlog::{Acks, LogId, NodeId, Offset};

#[test]
fn seed_001_divergence_after_two_hard_failures_is_resolved_by_epochs() {
    let cluster = scripted_cluster(2, 1);
    let log = LogId(0);
    let (b, a) = (NodeId(0), NodeId(1));
    cluster.create_log(log, 2).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), b);
    let follower = cluster.log(a, log).unwrap();

    leader.append_values(&["m1"], Acks::All).unwrap();
    assert!(cluster.wait_until(std::time::Duration::from_secs(5), |_| {
        follower.high_watermark() == Offset(1)
    }));
    cluster.network.partition(&[a], &[b]);
    let m2 = leader.append_values(&["m2"], Acks::Leader).unwrap();
    assert_eq!(m2.base_offset, Offset(1));
    assert_eq!(leader.high_watermark(), Offset(1), "m2 is not committed");

    // Both fail; A comes back first and is elected.
    cluster.crash(a);
    cluster.crash(b);
    cluster.network.heal();
    elect(&cluster, log, a, &[a]);
    cluster.restart(a).unwrap();
    let new_leader = cluster.leader_log(log).unwrap();
    assert_eq!(new_leader.node_id(), a);
    let m3 = new_leader.append_values(&["m3"], Acks::All).unwrap();
    assert_eq!(m3.base_offset, Offset(1), "m3 takes the offset m2 has on B");

    // B comes back as a follower and must resolve the divergence.
    cluster.restart(b).unwrap();
    let old_leader = cluster.log(b, log).unwrap();
    assert!(
        wait_converged(&cluster, &[&new_leader, &old_leader], Offset(2)),
        "B: leo {} hw {}",
        old_leader.log_end_offset(),
        old_leader.high_watermark()
    );
    let expected: Vec<(u64, String)> = vec![(0, "m1".into()), (1, "m3".into())];
    assert_eq!(committed_values(&old_leader), expected);
    assert_eq!(
        committed_batches(&old_leader),
        committed_batches(&new_leader)
    );
    // Epochs: m1 in epoch 0, m3 in a later one, on both. (A, restarted into
    // the leadership it was given while down, starts one more epoch: a
    // restarted leader never writes in an epoch it may have written before.)
    let epochs: Vec<u32> = committed_batches(&old_leader).iter().map(|b| b.1).collect();
    assert_eq!(epochs.len(), 2);
    assert_eq!(epochs[0], 0);
    assert!(epochs[1] >= 1, "m3 in epoch {}", epochs[1]);
}
