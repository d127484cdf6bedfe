//! [`SimDisk`]: an in-memory file system for tests that knows, for every
//! file, what was written and what a sync made durable, and for every
//! directory, which of its entries a sync made durable, so that it can lose
//! power the way a real machine does (issue 28).
//!
//! This module owns the simulation and its faults: power loss (every byte
//! and every directory entry no sync covered is gone; optionally a random
//! prefix of each file's unsynced writes survives, a torn write), bit flips
//! in stored bytes, `EIO` on chosen or random operations (a failed write may
//! leave a prefix of its bytes), a full disk (`ENOSPC`) past a byte budget,
//! and latency counted in simulated time units. It does not know what the
//! files mean.
//!
//! Every random choice comes from one seeded PRNG the caller chooses, and
//! nothing reads a clock: driven from one thread, the same seed and the
//! same calls give the same disk, byte for byte. Directory order is sorted
//! (`BTreeMap`), never hash order.
//!
//! The durability rules are those of ext4 and POSIX, taken strictly:
//! - `sync_data`/`sync_all` of a file make its bytes and length durable,
//!   not its name: a file created, renamed or removed survives a power loss
//!   as such only once its directory was synced ([`Disk::sync_dir`]).
//! - A mapping's writes are the page cache's: read back by the process at
//!   once (on the next [`MappedRegion::flush`] or when the mapping is
//!   dropped, here), durable after [`MappedRegion::flush`] (`msync`) for
//!   the part of the file whose length is durable.
//! - The disk handle given to storage ([`SimDisk::shared`]) and the files
//!   and locks taken through it belong to the process: after a power loss
//!   (or [`SimDisk::crash`]) every call on them fails, and dropping them
//!   changes nothing. A restart takes a new handle.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use self::name::Name;
use super::{Disk, DiskFile, LockGuard, MappedRegion, OpenMode};
use crate::rng::SplitMix64;
use crate::sync::{Arc, Mutex, MutexGuard, Weak};

/// `EIO`, as the kernel reports a failed device.
mod name;

const EIO: i32 = 5;
/// `ENOSPC`, as the kernel reports a full file system.
const ENOSPC: i32 = 28;

/// The kinds of operation a fault can be aimed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DiskOperation {
    /// Opening or creating a file.
    Open,
    /// Reading file bytes.
    Read,
    /// Writing file bytes (appends, positioned writes, a mapping's flush).
    Write,
    /// Changing a file's length.
    SetLength,
    /// Syncing a file (`fsync`, `fdatasync`, `msync`).
    Sync,
    /// Syncing a directory.
    SyncDirectory,
    /// Creating, renaming, removing or listing directory entries.
    Directory,
}

/// Which operations fail with `EIO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EioPlan {
    /// None.
    Never,
    /// The `n`-th operation (counting from 1) of the chosen kinds from the
    /// moment the plan is set, once.
    Nth(u64),
    /// Each operation of the chosen kinds, with probability `1 / n`.
    OneIn(u64),
}

/// Simulated time each operation costs, in the caller's units (no sleeping:
/// [`SimDisk::elapsed`] adds them up).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// Every operation.
    pub per_operation: u64,
    /// Added per KiB read or written.
    pub per_kib: u64,
    /// Added per file or directory sync.
    pub per_sync: u64,
    /// Up to this much more, drawn from the PRNG for each operation.
    pub jitter: u64,
}

/// What the disk did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimDiskStats {
    /// Operations of every kind (failed ones included).
    pub operations: u64,
    /// File and directory syncs that succeeded.
    pub syncs: u64,
    /// Bytes written to files (appends, positioned writes, mappings).
    pub bytes_written: u64,
    /// Operations failed with `EIO` by the plan.
    pub eio_failures: u64,
    /// Writes refused with `ENOSPC`.
    pub full_disk_failures: u64,
    /// Power losses so far.
    pub power_losses: u64,
    /// Simulated time spent (see [`Latency`]).
    pub elapsed: u64,
}

/// A simulated disk. Cloning it gives another handle on the same disk: the
/// test keeps one to inject faults and look, and gives storage one from
/// [`shared`](SimDisk::shared), which belongs to the running process and
/// dies with it.
#[derive(Clone, Debug)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
    /// The process this handle belongs to (the generation it was made in),
    /// or `None` for the test's own handle, which outlives every power loss.
    process: Option<u64>,
}

/// One change to a file's bytes since its last sync, replayable on its
/// durable bytes.
#[derive(Clone, Debug)]
enum Change {
    Write { position: u64, bytes: Vec<u8> },
    SetLength(u64),
}

impl Change {
    fn apply(&self, to: &mut Vec<u8>) {
        match self {
            Change::Write { position, bytes } => write_into(to, *position, bytes),
            Change::SetLength(length) => set_length(to, to_usize(*length)),
        }
    }

    /// Whether the change replaces the byte at `position`: a write over
    /// it, or a length change to at most it (the byte is cut, or comes
    /// back as a zero).
    fn covers(&self, position: u64) -> bool {
        match self {
            Change::Write {
                position: at,
                bytes,
            } => (*at..at.saturating_add(bytes.len() as u64)).contains(&position),
            Change::SetLength(length) => position >= *length,
        }
    }
}

/// A bit flip ([`SimDisk::flip_bit_at`]) that reads of a live file see:
/// what [`SimDisk::flipped_bits`] lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlippedBit {
    /// The file, by its name in the live namespace.
    pub path: PathBuf,
    /// The byte's position in the file.
    pub position: u64,
    /// The byte's flipped bits.
    pub mask: u8,
}

/// A file's contents.
///
/// Invariant: applying `unsynced` in order to `durable` gives `data`.
#[derive(Debug, Default)]
struct Inode {
    /// The bytes as the running process sees them (the page cache).
    data: Vec<u8>,
    /// The bytes as the medium holds them.
    durable: Vec<u8>,
    /// What was done to `data` since the last sync, oldest first.
    unsynced: Vec<Change>,
    /// The bits flipped in `durable` that nothing wrote over since, by
    /// position: each byte's flipped bits.
    ///
    /// Invariant: every position is below `durable`'s length.
    flips: BTreeMap<u64, u8>,
    /// The baselines of this file's mappings that are [`Baseline::File`]
    /// (some may be dropped or copied since): before anything but their own
    /// write-back changes `data`, each is copied ([`copy_baselines`](Self::copy_baselines)).
    ///
    /// Invariant: a mapping whose baseline is `Baseline::File` is listed,
    /// and `data` is its baseline.
    mappings: Vec<Weak<Mutex<Baseline>>>,
}

impl Inode {
    fn change(&mut self, change: Change) {
        self.copy_baselines(None);
        change.apply(&mut self.data);
        self.unsynced.push(change);
    }

    /// A change written back by the mapping whose baseline is `writer`:
    /// the other mappings' baselines are copied first.
    fn change_by(&mut self, change: Change, writer: &Arc<Mutex<Baseline>>) {
        self.copy_baselines(Some(writer));
        change.apply(&mut self.data);
        self.unsynced.push(change);
    }

    /// Gives every mapping whose baseline is still `data` (but `writer`'s)
    /// a copy of it, before `data` changes.
    fn copy_baselines(&mut self, writer: Option<&Arc<Mutex<Baseline>>>) {
        if self.mappings.is_empty() {
            return;
        }
        let data = &self.data;
        self.mappings.retain(|mapping| {
            let Some(baseline) = mapping.upgrade() else {
                return false;
            };
            if writer.is_some_and(|writer| Arc::ptr_eq(writer, &baseline)) {
                return true;
            }
            let mut baseline = baseline.lock();
            if matches!(*baseline, Baseline::File) {
                *baseline = Baseline::Copy(data.clone());
            }
            false
        });
    }

    fn sync(&mut self) {
        for change in std::mem::take(&mut self.unsynced) {
            self.apply_durably(&change);
        }
        debug_assert_eq!(self.durable.len(), self.data.len());
    }

    /// Applies `change` to the medium's bytes: a flip it writes over is
    /// gone.
    fn apply_durably(&mut self, change: &Change) {
        if !self.flips.is_empty() {
            self.flips.retain(|position, _| !change.covers(*position));
        }
        change.apply(&mut self.durable);
    }

