//! One segment of a log (SPEC 2.1): a data file `{base:020}.log` holding
//! whole record batches back to back, and its sparse offset index
//! `{base:020}.index`.
//!
//! This module owns the segment's files and every byte written to, synced
//! in or cut from a data file: all of that goes through [`SegmentFile`],
//! which reaches the file through the storage [`Disk`] (the real one, or a
//! simulated one in tests) and keeps the fsync bookkeeping the cluster
//! harness's crash simulation reads (`Log::halt_for_crash`). It does not decide
//! when to roll, flush or delete (the log does) and it does not interpret
//! the checkpoint.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bytes::Bytes;

use super::disk::{Disk, DiskFile, OpenMode};
use super::offset_index::{IndexProblem, IndexSyncHandle, OffsetIndex};
use crate::error::{Error, Result};
use crate::record::{
    decode_header_fields, parse_header, parse_whole_header, BatchHeader, HeaderError, RecordBatch,
    BATCH_HEADER_BYTES,
};
use crate::sync::{Arc, AtomicBool, Mutex, Ordering};
use crate::types::{LeaderEpoch, Offset};

/// Suffix of a segment's data file.
pub(crate) const LOG_SUFFIX: &str = ".log";
/// Suffix of a segment's index file.
pub(crate) const INDEX_SUFFIX: &str = ".index";

/// Bytes read at a time when scanning a data file.
const SCAN_WINDOW_BYTES: usize = 4 * 1024 * 1024;

/// `{base:020}` — the file stem of the segment starting at `base`.
pub(crate) fn file_stem(base: Offset) -> String {
    format!("{:020}", base.0)
}

/// Parses a data file name back into its base offset.
pub(crate) fn parse_log_file_name(name: &str) -> Option<Offset> {
    let stem = name.strip_suffix(LOG_SUFFIX)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok().map(Offset)
}

/// Path of the data file of the segment starting at `base` in `dir`.
pub(crate) fn log_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}{LOG_SUFFIX}", file_stem(base)))
}

/// Path of the index file of the segment starting at `base` in `dir`.
pub(crate) fn index_path(dir: &Path, base: Offset) -> PathBuf {
    dir.join(format!("{}{INDEX_SUFFIX}", file_stem(base)))
}

/// The data file of a segment: every write, fsync, truncation and read of
/// segment data goes through here, so that a test harness can put a "lose
/// what was not synced" crash mode in this one place.
#[derive(Debug)]
pub(crate) struct SegmentFile {
    path: PathBuf,
    file: Box<dyn DiskFile>,
    /// A second, read-only handle with its own file position, for bulk
    /// reads ([`DiskFile::read_vec_at`]: on the real disk it fills a
    /// buffer without zeroing it first, which positioned reads cannot).
    reader: Box<dyn DiskFile>,
    /// What a crash with power loss would keep of this file; see
    /// [`Durability`]. Writes, truncations and syncs update it under its
    /// lock.
    durability: Mutex<Durability>,
    /// Set once a walk found that an entry of this segment's offset index
    /// does not match the data ([`Segment::find_batch_via_index`]): from
    /// then on walks start at the segment start, and the mismatch is
    /// logged once, not on every read that would have used the entry.
    /// Cleared when the index is rebuilt ([`Segment::discard_index`]).
    index_distrusted: AtomicBool,
}

/// The bookkeeping a power-loss crash simulation needs: how many bytes were
/// written and how many of them the last successful fsync covered. Kept by
/// every build (a few words per segment and one uncontended lock per write)
/// so that the seam tested is the one shipped.
#[derive(Debug, Default)]
struct Durability {
    /// Bytes written to the file so far (its length as this process made it).
    written_bytes: u64,
    /// Bytes covered by the last successful fsync. A file created by this
    /// process and never synced counts as 0: its directory entry, or its
    /// length, may not have reached the disk.
    durable_bytes: u64,
    /// Bumped by every truncation, so an fsync that started before one
    /// cannot vouch for bytes it no longer covers.
    truncations: u64,
    /// Set by [`SegmentFile::halt`]: the process "crashed", and nothing may
    /// write, cut or sync this file any more.
    halted: bool,
}

impl SegmentFile {
    /// Opens (creating it when `create`) the data file for appending.
    fn open(disk: &dyn Disk, path: &Path, create: bool) -> Result<SegmentFile> {
        let mode = if create {
            OpenMode::CreateAppend
        } else {
            OpenMode::Append
        };
        let file = disk
            .open(path, mode)
            .map_err(|e| Error::io(path, if create { "create" } else { "open" }, e))?;
        let reader = disk
            .open(path, OpenMode::Read)
            .map_err(|e| Error::io(path, "open", e))?;
        // An existing file is trusted to be on disk as it is: recovery
        // fsyncs what it scans, and what it does not scan was fsynced
        // before the recovery point was written. A created file is not.
        let length_bytes = if create {
            0
        } else {
            file.length_bytes()
                .map_err(|e| Error::io(path, "stat", e))?
        };
        Ok(SegmentFile {
            path: path.to_path_buf(),
            file,
            reader,
            durability: Mutex::new(Durability {
                written_bytes: length_bytes,
                durable_bytes: length_bytes,
                ..Durability::default()
            }),
            index_distrusted: AtomicBool::new(false),
        })
    }

