//! Fresh-container snippet latency on the docker provider, runc and runsc side by
//! side: two real `plimsoll-host serve` daemons (one per runtime) with the signed
//! docker plugin, runs alternating between them, as the Rust client sees them.
//! Prints medians, tails and the ratio; asserts nothing.
//!
//! Needs dockerd with runsc, `images/build.sh` and `plugins/build.sh`.
//! `cargo bench -p plimsoll-host --bench docker [-- RUNS]` (default 40 per runtime).

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options};
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
    ])
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
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
    drop(daemons);
    let _ = std::fs::remove_dir_all(&dir);
    println!("docker snippets     {runs} fresh-container runs of `console.log(1)` per runtime, alternating");
    let mut medians = Vec::new();
    for (r, t) in runtimes.iter().zip(&mut times) {
        t.sort();
        let p = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize];
        println!("  {r:<6} p50 {:>9}  p95 {:>9}  max {:>9}", ms(p(0.5)), ms(p(0.95)), ms(t[t.len() - 1]));
        medians.push(p(0.5));
    }
    println!("  runsc/runc median ratio {:.2}", medians[1].as_secs_f64() / medians[0].as_secs_f64());
}
