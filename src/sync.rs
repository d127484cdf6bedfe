//! The one file that names the synchronisation primitives. The rest of the
//! crate imports locks and condition variables from here and never from
//! `parking_lot` directly, so that the hand-offs modelled by the loom tests
//! (`tests/loom.rs`, run with `RUSTFLAGS="--cfg loom"`) can swap in loom's
//! types in one place.
#![allow(unused_imports)]

pub(crate) use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
pub(crate) use std::sync::Arc;
