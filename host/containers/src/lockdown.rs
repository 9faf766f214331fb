//! The lockdown invariants. A plugin describes the container it wants as a
//! [`Spec`] (image, runtime, limits, tmpfs sizes, command); the host builds the
//! engine's create body from it, adding everything a plugin may not choose, and
//! then checks the **final body** against every invariant with
//! [`Lockdown::check_body`]. The check reads the body the engine will receive, not
//! the spec, so a mistake in the builder cannot weaken the wall either.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use bollard::models::{ContainerCreateBody, HostConfig, HostConfigLogConfig};

/// The label that carries a container's expiry (unix seconds); the orphan sweep reads it.
pub const LIFETIME_LABEL: &str = "dev.plimsoll.expires";
/// The prefix of every label a plugin may set.
pub const PLUGIN_LABEL_PREFIX: &str = "dev.plimsoll.plugin.";
/// Where the host's resolver file appears inside every container.
pub const RESOLV_TARGET: &str = "/etc/resolv.conf";
/// The tmpfs mounts a container may have; `/tmp` and `/dev/shm` are always present.
pub const TMPFS_TARGETS: [&str; 3] = ["/tmp", "/dev/shm", "/work"];
/// Environment names the dynamic loader or libc read at startup; never passed in.
const LOADER_ENV: [&str; 5] = ["GLIBC_TUNABLES", "LOCPATH", "NLSPATH", "GCONV_PATH", "HOSTALIASES"];

/// A tmpfs mount a plugin asks for. Options are the host's: `rw,noexec,nosuid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tmpfs {
    /// One of [`TMPFS_TARGETS`].
    pub target: String,
    /// The mount's size cap.
    pub size_mb: u32,
}

/// The container a plugin asks for: everything it may choose, nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// A content ID (`sha256:` + 64 hex) the host proved at startup.
    pub image_id: String,
    /// A runtime the host verified at startup.
    pub runtime: String,
    /// The guest uid (also its gid).
    pub user: u32,
    /// Memory, swap included.
    pub memory_mb: u32,
    /// CPU in thousandths of a core.
    pub cpus_milli: u32,
    /// Processes and threads.
    pub pids: u32,
    /// Writable mounts.
    pub tmpfs: Vec<Tmpfs>,
    /// The working directory; `/work` or `/tmp`.
    pub workdir: String,
    /// The main process, run directly (the image's entrypoint never runs).
    pub command: Vec<String>,
    /// Variables for the main process.
    pub env: Vec<(String, String)>,
    /// Labels under [`PLUGIN_LABEL_PREFIX`].
    pub labels: Vec<(String, String)>,
    /// Seconds until the orphan sweep may remove the container.
    pub lifetime_s: u32,
    /// The run's broker socket, when the run holds a grant. Only the host sets it;
    /// a plugin's spec cannot express it.
    pub broker: Option<BrokerMount>,
}

/// Where a broker directory is mounted inside a container (read-only).
pub const BROKER_TARGET: &str = "/run/plimsoll";

/// The host directory every per-run broker directory lives in.
pub fn broker_root() -> PathBuf {
    std::env::temp_dir().join("plimsoll-broker")
}

/// A run's broker directory (its socket and in-sandbox clients) and the variables
/// that point the sandbox's clients at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerMount {
    /// The host directory: a direct child of [`broker_root`].
    pub dir: PathBuf,
    /// Variables the host sets for every process of the container.
    pub env: Vec<(String, String)>,
}

impl BrokerMount {
    fn bind(&self) -> String {
        format!("{}:{BROKER_TARGET}:ro", self.dir.display())
    }
}

/// Whether `bind` is a broker bind the host could have made.
fn is_broker_bind(bind: &str) -> bool {
    let Some(dir) = bind.strip_suffix(&format!(":{BROKER_TARGET}:ro")) else {
        return false;
    };
    let dir = Path::new(dir);
    dir.parent() == Some(broker_root().as_path())
        && dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("run-") && n.len() > 4 && n[4..].bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The most any one container may get; the operator's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ceilings {
    /// Memory, swap included.
    pub memory_mb: u32,
    /// CPU in thousandths of a core.
    pub cpus_milli: u32,
    /// Processes and threads.
    pub pids: u32,
    /// All tmpfs mounts together.
    pub disk_mb: u32,
    /// The longest lifetime label.
    pub lifetime_s: u32,
}

impl Default for Ceilings {
    fn default() -> Ceilings {
        Ceilings { memory_mb: 2048, cpus_milli: 4000, pids: 1024, disk_mb: 1024, lifetime_s: 6 * 3600 }
    }
}

