//! SPEC 3.5: only a node that cannot prove a clean shutdown loses its place
//! in the ISR and ELR. A node stopped with `Node::shutdown` writes the
//! clean-shutdown marker last; started again, it reports nothing, keeps its
//! place, and an eligible leader replica that stopped cleanly is elected
//! when no ISR member is live.

use std::time::Duration;

use crate::failover_support::*;
use isrlog::testing::Cluster;
use isrlog::{Acks, ControllerConfig, Coordinator, LogId, NodeId, Offset, PreviousShutdown};

const LOG: LogId = LogId(0);
const WAIT: Duration = Duration::from_secs(20);

#[test]
fn clean_shutdown_keeps_a_replica_eligible() {
    // Long sessions: every node here leaves by a clean stop, which ends its
    // session at once, so nothing waits for an expiry.
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(60))
        .replication(replication(2))
        .controller(Some(ControllerConfig {
            poll_interval: Duration::from_millis(100),
            ..ControllerConfig::default()
        }))
        .build()
        .unwrap();
    let (a, b, c) = (NodeId(0), NodeId(1), NodeId(2));
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    assert_eq!(leader.node_id(), a);
    leader.append_values(&["r1"], Acks::All).unwrap();

    // c stops cleanly; the ISR {a, b} is still at the minimum.
    cluster.stop_node(c).unwrap();
    assert!(cluster.wait_until(WAIT, |cl| cl.in_sync_replicas(LOG) == vec![a, b]));
    leader.append_values(&["r2"], Acks::All).unwrap();
    // b stops cleanly: it leaves an ISR of 2, so it becomes eligible.
    cluster.stop_node(b).unwrap();
    assert!(
        cluster.wait_until(WAIT, |cl| cl.in_sync_replicas(LOG) == vec![a]),
        "{:?}",
        cluster.coordinator.log_state(LOG).unwrap()
    );
    let state = cluster.coordinator.log_state(LOG).unwrap().unwrap();
    assert_eq!(state.eligible_leader_replicas, vec![b], "{state:?}");
    // a stops cleanly too. No node is left to run a controller, so the
    // stored state stays as it was: leader a, ISR {a}, ELR {b}.
    cluster.stop_node(a).unwrap();
    let state = cluster.coordinator.log_state(LOG).unwrap().unwrap();
    assert_eq!(state.in_sync_replicas, vec![a], "{state:?}");
    assert_eq!(state.eligible_leader_replicas, vec![b], "{state:?}");

    // b comes back with its marker: still eligible, and elected.
    cluster.restart(b).unwrap();
    assert_eq!(
        cluster.with_node(b, |node| node.previous_shutdown()),
        Some(PreviousShutdown::Clean)
    );
    assert!(
        cluster.wait_until(WAIT, |cl| cl.leader_of(LOG) == Some(b)),
        "the eligible replica that stopped cleanly was not elected: {:?}",
        cluster.coordinator.log_state(LOG).unwrap()
    );
    // a comes back cleanly as well: it was in the ISR, it is not taken out
    // of anything, and it rejoins as a follower.
    cluster.restart(a).unwrap();
    cluster.restart(c).unwrap();
    for node in [a, c] {
        assert_eq!(
            cluster.with_node(node, |n| n.previous_shutdown()),
            Some(PreviousShutdown::Clean),
            "{node}"
        );
    }
    assert!(cluster.wait_until(WAIT, |cl| cl.in_sync_replicas(LOG).len() == 3));
    let new_leader = cluster.leader_log(LOG).unwrap();
    new_leader.append_values(&["r3"], Acks::All).unwrap();
    let handles: Vec<_> = [a, b, c]
        .iter()
        .map(|&node| cluster.log(node, LOG).unwrap())
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
