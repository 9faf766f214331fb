//! A verified plugin as a [`Provider`]: each call gets a fresh store (bounded by an
//! epoch deadline and a memory cap), and the host, not the plugin, states the tier.

use std::sync::Arc;
use std::time::{Duration, Instant};

use plimsoll_core::provider::{
    self, Description, Evidence, Figure, Grant, GrantSlot, GrantSupport, KindSupport, Provider, Ran, RunError,
    SessionReach, Snippet,
};
use plimsoll_core::session::Opened;
use plimsoll_core::validate::Language;
use plimsoll_core::wire::{
    Artifact, JavaScriptResult, ModuleResult, ModuleRun, ProjectFile, ProjectOutcome, ProjectResult, ProjectRun,
    StepResult,
};
use plimsoll_core::{Floor, Reason, Refusal, Tier};
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::WasiCtxBuilder;

use super::guard::{Guard, Ticket};
use super::host::bindings::exports::plimsoll::provider::provider as wit;
use super::host::bindings::plimsoll::types::types as t;
use super::host::bindings::{ProviderPlugin, ProviderPluginPre};
use super::host::{PluginState, Used, Wall};
use super::http::{Allowed, HttpGate};
use super::socket::BrokerSocket;
use super::{Capability, PluginError, Verified};
use crate::engine::Engine;

/// The envelope every run of a plugin gets, as the operator configured it.
#[derive(Clone, Debug)]
pub struct PluginLimits {
    /// Memory per sandbox, swap included.
    pub memory_mb: u32,
    /// CPU per sandbox, thousandths of a core.
    pub cpus_milli: u32,
    /// Processes per sandbox.
    pub pids: u32,
    /// Writable storage per sandbox, all mounts together.
    pub disk_mb: u32,
    /// Bytes kept per output stream.
    pub max_output: u32,
    /// The budget of a snippet that states none.
    pub default_timeout: Duration,
    /// The longest snippet.
    pub max_timeout: Duration,
    /// The longest project.
    pub max_project_timeout: Duration,
    /// Memory for the plugin's own store.
    pub plugin_memory_mb: u32,
    /// A session's writable storage, all mounts together (`SANDBOX_SESSION_DISK_MB`).
    pub session_disk_mb: u32,
    /// The longest a session lives (`SANDBOX_SESSION_LIFETIME`); its container's
    /// lifetime label adds a margin, so the orphan sweep never takes a live one.
    pub session_lifetime: Duration,
    /// A remote backend's sandboxes at once, in flight and undeleted together
    /// (`SANDBOX_MAX_CONCURRENT`); 0: no cap of the provider's own.
    pub max_sandboxes: u32,
}

impl PluginLimits {
    /// One call's envelope as a plugin receives it: `timeout` and `disk_mb`, the rest
    /// as configured.
    pub(super) fn wit(&self, timeout: Duration, disk_mb: u32) -> t::Limits {
        t::Limits {
            timeout_ms: u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX),
            memory_mb: self.memory_mb,
            cpus_milli: self.cpus_milli,
            pids: self.pids,
            disk_mb,
            max_output_bytes: self.max_output,
        }
    }
}

impl Default for PluginLimits {
    fn default() -> PluginLimits {
        PluginLimits {
            memory_mb: 256,
            cpus_milli: 1000,
            pids: 256,
            disk_mb: 160,
            max_output: 1 << 20,
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(60),
            max_project_timeout: Duration::from_secs(300),
            plugin_memory_mb: 128,
            session_disk_mb: 1024,
            session_lifetime: Duration::from_secs(30 * 60),
            max_sandboxes: 0,
        }
    }
}

/// Time the plugin's own code may take beyond the run's budget (creating and
/// removing containers, reading reports).
const PLUGIN_GRACE: Duration = Duration::from_secs(30);

/// Bytes kept per stream for a call that reads a runner's report: 16 MiB of step
/// output and 4 MiB of artifacts, base64-encoded, with room to spare.
const REPORT_CAP: usize = 32 << 20;

/// A loaded, verified provider plugin.
pub struct PluginProvider {
    pub(super) name: String,
    pub(super) max_tier: Tier,
    runtime: String,
    approved: Vec<Capability>,
    engine: Engine,
    pre: ProviderPluginPre<PluginState>,
    pub(super) wall: Option<Arc<Wall>>,
    pub(super) limits: PluginLimits,
    description: Description,
    sessions: bool,
    /// Outbound HTTP to the endpoints the operator mapped for this plugin.
    pub(super) http: Option<Arc<HttpGate>>,
    /// What the manifest lets the plugin ask of `http`.
    allowed: Allowed,
    /// For a plugin whose sandboxes are a remote backend's: the operator's cap on
    /// the tier it may be credited with.
    pub(super) remote_cap: Option<Tier>,
    /// The tier a remote plugin's smoke test proved (capped), stated before runs.
    proven: std::sync::OnceLock<Tier>,
    /// What `plimsoll:host/config` answers.
    settings: Arc<std::collections::BTreeMap<String, String>>,
    /// `settings` with what a remote plugin's smoke test proved and pinned (its
    /// evidence's claims named `pin:…`), which every later call is held to.
    pinned: std::sync::OnceLock<Arc<std::collections::BTreeMap<String, String>>>,
    /// A remote plugin's sandboxes as the host saw them made.
    book: Arc<super::book::Book>,
    /// The host's guard, through which a remote plugin's granted runs reach the broker.
    guard: Option<GuardAccess>,
    /// How the plugin says its sandboxes reach the broker.
    grant_way: wit::GrantWay,
}

/// The host's guard as a remote backend's granted runs reach it.
#[derive(Clone, Debug)]
pub struct GuardAccess {
    /// The guard, which admits each run's credential.
    pub guard: Arc<Guard>,
    /// Its URL as sandboxes reach it (`https`, port 443, a host name).
    pub url: String,
    /// That URL's host name.
    pub host: String,
}

/// Where the in-sandbox client trusts the vendor's proxy, which ends TLS on the
/// way to the guard: the system's bundle, which Node does not read by itself.
const GUARD_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// How one granted run reaches the broker.
enum Way {
    /// A socket the host mounts into every container the run creates.
    Socket(BrokerSocket),
    /// The guard, open to the run's credential while its ticket lives.
    /// (The ticket is held: dropping it closes the guard to the run.)
    Guard(Ticket, wit::GuardGrant),
    /// A socket mounted nowhere, which the host's relay streams reach (the
    /// plugin's `http.relay`), and the client the plugin installs.
    Relay(BrokerSocket, wit::RelayGrant),
}

