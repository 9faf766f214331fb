//! Operator configuration: `plimsoll.toml` (path from `--config` or
//! `PLIMSOLL_CONFIG`) holds everything; the original system's environment variables
//! override it. Strict throughout: an unknown key or variable, or a malformed value,
//! fails startup naming it, so a typo can never silently weaken a wall.

use std::path::{Path, PathBuf};
use std::time::Duration;

use plimsoll_core::Floor;
use serde::Deserialize;

mod docker;
mod env;
mod grants;
mod guard;
mod plugin;
mod variables;
mod wasm;

pub use docker::DockerConfig;
use docker::{DockerSettings, DockerTable};
pub use env::{Env, ProcessEnv};
use env::{Pick, parse_duration};
pub use grants::BrokerPlugins;
use grants::{GrantsTable, broker_plugins};
pub use guard::GuardConfig;
pub use plugin::{
    AdapterPlugin, Backend, EndpointConfig, ExchangeConfig, PluginConfig, ProviderPlugin, RemoteConfig, Secret,
    adapter_plugin, host_variables,
};
use variables::CLIENT_VARIABLES;
pub use variables::{BROKER_AUTH_PREFIX, PLUGIN_VARIABLES, VARIABLES};
pub use wasm::WasmEngine;

/// Why configuration was refused. Messages name the key or variable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (unknown keys included).
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A value (from the file or the environment) is malformed or out of range.
    #[error("{0}")]
    Value(String),
    /// Variables this daemon does not know are set.
    #[error("unknown variable{} {}: check the spelling (a misspelt safety setting must not be ignored; a plugin's settings are read only when SANDBOX_PROVIDER names it)", if .0.len() == 1 { "" } else { "s" }, .0.join(", "))]
    UnknownVariables(Vec<String>),
}

/// The `[daemon]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct DaemonTable {
    addr: Option<String>,
    metrics_addr: Option<String>,
    log_format: Option<String>,
    clients_file: Option<PathBuf>,
    token_file: Option<PathBuf>,
    insecure: Option<bool>,
    hardened: Option<bool>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    guard_addr: Option<String>,
}

/// The `[sandbox]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct SandboxTable {
    provider: Option<String>,
    plugins_dir: Option<PathBuf>,
    min_isolation: Option<String>,
    wasm_python: Option<PathBuf>,
    wasm_engine: Option<String>,
    memory_mb: Option<u32>,
    cpus: Option<f64>,
    pids: Option<u32>,
    disk_mb: Option<u32>,
    max_concurrent: Option<u32>,
    per_key_concurrent: Option<u32>,
    rate_per_min: Option<u32>,
    rate_burst: Option<u32>,
    total_memory_mb: Option<u32>,
    max_sessions: Option<u32>,
    max_sessions_per_caller: Option<u32>,
    max_sessions_per_owner: Option<u32>,
    session_lifetime: Option<String>,
    session_idle: Option<String>,
    session_disk_mb: Option<u32>,
}

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    daemon: DaemonTable,
    #[serde(default)]
    sandbox: SandboxTable,
    #[serde(default)]
    docker: DockerTable,
    /// `[plugins.NAME]`: each plugin's location, approvals and settings, checked
    /// against its manifest.
    #[serde(default)]
    plugins: std::collections::BTreeMap<String, toml::Table>,
    #[serde(default)]
    grants: GrantsTable,
}

/// Which provider the daemon runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// Runs nothing (the default).
    Disabled,
    /// QuickJS and CPython in the daemon's own engine, the process tier.
    Wasm,
    /// The signed provider plugin of this name: the docker plugin on the host's
    /// container engine, or a remote backend's plugin over the host's outbound HTTP.
    Plugin(String),
}

impl ProviderKind {
    /// The provider's wire name.
    pub fn as_str(&self) -> &str {
        match self {
            ProviderKind::Disabled => "disabled",
            ProviderKind::Wasm => "wasm",
            ProviderKind::Plugin(name) => name,
        }
    }
}

/// The log's line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (the default).
    Json,
    /// `time level msg key=value...`
    Text,
}

/// How callers authenticate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthSource {
    /// A clients file: each caller its own token and scopes.
    ClientsFile(PathBuf),
    /// One shared bearer token (at least 32 characters).
    SharedToken(String),
    /// No authentication: only for the disabled provider, or with `PLIMSOLL_INSECURE=1`.
    Open,
}

