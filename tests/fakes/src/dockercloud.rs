//! A fake of Docker Cloud Sandboxes over its documented REST API: Docker Hub's
//! token exchange (`hub.dockercloud.test`), the management plane
//! (`api.dockercloud.test/sandboxes/v1/...`) and each sandbox's endpoint
//! (`<uid>.sandboxes.dockercloud.test/v1/...`), as Docker's published OpenAPI
//! document defines them (see README.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::backing::{Backing, Chunk, Process, Shape};
use crate::egress::{Egress, Rules};
use crate::pki::Pki;
use crate::server::{self, Body, Handler, Request};
use crate::util::{multipart, now, random, rfc3339};

/// Each way this fake can misbehave, and what it does.
pub const MODES: [(&str, &str); 14] = [
    ("redirect", "every answer, the token exchange's included, is a 307 redirect elsewhere"),
    ("open-policy", "the effective network policy is allowAll"),
    ("allow-rule", "the effective policy denies all but allows one network from the owner's layer"),
    ("weaker", "the read-back's resources are larger than asked: 8 CPUs, 16384 MiB"),
    ("unpinned", "the read-back's imageRef is the image without its digest"),
    ("foreign-endpoint", "the sandbox's endpoint URI is on a host the operator did not name"),
    ("incomplete", "exec drops output past 64 bytes and says incomplete"),
    ("stale-etag", "a sandbox's first delete answers 412 etag_mismatch (its etag moved)"),
    ("undeletable", "deletes answer 500 internal and leave the sandbox running"),
    ("expired-credential", "an endpoint credential's first exec answers 401 endpoint_credential_expired"),
    ("leaky", "a create answers 500 echoing the caller's bearer"),
    ("malformed", "a create answers 202 with a body that is not JSON"),
    ("slow", "the management plane answers after 35 s"),
    ("unbound", "a create's inline network policy is accepted but never bound: the effective policy allows nothing"),
];

/// A misbehaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Redirect,
    OpenPolicy,
    AllowRule,
    Weaker,
    Unpinned,
    ForeignEndpoint,
    Incomplete,
    StaleEtag,
    Undeletable,
    ExpiredCredential,
    Leaky,
    Malformed,
    Slow,
    Unbound,
}

impl Mode {
    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "redirect" => Mode::Redirect,
            "open-policy" => Mode::OpenPolicy,
            "allow-rule" => Mode::AllowRule,
            "weaker" => Mode::Weaker,
            "unpinned" => Mode::Unpinned,
            "foreign-endpoint" => Mode::ForeignEndpoint,
            "incomplete" => Mode::Incomplete,
            "stale-etag" => Mode::StaleEtag,
            "undeletable" => Mode::Undeletable,
            "expired-credential" => Mode::ExpiredCredential,
            "leaky" => Mode::Leaky,
            "malformed" => Mode::Malformed,
            "slow" => Mode::Slow,
            "unbound" => Mode::Unbound,
            _ => return None,
        })
    }
}

const HUB: &str = "hub.dockercloud.test";
const API: &str = "api.dockercloud.test";
/// A sandbox endpoint's host is its uid, then this.
const ENDPOINT_SUFFIX: &str = ".sandboxes.dockercloud.test";
/// The supported sizes: (cpus, memoryMib).
const SIZES: [(u64, u64); 5] = [(1, 2048), (2, 4096), (4, 8192), (8, 16384), (16, 32768)];
/// The backing container's disk (a tmpfs home, counted in its memory).
const DISK_MB: u32 = 256;
/// The backing container's memory: the fake cannot give each sandbox gigabytes
/// on a shared test machine, so every size runs in this much.
const BACKING_MEMORY_MB: u32 = 512;
/// The most output exec keeps, stdout and stderr together.
const EXEC_CAPTURE: usize = 4 << 20;
/// A Hub bearer's life.
const BEARER_LIFE_S: u64 = 900;
/// An endpoint credential's life, at most.
const CREDENTIAL_LIFE_S: u64 = 300;
/// Fields a create may carry (any other, at any level we check, is refused).
const CREATE_FIELDS: [&str; 16] = [
    "agent",
    "displayName",
    "displayNamePrefix",
    "environment",
    "resources",
    "pullPolicy",
    "kits",
    "mcp",
    "networkPolicies",
    "policyIds",
    "platform",
    "startupExecution",
    "labels",
    "features",
    "image",
    "imageRef",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Creating,
    Running,
    Deleting,
}

struct Sandbox {
    display_name: String,
    labels: Value,
    image_ref: String,
    cpus: u64,
    memory_mib: u64,
    created: u64,
    etag: u64,
    status: Status,
    timeout: Option<String>,
    deletes_refused: u32,
    /// The networks its inline policies allow (their layer is `attached`).
    attached: Vec<String>,
    /// Its way out to those networks, served while it lives.
    _egress: Option<crate::egress::Opened>,
}

