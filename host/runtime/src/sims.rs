//! Simulation runs at the `process` tier: the judge (`plimsoll-sim`) in-process,
//! its plant, model and controller guests each in a fresh store on this engine with
//! the same memory cap and deadlines as any run.
//!
//! A simulation run is a project whose steps are each `plimsoll-judge ARGS`, the
//! same command line the judge program takes inside a container, over an in-memory
//! work directory holding the project's files; a module table runs its rows here
//! directly. Either way the code is the one the container runs.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use plimsoll_core::Refusal;
use plimsoll_core::wire::{
    Artifact, ModuleResult, ModuleRowResult, ModuleRun, ProjectOutcome, ProjectResult, ProjectRun, StepResult,
};
use plimsoll_sim::args::{self, Command};
use plimsoll_sim::{Library, ModelName, PlantName, Settings, Source, judge, model};
use sha2::{Digest, Sha256};

use crate::engine::{EPOCH_TICK, Engine};
use crate::python::ARTIFACT_BYTES;
use crate::wasm::{QUICKJS_COMPONENT, WasmConfig, quickjs_digest};

/// The judge's program name in a step.
pub const JUDGE: &str = "plimsoll-judge";

/// The judge and its guests on the provider's engine.
#[derive(Clone, Debug)]
pub struct Sims {
    library: Arc<Library>,
    output_cap: usize,
}

/// `plimsoll-sim:sha256:<hex>`: one digest over every guest a simulation run can
/// use (QuickJS, each plant, each model), the identity of what the judge runs.
/// Computed once, when first stated, so a provider that never reports a simulation
/// run never hashes the guests.
fn identity() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let mut h = Sha256::new();
        h.update(quickjs_digest());
        let mut plants: Vec<_> = PlantName::ALL.iter().map(|p| p.component()).collect();
        plants.dedup();
        for p in plants {
            h.update(Sha256::digest(plimsoll_sim::library::plant_bytes(p)));
        }
        for m in ModelName::ALL {
            h.update(Sha256::digest(plimsoll_sim::library::model_bytes(m)));
        }
        format!("plimsoll-sim:sha256:{}", hex::encode(h.finalize()))
    })
}

impl Sims {
    /// The judge on `engine`, its controllers held to `config`'s memory and output caps;
    /// components load through the engine's cache when first used.
    pub fn new(engine: &Engine, config: &WasmConfig) -> Sims {
        let cache = engine.clone();
        let load = Arc::new(move |name: &str, bytes: &[u8]| {
            cache.load(name, bytes).map(|l| l.component).map_err(|e| e.to_string())
        });
        let settings = Settings::new(config.memory_mb, EPOCH_TICK);
        let library = Library::new(engine.wasmtime(), settings, QUICKJS_COMPONENT, load);
        Sims { library: Arc::new(library), output_cap: config.output_cap }
    }

    /// `plimsoll-sim:sha256:<hex>`.
    pub fn identity(&self) -> &str {
        identity()
    }

    /// The library, for callers that drive the judge themselves (benchmarks).
    pub fn library(&self) -> &Library {
        &self.library
    }

