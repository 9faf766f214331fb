//! dockercloud sessions: one sandbox kept for many calls, served by the session
//! agent from the sandbox image's programs. Docker's exec takes no input at
//! all, so every request is written to a file first and the exec reads it from
//! there ([`plimsoll_plugin_agent::relayed`]): the first starts the agent
//! (`plimsoll-agent listen`, in the guest's `/tmp`), every later one relays to
//! it. Each exec runs under `timeout -s KILL` as a run's commands do, since
//! Docker's exec has no time limit of its own, with a fresh endpoint
//! credential when the one held would end within the call.
//!
//! Before each call the sandbox and its effective network policy are read back
//! as at its create: a sandbox gone, no longer running, or changed, or a policy
//! that allows more, ends the session as `sandbox_changed` before anything runs.
//!
//! Grants: a session opened with a grant is created as a granted run's sandbox
//! is (its one way out the host's guard, bound by its inline network policy),
//! and every process of it holds the grant. Docker binds a sandbox's policy at
//! its create and takes no change to it afterwards, so a call cannot open the
//! guard for itself: a call naming its own grant is refused `unsupported`.

use std::time::{Duration, Instant};

use plimsoll_plugin_agent::relayed::{Done, ExecChannel, Execs};
use plimsoll_plugin_agent::runner::MemorySource;
use plimsoll_plugin_agent::session::{self as agent, Agent};
use plimsoll_plugin_remote::{Remote, shell_quote};

use crate::exports::plimsoll::provider::provider::{Answer, CallError, Grant, GuestSession, Session};
use crate::plimsoll::types::types::{Evidence, File, Limits, Refusal, RefusalReason};
use crate::{
    LIFETIME_MARGIN_S, ReadBack, Sandbox, api, guard_grant, refused, session_cell, session_language,
    session_runner_project, session_snippet,
};

/// The session's work directory, under `/tmp`, writable for any image's user.
const WORK: &str = "/tmp/plimsoll/work";
/// What a step of a session's project sees of its environment.
const GUEST_ENV: [&str; 3] = ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"];

impl Execs for Sandbox {
    /// One exec of `argv`, killed at `deadline` in the guest.
    fn exec(&self, argv: Vec<String>, _stdin: &[u8], deadline: Instant, cap: usize) -> Result<Done, String> {
        let script: Vec<String> = argv.iter().map(|w| shell_quote(w)).collect();
        let ran = self.run_bare(&format!("exec {}", script.join(" ")), "/", deadline, cap)?;
        Ok(Done {
            exit_code: (!ran.timed_out).then_some(ran.exit_code),
            stdout: ran.stdout.bytes,
            stderr: ran.stderr.bytes,
        })
    }

    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        Remote::upload(self, path, bytes)
    }

    /// Docker's exec takes no input: every request is staged in a file.
    fn max_stdin(&self) -> usize {
        0
    }

    fn exports(&self) -> &str {
        &self.exports
    }
}

/// One session: its sandbox (deleted when dropped), served by the agent.
pub struct DockercloudSession {
    agent: Agent<ExecChannel<Sandbox>>,
    memory_mib: u32,
}

impl DockercloudSession {
    /// Creates and reads back the session's sandbox for its whole lifetime,
    /// with `grant` its one way out, and starts the agent in it.
    fn open(
        limits: &Limits,
        lifetime_s: u32,
        grant: Option<&crate::GuardGrant>,
    ) -> Result<DockercloudSession, Refusal> {
        let disk_mb = agent::disk_budget(limits.disk_mb).map_err(|e| refused(RefusalReason::Environment, e))?;
        let lifetime = Duration::from_secs(u64::from(lifetime_s));
        let sandbox = Sandbox::open(lifetime, grant)?;
        let memory_mib = sandbox.settings.memory_mib;
        let uid = sandbox.uid.clone();
        let agent = Agent::start(ExecChannel::new(sandbox, WORK), disk_mb).map_err(|e| {
            refused(
                RefusalReason::Environment,
                format!(
                    "the session agent did not start in dockercloud sandbox {uid} ({e}); sessions need an image with the sandbox image's programs under /opt/plimsoll (docs/providers/dockercloud.md)"
                ),
            )
        })?;
        Ok(DockercloudSession { agent, memory_mib })
    }

