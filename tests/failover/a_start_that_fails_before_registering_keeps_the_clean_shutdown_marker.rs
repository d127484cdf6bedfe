//! SPEC 3.5: a node that stopped cleanly and then fails to start because
//! the coordinator went out of reach before it registered (no log opened,
//! nothing registered) still starts clean once it can: the failed start
//! puts back the marker it took, so the node keeps its standing instead of
//! reporting an unclean shutdown for a stop that was clean. Before, every
//! failed attempt cost it the marker.

use std::time::Duration;

use crate::failover_support::*;
use isrlog::testing::{Cluster, CoordinatorDelay, HeldCall};
use isrlog::{Acks, Error, LogId, NodeId, PreviousShutdown};

const LOG: LogId = LogId(0);
const WAIT: Duration = Duration::from_secs(20);

/// Lets held registrations go however the test ends.
struct Released(CoordinatorDelay);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.release_held(HeldCall::RegisterNode);
    }
}

#[test]
fn a_start_that_fails_before_registering_keeps_the_clean_shutdown_marker() {
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(60))
        .replication(replication(2))
        .build()
        .unwrap();
    let c = NodeId(2);
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    leader.append_values(&["r1"], Acks::All).unwrap();
    cluster.stop_node(c).unwrap();

    // c's start took the marker and waits to register; then the
    // coordinator goes out of its reach, and the registration fails.
    let delay = cluster.coordinator_delay(c);
    delay.hold(HeldCall::RegisterNode);
    let released = Released(delay.clone());
    let failed = std::thread::scope(|scope| {
        let restart = scope.spawn(|| cluster.restart(c));
        assert!(cluster.wait_until(WAIT, |_| delay.held_waiting() >= 1));
        cluster.coordinator.set_node_unavailable(c, true);
        delay.release_held(HeldCall::RegisterNode);
        restart.join().unwrap()
    });
    drop(released);
    assert!(
        matches!(failed, Err(Error::Coordinator { .. })),
        "{failed:?}"
    );
    cluster.coordinator.set_node_unavailable(c, false);

    cluster.restart(c).unwrap();
    assert_eq!(
        cluster.with_node(c, |node| node.previous_shutdown()),
        Some(PreviousShutdown::Clean)
    );
    assert!(cluster.wait_until(WAIT, |cl| cl.in_sync_replicas(LOG).contains(&c)));
}