impl Way {
    fn socket(&self) -> Option<&BrokerSocket> {
        match self {
            Way::Socket(s) => Some(s),
            Way::Guard(..) | Way::Relay(..) => None,
        }
    }

    fn grant(&self) -> Option<wit::Grant> {
        match self {
            Way::Socket(_) => None,
            Way::Guard(_, g) => Some(wit::Grant::Guard(g.clone())),
            Way::Relay(_, g) => Some(wit::Grant::Relay(g.clone())),
        }
    }

    /// The credential the plugin is handed for the run, kept out of its words.
    fn secret(&self) -> Option<String> {
        match self {
            Way::Guard(ticket, _) => Some(ticket.credential().to_string()),
            Way::Relay(socket, _) => Some(socket.token().to_string()),
            Way::Socket(_) => None,
        }
    }

    /// `text` without the run's credential.
    fn redact(&self, text: String) -> String {
        match self.secret() {
            Some(secret) => text.replace(&secret, "[redacted]"),
            None => text,
        }
    }
}

fn file(path: &str, text: &str) -> t::File {
    t::File { path: path.into(), content: text.as_bytes().to_vec() }
}

/// The client's files a granted remote run installs, with `preamble` when the
/// grant has one.
fn client_files(preamble: &str) -> Vec<t::File> {
    let mut client = vec![
        file("host.js", super::socket::NODE_CLIENT),
        file("routes.js", super::socket::ROUTE_CHECKS),
        file("plimsoll_host.py", super::socket::PYTHON_CLIENT),
    ];
    if !preamble.is_empty() {
        client.push(file(super::socket::PREAMBLE, preamble));
    }
    client
}

/// The client a relayed run installs: the socket's own variables, its paths
/// in the plugin's directory, and `preamble` (none for a session whose calls
/// name their own grants: each call's is described with it).
fn relay_grant(socket: &BrokerSocket, preamble: &str) -> wit::RelayGrant {
    let env = socket.mount().env.into_iter().map(|(k, v)| (k, v.replace(plimsoll_containers::BROKER_TARGET, "{dir}")));
    wit::RelayGrant { socket: super::socket::SOCKET.into(), client: client_files(preamble), env: env.collect() }
}

/// What a relayed session writes beside its client for one call naming `grant`
/// (and removes after): the files that describe the call's client.
pub(super) fn relay_call(grant: &Grant) -> wit::RelayGrant {
    let client = super::socket::description(grant).into_iter().map(|(name, text)| file(name, &text)).collect();
    wit::RelayGrant { socket: super::socket::SOCKET.into(), client, env: Vec::new() }
}

/// The client a granted remote run installs, and how it reaches `access`.
pub(super) fn guard_grant(access: &GuardAccess, ticket: &Ticket, grant: &Grant) -> wit::GuardGrant {
    let client = client_files(&grant.preamble);
    let env = [
        ("PLIMSOLL_HOST_GUARD", access.url.clone()),
        ("PLIMSOLL_HOST_GLOBAL", grant.global.clone()),
        ("PLIMSOLL_HOST_ROUTES", grant.routes.join("\n")),
        ("NODE_OPTIONS", "--require={dir}/host.js".to_string()),
        ("NODE_EXTRA_CA_CERTS", GUARD_CA_BUNDLE.to_string()),
        ("PYTHONPATH", "{dir}".to_string()),
    ];
    wit::GuardGrant {
        url: access.url.clone(),
        host: access.host.clone(),
        header: super::guard::HEADER.to_string(),
        credential: ticket.credential().to_string(),
        client,
        env: env.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
    }
}

impl std::fmt::Debug for PluginProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginProvider").field("name", &self.name).field("runtime", &self.runtime).finish()
    }
}

fn component_error(name: &str, e: impl std::fmt::Display) -> PluginError {
    PluginError::Component { name: name.into(), error: e.to_string() }
}

pub(super) fn reason(r: t::RefusalReason) -> Reason {
    match r {
        t::RefusalReason::Request => Reason::Request,
        t::RefusalReason::Permission => Reason::Permission,
        t::RefusalReason::Protocol => Reason::Protocol,
        t::RefusalReason::Unsupported => Reason::Unsupported,
        t::RefusalReason::Isolation => Reason::Isolation,
        t::RefusalReason::Capacity => Reason::Capacity,
        t::RefusalReason::Environment => Reason::Environment,
    }
}

fn wit_tier(t: t::Tier) -> Tier {
    match t {
        t::Tier::Unknown => Tier::Unknown,
        t::Tier::None => Tier::None,
        t::Tier::Process => Tier::Process,
        t::Tier::Container => Tier::Container,
        t::Tier::Kernel => Tier::Kernel,
        t::Tier::Vm => Tier::Vm,
    }
}

