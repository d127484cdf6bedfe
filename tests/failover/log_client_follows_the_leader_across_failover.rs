//! Issue 15: `LogClient` appends to whichever node leads a log. Across a
//! leader crash it follows `NotLeader` / `LeaderNotAvailable` to the new
//! leader and keeps going; every append it acknowledged is committed; at its
//! deadline it gives up with the last error.

use std::time::Duration;

use isrlog::testing::{Cluster, Lose, SessionEnd};
use isrlog::{Acks, Error, Isolation, LogClient, LogId, Offset, ProducerConfig, ReplicationConfig};

const LOG: LogId = LogId(0);

fn config(delivery_timeout: Duration) -> ProducerConfig {
    ProducerConfig {
        retry_backoff: Duration::from_millis(5),
        delivery_timeout,
        ..ProducerConfig::default()
    }
}

#[test]
fn appends_keep_going_across_a_leader_crash() {
    let cluster = Cluster::builder()
        .nodes(3)
        .session_timeout(Duration::from_millis(500))
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            fetch_wait_max: Duration::from_millis(50),
            request_timeout: Duration::from_secs(5),
            fetch_backoff: Duration::from_millis(5),
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let client = LogClient::new(&cluster, LOG).with_config(config(Duration::from_secs(20)));
    let mut acknowledged = Vec::new();
    for i in 0..20 {
        let value = format!("before-{i}");
        let outcome = client.append_values(&[&value], Acks::All).unwrap();
        acknowledged.push((outcome.base_offset, value));
    }
    let old = cluster.leader_of(LOG).unwrap();
    cluster.crash_with(old, Lose::Nothing, SessionEnd::OnExpiry);
    // The first append after the crash waits for the session to expire and
    // the new leader to be elected, retrying on the way.
    for i in 0..20 {
        let value = format!("after-{i}");
        let outcome = client.append_values(&[&value], Acks::All).unwrap();
        acknowledged.push((outcome.base_offset, value));
    }
    let new = cluster.leader_of(LOG).unwrap();
    assert_ne!(new, old);
    let leader = cluster.leader_log(LOG).unwrap();
    let mut stored = std::collections::BTreeMap::new();
    for batch in leader
        .read(Offset(0), 1 << 20, Isolation::Committed)
        .unwrap()
    {
        for record in batch.records() {
            let record = record.unwrap();
            stored.insert(
                record.offset,
                String::from_utf8(record.value.to_vec()).unwrap(),
            );
        }
    }
    for (offset, value) in &acknowledged {
        assert_eq!(
            stored.get(offset),
            Some(value),
            "acknowledged {value} at {offset}"
        );
    }
}

#[test]
fn with_no_leader_it_gives_up_at_its_deadline() {
    let cluster = Cluster::builder()
        .nodes(3)
        .controller(None)
        .replication(ReplicationConfig {
            min_insync_replicas: 2,
            ..ReplicationConfig::default()
        })
        .build()
        .unwrap();
    cluster.create_log(LOG, 3).unwrap();
    let leader = cluster.leader_of(LOG).unwrap();
    // Without a controller nobody elects a new leader.
    cluster.crash(leader);
    let client = LogClient::new(&cluster, LOG).with_config(config(Duration::from_millis(300)));
    let started = std::time::Instant::now();
    let error = client.append_values(&["x"], Acks::All).unwrap_err();
    let waited = started.elapsed();
    assert!(
        matches!(
            error,
            Error::LeaderNotAvailable(_) | Error::NotLeader { .. } | Error::Transport { .. }
        ),
        "{error}"
    );
    assert!(
        waited >= Duration::from_millis(250),
        "gave up after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(10),
        "kept trying for {waited:?}"
    );
}
