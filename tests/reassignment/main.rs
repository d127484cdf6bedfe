//! Online reassignment (SPEC 3.10, Kafka's KIP-455): adding, removing and
//! moving replicas under load, replacing a dead node, cancelling, and
//! surviving crashes half-way.
//!
//! One test binary per area (issue 22): each module is one rule's test file.

#[path = "../support/reassignment_support.rs"]
mod reassignment_support;

mod a_cancel_during_the_leaders_hand_over_gives_appends_back;
mod a_cancelled_reassignment_returns_to_the_original_replicas;
mod a_reassignment_survives_crashes_half_way;
mod a_stale_log_list_at_start_deletes_no_replica;
mod an_added_replica_catches_up_a_backlog;
mod reassignment_under_acks_all_appends_loses_nothing;
mod removing_the_leader_never_hands_over_to_a_cut_off_follower;
