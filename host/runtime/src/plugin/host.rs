//! What a plugin's imports do: the host's side of `plimsoll:host`.
//!
//! Every container call goes through the [`Wall`]: the spec becomes an engine
//! create body only through [`plimsoll_containers::Lockdown`], which refuses any
//! body that breaks an invariant, and the host remembers each container a call
//! created (to remove it when the call ends, and to derive the tier from the
//! runtime it really used).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use plimsoll_containers::engine::Started;
use plimsoll_containers::{
    Engine, EngineError, ExecOutcome, Launched, Lockdown, PoolStats, Reaper, ReplyEnd, Resident, Spec, Tmpfs, WarmPool,
    Watch,
};
use plimsoll_core::Tier;
use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::Capability;

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        world: "plimsoll:provider/provider-plugin",
        path: ["../../wit/types", "../../wit/host", "../../wit/provider"],
        with: {
            "plimsoll:host/containers.container": super::ContainerRep,
            "plimsoll:host/http.incoming": super::super::http::Incoming,
        },
    });
}

use bindings::plimsoll::host::{config, containers, http, log};

/// The container wall a plugin works behind: the local engine, the lockdown proven
/// at startup, and the tier each proven runtime justifies.
#[derive(Debug)]
pub struct Wall {
    engine: Engine,
    lockdown: Lockdown,
    tiers: BTreeMap<String, Tier>,
    healthy: AtomicBool,
    pool: Option<WarmPool>,
    /// Removes finished runs' containers, and what the pool lets go, off the runs' path.
    reaper: Arc<Reaper>,
    /// The engine's events, which spare sessions a read-back when nothing changed.
    watch: Watch,
    rt: Option<tokio::runtime::Runtime>,
}

/// How long shutting a wall down may wait for its removals.
const SHUTDOWN_REMOVALS: Duration = Duration::from_secs(20);

impl Wall {
    /// A wall over `engine` with a proven `lockdown`; `tiers` maps each proven
    /// runtime to the tier it justifies (`runc` container, `runsc` kernel). The
    /// runtime `rt` drives the engine's I/O from the plugin's blocking calls.
    pub fn new(engine: Engine, lockdown: Lockdown, tiers: BTreeMap<String, Tier>, rt: tokio::runtime::Runtime) -> Wall {
        let reaper = Arc::new(Reaper::new(engine.clone(), rt.handle().clone()));
        let watch = Watch::start(engine.clone(), rt.handle());
        Wall { engine, lockdown, tiers, healthy: AtomicBool::new(true), pool: None, reaper, watch, rt: Some(rt) }
    }

    /// The wall with a warm pool of `size` containers per shape (0: none).
    pub fn with_warm_pool(mut self, size: u32) -> Wall {
        if size > 0 {
            let (engine, lockdown, reaper) = (self.engine.clone(), self.lockdown.clone(), Arc::clone(&self.reaper));
            let pool = WarmPool::start(engine, lockdown, size, &self.handle(), reaper);
            self.pool = Some(pool);
        }
        self
    }

    /// What the warm pool holds and has done; None without a pool.
    pub fn pool_stats(&self) -> Option<PoolStats> {
        self.pool.as_ref().map(WarmPool::stats)
    }

    /// A started container of `spec` whose main process said `ready_word` (it
    /// waits on stdin): a pooled one when the pool has one of this shape, else one
    /// created and started now.
    async fn launch(&self, spec: &Spec, ready_word: &[u8]) -> Result<(String, Launched), EngineError> {
        if let Some(pool) = &self.pool
            && let Some(claimed) = pool.claim(spec, ready_word, now_unix()).await
        {
            return Ok(claimed);
        }
        let within = plimsoll_containers::pool::READY_WITHIN;
        self.engine.launch_new(&self.lockdown, spec, ready_word, within, now_unix()).await
    }

