//! The leader's high-watermark rule (SPEC §3.3) as one pure function.
//!
//! This file owns the rule only. Which followers count (the maximal ISR) and
//! what their log end offsets are is the leader state's business
//! (`leader.rs`); a follower's own high watermark is `follower.rs`'s.

use crate::types::Offset;

/// What an event did to the leader's high watermark. The caller wakes
/// `acks=all` producers and committed readers on `Advanced`.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HighWatermarkUpdate {
    /// The high watermark did not move.
    Unchanged,
    /// The high watermark moved forward (it never moves back on a leader).
    Advanced {
        /// The high watermark before the event.
        from: Offset,
        /// The high watermark after the event.
        to: Offset,
    },
}

impl HighWatermarkUpdate {
    /// The update from `from` to `to`: `Unchanged` when they are equal.
    pub(crate) fn between(from: Offset, to: Offset) -> HighWatermarkUpdate {
        debug_assert!(to >= from, "a leader's high watermark moved back");
        if to > from {
            HighWatermarkUpdate::Advanced { from, to }
        } else {
            HighWatermarkUpdate::Unchanged
        }
    }

    /// The new high watermark, if it moved.
    pub(crate) fn advanced_to(self) -> Option<Offset> {
        match self {
            HighWatermarkUpdate::Unchanged => None,
            HighWatermarkUpdate::Advanced { to, .. } => Some(to),
        }
    }
}

/// Everything the high-watermark rule looks at.
#[derive(Clone, Debug)]
pub(crate) struct HighWatermarkInputs<I> {
    /// The high watermark now.
    pub(crate) current: Offset,
    /// The leader's own log end offset.
    pub(crate) leader_log_end_offset: Offset,
    /// The log end offset of every *follower* in the maximal ISR (accepted
    /// ISR plus a pending addition; a pending removal still counts). `None`
    /// is a follower the leader has not heard from in this epoch.
    pub(crate) follower_log_end_offsets: I,
    /// Size of the ISR the coordinator accepted (pending changes excluded).
    pub(crate) accepted_isr_len: usize,
    /// The configured `min_insync_replicas`.
    pub(crate) min_insync_replicas: usize,
    /// Number of replicas of the log.
    pub(crate) replication_factor: usize,
}

/// SPEC §3.3: `max(current, min(leader LEO, LEO of every follower in the
/// maximal ISR))`, frozen at `current` while the accepted ISR is smaller
/// than `min(min_insync_replicas, replication_factor)`.
///
/// A follower of unknown log end offset blocks any advance: the leader cannot
/// know that it holds anything, and it is in the ISR, so an offset it may
/// lack is not committed. Freezing on a small ISR is why an `acks=1` write
/// made while the ISR is too small never becomes "committed" on one copy.
pub(crate) fn next_high_watermark<I>(inputs: HighWatermarkInputs<I>) -> Offset
where
    I: IntoIterator<Item = Option<Offset>>,
{
    let required = inputs.min_insync_replicas.min(inputs.replication_factor);
    if inputs.accepted_isr_len < required {
        return inputs.current;
    }
    let mut candidate = inputs.leader_log_end_offset;
    for follower in inputs.follower_log_end_offsets {
        match follower {
            Some(log_end_offset) => candidate = candidate.min(log_end_offset),
            None => return inputs.current,
        }
    }
    inputs.current.max(candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(value: u64) -> Offset {
        Offset(value)
    }

    #[test]
    fn high_watermark_rule_table() {
        struct Row {
            name: &'static str,
            current: u64,
            leader: u64,
            followers: Vec<Option<u64>>,
            accepted_isr_len: usize,
            min_insync_replicas: usize,
            replication_factor: usize,
            expected: u64,
        }
        let rows = [
            Row {
                name: "leader alone, min 1: follows the leader's LEO",
                current: 0,
                leader: 5,
                followers: vec![],
                accepted_isr_len: 1,
                min_insync_replicas: 1,
                replication_factor: 1,
                expected: 5,
            },
            Row {
                name: "slowest ISR follower bounds it",
                current: 2,
                leader: 10,
                followers: vec![Some(7), Some(9)],
                accepted_isr_len: 3,
                min_insync_replicas: 2,
                replication_factor: 3,
                expected: 7,
            },
            Row {
                name: "never above the leader's LEO",
                current: 2,
                leader: 6,
                followers: vec![Some(9)],
                accepted_isr_len: 2,
                min_insync_replicas: 1,
                replication_factor: 2,
                expected: 6,
            },
            Row {
                name: "unknown follower LEO blocks the advance",
                current: 3,
                leader: 10,
                followers: vec![Some(10), None],
                accepted_isr_len: 3,
                min_insync_replicas: 1,
                replication_factor: 3,
                expected: 3,
            },
            Row {
                name: "never moves backwards",
                current: 7,
                leader: 10,
                followers: vec![Some(5)],
                accepted_isr_len: 2,
                min_insync_replicas: 1,
                replication_factor: 2,
                expected: 7,
            },
            Row {
                name: "frozen while the accepted ISR is below min ISR",
                current: 4,
                leader: 10,
                followers: vec![],
                accepted_isr_len: 1,
                min_insync_replicas: 2,
                replication_factor: 3,
                expected: 4,
            },
            Row {
                name: "exactly min ISR is enough",
                current: 4,
                leader: 10,
                followers: vec![Some(8)],
                accepted_isr_len: 2,
                min_insync_replicas: 2,
                replication_factor: 3,
                expected: 8,
            },
            Row {
                name: "min ISR above the replication factor is capped by it",
                current: 0,
                leader: 10,
                followers: vec![],
                accepted_isr_len: 1,
                min_insync_replicas: 2,
                replication_factor: 1,
                expected: 10,
            },
            Row {
                name: "a pending addition (counted by the caller) can hold it back \
                       although the accepted ISR alone is below min",
                current: 4,
                leader: 10,
                followers: vec![Some(6)],
                accepted_isr_len: 1,
                min_insync_replicas: 2,
                replication_factor: 2,
                expected: 4,
            },
        ];
        for row in rows {
            let got = next_high_watermark(HighWatermarkInputs {
                current: o(row.current),
                leader_log_end_offset: o(row.leader),
                follower_log_end_offsets: row.followers.iter().map(|f| f.map(o)),
                accepted_isr_len: row.accepted_isr_len,
                min_insync_replicas: row.min_insync_replicas,
                replication_factor: row.replication_factor,
            });
            assert_eq!(got, o(row.expected), "{}", row.name);
        }
    }

    #[test]
    fn update_between_reports_only_forward_moves() {
        assert_eq!(
            HighWatermarkUpdate::between(o(3), o(3)),
            HighWatermarkUpdate::Unchanged
        );
        let update = HighWatermarkUpdate::between(o(3), o(5));
        assert_eq!(
            update,
            HighWatermarkUpdate::Advanced {
                from: o(3),
                to: o(5)
            }
        );
        assert_eq!(update.advanced_to(), Some(o(5)));
        assert_eq!(HighWatermarkUpdate::Unchanged.advanced_to(), None);
    }
}
