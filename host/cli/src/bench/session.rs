//! `bench session`: `x + 1` cells in a kept interpreter, on the wasm provider and,
//! when the docker provider's settings are present, in a docker session (with the
//! memory an idle docker session holds); peer: a Jupyter kernel's cells.

use std::process::Command;
use std::time::{Duration, Instant};

use plimsoll_client::{Client, Options, SessionOptions};

use super::{Report, Series, Served, durations, peer, rounds, rt, sequential, serve_admitting};

/// The Python side of the session peer: a Jupyter kernel, `x + 1` per cell.
const JUPYTER: &str = r#"
import json, os, time
from jupyter_client.manager import start_new_kernel
runs = int(os.environ["RUNS"])
km, kc = start_new_kernel(kernel_name="python3")
try:
    kc.execute_interactive("x = 41", timeout=60, output_hook=lambda m: None)
    def cell():
        t = time.perf_counter()
        r = kc.execute_interactive("x + 1", timeout=60, output_hook=lambda m: None)
        assert r["content"]["status"] == "ok", r["content"]
        return (time.perf_counter() - t) * 1000.0
    for _ in range(min(runs, 50)):
        cell()
    print(json.dumps([cell() for _ in range(runs)]))
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
"#;

/// Idle docker sessions opened to measure one's memory.
const IDLE: usize = 4;

/// Session cells over `served`, one session per task: `x` defined, warm-up cells,
/// then the task's share of timed `x + 1` cells, each answer checked.
fn cells(
    served: &Served,
    runs: usize,
    concurrency: usize,
    language: &'static str,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    rounds(served, runs, concurrency, move |client, share| async move {
        let opts = Options::default();
        let s = client.open_session(&SessionOptions::default()).await?;
        s.run_cell(language, if language == "python" { "x = 41" } else { "var x = 41" }, &[], &opts).await?;
        for _ in 0..share.min(20) {
            s.run_cell(language, "x + 1", &[], &opts).await?;
        }
        let mut times = Vec::with_capacity(share);
        for _ in 0..share {
            let t = Instant::now();
            let r = s.run_cell(language, "x + 1", &[], &opts).await?;
            times.push(t.elapsed());
            let shown = r.cell.map(|c| c.stdout).unwrap_or_default();
            anyhow::ensure!(shown == b"42\n", "the cell printed {:?}", String::from_utf8_lossy(&shown));
        }
        s.close().await?;
        Ok(times)
    })
}

pub(super) fn session(runs: usize, concurrency: usize, r: &mut Report) -> anyhow::Result<()> {
    let sessions = (concurrency + 1).max(IDLE).to_string();
    let caps = [("SANDBOX_MAX_SESSIONS", sessions.clone()), ("SANDBOX_MAX_SESSIONS_PER_CALLER", sessions)];
    let served = serve_admitting("wasm", concurrency, &caps)?;
    let probe = rt()?.block_on(async {
        let client = Client::new(&served.url, Some(served.token.clone()))?;
        let s = client.open_session(&SessionOptions::default()).await?;
        let ok = s.run_cell("python", "1", &[], &Options::default()).await.is_ok();
        s.close().await?;
        Ok::<_, anyhow::Error>(ok)
    })?;
    let language = if probe { "python" } else { "javascript" };
    if !probe {
        r.notes.push("the daemon runs no Python (guests/python/build.sh builds it); cells are JavaScript".into());
    }
    let (times, wall) = cells(&served, runs, concurrency, language)?;
    drop(served);
    r.series.push(Series {
        name: "plimsoll session cell".into(),
        what: format!("{language} `x + 1` in a kept wasm interpreter, over the daemon, record checks included"),
        times,
        wall,
        concurrency,
    });
    let docker = std::env::var("SANDBOX_DOCKER_IMAGE").is_ok_and(|v| !v.is_empty());
    let runtime =
        std::env::var("SANDBOX_DOCKER_RUNTIME").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "runc".into());
    let docker_name = format!("plimsoll docker {runtime} session cell");
    if docker {
        let served = serve_admitting("docker", concurrency, &caps)?;
        let (times, wall) = cells(&served, runs, concurrency, "python")?;
        r.series.push(Series {
            name: docker_name.clone(),
            what: format!("python `x + 1` in a kept interpreter of a docker session under {runtime}, over the daemon, record checks included"),
            times,
            wall,
            concurrency,
        });
        idle_memory(&served, &runtime, r)?;
    } else {
        r.notes.push("no docker session series: set the SANDBOX_DOCKER_* variables as for serve".into());
    }
    let python = std::env::var("PLIMSOLL_BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut cmd = Command::new(&python);
    cmd.args(["-c", JUPYTER]).env("RUNS", runs.to_string());
    match peer(cmd) {
        Ok(v) => {
            r.series.push(sequential(
                "jupyter kernel cell",
                "python `x + 1` in an ipykernel through jupyter_client (no sandbox), sequential",
                durations(&v),
            ));
            r.ratios.push(("plimsoll session cell".into(), "jupyter kernel cell".into()));
            if docker {
                r.ratios.push((docker_name, "jupyter kernel cell".into()));
            }
        }
        Err(e) => r.notes.push(format!(
            "peer jupyter kernel did not run with {python} ({e}); pip install jupyter_client ipykernel, or set PLIMSOLL_BENCH_PYTHON"
        )),
    }
    Ok(())
}

