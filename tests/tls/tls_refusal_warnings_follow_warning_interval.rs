//! Issue 12: TLS refusal warnings follow `TcpConfig::warning_interval` like
//! every other warning a peer can provoke. Before, they were limited to one
//! a second whatever the setting: refusals spread over more than two
//! seconds gave several warnings with a ten-minute interval.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::log_capture::{captured_logs, server_log_lines_with};
use crate::tls_support::{raw_client_config, send_raw, Seen, TestCa};
use isrlog::testing::{sample_epoch_request, EchoHandler, TcpTransportFactory};
use isrlog::{NodeId, TcpConfig, TcpServer};

/// Far longer than the test: one refusal warning in all.
const WARNING_INTERVAL: Duration = Duration::from_secs(600);
/// Refusals, one per [`GAP`]: over 2 s in all, so a fixed one-second
/// limit would let several warnings through.
const REFUSALS: u32 = 6;
const GAP: Duration = Duration::from_millis(500);

const SERVER: NodeId = NodeId(0);
const PEER: NodeId = NodeId(1);

/// The refusal warnings of the server on `port` (other tests of the
/// binary refuse connections too).
fn refusal_lines(port: u16) -> Vec<String> {
    server_log_lines_with(port, "refused connection")
}

#[test]
fn refusals_are_logged_once_per_warning_interval() {
    captured_logs();
    let ca = TestCa::new("isrlog log interval CA");
    let server = TcpServer::bind_tls(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        Arc::new(EchoHandler::new(SERVER)),
        TcpConfig {
            warning_interval: WARNING_INTERVAL,
            ..TcpTransportFactory::test_config()
        },
        ca.node_config(SERVER),
    )
    .expect("bind");
    let no_cert = raw_client_config(&ca.pem(), None);
    let started = Instant::now();
    for n in 0..REFUSALS {
        let frames = [(PEER, sample_epoch_request(PEER, n))];
        match send_raw(
            server.local_addr(),
            SERVER,
            Arc::clone(&no_cert),
            &frames,
            Duration::from_secs(20),
        ) {
            Seen::Refused { bytes: 0, .. } => {}
            other => panic!("attempt {n}: expected a refusal, got {other:?}"),
        }
        std::thread::sleep(GAP);
    }
    let elapsed = started.elapsed();
    // Refusals are logged on the server's reader threads, possibly just
    // after the client saw the connection close: wait for the first, then
    // a while longer for any other.
    let deadline = Instant::now() + Duration::from_secs(10);
    while refusal_lines(server.local_addr().port()).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(500));
    let lines = refusal_lines(server.local_addr().port());
    println!(
        "{REFUSALS} refusals over {elapsed:?}: {} warnings",
        lines.len()
    );
    assert_eq!(
        lines.len(),
        1,
        "{REFUSALS} refusals over {elapsed:?} with a {WARNING_INTERVAL:?} warning interval: {lines:#?}"
    );
    server.shutdown();
}
