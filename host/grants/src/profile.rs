//! Grant profiles: the operator's file of named grants. A caller selects one by
//! name; raw grants never arrive on the wire.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plimsoll_core::{Reason, Refusal};
use serde::Deserialize;

use crate::breaker::Breaker;
use crate::route::{Method, Route, RouteError};
use crate::token::{DEFAULT_JWT_TTL, JwtMinter, MIN_JWT_SECRET, Minter, PluginBroker, Secret, Shaper, StaticToken};

/// Calls a run may make when its profile states no `max_calls`.
pub const DEFAULT_MAX_CALLS: u32 = 256;
/// The most calls a profile may allow one run.
pub const MAX_CALLS_CEILING: u32 = 100_000;
/// The largest request body a call may carry.
pub const MAX_REQUEST_BYTES: u32 = 1 << 20;
/// The largest response body a call may receive.
pub const MAX_RESPONSE_BYTES: u32 = 4 << 20;
/// The most calls of one run in flight at once.
pub const MAX_IN_FLIGHT: u32 = 16;
/// The longest profile name.
pub const MAX_NAME_BYTES: usize = 128;

/// Who is told about efficiency findings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AdviceAudience {
    /// Nobody: the advisor does not run.
    Off,
    /// The operator (the log and `plimsoll-host advise`).
    #[default]
    Operator,
    /// The operator, and the caller in the result's `advice`.
    Caller,
}

/// What the daemon's log keeps of findings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Retention {
    /// Nothing.
    None,
    /// Counts per pattern.
    #[default]
    Aggregate,
    /// Every finding, operator hints included (what `plimsoll-host advise` renders).
    Detailed,
}

/// How often a session opened with a profile mints its credential.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionCredential {
    /// A fresh credential for every call, as for a run.
    #[default]
    Call,
    /// One credential for the session, minted again only when it would expire
    /// before a call's budget ends.
    Session,
}

/// Which callers may select a profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Callers {
    /// Every authenticated caller (`*`).
    Any,
    /// These caller IDs.
    Only(Vec<String>),
}

/// One validated profile.
#[derive(Debug)]
pub struct Profile {
    /// Its name.
    pub name: String,
    /// The API's origin (`scheme://host[:port]`).
    pub base_url: String,
    /// The routes a run may call.
    pub allow: Vec<Route>,
    /// The API's full route list, for the advisor (grants nothing).
    pub catalog: Vec<Route>,
    /// Batch routes and the per-item routes each stands for.
    pub batch_of: Vec<(Route, Vec<Route>)>,
    /// Scopes named in a minted credential.
    pub scopes: Vec<String>,
    /// Who may use it.
    pub callers: Callers,
    /// The client's global in JavaScript.
    pub global: String,
    /// Extra JavaScript after the client.
    pub preamble: String,
    /// A GET route probed while the upstream's circuit is open after a 503.
    pub health_check: Option<Route>,
    /// Calls per run, allowed and refused together.
    pub max_calls: u32,
    /// Request body bytes per call.
    pub max_request_bytes: u32,
    /// Response body bytes per call.
    pub max_response_bytes: u32,
    /// Calls of one run in flight at once.
    pub max_in_flight: u32,
    /// Whether session calls may use it.
    pub allow_in_sessions: bool,
    /// How a session opened with it mints credentials.
    pub session_credential: SessionCredential,
    /// Who sees findings.
    pub advice: AdviceAudience,
    /// What the log keeps of findings.
    pub advice_retention: Retention,
    /// How a run's credential is minted; none sends no `Authorization`.
    pub minter: Option<Arc<dyn Minter>>,
    /// The broker plugin's shaper, when a plugin mints for this profile.
    pub shaper: Option<Arc<dyn Shaper>>,
    /// Request body schemas (from the broker plugin), checked before a body is sent.
    pub schemas: Vec<(Route, crate::schema::Schema)>,
    /// The upstream's circuit, shared by every run of this profile.
    pub(crate) breaker: Arc<Mutex<Breaker>>,
}

impl Profile {
    /// Whether `caller` may select this profile.
    pub fn admits(&self, caller: &str) -> bool {
        match &self.callers {
            Callers::Any => !caller.is_empty(),
            Callers::Only(ids) => ids.iter().any(|id| id == caller),
        }
    }

