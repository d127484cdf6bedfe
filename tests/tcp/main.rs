//! The TCP transport: conformance, framing, limits, reconnects and the
//! resources a hostile or broken peer can take.
//!
//! One test binary per area (issue 22): each module is one rule's test file,
//! so `cargo test NAME` still selects a test by its file's or its own name.

#[path = "../support/log_capture.rs"]
mod log_capture;
#[path = "../support/tcp_attack_support.rs"]
mod tcp_attack_support;

mod tcp_fetch_answers_stay_within_the_response_budget;
mod tcp_frame_deadline_covers_the_whole_frame;
mod tcp_idle_connection_flood_cannot_lock_out_a_replica;
mod tcp_node_survives_bad_frames;
mod tcp_partial_frames_share_a_bounded_budget;
mod tcp_refused_connection_warnings_are_rate_limited;
mod tcp_replication_survives_leader_kill;
mod tcp_slow_reader_cannot_hold_the_handler_threads;
mod tcp_spoofed_fetches_do_not_count_or_slow_acks_all;
mod tcp_transport_bad_frames;
mod tcp_transport_conformance;
mod tcp_transport_latency;
mod tcp_transport_limits;
mod tcp_transport_multiplexing;
mod tcp_transport_reconnect;
