//! ISR membership (SPEC §3.4): what the leader remembers about each
//! follower's progress, when a follower counts as caught up, and the shape
//! of an ISR change proposed to the coordinator.
//!
//! This file owns the per-follower bookkeeping and the membership
//! predicates. It does not decide *when* to propose (the leader state does,
//! keeping at most one change in flight) and it does not talk to the
//! coordinator (the caller does, with the proposal it is handed).

use std::time::{Duration, Instant};

use crate::types::{Incarnation, LeaderEpoch, NodeId, Offset};

/// What an ISR change does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum IsrChangeKind {
    /// Add one follower that caught up.
    Expand(NodeId),
    /// Remove the followers that fell behind for longer than
    /// `replica_lag_time_max`.
    Shrink(Vec<NodeId>),
}

/// The one ISR change a leader may have in flight at the coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PendingIsrChange {
    /// The ISR the leader asked for.
    pub(crate) proposed: Vec<NodeId>,
    /// Why.
    pub(crate) kind: IsrChangeKind,
}

/// A request for the caller: write `proposed` as the log's ISR with a
/// compare-and-set on `(leader_epoch, expected_version)`, then report the
/// outcome with `LeaderState::on_isr_accepted` or `on_isr_rejected`.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IsrProposal {
    /// The proposing leader's epoch (first half of the compare-and-set key).
    pub(crate) leader_epoch: LeaderEpoch,
    /// The ISR version the leader last saw accepted (second half).
    pub(crate) expected_version: u64,
    /// The ISR to write.
    pub(crate) proposed: Vec<NodeId>,
    /// Why.
    pub(crate) kind: IsrChangeKind,
}

/// When a fetch arrived at the leader, and whether the leader is counting
/// it for the first time.
///
/// A fetch vouches for its follower only as of the moment it arrived (SPEC
/// §3.4): one held in a long poll is evaluated again every time data
/// arrives, possibly long after the follower was cut off, and must not make
/// the follower look caught up at that later time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FetchArrival {
    /// A fetch evaluated as it arrives, at this time.
    New(Instant),
    /// A fetch that arrived at this time, was counted then, and is evaluated
    /// again because data arrived while the leader held it (long poll).
    Held(Instant),
}

impl FetchArrival {
    /// When the fetch arrived.
    pub(crate) fn arrived_at(self) -> Instant {
        match self {
            FetchArrival::New(at) | FetchArrival::Held(at) => at,
        }
    }
}

/// How `FollowerProgress::record_fetch` counted a fetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FetchCounted {
    /// A new fetch: everything it says about the follower is news, and it
    /// may qualify the follower for the ISR.
    New,
    /// The last counted fetch, evaluated again while held: it may
    /// acknowledge more of its own offset (the leader's flushed end rose)
    /// but says nothing about the follower after it arrived, so it neither
    /// moves the catch-up time past its arrival nor qualifies the follower
    /// for the ISR.
    Held,
    /// Older than the last counted fetch, which already spoke for the
    /// follower more recently: ignored.
    Stale,
    /// Below the follower's recorded log end in the same incarnation,
    /// while the leader asked for no truncation: ignored. Within one
    /// incarnation a follower's log end only moves back after a
    /// `diverging` answer (SPEC 3.6).
    Backwards,
    /// From an incarnation of the follower older than one already counted
    /// (a fetch from before it restarted): ignored, and answered with an
    /// error.
    OlderIncarnation,
}

/// A fetch the leader counted: when it arrived and how far the leader's
/// log reached then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CountedFetch {
    arrived_at: Instant,
    leader_log_end_offset: Offset,
}

