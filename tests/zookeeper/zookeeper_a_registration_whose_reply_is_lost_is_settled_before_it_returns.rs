//! Issue 24 review, finding 3: a registration whose reply was lost (the
//! create of the node's ephemeral znode applied, its answer dropped)
//! returned "outcome unknown", and the znode could stay behind under the
//! abandoned session until it expired; but a node whose start fails on
//! that error never registers again to settle it. `register_node` now
//! settles it before it returns: it syncs, reads the node's znode, deletes
//! it if the abandoned session owns it, and answers a plain failure, so
//! nothing is left behind and registering again works at once.

use std::time::Duration;

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::{ZkProxy, ZkShell};
use isrlog::{Coordinator, NodeId, ZkCoordinator, ZkCoordinatorConfig};

const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

#[test]
fn a_registration_whose_reply_is_lost_is_settled_before_it_returns() {
    let server = server();
    let proxy = ZkProxy::start(&server.connect_string()).expect("proxy");
    let chroot = "/registration-lost-reply";
    // Create the chroot's layout directly, then go through the proxy.
    let mut config = ZkCoordinatorConfig::new(server.connect_string());
    config.chroot = chroot.to_owned();
    drop(ZkCoordinator::connect(config.clone()).expect("connect"));
    config.connect = proxy.connect_string();
    config.call_timeout = Duration::from_secs(1);
    let c = ZkCoordinator::connect(config).expect("connect through the proxy");
    let raw = ZkShell::connect(&server.connect_string(), chroot).expect("shell");
    let node = NodeId(1);

    proxy.lose_reply_to_next_write("/nodes/1", Duration::from_secs(3));
    match c.register_node(node, SESSION_TIMEOUT) {
        Err(error) => assert!(
            !error.is_outcome_unknown(),
            "a lost registration reply must be settled before returning: {error}"
        ),
        Ok(incarnation) => panic!("the reply was lost, yet registered as {incarnation:?}"),
    }
    assert_eq!(proxy.replies_lost(), 1, "the proxy lost no reply");
    // Settled: the znode the create left is gone, long before the
    // abandoned session could expire.
    assert!(
        !raw.exists("/nodes/1").unwrap(),
        "a failed registration left the node's znode behind"
    );

    // Nothing to wait out: registering again works at once.
    c.register_node(node, SESSION_TIMEOUT)
        .unwrap_or_else(|e| panic!("registering again after a settled failure: {e}"));
    assert_eq!(c.live_nodes().unwrap(), vec![node]);
}
