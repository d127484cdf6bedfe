//! SPEC 3.8 (issue 13, part 2): a new leader whose high watermark is still
//! below the start offset of its own epoch does not yet know the committed
//! end, says so, and nothing that consumes committed data takes its stale
//! high watermark for the end.
//!
//! The failover: "a" and "b" are appended with `acks=all`. The followers
//! fetched "b" and their next fetch, which committed it, is parked on the
//! leader (long poll) when the leader crashes, so neither follower ever
//! learns that the high watermark passed "b": each still holds high
//! watermark 1 where 2 was acknowledged. The followers are partitioned from
//! each other, so the new leader cannot hear from the other one. It then
//! reports `CommittedEndNotYetKnown` (not 1), the committed-record iterator
//! waits rather than stopping at 1, and `acks=all` appends in the new epoch
//! wait. Once the partition heals, the other follower fetches up to the
//! epoch's start offset and the committed end is known again: at least 2,
//! with "b" in it.

use std::time::{Duration, Instant};

use isrlog::testing::Cluster;
use isrlog::{Acks, Error, Isolation, LogId, NodeId, Offset, ReplicatedLog, ReplicationConfig};

const LOG: LogId = LogId(0);
const WAIT_MAX: Duration = Duration::from_secs(20);

fn values(log: &ReplicatedLog, from: Offset) -> Vec<String> {
    let mut out = Vec::new();
    for batch in log.read(from, 1 << 20, Isolation::Committed).unwrap() {
        for record in batch.records() {
            out.push(String::from_utf8(record.unwrap().value.to_vec()).unwrap());
        }
    }
    out
}

#[test]
fn a_new_leader_with_a_stale_high_watermark_says_the_committed_end_is_not_yet_known() {
    let cluster = Cluster::builder()
        .nodes(3)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            // The fetch that commits "b" stays parked on the old leader
            // until it crashes: no new data arrives to end the long poll.
            fetch_wait_max: Duration::from_secs(2),
            replica_lag_time_max: Duration::from_secs(30),
            request_timeout: Duration::from_secs(10),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_log(LOG).unwrap();
    let old_leader = leader.node_id();
    let followers: Vec<NodeId> = cluster
        .node_ids()
        .into_iter()
        .filter(|&node| node != old_leader)
        .collect();

    leader.append_values(&["a"], Acks::All).unwrap();
    // Every follower learns that "a" is committed before "b" is written.
    assert!(
        cluster.wait_until(WAIT_MAX, |c| followers.iter().all(|&node| c
            .log(node, LOG)
            .unwrap()
            .high_watermark()
            == Offset(1)))
    );
    let b = leader.append_values(&["b"], Acks::All).unwrap();
    assert_eq!(b.base_offset, Offset(1));
    assert_eq!(leader.committed_end().unwrap(), Offset(2));
    // A follower is not the one to ask.
    assert!(matches!(
        cluster.log(followers[0], LOG).unwrap().committed_end(),
        Err(Error::NotLeader { .. })
    ));

    cluster.network.partition(&followers[..1], &followers[1..]);
    cluster.crash(old_leader);

    // The new leader's high watermark is the stale 1, below its epoch's
    // start offset 2.
    let deadline = Instant::now() + WAIT_MAX;
    let new_leader = loop {
        let elected = cluster
            .leader_of(LOG)
            .filter(|&node| node != old_leader)
            .and_then(|node| cluster.log(node, LOG).ok())
            .filter(ReplicatedLog::is_leader);
        if let Some(handle) = elected {
            break handle;
        }
        assert!(Instant::now() < deadline, "no new leader");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(new_leader.log_end_offset(), Offset(2));
    assert_eq!(
        new_leader.high_watermark(),
        Offset(1),
        "the window is there"
    );
    match new_leader.committed_end() {
        Err(Error::CommittedEndNotYetKnown {
            log,
            high_watermark,
            epoch_start_offset,
            ..
        }) => {
            assert_eq!(log, LOG);
            assert_eq!(high_watermark, Offset(1));
            assert_eq!(epoch_start_offset, Offset(2));
        }
        other => panic!("expected CommittedEndNotYetKnown, got {other:?}"),
    }
    assert!(new_leader
        .committed_end()
        .as_ref()
        .err()
        .is_some_and(Error::is_retriable));

    // Readers do not take 1 for the end: the iterator yields "a", then
    // waits for "b" instead of ending or skipping.
    let mut records = new_leader.committed_records(Offset(0));
    let a = records
        .next_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert_eq!(&a.value[..], b"a");
    assert!(
        records.next_timeout(Duration::from_millis(200)).is_none(),
        "nothing past the stale high watermark is handed out as committed"
    );
    assert_eq!(values(&new_leader, Offset(0)), vec!["a"]);

    // An acks=all append in the new epoch waits too (the other follower
    // cannot fetch it), and it stays not yet known all the while.
    let waiting = {
        let new_leader = new_leader.clone();
        std::thread::spawn(move || new_leader.append_values(&["c"], Acks::All))
    };
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !waiting.is_finished(),
        "acks=all returned without a follower"
    );
    assert!(matches!(
        new_leader.committed_end(),
        Err(Error::CommittedEndNotYetKnown { .. })
    ));

    // The other follower fetches again: the end is known, and holds "b".
    cluster.network.heal();
    let c = waiting.join().unwrap().unwrap();
    assert_eq!(c.base_offset, Offset(2));
    assert!(
        cluster.wait_until(WAIT_MAX, |_| new_leader.committed_end().is_ok()),
        "the committed end stays unknown after the partition healed"
    );
    let end = new_leader.committed_end().unwrap();
    assert!(
        end >= Offset(3),
        "committed end {end} after c was acknowledged"
    );
    let b_record = records
        .next_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert_eq!(
        (b_record.offset, &b_record.value[..]),
        (Offset(1), &b"b"[..])
    );
    assert_eq!(values(&new_leader, Offset(0)), vec!["a", "b", "c"]);
}
