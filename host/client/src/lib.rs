//! A client for the plimsoll daemon that believes nothing it cannot check.
//!
//! Every call sends the protocol number and a fresh request ID, and refuses an
//! answer that does not carry the ID back. Every answered run is checked: the result
//! is of the request's kind, the record's version, both digests (recomputed from
//! what was sent and what came back), its evidence against the response, its
//! software rule, its own digest, and the tier against the floor. Every error says
//! whether anything may have run ([`Error::may_have_run`]).
//!
//! Usage:
//!
//! 1. [`Client::new`] with the daemon's URL and a caller token.
//! 2. [`Client::describe`] to learn the provider, tier and limits.
//! 3. [`Client::run_javascript`] (or [`Client::run`] with any request).
//!
//! ```no_run
//! # async fn demo() -> Result<(), plimsoll_client::Error> {
//! use plimsoll_client::{Client, Options};
//! let client = Client::new("http://127.0.0.1:8746", Some("token".into()))?;
//! let run = client.run_javascript("console.log(6*7)", &Options::default()).await?;
//! assert_eq!(run.javascript.unwrap().stdout, b"42\n");
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use http::{Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use plimsoll_core::protocol::{self, NOT_DISPATCHED_HEADER, REQUEST_ID_HEADER};
use plimsoll_core::record;
use plimsoll_core::wire::connect::{Code, ErrorBody};
use plimsoll_core::wire::{
    DescribeResponse, JavaScriptRun, Kind, ProjectFile, ProjectRun, RunRecord, RunRequest, RunResponse, SessionEnd,
    SoftwareRule, from_json,
};

pub mod place;
mod session;

use plimsoll_core::{Floor, Reason, Refusal, Tier, validate};
pub use session::{Session, SessionOptions, owner_digest};

/// The largest answer read: above any legitimate project answer.
pub const MAX_RESPONSE_BYTES: usize = 32 << 20;

/// The default bound on one exchange: above the daemon's five-minute run ceiling.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(6 * 60);

/// How long an idle connection stays in the pool: well under the daemon's idle cut-off.
const POOL_IDLE: Duration = Duration::from_secs(2);

/// How an answered run failed its checks. The run may have executed either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// The answer carries no record.
    NoRecord,
    /// The record's version is not the one this protocol answers with.
    Version,
    /// A digest or a field of the record disagrees with the exchange.
    Record,
    /// The stated tier is below the request's floor.
    IsolationEvidence,
    /// The result is of another kind than the request, or there are several.
    ResultKind,
    /// A session call's record does not continue the chain this client followed, or
    /// the daemon's count at close differs: someone else used the session.
    Chain,
}

/// Why a call produced no checked result.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Nothing ran: refused by this client before sending, or by the daemon with the
    /// not-dispatched mark. Sending the same request again cannot run it twice.
    #[error("not dispatched ({reason}): {message}")]
    NotDispatched {
        /// Why nothing ran.
        reason: Reason,
        /// The daemon's code; `None` when this client refused before sending.
        code: Option<Code>,
        /// The text.
        message: String,
    },
    /// The daemon answered with an unmarked error: the code may have run.
    #[error("{code}: {message} (the code may have run)")]
    Failed {
        /// The Connect code.
        code: Code,
        /// The daemon's text.
        message: String,
    },
    /// The answer does not carry this request's ID back: nothing it says is believed.
    #[error("the answer (HTTP {status}) does not carry this request's Plimsoll-Request-Id back; the call may have run")]
    AnswerNotBound {
        /// The HTTP status of the unbound answer.
        status: u16,
    },
    /// The daemon answered, but the answer does not check. The run may have executed;
    /// `response` holds what came back.
    #[error("the answer does not check ({kind:?}): {message}; the code may have run")]
    DataLoss {
        /// Which check failed.
        kind: Mismatch,
        /// What disagreed.
        message: String,
        /// The answer as received.
        response: Option<Box<RunResponse>>,
    },
    /// No usable answer. `sent` is false when no byte of the request left (then
    /// nothing ran).
    #[error("transport: {message}{}", if *sent { " (the call may have run)" } else { " (nothing was sent)" })]
    Transport {
        /// Whether the request may have reached the daemon.
        sent: bool,
        /// What failed.
        message: String,
    },
    /// The client could not be set up (a bad URL, an unreadable CA file).
    #[error("client configuration: {0}")]
    Config(String),
    /// A session call or close the daemon refused because the session ended, or is
    /// not this caller's (`not_found`). Nothing ran.
    #[error("not dispatched ({reason}): {message}")]
    SessionEnded {
        /// Why the session ended.
        end: SessionEnd,
        /// The daemon's words on why.
        detail: String,
        /// The not-dispatched reason.
        reason: Reason,
        /// The text.
        message: String,
    },
    /// A session call that may have run, answered without a result. Its record
    /// (checked, and chained as the session's next call) is kept here.
    #[error("{code}: {message} (the call may have run; its record is call {} of the session)", record.sequence)]
    Unanswered {
        /// The Connect code.
        code: Code,
        /// The daemon's text.
        message: String,
        /// The call's record: no result, and its place in the chain.
        record: Box<RunRecord>,
    },
}

