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
    // The session holds a worker of its own beside the pool's, until it closes.
    let during = workers(d.pid());
    assert_eq!(during.len(), pool.len() + 1, "{pool:?} -> {during:?}");
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