    /// Runs a project of judge steps in order over an in-memory work directory,
    /// stopping at the first that fails, then reads the artifacts back.
    pub fn run_project(&self, project: &ProjectRun, steps: &[Vec<String>], timeout: Duration) -> ProjectResult {
        let deadline = Instant::now() + timeout;
        let mut files: BTreeMap<String, Vec<u8>> =
            project.files.iter().map(|f| (f.path.clone(), f.content.clone().into_bytes())).collect();
        let mut result = ProjectResult { outcome: ProjectOutcome::Completed, ..ProjectResult::default() };
        for (argv, command) in steps.iter().zip(&project.steps) {
            let started = Instant::now();
            let (exit, timed_out, stdout, stderr) = self.step(argv, &mut files, deadline);
            let (stdout, stdout_truncated) = capped(stdout, self.output_cap);
            let (stderr, stderr_truncated) = capped(stderr, self.output_cap);
            result.steps.push(StepResult {
                command: command.clone(),
                stdout,
                stderr,
                exit_code: exit,
                timed_out,
                duration_ms: i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX),
                stdout_truncated,
                stderr_truncated,
            });
            if timed_out {
                result.outcome = ProjectOutcome::TimedOut;
                result.outcome_detail = format!("step {} exceeded the run's time budget", result.steps.len());
                return result;
            }
            if exit != 0 {
                break;
            }
        }
        let mut budget = ARTIFACT_BYTES;
        for path in &project.artifacts {
            let Some(content) = files.get(path) else { continue };
            if content.len() > budget {
                result.artifacts_truncated = true;
                continue;
            }
            budget -= content.len();
            result.artifacts.push(Artifact { path: path.clone(), content: content.clone() });
        }
        result
    }

    /// One judge step: its exit code, whether the run's budget ended it, stdout, stderr.
    fn step(
        &self,
        argv: &[String],
        files: &mut BTreeMap<String, Vec<u8>>,
        deadline: Instant,
    ) -> (i32, bool, Vec<u8>, Vec<u8>) {
        let usage = |text: String| (judge::EXIT_USAGE, false, Vec::new(), format!("{text}\n").into_bytes());
        match args::parse(argv) {
            Err(e) => usage(e),
            Ok(Command::Help) => (0, false, format!("{}\n", args::USAGE).into_bytes(), Vec::new()),
            Ok(Command::Plants) => {
                let mut out = String::new();
                for p in PlantName::ALL {
                    let (tick, stop) = p.timing();
                    let scenarios: Vec<&str> = p.scenarios().iter().map(|s| s.name).collect();
                    out.push_str(&format!("{p}\ttick {tick}\tstop {stop}\tscenarios {}\n", scenarios.join(",")));
                }
                for m in ModelName::ALL {
                    out.push_str(&format!("{m}\tmodule-run model\n"));
                }
                (0, false, out.into_bytes(), Vec::new())
            }
            Ok(Command::Run(trial)) => {
                let Some(bytes) = files.get(&trial.controller) else {
                    return usage(format!("cannot read the controller {}: no such file", trial.controller));
                };
                let source = match Source::read(&trial.controller, bytes.clone()) {
                    Ok(s) => s,
                    Err(e) => return usage(e),
                };
                let judged = judge::judge(&self.library, &trial, source, deadline);
                for (path, bytes) in judged.files {
                    files.insert(path, bytes);
                }
                (judged.exit, judged.timed_out, judged.stdout, judged.stderr)
            }
            Ok(Command::Table(t)) => {
                let nparams = match self.library.model(t.model) {
                    Ok(m) => m.description().parameters.len(),
                    Err(e) => return (model::EXIT_MODULE, false, Vec::new(), format!("{e}\n").into_bytes()),
                };
                let rows = files
                    .get(&t.params)
                    .ok_or_else(|| "cannot open params file".to_string())
                    .and_then(|b| model::parse_params(&String::from_utf8_lossy(b), nparams));
                let rows = match rows {
                    Ok(r) => r,
                    Err(e) => return (model::EXIT_PARAMS, false, Vec::new(), format!("{e}\n").into_bytes()),
                };
                match model::run_table(&self.library, t.model, &rows, t.end, t.step, model::RESULT_BUDGET, deadline) {
                    Ok(run) if run.timed_out => {
                        (judge::EXIT_TIMEOUT, true, Vec::new(), b"the worker exceeded the time budget\n".to_vec())
                    }
                    Ok(run) => {
                        files.insert(t.out.clone(), model::encode(&run));
                        let line =
                            format!("plimsoll-judge table {} rows={} width={}\n", t.model, run.rows.len(), run.width);
                        (0, false, line.into_bytes(), Vec::new())
                    }
                    Err(e) => (e.exit, false, Vec::new(), format!("{e}\n").into_bytes()),
                }
            }
        }
    }

    /// Runs a module table in-process: one fresh model instance per row.
    ///
    /// # Errors
    ///
    /// A `request` refusal when the worst-case result, with the model's real output
    /// width, would not fit the budget (nothing ran).
    pub fn run_module(&self, m: &ModuleRun, timeout: Duration) -> Result<ModuleResult, Refusal> {
        check_module(m)?;
        let deadline = Instant::now() + timeout;
        let setup_failed = |why: String| ModuleResult {
            outcome: ProjectOutcome::SetupFailed,
            outcome_detail: format!("the worker refused the request: {why}"),
            ..ModuleResult::default()
        };
        let name = match ModelName::parse(&m.model) {
            Ok(n) => n,
            Err(e) => return Ok(setup_failed(e)),
        };
        let rows: Vec<Vec<f64>> = m.rows.iter().map(|r| r.values.clone()).collect();
        match model::run_table(&self.library, name, &rows, m.end_time, m.step, model::RESULT_BUDGET, deadline) {
            Ok(run) if run.timed_out => Ok(ModuleResult {
                outcome: ProjectOutcome::TimedOut,
                outcome_detail: "the worker exceeded the time budget".into(),
                ..ModuleResult::default()
            }),
            Ok(run) => Ok(ModuleResult {
                width: run.width as i32,
                runs: run.rows.into_iter().map(|r| ModuleRowResult { status: r.status, outputs: r.outputs }).collect(),
                outcome: ProjectOutcome::Completed,
                ..ModuleResult::default()
            }),
            Err(e) if e.exit == model::EXIT_BUDGET => Err(Refusal::request(format!("invalid request: {e}"))),
            Err(e) => Ok(setup_failed(e.message)),
        }
    }
}

