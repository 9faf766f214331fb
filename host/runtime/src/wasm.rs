//! The built-in `wasm` provider: the QuickJS guest component on wasmtime, in the
//! host process, at the `process` tier.
//!
//! Each run gets a fresh store (instantiated from one `InstancePre` through the
//! pooling allocator), a memory limit, an epoch deadline and capped output. Nothing
//! a run does survives it.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use plimsoll_core::limits::OUTPUT_CAP_BYTES;
use plimsoll_core::provider::{
    self, Description, Evidence, Grant, GrantSupport, HostAnswer, HostApi, KindSupport, Provider, Ran, RunError,
    SessionReach, Snippet,
};
use plimsoll_core::session::{Answered, Call, CallError, Ending, Opened, Output, Session};
use plimsoll_core::validate::Language;
use plimsoll_core::wire::SessionEnd;
use plimsoll_core::wire::{CellResult, JavaScriptResult, ModuleResult, ModuleRun, ProjectResult, ProjectRun};
use plimsoll_core::{Floor, Reason, Refusal, Tier};
use sha2::{Digest, Sha256};
use wasmtime::component::{HasSelf, Linker, ResourceAny, ResourceTable};
use wasmtime::{ResourceLimiter, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::RuntimeError;
use crate::engine::{Engine, Loaded, Readiness};
use crate::jail::frame::{Answer, GrantClient, Job, SessionFile};
use crate::jail::{Jail, JailedSession, SessionLost};
use crate::python::{self, LivePython, PythonGuest};
use crate::sims::{self, Sims};

#[allow(
    missing_docs,
    reason = "the console interface is public (the Python world reuses it) and bindgen emits some items without docs"
)]
mod generated {
    wasmtime::component::bindgen!({
        world: "engine",
        path: "../../wit/engine",
    });
}

use generated::exports::plimsoll::engine::evaluate::Status;
/// The console interface both engine worlds import (the host keeps capped output).
pub use generated::plimsoll::engine::console;
/// The host API both engine worlds import (the run's broker, when it holds a grant).
pub use generated::plimsoll::engine::host_api;
use generated::{Engine as EngineWorld, EnginePre};

/// The QuickJS guest component, built by `guests/build.sh` and checked in.
pub const QUICKJS_COMPONENT: &[u8] = include_bytes!("../../../guests/quickjs/quickjs.wasm");

/// The embedded component's identity: `quickjs-wasm:sha256:<hex>` of its bytes.
pub fn quickjs_identity() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| format!("quickjs-wasm:sha256:{}", hex::encode(quickjs_digest())))
}

/// The SHA-256 of the embedded QuickJS component, computed once per process.
pub(crate) fn quickjs_digest() -> &'static [u8; 32] {
    static DIGEST: OnceLock<[u8; 32]> = OnceLock::new();
    DIGEST.get_or_init(|| Sha256::digest(QUICKJS_COMPONENT).into())
}

/// `quickjs-wasm:sha256:<hex>` of a QuickJS component's bytes.
fn identity_of(component: &[u8]) -> String {
    format!("quickjs-wasm:sha256:{}", hex::encode(Sha256::digest(component)))
}

/// Exit code of a run its deadline ended.
pub const EXIT_TIMEOUT: i32 = 124;

/// Exit code of a run the engine trapped out of (out of memory, stack overflow, abort).
pub const EXIT_TRAP: i32 = 134;

/// The wasm provider's limits.
///
/// Defaults: 256 MiB of linear memory per run, 64 KiB kept per output stream, a
/// 5 s default budget and a 30 s ceiling (the original's wasm provider's).
#[derive(Clone, Debug)]
pub struct WasmConfig {
    /// Linear memory per run (`SANDBOX_MEMORY_MB`).
    pub memory_mb: u32,
    /// Bytes kept per output stream.
    pub output_cap: usize,
    /// The budget of a run that states none.
    pub default_timeout: Duration,
    /// The longest run allowed.
    pub max_timeout: Duration,
}

impl Default for WasmConfig {
    fn default() -> WasmConfig {
        WasmConfig {
            memory_mb: 256,
            output_cap: OUTPUT_CAP_BYTES,
            default_timeout: Duration::from_secs(5),
            max_timeout: Duration::from_secs(30),
        }
    }
}

/// One output stream as the host keeps it: a prefix up to the cap, and whether
/// anything was dropped.
#[derive(Debug, Default)]
pub(crate) struct Captured {
    pub(crate) bytes: Vec<u8>,
    pub(crate) truncated: bool,
}

impl Captured {
    pub(crate) fn push(&mut self, cap: usize, more: &[u8]) {
        let room = cap.saturating_sub(self.bytes.len());
        if more.len() > room {
            self.truncated = true;
        }
        self.bytes.extend_from_slice(&more[..more.len().min(room)]);
    }
}

/// Caps linear memory and remembers whether the guest asked past the cap.
#[derive(Debug)]
pub(crate) struct Limiter {
    memory_bytes: usize,
    pub(crate) denied: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            self.denied = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        // Tables hold function references; a million is far past any real program.
        Ok(desired <= 1 << 20)
    }
}

