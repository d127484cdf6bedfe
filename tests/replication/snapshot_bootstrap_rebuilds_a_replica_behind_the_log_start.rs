//! SPEC 3.9: a follower whose log ends below its leader's log start (a
//! replica that came back empty, one that was down past the cap) is rebuilt
//! from the leader application's latest snapshot plus the log after it,
//! and its application's state then equals the leader's. A corrupt chunk is
//! detected and never installed; without a store, under
//! `retain_until_applied`, the follower says it needs a snapshot instead of
//! restarting past a gap.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{
    Acks, Coordinator, Isolation, LogConfig, LogId, NodeId, Offset, ReplicatedLog,
    ReplicationConfig, SnapshotInfo, SnapshotStore,
};

pub(super) const LOG: LogId = LogId(0);
pub(super) const WAIT: Duration = Duration::from_secs(20);

/// A test application: its state is every applied record's offset and
/// value, in order; a snapshot is that state's bytes.
#[derive(Default)]
pub(super) struct App {
    pub(super) state: Mutex<State>,
    snapshot: Mutex<Option<(SnapshotInfo, Bytes)>>,
    pub(super) installs: AtomicU64,
    /// The apply loop is stopped: `Setup::apply_running` skips this app.
    pub(super) stalled: AtomicBool,
    /// Flip one bit of every chunk this store serves.
    corrupt_chunks: AtomicBool,
    /// Sleep this many milliseconds before serving a chunk.
    pub(super) chunk_delay_ms: AtomicU64,
    /// Chunks served.
    pub(super) chunks_served: AtomicU64,
    /// Panic in this many installs, first noting the snapshot downloads
    /// in `downloads_dir` into `panicked_downloads`.
    panic_installs: AtomicU64,
    downloads_dir: Mutex<Option<PathBuf>>,
    panicked_downloads: Mutex<Vec<PathBuf>>,
}

/// The snapshot downloads in `dir` (files named `snapshot-download-*`).
fn downloads_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| {
                    path.file_name()
                        .and_then(|name| name.to_str())
                        .is_some_and(|name| name.starts_with("snapshot-download"))
                })
                .collect()
        })
        .unwrap_or_default()
}

#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub(super) struct State {
    pub(super) applied: Offset,
    pub(super) records: BTreeMap<u64, Vec<u8>>,
}

impl State {
    fn encode(&self) -> Vec<u8> {
        let mut out = self.applied.0.to_le_bytes().to_vec();
        for (offset, value) in &self.records {
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        out
    }

    fn decode(bytes: &[u8]) -> std::io::Result<State> {
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "bad snapshot");
        let take = |at: &mut usize, n: usize| -> std::io::Result<&[u8]> {
            let slice = bytes.get(*at..*at + n).ok_or_else(bad)?;
            *at += n;
            Ok(slice)
        };
        let mut at = 0;
        let applied = Offset(u64::from_le_bytes(
            take(&mut at, 8)?.try_into().map_err(|_| bad())?,
        ));
        let mut records = BTreeMap::new();
        while at < bytes.len() {
            let offset = u64::from_le_bytes(take(&mut at, 8)?.try_into().map_err(|_| bad())?);
            let len = u32::from_le_bytes(take(&mut at, 4)?.try_into().map_err(|_| bad())?);
            records.insert(offset, take(&mut at, len as usize)?.to_vec());
        }
        Ok(State { applied, records })
    }
}

impl App {
    /// Applies every committed record from the applied position on and
    /// reports the new position.
    pub(super) fn apply(&self, log: &ReplicatedLog) {
        let mut state = self.state.lock().unwrap();
        loop {
            let batches = match log.read(state.applied, 1 << 20, Isolation::Committed) {
                Ok(batches) => batches,
                Err(_) => return,
            };
            if batches.is_empty() {
                break;
            }
            for batch in batches {
                for record in batch.records() {
                    let record = record.expect("record decodes");
                    if record.offset >= state.applied {
                        state.records.insert(record.offset.0, record.value.to_vec());
                    }
                }
                state.applied = state.applied.max(batch.next_offset());
            }
        }
        let _ = log.set_applied(state.applied);
    }

