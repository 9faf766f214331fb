//! E2B sessions: one sandbox kept for many calls, served by the session agent
//! (`plimsoll-agent attach`, from the sandbox image's programs), which envd
//! starts with its input open. A call is one request written with envd's
//! `SendInput` and its answer read on a `Connect` stream attached to the agent;
//! the agent sweeps every process of the guest's but itself and the kept
//! interpreters before and after the payload, writes the call's files, runs it,
//! and walks the guest's storage. The channel is authenticated
//! (`plimsoll-plugin-agent`): the guest shares the agent's uid, so an answer that
//! fails its MAC ends the session.
//!
//! Before each call the sandbox is read back as at its create (this sandbox,
//! running, ours, within the operator's memory and CPUs, denying all egress):
//! any difference ends the session as `sandbox_changed` before anything runs.
//!
//! Grants reach the broker through the host's guard, two ways. A session opened
//! with a grant is created as a granted run's sandbox is (its one way out the
//! guard, with the header rule carrying the session's credential) and its agent
//! passes the grant's client to every process (a project's steps get it in the
//! runner's plan); the host serves that credential only while a call runs. A
//! snippet or project naming its own grant in a session opened without one
//! opens the way for that call alone: the rule is set with the call's
//! credential (`PUT /sandboxes/{id}/network`, which replaces the rules whole),
//! read back, the call runs with the client's settings, and the
//! rules are set back to deny all and read back; a rule that will not go ends
//! the session (and the call's credential closed when the call ended).
//! The template must carry the sandbox image's programs under `/opt/plimsoll`
//! and a `/work` the guest owns; an open says so when it does not.

use std::time::{Duration, Instant};

use plimsoll_plugin_agent::session::{self as agent, Agent, Channel};
use plimsoll_plugin_remote::random_hex;

use crate::exports::plimsoll::provider::provider::{
    Answer, CallError, Ending, Grant, GuardGrant, GuestSession, Session, SessionEnd,
};
use crate::plimsoll::types::types::{Evidence, File, Limits, Refusal, RefusalReason};
use crate::{
    GUEST_ENV, LIFETIME_MARGIN_S, Sandbox, api, api_guard, envd, log, refused, runner, session_cell,
    session_ended_after, session_language, session_runner_project, session_snippet,
};

/// The resident session agent, as the sandbox image installs it.
const AGENT: &str = "/opt/plimsoll/plimsoll-agent";
/// The session's work directory: every call's relative paths land here.
const WORK: &str = "/work";
/// How long the agent may take to start and say so.
const AGENT_START: Duration = Duration::from_secs(30);

/// The agent's channel: envd's input to its process and a stream attached to it.
struct Envd {
    id: String,
    pid: u32,
}

impl Channel for Envd {
    fn converse(&self, request: &[u8], end: &[u8], timeout_ms: u32, cap: u32) -> Result<agent::Reply, String> {
        let timeout = Duration::from_millis(u64::from(timeout_ms));
        let (said, stdout, stderr) = envd::converse(&self.id, self.pid, request, end, timeout, cap as usize)?;
        let end = match said {
            envd::Said::Whole => agent::ReplyEnd::Said,
            envd::Said::TimedOut => agent::ReplyEnd::TimedOut,
            envd::Said::Ended => agent::ReplyEnd::Ended,
        };
        Ok(agent::Reply { end, stdout, stderr })
    }
}

/// One session: its sandbox (deleted when dropped), served by the agent.
pub struct E2bSession {
    agent: Agent<Envd>,
    sandbox: Sandbox,
    /// When the sandbox's timeout, set at its create, runs out; a resume sets
    /// what is left of it again.
    ends: Instant,
}

fn ended(end: SessionEnd, detail: String) -> CallError {
    CallError::Ended(Ending { end, detail })
}

