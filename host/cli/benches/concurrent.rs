//! Many wasm runs in flight at once against one daemon: N clients (default 2,000),
//! each on its own HTTP/1.1 connection, send a `Run` at the same moment; the daemon
//! admits them all (`SANDBOX_MAX_CONCURRENT` = N). Prints how many answered and were
//! checked, how many failed and why, the wall time, the latency tails, and the
//! daemon's peak resident memory. Asserts nothing.
//!
//! `cargo bench -p plimsoll-host --bench concurrent [-- N [BUSY_MS]]`: BUSY_MS makes
//! each run spin that long on the daemon, so the runs overlap in the engine too.
//! Needs 2N+100 open files (`ulimit -n`).

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options};
use support::{TOKEN, peak_rss_kib, serve};

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// This process's soft limit on open files.
fn open_files_limit() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Max open files")).and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = args.first().copied().unwrap_or(2000) as usize;
    let busy_ms = args.get(1).copied().unwrap_or(0);
    let files = open_files_limit();
    if files < 2 * n as u64 + 100 {
        eprintln!(
            "concurrent: {n} connections need {} open files, the limit is {files}: raise it with ulimit -n",
            2 * n + 100
        );
        std::process::exit(2);
    }
    let slots = n.to_string();
    let (daemon, url) = serve(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("SANDBOX_MAX_CONCURRENT", &slots),
        ("SANDBOX_PER_KEY_CONCURRENT", &slots),
    ]);
    let code = if busy_ms == 0 {
        "6*7".to_string()
    } else {
        format!("const t = Date.now(); while (Date.now() - t < {busy_ms}) {{}} 6*7")
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    // One client each (one connection each), all made before any request is sent,
    // then released together, so all N are in flight at once.
    let clients: Vec<Client> = (0..n).map(|_| Client::new(&url, Some(TOKEN.into())).expect("client")).collect();
    let gate = std::sync::Arc::new(tokio::sync::Barrier::new(n + 1));
    let mut started = Instant::now();
    let outcomes: Vec<(Duration, Result<(), String>)> = rt.block_on(async {
        let tasks: Vec<_> = clients
            .into_iter()
            .map(|client| {
                let code = code.clone();
                let gate = gate.clone();
                tokio::spawn(async move {
                    gate.wait().await;
                    let t = Instant::now();
                    let opts = Options { timeout_ms: 30_000, ..Options::default() };
                    let r = client.run_javascript(&code, &opts).await;
                    let checked = match r {
                        Ok(resp) if resp.javascript.as_ref().is_some_and(|j| j.exit_code == 0) => Ok(()),
                        Ok(resp) => Err(format!("exit {:?}", resp.javascript.map(|j| j.exit_code))),
                        Err(e) => Err(e.to_string()),
                    };
                    (t.elapsed(), checked)
                })
            })
            .collect();
        gate.wait().await;
        started = Instant::now();
        let mut out = Vec::with_capacity(n);
        for t in tasks {
            out.push(t.await.expect("task"));
        }
        out
    });
    let wall = started.elapsed();
    let mut times: Vec<Duration> = outcomes.iter().map(|(d, _)| *d).collect();
    times.sort();
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    for (_, r) in &outcomes {
        if let Err(e) = r {
            *failures.entry(e.clone()).or_default() += 1;
        }
    }
    let ok = outcomes.len() - failures.values().sum::<usize>();
    println!(
        "concurrent runs    {n} at once, each `{}` on its own connection",
        if busy_ms == 0 { "6*7".into() } else { format!("{busy_ms} ms of spinning, then 6*7") }
    );
    println!("  answered, checked {ok}");
    println!("  failed            {}", n - ok);
    for (why, count) in &failures {
        println!("    {count} x {why}");
    }
    println!("  wall              {}", ms(wall));
    println!("  latency p50       {}", ms(times[times.len() / 2]));
    println!("  latency p99       {}", ms(times[(times.len() * 99) / 100]));
    println!("  latency max       {}", ms(times[times.len() - 1]));
    println!("  daemon peak RSS   {} MiB", peak_rss_kib(daemon.pid()) / 1024);
}
