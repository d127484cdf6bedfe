//! Seed 001 §4.3 ("数据丢失", KIP-101 scenario 1), replayed step by step.
//!
//! B leads, A follows. A fetched m2, B's high watermark moved past it and
//! the producer was told `acks=all` succeeded, but A had not yet learned the
//! new high watermark. A restarts; under the pre-0.11 rule it would truncate
//! to its own high watermark and drop m2; then B dies and A leads without
//! m2: an acknowledged record is lost. With leader epochs A never truncates
//! on restart, so m2 survives the two failures.

use crate::failover_support::*;
use isrlog::{Acks, Isolation, LogId, NodeId, Offset};

#[test]
fn seed_001_hw_truncation_would_lose_data_epochs_do_not() {
    let cluster = scripted_cluster(2, 2);
    let log = LogId(0);
    let (b, a) = (NodeId(0), NodeId(1));
    cluster.create_log(log, 2).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), b);

    let m1 = leader.append_values(&["m1"], Acks::All).unwrap();
    let m2 = leader.append_values(&["m2"], Acks::All).unwrap();
    assert_eq!((m1.base_offset, m2.base_offset), (Offset(0), Offset(1)));
    assert_eq!(leader.high_watermark(), Offset(2));
    assert_eq!(cluster.log(a, log).unwrap().log_end_offset(), Offset(2));

    // A crashes and restarts, but cannot reach B before B crashes too.
    cluster.crash(a);
    cluster.network.partition(&[a], &[b]);
    cluster.restart(a).unwrap();
    let restarted = cluster.log(a, log).unwrap();
    assert_eq!(
        restarted.log_end_offset(),
        Offset(2),
        "A kept its whole log on restart"
    );
    assert!(
        restarted.high_watermark() < Offset(2),
        "scenario precondition: A's recovered high watermark ({}) is below m2's end",
        restarted.high_watermark()
    );
    cluster.crash(b);

    // A becomes leader: m2 is still there.
    elect(&cluster, log, a, &[a]);
    let new_leader = cluster.leader_log(log).unwrap();
    assert_eq!(new_leader.node_id(), a);
    assert_eq!(new_leader.log_end_offset(), Offset(2));
    let uncommitted: Vec<String> = new_leader
        .read(Offset(0), 1 << 20, Isolation::Uncommitted)
        .unwrap()
        .iter()
        .flat_map(|batch| {
            batch
                .records()
                .map(|r| String::from_utf8_lossy(&r.unwrap().value).into_owned())
        })
        .collect();
    assert_eq!(uncommitted, vec!["m1", "m2"]);

    // B returns and follows; the ISR grows back and both end identical.
    cluster.network.heal();
    cluster.restart(b).unwrap();
    let follower = cluster.log(b, log).unwrap();
    assert!(cluster.wait_until(std::time::Duration::from_secs(5), |_| {
        new_leader.in_sync_replicas().len() == 2
    }));
    let m3 = new_leader.append_values(&["m3"], Acks::All).unwrap();
    assert_eq!(m3.base_offset, Offset(2));
    assert!(wait_converged(
        &cluster,
        &[&new_leader, &follower],
        Offset(3)
    ));
    let expected: Vec<(u64, String)> = vec![(0, "m1".into()), (1, "m2".into()), (2, "m3".into())];
    assert_eq!(committed_values(&new_leader), expected);
    assert_eq!(committed_batches(&new_leader), committed_batches(&follower));
}
