//! The jailed engine worker, driven through its pool as the daemon drives it: real
//! workers run snippets behind their walls, and fake ones that crash, hang or
//! answer garbage are killed, replaced, and their runs reported "may have run".

use std::path::PathBuf;
use std::time::Duration;

use plimsoll_core::provider::RunError;
use plimsoll_runtime::jail::frame::Hello;
use plimsoll_runtime::jail::{Jail, JailConfig};

fn config(exe: PathBuf, workers: usize) -> JailConfig {
    JailConfig { exe, workers, hello: Hello { memory_mb: 64, output_cap: 1 << 20, cache_dir: None } }
}

fn real(workers: usize) -> std::sync::Arc<Jail> {
    Jail::start(config(PathBuf::from(env!("CARGO_BIN_EXE_plimsoll-host")), workers)).expect("workers start")
}

#[test]
fn a_jailed_worker_runs_snippets_behind_its_walls() {
    let jail = real(1);
    let said = jail.ready();
    assert!(said.identity.starts_with("quickjs-wasm:sha256:"), "{said:?}");
    for wall in ["no new privileges", "landlock", "seccomp"] {
        assert!(said.walls.iter().any(|w| w.contains(wall)), "{wall} missing from {:?}", said.walls);
    }
    for i in 0..20 {
        let r = jail.run(&format!("console.log({i} * 2)"), Duration::from_secs(5)).expect("a run");
        assert_eq!((r.exit_code, r.stdout.as_slice()), (0, format!("{}\n", i * 2).as_bytes()));
    }
    let r = jail.run("for (;;) {}", Duration::from_millis(300)).expect("a spinning run is a result");
    assert_eq!((r.exit_code, r.timed_out), (124, true));
    let r =
        jail.run("const a = []; for (;;) a.push(new Array(1 << 20).fill(7));", Duration::from_secs(10)).expect("oom");
    assert!(String::from_utf8_lossy(&r.stderr).contains("out of memory"), "{r:?}");
    let r = jail.run("console.log('after')", Duration::from_secs(5)).expect("the worker serves on");
    assert_eq!(r.stdout, b"after\n");
}

#[test]
fn the_worker_process_has_no_privileges_namespaces_or_environment_of_the_daemon() {
    let jail = real(1);
    let pid = jail.idle_pids()[0];
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| status.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_string();
    assert_eq!(field("NoNewPrivs:"), "NoNewPrivs:\t1");
    assert_eq!(field("Seccomp:"), "Seccomp:\t2", "a filter, not strict mode or none");
    assert_eq!(field("CapEff:"), "CapEff:\t0000000000000000", "no capability outside its namespace");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    assert!(environ.is_empty(), "the worker's environment: {:?}", String::from_utf8_lossy(&environ));
    for ns in ["user", "net", "mnt", "ipc", "uts"] {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).expect("ns");
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).expect("ns");
        assert_ne!(theirs, ours, "the worker shares the daemon's {ns} namespace");
    }
    // The socket, /dev/null, the daemon's stderr for its last words, and what the
    // engine made for itself: nothing the daemon held leaks in.
    let fds: Vec<(u32, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .filter_map(|e| {
            let e = e.ok()?;
            Some((e.file_name().to_str()?.parse().ok()?, std::fs::read_link(e.path()).ok()?.display().to_string()))
        })
        .collect();
    for (fd, target) in &fds {
        let expected = match fd {
            0 => target.starts_with("socket:"),
            1 => target == "/dev/null",
            2 => true,
            _ => target.starts_with("/memfd:wasm-memory-image") || target.starts_with("anon_inode:"),
        };
        assert!(expected, "fd {fd} -> {target} in {fds:?}");
    }
}

/// A stand-in worker, `behaviour` after it says ready (Python, like the daemon's
/// own speaks the frames).
fn fake(dir: &std::path::Path, name: &str, behaviour: &str) -> PathBuf {
    let path = dir.join(name);
    let script = format!(
        r#"#!/usr/bin/python3
import json, os, struct, sys, time
def exactly(n):
    b = b""
    while len(b) < n:
        b += os.read(0, n - len(b))
    return b
def read():
    return json.loads(exactly(struct.unpack("<I", exactly(4))[0]))
def write(raw):
    os.write(0, struct.pack("<I", len(raw)) + raw)
read()
{behaviour}
"#
    );
    std::fs::write(&path, script).expect("fake");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    path
}

const READY: &str = r#"write(json.dumps({"identity": "fake", "walls": []}).encode())"#;

#[test]
fn a_worker_that_crashes_hangs_or_answers_garbage_is_replaced_and_its_run_may_have_run() {
    let dir = std::env::temp_dir().join(format!("plimsoll-jail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cases = [
        ("crash", "read()\nsys.exit(3)", "ended without answering (exit status: 3)"),
        ("hang", "read()\ntime.sleep(60)", "did not answer within the run's budget and 2 s"),
        ("garbage", "read()\nwrite(b'not json')\ntime.sleep(60)", "answered garbage (not a frame of the protocol: "),
    ];
    for (name, behaviour, why) in cases {
        let exe = fake(&dir, name, &format!("{READY}\n{behaviour}"));
        let jail = Jail::start(config(exe, 1)).expect("the fake says ready");
        let before = jail.idle_pids();
        let err = jail.run("console.log(1)", Duration::from_millis(200)).expect_err("no answer");
        let RunError::MayHaveRun(detail) = &err else { panic!("{name}: {err:?}") };
        let expected = format!("the engine worker (pid {}) {why}", before[0]);
        assert!(detail.starts_with(&expected), "{name}: {detail}");
        assert!(detail.ends_with("; it was replaced"), "{name}: {detail}");
        let after = jail.idle_pids();
        assert_eq!(after.len(), 1, "{name}: the pool is whole again");
        assert_ne!(after, before, "{name}: a new worker took the old one's place");
        let gone = std::fs::read_to_string(format!("/proc/{}/status", before[0])).unwrap_or_default();
        assert!(gone.is_empty() || gone.contains("State:\tZ"), "{name}: the old worker is gone");
    }
    // A worker that says something else than ready never joins the pool.
    let exe = fake(&dir, "babble", "write(b'hello there')");
    let err = Jail::start(config(exe, 1)).expect_err("no ready");
    assert!(err.starts_with("an engine worker did not start: not a frame of the protocol: "), "{err}");
    std::fs::remove_dir_all(&dir).expect("clean");
}

#[test]
fn a_run_that_finds_every_worker_busy_past_its_budget_is_shed_not_queued() {
    let dir = std::env::temp_dir().join(format!("plimsoll-jail-busy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let exe = fake(&dir, "slow", &format!("{READY}\nread()\ntime.sleep(60)"));
    let jail = Jail::start(config(exe, 1)).expect("ready");
    let busy = std::thread::spawn({
        let jail = std::sync::Arc::clone(&jail);
        move || jail.run("1", Duration::from_millis(1500))
    });
    std::thread::sleep(Duration::from_millis(300));
    let err = jail.run("2", Duration::from_millis(200)).expect_err("shed");
    let RunError::Refused(r) = &err else { panic!("{err:?}") };
    assert_eq!(
        (r.reason, r.message.as_str()),
        (plimsoll_core::Reason::Capacity, "all 1 engine workers are busy; retry shortly")
    );
    assert!(matches!(busy.join().expect("join"), Err(RunError::MayHaveRun(_))));
    std::fs::remove_dir_all(&dir).expect("clean");
}
