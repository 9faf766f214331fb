//! Placement across real daemons on one machine: wasm (process), docker under runc
//! (container) and under runsc (kernel), each with its own credential, and a daemon
//! that is down. A run goes to the first that fits; a refusal another daemon may not
//! share moves it on; anything else ends placement where it is.

use std::net::TcpListener;

use plimsoll_client::place::{Backend, DESCRIPTION_TTL, Need, Passed, Placer};
use plimsoll_client::{Client, Options, SessionOptions};
use plimsoll_core::wire::{JavaScriptRun, RunRequest};
use plimsoll_core::{Floor, Reason};

use super::docker::{TOKEN, docker_env, fixture, signed_plugin, start};
use super::{Daemon, host, rt, scratch, wasm_daemon};

/// The three daemons (wasm with `wasm_extra` settings), their tokens, and the URL of
/// one that is down.
struct Set {
    wasm: (Daemon, String),
    runc: Daemon,
    runsc: Daemon,
    down: String,
}

fn set(name: &str, wasm_extra: &[(&str, &str)], docker_extra: &[(&str, &str)]) -> Option<Set> {
    let fx = fixture("runsc")?;
    fixture("runc")?;
    let (plugin, key) = signed_plugin(&fx, &scratch(name));
    let wasm = wasm_daemon(&format!("{name}-wasm"), "placer", wasm_extra);
    let env = |runtime| {
        let mut env = docker_env(&fx, &plugin, &key, runtime);
        env.extend(docker_extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    };
    let (runc, runsc) = (start(&env("runc")), start(&env("runsc")));
    // A port that was free a moment ago: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    Some(Set { wasm, runc, runsc, down: format!("http://127.0.0.1:{port}") })
}

impl Set {
    fn backend(&self, name: &str) -> Backend {
        let (url, token) = match name {
            "wasm" => (self.wasm.0.url(), self.wasm.1.clone()),
            "runc" => (self.runc.url(), TOKEN.to_string()),
            "runsc" => (self.runsc.url(), TOKEN.to_string()),
            _ => (self.down.clone(), TOKEN.to_string()),
        };
        Backend { name: name.into(), client: Client::new(&url, Some(token)).expect("client") }
    }

    fn placer(&self, names: &[&str]) -> Placer {
        Placer::new(names.iter().map(|n| self.backend(n)).collect(), DESCRIPTION_TTL).expect("placer")
    }
}

fn snippet(code: &str, floor: &str) -> RunRequest {
    RunRequest {
        minimum_isolation: floor.into(),
        javascript: Some(JavaScriptRun { code: code.into(), grant_profile: String::new() }),
        ..RunRequest::default()
    }
}

fn passed(p: &[Passed]) -> Vec<(&str, Reason)> {
    p.iter().map(|p| (p.backend.as_str(), p.reason)).collect()
}

#[test]
fn a_run_goes_to_the_first_daemon_that_fits_and_the_others_are_named_with_why() {
    let Some(s) = set("place-fit", &[], &[]) else { return };
    let placer = s.placer(&["down", "wasm", "runc", "runsc"]);
    let rt = rt();

    let placed = rt.block_on(placer.run(snippet("console.log(6*7)", "kernel"), &Need::default())).expect("placed");
    assert_eq!(placed.backend, "runsc");
    let rec = placed.value.record.as_ref().expect("record");
    assert_eq!((rec.provider.as_str(), rec.isolation.as_str()), ("docker", "kernel"));
    assert_eq!(placed.value.javascript.as_ref().map(|j| j.stdout.as_slice()), Some(&b"42\n"[..]));
    assert_eq!(
        passed(&placed.passed),
        [("down", Reason::Environment), ("wasm", Reason::Isolation), ("runc", Reason::Isolation)]
    );
    assert!(placed.passed[0].message.starts_with("it does not describe itself: transport:"), "{:?}", placed.passed);
    assert_eq!(placed.passed[1].message, "it states tier process, below the floor kernel");

    // No floor: the first daemon that answers takes it.
    let placed = rt.block_on(placer.run(snippet("console.log(1)", ""), &Need::default())).expect("placed");
    assert_eq!((placed.backend.as_str(), passed(&placed.passed)), ("wasm", vec![("down", Reason::Environment)]));

    // The caller's own floor is the stronger one and is stamped on the request.
    let need = Need { floor: Some(Floor::Container), ..Need::default() };
    let placed = rt.block_on(placer.run(snippet("console.log(1)", "process"), &need)).expect("placed");
    assert_eq!(placed.backend, "runc");
    assert_eq!(placed.value.record.as_ref().expect("record").isolation, "container");

    // Pinned to an environment only the wasm daemon states.
    let quickjs = rt.block_on(s.backend("wasm").client.describe()).expect("describe");
    let identity = quickjs.javascript_environment.expect("environment").identity;
    let need = Need { environment: Some(identity), ..Need::default() };
    let placed = rt.block_on(placer.run(snippet("console.log(1)", ""), &need)).expect("placed");
    assert_eq!(placed.backend, "wasm");
    let need = Need { provider: Some("docker".into()), ..Need::default() };
    assert_eq!(rt.block_on(placer.run(snippet("console.log(1)", ""), &need)).expect("placed").backend, "runc");

    // Nothing states vm: nothing runs, and every daemon is named.
    let three = s.placer(&["wasm", "runc", "runsc"]);
    let unplaced = rt.block_on(three.run(snippet("console.log(1)", "vm"), &Need::default())).expect_err("no vm");
    assert_eq!((unplaced.backend.as_deref(), unplaced.error.not_dispatched()), (None, Some(Reason::Isolation)));
    assert_eq!(
        passed(&unplaced.passed),
        [("wasm", Reason::Isolation), ("runc", Reason::Isolation), ("runsc", Reason::Isolation)]
    );
    assert!(!unplaced.error.may_have_run());
}

#[test]
fn a_refusal_another_daemon_may_not_share_moves_on_and_any_other_ends_placement() {
    // One run a minute on the wasm daemon: its second run is shed (capacity).
    let Some(s) = set("place-retry", &[("SANDBOX_RATE_PER_MIN", "1")], &[]) else { return };
    let placer = s.placer(&["wasm", "runc"]);
    let rt = rt();
    let first = rt.block_on(placer.run(snippet("console.log(1)", ""), &Need::default())).expect("first");
    assert_eq!((first.backend.as_str(), first.passed.len()), ("wasm", 0));
    let second = rt.block_on(placer.run(snippet("console.log(2)", ""), &Need::default())).expect("second");
    assert_eq!((second.backend.as_str(), passed(&second.passed)), ("runc", vec![("wasm", Reason::Capacity)]));
    // With one send allowed, the shed run is not sent on: nothing ran, reason capacity.
    let once = s.placer(&["wasm", "runc"]).with_max_tries(1);
    let unplaced = rt.block_on(once.run(snippet("console.log(3)", ""), &Need::default())).expect_err("budget");
    assert_eq!(
        (unplaced.error.not_dispatched(), passed(&unplaced.passed)),
        (Some(Reason::Capacity), vec![("wasm", Reason::Capacity)])
    );

    // A malformed request is refused the same everywhere: placement ends at the first.
    let placer = s.placer(&["runc", "runsc"]);
    let unplaced = rt.block_on(placer.run(snippet("", ""), &Need::default())).expect_err("empty code");
    assert_eq!(unplaced.backend.as_deref(), Some("runc"));
    assert_eq!((unplaced.error.not_dispatched(), unplaced.passed.len()), (Some(Reason::Request), 0));

    // A bad floor never leaves this process.
    let unplaced = rt.block_on(placer.run(snippet("1", "none"), &Need::default())).expect_err("bad floor");
    assert_eq!((unplaced.backend, unplaced.error.not_dispatched()), (None, Some(Reason::Request)));
}

#[test]
fn a_session_is_placed_once_and_its_calls_stay_there() {
    // Sessions are on for the docker daemons only.
    let Some(s) = set("place-session", &[], &[("SANDBOX_MAX_SESSIONS", "2")]) else { return };
    let placer = s.placer(&["down", "wasm", "runc"]);
    let rt = rt();
    let opts = SessionOptions { floor: Some(Floor::Container), ..SessionOptions::default() };
    let placed = rt.block_on(placer.open_session(&opts, &Need::default())).expect("open");
    assert_eq!(
        (placed.backend.as_str(), passed(&placed.passed)),
        ("runc", vec![("down", Reason::Environment), ("wasm", Reason::Unsupported)])
    );
    assert_eq!(placed.passed[1].message, "it states no support for sessions");
    let session = placed.value;
    let cell = |code: &str| rt.block_on(session.run_cell("python", code, &[], &Options::default()));
    cell("x = 41").expect("a cell");
    let answer = cell("print(x + 1)").expect("the next cell, in the same interpreter");
    let out = answer.cell.as_ref().expect("cell result").stdout.clone();
    assert_eq!(String::from_utf8_lossy(&out), "42\n");
    assert_eq!(answer.record.as_ref().expect("record").isolation, "container");
    rt.block_on(session.close()).expect("close");
}

#[test]
fn the_operator_command_places_a_run_and_prints_what_it_passed_over() {
    let Some(s) = set("place-cli", &[], &[]) else { return };
    let out = host()
        .args(["place", "--min-isolation", "kernel", "-c", "console.log(6*7)"])
        .args(["--daemon", &format!("down={}", s.down)])
        .args(["--daemon", &format!("wasm={}", s.wasm.0.url())])
        .args(["--daemon", &format!("runsc={}", s.runsc.url())])
        .env("PLIMSOLL_CALLER_TOKEN_WASM", &s.wasm.1)
        .env("PLIMSOLL_CALLER_TOKEN", TOKEN)
        .output()
        .expect("place");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("isolation kernel\n") && stdout.contains("stdout 42\n"), "{stdout}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{stderr}");
    assert!(lines[0].starts_with("passed over down (environment): it does not describe itself"), "{stderr}");
    assert_eq!(
        lines[1..],
        ["passed over wasm (isolation): it states tier process, below the floor kernel", "placed on runsc"]
    );

    // Nothing fits vm: refused, exit 69, every daemon named.
    let out = host()
        .args(["place", "--min-isolation", "vm", "-c", "1", "--daemon", &format!("runsc={}", s.runsc.url())])
        .env("PLIMSOLL_CALLER_TOKEN", TOKEN)
        .output()
        .expect("place");
    assert_eq!(out.status.code(), Some(69));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "passed over runsc (isolation): it states tier kernel, below the floor vm\n\
         not dispatched (isolation): no daemon of the placement set took it (1 passed over); nothing ran\n"
    );

    // Bad input: each refused before anything is sent.
    for (args, message) in [
        (
            vec!["--daemon", "nourl"],
            "invalid request: --daemon \"nourl\" is not NAME=URL (for example runsc=http://127.0.0.1:8746)",
        ),
        (
            vec!["--daemon", "a=http://127.0.0.1:1", "--daemon", "a=http://127.0.0.1:2"],
            "invalid request: client configuration: two daemons of the placement set are named \"a\"",
        ),
        (vec!["--daemon", "a=ftp://x"], "invalid request: daemon a: client configuration: "),
        (
            vec!["--daemon", "a=http://127.0.0.1:1", "--timeout-ms", "0"],
            "invalid request: a timeout of 0 ms allows nothing to run; use 1 or more",
        ),
    ] {
        let out = host().args(["place", "-c", "1"]).args(&args).output().expect("place");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(69), "{stderr}");
        assert!(stderr.starts_with(&format!("not dispatched (request): {message}")), "{stderr}");
    }
}
