//! The idempotent producer end to end on a 3-node cluster (SPEC 4, G4): a
//! retry after a lost acknowledgement and a leader crash is stored once and
//! gets the original offsets; out-of-order and fenced batches append
//! nothing; deduplication survives a restart of every node, clean or not.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::Clock;
use isrlog::{
    Acks, AppendOutcome, Error, IdempotentProducer, Isolation, LeaderRouter, LogId, NodeId, Offset,
    ProducerConfig, ProducerEpoch, ProducerId, RecordBatch, RecordBatchBuilder, ReplicatedLog,
    Result, Sequence,
};

const LOG: LogId = LogId(0);

fn cluster() -> Cluster {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    cluster
}

fn quick() -> ProducerConfig {
    ProducerConfig {
        retries_max: 1_000,
        delivery_timeout: Duration::from_secs(15),
        retry_backoff: Duration::from_millis(5),
    }
}

/// Every committed record value of the log, read from its leader.
fn committed_values(cluster: &Cluster) -> Vec<Vec<u8>> {
    let leader = cluster.leader_log(LOG).unwrap();
    let hw = leader.high_watermark();
    let mut values = Vec::new();
    let mut next = leader.log_start_offset();
    while next < hw {
        let batches = leader.read(next, 1 << 20, Isolation::Committed).unwrap();
        assert!(
            !batches.is_empty(),
            "nothing readable at {next} below HW {hw}"
        );
        for batch in batches {
            for record in batch.records() {
                let record = record.unwrap();
                if record.offset >= next {
                    values.push(record.value.to_vec());
                }
            }
            next = batch.next_offset();
        }
    }
    values
}

/// Appends for real on the leader, then crashes it and reports `Timeout`:
/// the acknowledgement of a committed batch is lost with its leader.
struct LoseFirstAckAndCrashLeader<'a> {
    cluster: &'a Cluster,
    lost: AtomicBool,
    crashed: std::sync::Mutex<Option<(NodeId, AppendOutcome)>>,
}

impl LeaderRouter for LoseFirstAckAndCrashLeader<'_> {
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        LeaderRouter::leader_log(self.cluster, log)
    }

    fn append(&self, log: LogId, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        let leader = self.leader_log(log)?;
        let outcome = leader.append(batch, acks)?;
        if self.lost.swap(true, Ordering::SeqCst) {
            return Ok(outcome);
        }
        *self.crashed.lock().unwrap() = Some((leader.node_id(), outcome));
        self.cluster.crash(leader.node_id());
        Err(Error::Timeout {
            waited: Duration::ZERO,
            waiting_for: "an acknowledgement the test dropped",
        })
    }
}

#[test]
fn retried_batch_after_lost_ack_and_leader_crash_is_stored_once() {
    let cluster = cluster();
    let router = LoseFirstAckAndCrashLeader {
        cluster: &cluster,
        lost: AtomicBool::new(false),
        crashed: std::sync::Mutex::new(None),
    };
    let producer = IdempotentProducer::init(&cluster.coordinator, &router, quick()).unwrap();
    let retried = producer.send_values(LOG, &[b"once-a", b"once-b"]).unwrap();
    let (old_leader, original) = router.crashed.lock().unwrap().unwrap();
    assert!(
        retried.duplicate,
        "the retry must be recognised: {retried:?}"
    );
    assert_eq!(
        (
            retried.base_offset,
            retried.last_offset,
            retried.leader_epoch
        ),
        (
            original.base_offset,
            original.last_offset,
            original.leader_epoch
        )
    );
    let new_leader = cluster.leader_of(LOG).unwrap();
    assert_ne!(new_leader, old_leader);
    assert_eq!(producer.next_sequence(LOG), Sequence(2));

    // The producer carries on in order on the new leader.
    let next = producer.send_values(LOG, &[b"after"]).unwrap();
    assert!(!next.duplicate);
    assert_eq!(next.base_offset, original.last_offset.next());

    // The old leader comes back as a follower; the log holds each record once.
    cluster.restart(old_leader).unwrap();
    assert_eq!(
        committed_values(&cluster),
        vec![b"once-a".to_vec(), b"once-b".to_vec(), b"after".to_vec()]
    );
    cluster.shutdown().unwrap();
}