struct Credential {
    uid: String,
    expires: u64,
    used: bool,
}

/// The fake.
pub struct Fake {
    backing: Arc<Backing>,
    mode: Option<Mode>,
    username: String,
    pat: String,
    port: Mutex<u16>,
    bearers: Mutex<HashMap<String, u64>>,
    credentials: Mutex<HashMap<String, Credential>>,
    sandboxes: Mutex<HashMap<String, Sandbox>>,
    /// Idempotency-Key to (the create's body, the uid it made).
    replays: Mutex<HashMap<String, (Value, String)>>,
    /// The way out its sandboxes' policies may open, and the directory its
    /// sockets go in; without it no sandbox reaches anything.
    egress: Option<(Egress, std::path::PathBuf)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Docker's error body: `{"code", "message", "details"}`, the code camelCase.
fn error(status: u16, code: &str, message: &str) -> http::Response<Body> {
    server::json(status, &json!({"code": code, "message": message, "details": []}))
}

/// A uid: 26 of `[a-z0-9]`.
fn uid() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    random(26).iter().map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char).collect()
}

/// An unsigned JWT whose `exp` is `exp` (the client reads only that).
fn jwt(exp: u64, subject: &str) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","typ":"JWT"}"#);
    let claims = URL_SAFE_NO_PAD.encode(json!({"sub": subject, "exp": exp, "iat": now()}).to_string());
    format!("{header}.{claims}.{}", URL_SAFE_NO_PAD.encode(random(32)))
}

fn bearer(req: &Request) -> Option<&str> {
    req.header("authorization").and_then(|a| a.strip_prefix("Bearer "))
}

fn number(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// The networks a create's inline `networkPolicies` allow, checked as the
/// document's `NetworkPolicy` schema says: objects of `mode` (required, only
/// `denyAll`), `allowNetworks` and `denyNetworks` (names or CIDRs), nothing else.
fn inline_policies(v: Option<&Value>) -> Result<Vec<String>, String> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let policies = v.as_array().ok_or("networkPolicies must be a list")?;
    let mut allow = Vec::new();
    for (i, p) in policies.iter().enumerate() {
        let p = p.as_object().ok_or_else(|| format!("networkPolicies[{i}] must be an object"))?;
        if let Some(k) = p.keys().find(|k| !["mode", "allowNetworks", "denyNetworks"].contains(&k.as_str())) {
            return Err(format!("networkPolicies[{i}]: unknown field {k:?}"));
        }
        if p.get("mode").and_then(Value::as_str) != Some("denyAll") {
            return Err(format!("networkPolicies[{i}].mode is required and must be denyAll"));
        }
        for field in ["allowNetworks", "denyNetworks"] {
            let Some(list) = p.get(field) else { continue };
            let names = list.as_array().filter(|l| l.iter().all(|n| n.as_str().is_some_and(|n| !n.is_empty())));
            let names = names.ok_or_else(|| format!("networkPolicies[{i}].{field} must be a list of network names"))?;
            if field == "allowNetworks" {
                allow.extend(names.iter().filter_map(Value::as_str).map(str::to_ascii_lowercase));
            }
        }
    }
    Ok(allow)
}

impl Fake {
    /// A fake over `backing`, misbehaving as `mode` says.
    pub fn new(backing: Arc<Backing>, mode: Option<Mode>) -> Fake {
        Fake {
            backing,
            mode,
            username: "plimsoll-ci".into(),
            pat: format!("dckr_pat_{}", URL_SAFE_NO_PAD.encode(random(24))),
            port: Mutex::new(0),
            bearers: Mutex::new(HashMap::new()),
            credentials: Mutex::new(HashMap::new()),
            sandboxes: Mutex::new(HashMap::new()),
            replays: Mutex::new(HashMap::new()),
            egress: None,
        }
    }

    /// The fake whose sandboxes reach what their policies allow through
    /// `egress`, its sockets under `root`.
    pub fn with_egress(mut self, egress: Egress, root: std::path::PathBuf) -> Fake {
        self.egress = Some((egress, root));
        self
    }

    fn endpoint_uri(&self, uid: &str) -> String {
        let port = *lock(&self.port);
        if self.mode == Some(Mode::ForeignEndpoint) {
            return format!("https://{uid}.elsewhere.dockercloud.test:{port}");
        }
        format!("https://{uid}{ENDPOINT_SUFFIX}:{port}")
    }

