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

wit_bindgen::generate!({
    world: "plimsoll:provider/provider-plugin",
    path: ["../../wit/types", "../../wit/host", "../../wit/provider"],
    generate_all,
});

use std::time::{Duration, Instant};

use exports::plimsoll::provider::provider::{Answer, CallError, Description, Guest, GuestSession, RunError, Session};
use plimsoll::host::{config, log};
use plimsoll::types::types::{
    Evidence, File, Limits, ModuleRequest, ModuleResult, ProjectOutcome, ProjectResult, Refusal, RefusalReason,
    SnippetResult, StepResult, Tier,
};

/// Where a snippet's code goes.
const RUN_DIR: &str = "/home/user/plimsoll";
/// A project's work directory.
const PROJECT_DIR: &str = "/home/user/project";
/// Seconds E2B keeps a sandbox past the run's budget, should every delete be lost.
const LIFETIME_MARGIN_S: u32 = 120;
/// The most artifact bytes read back from one project.
const MAX_ARTIFACT_BYTES: usize = 4 << 20;
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
    /// Creates and reads back a sandbox for a run of `budget`. Nothing of the
    /// caller's is in it yet, so every failure is a refusal.
    fn open(limits: &Limits, budget: Duration) -> Result<Sandbox, Refusal> {
        let s = settings()?;
        let lifetime = u32::try_from(budget.as_secs()).unwrap_or(u32::MAX).saturating_add(LIFETIME_MARGIN_S);
        let created = api::create(&s.template, lifetime, &s.instance)
            .map_err(|e| refused(RefusalReason::Environment, format!("creating an e2b sandbox: {e}")))?;
        let mut sandbox =
            Sandbox { id: created.id, template: s.template, envd_version: created.envd_version, memory_mb: 0 };
        let detail = api::detail(&sandbox.id)
            .map_err(|e| refused(RefusalReason::Environment, format!("reading the e2b sandbox back: {e}")))?;
        let max = api::Maxima { memory_mb: limits.memory_mb, cpus_milli: limits.cpus_milli, disk_mb: limits.disk_mb };
        api::verify(&detail, &sandbox.id, &s.instance, max)
            .map_err(|e| refused(RefusalReason::Isolation, format!("the e2b sandbox is not what was asked: {e}")))?;
        sandbox.memory_mb = detail.get("memoryMB").and_then(serde_json::Value::as_u64).unwrap_or_default();
        Ok(sandbox)
    }

    /// How many processes the sandbox's kernel has killed for want of memory
    /// (`oom_kill` in its `/proc/vmstat`); None where the kernel does not say.
    fn oom_kills(&self) -> Option<u64> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = envd::run(&self.id, "sed -n 's/^oom_kill //p' /proc/vmstat", "/", deadline, 256).ok()?;
        if r.exit_code != 0 {
            return None;
        }
        String::from_utf8_lossy(&r.stdout.bytes).trim().parse().ok()
    }

    /// Names an out-of-memory kill: a process SIGKILLed (137) while the kernel's
    /// count of OOM kills rose past `before` gets the note a runner would give.
    fn name_oom_kill(&self, ran: &mut envd::Ran, before: &mut Option<u64>) {
        if ran.exit_code != 137 || ran.timed_out {
            return;
        }
        let Some(was) = *before else { return };
        let Some(now) = self.oom_kills() else { return };
        *before = Some(now);
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

fn budget(limits: &Limits) -> Duration {
    Duration::from_millis(u64::from(limits.timeout_ms.max(1)))
}

fn may_have_run(what: &str, e: String) -> RunError {
    RunError::MayHaveRun(format!("{what}: {e}"))
}

fn snippet(language: &str, code: &str, limits: &Limits) -> Result<(SnippetResult, Evidence), RunError> {
    let (file, command) = match language {
        "javascript" => ("main.js", "exec node main.js"),
        "python" => ("main.py", "exec python3 main.py"),
        other => {
            return Err(RunError::Refused(refused(
                RefusalReason::Unsupported,
                format!("the e2b provider runs javascript and python, not {other}"),
            )));
        }
    };
    let budget = budget(limits);
    let sandbox = Sandbox::open(limits, budget).map_err(RunError::Refused)?;
    let mut ooms = sandbox.oom_kills();
    // The budget counts from when the code is in place and starts.
    envd::upload(&sandbox.id, &format!("{RUN_DIR}/{file}"), code.as_bytes())
        .map_err(|e| may_have_run("writing the snippet", e))?;
    let mut ran = envd::run(&sandbox.id, command, RUN_DIR, Instant::now() + budget, limits.max_output_bytes as usize)
        .map_err(|e| may_have_run("running the snippet", e))?;
    sandbox.name_oom_kill(&mut ran, &mut ooms);
    let result =
        SnippetResult { exit_code: ran.exit_code, timed_out: ran.timed_out, stdout: ran.stdout, stderr: ran.stderr };
    Ok((result, sandbox.evidence()))
}

fn project(
    files: &[File],
    steps: &[String],
    artifacts: &[String],
    limits: &Limits,
) -> Result<(ProjectResult, Evidence), RunError> {
    let budget = budget(limits);
    let sandbox = Sandbox::open(limits, budget).map_err(RunError::Refused)?;
    let mut ooms = sandbox.oom_kills();
    let deadline = Instant::now() + budget;
    for f in files {
        envd::upload(&sandbox.id, &format!("{PROJECT_DIR}/{}", f.path), &f.content)
            .map_err(|e| may_have_run(&format!("writing {}", f.path), e))?;
    }
    if files.is_empty() {
        // Uploads make the work directory; without any, make it, or envd refuses
        // every step's working directory.
        let made = envd::run(&sandbox.id, &format!("mkdir -p {PROJECT_DIR}"), "/", deadline, 4096)
            .map_err(|e| may_have_run("making the work directory", e))?;
        if made.exit_code != 0 {
            return Err(may_have_run("making the work directory", String::from_utf8_lossy(&made.stderr.bytes).into()));
        }
    }
    let mut done = Vec::new();
    let mut outcome = ProjectOutcome::Completed;
    let mut detail = String::new();
    for step in steps {
        if Instant::now() >= deadline {
            outcome = ProjectOutcome::TimedOut;
            detail = "the project's budget ran out before this step".into();
            break;
        }
        let mut ran = envd::run(&sandbox.id, step, PROJECT_DIR, deadline, limits.max_output_bytes as usize)
            .map_err(|e| may_have_run(&format!("running step {step:?}"), e))?;
        sandbox.name_oom_kill(&mut ran, &mut ooms);
        let failed = ran.exit_code != 0;
        let timed_out = ran.timed_out;
        done.push(StepResult {
            command: step.clone(),
            exit_code: ran.exit_code,
            timed_out,
            duration_ms: ran.duration_ms,
            stdout: ran.stdout,
            stderr: ran.stderr,
        });
        if timed_out {
            outcome = ProjectOutcome::TimedOut;
            detail = "the project's budget ran out during this step".into();
            break;
        }
        if failed {
            break;
        }
    }
    let (read, truncated) = read_artifacts(&sandbox, artifacts)?;
    let result = ProjectResult { outcome, detail, steps: done, artifacts: read, artifacts_truncated: truncated };
    Ok((result, sandbox.evidence()))
}

/// Quotes `s` for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Reads the artifacts back: first every process the steps left is killed, so
/// nothing changes a path between its check and its read; then each path is
/// resolved in the guest, and one whose real path leaves the project directory
/// (a link out) is not read, as the docker runner does not read one.
fn read_artifacts(sandbox: &Sandbox, artifacts: &[String]) -> Result<(Vec<File>, bool), RunError> {
    if artifacts.is_empty() {
        return Ok((Vec::new(), false));
    }
    let mut script = String::from("kill -9 -1 2>/dev/null; for a in");
    for a in artifacts {
        script.push(' ');
        script.push_str(&shell_quote(&format!("{PROJECT_DIR}/{a}")));
    }
    script.push_str("; do printf '%s\\0' \"$(realpath -e -- \"$a\" 2>/dev/null)\"; done");
    let deadline = Instant::now() + Duration::from_secs(30);
    let resolved = envd::run(&sandbox.id, &script, "/", deadline, 1 << 20)
        .map_err(|e| may_have_run("resolving the artifacts", e))?;
    let real: Vec<String> =
        resolved.stdout.bytes.split(|b| *b == 0).map(|p| String::from_utf8_lossy(p).into()).collect();
    if resolved.exit_code != 0 || resolved.stdout.truncated || real.len() != artifacts.len() + 1 {
        return Err(may_have_run(
            "resolving the artifacts",
            format!("the guest's answer was cut (exit {})", resolved.exit_code),
        ));
    }
    let inside = format!("{PROJECT_DIR}/");
    let mut read = Vec::new();
    let mut total = 0usize;
    let mut truncated = false;
    for (path, real) in artifacts.iter().zip(&real) {
        if real.is_empty() {
            continue;
        }
        if !real.starts_with(&inside) {
            log::info(&format!("artifact {path:?} resolves outside the project directory, to {real:?}: not read back"));
            continue;
        }
        let Some(bytes) =
            envd::download(&sandbox.id, real).map_err(|e| may_have_run(&format!("reading artifact {path}"), e))?
        else {
            continue;
        };
        if total + bytes.len() > MAX_ARTIFACT_BYTES {
            truncated = true;
            continue;
        }
        total += bytes.len();
        read.push(File { path: path.clone(), content: bytes });
    }
    Ok((read, truncated))
}

/// The behavioural proof at startup: a real sandbox, read back, runs node and
/// python in its directory, and reaches nothing outside.
fn smoke() -> Result<Evidence, Refusal> {
    let limits =
        Limits { timeout_ms: 60_000, memory_mb: 0, cpus_milli: 0, pids: 0, disk_mb: 0, max_output_bytes: 64 << 10 };
    let sandbox = Sandbox::open(&limits, budget(&limits))?;
    let fail = |check: &str, why: String| refused(RefusalReason::Environment, format!("smoke test, {check}: {why}"));
    let run = |script: &str| {
        envd::run(&sandbox.id, script, "/", Instant::now() + Duration::from_secs(20), 64 << 10)
            .map_err(|e| fail(script, e))
            .map(|r| (r.exit_code, String::from_utf8_lossy(&r.stdout.bytes).trim().to_string()))
    };
    envd::upload(&sandbox.id, &format!("{RUN_DIR}/probe.txt"), b"probe").map_err(|e| fail("upload", e))?;
    let (code, cwd) = run(&format!("cd {RUN_DIR} && pwd && cat probe.txt"))?;
    if code != 0 || cwd != format!("{RUN_DIR}\nprobe") {
        return Err(fail("working directory", format!("exit {code}, printed {cwd:?}")));
    }
    let (code, node) = run("node -e 'console.log(process.version)'")?;
    if code != 0 || !node.starts_with('v') {
        return Err(fail("node", format!("exit {code}, printed {node:?}")));
    }
    let (code, python) = run("python3 -c 'print(6*7)'")?;
    if code != 0 || python != "42" {
        return Err(fail("python", format!("exit {code}, printed {python:?}")));
    }
    for url in ["https://1.1.1.1", "https://example.com"] {
        let script = format!(
            "node -e \"fetch('{url}',{{signal:AbortSignal.timeout(5000)}}).then(()=>console.log('reached'),()=>console.log('refused'))\""
        );
        let (_, seen) = run(&script)?;
        if seen != "refused" {
            return Err(fail("egress", format!("{url}: {seen:?}")));
        }
    }
    log::info(&format!("smoke test passed in e2b sandbox {}: node {node}, python, no egress", sandbox.id));
    Ok(sandbox.evidence())
}

/// Sessions are not offered: `describe` says so, and the host never opens one.
struct E2bSession;

impl GuestSession for E2bSession {
    fn open(_: Limits, _: u32) -> Result<Session, Refusal> {
        Err(refused(RefusalReason::Unsupported, "the e2b provider does not keep sessions"))
    }

    fn evidence(&self) -> Evidence {
        Evidence {
            tier: Tier::None,
            environment: String::new(),
            software_identity: None,
            instance: None,
            claims: vec![],
        }
    }

    fn cell(&self, _: String, _: String, _: Vec<File>, _: Limits) -> Result<Answer, CallError> {
        Err(CallError::Refused(refused(RefusalReason::Unsupported, "the e2b provider does not keep sessions")))
    }

    fn snippet(&self, _: String, _: String, _: Limits) -> Result<Answer, CallError> {
        Err(CallError::Refused(refused(RefusalReason::Unsupported, "the e2b provider does not keep sessions")))
    }

    fn project(&self, _: Vec<File>, _: Vec<String>, _: Vec<String>, _: Limits) -> Result<Answer, CallError> {
        Err(CallError::Refused(refused(RefusalReason::Unsupported, "the e2b provider does not keep sessions")))
    }

    fn close(&self) {}
}

impl Guest for Plugin {
    type Session = E2bSession;

    fn describe() -> Description {
        Description {
            name: "e2b".into(),
            languages: vec!["javascript".into(), "python".into()],
            projects: true,
            modules: false,
            sessions: false,
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
        let mut deleted = Vec::new();
        let mut failed = Vec::new();
        for id in api::stamped(&s.instance)? {
            if keep.contains(&id) {
                continue;
            }
            match api::delete(&id) {
                Ok(()) => deleted.push(id),
                Err(e) => failed.push(format!("{id}: {e}")),
            }
        }
        if !failed.is_empty() {
            log::warn(&format!("the sweep could not delete {} e2b sandbox(es): {}", failed.len(), failed.join("; ")));
        }
        Ok(deleted)
    }

    fn run_snippet(language: String, code: String, limits: Limits) -> Result<(SnippetResult, Evidence), RunError> {
        snippet(&language, &code, &limits)
    }

    fn run_project(
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
    ) -> Result<(ProjectResult, Evidence), RunError> {
        project(&files, &steps, &artifacts, &limits)
    }

    fn run_module(_request: ModuleRequest, _limits: Limits) -> Result<(ModuleResult, Evidence), RunError> {
        Err(RunError::Refused(refused(RefusalReason::Unsupported, "the e2b provider does not run module tables")))
    }
}

export!(Plugin);

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn a_quoted_path_is_one_word_whatever_it_holds() {
        assert_eq!(shell_quote("/home/user/project/a b"), "'/home/user/project/a b'");
        assert_eq!(shell_quote("it's $(x)"), "'it'\\''s $(x)'");
    }
}