/// A batch of one record timestamped now: like Kafka, producer state
/// expires by batch timestamps, and an old one would expire at once.
fn idempotent_batch(id: ProducerId, epoch: i16, sequence: i32, value: &[u8]) -> RecordBatch {
    let mut builder = RecordBatchBuilder::new(isrlog::SystemClock.wall_clock_ms());
    builder
        .producer(id, ProducerEpoch(epoch), Sequence(sequence))
        .push(value);
    builder.build().unwrap()
}

#[test]
fn out_of_order_and_fenced_batches_append_nothing() {
    let cluster = cluster();
    let id = cluster.coordinator_producer_id();
    let leader = cluster.leader_log(LOG).unwrap();
    leader
        .append(&idempotent_batch(id, 0, 0, b"s0"), Acks::All)
        .unwrap();
    let end = leader.log_end_offset();

    // A gap: sequence 2 after 0.
    match leader.append(&idempotent_batch(id, 0, 2, b"gap"), Acks::All) {
        Err(Error::OutOfOrderSequence {
            producer,
            expected,
            received,
            leader_epoch,
        }) => assert_eq!(
            (producer, expected, received, leader_epoch),
            (id, Sequence(1), Sequence(2), leader.leader_epoch())
        ),
        other => panic!("a gap gave {other:?}"),
    }
    assert_eq!(leader.log_end_offset(), end);

    // A new epoch must start at 0.
    assert!(matches!(
        leader.append(&idempotent_batch(id, 1, 5, b"bad"), Acks::All),
        Err(Error::OutOfOrderSequence {
            expected: Sequence(0),
            ..
        })
    ));
    assert_eq!(leader.log_end_offset(), end);
    let bumped = leader
        .append(&idempotent_batch(id, 1, 0, b"e1"), Acks::All)
        .unwrap();
    assert!(!bumped.duplicate);
    let end = leader.log_end_offset();

    // The old epoch is fenced, even for what was its next sequence.
    match leader.append(&idempotent_batch(id, 0, 1, b"zombie"), Acks::All) {
        Err(Error::ProducerFenced {
            current, received, ..
        }) => assert_eq!((current, received), (ProducerEpoch(1), ProducerEpoch(0))),
        other => panic!("an old epoch gave {other:?}"),
    }
    assert_eq!(leader.log_end_offset(), end);
    assert!(!Error::OutOfOrderSequence {
        producer: id,
        expected: Sequence(0),
        received: Sequence(1),
        leader_epoch: leader.leader_epoch(),
    }
    .is_retriable());

    // Through the producer: a fenced producer's send fails at once.
    let zombie = IdempotentProducer::with_identity(id, ProducerEpoch(0), &cluster, quick());
    assert!(matches!(
        zombie.send_values(LOG, &[b"zombie"]),
        Err(Error::ProducerFenced { .. })
    ));
    assert_eq!(leader.log_end_offset(), end);
    assert_eq!(
        committed_values(&cluster),
        vec![b"s0".to_vec(), b"e1".to_vec()]
    );
    cluster.shutdown().unwrap();
}

/// Appends `batch` with `acks=all` on the leader, retrying retriable errors
/// (the ISR is below its minimum until the followers catch up again).
fn append_retrying(cluster: &Cluster, batch: &RecordBatch) -> AppendOutcome {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match cluster
            .leader_log(LOG)
            .and_then(|l| l.append(batch, Acks::All))
        {
            Ok(outcome) => return outcome,
            Err(e) if e.is_retriable() && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("append failed: {e}"),
        }
    }
}

/// Appends three batches with one producer, stops every node (`clean`:
/// shutdown, else crash), restarts them all, and retries the last batch.
fn deduplication_survives_restart(clean: bool) {
    let cluster = cluster();
    let producer = IdempotentProducer::init(&cluster.coordinator, &cluster, quick()).unwrap();
    let id = producer.producer_id();
    for value in [b"r0", b"r1"] {
        producer.send_values(LOG, &[value]).unwrap();
    }
    let last = idempotent_batch(id, 0, 2, b"r2");
    let original = cluster
        .leader_log(LOG)
        .unwrap()
        .append(&last, Acks::All)
        .unwrap();
    // Every replica has it before the lights go out.
    assert!(cluster.wait_until(Duration::from_secs(5), |c| {
        c.node_ids().iter().all(|&n| {
            c.log(n, LOG)
                .is_ok_and(|l| l.high_watermark() > original.last_offset)
        })
    }));
    // The leader goes last, so the coordinator keeps it in the ISR.
    let leader = cluster.leader_of(LOG).unwrap();
    let mut order: Vec<NodeId> = cluster.node_ids();
    order.retain(|&n| n != leader);
    order.push(leader);
    for &node in &order {
        if clean {
            cluster.stop_node(node).unwrap();
        } else {
            cluster.crash(node);
        }
    }
    for &node in &order {
        cluster.restart(node).unwrap();
    }
    let retried = append_retrying(&cluster, &last);
    assert!(retried.duplicate, "clean={clean}: {retried:?}");
    assert_eq!(
        (retried.base_offset, retried.last_offset),
        (original.base_offset, original.last_offset)
    );
    // And the sequence goes on from where it was.
    let next = append_retrying(&cluster, &idempotent_batch(id, 0, 3, b"r3"));
    assert_eq!(next.base_offset, Offset(original.last_offset.0 + 1));
    assert_eq!(
        committed_values(&cluster),
        vec![
            b"r0".to_vec(),
            b"r1".to_vec(),
            b"r2".to_vec(),
            b"r3".to_vec()
        ],
        "clean={clean}"
    );
    cluster.shutdown().unwrap();
}

