//! The authorization server of the MCP server's HTTPS mode, for its one owner:
//! OAuth 2.1's authorization code grant with PKCE (S256 only), as the MCP
//! authorization specification asks of a server that is its own authorization
//! server. Clients register themselves (RFC 7591, public clients only); each
//! authorization request is held until the signed-in owner approves or denies
//! it, and an approval is what a connection's tokens, sandboxes and records
//! belong to. Revoking one ends its tokens at once.
//!
//! This module is the state and its rules, with no I/O: every function takes
//! the time, so every expiry is tested. Codes and tokens are 256 random bits,
//! kept only as their SHA-256.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

mod saved;
#[cfg(test)]
mod tests;

/// The one scope: the five tools.
pub const SCOPE: &str = "mcp:tools";
/// How long a held authorization request waits for the owner.
pub const PENDING_LIFE: Duration = Duration::from_secs(600);
/// How long an authorization code may wait to be exchanged.
pub const CODE_LIFE: Duration = Duration::from_secs(60);
/// How long an access token lasts; a refresh token lasts as long as its approval.
pub const ACCESS_LIFE: Duration = Duration::from_secs(3600);
/// How long a registered client with no approval is kept.
pub const CLIENT_LIFE: Duration = Duration::from_secs(24 * 3600);
/// Registered clients with no approval kept at once (registration needs no
/// credential, so it must not grow without bound); the oldest goes first.
pub const MAX_UNAPPROVED_CLIENTS: usize = 100;
/// Authorization requests held at once.
pub const MAX_PENDING: usize = 100;
/// Authorization requests held at once for one client.
pub const MAX_PENDING_PER_CLIENT: usize = 3;
/// Redirect URIs one client may register.
const MAX_REDIRECT_URIS: usize = 8;
/// The longest redirect URI, client name, or `state` taken.
const MAX_TEXT: usize = 2048;
/// Spent refresh tokens remembered (one presented again revokes its connection's tokens).
const MAX_SPENT_REFRESH: usize = 1024;

/// Where the server is, as the operator named it (`--public-url`): every URL
/// it states is built from this, never from a request's headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Urls {
    issuer: String,
}

impl Urls {
    /// `public` is `https://HOST[:PORT]`, with no path, query or fragment.
    ///
    /// # Errors
    ///
    /// Another scheme, a path, or no host.
    pub fn new(public: &str) -> Result<Urls, String> {
        let trimmed = public.trim_end_matches('/');
        let authority = trimmed
            .strip_prefix("https://")
            .ok_or_else(|| format!("the public URL {public:?} must be https://HOST[:PORT]"))?;
        if !plain_authority(authority) {
            return Err(format!("the public URL {public:?} must be https://HOST[:PORT], with no path"));
        }
        // As a browser writes the origin: lower case, no default port.
        let authority = authority.to_ascii_lowercase();
        let authority = authority.strip_suffix(":443").unwrap_or(&authority);
        Ok(Urls { issuer: format!("https://{authority}") })
    }

    /// The authorization server's identifier, `https://HOST[:PORT]`.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The protected resource: the MCP endpoint.
    pub fn resource(&self) -> String {
        format!("{}/mcp", self.issuer)
    }

    /// Where the protected resource's metadata is (RFC 9728, the path-suffixed form).
    pub fn resource_metadata(&self) -> String {
        format!("{}/.well-known/oauth-protected-resource/mcp", self.issuer)
    }

    /// The protected resource metadata document (RFC 9728).
    pub fn resource_document(&self) -> Value {
        json!({
            "resource": self.resource(),
            "authorization_servers": [self.issuer],
            "scopes_supported": [SCOPE],
            "bearer_methods_supported": ["header"],
            "resource_name": "plimsoll",
        })
    }

