//! The {{name}} provider plugin, as `plimsoll-host plugin new` wrote it.
//!
//! Each snippet and project runs in a fresh container of the host's container
//! engine (the `containers` capability, held to the host's lockdown whatever
//! this code asks), driven through the shared remote library's [`Remote`]
//! trait: upload a file, run a command, download a file. The library does the
//! rest: a snippet's file and interpreter, a project's files, steps, artifacts
//! and links out of it, the smoke test's checks.
//!
//! To drive a remote vendor instead, implement those three calls over its API
//! with the `http` capability (`plimsoll::host::http::send` to an endpoint alias),
//! and declare the endpoints, settings and secrets in `plugin.toml`
//! (docs/plugins.md in the plimsoll repository is the reference).

wit_bindgen::generate!({
    world: "plimsoll:provider/provider-plugin",
    path: ["wit/types", "wit/host", "wit/provider"],
    generate_all,
});

use std::time::{Duration, Instant};

use plimsoll_plugin_remote::{self as remote, Remote};

use exports::plimsoll::provider::provider::{
    Answer, CallError, Description, Grant, GrantWay, GuardGrant, Guest, GuestSession, RelayGrant, RunError, Session,
};
use plimsoll::host::containers::{self, Mount};
use plimsoll::host::log;
use plimsoll::types::types::{
    Evidence, File, Limits, ModuleRequest, ModuleResult, Output, ProjectOutcome, ProjectResult, Refusal, RefusalReason,
    SnippetResult, StepResult, Tier,
};

/// Where a run's files go: a tmpfs the guest owns.
const WORK: &str = "/work";
/// The guest's uid and gid (never root; the host refuses 0).
const GUEST_UID: u32 = 61000;
/// Defaults for a limit the operator left unset (0).
const MEMORY_MB: u32 = 256;
const CPUS_MILLI: u32 = 1000;
const PIDS: u32 = 256;
const DISK_MB: u32 = 64;
const TMP_MB: u32 = 16;
const SHM_MB: u32 = 16;
/// The longest snippet and project this plugin offers.
const MAX_TIMEOUT_MS: u32 = 60_000;
const MAX_PROJECT_TIMEOUT_MS: u32 = 300_000;

struct Plugin;

fn refused(reason: RefusalReason, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

fn or(v: u32, default: u32) -> u32 {
    if v == 0 { default } else { v }
}

/// The runtime and image the host proved at startup.
fn target() -> Result<(String, String), Refusal> {
    let runtime = containers::runtimes().into_iter().next();
    let image = containers::images().into_iter().next();
    match (runtime, image) {
        (Some(r), Some((id, _))) => Ok((r, id)),
        (None, _) => Err(refused(RefusalReason::Environment, "no container runtime was verified at startup")),
        (_, None) => Err(refused(RefusalReason::Environment, "no sandbox image was proven at startup")),
    }
}

/// What this plugin says of a run; the host checks it against the runtimes the
/// containers really ran under, and caps it at the manifest's max-tier.
fn evidence(runtime: &str, image: &str) -> Evidence {
    Evidence {
        tier: if runtime == "runsc" { Tier::Kernel } else { Tier::Container },
        environment: format!("docker-image:{image}"),
        software_identity: None,
        instance: None,
        claims: vec![("runtime".into(), runtime.into())],
    }
}

/// One run's container; removed when dropped, whatever happened.
struct Sandbox {
    container: containers::Container,
    runtime: String,
    image: String,
}

impl Sandbox {
    /// A started container for a run of `budget` within `limits`.
    fn open(limits: &Limits, budget: Duration) -> Result<Sandbox, Refusal> {
        let (runtime, image) = target()?;
        let lifetime_s = u32::try_from(budget.as_secs()).unwrap_or(u32::MAX).saturating_add(300);
        let spec = containers::Spec {
            image_id: image.clone(),
            runtime: runtime.clone(),
            user: GUEST_UID,
            memory_mb: or(limits.memory_mb, MEMORY_MB),
            cpus_milli: or(limits.cpus_milli, CPUS_MILLI),
            pids: or(limits.pids, PIDS),
            tmpfs: vec![
                Mount { target: "/tmp".into(), size_mb: TMP_MB },
                Mount { target: "/dev/shm".into(), size_mb: SHM_MB },
                Mount {
                    target: WORK.into(),
                    size_mb: or(limits.disk_mb, DISK_MB).saturating_sub(TMP_MB + SHM_MB).max(16),
                },
            ],
            workdir: WORK.into(),
            command: vec!["sleep".into(), lifetime_s.to_string()],
            env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()), ("HOME".into(), "/tmp".into())],
            labels: vec![("dev.plimsoll.plugin.{{name}}".into(), "run".into())],
            lifetime_s,
        };
        let env = |what: &str, e: String| refused(RefusalReason::Environment, format!("{what}: {e}"));
        let container = containers::Container::create(&spec).map_err(|e| env("creating the container", e))?;
        container.start(&[]).map_err(|e| env("starting the container", e))?;
        Ok(Sandbox { container, runtime, image })
    }

    fn evidence(&self) -> Evidence {
        evidence(&self.runtime, &self.image)
    }
}

