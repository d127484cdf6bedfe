//! SPEC 2.6 / 3.9 (issue 25): a follower refuses a snapshot taken below its
//! own log start while its log holds records, and it refuses it *before*
//! its application's `SnapshotStore::install` runs. The bug: the transfer
//! handed the downloaded snapshot to the application first and only then
//! asked the replica, whose refusal (commit dc1c3c8) kept the log but left
//! the application's state swapped to the older snapshot, with nothing in
//! the log to fill the gap between the two. The fix checks the same rule
//! before `install` (and again, as the final guard, when the log restarts).
//!
//! The scenario: a new leader whose log start lags (it was cut off from the
//! old leader when that one deleted more) serves a snapshot between its own
//! log start and the follower's.

use std::sync::atomic::Ordering;
use std::time::Duration;

use isrlog::testing::{Lose, SessionEnd};
use isrlog::{Isolation, NodeId, Offset};

use super::log_capture::{captured_logs, log_lines_with};
use super::snapshot_bootstrap_rebuilds_a_replica_behind_the_log_start::{
    setup_with, State, LOG, WAIT,
};

#[test]
fn a_follower_refuses_a_snapshot_below_its_log_start_before_the_application_installs_it() {
    captured_logs();
    // Deletion is bounded by the high watermark alone: the explicit
    // deletions below place each log start exactly.
    let setup = setup_with(true, |replication| {
        replication.retain_until_applied = false;
    });
    let cluster = &setup.cluster;
    let old_leader = cluster.leader_log(LOG).expect("leader");
    let c = old_leader.node_id();
    let victim = NodeId((c.0 + 1) % 3);
    let next_leader = NodeId((c.0 + 2) % 3);
    // The victim's application applies nothing and reports nothing yet:
    // it does not ask for a snapshot while the old leader leads.
    setup.apps[&victim].stalled.store(true, Ordering::SeqCst);
    // Few records: size retention (8 KiB) never moves a log start here.
    setup.append(20);
    let end = Offset(20);
    assert!(
        cluster.wait_until(WAIT, |c| {
            c.node_ids().iter().all(|node| {
                c.log(*node, LOG)
                    .is_ok_and(|log| log.log_end_offset() == end && log.high_watermark() == end)
            })
        }),
        "the records never reached every replica"
    );
    assert_eq!(old_leader.log_start_offset(), Offset::ZERO);

    // Every replica's log starts at 6.
    let lower_start = Offset(6);
    assert_eq!(
        old_leader
            .delete_records_before(lower_start)
            .expect("delete"),
        lower_start
    );
    assert!(
        cluster.wait_until(WAIT, |c| {
            c.node_ids().iter().all(|node| {
                c.log(*node, LOG)
                    .is_ok_and(|log| log.log_start_offset() == lower_start)
            })
        }),
        "the followers never followed the log start to {lower_start}"
    );

    // The next leader is cut off (and no fetch of its is still in flight),
    // then the old leader deletes up to 12: the victim follows, the next
    // leader's log still starts at 6.
    cluster.network.partition(&[next_leader], &[c]);
    std::thread::sleep(Duration::from_millis(500));
    let victim_start = Offset(12);
    assert_eq!(
        old_leader
            .delete_records_before(victim_start)
            .expect("delete"),
        victim_start
    );
    let on_victim = cluster.log(victim, LOG).expect("victim");
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.log_start_offset() == victim_start),
        "the victim never followed the log start to {victim_start}"
    );
    // A follower's log start move is checkpointed by background work; the
    // crash below runs none that is still queued (it would reopen at 6,
    // seen once in 4 runs of the whole test binary).
    assert!(
        cluster.wait_until(WAIT, |_| !on_victim.log_start_move_pending_for_test()),
        "the victim's log start move was never checkpointed"
    );
    let on_next = cluster.log(next_leader, LOG).expect("next leader");
    assert_eq!(on_next.log_start_offset(), lower_start);

    // The next leader's application snapshots at 9: at or above its own
    // log start, so it serves it, but below the victim's.
    let snapshot = setup.apps[&next_leader].take_snapshot_at(Offset(9));
    let chunks = snapshot.size_bytes.div_ceil(1024);

    // The victim and the old leader stop; the next leader is the only
    // live in-sync replica and leads; the victim comes back.
    cluster.crash_with(victim, Lose::Nothing, SessionEnd::Immediately);
    cluster.crash_with(c, Lose::Nothing, SessionEnd::Immediately);
    cluster.network.heal();
    assert!(
        cluster.wait_until(WAIT, |c| c.leader_of(LOG) == Some(next_leader)),
        "{next_leader} never led"
    );
    cluster.restart(victim).expect("restart");
    let on_victim = cluster.log(victim, LOG).expect("victim");
    // Its application's state is empty: it reports so, which is below the
    // new leader's log start, so the victim asks for the snapshot.
    on_victim.set_applied(Offset::ZERO).expect("set_applied");
    let next_app = &setup.apps[&next_leader];
    assert!(
        cluster.wait_until(WAIT, |_| {
            next_app.chunks_served.load(Ordering::SeqCst) >= 2 * chunks
        }),
        "the victim never downloaded the snapshot twice ({} chunks served, {chunks} a snapshot)",
        next_app.chunks_served.load(Ordering::SeqCst)
    );
    // Two whole downloads: the first one reached its install decision.
    let victim_app = &setup.apps[&victim];
    assert_eq!(
        victim_app.installs.load(Ordering::SeqCst),
        0,
        "the application installed a snapshot at {} below the follower's log start {victim_start}",
        snapshot.offset
    );
    assert_eq!(victim_app.state(), State::default());
    // The refusal says which log, which snapshot and which log start.
    let refusal = format!(
        "refused the snapshot at {} for {LOG} before the application's install",
        snapshot.offset
    );
    let lines = log_lines_with(&refusal);
    assert!(
        lines
            .iter()
            .any(|line| line.contains(&format!("out of range [{victim_start}, {end}]"))),
        "no refusal logged: {lines:?}"
    );
    let warned = log_lines_with("refusing a snapshot below this replica's log start");
    assert!(
        warned.iter().any(
            |line| line.contains(&format!("snapshot_offset={}", snapshot.offset))
                && line.contains(&format!("log_start={victim_start}"))
        ),
        "no warning names the snapshot offset and the log start: {warned:?}"
    );
    assert_eq!(on_victim.log_start_offset(), victim_start);
    assert_eq!(on_victim.log_end_offset(), end);
    assert!(
        cluster.wait_until(WAIT, |_| on_victim
            .read(victim_start, 1 << 20, Isolation::Committed)
            .is_ok_and(|batches| !batches.is_empty())),
        "the victim's records from its log start on are not readable"
    );

    // A snapshot at or above its log start is installed as usual.
    let newer = next_app.take_snapshot_at(Offset(16));
    assert!(
        cluster.wait_until(WAIT, |_| victim_app.installs.load(Ordering::SeqCst) == 1),
        "the snapshot at {} was never installed",
        newer.offset
    );
    assert_eq!(victim_app.state().applied, newer.offset);
    assert!(
        cluster.wait_until(WAIT, |_| on_victim.log_start_offset() == newer.offset),
        "the victim's log start is {}",
        on_victim.log_start_offset()
    );
    println!(
        "refused the snapshot at {} (log start {victim_start}, {} bytes, {} chunks served), installed the one at {}",
        snapshot.offset,
        snapshot.size_bytes,
        next_app.chunks_served.load(Ordering::SeqCst),
        newer.offset
    );
    setup.cluster.shutdown().expect("shutdown");
}