    /// The flips reads see: those no unsynced change covers.
    fn visible_flips(&self) -> impl Iterator<Item = (u64, u8)> + '_ {
        self.flips
            .iter()
            .filter(|(position, _)| !self.unsynced.iter().any(|c| c.covers(**position)))
            .map(|(position, mask)| (*position, *mask))
    }

    fn check_invariants(&self) -> bool {
        let mut replayed = self.durable.clone();
        for change in &self.unsynced {
            change.apply(&mut replayed);
        }
        replayed == self.data
            && self
                .flips
                .last_key_value()
                .is_none_or(|(position, _)| to_usize(*position) < self.durable.len())
    }
}

/// The files' contents by inode number: slot `id` holds inode `id`, or
/// `None` once a power loss left no name for it. Numbers are handed out in
/// order and never reused, so finding an inode is an index, not a search:
/// in a tree of inodes (every replaced checkpoint's too, until the next
/// power loss) the search was two thirds of a file read's cost in a
/// `cargo test` simulator run.
#[derive(Debug, Default)]
struct Inodes(Vec<Option<Inode>>);

impl Inodes {
    /// A new empty file's inode, numbered next.
    fn create(&mut self) -> u64 {
        self.0.push(Some(Inode::default()));
        (self.0.len() - 1) as u64
    }

    fn get(&self, id: &u64) -> Option<&Inode> {
        self.0.get(to_usize(*id))?.as_ref()
    }

    fn get_mut(&mut self, id: &u64) -> Option<&mut Inode> {
        self.0.get_mut(to_usize(*id))?.as_mut()
    }

    /// The inodes with their numbers, in order.
    fn iter(&self) -> impl Iterator<Item = (u64, &Inode)> {
        self.0
            .iter()
            .enumerate()
            .filter_map(|(id, inode)| Some((id as u64, inode.as_ref()?)))
    }

    /// Drops the inodes whose numbers `keep` refuses.
    fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        for (id, slot) in self.0.iter_mut().enumerate() {
            if !keep(id as u64) {
                *slot = None;
            }
        }
    }
}

/// A directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Directory,
    File(u64),
}

/// The live names of the flipped files, with their inodes, in the
/// namespace's order, as of the namespace's change count `changes` and the
/// list of flipped inodes `inodes` (see [`SimDisk::flipped_bits`]).
#[derive(Debug)]
struct FlippedNames {
    changes: u64,
    inodes: Vec<u64>,
    names: Vec<(PathBuf, u64)>,
}

/// The live namespace: read as a map through `Deref`, changed only through
/// its methods, which count the changes, so that what is derived from it
/// is kept until it changes (the names of the flipped files, see
/// [`SimDisk::flipped_bits`]).
#[derive(Debug, Default)]
struct Namespace {
    entries: BTreeMap<Name, Entry>,
    changes: u64,
}

impl std::ops::Deref for Namespace {
    type Target = BTreeMap<Name, Entry>;

    fn deref(&self) -> &Self::Target {
        &self.entries
    }
}

impl Namespace {
    fn insert(&mut self, path: Name, entry: Entry) -> Option<Entry> {
        self.changes += 1;
        self.entries.insert(path, entry)
    }

    fn remove(&mut self, path: &Name) -> Option<Entry> {
        self.changes += 1;
        self.entries.remove(path)
    }

    /// Every entry at once (a power loss).
    fn replace(&mut self, entries: BTreeMap<Name, Entry>) {
        self.changes += 1;
        self.entries = entries;
    }
}

#[derive(Debug)]
struct State {
    rng: SplitMix64,
    /// Bumped by every power loss and crash: handles of an older
    /// generation belong to a dead process.
    generation: u64,
    inodes: Inodes,
    /// The inodes that may have flips, in order: every inode a flip was
    /// made in since [`SimDisk::flipped_bits`] last found it without any.
    /// The simulator asks for the flips after every step; looking every
    /// file up for them each time took 7% of a `cargo test` run of it.
    ///
    /// Invariant: holds every inode whose `flips` is not empty.
    flipped_inodes: Vec<u64>,
    /// The live names of `flipped_inodes`, kept while neither changes:
    /// looking through every name for them after every step of the
    /// simulator was 4% of a debug run of it.
    flipped_names: Option<FlippedNames>,
    /// The namespace as the running process sees it.
    live: Namespace,
    /// The namespace a power loss would leave.
    durable: BTreeMap<Name, Entry>,
    /// Entries that may differ between `live` and `durable` (a directory's
    /// sync looks at these only, not at every entry it holds).
    ///
    /// Invariant: a path not in it has the same entry (or none) in both;
    /// every change to `live` adds the paths it changed.
    unsynced_entries: BTreeSet<Name>,
    locks: BTreeSet<PathBuf>,
    torn_writes: bool,
    eio_plan: EioPlan,
    eio_operations: BTreeSet<DiskOperation>,
    /// Operations of `eio_operations` counted since the plan was set.
    eio_counted: u64,
    /// Power is cut when this many more operations have started (the
    /// operation that reaches 0 fails, as do all after it).
    power_loss_countdown: Option<u64>,
    space_bytes_max: Option<u64>,
    latency: Latency,
    stats: SimDiskStats,
    /// Inside [`SimDisk::unobserved`]: operations cost nothing and meet no
    /// fault.
    unobserved: bool,
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

fn write_into(to: &mut Vec<u8>, position: u64, bytes: &[u8]) {
    let at = to_usize(position);
    if at >= to.len() {
        // At the end (an append) or past it: zeros up to `at`, then the
        // bytes, each written once.
        set_length(to, at);
        to.extend_from_slice(bytes);
        return;
    }
    let end = at + bytes.len();
    if to.len() < end {
        set_length(to, end);
    }
    to[at..end].copy_from_slice(bytes);
}

/// Zeros to grow files with (see [`set_length`]).
const ZEROS: [u8; 4096] = [0; 4096];

/// Cuts `to` to `length` bytes or grows it with zeros, as `Vec::resize`
/// does, but fast in an unoptimized build too: there `resize` writes the
/// zeros one call at a time, and growing each new segment's 64 KiB offset
/// index that way, in the page cache and again on the medium at its sync,
/// took a tenth of a `cargo test` simulator run. An empty file (a new
/// index) becomes one zeroed allocation (calloc); another grows by copies
/// of a block of zeros, a few library calls, each byte written once (a
/// zeroed allocation copied in wrote it twice, and allocated and freed a
/// buffer on every append).
fn set_length(to: &mut Vec<u8>, length: usize) {
    if length <= to.len() {
        to.truncate(length);
    } else if to.is_empty() {
        *to = vec![0; length];
    } else {
        to.reserve(length - to.len());
        while to.len() < length {
            let zeros = (length - to.len()).min(ZEROS.len());
            to.extend_from_slice(&ZEROS[..zeros]);
        }
    }
}

/// The paths of `paths` right under directory `path` (not the root), in
/// order. Paths order by components, so a directory's descendants follow
/// it, together: only its subtree is looked at.
fn children_of<'a>(paths: &'a BTreeSet<Name>, path: &'a Name) -> impl Iterator<Item = &'a Name> {
    paths
        .range::<Name, _>((Bound::Excluded(path), Bound::Unbounded))
        .take_while(move |p| p.is_within(path))
        .filter(move |p| p.is_child_of(path))
}

/// Removes the entries below `path` from `namespace`. They follow it,
/// together (see [`children_of`]), so only they are looked at, not every
/// entry of the namespace, path by path, as for each removed name a
/// directory sync makes durable (every checkpoint's temporary file).
fn remove_descendants(namespace: &mut BTreeMap<Name, Entry>, path: &Name) {
    let below: Vec<Name> = namespace
        .range::<Name, _>((Bound::Excluded(path), Bound::Unbounded))
        .map(|(p, _)| p)
        .take_while(|p| p.is_within(path))
        .cloned()
        .collect();
    for p in below {
        namespace.remove(&p);
    }
}

/// The entries of `namespace` right under directory `path`, in order.
fn entries_of<'a>(
    namespace: &'a BTreeMap<Name, Entry>,
    path: &'a Name,
) -> impl Iterator<Item = (&'a Name, &'a Entry)> {
    namespace.iter().filter(move |(p, _)| p.is_child_of(path))
}