/// The results file a container's module run writes.
pub const RESULTS: &str = "results.bin";
/// The parameter file a container's module run reads.
pub const PARAMS: &str = "params.txt";

/// A module table as a project for a container provider: the rows as `params.txt`
/// and one step, the judge's table mode, whose PLSM record comes back as the only
/// artifact. The model name is safe in a shell word (the request validation allows
/// only `[A-Za-z0-9._-]`).
pub fn module_project(m: &ModuleRun) -> ProjectRun {
    let rows: Vec<Vec<f64>> = m.rows.iter().map(|r| r.values.clone()).collect();
    ProjectRun {
        files: vec![plimsoll_core::wire::ProjectFile { path: PARAMS.into(), content: model::format_params(&rows) }],
        steps: vec![format!(
            "{JUDGE} table --model {} --params {PARAMS} --end {} --step {} --out {RESULTS}",
            m.model,
            plimsoll_sim::number::js(m.end_time),
            plimsoll_sim::number::js(m.step)
        )],
        artifacts: vec![RESULTS.into()],
        ..ProjectRun::default()
    }
}

/// Checks a table against the models every judge carries before anything runs: a
/// worst case over the budget with the model's real output width is refused
/// (`request`), as nothing can come of it.
///
/// # Errors
///
/// The `request` refusal naming the bytes.
pub fn check_module(m: &ModuleRun) -> Result<(), Refusal> {
    let Ok(name) = ModelName::parse(&m.model) else {
        // Unknown models are the worker's to report (setup_failed), as the original did.
        return Ok(());
    };
    let steps = model::max_steps(m.end_time, m.step);
    let worst = model::worst_case(m.rows.len(), name.outputs(), steps);
    if worst > model::RESULT_BUDGET {
        return Err(Refusal::request(format!(
            "invalid request: results could reach {worst} bytes for {} rows of up to {steps} steps, over the {} \
             byte budget; send fewer rows or a shorter horizon",
            m.rows.len(),
            model::RESULT_BUDGET
        )));
    }
    Ok(())
}

