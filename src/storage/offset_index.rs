//! The sparse offset index of one segment (SPEC 2.1): a memory-mapped file of
//! fixed-size entries `(relative offset: u32, position: u32)`, little-endian,
//! mapping the base offset of some batches to their byte position in the
//! segment's data file.
//!
//! This module owns the index file, its mapping and its sanity check. It does
//! not decide *when* an entry is added (the segment does, every
//! `index_interval_bytes`) and it never reads the data file; rebuilding an
//! index from data is the segment's job.
//!
//! The file is reached through the storage [`Disk`]: on the real disk its
//! mapping is `mmap` (`disk/mmap.rs`, the crate's only `unsafe` code), on
//! the simulated one a buffer whose `flush` is what makes it durable.
//!
//! Like Kafka's `OffsetIndex`, the file of the active segment is
//! preallocated to `index_bytes_max` and trimmed to the entries in use when
//! the segment is rolled or the log is closed.
//!
//! Unlike Kafka, an entry never describes the first batch of a segment (that
//! one is always at position 0): every valid entry therefore has a non-zero
//! relative offset and position, and an all-zero entry marks the end of the
//! used entries in a preallocated file. That lets a file left preallocated by
//! a crash be read back without a rebuild.

use std::path::{Path, PathBuf};

use super::disk::{Disk, DiskFile, MappedRegion, OpenMode};
use crate::error::{Error, Result};
use crate::types::Offset;

/// Bytes of one index entry.
pub(crate) const INDEX_ENTRY_BYTES: usize = 8;
const _: () = assert!(INDEX_ENTRY_BYTES == 4 + 4);

/// One index entry, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexEntry {
    /// Base offset of the indexed batch.
    pub offset: Offset,
    /// Byte position of that batch in the data file.
    pub position: u64,
}

/// The offset index of one segment.
///
/// Invariant: the first `entries` slots hold strictly increasing, non-zero
/// relative offsets and positions; `entries <= capacity`.
#[derive(Debug)]
pub(crate) struct OffsetIndex {
    path: PathBuf,
    base_offset: Offset,
    file: Box<dyn DiskFile>,
    /// `None` while the file is empty (an empty file cannot be mapped).
    mmap: Option<Box<dyn MappedRegion>>,
    entries: usize,
    /// Number of entries the current mapping can hold.
    capacity: usize,
    /// Test harness only: the file as written and as the last sync left it.
    #[cfg(any(test, feature = "testing"))]
    images: SharedImages,
}

/// Test harness only: an index file as this process wrote it (through the
/// mapping, and its length) and as its last sync left it on disk, so that
/// a simulated power loss can drop what no sync covered
/// (`Log::lose_unsynced_index_writes`). A file this process found on disk
/// counts as durable as found.
#[cfg(any(test, feature = "testing"))]
#[derive(Debug, Default)]
pub(crate) struct IndexImages {
    written: FileImage,
    durable: FileImage,
}

/// Test harness only: a file's length and bytes, every byte after
/// `prefix` zero (an index is written from the front, and preallocated
/// with zeros: this keeps the image as small as the entries in use).
#[cfg(any(test, feature = "testing"))]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FileImage {
    pub(crate) len: u64,
    pub(crate) prefix: Vec<u8>,
}

#[cfg(any(test, feature = "testing"))]
impl FileImage {
    fn of(bytes: &[u8]) -> FileImage {
        let used = bytes.iter().rposition(|&b| b != 0).map_or(0, |at| at + 1);
        FileImage {
            len: bytes.len() as u64,
            prefix: bytes[..used].to_vec(),
        }
    }

    fn resize(&mut self, len: u64) {
        self.len = len;
        self.prefix.truncate(len as usize);
    }

