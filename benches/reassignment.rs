//! Reassignment stall (issue 26): a writer appends with `acks=all` without
//! pause, retrying at once on a refusal, while a 4-node memory cluster moves
//! the log's 3 replicas around (SPEC 3.10). Each move replaces one replica
//! with the node that holds none; the figure is the longest gap between two
//! acknowledged appends from the move's start until it completed (replicas
//! = target, ISR full) and the writer got through once more: how long the
//! application could not write. Median and max over 10 moves; target max
//! <= 100 ms for moves that take the leader's replica away (the leader hands
//! over as in a controlled shutdown).
//!
//! Baseline in the same run: the same number of moves that take a
//! follower's replica away, the leader staying where it is, so only the
//! added replica's catch-up and the completing write are in the figure.
//!
//! Criterion measures each (one iteration is one move, its stall the time
//! reported), then the bench prints the figures.
//!
//! Catch-up (issue 26: at least 0.5x): a follower is stopped while the
//! leader takes a backlog; then it restarts and a replica is added by a
//! reassignment at the same moment, both fetching the same backlog from the
//! same leader. The figure is the added replica's rate over the follower's
//! (each from its replica opening to its log end reaching the leader's),
//! three rounds.
//!
//! Run with `cargo bench --bench reassignment`; `-- --test` runs 2 moves
//! each and one small catch-up (CI).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use isrlog::testing::Cluster;
use isrlog::{Acks, Coordinator, LogId, LogState, NodeId, ReplicationConfig};

#[path = "support/append_stall.rs"]
mod append_stall;
use append_stall::{print_stalls, StallWriter};

const LOG: LogId = LogId(0);
const NODES: usize = 4;
const MOVES: usize = 10;
const QUICK_MOVES: u64 = 2;
const SAMPLES: usize = 10;
const TARGET: Duration = Duration::from_millis(100);
const WAIT_MAX: Duration = Duration::from_secs(30);
/// Catch-up backlog: batches of 100 records of 1 KiB.
const BACKLOG_BATCHES: usize = 1_000;
const QUICK_BACKLOG_BATCHES: usize = 20;
const CATCH_UP_ROUNDS: usize = 3;
const CATCH_UP_TARGET: f64 = 0.5;

fn quick() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}

/// Which replica a move takes away.
#[derive(Clone, Copy)]
enum Moved {
    Leader,
    Follower,
}

/// A cluster and the writer appending to it.
struct Rig {
    cluster: Arc<Cluster>,
    writer: StallWriter,
}

impl Rig {
    fn start() -> Rig {
        let cluster = Arc::new(
            Cluster::builder()
                .nodes(NODES)
                .replication(replication_config())
                .build()
                .expect("cluster starts"),
        );
        cluster.create_log(LOG, 3).expect("log created");
        assert!(
            cluster.wait_until(WAIT_MAX, |c| c.in_sync_replicas(LOG).len() == 3),
            "the ISR did not fill"
        );
        let writer = StallWriter::start(&cluster, LOG);
        Rig { cluster, writer }
    }

    fn state(&self) -> LogState {
        self.cluster
            .coordinator
            .log_state(LOG)
            .expect("the coordinator answers")
            .expect("the log has a stored state")
    }

    /// Moves the log's `moved` replica to the node that holds none, waits
    /// until the move completed and the writer got through once more;
    /// returns the longest gap between acknowledgements in that time.
    fn move_once(&mut self, moved: Moved) -> Duration {
        let state = self.state();
        let leader = state.leader.expect("the log has a leader");
        let away = match moved {
            Moved::Leader => leader,
            Moved::Follower => *state
                .replicas
                .iter()
                .find(|n| **n != leader)
                .expect("a follower"),
        };
        let spare = (0..NODES as u32)
            .map(NodeId)
            .find(|n| !state.replicas.contains(n))
            .expect("a node holding no replica");
        let target: Vec<NodeId> = state
            .replicas
            .iter()
            .map(|n| if *n == away { spare } else { *n })
            .collect();
        let started = Instant::now();
        self.cluster
            .with_node(spare, |node| node.reassign_log(LOG, target.clone()))
            .expect("the spare node runs")
            .expect("the move is stored");
        assert!(
            self.cluster.wait_until(WAIT_MAX, |c| {
                let Ok(Some(s)) = c.coordinator.log_state(LOG) else {
                    return false;
                };
                !s.is_reassigning()
                    && s.replicas.len() == target.len()
                    && target.iter().all(|n| s.replicas.contains(n))
                    && s.in_sync_replicas.len() == target.len()
            }),
            "the move to {target:?} did not complete: {:?}",
            self.state()
        );
        self.writer.longest_gap(started, Instant::now(), WAIT_MAX)
    }
}

