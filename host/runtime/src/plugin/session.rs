//! A plugin's session as a [`Session`]: one store and one plugin instance kept for
//! the session's life, holding the plugin's `session` resource and the containers
//! it created, or, for a remote backend's plugin, the sandbox the host booked
//! when the plugin created it (a session is a call in flight until it closes:
//! the sweep keeps its sandbox and it counts against the backend's capacity).
//!
//! Behind its own wall the host stays the reference monitor here too. Before
//! each call it reads every container of the session back from the engine and
//! compares it with the read-back taken at open (image, runtime, root, network,
//! mounts, limits, user): any difference ends the session as `sandbox_changed`
//! before anything runs, and a main process that ended ends it as
//! `main_process_ended`. A read-back is
//! skipped only while the engine's event stream vouches that nothing named the
//! container since the last one ([`plimsoll_containers::watch`]). It pauses the
//! containers itself when the session idles and thaws them before the next call.
//! The plugin only drives calls inside the sandbox. A remote plugin reads its
//! vendor's sandbox back itself before each call (the host cannot parse a
//! vendor's answers): a difference ends the session as `sandbox_changed`; the
//! host states the tier from what the plugin checked, capped by the operator, and
//! redacts every credential it attaches from what the plugin says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use plimsoll_containers::{Inspection, Stamp};
use plimsoll_core::provider::{self, Evidence, Grant, GrantSlot, RunError};
use plimsoll_core::session::{Answered, Call, CallError, Ending, Opened, Output, Session, Suspension};
use plimsoll_core::wire::{CellResult, SessionEnd};
use plimsoll_core::{Floor, Reason, Refusal, Tier};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::guard::Ticket;
use super::host::bindings::exports::plimsoll::provider::provider as wit;
use super::host::bindings::plimsoll::types::types as t;
use super::host::bindings::{ProviderPlugin, ProviderPluginPre};
use super::host::{PluginState, Used, Wall};
use super::provider::{
    PluginLimits, PluginProvider, SessionGuard, SessionRelay, SessionSocket, after_run_floor, evidence_of, guard_grant,
    project_result, reason, snippet_result, wit_files,
};
use super::socket::BrokerSocket;
use crate::engine::Engine;

/// What the plugin's own code may take beyond a call's budget (the agent's start,
/// the sweeps, reading the container back).
const CALL_GRACE: Duration = Duration::from_secs(30);
/// The budget for opening a session: creating and starting its container and the
/// agent's first answer.
const OPEN_BUDGET: Duration = Duration::from_secs(60);
/// Bytes kept per stream of a session call: a project's report at most.
const SESSION_COLLECT_CAP: usize = 32 << 20;
/// How much longer than the session a container's lifetime label lasts, so the
/// orphan sweep never removes a live session's container.
const LABEL_MARGIN: Duration = Duration::from_secs(10 * 60);

/// The facts a session keeps of its provider.
struct Facts {
    name: String,
    /// The host's container wall; none for a remote backend's plugin.
    wall: Option<Arc<Wall>>,
    /// A remote backend's tier cap (see [`PluginProvider`]).
    remote_cap: Option<Tier>,
    max_tier: Tier,
    limits: PluginLimits,
}

/// How a session's calls reach the broker, set up at its open.
#[derive(Debug)]
pub(super) enum Way {
    /// Behind the host's wall: a socket mounted into its container, if any.
    Socket(Option<SessionSocket>),
    /// A remote backend: the host's guard, if its calls may name grants.
    Guard(Option<SessionGuard>),
    /// A remote backend the host relays into, when the session holds a grant
    /// from its open or its calls may name one.
    Relay(Option<SessionRelay>),
}

/// A plugin's ending in plimsoll's words, without the credentials `state`'s
/// gate attaches or the guard credentials the session holds.
fn redacted_ending(state: &PluginState, e: wit::Ending) -> Ending {
    let e = ending(e);
    Ending::new(e.end, state.redacted(&e.detail))
}

