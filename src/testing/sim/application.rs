//! Applications in the simulator (issue 28; SPEC 2.6, 3.9, G1): in a
//! drawn fraction of runs each node runs an application that applies the
//! committed records it reads from its own replica, checkpoints now and
//! then and reports its position with `ReplicatedLog::set_applied`; the
//! nodes keep the log until every application applied it
//! (`retain_until_applied`), the leader deletes now and then (retention,
//! `delete_records_before`), and in some runs a cap on what deletion keeps
//! (`applied_hold_bytes_max`, `applied_hold_age_max`) lets it pass a
//! replica that is down or whose application stalls, which must then be
//! rebuilt from a snapshot ([`SimStore`], a [`SnapshotStore`] kept across
//! the node's restarts) carried over the simulated network
//! ([`FetchSession::next_snapshot_request`](crate::replication::FetchSession::next_snapshot_request)).
//! In the runs whose nodes have no store, such a replica must say that it
//! needs a snapshot instead of starting past a gap. A node that holds no
//! replica of the log (a run of more than three nodes) applies nothing
//! until a reassignment places one on it; its application then starts
//! from offset 0, below the leader's log start perhaps, as a lost disk's
//! does.
//!
//! Applications run only in single-log runs, on the first log
//! ([`SimConfig::applications`](super::SimConfig::applications)): their
//! settings (retention until applied, retention by size) are the nodes'
//! and would hold every log a node hosts, and per-log applications are
//! not built yet.
//!
//! An application's state is a fold, a hash chain over `(offset, value)`
//! from offset 0, so that any two states at one position can be compared:
//! every state an application reaches (by applying, or by installing a
//! snapshot) must be the chain's state at its position, and every record it
//! applies must be the next one (no offset applied twice, none skipped).
//!
//! Everything here is drawn from a stream of its own: a run that draws no
//! applications is, event for event, the run it was before.

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;

use super::{Event, Run, MIN_INSYNC_REPLICAS, REQUEST_TIMEOUT};
use crate::rng::{mix64, SplitMix64};
use crate::snapshot::{SnapshotInfo, SnapshotStore, Snapshots};
use crate::sync::Mutex;
use crate::testing::harness::NodeSettings;
use crate::transport::{Request, Response, SnapshotRequest, TransportError};
use crate::types::LeaderEpoch;
use crate::{Clock, Error, Isolation, LogId, NodeId, Offset};

/// Salt of the applications' generator: a stream apart from the faults'
/// and the operator's.
const APPLICATION_STREAM_SALT: u64 = 0x0_A991_1CA7;

/// Mean simulated time between two apply steps of an application.
const APPLY_INTERVAL_MEAN: Duration = Duration::from_millis(100);

/// Mean length of an application's stall (its apply loop stops for a
/// while), drawn at one apply step in fifty before the calm.
const STALL_MEAN: Duration = Duration::from_secs(3);

/// Mean simulated time between two checkpoints of an application.
const CHECKPOINT_INTERVAL_MEAN: Duration = Duration::from_millis(700);

/// Mean simulated time between two `delete_records_before` calls.
const DELETE_INTERVAL_MEAN: Duration = Duration::from_millis(1500);

/// The state of an application that applied nothing.
const INITIAL_STATE: u64 = 0x15_0C0D_E5EE_D000;

/// A state after applying `value` at `offset` to `state`.
fn fold(state: u64, offset: Offset, value: &[u8]) -> u64 {
    let mut hash = 0xCBF2_9CE4_8422_2325_u64;
    for byte in value {
        hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01B3);
    }
    mix64(state ^ mix64(offset.0 ^ hash.rotate_left(17)))
}

/// What happens to applications in a run.
#[derive(Debug)]
pub(super) enum AppEvent {
    /// Node `0`'s application applies what its replica has committed.
    Apply(usize),
    /// Node `0`'s application checkpoints (and takes a snapshot), then
    /// reports its position.
    Checkpoint(usize),
    /// The log's leader is asked to delete records.
    Delete,
    /// The leader's application restores its state from scratch (its
    /// operator rebuilt it), once in a run.
    Restore,
    /// A follower's snapshot chunk request reaches its leader.
    SnapshotArrives {
        leader: usize,
        follower: usize,
        sequence: u64,
        request: SnapshotRequest,
    },
    /// The answer (or the call's failure) reaches the follower.
    SnapshotAnswered {
        follower: usize,
        leader: NodeId,
        sequence: u64,
        log: LogId,
        answer: Result<Response, TransportError>,
    },
}

