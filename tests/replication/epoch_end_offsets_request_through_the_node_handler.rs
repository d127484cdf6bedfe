//! SPEC 3.6's explicit epoch query (`Request::EpochEndOffsets`, Kafka's
//! `OffsetsForLeaderEpoch`) sent through a node's `RequestHandler`, on a
//! real log whose epoch cache is `{0@0, 2@13, 4@17}` (the SPEC's example
//! `{0@10, 2@13, 4@17}`, with the log starting at 0): the answers, the
//! undefined epoch, and the fencing errors.

use std::time::Duration;

use crate::failover_support::*;
use isrlog::transport::{EpochEndOffsetsRequest, EpochQuery, ErrorCode, Request, Response};
use isrlog::{
    Acks, CasOutcome, Coordinator, EpochEndOffset, LeaderEpoch, LogId, LogUpdate, NodeId, Offset,
};

/// Makes the coordinator's leader of `log` lead again in `epoch` (which
/// may skip epochs: nobody else leads in between).
fn bump_epoch(cluster: &isrlog::testing::Cluster, log: LogId, epoch: u32) {
    let state = cluster.coordinator.log_state(log).unwrap().unwrap();
    let update = LogUpdate {
        leader: state.leader,
        leader_epoch: LeaderEpoch(epoch),
        in_sync_replicas: state.in_sync_replicas.clone(),
        eligible_leader_replicas: Vec::new(),
        unclean_report: None,
        assignment: None,
    };
    let outcome = cluster
        .coordinator
        .compare_and_set(log, state.leader_epoch, state.version, update)
        .unwrap();
    assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
}

fn ask(
    cluster: &isrlog::testing::Cluster,
    node: NodeId,
    log: LogId,
    current: u32,
    epoch: u32,
) -> (ErrorCode, Option<EpochEndOffset>) {
    let handler = cluster.with_node(node, |n| n.handler()).unwrap();
    let request = Request::EpochEndOffsets(EpochEndOffsetsRequest {
        replica: NodeId(9),
        logs: vec![EpochQuery {
            log,
            current_leader_epoch: LeaderEpoch(current),
            epoch: LeaderEpoch(epoch),
        }],
    });
    match handler.handle(NodeId(9), request) {
        Response::EpochEndOffsets(response) => {
            assert_eq!(response.logs.len(), 1);
            let answer = &response.logs[0];
            assert_eq!(answer.log, log);
            (answer.error, answer.end)
        }
        other => panic!("{other:?}"),
    }
}

fn end(epoch: u32, offset: u64) -> Option<EpochEndOffset> {
    Some(EpochEndOffset {
        epoch: LeaderEpoch(epoch),
        end_offset: Offset(offset),
    })
}

#[test]
fn epoch_end_offsets_request_through_the_node_handler() {
    let cluster = scripted_cluster(2, 1);
    let log = LogId(0);
    let (a, b) = (NodeId(0), NodeId(1));
    cluster.create_log(log, 2).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), a);
    // Epoch 0: offsets 0..13; epoch 2: 13..17; epoch 4: 17..19.
    for (epoch, records) in [(0u32, 13u64), (2, 4), (4, 2)] {
        if epoch > 0 {
            bump_epoch(&cluster, log, epoch);
            assert!(cluster.wait_until(Duration::from_secs(5), |_| {
                leader.is_leader() && leader.leader_epoch() == LeaderEpoch(epoch)
            }));
        }
        for i in 0..records {
            leader
                .append_values(&[format!("e{epoch}-{i}")], Acks::Leader)
                .unwrap();
        }
    }
    assert_eq!(leader.log_end_offset(), Offset(19));

    // (asked epoch, expected answer) with the current epoch 4.
    let table: &[(u32, Option<EpochEndOffset>)] = &[
        (0, end(0, 13)),
        (1, end(0, 13)),
        (2, end(2, 17)),
        (3, end(2, 17)),
        (4, end(4, 19)),
        // Newer than every epoch the leader knows: undefined.
        (5, None),
    ];
    for &(epoch, expected) in table {
        assert_eq!(
            ask(&cluster, a, log, 4, epoch),
            (ErrorCode::None, expected),
            "epoch {epoch}"
        );
    }

    // Fencing on the sender's view of the leader epoch.
    assert_eq!(
        ask(&cluster, a, log, 3, 2),
        (ErrorCode::FencedLeaderEpoch, None)
    );
    assert_eq!(
        ask(&cluster, a, log, 5, 2),
        (ErrorCode::UnknownLeaderEpoch, None)
    );
    // A follower does not answer; nor does a node without the log.
    assert!(cluster.wait_until(Duration::from_secs(5), |c| c
        .log(b, log)
        .is_ok_and(|h| h.leader_epoch() == LeaderEpoch(4))));
    assert_eq!(ask(&cluster, b, log, 4, 2), (ErrorCode::NotLeader, None));
    assert_eq!(
        ask(&cluster, a, LogId(7), 4, 2),
        (ErrorCode::UnknownLog, None)
    );
    cluster.shutdown().unwrap();
}
