//! SPEC 3.6: `end_offset_for_epoch` through a real log, with the spec's
//! example cache {0@10, 2@13, 4@17}, across a reopen.

use crate::storage_support::*;
use isrlog::{EpochEndOffset, LeaderEpoch, Offset};

fn answer(epoch: u32, end: u64) -> Option<EpochEndOffset> {
    Some(EpochEndOffset {
        epoch: LeaderEpoch(epoch),
        end_offset: Offset(end),
    })
}

#[test]
fn epoch_cache_end_offset_for_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path(), dense_index());
    log.truncate_fully_and_start_at(Offset(10)).unwrap();
    log.append_as_leader(&batch("e0", 3), LeaderEpoch(0))
        .unwrap(); // 10..13
                   // A new leader records its epoch at its log end before writing.
    log.assign_epoch(LeaderEpoch(2), Offset(13)).unwrap();
    log.append_as_leader(&batch("e2", 4), LeaderEpoch(2))
        .unwrap(); // 13..17
    log.append_as_leader(&batch("e4", 3), LeaderEpoch(4))
        .unwrap(); // 17..20
    assert_eq!(log.log_end_offset(), Offset(20));
    let table = [
        (0, answer(0, 13)),
        (1, answer(0, 13)),
        (2, answer(2, 17)),
        (3, answer(2, 17)),
        (4, answer(4, 20)),
        (5, None),
    ];
    let check = |log: &isrlog::Log| {
        assert_eq!(
            log.epoch_entries(),
            vec![
                (LeaderEpoch(0), Offset(10)),
                (LeaderEpoch(2), Offset(13)),
                (LeaderEpoch(4), Offset(17))
            ]
        );
        for (epoch, expected) in table {
            assert_eq!(
                log.end_offset_for_epoch(LeaderEpoch(epoch)),
                expected,
                "epoch {epoch}"
            );
        }
    };
    check(&log);
    drop(log); // crash
    let log = open(dir.path(), dense_index());
    check(&log);
    log.close().unwrap();
    let log = open(dir.path(), dense_index());
    check(&log);
    // A leader append with an epoch older than the latest is fenced.
    assert!(matches!(
        log.append_as_leader(&batch("old", 1), LeaderEpoch(3)),
        Err(isrlog::Error::FencedLeaderEpoch { .. })
    ));
}
