//! The five tools: what each takes, what it answers, and how a failure says
//! whether code ran. The handler in `lib.rs` only moves JSON between MCP and here.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use plimsoll_attest::statement::ClosePredicate;
use plimsoll_attest::{Completeness, Entry};
use plimsoll_client::{Client, Error, Options, Session, SessionOptions};
use plimsoll_core::wire::{CellResult, ProjectFile, RunRecord, RunRequest, RunResponse};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::config::Config;

/// Files one call may write.
pub const MAX_FILES: usize = 200;

/// A tool's answer: its structured content, and whether it is a tool error.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// `structuredContent`.
    pub value: Value,
    /// A failure the model should read as one (`isError`).
    pub error: bool,
}

impl Answer {
    fn ok(value: Value) -> Answer {
        Answer { value, error: false }
    }

    /// Nothing ran: fixing the cause and sending again repeats nothing.
    fn refused(reason: &str, message: impl Into<String>) -> Answer {
        Answer { value: json!({"ran": "no", "reason": reason, "message": message.into()}), error: true }
    }

    /// The code may have run without an answer that checked; never retried.
    fn maybe(message: impl Into<String>) -> Answer {
        Answer { value: json!({"ran": "maybe", "message": message.into()}), error: true }
    }

    fn from_error(e: &Error) -> Answer {
        match e.not_dispatched() {
            Some(reason) => Answer::refused(reason.as_str(), e.to_string()),
            None if e.may_have_run() => Answer::maybe(e.to_string()),
            None => Answer::refused("request", e.to_string()),
        }
    }
}

/// One kept sandbox: its session behind a lock of its own, so a long call in
/// one sandbox holds up no other; `None` once it is closed.
struct Sandbox {
    session: Arc<Mutex<Option<Session>>>,
    last_used: Instant,
}

/// The kept sandboxes, and the scopes whose connection was revoked: nothing
/// is kept for those again, even by a call that was under way.
#[derive(Default)]
struct Kept {
    open: BTreeMap<(Scope, String), Sandbox>,
    ended: std::collections::BTreeSet<Scope>,
}

/// Closes a kept sandbox's session, signing its close when receipts are on.
async fn close_kept(session: &Mutex<Option<Session>>, receipts: Option<&Receipts>) -> bool {
    let Some(s) = session.lock().await.take() else { return false };
    if let (Ok(c), Some(r)) = (s.close().await, receipts) {
        r.close(ClosePredicate::closed(&c)).await;
    }
    true
}

/// Signed receipts: a bundle only this process writes, appended as calls come.
struct Receipts {
    signer: plimsoll_attest::KeySigner,
    path: std::path::PathBuf,
    turn: Mutex<()>,
}

impl Receipts {
    fn open(key_file: &std::path::Path, dir: &std::path::Path) -> Result<Receipts, String> {
        let pem = std::fs::read_to_string(key_file)
            .map_err(|e| format!("PLIMSOLL_SIGNING_KEY_FILE {}: {e}", key_file.display()))?;
        let signer =
            plimsoll_attest::KeySigner::from_pem(&pem).map_err(|e| format!("PLIMSOLL_SIGNING_KEY_FILE: {e}"))?;
        std::fs::create_dir_all(dir).map_err(|e| format!("PLIMSOLL_RECEIPTS_DIR {}: {e}", dir.display()))?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
        let path = dir.join(format!("receipts-{now}-{}.jsonl", std::process::id()));
        Ok(Receipts { signer, path, turn: Mutex::new(()) })
    }

