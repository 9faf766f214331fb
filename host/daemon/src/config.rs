//! Operator configuration: `plimsoll.toml` (path from `--config` or
//! `PLIMSOLL_CONFIG`) holds everything; the original system's environment variables
//! override it. Strict throughout: an unknown key or variable, or a malformed value,
//! fails startup naming it, so a typo can never silently weaken a wall.

use std::path::{Path, PathBuf};
use std::time::Duration;

use plimsoll_core::Floor;
use serde::Deserialize;

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
    #[error("unknown variable{} {}: check the spelling (a misspelt safety setting must not be ignored)", if .0.len() == 1 { "" } else { "s" }, .0.join(", "))]
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
}

/// Where the wasm provider's engine runs guests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WasmEngine {
    /// In the daemon's own process (an explicit opt-out).
    InProcess,
    /// In jailed engine worker processes (`plimsoll_runtime::jail`), the default.
    #[default]
    Jailed,
}

impl WasmEngine {
    /// The setting's value, as `Describe` states it.
    pub fn as_str(self) -> &'static str {
        match self {
            WasmEngine::InProcess => "in-process",
            WasmEngine::Jailed => "jailed",
        }
    }
}

/// The `[sandbox]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct SandboxTable {
    provider: Option<String>,
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

/// The `[docker]` table: the docker provider's image, runtime and guest.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct DockerTable {
    image: Option<String>,
    runtime: Option<String>,
    guest_uid: Option<u32>,
    seccomp: Option<PathBuf>,
    warm_pool: Option<u32>,
}

/// A `[plugins.<name>]` table: where the plugin is, whom to trust, what it may use.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PluginTable {
    path: Option<PathBuf>,
    trusted_keys: Option<Vec<PathBuf>>,
    approve: Option<Vec<String>>,
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
    #[serde(default)]
    plugins: std::collections::BTreeMap<String, PluginTable>,
    #[serde(default)]
    grants: GrantsTable,
}

/// The `[grants]` table: where the grant profiles are.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct GrantsTable {
    file: Option<PathBuf>,
    broker_plugins: Option<Vec<PathBuf>>,
    broker_plugin_keys: Option<Vec<PathBuf>>,
    broker_endpoints: Option<Vec<String>>,
}

/// Where broker plugins come from and where their endpoints point.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BrokerPlugins {
    /// Plugin directories (`plugin.toml`, the component, `plugin.sig`).
    pub dirs: Vec<PathBuf>,
    /// Vendor keys the operator trusts (PEM files).
    pub trusted_keys: Vec<PathBuf>,
    /// `(plugin, alias, url)` for each endpoint a plugin calls.
    pub endpoints: Vec<(String, String, String)>,
}

/// Where a provider plugin comes from and what the operator allows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginConfig {
    /// The plugin's directory (`plugin.toml`, the component, `plugin.sig`).
    pub dir: PathBuf,
    /// Public keys (SPKI PEM files) whose signatures are trusted.
    pub trusted_keys: Vec<PathBuf>,
    /// Approved capabilities (`containers`, `http`, `log`).
    pub approve: Vec<String>,
}

/// The docker provider's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DockerConfig {
    /// The sandbox image, by content ID (or a name resolved to its ID once at startup).
    pub image: String,
    /// `runc` (the container tier) or `runsc` (gVisor, the kernel tier).
    pub runtime: String,
    /// The guest uid and gid.
    pub guest_uid: u32,
    /// A seccomp profile replacing the built-in one under runc.
    pub seccomp: Option<PathBuf>,
    /// Started containers kept per shape for fresh runs (`SANDBOX_WARM_POOL`, 0 = off).
    pub warm_pool: u32,
    /// The plugin.
    pub plugin: PluginConfig,
}

/// Which provider the daemon runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProviderKind {
    /// Runs nothing (the default).
    Disabled,
    /// QuickJS in-process, the process tier.
    Wasm,
    /// Locked-down containers through the docker plugin: container (runc) or kernel (runsc).
    Docker,
}

impl ProviderKind {
    /// The provider's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Disabled => "disabled",
            ProviderKind::Wasm => "wasm",
            ProviderKind::Docker => "docker",
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

/// Reads a duration as the original's settings write them: `90s`, `5m`, `1h30m`,
/// `250ms`, or a bare number of seconds.
fn parse_duration(name: &str, v: &str) -> Result<Duration, ConfigError> {
    plimsoll_core::duration::parse(v).ok_or_else(|| {
        ConfigError::Value(format!("{name}={v:?} is not a duration: write it as 90s, 5m, 1h30m or 250ms"))
    })
}

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
    /// The docker provider's settings, when it is the provider.
    pub docker: Option<DockerConfig>,
    /// Sessions: off unless `SANDBOX_MAX_SESSIONS` is above 0.
    pub sessions: SessionSettings,
    /// Settings the operator stated explicitly (hardened mode wants some of them).
    pub explicit: Vec<&'static str>,
}