/// One session of a plugin.
pub(super) struct PluginSession {
    facts: Facts,
    store: Store<PluginState>,
    plugin: ProviderPlugin,
    handle: Option<ResourceAny>,
    /// The session's containers, as read back at open.
    opened: Vec<(String, Inspection)>,
    /// Per container, the event stream's stamp at its last good read-back.
    stamps: Vec<Option<Stamp>>,
    /// What open created, for the tier.
    used: Used,
    /// What the plugin claimed at open.
    claimed: t::Evidence,
    /// Set once the instance can no longer be trusted (it trapped).
    broken: Option<Ending>,
    /// The session's broker socket, mounted at open, when its calls may reach one.
    socket: Option<SessionSocket>,
    /// A remote session's guard, when its calls may reach the broker.
    guard: Option<SessionGuard>,
    /// The broker socket a relayed session's streams reach, for its life, and
    /// the slot its calls that name a grant fill.
    relayed: Option<(BrokerSocket, Option<Arc<GrantSlot>>)>,
}

fn trap(detail: String) -> Ending {
    Ending::new(SessionEnd::BoundaryFailed, format!("the provider plugin failed: {detail}"))
}

fn ending(e: wit::Ending) -> Ending {
    let end = match e.end {
        wit::SessionEnd::DiskExceeded => SessionEnd::DiskExceeded,
        wit::SessionEnd::MainProcessEnded => SessionEnd::MainProcessEnded,
        wit::SessionEnd::BoundaryFailed => SessionEnd::BoundaryFailed,
        wit::SessionEnd::SandboxChanged => SessionEnd::SandboxChanged,
    };
    Ending::new(end, e.detail)
}

/// A plugin's cell result on the wire.
fn cell_result(r: t::CellResult) -> CellResult {
    CellResult {
        stdout: r.stdout.bytes,
        stderr: r.stderr.bytes,
        exit_code: r.exit_code,
        timed_out: r.timed_out,
        stdout_truncated: r.stdout.truncated,
        stderr_truncated: r.stderr.truncated,
        interpreter_started: r.interpreter_started,
        interpreter_ended: r.interpreter_ended,
        advice: Vec::new(),
    }
}

/// The session's end when its main process is no longer running. A process no
/// one inside could signal (a container's PID 1) that died of SIGKILL or SIGTERM
/// without the OOM killer was stopped from outside: the sandbox changed.
fn stopped(now: &Inspection) -> Option<Ending> {
    if now.running {
        return None;
    }
    if !now.oom_killed && matches!(now.exit_code, Some(137 | 143)) {
        let code = now.exit_code.unwrap_or_default();
        return Some(Ending::new(
            SessionEnd::SandboxChanged,
            format!("the session's container was stopped from outside (exit status {code}); nothing ran"),
        ));
    }
    let why = if now.oom_killed {
        format!("out of memory; the limit is {} MiB", now.memory_mb)
    } else {
        match now.exit_code {
            Some(code) => format!("exit status {code}"),
            None => "no exit status".into(),
        }
    };
    Some(Ending::new(SessionEnd::MainProcessEnded, format!("the sandbox's main process ended ({why})")))
}

