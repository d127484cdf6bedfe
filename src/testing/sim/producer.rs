//! The simulator's idempotent client: one real
//! [`IdempotentProducer`] sending batches of one record (`p1`, `p2`, ...)
//! to whichever node leads, stepped from the run's thread: pipelined
//! ([`IdempotentProducer::send_pipelined`]) and, in half the runs that
//! draw them (a stream of their own: a run without them is the run it
//! was), some with the blocking [`IdempotentProducer::send`].
//!
//! The producer is the library's own, with its retry rules (SPEC 4): the
//! run only decides when it sends and when its pipeline is driven (after
//! every step, and when a retry round falls due), and never waits on it:
//! a send is made only when it would not wait (nothing in doubt, room
//! among the [`IN_FLIGHT_MAX`](crate::IN_FLIGHT_MAX) batches in flight),
//! and batches in doubt are re-sent at once, pipelined, as the next
//! pipelined send would. A blocking send's attempts are blocking calls
//! ([`LeaderRouter::append`]), which [`SimRouter`] makes in two halves, as
//! the blocking clients do (see [`super::blocking`]): the write when the
//! attempt is made, the outcome after a later step, when the call would
//! return (at the latest at its `request_timeout` on the run's clock).
//! Until the send returns, the client sends nothing else (its thread is
//! inside it) and the pipeline stands still (the call holds its lock).

use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::producer::{CallAnswer, DeferredCalls, DetachedSend};
use crate::replicated_log::BlockingAppend;
use crate::rng::SplitMix64;
use crate::sync::{Arc, Mutex};
use crate::{
    Acks, AppendHandle, AppendOutcome, Error, IdempotentProducer, LeaderRouter, LogId, ManualClock,
    ProducerConfig, ProducerEpoch, ProducerId, RecordBatch, ReplicatedLog, Result,
};

/// Routes the producer to the replica the run last found leading, if any,
/// and makes its blocking calls (see the module docs).
#[derive(Debug)]
pub(super) struct SimRouter {
    leader: Mutex<Option<ReplicatedLog>>,
    /// The blocking calls under way.
    calls: Mutex<Vec<Call>>,
    clock: ManualClock,
    /// The nodes' `request_timeout`: a blocking call's wait ends then.
    request_timeout: Duration,
}

/// A blocking call under way: the leader's log it was made on, the write,
/// when its wait ends and where its outcome goes.
#[derive(Debug)]
struct Call {
    log: ReplicatedLog,
    append: BlockingAppend,
    deadline: Instant,
    answer: CallAnswer,
}

impl SimRouter {
    /// Gives each blocking call whose outcome is known now that outcome
    /// (what `append` returns once its wait decides, see
    /// [`ReplicatedLog::blocking_append_outcome`]).
    fn return_calls(&self) {
        let now = self.clock.now();
        let mut calls = self.calls.lock();
        let mut index = 0;
        while index < calls.len() {
            let call = &calls[index];
            match call
                .log
                .blocking_append_outcome(&call.append, now >= call.deadline)
            {
                Some(outcome) => calls.remove(index).answer.answer(outcome),
                None => index += 1,
            }
        }
    }
}

impl DeferredCalls for SimRouter {
    /// `append` on the replica that leads (as [`LeaderRouter::append`]
    /// would call it), up to its wait.
    fn begin_append(&self, log: LogId, batch: &RecordBatch, answer: CallAnswer) -> Result<()> {
        let leader = self.leader_log(log)?;
        let append = leader.begin_blocking_append(batch)?;
        self.calls.lock().push(Call {
            log: leader,
            append,
            deadline: self.clock.now() + self.request_timeout,
            answer,
        });
        Ok(())
    }
}

impl LeaderRouter for SimRouter {
    fn leader_log(&self, log: LogId) -> Result<ReplicatedLog> {
        self.leader
            .lock()
            .clone()
            .ok_or(Error::LeaderNotAvailable(log))
    }

    /// A blocking append would wait on the run's own thread: the producer
    /// makes its blocking calls through [`DeferredCalls`] instead, and
    /// never calls this.
    fn append(&self, log: LogId, _batch: &RecordBatch, _acks: Acks) -> Result<AppendOutcome> {
        Err(Error::LeaderNotAvailable(log))
    }

    fn append_pipelined(
        &self,
        log: LogId,
        batch: &RecordBatch,
        acks: Acks,
    ) -> Result<AppendHandle> {
        self.leader_log(log)?.append_pipelined(batch, acks)
    }
}

/// A send whose outcome the client does not know yet, with its value.
struct Pending {
    value: Vec<u8>,
    send: DetachedSend,
    /// A blocking send: the client is inside it until it has its outcome.
    blocking: bool,
}

/// What [`ProducerClient::send`] did.
pub(super) enum Sent {
    /// Sent pipelined, this value.
    Pipelined(Vec<u8>),
    /// Sent with the blocking `send`, this value: the client is inside the
    /// send until it returns.
    Blocking(Vec<u8>),
    /// Nothing: the send would wait (or its batch could not be stamped).
    WouldWait,
    /// Nothing: the client is inside a blocking send.
    InsideSend,
}

/// The run's idempotent client; see the module docs.
pub(super) struct ProducerClient {
    producer: IdempotentProducer<Arc<SimRouter>>,
    router: Arc<SimRouter>,
    log: LogId,
    pending: Vec<Pending>,
    /// Draws which sends are blocking ones (one in two); `None`: none is.
    blocking: Option<SplitMix64>,
    sent: u64,
    resent: u64,
    /// Sends made with the blocking `send`.
    sent_blocking: u64,
}