fn is_root(path: &Path) -> bool {
    path.as_os_str().is_empty() || path == Path::new("/")
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

fn stale() -> io::Error {
    io::Error::other("stale handle: opened before a simulated power loss or crash")
}

fn bad_handle(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{what}: the file was not opened for it (EBADF)"),
    )
}

impl State {
    /// Every operation starts here: counts it, charges its latency, cuts
    /// the power when the countdown ends, and fails it when the `EIO` plan
    /// says so.
    fn begin(
        &mut self,
        generation: Option<u64>,
        kind: DiskOperation,
        bytes: usize,
    ) -> io::Result<()> {
        if self.unobserved {
            return match generation {
                Some(g) if g != self.generation => Err(stale()),
                _ => Ok(()),
            };
        }
        self.stats.operations += 1;
        let mut cost =
            self.latency.per_operation + (bytes as u64).div_ceil(1024) * self.latency.per_kib;
        if matches!(kind, DiskOperation::Sync | DiskOperation::SyncDirectory) {
            cost += self.latency.per_sync;
        }
        if self.latency.jitter > 0 {
            cost += self.rng.next_u64() % (self.latency.jitter + 1);
        }
        self.stats.elapsed += cost;
        if let Some(left) = self.power_loss_countdown {
            if left <= 1 {
                self.power_loss_countdown = None;
                tracing::debug!(?kind, "simulated power loss during an operation");
                self.lose_power();
                return Err(stale());
            }
            self.power_loss_countdown = Some(left - 1);
        }
        if generation.is_some_and(|g| g != self.generation) {
            return Err(stale());
        }
        if self.eio_operations.contains(&kind) {
            let fail = match self.eio_plan {
                EioPlan::Never => false,
                EioPlan::Nth(n) => {
                    self.eio_counted += 1;
                    if self.eio_counted == n {
                        self.eio_plan = EioPlan::Never;
                        true
                    } else {
                        false
                    }
                }
                EioPlan::OneIn(n) => n > 0 && self.rng.next_u64().is_multiple_of(n),
            };
            if fail {
                self.stats.eio_failures += 1;
                return Err(io::Error::from_raw_os_error(EIO));
            }
        }
        Ok(())
    }

    fn random_below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.rng.next_u64() % bound
        }
    }

    fn inode(&mut self, id: u64) -> io::Result<&mut Inode> {
        self.inodes
            .get_mut(&id)
            .ok_or_else(|| io::Error::other("simulated disk: inode vanished"))
    }

    /// Bytes the files of the live namespace take.
    fn used_bytes(&self) -> u64 {
        self.live
            .values()
            .filter_map(|entry| match entry {
                Entry::File(id) => self.inodes.get(id).map(|i| i.data.len() as u64),
                Entry::Directory => None,
            })
            .sum()
    }

    /// `Err(ENOSPC)` if growing a file by `growth` bytes passes the budget.
    fn reserve(&mut self, growth: u64) -> io::Result<()> {
        let Some(max) = self.space_bytes_max else {
            return Ok(());
        };
        if growth > 0 && self.used_bytes() + growth > max {
            self.stats.full_disk_failures += 1;
            return Err(io::Error::from_raw_os_error(ENOSPC));
        }
        Ok(())
    }

    /// Notes that the entry at `path` changed in the live namespace.
    fn entry_changed(&mut self, path: &Name) {
        if !self.unsynced_entries.contains(path) {
            self.unsynced_entries.insert(path.clone());
        }
    }

    /// Whether directory `path` has the same entries live and durable,
    /// compared in place: this check follows every directory sync, and
    /// copying the children of both namespaces out before comparing them
    /// was 40% of its cost. (Walking only the directory's subtree is not
    /// cheaper: the one log directory of a simulated run holds nearly
    /// every file, and each entry then needs a second path parse.)
    fn same_entries(&self, path: &Name) -> bool {
        entries_of(&self.live, path).eq(entries_of(&self.durable, path))
    }

    fn parent_is_directory(&self, path: &Path) -> bool {
        match path.parent() {
            None => true,
            Some(parent) if is_root(parent) => true,
            Some(parent) => self.live.get(&Name::new(parent)) == Some(&Entry::Directory),
        }
    }

    /// The power fails: every file goes back to its durable bytes (plus,
    /// with torn writes, a random prefix of what came after them), the
    /// namespace to its durable entries, and every handle dies.
    fn lose_power(&mut self) {
        self.stats.power_losses += 1;
        self.generation += 1;
        self.locks.clear();
        let ids: Vec<u64> = self.inodes.iter().map(|(id, _)| id).collect();
        for id in ids {
            let torn = self.torn_writes;
            let kept = if torn {
                let count = self.inodes.get(&id).map_or(0, |i| i.unsynced.len()) as u64;
                self.random_below(count + 1)
            } else {
                0
            };
            let partial = torn && self.rng.next_u64().is_multiple_of(2);
            let cut = self.rng.next_u64();
            let Some(inode) = self.inodes.get_mut(&id) else {
                continue;
            };
            let changes = std::mem::take(&mut inode.unsynced);
            for change in changes.iter().take(to_usize(kept)) {
                inode.apply_durably(change);
            }
            // A write cut off in its middle: some of its bytes landed.
            if partial {
                if let Some(Change::Write { position, bytes }) = changes.get(to_usize(kept)) {
                    let landed = to_usize(cut % (bytes.len() as u64 + 1));
                    inode.apply_durably(&Change::Write {
                        position: *position,
                        bytes: bytes[..landed].to_vec(),
                    });
                }
            }
            // The dead process's mappings never write back (a flush
            // fails, a drop does nothing): their baselines are not read
            // again.
            inode.mappings.clear();
            inode.data = inode.durable.clone();
        }
        // Entries whose directory did not survive go with it.
        let mut live = self.durable.clone();
        let orphans: Vec<Name> = live
            .keys()
            .filter(|path| {
                path.ancestors()
                    .skip(1)
                    .any(|a| !is_root(a) && self.durable.get(a) != Some(&Entry::Directory))
            })
            .cloned()
            .collect();
        for orphan in orphans {
            live.remove(&orphan);
        }
        self.durable = live.clone();
        self.live.replace(live);
        self.unsynced_entries.clear();
        // Files no name reaches are gone for good.
        let reachable: BTreeSet<u64> = self
            .live
            .values()
            .filter_map(|e| match e {
                Entry::File(id) => Some(*id),
                Entry::Directory => None,
            })
            .collect();
        self.inodes.retain(|id| reachable.contains(&id));
        debug_assert!(self.check_invariants());
    }

    /// The live names of the files that may hold flips, with their
    /// inodes, in the namespace's order (see [`SimDisk::flipped_bits`]):
    /// kept from the last call while neither the namespace nor the list of
    /// flipped inodes changed.
    fn flipped_names(&mut self) -> (&Inodes, &[(PathBuf, u64)]) {
        let State {
            inodes,
            flipped_inodes,
            flipped_names,
            live,
            ..
        } = self;
        // A flip a sync wrote over, or an inode that is gone, stays gone.
        flipped_inodes.retain(|id| inodes.get(id).is_some_and(|i| !i.flips.is_empty()));
        if flipped_inodes.is_empty() {
            return (inodes, &[]);
        }
        let kept = flipped_names
            .as_ref()
            .is_some_and(|kept| kept.changes == live.changes && kept.inodes == *flipped_inodes);
        if !kept {
            let names = live
                .iter()
                .filter_map(|(path, entry)| match entry {
                    Entry::File(id) if flipped_inodes.contains(id) => {
                        Some((path.to_path_buf(), *id))
                    }
                    _ => None,
                })
                .collect();
            *flipped_names = Some(FlippedNames {
                changes: live.changes,
                inodes: flipped_inodes.clone(),
                names,
            });
        }
        let names = flipped_names
            .as_ref()
            .map_or(&[][..], |kept| kept.names.as_slice());
        (inodes, names)
    }

    fn check_invariants(&self) -> bool {
        self.inodes.iter().all(|(_, i)| i.check_invariants())
            && self.live.keys().all(|p| self.parent_is_directory(p))
            && self
                .inodes
                .iter()
                .all(|(id, i)| i.flips.is_empty() || self.flipped_inodes.contains(&id))
    }
}

