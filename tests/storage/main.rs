//! One log on disk: segments, indexes, checkpoints, recovery from torn and
//! damaged files, truncation, retention, producer state and the decoders.
//!
//! One test binary per area (issue 22): each module is one rule's test file,
//! so `cargo test NAME` still selects a test by its file's or its own name.

#[path = "../support/storage_support.rs"]
mod storage_support;

mod a_snapshot_download_left_by_a_crash_is_deleted_at_open;
mod a_torn_index_entry_is_rebuilt_never_trusted;
mod a_truncation_into_the_batch_holding_the_log_start_restarts_there;
mod checkpoint_and_truncation_never_deadlock;
mod corruption_below_recovery_point_is_an_error;
mod decoders_never_panic_on_arbitrary_bytes;
mod epoch_cache_end_offset_for_epoch;
mod follower_append_keeps_offsets_and_epochs;
mod garbage_checkpoint_is_a_clear_error_or_rescan;
mod group_commit_shares_fsyncs;
mod index_is_rebuilt_when_missing_or_garbage;
mod log_start_moves_never_hang_or_refuse_to_open;
mod power_loss_keeps_only_fsynced_bytes;
mod producer_state_survives_reopen_and_truncation;
mod read_bounds;
mod retention_never_deletes_at_or_above_limit;
mod segments_roll_by_size_and_age;
mod sim_disk_power_loss_keeps_what_was_flushed;
mod stored_damage_is_detected_never_served;
mod torn_tail_recovers_to_last_complete_batch;
mod truncate_to_removes_suffix;
