//! The control pass's timers, as decisions: when each periodic duty of the
//! node is due (the report retries, the heartbeat, the idle flush of
//! `FlushPolicy::Every`, retention), which of them fire on a control tick
//! ([`ControlTimers::fire`]), in what order, and when the control pass
//! wants its next tick ([`ControlTimers::next_wake`]). A control tick in
//! the core ([`NodeCore::control_tick`]) turns what fired into actions.
//! Apart from them, the deadline timer: how often the pipelined appends
//! past their deadline are failed ([`NodeCore::deadline_tick`],
//! [`NodeCore::deadlines_due`]), on a thread of its own in production so
//! that no coordinator call makes a `Timeout` late.
//!
//! Not owned here: the waiting (the control thread's `select!`, which
//! waits at most one [`tick`](ControlTimers::tick) between two passes, and
//! the simulator's scheduled wake-ups at [`next_wake`](ControlTimers::next_wake)),
//! and the work of the duties the driver carries out itself (the idle
//! flush, retention, joining retired fetchers, each replica's tick):
//! [`Action::ControlDuties`] asks for them.

use std::time::{Duration, Instant};

use super::{Action, NodeCore};
use crate::config::NodeConfig;
use crate::node::UNCLEAN_REPORT_RETRY_INTERVAL;
use crate::storage::FlushPolicy;
use crate::sync::Ordering;

/// How often the deadline timer fires: a pipelined append's `Timeout`
/// arrives at most this late (plus scheduling), well within the 100 ms
/// SPEC 3.1 allows.
const DEADLINE_TICK: Duration = Duration::from_millis(10);
const _: () = assert!(
    DEADLINE_TICK.as_millis() < 100,
    "SPEC 3.1: a Timeout within 100 ms"
);

/// A timed duty of the control pass. When several fire on one tick they
/// run in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Timer {
    /// Retry the unclean-shutdown reports, the replicas that could not be
    /// opened and the failed recovery reports.
    ReportRetry,
    /// Renew the node's session (or register again).
    Heartbeat,
    /// Flush every log with unflushed records (`FlushPolicy::Every`).
    IdleFlush,
    /// Apply retention and forget idle producer ids.
    Retention,
}

/// How often each timed duty of the control pass is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerIntervals {
    /// The longest wait between two control passes: the replicas' ticks
    /// (ISR lag, the pipelined appends' tick, hand-overs) run at least
    /// this often.
    pub(crate) tick: Duration,
    /// Between two heartbeats.
    pub(crate) heartbeat: Duration,
    /// Between two retention passes.
    pub(crate) retention: Duration,
    /// Between two idle flushes; `None`: no idle flush (the flush policy
    /// is not `Every`, or its interval is zero).
    pub(crate) idle_flush: Option<Duration>,
    /// Between two report retries.
    pub(crate) report_retry: Duration,
}

/// What one replica's share of a control pass does after its pipelined
/// appends' tick (which always runs): exactly one of these, the first
/// that applies ([`replica_tick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplicaTick {
    /// A leader whose log failed, or whose leadership failed: it resigns
    /// when its rate limit lets it, and proposes no ISR change and hands
    /// nothing over.
    Resign,
    /// An ISR change of this replica whose outcome is not known yet (SPEC
    /// 3.4): it learns the outcome before proposing another, and a
    /// hand-over past its bound meanwhile ends.
    SettleIsrChange,
    /// The hand-overs (from a stuck application, and the progress of one
    /// under way), then the ISR's own proposal (a shrink or expansion, or
    /// one a fetch left).
    HandOversAndIsr,
}

/// The one [`ReplicaTick`] for a replica: `failed_leader` (a leader with a
/// poisoned log, or whose leadership failed) goes before
/// `isr_change_unsettled`.
pub(crate) fn replica_tick(failed_leader: bool, isr_change_unsettled: bool) -> ReplicaTick {
    if failed_leader {
        ReplicaTick::Resign
    } else if isr_change_unsettled {
        ReplicaTick::SettleIsrChange
    } else {
        ReplicaTick::HandOversAndIsr
    }
}

