//! Issue 12: bytes of partly received frames share one budget per server.
//! Before, 40 connections each announcing an 8 MiB frame, sending most of it
//! and stalling took a leader's RSS from 10 MB to 357 MB (the ceiling was
//! connections × `frame_bytes_max`). Now a large body is read only once its
//! length is reserved from `frame_buffer_bytes_max`; the other connections
//! are not read from until bytes are freed (Kafka's
//! `queued.max.request.bytes`). Asserted against a live leader: the bytes it
//! accounts never pass the budget, this process's anonymous memory grows by
//! about the budget and not by what the attackers sent, and acks=all appends
//! keep committing meanwhile (a replica's small fetch requests do not wait
//! behind the attackers' frames).

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::tcp_attack_support::*;
use isrlog::TcpConfig;

const MIB: usize = 1 << 20;
const ATTACKERS: usize = 40;
/// Body length each attacker announces.
const ANNOUNCED_BYTES: usize = 10 * MIB;
/// Body bytes each attacker sends before it stalls.
const SENT_BYTES: usize = 8 * MIB;
const BUDGET_BYTES: usize = 24 * MIB;

#[test]
fn stalled_large_frames_hold_no_more_than_the_budget_while_replication_goes_on() {
    let cluster = cluster_with(TcpConfig {
        frame_bytes_max: 12 * MIB,
        frame_buffer_bytes_max: BUDGET_BYTES,
        // Long enough that the attack holds for the whole test: the budget,
        // not the frame deadline, is what bounds it here.
        frame_read_timeout: Duration::from_secs(300),
        ..TcpConfig::default()
    });
    let target = leader(&cluster);
    let addr = cluster.addr(target).expect("leader listens");
    let writer = Writer::new();
    thread::scope(|scope| {
        scope.spawn(|| writer.run(&cluster));
        let _stop_writer = writer.stop_when_dropped();
        writer.wait_for_more_commits(5, "commits before the attack");
        let rss_before = rss_anon_bytes();

        let body = Arc::new(vec![0x5a_u8; SENT_BYTES]);
        let attackers: Vec<_> = (0..ATTACKERS)
            .map(|_| {
                let body = Arc::clone(&body);
                thread::spawn(move || {
                    let mut stream = TcpStream::connect(addr).expect("attacker connects");
                    stream
                        .write_all(&frame_header(EPOCH_REQUEST, ANNOUNCED_BYTES as u32))
                        .expect("header sent");
                    // The server stops reading a connection that waits for
                    // the budget: the write then blocks until this timeout
                    // (which ends a write that makes no progress, so it is
                    // spent a few times over while socket buffers fill).
                    stream
                        .set_write_timeout(Some(Duration::from_secs(1)))
                        .expect("write timeout");
                    let _ = stream.write_all(&body);
                    stream
                })
            })
            .collect();
        let held: Vec<TcpStream> = attackers
            .into_iter()
            .map(|attacker| attacker.join().expect("attacker thread"))
            .collect();
        // Every attacker's header has been read: the budget admitted what
        // fits, and every other frame waits.
        let fits = BUDGET_BYTES / ANNOUNCED_BYTES;
        wait_until(
            "every attacker's frame to reach the budget",
            Duration::from_secs(60),
            || {
                cluster.server_stats(target).is_some_and(|stats| {
                    stats.frames_waited_for_budget >= (ATTACKERS - fits) as u64
                })
            },
        );
        writer.wait_for_more_commits(20, "acks=all commits while the attack holds");
        let rss_during = rss_anon_bytes();
        let stats = cluster.server_stats(target).expect("leader runs");
        println!(
            "attack: {ATTACKERS} connections × {} MiB announced, {} MiB sent; \
             RssAnon {} MiB -> {} MiB; {stats:?}",
            ANNOUNCED_BYTES / MIB,
            SENT_BYTES / MIB,
            rss_before / MIB as u64,
            rss_during / MIB as u64
        );
        assert!(stats.buffered_frame_bytes <= BUDGET_BYTES, "{stats:?}");
        assert!(stats.buffered_frame_bytes_peak <= BUDGET_BYTES, "{stats:?}");
        assert_eq!(
            stats.buffered_frame_bytes,
            fits * ANNOUNCED_BYTES,
            "{stats:?}"
        );
        // Unbounded, the server would hold ATTACKERS × SENT_BYTES = 320 MiB
        // of bodies. The budget, the attackers' own buffer and their thread
        // stacks stay far below 100 MiB.
        let grown = rss_during.saturating_sub(rss_before);
        assert!(
            grown < 100 * MIB as u64,
            "RssAnon grew by {} MiB under the attack",
            grown / MIB as u64
        );

        drop(held);
        wait_until(
            "the attackers' reservations to be given back",
            Duration::from_secs(60),
            || {
                cluster
                    .server_stats(target)
                    .is_some_and(|stats| stats.buffered_frame_bytes == 0)
            },
        );
        writer.wait_for_more_commits(5, "commits after the attack");
        writer.stop();
    });
    assert_eq!(writer.failed(), 0, "an acks=all append failed");
    cluster.shutdown().expect("clean shutdown");
}
