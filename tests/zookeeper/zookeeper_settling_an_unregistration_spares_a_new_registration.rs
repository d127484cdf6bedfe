//! Review finding 6: settling an unregistration whose close ZooKeeper did
//! not hear deleted the node's znode "at the version read" once the read
//! showed the given-up session still owned it. Every registration's znode
//! is at version 0, so when that session ended between the read and the
//! delete and the node registered again (a restarted process retries its
//! create until the old znode goes), the delete removed the new
//! registration: a live node vanished from the live set. Now every
//! registration moves `/nodes`'s data version in the transaction that
//! creates its znode, and the settling delete is conditional on that
//! version as read, in one `multi`: a registration since the read makes it
//! fail, and the next read finds the znode is not the given-up session's.
//!
//! The node's own session is held in the network (from a write it sends,
//! an election), so that ZooKeeper hears neither its pings nor its close
//! and keeps its znode. Then the settling delete is held between the read
//! and the server; meanwhile the given-up session's znode goes (deleted
//! here, as its expiry would) and the node registers again through another
//! coordinator; then the network lets everything through.

use std::time::{Duration, Instant};

use crate::zookeeper_support::{coordinator_through_a_proxy, server};
use isrlog::{Coordinator, NodeId, ZkCoordinator, ZkCoordinatorConfig};

/// Long: the given-up session must not expire by itself during the test.
const SESSION_TIMEOUT: Duration = Duration::from_secs(20);

#[test]
fn settling_an_unregistration_spares_a_new_registration() {
    let server = server();
    let chroot = "/unregistration-spares-new";
    let (proxy, c, raw) = coordinator_through_a_proxy(&server, chroot);
    let node = NodeId(1);
    c.register_node(node, SESSION_TIMEOUT).unwrap();

    // The election is the one write the node's own session sends: from it
    // on, that connection's requests (pings, the close) are held.
    proxy.hold_requests_from_next_write("/controller_epoch");
    match c.try_become_controller(node) {
        Err(error) if error.is_outcome_unknown() => {}
        other => panic!("an election without an answer must be unknown: {other:?}"),
    }
    assert_eq!(proxy.holding_connections(), 1, "the election was not held");
    // ZooKeeper does not hear the close: the znode stays the given-up
    // session's.
    match c.unregister_node(node) {
        Err(error) if error.is_outcome_unknown() => {}
        other => panic!("an unheard close must leave the outcome unknown: {other:?}"),
    }
    assert!(raw.exists("/nodes/1").unwrap(), "ZooKeeper heard the close");

    // Unregistering again reads that the given-up session owns the znode
    // and sends the delete, which the network holds.
    proxy.hold_requests_from_next_write("/nodes/1");
    let deadline = Instant::now() + Duration::from_secs(30);
    while proxy.holding_connections() < 2 {
        match c.unregister_node(node) {
            Err(error) if error.is_outcome_unknown() => {}
            other => panic!(
                "the given-up session still owns /nodes/1, so nothing can be settled before \
                 the delete goes through: {other:?}"
            ),
        }
        assert!(Instant::now() < deadline, "the settling delete never came");
    }

    // Meanwhile the given-up session's znode goes and the node, restarted,
    // registers again.
    raw.delete_all("/nodes/1").unwrap();
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = chroot.to_owned();
    let restarted = ZkCoordinator::connect(config).unwrap();
    let incarnation = restarted.register_node(node, SESSION_TIMEOUT).unwrap();

    proxy.release_held_requests();
    // Time for the released delete to be applied.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        raw.exists("/nodes/1").unwrap(),
        "settling the old unregistration deleted the node's new registration"
    );
    assert_eq!(
        restarted.live_node_incarnations().unwrap(),
        vec![(node, incarnation)],
        "the node's new registration is live"
    );
    restarted.heartbeat(node).unwrap();

    // The old coordinator, asked again, settles: the znode is not the
    // given-up session's.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.unregister_node(node) {
            Ok(()) => break,
            Err(error) if error.is_outcome_unknown() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("unregistering again never settled: {error}"),
        }
    }
    assert!(
        raw.exists("/nodes/1").unwrap(),
        "settling deleted the new registration"
    );
}
