//! Module runs: a table of parameter rows, each run in a fresh instance of a model
//! component with its own 16 MiB memory cap, stepped from 0 to the end time; and the
//! PLSM record that carries the results out of a container.
//!
//! Worker exit codes, as the original's table mode: 0 done, 1 the model failed to
//! load or meet its contract, 2 usage, 3 the parameter file is malformed, 4 the
//! worst-case result is over the byte budget, 5 the output could not be written.

use std::time::{Duration, Instant};

use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use crate::catalogue::ModelName;
use crate::library::Library;
use crate::walls::{Cap, Stopped, Walls};

#[allow(missing_docs, reason = "bindgen emits items without docs; the WIT documents them")]
mod generated {
    wasmtime::component::bindgen!({
        world: "model-guest",
        path: "../../wit/sim",
    });
}

use generated::ModelGuestPre;
pub use generated::exports::plimsoll::sim::model::Description;

/// Linear memory per row instance: the original worker's 256 pages.
pub const ROW_MEMORY_BYTES: usize = 16 << 20;

/// Outputs per step a model may declare (the newer original worker's bound).
pub const MAX_WIDTH: usize = 1 << 20;

/// Row status: the instance could not be made.
pub const STATUS_INSTANTIATE: i32 = -101;
/// Row status: the run trapped (out-of-bounds, unreachable, stack overflow, memory).
pub const STATUS_TRAPPED: i32 = -104;
/// Row status: the model claimed more steps than it was allotted.
pub const STATUS_TOO_MANY_STEPS: i32 = -110;

/// Exit: the model failed to load or meet its contract.
pub const EXIT_MODULE: i32 = 1;
/// Exit: usage.
pub const EXIT_USAGE: i32 = 2;
/// Exit: the parameter file is malformed.
pub const EXIT_PARAMS: i32 = 3;
/// Exit: the worst case is over the byte budget.
pub const EXIT_BUDGET: i32 = 4;
/// Exit: the output could not be written.
pub const EXIT_OUTPUT: i32 = 5;

/// The result budget a container worker enforces (the protocol's).
pub const RESULT_BUDGET: u64 = 8 << 20;

/// A model component compiled and linked once.
#[derive(Clone)]
pub struct ModelComponent {
    pre: ModelGuestPre<Cap>,
    description: Description,
}

impl std::fmt::Debug for ModelComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelComponent").field("name", &self.description.name).finish()
    }
}

impl ModelComponent {
    /// Links `component` (which must import nothing) and reads its description.
    ///
    /// # Errors
    ///
    /// What failed, in words.
    pub fn new(engine: &Engine, component: &Component, walls: &Walls) -> Result<ModelComponent, String> {
        let linker = Linker::<Cap>::new(engine);
        let pre = linker.instantiate_pre(component).map_err(|e| format!("the model does not link: {e:#}"))?;
        let pre =
            ModelGuestPre::new(pre).map_err(|e| format!("the model does not export plimsoll:sim/model: {e:#}"))?;
        let mut store = walls.store(engine, Duration::from_secs(5));
        let instance = pre.instantiate(&mut store).map_err(|e| format!("the model does not start: {e:#}"))?;
        let description = instance
            .plimsoll_sim_model()
            .call_describe(&mut store)
            .map_err(|e| format!("the model could not describe itself: {e:#}"))?;
        if description.outputs.is_empty() || description.outputs.len() > MAX_WIDTH {
            return Err(format!("the model declares {} outputs per step", description.outputs.len()));
        }
        Ok(ModelComponent { pre, description })
    }

    /// What the model says of itself.
    pub fn description(&self) -> &Description {
        &self.description
    }
}

/// `(int)(end / step) + 2`: the steps each row is allotted.
pub fn max_steps(end: f64, step: f64) -> i64 {
    (end / step) as i64 + 2
}

