//! Issue 12: a frame must be whole within `frame_read_timeout` of its first
//! byte. Before, the timeout applied to each `read`, so a peer sending one
//! byte every 29 s (under the 30 s timeout) kept its connection, thread and
//! buffer for ever. Against a live leader: a peer trickling a frame one byte
//! every 100 ms, far inside the per-read timeout of old, is cut off about
//! `frame_read_timeout` after its first byte, the server counts it, and
//! acks=all appends keep committing meanwhile.

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use crate::tcp_attack_support::*;
use isrlog::TcpConfig;

const FRAME_TIMEOUT: Duration = Duration::from_secs(1);
/// Gap between two trickled bytes: a tenth of the frame deadline.
const GAP: Duration = Duration::from_millis(100);
/// Body length announced: trickled whole, it would take 100 s.
const BODY_BYTES: usize = 1000;

#[test]
fn a_peer_trickling_a_frame_is_cut_off_at_the_frame_deadline() {
    let cluster = cluster_with(TcpConfig {
        frame_read_timeout: FRAME_TIMEOUT,
        ..TcpConfig::default()
    });
    let target = leader(&cluster);
    let addr = cluster.addr(target).expect("leader listens");
    let writer = Writer::new();
    thread::scope(|scope| {
        scope.spawn(|| writer.run(&cluster));
        let _stop_writer = writer.stop_when_dropped();
        writer.wait_for_more_commits(5, "commits before the attack");
        let mut frame = frame_header(EPOCH_REQUEST, BODY_BYTES as u32);
        frame.resize(frame.len() + BODY_BYTES, 1);

        let mut trickler = TcpStream::connect(addr).expect("connect");
        let started = Instant::now();
        let mut sent = 0;
        let cut_off = loop {
            // Writes succeed until the server's close is noticed: a reset
            // or an end of stream seen by a short read.
            if trickler.write_all(&frame[sent..sent + 1]).is_err()
                || closed_by_server(&mut trickler, GAP)
            {
                break started.elapsed();
            }
            sent += 1;
            assert!(
                sent < frame.len(),
                "the whole frame was trickled in {:?} and the connection is still open",
                started.elapsed()
            );
        };
        println!("trickled {sent} bytes, one per {GAP:?}; cut off after {cut_off:?}");
        assert!(
            cut_off >= FRAME_TIMEOUT,
            "cut off after {cut_off:?}, before the frame deadline"
        );
        // Generous for a loaded machine, and still a small part of the 100 s
        // the trickle would take.
        assert!(
            cut_off < FRAME_TIMEOUT + Duration::from_secs(20),
            "cut off only after {cut_off:?}"
        );
        wait_until(
            "the late frame to be counted",
            Duration::from_secs(10),
            || {
                cluster
                    .server_stats(target)
                    .is_some_and(|stats| stats.frame_timeouts == 1)
            },
        );
        writer.wait_for_more_commits(10, "commits after the attack");
        writer.stop();
    });
    assert_eq!(writer.failed(), 0, "an acks=all append failed");
    cluster.shutdown().expect("clean shutdown");
}
