//! Issue 12: warnings about refused connections are rate-limited. Before, a
//! leader refusing a flood of connections logged 5,109 identical lines in
//! 25 s. Now the first refusal of each `warning_interval` is logged, saying
//! how many were held back since the last line, and every refusal is still
//! counted in `TcpServer::stats`. Against a live leader over its
//! per-address connection limit, while acks=all appends keep committing.

mod tcp_attack_support;

use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use isrlog::TcpConfig;
use tcp_attack_support::*;

const INTERVAL: Duration = Duration::from_secs(1);
const FLOOD_FOR: Duration = Duration::from_millis(3500);

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

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
    let logs = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&logs);
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || LogWriter(Arc::clone(&sink)))
        .try_init()
        .expect("the only subscriber of this test binary");
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
    let captured = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    let lines: Vec<&str> = captured
        .lines()
        .filter(|line| line.contains("too many connections from this address"))
        .collect();
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
    assert_eq!(suppressed(lines[0]), 0);
    let reported: u64 = lines.iter().map(|line| suppressed(line)).sum();
    assert!(lines.len() >= 2, "the flood lasted over one interval");
    assert!(reported > 0, "no line reports held-back warnings");
    assert!(reported + lines.len() as u64 <= stats.connections_refused);
    drop(held);
    cluster.shutdown().expect("clean shutdown");
}
