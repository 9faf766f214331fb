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
//! (deny-all, nothing allowed from any layer; a granted run's, exactly the
//! host's guard from the policy bound at its create); deleted on every path.
//! Every command runs under `timeout -s KILL` with its streams capped in the
//! guest. The tier it states, `vm`, rests on that read-back; the host caps it.

mod api;
mod endpoint;
mod session;

wit_bindgen::generate!({
    world: "plimsoll:provider/provider-plugin",
    path: ["../../wit/types", "../../wit/host", "../../wit/provider"],
    generate_all,
});

use std::time::{Duration, Instant};

use endpoint::Failed;
use exports::plimsoll::provider::provider::{Description, Grant, GrantWay, GuardGrant, Guest, RelayGrant, RunError};
use plimsoll::host::{config, log};
use plimsoll::types::types::{
    Evidence, File, Limits, ModuleRequest, ModuleResult, Output, ProjectOutcome, ProjectResult, Refusal, RefusalReason,
    SnippetResult, StepResult, Tier,
};
use plimsoll_plugin_remote::{self as remote, Remote};

/// Where a run's files go: `/tmp` is writable for any image's user.
const RUN_DIR: &str = "/tmp/plimsoll/run";
/// A project's work directory.
const PROJECT_DIR: &str = "/tmp/plimsoll/project";
/// Where a granted run's client goes, outside the run's directories.
const CLIENT_DIR: &str = "/tmp/plimsoll/host";
/// The variable a granted run's client finds its guard credential in: Docker's
/// proxy cannot set a header, so the guest sends its own (it opens the guard to
/// this run's calls and to nothing else, and closes when the run's code ends).
const GUARD_TOKEN_VAR: &str = "PLIMSOLL_HOST_GUARD_TOKEN";
/// Seconds Docker keeps a sandbox past the run's budget, should every delete be lost.
const LIFETIME_MARGIN_S: u32 = 30;
/// The longest run: an endpoint credential lives 300 s, and a command must end
/// inside the credential it started with.
const MAX_TIMEOUT_MS: u32 = 270_000;
/// How long a sandbox may take to come up: inside the host's 30 s of grace
/// past a run's budget, so a slow start is refused by name and still deleted.
const START_WITHIN: Duration = Duration::from_secs(25);
/// A credential is minted again when less than this of its 300 s is left
/// beyond the next call's own time.
const CREDENTIAL_LIFE: Duration = Duration::from_secs(300);
const CREDENTIAL_MARGIN: Duration = Duration::from_secs(20);

struct Plugin;

fn refused(reason: RefusalReason, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

/// The operator's and the host's settings this plugin reads.
#[derive(Clone)]
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
    let number = |key: &str| get(key).and_then(|v| v.parse::<u32>().ok());
    let cpus_milli = number("envelope.cpus-milli").ok_or_else(|| missing("CPU limit"))?;
    let memory_mb = number("envelope.memory-mb").ok_or_else(|| missing("memory limit"))?;
    let (cpus, memory_mib) = size(cpus_milli, memory_mb).map_err(|e| refused(RefusalReason::Environment, e))?;
    Ok(Settings {
        image: get("image").ok_or_else(|| missing("image"))?,
        instance: get("instance").ok_or_else(|| missing("instance to stamp"))?,
        endpoint_url: get("endpoint-url").ok_or_else(|| missing("endpoint URL"))?,
        cpus,
        memory_mib,
    })
}

/// The sizes Docker offers: (CPUs, MiB of memory), micro to xl.
const SIZES: [(u32, u32); 5] = [(1, 2048), (2, 4096), (4, 8192), (8, 16384), (16, 32768)];

