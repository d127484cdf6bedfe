//! Issue 12: a peer that pipelines many large fetches and reads their
//! answers very slowly cannot hold a leader's handler threads. Before,
//! responses were written from handler threads under the connection's
//! writer lock with a send timeout per `write` call (each call that moved a
//! byte started it anew), and nothing capped the requests read from one
//! connection: every handler thread ended up writing to, or waiting for,
//! that one connection, and followers' fetches (so acks=all appends) stalled
//! for as long as the peer kept reading a little. Now a response has one
//! deadline (`write_timeout`, the wait for the writer included) after which
//! the connection is closed, and at most `requests_in_flight_max` requests
//! per connection are read before one is answered.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::tcp_attack_support::*;
use isrlog::testing::fuzz::encode_request_frame;
use isrlog::transport::{FetchLog, FetchRequest, Request};
use isrlog::{Acks, Offset, TcpConfig};

const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
const VALUE_BYTES: usize = 256 * 1024;
/// 4 MiB in the log: every fetch from offset 0 answers with about that.
const VALUES: usize = 16;
/// Fetches sent back to back: far more than the handler threads.
const PIPELINED: u64 = 40;
/// The hostile peer reads this much per [`READ_GAP`]: 100 KiB/s, so one
/// answer would take some 40 s to read.
const READ_CHUNK: usize = 2 * 1024;
const READ_GAP: Duration = Duration::from_millis(20);

#[test]
fn a_slow_reader_is_cut_off_at_the_write_deadline_while_appends_commit() {
    let cluster = cluster_with(TcpConfig {
        write_timeout: WRITE_TIMEOUT,
        handler_threads: 8,
        ..TcpConfig::default()
    });
    let target = leader(&cluster);
    let follower = cluster
        .in_sync_replicas(LOG)
        .into_iter()
        .find(|node| *node != target)
        .expect("a follower");
    let handle = cluster.leader_log(LOG).expect("leader handle");
    let value = vec![0x42_u8; VALUE_BYTES];
    for _ in 0..VALUES {
        handle
            .append_values(&[&value], Acks::All)
            .expect("committed");
    }
    let epoch = handle.leader_epoch();
    let fetch = Request::Fetch(FetchRequest {
        replica: follower,
        incarnation: cluster.incarnation(follower).expect("the follower runs"),
        wait_max: Duration::ZERO,
        bytes_max: u32::MAX,
        logs: vec![FetchLog {
            log: LOG,
            current_leader_epoch: epoch,
            fetch_offset: Offset(0),
            last_fetched_epoch: None,
            line_epoch: Some(epoch),
            log_start_offset: Offset(0),
            bytes_max: u32::MAX,
            applied_offset: None,
        }],
    });
    let mut requests = Vec::new();
    for id in 0..PIPELINED {
        requests.extend(
            encode_request_frame(id, follower, &fetch, TcpConfig::default().frame_bytes_max)
                .expect("fits"),
        );
    }
    let addr = cluster.addr(target).expect("leader listens");
    let writer = Writer::new();
    thread::scope(|scope| {
        scope.spawn(|| writer.run(&cluster));
        let _stop_writer = writer.stop_when_dropped();
        writer.wait_for_more_commits(5, "commits before the attack");
        let before = cluster.server_stats(target).expect("running");

        let mut hostile = TcpStream::connect(addr).expect("connect");
        hostile
            .set_write_timeout(Some(Duration::from_millis(200)))
            .expect("write timeout");
        let started = Instant::now();
        // The server stops reading after a few requests: the rest of the
        // pipeline may not fit in the socket buffers, which is fine.
        let mut sent = 0;
        while sent < requests.len() {
            match hostile.write(&requests[sent..]) {
                Ok(written) => sent += written,
                Err(_) => break,
            }
        }
        // Read slowly until the server closes the connection: an end of
        // stream (once the buffered bytes are read) or a reset.
        // Once the server has counted the cut-off, the rest is read at full
        // speed to see the close from this side too.
        let drain = Arc::new(AtomicBool::new(false));
        let draining = Arc::clone(&drain);
        let reader = scope.spawn(move || {
            let mut buf = vec![0u8; READ_CHUNK];
            let mut received = 0usize;
            loop {
                match hostile.read(&mut buf) {
                    Ok(0) | Err(_) => return (received, true),
                    Ok(read) => received += read,
                }
                if !draining.load(Ordering::SeqCst) {
                    thread::sleep(READ_GAP);
                }
                if started.elapsed() > Duration::from_secs(120) {
                    return (received, false);
                }
            }
        });
        // Replication goes on meanwhile.
        writer.wait_for_more_commits(10, "commits during the attack");
        let mut stats = before;
        wait_until(
            "the slow reader to be cut off",
            WRITE_TIMEOUT + Duration::from_secs(30),
            || {
                stats = cluster.server_stats(target).expect("running");
                stats.write_timeouts > before.write_timeouts
            },
        );
        let cut_off = started.elapsed();
        println!(
            "{sent} request bytes sent; cut off after {cut_off:?} (write_timeout {WRITE_TIMEOUT:?}); stats {stats:?}"
        );
        assert!(
            stats.reads_paused_for_in_flight > before.reads_paused_for_in_flight,
            "the reader never stopped for the in-flight limit"
        );
        drain.store(true, Ordering::SeqCst);
        let (received, closed) = reader.join().expect("reader thread");
        println!("the slow reader read {received} bytes before the close");
        assert!(
            closed,
            "the server never closed the slow reader's connection"
        );
        writer.wait_for_more_commits(10, "commits after the attack");
        writer.stop();
    });
    println!(
        "{} appends committed, {} failed",
        writer.committed(),
        writer.failed()
    );
}