#[test]
fn deduplication_survives_restart_of_every_node() {
    deduplication_survives_restart(true);
    deduplication_survives_restart(false);
}

trait ProducerIds {
    fn coordinator_producer_id(&self) -> ProducerId;
}

impl ProducerIds for Cluster {
    fn coordinator_producer_id(&self) -> ProducerId {
        use isrlog::Coordinator;
        self.coordinator.allocate_producer_id().unwrap()
    }
}

/// Appends for real but loses every acknowledgement while `losing` is set.
struct LoseAcks<'a> {
    cluster: &'a Cluster,
    losing: AtomicBool,
}

impl LeaderRouter for LoseAcks<'_> {
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        LeaderRouter::leader_log(self.cluster, log)
    }

    fn append(&self, log: LogId, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        let outcome = self.leader_log(log)?.append(batch, acks)?;
        if self.losing.load(Ordering::SeqCst) {
            return Err(Error::Timeout {
                waited: Duration::ZERO,
                waiting_for: "an acknowledgement the test dropped",
            });
        }
        Ok(outcome)
    }
}

#[test]
fn batch_in_doubt_after_spent_retries_is_resent_before_the_next_and_stored_once() {
    let cluster = cluster();
    let router = LoseAcks {
        cluster: &cluster,
        losing: AtomicBool::new(true),
    };
    let config = ProducerConfig {
        retries_max: 2,
        ..quick()
    };
    let producer = IdempotentProducer::init(&cluster.coordinator, &router, config).unwrap();
    assert!(matches!(
        producer.send_values(LOG, &[b"doubt"]),
        Err(Error::Timeout { .. })
    ));
    assert!(producer.has_in_doubt(LOG));
    assert_eq!(producer.next_sequence(LOG), Sequence(0));
    router.losing.store(false, Ordering::SeqCst);
    let second = producer.send_values(LOG, &[b"second"]).unwrap();
    assert!(!producer.has_in_doubt(LOG));
    assert_eq!(second.base_offset, Offset(1));
    assert_eq!(producer.next_sequence(LOG), Sequence(2));
    assert_eq!(producer.resolve_in_doubt(LOG).unwrap(), None);
    assert_eq!(
        committed_values(&cluster),
        vec![b"doubt".to_vec(), b"second".to_vec()]
    );
    cluster.shutdown().unwrap();
}

/// On its first append: appends for real, crashes the leader so that the
/// coordinator only notices when its session expires, and reports `Timeout`
/// (the acknowledgement died with the leader). While `old_router_errors`
/// is set, later attempts fail as the `Cluster` router used to while the
/// coordinator still named the dead leader: with the non-retriable
/// `Shutdown`. Otherwise they go through the `Cluster` router.
struct CrashLeaderOnExpiryAfterFirstAppend<'a> {
    cluster: &'a Cluster,
    crashed: std::sync::Mutex<Option<(NodeId, AppendOutcome)>>,
    old_router_errors: AtomicBool,
}

