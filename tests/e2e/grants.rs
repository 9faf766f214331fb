//! Grants end to end: the demo inventory API (`examples/broker-demo/api.py`) on
//! loopback, a daemon with a profiles file, and the published Python client. Code
//! calls the API through the broker; the API verifies the host's JWT; the caller
//! never holds the secret and neither does the sandbox.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use super::python::{python_cmd, run_script};
use super::{Daemon, callers, scratch};

/// The JWT secret the API verifies with and the daemon signs with.
pub const JWT_SECRET: &str = "demo-secret-0123456789abcdef-0123456789";

/// The demo API, stopped on drop.
pub struct DemoApi {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl DemoApi {
    /// Starts the API with `env` added.
    pub fn start(env: &[(&str, &str)]) -> DemoApi {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/broker-demo/api.py");
        let mut child = python_cmd()
            .arg(script)
            .env("DEMO_JWT_SECRET", JWT_SECRET)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the demo API starts");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first).expect("its address");
        let url = first.trim().strip_prefix("listening ").expect("listening line").to_string();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let stderr = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().expect("lock").push(l);
            }
        });
        DemoApi { child, url, lines }
    }

    /// `read(self)` once it holds at least `n` entries, or after 30 s if it never
    /// does. The API logs each call before answering it, but the thread that
    /// reads its log may still be behind a caller that has its answer.
    fn settled<T>(&self, n: usize, read: impl Fn(&DemoApi) -> Vec<T>) -> Vec<T> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let seen = read(self);
            if seen.len() >= n || std::time::Instant::now() > deadline {
                return seen;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The token ID (`jti`) of each authorised call, in order, once there are `n`.
    pub fn await_tokens(&self, n: usize) -> Vec<String> {
        self.settled(n, DemoApi::seen_tokens)
    }

    /// What the API answered, once it has answered `n` calls to a path under `prefix`.
    pub fn await_seen(&self, n: usize, prefix: &str) -> Vec<(String, String, String, u64)> {
        let under = |api: &DemoApi| api.seen().into_iter().filter(|s| s.1.starts_with(prefix)).collect::<Vec<_>>();
        self.settled(n, under);
        self.seen()
    }

    /// The token ID (`jti`) of each authorised call so far, in order.
    pub fn seen_tokens(&self) -> Vec<String> {
        self.lines
            .lock()
            .expect("lock")
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v["jti"].as_str().filter(|j| !j.is_empty()).map(str::to_string))
            .collect()
    }

    /// What the API answered so far: (method, path, subject, status).
    pub fn seen(&self) -> Vec<(String, String, String, u64)> {
        self.lines
            .lock()
            .expect("lock")
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| {
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
                (s("method"), s("path"), s("subject"), v["status"].as_u64().unwrap_or_default())
            })
            .collect()
    }
}

impl Drop for DemoApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The profiles: `inventory` for alice (JWT, advice to the caller, a batch route),
/// and `inventory-sessions`, which allows sessions.
pub fn profiles(dir: &std::path::Path, api: &str) -> std::path::PathBuf {
    let file = dir.join("grants.json");
    let text = serde_json::json!({"profiles": {
        "inventory": {
            "base_url": api,
            "allow": ["GET /items", "GET /items/*", "POST /items"],
            "allowed_callers": ["alice"],
            "token": {"type": "jwt", "secret_env": "DEMO_JWT_SECRET", "audience": "inventory", "ttl_sec": 60},
            "batch_of": {"GET /items": ["GET /items/*"]},
            "advice": "caller",
            "advice_retention": "detailed",
            "max_calls": 40
        },
        "inventory-sessions": {
            "base_url": api, "allow": ["GET /items"], "allowed_callers": ["alice"], "allow_in_sessions": true,
            "token": {"type": "jwt", "secret_env": "DEMO_JWT_SECRET", "audience": "inventory"}
        }
    }});
    std::fs::write(&file, text.to_string()).expect("grants file");
    file
}

/// A Python helper both published-client scripts call with a session open
/// without a grant: a project naming `inventory-sessions` reaches the broker for
/// its call alone, the artifact it wrote stays for the calls after it (the next
/// project holds no client), and a profile without `allow_in_sessions` is refused.
const SESSION_PROJECT: &str = r#"
def granted_project_in_session(s, tier):
    granted = """
import plimsoll_host as host
name = host.get("/items")["items"][0]["name"]
open("seen.txt", "w").write(name)
print(name)
"""
    r = s.run_project({"main.py": granted}, ["python3 main.py"], ["seen.txt"], grant_profile="inventory-sessions")
    assert r.outcome == "completed" and r.isolation == tier, r
    assert (r.steps[0].stdout, r.steps[0].exit_code) == (b"bolt\n", 0), r.steps[0]
    assert [(a.path, a.content) for a in r.artifacts] == [("seen.txt", b"bolt")], r.artifacts
    after = """
print(open("seen.txt").read())
try:
    import plimsoll_host as host
    host.get("/items")
    print("reached")
except Exception as e:
    print("refused", type(e).__name__)
"""
    r = s.run_project({"after.py": after}, ["python3 after.py"], [])
    assert r.steps[0].stdout.startswith(b"bolt\nrefused "), r.steps[0]
    c = s.run_cell('open("seen.txt").read()', "python")
    assert c.stdout == b"'bolt'\n", c
    try:
        s.run_project({"main.py": granted}, ["python3 main.py"], [], grant_profile="inventory")
        raise AssertionError("a profile without allow_in_sessions ran a project in a session")
    except PlimsollError as e:
        assert e.not_dispatched == "permission", e
        assert str(e).endswith('grant_profile "inventory" does not allow sessions; use it in a Run call, or set allow_in_sessions in the profile'), e
"#;

const SCRIPT: &str = r#"
import os
from plimsoll_client import Client
from plimsoll_client.errors import PlimsollError, UnsupportedError
url = os.environ["URL"]
alice, mallory = Client(url, token=os.environ["ALICE"]), Client(url, token=os.environ["MALLORY"])
info = alice.describe()
assert info.supports_javascript_grants and info.supports_project_grants, info

