//! A leader's answer to a follower's fetch (SPEC 3.2), as decisions: whether
//! a fetch is admitted (only from its sender's current incarnation), how
//! many bytes its answer may carry ([`FetchBudget`]), what it says of a log
//! this node does not host ([`unknown_log`]), and, after each look at its
//! logs, whether to answer now or to park it until data arrives or its
//! wait is over ([`fetch_verdict`]), and which ISR proposals its look
//! left for the control pass.
//!
//! Not owned here: the look itself (reading each log and recording the
//! follower's progress, `Replica::answer_fetch`, in the order a rotation
//! the driver keeps gives), the request refusals common to every request
//! (a stopping node, a bad list of logs), and the wait of a parked fetch
//! (the threaded handler's wait on the data watch, the simulator's list
//! of parked fetches): the drivers'.

use std::time::Instant;

use super::{Action, NodeCore};
use crate::replication::{FetchArrival, IncarnationCheck};
use crate::transport::{ErrorCode, FetchResponse, FetchedLog, Response};
use crate::types::{Incarnation, LogId, NodeId, Offset};

/// What the driver's look at a fetch's logs found, for
/// [`Input::FetchLooked`](super::Input::FetchLooked).
#[derive(Debug)]
pub(crate) struct FetchLook {
    /// Each log's answer, in the request's order.
    pub(crate) logs: Vec<FetchedLog>,
    /// The data watch's value as the look began: a parked fetch is looked
    /// at again once the watch passes it.
    pub(crate) seen: u64,
    /// Whether many producers wait on these logs (a waiting thread should
    /// not spin).
    pub(crate) crowded: bool,
    /// Whether a looked-at replica holds an ISR proposal: the control pass
    /// is asked to submit one for each of the request's logs.
    pub(crate) proposals: bool,
    /// Whether the node was stopping, as read right after the logs.
    pub(crate) stopped: bool,
    /// Whether a log this node leads was fetched by a follower whose
    /// stored line is older than the leader's epoch: answered at once, not
    /// parked, since only an answer of the epoch stores it, and until the
    /// follower's next fetch says so, it commits nothing and cannot join
    /// the ISR (`LeaderState::on_fetch_of_line`). Parked, it would wait
    /// `fetch_wait_max` after every election and every start.
    pub(crate) off_line: bool,
}

/// How many bytes of records one fetch's answer may still carry. A peer's
/// request cannot make this node read more than its own configured
/// response size. As in Kafka (`ReplicaManager.readFromLog`'s
/// `minOneMessage`), only the first log that returns data may go over it,
/// with one batch, so that a batch larger than the budget still makes
/// progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FetchBudget {
    /// The bytes left.
    bytes_max: usize,
    /// Whether no log has returned records yet: the next may return one
    /// batch over the budget.
    min_one_batch: bool,
}

impl FetchBudget {
    /// The budget of a fetch that asks for `requested_bytes_max` from a
    /// node whose answers carry at most `response_bytes_max`.
    pub(crate) fn new(requested_bytes_max: u32, response_bytes_max: u32) -> FetchBudget {
        FetchBudget {
            bytes_max: (requested_bytes_max as usize).min(response_bytes_max as usize),
            min_one_batch: true,
        }
    }

    /// The bytes the next log's records may take.
    pub(crate) fn bytes_max(&self) -> usize {
        self.bytes_max
    }

    /// Whether the next log may return one batch over
    /// [`bytes_max`](Self::bytes_max).
    pub(crate) fn min_one_batch(&self) -> bool {
        self.min_one_batch
    }

    /// Takes a log's `answer` out of the budget.
    pub(crate) fn spend(&mut self, answer: &FetchedLog) {
        self.bytes_max = self.bytes_max.saturating_sub(answer.records.len());
        self.min_one_batch &= answer.records.is_empty();
    }
}