/// The per-run resource envelope; 0 means the provider's default.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resources {
    /// `SANDBOX_MEMORY_MB`
    pub memory_mb: u32,
    /// `SANDBOX_CPUS`
    pub cpus: f64,
    /// `SANDBOX_PIDS`
    pub pids: u32,
    /// `SANDBOX_DISK_MB`
    pub disk_mb: u32,
}

impl Resources {
    /// `SANDBOX_CPUS` in thousandths of a CPU (startup refuses a nonzero value
    /// that rounds to none).
    pub fn cpus_milli(&self) -> u32 {
        (self.cpus * 1000.0).round() as u32
    }

    /// One limit of the envelope as a plugin reads it (CPUs in thousandths); 0 is unset.
    pub fn limit(&self, limit: plimsoll_plugin_trust::manifest::Limit) -> u32 {
        use plimsoll_plugin_trust::manifest::Limit;
        match limit {
            Limit::MemoryMb => self.memory_mb,
            Limit::Cpus => self.cpus_milli(),
            Limit::Pids => self.pids,
            Limit::DiskMb => self.disk_mb,
        }
    }
}

/// Admission limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Runs in flight across the daemon (`SANDBOX_MAX_CONCURRENT`, 1 to 4096, default 8;
    /// the original allowed 1024).
    pub max_concurrent: u32,
    /// Runs in flight per caller (`SANDBOX_PER_KEY_CONCURRENT`, default half the max).
    pub per_key_concurrent: u32,
    /// Runs per minute per caller (`SANDBOX_RATE_PER_MIN`, default 30, 0 = off).
    pub rate_per_min: u32,
    /// Burst of the per-caller bucket (`SANDBOX_RATE_BURST`, default the rate).
    pub rate_burst: u32,
}

/// The session settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionSettings {
    /// Sessions open at once across the daemon (`SANDBOX_MAX_SESSIONS`, 0 = sessions off).
    pub max: u32,
    /// Sessions one caller may hold (`SANDBOX_MAX_SESSIONS_PER_CALLER`, 0 = no cap).
    pub per_caller: u32,
    /// Sessions one owner may hold (`SANDBOX_MAX_SESSIONS_PER_OWNER`, 0 = no cap).
    pub per_owner: u32,
    /// A session's lifetime (`SANDBOX_SESSION_LIFETIME`, default 30m, 1s..12h).
    pub lifetime: Duration,
    /// Idle time before a session is suspended (`SANDBOX_SESSION_IDLE`, default 5m, 0 = never).
    pub idle: Duration,
    /// A session's disk budget in MiB (`SANDBOX_SESSION_DISK_MB`, default 1024, 0 = unbounded).
    pub disk_mb: u32,
}

impl Default for SessionSettings {
    fn default() -> SessionSettings {
        SessionSettings {
            max: 0,
            per_caller: 0,
            per_owner: 0,
            lifetime: Duration::from_secs(30 * 60),
            idle: Duration::from_secs(5 * 60),
            disk_mb: 1024,
        }
    }
}

/// The longest session lifetime and idle timeout an operator may set.
pub const MAX_SESSION_TIME: Duration = Duration::from_secs(12 * 3600);