    /// Runs a future on the wall's runtime, from a thread that is not async.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        match &self.rt {
            Some(rt) => rt.block_on(f),
            None => unreachable!("the wall's runtime is taken only in drop"),
        }
    }

    /// A handle on the wall's runtime (it serves granted runs' broker sockets).
    pub fn handle(&self) -> tokio::runtime::Handle {
        match &self.rt {
            Some(rt) => rt.handle().clone(),
            None => unreachable!("the wall's runtime is taken only in drop"),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine's event stream, followed since the wall was made.
    pub fn watch(&self) -> &Watch {
        &self.watch
    }

    /// The lockdown in force.
    pub fn lockdown(&self) -> &Lockdown {
        &self.lockdown
    }

    /// The tier a runtime justifies now: none while a re-check is failing.
    pub fn tier_of(&self, runtime: &str) -> Tier {
        if !self.healthy.load(Ordering::Relaxed) {
            return Tier::None;
        }
        self.tiers.get(runtime).copied().unwrap_or(Tier::None)
    }

    /// Whether the last re-check passed.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Re-checks what startup proved (the runtimes are still registered, each
    /// proven image still exists with the same ID) and sweeps expired containers.
    /// A failure lowers every tier to none until a later re-check passes.
    ///
    /// # Errors
    ///
    /// What failed, for the log.
    pub fn recheck(&self) -> Result<Vec<String>, String> {
        let result = self.block_on(async {
            let runtimes = self.engine.runtimes().await.map_err(|e| e.to_string())?;
            for r in self.tiers.keys() {
                if !runtimes.contains(r) {
                    return Err(format!("the engine no longer lists runtime {r}"));
                }
            }
            for id in self.lockdown.images.keys() {
                let facts = self.engine.image(id).await.map_err(|e| format!("image {id}: {e}"))?;
                if &facts.id != id {
                    return Err(format!("image {id} now resolves to {}", facts.id));
                }
            }
            self.engine.sweep(now_unix()).await.map_err(|e| e.to_string())
        });
        self.healthy.store(result.is_ok(), Ordering::Relaxed);
        result
    }
}

impl Drop for Wall {
    fn drop(&mut self) {
        let Some(rt) = self.rt.take() else { return };
        if let Some(pool) = self.pool.take() {
            pool.close();
        }
        let reaper = Arc::clone(&self.reaper);
        // The pool's containers and pending removals need the runtime to go; a
        // thread of its own may block on it from any context, async included.
        let finish = std::thread::spawn(move || {
            rt.block_on(async {
                if tokio::time::timeout(SHUTDOWN_REMOVALS, reaper.drain()).await.is_err() {
                    eprintln!("shutting down: container removals are still running; the orphan sweep will finish them");
                }
            });
            rt.shutdown_background();
        });
        let _ = finish.join();
    }
}

pub(crate) use plimsoll_containers::now_unix;

/// A container as the plugin holds it.
#[derive(Debug)]
pub struct ContainerRep {
    id: String,
    user: u32,
    launched: Option<Launched>,
    started: Option<Started>,
    /// A served container's attached main process.
    resident: Option<Resident>,
    /// The main process was waited for and ended: removal cannot cut a run short.
    ended: bool,
}

/// What a call used, as the host saw it.
#[derive(Debug, Default)]
pub(crate) struct Used {
    /// Runtimes of the containers the call created.
    pub runtimes: BTreeSet<String>,
    /// Images of the containers the call created.
    pub images: BTreeSet<String>,
    /// Requests that may change a remote backend (any method but GET and HEAD)
    /// the host let through: after one, the backend holds something of the run's.
    pub remote_writes: u32,
    /// Of those, the ones to an endpoint where code may start: after one, code
    /// may have run there.
    pub code_writes: u32,
}

impl Used {
    /// Whether anything the call did may have run code: a container created, or
    /// a request sent that may have changed a remote backend.
    pub fn may_have_run(&self) -> bool {
        !self.runtimes.is_empty() || self.code_writes > 0
    }
}

/// One plugin call's store.
pub(crate) struct PluginState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub name: String,
    pub approved: Vec<Capability>,
    pub wall: Option<Arc<Wall>>,
    pub deadline: Instant,
    /// When the call's outbound HTTP must be done: a remote plugin creates,
    /// reads back and deletes its sandbox around the run's budget.
    pub http_deadline: Instant,
    /// The most bytes kept per stream of any process this call runs.
    pub collect_cap: usize,
    pub used: Used,
    /// Containers created and not yet removed; removed when the store drops.
    pub live: BTreeSet<String>,
    /// The plugin's own memory cap.
    pub limits: wasmtime::StoreLimits,
    /// Outbound HTTP, when the operator configured endpoints.
    pub http: Option<Arc<super::http::HttpGate>>,
    /// The endpoints and headers the plugin's manifest names.
    pub allowed: super::http::Allowed,
    /// The run's broker mount: every container this call creates gets it.
    pub broker: Option<plimsoll_containers::BrokerMount>,
    /// The operator's settings for the plugin, and the host's facts it needs.
    pub settings: Arc<BTreeMap<String, String>>,
    /// For a remote plugin: its book, and this call's number in it.
    pub book: Option<(Arc<super::book::Book>, u64)>,
    /// The guard credentials this call's plugin holds, redacted from its log lines.
    pub secrets: Vec<String>,
    /// The run's broker socket, for a call whose grant the host relays in.
    pub relay_to: Option<std::path::PathBuf>,
    /// The relay streams this call holds; they end with it.
    pub relays: super::http::Relays,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl Drop for PluginState {
    fn drop(&mut self) {
        if let (Some((book, call)), Some(gate)) = (&self.book, &self.http) {
            book.end(*call, |t| gate.holds(t));
        }
        if let Some(wall) = &self.wall {
            for id in std::mem::take(&mut self.live) {
                if let Err(e) = wall.block_on(wall.engine.remove(&id)) {
                    eprintln!(
                        "plugin {}: removing container {id} failed ({e}); the orphan sweep will retry",
                        self.name
                    );
                }
            }
        }
    }
}

/// What a plugin that runs nothing (a signer, a broker) is given for one call: the
/// outbound HTTP gate, its manifest's endpoints, and no container wall.
pub(crate) struct HttpOnly<'a> {
    pub name: &'a str,
    pub approved: &'a [Capability],
    pub http: Option<Arc<super::http::HttpGate>>,
    pub allowed: &'a super::http::Allowed,
    /// The call's budget.
    pub budget: Duration,
    /// The plugin's memory, in bytes.
    pub memory: usize,
}