/// The leader's record of one follower in the current leader epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FollowerProgress {
    /// The follower's log end offset: the `fetch_offset` of its last
    /// accepted fetch. `None` until it fetched in this epoch.
    log_end_offset: Option<Offset>,
    /// The last time the follower was known to hold everything the leader
    /// had. Never moves backwards; a fetch moves it at most to the fetch's
    /// own arrival (a fetch vouches only as of its arrival).
    last_caught_up_time: Instant,
    /// The last new fetch counted (as it arrived, not as re-evaluated).
    /// Invariant: `Some` exactly when `log_end_offset` is, and then
    /// `fetched_in_current_epoch`.
    last_fetch: Option<CountedFetch>,
    /// The new fetch counted before `last_fetch`: what a re-evaluation of
    /// `last_fetch` compares with, as its first evaluation did.
    /// Invariant: only with `last_fetch`, and arrived no later than it.
    previous_fetch: Option<CountedFetch>,
    /// Whether it has fetched from this leader in this epoch.
    fetched_in_current_epoch: bool,
    /// The incarnation of the follower (its registration with the
    /// coordinator) whose fetches the fields above describe; `None` until
    /// one was counted. A fetch from a newer one starts the record afresh.
    incarnation: Option<Incarnation>,
    /// The leader answered this incarnation `diverging` since the last
    /// counted fetch: the next one may be below `log_end_offset` (the
    /// follower truncated as asked).
    truncation_asked: bool,
    /// A newer incarnation replaced the one counted before, and has not
    /// caught up since: it is out of sync whatever its catch-up time (issue
    /// 23: a new incarnation starts outside the ISR, as a restarted replica
    /// does), so a restarted follower still in the ISR is shrunk away
    /// instead of holding the high watermark while it catches up.
    restarted_behind: bool,
}

impl FollowerProgress {
    /// A follower the new leader has not heard from yet. Its catch-up time
    /// starts at `now`, as Kafka's `Replica.resetReplicaState` does for an
    /// in-sync follower on a leader change: every follower gets one full
    /// `replica_lag_time_max` to show up before it can be shrunk away.
    pub(crate) fn new(now: Instant) -> FollowerProgress {
        FollowerProgress {
            log_end_offset: None,
            last_caught_up_time: now,
            last_fetch: None,
            previous_fetch: None,
            fetched_in_current_epoch: false,
            incarnation: None,
            truncation_asked: false,
            restarted_behind: false,
        }
    }

    /// The leader answered a fetch of `incarnation` with `diverging`: the
    /// follower will truncate, and its next fetch may be below its recorded
    /// log end (SPEC 3.6). Ignored for an incarnation older than the one
    /// recorded.
    pub(crate) fn truncation_asked(&mut self, incarnation: Incarnation) {
        match self.incarnation {
            Some(current) if incarnation < current => return,
            Some(current) if incarnation > current => self.start_incarnation(incarnation),
            Some(_) => self.truncation_asked = true,
            None => {
                self.incarnation = Some(incarnation);
                self.truncation_asked = true;
            }
        }
        debug_assert_eq!(self.check_invariants(), Ok(()), "{self:?}");
    }

    /// A new incarnation of the follower (it restarted, maybe with an
    /// empty or damaged disk): nothing its earlier fetches said holds for
    /// it, so it is recorded as a follower that has not fetched yet. The
    /// catch-up time stays (it never moves backwards): a restarted follower
    /// still in the ISR must catch up within `replica_lag_time_max`, as
    /// after a leader change.
    fn start_incarnation(&mut self, incarnation: Incarnation) {
        self.log_end_offset = None;
        self.last_fetch = None;
        self.previous_fetch = None;
        self.fetched_in_current_epoch = false;
        self.truncation_asked = false;
        self.incarnation = Some(incarnation);
        self.restarted_behind = true;
    }

