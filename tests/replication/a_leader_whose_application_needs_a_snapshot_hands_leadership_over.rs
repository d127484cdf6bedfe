//! SPEC 3.9 (issue 25): a replica whose application fell behind its log
//! start (the cap let the leader delete past it) can still be elected
//! leader: it was a live follower in the ISR. A leader gets snapshots from
//! nobody, so its application stayed stuck for ever, and every follower
//! that needed a snapshot with it (the leader's own snapshots are older
//! than its log start). The fix: such a leader says so
//! (`ReplicatedLog::needs_snapshot`), keeps taking appends while no other
//! replica can lead, and hands the leadership to a caught-up in-sync
//! replica whose application reaches the log start as soon as one exists;
//! as a follower it is then rebuilt from that replica's snapshot.

use std::sync::atomic::Ordering;
use std::time::Duration;

use isrlog::{Acks, NodeId, Offset, ReplicatedLog};

use super::snapshot_bootstrap_rebuilds_a_replica_behind_the_log_start::{
    setup_with, Setup, LOG, WAIT,
};

/// A replica of [`LOG`] elected leader while its application is behind its
/// log start, and the two others, down.
pub(super) struct StuckLeader {
    /// The first leader, down.
    pub(super) first: NodeId,
    /// The leader, its application stuck at `stalled_at`.
    pub(super) victim: NodeId,
    /// The third replica, down.
    pub(super) third: NodeId,
    pub(super) stalled_at: Offset,
    pub(super) on_victim: ReplicatedLog,
}

/// The victim keeps its replica in the ISR while its application applies
/// nothing; past the cap the leader deletes what it has not applied (and
/// the victim's log start follows). The leader has no snapshot, so the
/// victim cannot be rebuilt before it is elected. Then the other two go
/// down (`third` first: the victim is then the only live replica when the
/// leader goes, and has nobody to hand over to, even with min ISR 1 and
/// so no ELR), the victim leads alone, its application runs again and it
/// says it needs a snapshot.
pub(super) fn elect_a_leader_whose_application_needs_a_snapshot(setup: &Setup) -> StuckLeader {
    let cluster = &setup.cluster;
    setup.append(20);
    let leader = cluster.leader_log(LOG).expect("leader");
    let first = leader.node_id();
    let replicas = leader.replicas();
    let others: Vec<NodeId> = replicas.iter().copied().filter(|n| *n != first).collect();
    let (victim, third) = (others[0], others[1]);
    setup.wait_states_equal();
    let stalled_at = setup.apps[&victim].state().applied;
    setup.apps[&victim].stalled.store(true, Ordering::SeqCst);
    setup.append(150);
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.log_start_offset() > stalled_at),
        "the victim's log start never passed its stalled application: {:?}",
        leader.deletion_bound()
    );
    assert!(cluster.in_sync_replicas(LOG).contains(&victim));
    cluster.crash(third);
    cluster.crash(first);
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.is_leader()),
        "the victim was not elected"
    );
    setup.apps[&victim].stalled.store(false, Ordering::SeqCst);
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.needs_snapshot()),
        "the leader never said its application needs a snapshot"
    );
    StuckLeader {
        first,
        victim,
        third,
        stalled_at,
        on_victim,
    }
}

#[test]
fn a_leader_whose_application_needs_a_snapshot_hands_leadership_over() {
    let setup = setup_with(true, |_| {});
    let cluster = &setup.cluster;
    let StuckLeader {
        first,
        victim,
        third,
        stalled_at,
        on_victim,
    } = elect_a_leader_whose_application_needs_a_snapshot(&setup);
    // Nobody to hand over to: it stays leader and takes appends.
    on_victim
        .append_values(&[b"taken while no one else can lead"], Acks::Leader)
        .expect("a leader whose application is behind still takes appends");
    std::thread::sleep(Duration::from_millis(300));
    assert!(on_victim.is_leader());
    assert_eq!(cluster.leader_of(LOG), Some(victim));

    // The others come back and catch up: the victim hands over to one of
    // them, and is rebuilt from its snapshot.
    cluster.restart(first).expect("restart");
    cluster.restart(third).expect("restart");
    assert!(
        cluster.wait_until(WAIT, |c| {
            setup.apply_running();
            c.leader_of(LOG).is_some_and(|leader| leader != victim)
        }),
        "the leader whose application needs a snapshot kept the leadership: needs_snapshot {}, ISR {:?}",
        on_victim.needs_snapshot(),
        cluster.in_sync_replicas(LOG)
    );
    let successor = cluster.leader_log(LOG).expect("successor");
    assert_ne!(successor.node_id(), victim);
    // The successor's application reaches its log start: its snapshot
    // rebuilds the victim.
    assert!(
        cluster.wait_until(WAIT, |_| {
            setup.apply_running();
            setup.apps[&successor.node_id()].state().applied >= successor.log_start_offset()
        }),
        "the successor's application is behind its log start too"
    );
    let snapshot = setup.apps[&successor.node_id()].take_snapshot();
    setup.wait_states_equal();
    assert_eq!(setup.apps[&victim].installs.load(Ordering::SeqCst), 1);
    // The application's install returns before the log restarts at the
    // snapshot's offset, which clears the flag.
    assert!(
        cluster.wait_until(WAIT, |_| !on_victim.needs_snapshot()),
        "the rebuilt victim still says it needs a snapshot"
    );
    assert!(!successor.needs_snapshot());
    println!(
        "{victim} led with its application at {stalled_at} below its log start; handed over to {}, rebuilt from the snapshot at {}",
        successor.node_id(),
        snapshot.offset
    );
    setup.cluster.shutdown().expect("shutdown");
}