impl PluginSession {
    /// Opens the plugin's session: a store and instance kept for its life, the
    /// plugin's `open`, and the first read-back of what it created.
    pub(super) fn open(
        provider: &PluginProvider,
        pre: &ProviderPluginPre<PluginState>,
        floor: Option<Floor>,
        way: Way,
    ) -> Result<Opened, RunError> {
        let (socket, guard, relay) = match way {
            Way::Socket(s) => (s, None, None),
            Way::Guard(g) => (None, g, None),
            Way::Relay(r) => (None, None, r),
        };
        if provider.wall.is_none() && provider.remote_cap.is_none() {
            return Err(Refusal::new(Reason::Environment, "no container engine is configured on this host").into());
        }
        let facts = Facts {
            name: provider.name.clone(),
            wall: provider.wall.clone(),
            remote_cap: provider.remote_cap,
            max_tier: provider.max_tier,
            limits: provider.limits.clone(),
        };
        let mut store = provider.store(OPEN_BUDGET, SESSION_COLLECT_CAP);
        // The session's own guard credential, kept out of everything the plugin says.
        store.data_mut().secrets =
            guard.iter().filter_map(|g| g.held.as_ref()).map(|(t, _)| t.credential().to_string()).collect();
        // A relayed session's streams, opened by the plugin's `open`, live with the store.
        if let Some(r) = &relay {
            store.data_mut().secrets.push(r.socket.token().to_string());
            store.data_mut().relay_to = Some(r.socket.path());
        }
        // Every container the open creates gets the session's socket and variables.
        store.data_mut().broker = socket.as_ref().map(|s| s.socket.mount());
        let plugin = pre.instantiate(&mut store).map_err(|e| {
            RunError::Refused(Refusal::new(Reason::Environment, format!("nothing ran: the plugin failed: {e:#}")))
        })?;
        let limits = facts.limits.wit(facts.limits.default_timeout, facts.limits.session_disk_mb);
        let lifetime = u32::try_from((facts.limits.session_lifetime + LABEL_MARGIN).as_secs()).unwrap_or(u32::MAX);
        let held = match (&guard, &relay) {
            (_, Some(r)) => Some(wit::Grant::Relay(r.record.clone())),
            (Some(g), None) => g.held.as_ref().map(|(_, record)| wit::Grant::Guard(record.clone())),
            (None, None) => None,
        };
        let opened =
            plugin.plimsoll_provider_provider().session().call_open(&mut store, limits, lifetime, held.as_ref());
        let used = std::mem::take(&mut store.data_mut().used);
        // A failed open leaves nothing: dropping the store removes what it created
        // (a remote sandbox left undeleted goes to the releaser).
        let handle = match opened {
            Ok(Ok(handle)) => handle,
            Ok(Err(r)) => return Err(Refusal::new(reason(r.reason), store.data().redacted(&r.message)).into()),
            Err(e) => {
                let why = store.data().redacted(&format!("the plugin failed: {e:#}"));
                return Err(Refusal::new(Reason::Environment, why).into());
            }
        };
        let claimed =
            plugin.plimsoll_provider_provider().session().call_evidence(&mut store, handle).map_err(|e| {
                RunError::Refused(Refusal::new(Reason::Environment, format!("the plugin failed: {e:#}")))
            })?;
        let ids: Vec<String> = store.data().live.iter().cloned().collect();
        let mut opened = Vec::new();
        let mut stamps = Vec::new();
        match &facts.wall {
            Some(wall) => {
                if ids.is_empty() {
                    return Err(Refusal::new(
                        Reason::Environment,
                        format!("the {} plugin opened a session without a sandbox the host can read back", facts.name),
                    )
                    .into());
                }
                for id in &ids {
                    wall.watch().follow(id);
                    stamps.push(wall.watch().stamp(id));
                    match wall.block_on(wall.engine().inspect(id)) {
                        Ok(now) => opened.push((id.clone(), now)),
                        Err(e) => {
                            ids.iter().for_each(|id| wall.watch().forget(id));
                            let why = format!("reading the new session back: {e}");
                            return Err(RunError::Refused(Refusal::new(Reason::Environment, why)));
                        }
                    }
                }
            }
            None if used.remote_writes == 0 => {
                return Err(Refusal::new(
                    Reason::Environment,
                    format!("the {} plugin opened a session without reaching its backend", facts.name),
                )
                .into());
            }
            None => {}
        }
        let mut session = PluginSession {
            facts,
            store,
            plugin,
            handle: Some(handle),
            opened,
            stamps,
            used,
            claimed,
            broken: None,
            socket,
            guard,
            relayed: relay.map(|r| (r.socket, r.per_call)),
        };
        let evidence = session.evidence();
        if let Err(e) = after_run_floor(evidence.tier, floor) {
            session.close();
            return Err(match e {
                RunError::MayHaveRun(m) => RunError::Refused(Refusal::new(Reason::Isolation, m)),
                refused => refused,
            });
        }
        Ok(Opened { session: Box::new(session), evidence })
    }

