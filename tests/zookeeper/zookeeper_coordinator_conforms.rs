//! The coordinator conformance suite run against `ZkCoordinator` on a real
//! standalone ZooKeeper server (started here, killed at the end). Each check
//! gets a fresh coordinator under its own chroot on that server.
//!
//! Needs `java` and the ZooKeeper jars (see `isrlog::testing::zookeeper`);
//! without them it fails, saying what to install.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use isrlog::testing::coordinator_suite;
use isrlog::testing::zookeeper::ZkServer;
use isrlog::{ZkCoordinator, ZkCoordinatorConfig};

#[test]
fn zookeeper_coordinator_passes_the_conformance_suite() {
    let server = ZkServer::start().unwrap_or_else(|e| panic!("{e}"));
    let next_root = AtomicUsize::new(0);
    coordinator_suite::run(|| {
        let mut config = ZkCoordinatorConfig::new(server.connect_string());
        config.chroot = format!("/conformance-{}", next_root.fetch_add(1, Ordering::SeqCst));
        config.session_timeout = Duration::from_secs(10);
        // Small queues make the overflow check quick (each update is a
        // round trip to the server).
        config.subscriber_events_max = 64;
        ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"))
    });
}
