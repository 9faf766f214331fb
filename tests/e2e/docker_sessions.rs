//! Docker sessions end to end, under runc and runsc: one container kept for many
//! calls, with kept Python and Node interpreters, the sweep between calls, the
//! host's read-back before each call, idle pause, the disk budget and the cap,
//! driven by the Rust client (which follows the chain) and the published Python
//! client. Needs what the docker suite needs (see `docker.rs`).

use std::process::Command;
use std::time::Duration;

use plimsoll_client::{Client, Error, Options, SessionOptions};
use plimsoll_core::wire::{CellResult, ProjectFile, ProjectRun, RunRequest, SessionEnd};
use plimsoll_core::{Floor, Reason};

use super::docker::{Fixture, TOKEN, created_since, docker_env, fixture, now, owner, signed_plugin, start};
use super::python::run_script;
use super::{Daemon, rt, scratch};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn timeout(ms: i32) -> Options {
    Options { timeout_ms: ms, ..Options::default() }
}

/// A docker daemon with sessions on: at most two, idle after 2 s, 32 MiB of storage.
fn daemon(fx: &Fixture, runtime: &str) -> Daemon {
    let dir = scratch(&format!("docker-sessions-{runtime}"));
    let (plugin, key) = signed_plugin(fx, &dir);
    let mut env = docker_env(fx, &plugin, &key, runtime);
    for (k, v) in [("SANDBOX_MAX_SESSIONS", "2"), ("SANDBOX_SESSION_IDLE", "2s"), ("SANDBOX_SESSION_DISK_MB", "32")] {
        env.push((k.into(), v.into()));
    }
    start(&env)
}

fn docker(args: &[&str]) -> String {
    let o = Command::new("docker").args(args).output().expect("docker");
    assert!(o.status.success(), "docker {args:?}: {}", text(&o.stderr));
    text(&o.stdout).trim().to_string()
}

/// Whether the process is alive (not gone, not a zombie), as a Python expression.
const ALIVE: &str = "def alive(pid):\n    try:\n        return open(f'/proc/{pid}/stat').read().rsplit(') ', 1)[1][0] != 'Z'\n    except OSError:\n        return False\n";

