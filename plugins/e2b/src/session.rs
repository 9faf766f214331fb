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
//! The template must carry the sandbox image's programs under `/opt/plimsoll`
//! and a `/work` the guest owns; an open says so when it does not.

use std::time::Duration;

use plimsoll_plugin_agent::session::{self as agent, Agent, Channel};
use plimsoll_plugin_remote::random_hex;

use crate::exports::plimsoll::provider::provider::{Answer, CallError, Ending, GuestSession, Session, SessionEnd};
use crate::plimsoll::types::types::{Evidence, File, Limits, Refusal, RefusalReason};
use crate::{
    GUEST_ENV, Sandbox, api, envd, refused, report_key, runner, runner_plan, session_cell, session_language,
    session_project, session_snippet,
};

/// The resident session agent, as the sandbox image installs it.
const AGENT: &str = "/opt/plimsoll/plimsoll-agent";
/// The session's work directory: every call's relative paths land here.
const WORK: &str = "/work";
/// How long the agent may take to start and say so.
const AGENT_START: Duration = Duration::from_secs(30);
/// The smallest session disk budget: the interpreters need room to start.
const MIN_DISK_MB: u32 = 16;

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
}

fn ended(end: SessionEnd, detail: String) -> CallError {
    CallError::Ended(Ending { end, detail })
}

impl E2bSession {
    /// Creates the session's sandbox, reads it back, and starts the agent in it.
    fn open(limits: &Limits, lifetime_s: u32) -> Result<E2bSession, Refusal> {
        let disk_mb = if limits.disk_mb == 0 { 1024 } else { limits.disk_mb };
        if disk_mb < MIN_DISK_MB {
            return Err(refused(
                RefusalReason::Environment,
                format!("a session disk budget of {disk_mb} MiB is below the {MIN_DISK_MB} MiB a session needs"),
            ));
        }
        // The session's storage budget is the agent's to enforce, not a maximum
        // of E2B's disk: only memory and CPUs are held to the operator's maxima.
        let asked = Limits { disk_mb: 0, ..*limits };
        let sandbox = Sandbox::open(&asked, Duration::from_secs(u64::from(lifetime_s)))?;
        let word = random_hex(16);
        let pid = envd::start_serving(&sandbox.id, &[AGENT, "attach", &word], WORK, &word, AGENT_START).map_err(|e| {
            refused(
                RefusalReason::Environment,
                format!(
                    "the session agent did not start in the e2b sandbox ({e}); sessions need a template with the sandbox image's programs under /opt/plimsoll and a /work the guest owns (docs/providers/e2b.md)"
                ),
            )
        })?;
        let channel = Envd { id: sandbox.id.clone(), pid };
        let agent = Agent::start(channel, disk_mb).map_err(|e| refused(RefusalReason::Environment, e))?;
        Ok(E2bSession { agent, sandbox })
    }

    /// The sandbox's memory, as its read-back gave it.
    fn memory_mb(&self) -> u32 {
        u32::try_from(self.sandbox.memory_mb).unwrap_or(u32::MAX)
    }

    /// Reads the sandbox back before a call: refused when E2B does not answer
    /// (the session goes on), ended when the sandbox is gone or changed.
    fn check(&self) -> Result<(), CallError> {
        let id = &self.sandbox.id;
        match api::read_back(id) {
            Ok(Some(v)) => self.sandbox.verify(&v).map_err(|e| {
                ended(
                    SessionEnd::SandboxChanged,
                    format!("the session's e2b sandbox changed since it was opened ({e}); nothing ran"),
                )
            }),
            Ok(None) => Err(ended(SessionEnd::SandboxChanged, "the session's e2b sandbox is gone; nothing ran".into())),
            Err(e) => Err(CallError::Refused(refused(
                RefusalReason::Environment,
                format!("reading the session's e2b sandbox back failed ({e}); nothing ran"),
            ))),
        }
    }
}

impl GuestSession for E2bSession {
    fn open(limits: Limits, lifetime_s: u32) -> Result<Session, Refusal> {
        E2bSession::open(&limits, lifetime_s).map(Session::new)
    }

    fn evidence(&self) -> Evidence {
        self.sandbox.evidence()
    }

    fn cell(&self, language: String, code: String, files: Vec<File>, limits: Limits) -> Result<Answer, CallError> {
        session_language("e2b", &language)?;
        self.check()?;
        session_cell(&self.agent, (&language, &code, &files), &limits, self.memory_mb())
    }

    fn snippet(&self, language: String, code: String, limits: Limits) -> Result<Answer, CallError> {
        session_language("e2b", &language)?;
        self.check()?;
        session_snippet(&self.agent, &language, &code, &limits)
    }

    fn project(
        &self,
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
    ) -> Result<Answer, CallError> {
        self.check()?;
        let key = report_key().map_err(CallError::Refused)?;
        // The runner ends a step before the sandbox's memory runs out, so the kept
        // interpreters and the agent live on; it reads the use from the cgroup
        // where the sandbox has one of its own, else sums the guest's processes.
        let memory = (self.memory_mb(), runner::MemorySource::Cgroup);
        let plan = runner_plan((&files, &steps, &artifacts), &limits, memory, 0, (&GUEST_ENV, None), &key);
        session_project(&self.agent, (plan, steps.len()), &limits, &key)
    }

    fn close(&self) {
        // Deleting the sandbox is the sandbox's drop, when the host drops this.
    }
}