impl PluginProvider {
    /// Compiles (or loads from the cache) a verified plugin, links the capabilities
    /// the operator approved, and reads its description. `runtime` is the container
    /// runtime runs use; the tier follows from it through the wall.
    ///
    /// # Errors
    ///
    /// The component does not compile, link, instantiate or describe itself.
    pub fn new(
        engine: &Engine,
        verified: Verified,
        approved: Vec<Capability>,
        wall: Option<Arc<Wall>>,
        runtime: &str,
        limits: PluginLimits,
    ) -> Result<PluginProvider, PluginError> {
        let name = verified.manifest.name.clone();
        let allowed = Allowed::of(&verified.manifest);
        let max_tier = verified.manifest.max_tier.ok_or_else(|| {
            component_error(
                &name,
                "a provider plugin's plugin.toml must state max-tier (process, container, kernel or vm)",
            )
        })?;
        let loaded = engine.load(&name, &verified.component).map_err(|e| component_error(&name, e))?;
        super::check_contract(&verified, super::manifest::PluginKind::Provider, &loaded.component, engine)?;
        let mut linker: Linker<PluginState> = Linker::new(engine.wasmtime());
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| component_error(&name, e))?;
        ProviderPlugin::add_to_linker::<PluginState, wasmtime::component::HasSelf<PluginState>>(&mut linker, |s| s)
            .map_err(|e| component_error(&name, e))?;
        let pre = linker.instantiate_pre(&loaded.component).map_err(|e| component_error(&name, format!("{e:#}")))?;
        let pre = ProviderPluginPre::new(pre).map_err(|e| component_error(&name, format!("{e:#}")))?;
        let mut p = PluginProvider {
            name: name.clone(),
            max_tier,
            runtime: runtime.into(),
            approved,
            engine: engine.clone(),
            pre,
            wall,
            limits,
            description: Description {
                name: name.clone(),
                snippet: None,
                project: None,
                module: None,
                memory_mb: 0,
                policy: String::new(),
            },
            sessions: false,
            http: None,
            allowed,
            remote_cap: None,
            proven: std::sync::OnceLock::new(),
            settings: Arc::default(),
            pinned: std::sync::OnceLock::new(),
            book: Arc::default(),
            guard: None,
            grant_way: wit::GrantWay::None,
        };
        let d = p
            .call(Duration::from_secs(10), 0, |store, plugin| plugin.plimsoll_provider_provider().call_describe(store))
            .0
            .map_err(|e| component_error(&name, format!("describe: {e}")))?;
        // The wire name is the manifest's (the operator may sign a vendor's
        // component under a name of their own); the plugin's is the backend's.
        p.description = p.describe_from(&d);
        p.sessions = d.sessions;
        p.grant_way = d.grants;
        Ok(p)
    }

    /// The provider, its plugin's granted runs reaching the broker through the
    /// host's guard (when the plugin says its sandboxes can).
    #[must_use]
    pub fn with_guard(mut self, access: GuardAccess) -> PluginProvider {
        self.guard = Some(access);
        self
    }

    /// The guard this provider's granted runs reach, for the daemon to serve.
    pub fn guard(&self) -> Option<Arc<Guard>> {
        self.guard.as_ref().map(|a| Arc::clone(&a.guard))
    }

    /// The provider, its plugin's requests going out through `gate` (the
    /// endpoints the operator mapped, with the credentials the host holds).
    #[must_use]
    pub fn with_http(mut self, gate: Arc<HttpGate>) -> PluginProvider {
        self.http = Some(gate);
        self
    }

    /// The provider of a remote backend reached through `gate`, credited at most
    /// `cap` (and its manifest's `max-tier`), and only for what the plugin checked
    /// and reported after its calls reached the backend.
    #[must_use]
    pub fn remote(mut self, gate: Arc<HttpGate>, cap: Tier) -> PluginProvider {
        self.http = Some(gate);
        self.remote_cap = Some(cap);
        self
    }

    /// The provider, answering its plugin's `config` reads from `settings`.
    #[must_use]
    pub fn with_settings(mut self, settings: std::collections::BTreeMap<String, String>) -> PluginProvider {
        self.settings = Arc::new(settings);
        self
    }

    fn describe_from(&self, d: &wit::Description) -> Description {
        let identity = match self.wall.as_ref().map(|w| w.lockdown().images.keys().cloned().collect::<Vec<_>>()) {
            Some(ids) if ids.len() == 1 => format!("docker-image:{}", ids[0]),
            _ => String::new(),
        };
        let languages: Vec<Language> = d.languages.iter().filter_map(|l| Language::parse(l).ok()).collect();
        let kind = |max_ms: u32, ceiling: Duration, default: Duration| KindSupport {
            identity: identity.clone(),
            software_identity: String::new(),
            default_timeout: default.min(ceiling),
            max_timeout: Duration::from_millis(u64::from(max_ms)).min(ceiling),
            languages: languages.clone(),
        };
        Description {
            name: self.name.clone(),
            snippet: Some(kind(d.max_timeout_ms, self.limits.max_timeout, self.limits.default_timeout)),
            project: d.projects.then(|| {
                kind(d.max_project_timeout_ms, self.limits.max_project_timeout, self.limits.max_project_timeout)
            }),
            // A module table runs as a project of the judge's table mode, which
            // every sandbox image images/build.sh makes carries; a remote
            // backend's template carries it only where its plugin says so (and
            // its smoke test proved it).
            module: (d.projects && (self.wall.is_some() || d.modules)).then(|| {
                kind(d.max_project_timeout_ms, self.limits.max_project_timeout, self.limits.max_project_timeout)
            }),
            memory_mb: self.limits.memory_mb,
            policy: String::new(),
        }
    }

    fn wit_limits(&self, timeout: Duration) -> t::Limits {
        self.limits.wit(timeout, self.limits.disk_mb)
    }

    /// A fresh store for the plugin, bounded by `budget` (plus the plugin's grace)
    /// and its memory cap; each process it runs keeps `collect_cap` bytes per stream.
    pub(super) fn store(&self, budget: Duration, collect_cap: usize) -> Store<PluginState> {
        let mut store = self.unbooked_store(budget, collect_cap);
        store.data_mut().book = self.remote_cap.map(|_| (Arc::clone(&self.book), self.book.begin()));
        store
    }

    /// A store whose call is not in the book (the sweep's own).
    fn unbooked_store(&self, budget: Duration, collect_cap: usize) -> Store<PluginState> {
        let limits: StoreLimits =
            StoreLimitsBuilder::new().memory_size(self.limits.plugin_memory_mb as usize * 1024 * 1024).build();
        let state = PluginState {
            wasi: WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
            name: self.name.clone(),
            approved: self.approved.clone(),
            wall: self.wall.clone(),
            deadline: Instant::now() + budget,
            http_deadline: Instant::now() + budget + PLUGIN_GRACE,
            collect_cap,
            used: Used::default(),
            live: Default::default(),
            limits,
            http: self.http.clone(),
            allowed: self.allowed.clone(),
            broker: None,
            settings: Arc::clone(self.pinned.get().unwrap_or(&self.settings)),
            book: None,
            secrets: Vec::new(),
            relay_to: None,
            relays: super::http::Relays::default(),
        };
        let mut store = Store::new(self.engine.wasmtime(), state);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(Engine::deadline_ticks(budget + PLUGIN_GRACE));
        store
    }

    /// Runs one export call in a fresh store; returns what the call used.
    fn call<T>(
        &self,
        budget: Duration,
        collect_cap: usize,
        f: impl FnOnce(&mut Store<PluginState>, &ProviderPlugin) -> wasmtime::Result<T>,
    ) -> (Result<T, String>, Used) {
        self.call_granted(budget, collect_cap, None, f)
    }

    /// As [`PluginProvider::call`], with every container the call creates given
    /// the run's broker mount, or the run's guard credential kept out of the
    /// plugin's log lines.
    fn call_granted<T>(
        &self,
        budget: Duration,
        collect_cap: usize,
        way: Option<&Way>,
        f: impl FnOnce(&mut Store<PluginState>, &ProviderPlugin) -> wasmtime::Result<T>,
    ) -> (Result<T, String>, Used) {
        let mut store = self.store(budget, collect_cap);
        store.data_mut().broker = way.and_then(Way::socket).map(BrokerSocket::mount);
        store.data_mut().secrets.extend(way.and_then(Way::secret));
        if let Some(Way::Relay(socket, _)) = way {
            store.data_mut().relay_to = Some(socket.path());
        }
        let result = self
            .pre
            .instantiate(&mut store)
            .and_then(|plugin| f(&mut store, &plugin))
            .map_err(|e| format!("the plugin failed: {e:#}"));
        // Removing what the call left behind happens when the state drops.
        let used = std::mem::take(&mut store.data_mut().used);
        drop(store);
        (result, used)
    }

    fn evidence(&self, used: &Used, e: &t::Evidence) -> Evidence {
        evidence_of(self.wall.as_deref(), self.remote_cap, self.max_tier, used, e)
    }

    /// A plugin error after a call: a refusal stands only if no container was
    /// created; otherwise the code may have run, whatever the plugin says.
    fn run_error(used: &Used, e: wit::RunError) -> RunError {
        match e {
            wit::RunError::Refused(r) if !used.may_have_run() => {
                RunError::Refused(Refusal::new(reason(r.reason), r.message))
            }
            wit::RunError::Refused(r) => {
                RunError::MayHaveRun(format!("the plugin refused after creating a sandbox: {}", r.message))
            }
            wit::RunError::MayHaveRun(s) => RunError::MayHaveRun(s),
        }
    }

    /// `e` without any credential: those the gate attaches, and the run's
    /// guard credential when `way` holds one.
    fn scrubbed(&self, e: RunError, way: Option<&Way>) -> RunError {
        let clean = |text: &str| {
            let text = self.redact(text);
            match way {
                Some(w) => w.redact(text),
                None => text,
            }
        };
        match e {
            RunError::Refused(r) => RunError::Refused(Refusal::new(r.reason, clean(&r.message))),
            RunError::MayHaveRun(m) => RunError::MayHaveRun(clean(&m)),
        }
    }

    /// `text` with every credential the plugin's gate attaches redacted.
    fn redact(&self, text: &str) -> String {
        self.http.as_ref().map_or_else(|| text.to_string(), |g| g.redact(text))
    }

    fn failed(used: &Used, msg: String) -> RunError {
        if !used.may_have_run() {
            RunError::Refused(Refusal::new(Reason::Environment, format!("nothing ran: {msg}")))
        } else {
            RunError::MayHaveRun(msg)
        }
    }

    /// A remote backend's reconciliation: the plugin deletes every sandbox stamped
    /// with this daemon's instance but those of the calls in flight; then what the
    /// host counts as undeleted is what it still holds. Returns the IDs deleted.
    ///
    /// # Errors
    ///
    /// The plugin could not list or failed; nothing the host counts changes.
    pub fn sweep(&self) -> Result<Vec<String>, String> {
        if self.remote_cap.is_none() {
            return Ok(Vec::new());
        }
        let _sweeping = self.book.sweeping();
        let keep = self.book.in_flight();
        let mut store = self.unbooked_store(Duration::from_secs(60), 0);
        let r = self
            .pre
            .instantiate(&mut store)
            .and_then(|plugin| plugin.plimsoll_provider_provider().call_sweep(&mut store, &keep))
            .map_err(|e| format!("sweep: the plugin failed: {e:#}"));
        drop(store);
        let deleted = r?.map_err(|e| format!("sweep: {}", self.redact(&e)))?;
        if let Some(gate) = &self.http {
            self.book.settle(|t| gate.holds(t) && !deleted.iter().any(|d| d == t));
        }
        Ok(deleted)
    }

    /// Deletes the sandboxes whose calls ended without the host seeing them
    /// deleted (left to this, off the result path, or whose delete failed);
    /// returns those deleted. Each holds capacity until it is gone.
    ///
    /// # Errors
    ///
    /// The plugin failed; nothing the host counts changes.
    pub fn release(&self) -> Result<Vec<String>, String> {
        let targets = self.book.undeleted();
        if self.remote_cap.is_none() || targets.is_empty() {
            return Ok(Vec::new());
        }
        let mut store = self.unbooked_store(Duration::from_secs(60), 0);
        let r = self
            .pre
            .instantiate(&mut store)
            .and_then(|plugin| plugin.plimsoll_provider_provider().call_release(&mut store, &targets))
            .map_err(|e| format!("release: the plugin failed: {e:#}"));
        drop(store);
        let deleted = r?;
        if let Some(gate) = &self.http {
            self.book.settle(|t| gate.holds(t) && !deleted.iter().any(|d| d == t));
        }
        Ok(deleted)
    }

    /// Waits up to `timeout` for a call to end leaving a sandbox to
    /// [`PluginProvider::release`]; whether one did.
    pub fn wait_for_leftovers(&self, timeout: Duration) -> bool {
        if self.remote_cap.is_none() {
            std::thread::sleep(timeout);
            return false;
        }
        self.book.wait_left(timeout)
    }

    /// Sandboxes not yet deleted, holding capacity until a release or a sweep deletes them.
    pub fn undeleted(&self) -> Vec<String> {
        self.book.undeleted()
    }

    /// Refuses a run while the backend's sandboxes (the calls in flight and those
    /// not yet deleted) fill the operator's cap.
    fn admit_remote(&self) -> Result<(), Refusal> {
        let cap = self.limits.max_sandboxes as usize;
        if self.remote_cap.is_none() || cap == 0 {
            return Ok(());
        }
        let undeleted = self.book.undeleted().len();
        if self.book.calls() + undeleted >= cap {
            return Err(Refusal::new(
                Reason::Capacity,
                format!(
                    "the {} provider is at capacity: {undeleted} sandbox(es) not yet deleted (a delete under way or failed) count against SANDBOX_MAX_CONCURRENT={cap} until they are gone; retry shortly",
                    self.name
                ),
            ));
        }
        Ok(())
    }

    /// The plugin's behavioural proof, run once at startup.
    ///
    /// # Errors
    ///
    /// The check that failed, in the plugin's words.
    pub fn smoke_test(&self) -> Result<Evidence, String> {
        let (r, used) = self.call(Duration::from_secs(120), REPORT_CAP, |store, plugin| {
            plugin.plimsoll_provider_provider().call_smoke_test(store)
        });
        let r = r.map_err(|e| format!("smoke test: {e}"))?;
        match r {
            Ok(e) => {
                let evidence = self.evidence(&used, &e);
                if self.remote_cap.is_some() {
                    let _ = self.proven.set(evidence.tier);
                    let pins = e.claims.iter().filter(|(k, _)| k.starts_with(PIN));
                    let mut settings = (*self.settings).clone();
                    settings.extend(pins.map(|(k, v)| (k.clone(), v.clone())));
                    let _ = self.pinned.set(Arc::new(settings));
                }
                Ok(evidence)
            }
            Err(r) => Err(format!("smoke test: {}", self.redact(&r.message))),
        }
    }
}

