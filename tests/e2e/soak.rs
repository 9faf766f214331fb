//! Soak: 1,000 mixed calls sent at once to a wasm daemon and a docker (runc)
//! daemon: snippets, projects, session cells and granted snippets. Every call's
//! code prints its own nonce, so an answer carrying another call's output (crosstalk)
//! or no answer at all (a lost call) fails the test; a call the daemon sheds for
//! capacity is sent again, and counted. The figures are printed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Error, Options, Session, SessionOptions};
use plimsoll_core::Reason;
use plimsoll_core::wire::{JavaScriptRun, RunRequest, RunResponse};

use super::docker::{TOKEN, docker_env, fixture, signed_plugin, start};
use super::grants::{DemoApi, JWT_SECRET, profiles};
use super::{Daemon, callers, scratch};

/// What one call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    WasmSnippet,
    WasmGranted,
    WasmCell,
    RuncSnippet,
    RuncProject,
    RuncCell,
}

/// How many of each kind (1,000 in all), and for cells how many sessions carry them.
const MIX: [(Kind, usize); 6] = [
    (Kind::WasmSnippet, 400),
    (Kind::WasmGranted, 100),
    (Kind::WasmCell, 100),
    (Kind::RuncSnippet, 200),
    (Kind::RuncProject, 100),
    (Kind::RuncCell, 100),
];
const SESSIONS_PER_PROVIDER: usize = 4;

/// One call's outcome: its kind, latency, and how often it was shed first.
struct Done {
    kind: Kind,
    latency: Duration,
    shed: u32,
}

/// A fresh nonce: the call's identity in its own output.
fn nonce() -> String {
    let mut b = [0u8; 12];
    getrandom::fill(&mut b).expect("randomness");
    hex::encode(b)
}

/// Sends `call` until the daemon takes it: a capacity refusal ran nothing and is
/// sent again; any other error fails the soak.
async fn until_taken<F, Fut>(what: &str, call: F) -> (RunResponse, u32)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<RunResponse, Error>>,
{
    let mut shed = 0;
    loop {
        match call().await {
            Ok(r) => return (r, shed),
            Err(e) if e.not_dispatched() == Some(Reason::Capacity) => {
                shed += 1;
                tokio::time::sleep(Duration::from_millis(20 + u64::from(shed.min(20)) * 25)).await;
            }
            Err(e) => panic!("{what}: lost: {e} (may have run: {})", e.may_have_run()),
        }
    }
}

fn stdout_of(r: &RunResponse) -> String {
    let bytes = match (&r.javascript, &r.project, &r.cell) {
        (Some(js), _, _) => &js.stdout,
        (_, Some(p), _) => &p.steps.first().expect("a step").stdout,
        (_, _, Some(c)) => &c.stdout,
        _ => panic!("an answer without a result: {r:?}"),
    };
    String::from_utf8_lossy(bytes).into_owned()
}

async fn one(kind: Kind, wasm: Arc<Client>, runc: Arc<Client>) -> Done {
    let n = nonce();
    let started = Instant::now();
    let opts = Options { timeout_ms: 30_000, ..Options::default() };
    let (r, shed, want) = match kind {
        Kind::WasmSnippet | Kind::RuncSnippet => {
            let c = if kind == Kind::WasmSnippet { &wasm } else { &runc };
            let code = format!("console.log('{n}')");
            let (r, shed) = until_taken("snippet", || c.run_javascript(&code, &opts)).await;
            (r, shed, format!("{n}\n"))
        }
        Kind::WasmGranted => {
            let item = 1 + n.as_bytes()[0] as usize % 6;
            let code = format!("host.get('/items/*', [{item}]).then((i) => console.log('{n}', i.id))");
            let req = RunRequest {
                timeout_ms: 30_000,
                javascript: Some(JavaScriptRun { code, grant_profile: "inventory".into() }),
                ..RunRequest::default()
            };
            let (r, shed) = until_taken("granted snippet", || wasm.run(req.clone())).await;
            (r, shed, format!("{n} {item}\n"))
        }
        Kind::RuncProject => {
            let script = format!("print('{n}')");
            let files = [("p.py", script.as_str())];
            let (r, shed) = until_taken("project", || runc.run_project(&files, &["python3 p.py"], &[], &opts)).await;
            (r, shed, format!("{n}\n"))
        }
        Kind::WasmCell | Kind::RuncCell => unreachable!("cells run in their sessions"),
    };
    assert_eq!(stdout_of(&r), want, "{kind:?}: crosstalk or a wrong answer");
    Done { kind, latency: started.elapsed(), shed }
}

