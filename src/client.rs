//! [`LogClient`]: appends to whichever node leads a log, so the caller does
//! not write its own retry loop on `NotLeader`.
//!
//! The client asks its [`LeaderRouter`] for the leader's handle, appends,
//! and on an error that says "ask again" (`NotLeader`,
//! `LeaderNotAvailable`, `NotEnoughReplicas`, `CommittedEndNotYetKnown`,
//! an unreachable leader) backs off and retries until its delivery timeout,
//! as Kafka's producer does with `retry.backoff.ms` and
//! `delivery.timeout.ms`.
//!
//! Plain appends carry no identity, so a retry after an error whose outcome
//! is unknown (the leader changed while an `acks=all` append waited, a
//! timeout) may append the batch twice: at-least-once. For exactly-once
//! appends across retries and failover use [`IdempotentProducer`]
//! (SPEC 4), which follows the leader through the same router;
//! [`LogClient::idempotent`] makes one.

use std::time::Instant;

use crate::clock::{Clock, SystemClock};

use crate::append::{Acks, AppendOutcome};
use crate::coordinator::Coordinator;
use crate::error::{Error, Result};
use crate::producer::{IdempotentProducer, LeaderRouter, ProducerConfig};
use crate::record::{RecordBatch, RecordBatchBuilder};
use crate::types::LogId;

/// Appends to the current leader of one log, following leader changes.
///
/// It asks its [`LeaderRouter`] for the leader's handle, appends, and on an
/// error that says "ask again" (`NotLeader`, `LeaderNotAvailable`,
/// `NotEnoughReplicas`, `CommittedEndNotYetKnown`, an unreachable or
/// stopped leader) backs off and retries until the delivery timeout, as
/// Kafka's producer does (`retry.backoff.ms`, `delivery.timeout.ms`).
///
/// Plain appends carry no identity: a retry after an error whose outcome
/// is unknown (the leader changed while an `acks=all` append waited) may
/// append the batch twice, so this is at-least-once. For exactly-once
/// appends across retries and failover use [`IdempotentProducer`]
/// (SPEC 4); [`LogClient::idempotent`] makes one on the same router.
#[derive(Debug)]
pub struct LogClient<R> {
    router: R,
    log: LogId,
    config: ProducerConfig,
}

impl<R: LeaderRouter> LogClient<R> {
    /// A client for `log` through `router` (for example `&[Node]` of the
    /// nodes in this process), with [`ProducerConfig::default`]'s retry
    /// backoff and delivery timeout.
    pub fn new(router: R, log: LogId) -> LogClient<R> {
        LogClient {
            router,
            log,
            config: ProducerConfig::default(),
        }
    }

    /// The same client with `config`'s retry backoff, retry count and
    /// delivery timeout.
    pub fn with_config(mut self, config: ProducerConfig) -> LogClient<R> {
        self.config = config;
        self
    }

    /// The log this client appends to.
    pub fn log(&self) -> LogId {
        self.log
    }

    /// Appends `batch` on the log's current leader with `acks`, retrying
    /// on errors that mean the leader moved or is not ready, until the
    /// delivery timeout (then the last error, or `Timeout` if none was
    /// seen). Other errors are returned at once. See the type's docs for
    /// what a retry may duplicate.
    pub fn append(&self, batch: &RecordBatch, acks: Acks) -> Result<AppendOutcome> {
        let started = Instant::now();
        let deadline = started + self.config.delivery_timeout;
        let mut retries = 0u32;
        loop {
            let error = match self.router.append(self.log, batch, acks) {
                Ok(outcome) => return Ok(outcome),
                Err(error) if follows_leader(&error) => error,
                Err(error) => return Err(error),
            };
            let now = Instant::now();
            // Invariant: `deadline` is `started` plus the delivery timeout.
            debug_assert!(deadline >= started);
            if retries >= self.config.retries_max || now + self.config.retry_backoff >= deadline {
                tracing::debug!(log = %self.log, %error, retries, "append gave up");
                return Err(error);
            }
            retries += 1;
            crate::simulation::forbid_in_simulation("a client's retry back-off");
            std::thread::sleep(self.config.retry_backoff);
        }
    }

    /// Builds a batch of `values` (one record each, timestamped now) and
    /// appends it; see [`append`](Self::append).
    pub fn append_values<V: AsRef<[u8]>>(&self, values: &[V], acks: Acks) -> Result<AppendOutcome> {
        let bytes: usize = values.iter().map(|v| v.as_ref().len() + 32).sum();
        let mut builder = RecordBatchBuilder::with_capacity(SystemClock.wall_clock_ms(), bytes);
        for value in values {
            builder.push(value.as_ref());
        }
        self.append(&builder.build()?, acks)
    }

    /// An idempotent producer (a fresh producer id from `coordinator`) on
    /// this client's router and configuration: retries never duplicate.
    pub fn idempotent(self, coordinator: &dyn Coordinator) -> Result<IdempotentProducer<R>> {
        IdempotentProducer::init(coordinator, self.router, self.config)
    }
}

/// Whether `error` says "the leader moved or is not ready: ask the router
/// again" (a timeout, or an error after the batch may have been written,
/// is the caller's to judge).
fn follows_leader(error: &Error) -> bool {
    matches!(
        error,
        Error::NotLeader { .. }
            | Error::LeaderNotAvailable(_)
            | Error::NotEnoughReplicas { .. }
            | Error::CommittedEndNotYetKnown { .. }
            | Error::UnknownLog(_)
            | Error::Transport { .. }
            | Error::Shutdown
    )
}