    /// Docker Hub's `POST /v2/auth/token`.
    fn hub(&self, req: &Request) -> http::Response<Body> {
        if (req.method.as_str(), req.path.as_str()) != ("POST", "/v2/auth/token") {
            return server::json(404, &json!({"message": "page not found"}));
        }
        let v: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let (identifier, secret) =
            (v.get("identifier").and_then(Value::as_str), v.get("secret").and_then(Value::as_str));
        if identifier != Some(self.username.as_str()) || secret != Some(self.pat.as_str()) {
            return server::json(401, &json!({"detail": "incorrect authentication credentials"}));
        }
        let exp = now() + BEARER_LIFE_S;
        let token = jwt(exp, &self.username);
        lock(&self.bearers).insert(token.clone(), exp);
        server::json(200, &json!({"access_token": token}))
    }

    /// The 401 a management call without a live Hub bearer gets.
    fn management_refusal(&self, req: &Request) -> Option<http::Response<Body>> {
        let Some(token) = bearer(req) else {
            return Some(error(401, "unauthenticated", "a bearer token is required"));
        };
        if token == self.pat {
            return Some(error(401, "unauthenticated", "TOKEN_INVALID: exchange the access token for a bearer first"));
        }
        match lock(&self.bearers).get(token) {
            Some(exp) if *exp > now() => None,
            Some(_) => Some(error(401, "unauthenticated", "the bearer has expired")),
            None => Some(error(401, "unauthenticated", "TOKEN_INVALID")),
        }
    }

    async fn management(self: Arc<Self>, req: Request) -> http::Response<Body> {
        if let Some(r) = self.management_refusal(&req) {
            return r;
        }
        if self.mode == Some(Mode::Slow) {
            tokio::time::sleep(Duration::from_secs(35)).await;
        }
        let Some(path) = req.path.strip_prefix("/sandboxes/v1/") else {
            return error(404, "notFound", &format!("no route {}", req.path));
        };
        let segments: Vec<&str> = path.split('/').collect();
        match (req.method.as_str(), segments.as_slice()) {
            ("POST", ["sandboxes"]) => self.create(&req).await,
            ("GET", ["sandboxes"]) => self.list(&req),
            ("GET", ["sandboxes", uid]) => self.get(uid),
            ("DELETE", ["sandboxes", uid]) => self.delete(uid, &req),
            ("POST", ["sandboxes", uid, "endpoint-credentials"]) => self.mint(uid, &req),
            ("GET", ["sandboxes", uid, "network-policies"]) => self.policies(uid),
            _ => error(404, "notFound", &format!("no route {} {}", req.method, req.path)),
        }
    }

