//! `plimsoll-host bench`: latency percentiles and throughput for one layer, with its
//! peer measured side by side in the same invocation when the peer is present:
//!
//! - `wasm`: fresh-store snippets in process; peer: `quickjs-emscripten` under node
//!   (a fresh QuickJS runtime, and a fresh WebAssembly instance, per run);
//! - `daemon`: `Run` round trips to a real `serve` on loopback, the client's checks
//!   included; no peer runs on this machine (hosted sandboxes are remote);
//! - `session`: Python cells in a wasm session, and in a docker session when the
//!   `SANDBOX_DOCKER_*` variables are set (with an idle session's memory); peer: a
//!   Jupyter kernel's cells through `jupyter_client`;
//! - `docker`: fresh-container snippets through the daemon (configured by the same
//!   `SANDBOX_DOCKER_*` variables as `serve`); peer: `docker run --rm` of the same
//!   image with the same locks;
//! - `sim`: a simulation run judged in process (JavaScript and C controllers) and a
//!   module table; peer: the original's node judge with a child node controller
//!   (see `sim.rs`);
//! - `place`: runs placed over 1, 2 and 4 wasm daemons by one client, the load
//!   growing with the set; the one-daemon series is the reference (see `place.rs`).
//!
//! It prints numbers and asserts nothing about them. Peers: `PLIMSOLL_BENCH_PEERS`
//! (default `target/bench-peers`) holds `node_modules/quickjs-emscripten`;
//! `PLIMSOLL_BENCH_PYTHON` (default `python3`) is an interpreter with
//! `jupyter_client` and `ipykernel`.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod place;
mod session;
mod sim;

use anyhow::{Context as _, bail};
use plimsoll_client::{Client, Options, SessionOptions};
use serde_json::{Value, json};

/// What to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// Fresh-store snippets in process, against quickjs-emscripten.
    Wasm,
    /// Round trips to a daemon on loopback.
    Daemon,
    /// Session cells, against a Jupyter kernel.
    Session,
    /// Fresh-container snippets, against `docker run --rm`.
    Docker,
    /// Simulation runs in process, against the original's node judge.
    Sim,
    /// Runs placed over 1, 2 and 4 daemons by one client (`--concurrency` per daemon, default 2).
    Place,
}

/// Arguments of `bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The layer to measure.
    #[arg(value_enum)]
    target: Target,
    /// Measured runs per series (warm-up runs come first and are not counted).
    #[arg(long)]
    runs: Option<usize>,
    /// Runs in flight at once (default 1; for `place`, per daemon, default 2).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// One measured series.
#[derive(Debug)]
struct Series {
    name: String,
    what: String,
    times: Vec<Duration>,
    wall: Duration,
    concurrency: usize,
}

/// A series' figures.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Stats {
    p50: f64,
    p95: f64,
    p99: f64,
    per_s: f64,
}

/// Nearest-rank percentiles (ms) and throughput of `times` measured over `wall`.
fn stats(times: &[Duration], wall: Duration) -> Stats {
    let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| if ms.is_empty() { 0.0 } else { ms[((ms.len() - 1) as f64 * q).round() as usize] };
    let per_s = if wall.is_zero() { 0.0 } else { times.len() as f64 / wall.as_secs_f64() };
    Stats { p50: p(0.50), p95: p(0.95), p99: p(0.99), per_s }
}

/// What one invocation found.
#[derive(Debug, Default)]
struct Report {
    series: Vec<Series>,
    /// (ours, peer): the p50 ratio ours / peer.
    ratios: Vec<(String, String)>,
    notes: Vec<String>,
}

impl Report {
    fn json(&self, target: Target) -> Value {
        let series: Vec<Value> = self
            .series
            .iter()
            .map(|s| {
                let st = stats(&s.times, s.wall);
                let per_s = (st.per_s > 0.0).then_some(st.per_s);
                json!({"name": s.name, "what": s.what, "runs": s.times.len(), "concurrency": s.concurrency,
                       "p50_ms": st.p50, "p95_ms": st.p95, "p99_ms": st.p99, "per_s": per_s})
            })
            .collect();
        let ratios: Vec<Value> = self
            .ratios
            .iter()
            .filter_map(|(a, b)| Some(json!({"ours": a, "peer": b, "p50_ratio": self.ratio(a, b)?})))
            .collect();
        json!({"target": format!("{target:?}").to_lowercase(), "machine": machine(), "series": series,
               "ratios": ratios, "notes": self.notes})
    }

