//! Issue 23, item 5 (SPEC 3.5, controlled shutdown "bounded by a configured
//! deadline after which it stops anyway"): a node leading 100 logs whose
//! coordinator takes 1 s per call returns from `shutdown` within
//! `controlled_shutdown_timeout` (plus the one call its control thread may
//! be in, and closing its logs), not after one call per step and log. The
//! stop is a clean one all the same: the next start says `Clean` and the
//! node's logs hold what it had. The logs it did not hand over get new
//! leaders once its session ends, and nothing acknowledged is lost.

use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{Acks, Coordinator, LogId, NodeId, PreviousShutdown};

use crate::failover_support::{committed_values, replication};

const NODES: u32 = 3;
const LOGS: u32 = 100;
const CALL: Duration = Duration::from_secs(1);
/// Past the deadline: ending the session gets 200 ms more (documented at
/// `NodeConfig::controlled_shutdown_timeout`), then the logs close (local
/// I/O, 100 logs on a loaded machine). No coordinator call is waited for:
/// the control thread makes none of its own once the shutdown begins
/// (before that change the seated controller returned after up to 5.97 s
/// at a 4.5 s deadline, its control thread inside a 1 s call; after it,
/// 4.75 to 5.19 s in 4 runs beside a 200-seed fault test).
const SLACK: Duration = Duration::from_millis(1500);
const WAIT_MAX: Duration = Duration::from_secs(30);

/// 4.5 s: enough for the four calls of a hand-over, made for every log
/// at once (so the logs usually are handed over), not for leaving the ISRs
/// and ending the session after that.
#[test]
fn controlled_shutdown_of_a_node_leading_100_logs_against_a_1s_coordinator_returns_within_its_deadline(
) {
    shut_down_within(Duration::from_millis(4500), false);
}

/// The same for the node holding the controller seat: its controller
/// thread, busy electing with 1 s calls while the logs hand over, is not
/// waited for past the deadline, and ending the session frees the seat.
#[test]
fn controlled_shutdown_of_the_seated_controller_returns_within_its_deadline() {
    shut_down_within(Duration::from_millis(4500), true);
}

/// 2.5 s: the deadline passes before any hand-over can write; every log is
/// left to the controller.
#[test]
fn controlled_shutdown_cut_short_by_its_deadline_still_stops_cleanly() {
    shut_down_within(Duration::from_millis(2500), false);
}

fn shut_down_within(deadline: Duration, stop_the_controller: bool) {
    let cluster = Cluster::builder()
        .nodes(NODES as usize)
        .replication(replication(2))
        .session_timeout(Duration::from_secs(10))
        .controlled_shutdown_timeout(deadline)
        .build()
        .unwrap();
    assert!(cluster.wait_until(WAIT_MAX, |c| c.coordinator.controller().unwrap().is_some()));
    let (controller, _) = cluster.coordinator.controller().unwrap().unwrap();
    let stopping = if stop_the_controller {
        controller
    } else {
        NodeId((controller.0 + 1) % NODES)
    };
    // Log `i` of `n` nodes is led by node `i mod n` (SPEC 5, seeds 002/003).
    let logs: Vec<LogId> = (0..LOGS).map(|k| LogId(k * NODES + stopping.0)).collect();
    for &log in &logs {
        cluster.create_log(log, NODES as usize).unwrap();
    }
    for &log in &logs {
        let leader = cluster.leader_log(log).unwrap();
        assert_eq!(leader.node_id(), stopping, "{log}");
        leader
            .append_values(&[&format!("{log}")], Acks::All)
            .unwrap();
    }

    cluster.coordinator_delay(stopping).set(CALL);
    let started = Instant::now();
    cluster.stop_node(stopping).unwrap();
    let took = started.elapsed();
    let handed_over = logs
        .iter()
        .filter(|&&log| cluster.leader_of(log) != Some(stopping))
        .count();
    println!(
        "controlled shutdown of a node leading {LOGS} logs, {CALL:?} per coordinator call, \
         deadline {deadline:?}, controller {stop_the_controller}: returned after {took:?}; \
         {handed_over} logs had another leader then"
    );
    assert!(
        took <= deadline + SLACK,
        "shutdown took {took:?}, deadline {deadline:?}"
    );
    assert!(!cluster.is_running(stopping));

    // The logs not handed over get a leader once the session ends.
    assert!(
        cluster.wait_until(WAIT_MAX, |c| logs
            .iter()
            .all(|&log| { c.leader_of(log).is_some_and(|leader| leader != stopping) })),
        "some logs got no new leader"
    );
    for &log in &logs {
        let leader = cluster.leader_log(log).unwrap();
        let values: Vec<String> = committed_values(&leader)
            .into_iter()
            .map(|(_, v)| v)
            .collect();
        assert_eq!(values, vec![format!("{log}")], "{log}");
    }

    // What the stop wrote says clean, and is: the logs hold their record.
    cluster.coordinator_delay(stopping).release();
    cluster.restart(stopping).unwrap();
    assert_eq!(
        cluster.with_node(stopping, |node| node.previous_shutdown()),
        Some(PreviousShutdown::Clean)
    );
    for &log in &logs {
        let handle = cluster.log(stopping, log).unwrap();
        assert!(
            handle.log_end_offset().0 >= 1,
            "{log}: {:?}",
            handle.log_end_offset()
        );
    }
}
