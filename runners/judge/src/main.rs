//! `plimsoll-judge`: the simulation judge inside a sandbox image. It runs the same
//! judge as the in-process wasm provider (`plimsoll-sim`), with the plants, models
//! and QuickJS precompiled into the image by `plimsoll-judge precompile DIR` when the
//! image is built, so a run starts in milliseconds.
//!
//! Exit codes: 0 done; 1 the plant failed; 2 usage; 3 the controller failed (the
//! judge); for `table`, the original worker's 0 to 5.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use plimsoll_sim::args::{self, Command, TableArgs, USAGE};
use plimsoll_sim::{Library, ModelName, PlantName, Settings, Source, judge, model, standalone};

/// The QuickJS component JavaScript controllers run on.
const QUICKJS: &[u8] = include_bytes!("../../../guests/quickjs/quickjs.wasm");

/// Where the image keeps the precompiled components (`PLIMSOLL_JUDGE_CACHE` overrides).
const CACHE: &str = "/opt/plimsoll/sims";

/// A controller's memory, as any run on the wasm provider.
const CONTROLLER_MB: u32 = 256;

/// The judge sets no budget of its own inside a sandbox: the step's timeout does.
const NO_BUDGET: Duration = Duration::from_secs(24 * 3600);

fn exit(code: i32) -> ExitCode {
    ExitCode::from(code.clamp(0, 255) as u8)
}

fn cache_dir() -> PathBuf {
    std::env::var_os("PLIMSOLL_JUDGE_CACHE")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(CACHE), PathBuf::from)
}

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// The build's SHA-256 of the component the library loads as `name` (`quickjs`,
/// `plant-cartpole`, `model-vanderpol`): the same files `QUICKJS` and the library
/// embed, so a run finds its precompiled file without hashing them.
fn known(name: &str) -> Option<[u8; 32]> {
    let file = match name.split_once('-') {
        None if name == "quickjs" => "quickjs/quickjs.wasm".to_string(),
        Some(("plant" | "model", sim)) => format!("sims/{sim}/{sim}.wasm"),
        _ => return None,
    };
    EMBEDDED.iter().find(|(f, _)| *f == file).map(|(_, digest)| *digest)
}

fn library() -> Result<Library, String> {
    let engine = standalone::engine()?;
    let load = standalone::loader(&engine, Some(cache_dir()), known);
    Ok(Library::new(&engine, Settings::new(CONTROLLER_MB, standalone::EPOCH_TICK), QUICKJS, load))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("precompile") {
        return precompile(argv.get(1).map(Path::new));
    }
    let command = match args::parse(&argv) {
        Ok(c) => c,
        Err(usage) => {
            eprintln!("{usage}");
            return exit(judge::EXIT_USAGE);
        }
    };
    match command {
        Command::Help => {
            println!("{USAGE}");
            exit(0)
        }
        Command::Plants => plants(),
        Command::Run(trial) => run(&trial),
        Command::Table(t) => table(&t),
    }
}

fn precompile(dir: Option<&Path>) -> ExitCode {
    let Some(dir) = dir else {
        eprintln!("usage: plimsoll-judge precompile DIR");
        return exit(judge::EXIT_USAGE);
    };
    let done = standalone::engine().and_then(|engine| standalone::precompile(&engine, dir, QUICKJS));
    match done {
        Ok(paths) => {
            for p in paths {
                println!("{}", p.display());
            }
            exit(0)
        }
        Err(e) => {
            eprintln!("plimsoll-judge precompile: {e}");
            exit(1)
        }
    }
}

fn plants() -> ExitCode {
    for p in PlantName::ALL {
        let (tick, stop) = p.timing();
        let scenarios: Vec<&str> = p.scenarios().iter().map(|s| s.name).collect();
        println!("{p}\ttick {tick}\tstop {stop}\tscenarios {}", scenarios.join(","));
    }
    for m in ModelName::ALL {
        println!("{m}\tmodule-run model");
    }
    exit(0)
}

fn run(trial: &judge::Trial) -> ExitCode {
    let source = match std::fs::read(&trial.controller)
        .map_err(|e| format!("cannot read the controller {}: {e}", trial.controller))
        .and_then(|bytes| Source::read(&trial.controller, bytes))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return exit(judge::EXIT_USAGE);
        }
    };
    let library = match library() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return exit(judge::EXIT_PLANT);
        }
    };
    let judged = judge::judge(&library, trial, source, Instant::now() + NO_BUDGET);
    for (path, bytes) in &judged.files {
        if let Err(e) = std::fs::write(path, bytes) {
            eprintln!("cannot write {path}: {e}");
            return exit(judge::EXIT_PLANT);
        }
    }
    let _ = std::io::stderr().write_all(&judged.stderr);
    let _ = std::io::stdout().write_all(&judged.stdout);
    exit(judged.exit)
}

fn table(t: &TableArgs) -> ExitCode {
    let started = Instant::now();
    let library = match library() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return exit(model::EXIT_MODULE);
        }
    };
    let nparams = match library.model(t.model) {
        Ok(m) => m.description().parameters.len(),
        Err(e) => {
            eprintln!("module does not export the sim_run/sim_width contract: {e}");
            return exit(model::EXIT_MODULE);
        }
    };
    let rows = match std::fs::read_to_string(&t.params)
        .map_err(|_| "cannot open params file".to_string())
        .and_then(|text| model::parse_params(&text, nparams))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return exit(model::EXIT_PARAMS);
        }
    };
    let ran =
        model::run_table(&library, t.model, &rows, t.end, t.step, model::RESULT_BUDGET, Instant::now() + NO_BUDGET);
    let run = match ran {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return exit(e.exit);
        }
    };
    if std::fs::write(&t.out, model::encode(&run)).is_err() {
        eprintln!("output write failed");
        return exit(model::EXIT_OUTPUT);
    }
    let ok = run.rows.iter().filter(|r| r.status >= 0).count();
    let steps: i64 = run.rows.iter().filter(|r| r.status > 0).map(|r| i64::from(r.status)).sum();
    println!(
        "plimsoll-judge table {} rows={} params={} width={} ok={ok} failed={} wall={:.4}s steps={steps}",
        t.model,
        run.rows.len(),
        run.params,
        run.width,
        run.rows.len() - ok,
        started.elapsed().as_secs_f64()
    );
    exit(0)
}

#[cfg(test)]
mod tests {
    use plimsoll_sim::library::{model_bytes, model_load_name, plant_bytes, plant_load_name};
    use plimsoll_sim::{ModelName, PlantName};
    use sha2::{Digest, Sha256};

    use super::{QUICKJS, known};

    fn sha256(bytes: &[u8]) -> Option<[u8; 32]> {
        Some(Sha256::digest(bytes).into())
    }

    #[test]
    fn the_built_digests_are_those_of_the_embedded_bytes() {
        assert_eq!(known("quickjs"), sha256(QUICKJS));
        for p in PlantName::ALL {
            let c = p.component();
            assert_eq!(known(&plant_load_name(c)), sha256(plant_bytes(c)), "{p}");
        }
        for m in ModelName::ALL {
            assert_eq!(known(&model_load_name(m)), sha256(model_bytes(m)), "{m}");
        }
    }

    #[test]
    fn an_unknown_name_is_hashed_by_the_loader() {
        assert_eq!(known("controller"), None);
        assert_eq!(known("plant-nosuch"), None);
    }
}
