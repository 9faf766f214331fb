//! Session cells against a real `plimsoll-host serve` (wasm provider) on loopback,
//! side by side with fresh `Run`s of the same expression in the same invocation, and
//! the daemon's resident memory per idle session. Prints numbers; asserts nothing.
//!
//! `cargo bench -p plimsoll-host --bench session [-- RUNS]` (default 1,000).

mod support;

use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options, SessionOptions};
use support::{TOKEN, rss_kib, serve};

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn percentiles(mut times: Vec<Duration>) -> [Duration; 3] {
    times.sort();
    let p = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    [p(0.50), p(0.95), p(0.99)]
}

fn main() {
    let runs: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    const IDLE: usize = 100;
    let (daemon, url) =
        serve(&[("SANDBOX_PROVIDER", "wasm"), ("SANDBOX_MAX_SESSIONS", "128"), ("SANDBOX_MAX_CONCURRENT", "64")]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let client = Client::new(&url, Some(TOKEN.into())).expect("client");
    let opts = Options::default();
    let (fresh, cells, per_session) = rt.block_on(async {
        let s = client.open_session(&SessionOptions::default()).await.expect("open");
        s.run_cell("javascript", "let x = 41", &[], &opts).await.expect("define");
        for _ in 0..50 {
            client.run_javascript("x = 41; x + 1", &opts).await.expect("warm-up");
            s.run_cell("javascript", "x + 1", &[], &opts).await.expect("warm-up");
        }
        let (mut fresh, mut cells) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
        // Interleaved, so both see the same machine.
        for _ in 0..runs {
            let t = Instant::now();
            client.run_javascript("var x = 41; x + 1", &opts).await.expect("run");
            fresh.push(t.elapsed());
            let t = Instant::now();
            s.run_cell("javascript", "x + 1", &[], &opts).await.expect("cell");
            cells.push(t.elapsed());
        }
        s.close().await.expect("close");
        let before = rss_kib(daemon.pid());
        let mut idle = Vec::with_capacity(IDLE);
        for _ in 0..IDLE {
            let s = client.open_session(&SessionOptions::default()).await.expect("open");
            s.run_cell("javascript", "let x = 41", &[], &opts).await.expect("define");
            idle.push(s);
        }
        let after = rss_kib(daemon.pid());
        for s in &idle {
            s.close().await.expect("close");
        }
        (fresh, cells, after.saturating_sub(before) / IDLE as u64)
    });
    drop(daemon);
    let [f50, f95, f99] = percentiles(fresh);
    let [c50, c95, c99] = percentiles(cells);
    println!("session cells        {runs} cells of `x + 1` in one kept interpreter, interleaved with fresh Runs");
    println!("  cell     p50 {}  p95 {}  p99 {}", ms(c50), ms(c95), ms(c99));
    println!("  fresh    p50 {}  p95 {}  p99 {}", ms(f50), ms(f95), ms(f99));
    println!("  ratio    cell/fresh p50 {:.2}", c50.as_secs_f64() / f50.as_secs_f64());
    println!("idle sessions        {IDLE} sessions, each with one defined variable");
    println!("  resident memory per idle session {per_session} KiB");
}