/// The most runs in flight a daemon may admit. The original allowed 1024; a wasm run
/// costs about a pool slot's address space and a fresh store, so 2,000 and more fit
/// in a small machine (`docs/performance.md`).
pub const MAX_CONCURRENT_CEILING: u32 = 4096;

/// The prefix of the variables holding a broker plugin endpoint's `Authorization`.
pub const BROKER_AUTH_PREFIX: &str = "PLIMSOLL_BROKER_AUTH_";

/// Every variable the daemon reads, with the file key it overrides and what it does.
/// `serve --help` prints this table, so the usage text and the code cannot drift.
pub const VARIABLES: [(&str, &str, &str); 42] = [
    ("PLIMSOLL_CONFIG", "", "path of plimsoll.toml"),
    ("PLIMSOLL_ADDR", "daemon.addr", "RPC listener, default :8746"),
    ("PLIMSOLL_METRICS_ADDR", "daemon.metrics-addr", "metrics listener, default 127.0.0.1:9464; off"),
    ("PLIMSOLL_LOG_FORMAT", "daemon.log-format", "json (default) or text"),
    ("PLIMSOLL_CLIENTS_FILE", "daemon.clients-file", "callers with token fingerprints and scopes; wins over the token"),
    ("PLIMSOLL_TOKEN", "daemon.token-file", "one shared bearer token, at least 32 characters (file: its path)"),
    ("PLIMSOLL_INSECURE", "daemon.insecure", "1 = a real provider without authentication (development only)"),
    ("PLIMSOLL_HARDENED", "daemon.hardened", "1 = refuse to start unless every production rule holds"),
    ("PLIMSOLL_TLS_CERT", "daemon.tls-cert", "PEM certificate chain; with PLIMSOLL_TLS_KEY"),
    ("PLIMSOLL_TLS_KEY", "daemon.tls-key", "PEM private key; with PLIMSOLL_TLS_CERT"),
    ("PLIMSOLL_CACHE_DIR", "daemon.cache-dir", "precompiled components, default ~/.cache/plimsoll"),
    ("PLIMSOLL_GRANTS_FILE", "grants.file", "grant profiles (JSON): the APIs runs may call through the broker"),
    ("PLIMSOLL_BROKER_PLUGINS", "grants.broker-plugins", "signed vendor broker plugin directories, comma-separated"),
    (
        "PLIMSOLL_BROKER_PLUGIN_KEYS",
        "grants.broker-plugin-keys",
        "vendor public keys (PEM) trusted to sign broker plugins",
    ),
    (
        "PLIMSOLL_BROKER_ENDPOINTS",
        "grants.broker-endpoints",
        "PLUGIN.ALIAS=URL per endpoint; PLIMSOLL_BROKER_AUTH_<PLUGIN>_<ALIAS> is its Authorization",
    ),
    ("SANDBOX_PROVIDER", "sandbox.provider", "unset = disabled (runs nothing); wasm"),
    ("SANDBOX_WASM_PYTHON", "sandbox.wasm-python", "wasm: the CPython component (guests/python/build.sh)"),
    (
        "SANDBOX_WASM_ENGINE",
        "sandbox.wasm-engine",
        "wasm: jailed (default: the engine in confined worker processes) or in-process (opt-out)",
    ),
    ("SANDBOX_MIN_ISOLATION", "sandbox.min-isolation", "vm|kernel|container|process: startup floor"),
    ("SANDBOX_MEMORY_MB", "sandbox.memory-mb", "memory per run, 0 = provider default (wasm 256)"),
    ("SANDBOX_CPUS", "sandbox.cpus", "CPUs per run (providers that enforce it)"),
    ("SANDBOX_PIDS", "sandbox.pids", "processes per run (providers that enforce it)"),
    ("SANDBOX_DISK_MB", "sandbox.disk-mb", "writable storage per run (providers that enforce it)"),
    ("SANDBOX_MAX_CONCURRENT", "sandbox.max-concurrent", "runs in flight, 1..4096, default 8"),
    ("SANDBOX_PER_KEY_CONCURRENT", "sandbox.per-key-concurrent", "runs in flight per caller, default max/2"),
    ("SANDBOX_RATE_PER_MIN", "sandbox.rate-per-min", "runs per minute per caller, default 30, 0 = off"),
    ("SANDBOX_RATE_BURST", "sandbox.rate-burst", "bucket size per caller, default the rate"),
    ("SANDBOX_TOTAL_MEMORY_MB", "sandbox.total-memory-mb", "clamps max-concurrent to what fits, 0 = off"),
    ("SANDBOX_MAX_SESSIONS", "sandbox.max-sessions", "sessions open at once, 0 = sessions off (default)"),
    ("SANDBOX_MAX_SESSIONS_PER_CALLER", "sandbox.max-sessions-per-caller", "sessions per caller, 0 = no cap"),
    (
        "SANDBOX_MAX_SESSIONS_PER_OWNER",
        "sandbox.max-sessions-per-owner",
        "sessions per owner; at the cap an open replaces the owner's least recently used idle one",
    ),
    ("SANDBOX_SESSION_LIFETIME", "sandbox.session-lifetime", "a session's lifetime, default 30m, 1s..12h"),
    ("SANDBOX_SESSION_IDLE", "sandbox.session-idle", "idle time before a session is suspended, default 5m, 0 = never"),
    ("SANDBOX_SESSION_DISK_MB", "sandbox.session-disk-mb", "a session's disk budget, default 1024, 0 = unbounded"),
    ("SANDBOX_DOCKER_IMAGE", "docker.image", "the sandbox image's ID (images/build.sh prints it)"),
    ("SANDBOX_DOCKER_RUNTIME", "docker.runtime", "runc (container tier, default) or runsc (kernel tier)"),
    ("SANDBOX_DOCKER_GUEST_UID", "docker.guest-uid", "the guest's uid and gid, default 61000"),
    ("SANDBOX_DOCKER_SECCOMP", "docker.seccomp", "a seccomp profile replacing the built-in one (runc)"),
    ("SANDBOX_WARM_POOL", "docker.warm-pool", "started containers kept per snippet shape, 0..64, default 0 = off"),
    ("SANDBOX_DOCKER_PLUGIN", "plugins.docker.path", "the docker plugin's directory"),
    ("SANDBOX_DOCKER_PLUGIN_KEYS", "plugins.docker.trusted-keys", "trusted public keys (PEM files), comma-separated"),
    ("SANDBOX_DOCKER_PLUGIN_APPROVE", "plugins.docker.approve", "capabilities approved, comma-separated"),
];

