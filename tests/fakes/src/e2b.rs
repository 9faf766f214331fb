//! A fake of E2B: the control plane (`api.e2b.test`) and each sandbox's envd
//! (`49983-<id>.e2b.test`), as E2B's published OpenAPI document, envd's protocol
//! buffers and its Connect handlers define them (see README.md).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::backing::{Backing, Chunk, GUEST_UID, Process, Shape, Tmpfs};
use crate::egress::{Egress, Rules};
use crate::pki::Pki;
use crate::server::{self, Body, Handler, Request};
use crate::util::{multipart, now, random, rfc3339};

/// Each way this fake can misbehave, and what it does.
pub const MODES: [(&str, &str); 13] = [
    ("redirect", "every answer is a 307 redirect elsewhere"),
    ("weaker", "the read-back grants more than asked: internet access, egress to 0.0.0.0/0, 8 CPUs and 8 GiB"),
    ("open-policy", "the read-back's egress policy is not deny-all (denyOut empty)"),
    ("unknown-field", "the read-back's network carries a field E2B does not document (allowAll)"),
    ("malformed", "the create answers 201 with a body that is not JSON"),
    ("oversized", "the read-back is 5 MiB"),
    ("slow", "the control plane answers after 35 s"),
    ("truncated", "a process stream ends after its start event, without an end or end-of-stream message"),
    ("undeletable", "deletes answer 500 and leave the sandbox running"),
    ("leaky", "a create answers 500 with the caller's API key echoed in its message"),
    ("drift", "a sandbox reads back as asked twice, then with internet access (a sandbox changed after its create)"),
    ("sticky-rule", "a network update that would take every allowed host off answers 204 and changes nothing"),
    (
        "no-network-rules",
        "a team without network transform rules (a per-team feature): a create or network update naming rules answers 400",
    ),
];

/// What E2B answers a team without the network transform rules feature
/// (infra 54693ff3, handlers/sandbox_create.go, validateNetworkRules).
const NO_RULES: &str = "Network transform rules are not available for your team.";

/// A misbehaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Redirect,
    Weaker,
    OpenPolicy,
    UnknownField,
    Malformed,
    Oversized,
    Slow,
    Truncated,
    Undeletable,
    Leaky,
    Drift,
    StickyRule,
    NoNetworkRules,
}

impl Mode {
    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "redirect" => Mode::Redirect,
            "weaker" => Mode::Weaker,
            "open-policy" => Mode::OpenPolicy,
            "unknown-field" => Mode::UnknownField,
            "malformed" => Mode::Malformed,
            "oversized" => Mode::Oversized,
            "slow" => Mode::Slow,
            "truncated" => Mode::Truncated,
            "undeletable" => Mode::Undeletable,
            "leaky" => Mode::Leaky,
            "drift" => Mode::Drift,
            "sticky-rule" => Mode::StickyRule,
            "no-network-rules" => Mode::NoNetworkRules,
            _ => return None,
        })
    }
}

/// The template every sandbox is made from, and what it gives.
const TEMPLATE: &str = "base";
const TEMPLATE_ID: &str = "rki5dems9wqfm4r03t7g";
const MEMORY_MB: u32 = 512;
const CPUS: u32 = 1;
/// The sandbox's disk, a tmpfs charged against its memory in the backing
/// container: kept well below `MEMORY_MB`, so filling it ends in ENOSPC, as a
/// real sandbox's disk does, not in the memory limit.
const DISK_MB: u32 = 256;
const ENVD_VERSION: &str = "0.6.13";
const CLIENT_ID: &str = "6532622b";

struct Sandbox {
    token: Option<String>,
    metadata: Value,
    started: u64,
    ends: u64,
    network: Value,
    pids: u32,
    /// How many times it was read back.
    reads: u32,
    /// Paused (its container frozen), until a connect resumes it.
    paused: bool,
    /// Its way out while it lives, when its rules allow any.
    way_out: Option<crate::egress::Opened>,
    /// The processes envd runs, by pid, until they end.
    procs: HashMap<u32, Proc>,
}

/// A process envd runs.
struct Proc {
    tag: Option<String>,
    /// Its `ProcessConfig`, as `List` shows it.
    config: Value,
    /// Its standard input while open.
    input: Option<tokio::sync::mpsc::UnboundedSender<Bytes>>,
    /// The streams attached to it (its `Start`'s, any `Connect`'s).
    watchers: Vec<tokio::sync::mpsc::Sender<Bytes>>,
}

/// Whether `s` names hosts by IP or CIDR rather than by name.
fn is_address(s: &str) -> bool {
    let ip = s.split_once('/').map_or(s, |(ip, _)| ip);
    ip.parse::<std::net::IpAddr>().is_ok()
}

/// The egress a create's `network` asks for, checked as E2B's API checks it
/// (400 with its words): named hosts need `0.0.0.0/0` denied, a rule's key is a
/// domain name, at most 10 of them with one rule each and 20 headers a rule.
fn rules(network: &Value) -> Result<Rules, String> {
    let strings = |field: &str| -> Vec<String> {
        network
            .get(field)
            .and_then(Value::as_array)
            .map_or_else(Vec::new, |a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
    };
    let (allow, deny) = (strings("allowOut"), strings("denyOut"));
    if let Some(bad) = deny.iter().find(|d| !is_address(d)) {
        return Err(format!("invalid denied CIDR {bad}"));
    }
    let named: Vec<String> = allow.into_iter().filter(|a| !is_address(a)).collect();
    if !named.is_empty() && !deny.iter().any(|d| d == "0.0.0.0/0") {
        return Err("When specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out to block all other traffic.".into());
    }
    let mut headers = std::collections::BTreeMap::new();
    if let Some(map) = network.get("rules").and_then(Value::as_object) {
        if map.len() > 10 {
            return Err(format!("Too many rule domains: {} (maximum 10)", map.len()));
        }
        for (domain, list) in map {
            if domain.is_empty() || is_address(domain) || domain.len() > 128 {
                return Err(format!("Rule domain {domain:?} is not a valid domain name"));
            }
            let list = list.as_array().map(Vec::as_slice).unwrap_or_default();
            if list.len() > 1 {
                return Err(format!("Domain {domain:?} has more than one rule"));
            }
            let set: Vec<(String, String)> = list
                .iter()
                .filter_map(|r| r.pointer("/transform/headers").and_then(Value::as_object))
                .flat_map(|h| h.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())))
                .collect();
            if set.len() > 20 {
                return Err(format!("Rule for domain {domain:?} has too many headers: {} (maximum 20)", set.len()));
            }
            headers.insert(domain.to_ascii_lowercase(), set);
        }
    }
    Ok(Rules { allow: named.into_iter().map(|n| n.to_ascii_lowercase()).collect(), headers })
}

/// E2B's answer for a sandbox it does not have (or not for this key).
fn missing(id: &str) -> http::Response<Body> {
    error(404, &format!("Sandbox \"{id}\" doesn't exist or you don't have access to it"))
}

