//! Grants end to end: the demo inventory API (`examples/broker-demo/api.py`) on
//! loopback, a daemon with a profiles file, and the published Python client. Code
//! calls the API through the broker; the API verifies the host's JWT; the caller
//! never holds the secret and neither does the sandbox.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use super::python::{python, run_script};
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
        let mut child = Command::new(python())
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
            "base_url": api, "allow": ["GET /items"], "allowed_callers": ["alice"], "allow_in_sessions": true
        }
    }});
    std::fs::write(&file, text.to_string()).expect("grants file");
    file
}

const SCRIPT: &str = r#"
import os
from plimsoll_client import Client
from plimsoll_client.errors import PlimsollError, UnsupportedError
url = os.environ["URL"]
alice, mallory = Client(url, token=os.environ["ALICE"]), Client(url, token=os.environ["MALLORY"])
info = alice.describe()
assert info.supports_javascript_grants and not info.supports_project_grants, info

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
yes = refused(lambda: s.run_javascript("1", grant_profile="inventory-sessions"), "unsupported")
assert yes.endswith('the wasm provider\'s sessions cannot carry a grant; use grant_profile "inventory-sessions" in a Run call'), yes
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

#[test]
fn code_calls_the_demo_api_through_the_broker_and_never_holds_the_credential() {
    let api = DemoApi::start(&[]);
    let dir = scratch("grants");
    let (clients, tokens) = callers(&dir, &["alice", "mallory"]);
    let grants = profiles(&dir, &api.url);
    let d = Daemon::start(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_CLIENTS_FILE", &clients.display().to_string()),
        ("PLIMSOLL_GRANTS_FILE", &grants.display().to_string()),
        ("DEMO_JWT_SECRET", JWT_SECRET),
        ("SANDBOX_MAX_SESSIONS", "2"),
    ]);
    let out = run_script(
        SCRIPT,
        &[("URL", &d.url()), ("ALICE", &tokens[0]), ("MALLORY", &tokens[1]), ("SECRET", JWT_SECRET)],
    );
    assert_eq!(out, "granted run ok\nrefusals ok\nprobe ok\n");

    // The API verified the host's JWT on every call and saw alice as the subject.
    let seen = api.seen();
    let items: Vec<_> = seen.iter().filter(|s| s.1.starts_with("/items")).collect();
    assert_eq!(items.len(), 9, "{seen:?}");
    assert!(items.iter().all(|s| s.2 == "alice"), "{seen:?}");
    assert!(seen.iter().all(|s| s.3 != 401), "no call arrived without a valid token: {seen:?}");

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