/// Names that belong to plimsoll's clients and tools, not the daemon: set in the
/// same shell they are ignored, not refused.
const CLIENT_VARIABLES: [&str; 9] = [
    "PLIMSOLL_URL",
    "PLIMSOLL_CALLER_TOKEN",
    "PLIMSOLL_TOKEN_FILE",
    "PLIMSOLL_MIN_ISOLATION",
    "PLIMSOLL_SOFTWARE_IDENTITY",
    "PLIMSOLL_ATTEST_KEY",
    "PLIMSOLL_TLS_CA",
    "PLIMSOLL_RUN_TIMEOUT_MS",
    "PLIMSOLL_DAEMON",
];

fn parse_bool(name: &str, v: &str) -> Result<bool, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "" | "0" | "false" => Ok(false),
        "1" | "true" => Ok(true),
        _ => Err(ConfigError::Value(format!("{name}={v:?} is not a boolean: use 1/true or 0/false"))),
    }
}

fn parse_u32(name: &str, v: &str) -> Result<u32, ConfigError> {
    v.parse::<u32>().map_err(|_| ConfigError::Value(format!("{name}={v:?} is not a whole number")))
}

/// A source of variables: the process environment, or a map in tests.
pub trait Env {
    /// The variable's value, if set.
    fn get(&self, name: &str) -> Option<String>;
    /// Every variable name that is set.
    fn names(&self) -> Vec<String>;
}

/// The process environment.
#[derive(Debug, Clone, Copy)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn names(&self) -> Vec<String> {
        std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).collect()
    }
}

impl Env for std::collections::HashMap<String, String> {
    fn get(&self, name: &str) -> Option<String> {
        std::collections::HashMap::get(self, name).cloned()
    }
    fn names(&self) -> Vec<String> {
        self.keys().cloned().collect()
    }
}

/// One setting: the environment wins over the file; either may be absent.
struct Pick<'a> {
    env: &'a dyn Env,
    explicit: Vec<&'static str>,
}

impl Pick<'_> {
    fn string(&mut self, var: &'static str, file: Option<String>) -> Option<String> {
        let v = self.env.get(var).or(file);
        if v.is_some() {
            self.explicit.push(var);
        }
        v
    }

    fn u32(&mut self, var: &'static str, file: Option<u32>) -> Result<Option<u32>, ConfigError> {
        match self.env.get(var) {
            Some(v) if v.is_empty() => Ok(file),
            Some(v) => {
                self.explicit.push(var);
                parse_u32(var, &v).map(Some)
            }
            None => {
                if file.is_some() {
                    self.explicit.push(var);
                }
                Ok(file)
            }
        }
    }

    fn bool(&mut self, var: &'static str, file: Option<bool>) -> Result<bool, ConfigError> {
        match self.env.get(var) {
            Some(v) => parse_bool(var, &v),
            None => Ok(file.unwrap_or(false)),
        }
    }
}

