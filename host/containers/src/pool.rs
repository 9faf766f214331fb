//! The warm pool: containers created, started and read back ahead of the runs
//! that will use them, so a run does not wait for the engine to make one.
//!
//! A pooled container is made exactly as a run's own would be (the same spec,
//! through the same lockdown), and its main process waits on stdin, which the
//! pool holds open. A claim hands a container to exactly one run and forgets it:
//! the run removes it when it ends, and the pool makes a replacement in the
//! background. Before a claim returns a container, the pool reads it back and
//! compares it with the read-back taken when it was made; one that changed,
//! stopped, froze, or idled past [`IDLE_MAX`] is removed and never handed out.
//!
//! The pool keeps `size` containers for each *shape* it has been asked for (a spec
//! with everything but its lifetime label fixed), at most [`MAX_SHAPES`] shapes,
//! the least recently claimed dropped first. It learns a shape on its first miss
//! and forgets one no run asked for in [`IDLE_MAX`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::engine::{Engine, Inspection, Launched, QUIET, Reaper, remove_or_log};
use crate::lockdown::{Lockdown, Spec};

/// The most containers a pool keeps per shape (`SANDBOX_WARM_POOL`).
pub const MAX_SIZE: u32 = 64;
/// The most shapes a pool keeps containers for.
pub const MAX_SHAPES: usize = 4;
/// How long a pooled container may wait for a run before it is replaced.
pub const IDLE_MAX: Duration = Duration::from_secs(600);
/// How often the filler looks for containers idle past [`IDLE_MAX`].
const TIDY_EVERY: Duration = Duration::from_secs(30);
/// How long a new container's main process may take to say it waits.
pub const READY_WITHIN: Duration = Duration::from_secs(60);
/// The longest pause after failed fills.
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The most containers the filler makes at once, across shapes. A burst of claims
/// empties a shape faster than one make at a time refills it; more than a few at
/// once only queue inside the engine (each create and start takes its locks).
pub const MAKING_MAX: usize = 4;

/// What a pool has done since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Containers ready for a claim now.
    pub ready: u64,
    /// Containers the pool aims to hold: its size for each shape it keeps.
    pub wanted: u64,
    /// Containers being made now (at most [`MAKING_MAX`]).
    pub making: u64,
    /// Claims answered with a pooled container.
    pub hits: u64,
    /// Claims the pool could not answer (the run made its own container).
    pub misses: u64,
    /// Pooled containers removed at a claim because their read-back failed.
    pub rejected: u64,
    /// Containers the filler failed to make.
    pub fill_failures: u64,
}

/// A container in the pool.
struct Warm {
    id: String,
    launched: Launched,
    /// Its lifetime label (unix seconds).
    expires: u64,
    made: Instant,
    at_fill: Inspection,
}

/// The containers kept for one shape.
struct Shape {
    spec: Spec,
    /// What its main process says on stdout once it waits.
    ready_word: Vec<u8>,
    ready: VecDeque<Warm>,
    /// Containers of this shape being made now: with `ready`, never above the size.
    making: usize,
    claimed: Instant,
}

#[derive(Default)]
struct State {
    shapes: Vec<Shape>,
    closed: bool,
    /// Containers being made now, across shapes (also for shapes dropped since).
    making: usize,
    /// Fills failed in a row, and when the filler may try again.
    failures: u32,
    paused_until: Option<Instant>,
}

impl State {
    /// The makes to start at `now`: a shape's turn comes round robin, while it has
    /// fewer than `size` ready and being made, and fewer than `limit` are being made
    /// in all; a shape claimed within [`QUIET`] that still has one ready waits (one
    /// with none ready is refilled at once).
    /// Each one returned is counted as being made. Also says when a waiting shape's
    /// quiet ends.
    fn start_makes(&mut self, size: usize, limit: usize, now: Instant) -> (Vec<(Spec, Vec<u8>)>, Option<Instant>) {
        let quiet_until = |s: &Shape| (!s.ready.is_empty()).then(|| s.claimed + QUIET).filter(|t| *t > now);
        let wake = self.shapes.iter().filter(|s| s.ready.len() + s.making < size).filter_map(quiet_until).min();
        let mut jobs = Vec::new();
        loop {
            let before = jobs.len();
            for shape in &mut self.shapes {
                if self.making >= limit {
                    return (jobs, wake);
                }
                if shape.ready.len() + shape.making < size && quiet_until(shape).is_none() {
                    shape.making += 1;
                    self.making += 1;
                    jobs.push((shape.spec.clone(), shape.ready_word.clone()));
                }
            }
            if jobs.len() == before {
                return (jobs, wake);
            }
        }
    }
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    rejected: AtomicU64,
    fill_failures: AtomicU64,
}

