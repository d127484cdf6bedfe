//! The `isrlog-inspect` tool (feature `inspect`).
//!
//! One test binary per area (issue 22): each module is one rule's test file,
//! so `cargo test NAME` still selects a test by its file's or its own name.

#[path = "../support/storage_support.rs"]
mod storage_support;

mod inspect_is_safe_on_a_live_log;
mod inspect_reports_healthy_torn_and_corrupt_logs;