/// The prefix of a smoke test's evidence claims the host pins: handed back to
/// every later call as settings of the same names, so a plugin can refuse a
/// backend that changed since it was proved.
pub const PIN: &str = "pin:";

/// The refusal for a grant a plugin's runs cannot carry (a remote backend: the
/// host's socket cannot reach it); a grant is never dropped silently.
fn no_grants(name: &str, kind: &str) -> Refusal {
    Refusal::unsupported(format!("the {name} provider cannot carry a grant for {kind}"))
}

impl PluginProvider {
    /// Whether runs reach the broker: through the host's own container wall,
    /// which mounts the run's socket into every container the run creates, or,
    /// for a remote backend, through the host's guard or its relay, as the
    /// plugin says its sandboxes can.
    fn carries_grants(&self) -> bool {
        if self.wall.is_some() {
            return self.approved.contains(&Capability::Containers);
        }
        match self.grant_way {
            wit::GrantWay::Guard => self.guard.is_some(),
            wit::GrantWay::Relay => self.http.is_some(),
            wit::GrantWay::None => false,
        }
    }

    /// The wall whose runtime serves broker sockets, when this provider carries
    /// grants for `kind` through it.
    fn grant_wall(&self, kind: &str) -> Result<&Arc<Wall>, Refusal> {
        self.wall.as_ref().filter(|_| self.carries_grants()).ok_or_else(|| no_grants(&self.name, kind))
    }