    /// Whether a walk found this file's offset index wrong (see
    /// `index_distrusted`).
    pub(crate) fn index_distrusted(&self) -> bool {
        self.index_distrusted.load(Ordering::Acquire)
    }

    /// Notes that this file's offset index does not match it; `true` the
    /// first time.
    fn distrust_index(&self) -> bool {
        !self.index_distrusted.swap(true, Ordering::AcqRel)
    }

    fn halted_error(&self) -> Error {
        Error::io(
            &self.path,
            "write",
            std::io::Error::other("the process was halted (simulated crash)"),
        )
    }

    /// Simulated crash: refuses every later write, truncation and sync of
    /// this file, and returns the length the last successful fsync covered
    /// (what survives a power loss). Test harness only.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn halt(&self) -> u64 {
        let mut durability = self.durability.lock();
        durability.halted = true;
        durability.durable_bytes
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Current length of the file on disk.
    fn len_bytes(&self) -> Result<u64> {
        self.file
            .length_bytes()
            .map_err(|e| Error::io(&self.path, "stat", e))
    }

    /// Appends all of `parts` at the end of the file (the file is opened in
    /// append mode), with as few syscalls as the kernel allows: one, in
    /// practice.
    fn append_all(&self, parts: &[&[u8]]) -> Result<()> {
        // Held across the write so a halt cannot slip between the check and
        // the bytes landing; only a concurrent sync snapshot waits on it.
        let mut durability = self.durability.lock();
        if durability.halted {
            return Err(self.halted_error());
        }
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if let Err(e) = self.file.append(parts) {
            // Some of the bytes may have landed: the file's length says.
            if let Ok(length_bytes) = self.file.length_bytes() {
                durability.written_bytes = length_bytes;
            }
            return Err(Error::io(&self.path, "write", e));
        }
        durability.written_bytes += total as u64;
        Ok(())
    }

    /// Makes the file's data durable (`fdatasync`).
    pub(crate) fn sync_data(&self) -> Result<()> {
        let (covers_bytes, truncations) = {
            let durability = self.durability.lock();
            if durability.halted {
                return Err(self.halted_error());
            }
            (durability.written_bytes, durability.truncations)
        };
        self.file
            .sync_data()
            .map_err(|e| Error::io(&self.path, "fsync", e))?;
        let mut durability = self.durability.lock();
        if durability.halted {
            // The crash came first, as far as anyone is told.
            return Err(self.halted_error());
        }
        if durability.truncations == truncations {
            durability.durable_bytes = durability.durable_bytes.max(covers_bytes);
        }
        Ok(())
    }

    /// Cuts the file to `bytes`.
    fn truncate(&self, bytes: u64) -> Result<()> {
        let mut durability = self.durability.lock();
        if durability.halted {
            return Err(self.halted_error());
        }
        self.file
            .set_len(bytes)
            .map_err(|e| Error::io(&self.path, "truncate", e))?;
        durability.written_bytes = bytes;
        durability.durable_bytes = durability.durable_bytes.min(bytes);
        durability.truncations += 1;
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `position`; returns how many were
    /// read (fewer only at the end of the file).
    pub(crate) fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<usize> {
        self.file
            .read_at(position, buf)
            .map_err(|e| Error::io(&self.path, "read", e))
    }

    /// Reads `len` bytes at `position` into a fresh buffer (shorter at the
    /// end of the file).
    pub(crate) fn read_bytes(&self, position: u64, len: usize) -> Result<Bytes> {
        let buf = self
            .reader
            .read_vec_at(position, len)
            .map_err(|e| Error::io(&self.path, "read", e))?;
        Ok(Bytes::from(buf))
    }

    /// Reads and parses the header of the batch at `position` (no CRC check,
    /// and without reading the batch's body).
    pub(crate) fn read_header(
        &self,
        position: u64,
    ) -> Result<std::result::Result<BatchHeader, HeaderError>> {
        let mut buf = [0u8; BATCH_HEADER_BYTES];
        let n = self.read_at(position, &mut buf)?;
        Ok(parse_whole_header(&buf[..n]))
    }
}

/// What [`Segment::find_batch`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// The batch at `position` contains the target or is the first after it.
    Batch {
        /// Its byte position.
        position: u64,
        /// Its header.
        header: BatchHeader,
    },
    /// Every batch before `position` ends before the target, and the walk
    /// stopped there (at the end of the data, or at the boundary asked for).
    End {
        /// Where the walk stopped.
        position: u64,
        /// The offset a batch at `position` starts at.
        next_offset: Offset,
    },
}

/// What a walk over batch headers learned.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WalkSummary {
    /// Offset after the last batch walked over.
    pub next_offset: Option<Offset>,
    /// Epoch of the last batch walked over.
    pub last_epoch: Option<LeaderEpoch>,
    /// Largest record timestamp seen.
    pub max_timestamp_ms: Option<i64>,
    /// Bytes walked over.
    pub bytes_walked: u64,
}

