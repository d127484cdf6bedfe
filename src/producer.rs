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
    /// producer's backoff does that). A leader the coordinator still names
    /// after its node crashed (until the session expires) is
    /// `LeaderNotAvailable`, retriable, as a Kafka client sees a leader it
    /// cannot reach until its metadata names another.
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        harness_leader_log(log, self.leader_of(log), |node| self.log(node, log))
    }

    /// Appends on the leader. If its node crashes during the call, the
    /// handle fails (`Shutdown`, `Poisoned`); over a network the client
    /// would see its connection drop instead, so that is what is returned:
    /// a retriable `Transport` error with an unknown outcome.
    fn append(&self, log: LogId, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        let handle = LeaderRouter::leader_log(self, log)?;
        harness_append(&handle, batch, acks, |node| self.is_running(node))
    }
}

/// How the in-process test clusters route to a leader (shared by
/// `testing::Cluster` and, with the `zookeeper` feature, `ZkCluster`):
/// the handle of the node the coordinator names, once that replica knows
/// it leads; a node that is gone is `LeaderNotAvailable` (retriable).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn harness_leader_log(
    log: LogId,
    leader: Option<crate::types::NodeId>,
    handle_of: impl FnOnce(crate::types::NodeId) -> Result<ReplicatedLog>,
) -> Result<ReplicatedLog> {
    let leader = leader.ok_or(Error::LeaderNotAvailable(log))?;
    let handle = match handle_of(leader) {
        Ok(handle) => handle,
        Err(Error::Shutdown) => return Err(Error::LeaderNotAvailable(log)),
        Err(error) => return Err(error),
    };
    if !handle.is_leader() {
        return Err(Error::LeaderNotAvailable(log));
    }
    Ok(handle)
}

/// Appends through a test cluster's leader `handle`. If its node crashes
/// during the call, the handle fails (`Shutdown`, `Poisoned`); over a
/// network the client would see its connection drop instead, so that is
/// what is returned: a retriable `Transport` error with an unknown outcome.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn harness_append(
    handle: &ReplicatedLog,
    batch: &RecordBatch,
    acks: Acks,
    is_running: impl Fn(crate::types::NodeId) -> bool,
) -> Result<AppendOutcome> {
    let leader = handle.node_id();
    match handle.append(batch, acks) {
        Err(error @ (Error::Shutdown | Error::Poisoned { .. })) if !is_running(leader) => {
            Err(Error::Transport {
                to: leader,
                reason: format!("leader crashed during the append: {error}"),
            })
        }
        result => result,
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
        self.send_locked(log, &mut sequence, batch, false)
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
            // A batch in doubt may be in the log: re-sending it starts with
            // `maybe_written` set.
            Some(batch) => self.send_locked(log, sequence, batch, true).map(Some),
            None => Ok(None),
        }
    }

    /// Sends `batch` (already stamped with `sequence.next`) until it lands,
    /// fails for good, or the budget runs out.
    ///
    /// `maybe_written` is what keeps an acknowledged batch from being
    /// dropped: once any attempt ended with an unknown outcome (a timeout, a
    /// leader lost mid-append, ...), or the batch was already in doubt, the
    /// batch may be in the log, so its sequence may only be released by an
    /// error that proves the log does not hold it (see
    /// [`proves_not_in_log`]). Releasing it on any other error would let the
    /// next batch reuse the sequence, and deduplication would answer that
    /// batch with the old one's offsets (`duplicate: true`) while dropping
    /// its records.
    fn send_locked(
        &self,
        log: LogId,
        sequence: &mut LogSequence,
        batch: RecordBatch,
        mut maybe_written: bool,
    ) -> Result<AppendOutcome> {
        debug_assert_eq!(batch.header().base_sequence, sequence.next);
        let deadline = Instant::now() + self.config.delivery_timeout;
        let mut retries = 0u32;
        loop {
            let error = match self.router.append(log, &batch, Acks::All) {
                Ok(outcome) => {
                    sequence.next = next_after(batch.header().last_sequence());
                    if outcome.duplicate {
                        tracing::debug!(%log, producer = %self.producer_id, base_offset = %outcome.base_offset, "retry was a duplicate: original offsets returned");
                    }
                    return Ok(outcome);
                }
                Err(error) => error,
            };
            if !attempt_appended_nothing(&error) {
                maybe_written = true;
            }
            if !error.is_retriable() {
                if maybe_written && !proves_not_in_log(&error) {
                    tracing::warn!(%log, producer = %self.producer_id, %error, "failed after an attempt with unknown outcome: batch in doubt");
                    sequence.in_doubt = Some(batch);
                } else {
                    tracing::debug!(%log, producer = %self.producer_id, %error, "batch not written: sequence released");
                }
                return Err(error);
            }
            let now = Instant::now();
            if retries >= self.config.retries_max || now + self.config.retry_backoff >= deadline {
                tracing::warn!(%log, producer = %self.producer_id, %error, retries, "retry budget spent: batch in doubt");
                sequence.in_doubt = Some(batch);
                return Err(error);
            }
            retries += 1;
            tracing::debug!(%log, producer = %self.producer_id, %error, retries, "retrying batch");
            std::thread::sleep(self.config.retry_backoff);
        }
    }
}

