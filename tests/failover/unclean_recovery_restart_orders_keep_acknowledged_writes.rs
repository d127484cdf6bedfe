//! Issue 23, unclean recovery (SPEC 3.5, G1(c); KIP-966 balanced): every
//! replica of a log loses power at once (a whole-cluster power cut), all
//! three of them in the ISR; one of them kept its disk (a process crash
//! rather than a power loss), the two others lost their unflushed bytes
//! under the default `FlushPolicy::Never`. Whatever the order in which
//! they come back, nothing acknowledged is lost: each one reports an
//! unclean shutdown with its log end, the log stays leaderless until the
//! last ISR member has reported, and then the longest log leads
//! (`LogState::recovery_leader`), which is the one that kept its disk (or
//! one as long).
//!
//! The bug this guards against (issue 23, "still open from the ELR work"):
//! when every ISR and ELR member came back uncleanly, the last one to
//! register led, even if another held more of the log, so one restart
//! order lost acknowledged records.
//!
//! The nodes run no controller while they crash, so the coordinator keeps
//! all three in the ISR (as when the sessions expire together); a
//! controller outside the cluster runs from before the first restart.

use std::time::Duration;

use crate::failover_support::*;
use isrlog::testing::Cluster;
use isrlog::{
    Acks, Controller, Coordinator, LogConfig, LogId, MemoryCoordinator, NodeId, Offset,
    PreviousShutdown,
};

const LOG: LogId = LogId(0);
/// The node id of the controller outside the cluster.
const OUTSIDE: NodeId = NodeId(9);
/// Generous on a loaded 2-core machine: every wait is a wait-until loop.
const WAIT: Duration = Duration::from_secs(20);
const VALUES: [&str; 4] = ["a", "b", "c", "d"];

fn cluster() -> Cluster {
    Cluster::builder()
        .nodes(3)
        .controller(None)
        .session_timeout(Duration::from_secs(3600))
        .replication(replication(2))
        .log_config(LogConfig::default())
        .build()
        .unwrap()
}

/// The outside controller (`failover_support::outside_controller`).
fn outside_controller(cluster: &Cluster) -> (MemoryCoordinator, Controller) {
    crate::failover_support::outside_controller(cluster, OUTSIDE, Duration::from_millis(100), WAIT)
}

fn wait_for(cluster: &Cluster, what: &str, condition: impl FnMut(&Cluster) -> bool) {
    assert!(
        cluster.wait_until(WAIT, condition),
        "timed out waiting until {what}: {:?}",
        cluster.coordinator.log_state(LOG).unwrap()
    );
}

/// One run: `keeper` crashes keeping its disk, the others lose power
/// (torn writes chosen by `seed`), and they restart in `order`.
fn run(keeper: NodeId, order: [NodeId; 3], seed: u64) {
    let context = format!("keeper {keeper}, restart order {order:?}, seed {seed}");
    let cluster = cluster();
    let replicas = cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    for value in &VALUES[..3] {
        leader.append_values(&[value], Acks::All).unwrap();
    }
    assert_eq!(cluster.in_sync_replicas(LOG), replicas, "{context}");

    for &node in &replicas {
        if node == keeper {
            cluster.crash(node);
        } else {
            cluster.crash_losing_unflushed(node, seed);
        }
    }
    let (_coordinator, _controller) = outside_controller(&cluster);
    wait_for(&cluster, "the log is leaderless", |c| {
        c.leader_of(LOG).is_none()
    });

    for (position, &node) in order.iter().enumerate() {
        cluster.restart(node).unwrap();
        assert_eq!(
            cluster.with_node(node, |n| n.previous_shutdown()).unwrap(),
            PreviousShutdown::Unclean,
            "{context}: {node}"
        );
        if position + 1 < order.len() {
            // Long enough for a (wrong) election to happen: an ISR member
            // has not reported yet, so recovery cannot know the longest.
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(
                cluster.leader_of(LOG),
                None,
                "{context}: elected before every ISR member reported: {:?}",
                cluster.coordinator.log_state(LOG).unwrap()
            );
        }
    }
    wait_for(&cluster, "unclean recovery elects", |c| {
        c.leader_of(LOG).is_some()
    });
    let new_leader = cluster.leader_log(LOG).unwrap();
    assert_eq!(
        new_leader.log_end_offset(),
        Offset(3),
        "{context}: the new leader {} is not the longest log",
        new_leader.node_id()
    );

    wait_for(&cluster, "the ISR is whole again", |c| {
        c.in_sync_replicas(LOG).len() == 3
    });
    new_leader.append_values(&[VALUES[3]], Acks::All).unwrap();
    let handles: Vec<_> = replicas
        .iter()
        .map(|&node| cluster.log(node, LOG).unwrap())
        .collect();
    assert!(
        wait_converged(&cluster, &handles.iter().collect::<Vec<_>>(), Offset(4)),
        "{context}: the replicas did not converge on offset 4"
    );
    let expected: Vec<(u64, String)> = (0u64..).zip(VALUES.iter().map(|v| v.to_string())).collect();
    for handle in &handles {
        assert_eq!(
            committed_values(handle),
            expected,
            "{context}: on {}",
            handle.node_id()
        );
    }
}

/// Every replica as the keeper, and every position of the keeper in the
/// restart order: `pick(keeper, others)` builds the order.
fn each_keeper(pick: impl Fn(NodeId, NodeId, NodeId) -> [NodeId; 3]) {
    let nodes = [NodeId(0), NodeId(1), NodeId(2)];
    for (seed, &keeper) in nodes.iter().enumerate() {
        let others: Vec<NodeId> = nodes.iter().copied().filter(|n| *n != keeper).collect();
        run(keeper, pick(keeper, others[0], others[1]), seed as u64 + 23);
        run(
            keeper,
            pick(keeper, others[1], others[0]),
            seed as u64 + 123,
        );
    }
}

#[test]
fn the_replica_that_kept_its_disk_restarts_first() {
    each_keeper(|keeper, x, y| [keeper, x, y]);
}

#[test]
fn the_replica_that_kept_its_disk_restarts_second() {
    each_keeper(|keeper, x, y| [x, keeper, y]);
}

#[test]
fn the_replica_that_kept_its_disk_restarts_last() {
    each_keeper(|keeper, x, y| [x, y, keeper]);
}
