//! Retention (SPEC 2.6): deleting whole segments from the front of a log,
//! by size and by age, and raising the log start offset.
//!
//! This module owns the choice of which segments go and the order of the
//! deletion (checkpoint the new log start first, then delete files, so a
//! crash in between only leaves files that the next open deletes). It never
//! deletes the active segment, nor a segment holding an offset at or above
//! the caller's limit (the high watermark).

use super::log::Log;
use super::segment::Segment;
use crate::error::{Error, Result};
use crate::types::Offset;

impl Log {
    /// Deletes segments from the front while the log is larger than
    /// `retention_bytes` or the segment's newest record is older than
    /// `retention_age` (by the clock's wall time), never the active segment
    /// and never one holding an offset `>= limit`. Raises the log start
    /// offset and trims the epoch cache. Returns the number of segments
    /// deleted.
    pub fn delete_segments_by_retention(&self, limit: Offset) -> Result<u64> {
        self.commit.check_not_poisoned(&self.dir)?;
        let now_ms = self.clock.wall_clock_ms();
        let mut state = self.state.write();
        let mut total_bytes: u64 = state.segments.values().map(Segment::size_bytes).sum();
        let mut new_start = None;
        let candidates: Vec<Offset> = state.segments.keys().copied().collect();
        let count = candidates.len();
        for base in candidates.into_iter().take(count.saturating_sub(1)) {
            let Some(segment) = state.segments.get_mut(&base) else {
                break;
            };
            if segment.next_offset() > limit {
                break;
            }
            let too_big = self
                .config
                .retention_bytes
                .is_some_and(|max| total_bytes > max);
            let too_old = match self.config.retention_age {
                Some(age) => segment
                    .max_timestamp_ms()?
                    .is_some_and(|newest| now_ms.saturating_sub(newest) > age.as_millis() as i64),
                None => false,
            };
            if !(too_big || too_old) {
                break;
            }
            total_bytes -= segment.size_bytes();
            new_start = Some(segment.next_offset());
        }
        let Some(new_start) = new_start else {
            return Ok(0);
        };
        drop(state);
        self.raise_log_start_offset(new_start, false)
    }

    /// What deletion bounded at `from` keeps that deletion bounded at `to`
    /// (`from <= to`) would not: the bytes of the segments wholly below
    /// `to` that hold an offset at or above `from` (never the active
    /// segment), and the newest record's timestamp in the oldest of them
    /// (ms, by the writer's clock; `None` when nothing is held, or when
    /// `with_age` is false). Retention uses it for the cap on what
    /// applications hold back (SPEC 3.9). Without `with_age` it takes only
    /// the read lock: the timestamp is read lazily from the segment, which
    /// needs the write lock.
    pub(crate) fn held_back(
        &self,
        from: Offset,
        to: Offset,
        with_age: bool,
    ) -> Result<(u64, Option<i64>)> {
        let held = |segment: &Segment| segment.next_offset() > from && segment.next_offset() <= to;
        if !with_age {
            let state = self.state.read();
            let count = state.segments.len();
            let bytes = state
                .segments
                .values()
                .take(count.saturating_sub(1))
                .take_while(|s| s.next_offset() <= to)
                .filter(|s| held(s))
                .map(Segment::size_bytes)
                .sum();
            return Ok((bytes, None));
        }
        let mut state = self.state.write();
        let count = state.segments.len();
        let mut bytes = 0;
        let mut oldest = None;
        for segment in state.segments.values_mut().take(count.saturating_sub(1)) {
            if segment.next_offset() > to {
                break;
            }
            if !held(segment) {
                continue;
            }
            bytes += segment.size_bytes();
            if oldest.is_none() {
                oldest = Some(segment.max_timestamp_ms()?);
            }
        }
        Ok((bytes, oldest.flatten()))
    }

    /// Raises the log start offset to `offset` (a follower learned a higher
    /// one from its leader) and deletes the segments wholly below it. A
    /// lower or equal offset changes nothing. Only committed records can
    /// be deleted: an offset above the high watermark is
    /// [`Error::LogStartAboveHighWatermark`] and changes nothing (as Kafka's `DeleteRecords` answers
    /// `OFFSET_OUT_OF_RANGE`). Raising it past uncommitted records would
    /// make them count as committed after a restart (G3); a log that must
    /// restart above its end is [`truncate_fully_and_start_at`](Self::truncate_fully_and_start_at)'s.
    pub fn set_log_start_offset(&self, offset: Offset) -> Result<()> {
        self.commit.check_not_poisoned(&self.dir)?;
        self.raise_log_start_offset(offset, true).map(|_| ())
    }

    /// Moves the log start up to `offset`, deleting the segments wholly
    /// below it; with `within_high_watermark`, an offset above the log's
    /// high watermark is refused (checked under the state lock, so that a
    /// concurrent fall of the high watermark cannot slip between).
    fn raise_log_start_offset(&self, offset: Offset, within_high_watermark: bool) -> Result<u64> {
        let serial = self.checkpoint_lock.lock();
        let mut state = self.state.write();
        if within_high_watermark && offset > state.high_watermark {
            return Err(Error::LogStartAboveHighWatermark {
                requested: offset,
                high_watermark: state.high_watermark,
            });
        }
        if offset <= state.log_start_offset || offset > state.log_end_offset() {
            return Ok(0);
        }
        state.log_start_offset = offset;
        // Retention's caller passes the replica's high watermark as its
        // limit, which the log's own copy may trail by a publish.
        state.high_watermark = state.high_watermark.max(offset);
        // The checkpoint first: a crash after it leaves segments below the
        // log start, which the next open deletes. Written under the state
        // lock, so that the high watermark checked above cannot fall before
        // it (`set_high_watermark` takes no `checkpoint_lock`); appends
        // wait for its fsync (issue 25 measures what deletion costs them).
        self.store_checkpoint_below(&serial, &state, Offset(u64::MAX), offset)?;
        let doomed: Vec<Offset> = state
            .segments
            .iter()
            .take(state.segments.len().saturating_sub(1))
            .take_while(|(_, s)| s.next_offset() <= offset)
            .map(|(b, _)| *b)
            .collect();
        let deleted = (|| {
            for base in &doomed {
                if let Some(segment) = state.segments.remove(base) {
                    tracing::info!(path = %segment.log_path().display(), "retention deletes segment");
                    segment.delete()?;
                }
            }
            state.epochs.truncate_from_start(offset)?;
            // Kafka deletes a segment's producer snapshot with the segment;
            // the in-memory state keeps the producers.
            let first = state.segments.keys().next().copied().unwrap_or(offset);
            super::producer_state::delete_snapshots(&self.dir, |o| o < first)?;
            Ok(())
        })();
        self.poison_on_error(deleted)?;
        debug_assert!(state.check_invariants());
        Ok(doomed.len() as u64)
    }
}
