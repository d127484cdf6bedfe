//! SPEC 2.6 / 3.9 with the default `ReplicationConfig`: the deletion bound
//! `min(high watermark, lowest applied position over the log's replicas)`
//! holds without any setting (only the cap is off by default). The bug:
//! `retain_until_applied` defaulted to `false` (Kafka's behaviour), so
//! deletion was bounded by the high watermark only, and an application that
//! had not applied a record could lose it to `delete_records_before` or
//! retention. It now defaults to `true`; `false` is the opt-out.

use std::time::Duration;

use isrlog::{Error, LogConfig, NodeId, Offset, ReplicationConfig};

use super::deletion_never_outruns_an_application::{
    all_logs, append, cluster, small_segments, wait_high_watermark_everywhere, wait_leader_knows,
    LOG, WAIT,
};

#[test]
fn deletion_waits_for_the_applications_by_default() {
    let cluster = cluster(ReplicationConfig::default(), LogConfig::default());
    let leader = cluster.leader_log(LOG).expect("leader");
    let follower = NodeId((leader.node_id().0 + 1) % 3);
    append(&leader, 40);
    wait_high_watermark_everywhere(&cluster, Offset(40));

    // No application has reported: deletion is held at the log start.
    match leader.delete_records_before(Offset(10)) {
        Err(Error::DeletionHeldBack { bound, applied, .. }) => {
            assert_eq!((bound, applied), (Offset(0), None));
        }
        other => panic!("no application reported, yet: {other:?}"),
    }
    assert_eq!(leader.log_start_offset(), Offset(0));

    // Every application applied everything but the follower's, which
    // applied 10.
    for log in all_logs(&cluster) {
        let applied = if log.node_id() == follower {
            Offset(10)
        } else {
            Offset(40)
        };
        log.set_applied(applied).expect("set_applied");
    }
    for log in all_logs(&cluster) {
        let applied = if log.node_id() == follower {
            Offset(10)
        } else {
            Offset(40)
        };
        wait_leader_knows(&cluster, &leader, log.node_id(), applied);
    }
    // Past the follower's position: refused, naming it, nothing deleted.
    match leader.delete_records_before(Offset(30)) {
        Err(Error::DeletionHeldBack {
            bound,
            held_by,
            applied,
            ..
        }) => assert_eq!(
            (bound, held_by, applied),
            (Offset(10), follower, Some(Offset(10)))
        ),
        other => panic!("past {follower}'s applied position 10: {other:?}"),
    }
    let bound = leader.deletion_bound().expect("bound");
    assert_eq!((bound.bound, bound.held_by), (Offset(10), Some(follower)));
    // Up to it: deleted.
    assert_eq!(
        leader.delete_records_before(Offset(10)).expect("delete"),
        Offset(10)
    );
    for log in all_logs(&cluster) {
        assert!(
            log.log_start_offset() <= Offset(10),
            "{}: log start {} passed {follower}'s applied position 10",
            log.node_id(),
            log.log_start_offset()
        );
    }

    // The follower's application catches up: deletion goes on.
    cluster
        .log(follower, LOG)
        .expect("follower")
        .set_applied(Offset(40))
        .expect("set_applied");
    wait_leader_knows(&cluster, &leader, follower, Offset(40));
    assert_eq!(
        leader.delete_records_before(Offset(30)).expect("delete"),
        Offset(30)
    );
    assert_eq!(leader.log_start_offset(), Offset(30));
    cluster.shutdown().expect("shutdown");
}

#[test]
fn retention_waits_for_an_application_that_never_reported_by_default() {
    let cluster = cluster(ReplicationConfig::default(), small_segments());
    let leader = cluster.leader_log(LOG).expect("leader");
    let silent = NodeId((leader.node_id().0 + 1) % 3);
    // About 60 KiB, far past the 16 KiB retention; every application but
    // `silent`'s applies everything.
    append(&leader, 60);
    wait_high_watermark_everywhere(&cluster, Offset(60));
    for log in all_logs(&cluster) {
        if log.node_id() != silent {
            log.set_applied(Offset(60)).expect("set_applied");
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let bound = leader.deletion_bound().expect("bound");
    assert_eq!(
        (bound.bound, bound.held_by, bound.held_by_applied),
        (Offset(0), Some(silent), None),
        "{bound:?}"
    );
    for log in all_logs(&cluster) {
        assert_eq!(
            log.log_start_offset(),
            Offset(0),
            "{}: retention deleted what {silent}'s application never applied",
            log.node_id()
        );
    }

    // Once it reports, retention runs.
    cluster
        .log(silent, LOG)
        .expect("silent replica")
        .set_applied(Offset(60))
        .expect("set_applied");
    assert!(
        cluster.wait_until(WAIT, |_| leader.log_start_offset() > Offset(0)),
        "retention never ran after every application reported: {:?}",
        leader.deletion_bound()
    );
    cluster.shutdown().expect("shutdown");
}
