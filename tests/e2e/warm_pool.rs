//! The docker warm pool (`SANDBOX_WARM_POOL`) end to end, under runc and runsc:
//! runs are served from started containers and give the same results, records and
//! tiers as without the pool; each container serves exactly one run and is gone
//! after it; the pool refills; a pooled container changed or frozen behind the
//! pool's back is never handed out; stopping the daemon removes what the pool holds.
//!
//! Needs what the docker suite needs; skips or fails the same way.

use std::process::Command;
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options};

use super::docker::{docker_env, fixture, owner, signed_plugin, start};
use super::{Daemon, raw, rt, scratch};

const TOKEN: &str = "docker-suite-token-docker-suite-token-0123";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A metric's value now (the first line that starts with `name` and a space).
fn metric(d: &Daemon, name: &str) -> u64 {
    let m = raw::get(d.metrics.as_deref().expect("metrics"), "/metrics");
    let body = text(&m.body);
    body.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("/metrics has no {name}:\n{body}"))
}

fn hits(d: &Daemon) -> u64 {
    metric(d, r#"plimsoll_warm_pool_claims_total{outcome="hit"}"#)
}

/// Waits until the pool holds every container it aims to.
fn full(d: &Daemon) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (ready, wanted) = (metric(d, "plimsoll_warm_pool_ready"), metric(d, "plimsoll_warm_pool_wanted"));
        if wanted > 0 && ready >= wanted {
            return;
        }
        assert!(Instant::now() < deadline, "the warm pool did not fill: {ready} of {wanted}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// IDs of the daemon's containers (running only, or all).
fn containers(owner: &str, all: bool) -> Vec<String> {
    let mut cmd = Command::new("docker");
    cmd.args(["ps", "-q", "--no-trunc", "--filter", &format!("label=dev.plimsoll.owner={owner}")]);
    if all {
        cmd.arg("-a");
    }
    text(&cmd.output().expect("docker ps").stdout).lines().map(str::to_string).collect()
}

/// Waits until no container of `owner` whose ID starts with `prefix` exists.
fn gone(owner: &str, prefix: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if !containers(owner, true).iter().any(|id| id.starts_with(prefix)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

fn opts(timeout_ms: i32) -> Options {
    Options { timeout_ms, ..Options::default() }
}

fn suite(runtime: &str) {
    let Some(fx) = fixture(runtime) else { return };
    let tier = if runtime == "runsc" { "kernel" } else { "container" };
    let dir = scratch(&format!("warm-pool-{runtime}"));
    let (plugin, key) = signed_plugin(&fx, &dir);
    let mut env = docker_env(&fx, &plugin, &key, runtime);
    env.push(("SANDBOX_WARM_POOL".into(), "1".into()));
    let d = start(&env);
    let who = owner(&d);
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    let run = |code: &str, timeout_ms: i32| {
        full(&d);
        let before = hits(&d);
        let r = rt.block_on(client.run_javascript(code, &opts(timeout_ms))).expect("run");
        assert_eq!(hits(&d), before + 1, "{code:?} was not served from the pool");
        r
    };

    // The smoke test's JavaScript and Python snippets and its project taught the
    // pool three shapes.
    full(&d);
    assert_eq!(metric(&d, "plimsoll_warm_pool_wanted"), 3);

    // A run from the pool: its result, tier and record as without one.
    let r = run(
        "console.log(6*7); require('fs').writeFileSync('/tmp/left', 'x'); console.log(require('os').hostname())",
        0,
    );
    let rec = r.record.expect("record");
    assert_eq!((rec.provider.as_str(), rec.isolation.as_str()), ("docker", tier));
    assert!(rec.environment.starts_with("docker-image:sha256:"), "{}", rec.environment);
    let out = text(&r.javascript.expect("js").stdout);
    let first = out.lines().nth(1).expect("a hostname").to_string();
    assert!(out.starts_with("42\n") && first.len() == 12, "{out:?}");

    // Each container serves one run: the next sees nothing of the first, and the
    // first is removed.
    let r = run("console.log(require('fs').existsSync('/tmp/left'), require('os').hostname())", 0);
    let out = text(&r.javascript.expect("js").stdout);
    let (seen, second) = out.trim().split_once(' ').expect("two words");
    assert_eq!(seen, "false", "{out:?}");
    assert_ne!(second, first, "a pooled container served two runs");
    assert!(gone(&who, &first), "the first run's container {first} still exists");

    // A project (the runner waits for its plan) is served from the pool too.
    full(&d);
    let before = hits(&d);
    let p = rt
        .block_on(client.run_project(&[("a.txt", "pooled")], &["cat a.txt", "hostname"], &[], &opts(0)))
        .expect("a project")
        .project
        .expect("project result");
    assert_eq!(hits(&d), before + 1, "the project was not served from the pool");
    assert_eq!((p.outcome, p.steps.len()), (plimsoll_core::wire::ProjectOutcome::Completed, 2), "{p:?}");
    assert_eq!(text(&p.steps[0].stdout), "pooled");

    // Through the pool, results are those of a fresh interpreter's.
    let js = run("throw new Error('boom')", 0).javascript.expect("js");
    assert_eq!(js.exit_code, 1);
    assert!(text(&js.stderr).contains("Error: boom"), "{}", text(&js.stderr));
    let js = run("process.on('exit', c => console.log('bye', c)); process.exit(3)", 0).javascript.expect("js");
    assert_eq!((js.exit_code, text(&js.stdout), text(&js.stderr)), (3, "bye 3\n".into(), String::new()));
    let js = run("for(;;){}", 2000).javascript.expect("js");
    assert_eq!((js.exit_code, js.timed_out), (124, true));
    let js = run("process.stdout.write('x'.repeat(3*1024*1024))", 0).javascript.expect("js");
    assert!(js.stdout_truncated && js.stdout.len() == 1 << 20, "{} bytes", js.stdout.len());
    let js = run("process.stdout.write('y'.repeat(1024*1024))", 0).javascript.expect("js");
    assert!(!js.stdout_truncated && js.stdout.len() == 1 << 20, "output exactly at the cap is whole");

    // A pooled container changed (runc: its pids limit) or frozen (runsc) behind
    // the pool's back is removed at the claim, never handed out; the run is served.
    full(&d);
    // The last run's container may still be on its way out (removed in the background).
    let deadline = Instant::now() + Duration::from_secs(30);
    let pooled = loop {
        let running = containers(&who, false);
        if running.len() == 3 || Instant::now() > deadline {
            break running;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(pooled.len(), 3, "{pooled:?}");
    for id in &pooled {
        let args: &[&str] = if runtime == "runc" { &["update", "--pids-limit", "300"] } else { &["pause"] };
        let o = Command::new("docker").args(args).arg(id).output().expect("docker");
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    let rejected = metric(&d, "plimsoll_warm_pool_rejected_total");
    let r = rt.block_on(client.run_javascript("console.log('served')", &opts(0))).expect("run after tampering");
    assert_eq!(text(&r.javascript.expect("js").stdout), "served\n");
    assert_eq!(metric(&d, "plimsoll_warm_pool_rejected_total"), rejected + 1);
    let log = d.log().join("\n");
    let why = if runtime == "runc" { r#"pids limit "256" became "300""# } else { "paused true" };
    assert!(log.contains("was not handed out and is removed") && log.contains(why), "{log}");

    // Stopping the daemon removes what the pool holds.
    full(&d);
    assert!(!containers(&who, false).is_empty());
    let (code, _) = d.terminate();
    assert_eq!(code, Some(0));
    assert_eq!(containers(&who, true), Vec::<String>::new(), "containers outlived the daemon");
}

#[test]
fn runs_from_the_warm_pool_under_runc() {
    suite("runc");
}

#[test]
fn runs_from_the_warm_pool_under_runsc() {
    suite("runsc");
}