/// What a run's applications did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ApplicationCounts {
    /// 1 in a run with applications.
    pub(crate) runs: u64,
    /// 1 in a run whose nodes have snapshot stores.
    pub(crate) with_store: u64,
    /// 1 in a run with a cap on what deletion keeps.
    pub(crate) capped: u64,
    /// Records applied (again after a restart too).
    pub(crate) applied: u64,
    /// `set_applied` calls that were taken.
    pub(crate) set_applied: u64,
    /// `delete_records_before` calls that moved the log start.
    pub(crate) deletions: u64,
    /// Moves of a leader's log start seen (retention's included).
    pub(crate) log_start_moves: u64,
    /// Snapshots installed.
    pub(crate) snapshots_installed: u64,
    /// Applications restored from scratch (leaders', followers').
    pub(crate) restores: (u64, u64),
    /// Leaderships handed over by a leader whose application needed a
    /// snapshot.
    pub(crate) needs_snapshot_hand_overs: u64,
    /// Replicas that ended a run without a store saying they need a
    /// snapshot.
    pub(crate) needs_snapshot_reported: u64,
}

impl ApplicationCounts {
    /// Adds `other`'s counts to these.
    pub(crate) fn add(&mut self, other: &ApplicationCounts) {
        self.runs += other.runs;
        self.with_store += other.with_store;
        self.capped += other.capped;
        self.applied += other.applied;
        self.set_applied += other.set_applied;
        self.deletions += other.deletions;
        self.log_start_moves += other.log_start_moves;
        self.snapshots_installed += other.snapshots_installed;
        self.restores.0 += other.restores.0;
        self.restores.1 += other.restores.1;
        self.needs_snapshot_hand_overs += other.needs_snapshot_hand_overs;
        self.needs_snapshot_reported += other.needs_snapshot_reported;
    }
}

/// One machine's application durable state, and its [`SnapshotStore`].
/// Kept across the node's restarts; a lost disk loses it too.
#[derive(Debug)]
pub(super) struct SimStore {
    durable: Mutex<Durable>,
}

#[derive(Debug)]
struct Durable {
    /// The last checkpoint: position and state.
    checkpoint: (Offset, u64),
    /// The latest snapshot and its bytes.
    latest: Option<(SnapshotInfo, Bytes)>,
    /// Snapshots installed into it.
    installs: u64,
}

impl SimStore {
    fn new() -> SimStore {
        SimStore {
            durable: Mutex::new(Durable {
                checkpoint: (Offset::ZERO, INITIAL_STATE),
                latest: None,
                installs: 0,
            }),
        }
    }

    /// A snapshot's bytes: its offset, its state, and padding drawn from
    /// both (so that a transfer takes a few chunks).
    fn encode(offset: Offset, state: u64) -> Bytes {
        let padding = (mix64(offset.0 ^ state) % 10_000) as usize;
        let mut bytes = Vec::with_capacity(20 + padding);
        bytes.extend_from_slice(&offset.0.to_le_bytes());
        bytes.extend_from_slice(&state.to_le_bytes());
        bytes.extend_from_slice(&(padding as u32).to_le_bytes());
        bytes.extend((0..padding).map(|i| pad_byte(state, i)));
        Bytes::from(bytes)
    }

    fn decode(bytes: &[u8]) -> std::io::Result<(Offset, u64)> {
        let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned());
        let word = |at: usize| -> std::io::Result<u64> {
            bytes
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
                .ok_or_else(|| bad("short snapshot"))
        };
        let (offset, state) = (Offset(word(0)?), word(8)?);
        let padding = bytes
            .get(16..20)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or_else(|| bad("short snapshot"))? as usize;
        let rest = &bytes[20..];
        if rest.len() != padding
            || rest
                .iter()
                .enumerate()
                .any(|(i, b)| *b != pad_byte(state, i))
        {
            return Err(bad("snapshot padding differs"));
        }
        Ok((offset, state))
    }
}

fn pad_byte(state: u64, i: usize) -> u8 {
    (state.rotate_left((i % 64) as u32) as u8) ^ (i as u8)
}

impl SnapshotStore for SimStore {
    fn latest(&self, _log: LogId) -> Option<SnapshotInfo> {
        self.durable.lock().latest.as_ref().map(|(info, _)| *info)
    }

    fn read_chunk(
        &self,
        _log: LogId,
        snapshot: SnapshotInfo,
        position: u64,
        len: usize,
    ) -> std::io::Result<Bytes> {
        let durable = self.durable.lock();
        match durable.latest.as_ref() {
            Some((info, bytes)) if *info == snapshot => {
                crate::testing::fault_apps::snapshot_chunk(bytes, position, len)
            }
            _ => Err(std::io::Error::other("no such snapshot")),
        }
    }

    fn install(
        &self,
        _log: LogId,
        snapshot: SnapshotInfo,
        data: &mut dyn Read,
    ) -> std::io::Result<()> {
        let bytes = crate::testing::fault_apps::read_whole_snapshot(snapshot, data)?;
        let (offset, state) = SimStore::decode(&bytes)?;
        if offset != snapshot.offset {
            return Err(std::io::Error::other(
                "the snapshot's offset differs from its info",
            ));
        }
        let mut durable = self.durable.lock();
        durable.checkpoint = (offset, state);
        durable.latest = Some((snapshot, Bytes::from(bytes)));
        durable.installs += 1;
        Ok(())
    }
}

