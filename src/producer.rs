//! [`IdempotentProducer`]: appends batches with `acks=all` so that retries
//! never duplicate (SPEC 4). It owns a `(producer_id, producer_epoch)`, the
//! next sequence per log, and the retry loop; it does not own deduplication
//! (each replica's log does, under the lock that assigns offsets) nor where
//! the leader is (a [`LeaderRouter`] answers that).
//!
//! One batch is in flight per producer and log: a send holds that log's
//! sequence until it returns, so sequences reach the leader in order.
//! (Kafka allows 5 in flight with ordering kept by the broker; one keeps
//! this simple and is what a write-ahead log appending synchronously needs.)
//!
//! A send that runs out of retries with an unknown outcome (`Timeout`, a
//! leader change after the append) leaves its batch *in doubt*: the batch may
//! be in the log or not. The producer keeps it, and the next send to that
//! log first re-sends it (same sequence, so it is stored at most once) —
//! so do not re-send the same values yourself; call
//! [`IdempotentProducer::resolve_in_doubt`] to learn where it landed.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::clock::{Clock, SystemClock};
use crate::coordinator::Coordinator;
use crate::error::{Error, Result};
use crate::record::{RecordBatch, RecordBatchBuilder};
use crate::replicated_log::{Acks, AppendOutcome, ReplicatedLog};
use crate::sync::{Arc, Mutex};
use crate::types::{LogId, ProducerEpoch, ProducerId, Sequence};

/// Finds the replica that leads a log now. Implemented for the test
/// `Cluster` and for a slice of [`Node`](crate::Node)s; an application
/// routing over a network implements it over its own clients.
pub trait LeaderRouter: Send + Sync {
    /// The handle of `log` on its current leader. A retriable error
    /// (`LeaderNotAvailable`, `NotLeader`, ...) makes the producer back off
    /// and ask again.
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog>;

    /// Appends `batch` on the current leader. The default asks
    /// [`leader_log`](Self::leader_log) and appends there; override it to
    /// route over a network (or, in tests, to lose acknowledgements).
    fn append(&self, log: LogId, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        self.leader_log(log)?.append(batch, acks)
    }
}

impl<R: LeaderRouter + ?Sized> LeaderRouter for &R {
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        (**self).leader_log(log)
    }

    fn append(&self, log: LogId, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        (**self).append(log, batch, acks)
    }
}

impl<R: LeaderRouter + ?Sized> LeaderRouter for Arc<R> {
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        (**self).leader_log(log)
    }

    fn append(&self, log: LogId, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        (**self).append(log, batch, acks)
    }
}

impl LeaderRouter for [crate::node::Node] {
    /// The node whose replica of `log` leads in the newest leader epoch.
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        self.iter()
            .filter_map(|node| node.log(log).ok())
            .filter(ReplicatedLog::is_leader)
            .max_by_key(ReplicatedLog::leader_epoch)
            .ok_or(Error::LeaderNotAvailable(log))
    }
}

#[cfg(any(test, feature = "testing"))]
impl LeaderRouter for crate::testing::Cluster {
    /// The coordinator's leader, once it knows it leads; no waiting (the
    /// producer's backoff does that).
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        let leader = self.leader_of(log).ok_or(Error::LeaderNotAvailable(log))?;
        let handle = self.log(leader, log)?;
        if !handle.is_leader() {
            return Err(Error::LeaderNotAvailable(log));
        }
        Ok(handle)
    }
}

/// How an [`IdempotentProducer`] retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerConfig {
    /// Retries of one batch after its first attempt. Default `u32::MAX`:
    /// like Kafka (`retries` = `Integer.MAX_VALUE`), `delivery_timeout` is
    /// the real bound.
    pub retries_max: u32,
    /// Total time one send may take, retries included. Default 120 s
    /// (Kafka's `delivery.timeout.ms`).
    pub delivery_timeout: Duration,
    /// Pause before each retry. Default 100 ms (Kafka's `retry.backoff.ms`).
    pub retry_backoff: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            retries_max: u32::MAX,
            delivery_timeout: Duration::from_secs(120),
            retry_backoff: Duration::from_millis(100),
        }
    }
}

/// Per log: the next sequence and the batch in doubt, if any.
#[derive(Debug)]
struct LogSequence {
    next: Sequence,
    in_doubt: Option<RecordBatch>,
}

/// A producer whose retries never duplicate a batch (SPEC 4). Callable from
/// many threads; sends to one log are serialised.
#[derive(Debug)]
pub struct IdempotentProducer<R> {
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
    router: R,
    config: ProducerConfig,
    clock: Arc<dyn Clock>,
    logs: Mutex<HashMap<LogId, Arc<Mutex<LogSequence>>>>,
}

impl<R: LeaderRouter> IdempotentProducer<R> {
    /// A producer with a fresh id from `coordinator` (unique across the
    /// cluster) and epoch 0 (Kafka's `InitProducerId` without a
    /// transactional id).
    pub fn init(
        coordinator: &dyn Coordinator,
        router: R,
        config: ProducerConfig,
    ) -> Result<IdempotentProducer<R>> {
        let id = coordinator.allocate_producer_id()?;
        Ok(IdempotentProducer::with_identity(
            id,
            ProducerEpoch(0),
            router,
            config,
        ))
    }

