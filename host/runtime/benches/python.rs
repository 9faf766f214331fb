//! In-process latency and memory of Python at the process tier: the CPython
//! component's size and cache load time, fresh runs of the project `python3 main.py`
//! (`print(6*7)`: store, instance from the snapshot, interpreter, run, teardown)
//! side by side with QuickJS's `6*7`, session cells in a kept interpreter, and the
//! resident memory of live interpreters. Prints medians and tails; asserts nothing.
//!
//! Needs `guests/python/build.sh`. `cargo bench -p plimsoll-runtime --bench python [-- RUNS]`
//! (default 300 runs).

use std::time::{Duration, Instant};

use plimsoll_core::provider::Provider as _;
use plimsoll_core::wire::{ProjectFile, ProjectRun};
use plimsoll_runtime::{Engine, EngineConfig, PythonGuest, WasmConfig, WasmProvider};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn report(name: &str, mut times: Vec<Duration>) -> Duration {
    times.sort();
    let p50 = percentile(&times, 0.50);
    println!("{name:<34} p50 {}  p95 {}  p99 {}", ms(p50), ms(percentile(&times, 0.95)), ms(percentile(&times, 0.99)));
    p50
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let runs: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(300);
    let path = plimsoll_runtime::python::component_path(None)
        .expect("path")
        .expect("no CPython component: run guests/python/build.sh");
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let engine = Engine::new(&EngineConfig::default()).expect("engine");
    let guest = PythonGuest::from_file(&engine, &path).expect("component");
    let (readiness, took) = guest.loaded();
    let wasm = WasmProvider::new(&engine, WasmConfig::default()).expect("provider").with_python(guest);
    let budget = Duration::from_secs(10);
    let project = ProjectRun {
        files: vec![ProjectFile { path: "main.py".into(), content: "print(6*7)".into() }],
        steps: vec!["python3 main.py".into()],
        ..ProjectRun::default()
    };
    println!("component                          {size} bytes, made ready in {} ({readiness:?})", ms(took));
    for _ in 0..20 {
        wasm.run_project(&project, budget, None, None).expect("warm-up");
        wasm.run_javascript("6*7", budget).expect("warm-up");
    }
    // Interleaved, so both languages see the same machine.
    let (mut py, mut js) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let t = Instant::now();
        let r = wasm.run_project(&project, budget, None, None).expect("run").result;
        py.push(t.elapsed());
        assert_eq!(r.steps[0].stdout, b"42\n");
        let t = Instant::now();
        wasm.run_javascript("6*7", budget).expect("run");
        js.push(t.elapsed());
    }
    println!("fresh runs, {runs} of each, interleaved:");
    let p = report("  python3 main.py (print(6*7))", py);
    let j = report("  QuickJS 6*7", js);
    println!("  ratio python/javascript          {:.1}", p.as_secs_f64() / j.as_secs_f64());

    let mut s = wasm.session();
    s.python_cell("x = 41", &[], budget).expect("first cell");
    let cells: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let r = s.python_cell("x + 1", &[], budget).expect("cell");
            assert_eq!(r.stdout, b"42\n");
            t.elapsed()
        })
        .collect();
    report("session cell `x + 1`", cells);

    let n = 20;
    let before = rss_kib();
    let live: Vec<_> = (0..n)
        .map(|_| {
            let mut s = wasm.session();
            s.python_cell("x = 1", &[], budget).expect("cell");
            s
        })
        .collect();
    let after = rss_kib();
    println!("live interpreters                  {n}: {} KiB resident each", (after.saturating_sub(before)) / n);
    drop(live);
}
