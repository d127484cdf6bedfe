//! Issue 24, item 3, in a running cluster: an operator deletes `/controller`
//! (the seat, as `zkCli deleteall /controller` does; the epoch lives in
//! `/controller_epoch`, as in Kafka) three times while three nodes serve
//! idempotent producers. Each deletion forces a re-election; after each
//! one a leader is crashed, so the new controller has real work to do, and
//! a new producer is initialised, so producer ids are handed out across
//! the deletions.
//!
//! What must hold (Kafka's rules for `/controller_epoch` and the producer
//! id block, which Kafka itself breaks by recreating them at 0): every
//! producer id handed out is unique, the controller epochs seen only grow,
//! every acknowledged value is in the log exactly once (idempotence held
//! across the retries the failovers caused), and the logs converge.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::zookeeper_support::{assert_converged, committed_values, server};
use isrlog::testing::zookeeper::ZkShell;
use isrlog::testing::ZkCluster;
use isrlog::{Coordinator, IdempotentProducer, LogId, ProducerConfig};

const LOG: LogId = LogId(0);
const SESSION_TIMEOUT: Duration = Duration::from_secs(1);

/// Values a producer got acknowledged, keyed by producer id.
type Acknowledged = Mutex<BTreeMap<i64, Vec<String>>>;

/// Sends values through `producer` until `stop`; records what was
/// acknowledged. A send that fails (delivery timeout) is not acknowledged.
fn produce(
    producer: &IdempotentProducer<&ZkCluster>,
    stop: &AtomicBool,
    acknowledged: &Acknowledged,
) {
    let id = producer.producer_id().0;
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let value = format!("p{id}-{n}");
        if producer.send_values(LOG, &[value.as_bytes()]).is_ok() {
            acknowledged
                .lock()
                .unwrap()
                .entry(id)
                .or_default()
                .push(value);
        }
        std::thread::sleep(Duration::from_millis(3));
    }
}

fn config() -> ProducerConfig {
    ProducerConfig {
        delivery_timeout: Duration::from_secs(15),
        retry_backoff: Duration::from_millis(20),
        ..ProducerConfig::default()
    }
}

fn acknowledged_count(acknowledged: &Acknowledged) -> usize {
    acknowledged.lock().unwrap().values().map(Vec::len).sum()
}

fn wait_for_more(acknowledged: &Acknowledged, more: usize, timeout: Duration) -> bool {
    let from = acknowledged_count(acknowledged);
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if acknowledged_count(acknowledged) >= from + more {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn deleting_controller_under_idempotent_producers_keeps_ids_unique_and_epochs_growing() {
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .build()
        .expect("cluster");
    cluster.create_log(LOG, 3).expect("create log");
    let raw = ZkShell::connect(&server.connect_string(), cluster.chroot()).expect("shell");
    let coordinator = cluster.coordinator();
    // While the seat is empty there is no controller; an error reading it
    // counts as "no controller yet" too.
    let controller_epoch = || {
        coordinator
            .controller()
            .ok()
            .flatten()
            .map(|(_, epoch)| epoch)
    };
    let wait_for_controller_above = |floor| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(epoch) = controller_epoch() {
                if Some(epoch) > floor {
                    return Some(epoch);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    };

    let stop = AtomicBool::new(false);
    let acknowledged = Acknowledged::default();
    let mut producer_ids = Vec::new();
    let mut epochs = vec![wait_for_controller_above(None).expect("a first controller")];
    std::thread::scope(|scope| {
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let _stop = StopOnDrop(&stop);
        let start_producer = |producer_ids: &mut Vec<i64>| {
            let producer = IdempotentProducer::init(coordinator, &cluster, config())
                .expect("a producer id is handed out");
            producer_ids.push(producer.producer_id().0);
            let (stop, acknowledged) = (&stop, &acknowledged);
            scope.spawn(move || produce(&producer, stop, acknowledged));
        };
        start_producer(&mut producer_ids);
        start_producer(&mut producer_ids);
        assert!(
            wait_for_more(&acknowledged, 100, Duration::from_secs(20)),
            "no traffic before the first deletion"
        );

        for (round, path) in ["/controller", "/controller", "/controller"]
            .into_iter()
            .enumerate()
        {
            let before = *epochs.last().expect("an epoch");
            raw.delete_all(path).expect("delete");
            let epoch = wait_for_controller_above(Some(before)).unwrap_or_else(|| {
                panic!("round {round}: no controller after {before} once {path} was deleted")
            });
            epochs.push(epoch);
            // The new controller must fail the log over.
            let old_leader = cluster.leader_of(LOG).expect("a leader");
            cluster.crash(old_leader);
            assert!(
                cluster.wait_until(SESSION_TIMEOUT + Duration::from_secs(10), |c| {
                    c.leader_of(LOG).is_some_and(|leader| leader != old_leader)
                }),
                "round {round}: the log did not fail over from {old_leader} after {path} was deleted"
            );
            start_producer(&mut producer_ids);
            assert!(
                wait_for_more(&acknowledged, 50, Duration::from_secs(20)),
                "round {round}: traffic did not resume after the failover"
            );
            cluster.restart(old_leader).expect("restart");
            eprintln!(
                "round {round}: deleted {path}; controller epoch {before} -> {epoch}; \
                 {old_leader} crashed and restarted; {} acknowledged so far",
                acknowledged_count(&acknowledged)
            );
        }
        stop.store(true, Ordering::SeqCst);
    });

    let mut sorted = producer_ids.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        producer_ids.len(),
        "a producer id was handed out twice: {producer_ids:?}"
    );
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "controller epochs went back: {epochs:?}"
    );
    let final_epoch = controller_epoch().expect("a controller sits");
    assert!(final_epoch >= *epochs.last().expect("an epoch"));

    assert_converged(&cluster, LOG, Duration::from_secs(30));
    let leader = cluster.leader_log(LOG).expect("leader");
    let mut in_log: BTreeMap<String, usize> = BTreeMap::new();
    for value in committed_values(&leader) {
        *in_log.entry(value).or_default() += 1;
    }
    let twice: Vec<(&String, &usize)> = in_log.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "values in the log more than once: {twice:?}"
    );
    let acknowledged = acknowledged.into_inner().unwrap();
    let lost: Vec<&String> = acknowledged
        .values()
        .flatten()
        .filter(|value| !in_log.contains_key(*value))
        .collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged values missing, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    eprintln!(
        "producer ids {producer_ids:?}; controller epochs {epochs:?}; {} values acknowledged, {} in the log",
        acknowledged.values().map(Vec::len).sum::<usize>(),
        in_log.len()
    );
}
