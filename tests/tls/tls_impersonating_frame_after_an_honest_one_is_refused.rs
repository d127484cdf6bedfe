//! Issue 12: the identity check is made for every frame, not once per
//! connection. On one TLS session authenticated as node 1, an honest frame
//! (sent as node 1) is answered; a later frame sent as node 2, or asking
//! for replica 2, is refused: the connection is closed, nothing more is
//! answered and the request never reaches the handler.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::tls_support::{raw_client_config, TestCa};
use isrlog::testing::fuzz::{decode_frames, encode_request_frame};
use isrlog::testing::{echo_response, sample_epoch_request, sample_fetch_request};
use isrlog::transport::{node_dns_name, Request, RequestHandler, Response};
use isrlog::{NodeId, TcpConfig, TcpServer};
use rustls::pki_types::ServerName;

const SERVER: NodeId = NodeId(0);
const HONEST: NodeId = NodeId(1);
const VICTIM: NodeId = NodeId(2);
const WAIT: Duration = Duration::from_secs(20);

/// Echoes, and records who each handled request came from and for.
#[derive(Default)]
struct Recording {
    seen: Mutex<Vec<(NodeId, Request)>>,
}

impl RequestHandler for Recording {
    fn handle(&self, from: NodeId, request: Request) -> Response {
        let response = echo_response(SERVER, from, &request);
        self.seen.lock().unwrap().push((from, request));
        response
    }
}

type Session = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Reads until `frames` whole response frames have come (`Ok`) or the
/// server closed the session (`Err` with the bytes that came).
fn read_frames(stream: &mut Session, frames: usize) -> Result<usize, usize> {
    let deadline = Instant::now() + WAIT;
    let mut received = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if decode_frames(&received, 1 << 26).frames.len() >= frames {
            return Ok(received.len());
        }
        assert!(
            Instant::now() < deadline,
            "neither {frames} answers nor a close within {WAIT:?}"
        );
        match stream.read(&mut buf) {
            Ok(0) => return Err(received.len()),
            Ok(read) => received.extend_from_slice(&buf[..read]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Err(received.len()),
        }
    }
}

fn honest_then(second: (NodeId, Request), what: &str) {
    let ca = TestCa::new("isrlog per-frame CA");
    let handler = Arc::new(Recording::default());
    let server = TcpServer::bind_tls(
        "127.0.0.1:0".parse().expect("address"),
        Arc::clone(&handler) as Arc<dyn RequestHandler>,
        TcpConfig::default(),
        ca.node_config(SERVER),
    )
    .expect("bind");
    let cert = ca.node_cert(HONEST);
    let config = raw_client_config(&ca.pem(), Some(&cert));
    let session = rustls::ClientConnection::new(
        config,
        ServerName::try_from(node_dns_name(SERVER)).expect("server name"),
    )
    .expect("client session");
    let socket = TcpStream::connect(server.local_addr()).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("read timeout");
    let mut stream = rustls::StreamOwned::new(session, socket);

    let honest = sample_epoch_request(HONEST, 1);
    let frame = encode_request_frame(1, HONEST, &honest, 1 << 20).expect("fits");
    stream.write_all(&frame).expect("send honest frame");
    stream.flush().expect("flush");
    read_frames(&mut stream, 1).expect("the honest frame is answered");

    let (from, request) = second;
    let frame = encode_request_frame(2, from, &request, 1 << 20).expect("fits");
    // The write may already fail if the server closed quickly; either way
    // nothing may come back.
    let _ = stream.write_all(&frame).and_then(|()| stream.flush());
    match read_frames(&mut stream, 1) {
        Err(0) => {}
        Err(bytes) => panic!("{what}: {bytes} bytes came back before the close"),
        Ok(bytes) => panic!("{what}: answered ({bytes} bytes)"),
    }
    // The reader thread ends after the refusal: nothing else is handled.
    let deadline = Instant::now() + WAIT;
    while server.connection_count() > 0 {
        assert!(Instant::now() < deadline, "{what}: connection still open");
        std::thread::sleep(Duration::from_millis(10));
    }
    let seen = handler.seen.lock().unwrap().clone();
    assert_eq!(seen, vec![(HONEST, honest)], "{what}: handled {seen:?}");
}

#[test]
fn a_frame_sent_as_another_node_after_an_honest_one_is_refused() {
    honest_then(
        (VICTIM, sample_epoch_request(VICTIM, 2)),
        "sender and replica 2",
    );
}

#[test]
fn a_fetch_for_another_replica_after_an_honest_frame_is_refused() {
    honest_then(
        (HONEST, sample_fetch_request(VICTIM, 2)),
        "sender 1, replica 2",
    );
}
