//! The dockercloud provider plugin. It drives Docker Cloud Sandboxes over their
//! documented REST API only through the host's `plimsoll:host/http` capability,
//! at two endpoints the host maps: `api` (the management plane; the host trades
//! the operator's personal access token for a short-lived Hub bearer, attaches it,
//! and keeps each sandbox's scoped endpoint credential out of the answers) and
//! `endpoint` (one host per sandbox; the host attaches that sandbox's credential).
//! The plugin holds no secret.
//!
//! Every run gets a fresh sandbox of the pinned image at the operator's size,
//! stamped with this daemon's instance; read back before any code goes in (this
//! sandbox, running, ours, the pinned image, the size asked, its endpoint where
//! the operator said endpoints are) and its effective network policy read back
//! (deny-all, nothing allowed from any layer); deleted on every path. Every
//! command runs under `timeout -s KILL` with its streams capped in the guest. The
//! tier it states, `vm`, rests on that read-back; the host caps it.

mod api;
mod endpoint;

wit_bindgen::generate!({
    world: "plimsoll:provider/provider-plugin",
    path: ["../../wit/types", "../../wit/host", "../../wit/provider"],
    generate_all,
});

use std::time::{Duration, Instant};

use endpoint::Failed;
use exports::plimsoll::provider::provider::{Answer, CallError, Description, Guest, GuestSession, RunError, Session};
use plimsoll::host::{config, log};
use plimsoll::types::types::{
    Evidence, File, Limits, ModuleRequest, ModuleResult, ProjectOutcome, ProjectResult, Refusal, RefusalReason,
    SnippetResult, StepResult, Tier,
};

/// Where a run's files go: `/tmp` is writable for any image's user.
const RUN_DIR: &str = "/tmp/plimsoll/run";
/// A project's work directory.
const PROJECT_DIR: &str = "/tmp/plimsoll/project";
/// Seconds Docker keeps a sandbox past the run's budget, should every delete be lost.
const LIFETIME_MARGIN_S: u32 = 30;
/// The most artifact bytes read back from one project.
const MAX_ARTIFACT_BYTES: usize = 4 << 20;
/// The longest run: an endpoint credential lives 300 s, and a command must end
/// inside the credential it started with.
const MAX_TIMEOUT_MS: u32 = 270_000;
/// How long a sandbox may take to come up.
const START_WITHIN: Duration = Duration::from_secs(120);
/// A credential is minted again when less than this of its 300 s is left
/// beyond the next call's own time.
const CREDENTIAL_LIFE: Duration = Duration::from_secs(300);
const CREDENTIAL_MARGIN: Duration = Duration::from_secs(20);

struct Plugin;

fn refused(reason: RefusalReason, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

/// The operator's and the host's settings this plugin reads.
struct Settings {
    image: String,
    instance: String,
    endpoint_url: String,
    cpus: u32,
    memory_mib: u32,
}

fn settings() -> Result<Settings, Refusal> {
    let get = |key: &str| config::get(key).filter(|v| !v.is_empty());
    let missing = |what: &str| refused(RefusalReason::Environment, format!("the host gave no {what}"));
    let number = |key: &str| get(key).and_then(|v| v.parse::<u32>().ok()).filter(|n| *n > 0);
    Ok(Settings {
        image: get("image").ok_or_else(|| missing("image"))?,
        instance: get("instance").ok_or_else(|| missing("instance to stamp"))?,
        endpoint_url: get("endpoint-url").ok_or_else(|| missing("endpoint URL"))?,
        cpus: number("cpus").ok_or_else(|| missing("CPU count"))?,
        memory_mib: number("memory-mib").ok_or_else(|| missing("memory size"))?,
    })
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    let _ = getrandom::fill(&mut b);
    hex::encode(b)
}

/// A sandbox of this run; deleted when dropped, whatever happened.
struct Sandbox {
    uid: String,
    image: String,
    /// When the credential the host holds for it was minted.
    minted: std::cell::Cell<Instant>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if let Err(e) = api::delete(&self.uid) {
            log::warn(&format!(
                "deleting dockercloud sandbox {} failed ({e}); Docker deletes it at its own timeout, and the next sweep tries again",
                self.uid
            ));
        }
    }
}

