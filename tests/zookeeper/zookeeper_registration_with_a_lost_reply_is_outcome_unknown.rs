//! Issue 24, item 1 (review): `register_node` and `unregister_node` ran as
//! reads, so a time-out said "nothing was changed" while the node's
//! ephemeral znode might exist (the create was applied, its answer lost)
//! or might still exist (the close never reached ZooKeeper). They are
//! writes: such a failure says the outcome is unknown (SPEC 3.4), and
//! registering again settles it.

use std::time::{Duration, Instant};

use crate::zookeeper_support::server;
use isrlog::testing::zookeeper::{ZkProxy, ZkShell};
use isrlog::{Coordinator, NodeId, ZkCoordinator, ZkCoordinatorConfig};

const SESSION_TIMEOUT: Duration = Duration::from_secs(6);

fn proxied(server: &str, proxy: &ZkProxy, chroot: &str) -> ZkCoordinator {
    // Create the chroot's layout directly, then go through the proxy.
    let mut config = ZkCoordinatorConfig::new(server.to_owned());
    config.chroot = chroot.to_owned();
    drop(ZkCoordinator::connect(config.clone()).expect("connect"));
    config.connect = proxy.connect_string();
    config.call_timeout = Duration::from_secs(1);
    ZkCoordinator::connect(config).expect("connect through the proxy")
}

#[test]
fn a_registration_whose_reply_is_lost_is_outcome_unknown_and_settled_by_registering_again() {
    let server = server();
    let proxy = ZkProxy::start(&server.connect_string()).expect("proxy");
    let chroot = "/registration-lost-reply";
    let c = proxied(&server.connect_string(), &proxy, chroot);
    let node = NodeId(1);

    proxy.lose_reply_to_next_write("/nodes/1", Duration::from_secs(3));
    match c.register_node(node, SESSION_TIMEOUT) {
        Err(error) => assert!(
            error.is_outcome_unknown(),
            "a registration whose reply was lost must say its outcome is unknown: {error}"
        ),
        Ok(incarnation) => panic!("the reply was lost, yet registered as {incarnation:?}"),
    }
    assert_eq!(proxy.replies_lost(), 1, "the proxy lost no reply");
    // The create was applied; whether the znode is still there depends on
    // when the abandoned session's close reaches ZooKeeper, which is why
    // the answer is "unknown".

    // Registering again settles it.
    let deadline = Instant::now() + SESSION_TIMEOUT * 3;
    loop {
        match c.register_node(node, SESSION_TIMEOUT) {
            Ok(_) => break,
            Err(error) if Instant::now() < deadline => {
                eprintln!("registering again: {error}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("registering again never settled it: {error}"),
        }
    }
    assert_eq!(c.live_nodes().unwrap(), vec![node]);
}

#[test]
fn an_unregistration_zookeeper_did_not_hear_is_outcome_unknown() {
    let server = server();
    let proxy = ZkProxy::start(&server.connect_string()).expect("proxy");
    let chroot = "/unregistration-unheard";
    let c = proxied(&server.connect_string(), &proxy, chroot);
    let raw = ZkShell::connect(&server.connect_string(), chroot).expect("shell");
    let node = NodeId(1);
    c.register_node(node, SESSION_TIMEOUT).unwrap();

    proxy.set_cut(true);
    match c.unregister_node(node) {
        Err(error) => assert!(
            error.is_outcome_unknown(),
            "an unregistration ZooKeeper did not hear must say its outcome is unknown: {error}"
        ),
        Ok(()) => assert!(
            !raw.exists("/nodes/1").unwrap(),
            "unregistered, yet ZooKeeper still lists the node"
        ),
    }
    proxy.set_cut(false);
}
