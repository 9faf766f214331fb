//! `plimsoll-host sim run`: one simulation run, sent as an ordinary project whose
//! step is the judge's command line, so the same request runs in-process on the
//! embedded default and in a container through a daemon.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use base64::Engine as _;
use plimsoll_core::Refusal;
use plimsoll_core::protocol;
use plimsoll_core::validate;
use plimsoll_core::wire::{ProjectFile, ProjectRun, RunRequest, RunResponse};
use plimsoll_runtime::{Engine, EngineConfig, WasmConfig, WasmProvider};
use plimsoll_sim::args::{self as judge_args, Command as JudgeCommand};
use plimsoll_sim::judge::Trial;
use plimsoll_sim::number::js;
use sha2::{Digest, Sha256};

use crate::EXIT_MAY_HAVE_RUN;
use crate::run::{Sent, memory_mb, refused, send_embedded, send_remote};

/// The trajectory's name inside the run's work directory.
const TRAJECTORY: &str = "trajectory.bin";
/// Where the run's first step compiles a C controller.
const COMPILED: &str = "controller.wasm";
/// How a C controller is compiled for the judge (the original's flags): a reactor
/// with wasi-libc's maths linked in, so the module imports nothing.
const CLANG: &str = "clang --target=wasm32-wasi -mexec-model=reactor -O2 -ffp-contract=off -Wall -Werror";

/// Arguments of `sim run`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Exit statuses: 0 when the judge completed (read `passed` in the summary); the judge's \
1 (plant), 2 (usage), 3 (controller) or 124 (time budget); 69 refused, nothing ran; 70 failed after the code may \
have run.\nPlants: cartpole, cartpole-swingup, shower, ship, buck, blackhole, rocket, satclock, slits.")]
pub struct Args {
    /// The plant.
    #[arg(long, value_name = "PLANT")]
    plant: String,
    /// The controller: JavaScript (.js), a C source (.c, compiled by the run's first
    /// step; needs --daemon with a container provider), a compiled module (.wasm,
    /// .wat) or a controller component (.wasm).
    #[arg(long, value_name = "FILE")]
    controller: PathBuf,
    /// A published scenario (default: the plant's first, s1).
    #[arg(long, value_name = "NAME", conflicts_with = "params")]
    scenario: Option<String>,
    /// Three parameters instead of a scenario.
    #[arg(long, value_name = "P0,P1,P2", allow_hyphen_values = true)]
    params: Option<String>,
    /// The tick (default: the plant's).
    #[arg(long, value_name = "H")]
    tick: Option<String>,
    /// The stop time (default: the plant's).
    #[arg(long, value_name = "T")]
    stop: Option<String>,
    /// Each answer's deadline in milliseconds (default 2000).
    #[arg(long = "answer-ms", value_name = "MS")]
    answer_ms: Option<String>,
    /// Send the plant's Jacobian on every state line (and record it).
    #[arg(long)]
    jac: bool,
    /// Write the trajectory (little-endian f64 per tick: observations, then inputs) here.
    #[arg(long, value_name = "TRAJECTORY")]
    out: Option<PathBuf>,
    /// Save the run (summary, trajectory, controller source, tier) for `sim report`.
    #[arg(long, value_name = "RUN.json")]
    save: Option<PathBuf>,
    /// The weakest tier the run accepts.
    #[arg(long = "min-isolation", value_name = "TIER")]
    min_isolation: Option<String>,
    /// The run's budget in milliseconds (default: the provider's project default).
    #[arg(long = "timeout-ms", value_name = "N")]
    timeout_ms: Option<u32>,
    /// Send the run to a daemon at URL; the token comes from PLIMSOLL_CALLER_TOKEN.
    #[arg(long, value_name = "URL")]
    daemon: Option<String>,
    /// With --daemon: a PEM CA certificate to trust for https.
    #[arg(long = "tls-ca", value_name = "PATH", requires = "daemon")]
    tls_ca: Option<PathBuf>,
}

/// The controller as it travels in the project.
struct Controller {
    /// The file's name in the work directory.
    name: String,
    /// Its content as project text.
    text: String,
    /// The judge's --controller (the compiled module for C).
    judged: String,
    /// A C source compiled by the first step.
    compile: bool,
    /// The source shown on replay pages.
    shown: String,
}