/// The size for the operator's `SANDBOX_CPUS` (in thousandths) and
/// `SANDBOX_MEMORY_MB` (0: unset): one of Docker's pairs, micro when neither is set.
fn size(cpus_milli: u32, memory_mb: u32) -> Result<(u32, u32), String> {
    let sizes = || SIZES.iter().map(|(c, m)| format!("{c} CPU(s) with {m} MiB")).collect::<Vec<_>>().join(", ");
    if !cpus_milli.is_multiple_of(1000) {
        return Err(format!(
            "SANDBOX_CPUS={}: dockercloud sandboxes have whole CPUs, in Docker's sizes {}",
            f64::from(cpus_milli) / 1000.0,
            sizes()
        ));
    }
    let cpus = cpus_milli / 1000;
    let fit = SIZES.iter().find(|(c, m)| (cpus == 0 || *c == cpus) && (memory_mb == 0 || *m == memory_mb));
    match (cpus, memory_mb, fit) {
        (0, 0, _) => Ok(SIZES[0]),
        (_, _, Some(&pair)) => Ok(pair),
        _ => Err(format!(
            "SANDBOX_CPUS={cpus} with SANDBOX_MEMORY_MB={memory_mb} is not a size Docker offers; use one of {}",
            sizes()
        )),
    }
}

/// A sandbox of this run; deleted when dropped, whatever happened.
struct Sandbox {
    uid: String,
    image: String,
    /// What it was created as, which every read-back holds it to.
    display_name: String,
    settings: Settings,
    /// The one host its network policy lets it reach (a granted run's guard).
    allow: Option<String>,
    /// When the credential the host holds for it was minted.
    minted: std::cell::Cell<Instant>,
    /// What every command of a granted run exports first (its client's settings).
    exports: String,
    /// The same settings as `NAME=VALUE`, for a session project's steps.
    client_env: Vec<String>,
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
    /// mints its endpoint credential; with `grant`, one whose only way out is the
    /// host's guard, with the grant's client written in. Nothing of the caller's
    /// is in it yet, so every failure is a refusal.
    fn open(budget: Duration, grant: Option<&GuardGrant>) -> Result<Sandbox, Refusal> {
        let s = settings()?;
        let env = |what: &str, e: String| refused(RefusalReason::Environment, format!("{what}: {e}"));
        let display_name = format!("plimsoll-{}", remote::random_hex(12));
        let lifetime = u32::try_from(budget.as_secs()).unwrap_or(u32::MAX).saturating_add(LIFETIME_MARGIN_S);
        let wanted = api::Wanted {
            display_name: &display_name,
            image: &s.image,
            cpus: s.cpus,
            memory_mib: s.memory_mib,
            lifetime_s: lifetime,
            instance: &s.instance,
            allow: grant.map(|g| g.host.as_str()),
        };
        let uid = api::create(&wanted).map_err(|e| env("creating a dockercloud sandbox", e))?;
        let mut sandbox = Sandbox {
            uid,
            image: s.image.clone(),
            display_name: display_name.clone(),
            allow: wanted.allow.map(str::to_string),
            settings: s.clone(),
            minted: std::cell::Cell::new(Instant::now()),
            exports: String::new(),
            client_env: Vec::new(),
        };
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
        let isolation = |e: String| {
            refused(RefusalReason::Isolation, format!("the dockercloud sandbox is not what was asked: {e}"))
        };
        sandbox.verify(&read).map_err(isolation)?;
        let policy = api::policy(&sandbox.uid).map_err(|e| env("reading the sandbox's network policy", e))?;
        api::denies_all(&policy, wanted.allow).map_err(isolation)?;
        sandbox.mint().map_err(|e| env("minting the sandbox's endpoint credential", e))?;
        if let Some(g) = grant {
            let client = g.client.iter().map(|f| (f.path.as_str(), f.content.as_slice()));
            let vars: Vec<(String, String)> =
                g.env.iter().cloned().chain([(GUARD_TOKEN_VAR.to_string(), g.credential.clone())]).collect();
            sandbox.client_env = vars.iter().map(|(k, v)| format!("{k}={}", v.replace("{dir}", CLIENT_DIR))).collect();
            sandbox.exports =
                sandbox.install_client(CLIENT_DIR, client, vars).map_err(|e| refused(RefusalReason::Environment, e))?;
        }
        Ok(sandbox)
    }

    /// Holds a read-back of this sandbox to what was asked at its create.
    fn verify(&self, read: &serde_json::Value) -> Result<(), String> {
        let s = &self.settings;
        let expected = api::Expected {
            uid: &self.uid,
            display_name: &self.display_name,
            image: &s.image,
            cpus: s.cpus,
            memory_mib: s.memory_mib,
            instance: &s.instance,
            endpoint_url: &s.endpoint_url,
        };
        api::verify(read, &expected)
    }

