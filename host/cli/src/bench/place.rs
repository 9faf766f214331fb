//! `bench place`: runs placed round robin over 1, 2 and 4 wasm daemons on this
//! machine by one client, the load growing with the set (`--concurrency` runs in
//! flight per daemon, default 2). Each series prints throughput and p50/p99; a run
//! a daemon sheds moves on to the next and is counted. On one machine the daemons
//! share its cores, so throughput cannot grow with them as it does with a machine
//! per daemon; `docs/scaling.md` reads the figures.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use plimsoll_client::place::{Backend, DESCRIPTION_TTL, Need, Order, Placer};
use plimsoll_client::{Client, Options};
use plimsoll_core::protocol;
use plimsoll_core::wire::{JavaScriptRun, RunRequest};

use super::{Report, Series, Served, rounds, rt, serve_admitting, share_of};

/// Runs each daemon admits at once: the daemon's default.
const ADMITTED: usize = 8;

/// The daemon counts measured.
const SETS: [usize; 3] = [1, 2, 4];

/// About 7 ms of QuickJS per run on this machine, so the engine, not the loopback,
/// is the work.
const CODE: &str = "let s = 0; for (let i = 0; i < 100000; i++) s += i % 7; s";

pub(super) fn place(runs: usize, per_daemon: usize, r: &mut Report) -> anyhow::Result<()> {
    let req = RunRequest {
        protocol: protocol::NUMBER,
        javascript: Some(JavaScriptRun { code: CODE.into(), grant_profile: String::new() }),
        ..RunRequest::default()
    };
    for n in SETS {
        let concurrency = per_daemon * n;
        let daemons =
            (0..n).map(|_| serve_admitting("wasm", ADMITTED, &[])).collect::<anyhow::Result<Vec<Served>>>()?;
        let backends = daemons
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let client = Client::new(&d.url, Some(d.token.clone())).map_err(|e| anyhow::anyhow!("{e}"))?;
                Ok(Backend { name: format!("d{}", i + 1), client })
            })
            .collect::<anyhow::Result<Vec<Backend>>>()?;
        let placer = Arc::new(Placer::new(backends, DESCRIPTION_TTL)?.with_order(Order::RoundRobin));
        let (shed, moved) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let rt = rt()?;
        rt.block_on(placer.refresh());
        let started = Instant::now();
        let times = rt.block_on(async {
            let mut tasks = Vec::new();
            for t in 0..concurrency {
                let (placer, req, shed, moved) = (Arc::clone(&placer), req.clone(), shed.clone(), moved.clone());
                let share = share_of(runs, concurrency, t);
                tasks.push(tokio::spawn(async move {
                    let mut times = Vec::with_capacity(share);
                    for _ in 0..share {
                        let at = Instant::now();
                        match placer.run(req.clone(), &Need::default()).await {
                            Ok(placed) => {
                                times.push(at.elapsed());
                                moved.fetch_add(placed.passed.len(), Ordering::Relaxed);
                            }
                            Err(u) if !u.error.may_have_run() => {
                                shed.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(u) => anyhow::bail!("a placed run failed: {u}"),
                        }
                    }
                    Ok::<Vec<Duration>, anyhow::Error>(times)
                }));
            }
            let mut all = Vec::with_capacity(runs);
            for t in tasks {
                all.extend(t.await??);
            }
            Ok::<_, anyhow::Error>(all)
        })?;
        let wall = started.elapsed();
        let name = format!("placement over {n} daemon{}", if n == 1 { "" } else { "s" });
        r.notes.push(format!(
            "{name}: {} of {runs} runs answered, {} shed by every daemon, {} refusals moved on",
            times.len(),
            shed.load(Ordering::Relaxed),
            moved.load(Ordering::Relaxed)
        ));
        r.series.push(Series {
            name,
            what: format!("a ~7 ms snippet placed round robin over {n} wasm daemon(s), {concurrency} in flight"),
            times,
            wall,
            concurrency,
        });
        if n == 1 {
            // The same load sent straight to the same daemon: what placement adds.
            let (times, wall) = rounds(&daemons[0], runs, concurrency, move |client, share| async move {
                let opts = Options::default();
                let mut times = Vec::with_capacity(share);
                for _ in 0..share {
                    let at = Instant::now();
                    client.run_javascript(CODE, &opts).await?;
                    times.push(at.elapsed());
                }
                Ok(times)
            })?;
            r.series.push(Series {
                name: DIRECT.into(),
                what: format!("the same snippet sent straight to the same daemon, {concurrency} in flight"),
                times,
                wall,
                concurrency,
            });
            r.ratios.push(("placement over 1 daemon".into(), DIRECT.into()));
        }
        drop(daemons);
    }
    for n in &SETS[1..] {
        r.ratios.push((format!("placement over {n} daemons"), "placement over 1 daemon".into()));
    }
    Ok(())
}

/// The series without placement.
const DIRECT: &str = "one daemon, no placement";