    async fn create(self: Arc<Self>, req: &Request) -> http::Response<Body> {
        if self.mode == Some(Mode::Leaky) {
            let echoed = bearer(req).unwrap_or_default();
            return error(500, "internal", &format!("upstream refused the request from bearer {echoed}"));
        }
        let whole: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let Value::Object(body) = whole.clone() else {
            return error(400, "invalidArgument", "the body is not a JSON object");
        };
        if let Some(k) = body.keys().find(|k| !CREATE_FIELDS.contains(&k.as_str())) {
            return error(400, "invalidArgument", &format!("unknown field {k:?}"));
        }
        let key = req.header("idempotency-key").map(str::to_string);
        if let Some(key) = &key
            && let Some((first, made)) = lock(&self.replays).get(key).cloned()
        {
            if first != Value::Object(body.clone()) {
                return error(
                    409,
                    "failedPrecondition",
                    "The Idempotency-Key was already used with a different payload.",
                );
            }
            return self.get(&made);
        }
        let attached = match inline_policies(body.get("networkPolicies")) {
            Ok(a) => a,
            Err(why) => return error(400, "invalidArgument", &why),
        };
        let display_name = body.get("displayName").and_then(Value::as_str).unwrap_or_default().to_string();
        if display_name.len() > 64 || !display_name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b)) {
            return error(400, "invalidArgument", "displayName must match ^[a-zA-Z0-9_-]*$ and be at most 64 long");
        }
        let image_ref = body.get("imageRef").and_then(Value::as_str).unwrap_or_default().to_string();
        if image_ref.is_empty() {
            return error(400, "invalidArgument", "imageRef is required: this fake runs raw images only");
        }
        let resources = body.get("resources").cloned().unwrap_or(Value::Null);
        let (Some(cpus), Some(memory)) = (number(resources.get("cpus")), number(resources.get("memoryMib"))) else {
            return error(400, "invalidArgument", "'cpus' is required when using 'imageRef'");
        };
        if !SIZES.contains(&(cpus, memory)) {
            return error(
                400,
                "invalidArgument",
                &format!("unsupported size: {cpus} CPUs with {memory} MiB; use micro, small, medium, large or xl"),
            );
        }
        let argv = whole.pointer("/startupExecution/rawImage/start/argv").and_then(Value::as_array);
        if argv.is_none_or(|a| a.is_empty()) {
            return error(400, "invalidArgument", "startupExecution.rawImage.start.argv is required with imageRef");
        }
        let labels = body.get("labels").cloned().unwrap_or_else(|| json!({}));
        let plain = labels.as_object().is_some_and(|l| l.len() <= 64 && l.values().all(Value::is_string));
        if !plain {
            return error(400, "invalidArgument", "labels must be a map of at most 64 strings");
        }
        let timeout = whole.pointer("/features/timeouts/timeout").and_then(Value::as_str).map(str::to_string);
        if self.mode == Some(Mode::Malformed) {
            return server::whole(202, "application/json", "<html>upstream error</html>");
        }
        let uid = uid();
        let mut shape = Shape::plain(BACKING_MEMORY_MB, 1, DISK_MB);
        let rules = Rules { allow: attached.clone(), headers: std::collections::BTreeMap::new() };
        let opened = match (&self.egress, rules.allow.is_empty() || self.mode == Some(Mode::Unbound)) {
            (Some((egress, root)), false) => match egress.open(root, &uid, rules) {
                Ok(o) => Some(o),
                Err(e) => return error(500, "internal", &format!("binding the sandbox's network policy: {e}")),
            },
            _ => None,
        };
        shape.egress = opened.as_ref().map(crate::egress::Opened::mount);
        let sandbox = Sandbox {
            display_name,
            labels,
            image_ref,
            cpus,
            memory_mib: memory,
            created: now(),
            etag: 1,
            status: Status::Creating,
            timeout,
            deletes_refused: 0,
            attached: if self.mode == Some(Mode::Unbound) { Vec::new() } else { attached },
            _egress: opened,
        };
        lock(&self.sandboxes).insert(uid.clone(), sandbox);
        if let Some(key) = key {
            lock(&self.replays).insert(key, (Value::Object(body), uid.clone()));
        }
        // Placement goes on after the answer, as the service's does: the caller
        // reads the sandbox until it runs.
        let me = Arc::clone(&self);
        let made = uid.clone();
        tokio::spawn(async move {
            let placed = me.backing.create(&made, &shape).await;
            let mut all = lock(&me.sandboxes);
            match (placed, all.get_mut(&made)) {
                (Ok(()), Some(s)) if s.status == Status::Creating => {
                    s.status = Status::Running;
                    s.etag += 1;
                }
                (Ok(()), _) => {
                    drop(all);
                    let me = Arc::clone(&me);
                    tokio::spawn(async move { me.backing.remove(&made).await });
                }
                (Err(e), _) => {
                    eprintln!("plimsoll-fake dockercloud: placing {made} failed: {e}");
                    all.remove(&made);
                }
            }
        });
        let mut r = self.get(&uid);
        *r.status_mut() = http::StatusCode::ACCEPTED;
        r
    }

    fn view(&self, uid: &str, s: &Sandbox) -> Value {
        let status = match s.status {
            Status::Creating => "creating",
            Status::Running => "running",
            Status::Deleting => "deleting",
        };
        let (cpus, memory) = if self.mode == Some(Mode::Weaker) { (8, 16384) } else { (s.cpus, s.memory_mib) };
        let image_ref = if self.mode == Some(Mode::Unpinned) {
            s.image_ref.split('@').next().unwrap_or_default().to_string()
        } else {
            s.image_ref.clone()
        };
        let mut core = json!({
            "status": status,
            "createdAt": rfc3339(s.created),
            "etag": format!("\"e{}\"", s.etag),
            "imageRef": image_ref,
            "resources": {"cpus": cpus, "memoryMib": memory.to_string()},
            "platform": {"os": "linux", "architecture": "amd64"},
            "environment": {},
            "labels": s.labels,
        });
        if s.status == Status::Running {
            core["endpoint"] = json!({
                "uri": self.endpoint_uri(uid),
                "protocol": "http",
                "credentialAudience": format!("sandboxes/{uid}/endpoint"),
                "sandbox": format!("sandboxes/{uid}"),
                "sandboxUid": uid,
                "apiVersion": "v1",
                "capabilities": ["exec", "upload", "download", "readFile", "writeFile", "mkdir", "list"],
                "authentication": {
                    "scheme": "scopedBearer",
                    "defaultTtl": "300s",
                    "maxTtl": "300s",
                    "credentialTransports": ["authorizationHeader"],
                },
            });
        }
        let mut v = json!({
            "uid": uid,
            "name": format!("sandboxes/{uid}"),
            "displayName": s.display_name,
            "core": core,
        });
        if let Some(t) = &s.timeout {
            v["effectiveFeatures"] = json!({
                "lifecycle": {"stopMemoryOutcome": "discard"},
                "outputRetention": {"minDuration": "3600s"},
                "timeouts": {"onTimeout": "delete", "autoResume": false, "initialTimeout": t},
            });
        }
        v
    }

    fn get(&self, uid: &str) -> http::Response<Body> {
        let all = lock(&self.sandboxes);
        let Some(s) = all.get(uid) else {
            return error(404, "notFound", "The target is absent or not visible within the caller's scope.");
        };
        let mut r = server::json(200, &self.view(uid, s));
        if let Ok(tag) = http::HeaderValue::from_str(&format!("\"e{}\"", s.etag)) {
            r.headers_mut().insert(http::header::ETAG, tag);
        }
        r
    }

    fn list(&self, req: &Request) -> http::Response<Body> {
        let size = req.param("pageSize").and_then(|s| s.parse::<usize>().ok()).filter(|s| *s > 0).unwrap_or(50);
        let from = req.param("pageToken").and_then(|t| t.parse::<usize>().ok()).unwrap_or(0);
        let all = lock(&self.sandboxes);
        let mut uids: Vec<&String> = all.keys().collect();
        uids.sort();
        let page: Vec<Value> = uids.iter().skip(from).take(size).map(|u| self.view(u, &all[*u])).collect();
        let next = if from + size < uids.len() { (from + size).to_string() } else { String::new() };
        server::json(200, &json!({"sandboxes": page, "nextPageToken": next}))
    }

    fn delete(self: Arc<Self>, uid: &str, req: &Request) -> http::Response<Body> {
        let Some(given) = req.header("if-match").map(str::to_string) else {
            return error(428, "failedPrecondition", "etag_required: send the sandbox's ETag in If-Match");
        };
        let mut all = lock(&self.sandboxes);
        let Some(s) = all.get_mut(uid) else {
            return server::whole(204, "", Bytes::new());
        };
        if self.mode == Some(Mode::StaleEtag) && s.deletes_refused == 0 {
            s.deletes_refused += 1;
            s.etag += 1;
        }
        let current = format!("\"e{}\"", s.etag);
        if given != current {
            return server::json(
                412,
                &json!({"code": "failedPrecondition", "message": "etag_mismatch: the sandbox changed", "details": [
                    {"@type": "type.googleapis.com/docker.sandboxes.v1.EtagMismatch", "currentEtag": current}]}),
            );
        }
        if self.mode == Some(Mode::Undeletable) {
            return error(500, "internal", "the sandbox could not be deleted");
        }
        s.status = Status::Deleting;
        s.etag += 1;
        let body = self.view(uid, s);
        drop(all);
        lock(&self.credentials).retain(|_, c| c.uid != uid);
        let me = Arc::clone(&self);
        let gone = uid.to_string();
        tokio::spawn(async move {
            let _ = me.backing.remove(&gone).await;
            lock(&me.sandboxes).remove(&gone);
        });
        server::json(202, &body)
    }

    fn mint(&self, uid: &str, req: &Request) -> http::Response<Body> {
        let running = lock(&self.sandboxes).get(uid).map(|s| s.status == Status::Running);
        match running {
            None => return error(404, "notFound", "The target is absent or not visible within the caller's scope."),
            Some(false) => return error(409, "failedPrecondition", "the sandbox is not running"),
            Some(true) => {}
        }
        let v: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let Some(asked) = v.get("permissions").and_then(Value::as_array).filter(|p| !p.is_empty()) else {
            return error(400, "invalidArgument", "permissions needs at least one entry");
        };
        let allowed = ["sandboxesExec", "sandboxesFilesRead", "sandboxesFilesWrite"];
        if asked.iter().any(|p| !p.as_str().is_some_and(|p| allowed.contains(&p))) {
            return error(
                400,
                "invalidArgument",
                "permissions may be sandboxesExec, sandboxesFilesRead, sandboxesFilesWrite",
            );
        }
        let ttl = v
            .get("ttl")
            .and_then(Value::as_str)
            .and_then(|t| t.strip_suffix('s'))
            .and_then(|t| t.parse::<f64>().ok())
            .map_or(CREDENTIAL_LIFE_S, |t| (t.ceil() as u64).clamp(1, CREDENTIAL_LIFE_S));
        let token = format!("sbxe_{}", URL_SAFE_NO_PAD.encode(random(32)));
        let expires = now() + ttl;
        lock(&self.credentials).insert(token.clone(), Credential { uid: uid.to_string(), expires, used: false });
        let mut r = server::json(
            200,
            &json!({
                "token": token,
                "expireTime": rfc3339(expires),
                "permissions": asked,
                "sandbox": format!("sandboxes/{uid}"),
                "audience": format!("sandboxes/{uid}/endpoint"),
            }),
        );
        r.headers_mut().insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
        r
    }

    /// Both views of the sandbox's policy: the account's deny-all default (owner
    /// layer), then each network its inline policies allow (attached layer).
    fn policies(&self, uid: &str) -> http::Response<Body> {
        let Some(attached) = lock(&self.sandboxes).get(uid).map(|s| s.attached.clone()) else {
            return error(404, "notFound", "The target is absent or not visible within the caller's scope.");
        };
        let mode = if self.mode == Some(Mode::OpenPolicy) { "allowAll" } else { "denyAll" };
        let mut allow: Vec<Value> = Vec::new();
        let mut nodes = vec![json!({"source": {"origin": "owner", "id": "account-default"},
                                    "constant": if mode == "denyAll" { "false" } else { "true" }})];
        if self.mode == Some(Mode::AllowRule) {
            allow.push(json!({"network": "api.example.com:443", "layer": "owner"}));
            nodes.push(json!({"source": {"origin": "owner", "id": "account-default"},
                              "destination": {"kind": "dns", "value": "api.example.com", "port": 443}}));
        }
        for network in &attached {
            allow.push(json!({"network": network, "layer": "attached"}));
            nodes.push(json!({"source": {"origin": "attached", "id": format!("inline-{uid}")},
                              "destination": {"kind": "dns", "value": network}}));
        }
        if nodes.len() > 1 {
            nodes.push(json!({"any": {"nodes": (0..nodes.len()).collect::<Vec<_>>()}}));
        }
        server::json(
            200,
            &json!({
                "effective": {"mode": mode, "allowNetworks": allow, "denyNetworks": []},
                "exact": {"revision": "1", "selectorVersion": "destination.v1", "nodes": nodes},
            }),
        )
    }

    /// The 401 Docker gives a call to `uid`'s endpoint without a live scoped
    /// credential for it.
    fn endpoint_refusal(&self, uid: &str, req: &Request) -> Option<http::Response<Body>> {
        let Some(token) = bearer(req) else {
            return Some(error(401, "unauthenticated", "a scoped endpoint credential is required"));
        };
        let mut creds = lock(&self.credentials);
        let Some(c) = creds.get_mut(token).filter(|c| c.uid == uid) else {
            return Some(error(401, "unauthenticated", "invalid endpoint credential"));
        };
        let first_exec = !c.used && req.path == "/v1/processes/exec";
        c.used = true;
        if c.expires <= now() || (self.mode == Some(Mode::ExpiredCredential) && first_exec) {
            return Some(server::json(
                401,
                &json!({"code": "unauthenticated", "message": "endpoint_credential_expired", "details": [
                    {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "ENDPOINT_CREDENTIAL_EXPIRED"}]}),
            ));
        }
        None
    }

    async fn endpoint(self: Arc<Self>, uid: String, req: Request) -> http::Response<Body> {
        let running = lock(&self.sandboxes).get(&uid).map(|s| s.status == Status::Running);
        if running != Some(true) {
            return error(404, "notFound", "the credential does not address this sandbox endpoint");
        }
        if let Some(r) = self.endpoint_refusal(&uid, &req) {
            return r;
        }
        match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/v1/processes/exec") => self.exec(&uid, &req).await,
            ("POST", "/v1/files/upload") => self.upload(&uid, &req).await,
            ("GET", "/v1/files/download") => self.download(&uid, &req).await,
            _ => error(404, "notFound", &format!("no route {} {}", req.method, req.path)),
        }
    }

    async fn exec(&self, uid: &str, req: &Request) -> http::Response<Body> {
        let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) else {
            return error(400, "invalidArgument", "the body is not a JSON object");
        };
        if let Some(k) = body.keys().find(|k| !["cmd", "env", "workingDir", "user"].contains(&k.as_str())) {
            return error(400, "invalidArgument", &format!("unknown field {k:?}"));
        }
        let cmd: Vec<String> = body
            .get("cmd")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        if cmd.is_empty() {
            return error(400, "invalidArgument", "cmd needs at least one entry");
        }
        let cwd = body.get("workingDir").and_then(Value::as_str).unwrap_or("/home/user").to_string();
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let run = self.backing.run(uid, Process { argv: cmd, cwd, ..Process::default() }, tx);
        let collect = async {
            let (mut out, mut err, mut code) = (Vec::new(), Vec::new(), None);
            while let Some(chunk) = rx.recv().await {
                match chunk {
                    Chunk::Stdout(b) => out.extend_from_slice(&b),
                    Chunk::Stderr(b) => err.extend_from_slice(&b),
                    Chunk::Exit(c) => code = Some(c.unwrap_or(137)),
                }
            }
            (out, err, code)
        };
        let (ran, (mut out, mut err, code)) = tokio::join!(run, collect);
        if let Err(e) = ran {
            return error(500, "internal", &format!("exec failed: {e}"));
        }
        let capture = if self.mode == Some(Mode::Incomplete) { 64 } else { EXEC_CAPTURE };
        let incomplete = out.len() + err.len() > capture;
        out.truncate(capture);
        err.truncate(capture - out.len());
        let mut answer = Map::new();
        let code = code.unwrap_or(-1);
        if code != 0 {
            answer.insert("exitCode".into(), json!(code));
        }
        answer.insert("stdout".into(), json!(STANDARD.encode(&out)));
        answer.insert("stderr".into(), json!(STANDARD.encode(&err)));
        if incomplete {
            answer.insert("incomplete".into(), json!(true));
        }
        server::json(200, &Value::Object(answer))
    }

    async fn upload(&self, uid: &str, req: &Request) -> http::Response<Body> {
        let content_type = req.header("content-type").unwrap_or_default();
        let Some(boundary) = content_type
            .strip_prefix("multipart/form-data")
            .and_then(|rest| rest.split(';').find_map(|p| p.trim().strip_prefix("boundary=")))
        else {
            return error(400, "invalidArgument", &format!("unsupported content type: {content_type}"));
        };
        let boundary = boundary.trim_matches('"');
        if !req.body.ends_with(format!("--{boundary}--\r\n").as_bytes())
            && !req.body.ends_with(format!("--{boundary}--").as_bytes())
        {
            return error(400, "invalidArgument", "the multipart body has no closing delimiter");
        }
        let parts = multipart(&req.body, boundary);
        if !parts.len().is_multiple_of(2) {
            return error(400, "invalidArgument", "every file needs a metadata part and then a content part");
        }
        let mut written = 0;
        for (i, pair) in parts.chunks(2).enumerate() {
            let (meta, content) = (&pair[0], &pair[1]);
            if meta.name != "metadata" || content.name != "content" {
                return error(400, "invalidArgument", &format!("item {i}: parts must be metadata, then content"));
            }
            if [meta, content].iter().any(|p| p.head.to_ascii_lowercase().contains("content-transfer-encoding")) {
                return error(400, "invalidArgument", &format!("item {i}: Content-Transfer-Encoding is refused"));
            }
            let header: Value = serde_json::from_slice(&meta.content).unwrap_or(Value::Null);
            let Some(path) = header.get("path").and_then(Value::as_str).filter(|p| p.starts_with('/')) else {
                return error(400, "invalidArgument", &format!("item {i}: metadata needs an absolute path"));
            };
            if let Some(real) = self.backing.resolve(uid, path).await
                && !real.starts_with("/home/user/")
                && !real.starts_with("/tmp/")
            {
                return error(409, "failedPrecondition", &format!("path_authority_symlink_escape: {path}"));
            }
            if let Err(e) = self.backing.write(uid, path, &content.content).await {
                return error(500, "internal", &format!("item {i} ({path}): {e}"));
            }
            written += 1;
        }
        server::json(200, &json!({"filesWritten": written}))
    }

    async fn download(&self, uid: &str, req: &Request) -> http::Response<Body> {
        let paths: Vec<String> = req
            .query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .filter(|(k, _)| *k == "paths")
            .map(|(_, v)| server::decode(v))
            .collect();
        if paths.is_empty() {
            return error(400, "invalidArgument", "paths needs at least one entry");
        }
        let boundary = hex::encode(random(12));
        let mut body = Vec::new();
        let mut part = |name: &str, content_type: &str, bytes: &[u8]| {
            body.extend_from_slice(
                format!(
                    "--{boundary}\r\nContent-Disposition: attachment; name={name}\r\nContent-Type: {content_type}\r\n\r\n"
                )
                .as_bytes(),
            );
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        };
        for path in &paths {
            let failure = |code: &str, message: String| {
                json!({"path": path, "failure": {"code": code, "message": message, "details": []}}).to_string()
            };
            match self.backing.resolve(uid, path).await {
                Some(real) if !real.starts_with("/home/user/") && !real.starts_with("/tmp/") => {
                    let e = failure("failedPrecondition", format!("path_authority_symlink_escape: {path}"));
                    part("error", "application/json", e.as_bytes());
                    continue;
                }
                _ => {}
            }
            match self.backing.read(uid, path).await {
                Ok(Some(bytes)) => {
                    part("metadata", "application/json", json!({"path": path, "mode": 420}).to_string().as_bytes());
                    part("content", "application/octet-stream", &bytes);
                }
                Ok(None) => {
                    part("error", "application/json", failure("notFound", format!("{path}: absent")).as_bytes())
                }
                Err(e) => part(
                    "error",
                    "application/json",
                    failure("failedPrecondition", format!("path_authority_nonregular_object: {e}")).as_bytes(),
                ),
            }
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        server::whole(200, &format!("multipart/mixed; boundary={boundary}"), body)
    }
}

