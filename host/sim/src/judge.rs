//! The judge: one implementation of the closed loop, wherever it runs (in-process
//! on the wasm provider, or as `plimsoll-judge` inside a container).
//!
//! Per tick k of `ticks = round(stop / tick)`: read the plant's observations, ask
//! the controller within the per-answer deadline, record the observations then the
//! answer (little-endian f64), step the plant with the answer, stop early if the
//! plant terminates. The fingerprint is the SHA-256 of exactly the recorded bytes.
//! Exit codes: 0 done, 1 the plant failed, 2 usage, 3 the controller failed, 124
//! the run's own time budget ran out.

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::catalogue::PlantName;
use crate::controller::component::ComponentController;
use crate::controller::js::JsEngine;
use crate::controller::module::ModuleController;
use crate::controller::{Ask, Controller, Fault, Source};
use crate::library::Library;
use crate::plant::{JacobianKind, PlantError};
use crate::score::{self, Assessment, Record};
use crate::summary::Summary;
use crate::walls::Stopped;

/// Exit code: the plant failed (it refused its parameters, or a step failed).
pub const EXIT_PLANT: i32 = 1;
/// Exit code: the judge was asked something it cannot do.
pub const EXIT_USAGE: i32 = 2;
/// Exit code: the controller failed.
pub const EXIT_CONTROLLER: i32 = 3;
/// Exit code: the run's own time budget ran out (as any step's deadline).
pub const EXIT_TIMEOUT: i32 = 124;

/// Ticks a run may ask for.
pub const MAX_TICKS: u64 = 1_000_000;

/// The recorded trajectory and Jacobians together may not pass this: they come back
/// as the run's artifacts, whose budget is 4 MiB.
pub const MAX_RECORD_BYTES: u64 = 4 << 20;

/// Solver substeps one tick may take (a tick of hours on a microsecond plant would
/// otherwise spin inside one call until the deadline).
pub const MAX_SUBSTEPS_PER_TICK: f64 = 1e6;

/// The default per-answer deadline (the original's).
pub const DEFAULT_ANSWER: Duration = Duration::from_millis(2000);

/// One judged run's settings, as `plimsoll-judge` and `plimsoll-host sim run` take them.
#[derive(Clone, Debug, PartialEq)]
pub struct Trial {
    /// The plant.
    pub plant: PlantName,
    /// The scenario named, when the parameters came from one.
    pub scenario: Option<&'static str>,
    /// p0, p1, p2.
    pub params: [f64; 3],
    /// The tick, > 0.
    pub tick: f64,
    /// The stop time, > 0.
    pub stop: f64,
    /// The deadline of each answer.
    pub answer: Duration,
    /// Send the plant's Jacobian on each state line and record it.
    pub jacobian: bool,
    /// The controller file's path (relative to the work directory).
    pub controller: String,
    /// Where the trajectory goes (relative to the work directory).
    pub out: String,
}

impl Trial {
    /// Where the Jacobians go: `jacobians.bin` next to [`Trial::out`].
    pub fn jacobians_path(&self) -> String {
        match self.out.rfind('/') {
            Some(i) => format!("{}/jacobians.bin", &self.out[..i]),
            None => "jacobians.bin".to_string(),
        }
    }

    /// `round(stop / tick)`.
    pub fn ticks(&self) -> u64 {
        (self.stop / self.tick).round() as u64
    }
}

/// What a judged run produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Judged {
    /// 0, or one of the `EXIT_*` codes.
    pub exit: i32,
    /// The run's own budget ran out.
    pub timed_out: bool,
    /// The summary line, when the run completed.
    pub stdout: Vec<u8>,
    /// The controller's stderr, then the judge's own message line.
    pub stderr: Vec<u8>,
    /// Files to write into the work directory (the trajectory, the Jacobians); only
    /// when the run completed, as the original wrote nothing after a failure.
    pub files: Vec<(String, Vec<u8>)>,
    /// The summary, when the run completed.
    pub summary: Option<Summary>,
}