/// The worst-case PLSM size of `rows` rows of `width` outputs.
pub fn worst_case(rows: usize, width: usize, max_steps: i64) -> u64 {
    20u64.saturating_add((rows as u64).saturating_mul(4 + 8 * (width as u64).saturating_mul(max_steps.max(0) as u64)))
}

/// One row's result: steps completed (>= 0) or a negative code, and its outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Steps completed, or the row's failure code.
    pub status: i32,
    /// `status x width` outputs, step-major (empty when the status is not positive).
    pub outputs: Vec<f64>,
}

/// A finished table.
#[derive(Clone, Debug, PartialEq)]
pub struct TableRun {
    /// Outputs per step.
    pub width: u32,
    /// Parameters per row.
    pub params: u32,
    /// One per row, in order.
    pub rows: Vec<Row>,
    /// The budget ran out before every row ran (the rows that did are kept).
    pub timed_out: bool,
}

/// Why a table did not run (the worker's exit code and words).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct TableError {
    /// The worker exit code.
    pub exit: i32,
    /// The worker's words.
    pub message: String,
}

impl TableError {
    fn new(exit: i32, message: impl Into<String>) -> TableError {
        TableError { exit, message: message.into() }
    }
}

/// Runs `rows` of `model` from 0 to `end` in steps of `step`, each row in a fresh
/// instance, refusing up front when the worst case exceeds `budget` bytes, and
/// stopping at `deadline` (`timed_out`).
///
/// # Errors
///
/// The [`TableError`] the original worker would have exited with.
pub fn run_table(
    library: &Library,
    model: ModelName,
    rows: &[Vec<f64>],
    end: f64,
    step: f64,
    budget: u64,
    deadline: Instant,
) -> Result<TableRun, TableError> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(end) || !positive(step) {
        return Err(TableError::new(EXIT_USAGE, "t_end and h must be positive"));
    }
    let component = library.model(model).map_err(|e| {
        TableError::new(EXIT_MODULE, format!("module does not export the sim_run/sim_width contract: {e}"))
    })?;
    let d = component.description();
    let (width, nparams) = (d.outputs.len(), d.parameters.len());
    if rows.is_empty() {
        return Err(TableError::new(EXIT_PARAMS, "params file has no rows"));
    }
    if let Some((i, row)) = rows.iter().enumerate().find(|(_, r)| r.len() != nparams) {
        return Err(TableError::new(
            EXIT_PARAMS,
            format!("params line {}: expected {nparams} values, got {}", i + 1, row.len()),
        ));
    }
    let steps = max_steps(end, step);
    if steps > i64::from(i32::MAX) || steps < 1 {
        return Err(TableError::new(EXIT_USAGE, "t_end / h is out of range"));
    }
    let worst = worst_case(rows.len(), width, steps);
    if worst > budget {
        return Err(TableError::new(
            EXIT_BUDGET,
            format!(
                "results could reach {worst} bytes for {} rows of up to {steps} steps, over the {budget} byte \
                 budget; send fewer rows or a shorter horizon",
                rows.len()
            ),
        ));
    }
    // Rows share nothing, so they run on every core this process may use, in
    // contiguous shares whose results are put back in row order.
    let threads = cores().min(rows.len()).max(1);
    let share = rows.len().div_ceil(threads);
    let done: Vec<(Vec<Row>, bool)> = std::thread::scope(|scope| {
        let handles: Vec<_> = rows
            .chunks(share)
            .map(|chunk| scope.spawn(|| run_rows(library, &component, chunk, end, step, steps, deadline)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| (Vec::new(), true))).collect()
    });
    let mut out = TableRun {
        width: width as u32,
        params: nparams as u32,
        rows: Vec::with_capacity(rows.len()),
        timed_out: false,
    };
    for (chunk, timed_out) in done {
        out.timed_out |= timed_out;
        out.rows.extend(chunk);
    }
    Ok(out)
}

