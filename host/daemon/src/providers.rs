//! The providers a daemon can run, built from configuration.

use std::sync::Arc;

use plimsoll_core::provider::{Description, Provider, Ran, RunError, Snippet};
use plimsoll_core::wire::JavaScriptResult;
use plimsoll_core::{Refusal, Tier};
use plimsoll_runtime::jail::frame::Hello;
use plimsoll_runtime::jail::{Jail, JailConfig};
use plimsoll_runtime::plugin::guard::Guard;
use plimsoll_runtime::plugin::http::GrpcBooking;
use plimsoll_runtime::plugin::manifest::Booking;
use plimsoll_runtime::plugin::{self, Capability, GuardAccess, PluginLimits, PluginProvider, Wall};
use plimsoll_runtime::{Engine, EngineConfig, PythonGuest, WasmConfig, WasmProvider};

use crate::config::{Backend, Config, DockerConfig, ProviderKind, ProviderPlugin, RemoteConfig, WasmEngine};
use crate::log::Log;

/// The text every run on a daemon without a provider gets.
pub const DISABLED: &str = "code execution sandbox is not configured";

/// The default provider: runs nothing, at tier `none`.
#[derive(Clone, Copy, Debug)]
pub struct Disabled;

impl Provider for Disabled {
    fn describe(&self) -> Description {
        Description {
            name: "disabled".into(),
            snippet: None,
            project: None,
            module: None,
            memory_mb: 0,
            policy: String::new(),
        }
    }

    fn tier(&self) -> Tier {
        Tier::None
    }

    fn preflight(&self) -> Result<(), Refusal> {
        Ok(())
    }

    fn run_snippet(&self, _: &Snippet<'_>) -> Result<Ran<JavaScriptResult>, RunError> {
        Err(Refusal::unsupported(DISABLED).into())
    }
}

/// Why the provider could not be built.
#[derive(Debug, thiserror::Error)]
#[error("building the {provider} provider: {message}")]
pub struct BuildError {
    /// The provider.
    pub provider: String,
    /// What failed.
    pub message: String,
}

/// Builds the configured provider; `log` hears what startup cleaned up.
///
/// # Errors
///
/// [`BuildError`] when its engine or component cannot be made ready.
pub fn build(config: &Config, log: Log) -> Result<Built, BuildError> {
    let mut guard = None;
    let mut swept = Vec::new();
    let provider: Arc<dyn Provider> = match &config.provider {
        ProviderKind::Disabled => Arc::new(Disabled),
        ProviderKind::Wasm => {
            let err =
                |e: plimsoll_runtime::RuntimeError| BuildError { provider: "wasm".into(), message: e.to_string() };
            let cache_dir = config.cache_dir.clone().or_else(EngineConfig::default_cache_dir);
            // Jailed, the daemon's own engine only loads the components (for their
            // identities and the workers' cache) and runs nothing.
            let max_instances = match config.wasm_engine {
                WasmEngine::Jailed => 16,
                WasmEngine::InProcess => (config.admission.max_concurrent * 2).max(64),
            };
            let engine = Engine::new(&EngineConfig { max_instances, cache_dir }).map_err(err)?;
            let mut wasm = WasmConfig::default();
            if config.resources.memory_mb > 0 {
                wasm.memory_mb = config.resources.memory_mb;
            }
            let mut provider = WasmProvider::new(&engine, wasm.clone()).map_err(err)?;
            let python = plimsoll_runtime::python::component_path(config.wasm_python.as_deref())
                .map_err(|message| BuildError { provider: "wasm".into(), message })?;
            if let Some(path) = &python {
                provider = provider.with_python(PythonGuest::from_file(&engine, path).map_err(err)?);
            }
            if config.wasm_engine == WasmEngine::Jailed {
                // The daemon loads every component first, so the workers find them
                // precompiled in the cache they may read (and cannot write).
                provider
                    .sims()
                    .library()
                    .preload()
                    .map_err(|message| BuildError { provider: "wasm".into(), message })?;
                let python = python.as_deref().zip(provider.python().map(|g| hex::encode(g.digest())));
                let jail = start_jail(config, &wasm, python)?;
                log.info(
                    "the wasm provider's engine runs in jailed workers",
                    &[
                        ("workers", serde_json::json!(jail.workers())),
                        ("runs_per_worker", serde_json::json!(jail.slots())),
                        ("walls", serde_json::json!(jail.ready().walls)),
                    ],
                );
                provider = provider.with_jail(jail);
            }
            Arc::new(provider)
        }
        ProviderKind::Plugin(name) => {
            let plugin = config
                .plugin
                .as_ref()
                .ok_or_else(|| BuildError { provider: name.clone(), message: "no plugin settings".into() })?;
            match &plugin.backend {
                Backend::Containers(docker) => {
                    let (p, gone) = docker_provider(config, plugin, docker, log)?;
                    swept = gone;
                    Arc::new(p)
                }
                Backend::Remote(remote) => {
                    let (p, gone) = remote_provider(config, plugin, remote, log)?;
                    guard = p.guard();
                    swept = gone;
                    p
                }
            }
        }
    };
    Ok(Built { provider, guard, swept })
}

