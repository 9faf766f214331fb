//! Sessions over the wire on the wasm provider: the shared conformance suite
//! (`session_suite`), a chain broken by a call the client did not make, and the
//! published Python client.

use plimsoll_client::{Client, Error, Mismatch, Options, SessionOptions};
use plimsoll_core::{Floor, Reason};

use super::python::run_script;
use super::raw;
use super::session_suite::{self, Target};
use super::{Daemon, callers, rt, scratch};

/// A wasm daemon with sessions on and two callers.
fn daemon(name: &str, extra: &[(&str, &str)]) -> (Daemon, Vec<String>) {
    let dir = scratch(name);
    let (file, tokens) = callers(&dir, &["ana", "ben"]);
    let file = file.display().to_string();
    let mut env = vec![
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_CLIENTS_FILE", file.as_str()),
        ("SANDBOX_RATE_PER_MIN", "0"),
        ("SANDBOX_MAX_SESSIONS", "4"),
    ];
    env.extend_from_slice(extra);
    (Daemon::start(&env), tokens)
}

#[test]
fn the_conformance_suite_passes_on_wasm() {
    let (d, tokens) = daemon("sessions-suite", &[]);
    session_suite::run(&Target {
        url: d.url(),
        tokens: [tokens[0].clone(), tokens[1].clone()],
        sandbox: "wasm",
        tier: "process",
        languages: &["javascript", "python"],
        read: |path| format!("readFile('{path}')"),
        processes: false,
        snippets_share_files: false,
        max_sessions: 4,
        above: Some(Floor::Vm),
    });
}

#[test]
fn the_rust_client_catches_a_call_it_did_not_make() {
    let (d, tokens) = daemon("sessions-chain", &[]);
    let addr = d.url().trim_start_matches("http://").to_string();
    rt().block_on(async {
        let c = Client::new(&d.url(), Some(tokens[0].clone())).expect("client");
        let s = c.open_session(&SessionOptions::default()).await.expect("open");
        s.run_cell("javascript", "1", &[], &Options::default()).await.expect("call 1");
        // Someone else holding the ID makes a call this client never saw.
        let body = format!(
            r#"{{"protocol":4,"sessionId":"{}","cell":{{"language":"javascript","code":"2"}}}}"#,
            s.opened().session_id
        );
        let r = raw::rpc(&addr, &tokens[0], "SessionRun", &body);
        assert_eq!(r.status, 200);
        let e = s.run_cell("javascript", "3", &[], &Options::default()).await.expect_err("chain");
        assert!(matches!(e, Error::DataLoss { kind: Mismatch::Chain, .. }), "{e:?}");
        assert!(e.may_have_run());
        let e = s.run_cell("javascript", "4", &[], &Options::default()).await.expect_err("stopped");
        assert_eq!(e.not_dispatched(), Some(Reason::Request), "nothing more is sent: {e}");
        let e = s.close().await.expect_err("the count differs");
        assert!(matches!(e, Error::DataLoss { kind: Mismatch::Chain, .. }), "{e:?}");
    });
}

const SCRIPT: &str = r#"
import os
from plimsoll_client import Client
from plimsoll_client.errors import SessionEndedError
url, token = os.environ["URL"], os.environ["TOKEN"]
c = Client(url, token=token)
info = c.describe()
assert info.supports_sessions and info.session_lifetime_ms == 1800000, info
with c.open_session(owner="user-1") as s:
    assert (s.provider, s.isolation) == ("wasm", "process")
    r = s.run_cell("let base = 40", language="javascript")
    assert r.exit_code == 0 and r.interpreter_started, r
    r = s.run_cell("let base = 41; base", language="javascript")
    assert r.stdout == b"41\n" and not r.interpreter_started, r
    r = s.run_cell("throw new Error('kept')", language="javascript")
    assert r.exit_code == 1 and b"<cell 3>" in r.stderr, r
    r = s.run_cell("readFile('a.txt') + base", language="javascript", files={"a.txt": "x"})
    assert r.stdout == b"'x41'\n", r
    r = s.run_cell("for(;;){}", language="javascript", timeout=0.3)
    assert (r.exit_code, r.timed_out, r.interpreter_ended) == (124, True, True), r
    r = s.run_cell("typeof base", language="javascript")
    assert r.interpreter_started and r.stdout == b"'undefined'\n", r
    assert r.record.sequence == 6 and s.calls == 6
summary = s.close()
assert (summary.calls, summary.end) == (6, "closed"), summary
try:
    s.run_cell("1", language="javascript")
    raise AssertionError("ran after close")
except SessionEndedError as e:
    assert e.not_dispatched is not None
print("sessions ok")
"#;

/// The published client's helpers built on sessions, on wasm: `AsyncSession` keeps
/// state and runs a Python project over the session's files; `Workspace`, whose
/// every operation is a project call of shell steps, is refused before anything
/// runs, naming the steps wasm runs.
const HELPERS_SCRIPT: &str = r#"
import asyncio, os
from plimsoll_client import Client
from plimsoll_client.aio import AsyncClient
from plimsoll_client.errors import UnsupportedError
from plimsoll_client.workspace import Workspace
url, token = os.environ["URL"], os.environ["TOKEN"]
async def main():
    ac = AsyncClient(url, token=token)
    async with await ac.open_session(minimum_isolation="process") as s:
        await s.run_cell("x = 41", language="python")
        r = await s.run_cell("x + 1", language="python")
        assert r.stdout == b"42\n" and not r.interpreter_started, r
        r = await s.run_javascript("console.log(6 * 7)")
        assert r.stdout == b"42\n", r
        p = await s.run_project({"m.py": "print(6 * 7)"}, ["python3 m.py"], ["m.py"])
        assert (p.outcome, p.steps[0].stdout) == ("completed", b"42\n"), p
        r = await s.run_cell("open('m.py').read()", language="python")
        assert r.stdout == b"'print(6 * 7)'\n", r
        assert s.calls == 5, s.calls
    assert s.ended is None or s.ended.reason == "closed", s.ended
asyncio.run(main())
with Workspace(Client(url, token=token).open_session()) as ws:
    try:
        ws.exec("echo hi")
        raise AssertionError("a shell step ran on wasm")
    except UnsupportedError as e:
        assert e.not_dispatched == "unsupported", e
        assert "the wasm provider runs only `python3 [-I] FILE [ARG...]` steps" in str(e), e
    assert ws.session.calls == 0
print("helpers ok")
"#;

#[test]
fn the_published_clients_session_helpers_run_or_are_refused_by_name() {
    let (d, tokens) = daemon("sessions-helpers", &[]);
    let out = run_script(HELPERS_SCRIPT, &[("URL", &d.url()), ("TOKEN", &tokens[0])]);
    assert_eq!(out, "helpers ok\n");
}

#[test]
fn the_published_client_keeps_state_and_its_chain_check_passes() {
    let (d, tokens) = daemon("sessions-python", &[]);
    let out = run_script(SCRIPT, &[("URL", &d.url()), ("TOKEN", &tokens[0])]);
    assert_eq!(out, "sessions ok\n");
}