    /// Opens the run's way to the broker when it holds a grant: its socket, or
    /// the guard opened to a fresh credential.
    fn way(&self, grant: Option<&Grant>, kind: &str) -> Result<Option<Way>, Refusal> {
        let Some(grant) = grant else { return Ok(None) };
        if !self.carries_grants() {
            return Err(no_grants(&self.name, kind));
        }
        if self.wall.is_some() {
            return BrokerSocket::open(grant, &self.grant_wall(kind)?.handle()).map(|s| Some(Way::Socket(s))).map_err(
                |e| Refusal::new(Reason::Environment, format!("the run's broker socket could not be made: {e}")),
            );
        }
        if self.grant_way == wit::GrantWay::Relay {
            let (socket, record) = self.relayed(Serving::Described(grant), ("run", kind))?;
            return Ok(Some(Way::Relay(socket, record)));
        }
        let access = self.guard.as_ref().ok_or_else(|| no_grants(&self.name, kind))?;
        let ticket = access.guard.issue(grant.api.clone()).map_err(|e| {
            Refusal::new(Reason::Environment, format!("the run's guard credential could not be made: {e}"))
        })?;
        let record = guard_grant(access, &ticket, grant);
        Ok(Some(Way::Guard(ticket, record)))
    }
}

impl PluginProvider {
    /// A relayed `whose` (run or session) broker socket, served on the gate's
    /// runtime and mounted nowhere, and the client the plugin installs;
    /// refused as no grant for `kind` without a gate.
    fn relayed(
        &self,
        serving: Serving<'_>,
        (whose, kind): (&str, &str),
    ) -> Result<(BrokerSocket, wit::RelayGrant), Refusal> {
        let gate = self.http.as_ref().ok_or_else(|| no_grants(&self.name, kind))?;
        let made = |e: std::io::Error| {
            Refusal::new(Reason::Environment, format!("the {whose}'s broker socket could not be made: {e}"))
        };
        Ok(match serving {
            Serving::Described(grant) => {
                let socket = BrokerSocket::open(grant, &gate.handle()).map_err(made)?;
                let record = relay_grant(&socket, &grant.preamble);
                (socket, record)
            }
            Serving::PerCall(slot) => {
                let socket = BrokerSocket::open_undescribed(slot, &gate.handle()).map_err(made)?;
                let record = relay_grant(&socket, "");
                (socket, record)
            }
        })
    }
}

/// What a relayed broker socket serves.
enum Serving<'a> {
    /// One grant, described to every process (a run, a session opened with it).
    Described(&'a Grant),
    /// Each call's grant, put in the slot around the call and described with it.
    PerCall(Arc<GrantSlot>),
}

/// A remote session's way to the broker: the host's guard, open to the
/// session's own credential for its life (opened with a grant: the daemon fills
/// its slot for each call) or to a credential made for each call naming one.
#[derive(Debug)]
pub(super) struct SessionGuard {
    pub(super) access: GuardAccess,
    /// The credential held for the session's life and the grant the plugin
    /// opened the sandbox with; none when each call names its own.
    pub(super) held: Option<(Ticket, wit::GuardGrant)>,
}

/// A relayed session's way to the broker, started when it opens.
#[derive(Debug)]
pub(super) struct SessionRelay {
    /// The socket the relay's streams reach, mounted nowhere.
    pub(super) socket: BrokerSocket,
    /// The client the plugin installs at the open.
    pub(super) record: wit::RelayGrant,
    /// The slot the session fills around each call that names a grant; none
    /// when the session holds one grant (the daemon fills that one's).
    pub(super) per_call: Option<Arc<GrantSlot>>,
}

/// A session's way to the broker, mounted when it opens.
#[derive(Debug)]
pub(super) struct SessionSocket {
    pub(super) socket: BrokerSocket,
    /// The slot the session arms around each call that names a grant; none when
    /// the session holds one grant (the daemon arms that slot).
    pub(super) per_call: Option<Arc<GrantSlot>>,
}

impl Provider for PluginProvider {
    fn describe(&self) -> Description {
        self.description.clone()
    }

    /// Deletes what the releaser has not yet, before the daemon goes.
    fn drain(&self) {
        if let Err(e) = self.release() {
            eprintln!("plugin {}: releasing its sandboxes at shutdown: {e}", self.name);
        }
    }