/// A built provider, and the guard the daemon serves for it (a remote backend
/// whose granted runs reach the broker through it).
pub struct Built {
    /// The provider.
    pub provider: Arc<dyn Provider>,
    /// Its guard, when the operator set one.
    pub guard: Option<Arc<Guard>>,
    /// What the startup sweep deleted: a killed predecessor's sandboxes, or
    /// containers past their lifetime (`plugin check` wants none after its runs).
    pub swept: Vec<String>,
}

impl std::fmt::Debug for Built {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Built").field("guard", &self.guard).field("swept", &self.swept).finish_non_exhaustive()
    }
}

/// Starts the engine workers of a jailed wasm provider; `python` is the CPython
/// component's path and the SHA-256 (hex) the daemon read it with.
fn start_jail(
    config: &Config,
    wasm: &WasmConfig,
    python: Option<(&std::path::Path, String)>,
) -> Result<Arc<Jail>, BuildError> {
    let fail = |message: String| BuildError {
        provider: "wasm".into(),
        message: format!(
            "{message}; the engine's jailed workers are the default: to run the engine in the daemon's own \
             process instead, set SANDBOX_WASM_ENGINE=in-process"
        ),
    };
    let exe = std::env::current_exe().map_err(|e| fail(format!("finding this binary: {e}")))?;
    // Up to 8 workers share the admitted runs, so a crash or a hang takes at most an
    // eighth of them with it.
    let concurrent = config.admission.max_concurrent.max(1);
    let workers = concurrent.clamp(2, 8);
    let hello = Hello {
        memory_mb: wasm.memory_mb,
        output_cap: wasm.output_cap as u64,
        cache_dir: config.cache_dir.clone().or_else(EngineConfig::default_cache_dir).map(|d| d.display().to_string()),
        python: python.as_ref().map(|(p, _)| p.display().to_string()),
        python_sha256: python.map(|(_, digest)| digest),
        slots: concurrent.div_ceil(workers),
    };
    Jail::start(JailConfig { exe, workers: workers as usize, hello }).map_err(fail)
}

