//! The session agent seated as `plimsoll-agent attach`: started inside a sandbox
//! image container by `docker exec` (as a vendor's process manager starts it in a
//! remote sandbox), not as PID 1, and spoken to over its stdin and stdout/stderr
//! with the channel's MACs (`plimsoll-plugin-agent`, what the plugins use). Its
//! cells keep state, its sweep kills what a call leaves but spares what the guest
//! may not signal (a root process beside it), its storage is the guest's files,
//! and it refuses to run as root. Needs what the docker suite needs.

use std::io::Write as _;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plimsoll_plugin_agent::{Trailer, check_answer, frame};

use super::docker::fixture;

const KEY: [u8; 32] = [0x5a; 32];

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().expect("docker")
}

/// A container of the sandbox image whose main process is not the agent.
struct Sandbox(String);

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.0]);
    }
}

/// The agent, attached through `docker exec`, with both output streams gathered.
struct Agent {
    child: Child,
    stdin: ChildStdin,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    calls: u32,
}

fn gather(mut from: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let to = Arc::clone(&buf);
    std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = from.read(&mut chunk) {
            if n == 0 {
                break;
            }
            to.lock().expect("buffer").extend_from_slice(&chunk[..n]);
        }
    });
    buf
}

impl Agent {
    fn attach(sandbox: &Sandbox, word: &str) -> Agent {
        let mut child = Command::new("docker")
            .args(["exec", "-i", "-u", "61000:61000", "-w", "/work", &sandbox.0])
            .args(["/opt/plimsoll/plimsoll-agent", "attach", word])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("docker exec");
        let stdin = child.stdin.take().expect("stdin");
        let out = gather(child.stdout.take().expect("stdout"));
        let err = gather(child.stderr.take().expect("stderr"));
        let agent = Agent { child, stdin, out, err, calls: 0 };
        agent.wait_for(|out, _| out.ends_with(word.as_bytes()), "the start word");
        agent.out.lock().expect("out").clear();
        agent
    }

