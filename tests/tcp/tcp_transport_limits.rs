//! The TCP transport's bounds hold: a full handler queue answers with an
//! error instead of growing, a server over its connection limit closes new
//! connections (or, if some never sent a frame, the oldest of those), one
//! address holds at most its share of connections, a connection that never
//! speaks is closed after the handshake timeout, a silent peer costs a call
//! its deadline and no more, and frames over `frame_bytes_max` are refused on
//! both sides without harming the connection.

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use isrlog::testing::{
    echo_response, sample_epoch_request, sample_fetch_request, EchoHandler, FnHandler,
    LongPollHandler, TcpTransportFactory,
};
use isrlog::transport::{
    ErrorCode, FetchLog, FetchResponse, FetchedLog, Request, Response, TransportError,
};
use isrlog::{LeaderEpoch, LogId, NodeId, Offset, TcpConfig, TcpServer, TcpTransport, Transport};

const SERVER: NodeId = NodeId(1);
const CLIENT: NodeId = NodeId(2);

fn loopback_any_port() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn client(server_addr: SocketAddr, config: TcpConfig) -> TcpTransport {
    TcpTransport::new(CLIENT, HashMap::from([(SERVER, server_addr)]), config).expect("config")
}

fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < give_up, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_full_handler_queue_answers_with_an_error_instead_of_queueing() {
    const QUICK_CALLS: u32 = 5;
    let config = TcpConfig {
        handler_threads: 1,
        handler_queue_len: 1,
        ..TcpTransportFactory::test_config()
    };
    let poller = Arc::new(LongPollHandler::new(SERVER));
    let server =
        TcpServer::bind(loopback_any_port(), poller.clone(), config.clone()).expect("bind");
    let client = client(server.local_addr(), config);
    let mut held = sample_fetch_request(CLIENT, 1);
    if let Request::Fetch(fetch) = &mut held {
        fetch.wait_max = Duration::from_secs(10);
    }
    thread::scope(|scope| {
        let client = &client;
        let long_poll = scope
            .spawn(move || client.call(SERVER, held, Instant::now() + Duration::from_secs(10)));
        assert!(poller.wait_until_holding(1, Instant::now() + Duration::from_secs(5)));
        // The only handler thread is busy: one quick request fits in the
        // queue, every other one must be answered with an error at once.
        let (done, answers) = mpsc::channel();
        for id in 0..QUICK_CALLS {
            let done = done.clone();
            scope.spawn(move || {
                let request = sample_epoch_request(CLIENT, id);
                let result = client.call(
                    SERVER,
                    request.clone(),
                    Instant::now() + Duration::from_secs(10),
                );
                // Fails only if the test thread already gave up (panicked).
                let _ = done.send((request, result));
            });
        }
        let mut rejected = 0;
        for _ in 0..QUICK_CALLS - 1 {
            let (_, result) = answers
                .recv_timeout(Duration::from_secs(3))
                .expect("rejected calls answer while the handler is busy");
            assert_eq!(result, Ok(Response::Error(ErrorCode::Unknown)));
            rejected += 1;
        }
        poller.release();
        let (request, result) = answers
            .recv_timeout(Duration::from_secs(3))
            .expect("the queued call is answered once the handler is free");
        assert_eq!(result, Ok(echo_response(SERVER, CLIENT, &request)));
        assert_eq!(rejected, QUICK_CALLS - 1);
        let long = long_poll.join().expect("long poll thread");
        assert!(matches!(long, Ok(Response::Fetch(_))), "{long:?}");
    });
}

/// Reads from `stream` until the server closes it; panics if it stays open.
fn expect_closed_by_server(stream: &mut TcpStream, what: &str) {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    match stream.read(&mut [0u8; 16]) {
        Ok(0) => {}
        Err(error)
            if matches!(
                error.kind(),
                ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
            ) => {}
        other => panic!("{what} was not closed: {other:?}"),
    }
}

/// Every slot held by a connection that has sent valid frames: a new one is
/// closed on accept, counted as refused.
#[test]
fn connections_over_the_limit_are_closed_on_accept() {
    let config = TcpConfig {
        server_connections_max: 1,
        connections_per_peer: 1,
        ..TcpTransportFactory::test_config()
    };
    let server = TcpServer::bind(
        loopback_any_port(),
        Arc::new(EchoHandler::new(SERVER)),
        config.clone(),
    )
    .expect("bind");
    let first = client(server.local_addr(), config.clone());
    let request = sample_epoch_request(CLIENT, 1);
    first
        .call(SERVER, request, Instant::now() + Duration::from_secs(5))
        .expect("the first connection is served");
    let mut second = TcpStream::connect(server.local_addr()).expect("connect");
    expect_closed_by_server(&mut second, "a connection over the limit");
    assert_eq!(server.stats().connections_refused, 1);
    first.shutdown();
    wait_for("the first connection to go", || {
        server.connection_count() == 0
    });
    let client = client(server.local_addr(), config);
    let request = sample_epoch_request(CLIENT, 1);
    let got = client
        .call(
            SERVER,
            request.clone(),
            Instant::now() + Duration::from_secs(5),
        )
        .expect("served once below the limit");
    assert_eq!(got, echo_response(SERVER, CLIENT, &request));
}

