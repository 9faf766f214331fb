//! The host's side of `plimsoll:host/http`: outbound HTTP for plugins, only to the
//! endpoints their manifest names and the operator mapped to a URL, with only the
//! headers the manifest declares. The host adds the operator's headers (a
//! credential the plugin never holds) and client certificate, refuses redirects,
//! caps request and response sizes and time, and logs every call without bodies.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::rt::TokioExecutor;

/// The largest request body a plugin may send.
pub const MAX_REQUEST_BYTES: usize = 4 << 20;
/// The largest response body `send` returns.
pub const MAX_RESPONSE_BYTES: usize = 4 << 20;
/// The longest one `send` may take.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);
/// The most body bytes one streamed response may carry.
pub const MAX_STREAM_BYTES: u64 = 64 << 20;
/// The longest one streamed response may last.
pub const MAX_STREAM_TIME: Duration = Duration::from_secs(30 * 60);
/// The most bytes one `read` of a stream returns.
pub const MAX_READ_BYTES: usize = 1 << 20;
/// Headers only the host sets.
const HOST_HEADERS: [&str; 8] = [
    "authorization",
    "host",
    "cookie",
    "proxy-authorization",
    "content-length",
    "transfer-encoding",
    "connection",
    "te",
];
mod exchange;
mod grpc;
mod held;
mod relay;

pub use exchange::TokenExchange;
pub use grpc::GrpcBooking;
pub use held::{HeldSecret, MAX_HELD};
pub use relay::{MAX_RELAY_STREAMS, Relays, Way};

/// How the gate reads which target a write made, and sees one deleted.
#[derive(Clone, Debug)]
enum Maker {
    /// The top-level string field of a JSON answer (Docker's `uid`); deleted by
    /// a `DELETE` of a path ending in the target.
    Json(String),
    /// A gRPC create and delete.
    Grpc(GrpcBooking),
    /// A Kubernetes collection (a path ending in it): a `POST` to it answered
    /// 2xx makes the object its answer names at the JSON pointer; the object is
    /// gone only when a `GET` or `DELETE` of `<collection>/<name>` answers 404,
    /// since a foreground delete keeps it until its dependents are gone.
    Collection { collection: String, name_at: String },
}

/// Where a per-target endpoint's URL takes its target.
const TARGET: &str = "{target}";

/// The TLS an endpoint needs beyond the system's roots: the operator's CA (then
/// only it is trusted there) and a client certificate for mutual TLS. The host
/// holds both; a plugin only names the endpoint.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EndpointTls {
    /// PEM certificates trusted for this endpoint instead of the system's.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM certificate chain and PEM private key presented to the server.
    pub client_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for EndpointTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointTls")
            .field("own_ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.client_pem.is_some())
            .finish()
    }
}

/// Where an alias points, and what the host adds to every request there.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Endpoint {
    /// The base URL (`http` or `https`); a request's path is appended. `{target}`
    /// in its host makes a host per target (`https://49983-{target}.e2b.app`).
    pub base: String,
    /// Headers the host adds (the operator's credential); never shown to the plugin.
    pub headers: Vec<(String, String)>,
    /// Its own CA and client certificate, if any.
    pub tls: EndpointTls,
    /// Where every connection goes, whatever the URL's host resolves to (a
    /// gateway reached by a private address, a test's local fake); the URL's
    /// host still names the server for TLS and the `Host` header.
    pub connect_to: Option<std::net::IpAddr>,
    /// A long-lived credential the host trades for a short-lived bearer, which it
    /// attaches as `authorization` (renewed before it ends).
    pub exchange: Option<TokenExchange>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("Endpoint")
            .field("base", &self.base)
            .field("headers", &names)
            .field("tls", &self.tls)
            .field("connect_to", &self.connect_to)
            .field("exchange", &self.exchange)
            .finish()
    }
}

