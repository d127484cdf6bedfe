//! Issue 12: over mutual TLS, a connection may speak only for the node its
//! certificate names. A client without a certificate, with one from another
//! CA, or with a valid certificate for one node sending frames as another
//! is refused: nothing is read (no byte of any answer, let alone records),
//! and nothing it claims counts toward the ISR or the high watermark.
//!
//! The scenario makes the claims matter. A follower `F` of a 3-replica log
//! is crashed while the leader `L` keeps taking `acks=1` appends, so:
//! - while `F` is still in the ISR (long `replica_lag_time_max`), the high
//!   watermark is stuck at `F`'s last fetch; a fetch "from `F`" at the log
//!   end would move it to the end;
//! - once `F` is out of the ISR (short `replica_lag_time_max`), such a fetch
//!   would bring `F` back into the ISR.
//!
//! The same fetch over plain TCP does both (the control tests below), so
//! the TLS tests would fail if the refusal were missing. The fetch carries
//! `F`'s incarnation, taken before the crash, and `F`'s session outlives
//! the test (the leader still lists that incarnation as current): an
//! impersonator who knows it gets past the incarnation check (SPEC 3.2),
//! and only TLS stands in the way.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::tls_support::{raw_client_config, send_raw, NodeCert, Seen, TestCa};
use isrlog::testing::fuzz::{decode_frames, encode_request_frame};
use isrlog::testing::{sample_epoch_request, TcpCluster};
use isrlog::transport::{EpochEndOffsetsRequest, EpochQuery, FetchLog, FetchRequest, Request};
use isrlog::{Acks, Incarnation, LogId, NodeId, Offset, ReplicatedLog, ReplicationConfig};

const LOG: LogId = LogId(0);

/// How long the server gets to answer or close a hand-made connection.
const ANSWER_WAIT: Duration = Duration::from_secs(20);

/// A running scenario: the cluster, who leads, the crashed follower `F`
/// and the live one `G`.
struct Scenario {
    cluster: TcpCluster,
    ca: Option<TestCa>,
    leader: ReplicatedLog,
    leader_id: NodeId,
    crashed: NodeId,
    live: NodeId,
    /// `F`'s incarnation, as it was before the crash (still current: its
    /// session has not ended).
    crashed_incarnation: Incarnation,
}

/// Starts a 3-node cluster (over TLS if `tls`), appends, crashes one
/// follower and appends more with `acks=1` until the live follower has
/// every record.
fn scenario(tls: bool, replica_lag_time_max: Duration) -> Scenario {
    let ca = tls.then(|| TestCa::new("isrlog test CA"));
    let mut builder = TcpCluster::builder()
        .nodes(3)
        .min_insync_replicas(1)
        .session_timeout(Duration::from_secs(600))
        .replication(ReplicationConfig {
            replica_lag_time_max,
            fetch_wait_max: Duration::from_millis(100),
            request_timeout: Duration::from_secs(5),
            fetch_backoff: Duration::from_millis(10),
            ..ReplicationConfig::default()
        });
    if let Some(ca) = &ca {
        builder = builder.tls(ca.cluster_configs(3));
    }
    let cluster = builder.build().expect("cluster");
    let replicas = cluster.create_log(LOG, 3).expect("create log");
    let leader = cluster.leader_log(LOG).expect("leader");
    let leader_id = leader.node_id();
    let followers: Vec<NodeId> = replicas.into_iter().filter(|&n| n != leader_id).collect();
    let (crashed, live) = (followers[0], followers[1]);
    for n in 0..10 {
        leader
            .append_values(&[format!("committed-{n}")], Acks::All)
            .expect("acks=all append");
    }
    let crashed_incarnation = cluster.incarnation(crashed).expect("F runs");
    cluster.crash(crashed);
    for n in 0..10 {
        leader
            .append_values(&[format!("after-crash-{n}")], Acks::Leader)
            .expect("acks=1 append");
    }
    let end = leader.log_end_offset();
    assert!(
        cluster.wait_until(Duration::from_secs(30), |c| {
            c.log(live, LOG)
                .is_ok_and(|log| log.log_end_offset() == end)
        }),
        "live follower {live} did not catch up to {end}"
    );
    Scenario {
        cluster,
        ca,
        leader,
        leader_id,
        crashed,
        live,
        crashed_incarnation,
    }
}

impl Scenario {
    fn leader_addr(&self) -> SocketAddr {
        self.cluster.addr(self.leader_id).expect("leader running")
    }