/// Everything one run's store holds.
pub(crate) struct RunState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    cap: usize,
    pub(crate) stdout: Captured,
    pub(crate) stderr: Captured,
    /// The run's broker, when it holds a grant.
    pub(crate) host_api: Option<Arc<dyn HostApi>>,
}

impl RunState {
    /// A fresh store with the memory limit and output caps of `config` and an epoch
    /// deadline `timeout` from now, and the pipe holding the guest's own WASI stderr
    /// (a panic message), read back on a trap. The guest gets no preopened
    /// directory, no sockets, no environment and no arguments.
    pub(crate) fn store(
        engine: &Engine,
        config: &WasmConfig,
        timeout: Duration,
    ) -> (Store<RunState>, MemoryOutputPipe) {
        let memory_bytes = (config.memory_mb as usize) << 20;
        let guest_stderr = MemoryOutputPipe::new(4096);
        let state = RunState {
            wasi: WasiCtxBuilder::new().stderr(guest_stderr.clone()).build(),
            table: ResourceTable::new(),
            limiter: Limiter { memory_bytes, denied: false },
            cap: config.output_cap,
            stdout: Captured::default(),
            stderr: Captured::default(),
            host_api: None,
        };
        let mut store = Store::new(engine.wasmtime(), state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(Engine::deadline_ticks(timeout));
        store.epoch_deadline_trap();
        (store, guest_stderr)
    }
}

/// The refusal for an instance that could not be made: nothing ran.
pub(crate) fn instantiate_refusal(e: wasmtime::Error) -> Refusal {
    let text = format!("{e:#}");
    if text.contains("limit") && text.contains("concurrent") {
        Refusal::new(Reason::Capacity, "the wasm engine has no free instance slot; retry shortly")
    } else {
        Refusal::new(Reason::Environment, format!("the wasm engine could not start an instance: {text}"))
    }
}

/// How a call into a guest that did not return ended.
#[derive(Debug)]
pub(crate) enum Stopped {
    /// The epoch deadline: exit [`EXIT_TIMEOUT`], `timed_out`.
    Deadline,
    /// Any other trap: exit [`EXIT_TRAP`], with what stderr should say about it.
    Trap(String),
}

impl Stopped {
    /// Classifies the error of a guest call; `out_of_memory` says whether the store's
    /// limiter refused a growth, and `guest_stderr` holds the guest's own panic text.
    pub(crate) fn of(
        e: &wasmtime::Error,
        out_of_memory: bool,
        memory_mb: u32,
        guest_stderr: &MemoryOutputPipe,
    ) -> Stopped {
        let trap = e.downcast_ref::<Trap>();
        if trap == Some(&Trap::Interrupt) {
            return Stopped::Deadline;
        }
        if out_of_memory {
            return Stopped::Trap(format!("guest aborted: out of memory (the run's limit is {memory_mb} MiB)\n"));
        }
        let panic = String::from_utf8_lossy(&guest_stderr.contents()).trim().to_string();
        let trap = trap.map(|t| t.to_string()).unwrap_or_else(|| format!("{e}"));
        Stopped::Trap(if panic.is_empty() {
            format!("guest aborted: {trap}\n")
        } else {
            format!("guest aborted: {trap}: {panic}\n")
        })
    }
}

impl WasiView for RunState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl console::Host for RunState {
    fn write(&mut self, channel: console::Channel, bytes: Vec<u8>) {
        let cap = self.cap;
        match channel {
            console::Channel::Stdout => self.stdout.push(cap, &bytes),
            console::Channel::Stderr => self.stderr.push(cap, &bytes),
        }
    }
}

impl host_api::Host for RunState {
    fn call(&mut self, method: String, path: String, body: Option<Vec<u8>>) -> host_api::Response {
        let a = match &self.host_api {
            Some(api) => api.call(&method, &path, body.as_deref()),
            None => no_grant(&method, &path),
        };
        host_api::Response { status: a.status, content_type: a.content_type, body: a.body }
    }
}

/// The answer to a guest's API call when its run holds no grant: it reaches nothing.
pub(crate) fn no_grant(method: &str, path: &str) -> HostAnswer {
    let body = serde_json::json!({ "error": format!("forbidden: this run holds no grant, so {method} {path} is not allowed") });
    HostAnswer { status: 403, content_type: "application/json".into(), body: body.to_string().into_bytes() }
}

/// The built-in wasm provider. Cloning shares the compiled component.
#[derive(Clone)]
pub struct WasmProvider {
    engine: Engine,
    pre: EnginePre<RunState>,
    config: WasmConfig,
    loaded: (Readiness, Duration),
    python: Option<PythonGuest>,
    identity: Arc<str>,
    sims: Sims,
    jail: Option<Arc<Jail>>,
}

/// The record's `instance` for a snippet a jailed engine worker ran.
pub const JAILED_INSTANCE: &str = "plimsoll-engine-worker:jailed";

impl std::fmt::Debug for WasmProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmProvider")
            .field("config", &self.config)
            .field("loaded", &self.loaded)
            .field("python", &self.python)
            .field("jailed", &self.jail.is_some())
            .finish()
    }
}

