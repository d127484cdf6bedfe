//! One replica's log on disk: segments, offset indexes, recovery, checkpoint
//! files, the leader epoch cache and retention. No network, no replication
//! decisions.

// Until the segment and log modules land and use everything here.
#![allow(dead_code)]

mod checkpoint;
mod leader_epoch;

#[allow(unused_imports)]
pub(crate) use checkpoint::{load_pairs, store_pairs, sync_dir, write_atomically, LogCheckpoint};
#[allow(unused_imports)]
pub(crate) use leader_epoch::{EpochEntry, LeaderEpochCache};