/// The provider plugin verified against the keys its operator trusts, with the
/// capabilities the operator approved, and its signed manifest the one startup
/// read its settings by.
fn verified_plugin(p: &ProviderPlugin) -> Result<(plugin::Verified, Vec<Capability>), String> {
    let approve_var = &crate::config::host_variables(p.name())[2];
    let mut keys = Vec::new();
    for path in &p.location.trusted_keys {
        let pem = std::fs::read_to_string(path).map_err(|e| format!("reading trusted key {}: {e}", path.display()))?;
        keys.push(plugin::signature::public_key(&pem).map_err(|e| format!("trusted key {}: {e}", path.display()))?);
    }
    let approved: Vec<Capability> = p
        .location
        .approve
        .iter()
        .map(|c| Capability::parse(c).map_err(|e| format!("{approve_var}: {e}")))
        .collect::<Result<_, _>>()?;
    let verified = plugin::verify(&p.location.dir, &keys, &approved).map_err(|e| e.to_string())?;
    if verified.manifest != p.manifest {
        return Err(format!(
            "plugin {}: its plugin.toml changed after startup read its settings; start again",
            p.location.dir.display()
        ));
    }
    Ok((verified, approved))
}

/// Verifies and loads a remote backend's plugin, gives it the gate to its
/// endpoints (holding and booking as its manifest says), and runs its smoke
/// test (which proves the tier the host then states, never above the
/// operator's cap). Nothing is served unless all of it passes.
fn remote_provider(
    config: &Config,
    plugin: &ProviderPlugin,
    remote: &RemoteConfig,
    log: Log,
) -> Result<(Arc<PluginProvider>, Vec<String>), BuildError> {
    let name = plugin.name().to_string();
    let fail = |message: String| BuildError { provider: name.clone(), message };
    let (verified, approved) = verified_plugin(plugin).map_err(fail)?;
    for alias in verified.manifest.endpoints.keys() {
        if !remote.endpoints.contains_key(alias) {
            return Err(fail(format!("the plugin calls endpoint {alias:?}, which this host does not map")));
        }
    }
    let held = verified.manifest.held_secrets.clone();
    let mut gate = crate::outbound::gate(&name, &remote.endpoints, held, log).map_err(fail)?;
    gate = match &verified.manifest.booking {
        None => gate,
        Some(Booking::Json { endpoint, field }) => gate.booking(endpoint, field).map_err(fail)?,
        Some(Booking::Grpc { endpoint, create, made_at, delete, deleted_at }) => {
            let booking = GrpcBooking {
                create: create.clone(),
                made_at: made_at.clone(),
                delete: delete.clone(),
                deleted_at: deleted_at.clone(),
            };
            gate.booking_grpc(endpoint, booking).map_err(fail)?
        }
        Some(Booking::Collection { endpoint, collection, name_at }) => {
            gate.booking_collection(endpoint, collection, name_at).map_err(fail)?
        }
    };
    let r = &config.resources;
    let limits = PluginLimits {
        memory_mb: r.memory_mb,
        cpus_milli: r.cpus_milli(),
        pids: 0,
        disk_mb: r.disk_mb,
        session_disk_mb: config.sessions.disk_mb,
        session_lifetime: config.sessions.lifetime,
        max_sandboxes: config.admission.max_concurrent,
        ..PluginLimits::default()
    };
    let cache_dir = config.cache_dir.clone().or_else(EngineConfig::default_cache_dir);
    let max_instances = (config.admission.max_concurrent * 2).max(16);
    let engine = Engine::new(&EngineConfig { max_instances, cache_dir }).map_err(|e| fail(e.to_string()))?;
    let mut provider = PluginProvider::new(&engine, verified, approved, None, "", limits)
        .map_err(|e| fail(e.to_string()))?
        .remote(Arc::new(gate), remote.max_tier)
        .with_settings(remote.settings.clone());
    if let Some(g) = &remote.guard {
        let guard = Guard::new(&g.path);
        provider = provider.with_guard(GuardAccess { guard, url: g.url.clone(), host: g.host.clone() });
    }
    // What a killed predecessor of this instance left goes before anything new is made.
    let swept = provider.sweep().map_err(fail)?;
    log_remote_swept(&log, &name, &swept);
    let proven = provider.smoke_test().map_err(fail)?;
    log.info(
        "the remote backend passed its smoke test",
        &[("provider", serde_json::json!(name)), ("tier", serde_json::json!(proven.tier.as_str()))],
    );
    let provider = Arc::new(provider);
    let weak = Arc::downgrade(&provider);
    let release_log = log;
    let sweep_name = name.clone();
    std::thread::Builder::new()
        .name("plimsoll-sweep".into())
        .spawn(move || {
            loop {
                std::thread::sleep(RECHECK_EVERY);
                let Some(provider) = weak.upgrade() else { return };
                match provider.sweep() {
                    Ok(swept) => log_remote_swept(&log, &sweep_name, &swept),
                    Err(e) => log.warn(
                        "the remote backend's sweep failed; undeleted sandboxes keep holding capacity",
                        &[("provider", serde_json::json!(sweep_name)), ("error", serde_json::json!(e))],
                    ),
                }
            }
        })
        .map_err(|e| fail(format!("starting the sweep: {e}")))?;
    // Deletes off the result path: a call's sandboxes the plugin left (or failed
    // to delete) go as soon as its answer is out, their capacity held meanwhile.
    let weak = Arc::downgrade(&provider);
    let release_name = name.clone();
    std::thread::Builder::new()
        .name("plimsoll-release".into())
        .spawn(move || {
            loop {
                let Some(provider) = weak.upgrade() else { return };
                if !provider.wait_for_leftovers(RELEASE_WAIT) {
                    continue;
                }
                if let Err(e) = provider.release() {
                    release_log.warn(
                        "the remote backend's release failed; its sandboxes hold capacity until a sweep deletes them",
                        &[("provider", serde_json::json!(release_name)), ("error", serde_json::json!(e))],
                    );
                }
            }
        })
        .map_err(|e| fail(format!("starting the releaser: {e}")))?;
    Ok((provider, swept))
}