impl HttpOnly<'_> {
    /// A fresh store for one call, its memory capped and its deadline set.
    pub(crate) fn store(self, engine: &crate::engine::Engine) -> wasmtime::Store<PluginState> {
        let state = PluginState {
            wasi: wasmtime_wasi::WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
            name: self.name.to_string(),
            approved: self.approved.to_vec(),
            wall: None,
            deadline: Instant::now() + self.budget,
            http_deadline: Instant::now() + self.budget,
            collect_cap: 0,
            used: Used::default(),
            live: BTreeSet::new(),
            limits: wasmtime::StoreLimitsBuilder::new().memory_size(self.memory).build(),
            http: self.http,
            allowed: self.allowed.clone(),
            broker: None,
            settings: Arc::default(),
            book: None,
            secrets: Vec::new(),
            relay_to: None,
            relays: super::http::Relays::default(),
        };
        let mut store = wasmtime::Store::new(engine.wasmtime(), state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(crate::engine::Engine::deadline_ticks(self.budget));
        store
    }
}

impl PluginState {
    fn wall(&self) -> Result<Arc<Wall>, String> {
        if !self.approved.contains(&Capability::Containers) {
            return Err("the containers capability is not approved for this plugin".into());
        }
        self.wall.clone().ok_or_else(|| "no container engine is configured on this host".into())
    }

