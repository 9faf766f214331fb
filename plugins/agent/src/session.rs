//! A session served by the agent, over whatever channel carries its bytes: the
//! handshake that hands it the session key, one checked exchange per call, and
//! the status line's verdict (a refusal, or an answer and whether the sandbox can
//! take another call). The plugins map what this returns to their WIT types.

use std::cell::Cell;

use crate::{Trailer, Unchecked, check_answer, frame, random_hex};

/// The smallest session disk budget: the interpreters need room to start.
pub const MIN_DISK_MB: u32 = 16;
/// The session disk budget when the host names none.
const DEFAULT_DISK_MB: u32 = 1024;

/// The session's storage budget for an asked `disk_mb` (0: the default).
///
/// # Errors
///
/// A budget below [`MIN_DISK_MB`], in words for the caller.
pub fn disk_budget(disk_mb: u32) -> Result<u32, String> {
    let disk_mb = if disk_mb == 0 { DEFAULT_DISK_MB } else { disk_mb };
    if disk_mb < MIN_DISK_MB {
        return Err(format!("a session disk budget of {disk_mb} MiB is below the {MIN_DISK_MB} MiB a session needs"));
    }
    Ok(disk_mb)
}

/// What the agent may take beyond a call's budget (the sweeps, an interpreter's start).
const AGENT_GRACE_MS: u32 = 15_000;
/// Room on stderr for the status line beyond the payload's own capped output.
const TRAILER_ROOM: u32 = 64 << 10;
/// The budget of the handshake, before anything of the caller's exists.
const READY_MS: u32 = 30_000;

/// How a conversation with the agent ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyEnd {
    /// Both streams ended with the call's end marker.
    Said,
    /// The time ran out first.
    TimedOut,
    /// The agent's streams closed first: the agent is gone.
    Ended,
}

/// What came back for one request.
#[derive(Debug)]
pub struct Reply {
    pub end: ReplyEnd,
    /// Both streams, each without the end marker.
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// What carries a request to the agent and its answer back: docker's attached
/// stream, a vendor's process input and output.
pub trait Channel {
    /// Writes `request` to the agent's input, then gathers its stdout and stderr
    /// until both end with `end` (taken off), for at most `timeout_ms`, keeping at
    /// most `cap` bytes of each.
    ///
    /// # Errors
    ///
    /// The channel failed: whether the request arrived is unknown.
    fn converse(&self, request: &[u8], end: &[u8], timeout_ms: u32, cap: u32) -> Result<Reply, String>;
}

/// A call's budget, as the agent enforces it.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub timeout_ms: u32,
    /// Bytes kept per stream of the payload.
    pub max_output: u32,
}

/// Why the sandbox can take no more calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    DiskExceeded,
    MainProcessEnded,
    BoundaryFailed,
}

/// A session's end, with plimsoll's words for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    pub end: End,
    pub detail: String,
}

/// Why nothing ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refuse {
    /// The caller's request: a file that cannot be written, no interpreter.
    Request,
    /// The plugin's side: no randomness for a nonce.
    Environment,
}

/// Why a call produced no answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Failed {
    /// Nothing ran; the session goes on.
    Refused(Refuse, String),
    /// Nothing ran, and the sandbox can take no more calls.
    Ended(Ending),
    /// The call may have run (the detail is for the log).
    MayHaveRun { detail: String, ended: Option<Ending> },
}

/// A call's checked answer: the payload's streams, the agent's status, and the
/// session's end when this call spent the sandbox.
#[derive(Debug)]
pub struct Answered {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub trailer: Trailer,
    pub ended: Option<Ending>,
}

/// A call that may have run and took the session with it as `end`, for `detail`.
fn lost(end: End, detail: impl Into<String>) -> Failed {
    let detail = detail.into();
    Failed::MayHaveRun { detail: detail.clone(), ended: Some(Ending { end, detail }) }
}

/// One session's agent: the channel to it, the session key, and the storage budget.
#[derive(Debug)]
pub struct Agent<C> {
    channel: C,
    key: [u8; 32],
    disk_mb: u32,
    cells: Cell<u32>,
}

