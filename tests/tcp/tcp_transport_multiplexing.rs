//! Calls from one client to one peer share a connection without waiting for
//! each other: a long-poll fetch held by the peer does not delay the same
//! client's other calls, and answers that come back out of order reach the
//! calls that asked.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use isrlog::testing::{
    echo_response, sample_epoch_request, sample_fetch_request, LongPollHandler, TcpTransportFactory,
};
use isrlog::transport::Request;
use isrlog::{NodeId, TcpConfig, TcpServer, TcpTransport, Transport};

const SERVER: NodeId = NodeId(1);
const CLIENT: NodeId = NodeId(2);

#[test]
fn a_held_long_poll_does_not_delay_other_calls_on_the_same_connection() {
    let config = TcpConfig {
        connections_per_peer: 1,
        ..TcpTransportFactory::test_config()
    };
    let poller = Arc::new(LongPollHandler::new(SERVER));
    let server = TcpServer::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        poller.clone(),
        config.clone(),
    )
    .expect("bind");
    let client = TcpTransport::new(
        CLIENT,
        HashMap::from([(SERVER, server.local_addr())]),
        config,
    )
    .expect("config");
    let mut long_fetch = sample_fetch_request(CLIENT, 1);
    if let Request::Fetch(fetch) = &mut long_fetch {
        fetch.wait_max = Duration::from_secs(10);
    }
    let expected_long = echo_response(SERVER, CLIENT, &long_fetch);
    thread::scope(|scope| {
        let client = &client;
        let long_poll = scope.spawn(move || {
            client.call(SERVER, long_fetch, Instant::now() + Duration::from_secs(10))
        });
        assert!(poller.wait_until_holding(1, Instant::now() + Duration::from_secs(5)));

        let started = Instant::now();
        for id in 0..20 {
            let request = sample_epoch_request(CLIENT, id);
            let got = client
                .call(
                    SERVER,
                    request.clone(),
                    Instant::now() + Duration::from_secs(5),
                )
                .expect("answered during the long poll");
            assert_eq!(got, echo_response(SERVER, CLIENT, &request));
        }
        let elapsed = started.elapsed();
        assert!(
            elapsed < Duration::from_secs(1),
            "calls waited {elapsed:?} behind the long poll"
        );
        assert_eq!(poller.holding(), 1, "the long poll ended before release");
        assert_eq!(
            server.connection_count(),
            1,
            "calls did not share one connection"
        );

        poller.release();
        let answered = long_poll.join().expect("long poll thread");
        assert_eq!(answered, Ok(expected_long));
    });
}
