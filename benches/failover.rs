//! Failover time on the memory transport (issue 4): from a leader's process
//! crash — noticed by the coordinator only when its session expires, as a
//! real crash is — to the first successful `acks=all` append on the new
//! leader, with a 1 s session timeout. Median and max over 20 failovers.
//! Target: median <= session timeout + 100 ms.
//!
//! Run with `cargo bench --bench failover`.

use std::time::{Duration, Instant};

use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{Acks, ControllerConfig, LogId, ReplicationConfig};

const FAILOVERS: usize = 20;
const SESSION_TIMEOUT: Duration = Duration::from_secs(1);

fn main() {
    // `cargo test --benches` passes `--bench`-less flags; keep a quick mode.
    let quick = std::env::args().any(|a| a == "--test");
    let failovers = if quick { 2 } else { FAILOVERS };
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(SESSION_TIMEOUT)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(10),
            fetch_wait_max: Duration::from_millis(100),
            request_timeout: Duration::from_secs(5),
            fetch_backoff: Duration::from_millis(10),
            ..ReplicationConfig::default()
        })
        .controller(Some(ControllerConfig::default()))
        .build()
        .expect("cluster starts");
    let log = LogId(0);
    cluster.create_log(log, 3).expect("log created");
    let mut times = Vec::with_capacity(failovers);
    for round in 0..failovers {
        let leader = cluster.leader_log(log).expect("a leader");
        leader
            .append_values(&[format!("before {round}")], Acks::All)
            .expect("append before the crash");
        let crashed = leader.node_id();
        let started = Instant::now();
        cluster.crash_with(crashed, Lose::Nothing, SessionEnd::OnExpiry);
        loop {
            let appended = cluster
                .leader_of(log)
                .filter(|&node| node != crashed)
                .and_then(|node| cluster.log(node, log).ok())
                .map(|handle| handle.append_values(&[format!("after {round}")], Acks::All));
            if matches!(appended, Some(Ok(_))) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no failover after 30 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        times.push(started.elapsed());
        cluster.restart(crashed).expect("restart");
        let back = cluster.wait_until(Duration::from_secs(10), |c| {
            c.in_sync_replicas(log).len() == 3
        });
        assert!(back, "the restarted node rejoins the ISR");
    }
    times.sort();
    let median = times[times.len() / 2];
    let max = times[times.len() - 1];
    let target = SESSION_TIMEOUT + Duration::from_millis(100);
    println!(
        "failover (memory transport, session timeout {SESSION_TIMEOUT:?}, {} failovers): median {:.1} ms, min {:.1} ms, max {:.1} ms; target median <= {:.0} ms: {}",
        times.len(),
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        max.as_secs_f64() * 1e3,
        target.as_secs_f64() * 1e3,
        if median <= target { "met" } else { "MISSED" }
    );
}