impl Judged {
    fn failed(exit: i32, message: String, controller_stderr: &[u8]) -> Judged {
        let mut stderr = controller_stderr.to_vec();
        stderr.extend_from_slice(message.as_bytes());
        stderr.push(b'\n');
        Judged { exit, timed_out: exit == EXIT_TIMEOUT, stderr, ..Judged::default() }
    }
}

/// Checks what the plant and the limits allow before anything starts.
fn check(
    trial: &Trial,
    width: usize,
    inputs: usize,
    states: usize,
    kind: JacobianKind,
    solver: f64,
) -> Result<(), String> {
    let ticks = trial.ticks();
    if ticks > MAX_TICKS {
        return Err(format!(
            "{} ticks (stop {} / tick {}) is over the limit of {MAX_TICKS}; use a longer tick or an earlier stop",
            ticks,
            crate::number::js(trial.stop),
            crate::number::js(trial.tick)
        ));
    }
    let jac_len = match (trial.jacobian, kind) {
        (false, _) => 0,
        (true, JacobianKind::None) => return Err("this plant offers no Jacobian".to_string()),
        (true, JacobianKind::State) => states * states + states * inputs,
        (true, JacobianKind::Out) => width * inputs,
    };
    let bytes = ticks.saturating_mul(((width + inputs + jac_len) * 8) as u64);
    if bytes > MAX_RECORD_BYTES {
        return Err(format!(
            "{ticks} ticks of {} values would record {bytes} bytes, over the {MAX_RECORD_BYTES} byte artifact \
             budget; use a longer tick or an earlier stop",
            width + inputs + jac_len
        ));
    }
    if solver > 0.0 && trial.tick / solver > MAX_SUBSTEPS_PER_TICK {
        return Err(format!(
            "a tick of {} is {} of this plant's {} solver steps; at most {MAX_SUBSTEPS_PER_TICK} per tick",
            crate::number::js(trial.tick),
            crate::number::js((trial.tick / solver).round()),
            crate::number::js(solver)
        ));
    }
    Ok(())
}

