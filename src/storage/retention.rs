//! Retention (SPEC 2.6): deleting whole segments from the front of a log,
//! by size and by age, and raising the log start offset.
//!
//! This module owns the choice of which segments go and the order of the
//! deletion (checkpoint the new log start first, then delete files, so a
//! crash in between only leaves files that the next open deletes). It never
//! deletes the active segment, nor a segment holding an offset at or above
//! the caller's limit (the high watermark).

use super::checkpoint::{write_atomically, LogCheckpoint};
use super::log::{BackgroundWork, Log, LogState};
use super::producer_state;
use super::segment::Segment;
use crate::error::{Error, Result};
use crate::sync::MutexGuard;
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
    /// high watermark is refused.
    ///
    /// Appends and reads wait for none of its file work (issue 25 measured
    /// what deletion cost them when the checkpoint's fsyncs ran under the
    /// state lock). In order, holding `checkpoint_lock` throughout:
    /// 1. check `offset` against the state (read lock);
    /// 2. write the checkpoint with the new log start (no state lock): a
    ///    crash from here on leaves segments below the log start, which the
    ///    next open deletes. Nothing the check relied on can change
    ///    meanwhile: the log end falls only by a truncation, which holds
    ///    `checkpoint_lock`, and the high watermark falls only by one or
    ///    by a lowering [`set_high_watermark`](Self::set_high_watermark),
    ///    which takes it too. So the checkpoint never names a log start
    ///    above the high watermark (G3). The log start may rise meanwhile
    ///    (a follower's deferred move takes no `checkpoint_lock`), never
    ///    fall;
    /// 3. raise the log start, unless a deferred move raised it further,
    ///    and take the doomed segments out (write lock, no I/O);
    /// 4. delete their files and the producer snapshots below the new
    ///    first segment (no state lock).
    ///
    /// The epoch cache's first entry moves up to the log start in memory;
    /// its file keeps the older entries until it is next written (every
    /// open trims it to the checkpointed log start again), as Kafka's
    /// `LeaderEpochFileCache.truncateFromStartAsyncFlush` defers that
    /// write.
    fn raise_log_start_offset(&self, offset: Offset, within_high_watermark: bool) -> Result<u64> {
        let serial = self.checkpoint_lock.lock();
        // A halt (a simulated crash) may have come while this waited.
        self.commit.check_not_poisoned(&self.dir)?;
        // Deferred moves first: their files are older.
        self.finish_log_start_moves_locked(&serial)?;
        let high_watermark = {
            let state = self.state.read();
            if within_high_watermark && offset > state.high_watermark {
                return Err(Error::LogStartAboveHighWatermark {
                    requested: offset,
                    high_watermark: state.high_watermark,
                });
            }
            if offset <= state.log_start_offset || offset > state.log_end_offset() {
                return Ok(0);
            }
            // Retention's caller passes the replica's high watermark as
            // its limit, which the log's own copy may trail by a publish.
            (
                state.high_watermark.max(offset),
                first_segment_after(&state, offset),
            )
        };
        let (high_watermark, first_after) = high_watermark;
        // G4: the snapshot covering the segment that will be first is on
        // disk before the checkpoint says the log starts there (recovery
        // deletes what lies below a checkpointed start by itself).
        self.write_covering_snapshot(&serial, first_after)?;
        let checkpoint = LogCheckpoint {
            recovery_point: self.commit.flushed_offset(),
            high_watermark,
            log_start_offset: offset,
            clean_shutdown: false,
        };
        self.poison_on_error(checkpoint.store(&*self.disk, &self.dir))?;
        let doomed: Vec<Segment> = {
            let mut state = self.state.write();
            debug_assert!(
                offset <= state.log_end_offset(),
                "the log end fell while checkpoint_lock was held"
            );
            debug_assert!(
                !within_high_watermark || offset <= state.high_watermark,
                "the high watermark fell while checkpoint_lock was held"
            );
            // A follower's deferred move takes no `checkpoint_lock`: one
            // may have moved the start since the check, even above
            // `offset` (its own work checkpoints it). The start never
            // goes back, and the cache is trimmed only to the start the
            // checkpoint above names.
            let start = state.log_start_offset.max(offset);
            state.log_start_offset = start;
            state.high_watermark = state.high_watermark.max(start);
            state.epochs.truncate_from_start_in_memory(offset);
            let doomed = take_segments_wholly_below(&mut state, start);
            debug_assert!(state.check_invariants());
            debug_assert!(self.start_moves.lock().check_invariants(&state));
            doomed
        };
        let count = doomed.len() as u64;
        // The snapshots kept are those the checkpoint's first segment
        // needs (a deferred move since then checkpoints its own).
        self.delete_below_first_segment(&serial, doomed, first_after)?;
        drop(serial);
        Ok(count)
    }

    /// [`set_log_start_offset`](Self::set_log_start_offset) for a follower
    /// that learned a higher log start from its leader's fetch answer: the
    /// log start, the high watermark and the segment map move at once, as
    /// there, but the checkpoint, the trim of the epoch cache and the
    /// deletion of the files are handed to the roll flusher
    /// ([`finish_log_start_moves`](Self::finish_log_start_moves)), so the
    /// fetcher (and the leader's high watermark, which waits for its next
    /// fetch) waits for no fsync (issue 25 measured what the synchronous
    /// move cost `acks=all` appends). Without a roll flusher it is
    /// `set_log_start_offset`.
    ///
    /// As Kafka: a follower's `maybeIncrementLogStartOffset` moves the log
    /// start in memory and the log start offsets are checkpointed later
    /// (`log.flush.start.offset.checkpoint.interval.ms`); segment files are
    /// deleted asynchronously. A crash before the work is done reopens the
    /// log with its older start, every file still there and every record
    /// in them committed: the follower then learns the start again. The
    /// epoch cache is trimmed only after the checkpoint, so its file never
    /// starts above the checkpointed log start (a recovery would check the
    /// batches in between against the trimmed cache and refuse them).
    pub(crate) fn raise_log_start_offset_deferred(&self, offset: Offset) -> Result<()> {
        if self.roll_flusher.get().is_none() {
            return self.set_log_start_offset(offset);
        }
        self.commit.check_not_poisoned(&self.dir)?;
        {
            // No `checkpoint_lock`: the roll flusher holds it across the
            // fsyncs of a roll's producer snapshot and checkpoint, and the
            // fetcher (and with it the leader's high watermark) waited
            // behind them (issue 27). Every holder of `checkpoint_lock`
            // allows for a move coming meanwhile: a checkpoint names the
            // start read at one instant with the first segment whose
            // covering snapshot it wrote (`store_checkpoint_serialized`),
            // a truncation finishes the moves again until none waits under
            // the state lock, and the synchronous move never lowers the
            // start.
            let mut state = self.state.write();
            // A halt (a simulated crash) may have come meanwhile.
            self.commit.check_not_poisoned(&self.dir)?;
            if offset > state.high_watermark {
                return Err(Error::LogStartAboveHighWatermark {
                    requested: offset,
                    high_watermark: state.high_watermark,
                });
            }
            if offset <= state.log_start_offset || offset > state.log_end_offset() {
                return Ok(());
            }
            state.log_start_offset = offset;
            let doomed = take_segments_wholly_below(&mut state, offset);
            debug_assert!(state.check_invariants());
            let mut moves = self.start_moves.lock();
            moves.doomed.extend(doomed);
            moves.unpersisted = true;
            debug_assert!(moves.check_invariants(&state));
        }
        if !self.hand_off(BackgroundWork::FinishLogStartMoves) {
            self.finish_log_start_moves()?;
        }
        Ok(())
    }

    /// Whether a deferred log start move still waits for its file work
    /// (its checkpoint, the files below it).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn log_start_moves_pending(&self) -> bool {
        self.start_moves.lock().pending()
    }

    /// Does the file work of the log start moves
    /// [`raise_log_start_offset_deferred`](Self::raise_log_start_offset_deferred)
    /// left, in the order the synchronous move does it: the checkpoint
    /// with the log start, the epoch cache trimmed to it, the files of the
    /// segments wholly below it and the producer snapshots below the
    /// first segment deleted. Nothing to do is a no-op.
    pub(crate) fn finish_log_start_moves(&self) -> Result<()> {
        let serial = self.checkpoint_lock.lock();
        self.commit.check_not_poisoned(&self.dir)?;
        self.finish_log_start_moves_locked(&serial)
    }

    /// [`finish_log_start_moves`](Self::finish_log_start_moves) for a caller
    /// that holds `checkpoint_lock` (and not the state lock).
    pub(super) fn finish_log_start_moves_locked(&self, serial: &MutexGuard<'_, ()>) -> Result<()> {
        let (doomed, unpersisted) = {
            let mut moves = self.start_moves.lock();
            (
                std::mem::take(&mut moves.doomed),
                std::mem::replace(&mut moves.unpersisted, false),
            )
        };
        if doomed.is_empty() && !unpersisted {
            return Ok(());
        }
        // The checkpoint names a start at or above every doomed segment's
        // end: it is read after they were taken. A move since then is
        // left to its own work (it set `unpersisted` again), so the cache
        // is trimmed to the start the checkpoint names, never above it,
        // and the snapshots kept are those its first segment needs.
        let stored = self.store_checkpoint_serialized(serial, false);
        let (start, first) = self.poison_on_error(stored)?;
        {
            let mut state = self.state.write();
            state.epochs.truncate_from_start_in_memory(start);
            debug_assert!(state.check_invariants());
        }
        self.delete_below_first_segment(serial, doomed, first)
    }

    /// Writes the producer snapshot covering `first`, the base of the
    /// segment a log start move leaves first, if it still waits for its
    /// roll's flush (issue 27), and drops the pending ones below it, which
    /// describe segments the move deletes. The caller holds
    /// `checkpoint_lock` and calls this before any checkpoint names a log
    /// start at or above `first` (G4): recovery deletes the segments below
    /// a checkpointed start by itself, so a crash between that checkpoint
    /// and this write reopened a log whose snapshots all lay below the
    /// deleted segments' batches; it forgot their producers and appended a
    /// retry of their last batch again. Nothing pending at or below
    /// `first` is a no-op.
    pub(super) fn write_covering_snapshot(
        &self,
        _serial: &MutexGuard<'_, ()>,
        first: Offset,
    ) -> Result<()> {
        let covering = {
            let mut state = self.state.write();
            if !state
                .pending_snapshots
                .iter()
                .any(|(offset, _)| *offset <= first)
            {
                return Ok(());
            }
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut state.pending_snapshots)
                .into_iter()
                .partition(|(offset, _)| *offset <= first);
            state.pending_snapshots = later;
            due.into_iter().max_by_key(|(offset, _)| *offset)
        };
        let Some((offset, bytes)) = covering else {
            return Ok(());
        };
        let written = write_atomically(
            &*self.disk,
            &producer_state::snapshot_path(&self.dir, offset),
            &bytes,
        );
        self.poison_on_error(written)
    }

    /// The file work of a log start move, once its checkpoint is written
    /// (and, before it, the snapshot covering `first`:
    /// [`write_covering_snapshot`](Self::write_covering_snapshot)):
    /// deletes the `doomed` segments (taken out of the log, wholly below
    /// the log start) and the producer snapshots older than the newest one
    /// at or below `first`, the log's first segment's base. The caller
    /// holds `checkpoint_lock` (not the state lock).
    ///
    /// The newest snapshot at or below `first` stays even when it is older
    /// than `first`: it still holds the producers of the batches before
    /// it. (A first segment that no roll of this process made has one at
    /// its base too, left pending by the rebuild at open when it walked
    /// past it, unless it was the first segment walked: keeping only an
    /// older snapshot forgot the batches of the segments deleted between
    /// the two, simulator seed 60512796.) As Kafka, a
    /// segment's snapshot is otherwise deleted with the segments below it;
    /// the in-memory state keeps the producers.
    fn delete_below_first_segment(
        &self,
        _serial: &MutexGuard<'_, ()>,
        doomed: Vec<Segment>,
        first: Offset,
    ) -> Result<()> {
        debug_assert!(
            !self
                .state
                .read()
                .pending_snapshots
                .iter()
                .any(|(offset, _)| *offset <= first),
            "the snapshot covering the first segment is written before the checkpoint"
        );
        let deleted = (|| {
            for segment in doomed {
                tracing::info!(path = %segment.log_path().display(), "retention deletes segment");
                segment.delete()?;
            }
            let snapshots = producer_state::list_snapshots(&*self.disk, &self.dir)?;
            if let Some(&keep) = snapshots.iter().rev().find(|&&o| o <= first) {
                producer_state::delete_snapshots(&*self.disk, &self.dir, |o| o < keep)?;
            }
            Ok(())
        })();
        self.poison_on_error(deleted)
    }
}

/// Takes out of `state` the segments a log start at `offset` leaves with
/// nothing to serve: those that end at or before it, oldest first, never
/// the active segment (a log start at the log end keeps it, empty of
/// readable records, to append to). Both log start moves choose their
/// doomed segments here.
fn take_segments_wholly_below(state: &mut LogState, offset: Offset) -> Vec<Segment> {
    let bases = bases_wholly_below(state, offset);
    bases
        .iter()
        .filter_map(|base| state.segments.remove(base))
        .collect()
}

/// The bases of the segments [`take_segments_wholly_below`] takes.
fn bases_wholly_below(state: &LogState, offset: Offset) -> Vec<Offset> {
    let count = state.segments.len();
    state
        .segments
        .iter()
        .take(count.saturating_sub(1))
        .take_while(|(_, segment)| segment.next_offset() <= offset)
        .map(|(base, _)| *base)
        .collect()
}

/// The base of the segment a log start at `offset` leaves first (`offset`
/// itself for a log without segments).
pub(super) fn first_segment_after(state: &LogState, offset: Offset) -> Offset {
    let below = bases_wholly_below(state, offset).len();
    state.segments.keys().nth(below).copied().unwrap_or(offset)
}
