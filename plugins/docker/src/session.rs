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
//! channel is authenticated rather than trusted: the first request carries a
//! fresh session key (read before any code of the caller's exists), every request
//! carries its HMAC under that key, and every answer ends with a status line whose
//! MAC covers the call's nonce, both streams' bytes and the status. An answer that
//! fails the check ends the session: something in the sandbox wrote to the channel.
//!
//! The host, not this plugin, reads the container back before calls (a change ends
//! the session as `sandbox_changed`) and pauses it when idle.

use std::cell::Cell;

use plimsoll_plugin_agent::{Trailer, Unchecked, check_answer, frame};

use crate::exports::plimsoll::provider::provider::{
    Answer, CallError, CallOutput, Ending, Failure, GuestSession, Session, SessionEnd,
};
use crate::plimsoll::host::containers::{Container, Reply, ReplyEnd};
use crate::plimsoll::types::types::{CellResult, Evidence, File, Limits, Refusal, RefusalReason, SnippetResult};
use crate::{
    Ended, MEMORY_MB, evidence, or, output, plan, random_hex, read_report, refused, report_cap, report_key, spec,
    target,
};

/// The resident session agent, installed by `images/build.sh`.
const AGENT: &str = "/opt/plimsoll/plimsoll-agent";
/// What the agent may take beyond a call's budget (the sweeps, an interpreter's start).
const AGENT_GRACE_MS: u32 = 15_000;
/// Room on stderr for the status line beyond the payload's own capped output.
const TRAILER_ROOM: u32 = 64 << 10;
/// The smallest session disk budget: the interpreters need room to start.
const MIN_DISK_MB: u32 = 16;
/// A call's answer, checked: the payload's output and the agent's status.
struct Exchange {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    trailer: Trailer,
}

/// One session: its container, served by the agent, and the session key.
pub struct DockerSession {
    container: Container,
    image: String,
    runtime: String,
    disk_mb: u32,
    memory_mb: u32,
    key: [u8; 32],
    cells: Cell<u32>,
}

fn may_have_run(detail: impl Into<String>, ended: Option<Ending>) -> CallError {
    CallError::MayHaveRun(Failure { detail: detail.into(), ended })
}

/// A call that may have run and took the session with it as `end`, for `detail`.
fn lost(end: SessionEnd, detail: impl Into<String>) -> CallError {
    let detail = detail.into();
    may_have_run(detail.clone(), Some(Ending { end, detail }))
}

impl DockerSession {
    /// Creates and starts the session's container with the agent as its main
    /// process, then hands the agent the session key.
    fn open(limits: &Limits, lifetime_s: u32) -> Result<DockerSession, Refusal> {
        let (runtime, image) = target()?;
        let marker = random_hex(16);
        let mut key = [0u8; 32];
        if marker.is_empty() || getrandom::fill(&mut key).is_err() {
            return Err(refused(RefusalReason::Environment, "no randomness for the start marker or session key"));
        }
        let disk_mb = or(limits.disk_mb, 1024);
        if disk_mb < MIN_DISK_MB {
            return Err(refused(
                RefusalReason::Environment,
                format!("a session disk budget of {disk_mb} MiB is below the {MIN_DISK_MB} MiB a session needs"),
            ));
        }
        let command = vec![AGENT.to_string(), "serve".into(), marker.clone()];
        let spec = spec(limits, &runtime, &image, command, Some(disk_mb), lifetime_s);
        let container = Container::serve(&spec, marker.as_bytes())
            .map_err(|e| refused(RefusalReason::Environment, format!("starting the session's container: {e}")))?;
        let session = DockerSession {
            container,
            image,
            runtime,
            disk_mb,
            memory_mb: or(limits.memory_mb, MEMORY_MB),
            key,
            cells: Cell::new(0),
        };
        // Nothing of the caller's has run yet: any failure here is a refusal.
        let ready = Limits { timeout_ms: 30_000, ..*limits };
        let mut first = serde_json::Map::new();
        first.insert("key".into(), hex::encode(key).into());
        match session.exchange("ready", first, &ready, 0) {
            Ok(x) if x.trailer.leftover == 0 => Ok(session),
            Ok(x) => Err(refused(
                RefusalReason::Environment,
                format!("the new session's sweep left {} processes", x.trailer.leftover),
            )),
            Err(CallError::Refused(r)) => Err(r),
            Err(CallError::Ended(e)) => Err(refused(RefusalReason::Environment, e.detail)),
            Err(CallError::MayHaveRun(f)) => {
                Err(refused(RefusalReason::Environment, format!("the session agent did not start: {}", f.detail)))
            }
        }
    }