/// Opens [`IDLE`] docker sessions, each with `x = 41` in a kept Python
/// interpreter, and notes the mean memory their containers hold once idle, as
/// `docker stats` reports it (usage less inactive file cache).
fn idle_memory(served: &Served, runtime: &str, r: &mut Report) -> anyhow::Result<()> {
    let owner = format!("plimsoll-host-{}", served.child.id());
    let daemon_before = rss_kib(served.child.id());
    rt()?.block_on(async {
        let client = Client::new(&served.url, Some(served.token.clone()))?;
        let mut kept = Vec::new();
        for _ in 0..IDLE {
            let s = client.open_session(&SessionOptions::default()).await?;
            s.run_cell("python", "x = 41", &[], &Options::default()).await?;
            kept.push(s);
        }
        // Let the interpreters settle (their start-up garbage collected) before measuring.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let kib = container_kib(&owner)?;
        anyhow::ensure!(kib.len() == IDLE, "docker stats listed {} containers for {IDLE} sessions", kib.len());
        let mean = kib.iter().sum::<u64>() / kib.len() as u64;
        let daemon = rss_kib(served.child.id()).saturating_sub(daemon_before) / IDLE as u64;
        r.notes.push(format!(
            "idle docker session under {runtime}: {:.1} MiB in its container (mean of {IDLE}, each with one kept Python interpreter holding x; docker stats), {daemon} KiB in the daemon",
            mean as f64 / 1024.0
        ));
        for s in &kept {
            s.close().await?;
        }
        Ok(())
    })
}

/// A process's resident set in KiB (0 when it cannot be read).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `docker stats` memory use (KiB) of each running container labelled `owner`.
fn container_kib(owner: &str) -> anyhow::Result<Vec<u64>> {
    let ps = Command::new("docker")
        .args(["ps", "-q", "--no-trunc", "--filter", &format!("label=dev.plimsoll.owner={owner}")])
        .output()?;
    let ids: Vec<String> = String::from_utf8_lossy(&ps.stdout).split_whitespace().map(str::to_string).collect();
    let mut args = vec!["stats".to_string(), "--no-stream".into(), "--format".into(), "{{.MemUsage}}".into()];
    args.extend(ids);
    let stats = Command::new("docker").args(&args).output()?;
    anyhow::ensure!(stats.status.success(), "docker stats: {}", String::from_utf8_lossy(&stats.stderr).trim());
    Ok(String::from_utf8_lossy(&stats.stdout).lines().filter_map(mem_kib).collect())
}

/// The used part of a `docker stats` MemUsage cell (`12.5MiB / 256MiB`), in KiB.
fn mem_kib(cell: &str) -> Option<u64> {
    let used = cell.split('/').next()?.trim();
    let (n, unit) = used.split_at(used.find(|c: char| c.is_ascii_alphabetic())?);
    let n: f64 = n.parse().ok()?;
    let kib = match unit {
        "B" => n / 1024.0,
        "KiB" | "kB" => n,
        "MiB" | "MB" => n * 1024.0,
        "GiB" | "GB" => n * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(kib as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_cells_are_read_in_kib() {
        assert_eq!(mem_kib("12.5MiB / 256MiB"), Some(12_800));
        assert_eq!(mem_kib("900KiB / 256MiB"), Some(900));
        assert_eq!(mem_kib("1.5GiB / 2GiB"), Some(1_572_864));
        assert_eq!(mem_kib("--"), None);
    }
}