/// A sandbox's `state` as the API shows it.
fn state(s: &Sandbox) -> &'static str {
    if s.paused { "paused" } else { "running" }
}

/// The fake.
pub struct Fake {
    backing: Arc<Backing>,
    mode: Option<Mode>,
    key: String,
    sandboxes: Mutex<HashMap<String, Sandbox>>,
    /// The way out its sandboxes' rules may open, and the directory its
    /// sockets go in; without it no sandbox reaches anything.
    egress: Option<(Egress, std::path::PathBuf)>,
    /// The most sandboxes one page of the listing holds (E2B's is 100; a test
    /// sets fewer to walk the pages).
    page_size: usize,
}

/// E2B's default and largest page of the sandbox listing (infra 54693ff3,
/// handlers/sandboxes_list.go).
pub const MAX_PAGE: usize = 100;

/// A listing cursor as E2B mints one (infra 54693ff3, utils/pagination.go):
/// base64url of `{RFC 3339 start}__{sandbox ID}`, newest first.
fn cursor(started: &str, id: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE.encode(format!("{started}__{id}"))
}

/// A cursor read back: its start and ID; `None` for anything E2B refuses
/// ("Invalid next token"), an ascending cursor on a descending listing included.
fn parse_cursor(token: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::URL_SAFE.decode(token).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let parts: Vec<&str> = text.split("__").collect();
    match parts.as_slice() {
        [started, id] if started.len() == 20 && started.ends_with('Z') => Some((started.to_string(), id.to_string())),
        _ => None,
    }
}

/// A sandbox ID as E2B makes them: 20 of `[a-z0-9]`.
fn sandbox_id() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    random(20).iter().map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char).collect()
}

fn error(status: u16, message: &str) -> http::Response<Body> {
    server::json(status, &json!({"code": status, "message": message}))
}