    fn figures(&self) -> Vec<Figure> {
        let Some(p) = self.wall.as_ref().and_then(|w| w.pool_stats()) else {
            return Vec::new();
        };
        let claims = "plimsoll_warm_pool_claims_total";
        let claims_help = "Fresh runs that asked the warm pool for a container, by outcome.";
        vec![
            Figure {
                name: "plimsoll_warm_pool_ready",
                help: "Started containers the warm pool holds for fresh runs.",
                counter: false,
                label: None,
                value: p.ready,
            },
            Figure {
                name: "plimsoll_warm_pool_wanted",
                help: "Started containers the warm pool aims to hold (its size for each snippet shape it keeps).",
                counter: false,
                label: None,
                value: p.wanted,
            },
            Figure {
                name: "plimsoll_warm_pool_making",
                help: "Containers the warm pool is making now (at most 4 at once, across shapes).",
                counter: false,
                label: None,
                value: p.making,
            },
            Figure { name: claims, help: claims_help, counter: true, label: Some(("outcome", "hit")), value: p.hits },
            Figure {
                name: claims,
                help: claims_help,
                counter: true,
                label: Some(("outcome", "miss")),
                value: p.misses,
            },
            Figure {
                name: "plimsoll_warm_pool_rejected_total",
                help: "Pooled containers removed at a claim because their read-back failed.",
                counter: true,
                label: None,
                value: p.rejected,
            },
            Figure {
                name: "plimsoll_warm_pool_fill_failures_total",
                help: "Containers the warm pool failed to make.",
                counter: true,
                label: None,
                value: p.fill_failures,
            },
        ]
    }

    fn grant_support(&self) -> GrantSupport {
        let carried = self.carries_grants();
        GrantSupport {
            snippets: carried && self.description.snippet.is_some(),
            projects: carried && self.description.project.is_some(),
        }
    }

    fn tier(&self) -> Tier {
        match (&self.wall, self.remote_cap) {
            (Some(w), _) => w.tier_of(&self.runtime).min(self.max_tier),
            (None, Some(_)) => self.proven.get().copied().unwrap_or(Tier::None),
            (None, None) => Tier::None,
        }
    }

    fn preflight(&self) -> Result<(), Refusal> {
        if let Some(w) = &self.wall
            && !w.healthy()
        {
            return Err(Refusal::new(Reason::Environment, "the container engine failed its last re-check"));
        }
        let r = self
            .call(Duration::from_secs(10), 0, |store, plugin| plugin.plimsoll_provider_provider().call_preflight(store))
            .0
            .map_err(|e| Refusal::new(Reason::Environment, e))?;
        r.map(|_| ()).map_err(|r| Refusal::new(reason(r.reason), self.redact(&r.message)))
    }

    fn run_snippet(&self, snippet: &Snippet<'_>) -> Result<Ran<JavaScriptResult>, RunError> {
        provider::check_floor(self.tier(), snippet.floor)?;
        self.admit_remote()?;
        let way = self.way(snippet.grant, "snippets")?;
        let limits = self.wit_limits(snippet.timeout);
        let lang = snippet.language.as_str();
        let cap = self.limits.max_output as usize;
        let broker = way.as_ref().and_then(Way::grant);
        let (r, used) = self.call_granted(snippet.timeout, cap, way.as_ref(), |store, plugin| {
            plugin.plimsoll_provider_provider().call_run_snippet(store, lang, snippet.code, limits, broker.as_ref())
        });
        let r = r.map_err(|e| self.scrubbed(Self::failed(&used, e), way.as_ref()))?;
        let (result, e) = r.map_err(|e| self.scrubbed(Self::run_error(&used, e), way.as_ref()))?;
        let evidence = self.evidence(&used, &e);
        after_run_floor(evidence.tier, snippet.floor)?;
        Ok(Ran { result: snippet_result(result), evidence })
    }

    fn run_project(
        &self,
        project: &ProjectRun,
        timeout: Duration,
        floor: Option<Floor>,
        grant: Option<&Grant>,
    ) -> Result<Ran<ProjectResult>, RunError> {
        provider::check_floor(self.tier(), floor)?;
        if self.description.project.is_none() {
            return Err(provider::unsupported_kind(&self.name, "projects").into());
        }
        self.admit_remote()?;
        let way = self.way(grant, "projects")?;
        let files = wit_files(&project.files);
        let limits = self.wit_limits(timeout);
        let broker = way.as_ref().and_then(Way::grant);
        let (r, used) = self.call_granted(timeout, REPORT_CAP, way.as_ref(), |store, plugin| {
            plugin.plimsoll_provider_provider().call_run_project(
                store,
                &files,
                &project.steps,
                &project.artifacts,
                limits,
                broker.as_ref(),
            )
        });
        let r = r.map_err(|e| self.scrubbed(Self::failed(&used, e), way.as_ref()))?;
        let (result, e) = r.map_err(|e| self.scrubbed(Self::run_error(&used, e), way.as_ref()))?;
        let evidence = self.evidence(&used, &e);
        after_run_floor(evidence.tier, floor)?;
        Ok(Ran { result: project_result(result), evidence })
    }

    fn run_module(
        &self,
        module: &ModuleRun,
        timeout: Duration,
        floor: Option<Floor>,
    ) -> Result<Ran<ModuleResult>, RunError> {
        crate::sims::check_module(module)?;
        let project = crate::sims::module_project(module);
        let Ran { result, evidence } = self.run_project(&project, timeout, floor, None)?;
        Ok(Ran { result: crate::sims::module_from_project(module, result), evidence })
    }

    fn session_support(&self) -> Option<KindSupport> {
        if self.sessions { self.description.snippet.clone() } else { None }
    }

    /// Behind the host's wall through the session's socket; a remote backend's
    /// through its guard (held from the open or opened for each call) or its
    /// relay (held from the open).
    fn session_grants(&self) -> bool {
        self.sessions && self.carries_grants()
    }