impl Handler for Fake {
    fn settings(&self, port: u16, pki: &Pki) -> Vec<(String, String)> {
        *lock(&self.port) = port;
        vec![
            ("SANDBOX_PROVIDER".into(), "dockercloud".into()),
            ("DOCKER_SBX_USERNAME".into(), self.username.clone()),
            ("DOCKER_SBX_TOKEN".into(), self.pat.clone()),
            // The image every sandbox runs, pinned as an operator pins theirs.
            ("SANDBOX_DOCKERCLOUD_IMAGE".into(), format!("plimsoll-sandbox@{}", self.backing.image())),
            ("SANDBOX_DOCKERCLOUD_AUTH_URL".into(), format!("https://{HUB}:{port}/v2/auth/token")),
            ("SANDBOX_DOCKERCLOUD_API_URL".into(), format!("https://{API}:{port}/sandboxes")),
            ("SANDBOX_DOCKERCLOUD_ENDPOINT_URL".into(), format!("https://{{target}}{ENDPOINT_SUFFIX}:{port}")),
            ("SANDBOX_DOCKERCLOUD_CA_FILE".into(), pki.ca_file.display().to_string()),
            ("SANDBOX_DOCKERCLOUD_CONNECT_TO".into(), "127.0.0.1".into()),
        ]
    }

