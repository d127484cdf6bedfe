//! Helpers shared by the tests that attack a live node's TCP server: a
//! 3-node cluster with one log, a background writer that proves the
//! legitimate followers keep replicating (acks=all appends need them), raw
//! frame headers, and the process's anonymous memory.
#![allow(dead_code)]

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use isrlog::testing::{TcpCluster, TcpClusterBuilder};
use isrlog::{Acks, Incarnation, LeaderEpoch, LogId, NodeId, Offset, ReplicationConfig, TcpConfig};

/// Message type of a fetch request, and of an error response.
pub const FETCH_REQUEST: u8 = 0x01;
pub const ERROR_RESPONSE: u8 = 0x80;
/// `ErrorCode::StaleIncarnation` on the wire.
pub const STALE_INCARNATION: u16 = 14;

/// A fetch request frame, built by hand from the documented layout, in
/// `victim`'s name, at offset 0 of `LOG`, naming `incarnation`: what a
/// stranger on a plaintext port can send (issue 23, item 7).
pub fn spoofed_fetch(victim: NodeId, incarnation: Incarnation, epoch: LeaderEpoch) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&victim.0.to_le_bytes()); // sender
    body.extend_from_slice(&victim.0.to_le_bytes()); // replica
    body.extend_from_slice(&incarnation.0.to_le_bytes());
    body.extend_from_slice(&0u64.to_le_bytes()); // wait_max seconds
    body.extend_from_slice(&0u32.to_le_bytes()); // wait_max nanoseconds
    body.extend_from_slice(&(1u32 << 20).to_le_bytes()); // bytes_max
    body.extend_from_slice(&1u32.to_le_bytes()); // one log
    body.extend_from_slice(&LOG.0.to_le_bytes());
    body.extend_from_slice(&epoch.0.to_le_bytes());
    body.extend_from_slice(&0u64.to_le_bytes()); // fetch offset 0
    body.push(0); // no last fetched epoch: an empty log
    body.push(0); // no line epoch: a log that never followed or led
    body.extend_from_slice(&0u64.to_le_bytes()); // log start offset
    body.extend_from_slice(&(1u32 << 20).to_le_bytes()); // bytes_max
    body.push(0); // no applied position
    let mut frame = frame_header(FETCH_REQUEST, body.len() as u32);
    frame.extend_from_slice(&body);
    frame
}

/// Reads one response frame: its message type and body.
pub fn read_response(stream: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 18];
    stream.read_exact(&mut head).expect("response header");
    assert_eq!(&head[..4], b"ISRL");
    let length = u32::from_le_bytes(head[6..10].try_into().expect("4 bytes")) as usize;
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).expect("response body");
    (head[5], body)
}

/// A follower of `LOG` that `target` leads, and every guess of its
/// incarnation but the one that counts: what a stranger may send.
pub fn victim_and_guesses(cluster: &TcpCluster, target: NodeId) -> (NodeId, [Incarnation; 4]) {
    let victim = cluster
        .in_sync_replicas(LOG)
        .into_iter()
        .find(|node| *node != target)
        .expect("a follower");
    let real = cluster.incarnation(victim).expect("the victim runs");
    let guesses = [
        Incarnation(0),
        Incarnation(real.0.saturating_sub(1)),
        Incarnation(real.0 + 1),
        Incarnation(u64::MAX),
    ];
    (victim, guesses)
}

/// Sends spoofed fetches ([`spoofed_fetch`]) in `victim`'s name to the
/// node at `addr`, `rate` per second for `phase`, cycling through
/// `guesses` of its incarnation; returns how many were sent and how many
/// were refused as not from the victim's current incarnation.
pub fn send_spoofed_fetches(
    addr: std::net::SocketAddr,
    victim: NodeId,
    guesses: &[Incarnation],
    epoch: LeaderEpoch,
    rate: u32,
    phase: Duration,
) -> (u64, u64) {
    use std::io::Write;
    let mut stream = TcpStream::connect(addr).expect("connect to the leader");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    let (mut sent, mut refused) = (0u64, 0u64);
    let started = Instant::now();
    let gap = Duration::from_secs(1) / rate;
    while started.elapsed() < phase {
        let next = started + gap * sent as u32;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            thread::sleep(wait);
        }
        let guess = guesses[sent as usize % guesses.len()];
        stream
            .write_all(&spoofed_fetch(victim, guess, epoch))
            .expect("send a spoofed fetch");
        sent += 1;
        let (message_type, body) = read_response(&mut stream);
        if is_stale_incarnation(message_type, &body) {
            refused += 1;
        }
    }
    (sent, refused)
}

/// Whether a response frame is the refusal of a fetch that is not from
/// its sender's current incarnation.
pub fn is_stale_incarnation(message_type: u8, body: &[u8]) -> bool {
    message_type == ERROR_RESPONSE
        && body.len() == 2
        && u16::from_le_bytes([body[0], body[1]]) == STALE_INCARNATION
}

/// The log every attack test writes to.
pub const LOG: LogId = LogId(0);

/// A 3-node TCP cluster with min ISR 2 (an acks=all append needs a follower)
/// and `tcp` on every node, with `LOG` created on all three.
pub fn cluster_with(tcp: TcpConfig) -> TcpCluster {
    cluster_with_builder(TcpCluster::builder().tcp_config(tcp))
}

