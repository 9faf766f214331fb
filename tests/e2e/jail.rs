//! The wasm provider with `SANDBOX_WASM_ENGINE=jailed`: snippets run in jailed
//! engine worker processes, their records say so, a worker killed mid-run makes
//! that run "may have run" and is replaced, and the daemon keeps serving.

use std::process::Command;
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options};

use super::wasm_daemon;

/// The engine workers the daemon `pid` started.
fn workers(pid: u32) -> Vec<u32> {
    let o = Command::new("pgrep").args(["-P", &pid.to_string(), "-f", "engine-worker"]).output().expect("pgrep");
    String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

#[test]
fn jailed_snippets_run_in_worker_processes_and_a_killed_worker_is_replaced() {
    let (d, token) =
        wasm_daemon("jail", "jailer", &[("SANDBOX_WASM_ENGINE", "jailed"), ("SANDBOX_MAX_CONCURRENT", "2")]);
    let said = d.log().into_iter().find(|l| l.contains("jailed engine workers")).expect("the daemon says so");
    for wall in ["landlock", "seccomp", "user namespace", "network namespace"] {
        assert!(said.contains(wall), "{wall}: {said}");
    }
    let c = Client::new(&d.url(), Some(token)).expect("client");
    let rt = super::rt();
    let opts = Options { timeout_ms: 20_000, ..Options::default() };
    let r = rt.block_on(c.run_javascript("console.log(6 * 7)", &opts)).expect("a jailed run");
    assert_eq!(r.javascript.as_ref().expect("js").stdout, b"42\n");
    let rec = r.record.expect("record");
    assert_eq!((rec.isolation.as_str(), rec.instance.as_str()), ("process", "plimsoll-engine-worker:jailed"));
    let before = workers(d.pid());
    assert_eq!(before.len(), 2, "{before:?}");

    // A worker killed in the middle of a run: that run may have run; the next is served.
    let slow = std::thread::spawn({
        let c = c.clone();
        move || {
            super::rt().block_on(c.run_javascript(
                "const t = Date.now(); while (Date.now() - t < 10000) {}",
                &Options { timeout_ms: 20_000, ..Options::default() },
            ))
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let busy = loop {
        // The busy worker is the one burning CPU; kill each until the run fails.
        std::thread::sleep(Duration::from_millis(300));
        let stat = |p: u32| std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let cpu = |p: u32| {
            stat(p)
                .rsplit_once(')')
                .map(|(_, r)| r.split_whitespace().nth(11).unwrap_or("0").parse::<u64>().unwrap_or(0))
                .unwrap_or(0)
        };
        if let Some(p) = before.iter().copied().max_by_key(|p| cpu(*p)).filter(|p| cpu(*p) > 0) {
            break p;
        }
        assert!(Instant::now() < deadline, "no worker took the run");
    };
    Command::new("kill").args(["-KILL", &busy.to_string()]).status().expect("kill");
    let err = slow.join().expect("join").expect_err("the run lost its worker");
    assert!(err.may_have_run(), "{err}");
    // The caller gets the daemon's generic may-have-run text; the log holds why.
    let why = format!("the engine worker (pid {busy}) ended without answering");
    assert!(d.log().iter().any(|l| l.contains(&why)), "{why}: {:?}", d.log());
    let r = rt.block_on(c.run_javascript("console.log('after')", &opts)).expect("served after");
    assert_eq!(r.javascript.expect("js").stdout, b"after\n");
    let after = workers(d.pid());
    assert_eq!(after.len(), 2, "the pool is whole again: {after:?}");
    assert!(!after.contains(&busy));
}