    /// Signs a session call (and the session's close, for a fresh run) and appends
    /// them; returns the call's receipt, or why there is none.
    async fn sign(&self, req: &RunRequest, resp: &RunResponse, close: Option<ClosePredicate>) -> Value {
        let _turn = self.turn.lock().await;
        let signed = (|| {
            let request = serde_json::to_vec(req).map_err(|e| e.to_string())?;
            let response = serde_json::to_vec(resp).map_err(|e| e.to_string())?;
            let mut entries = vec![Entry::call(&self.signer, &request, &response, true).map_err(|e| e.to_string())?];
            if let Some(c) = &close {
                entries.push(Entry::close(&self.signer, c).map_err(|e| e.to_string())?);
            }
            plimsoll_attest::append_with(&self.path, &self.signer, false, &entries, Completeness::Progress)
                .map_err(|e| e.to_string())
        })();
        match signed {
            Ok((_, lines)) => json!({"receipt": {"file": self.path.display().to_string(), "line": lines[0]}}),
            Err(e) => json!({"receiptError": e}),
        }
    }

    async fn close(&self, close: ClosePredicate) {
        let _turn = self.turn.lock().await;
        if let Ok(entry) = Entry::close(&self.signer, &close) {
            let _ = plimsoll_attest::append_with(&self.path, &self.signer, false, &[entry], Completeness::Progress);
        }
    }
}

/// Whose sandboxes and records a call may see: the one client of stdio mode, or
/// one approved connection of the HTTPS mode. Handles and record digests are
/// looked up within a scope only, so one connection can neither see nor close
/// another's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scope(String);

impl Scope {
    /// Stdio mode's one client.
    pub fn local() -> Scope {
        Scope(String::new())
    }

    /// The approval `id` of the HTTPS mode.
    pub fn approval(id: &str) -> Scope {
        Scope(format!("approval:{id}"))
    }
}