struct Shared {
    engine: Engine,
    lockdown: Lockdown,
    reaper: Arc<Reaper>,
    size: usize,
    state: Mutex<State>,
    wake: Notify,
    counters: Counters,
}

/// Whether two specs make interchangeable containers: equal in all but the lifetime
/// label, and neither holds a grant (a broker mount belongs to one run).
fn same_spec(a: &Spec, b: &Spec) -> bool {
    a.broker.is_none()
        && b.broker.is_none()
        && Spec { lifetime_s: 0, ..a.clone() } == Spec { lifetime_s: 0, ..b.clone() }
}

/// Why a pooled container may not be handed out, in words; None when it may.
fn unfit(w: &Warm, seen: &Inspection, spec: &Spec, now_unix: u64) -> Option<String> {
    if !seen.running || seen.paused {
        return Some(format!("its main process is not waiting (running {}, paused {})", seen.running, seen.paused));
    }
    if let Some(change) = seen.changes_from(&w.at_fill) {
        return Some(format!("it changed since it was made: {change}"));
    }
    if w.expires < now_unix.saturating_add(u64::from(spec.lifetime_s)) {
        return Some("its lifetime label ends before this run's would".into());
    }
    if w.made.elapsed() > IDLE_MAX {
        return Some(format!("it waited longer than {} s", IDLE_MAX.as_secs()));
    }
    None
}

/// The warm pool of one container wall.
#[derive(Clone)]
pub struct WarmPool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for WarmPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPool").field("size", &self.shared.size).field("stats", &self.stats()).finish()
    }
}

impl WarmPool {
    /// A pool of `size` containers per shape (1..=[`MAX_SIZE`]) made by `engine`
    /// under `lockdown`; its filler runs on `runtime` until [`WarmPool::close`], and
    /// what it lets go is removed by `reaper`.
    pub fn start(
        engine: Engine,
        lockdown: Lockdown,
        size: u32,
        runtime: &tokio::runtime::Handle,
        reaper: Arc<Reaper>,
    ) -> WarmPool {
        let shared = Arc::new(Shared {
            engine,
            lockdown,
            reaper,
            size: size.clamp(1, MAX_SIZE) as usize,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            counters: Counters::default(),
        });
        runtime.spawn(fill(Arc::clone(&shared)));
        WarmPool { shared }
    }

    /// A started container of `spec`'s shape, whose main process said `ready_word`
    /// and whose read-back still matches the one taken when it was made, or None
    /// (a miss: the caller makes its own, and the pool starts keeping this shape).
    /// The container is the caller's from here on.
    pub async fn claim(&self, spec: &Spec, ready_word: &[u8], now_unix: u64) -> Option<(String, Launched)> {
        loop {
            let warm = {
                let mut st = self.shared.lock();
                if st.closed || spec.broker.is_some() {
                    return None;
                }
                let taken = match st.shapes.iter_mut().find(|s| same_spec(&s.spec, spec) && s.ready_word == ready_word)
                {
                    Some(shape) => {
                        shape.claimed = Instant::now();
                        shape.spec.lifetime_s = shape.spec.lifetime_s.max(spec.lifetime_s);
                        shape.ready.pop_front()
                    }
                    None => {
                        let evicted = learn(&mut st, spec, ready_word);
                        drop(st);
                        self.discard(evicted);
                        None
                    }
                };
                self.shared.wake.notify_one();
                match taken {
                    Some(w) => w,
                    None => {
                        self.shared.counters.misses.fetch_add(1, Ordering::Relaxed);
                        return None;
                    }
                }
            };
            let why = match self.shared.engine.inspect(&warm.id).await {
                Ok(seen) => unfit(&warm, &seen, spec, now_unix),
                Err(e) => Some(format!("reading it back failed: {e}")),
            };
            match why {
                None => {
                    self.shared.counters.hits.fetch_add(1, Ordering::Relaxed);
                    return Some((warm.id, warm.launched));
                }
                Some(why) => {
                    self.shared.counters.rejected.fetch_add(1, Ordering::Relaxed);
                    eprintln!("warm pool: container {} was not handed out and is removed: {why}", warm.id);
                    self.discard(vec![warm]);
                }
            }
        }
    }

