//! In-process latency of the wasm provider: the QuickJS component's compile time,
//! its cache load time, fresh-store runs of `6*7` (store, instance, context,
//! evaluation, teardown), and how far past its budget an endless loop runs.
//! Prints medians and tails; asserts nothing.
//!
//! `cargo bench -p plimsoll-runtime --bench snippet [-- RUNS]` (default 1,000 runs).

use std::time::{Duration, Instant};

use plimsoll_runtime::wasm::QUICKJS_COMPONENT;
use plimsoll_runtime::{Engine, EngineConfig, WasmConfig, WasmProvider};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let runs: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    let cache = std::env::temp_dir().join(format!("plimsoll-bench-cache-{}", std::process::id()));

    // Compile with an empty cache, then load from the cache that compile wrote.
    let cold =
        Engine::new(&EngineConfig { cache_dir: Some(cache.clone()), ..EngineConfig::default() }).expect("engine");
    let compiled = cold.load("quickjs", QUICKJS_COMPONENT).expect("compile");
    let warm =
        Engine::new(&EngineConfig { cache_dir: Some(cache.clone()), ..EngineConfig::default() }).expect("engine");
    let cached = warm.load("quickjs", QUICKJS_COMPONENT).expect("load");
    let _ = std::fs::remove_dir_all(&cache);

    let wasm = WasmProvider::new(&warm, WasmConfig::default()).expect("provider");
    let budget = Duration::from_secs(5);
    for _ in 0..50 {
        wasm.run_javascript("6*7", budget).expect("warm-up");
    }
    let mut times = Vec::with_capacity(runs);
    let all = Instant::now();
    for _ in 0..runs {
        let t = Instant::now();
        let r = wasm.run_javascript("6*7", budget).expect("run");
        times.push(t.elapsed());
        assert_eq!(r.exit_code, 0);
    }
    let wall = all.elapsed();
    times.sort();

    println!("component            {} bytes", QUICKJS_COMPONENT.len());
    println!("precompile (cold)    {}", ms(compiled.took));
    println!("load from cache      {}", ms(cached.took));
    println!("fresh-store runs     {runs} of `6*7`");
    println!("  p50                {}", ms(percentile(&times, 0.50)));
    println!("  p95                {}", ms(percentile(&times, 0.95)));
    println!("  p99                {}", ms(percentile(&times, 0.99)));
    println!("  throughput         {:.0} runs/s on one thread", runs as f64 / wall.as_secs_f64());

    // How far past its budget an endless loop runs before the epoch deadline stops it.
    let loop_budget = Duration::from_millis(100);
    let mut over: Vec<Duration> = (0..20)
        .map(|_| {
            let t = Instant::now();
            let r = wasm.run_javascript("for(;;){}", loop_budget).expect("run");
            assert!(r.timed_out);
            t.elapsed().saturating_sub(loop_budget)
        })
        .collect();
    over.sort();
    println!("deadline overshoot   20 endless loops, budget {}", ms(loop_budget));
    println!("  p50                {}", ms(percentile(&over, 0.50)));
    println!("  max                {}", ms(over[over.len() - 1]));
}