    /// The open's evidence with the tier the wall justifies now (or, for a
    /// remote backend, what the plugin checked at open, capped).
    fn evidence(&self) -> Evidence {
        evidence_of(self.facts.wall.as_deref(), self.facts.remote_cap, self.facts.max_tier, &self.used, &self.claimed)
    }

    /// Reads every container back, unless the event stream vouches nothing named it
    /// since its last read-back; thaws one the idle timer froze. Refused when the
    /// engine does not answer (the session goes on), ended on any change.
    fn read_back(&mut self) -> Result<(), CallError> {
        // A remote plugin reads its vendor's sandbox back inside each call.
        let Some(wall) = self.facts.wall.clone() else { return Ok(()) };
        for ((id, at_open), stamp) in self.opened.iter().zip(self.stamps.iter_mut()) {
            if wall.watch().unchanged(id, *stamp) {
                continue;
            }
            *stamp = None;
            let taken = wall.watch().stamp(id);
            let now = match wall.block_on(wall.engine().inspect(id)) {
                Ok(now) => now,
                Err(e) => {
                    return Err(match wall.block_on(wall.engine().ours()) {
                        Ok(ours) if !ours.iter().any(|c| c.id == *id) => CallError::Ended(Ending::new(
                            SessionEnd::SandboxChanged,
                            "the session's container is gone; nothing ran",
                        )),
                        _ => CallError::Refused(Refusal::new(
                            Reason::Environment,
                            format!("the container engine did not answer the session's read-back ({e}); nothing ran"),
                        )),
                    });
                }
            };
            if let Some(diff) = now.changes_from(at_open) {
                return Err(CallError::Ended(Ending::new(
                    SessionEnd::SandboxChanged,
                    format!("the session's container changed since it was opened ({diff}); nothing ran"),
                )));
            }
            if let Some(end) = stopped(&now) {
                return Err(CallError::Ended(end));
            }
            if now.paused {
                wall.block_on(wall.engine().unpause(id)).map_err(|e| {
                    CallError::Refused(Refusal::new(
                        Reason::Environment,
                        format!("resuming the paused session failed ({e}); nothing ran"),
                    ))
                })?;
                // The thaw is itself an event: the next call reads back again.
                continue;
            }
            *stamp = taken;
        }
        Ok(())
    }

    /// After a call: a main process that ended takes the session with it. Only a
    /// container the event stream cannot vouch for is read back.
    fn after_call(&self) -> Option<Ending> {
        let wall = self.facts.wall.as_ref()?;
        self.opened.iter().zip(&self.stamps).find_map(|((id, _), stamp)| {
            if wall.watch().unchanged(id, *stamp) {
                return None;
            }
            wall.block_on(wall.engine().inspect(id)).ok().and_then(|n| stopped(&n))
        })
    }

    fn limits(&self, timeout: Duration) -> t::Limits {
        self.facts.limits.wit(timeout, self.facts.limits.session_disk_mb)
    }

    /// Runs one plugin method under the call's budget.
    fn dispatch(
        &mut self,
        timeout: Duration,
        f: impl FnOnce(
            &mut Store<PluginState>,
            &ProviderPlugin,
            ResourceAny,
        ) -> wasmtime::Result<Result<wit::Answer, wit::CallError>>,
    ) -> Result<wit::Answer, CallError> {
        let Some(handle) = self.handle else {
            return Err(CallError::Ended(Ending::new(SessionEnd::Closed, "the session is closed; nothing ran")));
        };
        let budget = timeout + CALL_GRACE;
        let data = self.store.data_mut();
        data.deadline = Instant::now() + budget;
        data.http_deadline = data.deadline;
        self.store.set_epoch_deadline(Engine::deadline_ticks(budget));
        let answered = f(&mut self.store, &self.plugin, handle);
        let state = self.store.data();
        match answered {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(wit::CallError::Refused(r))) => {
                Err(CallError::Refused(Refusal::new(reason(r.reason), state.redacted(&r.message))))
            }
            Ok(Err(wit::CallError::Ended(e))) => Err(CallError::Ended(redacted_ending(state, e))),
            Ok(Err(wit::CallError::MayHaveRun(f))) => Err(CallError::MayHaveRun {
                detail: state.redacted(&f.detail),
                ended: f.ended.map(|e| redacted_ending(state, e)),
            }),
            Err(e) => {
                // A trapped instance cannot take another call.
                let end = trap(format!("{e:#}"));
                self.broken = Some(end.clone());
                Err(CallError::MayHaveRun { detail: format!("the plugin failed: {e:#}"), ended: Some(end) })
            }
        }
    }
}

