//! Table tests that drive the leader and follower state machines together:
//! the SPEC §3.6 example epoch cache, the KIP-279 truncation loop, and the
//! seed scenarios 000 §1.3 and 001 §4.2.3.

use std::time::{Duration, Instant};

use super::*;
use crate::types::{Incarnation, LeaderEpoch, NodeId, Offset};

/// An in-test epoch cache: `(epoch, start_offset)` pairs, sorted, plus the
/// log end offset. A stand-in for the storage layer's `LeaderEpochCache`,
/// written from SPEC §3.6 alone so the tables here check the rule, not that
/// implementation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TestReplica {
    pub(super) epochs: Vec<(u32, u64)>,
    pub(super) log_end_offset: u64,
}

impl TestReplica {
    pub(super) fn new(epochs: &[(u32, u64)], log_end_offset: u64) -> TestReplica {
        TestReplica {
            epochs: epochs.to_vec(),
            log_end_offset,
        }
    }

    /// SPEC §3.6 `end_offset_for_epoch`.
    pub(super) fn end_offset_for_epoch(&self, epoch: u32) -> Option<EpochEndOffset> {
        let answer = |epoch: u32, end: u64| {
            Some(EpochEndOffset {
                epoch: LeaderEpoch(epoch),
                end_offset: Offset(end),
            })
        };
        let (&(first_epoch, first_start), &(latest_epoch, _)) =
            (self.epochs.first()?, self.epochs.last()?);
        if epoch == latest_epoch {
            return answer(epoch, self.log_end_offset);
        }
        if epoch > latest_epoch {
            return None;
        }
        if epoch < first_epoch {
            return answer(epoch, first_start);
        }
        let floor = self.epochs.iter().rev().find(|(e, _)| *e <= epoch)?;
        let next = self.epochs.iter().find(|(e, _)| *e > epoch)?;
        answer(floor.0, next.1)
    }

    /// Epoch of the last batch; `None` for an empty log.
    pub(super) fn last_fetched_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.last().map(|(epoch, _)| LeaderEpoch(*epoch))
    }

    /// SPEC §2.7: drop records and epoch entries at or above `offset`.
    pub(super) fn truncate_to(&mut self, offset: Offset) {
        self.log_end_offset = self.log_end_offset.min(offset.0);
        self.epochs.retain(|(_, start)| *start < offset.0);
    }
}

#[test]
fn spec_3_6_example_cache_answers() {
    let cache = TestReplica::new(&[(0, 10), (2, 13), (4, 17)], 20);
    let rows: [(u32, Option<(u32, u64)>); 7] = [
        (0, Some((0, 13))),
        (1, Some((0, 13))),
        (2, Some((2, 17))),
        (3, Some((2, 17))),
        (4, Some((4, 20))),
        (5, None),
        (9, None),
    ];
    for (epoch, expected) in rows {
        let expected = expected.map(|(e, o)| EpochEndOffset {
            epoch: LeaderEpoch(e),
            end_offset: Offset(o),
        });
        assert_eq!(cache.end_offset_for_epoch(epoch), expected, "epoch {epoch}");
    }
    // Older than the first epoch: (e, start of the first epoch).
    let later = TestReplica::new(&[(2, 13), (4, 17)], 20);
    assert_eq!(
        later.end_offset_for_epoch(1),
        Some(EpochEndOffset {
            epoch: LeaderEpoch(1),
            end_offset: Offset(13)
        })
    );
    assert_eq!(TestReplica::new(&[], 0).end_offset_for_epoch(0), None);
}

#[test]
fn spec_3_6_example_cache_drives_leader_divergence_check() {
    // The leader holds the SPEC example cache and ends at 20.
    let leader = TestReplica::new(&[(0, 10), (2, 13), (4, 17)], 20);
    let diverging = |epoch: u32, end: u64| {
        Divergence::Diverging(EpochEndOffset {
            epoch: LeaderEpoch(epoch),
            end_offset: Offset(end),
        })
    };
    let rows = [
        (
            "empty follower never diverges",
            None,
            0,
            Divergence::Consistent,
        ),
        (
            "at the leader's end in its epoch",
            Some(4),
            20,
            Divergence::Consistent,
        ),
        (
            "inside the leader's latest epoch",
            Some(4),
            18,
            Divergence::Consistent,
        ),
        ("past the leader's end", Some(4), 21, diverging(4, 20)),
        ("epoch 2 up to its end", Some(2), 17, Divergence::Consistent),
        (
            "epoch 2 past its end on the leader",
            Some(2),
            18,
            diverging(2, 17),
        ),
        (
            "epoch 3, unknown to the leader",
            Some(3),
            15,
            diverging(2, 17),
        ),
        (
            "epoch 1, unknown to the leader",
            Some(1),
            12,
            diverging(0, 13),
        ),
        (
            "epoch newer than any the leader knows",
            Some(5),
            20,
            Divergence::UndefinedEpoch,
        ),
    ];
    for (name, last_fetched_epoch, fetch_offset, expected) in rows {
        let lookup = last_fetched_epoch.and_then(|e| leader.end_offset_for_epoch(e));
        assert_eq!(
            check_divergence(
                Offset(fetch_offset),
                last_fetched_epoch.map(LeaderEpoch),
                lookup
            ),
            expected,
            "{name}"
        );
    }
}