/// Runs `rows` one after another, each in a fresh instance; the rows that ran, and
/// whether the deadline stopped them.
fn run_rows(
    library: &Library,
    component: &ModelComponent,
    rows: &[Vec<f64>],
    end: f64,
    step: f64,
    steps: i64,
    deadline: Instant,
) -> (Vec<Row>, bool) {
    let walls = &library.settings().model;
    let width = component.description.outputs.len();
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (out, true);
        }
        let mut store = walls.store(library.engine(), left);
        let instance = match component.pre.instantiate(&mut store) {
            Ok(i) => i,
            Err(_) => {
                out.push(Row { status: STATUS_INSTANTIATE, outputs: Vec::new() });
                continue;
            }
        };
        let ran = instance.plimsoll_sim_model().call_run(&mut store, row, end, step, steps as u32);
        let result = match ran {
            Ok(Ok(outputs)) => {
                let n = outputs.len() / width;
                if outputs.len() % width != 0 || n > steps as usize {
                    Row { status: STATUS_TOO_MANY_STEPS, outputs: Vec::new() }
                } else {
                    Row { status: n as i32, outputs }
                }
            }
            Ok(Err(code)) => Row { status: if code < 0 { code } else { STATUS_TRAPPED }, outputs: Vec::new() },
            Err(e) => match Stopped::of(&e, &store) {
                Stopped::Deadline => return (out, true),
                _ => Row { status: STATUS_TRAPPED, outputs: Vec::new() },
            },
        };
        out.push(result);
    }
    (out, false)
}