/// All slots held by connections that never sent a frame: a new connection
/// takes the slot of the oldest of them (idle connections cannot lock a
/// replica out), and is served.
#[test]
fn a_connection_that_never_spoke_gives_its_slot_to_a_new_one() {
    let config = TcpConfig {
        server_connections_max: 3,
        connections_per_peer: 1,
        ..TcpTransportFactory::test_config()
    };
    let server = TcpServer::bind(
        loopback_any_port(),
        Arc::new(EchoHandler::new(SERVER)),
        config.clone(),
    )
    .expect("bind");
    let mut idle = Vec::new();
    for count in 1..=3 {
        idle.push(TcpStream::connect(server.local_addr()).expect("connect"));
        wait_for("the idle connection to register", || {
            server.connection_count() == count
        });
    }
    let client = client(server.local_addr(), config);
    for id in 0..3 {
        let request = sample_epoch_request(CLIENT, id);
        let got = client
            .call(
                SERVER,
                request.clone(),
                Instant::now() + Duration::from_secs(5),
            )
            .expect("served though idle connections held every slot");
        assert_eq!(got, echo_response(SERVER, CLIENT, &request));
    }
    expect_closed_by_server(&mut idle[0], "the oldest idle connection");
    let stats = server.stats();
    assert_eq!(stats.connections_evicted, 1, "{stats:?}");
    assert_eq!(stats.connections_refused, 0, "{stats:?}");
    assert!(stats.connections <= 3, "{stats:?}");
}

/// One address holds at most `connections_per_address_max` connections;
/// more are refused and counted.
#[test]
fn one_address_holds_at_most_its_share_of_connections() {
    const PER_ADDRESS: usize = 4;
    let config = TcpConfig {
        connections_per_address_max: PER_ADDRESS,
        ..TcpTransportFactory::test_config()
    };
    let server = TcpServer::bind(
        loopback_any_port(),
        Arc::new(EchoHandler::new(SERVER)),
        config,
    )
    .expect("bind");
    let mut held = Vec::new();
    for count in 1..=PER_ADDRESS {
        held.push(TcpStream::connect(server.local_addr()).expect("connect"));
        wait_for("the connection to register", || {
            server.connection_count() == count
        });
    }
    for extra in 1..=3 {
        let mut over = TcpStream::connect(server.local_addr()).expect("connect");
        expect_closed_by_server(&mut over, "a connection over the per-address limit");
        assert_eq!(server.stats().connections_refused, extra);
    }
    assert_eq!(server.connection_count(), PER_ADDRESS);
}

/// A connection that sends nothing is closed after `handshake_timeout`,
/// long before `idle_timeout`.
#[test]
fn a_connection_that_never_sends_a_frame_is_closed_after_the_handshake_timeout() {
    let config = TcpConfig {
        handshake_timeout: Duration::from_millis(300),
        ..TcpTransportFactory::test_config()
    };
    assert!(config.idle_timeout >= Duration::from_secs(60));
    let server = TcpServer::bind(
        loopback_any_port(),
        Arc::new(EchoHandler::new(SERVER)),
        config,
    )
    .expect("bind");
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.local_addr()).expect("connect");
    expect_closed_by_server(&mut silent, "a silent connection");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "closed before the handshake timeout: {:?}",
        started.elapsed()
    );
    wait_for("the handshake timeout to be counted", || {
        server.stats().handshake_timeouts == 1
    });
}

#[test]
fn a_peer_that_never_answers_costs_the_call_its_deadline() {
    // Connections complete in the kernel's backlog, but nobody reads them.
    let silent = TcpListener::bind(loopback_any_port()).expect("bind");
    let client = client(
        silent.local_addr().expect("address"),
        TcpTransportFactory::test_config(),
    );
    let timeout = Duration::from_millis(150);
    for id in 0..2 {
        let started = Instant::now();
        let result = client.call(SERVER, sample_epoch_request(CLIENT, id), started + timeout);
        let elapsed = started.elapsed();
        assert_eq!(result, Err(TransportError::Timeout { to: SERVER }));
        assert!(elapsed >= timeout, "returned early, after {elapsed:?}");
        assert!(
            elapsed < timeout + Duration::from_secs(1),
            "returned late, after {elapsed:?}"
        );
    }
}