/// Reads a container's module run back: the worker's exit code decides the
/// outcome, and its PLSM record (checked in every length against the request) the
/// rows. Results are never truncated: a record that did not come back whole is a
/// `protocol_error`.
pub fn module_from_project(m: &ModuleRun, p: ProjectResult) -> ModuleResult {
    let mut out =
        ModuleResult { outcome: p.outcome, outcome_detail: p.outcome_detail.clone(), ..ModuleResult::default() };
    if let [step] = p.steps.as_slice() {
        out.stdout = step.stdout.clone();
        out.stderr = step.stderr.clone();
        if step.timed_out {
            out.outcome_detail = "the worker exceeded the time budget".into();
        }
    }
    if p.outcome != ProjectOutcome::Completed {
        return out;
    }
    let protocol = |out: &mut ModuleResult, detail: String| {
        out.outcome = ProjectOutcome::ProtocolError;
        out.outcome_detail = detail;
    };
    let [step] = p.steps.as_slice() else {
        protocol(&mut out, format!("runner reported {} steps for the one worker step", p.steps.len()));
        return out;
    };
    let diag = String::from_utf8_lossy(&step.stderr).trim().to_string();
    match step.exit_code {
        0 => {}
        model::EXIT_MODULE | model::EXIT_USAGE | model::EXIT_PARAMS => {
            out.outcome = ProjectOutcome::SetupFailed;
            out.outcome_detail = format!("the worker refused the request: {diag}");
            return out;
        }
        127 => {
            protocol(
                &mut out,
                format!("the sandbox image has no {JUDGE} ({diag}); build the image with images/build.sh"),
            );
            return out;
        }
        code => {
            protocol(&mut out, format!("the worker exited {code}: {diag}"));
            return out;
        }
    }
    if p.artifacts_truncated {
        protocol(&mut out, "the worker accepted the table but its results exceeded the artifact budget".into());
        return out;
    }
    let Some(record) = p.artifacts.iter().find(|a| a.path == RESULTS) else {
        protocol(&mut out, "the worker exited 0 without writing its results".into());
        return out;
    };
    let params = m.rows.first().map_or(0, |r| r.values.len());
    match model::decode(&record.content, m.rows.len(), params) {
        Ok(run) => {
            out.width = run.width as i32;
            out.runs = run.rows.into_iter().map(|r| ModuleRowResult { status: r.status, outputs: r.outputs }).collect();
        }
        Err(e) => protocol(&mut out, format!("undecodable worker results: {e}")),
    }
    out
}

fn capped(mut bytes: Vec<u8>, cap: usize) -> (Vec<u8>, bool) {
    if bytes.len() > cap {
        bytes.truncate(cap);
        return (bytes, true);
    }
    (bytes, false)
}

