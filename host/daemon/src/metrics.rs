//! Prometheus counters, served on their own loopback listener.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use plimsoll_core::provider::Figure;

use crate::grants::Closed;

/// The daemon's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    runs: AtomicU64,
    failed: AtomicU64,
    shed_at_capacity: AtomicU64,
    shed_per_key: AtomicU64,
    shed_rate: AtomicU64,
    refused: AtomicU64,
    grants: Mutex<GrantCounts>,
}

/// Brokered calls and findings, by label. Profiles and route templates are the
/// operator's; nothing a guest chose becomes a label.
#[derive(Debug, Default)]
struct GrantCounts {
    /// (profile, method, route) -> calls that matched.
    calls: BTreeMap<(String, String, String), u64>,
    /// profile -> calls the broker refused.
    denied: BTreeMap<String, u64>,
    /// profile -> calls shed while the upstream's circuit was open.
    shed: BTreeMap<String, u64>,
    /// (profile, pattern) -> findings.
    findings: BTreeMap<(String, String), u64>,
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

    /// A granted run or session call ended: its calls and findings.
    pub fn granted(&self, closed: &Closed) {
        let mut g = self.grants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let t = &closed.trace;
        for row in &t.calls {
            *g.calls.entry((closed.profile.clone(), row.method.as_str().into(), row.route.clone())).or_default() += 1;
        }
        *g.denied.entry(closed.profile.clone()).or_default() += u64::from(t.denied);
        *g.shed.entry(closed.profile.clone()).or_default() += u64::from(t.shed);
        for f in &closed.findings {
            *g.findings.entry((closed.profile.clone(), f.pattern.into())).or_default() += 1;
        }
    }

    /// The Prometheus text exposition, with `inflight` read from admission and the
    /// provider's own `figures` after the daemon's.
    pub fn render(&self, inflight: u32, figures: &[Figure]) -> String {
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
        let g = self.grants.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = writeln!(
            s,
            "# HELP plimsoll_host_calls_total Brokered calls that matched a granted route (rows past a trace's cap not counted).\n# TYPE plimsoll_host_calls_total counter"
        );
        for ((profile, method, route), n) in &g.calls {
            let _ = writeln!(
                s,
                "plimsoll_host_calls_total{{profile=\"{profile}\",method=\"{method}\",route=\"{route}\"}} {n}"
            );
        }
        for (name, help, map) in [
            ("plimsoll_host_calls_denied_total", "Brokered calls the broker refused.", &g.denied),
            ("plimsoll_host_calls_shed_total", "Brokered calls shed while the upstream's circuit was open.", &g.shed),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
            for (profile, n) in map {
                let _ = writeln!(s, "{name}{{profile=\"{profile}\"}} {n}");
            }
        }
        let _ = writeln!(
            s,
            "# HELP plimsoll_advice_findings_total Efficiency findings.\n# TYPE plimsoll_advice_findings_total counter"
        );
        for ((profile, pattern), n) in &g.findings {
            let _ = writeln!(s, "plimsoll_advice_findings_total{{profile=\"{profile}\",pattern=\"{pattern}\"}} {n}");
        }
        let mut described = std::collections::BTreeSet::new();
        for f in figures {
            if described.insert(f.name) {
                let kind = if f.counter { "counter" } else { "gauge" };
                let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}", name = f.name, help = f.help);
            }
            match f.label {
                Some((k, v)) => {
                    let _ = writeln!(s, "{}{{{k}=\"{v}\"}} {}", f.name, f.value);
                }
                None => {
                    let _ = writeln!(s, "{} {}", f.name, f.value);
                }
            }
        }
        s
    }
}
