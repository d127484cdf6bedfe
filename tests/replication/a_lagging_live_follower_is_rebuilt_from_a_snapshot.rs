//! SPEC 3.9: a follower that stays up but falls behind the leader's log
//! start (its application stalled, or it was partitioned, while the cap let
//! the leader delete past it) goes the snapshot path exactly like a
//! replica that restarted: it receives the leader application's snapshot,
//! installs it, fetches on from its offset, and its application's state
//! then equals the leader's. The bug: such a follower kept fetching (or its
//! application kept reading) below the log start, got `OffsetOutOfRange`
//! and never recovered.

use std::sync::atomic::Ordering;
use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{NodeId, Offset, ReplicatedLog};

use super::snapshot_bootstrap_rebuilds_a_replica_behind_the_log_start::{setup_with, LOG, WAIT};

#[test]
fn a_follower_whose_application_stalled_past_the_cap_is_rebuilt_from_a_snapshot() {
    let setup = setup_with(true, |_| {});
    let cluster = &setup.cluster;
    setup.append(20);
    let leader = cluster.leader_log(LOG).expect("leader");
    let victim = NodeId((leader.node_id().0 + 1) % 3);
    setup.wait_states_equal();
    let stalled_at = setup.apps[&victim].state().applied;
    // The victim keeps fetching (it stays in the ISR), but its application
    // applies nothing: past the cap the leader deletes what it has not
    // applied.
    setup.apps[&victim].stalled.store(true, Ordering::SeqCst);
    setup.append(150);
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > stalled_at),
        "deletion never passed the stalled application: {:?}",
        leader.deletion_bound()
    );
    let snapshot = setup.apps[&leader.node_id()].take_snapshot();
    setup.append(20);
    setup.apps[&victim].stalled.store(false, Ordering::SeqCst);
    setup.wait_states_equal();
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    wait_rebuilt_and_in_sync(cluster, &on_victim, victim);
    println!(
        "{victim} stalled at {stalled_at}, rebuilt from the snapshot at {} ({} bytes); leader log start {}, HW {}",
        snapshot.offset,
        snapshot.size_bytes,
        leader.log_start_offset(),
        leader.high_watermark()
    );
    setup.cluster.shutdown().expect("shutdown");
}

#[test]
fn a_partitioned_follower_behind_the_log_start_is_rebuilt_from_a_snapshot() {
    let setup = setup_with(true, |c| {
        c.replica_lag_time_max = Duration::from_millis(500)
    });
    let cluster = &setup.cluster;
    setup.append(20);
    let leader = cluster.leader_log(LOG).expect("leader");
    let victim = NodeId((leader.node_id().0 + 1) % 3);
    let others: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|n| *n != victim)
        .collect();
    setup.wait_states_equal();
    cluster.network.partition(&[victim], &others);
    setup.append(150);
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(20)),
        "deletion never passed the partitioned replica: {:?}",
        leader.deletion_bound()
    );
    let snapshot = setup.apps[&leader.node_id()].take_snapshot();
    setup.append(20);
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert!(on_victim.log_end_offset() < leader.log_start_offset());
    cluster.network.heal();
    setup.wait_states_equal();
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    wait_rebuilt_and_in_sync(cluster, &on_victim, victim);
    println!(
        "{victim} rebuilt from the snapshot at {} ({} bytes); leader log start {}, HW {}",
        snapshot.offset,
        snapshot.size_bytes,
        leader.log_start_offset(),
        leader.high_watermark()
    );
    setup.cluster.shutdown().expect("shutdown");
}

#[test]
fn without_a_store_a_follower_whose_application_stalled_past_the_cap_says_it_needs_a_snapshot() {
    let setup = setup_with(false, |_| {});
    let cluster = &setup.cluster;
    setup.append(20);
    let leader = cluster.leader_log(LOG).expect("leader");
    let victim = NodeId((leader.node_id().0 + 1) % 3);
    setup.wait_states_equal();
    let stalled_at = setup.apps[&victim].state().applied;
    setup.apps[&victim].stalled.store(true, Ordering::SeqCst);
    setup.append(150);
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > stalled_at),
        "deletion never passed the stalled application: {:?}",
        leader.deletion_bound()
    );
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.needs_snapshot()),
        "the follower never said its application needs a snapshot"
    );
    // It stays a full replica of the log meanwhile.
    setup.append(5);
    assert!(cluster.in_sync_replicas(LOG).contains(&victim));
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.log_end_offset()
            == leader.log_end_offset()),
        "the follower stopped fetching"
    );
    setup.cluster.shutdown().expect("shutdown");
}

/// SPEC 3.9: an application that never reported a position has applied
/// nothing. The bug (found by the reassignment and deletion fault mode,
/// "node-1's application (applied 0, 0 records) differs from the
/// leader's"): a follower whose application had not reported yet when the
/// cap let the leader delete past offset 0 fetched on (its log reaches the
/// leader's start), but only a reported position below the log start sent
/// it the snapshot way, so its application read below the log start for
/// ever. Now a position never reported counts as zero there.
#[test]
fn a_follower_whose_application_never_reported_is_rebuilt_from_a_snapshot() {
    let setup = setup_with(true, |_| {});
    let cluster = &setup.cluster;
    let leader = cluster.leader_log(LOG).expect("leader");
    let victim = NodeId((leader.node_id().0 + 1) % 3);
    // The victim's application applies (and reports) nothing from the
    // start; its replica fetches everything.
    setup.apps[&victim].stalled.store(true, Ordering::SeqCst);
    setup.append(150);
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.log_start_offset() > Offset::ZERO),
        "deletion never passed the silent application: {:?}",
        leader.deletion_bound()
    );
    assert!(!on_victim.applied_positions().contains_key(&victim));
    let snapshot = setup.apps[&leader.node_id()].take_snapshot();
    setup.append(20);
    setup.apps[&victim].stalled.store(false, Ordering::SeqCst);
    setup.wait_states_equal();
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    assert!(
        cluster.wait_until(WAIT, |_| !on_victim.needs_snapshot()),
        "the rebuilt follower still says it needs a snapshot"
    );
    println!(
        "{victim}'s silent application rebuilt from the snapshot at {}; leader log start {}",
        snapshot.offset,
        leader.log_start_offset()
    );
    setup.cluster.shutdown().expect("shutdown");
}

/// Waits until `on_victim`, rebuilt from a snapshot, no longer waits for
/// one (the flag clears once the install returned, just after the
/// application's state changed) and its node is back in the ISR.
fn wait_rebuilt_and_in_sync(cluster: &Cluster, on_victim: &ReplicatedLog, victim: NodeId) {
    assert!(
        cluster.wait_until(WAIT, |_| !on_victim.needs_snapshot()),
        "the rebuilt replica still waits for a snapshot"
    );
    assert!(
        cluster.wait_until(WAIT, |c| c.in_sync_replicas(LOG).contains(&victim)),
        "the rebuilt replica never rejoined the ISR"
    );
}
