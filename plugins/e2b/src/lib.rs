//! The e2b provider plugin. It drives E2B's sandboxes (Firecracker microVMs) only
//! through the host's `plimsoll:host/http` capability, at two endpoints the host
//! maps: `api` (the control plane; the host attaches the API key and keeps each
//! sandbox's envd access token out of the answers) and `envd` (one host per
//! sandbox; the host attaches that sandbox's token). The plugin holds no secret.
//!
//! Every run gets a fresh sandbox: created secured, denying all egress and public
//! traffic, stamped with this daemon's instance; read back before any code goes
//! in (this sandbox, running, ours, within the operator's maxima, still denying
//! all egress, and no network field plimsoll does not know); deleted on every
//! path. The tier it states, `vm`, rests on that read-back; the host caps it.

mod api;
mod connect;
mod envd;
mod session;

wit_bindgen::generate!({
    world: "plimsoll:provider/provider-plugin",
    path: ["../../wit/types", "../../wit/host", "../../wit/provider"],
    generate_all,
});

use std::cell::Cell;
use std::time::{Duration, Instant};

use plimsoll_plugin_agent::runner;
use plimsoll_plugin_remote::{self as remote, Remote};

use exports::plimsoll::provider::provider::{Description, Grant, GrantWay, GuardGrant, Guest, RelayGrant, RunError};
use plimsoll::host::{config, log};
use plimsoll::types::types::{
    Evidence, File, Limits, ModuleRequest, ModuleResult, Output, ProjectOutcome, ProjectResult, Refusal, RefusalReason,
    SnippetResult, StepResult, Tier,
};

/// Where a snippet's code goes.
const RUN_DIR: &str = "/home/user/plimsoll";
/// A project's work directory.
const PROJECT_DIR: &str = "/home/user/project";
/// The only variables a session's project steps get.
const GUEST_ENV: [&str; 3] = ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/user", "LANG=C.UTF-8"];
/// Seconds E2B keeps a sandbox past the run's budget, should every delete be lost.
const LIFETIME_MARGIN_S: u32 = 120;
/// The longest snippet and project E2B runs here.
const MAX_TIMEOUT_MS: u32 = 300_000;
const MAX_PROJECT_TIMEOUT_MS: u32 = 1_800_000;

struct Plugin;

fn refused(reason: RefusalReason, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

/// The operator's and the host's settings this plugin reads.
struct Settings {
    template: String,
    instance: String,
}

fn settings() -> Result<Settings, Refusal> {
    let get = |key: &str| config::get(key).filter(|v| !v.is_empty());
    let template =
        get("template").ok_or_else(|| refused(RefusalReason::Environment, "no e2b template is configured"))?;
    let instance =
        get("instance").ok_or_else(|| refused(RefusalReason::Environment, "the host gave no instance to stamp"))?;
    Ok(Settings { template, instance })
}

/// A sandbox of this run; deleted when dropped, whatever happened.
struct Sandbox {
    id: String,
    template: String,
    envd_version: String,
    /// The memory the read-back gave it, for the out-of-memory note.
    memory_mb: u64,
    /// The kernel's count of OOM kills when last read (None: it does not say).
    ooms: Cell<Option<u64>>,
    /// The instance stamp and the maxima its read-back was checked against.
    instance: String,
    maxima: api::Maxima,
    /// A granted run's way to the host's guard, which its read-back must show.
    guard: Option<api::Guard>,
    /// What every process of the run gets beside the guest's own (a granted
    /// run's client).
    env: Vec<(String, String)>,
}

/// Where a granted run's client goes: the guest's, outside the run's directories.
const CLIENT_DIR: &str = "/home/user/.plimsoll-host";

/// The guard's rule a grant asks the sandbox's network for.
fn api_guard(g: &GuardGrant) -> api::Guard {
    api::Guard { host: g.host.clone(), header: g.header.clone(), credential: g.credential.clone() }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Err(e) = api::delete(&self.id) {
            log::warn(&format!(
                "deleting e2b sandbox {} failed ({e}); it ends at its own timeout, and the next startup's sweep deletes it",
                self.id
            ));
        }
    }
}

impl Sandbox {
    /// Creates and reads back a sandbox for a run of `budget`; with `grant`, one
    /// whose only way out is the host's guard, with the grant's client written
    /// in. Nothing of the caller's is in it yet, so every failure is a refusal.
    fn open(limits: &Limits, budget: Duration, grant: Option<&GuardGrant>) -> Result<Sandbox, Refusal> {
        let s = settings()?;
        let lifetime = u32::try_from(budget.as_secs()).unwrap_or(u32::MAX).saturating_add(LIFETIME_MARGIN_S);
        let guard = grant.map(api_guard);
        let created = api::create(&s.template, lifetime, &s.instance, guard.as_ref())
            .map_err(|e| refused(RefusalReason::Environment, format!("creating an e2b sandbox: {e}")))?;
        let mut sandbox = Sandbox {
            id: created.id,
            template: s.template,
            envd_version: created.envd_version,
            memory_mb: 0,
            ooms: Cell::new(None),
            instance: s.instance,
            maxima: api::Maxima { memory_mb: limits.memory_mb, cpus_milli: limits.cpus_milli, disk_mb: limits.disk_mb },
            guard,
            env: Vec::new(),
        };
        let detail = api::detail(&sandbox.id)
            .map_err(|e| refused(RefusalReason::Environment, format!("reading the e2b sandbox back: {e}")))?;
        sandbox
            .verify(&detail)
            .map_err(|e| refused(RefusalReason::Isolation, format!("the e2b sandbox is not what was asked: {e}")))?;
        sandbox.memory_mb = detail.get("memoryMB").and_then(serde_json::Value::as_u64).unwrap_or_default();
        sandbox.ooms.set(sandbox.oom_kills());
        if let Some(g) = grant {
            sandbox.env = sandbox.install_client(g)?;
        }
        Ok(sandbox)
    }