    /// What is left of the call's budget, at most `asked`.
    fn budget(&self, asked_ms: u32) -> Duration {
        Duration::from_millis(u64::from(asked_ms)).min(self.deadline.saturating_duration_since(Instant::now()))
    }

    fn rep(&self, c: &Resource<ContainerRep>) -> Result<&ContainerRep, String> {
        self.table.get(c).map_err(|e| format!("unknown container handle: {e}"))
    }
}

fn outcome(o: ExecOutcome, max: usize) -> containers::ExecResult {
    let cut = |mut v: Vec<u8>, flagged: bool| {
        let over = v.len() > max;
        v.truncate(max);
        (v, flagged || over)
    };
    let (stdout, stdout_truncated) = cut(o.stdout, o.stdout_truncated);
    let (stderr, stderr_truncated) = cut(o.stderr, o.stderr_truncated);
    containers::ExecResult {
        exit_code: o.exit_code,
        timed_out: o.timed_out,
        oom_killed: o.oom_killed,
        stdout,
        stdout_truncated,
        stderr,
        stderr_truncated,
    }
}

impl containers::Host for PluginState {
    fn runtimes(&mut self) -> Vec<String> {
        self.wall().map(|w| w.lockdown.runtimes.iter().cloned().collect()).unwrap_or_default()
    }

    fn images(&mut self) -> Vec<(String, String)> {
        self.wall()
            .map(|w| w.lockdown.images.iter().map(|(id, name)| (id.clone(), name.clone())).collect())
            .unwrap_or_default()
    }
}

impl PluginState {
    /// The host's spec for a plugin's, with the run's broker mount.
    fn spec(&self, spec: containers::Spec) -> Spec {
        Spec {
            image_id: spec.image_id,
            runtime: spec.runtime,
            user: spec.user,
            memory_mb: spec.memory_mb,
            cpus_milli: spec.cpus_milli,
            pids: spec.pids,
            tmpfs: spec.tmpfs.into_iter().map(|m| Tmpfs { target: m.target, size_mb: m.size_mb }).collect(),
            workdir: spec.workdir,
            command: spec.command,
            env: spec.env,
            labels: spec.labels,
            lifetime_s: spec.lifetime_s,
            broker: self.broker.clone(),
        }
    }

    /// Hands the plugin a container the host now holds for this call.
    fn hold(&mut self, id: String, spec: &Spec, launched: Option<Launched>) -> Result<Resource<ContainerRep>, String> {
        self.live.insert(id.clone());
        self.used.runtimes.insert(spec.runtime.clone());
        self.used.images.insert(spec.image_id.clone());
        let rep = ContainerRep { id, user: spec.user, launched, started: None, resident: None, ended: false };
        self.table.push(rep).map_err(|e| e.to_string())
    }
}

/// The longest word a launched container may say to show it waits.
const MAX_READY_WORD: usize = 256;
/// The fewest bytes an end marker may have: fewer could be guessed by chance.
const MIN_END_BYTES: usize = 16;
/// Room past a stream's cap for a process's last words, so that output exactly at
/// the cap still ends with them; [`outcome`] cuts the stream to the cap after.
const LAST_WORDS_ROOM: usize = 256;

/// Refuses a ready word the host could not tell from nothing, or too long to wait for.
fn check_ready_word(word: &[u8]) -> Result<(), String> {
    if word.is_empty() || word.len() > MAX_READY_WORD {
        return Err(format!("a ready word of {} bytes: use 1 to {MAX_READY_WORD}", word.len()));
    }
    Ok(())
}

/// Refuses an end marker short enough to be guessed.
fn check_end(end: &[u8]) -> Result<(), String> {
    if end.len() < MIN_END_BYTES {
        return Err(format!("an end marker of {} bytes is guessable; use {MIN_END_BYTES} or more", end.len()));
    }
    Ok(())
}