    /// A relayed backend's relay starts before the session's agent, which
    /// spares it: a call cannot start one the agent's sweep would not end.
    fn open_session(&self, floor: Option<Floor>, reach: SessionReach<'_>) -> Result<Opened, RunError> {
        if !self.sessions {
            return Err(provider::unsupported_kind(&self.name, "sessions").into());
        }
        provider::check_floor(self.tier(), floor)?;
        // A remote session holds one of the backend's sandboxes for its life.
        self.admit_remote()?;
        if self.wall.is_none() && self.grant_way == wit::GrantWay::Relay {
            // Its sandbox reaches the broker only through the host's relay,
            // started at the open (a running sandbox's agent would sweep one
            // started later): serving the session's grant, or each call's.
            let relay = match reach {
                SessionReach::Nothing => None,
                SessionReach::PerCall => {
                    let slot = Arc::new(GrantSlot::default());
                    let (socket, record) =
                        self.relayed(Serving::PerCall(slot.clone()), ("session", "session calls"))?;
                    Some(SessionRelay { socket, record, per_call: Some(slot) })
                }
                SessionReach::Held(g) => {
                    let (socket, record) = self.relayed(Serving::Described(g), ("session", "sessions"))?;
                    Some(SessionRelay { socket, record, per_call: None })
                }
            };
            return super::session::PluginSession::open(self, &self.pre, floor, super::session::Way::Relay(relay));
        }
        if self.wall.is_none() {
            // Its sandbox reaches the broker only through the guard.
            let guard = match (reach, &self.guard) {
                (SessionReach::Nothing, _) => None,
                (_, None) => return Err(no_grants(&self.name, "sessions").into()),
                (SessionReach::Held(g), Some(access)) => {
                    let ticket = access.guard.issue(g.api.clone()).map_err(|e| {
                        Refusal::new(
                            Reason::Environment,
                            format!("the session's guard credential could not be made: {e}"),
                        )
                    })?;
                    let record = guard_grant(access, &ticket, g);
                    Some(SessionGuard { access: access.clone(), held: Some((ticket, record)) })
                }
                (SessionReach::PerCall, Some(access)) => Some(SessionGuard { access: access.clone(), held: None }),
            };
            return super::session::PluginSession::open(self, &self.pre, floor, super::session::Way::Guard(guard));
        }
        let made = |e: std::io::Error| {
            Refusal::new(Reason::Environment, format!("the session's broker socket could not be made: {e}"))
        };
        // A running container cannot gain a mount: the socket is there from the open.
        let socket = match reach {
            SessionReach::Nothing => None,
            SessionReach::Held(g) => {
                let socket = BrokerSocket::open(g, &self.grant_wall("sessions")?.handle()).map_err(made)?;
                Some(SessionSocket { socket, per_call: None })
            }
            SessionReach::PerCall => {
                let slot = Arc::new(GrantSlot::default());
                let wall = self.grant_wall("sessions")?;
                let socket = BrokerSocket::open_undescribed(slot.clone(), &wall.handle()).map_err(made)?;
                Some(SessionSocket { socket, per_call: Some(slot) })
            }
        };
        super::session::PluginSession::open(self, &self.pre, floor, super::session::Way::Socket(socket))
    }
}

/// What a call stood behind, as the host states it. Behind the host's wall the
/// tier is what the wall justifies for what the call used: the weakest runtime it
/// created a container under. Behind a remote backend (`remote_cap`) it is what
/// the plugin states from the evidence it checked, and only once a call reached
/// the backend. Either way never above the manifest's `max_tier`, the operator's
/// cap or what the plugin claims; nothing otherwise. The environment is the one
/// image it used.
pub(super) fn evidence_of(
    wall: Option<&Wall>,
    remote_cap: Option<Tier>,
    max_tier: Tier,
    used: &Used,
    e: &t::Evidence,
) -> Evidence {
    let tier = match (wall, remote_cap) {
        (Some(wall), _) => {
            let weakest = used.runtimes.iter().map(|r| wall.tier_of(r)).min().unwrap_or(Tier::None);
            weakest.min(max_tier).min(wit_tier(e.tier))
        }
        (None, Some(cap)) if used.remote_writes > 0 => wit_tier(e.tier).min(max_tier).min(cap),
        (None, _) => Tier::None,
    };
    let environment = match used.images.iter().collect::<Vec<_>>().as_slice() {
        [only] => format!("docker-image:{only}"),
        _ => e.environment.clone(),
    };
    Evidence {
        tier,
        environment,
        software_identity: e.software_identity.clone().unwrap_or_default(),
        instance: e.instance.clone().unwrap_or_default(),
        policy: String::new(),
    }
}

/// Files as a plugin receives them.
pub(super) fn wit_files(files: &[ProjectFile]) -> Vec<t::File> {
    files.iter().map(|f| t::File { path: f.path.clone(), content: f.content.clone().into_bytes() }).collect()
}

/// A plugin's snippet result on the wire.
pub(super) fn snippet_result(r: t::SnippetResult) -> JavaScriptResult {
    JavaScriptResult {
        stdout: r.stdout.bytes,
        stderr: r.stderr.bytes,
        exit_code: r.exit_code,
        timed_out: r.timed_out,
        stdout_truncated: r.stdout.truncated,
        stderr_truncated: r.stderr.truncated,
        advice: Vec::new(),
    }
}

/// A plugin's project result on the wire.
pub(super) fn project_result(result: t::ProjectResult) -> ProjectResult {
    let outcome = match result.outcome {
        t::ProjectOutcome::Completed => ProjectOutcome::Completed,
        t::ProjectOutcome::SetupFailed => ProjectOutcome::SetupFailed,
        t::ProjectOutcome::TimedOut => ProjectOutcome::TimedOut,
        t::ProjectOutcome::ProtocolError => ProjectOutcome::ProtocolError,
    };
    ProjectResult {
        steps: result
            .steps
            .into_iter()
            .map(|s| StepResult {
                command: s.command,
                stdout: s.stdout.bytes,
                stderr: s.stderr.bytes,
                exit_code: s.exit_code,
                timed_out: s.timed_out,
                duration_ms: i64::from(s.duration_ms),
                stdout_truncated: s.stdout.truncated,
                stderr_truncated: s.stderr.truncated,
            })
            .collect(),
        outcome,
        artifacts: result.artifacts.into_iter().map(|a| Artifact { path: a.path, content: a.content }).collect(),
        outcome_detail: result.detail,
        artifacts_truncated: result.artifacts_truncated,
        advice: Vec::new(),
    }
}

