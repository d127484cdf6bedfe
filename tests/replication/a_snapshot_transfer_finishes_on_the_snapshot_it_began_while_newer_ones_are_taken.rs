//! SPEC 3.9: a follower behind its leader's log start is rebuilt from the
//! snapshot its transfer began on, even while the leader's application
//! takes newer snapshots during the transfer, as long as the leader's store
//! keeps the one being read readable. The bug: the leader served every
//! chunk from its store's latest snapshot, so a newer snapshot made the
//! follower start the transfer again, and after three restarts it gave up
//! (and tried again later): a database whose snapshot takes longer to send
//! than the time between two of its snapshots could never rebuild a
//! replica. The fix: every request after a transfer's first names the
//! snapshot the first chunk came from, and the leader serves that one
//! (openraft and Raft stream one snapshot to its end).

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{LogConfig, LogId, NodeId, Offset, ReplicationConfig, SnapshotInfo, SnapshotStore};

use super::snapshot_bootstrap_rebuilds_a_replica_behind_the_log_start::{App, Setup, LOG, WAIT};

/// Chunks of at most this many bytes: a snapshot of a few KiB takes many.
const CHUNK_BYTES: u32 = 512;

/// A store that keeps every snapshot it took readable and, once
/// `churning`, takes a new one (one offset further, the latest from then
/// on) each time it has served a chunk: the latest changes far more often
/// than a transfer may start again.
struct KeepsEverySnapshot {
    app: Arc<App>,
    /// Every snapshot taken, oldest first: the last is the latest.
    taken: Mutex<Vec<(SnapshotInfo, Bytes)>>,
    churning: AtomicBool,
    /// The snapshot of every chunk served, in order.
    served: Mutex<Vec<SnapshotInfo>>,
    /// The snapshots installed here, in order.
    installed: Mutex<Vec<SnapshotInfo>>,
}

impl KeepsEverySnapshot {
    fn new(app: Arc<App>) -> KeepsEverySnapshot {
        KeepsEverySnapshot {
            app,
            taken: Mutex::new(Vec::new()),
            churning: AtomicBool::new(false),
            served: Mutex::new(Vec::new()),
            installed: Mutex::new(Vec::new()),
        }
    }

    /// Takes a snapshot of the application's state at `offset` (every
    /// record below it) and makes it the latest; older ones stay readable.
    fn take_at(&self, offset: Offset) -> SnapshotInfo {
        Self::take_into(&self.app, &mut self.taken.lock().unwrap(), offset)
    }

    /// [`take_at`](Self::take_at) with `taken` locked: the chunks are
    /// served by several threads at once, and the application's own store
    /// holds only the snapshot it took last.
    fn take_into(
        app: &App,
        taken: &mut Vec<(SnapshotInfo, Bytes)>,
        offset: Offset,
    ) -> SnapshotInfo {
        let info = app.take_snapshot_at(offset);
        let bytes = app
            .read_chunk(LOG, info, 0, info.size_bytes as usize)
            .expect("the snapshot just taken reads");
        taken.push((info, bytes));
        info
    }

    /// After a chunk was served: a newer snapshot, if churning and the
    /// application has applied past the latest.
    fn take_a_newer_one(&self) {
        if !self.churning.load(Ordering::SeqCst) {
            return;
        }
        let mut taken = self.taken.lock().unwrap();
        let Some(next) = taken.last().map(|(info, _)| Offset(info.offset.0 + 1)) else {
            return;
        };
        if next <= self.app.state().applied {
            Self::take_into(&self.app, &mut taken, next);
        }
    }

    fn taken(&self) -> Vec<SnapshotInfo> {
        let taken = self.taken.lock().unwrap();
        taken.iter().map(|(info, _)| *info).collect()
    }
}

impl SnapshotStore for KeepsEverySnapshot {
    fn latest(&self, _log: LogId) -> Option<SnapshotInfo> {
        self.taken.lock().unwrap().last().map(|(info, _)| *info)
    }

    fn read_chunk(
        &self,
        _log: LogId,
        snapshot: SnapshotInfo,
        position: u64,
        len: usize,
    ) -> std::io::Result<Bytes> {
        let bytes = {
            let taken = self.taken.lock().unwrap();
            let Some((_, bytes)) = taken.iter().find(|(info, _)| *info == snapshot) else {
                return Err(std::io::Error::other("no such snapshot"));
            };
            let start = (position as usize).min(bytes.len());
            bytes.slice(start..(start + len).min(bytes.len()))
        };
        self.served.lock().unwrap().push(snapshot);
        self.take_a_newer_one();
        Ok(bytes)
    }