    /// The routes as the in-sandbox client lists them.
    pub fn route_lines(&self) -> Vec<String> {
        self.allow.iter().map(Route::to_string).collect()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    profiles: BTreeMap<String, RawProfile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    base_url: String,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    scopes: Vec<String>,
    #[serde(default)]
    allowed_callers: Vec<String>,
    #[serde(default)]
    catalog: Vec<String>,
    #[serde(default)]
    global: Option<String>,
    #[serde(default)]
    advice: AdviceAudience,
    #[serde(default)]
    advice_retention: Retention,
    #[serde(default)]
    token: Option<RawToken>,
    #[serde(default)]
    preamble: Option<String>,
    #[serde(default)]
    preamble_file: Option<String>,
    #[serde(default)]
    health_check: Option<String>,
    #[serde(default)]
    max_calls: u32,
    #[serde(default)]
    max_request_bytes: Option<u32>,
    #[serde(default)]
    max_response_bytes: Option<u32>,
    #[serde(default)]
    max_in_flight: Option<u32>,
    #[serde(default)]
    allow_in_sessions: bool,
    #[serde(default)]
    session_credential: SessionCredential,
    #[serde(default)]
    batch_of: BTreeMap<String, Vec<String>>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum RawToken {
    Static {
        env: String,
    },
    Jwt {
        secret_env: String,
        #[serde(default)]
        ttl_sec: Option<u64>,
        #[serde(default)]
        issuer: Option<String>,
        audience: String,
        #[serde(default)]
        key_id: Option<String>,
    },
    Plugin {
        plugin: String,
    },
}

/// Why a profiles file was refused; the daemon does not start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// Unreadable.
    #[error("grant profiles {path}: {detail}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        detail: String,
    },
    /// Not the expected JSON.
    #[error("grant profiles: {0}")]
    Parse(String),
    /// A profile breaks a rule.
    #[error("grant profile {name:?}: {detail}")]
    Invalid {
        /// The profile.
        name: String,
        /// The rule.
        detail: String,
    },
}

/// What loading may consult besides the file.
pub struct LoadContext<'a> {
    /// The operator's environment (credentials are named by variable, never inline).
    pub env: &'a dyn Fn(&str) -> Option<String>,
    /// The file's directory, for `preamble_file`.
    pub dir: Option<PathBuf>,
    /// Loaded broker plugins by name.
    pub plugins: &'a dyn Fn(&str) -> Option<PluginBroker>,
}

impl std::fmt::Debug for LoadContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadContext").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// The frozen set of profiles.
#[derive(Debug, Default)]
pub struct Profiles {
    by_name: BTreeMap<String, Arc<Profile>>,
}

/// The text for an unknown profile and for one the caller may not use: the same,
/// so a caller cannot learn which profiles exist.
pub fn not_available(name: &str) -> Refusal {
    Refusal::new(Reason::Permission, format!("grant_profile {name:?} is not available to this caller"))
}

impl Profiles {
    /// Reads and validates `path`.
    ///
    /// # Errors
    ///
    /// [`ProfileError`] naming the file, the profile and the rule.
    pub fn load(path: &Path, ctx: &LoadContext<'_>) -> Result<Profiles, ProfileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ProfileError::Read { path: path.display().to_string(), detail: e.to_string() })?;
        let dir = path.parent().map(Path::to_path_buf);
        Profiles::parse(&text, &LoadContext { env: ctx.env, dir, plugins: ctx.plugins })
    }