/// The run happened, but below the floor: the caller gets no result, and the code
/// did run, so this is never a refusal.
pub(super) fn after_run_floor(tier: Tier, floor: Option<Floor>) -> Result<(), RunError> {
    match floor {
        Some(f) if !tier.meets(f) => Err(RunError::MayHaveRun(format!(
            "the run's evidence ({tier}) is below the request's floor ({f}); its result is withheld"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(runtimes: &[&str]) -> Used {
        Used { runtimes: runtimes.iter().map(|r| r.to_string()).collect(), ..Used::default() }
    }

    /// What a remote plugin's call used: `writes` requests that may change its backend.
    fn remote(writes: u32) -> Used {
        Used { remote_writes: writes, code_writes: writes, ..Used::default() }
    }

    fn refusal() -> wit::RunError {
        wit::RunError::Refused(t::Refusal { reason: t::RefusalReason::Unsupported, message: "no".into() })
    }

    #[test]
    fn a_relayed_run_gets_the_sockets_variables_in_the_plugins_directory_and_its_token_is_redacted() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
        let echo = Arc::new(super::super::socket::tests::Echo(std::sync::Mutex::default()));
        let grant = Grant {
            global: "host".into(),
            routes: vec!["GET /items/*".into()],
            preamble: "globalThis.sdk = 1;".into(),
            api: echo,
        };
        let socket = BrokerSocket::open(&grant, rt.handle()).expect("opened");
        let relayed = relay_grant(&socket, &grant.preamble);
        assert_eq!(relayed.socket, "host-api.sock");
        let files: Vec<&str> = relayed.client.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(files, ["host.js", "routes.js", "plimsoll_host.py", "preamble.js"]);
        let env: std::collections::BTreeMap<_, _> = relayed.env.iter().cloned().collect();
        assert_eq!(env["PLIMSOLL_HOST_API"], "{dir}/host-api.sock");
        assert_eq!(env["NODE_OPTIONS"], "--require={dir}/host.js");
        assert_eq!(env["PYTHONPATH"], "{dir}");
        assert_eq!(env["PLIMSOLL_HOST_TOKEN"], socket.token());
        assert_eq!(env["PLIMSOLL_HOST_ROUTES"], "GET /items/*");
        let way = Way::Relay(socket, relayed);
        let token = way.secret().expect("a relayed run's token");
        assert_eq!(way.redact(format!("the relay said {token}")), "the relay said [redacted]");
        assert!(matches!(way.grant(), Some(wit::Grant::Relay(_))));
        assert!(way.socket().is_none(), "the socket is mounted nowhere");
    }

    #[test]
    fn a_relayed_session_serving_each_calls_grant_describes_none_until_a_call_names_one() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
        let slot = Arc::new(GrantSlot::default());
        let socket = BrokerSocket::open_undescribed(slot, rt.handle()).expect("opened");
        // At the open: the relay's socket and token, but no routes and no preamble.
        let opened = relay_grant(&socket, "");
        let files: Vec<&str> = opened.client.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(files, ["host.js", "routes.js", "plimsoll_host.py"]);
        let env: std::collections::BTreeMap<_, _> = opened.env.iter().cloned().collect();
        assert_eq!(env["PLIMSOLL_HOST_API"], "{dir}/host-api.sock");
        assert!(!env.contains_key("PLIMSOLL_HOST_ROUTES") && !env.contains_key("PLIMSOLL_HOST_GLOBAL"), "{env:?}");
        // A call naming its grant: the files that describe it, nothing else.
        let echo = Arc::new(super::super::socket::tests::Echo(std::sync::Mutex::default()));
        let grant =
            Grant { global: "api".into(), routes: vec!["GET /items/*".into()], preamble: "1;".into(), api: echo };
        let call = relay_call(&grant);
        let described: Vec<(&str, String)> =
            call.client.iter().map(|f| (f.path.as_str(), String::from_utf8_lossy(&f.content).into_owned())).collect();
        assert_eq!(
            described,
            [("grant.json", r#"{"global":"api","routes":["GET /items/*"]}"#.to_string()), ("preamble.js", "1;".into())]
        );
        assert!(call.env.is_empty());
        let plain = Grant { preamble: String::new(), ..grant };
        assert_eq!(relay_call(&plain).client.len(), 1, "no preamble file for a grant without one");
    }

    #[test]
    fn a_plugin_refusal_stands_only_when_no_container_was_created() {
        let before = PluginProvider::run_error(&used(&[]), refusal());
        assert_eq!(before, RunError::Refused(Refusal::new(Reason::Unsupported, "no")));
        let after = PluginProvider::run_error(&used(&["runc"]), refusal());
        assert_eq!(after, RunError::MayHaveRun("the plugin refused after creating a sandbox: no".into()));
        // A remote plugin's reads change nothing; one write may have started code.
        let read_only = PluginProvider::run_error(&remote(0), refusal());
        assert_eq!(read_only, RunError::Refused(Refusal::new(Reason::Unsupported, "no")));
        let wrote = PluginProvider::run_error(&remote(1), refusal());
        assert_eq!(wrote, RunError::MayHaveRun("the plugin refused after creating a sandbox: no".into()));
    }

    #[test]
    fn a_plugin_failure_is_a_refusal_only_before_any_container() {
        let e = PluginProvider::failed(&used(&[]), "trap".into());
        assert_eq!(e, RunError::Refused(Refusal::new(Reason::Environment, "nothing ran: trap")));
        assert_eq!(PluginProvider::failed(&used(&["runsc"]), "trap".into()), RunError::MayHaveRun("trap".into()));
    }

    #[test]
    fn a_remote_plugin_is_credited_what_it_checked_capped_and_only_after_reaching_its_backend() {
        let claim = |tier| t::Evidence {
            tier,
            environment: "e2b-template:base".into(),
            software_identity: None,
            instance: None,
            claims: vec![],
        };
        let tier = |cap, used: &Used, claimed| evidence_of(None, cap, Tier::Vm, used, &claim(claimed)).tier;
        assert_eq!(tier(Some(Tier::Vm), &remote(1), t::Tier::Vm), Tier::Vm);
        // The operator's cap and the manifest's max-tier bound the claim.
        assert_eq!(tier(Some(Tier::Container), &remote(1), t::Tier::Vm), Tier::Container);
        assert_eq!(evidence_of(None, Some(Tier::Vm), Tier::Kernel, &remote(1), &claim(t::Tier::Vm)).tier, Tier::Kernel);
        // A claim without a call that reached the backend is worth nothing, as is one
        // from a plugin that is not remote.
        assert_eq!(tier(Some(Tier::Vm), &remote(0), t::Tier::Vm), Tier::None);
        assert_eq!(tier(None, &remote(3), t::Tier::Vm), Tier::None);
    }

    #[test]
    fn evidence_below_the_floor_withholds_the_result_as_may_have_run() {
        assert_eq!(after_run_floor(Tier::Kernel, Some(Floor::Container)), Ok(()));
        assert_eq!(after_run_floor(Tier::None, None), Ok(()));
        let e = after_run_floor(Tier::Container, Some(Floor::Kernel)).expect_err("below");
        assert!(
            matches!(e, RunError::MayHaveRun(m) if m.contains("(container) is below the request's floor (kernel)"))
        );
    }
}
