//! A [`crate::Coordinator`] on Apache ZooKeeper (feature `zookeeper`):
//! [`ZkCoordinator`], configured by [`ZkCoordinatorConfig`].
//!
//! The layout of its znodes and their documents is in `document.rs`, the
//! private executor the asynchronous client runs on in `executor.rs`, the
//! event fan-out in `events.rs`, and the trait's mapping onto ZooKeeper in
//! `coordinator.rs`.

mod config;
mod coordinator;
mod document;
mod events;
mod executor;

pub use config::ZkCoordinatorConfig;
pub use coordinator::ZkCoordinator;
#[cfg(any(test, feature = "testing"))]
pub(crate) use executor::{Effect, Executor};