impl E2bSession {
    /// Creates the session's sandbox, reads it back, and starts the agent in it;
    /// with `grant`, the agent and every process it starts hold that grant.
    fn open(limits: &Limits, lifetime_s: u32, grant: Option<&GuardGrant>) -> Result<E2bSession, Refusal> {
        let disk_mb = agent::disk_budget(limits.disk_mb).map_err(|e| refused(RefusalReason::Environment, e))?;
        // The session's storage budget is the agent's to enforce, not a maximum
        // of E2B's disk: only memory and CPUs are held to the operator's maxima.
        let asked = Limits { disk_mb: 0, ..*limits };
        let lifetime = Duration::from_secs(u64::from(lifetime_s));
        let ends = Instant::now() + lifetime + Duration::from_secs(u64::from(LIFETIME_MARGIN_S));
        let sandbox = Sandbox::open(&asked, lifetime, grant)?;
        let word = random_hex(16);
        let argv = [AGENT, "attach", &word];
        let pid = envd::start_serving(&sandbox.id, &argv, (WORK, &sandbox.env), &word, AGENT_START).map_err(|e| {
            refused(
                RefusalReason::Environment,
                format!(
                    "the session agent did not start in the e2b sandbox ({e}); sessions need a template with the sandbox image's programs under /opt/plimsoll and a /work the guest owns (docs/providers/e2b.md)"
                ),
            )
        })?;
        let channel = Envd { id: sandbox.id.clone(), pid };
        let agent = Agent::start(channel, disk_mb).map_err(|e| refused(RefusalReason::Environment, e))?;
        Ok(E2bSession { agent, sandbox, ends })
    }

    /// The sandbox's memory, as its read-back gave it.
    fn memory_mb(&self) -> u32 {
        u32::try_from(self.sandbox.memory_mb).unwrap_or(u32::MAX)
    }

    /// Reads the sandbox back before a call, resuming it first when it is paused:
    /// refused when E2B does not answer (the session goes on), ended when the
    /// sandbox is gone or changed.
    fn check(&self) -> Result<(), CallError> {
        let id = &self.sandbox.id;
        let unanswered = |what: &str, e: String| {
            CallError::Refused(refused(
                RefusalReason::Environment,
                format!("{what} the session's e2b sandbox failed ({e}); nothing ran"),
            ))
        };
        let mut read = api::read_back(id).map_err(|e| unanswered("reading back", e))?;
        if read.as_ref().and_then(|v| v.get("state")).and_then(serde_json::Value::as_str) == Some("paused") {
            let left = self.ends.saturating_duration_since(Instant::now()).as_secs().max(1);
            api::resume(id, u32::try_from(left).unwrap_or(u32::MAX)).map_err(|e| unanswered("resuming", e))?;
            read = api::read_back(id).map_err(|e| unanswered("reading back", e))?;
        }
        match read {
            Some(v) => self.sandbox.verify(&v).map_err(|e| {
                ended(
                    SessionEnd::SandboxChanged,
                    format!("the session's e2b sandbox changed since it was opened ({e}); nothing ran"),
                )
            }),
            None => Err(ended(SessionEnd::SandboxChanged, "the session's e2b sandbox is gone; nothing ran".into())),
        }
    }

    /// Sets the sandbox's way out to `guard` (None: deny all) and reads it back.
    fn set_network(&self, guard: Option<&api::Guard>) -> Result<(), String> {
        api::set_network(&self.sandbox.id, guard)?;
        let read = api::detail(&self.sandbox.id)?;
        self.sandbox.verify_with(&read, guard)
    }