/// A fetch's answer for `log`, which this node does not host.
pub(crate) fn unknown_log(log: LogId) -> FetchedLog {
    FetchedLog {
        log,
        error: ErrorCode::UnknownLog,
        high_watermark: Offset::ZERO,
        log_start_offset: Offset::ZERO,
        log_end_offset: Offset::ZERO,
        log_start_epoch: None,
        log_end_epoch: None,
        diverging: None,
        records: bytes::Bytes::new(),
        applied_offsets: Vec::new(),
    }
}

/// What a look at a fetch decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FetchVerdict {
    /// Answer now with what the look found.
    Answer,
    /// Nothing to say yet: park the fetch (the long poll).
    Park,
}

/// Decides a fetch after a look at its `logs`: answered now if any log has
/// something to say (records, an error, a divergence for the follower),
/// if the node was `stopped`, or if the fetch's wait is `expired`; else
/// parked until data arrives (SPEC 3.2, the long poll).
pub(crate) fn fetch_verdict(logs: &[FetchedLog], stopped: bool, expired: bool) -> FetchVerdict {
    let ready = logs.iter().any(|answer| {
        !answer.records.is_empty() || !answer.error.is_none() || answer.diverging.is_some()
    });
    if ready || stopped || expired {
        FetchVerdict::Answer
    } else {
        FetchVerdict::Park
    }
}

impl NodeCore {
    /// A fetch from `from`'s incarnation `incarnation` arrived `now`, past
    /// the refusals of every request: refused unless it is from its
    /// sender's current incarnation (SPEC 3.2, Kafka's broker epoch,
    /// KIP-903), before it reaches any log, and then the live nodes'
    /// incarnations are read again if it named one this node cannot
    /// verify (rate-limited); else its logs are looked at, the fetch
    /// vouching for its follower only as of `now` however long it is held
    /// (SPEC 3.4).
    pub(super) fn fetch_arrived(
        &self,
        from: NodeId,
        incarnation: Incarnation,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        match self.peer_incarnations.check(from, incarnation) {
            IncarnationCheck::Current => out.push(Action::LookAtFetch {
                arrival: FetchArrival::New(now),
            }),
            check => {
                if check == IncarnationCheck::Unverified && self.peer_incarnations.refresh_due(now)
                {
                    out.push(Action::QueueIncarnationRefresh);
                }
                out.push(Action::NoteStaleFetch {
                    from,
                    incarnation,
                    check,
                });
                out.push(Action::Respond(Response::Error(
                    ErrorCode::StaleIncarnation,
                )));
            }
        }
    }

