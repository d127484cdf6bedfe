//! SPEC 3.9 with the embedding rule that a library survives its host's
//! code: a transport (here the leader's request handler, which the memory
//! network calls on the asking thread) that panics while answering one
//! snapshot chunk fails that transfer only. The follower cleans up its
//! download, transfers the snapshot again, installs it whole, once, and its
//! application's state equals the leader's, and no download is left in its
//! directory. Before, the panic unwound out of the transfer's thread scope,
//! past the download's clean-up, and the partial download stayed on disk
//! until the next restart.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use isrlog::transport::{Request, Response};
use isrlog::{NodeId, RequestHandler};

use super::a_chunk_corrupted_in_transit_is_detected_and_fetched_again::a_follower_down_past_a_snapshot_of_several_chunks;
use super::snapshot_bootstrap_rebuilds_a_replica_behind_the_log_start::{setup_with, LOG, WAIT};

/// The leader's request handler, panicking on the first `panics_left`
/// snapshot requests past the first chunk.
struct PanickingLink {
    inner: Arc<dyn RequestHandler>,
    panics_left: AtomicU64,
}

impl RequestHandler for PanickingLink {
    fn handle(&self, from: NodeId, request: Request) -> Response {
        if let Request::Snapshot(ask) = &request {
            if ask.position > 0
                && self
                    .panics_left
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                        left.checked_sub(1)
                    })
                    .is_ok()
            {
                panic!("a host's transport panicked (planted by the test)");
            }
        }
        self.inner.handle(from, request)
    }
}

#[test]
fn a_transport_that_panics_during_a_snapshot_transfer_fails_only_that_transfer() {
    let setup = setup_with(true, |_| {});
    let cluster = &setup.cluster;
    let (leader, victim, _) = a_follower_down_past_a_snapshot_of_several_chunks(&setup);
    let link = Arc::new(PanickingLink {
        inner: cluster
            .with_node(leader.node_id(), |node| node.handler())
            .expect("leader runs"),
        panics_left: AtomicU64::new(1),
    });
    cluster.network.register(
        leader.node_id(),
        Arc::clone(&link) as Arc<dyn RequestHandler>,
    );
    cluster.restart(victim).expect("restart");
    setup.wait_states_equal();
    assert_eq!(
        link.panics_left.load(Ordering::SeqCst),
        0,
        "no request panicked"
    );
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert!(
        cluster.wait_until(WAIT, |_| !on_victim.needs_snapshot()),
        "the rebuilt replica still waits for a snapshot"
    );
    // The transfer deletes its download as it returns, which may be just
    // after the install let the states converge (a failure once in 20
    // runs under load): left behind means still there after the wait.
    let downloads = || -> Vec<_> {
        walk(&cluster.node_dir(victim))
            .into_iter()
            .filter(|path| {
                path.file_name()
                    .is_some_and(|name| name.to_string_lossy().starts_with("snapshot-download"))
            })
            .collect()
    };
    cluster.wait_until(WAIT, |_| downloads().is_empty());
    let left = downloads();
    assert!(left.is_empty(), "downloads left behind: {left:?}");
    setup.cluster.shutdown().expect("shutdown");
}

/// Every file under `dir` (a directory deleted while it is walked holds
/// none).
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
