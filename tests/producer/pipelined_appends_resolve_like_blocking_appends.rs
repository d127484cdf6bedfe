//! Issue 14: `ReplicatedLog::append_pipelined` hands out offsets in call
//! order at once and resolves each handle with what a blocking `append`
//! would have returned: through `wait`, a `Future` polled by a minimal
//! hand-written executor (woken exactly once, when the outcome is known),
//! or a callback (a panicking one harms nothing). Dropped handles are
//! harmless, and no handle is left unresolved when the node stops.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{
    Acks, AppendHandle, Error, Isolation, LogId, NodeId, RecordBatch, RecordBatchBuilder,
    ReplicatedLog, ReplicationConfig,
};

const LOG: LogId = LogId(0);
/// Generous bound for anything that should happen "soon" on a loaded
/// 2-core machine.
const SOON: Duration = Duration::from_secs(20);

fn cluster() -> Cluster {
    Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(3600))
        .controlled_shutdown_timeout(Duration::ZERO)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(60),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(60),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap()
}

fn batch(value: &[u8]) -> RecordBatch {
    let mut builder = RecordBatchBuilder::new(0);
    builder.push(value);
    builder.build().unwrap()
}

fn followers(cluster: &Cluster, leader: NodeId) -> Vec<NodeId> {
    cluster
        .node_ids()
        .into_iter()
        .filter(|&n| n != leader)
        .collect()
}

/// A leader whose followers cannot fetch: nothing commits until `heal`.
fn isolated_leader(cluster: &Cluster) -> (NodeId, ReplicatedLog) {
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let id = leader.node_id();
    cluster.network.partition(&[id], &followers(cluster, id));
    (id, leader)
}

