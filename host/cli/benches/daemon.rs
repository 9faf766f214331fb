//! Round trips to a real `plimsoll-host serve` (wasm provider) on loopback over one
//! kept-alive connection, as the Rust client sees them: request, run, record, and
//! every client-side check. Prints medians and tails; asserts nothing.
//!
//! `cargo bench -p plimsoll-host --bench daemon [-- RUNS]` (default 1,000).

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options};

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// Kills and reaps the daemon however the bench ends, so no zombie outlives it.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn main() {
    let runs: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(1000);
    let token = "bench-token-bench-token-bench-token-0123";
    let mut daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_plimsoll-host"))
            .arg("serve")
            .env("SANDBOX_PROVIDER", "wasm")
            .env("PLIMSOLL_TOKEN", token)
            .env("PLIMSOLL_ADDR", "127.0.0.1:0")
            .env("PLIMSOLL_METRICS_ADDR", "off")
            .env("SANDBOX_RATE_PER_MIN", "0")
            .env("PLIMSOLL_LOG_FORMAT", "json")
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve"),
    );
    let mut lines = BufReader::new(daemon.0.stderr.take().expect("stderr")).lines();
    let addr = loop {
        let line = lines.next().expect("the daemon exited").expect("log line");
        if line.contains(r#""msg":"listening""#) {
            let v: serde_json::Value = serde_json::from_str(&line).expect("json");
            break v["addr"].as_str().expect("addr").to_string();
        }
    };
    // Keep draining the audit log so the daemon never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});

    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let client = Client::new(&format!("http://{addr}"), Some(token.into())).expect("client");
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