    /// Validates profiles given as JSON text.
    ///
    /// # Errors
    ///
    /// [`ProfileError`] naming the profile and the rule.
    pub fn parse(text: &str, ctx: &LoadContext<'_>) -> Result<Profiles, ProfileError> {
        let file: FileShape = serde_json::from_str(text).map_err(|e| ProfileError::Parse(e.to_string()))?;
        let mut by_name = BTreeMap::new();
        for (name, raw) in file.profiles {
            let profile =
                validate(&name, raw, ctx).map_err(|detail| ProfileError::Invalid { name: name.clone(), detail })?;
            by_name.insert(name, Arc::new(profile));
        }
        Ok(Profiles { by_name })
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The profiles, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Profile>> {
        self.by_name.values()
    }

    /// The profile `name` if `caller` may use it.
    ///
    /// # Errors
    ///
    /// A `permission` refusal, the same for an unknown name and a forbidden one.
    pub fn select(&self, name: &str, caller: &str) -> Result<Arc<Profile>, Refusal> {
        match self.by_name.get(name) {
            Some(p) if p.admits(caller) => Ok(p.clone()),
            _ => Err(not_available(name)),
        }
    }
}

fn routes(lines: &[String], what: &str) -> Result<Vec<Route>, String> {
    let mut out: Vec<Route> = Vec::with_capacity(lines.len());
    for line in lines {
        let r = Route::parse(line).map_err(|e: RouteError| format!("{what}: {e}"))?;
        if out.contains(&r) {
            return Err(format!("{what}: route {line:?} is listed twice"));
        }
        out.push(r);
    }
    Ok(out)
}

fn env_secret(ctx: &LoadContext<'_>, var: &str) -> Result<Secret, String> {
    match (ctx.env)(var) {
        Some(v) if !v.is_empty() => Ok(Secret::new(v)),
        _ => Err(format!("token: the environment variable {var} is empty or unset; set it to the credential")),
    }
}

fn check_origin(url: &str) -> Result<String, String> {
    let bad = |why: &str| Err(format!("base_url {url:?} {why}"));
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad("must be an http or https origin such as https://api.example.com");
    };
    if scheme != "http" && scheme != "https" {
        return bad("must use http or https");
    }
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty()
        || authority.contains(['/', '?', '#', '@', '\\'])
        || authority.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return bad("must be an origin only: no user, path, query or fragment");
    }
    let uri: http::Uri = url.parse().map_err(|e| format!("base_url {url:?} is not a URL: {e}"))?;
    let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if scheme == "http" && !loopback {
        return bad("uses http to a host that is not loopback; use https");
    }
    Ok(format!("{scheme}://{authority}"))
}

fn check_global(g: &str) -> Result<(), String> {
    let mut chars = g.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
        return Err(format!("global {g:?} must be a JavaScript identifier"));
    }
    if matches!(g, "console" | "globalThis" | "readFile" | "Object" | "Promise" | "JSON" | "Math" | "eval") {
        return Err(format!("global {g:?} would replace a built-in; choose another name"));
    }
    Ok(())
}

