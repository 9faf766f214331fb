//! Sessions over the wire on the wasm provider: the conformance cases a wasm
//! session can meet, driven by the Rust client (which follows the chain), by raw
//! HTTP (for what a client refuses to send), and by the published Python client.

use plimsoll_client::{Client, Error, Mismatch, Options, SessionOptions};
use plimsoll_core::wire::SessionEnd;
use plimsoll_core::{Floor, Reason};

use super::python::run_script;
use super::raw;
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

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn timeout(ms: i32) -> Options {
    Options { timeout_ms: ms, ..Options::default() }
}

#[test]
fn a_javascript_session_keeps_its_state_files_and_chain() {
    let (d, tokens) = daemon("sessions-js", &[]);
    rt().block_on(async {
        let c = Client::new(&d.url(), Some(tokens[0].clone())).expect("client");
        let info = c.describe().await.expect("describe");
        assert!(info.supports_sessions);
        assert_eq!(info.session_environment.as_ref().map(|e| e.languages.clone()), Some(vec!["javascript".into()]));
        let s = c.open_session(&SessionOptions::default()).await.expect("open");
        assert_eq!((s.opened().sandbox.as_str(), s.opened().isolation.as_str()), ("wasm", "process"));

        // State survives calls, and a top-level declaration can be made again.
        let plain = Options::default();
        let cell = |code: &'static str| s.run_cell("javascript", code, &[], &plain);
        let r = cell("let base = 40; function add(n) { return base + n }").await.expect("cell 1");
        let r = r.cell.expect("a cell result");
        assert!(r.interpreter_started && r.exit_code == 0, "{}", text(&r.stderr));
        let r = cell("let base = 41; base").await.expect("cell 2").cell.expect("cell");
        assert_eq!((text(&r.stdout), r.interpreter_started), ("41\n".into(), false), "{}", text(&r.stderr));
        let r = cell("add(1)").await.expect("cell 3").cell.expect("cell");
        assert_eq!(text(&r.stdout), "42\n");

        // A raised error is exit 1 naming the cell, and keeps the state.
        let r = cell("throw new Error('marker-7')").await.expect("cell 4").cell.expect("cell");
        assert_eq!(r.exit_code, 1);
        let err = text(&r.stderr);
        assert!(err.contains("marker-7") && err.contains("<cell 4>"), "{err}");
        assert_eq!(text(&cell("base").await.expect("cell 5").cell.expect("cell").stdout), "41\n");

        // Files land in the work directory first.
        let r = s
            .run_cell(
                "javascript",
                "JSON.parse(readFile('in.json')).n + 1",
                &[("in.json", r#"{"n": 41}"#)],
                &Options::default(),
            )
            .await
            .expect("cell 6")
            .cell
            .expect("cell");
        assert_eq!(text(&r.stdout), "42\n", "{}", text(&r.stderr));

        // The deadline ends the interpreter only; the next cell starts a fresh one
        // that still sees the session's files.
        let r = s.run_cell("javascript", "for (;;) {}", &[], &timeout(300)).await.expect("cell 7").cell.expect("cell");
        assert_eq!((r.exit_code, r.timed_out, r.interpreter_ended), (124, true, true));
        let r = cell("typeof base + ' ' + readFile('in.json').length").await.expect("cell 8").cell.expect("cell");
        assert!(r.interpreter_started);
        assert_eq!(text(&r.stdout), "'undefined 9'\n");

        // A floor above the tier is refused before dispatch, and the session goes on.
        let high = Options { floor: Some(Floor::Kernel), ..Options::default() };
        let e = s.run_cell("javascript", "1", &[], &high).await.expect_err("floor");
        assert_eq!(e.not_dispatched(), Some(Reason::Isolation));
        let r =
            s.run_javascript("console.log('snippet')", &Options::default()).await.expect("a snippet in the session");
        assert_eq!(text(&r.javascript.expect("js").stdout), "snippet\n");

        let (calls, last) = s.position().await;
        assert_eq!(calls, 9, "refused calls take no number");
        let closed = s.close().await.expect("close");
        assert_eq!((closed.calls, closed.last_record_sha256, closed.ended), (9, last, SessionEnd::Closed));
        let e = s.run_cell("javascript", "1", &[], &Options::default()).await.expect_err("closed");
        assert!(!e.may_have_run());
    });
}

#[test]
fn sessions_belong_to_their_caller_and_the_cap_deletes_nothing() {
    let (d, tokens) = daemon("sessions-owner", &[("SANDBOX_MAX_SESSIONS", "2")]);
    let addr = d.url().trim_start_matches("http://").to_string();
    let open = |token: &str| raw::rpc(&addr, token, "OpenSession", r#"{"protocol":4}"#);
    let opened = open(&tokens[0]);
    assert_eq!(opened.status, 200, "{opened:?}");
    let id = opened.json()["sessionId"].as_str().expect("id").to_string();
    let cell = |token: &str, id: &str| {
        let body = format!(r#"{{"protocol":4,"sessionId":"{id}","cell":{{"language":"javascript","code":"6*7"}}}}"#);
        raw::rpc(&addr, token, "SessionRun", &body)
    };
    for (token, id) in [(&tokens[1], id.as_str()), (&tokens[0], "00112233445566778899aabbccddeeff")] {
        let r = cell(token, id);
        let (code, message, reason) = r.error();
        assert_eq!(
            (r.status, code.as_str(), message.as_str(), reason.as_deref()),
            (404, "not_found", "no such session for this caller", Some("request"))
        );
    }
    let second = open(&tokens[1]);
    assert_eq!(second.status, 200);
    let third = open(&tokens[1]);
    let (code, message, reason) = third.error();
    assert_eq!((third.status, code.as_str(), reason.as_deref()), (429, "resource_exhausted", Some("capacity")));
    assert_eq!(
        message,
        "this daemon holds its maximum of 2 sessions (SANDBOX_MAX_SESSIONS); close one or retry later; nothing was opened or closed"
    );
    let r = cell(&tokens[0], &id);
    assert_eq!(r.status, 200, "the first session was not touched: {r:?}");
    assert_eq!(r.json()["run"]["cell"]["stdout"], "NDIK", "base64 of 42\\n");
    // A call after close is refused by the daemon, marked, with the session's end.
    let close = format!(r#"{{"protocol":4,"sessionId":"{id}"}}"#);
    let closed = raw::rpc(&addr, &tokens[0], "CloseSession", &close);
    assert_eq!(
        (closed.json()["calls"].as_str(), closed.json()["ended"].as_str()),
        (Some("1"), Some("SESSION_END_CLOSED"))
    );
    let r = cell(&tokens[0], &id);
    let (code, message, reason) = r.error();
    assert_eq!((code.as_str(), reason.as_deref()), ("failed_precondition", Some("request")));
    assert_eq!(message, "the session has ended (closed); nothing ran");
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

#[test]
fn the_published_client_keeps_state_and_its_chain_check_passes() {
    let (d, tokens) = daemon("sessions-python", &[]);
    let out = run_script(SCRIPT, &[("URL", &d.url()), ("TOKEN", &tokens[0])]);
    assert_eq!(out, "sessions ok\n");
}
