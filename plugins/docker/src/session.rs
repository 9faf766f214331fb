//! Docker sessions: one container kept for many calls.
//!
//! The container's main process is the session agent's `init` (it reaps orphans).
//! Every call is one `exec` of the agent (`runners/session/agent.py`), which sweeps
//! the container before and after the payload (every process but PID 1 and the
//! kept keepers and interpreters dies), writes the call's files, runs the payload,
//! and measures the session's storage. The agent's last stderr line is its
//! trailer, found only under the call's fresh nonce, which the agent reads on
//! stdin after making itself non-dumpable, so nothing beside it can forge one.
//!
//! The host, not this plugin, reads the container back before each call (a change
//! ends the session as `sandbox_changed`) and pauses it when idle.

use std::cell::{Cell, RefCell};

use serde::Deserialize;

use crate::exports::plimsoll::provider::provider::{
    Answer, CallError, CallOutput, Ending, Failure, GuestSession, Session, SessionEnd,
};
use crate::plimsoll::host::containers::{Container, ExecResult};
use crate::plimsoll::types::types::{CellResult, Evidence, File, Limits, Refusal, RefusalReason, SnippetResult};
use crate::{
    Ended, GUEST_ENV, MEMORY_MB, evidence, marked, or, output, plan, random_hex, read_report, refused, report_cap,
    report_key, spec, target,
};

/// The session agent, installed by `images/build.sh`.
const AGENT: &str = "/opt/plimsoll/agent.py";
/// What the agent may take beyond a call's budget (its start, the sweeps, the keeper's start).
const AGENT_GRACE_MS: u32 = 15_000;
/// Room on stderr for the trailer beyond the payload's own capped output.
const TRAILER_ROOM: u32 = 64 << 10;
/// The smallest session disk budget: the interpreters need room to start.
const MIN_DISK_MB: u32 = 16;

/// The agent's trailer: how the call went and what the container holds now.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Trailer {
    exit: i32,
    timed_out: bool,
    started: bool,
    ended: bool,
    stdout_truncated: bool,
    stderr_truncated: bool,
    /// The kept keepers and interpreters, by language: `[pid, start time]` pairs.
    keep: serde_json::Value,
    disk_used_kb: u64,
    /// Processes the sweep could not kill.
    leftover: u32,
    /// Nothing ran: a file could not be written, or no interpreter started.
    refused: Option<String>,
    /// The interpreter's keeper stopped answering after the code was sent.
    lost: Option<String>,
}

/// A call's exec, split: the payload's output and the agent's trailer.
struct Exchange {
    exec: ExecResult,
    trailer: Trailer,
}

/// One session: its container and what the agent keeps in it.
pub struct DockerSession {
    container: Container,
    image: String,
    runtime: String,
    disk_mb: u32,
    memory_mb: u32,
    keep: RefCell<serde_json::Value>,
    cells: Cell<u32>,
}

fn may_have_run(detail: impl Into<String>, ended: Option<Ending>) -> CallError {
    CallError::MayHaveRun(Failure { detail: detail.into(), ended })
}