/// The daemon's configuration, resolved.
#[derive(Clone, Debug)]
pub struct Config {
    /// The RPC listener (`PLIMSOLL_ADDR`, default `:8746`, all interfaces).
    pub addr: String,
    /// The metrics listener (`PLIMSOLL_METRICS_ADDR`, default `127.0.0.1:9464`; `None` = off).
    pub metrics_addr: Option<String>,
    /// `PLIMSOLL_LOG_FORMAT`
    pub log_format: LogFormat,
    /// Who may call.
    pub auth: AuthSource,
    /// `PLIMSOLL_INSECURE=1`: a real provider without authentication (development only).
    pub insecure: bool,
    /// `PLIMSOLL_HARDENED=1`: refuse to start unless every production rule holds.
    pub hardened: bool,
    /// `PLIMSOLL_TLS_CERT` and `PLIMSOLL_TLS_KEY`, both or neither.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// `SANDBOX_PROVIDER`
    pub provider: ProviderKind,
    /// `SANDBOX_MIN_ISOLATION`: the startup floor the provider's evidence must meet.
    pub min_isolation: Option<Floor>,
    /// The per-run envelope.
    pub resources: Resources,
    /// Admission.
    pub admission: Admission,
    /// `SANDBOX_TOTAL_MEMORY_MB`: clamps `max_concurrent` to what fits (0 = no clamp).
    pub total_memory_mb: u32,
    /// `PLIMSOLL_CACHE_DIR`: precompiled components.
    pub cache_dir: Option<PathBuf>,
    /// `PLIMSOLL_GRANTS_FILE`: the grant profiles (unset: runs name no profile).
    pub grants_file: Option<PathBuf>,
    /// `PLIMSOLL_BROKER_PLUGINS` and the rest: vendor broker plugins for profiles.
    pub broker_plugins: BrokerPlugins,
    /// `SANDBOX_WASM_PYTHON`: the CPython guest component the wasm provider runs
    /// Python with (unset: the checkout's `guests/python/python.wasm` when built).
    pub wasm_python: Option<PathBuf>,
    /// `SANDBOX_WASM_ENGINE`: where the wasm provider's engine runs guests.
    pub wasm_engine: WasmEngine,
    /// The provider plugin, when a plugin is the provider.
    pub plugin: Option<ProviderPlugin>,
    /// Sessions: off unless `SANDBOX_MAX_SESSIONS` is above 0.
    pub sessions: SessionSettings,
    /// Settings the operator stated explicitly (hardened mode wants some of them).
    pub explicit: Vec<&'static str>,
}

/// The most runs in flight a daemon may admit. The original allowed 1024; a wasm run
/// costs about a pool slot's address space and a fresh store, so 2,000 and more fit
/// in a small machine (`docs/performance.md`).
pub const MAX_CONCURRENT_CEILING: u32 = 4096;

impl Config {
    /// The container engine's settings, when the provider plugin drives it.
    pub fn docker(&self) -> Option<&DockerConfig> {
        match self.plugin.as_ref().map(|p| &p.backend) {
            Some(Backend::Containers(d)) => Some(d),
            _ => None,
        }
    }

    /// The remote backend's settings, when the provider plugin drives one.
    pub fn remote(&self) -> Option<&RemoteConfig> {
        match self.plugin.as_ref().map(|p| &p.backend) {
            Some(Backend::Remote(r)) => Some(r),
            _ => None,
        }
    }

