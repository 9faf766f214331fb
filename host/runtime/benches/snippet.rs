//! In-process latency of the wasm provider: the QuickJS component's compile time,
//! its cache load time, fresh-store runs of `6*7` (store, instance, context,
//! evaluation, teardown), and how far past its budget an endless loop runs.
//! Prints medians and tails; asserts nothing.
//!
//! `cargo bench -p plimsoll-runtime --bench snippet [-- RUNS]` (default 1,000 runs);
//! `PLIMSOLL_BENCH_BASELINE=OTHER.wasm` interleaves another build of the component.

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
    // Another build of the component, interleaved with the embedded one: the
    // raw build (before pre-initialisation) is guests/target/.../plimsoll_quickjs.wasm.
    let baseline = std::env::var_os("PLIMSOLL_BENCH_BASELINE").map(|path| {
        let bytes = std::fs::read(&path).expect("the baseline component");
        (path, WasmProvider::with_component(&warm, WasmConfig::default(), &bytes).expect("baseline provider"))
    });
    let budget = Duration::from_secs(5);
    for _ in 0..50 {
        wasm.run_javascript("6*7", budget).expect("warm-up");
        if let Some((_, b)) = &baseline {
            b.run_javascript("6*7", budget).expect("warm-up");
        }
    }
    let mut times = Vec::with_capacity(runs);
    let mut base_times = Vec::with_capacity(runs);
    let all = Instant::now();
    for _ in 0..runs {
        let t = Instant::now();
        let r = wasm.run_javascript("6*7", budget).expect("run");
        times.push(t.elapsed());
        assert_eq!(r.exit_code, 0);
        if let Some((_, b)) = &baseline {
            let t = Instant::now();
            b.run_javascript("6*7", budget).expect("run");
            base_times.push(t.elapsed());
        }
    }
    let wall = all.elapsed();
    times.sort();
    base_times.sort();

    println!("component            {} bytes", QUICKJS_COMPONENT.len());
    println!("precompile (cold)    {}", ms(compiled.took));
    println!("load from cache      {}", ms(cached.took));
    println!("fresh-store runs     {runs} of `6*7`");
    println!("  p50                {}", ms(percentile(&times, 0.50)));
    println!("  p95                {}", ms(percentile(&times, 0.95)));
    println!("  p99                {}", ms(percentile(&times, 0.99)));
    if let Some((path, _)) = &baseline {
        println!("  throughput         (interleaved with the baseline)");
        println!("baseline             {}", path.to_string_lossy());
        println!("  p50                {}", ms(percentile(&base_times, 0.50)));
        println!("  p95                {}", ms(percentile(&base_times, 0.95)));
        println!(
            "  ratio p50          {:.2} (embedded / baseline)",
            percentile(&times, 0.50).as_secs_f64() / percentile(&base_times, 0.50).as_secs_f64()
        );
    } else {
        println!("  throughput         {:.0} runs/s on one thread", runs as f64 / wall.as_secs_f64());
    }

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