    /// What the pool holds and has done.
    pub fn stats(&self) -> PoolStats {
        let c = &self.shared.counters;
        let (ready, shapes, making) = {
            let st = self.shared.lock();
            (st.shapes.iter().map(|s| s.ready.len() as u64).sum(), st.shapes.len() as u64, st.making as u64)
        };
        PoolStats {
            ready,
            wanted: shapes * self.shared.size as u64,
            making,
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            fill_failures: c.fill_failures.load(Ordering::Relaxed),
        }
    }

    /// Stops the filler and hands every container the pool holds to its reaper
    /// (whose `drain` then waits for their removal).
    pub fn close(&self) {
        let held: Vec<Warm> = {
            let mut st = self.shared.lock();
            st.closed = true;
            st.shapes.drain(..).flat_map(|s| s.ready).collect()
        };
        self.shared.wake.notify_one();
        self.discard(held);
    }

    fn discard(&self, gone: Vec<Warm>) {
        for w in gone {
            self.shared.reaper.remove(w.id);
        }
    }
}

/// Starts keeping `spec`'s shape, dropping the least recently claimed shape when
/// the pool keeps [`MAX_SHAPES`] already. Returns the dropped shape's containers.
fn learn(st: &mut State, spec: &Spec, ready_word: &[u8]) -> Vec<Warm> {
    let mut evicted = Vec::new();
    if st.shapes.len() >= MAX_SHAPES
        && let Some(oldest) = st.shapes.iter().enumerate().min_by_key(|(_, s)| s.claimed).map(|(i, _)| i)
    {
        evicted.extend(st.shapes.swap_remove(oldest).ready);
    }
    let shape = Shape {
        spec: spec.clone(),
        ready_word: ready_word.to_vec(),
        ready: VecDeque::new(),
        making: 0,
        claimed: Instant::now(),
    };
    st.shapes.push(shape);
    evicted
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Makes one container of `spec`'s shape: created under the lockdown with a
/// lifetime label that covers [`IDLE_MAX`] and the run, started, heard say
/// `ready_word` (its interpreter loaded and waiting), and read back.
async fn make(shared: &Shared, spec: &Spec, ready_word: &[u8]) -> Result<Warm, String> {
    let now = crate::now_unix();
    let idle = u32::try_from(IDLE_MAX.as_secs()).unwrap_or(u32::MAX);
    let pooled = Spec { lifetime_s: spec.lifetime_s.saturating_add(idle), ..spec.clone() };
    let (id, launched) = shared
        .engine
        .launch_new(&shared.lockdown, &pooled, ready_word, READY_WITHIN, now)
        .await
        .map_err(|e| e.to_string())?;
    let made = async {
        let at_fill = shared.engine.inspect(&id).await.map_err(|e| e.to_string())?;
        shared.lockdown.verify_read_back(spec, &at_fill)?;
        if !at_fill.running {
            return Err("its main process is not running after the start".into());
        }
        Ok(at_fill)
    };
    match made.await {
        Ok(at_fill) => {
            Ok(Warm { id, launched, expires: now + u64::from(pooled.lifetime_s), made: Instant::now(), at_fill })
        }
        Err(e) => {
            remove_or_log(&shared.engine, &id).await;
            Err(e)
        }
    }
}

/// The filler: keeps every shape at `size` ready containers, making up to
/// [`MAKING_MAX`] at once, replaces those idle past [`IDLE_MAX`], and backs off
/// after failures.
async fn fill(shared: Arc<Shared>) {
    loop {
        let (stale, jobs, pause) = {
            let mut st = shared.lock();
            if st.closed {
                return;
            }
            let mut stale = Vec::new();
            // A shape no run asked for in IDLE_MAX is forgotten (the smoke test's
            // shapes, for one, when no request shares them).
            let (kept, unused): (Vec<Shape>, Vec<Shape>) =
                std::mem::take(&mut st.shapes).into_iter().partition(|s| s.claimed.elapsed() <= IDLE_MAX);
            st.shapes = kept;
            stale.extend(unused.into_iter().flat_map(|s| s.ready));
            for shape in &mut st.shapes {
                while shape.ready.front().is_some_and(|w| w.made.elapsed() > IDLE_MAX) {
                    stale.extend(shape.ready.pop_front());
                }
            }
            let now = Instant::now();
            let mut pause = st.paused_until.and_then(|until| until.checked_duration_since(now));
            let jobs = if pause.is_some() {
                Vec::new()
            } else {
                let (jobs, quiet_until) = st.start_makes(shared.size, MAKING_MAX, now);
                pause = quiet_until.map(|t| t - now);
                jobs
            };
            (stale, jobs, pause)
        };
        for w in stale {
            remove_or_log(&shared.engine, &w.id).await;
        }
        for (spec, ready_word) in jobs {
            tokio::spawn(make_one(Arc::clone(&shared), spec, ready_word));
        }
        // A claim, a finished make or `close` wakes the filler; so does the tidy.
        let _ = tokio::time::timeout(pause.unwrap_or(TIDY_EVERY), shared.wake.notified()).await;
    }
}

/// Makes one container counted as being made for `spec`'s shape, and keeps it
/// there, or removes it when the pool closed or dropped the shape meanwhile.
async fn make_one(shared: Arc<Shared>, spec: Spec, ready_word: Vec<u8>) {
    let made = make(&shared, &spec, &ready_word).await;
    let (leftover, failed) = {
        let mut st = shared.lock();
        let closed = st.closed;
        st.making = st.making.saturating_sub(1);
        let at = st.shapes.iter().position(|s| same_spec(&s.spec, &spec) && s.ready_word == ready_word);
        if let Some(i) = at {
            st.shapes[i].making = st.shapes[i].making.saturating_sub(1);
        }
        match made {
            Ok(w) => {
                st.failures = 0;
                st.paused_until = None;
                match at {
                    Some(i) if !closed => {
                        st.shapes[i].ready.push_back(w);
                        (None, None)
                    }
                    // Closed, or the shape was dropped while this one was made.
                    _ => (Some(w), None),
                }
            }
            Err(e) => {
                st.failures = st.failures.saturating_add(1);
                let pause = Duration::from_secs(1u64 << st.failures.min(5)).min(BACKOFF_MAX);
                st.paused_until = Some(Instant::now() + pause);
                (None, Some((e, pause)))
            }
        }
    };
    if let Some((e, pause)) = failed {
        shared.counters.fill_failures.fetch_add(1, Ordering::Relaxed);
        eprintln!("warm pool: making a container failed ({e}); trying again in {} s", pause.as_secs());
    }
    if let Some(w) = leftover {
        remove_or_log(&shared.engine, &w.id).await;
    }
    shared.wake.notify_one();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lockdown::{BrokerMount, Tmpfs};

    fn spec() -> Spec {
        Spec {
            image_id: format!("sha256:{}", "a".repeat(64)),
            runtime: "runc".into(),
            user: 61000,
            memory_mb: 256,
            cpus_milli: 1000,
            pids: 256,
            tmpfs: vec![Tmpfs { target: "/tmp".into(), size_mb: 16 }],
            workdir: "/tmp".into(),
            command: vec!["node".into(), "-e".into(), "wait()".into()],
            env: Vec::new(),
            labels: Vec::new(),
            lifetime_s: 360,
            broker: None,
        }
    }

    #[test]
    fn a_shape_is_everything_but_the_lifetime_and_never_a_grant() {
        let a = spec();
        assert!(same_spec(&a, &Spec { lifetime_s: 900, ..a.clone() }));
        assert!(!same_spec(&a, &Spec { memory_mb: 512, ..a.clone() }));
        assert!(!same_spec(&a, &Spec { command: vec!["python3".into()], ..a.clone() }));
        assert!(!same_spec(&a, &Spec { runtime: "runsc".into(), ..a.clone() }));
        let granted = Spec { broker: Some(BrokerMount { dir: "/tmp/x".into(), env: Vec::new() }), ..a.clone() };
        assert!(!same_spec(&granted, &granted.clone()));
    }

    #[test]
    fn the_least_recently_claimed_shape_makes_room() {
        let mut st = State::default();
        for m in 0..MAX_SHAPES as u32 {
            assert!(learn(&mut st, &Spec { memory_mb: 100 + m, ..spec() }, b"w").is_empty());
        }
        st.shapes[0].claimed = Instant::now();
        learn(&mut st, &Spec { memory_mb: 999, ..spec() }, b"w");
        let kept: Vec<u32> = st.shapes.iter().map(|s| s.spec.memory_mb).collect();
        assert_eq!(kept.len(), MAX_SHAPES);
        assert!(kept.contains(&100) && kept.contains(&999) && !kept.contains(&101), "{kept:?}");
    }

    #[test]
    fn makes_start_round_robin_up_to_the_size_and_the_limit() {
        let mut st = State::default();
        learn(&mut st, &Spec { memory_mb: 100, ..spec() }, b"w");
        learn(&mut st, &Spec { memory_mb: 200, ..spec() }, b"w");
        let mb = |jobs: &[(Spec, Vec<u8>)]| jobs.iter().map(|(s, _)| s.memory_mb).collect::<Vec<_>>();
        let at = Instant::now();
        // Two empty shapes of size 3, four at once: each gets its turn in order.
        assert_eq!(mb(&st.start_makes(3, 4, at).0), [100, 200, 100, 200]);
        assert_eq!(st.making, 4);
        // The limit is reached: nothing more until a make ends.
        assert!(st.start_makes(3, 4, at).0.is_empty());
        st.shapes[0].making -= 1;
        st.making -= 1;
        assert_eq!(mb(&st.start_makes(3, 4, at).0), [100]);
        // What is being made counts toward the size: never more than 3 per shape.
        assert_eq!(mb(&st.start_makes(3, 8, at).0), [100, 200]);
        assert_eq!(st.shapes.iter().map(|s| s.making).collect::<Vec<_>>(), [3, 3]);
        assert!(st.start_makes(3, 8, at).0.is_empty());
        // A shape dropped while its three makes run: they still count toward the
        // limit until they end.
        st.shapes.remove(1);
        st.shapes[0].making = 0;
        st.making -= 3;
        assert_eq!(mb(&st.start_makes(3, 4, at).0), [100]);
    }

    #[test]
    fn a_shape_with_containers_ready_waits_out_a_burst_before_it_refills() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let mut st = State::default();
        learn(&mut st, &spec(), b"w");
        let claimed = Instant::now();
        st.shapes[0].claimed = claimed;
        st.shapes[0].ready.push_back(Warm {
            id: "c".into(),
            launched: rt.block_on(fake_launched()),
            expires: 0,
            made: claimed,
            at_fill: seen(),
        });
        // One of three ready, claimed just now: no make until the quiet ends.
        let (jobs, wake) = st.start_makes(3, 4, claimed + QUIET / 2);
        assert!(jobs.is_empty());
        assert_eq!(wake, Some(claimed + QUIET));
        let (jobs, wake) = st.start_makes(3, 4, claimed + QUIET);
        assert_eq!((jobs.len(), wake), (2, None));
        // None ready: refilled at once, however recent the claim.
        let mut empty = State::default();
        learn(&mut empty, &spec(), b"w");
        empty.shapes[0].claimed = claimed;
        assert_eq!(empty.start_makes(3, 4, claimed).0.len(), 3);
    }

    use crate::engine::tests::inspection as seen;

    #[test]
    fn a_changed_stopped_frozen_or_short_lived_container_is_unfit_and_named() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        // A Launched needs a real attach; the checks read only the other fields.
        let check = |seen: &Inspection, expires: u64, made: Instant| -> Option<String> {
            let w =
                Warm { id: "c".into(), launched: rt.block_on(fake_launched()), expires, made, at_fill: self::seen() };
            unfit(&w, seen, &spec(), 1000)
        };
        let now = Instant::now();
        assert_eq!(check(&seen(), 1360, now), None);
        let stopped = Inspection { running: false, ..seen() };
        assert_eq!(
            check(&stopped, 1360, now).as_deref(),
            Some("its main process is not waiting (running false, paused false)")
        );
        let frozen = Inspection { paused: true, ..seen() };
        assert_eq!(
            check(&frozen, 1360, now).as_deref(),
            Some("its main process is not waiting (running true, paused true)")
        );
        let grown = Inspection { memory_mb: 4096, ..seen() };
        assert_eq!(
            check(&grown, 1360, now).as_deref(),
            Some("it changed since it was made: memory limit \"256 MiB\" became \"4096 MiB\"")
        );
        assert_eq!(check(&seen(), 1359, now).as_deref(), Some("its lifetime label ends before this run's would"));
        if let Some(old) = now.checked_sub(IDLE_MAX + Duration::from_secs(1)) {
            assert_eq!(check(&seen(), 1360, old).as_deref(), Some("it waited longer than 600 s"));
        }
    }

    /// A `Launched` over an in-memory pipe, for checks that never feed it.
    async fn fake_launched() -> Launched {
        Launched::in_memory(Vec::new())
    }
}