/// Runs the KIP-279 loop between a leader and a follower on the pure
/// functions: the follower fetches from its log end with its last epoch; a
/// diverging answer makes it truncate; repeat until the leader accepts.
/// Returns every truncation in order.
fn reconcile(leader: &TestReplica, follower: &mut TestReplica) -> Vec<Truncation> {
    let mut steps = Vec::new();
    for _ in 0..10 {
        let fetch_offset = Offset(follower.log_end_offset);
        let last_fetched_epoch = follower.last_fetched_epoch();
        let lookup = last_fetched_epoch.and_then(|e| leader.end_offset_for_epoch(e.0));
        match check_divergence(fetch_offset, last_fetched_epoch, lookup) {
            Divergence::Consistent => return steps,
            Divergence::Diverging(end) => {
                let local = follower.end_offset_for_epoch(end.epoch.0);
                let truncation = truncation_for_divergence(end, local, fetch_offset);
                follower.truncate_to(truncation.truncate_to);
                steps.push(truncation);
            }
            Divergence::UndefinedEpoch => panic!("leader cannot answer {follower:?}"),
        }
    }
    panic!("the logs did not converge: {steps:?}");
}

#[test]
fn kip_279_truncation_loop_table() {
    struct Row {
        name: &'static str,
        leader: TestReplica,
        follower: TestReplica,
        expected_steps: Vec<(u64, bool)>,
    }
    let rows = [
        Row {
            name: "same epochs, follower ahead: cut to the leader's end",
            leader: TestReplica::new(&[(0, 10), (2, 13), (4, 17)], 20),
            follower: TestReplica::new(&[(0, 10), (2, 13), (4, 17)], 23),
            expected_steps: vec![(20, true)],
        },
        Row {
            name: "follower led epoch 3 the leader never saw: cut to where \
                   epoch 2 ends on the follower",
            leader: TestReplica::new(&[(0, 10), (2, 13), (4, 17)], 20),
            follower: TestReplica::new(&[(0, 10), (2, 13), (3, 15)], 19),
            expected_steps: vec![(15, true)],
        },
        Row {
            name: "follower never saw the leader's epoch 1: two rounds",
            leader: TestReplica::new(&[(0, 0), (1, 4), (3, 8)], 10),
            follower: TestReplica::new(&[(0, 0), (2, 6)], 9),
            expected_steps: vec![(6, false), (4, true)],
        },
        Row {
            name: "follower's first epoch is newer than the leader's answer: \
                   everything goes (min(off, LEO) would keep offsets 0..4 of \
                   epoch 1 where the leader has epoch 0)",
            leader: TestReplica::new(&[(0, 0), (2, 4)], 8),
            follower: TestReplica::new(&[(1, 0)], 6),
            expected_steps: vec![(0, true)],
        },
        Row {
            name: "follower behind in the same epoch: nothing to do",
            leader: TestReplica::new(&[(0, 0), (1, 4)], 10),
            follower: TestReplica::new(&[(0, 0), (1, 4)], 7),
            expected_steps: vec![],
        },
    ];
    for mut row in rows {
        let steps = reconcile(&row.leader, &mut row.follower);
        let steps: Vec<(u64, bool)> = steps
            .iter()
            .map(|t| (t.truncate_to.0, t.resolved))
            .collect();
        assert_eq!(steps, row.expected_steps, "{}", row.name);
        // After the loop the follower's log is a prefix of the leader's:
        // every epoch entry it kept is the leader's, except that its last
        // entry may end earlier.
        for (epoch, start) in &row.follower.epochs {
            assert!(
                row.leader.epochs.contains(&(*epoch, *start)),
                "{}: follower kept ({epoch}, {start}) the leader does not have",
                row.name
            );
        }
        assert!(row.follower.log_end_offset <= row.leader.log_end_offset);
    }
}

fn config(min_insync_replicas: usize) -> LeaderConfig {
    LeaderConfig {
        min_insync_replicas,
        replica_lag_time_max: Duration::from_millis(100),
    }
}