/// How a scan of a data file ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// Every byte up to the end was a valid batch.
    Clean,
    /// The batch at `position` is invalid (or torn); nothing from there on
    /// was visited.
    Invalid {
        /// Byte position of the first bad batch.
        position: u64,
        /// What check failed.
        reason: String,
    },
}

/// One segment: its data file, index and bookkeeping.
///
/// Invariant: `size_bytes` is the length of the valid data (whole batches);
/// `next_offset` is the offset after the last batch (the base offset when
/// empty); every index entry points below `size_bytes`.
#[derive(Debug)]
pub(crate) struct Segment {
    disk: Arc<dyn Disk>,
    base_offset: Offset,
    file: Arc<SegmentFile>,
    index: OffsetIndex,
    size_bytes: u64,
    next_offset: Offset,
    bytes_since_index_entry: u64,
    /// When this process created or opened the segment, for rolling by age.
    created_at: Instant,
    /// Largest record timestamp known to be in the segment (ms), for
    /// retention by age; `None` until known.
    max_timestamp_ms: Option<i64>,
    /// Epoch of the last batch, when known.
    last_epoch: Option<LeaderEpoch>,
}

impl Segment {
    /// Creates an empty segment starting at `base` (replacing any files of
    /// that name).
    pub(crate) fn create(
        disk: &Arc<dyn Disk>,
        dir: &Path,
        base: Offset,
        index_bytes_max: u64,
        now: Instant,
    ) -> Result<Segment> {
        let path = log_path(dir, base);
        let file = SegmentFile::open(&**disk, &path, true)?;
        file.truncate(0)?;
        let index = OffsetIndex::create(&**disk, &index_path(dir, base), base, index_bytes_max)?;
        Ok(Segment {
            disk: Arc::clone(disk),
            base_offset: base,
            file: Arc::new(file),
            index,
            size_bytes: 0,
            next_offset: base,
            bytes_since_index_entry: 0,
            created_at: now,
            max_timestamp_ms: None,
            last_epoch: None,
        })
    }

    /// Opens an existing segment. Its size is the file's length and its end
    /// offset is not yet known (`next_offset` = base) until
    /// [`recover_from`](Self::recover_from) or [`walk_to_end`](Self::walk_to_end)
    /// says so. Returns the problem with the index file when it had to be
    /// replaced by an empty one of `index_bytes_max` bytes (the caller
    /// rebuilds it, then [seals](Self::seal) it).
    pub(crate) fn open(
        disk: &Arc<dyn Disk>,
        dir: &Path,
        base: Offset,
        index_bytes_max: u64,
        now: Instant,
    ) -> Result<(Segment, Option<IndexProblem>)> {
        let file = SegmentFile::open(&**disk, &log_path(dir, base), false)?;
        let size_bytes = file.len_bytes()?;
        let index_file = index_path(dir, base);
        let (index, problem) =
            match OffsetIndex::open_checked(&**disk, &index_file, base, size_bytes)? {
                Ok(index) => (index, None),
                Err(problem) => (
                    OffsetIndex::create(&**disk, &index_file, base, index_bytes_max)?,
                    Some(problem),
                ),
            };
        let segment = Segment {
            disk: Arc::clone(disk),
            base_offset: base,
            file: Arc::new(file),
            index,
            size_bytes,
            next_offset: base,
            bytes_since_index_entry: 0,
            created_at: now,
            max_timestamp_ms: None,
            last_epoch: None,
        };
        Ok((segment, problem))
    }

    /// Base offset (first offset the segment may hold).
    pub(crate) fn base_offset(&self) -> Offset {
        self.base_offset
    }

    /// Offset after the last batch.
    pub(crate) fn next_offset(&self) -> Offset {
        self.next_offset
    }

    /// Valid bytes of data.
    pub(crate) fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// The data file (shared with readers, who read it outside the log lock).
    pub(crate) fn file(&self) -> &Arc<SegmentFile> {
        &self.file
    }

    /// Path of the data file.
    pub(crate) fn log_path(&self) -> &Path {
        self.file.path()
    }

    /// Path of the index file.
    pub(crate) fn index_path(&self) -> &Path {
        self.index.path()
    }

    /// When the segment was created or opened by this process.
    pub(crate) fn created_at(&self) -> Instant {
        self.created_at
    }

    /// Whether the index has room for no more entries.
    pub(crate) fn index_is_full(&self) -> bool {
        self.index.is_full()
    }

    /// Epoch of the last batch, if known.
    pub(crate) fn last_epoch(&self) -> Option<LeaderEpoch> {
        self.last_epoch
    }

    /// Whether a batch ending at `last_offset` still fits the 32-bit relative
    /// offsets and positions of this segment's index.
    pub(crate) fn can_address(&self, last_offset: Offset, batch_bytes: u64) -> bool {
        last_offset.distance_from(self.base_offset) <= u64::from(u32::MAX)
            && self.size_bytes + batch_bytes <= u64::from(u32::MAX)
    }

