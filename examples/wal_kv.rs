//! A replicated key-value store that uses an isrlog [`ReplicatedLog`] as its
//! write-ahead log: the pattern a database author copies.
//!
//! The rules, each shown in code below:
//!
//! 1. **Every write is a WAL entry first.** `put` and `delete` are encoded as
//!    one record ([`Command::encode`]) and appended with `acks=all`. The
//!    append returns once the record is *committed*: on every in-sync
//!    replica, so it survives the leader's crash (guarantee G1 with
//!    `min_insync_replicas = 2`).
//! 2. **State changes only by applying committed entries, in log order.**
//!    Every replica, leader and followers alike, runs one apply loop over
//!    [`ReplicatedLog::committed_records`]. The leader does not touch its map
//!    when a client writes: it waits until its own apply loop has applied the
//!    entry ([`KvReplica::put`]). So concurrent writers cannot apply out of
//!    log order, and nothing uncommitted (which a new leader may truncate)
//!    is ever visible.
//! 3. **The applied offset lives with the state** ([`KvState`]): one struct,
//!    changed in one step under one lock. A database persists both in the
//!    same write (the same transaction or snapshot file), which makes
//!    applying exactly-once (SPEC §6): after a restart the apply loop resumes
//!    at the stored offset, and an entry below it is skipped rather than
//!    applied twice.
//!
//! 4. **The WAL stays bounded** (SPEC §3.9): each replica checkpoints its
//!    state ([`KvReplica::checkpoint`]) and then tells its log how far the
//!    checkpoint reaches ([`ReplicatedLog::set_applied`]). With
//!    `retain_until_applied`, retention deletes only what every replica's
//!    checkpoint holds, so a replica whose apply loop lags loses nothing it
//!    still needs; past a cap (`applied_hold_bytes_max`) the leader deletes
//!    anyway, and a replica that was down that long is rebuilt from the
//!    leader's checkpoint ([`KvSnapshots`], a [`SnapshotStore`]) plus the
//!    WAL after it.
//!
//! The demo: three nodes in one process (memory network and coordinator),
//! writers `put`/`delete` through the leader, the leader crashes mid-write,
//! a new leader takes over, and the demo checks that the new leader's map
//! holds every acknowledged write and that every replica, including the
//! crashed node once restarted, ends with the same map. Then the replicas
//! checkpoint, one of them stops, writes go on until the WAL is deleted past
//! its checkpoint, and it comes back through the leader's snapshot. It
//! prints each map's size and checksum and exits non-zero on any mismatch.
//!
//! Run with `cargo run --release --example wal_kv` (`-- --short` for CI).

use std::collections::{BTreeMap, BTreeSet};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use bytes::Bytes;
use isrlog::{
    Acks, Coordinator, Error, LogConfig, LogId, MemoryCoordinator, MemoryNetwork, Node, NodeConfig,
    NodeId, Offset, ReplicatedLog, SnapshotInfo, SnapshotStore, Snapshots, SystemClock,
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The one log that is the store's WAL.
const WAL: LogId = LogId(0);
/// How long a client waits for its write to be committed (and applied)
/// before it reports the outcome as unknown.
const WRITE_TIMEOUT: Duration = Duration::from_secs(1);

// ---- The WAL entry ----------------------------------------------------------

/// One write, as stored in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Command {
    Put { key: String, value: String },
    Delete { key: String },
}

impl Command {
    /// Layout: a tag byte (`P` or `D`), the key's length as a little-endian
    /// u32, the key, then (`P` only) the value up to the end. The record
    /// batch around it already carries a CRC, so the entry needs none.
    fn encode(&self) -> Vec<u8> {
        let (tag, key, value) = match self {
            Command::Put { key, value } => (b'P', key, value.as_str()),
            Command::Delete { key } => (b'D', key, ""),
        };
        let mut bytes = Vec::with_capacity(5 + key.len() + value.len());
        bytes.push(tag);
        bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
        bytes.extend_from_slice(key.as_bytes());
        bytes.extend_from_slice(value.as_bytes());
        bytes
    }