    fn install(
        &self,
        log: LogId,
        snapshot: SnapshotInfo,
        data: &mut dyn Read,
    ) -> std::io::Result<()> {
        self.app.install(log, snapshot, data)?;
        self.installed.lock().unwrap().push(snapshot);
        Ok(())
    }
}

#[test]
fn a_snapshot_transfer_finishes_on_the_snapshot_it_began_while_newer_ones_are_taken() {
    // Warnings are captured: a failure shows why a transfer ended.
    let _ = super::log_capture::captured_logs();
    let apps: BTreeMap<NodeId, Arc<App>> = (0..3)
        .map(|i| (NodeId(i), Arc::new(App::default())))
        .collect();
    let stores: BTreeMap<NodeId, Arc<KeepsEverySnapshot>> = apps
        .iter()
        .map(|(node, app)| (*node, Arc::new(KeepsEverySnapshot::new(Arc::clone(app)))))
        .collect();
    let replication = ReplicationConfig {
        min_insync_replicas: 2,
        retain_until_applied: true,
        applied_hold_bytes_max: Some(16 * 1024),
        fetch_bytes_max: CHUNK_BYTES,
        replica_lag_time_max: Duration::from_secs(10),
        fetch_wait_max: Duration::from_millis(100),
        request_timeout: Duration::from_secs(5),
        fetch_backoff: Duration::from_millis(10),
        ..ReplicationConfig::default()
    };
    // No retention: the log start moves only when the test deletes, so
    // the newer snapshots do not let it pass the one being sent.
    let mut builder = Cluster::builder()
        .nodes(3)
        .replication(replication)
        .log_config(LogConfig {
            segment_bytes_max: 4 * 1024,
            ..LogConfig::default()
        });
    for (node, store) in &stores {
        builder = builder.snapshots(*node, Arc::clone(store) as Arc<dyn SnapshotStore>);
    }
    let cluster = builder.build().expect("cluster starts");
    cluster.create_log(LOG, 3).expect("log created");
    let setup = Setup { cluster, apps };
    let cluster = &setup.cluster;

    setup.append(20);
    let leader = cluster.leader_log(LOG).expect("leader");
    let victim = NodeId((leader.node_id().0 + 1) % 3);
    setup.wait_states_equal();
    cluster.crash_with(victim, Lose::Nothing, SessionEnd::Immediately);
    setup.append(150);
    setup.wait_states_equal();
    let applied = setup.apps[&leader.node_id()].state().applied;

    // The snapshot at 60, then every record below it deleted: the victim,
    // whose log ends at 20, can only come back through a snapshot.
    let store = &stores[&leader.node_id()];
    let first = store.take_at(Offset(60));
    assert_eq!(
        leader.delete_records_before(first.offset).expect("deleted"),
        first.offset
    );
    let chunks = first.size_bytes.div_ceil(u64::from(CHUNK_BYTES));
    assert!(
        chunks >= 10 && applied.0 - first.offset.0 > 2 * chunks,
        "want many chunks and a newer snapshot after each: {chunks} chunks of {first:?}, applied {applied}"
    );
    store.churning.store(true, Ordering::SeqCst);

    cluster.restart(victim).expect("restart");
    setup.wait_states_equal();
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert!(
        cluster.wait_until(WAIT, |_| !on_victim.needs_snapshot()),
        "the rebuilt replica still waits for a snapshot"
    );
    assert!(
        cluster.wait_until(WAIT, |c| c.in_sync_replicas(LOG).contains(&victim)),
        "the rebuilt replica never rejoined the ISR"
    );

    let taken = store.taken();
    let served = store.served.lock().unwrap().clone();
    let installed = stores[&victim].installed.lock().unwrap().clone();
    println!(
        "{} chunks served ({} of the first snapshot, {first:?}), {} snapshots taken meanwhile; installed {installed:?}",
        served.len(),
        served.iter().filter(|info| **info == first).count(),
        taken.len() - 1
    );
    assert!(
        taken.len() as u64 > chunks,
        "the latest changed {} times, want one after each of the {chunks} chunks",
        taken.len() - 1
    );
    assert_eq!(
        installed,
        vec![first],
        "the victim installed another snapshot than the one it began (or several); transfers that failed: {:#?}",
        super::log_capture::log_lines_with("snapshot transfer failed")
    );
    assert!(
        served.iter().all(|info| *info == first),
        "chunks of another snapshot were served: {served:?}"
    );
    assert!(on_victim.log_start_offset() >= first.offset);
    setup.cluster.shutdown().expect("shutdown");
}