impl PluginSession {
    /// Asks a remote plugin to suspend its sandbox (a backend's pause), under the
    /// grace of a call; what it says is redacted as its calls' words are.
    fn suspend_remote(&mut self) -> Result<Suspension, String> {
        let Some(handle) = self.handle else { return Ok(Suspension::KeptRunning) };
        if self.broken.is_some() {
            return Ok(Suspension::KeptRunning);
        }
        let data = self.store.data_mut();
        data.deadline = Instant::now() + CALL_GRACE;
        data.http_deadline = data.deadline;
        self.store.set_epoch_deadline(Engine::deadline_ticks(CALL_GRACE));
        match self.plugin.plimsoll_provider_provider().session().call_suspend(&mut self.store, handle) {
            Ok(Ok(true)) => Ok(Suspension::Released),
            Ok(Ok(false)) => Ok(Suspension::KeptRunning),
            Ok(Err(why)) => Err(self.store.data().redacted(&why)),
            Err(e) => {
                let end = trap(format!("{e:#}"));
                self.broken = Some(end);
                Err(format!("the plugin failed: {e:#}"))
            }
        }
    }

    /// Serves `grant` through the session's socket for one call: the slot holds
    /// its broker and the socket describes its client to processes that start.
    fn arm(&self, grant: &Grant) -> Result<Arc<GrantSlot>, CallError> {
        let Some(SessionSocket { socket, per_call: Some(slot) }) = &self.socket else {
            // Made without a socket (or holding one grant for every call): nothing can reach a broker.
            return Err(Refusal::unsupported(format!(
                "this {} session was opened without a way to the broker, so its calls cannot name a grant; open it while a profile that allows sessions is available to the caller",
                self.facts.name
            ))
            .into());
        };
        socket.describe(grant).map_err(|e| {
            Refusal::new(Reason::Environment, format!("the call's grant could not be described to the session: {e}"))
        })?;
        slot.set(grant.api.clone());
        Ok(slot.clone())
    }

    /// Opens the guard to `grant` for one call of a remote session: a fresh
    /// credential (redacted from the session's words while it lives) and the
    /// client the plugin installs for that call.
    fn guard_ticket(&mut self, grant: &Grant) -> Result<(Ticket, wit::GuardGrant), CallError> {
        let Some(SessionGuard { access, held: None }) = &self.guard else {
            // Opened without the guard (or holding one grant for every call).
            return Err(Refusal::unsupported(format!(
                "this {} session was opened without a way to the broker, so its calls cannot name a grant; open it while a profile that allows sessions is available to the caller",
                self.facts.name
            ))
            .into());
        };
        let ticket = access.guard.issue(grant.api.clone()).map_err(|e| {
            Refusal::new(Reason::Environment, format!("the call's guard credential could not be made: {e}"))
        })?;
        let record = guard_grant(access, &ticket, grant);
        self.store.data_mut().secrets.push(ticket.credential().to_string());
        Ok((ticket, record))
    }

    /// Opens the way to a call's `grant`: behind the host's own wall the session's
    /// socket serves it; in a relayed sandbox the relay's slot serves it and the
    /// plugin describes its client for the call; any other remote sandbox gets a
    /// guard credential of its own.
    fn open_grant(&mut self, grant: Option<&Grant>) -> Result<CallGrant, CallError> {
        Ok(match grant {
            None => CallGrant::None,
            Some(g) if self.facts.wall.is_some() => CallGrant::Armed(self.arm(g)?),
            Some(g) if self.relayed.is_some() => {
                // The relay started at the open; the plugin describes the call's
                // client beside it for the call and removes it after.
                let Some((_, Some(slot))) = &self.relayed else {
                    return Err(Refusal::request(format!(
                        "this {} session holds the grant it was opened with; its calls cannot name another",
                        self.facts.name
                    ))
                    .into());
                };
                slot.set(g.api.clone());
                CallGrant::Relayed(slot.clone(), super::provider::relay_call(g))
            }
            Some(g) => {
                let (ticket, record) = self.guard_ticket(g)?;
                CallGrant::Guard(ticket, record)
            }
        })
    }

