//! Issue 23 item 6: after an `AppendHandle` was polled to `Ready` as a
//! future, `wait()` blocked for ever and `on_complete` never ran; and a
//! pending append's `Timeout` was decided on the control loop's ticks,
//! which block on coordinator calls, so it came seconds late when the
//! coordinator was slow. A handle now keeps its outcome once polled to
//! `Ready` and gives the same one to every later poll, `wait`,
//! `wait_timeout` and `on_complete`; and a deadline timer that never calls
//! the coordinator fails pending appends within 100 ms of their deadline
//! while the coordinator hangs.

use std::future::Future;
use std::pin::Pin;
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use isrlog::testing::{Cluster, CoordinatorDelay};
use isrlog::{
    Acks, AppendHandle, AppendOutcome, Error, LogId, NodeId, RecordBatch, RecordBatchBuilder,
    ReplicatedLog, ReplicationConfig,
};

const LOG: LogId = LogId(0);
const SOON: Duration = Duration::from_secs(10);
/// SPEC 3.1: a `Timeout` arrives within this much of its deadline.
const LATE_MAX: Duration = Duration::from_millis(100);

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

struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

/// Polls `handle` until `Ready` (it is resolved already, or soon).
fn poll_to_ready(handle: &mut AppendHandle) -> isrlog::Result<AppendOutcome> {
    let waker = Waker::from(Arc::new(NoWake));
    let deadline = Instant::now() + SOON;
    loop {
        if let Poll::Ready(outcome) = Pin::new(&mut *handle).poll(&mut Context::from_waker(&waker))
        {
            return outcome;
        }
        assert!(Instant::now() < deadline, "not ready within {SOON:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The same outcome: equal successes, or errors of the same variant
/// (`Error` has no `PartialEq`; its message says everything it holds).
fn assert_same(first: &isrlog::Result<AppendOutcome>, again: &isrlog::Result<AppendOutcome>) {
    match (first, again) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("{first:?} then {again:?}"),
    }
}

/// Every way of asking a handle again after it completed as a future.
fn ask_again_after_ready(log: &ReplicatedLog, acks: Acks) -> isrlog::Result<AppendOutcome> {
    // Polled again, then waited on.
    let mut handle = log.append_pipelined(&batch(b"w"), acks).unwrap();
    let first = poll_to_ready(&mut handle);
    assert_same(&first, &poll_to_ready(&mut handle));
    assert!(handle.is_done());
    let again = handle.wait_timeout(SOON).expect("wait() returns at once");
    assert_same(&first, &again);
    // wait().
    let mut handle = log.append_pipelined(&batch(b"w"), acks).unwrap();
    let first_wait = poll_to_ready(&mut handle);
    assert_same(&first_wait, &handle.wait());
    // on_complete runs at once, on this thread.
    let mut handle = log.append_pipelined(&batch(b"c"), acks).unwrap();
    let first_callback = poll_to_ready(&mut handle);
    let (tx, rx) = mpsc::channel();
    handle.on_complete(move |outcome| {
        let _ = tx.send(outcome);
    });
    let again = rx.try_recv().expect("on_complete ran before it returned");
    assert_same(&first_callback, &again);
    first
}

#[test]
fn a_handle_completed_as_a_future_answers_wait_wait_timeout_and_on_complete() {
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(3600))
        .controlled_shutdown_timeout(Duration::ZERO)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(60),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_millis(200),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    // Successes, acks=all and acks=1.
    assert!(ask_again_after_ready(&leader, Acks::All).is_ok());
    assert!(ask_again_after_ready(&leader, Acks::Leader).is_ok());
    // An error: the followers cannot fetch, so acks=all times out.
    let id = leader.node_id();
    cluster.network.partition(&[id], &followers(&cluster, id));
    let outcome = ask_again_after_ready(&leader, Acks::All);
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    cluster.network.heal();
    cluster.shutdown().unwrap();
}

/// The leader's coordinator hangs — its control loop is stuck in a
/// heartbeat — while pipelined `acks=all` appends wait for followers that
/// cannot fetch: each fails with `Timeout` within 100 ms of its deadline,
/// seen by `wait` and by a callback alike.
#[test]
fn a_pending_append_times_out_on_time_while_the_coordinator_hangs() {
    let request_timeout = Duration::from_millis(300);
    let cluster = Cluster::builder()
        .nodes(3)
        // Heartbeats every 200 ms: the control loop soon blocks in one.
        .session_timeout(Duration::from_millis(600))
        .controlled_shutdown_timeout(Duration::ZERO)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_secs(60),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout,
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let id = leader.node_id();
    cluster.network.partition(&[id], &followers(&cluster, id));
    let delay = ReleaseOnDrop(cluster.coordinator_delay(id));
    delay.0.hang();
    assert!(
        cluster.wait_until(SOON, |_| delay.0.delayed_calls() > 0),
        "the leader's control loop called the hanging coordinator"
    );
    let (tx, rx) = mpsc::channel();
    let mut waited = Vec::new();
    for i in 0..10 {
        let appended = Instant::now();
        let handle = leader.append_pipelined(&batch(b"t"), Acks::All).unwrap();
        if i % 2 == 0 {
            let tx = tx.clone();
            handle.on_complete(move |outcome| {
                let _ = tx.send((appended, Instant::now(), outcome));
            });
        } else {
            waited.push((appended, handle));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut arrivals = Vec::new();
    for (appended, handle) in waited {
        let outcome = handle.wait_timeout(SOON).expect("resolved");
        arrivals.push((appended, Instant::now(), outcome));
    }
    for _ in 0..5 {
        arrivals.push(rx.recv_timeout(SOON).expect("every callback ran"));
    }
    for (appended, arrived, outcome) in &arrivals {
        assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
        let took = arrived.duration_since(*appended);
        assert!(took >= request_timeout, "timed out early: {took:?}");
        assert!(
            took <= request_timeout + LATE_MAX,
            "Timeout {:?} after its deadline",
            took - request_timeout
        );
    }
    drop(delay);
    cluster.network.heal();
}

/// Ends the hang when the test ends, passed or failed: a node stopping
/// joins its control thread, which a hanging call would hold for an hour.
struct ReleaseOnDrop(CoordinatorDelay);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.release();
    }
}
