//! `Trace`: what a simulated run did, as a running hash and, when asked for,
//! as lines. Two runs of one seed must end with the same hash; the lines say
//! where two runs that should agree went apart.
//!
//! The hash is 64-bit FNV-1a over every recorded line and its length (so
//! that "ab" + "c" and "a" + "bc" differ). It is fixed by its definition,
//! not by the standard library's hasher, so a hash printed today can be
//! compared with one printed by another build.

use std::fmt::Write as _;
use std::time::Duration;

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A run's events, hashed; see the module docs.
#[derive(Debug)]
pub(crate) struct Trace {
    hash: u64,
    events: u64,
    /// The last `kept_max` lines, when keeping lines was asked for.
    kept: std::collections::VecDeque<String>,
    kept_max: usize,
    line: String,
}

impl Trace {
    /// A trace that keeps the last `kept_max` lines (0: only the hash).
    pub(crate) fn new(kept_max: usize) -> Trace {
        Trace {
            hash: FNV_OFFSET_BASIS,
            events: 0,
            kept: std::collections::VecDeque::new(),
            kept_max,
            line: String::new(),
        }
    }

    /// Records that `what` happened at simulated time `at`.
    pub(crate) fn record(&mut self, at: Duration, what: std::fmt::Arguments<'_>) {
        self.line.clear();
        push_micros(&mut self.line, at);
        // Writing into a String cannot fail.
        let _ = self.line.write_fmt(what);
        self.mix(&(self.line.len() as u64).to_le_bytes());
        let line = std::mem::take(&mut self.line);
        self.mix(line.as_bytes());
        self.events += 1;
        // With `RUST_LOG=isrlog::sim=debug` the run's events appear among
        // the nodes' logs, in order: a run that panics never prints its
        // kept lines.
        tracing::debug!(target: "isrlog::sim", "{line}");
        if self.kept_max > 0 {
            // The line dropped off the front lends its buffer: no
            // allocation per line once `kept_max` lines are kept.
            let mut kept = if self.kept.len() == self.kept_max {
                self.kept.pop_front().unwrap_or_default()
            } else {
                String::new()
            };
            kept.clear();
            kept.push_str(&line);
            self.kept.push_back(kept);
        }
        self.line = line;
    }

    fn mix(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.hash ^= u64::from(*byte);
            self.hash = self.hash.wrapping_mul(FNV_PRIME);
        }
    }

    /// The hash of everything recorded so far.
    pub(crate) fn hash(&self) -> u64 {
        self.hash
    }

    /// How many events were recorded.
    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    /// The last lines kept, oldest first.
    pub(crate) fn last_lines(&self) -> impl Iterator<Item = &str> {
        self.kept.iter().map(String::as_str)
    }
}

/// Writes `at` as `format!("{:>12}us ", at.as_micros())` does, without the
/// formatting machinery: every trace line begins so, and formatting it was
/// a fifth of a line's cost. The digits, their padding and the unit are
/// put together in one buffer and pushed at once (pushed char by char,
/// they were still a fifth of the rest).
fn push_micros(line: &mut String, at: Duration) {
    let Ok(mut micros) = u64::try_from(at.as_micros()) else {
        let _ = write!(line, "{:>12}us ", at.as_micros());
        return;
    };
    // u64::MAX has 20 digits; the padding reaches 12 characters.
    let mut buffer = [b' '; 23];
    let end = buffer.len() - 3;
    buffer[end..].copy_from_slice(b"us ");
    let mut start = end;
    loop {
        start -= 1;
        buffer[start] = b'0' + (micros % 10) as u8;
        micros /= 10;
        if micros == 0 {
            break;
        }
    }
    let start = start.min(end - 12);
    line.push_str(std::str::from_utf8(&buffer[start..]).expect("ASCII digits, spaces and \"us \""));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_of_nothing_is_the_offset_basis_and_of_a_is_the_reference() {
        let mut trace = Trace::new(0);
        assert_eq!(trace.hash(), FNV_OFFSET_BASIS);
        trace.mix(b"a");
        // The FNV-1a 64 reference value for "a".
        assert_eq!(trace.hash(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn equal_runs_hash_equal_and_a_difference_in_time_or_order_shows() {
        let run = |events: &[(u64, &str)]| {
            let mut trace = Trace::new(2);
            for (at, what) in events {
                trace.record(Duration::from_micros(*at), format_args!("{what}"));
            }
            trace
        };
        let a = run(&[(1, "send 0->1"), (2, "deliver 0->1")]);
        assert_eq!(
            a.hash(),
            run(&[(1, "send 0->1"), (2, "deliver 0->1")]).hash()
        );
        assert_ne!(
            a.hash(),
            run(&[(1, "send 0->1"), (3, "deliver 0->1")]).hash()
        );
        assert_ne!(
            a.hash(),
            run(&[(2, "deliver 0->1"), (1, "send 0->1")]).hash()
        );
        assert_ne!(
            run(&[(1, "ab"), (1, "c")]).hash(),
            run(&[(1, "a"), (1, "bc")]).hash()
        );
        assert_eq!(a.events(), 2);
        let lines: Vec<&str> = a.last_lines().collect();
        assert_eq!(
            lines,
            ["           1us send 0->1", "           2us deliver 0->1"]
        );
    }

    #[test]
    fn the_time_is_written_as_the_formatter_writes_it() {
        for micros in [0, 7, 123_456, 999_999_999_999, 1_000_000_000_000, u64::MAX] {
            let at = Duration::from_micros(micros);
            let mut line = String::new();
            push_micros(&mut line, at);
            assert_eq!(line, format!("{:>12}us ", at.as_micros()));
        }
        let mut line = String::new();
        push_micros(&mut line, Duration::MAX);
        assert_eq!(line, format!("{:>12}us ", Duration::MAX.as_micros()));
    }

    #[test]
    fn only_the_last_lines_are_kept() {
        let mut trace = Trace::new(2);
        for i in 0..5 {
            trace.record(Duration::ZERO, format_args!("{i}"));
        }
        let lines: Vec<&str> = trace.last_lines().collect();
        assert_eq!(lines, ["           0us 3", "           0us 4"]);
    }
}