impl SimDisk {
    /// An empty disk (only the root directory `/` exists) whose random
    /// choices (torn writes, random faults, jitter) all come from `seed`.
    /// No faults are on.
    pub fn new(seed: u64) -> SimDisk {
        SimDisk {
            process: None,
            state: Arc::new(Mutex::new(State {
                rng: SplitMix64::new(seed),
                generation: 0,
                flipped_inodes: Vec::new(),
                flipped_names: None,
                inodes: Inodes::default(),
                live: Namespace::default(),
                durable: BTreeMap::new(),
                unsynced_entries: BTreeSet::new(),
                locks: BTreeSet::new(),
                torn_writes: false,
                eio_plan: EioPlan::Never,
                eio_operations: BTreeSet::new(),
                eio_counted: 0,
                power_loss_countdown: None,
                space_bytes_max: None,
                latency: Latency::default(),
                stats: SimDiskStats::default(),
                unobserved: false,
            })),
        }
    }

    /// This disk as the running process's storage takes it: every call
    /// through it, and through the files it opens, fails once the power is
    /// lost or the process crashes (a restart takes a new one).
    pub fn shared(&self) -> Arc<dyn Disk> {
        let process = Some(self.lock().generation);
        Arc::new(SimDisk {
            state: Arc::clone(&self.state),
            process,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Whether a power loss keeps a random prefix of each file's unsynced
    /// writes (the last of them maybe cut in its middle), rather than none.
    pub fn set_torn_writes(&self, on: bool) {
        self.lock().torn_writes = on;
    }

    /// Makes operations of the `kinds` fail with `EIO` as `plan` says.
    pub fn fail_with_eio(&self, plan: EioPlan, kinds: &[DiskOperation]) {
        let mut state = self.lock();
        state.eio_plan = plan;
        state.eio_operations = kinds.iter().copied().collect();
        state.eio_counted = 0;
    }

    /// Refuses with `ENOSPC` any write or growth that would take the files
    /// past `bytes` in all (`None`: no limit).
    pub fn set_space_bytes_max(&self, bytes: Option<u64>) {
        self.lock().space_bytes_max = bytes;
    }

    /// Bytes the files of the live namespace take (what the budget of
    /// [`set_space_bytes_max`](Self::set_space_bytes_max) counts).
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes()
    }

    /// Charges `latency` for each later operation.
    pub fn set_latency(&self, latency: Latency) {
        self.lock().latency = latency;
    }

    /// Cuts the power when the `n`-th operation from now starts (`n >= 1`):
    /// that operation and every later one on handles opened before fail.
    /// Lets a test crash the machine in the middle of a roll, a truncation
    /// or a checkpoint.
    pub fn lose_power_at_operation(&self, n: u64) {
        self.lock().power_loss_countdown = Some(n.max(1));
    }

    /// Calls off a power loss set with
    /// [`lose_power_at_operation`](Self::lose_power_at_operation).
    pub fn cancel_power_loss(&self) {
        self.lock().power_loss_countdown = None;
    }

    /// Whether a power loss set with
    /// [`lose_power_at_operation`](Self::lose_power_at_operation) is still
    /// to come.
    pub fn power_loss_pending(&self) -> bool {
        self.lock().power_loss_countdown.is_some()
    }

    /// Cuts the power now: every unsynced byte and directory entry is lost
    /// (see [`set_torn_writes`](Self::set_torn_writes)), every open handle
    /// and lock dies.
    pub fn lose_power(&self) {
        self.lock().lose_power();
    }

    /// The process dies but the machine keeps running: what was written
    /// stays (the page cache survives; a mapping's writes reach the file
    /// only on its flush or drop, and the dead process's mappings drop
    /// nothing), every open handle and lock dies.
    pub fn crash(&self) {
        let mut state = self.lock();
        state.generation += 1;
        state.locks.clear();
    }

    /// Flips bit `bit` (0..8) of the byte at `position` of the file at
    /// `path` on the medium (its durable bytes). Reads see the flip unless
    /// an unsynced write covers the byte (the page cache holds a newer
    /// copy, which a sync then writes over it).
    pub fn flip_bit_at(&self, path: &Path, position: u64, bit: u8) -> io::Result<()> {
        let mut state = self.lock();
        let Some(Entry::File(id)) = state.live.get(path).copied() else {
            return Err(not_found(path));
        };
        let inode = state.inode(id)?;
        let Some(byte) = inode.durable.get_mut(to_usize(position)) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{}: position {position} is past the durable end",
                    path.display()
                ),
            ));
        };
        let mask = 1u8 << (bit % 8);
        *byte ^= mask;
        let flipped = inode.flips.entry(position).or_insert(0);
        *flipped ^= mask;
        if *flipped == 0 {
            inode.flips.remove(&position);
        }
        let mut data = inode.durable.clone();
        for change in &inode.unsynced {
            change.apply(&mut data);
        }
        inode.copy_baselines(None);
        inode.data = data;
        debug_assert!(inode.check_invariants());
        if let Err(at) = state.flipped_inodes.binary_search(&id) {
            state.flipped_inodes.insert(at, id);
        }
        Ok(())
    }

    /// Flips one random bit of one random non-empty file whose path
    /// `choose` accepts, in its durable bytes (and what is read); returns
    /// the file, position and bit, or `None` when no file qualifies.
    pub fn flip_random_bit(&self, choose: impl Fn(&Path) -> bool) -> Option<(PathBuf, u64, u8)> {
        let (path, position, bit) = {
            let mut state = self.lock();
            let candidates: Vec<(PathBuf, u64)> = state
                .live
                .iter()
                .filter_map(|(path, entry)| match entry {
                    Entry::File(id) => {
                        let durable = state.inodes.get(id).map_or(0, |i| i.durable.len());
                        (durable > 0 && choose(path)).then(|| (path.to_path_buf(), durable as u64))
                    }
                    Entry::Directory => None,
                })
                .collect();
            if candidates.is_empty() {
                return None;
            }
            let pick = to_usize(state.random_below(candidates.len() as u64));
            let (path, length) = candidates[pick].clone();
            let position = state.random_below(length);
            let bit = (state.random_below(8)) as u8;
            (path, position, bit)
        };
        self.flip_bit_at(&path, position, bit).ok()?;
        Some((path, position, bit))
    }

    /// The bit flips ([`flip_bit_at`](Self::flip_bit_at),
    /// [`flip_random_bit`](Self::flip_random_bit)) that reads see now, by
    /// path: in a file the live namespace names (under its name now, after
    /// any rename), at a byte no write or length change replaced since. A
    /// flip in a removed file, or under an unsynced write, is not listed;
    /// a power loss may bring it back (a removal or a write that no sync
    /// made durable), and it is listed again then.
    pub fn flipped_bits(&self) -> Vec<FlippedBit> {
        let mut flipped = Vec::new();
        let mut state = self.lock();
        let (inodes, names) = state.flipped_names();
        for (path, id) in names {
            let Some(inode) = inodes.get(id) else {
                continue;
            };
            flipped.extend(inode.visible_flips().map(|(position, mask)| FlippedBit {
                path: path.clone(),
                position,
                mask,
            }));
        }
        flipped
    }

    /// Whether a flip reads see is in a file whose path `choose` accepts:
    /// what `flipped_bits().iter().any(|flip| choose(&flip.path))` says,
    /// without copying a path for every flip and asking `choose` of each.
    /// The simulator asks this after every step of a run with a flipped
    /// disk; listing the flips for it was 3% of a run.
    pub fn any_flipped_bit(&self, choose: impl Fn(&Path) -> bool) -> bool {
        let mut state = self.lock();
        let (inodes, names) = state.flipped_names();
        names.iter().any(|(path, id)| {
            inodes
                .get(id)
                .is_some_and(|inode| inode.visible_flips().next().is_some())
                && choose(path)
        })
    }

    /// The bytes of the file at `path` as the running process reads them.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let state = self.lock();
        match state.live.get(path) {
            Some(Entry::File(id)) => state.inodes.get(id).map(|i| i.data.clone()),
            _ => None,
        }
    }

    /// A listing for a failing test's trace: each live path with its
    /// file's length as read, its durable length and its unsynced changes,
    /// and whether its name is durable.
    pub fn describe(&self) -> String {
        let state = self.lock();
        let mut out = String::new();
        for (path, entry) in state.live.iter() {
            let name_durable = state.durable.get(path) == Some(entry);
            match entry {
                Entry::Directory => out.push_str(&format!(
                    "{} dir name_durable={name_durable}\n",
                    path.display()
                )),
                Entry::File(id) => {
                    if let Some(i) = state.inodes.get(id) {
                        out.push_str(&format!(
                            "{} inode={id} len={} durable_len={} unsynced={} name_durable={name_durable}\n",
                            path.display(),
                            i.data.len(),
                            i.durable.len(),
                            i.unsynced.len()
                        ));
                    }
                }
            }
        }
        for (path, entry) in &state.durable {
            if state.live.get(path) != Some(entry) {
                out.push_str(&format!("{} durable only: {entry:?}\n", path.display()));
            }
        }
        out
    }

    /// Every file and directory of the live namespace, sorted.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.lock().live.keys().map(|p| p.to_path_buf()).collect()
    }

    /// Runs `f`, whose operations on this disk are not part of the
    /// simulated run: they take no simulated time, draw nothing from the
    /// disk's generator and meet no planned fault (`EIO`, a power loss),
    /// and do not count as operations. A checker's reads through the node's own log
    /// go here, so that checking a run does not change it: they had been
    /// charging the node's disk time and could take the `EIO` or the power
    /// loss planned for the node's next operation.
    pub fn unobserved<T>(&self, f: impl FnOnce() -> T) -> T {
        /// Clears the flag however `f` ends.
        struct Observed<'a>(&'a SimDisk);
        impl Drop for Observed<'_> {
            fn drop(&mut self) {
                self.0.lock().unobserved = false;
            }
        }
        let was = std::mem::replace(&mut self.lock().unobserved, true);
        debug_assert!(!was, "SimDisk::unobserved does not nest");
        let _observed = Observed(self);
        f()
    }

    /// Counters of what the disk did.
    pub fn stats(&self) -> SimDiskStats {
        self.lock().stats
    }

    /// Simulated time spent so far (see [`Latency`]).
    pub fn elapsed(&self) -> u64 {
        self.lock().stats.elapsed
    }

    /// A hash of everything the disk holds (live and durable bytes and
    /// names): equal for runs that did the same, byte for byte.
    pub fn fingerprint(&self) -> u64 {
        let state = self.lock();
        let mut hasher = crc32fast::Hasher::new();
        let mut high = crc32fast::Hasher::new();
        for (path, entry) in state.live.iter().chain(state.durable.iter()) {
            hasher.update(path.as_os_str().as_encoded_bytes());
            if let Entry::File(id) = entry {
                if let Some(inode) = state.inodes.get(id) {
                    hasher.update(&inode.data);
                    high.update(&inode.durable);
                }
            }
        }
        (u64::from(high.finalize()) << 32) | u64::from(hasher.finalize())
    }

    fn file(&self, generation: u64, inode: u64, path: &Path, mode: OpenMode) -> SimFile {
        SimFile {
            disk: self.clone(),
            generation,
            inode,
            path: path.to_path_buf(),
            mode,
        }
    }
}

