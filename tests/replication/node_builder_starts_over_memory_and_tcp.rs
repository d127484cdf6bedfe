//! Issue 15: one obvious way to start a node. `Node::builder` starts a node
//! over a `MemoryNetwork` or TCP in one call (for TCP: the listener is bound
//! before the node starts and serves its handler after), and a log is
//! created and its leader awaited from a node, without importing the
//! `Coordinator` trait. `LogClient` then appends to whichever node leads.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use isrlog::{
    Acks, Isolation, LogClient, LogId, MemoryCoordinator, MemoryNetwork, Node, NodeId, Offset,
    ReplicatedLog, SystemClock, TcpConfig,
};

const LOG: LogId = LogId(7);
const WAIT: Duration = Duration::from_secs(20);

fn values(log: &ReplicatedLog) -> Vec<String> {
    let mut out = Vec::new();
    for batch in log.read(Offset(0), 1 << 20, Isolation::Committed).unwrap() {
        for record in batch.records() {
            out.push(String::from_utf8(record.unwrap().value.to_vec()).unwrap());
        }
    }
    out
}

/// Waits until every node's replica holds `want` committed.
fn wait_replicated(nodes: &[&Node], want: &[&str]) {
    let deadline = std::time::Instant::now() + WAIT;
    for node in nodes {
        let log = node.wait_for_log(LOG, WAIT).unwrap();
        while values(&log) != want {
            assert!(
                std::time::Instant::now() < deadline,
                "node {} holds {:?}",
                node.id(),
                values(&log)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

#[test]
fn three_nodes_over_memory_in_a_few_lines() {
    let dir = tempfile::tempdir().unwrap();
    let network = MemoryNetwork::new(0);
    let coordinator = MemoryCoordinator::new(std::sync::Arc::new(SystemClock));
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let nodes: Vec<Node> = ids
        .iter()
        .map(|&id| {
            Node::builder(id, dir.path().join(format!("node-{}", id.0)))
                .coordinator(coordinator.clone())
                .configure(|c| c.replication.min_insync_replicas = 2)
                .start_in_memory(&network)
                .unwrap()
        })
        .collect();
    nodes[0].create_log(LOG, ids.to_vec()).unwrap();
    let leader = nodes[2].wait_for_leader(LOG, WAIT).unwrap();
    assert_eq!(
        leader,
        NodeId(0),
        "the first replica is the preferred leader"
    );
    let client = LogClient::new(nodes.as_slice(), LOG);
    client.append_values(&["a", "b"], Acks::All).unwrap();
    wait_replicated(&nodes.iter().collect::<Vec<_>>(), &["a", "b"]);
    for node in nodes {
        node.shutdown().unwrap();
    }
}

#[test]
fn three_nodes_over_tcp_bind_and_start_in_one_call() {
    let dir = tempfile::tempdir().unwrap();
    let coordinator = MemoryCoordinator::new(std::sync::Arc::new(SystemClock));
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let nodes: Vec<isrlog::TcpNode> = ids
        .iter()
        .map(|&id| {
            Node::builder(id, dir.path().join(format!("node-{}", id.0)))
                .coordinator(coordinator.clone())
                .configure(|c| c.replication.min_insync_replicas = 2)
                .start_tcp(any_port, HashMap::new(), TcpConfig::default())
                .unwrap()
        })
        .collect();
    // Ports were picked at bind time: tell every node where its peers are.
    for node in &nodes {
        for peer in &nodes {
            node.transport().set_peer(peer.id(), peer.local_addr());
        }
    }
    nodes[1].create_log(LOG, ids.to_vec()).unwrap();
    nodes[0].wait_for_leader(LOG, WAIT).unwrap();
    let leader = nodes[0].wait_for_log(LOG, WAIT).unwrap();
    leader.wait_until_leader(WAIT).unwrap();
    leader.append_values(&["x"], Acks::All).unwrap();
    wait_replicated(&nodes.iter().map(|n| n.node()).collect::<Vec<_>>(), &["x"]);
    for node in nodes {
        node.shutdown().unwrap();
    }
}

#[test]
fn starting_without_a_coordinator_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let error = Node::builder(NodeId(0), dir.path())
        .start_in_memory(&MemoryNetwork::new(0))
        .unwrap_err();
    assert!(error.to_string().contains("coordinator"), "{error}");
}