/// One Connect envelope.
fn envelope(flags: u8, message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(flags);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

fn event(e: Value) -> Bytes {
    envelope(0, json!({"event": e}).to_string().as_bytes())
}

impl Fake {
    /// A fake over `backing`, misbehaving as `mode` says.
    pub fn new(backing: Arc<Backing>, mode: Option<Mode>) -> Fake {
        Fake {
            backing,
            mode,
            key: format!("e2b_{}", hex::encode(random(20))),
            sandboxes: Mutex::new(HashMap::new()),
            egress: None,
            page_size: MAX_PAGE,
        }
    }

    /// The fake whose listing pages hold at most `n` sandboxes.
    pub fn with_page_size(mut self, n: usize) -> Fake {
        self.page_size = n.clamp(1, MAX_PAGE);
        self
    }

    /// The fake whose sandboxes reach what their rules allow through `egress`,
    /// its sockets under `root`.
    pub fn with_egress(mut self, egress: Egress, root: std::path::PathBuf) -> Fake {
        self.egress = Some((egress, root));
        self
    }

    fn sandboxes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Sandbox>> {
        self.sandboxes.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn api(self: Arc<Self>, req: Request) -> http::Response<Body> {
        if req.header("x-api-key") != Some(self.key.as_str()) {
            return error(401, "Invalid API key, please visit https://e2b.dev/docs/api-key for more information.");
        }
        if self.mode == Some(Mode::Slow) {
            tokio::time::sleep(Duration::from_secs(35)).await;
        }
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        match (req.method.as_str(), segments.as_slice()) {
            ("POST", ["sandboxes"]) => self.create(&req).await,
            ("GET", ["sandboxes", id]) => self.detail(id),
            ("DELETE", ["sandboxes", id]) => self.kill(id).await,
            ("POST", ["sandboxes", id, "pause"]) => self.pause(id).await,
            ("POST", ["sandboxes", id, "connect"]) => self.connect_sandbox(id, &req).await,
            ("PUT", ["sandboxes", id, "network"]) => self.update_network(id, &req),
            ("GET", ["v2", "sandboxes"]) => self.list(&req),
            ("GET", ["health"]) => server::whole(200, "text/plain", "Health check successful"),
            _ => error(404, &format!("no route {} {}", req.method, req.path)),
        }
    }

    async fn create(&self, req: &Request) -> http::Response<Body> {
        if self.mode == Some(Mode::Leaky) {
            let key = req.header("x-api-key").unwrap_or_default();
            return error(500, &format!("internal error creating a sandbox for key {key}: placement failed"));
        }
        let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
            return error(400, "Error when parsing request: the body is not JSON");
        };
        let template = body.get("templateID").and_then(Value::as_str).unwrap_or_default();
        if template != TEMPLATE && template != TEMPLATE_ID {
            return error(404, &format!("template '{template}' not found"));
        }
        let timeout = body.get("timeout").and_then(Value::as_i64).unwrap_or(15);
        if timeout <= 0 {
            return error(400, "Timeout must be greater than 0");
        }
        let secure = body.get("secure").and_then(Value::as_bool).unwrap_or(false);
        let network = body.get("network").cloned().unwrap_or_else(|| json!({}));
        if network.get("allowPublicTraffic").and_then(Value::as_bool) == Some(false) && !secure {
            return error(
                400,
                "You cannot create a sandbox without public access unless you enable secure envd access via 'secure' flag.",
            );
        }
        // Stored as sent and read back so (infra 54693ff3, sandbox_get.go's
        // dbNetworkConfigToAPI): denyOut is not widened, allowPublicTraffic and
        // maskRequestHost come back from the sandbox's ingress settings.
        if self.mode == Some(Mode::NoNetworkRules) && network.get("rules").is_some_and(|r| !r.is_null()) {
            return error(400, NO_RULES);
        }
        let rules = match rules(&network) {
            Ok(r) => r,
            Err(why) => return error(400, &why),
        };
        let id = sandbox_id();
        let mut shape = Shape::plain(MEMORY_MB, CPUS, DISK_MB);
        // With routes, every sandbox gets a way out, for rules a network update may set later.
        let opened = match &self.egress {
            Some((egress, root)) if !rules.allow.is_empty() || egress.routes_any() => {
                match egress.open(root, &id, rules) {
                    Ok(o) => Some(o),
                    Err(e) => return error(500, &format!("Failed to place sandbox: its network: {e}")),
                }
            }
            _ => None,
        };
        shape.egress = opened.as_ref().map(crate::egress::Opened::mount);
        // The template is the sandbox image with a /work the guest owns, as the
        // e2b guide asks of a template that serves sessions.
        shape.tmpfs.push(Tmpfs {
            target: "/work".into(),
            size_bytes: Some(u64::from(DISK_MB) << 20),
            mode: Some(0o755),
            options: vec!["exec".into(), format!("uid={GUEST_UID}"), format!("gid={GUEST_UID}")],
        });
        if let Err(e) = self.backing.create(&id, &shape).await {
            return server::json(
                500,
                &json!({"code": 500, "message": format!("Failed to place sandbox: {e}"), "error_code": "sandbox_create_failed"}),
            );
        }
        let token = secure.then(|| hex::encode(random(24)));
        let started = now();
        self.sandboxes().insert(
            id.clone(),
            Sandbox {
                token: token.clone(),
                metadata: body.get("metadata").cloned().unwrap_or_else(|| json!({})),
                started,
                ends: started + timeout as u64,
                network,
                pids: 0,
                reads: 0,
                paused: false,
                way_out: opened,
                procs: HashMap::new(),
            },
        );
        if self.mode == Some(Mode::Malformed) {
            return server::whole(201, "application/json", "{\"sandboxID\": ");
        }
        let mut answer = json!({
            "templateID": TEMPLATE_ID, "sandboxID": id, "alias": TEMPLATE, "clientID": CLIENT_ID,
            "envdVersion": ENVD_VERSION, "trafficAccessToken": null, "domain": null,
        });
        if let Some(t) = token {
            answer["envdAccessToken"] = json!(t);
        }
        server::json(201, &answer)
    }

    fn detail(&self, id: &str) -> http::Response<Body> {
        let mut sandboxes = self.sandboxes();
        let Some(s) = sandboxes.get_mut(id) else {
            return missing(id);
        };
        s.reads += 1;
        let s = &*s;
        let mut network = s.network.clone();
        let mut v = json!({
            "templateID": TEMPLATE_ID, "alias": TEMPLATE, "sandboxID": id, "clientID": CLIENT_ID,
            "startedAt": rfc3339(s.started), "endAt": rfc3339(s.ends), "envdVersion": ENVD_VERSION,
            "allowInternetAccess": false, "domain": null,
            "cpuCount": CPUS, "memoryMB": MEMORY_MB, "diskSizeMB": DISK_MB,
            "metadata": s.metadata, "state": state(s),
            "lifecycle": {"autoResume": false, "onTimeout": "kill"}, "volumeMounts": [],
        });
        if let Some(t) = &s.token {
            v["envdAccessToken"] = json!(t);
        }
        match self.mode {
            Some(Mode::Drift) if s.reads > 2 => {
                network = json!({"allowOut": ["0.0.0.0/0"], "denyOut": []});
                v["allowInternetAccess"] = json!(true);
            }
            Some(Mode::Weaker) => {
                network = json!({"allowOut": ["0.0.0.0/0"], "denyOut": []});
                v["allowInternetAccess"] = json!(true);
                v["cpuCount"] = json!(8);
                v["memoryMB"] = json!(8192);
            }
            Some(Mode::OpenPolicy) => network["denyOut"] = json!([]),
            Some(Mode::UnknownField) => network["allowAll"] = json!(true),
            Some(Mode::Oversized) => v["padding"] = json!("x".repeat(5 << 20)),
            _ => {}
        }
        v["network"] = network;
        server::json(200, &v)
    }

    async fn kill(&self, id: &str) -> http::Response<Body> {
        if self.mode == Some(Mode::Undeletable) {
            return error(500, &format!("Error killing sandbox: sandbox \"{id}\" is being held by the orchestrator"));
        }
        if self.sandboxes().remove(id).is_none() {
            return missing(id);
        }
        let _ = self.backing.remove(id).await;
        server::whole(204, "", Bytes::new())
    }

    /// `POST /sandboxes/{id}/pause`: its processes frozen, its memory and files
    /// kept, envd unreachable until a connect resumes it.
    /// `PUT /sandboxes/{id}/network`: the egress rules replaced whole (a field the
    /// body omits is cleared; `allow_internet_access: false` denies `0.0.0.0/0`),
    /// checked as a create's are, and passed to the sandbox's way out at once;
    /// the ingress settings (`allowPublicTraffic`, `maskRequestHost`) stay.
    fn update_network(&self, id: &str, req: &Request) -> http::Response<Body> {
        let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) else {
            return error(400, "Error when parsing request: the body is not a JSON object");
        };
        let mut network = serde_json::Map::new();
        for field in ["allowOut", "denyOut", "rules", "egressProxy"] {
            if let Some(v) = body.get(field).filter(|v| !v.is_null()) {
                network.insert(field.into(), v.clone());
            }
        }
        if body.get("allow_internet_access").and_then(Value::as_bool) == Some(false) {
            let deny = network.entry("denyOut").or_insert_with(|| json!([]));
            if let Some(d) = deny.as_array_mut()
                && !d.iter().any(|x| x == "0.0.0.0/0")
            {
                d.push(json!("0.0.0.0/0"));
            }
        }
        let network = Value::Object(network);
        if self.mode == Some(Mode::NoNetworkRules) && network.get("rules").is_some_and(|r| !r.is_null()) {
            return error(400, NO_RULES);
        }
        let rules = match rules(&network) {
            Ok(r) => r,
            Err(why) => return error(400, &why),
        };
        let mut all = self.sandboxes();
        let Some(s) = all.get_mut(id) else { return missing(id) };
        if s.paused {
            return error(409, &format!("Sandbox \"{id}\" is paused; resume it before updating its network"));
        }
        let closing = network.get("allowOut").and_then(Value::as_array).is_none_or(Vec::is_empty);
        if self.mode == Some(Mode::StickyRule) && closing {
            return server::whole(204, "", Bytes::new());
        }
        if let Some(way) = &s.way_out {
            way.set(rules);
        }
        // Only the egress is replaced: the sandbox's ingress settings stay.
        let mut network = network;
        for field in ["allowPublicTraffic", "maskRequestHost"] {
            if let (Some(v), Some(n)) = (s.network.get(field).cloned(), network.as_object_mut()) {
                n.insert(field.into(), v);
            }
        }
        s.network = network;
        server::whole(204, "", Bytes::new())
    }

    async fn pause(&self, id: &str) -> http::Response<Body> {
        match self.sandboxes().get(id).map(|s| s.paused) {
            None => return missing(id),
            Some(true) => return error(409, &format!("Error pausing sandbox - sandbox '{id}' is already paused")),
            Some(false) => {}
        }
        if let Err(e) = self.backing.pause(id).await {
            return error(500, &format!("Error pausing sandbox: {e}"));
        }
        if let Some(s) = self.sandboxes().get_mut(id) {
            s.paused = true;
        }
        server::whole(204, "", Bytes::new())
    }

    /// `POST /sandboxes/{id}/connect` (`{"timeout": seconds}`): a paused sandbox
    /// resumed (201), a running one's timeout set again (200); the sandbox either way.
    async fn connect_sandbox(&self, id: &str, req: &Request) -> http::Response<Body> {
        let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
            return error(400, "Error when parsing request: the body is not JSON");
        };
        let Some(timeout) = body.get("timeout").and_then(Value::as_i64) else {
            return error(400, "Error when parsing request: timeout is required");
        };
        if timeout <= 0 {
            return error(400, "Timeout must be greater than 0");
        }
        let paused = match self.sandboxes().get(id) {
            None => return missing(id),
            Some(s) => s.paused,
        };
        if paused && let Err(e) = self.backing.unpause(id).await {
            return error(500, &format!("Error resuming sandbox: {e}"));
        }
        let mut sandboxes = self.sandboxes();
        let Some(s) = sandboxes.get_mut(id) else {
            return missing(id);
        };
        s.paused = false;
        s.ends = now() + timeout as u64;
        let mut answer = json!({
            "templateID": TEMPLATE_ID, "sandboxID": id, "alias": TEMPLATE, "clientID": CLIENT_ID,
            "envdVersion": ENVD_VERSION, "trafficAccessToken": null, "domain": null,
        });
        if let Some(t) = &s.token {
            answer["envdAccessToken"] = json!(t);
        }
        server::json(if paused { 201 } else { 200 }, &answer)
    }

    /// `GET /v2/sandboxes`: newest first (start time, then ID), one page of
    /// `limit` (default and at most 100, or the fake's page size) after the
    /// `nextToken` cursor, `X-Next-Token` set when more follow.
    fn list(&self, req: &Request) -> http::Response<Body> {
        let wanted: Vec<(String, String)> = req
            .param("metadata")
            .unwrap_or_default()
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (server::decode(k), server::decode(v)))
            .collect();
        let limit = match req.param("limit") {
            None => MAX_PAGE,
            Some(v) => match v.parse::<i64>() {
                Ok(n) if n >= 1 => usize::try_from(n).unwrap_or(MAX_PAGE).min(MAX_PAGE),
                _ => return error(400, &format!("Invalid limit {v:?}: it must be a whole number of at least 1")),
            },
        }
        .min(self.page_size);
        let after = match req.param("nextToken").filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => match parse_cursor(&t) {
                Some(c) => Some(c),
                None => return error(400, "Invalid next token"),
            },
        };
        let mut items: Vec<(String, String, Value)> = self
            .sandboxes()
            .iter()
            .filter(|(_, s)| wanted.iter().all(|(k, v)| s.metadata.get(k).and_then(Value::as_str) == Some(v)))
            .map(|(id, s)| {
                let started = rfc3339(s.started);
                let item = json!({
                    "templateID": TEMPLATE_ID, "alias": TEMPLATE, "sandboxID": id, "clientID": CLIENT_ID,
                    "startedAt": started, "endAt": rfc3339(s.ends), "cpuCount": CPUS,
                    "memoryMB": MEMORY_MB, "diskSizeMB": DISK_MB, "metadata": s.metadata,
                    "state": state(s), "envdVersion": ENVD_VERSION,
                });
                (started, id.clone(), item)
            })
            .collect();
        // Newest first; among equal starts, IDs ascending (RFC 3339 in UTC at
        // one width sorts as time does).
        items.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        if let Some((t, id)) = &after {
            items.retain(|(started, i, _)| started < t || (started == t && i > id));
        }
        let more = items.len() > limit;
        items.truncate(limit);
        let next = more.then(|| items.last().map(|(t, id, _)| cursor(t, id))).flatten();
        let page: Vec<Value> = items.into_iter().map(|(_, _, v)| v).collect();
        let mut answer = server::json(200, &json!(page));
        if let Some(token) = next.and_then(|t| http::HeaderValue::from_str(&t).ok()) {
            answer.headers_mut().insert("x-next-token", token);
        }
        answer
    }

    async fn envd(self: Arc<Self>, id: String, req: Request) -> http::Response<Body> {
        let token = match self.sandboxes().get(&id) {
            // A paused sandbox's envd is not routed to, as a missing one's is not.
            None | Some(Sandbox { paused: true, .. }) => {
                return server::json(
                    502,
                    &json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502}),
                );
            }
            Some(s) => s.token.clone(),
        };
        if req.method == "GET" && req.path == "/health" {
            return server::whole(204, "", Bytes::new());
        }
        if token.is_some() && req.header("x-access-token") != token.as_deref() {
            let message = if req.path == "/files" {
                "access token present in header but does not match"
            } else {
                "unauthorized access, please provide a valid access token or method signing if supported"
            };
            return error(401, message);
        }
        match (req.method.as_str(), req.path.as_str()) {
            ("POST", "/files") => self.upload(&id, &req).await,
            ("GET", "/files") => self.download(&id, &req).await,
            ("POST", "/process.Process/Start") => self.start(id, &req),
            ("POST", "/process.Process/Connect") => self.connect(id, &req),
            ("POST", path) if path.starts_with("/process.Process/") => {
                let call = path.trim_start_matches("/process.Process/").to_string();
                self.unary(&id, &call, &req).await
            }
            _ => error(404, &format!("no route {} {}", req.method, req.path)),
        }
    }

    async fn upload(&self, id: &str, req: &Request) -> http::Response<Body> {
        let content_type = req.header("content-type").unwrap_or_default();
        let Some(boundary) = content_type
            .strip_prefix("multipart/form-data")
            .and_then(|rest| rest.split(';').find_map(|p| p.trim().strip_prefix("boundary=")))
        else {
            return error(400, &format!("unsupported content type: {content_type}"));
        };
        let mut written = Vec::new();
        for part in multipart(&req.body, boundary.trim_matches('"')) {
            if part.name != "file" {
                continue;
            }
            let Some(path) = req.param("path").or(part.filename) else {
                return error(400, "a file part needs a path");
            };
            let path = if path.starts_with('/') { path } else { format!("/home/user/{path}") };
            if let Err(e) = self.backing.write(id, &path, &part.content).await {
                return error(500, &format!("error opening file: {e}"));
            }
            let name = path.rsplit('/').next().unwrap_or_default().to_string();
            written.push(json!({"path": path, "name": name, "type": "file"}));
        }
        server::whole(200, "", json!(written).to_string())
    }

    async fn download(&self, id: &str, req: &Request) -> http::Response<Body> {
        let Some(path) = req.param("path") else { return error(400, "path is required") };
        match self.backing.read(id, &path).await {
            Ok(Some(bytes)) => server::whole(200, "application/octet-stream", bytes),
            Ok(None) => error(404, &format!("path '{path}' does not exist")),
            Err(e) if e.contains("is a directory") => error(400, &e),
            Err(e) => error(500, &e),
        }
    }

    /// Envd's `Start`: the process runs until it ends or its `Connect-Timeout-Ms`
    /// passes, whatever becomes of this stream (envd starts it detached from the
    /// request); its output goes to every stream attached to it.
    fn start(self: Arc<Self>, id: String, req: &Request) -> http::Response<Body> {
        let Streaming { mut response, tx, message } = match streaming(req) {
            Ok(opened) => opened,
            Err(answer) => return *answer,
        };
        let process = message.get("process").cloned().unwrap_or_default();
        let cmd = process.get("cmd").and_then(Value::as_str).unwrap_or_default().to_string();
        let args: Vec<String> = process
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default();
        let cwd = process.get("cwd").and_then(Value::as_str).unwrap_or("/home/user").to_string();
        let env: Vec<(String, String)> = process
            .get("envs")
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default();
        let tag = message.get("tag").and_then(Value::as_str).map(String::from);
        // Absent, stdin is open: the field came later, and envd keeps old clients working.
        let stdin = message.get("stdin").and_then(Value::as_bool).unwrap_or(true);
        let deadline = req
            .header("connect-timeout-ms")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
        let (input, input_rx) = if stdin {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let pid = {
            let mut s = self.sandboxes();
            let Some(sb) = s.get_mut(&id) else { return error(502, "The sandbox was not found") };
            sb.pids += 1;
            let pid = 1000 + sb.pids;
            // This stream watches from before the process exists: none of its output is missed.
            sb.procs.insert(pid, Proc { tag, config: process.clone(), input, watchers: vec![tx.clone()] });
            pid
        };
        let truncated = self.mode == Some(Mode::Truncated);
        let me = Arc::clone(&self);
        tokio::spawn(async move {
            if tx.send(event(json!({"start": {"pid": pid}}))).await.is_err() {
                return;
            }
            if truncated {
                drop(me.forget(&id, pid));
                return;
            }
            drop(tx);
            let (chunks, mut rx) = tokio::sync::mpsc::channel(16);
            let run = {
                let me = Arc::clone(&me);
                let id = id.clone();
                let argv = std::iter::once(cmd).chain(args).collect();
                let marker = format!("{id}-{pid}");
                let process =
                    Process { argv, cwd, env, deadline, input: input_rx, marker: Some(marker), ..Process::default() };
                tokio::spawn(async move { me.backing.run(&id, process, chunks).await })
            };
            while let Some(chunk) = rx.recv().await {
                let e = match chunk {
                    Chunk::Stdout(b) => json!({"data": {"stdout": STANDARD.encode(&b)}}),
                    Chunk::Stderr(b) => json!({"data": {"stderr": STANDARD.encode(&b)}}),
                    Chunk::Exit(Some(0)) => json!({"end": {"exited": true, "status": "exit status 0"}}),
                    Chunk::Exit(Some(137)) | Chunk::Exit(None) => {
                        json!({"end": {"exitCode": -1, "status": "signal: killed", "error": "signal: killed"}})
                    }
                    Chunk::Exit(Some(c)) => json!({"end": {
                        "exitCode": c, "exited": true, "status": format!("exit status {c}"),
                        "error": format!("exit status {c}")}}),
                };
                me.tell(&id, pid, event(e)).await;
            }
            let end = match run.await {
                Ok(Ok(true)) => json!({}),
                Ok(Ok(false)) => {
                    json!({"error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}})
                }
                Ok(Err(e)) => json!({"error": {"code": "internal", "message": e}}),
                Err(e) => json!({"error": {"code": "internal", "message": e.to_string()}}),
            };
            // Gone from the table before its streams end: a call after the end sees no process.
            for w in me.forget(&id, pid) {
                let _ = w.send(envelope(2, end.to_string().as_bytes())).await;
            }
        });
        response.headers_mut().insert("connect-accept-encoding", http::HeaderValue::from_static("identity"));
        response
    }

    /// Sends `frame` to every stream attached to process `pid`, letting go of
    /// those whose client has gone (the process goes on).
    async fn tell(&self, id: &str, pid: u32, frame: Bytes) {
        let watchers: Vec<tokio::sync::mpsc::Sender<Bytes>> =
            self.sandboxes().get(id).and_then(|s| s.procs.get(&pid)).map(|p| p.watchers.clone()).unwrap_or_default();
        let mut gone = Vec::new();
        for w in &watchers {
            if w.send(frame.clone()).await.is_err() {
                gone.push(w.clone());
            }
        }
        if !gone.is_empty()
            && let Some(p) = self.sandboxes().get_mut(id).and_then(|s| s.procs.get_mut(&pid))
        {
            p.watchers.retain(|w| !gone.iter().any(|g| g.same_channel(w)));
        }
    }

    /// Process `pid` has ended: takes it out of the table; returns the streams
    /// still attached, which end with it.
    fn forget(&self, id: &str, pid: u32) -> Vec<tokio::sync::mpsc::Sender<Bytes>> {
        self.sandboxes().get_mut(id).and_then(|s| s.procs.remove(&pid)).map(|p| p.watchers).unwrap_or_default()
    }

    /// The process a `ProcessSelector` names: by pid, or by tag.
    fn select(&self, id: &str, selector: Option<&Value>) -> Result<u32, (&'static str, String)> {
        let s = self.sandboxes();
        let procs = s.get(id).map(|s| &s.procs).ok_or(("not_found", "The sandbox was not found".to_string()))?;
        let found = match (
            selector.and_then(|v| v.get("pid")).and_then(Value::as_u64),
            selector.and_then(|v| v.get("tag")).and_then(Value::as_str),
        ) {
            (Some(pid), _) => u32::try_from(pid).ok().filter(|p| procs.contains_key(p)),
            (None, Some(tag)) => procs.iter().find(|(_, p)| p.tag.as_deref() == Some(tag)).map(|(pid, _)| *pid),
            (None, None) => return Err(("invalid_argument", "invalid input type".into())),
        };
        found.ok_or(("not_found", "process not found".into()))
    }

    /// Envd's `Connect`: a stream attached to a running process, from its start
    /// event on; it ends when the process does (or when the client goes).
    fn connect(self: Arc<Self>, id: String, req: &Request) -> http::Response<Body> {
        let Streaming { mut response, tx, message } = match streaming(req) {
            Ok(opened) => opened,
            Err(answer) => return *answer,
        };
        match self.select(&id, message.get("process")) {
            Err((code, why)) => end_stream(tx, Some((code, why))),
            Ok(pid) => {
                if let Some(p) = self.sandboxes().get_mut(&id).and_then(|s| s.procs.get_mut(&pid)) {
                    // The start event goes first: the channel is empty and holds 16.
                    let _ = tx.try_send(event(json!({"start": {"pid": pid}})));
                    p.watchers.push(tx);
                }
            }
        }
        response.headers_mut().insert("connect-accept-encoding", http::HeaderValue::from_static("identity"));
        response
    }

    /// Envd's unary calls on a running process: `SendInput`, `CloseStdin`,
    /// `SendSignal` and `List`, in Connect's JSON form.
    async fn unary(&self, id: &str, call: &str, req: &Request) -> http::Response<Body> {
        if req.header("content-type") != Some("application/json") {
            return connect_error("invalid_argument", "a unary call here takes application/json");
        }
        let Ok(message) = serde_json::from_slice::<Value>(&req.body) else {
            return connect_error("invalid_argument", "the request is not JSON");
        };
        if call == "List" {
            let s = self.sandboxes();
            let list: Vec<Value> = s
                .get(id)
                .map(|s| s.procs.iter().map(|(pid, p)| json!({"config": p.config, "pid": pid, "tag": p.tag})).collect())
                .unwrap_or_default();
            return server::json(200, &json!({"processes": list}));
        }
        let pid = match self.select(id, message.get("process")) {
            Ok(pid) => pid,
            Err((code, why)) => return connect_error(code, &why),
        };
        match call {
            "SendInput" => {
                let Some(b64) = message.pointer("/input/stdin").and_then(Value::as_str) else {
                    return connect_error("invalid_argument", "invalid input type");
                };
                let Ok(bytes) = STANDARD.decode(b64) else {
                    return connect_error("invalid_argument", "stdin is not base64");
                };
                let s = self.sandboxes();
                let sent = s
                    .get(id)
                    .and_then(|s| s.procs.get(&pid))
                    .and_then(|p| p.input.as_ref())
                    .map(|i| i.send(Bytes::from(bytes)).is_ok());
                if sent != Some(true) {
                    return connect_error("failed_precondition", "stdin not enabled or closed");
                }
            }
            "CloseStdin" => {
                if let Some(p) = self.sandboxes().get_mut(id).and_then(|s| s.procs.get_mut(&pid)) {
                    p.input = None;
                }
            }
            "SendSignal" => match message.get("signal").and_then(Value::as_str) {
                Some("SIGNAL_SIGKILL" | "SIGNAL_SIGTERM") => {
                    self.backing.kill_marked(id, &format!("{id}-{pid}")).await;
                }
                _ => return connect_error("invalid_argument", "invalid signal"),
            },
            _ => return connect_error("unimplemented", &format!("process.Process/{call} is not implemented")),
        }
        server::json(200, &json!({}))
    }
}

/// A streaming call, opened: its response, the sender that feeds it, and the
/// request's one message.
struct Streaming {
    response: http::Response<Body>,
    tx: tokio::sync::mpsc::Sender<Bytes>,
    message: Value,
}

/// Opens a streaming call; the answer to give instead when the request is not one.
fn streaming(req: &Request) -> Result<Streaming, Box<http::Response<Body>>> {
    let (response, tx) = server::streamed("application/connect+json");
    if req.header("content-type") != Some("application/connect+json") {
        return Err(Box::new(error(415, "a streaming call takes application/connect+json")));
    }
    match one_envelope(&req.body) {
        Some(message) => Ok(Streaming { response, tx, message }),
        None => {
            end_stream(tx, Some(("invalid_argument", "the request is not one JSON envelope".into())));
            Err(Box::new(response))
        }
    }
}

/// The one JSON message a streaming request carries.
fn one_envelope(body: &[u8]) -> Option<Value> {
    (body.len() >= 5 && body[0] == 0).then(|| serde_json::from_slice(&body[5..]).ok()).flatten()
}

/// Ends a stream with its end-of-stream message, an error's when given.
fn end_stream(tx: tokio::sync::mpsc::Sender<Bytes>, error: Option<(&str, String)>) {
    let end = match error {
        Some((code, message)) => json!({"error": {"code": code, "message": message}}),
        None => json!({}),
    };
    tokio::spawn(async move {
        let _ = tx.send(envelope(2, end.to_string().as_bytes())).await;
    });
}

/// A unary call's error as Connect writes it: the code's HTTP status and a JSON body.
fn connect_error(code: &str, message: &str) -> http::Response<Body> {
    let status = match code {
        "not_found" => 404,
        "unimplemented" => 501,
        "internal" => 500,
        _ => 400,
    };
    server::json(status, &json!({"code": code, "message": message}))
}

impl Handler for Fake {
    fn settings(&self, port: u16, pki: &Pki) -> Vec<(String, String)> {
        vec![
            ("SANDBOX_PROVIDER".into(), "e2b".into()),
            ("E2B_API_KEY".into(), self.key.clone()),
            ("E2B_TEMPLATE".into(), TEMPLATE.into()),
            ("SANDBOX_E2B_API_URL".into(), format!("https://api.e2b.test:{port}")),
            ("SANDBOX_E2B_ENVD_URL".into(), format!("https://49983-{{target}}.e2b.test:{port}")),
            ("SANDBOX_E2B_CA_FILE".into(), pki.ca_file.display().to_string()),
            ("SANDBOX_E2B_CONNECT_TO".into(), "127.0.0.1".into()),
        ]
    }

    fn handle(self: Arc<Self>, req: Request) -> std::pin::Pin<Box<dyn Future<Output = http::Response<Body>> + Send>> {
        Box::pin(async move {
            if self.mode == Some(Mode::Redirect) {
                return server::redirect("https://elsewhere.e2b.test/");
            }
            let envd =
                req.host.strip_prefix("49983-").and_then(|rest| rest.strip_suffix(".e2b.test")).map(str::to_string);
            match envd {
                Some(id) => self.envd(id, req).await,
                None if req.host == "api.e2b.test" => self.api(req).await,
                None => {
                    error(421, &format!("this fake serves api.e2b.test and 49983-<id>.e2b.test, not {:?}", req.host))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    #[test]
    fn every_mode_parses_and_ids_look_like_e2bs() {
        for (m, _) in MODES {
            assert!(Mode::parse(m).is_some(), "{m}");
        }
        assert_eq!(Mode::parse("nope"), None);
        let id = sandbox_id();
        assert!(id.len() == 20 && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    }

    fn request(host: &str, path: &str, headers: &[(&str, &str)], body: impl Into<Bytes>) -> Request {
        let mut h = http::HeaderMap::new();
        for (k, v) in headers {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                http::HeaderValue::from_str(v).expect("value"),
            );
        }
        Request {
            stream: None,
            upgrade: None,
            method: "POST".into(),
            host: host.into(),
            path: path.into(),
            query: String::new(),
            headers: h,
            body: body.into(),
        }
    }

    /// One sandbox of `fake`'s, made through its API; its id and envd token.
    async fn sandbox(fake: &Arc<Fake>) -> (String, String) {
        let body = json!({"templateID": "base", "timeout": 300, "secure": true,
            "network": {"allowPublicTraffic": false, "denyOut": ["0.0.0.0/0"]}});
        let key = fake.key.clone();
        let r = Arc::clone(fake)
            .handle(request("api.e2b.test", "/sandboxes", &[("x-api-key", &key)], body.to_string()))
            .await;
        assert_eq!(r.status(), 201);
        let v: Value = serde_json::from_slice(&r.into_body().collect().await.expect("body").to_bytes()).expect("json");
        let id = v["sandboxID"].as_str().expect("id").to_string();
        (id, v["envdAccessToken"].as_str().expect("token").to_string())
    }

    /// The events of one Connect stream, as they come.
    struct Events(Body);

    impl Events {
        /// The next message: an event's JSON, or the end-of-stream's (flag 2).
        async fn next(&mut self) -> Option<(u8, Value)> {
            let frame = tokio::time::timeout(Duration::from_secs(30), self.0.frame()).await.expect("in time")?;
            let data = frame.expect("frame").into_data().expect("data");
            assert!(data.len() >= 5, "one envelope per frame here");
            Some((data[0], serde_json::from_slice(&data[5..]).expect("json")))
        }
    }

    async fn stream(
        fake: &Arc<Fake>,
        id: &str,
        token: &str,
        call: &str,
        message: Value,
        extra: &[(&str, &str)],
    ) -> Events {
        let mut headers = vec![("content-type", "application/connect+json"), ("x-access-token", token)];
        headers.extend_from_slice(extra);
        let host = format!("49983-{id}.e2b.test");
        let r = Arc::clone(fake)
            .handle(request(
                &host,
                &format!("/process.Process/{call}"),
                &headers,
                envelope(0, message.to_string().as_bytes()),
            ))
            .await;
        assert_eq!(r.status(), 200);
        Events(r.into_body())
    }

    async fn unary(fake: &Arc<Fake>, id: &str, token: &str, call: &str, message: Value) -> (u16, Value) {
        let headers = [("content-type", "application/json"), ("x-access-token", token)];
        let host = format!("49983-{id}.e2b.test");
        let r = Arc::clone(fake)
            .handle(request(&host, &format!("/process.Process/{call}"), &headers, message.to_string()))
            .await;
        let status = r.status().as_u16();
        (status, serde_json::from_slice(&r.into_body().collect().await.expect("body").to_bytes()).expect("json"))
    }

    async fn api(fake: &Arc<Fake>, method: &str, path: &str, body: &str) -> (u16, Value) {
        let key = fake.key.clone();
        let mut req = request("api.e2b.test", path, &[("x-api-key", &key)], body.to_string());
        req.method = method.into();
        let r = Arc::clone(fake).handle(req).await;
        let status = r.status().as_u16();
        let bytes = r.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// Pause and resume on a real container: a paused sandbox says so, keeps its
    /// processes, and its envd is unreachable until a connect resumes it.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_paused_sandbox_keeps_its_processes_and_a_connect_resumes_it() {
        let Some(image) = crate::util::sandbox_image_or_skip("e2b::a_paused_sandbox") else { return };
        let fake = Arc::new(Fake::new(Arc::new(Backing::new(image)), None));
        let (id, token) = sandbox(&fake).await;
        let _container = crate::util::Removed(id.clone());
        // It says it is up before the pause, so the pause finds it running.
        let cat =
            json!({"process": {"cmd": "/bin/sh", "args": ["-c", "echo up; exec cat"]}, "tag": "kept", "stdin": true});
        let mut started = stream(&fake, &id, &token, "Start", cat, &[]).await;
        while let Some((_, event)) = started.next().await {
            if event.pointer("/event/data/stdout").is_some() {
                break;
            }
        }
        drop(started);

        assert_eq!(api(&fake, "POST", &format!("/sandboxes/{id}/pause"), "").await.0, 204);
        assert_eq!(api(&fake, "GET", &format!("/sandboxes/{id}"), "").await.1["state"], "paused");
        let (status, again) = api(&fake, "POST", &format!("/sandboxes/{id}/pause"), "").await;
        assert_eq!(
            (status, again["message"].as_str()),
            (409, Some(format!("Error pausing sandbox - sandbox '{id}' is already paused").as_str()))
        );
        let (status, _) = unary(&fake, &id, &token, "List", json!({})).await;
        assert_eq!(status, 502, "a paused sandbox's envd is not routed to");
        let (status, missing) = api(&fake, "POST", &format!("/sandboxes/{id}/connect"), "{}").await;
        assert_eq!(
            (status, missing["message"].as_str()),
            (400, Some("Error when parsing request: timeout is required"))
        );

        let (status, resumed) = api(&fake, "POST", &format!("/sandboxes/{id}/connect"), r#"{"timeout":60}"#).await;
        assert_eq!((status, resumed["sandboxID"].as_str()), (201, Some(id.as_str())));
        assert_eq!(api(&fake, "GET", &format!("/sandboxes/{id}"), "").await.1["state"], "running");
        let (_, list) = unary(&fake, &id, &token, "List", json!({})).await;
        assert_eq!(list.pointer("/processes/0/tag"), Some(&json!("kept")), "the process lived through: {list}");
        assert_eq!(api(&fake, "POST", &format!("/sandboxes/{id}/connect"), r#"{"timeout":60}"#).await.0, 200);
        assert_eq!(api(&fake, "POST", "/sandboxes/nope/pause", "").await.0, 404);
    }

    /// Envd's process model, on a real container: a process outlives the stream
    /// that started it, takes input while its stdin is open, can be attached to
    /// again, and only its own deadline or signal ends it, not another's.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_process_outlives_its_stream_takes_input_and_is_attached_to_again() {
        let Some(image) = crate::util::sandbox_image_or_skip("e2b::a_process_outlives_its_stream") else { return };
        let fake = Arc::new(Fake::new(Arc::new(Backing::new(image)), None));
        let (id, token) = sandbox(&fake).await;
        let _container = crate::util::Removed(id.clone());

        let cat = json!({"process": {"cmd": "/bin/cat", "args": []}, "tag": "echo", "stdin": true});
        let mut started = stream(&fake, &id, &token, "Start", cat, &[]).await;
        let (_, first) = started.next().await.expect("start event");
        let pid = first.pointer("/event/start/pid").and_then(Value::as_u64).expect("pid");
        drop(started);

        let (status, list) = unary(&fake, &id, &token, "List", json!({})).await;
        assert_eq!((status, list.pointer("/processes/0/tag")), (200, Some(&json!("echo"))), "{list}");

        let mut attached = stream(&fake, &id, &token, "Connect", json!({"process": {"tag": "echo"}}), &[]).await;
        assert_eq!(attached.next().await.map(|(_, v)| v), Some(json!({"event": {"start": {"pid": pid}}})));
        let input = json!({"process": {"pid": pid}, "input": {"stdin": STANDARD.encode("hello\n")}});
        assert_eq!(unary(&fake, &id, &token, "SendInput", input.clone()).await, (200, json!({})));
        let (_, data) = attached.next().await.expect("data");
        assert_eq!(data.pointer("/event/data/stdout"), Some(&json!(STANDARD.encode("hello\n"))), "{data}");

        assert_eq!(unary(&fake, &id, &token, "CloseStdin", json!({"process": {"pid": pid}})).await.0, 200);
        let (_, end) = attached.next().await.expect("end");
        assert_eq!(end.pointer("/event/end/exited"), Some(&json!(true)), "{end}");
        assert_eq!(attached.next().await, Some((2, json!({}))));
        let (status, gone) = unary(&fake, &id, &token, "SendInput", input).await;
        assert_eq!((status, gone["code"].as_str()), (404, Some("not_found")));

        // One process's deadline ends it alone.
        let other = json!({"process": {"cmd": "/bin/sleep", "args": ["120"]}, "tag": "other", "stdin": false});
        drop(stream(&fake, &id, &token, "Start", other, &[]).await);
        let short = json!({"process": {"cmd": "/bin/sleep", "args": ["60"]}, "stdin": false});
        let mut timed = stream(&fake, &id, &token, "Start", short, &[("connect-timeout-ms", "1500")]).await;
        let mut last = None;
        while let Some(m) = timed.next().await {
            last = Some(m);
        }
        let (flag, end) = last.expect("an end");
        assert_eq!((flag, end.pointer("/error/code")), (2, Some(&json!("deadline_exceeded"))), "{end}");
        let (_, list) = unary(&fake, &id, &token, "List", json!({})).await;
        let tags: Vec<&Value> = list["processes"].as_array().expect("list").iter().map(|p| &p["tag"]).collect();
        assert_eq!(tags, [&json!("other")], "the other process lives on: {list}");
        let ps = fake.backing.read(&id, "/proc/self/status").await;
        assert!(ps.is_ok(), "the sandbox still answers");

        let (status, _) =
            unary(&fake, &id, &token, "SendSignal", json!({"process": {"tag": "other"}, "signal": "SIGNAL_SIGKILL"}))
                .await;
        assert_eq!(status, 200);
    }

    /// A loopback HTTP server that answers each request with its `Host`, path
    /// and `x-plimsoll-guard` header, as JSON.
    async fn echo_upstream() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|req: http::Request<hyper::body::Incoming>| async move {
                        let h = |k: &str| req.headers().get(k).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
                        let said = json!({"host": h("host"), "path": req.uri().path(), "guard": h("x-plimsoll-guard")});
                        Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(Bytes::from(
                            said.to_string(),
                        ))))
                    });
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        });
        addr
    }

    /// Runs `script` with `sh -c` in sandbox `id` as the guest; its stdout.
    async fn output(fake: &Arc<Fake>, id: &str, token: &str, script: &str) -> String {
        let start = json!({"process": {"cmd": "/bin/sh", "args": ["-c", script]}, "stdin": false});
        let mut events = stream(fake, id, token, "Start", start, &[]).await;
        let mut out = Vec::new();
        while let Some((flag, v)) = events.next().await {
            if flag == 2 {
                break;
            }
            if let Some(b) = v.pointer("/event/data/stdout").and_then(Value::as_str) {
                out.extend(STANDARD.decode(b).expect("base64"));
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// The network rules on a real container: a name `allowOut` lists resolves
    /// and is reached over HTTPS (the sandbox trusts the proxy's CA), its rule's
    /// header set on the way out, from node and python alike; any other name is
    /// unreachable; named hosts without `0.0.0.0/0` denied are refused as E2B does.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_sandbox_reaches_only_what_its_rules_allow_with_their_headers_set() {
        let Some(image) = crate::util::sandbox_image_or_skip("e2b::a_sandbox_reaches_only") else { return };
        let root = std::env::temp_dir().join(format!("plimsoll-fake-egress-test-{}", std::process::id()));
        let pki = Arc::new(Pki::generate(&root, &["api.e2b.test"]).expect("pki"));
        let mut routes = crate::egress::Routes::default();
        routes.add(&format!("guard.e2b.test={}", echo_upstream().await)).expect("route");
        let egress = Egress::new(pki, routes);
        let fake = Arc::new(Fake::new(Arc::new(Backing::new(image)), None).with_egress(egress, root.clone()));
        let key = fake.key.clone();
        let open = json!({"templateID": "base", "timeout": 300, "secure": true,
            "network": {"allowPublicTraffic": false, "allowOut": ["guard.e2b.test"], "denyOut": []}});
        let refused = Arc::clone(&fake)
            .handle(request("api.e2b.test", "/sandboxes", &[("x-api-key", &key)], open.to_string()))
            .await;
        let body = refused.into_body().collect().await.expect("body").to_bytes();
        assert_eq!(
            serde_json::from_slice::<Value>(&body).expect("json")["message"],
            "When specifying allowed domains in allow out, you must include 'ALL_TRAFFIC' in deny out to block all other traffic."
        );
        let body = json!({"templateID": "base", "timeout": 300, "secure": true,
            "network": {"allowPublicTraffic": false, "allowOut": ["guard.e2b.test"], "denyOut": ["0.0.0.0/0"],
                "rules": {"guard.e2b.test": [{"transform": {"headers": {"X-Plimsoll-Guard": "crg_fromtherule"}}}]}}});
        let r = Arc::clone(&fake)
            .handle(request("api.e2b.test", "/sandboxes", &[("x-api-key", &key)], body.to_string()))
            .await;
        assert_eq!(r.status(), 201);
        let v: Value = serde_json::from_slice(&r.into_body().collect().await.expect("body").to_bytes()).expect("json");
        let (id, token) =
            (v["sandboxID"].as_str().expect("id").to_string(), v["envdAccessToken"].as_str().expect("t").to_string());
        let _container = crate::util::Removed(id.clone());
        let node = "NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt node -e \"fetch('https://guard.e2b.test/v1/guard', {method: 'POST', body: '{}', headers: {'x-plimsoll-guard': 'forged'}}).then(r => r.text()).then(console.log, e => console.log('failed', e.cause && e.cause.code))\"";
        let out = output(&fake, &id, &token, node).await;
        let said: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("node's answer {out:?}: {e}"));
        assert_eq!(said, json!({"host": "guard.e2b.test", "path": "/v1/guard", "guard": "crg_fromtherule"}));
        let python = "python3 -c \"import urllib.request as u; print(u.urlopen(u.Request('https://guard.e2b.test/p', data=b'{}')).read().decode())\" 2>&1";
        let out = output(&fake, &id, &token, python).await;
        let said: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("python's answer {out:?}: {e}"));
        assert_eq!(said["guard"], "crg_fromtherule");
        let elsewhere =
            "node -e \"fetch('https://example.com').then(() => console.log('reached'), e => console.log('failed'))\"";
        assert_eq!(output(&fake, &id, &token, elsewhere).await.trim(), "failed");
        let detail = api(&fake, "GET", &format!("/sandboxes/{id}"), "").await.1;
        assert_eq!(detail["network"]["allowOut"], json!(["guard.e2b.test"]), "{detail}");
        // A network update replaces the rules whole, at once: denied, the guard
        // is unreachable; allowed again with another header, that one is set.
        let reach = "node -e \"fetch('https://guard.e2b.test/g', {method: 'POST', body: '{}'}).then(r => r.text()).then(console.log, () => console.log('failed'))\"";
        let path = format!("/sandboxes/{id}/network");
        let (status, _) = api(&fake, "PUT", &path, &json!({"allow_internet_access": false}).to_string()).await;
        assert_eq!(status, 204);
        assert_eq!(output(&fake, &id, &token, reach).await.trim(), "failed");
        let detail = api(&fake, "GET", &format!("/sandboxes/{id}"), "").await.1;
        // The omitted egress fields are cleared; the ingress the create set stays.
        let kept = json!({"denyOut": ["0.0.0.0/0"], "allowPublicTraffic": false});
        assert_eq!(detail["network"], kept, "the omitted egress fields were cleared");
        let open = json!({"allowOut": ["guard.e2b.test"], "denyOut": ["0.0.0.0/0"],
            "rules": {"guard.e2b.test": [{"transform": {"headers": {"X-Plimsoll-Guard": "crg_second"}}}]}});
        assert_eq!(api(&fake, "PUT", &path, &open.to_string()).await.0, 204);
        let said: Value = serde_json::from_str(output(&fake, &id, &token, reach).await.trim()).expect("json");
        assert_eq!(said["guard"], "crg_second");
        let (status, why) = api(&fake, "PUT", &path, &json!({"allowOut": ["guard.e2b.test"]}).to_string()).await;
        assert_eq!(status, 400, "{why}");
        drop(fake);
        let _ = std::fs::remove_dir_all(&root);
    }
}
