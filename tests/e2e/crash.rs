//! Crash recovery: the daemon killed (SIGKILL) while runs and a session are in
//! flight on docker. Its callers are told the calls may have run, and nothing
//! retries them; receipts signed before the kill verify; and a daemon's sweep (the
//! next one's at startup, a live one's periodic re-check, or any other daemon's on
//! this machine) removes every container the dead one left, while a live daemon's
//! session beside them is never touched.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options, SessionOptions};

use super::docker::{TOKEN, docker_env, fixture, signed_plugin, start};
use super::{host, scratch};

/// IDs of the containers daemon process `pid` made: the running ones, or (`all`)
/// every one, stopped or not.
fn containers(pid: u32, all: bool) -> Vec<String> {
    let o = Command::new("docker")
        .args(["ps", if all { "-aq" } else { "-q" }, "--no-trunc"])
        .args(["--filter", &format!("label=dev.plimsoll.owner=plimsoll-host-{pid}")])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect()
}

fn made_by(pid: u32) -> Vec<String> {
    containers(pid, true)
}

fn running(pid: u32) -> Vec<String> {
    containers(pid, false)
}

/// Waits until `pid` runs at least `n` containers.
fn await_running(pid: u32, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ids = running(pid);
        if ids.len() >= n || Instant::now() > deadline {
            return ids;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn attest(dir: &std::path::Path, args: &[&str]) -> Command {
    let mut cmd = host();
    cmd.current_dir(dir).arg("attest").args(args).env("PLIMSOLL_CALLER_TOKEN", TOKEN);
    cmd
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn a_daemon_killed_mid_run_leaves_nothing_behind_and_its_calls_may_have_run() {
    let Some(fx) = fixture("runc") else { return };
    let dir = scratch("crash");
    let (plugin, key) = signed_plugin(&fx, &dir);
    let mut env = docker_env(&fx, &plugin, &key, "runc");
    env.retain(|(k, _)| k != "SANDBOX_MAX_CONCURRENT");
    // One caller holds four calls at once.
    for (k, v) in [("SANDBOX_MAX_SESSIONS", "2"), ("SANDBOX_MAX_CONCURRENT", "8"), ("SANDBOX_PER_KEY_CONCURRENT", "8")]
    {
        env.push((k.into(), v.into()));
    }
    let d = start(&env);
    let url = d.url();
    // A daemon that stays alive beside it, holding a session.
    let other = start(&env);
    let rt = super::rt();
    let kept = Client::new(&other.url(), Some(TOKEN.to_string())).expect("client");
    let kept = rt.block_on(kept.open_session(&SessionOptions::default())).expect("open on the live daemon");
    let live = running(other.pid());
    assert_eq!(live.len(), 1, "{live:?}");

    // Receipts before the kill: two signed runs.
    assert!(attest(&dir, &["keygen", "--out", "harness.key"]).output().expect("keygen").status.success());
    std::fs::write(dir.join("quick.json"), r#"{"javascript":{"code":"console.log(6*7)"}}"#).expect("request");
    for _ in 0..2 {
        let o =
            attest(&dir, &["run", "--daemon", &url, "--key", "harness.key", "--bundle", "runs.jsonl", "quick.json"])
                .output()
                .expect("attest run");
        assert!(o.status.success(), "{}", text(&o));
    }

    // In flight at the kill: a signed run, a Rust client's run, a session's cell and
    // the published client's run, each sleeping well past the kill.
    let slow = r#"{"timeoutMs":60000,"project":{"steps":["sleep 50"]}}"#;
    std::fs::write(dir.join("slow.json"), slow).expect("request");
    let signed: Child =
        attest(&dir, &["run", "--daemon", &url, "--key", "harness.key", "--bundle", "runs.jsonl", "slow.json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("attest run");
    let python = super::python::python_cmd()
        .args(["-c", PY_SLOW])
        .env("URL", &url)
        .env("TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    let c = Client::new(&url, Some(TOKEN.to_string())).expect("client");
    let session = rt.block_on(c.open_session(&SessionOptions::default())).expect("open");
    let (run, cell) = rt.block_on(async {
        let opts = Options { timeout_ms: 60_000, ..Options::default() };
        let run = tokio::spawn({
            let c = c.clone();
            let opts = opts.clone();
            async move { c.run_project(&[], &["sleep 50"], &[], &opts).await }
        });
        let cell = tokio::spawn({
            let opts = opts.clone();
            async move { session.run_cell("python", "import time\ntime.sleep(50)", &[], &opts).await }
        });
        (run, cell)
    });
    // The session's container and the three runs' containers, all running.
    let pid = d.pid();
    let in_flight = await_running(pid, 4);
    assert_eq!(in_flight.len(), 4, "the daemon runs {} containers: {in_flight:?}", in_flight.len());
    std::thread::sleep(Duration::from_millis(500));
    let _ = d.kill();

    // Every caller is told the call may have run; none was retried.
    let run = rt.block_on(run).expect("join").expect_err("the run lost its daemon");
    assert!(run.may_have_run(), "{run}");
    assert!(matches!(run, plimsoll_client::Error::Transport { sent: true, .. }), "{run}");
    let cell = rt.block_on(cell).expect("join").expect_err("the cell lost its daemon");
    assert!(cell.may_have_run(), "{cell}");
    let o = signed.wait_with_output().expect("attest run");
    assert_eq!(o.status.code(), Some(70), "the harness says may have run: {}", text(&o));
    assert!(text(&o).contains("may have run"), "{}", text(&o));
    let o = python.wait_with_output().expect("python");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "may have run: TransportError\n", "{}", text(&o));

    // The receipts written before the kill verify, and nothing was added for the lost call.
    let o = attest(&dir, &["verify", "--pub", "harness.key.pub", "runs.jsonl"]).output().expect("verify");
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).ends_with("whole to its last checkpoint: 2 single runs\n"), "{}", text(&o));

    // The dead daemon's containers outlive it until a daemon sweeps them: the next
    // one as it starts, the live one on its periodic re-check, or any other daemon
    // on this machine (the suite runs many at once) as it starts. Whichever does,
    // none is left.
    let next = start(&env);
    let deadline = Instant::now() + Duration::from_secs(90);
    let still = loop {
        let still = made_by(pid);
        if still.is_empty() || Instant::now() > deadline {
            break still;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(still.is_empty(), "the sweeps left the dead daemon's containers: {still:?} (in flight: {in_flight:?})");
    // The live daemon's session was never judged: its container runs and it answers.
    assert_eq!(running(other.pid()), live, "the sweep touched a live daemon's container");
    let r = rt.block_on(kept.run_cell("python", "6 * 7", &[], &Options::default())).expect("the live session answers");
    assert_eq!(r.cell.expect("cell").stdout, b"42\n");
    // No call arrived at the new daemon: nothing retried.
    assert!(!next.log().iter().any(|l| l.contains(r#""op":"Run""#)), "{:?}", next.log());
}

/// A sleeping run through the published client; prints how it ended.
const PY_SLOW: &str = r#"
import os, plimsoll_client
from plimsoll_client import errors
c = plimsoll_client.Client(os.environ["URL"], token=os.environ["TOKEN"])
try:
    c.run_project({}, ["sleep 50"], timeout=60)
    print("answered")
except errors.PlimsollError as e:
    kind = "may have run" if e.not_dispatched is None else "not dispatched " + e.not_dispatched
    print(kind + ": " + type(e).__name__)
"#;