    /// Writes `g`'s client into [`CLIENT_DIR`]; returns the variables that
    /// install it in a process. Nothing of the caller's runs meanwhile, so a
    /// failure is a refusal.
    fn install_client(&self, g: &GuardGrant) -> Result<Vec<(String, String)>, Refusal> {
        for f in &g.client {
            envd::upload(&self.id, &format!("{CLIENT_DIR}/{}", f.path), &f.content).map_err(|e| {
                refused(RefusalReason::Environment, format!("writing the grant's client {}: {e}", f.path))
            })?;
        }
        Ok(g.env.iter().map(|(k, v)| (k.clone(), v.replace("{dir}", CLIENT_DIR))).collect())
    }

    /// Checks a read-back `detail` of this sandbox against what was asked at its create.
    fn verify(&self, detail: &serde_json::Value) -> Result<(), String> {
        self.verify_with(detail, self.guard.as_ref())
    }

    /// As [`Sandbox::verify`], its way out `guard` (a session's call that names
    /// its own grant) instead of the create's.
    fn verify_with(&self, detail: &serde_json::Value, guard: Option<&api::Guard>) -> Result<(), String> {
        api::verify(detail, &self.id, &self.instance, self.maxima, guard)
    }

    /// How many processes the sandbox's kernel has killed for want of memory
    /// (`oom_kill` in its `/proc/vmstat`); None where the kernel does not say.
    fn oom_kills(&self) -> Option<u64> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = envd::run(&self.id, "sed -n 's/^oom_kill //p' /proc/vmstat", ("/", &[]), deadline, 256).ok()?;
        if r.exit_code != 0 {
            return None;
        }
        String::from_utf8_lossy(&r.stdout.bytes).trim().parse().ok()
    }

    /// Names an out-of-memory kill: a process SIGKILLed (137) while the kernel's
    /// count of OOM kills rose past the last reading gets the note a runner would give.
    fn name_oom_kill(&self, ran: &mut remote::Ran) {
        if ran.exit_code != 137 || ran.timed_out {
            return;
        }
        let Some(was) = self.ooms.get() else { return };
        let Some(now) = self.oom_kills() else { return };
        self.ooms.set(Some(now));
        if now > was {
            let note = format!(
                "\nplimsoll: the step ran out of memory: the sandbox's kernel's OOM killer ended it (the sandbox has {} MiB)\n",
                self.memory_mb
            );
            ran.stderr.bytes.extend_from_slice(note.as_bytes());
        }
    }

    fn evidence(&self) -> Evidence {
        Evidence {
            tier: Tier::Vm,
            environment: format!("e2b-template:{}", self.template),
            software_identity: None,
            instance: Some(format!("e2b-sandbox:{}", self.id)),
            claims: vec![("envd-version".into(), self.envd_version.clone())],
        }
    }
}

impl Remote for Sandbox {
    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        envd::upload(&self.id, path, bytes)
    }

    fn run(&self, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<remote::Ran, String> {
        let mut ran = envd::run(&self.id, script, (cwd, &self.env), deadline, max_output)?;
        self.name_oom_kill(&mut ran);
        Ok(ran)
    }

    fn download(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        envd::download(&self.id, path)
    }

    /// envd runs every process as the guest user: this ends every process the
    /// steps left, as on the other remote backends.
    fn before_artifacts(&self) -> &'static str {
        remote::KILL_THE_REST
    }
}

fn budget(limits: &Limits) -> Duration {
    Duration::from_millis(u64::from(limits.timeout_ms.max(1)))
}

fn snippet(
    language: &str,
    code: &str,
    limits: &Limits,
    grant: Option<&GuardGrant>,
) -> Result<(SnippetResult, Evidence), RunError> {
    let open = |b| Sandbox::open(limits, b, grant);
    snippet_on(language, code, limits, budget(limits), RUN_DIR, open, |s| s.evidence())
}

fn project(
    (files, steps, artifacts): (&[File], &[String], &[String]),
    limits: &Limits,
    grant: Option<&GuardGrant>,
) -> Result<(ProjectResult, Evidence), RunError> {
    let open = |b| Sandbox::open(limits, b, grant);
    project_on((files, steps, artifacts), limits, budget(limits), PROJECT_DIR, open, |s| s.evidence())
}