fn controller(path: &Path) -> anyhow::Result<Result<Controller, String>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let Some(name) = path.file_name().and_then(|n| n.to_str()).filter(|n| !n.is_empty()) else {
        return Ok(Err(format!("{} has no usable file name", path.display())));
    };
    let lower = name.to_ascii_lowercase();
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).map_err(|_| format!("{name} is not UTF-8 text"));
    Ok(if lower.ends_with(".c") {
        text(bytes).map(|t| Controller {
            name: name.to_string(),
            shown: t.clone(),
            text: t,
            judged: COMPILED.to_string(),
            compile: true,
        })
    } else if [".js", ".mjs", ".cjs", ".wat"].iter().any(|s| lower.ends_with(s)) {
        text(bytes).map(|t| Controller {
            name: name.to_string(),
            shown: t.clone(),
            text: t,
            judged: name.to_string(),
            compile: false,
        })
    } else {
        // Project files are text on the wire: a binary module travels as base64.
        let shown =
            format!("(a compiled module of {} bytes, sha256 {})", bytes.len(), hex::encode(Sha256::digest(&bytes)));
        let b64 = format!("{name}.b64");
        Ok(Controller {
            name: b64.clone(),
            text: base64::engine::general_purpose::STANDARD.encode(&bytes),
            judged: b64,
            compile: false,
            shown,
        })
    })
}

/// The judge's command line for `args`, checked here before anything is sent.
fn judge_line(args: &Args, controller: &str) -> Result<(Vec<String>, Trial), String> {
    let mut argv: Vec<String> = vec!["--plant".into(), args.plant.clone()];
    for (flag, v) in [
        ("--scenario", &args.scenario),
        ("--params", &args.params),
        ("--tick", &args.tick),
        ("--stop", &args.stop),
        ("--answer-ms", &args.answer_ms),
    ] {
        if let Some(v) = v {
            argv.push(flag.into());
            argv.push(v.clone());
        }
    }
    if args.jac {
        argv.push("--jac".into());
    }
    argv.extend(["--controller".into(), controller.into(), "--out".into(), TRAJECTORY.into()]);
    let JudgeCommand::Run(trial) = judge_args::parse(&argv)? else {
        return Err("not a run".into());
    };
    // The step carries the numbers as they were read, so every judge reads the same bits.
    let mut line = vec!["--plant".to_string(), trial.plant.to_string()];
    match trial.scenario {
        Some(s) if args.params.is_none() => line.extend(["--scenario".into(), s.into()]),
        _ => line.extend(["--params".into(), trial.params.map(js).join(",")]),
    }
    line.extend(["--tick".into(), js(trial.tick), "--stop".into(), js(trial.stop)]);
    line.extend(["--answer-ms".into(), trial.answer.as_millis().to_string()]);
    if trial.jacobian {
        line.push("--jac".into());
    }
    line.extend(["--controller".into(), controller.into(), "--out".into(), TRAJECTORY.into()]);
    Ok((line, trial))
}

/// Runs `plimsoll-host sim run`.
pub fn main(args: Args) -> anyhow::Result<ExitCode> {
    let c = match controller(&args.controller)? {
        Ok(c) => c,
        Err(e) => return usage(&e),
    };
    let (line, trial) = match judge_line(&args, &c.judged) {
        Ok(l) => l,
        Err(e) => return usage(&e),
    };
    if let Err(r) = validate::floor(args.min_isolation.as_deref().unwrap_or("")) {
        return Ok(refused(false, &r));
    }
    let mut steps = Vec::new();
    if c.compile {
        steps.push(format!("{CLANG} -o {COMPILED} {}", c.name));
    }
    steps.push(format!("plimsoll-judge {}", line.join(" ")));
    let mut artifacts = vec![TRAJECTORY.to_string()];
    if trial.jacobian {
        artifacts.push(trial.jacobians_path());
    }
    let req = RunRequest {
        protocol: protocol::NUMBER,
        minimum_isolation: args.min_isolation.clone().unwrap_or_default(),
        timeout_ms: args.timeout_ms.map(|ms| i32::try_from(ms).unwrap_or(i32::MAX)).unwrap_or(0),
        project: Some(ProjectRun {
            files: vec![ProjectFile { path: c.name.clone(), content: c.text.clone() }],
            steps,
            artifacts,
            ..ProjectRun::default()
        }),
        ..RunRequest::default()
    };
    let sent = match &args.daemon {
        Some(url) => send_remote(url, args.tls_ca.clone(), req)?,
        None if c.compile => {
            return Ok(refused(
                false,
                &Refusal::unsupported(format!(
                    "{} is C: the run's first step compiles it with clang inside a container image, so send it \
                     with --daemon to a docker provider, or compile it yourself ({CLANG} -o controller.wasm {}) \
                     and pass the .wasm",
                    c.name, c.name
                )),
            ));
        }
        None => {
            let engine = Engine::new(&EngineConfig::default()).context("starting the wasm engine")?;
            let wasm = WasmProvider::new(&engine, WasmConfig { memory_mb: memory_mb()?, ..WasmConfig::default() })
                .context("loading the QuickJS component")?;
            send_embedded(&wasm, req)
        }
    };
    match sent {
        Sent::Answered(resp) => answered(&args, &c, &trial, &resp),
        Sent::Refused(r) => Ok(refused(false, &r)),
        Sent::MayHaveRun(detail) => {
            eprintln!("failed, may have run: {detail}");
            Ok(ExitCode::from(EXIT_MAY_HAVE_RUN))
        }
    }
}