# Agent-style code: read one by one (a fan-out the advisor names), then write.
code = '''
const ids = [1, 2, 3, 4, 5, 6];
const items = await Promise.all(ids.map((id) => host.get("/items/*", [id])));
console.log(items.map((i) => i.name).join(","));
const made = await host.post("/items", { name: "flange" });
console.log(made.created_by, made.name);
try { await host.get("/admin"); } catch (e) { console.log("refused:", e.message); }
try { await host.get("/items/*", [999]); } catch (e) { console.log("status", e.status, e.body.error); }
'''
r = alice.run_javascript("(async () => {" + code + "})()", minimum_isolation="process", grant_profile="inventory")
assert r.exit_code == 0, r
assert r.stdout.decode().splitlines() == [
    "bolt,nut,washer,gear,spring,pin",
    "alice flange",
    "refused: host api call not permitted by sandbox capability: GET /admin",
    "status 404 no such item",
], r.stdout
assert r.isolation == "process" and r.record is not None, r
[f] = r.advice
assert (f.pattern, f.severity, f.remedy, f.method, f.route) == ("fan_out", "low", "batch", "GET", "/items/*"), f
assert (f.suggested_method, f.suggested_route, f.extra_calls) == ("GET", "/items", 5), f
assert f.detail == "GET /items/* was called 6 times in one run; GET /items answers in one call", f.detail
print("granted run ok")

def refused(fn, reason):
    try:
        fn()
    except PlimsollError as e:
        assert e.not_dispatched == reason, (e, e.not_dispatched)
        return str(e)
    raise AssertionError("not refused")

forbidden = refused(lambda: mallory.run_javascript("1", grant_profile="inventory"), "permission")
unknown = refused(lambda: alice.run_javascript("1", grant_profile="nope"), "permission")
assert forbidden.endswith('grant_profile "inventory" is not available to this caller'), forbidden
assert unknown.endswith('grant_profile "nope" is not available to this caller'), unknown
s = alice.open_session()
no = refused(lambda: s.run_javascript("1", grant_profile="inventory"), "permission")
assert no.endswith('grant_profile "inventory" does not allow sessions; use it in a Run call, or set allow_in_sessions in the profile'), no
r = s.run_javascript('host.get("/items").then((r) => console.log(r.items[0].name))', grant_profile="inventory-sessions")
assert (r.stdout, r.exit_code) == (b"bolt\n", 0), r
r = s.run_javascript('console.log(typeof host)')
assert r.stdout == b"undefined\n", r
granted_project_in_session(s, "process")
s.close()
print("refusals ok")

# What the sandbox can reach holds no credential: every global, the client, and a
# refused call's answer.
probe = '''
const seen = [];
for (const k of Object.getOwnPropertyNames(globalThis)) { try { seen.push(k + "=" + String(globalThis[k])); } catch (e) {} }
seen.push(JSON.stringify(Object.keys(host)), String(host.get));
try { await host.post("/items", "x".repeat(2)); } catch (e) { seen.push(e.message); }
console.log(seen.join("\\n"));
'''
r = alice.run_javascript("(async () => {" + probe + "})()", grant_profile="inventory")
text = r.stdout.decode() + r.stderr.decode()
assert os.environ["SECRET"] not in text and "Bearer" not in text and "eyJ" not in text, text
print("probe ok")
"#;

/// The demo API and a wasm daemon with its profiles, for `names` as callers.
fn granted_wasm(scratch_name: &str, names: &[&str]) -> (DemoApi, Daemon, Vec<String>, std::path::PathBuf) {
    let api = DemoApi::start(&[]);
    let dir = scratch(scratch_name);
    let (clients, tokens) = callers(&dir, names);
    let grants = profiles(&dir, &api.url);
    let d = Daemon::start(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_CLIENTS_FILE", &clients.display().to_string()),
        ("PLIMSOLL_GRANTS_FILE", &grants.display().to_string()),
        ("DEMO_JWT_SECRET", JWT_SECRET),
        ("SANDBOX_MAX_SESSIONS", "2"),
    ]);
    (api, d, tokens, dir)
}

/// The grant suite on wasm: the broker through the engine's own import.
#[test]
fn the_grant_suite_passes_on_wasm() {
    let (api, d, tokens, _) = granted_wasm("grants-suite-wasm", &["alice"]);
    let grants = super::conformance::Grants { tier: "process", in_env: "none", guard_addr: None };
    super::conformance::grants(&d, &tokens[0], &api, &grants);
}

/// The grant suite on docker under `runtime`: the broker through the run's socket,
/// whose bearer token the guest's environment holds for the run's length.
fn grant_suite_on_docker(runtime: &str, tier: &str) {
    let Some(fx) = super::docker::fixture(runtime) else { return };
    let api = DemoApi::start(&[]);
    let dir = scratch(&format!("grants-suite-{runtime}"));
    let (plugin, key) = super::docker::signed_plugin(&fx, &dir);
    let (clients, tokens) = callers(&dir, &["alice"]);
    let grants = profiles(&dir, &api.url);
    let mut env = super::docker::docker_env(&fx, &plugin, &key, runtime);
    env.push(("PLIMSOLL_CLIENTS_FILE".into(), clients.display().to_string()));
    env.push(("PLIMSOLL_GRANTS_FILE".into(), grants.display().to_string()));
    env.push(("DEMO_JWT_SECRET".into(), JWT_SECRET.into()));
    let d = super::docker::start(&env);
    let suite = super::conformance::Grants { tier, in_env: "PLIMSOLL_HOST_TOKEN", guard_addr: None };
    super::conformance::grants(&d, &tokens[0], &api, &suite);
}

#[test]
fn the_grant_suite_passes_on_docker_under_runc() {
    grant_suite_on_docker("runc", "container");
}

#[test]
fn the_grant_suite_passes_on_docker_under_runsc() {
    grant_suite_on_docker("runsc", "kernel");
}

