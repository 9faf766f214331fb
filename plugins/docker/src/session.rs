//! Docker sessions: one container kept for many calls.
//!
//! The container's main process is the resident session agent
//! (`runners/agent`, `plimsoll-agent serve`), which the host keeps attached: a
//! call is one request written to its stdin and the answer read from its stdout
//! and stderr (`converse`), with no `exec`. The agent sweeps the container before
//! and after the payload (every process but itself and the kept interpreters dies),
//! writes the call's files, runs the payload, and measures the session's storage.
//!
//! Under gVisor a non-dumpable process's descriptors stay open to its uid, so the
//! channel is authenticated rather than trusted (`plimsoll-plugin-agent`): the
//! first request carries a fresh session key, every request its HMAC under it,
//! and every answer a status line whose MAC covers the call's nonce, both
//! streams' bytes and the status. An answer that fails the check ends the
//! session: something in the sandbox wrote to the channel.
//!
//! The host, not this plugin, reads the container back before calls (a change ends
//! the session as `sandbox_changed`) and pauses it when idle.

use plimsoll_plugin_agent::session::{self as agent, Agent, Channel};

use crate::exports::plimsoll::provider::provider::{Answer, CallError, CallOutput, Grant, GuestSession, Session};
use crate::plimsoll::host::containers::{Container, ReplyEnd};
use crate::plimsoll::types::types::{CellResult, Evidence, File, Limits, Refusal, RefusalReason};
use crate::{
    MEMORY_MB, evidence, or, plan, random_hex, refused, report_key, session_cell, session_language, session_project,
    session_snippet, spec, target,
};

/// The resident session agent, installed by `images/build.sh`.
const AGENT: &str = "/opt/plimsoll/plimsoll-agent";

/// The session container's attached stream: the agent's channel.
struct Attached(Container);

impl Channel for Attached {
    fn converse(&self, request: &[u8], end: &[u8], timeout_ms: u32, cap: u32) -> Result<agent::Reply, String> {
        let r = self.0.converse(request, end, timeout_ms, cap)?;
        let end = match r.end {
            ReplyEnd::Said => agent::ReplyEnd::Said,
            ReplyEnd::TimedOut => agent::ReplyEnd::TimedOut,
            ReplyEnd::Ended => agent::ReplyEnd::Ended,
        };
        Ok(agent::Reply { end, stdout: r.stdout, stderr: r.stderr })
    }
}

/// One session: its container, served by the agent.
pub struct DockerSession {
    agent: Agent<Attached>,
    image: String,
    runtime: String,
    memory_mb: u32,
}

impl DockerSession {
    /// Creates and starts the session's container with the agent as its main
    /// process, then hands the agent the session key.
    fn open(limits: &Limits, lifetime_s: u32) -> Result<DockerSession, Refusal> {
        let (runtime, image) = target()?;
        let marker = random_hex(16);
        if marker.is_empty() {
            return Err(refused(RefusalReason::Environment, "no randomness for the start marker"));
        }
        let disk_mb = agent::disk_budget(limits.disk_mb).map_err(|e| refused(RefusalReason::Environment, e))?;
        let command = vec![AGENT.to_string(), "serve".into(), marker.clone()];
        let spec = spec(limits, &runtime, &image, command, Some(disk_mb), lifetime_s);
        let container = Container::serve(&spec, marker.as_bytes())
            .map_err(|e| refused(RefusalReason::Environment, format!("starting the session's container: {e}")))?;
        // Nothing of the caller's has run yet: any failure here is a refusal (the
        // host removes the container with the store).
        let agent = Agent::start(Attached(container), disk_mb).map_err(|e| refused(RefusalReason::Environment, e))?;
        Ok(DockerSession { agent, image, runtime, memory_mb: or(limits.memory_mb, MEMORY_MB) })
    }
}

impl GuestSession for DockerSession {
    /// The broker's socket serves a docker session's grants (the host mounts
    /// it): none comes through the guard.
    fn open(limits: Limits, lifetime_s: u32, grant: Option<Grant>) -> Result<Session, Refusal> {
        crate::no_remote_grant(grant.as_ref())?;
        DockerSession::open(&limits, lifetime_s).map(Session::new)
    }