/// The PLSM record of a table: "PLSM", u32 version 1, rows, width, params, then per
/// row an i32 status and, when it is positive, `status x width` f64 (all little-endian).
pub fn encode(run: &TableRun) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + run.rows.iter().map(|r| 4 + 8 * r.outputs.len()).sum::<usize>());
    b.extend_from_slice(b"PLSM");
    for v in [1u32, run.rows.len() as u32, run.width, run.params] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for row in &run.rows {
        b.extend_from_slice(&row.status.to_le_bytes());
        if row.status > 0 {
            for v in &row.outputs {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    b
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

/// Reads a PLSM record for a table of `rows` rows of `params` parameters, checking
/// every length; what it does not say is refused, never guessed.
///
/// # Errors
///
/// The first inconsistency, in the original decoder's words.
pub fn decode(b: &[u8], rows: usize, params: usize) -> Result<TableRun, String> {
    if b.len() < 20 {
        return Err(format!("result record is {} bytes, shorter than its header", b.len()));
    }
    if &b[..4] != b"PLSM" {
        return Err(format!("result record has magic {:?}, want \"PLSM\"", String::from_utf8_lossy(&b[..4])));
    }
    let version = u32_at(b, 4);
    if version != 1 {
        return Err(format!("result record version {version}, want 1"));
    }
    let (got_rows, width, got_params) = (u32_at(b, 8) as usize, u32_at(b, 12) as usize, u32_at(b, 16) as usize);
    if got_rows != rows || got_params != params {
        return Err(format!(
            "result record describes {got_rows} rows of {got_params} params, the request had {rows} rows of {params}"
        ));
    }
    if width == 0 || width > 65536 {
        return Err(format!("result record width {width} is out of range"));
    }
    let mut at = 20;
    let mut out = Vec::with_capacity(rows);
    for i in 0..rows {
        if b.len() - at < 4 {
            return Err(format!("result record ends inside row {i}'s status"));
        }
        let status = u32_at(b, at) as i32;
        at += 4;
        let mut outputs = Vec::new();
        if status > 0 {
            let need = (status as usize).saturating_mul(width).saturating_mul(8);
            if b.len() - at < need {
                return Err(format!("result record ends inside row {i}'s outputs ({status} steps of {width})"));
            }
            outputs =
                b[at..at + need].chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
            at += need;
        }
        out.push(Row { status, outputs });
    }
    if at != b.len() {
        return Err(format!("result record has {} trailing bytes after row {}", b.len() - at, rows.saturating_sub(1)));
    }
    Ok(TableRun { width: width as u32, params: params as u32, rows: out, timed_out: false })
}

/// The parameter file a container worker reads: one row per line, each value
/// written so it reads back to the same double, separated by single spaces.
pub fn format_params(rows: &[Vec<f64>]) -> String {
    let mut s = String::new();
    for row in rows {
        for (i, v) in row.iter().enumerate() {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(&format!("{v:e}"));
        }
        s.push('\n');
    }
    s
}

/// Reads a parameter file: blank lines skipped, each other line exactly `nparams`
/// finite numbers separated by spaces or tabs.
///
/// # Errors
///
/// `params line N: expected 3 values, got 2`, or what else is wrong with line N.
pub fn parse_params(text: &str, nparams: usize) -> Result<Vec<Vec<f64>>, String> {
    let mut rows = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let values: Vec<&str> = line.split([' ', '\t']).filter(|s| !s.is_empty()).collect();
        if values.is_empty() {
            continue;
        }
        let parsed: Result<Vec<f64>, _> = values.iter().map(|v| v.parse::<f64>()).collect();
        match parsed {
            Ok(row) if row.len() == nparams && row.iter().all(|v| v.is_finite()) => rows.push(row),
            Ok(row) if row.len() != nparams => {
                return Err(format!("params line {}: expected {nparams} values, got {}", i + 1, row.len()));
            }
            _ => return Err(format!("params line {}: expected {nparams} finite numbers", i + 1)),
        }
    }
    if rows.is_empty() {
        return Err("params file has no rows".to_string());
    }
    Ok(rows)
}

/// The cores this process may use, read once: the reading opens cgroup files, which
/// a jailed engine worker cannot once it is confined (it reads this first, and
/// [`crate::library::Library::preload`] does too).
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_reads_back_and_refuses_any_inconsistency() {
        let run = TableRun {
            width: 2,
            params: 3,
            rows: vec![
                Row { status: 2, outputs: vec![1.0, 2.0, 3.0, 4.0] },
                Row { status: -7, outputs: vec![] },
                Row { status: 0, outputs: vec![] },
            ],
            timed_out: false,
        };
        let b = encode(&run);
        assert_eq!(b.len(), 20 + 4 + 32 + 4 + 4);
        assert_eq!(decode(&b, 3, 3), Ok(run));
        assert_eq!(decode(&b[..10], 3, 3), Err("result record is 10 bytes, shorter than its header".into()));
        assert_eq!(
            decode(&b, 2, 3),
            Err("result record describes 3 rows of 3 params, the request had 2 rows of 3".into())
        );
        let mut bad = b.clone();
        bad[0] = b'X';
        assert_eq!(decode(&bad, 3, 3), Err("result record has magic \"XLSM\", want \"PLSM\"".into()));
        assert_eq!(decode(&b[..40], 3, 3), Err("result record ends inside row 0's outputs (2 steps of 2)".into()));
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode(&long, 3, 3), Err("result record has 1 trailing bytes after row 2".into()));
    }

    #[test]
    fn parameter_files_round_trip_and_bad_lines_are_named() {
        let rows = vec![vec![0.1, 2.0, -3e-300], vec![1e21, 5e-324, 0.0]];
        assert_eq!(parse_params(&format_params(&rows), 3), Ok(rows));
        assert_eq!(parse_params("1 2 3\n\n4 5\n", 3), Err("params line 3: expected 3 values, got 2".into()));
        assert_eq!(parse_params("1 x 3\n", 3), Err("params line 1: expected 3 finite numbers".into()));
        assert_eq!(parse_params("\n \n", 3), Err("params file has no rows".into()));
    }

    #[test]
    fn the_budget_is_the_worst_case_record() {
        assert_eq!(max_steps(20.0, 0.01), 2002);
        assert_eq!(worst_case(300, 2, 2002), 20 + 300 * (4 + 8 * 2 * 2002));
    }
}