impl Config {
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
        let unknown: Vec<String> = {
            let mut u: Vec<String> = env
                .names()
                .into_iter()
                .filter(|n| n.starts_with("PLIMSOLL_") || n.starts_with("SANDBOX_"))
                .filter(|n| !VARIABLES.iter().any(|(v, _, _)| v == n) && !CLIENT_VARIABLES.contains(&n.as_str()))
                // One per broker plugin endpoint; a misspelt one leaves its endpoint without
                // a credential, which the vendor's token endpoint refuses.
                .filter(|n| !n.starts_with(BROKER_AUTH_PREFIX))
                .collect();
            u.sort();
            u
        };
        if !unknown.is_empty() {
            return Err(ConfigError::UnknownVariables(unknown));
        }
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
        let mut pick = Pick { env, explicit: Vec::new() };

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
        let broker_plugins = broker_plugins(&mut pick, grants_table)?;

        let provider = match pick
            .string("SANDBOX_PROVIDER", s.provider)
            .map(|p| p.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("") | Some("disabled") => ProviderKind::Disabled,
            Some("wasm") => ProviderKind::Wasm,
            Some("docker") => ProviderKind::Docker,
            Some(p @ ("e2b" | "dockercloud" | "openshell" | "agentsandbox")) => {
                return Err(ConfigError::Value(format!(
                    "SANDBOX_PROVIDER={p:?}: that provider is not built into this version yet; this build runs wasm and docker"
                )));
            }
            Some(other) => {
                return Err(ConfigError::Value(format!(
                    "SANDBOX_PROVIDER={other:?} is not a provider; use wasm or docker (or leave it unset)"
                )));
            }
        };
        let docker = docker_config(&mut pick, provider, docker_table, plugins.remove("docker"))?;
        if let Some(name) = plugins.keys().next() {
            return Err(ConfigError::Value(format!("[plugins.{name}]: this build loads only the docker plugin")));
        }
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
        let pids = pick.u32("SANDBOX_PIDS", s.pids)?.unwrap_or(0);
        let disk_mb = pick.u32("SANDBOX_DISK_MB", s.disk_mb)?.unwrap_or(0);
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
            let pooled = docker.as_ref().map_or(0, |d| d.warm_pool * plimsoll_containers::pool::MAX_SHAPES as u32);
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
            resources: Resources { memory_mb, cpus, pids, disk_mb },
            admission: Admission { max_concurrent, per_key_concurrent, rate_per_min, rate_burst },
            total_memory_mb,
            cache_dir,
            grants_file,
            broker_plugins,
            wasm_python,
            wasm_engine,
            docker,
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

/// Reads the broker plugin settings: environment first, then `[grants]`.
fn broker_plugins(pick: &mut Pick<'_>, t: GrantsTable) -> Result<BrokerPlugins, ConfigError> {
    let list = |v: String| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect::<Vec<_>>();
    let paths = |v: Option<String>, file: Option<Vec<PathBuf>>| match v {
        Some(v) => list(v).into_iter().map(PathBuf::from).collect(),
        None => file.unwrap_or_default(),
    };
    let dirs = paths(pick.string("PLIMSOLL_BROKER_PLUGINS", None), t.broker_plugins);
    let trusted_keys = paths(pick.string("PLIMSOLL_BROKER_PLUGIN_KEYS", None), t.broker_plugin_keys);
    let endpoints = match pick.string("PLIMSOLL_BROKER_ENDPOINTS", None) {
        Some(v) => list(v),
        None => t.broker_endpoints.unwrap_or_default(),
    };
    let mut parsed = Vec::new();
    for e in endpoints {
        let bad = || ConfigError::Value(format!("PLIMSOLL_BROKER_ENDPOINTS: {e:?} must be PLUGIN.ALIAS=URL"));
        let (key, url) = e.split_once('=').ok_or_else(bad)?;
        let (plugin, alias) = key.split_once('.').ok_or_else(bad)?;
        if plugin.is_empty() || alias.is_empty() || url.is_empty() {
            return Err(bad());
        }
        parsed.push((plugin.to_string(), alias.to_string(), url.to_string()));
    }
    if !dirs.is_empty() && trusted_keys.is_empty() {
        return Err(ConfigError::Value(
            "PLIMSOLL_BROKER_PLUGINS is set but PLIMSOLL_BROKER_PLUGIN_KEYS names no vendor key; a broker plugin loads only when a key the operator trusts signed it".into(),
        ));
    }
    Ok(BrokerPlugins { dirs, trusted_keys, endpoints: parsed })
}

/// Reads the docker settings: required when docker is the provider, refused when
/// it is not (a docker setting on another provider would be silently ignored).
fn docker_config(
    pick: &mut Pick<'_>,
    provider: ProviderKind,
    t: DockerTable,
    plugin: Option<PluginTable>,
) -> Result<Option<DockerConfig>, ConfigError> {
    let plugin = plugin.unwrap_or_default();
    let list = |v: String| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect::<Vec<_>>();
    let image = pick.string("SANDBOX_DOCKER_IMAGE", t.image);
    let runtime = pick.string("SANDBOX_DOCKER_RUNTIME", t.runtime);
    let guest_uid = pick.u32("SANDBOX_DOCKER_GUEST_UID", t.guest_uid)?;
    let seccomp = pick.string("SANDBOX_DOCKER_SECCOMP", t.seccomp.map(|p| p.display().to_string()));
    let warm_pool = pick.u32("SANDBOX_WARM_POOL", t.warm_pool)?;
    let dir = pick.string("SANDBOX_DOCKER_PLUGIN", plugin.path.map(|p| p.display().to_string()));
    let keys = match pick.string("SANDBOX_DOCKER_PLUGIN_KEYS", None) {
        Some(v) => list(v).into_iter().map(PathBuf::from).collect(),
        None => plugin.trusted_keys.unwrap_or_default(),
    };
    let approve = match pick.string("SANDBOX_DOCKER_PLUGIN_APPROVE", None) {
        Some(v) => list(v),
        None => plugin.approve.unwrap_or_default(),
    };
    if provider != ProviderKind::Docker {
        let set = [
            ("SANDBOX_DOCKER_IMAGE", image.is_some()),
            ("SANDBOX_DOCKER_RUNTIME", runtime.is_some()),
            ("SANDBOX_DOCKER_GUEST_UID", guest_uid.is_some()),
            ("SANDBOX_DOCKER_SECCOMP", seccomp.is_some()),
            ("SANDBOX_WARM_POOL", warm_pool.is_some()),
            ("SANDBOX_DOCKER_PLUGIN", dir.is_some()),
        ];
        if let Some((name, _)) = set.iter().find(|(_, s)| *s) {
            return Err(ConfigError::Value(format!(
                "{name} is set, but SANDBOX_PROVIDER is {}; set SANDBOX_PROVIDER=docker or unset it",
                provider.as_str()
            )));
        }
        return Ok(None);
    }
    let image = image.filter(|i| !i.trim().is_empty()).ok_or_else(|| {
        ConfigError::Value("SANDBOX_PROVIDER=docker needs SANDBOX_DOCKER_IMAGE: build the image with images/build.sh and set the ID it prints".into())
    })?;
    if image.starts_with('-') || image.trim() != image {
        return Err(ConfigError::Value(format!("SANDBOX_DOCKER_IMAGE={image:?} is not an image reference")));
    }
    let runtime = runtime.unwrap_or_else(|| "runc".into());
    if !matches!(runtime.as_str(), "runc" | "runsc") {
        return Err(ConfigError::Value(format!("SANDBOX_DOCKER_RUNTIME={runtime:?}: use runc or runsc")));
    }
    let dir = dir.filter(|d| !d.is_empty()).ok_or_else(|| {
        ConfigError::Value("SANDBOX_PROVIDER=docker needs SANDBOX_DOCKER_PLUGIN: the signed plugin's directory (plugins/build.sh, then plimsoll-host plugin sign)".into())
    })?;
    if keys.is_empty() {
        return Err(ConfigError::Value(
            "SANDBOX_DOCKER_PLUGIN_KEYS is empty: name the public key(s) whose plugin signatures you trust".into(),
        ));
    }
    let warm_pool = warm_pool.unwrap_or(0);
    if warm_pool > plimsoll_containers::pool::MAX_SIZE {
        return Err(ConfigError::Value(format!(
            "SANDBOX_WARM_POOL={warm_pool} is outside 0..{}",
            plimsoll_containers::pool::MAX_SIZE
        )));
    }
    Ok(Some(DockerConfig {
        image,
        runtime,
        guest_uid: guest_uid.unwrap_or(plimsoll_containers::uid::DEFAULT_GUEST_UID),
        seccomp: seccomp.filter(|s| !s.is_empty()).map(PathBuf::from),
        warm_pool,
        plugin: PluginConfig { dir: PathBuf::from(dir), trusted_keys: keys, approve },
    }))
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
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::load(None, &env(pairs))
    }