/// An invariant a spec or a create body breaks. The text names it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    /// The root filesystem is writable.
    #[error("lockdown: the root filesystem must be read-only")]
    ReadOnlyRoot,
    /// The container could reach a network.
    #[error("lockdown: the network must be none ({0})")]
    Network(String),
    /// A capability survives.
    #[error("lockdown: every capability must be dropped ({0})")]
    Capabilities(String),
    /// no-new-privileges is missing or a security option weakens confinement.
    #[error("lockdown: {0}")]
    SecurityOptions(String),
    /// The user is root, missing, or not the verified guest uid.
    #[error("lockdown: the user must be the guest uid {expected}:{expected} ({found})")]
    User {
        /// The verified guest uid.
        expected: u32,
        /// What the body or spec holds.
        found: String,
    },
    /// Memory is unbounded, swap is allowed, or the ceiling is exceeded.
    #[error("lockdown: memory {0}")]
    Memory(String),
    /// The pids limit is missing or above the ceiling.
    #[error("lockdown: pids {0}")]
    Pids(String),
    /// The CPU limit is missing or above the ceiling.
    #[error("lockdown: cpus {0}")]
    Cpus(String),
    /// A tmpfs mount is missing, unknown, unsized, executable or over the budget.
    #[error("lockdown: tmpfs {0}")]
    Tmpfs(String),
    /// A host path would be visible inside the container.
    #[error("lockdown: no host binds or volumes but the host's own resolv.conf and run broker ({0})")]
    HostBind(String),
    /// The container is privileged.
    #[error("lockdown: the container must not be privileged")]
    Privileged,
    /// A device would be visible inside the container.
    #[error("lockdown: no devices ({0})")]
    Devices(String),
    /// A host namespace would be shared.
    #[error("lockdown: no host namespaces ({0})")]
    HostNamespace(String),
    /// The image is a tag, or an ID the host did not prove.
    #[error("lockdown: the image must be a proven content ID ({0})")]
    Image(String),
    /// The runtime is not one verified at startup, or its seccomp rule is broken.
    #[error("lockdown: the runtime must be one verified at startup ({0})")]
    Runtime(String),
    /// The command, working directory, environment, labels or lifetime are malformed.
    #[error("lockdown: {0}")]
    Process(String),
}

/// What the host verified at startup and enforces on every create.
#[derive(Clone, Debug)]
pub struct Lockdown {
    /// The verified guest uid.
    pub guest_uid: u32,
    /// Runtimes listed by the engine and proven by the smoke test.
    pub runtimes: BTreeSet<String>,
    /// Proven image IDs, with the name the operator configured.
    pub images: BTreeMap<String, String>,
    /// The host's own resolver file, bound read-only at [`RESOLV_TARGET`].
    pub resolv_conf: PathBuf,
    /// The seccomp profile (JSON) applied under runc; never under runsc, which
    /// filters system calls itself.
    pub seccomp: Option<String>,
    /// The operator's ceilings.
    pub ceilings: Ceilings,
}

