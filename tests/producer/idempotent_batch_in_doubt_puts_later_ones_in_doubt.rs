//! Issue 27: when the oldest batch in flight ends in doubt (its retry
//! budget spent with an unknown outcome), every later batch in flight goes
//! in doubt with it (their sequences follow its); the next send re-sends
//! them all in order first, and each is stored once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{
    Acks, AppendHandle, AppendOutcome, Error, IdempotentProducer, LeaderRouter, LogId,
    ProducerConfig, RecordBatch, ReplicatedLog, Result, Sequence,
};

use crate::support_idempotent::{cluster, committed_values, quick, LOG};

/// Appends for real, pipelined, but while `losing` is set reports the
/// call as timed out (the answer was lost: outcome unknown).
struct LoseAnswers<'a> {
    cluster: &'a Cluster,
    losing: AtomicBool,
    attempts: AtomicUsize,
}

impl LeaderRouter for LoseAnswers<'_> {
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        LeaderRouter::leader_log(self.cluster, log)
    }

    fn append_pipelined(
        &self,
        log: LogId,
        batch: &RecordBatch,
        acks: Acks,
    ) -> Result<AppendHandle> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        let handle = self.leader_log(log)?.append_pipelined(batch, acks)?;
        if self.losing.load(Ordering::SeqCst) {
            drop(handle);
            return Err(Error::Timeout {
                waited: Duration::ZERO,
                waiting_for: "an answer the test dropped",
            });
        }
        Ok(handle)
    }
}

#[test]
fn a_batch_in_doubt_puts_the_later_ones_in_doubt_and_they_are_resent_in_order() {
    let cluster = cluster();
    let router = LoseAnswers {
        cluster: &cluster,
        losing: AtomicBool::new(true),
        attempts: AtomicUsize::new(0),
    };
    let config = ProducerConfig {
        retries_max: 2,
        ..quick()
    };
    let producer = IdempotentProducer::init(&cluster.coordinator, &router, config).unwrap();
    let sends: Vec<_> = (0..4)
        .map(|i| {
            producer
                .send_values_pipelined(LOG, &[format!("v{i}")])
                .unwrap()
        })
        .collect();
    for send in sends {
        assert!(matches!(send.wait(), Err(Error::Timeout { .. })));
    }
    assert!(producer.has_in_doubt(LOG));
    assert_eq!(producer.batches_unresolved(LOG), 4);
    assert_eq!(producer.next_sequence(LOG), Sequence(0));

    router.losing.store(false, Ordering::SeqCst);
    let before = router.attempts.load(Ordering::SeqCst);
    let next: AppendOutcome = producer
        .send_values_pipelined(LOG, &[b"v4"])
        .unwrap()
        .wait()
        .unwrap();
    assert_eq!(
        router.attempts.load(Ordering::SeqCst) - before,
        5,
        "the 4 batches in doubt are re-sent once each, then the new one"
    );
    assert!(!next.duplicate);
    assert_eq!(next.base_offset.0, 4);
    assert!(!producer.has_in_doubt(LOG));
    assert_eq!(producer.next_sequence(LOG), Sequence(5));
    let expected: Vec<Vec<u8>> = (0..5).map(|i| format!("v{i}").into_bytes()).collect();
    assert_eq!(committed_values(&cluster, 5), expected);
    cluster.shutdown().unwrap();
}
