//! Issue 12: with TLS on, a frame must still be whole within
//! `frame_read_timeout` of its first byte, and a connection's first frame
//! must still come within `handshake_timeout` of its accept. Before, one
//! `read` of the TLS reader looped on the socket until a whole record
//! arrived, so the deadlines (checked only between reads) never came round:
//! a peer with a valid certificate trickling a record one ciphertext byte at
//! a time kept its connection, its thread and its frame budget for ever
//! (a reviewer saw `frame_timeouts: 0` after 6 s with a 1 s deadline).

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::tcp_attack_support::{closed_by_server, frame_header, wait_until, EPOCH_REQUEST};
use crate::tls_support::{raw_client_config, TestCa};
use isrlog::transport::{node_dns_name, ErrorCode, Request, RequestHandler, Response};
use isrlog::{NodeId, TcpConfig, TcpServer};
use rustls::pki_types::ServerName;

/// Gap between two trickled ciphertext bytes.
const GAP: Duration = Duration::from_millis(100);
/// Longer than any deadline here, generous for a loaded machine, and still
/// a small part of the ~100 s the trickle would take.
const GIVE_UP: Duration = Duration::from_secs(25);

struct Nop;
impl RequestHandler for Nop {
    fn handle(&self, _from: NodeId, _request: Request) -> Response {
        Response::Error(ErrorCode::Unknown)
    }
}

/// A TLS session with `server` as node 1, its handshake done.
fn authenticated(ca: &TestCa, server: &TcpServer) -> (rustls::ClientConnection, TcpStream) {
    let cert = ca.node_cert(NodeId(1));
    let config = raw_client_config(&ca.pem(), Some(&cert));
    let mut conn = rustls::ClientConnection::new(
        config,
        ServerName::try_from(node_dns_name(NodeId(0))).expect("server name"),
    )
    .expect("client session");
    let mut sock = TcpStream::connect(server.local_addr()).expect("connect");
    while conn.is_handshaking() {
        conn.complete_io(&mut sock).expect("handshake");
    }
    (conn, sock)
}

/// `plaintext` sealed into records, not sent.
fn sealed(conn: &mut rustls::ClientConnection, plaintext: &[u8]) -> Vec<u8> {
    conn.writer().write_all(plaintext).expect("seal");
    let mut records = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut records).expect("records");
    }
    records
}

/// Sends `records` one byte per [`GAP`] until the server closes the
/// connection; returns how long that took from the first byte.
fn trickle_until_closed(sock: &mut TcpStream, records: &[u8]) -> Duration {
    let started = Instant::now();
    let mut sent = 0;
    loop {
        if sock.write_all(&records[sent..sent + 1]).is_err() || closed_by_server(sock, GAP) {
            return started.elapsed();
        }
        sent += 1;
        assert!(
            sent < records.len() && started.elapsed() < GIVE_UP,
            "{sent} ciphertext bytes trickled over {:?} and the connection is still open",
            started.elapsed()
        );
    }
}

#[test]
fn a_peer_trickling_ciphertext_is_cut_off_at_the_frame_deadline() {
    const FRAME_TIMEOUT: Duration = Duration::from_secs(1);
    const BODY_BYTES: usize = 100_000;
    let ca = TestCa::new("ca");
    let server = TcpServer::bind_tls(
        "127.0.0.1:0".parse().expect("address"),
        Arc::new(Nop),
        TcpConfig {
            frame_read_timeout: FRAME_TIMEOUT,
            ..TcpConfig::default()
        },
        ca.node_config(NodeId(0)),
    )
    .expect("bind");
    let (mut conn, mut sock) = authenticated(&ca, &server);
    // The header as one whole record (the frame's clock starts with it and
    // its body's bytes are reserved from the budget), then the body's
    // first record held back and trickled.
    let header = sealed(&mut conn, &frame_header(EPOCH_REQUEST, BODY_BYTES as u32));
    sock.write_all(&header).expect("send header");
    let body = sealed(&mut conn, &[1u8; 1000]);
    wait_until("the header to be read", Duration::from_secs(10), || {
        server.stats().buffered_frame_bytes == BODY_BYTES
    });
    let cut_off = trickle_until_closed(&mut sock, &body);
    println!("trickled ciphertext one byte per {GAP:?}; cut off after {cut_off:?}");
    // The header arrived before the first body byte: the deadline may come
    // up to one gap early as measured here.
    assert!(
        cut_off + GAP >= FRAME_TIMEOUT,
        "cut off after {cut_off:?}, before the frame deadline"
    );
    wait_until(
        "the late frame to be counted and its bytes freed",
        Duration::from_secs(10),
        || {
            let stats = server.stats();
            stats.frame_timeouts == 1 && stats.buffered_frame_bytes == 0
        },
    );
}

#[test]
fn a_peer_trickling_ciphertext_before_its_first_frame_is_cut_off_at_the_handshake_deadline() {
    const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);
    let ca = TestCa::new("ca");
    let server = TcpServer::bind_tls(
        "127.0.0.1:0".parse().expect("address"),
        Arc::new(Nop),
        TcpConfig {
            handshake_timeout: HANDSHAKE_TIMEOUT,
            ..TcpConfig::default()
        },
        ca.node_config(NodeId(0)),
    )
    .expect("bind");
    let accepted = Instant::now();
    let (mut conn, mut sock) = authenticated(&ca, &server);
    // No plaintext arrives until the whole record has: the first frame's
    // byte never comes.
    let record = sealed(&mut conn, &[1u8; 1000]);
    let cut_off = trickle_until_closed(&mut sock, &record);
    let since_accept = accepted.elapsed();
    println!("trickled ciphertext one byte per {GAP:?}; cut off after {cut_off:?}, {since_accept:?} after connecting");
    assert!(
        since_accept >= HANDSHAKE_TIMEOUT,
        "cut off {since_accept:?} after connecting, before the handshake deadline"
    );
    wait_until(
        "the silent connection to be counted",
        Duration::from_secs(10),
        || server.stats().handshake_timeouts == 1,
    );
}