    fn ratio(&self, a: &str, b: &str) -> Option<f64> {
        let find = |n: &str| self.series.iter().find(|s| s.name == n).map(|s| stats(&s.times, s.wall).p50);
        let (x, y) = (find(a)?, find(b)?);
        (y > 0.0).then(|| x / y)
    }

    fn print(&self) {
        println!("{:<44} {:>7} {:>10} {:>10} {:>10} {:>10}", "series", "runs", "p50 ms", "p95 ms", "p99 ms", "per s");
        for s in &self.series {
            let st = stats(&s.times, s.wall);
            // A series paced by something it does not time has no throughput.
            let per_s = if st.per_s > 0.0 { format!("{:.1}", st.per_s) } else { "-".into() };
            println!(
                "{:<44} {:>7} {:>10.3} {:>10.3} {:>10.3} {:>10}",
                s.name,
                s.times.len(),
                st.p50,
                st.p95,
                st.p99,
                per_s
            );
            println!("  {}", s.what);
        }
        for (a, b) in &self.ratios {
            if let Some(r) = self.ratio(a, b) {
                println!("ratio {a} / {b} (p50): {r:.3}");
            }
        }
        for n in &self.notes {
            println!("note: {n}");
        }
        let m = machine();
        println!("machine: {} cores, {} MiB memory", m["cores"], m["memory_mib"]);
    }
}

fn machine() -> Value {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().find_map(|l| l.strip_prefix("MemTotal:").map(str::to_string)))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024);
    json!({"cores": cores, "memory_mib": mem})
}

/// Task `t`'s part of `runs` split over `concurrency` tasks: the parts add up to `runs`.
fn share_of(runs: usize, concurrency: usize, t: usize) -> usize {
    runs / concurrency + usize::from(t < runs % concurrency)
}

