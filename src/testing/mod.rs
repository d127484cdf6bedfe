//! Test support shared by the crate's tests and by downstream crates (with
//! the `testing` feature): conformance suites for the pluggable traits.

pub mod coordinator_suite;
