//! `bench sim`: the cart-pole balance run (20 s at 10 ms, 2,000 ticks) judged
//! in-process with a JavaScript and a C controller, and, side by side in the same
//! invocation, the original's architecture as the peer: node running the plant as a
//! core wasm module and the controller as a child `node` process over pipes, the
//! judge loop in JavaScript. Then a module table: 100 VanDerPol rows of 6,000 steps.
//!
//! The peer's plant (`peer/cartpole.c`, built here with clang-19 for wasm32-wasi)
//! computes the same bits as ours, and every series checks the published
//! fingerprint, so the figures compare the same work.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use base64::Engine as _;
use plimsoll_core::provider::Provider;
use plimsoll_core::wire::{ProjectFile, ProjectOutcome, ProjectRun};
use plimsoll_runtime::{Engine, EngineConfig, WasmConfig, WasmProvider};
use plimsoll_sim::{ModelName, model};

use super::{Report, durations, peer, sequential};

/// The original's published fingerprint of the accepted balance run.
const ORACLE: &str = "63cfd676924a3896127d60c97333677f3b3c804dd764dba001121f6c234a937f";

/// This checkout (the examples and the peer's sources).
const CHECKOUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

const PEER_PLANT: &str = include_str!("peer/cartpole.c");
const PEER_JUDGE: &str = include_str!("peer/judge.mjs");

/// Compiles C for the judge (a wasm32-wasi reactor with wasi-libc's maths linked in).
fn clang(source: &Path, out: &Path) -> Result<(), String> {
    let o = Command::new("clang-19")
        .args(["--target=wasm32-wasi", "-mexec-model=reactor", "-O2", "-ffp-contract=off", "-Wall", "-Werror", "-o"])
        .arg(out)
        .arg(source)
        .output()
        .map_err(|e| format!("clang-19 is not available ({e}); .ci/install installs it"))?;
    if !o.status.success() {
        return Err(format!("clang-19 failed: {}", String::from_utf8_lossy(&o.stderr)));
    }
    Ok(())
}

/// One judged cart-pole run through the provider's project path, checked.
fn judged(wasm: &WasmProvider, file: &str, content: &str) -> anyhow::Result<()> {
    let project = ProjectRun {
        files: vec![ProjectFile { path: file.into(), content: content.into() }],
        steps: vec![format!("plimsoll-judge --plant cartpole --controller {file}")],
        artifacts: vec!["trajectory.bin".into()],
        ..ProjectRun::default()
    };
    let ran = wasm.run_project(&project, Duration::from_secs(30), None, None).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let r = ran.result;
    let step = r.steps.first().context("no step ran")?;
    if r.outcome != ProjectOutcome::Completed || step.exit_code != 0 {
        bail!("the judge failed: {}", String::from_utf8_lossy(&step.stderr));
    }
    let out = String::from_utf8_lossy(&step.stdout);
    if !out.contains(ORACLE) {
        bail!("the run did not give the published fingerprint: {out}");
    }
    Ok(())
}