impl WasmProvider {
    /// Compiles (or loads from the cache) the QuickJS component and links it.
    ///
    /// # Errors
    ///
    /// [`RuntimeError`] when the component does not compile or link.
    pub fn new(engine: &Engine, config: WasmConfig) -> Result<WasmProvider, RuntimeError> {
        WasmProvider::with_component(engine, config, QUICKJS_COMPONENT)
    }

    /// As [`WasmProvider::new`], with a QuickJS component other than the embedded
    /// one (the benchmarks compare builds); its identity is its own digest.
    ///
    /// # Errors
    ///
    /// [`RuntimeError`] when the component does not compile or link.
    pub fn with_component(engine: &Engine, config: WasmConfig, bytes: &[u8]) -> Result<WasmProvider, RuntimeError> {
        let Loaded { component, readiness, took } = engine.load("quickjs", bytes)?;
        let identity: Arc<str> =
            if bytes == QUICKJS_COMPONENT { quickjs_identity().into() } else { identity_of(bytes).into() };
        let mut linker = Linker::<RunState>::new(engine.wasmtime());
        let link = |e: wasmtime::Error| RuntimeError::Link(format!("{e:#}"));
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(link)?;
        EngineWorld::add_to_linker::<RunState, HasSelf<RunState>>(&mut linker, |s| s).map_err(link)?;
        let pre = linker.instantiate_pre(&component).map_err(link)?;
        let pre = EnginePre::new(pre).map_err(link)?;
        let sims = Sims::new(engine, &config);
        Ok(WasmProvider {
            engine: engine.clone(),
            pre,
            config,
            loaded: (readiness, took),
            python: None,
            identity,
            sims,
            jail: None,
        })
    }

    /// The same provider, running everything in `jail`'s worker processes instead
    /// of this one (snippets, projects, module tables, sessions); their records say
    /// so (`instance`). This process keeps the checks, the evidence and the grants'
    /// brokers.
    pub fn with_jail(mut self, jail: Arc<Jail>) -> WasmProvider {
        self.jail = Some(jail);
        self
    }

    /// The same provider, running Python too: project steps `python3 [-I] FILE
    /// [ARG...]` and session cells, in the CPython guest `python`.
    pub fn with_python(mut self, python: PythonGuest) -> WasmProvider {
        self.python = Some(python);
        self
    }

    /// The CPython guest, when this provider runs Python.
    pub fn python(&self) -> Option<&PythonGuest> {
        self.python.as_ref()
    }

    /// The simulation judge and its guests.
    pub fn sims(&self) -> &Sims {
        &self.sims
    }

    fn sim_evidence(&self) -> Evidence {
        self.stamped(Evidence {
            tier: Tier::Process,
            environment: self.sims.identity().to_string(),
            ..Evidence::default()
        })
    }

    /// `evidence` with the instance a jailed run states.
    fn stamped(&self, evidence: Evidence) -> Evidence {
        match self.jail {
            Some(_) => Evidence { instance: JAILED_INSTANCE.into(), ..evidence },
            None => evidence,
        }
    }

    /// The pool of jailed workers this provider's engine runs in, if any.
    pub fn jail(&self) -> Option<&Arc<Jail>> {
        self.jail.as_ref()
    }

    /// The refusal for Python on a provider without the CPython guest.
    fn no_python(&self) -> Refusal {
        Refusal::unsupported(
            "this wasm provider has no CPython component, so it runs javascript only: build one with \
             guests/python/build.sh (or set SANDBOX_WASM_PYTHON), or use the docker provider",
        )
    }

    fn python_evidence(&self, python: &PythonGuest) -> Evidence {
        self.stamped(Evidence {
            tier: Tier::Process,
            environment: python.identity().to_string(),
            ..Evidence::default()
        })
    }

    /// Whether the component came from the cache, and how long loading took.
    pub fn loaded(&self) -> (Readiness, Duration) {
        self.loaded
    }

    /// The provider's configuration.
    pub fn config(&self) -> &WasmConfig {
        &self.config
    }

