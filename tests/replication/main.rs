//! Replication on the memory cluster: acks, the ISR, the high watermark,
//! fetches, retention across replicas and the node's builder.
//!
//! One test binary per area (issue 22): each module is one rule's test file,
//! so `cargo test NAME` still selects a test by its file's or its own name.

#[path = "../support/failover_support.rs"]
mod failover_support;
#[path = "../support/log_capture.rs"]
mod log_capture;

mod a_chunk_corrupted_in_transit_is_detected_and_fetched_again;
mod a_follower_refuses_a_snapshot_below_its_log_start_before_the_application_installs_it;
mod a_leader_whose_application_needs_a_snapshot_hands_leadership_over;
mod a_leader_whose_application_needs_a_snapshot_hands_over_under_continuous_acks_all_load;
mod a_snapshot_transfer_finishes_on_the_snapshot_it_began_while_newer_ones_are_taken;
mod a_transport_that_panics_during_a_snapshot_transfer_fails_only_that_transfer;

mod a_lagging_live_follower_is_rebuilt_from_a_snapshot;
mod a_log_start_inside_a_batch_restarts_the_follower_at_its_base;
mod acks_all_replicates_to_every_in_sync_replica;
mod acks_return_when_spec_3_1_says;
mod append_on_halted_node_fails_at_once;
mod committed_reads_never_pass_the_high_watermark;
mod committed_records_end_at_shutdown;
mod dead_replica_never_rejoins_the_isr;
mod deletion_never_outruns_an_application;
mod deletion_never_passes_the_leaders_latest_snapshot;
mod deletion_waits_for_the_applications_by_default;
mod dropped_cluster_releases_its_files;
mod epoch_end_offsets_request_through_the_node_handler;
mod flush_every_interval_flushes_an_idle_log;
mod follower_below_leader_log_start_restarts_at_it;
mod follower_fetch_of_a_damaged_batch_gets_an_error;
mod high_watermark_follows_seed_001_walk;
mod isr_membership_follows_replica_lag_time_max;
mod long_poll_fetch_vouches_only_as_of_arrival;
mod many_logs_share_one_fetcher_per_node_pair;
mod memory_transport_faults;
mod node_builder_starts_over_memory_and_tcp;
mod replica_assignment_follows_seeds_002_003;
mod retention_moves_log_start_on_every_replica;
mod snapshot_bootstrap_rebuilds_a_replica_behind_the_log_start;
mod snapshot_transfers_end_with_their_node;