impl Disk for SimDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn DiskFile>> {
        let mut state = self.lock();
        state.begin(self.process, DiskOperation::Open, 0)?;
        if !state.parent_is_directory(path) {
            return Err(not_found(path));
        }
        let name = Name::new(path);
        let id = match state.live.get(&name).copied() {
            Some(Entry::File(id)) => {
                if mode == OpenMode::CreateTruncate {
                    state.inode(id)?.change(Change::SetLength(0));
                }
                id
            }
            Some(Entry::Directory) => {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    format!("{}: is a directory", path.display()),
                ))
            }
            None => {
                if !matches!(mode, OpenMode::CreateAppend | OpenMode::CreateTruncate) {
                    return Err(not_found(path));
                }
                let id = state.inodes.create();
                state.entry_changed(&name);
                state.live.insert(name, Entry::File(id));
                id
            }
        };
        let generation = state.generation;
        drop(state);
        Ok(Box::new(self.file(generation, id, path, mode)))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin(self.process, DiskOperation::Directory, 0)?;
        let mut missing = Vec::new();
        for ancestor in path.ancestors() {
            if is_root(ancestor) {
                break;
            }
            let ancestor = Name::new(ancestor);
            match state.live.get(&ancestor) {
                Some(Entry::Directory) => break,
                Some(Entry::File(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::NotADirectory,
                        format!("{}: not a directory", ancestor.display()),
                    ))
                }
                None => missing.push(ancestor),
            }
        }
        for directory in missing.into_iter().rev() {
            state.entry_changed(&directory);
            state.live.insert(directory, Entry::Directory);
        }
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        is_root(path) || self.lock().live.contains_key(&Name::new(path))
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<OsString>> {
        let mut state = self.lock();
        state.begin(self.process, DiskOperation::Directory, 0)?;
        let name = Name::new(path);
        if !is_root(path) && state.live.get(&name) != Some(&Entry::Directory) {
            return Err(not_found(path));
        }
        Ok(state
            .live
            .keys()
            .filter(|p| p.is_child_of(&name))
            .filter_map(|p| p.file_name().map(|n| n.to_os_string()))
            .collect())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin(self.process, DiskOperation::Directory, 0)?;
        let (from_name, to_name) = (Name::new(from), Name::new(to));
        let Some(entry) = state.live.get(&from_name).copied() else {
            return Err(not_found(from));
        };
        if !state.parent_is_directory(to) {
            return Err(not_found(to));
        }
        if entry == Entry::Directory {
            let moved: Vec<Name> = state
                .live
                .keys()
                .filter(|p| p.is_within(&from_name) && **p != from_name)
                .cloned()
                .collect();
            for path in moved {
                state.entry_changed(&path);
                if let (Some(e), Ok(rest)) = (state.live.remove(&path), path.strip_prefix(from)) {
                    let moved_to = Name::from(to.join(rest));
                    state.entry_changed(&moved_to);
                    state.live.insert(moved_to, e);
                }
            }
        }
        state.live.remove(&from_name);
        state.live.insert(to_name.clone(), entry);
        state.entry_changed(&from_name);
        state.entry_changed(&to_name);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin(self.process, DiskOperation::Directory, 0)?;
        let name = Name::new(path);
        match state.live.get(&name) {
            Some(Entry::File(_)) => {
                state.live.remove(&name);
                state.entry_changed(&name);
                Ok(())
            }
            Some(Entry::Directory) => Err(io::Error::new(
                io::ErrorKind::IsADirectory,
                format!("{}: is a directory", path.display()),
            )),
            None => Err(not_found(path)),
        }
    }

    fn remove_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin(self.process, DiskOperation::Directory, 0)?;
        let name = Name::new(path);
        if state.live.get(&name) != Some(&Entry::Directory) {
            return Err(not_found(path));
        }
        let removed: Vec<Name> = state
            .live
            .keys()
            .filter(|p| p.is_within(&name))
            .cloned()
            .collect();
        for removed in removed {
            state.live.remove(&removed);
            state.entry_changed(&removed);
        }
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.begin(self.process, DiskOperation::SyncDirectory, 0)?;
        let name = Name::new(path);
        if !is_root(path) && state.live.get(&name) != Some(&Entry::Directory) {
            return Err(not_found(path));
        }
        let children: BTreeSet<Name> = if is_root(path) {
            state
                .live
                .keys()
                .chain(state.durable.keys())
                .filter(|p| p.is_child_of(&name))
                .cloned()
                .collect()
        } else {
            // Only the entries changed since they were last made durable:
            // a scan of every entry per directory sync was a tenth of a
            // simulated run's time.
            children_of(&state.unsynced_entries, &name)
                .cloned()
                .collect()
        };
        for child in children {
            state.unsynced_entries.remove(&child);
            match state.live.get(&child).copied() {
                Some(entry) => {
                    // A directory that changed into a file (or back) takes
                    // its durable descendants with it.
                    if state.durable.get(&child).is_some_and(|d| *d != entry) {
                        remove_descendants(&mut state.durable, &child);
                    }
                    state.durable.insert(child, entry);
                }
                None => {
                    remove_descendants(&mut state.durable, &child);
                    state.durable.remove(&child);
                }
            }
        }
        debug_assert!(
            state.same_entries(&name),
            "{}: entries not made durable by its sync",
            path.display()
        );
        state.stats.syncs += 1;
        Ok(())
    }

    fn try_lock(&self, path: &Path) -> io::Result<Option<Box<dyn LockGuard>>> {
        // The lock file is created as an open would.
        drop(self.open(path, OpenMode::CreateAppend)?);
        let mut state = self.lock();
        if !state.locks.insert(path.to_path_buf()) {
            return Ok(None);
        }
        let generation = state.generation;
        Ok(Some(Box::new(SimLock {
            disk: self.clone(),
            path: path.to_path_buf(),
            generation,
        })))
    }
}

