//! Coordinators: the controller's elections, the conformance suite for the
//! memory coordinator and the demo shim, and coordinator faults.
//!
//! One test binary per area (issue 22): each module is one rule's test file,
//! so `cargo test NAME` still selects a test by its file's or its own name.

#[path = "../../examples/tcp_cluster/coordinator_shim.rs"]
mod coordinator_shim;

mod controller_elections;
mod coordinator_conformance;
mod coordinator_fault_injection;
mod coordinator_shim_conformance;