/// One node's application, as it runs.
#[derive(Debug)]
struct App {
    store: std::sync::Arc<SimStore>,
    /// The next offset it applies, and its state (everything below it
    /// applied).
    position: Offset,
    state: u64,
    /// Its store's installs it has taken in.
    installs_seen: u64,
    /// Its apply loop stands still until then.
    stalled_until: Duration,
}

impl App {
    fn new() -> App {
        App {
            store: std::sync::Arc::new(SimStore::new()),
            position: Offset::ZERO,
            state: INITIAL_STATE,
            installs_seen: 0,
            stalled_until: Duration::ZERO,
        }
    }
}

/// Every application of a run, and what the checks remember.
#[derive(Debug)]
pub(super) struct Applications {
    /// Whether applications restore from scratch now and then (with a
    /// cap and stores).
    restores: bool,
    rng: SplitMix64,
    /// The nodes have snapshot stores.
    with_store: bool,
    /// The cap on what deletion keeps for a lagging application.
    hold_bytes_max: Option<u64>,
    hold_age_max: Option<Duration>,
    /// `LogConfig::retention_bytes` of the nodes.
    retention_bytes: Option<u64>,
    apps: Vec<App>,
    /// `chain[i]`: the state after applying every offset below `i`, as the
    /// first application that got there applied them.
    chain: Vec<u64>,
    /// `values[i]`: the value applied at offset `i`.
    values: Vec<Vec<u8>>,
    /// The highest position each node's application ever reported (or
    /// its replica took from an installed snapshot).
    reported: Vec<Option<Offset>>,
    /// Each node's leader epoch and log start when last seen leading.
    leader_starts: Vec<Option<(LeaderEpoch, Offset)>>,
    /// A leader seen needing a snapshot, and its epoch.
    stuck_leader: Option<(usize, LeaderEpoch)>,
    counts: ApplicationCounts,
}

impl Applications {
    /// The applications of a run of `seed` with `nodes` nodes, if the run
    /// draws them (two runs in three).
    pub(super) fn draw(seed: u64, nodes: usize, restores: bool) -> Option<Applications> {
        let mut rng = SplitMix64::new(mix64(seed ^ APPLICATION_STREAM_SALT));
        if !rng.chance(2.0 / 3.0) {
            return None;
        }
        let with_store = rng.chance(0.7);
        // A cap only with stores: without one, a passed replica is
        // stuck for good, and two of them would leave no ISR.
        let capped = with_store && rng.chance(0.5);
        let hold_bytes_max = (capped && rng.chance(0.7)).then(|| 4096 + rng.next_u64() % 12_288);
        let hold_age_max = (capped && (hold_bytes_max.is_none() || rng.chance(0.3)))
            .then(|| Duration::from_millis(2000 + rng.next_u64() % 4000));
        let retention_bytes = rng.chance(0.5).then(|| 16_384 + rng.next_u64() % 32_768);
        let counts = ApplicationCounts {
            runs: 1,
            with_store: u64::from(with_store),
            capped: u64::from(capped),
            ..ApplicationCounts::default()
        };
        Some(Applications {
            restores,
            rng,
            with_store,
            hold_bytes_max,
            hold_age_max,
            retention_bytes,
            apps: (0..nodes).map(|_| App::new()).collect(),
            chain: vec![INITIAL_STATE],
            values: Vec::new(),
            reported: vec![None; nodes],
            leader_starts: vec![None; nodes],
            stuck_leader: None,
            counts,
        })
    }

    fn capped(&self) -> bool {
        self.hold_bytes_max.is_some() || self.hold_age_max.is_some()
    }

    fn interval(&mut self, mean: Duration) -> Duration {
        let uniform = 1.0 - self.rng.next_f64();
        Duration::from_micros(((-uniform.ln() * mean.as_micros() as f64) as u64).max(1))
    }

    /// What the run reports.
    pub(super) fn counts(&self) -> ApplicationCounts {
        self.counts
    }

    /// Whether the run may reassign its log: not without stores, where a
    /// replica below the log start stays there, and a move to it would
    /// never complete.
    pub(super) fn allow_reassignments(&self) -> bool {
        self.with_store
    }

    /// Gives `settings` what the nodes of a run with applications need:
    /// retention until applied, deletion that deletes, and each node's
    /// snapshot store if the run has stores.
    pub(super) fn configure_settings(&self, settings: &mut NodeSettings) {
        settings.replication.retain_until_applied = true;
        settings.replication.applied_hold_bytes_max = self.hold_bytes_max;
        settings.replication.applied_hold_age_max = self.hold_age_max;
        // Snapshots of a few chunks; fetches of a few dozen records.
        settings.replication.fetch_bytes_max = 4096;
        settings.retention_check_interval = Some(Duration::from_secs(1));
        settings.log.retention_bytes = self.retention_bytes;
        // Segments of a few dozen records, so that deletion deletes.
        settings.log.segment_bytes_max = 6 * 1024;
        if self.with_store {
            for index in 0..self.apps.len() {
                settings
                    .snapshots
                    .insert(NodeId(index as u32), self.store_of(index));
            }
        }
    }

