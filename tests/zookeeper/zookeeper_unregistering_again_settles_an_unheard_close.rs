//! Issue 24 review, finding 4: `unregister_node` removed the node's session
//! from its map before closing it, so when ZooKeeper did not hear the close
//! (outcome unknown) a second call found no session and returned `Ok`
//! while ZooKeeper still listed the node under that session, contrary to
//! the trait's "calling it again settles it". The given-up session is now
//! kept until a check settles it: each call checks again whether the
//! node's znode still belongs to it, deletes it at the version read if it
//! does (second review: waiting for the session to expire kept the node
//! live, and its controller seat taken, a session timeout longer), and
//! says `Ok` only once it is gone.

use std::time::{Duration, Instant};

use crate::zookeeper_support::{coordinator_through_a_proxy, server};
use isrlog::{Coordinator, NodeId};

const SESSION_TIMEOUT: Duration = Duration::from_secs(8);

#[test]
fn unregistering_again_after_an_unheard_close_settles_it() {
    let server = server();
    let (proxy, c, raw) = coordinator_through_a_proxy(&server, "/unregistration-unheard");
    let node = NodeId(1);
    c.register_node(node, SESSION_TIMEOUT).unwrap();

    proxy.set_cut(true);
    for call in ["first", "second"] {
        match c.unregister_node(node) {
            Err(error) => assert!(
                error.is_outcome_unknown(),
                "{call} call: an unregistration ZooKeeper did not hear must say its outcome is \
                 unknown: {error}"
            ),
            Ok(()) => panic!(
                "{call} call: unregistered, yet ZooKeeper never heard the close (lists the node: \
                 {})",
                raw.exists("/nodes/1").unwrap()
            ),
        }
    }
    proxy.set_cut(false);

    // The next call, with ZooKeeper reachable again, deletes the znode the
    // given-up session still owns: settled long before that session could
    // expire.
    let healed = Instant::now();
    let deadline = healed + SESSION_TIMEOUT * 3;
    loop {
        match c.unregister_node(node) {
            Ok(()) => {
                assert!(
                    !raw.exists("/nodes/1").unwrap(),
                    "settled, yet ZooKeeper still lists the node"
                );
                assert!(
                    healed.elapsed() < SESSION_TIMEOUT,
                    "settled only after {:?}: it waited for the session to expire",
                    healed.elapsed()
                );
                break;
            }
            Err(error) if error.is_outcome_unknown() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("unregistering again never settled it: {error}"),
        }
    }
    assert_eq!(c.live_nodes().unwrap(), Vec::<NodeId>::new());
    c.unregister_node(node).expect("nothing left to settle");
}