fn validate(name: &str, raw: RawProfile, ctx: &LoadContext<'_>) -> Result<Profile, String> {
    if name.is_empty()
        || name.len() > MAX_NAME_BYTES
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(format!("the name must be 1 to {MAX_NAME_BYTES} bytes of A-Z a-z 0-9 . _ -"));
    }
    let base_url = check_origin(&raw.base_url)?;
    let allow = routes(&raw.allow, "allow")?;
    let catalog = routes(&raw.catalog, "catalog")?;
    for s in &raw.scopes {
        if s.is_empty() || s.chars().any(char::is_whitespace) {
            return Err(format!("scope {s:?} must be one token without spaces"));
        }
        if s == "code:run" || s == "*" {
            return Err(format!("scope {s:?} is plimsoll's own and cannot be granted to an API"));
        }
    }
    if raw.allowed_callers.is_empty() {
        return Err("allowed_callers must name at least one caller ID, or \"*\" for every authenticated caller".into());
    }
    let mut seen = Vec::new();
    for c in &raw.allowed_callers {
        if c.is_empty() || seen.contains(&c) {
            return Err(format!("allowed_callers: {c:?} is empty or listed twice"));
        }
        seen.push(c);
    }
    let callers = if raw.allowed_callers.iter().any(|c| c == "*") {
        Callers::Any
    } else {
        Callers::Only(raw.allowed_callers.clone())
    };
    let global = raw.global.unwrap_or_else(|| "host".into());
    check_global(&global)?;
    let preamble = match (raw.preamble, raw.preamble_file) {
        (Some(_), Some(_)) => return Err("set preamble or preamble_file, not both".into()),
        (Some(p), None) => p,
        (None, Some(file)) => read_preamble(&file, ctx.dir.as_deref())?,
        (None, None) => String::new(),
    };
    let health_check = match raw.health_check {
        None => None,
        Some(line) => {
            let r = Route::parse(&line).map_err(|e| format!("health_check: {e}"))?;
            if r.method() != Method::Get || !r.is_concrete() {
                return Err(format!("health_check {line:?} must be a GET of a concrete path (no *)"));
            }
            Some(r)
        }
    };
    let max_calls = match raw.max_calls {
        0 => DEFAULT_MAX_CALLS,
        n @ 1..=MAX_CALLS_CEILING => n,
        n => return Err(format!("max_calls {n} is over the ceiling of {MAX_CALLS_CEILING}")),
    };
    let bounded = |v: Option<u32>, ceiling: u32, what: &str| match v {
        None => Ok(ceiling),
        Some(n) if (1..=ceiling).contains(&n) => Ok(n),
        Some(n) => Err(format!("{what} {n} must be 1 to {ceiling}")),
    };
    let max_request_bytes = bounded(raw.max_request_bytes, MAX_REQUEST_BYTES, "max_request_bytes")?;
    let max_response_bytes = bounded(raw.max_response_bytes, MAX_RESPONSE_BYTES, "max_response_bytes")?;
    let max_in_flight = bounded(raw.max_in_flight, MAX_IN_FLIGHT, "max_in_flight")?;
    let mut batch_of = Vec::new();
    for (batch, items) in &raw.batch_of {
        let b = Route::parse(batch).map_err(|e| format!("batch_of: {e}"))?;
        let items = routes(items, "batch_of")?;
        if b.method() != Method::Get || items.iter().any(|r| r.method() != Method::Get) {
            return Err(format!("batch_of {batch:?}: batch routes and the routes they stand for must be GET"));
        }
        batch_of.push((b, items));
    }
    let mut shaper = None;
    let mut schemas = Vec::new();
    let minter: Option<Arc<dyn Minter>> = match raw.token {
        None => None,
        Some(RawToken::Static { env }) => Some(Arc::new(StaticToken(env_secret(ctx, &env)?))),
        Some(RawToken::Jwt { secret_env, ttl_sec, issuer, audience, key_id }) => {
            let secret = env_secret(ctx, &secret_env)?;
            if secret.expose().len() < MIN_JWT_SECRET {
                return Err(format!("token: the secret in {secret_env} must be at least {MIN_JWT_SECRET} bytes"));
            }
            if audience.trim().is_empty() {
                return Err("token: a jwt needs an audience".into());
            }
            let ttl = match ttl_sec {
                None => DEFAULT_JWT_TTL,
                Some(s @ 1..=3600) => Duration::from_secs(s),
                Some(s) => return Err(format!("token: ttl_sec {s} must be 1 to 3600")),
            };
            Some(Arc::new(JwtMinter { secret, ttl, audience, issuer, key_id }))
        }
        Some(RawToken::Plugin { plugin }) => {
            let p = (ctx.plugins)(&plugin)
                .ok_or_else(|| format!("token: no broker plugin {plugin:?} is loaded (see PLIMSOLL_BROKER_PLUGINS)"))?;
            if let Some(r) = allow.iter().find(|r| !p.routes.contains(r)) {
                return Err(format!("allow: route \"{r}\" is not one the broker plugin {plugin:?} serves"));
            }
            shaper = Some(p.shaper);
            schemas = p.schemas;
            Some(p.minter)
        }
    };
    Ok(Profile {
        name: name.to_string(),
        base_url,
        allow,
        catalog,
        batch_of,
        scopes: raw.scopes,
        callers,
        global,
        preamble,
        health_check,
        max_calls,
        max_request_bytes,
        max_response_bytes,
        max_in_flight,
        allow_in_sessions: raw.allow_in_sessions,
        session_credential: raw.session_credential,
        advice: raw.advice,
        advice_retention: raw.advice_retention,
        minter,
        shaper,
        schemas,
        breaker: Arc::default(),
    })
}