#[test]
fn code_calls_the_demo_api_through_the_broker_and_never_holds_the_credential() {
    let (api, d, tokens, dir) = granted_wasm("grants", &["alice", "mallory"]);
    let out = run_script(
        &format!("{SESSION_PROJECT}{SCRIPT}"),
        &[("URL", &d.url()), ("ALICE", &tokens[0]), ("MALLORY", &tokens[1]), ("SECRET", JWT_SECRET)],
    );
    assert_eq!(out, "granted run ok\nrefusals ok\nprobe ok\n");

    // The API verified the host's JWT on every call and saw alice as the subject
    // (the session's granted project among them).
    let seen = api.await_seen(11, "/items");
    let items: Vec<_> = seen.iter().filter(|s| s.1.starts_with("/items")).collect();
    assert_eq!(items.len(), 11, "{seen:?}");
    assert!(items.iter().all(|s| s.2 == "alice"), "{seen:?}");
    assert!(seen.iter().all(|s| s.3 != 401), "no call arrived without a valid token: {seen:?}");

    // The metrics count calls by profile and route template, and the findings.
    let m = super::raw::get(d.metrics.as_deref().expect("metrics"), "/metrics");
    let text = String::from_utf8_lossy(&m.body).into_owned();
    for want in [
        r#"plimsoll_host_calls_total{profile="inventory",method="GET",route="/items/*"} 7"#,
        r#"plimsoll_host_calls_total{profile="inventory",method="POST",route="/items"} 2"#,
        r#"plimsoll_host_calls_total{profile="inventory-sessions",method="GET",route="/items"} 2"#,
        r#"plimsoll_advice_findings_total{profile="inventory",pattern="fan_out"} 1"#,
    ] {
        assert!(text.contains(want), "{want}\n{text}");
    }
    assert!(!text.contains("/items/1"), "never a concrete path");

    // The daemon's log: counts and the operator's findings, never the secret or a path.
    let (_, log) = d.terminate();
    let run = log
        .iter()
        .find(|l| l.contains(r#""grant_profile":"inventory""#) && l.contains("advice_findings"))
        .expect("the run's line");
    let v: serde_json::Value = serde_json::from_str(run).expect("json");
    assert_eq!((v["host_calls"].as_u64(), v["host_calls_denied"].as_u64()), (Some(8), Some(0)), "{run}");
    assert_eq!(v["call_trace"]["calls"][0]["route"], "/items/*", "{run}");
    assert!(!run.contains("/items/1") && !run.contains("flange"), "paths and bodies never reach the log: {run}");
    assert!(log.iter().all(|l| !l.contains(JWT_SECRET) && !l.contains("eyJ")), "no credential in the log");

    // The operator's report of that run, from the same log.
    let log_file = dir.join("daemon.log");
    std::fs::write(&log_file, log.join("\n")).expect("log file");
    let report = dir.join("report.html");
    let record = v["record_sha256"].as_str().expect("the run's record digest");
    let o = super::host()
        .arg("advise")
        .arg(&log_file)
        .args(["--record", &record[..12], "--out"])
        .arg(&report)
        .output()
        .expect("advise");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&report).expect("report");
    assert!(page.contains("fan_out on <code>GET /items/*</code> (remedy: batch)"), "{page}");
    assert!(page.contains("The code can use <code>GET /items</code>, which this grant opens."), "{page}");
    assert!(page.contains("<tr><th>calls</th><td><code>8</code></td></tr>"), "{page}");
    assert!(!page.contains("/items/1<") && !page.contains(JWT_SECRET));
    let o = super::host().arg("advise").arg(&log_file).args(["--trace-id", "nope"]).output().expect("advise");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no granted run with trace ID \"nope\" in the log"));
}

/// Python on the wasm provider: the CPython guest's built-in `plimsoll_host` reaches
/// the same broker through the host import, with the container client's routes and
/// errors; without a grant every call is refused; a simulation run refuses a grant.
const PYTHON_SCRIPT: &str = r#"
import os
from plimsoll_client import Client
from plimsoll_client.errors import UnsupportedError
alice = Client(os.environ["URL"], token=os.environ["ALICE"])
py = """
import plimsoll_host as host
print(",".join(host.get("/items/*", [i])["name"] for i in (1, 2)))
print(host.post("/items", {"name": "py-flange"})["created_by"])
try:
    host.get("/items/*", ["999"])
except host.HostApiError as e:
    print("status", e.status, e.body["error"])
try:
    host.delete("/items/*", [1])
except PermissionError as e:
    print(e)
"""
r = alice.run_project({"main.py": py}, ["python3 main.py"], minimum_isolation="process", grant_profile="inventory")
step = r.steps[0]
assert (r.outcome, r.isolation, step.exit_code) == ("completed", "process", 0), (r, step.stderr)
assert step.stdout.decode().splitlines() == [
    "bolt,nut",
    "alice",
    "status 404 no such item",
    "host api call not permitted by sandbox capability: DELETE /items/1",
], step.stdout
r = alice.run_project({"main.py": "import plimsoll_host as host\nhost.get('/items')"}, ["python3 main.py"])
step = r.steps[0]
assert step.exit_code == 1, step
assert step.stderr.decode().strip().endswith("PermissionError: host api call not permitted by sandbox capability: GET /items"), step.stderr
try:
    alice.run_project({"c.json": "{}"}, ["plimsoll-judge run --plant cartpole c.json"], grant_profile="inventory")
    raise AssertionError("a simulation run carried a grant")
except UnsupportedError as e:
    assert e.not_dispatched == "unsupported" and "cannot carry a grant" in str(e), e
print("python grants ok")
"#;

#[test]
fn python_on_wasm_calls_the_api_through_the_broker() {
    let (api, d, tokens, _) = granted_wasm("grants-python", &["alice"]);
    let out = run_script(PYTHON_SCRIPT, &[("URL", &d.url()), ("ALICE", &tokens[0])]);
    assert_eq!(out, "python grants ok\n");
    let seen = api.await_seen(4, "/items");
    let items: Vec<_> = seen.iter().filter(|s| s.1.starts_with("/items")).collect();
    assert_eq!(items.len(), 4, "{seen:?}");
    assert!(items.iter().all(|s| s.2 == "alice" && s.3 != 401), "the host's JWT on every call: {seen:?}");
}

#[test]
fn a_bad_profiles_file_or_a_provider_without_a_grant_path_stops_the_start() {
    let dir = scratch("grants-bad");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"profiles": {"p": {"base_url": "http://api.example.com", "allowed_callers": ["a"]}}}"#)
        .expect("write");
    let (code, err) = super::refused_start(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_INSECURE", "1"),
        ("PLIMSOLL_GRANTS_FILE", &bad.display().to_string()),
    ]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains(r#"PLIMSOLL_GRANTS_FILE: grant profile "p": base_url "http://api.example.com" uses http to a host that is not loopback; use https"#),
        "{err}"
    );
    let unset = dir.join("unset.json");
    std::fs::write(
        &unset,
        r#"{"profiles": {"p": {"base_url": "https://api.example.com", "allowed_callers": ["a"], "token": {"type": "static", "env": "NOT_SET_HERE"}}}}"#,
    )
    .expect("write");
    let (_, err) = super::refused_start(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_INSECURE", "1"),
        ("PLIMSOLL_GRANTS_FILE", &unset.display().to_string()),
    ]);
    assert!(
        err.contains("token: the environment variable NOT_SET_HERE is empty or unset; set it to the credential"),
        "{err}"
    );
    let good = dir.join("good.json");
    std::fs::write(&good, r#"{"profiles": {"p": {"base_url": "https://api.example.com", "allowed_callers": ["a"]}}}"#)
        .expect("write");
    let (_, err) = super::refused_start(&[("PLIMSOLL_GRANTS_FILE", &good.display().to_string())]);
    assert!(
        err.contains("PLIMSOLL_GRANTS_FILE: profiles are configured but the disabled provider has no credential-safe way to carry a grant; unset PLIMSOLL_GRANTS_FILE or use the wasm provider"),
        "{err}"
    );
}