    /// A producer with a given identity, sequences starting at 0 on every
    /// log. A newer epoch of an id fences the older ones.
    pub fn with_identity(
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        router: R,
        config: ProducerConfig,
    ) -> IdempotentProducer<R> {
        IdempotentProducer {
            producer_id,
            producer_epoch,
            router,
            config,
            clock: Arc::new(SystemClock),
            logs: Mutex::new(HashMap::new()),
        }
    }

    /// Timestamps batches built by [`send_values`](Self::send_values) with
    /// `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// This producer's id.
    pub fn producer_id(&self) -> ProducerId {
        self.producer_id
    }

    /// This producer's epoch.
    pub fn producer_epoch(&self) -> ProducerEpoch {
        self.producer_epoch
    }

    /// The router.
    pub fn router(&self) -> &R {
        &self.router
    }

    /// The sequence the next new batch to `log` will carry.
    pub fn next_sequence(&self, log: LogId) -> Sequence {
        self.log_sequence(log).lock().next
    }

    /// Whether a batch to `log` is in doubt (see the module docs).
    pub fn has_in_doubt(&self, log: LogId) -> bool {
        self.log_sequence(log).lock().in_doubt.is_some()
    }

    /// Builds a batch of `values` (one record each, timestamped by the
    /// producer's clock) and sends it; see [`send`](Self::send).
    pub fn send_values<V: AsRef<[u8]>>(&self, log: LogId, values: &[V]) -> Result<AppendOutcome> {
        let bytes: usize = values.iter().map(|v| v.as_ref().len() + 32).sum();
        let mut builder = RecordBatchBuilder::with_capacity(self.clock.wall_clock_ms(), bytes);
        for value in values {
            builder.push(value.as_ref());
        }
        self.send(log, builder)
    }

    /// Stamps the batch with this producer's id, epoch and the log's next
    /// sequence, and appends it with `acks=all`, retrying retriable errors
    /// against whichever node leads until the retry budget is spent. A
    /// retry of a batch the log already holds returns the original offsets
    /// (`duplicate: true`). A batch in doubt on this log is re-sent first;
    /// if that fails, its error is returned and `builder` is not sent.
    pub fn send(&self, log: LogId, mut builder: RecordBatchBuilder) -> Result<AppendOutcome> {
        let sequence = self.log_sequence(log);
        // Bounded: another send to this log holds it for at most its own
        // delivery timeout (plus one attempt).
        let mut sequence = sequence.lock();
        self.resolve_locked(log, &mut sequence)?;
        builder.producer(self.producer_id, self.producer_epoch, sequence.next);
        let batch = builder.build()?;
        self.send_locked(log, &mut sequence, batch)
    }

    /// Re-sends the batch in doubt on `log`, if any, and returns where it
    /// landed (`None` when nothing was in doubt).
    pub fn resolve_in_doubt(&self, log: LogId) -> Result<Option<AppendOutcome>> {
        let sequence = self.log_sequence(log);
        // Bounded: another send to this log holds it for at most its own
        // delivery timeout (plus one attempt).
        let mut sequence = sequence.lock();
        self.resolve_locked(log, &mut sequence)
    }

    fn log_sequence(&self, log: LogId) -> Arc<Mutex<LogSequence>> {
        Arc::clone(self.logs.lock().entry(log).or_insert_with(|| {
            Arc::new(Mutex::new(LogSequence {
                next: Sequence(0),
                in_doubt: None,
            }))
        }))
    }

    fn resolve_locked(
        &self,
        log: LogId,
        sequence: &mut LogSequence,
    ) -> Result<Option<AppendOutcome>> {
        match sequence.in_doubt.take() {
            Some(batch) => self.send_locked(log, sequence, batch).map(Some),
            None => Ok(None),
        }
    }

    /// Sends `batch` (already stamped with `sequence.next`) until it lands,
    /// fails for good, or the budget runs out.
    fn send_locked(
        &self,
        log: LogId,
        sequence: &mut LogSequence,
        batch: RecordBatch,
    ) -> Result<AppendOutcome> {
        debug_assert_eq!(batch.header().base_sequence, sequence.next);
        let deadline = Instant::now() + self.config.delivery_timeout;
        let mut retries = 0u32;
        loop {
            match self.router.append(log, &batch, Acks::All) {
                Ok(outcome) => {
                    sequence.next = next_after(batch.header().last_sequence());
                    if outcome.duplicate {
                        tracing::debug!(%log, producer = %self.producer_id, base_offset = %outcome.base_offset, "retry was a duplicate: original offsets returned");
                    }
                    return Ok(outcome);
                }
                Err(error) if error.is_retriable() => {
                    let now = Instant::now();
                    if retries >= self.config.retries_max
                        || now + self.config.retry_backoff >= deadline
                    {
                        tracing::warn!(%log, producer = %self.producer_id, %error, retries, "retry budget spent: batch in doubt");
                        sequence.in_doubt = Some(batch);
                        return Err(error);
                    }
                    retries += 1;
                    tracing::debug!(%log, producer = %self.producer_id, %error, retries, "retrying batch");
                    std::thread::sleep(self.config.retry_backoff);
                }
                // Not written (OutOfOrderSequence, ProducerFenced, an
                // invalid batch): the sequence stays free for the next one.
                Err(error) => return Err(error),
            }
        }
    }
}

fn next_after(last: Sequence) -> Sequence {
    if last.0 == i32::MAX {
        Sequence(0)
    } else {
        Sequence(last.0 + 1)
    }
}