impl<C: Channel> Agent<C> {
    /// Hands a freshly started agent on `channel` a new session key and checks its
    /// first answer (its sweep left nothing). Nothing of the caller's exists yet,
    /// so every failure is the plugin's side: its text says what failed.
    ///
    /// # Errors
    ///
    /// The handshake's failure, for a refusal.
    pub fn start(channel: C, disk_mb: u32) -> Result<Agent<C>, String> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|_| "no randomness for the session key".to_string())?;
        let agent = Agent { channel, key, disk_mb, cells: Cell::new(0) };
        let mut first = serde_json::Map::new();
        first.insert("key".into(), hex::encode(key).into());
        match agent.exchange("ready", first, Budget { timeout_ms: READY_MS, max_output: 1 << 20 }, 0) {
            Ok(a) if a.trailer.leftover == 0 => Ok(agent),
            Ok(a) => Err(format!("the new session's sweep left {} processes", a.trailer.leftover)),
            Err(Failed::Refused(_, why)) => Err(why),
            Err(Failed::Ended(e)) => Err(e.detail),
            Err(Failed::MayHaveRun { detail, .. }) => Err(format!("the session agent did not start: {detail}")),
        }
    }

    /// The channel the agent answers on.
    pub fn channel(&self) -> &C {
        &self.channel
    }

    /// Runs `code` in the kept interpreter for `language` after writing `files`
    /// (relative paths under the work directory, contents as given).
    ///
    /// # Errors
    ///
    /// See [`Failed`].
    pub fn cell(
        &self,
        language: &str,
        code: &str,
        files: &[(&str, &[u8])],
        budget: Budget,
    ) -> Result<Answered, Failed> {
        use base64::Engine as _;
        let n = self.cells.get() + 1;
        self.cells.set(n);
        let files: Vec<serde_json::Value> = files
            .iter()
            .map(|(path, content)| {
                serde_json::json!({"path": path, "content": base64::engine::general_purpose::STANDARD.encode(content)})
            })
            .collect();
        let mut request = serde_json::Map::new();
        request.insert("language".into(), language.into());
        request.insert("code".into(), code.into());
        request.insert("cell".into(), n.into());
        request.insert("files".into(), files.into());
        self.call("cell", request, budget, 0)
    }

    /// Runs a snippet in a fresh interpreter inside the session's sandbox.
    ///
    /// # Errors
    ///
    /// See [`Failed`].
    pub fn snippet(
        &self,
        language: &str,
        code: &str,
        env: &[(String, String)],
        budget: Budget,
    ) -> Result<Answered, Failed> {
        let mut request = serde_json::Map::new();
        request.insert("language".into(), language.into());
        request.insert("code".into(), code.into());
        if !env.is_empty() {
            // Beside the agent's own environment, for this snippet's process alone.
            let env: serde_json::Map<String, serde_json::Value> =
                env.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
            request.insert("env".into(), env.into());
        }
        self.call("snippet", request, budget, 0)
    }

    /// Runs the project runner on `plan` (its JSON, report key included); its
    /// report, up to `report_cap` bytes, is on the answer's stdout.
    ///
    /// # Errors
    ///
    /// See [`Failed`].
    pub fn project(&self, plan: serde_json::Value, report_cap: u32, budget: Budget) -> Result<Answered, Failed> {
        let mut request = serde_json::Map::new();
        request.insert("plan".into(), plan);
        request.insert("reportCap".into(), report_cap.into());
        self.call("project", request, budget, report_cap)
    }

    /// One call and the status line's verdict on it.
    fn call(
        &self,
        kind: &str,
        request: serde_json::Map<String, serde_json::Value>,
        budget: Budget,
        stdout_cap: u32,
    ) -> Result<Answered, Failed> {
        let answered = self.exchange(kind, request, budget, stdout_cap)?;
        if let Some(message) = &answered.trailer.refused {
            return Err(match answered.ended {
                Some(e) => Failed::Ended(e),
                None => Failed::Refused(Refuse::Request, message.clone()),
            });
        }
        Ok(answered)
    }

    /// One request to the agent and its checked answer.
    fn exchange(
        &self,
        kind: &str,
        mut request: serde_json::Map<String, serde_json::Value>,
        budget: Budget,
        stdout_cap: u32,
    ) -> Result<Answered, Failed> {
        let nonce = random_hex(16);
        if nonce.is_empty() {
            return Err(Failed::Refused(Refuse::Environment, "no randomness for the call's nonce".into()));
        }
        request.insert("nonce".into(), nonce.clone().into());
        request.insert("kind".into(), kind.into());
        request.insert("timeoutMs".into(), budget.timeout_ms.into());
        request.insert("maxOutput".into(), budget.max_output.into());
        let body = serde_json::Value::Object(request).to_string().into_bytes();
        let cap = stdout_cap.max(budget.max_output).saturating_add(TRAILER_ROOM);
        let timeout = budget.timeout_ms.saturating_add(AGENT_GRACE_MS);
        let end = format!("\n{nonce}.\n");
        let reply = self
            .channel
            .converse(&frame(&self.key, &body), end.as_bytes(), timeout, cap)
            .map_err(|e| lost(End::BoundaryFailed, format!("the session agent's channel failed: {e}")))?;
        self.checked(reply, &nonce)
    }

    /// The answer, once it proved to be the agent's.
    fn checked(&self, reply: Reply, nonce: &str) -> Result<Answered, Failed> {
        let Reply { end, stdout, mut stderr } = reply;
        match end {
            ReplyEnd::Said => {}
            ReplyEnd::TimedOut => {
                return Err(lost(
                    End::BoundaryFailed,
                    "the session agent did not answer within the call's budget and grace",
                ));
            }
            ReplyEnd::Ended => return Err(lost(End::MainProcessEnded, "the session agent ended during the call")),
        }
        match check_answer(&self.key, nonce, &stdout, &mut stderr) {
            Ok(trailer) => {
                let ended = self.ending(&trailer);
                Ok(Answered { stdout, stderr, trailer, ended })
            }
            Err(why) => {
                let detail = match why {
                    Unchecked::Missing => "the session agent's answer has no status line",
                    Unchecked::Forged => {
                        "the session agent's answer failed its check: something in the sandbox wrote to the agent's channel"
                    }
                };
                Err(lost(End::BoundaryFailed, detail))
            }
        }
    }

    /// Why the sandbox can take no more calls after this one, if it cannot.
    fn ending(&self, t: &Trailer) -> Option<Ending> {
        if t.leftover > 0 {
            return Some(Ending {
                end: End::BoundaryFailed,
                detail: format!("{} processes survived the sweep after the call", t.leftover),
            });
        }
        let budget_kb = u64::from(self.disk_mb) * 1024;
        (t.disk_used_kb > budget_kb).then(|| Ending {
            end: End::DiskExceeded,
            detail: format!(
                "the session's storage holds {} MiB, over its budget of {} MiB (SANDBOX_SESSION_DISK_MB)",
                t.disk_used_kb.div_ceil(1024),
                self.disk_mb
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::tests::answered;

    #[test]
    fn a_session_disk_budget_defaults_and_has_a_floor() {
        assert_eq!((disk_budget(0), disk_budget(16), disk_budget(64)), (Ok(1024), Ok(16), Ok(64)));
        assert_eq!(disk_budget(8), Err("a session disk budget of 8 MiB is below the 16 MiB a session needs".into()));
    }

    /// What the scripted agent does with the next request.
    enum Act {
        /// Answers with this status line (JSON), stdout and stderr.
        Status(&'static str, &'static [u8], &'static [u8]),
        /// Answers under the wrong key.
        Forge,
        TimeOut,
        Die,
    }

    /// An agent that reads each request's frame (keeping the key the first
    /// one carries) and answers as scripted.
    struct Scripted {
        acts: RefCell<Vec<Act>>,
        key: RefCell<Option<[u8; 32]>>,
        seen: RefCell<Vec<serde_json::Value>>,
    }

    impl Scripted {
        fn new(mut acts: Vec<Act>) -> Scripted {
            acts.reverse();
            Scripted { acts: RefCell::new(acts), key: RefCell::new(None), seen: RefCell::new(Vec::new()) }
        }
    }

    impl Channel for Scripted {
        fn converse(&self, request: &[u8], end: &[u8], _timeout_ms: u32, _cap: u32) -> Result<Reply, String> {
            let body: serde_json::Value = serde_json::from_slice(&request[36..]).map_err(|e| e.to_string())?;
            if let Some(k) = body.get("key").and_then(serde_json::Value::as_str) {
                let k = hex::decode(k).map_err(|e| e.to_string())?;
                *self.key.borrow_mut() = k.try_into().ok();
            }
            let key = self.key.borrow().ok_or("no key yet")?;
            assert_eq!(request, frame(&key, &request[36..]).as_slice(), "every request carries its HMAC");
            let nonce = body["nonce"].as_str().unwrap_or_default().to_string();
            assert!(end.starts_with(format!("\n{nonce}").as_bytes()));
            self.seen.borrow_mut().push(body);
            let act = self.acts.borrow_mut().pop().ok_or("no more acts")?;
            let reply = |end, stdout: &[u8], stderr: Vec<u8>| Reply { end, stdout: stdout.to_vec(), stderr };
            Ok(match act {
                Act::Status(status, out, err) => reply(ReplyEnd::Said, out, answered(&key, &nonce, out, err, status)),
                Act::Forge => reply(ReplyEnd::Said, b"", answered(&[1; 32], &nonce, b"", b"", "{}")),
                Act::TimeOut => reply(ReplyEnd::TimedOut, b"", Vec::new()),
                Act::Die => reply(ReplyEnd::Ended, b"", Vec::new()),
            })
        }
    }

    const BUDGET: Budget = Budget { timeout_ms: 1000, max_output: 4096 };

    #[test]
    fn the_handshake_hands_over_a_key_and_refuses_a_dirty_start() {
        let a = Agent::start(Scripted::new(vec![Act::Status("{}", b"", b"")]), 16).expect("started");
        assert_eq!(a.channel().seen.borrow()[0]["kind"], "ready");
        assert_eq!(
            Agent::start(Scripted::new(vec![Act::Status(r#"{"leftover":2}"#, b"", b"")]), 16).err(),
            Some("the new session's sweep left 2 processes".into())
        );
        assert_eq!(
            Agent::start(Scripted::new(vec![Act::Die]), 16).err(),
            Some("the session agent did not start: the session agent ended during the call".into())
        );
    }

    #[test]
    fn each_verdict_of_the_status_line_is_named() {
        let agent = Agent::start(
            Scripted::new(vec![
                Act::Status("{}", b"", b""),
                Act::Status(r#"{"exit":3,"started":true}"#, b"out", b"err"),
                Act::Status(r#"{"refused":"illegal file path: ../x"}"#, b"", b""),
                Act::Status(r#"{"refused":"illegal file path: ../x","leftover":1}"#, b"", b""),
                Act::Status(r#"{"diskUsedKb":17409}"#, b"", b""),
                Act::Forge,
                Act::TimeOut,
                Act::Die,
            ]),
            16,
        )
        .expect("started");
        let a = agent.cell("python", "1/0", &[("a.txt", b"hi")], BUDGET).expect("answered");
        assert_eq!(
            (a.stdout.as_slice(), a.stderr.as_slice(), a.trailer.exit, a.ended),
            (&b"out"[..], &b"err"[..], 3, None)
        );
        let seen = agent.channel().seen.borrow()[1].clone();
        assert_eq!((seen["cell"].as_u64(), seen["files"][0]["content"].as_str()), (Some(1), Some("aGk=")));
        assert_eq!(
            agent.snippet("python", "x", &[], BUDGET).err(),
            Some(Failed::Refused(Refuse::Request, "illegal file path: ../x".into()))
        );
        let ended = |end, detail: &str| Ending { end, detail: detail.into() };
        assert_eq!(
            agent.snippet("python", "x", &[], BUDGET).err(),
            Some(Failed::Ended(ended(End::BoundaryFailed, "1 processes survived the sweep after the call")))
        );
        let full = agent.project(serde_json::json!({}), 1 << 20, BUDGET).expect("answered");
        assert_eq!(
            full.ended,
            Some(ended(
                End::DiskExceeded,
                "the session's storage holds 18 MiB, over its budget of 16 MiB (SANDBOX_SESSION_DISK_MB)"
            ))
        );
        for (want, detail) in [
            (
                End::BoundaryFailed,
                "the session agent's answer failed its check: something in the sandbox wrote to the agent's channel",
            ),
            (End::BoundaryFailed, "the session agent did not answer within the call's budget and grace"),
            (End::MainProcessEnded, "the session agent ended during the call"),
        ] {
            assert_eq!(
                agent.snippet("python", "x", &[], BUDGET).err(),
                Some(Failed::MayHaveRun { detail: detail.into(), ended: Some(ended(want, detail)) })
            );
        }
    }
}