/// Reads a preamble file that must resolve, through symlinks too, inside `dir`.
fn read_preamble(file: &str, dir: Option<&Path>) -> Result<String, String> {
    let Some(dir) = dir else {
        return Err("preamble_file needs profiles read from a file".into());
    };
    let root = dir.canonicalize().map_err(|e| format!("preamble_file: {}: {e}", dir.display()))?;
    let path = root.join(file).canonicalize().map_err(|e| format!("preamble_file {file:?}: {e}"))?;
    if !path.starts_with(&root) {
        return Err(format!("preamble_file {file:?} resolves outside the profiles file's directory"));
    }
    std::fs::read_to_string(&path).map_err(|e| format!("preamble_file {file:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<String> {
        match var {
            "DEMO_TOKEN" => Some("t0ken".into()),
            "DEMO_JWT" => Some("j".repeat(32)),
            "SHORT" => Some("short".into()),
            _ => None,
        }
    }

    fn no_plugins(_: &str) -> Option<PluginBroker> {
        None
    }

    fn parse(text: &str) -> Result<Profiles, ProfileError> {
        Profiles::parse(text, &LoadContext { env: &env, dir: None, plugins: &no_plugins })
    }

    fn one(profile: &str) -> Result<Profiles, String> {
        parse(&format!(r#"{{"profiles": {{"demo": {profile}}}}}"#)).map_err(|e| e.to_string())
    }

    #[test]
    fn a_full_profile_loads_with_its_defaults() {
        let p = one(
            r#"{"base_url": "http://127.0.0.1:8080/", "allow": ["get /items/*", "POST /items"], "allowed_callers": ["alice"],
                "token": {"type": "jwt", "secret_env": "DEMO_JWT", "audience": "demo"}, "batch_of": {"GET /items": ["GET /items/*"]},
                "health_check": "GET /health", "advice": "caller"}"#,
        )
        .expect("loads");
        let demo = p.select("demo", "alice").expect("alice may use it");
        assert_eq!(demo.base_url, "http://127.0.0.1:8080");
        assert_eq!(demo.route_lines(), ["GET /items/*", "POST /items"]);
        assert_eq!((demo.global.as_str(), demo.max_calls, demo.max_in_flight), ("host", 256, 16));
        assert_eq!((demo.max_request_bytes, demo.max_response_bytes), (1 << 20, 4 << 20));
        assert_eq!((demo.advice, demo.allow_in_sessions), (AdviceAudience::Caller, false));
        assert_eq!(demo.session_credential, SessionCredential::Call);
        assert!(demo.minter.is_some());
    }

    #[test]
    fn an_unknown_profile_and_a_forbidden_one_get_the_same_refusal() {
        let p = one(r#"{"base_url": "https://api.example.com", "allow": ["GET /a"], "allowed_callers": ["alice"]}"#)
            .expect("loads");
        let unknown = p.select("nope", "alice").expect_err("unknown");
        let forbidden = p.select("demo", "mallory").expect_err("forbidden");
        assert_eq!(unknown.reason, Reason::Permission);
        assert_eq!(forbidden.reason, Reason::Permission);
        assert_eq!(forbidden.message, "grant_profile \"demo\" is not available to this caller");
        assert_eq!(unknown.message.replace("nope", "demo"), forbidden.message);
        let any = one(r#"{"base_url": "https://api.example.com", "allowed_callers": ["*"]}"#).expect("loads");
        assert!(any.select("demo", "anyone").is_ok());
        assert!(any.select("demo", "").is_err(), "* means every authenticated caller, not nobody");
    }

    #[test]
    fn every_broken_rule_stops_the_load_and_names_itself() {
        let cases: &[(&str, &str)] = &[
            (r#"{"base_url": "ftp://x", "allowed_callers": ["a"]}"#, "base_url \"ftp://x\" must use http or https"),
            (
                r#"{"base_url": "http://api.example.com", "allowed_callers": ["a"]}"#,
                "uses http to a host that is not loopback; use https",
            ),
            (r#"{"base_url": "https://u:p@api.example.com", "allowed_callers": ["a"]}"#, "must be an origin only"),
            (r#"{"base_url": "https://api.example.com/v1", "allowed_callers": ["a"]}"#, "must be an origin only"),
            (r#"{"base_url": "https://api.example.com?x=1", "allowed_callers": ["a"]}"#, "must be an origin only"),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": []}"#,
                "allowed_callers must name at least one caller ID",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a", "a"]}"#,
                "allowed_callers: \"a\" is empty or listed twice",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "allow": ["GET /a", "get /a"]}"#,
                "allow: route \"get /a\" is listed twice",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "allow": ["GET /a/../b"]}"#,
                "allow: route \"GET /a/../b\": a dot segment",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "scopes": ["code:run"]}"#,
                "scope \"code:run\" is plimsoll's own",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "scopes": ["a b"]}"#,
                "scope \"a b\" must be one token",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "max_calls": 100001}"#,
                "max_calls 100001 is over the ceiling of 100000",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "max_response_bytes": 4194305}"#,
                "max_response_bytes 4194305 must be 1 to 4194304",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "max_in_flight": 0}"#,
                "max_in_flight 0 must be 1 to 16",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "health_check": "POST /h"}"#,
                "health_check \"POST /h\" must be a GET of a concrete path",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "health_check": "GET /h/*"}"#,
                "must be a GET of a concrete path",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "global": "console"}"#,
                "would replace a built-in",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "global": "my-api"}"#,
                "must be a JavaScript identifier",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "token": {"type": "static", "env": "UNSET"}}"#,
                "the environment variable UNSET is empty or unset",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "token": {"type": "jwt", "secret_env": "SHORT", "audience": "x"}}"#,
                "must be at least 32 bytes",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "token": {"type": "jwt", "secret_env": "DEMO_JWT"}}"#,
                "missing field `audience`",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "token": {"type": "plugin", "plugin": "acme"}}"#,
                "no broker plugin \"acme\" is loaded",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "preamble": "x", "preamble_file": "y"}"#,
                "set preamble or preamble_file, not both",
            ),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "batch_of": {"POST /items": ["GET /items/*"]}}"#,
                "must be GET",
            ),
            (r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "alow": []}"#, "unknown field `alow`"),
            (
                r#"{"base_url": "https://a.example", "allowed_callers": ["a"], "session_credential": "run"}"#,
                "unknown variant `run`, expected `call` or `session`",
            ),
        ];
        for (profile, want) in cases {
            let err = one(profile).expect_err(profile);
            assert!(err.contains(want), "{profile}\n  got: {err}\n want: {want}");
        }
        assert!(
            parse(r#"{"profiles": {"bad name": {"base_url": "https://a.example", "allowed_callers": ["a"]}}}"#)
                .expect_err("name")
                .to_string()
                .contains("the name must be 1 to 128 bytes")
        );
        assert!(parse(r#"{"profiles": {}} x"#).is_err(), "trailing data is refused");
    }

    #[test]
    fn a_preamble_file_must_stay_inside_the_profiles_directory() {
        let dir = std::env::temp_dir().join(format!("plimsoll-grants-{}", std::process::id()));
        let inner = dir.join("grants");
        std::fs::create_dir_all(&inner).expect("dir");
        std::fs::write(inner.join("sdk.js"), "globalThis.sdk = 1;").expect("write");
        std::fs::write(dir.join("outside.js"), "x").expect("write");
        let _ = std::fs::remove_file(inner.join("link.js"));
        std::os::unix::fs::symlink(dir.join("outside.js"), inner.join("link.js")).expect("symlink");
        let file = |pre: &str| {
            let path = inner.join("grants.json");
            std::fs::write(
                &path,
                format!(r#"{{"profiles": {{"p": {{"base_url": "https://a.example", "allowed_callers": ["a"], "preamble_file": "{pre}"}}}}}}"#),
            )
            .expect("write");
            Profiles::load(&path, &LoadContext { env: &env, dir: None, plugins: &no_plugins })
                .map_err(|e| e.to_string())
        };
        assert_eq!(file("sdk.js").expect("loads").select("p", "a").expect("p").preamble, "globalThis.sdk = 1;");
        assert!(file("../outside.js").expect_err("escapes").contains("resolves outside"));
        assert!(file("link.js").expect_err("escapes through a link").contains("resolves outside"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