/// The behavioural proof at startup: a real sandbox, read back, runs node and
/// python in its directory, and reaches nothing outside.
fn smoke() -> Result<Evidence, Refusal> {
    let limits =
        Limits { timeout_ms: 60_000, memory_mb: 0, cpus_milli: 0, pids: 0, disk_mb: 0, max_output_bytes: 64 << 10 };
    let sandbox = Sandbox::open(&limits, budget(&limits), None)?;
    let node = remote::smoke(&sandbox, RUN_DIR)
        .map_err(|(check, why)| refused(RefusalReason::Environment, format!("smoke test, {check}: {why}")))?;
    log::info(&format!("smoke test passed in e2b sandbox {}: node {node}, python, no egress", sandbox.id));
    let evidence = sandbox.evidence();
    drop(sandbox);
    probe_rules()?;
    Ok(evidence)
}

/// The words E2B answers a team without network transform rules (infra
/// 54693ff3, handlers/sandbox_create.go).
const NO_RULES: &str = "Network transform rules are not available for your team";

/// With a guard set, granted runs need network transform rules, a per-team
/// feature at E2B: a sandbox is made with one (to the guard's host, adding a
/// header no guard accepts) and deleted, so a team without the feature is
/// refused at startup by name, not on its first granted run.
fn probe_rules() -> Result<(), Refusal> {
    let Some(url) = config::get("guard-url").filter(|u| !u.is_empty()) else { return Ok(()) };
    let host = url
        .strip_prefix("https://")
        .and_then(|r| r.split(['/', ':']).next())
        .filter(|h| !h.is_empty())
        .ok_or_else(|| refused(RefusalReason::Environment, format!("the guard URL {url:?} names no host")))?;
    let s = settings()?;
    let probe =
        api::Guard { host: host.to_string(), header: "x-plimsoll-probe".into(), credential: remote::random_hex(16) };
    match api::create(&s.template, 60, &s.instance, Some(&probe)) {
        Ok(created) => {
            if let Err(e) = api::delete(&created.id) {
                log::warn(&format!(
                    "deleting the network rules probe {} failed ({e}); the sweep deletes it",
                    created.id
                ));
            }
            Ok(())
        }
        Err(e) if e.contains(NO_RULES) => Err(refused(
            RefusalReason::Environment,
            format!(
                "granted runs reach the host's guard through E2B's network transform rules, which the team \
                 behind the API key does not have ({e}); ask E2B to enable them for the team, or unset \
                 E2B_GUARD_URL and the grant profiles"
            ),
        )),
        Err(e) => {
            Err(refused(RefusalReason::Environment, format!("creating a sandbox with the guard's network rule: {e}")))
        }
    }
}

plimsoll_plugin_remote::wit_glue!("e2b");
plimsoll_plugin_remote::grant_ways!("e2b");
plimsoll_plugin_agent::session_glue!();

impl Guest for Plugin {
    type Session = session::E2bSession;

    fn describe() -> Description {
        Description {
            name: "e2b".into(),
            languages: vec!["javascript".into(), "python".into()],
            projects: true,
            modules: false,
            sessions: true,
            grants: GrantWay::Guard,
            max_timeout_ms: MAX_TIMEOUT_MS,
            max_project_timeout_ms: MAX_PROJECT_TIMEOUT_MS,
        }
    }

    fn preflight() -> Result<Evidence, Refusal> {
        let s = settings()?;
        Ok(Evidence {
            tier: Tier::Vm,
            environment: format!("e2b-template:{}", s.template),
            software_identity: None,
            instance: None,
            claims: vec![],
        })
    }

    fn smoke_test() -> Result<Evidence, Refusal> {
        smoke()
    }

    fn sweep(keep: Vec<String>) -> Result<Vec<String>, String> {
        let s = settings().map_err(|r| r.message)?;
        let (deleted, failed) = remote::sweep(api::stamped(&s.instance)?, &keep, api::delete);
        if !failed.is_empty() {
            log::warn(&format!("the sweep could not delete {} e2b sandbox(es): {}", failed.len(), failed.join("; ")));
        }
        Ok(deleted)
    }

    fn release(targets: Vec<String>) -> Vec<String> {
        remote::release("e2b", targets, api::delete, log::warn)
    }

    fn run_snippet(
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(SnippetResult, Evidence), RunError> {
        let grant = guard_grant(grant).map_err(RunError::Refused)?;
        snippet(&language, &code, &limits, grant.as_ref())
    }

    fn run_project(
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(ProjectResult, Evidence), RunError> {
        let grant = guard_grant(grant).map_err(RunError::Refused)?;
        project((&files, &steps, &artifacts), &limits, grant.as_ref())
    }

    fn run_module(_request: ModuleRequest, _limits: Limits) -> Result<(ModuleResult, Evidence), RunError> {
        Err(RunError::Refused(refused(RefusalReason::Unsupported, "the e2b provider does not run module tables")))
    }
}

export!(Plugin);
