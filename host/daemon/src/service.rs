//! The daemon's core: what each procedure does, in the pipeline's order. No HTTP
//! types here: the HTTP layer authenticates, bounds and reads the body, then hands
//! over the procedure, the caller and the bytes.
//!
//! Run: protocol number (before the payload is read) -> decode -> validate -> floor
//! against the provider's current evidence -> admission -> provider -> record.
//! Every refusal before the provider carries the not-dispatched mark.

use std::sync::Arc;

use plimsoll_core::dispatch::{self, Failure, Started};
use plimsoll_core::protocol::{self, Mismatch};
use plimsoll_core::provider::{Description, Provider};
use plimsoll_core::validate;
use plimsoll_core::wire::connect::{Code, ErrorBody};
use plimsoll_core::wire::json::de_u32;
use plimsoll_core::wire::{DescribeResponse, Payload, RunRequest, RunResources, from_json};
use plimsoll_core::{Reason, Refusal, Tier};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::admission::{Limiter, Permit};
use crate::auth::{AuthError, Principal, SCOPE_RUN, Verifier};
use crate::config::SessionSettings;
use crate::grants::{self, DaemonGrants};
use crate::log::{Log, cut};
use crate::metrics::Metrics;
use crate::providers::DISABLED;
use crate::sessions::Sessions;

/// The text session calls get on a daemon without sessions.
pub const NO_SESSIONS: &str =
    "sessions are not available: this daemon has no sessions (the provider has none, or SANDBOX_MAX_SESSIONS is unset)";

/// The procedures of `plimsoll.v1.SandboxService`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Procedure {
    /// `Describe`
    Describe,
    /// `Run`
    Run,
    /// `OpenSession`
    OpenSession,
    /// `SessionRun`
    SessionRun,
    /// `CloseSession`
    CloseSession,
}

impl Procedure {
    /// The procedure a request path names.
    pub fn from_path(path: &str) -> Option<Procedure> {
        match path.strip_prefix("/plimsoll.v1.SandboxService/")? {
            "Describe" => Some(Procedure::Describe),
            "Run" => Some(Procedure::Run),
            "OpenSession" => Some(Procedure::OpenSession),
            "SessionRun" => Some(Procedure::SessionRun),
            "CloseSession" => Some(Procedure::CloseSession),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Procedure::Describe => "Describe",
            Procedure::Run => "Run",
            Procedure::OpenSession => "OpenSession",
            Procedure::SessionRun => "SessionRun",
            Procedure::CloseSession => "CloseSession",
        }
    }
}

/// An error answer: its Connect code and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    /// The Connect code (decides the HTTP status).
    pub code: Code,
    /// The JSON body.
    pub body: ErrorBody,
}

impl RpcError {
    /// A refusal: nothing ran, marked with its reason.
    pub fn refused(code: Code, reason: Reason, message: impl Into<String>) -> RpcError {
        RpcError { code, body: ErrorBody::new(code, message).not_dispatched(reason) }
    }

    /// A refusal made in a handler, with the code its reason maps to.
    pub fn from_refusal(r: Refusal) -> RpcError {
        RpcError::refused(Code::for_reason(r.reason), r.reason, r.message)
    }

    /// The not-dispatched reason, if marked.
    pub fn reason(&self) -> Option<Reason> {
        self.body.reason()
    }
}

/// What a procedure answers: a JSON message, or an error.
pub type Reply = Result<Vec<u8>, RpcError>;

/// The daemon: its provider, admission, counters and log.
pub struct Daemon {
    provider: Arc<dyn Provider>,
    describe: Description,
    disabled: bool,
    verifier: Verifier,
    limiter: Arc<Limiter>,
    metrics: Arc<Metrics>,
    log: Log,
    sessions: Option<Arc<Sessions>>,
    grants: Option<Arc<DaemonGrants>>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon").field("provider", &self.describe.name).field("verifier", &self.verifier).finish()
    }
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default, deserialize_with = "de_u32")]
    protocol: u32,
}

#[derive(serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