impl Error {
    /// Whether the code may have run: never for a refusal or a request that was not
    /// sent, always otherwise. A call that may have run is never retried by itself.
    pub fn may_have_run(&self) -> bool {
        !matches!(
            self,
            Error::NotDispatched { .. }
                | Error::SessionEnded { .. }
                | Error::Transport { sent: false, .. }
                | Error::Config(_)
        )
    }

    /// The not-dispatched reason, when nothing ran.
    pub fn not_dispatched(&self) -> Option<Reason> {
        match self {
            Error::NotDispatched { reason, .. } | Error::SessionEnded { reason, .. } => Some(*reason),
            Error::Transport { sent: false, .. } => Some(Reason::Environment),
            _ => None,
        }
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Error {
        Error::NotDispatched { reason: r.reason, code: None, message: r.message }
    }
}

/// Per-run options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The weakest tier the run accepts.
    pub floor: Option<Floor>,
    /// The run's budget in milliseconds (0: the daemon's default).
    pub timeout_ms: i32,
    /// An opaque correlation ID for the daemon's audit line.
    pub trace_id: Option<String>,
    /// A rule for the selected software.
    pub software_rule: Option<SoftwareRule>,
}

/// Client settings beyond the URL and token.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Allow cleartext `http` to a host that is not loopback (development only).
    pub insecure_http: bool,
    /// A PEM CA certificate to trust for `https` (besides the system's roots).
    pub ca_file: Option<std::path::PathBuf>,
    /// Speak HTTP/2 with prior knowledge over cleartext (h2c).
    pub h2c: bool,
    /// The bound on one exchange (default six minutes).
    pub timeout: Option<Duration>,
}

/// A client for one daemon. Cheap to clone; connections are kept alive and reused.
#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: Hyper<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

fn loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost") || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn request_id() -> Result<String, Error> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| Error::Config(format!("no randomness for a request ID: {e}")))?;
    Ok(hex::encode(b))
}

impl Client {
    /// A client for `url` (absolute `http` or `https`; no user info, query or fragment;
    /// cleartext only to loopback).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a bad URL or token.
    pub fn new(url: &str, token: Option<String>) -> Result<Client, Error> {
        Client::with_settings(url, token, Settings::default())
    }

