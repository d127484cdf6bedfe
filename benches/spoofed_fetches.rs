//! What spoofed fetches cost `acks=all` (issue 23, item 7): over plaintext
//! TCP anyone can send a fetch in a follower's name; since fetches carry
//! the follower's incarnation, the leader refuses those that do not name
//! the current one, before they reach any log. The target: 100
//! spoofed fetches per second at offset 0 slow `acks=all` by at most 10%.
//!
//! One 3-node TCP cluster (min ISR 2), one thread appending single records
//! with `acks=all` back to back (each waits for a follower's fetch, so
//! anything that held the high watermark back would show at once). Phases
//! alternate, `ROUNDS` of each: without spoofing (the same-run baseline),
//! then with `SPOOF_RATE` spoofed fetches per second in the victim's name
//! at offset 0, every incarnation guessed but the real one. It prints the
//! commit rate of every phase, the medians, and their ratio, and counts the
//! spoofed fetches the leader refused.
//!
//! `cargo bench --bench spoofed_fetches` runs it (`ISRLOG_BENCH_SECONDS`
//! per phase, default 3; `ISRLOG_ROUNDS`, default 5). Run by `cargo test`
//! (no `--bench` argument, as in CI) it runs one short round: it then
//! checks that the bench works, not how fast.

#[path = "../tests/support/tcp_attack_support.rs"]
mod tcp_attack_support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use isrlog::{Acks, TcpConfig};
use tcp_attack_support::{cluster_with, leader, send_spoofed_fetches, victim_and_guesses, LOG};

/// Spoofed fetches per second while spoofing.
const SPOOF_RATE: u32 = 100;

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let phase = Duration::from_secs_f64(env_or(
        "ISRLOG_BENCH_SECONDS",
        if quick { 0.3 } else { 3.0 },
    ));
    let rounds = env_or("ISRLOG_ROUNDS", if quick { 1.0 } else { 5.0 }) as usize;
    let cluster = cluster_with(TcpConfig::default());
    let target = leader(&cluster);
    let (victim, guesses) = victim_and_guesses(&cluster, target);
    println!(
        "spoofed_fetches: acks=all single records, one writer, 3 TCP nodes; {rounds} rounds of \
         {phase:?} without and with {SPOOF_RATE} spoofed fetches/s in {victim}'s name at offset 0"
    );

    let committed = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let (mut sent, mut refused) = (0u64, 0u64);
    thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                let appended = cluster
                    .leader_log(LOG)
                    .and_then(|log| log.append_values(&[b"legitimate"], Acks::All));
                match appended {
                    Ok(_) => committed.fetch_add(1, Ordering::SeqCst),
                    Err(_) => failed.fetch_add(1, Ordering::SeqCst),
                };
            }
        });
        // Warm up: the writer's first appends wait for the followers.
        thread::sleep(phase / 2);
        for _ in 0..rounds {
            without.push(rate(&committed, || thread::sleep(phase)));
            with.push(rate(&committed, || {
                let addr = cluster.addr(target).expect("leader listens");
                let epoch = cluster
                    .leader_log(LOG)
                    .expect("leader handle")
                    .leader_epoch();
                let (s, r) = send_spoofed_fetches(addr, victim, &guesses, epoch, SPOOF_RATE, phase);
                sent += s;
                refused += r;
            }));
        }
        stop.store(true, Ordering::SeqCst);
    });
    for (round, (a, b)) in without.iter().zip(&with).enumerate() {
        println!("round {round}: {a:>8.0} commits/s without, {b:>8.0} with spoofing");
    }
    let (baseline, spoofed) = (median(&mut without), median(&mut with));
    println!(
        "median: {spoofed:.0} commits/s while spoofed / {baseline:.0} without = {:.2} (target: at \
         least 0.90); {refused} of {sent} spoofed fetches refused; {} appends failed",
        spoofed / baseline.max(f64::MIN_POSITIVE),
        failed.load(Ordering::SeqCst),
    );
    assert_eq!(refused, sent, "a spoofed fetch was not refused");
    cluster.shutdown().expect("clean shutdown");
}

/// Commits per second while `during` runs.
fn rate(committed: &AtomicU64, during: impl FnOnce()) -> f64 {
    let (start, started) = (committed.load(Ordering::SeqCst), Instant::now());
    during();
    (committed.load(Ordering::SeqCst) - start) as f64 / started.elapsed().as_secs_f64()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn env_or(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