/// Admits one call of `caller`, or refuses it `capacity` naming the limit and
/// counting the shed.
pub fn admit(limiter: &Arc<Limiter>, metrics: &Metrics, caller: &str) -> Result<Permit, RpcError> {
    limiter.acquire(caller).map_err(|shed| {
        metrics.shed(shed.label());
        RpcError::refused(Code::ResourceExhausted, Reason::Capacity, shed.to_string())
    })
}

/// An internal fault: the caller sees an ID, `log` holds the detail.
pub fn internal_error(log: &Log, detail: &str) -> RpcError {
    let id = error_id();
    log.error("internal error", &[("error_id", json!(id)), ("detail", json!(cut(detail)))]);
    RpcError {
        code: Code::Internal,
        body: ErrorBody::new(Code::Internal, format!("internal error {id}; the daemon's log holds its detail")),
    }
}

/// A fresh internal-error ID: 16 hex characters.
fn error_id() -> String {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_err() {
        // Without randomness the ID is still unique enough to find in the log.
        b = (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos() as u64)
            .to_be_bytes();
    }
    hex::encode(b)
}

impl Daemon {
    /// A daemon over `provider`.
    pub fn new(
        provider: Arc<dyn Provider>,
        verifier: Verifier,
        limiter: Arc<Limiter>,
        metrics: Arc<Metrics>,
        log: Log,
    ) -> Daemon {
        let describe = provider.describe();
        let disabled = describe.name == "disabled";
        Daemon { provider, describe, disabled, verifier, limiter, metrics, log, sessions: None, grants: None }
    }

    /// Turns grants on: runs may name one of `grants`' profiles. Call it before
    /// [`Daemon::with_sessions`], which hands them to the sessions.
    pub fn with_grants(mut self, grants: Arc<DaemonGrants>) -> Daemon {
        self.grants = Some(grants);
        self
    }

    /// The admission limiter (for the in-flight gauge).
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// The provider (for the figures it reports on `/metrics`).
    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The provider's current tier.
    pub fn tier(&self) -> Tier {
        self.provider.tier()
    }

    /// Re-runs the provider's preflight (for `/readyz`).
    pub fn ready(&self) -> bool {
        self.provider.preflight().is_ok()
    }

    /// An internal fault: the caller sees an ID, the log holds the detail.
    pub fn internal(&self, detail: &str) -> RpcError {
        internal_error(&self.log, detail)
    }

    /// Turns sessions on with `settings`, when they are on (`SANDBOX_MAX_SESSIONS`
    /// above 0) and the provider keeps sessions; otherwise session calls are refused
    /// `unsupported`. Starts the reaper, so call it inside the runtime.
    pub fn with_sessions(mut self, settings: SessionSettings) -> Daemon {
        self.sessions = Sessions::new(
            Arc::clone(&self.provider),
            self.grants.clone(),
            settings,
            Arc::clone(&self.limiter),
            Arc::clone(&self.metrics),
            self.log,
        );
        if let Some(s) = &self.sessions {
            s.spawn_reaper();
        }
        self
    }

    /// The sessions, when they are on.
    pub fn sessions(&self) -> Option<&Arc<Sessions>> {
        self.sessions.as_ref()
    }

    /// Authenticates and authorises a call before its body is read.
    ///
    /// # Errors
    ///
    /// Unauthenticated or permission-denied refusals, marked `permission`.
    pub fn authorize(&self, authorization: Option<&[u8]>) -> Result<Principal, RpcError> {
        let principal = self
            .verifier
            .verify(authorization)
            .map_err(|e: AuthError| RpcError::refused(Code::Unauthenticated, Reason::Permission, e.to_string()))?;
        if !principal.has_scope(SCOPE_RUN) {
            return Err(RpcError::refused(
                Code::PermissionDenied,
                Reason::Permission,
                format!("token lacks required scope {SCOPE_RUN:?}"),
            ));
        }
        Ok(principal)
    }

    /// Runs one procedure for `caller` with the request body `body`.
    pub async fn handle(self: &Arc<Self>, procedure: Procedure, caller: &Principal, body: &[u8]) -> Reply {
        let reply = match procedure {
            Procedure::Describe => self.describe(body),
            Procedure::Run => Arc::clone(self).run(caller, body).await,
            Procedure::OpenSession | Procedure::SessionRun | Procedure::CloseSession => {
                self.session_procedure(procedure, caller, body).await
            }
        };
        if let Err(e) = &reply
            && e.reason().is_some()
        {
            self.metrics.refused();
        }
        reply
    }