    /// Node `index`'s snapshot store, as its configuration holds it.
    fn store_of(&self, index: usize) -> Snapshots {
        let store: std::sync::Arc<dyn SnapshotStore> = self.apps[index].store.clone();
        Snapshots(store)
    }
}

impl Run {
    /// Schedules the applications' first steps, if the run has them.
    pub(super) fn start_applications(&mut self) {
        let Some(apps) = self.applications.as_mut() else {
            return;
        };
        let mut first = Vec::new();
        for index in 0..apps.apps.len() {
            first.push((apps.interval(APPLY_INTERVAL_MEAN), AppEvent::Apply(index)));
            first.push((
                apps.interval(CHECKPOINT_INTERVAL_MEAN),
                AppEvent::Checkpoint(index),
            ));
        }
        first.push((apps.interval(DELETE_INTERVAL_MEAN), AppEvent::Delete));
        // An application behind its log start, a leader's included (SPEC
        // 3.9: it hands the leadership over and installs a snapshot as a
        // follower), needs a cap to get there.
        if apps.restores && apps.with_store && apps.capped() {
            let at = Duration::from_secs(10 + apps.rng.next_u64() % 40);
            first.push((at, AppEvent::Restore));
        }
        let (store, capped) = (apps.with_store, apps.capped());
        for (after, event) in first {
            self.schedule.after(after, Event::Application(event));
        }
        self.record(format_args!(
            "applications: snapshot stores {store}, capped {capped}"
        ));
    }

    pub(super) fn application_event(&mut self, event: AppEvent) -> Result<(), String> {
        match event {
            AppEvent::Apply(index) => self.apply(index),
            AppEvent::Checkpoint(index) => {
                self.checkpoint(index);
                Ok(())
            }
            AppEvent::Delete => {
                self.delete();
                Ok(())
            }
            AppEvent::Restore => {
                self.restore();
                Ok(())
            }
            AppEvent::SnapshotArrives {
                leader,
                follower,
                sequence,
                request,
            } => {
                self.snapshot_request_arrives(leader, follower, sequence, request);
                Ok(())
            }
            AppEvent::SnapshotAnswered {
                follower,
                leader,
                sequence,
                log,
                answer,
            } => {
                self.snapshot_answered(follower, leader, sequence, log, answer);
                Ok(())
            }
        }
    }

    /// Node `index`'s process ended: its application goes back to its
    /// last checkpoint.
    pub(super) fn application_process_ended(&mut self, index: usize) {
        let Some(apps) = self.applications.as_mut() else {
            return;
        };
        // Installs not taken in yet are, at the step's check.
        let app = &mut apps.apps[index];
        let checkpoint = app.store.durable.lock().checkpoint;
        (app.position, app.state) = checkpoint;
    }

    /// Node `index`'s disk was lost: its application's state and snapshots
    /// with it (the installs it took count still).
    pub(super) fn application_disk_lost(&mut self, index: usize) {
        let Some(apps) = self.applications.as_mut() else {
            return;
        };
        apps.apps[index] = App::new();
        // Its next process opens with the new store.
        if apps.with_store {
            let store = apps.store_of(index);
            self.harness
                .settings_mut()
                .snapshots
                .insert(NodeId(index as u32), store);
        }
    }

    /// Takes in the snapshots installed into node `index`'s store since it
    /// last looked: its application restarts from the snapshot, whose
    /// state must be the chain's at its offset.
    fn take_installs(&mut self, index: usize) -> Result<(), String> {
        let Some(apps) = self.applications.as_mut() else {
            return Ok(());
        };
        let app = &mut apps.apps[index];
        let (installs, checkpoint) = {
            let durable = app.store.durable.lock();
            (durable.installs, durable.checkpoint)
        };
        if installs == app.installs_seen {
            return Ok(());
        }
        apps.counts.snapshots_installed += installs - app.installs_seen;
        app.installs_seen = installs;
        (app.position, app.state) = checkpoint;
        let (offset, state) = checkpoint;
        let reported = &mut apps.reported[index];
        *reported = (*reported).max(Some(offset));
        let expected = apps.chain.get(offset.0 as usize).copied();
        if expected != Some(state) {
            return Err(format!(
                "SPEC 3.9: node {index} installed a snapshot at {offset} whose state {state:#x} is not the state of the log applied from 0 ({expected:x?})"
            ));
        }
        self.record(format_args!(
            "node {index}'s application restarts from an installed snapshot at {offset}"
        ));
        Ok(())
    }

