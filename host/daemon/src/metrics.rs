//! Prometheus counters, served on their own loopback listener.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The daemon's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    runs: AtomicU64,
    failed: AtomicU64,
    shed_at_capacity: AtomicU64,
    shed_per_key: AtomicU64,
    shed_rate: AtomicU64,
    refused: AtomicU64,
}

impl Metrics {
    /// A run reached the provider.
    pub fn run(&self) {
        self.runs.fetch_add(1, Ordering::Relaxed);
    }

    /// A run failed after it may have started (infrastructure, not the guest).
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A request was refused before dispatch.
    pub fn refused(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Admission shed a run.
    pub fn shed(&self, label: &str) {
        let c = match label {
            "at_capacity" => &self.shed_at_capacity,
            "per_key" => &self.shed_per_key,
            _ => &self.shed_rate,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The Prometheus text exposition, with `inflight` read from admission.
    pub fn render(&self, inflight: u32) -> String {
        let mut s = String::new();
        let mut counter = |name: &str, help: &str, v: u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        counter("plimsoll_runs_total", "Runs dispatched to the provider.", self.runs.load(Ordering::Relaxed));
        counter(
            "plimsoll_runs_failed_total",
            "Runs that failed after they may have started.",
            self.failed.load(Ordering::Relaxed),
        );
        counter("plimsoll_refused_total", "Requests refused before dispatch.", self.refused.load(Ordering::Relaxed));
        let _ = writeln!(s, "# HELP plimsoll_shed_total Runs shed by admission.\n# TYPE plimsoll_shed_total counter");
        for (label, c) in
            [("at_capacity", &self.shed_at_capacity), ("per_key", &self.shed_per_key), ("rate", &self.shed_rate)]
        {
            let _ = writeln!(s, "plimsoll_shed_total{{reason=\"{label}\"}} {}", c.load(Ordering::Relaxed));
        }
        let _ = writeln!(
            s,
            "# HELP plimsoll_inflight Runs in flight.\n# TYPE plimsoll_inflight gauge\nplimsoll_inflight {inflight}"
        );
        s
    }
}
