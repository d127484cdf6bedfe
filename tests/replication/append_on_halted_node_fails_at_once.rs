//! An append through the handle of a node that was halted (or stopped)
//! fails at once with `Error::Shutdown`, whatever the `acks`.
//!
//! The bug: `Node::halt` stopped the node's threads but left its replicas
//! leading, so an `acks=all` append was written and then waited the whole
//! `request_timeout` (30 s) for followers that could no longer reach the
//! node, to fail with `Timeout`; `acks=1` even succeeded on a node that no
//! longer ran. The fix: `ReplicatedLog::append` refuses once its node has
//! stopped, and an `acks=all` append waiting when its node stops ends with
//! `Shutdown` too (within a few milliseconds, not at its deadline).

use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::{
    Acks, Coordinator, Error, LogId, MemoryCoordinator, MemoryNetwork, Node, NodeConfig, NodeId,
    ReplicatedLog, SystemClock,
};

const LOG: LogId = LogId(0);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Far below `REQUEST_TIMEOUT`, far above what failing at once takes even
/// on a loaded machine.
const AT_ONCE: Duration = Duration::from_secs(5);

/// Starts one node of a three-node log (the other two never start, so
/// nothing it writes can be committed) and returns it with its leading
/// handle.
fn lone_leader(dir: &std::path::Path) -> (Node, ReplicatedLog) {
    let network = MemoryNetwork::new(1);
    let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
    let leader_id = NodeId(0);
    coordinator
        .create_log(LOG, vec![leader_id, NodeId(1), NodeId(2)])
        .unwrap();
    let mut config = NodeConfig::new(leader_id, dir);
    config.controller = None;
    config.replication.min_insync_replicas = 1;
    config.replication.request_timeout = REQUEST_TIMEOUT;
    let node = Node::start(
        config,
        Arc::new(network.transport(leader_id)),
        Arc::new(coordinator),
        Arc::new(SystemClock),
    )
    .unwrap();
    network.register(leader_id, node.handler());
    let handle = node.wait_for_log(LOG, Duration::from_secs(5)).unwrap();
    handle.wait_until_leader(Duration::from_secs(5)).unwrap();
    (node, handle)
}

#[test]
fn append_on_a_halted_node_fails_at_once_with_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (node, handle) = lone_leader(dir.path());
    let written = handle.append_values(&[b"before"], Acks::Leader).unwrap();
    node.halt();
    for acks in [Acks::All, Acks::Leader, Acks::None] {
        let started = Instant::now();
        let result = handle.append_values(&[b"after the halt"], acks);
        let took = started.elapsed();
        assert!(
            matches!(result, Err(Error::Shutdown)),
            "{acks:?}: {result:?}"
        );
        assert!(took < AT_ONCE, "{acks:?}: took {took:?}");
    }
    // Nothing was appended after the halt.
    assert_eq!(handle.log_end_offset(), written.last_offset.next());
}

#[test]
fn append_waiting_when_its_node_is_halted_fails_at_once_with_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (node, handle) = lone_leader(dir.path());
    // The ISR is all three replicas and two never fetch: the append waits.
    let waiting = {
        let handle = handle.clone();
        std::thread::spawn(move || {
            let result = handle.append_values(&[b"never committed"], Acks::All);
            (result, Instant::now())
        })
    };
    // Let it reach its wait (it only waits: nothing can commit it).
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiting.is_finished());
    let halted_at = Instant::now();
    node.halt();
    let (result, returned_at) = waiting.join().unwrap();
    assert!(matches!(result, Err(Error::Shutdown)), "{result:?}");
    let took = returned_at.saturating_duration_since(halted_at);
    assert!(took < AT_ONCE, "returned {took:?} after the halt");
}

#[test]
fn append_on_a_shut_down_node_fails_with_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (node, handle) = lone_leader(dir.path());
    node.shutdown().unwrap();
    let started = Instant::now();
    let result = handle.append_values(&[b"after the shutdown"], Acks::All);
    assert!(matches!(result, Err(Error::Shutdown)), "{result:?}");
    assert!(started.elapsed() < AT_ONCE);
}