    /// A client with [`Settings`].
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a bad URL, token or CA file.
    pub fn with_settings(url: &str, token: Option<String>, settings: Settings) -> Result<Client, Error> {
        let uri: Uri = url.parse().map_err(|e| Error::Config(format!("base URL {url:?}: {e}")))?;
        let scheme = uri.scheme_str().unwrap_or("");
        let host = uri.host().unwrap_or("");
        if !matches!(scheme, "http" | "https") || host.is_empty() {
            return Err(Error::Config(format!("base URL {url:?} must be an absolute http or https URL")));
        }
        if uri.query().is_some() || url.contains('#') || uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(Error::Config("user info, query and fragment are not permitted in the base URL".into()));
        }
        if scheme == "http" && !loopback(host) && !settings.insecure_http {
            return Err(Error::Config(format!(
                "cleartext http to {host} would send the token and the code unencrypted; use https, or allow it explicitly (development only)"
            )));
        }
        if let Some(t) = &token
            && (t.is_empty() || !t.bytes().all(|b| (0x21..=0x7e).contains(&b)))
        {
            return Err(Error::Config("the token must be visible ASCII".into()));
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_roots() {
            let _ = roots.add(cert);
        }
        if let Some(ca) = &settings.ca_file {
            use rustls_pki_types::pem::PemObject as _;
            let certs = rustls_pki_types::CertificateDer::pem_file_iter(ca)
                .map_err(|e| Error::Config(format!("CA file {}: {e}", ca.display())))?;
            for c in certs {
                let c = c.map_err(|e| Error::Config(format!("CA file {}: {e}", ca.display())))?;
                roots.add(c).map_err(|e| Error::Config(format!("CA file {}: {e}", ca.display())))?;
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut connector = HttpConnector::new();
        connector.enforce_http(false);
        connector.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_all_versions()
            .wrap_connector(connector);
        let mut builder = Hyper::builder(TokioExecutor::new());
        // Below the daemon's own cut-off for an idle HTTP/1.1 connection (its header
        // read timeout, 5 s): a reused connection the daemon is closing at that moment
        // resets a request already sent, which can only be reported as "may have run".
        builder.pool_idle_timeout(POOL_IDLE);
        if settings.h2c {
            builder.http2_only(true);
        }
        Ok(Client {
            base: url.trim_end_matches('/').to_string(),
            token,
            http: builder.build(https),
            timeout: settings.timeout.unwrap_or(DEFAULT_TIMEOUT),
        })
    }

    /// POSTs `body` to `procedure` and returns the bound answer's body, or the
    /// error it states.
    pub(crate) async fn call(&self, procedure: &str, body: Vec<u8>) -> Result<Bytes, Error> {
        let id = request_id()?;
        let uri = format!("{}/plimsoll.v1.SandboxService/{procedure}", self.base);
        let mut req = Request::post(uri)
            .header(CONTENT_TYPE, "application/json")
            .header("connect-protocol-version", "1")
            .header(REQUEST_ID_HEADER, &id)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Error::Config(e.to_string()))?;
        if let Some(t) = &self.token {
            let v = HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| Error::Config("the token is not a valid header value".into()))?;
            req.headers_mut().insert(AUTHORIZATION, v);
        }
        let exchange = async {
            let resp = self.http.request(req).await.map_err(|e| Error::Transport {
                // A failed connect sent nothing; any later failure may have.
                sent: !e.is_connect(),
                message: with_causes(&e),
            })?;
            let (parts, body) = resp.into_parts();
            let bytes = Limited::new(body, MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| Error::Transport {
                    sent: true,
                    message: format!("reading the answer: {}", with_causes(&*e)),
                })?
                .to_bytes();
            Ok::<_, Error>((parts, bytes))
        };
        let (parts, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| Error::Transport { sent: true, message: format!("no answer within {:?}", self.timeout) })??;
        let ids: Vec<&HeaderValue> = parts.headers.get_all(REQUEST_ID_HEADER).iter().collect();
        let bound = ids.len() == 1 && ids[0].as_bytes() == id.as_bytes();
        let status = parts.status.as_u16();
        if !bound {
            return Err(Error::AnswerNotBound { status });
        }
        if status != 200 {
            let mark =
                parts.headers.get(NOT_DISPATCHED_HEADER).and_then(|v| v.to_str().ok()).and_then(Reason::from_name);
            return Err(error_from(status, &bytes, mark));
        }
        let ctype = parts.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
        if ctype.split(';').next().unwrap_or("").trim() != "application/json" {
            return Err(Error::Transport {
                sent: true,
                message: format!("the answer's content type is {ctype:?}, not application/json"),
            });
        }
        Ok(bytes)
    }