fn timed(runs: usize, mut op: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Vec<Duration>> {
    for _ in 0..runs.min(20) {
        op()?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let at = Instant::now();
        op()?;
        times.push(at.elapsed());
    }
    Ok(times)
}

/// Runs `bench sim`.
pub(super) fn sim(runs: usize, r: &mut Report) -> anyhow::Result<()> {
    let engine = Engine::new(&EngineConfig::default()).context("starting the wasm engine")?;
    let wasm = WasmProvider::new(&engine, WasmConfig::default()).context("loading the QuickJS component")?;
    let examples = Path::new(CHECKOUT).join("examples/sims/cartpole");
    let js = std::fs::read_to_string(examples.join("accepted.js")).context("reading the accepted controller")?;

    let times = timed(runs, || judged(&wasm, "accepted.js", &js))?;
    r.series.push(sequential(
        "sim cartpole, JavaScript, in process",
        "2,000 ticks: QuickJS controller and plant component, fresh stores, the project path",
        times,
    ));

    let scratch = std::env::temp_dir().join(format!("plimsoll-bench-sim-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let compiled = scratch.join("accepted.wasm");
    match clang(&examples.join("accepted.c"), &compiled) {
        Ok(()) => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&compiled)?);
            let times = timed(runs, || judged(&wasm, "accepted.wasm.b64", &b64))?;
            r.series.push(sequential(
                "sim cartpole, C module, in process",
                "2,000 ticks: the accepted law in C (a core module), plant component, fresh stores",
                times,
            ));
        }
        Err(e) => r.notes.push(format!("no C series: {e}")),
    }

    match node_peer(&scratch, &examples.join("accepted.js"), runs) {
        Ok(times) => {
            r.series.push(sequential(
                "peer: node judge, plant module, node child",
                "2,000 ticks: the original's architecture (a child node process over pipes)",
                times,
            ));
            r.ratios.push((
                "sim cartpole, JavaScript, in process".into(),
                "peer: node judge, plant module, node child".into(),
            ));
        }
        Err(e) => r.notes.push(format!("no peer: {e}")),
    }

    if std::env::var("SANDBOX_DOCKER_IMAGE").is_ok_and(|v| !v.is_empty()) {
        docker(runs, &js, r)?;
    } else {
        r.notes.push(
            "no docker series: set the docker provider's settings (SANDBOX_DOCKER_*), as for bench docker".into(),
        );
    }

    // 100 rows of 6,000 steps is 9.6 MB of results, past the protocol's 8 MiB
    // budget, so the table runner is driven directly here.
    let rows: Vec<Vec<f64>> = (0..100).map(|i| vec![0.1 + (4.9 * f64::from(i)) / 99.0, 2.0, 0.0]).collect();
    let tables = runs.clamp(3, 10);
    let library = wasm.sims().library();
    let times = timed(tables, || {
        let deadline = Instant::now() + Duration::from_secs(60);
        let run = model::run_table(library, ModelName::VanDerPol, &rows, 60.0, 0.01, u64::MAX, deadline)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        anyhow::ensure!(run.rows.iter().all(|row| row.status == 6000), "a row did not complete");
        Ok(())
    })?;
    let p50 = super::stats(&times, times.iter().sum()).p50;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    r.series.push(sequential(
        "module table, 100 VanDerPol rows x 6,000 steps",
        "in process, one fresh instance per row, rows spread over the cores",
        times,
    ));
    r.notes.push(format!(
        "module table: {:.0} rows per second on {cores} cores (p50 of {tables} tables)",
        100.0 / (p50 / 1000.0)
    ));
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// The same run through a docker daemon with a warm pool of one (the judge in the
/// sandbox image, the project runner started ahead), each run once the pool is full
/// again; the refill is not timed.
fn docker(runs: usize, js: &str, r: &mut Report) -> anyhow::Result<()> {
    let runtime = std::env::var("SANDBOX_DOCKER_RUNTIME").unwrap_or_else(|_| "runc".into());
    let served = std::sync::Arc::new(super::serve_admitting(
        "docker",
        1,
        &[("SANDBOX_WARM_POOL", "1".into()), ("PLIMSOLL_METRICS_ADDR", "127.0.0.1:0".into())],
    )?);
    let hits = |s: &super::Served| s.metric("plimsoll_warm_pool_claims_total{outcome=\"hit\"}");
    let before = hits(&served)?;
    let client =
        plimsoll_client::Client::new(&served.url, Some(served.token.clone())).map_err(|e| anyhow::anyhow!("{e}"))?;
    let rt = super::rt()?;
    let step = "plimsoll-judge --plant cartpole --controller accepted.js";
    let opts = plimsoll_client::Options { timeout_ms: 30_000, ..plimsoll_client::Options::default() };
    let mut times = Vec::with_capacity(runs);
    for i in 0..=runs {
        rt.block_on(served.pool_full())?;
        let t = Instant::now();
        let resp = rt.block_on(client.run_project(&[("accepted.js", js)], &[step], &["trajectory.bin"], &opts))?;
        let elapsed = t.elapsed();
        let p = resp.project.context("no project result")?;
        let out = p.steps.first().map(|s| String::from_utf8_lossy(&s.stdout).into_owned()).unwrap_or_default();
        anyhow::ensure!(out.contains(ORACLE), "the docker run did not give the published fingerprint: {p:?}");
        if i > 0 {
            times.push(elapsed);
        }
    }
    let hit = hits(&served)? - before;
    let name = format!("sim cartpole, JavaScript, docker {runtime}, warm pool");
    r.series.push(super::Series {
        name: name.clone(),
        what: "the same project through a daemon: the judge in the sandbox image, the runner waiting in a pooled \
               container; each run once the pool is full again (refills not timed)"
            .into(),
        times,
        wall: Duration::ZERO,
        concurrency: 1,
    });
    r.notes.push(format!("{name}: {hit} of {} claims were pool hits (the warm-up included)", runs + 1));
    r.ratios.push((name, "peer: node judge, plant module, node child".into()));
    Ok(())
}

/// The peer: builds its plant with clang-19 and times its judge under node.
fn node_peer(scratch: &Path, controller: &Path, runs: usize) -> Result<Vec<Duration>, String> {
    let dir: PathBuf = scratch.join("peer");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let source = dir.join("cartpole.c");
    std::fs::write(&source, PEER_PLANT).map_err(|e| e.to_string())?;
    let plant = dir.join("cartpole.wasm");
    clang(&source, &plant)?;
    let judge = dir.join("judge.mjs");
    std::fs::write(&judge, PEER_JUDGE).map_err(|e| e.to_string())?;
    let mut cmd = Command::new("node");
    cmd.arg(&judge).env("PLANT", &plant).env("CONTROLLER", controller).env("RUNS", runs.to_string());
    let v = peer(cmd)?;
    if v["fingerprint"] != ORACLE {
        return Err(format!("the peer computed another trajectory: {}", v["fingerprint"]));
    }
    Ok(durations(&v["runs"]))
}