impl ProducerClient {
    /// A producer with a fixed identity (one per run) on `clock`; its
    /// blocking calls wait up to `request_timeout`. In half the runs whose
    /// `blocking_seed` is drawn from (`Some`), one send in two is a
    /// blocking one, drawn from that seed's stream.
    pub(super) fn new(
        log: LogId,
        clock: ManualClock,
        config: ProducerConfig,
        request_timeout: Duration,
        blocking_seed: Option<u64>,
    ) -> ProducerClient {
        let router = Arc::new(SimRouter {
            leader: Mutex::new(None),
            calls: Mutex::new(Vec::new()),
            clock: clock.clone(),
            request_timeout,
        });
        let producer = IdempotentProducer::with_identity(
            ProducerId(1),
            ProducerEpoch(0),
            Arc::clone(&router),
            config,
        )
        .with_clock(Arc::new(clock))
        .with_deferred_calls(Arc::clone(&router) as Arc<dyn DeferredCalls>);
        let blocking = blocking_seed
            .map(SplitMix64::new)
            .and_then(|mut rng| rng.next_u64().is_multiple_of(2).then_some(rng));
        ProducerClient {
            producer,
            router,
            log,
            pending: Vec::new(),
            blocking,
            sent: 0,
            resent: 0,
            sent_blocking: 0,
        }
    }

    /// Whether the client is inside a blocking send.
    fn is_inside_send(&self) -> bool {
        self.pending
            .iter()
            .any(|pending| pending.blocking && pending.send.outcome().is_none())
    }

    /// Where the producer's next attempts go.
    pub(super) fn route_to(&self, leader: Option<ReplicatedLog>) {
        *self.router.leader.lock() = leader;
    }

    /// Sends the next value, pipelined or blocking as drawn, unless the
    /// client is inside a blocking send or the send would wait (then
    /// nothing is sent, as a client that does not block would skip it).
    pub(super) fn send(&mut self) -> Sent {
        self.drive();
        if self.is_inside_send() {
            return Sent::InsideSend;
        }
        self.resend_in_doubt();
        if !self.producer.can_send_without_waiting(self.log) {
            return Sent::WouldWait;
        }
        let blocking = self
            .blocking
            .as_mut()
            .is_some_and(|rng| rng.next_u64().is_multiple_of(2));
        self.sent += 1;
        let value = format!("p{}", self.sent).into_bytes();
        let send = if blocking {
            self.producer
                .send_values_blocking_without_waiting(self.log, &[value.as_slice()])
        } else {
            self.producer
                .send_values_pipelined(self.log, &[value.as_slice()])
                .map(|send| send.detach())
        };
        match send {
            Ok(send) => {
                self.pending.push(Pending {
                    value: value.clone(),
                    send,
                    blocking,
                });
                if blocking {
                    self.sent_blocking += 1;
                    Sent::Blocking(value)
                } else {
                    Sent::Pipelined(value)
                }
            }
            // Stamping the batch failed: nothing was sent.
            Err(_) => Sent::WouldWait,
        }
    }

    /// Re-sends the batches in doubt, if any, keeping their values (each
    /// batch holds one record). Called right after a
    /// [`drive`](Self::drive), as the simulator does every step.
    pub(super) fn resend_in_doubt(&mut self) -> usize {
        // With nothing in doubt the producer would take nothing back and
        // drive the pipeline again, which changes nothing right after a
        // drive: a drive ends only with a pass that changed nothing, and
        // nothing ran since. Skipping that pass saved 4% of a `cargo test`
        // simulator run.
        if !self.producer.has_in_doubt(self.log) {
            return 0;
        }
        let resent = self.producer.resend_in_doubt_without_waiting(self.log);
        let count = resent.len();
        for (send, batch) in resent {
            let value = batch
                .records()
                .next()
                .and_then(|record| record.ok())
                .map(|record| record.value.to_vec())
                .unwrap_or_default();
            self.pending.push(Pending {
                value,
                send,
                blocking: false,
            });
        }
        self.resent += count as u64;
        count
    }

    /// Returns the blocking calls whose outcome is known now, then drives
    /// the pipeline (answers in, retries out) and returns when the next
    /// retry round falls due, if one waits.
    pub(super) fn drive(&self) -> Option<Instant> {
        self.router.return_calls();
        self.producer.drive_without_waiting(self.log)
    }

    /// The outcomes known now, each with its value, in the order sent.
    pub(super) fn take_outcomes(&mut self) -> Vec<(Vec<u8>, Result<AppendOutcome>)> {
        let mut done = Vec::new();
        self.pending.retain(|pending| match pending.send.outcome() {
            Some(outcome) => {
                done.push((pending.value.clone(), outcome));
                false
            }
            None => true,
        });
        done
    }

    /// Nothing unresolved: every send answered, nothing in flight or in
    /// doubt.
    pub(super) fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.producer.batches_unresolved(self.log) == 0
    }

    /// Values sent, and batches re-sent after they went in doubt.
    pub(super) fn counts(&self) -> (u64, u64) {
        (self.sent, self.resent)
    }

    /// Values sent with the blocking `send`.
    pub(super) fn sent_blocking(&self) -> u64 {
        self.sent_blocking
    }
}