    /// What the daemon states about itself.
    ///
    /// # Errors
    ///
    /// [`Error::NotDispatched`] (`protocol`) when the daemon serves another protocol.
    pub async fn describe(&self) -> Result<DescribeResponse, Error> {
        let bytes = self.call("Describe", b"{}".to_vec()).await?;
        let d: DescribeResponse = from_json(&bytes)
            .map_err(|e| Error::Transport { sent: true, message: format!("the Describe answer is malformed: {e}") })?;
        if d.protocol != protocol::NUMBER {
            return Err(Error::NotDispatched {
                reason: Reason::Protocol,
                code: None,
                message: format!(
                    "the daemon serves protocol {} and this client speaks {}",
                    d.protocol,
                    protocol::NUMBER
                ),
            });
        }
        Ok(d)
    }

    /// Runs a JavaScript snippet in a fresh sandbox.
    ///
    /// # Errors
    ///
    /// [`Error`]; see [`Error::may_have_run`].
    pub async fn run_javascript(&self, code: &str, opts: &Options) -> Result<RunResponse, Error> {
        let mut req = envelope(opts);
        req.javascript = Some(JavaScriptRun { code: code.to_string(), grant_profile: String::new() });
        self.run(req).await
    }

    /// Writes `files` into a fresh work directory and runs `steps` in order.
    ///
    /// # Errors
    ///
    /// [`Error`]; see [`Error::may_have_run`].
    pub async fn run_project(
        &self,
        files: &[(&str, &str)],
        steps: &[&str],
        artifacts: &[&str],
        opts: &Options,
    ) -> Result<RunResponse, Error> {
        let mut req = envelope(opts);
        req.project = Some(ProjectRun {
            files: files.iter().map(|(p, c)| ProjectFile { path: p.to_string(), content: c.to_string() }).collect(),
            steps: steps.iter().map(|s| s.to_string()).collect(),
            artifacts: artifacts.iter().map(|a| a.to_string()).collect(),
            grant_profile: String::new(),
        });
        self.run(req).await
    }

    /// Sends any `RunRequest` (its protocol number is set here) and checks the answer.
    ///
    /// # Errors
    ///
    /// [`Error`]; see [`Error::may_have_run`].
    pub async fn run(&self, req: RunRequest) -> Result<RunResponse, Error> {
        self.run_exchange(req).await.map(|x| x.answer)
    }

    /// [`Client::run`], also returning the exact bytes sent and received, for a
    /// harness that keeps them (the attest bundle).
    ///
    /// # Errors
    ///
    /// [`Error`]; see [`Error::may_have_run`].
    pub async fn run_exchange(&self, mut req: RunRequest) -> Result<Exchange, Error> {
        req.protocol = protocol::NUMBER;
        check_request(&req)?;
        let body = serde_json::to_vec(&req).map_err(|e| Error::Config(e.to_string()))?;
        let bytes = self.call("Run", body.clone()).await?;
        let resp: RunResponse = from_json(&bytes)
            .map_err(|e| Error::Transport { sent: true, message: format!("the Run answer is malformed: {e}") })?;
        let answer = check_exchange(&req, resp, false)?;
        Ok(Exchange { request: body, response: bytes.to_vec(), answer })
    }
}

/// One checked `Run`: the request and response bytes as they crossed the wire, and
/// the checked answer.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// The request body sent.
    pub request: Vec<u8>,
    /// The response body received.
    pub response: Vec<u8>,
    /// The answer, checked.
    pub answer: RunResponse,
}

/// Checks an answer to `req` exactly as this client checks a live one: the result's
/// kind, the record's version, both digests, the evidence, the rule, the record's
/// own digest and the floor; a single run's record must carry no session fields.
/// `in_session` checks a session call's answer (its place in the chain is the
/// caller's to check).
///
/// # Errors
///
/// [`Error::DataLoss`] naming the mismatch; a refusal for a malformed request.
pub fn check_exchange(req: &RunRequest, resp: RunResponse, in_session: bool) -> Result<RunResponse, Error> {
    let kind = req.payload().map_err(|e| Refusal::request(format!("invalid request: {e}")))?.kind();
    let digest = record::request_digest(req);
    if in_session { checked(req, kind, &digest, resp) } else { check_answer(req, kind, &digest, resp) }
}

/// `e` and the errors beneath it, joined by `: `. hyper's own text names only the
/// stage that failed (`client error (Connect)`); why it failed (a refused
/// connection, an untrusted certificate) is in the sources.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let next = c.to_string();
        // Some errors already print their source; say each cause once.
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}

