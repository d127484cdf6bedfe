//! SPEC 2.3 / G5: a follower fetching a batch whose base offset was damaged
//! on the leader's disk (a field the CRC does not cover) gets an error in
//! its fetch answer, never the bytes. Before the read-time offset checks,
//! the leader served the batch under the offsets it claimed.
//!
//! A leader answers fetches of its most recent writes from memory (the
//! bytes it just wrote, never read back), which damage on its disk cannot
//! reach; the damaged batch here is older than those, so the fetches read
//! it from the file, as every fetch of older data does.

use std::os::unix::fs::FileExt;
use std::time::Duration;

use crate::failover_support::*;
use isrlog::transport::{ErrorCode, FetchLog, FetchRequest, Request, Response};
use isrlog::{Acks, LogId, NodeId, Offset, RecordBatchBuilder};

#[test]
fn follower_fetch_of_a_damaged_batch_gets_an_error() {
    let cluster = scripted_cluster(2, 1);
    let log = LogId(0);
    let (a, b) = (NodeId(0), NodeId(1));
    cluster.create_log(log, 2).unwrap();
    let leader = cluster.leader_log(log).unwrap();
    assert_eq!(leader.node_id(), a);
    let mut batch_bytes = Vec::new();
    for batch in 0..3u64 {
        let mut builder = RecordBatchBuilder::new(1_700_000_000_000);
        for i in 0..10 {
            builder.push(format!("v{}", batch * 10 + i).as_bytes());
        }
        let batch = builder.build().unwrap();
        batch_bytes.push(batch.size_bytes() as u64);
        let outcome = leader.append(&batch, Acks::All).unwrap();
        assert_eq!(
            outcome.base_offset,
            Offset(batch_bytes.len() as u64 * 10 - 10)
        );
    }
    // More writes than the leader keeps in memory, one record each.
    const LATER_WRITES: u64 = 64;
    for i in 0..LATER_WRITES {
        let mut builder = RecordBatchBuilder::new(1_700_000_000_000);
        builder.push(format!("later{i}").as_bytes());
        leader.append(&builder.build().unwrap(), Acks::All).unwrap();
    }
    let end = Offset(30 + LATER_WRITES);
    let follower = cluster.log(b, log).unwrap();
    assert!(cluster.wait_until(Duration::from_secs(10), |_| {
        follower.log_end_offset() == end && leader.high_watermark() == end
    }));

    // Flip bit 3 of the second batch's base offset (10 -> 2) in the
    // leader's segment file, under the running node.
    let segment = cluster
        .node_dir(a)
        .join(format!("log-{}", log.0))
        .join("00000000000000000000.log");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&segment)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, batch_bytes[0]).unwrap();
    assert_eq!(byte[0], 10);
    file.write_all_at(&[byte[0] ^ 0x08], batch_bytes[0])
        .unwrap();

    let handler = cluster.with_node(a, |n| n.handler()).unwrap();
    for fetch_offset in [0, 10, 15] {
        let request = Request::Fetch(FetchRequest {
            replica: b,
            incarnation: cluster.incarnation(b).expect("b runs"),
            wait_max: Duration::ZERO,
            bytes_max: 1 << 20,
            logs: vec![FetchLog {
                log,
                current_leader_epoch: leader.leader_epoch(),
                fetch_offset: Offset(fetch_offset),
                last_fetched_epoch: None,
                line_epoch: Some(leader.leader_epoch()),
                log_start_offset: Offset::ZERO,
                bytes_max: 1 << 20,
                applied_offset: None,
            }],
        });
        match handler.handle(b, request) {
            Response::Fetch(response) => {
                let answer = &response.logs[0];
                if fetch_offset == 0 {
                    // The first batch is whole; the read stops before the
                    // damaged one rather than hand it out.
                    assert!(
                        answer.error == ErrorCode::Unknown
                            || (answer.error == ErrorCode::None
                                && answer.records.len() as u64 == batch_bytes[0]),
                        "fetch from 0: {answer:?}"
                    );
                } else {
                    // Storage errors have no code of their own on the wire.
                    assert_eq!(
                        answer.error,
                        ErrorCode::Unknown,
                        "fetch from {fetch_offset}"
                    );
                    assert!(answer.records.is_empty(), "fetch from {fetch_offset}");
                }
            }
            other => panic!("fetch from {fetch_offset}: {other:?}"),
        }
    }
    cluster.shutdown().unwrap();
}
