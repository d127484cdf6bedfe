//! The deterministic simulator (issue 28): a whole cluster of real nodes,
//! opened without threads, stepped in one thread under simulated time,
//! network and disk, every run fixed by one seed.
//!
//! - [`run`]: a run (its nodes on the shared cluster harness, the
//!   workload and faults drawn from the seed, the checks after every step
//!   and at the end) and the tests that run seeds, named regressions
//!   among them;
//! - [`schedule`]: the agenda of events on simulated time;
//! - [`network`]: the network's fault model (delay, loss, reordering,
//!   duplication, partitions);
//! - [`blocking`], [`producer`] (and `run`'s `application`): the clients
//!   (blocking appends, the idempotent producer, applying applications
//!   with snapshot stores);
//! - [`trace`]: the run's trace and its hash.
//!
//! Storage's simulated disk is [`SimDisk`](crate::testing::SimDisk).

pub(crate) mod blocking;
pub(crate) mod network;
pub(crate) mod producer;
pub(crate) mod run;
pub(crate) mod schedule;
pub(crate) mod trace;