fn accepted(decision: FetchDecision) -> (HighWatermarkUpdate, Option<IsrProposal>) {
    match decision {
        FetchDecision::Accepted {
            high_watermark,
            isr_proposal,
        } => (high_watermark, isr_proposal),
        FetchDecision::Rejected(rejection) => panic!("fetch rejected: {rejection:?}"),
    }
}

fn apply(update: FetchedUpdate) -> Offset {
    match update {
        FetchedUpdate::Applied { high_watermark, .. } => high_watermark,
        FetchedUpdate::ResetTo { .. } => panic!("unexpected reset: {update:?}"),
    }
}

/// Seed 001 §4.2.3: one leader, one follower, min ISR 1. After an append
/// the leader's HW stays 0 until the follower's *second* fetch (offset 1)
/// tells it the follower holds the record; the follower learns HW 1 only
/// from the answer to that second fetch.
#[test]
fn seed_001_4_2_3_high_watermark_walk() {
    let (leader_node, follower_node) = (NodeId(0), NodeId(1));
    let now = Instant::now();
    let epoch = LeaderEpoch::ZERO;
    let start = LogOffsets {
        log_start_offset: Offset(0),
        high_watermark: Offset(0),
        log_end_offset: Offset(0),
    };
    let mut leader = LeaderState::become_leader(
        LeaderAssignment {
            local: leader_node,
            replicas: vec![leader_node, follower_node],
            in_sync_replicas: vec![leader_node, follower_node],
            isr_version: 0,
            leader_epoch: epoch,
        },
        start,
        now,
        config(1),
    )
    .expect("valid assignment");
    let mut follower = FollowerState::become_follower(leader_node, epoch, start);

    // The producer's record lands on the leader: LEO 1, HW still 0 (the
    // follower's LEO is not known to be 1).
    assert_eq!(
        leader.on_local_append(Offset(1)),
        HighWatermarkUpdate::Unchanged
    );
    assert_eq!(
        (leader.log_end_offset(), leader.high_watermark()),
        (Offset(1), Offset(0))
    );

    // First fetch: offset 0. The leader records remote LEO 0: HW 0.
    let fetch = follower.next_fetch(None, None);
    assert_eq!(fetch.fetch_offset, Offset(0));
    let (update, proposal) = accepted(leader.on_fetch(
        follower_node,
        fetch.fetch_offset,
        fetch.current_leader_epoch,
        FetchArrival::New(now),
        Incarnation(1),
    ));
    assert_eq!((update, proposal), (HighWatermarkUpdate::Unchanged, None));
    assert_eq!(leader.high_watermark(), Offset(0));
    // The follower appends the record: LEO 1, HW min(0, 1) = 0.
    let hw = apply(follower.on_fetched(leader.high_watermark(), Offset(0), Offset(1)));
    assert_eq!((follower.log_end_offset(), hw), (Offset(1), Offset(0)));

    // Second fetch: offset 1. Remote LEO 1: leader HW 1.
    let fetch = follower.next_fetch(Some(epoch), None);
    assert_eq!(fetch.fetch_offset, Offset(1));
    assert_eq!(
        check_divergence(
            fetch.fetch_offset,
            fetch.last_fetched_epoch,
            TestReplica::new(&[(0, 0)], 1).end_offset_for_epoch(0)
        ),
        Divergence::Consistent
    );
    let (update, _) = accepted(leader.on_fetch(
        follower_node,
        fetch.fetch_offset,
        fetch.current_leader_epoch,
        FetchArrival::New(now),
        Incarnation(1),
    ));
    assert_eq!(
        update,
        HighWatermarkUpdate::Advanced {
            from: Offset(0),
            to: Offset(1)
        }
    );
    assert_eq!(
        (leader.log_end_offset(), leader.high_watermark()),
        (Offset(1), Offset(1))
    );
    // No new data; the follower learns HW 1 = min(1, 1).
    let hw = apply(follower.on_fetched(leader.high_watermark(), Offset(0), Offset(1)));
    assert_eq!((follower.log_end_offset(), hw), (Offset(1), Offset(1)));
}