    fn evidence(&self) -> Evidence {
        evidence(&self.image, &self.runtime)
    }

    fn cell(&self, language: String, code: String, files: Vec<File>, limits: Limits) -> Result<Answer, CallError> {
        session_language("docker", &language)?;
        session_cell(&self.agent, (&language, &code, &files), &limits, self.memory_mb)
    }

    fn snippet(
        &self,
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        crate::no_remote_grant(grant.as_ref()).map_err(CallError::Refused)?;
        session_language("docker", &language)?;
        session_snippet(&self.agent, (&language, &code), &[], &limits)
    }

    /// A call's grant is served by the host's socket behind its own wall (the
    /// steps' processes find its client), so none arrives here.
    fn project(
        &self,
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        crate::no_remote_grant(grant.as_ref()).map_err(CallError::Refused)?;
        let key = report_key().map_err(CallError::Refused)?;
        let plan = plan(&files, &steps, &artifacts, &limits, (self.memory_mb, &self.runtime), &key);
        session_project(&self.agent, (plan, steps.len()), &limits, &key)
    }

    /// Never asked: the host pauses the container, which stands behind its own wall.
    fn suspend(&self) -> Result<bool, String> {
        Ok(false)
    }

    fn close(&self) {
        self.agent.channel().0.remove();
    }
}

/// The session smoke test: one real session keeps state in each language it
/// states, and a process one call leaves is gone by the next.
pub(crate) fn smoke(limits: &Limits) -> Result<(), String> {
    // The same storage a project run has, so the smoke fits every ceiling a project does.
    let limits = Limits { disk_mb: crate::project_work_mb(limits).map_err(|r| r.message)?, ..*limits };
    let s = DockerSession::open(&limits, 600).map_err(|r| r.message)?;
    let cell = |language: &str, code: &str| -> Result<CellResult, String> {
        match s.cell(language.into(), code.into(), Vec::new(), limits) {
            Ok(Answer { output: CallOutput::Cell(c), ended: None }) => Ok(c),
            Ok(Answer { ended: Some(e), .. }) => Err(format!("a {language} cell ended the session: {}", e.detail)),
            Ok(_) => Err("a cell answered with another kind of result".into()),
            Err(CallError::Refused(r)) => Err(format!("a {language} cell was refused: {}", r.message)),
            Err(CallError::Ended(e)) => Err(format!("a {language} cell found the session ended: {}", e.detail)),
            Err(CallError::MayHaveRun(f)) => Err(format!("a {language} cell failed: {}", f.detail)),
        }
    };
    let shown = |c: &CellResult| String::from_utf8_lossy(&c.stdout.bytes).into_owned();
    for (language, define, leave) in [
        ("python", "x = 41", "import subprocess\nsubprocess.Popen(['sleep', '60']).pid"),
        ("javascript", "let x = 41", "require('child_process').spawn('sleep', ['60'], {detached: true}).pid"),
    ] {
        cell(language, define)?;
        let r = cell(language, "x + 1")?;
        if shown(&r) != "42\n" || r.interpreter_started {
            return Err(format!(
                "a {language} cell did not keep its state (printed {:?}, fresh {}, stderr {:?})",
                shown(&r),
                r.interpreter_started,
                String::from_utf8_lossy(&r.stderr.bytes)
            ));
        }
        let pid = shown(&cell(language, leave)?);
        // The sweep's SIGKILL is sent before the next call starts, but under a
        // loaded gVisor its delivery can lag: the process must be gone (or a
        // zombie) within two seconds.
        let check = format!(
            "import time\ndef gone(pid):\n    for _ in range(40):\n        try:\n            if open(f'/proc/{{pid}}/stat').read().rsplit(') ', 1)[1][0] == 'Z':\n                return True\n        except OSError:\n            return True\n        time.sleep(0.05)\n    return False\ngone({})",
            pid.trim()
        );
        if shown(&cell("python", &check)?) != "True\n" {
            return Err(format!("a process a {language} cell left (pid {}) survived the sweep", pid.trim()));
        }
    }
    s.close();
    Ok(())
}