impl TimerIntervals {
    /// The intervals a node's configuration gives: a tick of an eighth of
    /// `replica_lag_time_max` (between 1 and 50 ms), so that a lagging
    /// follower leaves the ISR within an eighth past its lag bound; a
    /// heartbeat three times per `session_timeout`, as ZooKeeper clients
    /// ping (a third of the timeout); retention every
    /// `retention_check_interval` (Kafka's
    /// `log.retention.check.interval.ms`); the idle flush every interval
    /// of `FlushPolicy::Every` (none when it is zero or the policy is
    /// another); report retries every [`UNCLEAN_REPORT_RETRY_INTERVAL`].
    pub(crate) fn of(config: &NodeConfig) -> TimerIntervals {
        let lag_max = config.replication.replica_lag_time_max;
        let idle_flush = match config.log.flush_policy {
            FlushPolicy::Every { interval, .. } if !interval.is_zero() => Some(interval),
            _ => None,
        };
        TimerIntervals {
            tick: (lag_max / 8).clamp(Duration::from_millis(1), Duration::from_millis(50)),
            heartbeat: config.session_timeout / 3,
            retention: config.retention_check_interval,
            idle_flush,
            report_retry: UNCLEAN_REPORT_RETRY_INTERVAL,
        }
    }
}

/// The control pass's timers on the node's clock: when each duty is next
/// due, and when the pass wants its next tick.
#[derive(Clone, Debug)]
pub(crate) struct ControlTimers {
    /// How often each duty is due.
    intervals: TimerIntervals,
    /// When the heartbeat is next due.
    next_heartbeat: Instant,
    /// When retention is next due.
    next_retention: Instant,
    /// When the idle flush is next due. Invariant: `Some` exactly when
    /// `intervals.idle_flush` is.
    next_idle_flush: Option<Instant>,
    /// When the report retries are next due.
    next_report_retry: Instant,
    /// When [`fire`](Self::fire) last ran (or the timers were made).
    last_tick: Instant,
    /// Whether the last [`fire`](Self::fire) was paused (a stopped or
    /// winding-down node): the duties overdue then are not due again
    /// before the next tick.
    paused: bool,
    /// [`wake_at`](Self::wake_at) of the fields above, kept because a
    /// simulator asks for it several times per event. Invariant: equal to
    /// `wake_at()`; only [`new`](Self::new) and [`fire`](Self::fire)
    /// change those fields, and both end by setting it again.
    next_wake: Instant,
}

impl ControlTimers {
    /// The timers of a control pass starting at `now` (the node's clock):
    /// the first heartbeat is due at once, the other duties one interval
    /// later.
    pub(crate) fn new(intervals: TimerIntervals, now: Instant) -> ControlTimers {
        let mut timers = ControlTimers {
            intervals,
            next_heartbeat: now,
            next_retention: now + intervals.retention,
            next_idle_flush: intervals.idle_flush.map(|interval| now + interval),
            next_report_retry: now + intervals.report_retry,
            last_tick: now,
            paused: false,
            next_wake: now,
        };
        timers.next_wake = timers.wake_at();
        timers.check_invariants();
        timers
    }

    /// The longest a driver waits between two control ticks.
    pub(crate) fn tick(&self) -> Duration {
        self.intervals.tick
    }

    /// When the next control tick is due, on the node's clock: the
    /// earliest timed duty, and at most one tick after the last.
    pub(crate) fn next_wake(&self) -> Instant {
        self.next_wake
    }

    /// A control tick at `now`: the duties due, in the order they run
    /// ([`Timer`]'s), each set again one interval after `now`. A `paused`
    /// tick (a stopped or winding-down node) fires none, and leaves the
    /// overdue ones for the tick after it.
    pub(crate) fn fire(&mut self, now: Instant, paused: bool) -> Vec<Timer> {
        self.last_tick = now;
        self.paused = paused;
        let mut fired = Vec::new();
        if !paused {
            if now >= self.next_report_retry {
                self.next_report_retry = now + self.intervals.report_retry;
                fired.push(Timer::ReportRetry);
            }
            if now >= self.next_heartbeat {
                self.next_heartbeat = now + self.intervals.heartbeat;
                fired.push(Timer::Heartbeat);
            }
            if let (Some(due), Some(interval)) = (self.next_idle_flush, self.intervals.idle_flush) {
                if now >= due {
                    self.next_idle_flush = Some(now + interval);
                    fired.push(Timer::IdleFlush);
                }
            }
            if now >= self.next_retention {
                self.next_retention = now + self.intervals.retention;
                fired.push(Timer::Retention);
            }
        }
        self.next_wake = self.wake_at();
        self.check_invariants();
        debug_assert!(
            fired.windows(2).all(|pair| pair[0] < pair[1]),
            "timers fire once each, in their order: {fired:?}"
        );
        fired
    }

