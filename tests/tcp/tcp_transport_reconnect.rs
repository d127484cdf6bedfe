//! A TCP client survives its peer going away: calls fail promptly (never
//! hang) while the peer is down, and succeed again once a server is back on
//! the same port or the peer's address is updated.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use isrlog::testing::{
    echo_response, sample_epoch_request, sample_fetch_request, EchoHandler, LongPollHandler,
    TcpTransportFactory,
};
use isrlog::transport::{Request, TransportError};
use isrlog::{NodeId, RequestHandler, TcpServer, TcpTransport, Transport};

const SERVER: NodeId = NodeId(1);
const CLIENT: NodeId = NodeId(2);

fn bind(addr: SocketAddr, handler: Arc<dyn RequestHandler>) -> TcpServer {
    TcpServer::bind(addr, handler, TcpTransportFactory::test_config()).expect("bind")
}

fn loopback_any_port() -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
}

fn client(server_addr: SocketAddr) -> TcpTransport {
    TcpTransport::new(
        CLIENT,
        HashMap::from([(SERVER, server_addr)]),
        TcpTransportFactory::test_config(),
    )
    .expect("valid config")
}

fn call(client: &TcpTransport, id: u32, timeout: Duration) -> Result<(), TransportError> {
    let request = sample_epoch_request(CLIENT, id);
    let response = client.call(SERVER, request.clone(), Instant::now() + timeout)?;
    assert_eq!(response, echo_response(SERVER, CLIENT, &request));
    Ok(())
}

/// Calls until one succeeds; panics if none does within `within`.
fn call_until_served(client: &TcpTransport, within: Duration) -> u32 {
    let give_up = Instant::now() + within;
    let mut attempts = 0;
    loop {
        attempts += 1;
        match call(client, 1000 + attempts, Duration::from_millis(500)) {
            Ok(()) => return attempts,
            Err(error) if Instant::now() < give_up => {
                assert!(
                    matches!(
                        error,
                        TransportError::Unreachable { to: SERVER, .. }
                            | TransportError::Timeout { to: SERVER }
                    ),
                    "unexpected error while reconnecting: {error}"
                );
                thread::sleep(Duration::from_millis(5));
            }
            Err(error) => panic!("not served again within {within:?}: {error}"),
        }
    }
}

#[test]
fn calls_fail_promptly_while_the_server_is_down_and_succeed_once_it_is_back_on_the_same_port() {
    let first = bind(loopback_any_port(), Arc::new(EchoHandler::new(SERVER)));
    let addr = first.local_addr();
    let client = client(addr);
    call(&client, 1, Duration::from_secs(5)).expect("served while up");

    first.shutdown();
    drop(first);
    for id in 0..5 {
        let started = Instant::now();
        match call(&client, 10 + id, Duration::from_secs(2)) {
            Err(TransportError::Unreachable { to, .. }) | Err(TransportError::Timeout { to }) => {
                assert_eq!(to, SERVER)
            }
            other => panic!("call to a stopped server: expected a failure, got {other:?}"),
        }
        // Refused connections and backoff answer at once, not at the deadline.
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "call to a stopped server took {:?}",
            started.elapsed()
        );
    }

    let second = bind(addr, Arc::new(EchoHandler::new(SERVER)));
    assert_eq!(second.local_addr(), addr);
    call_until_served(&client, Duration::from_secs(2));
    call(&client, 2, Duration::from_secs(5)).expect("served after reconnecting");
}

#[test]
fn moving_a_peer_to_a_new_address_reconnects_there() {
    let old = bind(loopback_any_port(), Arc::new(EchoHandler::new(SERVER)));
    let client = client(old.local_addr());
    call(&client, 1, Duration::from_secs(5)).expect("served at the old address");
    old.shutdown();

    let new = bind(loopback_any_port(), Arc::new(EchoHandler::new(SERVER)));
    client.set_peer(SERVER, new.local_addr());
    assert_eq!(client.peer_addr(SERVER), Some(new.local_addr()));
    call(&client, 2, Duration::from_secs(5)).expect("served at the new address");

    client.remove_peer(SERVER);
    match call(&client, 3, Duration::from_secs(5)) {
        Err(TransportError::Unreachable { to, .. }) => assert_eq!(to, SERVER),
        other => panic!("call to a removed peer: expected Unreachable, got {other:?}"),
    }
}