    /// The QuickJS component's identity (`quickjs-wasm:sha256:...`).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn evidence(&self) -> Evidence {
        self.stamped(Evidence { tier: Tier::Process, environment: self.identity.to_string(), ..Evidence::default() })
    }

    /// Runs JavaScript in a fresh store: exit 0 when it completes, 1 when it throws,
    /// 124 at the deadline, 134 when the engine traps.
    ///
    /// # Errors
    ///
    /// Refused (nothing ran) when no instance could be made: `capacity` when the
    /// instance pool is full, `environment` otherwise.
    pub fn run_javascript(&self, code: &str, timeout: Duration) -> Result<JavaScriptResult, Refusal> {
        self.run_javascript_with(code, timeout, None)
    }

    /// As [`WasmProvider::run_javascript`], with the run's grant: its client is
    /// installed as `globalThis[global]` and every call goes through its broker,
    /// which holds the credential (the guest never does).
    ///
    /// # Errors
    ///
    /// As [`WasmProvider::run_javascript`].
    pub fn run_javascript_with(
        &self,
        code: &str,
        timeout: Duration,
        grant: Option<&Grant>,
    ) -> Result<JavaScriptResult, Refusal> {
        let (mut store, instance, guest_stderr) = self.instantiate(timeout)?;
        let client = grant.map(|g| {
            store.data_mut().host_api = Some(g.api.clone());
            generated::exports::plimsoll::engine::evaluate::Grant {
                global: g.global.clone(),
                routes: g.routes.clone(),
                preamble: g.preamble.clone(),
            }
        });
        let outcome = instance.plimsoll_engine_evaluate().call_run(&mut store, code, client.as_ref());
        let state = store.into_data();
        Ok(self.ended(outcome, state.stdout, state.stderr, state.limiter.denied, &guest_stderr))
    }

    /// A fresh store and instance, with the memory limit and output caps set and an
    /// epoch deadline `timeout` from now (instantiation counts against it).
    fn instantiate(&self, timeout: Duration) -> Result<(Store<RunState>, EngineWorld, MemoryOutputPipe), Refusal> {
        let (mut store, guest_stderr) = RunState::store(&self.engine, &self.config, timeout);
        let instance = self.pre.instantiate(&mut store).map_err(instantiate_refusal)?;
        Ok((store, instance, guest_stderr))
    }

    /// How a run or cell ended, as a result: 0 completed, 1 raised, 124 at the
    /// deadline, 134 on any other trap (with the reason on stderr when the guest
    /// printed nothing).
    fn ended(
        &self,
        outcome: wasmtime::Result<Status>,
        stdout: Captured,
        stderr: Captured,
        out_of_memory: bool,
        guest_stderr: &MemoryOutputPipe,
    ) -> JavaScriptResult {
        let mut result = JavaScriptResult {
            stdout: stdout.bytes,
            stdout_truncated: stdout.truncated,
            stderr: stderr.bytes,
            stderr_truncated: stderr.truncated,
            ..JavaScriptResult::default()
        };
        match outcome {
            Ok(Status::Completed) => result.exit_code = 0,
            Ok(Status::Raised) => result.exit_code = 1,
            Err(e) => match Stopped::of(&e, out_of_memory, self.config.memory_mb, guest_stderr) {
                Stopped::Deadline => {
                    result.exit_code = EXIT_TIMEOUT;
                    result.timed_out = true;
                }
                // QuickJS reports what it can on stderr itself; the host's reason
                // fills in only when it printed nothing.
                Stopped::Trap(why) => {
                    result.exit_code = EXIT_TRAP;
                    if result.stderr.is_empty() {
                        let mut stderr = Captured::default();
                        stderr.push(self.config.output_cap, why.as_bytes());
                        result.stderr = stderr.bytes;
                        result.stderr_truncated = stderr.truncated;
                    }
                }
            },
        }
        result
    }

    /// A session: one kept QuickJS interpreter for JavaScript cells, and the
    /// session's files, which the host keeps so a fresh interpreter gets them too.
    pub fn session(&self) -> WasmSession {
        self.session_holding(None)
    }

    /// A session whose interpreters get `held`'s client when they start: a grant
    /// every call holds (its API, a slot, serves only while a call runs).
    pub(crate) fn session_holding(&self, held: Option<Grant>) -> WasmSession {
        WasmSession {
            provider: self.clone(),
            live: None,
            py: None,
            files: BTreeMap::new(),
            file_bytes: 0,
            cells: 0,
            held,
            jailed: None,
        }
    }
}

/// The budget for starting an interpreter and writing the session's files into it.
const INTERPRETER_START: Duration = Duration::from_secs(10);

/// A live interpreter: its store (memory, output), instance and resource.
struct Live {
    store: Store<RunState>,
    instance: EngineWorld,
    interpreter: ResourceAny,
    guest_stderr: MemoryOutputPipe,
}

/// The bytes a wasm session's files may hold in all (they live in host memory).
pub const SESSION_FILE_BYTES: usize = 64 << 20;

/// A wasm session's state: the kept interpreter (started on first use, again after
/// one ended) and the session's files.
pub struct WasmSession {
    provider: WasmProvider,
    live: Option<Live>,
    py: Option<LivePython>,
    files: BTreeMap<String, Vec<u8>>,
    file_bytes: usize,
    cells: u32,
    /// The grant every call holds, installed in each interpreter as it starts.
    held: Option<Grant>,
    /// The session's own engine worker, when the provider is jailed: it keeps the
    /// interpreters and files, and this side only checks and carries.
    jailed: Option<JailedSession>,
}

impl std::fmt::Debug for WasmSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmSession")
            .field("live", &self.live.is_some())
            .field("python", &self.py.is_some())
            .field("files", &self.files.len())
            .field("cells", &self.cells)
            .field("held", &self.held.as_ref().map(|g| &g.global))
            .field("jailed", &self.jailed.as_ref().map(JailedSession::pid))
            .finish()
    }
}