fn rustls_native_roots() -> Vec<rustls_pki_types::CertificateDer<'static>> {
    rustls_native_certs::load_native_certs().certs
}

fn envelope(opts: &Options) -> RunRequest {
    RunRequest {
        protocol: protocol::NUMBER,
        minimum_isolation: opts.floor.map(|f| f.as_str().to_string()).unwrap_or_default(),
        trace_id: opts.trace_id.clone().unwrap_or_default(),
        timeout_ms: opts.timeout_ms,
        software_rule: opts.software_rule.clone(),
        ..RunRequest::default()
    }
}

/// The daemon's own checks, before anything is sent.
fn check_request(req: &RunRequest) -> Result<(), Error> {
    validate::floor(&req.minimum_isolation)?;
    if !req.trace_id.is_empty() && !validate::trace_id_ok(&req.trace_id) {
        return Err(Refusal::request("invalid request: trace ID must be 1 to 64 characters of [A-Za-z0-9._:-]").into());
    }
    if let Some(rule) = &req.software_rule {
        validate::software_rule(rule)?;
    }
    if let Some(js) = &req.javascript {
        validate::javascript(js)?;
    }
    if let Some(p) = &req.project {
        validate::project(p)?;
    }
    if let Some(m) = &req.module {
        validate::module(m)?;
    }
    if let Some(c) = &req.cell {
        validate::cell(c)?;
    }
    Ok(())
}

/// The error an answer states: the body's detail marks it, else the header.
fn error_from(status: u16, body: &[u8], mark: Option<Reason>) -> Error {
    let parsed: Option<ErrorBody> = serde_json::from_slice(body).ok();
    let code = parsed.as_ref().and_then(|b| Code::from_name(&b.code)).unwrap_or_else(|| Code::from_http_status(status));
    let message = parsed
        .as_ref()
        .map(|b| b.message.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| format!("HTTP {status}"));
    let reason = parsed.as_ref().and_then(ErrorBody::reason).or(mark);
    if let (Some(reason), Some((end, detail))) = (reason, parsed.as_ref().and_then(ErrorBody::session_end)) {
        let end = SessionEnd::from_number(end).unwrap_or(SessionEnd::NotFound);
        return Error::SessionEnded { end, detail, reason, message };
    }
    if reason.is_none()
        && let Some(record) = parsed.as_ref().and_then(ErrorBody::unanswered_record)
    {
        return Error::Unanswered { code, message, record: Box::new(record) };
    }
    match reason {
        Some(reason) => Error::NotDispatched { reason, code: Some(code), message },
        None => Error::Failed { code, message },
    }
}

fn data_loss(kind: Mismatch, message: impl Into<String>, resp: RunResponse) -> Error {
    Error::DataLoss { kind, message: message.into(), response: Some(Box::new(resp)) }
}

fn valid_instance(s: &str) -> bool {
    if s.is_empty() {
        return true;
    }
    let Some((kind, rest)) = s.split_once(':') else { return false };
    let kind_ok = !kind.is_empty()
        && kind.len() <= 32
        && kind.as_bytes()[0].is_ascii_lowercase()
        && kind.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let rest_ok = (1..=127).contains(&rest.len())
        && rest.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    kind_ok && rest_ok
}

/// Every check an answered single run gets, in the published clients' order.
fn check_answer(req: &RunRequest, kind: Kind, digest: &str, resp: RunResponse) -> Result<RunResponse, Error> {
    let resp = checked(req, kind, digest, resp)?;
    let single =
        resp.record.as_ref().is_some_and(|r| r.session.is_empty() && r.sequence == 0 && r.previous_sha256.is_empty());
    if !single {
        return Err(data_loss(Mismatch::Record, "a single run's record carries session fields", resp));
    }
    Ok(resp)
}

