//! Producers: idempotent appends and pipelined appends.
//!
//! One test binary per area (issue 22): each module is one rule's test file,
//! so `cargo test NAME` still selects a test by its file's or its own name.

mod append_handles_answer_again_and_time_out_on_time;
mod appends_to_a_failed_log_fail_at_once;
mod completion_callbacks_may_append_and_wait;
mod concurrent_appends_each_get_their_own_offsets_and_outcomes;
mod idempotent_batch_in_doubt_puts_later_ones_in_doubt;
mod idempotent_pipelined_sends_hold_under_random_faults;
mod idempotent_pipelined_sends_keep_order_through_leader_failover;
mod idempotent_producer;
mod idempotent_sixth_pipelined_send_waits_for_the_oldest;
mod pipelined_appends_block_at_the_bytes_bound;
mod pipelined_appends_committed_in_call_order_under_random_faults;
mod pipelined_appends_in_flight_share_writes;
mod pipelined_appends_resolve_like_blocking_appends;
mod support_idempotent;