    fn sandbox(&self) -> &Sandbox {
        self.agent.channel().sandbox()
    }

    /// Reads the sandbox and its effective policy back before a call: refused
    /// when Docker does not answer (the session goes on), ended when the
    /// sandbox is gone, stopped or changed.
    fn check(&self) -> Result<(), CallError> {
        let sandbox = self.sandbox();
        let back = ReadBack { place: "dockercloud sandbox" };
        let (read, _) =
            api::get(&sandbox.uid).map_err(|e| back.unanswered("the sandbox", e))?.ok_or_else(|| back.gone())?;
        match api::running(&read) {
            Ok(true) => {}
            Ok(false) => return Err(back.changed("it is no longer running".into())),
            Err(e) => return Err(back.changed(e)),
        }
        sandbox.verify(&read).map_err(|e| back.changed(e))?;
        let policy = api::policy(&sandbox.uid).map_err(|e| back.unanswered("its network policy", e))?;
        api::denies_all(&policy, sandbox.allow.as_deref()).map_err(|e| back.changed(e))
    }
}

/// A call naming its own grant, which Docker's policy bound at the create cannot admit.
fn no_call_grant(grant: Option<Grant>) -> Result<(), CallError> {
    match guard_grant(grant).map_err(CallError::Refused)? {
        None => Ok(()),
        Some(_) => Err(CallError::Refused(refused(
            RefusalReason::Unsupported,
            "Docker binds a dockercloud sandbox's network policy at its create, so a session's call cannot open the guard for itself; open the session with the grant",
        ))),
    }
}

impl GuestSession for DockercloudSession {
    /// With a grant, the sandbox is created with the guard its one way out and
    /// every process of the session holds the grant's client.
    fn open(limits: Limits, lifetime_s: u32, grant: Option<Grant>) -> Result<Session, Refusal> {
        let grant = guard_grant(grant)?;
        let lifetime_s = lifetime_s.saturating_add(LIFETIME_MARGIN_S);
        DockercloudSession::open(&limits, lifetime_s, grant.as_ref()).map(Session::new)
    }

    fn evidence(&self) -> Evidence {
        self.sandbox().evidence()
    }

    fn cell(&self, language: String, code: String, files: Vec<File>, limits: Limits) -> Result<Answer, CallError> {
        session_language("dockercloud", &language)?;
        self.check()?;
        session_cell(&self.agent, (&language, &code, &files), &limits, self.memory_mib)
    }

    fn snippet(
        &self,
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        no_call_grant(grant)?;
        session_language("dockercloud", &language)?;
        self.check()?;
        session_snippet(&self.agent, (&language, &code), &[], &limits)
    }

    fn project(
        &self,
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        no_call_grant(grant)?;
        self.check()?;
        // A microVM's own memory accounting, which the runner keeps a step under.
        let memory = (self.memory_mib, MemorySource::Meminfo);
        // Each step gets the guest's variables and a granted session's client's.
        let env: Vec<&str> =
            GUEST_ENV.iter().copied().chain(self.sandbox().client_env.iter().map(String::as_str)).collect();
        session_runner_project(&self.agent, (&files, &steps, &artifacts), &limits, memory, (&env, Some(WORK)))
    }

    /// Docker's sandboxes can be stopped, which ends their processes: an idle
    /// session's sandbox keeps running instead.
    fn suspend(&self) -> Result<bool, String> {
        Ok(false)
    }

    fn close(&self) {
        // Deleting the sandbox is the sandbox's drop, when the host drops this.
    }
}