impl Sandbox {
    /// Creates, waits for and reads back a sandbox for a run of `budget`, and
    /// mints its endpoint credential. Nothing of the caller's is in it yet, so
    /// every failure is a refusal.
    fn open(budget: Duration) -> Result<Sandbox, Refusal> {
        let s = settings()?;
        let env = |what: &str, e: String| refused(RefusalReason::Environment, format!("{what}: {e}"));
        let display_name = format!("plimsoll-{}", random_hex(12));
        let lifetime = u32::try_from(budget.as_secs()).unwrap_or(u32::MAX).saturating_add(LIFETIME_MARGIN_S);
        let wanted = api::Wanted {
            display_name: &display_name,
            image: &s.image,
            cpus: s.cpus,
            memory_mib: s.memory_mib,
            lifetime_s: lifetime,
            instance: &s.instance,
        };
        let uid = api::create(&wanted).map_err(|e| env("creating a dockercloud sandbox", e))?;
        let sandbox = Sandbox { uid, image: s.image.clone(), minted: std::cell::Cell::new(Instant::now()) };
        let until = Instant::now() + START_WITHIN;
        let read = loop {
            let (v, _) =
                api::get(&sandbox.uid).map_err(|e| env("reading the dockercloud sandbox back", e))?.ok_or_else(
                    || refused(RefusalReason::Environment, "the dockercloud sandbox vanished while starting"),
                )?;
            match api::running(&v) {
                Ok(true) => break v,
                Ok(false) if Instant::now() < until => std::thread::sleep(Duration::from_millis(250)),
                Ok(false) => {
                    return Err(refused(
                        RefusalReason::Environment,
                        format!("the dockercloud sandbox did not start within {} s", START_WITHIN.as_secs()),
                    ));
                }
                Err(e) => return Err(refused(RefusalReason::Environment, e)),
            }
        };
        let expected = api::Expected {
            uid: &sandbox.uid,
            display_name: &display_name,
            image: &s.image,
            cpus: s.cpus,
            memory_mib: s.memory_mib,
            instance: &s.instance,
            endpoint_url: &s.endpoint_url,
        };
        let isolation = |e: String| {
            refused(RefusalReason::Isolation, format!("the dockercloud sandbox is not what was asked: {e}"))
        };
        api::verify(&read, &expected).map_err(isolation)?;
        let policy = api::policy(&sandbox.uid).map_err(|e| env("reading the sandbox's network policy", e))?;
        api::denies_all(&policy).map_err(isolation)?;
        sandbox.mint().map_err(|e| env("minting the sandbox's endpoint credential", e))?;
        Ok(sandbox)
    }

    fn mint(&self) -> Result<(), String> {
        api::mint(&self.uid)?;
        self.minted.set(Instant::now());
        Ok(())
    }

    /// Mints a fresh credential when the one held might end within `need`.
    fn fresh_for(&self, need: Duration) -> Result<(), String> {
        if self.minted.get().elapsed() + need + CREDENTIAL_MARGIN >= CREDENTIAL_LIFE {
            self.mint()?;
        }
        Ok(())
    }

    /// Runs `script` in `cwd` until `deadline`, with a fresh credential, and once
    /// more when the endpoint turned the first away at the door.
    fn run(&self, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<endpoint::Ran, String> {
        self.fresh_for(deadline.saturating_duration_since(Instant::now()))?;
        match endpoint::run(&self.uid, script, cwd, deadline, max_output) {
            Ok(ran) => Ok(ran),
            Err(Failed::Door(_)) => {
                self.mint()?;
                endpoint::run(&self.uid, script, cwd, deadline, max_output).map_err(|f| match f {
                    Failed::Door(e) | Failed::Other(e) => e,
                })
            }
            Err(Failed::Other(e)) => Err(e),
        }
    }

    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        self.fresh_for(Duration::from_secs(60))?;
        match endpoint::upload(&self.uid, path, bytes) {
            Ok(()) => Ok(()),
            Err(Failed::Door(_)) => {
                self.mint()?;
                endpoint::upload(&self.uid, path, bytes).map_err(|f| match f {
                    Failed::Door(e) | Failed::Other(e) => e,
                })
            }
            Err(Failed::Other(e)) => Err(e),
        }
    }

    fn evidence(&self) -> Evidence {
        Evidence {
            tier: Tier::Vm,
            environment: format!("dockercloud-image:{}", self.image),
            software_identity: None,
            instance: Some(format!("dockercloud-sandbox:{}", self.uid)),
            claims: vec![],
        }
    }
}