    /// Takes a snapshot of the state as it is.
    pub(super) fn take_snapshot(&self) -> SnapshotInfo {
        let state = self.state.lock().unwrap();
        let bytes = Bytes::from(state.encode());
        let info = SnapshotInfo {
            offset: state.applied,
            size_bytes: bytes.len() as u64,
        };
        *self.snapshot.lock().unwrap() = Some((info, bytes));
        info
    }

    /// Takes a snapshot of the state as it was at `offset`, at or below
    /// the applied position: every record below `offset`.
    pub(super) fn take_snapshot_at(&self, offset: Offset) -> SnapshotInfo {
        let state = self.state.lock().unwrap();
        assert!(offset <= state.applied, "{offset} is not applied yet");
        let at = State {
            applied: offset,
            records: state
                .records
                .range(..offset.0)
                .map(|(offset, value)| (*offset, value.clone()))
                .collect(),
        };
        let bytes = Bytes::from(at.encode());
        let info = SnapshotInfo {
            offset,
            size_bytes: bytes.len() as u64,
        };
        *self.snapshot.lock().unwrap() = Some((info, bytes));
        info
    }

    pub(super) fn state(&self) -> State {
        self.state.lock().unwrap().clone()
    }
}

impl SnapshotStore for App {
    fn latest(&self, _log: LogId) -> Option<SnapshotInfo> {
        self.snapshot
            .lock()
            .unwrap()
            .as_ref()
            .map(|(info, _)| *info)
    }

    fn read_chunk(
        &self,
        _log: LogId,
        snapshot: SnapshotInfo,
        position: u64,
        len: usize,
    ) -> std::io::Result<Bytes> {
        std::thread::sleep(Duration::from_millis(
            self.chunk_delay_ms.load(Ordering::SeqCst),
        ));
        self.chunks_served.fetch_add(1, Ordering::SeqCst);
        let held = self.snapshot.lock().unwrap();
        let Some((info, bytes)) = held.as_ref() else {
            return Err(std::io::Error::other("no snapshot"));
        };
        if *info != snapshot {
            return Err(std::io::Error::other("another snapshot"));
        }
        let start = position as usize;
        let mut chunk = bytes.slice(start..start + len).to_vec();
        if self.corrupt_chunks.load(Ordering::SeqCst) {
            if let Some(byte) = chunk.first_mut() {
                *byte ^= 1;
            }
        }
        Ok(Bytes::from(chunk))
    }

    fn install(
        &self,
        _log: LogId,
        snapshot: SnapshotInfo,
        data: &mut dyn Read,
    ) -> std::io::Result<()> {
        let mut bytes = Vec::new();
        data.read_to_end(&mut bytes)?;
        let panic_now = self
            .panic_installs
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if panic_now {
            if let Some(dir) = self.downloads_dir.lock().unwrap().as_deref() {
                *self.panicked_downloads.lock().unwrap() = downloads_in(dir);
            }
            panic!("the test application's install panics, as asked");
        }
        assert_eq!(
            bytes.len() as u64,
            snapshot.size_bytes,
            "a torn snapshot reached install"
        );
        let state = State::decode(&bytes)?;
        assert_eq!(state.applied, snapshot.offset);
        // Counted before the state changes: a test that sees the new state
        // sees the install counted.
        self.installs.fetch_add(1, Ordering::SeqCst);
        *self.state.lock().unwrap() = state;
        Ok(())
    }
}

pub(super) struct Setup {
    pub(super) cluster: Cluster,
    pub(super) apps: BTreeMap<NodeId, Arc<App>>,
}

fn setup(with_snapshots: bool) -> Setup {
    setup_with(with_snapshots, |_| {})
}

/// The cluster of these tests, its replication configuration changed by
/// `tweak`.
pub(super) fn setup_with(
    with_snapshots: bool,
    tweak: impl FnOnce(&mut ReplicationConfig),
) -> Setup {
    setup_nodes(3, with_snapshots, tweak)
}