/// `count` cells in `language`, one after another, in one session: each sets and
/// prints its own nonce, and the session's last value is read back at the end, so
/// a cell that saw another session's state fails.
async fn cells(kind: Kind, language: &'static str, s: Session, count: usize) -> Vec<Done> {
    let mut done = Vec::new();
    let opts = Options::default();
    for _ in 0..count {
        let n = nonce();
        let started = Instant::now();
        let code = match language {
            "python" => format!("last = '{n}'\nprint(last)"),
            _ => format!("var last = '{n}'; console.log(last)"),
        };
        let (r, shed) = until_taken("cell", || s.run_cell(language, &code, &[], &opts)).await;
        assert_eq!(stdout_of(&r), format!("{n}\n"), "{kind:?}: crosstalk or a wrong answer");
        done.push(Done { kind, latency: started.elapsed(), shed });
    }
    let read = if language == "python" { "print(last)" } else { "console.log(last)" };
    let (r, _) = until_taken("the last read-back", || s.run_cell(language, read, &[], &opts)).await;
    assert!(stdout_of(&r).len() == 25, "the session kept its own state: {:?}", stdout_of(&r));
    s.close().await.expect("close");
    done
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[test]
fn a_thousand_mixed_calls_at_once_all_answer_with_their_own_output() {
    let Some(fx) = fixture("runc") else { return };
    let api = DemoApi::start(&[]);
    let dir = scratch("soak");
    let (clients, tokens) = callers(&dir, &["alice"]);
    let grants = profiles(&dir, &api.url);
    let (clients, grants) = (clients.display().to_string(), grants.display().to_string());
    let wasm_d = Daemon::start(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_CLIENTS_FILE", &clients),
        ("PLIMSOLL_GRANTS_FILE", &grants),
        ("DEMO_JWT_SECRET", JWT_SECRET),
        ("SANDBOX_MAX_SESSIONS", "8"),
        ("SANDBOX_RATE_PER_MIN", "0"),
        ("SANDBOX_MAX_CONCURRENT", "32"),
        ("SANDBOX_PER_KEY_CONCURRENT", "32"),
    ]);
    let (plugin, key) = signed_plugin(&fx, &dir);
    let mut env = docker_env(&fx, &plugin, &key, "runc");
    env.retain(|(k, _)| k != "SANDBOX_MAX_CONCURRENT");
    for (k, v) in [
        ("SANDBOX_MAX_SESSIONS", "8"),
        ("SANDBOX_MAX_CONCURRENT", "8"),
        ("SANDBOX_PER_KEY_CONCURRENT", "8"),
        ("SANDBOX_WARM_POOL", "4"),
    ] {
        env.push((k.into(), v.into()));
    }
    let runc_d = start(&env);

    let rt = super::rt();
    let wasm = Arc::new(Client::new(&wasm_d.url(), Some(tokens[0].clone())).expect("client"));
    let runc = Arc::new(Client::new(&runc_d.url(), Some(TOKEN.to_string())).expect("client"));
    let started = Instant::now();
    let done: Vec<Done> = rt.block_on(async {
        // The sessions open first; then everything goes at once.
        let mut sessions = Vec::new();
        for (kind, count) in MIX.into_iter().filter(|(k, _)| matches!(k, Kind::WasmCell | Kind::RuncCell)) {
            let c = if kind == Kind::WasmCell { &wasm } else { &runc };
            for _ in 0..SESSIONS_PER_PROVIDER {
                let s = c.open_session(&SessionOptions::default()).await.expect("open");
                sessions.push((kind, s, count / SESSIONS_PER_PROVIDER));
            }
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (kind, s, count) in sessions {
            // JavaScript cells on wasm, Python in the containers: both kept interpreters.
            let language = if kind == Kind::WasmCell { "javascript" } else { "python" };
            tasks.spawn(cells(kind, language, s, count));
        }
        for (kind, count) in MIX.into_iter().filter(|(k, _)| !matches!(k, Kind::WasmCell | Kind::RuncCell)) {
            for _ in 0..count {
                let (wasm, runc) = (Arc::clone(&wasm), Arc::clone(&runc));
                tasks.spawn(async move { vec![one(kind, wasm, runc).await] });
            }
        }
        let mut all = Vec::new();
        while let Some(r) = tasks.join_next().await {
            all.extend(r.expect("a call's task"));
        }
        all
    });
    let wall = started.elapsed();

    assert_eq!(done.len(), 1000, "every call answered");
    let shed: u32 = done.iter().map(|d| d.shed).sum();
    // Straight to the process's stderr: the harness would hold back a passing test's.
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "soak: 1000 calls answered in {:.1} s ({:.0}/s), each with its own nonce; {shed} sheds for capacity sent again",
        wall.as_secs_f64(),
        1000.0 / wall.as_secs_f64()
    );
    for (kind, _) in MIX {
        let mut l: Vec<Duration> = done.iter().filter(|d| d.kind == kind).map(|d| d.latency).collect();
        l.sort();
        let _ = writeln!(
            err,
            "soak: {kind:?} x{}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (from sending to the checked answer, sheds included)",
            l.len(),
            percentile(&l, 0.5),
            percentile(&l, 0.99),
            percentile(&l, 1.0)
        );
    }
    let granted = api.await_seen(MIX[1].1, "/items");
    assert!(granted.iter().all(|s| s.2 == "alice" && s.3 == 200), "every granted call reached the API as alice");
}