    /// The next wake-up as the timers now stand (see
    /// [`next_wake`](Self::next_wake)).
    fn wake_at(&self) -> Instant {
        let next_tick = self.last_tick + self.intervals.tick;
        if self.paused {
            return next_tick;
        }
        let mut wake = next_tick
            .min(self.next_heartbeat)
            .min(self.next_retention)
            .min(self.next_report_retry);
        if let Some(flush) = self.next_idle_flush {
            wake = wake.min(flush);
        }
        wake
    }

    /// Checks the timers' invariants (see the fields).
    fn check_invariants(&self) {
        debug_assert_eq!(
            self.next_idle_flush.is_some(),
            self.intervals.idle_flush.is_some(),
            "the idle flush is timed exactly when it has an interval"
        );
        debug_assert!(
            self.next_wake <= self.last_tick + self.intervals.tick,
            "the control pass wakes at least once a tick"
        );
    }
}

impl NodeCore {
    /// A control tick at `now` (the node's clock): fires the due timers of
    /// `timers` and asks for their duties in order. The report retries are
    /// the core's own (the unclean reports, then the unopened replicas
    /// ([`Action::RetryUnopened`], read only once the unclean retries ran,
    /// which may add to them), then the failed recovery reports
    /// ([`Action::RetryRecoveryReports`], read only once the unopened
    /// retries ran, which may add to them), then the failed unassigns
    /// ([`NodeCore::retry_unassigns`])); then the
    /// heartbeat; then [`Action::ControlDuties`]: the idle flush and
    /// retention if they fired, and every replica's tick. A stopped or
    /// winding-down node asks for nothing: it makes no further coordinator
    /// call here (a controlled shutdown waits for the control thread, and
    /// each call may take the coordinator's whole call timeout).
    pub(crate) fn control_tick(
        &self,
        timers: &mut ControlTimers,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let paused = self.stop.load(Ordering::SeqCst) || self.winding_down.load(Ordering::SeqCst);
        let fired = timers.fire(now, paused);
        if paused {
            debug_assert!(fired.is_empty(), "a paused tick fires nothing");
            return;
        }
        let mut idle_flush = false;
        let mut retention = false;
        for timer in fired {
            match timer {
                Timer::ReportRetry => {
                    self.retry_unclean_reports(out);
                    out.push(Action::RetryUnopened);
                    out.push(Action::RetryRecoveryReports);
                    self.retry_unassigns(out);
                }
                Timer::Heartbeat => self.heartbeat(out),
                Timer::IdleFlush => idle_flush = true,
                Timer::Retention => retention = true,
            }
        }
        out.push(Action::ControlDuties {
            idle_flush,
            retention,
        });
    }
}

impl NodeCore {
    /// How long the deadline timer waits between two firings
    /// ([`deadlines_due`](Self::deadlines_due)). It is apart from the
    /// control pass's timers: the control pass may wait for a coordinator
    /// call, and a `Timeout` must not (SPEC 3.1).
    pub(crate) fn deadline_tick(&self) -> Duration {
        DEADLINE_TICK
    }