    /// The inverse of [`Command::encode`]. An entry that does not decode is
    /// an error, never skipped: skipping would make this replica's state
    /// silently differ from the others'.
    fn decode(bytes: &[u8]) -> Result<Command, BoxError> {
        let (&tag, rest) = bytes.split_first().ok_or("empty WAL entry")?;
        let length: [u8; 4] = rest.get(..4).ok_or("truncated key length")?.try_into()?;
        let length = u32::from_le_bytes(length) as usize;
        let key = rest.get(4..4 + length).ok_or("truncated key")?;
        let key = String::from_utf8(key.to_vec())?;
        let value = &rest[4 + length..];
        match tag {
            b'P' => Ok(Command::Put {
                key,
                value: String::from_utf8(value.to_vec())?,
            }),
            b'D' if value.is_empty() => Ok(Command::Delete { key }),
            _ => Err(format!("bad WAL entry tag {tag:#x} or trailing bytes").into()),
        }
    }

    fn key(&self) -> &str {
        match self {
            Command::Put { key, .. } | Command::Delete { key } => key,
        }
    }

    /// The value the key has once this command is applied.
    fn value_after(&self) -> Option<&str> {
        match self {
            Command::Put { value, .. } => Some(value),
            Command::Delete { .. } => None,
        }
    }
}

// ---- The state: the map and the applied offset, always together -----------

/// What one replica of the store holds. `map` reflects exactly the WAL
/// entries below `next_offset`: both change in the same `apply` call, under
/// the same lock, so no reader (and, in a database, no snapshot) ever sees
/// one without the other.
#[derive(Debug, Default)]
struct KvState {
    map: BTreeMap<String, String>,
    /// The offset of the next WAL entry to apply.
    next_offset: Offset,
}

impl KvState {
    /// Applies the entry at `offset`. Entries arrive in offset order; one
    /// below `next_offset` is already in the map and is skipped, which is
    /// what makes a replay after a restart (or a re-delivered entry) apply
    /// each write exactly once.
    fn apply(&mut self, offset: Offset, command: Command) {
        if offset < self.next_offset {
            return;
        }
        match command {
            Command::Put { key, value } => {
                self.map.insert(key, value);
            }
            Command::Delete { key } => {
                self.map.remove(&key);
            }
        }
        self.next_offset = offset.next();
    }

    /// The checkpoint's bytes: the applied offset, then each entry as two
    /// length-prefixed strings (little-endian u32 lengths). A database
    /// writes these to a file (temp file, fsync, rename) before it calls
    /// `set_applied`.
    fn encode(&self) -> Vec<u8> {
        let mut out = self.next_offset.0.to_le_bytes().to_vec();
        for (key, value) in &self.map {
            for part in [key, value] {
                out.extend_from_slice(&(part.len() as u32).to_le_bytes());
                out.extend_from_slice(part.as_bytes());
            }
        }
        out
    }

    /// The inverse of [`KvState::encode`]; a damaged checkpoint is an error.
    fn decode(bytes: &[u8]) -> Result<KvState, BoxError> {
        let offset: [u8; 8] = bytes.get(..8).ok_or("checkpoint too short")?.try_into()?;
        let mut state = KvState {
            map: BTreeMap::new(),
            next_offset: Offset(u64::from_le_bytes(offset)),
        };
        let mut at = 8;
        let next_string = |at: &mut usize| -> Result<String, BoxError> {
            let length: [u8; 4] = bytes
                .get(*at..*at + 4)
                .ok_or("truncated length")?
                .try_into()?;
            let length = u32::from_le_bytes(length) as usize;
            let text = bytes
                .get(*at + 4..*at + 4 + length)
                .ok_or("truncated string")?;
            *at += 4 + length;
            Ok(String::from_utf8(text.to_vec())?)
        };
        while at < bytes.len() {
            let key = next_string(&mut at)?;
            let value = next_string(&mut at)?;
            state.map.insert(key, value);
        }
        Ok(state)
    }

    /// A CRC32 over the sorted entries, to compare replicas at a glance.
    fn checksum(&self) -> u32 {
        let mut hasher = crc32fast::Hasher::new();
        for (key, value) in &self.map {
            hasher.update(&(key.len() as u32).to_le_bytes());
            hasher.update(key.as_bytes());
            hasher.update(&(value.len() as u32).to_le_bytes());
            hasher.update(value.as_bytes());
        }
        hasher.finalize()
    }
}

// ---- One replica of the store ----------------------------------------------

/// A replica's state and the condition its apply loop signals.
type SharedState = Arc<(Mutex<KvState>, Condvar)>;

/// The store on one node: its state and the apply loop that feeds it.
struct KvReplica {
    log: ReplicatedLog,
    state: SharedState,
    stop: Arc<AtomicBool>,
    apply_loop: Option<JoinHandle<Result<(), BoxError>>>,
}