/// The arguments of each step when every step is a judge step (`plimsoll-judge
/// ARGS`, no shell syntax); `None` when the first step is not one.
///
/// # Errors
///
/// An `unsupported` refusal naming the first step that is not a plain judge step.
pub fn judge_steps(steps: &[String]) -> Option<Result<Vec<Vec<String>>, Refusal>> {
    if steps.first().and_then(|s| s.split_whitespace().next()) != Some(JUDGE) {
        return None;
    }
    Some(
        steps
            .iter()
            .enumerate()
            .map(|(i, step)| {
                let refuse = |why: &str| {
                    Refusal::unsupported(format!(
                        "step {} ({step:?}) {why}: a simulation project on the wasm provider runs only \
                         `plimsoll-judge ARGS` steps; the docker provider runs shell steps",
                        i + 1
                    ))
                };
                // `--flag=value` is the judge's own syntax, so `=` passes here.
                let words = crate::steps::plain_command(step, JUDGE, &[]).map_err(|why| refuse(&why))?;
                Ok(words.map(String::from).collect())
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use plimsoll_core::wire::ModuleRow;

    fn table(model: &str, rows: usize) -> ModuleRun {
        ModuleRun {
            model: model.into(),
            rows: (0..rows).map(|i| ModuleRow { values: vec![i as f64 + 0.5, 2.0, 0.0] }).collect(),
            end_time: 20.0,
            step: 0.01,
        }
    }

    fn worker(exit: i32, stderr: &str, results: Option<Vec<u8>>) -> ProjectResult {
        ProjectResult {
            outcome: ProjectOutcome::Completed,
            steps: vec![StepResult { exit_code: exit, stderr: stderr.as_bytes().to_vec(), ..StepResult::default() }],
            artifacts: results.map(|content| Artifact { path: RESULTS.into(), content }).into_iter().collect(),
            ..ProjectResult::default()
        }
    }

    #[test]
    fn a_table_travels_as_one_judge_step_and_its_rows() {
        let p = module_project(&table("vanderpol", 2));
        assert_eq!(
            p.steps,
            ["plimsoll-judge table --model vanderpol --params params.txt --end 20 --step 0.01 --out results.bin"]
        );
        assert_eq!(p.files[0].path, "params.txt");
        assert_eq!(model::parse_params(&p.files[0].content, 3), Ok(vec![vec![0.5, 2.0, 0.0], vec![1.5, 2.0, 0.0]]));
        assert_eq!(p.artifacts, ["results.bin"]);
    }

    #[test]
    fn a_table_over_the_budget_with_the_real_width_is_refused_before_it_runs() {
        let e = check_module(&table("vanderpol", 300)).expect_err("over");
        assert_eq!(e.reason, plimsoll_core::Reason::Request);
        assert!(e.message.contains("results could reach 9610820 bytes for 300 rows"), "{}", e.message);
        assert!(check_module(&table("vanderpol", 200)).is_ok());
        assert!(check_module(&table("nosuchmodel", 300)).is_ok(), "unknown models are the worker's to report");
    }

    #[test]
    fn the_worker_exit_decides_the_outcome() {
        let m = table("vanderpol", 1);
        let run = model::TableRun {
            width: 2,
            params: 3,
            rows: vec![model::Row { status: 1, outputs: vec![1.0, 2.0] }],
            timed_out: false,
        };
        let ok = module_from_project(&m, worker(0, "", Some(model::encode(&run))));
        assert_eq!((ok.outcome, ok.width, ok.runs.len()), (ProjectOutcome::Completed, 2, 1));
        assert_eq!(ok.runs[0].outputs, [1.0, 2.0]);
        let refused = module_from_project(&m, worker(3, "params line 1: expected 3 values, got 2\n", None));
        assert_eq!(refused.outcome, ProjectOutcome::SetupFailed);
        assert_eq!(refused.outcome_detail, "the worker refused the request: params line 1: expected 3 values, got 2");
        let missing = module_from_project(&m, worker(127, "sh: 1: plimsoll-judge: not found", None));
        assert_eq!(missing.outcome, ProjectOutcome::ProtocolError);
        assert!(missing.outcome_detail.ends_with("build the image with images/build.sh"), "{}", missing.outcome_detail);
        let odd = module_from_project(&m, worker(9, "boom", None));
        assert_eq!(odd.outcome_detail, "the worker exited 9: boom");
        let silent = module_from_project(&m, worker(0, "", None));
        assert_eq!(silent.outcome_detail, "the worker exited 0 without writing its results");
        let short = module_from_project(&m, worker(0, "", Some(b"PLSM".to_vec())));
        assert_eq!(
            short.outcome_detail,
            "undecodable worker results: result record is 4 bytes, shorter than its header"
        );
        let mut cut = worker(0, "", None);
        cut.artifacts_truncated = true;
        assert_eq!(
            module_from_project(&m, cut).outcome_detail,
            "the worker accepted the table but its results exceeded the artifact budget"
        );
        let timed = ProjectResult {
            outcome: ProjectOutcome::TimedOut,
            steps: vec![StepResult { timed_out: true, exit_code: 124, ..StepResult::default() }],
            ..ProjectResult::default()
        };
        let t = module_from_project(&m, timed);
        assert_eq!(
            (t.outcome, t.outcome_detail.as_str()),
            (ProjectOutcome::TimedOut, "the worker exceeded the time budget")
        );
        assert!(t.runs.is_empty(), "never truncated: a timed-out table has no rows");
    }

    #[test]
    fn judge_steps_are_plain_command_lines() {
        assert!(judge_steps(&["python3 main.py".into()]).is_none());
        let steps = ["plimsoll-judge --plant=cartpole --controller c.js".to_string(), "plimsoll-judge plants".into()];
        let argv = judge_steps(&steps).expect("judge").expect("plain");
        assert_eq!(argv[0], ["--plant=cartpole", "--controller", "c.js"]);
        let bad = ["plimsoll-judge plants".to_string(), "ls -l".into()];
        let e = judge_steps(&bad).expect("judge").expect_err("mixed");
        assert!(e.message.starts_with("step 2 (\"ls -l\") is not a plimsoll-judge command"), "{}", e.message);
        let shell = ["plimsoll-judge plants | tee x".to_string()];
        let e = judge_steps(&shell).expect("judge").expect_err("shell");
        assert!(e.message.contains("uses shell syntax"), "{}", e.message);
    }
}