/// The JWT header our broker mints, base64url: any token's first bytes.
const JWT_HEAD: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9";
/// The JWT header the demo API's token endpoint mints (for the broker plugin).
const API_JWT_HEAD: &str = "eyJhbGciOiAiSFMyNTYiLCAidHlwIjogIkpXVCJ9";

/// A Python project at the container tier: the client module, then calls by hand
/// past it, then a search of every file and the environment for a token, then a
/// pause while the test reads the container's memory from the host.
const PROJECT: &str = r#"
import json, os, socket, sys, time
import plimsoll_host as host
out = {}
out["items"] = [host.get("/items/*", [i])["name"] for i in (1, 2)]
out["by"] = host.post("/items", {"name": "py-flange"})["created_by"]
try:
    host.get("/items/*", ["404"])
except host.HostApiError as e:
    out["missing"] = [e.status, e.body["error"]]
try:
    host.delete("/items/*", [1])
except PermissionError as e:
    out["local"] = str(e)

def raw(envelope, token):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["PLIMSOLL_HOST_API"])
    body = json.dumps(envelope).encode()
    s.sendall(b"POST /call HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
              token.encode() + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(rest)["error"]

token = os.environ["PLIMSOLL_HOST_TOKEN"]
out["unlisted"] = raw({"method": "DELETE", "path": "/items/1", "body": None}, token)
out["dotted"] = raw({"method": "GET", "path": "/items/1/../../admin", "body": None}, token)
out["no_token"] = raw({"method": "GET", "path": "/items/1", "body": None}, "guess")
try:
    socket.create_connection(("127.0.0.1", API_PORT), timeout=2)
    out["direct"] = "connected"
except OSError as e:
    out["direct"] = type(e).__name__

# A header the broker attaches starts so; built here so this file does not hold it.
needle = ("Bearer " + "ey").encode()
found = []
for root, dirs, files in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "dev")]
    for f in files:
        p = os.path.join(root, f)
        try:
            with open(p, "rb") as fh:
                tail = b""
                while chunk := fh.read(1 << 16):
                    if needle in tail + chunk:
                        found.append(p)
                        break
                    tail = chunk[-len(needle):]
        except OSError:
            pass
env = "\n".join(f"{k}={v}" for k, v in os.environ.items())
out["files_with_token"] = found
out["env_has_token"] = needle.decode() in env
print(json.dumps(out, sort_keys=True), flush=True)
time.sleep(4)
"#;

const DOCKER_SCRIPT: &str = r#"
import json, os
from plimsoll_client import Client
from plimsoll_client.errors import PlimsollError
alice = Client(os.environ["URL"], token=os.environ["ALICE"])
info = alice.describe()
assert info.supports_javascript_grants and info.supports_project_grants, info
js = '''
const ids = [1, 2, 3, 4, 5, 6];
Promise.all(ids.map((id) => host.get("/items/*", [id]))).then(async (items) => {
  console.log(items.map((i) => i.name).join(","));
  const made = await host.post("/items", { name: "node-flange" });
  console.log(made.created_by);
});
'''
r = alice.run_javascript(js, grant_profile="inventory")
assert r.exit_code == 0 and r.isolation == os.environ["TIER"], r
assert r.stdout == b"bolt,nut,washer,gear,spring,pin\nalice\n", r.stdout
assert [(f.pattern, f.suggested_route) for f in r.advice] == [("fan_out", "/items")], r.advice
# The original's way: a session snippet names its grant; the session's socket
# serves it for that call only, and nothing else in the session holds a client.
s = alice.open_session(minimum_isolation=os.environ["TIER"])
r = s.run_javascript('host.get("/items").then((r) => console.log(r.items[0].name))', grant_profile="inventory-sessions")
assert (r.stdout, r.exit_code, r.isolation) == (b"bolt\n", 0, os.environ["TIER"]), r
r = s.run_javascript('console.log(typeof host)')
assert r.stdout == b"undefined\n", r
c = s.run_cell("typeof host", "javascript")
assert c.stdout == b"'undefined'\n", c
try:
    s.run_javascript("1", grant_profile="inventory")
    raise AssertionError("a profile without allow_in_sessions ran in a session")
except PlimsollError as e:
    assert e.not_dispatched == "permission" and str(e).endswith('grant_profile "inventory" does not allow sessions; use it in a Run call, or set allow_in_sessions in the profile'), e
r = s.run_javascript('host.get("/items").then((r) => console.log(r.items.length > 0))', grant_profile="inventory-sessions")
assert r.stdout == b"true\n", r
granted_project_in_session(s, os.environ["TIER"])
s.close()
r = alice.run_project({"main.py": os.environ["PROJECT"]}, ["python3 main.py"], grant_profile="inventory-vendor")
assert r.outcome == "completed" and r.isolation == os.environ["TIER"], r
print(r.steps[0].stdout.decode().strip())
assert r.steps[0].exit_code == 0, r.steps[0].stderr
"#;

/// Every process whose cgroup names container `id`: the container's own under runc;
/// under runsc the sandbox and the stubs that hold the guest's memory.
fn container_pids(id: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if std::fs::read_to_string(entry.path().join("cgroup")).is_ok_and(|c| c.contains(id)) {
            pids.push(pid);
        }
    }
    pids
}