    #[test]
    fn defaults_are_the_originals() {
        let c = load(&[]).expect("defaults");
        assert_eq!(c.addr, ":8746");
        assert_eq!(c.metrics_addr.as_deref(), Some("127.0.0.1:9464"));
        assert_eq!(c.provider, ProviderKind::Disabled);
        assert_eq!(
            c.admission,
            Admission { max_concurrent: 8, per_key_concurrent: 4, rate_per_min: 30, rate_burst: 30 }
        );
        assert_eq!(c.auth, AuthSource::Open);
    }

    #[test]
    fn sessions_are_off_by_default_and_read_the_originals_durations() {
        let c = load(&[]).expect("defaults");
        assert_eq!(c.sessions, SessionSettings::default());
        assert_eq!(
            (c.sessions.max, c.sessions.lifetime, c.sessions.idle),
            (0, Duration::from_secs(1800), Duration::from_secs(300))
        );
        let c = load(&[
            ("SANDBOX_MAX_SESSIONS", "16"),
            ("SANDBOX_MAX_SESSIONS_PER_OWNER", "2"),
            ("SANDBOX_SESSION_LIFETIME", "1h30m"),
            ("SANDBOX_SESSION_IDLE", "0"),
            ("SANDBOX_SESSION_DISK_MB", "0"),
        ])
        .expect("sessions");
        assert_eq!((c.sessions.max, c.sessions.per_owner), (16, 2));
        assert_eq!(
            (c.sessions.lifetime, c.sessions.idle, c.sessions.disk_mb),
            (Duration::from_secs(5400), Duration::ZERO, 0)
        );
        assert_eq!(parse_duration("X", "250ms").expect("ms"), Duration::from_millis(250));
        assert_eq!(parse_duration("X", "90").expect("bare seconds"), Duration::from_secs(90));
    }