    /// A fetch of the log as `replica`, at the leader's log end: it
    /// acknowledges every record (moving the high watermark, or earning a
    /// place in the ISR) if the leader believes it.
    fn fetch_at_end(&self, replica: NodeId) -> Request {
        let epoch = self.leader.leader_epoch();
        Request::Fetch(FetchRequest {
            replica,
            // The replica's current incarnation: only TLS stands in the way.
            incarnation: if replica == self.crashed {
                self.crashed_incarnation
            } else {
                self.cluster.incarnation(replica).unwrap_or_default()
            },
            wait_max: Duration::ZERO,
            bytes_max: 1 << 20,
            logs: vec![FetchLog {
                log: LOG,
                current_leader_epoch: epoch,
                fetch_offset: self.leader.log_end_offset(),
                last_fetched_epoch: Some(epoch),
                line_epoch: Some(epoch),
                log_start_offset: Offset(0),
                bytes_max: 1 << 20,
                applied_offset: None,
            }],
        })
    }

    /// A fetch of every record from offset 0, as `replica`.
    fn fetch_everything(&self, replica: NodeId) -> Request {
        let Request::Fetch(mut fetch) = self.fetch_at_end(replica) else {
            unreachable!("fetch_at_end builds a fetch")
        };
        fetch.logs[0].fetch_offset = Offset(0);
        fetch.logs[0].last_fetched_epoch = None;
        Request::Fetch(fetch)
    }

    /// `(high watermark, ISR as the leader sees it, ISR the coordinator holds)`.
    fn state(&self) -> (Offset, Vec<NodeId>, Vec<NodeId>) {
        let mut leader_isr = self.leader.in_sync_replicas();
        leader_isr.sort();
        let mut coordinator_isr = self.cluster.in_sync_replicas(LOG);
        coordinator_isr.sort();
        (self.leader.high_watermark(), leader_isr, coordinator_isr)
    }

    fn ca(&self) -> &TestCa {
        self.ca.as_ref().expect("a TLS scenario")
    }
}

/// Sends `frames` on a raw TLS connection with `cert` (trusting the
/// cluster's CA) and asserts the server refused them without answering a
/// single byte.
fn assert_refused(
    scenario: &Scenario,
    what: &str,
    cert: Option<&NodeCert>,
    frames: &[(NodeId, Request)],
) {
    let config = raw_client_config(&scenario.ca().pem(), cert);
    match send_raw(
        scenario.leader_addr(),
        scenario.leader_id,
        config,
        frames,
        ANSWER_WAIT,
    ) {
        Seen::Refused { bytes: 0, reason } => {
            eprintln!("{what}: refused ({reason})");
        }
        other => panic!("{what}: expected a refusal with nothing read, got {other:?}"),
    }
}

/// Every way of getting in without being `F`, tried against the leader.
/// Returns after the last refusal.
fn impersonate_crashed_follower(scenario: &Scenario) {
    let (f, g) = (scenario.crashed, scenario.live);
    let as_f = [
        (f, scenario.fetch_at_end(f)),
        (f, scenario.fetch_everything(f)),
    ];

    // No certificate at all.
    assert_refused(scenario, "no certificate", None, &as_f);

    // A certificate naming F, signed by another CA.
    let rogue_ca = TestCa::new("rogue CA");
    let rogue = rogue_ca.node_cert(f);
    assert_refused(scenario, "certificate from another CA", Some(&rogue), &as_f);

    // G's own valid certificate, speaking as F in every combination.
    let g_cert = scenario.ca().node_cert(g);
    assert_refused(scenario, "G's certificate, sender F", Some(&g_cert), &as_f);
    assert_refused(
        scenario,
        "G's certificate, sender G, replica F",
        Some(&g_cert),
        &[
            (g, scenario.fetch_at_end(f)),
            (g, scenario.fetch_everything(f)),
        ],
    );
    let Request::Fetch(mut sender_f_replica_g) = scenario.fetch_at_end(g) else {
        unreachable!()
    };
    sender_f_replica_g.replica = g;
    assert_refused(
        scenario,
        "G's certificate, sender F, replica G",
        Some(&g_cert),
        &[(f, Request::Fetch(sender_f_replica_g))],
    );
    assert_refused(
        scenario,
        "G's certificate, epoch query for replica F",
        Some(&g_cert),
        &[(g, sample_epoch_request(f, 1))],
    );

    // A certificate with a wildcard that would match any node's name.
    let wildcard = scenario.ca().cert_for_names(&["*.isrlog".to_string()]);
    assert_refused(scenario, "wildcard certificate", Some(&wildcard), &as_f);
}

/// The same hand-made client, speaking as itself with its valid
/// certificate, is answered: the refusals above are not the raw client
/// failing on its own.
fn assert_honest_client_is_answered(scenario: &Scenario) {
    let g = scenario.live;
    let g_cert = scenario.ca().node_cert(g);
    let config = raw_client_config(&scenario.ca().pem(), Some(&g_cert));
    let query = Request::EpochEndOffsets(EpochEndOffsetsRequest {
        replica: g,
        logs: vec![EpochQuery {
            log: LOG,
            current_leader_epoch: scenario.leader.leader_epoch(),
            epoch: scenario.leader.leader_epoch(),
        }],
    });
    match send_raw(
        scenario.leader_addr(),
        scenario.leader_id,
        config,
        &[(g, query)],
        ANSWER_WAIT,
    ) {
        Seen::Answered { frames: 1, .. } => {}
        other => panic!("{g} speaking as itself was not answered: {other:?}"),
    }
}