/// The time left before `deadline`.
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Runs `trial` with the controller `source` until done or `deadline`.
pub fn judge(library: &Library, trial: &Trial, source: Source, deadline: Instant) -> Judged {
    let engine = library.engine();
    let settings = library.settings();
    let plant = match library.plant(trial.plant.component()) {
        Ok(p) => p,
        Err(e) => {
            return Judged::failed(EXIT_PLANT, format!("the {} plant could not be loaded: {e}", trial.plant), &[]);
        }
    };
    let d = plant.description();
    let (width, inputs) = (d.observations.len(), d.inputs.len());
    if let Err(e) = check(trial, width, inputs, d.states as usize, d.jacobian, d.solver_step) {
        return Judged::failed(EXIT_USAGE, e, &[]);
    }
    let ticks = trial.ticks() as usize;
    let mut live = match plant.start(engine, &settings.plant, left(deadline), &trial.params, trial.tick, trial.stop) {
        Ok(l) => l,
        Err(PlantError::Stopped(Stopped::Deadline)) => return out_of_time(0, &[]),
        Err(e) => return Judged::failed(EXIT_PLANT, format!("plant refused to initialise: {e}"), &[]),
    };
    let first = trial.answer.min(left(deadline));
    let started = start_controller(library, trial, source, first, width, inputs);
    let mut controller = match started {
        Ok(c) => c,
        Err(Fault::Late(_)) if first < trial.answer => return out_of_time(0, &[]),
        Err(f) => return Judged::failed(EXIT_CONTROLLER, format!("controller {f} at tick 0"), &[]),
    };
    let jac_len = match (trial.jacobian, d.jacobian) {
        (true, JacobianKind::State) => (d.states * d.states + d.states * inputs as u32) as usize,
        (true, JacobianKind::Out) => width * inputs,
        _ => 0,
    };
    let mut record: Vec<f64> = Vec::with_capacity(ticks * (width + inputs));
    let mut jacobians: Vec<f64> = Vec::with_capacity(ticks * jac_len);
    let mut line = String::new();
    let mut done = 0usize;
    // Each step returns the next tick's observations; the first come from observe.
    let mut observation = match live.observe() {
        Ok(o) => o,
        Err(PlantError::Stopped(Stopped::Deadline)) => return out_of_time(0, &[]),
        Err(e) => return Judged::failed(EXIT_PLANT, format!("plant state read failed at tick 0: {e}"), &[]),
    };
    for k in 0..ticks {
        let budget = left(deadline);
        if budget.is_zero() {
            return out_of_time(k, controller.stderr());
        }
        if observation.len() != width {
            let e = format!("plant state read failed at tick {k}: {} values, not {width}", observation.len());
            return Judged::failed(EXIT_PLANT, e, controller.stderr());
        }
        live.set_budget(budget);
        line.clear();
        let text = controller.reads_lines();
        if text {
            for (i, v) in observation.iter().enumerate() {
                if i > 0 {
                    line.push(' ');
                }
                crate::number::push_js(&mut line, *v);
            }
        }
        if jac_len > 0 {
            let j = match live.jacobian() {
                Ok(j) if j.len() == jac_len => j,
                Ok(j) => {
                    let e = format!("plant linearization failed: {} values, not {jac_len}", j.len());
                    return Judged::failed(EXIT_PLANT, e, controller.stderr());
                }
                Err(PlantError::Stopped(Stopped::Deadline)) => return out_of_time(k, controller.stderr()),
                Err(e) => {
                    return Judged::failed(EXIT_PLANT, format!("plant linearization failed: {e}"), controller.stderr());
                }
            };
            if text {
                match d.jacobian {
                    JacobianKind::State => line.push_str(&format!(" | state {}", d.states)),
                    _ => line.push_str(&format!(" | out {width} {inputs}")),
                }
                for v in &j {
                    line.push(' ');
                    crate::number::push_js(&mut line, *v);
                }
            }
            jacobians.extend_from_slice(&j);
        }
        let budget = left(deadline);
        let answer_budget = trial.answer.min(budget);
        let ask = Ask { tick: k as u32, observation: &observation, line: &line, inputs };
        let u = match controller.answer(&ask, answer_budget) {
            Ok(u) => u,
            Err(Fault::Late(_)) if answer_budget < trial.answer => return out_of_time(k, controller.stderr()),
            Err(f) => {
                return Judged::failed(EXIT_CONTROLLER, format!("controller {f} at tick {k}"), controller.stderr());
            }
        };
        record.extend_from_slice(&observation);
        record.extend_from_slice(&u);
        done = k + 1;
        live.set_budget(left(deadline));
        match live.step(&u) {
            Ok(stepped) => {
                observation = stepped.observation;
                if stepped.status == crate::plant::StepStatus::Terminated {
                    break;
                }
            }
            Err(PlantError::Stopped(Stopped::Deadline)) => return out_of_time(k, controller.stderr()),
            Err(e) => {
                return Judged::failed(EXIT_PLANT, format!("plant step failed at tick {k}: {e}"), controller.stderr());
            }
        }
    }
    controller.finish(trial.answer.min(left(deadline)));
    let trajectory: Vec<u8> = record.iter().flat_map(|v| v.to_le_bytes()).collect();
    let fingerprint = hex::encode(Sha256::digest(&trajectory));
    let final_state = record.chunks_exact(width + inputs).last().map(|row| row[..width].to_vec()).unwrap_or_default();
    let assessment: Assessment =
        score::assess(trial.plant, &Record { width, inputs, tick: trial.tick, params: trial.params, values: &record });
    let mut files = vec![(trial.out.clone(), trajectory)];
    let jacobian_file = if jac_len > 0 {
        let bytes: Vec<u8> = jacobians.iter().flat_map(|v| v.to_le_bytes()).collect();
        let digest = hex::encode(Sha256::digest(&bytes));
        files.push((trial.jacobians_path(), bytes));
        Some((
            trial.jacobians_path(),
            if d.jacobian == JacobianKind::State { "state" } else { "out" },
            d.states,
            digest,
        ))
    } else {
        None
    };
    let summary = Summary {
        fingerprint,
        ticks: done as u64,
        h: trial.tick,
        width,
        nin: inputs,
        params: trial.params,
        final_state,
        jacobians: jacobian_file,
        plant: trial.plant,
        scenario: trial.scenario,
        stop: trial.stop,
        assessment,
    };
    let mut stdout = summary.to_json().into_bytes();
    stdout.push(b'\n');
    Judged { exit: 0, timed_out: false, stdout, stderr: controller.stderr().to_vec(), files, summary: Some(summary) }
}

