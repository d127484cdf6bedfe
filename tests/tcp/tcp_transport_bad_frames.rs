//! Bad input on the wire, against a live server: each malformed frame arrives
//! on its own raw socket; the server logs a warning naming the peer address
//! and the field at fault, closes that connection, and goes on serving a
//! well-behaved client.
//!
//! The frames are built by hand from the byte table in the `transport::tcp`
//! module docs, so these tests also hold the documented layout to the code.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::tcp_attack_support::FRAME_VERSION;
use isrlog::testing::{echo_response, sample_epoch_request, EchoHandler, TcpTransportFactory};
use isrlog::{NodeId, TcpConfig, TcpServer, TcpTransport, Transport};

use crate::log_capture::{captured_logs, log_lines_with};

const SERVER: NodeId = NodeId(1);
const CLIENT: NodeId = NodeId(2);
const FRAME_BYTES_MAX: usize = 4096;
const HEADER_BYTES: usize = 18;

fn config() -> TcpConfig {
    TcpConfig {
        frame_bytes_max: FRAME_BYTES_MAX,
        frame_read_timeout: Duration::from_millis(300),
        ..TcpTransportFactory::test_config()
    }
}

fn start_server() -> TcpServer {
    captured_logs();
    TcpServer::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        Arc::new(EchoHandler::new(SERVER)),
        config(),
    )
    .expect("bind on loopback")
}

fn good_client(server: &TcpServer) -> TcpTransport {
    TcpTransport::new(
        CLIENT,
        HashMap::from([(SERVER, server.local_addr())]),
        config(),
    )
    .expect("valid config")
}

/// A good client is answered correctly.
fn assert_served(client: &TcpTransport, id: u32) {
    let request = sample_epoch_request(CLIENT, id);
    let response = client
        .call(
            SERVER,
            request.clone(),
            Instant::now() + Duration::from_secs(5),
        )
        .unwrap_or_else(|error| panic!("good client not served: {error}"));
    assert_eq!(response, echo_response(SERVER, CLIENT, &request));
}

/// A frame header per the documented layout.
fn header(version: u8, message_type: u8, body_length: u32, request_id: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES);
    out.extend_from_slice(b"ISRL");
    out.push(version);
    out.push(message_type);
    out.extend_from_slice(&body_length.to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    assert_eq!(out.len(), HEADER_BYTES);
    out
}

/// A valid epoch end offsets request (type 0x02) from `sender`: one query.
fn epoch_request_frame(request_id: u64, sender: u32) -> Vec<u8> {
    let mut body = Vec::new();
    for field in [sender, sender, 1, 7, 5, 3] {
        // sender, replica, query count, log id, current leader epoch, epoch
        body.extend_from_slice(&field.to_le_bytes());
    }
    let mut frame = header(FRAME_VERSION, 0x02, body.len() as u32, request_id);
    frame.extend_from_slice(&body);
    frame
}

/// Sends `bytes` on a fresh raw connection (then, if `half_close`, shuts
/// its write side), and checks the server closes the connection. Returns the
/// raw socket's own address, which the server's warning must name.
fn send_and_expect_close(server: &TcpServer, bytes: &[u8], half_close: bool) -> SocketAddr {
    let mut raw = TcpStream::connect(server.local_addr()).expect("connect");
    let local = raw.local_addr().expect("local address");
    raw.write_all(bytes).expect("write bad bytes");
    if half_close {
        raw.shutdown(Shutdown::Write).expect("half close");
    }
    raw.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("read timeout");
    let mut buffer = [0u8; 256];
    match raw.read(&mut buffer) {
        Ok(0) => {}
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ) => {}
        Ok(read) => panic!("server answered {read} bytes to a bad frame instead of closing"),
        Err(error) => panic!("server did not close the connection: {error}"),
    }
    local
}

/// One bad-frame case: the connection is closed, the warning names the
/// peer and `field`, and a good client is served before and after.
fn check_bad_frame(bytes: &[u8], half_close: bool, field: &str) {
    let server = start_server();
    let client = good_client(&server);
    assert_served(&client, 1);
    let peer = send_and_expect_close(&server, bytes, half_close);
    let lines = log_lines_with(&peer.to_string());
    assert!(
        lines
            .iter()
            .any(|line| line.contains("WARN") && line.contains(field)),
        "no warning naming {peer} and `{field}`; lines for {peer}: {lines:?}"
    );
    assert_served(&client, 2);
    assert_served(&client, 3);
}

#[test]
fn oversized_frame_closes_the_connection() {
    let body_length = (FRAME_BYTES_MAX - HEADER_BYTES + 1) as u32;
    let mut bytes = header(FRAME_VERSION, 0x02, body_length, 9);
    bytes.extend_from_slice(&[0u8; 64]);
    check_bad_frame(&bytes, false, "`body length`");
}