    /// Records an accepted fetch at `fetch_offset`, which acknowledges every
    /// offset below it, evaluated while the leader's log ends at
    /// `leader_log_end_offset`.
    ///
    /// Catch-up time, SPEC §3.4 (Kafka's `Replica.updateFetchState`): a fetch
    /// at the leader's end means caught up when it arrived; a fetch at the
    /// leader's end *as of this follower's previous fetch* means it was
    /// caught up at that previous fetch. The second rule keeps a follower
    /// that keeps up under continuous appends in the ISR, although each of
    /// its fetches trails the leader's end by the records appended since the
    /// one before.
    ///
    /// Both rules use the fetch's arrival, never the time it is evaluated: a
    /// fetch held in a long poll and evaluated again when data arrives (as
    /// `FetchArrival::Held`) vouches for its follower only as of its arrival
    /// (SPEC §3.4; the follower may have been cut off since). A held fetch
    /// at the leader's end now was at it when it arrived too (a leader's log
    /// only grows), so it is caught up as of then, not later.
    ///
    /// The fetch comes from the follower's `incarnation` (which the caller
    /// checked is its current one with the coordinator, SPEC 3.2): one
    /// older than a fetch already counted is ignored; a newer one starts
    /// the record afresh (`start_incarnation`). Within one incarnation the
    /// recorded log end never moves backwards, except once after the leader
    /// answered `diverging` (`truncation_asked`): a lower fetch is ignored
    /// (Kafka's `ReplicaState` has no such rule; it is what stops a fetch
    /// reordered or replayed within one life from taking back what the
    /// follower acknowledged).
    pub(crate) fn record_fetch(
        &mut self,
        fetch_offset: Offset,
        leader_log_end_offset: Offset,
        arrival: FetchArrival,
        incarnation: Incarnation,
    ) -> FetchCounted {
        match self.incarnation {
            Some(current) if incarnation < current => return FetchCounted::OlderIncarnation,
            Some(current) if incarnation > current => self.start_incarnation(incarnation),
            Some(_) => {}
            None => self.incarnation = Some(incarnation),
        }
        let arrived_at = arrival.arrived_at();
        let (counted, previous) = match arrival {
            // One that arrived before the last counted fetch (two of a
            // follower's fetches evaluated out of order) would speak for an
            // older state of the follower, maybe with offsets it has since
            // truncated: the newer one already spoke.
            FetchArrival::New(_)
                if self
                    .last_fetch
                    .is_some_and(|last| arrived_at < last.arrived_at) =>
            {
                return FetchCounted::Stale
            }
            FetchArrival::New(_) => (FetchCounted::New, self.last_fetch),
            FetchArrival::Held(_)
                if self
                    .last_fetch
                    .is_some_and(|last| last.arrived_at == arrived_at) =>
            {
                (FetchCounted::Held, self.previous_fetch)
            }
            // Held, but not the last fetch counted: a newer one arrived
            // since (or this one was never counted).
            FetchArrival::Held(_) => return FetchCounted::Stale,
        };
        if self
            .log_end_offset
            .is_some_and(|recorded| fetch_offset < recorded)
            && !self.truncation_asked
        {
            return FetchCounted::Backwards;
        }
        if fetch_offset >= leader_log_end_offset {
            self.last_caught_up_time = self.last_caught_up_time.max(arrived_at);
            self.restarted_behind = false;
        } else if let Some(previous) = previous {
            if fetch_offset >= previous.leader_log_end_offset {
                self.last_caught_up_time = self.last_caught_up_time.max(previous.arrived_at);
                self.restarted_behind = false;
            }
        }
        self.log_end_offset = Some(fetch_offset);
        if counted == FetchCounted::New {
            self.previous_fetch = self.last_fetch;
            self.last_fetch = Some(CountedFetch {
                arrived_at,
                leader_log_end_offset,
            });
            self.fetched_in_current_epoch = true;
            self.truncation_asked = false;
        }
        debug_assert_eq!(self.check_invariants(), Ok(()), "{self:?}");
        counted
    }