/// The server's state: the client, the kept sandboxes by scope and handle, the
/// records seen by scope and digest.
pub struct Tools {
    config: Config,
    client: Client,
    sandboxes: Mutex<Kept>,
    records: Mutex<BTreeMap<(Scope, String), RunRecord>>,
    receipts: Option<Receipts>,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools").field("url", &self.config.url).finish_non_exhaustive()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileArg {
    path: String,
    content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunCode {
    language: String,
    code: String,
    #[serde(default)]
    files: Vec<FileArg>,
    timeout_ms: Option<u32>,
    handle: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HandleArg {
    handle: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordArg {
    sha256: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

fn args<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, Answer> {
    serde_json::from_value(v).map_err(|e| Answer::refused("request", format!("invalid arguments: {e}; nothing ran")))
}

fn random_handle() -> Result<String, Answer> {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).map_err(|e| Answer::refused("environment", format!("no randomness for a handle: {e}")))?;
    Ok(format!("sbx-{}", hex::encode(b)))
}

/// The flags a model reads to know what a call kept.
struct Flags {
    state_kept: bool,
    files_persist: bool,
    fresh_sandbox: bool,
    fresh_interpreter: bool,
}

fn result(resp: &RunResponse, cell: &CellResult, flags: Flags, replaced: Option<String>) -> Value {
    let mut v = json!({
        "ran": "yes",
        "exitCode": cell.exit_code,
        "stdout": String::from_utf8_lossy(&cell.stdout),
        "stderr": String::from_utf8_lossy(&cell.stderr),
        "timedOut": cell.timed_out,
        "truncated": cell.stdout_truncated || cell.stderr_truncated,
        "isolation": resp.isolation,
        "recordSha256": resp.record.as_ref().map(|r| r.record_sha256.clone()).unwrap_or_default(),
        "stateKept": flags.state_kept,
        "filesPersist": flags.files_persist,
        "freshSandbox": flags.fresh_sandbox,
        "freshInterpreter": flags.fresh_interpreter,
    });
    if let (Some(why), Some(o)) = (replaced, v.as_object_mut()) {
        o.insert("sandboxReplaced".into(), Value::String(why));
    }
    v
}

impl Tools {
    /// The tools over a client of `config`'s daemon.
    ///
    /// # Errors
    ///
    /// The client could not be made (a bad URL, an unusable token).
    pub fn new(config: Config) -> Result<Tools, String> {
        let client = Client::new(&config.url, config.token.clone()).map_err(|e| e.to_string())?;
        let receipts = match &config.receipts {
            Some((key, dir)) => Some(Receipts::open(key, dir)?),
            None => None,
        };
        Ok(Tools {
            config,
            client,
            sandboxes: Mutex::new(Kept::default()),
            records: Mutex::new(BTreeMap::new()),
            receipts,
        })
    }

    /// The daemon's own tier, as it describes itself.
    ///
    /// # Errors
    ///
    /// The daemon could not be asked, or its answer did not check.
    pub async fn describe(&self) -> Result<String, String> {
        self.client.describe().await.map(|d| d.isolation).map_err(|e| e.to_string())
    }

    /// Adds the call's receipt to `answer` when receipts are on.
    async fn with_receipt(
        &self,
        mut answer: Value,
        req: &RunRequest,
        resp: &RunResponse,
        close: Option<ClosePredicate>,
    ) -> Value {
        if let Some(r) = &self.receipts {
            let receipt = r.sign(req, resp, close).await;
            if let (Some(a), Value::Object(extra)) = (answer.as_object_mut(), receipt) {
                a.extend(extra);
            }
        }
        answer
    }

    fn session_options(&self) -> SessionOptions {
        SessionOptions {
            floor: Some(self.config.floor),
            lifetime: Some(self.config.lifetime),
            software_rule: self.config.software_rule.clone(),
            ..SessionOptions::default()
        }
    }

    /// Calls tool `name` with `arguments`, within `scope`.
    pub async fn call(&self, scope: &Scope, name: &str, arguments: Value) -> Answer {
        if self.sandboxes.lock().await.ended.contains(scope) {
            return Answer::refused("permission", "this connection was revoked; nothing ran");
        }
        let out = match name {
            "run_code" => self.run_code(scope, arguments).await,
            "open_sandbox" => self.open_sandbox(scope, arguments).await,
            "close_sandbox" => self.close_sandbox(scope, arguments).await,
            "get_record" => self.get_record(scope, arguments).await,
            "server_info" => self.server_info(arguments).await,
            other => Err(Answer::refused("request", format!("no tool named {other:?}; nothing ran"))),
        };
        out.unwrap_or_else(|a| a)
    }

    /// Closes every sandbox of `scope` and forgets its records (a revoked
    /// connection's); returns how many sandboxes were closed.
    pub async fn forget(&self, scope: &Scope) -> usize {
        let gone: Vec<Sandbox> = {
            let mut kept = self.sandboxes.lock().await;
            kept.ended.insert(scope.clone());
            let keys: Vec<(Scope, String)> = kept.open.keys().filter(|(s, _)| s == scope).cloned().collect();
            keys.iter().filter_map(|k| kept.open.remove(k)).collect()
        };
        self.records.lock().await.retain(|(s, _), _| s != scope);
        let mut n = 0;
        for s in gone {
            n += usize::from(close_kept(&s.session, self.receipts.as_ref()).await);
        }
        n
    }

    async fn remember(&self, scope: &Scope, resp: &RunResponse) {
        if self.sandboxes.lock().await.ended.contains(scope) {
            return;
        }
        if let Some(r) = &resp.record {
            self.records.lock().await.insert((scope.clone(), r.record_sha256.clone()), r.clone());
        }
    }

    async fn run_code(&self, scope: &Scope, v: Value) -> Result<Answer, Answer> {
        let a: RunCode = args(v)?;
        if !matches!(a.language.as_str(), "python" | "javascript") {
            return Err(Answer::refused(
                "request",
                format!("language {:?} is not python or javascript; nothing ran", a.language),
            ));
        }
        if a.files.len() > MAX_FILES {
            return Err(Answer::refused(
                "request",
                format!("{} files is over {MAX_FILES}; nothing ran", a.files.len()),
            ));
        }
        let files: Vec<ProjectFile> =
            a.files.iter().map(|f| ProjectFile { path: f.path.clone(), content: f.content.clone() }).collect();
        plimsoll_core::validate::files(&files)
            .map_err(|r| Answer::refused("request", format!("{}; nothing ran", r.message)))?;
        let pairs: Vec<(&str, &str)> = a.files.iter().map(|f| (f.path.as_str(), f.content.as_str())).collect();
        let opts = Options {
            timeout_ms: i32::try_from(a.timeout_ms.unwrap_or(self.config.run_timeout_ms)).unwrap_or(i32::MAX),
            floor: Some(self.config.floor),
            ..Options::default()
        };
        let Some(handle) = a.handle else {
            // A fresh sandbox, nothing kept: a session of one call.
            let s = self.client.open_session(&self.session_options()).await.map_err(|e| Answer::from_error(&e))?;
            let req = s.cell_request(&a.language, &a.code, &pairs, &opts);
            let ran = s.call(req.clone()).await;
            let closed = s.close().await;
            let resp = ran.map_err(|e| Answer::from_error(&e))?;
            self.remember(scope, &resp).await;
            let cell = resp.cell.clone().unwrap_or_default();
            let flags = Flags { state_kept: false, files_persist: false, fresh_sandbox: true, fresh_interpreter: true };
            let close = closed.ok().map(|c| ClosePredicate::closed(&c));
            let value = self.with_receipt(result(&resp, &cell, flags, None), &req, &resp, close).await;
            return Ok(Answer::ok(value));
        };
        let unknown = || {
            Answer::refused(
                "request",
                format!("no open sandbox has handle {handle:?} (open_sandbox makes one); nothing ran"),
            )
        };
        let session = {
            let mut kept = self.sandboxes.lock().await;
            let sandbox = kept.open.get_mut(&(scope.clone(), handle.clone())).ok_or_else(unknown)?;
            sandbox.last_used = Instant::now();
            Arc::clone(&sandbox.session)
        };
        // Closed while this call waited for it: as if it had never been.
        let mut guard = session.lock().await;
        let sandbox = guard.as_mut().ok_or_else(unknown)?;
        let req = sandbox.cell_request(&a.language, &a.code, &pairs, &opts);
        let (req, resp, replaced) = match sandbox.call(req.clone()).await {
            Ok(resp) => (req, resp, None),
            Err(Error::SessionEnded { end, detail, .. }) => {
                // The daemon ended the sandbox; the call runs in a replacement and says why.
                let fresh =
                    self.client.open_session(&self.session_options()).await.map_err(|e| Answer::from_error(&e))?;
                let sandbox = guard.insert(fresh);
                let why = if detail.is_empty() { end.name().to_string() } else { format!("{}: {detail}", end.name()) };
                let req = sandbox.cell_request(&a.language, &a.code, &pairs, &opts);
                let resp = sandbox.call(req.clone()).await.map_err(|e| Answer::from_error(&e))?;
                (req, resp, Some(why))
            }
            Err(e) => return Err(Answer::from_error(&e)),
        };
        drop(guard);
        self.remember(scope, &resp).await;
        let cell = resp.cell.clone().unwrap_or_default();
        let flags = Flags {
            state_kept: replaced.is_none() && !cell.interpreter_started,
            files_persist: true,
            fresh_sandbox: replaced.is_some(),
            fresh_interpreter: cell.interpreter_started,
        };
        let value = self.with_receipt(result(&resp, &cell, flags, replaced), &req, &resp, None).await;
        Ok(Answer::ok(value))
    }

    async fn open_sandbox(&self, scope: &Scope, v: Value) -> Result<Answer, Answer> {
        let _: NoArgs = args(v)?;
        self.room(scope).await?;
        let handle = random_handle()?;
        let session = self.client.open_session(&self.session_options()).await.map_err(|e| Answer::from_error(&e))?;
        let isolation = session.opened().isolation.clone();
        // The lock is not held while the daemon opens the session, so the
        // room is looked at again before the sandbox is kept.
        let unkept = {
            let mut kept = self.sandboxes.lock().await;
            let why = if kept.ended.contains(scope) {
                Some(Answer::refused("permission", "this connection was revoked; nothing was kept"))
            } else {
                self.full(&kept, scope).err()
            };
            match why {
                None => {
                    let sandbox = Sandbox { session: Arc::new(Mutex::new(Some(session))), last_used: Instant::now() };
                    kept.open.insert((scope.clone(), handle.clone()), sandbox);
                    None
                }
                Some(why) => Some((why, session)),
            }
        };
        if let Some((why, session)) = unkept {
            let _ = session.close().await;
            return Err(why);
        }
        Ok(Answer::ok(json!({
            "handle": handle,
            "isolation": isolation,
            "lifetimeSeconds": self.config.lifetime.as_secs(),
        })))
    }

    /// Whether `scope` may open another sandbox.
    async fn room(&self, scope: &Scope) -> Result<(), Answer> {
        let kept = self.sandboxes.lock().await;
        if kept.ended.contains(scope) {
            return Err(Answer::refused("permission", "this connection was revoked; nothing ran"));
        }
        self.full(&kept, scope)
    }

    /// The capacity refusal, listing the open handles, when `scope` has its
    /// [`Config::max_sandboxes`].
    fn full(&self, kept: &Kept, scope: &Scope) -> Result<(), Answer> {
        let mine: Vec<(&String, &Sandbox)> =
            kept.open.iter().filter(|((s, _), _)| s == scope).map(|((_, h), s)| (h, s)).collect();
        if mine.len() >= self.config.max_sandboxes {
            let open: Vec<Value> = mine
                .iter()
                .map(|(h, s)| json!({"handle": h, "idleSeconds": s.last_used.elapsed().as_secs()}))
                .collect();
            let names: Vec<String> =
                mine.iter().map(|(h, s)| format!("{h} (idle {} s)", s.last_used.elapsed().as_secs())).collect();
            let message = format!(
                "at most {} sandboxes may be open (PLIMSOLL_MAX_SANDBOXES); nothing ran and nothing was deleted; close one by its handle to open another: {}",
                self.config.max_sandboxes,
                names.join(", ")
            );
            return Err(Answer {
                value: json!({"ran": "no", "reason": "capacity", "message": message, "open": open}),
                error: true,
            });
        }
        Ok(())
    }

    async fn close_sandbox(&self, scope: &Scope, v: Value) -> Result<Answer, Answer> {
        let a: HandleArg = args(v)?;
        let removed = self.sandboxes.lock().await.open.remove(&(scope.clone(), a.handle.clone()));
        let closed = match removed {
            Some(s) => close_kept(&s.session, self.receipts.as_ref()).await,
            None => false,
        };
        Ok(Answer::ok(json!({"handle": a.handle, "closed": closed})))
    }

    async fn get_record(&self, scope: &Scope, v: Value) -> Result<Answer, Answer> {
        let a: RecordArg = args(v)?;
        match self.records.lock().await.get(&(scope.clone(), a.sha256.clone())) {
            Some(r) => Ok(Answer::ok(json!({"record": r}))),
            None => Err(Answer::refused(
                "request",
                format!("no record {} was seen by this server since it started", a.sha256),
            )),
        }
    }

    async fn server_info(&self, v: Value) -> Result<Answer, Answer> {
        let _: NoArgs = args(v)?;
        let d = self.client.describe().await.map_err(|e| Answer::from_error(&e))?;
        Ok(Answer::ok(json!({
            "provider": d.sandbox,
            "isolation": d.isolation,
            "floor": self.config.floor.as_str(),
            "maxSandboxes": self.config.max_sandboxes,
            "sandboxLifetimeSeconds": self.config.lifetime.as_secs(),
            "runTimeoutMs": self.config.run_timeout_ms,
            "receipts": self.receipts.is_some(),
            "softwareIdentity": self.config.software_rule.as_ref().map(|r| r.identities.join(",")).unwrap_or_default(),
            "toolsSha256": crate::schema::tools_digest(),
        })))
    }
}
