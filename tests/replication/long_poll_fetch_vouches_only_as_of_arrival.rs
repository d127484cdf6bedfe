//! SPEC 3.4: a fetch vouches for its follower only as of the moment it
//! arrived. A fetch held in a long poll is evaluated again every time data
//! arrives; it must not mark its follower caught up at that later time, nor
//! bring it back into the ISR it left meanwhile.
//!
//! The bug: the held fetch was counted afresh on every re-evaluation, as if
//! it had just arrived. A follower cut off right after sending it, and
//! removed from the ISR, was re-admitted by the next append (the held fetch,
//! counted again, made it look caught up and eligible), and every `acks=all`
//! append then stalled until `replica_lag_time_max` removed it again. The
//! fix: the fetch carries its arrival time into the leader's state machine,
//! which counts a held fetch as of that time and never lets it propose an
//! ISR expansion (Kafka's delayed fetch likewise only reads).

use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{Acks, CasOutcome, Coordinator, LogId, LogUpdate, ReplicationConfig};

const LOG: LogId = LogId(0);
const LAG_MAX: Duration = Duration::from_secs(20);
/// Long enough that the cut-off follower's last fetch is still held when
/// the append arrives, whatever the machine's load.
const FETCH_WAIT_MAX: Duration = Duration::from_secs(8);
/// How long a follower whose response was lost waits before it fetches
/// again.
const LOST_RESPONSE_WAIT: Duration = Duration::from_millis(100);

#[test]
fn a_held_fetch_does_not_readmit_a_follower_cut_off_after_sending_it() {
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_secs(3600))
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            replica_lag_time_max: LAG_MAX,
            fetch_wait_max: FETCH_WAIT_MAX,
            request_timeout: Duration::from_secs(30),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    cluster
        .network
        .set_lost_message_wait_max(LOST_RESPONSE_WAIT);
    let replicas = cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let followers: Vec<_> = replicas
        .iter()
        .copied()
        .filter(|&node| node != leader.node_id())
        .collect();
    let (kept, cut) = (followers[0], followers[1]);
    let first = leader.append_values(&[b"before"], Acks::All).unwrap();
    let end = first.last_offset.next();
    assert!(
        cluster.wait_until(Duration::from_secs(10), |c| {
            c.log(cut, LOG).is_ok_and(|f| f.log_end_offset() == end)
                && c.in_sync_replicas(LOG).len() == 3
        }),
        "the follower never caught up: ISR {:?}",
        cluster.in_sync_replicas(LOG)
    );
    // Having caught up, `cut` fetches again at the leader's end; with
    // nothing to send, the leader holds that fetch (long poll).
    std::thread::sleep(Duration::from_millis(200));

    // Cut it off, and take it out of the ISR at once (as a controller
    // would), while its fetch is still held.
    cluster.network.partition(&[cut], &[leader.node_id(), kept]);
    let state = cluster.coordinator.log_state(LOG).unwrap().unwrap();
    let update = LogUpdate {
        leader: state.leader,
        leader_epoch: state.leader_epoch,
        in_sync_replicas: vec![leader.node_id(), kept],
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: None,
    };
    let applied = cluster
        .coordinator
        .compare_and_set(LOG, state.leader_epoch, state.version, update)
        .unwrap();
    assert!(matches!(applied, CasOutcome::Applied(_)), "{applied:?}");
    assert!(
        cluster.wait_until(Duration::from_secs(5), |_| !leader
            .in_sync_replicas()
            .contains(&cut)),
        "the leader never took the new ISR: {:?}",
        leader.in_sync_replicas()
    );

    // The kept follower loses its next three answers, so for a few hundred
    // milliseconds nothing past `end` is committed and the held fetch, at
    // `end`, would still qualify its follower for the ISR if it counted.
    for _ in 0..3 {
        cluster.network.drop_next_response(kept, leader.node_id());
    }
    // One append wakes the held fetch; the kept follower alone commits it.
    let started = Instant::now();
    let appended = leader.append_values(&[b"after"], Acks::All).unwrap();
    let took = started.elapsed();
    assert_eq!(appended.base_offset, end);
    assert!(
        took < LAG_MAX / 4,
        "acks=all took {took:?}: the cut-off follower held the high watermark"
    );
    assert!(leader.high_watermark() > appended.last_offset);
    // And the cut-off follower stayed out, by the leader's record and the
    // coordinator's.
    assert!(
        !leader.in_sync_replicas().contains(&cut),
        "{cut} re-admitted while cut off: {:?}",
        leader.in_sync_replicas()
    );
    assert!(
        !cluster.in_sync_replicas(LOG).contains(&cut),
        "{cut} re-admitted while cut off: {:?}",
        cluster.in_sync_replicas(LOG)
    );
}