    #[test]
    fn bad_session_settings_name_the_variable_and_the_fix() {
        let cases: [(&[(&str, &str)], &str); 5] = [
            (
                &[("SANDBOX_SESSION_LIFETIME", "soon")],
                "SANDBOX_SESSION_LIFETIME=\"soon\" is not a duration: write it as 90s, 5m, 1h30m or 250ms",
            ),
            (&[("SANDBOX_SESSION_LIFETIME", "13h")], "SANDBOX_SESSION_LIFETIME=46800s is outside 1s..12h"),
            (&[("SANDBOX_SESSION_IDLE", "500ms")], "SANDBOX_SESSION_IDLE=500ms is outside 1s..12h (0 = never suspend)"),
            (&[("SANDBOX_SESSION_DISK_MB", "2000000")], "SANDBOX_SESSION_DISK_MB=2000000 is over 1048576 (1 TiB)"),
            (
                &[("SANDBOX_MAX_SESSIONS_PER_CALLER", "2")],
                "SANDBOX_MAX_SESSIONS_PER_CALLER=2 has no effect: sessions are off; set SANDBOX_MAX_SESSIONS above 0 to turn them on",
            ),
        ];
        for (vars, want) in cases {
            let e = load(vars).expect_err("refused");
            assert_eq!(e.to_string(), want, "{vars:?}");
        }
    }

    #[test]
    fn an_unknown_variable_fails_startup_naming_it() {
        let e = load(&[("SANDBOX_MIN_ISOLATON", "kernel"), ("PLIMSOLL_CALLER_TOKEN", "x")]).expect_err("typo");
        assert_eq!(
            e.to_string(),
            "unknown variable SANDBOX_MIN_ISOLATON: check the spelling (a misspelt safety setting must not be ignored)"
        );
    }

    #[test]
    fn malformed_values_name_the_variable() {
        let cases: [(&[(&str, &str)], &str); 9] = [
            (&[("SANDBOX_MAX_CONCURRENT", "many")], "SANDBOX_MAX_CONCURRENT=\"many\" is not a whole number"),
            (&[("SANDBOX_MAX_CONCURRENT", "0")], "SANDBOX_MAX_CONCURRENT=0 is outside 1..4096"),
            (&[("SANDBOX_MAX_CONCURRENT", "4097")], "SANDBOX_MAX_CONCURRENT=4097 is outside 1..4096"),
            (&[("PLIMSOLL_INSECURE", "yes")], "PLIMSOLL_INSECURE=\"yes\" is not a boolean: use 1/true or 0/false"),
            (
                &[("SANDBOX_MIN_ISOLATION", "none")],
                "SANDBOX_MIN_ISOLATION: minimum isolation \"none\" is not a floor; use process, container, kernel or vm, or leave it empty",
            ),
            (
                &[("SANDBOX_PROVIDER", "dokcer")],
                "SANDBOX_PROVIDER=\"dokcer\" is not a provider; use wasm or docker (or leave it unset)",
            ),
            (
                &[("PLIMSOLL_TOKEN", "short")],
                "PLIMSOLL_TOKEN is shorter than 32 characters; use a long random token (plimsoll-host callers create prints one)",
            ),
            (
                &[("PLIMSOLL_TLS_CERT", "/c.pem")],
                "PLIMSOLL_TLS_CERT and PLIMSOLL_TLS_KEY go together: set both or neither",
            ),
            (
                &[("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_PIDS", "64")],
                "SANDBOX_PIDS is set, but the wasm provider cannot enforce it (it enforces memory only); unset it",
            ),
        ];
        for (pairs, want) in cases {
            assert_eq!(load(pairs).expect_err(want).to_string(), want);
        }
        let e = load(&[("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_WASM_ENGINE", "inprocess")]).expect_err("a typo");
        assert!(e.to_string().ends_with("SANDBOX_WASM_ENGINE=\"inprocess\": use in-process or jailed"), "{e}");
    }

