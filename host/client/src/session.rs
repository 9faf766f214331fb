//! Sessions: one sandbox kept for many calls, with the daemon's chain of records
//! followed call by call.
//!
//! Calls are serialised here as they are on the daemon, so the chain this client
//! follows is the daemon's: a record that does not continue it means someone else
//! holding the session ID made a call, and is an error ([`Mismatch::Chain`]). After
//! a call that may have run without a checkable answer the session sends nothing
//! more, since the daemon's chain may have moved on without this client.

use std::time::Duration;

use hmac::{Hmac, Mac};
use plimsoll_core::record;
use plimsoll_core::wire::session::check_owner;
use plimsoll_core::wire::{
    CellRun, CloseSessionRequest, CloseSessionResponse, JavaScriptRun, Kind, OpenSessionRequest, OpenSessionResponse,
    ProjectFile, RunRecord, RunRequest, RunResponse, SessionEnd, SessionRunRequest, SessionRunResponse, SoftwareRule,
    from_json,
};
use plimsoll_core::{Floor, Refusal, Tier, protocol, validate};
use sha2::{Digest, Sha256};
use tokio::sync::Mutex;

use crate::{Client, Error, Mismatch, Options, check_request, checked};

/// What a session is opened with.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// The weakest tier every call accepts.
    pub floor: Option<Floor>,
    /// A rule for the session's selected software; every call carries it.
    pub software_rule: Option<SoftwareRule>,
    /// Shortens the daemon's session lifetime.
    pub lifetime: Option<Duration>,
    /// Shortens the daemon's idle timeout.
    pub idle_timeout: Option<Duration>,
    /// The languages the cells will use (a hint for a warm pool).
    pub languages: Vec<String>,
    /// The end user the session is for. Sent only as a digest keyed by this
    /// client's token, the same in every official client.
    pub owner: Option<String>,
    /// An opaque correlation ID for the daemon's audit line.
    pub trace_id: Option<String>,
    /// A grant profile (one that allows sessions) every call of the session holds.
    pub grant_profile: Option<String>,
}

