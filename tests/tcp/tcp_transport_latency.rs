//! Round-trip latency of a small call over loopback, client and server in
//! one process: the figure the transport's overhead is judged by. Prints the
//! percentiles (`cargo test --test tcp_transport_latency -- --nocapture`) and
//! fails only on a gross regression (a per-call stall such as Nagle's
//! algorithm left on, which costs ~40 ms a call).

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use isrlog::testing::{echo_response, sample_epoch_request, EchoHandler, TcpTransportFactory};
use isrlog::{NodeId, TcpServer, TcpTransport, Transport};

const SERVER: NodeId = NodeId(1);
const CLIENT: NodeId = NodeId(2);
const WARM_UP_CALLS: u32 = 200;
const MEASURED_CALLS: u32 = 2000;

#[test]
fn small_call_round_trip_latency_over_loopback() {
    let config = TcpTransportFactory::test_config();
    let server = TcpServer::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        Arc::new(EchoHandler::new(SERVER)),
        config.clone(),
    )
    .expect("bind");
    let client = TcpTransport::new(
        CLIENT,
        HashMap::from([(SERVER, server.local_addr())]),
        config,
    )
    .expect("config");
    let mut samples = Vec::with_capacity(MEASURED_CALLS as usize);
    for id in 0..WARM_UP_CALLS + MEASURED_CALLS {
        let request = sample_epoch_request(CLIENT, id);
        let started = Instant::now();
        let response = client
            .call(SERVER, request.clone(), started + Duration::from_secs(5))
            .expect("answered");
        let elapsed = started.elapsed();
        assert_eq!(response, echo_response(SERVER, CLIENT, &request));
        if id >= WARM_UP_CALLS {
            samples.push(elapsed);
        }
    }
    samples.sort();
    let percentile = |p: usize| samples[(samples.len() - 1) * p / 100];
    let (p50, p99) = (percentile(50), percentile(99));
    println!(
        "tcp round trip over loopback, {MEASURED_CALLS} sequential small calls: p50 {p50:?}, p90 {:?}, p99 {p99:?}, max {:?}",
        percentile(90),
        samples[samples.len() - 1]
    );
    assert!(
        p50 < Duration::from_millis(20),
        "median round trip {p50:?}: something stalls every call"
    );
}

/// Bulk transfer: fetch responses carrying 1 MiB of records each, two
/// callers at once, as two followers fetching from one leader would. Prints
/// MB/s; fails only if the records arrive changed.
#[test]
fn fetch_response_throughput_over_loopback() {
    use bytes::Bytes;
    use isrlog::testing::{sample_fetch_request, FnHandler};
    use isrlog::transport::{ErrorCode, FetchResponse, FetchedLog, Request, Response};
    use isrlog::Offset;

    const RECORD_BYTES: usize = 1 << 20;
    const CALLS_PER_CALLER: usize = 40;
    const CALLERS: usize = 2;
    let records = Bytes::from(
        (0..RECORD_BYTES)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let served = records.clone();
    let handler = FnHandler::new(move |_from, request: Request| match request {
        Request::Fetch(fetch) => Response::Fetch(FetchResponse {
            logs: vec![FetchedLog {
                log: fetch.logs[0].log,
                error: ErrorCode::None,
                high_watermark: Offset(1),
                log_start_offset: Offset(0),
                log_end_offset: Offset(1),
                log_start_epoch: None,
                log_end_epoch: None,
                diverging: None,
                records: served.clone(),
                applied_offsets: Vec::new(),
            }],
        }),
        _ => Response::Error(ErrorCode::InvalidRequest),
    });
    let config = TcpTransportFactory::test_config();
    let server = TcpServer::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        Arc::new(handler),
        config.clone(),
    )
    .expect("bind");
    let client = TcpTransport::new(
        CLIENT,
        HashMap::from([(SERVER, server.local_addr())]),
        config,
    )
    .expect("config");
    let started = Instant::now();
    std::thread::scope(|scope| {
        for caller in 0..CALLERS {
            let client = &client;
            let records = &records;
            scope.spawn(move || {
                for call in 0..CALLS_PER_CALLER {
                    let request = sample_fetch_request(CLIENT, (caller * 1000 + call) as u64);
                    let response = client
                        .call(SERVER, request, Instant::now() + Duration::from_secs(10))
                        .expect("answered");
                    let Response::Fetch(fetch) = response else {
                        panic!("expected a fetch response, got {response:?}");
                    };
                    assert_eq!(&fetch.logs[0].records, records);
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let megabytes = (CALLERS * CALLS_PER_CALLER * RECORD_BYTES) as f64 / 1e6;
    println!(
        "tcp fetch responses over loopback, {CALLERS} callers x {CALLS_PER_CALLER} x 1 MiB: {:.0} MB/s ({elapsed:?})",
        megabytes / elapsed.as_secs_f64()
    );
}