    #[test]
    fn the_wasm_engine_is_jailed_unless_opted_out() {
        let engine = |v: &[(&str, &str)]| load(v).expect("config").wasm_engine;
        assert_eq!(engine(&[("SANDBOX_PROVIDER", "wasm")]), WasmEngine::Jailed);
        assert_eq!(engine(&[("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_WASM_ENGINE", "")]), WasmEngine::Jailed);
        assert_eq!(
            engine(&[("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_WASM_ENGINE", "in-process")]),
            WasmEngine::InProcess
        );
    }

    #[test]
    fn docker_settings_are_required_for_docker_and_refused_elsewhere() {
        let full: [(&str, &str); 4] = [
            ("SANDBOX_PROVIDER", "docker"),
            ("SANDBOX_DOCKER_IMAGE", "sha256:abc"),
            ("SANDBOX_DOCKER_PLUGIN", "/opt/plimsoll/docker"),
            ("SANDBOX_DOCKER_PLUGIN_KEYS", "/etc/plimsoll/ops.pub, /etc/plimsoll/ci.pub"),
        ];
        let c = load(&full).expect("loads");
        let d = c.docker.expect("docker settings");
        assert_eq!((d.runtime.as_str(), d.guest_uid), ("runc", 61000));
        assert_eq!(d.plugin.trusted_keys.len(), 2);
        let without = |name: &str| full.iter().copied().filter(|(k, _)| *k != name).collect::<Vec<_>>();
        let with = |pair: (&'static str, &'static str)| {
            let mut v = full.to_vec();
            v.push(pair);
            v
        };
        let cases: [(Vec<(&str, &str)>, &str); 6] = [
            (
                without("SANDBOX_DOCKER_IMAGE"),
                "SANDBOX_PROVIDER=docker needs SANDBOX_DOCKER_IMAGE: build the image with images/build.sh and set the ID it prints",
            ),
            (
                without("SANDBOX_DOCKER_PLUGIN"),
                "SANDBOX_PROVIDER=docker needs SANDBOX_DOCKER_PLUGIN: the signed plugin's directory (plugins/build.sh, then plimsoll-host plugin sign)",
            ),
            (
                without("SANDBOX_DOCKER_PLUGIN_KEYS"),
                "SANDBOX_DOCKER_PLUGIN_KEYS is empty: name the public key(s) whose plugin signatures you trust",
            ),
            (with(("SANDBOX_DOCKER_RUNTIME", "kata")), "SANDBOX_DOCKER_RUNTIME=\"kata\": use runc or runsc"),
            (with(("SANDBOX_DOCKER_GUEST_UID", "root")), "SANDBOX_DOCKER_GUEST_UID=\"root\" is not a whole number"),
            (
                vec![("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_DOCKER_IMAGE", "sha256:abc")],
                "SANDBOX_DOCKER_IMAGE is set, but SANDBOX_PROVIDER is wasm; set SANDBOX_PROVIDER=docker or unset it",
            ),
        ];
        for (pairs, want) in cases {
            assert_eq!(load(&pairs).expect_err(want).to_string(), want);
        }
    }