    fn wait_for(&self, done: impl Fn(&[u8], &[u8]) -> bool, what: &str) {
        let give_up = Instant::now() + Duration::from_secs(60);
        loop {
            if done(&self.out.lock().expect("out"), &self.err.lock().expect("err")) {
                return;
            }
            assert!(
                Instant::now() < give_up,
                "no {what} from the agent: stdout {:?}, stderr {:?}",
                String::from_utf8_lossy(&self.out.lock().expect("out")),
                String::from_utf8_lossy(&self.err.lock().expect("err"))
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// One request and its checked answer: stdout and the status line.
    fn call(&mut self, kind: &str, mut request: serde_json::Value) -> (String, String, Trailer) {
        self.calls += 1;
        let nonce = format!("{:032x}", 0xfeed_0000_u64 + u64::from(self.calls));
        request["nonce"] = nonce.clone().into();
        request["kind"] = kind.into();
        request["timeoutMs"] = 20_000.into();
        request["maxOutput"] = (1 << 20).into();
        self.stdin.write_all(&frame(&KEY, request.to_string().as_bytes())).expect("request");
        let end = format!("\n{nonce}.\n").into_bytes();
        self.wait_for(|o, e| o.ends_with(&end) && e.ends_with(&end), "answer");
        let mut stdout = std::mem::take(&mut *self.out.lock().expect("out"));
        let mut stderr = std::mem::take(&mut *self.err.lock().expect("err"));
        stdout.truncate(stdout.len() - end.len());
        stderr.truncate(stderr.len() - end.len());
        let trailer = check_answer(&KEY, &nonce, &stdout, &mut stderr).expect("the agent's own answer");
        (String::from_utf8_lossy(&stdout).into_owned(), String::from_utf8_lossy(&stderr).into_owned(), trailer)
    }

    fn cell(&mut self, language: &str, code: &str) -> (String, Trailer) {
        let n = self.calls + 1;
        let (out, err, t) =
            self.call("cell", serde_json::json!({"language": language, "code": code, "cell": n, "files": []}));
        assert_eq!((t.exit, t.refused.as_deref()), (0, None), "{language} cell {code:?}: {err}");
        (out, t)
    }
}

#[test]
fn an_attached_agent_keeps_cells_sweeps_only_the_guest_and_walks_its_storage() {
    let Some(fx) = fixture("runc") else { return };
    let name = format!("plimsoll-attach-{}", std::process::id());
    let run = docker(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "none",
        "--read-only",
        "--user",
        "0",
        "--tmpfs",
        "/work:rw,exec,size=64m,uid=61000,gid=61000,mode=0755",
        "--tmpfs",
        "/tmp:rw,exec,size=64m,mode=1777",
        fx.image(),
        "sleep",
        "infinity",
    ]);
    assert!(run.status.success(), "docker run: {}", String::from_utf8_lossy(&run.stderr));
    let sandbox = Sandbox(name);

    let as_root = docker(&["exec", "-u", "0", &sandbox.0, "/opt/plimsoll/plimsoll-agent", "attach", "w"]);
    assert_eq!(as_root.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&as_root.stderr).contains("a hosted agent (attach, listen) refuses to run as root"),
        "{}",
        String::from_utf8_lossy(&as_root.stderr)
    );

    // A process the guest may not signal, as a vendor's own are.
    let vendor = docker(&["exec", "-d", "-u", "0", &sandbox.0, "sleep", "600"]);
    assert!(vendor.status.success());
    let mut agent = Agent::attach(&sandbox, "attached-3f9c");
    let (_, _, ready) = agent.call("ready", serde_json::json!({"key": hex::encode(KEY)}));
    assert_eq!(ready.leftover, 0, "another user's process is not the session's");

    agent.cell("python", "x = 41");
    let (out, t) = agent.cell("python", "x + 1");
    assert_eq!((out.as_str(), t.started), ("42\n", false), "the interpreter kept its state");

    let (pid, _) = agent.cell(
        "javascript",
        "require('child_process').spawn('setsid', ['sleep', '300'], {detached: true, stdio: 'ignore'}).pid",
    );
    let check = format!(
        "import os, time\ndef gone(p):\n    for _ in range(40):\n        try:\n            if open(f'/proc/{{p}}/stat').read().rsplit(') ', 1)[1][0] == 'Z':\n                return True\n        except OSError:\n            return True\n        time.sleep(0.05)\n    return False\ngone({})",
        pid.trim()
    );
    let (gone, t) = agent.cell("python", &check);
    assert_eq!((gone.as_str(), t.leftover), ("True\n", 0), "the sweep killed what the last call left");
    let top = docker(&["top", &sandbox.0]);
    let top = String::from_utf8_lossy(&top.stdout);
    assert!(top.lines().any(|l| l.contains("sleep 600")), "the root process lives on:\n{top}");

    let (_, t) = agent.cell("python", "open('/work/fill', 'wb').write(b'x' * (3 << 20))");
    assert!((3072..3072 + 256).contains(&t.disk_used_kb), "walked storage {} KiB", t.disk_used_kb);
    let (_, t) = agent.cell("python", "import os\nos.remove('/work/fill')");
    assert!(t.disk_used_kb < 256, "walked storage after the delete {} KiB", t.disk_used_kb);

    // A snippet's own grant settings reach its process alone; any other
    // variable, or settings on another kind of call, are refused by name.
    let show = "console.log(process.env.PLIMSOLL_HOST_GLOBAL + ' ' + process.env.PLIMSOLL_HOST_GUARD)";
    let env = serde_json::json!({"PLIMSOLL_HOST_GLOBAL": "api", "PLIMSOLL_HOST_GUARD": "https://guard.test/g"});
    let (out, err, t) = agent.call("snippet", serde_json::json!({"language": "javascript", "code": show, "env": env}));
    assert_eq!((out.as_str(), t.exit, t.refused.as_deref()), ("api https://guard.test/g\n", 0, None), "{err}");
    let (out, _) = agent.cell("javascript", "String(process.env.PLIMSOLL_HOST_GLOBAL)");
    assert_eq!(out, "'undefined'\n", "the kept interpreter never saw the snippet's settings");
    let preload = serde_json::json!({"LD_PRELOAD": "/tmp/x.so"});
    let (_, _, t) = agent.call("snippet", serde_json::json!({"language": "python", "code": "1", "env": preload}));
    let why = t.refused.expect("refused");
    assert!(why.starts_with("the snippet's env names \"LD_PRELOAD\"; only a grant's client settings"), "{why}");
    let n = agent.calls + 1;
    let cell = serde_json::json!({"language": "python", "code": "1", "cell": n, "files": [], "env": env});
    let (_, _, t) = agent.call("cell", cell);
    assert_eq!(t.refused.as_deref(), Some("a cell call takes no env"));

    drop(agent.stdin);
    let status = agent.child.wait().expect("the agent ends with its input");
    assert!(status.success(), "{status}");
}