/// Sends `frames` on a plain TCP connection to `addr`; returns the bytes of
/// the answers, once all came.
fn send_plain(addr: SocketAddr, frames: &[(NodeId, Request)]) -> Vec<u8> {
    let mut socket = TcpStream::connect(addr).expect("connect");
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("read timeout");
    for (id, (from, request)) in frames.iter().enumerate() {
        let frame = encode_request_frame(id as u64 + 1, *from, request, 1 << 20).expect("fits");
        socket.write_all(&frame).expect("write");
    }
    let deadline = Instant::now() + ANSWER_WAIT;
    let mut received = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while decode_frames(&received, 1 << 26).frames.len() < frames.len() {
        assert!(Instant::now() < deadline, "no answer over plain TCP");
        match socket.read(&mut buf) {
            Ok(0) => panic!("plain TCP server closed the connection"),
            Ok(read) => received.extend_from_slice(&buf[..read]),
            Err(error) if matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(error) => panic!("plain TCP read failed: {error}"),
        }
    }
    received
}

/// Waits `settle` and asserts the state never left `before` meanwhile.
fn assert_state_holds(
    scenario: &Scenario,
    before: &(Offset, Vec<NodeId>, Vec<NodeId>),
    settle: Duration,
) {
    let until = Instant::now() + settle;
    loop {
        assert_eq!(
            &scenario.state(),
            before,
            "(HW, leader's ISR, coordinator's ISR) changed after refused frames"
        );
        if Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn refused_peers_do_not_move_the_high_watermark() {
    // F stays in the ISR for the whole test: the HW waits for it.
    let scenario = scenario(true, Duration::from_secs(300));
    let before = scenario.state();
    let (hw, leader_isr, _) = &before;
    assert!(
        *hw < scenario.leader.log_end_offset(),
        "HW {hw} should wait for the crashed {} (ISR {leader_isr:?})",
        scenario.crashed
    );
    assert!(leader_isr.contains(&scenario.crashed));

    impersonate_crashed_follower(&scenario);
    assert_state_holds(&scenario, &before, Duration::from_millis(500));
    assert_honest_client_is_answered(&scenario);
    assert_state_holds(&scenario, &before, Duration::from_millis(100));
}

#[test]
fn refused_peers_do_not_rejoin_the_isr() {
    let scenario = scenario(true, Duration::from_secs(1));
    let (crashed, leader_id, live) = (scenario.crashed, scenario.leader_id, scenario.live);
    let mut rest = vec![leader_id, live];
    rest.sort();
    assert!(
        scenario.cluster.wait_until(Duration::from_secs(30), |c| {
            let mut isr = c.in_sync_replicas(LOG);
            isr.sort();
            isr == rest
        }),
        "{crashed} never left the ISR"
    );
    let before = scenario.state();
    assert_eq!(before.1, rest);

    impersonate_crashed_follower(&scenario);
    assert_state_holds(&scenario, &before, Duration::from_millis(500));
}

/// Control: over plain TCP the same fetch "from F" at the log end is
/// answered and moves the high watermark: what TLS is refusing above.
#[test]
fn control_plain_tcp_impersonation_moves_the_high_watermark() {
    let scenario = scenario(false, Duration::from_secs(300));
    let (hw, _, _) = scenario.state();
    let end = scenario.leader.log_end_offset();
    assert!(hw < end);
    let f = scenario.crashed;
    let answers = send_plain(scenario.leader_addr(), &[(f, scenario.fetch_at_end(f))]);
    assert!(!answers.is_empty());
    assert!(
        scenario
            .cluster
            .wait_until(Duration::from_secs(10), |_| scenario
                .leader
                .high_watermark()
                == end),
        "the impersonated fetch did not move the HW from {hw} to {end}"
    );
}

/// Control: over plain TCP the same fetch brings a crashed follower back
/// into the ISR.
#[test]
fn control_plain_tcp_impersonation_rejoins_the_isr() {
    let scenario = scenario(false, Duration::from_secs(1));
    let f = scenario.crashed;
    assert!(
        scenario.cluster.wait_until(Duration::from_secs(30), |c| !c
            .in_sync_replicas(LOG)
            .contains(&f)),
        "{f} never left the ISR"
    );
    send_plain(scenario.leader_addr(), &[(f, scenario.fetch_at_end(f))]);
    assert!(
        scenario
            .cluster
            .wait_until(Duration::from_secs(10), |_| scenario
                .leader
                .in_sync_replicas()
                .contains(&f)),
        "the impersonated fetch did not bring {f} back into the ISR"
    );
}
