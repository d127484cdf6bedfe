//! Issue 11: a leader cut off from ZooKeeper (its connections through a
//! proxy closed and refused) keeps running, but its session expires: the
//! controller on another node elects a new leader, the old leader cannot
//! acknowledge an `acks=all` write any more (its followers left it), and
//! traffic continues on the new leader. Once the old leader reaches
//! ZooKeeper again it registers anew, learns that it was replaced, rejoins
//! as a follower, and no acknowledged record is lost.

use std::time::{Duration, Instant};

use crate::zookeeper_support::{
    assert_converged, assert_nothing_acknowledged_lost, server, Traffic,
};
use isrlog::testing::ZkCluster;
use isrlog::{Acks, LogId};

const LOG: LogId = LogId(0);
const SESSION_TIMEOUT: Duration = Duration::from_secs(1);

#[test]
fn expired_session_fences_a_leader_cut_off_from_zookeeper() {
    let server = server();
    let cluster = ZkCluster::builder(server.connect_string())
        .nodes(3)
        .replication(crate::zookeeper_support::replication())
        .session_timeout(SESSION_TIMEOUT)
        .proxied(true)
        .build()
        .expect("cluster");
    cluster.create_log(LOG, 3).expect("create log");
    let traffic = Traffic::new();
    std::thread::scope(|scope| {
        scope.spawn(|| traffic.run(&cluster, LOG, "record"));
        let _stop = traffic.stop_on_drop();
        assert!(
            traffic.wait_for(0, 100, Duration::from_secs(20)),
            "no traffic before the partition"
        );
        let old_leader = cluster.leader_of(LOG).expect("a leader");
        let old_handle = cluster.log(old_leader, LOG).expect("old leader's handle");
        let before = traffic.acknowledged_count();
        let cut_at = Instant::now();
        cluster
            .cut_from_zookeeper(old_leader, true)
            .expect("cut the leader off");
        assert!(
            cluster.wait_until(SESSION_TIMEOUT * 3 + Duration::from_secs(5), |c| {
                c.leader_of(LOG).is_some_and(|leader| leader != old_leader)
            }),
            "no new leader after cutting {old_leader} off from ZooKeeper"
        );
        eprintln!("new leader elected {:?} after the cut", cut_at.elapsed());
        // Once the new leader knows it leads, it no longer fetches from the
        // old one, which therefore cannot commit anything: it may still
        // believe it leads, but its ISR (which it cannot shrink without
        // ZooKeeper) includes a replica that will never fetch from it again.
        let new_leader = cluster.leader_log(LOG).expect("the new leader leads");
        assert_ne!(new_leader.node_id(), old_leader);
        let fenced = old_handle.append_values(&[b"from the deposed leader"], Acks::All);
        assert!(
            fenced.is_err(),
            "the deposed leader acknowledged an acks=all write: {fenced:?}"
        );
        assert!(
            traffic.wait_for(before, 100, Duration::from_secs(20)),
            "traffic did not continue on the new leader"
        );
        cluster
            .cut_from_zookeeper(old_leader, false)
            .expect("reconnect the old leader");
        assert!(
            cluster.wait_until(Duration::from_secs(15), |c| {
                c.in_sync_replicas(LOG).contains(&old_leader)
            }),
            "{old_leader} never rejoined the ISR after reconnecting"
        );
        let rejoined = traffic.acknowledged_count();
        assert!(
            traffic.wait_for(rejoined, 50, Duration::from_secs(20)),
            "traffic stalled after {old_leader} rejoined"
        );
        traffic.stop();
    });
    assert_converged(&cluster, LOG, Duration::from_secs(20));
    let leader = cluster.leader_log(LOG).expect("leader");
    assert_nothing_acknowledged_lost(&traffic.acknowledged(), &leader);
    // Written by the old leader after the new one took over, so the new
    // leader never had it: it is truncated away when the old one rejoins.
    let values = crate::zookeeper_support::committed_values(&leader);
    assert!(
        !values.iter().any(|v| v == "from the deposed leader"),
        "the deposed leader's write was committed"
    );
}
