//! The HTTPS mode's state and router: which host a request may name, which
//! origin a browser's request may come from, the headers on every answer, and
//! the routes of the authorization server, the owner's pages and the MCP endpoint.

use std::convert::Infallible;
use std::fmt::Display;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Body;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use super::StartError;
use super::pages;
use crate::gate::{self, Sessions};
use crate::oauth::{AuthServer, AuthorizeRefusal, Urls};
use crate::passkey::{Owner, PasskeyError};
use crate::rate::PerAddress;
use crate::tools::{Scope, Tools};
use crate::{Mode, Server};

/// What a request body's errors become.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An answer's body.
pub type Reply = Response<BoxBody<Bytes, Infallible>>;

/// The file in the state directory that keeps connections across restarts.
pub const CONNECTIONS: &str = "connections.json";

/// How long a request's body may take to arrive.
const BODY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// The largest body of any request but the MCP endpoint's.
const MAX_FORM: usize = 64 << 10;

/// Requests one address may make per [`OPEN_WINDOW`] to what anyone may ask
/// before signing in (passkey ceremonies, client registration, authorization
/// requests), so one client's flood neither locks the owner out nor keeps
/// other clients from connecting.
pub(super) const OPEN_PER_ADDRESS: usize = 30;
/// The sliding window of [`OPEN_PER_ADDRESS`].
const OPEN_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

/// The HTTPS mode: the authorization server, the owner, the MCP sessions and
/// the tools, behind one router.
pub struct App {
    urls: Urls,
    /// The public URL's `host[:port]`, lower case: what `Host` must name.
    authority: String,
    behind_proxy: bool,
    /// Where the clients, approvals and token digests are kept across restarts.
    connections: std::path::PathBuf,
    pub(super) auth: Mutex<AuthServer>,
    pub(super) owner: Mutex<Owner>,
    pub(super) sessions: Mutex<Sessions>,
    limits: Mutex<PerAddress>,
    pub(super) tools: Arc<Tools>,
    pub(super) manager: Arc<LocalSessionManager>,
    pub(super) mcp: StreamableHttpService<Server, LocalSessionManager>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App").field("public", &self.urls.issuer()).finish_non_exhaustive()
    }
}

/// Locks `m`; a panic elsewhere while it was held leaves state that every
/// check here still reads whole, so the lock is taken back rather than the
/// server stopping.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A request turned away before its handler's work: the answer it gets.
#[derive(Debug)]
pub(super) enum Refusal {
    /// `{"error": message}` with a status.
    Json(u16, String),
    /// An HTML page with a status, for the owner's browser.
    Page(u16, String),
}

impl Refusal {
    /// The answer.
    pub(super) fn reply(self) -> Reply {
        match self {
            Refusal::Json(status, message) => error_reply(status, message),
            Refusal::Page(status, page) => html_reply(status, page),
        }
    }
}

/// One line on the console: approvals and refusals, never a secret.
pub(super) fn log(line: impl Display) {
    eprintln!("plimsoll mcp-http: {line}");
}

pub(super) fn full(body: impl Into<Bytes>) -> BoxBody<Bytes, Infallible> {
    Full::new(body.into()).boxed()
}