impl LeaderRouter for CrashLeaderOnExpiryAfterFirstAppend<'_> {
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        LeaderRouter::leader_log(self.cluster, log)
    }

    fn append(&self, log: LogId, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        let mut crashed = self.crashed.lock().unwrap();
        if crashed.is_some() {
            drop(crashed);
            if self.old_router_errors.load(Ordering::SeqCst) {
                return Err(Error::Shutdown);
            }
            return LeaderRouter::append(self.cluster, log, batch, acks);
        }
        let leader = self.leader_log(log)?;
        let outcome = leader.append(batch, acks)?;
        *crashed = Some((leader.node_id(), outcome));
        self.cluster.crash_with(
            leader.node_id(),
            isrlog::testing::Lose::Nothing,
            isrlog::testing::SessionEnd::OnExpiry,
        );
        Err(Error::Timeout {
            waited: Duration::ZERO,
            waiting_for: "an acknowledgement lost with its leader",
        })
    }
}

fn cluster_with_quick_session_expiry() -> Cluster {
    let cluster = Cluster::builder()
        .nodes(3)
        .min_insync_replicas(2)
        .session_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    cluster
}

/// Bug: the producer released a batch's sequence on every non-retriable
/// error, even after an earlier attempt had ended with an unknown outcome
/// (`Timeout` after the append). The next batch reused the sequence, and
/// deduplication answered it with the first batch's offsets
/// (`duplicate: true`): an acknowledged send whose records were never
/// written. Fix: after any outcome-unknown error the batch is
/// `maybe_written`, and only errors proving the log does not hold it
/// (`ProducerFenced`, `OutOfOrderSequence`, `InvalidBatch`) release the
/// sequence; any other error leaves it in doubt, to be re-sent first.
#[test]
fn acknowledged_batch_lost_when_a_non_retriable_error_follows_an_unknown_outcome() {
    let cluster = cluster_with_quick_session_expiry();
    let router = CrashLeaderOnExpiryAfterFirstAppend {
        cluster: &cluster,
        crashed: std::sync::Mutex::new(None),
        old_router_errors: AtomicBool::new(true),
    };
    let producer = IdempotentProducer::init(&cluster.coordinator, &router, quick()).unwrap();
    assert!(matches!(
        producer.send_values(LOG, &[b"first"]),
        Err(Error::Shutdown)
    ));
    let (old_leader, original) = router.crashed.lock().unwrap().unwrap();
    assert_eq!(original.base_offset, Offset(0));
    assert!(
        producer.has_in_doubt(LOG),
        "a batch that may be in the log must stay in doubt"
    );
    assert_eq!(producer.next_sequence(LOG), Sequence(0));

    // Routing works again: "first" is re-sent (a duplicate, once the
    // session of the dead leader expired and another leads) before
    // "second", which gets offsets of its own.
    router.old_router_errors.store(false, Ordering::SeqCst);
    let second = producer.send_values(LOG, &[b"second"]).unwrap();
    assert!(!second.duplicate, "{second:?}");
    assert_eq!(second.base_offset, Offset(1));
    assert!(!producer.has_in_doubt(LOG));
    assert_eq!(producer.next_sequence(LOG), Sequence(2));
    assert_ne!(cluster.leader_of(LOG), Some(old_leader));
    assert_eq!(
        committed_values(&cluster),
        vec![b"first".to_vec(), b"second".to_vec()]
    );
    cluster.shutdown().unwrap();
}

/// The same probe through the `Cluster` router, which used to answer
/// `Shutdown` (non-retriable) while the coordinator still named the crashed
/// leader: now `LeaderNotAvailable`, so the producer retries until the
/// session expires and the new leader reports the batch as a duplicate.
#[test]
fn cluster_router_retries_while_the_coordinator_names_a_crashed_leader() {
    let cluster = cluster_with_quick_session_expiry();
    let router = CrashLeaderOnExpiryAfterFirstAppend {
        cluster: &cluster,
        crashed: std::sync::Mutex::new(None),
        old_router_errors: AtomicBool::new(false),
    };
    let producer = IdempotentProducer::init(&cluster.coordinator, &router, quick()).unwrap();
    let first = producer.send_values(LOG, &[b"first"]).unwrap();
    let (old_leader, original) = router.crashed.lock().unwrap().unwrap();
    assert!(first.duplicate, "{first:?}");
    assert_eq!(
        (first.base_offset, first.last_offset),
        (original.base_offset, original.last_offset)
    );
    let second = producer.send_values(LOG, &[b"second"]).unwrap();
    assert_eq!((second.base_offset, second.duplicate), (Offset(1), false));
    assert_ne!(cluster.leader_of(LOG), Some(old_leader));
    assert_eq!(
        committed_values(&cluster),
        vec![b"first".to_vec(), b"second".to_vec()]
    );
    cluster.shutdown().unwrap();
}
