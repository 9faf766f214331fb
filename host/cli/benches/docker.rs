//! The docker provider, runc and runsc side by side: two real `plimsoll-host serve`
//! daemons (one per runtime) with the signed docker plugin, calls alternating
//! between them, as the Rust client sees them. Measures fresh-container snippets and
//! session cells (Python `x + 1` in a kept interpreter); the memory an idle session
//! holds is `plimsoll-host bench session`'s. Prints medians, tails and ratios;
//! asserts nothing.
//!
//! Needs dockerd with runsc, `images/build.sh` and `plugins/build.sh`.
//! `cargo bench -p plimsoll-host --bench docker [-- RUNS]` (default 40 per runtime;
//! cells run five times as many).

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options, SessionOptions};
use support::{Daemon, TOKEN, host, serve};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn signed_plugin(dir: &Path) -> (PathBuf, PathBuf) {
    let plugin = dir.join("docker");
    std::fs::create_dir_all(&plugin).expect("mkdir");
    for f in ["plugin.toml", "docker.wasm"] {
        std::fs::copy(Path::new(ROOT).join("plugins/out/docker").join(f), plugin.join(f))
            .expect("run plugins/build.sh");
    }
    let key = dir.join("bench");
    assert!(host().args(["plugin", "keygen"]).arg(&key).output().expect("keygen").status.success());
    let signed = host().args(["plugin", "sign", "--key"]).arg(key.with_extension("key")).arg(&plugin).output();
    assert!(signed.expect("sign").status.success());
    (plugin, key.with_extension("pub"))
}

fn start(runtime: &str, image: &str, plugin: &Path, key: &Path) -> (Daemon, String) {
    let (plugin, key) = (plugin.display().to_string(), key.display().to_string());
    serve(&[
        ("SANDBOX_PROVIDER", "docker"),
        ("SANDBOX_DOCKER_IMAGE", image),
        ("SANDBOX_DOCKER_RUNTIME", runtime),
        ("SANDBOX_DOCKER_PLUGIN", &plugin),
        ("SANDBOX_DOCKER_PLUGIN_KEYS", &key),
        ("SANDBOX_DOCKER_PLUGIN_APPROVE", "containers,log"),
        ("SANDBOX_MAX_SESSIONS", "16"),
        ("SANDBOX_MAX_CONCURRENT", "16"),
    ])
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// One line of percentiles.
fn line(name: &str, t: &mut [Duration]) -> Duration {
    t.sort();
    let p = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize];
    println!("  {name:<6} p50 {:>9}  p95 {:>9}  max {:>9}", ms(p(0.5)), ms(p(0.95)), ms(t[t.len() - 1]));
    p(0.5)
}

fn main() {
    let runs: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(40);
    let image = std::fs::read_to_string(Path::new(ROOT).join("images/out/sandbox.id")).expect("run images/build.sh");
    let dir = std::env::temp_dir().join(format!("plimsoll-bench-docker-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let (plugin, key) = signed_plugin(&dir);
    let runtimes = ["runc", "runsc"];
    let daemons: Vec<(Daemon, Client)> = runtimes
        .iter()
        .map(|r| {
            let (d, url) = start(r, image.trim(), &plugin, &key);
            (d, Client::new(&url, Some(TOKEN.into())).expect("client"))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let opts = Options::default();
    let mut times = vec![Vec::with_capacity(runs); runtimes.len()];
    rt.block_on(async {
        for (_, c) in &daemons {
            for _ in 0..3 {
                c.run_javascript("console.log(1)", &opts).await.expect("warm-up");
            }
        }
        for _ in 0..runs {
            for (i, (_, c)) in daemons.iter().enumerate() {
                let t = Instant::now();
                c.run_javascript("console.log(1)", &opts).await.expect("run");
                times[i].push(t.elapsed());
            }
        }
    });
    // Session cells: one session per runtime with `x` defined, cells alternating.
    let cell_runs = runs * 5;
    let mut cells = vec![Vec::with_capacity(cell_runs); runtimes.len()];
    rt.block_on(async {
        let mut sessions = Vec::new();
        for (_, c) in &daemons {
            let s = c.open_session(&SessionOptions::default()).await.expect("open");
            s.run_cell("python", "x = 41", &[], &opts).await.expect("define");
            for _ in 0..5 {
                s.run_cell("python", "x + 1", &[], &opts).await.expect("warm-up");
            }
            sessions.push(s);
        }
        for _ in 0..cell_runs {
            for (i, s) in sessions.iter().enumerate() {
                let t = Instant::now();
                let r = s.run_cell("python", "x + 1", &[], &opts).await.expect("cell");
                cells[i].push(t.elapsed());
                assert_eq!(r.cell.map(|c| c.stdout), Some(b"42\n".to_vec()), "the cell's answer");
            }
        }
        for s in &sessions {
            s.close().await.expect("close");
        }
    });
    drop(daemons);
    let _ = std::fs::remove_dir_all(&dir);
    println!("docker snippets     {runs} fresh-container runs of `console.log(1)` per runtime, alternating");
    let medians: Vec<Duration> = runtimes.iter().zip(&mut times).map(|(r, t)| line(r, t)).collect();
    println!("  runsc/runc median ratio {:.2}", medians[1].as_secs_f64() / medians[0].as_secs_f64());
    println!(
        "docker session cells {cell_runs} Python cells of `x + 1` per runtime in one kept interpreter, alternating"
    );
    let cell_medians: Vec<Duration> = runtimes.iter().zip(&mut cells).map(|(r, t)| line(r, t)).collect();
    println!("  runsc/runc median ratio {:.2}", cell_medians[1].as_secs_f64() / cell_medians[0].as_secs_f64());
    for (r, (cell, fresh)) in runtimes.iter().zip(cell_medians.iter().zip(&medians)) {
        println!("  {r:<6} cell/fresh snippet median {:.2}", cell.as_secs_f64() / fresh.as_secs_f64());
    }
}