    fn describe(&self, body: &[u8]) -> Reply {
        if !body.is_empty() {
            from_json::<Empty>(body).map_err(|e| {
                RpcError::refused(
                    Code::InvalidArgument,
                    Reason::Request,
                    format!("invalid request: DescribeRequest: {e}"),
                )
            })?;
        }
        let d = &self.describe;
        let resp = DescribeResponse {
            sandbox: d.name.clone(),
            isolation: self.provider.tier().as_str().to_string(),
            supports_project: d.project.is_some(),
            supports_javascript_grants: self.grants.is_some() && self.provider.grant_support().snippets,
            supports_project_grants: self.grants.is_some() && self.provider.grant_support().projects,
            supports_module: d.module.is_some(),
            protocol: protocol::NUMBER,
            javascript_environment: d.snippet.as_ref().map(|k| k.environment()),
            project_environment: d.project.as_ref().map(|k| k.environment()),
            module_environment: d.module.as_ref().map(|k| k.environment()),
            resources: Some(RunResources { memory_mb: d.memory_mb, ..RunResources::default() }),
            policy: d.policy.clone(),
            engine: self.provider.engine_mode().unwrap_or_default().to_string(),
            ..DescribeResponse::default()
        };
        let mut resp = resp;
        if let Some(s) = &self.sessions {
            let settings = s.settings();
            resp.supports_sessions = true;
            resp.session_lifetime_ms = u32::try_from(settings.lifetime.as_millis()).unwrap_or(u32::MAX);
            resp.session_idle_timeout_ms = u32::try_from(settings.idle.as_millis()).unwrap_or(u32::MAX);
            resp.session_environment = Some(s.support().environment());
            resp.max_sessions_per_caller = settings.per_caller;
            resp.max_sessions_per_owner = settings.per_owner;
        }
        serde_json::to_vec(&resp).map_err(|e| self.internal(&format!("encoding DescribeResponse: {e}")))
    }

    /// Checks the protocol number before anything else of the body is read.
    fn protocol(body: &[u8], message: &str) -> Result<(), RpcError> {
        if body.trim_ascii_start().first() != Some(&b'{') {
            return Err(RpcError::refused(
                Code::InvalidArgument,
                Reason::Request,
                format!("invalid request: {message} must be a JSON object"),
            ));
        }
        let env: Envelope = serde_json::from_slice(body).map_err(|e| {
            RpcError::refused(
                Code::InvalidArgument,
                Reason::Request,
                format!("invalid request: {message} is not JSON: {e}"),
            )
        })?;
        protocol::check(env.protocol).map_err(|m| match m {
            Mismatch::Missing => RpcError::refused(Code::InvalidArgument, Reason::Protocol, m.to_string()),
            Mismatch::Other(_) => RpcError::refused(Code::Unimplemented, Reason::Protocol, m.to_string()),
        })
    }

    async fn session_procedure(&self, procedure: Procedure, caller: &Principal, body: &[u8]) -> Reply {
        Self::protocol(body, &format!("{}Request", procedure.name()))?;
        if self.disabled {
            return Err(RpcError::refused(Code::FailedPrecondition, Reason::Unsupported, DISABLED));
        }
        let Some(sessions) = &self.sessions else {
            return Err(RpcError::refused(Code::Unimplemented, Reason::Unsupported, NO_SESSIONS));
        };
        match procedure {
            Procedure::OpenSession => sessions.open(caller, body).await,
            Procedure::SessionRun => sessions.call(caller, body).await,
            _ => sessions.close(caller, body).await,
        }
    }