    fn write(&mut self, at: usize, bytes: &[u8]) {
        if self.prefix.len() < at + bytes.len() {
            self.prefix.resize(at + bytes.len(), 0);
        }
        self.prefix[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn zero(&mut self, from: usize, to: usize) {
        let to = to.min(self.prefix.len());
        if from < to {
            self.prefix[from..to].fill(0);
        }
    }
}

#[cfg(any(test, feature = "testing"))]
type SharedImages = std::sync::Arc<std::sync::Mutex<IndexImages>>;

#[cfg(any(test, feature = "testing"))]
fn lock_images(images: &SharedImages) -> std::sync::MutexGuard<'_, IndexImages> {
    images
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A second handle on a rolled segment's index file, to fsync it later
/// (issue 27: not on the appending thread).
#[derive(Debug)]
pub(crate) struct IndexSyncHandle {
    file: Box<dyn DiskFile>,
    path: PathBuf,
    #[cfg(any(test, feature = "testing"))]
    images: SharedImages,
}

impl IndexSyncHandle {
    /// Makes the index file durable as it is now.
    pub(crate) fn sync_data(&self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io(&self.path, "fsync a rolled segment's index", e))?;
        #[cfg(any(test, feature = "testing"))]
        {
            let mut images = lock_images(&self.images);
            images.durable = images.written.clone();
        }
        Ok(())
    }
}

/// Why an existing index file was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexProblem(pub String);

fn round_down_to_entry(bytes: u64) -> u64 {
    bytes - bytes % INDEX_ENTRY_BYTES as u64
}

fn decode_entry(bytes: &[u8], slot: usize) -> (u32, u32) {
    let at = slot * INDEX_ENTRY_BYTES;
    let relative = u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let position = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
    (relative, position)
}

/// Sanity-checks the bytes of an index file against its data file's length
/// (entries strictly increasing, non-zero, inside the data, zero
/// preallocation after them) and returns how many entries are in use. Reads
/// only: shared by [`OffsetIndex::open_checked`] and the read-only inspector.
pub(crate) fn check_entries(
    bytes: &[u8],
    base_offset: Offset,
    data_bytes: u64,
) -> std::result::Result<usize, IndexProblem> {
    let slots = bytes.len() / INDEX_ENTRY_BYTES;
    let mut used = 0;
    let mut previous = (0u32, 0u32);
    for slot in 0..slots {
        let (relative, position) = decode_entry(bytes, slot);
        if (relative, position) == (0, 0) {
            break;
        }
        if let Some(problem) = entry_problem(slot, previous, bytes, base_offset, data_bytes, None) {
            return Err(problem);
        }
        previous = (relative, position);
        used += 1;
    }
    // Everything after the used entries must be zero preallocation, or
    // the file is garbage that merely starts well.
    if !is_all_zero(&bytes[used * INDEX_ENTRY_BYTES..]) {
        return Err(IndexProblem(format!(
            "non-zero bytes after the {used} used entries"
        )));
    }
    Ok(used)
}

/// What is wrong with the entry in `slot` of `bytes`, which follows
/// `previous` (relative offset, position; `(0, 0)` for the first): it must
/// come after it in both, point inside the `data_bytes` of data, not
/// overflow `base_offset`, and, when the segment's `next_offset` is known,
/// name an offset below it.
fn entry_problem(
    slot: usize,
    previous: (u32, u32),
    bytes: &[u8],
    base_offset: Offset,
    data_bytes: u64,
    next_offset: Option<Offset>,
) -> Option<IndexProblem> {
    let (relative, position) = decode_entry(bytes, slot);
    if relative <= previous.0 || position <= previous.1 {
        return Some(IndexProblem(format!(
            "entry {slot} ({relative}, {position}) does not follow ({}, {})",
            previous.0, previous.1
        )));
    }
    if u64::from(position) >= data_bytes {
        return Some(IndexProblem(format!(
            "entry {slot} points at byte {position}, past the {data_bytes} byte data file"
        )));
    }
    // The base offset comes from the file name: an entry past u64::MAX
    // from it is garbage, and reading it back would overflow.
    let Some(offset) = base_offset.0.checked_add(u64::from(relative)) else {
        return Some(IndexProblem(format!(
            "entry {slot} (relative offset {relative}) overflows base offset {base_offset}"
        )));
    };
    // Without this bound a flipped high bit of an offset passed, and the
    // next, good entry was blamed for not following it: the flipped one
    // stayed last, and the next append's entry fell below it (simulator
    // seed 20024806, `OffsetIndex::append`'s invariant).
    if let Some(next_offset) = next_offset.filter(|next| offset >= next.0) {
        return Some(IndexProblem(format!(
            "entry {slot} names offset {offset}, at or past the segment's end {next_offset}"
        )));
    }
    None
}

/// Whether every byte of `bytes` is zero, compared a block at a time
/// against zeros (a `memcmp`, fast even unoptimised: a byte-by-byte scan of
/// a 10 MiB preallocated index dominated a simulated run's restarts).
fn is_all_zero(bytes: &[u8]) -> bool {
    const ZEROS: [u8; 4096] = [0; 4096];
    bytes
        .chunks(ZEROS.len())
        .all(|block| block == &ZEROS[..block.len()])
}

impl OffsetIndex {
    /// Creates (or empties) the index file at `path`, preallocated to
    /// `index_bytes_max`.
    pub(crate) fn create(
        disk: &dyn Disk,
        path: &Path,
        base_offset: Offset,
        index_bytes_max: u64,
    ) -> Result<OffsetIndex> {
        // What a power loss would bring back of a file this replaces.
        #[cfg(any(test, feature = "testing"))]
        let images = SharedImages::new(std::sync::Mutex::new(IndexImages {
            written: FileImage::default(),
            durable: FileImage::of(&disk.read(path).unwrap_or_default()),
        }));
        let file = disk
            .open(path, OpenMode::CreateTruncate)
            .map_err(|e| Error::io(path, "create index", e))?;
        let mut index = OffsetIndex {
            path: path.to_path_buf(),
            base_offset,
            file,
            mmap: None,
            entries: 0,
            capacity: 0,
            #[cfg(any(test, feature = "testing"))]
            images,
        };
        index.resize(index_bytes_max)?;
        Ok(index)
    }

