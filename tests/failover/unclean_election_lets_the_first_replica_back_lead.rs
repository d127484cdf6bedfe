//! Seed 003 / SPEC 3.5 with `unclean_leader_election` on: when every ISR
//! member is down, the first live replica leads with ISR = {itself}. This
//! test documents what that costs: r2 was committed (acknowledged with
//! `acks=all`) on a and b only; c, elected uncleanly, never had it, and when
//! a returns it truncates r2 to follow c. r2 is lost on every replica.

use std::time::Duration;

use crate::failover_support::*;
use isrlog::{Acks, Coordinator, LogId, NodeId, Offset};

#[test]
fn unclean_election_lets_the_first_replica_back_lead() {
    let cluster = controlled_cluster(3, true);
    let log = LogId(0);
    let (a, b, c) = (NodeId(0), NodeId(1), NodeId(2));
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    leader.append_values(&["r1"], Acks::All).unwrap();
    cluster.network.partition(&[c], &[a, b]);
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log)
            == vec![a, b])
    );
    let r2 = leader.append_values(&["r2"], Acks::All).unwrap();
    assert_eq!(r2.base_offset, Offset(1));

    cluster.crash(b);
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log)
            == vec![a])
    );
    cluster.crash(a);
    // c, live but out of the ISR, is elected uncleanly.
    assert!(cluster.wait_until(Duration::from_secs(5), |cl| cl.leader_of(log) == Some(c)));
    assert_eq!(cluster.in_sync_replicas(log), vec![c]);
    cluster.network.heal();
    let new_leader = cluster.leader_log(log).unwrap();
    assert_eq!(new_leader.node_id(), c);
    assert_eq!(new_leader.log_end_offset(), Offset(1), "c never had r2");

    cluster.restart(a).unwrap();
    cluster.restart(b).unwrap();
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log).len()
            == 3)
    );
    let r3 = new_leader.append_values(&["r3"], Acks::All).unwrap();
    assert_eq!(r3.base_offset, Offset(1), "r3 takes the offset r2 had");
    let handles: Vec<_> = [a, b, c]
        .iter()
        .map(|&n| cluster.log(n, log).unwrap())
        .collect();
    assert!(wait_converged(
        &cluster,
        &handles.iter().collect::<Vec<_>>(),
        Offset(2)
    ));
    for handle in &handles {
        // What was lost: the acknowledged r2, on every replica.
        assert_eq!(
            committed_values(handle),
            vec![(0, "r1".into()), (1, "r3".into())],
            "on {}",
            handle.node_id()
        );
    }
}

/// SPEC 3.5, unclean election on, the case its name says: every replica is
/// down, and the first one to come back is not in the ISR. It leads (ISR =
/// {itself}), and the controller that elected it counts an unclean
/// election. r2, committed on a and b only, is lost everywhere once they
/// return and follow c.
#[test]
fn unclean_election_lets_the_first_replica_back_lead_when_all_were_down() {
    let cluster = controlled_cluster(3, true);
    let log = LogId(0);
    let (a, b, c) = (NodeId(0), NodeId(1), NodeId(2));
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), a);
    leader.append_values(&["r1"], Acks::All).unwrap();
    assert!(cluster.wait_until(Duration::from_secs(5), |cl| cl
        .log(c, log)
        .is_ok_and(|h| h.log_end_offset() == Offset(1))));
    cluster.network.partition(&[c], &[a, b]);
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log)
            == vec![a, b])
    );
    let r2 = leader.append_values(&["r2"], Acks::All).unwrap();
    assert_eq!(r2.base_offset, Offset(1));

    // Everyone goes down: c (out of the ISR) first, then b, then a.
    cluster.crash(c);
    cluster.crash(b);
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log)
            == vec![a])
    );
    cluster.crash(a);
    cluster.network.heal();
    assert_eq!(cluster.in_sync_replicas(log), vec![a]);

    // c is the first back: not in the ISR, and the only live replica.
    cluster.restart(c).unwrap();
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.leader_of(log) == Some(c)),
        "{:?}",
        cluster.coordinator.log_state(log)
    );
    assert_eq!(cluster.in_sync_replicas(log), vec![c]);
    let unclean = cluster
        .with_node(c, |node| {
            node.controller().map(|ctl| ctl.unclean_elections())
        })
        .flatten()
        .unwrap();
    assert!(unclean >= 1, "the controller on c elected c uncleanly");
    let new_leader = cluster.leader_log(log).unwrap();
    assert_eq!(new_leader.node_id(), c);
    assert_eq!(new_leader.log_end_offset(), Offset(1), "c never had r2");

    cluster.restart(a).unwrap();
    cluster.restart(b).unwrap();
    assert!(
        cluster.wait_until(Duration::from_secs(5), |cl| cl.in_sync_replicas(log).len()
            == 3)
    );
    let r3 = new_leader.append_values(&["r3"], Acks::All).unwrap();
    assert_eq!(r3.base_offset, Offset(1), "r3 takes the offset r2 had");
    let handles: Vec<_> = [a, b, c]
        .iter()
        .map(|&n| cluster.log(n, log).unwrap())
        .collect();
    assert!(wait_converged(
        &cluster,
        &handles.iter().collect::<Vec<_>>(),
        Offset(2)
    ));
    for handle in &handles {
        // What was lost: the acknowledged r2, on every replica.
        assert_eq!(
            committed_values(handle),
            vec![(0, "r1".into()), (1, "r3".into())],
            "on {}",
            handle.node_id()
        );
    }
}