    /// The authorization server metadata document (RFC 8414).
    pub fn server_document(&self) -> Value {
        let at = |path: &str| format!("{}{path}", self.issuer);
        json!({
            "issuer": self.issuer,
            "authorization_endpoint": at("/authorize"),
            "token_endpoint": at("/token"),
            "registration_endpoint": at("/register"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": ["none"],
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": [SCOPE],
            "authorization_response_iss_parameter_supported": true,
        })
    }

    /// The `WWW-Authenticate` value of a 401 at the MCP endpoint; `invalid`
    /// when a token was presented and is no good.
    pub fn challenge(&self, invalid: bool) -> String {
        let error = if invalid { "error=\"invalid_token\", " } else { "" };
        format!("Bearer {error}resource_metadata=\"{}\", scope=\"{SCOPE}\"", self.resource_metadata())
    }
}

/// An OAuth error answered as JSON (`{"error", "error_description"}`) with its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuthError {
    /// The HTTP status: 400, or 401 for `invalid_client`.
    pub status: u16,
    /// The error code the RFCs name.
    pub error: &'static str,
    /// What was wrong, in plimsoll's words (never a secret).
    pub description: String,
}

impl OAuthError {
    fn new(error: &'static str, description: impl Into<String>) -> OAuthError {
        OAuthError { status: 400, error, description: description.into() }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({"error": self.error, "error_description": self.description})
    }
}

/// Why an authorization request was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthorizeRefusal {
    /// Not redirected (an unknown client or redirect URI, which may be anyone's):
    /// a 400 page saying this.
    Page(String),
    /// Back to the client's redirect URI: the full URL, with `error`, `state` and `iss`.
    Redirect(String),
}

/// An authorization request held for the owner, as the approval page shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// What the page's decision names.
    pub id: String,
    pub client_id: String,
    pub client_name: String,
    pub redirect_uri: String,
    /// The redirect URI's host, which the page shows first.
    pub redirect_host: String,
    pub scope: String,
}

/// A connection the owner approved: what its tokens, sandboxes and records belong to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Approval {
    pub id: String,
    pub client_id: String,
    pub client_name: String,
    pub redirect_uri: String,
    pub scope: String,
    /// When the owner approved it.
    pub approved_at: SystemTime,
    /// When a token of it was last taken at the MCP endpoint.
    pub last_used: Option<SystemTime>,
}

#[derive(Debug)]
struct Client {
    name: String,
    redirect_uris: Vec<String>,
    registered: Instant,
}

#[derive(Debug)]
struct Pending {
    client_id: String,
    redirect_uri: String,
    /// Whether the request named it (then the token request must too).
    redirect_named: bool,
    /// Which request this is, in the order they came (the oldest goes first).
    order: u64,
    state: Option<String>,
    challenge: String,
    resource: String,
    until: Instant,
}

#[derive(Debug)]
struct Code {
    approval: String,
    client_id: String,
    redirect_uri: String,
    redirect_named: bool,
    challenge: String,
    resource: String,
    until: Instant,
}

#[derive(Debug)]
struct Token {
    approval: String,
    client_id: String,
    /// None: a refresh token, good while its approval stands.
    until: Option<Instant>,
}

type Digest = [u8; 32];

fn digest(secret: &str) -> Digest {
    Sha256::digest(secret.as_bytes()).into()
}

/// 256 random bits, base64url: a code, a token, an identifier.
fn secret() -> String {
    let mut b = [0u8; 32];
    // Without randomness no code or token may be minted at all.
    if getrandom::fill(&mut b).is_err() {
        panic!("the system's random source failed; no secret can be minted");
    }
    URL_SAFE_NO_PAD.encode(b)
}

/// S256: `BASE64URL(SHA256(verifier))` (RFC 7636 §4.2).
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Whether `verifier` is one RFC 7636 §4.1 allows: 43 to 128 unreserved characters.
fn verifier_shape(verifier: &str) -> bool {
    (43..=128).contains(&verifier.len())
        && verifier.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Whether `authority` is a plain `host[:port]`: letters, digits, `.`, `-`,
/// and an IPv6 literal's brackets and colons; nothing a header or a policy
/// would read as a separator.
fn plain_authority(authority: &str) -> bool {
    !authority.is_empty()
        && authority.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
}

/// Whether `uri` holds only characters RFC 3986 allows in a URI (so it can
/// be sent in a `Location` header as it is).
fn uri_chars(uri: &str) -> bool {
    uri.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b'~'
                    | b':'
                    | b'/'
                    | b'?'
                    | b'#'
                    | b'['
                    | b']'
                    | b'@'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
            )
    })
}