    /// A call with its own grant: the guard's rule for this call only, the
    /// client written in, `call` run with the client's settings, the rule removed.
    fn granted(
        &self,
        g: &GuardGrant,
        call: impl FnOnce(&[(String, String)]) -> Result<Answer, CallError>,
    ) -> Result<Answer, CallError> {
        if self.sandbox.guard.is_some() {
            return Err(CallError::Refused(refused(
                RefusalReason::Request,
                "this session holds the grant it was opened with; its calls cannot name another",
            )));
        }
        let close = |why: String| match self.set_network(None) {
            // Back to deny-all and read so: nothing of the caller's ran.
            Ok(()) => CallError::Refused(refused(RefusalReason::Environment, why)),
            Err(e) => ended(
                SessionEnd::SandboxChanged,
                format!("{why}; and its way out could not be closed again ({e}); nothing ran"),
            ),
        };
        let env = self.sandbox.install_client(g).map_err(CallError::Refused)?;
        self.set_network(Some(&api_guard(g)))
            .map_err(|e| close(format!("opening the session's sandbox to the guard for this call failed: {e}")))?;
        let answer = call(&env);
        let Err(e) = self.set_network(None) else { return answer };
        // The guard's rule stayed: the call's credential is closed already, but
        // the sandbox is no longer the one each call is checked against.
        let ending = Ending {
            end: SessionEnd::SandboxChanged,
            detail: format!(
                "the guard's rule could not be taken off the session's e2b sandbox after a granted call ({e})"
            ),
        };
        session_ended_after(answer, ending)
    }
}

impl GuestSession for E2bSession {
    fn open(limits: Limits, lifetime_s: u32, grant: Option<Grant>) -> Result<Session, Refusal> {
        let grant = crate::guard_grant(grant)?;
        E2bSession::open(&limits, lifetime_s, grant.as_ref()).map(Session::new)
    }

    fn evidence(&self) -> Evidence {
        self.sandbox.evidence()
    }

    fn cell(&self, language: String, code: String, files: Vec<File>, limits: Limits) -> Result<Answer, CallError> {
        session_language("e2b", &language)?;
        self.check()?;
        session_cell(&self.agent, (&language, &code, &files), &limits, self.memory_mb())
    }

    fn snippet(
        &self,
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        session_language("e2b", &language)?;
        let grant = crate::guard_grant(grant).map_err(CallError::Refused)?;
        self.check()?;
        let snippet = |env: &[(String, String)]| session_snippet(&self.agent, (&language, &code), env, &limits);
        match &grant {
            None => snippet(&[]),
            Some(g) => self.granted(g, snippet),
        }
    }

    /// The steps get the grant's client as a snippet's process does: the call's
    /// own grant for this call alone, else the one the session was opened with.
    fn project(
        &self,
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        let grant = crate::guard_grant(grant).map_err(CallError::Refused)?;
        self.check()?;
        // The runner ends a step before the sandbox's memory runs out, so the kept
        // interpreters and the agent live on; it reads the use from the cgroup
        // where the sandbox has one of its own, else sums the guest's processes.
        let memory = (self.memory_mb(), runner::MemorySource::Cgroup);
        // Each step gets the guest's variables and the client's, nothing else.
        let project = |client: &[(String, String)]| {
            let env: Vec<String> = GUEST_ENV
                .iter()
                .map(|kv| kv.to_string())
                .chain(client.iter().map(|(k, v)| format!("{k}={v}")))
                .collect();
            let env: Vec<&str> = env.iter().map(String::as_str).collect();
            session_runner_project(&self.agent, (&files, &steps, &artifacts), &limits, memory, (&env, None))
        };
        match &grant {
            None => project(&self.sandbox.env),
            Some(g) => self.granted(g, project),
        }
    }

    /// Pauses the sandbox: its memory (the agent, the kept interpreters) and
    /// files are kept and its compute is not billed; the next call resumes it.
    /// E2B refusing the pause leaves it running, which the log says.
    fn suspend(&self) -> Result<bool, String> {
        match api::pause(&self.sandbox.id) {
            Ok(()) => Ok(true),
            Err(e) => {
                log::warn(&format!("pausing idle session sandbox {} failed ({e}); it keeps running", self.sandbox.id));
                Ok(false)
            }
        }
    }

    fn close(&self) {
        // Deleting the sandbox is the sandbox's drop, when the host drops this.
    }
}