fn is_content_id(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Whether the dynamic loader or libc reads `name` at startup (`LD_*` and the rest).
pub(crate) fn is_loader_variable(name: &str) -> bool {
    name.starts_with("LD_") || LOADER_ENV.contains(&name)
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !s.as_bytes()[0].is_ascii_digit()
        && !is_loader_variable(s)
}

impl Lockdown {
    /// The bind the host adds for the resolver file.
    pub fn resolv_bind(&self) -> String {
        format!("{}:{RESOLV_TARGET}:ro", self.resolv_conf.display())
    }

    /// Builds the engine create body for a spec, then checks it.
    ///
    /// # Errors
    ///
    /// The first invariant the spec (or the body built from it) breaks.
    pub fn create_body(&self, spec: &Spec, now_unix: u64) -> Result<ContainerCreateBody, Violation> {
        self.check_spec(spec)?;
        let mb = |m: u32| i64::from(m) * 1024 * 1024;
        let tmpfs: HashMap<String, String> =
            spec.tmpfs.iter().map(|t| (t.target.clone(), tmpfs_options(&t.target, t.size_mb, spec.user))).collect();
        let mut security_opt = vec!["no-new-privileges".to_string()];
        if spec.runtime == "runc"
            && let Some(profile) = &self.seccomp
        {
            security_opt.push(format!("seccomp={profile}"));
        }
        let mut env: Vec<String> = Vec::new();
        let mut binds = vec![self.resolv_bind()];
        if let Some(b) = &spec.broker {
            // The host's variables win: the plugin's of the same name are dropped.
            env.extend(
                spec.env.iter().filter(|(k, _)| !b.env.iter().any(|(h, _)| h == k)).map(|(k, v)| format!("{k}={v}")),
            );
            env.extend(b.env.iter().map(|(k, v)| format!("{k}={v}")));
            binds.push(b.bind());
        } else {
            env.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        let mut labels: HashMap<String, String> = spec.labels.iter().cloned().collect();
        labels.insert(LIFETIME_LABEL.into(), (now_unix + u64::from(spec.lifetime_s)).to_string());
        let body = ContainerCreateBody {
            image: Some(spec.image_id.clone()),
            user: Some(format!("{0}:{0}", spec.user)),
            entrypoint: Some(spec.command.clone()),
            cmd: Some(Vec::new()),
            working_dir: Some(spec.workdir.clone()),
            env: Some(env),
            labels: Some(labels),
            network_disabled: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(true),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(false),
            host_config: Some(HostConfig {
                runtime: Some(spec.runtime.clone()),
                readonly_rootfs: Some(true),
                network_mode: Some("none".into()),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(security_opt),
                memory: Some(mb(spec.memory_mb)),
                memory_swap: Some(mb(spec.memory_mb)),
                pids_limit: Some(i64::from(spec.pids)),
                nano_cpus: Some(i64::from(spec.cpus_milli) * 1_000_000),
                tmpfs: Some(tmpfs),
                binds: Some(binds),
                privileged: Some(false),
                ipc_mode: Some("private".into()),
                log_config: Some(HostConfigLogConfig { typ: Some("none".into()), config: None }),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        self.check_body(&body)?;
        Ok(body)
    }

    /// Checks what a plugin asked for, before anything is built from it.
    fn check_spec(&self, spec: &Spec) -> Result<(), Violation> {
        if spec.command.is_empty() || spec.command.iter().any(|a| a.contains('\0')) {
            return Err(Violation::Process("the command must be non-empty and free of NUL bytes".into()));
        }
        if !matches!(spec.workdir.as_str(), "/work" | "/tmp") {
            return Err(Violation::Process(format!(
                "the working directory must be /work or /tmp, not {:?}",
                spec.workdir
            )));
        }
        if let Some((k, _)) = spec.env.iter().find(|(k, v)| !is_env_name(k) || v.contains('\0')) {
            return Err(Violation::Process(format!("environment variable {k:?} is not allowed")));
        }
        if let Some((k, _)) = spec.labels.iter().find(|(k, _)| !k.starts_with(PLUGIN_LABEL_PREFIX)) {
            return Err(Violation::Process(format!("label {k:?} is not under {PLUGIN_LABEL_PREFIX}")));
        }
        if spec.lifetime_s == 0 || spec.lifetime_s > self.ceilings.lifetime_s {
            return Err(Violation::Process(format!(
                "lifetime {} s is outside 1..={} s",
                spec.lifetime_s, self.ceilings.lifetime_s
            )));
        }
        let mut seen = BTreeSet::new();
        for t in &spec.tmpfs {
            if !seen.insert(t.target.as_str()) {
                return Err(Violation::Tmpfs(format!("{} is mounted twice", t.target)));
            }
        }
        if spec.workdir == "/work" && !seen.contains("/work") {
            return Err(Violation::Tmpfs("the working directory /work has no tmpfs".into()));
        }
        Ok(())
    }

    /// Checks a final create body against every invariant.
    ///
    /// # Errors
    ///
    /// The first invariant the body breaks.
    pub fn check_body(&self, body: &ContainerCreateBody) -> Result<(), Violation> {
        let hc = body.host_config.as_ref().ok_or(Violation::ReadOnlyRoot)?;
        if hc.readonly_rootfs != Some(true) {
            return Err(Violation::ReadOnlyRoot);
        }
        self.check_image_and_runtime(body, hc)?;
        self.check_network(body, hc)?;
        check_capabilities(hc)?;
        self.check_security(hc)?;
        self.check_user(body)?;
        self.check_limits(hc)?;
        self.check_mounts(body, hc)?;
        if hc.privileged == Some(true) {
            return Err(Violation::Privileged);
        }
        check_devices(hc)?;
        check_namespaces(hc)?;
        check_process(body)?;
        Ok(())
    }

    fn check_network(&self, body: &ContainerCreateBody, hc: &HostConfig) -> Result<(), Violation> {
        if hc.network_mode.as_deref() != Some("none") {
            return Err(Violation::Network(format!("network mode {:?}", hc.network_mode.as_deref().unwrap_or(""))));
        }
        let published = hc.port_bindings.as_ref().is_some_and(|p| !p.is_empty())
            || hc.publish_all_ports == Some(true)
            || body.exposed_ports.as_ref().is_some_and(|p| !p.is_empty());
        if published {
            return Err(Violation::Network("ports are published".into()));
        }
        let names = [&hc.dns, &hc.dns_search, &hc.dns_options, &hc.extra_hosts, &hc.links];
        if names.iter().any(|v| v.as_ref().is_some_and(|v| !v.is_empty())) {
            return Err(Violation::Network("DNS servers, search domains, extra hosts or links are set".into()));
        }
        if body.network_disabled != Some(true) {
            return Err(Violation::Network("networking is not disabled".into()));
        }
        Ok(())
    }

    fn check_security(&self, hc: &HostConfig) -> Result<(), Violation> {
        let opts = hc.security_opt.as_deref().unwrap_or_default();
        if !opts.iter().any(|o| o == "no-new-privileges" || o == "no-new-privileges:true") {
            return Err(Violation::SecurityOptions("no-new-privileges must be set".into()));
        }
        for o in opts {
            let known = o == "no-new-privileges" || o == "no-new-privileges:true" || o.starts_with("seccomp=");
            if !known {
                return Err(Violation::SecurityOptions(format!("security option {o:?} is not allowed")));
            }
        }
        let seccomp: Vec<&str> = opts.iter().filter_map(|o| o.strip_prefix("seccomp=")).collect();
        let runtime = hc.runtime.as_deref().unwrap_or("");
        let expected = match (&self.seccomp, runtime) {
            (Some(p), "runc") => vec![p.as_str()],
            _ => Vec::new(),
        };
        if seccomp != expected {
            return Err(Violation::SecurityOptions(format!(
                "the seccomp profile under {runtime} must be {}",
                if expected.is_empty() { "the runtime's own" } else { "plimsoll's" }
            )));
        }
        if hc.masked_paths.is_some() || hc.readonly_paths.is_some() {
            return Err(Violation::SecurityOptions(
                "masked and read-only /proc paths are the engine's defaults".into(),
            ));
        }
        if hc.sysctls.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(Violation::SecurityOptions("sysctls are not allowed".into()));
        }
        if hc.cgroup_parent.as_ref().is_some_and(|s| !s.is_empty()) || hc.oom_kill_disable == Some(true) {
            return Err(Violation::SecurityOptions("the cgroup parent and the OOM killer are the engine's".into()));
        }
        Ok(())
    }

    fn check_user(&self, body: &ContainerCreateBody) -> Result<(), Violation> {
        let expected = self.guest_uid;
        let found = body.user.clone().unwrap_or_default();
        let user = |found: String| Violation::User { expected, found };
        if expected == 0 || found != format!("{expected}:{expected}") {
            return Err(user(found));
        }
        if body.host_config.as_ref().and_then(|h| h.group_add.as_ref()).is_some_and(|g| !g.is_empty()) {
            return Err(user(format!("{found} with supplementary groups")));
        }
        Ok(())
    }

    fn check_limits(&self, hc: &HostConfig) -> Result<(), Violation> {
        let c = self.ceilings;
        let mib = 1024 * 1024;
        match (hc.memory, hc.memory_swap) {
            (Some(m), Some(s)) if m > 0 && s == m && m <= i64::from(c.memory_mb) * mib => {}
            (Some(m), Some(s)) if m > 0 && s != m => {
                return Err(Violation::Memory(format!("swap must be off: memory+swap {s} must equal memory {m}")));
            }
            (m, _) => {
                return Err(Violation::Memory(format!(
                    "must be set and at most {} MiB (found {:?} bytes)",
                    c.memory_mb, m
                )));
            }
        }
        match hc.pids_limit {
            Some(p) if p > 0 && p <= i64::from(c.pids) => {}
            p => return Err(Violation::Pids(format!("must be set and at most {} (found {p:?})", c.pids))),
        }
        match hc.nano_cpus {
            Some(n) if n > 0 && n <= i64::from(c.cpus_milli) * 1_000_000 => {}
            n => {
                return Err(Violation::Cpus(format!(
                    "must be set and at most {} milli-cores (found {:?} nano-cores)",
                    c.cpus_milli, n
                )));
            }
        }
        if hc.cpu_quota.is_some() || hc.cpu_period.is_some() || hc.cpuset_cpus.is_some() || hc.cpu_count.is_some() {
            return Err(Violation::Cpus("only the nano-cpu limit may be set".into()));
        }
        Ok(())
    }

    fn check_mounts(&self, body: &ContainerCreateBody, hc: &HostConfig) -> Result<(), Violation> {
        let binds = hc.binds.as_deref().unwrap_or_default();
        let ok = match binds {
            [resolv] => *resolv == self.resolv_bind(),
            [resolv, broker] => *resolv == self.resolv_bind() && is_broker_bind(broker),
            _ => false,
        };
        if !ok {
            return Err(Violation::HostBind(format!("binds {binds:?}")));
        }
        if hc.mounts.as_ref().is_some_and(|m| !m.is_empty())
            || hc.volumes_from.as_ref().is_some_and(|v| !v.is_empty())
            || hc.volume_driver.as_ref().is_some_and(|v| !v.is_empty())
            || body.volumes.as_ref().is_some_and(|v| !v.is_empty())
        {
            return Err(Violation::HostBind("mounts, volumes or volumes-from are set".into()));
        }
        let tmpfs = hc.tmpfs.clone().unwrap_or_default();
        let mut total = 0u64;
        for (target, opts) in &tmpfs {
            if !TMPFS_TARGETS.contains(&target.as_str()) {
                return Err(Violation::Tmpfs(format!("{target} is not one of {TMPFS_TARGETS:?}")));
            }
            let parts: Vec<&str> = opts.split(',').collect();
            for need in ["rw", "noexec", "nosuid"] {
                if !parts.contains(&need) {
                    return Err(Violation::Tmpfs(format!("{target} must be mounted {need}")));
                }
            }
            if parts.iter().any(|p| matches!(*p, "exec" | "suid" | "dev")) {
                return Err(Violation::Tmpfs(format!("{target} options {opts:?} weaken noexec,nosuid")));
            }
            let size = parts.iter().find_map(|p| p.strip_prefix("size=")).and_then(|s| s.strip_suffix('m'));
            match size.and_then(|s| s.parse::<u64>().ok()) {
                Some(n) if n > 0 => total += n,
                _ => return Err(Violation::Tmpfs(format!("{target} must have a size in MiB (size=<n>m)"))),
            }
        }
        for need in ["/tmp", "/dev/shm"] {
            if !tmpfs.contains_key(need) {
                return Err(Violation::Tmpfs(format!("{need} must be a sized tmpfs")));
            }
        }
        if total > u64::from(self.ceilings.disk_mb) {
            return Err(Violation::Tmpfs(format!(
                "mounts total {total} MiB, over the disk budget of {} MiB",
                self.ceilings.disk_mb
            )));
        }
        Ok(())
    }

    fn check_image_and_runtime(&self, body: &ContainerCreateBody, hc: &HostConfig) -> Result<(), Violation> {
        let image = body.image.as_deref().unwrap_or("");
        if !is_content_id(image) {
            return Err(Violation::Image(format!("{image:?} is not sha256:<64 hex>")));
        }
        if !self.images.contains_key(image) {
            return Err(Violation::Image(format!("{image} was not proven at startup")));
        }
        let runtime = hc.runtime.as_deref().unwrap_or("");
        if !self.runtimes.contains(runtime) {
            return Err(Violation::Runtime(format!("{runtime:?} is not in {:?}", self.runtimes)));
        }
        Ok(())
    }
}

impl Lockdown {
    /// Checks a read-back of a container created from `spec` against what the
    /// lockdown builds for it: image, runtime, read-only root, no network, the
    /// tmpfs mounts, memory, pids, CPU and user. Returns each difference, in words.
    ///
    /// # Errors
    ///
    /// Every field the engine holds differently, joined.
    pub fn verify_read_back(&self, spec: &Spec, seen: &crate::engine::Inspection) -> Result<(), String> {
        let mut mounts: Vec<String> = spec
            .tmpfs
            .iter()
            .map(|t| format!("{}:{}", t.target, tmpfs_options(&t.target, t.size_mb, spec.user)))
            .collect();
        mounts.sort();
        let expected: [(&str, String, String); 9] = [
            ("image", spec.image_id.clone(), seen.image_id.clone()),
            ("runtime", spec.runtime.clone(), seen.runtime.clone()),
            ("read-only root", true.to_string(), seen.read_only_root.to_string()),
            ("network mode", "none".into(), seen.network.clone()),
            ("mounts", mounts.join(" "), seen.mounts.join(" ")),
            ("memory limit", format!("{} MiB", spec.memory_mb), format!("{} MiB", seen.memory_mb)),
            ("pids limit", spec.pids.to_string(), seen.pids.to_string()),
            ("cpu limit", (i64::from(spec.cpus_milli) * 1_000_000).to_string(), seen.nano_cpus.to_string()),
            ("user", format!("{0}:{0}", spec.user), seen.user.clone()),
        ];
        let mut diffs: Vec<String> = expected
            .into_iter()
            .filter(|(_, want, got)| want != got)
            .map(|(n, want, got)| format!("{n} is {got:?}, not {want:?}"))
            .collect();
        if seen.networks.iter().any(|n| n != "none") {
            diffs.push(format!("networks are {:?}, not [\"none\"]", seen.networks));
        }
        if diffs.is_empty() { Ok(()) } else { Err(diffs.join("; ")) }
    }
}

/// The host's tmpfs options for a mount. `/work` belongs to the guest `user`, so
/// its code can set the directory's own times and mode (as `tar -x` does).
fn tmpfs_options(target: &str, size_mb: u32, user: u32) -> String {
    let owner = if target == "/work" { format!(",mode=1777,uid={user},gid={user}") } else { String::new() };
    format!("rw,noexec,nosuid,nodev,size={size_mb}m{owner}")
}

fn check_capabilities(hc: &HostConfig) -> Result<(), Violation> {
    if hc.cap_drop.as_deref() != Some(&["ALL".to_string()][..]) {
        return Err(Violation::Capabilities(format!("cap-drop is {:?}, not [\"ALL\"]", hc.cap_drop)));
    }
    if hc.cap_add.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(Violation::Capabilities(format!("cap-add {:?}", hc.cap_add)));
    }
    Ok(())
}

fn check_devices(hc: &HostConfig) -> Result<(), Violation> {
    if hc.devices.as_ref().is_some_and(|d| !d.is_empty()) {
        return Err(Violation::Devices("devices are mapped".into()));
    }
    if hc.device_requests.as_ref().is_some_and(|d| !d.is_empty())
        || hc.device_cgroup_rules.as_ref().is_some_and(|d| !d.is_empty())
    {
        return Err(Violation::Devices("device requests or cgroup rules are set".into()));
    }
    Ok(())
}

fn check_namespaces(hc: &HostConfig) -> Result<(), Violation> {
    let own = |v: &Option<String>| v.as_deref().is_none_or(str::is_empty);
    if !own(&hc.pid_mode) {
        return Err(Violation::HostNamespace(format!("pid mode {:?}", hc.pid_mode)));
    }
    if !own(&hc.uts_mode) {
        return Err(Violation::HostNamespace(format!("uts mode {:?}", hc.uts_mode)));
    }
    if !own(&hc.userns_mode) {
        return Err(Violation::HostNamespace(format!("userns mode {:?}", hc.userns_mode)));
    }
    if !matches!(hc.ipc_mode.as_deref(), None | Some("private" | "none")) {
        return Err(Violation::HostNamespace(format!("ipc mode {:?}", hc.ipc_mode)));
    }
    if hc.cgroupns_mode.is_some_and(|m| m.to_string() == "host") || hc.cgroup.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(Violation::HostNamespace("the cgroup namespace".into()));
    }
    Ok(())
}

fn check_process(body: &ContainerCreateBody) -> Result<(), Violation> {
    if body.entrypoint.as_ref().is_none_or(Vec::is_empty) {
        return Err(Violation::Process("plimsoll's own entrypoint must be set, so the image's never runs".into()));
    }
    if body.tty == Some(true) {
        return Err(Violation::Process("a terminal is not allowed".into()));
    }
    for var in body.env.as_deref().unwrap_or_default() {
        let name = var.split('=').next().unwrap_or("");
        if !var.contains('=') || !is_env_name(name) {
            return Err(Violation::Process(format!("environment variable {name:?} is not allowed")));
        }
    }
    let expires = body.labels.as_ref().and_then(|l| l.get(LIFETIME_LABEL)).and_then(|v| v.parse::<u64>().ok());
    if expires.is_none() {
        return Err(Violation::Process(format!("the {LIFETIME_LABEL} label must be set")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bollard::models::{DeviceMapping, Mount};

    use super::*;

    const IMAGE: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";

    fn lockdown() -> Lockdown {
        Lockdown {
            guest_uid: 61000,
            runtimes: ["runc".to_string(), "runsc".to_string()].into(),
            images: [(IMAGE.to_string(), "sandbox".to_string())].into(),
            resolv_conf: "/var/lib/plimsoll/resolv.conf".into(),
            seccomp: Some("{\"defaultAction\":\"SCMP_ACT_ERRNO\"}".into()),
            ceilings: Ceilings::default(),
        }
    }

    fn spec() -> Spec {
        Spec {
            image_id: IMAGE.into(),
            runtime: "runc".into(),
            user: 61000,
            memory_mb: 256,
            cpus_milli: 1000,
            pids: 256,
            tmpfs: vec![
                Tmpfs { target: "/tmp".into(), size_mb: 16 },
                Tmpfs { target: "/dev/shm".into(), size_mb: 16 },
                Tmpfs { target: "/work".into(), size_mb: 128 },
            ],
            workdir: "/work".into(),
            command: vec!["/bin/sh".into(), "-c".into(), "true".into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            labels: vec![("dev.plimsoll.plugin.run".into(), "1".into())],
            lifetime_s: 600,
            broker: None,
        }
    }

    fn body() -> ContainerCreateBody {
        lockdown().create_body(&spec(), 1_000).expect("a good spec builds")
    }

    /// The read-back of a container the engine built from [`spec`] as asked.
    fn read_back() -> crate::engine::Inspection {
        crate::engine::Inspection {
            image_id: IMAGE.into(),
            mounts: vec![
                "/dev/shm:rw,noexec,nosuid,nodev,size=16m".into(),
                "/tmp:rw,noexec,nosuid,nodev,size=16m".into(),
                "/work:rw,noexec,nosuid,nodev,size=128m,mode=1777,uid=61000,gid=61000".into(),
            ],
            ..crate::engine::tests::inspection()
        }
    }

    #[test]
    fn a_read_back_must_hold_what_the_lockdown_built_from_the_spec() {
        assert_eq!(lockdown().verify_read_back(&spec(), &read_back()), Ok(()));
        let loosened = crate::engine::Inspection {
            read_only_root: false,
            network: "bridge".into(),
            networks: vec!["bridge".into()],
            pids: 0,
            user: "0:0".into(),
            mounts: vec!["/tmp:rw,size=16m".into()],
            ..read_back()
        };
        assert_eq!(
            lockdown().verify_read_back(&spec(), &loosened),
            Err(concat!(
                r#"read-only root is "false", not "true"; network mode is "bridge", not "none"; "#,
                r#"mounts is "/tmp:rw,size=16m", not "/dev/shm:rw,noexec,nosuid,nodev,size=16m "#,
                r#"/tmp:rw,noexec,nosuid,nodev,size=16m /work:rw,noexec,nosuid,nodev,size=128m,mode=1777,uid=61000,gid=61000"; "#,
                r#"pids limit is "0", not "256"; user is "0:0", not "61000:61000"; networks are ["bridge"], not ["none"]"#
            )
            .into())
        );
        let other = crate::engine::Inspection { runtime: "runsc".into(), memory_mb: 512, nano_cpus: 1, ..read_back() };
        assert_eq!(
            lockdown().verify_read_back(&spec(), &other),
            Err(r#"runtime is "runsc", not "runc"; memory limit is "512 MiB", not "256 MiB"; cpu limit is "1", not "1000000000""#.into())
        );
    }

    /// Applies a change to a good body and returns what the check says.
    fn broken(change: impl FnOnce(&mut ContainerCreateBody, &mut HostConfig)) -> Violation {
        let mut b = body();
        let mut hc = b.host_config.take().expect("host config");
        change(&mut b, &mut hc);
        b.host_config = Some(hc);
        lockdown().check_body(&b).expect_err("the change must break an invariant")
    }

    #[test]
    fn a_good_spec_builds_a_body_that_passes() {
        let b = body();
        assert_eq!(lockdown().check_body(&b), Ok(()));
        let hc = b.host_config.expect("host config");
        assert_eq!(hc.tmpfs.expect("tmpfs")["/work"], "rw,noexec,nosuid,nodev,size=128m,mode=1777,uid=61000,gid=61000");
        assert_eq!(b.labels.expect("labels")[LIFETIME_LABEL], "1600");
    }

    #[test]
    fn a_writable_root_is_refused() {
        assert_eq!(broken(|_, hc| hc.readonly_rootfs = Some(false)), Violation::ReadOnlyRoot);
        assert_eq!(broken(|_, hc| hc.readonly_rootfs = None), Violation::ReadOnlyRoot);
    }

    #[test]
    fn any_network_is_refused() {
        let v = broken(|_, hc| hc.network_mode = Some("bridge".into()));
        assert_eq!(v.to_string(), "lockdown: the network must be none (network mode \"bridge\")");
        let v = broken(|_, hc| hc.network_mode = Some("host".into()));
        assert!(matches!(v, Violation::Network(_)), "{v}");
        let v = broken(|_, hc| hc.dns = Some(vec!["1.1.1.1".into()]));
        assert!(matches!(v, Violation::Network(_)), "{v}");
        let v = broken(|b, _| b.network_disabled = None);
        assert!(matches!(v, Violation::Network(_)), "{v}");
        let v = broken(|_, hc| hc.publish_all_ports = Some(true));
        assert_eq!(v, Violation::Network("ports are published".into()));
    }

    #[test]
    fn a_surviving_capability_is_refused() {
        let v = broken(|_, hc| hc.cap_drop = Some(vec!["NET_RAW".into()]));
        assert!(matches!(v, Violation::Capabilities(_)), "{v}");
        let v = broken(|_, hc| hc.cap_add = Some(vec!["SYS_ADMIN".into()]));
        assert_eq!(v.to_string(), "lockdown: every capability must be dropped (cap-add Some([\"SYS_ADMIN\"]))");
    }

    #[test]
    fn missing_no_new_privileges_or_weakening_options_are_refused() {
        let v = broken(|_, hc| hc.security_opt = Some(vec![]));
        assert_eq!(v.to_string(), "lockdown: no-new-privileges must be set");
        let v = broken(|_, hc| hc.security_opt.get_or_insert_default().push("apparmor=unconfined".into()));
        assert_eq!(v.to_string(), "lockdown: security option \"apparmor=unconfined\" is not allowed");
        let v = broken(|_, hc| hc.security_opt = Some(vec!["no-new-privileges".into(), "seccomp=unconfined".into()]));
        assert_eq!(v.to_string(), "lockdown: the seccomp profile under runc must be plimsoll's");
        let v = broken(|_, hc| hc.masked_paths = Some(vec![]));
        assert!(matches!(v, Violation::SecurityOptions(_)), "{v}");
        let v = broken(|_, hc| hc.sysctls = Some([("kernel.x".to_string(), "1".to_string())].into()));
        assert_eq!(v.to_string(), "lockdown: sysctls are not allowed");
    }

    #[test]
    fn runsc_gets_no_seccomp_profile_and_runc_must_have_it() {
        let mut s = spec();
        s.runtime = "runsc".into();
        let b = lockdown().create_body(&s, 0).expect("runsc body");
        assert_eq!(b.host_config.expect("hc").security_opt, Some(vec!["no-new-privileges".to_string()]));
        let v = broken(|_, hc| hc.security_opt = Some(vec!["no-new-privileges".into()]));
        assert!(matches!(v, Violation::SecurityOptions(_)), "{v}");
    }

    #[test]
    fn root_or_another_user_is_refused() {
        for user in [None, Some("0:0"), Some("root"), Some("61000"), Some("61000:0"), Some("1000:1000")] {
            let v = broken(|b, _| b.user = user.map(str::to_string));
            assert!(matches!(v, Violation::User { expected: 61000, .. }), "{user:?}: {v}");
        }
        let v = broken(|_, hc| hc.group_add = Some(vec!["0".into()]));
        assert!(matches!(v, Violation::User { .. }), "{v}");
        let mut s = spec();
        s.user = 0;
        assert_eq!(
            lockdown().create_body(&s, 0).expect_err("must fail").to_string(),
            "lockdown: the user must be the guest uid 61000:61000 (0:0)"
        );
    }

    #[test]
    fn swap_unbounded_or_excess_memory_is_refused() {
        let v = broken(|_, hc| hc.memory_swap = Some(-1));
        assert!(v.to_string().contains("swap must be off"), "{v}");
        let v = broken(|_, hc| hc.memory = None);
        assert!(matches!(v, Violation::Memory(_)), "{v}");
        let mut s = spec();
        s.memory_mb = 4096;
        assert!(matches!(lockdown().create_body(&s, 0), Err(Violation::Memory(_))));
        let v = broken(|_, hc| hc.oom_kill_disable = Some(true));
        assert!(matches!(v, Violation::SecurityOptions(_)), "{v}");
    }

    #[test]
    fn missing_or_excess_pids_are_refused() {
        assert!(matches!(broken(|_, hc| hc.pids_limit = None), Violation::Pids(_)));
        assert!(matches!(broken(|_, hc| hc.pids_limit = Some(-1)), Violation::Pids(_)));
        assert!(matches!(broken(|_, hc| hc.pids_limit = Some(100_000)), Violation::Pids(_)));
    }

    #[test]
    fn missing_or_excess_cpus_are_refused() {
        assert!(matches!(broken(|_, hc| hc.nano_cpus = None), Violation::Cpus(_)));
        assert!(matches!(broken(|_, hc| hc.nano_cpus = Some(64_000_000_000)), Violation::Cpus(_)));
        assert!(matches!(broken(|_, hc| hc.cpu_quota = Some(1)), Violation::Cpus(_)));
    }

    #[test]
    fn tmpfs_must_be_known_sized_noexec_nosuid_and_within_the_budget() {
        let set = |k: &str, v: &str| {
            let (k, v) = (k.to_string(), v.to_string());
            broken(move |_, hc| {
                hc.tmpfs.get_or_insert_default().insert(k, v);
            })
        };
        assert_eq!(set("/tmp", "rw,nosuid,size=16m").to_string(), "lockdown: tmpfs /tmp must be mounted noexec");
        assert_eq!(set("/tmp", "rw,noexec,size=16m").to_string(), "lockdown: tmpfs /tmp must be mounted nosuid");
        assert!(set("/tmp", "rw,noexec,nosuid,exec,size=16m").to_string().contains("weaken"));
        assert_eq!(
            set("/tmp", "rw,noexec,nosuid").to_string(),
            "lockdown: tmpfs /tmp must have a size in MiB (size=<n>m)"
        );
        assert!(set("/home", "rw,noexec,nosuid,size=1m").to_string().contains("/home is not one of"));
        assert!(set("/work", "rw,noexec,nosuid,size=4096m").to_string().contains("over the disk budget of 1024 MiB"));
        let v = broken(|_, hc| {
            hc.tmpfs.get_or_insert_default().remove("/dev/shm");
        });
        assert_eq!(v.to_string(), "lockdown: tmpfs /dev/shm must be a sized tmpfs");
    }

    #[test]
    fn host_binds_mounts_and_volumes_are_refused() {
        let v = broken(|_, hc| hc.binds.get_or_insert_default().push("/:/host".into()));
        assert!(matches!(v, Violation::HostBind(_)), "{v}");
        let v = broken(|_, hc| hc.binds = Some(vec!["/etc/resolv.conf:/etc/resolv.conf:ro".into()]));
        assert!(matches!(v, Violation::HostBind(_)), "{v}");
        let v = broken(|_, hc| hc.binds = None);
        assert!(matches!(v, Violation::HostBind(_)), "{v}");
        let v = broken(|_, hc| hc.mounts = Some(vec![Mount::default()]));
        assert!(matches!(v, Violation::HostBind(_)), "{v}");
        let v = broken(|b, _| b.volumes = Some(vec!["/data".into()]));
        assert!(matches!(v, Violation::HostBind(_)), "{v}");
        let v = broken(|_, hc| hc.volumes_from = Some(vec!["other".into()]));
        assert!(matches!(v, Violation::HostBind(_)), "{v}");
        // A second bind passes only as a run broker directory, read-only, at its place.
        let root = broker_root();
        for bad in [
            format!("{}/run-ab12:/run/plimsoll", root.display()),
            format!("{}/run-ab12:/etc:ro", root.display()),
            format!("{}/../run-ab12:/run/plimsoll:ro", root.display()),
            format!("{}/run-ab12/x:/run/plimsoll:ro", root.display()),
            format!("{}/run-zz:/run/plimsoll:ro", root.display()),
            "/:/run/plimsoll:ro".to_string(),
        ] {
            let v = broken(|_, hc| hc.binds.get_or_insert_default().push(bad.clone()));
            assert!(matches!(v, Violation::HostBind(_)), "{bad}: {v}");
        }
    }

    #[test]
    fn a_broker_mount_adds_its_bind_and_the_hosts_variables_win() {
        let l = lockdown();
        let mut s = spec();
        s.env = vec![("NODE_OPTIONS".into(), "--require /tmp/evil.js".into()), ("KEEP".into(), "1".into())];
        s.broker = Some(BrokerMount {
            dir: broker_root().join("run-0123abcd"),
            env: vec![("NODE_OPTIONS".into(), "--require=/run/plimsoll/host.js".into())],
        });
        let body = l.create_body(&s, 0).expect("a broker mount passes the lockdown");
        let hc = body.host_config.as_ref().expect("host config");
        assert_eq!(
            hc.binds.as_deref().expect("binds")[1],
            format!("{}/run-0123abcd:/run/plimsoll:ro", broker_root().display())
        );
        assert_eq!(
            body.env.as_deref().expect("env"),
            ["KEEP=1".to_string(), "NODE_OPTIONS=--require=/run/plimsoll/host.js".to_string()]
        );
        s.broker = Some(BrokerMount { dir: "/etc".into(), env: vec![] });
        assert!(matches!(l.create_body(&s, 0), Err(Violation::HostBind(_))));
    }

    #[test]
    fn privileged_is_refused() {
        assert_eq!(broken(|_, hc| hc.privileged = Some(true)), Violation::Privileged);
    }

    #[test]
    fn devices_are_refused() {
        let v = broken(|_, hc| hc.devices = Some(vec![DeviceMapping::default()]));
        assert_eq!(v.to_string(), "lockdown: no devices (devices are mapped)");
        let v = broken(|_, hc| hc.device_cgroup_rules = Some(vec!["c *:* rwm".into()]));
        assert!(matches!(v, Violation::Devices(_)), "{v}");
    }

    #[test]
    fn host_namespaces_are_refused() {
        assert!(matches!(broken(|_, hc| hc.pid_mode = Some("host".into())), Violation::HostNamespace(_)));
        assert!(matches!(broken(|_, hc| hc.ipc_mode = Some("host".into())), Violation::HostNamespace(_)));
        assert!(matches!(broken(|_, hc| hc.uts_mode = Some("host".into())), Violation::HostNamespace(_)));
        assert!(matches!(broken(|_, hc| hc.userns_mode = Some("host".into())), Violation::HostNamespace(_)));
        assert!(matches!(broken(|_, hc| hc.pid_mode = Some("container:x".into())), Violation::HostNamespace(_)));
    }

    #[test]
    fn tags_and_unproven_images_are_refused() {
        let v = broken(|b, _| b.image = Some("debian:bookworm".into()));
        assert_eq!(
            v.to_string(),
            "lockdown: the image must be a proven content ID (\"debian:bookworm\" is not sha256:<64 hex>)"
        );
        let other = format!("sha256:{}", "2".repeat(64));
        let v = broken(|b, _| b.image = Some(other.clone()));
        assert_eq!(v, Violation::Image(format!("{other} was not proven at startup")));
    }

    #[test]
    fn unverified_runtimes_are_refused() {
        let v = broken(|_, hc| hc.runtime = Some("kata".into()));
        assert!(matches!(v, Violation::Runtime(_)), "{v}");
        let mut l = lockdown();
        l.runtimes.remove("runsc");
        let mut s = spec();
        s.runtime = "runsc".into();
        let v = l.create_body(&s, 0).expect_err("must fail");
        assert_eq!(
            v.to_string(),
            "lockdown: the runtime must be one verified at startup (\"runsc\" is not in {\"runc\"})"
        );
    }

    #[test]
    fn the_process_must_use_plimsolls_entrypoint_and_clean_environment() {
        let v = broken(|b, _| b.entrypoint = None);
        assert!(matches!(v, Violation::Process(_)), "{v}");
        let v = broken(|b, _| b.env = Some(vec!["LD_PRELOAD=/tmp/x.so".into()]));
        assert_eq!(v.to_string(), "lockdown: environment variable \"LD_PRELOAD\" is not allowed");
        let v = broken(|b, _| b.tty = Some(true));
        assert!(matches!(v, Violation::Process(_)), "{v}");
        let v = broken(|b, _| {
            b.labels.get_or_insert_default().remove(LIFETIME_LABEL);
        });
        assert_eq!(v.to_string(), format!("lockdown: the {LIFETIME_LABEL} label must be set"));
    }

    #[test]
    fn bad_specs_are_refused_before_a_body_exists() {
        let l = lockdown();
        let mut s = spec();
        s.env.push(("GLIBC_TUNABLES".into(), "x".into()));
        assert!(matches!(l.create_body(&s, 0), Err(Violation::Process(_))));
        let mut s = spec();
        s.labels.push((LIFETIME_LABEL.into(), "99999999999".into()));
        assert!(matches!(l.create_body(&s, 0), Err(Violation::Process(_))));
        let mut s = spec();
        s.workdir = "/".into();
        assert!(matches!(l.create_body(&s, 0), Err(Violation::Process(_))));
        let mut s = spec();
        s.lifetime_s = 0;
        assert!(matches!(l.create_body(&s, 0), Err(Violation::Process(_))));
        let mut s = spec();
        s.tmpfs.push(Tmpfs { target: "/tmp".into(), size_mb: 1 });
        assert_eq!(l.create_body(&s, 0).expect_err("must fail").to_string(), "lockdown: tmpfs /tmp is mounted twice");
    }
}