fn millis(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX).max(1)
}

impl Remote for Sandbox {
    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        let write = "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"";
        let argv = ["sh", "-c", write, "sh", path].map(String::from);
        let r = self.container.exec(&argv, bytes, 30_000, 4096)?;
        match r.exit_code {
            Some(0) => Ok(()),
            _ => Err(format!("writing {path}: {}", String::from_utf8_lossy(&r.stderr))),
        }
    }

    fn run(&self, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<remote::Ran, String> {
        let started = Instant::now();
        let script = format!("cd {} && {script}", remote::shell_quote(cwd));
        let argv = ["sh".to_string(), "-c".into(), script];
        let left = deadline.saturating_duration_since(started);
        let cap = u32::try_from(max_output).unwrap_or(u32::MAX);
        let r = self.container.exec(&argv, &[], millis(left), cap)?;
        Ok(remote::Ran {
            // A process killed at the deadline or by a signal has no status of its own.
            exit_code: r.exit_code.unwrap_or(if r.timed_out { 124 } else { 137 }),
            timed_out: r.timed_out,
            stdout: remote::Output { bytes: r.stdout, truncated: r.stdout_truncated },
            stderr: remote::Output { bytes: r.stderr, truncated: r.stderr_truncated },
            duration_ms: millis(started.elapsed()),
        })
    }

    fn download(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        let read = "[ -f \"$1\" ] || exit 44; cat \"$1\"";
        let argv = ["sh", "-c", read, "sh", path].map(String::from);
        let cap = u32::try_from(remote::MAX_ARTIFACT_BYTES + 1).unwrap_or(u32::MAX);
        let r = self.container.exec(&argv, &[], 30_000, cap)?;
        match r.exit_code {
            Some(0) => Ok(Some(r.stdout)),
            Some(44) => Ok(None),
            _ => Err(format!("reading {path}: {}", String::from_utf8_lossy(&r.stderr))),
        }
    }
}

remote::wit_glue!("{{name}}");
remote::grant_ways!("{{name}}");
remote::no_sessions!("{{name}}");

impl Guest for Plugin {
    type Session = NoSession;

    fn describe() -> Description {
        Description {
            name: "{{name}}".into(),
            languages: vec!["javascript".into(), "python".into()],
            projects: true,
            modules: false,
            sessions: false,
            grants: GrantWay::None,
            max_timeout_ms: MAX_TIMEOUT_MS,
            max_project_timeout_ms: MAX_PROJECT_TIMEOUT_MS,
        }
    }

    fn preflight() -> Result<Evidence, Refusal> {
        let (runtime, image) = target()?;
        Ok(evidence(&runtime, &image))
    }

    /// A container that runs node and python, keeps its working directory and
    /// reaches no network, before anything is served.
    fn smoke_test() -> Result<Evidence, Refusal> {
        let limits = Limits {
            timeout_ms: 60_000,
            memory_mb: 0,
            cpus_milli: 0,
            pids: 0,
            disk_mb: 0,
            max_output_bytes: 64 << 10,
        };
        let sandbox = Sandbox::open(&limits, Duration::from_secs(60))?;
        let node = remote::smoke(&sandbox, WORK).map_err(|(check, e)| {
            refused(RefusalReason::Environment, format!("the smoke test's {check} check failed: {e}"))
        })?;
        log::info(&format!("smoke test passed: node {node}, python, no egress"));
        Ok(sandbox.evidence())
    }

    /// The host removes this plugin's containers itself (their lifetime label).
    fn sweep(_keep: Vec<String>) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }

    fn release(_targets: Vec<String>) -> Vec<String> {
        Vec::new()
    }

    fn run_snippet(
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(SnippetResult, Evidence), RunError> {
        no_grant(grant.as_ref()).map_err(RunError::Refused)?;
        let budget = Duration::from_millis(u64::from(limits.timeout_ms));
        let open = |budget| Sandbox::open(&limits, budget);
        snippet_on(&language, &code, &limits, budget, WORK, open, |s: Sandbox| s.evidence())
    }

    fn run_project(
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(ProjectResult, Evidence), RunError> {
        no_grant(grant.as_ref()).map_err(RunError::Refused)?;
        let budget = Duration::from_millis(u64::from(limits.timeout_ms));
        let open = |budget| Sandbox::open(&limits, budget);
        project_on((&files, &steps, &artifacts), &limits, budget, WORK, open, |s: Sandbox| s.evidence())
    }

    fn run_module(_request: ModuleRequest, _limits: Limits) -> Result<(ModuleResult, Evidence), RunError> {
        Err(RunError::Refused(refused(RefusalReason::Unsupported, "the {{name}} provider does not run module tables")))
    }
}

export!(Plugin);
