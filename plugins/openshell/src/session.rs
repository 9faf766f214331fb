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

use std::time::{Duration, Instant};

use plimsoll_plugin_agent::relayed::{Done, ExecChannel, Execs};
use plimsoll_plugin_agent::session::{self as agent, Agent};
use plimsoll_plugin_remote::Remote;

use crate::exports::plimsoll::provider::provider::{
    Answer, CallError, Ending, Grant, GuestSession, RelayGrant, Session, SessionEnd,
};
use crate::plimsoll::types::types::{Evidence, File, Limits, Refusal, RefusalReason};
use crate::{
    ReadBack, STDIN_CHUNK, Sandbox, gateway, refused, runner, session_cell, session_described, session_language,
    session_runner_project, session_snippet,
};

/// The session's work directory, under `/tmp`, the only writable directory.
const WORK: &str = "/tmp/plimsoll/work";
/// How long a session's forwards and their tokens are kept before the next
/// call renews them: well inside the gateway's token lifetime (1 h by default).
const RENEW_FORWARDS: Duration = Duration::from_secs(20 * 60);
/// What a step of a session's project sees of its environment.
const GUEST_ENV: [&str; 3] = ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"];

/// The agent's channel: one exec per call on the session's sandbox.
impl Execs for Sandbox {
    fn exec(&self, argv: Vec<String>, stdin: &[u8], deadline: Instant, cap: usize) -> Result<Done, String> {
        let done = Sandbox::exec(self, argv, stdin, deadline, cap)?;
        Ok(Done { exit_code: done.exit_code, stdout: done.stdout, stderr: done.stderr })
    }

    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        Remote::upload(self, path, bytes)
    }

    /// The gateway's message cap, with room for the rest of the message.
    fn max_stdin(&self) -> usize {
        STDIN_CHUNK
    }

    fn exports(&self) -> &str {
        &self.exports
    }
}

/// One session: its sandbox (deleted when dropped), served by the agent.
pub struct OpenshellSession {
    agent: Agent<ExecChannel<Sandbox>>,
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
        let agent = Agent::start(ExecChannel::new(sandbox, WORK), disk_mb).map_err(|e| {
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
        self.agent.channel().sandbox()
    }

    /// A call naming its own grant, in a session whose relay the host started at
    /// the open to serve each call's: the call's client described beside the
    /// relay's (its routes, its preamble), `call` run, the description removed.
    fn described(&self, g: &RelayGrant, call: impl FnOnce() -> Result<Answer, CallError>) -> Result<Answer, CallError> {
        let sandbox = self.sandbox();
        if !sandbox.relaying() {
            return Err(CallError::Refused(refused(
                RefusalReason::Unsupported,
                "this openshell session was opened without a relay to the broker, so its calls cannot name a grant",
            )));
        }
        let write = || sandbox.write_call_description(&g.client);
        let remove = || sandbox.remove_call_description(&g.client);
        session_described("openshell sandbox", write, remove, call)
    }

    /// Reads the sandbox and its effective policy back before a call: refused
    /// when the gateway does not answer (the session goes on), ended when the
    /// sandbox is gone, no longer ready, or changed.
    fn check(&self) -> Result<(), CallError> {
        let sandbox = self.sandbox();
        let back = ReadBack { place: "openshell sandbox" };
        let read =
            gateway::get(&sandbox.name).map_err(|e| back.unanswered("the sandbox", e))?.ok_or_else(|| back.gone())?;
        if read.phase != gateway::READY {
            return Err(back.changed(format!("it is no longer ready: {}", read.why)));
        }
        if let Some(why) = sandbox.differs(&read) {
            return Err(back.changed(why));
        }
        let effective = gateway::effective(&sandbox.id).map_err(|e| back.unanswered("its effective policy", e))?;
        sandbox.policy_differs(&effective).map_or(Ok(()), |why| Err(back.changed(why)))?;
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
