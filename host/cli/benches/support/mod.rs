//! What the daemon benches share: a real `plimsoll-host serve` on loopback.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

/// The bearer token every bench daemon accepts.
pub const TOKEN: &str = "bench-token-bench-token-bench-token-0123";

/// The binary under bench.
pub fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_plimsoll-host"))
}

/// A running daemon, killed and reaped however the bench ends, so no zombie outlives it.
pub struct Daemon(Child);

impl Daemon {
    /// The daemon's process ID.
    #[allow(dead_code, reason = "not every bench reads it")]
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A process's resident set in KiB, from /proc.
#[allow(dead_code, reason = "not every bench reads it")]
pub fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// A process's peak resident set in KiB, from /proc.
#[allow(dead_code, reason = "not every bench reads it")]
pub fn peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM")
}

/// A `kB` field of `/proc/PID/status`.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/{pid}/status"))
}

/// Starts `serve` with `env` on an ephemeral loopback port (the shared token, no
/// metrics listener, no rate limit, JSON log), waits until it listens, and returns
/// it with its base URL. Panics with the log line when startup is refused.
pub fn serve(env: &[(&str, &str)]) -> (Daemon, String) {
    let mut cmd = host();
    cmd.arg("serve")
        .env("PLIMSOLL_TOKEN", TOKEN)
        .env("PLIMSOLL_ADDR", "127.0.0.1:0")
        .env("PLIMSOLL_METRICS_ADDR", "off")
        .env("SANDBOX_RATE_PER_MIN", "0")
        .env("PLIMSOLL_LOG_FORMAT", "json");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut daemon = Daemon(cmd.stderr(Stdio::piped()).spawn().expect("serve"));
    let mut lines = BufReader::new(daemon.0.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = lines.next().expect("the daemon exited").expect("log line");
        if line.contains(r#""msg":"listening""#) {
            let v: serde_json::Value = serde_json::from_str(&line).expect("json");
            break v["addr"].as_str().expect("addr").to_string();
        }
        assert!(!line.contains("startup refused"), "{line}");
    };
    // Keep draining the audit log so the daemon never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (daemon, format!("http://{addr}"))
}
