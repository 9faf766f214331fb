//! OpenShell sessions: one sandbox kept for many calls, served by the session
//! agent from the sandbox image's programs. OpenShell's exec takes a command's
//! input whole, up front, so the agent cannot be kept attached: the exec that
//! starts it (`plimsoll-agent listen`) carries the first request, which hands it
//! the session key, and the agent answers on that exec's streams and goes into
//! the background, listening on a Unix socket under `/tmp`. Every later call is
//! one exec of `plimsoll-agent relay`, which hands the agent its own streams
//! over the socket: the request arrives on the exec's input and the answer
//! leaves on its output, authenticated exactly as docker's and e2b's
//! (`plimsoll-plugin-agent`). The agent sweeps every process of the guest's but
//! itself, the kept interpreters and what the sandbox had before the session
//! (its main process), writes the call's files, runs it, and walks the guest's
//! storage.
//!
//! Before each call the sandbox and its effective policy are read back as at
//! the create: any difference ends the session as `sandbox_changed` before
//! anything runs. A call's exec is cancelled should the agent outlast the
//! call's budget and its grace; that ends the session.

use std::cell::Cell;
use std::time::{Duration, Instant};

use plimsoll_plugin_agent::session::{self as agent, Agent, Channel};
use plimsoll_plugin_remote::{Remote as _, random_hex};

use crate::exports::plimsoll::provider::provider::{
    Answer, CallError, Ending, Grant, GuestSession, RelayGrant, Session, SessionEnd,
};
use crate::plimsoll::types::types::{Evidence, File, Limits, Refusal, RefusalReason};
use crate::{
    AGENT, STDIN_CHUNK, Sandbox, gateway, refused, runner, session_cell, session_ended_after, session_language,
    session_runner_project, session_snippet, words,
};

/// The session's work directory, under `/tmp`, the only writable directory.
const WORK: &str = "/tmp/plimsoll/work";
/// Where the agent's socket and a large request's staging file go.
const AGENT_DIR: &str = "/tmp/plimsoll";
/// How long a session's forwards and their tokens are kept before the next
/// call renews them: well inside the gateway's token lifetime (1 h by default).
const RENEW_FORWARDS: Duration = Duration::from_secs(20 * 60);
/// What a step of a session's project sees of its environment.
const GUEST_ENV: [&str; 3] = ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"];

/// The agent's channel: one exec per call on the session's sandbox.
struct Gateway {
    sandbox: Sandbox,
    socket: String,
    /// Whether the starting exec has been answered: from then on calls relay.
    started: Cell<bool>,
}