    /// Appends `parts` (together: whole batches, described by `batches` as
    /// `(position within parts, header)`) with one write.
    pub(crate) fn append(
        &mut self,
        parts: &[&[u8]],
        batches: impl IntoIterator<Item = (u64, BatchHeader)>,
        index_interval_bytes: u64,
    ) -> Result<()> {
        let start = self.size_bytes;
        self.file.append_all(parts)?;
        for (relative_position, header) in batches {
            self.note_batch(start + relative_position, &header, index_interval_bytes);
        }
        self.size_bytes = start + parts.iter().map(|p| p.len() as u64).sum::<u64>();
        debug_assert!(self.check_invariants());
        Ok(())
    }

    /// Bookkeeping for one batch now stored at `position`.
    fn note_batch(&mut self, position: u64, header: &BatchHeader, index_interval_bytes: u64) {
        // As in Kafka, a batch is indexed once enough bytes went by since the
        // last entry; the first batch (position 0) never needs an entry.
        if position > 0
            && self.bytes_since_index_entry >= index_interval_bytes
            && self.index.append(header.base_offset, position)
        {
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += header.size_bytes() as u64;
        self.next_offset = header.next_offset();
        self.last_epoch = Some(header.leader_epoch);
        self.max_timestamp_ms = Some(
            self.max_timestamp_ms
                .map_or(header.max_timestamp, |t| t.max(header.max_timestamp)),
        );
    }

    /// Finds the batch containing `target` (or the first batch after it) by
    /// walking headers from `start` (the nearest index entry below it, see
    /// [`index_floor`](Self::index_floor)), without reading batch bodies.
    ///
    /// The walk checks what the CRC does not cover (SPEC 2.3): the batch at
    /// `start` begins at the offset the index gave, and each batch begins
    /// where the one before it ended. A mismatch is `Error::Corrupt` naming
    /// the file and the batch's position: a flipped base offset would
    /// otherwise serve records under wrong offsets.
    pub(crate) fn find_batch(
        file: &SegmentFile,
        start: (Offset, u64),
        end_bytes: u64,
        target: Offset,
    ) -> Result<Found> {
        Segment::walk_to(file, start, end_bytes, target, false)
    }

    /// [`find_batch`](Self::find_batch) from the index entry at or below
    /// `target` (`start`, from [`index_floor`](Self::index_floor)) in the
    /// segment based at `segment_base`, falling back to a walk from the
    /// segment's start when the data at the entry does not match it.
    ///
    /// The index is derived data (SPEC 2.3): only its last entry is checked
    /// at open, so a flipped byte in an earlier one leads the walk to a
    /// position inside a batch, or to a batch with another base offset.
    /// Walking from the segment's start tells the two apart: damaged data
    /// fails there too, at its own position, and an index that was wrong
    /// costs only the longer walk (found by the simulated disk, seed
    /// 60134360: a flip in an entry's position made a node report its
    /// intact data file corrupt). Once an entry was found wrong, the
    /// segment's walks all start at its start, and recovery rebuilds the
    /// index it walked around. Kafka does not check index entries on reads;
    /// it rebuilds an index it finds invalid at open.
    pub(crate) fn find_batch_via_index(
        file: &SegmentFile,
        start: (Offset, u64),
        segment_base: Offset,
        end_bytes: u64,
        target: Offset,
    ) -> Result<Found> {
        let from_start = (segment_base, 0);
        if start.1 == 0 {
            // Position 0 is the segment's first batch, at its base offset:
            // the index has no entry there (`note_batch`).
            debug_assert_eq!(start.0, segment_base, "{}", file.path().display());
            return Segment::find_batch(file, start, end_bytes, target);
        }
        if file.index_distrusted() {
            return Segment::find_batch(file, from_start, end_bytes, target);
        }
        if start.1 >= end_bytes {
            // An entry past the data names nothing the walk could check:
            // it would find the end there, without a word (review of
            // d224180).
            Segment::distrusted_index(file, start.1, || {
                format!("the entry lies past the data, which ends at byte {end_bytes}")
            });
            return Segment::find_batch(file, from_start, end_bytes, target);
        }
        match Segment::find_batch(file, start, end_bytes, target) {
            Err(Error::Corrupt {
                position, reason, ..
            }) if position == start.1 => {
                Segment::distrusted_index(file, position, || reason);
                Segment::find_batch(file, from_start, end_bytes, target)
            }
            found => found,
        }
    }

    /// Marks `file`'s index as wrong at the entry naming `position`,
    /// logging it the first time only: every later walk of the segment
    /// starts at its start (a long-lived log would otherwise log each read
    /// of the segment). Recovery rebuilds such an index at the next open
    /// that checks it; a running log keeps walking around it.
    fn distrusted_index(file: &SegmentFile, position: u64, reason: impl FnOnce() -> String) {
        if file.distrust_index() {
            tracing::warn!(
                path = %file.path().display(),
                position,
                reason = %reason(),
                "offset index entry does not match the data: this segment's reads now walk from its start"
            );
        }
    }

    /// [`find_batch_via_index`](Self::find_batch_via_index) in this
    /// segment, up to its valid end.
    pub(crate) fn find_indexed(&self, target: Offset) -> Result<Found> {
        Segment::find_batch_via_index(
            &self.file,
            self.index_floor(target),
            self.base_offset,
            self.size_bytes,
            target,
        )
    }

    /// Like [`find_batch`](Self::find_batch), but stops without reading it
    /// at the boundary where a batch starting at `target` would begin: that
    /// batch may be torn (recovery looks for the recovery point this way).
    pub(crate) fn find_boundary(
        file: &SegmentFile,
        start: (Offset, u64),
        end_bytes: u64,
        target: Offset,
    ) -> Result<Found> {
        Segment::walk_to(file, start, end_bytes, target, true)
    }

    fn walk_to(
        file: &SegmentFile,
        (start_offset, start_position): (Offset, u64),
        end_bytes: u64,
        target: Offset,
        stop_at_boundary: bool,
    ) -> Result<Found> {
        let mut position = start_position;
        // Offset the batch at `position` must start at.
        let mut next_offset = start_offset;
        while position < end_bytes {
            let corrupt = |reason: String| Error::Corrupt {
                path: file.path().to_path_buf(),
                position,
                reason,
            };
            if stop_at_boundary && next_offset == target {
                if position == start_position && position > 0 {
                    // Nothing walked vouches for this boundary: only the
                    // index entry the walk started from does. A torn entry
                    // (a power loss kept part of an index page: (4, 300)
                    // came back as (4, 44)) or a stale one would put the
                    // boundary inside a batch, and recovery would cut
                    // fsynced data there (found by the simulated disk,
                    // issue 28). The batch here may be torn, so only its
                    // header is read; one that does not say `target` makes
                    // the caller rebuild the index and walk from the start.
                    match file.read_header(position)? {
                        Ok(header) if header.base_offset == target => {}
                        Ok(header) => {
                            return Err(corrupt(format!(
                                "the offset index gives this position for offset {target}, \
                                 but the batch here starts at offset {}",
                                header.base_offset
                            )))
                        }
                        Err(e) => {
                            return Err(corrupt(format!(
                                "the offset index gives this position for offset {target}, \
                                 but no whole batch header is here: {e}"
                            )))
                        }
                    }
                }
                break;
            }
            let header = match file.read_header(position)? {
                Ok(header) => header,
                Err(e) => {
                    return Err(corrupt(format!(
                        "bad batch header while searching for offset {target}: {e}"
                    )))
                }
            };
            if header.base_offset != next_offset {
                return Err(corrupt(format!(
                    "batch starts at offset {}, expected {next_offset} (the offset {})",
                    header.base_offset,
                    if position == start_position {
                        "the offset index gives this position"
                    } else {
                        "the batch before it ends at"
                    }
                )));
            }
            let size = header.size_bytes() as u64;
            if position + size > end_bytes {
                return Err(corrupt(format!(
                    "batch of {size} bytes runs past the end of the data ({end_bytes} bytes)"
                )));
            }
            if header.last_offset() >= target {
                return Ok(Found::Batch { position, header });
            }
            position += size;
            next_offset = header.next_offset();
        }
        Ok(Found::End {
            position,
            next_offset,
        })
    }

    /// Where a walk to `target` starts: the index entry at or below it, as
    /// `(offset, position)`, or the segment's base at position 0.
    pub(crate) fn index_floor(&self, target: Offset) -> (Offset, u64) {
        if self.file.index_distrusted() {
            return (self.base_offset, 0);
        }
        self.index
            .lookup(target)
            .map_or((self.base_offset, 0), |e| (e.offset, e.position))
    }

    /// Walks batch headers from `position` to the end of the valid data,
    /// without reading batch bodies. Data that does not end on a batch
    /// boundary is corruption (this is only used on trusted data).
    fn walk_headers(&self, position: u64) -> Result<WalkSummary> {
        self.for_each_header(position, |_| {})
    }

    /// Walks batch headers from `position` to the end, calling `visit` for
    /// each (used to rebuild the epoch cache).
    pub(crate) fn for_each_header(
        &self,
        mut position: u64,
        mut visit: impl FnMut(&BatchHeader),
    ) -> Result<WalkSummary> {
        let mut summary = WalkSummary {
            next_offset: None,
            last_epoch: None,
            max_timestamp_ms: None,
            bytes_walked: 0,
        };
        while position < self.size_bytes {
            let header = match self.file.read_header(position)? {
                Ok(header) if position + header.size_bytes() as u64 <= self.size_bytes => header,
                Ok(header) => {
                    return Err(self.corrupt(
                        position,
                        format!(
                            "batch of {} bytes runs past the end of the file ({} bytes)",
                            header.size_bytes(),
                            self.size_bytes
                        ),
                    ))
                }
                Err(e) => return Err(self.corrupt(position, format!("bad batch header: {e}"))),
            };
            visit(&header);
            summary.next_offset = Some(header.next_offset());
            summary.last_epoch = Some(header.leader_epoch);
            summary.max_timestamp_ms = Some(
                summary
                    .max_timestamp_ms
                    .map_or(header.max_timestamp, |t| t.max(header.max_timestamp)),
            );
            summary.bytes_walked += header.size_bytes() as u64;
            position += header.size_bytes() as u64;
        }
        Ok(summary)
    }

    /// Records the end of a trusted segment that is followed by another one:
    /// it ends where the next begins, with no need to read it.
    pub(crate) fn assume_end(&mut self, next_offset: Offset) {
        self.next_offset = next_offset;
    }

    fn corrupt(&self, position: u64, reason: String) -> Error {
        Error::Corrupt {
            path: self.log_path().to_path_buf(),
            position,
            reason,
        }
    }

    /// Validates every batch from `position` (a batch boundary, whose
    /// preceding batches are trusted) to the end of the file, rebuilding the
    /// index entries from there: length within bounds, CRC, offsets
    /// contiguous from `start_offset`, and whatever `visit` checks (epochs).
    /// Stops at the first invalid byte, which it reports; it does not cut the
    /// file, but afterwards `size_bytes`, `next_offset` and the index
    /// describe the valid prefix only.
    pub(crate) fn recover_from(
        &mut self,
        position: u64,
        start_offset: Offset,
        index_interval_bytes: u64,
        mut visit: impl FnMut(&BatchHeader) -> std::result::Result<(), String>,
    ) -> Result<ScanEnd> {
        self.index.truncate_to_position(position);
        self.bytes_since_index_entry = self
            .index
            .last_entry()
            .map_or(position, |e| position - e.position);
        self.next_offset = start_offset;
        let end = self.size_bytes;
        let mut at = position;
        let mut window = Bytes::new();
        let mut window_start = at;
        let outcome = loop {
            if at >= end {
                break ScanEnd::Clean;
            }
            let in_window = ((at - window_start) as usize).min(window.len());
            match parse_header(&window[in_window..]) {
                Ok(header) => {
                    let size = header.size_bytes();
                    let bytes = window.slice(in_window..in_window + size);
                    let check = RecordBatch::from_parsed(header, bytes)
                        .map_err(|e| e.to_string())
                        .and_then(|_| {
                            if header.base_offset != self.next_offset {
                                Err(format!(
                                    "batch starts at offset {}, expected {}",
                                    header.base_offset, self.next_offset
                                ))
                            } else if header.last_offset().distance_from(self.base_offset)
                                > u64::from(u32::MAX)
                                || at + size as u64 > u64::from(u32::MAX)
                            {
                                Err("batch lies beyond what a segment can address".to_string())
                            } else {
                                visit(&header)
                            }
                        });
                    if let Err(reason) = check {
                        break ScanEnd::Invalid {
                            position: at,
                            reason,
                        };
                    }
                    self.note_batch(at, &header, index_interval_bytes);
                    at += size as u64;
                }
                Err(HeaderError::Incomplete { needed }) => {
                    let needed = needed.unwrap_or(BATCH_HEADER_BYTES);
                    if at + needed as u64 > end {
                        break ScanEnd::Invalid {
                            position: at,
                            reason: format!(
                                "torn batch: needs {needed} bytes, {} remain in the file",
                                end - at
                            ),
                        };
                    }
                    let len = (end - at).min(SCAN_WINDOW_BYTES.max(needed) as u64) as usize;
                    window = self.file.read_bytes(at, len)?;
                    window_start = at;
                    if window.len() < needed {
                        // Only this process writes the file, so a file that
                        // shrank while we scan it is treated like a torn tail.
                        break ScanEnd::Invalid {
                            position: at,
                            reason: "file ended while reading it".to_string(),
                        };
                    }
                }
                Err(HeaderError::Invalid(reason)) => {
                    break ScanEnd::Invalid {
                        position: at,
                        reason,
                    }
                }
            }
        };
        self.size_bytes = at;
        debug_assert!(self.check_invariants());
        Ok(outcome)
    }

    /// Whether a complete batch with a valid CRC, starting at offset
    /// `after` or later, lies anywhere in the data file from byte `from` to
    /// byte `end` (searched byte by byte: the bytes before it may be
    /// garbage). Recovery asks this before it cuts a tail it cannot prove
    /// uncommitted: valid batches after a bad one are not a torn write but
    /// damage in the middle of the log.
    pub(crate) fn valid_batch_within(
        file: &SegmentFile,
        from: u64,
        end: u64,
        after: Offset,
    ) -> Result<bool> {
        let mut window_start = from;
        while window_start + (BATCH_HEADER_BYTES as u64) <= end {
            let len = (end - window_start).min(SCAN_WINDOW_BYTES as u64) as usize;
            let window = file.read_bytes(window_start, len)?;
            if window.len() < BATCH_HEADER_BYTES {
                return Ok(false);
            }
            for at in 0..=window.len() - BATCH_HEADER_BYTES {
                let header = match parse_header(&window[at..]) {
                    Ok(header) => header,
                    Err(HeaderError::Incomplete { needed: Some(_) }) => {
                        decode_header_fields(&window[at..at + BATCH_HEADER_BYTES])
                    }
                    Err(_) => continue,
                };
                let position = window_start + at as u64;
                let size = header.size_bytes() as u64;
                if header.base_offset < after || position + size > end {
                    continue;
                }
                let bytes = if at + size as usize <= window.len() {
                    window.slice(at..at + size as usize)
                } else {
                    file.read_bytes(position, size as usize)?
                };
                if RecordBatch::from_bytes(bytes).is_ok() {
                    return Ok(true);
                }
            }
            // The next window overlaps this one by a header, so a batch
            // starting near the end of this window is still found.
            window_start += (window.len() - BATCH_HEADER_BYTES + 1) as u64;
        }
        Ok(false)
    }

    /// Whether the data file of the segment at `base` in `dir` holds a valid
    /// batch starting at offset `after` or later (see
    /// [`valid_batch_within`](Self::valid_batch_within)).
    pub(crate) fn file_holds_valid_batch(
        disk: &dyn Disk,
        dir: &Path,
        base: Offset,
        after: Offset,
    ) -> Result<bool> {
        let file = SegmentFile::open(disk, &log_path(dir, base), false)?;
        let end = file.len_bytes()?;
        Segment::valid_batch_within(&file, 0, end, after)
    }

    /// Checks a trusted segment (below the recovery point, not scanned) at
    /// its two ends, reading a few headers only: its first batch starts at
    /// its name's offset, and its last batch ends exactly at `next_base`,
    /// where the next segment starts (SPEC 2.3: segments tile the offsets).
    pub(crate) fn check_tiles(&self, next_base: Offset) -> Result<()> {
        if self.size_bytes == 0 {
            return Err(self.corrupt(
                0,
                format!(
                    "segment is empty but the next one starts at offset {next_base}, not {}",
                    self.base_offset
                ),
            ));
        }
        // `find_boundary` checks the first header walked against the index
        // entry (or the base at position 0) and every later one against the
        // one before it.
        self.check_first_batch()?;
        let last_indexed = self
            .index
            .last_entry()
            .map_or((self.base_offset, 0), |e| (e.offset, e.position));
        match Segment::find_boundary(&self.file, last_indexed, self.size_bytes, next_base)? {
            Found::End {
                position,
                next_offset,
            } if position == self.size_bytes && next_offset == next_base => Ok(()),
            Found::End {
                position,
                next_offset,
            } if position == self.size_bytes => Err(self.corrupt(
                position,
                format!(
                    "segment ends at offset {next_offset} but the next one starts at {next_base}"
                ),
            )),
            Found::End { position, .. } => Err(self.corrupt(
                position,
                format!(
                    "{} bytes follow offset {next_base}, where the next segment starts",
                    self.size_bytes - position
                ),
            )),
            Found::Batch { position, header } => Err(self.corrupt(
                position,
                format!(
                    "batch {}..={} runs past offset {next_base}, where the next segment starts",
                    header.base_offset,
                    header.last_offset()
                ),
            )),
        }
    }

    /// Checks that the segment's first batch starts at its name's offset
    /// (an empty segment passes).
    pub(crate) fn check_first_batch(&self) -> Result<()> {
        if self.size_bytes > 0 {
            Segment::find_batch(
                &self.file,
                (self.base_offset, 0),
                self.size_bytes,
                self.base_offset,
            )?;
        }
        Ok(())
    }

    /// Whether the last index entry points at a batch starting at the
    /// offset it names: when it does not, the index (not the data) is what
    /// a failed walk from it blames, and it is rebuilt. `Err` is an I/O
    /// error only.
    pub(crate) fn last_index_entry_matches(&self) -> Result<bool> {
        let Some(entry) = self.index.last_entry() else {
            return Ok(true);
        };
        Ok(match self.file.read_header(entry.position)? {
            Ok(header) => header.base_offset == entry.offset,
            Err(_) => false,
        })
    }

    /// An index entry before `position` that names `offset` or a later
    /// one, where `offset` is the batch found at `position`: such an entry
    /// cannot be right (offsets grow with positions), so the index is torn
    /// or stale and must be rebuilt. Recovery would otherwise keep it below
    /// the position it scans from and add entries for smaller offsets after
    /// it, breaking the order lookups rely on.
    pub(crate) fn index_entry_contradicting(
        &self,
        position: u64,
        offset: Offset,
    ) -> Option<(Offset, u64)> {
        self.index
            .last_entry_before(position)
            .filter(|e| e.offset >= offset)
            .map(|e| (e.offset, e.position))
    }

    /// Replaces the offset index with an empty one of `index_bytes_max`
    /// bytes, to be rebuilt by [`recover_from`](Self::recover_from) from
    /// position 0 and then [sealed](Self::seal). (It was created with no
    /// room, so that a rebuilt index held no entry at all, and every read
    /// of its segment walked from the segment start.)
    pub(crate) fn discard_index(&mut self, index_bytes_max: u64) -> Result<()> {
        let path = self.index.path().to_path_buf();
        self.index = OffsetIndex::create(&*self.disk, &path, self.base_offset, index_bytes_max)?;
        self.bytes_since_index_entry = 0;
        self.file.index_distrusted.store(false, Ordering::Release);
        Ok(())
    }

    /// Cuts the data file to `position` (a batch boundary) and drops the
    /// index entries at or after it. `next_offset`, the new end, is given by
    /// the caller, who knows which batch starts there.
    pub(crate) fn truncate_to_position(
        &mut self,
        position: u64,
        next_offset: Offset,
        last_epoch: Option<LeaderEpoch>,
    ) -> Result<()> {
        self.file.truncate(position)?;
        self.index.truncate_to(position, next_offset);
        self.size_bytes = position;
        self.next_offset = next_offset;
        self.last_epoch = last_epoch;
        self.bytes_since_index_entry = self
            .index
            .last_entry()
            .map_or(position, |e| position - e.position);
        debug_assert!(self.check_invariants());
        Ok(())
    }

    /// Largest record timestamp in the segment (ms), walking the headers
    /// after the last index entry if it is not known yet.
    ///
    /// Kafka keeps a time index for this; we approximate the segment's newest
    /// record by the batches after its last index entry, which for records
    /// appended in time order is the same thing.
    pub(crate) fn max_timestamp_ms(&mut self) -> Result<Option<i64>> {
        if self.max_timestamp_ms.is_none() && self.size_bytes > 0 {
            let from = self.index.last_entry().map_or(0, |e| e.position);
            self.max_timestamp_ms = self.walk_headers(from)?.max_timestamp_ms;
        }
        Ok(self.max_timestamp_ms)
    }

    /// Makes the segment's data durable.
    pub(crate) fn sync_data(&self) -> Result<()> {
        self.file.sync_data()
    }

    /// Makes the index durable as it is now. Whoever zeroes entries (a
    /// truncation, recovery) calls it before data other than what those
    /// entries named may take their place: an index on disk must hold
    /// correct entries or none (see `Log::truncate_to`).
    pub(crate) fn sync_index(&self) -> Result<()> {
        self.index.sync()
    }

    /// Flushes the index and trims it to the entries in use (the segment
    /// stops being the active one, or the log closes).
    pub(crate) fn seal(&mut self) -> Result<()> {
        self.index.trim_to_used()?;
        self.index
            .keep_checked_entries(self.size_bytes, self.next_offset);
        Ok(())
    }

    /// [`seal`](Self::seal) at a roll: the index is trimmed but not synced;
    /// returns a handle on it for the flush that moves the recovery point
    /// past this segment.
    pub(crate) fn seal_for_roll(&mut self) -> Result<IndexSyncHandle> {
        self.index.trim_to_used_unsynced()?;
        self.index
            .keep_checked_entries(self.size_bytes, self.next_offset);
        self.index.sync_handle()
    }

    /// Grows the index back to `index_bytes_max` (the segment becomes the
    /// active one again, after a reopen). Like every remap, it keeps only
    /// the entries that still pass an open's checks
    /// ([`OffsetIndex::keep_checked_entries`]).
    pub(crate) fn unseal(&mut self, index_bytes_max: u64) -> Result<()> {
        self.index.resize(index_bytes_max)?;
        if self
            .index
            .keep_checked_entries(self.size_bytes, self.next_offset)
            .is_some()
        {
            self.bytes_since_index_entry = self
                .index
                .last_entry()
                .map_or(self.size_bytes, |e| self.size_bytes - e.position);
        }
        Ok(())
    }

    /// Test harness only: what a power loss now would leave of the index
    /// file.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn index_durable_image(&self) -> super::offset_index::FileImage {
        self.index.durable_image()
    }