/// [`cluster_with`], with followers leaving the ISR after `lag` without a
/// fetch instead of the test cluster's 10 s: for tests that crash a
/// follower and wait for the ISR to shrink (the rule checked is the same,
/// the wait shorter).
pub fn cluster_with_lag(tcp: TcpConfig, lag: Duration) -> TcpCluster {
    let builder = TcpCluster::builder();
    let replication = ReplicationConfig {
        replica_lag_time_max: lag,
        ..builder.replication_config()
    };
    cluster_with_builder(builder.tcp_config(tcp).replication(replication))
}

fn cluster_with_builder(builder: TcpClusterBuilder) -> TcpCluster {
    let cluster = builder
        .nodes(3)
        .min_insync_replicas(2)
        .build()
        .expect("cluster starts");
    cluster.create_log(LOG, 3).expect("log created");
    wait_until(
        "all three replicas in the ISR",
        Duration::from_secs(30),
        || cluster.in_sync_replicas(LOG).len() == 3,
    );
    cluster
}

/// The leader of `LOG` (waiting for one).
pub fn leader(cluster: &TcpCluster) -> NodeId {
    let mut found = None;
    wait_until("a leader", Duration::from_secs(30), || {
        found = cluster.leader_of(LOG);
        found.is_some()
    });
    found.expect("checked above")
}

/// Polls `condition` every 10 ms until it holds; panics after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let give_up = Instant::now() + timeout;
    while !condition() {
        assert!(
            Instant::now() < give_up,
            "timed out after {timeout:?} waiting for {what}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// acks=all appends to `LOG` on a thread of their own while an attack runs:
/// each one commits only if a follower replicated it through the attacked
/// leader's server.
pub struct Writer {
    stop: AtomicBool,
    committed: AtomicU64,
    failed: AtomicU64,
}

impl Writer {
    /// A writer that has not started.
    pub fn new() -> Writer {
        Writer {
            stop: AtomicBool::new(false),
            committed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Appends to `LOG` until [`Writer::stop`], counting commits and
    /// failures.
    pub fn run(&self, cluster: &TcpCluster) {
        self.run_on(cluster, LOG);
    }

    /// Appends to `log` until [`Writer::stop`], counting commits and
    /// failures.
    pub fn run_on(&self, cluster: &TcpCluster, log: LogId) {
        while !self.stop.load(Ordering::SeqCst) {
            let appended = cluster
                .leader_log(log)
                .and_then(|log| log.append_values(&[b"legitimate"], Acks::All));
            match appended {
                Ok(_) => self.committed.fetch_add(1, Ordering::SeqCst),
                Err(_) => self.failed.fetch_add(1, Ordering::SeqCst),
            };
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Appends committed so far.
    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::SeqCst)
    }

    /// Appends that failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }

    /// Waits until `more` further appends commit: replication goes on.
    pub fn wait_for_more_commits(&self, more: u64, what: &str) {
        let target = self.committed() + more;
        wait_until(what, Duration::from_secs(60), || self.committed() >= target);
    }

    /// Ends `run`.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// A guard that ends `run` when dropped: held inside the
    /// `thread::scope` that runs the writer, a failing assertion unwinds
    /// through it and the scope can join the writer, so the test fails
    /// instead of hanging.
    pub fn stop_when_dropped(&self) -> StopWriterOnDrop<'_> {
        StopWriterOnDrop(self)
    }
}

/// Ends a [`Writer`]'s `run` when dropped (see [`Writer::stop_when_dropped`]).
pub struct StopWriterOnDrop<'a>(&'a Writer);

impl Drop for StopWriterOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The high watermark of `LOG` on its leader.
pub fn high_watermark(cluster: &TcpCluster) -> Offset {
    cluster
        .leader_log(LOG)
        .map(|log| log.high_watermark())
        .unwrap_or(Offset(0))
}

/// The frame version the TCP codec speaks.
pub const FRAME_VERSION: u8 = isrlog::transport::TCP_FRAME_VERSION;

/// A frame header per the documented layout (magic, version, type, body
/// length, request id).
pub fn frame_header(message_type: u8, body_length: u32) -> Vec<u8> {
    let mut out = b"ISRL".to_vec();
    out.push(isrlog::transport::TCP_FRAME_VERSION);
    out.push(message_type);
    out.extend_from_slice(&body_length.to_le_bytes());
    out.extend_from_slice(&7u64.to_le_bytes());
    out
}

/// Message type of an epoch end offsets request.
pub const EPOCH_REQUEST: u8 = 0x02;

/// Whether the server has closed `stream`: a read sees the end of the
/// stream or a reset within `wait`.
pub fn closed_by_server(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).expect("read timeout");
    match stream.read(&mut [0u8; 64]) {
        Ok(0) => true,
        Err(error) => matches!(
            error.kind(),
            ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
        ),
        Ok(_) => false,
    }
}

/// This process's anonymous resident memory (`RssAnon` of
/// `/proc/self/status`): heap and stacks, not mapped files.
pub fn rss_anon_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|line| line.starts_with("RssAnon:"))
        .expect("RssAnon in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|number| number.parse().ok())
        .expect("RssAnon in kB");
    kib * 1024
}
