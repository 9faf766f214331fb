//! The e2b provider end to end: `plimsoll-host serve` with the signed e2b plugin
//! against the e2b fake (`plimsoll-fake e2b`, backed by local containers), using
//! exactly the settings the fake prints. The conformance suite at tier vm; the
//! operator's cap on the tier; every misbehaviour the fake can show, refused; and
//! no credential in the log or an answer.

use plimsoll_client::{Client, Options, SessionOptions};
use plimsoll_core::wire::SessionEnd;
use plimsoll_core::{Floor, Reason};

use super::fakes::{Fake, daemon_env, for_sessions, pairs, settle};
use super::session_suite::{self, Target};
use super::{Daemon, refused_start, rt, scratch};

pub(super) const TOKEN: &str = "e2b-suite-token-e2b-suite-token-e2b-0123456";

/// The daemon's settings for `fake` with the plugin signed in `dir`, and `extra`.
pub(super) fn env(fake: &Fake, dir: &std::path::Path, extra: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
    daemon_env(fake, "e2b", dir, TOKEN, extra)
}

#[test]
fn the_conformance_suite_passes_against_the_e2b_fake_at_tier_vm() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let dir = scratch("e2b");
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let d = Daemon::start(&pairs(&env));
    let backend = super::conformance::Backend {
        provider: "e2b",
        tier: "vm",
        environment: "e2b-template:base",
        above: None,
        output_cap: 1 << 20,
    };
    super::conformance::suite(&d, TOKEN, &backend);
    // Every sandbox was deleted, on every path (the timed-out ones included).
    assert_eq!(fake.sandboxes(), 0, "sandboxes left behind");
    // The host held the API key and every sandbox's access token: neither is in the
    // log, whose every call line names the endpoint, never a secret.
    let log = d.log();
    let key = fake.get("E2B_API_KEY");
    assert!(log.iter().all(|l| !l.contains(key) && !l.contains("envdAccessToken")), "a credential was logged");
    assert!(log.iter().any(|l| l.contains(r#""msg":"plugin http call""#) && l.contains(r#""endpoint":"envd""#)));
}

/// The session conformance suite against the e2b fake: the agent, attached by
/// envd in the sandbox, keeps the interpreters, sweeps between calls and walks
/// the storage; the sandbox is read back before every call and deleted with the
/// session.
#[test]
fn the_session_suite_passes_against_the_e2b_fake_at_tier_vm() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let dir = scratch("e2b-sessions");
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let (env, tokens) = for_sessions(env, &dir);
    let d = Daemon::start(&pairs(&env));
    session_suite::run(&Target::full(d.url(), tokens, "e2b", "vm"));
    // Every session's sandbox went with its close.
    assert_eq!(settle(&fake, 0), 0, "sandboxes left behind");
}

/// A daemon for `fake` with one session allowed; its callers present [`TOKEN`].
fn session_daemon(fake: &Fake, name: &str) -> Option<Daemon> {
    let dir = scratch(name);
    let env = env(fake, &dir, &[("SANDBOX_MAX_SESSIONS", "1")])?;
    Some(Daemon::start(&pairs(&env)))
}

/// A session's sandbox that changes at the vendor after the open ends the
/// session as `sandbox_changed` before the next call runs, and is deleted.
#[test]
fn a_session_whose_sandbox_changes_ends_before_the_next_call_runs() {
    let Some(fake) = Fake::start("e2b", Some("drift")) else { return };
    let Some(d) = session_daemon(&fake, "e2b-drift") else { return };
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    let s = rt.block_on(client.open_session(&SessionOptions::default())).expect("open");
    let r = rt.block_on(s.run_cell("javascript", "6 * 7", &[], &Options::default())).expect("first call");
    assert_eq!(r.cell.expect("cell").stdout, b"42\n");
    let e = rt.block_on(s.run_cell("javascript", "1", &[], &Options::default())).expect_err("changed");
    match &e {
        plimsoll_client::Error::SessionEnded { end, detail, .. } => {
            assert_eq!(*end, SessionEnd::SandboxChanged, "{detail}");
            assert!(
                detail.contains("the session's e2b sandbox changed since it was opened (the sandbox allows internet access); nothing ran"),
                "{detail}"
            );
        }
        other => panic!("expected the session to have ended: {other:?}"),
    }
    assert!(!e.may_have_run(), "{e}");
    assert_eq!(rt.block_on(s.close()).expect("close").ended, SessionEnd::SandboxChanged);
    assert_eq!(settle(&fake, 0), 0, "the changed sandbox was deleted");
}

/// An idle session's sandbox is paused at E2B (its container frozen), and the
/// next call resumes it with the agent and the kept interpreter as they were.
#[test]
fn an_idle_e2b_session_is_paused_and_its_next_call_resumes_it() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let dir = scratch("e2b-pause");
    let Some(env) = env(&fake, &dir, &[("SANDBOX_MAX_SESSIONS", "1"), ("SANDBOX_SESSION_IDLE", "1s")]) else {
        return;
    };
    let d = Daemon::start(&pairs(&env));
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    let s = rt.block_on(client.open_session(&SessionOptions::default())).expect("open");
    let r = rt.block_on(s.run_cell("javascript", "globalThis.kept = 41", &[], &Options::default())).expect("cell");
    assert_eq!(r.cell.expect("cell").exit_code, 0);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while fake.paused() == 0 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(fake.paused(), 1, "the idle session's sandbox was paused");
    assert!(d.log().iter().any(|l| l.contains(r#""msg":"session suspended""#)), "the log says so");
    let r = rt.block_on(s.run_cell("javascript", "kept + 1", &[], &Options::default())).expect("resumed");
    assert_eq!(r.cell.expect("cell").stdout, b"42\n", "the kept interpreter lived through the pause");
    assert_eq!(fake.paused(), 0, "resumed");
    rt.block_on(s.close()).expect("close");
    assert_eq!(settle(&fake, 0), 0, "the session's sandbox was deleted");
}

/// A granted run on e2b: its sandbox's only way out is the host's guard (the
/// fake's proxy sets the run's credential on the way, as E2B's does), and the
/// broker holds the API's credential; neither is in the sandbox or the log.
#[test]
fn a_granted_e2b_run_reaches_the_api_through_the_guard() {
    let carried = super::fakes::Carried::Guard { url_var: "E2B_GUARD_URL", in_guest: false };
    super::fakes::a_granted_run_reaches_the_api("e2b", "vm", carried, TOKEN);
}

/// A session opened with a grant on e2b: its sandbox is created with the guard's
/// rule and the session's own credential, which the host serves only while a
/// call runs; every cell and snippet reaches the broker (the shared session
/// grant suite), and a session opened without one installs no client.
#[test]
fn an_e2b_session_opened_with_a_grant_reaches_the_broker_from_every_cell() {
    let sessions = [("SANDBOX_MAX_SESSIONS", "2")];
    let Some(g) = super::fakes::guarded("e2b", (Some("E2B_GUARD_URL"), None), TOKEN, &sessions) else { return };
    super::grants::session_grants_on(g.daemon, &g.api, &g.alice, super::grants::Reach::Guard);
    assert_eq!(settle(&g.fake, 0), 0, "the sessions' sandboxes were deleted");
}

/// The original's way on e2b: a session opened without a grant, whose snippets
/// and project name one. The guard's rule is set for that call with a fresh
/// credential and taken off after, so between calls the sandbox reaches nothing
/// and no process holds a client.
#[test]
fn an_e2b_session_call_naming_its_grant_opens_the_guard_for_that_call_alone() {
    let sessions = [("SANDBOX_MAX_SESSIONS", "2")];
    let Some(g) = super::fakes::guarded("e2b", (Some("E2B_GUARD_URL"), None), TOKEN, &sessions) else { return };
    let script = r#"
import os
from plimsoll_client import Client
alice = Client(os.environ["URL"], token=os.environ["ALICE"])
s = alice.open_session()
for i, name in [(3, "washer"), (1, "bolt")]:
    r = s.run_javascript('host.get("/items/*", [%d]).then((i) => console.log(i.name))' % i, grant_profile="inventory-per-call")
    assert (r.stdout, r.exit_code, r.isolation) == (name.encode() + b"\n", 0, "vm"), r
    r = s.run_javascript('console.log(typeof host)')
    assert r.stdout == b"undefined\n", r
    c = s.run_cell("fetch('https://guard.e2b.test/v1/guard', {method: 'POST', body: '{}'}).then(() => 'reached', () => 'failed')", "javascript")
    assert c.stdout == b"'failed'\n", c
# A project naming its grant: its steps reach the broker for that call alone, and
# what they write stays for the next call, which holds no client.
granted = '''
import plimsoll_host as host
name = host.get("/items/*", [2])["name"]
open("seen.txt", "w").write(name)
print(name)
'''
r = s.run_project({"main.py": granted}, ["python3 main.py"], ["seen.txt"], grant_profile="inventory-per-call")
assert (r.outcome, r.isolation, r.steps[0].stdout) == ("completed", "vm", b"nut\n"), r
assert [(a.path, a.content) for a in r.artifacts] == [("seen.txt", b"nut")], r.artifacts
after = '''
import os
print(open("seen.txt").read(), "PLIMSOLL_HOST_GUARD" in os.environ)
try:
    import plimsoll_host
    print("client")
except ImportError:
    print("no client")
'''
r = s.run_project({"after.py": after}, ["python3 after.py"], [])
assert r.steps[0].stdout == b"nut False\nno client\n", r.steps[0]
s.close()
print("ok")
"#;
    let out = super::python::run_script(script, &[("URL", &g.daemon.url()), ("ALICE", &g.alice)]);
    assert_eq!(out.trim(), "ok");
    let log = g.daemon.log();
    let updates = log.iter().filter(|l| l.contains(r#""method":"PUT""#) && l.contains(r#""status":204"#)).count();
    assert_eq!(updates, 6, "the rule set and taken off for each of three granted calls");
    let seen = g.api.seen();
    assert_eq!(seen.iter().filter(|s| s.1.starts_with("/items") && s.2 == "alice").count(), 3, "{seen:?}");
    assert!(log.iter().all(|l| !l.contains("crg_")), "a credential was logged");
    assert_eq!(settle(&g.fake, 0), 0, "the session's sandbox was deleted");
}

/// A guard's rule that will not come off after a session call that named its
/// grant (fake mode `sticky-rule`): the call's answer stands (its credential is
/// closed already), the session ends `sandbox_changed`, and its sandbox is
/// deleted.
#[test]
fn a_guard_rule_that_will_not_come_off_ends_the_session() {
    let sessions = [("SANDBOX_MAX_SESSIONS", "2")];
    let guard = (Some("E2B_GUARD_URL"), Some("sticky-rule"));
    let Some(g) = super::fakes::guarded("e2b", guard, TOKEN, &sessions) else { return };
    let out = g.as_alice(
        r#"
from plimsoll_client import SessionEndedError
s = alice.open_session()
r = s.run_javascript('host.get("/items/*", [3]).then((i) => console.log(i.name))', grant_profile="inventory-per-call")
print(r.stdout.decode().strip())
try:
    s.run_javascript("console.log(1)")
    raise AssertionError("the session lived on")
except SessionEndedError as e:
    print(type(e).__name__, e)
"#,
    );
    assert!(out.starts_with("washer\n"), "the granted call's answer stands: {out}");
    let want = "the guard's rule could not be taken off the session's e2b sandbox after a granted call";
    assert!(out.contains("SessionEndedError") && out.contains("sandbox_changed") && out.contains(want), "{out}");
    assert!(g.daemon.log().iter().all(|l| !l.contains("crg_")), "a credential was logged");
    assert_eq!(settle(&g.fake, 0), 0, "the ended session's sandbox was deleted");
}

#[test]
fn the_operators_cap_lowers_the_tier_and_a_floor_above_it_creates_nothing() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let dir = scratch("e2b-cap");
    let Some(env) = env(&fake, &dir, &[("SANDBOX_E2B_MAX_TIER", "container")]) else { return };
    let d = Daemon::start(&pairs(&env));
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    let desc = rt.block_on(client.describe()).expect("describe");
    assert_eq!((desc.sandbox.as_str(), desc.isolation.as_str()), ("e2b", "container"));
    let r = rt.block_on(client.run_javascript("console.log(1)", &Options::default())).expect("run");
    assert_eq!(r.record.expect("record").isolation, "container");
    let creates = || d.log().iter().filter(|l| l.contains(r#""path":"/sandboxes","status":201"#)).count();
    let before = creates();
    let kernel = Options { floor: Some(Floor::Kernel), ..Options::default() };
    let err = rt.block_on(client.run_javascript("console.log(1)", &kernel)).expect_err("kernel floor");
    assert_eq!(err.not_dispatched(), Some(Reason::Isolation), "{err}");
    assert_eq!(creates(), before, "a sandbox was created for a refused run");
}

/// Starts a daemon against the fake misbehaving as `mode`; returns why it refused to start.
fn refused(mode: &str) -> Option<String> {
    let fake = Fake::start("e2b", Some(mode))?;
    let dir = scratch(&format!("e2b-{mode}"));
    let env = env(&fake, &dir, &[])?;
    let (code, err) = refused_start(&pairs(&env));
    assert_ne!(code, Some(0), "{mode}: the daemon started: {err}");
    assert!(!err.contains(fake.get("E2B_API_KEY")), "{mode}: the API key is in the error: {err}");
    Some(err)
}

#[test]
fn every_misbehaviour_of_the_e2b_fake_is_refused_by_name() {
    let cases = [
        ("redirect", "endpoint \"api\" answered with a redirect (307), which is not followed"),
        ("weaker", "the e2b sandbox is not what was asked: the sandbox allows internet access"),
        ("open-policy", "the sandbox does not deny all egress (no 0.0.0.0/0 in denyOut)"),
        ("unknown-field", "the network read-back has a field plimsoll does not know (\\\"allowAll\\\")"),
        ("malformed", "creating an e2b sandbox: e2b's create answer is not JSON"),
        ("oversized", "reading the e2b sandbox back: endpoint \\\"api\\\": the response body is over 4194304 bytes"),
        ("truncated", "envd's process stream ended without its end-of-stream message"),
        ("leaky", "internal error creating a sandbox for key <redacted>: placement failed"),
    ];
    for (mode, why) in cases {
        let Some(err) = refused(mode) else { return };
        assert!(err.contains(why), "{mode}: {err}");
    }
}

#[test]
fn a_slow_e2b_control_plane_is_refused_at_the_hosts_time_limit() {
    let Some(err) = refused("slow") else { return };
    assert!(err.contains("endpoint \\\"api\\\" did not answer within 30000 ms"), "{err}");
}

#[test]
fn sandboxes_that_will_not_delete_hold_capacity_and_the_daemon_keeps_serving() {
    let Some(fake) = Fake::start("e2b", Some("undeletable")) else { return };
    let dir = scratch("e2b-undeletable");
    let cap = [("SANDBOX_MAX_CONCURRENT", "3"), ("SANDBOX_PER_KEY_CONCURRENT", "3")];
    let Some(env) = env(&fake, &dir, &cap) else { return };
    let d = Daemon::start(&pairs(&env));
    super::fakes::undeletable_sandboxes_hold_capacity(&fake, &d, TOKEN, 2);
    let warned = d.log().iter().filter(|l| l.contains("deleting e2b sandbox") && l.contains("failed")).count();
    assert!(warned >= 2, "{:?}", d.log());
}

#[test]
fn a_killed_daemons_sandboxes_are_swept_by_the_next_with_its_instance() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let dir = scratch("e2b-sweep");
    let Some(env) = env(&fake, &dir, &[("SANDBOX_E2B_INSTANCE", "plimsoll@sweep-test")]) else { return };
    super::fakes::a_killed_daemons_sandboxes_are_swept(&fake, &pairs(&env), TOKEN);
}

/// E2B pages its sandbox listing (`X-Next-Token`, newest first; infra
/// 54693ff3): with a page of one, a killed daemon's three sandboxes are found
/// across three pages and all swept by the next.
#[test]
fn the_sweep_walks_every_page_of_the_listing() {
    let Some(fake) = Fake::start_with("e2b", None, &["--page-size", "1"]) else { return };
    let dir = scratch("e2b-pages");
    let extra = [("SANDBOX_E2B_INSTANCE", "plimsoll@pages-test"), ("SANDBOX_PER_KEY_CONCURRENT", "3")];
    let Some(env) = env(&fake, &dir, &extra) else { return };
    let log = super::fakes::killed_daemons_sandboxes_are_swept(&fake, &pairs(&env), TOKEN, 3);
    let listings = log.iter().filter(|l| l.contains(r#""path":"/v2/sandboxes""#)).count();
    assert!(listings >= 3, "the sweep read {listings} page(s) of the listing, not the three it holds");
}

#[test]
fn links_out_of_the_project_are_not_read_back_and_a_memory_bomb_is_named() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let dir = scratch("e2b-walls");
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let d = Daemon::start(&pairs(&env));
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    let links = "echo kept > kept.txt && ln -s kept.txt inside.txt && ln -s /etc/passwd leak.txt \
        && mkdir sub && ln -s /etc sub/up";
    // A process a step leaves behind swaps a path between a file and a link out:
    // it is killed before any artifact is resolved, so no check is raced.
    let swapper = "(while :; do ln -sf /etc/passwd l.tmp; mv -f l.tmp swap.txt; echo safe > s.tmp; \
        mv -f s.tmp swap.txt; done) > /dev/null 2>&1 &";
    let opts = Options { timeout_ms: 60_000, ..Options::default() };
    let wanted = ["kept.txt", "inside.txt", "leak.txt", "sub/up/passwd", "missing.txt", "swap.txt"];
    let p = rt
        .block_on(client.run_project(&[], &[links, swapper], &wanted, &opts))
        .expect("project")
        .project
        .expect("a project result");
    let mut got: Vec<(&str, &[u8])> = p.artifacts.iter().map(|a| (a.path.as_str(), a.content.as_slice())).collect();
    if let Some(i) = got.iter().position(|(path, _)| *path == "swap.txt") {
        assert_eq!(got.remove(i).1, b"safe\n", "a link out was read back through a race");
    }
    assert_eq!(got, [("kept.txt", &b"kept\n"[..]), ("inside.txt", &b"kept\n"[..])], "{}", p.outcome_detail);
    let log = d.log();
    for name in ["leak.txt", "sub/up/passwd"] {
        let line = format!(r#"artifact \"{name}\" resolves outside the project directory"#);
        assert!(log.iter().any(|l| l.contains(&line)), "no log of {name}");
    }
    // A step that allocates without end is a step result that names the kernel's
    // OOM kill, and the sandbox goes on to the next run.
    let bomb = "python3 -c 'a = []\nwhile True: a.append(bytearray(16 << 20))'";
    let p = rt
        .block_on(client.run_project(&[], &[bomb], &[], &opts))
        .expect("memory bomb")
        .project
        .expect("a project result");
    let err = String::from_utf8_lossy(&p.steps[0].stderr);
    assert_eq!(p.steps[0].exit_code, 137, "{err}");
    assert!(
        err.ends_with(
            "\nplimsoll: the step ran out of memory: the sandbox's kernel's OOM killer ended it (the sandbox has 512 MiB)\n"
        ),
        "{err}"
    );
    // A step that is killed but not for memory gets no such note.
    let p = rt
        .block_on(client.run_project(&[], &["kill -9 $$"], &[], &opts))
        .expect("killed")
        .project
        .expect("a project result");
    assert_eq!(p.steps[0].exit_code, 137);
    assert!(!String::from_utf8_lossy(&p.steps[0].stderr).contains("out of memory"));
    drop(d);
    assert_eq!(fake.sandboxes(), 0, "sandboxes left behind");
}

#[test]
fn a_e2b_daemon_with_grant_profiles_and_no_guard_refuses_to_start() {
    let Some(fake) = Fake::start("e2b", None) else { return };
    let Some(env) = env(&fake, &scratch("e2b-grants"), &[]) else { return };
    let err = super::fakes::grant_profiles_stop_the_start("e2b", &pairs(&env));
    assert!(err.contains("until it has the host's guard (E2B_GUARD_URL, PLIMSOLL_GUARD_ADDR)"), "{err}");
}

/// Network transform rules (what a granted run's way to the guard is made of)
/// are a per-team feature at E2B: a daemon with a guard and grant profiles
/// whose team lacks it refuses to start, naming the feature, and leaves nothing.
#[test]
fn an_e2b_team_without_network_rules_stops_a_granted_daemon_by_name() {
    let Some(fake) = Fake::start("e2b", Some("no-network-rules")) else { return };
    let dir = scratch("e2b-no-rules");
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let addr = format!("127.0.0.1:{port}");
    let guard = [("E2B_GUARD_URL", "https://guard.e2b.test"), ("PLIMSOLL_GUARD_ADDR", addr.as_str())];
    let Some(env) = env(&fake, &dir, &guard) else { return };
    let profiles = dir.join("grants.json");
    std::fs::write(
        &profiles,
        r#"{"profiles": {"p": {"base_url": "https://api.example.com", "allowed_callers": ["a"]}}}"#,
    )
    .expect("write");
    let mut env = pairs(&env);
    let profiles = profiles.display().to_string();
    env.push(("PLIMSOLL_GRANTS_FILE", &profiles));
    let (code, err) = refused_start(&env);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("granted runs reach the host's guard through E2B's network transform rules, which the team behind the API key does not have"),
        "{err}"
    );
    assert!(err.contains("Network transform rules are not available for your team."), "{err}");
    assert_eq!(settle(&fake, 0), 0, "the smoke test's sandbox was left behind");
}

/// The live suite: the same conformance suite against E2B itself. It runs only when
/// asked (`cargo test -p plimsoll-host --test e2e -- --ignored e2b::live`) and then
/// fails, never skips, without `E2B_API_KEY`. It is billed to that key's team.
#[test]
#[ignore = "live: runs against E2B and is billed; needs E2B_API_KEY (and optionally E2B_TEMPLATE)"]
fn live_conformance_against_e2b() {
    let how = "set it to a key of the team to bill (and E2B_TEMPLATE to a template built from the sandbox image: node, python3, /opt/plimsoll and a /work the guest owns)";
    let env = super::fakes::live_env("e2b", &["E2B_API_KEY"], &["E2B_TEMPLATE"], how, &scratch("e2b-live"), TOKEN);
    let template = std::env::var("E2B_TEMPLATE").unwrap_or_else(|_| "base".into());
    let d = Daemon::start(&pairs(&env));
    let environment = format!("e2b-template:{template}");
    let backend = super::conformance::Backend {
        provider: "e2b",
        tier: "vm",
        environment: &environment,
        above: None,
        output_cap: 1 << 20,
    };
    super::conformance::suite(&d, TOKEN, &backend);
    drop(d);
    // Sessions, on a template with the sandbox image's programs (the guide's
    // "Sessions"): the whole session suite, on a second daemon with two callers.
    let (env, tokens) = for_sessions(env, &scratch("e2b-live-sessions"));
    let d = Daemon::start(&pairs(&env));
    session_suite::run(&Target::full(d.url(), tokens, "e2b", "vm"));
}