/// Whether `registered` admits `asked`: the same URI, or for a loopback
/// `http` one the same but for the port, which a native client picks anew
/// each time (RFC 8252 §7.3).
pub fn redirect_matches(registered: &str, asked: &str) -> bool {
    if registered == asked {
        return true;
    }
    let loopback = |u: &str| -> Option<(String, String)> {
        let (scheme, authority, path) = uri_parts(u)?;
        let host = host_of(authority)?;
        (scheme == "http" && is_loopback(&host)).then(|| (host, path.to_string()))
    };
    matches!((loopback(registered), loopback(asked)), (Some(r), Some(a)) if r == a)
}

/// Compares without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A redirect URI's host, if it is one a client may register: `https` to any
/// host, or `http` to this machine (a native client's loopback listener);
/// no fragment, no user information.
pub fn redirect_host(uri: &str) -> Option<String> {
    if uri.len() > MAX_TEXT || uri.contains('#') || !uri_chars(uri) {
        return None;
    }
    let (scheme, authority, _) = uri_parts(uri)?;
    if !plain_authority(authority) {
        return None;
    }
    let host = host_of(authority)?;
    match scheme {
        "https" if !host.is_empty() => Some(host),
        "http" if is_loopback(&host) => Some(host),
        _ => None,
    }
}

/// A URI's scheme, authority, and the rest (path and query).
fn uri_parts(uri: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = uri.split_once("://")?;
    let (authority, tail) = rest.find(['/', '?']).map_or((rest, ""), |i| rest.split_at(i));
    Some((scheme, authority, tail))
}

/// An authority's host: an IPv6 literal with its brackets, else what stands before the port.
fn host_of(authority: &str) -> Option<String> {
    match authority.strip_prefix('[') {
        Some(v6) => Some(format!("[{}]", v6.split(']').next()?)),
        None => Some(authority.rsplit_once(':').map_or(authority, |(h, _)| h).to_string()),
    }
}

/// A host naming this machine, to which a native client's redirect goes over plain http.
fn is_loopback(host: &str) -> bool {
    matches!(host, "127.0.0.1" | "[::1]" | "localhost")
}

/// A redirect URI's origin, `scheme://authority`, for the approval page's
/// `form-action`: the one place its decision may send the browser.
pub fn redirect_origin(uri: &str) -> Option<String> {
    redirect_host(uri)?;
    let (scheme, authority, _) = uri_parts(uri)?;
    Some(format!("{scheme}://{authority}"))
}

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `uri` with `params` added to its query.
fn with_query(uri: &str, params: &[(&str, &str)]) -> String {
    let mut out = uri.to_string();
    let mut sep = if uri.contains('?') { '&' } else { '?' };
    for (k, v) in params {
        out.push(sep);
        out.push_str(k);
        out.push('=');
        out.push_str(&encode(v));
        sep = '&';
    }
    out
}

/// Reads an `application/x-www-form-urlencoded` body or query; a name given
/// twice is refused (RFC 6749 §3.1: parameters must not repeat).
///
/// # Errors
///
/// A repeated name, or bytes that do not decode to UTF-8.
pub fn form(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k)?, decode(v)?);
        if out.insert(k.clone(), v).is_some() {
            return Err(format!("the parameter {k:?} is given more than once"));
        }
    }
    Ok(out)
}

fn decode(v: &str) -> Result<String, String> {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = v
                    .get(i + 1..i + 3)
                    .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                out.push(hex.ok_or_else(|| format!("{v:?} has a malformed percent escape"))?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("{v:?} does not decode to UTF-8"))
}