    #[test]
    fn the_warm_pool_is_off_by_default_bounded_docker_only_and_counted_against_total_memory() {
        let docker: [(&str, &str); 4] = [
            ("SANDBOX_PROVIDER", "docker"),
            ("SANDBOX_DOCKER_IMAGE", "sha256:abc"),
            ("SANDBOX_DOCKER_PLUGIN", "/opt/plimsoll/docker"),
            ("SANDBOX_DOCKER_PLUGIN_KEYS", "/etc/plimsoll/ops.pub"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| [&docker[..], extra].concat();
        assert_eq!(load(&docker).expect("loads").docker.expect("docker").warm_pool, 0);
        let c = load(&with(&[("SANDBOX_WARM_POOL", "64")])).expect("loads");
        assert_eq!(c.docker.expect("docker").warm_pool, 64);
        let cases: [(Vec<(&str, &str)>, &str); 4] = [
            (with(&[("SANDBOX_WARM_POOL", "65")]), "SANDBOX_WARM_POOL=65 is outside 0..64"),
            (with(&[("SANDBOX_WARM_POOL", "some")]), "SANDBOX_WARM_POOL=\"some\" is not a whole number"),
            (
                vec![("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_WARM_POOL", "2")],
                "SANDBOX_WARM_POOL is set, but SANDBOX_PROVIDER is wasm; set SANDBOX_PROVIDER=docker or unset it",
            ),
            (
                with(&[("SANDBOX_WARM_POOL", "2"), ("SANDBOX_TOTAL_MEMORY_MB", "2048")]),
                "SANDBOX_TOTAL_MEMORY_MB=2048 does not fit one run of 256 MiB beside the warm pool's 8 containers (SANDBOX_WARM_POOL per shape, 4 shapes)",
            ),
        ];
        for (pairs, want) in cases {
            assert_eq!(load(&pairs).expect_err(want).to_string(), want);
        }
        // Each container the pool may hold counts one run's memory.
        let c = load(&with(&[("SANDBOX_WARM_POOL", "2"), ("SANDBOX_TOTAL_MEMORY_MB", "4096")])).expect("fits");
        assert_eq!(c.admission.max_concurrent, 8);
        let c = load(&with(&[("SANDBOX_WARM_POOL", "2"), ("SANDBOX_TOTAL_MEMORY_MB", "2560")])).expect("fits");
        assert_eq!(c.admission.max_concurrent, 2);
        let toml = std::env::temp_dir().join(format!("plimsoll-pool-{}.toml", std::process::id()));
        std::fs::write(&toml, "[docker]\nwarm-pool = 3\n").expect("write");
        let c = Config::load(Some(&toml), &env(&docker)).expect("loads the file");
        assert_eq!(c.docker.expect("docker").warm_pool, 3);
        let _ = std::fs::remove_file(&toml);
    }

    #[test]
    fn the_file_is_strict_and_the_environment_wins() {
        let dir = std::env::temp_dir().join(format!("plimsoll-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("plimsoll.toml");
        std::fs::write(&path, "[sandbox]\nprovider = \"wasm\"\nmax-concurrent = 16\n").expect("write");
        let c = Config::load(Some(&path), &env(&[("SANDBOX_MAX_CONCURRENT", "4")])).expect("loads");
        assert_eq!((c.provider, c.admission.max_concurrent), (ProviderKind::Wasm, 4));
        std::fs::write(&path, "[sandbox]\nprovidr = \"wasm\"\n").expect("write");
        let e = Config::load(Some(&path), &env(&[])).expect_err("unknown key").to_string();
        assert!(e.contains("unknown field `providr`"), "{e}");
        std::fs::write(&path, "[sandbox]\nmax-concurrent = \"x\"\n").expect("write");
        let e = Config::load(Some(&path), &env(&[])).expect_err("bad type").to_string();
        assert!(e.contains("max-concurrent"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn total_memory_clamps_concurrency() {
        let c = load(&[("SANDBOX_TOTAL_MEMORY_MB", "1024"), ("SANDBOX_MEMORY_MB", "256")]).expect("fits");
        assert_eq!(c.admission.max_concurrent, 4);
        assert!(load(&[("SANDBOX_TOTAL_MEMORY_MB", "100")]).is_err());
    }

    #[test]
    fn a_real_provider_without_callers_needs_an_explicit_opt_in() {
        let c = load(&[("SANDBOX_PROVIDER", "wasm")]).expect("loads");
        assert!(c.check_auth().expect_err("open").to_string().contains("set PLIMSOLL_CLIENTS_FILE"));
        let c = load(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_INSECURE", "1")]).expect("loads");
        assert!(c.check_auth().is_ok());
        assert!(load(&[]).expect("disabled").check_auth().is_ok());
    }

    #[test]
    fn hardened_mode_lists_every_violation_at_once() {
        let c = load(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_INSECURE", "1"), ("SANDBOX_RATE_PER_MIN", "0")])
            .expect("loads");
        let v = c.hardened_violations(plimsoll_core::Tier::Process);
        assert_eq!(v.len(), 7, "{v:#?}");
        assert!(v[0].starts_with("isolation: the wasm provider proved process"));
    }

    #[test]
    fn loopback_addresses() {
        assert!(is_loopback("127.0.0.1:8746"));
        assert!(is_loopback("[::1]:1"));
        assert!(is_loopback("localhost:9"));
        assert!(!is_loopback(":8746"));
        assert!(!is_loopback("0.0.0.0:8746"));
    }
}