#[test]
fn unknown_version_closes_the_connection() {
    let mut bytes = epoch_request_frame(9, CLIENT.0);
    bytes[4] = 9;
    check_bad_frame(&bytes, false, "unknown version 9");
}

#[test]
fn unknown_message_type_closes_the_connection() {
    let mut bytes = epoch_request_frame(9, CLIENT.0);
    bytes[5] = 0x7f;
    check_bad_frame(&bytes, false, "unknown message type 0x7f");
}

#[test]
fn truncated_frame_then_close_closes_the_connection() {
    let whole = epoch_request_frame(9, CLIENT.0);
    check_bad_frame(&whole[..whole.len() - 5], true, "`body`: truncated");
}

#[test]
fn truncated_header_then_close_closes_the_connection() {
    let whole = epoch_request_frame(9, CLIENT.0);
    check_bad_frame(&whole[..7], true, "`header`: truncated");
}

/// A truncated frame on a socket the peer keeps open: the server gives up
/// once the frame is not whole `frame_read_timeout` (0.3 s in these tests)
/// after its first byte, instead of holding the connection, its thread and
/// its slot for ever.
#[test]
fn truncated_header_on_an_open_socket_closes_the_connection() {
    let whole = epoch_request_frame(9, CLIENT.0);
    check_bad_frame(&whole[..7], false, "7 of 18 header bytes arrived");
}

/// The same with a header and part of the body.
#[test]
fn truncated_body_on_an_open_socket_closes_the_connection() {
    let whole = epoch_request_frame(9, CLIENT.0);
    let body = whole.len() - 18;
    check_bad_frame(
        &whole[..whole.len() - 5],
        false,
        &format!("{} of {body} body bytes arrived", body - 5),
    );
}

#[test]
fn random_garbage_closes_the_connection() {
    // A fixed pseudo-random stream (xorshift), never starting with "ISRL".
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let garbage: Vec<u8> = (0..200)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    assert_ne!(&garbage[..4], b"ISRL");
    check_bad_frame(&garbage, false, "`magic`");
}

#[test]
fn garbage_body_behind_a_valid_header_closes_the_connection() {
    // An epoch request claiming u32::MAX queries in a 12-byte body.
    let mut body = Vec::new();
    for field in [CLIENT.0, CLIENT.0, u32::MAX] {
        body.extend_from_slice(&field.to_le_bytes());
    }
    let mut bytes = header(FRAME_VERSION, 0x02, body.len() as u32, 9);
    bytes.extend_from_slice(&body);
    check_bad_frame(&bytes, false, "`epoch query count`");
}

#[test]
fn response_frame_sent_to_a_server_closes_the_connection() {
    // An error response (0x80) with code 0.
    let mut bytes = header(FRAME_VERSION, 0x80, 2, 9);
    bytes.extend_from_slice(&0u16.to_le_bytes());
    check_bad_frame(&bytes, false, "a response sent to a server");
}

/// The byte table in the module docs is the real layout: a request built by
/// hand from it is answered with a response laid out the same way, carrying
/// the request id and the sender.
#[test]
fn hand_built_frame_following_the_documented_layout_is_answered() {
    let server = start_server();
    let mut raw = TcpStream::connect(server.local_addr()).expect("connect");
    raw.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("read timeout");
    let request_id = 0x0102_0304_0506_0708;
    raw.write_all(&epoch_request_frame(request_id, 77))
        .expect("write");
    let mut head = [0u8; HEADER_BYTES];
    raw.read_exact(&mut head).expect("response header");
    assert_eq!(&head[..4], b"ISRL");
    assert_eq!(head[4], FRAME_VERSION, "version");
    assert_eq!(head[5], 0x82, "epoch end offsets response");
    let body_length = u32::from_le_bytes(head[6..10].try_into().unwrap()) as usize;
    assert_eq!(
        u64::from_le_bytes(head[10..18].try_into().unwrap()),
        request_id
    );
    let mut body = vec![0u8; body_length];
    raw.read_exact(&mut body).expect("response body");
    // answer count 1, log 7, error 0, end present, epoch 3, end offset as
    // EchoHandler computes it from (current epoch 5, callee 1, caller 77).
    let mut want = Vec::new();
    want.extend_from_slice(&1u32.to_le_bytes());
    want.extend_from_slice(&7u32.to_le_bytes());
    want.extend_from_slice(&0u16.to_le_bytes());
    want.push(1);
    want.extend_from_slice(&3u32.to_le_bytes());
    want.extend_from_slice(&((5u64 << 32) | (1 << 16) | 77).to_le_bytes());
    assert_eq!(body, want);
}