    /// The invariants of the fields; `Err` names the first broken one.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        if self.last_fetch.is_some() != self.log_end_offset.is_some()
            || (self.last_fetch.is_some() && !self.fetched_in_current_epoch)
        {
            return Err("a counted fetch, a log end offset and having fetched go together".into());
        }
        if self.last_fetch.is_some() && self.incarnation.is_none() {
            return Err("a counted fetch without the incarnation it came from".into());
        }
        if self.restarted_behind && self.incarnation.is_none() {
            return Err("a restart without the incarnation that replaced the counted one".into());
        }
        match (self.previous_fetch, self.last_fetch) {
            (Some(_), None) => Err("a previous fetch without a last one".into()),
            (Some(previous), Some(last)) if previous.arrived_at > last.arrived_at => {
                Err("the previous fetch arrived after the last one".into())
            }
            _ => Ok(()),
        }
    }

    /// The incarnation of the follower whose fetches this record counts,
    /// if one was counted.
    pub(crate) fn incarnation(&self) -> Option<Incarnation> {
        self.incarnation
    }

    /// The follower's log end offset, if it fetched in this epoch.
    pub(crate) fn log_end_offset(&self) -> Option<Offset> {
        self.log_end_offset
    }

    /// The last time it held everything the leader had.
    #[cfg(test)]
    pub(crate) fn last_caught_up_time(&self) -> Instant {
        self.last_caught_up_time
    }

    /// How long it has not been caught up, as of `now` (zero if `now` is
    /// earlier than the last catch-up).
    pub(crate) fn time_since_caught_up(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.last_caught_up_time)
    }

    /// Shrink rule, SPEC §3.4: strictly more than `replica_lag_time_max`
    /// since it last caught up (at exactly the limit it stays), or a new
    /// incarnation of the follower that has not caught up yet.
    pub(crate) fn is_out_of_sync(&self, now: Instant, replica_lag_time_max: Duration) -> bool {
        self.restarted_behind || self.time_since_caught_up(now) > replica_lag_time_max
    }

    /// Expand rule, SPEC §3.4 (Kafka's `Partition.isFollowerInSync`): it has
    /// fetched in this epoch and its log end offset is at least the high
    /// watermark and at least the start offset of the leader's epoch. The
    /// last condition keeps out a follower that has not yet replicated the
    /// new leader's own uncommitted tail, which would otherwise make the
    /// high watermark wait on (or skip over) data it never fetched.
    pub(crate) fn is_eligible_for_isr(
        &self,
        high_watermark: Offset,
        epoch_start_offset: Offset,
    ) -> bool {
        // A restarted follower not caught up yet is out of sync
        // (`is_out_of_sync`): taking it back now would shrink it away at
        // the next check, and flap the ISR while it catches up.
        match self.log_end_offset {
            Some(log_end_offset) => {
                self.fetched_in_current_epoch
                    && !self.restarted_behind
                    && log_end_offset >= high_watermark
                    && log_end_offset >= epoch_start_offset
            }
            None => false,
        }
    }
}

