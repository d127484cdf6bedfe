//! SPEC 3.4: a follower that stops fetching leaves the ISR after
//! `replica_lag_time_max` (not before, and within 1.5x of it); one that keeps
//! up under continuous load stays; one that catches up rejoins. Time is a
//! `ManualClock`, moved in steps small enough for the healthy follower's
//! fetches (every few real milliseconds) to keep it caught up.
//!
//! "Rejoins, but not before reaching the start offset of the current leader
//! epoch" is proven on the state machine by
//! `replication::leader::tests::expansion_requires_high_watermark_epoch_start_and_a_fetch`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use isrlog::testing::Cluster;
use isrlog::{Acks, LogId, ManualClock, NodeId, ReplicationConfig};

const LOG: LogId = LogId(0);
const LAG_MAX: Duration = Duration::from_secs(10);
const STEP: Duration = Duration::from_millis(250);

fn cluster(clock: &ManualClock) -> Cluster {
    Cluster::builder()
        .nodes(3)
        .manual_clock(clock.clone())
        .session_timeout(Duration::from_secs(3600))
        .replication(ReplicationConfig {
            min_insync_replicas: 1,
            replica_lag_time_max: LAG_MAX,
            fetch_wait_max: Duration::from_millis(10),
            request_timeout: Duration::from_secs(5),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap()
}

fn step(clock: &ManualClock) {
    clock.advance(STEP);
    std::thread::sleep(Duration::from_millis(25));
}

#[test]
fn a_stalled_follower_leaves_the_isr_after_the_lag_limit_and_not_before() {
    let clock = ManualClock::default();
    let cluster = cluster(&clock);
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    leader.append_values(&[b"a"], Acks::All).unwrap();
    let stalled = NodeId(2);
    cluster.network.partition(&[NodeId(0)], &[stalled]);
    let stalled_at = clock.elapsed();
    // Up to the limit, with the leader's log moving on, it stays in.
    while clock.elapsed() - stalled_at < LAG_MAX - STEP {
        leader.append_values(&[b"more"], Acks::Leader).unwrap();
        step(&clock);
        assert!(
            cluster.in_sync_replicas(LOG).contains(&stalled),
            "removed after only {:?}",
            clock.elapsed() - stalled_at
        );
    }
    // Past it, it is removed well within 1.5x the limit; the healthy follower stays.
    let mut removed_after = None;
    while clock.elapsed() - stalled_at <= LAG_MAX * 3 / 2 {
        step(&clock);
        if !cluster.in_sync_replicas(LOG).contains(&stalled) {
            removed_after = Some(clock.elapsed() - stalled_at);
            break;
        }
    }
    let removed_after = removed_after.expect("stalled follower never left the ISR");
    assert!(removed_after > LAG_MAX, "removed at {removed_after:?}");
    assert_eq!(cluster.in_sync_replicas(LOG), vec![NodeId(0), NodeId(1)]);
    assert_eq!(leader.in_sync_replicas(), vec![NodeId(0), NodeId(1)]);
}

#[test]
fn a_follower_that_keeps_up_under_continuous_load_stays_in_the_isr() {
    let clock = ManualClock::default();
    let cluster = cluster(&clock);
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let leader = leader.clone();
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut appended = 0u64;
            while !stop.load(Ordering::Relaxed) {
                leader.append_values(&[[7u8; 256]], Acks::Leader).unwrap();
                appended += 1;
            }
            appended
        })
    };
    // Three times the lag limit of manual time under constant appends.
    for _ in 0..(3 * LAG_MAX.as_millis() / STEP.as_millis()) {
        step(&clock);
        assert_eq!(
            cluster.in_sync_replicas(LOG).len(),
            3,
            "at {:?}",
            clock.elapsed()
        );
    }
    stop.store(true, Ordering::Relaxed);
    assert!(producer.join().unwrap() > 100);
}

#[test]
fn a_follower_that_catches_up_rejoins_the_isr() {
    let clock = ManualClock::default();
    let cluster = cluster(&clock);
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let lagging = NodeId(1);
    cluster.network.partition(&[NodeId(0)], &[lagging]);
    for _ in 0..(LAG_MAX.as_millis() * 2 / STEP.as_millis()) {
        leader
            .append_values(&[b"while away"], Acks::Leader)
            .unwrap();
        step(&clock);
    }
    assert!(
        cluster.wait_until(Duration::from_secs(5), |c| !c
            .in_sync_replicas(LOG)
            .contains(&lagging)),
        "lagging follower never left"
    );
    cluster.network.heal();
    assert!(
        cluster.wait_until(Duration::from_secs(5), |c| c
            .in_sync_replicas(LOG)
            .contains(&lagging)),
        "caught-up follower never rejoined: {:?}",
        cluster.in_sync_replicas(LOG)
    );
    let follower = cluster.log(lagging, LOG).unwrap();
    assert!(follower.log_end_offset() >= leader.high_watermark());
}
