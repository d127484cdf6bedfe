//! The one process-wide `tracing` subscriber of a test binary whose tests
//! read what the library logs. It captures every line at WARN and above,
//! with the name of the thread that wrote it. Several such tests share a
//! binary (issue 22), so each reads only the lines of its own server: the
//! threads of a `TcpServer` are named after its port
//! (`isrlog-tcp-accept-PORT`, `isrlog-tcp-conn-PORT-PEER`).
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// Installs the subscriber (once) and returns what it captured so far.
pub fn captured_logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        // The tests read what this subscriber captures: without it they
        // would fail on missing log lines, not on the real cause.
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_thread_names(true)
            .with_writer(move || LogWriter(Arc::clone(&sink)))
            .try_init()
            .expect("only tests/support/log_capture.rs installs a global subscriber");
        logs
    })
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl Write for LogWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The captured lines that mention `needle`.
pub fn log_lines_with(needle: &str) -> Vec<String> {
    let logs = captured_logs().lock().unwrap();
    String::from_utf8_lossy(&logs)
        .lines()
        .filter(|line| line.contains(needle))
        .map(str::to_owned)
        .collect()
}

/// The captured lines that mention `needle` and were written by a thread
/// of the server listening on `port`.
pub fn server_log_lines_with(port: u16, needle: &str) -> Vec<String> {
    let acceptor = format!(" isrlog-tcp-accept-{port} ");
    let connection = format!(" isrlog-tcp-conn-{port}-");
    log_lines_with(needle)
        .into_iter()
        .filter(|line| line.contains(&acceptor) || line.contains(&connection))
        .collect()
}