impl PluginState {
    fn wait_on(
        &mut self,
        c: Resource<ContainerRep>,
        end: Option<&[u8]>,
        timeout_ms: u32,
        max_output: u32,
    ) -> Result<containers::ExecResult, String> {
        let wall = self.wall()?;
        let timeout = self.budget(timeout_ms);
        let cap = (max_output as usize).min(self.collect_cap);
        let rep = self.table.get_mut(&c).map_err(|e| e.to_string())?;
        let started = rep.started.take().ok_or("the container was not started")?;
        let id = rep.id.clone();
        let o = wall.block_on(wall.engine.wait(&id, started, timeout, end)).map_err(|e| e.to_string())?;
        self.table.get_mut(&c).map_err(|e| e.to_string())?.ended = true;
        Ok(outcome(o, cap))
    }
}

impl containers::HostContainer for PluginState {
    fn create(&mut self, spec: containers::Spec) -> Result<Resource<ContainerRep>, String> {
        let wall = self.wall()?;
        let spec = self.spec(spec);
        let id = wall.block_on(wall.engine.create(&wall.lockdown, &spec, now_unix())).map_err(|e| e.to_string())?;
        self.hold(id, &spec, None)
    }

    fn launch(&mut self, spec: containers::Spec, ready: Vec<u8>) -> Result<Resource<ContainerRep>, String> {
        let wall = self.wall()?;
        let spec = self.spec(spec);
        check_ready_word(&ready)?;
        let (id, launched) = wall.block_on(wall.launch(&spec, &ready)).map_err(|e| e.to_string())?;
        self.hold(id, &spec, Some(launched))
    }

    fn serve(&mut self, spec: containers::Spec, ready: Vec<u8>) -> Result<Resource<ContainerRep>, String> {
        let wall = self.wall()?;
        let spec = self.spec(spec);
        check_ready_word(&ready)?;
        let within = plimsoll_containers::pool::READY_WITHIN;
        let (id, launched) = wall
            .block_on(wall.engine.launch_new(&wall.lockdown, &spec, &ready, within, now_unix()))
            .map_err(|e| e.to_string())?;
        let c = self.hold(id, &spec, None)?;
        self.table.get_mut(&c).map_err(|e| e.to_string())?.resident = Some(Resident::new(launched));
        Ok(c)
    }

    fn converse(
        &mut self,
        c: Resource<ContainerRep>,
        send: Vec<u8>,
        end: Vec<u8>,
        timeout_ms: u32,
        max_output: u32,
    ) -> Result<containers::Reply, String> {
        check_end(&end)?;
        let wall = self.wall()?;
        let timeout = self.budget(timeout_ms);
        let cap = (max_output as usize).min(self.collect_cap);
        let rep = self.table.get_mut(&c).map_err(|e| e.to_string())?;
        let resident = rep.resident.as_mut().ok_or("the container was not started with serve")?;
        let r = wall.block_on(resident.converse(&send, &end, timeout, cap)).map_err(|e| e.to_string())?;
        Ok(containers::Reply {
            end: match r.end {
                ReplyEnd::Said => containers::ReplyEnd::Said,
                ReplyEnd::TimedOut => containers::ReplyEnd::TimedOut,
                ReplyEnd::Ended => containers::ReplyEnd::Ended,
            },
            stdout: r.stdout,
            stdout_truncated: r.stdout_truncated,
            stderr: r.stderr,
            stderr_truncated: r.stderr_truncated,
        })
    }

    fn start(&mut self, c: Resource<ContainerRep>, stdin: Vec<u8>) -> Result<(), String> {
        let wall = self.wall()?;
        let cap = self.collect_cap.saturating_add(LAST_WORDS_ROOM);
        let rep = self.table.get_mut(&c).map_err(|e| e.to_string())?;
        let id = rep.id.clone();
        let started = match rep.launched.take() {
            Some(launched) => wall.block_on(async { launched.feed(stdin, cap) }),
            None => wall.block_on(wall.engine.start(&id, stdin, cap)).map_err(|e| e.to_string())?,
        };
        self.table.get_mut(&c).map_err(|e| e.to_string())?.started = Some(started);
        Ok(())
    }

