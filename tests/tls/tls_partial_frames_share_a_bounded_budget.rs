//! Issue 12: over TLS too, bytes of partly received frames share one budget
//! per server. Connections with a valid certificate each announcing a large
//! frame, sending most of it and stalling hold at most
//! `frame_buffer_bytes_max` of the leader's memory, and acks=all appends
//! keep committing meanwhile (the TLS version of
//! `tcp_partial_frames_share_a_bounded_budget`).

use std::io::Write;
use std::net::TcpStream;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::tcp_attack_support::*;
use crate::tls_support::{raw_client_config, TestCa};
use isrlog::testing::TcpCluster;
use isrlog::transport::node_dns_name;
use isrlog::{NodeId, TcpConfig};
use rustls::pki_types::ServerName;

const MIB: usize = 1 << 20;
const ATTACKERS: usize = 20;
/// Body length each attacker announces.
const ANNOUNCED_BYTES: usize = 10 * MIB;
/// Body bytes each attacker sends before it stalls.
const SENT_BYTES: usize = 8 * MIB;
const BUDGET_BYTES: usize = 24 * MIB;

#[test]
fn stalled_large_tls_frames_hold_no_more_than_the_budget_while_replication_goes_on() {
    let ca = TestCa::new("isrlog budget CA");
    let cluster = TcpCluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .tcp_config(TcpConfig {
            frame_bytes_max: 12 * MIB,
            frame_buffer_bytes_max: BUDGET_BYTES,
            // The budget, not the frame deadline, bounds the attack here.
            frame_read_timeout: Duration::from_secs(300),
            ..TcpConfig::default()
        })
        .tls(ca.cluster_configs(3))
        .build()
        .expect("cluster starts");
    cluster.create_log(LOG, 3).expect("log created");
    wait_until(
        "all three replicas in the ISR",
        Duration::from_secs(30),
        || cluster.in_sync_replicas(LOG).len() == 3,
    );
    let target = leader(&cluster);
    let addr = cluster.addr(target).expect("leader listens");
    // The attackers hold a valid certificate (a follower's): the budget
    // must hold against authenticated peers too.
    let posing_as = NodeId((target.0 + 1) % 3);
    let config = raw_client_config(&ca.pem(), Some(&ca.node_cert(posing_as)));
    let writer = Writer::new();
    thread::scope(|scope| {
        scope.spawn(|| writer.run(&cluster));
        let _stop_writer = writer.stop_when_dropped();
        writer.wait_for_more_commits(5, "commits before the attack");

        let body = Arc::new(vec![0x5a_u8; SENT_BYTES]);
        let attackers: Vec<_> = (0..ATTACKERS)
            .map(|_| {
                let body = Arc::clone(&body);
                let config = Arc::clone(&config);
                thread::spawn(move || {
                    let mut session = rustls::ClientConnection::new(
                        config,
                        ServerName::try_from(node_dns_name(target)).expect("server name"),
                    )
                    .expect("client session");
                    let mut socket = TcpStream::connect(addr).expect("attacker connects");
                    while session.is_handshaking() {
                        session.complete_io(&mut socket).expect("handshake");
                    }
                    // The header, then the body sealed up front and sent
                    // as raw records.
                    session.set_buffer_limit(None);
                    session
                        .writer()
                        .write_all(&frame_header(EPOCH_REQUEST, ANNOUNCED_BYTES as u32))
                        .expect("header sealed");
                    while session.wants_write() {
                        session.write_tls(&mut socket).expect("header sent");
                    }
                    session.writer().write_all(&body).expect("body sealed");
                    let mut records = Vec::new();
                    while session.wants_write() {
                        session.write_tls(&mut records).expect("body records");
                    }
                    // The server stops reading a connection that waits for
                    // the budget: the write then blocks until this timeout.
                    socket
                        .set_write_timeout(Some(Duration::from_secs(1)))
                        .expect("write timeout");
                    let _ = socket.write_all(&records);
                    (session, socket)
                })
            })
            .collect();
        let held: Vec<_> = attackers
            .into_iter()
            .map(|attacker| attacker.join().expect("attacker thread"))
            .collect();
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
        let stats = cluster.server_stats(target).expect("leader runs");
        println!(
            "TLS attack: {ATTACKERS} connections × {} MiB announced, {} MiB sent; {stats:?}",
            ANNOUNCED_BYTES / MIB,
            SENT_BYTES / MIB,
        );
        assert!(stats.buffered_frame_bytes_peak <= BUDGET_BYTES, "{stats:?}");
        assert_eq!(
            stats.buffered_frame_bytes,
            fits * ANNOUNCED_BYTES,
            "{stats:?}"
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