/// The suite's cases against one daemon.
fn suite(d: &Daemon, runtime: &str) {
    let tier = if runtime == "runsc" { "kernel" } else { "container" };
    let c = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    rt.block_on(async {
        let info = c.describe().await.expect("describe");
        assert!(info.supports_sessions);
        let languages = info.session_environment.as_ref().map(|e| e.languages.clone()).unwrap_or_default();
        assert_eq!(languages, vec!["javascript".to_string(), "python".to_string()]);

        let since = now();
        let s = c.open_session(&SessionOptions::default()).await.expect("open");
        assert_eq!((s.opened().sandbox.as_str(), s.opened().isolation.as_str()), ("docker", tier));
        let containers = created_since(&owner(d), since);
        assert_eq!(containers.len(), 1, "one container per session: {containers:?}");
        let container = containers[0].clone();

        let plain = Options::default();
        let cell = |language: &'static str, code: &'static str| s.run_cell(language, code, &[], &plain);
        let result = |r: Result<plimsoll_core::wire::RunResponse, Error>| -> CellResult {
            r.expect("a cell").cell.expect("a cell result")
        };

        // Python state survives calls; a trailing expression shows its repr.
        let r = result(cell("python", "base = 40\ndef add(n):\n    return base + n").await);
        assert!(r.interpreter_started && r.exit_code == 0, "{}", text(&r.stderr));
        let r = result(cell("python", "base = 41\nbase").await);
        assert_eq!((text(&r.stdout), r.interpreter_started), ("41\n".into(), false), "{}", text(&r.stderr));
        assert_eq!(text(&result(cell("python", "add(1)").await).stdout), "42\n");
        assert_eq!(text(&result(cell("python", "'x' * 2").await).stdout), "'xx'\n");

        // A raised error is exit 1 with a traceback naming the cell; the state stays.
        let r = result(cell("python", "def f():\n    raise ValueError('marker-7')\nf()").await);
        let err = text(&r.stderr);
        assert_eq!(r.exit_code, 1, "{err}");
        assert!(err.contains("ValueError: marker-7") && err.contains("File \"<cell 5>\", line 2"), "{err}");
        assert_eq!(text(&result(cell("python", "base").await).stdout), "41\n");

        // Node keeps its own state; a top-level let can be declared again.
        let r = result(cell("javascript", "let b = 40").await);
        assert!(r.interpreter_started && r.exit_code == 0, "{}", text(&r.stderr));
        let r = result(cell("javascript", "let b = 41; b + 1").await);
        assert_eq!((text(&r.stdout), r.interpreter_started), ("42\n".into(), false), "{}", text(&r.stderr));
        let r = result(cell("javascript", "throw new Error('marker-8')").await);
        assert!(r.exit_code == 1 && text(&r.stderr).contains("marker-8"), "{}", text(&r.stderr));

        // Files land in the work directory first; both languages share it.
        let r = result(
            s.run_cell("python", "import json\njson.load(open('in.json'))['n'] + 1", &[("in.json", r#"{"n": 41}"#)], &plain)
                .await,
        );
        assert_eq!(text(&r.stdout), "42\n", "{}", text(&r.stderr));
        result(cell("python", "open('shared.txt', 'w').write('from python')").await);
        let r = result(cell("javascript", "require('fs').readFileSync('shared.txt', 'utf8')").await);
        assert_eq!(text(&r.stdout), "'from python'\n", "{}", text(&r.stderr));

        // Files persist across kinds: a snippet writes, a project reads.
        let r = s.run_javascript("require('fs').writeFileSync('snip.txt', 'from a snippet')", &plain).await;
        assert_eq!(r.expect("snippet").javascript.expect("js").exit_code, 0);
        let project = ProjectRun {
            files: vec![ProjectFile { path: "p.sh".into(), content: "cat snip.txt shared.txt".into() }],
            steps: vec!["sh p.sh".into()],
            artifacts: vec![],
            grant_profile: String::new(),
        };
        let r = s.call(RunRequest { project: Some(project), timeout_ms: 30_000, ..RunRequest::default() }).await;
        let p = r.expect("project").project.expect("project result");
        assert_eq!(text(&p.steps[0].stdout), "from a snippetfrom python", "{p:?}");

        // No process a call starts outlives it: background, detached and setsid'd
        // children of a cell and of a snippet are gone by the next call.
        let r = result(
            cell(
                "python",
                "import subprocess\n[subprocess.Popen(a).pid for a in (['sleep', '300'], ['setsid', 'sleep', '301'])]",
            )
            .await,
        );
        let pids = text(&r.stdout);
        let r = result(
            cell("javascript", "require('child_process').spawn('sleep', ['302'], {detached: true}).pid").await,
        );
        let js_pid = text(&r.stdout);
        let check = format!("{ALIVE}[alive(p) for p in {} + [{}]]", pids.trim(), js_pid.trim());
        let r = s.run_cell("python", &check, &[], &plain).await.expect("check").cell.expect("cell");
        assert_eq!(text(&r.stdout), "[False, False, False]\n", "{}", text(&r.stderr));

        // The deadline ends the interpreter only; the next cell of that language
        // starts a fresh one, the other language's state and the files stay.
        let r = result(s.run_cell("python", "while True: pass", &[], &timeout(1000)).await);
        assert_eq!((r.exit_code, r.timed_out, r.interpreter_ended), (124, true, true));
        let r = result(cell("python", "open('in.json').read()[:6]").await);
        assert!(r.interpreter_started, "a fresh interpreter");
        assert_eq!(text(&r.stdout), "'{\"n\": '\n");
        assert_eq!(text(&result(cell("javascript", "b").await).stdout), "41\n");

        // An interpreter killed from inside is started again.
        let kill = "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit() and b'plimsoll-interp/javascript' in open(f'/proc/{p}/cmdline', 'rb').read():\n        os.kill(int(p), 9)";
        result(cell("python", kill).await);
        let r = result(cell("javascript", "typeof b").await);
        assert!(r.interpreter_started);
        assert_eq!(text(&r.stdout), "'undefined'\n");

        // A floor above the tier is refused before dispatch; the session goes on.
        let high = Options { floor: Some(Floor::Vm), ..Options::default() };
        let e = s.run_cell("python", "1", &[], &high).await.expect_err("floor");
        assert_eq!(e.not_dispatched(), Some(Reason::Isolation));

        // Idle: the container is paused, and the next call resumes it with files
        // and interpreters kept.
        result(cell("python", "kept = 'through the pause'").await);
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(docker(&["inspect", "--format", "{{.State.Paused}}", &container]), "true");
        assert_eq!(text(&result(cell("python", "kept").await).stdout), "'through the pause'\n");

        // The cap: a third session is refused and nothing is deleted.
        let second = c.open_session(&SessionOptions::default()).await.expect("a second session");
        let e = c.open_session(&SessionOptions::default()).await.expect_err("over the cap");
        assert_eq!(e.not_dispatched(), Some(Reason::Capacity), "{e}");
        assert_eq!(docker(&["inspect", "--format", "{{.State.Running}}", &container]), "true");

        // Close returns the count; a call after close is refused, marked.
        let (calls, last) = s.position().await;
        let closed = s.close().await.expect("close");
        assert_eq!((closed.calls, closed.last_record_sha256, closed.ended), (calls, last, SessionEnd::Closed));
        let e = s.run_cell("python", "1", &[], &plain).await.expect_err("closed");
        assert!(!e.may_have_run(), "{e}");
        let gone = Command::new("docker").args(["inspect", &container]).output().expect("docker");
        assert!(!gone.status.success(), "close removes the container");

        // A container changed from outside between calls ends the session.
        second.close().await.expect("close the second");
        let since = now();
        let s = c.open_session(&SessionOptions::default()).await.expect("open again");
        result(s.run_cell("python", "1", &[], &plain).await);
        let changed = created_since(&owner(d), since);
        let target = changed.last().expect("the new session's container");
        // gVisor cannot change a running container's limits; removing it is the change there.
        let expected = if runtime == "runsc" {
            docker(&["rm", "-f", target]);
            "is gone"
        } else {
            docker(&["update", "--memory", "300m", "--memory-swap", "300m", target]);
            "memory limit \"256 MiB\" became \"300 MiB\""
        };
        let e = s.run_cell("python", "1", &[], &plain).await.expect_err("changed");
        match &e {
            Error::SessionEnded { end, detail, .. } => {
                assert_eq!(*end, SessionEnd::SandboxChanged);
                assert!(detail.contains(expected), "{detail}");
            }
            other => panic!("expected the session to end as sandbox_changed: {other:?}"),
        }
        assert!(!e.may_have_run());
        assert_eq!(s.close().await.expect("close").ended, SessionEnd::SandboxChanged);

        // Past the disk budget the call is answered and the session ends.
        let s = c.open_session(&SessionOptions::default()).await.expect("open for the disk");
        let fill = "open('/work/big', 'wb').write(b'x' * (30 << 20))\nopen('/tmp/big', 'wb').write(b'x' * (8 << 20))";
        let r = s.run_cell("python", fill, &[], &timeout(30_000)).await.expect("answered");
        assert_eq!(r.cell.expect("cell").exit_code, 0);
        let (end, detail) = s.ended().await.expect("the answer ended the session");
        assert_eq!(end, SessionEnd::DiskExceeded);
        assert!(detail.contains("over its budget of 32 MiB"), "{detail}");
        let e = s.run_cell("python", "1", &[], &plain).await.expect_err("ended");
        assert!(!e.may_have_run());
    });
}

const SCRIPT: &str = r#"
import os
from plimsoll_client import Client
c = Client(os.environ["URL"], token=os.environ["TOKEN"])
tier = os.environ["TIER"]
with c.open_session(minimum_isolation=tier) as s:
    assert (s.provider, s.isolation) == ("docker", tier), (s.provider, s.isolation)
    r = s.run_cell("x = 41", language="python")
    assert r.exit_code == 0 and r.interpreter_started, r
    r = s.run_cell("x + 1", language="python")
    assert r.stdout == b"42\n" and not r.interpreter_started, r
    r = s.run_cell("const y = 1; y + 1", language="javascript")
    assert r.stdout == b"2\n", r
    r = s.run_cell("import time\nwhile True: pass", language="python", timeout=1)
    assert (r.exit_code, r.timed_out, r.interpreter_ended) == (124, True, True), r
    assert r.record.sequence == 4 and s.calls == 4
summary = s.close()
assert (summary.calls, summary.end) == (4, "closed"), summary
print("docker sessions ok")
"#;

fn sessions(runtime: &str) {
    let Some(fx) = fixture(runtime) else { return };
    let d = daemon(&fx, runtime);
    suite(&d, runtime);
    let tier = if runtime == "runsc" { "kernel" } else { "container" };
    let out = run_script(SCRIPT, &[("URL", &d.url()), ("TOKEN", TOKEN), ("TIER", tier)]);
    assert_eq!(out, "docker sessions ok\n");
}

#[test]
fn docker_sessions_under_runc() {
    sessions("runc");
}

#[test]
fn docker_sessions_under_runsc() {
    sessions("runsc");
}