    /// Runs `script` as [`Remote::run`] does, without the grant's exports.
    fn run_bare(&self, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<remote::Ran, String> {
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

impl Remote for Sandbox {
    /// With a fresh credential, and once more when the endpoint turned the first
    /// away at the door.
    fn run(&self, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<remote::Ran, String> {
        self.run_bare(&remote::exported(&self.exports, script), cwd, deadline, max_output)
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

    fn download(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        self.fresh_for(Duration::from_secs(60))?;
        endpoint::download(&self.uid, path)
    }

    /// The wrapper makes the work directory of every command.
    fn make_dir(&self, _: &str) -> Result<(), String> {
        Ok(())
    }

    /// Nothing the steps left may swap a path between its check and its read.
    fn before_artifacts(&self) -> &'static str {
        remote::KILL_THE_REST
    }
}

fn budget(limits: &Limits) -> Duration {
    Duration::from_millis(u64::from(limits.timeout_ms.clamp(1, MAX_TIMEOUT_MS)))
}

fn snippet(
    language: &str,
    code: &str,
    limits: &Limits,
    grant: Option<&GuardGrant>,
) -> Result<(SnippetResult, Evidence), RunError> {
    let open = |b| Sandbox::open(b, grant);
    snippet_on(language, code, limits, budget(limits), RUN_DIR, open, |s| s.evidence())
}

fn project(
    (files, steps, artifacts): (&[File], &[String], &[String]),
    limits: &Limits,
    grant: Option<&GuardGrant>,
) -> Result<(ProjectResult, Evidence), RunError> {
    let open = |b| Sandbox::open(b, grant);
    project_on((files, steps, artifacts), limits, budget(limits), PROJECT_DIR, open, |s| s.evidence())
}

/// The behavioural proof at startup: a real sandbox, read back, runs node and
/// python in its directory, and reaches nothing outside.
fn smoke() -> Result<Evidence, Refusal> {
    let sandbox = Sandbox::open(Duration::from_secs(120), None)?;
    let node = remote::smoke(&sandbox, RUN_DIR)
        .map_err(|(check, why)| refused(RefusalReason::Environment, format!("smoke test, {check}: {why}")))?;
    log::info(&format!("smoke test passed in dockercloud sandbox {}: node {node}, python, no egress", sandbox.uid));
    Ok(sandbox.evidence())
}

plimsoll_plugin_remote::wit_glue!("dockercloud");
plimsoll_plugin_agent::session_glue!();
plimsoll_plugin_remote::grant_ways!("dockercloud");

impl Guest for Plugin {
    type Session = session::DockercloudSession;

    fn describe() -> Description {
        Description {
            name: "dockercloud".into(),
            languages: vec!["javascript".into(), "python".into()],
            projects: true,
            modules: false,
            sessions: true,
            grants: GrantWay::Guard,
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
        let (deleted, failed) = remote::sweep(api::stamped(&s.instance)?, &keep, api::delete);
        if !failed.is_empty() {
            log::warn(&format!(
                "the sweep could not delete {} dockercloud sandbox(es): {}",
                failed.len(),
                failed.join("; ")
            ));
        }
        Ok(deleted)
    }

    fn release(targets: Vec<String>) -> Vec<String> {
        remote::release("dockercloud", targets, api::delete, log::warn)
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
        Err(RunError::Refused(refused(
            RefusalReason::Unsupported,
            "the dockercloud provider does not run module tables",
        )))
    }
}

export!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_dockers_pairs_micro_when_unset() {
        assert_eq!(size(0, 0), Ok((1, 2048)));
        assert_eq!(size(2000, 0), Ok((2, 4096)));
        assert_eq!(size(0, 8192), Ok((4, 8192)));
        assert_eq!(size(8000, 16384), Ok((8, 16384)));
        let e = size(1000, 1024).expect_err("no such pair");
        assert!(e.starts_with("SANDBOX_CPUS=1 with SANDBOX_MEMORY_MB=1024 is not a size Docker offers; use one of 1 CPU(s) with 2048 MiB"), "{e}");
        let e = size(1500, 0).expect_err("fraction");
        assert!(e.starts_with("SANDBOX_CPUS=1.5: dockercloud sandboxes have whole CPUs"), "{e}");
    }
}