/// [`setup_with`] on `nodes` nodes (the log on three of them).
fn setup_nodes(
    nodes: u32,
    with_snapshots: bool,
    tweak: impl FnOnce(&mut ReplicationConfig),
) -> Setup {
    let apps: BTreeMap<NodeId, Arc<App>> = (0..nodes)
        .map(|i| (NodeId(i), Arc::new(App::default())))
        .collect();
    let mut replication = ReplicationConfig {
        min_insync_replicas: 2,
        retain_until_applied: true,
        applied_hold_bytes_max: Some(16 * 1024),
        // Small chunks: a snapshot of a few KiB takes many of them.
        fetch_bytes_max: 1024,
        replica_lag_time_max: Duration::from_secs(10),
        fetch_wait_max: Duration::from_millis(100),
        request_timeout: Duration::from_secs(5),
        fetch_backoff: Duration::from_millis(10),
        ..ReplicationConfig::default()
    };
    tweak(&mut replication);
    let mut builder = Cluster::builder()
        .nodes(nodes as usize)
        .replication(replication)
        .log_config(LogConfig {
            segment_bytes_max: 4 * 1024,
            retention_bytes: Some(8 * 1024),
            ..LogConfig::default()
        })
        .retention_check_interval(Duration::from_millis(10));
    if with_snapshots {
        for (node, app) in &apps {
            builder = builder.snapshots(*node, Arc::clone(app) as Arc<dyn SnapshotStore>);
        }
    }
    let cluster = builder.build().expect("cluster starts");
    cluster.create_log(LOG, 3).expect("log created");
    Setup { cluster, apps }
}

impl Setup {
    pub(super) fn apply_running(&self) {
        for (node, app) in &self.apps {
            if app.stalled.load(Ordering::SeqCst) {
                continue;
            }
            if let Ok(log) = self.cluster.log(*node, LOG) {
                if self.cluster.is_running(*node) {
                    app.apply(&log);
                }
            }
        }
    }

    pub(super) fn append(&self, count: usize) {
        let leader = self.cluster.leader_log(LOG).expect("leader");
        for i in 0..count {
            let value = format!("record {i} {}", "x".repeat(200));
            leader
                .append_values(&[value.as_bytes()], Acks::All)
                .expect("append");
            if i % 10 == 0 {
                self.apply_running();
            }
        }
        self.apply_running();
    }

    /// Crashes a follower once every application applied 20 records, then
    /// appends until the leader's log starts past where the follower
    /// stopped. Returns the leader's log and the follower (down).
    pub(super) fn a_follower_down_past_the_log_start(&self) -> (ReplicatedLog, NodeId) {
        let cluster = &self.cluster;
        self.append(20);
        let leader = cluster.leader_log(LOG).expect("leader");
        let victim = NodeId((leader.node_id().0 + 1) % 3);
        self.wait_states_equal();
        cluster.crash_with(victim, Lose::Nothing, SessionEnd::Immediately);
        self.append(150);
        assert!(cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(20)));
        (leader, victim)
    }

    /// Waits until every running application has applied up to the
    /// leader's high watermark and holds the same state.
    pub(super) fn wait_states_equal(&self) {
        let leader = self.cluster.leader_log(LOG).expect("leader");
        let leader_app = &self.apps[&leader.node_id()];
        let converged = self.cluster.wait_until(WAIT, |_| {
            self.apply_running();
            let want = leader_app.state();
            want.applied == leader.high_watermark()
                && self
                    .apps
                    .iter()
                    .filter(|(node, _)| self.cluster.is_running(**node))
                    .all(|(_, app)| app.state() == want)
        });
        let summary: Vec<_> = self
            .apps
            .iter()
            .map(|(node, app)| (*node, app.state().applied, app.state().records.len()))
            .collect();
        assert!(converged, "application states differ: {summary:?}");
    }
}