    /// Closes what [`PluginSession::open_grant`] opened, once the call has ended.
    fn close_grant(&mut self, opened: CallGrant) -> Result<(), CallError> {
        match opened {
            CallGrant::None => Ok(()),
            CallGrant::Armed(slot) => self.disarm(slot),
            CallGrant::Relayed(slot, _) => {
                slot.clear();
                Ok(())
            }
            CallGrant::Guard(ticket, _) => {
                // The guard closes to the call's credential as the ticket drops; its
                // words were redacted while the call ran.
                self.store.data_mut().secrets.retain(|c| c != ticket.credential());
                Ok(())
            }
        }
    }

    /// Ends the call's grant: the slot answers 503 again and no client is described.
    fn disarm(&self, slot: Arc<GrantSlot>) -> Result<(), CallError> {
        slot.clear();
        match &self.socket {
            Some(s) => s.socket.undescribe().map_err(|e| {
                // A description left behind would install the grant's client in later
                // processes, so the session ends; the snippet ran, its answer is lost.
                let detail = format!("the call's grant description could not be removed: {e}");
                let ending = Ending::new(SessionEnd::BoundaryFailed, detail.clone());
                CallError::MayHaveRun { detail, ended: Some(ending) }
            }),
            None => Ok(()),
        }
    }
}

/// The way a session call's grant was opened, closed again after the call.
enum CallGrant {
    /// The call names no grant.
    None,
    /// Behind the host's wall: the session's socket serves the grant's broker.
    Armed(Arc<GrantSlot>),
    /// A remote sandbox: the guard admits the ticket's credential; the plugin
    /// installs the record's client for the call.
    Guard(Ticket, wit::GuardGrant),
    /// A relayed sandbox: the slot serves the grant's broker through the relay
    /// started at the open; the plugin writes the record's description for the call.
    Relayed(Arc<GrantSlot>, wit::RelayGrant),
}

impl CallGrant {
    /// The grant the plugin is handed for the call.
    fn record(&self) -> Option<wit::Grant> {
        match self {
            CallGrant::Guard(_, r) => Some(wit::Grant::Guard(r.clone())),
            CallGrant::Relayed(_, r) => Some(wit::Grant::Relay(r.clone())),
            CallGrant::None | CallGrant::Armed(_) => None,
        }
    }
}

impl Session for PluginSession {
    fn call(&mut self, call: Call<'_>) -> Result<Answered, CallError> {
        if let Some(end) = &self.broken {
            return Err(CallError::Ended(end.clone()));
        }
        let floor = match &call {
            Call::Snippet(s) => s.floor,
            Call::Project { floor, .. } => *floor,
            Call::Cell(c) => c.floor,
        };
        let evidence = self.evidence();
        provider::check_floor(evidence.tier, floor)?;
        self.read_back()?;
        let answer = match call {
            Call::Cell(c) => {
                let files = wit_files(c.files);
                let limits = self.limits(c.timeout);
                let language = c.language.as_str();
                self.dispatch(c.timeout, |store, plugin, h| {
                    plugin.plimsoll_provider_provider().session().call_cell(store, h, language, c.code, &files, limits)
                })?
            }
            Call::Snippet(s) => {
                let opened = self.open_grant(s.grant)?;
                let limits = self.limits(s.timeout);
                let language = s.language.as_str();
                let record = opened.record();
                let answer = self.dispatch(s.timeout, |store, plugin, h| {
                    plugin.plimsoll_provider_provider().session().call_snippet(
                        store,
                        h,
                        language,
                        s.code,
                        limits,
                        record.as_ref(),
                    )
                });
                self.close_grant(opened)?;
                answer?
            }
            Call::Project { project, timeout, grant, .. } => {
                let opened = self.open_grant(grant)?;
                let files = wit_files(&project.files);
                let limits = self.limits(timeout);
                let record = opened.record();
                let answer = self.dispatch(timeout, |store, plugin, h| {
                    plugin.plimsoll_provider_provider().session().call_project(
                        store,
                        h,
                        &files,
                        &project.steps,
                        &project.artifacts,
                        limits,
                        record.as_ref(),
                    )
                });
                self.close_grant(opened)?;
                answer?
            }
        };
        let output = match answer.output {
            wit::CallOutput::Snippet(r) => Output::JavaScript(snippet_result(r)),
            wit::CallOutput::Project(r) => Output::Project(project_result(r)),
            wit::CallOutput::Cell(r) => Output::Cell(cell_result(r)),
        };
        let ended = answer.ended.map(|e| redacted_ending(self.store.data(), e)).or_else(|| self.after_call());
        Ok(Answered { output, evidence, ended })
    }

