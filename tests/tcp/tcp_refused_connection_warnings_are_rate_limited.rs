//! Issue 12: warnings about refused connections are rate-limited. Before, a
//! leader refusing a flood of connections logged 5,109 identical lines in
//! 25 s. Now the first refusal of each `warning_interval` is logged, saying
//! how many were held back since the last line, and every refusal is still
//! counted in `TcpServer::stats`. Against a live leader over its
//! per-address connection limit, while acks=all appends keep committing.

use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use crate::log_capture::{captured_logs, server_log_lines_with};
use crate::tcp_attack_support::*;
use isrlog::TcpConfig;

const INTERVAL: Duration = Duration::from_secs(1);
const FLOOD_FOR: Duration = Duration::from_millis(3500);

/// The number after `suppressed=` in a captured log line.
fn suppressed(line: &str) -> u64 {
    line.split("suppressed=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no suppressed count in {line:?}"))
}

#[test]
fn a_flood_of_refused_connections_logs_a_line_per_interval_with_a_count() {
    captured_logs();
    let cluster = cluster_with(TcpConfig {
        // The two followers hold two connections each from 127.0.0.1.
        connections_per_address_max: 8,
        warning_interval: INTERVAL,
        ..TcpConfig::default()
    });
    let target = leader(&cluster);
    let addr = cluster.addr(target).expect("leader listens");
    let writer = Writer::new();
    let mut refused = 0u64;
    let mut held = Vec::new();
    let started = Instant::now();
    thread::scope(|scope| {
        scope.spawn(|| writer.run(&cluster));
        let _stop_writer = writer.stop_when_dropped();
        writer.wait_for_more_commits(5, "commits before the flood");
        while started.elapsed() < FLOOD_FOR {
            let Ok(mut stream) = TcpStream::connect(addr) else {
                continue;
            };
            if closed_by_server(&mut stream, Duration::from_millis(50)) {
                refused += 1;
            } else {
                held.push(stream);
            }
            // About a thousand connections a second: a flood, without
            // running the machine out of ephemeral ports.
            thread::sleep(Duration::from_millis(1));
        }
        writer.wait_for_more_commits(10, "commits after the flood");
        writer.stop();
    });
    let elapsed = started.elapsed();
    assert_eq!(writer.failed(), 0, "an acks=all append failed");
    let stats = cluster.server_stats(target).expect("leader runs");
    // This server's lines only: other tests of the binary flood servers too.
    let lines = server_log_lines_with(addr.port(), "too many connections from this address");
    println!(
        "{refused} connections refused in {elapsed:?} ({} held); {} warning lines: {lines:#?}; {stats:?}",
        held.len(),
        lines.len()
    );
    assert!(refused >= 20, "the flood was too small to test anything");
    assert!(stats.connections_refused >= refused, "{stats:?}");
    let intervals = (elapsed.as_secs_f64() / INTERVAL.as_secs_f64()).ceil() as usize;
    assert!(
        lines.len() <= intervals + 1,
        "{} lines for {refused} refusals in {elapsed:?}",
        lines.len()
    );
    // Each line after the first speaks for the refusals held back before it.
    assert_eq!(suppressed(&lines[0]), 0);
    let reported: u64 = lines.iter().map(|line| suppressed(line)).sum();
    assert!(lines.len() >= 2, "the flood lasted over one interval");
    assert!(reported > 0, "no line reports held-back warnings");
    assert!(reported + lines.len() as u64 <= stats.connections_refused);
    drop(held);
    cluster.shutdown().expect("clean shutdown");
}
