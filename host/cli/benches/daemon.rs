//! Round trips to a real `plimsoll-host serve` (wasm provider) on loopback over one
//! kept-alive connection, as the Rust client sees them: request, run, record, and
//! every client-side check. Prints medians and tails; asserts nothing.
//!
//! `cargo bench -p plimsoll-host --bench daemon [-- RUNS]` (default 1,000).

mod support;

use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options};
use support::{TOKEN, serve};

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let runs: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    let (daemon, url) = serve(&[("SANDBOX_PROVIDER", "wasm")]);

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let client = Client::new(&url, Some(TOKEN.into())).expect("client");
    let opts = Options::default();
    let mut times = Vec::with_capacity(runs);
    rt.block_on(async {
        for _ in 0..50 {
            client.run_javascript("6*7", &opts).await.expect("warm-up");
        }
        for _ in 0..runs {
            let t = Instant::now();
            client.run_javascript("6*7", &opts).await.expect("run");
            times.push(t.elapsed());
        }
    });
    drop(daemon);
    times.sort();
    let p = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    println!("daemon round trips  {runs} sequential Runs of `6*7`, one kept-alive HTTP/1.1 connection");
    println!("  p50               {}", ms(p(0.50)));
    println!("  p95               {}", ms(p(0.95)));
    println!("  p99               {}", ms(p(0.99)));
}
