//! Issue 24, item 5: what a `ZkCoordinator` announces with `NodesChanged`
//! and what its `live_nodes()` answers agree, also after the coordinator
//! gave up a node's session by itself (cut off from ZooKeeper for a whole
//! session timeout) while ZooKeeper still lists the node's ephemeral znode.
//!
//! The single server is killed for longer than node A's session timeout:
//! A's coordinator announces A gone. The server then restarts with its
//! sessions (a restarted ZooKeeper gives every session a fresh timeout), so
//! A's znode is still listed when the coordinator reconnects and re-reads
//! the membership. Before the fix that re-read announced A live again
//! while `live_nodes()` left it out, until ZooKeeper expired the session.
//! (Since item 4, A's suspended session may resume instead: then both list
//! A again, together.)

use std::time::{Duration, Instant};

use isrlog::{Coordinator, CoordinatorEvent, NodeId, ZkCoordinator, ZkCoordinatorConfig};

const SESSION_TIMEOUT: Duration = Duration::from_secs(3);

fn coordinator(connect: String) -> ZkCoordinator {
    let mut config = ZkCoordinatorConfig::new(connect);
    config.chroot = "/nodes-agree".to_owned();
    // A short session of its own: the coordinator gives it up during the
    // outage and opens a new one as soon as the server is back (the
    // client library backs off exponentially when reconnecting a session).
    config.session_timeout = Duration::from_secs(1);
    config.call_timeout = Duration::from_secs(2);
    ZkCoordinator::connect(config).unwrap_or_else(|e| panic!("cannot connect: {e}"))
}

#[test]
fn nodes_changed_and_live_nodes_agree_after_a_session_given_up_locally() {
    let mut server = crate::zookeeper_support::server();
    let c = coordinator(server.connect_string());
    let other = coordinator(server.connect_string());
    let (a, b) = (NodeId(1), NodeId(2));
    c.register_node(a, SESSION_TIMEOUT).unwrap();
    other.register_node(b, Duration::from_secs(30)).unwrap();
    let events = c.subscribe(a).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let _stop = StopOnDrop(&stop);
        // A running node heartbeats; failures are expected once cut off.
        scope.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = c.heartbeat(a);
                let _ = other.heartbeat(b);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.live_nodes().ok() != Some(vec![a, b]) {
            assert!(Instant::now() < deadline, "both nodes never live");
            std::thread::sleep(Duration::from_millis(20));
        }

        server.kill();
        // A's coordinator says A is gone after a session timeout.
        let told = Instant::now() + SESSION_TIMEOUT * 3;
        loop {
            match events.recv_deadline(told) {
                Ok(CoordinatorEvent::NodesChanged { live }) if !live.contains(&a) => break,
                Ok(_) => {}
                Err(error) => panic!("A's subscriber was never told A left: {error}"),
            }
        }
        server
            .resume()
            .unwrap_or_else(|e| panic!("cannot restart ZooKeeper: {e}"));
        let resumed_at = Instant::now();

        // Every announcement agrees with the answer read right after it.
        // Nothing else changes the membership meanwhile, except A's
        // session ending at ZooKeeper (which only makes both leave A out)
        // or coming back (which makes both list it).
        let mut announced = None;
        while resumed_at.elapsed() < SESSION_TIMEOUT * 2 {
            match events.recv_timeout(Duration::from_millis(100)) {
                Ok(CoordinatorEvent::NodesChanged { live }) => {
                    let read = c.live_nodes().expect("live nodes once ZooKeeper is back");
                    eprintln!(
                        "{:?} after the restart: NodesChanged {live:?}, live_nodes {read:?}",
                        resumed_at.elapsed()
                    );
                    assert_eq!(
                        live, read,
                        "NodesChanged announced {live:?}, live_nodes() answers {read:?}"
                    );
                    announced = Some(live);
                }
                Ok(other) => eprintln!("{:?}: {other:?}", resumed_at.elapsed()),
                Err(_) => {}
            }
        }
        let settled = c.live_nodes().expect("live nodes");
        if let Some(announced) = announced {
            assert_eq!(announced, settled, "the last announcement is stale");
        }
        assert!(settled.contains(&b), "{b} never left: {settled:?}");
    });
}

/// Stops the heartbeat thread however the test ends.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