    /// Opens an existing index file and sanity-checks it against the data
    /// file's length: size a multiple of the entry size, entries strictly
    /// increasing, positions inside the data. `Ok(Err(problem))` when the file
    /// is missing or fails the check (the caller rebuilds it); `Err` only for
    /// an I/O failure.
    pub(crate) fn open_checked(
        disk: &dyn Disk,
        path: &Path,
        base_offset: Offset,
        data_bytes: u64,
    ) -> Result<std::result::Result<OffsetIndex, IndexProblem>> {
        let file = match disk.open(path, OpenMode::ReadWrite) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Err(IndexProblem("index file is missing".into())))
            }
            Err(e) => return Err(Error::io(path, "open index", e)),
        };
        let len = file
            .length_bytes()
            .map_err(|e| Error::io(path, "stat index", e))?;
        if len % INDEX_ENTRY_BYTES as u64 != 0 {
            return Ok(Err(IndexProblem(format!(
                "index size {len} is not a multiple of {INDEX_ENTRY_BYTES}"
            ))));
        }
        let mut index = OffsetIndex {
            path: path.to_path_buf(),
            base_offset,
            file,
            mmap: None,
            entries: 0,
            capacity: 0,
            #[cfg(any(test, feature = "testing"))]
            images: SharedImages::default(),
        };
        index.map(len)?;
        match check_entries(index.mapped(), base_offset, data_bytes) {
            Ok(used) => index.entries = used,
            Err(problem) => return Ok(Err(problem)),
        }
        #[cfg(any(test, feature = "testing"))]
        {
            // Zeros after the used entries (the check saw to it).
            let found = FileImage {
                len,
                prefix: index.mapped()[..index.entries * INDEX_ENTRY_BYTES].to_vec(),
            };
            *lock_images(&index.images) = IndexImages {
                written: found.clone(),
                durable: found,
            };
        }
        Ok(Ok(index))
    }

    fn mapped(&self) -> &[u8] {
        self.mmap.as_deref().map_or(&[], |mmap| mmap.bytes())
    }

    /// Maps the file at its current length `len`.
    fn map(&mut self, len: u64) -> Result<()> {
        self.mmap = None;
        self.capacity = 0;
        if len == 0 {
            return Ok(());
        }
        // The file's length changes only after the mapping is dropped (see
        // `resize`).
        let mmap = self
            .file
            .map(len)
            .map_err(|e| Error::io(&self.path, "mmap index", e))?;
        self.capacity = mmap.bytes().len() / INDEX_ENTRY_BYTES;
        self.mmap = Some(mmap);
        Ok(())
    }

    /// Changes the file's length to `bytes` (rounded down to whole entries,
    /// never below the used entries) and remaps it.
    pub(crate) fn resize(&mut self, bytes: u64) -> Result<()> {
        let used = (self.entries * INDEX_ENTRY_BYTES) as u64;
        let len = round_down_to_entry(bytes).max(used);
        // The mapping must go before the file shrinks: touching a mapped page
        // beyond the end of a file is SIGBUS.
        self.mmap = None;
        self.capacity = 0;
        self.file
            .set_len(len)
            .map_err(|e| Error::io(&self.path, "resize index", e))?;
        #[cfg(any(test, feature = "testing"))]
        lock_images(&self.images).written.resize(len);
        self.map(len)
    }

    /// Keeps the entries in use only as far as they pass the checks an
    /// open makes ([`check_entries`]) against `data_bytes` of data, and
    /// drops the rest; returns the problem of the first dropped one. A
    /// remap ([`resize`](Self::resize)) reads the entries from the file
    /// again, and a page the kernel dropped comes back from the medium as
    /// it is there: a flipped bit then reaches lookups and appends that no
    /// check has seen (the simulator, seed 3385296584: a flip in a sealed
    /// segment's index, remapped when a truncation made the segment active
    /// again, broke the index's order at the next append). The index is
    /// sparse, so fewer entries only cost lookups some reading.
    pub(crate) fn keep_checked_entries(
        &mut self,
        data_bytes: u64,
        next_offset: Offset,
    ) -> Option<IndexProblem> {
        let mut previous = (0u32, 0u32);
        for slot in 0..self.entries {
            let bytes = self.mapped();
            if let Some(problem) = entry_problem(
                slot,
                previous,
                bytes,
                self.base_offset,
                data_bytes,
                Some(next_offset),
            ) {
                tracing::warn!(path = %self.path.display(), problem = %problem.0,
                    "the offset index no longer reads back as written; dropping its entries from there");
                self.drop_entries_from(slot);
                return Some(problem);
            }
            previous = decode_entry(bytes, slot);
        }
        None
    }

    /// Trims the file to the entries in use, its mapped pages written
    /// back first (on close: the next open trusts a clean close's index).
    pub(crate) fn trim_to_used(&mut self) -> Result<()> {
        self.flush()?;
        self.trim_to_used_unsynced()
    }

    /// Trims the file to the entries in use without waiting for its pages
    /// to reach the disk (on roll, issue 27: an msync there held the
    /// appender for up to 220 ms while the disk wrote the previous
    /// segment back). The pages stay in the page cache, where reads see
    /// them; whoever moves the recovery point past this segment fsyncs the
    /// file first ([`sync_handle`](Self::sync_handle)).
    pub(crate) fn trim_to_used_unsynced(&mut self) -> Result<()> {
        self.resize((self.entries * INDEX_ENTRY_BYTES) as u64)
    }

    /// A second handle on the index file, to fsync it later.
    pub(crate) fn sync_handle(&self) -> Result<IndexSyncHandle> {
        let file = self
            .file
            .try_clone()
            .map_err(|e| Error::io(&self.path, "open the index again", e))?;
        Ok(IndexSyncHandle {
            file,
            path: self.path.clone(),
            #[cfg(any(test, feature = "testing"))]
            images: self.images.clone(),
        })
    }

    /// Writes the mapped pages back to the file.
    pub(crate) fn flush(&self) -> Result<()> {
        if let Some(mmap) = &self.mmap {
            mmap.flush()
                .map_err(|e| Error::io(&self.path, "flush index", e))?;
        }
        #[cfg(any(test, feature = "testing"))]
        {
            let mut images = lock_images(&self.images);
            images.durable = images.written.clone();
        }
        Ok(())
    }

    /// Makes the file durable as it is now: its mapped pages and its
    /// length.
    pub(crate) fn sync(&self) -> Result<()> {
        self.flush()?;
        self.file
            .sync_data()
            .map_err(|e| Error::io(&self.path, "fsync index", e))
    }

    /// Test harness only: what a power loss now would leave of the file
    /// (see [`IndexImages`]).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn durable_image(&self) -> FileImage {
        lock_images(&self.images).durable.clone()
    }

    /// Whether no further entry fits.
    pub(crate) fn is_full(&self) -> bool {
        self.entries >= self.capacity
    }

    /// Number of entries in use.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.entries
    }

    /// The path of the index file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Every used entry, oldest first (for `testing::fuzz`, which shows what
    /// a decoded file holds).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn used_entries(&self) -> Vec<IndexEntry> {
        (0..self.entries).map(|slot| self.entry(slot)).collect()
    }

    /// The newest entry, if any.
    pub(crate) fn last_entry(&self) -> Option<IndexEntry> {
        self.entries.checked_sub(1).map(|slot| self.entry(slot))
    }

    fn entry(&self, slot: usize) -> IndexEntry {
        let (relative, position) = decode_entry(self.mapped(), slot);
        IndexEntry {
            offset: self.base_offset.plus(u64::from(relative)),
            position: u64::from(position),
        }
    }

    /// The entry with the largest position below `position`, if any.
    pub(crate) fn last_entry_before(&self, position: u64) -> Option<IndexEntry> {
        let (mut low, mut high) = (0usize, self.entries);
        while low < high {
            let mid = low + (high - low) / 2;
            if self.entry(mid).position < position {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low.checked_sub(1).map(|slot| self.entry(slot))
    }

    /// Adds an entry for the batch starting at `offset`, at `position`.
    /// Returns `false` (and adds nothing) when the index is full. The caller
    /// guarantees the entry is newer than the last one and that both fit in
    /// 32 bits relative to the segment.
    pub(crate) fn append(&mut self, offset: Offset, position: u64) -> bool {
        if self.is_full() {
            return false;
        }
        let relative = offset.distance_from(self.base_offset);
        debug_assert!(relative > 0 && relative <= u64::from(u32::MAX));
        debug_assert!(position > 0 && position <= u64::from(u32::MAX));
        debug_assert!(self
            .last_entry()
            .is_none_or(|last| last.offset < offset && last.position < position));
        let slot = self.entries;
        let Some(mmap) = self.mmap.as_mut() else {
            return false;
        };
        let mmap = mmap.bytes_mut();
        let at = slot * INDEX_ENTRY_BYTES;
        mmap[at..at + 4].copy_from_slice(&(relative as u32).to_le_bytes());
        mmap[at + 4..at + 8].copy_from_slice(&(position as u32).to_le_bytes());
        #[cfg(any(test, feature = "testing"))]
        lock_images(&self.images)
            .written
            .write(at, &mmap[at..at + INDEX_ENTRY_BYTES]);
        self.entries += 1;
        true
    }

    /// The entry with the largest offset `<= target`, or `None` if every
    /// entry is above it (then the search starts at position 0).
    pub(crate) fn lookup(&self, target: Offset) -> Option<IndexEntry> {
        let (mut low, mut high) = (0usize, self.entries);
        while low < high {
            let mid = low + (high - low) / 2;
            if self.entry(mid).offset <= target {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        low.checked_sub(1).map(|slot| self.entry(slot))
    }

    /// Drops every entry for a batch at or after `position` (truncation).
    /// The slots are zeroed so the file reads back the same after a crash.
    pub(crate) fn truncate_to_position(&mut self, position: u64) {
        self.truncate_to(position, Offset(u64::MAX));
    }

    /// Drops every entry from the first one at or after `position`, or
    /// naming an offset at or after `end` (the segment's new end): a
    /// truncation that found its cut by walking from the segment start,
    /// because an entry did not match the data, must not keep that entry
    /// when its flipped position fell below the cut (review of d224180:
    /// the next append at `end` would be indexed after an entry naming
    /// `end` already).
    pub(crate) fn truncate_to(&mut self, position: u64, end: Offset) {
        let keep = (0..self.entries)
            .take_while(|&slot| {
                let entry = self.entry(slot);
                entry.position < position && entry.offset < end
            })
            .count();
        self.drop_entries_from(keep);
    }

    /// Zeroes the entries from `keep` on and stops using them.
    fn drop_entries_from(&mut self, keep: usize) {
        if let Some(mmap) = self.mmap.as_mut() {
            mmap.bytes_mut()[keep * INDEX_ENTRY_BYTES..self.entries * INDEX_ENTRY_BYTES].fill(0);
        }
        #[cfg(any(test, feature = "testing"))]
        lock_images(&self.images)
            .written
            .zero(keep * INDEX_ENTRY_BYTES, self.entries * INDEX_ENTRY_BYTES);
        self.entries = keep;
    }

    /// Checks the invariant of the type.
    pub(crate) fn check_invariants(&self) -> bool {
        self.entries <= self.capacity
            && (1..self.entries).all(|slot| {
                let (a, b) = (self.entry(slot - 1), self.entry(slot));
                a.offset < b.offset && a.position < b.position
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::StdDisk;

    fn entry(offset: u64, position: u64) -> IndexEntry {
        IndexEntry {
            offset: Offset(offset),
            position,
        }
    }

    #[test]
    fn lookup_finds_the_floor_entry() {
        let dir = tempfile::tempdir().unwrap();
        let mut index =
            OffsetIndex::create(&StdDisk, &dir.path().join("a.index"), Offset(100), 80).unwrap();
        assert!(index.append(Offset(110), 1000));
        assert!(index.append(Offset(120), 2000));
        assert!(index.append(Offset(130), 3000));
        let table = [
            (100, None),
            (109, None),
            (110, Some(entry(110, 1000))),
            (119, Some(entry(110, 1000))),
            (125, Some(entry(120, 2000))),
            (500, Some(entry(130, 3000))),
        ];
        for (target, expected) in table {
            assert_eq!(index.lookup(Offset(target)), expected, "target {target}");
        }
        assert!(index.check_invariants());
    }

    /// Seed 3385296584 of the simulator: a bit flipped in the file of a
    /// sealed index, then a remap (the segment became active again).
    #[test]
    fn a_remap_keeps_only_the_entries_that_pass_the_checks() {
        use crate::storage::disk::SimDisk;
        let disk = SimDisk::new(1);
        let dir = Path::new("/d");
        disk.create_dir_all(dir).unwrap();
        let path = dir.join("a.index");
        let mut index = OffsetIndex::create(&disk, &path, Offset(100), 80).unwrap();
        assert!(index.append(Offset(110), 1000));
        assert!(index.append(Offset(120), 2000));
        assert!(index.append(Offset(125), 2500));
        index.trim_to_used().unwrap();
        index.sync().unwrap();
        assert_eq!(index.keep_checked_entries(5000, Offset(200)), None);
        // The top byte of the second entry's position: 2000 + 2^30.
        disk.flip_bit_at(&path, 15, 6).unwrap();
        index.resize(80).unwrap();
        let problem = index
            .keep_checked_entries(5000, Offset(200))
            .expect("the flip is seen");
        assert!(
            problem.0.contains("entry 1 points at byte 1073743824"),
            "{problem:?}"
        );
        assert_eq!(index.used_entries(), vec![entry(110, 1000)]);
        assert!(index.append(Offset(130), 3000));
        assert!(index.check_invariants());
        index.sync().unwrap();
        let on_disk = disk.contents(&path).unwrap();
        assert_eq!(decode_entry(&on_disk, 1), (30, 3000));
        assert_eq!(
            decode_entry(&on_disk, 2),
            (0, 0),
            "dropped entries are zeroed"
        );
        // Entries past the data go the same way.
        assert!(index.keep_checked_entries(3000, Offset(200)).is_some());
        assert_eq!(index.used_entries(), vec![entry(110, 1000)]);
        // So does an entry naming an offset at or past the segment's end
        // (a flipped high bit of its relative offset), itself, not the
        // next one (seed 20024806).
        assert!(index.append(Offset(130), 2000));
        assert!(index.append(Offset(140), 2500));
        index.sync().unwrap();
        disk.flip_bit_at(&path, 11, 3).unwrap();
        index.resize(80).unwrap();
        let problem = index
            .keep_checked_entries(5000, Offset(150))
            .expect("the flip is seen");
        assert!(problem.0.contains("entry 1 names offset"), "{problem:?}");
        assert_eq!(index.used_entries(), vec![entry(110, 1000)]);
    }

    #[test]
    fn full_index_refuses_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut index =
            OffsetIndex::create(&StdDisk, &dir.path().join("a.index"), Offset(0), 17).unwrap();
        assert!(index.append(Offset(1), 10));
        assert!(index.append(Offset(2), 20));
        assert!(index.is_full());
        assert!(!index.append(Offset(3), 30));
    }

    #[test]
    fn preallocated_and_trimmed_files_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.index");
        let mut index = OffsetIndex::create(&StdDisk, &path, Offset(5), 1024).unwrap();
        index.append(Offset(7), 100);
        index.append(Offset(9), 200);
        index.flush().unwrap();
        drop(index);
        // As a crash leaves it: preallocated with zero slots after the entries.
        let reopened = OffsetIndex::open_checked(&StdDisk, &path, Offset(5), 300)
            .unwrap()
            .unwrap();
        assert_eq!(reopened.entries(), 2);
        assert_eq!(reopened.last_entry(), Some(entry(9, 200)));
        let mut reopened = reopened;
        reopened.trim_to_used().unwrap();
        drop(reopened);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 16);
        let again = OffsetIndex::open_checked(&StdDisk, &path, Offset(5), 300)
            .unwrap()
            .unwrap();
        assert_eq!(again.lookup(Offset(8)), Some(entry(7, 100)));
    }

    #[test]
    fn sanity_check_rejects_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.index");
        let le = |r: u32, p: u32| [r.to_le_bytes(), p.to_le_bytes()].concat();
        let cases: Vec<(&str, Vec<u8>, u64, &str)> = vec![
            (
                "odd size",
                vec![1, 2, 3],
                1000,
                "index size 3 is not a multiple of 8",
            ),
            (
                "decreasing",
                [le(5, 100), le(4, 200)].concat(),
                1000,
                "entry 1 (4, 200) does not follow (5, 100)",
            ),
            (
                "same position",
                [le(5, 100), le(6, 100)].concat(),
                1000,
                "entry 1 (6, 100) does not follow (5, 100)",
            ),
            (
                "past the data",
                [le(5, 100), le(6, 2000)].concat(),
                1000,
                "entry 1 points at byte 2000, past the 1000 byte data file",
            ),
            (
                "garbage after zeros",
                [le(5, 100), le(0, 0), le(9, 9)].concat(),
                1000,
                "non-zero bytes after the 1 used entries",
            ),
        ];
        for (name, bytes, data_bytes, reason) in cases {
            std::fs::write(&path, &bytes).unwrap();
            let result = OffsetIndex::open_checked(&StdDisk, &path, Offset(0), data_bytes).unwrap();
            match result {
                Err(problem) => assert_eq!(problem, IndexProblem(reason.into()), "{name}"),
                Ok(_) => panic!("{name} was accepted"),
            }
        }
        std::fs::remove_file(&path).unwrap();
        match OffsetIndex::open_checked(&StdDisk, &path, Offset(0), 10).unwrap() {
            Err(problem) => assert_eq!(problem, IndexProblem("index file is missing".into())),
            Ok(_) => panic!("a missing index was opened"),
        }
    }

    /// Regression (found by `tests/storage/decoders_never_panic_on_arbitrary_bytes.rs`):
    /// an index whose relative offsets, added to the base offset its segment's
    /// file name gives, pass `u64::MAX` was accepted, and reading an entry
    /// back overflowed (a panic in debug builds, a wrong offset in release).
    /// Such an entry now fails the sanity check, so the index is rebuilt.
    #[test]
    fn entry_overflowing_the_base_offset_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.index");
        let le = |r: u32, p: u32| [r.to_le_bytes(), p.to_le_bytes()].concat();
        std::fs::write(&path, [le(1, 100), le(u32::MAX, 200)].concat()).unwrap();
        let base = Offset(u64::MAX - 10);
        let problem = OffsetIndex::open_checked(&StdDisk, &path, base, 1000)
            .unwrap()
            .expect_err("an overflowing entry was accepted");
        assert!(problem.0.contains("overflows"), "{problem:?}");
        // The largest entry that fits is still accepted.
        std::fs::write(&path, [le(1, 100), le(10, 200)].concat()).unwrap();
        let index = OffsetIndex::open_checked(&StdDisk, &path, base, 1000)
            .unwrap()
            .unwrap();
        assert_eq!(index.last_entry(), Some(entry(u64::MAX, 200)));
    }

    #[test]
    fn is_all_zero_finds_a_non_zero_byte_anywhere_in_any_block() {
        assert!(is_all_zero(&[]));
        for len in [1, 4095, 4096, 4097, 3 * 4096 + 5] {
            let mut bytes = vec![0u8; len];
            assert!(is_all_zero(&bytes), "{len}");
            for at in [0, len / 2, len - 1] {
                bytes[at] = 1;
                assert!(!is_all_zero(&bytes), "{len} at {at}");
                bytes[at] = 0;
            }
        }
    }

    /// A truncation whose cut was found by walking past a misplaced entry
    /// (its position flipped below the cut) drops that entry by its
    /// offset: kept, the next append at the new end would be indexed after
    /// an entry naming that very offset.
    #[test]
    fn truncation_drops_entries_naming_the_new_end_or_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.index");
        let mut index = OffsetIndex::create(&StdDisk, &path, Offset(0), 64).unwrap();
        index.append(Offset(3), 100);
        index.append(Offset(6), 200);
        index.append(Offset(9), 300);
        // Cut at the batch of offset 6, at byte 400 (the entry's position
        // said 200): by position alone every entry stays.
        index.truncate_to(400, Offset(6));
        assert_eq!(index.entries(), 1);
        assert_eq!(index.last_entry(), Some(entry(3, 100)));
        assert!(index.append(Offset(6), 400));
        assert!(index.check_invariants());
    }

    #[test]
    fn truncation_zeroes_the_dropped_slots() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.index");
        let mut index = OffsetIndex::create(&StdDisk, &path, Offset(0), 64).unwrap();
        index.append(Offset(3), 100);
        index.append(Offset(6), 200);
        index.append(Offset(9), 300);
        index.truncate_to_position(200);
        assert_eq!(index.entries(), 1);
        index.flush().unwrap();
        drop(index);
        let reopened = OffsetIndex::open_checked(&StdDisk, &path, Offset(0), 150)
            .unwrap()
            .unwrap();
        assert_eq!(reopened.entries(), 1);
    }
}