/// The maximal ISR (SPEC §3.3): the accepted ISR plus a pending addition. A
/// pending removal keeps counting until the coordinator accepts it, so the
/// high watermark never outruns an ISR the coordinator still holds: if the
/// removal is rejected, the follower it named is still in sync by the
/// coordinator's record and must hold everything below the high watermark.
pub(crate) fn maximal_isr(accepted: &[NodeId], pending: Option<&PendingIsrChange>) -> Vec<NodeId> {
    let mut members = accepted.to_vec();
    if let Some(PendingIsrChange {
        kind: IsrChangeKind::Expand(node),
        ..
    }) = pending
    {
        if !members.contains(node) {
            members.push(*node);
        }
    }
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The follower's incarnation in the tests about one incarnation.
    const INC: Incarnation = Incarnation(1);

    fn ms(value: u64) -> Duration {
        Duration::from_millis(value)
    }

    #[test]
    fn catch_up_time_table() {
        // Each row: one previous fetch (if any), then one fetch under test.
        struct Row {
            name: &'static str,
            previous: Option<(u64, u64, u64)>, // (fetch offset, leader LEO, at ms)
            fetch_offset: u64,
            leader_log_end_offset: u64,
            at_ms: u64,
            expected_caught_up_ms: u64,
        }
        let rows = [
            Row {
                name: "first fetch at the leader's end: caught up now",
                previous: None,
                fetch_offset: 5,
                leader_log_end_offset: 5,
                at_ms: 30,
                expected_caught_up_ms: 30,
            },
            Row {
                name: "first fetch behind: keeps the start time",
                previous: None,
                fetch_offset: 3,
                leader_log_end_offset: 5,
                at_ms: 30,
                expected_caught_up_ms: 0,
            },
            Row {
                name: "reaches the leader's end as of its previous fetch: \
                       caught up at that previous fetch",
                previous: Some((2, 5, 40)),
                fetch_offset: 5,
                leader_log_end_offset: 9,
                at_ms: 50,
                expected_caught_up_ms: 40,
            },
            Row {
                name: "below the leader's end at its previous fetch: no change",
                previous: Some((2, 5, 40)),
                fetch_offset: 4,
                leader_log_end_offset: 9,
                at_ms: 50,
                expected_caught_up_ms: 0,
            },
            Row {
                name: "at the leader's end now wins over the previous fetch",
                previous: Some((2, 5, 40)),
                fetch_offset: 9,
                leader_log_end_offset: 9,
                at_ms: 50,
                expected_caught_up_ms: 50,
            },
        ];
        let base = Instant::now();
        for row in rows {
            let mut progress = FollowerProgress::new(base);
            if let Some((offset, leader, at)) = row.previous {
                let counted = progress.record_fetch(
                    Offset(offset),
                    Offset(leader),
                    FetchArrival::New(base + ms(at)),
                    INC,
                );
                assert_eq!(counted, FetchCounted::New, "{}", row.name);
            }
            let counted = progress.record_fetch(
                Offset(row.fetch_offset),
                Offset(row.leader_log_end_offset),
                FetchArrival::New(base + ms(row.at_ms)),
                INC,
            );
            assert_eq!(counted, FetchCounted::New, "{}", row.name);
            assert_eq!(
                progress.last_caught_up_time(),
                base + ms(row.expected_caught_up_ms),
                "{}",
                row.name
            );
            assert_eq!(progress.log_end_offset(), Some(Offset(row.fetch_offset)));
        }
    }

    #[test]
    fn catch_up_time_never_moves_backwards() {
        let base = Instant::now();
        let mut progress = FollowerProgress::new(base + ms(100));
        // A fetch stamped earlier than the start (a caller's clocks disagree)
        // must not pull the catch-up time back.
        let counted =
            progress.record_fetch(Offset(5), Offset(5), FetchArrival::New(base + ms(50)), INC);
        assert_eq!(counted, FetchCounted::New);
        assert_eq!(progress.last_caught_up_time(), base + ms(100));
    }

    /// SPEC §3.4: a fetch vouches for its follower only as of the moment it
    /// arrived. Each row counts a sequence of fetches, the last one under
    /// test; `Held` is a fetch the leader held in a long poll and evaluates
    /// again (any time later: the arrival is all it carries).
    #[test]
    fn held_fetch_vouches_only_as_of_its_arrival_table() {
        use FetchArrival::{Held, New};
        use FetchCounted as C;
        /// (arrival kind, fetch offset, leader LEO when evaluated, arrived
        /// at ms)
        type Fetch = (fn(Instant) -> FetchArrival, u64, u64, u64);
        struct Row {
            name: &'static str,
            fetches: &'static [Fetch],
            expected_counted: FetchCounted,
            expected_caught_up_ms: u64,
            expected_log_end_offset: Option<u64>,
        }
        let rows = [
            Row {
                name: "held at the leader's end: caught up as of its arrival, not later",
                fetches: &[(New, 5, 5, 10), (Held, 5, 5, 10)],
                expected_counted: C::Held,
                expected_caught_up_ms: 10,
                expected_log_end_offset: Some(5),
            },
            Row {
                name: "held, woken by an append: nothing new about the follower",
                fetches: &[(New, 5, 5, 10), (Held, 5, 6, 10)],
                expected_counted: C::Held,
                expected_caught_up_ms: 10,
                expected_log_end_offset: Some(5),
            },
            Row {
                name: "held, the leader's flushed end rose: acknowledges more of its \
                       offset, still as of its arrival",
                fetches: &[(New, 3, 3, 10), (Held, 5, 5, 10)],
                expected_counted: C::Held,
                expected_caught_up_ms: 10,
                expected_log_end_offset: Some(5),
            },
            Row {
                name: "held: the previous-fetch rule compares with the fetch before \
                       it, as its first evaluation did",
                fetches: &[(New, 2, 5, 40), (New, 5, 9, 50), (Held, 5, 12, 50)],
                expected_counted: C::Held,
                expected_caught_up_ms: 40,
                expected_log_end_offset: Some(5),
            },
            Row {
                name: "held, but a newer fetch was counted since: stale, ignored",
                fetches: &[(New, 5, 5, 10), (New, 7, 7, 20), (Held, 5, 7, 10)],
                expected_counted: C::Stale,
                expected_caught_up_ms: 20,
                expected_log_end_offset: Some(7),
            },
            Row {
                name: "new, but older than the last counted fetch: stale, ignored",
                fetches: &[(New, 7, 7, 20), (New, 5, 7, 10)],
                expected_counted: C::Stale,
                expected_caught_up_ms: 20,
                expected_log_end_offset: Some(7),
            },
            Row {
                name: "held, never counted: stale, ignored",
                fetches: &[(Held, 5, 5, 10)],
                expected_counted: C::Stale,
                expected_caught_up_ms: 0,
                expected_log_end_offset: None,
            },
        ];
        let base = Instant::now();
        for row in rows {
            let mut progress = FollowerProgress::new(base);
            let mut counted = None;
            for &(arrival, offset, leader, at) in row.fetches {
                counted = Some(progress.record_fetch(
                    Offset(offset),
                    Offset(leader),
                    arrival(base + ms(at)),
                    INC,
                ));
            }
            assert_eq!(counted, Some(row.expected_counted), "{}", row.name);
            assert_eq!(
                progress.last_caught_up_time(),
                base + ms(row.expected_caught_up_ms),
                "{}",
                row.name
            );
            assert_eq!(
                progress.log_end_offset(),
                row.expected_log_end_offset.map(Offset),
                "{}",
                row.name
            );
        }
    }

    /// Within one incarnation a fetch never moves the follower's recorded
    /// log end backwards, except once after a `diverging` answer (SPEC
    /// 3.6); a fetch from an older incarnation counts for nothing, and a
    /// newer one starts the record afresh (SPEC 3.2). Each row counts a
    /// sequence of fetches, the last one under test, at 10 ms apart.
    #[test]
    fn log_end_moves_back_only_after_a_truncation_or_in_a_new_incarnation_table() {
        use FetchCounted as C;
        #[derive(Clone, Copy)]
        enum Step {
            /// A new fetch: (incarnation, fetch offset, leader LEO).
            Fetch(u64, u64, u64),
            /// The leader answered this incarnation `diverging`.
            Diverging(u64),
        }
        use Step::{Diverging, Fetch};
        struct Row {
            name: &'static str,
            steps: &'static [Step],
            expected_counted: FetchCounted,
            expected_log_end_offset: Option<u64>,
            expected_fetched: bool,
        }
        let rows = [
            Row {
                name: "forward in one incarnation: counted",
                steps: &[Fetch(1, 5, 9), Fetch(1, 7, 9)],
                expected_counted: C::New,
                expected_log_end_offset: Some(7),
                expected_fetched: true,
            },
            Row {
                name: "the same offset again: counted",
                steps: &[Fetch(1, 5, 9), Fetch(1, 5, 9)],
                expected_counted: C::New,
                expected_log_end_offset: Some(5),
                expected_fetched: true,
            },
            Row {
                name: "back to 0 in one incarnation, nothing asked: ignored",
                steps: &[Fetch(1, 9, 9), Fetch(1, 0, 9)],
                expected_counted: C::Backwards,
                expected_log_end_offset: Some(9),
                expected_fetched: true,
            },
            Row {
                name: "back after a diverging answer: counted",
                steps: &[Fetch(1, 9, 9), Diverging(1), Fetch(1, 6, 9)],
                expected_counted: C::New,
                expected_log_end_offset: Some(6),
                expected_fetched: true,
            },
            Row {
                name: "one truncation per diverging answer: the next lower fetch is ignored",
                steps: &[Fetch(1, 9, 9), Diverging(1), Fetch(1, 6, 9), Fetch(1, 2, 9)],
                expected_counted: C::Backwards,
                expected_log_end_offset: Some(6),
                expected_fetched: true,
            },
            Row {
                name: "a diverging answer to an older incarnation allows nothing",
                steps: &[Fetch(2, 9, 9), Diverging(1), Fetch(2, 3, 9)],
                expected_counted: C::Backwards,
                expected_log_end_offset: Some(9),
                expected_fetched: true,
            },
            Row {
                name: "an older incarnation's fetch (delayed from before a restart): ignored",
                steps: &[Fetch(2, 9, 9), Fetch(1, 0, 9)],
                expected_counted: C::OlderIncarnation,
                expected_log_end_offset: Some(9),
                expected_fetched: true,
            },
            Row {
                name: "an older incarnation's fetch ahead of the new one: ignored too",
                steps: &[Fetch(2, 3, 9), Fetch(1, 9, 9)],
                expected_counted: C::OlderIncarnation,
                expected_log_end_offset: Some(3),
                expected_fetched: true,
            },
            Row {
                name: "a new incarnation (restarted empty) starts afresh, lower",
                steps: &[Fetch(1, 9, 9), Fetch(2, 0, 9)],
                expected_counted: C::New,
                expected_log_end_offset: Some(0),
                expected_fetched: true,
            },
            Row {
                name: "a diverging answer to a new incarnation: not fetched yet",
                steps: &[Fetch(1, 9, 9), Diverging(2)],
                expected_counted: C::New,
                expected_log_end_offset: None,
                expected_fetched: false,
            },
        ];
        let base = Instant::now();
        for row in rows {
            let mut progress = FollowerProgress::new(base);
            let mut counted = None;
            for (index, step) in row.steps.iter().enumerate() {
                let at = base + ms(10 * (index as u64 + 1));
                match *step {
                    Fetch(incarnation, offset, leader) => {
                        counted = Some(progress.record_fetch(
                            Offset(offset),
                            Offset(leader),
                            FetchArrival::New(at),
                            Incarnation(incarnation),
                        ));
                    }
                    Diverging(incarnation) => progress.truncation_asked(Incarnation(incarnation)),
                }
            }
            assert_eq!(counted, Some(row.expected_counted), "{}", row.name);
            assert_eq!(
                progress.log_end_offset(),
                row.expected_log_end_offset.map(Offset),
                "{}",
                row.name
            );
            assert_eq!(
                progress.fetched_in_current_epoch, row.expected_fetched,
                "{}",
                row.name
            );
            assert_eq!(progress.check_invariants(), Ok(()), "{}", row.name);
        }
    }

    /// An ignored fetch changes nothing, not even the catch-up time; a new
    /// incarnation keeps it (it never moves backwards).
    #[test]
    fn ignored_fetches_leave_the_catch_up_time_and_a_new_incarnation_keeps_it() {
        let base = Instant::now();
        let mut progress = FollowerProgress::new(base);
        let first = Incarnation(1);
        assert_eq!(
            progress.record_fetch(
                Offset(9),
                Offset(9),
                FetchArrival::New(base + ms(10)),
                first
            ),
            FetchCounted::New
        );
        assert_eq!(progress.last_caught_up_time(), base + ms(10));
        // At the leader's end now, so it would be caught up now, were it
        // counted.
        assert_eq!(
            progress.record_fetch(
                Offset(0),
                Offset(0),
                FetchArrival::New(base + ms(20)),
                first
            ),
            FetchCounted::Backwards
        );
        assert_eq!(
            progress.record_fetch(
                Offset(9),
                Offset(9),
                FetchArrival::New(base + ms(30)),
                Incarnation(0)
            ),
            FetchCounted::OlderIncarnation
        );
        assert_eq!(progress.last_caught_up_time(), base + ms(10));
        // A new incarnation behind the leader: not caught up, and the time
        // stays where it was.
        assert_eq!(
            progress.record_fetch(
                Offset(0),
                Offset(9),
                FetchArrival::New(base + ms(40)),
                Incarnation(2)
            ),
            FetchCounted::New
        );
        assert_eq!(progress.last_caught_up_time(), base + ms(10));
        assert_eq!(progress.log_end_offset(), Some(Offset(0)));
    }

    #[test]
    fn out_of_sync_only_strictly_after_the_lag_limit() {
        let base = Instant::now();
        let progress = FollowerProgress::new(base);
        let limit = ms(100);
        assert!(!progress.is_out_of_sync(base + ms(99), limit));
        assert!(!progress.is_out_of_sync(base + ms(100), limit));
        assert!(progress.is_out_of_sync(base + ms(100) + Duration::from_nanos(1), limit));
        // A `now` before the catch-up time is not a lag.
        assert!(!FollowerProgress::new(base + ms(10)).is_out_of_sync(base, limit));
    }

    /// Issue 23: a new incarnation of a follower is out of sync at once,
    /// whatever its catch-up time, until one of its fetches catches up.
    #[test]
    fn a_new_incarnation_is_out_of_sync_until_it_catches_up() {
        let base = Instant::now();
        let limit = ms(100);
        let mut progress = FollowerProgress::new(base);
        progress.record_fetch(Offset(5), Offset(5), FetchArrival::New(base + ms(1)), INC);
        assert!(!progress.is_out_of_sync(base + ms(2), limit));
        // It restarted (an emptied disk, say): its first fetch is behind.
        let next = Incarnation(INC.0 + 1);
        progress.record_fetch(Offset(0), Offset(5), FetchArrival::New(base + ms(3)), next);
        assert!(progress.is_out_of_sync(base + ms(4), limit));
        progress.record_fetch(Offset(3), Offset(5), FetchArrival::New(base + ms(5)), next);
        assert!(progress.is_out_of_sync(base + ms(6), limit));
        // At the high watermark but not at the leader's end: not taken
        // back into the ISR either (it would be shrunk at once).
        assert!(!progress.is_eligible_for_isr(Offset(3), Offset(0)));
        // Caught up with the leader's end as of that fetch: in sync again.
        progress.record_fetch(Offset(5), Offset(5), FetchArrival::New(base + ms(7)), next);
        assert!(!progress.is_out_of_sync(base + ms(8), limit));
        assert!(progress.is_eligible_for_isr(Offset(3), Offset(0)));
        // The first incarnation counted is no restart.
        let mut first = FollowerProgress::new(base);
        first.record_fetch(Offset(0), Offset(5), FetchArrival::New(base + ms(1)), INC);
        assert!(!first.is_out_of_sync(base + ms(2), limit));
    }

    #[test]
    fn isr_eligibility_table() {
        struct Row {
            name: &'static str,
            fetched_at: Option<u64>,
            high_watermark: u64,
            epoch_start_offset: u64,
            expected: bool,
        }
        let rows = [
            Row {
                name: "has not fetched in this epoch",
                fetched_at: None,
                high_watermark: 0,
                epoch_start_offset: 0,
                expected: false,
            },
            Row {
                name: "at HW and at epoch start",
                fetched_at: Some(10),
                high_watermark: 10,
                epoch_start_offset: 10,
                expected: true,
            },
            Row {
                name: "below HW",
                fetched_at: Some(9),
                high_watermark: 10,
                epoch_start_offset: 5,
                expected: false,
            },
            Row {
                name: "at HW but below the leader's epoch start",
                fetched_at: Some(7),
                high_watermark: 6,
                epoch_start_offset: 10,
                expected: false,
            },
            Row {
                name: "past both",
                fetched_at: Some(12),
                high_watermark: 6,
                epoch_start_offset: 10,
                expected: true,
            },
        ];
        let base = Instant::now();
        for row in rows {
            let mut progress = FollowerProgress::new(base);
            if let Some(offset) = row.fetched_at {
                let counted =
                    progress.record_fetch(Offset(offset), Offset(20), FetchArrival::New(base), INC);
                assert_eq!(counted, FetchCounted::New);
            }
            assert_eq!(
                progress.is_eligible_for_isr(
                    Offset(row.high_watermark),
                    Offset(row.epoch_start_offset)
                ),
                row.expected,
                "{}",
                row.name
            );
        }
    }

    #[test]
    fn maximal_isr_adds_pending_expansion_and_keeps_pending_removal() {
        let (a, b, c) = (NodeId(1), NodeId(2), NodeId(3));
        assert_eq!(maximal_isr(&[a, b], None), vec![a, b]);
        let expand = PendingIsrChange {
            proposed: vec![a, b, c],
            kind: IsrChangeKind::Expand(c),
        };
        assert_eq!(maximal_isr(&[a, b], Some(&expand)), vec![a, b, c]);
        let shrink = PendingIsrChange {
            proposed: vec![a],
            kind: IsrChangeKind::Shrink(vec![b]),
        };
        assert_eq!(maximal_isr(&[a, b], Some(&shrink)), vec![a, b]);
    }
}
