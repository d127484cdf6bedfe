//! Regression (review finding, SPEC G1; Kafka's broker epoch, KIP-903): a
//! leader checks that the fetches which qualify a follower for the ISR come
//! from the follower's current registration before it writes the
//! expansion, not atomically with the write. A follower that lost power
//! and restarted reports its unclean shutdown before it registers again;
//! for a log where it was outside the ISR, the ELR and the unclean list the
//! report wrote nothing, so an expansion the leader had checked against the
//! crashed process, and wrote after the report, still applied: the
//! restarted replica, which may have lost records, was in the ISR (and
//! electable). Its crashed process's session also lived on until it
//! expired, so checking again after a refused write would not have helped.
//!
//! Fix: the report first ends the crashed process's registration, then
//! writes every log it does not change unchanged, which moves the
//! version on: the expansion built before the report is refused as stale,
//! and the leader's next check finds no live registration it counted
//! fetches from.

use std::time::{Duration, Instant};

use crate::failover_support::fetch_request;
use isrlog::testing::{Cluster, CoordinatorDelay, HeldCall, Lose, SessionEnd};
use isrlog::{Acks, LogId, ReplicationConfig};

const LOG: LogId = LogId(5);
/// Generous on a loaded 2-core machine: every wait is a wait-until loop.
const WAIT: Duration = Duration::from_secs(20);

/// Releases a held kind of call when dropped: a failed assertion must not
/// leave a node blocked for the hour a hold lasts (the cluster's shutdown
/// would wait for it).
struct Released(CoordinatorDelay, HeldCall);

impl Drop for Released {
    fn drop(&mut self) {
        self.0.release_held(self.1);
    }
}

#[test]
fn an_isr_expansion_built_before_an_unclean_restart_never_applies() {
    let cluster = Cluster::builder()
        .nodes(3)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: Duration::from_millis(300),
            fetch_wait_max: Duration::from_millis(20),
            request_timeout: Duration::from_secs(20),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        // A crashed process's session outlives the whole test.
        .session_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let leader_id = leader.node_id();
    let mut others = cluster.node_ids().into_iter().filter(|n| *n != leader_id);
    let (victim, other) = (others.next().unwrap(), others.next().unwrap());
    leader.append_values(&[b"a"], Acks::All).unwrap();

    // The victim falls behind, cut off from the leader, and leaves the ISR.
    cluster.network.partition(&[victim], &[leader_id, other]);
    assert!(
        cluster.wait_until(WAIT, |c| !c.in_sync_replicas(LOG).contains(&victim)
            && !leader.in_sync_replicas().contains(&victim)),
        "the victim never left the ISR: {:?}",
        cluster.in_sync_replicas(LOG)
    );
    leader.append_values(&[b"b"], Acks::All).unwrap();

    // It catches up again; the leader checks its registration and builds
    // the expansion, whose write is held.
    let leader_delay = cluster.coordinator_delay(leader_id);
    leader_delay.hold(HeldCall::CompareAndSet);
    let _released = Released(leader_delay.clone(), HeldCall::CompareAndSet);
    cluster.network.heal();
    assert!(
        cluster.wait_until(WAIT, |_| leader_delay.held_waiting() >= 1),
        "the leader never tried to add the victim back"
    );

    // The fetch the victim sends just before it crashes, at the leader's
    // end: delivered late, after the leader's first write is refused.
    let crashed = cluster.incarnation(victim).unwrap();
    let epoch = leader.leader_epoch();
    let delayed = fetch_request(
        LOG,
        victim,
        crashed,
        epoch,
        leader.log_end_offset(),
        Some(epoch),
    );
    let handler = cluster.with_node(leader_id, |n| n.handler()).unwrap();
    // Before the write, the victim loses power; its session lives on. Its
    // new process cannot reach the leader (so nothing it fetches can
    // qualify it), reports the unclean shutdown and is held before it
    // registers.
    let victim_delay = cluster.coordinator_delay(victim);
    victim_delay.hold(HeldCall::RegisterNode);
    let _released_too = Released(victim_delay.clone(), HeldCall::RegisterNode);
    cluster.crash_with(
        victim,
        Lose::UnflushedBytes { seed: 7 },
        SessionEnd::OnExpiry,
    );
    cluster.network.partition(&[victim], &[leader_id, other]);
    // A violation is asserted only once nothing is held any more: a panic
    // in the scope would wait for the held restart.
    let violation = std::thread::scope(|scope| {
        let restart = scope.spawn(|| cluster.restart(victim));
        let registering = cluster.wait_until(WAIT, |_| victim_delay.held_waiting() >= 1);
        let reported = cluster.in_sync_replicas(LOG);

        // The leader's held write goes through now, and it keeps trying.
        leader_delay.release_held(HeldCall::CompareAndSet);
        let watch = |what: &str, how_long: Duration| -> Option<String> {
            let until = Instant::now() + how_long;
            while Instant::now() < until {
                let isr = cluster.in_sync_replicas(LOG);
                if isr.contains(&victim) || leader.in_sync_replicas().contains(&victim) {
                    return Some(format!(
                        "{what}: the restarted victim, which may have lost records, is in the \
                         ISR {isr:?} (after its report: {reported:?}) on fetches of its \
                         crashed process"
                    ));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        };
        let refused = watch("its write released", Duration::from_millis(200));
        // A late fetch of the crashed process asks for the expansion again
        // (a leader proposes one on a fetch): the leader checks the
        // registration again, and the crashed one is gone (without the
        // unregistration its session would still be live here). Refused
        // (`StaleIncarnation`) or served, it must not count.
        let _answer = handler.handle(victim, delayed);
        let before = refused.or_else(|| watch("before it registered", Duration::from_millis(500)));
        victim_delay.release_held(HeldCall::RegisterNode);
        let restarted = restart.join();
        assert!(registering, "the restarted victim never got to register");
        restarted.unwrap().unwrap();
        before.or_else(|| watch("once it registered", Duration::from_millis(300)))
    });
    assert!(violation.is_none(), "{}", violation.unwrap_or_default());

    // Reaching the leader, its new process fetches and rejoins.
    cluster.network.heal();
    assert!(
        cluster.wait_until(WAIT, |c| c.in_sync_replicas(LOG).contains(&victim)),
        "the victim never rejoined: {:?}",
        cluster.in_sync_replicas(LOG)
    );
    leader.append_values(&[b"c"], Acks::All).unwrap();
    let end = leader.log_end_offset();
    assert!(
        cluster.wait_until(WAIT, |c| c
            .log(victim, LOG)
            .is_ok_and(|log| log.log_end_offset() == end)),
        "the victim never caught up"
    );
}
