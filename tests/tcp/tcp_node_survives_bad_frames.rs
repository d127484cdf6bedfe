//! Issue 6, bad input on the wire against a live node: a running `Node`
//! behind its `TcpServer` gets an oversized frame, an unknown version, an
//! unknown message type, a truncated frame on an open socket and garbage,
//! each on its own connection. Each connection is closed, and the node keeps
//! replicating with its peers over TCP (acks=all appends still commit).

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use crate::tcp_attack_support::FRAME_VERSION;
use isrlog::testing::TcpCluster;
use isrlog::{Acks, LogId, NodeId, TcpConfig};

fn header(version: u8, message_type: u8, body_length: u32) -> Vec<u8> {
    let mut out = b"ISRL".to_vec();
    out.push(version);
    out.push(message_type);
    out.extend_from_slice(&body_length.to_le_bytes());
    out.extend_from_slice(&7u64.to_le_bytes());
    out
}

fn expect_closed(addr: std::net::SocketAddr, bytes: &[u8], half_close: bool) {
    let mut raw = TcpStream::connect(addr).expect("connect");
    raw.write_all(bytes).expect("write");
    if half_close {
        raw.shutdown(Shutdown::Write).expect("half close");
    }
    raw.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buffer = [0u8; 64];
    match raw.read(&mut buffer) {
        Ok(0) => {}
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ) => {}
        other => panic!("the node did not close a connection sending {bytes:?}: {other:?}"),
    }
}

#[test]
fn a_node_closes_bad_connections_and_keeps_replicating() {
    let cluster = TcpCluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .tcp_config(TcpConfig {
            frame_read_timeout: Duration::from_millis(300),
            ..TcpConfig::default()
        })
        .build()
        .unwrap();
    let log = LogId(0);
    cluster.create_log(log, 3).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    leader.append_values(&[b"before"], Acks::All).unwrap();

    let addr = cluster.addr(NodeId(0)).expect("node 0 listens");
    let mut garbage = vec![0u8; 100];
    for (i, b) in garbage.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37).wrapping_add(11);
    }
    let cases: Vec<(Vec<u8>, bool)> = vec![
        (header(FRAME_VERSION, 0x02, u32::MAX), false), // oversized
        ([header(9, 0x02, 4), vec![0; 4]].concat(), false), // unknown version
        ([header(FRAME_VERSION, 0x7f, 4), vec![0; 4]].concat(), false), // unknown type
        (
            [header(FRAME_VERSION, 0x02, 40), vec![1; 10]].concat(),
            false,
        ), // truncated, socket left open
        (
            [header(FRAME_VERSION, 0x02, 40), vec![1; 10]].concat(),
            true,
        ), // truncated, then closed
        (garbage, false),                               // garbage
    ];
    for (bytes, half_close) in &cases {
        expect_closed(addr, bytes, *half_close);
        // The node still serves its peers: a write commits on the ISR.
        let leader = cluster.leader_log(log).unwrap();
        leader
            .append_values(&[b"still replicating"], Acks::All)
            .unwrap();
    }
    let leader = cluster.leader_log(log).unwrap();
    assert!(leader.high_watermark().0 > cases.len() as u64);
    cluster.shutdown().unwrap();
}