/// How long the releaser waits for leftovers before it looks again whether the
/// provider is still there.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Says which sandboxes a remote sweep deleted (nothing when it deleted none).
fn log_remote_swept(log: &Log, provider: &str, swept: &[String]) {
    if !swept.is_empty() {
        log.info(
            "swept this instance's sandboxes that no run holds (a killed daemon's, or failed deletes)",
            &[
                ("provider", serde_json::json!(provider)),
                ("count", serde_json::json!(swept.len())),
                ("sandboxes", serde_json::json!(swept)),
            ],
        );
    }
}

/// Says which containers a sweep removed, at startup or on a re-check.
fn log_swept(log: &Log, swept: &[String]) {
    log.info(
        "swept the containers of daemons that ended (killed, or past their lifetime)",
        &[("count", serde_json::json!(swept.len())), ("containers", serde_json::json!(swept))],
    );
}

/// `/tmp` and `/dev/shm` of a session's container, beside its disk budget in `/work`.
const SESSION_SIDE_MOUNTS_MB: u32 = 32;
/// Seconds a session container's lifetime label may outlast the session (the plugin
/// host adds ten minutes; the rest is slack for the clock).
const SESSION_LABEL_MARGIN_S: u32 = 15 * 60;

/// How often the wall is re-checked and expired containers are swept.
const RECHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Verifies and loads the docker plugin, proves the engine (runtime, image, guest
/// uid, resolver, the probe), runs the plugin's own smoke test, and starts the
/// periodic re-check. Nothing is served unless all of it passes.
fn docker_provider(
    config: &Config,
    plugin: &ProviderPlugin,
    docker: &DockerConfig,
    log: Log,
) -> Result<(PluginProvider, Vec<String>), BuildError> {
    let name = plugin.name().to_string();
    let fail = |message: String| BuildError { provider: name.clone(), message };
    let (verified, approved) = verified_plugin(plugin).map_err(fail)?;

    let cache_dir = config.cache_dir.clone().or_else(EngineConfig::default_cache_dir);
    let seccomp = match &docker.seccomp {
        Some(p) => {
            std::fs::read_to_string(p).map_err(|e| fail(format!("SANDBOX_DOCKER_SECCOMP={}: {e}", p.display())))?
        }
        None => plimsoll_containers::SECCOMP_PROFILE.to_string(),
    };
    serde_json::from_str::<serde_json::Value>(&seccomp)
        .map_err(|e| fail(format!("the seccomp profile is not JSON: {e}")))?;
    let resolv_path = cache_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("plimsoll-{}", std::process::id())))
        .join("resolv.conf");
    let r = &config.resources;
    let limits = PluginLimits {
        memory_mb: if r.memory_mb > 0 { r.memory_mb } else { 256 },
        cpus_milli: match r.cpus_milli() {
            0 => 1000,
            m => m,
        },
        pids: if r.pids > 0 { r.pids } else { 256 },
        disk_mb: if r.disk_mb > 0 { r.disk_mb } else { 160 },
        session_disk_mb: config.sessions.disk_mb,
        session_lifetime: config.sessions.lifetime,
        ..PluginLimits::default()
    };
    let defaults = plimsoll_containers::Ceilings::default();
    // A session's container holds its disk budget in /work beside /tmp and /dev/shm,
    // and lives as long as the session, with the label's margin.
    let session_disk =
        if config.sessions.max > 0 { config.sessions.disk_mb.saturating_add(SESSION_SIDE_MOUNTS_MB) } else { 0 };
    let session_lifetime = if config.sessions.max > 0 {
        u32::try_from(config.sessions.lifetime.as_secs()).unwrap_or(u32::MAX).saturating_add(SESSION_LABEL_MARGIN_S)
    } else {
        0
    };
    let ceilings = plimsoll_containers::Ceilings {
        memory_mb: limits.memory_mb,
        cpus_milli: limits.cpus_milli,
        pids: limits.pids,
        disk_mb: limits.disk_mb.max(session_disk),
        lifetime_s: defaults.lifetime_s.max(session_lifetime),
    };
    let settings = plimsoll_containers::startup::Settings {
        docker_host: std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()),
        image: docker.image.clone(),
        runtime: docker.runtime.clone(),
        guest_uid: docker.guest_uid,
        seccomp: (docker.runtime == "runc").then_some(seccomp),
        resolv_path,
        ceilings,
        owner: format!("plimsoll-host-{}", std::process::id()),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("plimsoll-engine")
        .enable_all()
        .build()
        .map_err(|e| fail(format!("starting the engine runtime: {e}")))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let proven = rt.block_on(plimsoll_containers::startup::prove(&settings, now)).map_err(fail)?;
    let swept = proven.swept.clone();
    if !swept.is_empty() {
        log_swept(&log, &swept);
    }
    let tier = if docker.runtime == "runsc" { Tier::Kernel } else { Tier::Container };
    let tiers = [(docker.runtime.clone(), tier)].into();
    let wall = Arc::new(Wall::new(proven.engine, proven.lockdown, tiers, rt).with_warm_pool(docker.warm_pool));
    let max_instances = (config.admission.max_concurrent * 2).max(16);
    let engine = Engine::new(&EngineConfig { max_instances, cache_dir }).map_err(|e| fail(e.to_string()))?;
    let provider = PluginProvider::new(&engine, verified, approved, Some(Arc::clone(&wall)), &docker.runtime, limits)
        .map_err(|e| fail(e.to_string()))?;
    provider.smoke_test().map_err(fail)?;
    let weak = Arc::downgrade(&wall);
    std::thread::Builder::new()
        .name("plimsoll-recheck".into())
        .spawn(move || {
            loop {
                std::thread::sleep(RECHECK_EVERY);
                let Some(wall) = weak.upgrade() else { return };
                match wall.recheck() {
                    Ok(swept) if !swept.is_empty() => log_swept(&log, &swept),
                    Ok(_) => {}
                    Err(e) => eprintln!("docker re-check failed, runs are refused until it passes: {e}"),
                }
            }
        })
        .map_err(|e| fail(format!("starting the re-check: {e}")))?;
    Ok((provider, swept))
}