impl WasmSession {
    /// Runs one JavaScript cell after writing `files` into the session's work
    /// directory (`readFile(path)` reads them). A deadline or any trap ends the
    /// interpreter (`interpreter_ended`); the next cell starts a fresh one
    /// (`interpreter_started`) that sees every file written so far.
    ///
    /// # Errors
    ///
    /// Refused (nothing ran): `request` when the files would take the session over
    /// [`SESSION_FILE_BYTES`] (none is written), `environment` or `capacity` when
    /// no interpreter could be started.
    pub fn cell(&mut self, code: &str, files: &[(String, Vec<u8>)], timeout: Duration) -> Result<CellResult, Refusal> {
        self.add_files(files)?;
        self.cells += 1;
        let started = self.live.is_none();
        if started {
            self.live = Some(self.start()?);
        }
        let Some(live) = self.live.as_mut() else {
            return Err(Refusal::new(Reason::Environment, "the session's interpreter could not be started"));
        };
        live.store.data_mut().stdout = Captured::default();
        live.store.data_mut().stderr = Captured::default();
        live.store.set_epoch_deadline(Engine::deadline_ticks(timeout));
        let outcome = live.instance.plimsoll_engine_evaluate().interpreter().call_cell(
            &mut live.store,
            live.interpreter,
            code,
            self.cells,
        );
        let ended = outcome.is_err();
        let state = live.store.data_mut();
        let (stdout, stderr, oom) =
            (std::mem::take(&mut state.stdout), std::mem::take(&mut state.stderr), state.limiter.denied);
        let r = self.provider.ended(outcome, stdout, stderr, oom, &live.guest_stderr);
        if ended {
            // A trapped instance cannot be entered again: the interpreter is gone.
            self.live = None;
        }
        Ok(CellResult {
            stdout: r.stdout,
            stderr: r.stderr,
            exit_code: r.exit_code,
            timed_out: r.timed_out,
            stdout_truncated: r.stdout_truncated,
            stderr_truncated: r.stderr_truncated,
            interpreter_started: started,
            interpreter_ended: ended,
            advice: Vec::new(),
        })
    }

    /// Runs one Python cell (`<cell N>`, a trailing expression shown as its `repr`)
    /// in the session's kept CPython interpreter, after writing `files` into the
    /// session's work directory. A deadline or a trap ends that interpreter only.
    ///
    /// # Errors
    ///
    /// As [`WasmSession::cell`], and `unsupported` when the provider has no CPython guest.
    pub fn python_cell(
        &mut self,
        code: &str,
        files: &[(String, Vec<u8>)],
        timeout: Duration,
    ) -> Result<CellResult, Refusal> {
        let Some(guest) = self.provider.python.clone() else {
            return Err(self.provider.no_python());
        };
        self.add_files(files)?;
        self.cells += 1;
        let started = self.py.is_none();
        if started {
            let mut all = self.files.iter().map(|(p, c)| (p.as_str(), c.as_slice()));
            let mut py = guest.start(&self.provider.engine, &self.provider.config, &mut all, INTERPRETER_START)?;
            if let Some(g) = &self.held {
                py.grant(g)?;
            }
            self.py = Some(py);
        }
        let Some(py) = self.py.as_mut() else {
            return Err(Refusal::new(Reason::Environment, "the session's Python interpreter could not be started"));
        };
        let ended = py.cell(&self.provider.config, code, self.cells, timeout);
        if ended.trapped {
            self.py = None;
        }
        Ok(python::cell_result(ended, started))
    }

    /// Runs a Python project in the session: its files join the session's, and its
    /// `python3 [-I] FILE [ARG...]` steps run in a fresh instance over all of them
    /// (each project is a new process, as a container's steps are), holding
    /// `grant`, else the session's held grant. The artifacts it returns stay in
    /// the session too, while they fit its file budget; other files the steps
    /// write end with the instance.
    ///
    /// # Errors
    ///
    /// Refused (nothing ran): `unsupported` without the CPython guest or for a step
    /// that is not `python3 FILE`, `request` when the files would take the session
    /// over its budget, `environment` or `capacity` when no instance started.
    pub fn python_project(
        &mut self,
        project: &ProjectRun,
        timeout: Duration,
        grant: Option<&Grant>,
    ) -> Result<ProjectResult, Refusal> {
        let Some(guest) = self.provider.python.clone() else {
            return Err(self.provider.no_python());
        };
        let steps = python::python_steps(&project.steps)?;
        let files: Vec<(String, Vec<u8>)> =
            project.files.iter().map(|f| (f.path.clone(), f.content.as_bytes().to_vec())).collect();
        self.add_files(&files)?;
        let grant = grant.or(self.held.as_ref());
        let (engine, config) = (&self.provider.engine, &self.provider.config);
        let mut all = self.files.iter().map(|(p, c)| (p.as_str(), c.as_slice()));
        let result = guest.run_steps(engine, config, &mut all, project, &steps, timeout, grant)?;
        let produced: Vec<(String, Vec<u8>)> =
            result.artifacts.iter().map(|a| (a.path.clone(), a.content.clone())).collect();
        // The project ran: a file that no longer fits is not kept, and the result stands.
        let _ = self.add_files(&produced);
        Ok(result)
    }