    /// The deadline timer fired: asks for the pass that fails the
    /// pipelined appends past their deadline ([`Action::ExpireDeadlines`]).
    /// It takes no lock of the core and asks for no coordinator call, so
    /// a call in flight on another thread never makes it late.
    pub(crate) fn deadlines_due(&self, out: &mut Vec<Action>) {
        out.push(Action::ExpireDeadlines);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::core as node_core;
    use super::super::{Continuation, CoordinatorCall};
    use super::*;
    use crate::types::LogId;
    use std::collections::HashMap;

    const TICK: Duration = Duration::from_millis(50);
    const HEARTBEAT: Duration = Duration::from_secs(2);
    const RETENTION: Duration = Duration::from_secs(300);
    const REPORT_RETRY: Duration = Duration::from_secs(1);

    fn intervals(idle_flush: Option<Duration>) -> TimerIntervals {
        TimerIntervals {
            tick: TICK,
            heartbeat: HEARTBEAT,
            retention: RETENTION,
            idle_flush,
            report_retry: REPORT_RETRY,
        }
    }

    fn heartbeat_call() -> Action {
        Action::Call {
            call: CoordinatorCall::Heartbeat,
            then: Continuation::Heartbeat,
        }
    }

    #[test]
    fn the_first_tick_fires_the_heartbeat_alone() {
        let start = Instant::now();
        let mut timers = ControlTimers::new(intervals(Some(Duration::from_secs(3))), start);
        assert_eq!(timers.next_wake(), start, "the heartbeat is due at once");
        assert_eq!(timers.fire(start, false), vec![Timer::Heartbeat]);
        assert_eq!(timers.next_wake(), start + TICK);
        assert!(timers.fire(start + TICK, false).is_empty());
    }

    #[test]
    fn each_timer_fires_one_interval_after_it_last_fired_in_order() {
        let start = Instant::now();
        let flush = Duration::from_secs(1);
        let mut timers = ControlTimers::new(intervals(Some(flush)), start);
        timers.fire(start, false);
        // All of them are overdue: they fire in their order.
        let late = start + RETENTION;
        assert_eq!(
            timers.fire(late, false),
            vec![
                Timer::ReportRetry,
                Timer::Heartbeat,
                Timer::IdleFlush,
                Timer::Retention
            ]
        );
        // Set again from the tick that fired them, not from when they
        // were due.
        assert!(timers.fire(late + REPORT_RETRY - TICK, false).is_empty());
        assert_eq!(
            timers.fire(late + REPORT_RETRY, false),
            vec![Timer::ReportRetry, Timer::IdleFlush]
        );
        assert_eq!(
            timers.fire(late + HEARTBEAT, false),
            vec![Timer::ReportRetry, Timer::Heartbeat, Timer::IdleFlush]
        );
    }

    #[test]
    fn the_next_wake_is_the_earliest_timer_and_at_most_one_tick_away() {
        let start = Instant::now();
        let mut timers = ControlTimers::new(intervals(None), start);
        timers.fire(start, false);
        assert_eq!(timers.next_wake(), start + TICK);
        // A tick that stops just short of the report retry wakes at it.
        let before_retry = start + REPORT_RETRY - Duration::from_millis(10);
        timers.fire(before_retry, false);
        assert_eq!(timers.next_wake(), start + REPORT_RETRY);
    }

    #[test]
    fn no_idle_flush_fires_without_an_interval() {
        let start = Instant::now();
        let mut timers = ControlTimers::new(intervals(None), start);
        let fired = timers.fire(start + RETENTION, false);
        assert!(!fired.contains(&Timer::IdleFlush), "{fired:?}");
    }

    #[test]
    fn a_paused_tick_fires_nothing_and_leaves_the_overdue_for_the_next() {
        let start = Instant::now();
        let mut timers = ControlTimers::new(intervals(None), start);
        let at = start + REPORT_RETRY;
        assert!(timers.fire(at, true).is_empty());
        // Overdue, but not due again before the next tick.
        assert_eq!(timers.next_wake(), at + TICK);
        assert_eq!(
            timers.fire(at + TICK, false),
            vec![Timer::ReportRetry, Timer::Heartbeat]
        );
    }

    #[test]
    fn a_control_tick_asks_for_the_fired_duties_in_order() {
        let start = Instant::now();
        let core = node_core();
        // One log whose unclean report is still owed: read first, before
        // the unopened replicas are retried (review of 6a9c460).
        core.set_unreported(HashMap::from([(LogId(7), None)]));
        let mut timers = ControlTimers::new(intervals(Some(Duration::from_secs(1))), start);
        let mut out = Vec::new();
        core.control_tick(&mut timers, start, &mut out);
        assert_eq!(
            out,
            vec![
                heartbeat_call(),
                Action::ControlDuties {
                    idle_flush: false,
                    retention: false
                }
            ]
        );
        let mut out = Vec::new();
        core.control_tick(&mut timers, start + RETENTION, &mut out);
        assert_eq!(
            out,
            vec![
                Action::Call {
                    call: CoordinatorCall::LogState(LogId(7)),
                    then: Continuation::RetryUncleanReport(LogId(7)),
                },
                Action::RetryUnopened,
                Action::RetryRecoveryReports,
                heartbeat_call(),
                Action::ControlDuties {
                    idle_flush: true,
                    retention: true
                }
            ]
        );
        // A quiet tick still ticks the replicas.
        let mut out = Vec::new();
        core.control_tick(&mut timers, start + RETENTION + TICK, &mut out);
        assert_eq!(
            out,
            vec![Action::ControlDuties {
                idle_flush: false,
                retention: false
            }]
        );
    }

    #[test]
    fn the_deadline_timer_asks_for_the_expiry_pass_alone_well_within_a_timeout() {
        let core = node_core();
        // Stopping or winding down, pipelined appends still time out.
        core.winding_down.store(true, Ordering::SeqCst);
        core.stop.store(true, Ordering::SeqCst);
        let mut out = Vec::new();
        core.deadlines_due(&mut out);
        assert_eq!(out, vec![Action::ExpireDeadlines]);
        assert!(core.deadline_tick() > Duration::ZERO);
        assert!(core.deadline_tick() < Duration::from_millis(100));
    }

    #[test]
    fn a_winding_down_or_stopped_node_asks_for_nothing_on_a_tick() {
        // The threaded loop may still tick once after the stop is raised
        // (between its select and the tick): that tick must make no
        // coordinator call, which a shutdown would wait for (review of
        // 6a9c460: nothing tested the stop alone).
        for (winding_down, stop) in [(true, false), (false, true)] {
            let start = Instant::now();
            let core = node_core();
            core.winding_down.store(winding_down, Ordering::SeqCst);
            core.stop.store(stop, Ordering::SeqCst);
            let mut timers = ControlTimers::new(intervals(None), start);
            let mut out = Vec::new();
            core.control_tick(&mut timers, start + RETENTION, &mut out);
            assert!(
                out.is_empty(),
                "winding down {winding_down}, stop {stop}: {out:?}"
            );
            assert_eq!(timers.next_wake(), start + RETENTION + TICK);
        }
    }

    /// A failed leader only resigns, whatever else is pending; an ISR
    /// change in flight is settled before any hand-over or new proposal.
    #[test]
    fn a_replica_tick_resigns_first_then_settles_then_hands_over() {
        assert_eq!(replica_tick(true, true), ReplicaTick::Resign);
        assert_eq!(replica_tick(true, false), ReplicaTick::Resign);
        assert_eq!(replica_tick(false, true), ReplicaTick::SettleIsrChange);
        assert_eq!(replica_tick(false, false), ReplicaTick::HandOversAndIsr);
    }

    /// The intervals a configuration gives: the tick bounded to 1..=50 ms,
    /// a third of the session, the idle flush only for a non-zero
    /// `Every`.
    #[test]
    fn the_intervals_follow_the_configuration() {
        let mut config = NodeConfig::new(crate::types::NodeId(1), "/unused");
        config.session_timeout = Duration::from_secs(6);
        config.retention_check_interval = Duration::from_secs(30);
        config.replication.replica_lag_time_max = Duration::from_secs(10);
        config.log.flush_policy = FlushPolicy::Every {
            messages: 10,
            interval: Duration::from_millis(200),
        };
        let of = TimerIntervals::of(&config);
        assert_eq!(
            of,
            TimerIntervals {
                tick: Duration::from_millis(50),
                heartbeat: Duration::from_secs(2),
                retention: Duration::from_secs(30),
                idle_flush: Some(Duration::from_millis(200)),
                report_retry: UNCLEAN_REPORT_RETRY_INTERVAL,
            }
        );
        config.replication.replica_lag_time_max = Duration::from_millis(4);
        config.log.flush_policy = FlushPolicy::Never;
        let of = TimerIntervals::of(&config);
        assert_eq!((of.tick, of.idle_flush), (Duration::from_millis(1), None));
        config.replication.replica_lag_time_max = Duration::from_millis(80);
        assert_eq!(TimerIntervals::of(&config).tick, Duration::from_millis(10));
    }
}
