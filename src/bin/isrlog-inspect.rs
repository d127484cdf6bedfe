//! `isrlog-inspect [--verbose] LOG_DIR`: dumps one log directory (its
//! checkpoints, leader epoch cache, producer snapshots, segments and, with
//! `--verbose`, every batch), verifies every CRC and offset, and says what
//! recovery would do, without changing anything in the directory (as Kafka's
//! `kafka-dump-log` does for Kafka).
//!
//! Exit code: 0 when the log is healthy, 1 when damage was found or recovery
//! would change something, 2 on a usage error or an I/O error.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: isrlog-inspect [--verbose] LOG_DIR";

fn main() -> ExitCode {
    let mut verbose = false;
    let mut dir: Option<PathBuf> = None;
    for arg in std::env::args_os().skip(1) {
        match arg.to_str() {
            Some("--verbose") | Some("-v") => verbose = true,
            Some("--help") | Some("-h") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Some(flag) if flag.starts_with('-') => {
                eprintln!("isrlog-inspect: unknown option {flag}\n{USAGE}");
                return ExitCode::from(2);
            }
            _ if dir.is_some() => {
                eprintln!("isrlog-inspect: more than one LOG_DIR given\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => dir = Some(PathBuf::from(arg)),
        }
    }
    let Some(dir) = dir else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if !dir.is_dir() {
        eprintln!("isrlog-inspect: {} is not a directory", dir.display());
        return ExitCode::from(2);
    }
    match isrlog::inspect::inspect_dir(&dir) {
        Ok(mut report) => {
            report.verbose = verbose;
            print!("{report}");
            if report.is_healthy() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("isrlog-inspect: {e}");
            ExitCode::from(2)
        }
    }
}
