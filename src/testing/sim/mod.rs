//! The deterministic simulator (issue 28), in the making: a whole cluster
//! stepped in one thread under simulated time, network and disk, every run
//! fixed by one seed.
//!
//! What is here so far is what does not depend on the node: the agenda of
//! events ([`schedule`]), the network's fault model ([`network`]) and the
//! run's trace hash ([`trace`]). Storage's simulated disk is
//! [`SimDisk`](crate::testing::SimDisk).

pub(crate) mod blocking;
pub(crate) mod network;
pub(crate) mod producer;
pub(crate) mod run;
pub(crate) mod schedule;
pub(crate) mod trace;
