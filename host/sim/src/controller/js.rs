//! JavaScript controllers on our QuickJS engine, speaking the original's line
//! protocol: the judge feeds one state line, the program answers one line on its
//! stdout. Node's readline semantics decide what a line is (`\n`, `\r\n` or `\r`
//! ends it), and lines queue: a second line written during one tick answers the
//! next.
//!
//! The program's world is deterministic: its clocks read a fixed instant and its
//! randomness is a fixed stream, so its answers depend only on what it is fed.

use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker, ResourceAny, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::{Ask, Controller, Fault, PENDING_CAP, STDERR_CAP, parse_answer};
use crate::walls::{AsCap, Cap, Stopped, Walls};

#[allow(missing_docs, reason = "bindgen emits items without docs; the WIT documents them")]
mod generated {
    wasmtime::component::bindgen!({
        world: "engine",
        path: "../../wit/engine",
    });
}

use generated::exports::plimsoll::engine::lines::State;
use generated::plimsoll::engine::{console, host_api};
use generated::{Engine as EngineWorld, EnginePre};

/// The store of one JavaScript controller.
pub struct JsState {
    wasi: WasiCtx,
    table: ResourceTable,
    cap: Cap,
    /// Stdout not yet taken as answers.
    pending: Vec<u8>,
    flooded: bool,
    stderr: Vec<u8>,
}

impl std::fmt::Debug for JsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsState").field("pending", &self.pending.len()).field("flooded", &self.flooded).finish()
    }
}

impl AsCap for JsState {
    fn cap(&self) -> &Cap {
        &self.cap
    }
}

impl WasiView for JsState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl console::Host for JsState {
    fn write(&mut self, channel: console::Channel, bytes: Vec<u8>) {
        match channel {
            console::Channel::Stdout => {
                let room = PENDING_CAP.saturating_sub(self.pending.len());
                if bytes.len() > room {
                    self.flooded = true;
                }
                self.pending.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            console::Channel::Stderr => {
                let room = STDERR_CAP.saturating_sub(self.stderr.len());
                self.stderr.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
        }
    }
}

impl host_api::Host for JsState {
    fn call(&mut self, method: String, path: String, _body: Option<Vec<u8>>) -> host_api::Response {
        // A controller holds no grant: its answers may depend on nothing but its input.
        let body =
            format!(r#"{{"error":"forbidden: a controller holds no grant, so {method} {path} is not allowed"}}"#);
        host_api::Response { status: 403, content_type: "application/json".into(), body: body.into_bytes() }
    }
}

/// A clock that always reads the same instant.
struct Frozen;

impl wasmtime_wasi::HostWallClock for Frozen {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::HostMonotonicClock for Frozen {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        0
    }
}

/// The QuickJS component, linked once for controllers.
#[derive(Clone)]
pub struct JsEngine {
    pre: EnginePre<JsState>,
}

impl std::fmt::Debug for JsEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsEngine").finish_non_exhaustive()
    }
}

impl JsEngine {
    /// Links the QuickJS `component` against the deterministic controller world.
    ///
    /// # Errors
    ///
    /// wasmtime's reason when it does not link.
    pub fn new(engine: &Engine, component: &Component) -> Result<JsEngine, String> {
        let mut linker = Linker::<JsState>::new(engine);
        let link = |e: wasmtime::Error| format!("the QuickJS component does not link: {e:#}");
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(link)?;
        EngineWorld::add_to_linker::<JsState, HasSelf<JsState>>(&mut linker, |s| s).map_err(link)?;
        let pre = linker.instantiate_pre(component).map_err(link)?;
        let pre = EnginePre::new(pre).map_err(link)?;
        Ok(JsEngine { pre })
    }