    fn exec(
        &mut self,
        c: Resource<ContainerRep>,
        command: Vec<String>,
        stdin: Vec<u8>,
        timeout_ms: u32,
        max_output: u32,
    ) -> Result<containers::ExecResult, String> {
        let wall = self.wall()?;
        let rep = self.rep(&c)?;
        let (id, user) = (rep.id.clone(), rep.user);
        let cap = (max_output as usize).min(self.collect_cap);
        let timeout = self.budget(timeout_ms);
        let o = wall.block_on(wall.engine.exec(&id, user, command, stdin, timeout, cap)).map_err(|e| e.to_string())?;
        Ok(outcome(o, cap))
    }

    fn wait(
        &mut self,
        c: Resource<ContainerRep>,
        timeout_ms: u32,
        max_output: u32,
    ) -> Result<containers::ExecResult, String> {
        self.wait_on(c, None, timeout_ms, max_output)
    }

    fn wait_for_end(
        &mut self,
        c: Resource<ContainerRep>,
        end: Vec<u8>,
        timeout_ms: u32,
        max_output: u32,
    ) -> Result<containers::ExecResult, String> {
        check_end(&end)?;
        self.wait_on(c, Some(&end), timeout_ms, max_output)
    }

    fn inspect(&mut self, c: Resource<ContainerRep>) -> Result<containers::Inspection, String> {
        let wall = self.wall()?;
        let id = self.rep(&c)?.id.clone();
        let i = wall.block_on(wall.engine.inspect(&id)).map_err(|e| e.to_string())?;
        Ok(containers::Inspection {
            image_id: i.image_id,
            runtime: i.runtime,
            read_only_root: i.read_only_root,
            network: i.network,
            mounts: i.mounts,
            memory_mb: i.memory_mb,
            pids: i.pids,
            running: i.running,
            paused: i.paused,
        })
    }

    fn pause(&mut self, c: Resource<ContainerRep>) -> Result<(), String> {
        let wall = self.wall()?;
        let id = self.rep(&c)?.id.clone();
        wall.block_on(wall.engine.pause(&id)).map_err(|e| e.to_string())
    }

    fn unpause(&mut self, c: Resource<ContainerRep>) -> Result<(), String> {
        let wall = self.wall()?;
        let id = self.rep(&c)?.id.clone();
        wall.block_on(wall.engine.unpause(&id)).map_err(|e| e.to_string())
    }

    fn remove(&mut self, c: Resource<ContainerRep>) {
        if let (Ok(wall), Ok(rep)) = (self.wall(), self.rep(&c)) {
            let id = rep.id.clone();
            if rep.ended {
                // Its run is over (the main process ended, or wrote its last words
                // and is ending): the forced removal kills whatever is left, and
                // the run's answer need not wait for it.
                wall.reaper.remove(id.clone());
                self.live.remove(&id);
            } else if wall.block_on(wall.engine.remove(&id)).is_ok() {
                self.live.remove(&id);
            }
        }
    }

    fn drop(&mut self, c: Resource<ContainerRep>) -> wasmtime::Result<()> {
        let rep = self.table.delete(c)?;
        if let Ok(wall) = self.wall()
            && self.live.contains(&rep.id)
            && wall.block_on(wall.engine.remove(&rep.id)).is_ok()
        {
            self.live.remove(&rep.id);
        }
        Ok(())
    }
}