    fn handle(self: Arc<Self>, req: Request) -> std::pin::Pin<Box<dyn Future<Output = http::Response<Body>> + Send>> {
        Box::pin(async move {
            if self.mode == Some(Mode::Redirect) {
                return server::redirect("https://elsewhere.dockercloud.test/");
            }
            let endpoint = req.host.strip_suffix(ENDPOINT_SUFFIX).map(str::to_string);
            match endpoint {
                Some(uid) => self.endpoint(uid, req).await,
                None if req.host == HUB => self.hub(&req),
                None if req.host == API => self.management(req).await,
                None => error(
                    421,
                    "invalidArgument",
                    &format!("this fake serves {HUB}, {API} and <uid>{ENDPOINT_SUFFIX}, not {:?}", req.host),
                ),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_parses_and_uids_are_one_dns_label() {
        for (m, _) in MODES {
            assert!(Mode::parse(m).is_some(), "{m}");
        }
        assert_eq!(Mode::parse("nope"), None);
        let u = uid();
        assert!(u.len() == 26 && u.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    }

    #[test]
    fn numbers_come_as_numbers_or_strings() {
        assert_eq!(number(Some(&json!(2048))), Some(2048));
        assert_eq!(number(Some(&json!("2048"))), Some(2048));
        assert_eq!(number(Some(&json!("2k"))), None);
    }

    #[test]
    fn inline_policies_are_checked_as_the_schema_says_and_give_their_allowed_networks() {
        let allowed = |v: Value| inline_policies(Some(&v));
        assert_eq!(inline_policies(None), Ok(vec![]));
        assert_eq!(
            allowed(json!([{"mode": "denyAll", "allowNetworks": ["Guard.test"], "denyNetworks": ["10.0.0.0/8"]}])),
            Ok(vec!["guard.test".to_string()])
        );
        let cases = [
            (json!({}), "networkPolicies must be a list"),
            (json!([1]), "networkPolicies[0] must be an object"),
            (json!([{"mode": "allowAll"}]), "networkPolicies[0].mode is required and must be denyAll"),
            (json!([{"allowNetworks": ["a"]}]), "networkPolicies[0].mode is required and must be denyAll"),
            (json!([{"mode": "denyAll", "rules": []}]), "networkPolicies[0]: unknown field \"rules\""),
            (
                json!([{"mode": "denyAll", "allowNetworks": "a"}]),
                "networkPolicies[0].allowNetworks must be a list of network names",
            ),
            (
                json!([{"mode": "denyAll", "denyNetworks": [""]}]),
                "networkPolicies[0].denyNetworks must be a list of network names",
            ),
        ];
        for (v, why) in cases {
            assert_eq!(allowed(v.clone()), Err(why.to_string()), "{v}");
        }
    }

    #[test]
    fn bearers_carry_their_exp() {
        let t = jwt(1_800_000_000, "me");
        let claims = t.split('.').nth(1).and_then(|c| URL_SAFE_NO_PAD.decode(c).ok()).expect("claims");
        let v: Value = serde_json::from_slice(&claims).expect("json");
        assert_eq!(v["exp"], 1_800_000_000);
    }
}