/// Stops `node`'s replica long enough for deletion to pass its position
/// (the cap), then brings it back: it catches up through a snapshot.
fn down_past_the_cap_then_back(victim_is_empty: bool) {
    let setup = setup(true);
    let cluster = &setup.cluster;
    setup.append(20);
    let leader = cluster.leader_log(LOG).expect("leader");
    let victim = NodeId((leader.node_id().0 + 1) % 3);
    setup.wait_states_equal();
    cluster.crash_with(victim, Lose::Nothing, SessionEnd::Immediately);
    if victim_is_empty {
        std::fs::remove_dir_all(cluster.node_dir(victim)).expect("empty the directory");
        // Its application lost its state with its disk.
        *setup.apps[&victim].state.lock().unwrap() = State::default();
    }
    // Far past the cap: the log start moves past everything the victim
    // has, and the leader's application snapshots.
    setup.append(150);
    let leader = cluster.leader_log(LOG).expect("leader");
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(20)),
        "deletion never passed the stopped replica: {:?}",
        leader.deletion_bound()
    );
    let snapshot = setup.apps[&leader.node_id()].take_snapshot();
    assert!(snapshot.offset >= leader.log_start_offset(), "{snapshot:?}");
    // More records after the snapshot: the suffix comes by fetching.
    setup.append(20);
    let start_before = leader.log_start_offset();
    cluster.restart(victim).expect("restart");
    setup.wait_states_equal();
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    // The flag clears once the install returned, just after the state changed.
    assert!(
        cluster.wait_until(WAIT, |_| !on_victim.needs_snapshot()),
        "the rebuilt replica still waits for a snapshot"
    );
    assert!(
        on_victim.log_start_offset() >= start_before.min(snapshot.offset),
        "victim log start {}",
        on_victim.log_start_offset()
    );
    // It is a full member again.
    assert!(
        cluster.wait_until(WAIT, |c| c.in_sync_replicas(LOG).contains(&victim)),
        "the rebuilt replica never rejoined the ISR"
    );
    println!(
        "{victim} rebuilt from the snapshot at {} ({} bytes), log start now {}, leader HW {}",
        snapshot.offset,
        snapshot.size_bytes,
        on_victim.log_start_offset(),
        leader.high_watermark()
    );
    setup.cluster.shutdown().expect("shutdown");
}

/// SPEC 3.10 with 3.9: a replica that a reassignment adds after the log
/// was deleted below what it could fetch (it has nothing) bootstraps from
/// the leader application's snapshot, fetches the suffix, joins the ISR,
/// and the move completes with its application's state equal to the
/// leader's.
#[test]
fn a_replica_added_by_a_reassignment_is_bootstrapped_from_a_snapshot() {
    let setup = setup_nodes(4, true, |_| {});
    let cluster = &setup.cluster;
    setup.append(150);
    let leader = cluster.leader_log(LOG).expect("leader");
    assert!(
        cluster.wait_until(WAIT, |_| {
            setup.apply_running();
            leader.log_start_offset() > Offset(20)
        }),
        "retention never moved the log start: {:?}",
        leader.deletion_bound()
    );
    let snapshot = setup.apps[&leader.node_id()].take_snapshot();
    assert!(snapshot.offset >= leader.log_start_offset(), "{snapshot:?}");
    setup.append(20);
    let added = NodeId(3);
    let mut target = cluster
        .coordinator
        .log_state(LOG)
        .expect("coordinator")
        .expect("the log")
        .replicas;
    assert!(!target.contains(&added));
    target.push(added);
    cluster
        .with_node(added, |node| node.reassign_log(LOG, target.clone()))
        .expect("node 3 runs")
        .expect("the move is stored");
    let completed = cluster.wait_until(WAIT, |c| {
        setup.apply_running();
        let state = c
            .coordinator
            .log_state(LOG)
            .expect("coordinator")
            .expect("the log");
        !state.is_reassigning() && state.replicas.len() == 4 && state.in_sync_replicas.len() == 4
    });
    assert!(completed, "the move never completed");
    setup.wait_states_equal();
    assert_eq!(setup.apps[&added].installs.load(Ordering::SeqCst), 1);
    let on_added = cluster.log(added, LOG).expect("the added replica");
    // The flag clears once the install returned, just after the state changed.
    assert!(
        cluster.wait_until(WAIT, |_| !on_added.needs_snapshot()),
        "the rebuilt replica still waits for a snapshot"
    );
    assert!(on_added.log_start_offset() >= snapshot.offset.min(leader.log_start_offset()));
    setup.cluster.shutdown().expect("shutdown");
}

#[test]
fn a_replica_down_past_the_cap_catches_up_through_a_snapshot() {
    down_past_the_cap_then_back(false);
}

#[test]
fn a_replica_back_with_an_empty_disk_catches_up_through_a_snapshot() {
    down_past_the_cap_then_back(true);
}