/// A lock held on a [`SimDisk`].
#[derive(Debug)]
struct SimLock {
    disk: SimDisk,
    path: PathBuf,
    generation: u64,
}

impl LockGuard for SimLock {}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut state = self.disk.lock();
        // A lock of a dead process was released when it died.
        if state.generation == self.generation {
            state.locks.remove(&self.path);
        }
    }
}

/// An open file of a [`SimDisk`].
#[derive(Debug)]
struct SimFile {
    disk: SimDisk,
    generation: u64,
    inode: u64,
    path: PathBuf,
    mode: OpenMode,
}

impl SimFile {
    fn writable(&self) -> bool {
        self.mode != OpenMode::Read
    }

    fn appends(&self) -> bool {
        matches!(self.mode, OpenMode::Append | OpenMode::CreateAppend)
    }
}

impl DiskFile for SimFile {
    fn read_at(&self, position: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut state = self.disk.lock();
        state.begin(Some(self.generation), DiskOperation::Read, buf.len())?;
        let data = &state.inode(self.inode)?.data;
        let at = to_usize(position).min(data.len());
        let n = buf.len().min(data.len() - at);
        buf[..n].copy_from_slice(&data[at..at + n]);
        Ok(n)
    }

    fn read_vec_at(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut state = self.disk.lock();
        state.begin(Some(self.generation), DiskOperation::Read, len)?;
        let data = &state.inode(self.inode)?.data;
        let at = to_usize(position).min(data.len());
        let end = at.saturating_add(len).min(data.len());
        Ok(data[at..end].to_vec())
    }

    fn append(&self, parts: &[&[u8]]) -> io::Result<()> {
        if !self.appends() {
            return Err(bad_handle("append"));
        }
        let bytes: Vec<u8> = parts.concat();
        let mut state = self.disk.lock();
        let began = state.begin(Some(self.generation), DiskOperation::Write, bytes.len());
        if let Err(error) = began {
            // A device error in the middle of a write: some of it landed.
            if error.raw_os_error() == Some(EIO) {
                let landed = to_usize(state.random_below(bytes.len() as u64 + 1));
                let inode = state.inode(self.inode)?;
                let position = inode.data.len() as u64;
                if landed > 0 {
                    inode.change(Change::Write {
                        position,
                        bytes: bytes[..landed].to_vec(),
                    });
                }
            }
            return Err(error);
        }
        state.reserve(bytes.len() as u64)?;
        state.stats.bytes_written += bytes.len() as u64;
        let inode = state.inode(self.inode)?;
        let position = inode.data.len() as u64;
        inode.change(Change::Write { position, bytes });
        Ok(())
    }

    fn write_all_at(&self, position: u64, bytes: &[u8]) -> io::Result<()> {
        if !self.writable() || self.appends() {
            return Err(bad_handle("positioned write"));
        }
        let mut state = self.disk.lock();
        state.begin(Some(self.generation), DiskOperation::Write, bytes.len())?;
        let length = state.inode(self.inode)?.data.len() as u64;
        let end = position + bytes.len() as u64;
        state.reserve(end.saturating_sub(length))?;
        state.stats.bytes_written += bytes.len() as u64;
        state.inode(self.inode)?.change(Change::Write {
            position,
            bytes: bytes.to_vec(),
        });
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if !self.writable() {
            return Err(bad_handle("set_len"));
        }
        let mut state = self.disk.lock();
        state.begin(Some(self.generation), DiskOperation::SetLength, 0)?;
        let length = state.inode(self.inode)?.data.len() as u64;
        state.reserve(len.saturating_sub(length))?;
        state.inode(self.inode)?.change(Change::SetLength(len));
        Ok(())
    }