    /// How callers authenticate, for the log (never the token).
    pub fn auth_kind(&self) -> &'static str {
        match self.auth {
            AuthSource::ClientsFile(_) => "clients-file",
            AuthSource::SharedToken(_) => "shared-token",
            AuthSource::Open => "open",
        }
    }

    /// Reads the configuration: the file (if `path` or `PLIMSOLL_CONFIG` names one),
    /// then the environment over it.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the first bad key or value, or every unknown variable.
    pub fn load(path: Option<&Path>, env: &dyn Env) -> Result<Config, ConfigError> {
        let file_path = path.map(Path::to_path_buf).or_else(|| env.get("PLIMSOLL_CONFIG").map(PathBuf::from));
        let file: File = match &file_path {
            None => File::default(),
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|source| ConfigError::Read { path: p.display().to_string(), source })?;
                toml::from_str(&text)
                    .map_err(|e| ConfigError::File { path: p.display().to_string(), message: e.to_string() })?
            }
        };
        let File { daemon: d, sandbox: s, docker: docker_table, mut plugins, grants: grants_table } = file;
        let provider = match env.get("SANDBOX_PROVIDER").or(s.provider.clone()).map(|p| p.trim().to_ascii_lowercase()) {
            None => ProviderKind::Disabled,
            Some(p) if p.is_empty() || p == "disabled" => ProviderKind::Disabled,
            Some(p) if p == "wasm" => ProviderKind::Wasm,
            Some(p) => ProviderKind::Plugin(plugin::plugin_name(&p)?),
        };
        // The provider's and the broker plugins' own variables are checked against
        // their manifests below.
        let mut plugin_prefixes: Vec<String> =
            grants_table.dirs(env).iter().filter_map(|d| plugin::manifest_name(d)).collect();
        if let ProviderKind::Plugin(name) = &provider {
            plugin_prefixes.push(name.clone());
        }
        let plugin_prefixes: Vec<String> = plugin_prefixes
            .iter()
            .map(|n| format!("{}_", plimsoll_plugin_trust::manifest::variable_prefix(n)))
            .collect();
        let known = |n: &str| VARIABLES.iter().any(|(v, _, _)| *v == n) || CLIENT_VARIABLES.contains(&n);
        let mut unknown: Vec<String> = env
            .names()
            .into_iter()
            .filter(|n| n.starts_with("PLIMSOLL_") || n.starts_with("SANDBOX_"))
            .filter(|n| !known(n))
            // One per broker plugin endpoint; a misspelt one leaves its endpoint without
            // a credential, which the vendor's token endpoint refuses.
            .filter(|n| !n.starts_with(BROKER_AUTH_PREFIX))
            .filter(|n| !plugin_prefixes.iter().any(|p| n.starts_with(p.as_str())))
            .collect();
        unknown.sort();
        if !unknown.is_empty() {
            return Err(ConfigError::UnknownVariables(unknown));
        }
        let mut pick = Pick { env, explicit: Vec::new() };
        pick.string("SANDBOX_PROVIDER", s.provider);

        let addr = pick.string("PLIMSOLL_ADDR", d.addr).unwrap_or_else(|| ":8746".into());
        let metrics_addr = match pick.string("PLIMSOLL_METRICS_ADDR", d.metrics_addr) {
            None => Some("127.0.0.1:9464".into()),
            Some(v) if v == "off" => None,
            Some(v) => Some(v),
        };
        let log_format = match pick.string("PLIMSOLL_LOG_FORMAT", d.log_format).as_deref() {
            None | Some("json") => LogFormat::Json,
            Some("text") => LogFormat::Text,
            Some(other) => {
                return Err(ConfigError::Value(format!("PLIMSOLL_LOG_FORMAT={other:?} is not json or text")));
            }
        };
        let clients = pick.string("PLIMSOLL_CLIENTS_FILE", d.clients_file.map(|p| p.display().to_string()));
        let token = match env.get("PLIMSOLL_TOKEN") {
            Some(t) => Some(t),
            None => match d.token_file {
                Some(p) => Some(
                    std::fs::read_to_string(&p)
                        .map_err(|source| ConfigError::Read { path: p.display().to_string(), source })?
                        .trim_end_matches(['\r', '\n'])
                        .to_string(),
                ),
                None => None,
            },
        };
        let auth = match (clients, token) {
            (Some(f), _) if !f.is_empty() => AuthSource::ClientsFile(PathBuf::from(f)),
            (_, Some(t)) if !t.is_empty() => {
                if t.chars().count() < 32 {
                    return Err(ConfigError::Value(
                        "PLIMSOLL_TOKEN is shorter than 32 characters; use a long random token (plimsoll-host callers create prints one)".into(),
                    ));
                }
                if !t.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
                    return Err(ConfigError::Value("PLIMSOLL_TOKEN must be visible ASCII with no spaces".into()));
                }
                AuthSource::SharedToken(t)
            }
            _ => AuthSource::Open,
        };
        let insecure = pick.bool("PLIMSOLL_INSECURE", d.insecure)?;
        let hardened = pick.bool("PLIMSOLL_HARDENED", d.hardened)?;
        let cert = pick.string("PLIMSOLL_TLS_CERT", d.tls_cert.map(|p| p.display().to_string()));
        let key = pick.string("PLIMSOLL_TLS_KEY", d.tls_key.map(|p| p.display().to_string()));
        let tls = match (cert, key) {
            (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
            (None, None) => None,
            _ => {
                return Err(ConfigError::Value(
                    "PLIMSOLL_TLS_CERT and PLIMSOLL_TLS_KEY go together: set both or neither".into(),
                ));
            }
        };
        let cache_dir =
            pick.string("PLIMSOLL_CACHE_DIR", d.cache_dir.map(|p| p.display().to_string())).map(PathBuf::from);
        let grants_file = pick
            .string("PLIMSOLL_GRANTS_FILE", grants_table.file.as_ref().map(|p| p.display().to_string()))
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        let mut broker_plugins = broker_plugins(&mut pick, grants_table)?;
        for dir in broker_plugins.dirs.clone() {
            let read =
                plugin::adapter_plugin(&dir, plimsoll_plugin_trust::manifest::PluginKind::Broker, env, &mut plugins)?;
            broker_plugins.read.push(read);
        }
        let guard_addr = pick.string("PLIMSOLL_GUARD_ADDR", d.guard_addr).filter(|a| !a.is_empty());

        let plugins_dir = pick
            .string("SANDBOX_PLUGINS_DIR", s.plugins_dir.map(|p| p.display().to_string()))
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        let docker_settings = DockerSettings::read(&mut pick, docker_table)?;
        let min_isolation = match pick.string("SANDBOX_MIN_ISOLATION", s.min_isolation) {
            None => None,
            Some(v) if v.is_empty() => None,
            Some(v) => Some(v.parse::<Floor>().map_err(|e| ConfigError::Value(format!("SANDBOX_MIN_ISOLATION: {e}")))?),
        };
        let memory_mb = pick.u32("SANDBOX_MEMORY_MB", s.memory_mb)?.unwrap_or(0);
        let wasm_python =
            pick.string("SANDBOX_WASM_PYTHON", s.wasm_python.map(|p| p.display().to_string())).map(PathBuf::from);
        let wasm_engine = match pick.string("SANDBOX_WASM_ENGINE", s.wasm_engine).as_deref() {
            Some("in-process") => WasmEngine::InProcess,
            None | Some("" | "jailed") => WasmEngine::Jailed,
            Some(other) => {
                return Err(ConfigError::Value(format!("SANDBOX_WASM_ENGINE={other:?}: use in-process or jailed")));
            }
        };
        let cpus = match env.get("SANDBOX_CPUS").filter(|v| !v.is_empty()) {
            Some(v) => {
                pick.explicit.push("SANDBOX_CPUS");
                v.parse::<f64>()
                    .ok()
                    .filter(|c| c.is_finite() && *c >= 0.0)
                    .ok_or_else(|| ConfigError::Value(format!("SANDBOX_CPUS={v:?} is not a non-negative number")))?
            }
            None => {
                if s.cpus.is_some() {
                    pick.explicit.push("SANDBOX_CPUS");
                }
                let c = s.cpus.unwrap_or(0.0);
                if !(c.is_finite() && c >= 0.0) {
                    return Err(ConfigError::Value(format!("sandbox.cpus = {c} is not a non-negative number")));
                }
                c
            }
        };
        if cpus > 0.0 && (cpus * 1000.0).round() == 0.0 {
            return Err(ConfigError::Value(format!("SANDBOX_CPUS={cpus} is under a thousandth of a CPU")));
        }
        let pids = pick.u32("SANDBOX_PIDS", s.pids)?.unwrap_or(0);
        let disk_mb = pick.u32("SANDBOX_DISK_MB", s.disk_mb)?.unwrap_or(0);
        let resources = Resources { memory_mb, cpus, pids, disk_mb };
        let plugin = match &provider {
            ProviderKind::Plugin(name) => {
                let input = plugin::Inputs {
                    env,
                    table: plugins.remove(name).unwrap_or_default(),
                    plugins_dir,
                    docker: docker_settings,
                    resources: &resources,
                    guard_addr: guard_addr.clone(),
                };
                let p = plugin::provider_plugin(name, input)?;
                plugin::check_variables(&p.manifest, env)?;
                Some(p)
            }
            ProviderKind::Disabled | ProviderKind::Wasm => {
                if let Some(var) = docker_settings.first_set() {
                    return Err(ConfigError::Value(format!(
                        "{var} is set, but SANDBOX_PROVIDER is {}; set SANDBOX_PROVIDER=docker or unset it",
                        provider.as_str()
                    )));
                }
                if guard_addr.is_some() {
                    return Err(ConfigError::Value(format!(
                        "PLIMSOLL_GUARD_ADDR is set, but SANDBOX_PROVIDER is {}; only a provider plugin whose manifest declares a guard-url reaches a guard: unset it",
                        provider.as_str()
                    )));
                }
                None
            }
        };
        if let Some(name) = plugins.keys().next() {
            return Err(ConfigError::Value(format!(
                "[plugins.{name}] is set, but SANDBOX_PROVIDER is {}; set SANDBOX_PROVIDER={name} or remove the table",
                provider.as_str()
            )));
        }
        if provider == ProviderKind::Wasm {
            for (name, set) in
                [("SANDBOX_CPUS", cpus != 0.0), ("SANDBOX_PIDS", pids != 0), ("SANDBOX_DISK_MB", disk_mb != 0)]
            {
                if set {
                    return Err(ConfigError::Value(format!(
                        "{name} is set, but the wasm provider cannot enforce it (it enforces memory only); unset it"
                    )));
                }
            }
            if memory_mb > 4096 {
                return Err(ConfigError::Value(format!(
                    "SANDBOX_MEMORY_MB={memory_mb}: the wasm provider allows at most 4096"
                )));
            }
        }

        let max_concurrent = pick.u32("SANDBOX_MAX_CONCURRENT", s.max_concurrent)?.unwrap_or(8);
        if !(1..=MAX_CONCURRENT_CEILING).contains(&max_concurrent) {
            return Err(ConfigError::Value(format!(
                "SANDBOX_MAX_CONCURRENT={max_concurrent} is outside 1..{MAX_CONCURRENT_CEILING}"
            )));
        }
        let total_memory_mb = pick.u32("SANDBOX_TOTAL_MEMORY_MB", s.total_memory_mb)?.unwrap_or(0);
        let max_concurrent = if total_memory_mb > 0 {
            let per_run = if memory_mb > 0 { memory_mb } else { 256 };
            // Each container the warm pool may keep holds a run's memory limit.
            let warm_pool = match plugin.as_ref().map(|p| &p.backend) {
                Some(Backend::Containers(d)) => d.warm_pool,
                _ => 0,
            };
            let pooled = warm_pool * plimsoll_containers::pool::MAX_SHAPES as u32;
            let fit = (total_memory_mb / per_run).saturating_sub(pooled);
            if fit < 1 {
                let beside = if pooled > 0 {
                    format!(
                        " beside the warm pool's {pooled} containers (SANDBOX_WARM_POOL per shape, {} shapes)",
                        plimsoll_containers::pool::MAX_SHAPES
                    )
                } else {
                    String::new()
                };
                return Err(ConfigError::Value(format!(
                    "SANDBOX_TOTAL_MEMORY_MB={total_memory_mb} does not fit one run of {per_run} MiB{beside}"
                )));
            }
            max_concurrent.min(fit)
        } else {
            max_concurrent
        };
        let per_key = pick.u32("SANDBOX_PER_KEY_CONCURRENT", s.per_key_concurrent)?;
        let per_key_concurrent = match per_key {
            None | Some(0) => (max_concurrent / 2).max(1),
            Some(n) if n > max_concurrent => {
                return Err(ConfigError::Value(format!(
                    "SANDBOX_PER_KEY_CONCURRENT={n} is above SANDBOX_MAX_CONCURRENT={max_concurrent}"
                )));
            }
            Some(n) => n,
        };
        let rate_per_min = pick.u32("SANDBOX_RATE_PER_MIN", s.rate_per_min)?.unwrap_or(30);
        let rate_burst = pick.u32("SANDBOX_RATE_BURST", s.rate_burst)?.unwrap_or(rate_per_min);
        if rate_per_min > 0 && rate_burst == 0 {
            return Err(ConfigError::Value("SANDBOX_RATE_BURST=0 with a rate set would refuse every run".into()));
        }

        let sessions = SessionSettings {
            max: pick.u32("SANDBOX_MAX_SESSIONS", s.max_sessions)?.unwrap_or(0),
            per_caller: pick.u32("SANDBOX_MAX_SESSIONS_PER_CALLER", s.max_sessions_per_caller)?.unwrap_or(0),
            per_owner: pick.u32("SANDBOX_MAX_SESSIONS_PER_OWNER", s.max_sessions_per_owner)?.unwrap_or(0),
            lifetime: match pick.string("SANDBOX_SESSION_LIFETIME", s.session_lifetime) {
                Some(v) => parse_duration("SANDBOX_SESSION_LIFETIME", &v)?,
                None => SessionSettings::default().lifetime,
            },
            idle: match pick.string("SANDBOX_SESSION_IDLE", s.session_idle) {
                Some(v) => parse_duration("SANDBOX_SESSION_IDLE", &v)?,
                None => SessionSettings::default().idle,
            },
            disk_mb: pick.u32("SANDBOX_SESSION_DISK_MB", s.session_disk_mb)?.unwrap_or(1024),
        };
        if sessions.lifetime < Duration::from_secs(1) || sessions.lifetime > MAX_SESSION_TIME {
            return Err(ConfigError::Value(format!(
                "SANDBOX_SESSION_LIFETIME={:?} is outside 1s..12h",
                sessions.lifetime
            )));
        }
        if !sessions.idle.is_zero() && (sessions.idle < Duration::from_secs(1) || sessions.idle > MAX_SESSION_TIME) {
            return Err(ConfigError::Value(format!(
                "SANDBOX_SESSION_IDLE={:?} is outside 1s..12h (0 = never suspend)",
                sessions.idle
            )));
        }
        if sessions.disk_mb > 1_048_576 {
            return Err(ConfigError::Value(format!(
                "SANDBOX_SESSION_DISK_MB={} is over 1048576 (1 TiB)",
                sessions.disk_mb
            )));
        }
        for (name, cap) in [
            ("SANDBOX_MAX_SESSIONS_PER_CALLER", sessions.per_caller),
            ("SANDBOX_MAX_SESSIONS_PER_OWNER", sessions.per_owner),
        ] {
            if cap > 0 && sessions.max == 0 {
                return Err(ConfigError::Value(format!(
                    "{name}={cap} has no effect: sessions are off; set SANDBOX_MAX_SESSIONS above 0 to turn them on"
                )));
            }
        }

        Ok(Config {
            addr,
            metrics_addr,
            log_format,
            auth,
            insecure,
            hardened,
            tls,
            provider,
            min_isolation,
            resources,
            admission: Admission { max_concurrent, per_key_concurrent, rate_per_min, rate_burst },
            total_memory_mb,
            cache_dir,
            grants_file,
            broker_plugins,
            wasm_python,
            wasm_engine,
            plugin,
            sessions,
            explicit: pick.explicit,
        })
    }

    /// Checks the rules that need no provider evidence: authentication, TLS pairs.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] saying what to set.
    pub fn check_auth(&self) -> Result<(), ConfigError> {
        if self.provider != ProviderKind::Disabled && self.auth == AuthSource::Open && !self.insecure {
            return Err(ConfigError::Value(format!(
                "the {} provider runs code, so callers must authenticate: set PLIMSOLL_CLIENTS_FILE (plimsoll-host callers create) or PLIMSOLL_TOKEN, or PLIMSOLL_INSECURE=1 for local development only",
                self.provider.as_str()
            )));
        }
        Ok(())
    }

    /// `PLIMSOLL_HARDENED=1`: every production rule this build can check, all listed
    /// at once. `tier` is the provider's proven evidence.
    pub fn hardened_violations(&self, tier: plimsoll_core::Tier) -> Vec<String> {
        let mut v = Vec::new();
        if !matches!(tier, plimsoll_core::Tier::Vm | plimsoll_core::Tier::Kernel) {
            v.push(format!(
                "isolation: the {} provider proved {tier}; hardened mode needs vm or a verified kernel tier",
                self.provider.as_str()
            ));
        }
        if !matches!(self.auth, AuthSource::ClientsFile(_)) {
            v.push("authentication: hardened mode needs PLIMSOLL_CLIENTS_FILE (one token per caller)".into());
        }
        if self.insecure {
            v.push("PLIMSOLL_INSECURE must be unset".into());
        }
        if self.tls.is_none() && !is_loopback(&self.addr) {
            v.push(format!(
                "TLS: PLIMSOLL_ADDR={} is not loopback, so PLIMSOLL_TLS_CERT and PLIMSOLL_TLS_KEY are required",
                self.addr
            ));
        }
        if let Some(m) = &self.metrics_addr
            && !is_loopback(m)
        {
            v.push(format!("TLS: PLIMSOLL_METRICS_ADDR={m} is not loopback; keep metrics on loopback"));
        }
        if !self.explicit.contains(&"SANDBOX_MEMORY_MB") || self.resources.memory_mb == 0 {
            v.push("envelope: set SANDBOX_MEMORY_MB explicitly".into());
        }
        if self.admission.rate_per_min == 0 {
            v.push("admission: SANDBOX_RATE_PER_MIN must be above 0".into());
        }
        if self.admission.rate_burst > self.admission.rate_per_min {
            v.push("admission: SANDBOX_RATE_BURST must not exceed SANDBOX_RATE_PER_MIN".into());
        }
        if !self.explicit.contains(&"SANDBOX_PER_KEY_CONCURRENT")
            || self.admission.per_key_concurrent >= self.admission.max_concurrent
        {
            v.push(
                "admission: set SANDBOX_PER_KEY_CONCURRENT explicitly, above 0 and below SANDBOX_MAX_CONCURRENT".into(),
            );
        }
        v
    }
}

/// Whether a listen address is loopback only (`localhost`, `127.0.0.0/8`, `::1`).
/// `:8746` (every interface) is not.
pub fn is_loopback(addr: &str) -> bool {
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests;