    /// One request to the agent and its checked answer.
    fn exchange(
        &self,
        kind: &str,
        mut request: serde_json::Map<String, serde_json::Value>,
        limits: &Limits,
        stdout_cap: u32,
    ) -> Result<Exchange, CallError> {
        let nonce = random_hex(16);
        if nonce.is_empty() {
            return Err(CallError::Refused(refused(RefusalReason::Environment, "no randomness for the call's nonce")));
        }
        let max_output = or(limits.max_output_bytes, 1 << 20);
        request.insert("nonce".into(), nonce.clone().into());
        request.insert("kind".into(), kind.into());
        request.insert("timeoutMs".into(), limits.timeout_ms.into());
        request.insert("maxOutput".into(), max_output.into());
        let body = serde_json::Value::Object(request).to_string().into_bytes();
        let cap = stdout_cap.max(max_output).saturating_add(TRAILER_ROOM);
        let timeout = limits.timeout_ms.saturating_add(AGENT_GRACE_MS);
        let end = format!("\n{nonce}.\n");
        let reply = self
            .container
            .converse(&frame(&self.key, &body), end.as_bytes(), timeout, cap)
            .map_err(|e| lost(SessionEnd::BoundaryFailed, format!("the session agent's channel failed: {e}")))?;
        self.checked(reply, &nonce)
    }

    /// The answer, once it proved to be the agent's.
    fn checked(&self, reply: Reply, nonce: &str) -> Result<Exchange, CallError> {
        let Reply { end, stdout, mut stderr, .. } = reply;
        match end {
            ReplyEnd::Said => {}
            ReplyEnd::TimedOut => {
                return Err(lost(
                    SessionEnd::BoundaryFailed,
                    "the session agent did not answer within the call's budget and grace",
                ));
            }
            ReplyEnd::Ended => {
                return Err(lost(SessionEnd::MainProcessEnded, "the session agent ended during the call"));
            }
        }
        match check_answer(&self.key, nonce, &stdout, &mut stderr) {
            Ok(trailer) => Ok(Exchange { stdout, stderr, trailer }),
            Err(why) => {
                let detail = match why {
                    Unchecked::Missing => "the session agent's answer has no status line",
                    Unchecked::Forged => {
                        "the session agent's answer failed its check: something in the sandbox wrote to the agent's channel"
                    }
                };
                Err(lost(SessionEnd::BoundaryFailed, detail))
            }
        }
    }

    /// Why the sandbox can take no more calls after this one, if it cannot.
    fn ending(&self, t: &Trailer) -> Option<Ending> {
        if t.leftover > 0 {
            return Some(Ending {
                end: SessionEnd::BoundaryFailed,
                detail: format!("{} processes survived the sweep after the call", t.leftover),
            });
        }
        let budget_kb = u64::from(self.disk_mb) * 1024;
        (t.disk_used_kb > budget_kb).then(|| Ending {
            end: SessionEnd::DiskExceeded,
            detail: format!(
                "the session's storage holds {} MiB, over its budget of {} MiB (SANDBOX_SESSION_DISK_MB)",
                t.disk_used_kb.div_ceil(1024),
                self.disk_mb
            ),
        })
    }