fn budget(limits: &Limits) -> Duration {
    Duration::from_millis(u64::from(limits.timeout_ms.clamp(1, MAX_TIMEOUT_MS)))
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
                format!("the dockercloud provider runs javascript and python, not {other}"),
            )));
        }
    };
    let budget = budget(limits);
    let sandbox = Sandbox::open(budget).map_err(RunError::Refused)?;
    sandbox
        .upload(&format!("{RUN_DIR}/{file}"), code.as_bytes())
        .map_err(|e| may_have_run("writing the snippet", e))?;
    // The budget counts from when the code is in place and starts.
    let ran = sandbox
        .run(command, RUN_DIR, Instant::now() + budget, limits.max_output_bytes as usize)
        .map_err(|e| may_have_run("running the snippet", e))?;
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
    let sandbox = Sandbox::open(budget).map_err(RunError::Refused)?;
    let deadline = Instant::now() + budget;
    for f in files {
        sandbox
            .upload(&format!("{PROJECT_DIR}/{}", f.path), &f.content)
            .map_err(|e| may_have_run(&format!("writing {}", f.path), e))?;
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
        let ran = sandbox
            .run(step, PROJECT_DIR, deadline, limits.max_output_bytes as usize)
            .map_err(|e| may_have_run(&format!("running step {step:?}"), e))?;
        let (failed, timed_out) = (ran.exit_code != 0, ran.timed_out);
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

/// Reads the artifacts back: each path resolved in the guest first, and one whose
/// real path leaves the project directory (a link out) not read, as the docker
/// runner does not read one; Docker's download refuses a link out of its own jail
/// besides.
fn read_artifacts(sandbox: &Sandbox, artifacts: &[String]) -> Result<(Vec<File>, bool), RunError> {
    if artifacts.is_empty() {
        return Ok((Vec::new(), false));
    }
    let mut script = String::from("for a in");
    for a in artifacts {
        script.push(' ');
        script.push_str(&shell_quote(&format!("{PROJECT_DIR}/{a}")));
    }
    script.push_str("; do printf '%s\\0' \"$(realpath -e -- \"$a\" 2>/dev/null)\"; done");
    let resolved = sandbox
        .run(&script, "/", Instant::now() + Duration::from_secs(30), 1 << 20)
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
        sandbox.fresh_for(Duration::from_secs(60)).map_err(|e| may_have_run("minting a credential", e))?;
        let Some(bytes) =
            endpoint::download(&sandbox.uid, real).map_err(|e| may_have_run(&format!("reading artifact {path}"), e))?
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
    let sandbox = Sandbox::open(Duration::from_secs(120))?;
    let fail = |check: &str, why: String| refused(RefusalReason::Environment, format!("smoke test, {check}: {why}"));
    let run = |script: &str| {
        sandbox
            .run(script, RUN_DIR, Instant::now() + Duration::from_secs(20), 64 << 10)
            .map_err(|e| fail(script, e))
            .map(|r| (r.exit_code, String::from_utf8_lossy(&r.stdout.bytes).trim().to_string()))
    };
    sandbox.upload(&format!("{RUN_DIR}/probe.txt"), b"probe").map_err(|e| fail("upload", e))?;
    let (code, cwd) = run("pwd && cat probe.txt")?;
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
    log::info(&format!("smoke test passed in dockercloud sandbox {}: node {node}, python, no egress", sandbox.uid));
    Ok(sandbox.evidence())
}

/// Sessions are not offered: `describe` says so, and the host never opens one.
struct NoSession;

impl GuestSession for NoSession {
    fn open(_: Limits, _: u32) -> Result<Session, Refusal> {
        Err(refused(RefusalReason::Unsupported, "the dockercloud provider does not keep sessions"))
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
        Err(CallError::Refused(refused(RefusalReason::Unsupported, "the dockercloud provider does not keep sessions")))
    }

    fn snippet(&self, _: String, _: String, _: Limits) -> Result<Answer, CallError> {
        Err(CallError::Refused(refused(RefusalReason::Unsupported, "the dockercloud provider does not keep sessions")))
    }

    fn project(&self, _: Vec<File>, _: Vec<String>, _: Vec<String>, _: Limits) -> Result<Answer, CallError> {
        Err(CallError::Refused(refused(RefusalReason::Unsupported, "the dockercloud provider does not keep sessions")))
    }

    fn close(&self) {}
}

impl Guest for Plugin {
    type Session = NoSession;

    fn describe() -> Description {
        Description {
            name: "dockercloud".into(),
            languages: vec!["javascript".into(), "python".into()],
            projects: true,
            modules: false,
            sessions: false,
            max_timeout_ms: MAX_TIMEOUT_MS,
            max_project_timeout_ms: MAX_TIMEOUT_MS,
        }
    }

    fn preflight() -> Result<Evidence, Refusal> {
        let s = settings()?;
        Ok(Evidence {
            tier: Tier::Vm,
            environment: format!("dockercloud-image:{}", s.image),
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
        for uid in api::stamped(&s.instance)? {
            if keep.contains(&uid) {
                continue;
            }
            match api::delete(&uid) {
                Ok(()) => deleted.push(uid),
                Err(e) => failed.push(format!("{uid}: {e}")),
            }
        }
        if !failed.is_empty() {
            log::warn(&format!(
                "the sweep could not delete {} dockercloud sandbox(es): {}",
                failed.len(),
                failed.join("; ")
            ));
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
        Err(RunError::Refused(refused(
            RefusalReason::Unsupported,
            "the dockercloud provider does not run module tables",
        )))
    }
}

export!(Plugin);

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn a_quoted_path_is_one_word_whatever_it_holds() {
        assert_eq!(shell_quote("/tmp/plimsoll/project/a b"), "'/tmp/plimsoll/project/a b'");
        assert_eq!(shell_quote("it's $(x)"), "'it'\\''s $(x)'");
    }
}
