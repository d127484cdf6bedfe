//! Failover: elections, leader epochs and truncation, controlled and unclean
//! shutdowns, the ELR, stale leaders and the randomized fault test (G1-G5).
//!
//! One test binary per area (issue 22): each module is one rule's test file,
//! so `cargo test NAME` still selects a test by its file's or its own name.

#[path = "../support/failover_support.rs"]
mod failover_support;

mod a_fetch_from_a_followers_previous_incarnation_counts_for_nothing;
mod a_lost_coordinator_reply_never_loses_acknowledged_records;
mod all_isr_down_without_unclean_election_stays_leaderless;
mod an_emptied_data_directory_loses_nothing_acknowledged;
mod clean_shutdown_keeps_a_replica_eligible;
mod committed_never_lost_under_random_faults;
mod controlled_shutdown_moves_leadership_first;
mod controlled_shutdown_returns_within_its_deadline;
mod elr_keeps_acknowledged_writes_after_power_loss;
mod failed_storage_hands_leadership_over;
mod fast_leader_changes_a_b_a_end_with_identical_logs;
mod log_client_follows_the_leader_across_failover;
mod new_leader_committed_end_not_yet_known;
mod node_start_refuses_foreign_shared_or_misconfigured_directories;
mod partitioned_leader_never_acknowledges_and_rejoins_as_follower;
mod quick_restart_of_a_leader_starts_a_new_epoch;
mod replica_that_cannot_become_leader_hands_over;
mod seed_000_new_leader_truncates_follower_to_its_log_end;
mod seed_001_divergence_after_two_hard_failures_is_resolved_by_epochs;
mod seed_001_hw_truncation_would_lose_data_epochs_do_not;
mod stale_leader_cannot_change_isr_or_commit;
mod unclean_election_lets_the_first_replica_back_lead;
mod unclean_recovery_counts_a_replica_that_left_the_isr_with_its_disk;
mod unclean_recovery_restart_orders_keep_acknowledged_writes;
mod unclean_switch_waits_for_unclean_recovery;
