//! One replica's log on disk: segments, offset indexes, recovery, checkpoint
//! files, the leader epoch cache, flushing and retention. No network, no
//! replication decisions.

mod checkpoint;
mod clean_shutdown;
mod config;
#[cfg(test)]
mod crash_points;
pub(crate) mod disk;
mod flush;
mod identity;
pub mod inspect;
mod leader_epoch;
mod log;
mod offset_index;
mod producer_state;
mod recovery;
mod retention;
mod roll_flush;
mod segment;

#[allow(unused_imports)]
pub(crate) use checkpoint::{
    create_dir_durably, load_pairs, store_pairs, sync_dir, write_atomically, LogCheckpoint,
};
pub use clean_shutdown::PreviousShutdown;
pub(crate) use clean_shutdown::{take_clean_shutdown_marker, write_clean_shutdown_marker};
pub use config::LogConfig;
pub(crate) use disk::{Disk, StdDisk};
pub use flush::FlushPolicy;
pub use identity::DirectoryIdentity;
pub(crate) use identity::{is_identity_or_lock_file, DirectoryLock};
#[allow(unused_imports)]
pub(crate) use leader_epoch::{EpochEntry, LeaderEpochCache};
pub use log::{AppendInfo, Log, LogStats, ReadResult};
pub(crate) use log::{BackgroundWork, RollFlusher};
pub(crate) use producer_state::BATCHES_PER_PRODUCER_MAX;
pub(crate) use roll_flush::RollFlushThread;
// The file decoders and encoders, for `testing::fuzz`.
#[cfg(any(test, feature = "testing"))]
pub(crate) use offset_index::{OffsetIndex, INDEX_ENTRY_BYTES};
#[cfg(any(test, feature = "testing"))]
pub(crate) use producer_state::{snapshot_path, ProducerStateManager};
pub(crate) use recovery::DamageAboveRecoveryPoint;
pub use recovery::{RecoveryReport, TruncatedTail};

/// The name prefix of a snapshot download's scratch file in a log's
/// directory (SPEC 3.9). Nothing durable: recovery deletes any it finds
/// (a crash ended the download; the next one starts from the beginning).
pub(crate) const SNAPSHOT_DOWNLOAD_PREFIX: &str = "snapshot-download";
