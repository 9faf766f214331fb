//! Every variable the daemon reads, and the names it leaves to clients.

/// The prefix of the variables holding a broker plugin endpoint's `Authorization`.
pub const BROKER_AUTH_PREFIX: &str = "PLIMSOLL_BROKER_AUTH_";

/// Every variable the daemon reads, with the file key it overrides and what it does.
/// `serve --help` prints this table, so the usage text and the code cannot drift.
pub const VARIABLES: [(&str, &str, &str); 41] = [
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
    ("SANDBOX_PROVIDER", "sandbox.provider", "unset = disabled (runs nothing); wasm; or a provider plugin's name"),
    (
        "SANDBOX_PLUGINS_DIR",
        "sandbox.plugins-dir",
        "a directory of signed plugins, one per subdirectory named as the plugin",
    ),
    (
        "PLIMSOLL_GUARD_ADDR",
        "daemon.guard-addr",
        "the address the daemon serves the guard on, behind the guard URL's TLS terminator (plugins with a guard-url)",
    ),
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
];

/// The variables of the provider plugin `SANDBOX_PROVIDER` names, as patterns:
/// the host's four, and one per setting its manifest declares (with the aliases
/// it declares). `serve --help` prints these under the table above.
pub const PLUGIN_VARIABLES: [(&str, &str, &str); 5] = [
    ("SANDBOX_<NAME>_PLUGIN", "plugins.<name>.path", "the plugin's directory (else SANDBOX_PLUGINS_DIR/<name>)"),
    ("SANDBOX_<NAME>_PLUGIN_KEYS", "plugins.<name>.trusted-keys", "trusted public keys (PEM files), comma-separated"),
    ("SANDBOX_<NAME>_PLUGIN_APPROVE", "plugins.<name>.approve", "capabilities approved, comma-separated"),
    ("SANDBOX_<NAME>_MAX_TIER", "plugins.<name>.max-tier", "the strongest tier credited, default the manifest's"),
    (
        "SANDBOX_<NAME>_<SETTING>",
        "plugins.<name>.<setting>",
        "each setting the manifest declares (a secret: its value, or <setting>-file in the table); plugin inspect lists them",
    ),
];

/// Names that belong to plimsoll's clients and tools, not the daemon: set in the
/// same shell they are ignored, not refused.
pub(super) const CLIENT_VARIABLES: [&str; 9] = [
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