    /// The status line's verdict on a call that produced `output`.
    fn answer(
        &self,
        x: Exchange,
        output: impl FnOnce(Vec<u8>, Vec<u8>, &Trailer) -> CallOutput,
    ) -> Result<Answer, CallError> {
        let ended = self.ending(&x.trailer);
        if let Some(message) = &x.trailer.refused {
            return Err(match ended {
                Some(e) => CallError::Ended(e),
                None => CallError::Refused(refused(RefusalReason::Request, message.clone())),
            });
        }
        Ok(Answer { output: output(x.stdout, x.stderr, &x.trailer), ended })
    }

    fn language(language: &str) -> Result<(), CallError> {
        match language {
            "javascript" | "python" => Ok(()),
            other => Err(CallError::Refused(refused(
                RefusalReason::Unsupported,
                format!("the docker provider's sessions run javascript and python, not {other}"),
            ))),
        }
    }
}

impl GuestSession for DockerSession {
    fn open(limits: Limits, lifetime_s: u32) -> Result<Session, Refusal> {
        DockerSession::open(&limits, lifetime_s).map(Session::new)
    }

    fn evidence(&self) -> Evidence {
        evidence(&self.image, &self.runtime)
    }

    fn cell(&self, language: String, code: String, files: Vec<File>, limits: Limits) -> Result<Answer, CallError> {
        DockerSession::language(&language)?;
        let n = self.cells.get() + 1;
        self.cells.set(n);
        let mut request = serde_json::Map::new();
        request.insert("language".into(), language.into());
        request.insert("code".into(), code.into());
        request.insert("cell".into(), n.into());
        request.insert("files".into(), files_json(&files));
        let x = self.exchange("cell", request, &limits, 0)?;
        let memory_mb = self.memory_mb;
        self.answer(x, |stdout, mut stderr, t| {
            if t.ended && !t.timed_out && t.exit == 137 {
                stderr.extend_from_slice(
                    format!("\nplimsoll: the interpreter was killed (SIGKILL; the memory limit is {memory_mb} MiB)\n")
                        .as_bytes(),
                );
            }
            CallOutput::Cell(CellResult {
                exit_code: t.exit,
                timed_out: t.timed_out,
                stdout: output(stdout, t.stdout_truncated),
                stderr: output(stderr, t.stderr_truncated),
                interpreter_started: t.started,
                interpreter_ended: t.ended,
            })
        })
    }

    fn snippet(&self, language: String, code: String, limits: Limits) -> Result<Answer, CallError> {
        DockerSession::language(&language)?;
        let mut request = serde_json::Map::new();
        request.insert("language".into(), language.into());
        request.insert("code".into(), code.into());
        let x = self.exchange("snippet", request, &limits, 0)?;
        self.answer(x, |stdout, stderr, t| {
            CallOutput::Snippet(SnippetResult {
                exit_code: t.exit,
                timed_out: t.timed_out,
                stdout: output(stdout, t.stdout_truncated),
                stderr: output(stderr, t.stderr_truncated),
            })
        })
    }

    fn project(
        &self,
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
    ) -> Result<Answer, CallError> {
        let key = report_key().map_err(CallError::Refused)?;
        let cap = report_cap(&limits, steps.len());
        let mut request = serde_json::Map::new();
        request.insert("plan".into(), plan(&files, &steps, &artifacts, &limits, (self.memory_mb, &self.runtime), &key));
        request.insert("reportCap".into(), cap.into());
        let x = self.exchange("project", request, &limits, cap)?;
        self.answer(x, |stdout, _, t| {
            let ended = Ended { timed_out: t.timed_out, oom_killed: false, exit_code: Some(t.exit) };
            CallOutput::Project(read_report(&stdout, &key, &ended))
        })
    }

    fn close(&self) {
        self.container.remove();
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

fn files_json(files: &[File]) -> serde_json::Value {
    use base64::Engine as _;
    files
        .iter()
        .map(|f| serde_json::json!({"path": f.path, "content": base64::engine::general_purpose::STANDARD.encode(&f.content)}))
        .collect()
}
