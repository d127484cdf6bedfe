//! SPEC 3.6, the KIP-279 case: leadership moves A → B → A quickly, with
//! uncommitted writes made in every epoch while the followers were cut off.
//! After healing, the follower walks back through the epochs until its log
//! agrees with the leader's, and all logs end identical.

use crate::failover_support::*;
use isrlog::{Acks, LogId, NodeId, Offset};

#[test]
fn fast_leader_changes_a_b_a_end_with_identical_logs() {
    let cluster = scripted_cluster(2, 2);
    let log = LogId(0);
    let (a, b) = (NodeId(0), NodeId(1));
    cluster.create_log(log, 2).unwrap();
    let on_a = cluster.leader_log(log).unwrap();
    assert_eq!(on_a.node_id(), a);
    let on_b = cluster.log(b, log).unwrap();
    on_a.append_values(&["c0", "c1"], Acks::All).unwrap();

    // Epoch 0, A leads, cut off: two uncommitted records.
    cluster.network.partition(&[a], &[b]);
    on_a.append_values(&["a-e0-1"], Acks::Leader).unwrap();
    on_a.append_values(&["a-e0-2"], Acks::Leader).unwrap();

    // Epoch 1, B leads, still cut off: one uncommitted record.
    elect(&cluster, log, b, &[b]);
    on_b.wait_until_leader(std::time::Duration::from_secs(5))
        .unwrap();
    let written = on_b.append_values(&["b-e1-1"], Acks::Leader).unwrap();
    assert_eq!(written.base_offset, Offset(2));

    // Epoch 2, A leads again: one more uncommitted record.
    elect(&cluster, log, a, &[a]);
    on_a.wait_until_leader(std::time::Duration::from_secs(5))
        .unwrap();
    let written = on_a.append_values(&["a-e2-1"], Acks::Leader).unwrap();
    assert_eq!(written.base_offset, Offset(4));
    assert_eq!(on_a.high_watermark(), Offset(2), "nothing new is committed");

    cluster.network.heal();
    assert!(cluster.wait_until(std::time::Duration::from_secs(5), |_| {
        on_a.in_sync_replicas().len() == 2
    }));
    on_a.append_values(&["after-heal"], Acks::All).unwrap();
    assert!(
        wait_converged(&cluster, &[&on_a, &on_b], Offset(6)),
        "B: leo {} hw {}",
        on_b.log_end_offset(),
        on_b.high_watermark()
    );
    let expected: Vec<(u64, String)> = ["c0", "c1", "a-e0-1", "a-e0-2", "a-e2-1", "after-heal"]
        .iter()
        .enumerate()
        .map(|(i, v)| (i as u64, v.to_string()))
        .collect();
    assert_eq!(committed_values(&on_b), expected);
    assert_eq!(committed_batches(&on_a), committed_batches(&on_b));
    let epochs: Vec<u32> = committed_batches(&on_b).iter().map(|b| b.1).collect();
    assert_eq!(epochs, vec![0, 0, 0, 2, 2], "b-e1-1 is gone, epochs kept");
}

/// The KIP-279 loop needing more than one round: A → B → A → B → A, each
/// term writing while the other side is cut off, so B's log ends with
/// epochs 1 and 3 that A never had, interleaved with A's 0, 2 and 4.
/// B's first query (its last epoch, 3) is answered with epoch 2 (`fe != e`)
/// and B truncates to where its own epoch 3 began (offset 3); its next
/// query (epoch 1) is answered with epoch 0 and B truncates to where its
/// epoch 1 began (offset 2); only the third (epoch 0) agrees. A one-round
/// truncation would keep `b-e1-1` at offset 2. Logs end identical.
#[test]
fn fast_leader_changes_a_b_a_b_a_need_several_truncation_rounds() {
    let cluster = scripted_cluster(2, 2);
    let log = LogId(0);
    let (a, b) = (NodeId(0), NodeId(1));
    cluster.create_log(log, 2).unwrap();
    let on_a = cluster.leader_log(log).unwrap();
    let on_b = cluster.log(b, log).unwrap();
    on_a.append_values(&["c0", "c1"], Acks::All).unwrap();
    cluster.network.partition(&[a], &[b]);
    let timeout = std::time::Duration::from_secs(5);

    // (leader, value, offset it lands at); every term after the first
    // starts with an election.
    let terms: [(NodeId, &[&str], u64); 5] = [
        (a, &["a-e0-1", "a-e0-2"], 2),
        (b, &["b-e1-1"], 2),
        (a, &["a-e2-1"], 4),
        (b, &["b-e3-1"], 3),
        (a, &["a-e4-1"], 5),
    ];
    for (term, &(leader, values, offset)) in terms.iter().enumerate() {
        let handle = if leader == a { &on_a } else { &on_b };
        if term > 0 {
            assert_eq!(elect(&cluster, log, leader, &[leader]), term as u32);
            handle.wait_until_leader(timeout).unwrap();
        }
        for (i, value) in values.iter().enumerate() {
            let written = handle.append_values(&[value], Acks::Leader).unwrap();
            assert_eq!(written.base_offset, Offset(offset + i as u64), "{value}");
        }
    }
    assert_eq!(on_b.log_end_offset(), Offset(4), "B: c0 c1 b-e1-1 b-e3-1");
    assert_eq!(on_a.high_watermark(), Offset(2), "nothing new is committed");

    cluster.network.heal();
    assert!(cluster.wait_until(timeout, |_| on_a.in_sync_replicas().len() == 2));
    on_a.append_values(&["after-heal"], Acks::All).unwrap();
    assert!(
        wait_converged(&cluster, &[&on_a, &on_b], Offset(7)),
        "B: leo {} hw {}",
        on_b.log_end_offset(),
        on_b.high_watermark()
    );
    let expected: Vec<(u64, String)> = [
        "c0",
        "c1",
        "a-e0-1",
        "a-e0-2",
        "a-e2-1",
        "a-e4-1",
        "after-heal",
    ]
    .iter()
    .enumerate()
    .map(|(i, v)| (i as u64, v.to_string()))
    .collect();
    assert_eq!(committed_values(&on_b), expected);
    assert_eq!(committed_batches(&on_a), committed_batches(&on_b));
    let epochs: Vec<u32> = committed_batches(&on_b).iter().map(|b| b.1).collect();
    assert_eq!(
        epochs,
        vec![0, 0, 0, 2, 4, 4],
        "B's epochs 1 and 3 are gone"
    );
}
