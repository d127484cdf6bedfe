//! Issue 12: a flood of idle connections cannot keep a replica out. Before,
//! 256 idle connections took every slot of a leader and kept a restarted
//! follower out of the ISR for as long as they were held (the idle timeout
//! was 10 min). Now, with every slot taken, a new connection closes the
//! oldest one that has not sent a valid request frame (Kafka's KIP-402 does
//! the like for its inter-broker listener). Against a live leader: while
//! twice its slots in idle connections are held and more keep arriving,
//! acks=all appends commit through the follower that was connected, a
//! follower restarted meanwhile rejoins the ISR, and the server holds no
//! more than its slots.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use crate::tcp_attack_support::*;
use isrlog::TcpConfig;

const SLOTS: usize = 32;

#[test]
fn a_restarted_follower_rejoins_the_isr_through_a_flood_of_idle_connections() {
    // The crashed follower leaves the ISR after 2 s (not the test
    // cluster's 10 s), so that the commits below resume sooner.
    let cluster = cluster_with_lag(
        TcpConfig {
            server_connections_max: SLOTS,
            // Every peer of this test is on 127.0.0.1, so the per-address limit
            // would treat the replicas as part of the flood; the eviction rule
            // is what this test is about.
            connections_per_address_max: 10 * SLOTS,
            // Long enough that no idle connection goes on its own during the test.
            handshake_timeout: Duration::from_secs(300),
            ..TcpConfig::default()
        },
        Duration::from_secs(2),
    );
    let target = leader(&cluster);
    let addr = cluster.addr(target).expect("leader listens");
    let follower = cluster
        .node_ids()
        .into_iter()
        .find(|node| *node != target)
        .expect("a follower");
    let writer = Writer::new();
    let flooding = AtomicBool::new(true);
    thread::scope(|scope| {
        scope.spawn(|| writer.run(&cluster));
        let _stop_writer = writer.stop_when_dropped();
        writer.wait_for_more_commits(5, "commits before the attack");
        cluster.crash(follower);
        // Twice the slots in idle connections, held.
        let mut held: Vec<TcpStream> = (0..2 * SLOTS)
            .map(|_| TcpStream::connect(addr).expect("flood connects"))
            .collect();
        wait_until(
            "the flood to take the slots",
            Duration::from_secs(30),
            || {
                cluster
                    .server_stats(target)
                    .is_some_and(|stats| stats.connections_evicted >= SLOTS as u64)
            },
        );
        // The other follower, connected before the flood, keeps
        // replicating (once the crashed one has left the ISR).
        writer.wait_for_more_commits(10, "commits while the flood holds");
        // And more idle connections keep coming while the follower restarts.
        let flood = scope.spawn(|| {
            let mut more = Vec::new();
            while flooding.load(Ordering::SeqCst) {
                if let Ok(stream) = TcpStream::connect(addr) {
                    more.push(stream);
                }
                thread::sleep(Duration::from_millis(20));
            }
            more.len()
        });
        cluster.restart(follower).expect("follower restarts");
        wait_until(
            "the restarted follower to rejoin the ISR",
            Duration::from_secs(60),
            || cluster.in_sync_replicas(LOG).contains(&follower),
        );
        writer.wait_for_more_commits(10, "commits with the follower back");
        flooding.store(false, Ordering::SeqCst);
        let late_flood = flood.join().expect("flood thread");
        let stats = cluster.server_stats(target).expect("leader runs");
        println!(
            "{} idle connections held, {late_flood} more during the restart; {stats:?}",
            2 * SLOTS
        );
        assert!(
            stats.connections_evicted >= (SLOTS + late_flood) as u64 / 2,
            "{stats:?}"
        );
        // Evicted connections leave the table as soon as their readers see
        // their sockets shut.
        wait_until(
            "the server to hold no more than its slots",
            Duration::from_secs(30),
            || {
                cluster
                    .server_stats(target)
                    .is_some_and(|stats| stats.connections <= SLOTS)
            },
        );
        // The oldest idle connections were the ones closed.
        assert!(closed_by_server(&mut held[0], Duration::from_secs(10)));
        held.clear();
        writer.stop();
    });
    // Appends fail only while the crashed follower is still in the ISR
    // (until `replica_lag_time_max`), as they would without any flood.
    println!(
        "acks=all appends: {} committed, {} failed",
        writer.committed(),
        writer.failed()
    );
    cluster.shutdown().expect("clean shutdown");
}