    /// Removes both files and keeps the segment open: reads through it go
    /// on (the files' bytes stay until it is dropped, as on Linux), for an
    /// owner that must still hold it should a later step fail.
    pub(crate) fn delete_files(&self) -> Result<()> {
        remove_if_exists(&*self.disk, self.index_path())?;
        remove_if_exists(&*self.disk, self.log_path())
    }

    /// Removes both files.
    pub(crate) fn delete(self) -> Result<()> {
        let log = self.log_path().to_path_buf();
        let index = self.index_path().to_path_buf();
        let disk = Arc::clone(&self.disk);
        drop(self);
        remove_if_exists(&*disk, &index)?;
        remove_if_exists(&*disk, &log)
    }

    /// Checks the type's invariant.
    pub(crate) fn check_invariants(&self) -> bool {
        self.next_offset >= self.base_offset
            && self.index.check_invariants()
            && self
                .index
                .last_entry()
                .is_none_or(|e| e.position < self.size_bytes.max(1))
    }
}

/// Deletes a file, ignoring one that is already gone.
pub(crate) fn remove_if_exists(disk: &dyn Disk, path: &Path) -> Result<()> {
    match disk.remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(path, "delete", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_round_trip_and_reject_strangers() {
        assert_eq!(file_stem(Offset(42)), "00000000000000000042");
        let table = [
            ("00000000000000000042.log", Some(Offset(42))),
            ("18446744073709551615.log", Some(Offset(u64::MAX))),
            ("0000000000000000042.log", None),
            ("00000000000000000042.index", None),
            ("0000000000000000004x.log", None),
            ("99999999999999999999.log", None),
        ];
        for (name, expected) in table {
            assert_eq!(parse_log_file_name(name), expected, "{name}");
        }
    }
}