impl DockerSession {
    /// Creates and starts the session's container, then proves the agent answers.
    fn open(limits: &Limits, lifetime_s: u32) -> Result<DockerSession, Refusal> {
        let (runtime, image) = target()?;
        let marker = random_hex(16);
        if marker.is_empty() {
            return Err(refused(RefusalReason::Environment, "no randomness for the start marker"));
        }
        let disk_mb = or(limits.disk_mb, 1024);
        if disk_mb < MIN_DISK_MB {
            return Err(refused(
                RefusalReason::Environment,
                format!("a session disk budget of {disk_mb} MiB is below the {MIN_DISK_MB} MiB a session needs"),
            ));
        }
        let command = marked(&marker, &["python3", "-I", AGENT, "init"]);
        let spec = spec(limits, &runtime, &image, command, Some(disk_mb), lifetime_s);
        let container = Container::create(&spec)
            .map_err(|e| refused(RefusalReason::Environment, format!("creating the session's container: {e}")))?;
        container
            .start(&[])
            .map_err(|e| refused(RefusalReason::Environment, format!("starting the session's container: {e}")))?;
        let session = DockerSession {
            container,
            image,
            runtime,
            disk_mb,
            memory_mb: or(limits.memory_mb, MEMORY_MB),
            keep: RefCell::new(serde_json::json!({})),
            cells: Cell::new(0),
        };
        // Nothing of the caller's has run yet: any failure here is a refusal.
        let ready = Limits { timeout_ms: 30_000, ..*limits };
        match session.exchange("ready", serde_json::Map::new(), &ready, 0) {
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

    /// One exec of the agent with `request`; the trailer is split off stderr.
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
        request.insert("keep".into(), self.keep.borrow().clone());
        request.insert("timeoutMs".into(), limits.timeout_ms.into());
        request.insert("maxOutput".into(), max_output.into());
        let mut command: Vec<String> = vec!["/usr/bin/env".into(), "-i".into()];
        command.extend(GUEST_ENV.iter().map(|s| s.to_string()));
        command.extend(["python3".into(), "-I".into(), AGENT.into()]);
        let stdin = serde_json::Value::Object(request).to_string().into_bytes();
        let cap = stdout_cap.max(max_output).saturating_add(TRAILER_ROOM);
        let timeout = limits.timeout_ms.saturating_add(AGENT_GRACE_MS);
        let mut exec = self
            .container
            .exec(&command, &stdin, timeout, cap)
            .map_err(|e| may_have_run(format!("exec of the session agent: {e}"), None))?;
        let Some(trailer) = split_trailer(&mut exec.stderr, &nonce) else {
            // The agent's state is unknown: the next call's sweep keeps nothing.
            *self.keep.borrow_mut() = serde_json::json!({});
            let why = if exec.timed_out { "did not finish in time" } else { "ended without its trailer" };
            return Err(may_have_run(format!("the session agent {why} (exit {:?})", exec.exit_code), None));
        };
        *self.keep.borrow_mut() = if trailer.keep.is_object() { trailer.keep.clone() } else { serde_json::json!({}) };
        Ok(Exchange { exec, trailer })
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

    /// The trailer's verdict on a call that produced `output`.
    fn answer(
        &self,
        x: Exchange,
        output: impl FnOnce(ExecResult, &Trailer) -> CallOutput,
    ) -> Result<Answer, CallError> {
        let ended = self.ending(&x.trailer);
        if let Some(message) = &x.trailer.refused {
            return Err(match ended {
                Some(e) => CallError::Ended(e),
                None => CallError::Refused(refused(RefusalReason::Request, message.clone())),
            });
        }
        if let Some(lost) = &x.trailer.lost {
            return Err(may_have_run(lost.clone(), ended));
        }
        Ok(Answer { output: output(x.exec, &x.trailer), ended })
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

/// Finds `\n<nonce> <json>\n` at the end of `stderr`, removes it, and parses it.
fn split_trailer(stderr: &mut Vec<u8>, nonce: &str) -> Option<Trailer> {
    let needle = format!("\n{nonce} ");
    let at = stderr.windows(needle.len()).rposition(|w| w == needle.as_bytes())?;
    let body = stderr.get(at + needle.len()..)?.strip_suffix(b"\n")?;
    let trailer = serde_json::from_slice(body).ok()?;
    stderr.truncate(at);
    Some(trailer)
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
        self.answer(x, |exec, t| {
            let mut stderr = exec.stderr;
            if t.ended && !t.timed_out && t.exit == 137 {
                stderr.extend_from_slice(
                    format!("\nplimsoll: the interpreter was killed (SIGKILL; the memory limit is {memory_mb} MiB)\n")
                        .as_bytes(),
                );
            }
            CallOutput::Cell(CellResult {
                exit_code: t.exit,
                timed_out: t.timed_out,
                stdout: output(exec.stdout, t.stdout_truncated || exec.stdout_truncated),
                stderr: output(stderr, t.stderr_truncated || exec.stderr_truncated),
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
        self.answer(x, |exec, t| {
            CallOutput::Snippet(SnippetResult {
                exit_code: t.exit,
                timed_out: t.timed_out,
                stdout: output(exec.stdout, t.stdout_truncated || exec.stdout_truncated),
                stderr: output(exec.stderr, t.stderr_truncated || exec.stderr_truncated),
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
        request.insert("plan".into(), plan(&files, &steps, &artifacts, &limits, &key));
        request.insert("reportCap".into(), cap.into());
        let x = self.exchange("project", request, &limits, cap)?;
        self.answer(x, |exec, t| {
            let ended = Ended { timed_out: t.timed_out || exec.timed_out, oom_killed: false, exit_code: Some(t.exit) };
            CallOutput::Project(read_report(&exec.stdout, &key, &ended))
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
        let check = format!(
            "def gone(pid):\n    try:\n        return open(f'/proc/{{pid}}/stat').read().rsplit(') ', 1)[1][0] == 'Z'\n    except OSError:\n        return True\ngone({})",
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trailer_is_found_only_under_the_nonce_and_removed() {
        let mut stderr = b"boom\n\nfeed {\"exit\":9}\n\nabcd {\"exit\":1,\"started\":true}\n".to_vec();
        let t = split_trailer(&mut stderr, "abcd").expect("trailer");
        assert_eq!((t.exit, t.started), (1, true));
        assert_eq!(stderr, b"boom\n\nfeed {\"exit\":9}\n");
        let mut forged = b"\nfeed {\"exit\":0}\n".to_vec();
        assert!(split_trailer(&mut forged, "abcd").is_none());
        let mut cut = b"\nabcd {\"exit\":0".to_vec();
        assert!(split_trailer(&mut cut, "abcd").is_none());
    }
}