/// A JSON answer.
pub(super) fn json_reply(status: u16, v: &Value) -> Reply {
    let mut r = Response::new(full(v.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// `{"error": message}` with `status`.
pub(super) fn error_reply(status: u16, message: impl Into<String>) -> Reply {
    json_reply(status, &json!({"error": message.into()}))
}

/// An HTML page.
pub(super) fn html_reply(status: u16, page: String) -> Reply {
    let mut r = Response::new(full(page));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    r
}

/// A redirect to `to` (303: the browser follows with a GET).
pub(super) fn see_other(to: &str) -> Reply {
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(v) = HeaderValue::from_str(to) {
        r.headers_mut().insert(header::LOCATION, v);
    }
    r
}

pub(super) fn header_str(h: &HeaderMap, name: impl http::header::AsHeaderName) -> Option<&str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Reads a body of at most `limit` bytes.
///
/// # Errors
///
/// 413 past the limit, 400 when the body could not be read.
pub(super) async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, Refusal>
where
    B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
{
    let read = tokio::time::timeout(BODY_DEADLINE, Limited::new(body, limit).collect()).await;
    let Ok(read) = read else {
        return Err(Refusal::Json(408, format!("the body did not arrive within {} s", BODY_DEADLINE.as_secs())));
    };
    match read {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            Err(Refusal::Json(413, format!("the body is over {limit} bytes")))
        }
        Err(e) => Err(Refusal::Json(400, format!("reading the body: {e}"))),
    }
}

/// 429, with when to ask again.
fn too_many(after: std::time::Duration) -> Reply {
    let secs = after.as_secs().max(1);
    let mut r = error_reply(429, format!("too many requests; try again in {secs} s"));
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    r
}

/// A passkey refusal: its status, its message, and when to retry a rate-limited one.
fn passkey_refused(e: &PasskeyError) -> Reply {
    let mut r = error_reply(e.status(), e.to_string());
    if let Some(after) = e.retry_after()
        && let Ok(v) = HeaderValue::from_str(&after.as_secs().max(1).to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// The headers every answer carries: no framing, no sniffing, no referrer,
/// nothing cached, scripts only from this origin, HTTPS remembered.
fn secure(headers: &mut HeaderMap) {
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.entry(k).or_insert(HeaderValue::from_static(v));
    };
    set(
        headers,
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
         form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, "x-frame-options", "DENY");
    set(headers, "x-content-type-options", "nosniff");
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends
    // `Origin: null` with its own forms, which the origin check must refuse.
    set(headers, "referrer-policy", "same-origin");
    set(headers, "cache-control", "no-store");
    set(headers, "cross-origin-opener-policy", "same-origin");
}

impl App {
    /// The app at `public`, over `tools`, keeping the owner's passkeys in `state_dir`.
    ///
    /// # Errors
    ///
    /// The public URL, or the passkey store.
    pub fn new(public: &str, behind_proxy: bool, tools: Tools, state_dir: &Path) -> Result<App, StartError> {
        let urls = Urls::new(public).map_err(StartError::PublicUrl)?;
        let authority = urls.issuer().trim_start_matches("https://").to_ascii_lowercase();
        let owner =
            Owner::open(urls.issuer(), state_dir, Instant::now()).map_err(|e| StartError::State(e.to_string()))?;
        let connections = state_dir.join(CONNECTIONS);
        let mut auth = AuthServer::new(urls.clone());
        match std::fs::read(&connections) {
            Ok(bytes) => auth.restore(&bytes, Instant::now(), SystemTime::now()).map_err(|why| {
                StartError::State(format!(
                    "{}: {why} (move it away to start with no connections)",
                    connections.display()
                ))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StartError::State(format!("reading {}: {e}", connections.display()))),
        }
        let tools = Arc::new(tools);
        let manager = Arc::new(LocalSessionManager::default());
        // The router checks the named host (the forwarded one behind a proxy,
        // which may rewrite Host) before anything reaches rmcp, whose own
        // Host check would refuse a proxy's upstream name.
        let config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .with_allowed_origins([urls.issuer().to_string()])
            .with_max_request_body_bytes(gate::MAX_BODY);
        let for_sessions = Arc::clone(&tools);
        let mcp = StreamableHttpService::new(
            move || Ok(Server { tools: Arc::clone(&for_sessions), mode: Mode::Http }),
            Arc::clone(&manager),
            config,
        );
        Ok(App {
            auth: Mutex::new(auth),
            connections,
            urls,
            authority,
            behind_proxy,
            owner: Mutex::new(owner),
            sessions: Mutex::new(Sessions::default()),
            limits: Mutex::new(PerAddress::new(OPEN_PER_ADDRESS, OPEN_WINDOW)),
            tools,
            manager,
            mcp,
        })
    }

    /// Runs `f` on the authorization server, then writes the connections if it
    /// changed them; a failed write is logged, and the server goes on with
    /// what it holds.
    fn changing<T>(&self, f: impl FnOnce(&mut AuthServer) -> T) -> T {
        let mut auth = lock(&self.auth);
        let out = f(&mut auth);
        if auth.take_changed()
            && let Err(e) =
                crate::private_file::write(&self.connections, &auth.saved(Instant::now(), SystemTime::now()))
        {
            log(format_args!("could not keep the connections across a restart: {e}"));
        }
        out
    }

    /// The public URL.
    pub fn public(&self) -> &str {
        self.urls.issuer()
    }

    /// Says where the server listens and, before the owner has a passkey,
    /// the one-time code that registers it: the console is the only place it appears.
    pub fn announce(&self, bound: SocketAddr) {
        log(format_args!("listening on {bound}; MCP endpoint {}", self.urls.resource()));
        if let Some(code) = lock(&self.owner).setup_code() {
            log(format_args!(
                "no owner passkey yet: open {}/ in a browser and register one with the setup code {code}",
                self.public()
            ));
        }
    }

    /// The host a request names must be the public one: a page elsewhere whose
    /// name resolves here (DNS rebinding) is refused. Behind a proxy, the
    /// proxy's forwarded scheme and host are checked the same way; in front
    /// of none, forwarded headers are ignored.
    fn check_host<B>(&self, req: &Request<B>) -> Result<(), Refusal> {
        let h = req.headers();
        let named = if self.behind_proxy {
            let proto = header_str(h, "x-forwarded-proto");
            if proto.map(str::trim) != Some("https") {
                return Err(Refusal::Json(
                    421,
                    "the reverse proxy must send X-Forwarded-Proto: https and X-Forwarded-Host (serve-http --behind-proxy)".into(),
                ));
            }
            header_str(h, "x-forwarded-host").map(|v| v.split(',').next_back().unwrap_or(v).trim().to_string())
        } else {
            req.uri()
                .authority()
                .map(|a| a.as_str().to_string())
                .or_else(|| header_str(h, header::HOST).map(str::to_string))
        };
        let named = named.unwrap_or_default().to_ascii_lowercase();
        let default_port = format!("{named}:443");
        if named == self.authority || default_port == self.authority {
            Ok(())
        } else {
            Err(Refusal::Json(421, format!("this server answers for {}, not {named:?}", self.authority)))
        }
    }

    /// A browser's state-changing request must come from this server's own
    /// pages: an `Origin` that is exactly the public origin.
    fn same_origin(&self, h: &HeaderMap) -> Result<(), Refusal> {
        match header_str(h, header::ORIGIN) {
            Some(o) if o.trim_end_matches('/') == self.public() => Ok(()),
            Some(o) => Err(Refusal::Json(403, format!("origin {o:?} is not this server's"))),
            None => {
                Err(Refusal::Json(403, "a request from the owner's pages carries an Origin; this one has none".into()))
            }
        }
    }

    /// The client's address: the peer's, or behind the proxy the one the proxy
    /// appended last to `X-Forwarded-For` (earlier entries are the client's word).
    fn client_ip(&self, h: &HeaderMap, peer: SocketAddr) -> std::net::IpAddr {
        if !self.behind_proxy {
            return peer.ip();
        }
        header_str(h, "x-forwarded-for")
            .and_then(|v| v.rsplit(',').next())
            .and_then(|ip| ip.trim().parse().ok())
            .unwrap_or(peer.ip())
    }

    /// The per-client limit on what anyone may ask before signing in.
    fn limited<B>(&self, req: &Request<B>, client: std::net::IpAddr) -> Result<(), std::time::Duration> {
        let path = req.uri().path();
        let open = matches!(path, "/register" | "/authorize") || path.starts_with("/passkey/");
        if !open {
            return Ok(());
        }
        lock(&self.limits).hit(client, Instant::now())
    }

    /// Serves one request from `peer`.
    pub async fn handle<B>(&self, req: Request<B>, peer: SocketAddr) -> Reply
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let client = self.client_ip(req.headers(), peer);
        let mut reply = match self.check_host(&req) {
            Err(r) => r.reply(),
            Ok(()) => match self.limited(&req, client) {
                Err(after) => too_many(after),
                Ok(()) => self.route(req, client).await,
            },
        };
        let status = reply.status().as_u16();
        if status >= 400 {
            log(format_args!("refused {method} {path} from {}: {status}", peer.ip()));
        }
        secure(reply.headers_mut());
        // Not for localhost: HSTS holds for every port of a host, and native
        // clients' callbacks are plain http://localhost:PORT.
        let host = self.authority.rsplit_once(':').map_or(self.authority.as_str(), |(h, _)| h);
        if host != "localhost" && !host.ends_with(".localhost") {
            reply.headers_mut().insert("strict-transport-security", HeaderValue::from_static("max-age=31536000"));
        }
        reply
    }

    async fn route<B>(&self, req: Request<B>, client: std::net::IpAddr) -> Reply
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        if path == "/mcp" {
            return self.mcp(req).await;
        }
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        match (&method, segments.as_slice()) {
            (
                &Method::GET,
                [".well-known", "oauth-protected-resource"] | [".well-known", "oauth-protected-resource", "mcp"],
            ) => json_reply(200, &self.urls.resource_document()),
            (&Method::GET, [".well-known", "oauth-authorization-server"]) => {
                json_reply(200, &self.urls.server_document())
            }
            (&Method::POST, ["register"]) => self.register(req).await,
            (&Method::GET, ["authorize"]) => self.authorize(&req),
            (&Method::POST, ["token"]) => self.token(req).await,
            (&Method::GET, [""]) => self.home(req.headers()),
            (&Method::GET, ["plimsoll.js"]) => {
                let mut r = Response::new(full(&include_bytes!("assets/plimsoll.js")[..]));
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/javascript; charset=utf-8"));
                r
            }
            (&Method::GET, ["plimsoll.css"]) => {
                let mut r = Response::new(full(&include_bytes!("assets/plimsoll.css")[..]));
                r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/css; charset=utf-8"));
                r
            }
            (&Method::POST, ["passkey", step @ ("register" | "signin"), phase @ ("start" | "finish")])
            | (&Method::POST, ["passkey", step @ "add", phase @ "start"]) => {
                let (step, phase) = (step.to_string(), phase.to_string());
                self.passkey(req, &step, &phase, client).await
            }
            (&Method::POST, ["signout"]) => self.sign_out(req).await,
            (&Method::GET, ["approve", id]) => self.approve_page(req.headers(), id),
            (&Method::POST, ["approve", id]) => {
                let id = id.to_string();
                self.decide(req, &id).await
            }
            (&Method::POST, ["approvals", id, "revoke"]) => {
                let id = id.to_string();
                self.revoke(req, &id).await
            }
            (_, [".well-known", ..] | ["register"] | ["authorize"] | ["token"] | ["signout"] | ["approve", _]) => {
                error_reply(405, format!("{method} is not served at {path}"))
            }
            _ => error_reply(404, format!("nothing is served at {path}")),
        }
    }

    async fn register<B>(&self, req: Request<B>) -> Reply
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        if let Err(r) = gate::origin(header_str(req.headers(), header::ORIGIN), self.public()) {
            return json_reply(r.status, &r.body);
        }
        let body = match read_body(req.into_body(), MAX_FORM).await {
            Ok(b) => b,
            Err(r) => return r.reply(),
        };
        match self.changing(|auth| auth.register(&body, Instant::now())) {
            Ok(v) => {
                log(format_args!("registered client {:?}", v["client_name"].as_str().unwrap_or_default()));
                json_reply(201, &v)
            }
            Err(e) => json_reply(e.status, &e.body()),
        }
    }

    fn authorize<B>(&self, req: &Request<B>) -> Reply {
        let q = match crate::oauth::form(req.uri().query().unwrap_or_default()) {
            Ok(q) => q,
            Err(why) => return html_reply(400, pages::message("Not a valid authorization request", &why)),
        };
        match lock(&self.auth).authorize(&q, Instant::now()) {
            Ok(held) => {
                log(format_args!(
                    "held a connection request from client {:?} (redirect to {}) for the owner",
                    held.client_name, held.redirect_host
                ));
                see_other(&format!("/approve/{}", held.id))
            }
            Err(AuthorizeRefusal::Page(why)) => html_reply(400, pages::message("Authorization refused", &why)),
            Err(AuthorizeRefusal::Redirect(to)) => see_other(&to),
        }
    }

    async fn token<B>(&self, req: Request<B>) -> Reply
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        if let Err(r) = gate::origin(header_str(req.headers(), header::ORIGIN), self.public()) {
            return json_reply(r.status, &r.body);
        }
        let ct = header_str(req.headers(), header::CONTENT_TYPE).unwrap_or_default();
        if !ct.split(';').next().unwrap_or_default().trim().eq_ignore_ascii_case("application/x-www-form-urlencoded") {
            return json_reply(
                400,
                &json!({"error": "invalid_request", "error_description": "the token request must be application/x-www-form-urlencoded"}),
            );
        }
        let body = match read_body(req.into_body(), MAX_FORM).await {
            Ok(b) => b,
            Err(r) => return r.reply(),
        };
        let f = match std::str::from_utf8(&body).map_err(|e| e.to_string()).and_then(crate::oauth::form) {
            Ok(f) => f,
            Err(why) => return json_reply(400, &json!({"error": "invalid_request", "error_description": why})),
        };
        match self.changing(|auth| auth.token(&f, Instant::now())) {
            Ok(v) => json_reply(200, &v),
            Err(e) => json_reply(e.status, &e.body()),
        }
    }

    /// Whether the request's cookie is a live owner session.
    fn signed_in(&self, h: &HeaderMap) -> bool {
        lock(&self.owner).session(header_str(h, header::COOKIE), Instant::now()).is_ok()
    }

    fn home(&self, h: &HeaderMap) -> Reply {
        if lock(&self.owner).passkeys() == 0 {
            return html_reply(200, pages::setup());
        }
        if !self.signed_in(h) {
            return html_reply(200, pages::sign_in("Sign in to see and revoke this server's connections."));
        }
        let (csrf, passkeys) = {
            let owner = lock(&self.owner);
            (owner.csrf(header_str(h, header::COOKIE)).unwrap_or_default(), owner.passkeys())
        };
        let approvals = lock(&self.auth).approvals();
        html_reply(200, pages::dashboard(&approvals, &csrf, passkeys))
    }

    /// A passkey ceremony's step from `client`, whose failures count against
    /// it alone.
    async fn passkey<B>(&self, req: Request<B>, step: &str, phase: &str, client: std::net::IpAddr) -> Reply
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        if let Err(r) = self.same_origin(req.headers()) {
            return r.reply();
        }
        let cookie = header_str(req.headers(), header::COOKIE).map(str::to_string);
        let body = match read_body(req.into_body(), MAX_FORM).await {
            Ok(b) => b,
            Err(r) => return r.reply(),
        };
        let v: Value = match serde_json::from_slice(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return error_reply(400, "the body must be a JSON object"),
        };
        let now = Instant::now();
        let mut owner = lock(&self.owner);
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let started = |r: Result<(String, Value), PasskeyError>| match r {
            Ok((ceremony, options)) => json_reply(200, &json!({"ceremony": ceremony, "options": options})),
            Err(e) => passkey_refused(&e),
        };
        let finished = |r: Result<String, PasskeyError>, what: &str| match r {
            Ok(token) => {
                log(format_args!("the owner {what}"));
                let mut reply = json_reply(200, &json!({"ok": true}));
                if let Ok(v) = HeaderValue::from_str(&Owner::set_cookie(&token)) {
                    reply.headers_mut().insert(header::SET_COOKIE, v);
                }
                reply
            }
            Err(e) => {
                log(format_args!("passkey refused: {e}"));
                passkey_refused(&e)
            }
        };
        let credential = v.get("credential").cloned().unwrap_or(Value::Null);
        match (step, phase) {
            ("register", "start") => started(owner.start_registration(&text("code"), client, now)),
            // Another passkey (a second device), by the signed-in owner only.
            ("add", _) => started(owner.start_registration_signed_in(cookie.as_deref(), now)),
            ("register", "finish") => {
                finished(owner.finish_registration(&text("ceremony"), &credential, now), "registered a passkey")
            }
            ("signin", "start") => started(owner.start_signin(client, now)),
            _ => finished(owner.finish_signin(&text("ceremony"), &credential, client, now), "signed in"),
        }
    }

    /// A browser form's fields, once its origin, cookie and anti-forgery value check.
    async fn owners_form<B>(&self, req: Request<B>) -> Result<std::collections::BTreeMap<String, String>, Refusal>
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        self.same_origin(req.headers())?;
        let cookie = header_str(req.headers(), header::COOKIE).map(str::to_string);
        if let Err(e) = lock(&self.owner).session(cookie.as_deref(), Instant::now()) {
            return Err(Refusal::Page(401, pages::sign_in(&format!("{e}. Sign in again, then repeat what you did."))));
        }
        let body = read_body(req.into_body(), MAX_FORM).await?;
        let form = std::str::from_utf8(&body)
            .map_err(|e| e.to_string())
            .and_then(crate::oauth::form)
            .map_err(|why| Refusal::Page(400, pages::message("Not a valid form", &why)))?;
        let token = form.get("csrf").map(String::as_str).unwrap_or_default();
        if !lock(&self.owner).check_csrf(cookie.as_deref(), token) {
            return Err(Refusal::Page(
                403,
                pages::message("Refused", "This form's anti-forgery value is not this session's; reload the page."),
            ));
        }
        Ok(form)
    }

    async fn sign_out<B>(&self, req: Request<B>) -> Reply
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        let cookie = header_str(req.headers(), header::COOKIE).map(str::to_string);
        if let Err(r) = self.owners_form(req).await {
            return r.reply();
        }
        lock(&self.owner).sign_out(cookie.as_deref());
        let mut r = see_other("/");
        if let Ok(v) = HeaderValue::from_str(&Owner::clear_cookie()) {
            r.headers_mut().insert(header::SET_COOKIE, v);
        }
        r
    }

    fn approve_page(&self, h: &HeaderMap, id: &str) -> Reply {
        if !self.signed_in(h) {
            return html_reply(200, pages::sign_in("A client asks to connect. Sign in to approve or deny it."));
        }
        let Some(held) = lock(&self.auth).held(id, Instant::now()) else {
            return html_reply(
                404,
                pages::message(
                    "No such request",
                    "This authorization request was decided already, or waited too long.",
                ),
            );
        };
        let csrf = lock(&self.owner).csrf(header_str(h, header::COOKIE)).unwrap_or_default();
        let mut r = html_reply(200, pages::approve(&held, &csrf));
        // The decision's form answers with a redirect to the client: the
        // page's form-action names that origin and no other.
        let origin = crate::oauth::redirect_origin(&held.redirect_uri).unwrap_or_default();
        let csp = format!(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
             form-action 'self' {origin}; frame-ancestors 'none'; base-uri 'none'"
        );
        if let Ok(v) = HeaderValue::from_str(&csp) {
            r.headers_mut().insert("content-security-policy", v);
        }
        r
    }

    async fn decide<B>(&self, req: Request<B>, id: &str) -> Reply
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        let form = match self.owners_form(req).await {
            Ok(f) => f,
            Err(r) => return r.reply(),
        };
        let approve = match form.get("decision").map(String::as_str) {
            Some("approve") => true,
            Some("deny") => false,
            _ => return html_reply(400, pages::message("Not a decision", "decision must be approve or deny")),
        };
        match self.changing(|auth| auth.decide(id, approve, Instant::now(), SystemTime::now())) {
            Ok((to, Some(a))) => {
                log(format_args!(
                    "approved connection {} for client {:?} (redirect {})",
                    a.id, a.client_name, a.redirect_uri
                ));
                see_other(&to)
            }
            Ok((to, None)) => {
                log("denied a connection request");
                see_other(&to)
            }
            Err(AuthorizeRefusal::Page(why) | AuthorizeRefusal::Redirect(why)) => {
                html_reply(404, pages::message("No such request", &why))
            }
        }
    }

    async fn revoke<B>(&self, req: Request<B>, id: &str) -> Reply
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        if let Err(r) = self.owners_form(req).await {
            return r.reply();
        }
        if !self.changing(|auth| auth.revoke(id)) {
            return html_reply(404, pages::message("No such connection", "It was revoked already."));
        }
        let sessions = lock(&self.sessions).revoke(id);
        for s in &sessions {
            use rmcp::transport::streamable_http_server::session::SessionManager as _;
            let _ = self.manager.close_session(&Arc::from(s.as_str())).await;
        }
        let closed = self.tools.forget(&Scope::approval(id)).await;
        log(format_args!(
            "revoked connection {id}: its tokens end now; {} MCP sessions and {closed} sandboxes closed",
            sessions.len()
        ));
        see_other("/")
    }
}