/// An owner as the daemon receives it: hex(HMAC-SHA256(key = SHA-256("plimsoll
/// session owner key v2\n" + token), "plimsoll session owner v2\n" + owner)).
pub fn owner_digest(token: Option<&str>, owner: &str) -> String {
    let key = Sha256::digest(format!("plimsoll session owner key v2\n{}", token.unwrap_or("")).as_bytes());
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&key) else { unreachable!("HMAC takes a key of any length") };
    mac.update(format!("plimsoll session owner v2\n{owner}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

#[derive(Debug, Default)]
struct Chain {
    calls: u64,
    last: String,
    stopped: Option<String>,
    ended: Option<(SessionEnd, String)>,
    closed: Option<CloseSessionResponse>,
}

/// An open session. The session ID is a capability: it is sent to the daemon and
/// appears nowhere else, not in `Debug` and not in errors.
pub struct Session {
    client: Client,
    id: String,
    opened: OpenSessionResponse,
    floor: Option<Floor>,
    rule: Option<SoftwareRule>,
    chain: Mutex<Chain>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("fingerprint", &self.opened.session)
            .field("sandbox", &self.opened.sandbox)
            .field("isolation", &self.opened.isolation)
            .finish_non_exhaustive()
    }
}

fn millis(d: Duration, what: &str) -> Result<u64, Error> {
    let ms = d.as_millis();
    if ms == 0 {
        return Err(
            Refusal::request(format!("invalid request: a {what} under 1 ms allows nothing; leave it unset")).into()
        );
    }
    u64::try_from(ms).map_err(|_| Refusal::request(format!("invalid request: the {what} is too long")).into())
}

impl Client {
    /// Opens a session and checks what the daemon says it opened: the fingerprint
    /// is the ID's, the tier meets the floor, the software is in the rule. A session
    /// that fails a check is closed before the error returns.
    ///
    /// # Errors
    ///
    /// [`Error`]: refused (nothing opened), or a mismatch (the session was closed).
    pub async fn open_session(&self, opts: &SessionOptions) -> Result<Session, Error> {
        let mut req = OpenSessionRequest {
            protocol: protocol::NUMBER,
            minimum_isolation: opts.floor.map(|f| f.as_str().to_string()).unwrap_or_default(),
            trace_id: opts.trace_id.clone().unwrap_or_default(),
            software_rule: opts.software_rule.clone(),
            languages: opts.languages.clone(),
            grant_profile: opts.grant_profile.clone().unwrap_or_default(),
            ..OpenSessionRequest::default()
        };
        if let Some(l) = opts.lifetime {
            req.lifetime_ms = i64::try_from(millis(l, "lifetime")?).unwrap_or(i64::MAX);
        }
        if let Some(i) = opts.idle_timeout {
            req.idle_timeout_ms = u32::try_from(millis(i, "idle timeout")?).unwrap_or(u32::MAX);
        }
        if let Some(rule) = &req.software_rule {
            validate::software_rule(rule)?;
        }
        for l in &req.languages {
            validate::Language::parse(l)?;
        }
        if let Some(owner) = &opts.owner {
            if owner.is_empty() {
                return Err(
                    Refusal::request("invalid request: owner must not be empty; leave it unset for none").into()
                );
            }
            req.owner = owner_digest(self.token.as_deref(), owner);
            check_owner(&req.owner).map_err(Refusal::request)?;
        }
        let body = serde_json::to_vec(&req).map_err(|e| Error::Config(e.to_string()))?;
        let bytes = self.call("OpenSession", body).await?;
        let opened: OpenSessionResponse = from_json(&bytes).map_err(|e| Error::Transport {
            sent: true,
            message: format!("the OpenSession answer is malformed: {e}"),
        })?;
        let session = Session {
            client: self.clone(),
            id: opened.session_id.clone(),
            opened,
            floor: opts.floor,
            rule: opts.software_rule.clone().filter(|r| !r.mode.is_empty()),
            chain: Mutex::new(Chain::default()),
        };
        let o = &session.opened;
        let problem = if o.session_id.len() != 32 || o.session != record::session_fingerprint(&o.session_id) {
            Some((Mismatch::Chain, "the daemon's session fingerprint does not match its session ID".to_string()))
        } else if let Some(f) = session.floor.filter(|f| !Tier::from_wire(&o.isolation).meets(*f)) {
            Some((
                Mismatch::IsolationEvidence,
                format!("the session opened at {}, below the requested minimum {f}", o.isolation),
            ))
        } else if session.rule.as_ref().is_some_and(|r| !r.identities.contains(&o.software_identity)) {
            Some((Mismatch::Record, "the session's selected software is outside the requested rule".to_string()))
        } else {
            None
        };
        if let Some((kind, message)) = problem {
            let _ = session.close().await;
            return Err(Error::DataLoss {
                kind,
                message: format!("{message}; the session was closed"),
                response: None,
            });
        }
        Ok(session)
    }
}

impl Session {
    /// What the daemon said at open (the session ID included: keep it private).
    pub fn opened(&self) -> &OpenSessionResponse {
        &self.opened
    }

    /// The SHA-256 of the session ID, as the session's records carry it.
    pub fn fingerprint(&self) -> &str {
        &self.opened.session
    }

    /// The calls this client has seen the session execute, and the last record's digest.
    pub async fn position(&self) -> (u64, String) {
        let c = self.chain.lock().await;
        (c.calls, c.last.clone())
    }

    /// The session's end, once an answer reported it.
    pub async fn ended(&self) -> Option<(SessionEnd, String)> {
        self.chain.lock().await.ended.clone()
    }

    /// Runs `code` in the session's kept interpreter for `language` after writing
    /// `files` into its work directory.
    ///
    /// # Errors
    ///
    /// [`Error`]; see [`Error::may_have_run`].
    pub async fn run_cell(
        &self,
        language: &str,
        code: &str,
        files: &[(&str, &str)],
        opts: &Options,
    ) -> Result<RunResponse, Error> {
        self.call(self.cell_request(language, code, files, opts)).await
    }

    /// The request [`Session::run_cell`] sends, as the equivalent `RunRequest` (no
    /// session ID): what a harness stores to re-check the answer later.
    pub fn cell_request(&self, language: &str, code: &str, files: &[(&str, &str)], opts: &Options) -> RunRequest {
        let cell = CellRun {
            language: language.to_string(),
            code: code.to_string(),
            files: files.iter().map(|(p, c)| ProjectFile { path: p.to_string(), content: c.to_string() }).collect(),
        };
        RunRequest { cell: Some(cell), ..self.envelope(opts) }
    }

    /// Runs a snippet in the session's sandbox.
    ///
    /// # Errors
    ///
    /// [`Error`]; see [`Error::may_have_run`].
    pub async fn run_javascript(&self, code: &str, opts: &Options) -> Result<RunResponse, Error> {
        let js = JavaScriptRun { code: code.to_string(), grant_profile: String::new() };
        self.call(RunRequest { javascript: Some(js), ..self.envelope(opts) }).await
    }

    /// The call's envelope: its floor is the stronger of the call's and the
    /// session's, its rule the session's unless the call narrows it.
    fn envelope(&self, opts: &Options) -> RunRequest {
        let floor = Floor::stronger(opts.floor, self.floor);
        RunRequest {
            protocol: protocol::NUMBER,
            minimum_isolation: floor.map(|f| f.as_str().to_string()).unwrap_or_default(),
            trace_id: opts.trace_id.clone().unwrap_or_default(),
            timeout_ms: opts.timeout_ms,
            software_rule: opts.software_rule.clone().or_else(|| self.rule.clone()),
            ..RunRequest::default()
        }
    }

    /// Sends one call (a snippet, project or cell in `req`) and checks its answer and
    /// its place in the chain.
    ///
    /// # Errors
    ///
    /// [`Error`]; a record out of the chain is [`Mismatch::Chain`].
    pub async fn call(&self, req: RunRequest) -> Result<RunResponse, Error> {
        check_request(&req)?;
        let kind = req.payload().map_err(|e| Refusal::request(format!("invalid request: {e}")))?.kind();
        if kind == Kind::Module {
            return Err(Refusal::request("invalid request: module tables do not run in sessions").into());
        }
        let call = SessionRunRequest {
            protocol: protocol::NUMBER,
            minimum_isolation: req.minimum_isolation.clone(),
            trace_id: req.trace_id.clone(),
            timeout_ms: req.timeout_ms,
            session_id: self.id.clone(),
            software_rule: req.software_rule.clone(),
            javascript: req.javascript.clone(),
            project: req.project.clone(),
            cell: req.cell.clone(),
        };
        let digest = record::request_digest(&call.as_run_request());
        let mut chain = self.chain.lock().await;
        if chain.closed.is_some() {
            return Err(Refusal::request("this session was closed; nothing was sent").into());
        }
        if let Some(why) = &chain.stopped {
            return Err(Refusal::request(format!(
                "an earlier call of this session ended without an answer this client could check ({why}); it may have run, so nothing more is sent on this session: open a new one"
            ))
            .into());
        }
        let body = serde_json::to_vec(&call).map_err(|e| Error::Config(e.to_string()))?;
        let outcome = self.exchange(&mut chain, &req, kind, &digest, body).await;
        if let Err(e) = &outcome
            && e.may_have_run()
            && !matches!(e, Error::Unanswered { .. })
        {
            chain.stopped.get_or_insert_with(|| e.to_string());
        }
        outcome
    }

    async fn exchange(
        &self,
        chain: &mut Chain,
        req: &RunRequest,
        kind: Kind,
        digest: &str,
        body: Vec<u8>,
    ) -> Result<RunResponse, Error> {
        let bytes = match self.client.call("SessionRun", body).await {
            Ok(b) => b,
            Err(Error::SessionEnded { end, detail, reason, message }) => {
                chain.ended = Some((end, detail.clone()));
                return Err(Error::SessionEnded { end, detail, reason, message });
            }
            Err(Error::Unanswered { code, message, record }) => {
                self.check_unanswered(chain, req, digest, &record)?;
                chain.calls = record.sequence;
                chain.last = record.record_sha256.clone();
                return Err(Error::Unanswered { code, message, record });
            }
            Err(e) => return Err(e),
        };
        let answer: SessionRunResponse = from_json(&bytes).map_err(|e| Error::Transport {
            sent: true,
            message: format!("the SessionRun answer is malformed: {e}"),
        })?;
        if answer.ended != SessionEnd::Open {
            chain.ended = Some((answer.ended, answer.end_detail.clone()));
        }
        let Some(resp) = answer.run else {
            return Err(Error::DataLoss {
                kind: Mismatch::ResultKind,
                message: "the session call's answer carries no run".into(),
                response: None,
            });
        };
        let resp = checked(req, kind, digest, resp)?;
        let Some(rec) = resp.record.as_ref() else { unreachable!("a checked answer carries its record") };
        if rec.session != self.opened.session || rec.sequence != chain.calls + 1 || rec.previous_sha256 != chain.last {
            let message = format!(
                "the session's chain is broken: call {} after {:?}, this client's last was call {}, {:?}",
                rec.sequence, rec.previous_sha256, chain.calls, chain.last
            );
            return Err(Error::DataLoss { kind: Mismatch::Chain, message, response: Some(Box::new(resp)) });
        }
        chain.calls = rec.sequence;
        chain.last = rec.record_sha256.clone();
        Ok(resp)
    }

    /// The record an unanswered call's error carries: no result, a Connect code,
    /// the request sent, the rule, its own digest, the floor, the evidence the
    /// session stated at open, and its place in the chain.
    fn check_unanswered(&self, chain: &Chain, req: &RunRequest, digest: &str, r: &RunRecord) -> Result<(), Error> {
        let fail = |kind: Mismatch, message: String| Error::DataLoss { kind, message, response: None };
        if r.version != record::VERSION {
            return Err(fail(Mismatch::Version, format!("unanswered record version {}", r.version)));
        }
        if !r.result_sha256.is_empty() || plimsoll_core::wire::connect::Code::from_name(&r.unanswered).is_none() {
            return Err(fail(Mismatch::Record, "an unanswered call's record states a result or no error code".into()));
        }
        if r.request_sha256 != digest {
            return Err(fail(
                Mismatch::Record,
                format!("request digest {}, the request sent digests to {digest}", r.request_sha256),
            ));
        }
        let rule = req.software_rule.as_ref().filter(|r| !r.mode.is_empty());
        if r.software_rule_id != record::rule_id(rule) {
            return Err(fail(Mismatch::Record, "the unanswered record's software rule is not the request's".into()));
        }
        if record::record_digest(r).ok().as_deref() != Some(r.record_sha256.as_str()) {
            return Err(fail(Mismatch::Record, "the unanswered record's own digest does not verify".into()));
        }
        if let Some(floor) = validate::floor(&req.minimum_isolation).ok().flatten()
            && !Tier::from_wire(&r.isolation).meets(floor)
        {
            return Err(fail(
                Mismatch::IsolationEvidence,
                format!("the unanswered record states {}, below {floor}", r.isolation),
            ));
        }
        let o = &self.opened;
        if (r.provider.as_str(), r.isolation.as_str(), r.software_identity.as_str())
            != (o.sandbox.as_str(), o.isolation.as_str(), o.software_identity.as_str())
        {
            return Err(fail(
                Mismatch::Record,
                "the unanswered record's evidence is not what the session stated at open".into(),
            ));
        }
        if r.session != o.session || r.sequence != chain.calls + 1 || r.previous_sha256 != chain.last {
            return Err(fail(
                Mismatch::Chain,
                format!(
                    "the session's chain is broken: call {} after {:?}, this client's last was call {}, {:?}",
                    r.sequence, r.previous_sha256, chain.calls, chain.last
                ),
            ));
        }
        Ok(())
    }

    /// Ends the session (or collects one that ended by itself) and compares the
    /// daemon's count and last digest with the chain this client followed.
    /// Closing again returns the same answer without another request.
    ///
    /// # Errors
    ///
    /// [`Mismatch::Chain`] when the daemon counted calls this client did not make.
    pub async fn close(&self) -> Result<CloseSessionResponse, Error> {
        let mut chain = self.chain.lock().await;
        if let Some(done) = &chain.closed {
            return Ok(done.clone());
        }
        let req = CloseSessionRequest { protocol: protocol::NUMBER, session_id: self.id.clone() };
        let body = serde_json::to_vec(&req).map_err(|e| Error::Config(e.to_string()))?;
        let bytes = self.client.call("CloseSession", body).await?;
        let done: CloseSessionResponse = from_json(&bytes).map_err(|e| Error::Transport {
            sent: true,
            message: format!("the CloseSession answer is malformed: {e}"),
        })?;
        if done.session != self.opened.session || done.calls != chain.calls || done.last_record_sha256 != chain.last {
            return Err(Error::DataLoss {
                kind: Mismatch::Chain,
                message: format!(
                    "the daemon counts {} calls ending {:?}, this client saw {} ending {:?}",
                    done.calls, done.last_record_sha256, chain.calls, chain.last
                ),
                response: None,
            });
        }
        if chain.ended.is_none() {
            chain.ended = Some((done.ended, String::new()));
        }
        chain.closed = Some(done.clone());
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_digests_match_the_published_clients() {
        // Computed with Python's hmac and hashlib, as plimsoll-client's _owner_digest does.
        assert_eq!(
            owner_digest(Some("t"), "alice"),
            "d43615955599810f1e9bb19804f45f8410c941c53176ef32fd26424c3747ae41"
        );
        assert_eq!(
            owner_digest(None, "bob@example.org"),
            "b449a1f215a5349d9b0b8d9e4d502dcf56693b55314320a6d57261f7d756e5f6"
        );
    }
}
