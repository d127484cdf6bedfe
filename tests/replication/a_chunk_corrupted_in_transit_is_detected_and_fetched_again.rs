//! SPEC 3.9: snapshot chunks are checksummed. A chunk whose bytes change
//! between the leader and the follower (after the leader computed its
//! CRC-32) is detected by the follower, which says which chunk of which
//! snapshot was bad, installs nothing of that transfer, and transfers the
//! snapshot again; it then installs it whole, once, and its application's
//! state equals the leader's. The existing corrupt-chunk test corrupts the
//! bytes inside the leader's store, before the CRC is taken, so the
//! library's check itself was never hit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use isrlog::transport::{Request, Response};
use isrlog::{NodeId, ReplicatedLog, RequestHandler, SnapshotInfo};

use super::log_capture::log_lines_with;
use super::snapshot_bootstrap_rebuilds_a_replica_behind_the_log_start::{setup_with, Setup};

/// The leader's request handler, flipping one byte of the data of the
/// first `corrupt_left` snapshot chunks it answers at one position past the
/// first chunk (so the error must name a position other than 0): what a
/// bad link or a broken proxy does to the bytes in transit. Always the same
/// position: a follower has more than one chunk asked for at once, and
/// stops at the first bad one, so a corrupted chunk behind it would never
/// be looked at.
struct CorruptingLink {
    inner: Arc<dyn RequestHandler>,
    corrupt_left: AtomicU64,
    corrupted_at: std::sync::Mutex<Vec<u64>>,
}

impl RequestHandler for CorruptingLink {
    fn handle(&self, from: NodeId, request: Request) -> Response {
        match self.inner.handle(from, request) {
            Response::Snapshot(mut chunk) if !chunk.data.is_empty() && chunk.position > 0 => {
                let left = self.corrupt_left.load(Ordering::SeqCst);
                let mut corrupted_at = self.corrupted_at.lock().unwrap();
                let here = corrupted_at.first().is_none_or(|&at| at == chunk.position);
                if left > 0 && here {
                    self.corrupt_left.store(left - 1, Ordering::SeqCst);
                    let mut data = chunk.data.to_vec();
                    let middle = data.len() / 2;
                    data[middle] ^= 0x40;
                    chunk.data = data.into();
                    corrupted_at.push(chunk.position);
                }
                Response::Snapshot(chunk)
            }
            other => other,
        }
    }
}

#[test]
fn a_chunk_corrupted_in_transit_is_detected_and_the_snapshot_fetched_again() {
    let _ = super::log_capture::captured_logs();
    let setup = setup_with(true, |_| {});
    let cluster = &setup.cluster;
    let (leader, victim, snapshot) = a_follower_down_past_a_snapshot_of_several_chunks(&setup);
    let link = Arc::new(CorruptingLink {
        inner: cluster
            .with_node(leader.node_id(), |node| node.handler())
            .expect("leader runs"),
        corrupt_left: AtomicU64::new(2),
        corrupted_at: std::sync::Mutex::new(Vec::new()),
    });
    cluster.network.register(
        leader.node_id(),
        Arc::clone(&link) as Arc<dyn RequestHandler>,
    );
    cluster.restart(victim).expect("restart");
    setup.wait_states_equal();
    let corrupted_at = link.corrupted_at.lock().unwrap().clone();
    assert_eq!(corrupted_at.len(), 2, "the link corrupted {corrupted_at:?}");
    // Two transfers failed (nothing installed: the test store asserts it
    // gets whole snapshots only), the third installed.
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    for position in &corrupted_at {
        let needle = format!(
            "chunk at byte {position} of the snapshot at {} is corrupt",
            snapshot.offset
        );
        assert!(
            !log_lines_with(&needle).is_empty(),
            "no error names the corrupt chunk: {needle}"
        );
    }
    println!(
        "corrupted chunks at bytes {corrupted_at:?} of the {}-byte snapshot at {}: detected, fetched again, installed once",
        snapshot.size_bytes, snapshot.offset
    );
    setup.cluster.shutdown().expect("shutdown");
}

/// Crashes a follower, then appends until the leader's log starts past it
/// and takes the leader application's snapshot (several chunks long), so
/// that the follower, once restarted, can only come back through it.
/// Returns the leader's log, the follower and the snapshot.
pub(super) fn a_follower_down_past_a_snapshot_of_several_chunks(
    setup: &Setup,
) -> (ReplicatedLog, NodeId, SnapshotInfo) {
    let (leader, victim) = setup.a_follower_down_past_the_log_start();
    let snapshot = setup.apps[&leader.node_id()].take_snapshot();
    assert!(
        snapshot.size_bytes > 3 * 1024,
        "{snapshot:?}: want several chunks"
    );
    (leader, victim, snapshot)
}