    /// Node `index`'s application applies the committed records its
    /// replica serves from its position on: each must be the next offset,
    /// and the state it reaches the chain's.
    fn apply(&mut self, index: usize) -> Result<(), String> {
        let calm = self.calm;
        let now = self.schedule.now();
        let Some(apps) = self.applications.as_mut() else {
            return Ok(());
        };
        let mut next = apps.interval(APPLY_INTERVAL_MEAN);
        if !calm && apps.rng.chance(0.02) {
            next = apps.interval(STALL_MEAN);
            apps.apps[index].stalled_until = now + next;
        }
        let stalled = apps.apps[index].stalled_until > now;
        self.schedule
            .after(next, Event::Application(AppEvent::Apply(index)));
        if stalled {
            return Ok(());
        }
        let Some(log) = self.log_on(0, index) else {
            return Ok(());
        };
        self.take_installs(index)?;
        let mut applied = 0u64;
        for _ in 0..8 {
            let Some(apps) = self.applications.as_ref() else {
                return Ok(());
            };
            let position = apps.apps[index].position;
            let read = self
                .disk(index)
                .unobserved(|| log.read(position, 16 * 1024, Isolation::Committed));
            let batches = match read {
                Ok(batches) if batches.is_empty() => break,
                Ok(batches) => batches,
                Err(error @ Error::Corrupt { .. }) => {
                    self.corrupt_error(index, &error)?;
                    break;
                }
                // Below the log start: it waits for a snapshot (or for
                // nothing, without a store).
                Err(_) => break,
            };
            let Some(apps) = self.applications.as_mut() else {
                return Ok(());
            };
            let app = &mut apps.apps[index];
            for batch in &batches {
                for record in batch.records() {
                    let record =
                        record.map_err(|error| format!("node {index}, a record: {error}"))?;
                    if record.offset < app.position {
                        continue;
                    }
                    if record.offset > app.position {
                        return Err(format!(
                            "SPEC 3.9: node {index}'s application, at {}, was served {} next: it would skip records",
                            app.position, record.offset
                        ));
                    }
                    app.state = fold(app.state, record.offset, &record.value);
                    let at = record.offset.0 as usize;
                    match apps.values.get(at) {
                        Some(value) if *value != record.value.as_ref() => {
                            return Err(format!(
                                "G2: node {index}'s application applies {:?} at {}, another applied {:?} there",
                                String::from_utf8_lossy(&record.value),
                                record.offset,
                                String::from_utf8_lossy(value)
                            ));
                        }
                        Some(_) => {
                            if apps.chain[at + 1] != app.state {
                                return Err(format!(
                                    "SPEC 3.9: node {index}'s application state at {} differs from the state of the log applied from 0",
                                    record.offset.next()
                                ));
                            }
                        }
                        None if at == apps.values.len() => {
                            apps.values.push(record.value.to_vec());
                            apps.chain.push(app.state);
                        }
                        None => {
                            return Err(format!(
                                "SPEC 3.9: node {index}'s application applies {} though no application applied {} (its state came from nowhere)",
                                record.offset,
                                apps.values.len()
                            ));
                        }
                    }
                    app.position = record.offset.next();
                    applied += 1;
                }
            }
        }
        if let Some(apps) = self.applications.as_mut() {
            apps.counts.applied += applied;
        }
        Ok(())
    }

    /// Node `index`'s application checkpoints its state (which is also its
    /// latest snapshot), then reports the checkpoint's position.
    fn checkpoint(&mut self, index: usize) {
        let Some(apps) = self.applications.as_mut() else {
            return;
        };
        let next = apps.interval(CHECKPOINT_INTERVAL_MEAN);
        self.schedule
            .after(next, Event::Application(AppEvent::Checkpoint(index)));
        let Some(log) = self.log_on(0, index) else {
            return;
        };
        // A snapshot installed meanwhile is taken in first (an error is
        // the next step's to report).
        if self.take_installs(index).is_err() {
            return;
        }
        let Some(apps) = self.applications.as_mut() else {
            return;
        };
        let app = &mut apps.apps[index];
        let (position, state) = (app.position, app.state);
        {
            let mut durable = app.store.durable.lock();
            durable.checkpoint = (position, state);
            // A snapshot is replaced only by a newer one (after a
            // restore the application's state is older than its latest).
            let changed = durable
                .latest
                .as_ref()
                .is_none_or(|(info, _)| info.offset < position);
            if changed {
                let bytes = SimStore::encode(position, state);
                let info = SnapshotInfo {
                    offset: position,
                    size_bytes: bytes.len() as u64,
                };
                durable.latest = Some((info, bytes));
            }
        }
        match log.set_applied(position) {
            Ok(()) => {
                apps.counts.set_applied += 1;
                let reported = &mut apps.reported[index];
                *reported = (*reported).max(Some(position));
            }
            Err(error) => {
                self.record(format_args!(
                    "node {index}'s set_applied({position}): {error}"
                ));
            }
        }
    }

