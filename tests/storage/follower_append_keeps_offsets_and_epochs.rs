//! SPEC 3.2: a follower appends the leader's batches unchanged (same offsets,
//! epochs and bytes), checks their CRC and contiguity, and learns the epochs.

use crate::storage_support::*;
use bytes::{Bytes, BytesMut};
use isrlog::{Error, LeaderEpoch, Offset};

fn leader_bytes() -> (tempfile::TempDir, Bytes) {
    let dir = tempfile::tempdir().unwrap();
    let leader = open(dir.path(), dense_index());
    for (epoch, tag) in [(1, "a"), (1, "b"), (3, "c"), (4, "d")] {
        leader
            .append_as_leader(&batch(tag, 3), LeaderEpoch(epoch))
            .unwrap();
    }
    let bytes = leader.read(Offset(0), 1 << 20).unwrap().records;
    (dir, bytes)
}

#[test]
fn follower_append_keeps_offsets_and_epochs() {
    let (_leader_dir, bytes) = leader_bytes();
    let dir = tempfile::tempdir().unwrap();
    let follower = open(dir.path(), dense_index());
    let info = follower.append_as_follower(&bytes).unwrap();
    assert_eq!(info.base_offset, Offset(0));
    assert_eq!(info.last_offset, Offset(11));
    assert_eq!(info.log_end_offset, Offset(12));
    assert_eq!(follower.read(Offset(0), 1 << 20).unwrap().records, bytes);
    assert_eq!(
        follower.epoch_entries(),
        vec![
            (LeaderEpoch(1), Offset(0)),
            (LeaderEpoch(3), Offset(6)),
            (LeaderEpoch(4), Offset(9))
        ]
    );
    assert_eq!(follower.last_batch_epoch(), Some(LeaderEpoch(4)));
    drop(follower);
    let follower = open(dir.path(), dense_index());
    assert_eq!(follower.read(Offset(0), 1 << 20).unwrap().records, bytes);
    assert_eq!(follower.epoch_entries().len(), 3);
}

#[test]
fn follower_append_in_pieces_across_segment_rolls() {
    let (_leader_dir, bytes) = leader_bytes();
    let dir = tempfile::tempdir().unwrap();
    let config = isrlog::LogConfig {
        segment_bytes_max: 400,
        batch_bytes_max: 400,
        ..dense_index()
    };
    let follower = open(dir.path(), config);
    let batches: Vec<_> = isrlog::BatchIter::new(bytes.clone())
        .map(|b| b.unwrap())
        .collect();
    follower.append_as_follower(batches[0].as_bytes()).unwrap();
    let mut rest = BytesMut::new();
    for b in &batches[1..] {
        rest.extend_from_slice(b.as_bytes());
    }
    follower.append_as_follower(&rest.freeze()).unwrap();
    assert!(segment_files(dir.path()).len() >= 2);
    let mut read = BytesMut::new();
    let mut next = Offset(0);
    while next < follower.log_end_offset() {
        let r = follower.read(next, 1 << 20).unwrap();
        next = r.batches().last().unwrap().unwrap().next_offset();
        read.extend_from_slice(&r.records);
    }
    assert_eq!(read.freeze(), bytes);
}

#[test]
fn follower_rejects_gaps_bad_crcs_and_epochs_going_back() {
    let (_leader_dir, bytes) = leader_bytes();
    let batches: Vec<_> = isrlog::BatchIter::new(bytes.clone())
        .map(|b| b.unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let follower = open(dir.path(), dense_index());
    // Not starting at the log end.
    match follower.append_as_follower(batches[1].as_bytes()) {
        Err(Error::NonContiguousAppend { expected, got }) => {
            assert_eq!((expected, got), (Offset(0), Offset(3)))
        }
        other => panic!("{other:?}"),
    }
    // A gap inside the batches.
    let mut gap = BytesMut::new();
    gap.extend_from_slice(batches[0].as_bytes());
    gap.extend_from_slice(batches[2].as_bytes());
    assert!(matches!(
        follower.append_as_follower(&gap.freeze()),
        Err(Error::NonContiguousAppend { .. })
    ));
    // A flipped byte under the CRC: nothing of the call is written.
    let mut bad = BytesMut::from(bytes.as_ref());
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        follower.append_as_follower(&bad.freeze()),
        Err(Error::InvalidBatch { .. })
    ));
    assert_eq!(follower.log_end_offset(), Offset(0));
    // An epoch older than the log's last batch.
    follower.append_as_follower(&bytes).unwrap();
    let mut older = BytesMut::from(batches[0].as_bytes().as_ref());
    older[0..8].copy_from_slice(&12u64.to_le_bytes()); // base offset, outside the CRC
    older[12..16].copy_from_slice(&2u32.to_le_bytes()); // leader epoch, outside the CRC
    assert!(matches!(
        follower.append_as_follower(&older.freeze()),
        Err(Error::InvalidBatch { .. })
    ));
    assert_eq!(follower.log_end_offset(), Offset(12));
}