/// The authorization server's state.
#[derive(Debug)]
pub struct AuthServer {
    urls: Urls,
    clients: HashMap<String, Client>,
    pending: HashMap<String, Pending>,
    codes: HashMap<Digest, Code>,
    /// Codes exchanged, kept for their life: one presented again revokes what it got.
    spent: HashMap<Digest, (String, Instant)>,
    tokens: HashMap<Digest, Token>,
    approvals: BTreeMap<String, Approval>,
    /// Refresh tokens rotated away, oldest first, with their approval: one
    /// presented again was stolen once (RFC 9700 §4.14.2).
    spent_refresh: std::collections::VecDeque<(Digest, String)>,
    /// Whether what [`AuthServer::saved`] holds changed since it was last taken.
    dirty: bool,
    /// Authorization requests held so far.
    held_count: u64,
}

impl AuthServer {
    /// An empty server at `urls`.
    pub fn new(urls: Urls) -> AuthServer {
        AuthServer {
            urls,
            clients: HashMap::new(),
            pending: HashMap::new(),
            codes: HashMap::new(),
            spent: HashMap::new(),
            tokens: HashMap::new(),
            approvals: BTreeMap::new(),
            spent_refresh: std::collections::VecDeque::new(),
            dirty: false,
            held_count: 0,
        }
    }

    /// Whether clients, approvals or tokens changed since the last call: the
    /// caller then writes [`AuthServer::saved`] to disk.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    /// Where it is.
    pub fn urls(&self) -> &Urls {
        &self.urls
    }

    /// Forgets what has expired: held requests, codes, access tokens, and
    /// registered clients never approved.
    fn expire(&mut self, now: Instant) {
        self.pending.retain(|_, p| p.until > now);
        self.codes.retain(|_, c| c.until > now);
        self.spent.retain(|_, (_, until)| *until > now);
        self.tokens.retain(|_, t| t.until.is_none_or(|u| u > now));
        let approved: Vec<String> = self.approvals.values().map(|a| a.client_id.clone()).collect();
        self.clients.retain(|id, c| approved.contains(id) || now.duration_since(c.registered) < CLIENT_LIFE);
    }

    /// Dynamic client registration (RFC 7591): a public client with its redirect
    /// URIs. Returns the 201 body.
    ///
    /// # Errors
    ///
    /// `invalid_client_metadata` or `invalid_redirect_uri`, saying what is wrong.
    pub fn register(&mut self, body: &[u8], now: Instant) -> Result<Value, OAuthError> {
        self.expire(now);
        let meta = |d: String| OAuthError::new("invalid_client_metadata", d);
        let v: Value =
            serde_json::from_slice(body).map_err(|_| meta("the registration is not a JSON object".into()))?;
        let obj = v.as_object().ok_or_else(|| meta("the registration is not a JSON object".into()))?;
        let uris: Vec<String> = obj
            .get("redirect_uris")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        if uris.is_empty() || uris.len() > MAX_REDIRECT_URIS {
            return Err(OAuthError::new(
                "invalid_redirect_uri",
                format!("redirect_uris must name 1 to {MAX_REDIRECT_URIS} URIs"),
            ));
        }
        if let Some(bad) = uris.iter().find(|u| redirect_host(u).is_none()) {
            return Err(OAuthError::new(
                "invalid_redirect_uri",
                format!(
                    "{bad:?} is not a redirect URI this server takes: https, or http to 127.0.0.1, [::1] or localhost, \
                     with no fragment"
                ),
            ));
        }
        match obj.get("token_endpoint_auth_method").and_then(Value::as_str) {
            None | Some("none") => {}
            Some(other) => {
                return Err(meta(format!(
                    "token_endpoint_auth_method {other:?}: this server registers public clients only (\"none\")"
                )));
            }
        }
        let listed = |key: &str| -> Vec<String> {
            obj.get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default()
        };
        if let Some(g) =
            listed("grant_types").iter().find(|g| !matches!(g.as_str(), "authorization_code" | "refresh_token"))
        {
            return Err(meta(format!("grant type {g:?} is not offered: authorization_code and refresh_token are")));
        }
        if let Some(r) = listed("response_types").iter().find(|r| r.as_str() != "code") {
            return Err(meta(format!("response type {r:?} is not offered: code is")));
        }
        let name = obj.get("client_name").and_then(Value::as_str).unwrap_or("an unnamed client");
        if name.len() > 200 || name.chars().any(char::is_control) {
            return Err(meta("client_name must be at most 200 characters with no control characters".into()));
        }
        let unapproved: Vec<(String, Instant)> = self
            .clients
            .iter()
            .filter(|(id, _)| !self.approvals.values().any(|a| &a.client_id == *id))
            .map(|(id, c)| (id.clone(), c.registered))
            .collect();
        let waiting = |id: &String| self.pending.values().any(|p| &p.client_id == id);
        let idle = unapproved.iter().filter(|(id, _)| !waiting(id)).min_by_key(|(_, at)| *at);
        if unapproved.len() >= MAX_UNAPPROVED_CLIENTS
            && let Some((oldest, _)) = idle.or_else(|| unapproved.iter().min_by_key(|(_, at)| *at))
        {
            self.clients.remove(oldest);
            self.pending.retain(|_, p| &p.client_id != oldest);
        }
        let id = secret();
        self.clients
            .insert(id.clone(), Client { name: name.to_string(), redirect_uris: uris.clone(), registered: now });
        Ok(json!({
            "client_id": id,
            "client_id_issued_at": SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            "client_name": name,
            "redirect_uris": uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "scope": SCOPE,
        }))
    }