impl KvReplica {
    /// Starts the apply loop over `log` from `state`'s applied offset (a
    /// fresh state here; a database would load its last checkpoint). The
    /// same `state` is the node's [`KvSnapshots`]' to install into.
    fn start(log: ReplicatedLog, state: SharedState, snapshots: Arc<KvSnapshots>) -> KvReplica {
        let stop = Arc::new(AtomicBool::new(false));
        let apply_loop = {
            let (log, state, stop) = (log.clone(), Arc::clone(&state), Arc::clone(&stop));
            std::thread::spawn(move || apply_loop(&log, &state, &snapshots, &stop))
        };
        KvReplica {
            log,
            state,
            stop,
            apply_loop: Some(apply_loop),
        }
    }

    /// Writes `key = value`. `Ok` means committed *and* applied here, so the
    /// caller reads its own write. An error leaves the outcome unknown: the
    /// entry may still be committed (a client retries or reads to find
    /// out).
    fn put(&self, key: &str, value: &str) -> Result<Offset, BoxError> {
        self.write(&Command::Put {
            key: key.to_owned(),
            value: value.to_owned(),
        })
    }

    /// Deletes `key`; same contract as [`KvReplica::put`].
    fn delete(&self, key: &str) -> Result<Offset, BoxError> {
        self.write(&Command::Delete {
            key: key.to_owned(),
        })
    }

    fn write(&self, command: &Command) -> Result<Offset, BoxError> {
        // Rule 1: the WAL first. `acks=all` returns once the entry is below
        // the high watermark; a leader that lost its leadership or its
        // followers fails the call instead.
        let appended = self.log.append_values(&[command.encode()], Acks::All)?;
        // Rule 2: the map is the apply loop's alone; wait for it to pass the
        // entry instead of applying it here out of order.
        self.wait_applied(appended.last_offset, WRITE_TIMEOUT)?;
        Ok(appended.last_offset)
    }

    /// Waits until the entry at `offset` has been applied here.
    fn wait_applied(&self, offset: Offset, timeout: Duration) -> Result<(), BoxError> {
        let deadline = Instant::now() + timeout;
        let (state, applied) = &*self.state;
        let mut state = state.lock();
        while state.next_offset <= offset {
            if applied.wait_until(&mut state, deadline).timed_out() {
                return Err(format!("entry {offset} not applied within {timeout:?}").into());
            }
        }
        Ok(())
    }

    /// Rule 4: checkpoints the state into `snapshots` (memory here; a
    /// database writes a file durably), then tells the log that every
    /// entry below the checkpoint's offset may be deleted as far as this
    /// replica is concerned.
    fn checkpoint(&self, snapshots: &KvSnapshots) -> Result<Offset, BoxError> {
        checkpoint(&self.log, &self.state.0, snapshots)
    }

    /// Map size, checksum and applied offset, read together.
    fn summary(&self) -> (usize, u32, Offset) {
        let state = self.state.0.lock();
        (state.map.len(), state.checksum(), state.next_offset)
    }

    fn value(&self, key: &str) -> Option<String> {
        self.state.0.lock().map.get(key).cloned()
    }

    fn keys(&self) -> Vec<String> {
        self.state.0.lock().map.keys().cloned().collect()
    }

    /// Stops the apply loop and reports how it ended.
    fn stop(mut self) -> Result<(), BoxError> {
        self.stop.store(true, Ordering::Relaxed);
        match self.apply_loop.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err("apply loop panicked".into()),
            None => Ok(()),
        }
    }
}

/// Rule 4: the state's checkpoint, then its offset to the log (in that
/// order: the log may delete below the offset as soon as it knows it).
fn checkpoint(
    log: &ReplicatedLog,
    state: &Mutex<KvState>,
    snapshots: &KvSnapshots,
) -> Result<Offset, BoxError> {
    let (bytes, offset) = {
        let state = state.lock();
        (state.encode(), state.next_offset)
    };
    snapshots.keep(offset, bytes);
    log.set_applied(offset)?;
    Ok(offset)
}

/// How often the apply loop checkpoints the state (rule 4).
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(100);

/// How long the apply loop waits for a snapshot once the log starts above
/// its position before it gives up (rule 4).
const SNAPSHOT_WAIT_MAX: Duration = Duration::from_secs(30);

