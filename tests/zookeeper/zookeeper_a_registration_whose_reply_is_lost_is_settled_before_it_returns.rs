//! Issue 24 review, finding 3: a registration whose reply was lost (the
//! create of the node's ephemeral znode applied, its answer dropped)
//! returned "outcome unknown", and the znode could stay behind under the
//! abandoned session until it expired; but a node whose start fails on
//! that error never registers again to settle it. `register_node` now
//! settles it before it returns: it syncs, reads the node's znode, deletes
//! it if the abandoned session owns it, and answers a plain failure, so
//! nothing is left behind and registering again works at once.

use std::time::Duration;

use crate::zookeeper_support::{coordinator_through_a_proxy, server};
use isrlog::{Coordinator, NodeId};

const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

#[test]
fn a_registration_whose_reply_is_lost_is_settled_before_it_returns() {
    let server = server();
    let (proxy, c, raw) = coordinator_through_a_proxy(&server, "/registration-lost-reply");
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
