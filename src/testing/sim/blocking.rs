//! The simulator's blocking clients: threads of a node's process that
//! call the blocking `acks=all` [`ReplicatedLog::append`], one record
//! (`b1`, `b2`, ...) at a time each, on whichever node leads.
//!
//! A blocking call would stop the run's one thread, so the run makes it in
//! two halves that are the call's own code: the write
//! ([`ReplicatedLog::begin_blocking_append`]), then after every step the
//! decision the call's wait takes after each of its slices
//! ([`ReplicatedLog::blocking_append_outcome`]), until it has one, or its
//! `request_timeout` passed on the run's clock. A client whose call is under
//! way sends nothing else, as its thread is inside the call. Each call is
//! made in the process of the node that leads when it begins (as an
//! application that embeds the library calls its own node): when that
//! process ends (a crash, a clean stop), the call ends with it, its outcome
//! unknown (SPEC 3.4).
//!
//! Whether a run has blocking clients, how many and when each calls are
//! drawn from a stream of their own ([`BlockingClients::new`]): a run
//! without them is the run it was before they existed.

use std::time::Duration;

use crate::replicated_log::BlockingAppend;
use crate::rng::SplitMix64;
use crate::{AppendOutcome, RecordBatchBuilder, ReplicatedLog, Result};

/// How often, on average, each blocking client calls once its last call
/// returned (its think time).
const CALL_INTERVAL_MEAN: Duration = Duration::from_millis(40);

/// The most blocking clients a run has.
const CLIENTS_MAX: u64 = 4;

/// A call under way.
struct Call {
    value: Vec<u8>,
    /// The node whose process makes the call (the leader when it began).
    node: usize,
    log: ReplicatedLog,
    append: BlockingAppend,
    /// When the call's `request_timeout` passes, on the run's clock.
    deadline: Duration,
}

/// What a call began as.
pub(super) enum Began {
    /// The record was written; its outcome comes later.
    Written,
    /// `append` returned this error before waiting (nothing written).
    Refused(crate::Error),
}

/// The run's blocking clients; see the module docs.
pub(super) struct BlockingClients {
    rng: SplitMix64,
    /// One slot per client: its call under way, if any.
    calls: Vec<Option<Call>>,
    /// Calls begun so far, for the records' names.
    begun: u64,
    /// Calls that returned an acknowledgement.
    acknowledged: u64,
}

impl BlockingClients {
    /// The clients of the run seeded `seed`: in half the runs none, in the
    /// others one to [`CLIENTS_MAX`]; none unless `enabled`.
    pub(super) fn new(seed: u64, enabled: bool) -> BlockingClients {
        let mut rng = SplitMix64::new(seed);
        let count = if !enabled || rng.next_u64().is_multiple_of(2) {
            0
        } else {
            1 + rng.next_u64() % CLIENTS_MAX
        };
        BlockingClients {
            rng,
            calls: (0..count).map(|_| None).collect(),
            begun: 0,
            acknowledged: 0,
        }
    }

    /// How many clients the run has.
    pub(super) fn count(&self) -> usize {
        self.calls.len()
    }

    /// How long client `client` thinks before its next call.
    pub(super) fn draw_interval(&mut self) -> Duration {
        let uniform = 1.0 - self.rng.next_f64();
        let micros = -uniform.ln() * CALL_INTERVAL_MEAN.as_micros() as f64;
        Duration::from_micros((micros as u64).max(1))
    }

    /// Whether client `client` is inside a call.
    pub(super) fn is_calling(&self, client: usize) -> bool {
        self.calls[client].is_some()
    }

    /// Whether any call is under way.
    pub(super) fn any_calling(&self) -> bool {
        self.calls.iter().any(Option::is_some)
    }

    /// Calls under way.
    pub(super) fn calling(&self) -> usize {
        self.calls.iter().filter(|call| call.is_some()).count()
    }

    /// Calls begun and acknowledged so far.
    pub(super) fn counts(&self) -> (u64, u64) {
        (self.begun, self.acknowledged)
    }

    /// Client `client`, not inside a call, calls `append` on `log` (node
    /// `node`'s) with a record of its own at `now`, `request_timeout`
    /// giving its deadline. Returns the record's value and how the call
    /// began.
    pub(super) fn call(
        &mut self,
        client: usize,
        node: usize,
        log: ReplicatedLog,
        now: Duration,
        request_timeout: Duration,
        wall_clock_ms: i64,
    ) -> (Vec<u8>, Began) {
        debug_assert!(
            self.calls[client].is_none(),
            "a client thread makes one call at a time"
        );
        self.begun += 1;
        let value = format!("b{}", self.begun).into_bytes();
        let mut builder = RecordBatchBuilder::new(wall_clock_ms);
        builder.push(&value);
        let begun = builder
            .build()
            .and_then(|batch| log.begin_blocking_append(&batch));
        match begun {
            Ok(append) => {
                self.calls[client] = Some(Call {
                    value: value.clone(),
                    node,
                    log,
                    append,
                    deadline: now + request_timeout,
                });
                (value, Began::Written)
            }
            Err(error) => (value, Began::Refused(error)),
        }
    }

    /// The calls whose outcome is known at `now`, with their clients and
    /// values, in client order; they return, and their clients may call
    /// again.
    pub(super) fn returned(
        &mut self,
        now: Duration,
    ) -> Vec<(usize, Vec<u8>, Result<AppendOutcome>)> {
        let mut returned = Vec::new();
        for (client, slot) in self.calls.iter_mut().enumerate() {
            let Some(call) = slot.as_ref() else {
                continue;
            };
            let Some(outcome) = call
                .log
                .blocking_append_outcome(&call.append, now >= call.deadline)
            else {
                continue;
            };
            self.acknowledged += u64::from(outcome.is_ok());
            if let Some(call) = slot.take() {
                returned.push((client, call.value, outcome));
            }
        }
        returned
    }

    /// Node `node`'s process ended: its clients' calls end with it, their
    /// outcome unknown. Returns the values of the calls that ended.
    pub(super) fn process_ended(&mut self, node: usize) -> Vec<Vec<u8>> {
        self.calls
            .iter_mut()
            .filter(|slot| slot.as_ref().is_some_and(|call| call.node == node))
            .filter_map(|slot| slot.take().map(|call| call.value))
            .collect()
    }
}