/// Rule 2 and 3: apply committed entries, in order, from the stored applied
/// offset on. `committed_records` waits at the high watermark and keeps going
/// across leader changes, on followers and leader alike; it never yields an
/// uncommitted entry, so nothing applied here is ever truncated away. Rule
/// 4: every `CHECKPOINT_INTERVAL` it checkpoints the state.
fn apply_loop(
    log: &ReplicatedLog,
    state: &(Mutex<KvState>, Condvar),
    snapshots: &KvSnapshots,
    stop: &AtomicBool,
) -> Result<(), BoxError> {
    let (state, applied) = state;
    let from = state.lock().next_offset;
    let mut entries = log.committed_records(from);
    let mut checkpointed = Instant::now();
    // Since when the log has started above the loop's position.
    let mut behind_since: Option<Instant> = None;
    while !stop.load(Ordering::Relaxed) {
        if checkpointed.elapsed() >= CHECKPOINT_INTERVAL {
            match checkpoint(log, state, snapshots) {
                // Just after a snapshot was installed and before the log
                // restarted at its offset: the next round reports it.
                Err(error)
                    if error
                        .downcast_ref::<Error>()
                        .is_some_and(|e| matches!(e, Error::OffsetOutOfRange { .. })) => {}
                other => {
                    other?;
                }
            }
            checkpointed = Instant::now();
        }
        // A bounded wait, so that the loop notices `stop`.
        let Some(entry) = entries.next_timeout(Duration::from_millis(50)) else {
            continue;
        };
        let entry = match entry {
            Ok(entry) => entry,
            // Rule 4: a snapshot was installed under the loop (the log now
            // starts at its offset, above the loop's position): go on from
            // the installed state's offset.
            Err(Error::OffsetOutOfRange { .. })
                if state.lock().next_offset > entries.position() =>
            {
                let from = state.lock().next_offset;
                entries = log.committed_records(from);
                continue;
            }
            // Rule 4: the log start passed this replica's position before
            // the snapshot that replaces its state arrived (its application
            // was behind past the cap, and the log follows the leader's
            // start at once). The log fetches that snapshot
            // (`needs_snapshot`); wait for its install (the arm above),
            // for a bounded time.
            Err(Error::OffsetOutOfRange {
                requested,
                log_start,
                ..
            }) if requested < log_start
                && behind_since.get_or_insert_with(Instant::now).elapsed() < SNAPSHOT_WAIT_MAX =>
            {
                std::thread::sleep(Duration::from_millis(10));
                entries = log.committed_records(entries.position());
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        behind_since = None;
        let command = Command::decode(&entry.value)?;
        state.lock().apply(entry.offset, command);
        applied.notify_all();
    }
    Ok(())
}

// ---- Checkpoints as snapshots ------------------------------------------------

/// Rule 4: a node's checkpoints, offered to the log as snapshots. The
/// leader's are sent to a follower whose log ends below the leader's log
/// start; a follower installs one by replacing its state.
struct KvSnapshots {
    /// The replica's state, to install into.
    state: SharedState,
    /// The latest checkpoint: its offset and bytes.
    latest: Mutex<Option<(SnapshotInfo, Bytes)>>,
    /// The offset of the last snapshot installed from a leader, if any.
    installed: Mutex<Option<Offset>>,
}

impl KvSnapshots {
    fn new(state: SharedState) -> KvSnapshots {
        KvSnapshots {
            state,
            latest: Mutex::new(None),
            installed: Mutex::new(None),
        }
    }

    /// Keeps a checkpoint taken at `offset` as the latest.
    fn keep(&self, offset: Offset, bytes: Vec<u8>) {
        let info = SnapshotInfo {
            offset,
            size_bytes: bytes.len() as u64,
        };
        *self.latest.lock() = Some((info, Bytes::from(bytes)));
    }
}

impl SnapshotStore for KvSnapshots {
    fn latest(&self, _log: LogId) -> Option<SnapshotInfo> {
        self.latest.lock().as_ref().map(|(info, _)| *info)
    }

    fn read_chunk(
        &self,
        _log: LogId,
        snapshot: SnapshotInfo,
        position: u64,
        len: usize,
    ) -> std::io::Result<Bytes> {
        let latest = self.latest.lock();
        match latest.as_ref() {
            Some((info, bytes)) if *info == snapshot => {
                let start = usize::try_from(position).map_err(std::io::Error::other)?;
                bytes
                    .get(start..start + len)
                    .map(Bytes::copy_from_slice)
                    .ok_or_else(|| std::io::Error::other("chunk past the checkpoint's end"))
            }
            _ => Err(std::io::Error::other("that checkpoint is gone")),
        }
    }

    fn install(
        &self,
        _log: LogId,
        snapshot: SnapshotInfo,
        data: &mut dyn std::io::Read,
    ) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        data.read_to_end(&mut bytes)?;
        let state = KvState::decode(&bytes).map_err(std::io::Error::other)?;
        if state.next_offset != snapshot.offset {
            return Err(std::io::Error::other("checkpoint offset mismatch"));
        }
        // Recorded first: a writer woken by the new state may look.
        self.keep(snapshot.offset, bytes);
        *self.installed.lock() = Some(snapshot.offset);
        // One step under the lock: map and offset change together. A state
        // that already applied past the snapshot (from this replica's own
        // log, while the transfer ran) is newer and is kept: going back
        // would lose the entries between, which the apply loop does not
        // read again.
        let mut current = self.state.0.lock();
        if current.next_offset < state.next_offset {
            *current = state;
        }
        drop(current);
        self.state.1.notify_all();
        Ok(())
    }
}

// ---- The demo ----------------------------------------------------------------

/// What one client wrote: the value each of its keys must have, and the one
/// write whose outcome it does not know (the one that failed when the leader
/// crashed), which may or may not have been committed.
#[derive(Debug, Default)]
struct ClientRecord {
    acknowledged: BTreeMap<String, Option<String>>,
    in_doubt: Option<Command>,
    writes: u64,
}

/// A client writing to `store` until `stop` or its first failed write. Each
/// client owns its keys, so the expected final value of a key is the last
/// write its client saw acknowledged.
fn run_client(client: usize, store: &KvReplica, stop: &AtomicBool) -> ClientRecord {
    let mut record = ClientRecord::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("client-{client}/key-{}", n % 64);
        let command = if n % 5 == 4 {
            Command::Delete { key: key.clone() }
        } else {
            Command::Put {
                key: key.clone(),
                value: format!("value-{n}"),
            }
        };
        let outcome = match &command {
            Command::Put { key, value } => store.put(key, value),
            Command::Delete { key } => store.delete(key),
        };
        match outcome {
            Ok(_) => {
                let value = command.value_after().map(str::to_owned);
                record.acknowledged.insert(key, value);
                record.writes += 1;
            }
            Err(_) => {
                record.in_doubt = Some(command);
                break;
            }
        }
        n += 1;
    }
    record
}