    fn length_bytes(&self) -> io::Result<u64> {
        let mut state = self.disk.lock();
        state.begin(Some(self.generation), DiskOperation::Read, 0)?;
        Ok(state.inode(self.inode)?.data.len() as u64)
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut state = self.disk.lock();
        state.begin(Some(self.generation), DiskOperation::Sync, 0)?;
        state.inode(self.inode)?.sync();
        state.stats.syncs += 1;
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn try_clone(&self) -> io::Result<Box<dyn DiskFile>> {
        let mut state = self.disk.lock();
        state.begin(Some(self.generation), DiskOperation::Open, 0)?;
        drop(state);
        Ok(Box::new(self.disk.file(
            self.generation,
            self.inode,
            &self.path,
            self.mode,
        )))
    }

    fn map(&self, len: u64) -> io::Result<Box<dyn MappedRegion>> {
        if !self.writable() || self.appends() {
            return Err(bad_handle("map"));
        }
        let mut state = self.disk.lock();
        state.begin(Some(self.generation), DiskOperation::Open, 0)?;
        let inode = state.inode(self.inode)?;
        debug_assert_eq!(
            inode.data.len() as u64,
            len,
            "a mapping covers the whole file"
        );
        let mut bytes = inode.data.clone();
        // The baseline is the file's bytes until something else changes
        // them: copying it at every map (each new segment's 64 KiB index,
        // and again when a rolled one is cut to size) was 2% of a
        // simulator run's instructions.
        let baseline = if bytes.len() == to_usize(len) {
            let baseline = Arc::new(Mutex::new(Baseline::File));
            inode.mappings.push(Arc::downgrade(&baseline));
            baseline
        } else {
            bytes.resize(to_usize(len), 0);
            Arc::new(Mutex::new(Baseline::Copy(bytes.clone())))
        };
        drop(state);
        Ok(Box::new(SimMapping {
            disk: self.disk.clone(),
            generation: self.generation,
            inode: self.inode,
            baseline,
            bytes,
        }))
    }
}

/// A mapping of a [`SimDisk`] file: a private buffer whose writes reach the
/// file on [`flush`](MappedRegion::flush) (durably) and on drop (as the
/// page cache would, not durably). Only bytes this mapping changed are
/// written back, so a stale mapping never undoes what others wrote (the
/// offset index creates a file anew while its old mapping still lives).
#[derive(Debug)]
struct SimMapping {
    disk: SimDisk,
    generation: u64,
    inode: u64,
    bytes: Vec<u8>,
    /// The bytes as last written back (or mapped): what differs from it in
    /// `bytes` was written through this mapping since.
    baseline: Arc<Mutex<Baseline>>,
}

/// A mapping's bytes as last written back (or mapped).
#[derive(Debug)]
enum Baseline {
    /// The file's bytes (`Inode::data`): nothing else changed them since.
    File,
    /// A copy, taken when something else was about to change the file.
    Copy(Vec<u8>),
}

/// The unit in which [`SimMapping::write_back`] looks for changes.
const WRITE_BACK_PAGE_BYTES: usize = 4096;

impl SimMapping {
    /// Writes the changed bytes back into the file; with `durable`, also
    /// onto the medium, as far as the file's durable length reaches.
    fn write_back(&self, state: &mut State, durable: bool) -> io::Result<()> {
        let mapped = &self.bytes;
        let mut baseline_guard = self.baseline.lock();
        let inode = state.inode(self.inode)?;
        let baseline: &[u8] = match &*baseline_guard {
            Baseline::File => &inode.data,
            Baseline::Copy(bytes) => bytes,
        };
        let mut changes = Vec::new();
        let mut at = 0;
        // A write past the file's end (it shrank under the mapping) is lost,
        // as on a real disk it would be SIGBUS.
        let end = mapped.len().min(inode.data.len()).min(baseline.len());
        while at < end {
            // Whole pages that did not change are skipped with one
            // comparison each: a mapping (an offset index) is mostly
            // unchanged between two write-backs, and a byte-by-byte scan
            // of it made write-backs the bulk of a simulated run's time.
            let page_end = (at - at % WRITE_BACK_PAGE_BYTES + WRITE_BACK_PAGE_BYTES).min(end);
            if mapped[at..page_end] == baseline[at..page_end] {
                at = page_end;
                continue;
            }
            if mapped[at] == baseline[at] {
                at += 1;
                continue;
            }
            let from = at;
            while at < end && mapped[at] != baseline[at] {
                at += 1;
            }
            changes.push((from, at));
        }
        // A `Baseline::File` follows the file, to which they are written.
        if let Baseline::Copy(baseline) = &mut *baseline_guard {
            for &(from, to) in &changes {
                baseline[from..to].copy_from_slice(&mapped[from..to]);
            }
        }
        let mut written = 0u64;
        for (from, to) in changes {
            let bytes = mapped[from..to].to_vec();
            written += bytes.len() as u64;
            if durable {
                let reach = to.min(inode.durable.len());
                if from < reach {
                    inode.durable[from..reach].copy_from_slice(&mapped[from..reach]);
                    inode
                        .flips
                        .retain(|position, _| !(from as u64..reach as u64).contains(position));
                }
            }
            inode.change_by(
                Change::Write {
                    position: from as u64,
                    bytes,
                },
                &self.baseline,
            );
        }
        state.stats.bytes_written += written;
        Ok(())
    }
}

impl MappedRegion for SimMapping {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    fn flush(&self) -> io::Result<()> {
        let mut state = self.disk.lock();
        state.begin(Some(self.generation), DiskOperation::Sync, self.bytes.len())?;
        self.write_back(&mut state, true)?;
        state.stats.syncs += 1;
        Ok(())
    }
}

impl Drop for SimMapping {
    fn drop(&mut self) {
        let mut state = self.disk.lock();
        if state.generation == self.generation {
            // Unmapping loses nothing the process wrote (the page cache
            // keeps it); an error here is an inode gone, nothing to keep.
            let _ = self.write_back(&mut state, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> PathBuf {
        PathBuf::from(p)
    }

    fn write_file(disk: &SimDisk, p: &str, bytes: &[u8]) -> Box<dyn DiskFile> {
        let file = disk.open(&path(p), OpenMode::CreateAppend).unwrap();
        file.append(&[bytes]).unwrap();
        file
    }

    #[test]
    fn a_power_loss_keeps_synced_bytes_and_synced_names_only() {
        let disk = SimDisk::new(1);
        disk.create_dir_all(&path("/d")).unwrap();
        disk.sync_dir(&path("/")).unwrap();
        let a = write_file(&disk, "/d/a", b"hello");
        a.sync_data().unwrap();
        disk.sync_dir(&path("/d")).unwrap();
        a.append(&[b" world"]).unwrap();
        // Synced data, unsynced name.
        let b = write_file(&disk, "/d/b", b"lost");
        b.sync_data().unwrap();
        assert_eq!(disk.contents(&path("/d/a")).unwrap(), b"hello world");
        disk.lose_power();
        assert_eq!(disk.contents(&path("/d/a")).unwrap(), b"hello");
        assert!(!disk.exists(&path("/d/b")), "its directory was not synced");
        // Handles of the dead process refuse everything.
        assert!(a.append(&[b"!"]).is_err());
        assert!(a.sync_data().is_err());
        assert_eq!(disk.stats().power_losses, 1);
    }

    #[test]
    fn an_unsynced_directory_loses_its_new_entries_renames_and_removals() {
        let disk = SimDisk::new(2);
        disk.create_dir_all(&path("/d")).unwrap();
        disk.sync_dir(&path("/")).unwrap();
        let old = write_file(&disk, "/d/old", b"1");
        old.sync_all().unwrap();
        disk.sync_dir(&path("/d")).unwrap();
        let tmp = write_file(&disk, "/d/new.tmp", b"2");
        tmp.sync_all().unwrap();
        disk.rename(&path("/d/new.tmp"), &path("/d/old")).unwrap();
        disk.remove_file(&path("/d/old")).ok();
        assert!(!disk.exists(&path("/d/old")));
        disk.lose_power();
        // Neither the rename nor the removal was made durable.
        assert_eq!(disk.contents(&path("/d/old")).unwrap(), b"1");
        assert!(!disk.exists(&path("/d/new.tmp")));
        // And a directory never synced into its parent is gone with its files.
        disk.create_dir_all(&path("/e")).unwrap();
        let f = write_file(&disk, "/e/f", b"x");
        f.sync_all().unwrap();
        disk.sync_dir(&path("/e")).unwrap();
        disk.lose_power();
        assert!(!disk.exists(&path("/e")));
        assert!(!disk.exists(&path("/e/f")));
    }

    /// A directory sync that makes a removal durable, or a directory's
    /// change into a file, drops the durable entries below it, found as
    /// a range of the namespace: names that only begin with the same
    /// characters (`a-b`, `a.b`, `a0`, `ab`) are not below it.
    #[test]
    fn a_synced_removal_takes_the_entries_below_it_and_no_others() {
        let disk = SimDisk::new(3);
        disk.create_dir_all(&path("/d/a/b")).unwrap();
        disk.create_dir_all(&path("/d/c")).unwrap();
        let files = [
            "/d/a/x", "/d/a/b/y", "/d/a-b", "/d/a.b", "/d/a0", "/d/ab", "/d/c/z", "/d/c-d",
        ];
        for p in files {
            write_file(&disk, p, b"1").sync_all().unwrap();
        }
        for dir in ["/", "/d", "/d/a", "/d/a/b", "/d/c"] {
            disk.sync_dir(&path(dir)).unwrap();
        }
        disk.remove_dir_all(&path("/d/a")).unwrap();
        disk.remove_dir_all(&path("/d/c")).unwrap();
        write_file(&disk, "/d/c", b"2").sync_all().unwrap();
        disk.sync_dir(&path("/d")).unwrap();
        disk.lose_power();
        let kept: Vec<PathBuf> = ["/d", "/d/a-b", "/d/a.b", "/d/a0", "/d/ab", "/d/c", "/d/c-d"]
            .into_iter()
            .map(path)
            .collect();
        assert_eq!(disk.paths(), kept);
        assert_eq!(disk.contents(&path("/d/c")).unwrap(), b"2");
    }

    #[test]
    fn torn_writes_keep_a_prefix_of_the_unsynced_writes() {
        for seed in 0..64 {
            let disk = SimDisk::new(seed);
            disk.set_torn_writes(true);
            disk.sync_dir(&path("/")).unwrap();
            let f = write_file(&disk, "/f", b"");
            f.sync_all().unwrap();
            disk.sync_dir(&path("/")).unwrap();
            let all: Vec<u8> = (0..100u8).collect();
            for chunk in all.chunks(10) {
                f.append(&[chunk]).unwrap();
            }
            disk.lose_power();
            let kept = disk.contents(&path("/f")).unwrap();
            assert!(all.starts_with(&kept), "seed {seed}: {kept:?}");
        }
    }

    /// A flip is listed while reads see it: under the file's current
    /// name, not once a write, a sync of a write or a length change
    /// replaced its byte, and not in a removed file; a power loss that
    /// undoes an unsynced write or removal over it brings it back.
    #[test]
    fn flipped_bits_lists_the_flips_reads_see() {
        let disk = SimDisk::new(5);
        disk.create_dir_all(&path("/d")).unwrap();
        disk.sync_dir(&path("/")).unwrap();
        let a = disk.open(&path("/d/a"), OpenMode::CreateTruncate).unwrap();
        a.write_all_at(0, &[0u8; 64]).unwrap();
        a.sync_data().unwrap();
        disk.sync_dir(&path("/d")).unwrap();
        disk.flip_bit_at(&path("/d/a"), 10, 3).unwrap();
        disk.flip_bit_at(&path("/d/a"), 40, 0).unwrap();
        let listed = |disk: &SimDisk| -> Vec<(PathBuf, u64)> {
            disk.flipped_bits()
                .into_iter()
                .map(|f| (f.path, f.position))
                .collect()
        };
        assert_eq!(listed(&disk), [(path("/d/a"), 10), (path("/d/a"), 40)]);
        assert_eq!(disk.flipped_bits()[0].mask, 1 << 3);
        assert!(disk.any_flipped_bit(|p| p == Path::new("/d/a")));
        assert!(!disk.any_flipped_bit(|p| p == Path::new("/d/b")));
        // An unsynced write hides the flip at 10; a power loss undoes it.
        a.write_all_at(8, &[1, 2, 3, 4]).unwrap();
        assert_eq!(listed(&disk), [(path("/d/a"), 40)]);
        disk.lose_power();
        assert_eq!(listed(&disk), [(path("/d/a"), 10), (path("/d/a"), 40)]);
        // Written over and synced: gone for good.
        let a = disk.open(&path("/d/a"), OpenMode::ReadWrite).unwrap();
        a.write_all_at(8, &[1, 2, 3, 4]).unwrap();
        a.sync_data().unwrap();
        disk.lose_power();
        assert_eq!(listed(&disk), [(path("/d/a"), 40)]);
        // A rename carries it; a removal hides it until a power loss
        // brings the unsynced removal back.
        disk.rename(&path("/d/a"), &path("/d/b")).unwrap();
        disk.sync_dir(&path("/d")).unwrap();
        assert_eq!(listed(&disk), [(path("/d/b"), 40)]);
        disk.remove_file(&path("/d/b")).unwrap();
        assert!(listed(&disk).is_empty());
        assert!(!disk.any_flipped_bit(|_| true));
        disk.lose_power();
        assert_eq!(listed(&disk), [(path("/d/b"), 40)]);
        // A length change below it, synced, cuts it.
        let b = disk.open(&path("/d/b"), OpenMode::ReadWrite).unwrap();
        b.set_len(32).unwrap();
        assert!(listed(&disk).is_empty());
        // Its inode still holds the flip, under the unsynced cut.
        assert!(!disk.any_flipped_bit(|_| true));
        b.set_len(64).unwrap();
        b.sync_data().unwrap();
        disk.lose_power();
        assert!(listed(&disk).is_empty());
        // Flipping the same bit twice undoes the flip.
        disk.flip_bit_at(&path("/d/b"), 1, 1).unwrap();
        disk.flip_bit_at(&path("/d/b"), 1, 1).unwrap();
        assert!(listed(&disk).is_empty());
    }

    /// `flipped_bits` keeps the names of the flipped files between calls:
    /// a new flip, a directory's rename and a new file are each seen at
    /// the next call.
    #[test]
    fn flipped_bits_follows_the_namespace_between_calls() {
        let disk = SimDisk::new(6);
        disk.create_dir_all(&path("/d")).unwrap();
        for name in ["/d/x", "/d/y"] {
            write_file(&disk, name, &[0u8; 8]).sync_all().unwrap();
        }
        disk.sync_dir(&path("/d")).unwrap();
        disk.sync_dir(&path("/")).unwrap();
        let listed = |disk: &SimDisk| -> Vec<(PathBuf, u64)> {
            disk.flipped_bits()
                .into_iter()
                .map(|f| (f.path, f.position))
                .collect()
        };
        disk.flip_bit_at(&path("/d/y"), 2, 0).unwrap();
        assert_eq!(listed(&disk), [(path("/d/y"), 2)]);
        disk.flip_bit_at(&path("/d/x"), 5, 0).unwrap();
        assert_eq!(listed(&disk), [(path("/d/x"), 5), (path("/d/y"), 2)]);
        disk.rename(&path("/d"), &path("/e")).unwrap();
        assert_eq!(listed(&disk), [(path("/e/x"), 5), (path("/e/y"), 2)]);
        write_file(&disk, "/e/w", &[0u8; 8]);
        disk.rename(&path("/e/x"), &path("/e/z")).unwrap();
        assert_eq!(listed(&disk), [(path("/e/y"), 2), (path("/e/z"), 5)]);
        disk.lose_power();
        assert_eq!(listed(&disk), [(path("/d/x"), 5), (path("/d/y"), 2)]);
    }

    #[test]
    fn the_same_seed_gives_the_same_disk() {
        let run = |seed| {
            let disk = SimDisk::new(seed);
            disk.set_torn_writes(true);
            disk.set_latency(Latency {
                per_operation: 1,
                per_kib: 2,
                per_sync: 10,
                jitter: 5,
            });
            for i in 0..20u8 {
                let f = write_file(&disk, &format!("/f{}", i % 3), &[i; 700]);
                if i % 4 == 0 {
                    f.sync_data().unwrap();
                    disk.sync_dir(&path("/")).unwrap();
                }
            }
            disk.flip_random_bit(|_| true);
            disk.lose_power();
            (disk.fingerprint(), disk.elapsed())
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn unobserved_operations_cost_nothing_and_meet_no_planned_fault() {
        let disk = SimDisk::new(4);
        disk.set_latency(Latency {
            per_operation: 5,
            per_kib: 1,
            per_sync: 100,
            jitter: 7,
        });
        let f = write_file(&disk, "/f", b"abc");
        disk.fail_with_eio(EioPlan::Nth(1), &[DiskOperation::Sync]);
        let (elapsed, stats) = (disk.elapsed(), disk.stats());
        disk.unobserved(|| f.sync_data()).unwrap();
        assert_eq!(disk.elapsed(), elapsed);
        assert_eq!(disk.stats().operations, stats.operations);
        // The planned failure is still the next observed sync's.
        let error = f.sync_data().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(EIO));
        assert!(disk.elapsed() > elapsed);
        // A dead process's handle stays dead, observed or not.
        disk.lose_power();
        assert!(disk.unobserved(|| f.sync_data()).is_err());
    }

    #[test]
    fn eio_full_disk_and_mappings() {
        let disk = SimDisk::new(3);
        let f = write_file(&disk, "/f", b"abc");
        disk.fail_with_eio(EioPlan::Nth(2), &[DiskOperation::Sync]);
        f.sync_data().unwrap();
        let error = f.sync_data().unwrap_err();
        assert_eq!(error.raw_os_error(), Some(EIO));
        f.sync_data().unwrap();

        disk.set_space_bytes_max(Some(10));
        let error = f.append(&[b"more than ten bytes"]).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(ENOSPC));
        f.append(&[b"1234567"]).unwrap();
        disk.set_space_bytes_max(None);

        let index = disk.open(&path("/i"), OpenMode::CreateTruncate).unwrap();
        index.set_len(16).unwrap();
        index.sync_data().unwrap();
        disk.sync_dir(&path("/")).unwrap();
        let mut mapping = index.map(16).unwrap();
        mapping.bytes_mut()[0..4].copy_from_slice(b"abcd");
        mapping.flush().unwrap();
        mapping.bytes_mut()[4..8].copy_from_slice(b"efgh");
        drop(mapping);
        assert_eq!(&disk.contents(&path("/i")).unwrap()[..8], b"abcdefgh");
        disk.lose_power();
        // Flushed: durable. Written back at the unmap only: lost.
        assert_eq!(&disk.contents(&path("/i")).unwrap()[..8], b"abcd\0\0\0\0");
    }

    /// A mapping writes back only what was written through it, whatever
    /// else changed the file meanwhile: a write, a truncation, another
    /// mapping's write-back, a bit flip (its baseline is the file's bytes
    /// until then, and copied when they change).
    #[test]
    fn a_mapping_writes_back_only_its_own_writes() {
        let disk = SimDisk::new(5);
        let index = disk.open(&path("/i"), OpenMode::CreateTruncate).unwrap();
        index.set_len(8).unwrap();
        index.sync_data().unwrap();
        let mut first = index.map(8).unwrap();
        first.bytes_mut()[0] = b'a';
        index.write_all_at(1, b"X").unwrap();
        let mut second = index.map(8).unwrap();
        assert_eq!(&second.bytes()[..2], b"\0X");
        second.bytes_mut()[2] = b'c';
        second.flush().unwrap();
        disk.flip_bit_at(&path("/i"), 7, 0).unwrap();
        drop(first);
        assert_eq!(disk.contents(&path("/i")).unwrap(), b"aXc\0\0\0\0\x01");
        second.bytes_mut()[3] = b'd';
        drop(second);
        assert_eq!(disk.contents(&path("/i")).unwrap(), b"aXcd\0\0\0\x01");
        // A file created anew under a live mapping: the stale mapping's
        // later write reaches the new file, nothing else of it does.
        let mut stale = index.map(8).unwrap();
        stale.bytes_mut()[4] = b'e';
        let again = disk.open(&path("/i"), OpenMode::CreateTruncate).unwrap();
        again.set_len(8).unwrap();
        drop(stale);
        assert_eq!(disk.contents(&path("/i")).unwrap(), b"\0\0\0\0e\0\0\0");
    }
}
