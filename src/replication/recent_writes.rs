//! `RecentWrites`: a leader's last pipeline writes, kept in memory so that
//! the follower fetches that ask for them are answered without reading the
//! log file back.
//!
//! Followers fetch from the end of what they hold, and under load what they
//! do not hold yet is what the leader's append pipeline wrote since their
//! last fetch: each fetch answer then cost the fetch thread a positioned
//! read of a batch header, a seek and a read of the records, and a CRC pass
//! over them (the read's check against the disk), for bytes the leader had
//! in memory a moment before. This module owns only the bookkeeping: which
//! bytes are kept, that they are contiguous, and whether they are still
//! valid; the replica records its writes and asks it first.
//!
//! Invariant: the writes kept are contiguous (each starts where the one
//! before it ended), were all written in one generation of the replica, and
//! are in the log at their offsets. A leader's log only grows within a
//! generation (truncation happens only as a follower, after a role change,
//! which bumps the generation), so a write of the current generation stays
//! valid; a write the replica did not record (a direct append) breaks
//! contiguity, and the writes before it are dropped.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::types::Offset;

/// At most this many writes are kept.
const RECENT_WRITES_MAX: usize = 16;

/// At most this many bytes are kept (a larger write is not kept at all).
const RECENT_WRITES_BYTES_MAX: usize = 4 * 1024 * 1024;

/// One pipeline write: whole batches from `base_offset` to `end_offset`.
#[derive(Debug)]
struct RecentWrite {
    base_offset: Offset,
    end_offset: Offset,
    bytes: Bytes,
}

/// The leader's last writes; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct RecentWrites {
    /// The replica generation the writes were made in.
    generation: u64,
    writes: VecDeque<RecentWrite>,
    /// Bytes held by `writes`.
    bytes: usize,
}

impl RecentWrites {
    /// Records a write of `bytes` (whole batches) from `base_offset` to
    /// `end_offset`, made in `generation` and now in the log.
    pub(crate) fn record(
        &mut self,
        generation: u64,
        base_offset: Offset,
        end_offset: Offset,
        bytes: Bytes,
    ) {
        debug_assert!(base_offset < end_offset, "an empty write");
        let follows = self
            .writes
            .back()
            .is_none_or(|last| last.end_offset == base_offset);
        if generation != self.generation || !follows {
            self.clear();
            self.generation = generation;
        }
        if bytes.len() > RECENT_WRITES_BYTES_MAX {
            // Not kept, and nothing before it may be served past it.
            self.clear();
            return;
        }
        self.bytes += bytes.len();
        self.writes.push_back(RecentWrite {
            base_offset,
            end_offset,
            bytes,
        });
        while self.writes.len() > RECENT_WRITES_MAX || self.bytes > RECENT_WRITES_BYTES_MAX {
            if let Some(dropped) = self.writes.pop_front() {
                self.bytes -= dropped.bytes.len();
            }
        }
        self.check_invariants();
    }

    /// The kept bytes from `from`, up to `bytes_max` of them (whole writes,
    /// so whole batches), if a write kept in `generation` starts exactly at
    /// `from` and fits in `bytes_max`; `None` sends the caller to the log.
    pub(crate) fn read(&self, generation: u64, from: Offset, bytes_max: usize) -> Option<Bytes> {
        if generation != self.generation {
            return None;
        }
        let first = self.writes.iter().position(|w| w.base_offset == from)?;
        let mut len = 0;
        let mut end = first;
        for write in self.writes.range(first..) {
            if len + write.bytes.len() > bytes_max {
                break;
            }
            len += write.bytes.len();
            end += 1;
        }
        match end - first {
            0 => None,
            1 => Some(self.writes[first].bytes.clone()),
            _ => {
                let mut joined = BytesMut::with_capacity(len);
                for write in self.writes.range(first..end) {
                    joined.extend_from_slice(&write.bytes);
                }
                Some(joined.freeze())
            }
        }
    }

    /// Drops every write kept (a role change).
    pub(crate) fn clear(&mut self) {
        self.writes.clear();
        self.bytes = 0;
    }

    fn check_invariants(&self) {
        debug_assert_eq!(
            self.bytes,
            self.writes.iter().map(|w| w.bytes.len()).sum::<usize>()
        );
        debug_assert!(self.writes.len() <= RECENT_WRITES_MAX);
        debug_assert!(self.bytes <= RECENT_WRITES_BYTES_MAX);
        debug_assert!(self
            .writes
            .iter()
            .zip(self.writes.iter().skip(1))
            .all(|(a, b)| a.end_offset == b.base_offset));
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn write(len: usize) -> Bytes {
        Bytes::from(vec![7u8; len])
    }

    #[test]
    fn a_fetch_at_a_kept_write_gets_it_and_the_ones_after_it_that_fit() {
        let mut recent = RecentWrites::default();
        recent.record(1, Offset(0), Offset(3), write(30));
        recent.record(1, Offset(3), Offset(5), write(20));
        recent.record(1, Offset(5), Offset(9), write(40));
        assert_eq!(recent.read(1, Offset(3), 1000).map(|b| b.len()), Some(60));
        assert_eq!(recent.read(1, Offset(0), 50).map(|b| b.len()), Some(50));
        assert_eq!(recent.read(1, Offset(0), 49).map(|b| b.len()), Some(30));
        // Larger than the budget, or not at a write's start: the log answers.
        assert_eq!(recent.read(1, Offset(5), 39), None);
        assert_eq!(recent.read(1, Offset(4), 1000), None);
        assert_eq!(recent.read(1, Offset(9), 1000), None);
    }

    #[test]
    fn another_generation_or_a_gap_drops_what_was_kept() {
        let mut recent = RecentWrites::default();
        recent.record(1, Offset(0), Offset(3), write(30));
        assert_eq!(recent.read(2, Offset(0), 1000), None);
        recent.record(2, Offset(3), Offset(5), write(20));
        assert_eq!(recent.read(2, Offset(0), 1000), None);
        assert_eq!(recent.read(2, Offset(3), 1000).map(|b| b.len()), Some(20));
        // A write not recorded (a direct append) left a gap.
        recent.record(2, Offset(7), Offset(8), write(10));
        assert_eq!(recent.read(2, Offset(3), 1000), None);
        assert_eq!(recent.read(2, Offset(7), 1000).map(|b| b.len()), Some(10));
        recent.clear();
        assert_eq!(recent.read(2, Offset(7), 1000), None);
    }

    #[test]
    fn the_oldest_writes_go_first_past_the_bounds() {
        let mut recent = RecentWrites::default();
        for i in 0..(RECENT_WRITES_MAX as u64 + 2) {
            recent.record(1, Offset(i), Offset(i + 1), write(10));
        }
        assert_eq!(recent.read(1, Offset(0), 1000), None);
        assert_eq!(recent.read(1, Offset(1), 1000), None);
        assert_eq!(
            recent.read(1, Offset(2), 1000).map(|b| b.len()),
            Some(RECENT_WRITES_MAX * 10)
        );
        recent.record(
            1,
            Offset(RECENT_WRITES_MAX as u64 + 2),
            Offset(RECENT_WRITES_MAX as u64 + 3),
            write(RECENT_WRITES_BYTES_MAX + 1),
        );
        assert_eq!(recent.read(1, Offset(2), usize::MAX), None);
    }
}
