//! SPEC 3.9 with a snapshot store: the leader's log start never passes its
//! application's latest snapshot, or a follower that needs a snapshot could
//! not be rebuilt from snapshot plus log suffix (the leader refuses to send
//! a snapshot below its log start, and the records between would be gone).
//! The bug: retention and `delete_records_before` moved the log start up to
//! the applied bound whatever the snapshot's offset. The fix bounds it by
//! the latest snapshot too (openraft purges only up to its last snapshot).

use std::sync::atomic::Ordering;

use isrlog::testing::{Lose, SessionEnd};
use isrlog::{Error, NodeId};

use super::snapshot_bootstrap_rebuilds_a_replica_behind_the_log_start::{setup_with, LOG, WAIT};

#[test]
fn deletion_stops_at_the_leaders_latest_snapshot_and_a_replica_is_rebuilt_from_it() {
    let setup = setup_with(true, |_| {});
    let cluster = &setup.cluster;
    setup.append(20);
    setup.wait_states_equal();
    let leader = cluster.leader_log(LOG).expect("leader");
    let victim = NodeId((leader.node_id().0 + 1) % 3);
    cluster.crash_with(victim, Lose::Nothing, SessionEnd::Immediately);
    // The snapshot is above the down replica's log end: it needs it.
    setup.append(30);
    setup.wait_states_equal();
    let snapshot = setup.apps[&leader.node_id()].take_snapshot();
    // Far past retention and the cap, with every running application
    // applying: only the snapshot holds deletion back.
    setup.append(150);
    setup.wait_states_equal();
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        leader.log_start_offset() <= snapshot.offset,
        "the log start {} passed the latest snapshot at {}",
        leader.log_start_offset(),
        snapshot.offset
    );
    let bound = leader.deletion_bound().expect("bound");
    assert_eq!(bound.bound, snapshot.offset, "{bound:?}");
    assert_eq!(bound.held_by, Some(leader.node_id()), "{bound:?}");
    match leader.delete_records_before(snapshot.offset.next()) {
        Err(Error::DeletionHeldBack { bound, held_by, .. }) => {
            assert_eq!((bound, held_by), (snapshot.offset, leader.node_id()));
        }
        other => panic!("delete_records_before past the snapshot: {other:?}"),
    }
    // The down replica is rebuilt from that snapshot plus the suffix.
    let on_victim_end = 20;
    assert!(leader.log_start_offset().0 > on_victim_end);
    cluster.restart(victim).expect("restart");
    setup.wait_states_equal();
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    // A newer snapshot lets deletion go on.
    let newer = setup.apps[&leader.node_id()].take_snapshot();
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > snapshot.offset),
        "deletion never went on after a newer snapshot at {}: {:?}",
        newer.offset,
        leader.deletion_bound()
    );
    assert!(leader.log_start_offset() <= newer.offset);
    setup.cluster.shutdown().expect("shutdown");
}