fn replication_config() -> ReplicationConfig {
    ReplicationConfig {
        min_insync_replicas: 2,
        fetch_wait_max: Duration::from_millis(100),
        replica_lag_time_max: Duration::from_secs(10),
        request_timeout: Duration::from_secs(5),
        fetch_backoff: Duration::from_millis(5),
        ..ReplicationConfig::default()
    }
}

/// One catch-up round: how long the restarted follower and the added
/// replica took to fetch the same backlog, in that order.
fn catch_up_once(batches: usize) -> (Duration, Duration, u64) {
    let cluster = Cluster::builder()
        .nodes(NODES)
        .replication(replication_config())
        .build()
        .expect("cluster starts");
    let replicas = cluster.create_log(LOG, 3).expect("log created");
    assert!(
        cluster.wait_until(WAIT_MAX, |c| c.in_sync_replicas(LOG).len() == 3),
        "the ISR did not fill"
    );
    let leader = cluster.leader_of(LOG).expect("a leader");
    let follower = *replicas.iter().find(|n| **n != leader).expect("a follower");
    let added = (0..NODES as u32)
        .map(NodeId)
        .find(|n| !replicas.contains(n))
        .expect("a spare node");
    cluster.stop_node(follower).expect("clean stop");
    let handle = cluster.log(leader, LOG).expect("the leader's log");
    let value = vec![7u8; 1024];
    let batch: Vec<&[u8]> = vec![value.as_slice(); 100];
    for _ in 0..batches {
        handle.append_values(&batch, Acks::All).expect("append");
    }
    let end = handle.log_end_offset();
    cluster.restart(follower).expect("restart");
    let mut target = replicas.clone();
    target.push(added);
    cluster
        .with_node(added, |node| node.reassign_log(LOG, target.clone()))
        .expect("the spare node runs")
        .expect("the move is stored");
    let mut opened: [Option<Instant>; 2] = [None, None];
    let mut caught_up: [Option<Instant>; 2] = [None, None];
    let deadline = Instant::now() + WAIT_MAX * 4;
    while caught_up.iter().any(Option::is_none) {
        assert!(Instant::now() < deadline, "no catch-up to {end}");
        for (i, node) in [follower, added].into_iter().enumerate() {
            if let Ok(replica) = cluster.log(node, LOG) {
                let now = Instant::now();
                opened[i].get_or_insert(now);
                if caught_up[i].is_none() && replica.log_end_offset() >= end {
                    caught_up[i] = Some(now);
                }
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let took = |i: usize| match (opened[i], caught_up[i]) {
        (Some(from), Some(to)) => to - from,
        _ => unreachable!("both caught up"),
    };
    (took(0), took(1), end.0)
}

fn catch_up() {
    let (rounds, batches) = if quick() {
        (1, QUICK_BACKLOG_BATCHES)
    } else {
        (CATCH_UP_ROUNDS, BACKLOG_BATCHES)
    };
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let (follower, added, records) = catch_up_once(batches);
        // Rate ratio: the same backlog, so the follower's time over the
        // added replica's.
        let ratio = follower.as_secs_f64() / added.as_secs_f64().max(1e-9);
        ratios.push(ratio);
        println!(
            "reassignment catch-up round {round}: {records} records of 1 KiB; restarted follower {:.0} ms, added replica {:.0} ms; added/follower rate {ratio:.2}",
            follower.as_secs_f64() * 1e3,
            added.as_secs_f64() * 1e3,
        );
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    println!(
        "reassignment catch-up ({} rounds): added/follower rate median {median:.2}, min {:.2}; target >= {CATCH_UP_TARGET}: {}",
        ratios.len(),
        ratios[0],
        if ratios[0] >= CATCH_UP_TARGET { "met" } else { "MISSED" }
    );
}

fn reassignment(c: &mut Criterion) {
    let mut group = c.benchmark_group("reassignment");
    group
        .sample_size(SAMPLES)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_nanos(1))
        .measurement_time(Duration::from_secs(5));
    let mut figures: Vec<(&str, Vec<Duration>)> = Vec::new();
    for (name, id, moved) in [
        (
            "moving the leader's replica",
            "longest_stall/leader_moved",
            Moved::Leader,
        ),
        (
            "moving a follower's replica (baseline)",
            "longest_stall/follower_moved",
            Moved::Follower,
        ),
    ] {
        let mut rig = Rig::start();
        let mut stalls: Vec<Duration> = Vec::new();
        group.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let count = if quick() { QUICK_MOVES } else { iters };
                let mut total = Duration::ZERO;
                for _ in 0..count {
                    let stall = rig.move_once(moved);
                    stalls.push(stall);
                    total += stall;
                }
                total
            })
        });
        drop(rig);
        figures.push((name, stalls));
    }
    group.finish();
    for (name, stalls) in figures {
        print_stalls(
            &format!("reassignment, {name}"),
            "moves",
            &stalls,
            MOVES,
            TARGET,
        );
    }
    catch_up();
}

criterion_group!(benches, reassignment);
criterion_main!(benches);