    async fn run(self: Arc<Self>, caller: &Principal, body: &[u8]) -> Reply {
        let started = Started::now();
        Self::protocol(body, "RunRequest")?;
        let mut req: RunRequest = from_json(body).map_err(|e| {
            RpcError::refused(Code::InvalidArgument, Reason::Request, format!("invalid request: RunRequest: {e}"))
        })?;
        let mut audit = vec![("op", json!("Run")), ("caller", json!(caller.id))];
        if !req.trace_id.is_empty() {
            if validate::trace_id_ok(&req.trace_id) {
                audit.push(("trace_id", json!(req.trace_id)));
            } else {
                // Dropped whole, never refused: it is for the caller's joins only.
                req.trace_id.clear();
                audit.push(("trace_id_rejected", json!(true)));
            }
        }
        let msg = match req.payload() {
            Ok(Payload::JavaScript(js)) => {
                audit.push(("code_bytes", json!(js.code.len())));
                "code run"
            }
            Ok(Payload::Project(p)) => {
                audit.push(("files", json!(p.files.len())));
                audit.push(("steps", json!(p.steps.len())));
                audit.push(("total_bytes", json!(p.files.iter().map(|f| f.content.len()).sum::<usize>())));
                "project run"
            }
            Ok(Payload::Module(m)) => {
                // The table's shape, never a parameter value.
                audit.push(("model", json!(m.model)));
                audit.push(("rows", json!(m.rows.len())));
                audit.push(("row_width", json!(m.rows.first().map_or(0, |r| r.values.len()))));
                audit.push(("max_steps", json!((m.end_time / m.step) as i64 + 2)));
                "module run"
            }
            Ok(Payload::Cell(_)) | Err(_) => "code run",
        };
        let reply = self.run_admitted(caller, req, &started).await;
        audit.push(("sandbox", json!(self.describe.name)));
        audit.push(("duration_ms", json!(started.elapsed().as_millis() as u64)));
        match &reply {
            Ok((_, fields)) => {
                audit.extend(fields.iter().cloned());
                self.log.info(msg, &audit);
            }
            Err(e) => {
                match e.reason() {
                    Some(r) => audit.push(("not_dispatched", json!(r.as_str()))),
                    None => audit.push(("failed", json!(true))),
                }
                audit.push(("code", json!(e.code.as_str())));
                self.log.info(&format!("{msg} failed"), &audit);
            }
        }
        reply.map(|(bytes, _)| bytes)
    }

