//! Shared by the benches that compare disk-writing runs.

/// Writes back the page cache's dirty data (`sync`, untimed) before a
/// measured run, so that no run pays for the writeback of an earlier one:
/// the three replicas of a bench cluster share this one disk (in a
/// deployment each has its own), and without this the replicated phase,
/// which runs after the single-replica baseline, was throttled by the
/// baseline's gigabytes still being written back. The absolute figures
/// then leave out writeback for runs that stay under the kernel's dirty
/// page threshold; the ratios compare runs under the same conditions.
/// Best effort: a machine without `sync` measures as before.
pub fn settle_page_cache() {
    let _ = std::process::Command::new("sync").status();
}
