//! The openshell provider plugin. It drives an NVIDIA OpenShell gateway over
//! its published gRPC API (`openshell.v1.OpenShell`) only through the host's
//! `plimsoll:host/http` capability, at one endpoint the host maps: `gateway`,
//! reached over HTTP/2 with the operator's client certificate, which the host
//! holds. The plugin holds no secret.
//!
//! Every run gets a fresh sandbox of the pinned image, only after the gateway
//! shows its compute driver is docker and agents' policy proposals are off: no
//! network rule (the gateway denies all egress), `/tmp` the only writable
//! directory (a sized `noexec` tmpfs), Landlock required, the operator's memory
//! and CPUs, no credential providers. Before any code goes in, the sandbox is
//! read back whole and strictly (a setting plimsoll does not know is refused),
//! and its effective policy is read back and must be the one sent, its own, not
//! a global one; any difference is refused. Every command runs under the guest's
//! `timeout -s KILL` with its streams capped in the guest; its stream is
//! cancelled should the deadline pass anyway. The sandbox is deleted on every
//! path. The tier it states, `container`, rests on that read-back; the host
//! caps it.

mod gateway;
mod grpc;
mod pb;
mod session;

wit_bindgen::generate!({
    world: "plimsoll:provider/provider-plugin",
    path: ["../../wit/types", "../../wit/host", "../../wit/provider"],
    generate_all,
});

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use exports::plimsoll::provider::provider::{Description, Grant, GrantWay, GuardGrant, Guest, RelayGrant, RunError};
use gateway::{Filesystem, Policy, Spec, Template};
use pb::Json;
use plimsoll::host::{config, log};
use plimsoll::types::types::{
    Evidence, File, Limits, ModuleRequest, ModuleResult, Output, ProjectOutcome, ProjectResult, Refusal, RefusalReason,
    SnippetResult, StepResult, Tier,
};
use plimsoll_plugin_agent::relayed::AGENT;
use plimsoll_plugin_agent::runner;
use plimsoll_plugin_remote::{self as remote, Remote, wrapper};

/// Where a run's files go: `/tmp` is the only writable directory.
const RUN_DIR: &str = "/tmp/plimsoll/run";
/// A project's work directory.
const PROJECT_DIR: &str = "/tmp/plimsoll/project";
/// The longest snippet or project.
const MAX_TIMEOUT_MS: u32 = 300_000;
/// How long a sandbox may take to come up: inside the host's 30 s of grace
/// past a run's budget, so a slow start is refused by name and still deleted.
const START_WITHIN: Duration = Duration::from_secs(25);
/// A sandbox's labels: the daemon that made it, that plimsoll made it, and
/// the seconds it may live (for another daemon's sweep).
const INSTANCE_LABEL: &str = "plimsoll.instance";
const RUN_LABEL: &str = "plimsoll.run";
const LIFETIME_LABEL: &str = "plimsoll.lifetime";
/// How long past its lifetime another daemon's sandbox is left before a sweep deletes it.
const FOREIGN_GRACE_S: i64 = 300;
/// The most bytes one exec writes on stdin: under the gateway's 1 MiB message cap.
const STDIN_CHUNK: usize = 768 << 10;
/// The tmpfs every sandbox's `/tmp` is: sticky and writable by all (0o1777).
const TMP_MODE: f64 = 1023.0;
/// The guest's uid and gid, as in plimsoll's own containers.
const GUEST: &str = "61000";
/// Where a granted run's client and its relay's socket go.
const CLIENT_DIR: &str = "/tmp/plimsoll/host";
/// Forward tokens a granted run takes, and the forwards each carries at once
/// (the gateway's cap a token).
const FORWARD_TOKENS: usize = 2;
const FORWARDS_PER_TOKEN: u32 = 3;

struct Plugin;

