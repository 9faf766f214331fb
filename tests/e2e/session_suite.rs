//! The session conformance suite, written once and run against every provider that
//! keeps sessions (wasm, docker under runc and runsc, the e2b and openshell fakes): the cases of the
//! original's `sessiontest`, each against a fresh session of one running daemon.
//! A case a provider cannot meet by design is named in its [`Target`], never skipped
//! silently: wasm runs no processes, and its snippets share no files with its cells;
//! no floor is above a `vm` tier.

use std::time::Duration;

use plimsoll_client::{Client, Error, Options, Session, SessionOptions};
use plimsoll_core::wire::{CellResult, ProjectFile, ProjectOutcome, ProjectRun, RunRequest, RunResponse, SessionEnd};
use plimsoll_core::{Floor, Reason};

use super::raw;

/// What the suite runs against.
pub struct Target {
    /// The daemon's base URL.
    pub url: String,
    /// Two callers' tokens.
    pub tokens: [String; 2],
    /// The provider's name and the tier its sessions state.
    pub sandbox: &'static str,
    pub tier: &'static str,
    /// The cell languages the provider states, in `Describe`'s order.
    pub languages: &'static [&'static str],
    /// A JavaScript expression reading work-directory file `path` as a string.
    pub read: fn(&str) -> String,
    /// Whether a call can start processes (the sweep and interpreter-kill cases).
    pub processes: bool,
    /// Whether a snippet in a session sees the files its cells were given.
    pub snippets_share_files: bool,
    /// The daemon's `SANDBOX_MAX_SESSIONS`.
    pub max_sessions: usize,
    /// A floor above the sessions' tier, refused before dispatch (none above `vm`).
    pub above: Option<Floor>,
}

impl Target {
    /// A backend whose sessions run every case, in both languages, with two
    /// sessions at most (the fakes' daemons: [`super::fakes::for_sessions`]).
    pub fn full(url: String, tokens: [String; 2], sandbox: &'static str, tier: &'static str) -> Target {
        Target {
            url,
            tokens,
            sandbox,
            tier,
            languages: &["javascript", "python"],
            read: |path| format!("require('fs').readFileSync('{path}', 'utf8')"),
            processes: true,
            snippets_share_files: true,
            max_sessions: 2,
            above: tier_above(tier),
        }
    }
}

/// The floor just above `tier`, refused before dispatch (none above `vm`).
fn tier_above(tier: &str) -> Option<Floor> {
    match tier {
        "process" => Some(Floor::Container),
        "container" => Some(Floor::Kernel),
        "kernel" => Some(Floor::Vm),
        _ => None,
    }
}

/// How a language spells what the cases need.
struct Spelling {
    language: &'static str,
    define: &'static str,
    redefine: &'static str,
    add_one: &'static str,
    raise: &'static str,
    spin: &'static str,
    /// Prints whether `base` exists.
    defined: &'static str,
    defined_no: &'static str,
}

const SPELLINGS: [Spelling; 2] = [
    Spelling {
        language: "javascript",
        define: "let base = 40; function add(n) { return base + n }",
        redefine: "let base = 41; base",
        add_one: "add(1)",
        raise: "throw new Error('marker-7')",
        spin: "for (;;) {}",
        defined: "typeof base",
        defined_no: "'undefined'\n",
    },
    Spelling {
        language: "python",
        define: "base = 40\ndef add(n):\n    return base + n",
        redefine: "base = 41\nbase",
        add_one: "add(1)",
        raise: "raise ValueError('marker-7')",
        spin: "while True: pass",
        defined: "'base' in globals()",
        defined_no: "False\n",
    },
];

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn timeout(ms: i32) -> Options {
    Options { timeout_ms: ms, ..Options::default() }
}

fn cell(r: Result<RunResponse, Error>) -> CellResult {
    r.expect("an answered cell").cell.expect("a cell result")
}

async fn run_cell(s: &Session, language: &str, code: &str) -> CellResult {
    cell(s.run_cell(language, code, &[], &Options::default()).await)
}

