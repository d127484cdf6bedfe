//! Regression (issue 23, item 7): over plaintext TCP anyone can send a
//! fetch in a follower's name, and the leader took it as that follower's
//! log end. 100 fetches per second at offset 0 in a follower's name, while
//! a writer appended with `acks=all`, cut the acknowledged rate by 74%:
//! each one moved the follower's recorded log end back to 0 and held the
//! high watermark until the follower's next real fetch.
//!
//! Fix (SPEC 3.2): every fetch carries its sender's incarnation (what the
//! coordinator handed out at its registration), and the leader counts it
//! only if it is the follower's current one. A stranger who does not know
//! it is answered `StaleIncarnation`, and nothing changes.
//!
//! The test measures the writer's commit rate in one run, before, during
//! and after the spoofing, and prints the figures and their ratio. What it
//! asserts is what the fix guarantees on any machine: every spoofed fetch
//! is refused, the follower never leaves the ISR, and its recorded log end
//! never falls back anywhere near 0 (without the fix: 0 of 301 refused,
//! the victim's lag 908 records with the log end at 530). The ratio is
//! asserted only against a generous bound (0.5), because on a loaded
//! 2-core machine phases of a few seconds differ by more than the 10% the
//! issue asks for; the printed figures give the real ratio (0.94 with the
//! fix, 0.76 without it, with this writer's 5 ms pause between appends).
//! `cargo bench --bench spoofed_fetches` measures it properly: alternating
//! phases with and without the spoofer, a same-run ratio of medians.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::tcp_attack_support::*;
use isrlog::TcpConfig;

/// How long each phase of the measurement lasts.
const PHASE: Duration = Duration::from_secs(3);
/// Spoofed fetches per second.
const SPOOF_RATE: u32 = 100;
/// Commits per second the writer made during `phase`.
fn commit_rate(writer: &Writer, phase: Duration) -> f64 {
    let (start, started) = (writer.committed(), Instant::now());
    thread::sleep(phase);
    (writer.committed() - start) as f64 / started.elapsed().as_secs_f64()
}

#[test]
fn spoofed_fetches_at_offset_zero_are_refused_and_do_not_slow_acks_all() {
    let cluster = cluster_with(TcpConfig::default());
    let target = leader(&cluster);
    let (victim, guesses) = victim_and_guesses(&cluster, target);
    let handle = cluster.leader_log(LOG).expect("leader handle");
    let epoch = handle.leader_epoch();
    let addr = cluster.addr(target).expect("leader listens");

    let writer = Writer::new();
    let monitoring = AtomicBool::new(true);
    let spoofing = AtomicBool::new(false);
    let left_isr = AtomicBool::new(false);
    let spoof_started_at_end = AtomicU64::new(u64::MAX);
    let max_lag_while_spoofing = AtomicU64::new(0);
    let (mut sent, mut refused) = (0u64, 0u64);
    let (before, during, after) = thread::scope(|scope| {
        scope.spawn(|| writer.run(&cluster));
        let _stop_writer = writer.stop_when_dropped();
        // A failing assertion must end the monitor too, or the scope
        // would wait for it for ever.
        let _stop_monitor = StopOnDrop(&monitoring);
        // Watches the leader's view of the victim all along.
        scope.spawn(|| {
            while monitoring.load(Ordering::SeqCst) {
                if !cluster.in_sync_replicas(LOG).contains(&victim)
                    || !handle.in_sync_replicas().contains(&victim)
                {
                    left_isr.store(true, Ordering::SeqCst);
                }
                if spoofing.load(Ordering::SeqCst) {
                    let lag = handle.follower_lag(victim).map_or(u64::MAX, |(lag, _)| lag);
                    max_lag_while_spoofing.fetch_max(lag, Ordering::SeqCst);
                }
                thread::sleep(Duration::from_millis(2));
            }
        });
        writer.wait_for_more_commits(20, "commits before measuring");
        let before = commit_rate(&writer, PHASE);

        spoof_started_at_end.store(handle.log_end_offset().0, Ordering::SeqCst);
        spoofing.store(true, Ordering::SeqCst);
        let (start, started) = (writer.committed(), Instant::now());
        (sent, refused) = send_spoofed_fetches(addr, victim, &guesses, epoch, SPOOF_RATE, PHASE);
        let during = (writer.committed() - start) as f64 / started.elapsed().as_secs_f64();
        spoofing.store(false, Ordering::SeqCst);

        let after = commit_rate(&writer, PHASE);
        writer.stop();
        monitoring.store(false, Ordering::SeqCst);
        (before, during, after)
    });
    let baseline = (before + after) / 2.0;
    let ratio = during / baseline;
    println!(
        "acks=all commits/s: {before:.0} before, {during:.0} during {sent} spoofed fetches \
         ({SPOOF_RATE}/s, {refused} refused), {after:.0} after; during / mean(before, after) = \
         {ratio:.2}; the victim's largest lag while spoofed: {} records (log end {} when it began)",
        max_lag_while_spoofing.load(Ordering::SeqCst),
        spoof_started_at_end.load(Ordering::SeqCst),
    );

    assert_eq!(
        refused, sent,
        "every spoofed fetch must be refused as not from the victim's incarnation"
    );
    assert!(
        sent >= u64::from(SPOOF_RATE) * PHASE.as_secs() / 2,
        "only {sent} sent"
    );
    assert!(!left_isr.load(Ordering::SeqCst), "the victim left the ISR");
    // Counted, a fetch at 0 would have made the lag the whole log end, at
    // least `spoof_started_at_end` records. A real follower that falls
    // half a log behind would be stalled for seconds.
    let started_at = spoof_started_at_end.load(Ordering::SeqCst);
    assert!(
        max_lag_while_spoofing.load(Ordering::SeqCst) < started_at / 2,
        "the victim's recorded log end fell back"
    );
    assert!(writer.failed() == 0, "{} appends failed", writer.failed());
    assert!(
        ratio >= 0.5,
        "the spoofed fetches slowed acks=all to {ratio:.2} of the same run's rate"
    );
    cluster.shutdown().expect("clean shutdown");
}

/// Clears a flag when dropped (a thread loops while it is set).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}