fn out_of_time(tick: usize, controller_stderr: &[u8]) -> Judged {
    Judged::failed(EXIT_TIMEOUT, format!("the run's time budget ran out at tick {tick}"), controller_stderr)
}

fn start_controller(
    library: &Library,
    trial: &Trial,
    source: Source,
    budget: Duration,
    width: usize,
    inputs: usize,
) -> Result<Box<dyn Controller>, Fault> {
    let engine = library.engine();
    let walls = &library.settings().controller;
    match source {
        Source::JavaScript(code) => {
            let js: JsEngine = library.js().map_err(Fault::Unusable)?;
            let name = trial.controller.rsplit('/').next().unwrap_or(&trial.controller);
            Ok(Box::new(js.start(engine, walls, budget, &code, name)?))
        }
        Source::Module(bytes) => {
            Ok(Box::new(ModuleController::start(engine, walls, budget, library.module(&bytes), width, inputs)?))
        }
        Source::Component(bytes) => {
            Ok(Box::new(ComponentController::start(engine, walls, budget, library.component(&bytes))?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trial() -> Trial {
        Trial {
            plant: PlantName::CartPole,
            scenario: Some("s1"),
            params: [0.2, 0.5, 1.0],
            tick: 0.01,
            stop: 20.0,
            answer: DEFAULT_ANSWER,
            jacobian: false,
            controller: "c.js".into(),
            out: "trajectory.bin".into(),
        }
    }

    #[test]
    fn jacobians_go_next_to_the_trajectory() {
        let mut t = trial();
        assert_eq!(t.jacobians_path(), "jacobians.bin");
        t.out = "runs/s1.bin".into();
        assert_eq!(t.jacobians_path(), "runs/jacobians.bin");
    }

    #[test]
    fn limits_are_checked_before_anything_runs() {
        let mut t = trial();
        assert_eq!(check(&t, 4, 1, 4, JacobianKind::State, 1e-3), Ok(()));
        t.stop = 1e5;
        let e = check(&t, 4, 1, 4, JacobianKind::State, 1e-3).expect_err("too many ticks");
        assert!(e.starts_with("10000000 ticks (stop 100000 / tick 0.01) is over the limit of 1000000"), "{e}");
        t.stop = 2000.0;
        let e = check(&t, 4, 1, 4, JacobianKind::State, 1e-3).expect_err("too many bytes");
        assert!(e.contains("over the 4194304 byte artifact budget"), "{e}");
        let mut t = trial();
        t.jacobian = true;
        assert_eq!(check(&t, 4, 1, 4, JacobianKind::None, 1e-3), Err("this plant offers no Jacobian".to_string()));
        let mut t = trial();
        t.tick = 10_000.0;
        t.stop = 20_000.0;
        let e = check(&t, 4, 1, 4, JacobianKind::State, 1e-3).expect_err("too many substeps");
        assert!(e.starts_with("a tick of 10000 is 10000000 of this plant's 0.001 solver steps"), "{e}");
    }
}
