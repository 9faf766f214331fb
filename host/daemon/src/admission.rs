//! Admission: concurrency across the daemon and per caller, and a per-caller rate.
//! It sheds, never queues: a run over a limit is refused (reason `capacity`, nothing
//! ran) and the caller may retry later or elsewhere.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::Admission;

/// Why a run was shed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Shed {
    /// Every daemon-wide slot is taken.
    #[error("sandbox is at capacity, retry shortly")]
    AtCapacity,
    /// The caller has its limit of runs in flight.
    #[error("per-caller concurrency limit reached ({0} in flight)")]
    PerKey(u32),
    /// The caller's rate bucket is empty.
    #[error("rate limit: {0} runs/min per caller")]
    Rate(u32),
}

impl Shed {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Shed::AtCapacity => "at_capacity",
            Shed::PerKey(_) => "per_key",
            Shed::Rate(_) => "rate",
        }
    }
}

/// How long a full, idle bucket is kept before it is forgotten.
const IDLE_EVICTION: Duration = Duration::from_secs(120);

#[derive(Debug)]
struct Caller {
    inflight: u32,
    tokens: f64,
    refilled: Instant,
}

/// The admission limiter.
#[derive(Debug)]
pub struct Limiter {
    cfg: Admission,
    inflight: AtomicU32,
    callers: Mutex<HashMap<String, Caller>>,
}

/// A held admission; dropping it returns the slots.
#[derive(Debug)]
pub struct Permit {
    limiter: Arc<Limiter>,
    caller: String,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.limiter.inflight.fetch_sub(1, Ordering::AcqRel);
        let mut callers = self.limiter.callers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = callers.get_mut(&self.caller) {
            c.inflight = c.inflight.saturating_sub(1);
        }
    }
}

impl Limiter {
    /// A limiter with these limits.
    pub fn new(cfg: Admission) -> Arc<Limiter> {
        Arc::new(Limiter { cfg, inflight: AtomicU32::new(0), callers: Mutex::new(HashMap::new()) })
    }

    /// Runs in flight now.
    pub fn inflight(&self) -> u32 {
        self.inflight.load(Ordering::Acquire)
    }

    /// Takes a daemon slot, a caller slot and a rate token, or none of them.
    ///
    /// # Errors
    ///
    /// [`Shed`] naming the limit that was reached.
    pub fn acquire(self: &Arc<Self>, caller: &str) -> Result<Permit, Shed> {
        let max = self.cfg.max_concurrent;
        if self.inflight.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).is_err() {
            return Err(Shed::AtCapacity);
        }
        let now = Instant::now();
        let mut callers = self.callers.lock().unwrap_or_else(|p| p.into_inner());
        if callers.len() > 1024 {
            let rate = self.cfg.rate_per_min;
            let burst = f64::from(self.cfg.rate_burst);
            callers.retain(|_, c| {
                c.inflight > 0 || refill(c, now, rate, burst) < burst || now - c.refilled < IDLE_EVICTION
            });
        }
        let c = callers.entry(caller.to_string()).or_insert_with(|| Caller {
            inflight: 0,
            tokens: f64::from(self.cfg.rate_burst),
            refilled: now,
        });
        let refused = if c.inflight >= self.cfg.per_key_concurrent {
            Some(Shed::PerKey(c.inflight))
        } else if self.cfg.rate_per_min > 0 {
            let tokens = refill(c, now, self.cfg.rate_per_min, f64::from(self.cfg.rate_burst));
            if tokens < 1.0 {
                Some(Shed::Rate(self.cfg.rate_per_min))
            } else {
                c.tokens = tokens - 1.0;
                c.refilled = now;
                None
            }
        } else {
            None
        };
        if let Some(shed) = refused {
            drop(callers);
            self.inflight.fetch_sub(1, Ordering::AcqRel);
            return Err(shed);
        }
        c.inflight += 1;
        Ok(Permit { limiter: Arc::clone(self), caller: caller.to_string() })
    }
}

/// The bucket's level at `now` (without storing it).
fn refill(c: &Caller, now: Instant, rate_per_min: u32, burst: f64) -> f64 {
    let added = now.saturating_duration_since(c.refilled).as_secs_f64() * f64::from(rate_per_min) / 60.0;
    (c.tokens + added).min(burst)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(max: u32, per_key: u32, rate: u32) -> Arc<Limiter> {
        Limiter::new(Admission {
            max_concurrent: max,
            per_key_concurrent: per_key,
            rate_per_min: rate,
            rate_burst: rate,
        })
    }

    #[test]
    fn the_daemon_wide_limit_sheds_and_releases() {
        let l = limiter(2, 2, 0);
        let a = l.acquire("a").expect("1");
        let _b = l.acquire("b").expect("2");
        assert_eq!(l.acquire("c").expect_err("full"), Shed::AtCapacity);
        drop(a);
        assert!(l.acquire("c").is_ok());
    }

    #[test]
    fn the_per_caller_limit_leaves_others_alone() {
        let l = limiter(8, 1, 0);
        let _a = l.acquire("a").expect("a");
        let e = l.acquire("a").expect_err("a twice");
        assert_eq!(e.to_string(), "per-caller concurrency limit reached (1 in flight)");
        let _b = l.acquire("b").expect("b");
        assert_eq!(l.inflight(), 2, "the refused attempt holds no slot");
    }

    #[test]
    fn the_rate_bucket_empties() {
        let l = limiter(8, 8, 3);
        for _ in 0..3 {
            drop(l.acquire("a").expect("within burst"));
        }
        assert_eq!(l.acquire("a").expect_err("empty").to_string(), "rate limit: 3 runs/min per caller");
        let _b = l.acquire("b").expect("another caller's bucket is full");
        assert_eq!(l.inflight(), 1);
    }
}