/// Whether any resident page of `pid`'s readable mappings holds one of `needles`;
/// also the bytes read. Only pages present in memory are read (from
/// `/proc/PID/pagemap`): reading an untouched page would allocate it, and under
/// runsc that is charged to the sandbox, which the scan must not disturb.
fn memory_holds(pid: u32, needles: &[&[u8]]) -> (bool, u64) {
    use std::io::{Read as _, Seek as _, SeekFrom};
    const PAGE: u64 = 4096;
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return (false, 0) };
    let (Ok(mut mem), Ok(mut pagemap)) =
        (std::fs::File::open(format!("/proc/{pid}/mem")), std::fs::File::open(format!("/proc/{pid}/pagemap")))
    else {
        return (false, 0);
    };
    let mut read = 0u64;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else { continue };
        let mut entries = vec![0u8; ((b - a) / PAGE * 8) as usize];
        if pagemap.seek(SeekFrom::Start(a / PAGE * 8)).is_err() || pagemap.read_exact(&mut entries).is_err() {
            continue;
        }
        let present: Vec<bool> = entries
            .chunks_exact(8)
            .map(|e| u64::from_le_bytes(e.try_into().unwrap_or_default()) & (1 << 63) != 0)
            .collect();
        // Runs of present pages: a needle cannot span a page that is not there.
        let mut i = 0;
        while i < present.len() {
            if !present[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < present.len() && present[i] {
                i += 1;
            }
            let from = a + start as u64 * PAGE;
            let len = ((i - start) as u64 * PAGE).min(b - from);
            let mut buf = vec![0u8; len as usize];
            if mem.seek(SeekFrom::Start(from)).is_err() || mem.read_exact(&mut buf).is_err() {
                continue;
            }
            read += len;
            if needles.iter().any(|n| buf.windows(n.len()).any(|w| w == *n)) {
                return (true, read);
            }
        }
    }
    (false, read)
}

/// JavaScript on node calls through a JWT profile; the Python project calls through
/// `inventory-vendor`, whose credential the signed broker plugin mints at the API's
/// token endpoint.
fn granted_at_container_tier(runtime: &str, tier: &str) {
    let Some(fx) = super::docker::fixture(runtime) else { return };
    let api = DemoApi::start(&[("DEMO_CLIENT_SECRET", CLIENT_SECRET)]);
    let port = api.url.rsplit(':').next().expect("port").to_string();
    let dir = scratch(&format!("grants-{runtime}"));
    let (plugin, key) = super::docker::signed_plugin(&fx, &dir);
    let (clients, tokens) = callers(&dir, &["alice"]);
    let grants = profiles(&dir, &api.url);
    let mut file: serde_json::Value = serde_json::from_slice(&std::fs::read(&grants).expect("read")).expect("json");
    let vendor_dir = dir.join("vendor");
    std::fs::create_dir_all(&vendor_dir).expect("mkdir");
    let vendor: serde_json::Value =
        serde_json::from_slice(&std::fs::read(vendor_profiles(&vendor_dir, &api.url)).expect("read")).expect("json");
    file["profiles"]["inventory-vendor"] = vendor["profiles"]["inventory-vendor"].clone();
    std::fs::write(&grants, file.to_string()).expect("write");
    let broker_dir = dir.join("broker");
    std::fs::create_dir_all(&broker_dir).expect("mkdir");
    let (broker, vendor_key) = signed_broker(&broker_dir);
    let mut env = super::docker::docker_env(&fx, &plugin, &key, runtime);
    env.push(("PLIMSOLL_CLIENTS_FILE".into(), clients.display().to_string()));
    env.push(("PLIMSOLL_GRANTS_FILE".into(), grants.display().to_string()));
    env.push(("DEMO_JWT_SECRET".into(), JWT_SECRET.into()));
    env.push(("SANDBOX_MAX_SESSIONS".into(), "1".into()));
    env.extend(broker_env(&broker, &vendor_key, &api.url));
    let d = super::docker::start(&env);
    let owner = super::docker::owner(&d);

    // Scan the memory of every container the daemon runs while the script goes.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scanner = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut scanned = std::collections::BTreeMap::<String, u64>::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let o = Command::new("docker")
                    .args(["ps", "-q", "--no-trunc", "--filter", &format!("label=dev.plimsoll.owner={owner}")])
                    .output()
                    .expect("docker ps");
                for id in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    for pid in container_pids(id) {
                        let needles: [&[u8]; 4] = [
                            JWT_SECRET.as_bytes(),
                            CLIENT_SECRET.as_bytes(),
                            JWT_HEAD.as_bytes(),
                            API_JWT_HEAD.as_bytes(),
                        ];
                        let (hit, bytes) = memory_holds(pid, &needles);
                        assert!(!hit, "container {id} process {pid} holds the credential in memory");
                        *scanned.entry(id.to_string()).or_default() += bytes;
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            scanned
        })
    };
    let project = PROJECT.replace("API_PORT", &port);
    let out = run_script(
        &format!("{SESSION_PROJECT}{DOCKER_SCRIPT}"),
        &[("URL", &d.url()), ("ALICE", &tokens[0]), ("TIER", tier), ("PROJECT", &project)],
    );
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let scanned = scanner.join().expect("the memory scan found no credential");
    assert!(scanned.values().any(|b| *b > 1 << 20), "the project's container memory was read: {scanned:?}");

    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("the project's report");
    assert_eq!(v["items"], serde_json::json!(["bolt", "nut"]), "{v}");
    assert_eq!(v["by"], "alice", "{v}");
    assert_eq!(v["missing"], serde_json::json!([404, "no such item"]), "{v}");
    assert_eq!(v["local"], "host api call not permitted by sandbox capability: DELETE /items/1", "{v}");
    assert_eq!(
        v["unlisted"],
        serde_json::json!([
            403,
            "forbidden by sandbox capability allowlist: DELETE /items/1: it is not a granted route"
        ])
    );
    assert_eq!(
        v["dotted"],
        serde_json::json!([
            403,
            "forbidden by sandbox capability allowlist: GET /items/1/../../admin: a dot segment (. or ..) is not allowed"
        ])
    );
    assert_eq!(v["no_token"], serde_json::json!([401, "unknown or missing run token"]));
    assert_ne!(v["direct"], "connected", "the container has no network: {v}");
    assert_eq!(
        (v["files_with_token"].clone(), v["env_has_token"].clone()),
        (serde_json::json!([]), serde_json::json!(false))
    );

    // The broker counted the refused calls; the API saw only verified calls from alice.
    let (_, log) = d.terminate();
    let project_line = log
        .iter()
        .find(|l| l.contains(r#""steps_ran""#) && l.contains(r#""grant_profile":"inventory-vendor""#))
        .expect("the project's log line");
    let p: serde_json::Value = serde_json::from_str(project_line).expect("json");
    assert_eq!((p["host_calls"].as_u64(), p["host_calls_denied"].as_u64()), (Some(4), Some(2)), "{project_line}");
    let seen = api.seen();
    assert!(seen.iter().filter(|s| s.1.starts_with("/items")).all(|s| s.2 == "alice" && s.3 != 401), "{seen:?}");
    assert!(
        seen.iter().any(|s| s.1 == "/oauth/token" && s.3 == 200),
        "the plugin minted at the token endpoint: {seen:?}"
    );
    assert!(log.iter().all(|l| !l.contains(JWT_SECRET) && !l.contains(CLIENT_SECRET) && !l.contains(JWT_HEAD)));
}

#[test]
fn node_and_python_call_the_api_through_the_broker_under_runc() {
    granted_at_container_tier("runc", "container");
}

#[test]
fn node_and_python_call_the_api_through_the_broker_under_runsc() {
    granted_at_container_tier("runsc", "kernel");
}

/// The operator's long-lived client secret for the demo API's token endpoint.
const CLIENT_SECRET: &str = "demo-client-secret-7f3a9c";

/// Copies the built inventory broker plugin into `dir/plugin` and signs it with a
/// fresh vendor key; returns the plugin directory and the vendor's public key.
fn signed_broker(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let built = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugins/out/inventory-broker"));
    assert!(built.join("inventory-broker.wasm").exists(), "the broker plugin is not built: run plugins/build.sh");
    let plugin = dir.join("plugin");
    std::fs::create_dir_all(&plugin).expect("mkdir");
    for f in ["inventory-broker.wasm", "plugin.toml"] {
        std::fs::copy(built.join(f), plugin.join(f)).expect("copy");
    }
    let key = dir.join("vendor");
    let o = super::host().args(["plugin", "keygen"]).arg(&key).output().expect("keygen");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = super::host()
        .args(["plugin", "sign", "--key"])
        .arg(key.with_extension("key"))
        .arg(&plugin)
        .output()
        .expect("sign");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (plugin, key.with_extension("pub"))
}

fn broker_env(plugin: &std::path::Path, key: &std::path::Path, api: &str) -> Vec<(String, String)> {
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("plimsoll:{CLIENT_SECRET}"));
    vec![
        ("PLIMSOLL_BROKER_PLUGINS".into(), plugin.display().to_string()),
        ("PLIMSOLL_BROKER_PLUGIN_KEYS".into(), key.display().to_string()),
        ("PLIMSOLL_BROKER_ENDPOINTS".into(), format!("inventory-broker.token={api}")),
        ("PLIMSOLL_BROKER_AUTH_INVENTORY_BROKER_TOKEN".into(), format!("Basic {basic}")),
    ]
}