    async fn run_admitted(
        self: &Arc<Self>,
        caller: &Principal,
        req: RunRequest,
        started: &Started,
    ) -> Result<(Vec<u8>, Vec<(&'static str, Value)>), RpcError> {
        if self.disabled {
            return Err(RpcError::refused(Code::FailedPrecondition, Reason::Unsupported, DISABLED));
        }
        let prepared = dispatch::prepare(&self.describe, self.provider.tier(), req).map_err(RpcError::from_refusal)?;
        let profile = match prepared.grant_profile() {
            "" => None,
            name => {
                dispatch::check_grant_support(&self.describe.name, self.provider.grant_support(), &prepared)
                    .map_err(RpcError::from_refusal)?;
                let grants = self.grants.as_ref().ok_or_else(|| RpcError::from_refusal(grants::no_profiles(name)))?;
                Some(grants.select(name, &caller.id).map_err(RpcError::from_refusal)?)
            }
        };
        let permit = admit(&self.limiter, &self.metrics, &caller.id)?;
        self.metrics.run();
        let daemon = Arc::clone(self);
        let started = *started;
        let subject = caller.id.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            let opened = match (profile, &daemon.grants) {
                (Some(p), Some(g)) => match g.open(p, &subject, prepared.timeout) {
                    Ok(o) => Some(o),
                    Err(r) => return (Err(Failure::Refused(r)), None),
                },
                _ => None,
            };
            let out =
                dispatch::execute(daemon.provider.as_ref(), prepared, opened.as_ref().map(|o| &o.grant), &started);
            // The grant ends with the run's code, so the trace is complete.
            let closed = opened.as_ref().map(grants::close);
            drop(permit);
            (out, closed)
        })
        .await;
        let (outcome, closed) = match outcome {
            Ok((out, closed)) => (Ok(out), closed),
            Err(join) => (Err(join), None),
        };
        let resp = match outcome {
            Ok(Ok(mut resp)) => {
                if let Some(c) = &closed {
                    c.advise(&mut resp);
                }
                resp
            }
            Ok(Err(Failure::Refused(r))) => return Err(RpcError::from_refusal(r)),
            Ok(Err(Failure::MayHaveRun(detail))) => {
                self.metrics.failed();
                if let Some(c) = &closed {
                    // The calls it made were made: they count even without an answer.
                    self.metrics.granted(c);
                }
                return Err(self.internal(&detail));
            }
            Err(join) => {
                self.metrics.failed();
                return Err(self.internal(&format!("the run's thread ended abnormally: {join}")));
            }
        };
        let mut fields = vec![("isolation", json!(resp.isolation))];
        if let Some(r) = &resp.record {
            fields.push(("record_sha256", json!(r.record_sha256)));
        }
        if let Some(c) = &closed {
            fields.extend(c.log_fields());
            self.metrics.granted(c);
        }
        if let Some(js) = &resp.javascript {
            fields.push(("exit_code", json!(js.exit_code)));
            fields.push(("timed_out", json!(js.timed_out)));
        }
        if let Some(p) = &resp.project {
            fields.push(("outcome", json!(p.outcome.log_name())));
            fields.push(("steps_ran", json!(p.steps.len())));
        }
        if let Some(m) = &resp.module {
            fields.push(("outcome", json!(m.outcome.log_name())));
            fields.push(("runs", json!(m.runs.len())));
            fields.push(("width", json!(m.width)));
        }
        let bytes = serde_json::to_vec(&resp).map_err(|e| self.internal(&format!("encoding RunResponse: {e}")))?;
        Ok((bytes, fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Admission, LogFormat};
    use crate::providers::Disabled;

    fn daemon(provider: Arc<dyn Provider>) -> Arc<Daemon> {
        let limiter =
            Limiter::new(Admission { max_concurrent: 4, per_key_concurrent: 2, rate_per_min: 0, rate_burst: 0 });
        Arc::new(Daemon::new(provider, Verifier::Open, limiter, Arc::default(), Log::new(LogFormat::Json)))
    }

    fn anon() -> Principal {
        Verifier::Open.verify(None).expect("open")
    }

    async fn call(d: &Arc<Daemon>, p: Procedure, body: &str) -> Reply {
        d.handle(p, &anon(), body.as_bytes()).await
    }

    fn refusal(r: Reply) -> (Code, Option<Reason>, String) {
        let e = r.expect_err("an error");
        (e.code, e.reason(), e.body.message)
    }

    #[tokio::test]
    async fn the_protocol_number_is_checked_before_the_payload() {
        let d = daemon(Arc::new(Disabled));
        assert_eq!(
            refusal(call(&d, Procedure::Run, r#"{"javascript":{"code":"1"}}"#).await),
            (
                Code::InvalidArgument,
                Some(Reason::Protocol),
                "protocol must be stated; this daemon serves protocol 4".into()
            )
        );
        // A newer protocol's unknown fields do not matter: the number is read first.
        assert_eq!(
            refusal(call(&d, Procedure::Run, r#"{"protocol":5,"futureField":true}"#).await),
            (
                Code::Unimplemented,
                Some(Reason::Protocol),
                "this daemon serves protocol 4 and the request states 5; nothing ran".into()
            )
        );
        assert_eq!(refusal(call(&d, Procedure::SessionRun, r#"{"protocol":3}"#).await).1, Some(Reason::Protocol));
    }

    #[tokio::test]
    async fn the_disabled_provider_runs_nothing() {
        let d = daemon(Arc::new(Disabled));
        assert_eq!(
            refusal(call(&d, Procedure::Run, r#"{"protocol":4,"javascript":{"code":"1"}}"#).await),
            (Code::FailedPrecondition, Some(Reason::Unsupported), DISABLED.into())
        );
        let desc: DescribeResponse =
            serde_json::from_slice(&call(&d, Procedure::Describe, "{}").await.expect("describe")).expect("json");
        assert_eq!((desc.sandbox.as_str(), desc.isolation.as_str(), desc.protocol), ("disabled", "none", 4));
    }

    #[tokio::test]
    async fn malformed_bodies_are_refused_marked_request() {
        let d = daemon(Arc::new(Disabled));
        for body in ["{", "[]", r#"{"protocol":4,"bogus":1}"#, r#"{"protocol":4,"timeoutMs":99999999999}"#] {
            let (code, reason, _) = refusal(call(&d, Procedure::Run, body).await);
            assert_eq!((code, reason), (Code::InvalidArgument, Some(Reason::Request)), "{body}");
        }
        let (code, reason, _) = refusal(call(&d, Procedure::Describe, r#"{"x":1}"#).await);
        assert_eq!((code, reason), (Code::InvalidArgument, Some(Reason::Request)));
    }

    #[tokio::test]
    async fn the_disabled_provider_opens_no_sessions() {
        let d = daemon(Arc::new(Disabled));
        let (code, reason, msg) = refusal(call(&d, Procedure::OpenSession, r#"{"protocol":4}"#).await);
        assert_eq!((code, reason, msg.as_str()), (Code::FailedPrecondition, Some(Reason::Unsupported), DISABLED));
    }

    /// A provider whose runs fail after they may have started.
    struct Broken;

    impl Provider for Broken {
        fn describe(&self) -> Description {
            let mut d = crate::providers::Disabled.describe();
            d.name = "broken".into();
            d.snippet = Some(plimsoll_core::provider::KindSupport {
                identity: String::new(),
                software_identity: String::new(),
                default_timeout: std::time::Duration::from_secs(1),
                max_timeout: std::time::Duration::from_secs(1),
                languages: vec![plimsoll_core::validate::Language::JavaScript],
            });
            d
        }
        fn tier(&self) -> Tier {
            Tier::Process
        }
        fn preflight(&self) -> Result<(), Refusal> {
            Ok(())
        }
        fn run_snippet(
            &self,
            _: &plimsoll_core::provider::Snippet<'_>,
        ) -> Result<
            plimsoll_core::provider::Ran<plimsoll_core::wire::JavaScriptResult>,
            plimsoll_core::provider::RunError,
        > {
            Err(plimsoll_core::provider::RunError::MayHaveRun("engine said: /secret/path exploded".into()))
        }
    }

    #[tokio::test]
    async fn internal_faults_show_an_id_never_the_detail() {
        let d = daemon(Arc::new(Broken));
        let e = call(&d, Procedure::Run, r#"{"protocol":4,"javascript":{"code":"1"}}"#).await.expect_err("fails");
        assert_eq!((e.code, e.reason()), (Code::Internal, None), "unmarked: it may have run");
        let m = e.body.message;
        let id = m.strip_prefix("internal error ").and_then(|r| r.strip_suffix("; the daemon's log holds its detail"));
        let id = id.unwrap_or_else(|| panic!("unexpected text {m:?}"));
        assert!(id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()), "{m}");
        assert!(!m.contains("secret"));
    }

    #[tokio::test]
    async fn callers_without_the_scope_are_refused() {
        let d = daemon(Arc::new(Disabled));
        assert!(d.authorize(None).is_ok(), "open mode");
        let mut file = crate::auth::ClientsFile::default();
        file.clients.push(crate::auth::ClientEntry {
            id: "reader".into(),
            token_sha256: crate::auth::fingerprint("t"),
            scopes: vec!["read".into()],
            paid_seconds_per_day: None,
        });
        let limiter =
            Limiter::new(Admission { max_concurrent: 1, per_key_concurrent: 1, rate_per_min: 0, rate_burst: 0 });
        let d = Daemon::new(
            Arc::new(Disabled),
            Verifier::clients(&file),
            limiter,
            Arc::default(),
            Log::new(LogFormat::Json),
        );
        let e = d.authorize(Some(b"Bearer t")).expect_err("no scope");
        assert_eq!((e.code, e.reason()), (Code::PermissionDenied, Some(Reason::Permission)));
        assert_eq!(e.body.message, "token lacks required scope \"code:run\"");
        let e = d.authorize(None).expect_err("no token");
        assert_eq!((e.code, e.body.message.as_str()), (Code::Unauthenticated, "missing bearer token"));
    }
}