fn refused(reason: RefusalReason, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

/// The operator's and the host's settings this plugin reads.
struct Settings {
    image: String,
    instance: String,
    cpus_milli: u32,
    memory_mib: u32,
    disk_mib: u32,
}

/// A sandbox's memory when the operator names none, in MiB.
const DEFAULT_MEMORY_MB: u32 = 256;
/// A sandbox's CPU share when the operator names none, in thousandths.
const DEFAULT_CPUS_MILLI: u32 = 1000;
/// A sandbox's `/tmp` (its only writable directory) when the operator names none, in MiB.
const DEFAULT_DISK_MB: u32 = 64;

fn settings() -> Result<Settings, Refusal> {
    let get = |key: &str| config::get(key).filter(|v| !v.is_empty());
    let missing = |what: &str| refused(RefusalReason::Environment, format!("the host gave no {what}"));
    // The operator's envelope; 0 is unset, and the sandbox gets this plugin's default.
    let limit = |key: &str, default: u32| {
        get(key).and_then(|v| v.parse::<u32>().ok()).map(|n| if n == 0 { default } else { n })
    };
    Ok(Settings {
        image: get("image").ok_or_else(|| missing("image"))?,
        instance: get("instance").ok_or_else(|| missing("instance to stamp"))?,
        cpus_milli: limit("envelope.cpus-milli", DEFAULT_CPUS_MILLI).ok_or_else(|| missing("CPU limit"))?,
        memory_mib: limit("envelope.memory-mb", DEFAULT_MEMORY_MB).ok_or_else(|| missing("memory limit"))?,
        disk_mib: limit("envelope.disk-mb", DEFAULT_DISK_MB).ok_or_else(|| missing("disk limit"))?,
    })
}

/// The policy every sandbox gets: no network rule at all (so the gateway's
/// proxy denies all egress), the system read-only (with plimsoll's programs,
/// which a session's agent runs, and the container's cgroup, where a session's
/// project runner reads its memory), `/tmp` the only writable directory,
/// Landlock required rather than best effort, the guest's own ids.
fn policy() -> Policy {
    let paths = |p: &[&str]| p.iter().map(|s| s.to_string()).collect();
    Policy {
        version: 1,
        filesystem: Some(Filesystem {
            include_workdir: false,
            read_only: paths(&[
                "/usr",
                "/lib",
                "/lib64",
                "/bin",
                "/sbin",
                "/etc",
                "/proc",
                "/dev/urandom",
                "/opt/plimsoll",
                "/sys/fs/cgroup",
            ]),
            read_write: paths(&["/tmp", "/dev/null"]),
        }),
        landlock: Some("hard_requirement".into()),
        process: Some((GUEST.into(), GUEST.into())),
        network_policies: vec![],
        network_middlewares: vec![],
    }
}

/// The spec a run's sandbox is created with, and must read back as.
fn spec(s: &Settings) -> Spec {
    let text = |v: &str| Json::String(v.into());
    let tmp = Json::object([
        ("type", text("tmpfs")),
        ("target", text("/tmp")),
        ("size_bytes", Json::Number(f64::from(s.disk_mib) * 1_048_576.0)),
        ("mode", Json::Number(TMP_MODE)),
        ("options", Json::List(vec![text("noexec"), text("nosuid"), text("nodev")])),
    ]);
    Spec {
        template: Some(Template {
            image: s.image.clone(),
            resources: Some(Json::object([(
                "limits",
                Json::object([
                    ("cpu", text(&format!("{}m", s.cpus_milli))),
                    ("memory", text(&format!("{}Mi", s.memory_mib))),
                ]),
            )])),
            driver_config: Some(Json::object([("docker", Json::object([("mounts", Json::List(vec![tmp]))]))])),
            ..Template::default()
        }),
        policy: Some(policy()),
        command: vec!["sleep".into(), "infinity".into()],
        ..Spec::default()
    }
}

/// The first part of `got` that differs from `sent`, named as "the read-back
/// differs in ..." ends.
fn difference(sent: &Spec, got: &Spec) -> Option<String> {
    if got.gpu {
        return Some("it asks for GPUs".into());
    }
    if !got.providers.is_empty() {
        return Some(format!("credential providers are attached ({})", got.providers.join(", ")));
    }
    let (t, g) = (sent.template.clone().unwrap_or_default(), got.template.clone().unwrap_or_default());
    let parts = [
        ("its image", t.image == g.image),
        ("its resources", t.resources == g.resources),
        ("its driver settings (mounts)", t.driver_config == g.driver_config),
        ("its runtime class", t.runtime_class_name == g.runtime_class_name),
        ("its user namespaces", t.user_namespaces == g.user_namespaces),
        ("its template's environment", t.environment == g.environment),
        ("its template's labels or annotations", t.labels == g.labels && t.annotations == g.annotations),
        ("its agent socket", t.agent_socket == g.agent_socket),
        ("its policy", sent.policy == got.policy),
        ("its environment", sent.environment == got.environment),
        ("its command", sent.command == got.command && sent.tty == got.tty),
        ("its log level", sent.log_level == got.log_level),
    ];
    parts.iter().find(|(_, same)| !same).map(|(what, _)| what.to_string())
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A sandbox of this run; deleted when dropped, unless handed over.
struct Sandbox {
    name: String,
    /// The host deletes it (its `release`), off the result path.
    handed_over: bool,
    id: String,
    image: String,
    driver: String,
    policy_hash: String,
    /// The memory it was created with, in MiB.
    memory_mib: u32,
    /// The spec and labels it was created with, which every read-back must show.
    wanted: Spec,
    labels: BTreeMap<String, String>,
    /// What every command of a granted run exports first (its client's settings).
    exports: String,
    /// A granted run's forward tokens, revoked when its code has ended.
    forward_tokens: RefCell<Vec<String>>,
    /// A granted run's relay: its loopback port, and when its forwards were opened.
    relay: Cell<Option<(u16, Instant)>>,
}

impl Drop for Sandbox {
    /// Deletes it now, unless the run handed it to the host to delete after the
    /// answer has gone.
    fn drop(&mut self) {
        self.end_forwards();
        if self.handed_over {
            return;
        }
        if let Err(e) = gateway::delete(&self.name) {
            log::warn(&format!(
                "deleting openshell sandbox {} failed ({e}); the host holds its place until a sweep deletes it",
                self.name
            ));
        }
    }
}

/// The gateway's driver, checked: `docker`, and agents' proposals off. Returns
/// the driver's version.
fn gateway_checked() -> Result<String, Refusal> {
    let env = |what: &str, e: String| refused(RefusalReason::Environment, format!("{what}: {e}"));
    let (name, driver, version) = gateway::driver().map_err(|e| env("reading the gateway's compute driver", e))?;
    if name != "docker" || driver != "docker" {
        return Err(refused(
            RefusalReason::Isolation,
            format!(
                "the gateway's compute driver is {name:?} ({driver:?}), not docker: plimsoll states the container tier only for docker"
            ),
        ));
    }
    gateway::proposals_off().map_err(|e| refused(RefusalReason::Isolation, e))?;
    Ok(version)
}

impl Sandbox {
    /// Creates, waits for and reads back a sandbox that lives at most `budget`
    /// (its lifetime label). Nothing of the caller's is in it yet, so every
    /// failure is a refusal.
    fn open(budget: Duration) -> Result<Sandbox, Refusal> {
        let s = settings()?;
        let driver = gateway_checked()?;
        let env = |what: &str, e: String| refused(RefusalReason::Environment, format!("{what}: {e}"));
        let isolation =
            |e: String| refused(RefusalReason::Isolation, format!("the openshell sandbox is not what was asked: {e}"));
        let name = format!("plimsoll-{}", &remote::random_hex(5));
        let lifetime = budget.as_secs() + 60;
        let labels = BTreeMap::from([
            (INSTANCE_LABEL.to_string(), s.instance.clone()),
            (RUN_LABEL.to_string(), "1".to_string()),
            (LIFETIME_LABEL.to_string(), lifetime.to_string()),
        ]);
        let wanted = spec(&s);
        let made = gateway::create(&name, &labels, &wanted).map_err(|e| env("creating an openshell sandbox", e))?;
        let mut sandbox = Sandbox {
            name,
            handed_over: false,
            id: made.id,
            image: s.image.clone(),
            memory_mib: s.memory_mib,
            driver,
            policy_hash: String::new(),
            wanted,
            labels,
            exports: String::new(),
            forward_tokens: RefCell::default(),
            relay: Cell::new(None),
        };
        let until = Instant::now() + START_WITHIN;
        let read = loop {
            let read = gateway::get(&sandbox.name)
                .map_err(|e| env("reading the openshell sandbox back", e))?
                .ok_or_else(|| refused(RefusalReason::Environment, "the openshell sandbox vanished while starting"))?;
            match read.phase {
                gateway::READY => break read,
                gateway::ERROR => {
                    return Err(refused(
                        RefusalReason::Environment,
                        format!("the openshell sandbox failed to start ({})", read.why),
                    ));
                }
                _ if Instant::now() < until => std::thread::sleep(Duration::from_millis(250)),
                _ => {
                    return Err(refused(
                        RefusalReason::Environment,
                        format!(
                            "the openshell sandbox was not ready within {} s ({})",
                            START_WITHIN.as_secs(),
                            read.why
                        ),
                    ));
                }
            }
        };
        sandbox.differs(&read).map_or(Ok(()), |e| Err(isolation(e)))?;
        let effective =
            gateway::effective(&sandbox.id).map_err(|e| env("reading the sandbox's effective policy", e))?;
        sandbox.policy_differs(&effective).map_or(Ok(()), |e| Err(isolation(e)))?;
        sandbox.policy_hash = effective.hash;
        Ok(sandbox)
    }

    /// How `read` differs from the sandbox this run created: another sandbox,
    /// other labels, or any setting of its spec.
    fn differs(&self, read: &gateway::Sandbox) -> Option<String> {
        if read.name != self.name || read.id != self.id || read.id.is_empty() {
            return Some(format!("the gateway read back sandbox {:?} ({:?})", read.name, read.id));
        }
        if read.labels != self.labels {
            return Some("its labels differ".into());
        }
        difference(&self.wanted, &read.spec).map(|what| format!("the read-back differs in {what}"))
    }

    /// How the sandbox's effective policy differs from the one sent: a global
    /// one governs it, another policy, a hash that is no SHA-256, or (once read
    /// at the open) a hash other than that one.
    fn policy_differs(&self, effective: &gateway::Effective) -> Option<String> {
        if !effective.own {
            return Some("its effective policy is not its own (a global policy governs it)".into());
        }
        if effective.policy != self.wanted.policy {
            return Some("its effective policy differs from the one sent".into());
        }
        if effective.hash.len() != 64 || !effective.hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Some(format!("its policy hash {:?} is not a SHA-256", effective.hash));
        }
        if !self.policy_hash.is_empty() && effective.hash != self.policy_hash {
            return Some(format!("its policy hash is now {}, not {}", effective.hash, self.policy_hash));
        }
        None
    }

    /// Leaves the delete to the host, which books every sandbox a create made
    /// and calls `release` for those its calls left once their answers are out.
    fn hand_over(mut self) -> Evidence {
        self.end_forwards();
        self.handed_over = true;
        self.evidence()
    }

    /// Carries `g` in: writes its client, starts the relay at its socket
    /// (`plimsoll-agent broker-relay`, which says its loopback port), and has
    /// the host open forwards to that port through the gateway, on tokens made
    /// for this sandbox. Nothing of the caller's runs yet, so every failure is
    /// a refusal.
    fn carry(&mut self, g: &RelayGrant) -> Result<(), Refusal> {
        let env = |what: &str, e: String| refused(RefusalReason::Environment, format!("{what}: {e}"));
        let client = g.client.iter().map(|f| (f.path.as_str(), f.content.as_slice()));
        let exports = self
            .install_client(CLIENT_DIR, client, g.env.iter().cloned())
            .map_err(|e| refused(RefusalReason::Environment, e))?;
        let socket = format!("{CLIENT_DIR}/{}", g.socket);
        let deadline = Instant::now() + Duration::from_secs(20);
        let done = self
            .exec(words(&[AGENT, "broker-relay", &socket]), &[], deadline, 4096)
            .map_err(|e| env("starting the grant's relay", e))?;
        let port = String::from_utf8_lossy(&done.stdout).trim().parse::<u16>().ok().filter(|p| *p > 0);
        let port = port.filter(|_| done.exit_code == Some(0)).ok_or_else(|| {
            env(
                "starting the grant's relay",
                format!("it ended with {:?}: {}", done.exit_code, remote::vendor_text(&done.stderr)),
            )
        })?;
        self.open_forwards(port).map_err(|e| env("opening the grant's forwards", e))?;
        self.exports = exports;
        Ok(())
    }

    /// Whether a relay to the host's broker runs in the sandbox.
    fn relaying(&self) -> bool {
        self.relay.get().is_some()
    }

    /// Writes `files` (bare names) beside the grant's client: one call's
    /// description of its grant.
    fn write_call_description(&self, files: &[File]) -> Result<(), String> {
        files.iter().try_for_each(|f| self.upload(&format!("{CLIENT_DIR}/{}", f.path), &f.content))
    }

    /// Removes what [`Sandbox::write_call_description`] wrote, once the call ended.
    fn remove_call_description(&self, files: &[File]) -> Result<(), String> {
        let mut argv = words(&["rm", "-f", "--"]);
        argv.extend(files.iter().map(|f| format!("{CLIENT_DIR}/{}", f.path)));
        let done = self.exec(argv, &[], Instant::now() + Duration::from_secs(20), 4096)?;
        match done.exit_code {
            Some(0) => Ok(()),
            other => Err(format!("rm ended with {other:?}: {}", remote::vendor_text(&done.stderr))),
        }
    }

    /// Takes fresh forward tokens and has the host open forwards on each to
    /// the relay's `port`.
    fn open_forwards(&self, port: u16) -> Result<(), String> {
        self.relay.set(Some((port, Instant::now())));
        for _ in 0..FORWARD_TOKENS {
            let token = gateway::forward_token(&self.id)?;
            self.forward_tokens.borrow_mut().push(token.clone());
            gateway::forward(&self.id, port, &token, FORWARDS_PER_TOKEN)?;
        }
        Ok(())
    }

    /// Between a session's calls: ends the forwards and their tokens once they
    /// are `older` than that, and opens fresh ones, before the gateway's token
    /// lifetime (1 h by default) would refuse a forward opened again.
    fn renew_forwards(&self, older: Duration) -> Result<(), String> {
        let Some((port, since)) = self.relay.get() else { return Ok(()) };
        if since.elapsed() < older {
            return Ok(());
        }
        plimsoll::host::http::relay_end();
        self.end_forwards();
        self.open_forwards(port)
    }

    /// Revokes the run's forward tokens: its code has ended, and so does its way in.
    fn end_forwards(&self) {
        for token in self.forward_tokens.take() {
            if let Err(e) = gateway::revoke(&token) {
                log::warn(&format!("revoking a forward token of openshell sandbox {} failed: {e}", self.name));
            }
        }
    }

    fn evidence(&self) -> Evidence {
        Evidence {
            tier: Tier::Container,
            environment: format!("openshell-image:{}", self.image),
            software_identity: None,
            instance: Some(format!("openshell-sandbox:{}", self.id)),
            claims: vec![
                ("gateway-driver".into(), format!("docker {}", self.driver)),
                ("policy".into(), format!("openshell-policy:sha256:{}", self.policy_hash)),
            ],
        }
    }

    fn exec(&self, argv: Vec<String>, stdin: &[u8], deadline: Instant, cap: usize) -> Result<gateway::Exec, String> {
        gateway::exec(&self.id, &argv, stdin, deadline, cap)
    }
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

impl Remote for Sandbox {
    /// In pieces under the gateway's message cap, each appended.
    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        let deadline = || Instant::now() + Duration::from_secs(60);
        let mut pieces: Vec<&[u8]> = bytes.chunks(STDIN_CHUNK).collect();
        if pieces.is_empty() {
            pieces.push(&[]);
        }
        for (i, piece) in pieces.into_iter().enumerate() {
            let script = if i == 0 { r#"mkdir -p "$(dirname "$1")" && cat > "$1""# } else { r#"cat >> "$1""# };
            let done = self.exec(words(&["sh", "-c", script, "sh", path]), piece, deadline(), 4096)?;
            if done.exit_code != Some(0) {
                return Err(format!(
                    "writing {path} ended with {:?}: {}",
                    done.exit_code,
                    remote::vendor_text(&done.stderr)
                ));
            }
        }
        Ok(())
    }

    fn run(&self, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<remote::Ran, String> {
        let script = remote::exported(&self.exports, script);
        let wrapped = wrapper::wrap(&script, cwd, deadline, max_output);
        // The wrapper's own cap is one byte past the caller's; its trailer follows.
        let done = self.exec(wrapped.argv.clone(), &[], deadline + Duration::from_secs(3), max_output + 4096)?;
        match done.exit_code {
            Some(code) => Ok(wrapped.result(code, done.stdout, done.stderr, done.cut)),
            // The guest's `timeout` should have ended it; the stream was cancelled instead.
            None => Ok(wrapped.result(137, done.stdout, done.stderr, true)),
        }
    }

    fn download(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        let script = r#"[ -f "$1" ] || exit 44; exec cat -- "$1""#;
        let cap = remote::MAX_ARTIFACT_BYTES + 1;
        let done =
            self.exec(words(&["sh", "-c", script, "sh", path]), &[], Instant::now() + Duration::from_secs(60), cap)?;
        match done.exit_code {
            Some(0) => Ok(Some(done.stdout)),
            Some(44) => Ok(None),
            other => Err(format!("reading {path} ended with {other:?}: {}", remote::vendor_text(&done.stderr))),
        }
    }

    /// Not `kill -9 -1`: the command runs inside the wrapper, which must live.
    fn before_artifacts(&self) -> &'static str {
        remote::KILL_THE_REST
    }
}

fn budget(limits: &Limits) -> Duration {
    Duration::from_millis(u64::from(limits.timeout_ms.clamp(1, MAX_TIMEOUT_MS)))
}

/// A fresh sandbox for a run of `budget`, carrying `grant` in.
fn open(budget: Duration, grant: Option<&RelayGrant>) -> Result<Sandbox, Refusal> {
    let mut sandbox = Sandbox::open(budget)?;
    if let Some(g) = grant {
        sandbox.carry(g)?;
    }
    Ok(sandbox)
}

fn snippet(
    language: &str,
    code: &str,
    limits: &Limits,
    grant: Option<&RelayGrant>,
) -> Result<(SnippetResult, Evidence), RunError> {
    let open = |b| open(b, grant);
    snippet_on(language, code, limits, budget(limits), RUN_DIR, open, Sandbox::hand_over)
}

fn project(
    files: &[File],
    steps: &[String],
    artifacts: &[String],
    limits: &Limits,
    grant: Option<&RelayGrant>,
) -> Result<(ProjectResult, Evidence), RunError> {
    let open = |b| open(b, grant);
    project_on((files, steps, artifacts), limits, budget(limits), PROJECT_DIR, open, Sandbox::hand_over)
}

/// The behavioural proof at startup: a real sandbox, read back, runs node and
/// python in its directory, reaches nothing outside, can write only under
/// `/tmp`, and its `/tmp` is the `noexec` tmpfs of the size asked.
fn smoke() -> Result<Evidence, Refusal> {
    let s = settings()?;
    let sandbox = Sandbox::open(Duration::from_secs(120))?;
    let fail = |check: &str, why: String| refused(RefusalReason::Environment, format!("smoke test, {check}: {why}"));
    let node = remote::smoke(&sandbox, RUN_DIR).map_err(|(check, why)| fail(&check, why))?;
    let probe = |script: &str| {
        sandbox
            .run(script, RUN_DIR, Instant::now() + Duration::from_secs(20), 4096)
            .map(|r| (r.exit_code, String::from_utf8_lossy(&r.stdout.bytes).trim().to_string()))
    };
    let (code, _) = probe("touch /plimsoll-probe 2>/dev/null || touch /home/plimsoll-probe 2>/dev/null")
        .map_err(|e| fail("writes", e))?;
    if code == 0 {
        return Err(fail("writes", "the guest could write outside /tmp".into()));
    }
    let (_, tmp) = probe("stat -f -c '%b %S' /tmp; grep ' /tmp ' /proc/mounts").map_err(|e| fail("disk", e))?;
    let mut lines = tmp.lines();
    let size = lines.next().and_then(|l| {
        let (blocks, unit) = l.split_once(' ')?;
        Some(blocks.parse::<u64>().ok()? * unit.parse::<u64>().ok()?)
    });
    let mount = lines.next().unwrap_or_default();
    let flags_ok = mount.starts_with("tmpfs ") && ["noexec", "nosuid", "nodev"].iter().all(|f| mount.contains(f));
    if size != Some(u64::from(s.disk_mib) << 20) || !flags_ok {
        return Err(fail(
            "disk",
            format!("/tmp is not a noexec tmpfs of {} MiB: {size:?} bytes, {mount:?}", s.disk_mib),
        ));
    }
    log::info(&format!(
        "smoke test passed in openshell sandbox {} ({}): node {node}, python, no egress, writes only under a {} MiB noexec /tmp",
        sandbox.name, sandbox.id, s.disk_mib
    ));
    Ok(sandbox.evidence())
}

/// Deletes this daemon's sandboxes a run does not hold, and another daemon's
/// once their lifetime and a grace have passed.
fn sweep(keep: &[String]) -> Result<Vec<String>, String> {
    let s = settings().map_err(|r| r.message)?;
    let listed = gateway::list(&format!("{RUN_LABEL}=1"))?;
    let now = now_ms();
    let mut candidates = Vec::new();
    for l in listed {
        let own = l.labels.get(INSTANCE_LABEL) == Some(&s.instance);
        let lifetime = l.labels.get(LIFETIME_LABEL).and_then(|l| l.parse::<i64>().ok());
        let expired = lifetime.is_some_and(|life| now > l.created_ms + (life + FOREIGN_GRACE_S) * 1000);
        if own || expired {
            candidates.push(l.name);
        }
    }
    let (deleted, failed) = remote::sweep(candidates, keep, gateway::delete);
    if !failed.is_empty() {
        log::warn(&format!("the sweep could not delete {} openshell sandbox(es): {}", failed.len(), failed.join("; ")));
    }
    Ok(deleted)
}

plimsoll_plugin_remote::wit_glue!("openshell");
plimsoll_plugin_remote::grant_ways!("openshell");
plimsoll_plugin_agent::session_glue!();

impl Guest for Plugin {
    type Session = session::OpenshellSession;

    fn describe() -> Description {
        Description {
            name: "openshell".into(),
            languages: vec!["javascript".into(), "python".into()],
            projects: true,
            modules: false,
            sessions: true,
            grants: GrantWay::Relay,
            max_timeout_ms: MAX_TIMEOUT_MS,
            max_project_timeout_ms: MAX_TIMEOUT_MS,
        }
    }

    fn preflight() -> Result<Evidence, Refusal> {
        let s = settings()?;
        Ok(Evidence {
            tier: Tier::Container,
            environment: format!("openshell-image:{}", s.image),
            software_identity: None,
            instance: None,
            claims: vec![],
        })
    }

    fn smoke_test() -> Result<Evidence, Refusal> {
        smoke()
    }

    fn sweep(keep: Vec<String>) -> Result<Vec<String>, String> {
        sweep(&keep)
    }

    fn release(targets: Vec<String>) -> Vec<String> {
        remote::release("openshell", targets, gateway::delete, log::warn)
    }

    fn run_snippet(
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(SnippetResult, Evidence), RunError> {
        let grant = relay_grant(grant).map_err(RunError::Refused)?;
        snippet(&language, &code, &limits, grant.as_ref())
    }

    fn run_project(
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(ProjectResult, Evidence), RunError> {
        let grant = relay_grant(grant).map_err(RunError::Refused)?;
        project(&files, &steps, &artifacts, &limits, grant.as_ref())
    }

    fn run_module(_request: ModuleRequest, _limits: Limits) -> Result<(ModuleResult, Evidence), RunError> {
        Err(RunError::Refused(refused(RefusalReason::Unsupported, "the openshell provider does not run module tables")))
    }
}

export!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings { image: "i@sha256:00".into(), instance: "ci".into(), cpus_milli: 1000, memory_mib: 256, disk_mib: 64 }
    }

    #[test]
    fn every_difference_in_the_read_back_is_named() {
        let sent = spec(&settings());
        assert_eq!(difference(&sent, &sent), None);
        let mut got = sent.clone();
        got.template.as_mut().expect("template").resources =
            Some(Json::object([("limits", Json::object([("cpu", Json::String("8".into()))]))]));
        assert_eq!(difference(&sent, &got).as_deref(), Some("its resources"));
        let mut got = sent.clone();
        got.policy.as_mut().expect("policy").network_policies.push("egress".into());
        assert_eq!(difference(&sent, &got).as_deref(), Some("its policy"));
        let mut got = sent.clone();
        got.providers.push("github".into());
        assert_eq!(difference(&sent, &got).as_deref(), Some("credential providers are attached (github)"));
        let mut got = sent.clone();
        got.template.as_mut().expect("template").driver_config = None;
        assert_eq!(difference(&sent, &got).as_deref(), Some("its driver settings (mounts)"));
    }

    #[test]
    fn a_guard_grant_is_refused_by_name_before_anything_is_made() {
        assert!(relay_grant(None).is_ok_and(|g| g.is_none()));
        let grant = GuardGrant {
            url: "https://guard.test/v1/guard".into(),
            host: "guard.test".into(),
            header: "x-plimsoll-guard".into(),
            credential: "crg_0".into(),
            client: vec![],
            env: vec![],
        };
        let r = relay_grant(Some(Grant::Guard(grant))).expect_err("refused");
        assert!(matches!(r.reason, RefusalReason::Unsupported));
        assert_eq!(r.message, "the openshell provider cannot carry a grant through the host's guard");
    }
}