/// What a plugin asked for.
#[derive(Clone, Debug)]
pub struct Ask {
    /// The endpoint's alias.
    pub endpoint: String,
    /// The target, for an endpoint with a host per target.
    pub target: Option<String>,
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE` or `HEAD`.
    pub method: String,
    /// Absolute path, with a query if any.
    pub path: String,
    /// The plugin's own headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Its budget: at most [`MAX_TIMEOUT`] for `send`, [`MAX_STREAM_TIME`] for `open`.
    pub timeout: Duration,
}

/// What the manifest lets a plugin use: its endpoints and the headers it sets.
#[derive(Clone, Debug, Default)]
pub struct Allowed {
    /// Endpoint aliases.
    pub endpoints: Vec<String>,
    /// Lowercase header names.
    pub headers: Vec<String>,
    /// Endpoints where a request may start code; `None`: every endpoint.
    pub runs_code_at: Option<Vec<String>>,
}

impl Allowed {
    /// What a plugin's manifest allows.
    pub fn of(m: &plimsoll_plugin_trust::Manifest) -> Allowed {
        Allowed {
            endpoints: m.endpoints.keys().cloned().collect(),
            headers: m.headers.clone(),
            runs_code_at: m.runs_code_at.clone(),
        }
    }

    /// Whether a write to `endpoint` may start code.
    pub fn runs_code(&self, endpoint: &str) -> bool {
        self.runs_code_at.as_ref().is_none_or(|e| e.iter().any(|x| x == endpoint))
    }
}

/// The upstream's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// The body, within [`MAX_RESPONSE_BYTES`].
    pub body: Vec<u8>,
    /// The trailers after the body.
    pub trailers: Vec<(String, String)>,
    /// Targets whose secrets the host took out of this answer and now holds (a
    /// sandbox just created).
    pub captured: Vec<String>,
}

/// One call as the log sees it: never a body, a header value or a query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallRecord {
    /// The endpoint's alias.
    pub endpoint: String,
    /// The target, for a per-target endpoint.
    pub target: Option<String>,
    /// The method.
    pub method: String,
    /// The path without its query (a query may carry what a log must not).
    pub path: String,
    /// The status, if a response head arrived.
    pub status: Option<u16>,
    /// Bytes of request body sent.
    pub sent: u64,
    /// Bytes of response body received.
    pub received: u64,
    /// From sending to the end of the body (or the failure).
    pub elapsed: Duration,
    /// Why it ended without a whole answer, in plimsoll's words.
    pub error: Option<String>,
    /// Whether the body was streamed (`open`).
    pub streamed: bool,
    /// Whether the plugin let go of the stream before its body ended: how a
    /// plugin ends a stream it has read enough of (a session's answer, a
    /// deadline), not a failure.
    pub cancelled: bool,
}

/// Where the gate's call records go.
pub type CallLog = Arc<dyn Fn(&CallRecord) + Send + Sync>;

type Connector = hyper_rustls::HttpsConnector<HttpConnector<Resolve>>;

/// How an endpoint's host name becomes an address: the system's resolver, or the
/// operator's fixed address.
#[derive(Clone)]
enum Resolve {
    System(GaiResolver),
    Pinned(std::net::IpAddr),
}

type Resolved = std::vec::IntoIter<std::net::SocketAddr>;

impl tower_service::Service<Name> for Resolve {
    type Response = Resolved;
    type Error = std::io::Error;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Resolved, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), std::io::Error>> {
        match self {
            Resolve::System(gai) => gai.poll_ready(cx),
            Resolve::Pinned(_) => std::task::Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, name: Name) -> Self::Future {
        match self {
            Resolve::System(gai) => {
                let lookup = gai.call(name);
                Box::pin(async move { Ok(lookup.await?.collect::<Vec<_>>().into_iter()) })
            }
            // The connector puts the URL's port on it.
            Resolve::Pinned(ip) => {
                let addr = std::net::SocketAddr::new(*ip, 0);
                Box::pin(async move { Ok(vec![addr].into_iter()) })
            }
        }
    }
}
type Client = Hyper<Connector, Outgoing>;

/// A request's body: whole, or piped in as it comes (a relay stream's).
type Outgoing = http_body_util::Either<Full<Bytes>, relay::Piped>;

fn whole(body: Vec<u8>) -> Outgoing {
    http_body_util::Either::Left(Full::new(Bytes::from(body)))
}

/// One configured endpoint, with the client its TLS needs.
struct Route {
    endpoint: Endpoint,
    client: Client,
    /// A client that speaks HTTP/1.1 only, for an upgraded relay (an upgrade
    /// has no place in HTTP/2); made when first needed.
    upgrading: std::sync::OnceLock<Client>,
    /// The bearer the exchange gave, and until when it is used.
    bearer: std::sync::Mutex<Option<(String, Instant)>>,
}

/// The gate every plugin request passes.
pub struct HttpGate {
    routes: BTreeMap<String, Route>,
    /// Dropped by `Drop` in the background: a gate may be dropped inside the
    /// daemon's own async runtime (a startup that fails after building the
    /// provider), where a blocking shutdown panics.
    rt: std::mem::ManuallyDrop<tokio::runtime::Runtime>,
    log: Option<CallLog>,
    vault: held::Vault,
    /// Endpoint to how the gate reads the target a write made there.
    makers: BTreeMap<String, Maker>,
    /// Targets the gate saw made and not deleted.
    live: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

impl Drop for HttpGate {
    fn drop(&mut self) {
        // SAFETY: `rt` is taken once, here, and the gate is never used again.
        let rt = unsafe { std::mem::ManuallyDrop::take(&mut self.rt) };
        rt.shutdown_background();
    }
}

impl std::fmt::Debug for HttpGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpGate").field("endpoints", &self.routes.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

/// The client for `endpoint`: HTTP/2 or HTTP/1.1 as the server offers, or
/// HTTP/1.1 only when `upgrading`.
fn client(alias: &str, endpoint: &Endpoint) -> Result<Client, String> {
    build_client(alias, endpoint, false)
}

fn build_client(alias: &str, endpoint: &Endpoint, upgrading: bool) -> Result<Client, String> {
    let tls = &endpoint.tls;
    use rustls::pki_types::pem::PemObject as _;
    let fail = |what: &str, e: &dyn std::fmt::Display| format!("endpoint {alias}: {what}: {e}");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    match &tls.ca_pem {
        Some(pem) => {
            let mut n = 0;
            for cert in rustls_pemfile_certs(pem).map_err(|e| fail("its CA", &e))? {
                roots.add(cert).map_err(|e| fail("its CA", &e))?;
                n += 1;
            }
            if n == 0 {
                return Err(format!("endpoint {alias}: its CA file holds no certificate"));
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail("TLS", &e))?
        .with_root_certificates(roots);
    let config = match &tls.client_pem {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => {
            let chain = rustls_pemfile_certs(chain).map_err(|e| fail("its client certificate", &e))?;
            if chain.is_empty() {
                return Err(format!("endpoint {alias}: its client certificate file holds no certificate"));
            }
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key).map_err(|e| fail("its client key", &e))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| fail("its client certificate", &e))?
        }
    };
    let resolve = endpoint.connect_to.map_or_else(|| Resolve::System(GaiResolver::new()), Resolve::Pinned);
    let mut connector = HttpConnector::new_with_resolver(resolve);
    connector.enforce_http(false);
    // A small request (a gRPC frame, its headers) must not wait on Nagle for the
    // peer's delayed acknowledgement: that cost 40 ms a call.
    connector.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config).https_or_http();
    let https = if upgrading {
        https.enable_http1().wrap_connector(connector)
    } else {
        https.enable_all_versions().wrap_connector(connector)
    };
    Ok(Hyper::builder(TokioExecutor::new()).build(https))
}

fn rustls_pemfile_certs(pem: &[u8]) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject as _;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())
}

/// Whether `t` may stand in a host name: one DNS label, lowercase.
fn is_target(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 63
        && t.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !t.starts_with('-')
        && !t.ends_with('-')
}

fn check_base(alias: &str, base: &str) -> Result<(), String> {
    let placed = base.matches(TARGET).count();
    if placed > 0 {
        let authority =
            base.split_once("://").map_or("", |(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or_default());
        if placed > 1 || !authority.contains(TARGET) {
            return Err(format!("endpoint {alias}: {base:?} may name {TARGET} once, in its host"));
        }
    }
    let probe = base.replacen(TARGET, "t", 1);
    let uri: http::Uri = probe.parse().map_err(|err| format!("endpoint {alias}: {base:?} is not a URL: {err}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() || uri.query().is_some() {
        return Err(format!("endpoint {alias}: {base:?} must be an absolute http or https URL without a query"));
    }
    Ok(())
}

/// Why a request goes nowhere: checked before anything is sent.
fn check(allowed: &Allowed, route: Option<&Route>, vault: &held::Vault, ask: &Ask) -> Result<String, String> {
    let alias = &ask.endpoint;
    if !allowed.endpoints.contains(alias) {
        return Err(format!("endpoint {alias:?} is not named in the plugin's manifest; no request was sent"));
    }
    let Some(route) = route else {
        return Err(format!("endpoint {alias:?} is not configured by the operator; no request was sent"));
    };
    let base = route.endpoint.base.trim_end_matches('/');
    let base = match (&ask.target, base.contains(TARGET)) {
        (None, false) => base.to_string(),
        (Some(t), true) if is_target(t) => base.replacen(TARGET, t, 1),
        (Some(t), true) => {
            return Err(format!(
                "target {t:?} must be lowercase letters, digits and dashes (at most 63); no request was sent"
            ));
        }
        (None, true) => return Err(format!("endpoint {alias:?} needs a target; no request was sent")),
        (Some(_), false) => return Err(format!("endpoint {alias:?} has no host per target; no request was sent")),
    };
    if !ask.path.starts_with('/') || ask.path.starts_with("//") || ask.path.chars().any(char::is_control) {
        return Err(format!("path {:?} must be absolute; no request was sent", ask.path));
    }
    if !matches!(ask.method.as_str(), "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD") {
        return Err(format!("method {:?} is not allowed; no request was sent", ask.method));
    }
    if ask.body.len() > MAX_REQUEST_BYTES {
        return Err(format!("a body of {} bytes is over {MAX_REQUEST_BYTES}; no request was sent", ask.body.len()));
    }
    for (k, _) in &ask.headers {
        let name = k.to_ascii_lowercase();
        if HOST_HEADERS.contains(&name.as_str())
            || route.endpoint.headers.iter().any(|(h, _)| h.eq_ignore_ascii_case(k))
            || vault.headers_for(alias).any(|h| h.eq_ignore_ascii_case(k))
        {
            return Err(format!("header {k:?} is the host's to set; no request was sent"));
        }
        if !allowed.headers.contains(&name) {
            return Err(format!("header {k:?} is not declared in the plugin's manifest; no request was sent"));
        }
    }
    Ok(format!("{base}{}", ask.path))
}

/// A streamed response: its head, and its body read piece by piece.
pub struct Incoming {
    /// The status.
    pub status: u16,
    /// The response headers.
    pub headers: Vec<(String, String)>,
    body: Option<hyper::body::Incoming>,
    trailers: Vec<(String, String)>,
    pending: Bytes,
    received: u64,
    deadline: Instant,
    rt: tokio::runtime::Handle,
    record: CallRecord,
    started: Instant,
    log: Option<CallLog>,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming").field("status", &self.status).field("received", &self.received).finish()
    }
}

impl Incoming {
    /// The next piece of the body, waiting at most `wait`: empty when nothing
    /// arrived in that time (the stream goes on), `None` at its end.
    ///
    /// # Errors
    ///
    /// The stream broke off, went over [`MAX_STREAM_BYTES`] or outlived its time;
    /// it takes no more reads.
    pub fn read(&mut self, wait: Duration) -> Result<Option<Vec<u8>>, String> {
        if !self.pending.is_empty() {
            let n = self.pending.len().min(MAX_READ_BYTES);
            return Ok(Some(self.pending.split_to(n).to_vec()));
        }
        let alias = self.record.endpoint.clone();
        let Some(body) = self.body.as_mut() else {
            return match &self.record.error {
                Some(e) => Err(e.clone()),
                None => Ok(None),
            };
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        let over_time = wait >= left;
        let frame = self.rt.block_on(async { tokio::time::timeout(wait.min(left), body.frame()).await });
        let result = match frame {
            Err(_) if over_time => Err(format!("endpoint {alias:?}: the stream outlived the request's time")),
            Err(_) => return Ok(Some(Vec::new())),
            Ok(None) => Ok(None),
            Ok(Some(Err(e))) => Err(format!("endpoint {alias:?}: the stream broke off ({e})")),
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => {
                    self.received += data.len() as u64;
                    if self.received > MAX_STREAM_BYTES {
                        Err(format!("endpoint {alias:?}: the stream went over {MAX_STREAM_BYTES} bytes"))
                    } else {
                        self.pending = data;
                        let n = self.pending.len().min(MAX_READ_BYTES);
                        return Ok(Some(self.pending.split_to(n).to_vec()));
                    }
                }
                Err(frame) => {
                    if let Ok(t) = frame.into_trailers() {
                        self.trailers = header_list(&t);
                    }
                    // Trailers end the body; anything after them is the stream's end.
                    Ok(None)
                }
            },
        };
        self.finish(result.as_ref().err().cloned());
        result
    }

    /// The trailers, once the body has ended.
    pub fn trailers(&self) -> Vec<(String, String)> {
        self.trailers.clone()
    }

    /// Ends the stream (dropping the body resets it) and logs the call once.
    fn finish(&mut self, error: Option<String>) {
        if self.body.take().is_some() {
            self.record.received = self.received;
            self.record.elapsed = self.started.elapsed();
            self.record.error = error;
            if let Some(log) = &self.log {
                log(&self.record);
            }
        }
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        if self.body.is_some() {
            self.record.cancelled = true;
            self.finish(None);
        }
    }
}

fn header_list(h: &http::HeaderMap) -> Vec<(String, String)> {
    h.iter().map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned())).collect()
}

impl HttpGate {
    /// A gate over `endpoints` (alias to URL, headers and TLS).
    ///
    /// # Errors
    ///
    /// An endpoint's URL is not an absolute http or https URL (or names `{target}`
    /// anywhere but once in its host), or its TLS files are not usable.
    pub fn new(endpoints: BTreeMap<String, Endpoint>) -> Result<HttpGate, String> {
        let mut routes = BTreeMap::new();
        for (alias, endpoint) in endpoints {
            check_base(&alias, &endpoint.base)?;
            let client = client(&alias, &endpoint)?;
            let upgrading = std::sync::OnceLock::new();
            routes.insert(alias, Route { endpoint, client, upgrading, bearer: std::sync::Mutex::new(None) });
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("plimsoll-plugin-http")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the plugin HTTP runtime: {e}"))?;
        Ok(HttpGate {
            routes,
            rt: std::mem::ManuallyDrop::new(rt),
            log: None,
            vault: held::Vault::default(),
            makers: BTreeMap::new(),
            live: std::sync::Mutex::new(std::collections::BTreeSet::new()),
        })
    }

    /// The gate's runtime, which serves what its relay streams reach.
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.rt.handle().clone()
    }

    /// The gate, holding `kinds` of per-target secrets for the plugin.
    ///
    /// # Errors
    ///
    /// A kind names an endpoint that is not configured, or one whose URL has no
    /// host per target to carry it to.
    pub fn holding(mut self, kinds: Vec<HeldSecret>) -> Result<HttpGate, String> {
        for k in &kinds {
            if !self.routes.contains_key(&k.from) {
                return Err(format!("a held secret comes from endpoint {:?}, which is not configured", k.from));
            }
            match self.routes.get(&k.to) {
                Some(r) if r.endpoint.base.contains(TARGET) => {}
                _ => return Err(format!("a held secret goes to endpoint {:?}, which has no host per target", k.to)),
            }
        }
        self.vault = held::Vault::new(kinds);
        Ok(self)
    }

    /// The gate, reading the target each write to `endpoint` made from `field` of
    /// its answer, so the host books a sandbox from its create on, before any
    /// secret of it is held.
    ///
    /// # Errors
    ///
    /// `endpoint` is not configured.
    pub fn booking(mut self, endpoint: &str, field: &str) -> Result<HttpGate, String> {
        if !self.routes.contains_key(endpoint) {
            return Err(format!("targets are booked from endpoint {endpoint:?}, which is not configured"));
        }
        self.makers.insert(endpoint.to_string(), Maker::Json(field.to_string()));
        Ok(self)
    }

    /// The gate, booking the objects a `POST` to `collection` (a path suffix, as
    /// `/sandboxclaims`) at `endpoint` makes, named in the answer at the JSON
    /// pointer `name_at`, until a read or delete of one answers 404.
    ///
    /// # Errors
    ///
    /// `endpoint` is not configured.
    pub fn booking_collection(mut self, endpoint: &str, collection: &str, name_at: &str) -> Result<HttpGate, String> {
        if !self.routes.contains_key(endpoint) {
            return Err(format!("targets are booked from endpoint {endpoint:?}, which is not configured"));
        }
        let maker = Maker::Collection { collection: collection.to_string(), name_at: name_at.to_string() };
        self.makers.insert(endpoint.to_string(), maker);
        Ok(self)
    }

    /// The gate, booking the targets that `booking`'s create makes at `endpoint`
    /// (spoken in gRPC) and forgetting those its delete removes.
    ///
    /// # Errors
    ///
    /// `endpoint` is not configured.
    pub fn booking_grpc(mut self, endpoint: &str, booking: GrpcBooking) -> Result<HttpGate, String> {
        if !self.routes.contains_key(endpoint) {
            return Err(format!("targets are booked from endpoint {endpoint:?}, which is not configured"));
        }
        self.makers.insert(endpoint.to_string(), Maker::Grpc(booking));
        Ok(self)
    }

    /// How many per-target secrets the gate holds.
    pub fn held(&self) -> usize {
        self.vault.len()
    }

    /// `text` with every credential the gate attaches (the operator's headers and
    /// the per-target secrets it holds) replaced by `<redacted>`: what a vendor
    /// echoed into an answer never reaches a log line or a caller through a plugin.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        let operator = self.routes.values().flat_map(|r| r.endpoint.headers.iter().map(|(_, v)| v.clone()));
        let exchanged = self.routes.values().flat_map(|r| {
            let bearer = r.bearer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            r.endpoint.exchange.iter().map(|x| x.secret.clone()).chain(bearer.map(|(t, _)| t))
        });
        for secret in operator.chain(exchanged).chain(self.vault.values()) {
            // A value this short is no credential, and would redact ordinary words.
            if secret.len() >= 8 {
                out = out.replace(&secret, "<redacted>");
                // A bearer's token alone, too.
                if let Some(token) = secret.strip_prefix("Bearer ").filter(|t| t.len() >= 8) {
                    out = out.replace(token, "<redacted>");
                }
            }
        }
        out
    }

    /// Whether the gate saw `target` made (a secret of it held, or its create
    /// answered) and not seen deleted.
    pub fn holds(&self, target: &str) -> bool {
        self.live().contains(target)
    }

    fn live(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The target a write's answer from `endpoint` says it made, if the endpoint
    /// books them.
    fn made(&self, ask: &Ask, answer: &Answer) -> Option<String> {
        if matches!(ask.method.as_str(), "GET" | "HEAD") {
            return None;
        }
        let made = match self.makers.get(&ask.endpoint)? {
            Maker::Json(field) => {
                if !(200..300).contains(&answer.status) {
                    return None;
                }
                let v: serde_json::Value = serde_json::from_slice(&answer.body).ok()?;
                v.get(field).and_then(|t| t.as_str()).map(str::to_string)
            }
            Maker::Grpc(g) => g.made(&ask.path, &answer.headers, answer),
            Maker::Collection { collection, name_at } => {
                let path = ask.path.split('?').next().unwrap_or_default();
                if ask.method != "POST" || !path.ends_with(collection.as_str()) || !(200..300).contains(&answer.status)
                {
                    return None;
                }
                let v: serde_json::Value = serde_json::from_slice(&answer.body).ok()?;
                v.pointer(name_at).and_then(|t| t.as_str()).map(str::to_string)
            }
        };
        made.filter(|t| is_target(t))
    }

    /// Whether `ask` may make or delete a target the gate books from its answer
    /// or request: a write to an endpoint with a JSON booking, or a gRPC
    /// booking's create or delete.
    fn books(&self, ask: &Ask) -> bool {
        match self.makers.get(&ask.endpoint) {
            None => false,
            Some(Maker::Json(_)) => !matches!(ask.method.as_str(), "GET" | "HEAD"),
            Some(Maker::Collection { .. }) => matches!(ask.method.as_str(), "POST" | "DELETE"),
            Some(Maker::Grpc(g)) => {
                let path = ask.path.split('?').next().unwrap_or_default();
                path == g.create || path == g.delete
            }
        }
    }

    /// The target a write deleted, if it deleted one: a `DELETE` answered 2xx or
    /// 404 names it by its path's last segment; a gRPC delete by its request.
    fn deleted(&self, ask: &Ask, answer: &Answer) -> Option<String> {
        let target = match self.makers.get(&ask.endpoint) {
            Some(Maker::Grpc(g)) => g.deleted(&ask.path, &ask.body, answer)?,
            Some(Maker::Collection { collection, .. }) => {
                let path = ask.path.split('?').next().unwrap_or_default();
                let (parent, name) = path.rsplit_once('/')?;
                let read_or_delete = matches!(ask.method.as_str(), "GET" | "DELETE");
                if !read_or_delete || answer.status != 404 || !parent.ends_with(collection.as_str()) {
                    return None;
                }
                name.to_string()
            }
            _ if self.vault.scans(&ask.endpoint) || self.makers.contains_key(&ask.endpoint) => {
                if ask.method != "DELETE" || !((200..300).contains(&answer.status) || answer.status == 404) {
                    return None;
                }
                let path = ask.path.split('?').next().unwrap_or_default();
                path.rsplit('/').next()?.to_string()
            }
            _ => return None,
        };
        is_target(&target).then_some(target)
    }

    /// The gate, logging every call it sends through `log`.
    #[must_use]
    pub fn logging(mut self, log: CallLog) -> HttpGate {
        self.log = Some(log);
        self
    }

    /// Whether `ask` would be sent: the checks `send` and `open` make first.
    ///
    /// # Errors
    ///
    /// Why nothing would be sent.
    pub fn admits(&self, allowed: &Allowed, ask: &Ask) -> Result<(), String> {
        check(allowed, self.routes.get(&ask.endpoint), &self.vault, ask).map(|_| ())
    }

    fn request(
        &self,
        allowed: &Allowed,
        ask: &Ask,
        body: Outgoing,
    ) -> Result<(http::Request<Outgoing>, Client), String> {
        let route = self.routes.get(&ask.endpoint);
        let url = check(allowed, route, &self.vault, ask)?;
        let Some(route) = route else { unreachable!("check refuses an unconfigured endpoint") };
        let bearer = self.bearer(&ask.endpoint, route)?;
        let mut req = http::Request::builder().method(ask.method.as_str()).uri(url);
        if let Some(token) = bearer {
            req = req.header("authorization", format!("Bearer {token}"));
        }
        let held = self.vault.attach(&ask.endpoint, ask.target.as_deref());
        for (k, v) in ask.headers.iter().chain(&route.endpoint.headers).chain(&held) {
            req = req.header(k.as_str(), v.as_str());
        }
        // gRPC needs it, and over HTTP/1.1 it asks for trailers at all.
        req = req.header("te", "trailers");
        let req = req.body(body).map_err(|e| format!("a malformed request ({e}); no request was sent"))?;
        Ok((req, route.client.clone()))
    }

    /// After a deleted target: it and its held secrets go.
    fn forget(&self, target: &str) {
        self.vault.forget(target);
        self.live().remove(target);
    }

    /// The bearer an endpoint with a token exchange carries: the one held, or a
    /// new one from the exchange when it is within a minute of its end.
    fn bearer(&self, alias: &str, route: &Route) -> Result<Option<String>, String> {
        let Some(x) = &route.endpoint.exchange else { return Ok(None) };
        let mut held = route.bearer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((token, until)) = held.as_ref()
            && Instant::now() < *until
        {
            return Ok(Some(token.clone()));
        }
        let started = Instant::now();
        let req = http::Request::builder()
            .method("POST")
            .uri(x.url.as_str())
            .header("content-type", "application/json")
            .body(whole(exchange::request_body(x)))
            .map_err(|e| {
                format!("endpoint {alias:?}: the token exchange's URL is malformed ({e}); no request was sent")
            })?;
        let client = route.client.clone();
        let url = x.url.clone();
        let answer = self.rt.block_on(async move {
            let work = async {
                let resp = client
                    .request(req)
                    .await
                    .map_err(|e| format!("the token exchange at {url} did not answer: {e}"))?;
                let status = resp.status();
                if status.is_redirection() {
                    return Err(format!(
                        "the token exchange at {url} answered with a redirect ({status}), which is not followed"
                    ));
                }
                if status == http::StatusCode::UNAUTHORIZED || status == http::StatusCode::FORBIDDEN {
                    return Err(format!("the token exchange at {url} refused the operator's credential ({status})"));
                }
                if status != http::StatusCode::OK {
                    return Err(format!("the token exchange at {url} answered {status}"));
                }
                let body = Limited::new(resp.into_body(), exchange::MAX_ANSWER).collect().await.map_err(|_| {
                    format!("the token exchange's answer is over {} bytes or broke off", exchange::MAX_ANSWER)
                })?;
                exchange::bearer(&body.to_bytes())
            };
            tokio::time::timeout(MAX_TIMEOUT, work).await.unwrap_or_else(|_| {
                Err(format!("the token exchange did not answer within {} s", MAX_TIMEOUT.as_secs()))
            })
        });
        self.log(&CallRecord {
            endpoint: format!("{alias}:token-exchange"),
            target: None,
            method: "POST".into(),
            path: x.url.parse::<http::Uri>().map_or_else(|_| "/".to_string(), |u| u.path().to_string()),
            status: None,
            sent: 0,
            received: 0,
            elapsed: started.elapsed(),
            error: answer.as_ref().err().cloned(),
            streamed: false,
            cancelled: false,
        });
        let token = answer.map_err(|e| format!("endpoint {alias:?}: {e}; no request was sent"))?;
        let until = Instant::now() + exchange::usable_for(&token, std::time::SystemTime::now());
        *held = Some((token.clone(), until));
        Ok(Some(token))
    }

    fn record(ask: &Ask, streamed: bool) -> CallRecord {
        CallRecord {
            endpoint: ask.endpoint.clone(),
            target: ask.target.clone(),
            method: ask.method.clone(),
            path: ask.path.split('?').next().unwrap_or_default().to_string(),
            status: None,
            sent: ask.body.len() as u64,
            received: 0,
            elapsed: Duration::ZERO,
            error: None,
            streamed,
            cancelled: false,
        }
    }

    fn log(&self, record: &CallRecord) {
        if let Some(log) = &self.log {
            log(record);
        }
    }

    /// Sends `ask` for a plugin whose manifest allows `allowed`, and reads the whole answer.
    ///
    /// # Errors
    ///
    /// Plimsoll's words for why no response came back: a refusal (nothing sent), or
    /// the upstream unreachable, too slow, redirecting or over a cap.
    pub fn send(&self, allowed: &Allowed, ask: Ask) -> Result<Answer, String> {
        let (req, client) = self.request(allowed, &ask, whole(ask.body.clone()))?;
        let alias = ask.endpoint.clone();
        let timeout = ask.timeout.min(MAX_TIMEOUT);
        let started = Instant::now();
        let mut record = Self::record(&ask, false);
        // A failure after the head still reports the status it came with.
        let work = async {
            let resp =
                client.request(req).await.map_err(|e| (None, format!("endpoint {alias:?} did not answer: {e}")))?;
            let code = resp.status().as_u16();
            if resp.status().is_redirection() {
                let e = format!("endpoint {alias:?} answered with a redirect ({code}), which is not followed");
                return Err((Some(code), e));
            }
            let headers = header_list(resp.headers());
            let collected = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES).collect().await.map_err(|e| {
                let e = format!(
                    "endpoint {alias:?}: the response body is over {MAX_RESPONSE_BYTES} bytes or broke off ({e})"
                );
                (Some(code), e)
            })?;
            let trailers = collected.trailers().map(header_list).unwrap_or_default();
            let body = collected.to_bytes().to_vec();
            Ok(Answer { status: code, headers, body, trailers, captured: Vec::new() })
        };
        let answer = self.rt.block_on(async {
            tokio::time::timeout(timeout, work).await.unwrap_or_else(|_| {
                Err((None, format!("endpoint {alias:?} did not answer within {} ms", timeout.as_millis())))
            })
        });
        record.elapsed = started.elapsed();
        let answer = match answer {
            Ok(mut a) => {
                record.status = Some(a.status);
                record.received = a.body.len() as u64;
                (a.body, a.captured) = self.vault.take(&ask.endpoint, a.body);
                if let Some(made) = self.made(&ask, &a)
                    && !a.captured.contains(&made)
                {
                    a.captured.push(made);
                }
                self.live().extend(a.captured.iter().cloned());
                if let Some(gone) = self.deleted(&ask, &a) {
                    self.forget(&gone);
                }
                Ok(a)
            }
            Err((status, e)) => {
                record.status = status;
                record.error = Some(e.clone());
                Err(e)
            }
        };
        self.log(&record);
        answer
    }

    /// Sends `ask` and returns once the response's head arrives; the body is read
    /// from the [`Incoming`], within the ask's time (at most [`MAX_STREAM_TIME`]).
    ///
    /// # Errors
    ///
    /// As [`HttpGate::send`], for the head.
    pub fn open(&self, allowed: &Allowed, ask: Ask) -> Result<Incoming, String> {
        if self.vault.scans(&ask.endpoint) && allowed.endpoints.contains(&ask.endpoint) {
            return Err(format!(
                "endpoint {:?} answers with secrets the host holds, so it is read whole: use send; no request was sent",
                ask.endpoint
            ));
        }
        if self.books(&ask) && allowed.endpoints.contains(&ask.endpoint) {
            return Err(format!(
                "a {} of {} at endpoint {:?} may make or delete a sandbox the host books, so it is read whole: use send; no request was sent",
                ask.method, ask.path, ask.endpoint
            ));
        }
        let (req, client) = self.request(allowed, &ask, whole(ask.body.clone()))?;
        let alias = ask.endpoint.clone();
        let timeout = ask.timeout.min(MAX_STREAM_TIME);
        let started = Instant::now();
        let deadline = started + timeout;
        let mut record = Self::record(&ask, true);
        let head = self.rt.block_on(async {
            match tokio::time::timeout(timeout, client.request(req)).await {
                Err(_) => Err(format!("endpoint {alias:?} did not answer within {} ms", timeout.as_millis())),
                Ok(Err(e)) => Err(format!("endpoint {alias:?} did not answer: {e}")),
                Ok(Ok(resp)) => Ok(resp),
            }
        });
        let resp = match head {
            Ok(r) if r.status().is_redirection() => {
                let code = r.status().as_u16();
                record.status = Some(code);
                Err(format!("endpoint {alias:?} answered with a redirect ({code}), which is not followed"))
            }
            Ok(r) => Ok(r),
            Err(e) => Err(e),
        };
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                record.elapsed = started.elapsed();
                record.error = Some(e.clone());
                self.log(&record);
                return Err(e);
            }
        };
        record.status = Some(resp.status().as_u16());
        let status = resp.status().as_u16();
        let headers = header_list(resp.headers());
        Ok(Incoming {
            status,
            headers,
            body: Some(resp.into_body()),
            trailers: Vec::new(),
            pending: Bytes::new(),
            received: 0,
            deadline,
            rt: self.rt.handle().clone(),
            record,
            started,
            log: self.log.clone(),
        })
    }
}

#[cfg(test)]
mod tests;