/// Runs `op` `warm + runs` times over `concurrency` threads; keeps the last `runs`.
fn threaded(
    runs: usize,
    concurrency: usize,
    op: impl Fn() -> anyhow::Result<()> + Send + Sync + 'static,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let op = Arc::new(op);
    for _ in 0..runs.min(50) {
        op()?;
    }
    let started = Instant::now();
    let handles: Vec<_> = (0..concurrency)
        .map(|t| {
            let op = op.clone();
            let share = share_of(runs, concurrency, t);
            std::thread::spawn(move || -> anyhow::Result<Vec<Duration>> {
                let mut times = Vec::with_capacity(share);
                for _ in 0..share {
                    let at = Instant::now();
                    op()?;
                    times.push(at.elapsed());
                }
                Ok(times)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(runs);
    for h in handles {
        all.extend(h.join().map_err(|_| anyhow::anyhow!("a bench thread panicked"))??);
    }
    Ok((all, started.elapsed()))
}

/// A daemon this command started, killed when dropped.
struct Served {
    child: Child,
    url: String,
    token: String,
    /// The metrics listener, when the daemon was started with one.
    metrics: Option<String>,
}

impl Drop for Served {
    fn drop(&mut self) {
        // SIGTERM first: the daemon removes what its warm pool holds as it stops.
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// The value of an unlabelled metric now, read from the daemon's `/metrics`.
    fn metric(&self, name: &str) -> anyhow::Result<f64> {
        use std::io::{Read as _, Write as _};
        let addr = self.metrics.as_deref().context("the daemon was started without metrics")?;
        let mut s = std::net::TcpStream::connect(addr).context("connecting to /metrics")?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        body.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("/metrics has no {name}"))
    }

    /// Waits until the warm pool holds every container it aims to.
    async fn pool_full(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (ready, wanted) = (self.metric("plimsoll_warm_pool_ready")?, self.metric("plimsoll_warm_pool_wanted")?);
            if wanted > 0.0 && ready >= wanted {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the warm pool did not fill in 120 s ({ready} of {wanted})");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Starts `serve` for `provider`, admitting `concurrency` runs at once, with `extra`.
fn serve_admitting(provider: &str, concurrency: usize, extra: &[(&str, String)]) -> anyhow::Result<Served> {
    let c = concurrency.to_string();
    let mut env = vec![
        ("SANDBOX_PROVIDER", provider.to_string()),
        ("SANDBOX_MAX_CONCURRENT", c.clone()),
        ("SANDBOX_PER_KEY_CONCURRENT", c),
    ];
    env.extend_from_slice(extra);
    serve(&env)
}

/// Starts `serve` (this binary) on loopback with `env`, a fresh token and no rate limit.
fn serve(env: &[(&str, String)]) -> anyhow::Result<Served> {
    let mut raw = [0u8; 24];
    getrandom::fill(&mut raw).map_err(|e| anyhow::anyhow!("randomness: {e}"))?;
    let token = hex::encode(raw);
    let mut cmd = Command::new(std::env::current_exe().context("finding this binary")?);
    cmd.arg("serve")
        .env("PLIMSOLL_TOKEN", &token)
        .env("PLIMSOLL_ADDR", "127.0.0.1:0")
        .env("PLIMSOLL_METRICS_ADDR", "off")
        .env("SANDBOX_RATE_PER_MIN", "0")
        .env("PLIMSOLL_LOG_FORMAT", "json")
        .env_remove("PLIMSOLL_CLIENTS_FILE")
        .env_remove("PLIMSOLL_CONFIG")
        .env_remove("PLIMSOLL_BENCH_PEERS")
        .env_remove("PLIMSOLL_BENCH_PYTHON");
    // The docker provider's settings refuse to start any other provider.
    if !env.iter().any(|(k, v)| *k == "SANDBOX_PROVIDER" && v == "docker") {
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("SANDBOX_DOCKER_")) {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.stderr(Stdio::piped()).stdout(Stdio::null()).spawn().context("starting serve")?;
    let mut lines = BufReader::new(child.stderr.take().context("the daemon's log")?).lines();
    let mut last = String::new();
    let (addr, metrics) = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the daemon did not start: {last}");
        };
        if line.contains(r#""msg":"listening""#) {
            let v: Value = serde_json::from_str(&line)?;
            break (v["addr"].as_str().unwrap_or_default().to_string(), v["metrics_addr"].as_str().map(String::from));
        }
        last = line;
    };
    std::thread::spawn(move || for _ in lines {});
    Ok(Served { child, url: format!("http://{addr}"), token, metrics })
}

fn peers_dir() -> PathBuf {
    std::env::var_os("PLIMSOLL_BENCH_PEERS").map_or_else(|| PathBuf::from("target/bench-peers"), PathBuf::from)
}

/// The node side of the wasm peer: warm-up, then `RUNS` timings (ms) of a fresh
/// QuickJS runtime and of a fresh WebAssembly instance, each evaluating `6*7`.
const QUICKJS_EMSCRIPTEN: &str = r#"
import { getQuickJS, newQuickJSWASMModule } from "quickjs-emscripten";
const runs = Number(process.env.RUNS);
const time = async (n, f) => { const out = []; for (let i = 0; i < n; i++) { const t = process.hrtime.bigint(); await f(); out.push(Number(process.hrtime.bigint() - t) / 1e6); } return out; };
const Q = await getQuickJS();
const runtime = () => { const rt = Q.newRuntime(); const vm = rt.newContext(); const v = vm.dump(vm.unwrapResult(vm.evalCode("6*7"))); vm.dispose(); rt.dispose(); if (v !== 42) throw new Error("6*7 gave " + v); };
const instance = async () => { const M = await newQuickJSWASMModule(); const vm = M.newContext(); const v = vm.dump(vm.unwrapResult(vm.evalCode("6*7"))); vm.dispose(); if (v !== 42) throw new Error("6*7 gave " + v); };
await time(Math.min(runs, 50), runtime);
const a = await time(runs, runtime);
await time(5, instance);
const b = await time(Math.max(1, Math.floor(runs / 10)), instance);
console.log(JSON.stringify({ runtime: a, instance: b }));
"#;

/// A series run one at a time: its throughput is runs over their summed time.
fn sequential(name: &str, what: &str, times: Vec<Duration>) -> Series {
    let wall = times.iter().sum();
    Series { name: name.into(), what: what.into(), times, wall, concurrency: 1 }
}

/// Times in ms from a peer's JSON list.
fn durations(v: &Value) -> Vec<Duration> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_f64)
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
        .collect()
}

/// Runs a peer program, returning its stdout's JSON, or why it did not run.
fn peer(mut cmd: Command) -> Result<Value, String> {
    let out = cmd.output().map_err(|e| format!("could not start: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("failed").trim().to_string());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("printed no JSON: {e}"))
}

fn wasm(runs: usize, concurrency: usize, r: &mut Report) -> anyhow::Result<()> {
    let engine = plimsoll_runtime::Engine::new(&plimsoll_runtime::EngineConfig::default())?;
    let wasm = plimsoll_runtime::WasmProvider::new(&engine, plimsoll_runtime::WasmConfig::default())?;
    let (times, wall) = threaded(runs, concurrency, move || {
        let out = wasm.run_javascript("6*7", Duration::from_secs(5)).map_err(|e| anyhow::anyhow!("{e}"))?;
        anyhow::ensure!(out.exit_code == 0, "6*7 exited {}", out.exit_code);
        Ok(())
    })?;
    r.series.push(Series {
        name: "plimsoll wasm".into(),
        what: "6*7 in a fresh store and QuickJS instance (pre-initialised), in process".into(),
        times,
        wall,
        concurrency,
    });
    let dir = peers_dir();
    if !dir.join("node_modules/quickjs-emscripten").exists() {
        r.notes.push(format!(
            "peer quickjs-emscripten not found in {} (npm install --prefix {} quickjs-emscripten)",
            dir.display(),
            dir.display()
        ));
        return Ok(());
    }
    let mut cmd = Command::new("node");
    cmd.args(["--input-type=module", "-e", QUICKJS_EMSCRIPTEN]).current_dir(&dir).env("RUNS", runs.to_string());
    match peer(cmd) {
        Ok(v) => {
            for (key, name, what) in [
                (
                    "runtime",
                    "quickjs-emscripten runtime",
                    "6*7 in a fresh QuickJS runtime (one shared WebAssembly instance), node",
                ),
                (
                    "instance",
                    "quickjs-emscripten instance",
                    "6*7 in a fresh WebAssembly instance of QuickJS (own memory, as ours), node",
                ),
            ] {
                r.series.push(sequential(name, what, durations(&v[key])));
                r.ratios.push(("plimsoll wasm".into(), name.into()));
            }
        }
        Err(e) => r.notes.push(format!("peer quickjs-emscripten did not run: {e}")),
    }
    Ok(())
}

fn rt() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// `op` over `concurrency` tasks, each with its own client and its share of `runs`.
fn rounds<F, Fut>(served: &Served, runs: usize, concurrency: usize, op: F) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn(Client, usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = anyhow::Result<Vec<Duration>>> + Send,
{
    let rt = rt()?;
    let started = Instant::now();
    let all = rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..concurrency {
            let client = Client::new(&served.url, Some(served.token.clone()))?;
            let op = op.clone();
            let share = share_of(runs, concurrency, t);
            tasks.push(tokio::spawn(async move { op(client, share).await }));
        }
        let mut all = Vec::with_capacity(runs);
        for t in tasks {
            all.extend(t.await??);
        }
        Ok::<_, anyhow::Error>(all)
    })?;
    Ok((all, started.elapsed()))
}

fn daemon(runs: usize, concurrency: usize, r: &mut Report) -> anyhow::Result<()> {
    // The same calls against the engine in the daemon and in jailed workers, side by
    // side: a Run, a session's cell, and a session opened, used once and closed.
    for engine in ["in-process", "jailed"] {
        let served = serve_admitting(
            "wasm",
            concurrency,
            &[("SANDBOX_WASM_ENGINE", engine.to_string()), ("SANDBOX_MAX_SESSIONS", "64".into())],
        )?;
        let suffix = if engine == "jailed" { ", jailed engine" } else { "" };
        let (times, wall) = rounds(&served, runs, concurrency, move |client, share| async move {
            let opts = Options::default();
            for _ in 0..share.min(20) {
                client.run_javascript("6*7", &opts).await?;
            }
            let mut times = Vec::with_capacity(share);
            for _ in 0..share {
                let t = Instant::now();
                client.run_javascript("6*7", &opts).await?;
                times.push(t.elapsed());
            }
            Ok(times)
        })?;
        r.series.push(Series {
            name: format!("plimsoll daemon Run{suffix}"),
            what: format!(
                "one Run of 6*7 over a kept-alive loopback connection, the client's record checks included; the engine {engine}"
            ),
            times,
            wall,
            concurrency,
        });
        let (times, wall) = rounds(&served, runs, concurrency, move |client, share| async move {
            let opts = Options::default();
            let session = client.open_session(&SessionOptions::default()).await?;
            for _ in 0..share.min(20) {
                session.run_cell("javascript", "6*7", &[], &opts).await?;
            }
            let mut times = Vec::with_capacity(share);
            for _ in 0..share {
                let t = Instant::now();
                session.run_cell("javascript", "6*7", &[], &opts).await?;
                times.push(t.elapsed());
            }
            session.close().await?;
            Ok(times)
        })?;
        r.series.push(Series {
            name: format!("plimsoll daemon session cell{suffix}"),
            what: format!("one JavaScript cell 6*7 in a kept session interpreter; the engine {engine}"),
            times,
            wall,
            concurrency,
        });
        let opens = (runs / 10).max(concurrency);
        let (times, wall) = rounds(&served, opens, concurrency, move |client, share| async move {
            let opts = Options::default();
            let mut times = Vec::with_capacity(share);
            for _ in 0..share {
                let t = Instant::now();
                let session = client.open_session(&SessionOptions::default()).await?;
                session.run_cell("javascript", "6*7", &[], &opts).await?;
                session.close().await?;
                times.push(t.elapsed());
            }
            Ok(times)
        })?;
        r.series.push(Series {
            name: format!("plimsoll daemon session open, cell, close{suffix}"),
            what: format!(
                "a session opened, one JavaScript cell (its interpreter starts), closed; back to back; the engine {engine}"
            ),
            times,
            wall,
            concurrency,
        });
    }
    r.notes.push("no daemon peer runs here: hosted sandboxes are reached over the internet".into());
    Ok(())
}

fn docker(runs: usize, concurrency: usize, r: &mut Report) -> anyhow::Result<()> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let Some(image) = var("SANDBOX_DOCKER_IMAGE") else {
        bail!(
            "bench docker needs the docker provider's settings, as serve does: SANDBOX_DOCKER_IMAGE, SANDBOX_DOCKER_PLUGIN, SANDBOX_DOCKER_PLUGIN_KEYS, SANDBOX_DOCKER_PLUGIN_APPROVE"
        );
    };
    let runtime = var("SANDBOX_DOCKER_RUNTIME").unwrap_or_else(|| "runc".into());
    let cold = serve_admitting("docker", concurrency, &[])?;
    let (times, wall) = rounds(&cold, runs, concurrency, container_snippets(None))?;
    drop(cold);
    let name = format!("plimsoll docker {runtime}");
    r.series.push(Series {
        name: name.clone(),
        what: "console.log(1) in a fresh locked-down container (node), through the daemon, record checks included"
            .into(),
        times,
        wall,
        concurrency,
    });
    // The warm pool keeps `concurrency` containers per snippet shape.
    let pooled = Arc::new(serve_admitting(
        "docker",
        concurrency,
        &[("SANDBOX_WARM_POOL", concurrency.to_string()), ("PLIMSOLL_METRICS_ADDR", "127.0.0.1:0".into())],
    )?);
    let claims = |p: &Served| -> anyhow::Result<(f64, f64)> {
        let c = "plimsoll_warm_pool_claims_total";
        Ok((p.metric(&format!("{c}{{outcome=\"hit\"}}"))?, p.metric(&format!("{c}{{outcome=\"miss\"}}"))?))
    };
    let warm = format!("{name} warm pool");
    let before = claims(&pooled)?;
    let (times, _) = rounds(&pooled, runs, concurrency, container_snippets(Some(Arc::clone(&pooled))))?;
    let after = claims(&pooled)?;
    r.series.push(Series {
        name: warm.clone(),
        what: "the same through a warm pool (SANDBOX_WARM_POOL = concurrency): each run starts once the pool is full again; the refills are not timed, so no throughput (the next row's is what the pool sustains)".into(),
        times,
        wall: Duration::ZERO,
        concurrency,
    });
    r.notes.push(hits(&warm, before, after));
    let (times, wall) = rounds(&pooled, runs, concurrency, container_snippets(None))?;
    let later = claims(&pooled)?;
    let burst = format!("{warm}, back to back");
    r.series.push(Series {
        name: burst.clone(),
        what: "the same warm pool, runs back to back: a run that finds the pool empty makes its own container".into(),
        times,
        wall,
        concurrency,
    });
    r.notes.push(hits(&burst, after, later));
    drop(pooled);
    // A pool sized for the whole burst (each task's warm-up run included), full
    // before it starts: every claim should find a warm container.
    let size = (runs + concurrency).min(plimsoll_containers::pool::MAX_SIZE as usize);
    let sized = serve_admitting(
        "docker",
        concurrency,
        &[("SANDBOX_WARM_POOL", size.to_string()), ("PLIMSOLL_METRICS_ADDR", "127.0.0.1:0".into())],
    )?;
    rt()?.block_on(sized.pool_full())?;
    let before = claims(&sized)?;
    let (times, wall) = rounds(&sized, runs, concurrency, container_snippets(None))?;
    let after = claims(&sized)?;
    let full = format!("{name} warm pool of {size}, back to back");
    r.series.push(Series {
        name: full.clone(),
        what: format!(
            "the same, back to back, from a pool of {size} per shape filled first (SANDBOX_WARM_POOL={size})"
        ),
        times,
        wall,
        concurrency,
    });
    r.notes.push(hits(&full, before, after));
    drop(sized);
    let peer_cmd = || {
        let mut cmd = Command::new("docker");
        cmd.args(["run", "--rm", "-i", "--runtime", &runtime, "--network", "none", "--read-only", "--cap-drop", "ALL"])
            .args(["--security-opt", "no-new-privileges", "--user", "61000:61000", "--memory", "256m"])
            .args([
                "--pids-limit",
                "256",
                "--tmpfs",
                "/tmp:rw,noexec,nosuid,size=16m",
                &image,
                "node",
                "-e",
                "console.log(1)",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd
    };
    let mut peer_times = Vec::with_capacity(runs);
    for i in 0..=runs {
        let t = Instant::now();
        let out = peer_cmd().output().context("docker run")?;
        if !out.status.success() {
            r.notes.push(format!("peer docker run --rm failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
            return Ok(());
        }
        if i > 0 {
            peer_times.push(t.elapsed());
        }
    }
    r.series.push(sequential(
        &format!("docker run --rm {runtime}"),
        "console.log(1) in docker run --rm of the same image with the same locks, sequential",
        peer_times,
    ));
    let peer = format!("docker run --rm {runtime}");
    for ours in [name, warm, burst, full] {
        r.ratios.push((ours, peer.clone()));
    }
    Ok(())
}

/// The note on a pooled series: how many of the claims it made were hits.
fn hits(series: &str, before: (f64, f64), after: (f64, f64)) -> String {
    let (hit, miss) = (after.0 - before.0, after.1 - before.1);
    format!("{series}: {hit} of {} claims were pool hits (warm-ups included)", hit + miss)
}

/// One task's measured times, on its way.
type Timings = std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<Vec<Duration>>> + Send>>;

/// One task's share of fresh-container snippets (`console.log(1)`, each checked),
/// after a warm-up run; with `pace`, each run starts only once that daemon's warm
/// pool is full again (the wait is not timed).
fn container_snippets(pace: Option<Arc<Served>>) -> impl Fn(Client, usize) -> Timings + Send + Sync + Clone + 'static {
    move |client: Client, share: usize| {
        let pace = pace.clone();
        Box::pin(async move {
            let opts = Options::default();
            let mut times = Vec::with_capacity(share);
            for i in 0..=share {
                if let Some(p) = &pace {
                    p.pool_full().await?;
                }
                let t = Instant::now();
                let out = client.run_javascript("console.log(1)", &opts).await?;
                let code = out.javascript.map_or(-1, |j| j.exit_code);
                anyhow::ensure!(code == 0, "the snippet exited {code}");
                if i > 0 {
                    times.push(t.elapsed());
                }
            }
            Ok(times)
        })
    }
}

/// Runs `bench`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let concurrency = args.concurrency.unwrap_or(if args.target == Target::Place { 2 } else { 1 });
    if concurrency == 0 {
        bail!("--concurrency must be 1 or more");
    }
    let runs = args.runs.unwrap_or(match args.target {
        Target::Wasm | Target::Daemon => 1000,
        Target::Session => 300,
        Target::Docker | Target::Sim => 30,
        Target::Place => 400,
    });
    if runs == 0 {
        bail!("--runs must be 1 or more");
    }
    let mut report = Report::default();
    match args.target {
        Target::Wasm => wasm(runs, concurrency, &mut report)?,
        Target::Daemon => daemon(runs, concurrency, &mut report)?,
        Target::Session => session::session(runs, concurrency, &mut report)?,
        Target::Docker => docker(runs, concurrency, &mut report)?,
        Target::Sim => sim::sim(runs, &mut report)?,
        Target::Place => place::place(runs, concurrency, &mut report)?,
    }
    if args.json {
        println!("{}", report.json(args.target));
    } else {
        report.print();
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn shares_add_up_to_the_runs() {
        assert_eq!((0..3).map(|t| share_of(10, 3, t)).collect::<Vec<_>>(), [4, 3, 3]);
        assert_eq!((0..4).map(|t| share_of(2, 4, t)).sum::<usize>(), 2);
    }

    #[test]
    fn percentiles_are_nearest_rank_and_throughput_counts_the_wall() {
        let s = stats(&ms(&[5, 1, 4, 2, 3]), Duration::from_secs(1));
        assert_eq!((s.p50, s.p95, s.p99, s.per_s), (3.0, 5.0, 5.0, 5.0));
        let s = stats(&ms(&(1..=100).collect::<Vec<_>>()), Duration::from_secs(2));
        assert_eq!((s.p50, s.p95, s.p99, s.per_s), (51.0, 95.0, 99.0, 50.0));
        assert_eq!(stats(&[], Duration::ZERO), Stats { p50: 0.0, p95: 0.0, p99: 0.0, per_s: 0.0 });
    }

    #[test]
    fn ratios_compare_medians_and_skip_a_missing_peer() {
        let mut r = Report::default();
        r.series.push(Series {
            name: "a".into(),
            what: String::new(),
            times: ms(&[2, 2, 2]),
            wall: Duration::from_secs(1),
            concurrency: 1,
        });
        r.series.push(Series {
            name: "b".into(),
            what: String::new(),
            times: ms(&[8, 8, 8]),
            wall: Duration::from_secs(1),
            concurrency: 1,
        });
        r.ratios.push(("a".into(), "b".into()));
        r.ratios.push(("a".into(), "absent".into()));
        let v = r.json(Target::Wasm);
        assert_eq!(v["ratios"], json!([{"ours": "a", "peer": "b", "p50_ratio": 0.25}]));
        assert_eq!(v["series"][0]["p50_ms"], 2.0);
        assert_eq!(v["target"], "wasm");
    }

    #[test]
    fn peer_times_are_read_from_json_milliseconds() {
        assert_eq!(durations(&json!([1.5, 2, "x"])), vec![Duration::from_micros(1500), Duration::from_millis(2)]);
        assert!(durations(&json!({"not": "a list"})).is_empty());
    }
}