fn vendor_profiles(dir: &std::path::Path, api: &str) -> std::path::PathBuf {
    let file = dir.join("grants.json");
    let text = serde_json::json!({"profiles": {"inventory-vendor": {
        "base_url": api,
        "allow": ["GET /items/*", "POST /items"],
        "allowed_callers": ["alice"],
        "token": {"type": "plugin", "plugin": "inventory-broker"}
    }}});
    std::fs::write(&file, text.to_string()).expect("grants file");
    file
}

const VENDOR_SCRIPT: &str = r#"
import os
from plimsoll_client import Client
alice = Client(os.environ["URL"], token=os.environ["ALICE"])
code = '''(async () => {
  const item = await host.get("/items/*", [3]);
  const made = await host.post("/items", { name: "vendor-flange" });
  console.log(item.name, made.created_by);
  try { await host.post("/items", { name: "" }); } catch (e) { console.log(e.status, e.body.error); }
})()'''
r = alice.run_javascript(code, grant_profile="inventory-vendor")
assert r.exit_code == 0, r
assert r.stdout.decode().splitlines() == [
    "washer alice",
    "400 host api request body does not match the API's schema for POST /items: $.name: is shorter than minLength",
], r
print("vendor ok")
"#;

#[test]
fn a_signed_broker_plugin_mints_through_the_vendors_token_endpoint() {
    let api = DemoApi::start(&[("DEMO_CLIENT_SECRET", CLIENT_SECRET)]);
    let dir = scratch("grants-plugin");
    let (plugin, key) = signed_broker(&dir);
    let (clients, tokens) = callers(&dir, &["alice"]);
    let grants = vendor_profiles(&dir, &api.url);
    let mut env: Vec<(String, String)> = vec![
        ("SANDBOX_PROVIDER".into(), "wasm".into()),
        ("PLIMSOLL_CLIENTS_FILE".into(), clients.display().to_string()),
        ("PLIMSOLL_GRANTS_FILE".into(), grants.display().to_string()),
    ];
    env.extend(broker_env(&plugin, &key, &api.url));
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let d = Daemon::start(&pairs);
    assert_eq!(run_script(VENDOR_SCRIPT, &[("URL", &d.url()), ("ALICE", &tokens[0])]), "vendor ok\n");
    // One token request per run, then the calls with the token it returned.
    let seen = api.await_seen(3, "/");
    assert_eq!(
        seen.iter().map(|s| (s.0.as_str(), s.1.as_str(), s.2.as_str(), s.3)).collect::<Vec<_>>(),
        [("POST", "/oauth/token", "", 200), ("GET", "/items/3", "alice", 200), ("POST", "/items", "alice", 201)]
    );
    let (_, log) = d.terminate();
    assert!(log.iter().any(|l| l.contains(r#""msg":"broker plugin loaded""#) && l.contains("inventory-broker")));
    // Every call the plugin made is logged, without its body or the credential.
    let calls: Vec<&String> = log.iter().filter(|l| l.contains(r#""msg":"plugin http call""#)).collect();
    assert!(!calls.is_empty(), "{log:?}");
    assert!(
        calls.iter().all(|l| l.contains(r#""plugin":"inventory-broker""#)
            && l.contains(r#""endpoint":"token""#)
            && l.contains(r#""path":"/oauth/token""#)
            && l.contains(r#""status":200"#)
            && !l.contains("subject=")),
        "{calls:?}"
    );
    assert!(log.iter().all(|l| !l.contains(CLIENT_SECRET)));
}

#[test]
fn a_broker_plugin_with_a_bad_signature_or_an_untrusted_key_does_not_load() {
    let api = DemoApi::start(&[("DEMO_CLIENT_SECRET", CLIENT_SECRET)]);
    let dir = scratch("grants-plugin-bad");
    let (plugin, key) = signed_broker(&dir);
    let grants = vendor_profiles(&dir, &api.url);
    let start = |key: &std::path::Path| {
        let mut env: Vec<(String, String)> = vec![
            ("SANDBOX_PROVIDER".into(), "wasm".into()),
            ("PLIMSOLL_INSECURE".into(), "1".into()),
            ("PLIMSOLL_GRANTS_FILE".into(), grants.display().to_string()),
        ];
        env.extend(broker_env(&plugin, key, &api.url));
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        super::refused_start(&pairs)
    };
    // Another vendor's key: the signature is not one the operator trusts.
    let other = dir.join("other");
    let o = super::host().args(["plugin", "keygen"]).arg(&other).output().expect("keygen");
    assert!(o.status.success());
    let (code, err) = start(&other.with_extension("pub"));
    assert_ne!(code, Some(0));
    assert!(err.contains("PLIMSOLL_GRANTS_FILE: broker plugin: ") && err.contains("signature"), "{err}");
    // The trusted key, but a component changed after signing.
    let wasm = plugin.join("inventory-broker.wasm");
    let mut bytes = std::fs::read(&wasm).expect("read");
    bytes.push(0);
    std::fs::write(&wasm, bytes).expect("tamper");
    let (code, err) = start(&key);
    assert_ne!(code, Some(0));
    assert!(err.contains("PLIMSOLL_GRANTS_FILE: broker plugin: ") && err.contains("signature"), "{err}");
}

#[test]
fn the_broker_demo_runs_at_two_tiers() {
    let docker = super::docker::fixture("runc").is_some();
    let out = scratch("broker-demo");
    let mut cmd = python_cmd();
    cmd.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/broker-demo/demo.py"))
        .args(["--host", env!("CARGO_BIN_EXE_plimsoll-host"), "--out"])
        .arg(&out);
    if docker {
        cmd.arg("--docker");
    }
    let o = cmd.output().expect("the demo runs");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("[process] JavaScript on wasm: read 8 items in one call"), "{stdout}");
    assert!(stdout.contains("the credential stayed with the host"), "{stdout}");
    if docker {
        assert!(stdout.contains("[container] Python on docker: looked up 8 items one by one"), "{stdout}");
        assert!(out.join("report.html").exists());
    }
}

/// The session profiles for alice: `inventory-session` (one credential for the
/// session, nine calls, advice to the caller) and `inventory-per-call`.
pub(super) fn session_profiles(dir: &std::path::Path, api: &str) -> std::path::PathBuf {
    let grants = profiles(dir, api);
    let mut file: serde_json::Value = serde_json::from_slice(&std::fs::read(&grants).expect("read")).expect("json");
    let jwt =
        serde_json::json!({"type": "jwt", "secret_env": "DEMO_JWT_SECRET", "audience": "inventory", "ttl_sec": 900});
    file["profiles"]["inventory-session"] = serde_json::json!({
        "base_url": api, "allow": ["GET /items", "GET /items/*"], "allowed_callers": ["alice"],
        "allow_in_sessions": true, "max_calls": 9, "session_credential": "session", "token": jwt,
        "batch_of": {"GET /items": ["GET /items/*"]}, "advice": "caller", "advice_retention": "detailed"
    });
    file["profiles"]["inventory-per-call"] = serde_json::json!({
        "base_url": api, "allow": ["GET /items/*"], "allowed_callers": ["alice"],
        "allow_in_sessions": true, "token": jwt
    });
    std::fs::write(&grants, file.to_string()).expect("write");
    grants
}

/// A session opened with a grant profile, on the daemon `d` serves: every cell
/// reaches the broker (Python through `plimsoll_host`, JavaScript through the
/// client installed in its interpreter), each call has its own trace and advice,
/// the profile's call budget counts across the session's calls (refused per call
/// past it, the session lives on), the credential is minted once per session or
/// per call as the profile says, and a session opened without a grant installs
/// no client. `reach`: how the daemon's sessions reach the broker.
pub(super) fn session_grants_on(d: Daemon, api: &DemoApi, token: &str, reach: Reach) {
    use plimsoll_client::{Client, Options, Session, SessionOptions};
    let c = Client::new(&d.url(), Some(token.to_string())).expect("client");
    /// A cell's stdout and stderr, and its advice.
    async fn cell(s: &Session, language: &str, code: &str) -> (String, Vec<plimsoll_core::wire::AdviceFinding>) {
        let r = s.run_cell(language, code, &[], &Options::default()).await.expect("answered").cell.expect("cell");
        (String::from_utf8_lossy(&r.stdout).into_owned() + &String::from_utf8_lossy(&r.stderr), r.advice)
    }
    // `calls`: how many authorised calls the API has answered by now.
    let jtis = |from: usize, calls: usize| {
        let mut ids: Vec<String> = api.await_tokens(from + calls).into_iter().skip(from).collect();
        ids.dedup();
        ids
    };
    super::rt().block_on(async {
        let granted = SessionOptions { grant_profile: Some("inventory-session".into()), ..SessionOptions::default() };
        let s = c.open_session(&granted).await.expect("open with a grant");
        let (out, advice) =
            cell(&s, "python", "import plimsoll_host as host\nhost.get('/items')['items'][0]['name']").await;
        assert_eq!((out.as_str(), advice.len()), ("'bolt'\n", 0));
        let (out, advice) = cell(&s, "python", "[host.get('/items/*', [i])['name'] for i in range(1, 7)]").await;
        assert_eq!(out, "['bolt', 'nut', 'washer', 'gear', 'spring', 'pin']\n");
        let found: Vec<_> = advice.iter().map(|f| (f.pattern.as_str(), f.suggested_route.as_str())).collect();
        assert_eq!(found, [("fan_out", "/items")], "the cell's own calls are advised on");
        let (out, _) = cell(&s, "javascript", "host.get('/items/*', [2]).then((i) => i.name)").await;
        assert_eq!(out, "'nut'\n", "JavaScript reaches the broker through the preloaded client");
        let snippet = "host.get('/items/*', [4]).then((i) => console.log(i.name))";
        let r = s.run_javascript(snippet, &Options::default()).await.expect("answered").javascript.expect("js");
        assert_eq!(r.stdout, b"gear\n", "a snippet holds the grant too (the budget's ninth call)");
        let (out, _) = cell(
            &s,
            "python",
            "try:\n    host.get('/items')\nexcept host.HostApiError as e:\n    print(e.status, e.body['error'])",
        )
        .await;
        assert_eq!(out, "429 host api call budget for this session is exhausted (9 calls)\n");
        let (out, _) = cell(&s, "javascript", "host.get('/items').catch((e) => e.status)").await;
        assert_eq!(out, "429\n", "refused per call in every language");
        assert_eq!(cell(&s, "python", "1 + 1").await.0, "2\n", "the session lives on");
        assert_eq!(jtis(0, 9).len(), 1, "one credential for the whole session: {:?}", api.seen_tokens());
        s.close().await.expect("close");

        let before = api.seen_tokens().len();
        let per_call = SessionOptions { grant_profile: Some("inventory-per-call".into()), ..SessionOptions::default() };
        let s = c.open_session(&per_call).await.expect("open with a per-call grant");
        for _ in 0..2 {
            let (out, _) = cell(&s, "python", "import plimsoll_host as host\nhost.get('/items/*', [3])['name']").await;
            assert_eq!(out, "'washer'\n");
        }
        // A project's steps hold the session's grant as its cells do.
        let project = plimsoll_core::wire::ProjectRun {
            files: vec![plimsoll_core::wire::ProjectFile {
                path: "main.py".into(),
                content: "import plimsoll_host as host\nprint(host.get('/items/*', [5])['name'])\n".into(),
            }],
            steps: vec!["python3 main.py".into()],
            ..Default::default()
        };
        let req = plimsoll_core::wire::RunRequest {
            protocol: plimsoll_core::protocol::NUMBER,
            project: Some(project),
            ..Default::default()
        };
        let p = s.call(req).await.expect("answered").project.expect("a project result");
        assert_eq!(String::from_utf8_lossy(&p.steps[0].stdout), "spring\n", "{p:?}");
        assert_eq!(jtis(before, 3).len(), 3, "a credential per call: {:?}", api.seen_tokens());
        s.close().await.expect("close");

        // Opened without one: no client is installed. On docker and openshell,
        // where a caller who may name a session profile in its calls gets the
        // socket (or the relay to it) from the open, the socket serves nothing
        // between granted calls; e2b's sandbox gets the client only for a call
        // that names a grant.
        let s = c.open_session(&SessionOptions::default()).await.expect("open without");
        assert_eq!(cell(&s, "javascript", "typeof host").await.0, "'undefined'\n");
        let (out, _) = cell(
            &s,
            "python",
            "try:\n    import plimsoll_host\n    plimsoll_host.get('/items')\nexcept (ImportError, PermissionError) as e:\n    print(type(e).__name__, e)",
        )
        .await;
        let want = match reach {
            Reach::Guard => "ModuleNotFoundError No module named 'plimsoll_host'\n",
            Reach::Process | Reach::Socket | Reach::Relay => {
                "PermissionError host api call not permitted by sandbox capability: GET /items\n"
            }
        };
        assert_eq!(out, want);
        if matches!(reach, Reach::Socket | Reach::Relay) {
            let (out, _) = cell(
                &s,
                "python",
                "status, _, body = plimsoll_host._over_socket('GET', '/items', None)\nprint(status, body.decode())",
            )
            .await;
            assert_eq!(out, "503 {\"error\":\"no granted call of this session is running\"}\n");
        }
        s.close().await.expect("close");
    });
    let seen = api.seen();
    assert!(seen.iter().all(|x| x.2 == "alice" && x.3 != 401), "{seen:?}");

    // Each call's trace is its own line in the daemon's log.
    let (_, log) = d.terminate();
    let fan_out = log
        .iter()
        .find(|l| l.contains(r#""op":"SessionRun""#) && l.contains("advice_findings"))
        .expect("the fan-out cell's line");
    let v: serde_json::Value = serde_json::from_str(fan_out).expect("json");
    assert_eq!((v["grant_profile"].as_str(), v["host_calls"].as_u64()), (Some("inventory-session"), Some(6)), "{v}");
    assert!(log.iter().all(|l| !l.contains(JWT_SECRET) && !l.contains("eyJ")), "no credential in the log");
}

/// How a daemon's sessions reach the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reach {
    /// In-process (wasm): the host's own import.
    Process,
    /// A socket mounted into the session's container (docker).
    Socket,
    /// The host's guard, from a remote sandbox (e2b).
    Guard,
    /// The host's relay, into a remote sandbox (openshell).
    Relay,
}

fn session_grant_at_container_tier(runtime: &str) {
    let Some(fx) = super::docker::fixture(runtime) else { return };
    let api = DemoApi::start(&[]);
    let dir = scratch(&format!("session-grants-{runtime}"));
    let (plugin, key) = super::docker::signed_plugin(&fx, &dir);
    let (clients, tokens) = callers(&dir, &["alice"]);
    let grants = session_profiles(&dir, &api.url);
    let mut env = super::docker::docker_env(&fx, &plugin, &key, runtime);
    env.push(("PLIMSOLL_CLIENTS_FILE".into(), clients.display().to_string()));
    env.push(("PLIMSOLL_GRANTS_FILE".into(), grants.display().to_string()));
    env.push(("DEMO_JWT_SECRET".into(), JWT_SECRET.into()));
    env.push(("SANDBOX_MAX_SESSIONS".into(), "2".into()));
    session_grants_on(super::docker::start(&env), &api, &tokens[0], Reach::Socket);
}

#[test]
fn a_wasm_session_opened_with_a_grant_reaches_the_broker_from_every_cell() {
    let api = DemoApi::start(&[]);
    let dir = scratch("session-grants-wasm");
    let (clients, tokens) = callers(&dir, &["alice"]);
    let grants = session_profiles(&dir, &api.url);
    let d = Daemon::start(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_CLIENTS_FILE", &clients.display().to_string()),
        ("PLIMSOLL_GRANTS_FILE", &grants.display().to_string()),
        ("DEMO_JWT_SECRET", JWT_SECRET),
        ("SANDBOX_MAX_SESSIONS", "2"),
    ]);
    session_grants_on(d, &api, &tokens[0], Reach::Process);
}

#[test]
fn a_docker_session_opened_with_a_grant_reaches_the_broker_from_every_cell_under_runc() {
    session_grant_at_container_tier("runc");
}

#[test]
fn a_docker_session_opened_with_a_grant_reaches_the_broker_from_every_cell_under_runsc() {
    session_grant_at_container_tier("runsc");
}