#[test]
fn a_call_waiting_when_the_server_stops_fails_promptly() {
    let poller = Arc::new(LongPollHandler::new(SERVER));
    let server = bind(loopback_any_port(), poller.clone());
    let client = client(server.local_addr());
    let mut held = sample_fetch_request(CLIENT, 1);
    if let Request::Fetch(fetch) = &mut held {
        fetch.wait_max = Duration::from_secs(10);
    }
    thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let started = Instant::now();
            let result = client.call(SERVER, held, started + Duration::from_secs(10));
            (result, started.elapsed())
        });
        assert!(poller.wait_until_holding(1, Instant::now() + Duration::from_secs(5)));
        // The server closes connections before it waits for its handlers, so
        // the caller learns at once; the held handler is released afterwards.
        let stopping = scope.spawn(|| server.shutdown());
        let (result, elapsed) = waiting.join().expect("caller thread");
        poller.release();
        stopping.join().expect("shutdown thread");
        match result {
            Err(TransportError::Unreachable { to, .. }) => assert_eq!(to, SERVER),
            other => panic!("expected Unreachable when the server stopped, got {other:?}"),
        }
        assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    });
}

#[test]
fn shutting_the_client_down_fails_waiting_and_later_calls_with_shutdown() {
    let poller = Arc::new(LongPollHandler::new(SERVER));
    let server = bind(loopback_any_port(), poller.clone());
    let client = client(server.local_addr());
    let mut held = sample_fetch_request(CLIENT, 1);
    if let Request::Fetch(fetch) = &mut held {
        fetch.wait_max = Duration::from_secs(10);
    }
    thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let started = Instant::now();
            let result = client.call(SERVER, held, started + Duration::from_secs(10));
            (result, started.elapsed())
        });
        assert!(poller.wait_until_holding(1, Instant::now() + Duration::from_secs(5)));
        client.shutdown();
        let (result, elapsed) = waiting.join().expect("caller thread");
        assert_eq!(result, Err(TransportError::Shutdown));
        assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    });
    assert_eq!(
        call(&client, 2, Duration::from_secs(1)),
        Err(TransportError::Shutdown)
    );
    poller.release();
}

/// Regression: a server dropped by one of its own handlers (a node shutting
/// itself down on request) waited `shutdown_timeout` for the very thread
/// doing the dropping. The shutdown now skips joining the current thread.
#[test]
fn a_server_dropped_by_its_own_handler_stops_without_waiting_for_itself() {
    use isrlog::testing::FnHandler;
    use std::sync::{mpsc, Mutex};

    let slot: Arc<Mutex<Option<TcpServer>>> = Arc::new(Mutex::new(None));
    let (took, drop_durations) = mpsc::channel();
    let server_slot = Arc::clone(&slot);
    let took = Mutex::new(took);
    let handler = FnHandler::new(move |from, request: Request| {
        let server = server_slot.lock().unwrap().take();
        let started = Instant::now();
        drop(server);
        // Fails only once the test has stopped listening; its recv says so.
        let _ = took.lock().unwrap().send(started.elapsed());
        echo_response(SERVER, from, &request)
    });
    let server = bind(loopback_any_port(), Arc::new(handler));
    let client = client(server.local_addr());
    *slot.lock().unwrap() = Some(server);
    // The connection closes during the shutdown, so the call may or may not
    // see its answer; what matters is how long the drop took. It must not
    // hang to its deadline, though, nor fail in any other way.
    let outcome = call(&client, 1, Duration::from_secs(5));
    assert!(
        matches!(
            outcome,
            Ok(()) | Err(TransportError::Unreachable { to: SERVER, .. })
        ),
        "a call to a server that shut down under it: {outcome:?}"
    );
    let took = drop_durations
        .recv_timeout(Duration::from_secs(5))
        .expect("the handler ran");
    assert!(
        took < TcpTransportFactory::test_config().shutdown_timeout / 2,
        "dropping the server from its handler took {took:?}"
    );
}