#[test]
fn a_corrupt_chunk_is_detected_and_nothing_is_installed() {
    let setup = setup(true);
    let cluster = &setup.cluster;
    let (leader, victim) = setup.a_follower_down_past_the_log_start();
    let leader_app = &setup.apps[&leader.node_id()];
    leader_app.take_snapshot();
    leader_app.corrupt_chunks.store(true, Ordering::SeqCst);
    let before = setup.apps[&victim].state();
    cluster.restart(victim).expect("restart");
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.needs_snapshot()),
        "the victim never found it needs a snapshot"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 0);
    assert_eq!(
        setup.apps[&victim].state(),
        before,
        "a corrupt snapshot changed the state"
    );
    assert!(on_victim.needs_snapshot());
    // The leader's store heals: the next attempt installs.
    leader_app.corrupt_chunks.store(false, Ordering::SeqCst);
    setup.wait_states_equal();
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    setup.cluster.shutdown().expect("shutdown");
}

#[test]
fn without_a_snapshot_store_the_follower_reports_instead_of_skipping_a_gap() {
    let setup = setup(false);
    let cluster = &setup.cluster;
    let (leader, victim) = setup.a_follower_down_past_the_log_start();
    cluster.restart(victim).expect("restart");
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.needs_snapshot()),
        "the victim never said it needs a snapshot"
    );
    std::thread::sleep(Duration::from_millis(300));
    // Its log did not restart at the leader's start: it still ends where
    // it stopped, below the leader's log start.
    assert!(
        on_victim.log_end_offset() < leader.log_start_offset(),
        "victim log end {}, leader log start {}",
        on_victim.log_end_offset(),
        leader.log_start_offset()
    );
    assert!(!cluster.in_sync_replicas(LOG).contains(&victim));
    setup.cluster.shutdown().expect("shutdown");
}

#[test]
fn a_transfer_cut_by_a_leader_change_starts_again_and_installs_only_whole_snapshots() {
    let setup = setup(true);
    let cluster = &setup.cluster;
    let (leader, victim) = setup.a_follower_down_past_the_log_start();
    let other = NodeId((leader.node_id().0 + 2) % 3);
    setup.wait_states_equal();
    for app in setup.apps.values() {
        app.take_snapshot();
    }
    // Slow chunks: the transfer from the first leader takes seconds.
    let first = &setup.apps[&leader.node_id()];
    first.chunk_delay_ms.store(50, Ordering::SeqCst);
    cluster.restart(victim).expect("restart");
    assert!(
        cluster.wait_until(WAIT, |_| first.chunks_served.load(Ordering::SeqCst) >= 3),
        "the transfer never started"
    );
    // The leader dies half-way: `other` leads, and the victim gets the
    // snapshot again, whole, from it.
    cluster.crash_with(leader.node_id(), Lose::Nothing, SessionEnd::Immediately);
    assert!(
        cluster.wait_until(WAIT, |c| c.leader_of(LOG) == Some(other)),
        "{other} never led"
    );
    setup.wait_states_equal();
    let served_by_first = first.chunks_served.load(Ordering::SeqCst);
    let served_by_other = setup.apps[&other].chunks_served.load(Ordering::SeqCst);
    println!(
        "chunks served: {served_by_first} by the first leader, {served_by_other} by the second"
    );
    assert!(served_by_other > 0, "the second leader served nothing");
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    setup.cluster.shutdown().expect("shutdown");
}

/// An application whose install panics does not leave the transfer's
/// download behind (it was deleted only when the install returned), and
/// the next transfer installs.
#[test]
fn a_panicking_install_leaves_no_download_behind_and_the_next_transfer_installs() {
    let setup = setup(true);
    let cluster = &setup.cluster;
    let (leader, victim) = setup.a_follower_down_past_the_log_start();
    setup.apps[&leader.node_id()].take_snapshot();
    let app = &setup.apps[&victim];
    *app.downloads_dir.lock().unwrap() =
        Some(cluster.node_dir(victim).join(format!("log-{}", LOG.0)));
    app.panic_installs.store(1, Ordering::SeqCst);
    cluster.restart(victim).expect("restart");
    setup.wait_states_equal();
    assert_eq!(
        app.panic_installs.load(Ordering::SeqCst),
        0,
        "never panicked"
    );
    assert_eq!(app.installs.load(Ordering::SeqCst), 1);
    let panicked = app.panicked_downloads.lock().unwrap().clone();
    assert!(
        !panicked.is_empty(),
        "the panicking install saw no download"
    );
    let left: Vec<&PathBuf> = panicked.iter().filter(|path| path.exists()).collect();
    assert!(left.is_empty(), "downloads left behind: {left:?}");
    setup.cluster.shutdown().expect("shutdown");
}