/// Whether `error` proves that the attempt which returned it appended
/// nothing: the leader refused the batch before writing it, or there was
/// no leader to send it to. Anything else (a timeout, a transport failure,
/// a leader that crashed or was poisoned mid-call, `Shutdown` of a handle)
/// may come after the append, so the outcome is unknown.
fn attempt_appended_nothing(error: &Error) -> bool {
    matches!(
        error,
        Error::NotLeader { .. }
            | Error::NotEnoughReplicas { .. }
            | Error::LeaderNotAvailable(_)
            | Error::FencedLeaderEpoch { .. }
            | Error::UnknownLeaderEpoch { .. }
            | Error::UnknownLog(_)
            | Error::InvalidBatch { .. }
            | Error::OutOfOrderSequence { .. }
            | Error::ProducerFenced { .. }
    )
}

/// Whether `error` proves that the log does not hold the batch at all, not
/// just that this attempt added nothing: the leader checked the batch's
/// sequence against what it holds (`OutOfOrderSequence`: with one batch in
/// flight, a batch the log held would have been answered as a duplicate),
/// or the batch can never be written (`InvalidBatch`, too large). Only
/// these release a sequence that may be in the log. `ProducerFenced` is
/// here too, but it proves only that this producer is finished (fencing is
/// decided by producer epoch, whether or not the batch in doubt landed):
/// a fenced caller must treat that batch's outcome as unknown.
///
/// `NotEnoughReplicas` is deliberately not here: the leader checks the ISR
/// size before the duplicate check (as Kafka's `Partition` checks
/// `min.insync.replicas` before `UnifiedLog` deduplicates), so it says
/// nothing about an earlier attempt. It is retriable anyway.
fn proves_not_in_log(error: &Error) -> bool {
    matches!(
        error,
        Error::ProducerFenced { .. }
            | Error::OutOfOrderSequence { .. }
            | Error::InvalidBatch { .. }
    )
}

fn next_after(last: Sequence) -> Sequence {
    if last.0 == i32::MAX {
        Sequence(0)
    } else {
        Sequence(last.0 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{LeaderEpoch, NodeId};

    /// Which errors release a sequence that may be in the log, and which
    /// mark an attempt's outcome unknown.
    #[test]
    fn error_classification() {
        let producer = ProducerId(7);
        let cases: Vec<(Error, bool, bool)> = vec![
            // (error, attempt_appended_nothing, proves_not_in_log)
            (
                Error::Timeout {
                    waited: Duration::ZERO,
                    waiting_for: "test",
                },
                false,
                false,
            ),
            (Error::Shutdown, false, false),
            (
                Error::Transport {
                    to: NodeId(1),
                    reason: "test".into(),
                },
                false,
                false,
            ),
            (
                Error::NotEnoughReplicasAfterAppend {
                    in_sync: 1,
                    min_insync_replicas: 2,
                },
                false,
                false,
            ),
            (
                Error::NotEnoughReplicas {
                    in_sync: 1,
                    min_insync_replicas: 2,
                },
                true,
                false,
            ),
            (
                Error::NotLeader {
                    log: LogId(0),
                    epoch: LeaderEpoch(1),
                    leader: None,
                },
                true,
                false,
            ),
            (Error::LeaderNotAvailable(LogId(0)), true, false),
            (
                Error::OutOfOrderSequence {
                    producer,
                    expected: Sequence(1),
                    received: Sequence(3),
                },
                true,
                true,
            ),
            (
                Error::ProducerFenced {
                    producer,
                    current: ProducerEpoch(2),
                    received: ProducerEpoch(1),
                },
                true,
                true,
            ),
            (
                Error::InvalidBatch {
                    reason: "test".into(),
                },
                true,
                true,
            ),
        ];
        for (error, appended_nothing, not_in_log) in cases {
            assert_eq!(
                (attempt_appended_nothing(&error), proves_not_in_log(&error)),
                (appended_nothing, not_in_log),
                "{error:?}"
            );
        }
    }
}
