//! Time, injected. Everything that depends on elapsed time (ISR lag, segment
//! age, retention by age, request deadlines) reads it through a [`Clock`], so
//! tests can move time by hand instead of sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of time: a monotonic instant for durations and a wall clock for
/// record timestamps.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Monotonic time, for lag and deadlines.
    fn now(&self) -> Instant;
    /// Milliseconds since the Unix epoch, for record timestamps and
    /// retention by age.
    fn wall_clock_ms(&self) -> i64;
}

/// The operating system's clocks.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall_clock_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to. Cloning shares the same time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    start: Instant,
    start_wall_ms: i64,
    elapsed_nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock starting now, with the wall clock at `start_wall_ms`.
    pub fn new(start_wall_ms: i64) -> ManualClock {
        ManualClock {
            start: Instant::now(),
            start_wall_ms,
            elapsed_nanos: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Moves time forward by `by`, for every clone of this clock.
    pub fn advance(&self, by: Duration) {
        self.elapsed_nanos
            .fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Time elapsed on this clock since it was made.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.elapsed_nanos.load(Ordering::SeqCst))
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new(1_700_000_000_000)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + self.elapsed()
    }

    fn wall_clock_ms(&self) -> i64 {
        self.start_wall_ms + self.elapsed().as_millis() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_advanced_and_clones_share_time() {
        let clock = ManualClock::new(1000);
        let t0 = clock.now();
        let other = clock.clone();
        other.advance(Duration::from_millis(250));
        assert_eq!(clock.now() - t0, Duration::from_millis(250));
        assert_eq!(clock.wall_clock_ms(), 1250);
    }
}