    /// An authorization request (its query): checked, then held for the owner.
    ///
    /// # Errors
    ///
    /// A page for an unknown client or redirect URI; otherwise a redirect
    /// back to the client with the RFCs' error code.
    pub fn authorize(&mut self, q: &BTreeMap<String, String>, now: Instant) -> Result<Held, AuthorizeRefusal> {
        self.expire(now);
        let get = |k: &str| q.get(k).map(String::as_str);
        let client_id = get("client_id").unwrap_or_default();
        let Some(client) = self.clients.get(client_id) else {
            return Err(AuthorizeRefusal::Page(
                "This authorization request names a client this server does not know (it registers again, or its \
                 registration expired). Nothing was sent back to it."
                    .into(),
            ));
        };
        let redirect_named = get("redirect_uri").is_some();
        let redirect_uri = match (get("redirect_uri"), client.redirect_uris.as_slice()) {
            (Some(u), uris) if uris.iter().any(|r| redirect_matches(r, u)) => u.to_string(),
            (None, [only]) => only.clone(),
            _ => {
                return Err(AuthorizeRefusal::Page(
                    "This authorization request's redirect_uri is not one its client registered, so it is not \
                     followed. Nothing was sent back to it."
                        .into(),
                ));
            }
        };
        let state = get("state").map(str::to_string);
        if state.as_ref().is_some_and(|s| s.len() > MAX_TEXT) {
            return Err(AuthorizeRefusal::Page("This authorization request's state is over 2048 bytes.".into()));
        }
        // A client no owner approved yet may be anyone's, so its mistakes are
        // shown here rather than sent on: this server redirects nowhere for
        // someone who merely registered (RFC 9700 §4.11.2).
        let approved = self.approvals.values().any(|a| a.client_id == client_id);
        let back = |error: &str, description: &str| {
            if !approved {
                return AuthorizeRefusal::Page(format!(
                    "This authorization request is refused ({error}: {description}). Nothing was sent back to the client."
                ));
            }
            let mut params = vec![("error", error), ("error_description", description)];
            if let Some(s) = &state {
                params.push(("state", s));
            }
            params.push(("iss", self.urls.issuer()));
            AuthorizeRefusal::Redirect(with_query(&redirect_uri, &params))
        };
        if get("response_type") != Some("code") {
            return Err(back("unsupported_response_type", "response_type must be code"));
        }
        let challenge = get("code_challenge").unwrap_or_default();
        if get("code_challenge_method") != Some("S256") || challenge.len() != 43 {
            return Err(back("invalid_request", "PKCE is required: code_challenge with code_challenge_method S256"));
        }
        // RFC 8707: a client that names no resource (older Codex builds) gets
        // this server's one; a client naming another is refused.
        let own = self.urls.resource();
        let resource = get("resource").map_or(own.as_str(), |r| r.trim_end_matches('/'));
        if resource != own {
            return Err(back("invalid_target", "resource must be this server's MCP endpoint"));
        }
        if let Some(s) = get("scope").filter(|s| s.split(' ').any(|w| !w.is_empty() && w != SCOPE)) {
            return Err(back("invalid_scope", &format!("scope {s:?}: the one scope is {SCOPE}")));
        }
        // A client's newest requests wait, at most MAX_PENDING_PER_CLIENT of
        // them; past the total, the oldest of anyone's goes, so no one can
        // fill the queue and keep others out.
        let mut mine: Vec<(String, u64)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.client_id == client_id)
            .map(|(id, p)| (id.clone(), p.order))
            .collect();
        mine.sort_by_key(|(_, order)| *order);
        while mine.len() >= MAX_PENDING_PER_CLIENT {
            let (oldest, _) = mine.remove(0);
            self.pending.remove(&oldest);
        }
        if self.pending.len() >= MAX_PENDING
            && let Some(oldest) = self.pending.iter().min_by_key(|(_, p)| p.order).map(|(id, _)| id.clone())
        {
            self.pending.remove(&oldest);
        }
        self.held_count += 1;
        let id = secret();
        let held = Held {
            id: id.clone(),
            client_id: client_id.to_string(),
            client_name: client.name.clone(),
            redirect_host: redirect_host(&redirect_uri).unwrap_or_default(),
            redirect_uri: redirect_uri.clone(),
            scope: SCOPE.into(),
        };
        self.pending.insert(
            id,
            Pending {
                client_id: client_id.to_string(),
                redirect_uri,
                redirect_named,
                order: self.held_count,
                state,
                challenge: challenge.to_string(),
                resource: resource.to_string(),
                until: now + PENDING_LIFE,
            },
        );
        Ok(held)
    }

    /// A held request, for the approval page.
    pub fn held(&self, id: &str, now: Instant) -> Option<Held> {
        let p = self.pending.get(id).filter(|p| p.until > now)?;
        let client = self.clients.get(&p.client_id)?;
        Some(Held {
            id: id.to_string(),
            client_id: p.client_id.clone(),
            client_name: client.name.clone(),
            redirect_host: redirect_host(&p.redirect_uri).unwrap_or_default(),
            redirect_uri: p.redirect_uri.clone(),
            scope: SCOPE.into(),
        })
    }

    /// The owner's decision on held request `id`: approved, an approval and a
    /// code; denied, `access_denied`. Returns where the browser goes next and,
    /// when approved, the approval.
    ///
    /// # Errors
    ///
    /// No such request held (decided already, or expired): a page.
    pub fn decide(
        &mut self,
        id: &str,
        approve: bool,
        now: Instant,
        wall: SystemTime,
    ) -> Result<(String, Option<Approval>), AuthorizeRefusal> {
        self.expire(now);
        let p = self.pending.remove(id).ok_or_else(|| {
            AuthorizeRefusal::Page("This authorization request was decided already, or waited too long.".into())
        })?;
        let mut params: Vec<(&str, String)> = Vec::new();
        let approval = if approve {
            let client = self.clients.get(&p.client_id).ok_or_else(|| {
                AuthorizeRefusal::Page("This request's client registration expired while it waited.".into())
            })?;
            let approval = Approval {
                id: secret()[..16].to_string(),
                client_id: p.client_id.clone(),
                client_name: client.name.clone(),
                redirect_uri: p.redirect_uri.clone(),
                scope: SCOPE.into(),
                approved_at: wall,
                last_used: None,
            };
            let code = secret();
            self.codes.insert(
                digest(&code),
                Code {
                    approval: approval.id.clone(),
                    client_id: p.client_id.clone(),
                    redirect_uri: p.redirect_uri.clone(),
                    redirect_named: p.redirect_named,
                    challenge: p.challenge.clone(),
                    resource: p.resource.clone(),
                    until: now + CODE_LIFE,
                },
            );
            self.approvals.insert(approval.id.clone(), approval.clone());
            self.dirty = true;
            params.push(("code", code));
            Some(approval)
        } else {
            params.push(("error", "access_denied".into()));
            params.push(("error_description", "the owner denied this connection".into()));
            None
        };
        if let Some(s) = p.state {
            params.push(("state", s));
        }
        params.push(("iss", self.urls.issuer().to_string()));
        let params: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Ok((with_query(&p.redirect_uri, &params), approval))
    }

    /// The token endpoint (its form): a code for tokens, or a refresh token
    /// for new ones (the old one is spent). Returns the 200 body.
    ///
    /// # Errors
    ///
    /// The RFCs' codes: `invalid_request`, `unsupported_grant_type`,
    /// `invalid_grant` (an unknown, spent or expired code or token, another
    /// client's or redirect URI's, a PKCE verifier that does not match),
    /// `invalid_target`.
    pub fn token(&mut self, f: &BTreeMap<String, String>, now: Instant) -> Result<Value, OAuthError> {
        self.expire(now);
        let get = |k: &str| f.get(k).map(String::as_str).unwrap_or_default();
        let client_id = get("client_id");
        let grant = get("grant_type");
        if matches!(grant, "authorization_code" | "refresh_token") && !self.clients.contains_key(client_id) {
            // RFC 6749 §5.2: the client registers again on this, where it
            // would keep a client ID this server forgot after invalid_grant.
            return Err(OAuthError {
                status: 401,
                error: "invalid_client",
                description: "this server does not know the client_id; register again".into(),
            });
        }
        match grant {
            "authorization_code" => {
                let presented = digest(get("code"));
                if let Some((approval, _)) = self.spent.get(&presented) {
                    // A code used twice was stolen once: what it got is withdrawn (OAuth 2.1 §4.1.3).
                    let approval = approval.clone();
                    self.tokens.retain(|_, t| t.approval != approval);
                    self.dirty = true;
                    return Err(OAuthError::new(
                        "invalid_grant",
                        "the code was used already; the tokens it got are revoked",
                    ));
                }
                let code = self
                    .codes
                    .remove(&presented)
                    .ok_or_else(|| OAuthError::new("invalid_grant", "the code is unknown or expired"))?;
                self.spent.insert(presented, (code.approval.clone(), code.until));
                let redirect = f.get("redirect_uri");
                let redirect_ok = match redirect {
                    Some(r) => *r == code.redirect_uri,
                    None => !code.redirect_named,
                };
                if !same(&code.client_id, client_id) || !redirect_ok {
                    return Err(OAuthError::new(
                        "invalid_grant",
                        "the code was issued to another client or redirect_uri",
                    ));
                }
                let verifier = get("code_verifier");
                if !verifier_shape(verifier) || !same(&s256(verifier), &code.challenge) {
                    return Err(OAuthError::new(
                        "invalid_grant",
                        "the code_verifier does not match the code_challenge",
                    ));
                }
                let resource = f.get("resource").map(|r| r.trim_end_matches('/'));
                if resource.is_some_and(|r| r != code.resource) {
                    return Err(OAuthError::new("invalid_target", "resource is not the one authorized"));
                }
                if !self.approvals.contains_key(&code.approval) {
                    return Err(OAuthError::new("invalid_grant", "the connection was revoked"));
                }
                Ok(self.mint(&code.approval, &code.client_id, now))
            }
            "refresh_token" => {
                let presented = digest(get("refresh_token"));
                if let Some((_, approval)) = self.spent_refresh.iter().find(|(d, _)| *d == presented) {
                    // A rotated refresh token came back: one of its two users is
                    // a thief, so neither keeps a token; the client authorizes again.
                    let approval = approval.clone();
                    self.tokens.retain(|_, t| t.approval != approval);
                    self.spent_refresh.retain(|(_, a)| *a != approval);
                    self.dirty = true;
                    return Err(OAuthError::new(
                        "invalid_grant",
                        "the refresh token was used already; the connection's tokens are revoked",
                    ));
                }
                let t = self
                    .tokens
                    .get(&presented)
                    .filter(|t| t.until.is_none() && same(&t.client_id, client_id))
                    .ok_or_else(|| {
                        OAuthError::new("invalid_grant", "the refresh token is unknown, spent or revoked")
                    })?;
                let (approval, client) = (t.approval.clone(), t.client_id.clone());
                if f.get("resource").is_some_and(|r| r.trim_end_matches('/') != self.urls.resource()) {
                    return Err(OAuthError::new("invalid_target", "resource is not this server's MCP endpoint"));
                }
                self.tokens.remove(&presented);
                self.spent_refresh.push_back((presented, approval.clone()));
                if self.spent_refresh.len() > MAX_SPENT_REFRESH {
                    self.spent_refresh.pop_front();
                }
                Ok(self.mint(&approval, &client, now))
            }
            "" => Err(OAuthError::new("invalid_request", "grant_type is missing")),
            other => Err(OAuthError::new(
                "unsupported_grant_type",
                format!("grant_type {other:?}: authorization_code and refresh_token are offered"),
            )),
        }
    }

    fn mint(&mut self, approval: &str, client: &str, now: Instant) -> Value {
        let (access, refresh) = (secret(), secret());
        let token = |until| Token { approval: approval.to_string(), client_id: client.to_string(), until };
        self.tokens.insert(digest(&access), token(Some(now + ACCESS_LIFE)));
        self.tokens.insert(digest(&refresh), token(None));
        self.dirty = true;
        json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": ACCESS_LIFE.as_secs(),
            "refresh_token": refresh,
            "scope": SCOPE,
        })
    }

    /// The approval an `Authorization` header's bearer token belongs to.
    ///
    /// # Errors
    ///
    /// [`Bearer::Missing`] without a bearer token, [`Bearer::Invalid`] for one
    /// that is unknown, expired, a refresh token, or of a revoked connection.
    pub fn check(&mut self, authorization: Option<&str>, now: Instant, wall: SystemTime) -> Result<String, Bearer> {
        let token = authorization
            .and_then(|h| h.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|t| !t.is_empty())
            .ok_or(Bearer::Missing)?;
        let t = self.tokens.get(&digest(token)).ok_or(Bearer::Invalid)?;
        if t.until.is_none_or(|u| u <= now) {
            return Err(Bearer::Invalid);
        }
        let approval = self.approvals.get_mut(&t.approval).ok_or(Bearer::Invalid)?;
        approval.last_used = Some(wall);
        Ok(approval.id.clone())
    }

    /// Whether approval `id` stands.
    pub fn stands(&self, id: &str) -> bool {
        self.approvals.contains_key(id)
    }

    /// The approvals standing, oldest first.
    pub fn approvals(&self) -> Vec<Approval> {
        let mut all: Vec<Approval> = self.approvals.values().cloned().collect();
        all.sort_by_key(|a| a.approved_at);
        all
    }

    /// Revokes approval `id`: its tokens and codes end at once. Whether it stood.
    pub fn revoke(&mut self, id: &str) -> bool {
        let Some(gone) = self.approvals.remove(id) else { return false };
        self.tokens.retain(|_, t| t.approval != gone.id);
        self.codes.retain(|_, c| c.approval != gone.id);
        self.spent_refresh.retain(|(_, a)| *a != gone.id);
        self.dirty = true;
        true
    }
}

/// Why a request to the MCP endpoint has no approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bearer {
    /// No bearer token: 401 with the challenge.
    Missing,
    /// A token that opens nothing: 401 with `error="invalid_token"`.
    Invalid,
}
