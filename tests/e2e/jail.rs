//! The wasm provider's engine in jailed worker processes, the default: snippets,
//! projects and sessions run there, Describe and the records say so, a worker
//! killed mid-run makes that run "may have run" and is replaced, and the daemon
//! keeps serving. `SANDBOX_WASM_ENGINE=in-process` is the explicit opt-out.

use std::process::Command;
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options, SessionOptions};

use super::wasm_daemon;

/// The engine workers the daemon `pid` started.
fn workers(pid: u32) -> Vec<u32> {
    let o = Command::new("pgrep").args(["-P", &pid.to_string(), "-f", "engine-worker"]).output().expect("pgrep");
    String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

#[test]
fn jailed_snippets_run_in_worker_processes_and_a_killed_worker_is_replaced() {
    let (d, token) = wasm_daemon("jail", "jailer", &[("SANDBOX_MAX_CONCURRENT", "2")]);
    let said = d.log().into_iter().find(|l| l.contains("engine runs in jailed workers")).expect("the daemon says so");
    for wall in ["landlock", "seccomp", "user namespace", "network namespace"] {
        assert!(said.contains(wall), "{wall}: {said}");
    }
    let c = Client::new(&d.url(), Some(token)).expect("client");
    let rt = super::rt();
    assert_eq!(rt.block_on(c.describe()).expect("describe").engine, "jailed", "the default");
    let opts = Options { timeout_ms: 20_000, ..Options::default() };
    let r = rt.block_on(c.run_javascript("console.log(6 * 7)", &opts)).expect("a jailed run");
    assert_eq!(r.javascript.as_ref().expect("js").stdout, b"42\n");
    let rec = r.record.expect("record");
    assert_eq!((rec.isolation.as_str(), rec.instance.as_str()), ("process", "plimsoll-engine-worker:jailed"));
    // Two for runs (SANDBOX_MAX_CONCURRENT, one run each) and one ahead for sessions.
    let before = workers(d.pid());
    assert_eq!(before.len(), 3, "{before:?}");

    // A worker killed in the middle of a run: that run may have run; the next is served.
    // The busy worker is the one whose CPU time grows while the slow run is
    // out: every worker has spent some already (warming up, the run above).
    let stat = |p: u32| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
    let cpu = |p: u32| {
        stat(p)
            .rsplit_once(')')
            .map(|(_, r)| r.split_whitespace().nth(11).unwrap_or("0").parse::<u64>().unwrap_or(0))
            .unwrap_or(0)
    };
    let spent: Vec<(u32, u64)> = before.iter().map(|p| (*p, cpu(*p))).collect();
    let slow = std::thread::spawn({
        let c = c.clone();
        move || {
            super::rt().block_on(c.run_javascript(
                "const t = Date.now(); while (Date.now() - t < 10000) {}",
                &Options { timeout_ms: 20_000, ..Options::default() },
            ))
        }
    });
    let deadline = Instant::now() + Duration::from_secs(8);
    let busy = loop {
        std::thread::sleep(Duration::from_millis(200));
        // A quarter of a second of CPU (25 ticks) since the slow run went out.
        let grown = spent.iter().map(|(p, t)| (*p, cpu(*p).saturating_sub(*t))).max_by_key(|(_, d)| *d);
        if let Some((p, _)) = grown.filter(|(_, d)| *d >= 25) {
            break p;
        }
        assert!(Instant::now() < deadline, "no worker took the run: {spent:?}");
    };
    Command::new("kill").args(["-KILL", &busy.to_string()]).status().expect("kill");
    let err = slow.join().expect("join").expect_err("the run lost its worker");
    assert!(err.may_have_run(), "{err}");
    // The caller gets the daemon's generic may-have-run text; the log holds why.
    let why = format!("the engine worker (pid {busy}) ended without answering");
    assert!(d.log().iter().any(|l| l.contains(&why)), "{why}: {:?}", d.log());
    let r = rt.block_on(c.run_javascript("console.log('after')", &opts)).expect("served after");
    assert_eq!(r.javascript.expect("js").stdout, b"after\n");
    // The replacement is started beside the run that found the worker gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = workers(d.pid());
    while after.len() != 3 {
        assert!(Instant::now() < deadline, "the pool is whole again: {after:?}");
        std::thread::sleep(Duration::from_millis(100));
        after = workers(d.pid());
    }
    assert!(!after.contains(&busy));
}

#[test]
fn sessions_and_python_run_in_the_jail_and_in_process_is_an_explicit_opt_out() {
    let (d, token) = wasm_daemon("jail-sessions", "jailer", &[("SANDBOX_MAX_SESSIONS", "4")]);
    let c = Client::new(&d.url(), Some(token)).expect("client");
    let rt = super::rt();
    let pool = workers(d.pid());
    let session = rt.block_on(c.open_session(&SessionOptions::default())).expect("a session");
    let cell = |lang: &str, code: &str| rt.block_on(session.run_cell(lang, code, &[], &Options::default()));
    let a = cell("javascript", "globalThis.seen = 41").expect("a cell");
    assert_eq!(a.record.as_ref().expect("record").instance, "plimsoll-engine-worker:jailed");
    let b = cell("javascript", "console.log(seen + 1)").expect("a cell");
    assert_eq!(b.cell.as_ref().expect("cell").stdout, b"42\n");
    let p = cell("python", "print(6 * 7)").expect("a python cell");
    assert_eq!(p.cell.as_ref().expect("cell").stdout, b"42\n");
    assert_eq!(p.record.as_ref().expect("record").instance, "plimsoll-engine-worker:jailed");
    // The session holds a worker of its own beside the pool's (it took the spare,
    // and a new spare starts in the background), until it closes.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut during = workers(d.pid());
    while during.len() != pool.len() + 1 {
        assert!(Instant::now() < deadline, "the spare was not restocked: {pool:?} -> {during:?}");
        std::thread::sleep(Duration::from_millis(100));
        during = workers(d.pid());
    }
    rt.block_on(session.close()).expect("closed");
    let deadline = Instant::now() + Duration::from_secs(10);
    while workers(d.pid()).len() != pool.len() {
        assert!(Instant::now() < deadline, "the session's worker outlived it: {:?}", workers(d.pid()));
        std::thread::sleep(Duration::from_millis(100));
    }

    // Opting out runs the engine in the daemon: no workers, and Describe says so.
    let (d, token) = wasm_daemon("jail-off", "jailer", &[("SANDBOX_WASM_ENGINE", "in-process")]);
    let c = Client::new(&d.url(), Some(token)).expect("client");
    assert_eq!(rt.block_on(c.describe()).expect("describe").engine, "in-process");
    assert!(workers(d.pid()).is_empty());
    let r = rt.block_on(c.run_javascript("console.log(1)", &Options::default())).expect("a run");
    assert_eq!(r.record.expect("record").instance, "");
}

/// A Python project that tries what a guest may try through WASI: the network,
/// files outside its work directory, clocks, sleeping and randomness. Each
/// attempt prints whether it was refused (and as what), never a value that
/// differs between runs.
const ATTEMPTS_PY: &str = r#"import os, random, socket, time

def attempt(name, f):
    try:
        print(name, "ok", f())
    except Exception as e:
        print(name, "refused", type(e).__name__)

attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
attempt("tcp without timeout", lambda: socket.socket().connect(("127.0.0.1", 22)))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", 53)))
attempt("dns", lambda: socket.getaddrinfo("localhost", 80))
attempt("read /etc/passwd", lambda: open("/etc/passwd").read())
attempt("list /", lambda: os.listdir("/"))
attempt("write ../escape", lambda: open("../escape.txt", "w").write("x"))
attempt("wall clock", lambda: time.time() > 1.6e9)
attempt("monotonic", lambda: time.monotonic() >= 0)
attempt("clock info", lambda: time.get_clock_info("monotonic").resolution > 0)
attempt("perf counter", lambda: time.perf_counter_ns() >= 0)
attempt("sleep", lambda: time.sleep(0.02))
attempt("urandom", lambda: len(os.urandom(16)))
attempt("random", lambda: 0 <= random.random() < 1)
written = open("out.bin", "wb").write(bytes(range(4)))
"#;

/// What [`ATTEMPTS_PY`] prints on the wasm provider, jailed or not.
const ATTEMPTS_SEEN: &str = "tcp refused gaierror
tcp without timeout refused PermissionError
udp refused PermissionError
dns refused gaierror
read /etc/passwd refused FileNotFoundError
list / refused FileNotFoundError
write ../escape refused FileNotFoundError
wall clock ok True
monotonic ok True
clock info ok True
perf counter ok True
sleep ok None
urandom ok 16
random ok True
";

/// The same for JavaScript: no network API, no broker client without a grant,
/// clocks and randomness.
const ATTEMPTS_JS: &str = r#"console.log(typeof fetch, typeof XMLHttpRequest, typeof WebSocket);
if (typeof host === "undefined") console.log("no host");
else host.get("/items").then((r) => console.log("host.get", r.status), (e) => console.log("host.get refused", e.status));
console.log(Date.now() > 1.6e12, Math.random() < 1, new Date().getTimezoneOffset() === 0);
"#;

/// Runs [`ATTEMPTS_PY`] as a project and in a session cell, and [`ATTEMPTS_JS`]
/// as a snippet and a cell, on the daemon `d`; what each printed, and the
/// project's artifact.
fn attempts(c: &Client) -> Vec<String> {
    let rt = super::rt();
    let opts = Options { timeout_ms: 20_000, ..Options::default() };
    let files = [("main.py", ATTEMPTS_PY)];
    let r = rt.block_on(c.run_project(&files, &["python3 main.py"], &["out.bin"], &opts)).expect("a result");
    let p = r.project.expect("a project result");
    assert_eq!(p.outcome, plimsoll_core::wire::ProjectOutcome::Completed, "{p:?}");
    assert_eq!(p.artifacts.first().map(|a| a.content.clone()), Some(vec![0, 1, 2, 3]), "{p:?}");
    let mut seen = vec![String::from_utf8_lossy(&p.steps[0].stdout).into_owned()];
    let js = rt.block_on(c.run_javascript(ATTEMPTS_JS, &opts)).expect("a result");
    seen.push(String::from_utf8_lossy(&js.javascript.expect("js").stdout).into_owned());
    let session = rt.block_on(c.open_session(&SessionOptions::default())).expect("a session");
    for (language, code) in [("python", ATTEMPTS_PY), ("javascript", ATTEMPTS_JS)] {
        let r = rt.block_on(session.run_cell(language, code, &[], &opts)).expect("a cell");
        let cell = r.cell.expect("a cell result");
        assert_eq!(cell.exit_code, 0, "{language}: {cell:?}");
        seen.push(String::from_utf8_lossy(&cell.stdout).into_owned());
    }
    rt.block_on(session.close()).expect("closed");
    seen
}

#[test]
fn what_a_guest_tries_through_wasi_is_a_result_and_the_worker_survives() {
    let (d, token) = wasm_daemon("jail-wasi", "jailer", &[("SANDBOX_MAX_SESSIONS", "2")]);
    let c = Client::new(&d.url(), Some(token)).expect("client");
    let pool = workers(d.pid());
    let jailed = attempts(&c);
    assert_eq!(jailed[0], ATTEMPTS_SEEN, "the jailed project");
    assert_eq!(jailed[2], ATTEMPTS_SEEN, "the jailed Python cell");
    let js = "undefined undefined undefined\nno host\ntrue true true\n";
    assert_eq!((jailed[1].as_str(), jailed[3].as_str()), (js, js), "the jailed snippet and JavaScript cell");
    // No worker died: every worker of the pool lives on but the one the session
    // took (a session's worker ends with it), and the log names no replacement.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = workers(d.pid());
    while after.len() != pool.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        after = workers(d.pid());
    }
    let kept = pool.iter().filter(|p| after.contains(p)).count();
    assert_eq!((kept, after.len()), (pool.len() - 1, pool.len()), "{pool:?} -> {after:?}");
    let log = d.log();
    assert!(!log.iter().any(|l| l.contains("ended without answering") || l.contains("replaced")), "{log:?}");
    // The engine in the daemon's own process answers the same.
    let (d, token) = wasm_daemon(
        "jail-wasi-in-process",
        "jailer",
        &[("SANDBOX_WASM_ENGINE", "in-process"), ("SANDBOX_MAX_SESSIONS", "2")],
    );
    let c = Client::new(&d.url(), Some(token)).expect("client");
    assert_eq!(attempts(&c), jailed);
}
