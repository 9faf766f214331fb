//! The provider conformance suite, written once: what every backend that runs
//! snippets and projects must do through a daemon, checked with the Rust client
//! and the published Python client (which recomputes every record and checks
//! every tier). A backend adds one line: its [`Backend`] and a daemon serving it.
//! Projects are `python3 FILE` steps, which every backend runs (the wasm provider
//! runs nothing else). Backend-specific walls (escape probes, bombs, a sandbox
//! removed mid-run) are each backend's own suite's. The grant suite ([`grants`])
//! is written once too, for every backend that carries grants (wasm, docker
//! under runc and runsc, e2b, dockercloud), on a daemon with the demo API's
//! profiles; a backend adds one line with its [`Grants`].

use plimsoll_client::Client;
use plimsoll_core::Floor;

use super::{Daemon, rt};

/// What a backend states about itself.
pub(super) struct Backend<'a> {
    /// Its name on the wire.
    pub provider: &'a str,
    /// The tier it proves.
    pub tier: &'a str,
    /// How its records name what ran (`docker-image:sha256:`, `e2b-template:`).
    pub environment: &'a str,
    /// A floor above its tier, refused before dispatch (none above `vm`).
    pub above: Option<Floor>,
    /// The bytes each output stream keeps.
    pub output_cap: usize,
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The suite against `d`, whose callers present `token`: the shared checks
/// (`plimsoll-conformance`, which `plimsoll-host plugin check` runs too), then the
/// published Python client.
pub(super) fn suite(d: &Daemon, token: &str, b: &Backend<'_>) {
    let client = Client::new(&d.url(), Some(token.into())).expect("client");
    let name = b.provider;
    let expected = plimsoll_conformance::Expected {
        provider: b.provider.into(),
        tier: b.tier.into(),
        environment: b.environment.into(),
        above: b.above,
        output_cap: b.output_cap,
    };
    let checks = rt().block_on(plimsoll_conformance::run(&client, &expected));
    let failed: Vec<String> = checks.iter().filter(|c| c.outcome.is_err()).map(|c| c.line()).collect();
    assert!(failed.is_empty(), "{name}: {failed:#?}");

    // The published Python client, which recomputes every record and checks every tier.
    let above = b.above.map(|f| f.as_str().to_string()).unwrap_or_default();
    let o = super::python::python_cmd()
        .args(["-c", PY_SCRIPT])
        .env("URL", d.url())
        .env("TOKEN", token)
        .env("PROVIDER", name)
        .env("TIER", b.tier)
        .env("ENVIRONMENT", b.environment)
        .env("ABOVE", above)
        .output()
        .expect("python");
    assert!(o.status.success(), "{name}: {}\n{}", text(&o.stdout), text(&o.stderr));
    assert_eq!(text(&o.stdout), "python client ok\n", "{name}");
}

/// The published client against any backend.
const PY_SCRIPT: &str = r#"
import os
import plimsoll_client
from plimsoll_client import Client
from plimsoll_client.errors import InsufficientIsolationError
assert plimsoll_client.__version__ == "0.23.0"
provider, tier, above = os.environ["PROVIDER"], os.environ["TIER"], os.environ["ABOVE"]
c = Client(os.environ["URL"], token=os.environ["TOKEN"])
info = c.describe()
assert (info.provider, info.isolation) == (provider, tier), info
r = c.run_javascript("console.log(6*7)", minimum_isolation=tier)
assert (r.stdout, r.exit_code, r.isolation) == (b"42\n", 0, tier), r
assert r.record.environment.startswith(os.environ["ENVIRONMENT"]), r.record
p = c.run_project({"a.py": "open('out.txt', 'w').write(str(6*7) + '\\n')", "b.py": "print(open('b.txt').read(), end='')",
                   "b.txt": "hi"}, ["python3 a.py", "python3 b.py"], ["out.txt"], minimum_isolation=tier)
assert p.outcome == "completed" and [s.exit_code for s in p.steps] == [0, 0], p
assert p.steps[1].stdout == b"hi" and p.artifacts[0].content == b"42\n", p
if info.supports_sessions:
    with c.open_session(minimum_isolation=tier) as s:
        s.run_cell("x = 41")
        cell = s.run_cell("print(x + 1)")
        assert (cell.stdout, cell.isolation) == (b"42\n", tier), cell
if info.supports_module:
    m = c.run_module("vanderpol", [[1.0, 2.0, 0.0], [2.0, 2.0, 0.0]], end_time=1.0, step=0.01, minimum_isolation=tier)
    assert (m.outcome, [r.status for r in m.runs], m.isolation) == ("completed", [100, 100], tier), m
if above:
    try:
        c.run_javascript("1", minimum_isolation=above)
        raise AssertionError("a floor above the tier ran")
    except InsufficientIsolationError as e:
        assert e.not_dispatched == "isolation", e
print("python client ok")
"#;