/// Runs every case against `t`.
pub fn run(t: &Target) {
    let rt = super::rt();
    rt.block_on(async {
        let c = Client::new(&t.url, Some(t.tokens[0].clone())).expect("client");
        let info = c.describe().await.expect("describe");
        assert!(info.supports_sessions);
        let languages = info.session_environment.as_ref().map(|e| e.languages.clone()).unwrap_or_default();
        assert_eq!(languages, t.languages.iter().map(|l| l.to_string()).collect::<Vec<_>>());

        for spelling in SPELLINGS.iter().filter(|s| t.languages.contains(&s.language)) {
            cell_state_survives_calls_and_errors_keep_it(t, &c, spelling).await;
            cell_deadline_ends_the_interpreter(&c, spelling).await;
        }
        cell_files_land_in_the_work_directory(t, &c).await;
        files_persist_across_calls_and_kinds(t, &c).await;
        sessions_do_not_share_files(t, &c).await;
        deadline_ends_the_call_not_the_session(&c).await;
        if let Some(floor) = t.above {
            floor_above_the_tier_is_refused_before_dispatch(&c, floor).await;
        }
        suspend_keeps_files_and_state(t, &c).await;
        close_ends_the_session(&c).await;
        lifetime_ends_the_session(&c).await;
        if t.processes {
            no_process_outlives_its_call(&c).await;
            held_output_ends_at_the_deadline(&c).await;
            killed_interpreter_is_started_again(&c).await;
            a_memory_bomb_in_a_step_is_a_step_result(&c).await;
        }
    });
    another_caller_cannot_use_the_id(t);
    the_cap_refuses_and_deletes_nothing(t);
}

async fn open(c: &Client, opts: &SessionOptions) -> Session {
    c.open_session(opts).await.expect("open")
}

/// `CellStateSurvivesCalls` and `CellErrorKeepsTheState`.
async fn cell_state_survives_calls_and_errors_keep_it(t: &Target, c: &Client, l: &Spelling) {
    let s = open(c, &SessionOptions::default()).await;
    assert_eq!((s.opened().sandbox.as_str(), s.opened().isolation.as_str()), (t.sandbox, t.tier));
    let r = run_cell(&s, l.language, l.define).await;
    assert!(r.interpreter_started && r.exit_code == 0, "{}: {}", l.language, text(&r.stderr));
    let r = run_cell(&s, l.language, l.redefine).await;
    assert_eq!((text(&r.stdout), r.interpreter_started), ("41\n".into(), false), "{}", text(&r.stderr));
    assert_eq!(text(&run_cell(&s, l.language, l.add_one).await.stdout), "42\n");
    let r = run_cell(&s, l.language, l.raise).await;
    let err = text(&r.stderr);
    assert_eq!(r.exit_code, 1, "{err}");
    assert!(err.contains("marker-7") && err.contains("<cell 4>"), "{}: {err}", l.language);
    let r = run_cell(&s, l.language, "base").await;
    assert_eq!((text(&r.stdout), r.interpreter_started), ("41\n".into(), false));
    s.close().await.expect("close");
}

/// `CellDeadlineEndsTheInterpreter`: exit 124, the interpreter ended, the next cell
/// starts a fresh one.
async fn cell_deadline_ends_the_interpreter(c: &Client, l: &Spelling) {
    let s = open(c, &SessionOptions::default()).await;
    run_cell(&s, l.language, l.define).await;
    let r = cell(s.run_cell(l.language, l.spin, &[], &timeout(1000)).await);
    assert_eq!((r.exit_code, r.timed_out, r.interpreter_ended), (124, true, true), "{}", l.language);
    let r = run_cell(&s, l.language, l.defined).await;
    assert!(r.interpreter_started, "{}: a fresh interpreter", l.language);
    assert_eq!(text(&r.stdout), l.defined_no);
    s.close().await.expect("close");
}

