//! Online reassignment (SPEC 3.10, Kafka's KIP-455): adding, removing and
//! moving replicas under load, replacing a dead node, cancelling, and
//! surviving crashes half-way.
//!
//! One test binary per area (issue 22): each module is one rule's test file.

#[path = "../support/reassignment_support.rs"]
mod reassignment_support;

mod a_cancelled_reassignment_returns_to_the_original_replicas;
mod a_deleted_replica_is_placed_on_no_directory;
mod a_failed_unassign_is_retried_until_written;
mod a_reassignment_survives_crashes_half_way;
mod a_removed_leader_keeps_taking_appends_while_a_cut_off_replica_holds_the_high_watermark;
mod a_removed_replica_that_never_opened_is_deleted_and_placed_on_no_directory;
mod a_stale_log_list_at_start_deletes_no_replica;
mod an_added_replica_catches_up_a_backlog;
mod reassignment_under_acks_all_appends_loses_nothing;
mod removing_the_leader_never_hands_over_to_a_cut_off_follower;