    /// Keeps `files` as the session's and writes them into every live interpreter
    /// (one started later gets them all when it starts).
    fn add_files(&mut self, files: &[(String, Vec<u8>)]) -> Result<(), Refusal> {
        // A later file of the same path replaces an earlier one, in this call too.
        let pending: BTreeMap<&str, usize> = files.iter().map(|(p, c)| (p.as_str(), c.len())).collect();
        let replaced: usize = pending.keys().map(|p| self.files.get(*p).map_or(0, Vec::len)).sum();
        let after = self.file_bytes - replaced + pending.values().sum::<usize>();
        if after > SESSION_FILE_BYTES {
            return Err(Refusal::request(format!(
                "invalid request: the session's files would hold {after} bytes, over its budget of {SESSION_FILE_BYTES}; nothing was written"
            )));
        }
        for (path, content) in files {
            self.files.insert(path.clone(), content.clone());
        }
        self.file_bytes = after;
        if let Some(live) = self.live.as_mut() {
            let evaluate = live.instance.plimsoll_engine_evaluate();
            for (path, content) in files {
                if let Err(e) = evaluate.interpreter().call_write_file(&mut live.store, live.interpreter, path, content)
                {
                    self.live = None;
                    return Err(Refusal::new(Reason::Environment, format!("writing {path} into the session: {e:#}")));
                }
            }
        }
        if let Some(py) = self.py.as_mut() {
            for (path, content) in files {
                if let Err(r) = py.write_file(path, content) {
                    self.py = None;
                    return Err(r);
                }
            }
        }
        Ok(())
    }

    /// A fresh interpreter holding every file of the session.
    fn start(&self) -> Result<Live, Refusal> {
        let (mut store, instance, guest_stderr) = self.provider.instantiate(INTERPRETER_START)?;
        let fail = |e: wasmtime::Error| Refusal::new(Reason::Environment, format!("starting the interpreter: {e:#}"));
        let evaluate = instance.plimsoll_engine_evaluate();
        let interpreter = evaluate.interpreter().call_constructor(&mut store).map_err(fail)?;
        for (path, content) in &self.files {
            evaluate.interpreter().call_write_file(&mut store, interpreter, path, content).map_err(fail)?;
        }
        if let Some(g) = &self.held {
            store.data_mut().host_api = Some(g.api.clone());
            let client = generated::exports::plimsoll::engine::evaluate::Grant {
                global: g.global.clone(),
                routes: g.routes.clone(),
                preamble: g.preamble.clone(),
            };
            if evaluate.interpreter().call_grant(&mut store, interpreter, &client).map_err(fail)? == Status::Raised {
                let said = String::from_utf8_lossy(&store.data().stderr.bytes).into_owned();
                return Err(Refusal::new(
                    Reason::Environment,
                    format!("the session's grant client did not install: {}", said.trim_end()),
                ));
            }
        }
        Ok(Live { store, instance, interpreter, guest_stderr })
    }
}

impl Session for WasmSession {
    fn call(&mut self, call: Call<'_>) -> Result<Answered, CallError> {
        let output = match call {
            Call::Cell(c) => {
                provider::check_floor(Tier::Process, c.floor)?;
                let files: Vec<(String, Vec<u8>)> =
                    c.files.iter().map(|f| (f.path.clone(), f.content.as_bytes().to_vec())).collect();
                let python = c.language == Language::Python;
                let evidence = match (python, self.provider.python.as_ref()) {
                    (true, None) => return Err(self.provider.no_python().into()),
                    (true, Some(guest)) => self.provider.python_evidence(guest),
                    (false, _) => self.provider.evidence(),
                };
                let cell = match self.jailed.as_mut() {
                    Some(jailed) => jailed_cell(jailed, self.held.as_ref(), python, c.code, files, c.timeout)?,
                    None if python => self.python_cell(c.code, &files, c.timeout)?,
                    None => self.cell(c.code, &files, c.timeout)?,
                };
                return Ok(Answered { output: Output::Cell(cell), evidence, ended: None });
            }
            // A snippet is a fresh interpreter in the session's sandbox; on wasm it
            // shares nothing with the cells (their files live in the interpreter).
            Call::Snippet(s) => Output::JavaScript(
                self.provider
                    // A held grant is every call's, snippets' too.
                    .run_snippet(&Snippet { grant: s.grant.or(self.held.as_ref()), ..s })
                    .map_err(|e| match e {
                        RunError::Refused(r) => CallError::Refused(r),
                        RunError::MayHaveRun(detail) => CallError::MayHaveRun { detail, ended: None },
                    })?
                    .result,
            ),
            Call::Project { project, timeout, floor, grant } => {
                provider::check_floor(Tier::Process, floor)?;
                let Some(guest) = self.provider.python.as_ref() else {
                    return Err(self.provider.no_python().into());
                };
                let evidence = self.provider.python_evidence(guest);
                let result = match self.jailed.as_mut() {
                    Some(jailed) => {
                        // The steps must be Python's before anything travels to the worker.
                        python::python_steps(&project.steps)?;
                        let job = Job::SessionProject {
                            project: project.clone(),
                            timeout_ms: millis(timeout),
                            grant: grant.map(client_of),
                        };
                        let api = grant.or(self.held.as_ref()).map(|g| &*g.api);
                        jailed_call(jailed, api, job, timeout, |a| match a {
                            Answer::Project(r) => Ok(r),
                            other => Err(other),
                        })?
                    }
                    None => self.python_project(project, timeout, grant)?,
                };
                return Ok(Answered { output: Output::Project(result), evidence, ended: None });
            }
        };
        Ok(Answered { output, evidence: self.provider.evidence(), ended: None })
    }