/// `CellFilesLandInTheWorkDirectory`, also for a fresh interpreter after a deadline.
async fn cell_files_land_in_the_work_directory(t: &Target, c: &Client) {
    let s = open(c, &SessionOptions::default()).await;
    let code = format!("JSON.parse({}).n + 1", (t.read)("in.json"));
    let r = cell(s.run_cell("javascript", &code, &[("in.json", r#"{"n": 41}"#)], &Options::default()).await);
    assert_eq!(text(&r.stdout), "42\n", "{}", text(&r.stderr));
    cell(s.run_cell("javascript", "for (;;) {}", &[], &timeout(500)).await);
    let r = run_cell(&s, "javascript", &code).await;
    assert!(r.interpreter_started);
    assert_eq!(text(&r.stdout), "42\n", "a fresh interpreter still sees the files: {}", text(&r.stderr));
    s.close().await.expect("close");
}

/// `FilesPersistAcrossCallsAndKinds`: a cell's files are there for a later snippet.
async fn files_persist_across_calls_and_kinds(t: &Target, c: &Client) {
    let s = open(c, &SessionOptions::default()).await;
    cell(s.run_cell("javascript", "1", &[("kept.txt", "kept")], &Options::default()).await);
    let code = format!("console.log({})", (t.read)("kept.txt"));
    let r = s.run_javascript(&code, &Options::default()).await.expect("a snippet").javascript.expect("js");
    if t.snippets_share_files {
        assert_eq!((r.exit_code, text(&r.stdout)), (0, "kept\n".into()), "{}", text(&r.stderr));
    } else {
        // A snippet there has no work directory at all, so not even the reader is defined.
        let err = text(&r.stderr);
        assert_eq!(r.exit_code, 1, "a snippet on {} shares no files with the cells: {err}", t.sandbox);
        assert!(err.contains("ReferenceError: readFile is not defined"), "{}: {err}", t.sandbox);
    }
    s.close().await.expect("close");
}

/// `SessionsDoNotShareFiles`.
async fn sessions_do_not_share_files(t: &Target, c: &Client) {
    let a = open(c, &SessionOptions::default()).await;
    let b = open(c, &SessionOptions::default()).await;
    cell(a.run_cell("javascript", "1", &[("secret.txt", "a's")], &Options::default()).await);
    let r = run_cell(&b, "javascript", &(t.read)("secret.txt")).await;
    // Not found, rather than any failure (a typo in the reader also exits 1).
    let err = text(&r.stderr);
    assert_eq!(r.exit_code, 1, "b read a's file: {} {err}", text(&r.stdout));
    assert!(err.contains("ENOENT") && err.contains("'secret.txt'"), "{}: not a missing file: {err}", t.sandbox);
    a.close().await.expect("close");
    b.close().await.expect("close");
}

/// `DeadlineEndsTheCallNotTheSession`.
async fn deadline_ends_the_call_not_the_session(c: &Client) {
    let s = open(c, &SessionOptions::default()).await;
    run_cell(&s, "javascript", "var kept = 1").await;
    let r = s.run_javascript("for (;;) {}", &timeout(500)).await.expect("answered").javascript.expect("js");
    assert_eq!((r.exit_code, r.timed_out), (124, true));
    let r = run_cell(&s, "javascript", "kept + 1").await;
    assert_eq!((text(&r.stdout), r.interpreter_started), ("2\n".into(), false));
    s.close().await.expect("close");
}

/// `FloorAboveTheTierIsRefusedBeforeDispatch`: marked `isolation`, no number taken,
/// the session goes on.
async fn floor_above_the_tier_is_refused_before_dispatch(c: &Client, floor: Floor) {
    let s = open(c, &SessionOptions::default()).await;
    let high = Options { floor: Some(floor), ..Options::default() };
    let e = s.run_cell("javascript", "1", &[], &high).await.expect_err("floor");
    assert_eq!(e.not_dispatched(), Some(Reason::Isolation), "{e}");
    assert_eq!(text(&run_cell(&s, "javascript", "6 * 7").await.stdout), "42\n");
    assert_eq!(s.position().await.0, 1, "the refused call took no number");
    s.close().await.expect("close");
}

/// `SuspendKeepsFiles`, and the kept interpreter's state with them.
async fn suspend_keeps_files_and_state(t: &Target, c: &Client) {
    let opts = SessionOptions { idle_timeout: Some(Duration::from_secs(1)), ..SessionOptions::default() };
    let s = open(c, &opts).await;
    cell(s.run_cell("javascript", "var kept = 41", &[("idle.txt", "idle")], &Options::default()).await);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let r = run_cell(&s, "javascript", &format!("{} + (kept + 1)", (t.read)("idle.txt"))).await;
    assert_eq!(text(&r.stdout), "'idle42'\n", "{}", text(&r.stderr));
    s.close().await.expect("close");
}

/// `CloseEndsTheSession`: the count and last digest, then a marked refusal.
async fn close_ends_the_session(c: &Client) {
    let s = open(c, &SessionOptions::default()).await;
    run_cell(&s, "javascript", "1").await;
    run_cell(&s, "javascript", "2").await;
    let (calls, last) = s.position().await;
    let closed = s.close().await.expect("close");
    assert_eq!((closed.calls, closed.last_record_sha256, closed.ended), (2, last, SessionEnd::Closed));
    assert_eq!(calls, 2);
    let e = s.run_cell("javascript", "1", &[], &Options::default()).await.expect_err("closed");
    assert!(!e.may_have_run() && e.not_dispatched().is_some(), "{e}");
}

/// `LifetimeEndsTheSession`: `expired`, nothing ran, and close collects the end.
async fn lifetime_ends_the_session(c: &Client) {
    let opts = SessionOptions { lifetime: Some(Duration::from_secs(2)), ..SessionOptions::default() };
    let s = open(c, &opts).await;
    run_cell(&s, "javascript", "1").await;
    tokio::time::sleep(Duration::from_millis(3000)).await;
    match s.run_cell("javascript", "1", &[], &Options::default()).await {
        Err(Error::SessionEnded { end, .. }) => assert_eq!(end, SessionEnd::Expired),
        other => panic!("expected the session to have expired: {other:?}"),
    }
    assert_eq!(s.close().await.expect("close").ended, SessionEnd::Expired);
}

/// Whether a process is alive (not gone, not a zombie), in Python.
const ALIVE: &str = "def alive(pid):\n    try:\n        return open(f'/proc/{pid}/stat').read().rsplit(') ', 1)[1][0] != 'Z'\n    except OSError:\n        return False\n";

/// `NoProcessOutlivesItsCall` and `CellChildrenDoNotOutliveTheCall`: background,
/// detached and `setsid` children of cells and of a snippet are gone by the next call.
async fn no_process_outlives_its_call(c: &Client) {
    let s = open(c, &SessionOptions::default()).await;
    let py = run_cell(
        &s,
        "python",
        "import subprocess\n[subprocess.Popen(a).pid for a in (['sleep', '300'], ['setsid', 'sleep', '301'])]",
    )
    .await;
    let js = run_cell(&s, "javascript", "require('child_process').spawn('sleep', ['302'], {detached: true}).pid").await;
    let r = s
        .run_javascript(
            "const c = require('child_process').spawn('sleep', ['303'], {detached: true, stdio: 'ignore'}); c.unref(); console.log(c.pid)",
            &Options::default(),
        )
        .await
        .expect("snippet")
        .javascript
        .expect("js");
    let pids = format!("{} + [{}, {}]", text(&py.stdout).trim(), text(&js.stdout).trim(), text(&r.stdout).trim());
    let r = run_cell(&s, "python", &format!("{ALIVE}[alive(p) for p in {pids}]")).await;
    assert_eq!(text(&r.stdout), "[False, False, False, False]\n", "{pids}: {}", text(&r.stderr));
    s.close().await.expect("close");
}

/// `HeldOutputEndsAtTheDeadline`: a child holding stdout does not hold the call.
async fn held_output_ends_at_the_deadline(c: &Client) {
    let s = open(c, &SessionOptions::default()).await;
    let r = s
        .run_javascript("require('child_process').spawn('sleep', ['300'], {stdio: 'inherit'})", &timeout(1000))
        .await
        .expect("answered")
        .javascript
        .expect("js");
    assert_eq!((r.exit_code, r.timed_out), (124, true));
    assert_eq!(text(&run_cell(&s, "python", "1 + 1").await.stdout), "2\n");
    s.close().await.expect("close");
}

/// `KilledInterpreterIsStartedAgain`.
async fn killed_interpreter_is_started_again(c: &Client) {
    let s = open(c, &SessionOptions::default()).await;
    run_cell(&s, "javascript", "let b = 41").await;
    let kill = "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit() and b'plimsoll-interp/javascript' in open(f'/proc/{p}/cmdline', 'rb').read():\n        os.kill(int(p), 9)";
    run_cell(&s, "python", kill).await;
    let r = run_cell(&s, "javascript", "typeof b").await;
    assert!(r.interpreter_started);
    assert_eq!(text(&r.stdout), "'undefined'\n");
    s.close().await.expect("close");
}

/// Another caller's session ID and an unknown one get the same answer.
fn another_caller_cannot_use_the_id(t: &Target) {
    let addr = t.url.trim_start_matches("http://").to_string();
    let opened = raw::rpc(&addr, &t.tokens[0], "OpenSession", r#"{"protocol":4}"#);
    assert_eq!(opened.status, 200, "{opened:?}");
    let id = opened.json()["sessionId"].as_str().expect("id").to_string();
    for (token, id) in [(&t.tokens[1], id.as_str()), (&t.tokens[0], "00112233445566778899aabbccddeeff")] {
        let body = format!(r#"{{"protocol":4,"sessionId":"{id}","cell":{{"language":"javascript","code":"6*7"}}}}"#);
        let r = raw::rpc(&addr, token, "SessionRun", &body);
        let (code, message, reason) = r.error();
        assert_eq!(
            (r.status, code.as_str(), message.as_str(), reason.as_deref()),
            (404, "not_found", "no such session for this caller", Some("request"))
        );
    }
    let closed = raw::rpc(&addr, &t.tokens[0], "CloseSession", &format!(r#"{{"protocol":4,"sessionId":"{id}"}}"#));
    assert_eq!(
        (closed.json()["calls"].as_str(), closed.json()["ended"].as_str()),
        (None, Some("SESSION_END_CLOSED")),
        "no call ran, so the count is zero and omitted"
    );
    // A call after close is refused by the daemon, marked, with the session's end.
    let body = format!(r#"{{"protocol":4,"sessionId":"{id}","cell":{{"language":"javascript","code":"1"}}}}"#);
    let r = raw::rpc(&addr, &t.tokens[0], "SessionRun", &body);
    let (code, message, reason) = r.error();
    assert_eq!((code.as_str(), reason.as_deref()), ("failed_precondition", Some("request")));
    assert_eq!(message, "the session has ended (closed); nothing ran");
}

/// At `SANDBOX_MAX_SESSIONS` an open is refused `capacity` and no session is touched.
fn the_cap_refuses_and_deletes_nothing(t: &Target) {
    super::rt().block_on(async {
        let c = Client::new(&t.url, Some(t.tokens[1].clone())).expect("client");
        let mut held = Vec::new();
        for _ in 0..t.max_sessions {
            let s = open(&c, &SessionOptions::default()).await;
            run_cell(&s, "javascript", "var mine = 42").await;
            held.push(s);
        }
        let e = c.open_session(&SessionOptions::default()).await.expect_err("over the cap");
        assert_eq!(e.not_dispatched(), Some(Reason::Capacity), "{e}");
        let expected = format!(
            "this daemon holds its maximum of {} sessions (SANDBOX_MAX_SESSIONS); close one or retry later; nothing was opened or closed",
            t.max_sessions
        );
        assert!(e.to_string().contains(&expected), "{e}");
        for s in &held {
            assert_eq!(text(&run_cell(s, "javascript", "mine").await.stdout), "42\n", "the session was not touched");
            s.close().await.expect("close");
        }
    });
}

/// A project step that allocates without end, in a session: a step result that
/// says it ran out of memory (under gVisor the sandbox's own limit would end the
/// whole session), and the session, its kept interpreter and its files live on.
async fn a_memory_bomb_in_a_step_is_a_step_result(c: &Client) {
    let s = open(c, &SessionOptions::default()).await;
    cell(s.run_cell("python", "kept = 41", &[("kept.txt", "kept")], &Options::default()).await);
    let mem = "a = []\nwhile True:\n    a.append(bytearray(16 << 20))\n";
    let project = ProjectRun {
        files: vec![ProjectFile { path: "mem.py".into(), content: mem.into() }],
        steps: vec!["python3 mem.py".into()],
        ..ProjectRun::default()
    };
    let req = RunRequest {
        protocol: plimsoll_core::protocol::NUMBER,
        timeout_ms: 30_000,
        project: Some(project),
        ..RunRequest::default()
    };
    let p = s.call(req).await.expect("answered").project.expect("a project result");
    assert_eq!(p.outcome, ProjectOutcome::Completed, "{}", p.outcome_detail);
    let err = text(&p.steps[0].stderr);
    assert_eq!(p.steps[0].exit_code, 137, "{err}");
    assert!(err.contains("\nplimsoll: the step ran out of memory: "), "{err}");
    let r = run_cell(&s, "python", "print(kept + 1, open('kept.txt').read())").await;
    assert_eq!(text(&r.stdout), "42 kept\n", "{}", text(&r.stderr));
    assert!(!r.interpreter_started, "the kept interpreter lived through the bomb");
    s.close().await.expect("close");
}