    fn suspend(&mut self) -> Result<Suspension, String> {
        let Some(wall) = &self.facts.wall else { return self.suspend_remote() };
        // Frozen by the host itself: the next call reads back (and thaws) whatever
        // the event stream has delivered by then.
        self.stamps.iter_mut().for_each(|s| *s = None);
        for (id, _) in &self.opened {
            wall.block_on(wall.engine().pause(id)).map_err(|e| format!("pausing the session's container: {e}"))?;
        }
        Ok(Suspension::Released)
    }

    fn close(&mut self) {
        if let Some(handle) = self.handle.take() {
            let data = self.store.data_mut();
            data.deadline = Instant::now() + CALL_GRACE;
            // A remote plugin deletes its sandbox over HTTP, however long the session idled.
            data.http_deadline = data.deadline;
            self.store.set_epoch_deadline(Engine::deadline_ticks(CALL_GRACE));
            if self.broken.is_none() {
                // The plugin's own close is a courtesy; the host removes the containers below.
                let _ = self.plugin.plimsoll_provider_provider().session().call_close(&mut self.store, handle);
            }
            let _ = handle.resource_drop(&mut self.store);
        }
        // The sandbox is gone (or going to the releaser): its relay streams and
        // the socket they reach end with it.
        self.store.data_mut().relays = super::http::Relays::default();
        self.relayed = None;
        // A remote sandbox the plugin's close did not delete goes to the releaser
        // when the store drops (the book holds its capacity meanwhile).
        let Some(wall) = self.facts.wall.clone() else { return };
        for (id, _) in &self.opened {
            wall.watch().forget(id);
        }
        let live = std::mem::take(&mut self.store.data_mut().live);
        for id in live {
            if let Err(e) = wall.block_on(wall.engine().remove(&id)) {
                eprintln!(
                    "plugin {}: removing session container {id} failed ({e}); the orphan sweep will retry",
                    self.facts.name
                );
            }
        }
    }
}

impl Drop for PluginSession {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inspection() -> Inspection {
        Inspection { memory_mb: 256, running: true, ..Inspection::default() }
    }

    /// A read-back of a main process that ended with `code`, the OOM killer's or not.
    fn ended(code: i64, oom_killed: bool) -> Inspection {
        Inspection { running: false, oom_killed, exit_code: Some(code), ..inspection() }
    }

    #[test]
    fn a_stopped_main_process_ends_the_session_naming_the_memory_limit_on_oom() {
        assert_eq!(stopped(&inspection()), None);
        assert_eq!(
            stopped(&ended(137, true)),
            Some(Ending::new(
                SessionEnd::MainProcessEnded,
                "the sandbox's main process ended (out of memory; the limit is 256 MiB)"
            ))
        );
        assert_eq!(
            stopped(&ended(0, false)).map(|e| e.detail),
            Some("the sandbox's main process ended (exit status 0)".into())
        );
        assert_eq!(
            stopped(&ended(137, false)),
            Some(Ending::new(
                SessionEnd::SandboxChanged,
                "the session's container was stopped from outside (exit status 137); nothing ran"
            ))
        );
    }
}