/// The checks every answered call gets, a single run's or a session call's: the
/// result's kind, the record's version, both digests, the evidence, the rule, the
/// record's own digest and the floor.
fn checked(req: &RunRequest, kind: Kind, digest: &str, resp: RunResponse) -> Result<RunResponse, Error> {
    let kinds = [
        (Kind::JavaScript, resp.javascript.is_some()),
        (Kind::Project, resp.project.is_some()),
        (Kind::Module, resp.module.is_some()),
        (Kind::Cell, resp.cell.is_some()),
    ];
    let present: Vec<Kind> = kinds.iter().filter(|(_, p)| *p).map(|(k, _)| *k).collect();
    if present != [kind] {
        return Err(data_loss(
            Mismatch::ResultKind,
            format!("a {} request was answered with {present:?}", kind.as_str()),
            resp,
        ));
    }
    let Some(rec) = resp.record.clone() else {
        return Err(data_loss(Mismatch::NoRecord, "the answer carries no run record", resp));
    };
    if rec.version != record::VERSION {
        return Err(data_loss(
            Mismatch::Version,
            format!("record version {}, this client requires {}", rec.version, record::VERSION),
            resp,
        ));
    }
    if !rec.unanswered.is_empty() {
        return Err(data_loss(Mismatch::Record, "an answered call's record states an unanswered code", resp));
    }
    if rec.request_sha256 != digest {
        return Err(data_loss(
            Mismatch::Record,
            format!("request digest {}, the request sent digests to {digest}", rec.request_sha256),
            resp,
        ));
    }
    let result = record::result_digest(&resp);
    if rec.result_sha256 != result {
        return Err(data_loss(
            Mismatch::Record,
            format!("result digest {}, the result received digests to {result}", rec.result_sha256),
            resp,
        ));
    }
    if rec.provider != resp.sandbox || rec.isolation != resp.isolation || rec.environment != resp.environment {
        return Err(data_loss(
            Mismatch::Record,
            "the record's provider, tier or environment differs from the response's",
            resp,
        ));
    }
    if rec.instance != resp.instance || !valid_instance(&rec.instance) {
        return Err(data_loss(
            Mismatch::Record,
            "the record's instance is not the response's, or not a typed reference",
            resp,
        ));
    }
    let rule = req.software_rule.as_ref().filter(|r| !r.mode.is_empty());
    let allowed = rule.is_none_or(|r| r.identities.contains(&rec.software_identity));
    if rec.software_identity != resp.software_identity || rec.software_rule_id != record::rule_id(rule) || !allowed {
        return Err(data_loss(
            Mismatch::Record,
            "the selected software or the rule differs from the request and response",
            resp,
        ));
    }
    match record::record_digest(&rec) {
        Ok(own) if own == rec.record_sha256 => {}
        Ok(own) => {
            return Err(data_loss(
                Mismatch::Record,
                format!("record digest {}, its fields digest to {own}", rec.record_sha256),
                resp,
            ));
        }
        Err(e) => return Err(data_loss(Mismatch::Version, e.to_string(), resp)),
    }
    if let Some(floor) = validate::floor(&req.minimum_isolation).ok().flatten()
        && !Tier::from_wire(&resp.isolation).meets(floor)
    {
        return Err(data_loss(
            Mismatch::IsolationEvidence,
            format!("result isolation {} is below the requested minimum {floor}", Tier::from_wire(&resp.isolation)),
            resp,
        ));
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use plimsoll_core::dispatch::{Started, answer};
    use plimsoll_core::provider::Evidence;
    use plimsoll_core::wire::JavaScriptResult;

    use super::*;

    fn request(floor: &str) -> RunRequest {
        RunRequest {
            protocol: protocol::NUMBER,
            minimum_isolation: floor.into(),
            javascript: Some(JavaScriptRun { code: "1".into(), grant_profile: String::new() }),
            ..RunRequest::default()
        }
    }

    fn answered(req: &RunRequest, tier: Tier) -> RunResponse {
        let resp = RunResponse { javascript: Some(JavaScriptResult::default()), ..RunResponse::default() };
        let ev = Evidence { tier, environment: "quickjs-wasm:sha256:ab".into(), ..Evidence::default() };
        answer(
            resp,
            "wasm",
            &ev,
            record::request_digest(req),
            String::new(),
            &Started::now(),
            (String::new(), 0, String::new()),
        )
    }

    fn mismatch(r: Result<RunResponse, Error>) -> Mismatch {
        match r {
            Err(Error::DataLoss { kind, .. }) => kind,
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }

    #[test]
    fn an_honest_answer_checks() {
        let req = request("process");
        let resp = answered(&req, Tier::Process);
        assert!(check_answer(&req, Kind::JavaScript, &record::request_digest(&req), resp).is_ok());
    }

    #[test]
    fn every_tampering_is_caught() {
        let req = request("");
        let digest = record::request_digest(&req);
        let good = answered(&req, Tier::Process);

        let mut r = good.clone();
        r.javascript.as_mut().expect("js").stdout = b"forged".to_vec();
        assert_eq!(mismatch(check_answer(&req, Kind::JavaScript, &digest, r)), Mismatch::Record);

        let mut r = good.clone();
        r.isolation = "vm".into();
        assert_eq!(mismatch(check_answer(&req, Kind::JavaScript, &digest, r)), Mismatch::Record);

        let mut r = good.clone();
        r.record.as_mut().expect("rec").started_unix_ms += 1;
        assert_eq!(mismatch(check_answer(&req, Kind::JavaScript, &digest, r)), Mismatch::Record);

        let mut r = good.clone();
        r.record = None;
        assert_eq!(mismatch(check_answer(&req, Kind::JavaScript, &digest, r)), Mismatch::NoRecord);

        let mut r = good.clone();
        r.record.as_mut().expect("rec").version = 2;
        assert_eq!(mismatch(check_answer(&req, Kind::JavaScript, &digest, r)), Mismatch::Version);

        let mut r = good.clone();
        r.cell = Some(Default::default());
        assert_eq!(mismatch(check_answer(&req, Kind::JavaScript, &digest, r)), Mismatch::ResultKind);

        let other = request("container");
        assert_eq!(
            mismatch(check_answer(&other, Kind::JavaScript, &record::request_digest(&other), good)),
            Mismatch::Record
        );
    }

    #[test]
    fn a_tier_below_the_floor_is_evidence_mismatch_never_a_refusal() {
        let req = request("kernel");
        let resp = answered(&req, Tier::Process);
        let err = check_answer(&req, Kind::JavaScript, &record::request_digest(&req), resp).expect_err("below floor");
        assert!(matches!(err, Error::DataLoss { kind: Mismatch::IsolationEvidence, .. }));
        assert!(err.may_have_run());
        assert_eq!(err.not_dispatched(), None);
    }

    #[test]
    fn errors_say_whether_anything_ran() {
        let refused = error_from(400, br#"{"code":"failed_precondition","message":"m","details":[{"type":"plimsoll.v1.NotDispatched","value":"CAU"}]}"#, None);
        assert_eq!(refused.not_dispatched(), Some(Reason::Isolation));
        let unmarked = error_from(500, br#"{"code":"internal","message":"internal error 0123"}"#, None);
        assert!(unmarked.may_have_run());
        let header_only = error_from(404, b"404 page not found", Some(Reason::Unsupported));
        assert_eq!(header_only.not_dispatched(), Some(Reason::Unsupported));
        assert!(matches!(header_only, Error::NotDispatched { code: Some(Code::Unimplemented), .. }));
    }

    #[test]
    fn urls_are_checked() {
        assert!(Client::new("http://127.0.0.1:8746", None).is_ok());
        assert!(Client::new("http://[::1]:8746/", None).is_ok());
        assert!(matches!(Client::new("http://example.com", None), Err(Error::Config(_))));
        assert!(matches!(Client::new("ftp://127.0.0.1", None), Err(Error::Config(_))));
        assert!(matches!(Client::new("http://u:p@127.0.0.1", None), Err(Error::Config(_))));
        assert!(matches!(Client::new("http://127.0.0.1/?q=1", None), Err(Error::Config(_))));
        assert!(matches!(Client::new("http://127.0.0.1", Some("has space".into())), Err(Error::Config(_))));
    }

    #[test]
    fn instances_are_typed_references() {
        assert!(valid_instance(""));
        assert!(valid_instance("k8s-pod-uid:0a1b-2c"));
        assert!(!valid_instance("K8s:x"));
        assert!(!valid_instance("nocolon"));
        assert!(!valid_instance("k:"));
    }
}
