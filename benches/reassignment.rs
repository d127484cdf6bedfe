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
//! reported), then the bench prints the figures. Run with
//! `cargo bench --bench reassignment`; `-- --test` runs 2 moves each (CI).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use isrlog::testing::Cluster;
use isrlog::{Coordinator, LogId, LogState, NodeId, ReplicationConfig};

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
                .replication(ReplicationConfig {
                    min_insync_replicas: 2,
                    fetch_wait_max: Duration::from_millis(100),
                    replica_lag_time_max: Duration::from_secs(10),
                    request_timeout: Duration::from_secs(5),
                    fetch_backoff: Duration::from_millis(5),
                    ..ReplicationConfig::default()
                })
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
}

criterion_group!(benches, reassignment);
criterion_main!(benches);
