//! The upstream's circuit: a 429 or 503 opens it for the `Retry-After` the
//! upstream asked for (clamped), and calls while it is open are shed instead of
//! sent. One caller a second may probe the health route of a 503 window; a window
//! that saw a 429 is never probed, since quota is not health.

use std::time::{Duration, Instant, SystemTime};

/// The shortest window.
pub const MIN_OPEN: Duration = Duration::from_secs(1);
/// The longest window.
pub const MAX_OPEN: Duration = Duration::from_secs(30);
/// How often one caller may probe.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// What a call may do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Closed: send it.
    Pass,
    /// Open: shed it.
    Shed,
    /// Open, and this caller probes the health route first.
    Probe,
}

/// One upstream's circuit.
#[derive(Debug, Default)]
pub struct Breaker {
    open_until: Option<Instant>,
    saw_429: bool,
    last_probe: Option<Instant>,
}

/// Reads `Retry-After`: delta-seconds or an HTTP date.
pub fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    httpdate::parse_http_date(v).ok().map(|at| at.duration_since(now).unwrap_or_default())
}

impl Breaker {
    /// Opens (or extends) the window after an upstream 429 or 503.
    pub fn trip(&mut self, status: u16, wait: Option<Duration>, now: Instant) {
        let wait = wait.unwrap_or(MIN_OPEN).clamp(MIN_OPEN, MAX_OPEN);
        if self.open_until.is_none_or(|t| t <= now) {
            self.saw_429 = false;
        }
        self.saw_429 |= status == 429;
        self.open_until = Some(self.open_until.map_or(now + wait, |t| t.max(now + wait)));
    }

    /// Closes the window (a probe came back 2xx).
    pub fn close(&mut self) {
        self.open_until = None;
        self.saw_429 = false;
    }

    /// Whether a call may go now; `probeable` says the profile has a health route.
    pub fn gate(&mut self, now: Instant, probeable: bool) -> Gate {
        match self.open_until {
            Some(t) if t > now => {
                if probeable && !self.saw_429 && self.last_probe.is_none_or(|p| now.duration_since(p) >= PROBE_EVERY) {
                    self.last_probe = Some(now);
                    Gate::Probe
                } else {
                    Gate::Shed
                }
            }
            _ => Gate::Pass,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(retry_after("7", now), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(12));
        assert_eq!(retry_after(&later, now), Some(Duration::from_secs(12)));
        assert_eq!(retry_after("soon", now), None);
    }

    #[test]
    fn a_window_is_clamped_sheds_and_ends() {
        let t0 = Instant::now();
        let mut b = Breaker::default();
        assert_eq!(b.gate(t0, false), Gate::Pass);
        b.trip(503, Some(Duration::from_secs(3600)), t0);
        assert_eq!(b.gate(t0 + Duration::from_secs(29), false), Gate::Shed);
        assert_eq!(b.gate(t0 + MAX_OPEN, false), Gate::Pass, "clamped to 30 s");
        b.trip(503, Some(Duration::ZERO), t0);
        assert_eq!(b.gate(t0 + Duration::from_millis(999), false), Gate::Shed, "at least 1 s");
    }

    #[test]
    fn one_probe_a_second_for_a_503_window_none_after_a_429() {
        let t0 = Instant::now();
        let mut b = Breaker::default();
        b.trip(503, Some(Duration::from_secs(10)), t0);
        assert_eq!(b.gate(t0, true), Gate::Probe);
        assert_eq!(b.gate(t0 + Duration::from_millis(500), true), Gate::Shed);
        assert_eq!(b.gate(t0 + Duration::from_secs(1), true), Gate::Probe);
        b.trip(429, Some(Duration::from_secs(10)), t0 + Duration::from_secs(1));
        assert_eq!(b.gate(t0 + Duration::from_secs(5), true), Gate::Shed, "quota is not health");
        b.close();
        assert_eq!(b.gate(t0 + Duration::from_secs(5), true), Gate::Pass);
    }
}