fn usage(e: &str) -> anyhow::Result<ExitCode> {
    eprintln!("plimsoll-host sim run: {e}");
    Ok(ExitCode::from(2))
}

/// Checks what came back, prints it and saves it.
fn answered(args: &Args, c: &Controller, trial: &Trial, resp: &RunResponse) -> anyhow::Result<ExitCode> {
    let Some(project) = resp.project.as_ref() else {
        anyhow::bail!("the provider answered without a project result");
    };
    let Some(step) = project.steps.last() else {
        eprintln!("the run ended before the judge ran ({:?}): {}", project.outcome, project.outcome_detail);
        return Ok(ExitCode::from(1));
    };
    std::io::Write::write_all(&mut std::io::stderr(), &step.stderr)?;
    if step.exit_code != 0 || step.timed_out {
        let what = if c.compile && project.steps.len() == 1 { "the compile step" } else { "the judge" };
        eprintln!(
            "{what} exited {} ({}) on provider {} at {}",
            step.exit_code,
            if step.timed_out { "timed out" } else { "see above" },
            resp.sandbox,
            resp.isolation
        );
        return Ok(ExitCode::from(step.exit_code.clamp(1, 255) as u8));
    }
    let text = String::from_utf8_lossy(&step.stdout);
    let Some(summary) = text.lines().rev().find(|l| l.starts_with('{')) else {
        anyhow::bail!("the judge completed without a summary line");
    };
    let parsed: serde_json::Value = serde_json::from_str(summary).context("reading the judge's summary")?;
    let printed = parsed["fingerprint"].as_str().unwrap_or_default().to_string();
    let Some(trajectory) = project.artifacts.iter().find(|a| a.path == TRAJECTORY) else {
        anyhow::bail!(
            "the judge completed but its trajectory did not come back (artifacts truncated: {})",
            project.artifacts_truncated
        );
    };
    let actual = hex::encode(Sha256::digest(&trajectory.content));
    if actual != printed {
        anyhow::bail!("the judge printed fingerprint {printed} but the trajectory hashes to {actual}");
    }
    if let Some(out) = &args.out {
        std::fs::write(out, &trajectory.content).with_context(|| format!("writing {}", out.display()))?;
    }
    // The tier is the daemon's, checked by the client against the floor; the judge
    // inside the sandbox cannot know it.
    let with_tier = format!(
        "{},\"provider\":{},\"tier\":{}}}",
        &summary[..summary.len() - 1],
        serde_json::Value::from(resp.sandbox.clone()),
        serde_json::Value::from(resp.isolation.clone())
    );
    if let Some(path) = &args.save {
        let saved = serde_json::json!({
            "version": 1,
            "summary": serde_json::from_str::<serde_json::Value>(&with_tier)?,
            "plant": trial.plant.as_str(),
            "provider": resp.sandbox,
            "tier": resp.isolation,
            "environment": resp.environment,
            "record": resp.record.as_ref().map(|r| r.record_sha256.clone()),
            "duration_ms": resp.duration_ms,
            "controller": { "name": c.name, "source": c.shown },
            "trajectory": base64::engine::general_purpose::STANDARD.encode(&trajectory.content),
        });
        std::fs::write(path, serde_json::to_vec_pretty(&saved)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("plant {} ({})", trial.plant, trial.scenario.unwrap_or("parameters given"));
    println!("provider {}", resp.sandbox);
    println!("isolation {}", resp.isolation);
    println!("fingerprint {printed}");
    println!("ticks {}", parsed["ticks"]);
    println!("{}", verdict(&parsed));
    println!("{with_tier}");
    Ok(ExitCode::SUCCESS)
}

/// One line a person reads: the fall, or the score against its floor.
fn verdict(s: &serde_json::Value) -> String {
    let passed = if s["passed"] == true { "passed" } else { "failed" };
    let failure = s["failure"].as_str().map(|f| format!(" ({f})")).unwrap_or_default();
    match (&s["fell_at"], &s["score"]) {
        (serde_json::Value::Null, _) if s.get("fell_at").is_some() => {
            format!("balanced for {} s: {passed}", s["t_end"])
        }
        (serde_json::Value::Number(t), _) => format!("fell at {t} s: {passed}{failure}"),
        (_, serde_json::Value::Number(score)) => {
            format!("score {score} (floor {}): {passed}{failure}", s["floor"])
        }
        _ => format!("{passed}{failure}"),
    }
}