    /// A look at a fetch that `arrival` dates found `look`, and its wait
    /// is `expired` or not: the ISR proposals the look left go to the
    /// control pass (one for each of its logs, in the request's order),
    /// then the fetch is answered with the look's logs or parked until the
    /// data watch passes `look.seen`, to be looked at again as held since
    /// its arrival ([`fetch_verdict`]).
    pub(super) fn fetch_looked(
        &self,
        arrival: FetchArrival,
        look: FetchLook,
        expired: bool,
        out: &mut Vec<Action>,
    ) {
        if look.proposals {
            out.extend(
                look.logs
                    .iter()
                    .map(|answer| Action::QueueIsrProposal(answer.log)),
            );
        }
        let verdict = if look.off_line {
            FetchVerdict::Answer
        } else {
            fetch_verdict(&look.logs, look.stopped, expired)
        };
        match verdict {
            FetchVerdict::Answer => out.push(Action::Respond(Response::Fetch(FetchResponse {
                logs: look.logs,
            }))),
            FetchVerdict::Park => out.push(Action::Park {
                arrival: FetchArrival::Held(arrival.arrived_at()),
                seen: look.seen,
                crowded: look.crowded,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Input;
    use super::*;
    use crate::sync::{Arc, AtomicBool};
    use crate::types::{EpochEndOffset, LeaderEpoch};

    const FOLLOWER: NodeId = NodeId(2);

    fn core() -> NodeCore {
        NodeCore::new(
            NodeId(1),
            Duration::from_secs(6),
            2,
            Duration::from_millis(500),
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        )
    }

    fn handle(core: &NodeCore, input: Input) -> Vec<Action> {
        let mut out = Vec::new();
        core.handle(input, &mut out);
        out
    }

    /// An answer for log `log` with `records` bytes of records and nothing
    /// else to say.
    fn answer(log: u32, records: usize) -> FetchedLog {
        FetchedLog {
            error: ErrorCode::None,
            records: bytes::Bytes::from(vec![0u8; records]),
            ..unknown_log(LogId(log))
        }
    }

    fn look(logs: Vec<FetchedLog>) -> FetchLook {
        FetchLook {
            logs,
            seen: 7,
            crowded: true,
            proposals: false,
            stopped: false,
            off_line: false,
        }
    }

    #[test]
    fn a_look_is_answered_when_a_log_has_something_to_say_or_the_wait_ends() {
        let empty = answer(1, 0);
        let with_records = answer(2, 10);
        let with_error = FetchedLog {
            error: ErrorCode::FencedLeaderEpoch,
            ..answer(3, 0)
        };
        let diverging = FetchedLog {
            diverging: Some(EpochEndOffset {
                epoch: LeaderEpoch(1),
                end_offset: Offset(4),
            }),
            ..answer(4, 0)
        };
        use FetchVerdict::{Answer, Park};
        // (logs, stopped, expired, verdict)
        let rows: Vec<(Vec<FetchedLog>, bool, bool, FetchVerdict)> = vec![
            (vec![empty.clone()], false, false, Park),
            (vec![], false, false, Park),
            (vec![empty.clone()], true, false, Answer),
            (vec![empty.clone()], false, true, Answer),
            (vec![empty.clone(), with_records], false, false, Answer),
            (vec![with_error, empty.clone()], false, false, Answer),
            (vec![empty.clone(), diverging], false, false, Answer),
            (vec![unknown_log(LogId(5))], false, false, Answer),
        ];
        for (row, (logs, stopped, expired, verdict)) in rows.into_iter().enumerate() {
            assert_eq!(fetch_verdict(&logs, stopped, expired), verdict, "row {row}");
        }
    }

    #[test]
    fn the_budget_is_the_smaller_size_and_only_the_first_log_with_data_may_go_over() {
        let mut budget = FetchBudget::new(100, 60);
        assert_eq!((budget.bytes_max(), budget.min_one_batch()), (60, true));
        budget.spend(&answer(1, 0));
        assert_eq!((budget.bytes_max(), budget.min_one_batch()), (60, true));
        // One batch over the budget: nothing left, and no second one.
        budget.spend(&answer(2, 80));
        assert_eq!((budget.bytes_max(), budget.min_one_batch()), (0, false));
        budget.spend(&answer(3, 0));
        assert_eq!((budget.bytes_max(), budget.min_one_batch()), (0, false));

        let mut budget = FetchBudget::new(50, 60);
        budget.spend(&answer(1, 20));
        assert_eq!((budget.bytes_max(), budget.min_one_batch()), (30, false));
    }

    #[test]
    fn a_fetch_from_the_current_incarnation_is_looked_at_as_new() {
        let core = core();
        core.peer_incarnations()
            .replace(&[(FOLLOWER, Incarnation(3))]);
        let now = Instant::now();
        let out = handle(
            &core,
            Input::FetchArrived {
                from: FOLLOWER,
                incarnation: Incarnation(3),
                now,
            },
        );
        assert_eq!(
            out,
            vec![Action::LookAtFetch {
                arrival: FetchArrival::New(now)
            }]
        );
    }

    /// SPEC 3.2: a fetch from an earlier process of the follower is refused
    /// before it reaches any log; one naming an incarnation this node
    /// cannot verify also asks for the incarnations to be read again, at
    /// most once in a while.
    #[test]
    fn a_fetch_not_from_the_current_incarnation_is_refused() {
        let core = core();
        core.peer_incarnations()
            .replace(&[(FOLLOWER, Incarnation(3))]);
        let now = Instant::now();
        let arrived = |incarnation| Input::FetchArrived {
            from: FOLLOWER,
            incarnation,
            now,
        };
        let refused = |incarnation, check| {
            vec![
                Action::NoteStaleFetch {
                    from: FOLLOWER,
                    incarnation,
                    check,
                },
                Action::Respond(Response::Error(ErrorCode::StaleIncarnation)),
            ]
        };
        assert_eq!(
            handle(&core, arrived(Incarnation(2))),
            refused(Incarnation(2), IncarnationCheck::Stale)
        );
        let mut first = vec![Action::QueueIncarnationRefresh];
        first.extend(refused(Incarnation(4), IncarnationCheck::Unverified));
        assert_eq!(handle(&core, arrived(Incarnation(4))), first);
        // Asked for already: refused without asking again.
        assert_eq!(
            handle(&core, arrived(Incarnation(4))),
            refused(Incarnation(4), IncarnationCheck::Unverified)
        );
    }

    #[test]
    fn a_look_with_data_answers_with_the_logs_it_read() {
        let now = Instant::now();
        let logs = vec![answer(1, 0), answer(2, 10)];
        let out = handle(
            &core(),
            Input::FetchLooked {
                arrival: FetchArrival::New(now),
                look: look(logs.clone()),
                expired: false,
            },
        );
        assert_eq!(
            out,
            vec![Action::Respond(Response::Fetch(FetchResponse { logs }))]
        );
    }

    /// SPEC 3.4: a parked fetch is looked at again as held since its
    /// arrival, so that it never vouches for its follower at a later time.
    #[test]
    fn a_look_without_data_parks_the_fetch_as_held_since_its_arrival() {
        let now = Instant::now();
        for arrival in [FetchArrival::New(now), FetchArrival::Held(now)] {
            let out = handle(
                &core(),
                Input::FetchLooked {
                    arrival,
                    look: look(vec![answer(1, 0)]),
                    expired: false,
                },
            );
            assert_eq!(
                out,
                vec![Action::Park {
                    arrival: FetchArrival::Held(now),
                    seen: 7,
                    crowded: true,
                }]
            );
        }
    }

    #[test]
    fn a_look_that_left_proposals_queues_one_for_each_log_first() {
        let now = Instant::now();
        let logs = vec![answer(2, 0), answer(1, 0)];
        let out = handle(
            &core(),
            Input::FetchLooked {
                arrival: FetchArrival::New(now),
                look: FetchLook {
                    proposals: true,
                    ..look(logs.clone())
                },
                expired: true,
            },
        );
        assert_eq!(
            out,
            vec![
                Action::QueueIsrProposal(LogId(2)),
                Action::QueueIsrProposal(LogId(1)),
                Action::Respond(Response::Fetch(FetchResponse { logs })),
            ]
        );
        // And a look that parks the fetch queues them too: a proposal
        // waits for no answer (review of 36d73a0: only the simulator's
        // trace hashes caught queueing them on answers alone).
        let out = handle(
            &core(),
            Input::FetchLooked {
                arrival: FetchArrival::New(now),
                look: FetchLook {
                    proposals: true,
                    ..look(vec![answer(3, 0)])
                },
                expired: false,
            },
        );
        assert_eq!(
            out,
            vec![
                Action::QueueIsrProposal(LogId(3)),
                Action::Park {
                    arrival: FetchArrival::Held(now),
                    seen: 7,
                    crowded: true,
                },
            ]
        );
    }

    #[test]
    fn a_recheck_looks_again_with_the_held_arrival() {
        let held = FetchArrival::Held(Instant::now());
        assert_eq!(
            handle(&core(), Input::FetchRecheck { arrival: held }),
            vec![Action::LookAtFetch { arrival: held }]
        );
    }
}
