//! Seed 003 / SPEC 3.5: with unclean leader election off, a log whose every
//! in-sync replica is down has no leader; appends fail with a clear error;
//! the first ISR member back leads and nothing committed is lost.

use std::time::Duration;

use crate::failover_support::*;
use isrlog::{Acks, Error, LogId, NodeId, Offset};

#[test]
fn all_isr_down_without_unclean_election_stays_leaderless() {
    let cluster = controlled_cluster(3, false);
    let log = LogId(0);
    let (a, b, c) = (NodeId(0), NodeId(1), NodeId(2));
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), a);
    leader.append_values(&["r1"], Acks::All).unwrap();

    // c falls out of the ISR; r2 is committed on a and b only.
    cluster.network.partition(&[c], &[a, b]);
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log)
            == vec![a, b])
    );
    leader.append_values(&["r2"], Acks::All).unwrap();

    // Every ISR member goes down.
    cluster.crash(b);
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log)
            == vec![a])
    );
    cluster.crash(a);
    assert!(cluster.wait_until(Duration::from_secs(5), |cl| cl.leader_of(log).is_none()));
    cluster.network.heal();

    // c is alive but not in the ISR: no leader, and appends fail clearly.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cluster.leader_of(log), None, "c must not be elected");
    let on_c = cluster.log(c, log).unwrap();
    match on_c.append_values(&["r3"], Acks::All) {
        Err(Error::NotLeader { leader, .. }) => assert_eq!(leader, None),
        other => panic!("expected NotLeader without a leader, got {other:?}"),
    }

    // b is back first, but b is no longer in the ISR; a is.
    cluster.restart(b).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        cluster.leader_of(log),
        None,
        "b left the ISR before it died"
    );
    cluster.restart(a).unwrap();
    let new_leader = cluster.leader_log(log).unwrap();
    assert_eq!(new_leader.node_id(), a, "the ISR member leads");
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log).len()
            == 3)
    );
    new_leader.append_values(&["r3"], Acks::All).unwrap();
    let handles: Vec<_> = [a, b, c]
        .iter()
        .map(|&n| cluster.log(n, log).unwrap())
        .collect();
    assert!(wait_converged(
        &cluster,
        &handles.iter().collect::<Vec<_>>(),
        Offset(3)
    ));
    for handle in &handles {
        assert_eq!(
            committed_values(handle),
            vec![(0, "r1".into()), (1, "r2".into()), (2, "r3".into())],
            "on {}",
            handle.node_id()
        );
    }
}