    /// The log's leader is asked to delete records: mostly below its
    /// deletion bound, now and then above it (refused, deleting nothing).
    fn delete(&mut self) {
        if self.calm {
            return;
        }
        let Some(apps) = self.applications.as_mut() else {
            return;
        };
        let next = apps.interval(DELETE_INTERVAL_MEAN);
        self.schedule
            .after(next, Event::Application(AppEvent::Delete));
        let Some((index, log)) = self.leader(0) else {
            return;
        };
        let Ok(bound) = log.deletion_bound() else {
            return;
        };
        let start = log.log_start_offset();
        let Some(apps) = self.applications.as_mut() else {
            return;
        };
        let target = if apps.rng.chance(0.25) {
            Offset(bound.bound.0 + 1 + apps.rng.next_u64() % 64)
        } else if bound.bound > start {
            Offset(start.0 + 1 + apps.rng.next_u64() % (bound.bound.0 - start.0))
        } else {
            return;
        };
        match log.delete_records_before(target) {
            Ok(now) => {
                if now > start {
                    if let Some(apps) = self.applications.as_mut() {
                        apps.counts.deletions += 1;
                    }
                }
                self.record(format_args!(
                    "node {index} deletes before {target} (bound {}): log start {now}",
                    bound.bound
                ));
            }
            Err(error) => self.record(format_args!(
                "node {index} deletes before {target} (bound {}): {error}",
                bound.bound
            )),
        }
    }

    /// The leader's application restores its state from scratch
    /// (position 0, a state the chain holds), once in a run, and reports
    /// it: below the log start, it needs a snapshot, and the leader hands
    /// its leadership over for it (SPEC 3.9). Its newest snapshot stays
    /// its latest until it has a newer one.
    fn restore(&mut self) {
        if self.calm {
            return;
        }
        let Some(index) = self.leader(0).map(|(index, _)| index) else {
            return;
        };
        let Some(log) = self.log_on(0, index) else {
            return;
        };
        let Some(apps) = self.applications.as_mut() else {
            return;
        };
        let app = &mut apps.apps[index];
        (app.position, app.state) = (Offset::ZERO, INITIAL_STATE);
        app.store.durable.lock().checkpoint = (Offset::ZERO, INITIAL_STATE);
        let led = log.is_leader();
        match led {
            true => apps.counts.restores.0 += 1,
            false => apps.counts.restores.1 += 1,
        }
        let reported = log.set_applied(Offset::ZERO);
        self.record(format_args!(
            "node {index}'s application restores from scratch{}: {reported:?}",
            if led { " (leading)" } else { "" }
        ));
    }

    /// Sends the chunk requests of every stepped snapshot transfer that
    /// has none out.
    pub(super) fn drive_snapshot_transfers(&mut self) {
        if self
            .applications
            .as_ref()
            .is_none_or(|apps| !apps.with_store)
        {
            return;
        }
        let mut sends = Vec::new();
        for follower in 0..self.machines.len() {
            if self.process(follower).is_none() {
                continue;
            }
            for session in &self.machines[follower].sessions {
                if session.fetch.is_stopped() {
                    continue;
                }
                let sequence = self.next_sequence;
                if let Some(request) = session.fetch.next_snapshot_request(sequence) {
                    self.next_sequence += 1;
                    sends.push((follower, session.fetch.leader(), sequence, request));
                }
            }
        }
        for (follower, leader, sequence, request) in sends {
            let busy = self.busy_for(follower);
            let log = request.log;
            self.schedule.after(
                busy + REQUEST_TIMEOUT,
                Event::Application(AppEvent::SnapshotAnswered {
                    follower,
                    leader,
                    sequence,
                    log,
                    answer: Err(TransportError::Timeout { to: leader }),
                }),
            );
            let arrivals = self.wire.send(self.machines[follower].id, leader);
            let late = self.note_lost_or_late(follower, leader.0 as usize, &arrivals);
            self.record(format_args!(
                "snapshot request {sequence} {follower}->{leader} at byte {} ({} copies){late}",
                request.position,
                arrivals.len()
            ));
            for delay in arrivals {
                self.schedule.after(
                    busy + delay,
                    Event::Application(AppEvent::SnapshotArrives {
                        leader: leader.0 as usize,
                        follower,
                        sequence,
                        request: request.clone(),
                    }),
                );
            }
        }
    }

    fn snapshot_request_arrives(
        &mut self,
        leader: usize,
        follower: usize,
        sequence: u64,
        request: SnapshotRequest,
    ) {
        let from = self.machines[follower].id;
        let to = self.machines[leader].id;
        let log = request.log;
        let Some(process) = self.process(leader) else {
            self.snapshot_answered(
                follower,
                to,
                sequence,
                log,
                Err(TransportError::Unreachable {
                    to,
                    reason: "no process".to_owned(),
                }),
            );
            return;
        };
        let response = process
            .node
            .node()
            .handler()
            .handle(from, Request::Snapshot(request));
        let busy = self.busy_for(leader);
        let arrivals = self.wire.send(to, from);
        // Traced as the chunk arrives; a late one is noted as lost.
        let _late = self.note_lost_or_late(leader, follower, &arrivals);
        for delay in arrivals {
            self.schedule.after(
                busy + delay,
                Event::Application(AppEvent::SnapshotAnswered {
                    follower,
                    leader: to,
                    sequence,
                    log,
                    answer: Ok(response.clone()),
                }),
            );
        }
    }