/// Every difference between `store` and what the clients were told. A key
/// must hold the value of its last acknowledged write (none: absent), or
/// else the value of an in-doubt write to it, which may have committed.
fn mismatches(store: &KvReplica, clients: &[ClientRecord]) -> Vec<String> {
    let mut keys: BTreeSet<String> = store.keys().into_iter().collect();
    for client in clients {
        keys.extend(client.acknowledged.keys().cloned());
        keys.extend(client.in_doubt.iter().map(|c| c.key().to_owned()));
    }
    let mut problems = Vec::new();
    for key in keys {
        let actual = store.value(&key);
        let expected = clients
            .iter()
            .find_map(|c| c.acknowledged.get(&key))
            .cloned()
            .flatten();
        let in_doubt = clients
            .iter()
            .filter_map(|c| c.in_doubt.as_ref())
            .find(|c| c.key() == key);
        let explained_by_doubt = in_doubt.is_some_and(|c| actual.as_deref() == c.value_after());
        if actual != expected && !explained_by_doubt {
            problems.push(format!("{key}: expected {expected:?}, found {actual:?}"));
        }
    }
    problems
}

fn start_node(
    id: NodeId,
    dir: &std::path::Path,
    network: &MemoryNetwork,
    coordinator: &MemoryCoordinator,
    snapshots: &Arc<KvSnapshots>,
) -> Result<Node, BoxError> {
    let mut config = NodeConfig::new(id, dir.join(format!("node-{}", id.0)));
    // G1 needs min ISR 2 with 3 replicas: an acknowledged write is on at
    // least two nodes, so one crash cannot lose it.
    config.replication.min_insync_replicas = 2;
    config.replication.request_timeout = WRITE_TIMEOUT;
    config.session_timeout = Duration::from_millis(500);
    // Rule 4: delete only what every replica's checkpoint holds, unless
    // more than 256 KiB would be kept for one; small segments so that the
    // demo deletes some.
    config.replication.retain_until_applied = true;
    config.replication.applied_hold_bytes_max = Some(256 * 1024);
    config.log = LogConfig {
        segment_bytes_max: 64 * 1024,
        retention_bytes: Some(128 * 1024),
        ..LogConfig::default()
    };
    config.retention_check_interval = Duration::from_millis(50);
    config.snapshots = Some(Snapshots(Arc::clone(snapshots) as Arc<dyn SnapshotStore>));
    let node = Node::start(
        config,
        Arc::new(network.transport(id)),
        Arc::new(coordinator.clone()),
        Arc::new(SystemClock),
    )?;
    network.register(id, node.handler());
    network.node_up(id);
    Ok(node)
}

