//! SPEC 3.1 and 2.x's poisoned log: an append to a leader whose storage
//! failed before the call fails at once with `Poisoned`, whatever its
//! `acks`, and nothing is appended. An `acks=0` append, whose write errors
//! are not reported, was acknowledged at offsets nothing was ever written
//! at (simulator seed 60736899: two at the same offset).

use isrlog::testing::Cluster;
use isrlog::{Acks, Error, LogId, RecordBatchBuilder};

#[test]
fn appends_to_a_leader_whose_storage_failed_fail_at_once_for_every_acks() {
    let cluster = Cluster::builder().nodes(1).build().expect("cluster starts");
    let log = LogId(0);
    cluster.create_log(log, 1).expect("log created");
    let leader = cluster.leader_log(log).expect("leader");
    leader
        .append_values(&[b"before"], Acks::All)
        .expect("append before the failure");
    let end = leader.log_end_offset();
    leader.fail_storage_for_test();
    for acks in [Acks::None, Acks::Leader, Acks::All] {
        let mut builder = RecordBatchBuilder::new(0);
        builder.push(b"after");
        let batch = builder.build().expect("batch");
        // The node resigns the leadership of a failed log on its own
        // thread, maybe before this call: `NotLeader` then, as refusing.
        match leader.append(&batch, acks) {
            Err(Error::Poisoned { .. } | Error::NotLeader { .. }) => {}
            other => panic!("{acks:?} append to a failed log: {other:?}"),
        }
        match leader.append_pipelined(&batch, acks) {
            Err(Error::Poisoned { .. } | Error::NotLeader { .. }) => {}
            Ok(handle) => panic!(
                "{acks:?} pipelined append to a failed log was taken: {:?}",
                handle.wait()
            ),
            Err(other) => panic!("{acks:?} pipelined append to a failed log: {other:?}"),
        }
    }
    assert_eq!(leader.log_end_offset(), end, "nothing was appended");
}
