//! The TCP transport over mutual TLS (feature `tls`).
//!
//! One test binary per area (issue 22): each module is one rule's test file,
//! so `cargo test NAME` still selects a test by its file's or its own name.

#[path = "../support/log_capture.rs"]
mod log_capture;
#[path = "../support/tcp_attack_support.rs"]
mod tcp_attack_support;
#[path = "../support/tls_support.rs"]
mod tls_support;

mod tls_client_refuses_a_server_posing_as_another_node;
mod tls_cluster_replicates_and_survives_leader_kill;
mod tls_config_loads_pem_files_and_names_the_bad_one;
mod tls_frame_deadline_covers_the_whole_frame;
mod tls_impersonating_frame_after_an_honest_one_is_refused;
mod tls_partial_frames_share_a_bounded_budget;
mod tls_refusal_warnings_are_rate_limited;
mod tls_refusal_warnings_follow_warning_interval;
mod tls_refuses_unauthenticated_and_impersonating_peers;
mod tls_transport_conformance;