/// What a backend's granted runs show.
pub(super) struct Grants<'a> {
    /// The tier its granted runs state.
    pub tier: &'a str,
    /// The credentials a granted run's environment holds, by name (`none`): the
    /// docker socket's token, the guard credential where no proxy sets it.
    pub in_env: &'a str,
    /// The guard's own address, where the guest holds its guard credential.
    pub guard_addr: Option<&'a str>,
}

/// The grant suite against `d`, whose caller `alice` may use the demo API
/// `api`'s profile `inventory`: every call the API saw came from alice with the
/// host's credential, which no log line holds.
pub(super) fn grants(d: &Daemon, alice: &str, api: &super::grants::DemoApi, g: &Grants<'_>) {
    let vars = [("URL", d.url()), ("ALICE", alice.to_string()), ("TIER", g.tier.into()), ("IN_ENV", g.in_env.into())];
    let vars: Vec<(&str, &str)> =
        vars.iter().map(|(k, v)| (*k, v.as_str())).chain(g.guard_addr.map(|a| ("GUARD_ADDR", a))).collect();
    assert_eq!(super::python::run_script(GRANT_SCRIPT, &vars).trim(), "ok");
    let seen = api.await_seen(4, "/items");
    let items: Vec<_> = seen.iter().filter(|s| s.1.starts_with("/items")).collect();
    assert_eq!(items.len(), 4, "{seen:?}");
    assert!(items.iter().all(|s| s.2 == "alice" && s.3 != 401), "{seen:?}");
    assert!(
        d.log().iter().all(|l| !l.contains("crg_") && !l.contains(super::grants::JWT_SECRET) && !l.contains("eyJ")),
        "a credential was logged"
    );
}

/// The grant suite through the published client: JavaScript and Python reach the
/// demo API through the broker (whatever way the backend gives them), a route
/// outside the grant is refused in the sandbox, the guest's environment holds
/// exactly the credentials `IN_ENV` names (none of the API's), a guard
/// credential the guest held is refused once its run has ended, and a run
/// without a grant has no client.
const GRANT_SCRIPT: &str = r#"
import os
from plimsoll_client import Client
alice = Client(os.environ["URL"], token=os.environ["ALICE"])
info = alice.describe()
assert info.supports_javascript_grants and info.supports_project_grants, info
js = '''
Promise.all([1, 2].map((id) => host.get("/items/*", [id]))).then(async (items) => {
  console.log(items.map((i) => i.name).join(","));
  const made = await host.post("/items", { name: "flange" });
  console.log(made.created_by);
  try { await host.get("/admin"); } catch (e) { console.log("refused:", e.message); }
  // The in-process engine has no environment at all.
  const vars = typeof process === "undefined" ? {} : process.env;
  const env = Object.entries(vars).filter(([k, v]) => v.includes("crg_") || v.includes("eyJ") || k === "PLIMSOLL_HOST_TOKEN");
  console.log("credential in env:", env.map(([k]) => k).join(",") || "none");
  console.error(vars.PLIMSOLL_HOST_GUARD_TOKEN || "");
});
'''
r = alice.run_javascript(js, grant_profile="inventory")
assert r.exit_code == 0 and r.isolation == os.environ["TIER"], r
want = "bolt,nut\nalice\nrefused: host api call not permitted by sandbox capability: GET /admin\ncredential in env: %s\n" % os.environ["IN_ENV"]
assert r.stdout == want.encode(), (r.stdout, r.stderr)
if os.environ["IN_ENV"] == "PLIMSOLL_HOST_GUARD_TOKEN":
    # The guest's guard credential opened the guard to that run only: it ended.
    import http.client
    credential = r.stderr.decode().strip()
    assert credential.startswith("crg_"), r.stderr
    host, port = os.environ["GUARD_ADDR"].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", "/v1/guard", body=b'{"method":"GET","path":"/items","body":null}',
                 headers={"X-Plimsoll-Guard": credential, "Content-Type": "application/json"})
    answer = conn.getresponse()
    assert answer.status == 401, (answer.status, answer.read())
project = '''
import plimsoll_host as host
print(host.get("/items")["items"][0]["name"])
try:
    host.delete("/items/*", [1])
except PermissionError as e:
    print(e)
'''
r = alice.run_project({"main.py": project}, ["python3 main.py"], grant_profile="inventory")
assert r.outcome == "completed" and r.steps[0].exit_code == 0 and r.isolation == os.environ["TIER"], (r, r.steps[0].stderr)
assert r.steps[0].stdout == b"bolt\nhost api call not permitted by sandbox capability: DELETE /items/1\n", r.steps[0].stdout
r = alice.run_javascript("console.log(typeof host)")
assert r.stdout == b"undefined\n", r
print("ok")
"#;

#[test]
fn the_wasm_provider_passes_the_suite_at_tier_process() {
    let (d, token) = super::wasm_daemon("conformance-wasm", "suite", &[]);
    let backend = Backend {
        provider: "wasm",
        tier: "process",
        environment: "quickjs-wasm:sha256:",
        above: Some(Floor::Container),
        output_cap: plimsoll_core::limits::OUTPUT_CAP_BYTES,
    };
    suite(&d, &token, &backend);
}