#[test]
fn a_request_over_the_frame_limit_is_not_sent_and_the_connection_stays_usable() {
    let config = TcpConfig {
        frame_bytes_max: 1024,
        ..TcpTransportFactory::test_config()
    };
    let server = TcpServer::bind(
        loopback_any_port(),
        Arc::new(EchoHandler::new(SERVER)),
        config.clone(),
    )
    .expect("bind");
    let client = client(server.local_addr(), config);
    let mut big = sample_fetch_request(CLIENT, 1);
    if let Request::Fetch(fetch) = &mut big {
        fetch.logs = (0..100)
            .map(|index| FetchLog {
                log: LogId(index),
                current_leader_epoch: LeaderEpoch(1),
                fetch_offset: Offset(0),
                last_fetched_epoch: None,
                line_epoch: Some(LeaderEpoch(1)),
                log_start_offset: Offset(0),
                bytes_max: 1,
                applied_offset: None,
            })
            .collect();
    }
    match client.call(SERVER, big, Instant::now() + Duration::from_secs(5)) {
        Err(TransportError::Unreachable { to, reason }) => {
            assert_eq!(to, SERVER);
            assert!(reason.contains("frame_bytes_max"), "{reason}");
        }
        other => panic!("an oversized request must not be sent, got {other:?}"),
    }
    let request = sample_epoch_request(CLIENT, 2);
    let got = client
        .call(
            SERVER,
            request.clone(),
            Instant::now() + Duration::from_secs(5),
        )
        .expect("served after the refused request");
    assert_eq!(got, echo_response(SERVER, CLIENT, &request));
}

#[test]
fn a_response_over_the_frame_limit_becomes_an_error_response() {
    let config = TcpConfig {
        frame_bytes_max: 1024,
        ..TcpTransportFactory::test_config()
    };
    let handler = FnHandler::new(|from, request: Request| match request {
        Request::Fetch(_) => Response::Fetch(FetchResponse {
            logs: vec![FetchedLog {
                log: LogId(0),
                error: ErrorCode::None,
                high_watermark: Offset(0),
                log_start_offset: Offset(0),
                log_end_offset: Offset(0),
                log_start_epoch: None,
                log_end_epoch: None,
                diverging: None,
                records: Bytes::from(vec![7u8; 2000]),
                applied_offsets: Vec::new(),
            }],
        }),
        other => echo_response(SERVER, from, &other),
    });
    let server =
        TcpServer::bind(loopback_any_port(), Arc::new(handler), config.clone()).expect("bind");
    let client = client(server.local_addr(), config);
    let got = client
        .call(
            SERVER,
            sample_fetch_request(CLIENT, 1),
            Instant::now() + Duration::from_secs(5),
        )
        .expect("answered");
    assert_eq!(got, Response::Error(ErrorCode::Unknown));
    let request = sample_epoch_request(CLIENT, 2);
    let got = client
        .call(
            SERVER,
            request.clone(),
            Instant::now() + Duration::from_secs(5),
        )
        .expect("served after the oversized response");
    assert_eq!(got, echo_response(SERVER, CLIENT, &request));
}

#[test]
fn a_panicking_handler_answers_with_an_error_and_the_pool_keeps_its_thread() {
    let config = TcpConfig {
        handler_threads: 1,
        ..TcpTransportFactory::test_config()
    };
    let handler = FnHandler::new(|from, request: Request| match request {
        Request::Fetch(_) => panic!("handler bug (expected by this test)"),
        other => echo_response(SERVER, from, &other),
    });
    let server =
        TcpServer::bind(loopback_any_port(), Arc::new(handler), config.clone()).expect("bind");
    let client = client(server.local_addr(), config);
    for id in 0..3 {
        let got = client
            .call(
                SERVER,
                sample_fetch_request(CLIENT, id),
                Instant::now() + Duration::from_secs(5),
            )
            .expect("answered");
        assert_eq!(got, Response::Error(ErrorCode::Unknown));
        let request = sample_epoch_request(CLIENT, id as u32);
        let got = client
            .call(
                SERVER,
                request.clone(),
                Instant::now() + Duration::from_secs(5),
            )
            .expect("the single handler thread survived the panic");
        assert_eq!(got, echo_response(SERVER, CLIENT, &request));
    }
}