fn leader_of(coordinator: &MemoryCoordinator) -> Option<NodeId> {
    coordinator.log_state(WAL).ok().flatten()?.leader
}

/// Writes `key = value` until it succeeds, for up to 10 s. Retrying is safe
/// only because the put is idempotent (see the writes after the failover).
fn put_retrying(store: &KvReplica, key: &str, value: &str) -> Result<(), BoxError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(error) = store.put(key, value) {
        if Instant::now() >= deadline {
            return Err(format!("put keeps failing: {error}").into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// The second act (rule 4). Every replica checkpoints; one follower
/// stops; writes go on, with checkpoints on the running replicas, until
/// the WAL has been deleted past the stopped replica's checkpoint (the cap
/// passed); the follower then restarts from its own last checkpoint, which
/// the WAL no longer reaches, and catches up through the leader's. Returns
/// whether its map then equals the leader's.
#[allow(clippy::too_many_arguments)]
fn bounded_wal_and_snapshot(
    leader: NodeId,
    ids: &[NodeId],
    dir: &std::path::Path,
    network: &MemoryNetwork,
    coordinator: &MemoryCoordinator,
    nodes: &mut [Option<Node>],
    stores: &mut [Option<KvReplica>],
    snapshots: &mut [Arc<KvSnapshots>],
) -> Result<bool, BoxError> {
    let at = |id: NodeId| id.0 as usize;
    let victim = *ids.iter().find(|id| **id != leader).ok_or("no follower")?;
    for (index, store) in stores.iter().enumerate() {
        if let Some(store) = store {
            store.checkpoint(&snapshots[index])?;
        }
    }
    network.node_down(victim);
    if let Some(node) = nodes[at(victim)].take() {
        node.halt();
    }
    if let Some(store) = stores[at(victim)].take() {
        let _ = store.stop();
    }
    let victim_checkpoint = snapshots[at(victim)]
        .latest
        .lock()
        .clone()
        .ok_or("the follower has no checkpoint")?;
    let leader_store = stores[at(leader)].as_ref().ok_or("no leader store")?;
    let started = Instant::now();
    let mut writes = 0u64;
    while leader_store.log.log_start_offset() <= victim_checkpoint.0.offset {
        if writes >= 100_000 || started.elapsed() > Duration::from_secs(60) {
            return Err("the WAL was never deleted past the stopped replica's checkpoint".into());
        }
        let key = format!("bounded/key-{}", writes % 500);
        put_retrying(
            leader_store,
            &key,
            &format!("value-{writes}-{}", "v".repeat(80)),
        )?;
        writes += 1;
        if writes.is_multiple_of(100) {
            for (index, store) in stores.iter().enumerate() {
                if let Some(store) = store {
                    store.checkpoint(&snapshots[index])?;
                }
            }
        }
    }
    println!(
        "{victim} stopped at checkpoint {}; after {writes} more writes the WAL starts at {} \
         (retention deleted past it once more than the 256 KiB cap was held for it), \
         so {victim} must come back through a snapshot",
        victim_checkpoint.0.offset,
        leader_store.log.log_start_offset(),
    );
    leader_store.checkpoint(&snapshots[at(leader)])?;
    // Writes after the checkpoint: the follower gets them from the WAL.
    for n in 0..50 {
        put_retrying(leader_store, &format!("after-checkpoint/key-{n}"), "v")?;
    }
    // The follower restarts from its own last checkpoint (a database loads
    // it from its disk), below the leader's log start.
    let state = KvState::decode(&victim_checkpoint.1)?;
    let state: SharedState = Arc::new((Mutex::new(state), Condvar::new()));
    snapshots[at(victim)] = Arc::new(KvSnapshots::new(Arc::clone(&state)));
    let node = start_node(victim, dir, network, coordinator, &snapshots[at(victim)])?;
    let log = node.wait_for_log(WAL, Duration::from_secs(5))?;
    stores[at(victim)] = Some(KvReplica::start(
        log,
        state,
        Arc::clone(&snapshots[at(victim)]),
    ));
    nodes[at(victim)] = Some(node);
    let leader_store = stores[at(leader)].as_ref().ok_or("no leader store")?;
    let victim_store = stores[at(victim)].as_ref().ok_or("no follower store")?;
    let end = leader_store.log.log_end_offset();
    wait_caught_up(victim_store, end)?;
    let (size, checksum, applied) = victim_store.summary();
    let (leader_size, leader_checksum, leader_applied) = leader_store.summary();
    println!(
        "  {victim}: {size} keys, checksum {checksum:08x}, applied through offset {applied} \
         (rebuilt from {leader}'s checkpoint at {}, WAL after it)",
        snapshots[at(victim)]
            .installed
            .lock()
            .ok_or("the follower installed no snapshot")?
    );
    println!("  {leader}: {leader_size} keys, checksum {leader_checksum:08x}, applied through offset {leader_applied} (leader)");
    Ok(checksum == leader_checksum && size == leader_size)
}

/// Waits until `store` has applied everything below `end`.
fn wait_caught_up(store: &KvReplica, end: Offset) -> Result<(), BoxError> {
    if end > Offset(0) {
        store.wait_applied(Offset(end.0 - 1), Duration::from_secs(10))?;
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        // Log lines go to stdout: colours only on a terminal, never in a pipe.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let short = std::env::args().any(|a| a == "--short");
    let write_for = Duration::from_millis(if short { 300 } else { 2000 });

    // --- Three nodes, each with a replica of the store. ----------------------
    let dir = tempfile::tempdir()?;
    let network = MemoryNetwork::new(7);
    let coordinator = MemoryCoordinator::new(Arc::new(SystemClock));
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    coordinator.create_log(WAL, ids.to_vec())?;
    let mut nodes: Vec<Option<Node>> = Vec::new();
    let mut stores: Vec<Option<KvReplica>> = Vec::new();
    let mut snapshots: Vec<Arc<KvSnapshots>> = Vec::new();
    for id in ids {
        let state: SharedState = Arc::default();
        let checkpoints = Arc::new(KvSnapshots::new(Arc::clone(&state)));
        let node = start_node(id, dir.path(), &network, &coordinator, &checkpoints)?;
        let log = node.wait_for_log(WAL, Duration::from_secs(5))?;
        stores.push(Some(KvReplica::start(log, state, Arc::clone(&checkpoints))));
        nodes.push(Some(node));
        snapshots.push(checkpoints);
    }
    let old_leader = leader_of(&coordinator).ok_or("no leader")?;
    let leader_store = stores[old_leader.0 as usize]
        .as_ref()
        .ok_or("no store on the leader")?;
    leader_store.log.wait_until_leader(Duration::from_secs(5))?;
    println!("3 replicas of the store; {old_leader} leads the WAL");

    // --- Clients write through the leader; the leader crashes mid-write. -----
    let stop = AtomicBool::new(false);
    let (clients, new_leader, elected_after) = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|client| {
                let stop = &stop;
                scope.spawn(move || run_client(client, leader_store, stop))
            })
            .collect();
        std::thread::sleep(write_for);
        println!("crashing the leader {old_leader} while clients write ...");
        // A crash: the node's threads stop and nothing is flushed; its
        // in-memory map is gone with it. A client with a write in flight
        // gets an error within WRITE_TIMEOUT (outcome unknown) and stops.
        let crashed_at = Instant::now();
        network.node_down(old_leader);
        if let Some(node) = nodes[old_leader.0 as usize].take() {
            node.halt();
        }
        // The coordinator notices when the crashed node's session expires;
        // the controller then elects the first live in-sync replica.
        let new_leader = loop {
            match leader_of(&coordinator) {
                Some(id) if id != old_leader => break Some(id),
                _ if crashed_at.elapsed() > Duration::from_secs(30) => break None,
                _ => std::thread::sleep(Duration::from_millis(1)),
            }
        };
        let elected_after = crashed_at.elapsed();
        stop.store(true, Ordering::Relaxed);
        let clients: Vec<ClientRecord> = handles
            .into_iter()
            .map(|h| h.join())
            .collect::<Result<_, _>>()
            .unwrap_or_else(|_| {
                // A client that panicked would silently drop its
                // acknowledged writes from the check: fail the run instead.
                eprintln!("a client thread panicked");
                std::process::exit(1)
            });
        (clients, new_leader, elected_after)
    });
    let new_leader = new_leader.ok_or("no new leader within 30 s")?;
    if let Some(store) = stores[old_leader.0 as usize].take() {
        // The crashed process's apply loop dies with it; whatever it says
        // about its last read is moot.
        let _ = store.stop();
    }
    let acknowledged: u64 = clients.iter().map(|c| c.writes).sum();
    let in_doubt = clients.iter().filter(|c| c.in_doubt.is_some()).count();
    println!(
        "{acknowledged} writes acknowledged, {in_doubt} in doubt at the crash; \
         {new_leader} elected {:.0} ms after it (session timeout 500 ms)",
        elected_after.as_secs_f64() * 1e3
    );

    // --- The new leader takes writes. ------------------------------------------
    let store = stores[new_leader.0 as usize]
        .as_ref()
        .ok_or("no store on the new leader")?;
    store.log.wait_until_leader(Duration::from_secs(5))?;
    let mut after = ClientRecord::default();
    for n in 0..20 {
        let key = format!("after-failover/key-{n}");
        let deadline = Instant::now() + Duration::from_secs(10);
        // Right after an election the new leader may still be re-forming
        // its ISR. Retrying blindly is safe here only because `put(key, "v")`
        // is idempotent: after a `Timeout` the first attempt may have been
        // appended too. A database whose writes are not idempotent retries
        // through `IdempotentProducer`, which never stores a retry twice.
        while let Err(error) = store.put(&key, "v") {
            if Instant::now() >= deadline {
                return Err(format!("put on the new leader keeps failing: {error}").into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        after.acknowledged.insert(key, Some("v".to_owned()));
        after.writes += 1;
    }
    println!("{new_leader} took 20 more writes");
    // --- The crashed node returns and rebuilds its map from its last -------
    // --- checkpoint (a database reads it from its disk) and the WAL. -------
    let last_checkpoint = snapshots[old_leader.0 as usize].latest.lock().clone();
    let state = match &last_checkpoint {
        Some((_, bytes)) => KvState::decode(bytes)?,
        None => KvState::default(),
    };
    let state: SharedState = Arc::new((Mutex::new(state), Condvar::new()));
    snapshots[old_leader.0 as usize] = Arc::new(KvSnapshots::new(Arc::clone(&state)));
    let node = start_node(
        old_leader,
        dir.path(),
        &network,
        &coordinator,
        &snapshots[old_leader.0 as usize],
    )?;
    let log = node.wait_for_log(WAL, Duration::from_secs(5))?;
    let restarted = KvReplica::start(log, state, Arc::clone(&snapshots[old_leader.0 as usize]));
    nodes[old_leader.0 as usize] = Some(node);

    // --- Check every replica against what the clients were told. -----------
    let mut clients = clients;
    clients.push(after);
    let end = store.log.log_end_offset();
    let mut failed = false;
    let (_, leader_checksum, _) = store.summary();
    let replicas = ids
        .iter()
        .zip(&stores)
        .filter_map(|(id, store)| Some((*id, store.as_ref()?)))
        .chain([(old_leader, &restarted)]);
    for (id, replica) in replicas {
        wait_caught_up(replica, end)?;
        let (size, checksum, applied) = replica.summary();
        let problems = mismatches(replica, &clients);
        println!(
            "  {id}: {size} keys, checksum {checksum:08x}, applied through offset {applied}{}",
            match id {
                _ if id == new_leader => " (leader)",
                _ if id == old_leader => " (crashed, restarted from its checkpoint, replayed)",
                _ => "",
            }
        );
        for problem in problems.iter().take(5) {
            eprintln!("    MISMATCH {problem}");
        }
        failed |= !problems.is_empty() || checksum != leader_checksum;
    }
    stores[old_leader.0 as usize] = Some(restarted);

    // --- Rule 4: checkpoints bound the WAL; a replica that was down past --
    // --- the cap comes back through the leader's checkpoint. ---------------
    failed |= !bounded_wal_and_snapshot(
        new_leader,
        &ids,
        dir.path(),
        &network,
        &coordinator,
        &mut nodes,
        &mut stores,
        &mut snapshots,
    )?;

    for replica in stores.into_iter().flatten() {
        replica.stop()?;
    }
    for node in nodes.into_iter().flatten() {
        node.shutdown()?;
    }
    if failed {
        eprintln!("FAILED: a replica's map does not hold every acknowledged write");
        std::process::exit(1);
    }
    println!("OK: every replica's map holds every acknowledged write");
    Ok(())
}