impl PluginState {
    /// The gate and the ask for one of the plugin's requests, its time capped by
    /// the call's deadline.
    fn ask(&mut self, req: http::Request) -> Result<(Arc<super::http::HttpGate>, super::http::Ask), String> {
        if !self.approved.contains(&Capability::Http) {
            return Err("the http capability is not approved for this plugin".into());
        }
        let Some(gate) = &self.http else {
            return Err(format!(
                "endpoint {:?}: no HTTP endpoints are configured on this host; no request was sent",
                req.endpoint
            ));
        };
        let left = self.http_deadline.saturating_duration_since(Instant::now());
        let ask = super::http::Ask {
            endpoint: req.endpoint,
            target: req.target,
            method: req.method,
            path: req.path,
            headers: req.headers,
            body: req.body,
            timeout: Duration::from_millis(u64::from(req.timeout_ms)).min(left),
        };
        // Counted before sending: a request that fails on the way may still have
        // reached the backend.
        if !matches!(ask.method.as_str(), "GET" | "HEAD") && gate.admits(&self.allowed, &ask).is_ok() {
            self.used.remote_writes += 1;
            if self.allowed.runs_code(&ask.endpoint) {
                self.used.code_writes += 1;
            }
        }
        Ok((Arc::clone(gate), ask))
    }
}

impl PluginState {
    /// Opens `count` relay streams of `way` for the calling run's grant.
    fn relay_by(&mut self, req: http::Request, way: super::http::Way, count: u32) -> Result<(), String> {
        let Some(broker) = self.relay_to.clone() else {
            return Err("this call holds no grant the host relays; no request was sent".into());
        };
        let (gate, ask) = self.ask(req)?;
        gate.relay(&mut self.relays, &self.allowed, ask, (way, count), broker)
    }
}

impl http::Host for PluginState {
    fn send(&mut self, req: http::Request) -> Result<http::Response, String> {
        let (gate, ask) = self.ask(req)?;
        let write = !matches!(ask.method.as_str(), "GET" | "HEAD");
        let book = self.book.clone();
        // A write's sandbox is booked before a sweep may list it.
        let _writing = book.as_ref().filter(|_| write).map(|(b, _)| b.writing());
        let a = gate.send(&self.allowed, ask)?;
        if let Some((book, call)) = &book {
            book.made(*call, &a.captured);
        }
        Ok(http::Response { status: a.status, headers: a.headers, body: a.body, trailers: a.trailers })
    }

    fn open(&mut self, req: http::Request) -> Result<Resource<super::http::Incoming>, String> {
        let (gate, ask) = self.ask(req)?;
        let incoming = gate.open(&self.allowed, ask)?;
        self.table.push(incoming).map_err(|e| format!("holding the stream: {e}"))
    }

    fn relay(&mut self, req: http::Request, field: u32, count: u32) -> Result<(), String> {
        self.relay_by(req, super::http::Way::Grpc(field), count)
    }

    fn relay_upgraded(&mut self, req: http::Request, protocol: String, count: u32) -> Result<(), String> {
        self.relay_by(req, super::http::Way::Upgrade(protocol), count)
    }

    fn relay_end(&mut self) {
        // Dropping them stops every stream, each logged as it ends.
        self.relays = super::http::Relays::default();
    }
}

impl http::HostIncoming for PluginState {
    fn status(&mut self, s: Resource<super::http::Incoming>) -> u16 {
        self.table.get(&s).map_or(0, |s| s.status)
    }

    fn headers(&mut self, s: Resource<super::http::Incoming>) -> Vec<(String, String)> {
        self.table.get(&s).map(|s| s.headers.clone()).unwrap_or_default()
    }

    fn read(&mut self, s: Resource<super::http::Incoming>, timeout_ms: u32) -> Result<Option<Vec<u8>>, String> {
        // The wait never outlasts the plugin call's own deadline.
        let left = self.http_deadline.saturating_duration_since(Instant::now());
        let wait = Duration::from_millis(u64::from(timeout_ms)).min(left);
        let stream = self.table.get_mut(&s).map_err(|e| format!("no such stream: {e}"))?;
        stream.read(wait)
    }

    fn trailers(&mut self, s: Resource<super::http::Incoming>) -> Vec<(String, String)> {
        self.table.get(&s).map(super::http::Incoming::trailers).unwrap_or_default()
    }

