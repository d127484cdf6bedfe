//! Issue 12: a TLS server logs why it refused a connection or a frame,
//! naming the peer and the reason, but a flood of refusals yields at most
//! one warning a second (with the count of those suppressed), and honest
//! nodes are served throughout.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::log_capture::{captured_logs, server_log_lines_with};
use crate::tls_support::{raw_client_config, send_raw, Seen, TestCa};
use isrlog::testing::{echo_response, sample_epoch_request, EchoHandler, TcpTransportFactory};
use isrlog::{NodeId, TcpServer, TcpTransport, Transport};

const SERVER: NodeId = NodeId(0);
const HONEST: NodeId = NodeId(1);
const VICTIM: NodeId = NodeId(2);

/// The refusal warnings of the server on `port` (other tests of the
/// binary refuse connections too).
fn refusal_lines(port: u16) -> Vec<String> {
    server_log_lines_with(port, "refused connection")
}

#[test]
fn a_flood_of_refusals_is_logged_at_most_once_a_second() {
    captured_logs();
    let ca = TestCa::new("isrlog log test CA");
    let server = TcpServer::bind_tls(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        Arc::new(EchoHandler::new(SERVER)),
        TcpTransportFactory::test_config(),
        ca.node_config(SERVER),
    )
    .expect("bind");
    let honest = TcpTransport::with_tls(
        HONEST,
        HashMap::from([(SERVER, server.local_addr())]),
        TcpTransportFactory::test_config(),
        ca.node_config(HONEST),
    )
    .expect("client");

    let no_cert = raw_client_config(&ca.pem(), None);
    let honest_cert = ca.node_cert(HONEST);
    let impersonator = raw_client_config(&ca.pem(), Some(&honest_cert));
    let started = Instant::now();
    let attempts = 40;
    for n in 0..attempts {
        let (config, from) = if n % 2 == 0 {
            (Arc::clone(&no_cert), HONEST)
        } else {
            (Arc::clone(&impersonator), VICTIM)
        };
        let frames = [(from, sample_epoch_request(from, n))];
        match send_raw(
            server.local_addr(),
            SERVER,
            config,
            &frames,
            Duration::from_secs(20),
        ) {
            Seen::Refused { bytes: 0, .. } => {}
            other => panic!("attempt {n}: expected a refusal, got {other:?}"),
        }
        // The honest node is answered between the attacks.
        let request = sample_epoch_request(HONEST, 1000 + n);
        let answer = honest
            .call(
                SERVER,
                request.clone(),
                Instant::now() + Duration::from_secs(20),
            )
            .unwrap_or_else(|error| panic!("honest call during the flood failed: {error}"));
        assert_eq!(answer, echo_response(SERVER, HONEST, &request));
    }
    // Refusals are logged on the server's reader threads, possibly just
    // after the client saw the connection close.
    let deadline = Instant::now() + Duration::from_secs(10);
    while refusal_lines(server.local_addr().port()).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed() + Duration::from_millis(100);
    let lines = refusal_lines(server.local_addr().port());
    assert!(!lines.is_empty(), "no refusal was logged");
    let bound = elapsed.as_secs() as usize + 1;
    assert!(
        lines.len() <= bound,
        "{} refusal warnings for {attempts} refusals in {elapsed:?} (at most {bound}): {lines:#?}",
        lines.len()
    );
    assert!(
        lines.len() < attempts as usize,
        "every refusal was logged: {lines:#?}"
    );
    assert!(
        lines[0].contains("127.0.0.1") && lines[0].contains("suppressed"),
        "the warning names the peer and the suppressed count: {}",
        lines[0]
    );
    let reasons = lines.join("\n");
    assert!(
        reasons.contains("TLS handshake failed")
            || reasons.contains("on a connection authenticated as node-1"),
        "the warnings say why: {reasons}"
    );
    server.shutdown();
}