#[test]
fn a_peer_that_stops_reading_costs_a_large_request_its_deadline() {
    // The listener never accepts, so nobody reads: once the socket buffers
    // (a few MiB on loopback) are full, the client's write blocks, and the
    // call must still end at its deadline.
    let silent = TcpListener::bind(loopback_any_port()).expect("bind");
    let client = client(
        silent.local_addr().expect("address"),
        TcpTransportFactory::test_config(),
    );
    let mut huge = sample_fetch_request(CLIENT, 1);
    if let Request::Fetch(fetch) = &mut huge {
        // About 25 MB encoded, well past what loopback buffers hold.
        fetch.logs = (0..850_000)
            .map(|index| FetchLog {
                log: LogId(index),
                current_leader_epoch: LeaderEpoch(1),
                fetch_offset: Offset(0),
                last_fetched_epoch: None,
                line_epoch: Some(LeaderEpoch(1)),
                log_start_offset: Offset(0),
                bytes_max: 1,
                applied_offset: None,
            })
            .collect();
    }
    let timeout = Duration::from_millis(300);
    let started = Instant::now();
    let result = client.call(SERVER, huge, started + timeout);
    let elapsed = started.elapsed();
    assert_eq!(result, Err(TransportError::Timeout { to: SERVER }));
    assert!(
        elapsed < timeout + Duration::from_secs(1),
        "returned late, after {elapsed:?}"
    );
}

/// A large request keeps its frame budget bytes until it is answered, so
/// requests decoded and waiting for a handler cannot escape the budget; a
/// second large request is not read until the first is answered, while a
/// small one on another connection is served at once.
#[test]
fn a_large_request_holds_the_frame_budget_until_it_is_answered() {
    const BUDGET: usize = 256 * 1024;
    let config = TcpConfig {
        frame_bytes_max: BUDGET,
        frame_buffer_bytes_max: BUDGET,
        ..TcpTransportFactory::test_config()
    };
    let poller = Arc::new(LongPollHandler::new(SERVER));
    let server =
        TcpServer::bind(loopback_any_port(), poller.clone(), config.clone()).expect("bind");
    let client_for_small = client(server.local_addr(), config.clone());
    let client = client(server.local_addr(), config);
    // About 150 KB encoded: over the 64 KiB of a small body, and two do not
    // fit the budget together.
    let large = |id| {
        let mut request = sample_fetch_request(CLIENT, id);
        if let Request::Fetch(fetch) = &mut request {
            fetch.wait_max = Duration::from_secs(30);
            fetch.logs = (0..5000)
                .map(|index| FetchLog {
                    log: LogId(index),
                    current_leader_epoch: LeaderEpoch(1),
                    fetch_offset: Offset(0),
                    last_fetched_epoch: None,
                    line_epoch: Some(LeaderEpoch(1)),
                    log_start_offset: Offset(0),
                    bytes_max: 1,
                    applied_offset: None,
                })
                .collect();
        }
        request
    };
    thread::scope(|scope| {
        let client = &client;
        let first = scope
            .spawn(move || client.call(SERVER, large(1), Instant::now() + Duration::from_secs(30)));
        assert!(poller.wait_until_holding(1, Instant::now() + Duration::from_secs(10)));
        let held = server.stats().buffered_frame_bytes;
        assert!(held > 64 * 1024, "the held request accounts {held} bytes");
        let second = scope
            .spawn(move || client.call(SERVER, large(2), Instant::now() + Duration::from_secs(30)));
        wait_for("the second large request to wait for the budget", || {
            server.stats().frames_waited_for_budget == 1
        });
        assert_eq!(poller.holding(), 1, "the second request was read");
        let small = sample_epoch_request(CLIENT, 3);
        // On connections of its own: a connection waiting for the budget
        // is not read from, whatever follows on it.
        let got = client_for_small
            .call(
                SERVER,
                small.clone(),
                Instant::now() + Duration::from_secs(10),
            )
            .expect("a small request is served meanwhile");
        assert_eq!(got, echo_response(SERVER, CLIENT, &small));
        poller.release();
        for call in [first, second] {
            // Answered. (The echo of 5000 logs is over `frame_bytes_max`, so
            // what comes back is the error response that stands in for it.)
            let answer = call.join().expect("caller thread");
            assert!(answer.is_ok(), "{answer:?}");
        }
        wait_for("the budget to be given back", || {
            server.stats().buffered_frame_bytes == 0
        });
        assert!(server.stats().buffered_frame_bytes_peak <= BUDGET);
    });
}