    fn drop(&mut self, s: Resource<super::http::Incoming>) -> wasmtime::Result<()> {
        self.table.delete(s)?;
        Ok(())
    }
}

impl config::Host for PluginState {
    fn get(&mut self, key: String) -> Option<String> {
        self.settings.get(&key).cloned()
    }
}

impl log::Host for PluginState {
    fn info(&mut self, msg: String) {
        if self.approved.contains(&Capability::Log) {
            eprintln!("plugin {}: {}", self.name, self.redacted(&msg).escape_debug());
        }
    }

    fn warn(&mut self, msg: String) {
        if self.approved.contains(&Capability::Log) {
            eprintln!("plugin {} warning: {}", self.name, self.redacted(&msg).escape_debug());
        }
    }
}

impl PluginState {
    /// `msg` with every credential the call's gate attaches, and every guard
    /// credential the call holds, redacted.
    pub(super) fn redacted(&self, msg: &str) -> String {
        scrub(self.http.as_deref(), &self.secrets, msg)
    }
}

/// `msg` without what `gate` attaches and without any of `secrets`.
fn scrub(gate: Option<&super::http::HttpGate>, secrets: &[String], msg: &str) -> String {
    let msg = gate.map_or_else(|| msg.to_string(), |g| g.redact(msg));
    secrets.iter().filter(|s| !s.is_empty()).fold(msg, |m, s| m.replace(s.as_str(), "[redacted]"))
}

impl bindings::plimsoll::types::types::Host for PluginState {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_without_a_relayed_grant_opens_no_relay_stream() {
        let engine = crate::engine::Engine::new(&crate::engine::EngineConfig::default()).expect("engine");
        let gate = super::super::http::HttpGate::new(BTreeMap::from([(
            "gw".to_string(),
            super::super::http::Endpoint { base: "https://127.0.0.1:9".into(), ..Default::default() },
        )]))
        .expect("gate");
        let allowed = super::super::http::Allowed { endpoints: vec!["gw".into()], ..Default::default() };
        let mut store = HttpOnly {
            name: "openshell",
            approved: &[Capability::Http],
            http: Some(Arc::new(gate)),
            allowed: &allowed,
            budget: Duration::from_secs(5),
            memory: 1 << 20,
        }
        .store(&engine);
        let req = http::Request {
            endpoint: "gw".into(),
            target: None,
            method: "POST".into(),
            path: "/svc/Forward".into(),
            headers: vec![],
            body: vec![],
            timeout_ms: 1000,
        };
        let e = http::Host::relay(store.data_mut(), req, 2, 1).expect_err("refused");
        assert_eq!(e, "this call holds no grant the host relays; no request was sent");
        assert!(store.data().relays.is_empty());
    }

    #[test]
    fn a_plugins_log_line_loses_every_guard_credential_its_call_holds() {
        let held = ["crg_aaaa".to_string(), "crg_bbbb".to_string(), String::new()];
        assert_eq!(
            scrub(None, &held, "rule crg_aaaa set; then crg_bbbb; crg_cccc is not ours"),
            "rule [redacted] set; then [redacted]; crg_cccc is not ours"
        );
        assert_eq!(scrub(None, &[], "nothing held"), "nothing held");
    }

    #[test]
    fn a_ready_word_must_be_there_and_short_and_an_end_marker_long() {
        assert_eq!(check_ready_word(b"plimsoll: waiting\n"), Ok(()));
        assert_eq!(check_ready_word(b""), Err("a ready word of 0 bytes: use 1 to 256".into()));
        assert_eq!(check_ready_word(&[b'w'; 257]), Err("a ready word of 257 bytes: use 1 to 256".into()));
        assert_eq!(check_end(&[b'e'; 16]), Ok(()));
        assert_eq!(check_end(b"short"), Err("an end marker of 5 bytes is guessable; use 16 or more".into()));
    }
}