/// Seed 000 §1.3, with epochs instead of HW truncation: ISR {a, b}, HW 6,
/// LEO(a) 10, LEO(b) 9; b becomes leader in epoch 1. a does not truncate to
/// its HW 6 (the seed's pre-0.11 rule); its first fetch learns that epoch 0
/// ends at 9 on b, it truncates to 9, and the HW reaches 9. Offset 9 of a's
/// old log is gone; nothing below 9 is lost.
#[test]
fn seed_000_1_3_new_leader_truncates_follower_to_its_epoch_end() {
    let (a, b) = (NodeId(1), NodeId(2));
    let now = Instant::now();
    let new_epoch = LeaderEpoch(1);
    let b_log = TestReplica::new(&[(0, 0), (1, 9)], 9);
    let mut a_log = TestReplica::new(&[(0, 0)], 10);

    let mut leader_b = LeaderState::become_leader(
        LeaderAssignment {
            local: b,
            replicas: vec![a, b],
            in_sync_replicas: vec![a, b],
            isr_version: 3,
            leader_epoch: new_epoch,
        },
        LogOffsets {
            log_start_offset: Offset(0),
            high_watermark: Offset(6),
            log_end_offset: Offset(9),
        },
        now,
        config(1),
    )
    .expect("valid assignment");
    assert_eq!(leader_b.epoch_start_offset(), Offset(9));
    // a's LEO is unknown to the new leader: HW waits at 6.
    assert_eq!(leader_b.high_watermark(), Offset(6));

    let mut follower_a = FollowerState::become_follower(
        b,
        new_epoch,
        LogOffsets {
            log_start_offset: Offset(0),
            high_watermark: Offset(6),
            log_end_offset: Offset(10),
        },
    );
    // Becoming follower keeps the whole log: no truncation to HW.
    assert_eq!(follower_a.log_end_offset(), Offset(10));

    let fetch = follower_a.next_fetch(a_log.last_fetched_epoch(), None);
    assert_eq!(
        fetch,
        FetchPosition {
            fetch_offset: Offset(10),
            last_fetched_epoch: Some(LeaderEpoch(0)),
            current_leader_epoch: new_epoch,
        }
    );
    assert_eq!(
        leader_b.validate_fetch(a, fetch.fetch_offset, fetch.current_leader_epoch),
        Ok(())
    );
    let lookup = b_log.end_offset_for_epoch(0);
    let divergence = check_divergence(fetch.fetch_offset, fetch.last_fetched_epoch, lookup);
    let expected_end = EpochEndOffset {
        epoch: LeaderEpoch(0),
        end_offset: Offset(9),
    };
    assert_eq!(divergence, Divergence::Diverging(expected_end));
    // A diverging fetch is no acknowledgement: the leader is not told.
    assert_eq!(
        leader_b.follower_lag(a, now).map(|lag| lag.records),
        Some(None)
    );

    let DivergenceAction::Truncate(truncation) =
        follower_a.on_diverging(expected_end, a_log.end_offset_for_epoch(0))
    else {
        panic!("a's offset 9 is not on b: a must truncate");
    };
    assert_eq!(
        truncation,
        Truncation {
            truncate_to: Offset(9),
            resolved: true
        }
    );
    a_log.truncate_to(truncation.truncate_to);
    assert_eq!(follower_a.log_end_offset(), Offset(9));
    assert_eq!(follower_a.high_watermark(), Offset(6));

    // Refetch at 9: consistent now, and it acknowledges 0..9: HW 9.
    let fetch = follower_a.next_fetch(a_log.last_fetched_epoch(), None);
    assert_eq!(fetch.fetch_offset, Offset(9));
    assert_eq!(
        check_divergence(
            fetch.fetch_offset,
            fetch.last_fetched_epoch,
            b_log.end_offset_for_epoch(0)
        ),
        Divergence::Consistent
    );
    let (update, proposal) = accepted(leader_b.on_fetch(
        a,
        fetch.fetch_offset,
        fetch.current_leader_epoch,
        FetchArrival::New(now),
        Incarnation(1),
    ));
    assert_eq!(
        update,
        HighWatermarkUpdate::Advanced {
            from: Offset(6),
            to: Offset(9)
        }
    );
    assert_eq!(proposal, None, "a is already in the ISR");
    let hw = apply(follower_a.on_fetched(leader_b.high_watermark(), Offset(0), Offset(9)));
    assert_eq!(hw, Offset(9));

    // The new leader writes offset 9 in epoch 1; a replicates it.
    assert_eq!(
        leader_b.on_local_append(Offset(10)),
        HighWatermarkUpdate::Unchanged,
        "a has not fetched offset 9 yet"
    );
    let (update, _) = accepted(leader_b.on_fetch(
        a,
        Offset(9),
        new_epoch,
        FetchArrival::New(now),
        Incarnation(1),
    ));
    assert_eq!(update, HighWatermarkUpdate::Unchanged);
    assert_eq!(
        apply(follower_a.on_fetched(leader_b.high_watermark(), Offset(0), Offset(10))),
        Offset(9),
        "the leader's HW is still 9"
    );
    let (update, _) = accepted(leader_b.on_fetch(
        a,
        Offset(10),
        new_epoch,
        FetchArrival::New(now),
        Incarnation(1),
    ));
    assert_eq!(update.advanced_to(), Some(Offset(10)));
    assert_eq!(
        apply(follower_a.on_fetched(leader_b.high_watermark(), Offset(0), Offset(10))),
        Offset(10)
    );
}