impl Gateway {
    /// The command and input of the exec that carries `request`. A request over
    /// the gateway's message cap is written to a file first, which the exec
    /// opens as its input and unlinks before the relay starts.
    fn exec_for(&self, request: &[u8]) -> Result<(Vec<String>, Vec<u8>), String> {
        if !self.started.get() {
            // A granted session's client settings, which the agent passes on to every process.
            let script = format!(r#"{}mkdir -p -- "$1" && cd -- "$1" && exec "$2" listen "$3""#, self.sandbox.exports);
            return Ok((words(&["sh", "-c", &script, "sh", WORK, AGENT, &self.socket]), request.to_vec()));
        }
        if request.len() <= STDIN_CHUNK {
            return Ok((words(&[AGENT, "relay", &self.socket]), request.to_vec()));
        }
        let staged = format!("{AGENT_DIR}/request-{}", random_hex(8));
        self.sandbox.upload(&staged, request)?;
        let script = r#"exec 0<"$1" && rm -f -- "$1" && exec "$2" relay "$3""#;
        Ok((words(&["sh", "-c", script, "sh", &staged, AGENT, &self.socket]), Vec::new()))
    }
}

impl Channel for Gateway {
    fn converse(&self, request: &[u8], end: &[u8], timeout_ms: u32, cap: u32) -> Result<agent::Reply, String> {
        let (argv, stdin) = self.exec_for(request)?;
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        let cap = (cap as usize).saturating_add(end.len());
        let done = self.sandbox.exec(argv, &stdin, deadline, cap)?;
        let (mut stdout, mut stderr) = (done.stdout, done.stderr);
        let strip = |b: &mut Vec<u8>| {
            let whole = b.ends_with(end);
            if whole {
                b.truncate(b.len() - end.len());
            }
            whole
        };
        let (out_whole, err_whole) = (strip(&mut stdout), strip(&mut stderr));
        let end = match done.exit_code {
            _ if out_whole && err_whole => agent::ReplyEnd::Said,
            None => agent::ReplyEnd::TimedOut,
            Some(_) => agent::ReplyEnd::Ended,
        };
        if end == agent::ReplyEnd::Said {
            self.started.set(true);
        }
        Ok(agent::Reply { end, stdout, stderr })
    }
}

/// One session: its sandbox (deleted when dropped), served by the agent.
pub struct OpenshellSession {
    agent: Agent<Gateway>,
}

fn ended(end: SessionEnd, detail: String) -> CallError {
    CallError::Ended(Ending { end, detail })
}

impl OpenshellSession {
    /// Creates the session's sandbox, reads it back, carries `grant` in (its
    /// relay started before the agent, whose sweep spares what was there
    /// before it), and starts the agent in it.
    fn open(limits: &Limits, lifetime_s: u32, grant: Option<&RelayGrant>) -> Result<OpenshellSession, Refusal> {
        let disk_mb = agent::disk_budget(limits.disk_mb).map_err(|e| refused(RefusalReason::Environment, e))?;
        let sandbox = crate::open(Duration::from_secs(u64::from(lifetime_s)), grant)?;
        let socket = format!("{AGENT_DIR}/agent-{}.sock", random_hex(8));
        let channel = Gateway { sandbox, socket, started: Cell::new(false) };
        let agent = Agent::start(channel, disk_mb).map_err(|e| {
            refused(
                RefusalReason::Environment,
                format!(
                    "the session agent did not start in the openshell sandbox ({e}); sessions need an image with the sandbox image's programs under /opt/plimsoll (docs/providers/openshell.md)"
                ),
            )
        })?;
        Ok(OpenshellSession { agent })
    }

    fn sandbox(&self) -> &Sandbox {
        &self.agent.channel().sandbox
    }

    /// A call naming its own grant, in a session whose relay the host started at
    /// the open to serve each call's: the call's client described beside the
    /// relay's (its routes, its preamble), `call` run, the description removed.
    /// One that will not go ends the session (the host's slot is empty again
    /// anyway, so nothing reaches the broker).
    fn described(&self, g: &RelayGrant, call: impl FnOnce() -> Result<Answer, CallError>) -> Result<Answer, CallError> {
        let sandbox = self.sandbox();
        if !sandbox.relaying() {
            return Err(CallError::Refused(refused(
                RefusalReason::Unsupported,
                "this openshell session was opened without a relay to the broker, so its calls cannot name a grant",
            )));
        }
        if let Err(e) = sandbox.write_call_description(&g.client) {
            let why = format!("describing the call's grant in the session's openshell sandbox failed ({e})");
            return Err(match sandbox.remove_call_description(&g.client) {
                Ok(()) => CallError::Refused(refused(RefusalReason::Environment, format!("{why}; nothing ran"))),
                Err(e) => ended(
                    SessionEnd::BoundaryFailed,
                    format!("{why}, and it could not be removed again ({e}); nothing ran"),
                ),
            });
        }
        let answer = call();
        let Err(e) = sandbox.remove_call_description(&g.client) else { return answer };
        let ending = Ending {
            end: SessionEnd::BoundaryFailed,
            detail: format!(
                "the grant of a call could not be removed from the session's openshell sandbox after it ({e})"
            ),
        };
        session_ended_after(answer, ending)
    }

