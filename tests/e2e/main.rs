//! End to end: the real `plimsoll-host serve` on 127.0.0.1, driven by the Rust
//! client, by raw HTTP, and by the published Python client `plimsoll-client`.

mod agent_attach;
mod agentsandbox;
mod attest;
mod bench;
mod config;
mod conformance;
mod crash;
mod daemon;
mod deploy;
mod docker;
mod docker_sessions;
mod dockercloud;
mod e2b;
mod early_answers;
mod fakes;
mod grants;
mod jail;
mod mcp;
mod mcp_http;
mod mcp_tour;
mod openshell;
mod place;
mod plugins;
mod pr_receipt;
mod probes;
mod python;
mod raw;
mod session_suite;
mod sessions;
mod sims;
mod soak;
mod spec;
mod warm_pool;

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A scratch directory under the target directory.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("e2e-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The binary with an environment holding nothing of ours but what a test sets.
pub fn host() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_plimsoll-host"));
    c.env_clear();
    for k in ["PATH", "HOME"] {
        if let Ok(v) = std::env::var(k) {
            c.env(k, v);
        }
    }
    c.env("PLIMSOLL_CACHE_DIR", concat!(env!("CARGO_TARGET_TMPDIR"), "/plimsoll-cache"));
    c
}

/// Creates a clients file with callers `ids` (scope code:run) and returns their tokens.
pub fn callers(dir: &std::path::Path, ids: &[&str]) -> (std::path::PathBuf, Vec<String>) {
    let file = dir.join("clients.json");
    let tokens = ids
        .iter()
        .map(|id| {
            let o =
                host().args(["callers", "create", "--file"]).arg(&file).args(["--id", id]).output().expect("callers");
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8(o.stdout).expect("utf8").trim().to_string()
        })
        .collect();
    (file, tokens)
}

/// A wasm daemon with one caller `caller`, rate limiting off, and `extra` settings;
/// the daemon and the caller's token.
pub fn wasm_daemon(name: &str, caller: &str, extra: &[(&str, &str)]) -> (Daemon, String) {
    let dir = scratch(name);
    let (file, tokens) = callers(&dir, &[caller]);
    let file = file.display().to_string();
    let mut env =
        vec![("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_CLIENTS_FILE", file.as_str()), ("SANDBOX_RATE_PER_MIN", "0")];
    env.extend_from_slice(extra);
    (Daemon::start(&env), tokens[0].clone())
}

/// A running daemon, stopped on drop.
#[derive(Debug)]
pub struct Daemon {
    child: Child,
    /// `127.0.0.1:PORT` of the RPC listener.
    pub addr: String,
    /// The metrics listener.
    pub metrics: Option<String>,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts `serve` with `env` (on 127.0.0.1, ephemeral ports) and waits until it listens.
    pub fn start(env: &[(&str, &str)]) -> Daemon {
        let mut cmd = host();
        cmd.arg("serve").env("PLIMSOLL_ADDR", "127.0.0.1:0").env("PLIMSOLL_METRICS_ADDR", "127.0.0.1:0");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("spawn serve");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        // PLIMSOLL_E2E_ECHO=1 shows every daemon's log as it comes, to debug a suite.
        let echo = std::env::var_os("PLIMSOLL_E2E_ECHO").is_some();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if echo {
                    eprintln!("daemon: {line}");
                }
                sink.lock().expect("lock").push(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let listening = lines.lock().expect("lock").iter().find(|l| l.contains(r#""msg":"listening""#)).cloned();
            if let Some(l) = listening {
                let v: serde_json::Value = serde_json::from_str(&l).expect("json log line");
                let addr = v["addr"].as_str().expect("addr").to_string();
                let metrics = v["metrics_addr"].as_str().map(str::to_string);
                return Daemon { child, addr, metrics, lines };
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the daemon exited with {status}: {:?}", lines.lock().expect("lock"));
            }
            assert!(Instant::now() < deadline, "the daemon did not listen: {:?}", lines.lock().expect("lock"));
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Log lines so far.
    pub fn log(&self) -> Vec<String> {
        self.lines.lock().expect("lock").clone()
    }

    /// Sends SIGKILL, as a crash would, and waits until the process is gone.
    pub fn kill(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(50));
        self.log()
    }

    /// Sends SIGTERM and waits for the exit status, collecting the log.
    pub fn terminate(mut self) -> (Option<i32>, Vec<String>) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let status = self.child.wait().expect("wait");
        std::thread::sleep(Duration::from_millis(50));
        (status.code(), self.log())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `serve` expecting it to refuse to start; returns (exit code, stderr).
pub fn refused_start(env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = host();
    cmd.arg("serve").env("PLIMSOLL_ADDR", "127.0.0.1:0").env("PLIMSOLL_METRICS_ADDR", "off");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().expect("serve");
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// A runtime for async client calls in a sync test.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime")
}
