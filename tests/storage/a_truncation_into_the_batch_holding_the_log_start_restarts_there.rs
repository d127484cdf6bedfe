//! SPEC 2.6, 2.7: a truncation to an offset inside the batch that holds
//! the log start (an exact start, from DeleteRecords or a snapshot, lies
//! inside a batch) removes that batch whole. The log then holds nothing at
//! or after its start and restarts empty there; it never ends below its
//! start (an invariant the debug build asserted, and a log whose end was
//! below its start in a release build) and its start never moves back.
//!
//! Found by the simulated disk's random workload (issue 28, seed 32 of
//! `sim_disk_power_loss_keeps_what_was_flushed` once it moved log starts).

use crate::storage_support::*;
use isrlog::{LeaderEpoch, Offset};

#[test]
fn a_truncation_into_the_batch_holding_the_log_start_restarts_at_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), dense_index());
    log.append_as_leader(&batch("a", 5), LeaderEpoch(0))
        .unwrap();
    log.append_as_leader(&batch("b", 5), LeaderEpoch(0))
        .unwrap();
    log.set_high_watermark(Offset(10));
    // The start lands inside batch "b" (offsets 5..10).
    log.set_log_start_offset(Offset(7)).unwrap();
    log.truncate_to(Offset(8)).unwrap();
    assert_eq!(log.log_start_offset(), Offset(7));
    assert_eq!(log.log_end_offset(), Offset(7));
    assert!(read_all(&log).is_empty());
    log.append_as_leader(&batch("c", 2), LeaderEpoch(1))
        .unwrap();
    drop(log);

    let log = open(dir.path(), dense_index());
    assert_eq!(log.log_start_offset(), Offset(7));
    assert_eq!(log.log_end_offset(), Offset(9));
    let values: Vec<Vec<u8>> = read_all(&log).into_iter().map(|(_, v)| v).collect();
    assert_eq!(values, [b"c-0".to_vec(), b"c-1".to_vec()]);
}