    /// Reads the sandbox and its effective policy back before a call: refused
    /// when the gateway does not answer (the session goes on), ended when the
    /// sandbox is gone, no longer ready, or changed.
    fn check(&self) -> Result<(), CallError> {
        let sandbox = self.sandbox();
        let unanswered = |what: &str, e: String| {
            CallError::Refused(refused(
                RefusalReason::Environment,
                format!("reading the session's openshell sandbox back failed ({what}: {e}); nothing ran"),
            ))
        };
        let changed = |why: String| {
            ended(
                SessionEnd::SandboxChanged,
                format!("the session's openshell sandbox changed since it was opened ({why}); nothing ran"),
            )
        };
        let read = gateway::get(&sandbox.name).map_err(|e| unanswered("the sandbox", e))?.ok_or_else(|| {
            ended(SessionEnd::SandboxChanged, "the session's openshell sandbox is gone; nothing ran".into())
        })?;
        if read.phase != gateway::READY {
            return Err(changed(format!("it is no longer ready: {}", read.why)));
        }
        if let Some(why) = sandbox.differs(&read) {
            return Err(changed(why));
        }
        let effective = gateway::effective(&sandbox.id).map_err(|e| unanswered("its effective policy", e))?;
        sandbox.policy_differs(&effective).map_or(Ok(()), |why| Err(changed(why)))?;
        sandbox.renew_forwards(RENEW_FORWARDS).map_err(|e| {
            ended(
                SessionEnd::BoundaryFailed,
                format!("renewing the session grant's forwards failed ({e}); nothing ran"),
            )
        })
    }
}

impl GuestSession for OpenshellSession {
    /// With a grant, every process of the session reaches the broker through
    /// the relay, started at the open: the session's grant, or, when the
    /// grant describes no client (the host serves each call's), the grant of
    /// a call that names one, described for that call.
    fn open(limits: Limits, lifetime_s: u32, grant: Option<Grant>) -> Result<Session, Refusal> {
        let grant = crate::relay_grant(grant)?;
        OpenshellSession::open(&limits, lifetime_s, grant.as_ref()).map(Session::new)
    }

    fn evidence(&self) -> Evidence {
        self.sandbox().evidence()
    }

    fn cell(&self, language: String, code: String, files: Vec<File>, limits: Limits) -> Result<Answer, CallError> {
        session_language("openshell", &language)?;
        self.check()?;
        session_cell(&self.agent, (&language, &code, &files), &limits, self.sandbox().memory_mib)
    }

    fn snippet(
        &self,
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        let grant = crate::relay_grant(grant).map_err(CallError::Refused)?;
        session_language("openshell", &language)?;
        self.check()?;
        let snippet = || session_snippet(&self.agent, (&language, &code), &[], &limits);
        match &grant {
            None => snippet(),
            Some(g) => self.described(g, snippet),
        }
    }

    /// The steps reach the broker through the relay started at the open, with
    /// the session's grant or, described for this call, the call's own.
    fn project(
        &self,
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        let grant = crate::relay_grant(grant).map_err(CallError::Refused)?;
        self.check()?;
        // The runner ends a step before the sandbox's memory runs out, so the kept
        // interpreters and the agent live on; the sandbox is a container of its
        // own, whose cgroup the policy lets the guest read.
        let memory = (self.sandbox().memory_mib, runner::MemorySource::Cgroup);
        let project = || {
            session_runner_project(&self.agent, (&files, &steps, &artifacts), &limits, memory, (&GUEST_ENV, Some(WORK)))
        };
        match &grant {
            None => project(),
            Some(g) => self.described(g, project),
        }
    }

    /// OpenShell can only stop a sandbox, which ends its interpreters and empties
    /// its `/tmp`: an idle session's sandbox keeps running instead.
    fn suspend(&self) -> Result<bool, String> {
        Ok(false)
    }

    fn close(&self) {
        // Deleting the sandbox is the sandbox's drop, when the host drops this.
    }
}