    fn close(&mut self) {
        if let Some(mut jailed) = self.jailed.take() {
            jailed.close();
        }
        self.live = None;
        self.py = None;
        self.files.clear();
        self.file_bytes = 0;
    }
}

impl Provider for WasmProvider {
    fn session_support(&self) -> Option<KindSupport> {
        let mut support = self.describe().snippet?;
        if self.python.is_some() {
            support.languages.push(Language::Python);
        }
        Some(support)
    }

    fn session_grants(&self) -> bool {
        true
    }

    fn open_session(&self, floor: Option<Floor>, reach: SessionReach<'_>) -> Result<Opened, RunError> {
        provider::check_floor(Tier::Process, floor)?;
        // A snippet's grant reaches its own engine through the call, so only a held
        // grant changes the session: its interpreters get the client over the slot.
        let held = match reach {
            SessionReach::Held(g) => Some(g.clone()),
            SessionReach::Nothing | SessionReach::PerCall => None,
        };
        let mut session = self.session_holding(held);
        if let Some(jail) = &self.jail {
            session.jailed = Some(jail.session(session.held.as_ref().map(client_of))?);
        }
        Ok(Opened { session: Box::new(session), evidence: self.evidence() })
    }

    fn describe(&self) -> Description {
        Description {
            name: "wasm".into(),
            snippet: Some(KindSupport {
                identity: self.identity.to_string(),
                software_identity: String::new(),
                default_timeout: self.config.default_timeout,
                max_timeout: self.config.max_timeout,
                languages: vec![Language::JavaScript],
            }),
            // Projects are Python steps when the CPython guest is built, and judge
            // steps (simulation runs) always.
            project: Some(KindSupport {
                identity: self
                    .python
                    .as_ref()
                    .map_or_else(|| self.sims.identity().to_string(), |p| p.identity().to_string()),
                software_identity: String::new(),
                default_timeout: self.config.default_timeout,
                max_timeout: self.config.max_timeout,
                languages: if self.python.is_some() { vec![Language::Python] } else { Vec::new() },
            }),
            module: Some(KindSupport {
                identity: self.sims.identity().to_string(),
                software_identity: String::new(),
                default_timeout: self.config.default_timeout,
                max_timeout: self.config.max_timeout,
                languages: Vec::new(),
            }),
            memory_mb: self.config.memory_mb,
            policy: String::new(),
        }
    }

    fn tier(&self) -> Tier {
        Tier::Process
    }

    fn preflight(&self) -> Result<(), Refusal> {
        Ok(())
    }

    fn engine_mode(&self) -> Option<&'static str> {
        Some(if self.jail.is_some() { "jailed" } else { "in-process" })
    }

    fn grant_support(&self) -> GrantSupport {
        // Snippets and Python projects reach the broker through the engines' host
        // import (`host` in QuickJS, `plimsoll_host` in CPython).
        GrantSupport { snippets: true, projects: self.python.is_some() }
    }

    fn run_snippet(&self, snippet: &Snippet<'_>) -> Result<Ran<JavaScriptResult>, RunError> {
        provider::check_floor(Tier::Process, snippet.floor)?;
        if snippet.language != Language::JavaScript {
            return Err(Refusal::unsupported(format!(
                "the wasm provider's snippets are javascript, not {}; python runs as a project of \
                 `python3 FILE` steps or as a session cell",
                snippet.language.as_str()
            ))
            .into());
        }
        let result = match &self.jail {
            Some(jail) => {
                let job = Job::Snippet {
                    code: snippet.code.to_string(),
                    timeout_ms: millis(snippet.timeout),
                    grant: snippet.grant.map(client_of),
                };
                jail.run(job, snippet.grant.map(|g| &*g.api), snippet.timeout, |a| match a {
                    Answer::Ran(r) => Ok(r),
                    other => Err(other),
                })?
            }
            None => self.run_javascript_with(snippet.code, snippet.timeout, snippet.grant)?,
        };
        Ok(Ran { result, evidence: self.evidence() })
    }

    fn run_project(
        &self,
        project: &ProjectRun,
        timeout: Duration,
        floor: Option<Floor>,
        grant: Option<&Grant>,
    ) -> Result<Ran<ProjectResult>, RunError> {
        provider::check_floor(Tier::Process, floor)?;
        // A simulation run: every step is `plimsoll-judge ARGS`, the judge runs here.
        if let Some(steps) = sims::judge_steps(&project.steps) {
            if grant.is_some() {
                return Err(Refusal::unsupported(
                    "a simulation run cannot carry a grant: its controller reaches nothing but the plant",
                )
                .into());
            }
            let steps = steps?;
            let result = match &self.jail {
                Some(jail) => self.jailed_project(jail, project, timeout, None)?,
                None => self.sims.run_project(project, &steps, timeout),
            };
            return Ok(Ran { result, evidence: self.sim_evidence() });
        }
        // Every step must be `python3 [-I] FILE [ARG...]`, checked before anything
        // runs; the steps run in order in one fresh CPython instance over an
        // in-memory work directory holding the project's files.
        let python = self.python.as_ref().ok_or_else(|| self.no_python())?;
        let steps = python::python_steps(&project.steps)?;
        let result = match &self.jail {
            Some(jail) => self.jailed_project(jail, project, timeout, grant)?,
            None => python.run_project(&self.engine, &self.config, project, &steps, timeout, grant)?,
        };
        Ok(Ran { result, evidence: self.python_evidence(python) })
    }

    fn run_module(
        &self,
        module: &ModuleRun,
        timeout: Duration,
        floor: Option<Floor>,
    ) -> Result<Ran<ModuleResult>, RunError> {
        provider::check_floor(Tier::Process, floor)?;
        let result = match &self.jail {
            Some(jail) => {
                let job = Job::Module { module: module.clone(), timeout_ms: millis(timeout) };
                jail.run(job, None, timeout, |a| match a {
                    Answer::Module(r) => Ok(r),
                    other => Err(other),
                })?
            }
            None => self.sims.run_module(module, timeout)?,
        };
        Ok(Ran { result, evidence: self.sim_evidence() })
    }
}