/// Counts wake-ups: the waker of the minimal executor.
#[derive(Default)]
struct WakeCount(AtomicUsize);

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn poll_once(
    handle: &mut AppendHandle,
    waker: &Waker,
) -> Poll<isrlog::Result<isrlog::AppendOutcome>> {
    Pin::new(handle).poll(&mut Context::from_waker(waker))
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + SOON;
    while !condition() {
        assert!(Instant::now() < deadline, "not within {SOON:?}: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn pipelined_offsets_follow_call_order_and_each_ok_is_committed_there() {
    let cluster = cluster();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let mut handles = Vec::new();
    for i in 0..300u32 {
        let acks = if i % 3 == 0 { Acks::Leader } else { Acks::All };
        let value = format!("v{i}");
        handles.push((
            value.clone(),
            leader
                .append_pipelined(&batch(value.as_bytes()), acks)
                .unwrap(),
        ));
    }
    let mut previous = None;
    for (value, handle) in handles {
        let outcome = handle.wait().unwrap();
        assert!(!outcome.duplicate);
        if let Some(previous) = previous {
            assert!(outcome.base_offset > previous, "offsets in call order");
        }
        previous = Some(outcome.base_offset);
        // Every acks=all Ok (and here every acks=1 one, once the
        // followers caught up) is committed at its offset.
        wait_until("the record committed", || {
            leader.high_watermark() > outcome.last_offset
        });
        let read = leader
            .read(outcome.base_offset, 1 << 20, Isolation::Committed)
            .unwrap();
        let record = read[0]
            .records()
            .map(Result::unwrap)
            .find(|r| r.offset == outcome.base_offset)
            .unwrap();
        assert_eq!(&record.value[..], value.as_bytes());
    }
    assert_eq!(leader.pipelined_appends_pending(), 0);
    assert_eq!(leader.pipelined_bytes_in_flight(), 0);
    cluster.shutdown().unwrap();
}

#[test]
fn a_future_is_woken_exactly_once_when_the_batch_commits() {
    let cluster = cluster();
    let (_, leader) = isolated_leader(&cluster);
    let wakes = Arc::new(WakeCount::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let mut handle = leader.append_pipelined(&batch(b"f"), Acks::All).unwrap();
    assert!(poll_once(&mut handle, &waker).is_pending());
    // Polled again with the same waker: still one registration.
    assert!(poll_once(&mut handle, &waker).is_pending());
    // A dropped handle next to it is harmless.
    drop(
        leader
            .append_pipelined(&batch(b"dropped"), Acks::All)
            .unwrap(),
    );
    // Not committed while the followers cannot fetch: no wake-up.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    assert!(!handle.is_done());
    cluster.network.heal();
    wait_until("the waker called", || wakes.0.load(Ordering::SeqCst) > 0);
    assert!(handle.is_done(), "woken only once the outcome is known");
    match poll_once(&mut handle, &waker) {
        Poll::Ready(Ok(outcome)) => {
            assert!(leader.high_watermark() > outcome.last_offset);
        }
        other => panic!("expected the outcome, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(wakes.0.load(Ordering::SeqCst), 1, "woken exactly once");
    wait_until("nothing pending", || {
        leader.pipelined_appends_pending() == 0
    });
    assert_eq!(leader.pipelined_bytes_in_flight(), 0);
    // The log goes on.
    leader.append_values(&[b"after"], Acks::All).unwrap();
    cluster.shutdown().unwrap();
}

#[test]
fn a_future_resolved_before_its_first_poll_is_ready_at_once() {
    let cluster = cluster();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let mut handle = leader.append_pipelined(&batch(b"x"), Acks::Leader).unwrap();
    wait_until("acks=1 resolved", || handle.is_done());
    let wakes = Arc::new(WakeCount::default());
    let waker = Waker::from(Arc::clone(&wakes));
    assert!(matches!(poll_once(&mut handle, &waker), Poll::Ready(Ok(_))));
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    cluster.shutdown().unwrap();
}

#[test]
fn callbacks_get_the_outcome_and_a_panicking_one_harms_nothing() {
    let cluster = cluster();
    let (_, leader) = isolated_leader(&cluster);
    let (tx, rx) = mpsc::channel();
    for i in 0..10u64 {
        let tx = tx.clone();
        let handle = leader.append_pipelined(&batch(b"cb"), Acks::All).unwrap();
        if i == 3 {
            handle.on_complete(|_| panic!("a callback that panics"));
        } else {
            handle.on_complete(move |outcome| {
                let _ = tx.send((i, outcome.map(|o| o.base_offset)));
            });
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(rx.try_recv().is_err(), "nothing committed yet");
    cluster.network.heal();
    let mut got: Vec<(u64, isrlog::Offset)> = (0..9)
        .map(|_| {
            let (i, offset) = rx.recv_timeout(SOON).expect("every callback runs");
            (i, offset.unwrap())
        })
        .collect();
    got.sort();
    assert!(
        got.windows(2).all(|w| w[0].1 < w[1].1),
        "offsets in call order: {got:?}"
    );
    // Replication survived the panic: more appends commit.
    leader.append_values(&[b"after"], Acks::All).unwrap();
    let handle = leader.append_pipelined(&batch(b"late"), Acks::All).unwrap();
    assert!(handle.wait().is_ok());
    // A callback on a resolved handle runs at once, on this thread.
    let handle = leader
        .append_pipelined(&batch(b"now"), Acks::Leader)
        .unwrap();
    wait_until("acks=1 resolved", || handle.is_done());
    let here = std::thread::current().id();
    let (tx, rx) = mpsc::channel();
    handle.on_complete(move |outcome| {
        let _ = tx.send((std::thread::current().id(), outcome.is_ok()));
    });
    assert_eq!(rx.try_recv().unwrap(), (here, true));
    cluster.shutdown().unwrap();
}

/// Stopping the leader (cleanly or by a crash) resolves every handle it
/// held with an error: waits, futures and callbacks alike.
fn no_handle_left_unresolved_when_the_leader_stops(crash: bool) {
    let cluster = cluster();
    let (id, leader) = isolated_leader(&cluster);
    let mut waits = Vec::new();
    let mut futures = Vec::new();
    let (tx, rx) = mpsc::channel();
    let wakes = Arc::new(WakeCount::default());
    let waker = Waker::from(Arc::clone(&wakes));
    for i in 0..30 {
        let handle = leader.append_pipelined(&batch(b"s"), Acks::All).unwrap();
        match i % 3 {
            0 => waits.push(handle),
            1 => {
                let mut handle = handle;
                assert!(poll_once(&mut handle, &waker).is_pending());
                futures.push(handle);
            }
            _ => {
                let tx = tx.clone();
                handle.on_complete(move |outcome| {
                    let _ = tx.send(outcome);
                });
            }
        }
    }
    if crash {
        cluster.crash(id);
    } else {
        cluster.stop_node(id).unwrap();
    }
    // A crash poisons the node's logs before its threads end (so that a
    // dead node runs no queued fsync): an append whose write was still
    // queued then fails with the poison's cause, as a write that failed,
    // rather than `Shutdown`. Either says the outcome is unknown.
    let stopped = |outcome: &Result<isrlog::AppendOutcome, Error>| match outcome {
        Err(Error::Shutdown) => true,
        Err(Error::Poisoned { reason, .. }) => crash && reason.contains("simulated crash"),
        _ => false,
    };
    for handle in waits {
        match handle.wait_timeout(SOON) {
            Ok(outcome) if stopped(&outcome) => {}
            other => panic!("expected Shutdown, got {other:?}"),
        }
    }
    wait_until("every future woken", || {
        wakes.0.load(Ordering::SeqCst) == 10
    });
    for mut handle in futures {
        match poll_once(&mut handle, &waker) {
            Poll::Ready(outcome) if stopped(&outcome) => {}
            other => panic!("expected Shutdown, got {other:?}"),
        }
    }
    for _ in 0..10 {
        match rx.recv_timeout(SOON) {
            Ok(outcome) if stopped(&outcome) => {}
            other => panic!("expected Shutdown, got {other:?}"),
        }
    }
    // And later calls fail at once, appending nothing.
    assert!(matches!(
        leader.append_pipelined(&batch(b"late"), Acks::All),
        Err(Error::Shutdown)
    ));
}

#[test]
fn no_handle_left_unresolved_after_a_clean_shutdown() {
    no_handle_left_unresolved_when_the_leader_stops(false);
}

#[test]
fn no_handle_left_unresolved_after_a_crash() {
    no_handle_left_unresolved_when_the_leader_stops(true);
}

#[test]
fn pipelined_acks_one_resolves_without_the_followers() {
    let cluster = cluster();
    let (_, leader) = isolated_leader(&cluster);
    let handle = leader
        .append_pipelined(&batch(b"one"), Acks::Leader)
        .unwrap();
    let outcome = handle.wait_timeout(SOON).expect("resolved").unwrap();
    assert_eq!(leader.log_end_offset(), outcome.last_offset.next());
    assert!(
        leader.high_watermark() <= outcome.last_offset,
        "not committed"
    );
    let handle = leader
        .append_pipelined(&batch(b"none"), Acks::None)
        .unwrap();
    assert!(handle.is_done());
    cluster.shutdown().unwrap();
}
