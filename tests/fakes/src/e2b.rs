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

use crate::backing::{Backing, Chunk, Process, Shape};
use crate::pki::Pki;
use crate::server::{self, Body, Handler, Request};
use crate::util::{multipart, now, random, rfc3339};

/// Each way this fake can misbehave, and what it does.
pub const MODES: [(&str, &str); 10] = [
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
];

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
}

/// The fake.
pub struct Fake {
    backing: Arc<Backing>,
    mode: Option<Mode>,
    key: String,
    sandboxes: Mutex<HashMap<String, Sandbox>>,
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
        Fake { backing, mode, key: format!("e2b_{}", hex::encode(random(20))), sandboxes: Mutex::new(HashMap::new()) }
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
        let mut network = network;
        if let Some(n) = network.as_object_mut() {
            n.remove("allowPublicTraffic");
            n.remove("maskRequestHost");
            if body.get("allow_internet_access").and_then(Value::as_bool) == Some(false) {
                let deny = n.entry("denyOut").or_insert_with(|| json!([]));
                if let Some(d) = deny.as_array_mut()
                    && !d.iter().any(|x| x == "0.0.0.0/0")
                {
                    d.push(json!("0.0.0.0/0"));
                }
            }
        }
        let id = sandbox_id();
        if let Err(e) = self.backing.create(&id, &Shape::plain(MEMORY_MB, CPUS, DISK_MB)).await {
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
        let sandboxes = self.sandboxes();
        let Some(s) = sandboxes.get(id) else {
            return error(404, &format!("Sandbox \"{id}\" doesn't exist or you don't have access to it"));
        };
        let mut network = s.network.clone();
        let mut v = json!({
            "templateID": TEMPLATE_ID, "alias": TEMPLATE, "sandboxID": id, "clientID": CLIENT_ID,
            "startedAt": rfc3339(s.started), "endAt": rfc3339(s.ends), "envdVersion": ENVD_VERSION,
            "allowInternetAccess": false, "domain": null,
            "cpuCount": CPUS, "memoryMB": MEMORY_MB, "diskSizeMB": DISK_MB,
            "metadata": s.metadata, "state": "running",
            "lifecycle": {"autoResume": false, "onTimeout": "kill"}, "volumeMounts": [],
        });
        if let Some(t) = &s.token {
            v["envdAccessToken"] = json!(t);
        }
        match self.mode {
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
            return error(404, &format!("Sandbox \"{id}\" doesn't exist or you don't have access to it"));
        }
        let _ = self.backing.remove(id).await;
        server::whole(204, "", Bytes::new())
    }

    fn list(&self, req: &Request) -> http::Response<Body> {
        let wanted: Vec<(String, String)> = req
            .param("metadata")
            .unwrap_or_default()
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (server::decode(k), server::decode(v)))
            .collect();
        let items: Vec<Value> = self
            .sandboxes()
            .iter()
            .filter(|(_, s)| wanted.iter().all(|(k, v)| s.metadata.get(k).and_then(Value::as_str) == Some(v)))
            .map(|(id, s)| {
                json!({
                    "templateID": TEMPLATE_ID, "alias": TEMPLATE, "sandboxID": id, "clientID": CLIENT_ID,
                    "startedAt": rfc3339(s.started), "endAt": rfc3339(s.ends), "cpuCount": CPUS,
                    "memoryMB": MEMORY_MB, "diskSizeMB": DISK_MB, "metadata": s.metadata,
                    "state": "running", "envdVersion": ENVD_VERSION,
                })
            })
            .collect();
        server::json(200, &json!(items))
    }

    async fn envd(self: Arc<Self>, id: String, req: Request) -> http::Response<Body> {
        let token = match self.sandboxes().get(&id) {
            None => {
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

    fn start(self: Arc<Self>, id: String, req: &Request) -> http::Response<Body> {
        let (mut response, tx) = server::streamed("application/connect+json");
        if req.header("content-type") != Some("application/connect+json") {
            return error(415, "a streaming call takes application/connect+json");
        }
        let body = &req.body;
        let message: Option<Value> =
            (body.len() >= 5 && body[0] == 0).then(|| serde_json::from_slice(&body[5..]).ok()).flatten();
        let Some(message) = message else {
            let end = json!({"error": {"code": "invalid_argument", "message": "the request is not one JSON envelope"}});
            tokio::spawn(async move {
                let _ = tx.send(envelope(2, end.to_string().as_bytes())).await;
            });
            return response;
        };
        let process = message.get("process").cloned().unwrap_or_default();
        let cmd = process.get("cmd").and_then(Value::as_str).unwrap_or_default().to_string();
        let args: Vec<String> = process
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(String::from).collect())
            .unwrap_or_default();
        let cwd = process.get("cwd").and_then(Value::as_str).unwrap_or("/home/user").to_string();
        let deadline = req
            .header("connect-timeout-ms")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
        let pid = {
            let mut s = self.sandboxes();
            let Some(sb) = s.get_mut(&id) else { return error(502, "The sandbox was not found") };
            sb.pids += 1;
            1000 + sb.pids
        };
        let truncated = self.mode == Some(Mode::Truncated);
        let me = Arc::clone(&self);
        tokio::spawn(async move {
            if tx.send(event(json!({"start": {"pid": pid}}))).await.is_err() {
                return;
            }
            if truncated {
                return;
            }
            let (chunks, mut rx) = tokio::sync::mpsc::channel(16);
            let run = {
                let me = Arc::clone(&me);
                let id = id.clone();
                let argv = std::iter::once(cmd).chain(args).collect();
                let process = Process { argv, cwd, deadline, ..Process::default() };
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
                if tx.send(event(e)).await.is_err() {
                    // The client went away: its process goes too, as envd's does.
                    me.backing.kill_guest(&id).await;
                    return;
                }
            }
            let end = match run.await {
                Ok(Ok(true)) => json!({}),
                Ok(Ok(false)) => {
                    json!({"error": {"code": "deadline_exceeded", "message": "context deadline exceeded"}})
                }
                Ok(Err(e)) => json!({"error": {"code": "internal", "message": e}}),
                Err(e) => json!({"error": {"code": "internal", "message": e.to_string()}}),
            };
            let _ = tx.send(envelope(2, end.to_string().as_bytes())).await;
        });
        response.headers_mut().insert("connect-accept-encoding", http::HeaderValue::from_static("identity"));
        response
    }
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

    #[test]
    fn every_mode_parses_and_ids_look_like_e2bs() {
        for (m, _) in MODES {
            assert!(Mode::parse(m).is_some(), "{m}");
        }
        assert_eq!(Mode::parse("nope"), None);
        let id = sandbox_id();
        assert!(id.len() == 20 && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    }
}