    fn snapshot_answered(
        &mut self,
        follower: usize,
        leader: NodeId,
        sequence: u64,
        log: LogId,
        answer: Result<Response, TransportError>,
    ) {
        if self.process(follower).is_none() {
            return;
        }
        let now = self.clock.now();
        let mut outcomes = Vec::new();
        for session in &self.machines[follower].sessions {
            if session.fetch.leader() != leader || session.fetch.is_stopped() {
                continue;
            }
            if let Some(outcome) =
                session
                    .fetch
                    .on_snapshot_answer(log, sequence, answer.clone(), now)
            {
                outcomes.push(outcome);
            }
        }
        for outcome in outcomes {
            match outcome {
                Ok(offset) => self.record(format_args!(
                    "node {follower} installed node {leader}'s snapshot at {offset}"
                )),
                Err(why) => self.record(format_args!(
                    "node {follower}'s snapshot transfer from node {leader} failed: {why}"
                )),
            }
        }
    }

    /// The checks after every step: snapshots installed are taken in (and
    /// checked), and a leader's log start moves only below what every
    /// replica's application applied (SPEC 2.6, 3.9), or, past the cap,
    /// below what the leader's own application and `min_insync_replicas`
    /// applications applied; a leader needing a snapshot is followed until
    /// it hands the leadership over.
    pub(super) fn check_applications(&mut self) -> Result<(), String> {
        if self.applications.is_none() {
            return Ok(());
        }
        for index in 0..self.machines.len() {
            self.take_installs(index)?;
        }
        let min_insync = MIN_INSYNC_REPLICAS;
        for index in 0..self.machines.len() {
            let log = self
                .log_unlocked(0, index)
                .filter(crate::ReplicatedLog::is_leader);
            let Some(apps) = self.applications.as_mut() else {
                return Ok(());
            };
            let Some(log) = log else {
                apps.leader_starts[index] = None;
                continue;
            };
            let (epoch, start) = (log.leader_epoch(), log.log_start_offset());
            let before = apps.leader_starts[index].replace((epoch, start));
            let Some((_, was)) = before.filter(|(e, was)| *e == epoch && start > *was) else {
                continue;
            };
            apps.counts.log_start_moves += 1;
            let reported = |node: NodeId| {
                apps.reported
                    .get(node.0 as usize)
                    .copied()
                    .flatten()
                    .unwrap_or(was)
            };
            let replicas = log.replicas();
            if !apps.capped() {
                if let Some(holder) = replicas.iter().find(|r| reported(**r) < start) {
                    return Err(format!(
                        "SPEC 3.9: node {index}, leader in epoch {epoch}, moved its log start from {was} to {start}, past node {}'s applied position {:?} (retain_until_applied, no cap)",
                        holder.0,
                        apps.reported[holder.0 as usize]
                    ));
                }
            }
            let own = reported(self.machines[index].id);
            let holding = replicas.iter().filter(|r| reported(**r) >= start).count();
            if own < start || holding < min_insync {
                return Err(format!(
                    "SPEC 3.9: node {index}, leader in epoch {epoch}, moved its log start from {was} to {start}, past what its own application ({own}) or {min_insync} applications applied ({:?})",
                    apps.reported
                ));
            }
            let high_watermark = log.high_watermark();
            if start > high_watermark {
                return Err(format!(
                    "SPEC 2.6: node {index}'s log start {start} is above its high watermark {high_watermark}"
                ));
            }
        }
        // A leader whose application needs a snapshot hands over.
        let leader = self
            .leader(0)
            .map(|(index, log)| (index, log.leader_epoch(), log.needs_snapshot()));
        let Some(apps) = self.applications.as_mut() else {
            return Ok(());
        };
        match (leader, apps.stuck_leader) {
            (Some((index, epoch, true)), _) => apps.stuck_leader = Some((index, epoch)),
            (Some((index, _, false)), Some((stuck, _))) if index != stuck => {
                apps.counts.needs_snapshot_hand_overs += 1;
                apps.stuck_leader = None;
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether node `index`'s replica may end the run behind `leader`'s
    /// log end: in a run without snapshot stores, one that says it needs a
    /// snapshot while its application is below the leader's log start
    /// (one that says so with its application past it is not settled: its
    /// application's next report must end that). Not one whose application
    /// is only below its own log start: that one goes on fetching.
    pub(super) fn excused_as_needing_a_snapshot(
        &self,
        index: usize,
        leader: &crate::ReplicatedLog,
    ) -> bool {
        self.applications.as_ref().is_some_and(|apps| {
            !apps.with_store && apps.apps[index].position < leader.log_start_offset()
        }) && self
            .log_on(0, index)
            .is_some_and(|log| log.needs_snapshot())
    }

    /// Whether node `index`'s replica `log`, in a run without snapshot
    /// stores, rightly says it needs a snapshot and waits for an operator
    /// (SPEC 3.9): its application is below the leader's log start
    /// `leader_start`, or below the start of its own log, which holds
    /// records, where it cannot read on either. Seed 60413293: a
    /// follower's log restarted at a deposed leader's start, 2, when its
    /// application was at 0 after a lost disk (the divergence restart of
    /// `apply_fetched_to`, which, unlike the out-of-range path, restarts
    /// with the application behind); the next leader's log starts at 0,
    /// but a log does not grow downwards, and restarting a caught-up
    /// member of the ISR empty to refetch would leave the log one copy
    /// short. An empty log would lose nothing by restarting lower: it is
    /// not excused. One that says so with its application past both is
    /// not settled: its application's next report must end that.
    fn waits_for_an_operator(
        &self,
        index: usize,
        log: &crate::ReplicatedLog,
        leader_start: Offset,
    ) -> bool {
        self.applications.as_ref().is_some_and(|apps| {
            let position = apps.apps[index].position;
            !apps.with_store
                && log.needs_snapshot()
                && (position < leader_start
                    || (position < log.log_start_offset()
                        && log.log_start_offset() < log.log_end_offset()))
        })
    }

    /// A run with applications settles only once no replica says it needs
    /// a snapshot, but one that waits for an operator in a run without
    /// stores ([`waits_for_an_operator`](Self::waits_for_an_operator)),
    /// and, with
    /// stores, every live application can read on from its replica (a
    /// replica that fell below the log start was rebuilt).
    pub(super) fn applications_settled(&self, leader: &crate::ReplicatedLog) -> bool {
        let Some(apps) = self.applications.as_ref() else {
            return true;
        };
        let leader_start = leader.log_start_offset();
        (0..self.machines.len()).all(|index| {
            let position = apps.apps[index].position;
            self.log_on(0, index)
                .is_none_or(|log| match apps.with_store {
                    true => !log.needs_snapshot() && position >= log.log_start_offset(),
                    // And one whose application is below its own log
                    // start waits until it says so: a replica that just
                    // became a follower (seed 9000472: a leader whose
                    // application was behind handed over) says so on its
                    // first fetch answer, which the end check must not
                    // run before.
                    false => {
                        (!log.needs_snapshot()
                            || self.waits_for_an_operator(index, &log, leader_start))
                            && (position >= log.log_start_offset() || log.needs_snapshot())
                    }
                })
        })
    }

    /// Whether a record deleted below the log start is kept by the
    /// applications (G1: the application's state holds it).
    pub(super) fn kept_by_applications(&self, offset: Offset, value: &[u8]) -> bool {
        self.applications.as_ref().is_some_and(|apps| {
            apps.values
                .get(offset.0 as usize)
                .is_some_and(|v| v.as_slice() == value)
        })
    }

    /// The end checks: every record an application applied at or above the
    /// leader's log start is in its committed log there (G1); in a run
    /// without stores, a replica left behind says it needs a snapshot and
    /// truly does, and one whose application is below its log start says
    /// so (SPEC 3.9: never silently past a gap).
    pub(super) fn check_applications_final(
        &mut self,
        leader: usize,
        committed: &std::collections::BTreeMap<Offset, (LeaderEpoch, Vec<u8>)>,
        start: Offset,
    ) -> Result<(), String> {
        let Some(apps) = self.applications.as_ref() else {
            return Ok(());
        };
        for (offset, (_, value)) in committed.range(start..) {
            match apps.values.get(offset.0 as usize) {
                Some(applied) if applied != value => {
                    return Err(format!(
                        "G1: an application applied {:?} at {offset}, node {leader}'s committed log holds {:?}",
                        String::from_utf8_lossy(applied),
                        String::from_utf8_lossy(value)
                    ));
                }
                Some(_) => {}
                None => break,
            }
        }
        let mut reported = 0;
        for index in 0..self.machines.len() {
            let Some(log) = self.log_on(0, index) else {
                continue;
            };
            let position = apps.apps[index].position;
            let needs = log.needs_snapshot();
            if !apps.with_store && needs {
                reported += 1;
                if !self.waits_for_an_operator(index, &log, start) {
                    return Err(format!(
                        "SPEC 3.9: node {index} says it needs a snapshot, but its application at {position} can read on from the leader's log start {start} (its own log holds {}..{})",
                        log.log_start_offset(),
                        log.log_end_offset()
                    ));
                }
            }
            if position < log.log_start_offset() && !needs {
                return Err(format!(
                    "SPEC 3.9: node {index}'s application at {position} is below its replica's log start {}, which does not say it needs a snapshot",
                    log.log_start_offset()
                ));
            }
        }
        if let Some(apps) = self.applications.as_mut() {
            apps.counts.needs_snapshot_reported += reported;
        }
        Ok(())
    }
}
