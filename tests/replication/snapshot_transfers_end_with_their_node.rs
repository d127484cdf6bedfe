//! SPEC 3.9 and "shutdown is dropping a sender": no snapshot transfer thread
//! outlives its node. A shutdown during a transfer cancels it, waits for it
//! (it ends at its next chunk) and returns; the next start transfers the
//! snapshot again from its beginning and installs it whole, once. The bug:
//! a transfer cancelled because its log stopped being fetched from that
//! leader (a leader change) was detached, and went on running, holding the
//! node's store and log, after the node had shut down.
//!
//! No thread is visible from outside, but each transfer thread holds a
//! handle on its node's store: once the node is gone (and the network let
//! go of its request handler), only the test and the cluster's builder hold
//! the store.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::testing::{Lose, SessionEnd};
use isrlog::{NodeId, Offset};

use super::snapshot_bootstrap_rebuilds_a_replica_behind_the_log_start::{
    setup_with, Setup, LOG, WAIT,
};

/// The test's handle plus the cluster builder's: no node holds it.
const STORE_HOLDERS_WITHOUT_A_NODE: usize = 2;

/// A cluster whose `victim` was down while the log start passed it, and
/// whose applications all took a snapshot.
fn victim_behind_the_log_start() -> (Setup, NodeId, NodeId, NodeId) {
    let setup = setup_with(true, |_| {});
    let cluster = &setup.cluster;
    setup.append(20);
    let leader = cluster.leader_log(LOG).expect("leader");
    let victim = NodeId((leader.node_id().0 + 1) % 3);
    let other = NodeId((leader.node_id().0 + 2) % 3);
    setup.wait_states_equal();
    cluster.crash_with(victim, Lose::Nothing, SessionEnd::Immediately);
    setup.append(150);
    assert!(cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(20)));
    setup.wait_states_equal();
    for app in setup.apps.values() {
        app.take_snapshot();
    }
    (setup, leader.node_id(), victim, other)
}

#[test]
fn a_shutdown_during_a_transfer_ends_it_and_the_next_start_installs_a_whole_snapshot() {
    let (setup, leader, victim, _) = victim_behind_the_log_start();
    let cluster = &setup.cluster;
    let leader_app = &setup.apps[&leader];
    leader_app.chunk_delay_ms.store(100, Ordering::SeqCst);
    cluster.restart(victim).expect("restart");
    assert!(
        cluster.wait_until(WAIT, |_| leader_app.chunks_served.load(Ordering::SeqCst)
            >= 3),
        "the transfer never started"
    );
    let started = Instant::now();
    cluster.stop_node(victim).expect("stop");
    let took = started.elapsed();
    cluster.network.unregister(victim);
    println!("shutdown during a transfer took {took:?}");
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
    assert_eq!(
        Arc::strong_count(&setup.apps[&victim]),
        STORE_HOLDERS_WITHOUT_A_NODE,
        "a transfer thread outlived its node"
    );
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 0);
    // The next start transfers the snapshot again, whole.
    leader_app.chunk_delay_ms.store(0, Ordering::SeqCst);
    cluster.restart(victim).expect("restart");
    setup.wait_states_equal();
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    setup.cluster.shutdown().expect("shutdown");
}

#[test]
fn a_transfer_cancelled_by_a_leader_change_is_joined_before_its_node_stops() {
    let (setup, leader, victim, other) = victim_behind_the_log_start();
    let cluster = &setup.cluster;
    let leader_app = &setup.apps[&leader];
    // Each chunk of the first leader takes long: the transfer from it is
    // still inside one when it is cancelled.
    leader_app.chunk_delay_ms.store(3000, Ordering::SeqCst);
    cluster.restart(victim).expect("restart");
    assert!(
        cluster.wait_until(WAIT, |_| leader_app.chunks_served.load(Ordering::SeqCst)
            >= 2),
        "the transfer never started"
    );
    cluster.crash_with(leader, Lose::Nothing, SessionEnd::Immediately);
    assert!(
        cluster.wait_until(WAIT, |c| c.leader_of(LOG) == Some(other)),
        "{other} never led"
    );
    // The victim installs the new leader's snapshot meanwhile.
    assert!(
        cluster.wait_until(WAIT, |_| setup.apps[&victim]
            .installs
            .load(Ordering::SeqCst)
            == 1),
        "the victim never installed the new leader's snapshot"
    );
    let started = Instant::now();
    cluster.stop_node(victim).expect("stop");
    println!("shutdown took {:?}", started.elapsed());
    cluster.network.unregister(victim);
    assert_eq!(
        Arc::strong_count(&setup.apps[&victim]),
        STORE_HOLDERS_WITHOUT_A_NODE,
        "the cancelled transfer outlived its node"
    );
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    setup.cluster.shutdown().expect("shutdown");
}