impl WasmProvider {
    /// A project (Python or judge steps, checked here already) in a jailed worker.
    fn jailed_project(
        &self,
        jail: &Arc<Jail>,
        project: &ProjectRun,
        timeout: Duration,
        grant: Option<&Grant>,
    ) -> Result<ProjectResult, RunError> {
        let job = Job::Project { project: project.clone(), timeout_ms: millis(timeout), grant: grant.map(client_of) };
        jail.run(job, grant.map(|g| &*g.api), timeout, |a| match a {
            Answer::Project(r) => Ok(r),
            other => Err(other),
        })
    }
}

/// A grant as the jailed worker's guest sees it: the client, not the broker.
fn client_of(grant: &Grant) -> GrantClient {
    GrantClient { global: grant.global.clone(), routes: grant.routes.clone(), preamble: grant.preamble.clone() }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One cell in the session's jailed worker, its grant calls served by the held grant.
fn jailed_cell(
    jailed: &mut JailedSession,
    held: Option<&Grant>,
    python: bool,
    code: &str,
    files: Vec<(String, Vec<u8>)>,
    timeout: Duration,
) -> Result<CellResult, CallError> {
    let files = files.into_iter().map(|(path, content)| SessionFile { path, content }).collect();
    let job = Job::Cell { python, code: code.to_string(), files, timeout_ms: millis(timeout) };
    jailed_call(jailed, held.map(|g| &*g.api), job, timeout, |a| match a {
        Answer::Cell(c) => Ok(c),
        other => Err(other),
    })
}

/// One job in the session's jailed worker, its grant calls served by `api`.
fn jailed_call<T>(
    jailed: &mut JailedSession,
    api: Option<&dyn HostApi>,
    job: Job,
    timeout: Duration,
    pick: impl FnOnce(Answer) -> Result<T, Answer>,
) -> Result<T, CallError> {
    match jailed.call(job, api, timeout, pick) {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(RunError::Refused(r))) => Err(CallError::Refused(r)),
        Ok(Err(RunError::MayHaveRun(detail))) => Err(CallError::MayHaveRun { detail, ended: None }),
        Err(lost) => Err(session_lost(lost)),
    }
}

/// The session's end when its worker failed or is gone.
fn session_lost(lost: SessionLost) -> CallError {
    let ending = Ending::new(
        SessionEnd::MainProcessEnded,
        "the session's engine worker ended (its interpreters and files with it); open a new session",
    );
    if lost.may_have_run {
        CallError::MayHaveRun { detail: lost.detail, ended: Some(ending) }
    } else {
        CallError::Ended(ending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_streams_keep_a_prefix_and_flag_the_rest() {
        let mut c = Captured::default();
        c.push(4, b"ab");
        c.push(4, b"cd");
        assert!(!c.truncated);
        c.push(4, b"e");
        assert_eq!(c.bytes, b"abcd");
        assert!(c.truncated);
        let mut d = Captured::default();
        d.push(4, b"abcdef");
        assert_eq!(d.bytes, b"abcd");
        assert!(d.truncated);
    }

    #[test]
    fn identity_names_the_component_digest() {
        let id = quickjs_identity();
        assert!(id.starts_with("quickjs-wasm:sha256:"));
        assert_eq!(id.len(), "quickjs-wasm:sha256:".len() + 64);
    }
}