    /// Starts `code` (the file `name`) in a fresh store under `walls`, running its
    /// top level within `budget`.
    ///
    /// # Errors
    ///
    /// A [`Fault`]: the program threw or ended at its top level, or the store
    /// could not be made.
    pub fn start(
        &self,
        engine: &Engine,
        walls: &Walls,
        budget: Duration,
        code: &str,
        name: &str,
    ) -> Result<JsController, Fault> {
        let wasi = WasiCtxBuilder::new()
            .wall_clock(Frozen)
            .monotonic_clock(Frozen)
            .secure_random(wasmtime_wasi::Deterministic::new(vec![0x5a; 64]))
            .insecure_random(wasmtime_wasi::Deterministic::new(vec![0xa5; 64]))
            .insecure_random_seed(0)
            .build();
        let state = JsState {
            wasi,
            table: ResourceTable::new(),
            cap: Cap::new(walls.memory_bytes, *walls),
            pending: Vec::new(),
            flooded: false,
            stderr: Vec::new(),
        };
        let mut store = Store::new(engine, state);
        store.limiter(|s| &mut s.cap);
        Walls::set_deadline(&mut store, budget);
        store.epoch_deadline_trap();
        let instance = self.pre.instantiate(&mut store).map_err(|e| Fault::Stopped(Stopped::of(&e, &store)))?;
        let api = instance.plimsoll_engine_lines().program();
        let program =
            api.call_constructor(&mut store, code, name).map_err(|e| Fault::Stopped(Stopped::of(&e, &store)))?;
        let mut controller =
            JsController { store, instance, program, state: State::Listening, answer_ms: 0, after_cr: false };
        let state = controller.call(|api, store, p| api.call_start(store, p))?;
        controller.state = state;
        match state {
            State::Listening => Ok(controller),
            // A program that answers before it is asked leaves its lines queued; one
            // that ends at its top level never hears the first state line.
            State::Exited(code) => Err(Fault::Exited(Some(code))),
            State::Raised => Err(Fault::Raised),
        }
    }
}

/// One running JavaScript controller.
pub struct JsController {
    store: Store<JsState>,
    instance: EngineWorld,
    program: ResourceAny,
    state: State,
    answer_ms: u64,
    /// The last line ended in a `\r` at the end of what was written; a `\n` that
    /// comes next belongs to it.
    after_cr: bool,
}

impl std::fmt::Debug for JsController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsController").field("state", &self.state).finish_non_exhaustive()
    }
}

type LinesApi<'a> = generated::exports::plimsoll::engine::lines::GuestProgram<'a>;

impl JsController {
    fn call(
        &mut self,
        f: impl FnOnce(&LinesApi<'_>, &mut Store<JsState>, ResourceAny) -> wasmtime::Result<State>,
    ) -> Result<State, Fault> {
        let lines = self.instance.plimsoll_engine_lines();
        let api = lines.program();
        match f(&api, &mut self.store, self.program) {
            Ok(state) => Ok(state),
            Err(e) => match Stopped::of(&e, &self.store) {
                Stopped::Deadline => Err(Fault::Late(self.answer_ms)),
                other => Err(Fault::Stopped(other)),
            },
        }
    }

    /// Takes one complete line from the pending stdout, as readline splits lines.
    fn take_line(&mut self) -> Option<String> {
        let pending = &mut self.store.data_mut().pending;
        if self.after_cr && pending.first() == Some(&b'\n') {
            pending.remove(0);
        }
        if !pending.is_empty() {
            self.after_cr = false;
        }
        let end = pending.iter().position(|&b| b == b'\n' || b == b'\r')?;
        let mut skip = 1;
        if pending[end] == b'\r' {
            match pending.get(end + 1) {
                Some(b'\n') => skip = 2,
                // A `\r` at the very end may be the first half of `\r\n`: readline
                // ends the line there, and drops a `\n` that comes next.
                None => self.after_cr = true,
                Some(_) => {}
            }
        }
        let line = String::from_utf8_lossy(&pending[..end]).into_owned();
        pending.drain(..end + skip);
        Some(line)
    }
}

impl Controller for JsController {
    fn answer(&mut self, ask: &Ask<'_>, budget: Duration) -> Result<Vec<f64>, Fault> {
        self.answer_ms = budget.as_millis() as u64;
        // Lines written before this tick (or two in one tick) answer in order.
        if let Some(line) = self.take_line() {
            return parse_answer(&line, ask.inputs);
        }
        if !matches!(self.state, State::Listening) {
            return Err(match self.state {
                State::Exited(c) => Fault::Exited(Some(c)),
                _ => Fault::Raised,
            });
        }
        Walls::set_deadline(&mut self.store, budget);
        let line = ask.line;
        self.state = self.call(|api, store, p| api.call_feed(store, p, line))?;
        if self.store.data().flooded {
            return Err(Fault::Flood);
        }
        if let Some(line) = self.take_line() {
            return parse_answer(&line, ask.inputs);
        }
        match self.state {
            State::Listening if self.store.data().pending.is_empty() => Err(Fault::Silent),
            State::Listening => {
                Err(Fault::Unfinished(super::shorten(&String::from_utf8_lossy(&self.store.data().pending))))
            }
            State::Exited(c) => Err(Fault::Exited(Some(c))),
            State::Raised => Err(Fault::Raised),
        }
    }

    fn finish(&mut self, budget: Duration) {
        if matches!(self.state, State::Listening) {
            Walls::set_deadline(&mut self.store, budget);
            // A controller that lingers or throws while closing is not a fault: every
            // answer it owed is already recorded.
            let _ = self.call(|api, store, p| api.call_close(store, p));
        }
    }

    fn stderr(&self) -> &[u8] {
        &self.store.data().stderr
    }

    fn reads_lines(&self) -> bool {
        true
    }
}
