//! Every way a controller can fail is a result at exit 3 with its reason, never a
//! crash; the plant's and the judge's own refusals exit 1 and 2.

use std::time::{Duration, Instant};

use plimsoll_sim::judge::{self, EXIT_CONTROLLER, EXIT_PLANT, EXIT_TIMEOUT, EXIT_USAGE};
use plimsoll_sim::{Judged, Source};

use crate::support::{library, run, trial};

/// A JavaScript controller answering each line with `answer(line)`.
fn js(body: &str) -> String {
    format!("require('readline').createInterface({{ input: process.stdin }}).on('line', (line) => {{ {body} }});")
}

fn stderr(j: &Judged) -> String {
    String::from_utf8_lossy(&j.stderr).into_owned()
}

/// Judges a JavaScript controller on the cart-pole for 1 s with a 300 ms answer deadline.
fn cartpole(code: &str) -> Judged {
    run("--plant cartpole --stop 1 --answer-ms 300", "c.js", code.as_bytes())
}

fn assert_fault(j: &Judged, exit: i32, message: &str) {
    let err = stderr(j);
    assert_eq!(j.exit, exit, "{err}");
    assert!(err.trim_end().ends_with(message), "want {message:?} at the end of:\n{err}");
    assert!(j.files.is_empty() && j.stdout.is_empty(), "a failed run writes nothing");
}

#[test]
fn a_controller_that_answers_nothing() {
    assert_fault(&cartpole(&js("")), EXIT_CONTROLLER, "controller answered nothing (it wrote no line) at tick 0");
    let j = cartpole(&js("process.stdout.write('')"));
    assert_fault(&j, EXIT_CONTROLLER, "controller answered nothing (it wrote no line) at tick 0");
    let j = cartpole(&js("process.stdout.write('12')"));
    assert_fault(&j, EXIT_CONTROLLER, "controller wrote \"12\" without ending the line at tick 0");
    let j = cartpole("process.stdout.write('1\\n')");
    assert_fault(&j, EXIT_CONTROLLER, "controller exited without answering (status 0) at tick 0");
}

#[test]
fn a_controller_that_answers_too_late_or_never_returns() {
    let j = cartpole(&js("for (;;) {}"));
    assert_fault(&j, EXIT_CONTROLLER, "controller did not answer within 300 ms at tick 0");
    let j = cartpole(&js("if (line.startsWith('0 0 0.2')) process.stdout.write('0\\n'); else for (;;) {}"));
    assert_fault(&j, EXIT_CONTROLLER, "controller did not answer within 300 ms at tick 1");
}

#[test]
fn a_controller_that_answers_the_wrong_count_or_not_numbers() {
    let j = cartpole(&js("process.stdout.write('1 2\\n')"));
    assert_fault(&j, EXIT_CONTROLLER, "controller answered 2 value(s); the plant takes 1 at tick 0");
    let j = cartpole(&js("process.stdout.write('\\n')"));
    assert_fault(&j, EXIT_CONTROLLER, "controller answered 0 value(s); the plant takes 1 at tick 0");
    let j = cartpole(&js("process.stdout.write('NaN\\n')"));
    assert_fault(&j, EXIT_CONTROLLER, "controller answered \"NaN\", which is not a finite number at tick 0");
    let j = cartpole(&js("process.stdout.write(1/0 + '\\n')"));
    assert_fault(&j, EXIT_CONTROLLER, "controller answered \"Infinity\", which is not a finite number at tick 0");
    let j = cartpole(&js("process.stdout.write('push harder\\n')"));
    assert_fault(&j, EXIT_CONTROLLER, "controller answered 2 value(s); the plant takes 1 at tick 0");
    let j = cartpole(&js("process.stdout.write('forty\\n')"));
    assert_fault(&j, EXIT_CONTROLLER, "controller answered \"forty\", which is not a finite number at tick 0");
}

#[test]
fn a_controller_that_floods_its_output() {
    let j = cartpole(&js("process.stdout.write('x'.repeat(2 << 20))"));
    assert_fault(
        &j,
        EXIT_CONTROLLER,
        "controller flooded its output (more than 1048576 bytes beyond its answers) at tick 0",
    );
}

#[test]
fn a_controller_that_throws_or_exits_mid_run() {
    let j = cartpole(&js("throw new Error('bang')"));
    assert_fault(&j, EXIT_CONTROLLER, "controller threw an uncaught exception (its error is on stderr) at tick 0");
    assert!(stderr(&j).contains("bang"), "the controller's own error is kept: {}", stderr(&j));
    let j = cartpole(&js("process.exit(7)"));
    assert_fault(&j, EXIT_CONTROLLER, "controller exited without answering (status 7) at tick 0");
}

#[test]
fn a_controller_that_exhausts_its_memory_is_a_result() {
    // Filling 64 MiB takes a while on a loaded machine: a long deadline keeps the
    // memory, not the clock, the reason this run ends.
    let bomb = js("const a = []; for (;;) a.push(new Array(1 << 16).fill(1.5));");
    let j = run("--plant cartpole --stop 1 --answer-ms 30000", "c.js", bomb.as_bytes());
    let err = stderr(&j);
    assert_eq!(j.exit, EXIT_CONTROLLER, "{err}");
    assert!(
        err.contains("ran out of memory (the limit is 64 MiB)") || err.contains("threw an uncaught exception"),
        "{err}"
    );
}

/// A core module answering `body` (an f64 expression over the four observations).
fn module(imports: &str, body: &str) -> String {
    format!("(module {imports} (func (export \"control\") (param f64 f64 f64 f64 i32) (result f64) {body}))")
}

#[test]
fn a_c_module_that_imports_anything_is_refused_naming_the_imports() {
    let wat = module(
        "(import \"env\" \"cos\" (func (param f64) (result f64))) (import \"wasi_snapshot_preview1\" \"fd_write\" (func (param i32 i32 i32 i32) (result i32)))",
        "(f64.const 0)",
    );
    let j = run("--plant cartpole --stop 1", "c.wat", wat.as_bytes());
    assert_eq!(j.exit, EXIT_CONTROLLER);
    assert!(
        stderr(&j).contains(
            "the controller module imports env.cos (function), wasi_snapshot_preview1.fd_write (function); a controller \
             module must import nothing"
        ),
        "{}",
        stderr(&j)
    );
}

#[test]
fn a_c_module_with_the_wrong_signature_or_a_loop_or_a_trap() {
    let narrow = "(module (func (export \"control\") (param f64 f64 i32) (result f64) (f64.const 0)))";
    let j = run("--plant cartpole --stop 1", "c.wat", narrow.as_bytes());
    assert_fault(
        &j,
        EXIT_CONTROLLER,
        "controller the controller module's control is double control(double, double, int), but this plant needs \
         double control(double, double, double, double, int k) at tick 0",
    );
    let j =
        run("--plant cartpole --stop 1 --answer-ms 200", "c.wat", module("", "(loop (br 0)) (f64.const 0)").as_bytes());
    assert_fault(&j, EXIT_CONTROLLER, "controller did not answer within 200 ms at tick 0");
    let j = run("--plant cartpole --stop 1", "c.wat", module("", "(unreachable)").as_bytes());
    assert_eq!(j.exit, EXIT_CONTROLLER);
    assert!(
        stderr(&j).contains("controller trapped: wasm `unreachable` instruction executed at tick 0"),
        "{}",
        stderr(&j)
    );
    let j = run("--plant cartpole --stop 1", "c.wat", module("", "(f64.div (f64.const 0) (f64.const 0))").as_bytes());
    assert_fault(&j, EXIT_CONTROLLER, "controller answered \"NaN\", which is not a finite number at tick 0");
    let j = run("--plant shower --stop 1", "c.wat", module("", "(f64.const 0)").as_bytes());
    assert!(stderr(&j).contains("but this plant needs double control(double, double, int k)"), "{}", stderr(&j));
}

#[test]
fn a_run_past_its_own_budget_times_out() {
    let t = trial("--plant cartpole --controller c.js --answer-ms 60000");
    let source = Source::read("c.js", js("for (;;) {}").into_bytes()).expect("source");
    let j = judge::judge(library(), &t, source, Instant::now() + Duration::from_millis(300));
    assert_eq!((j.exit, j.timed_out), (EXIT_TIMEOUT, true), "{}", stderr(&j));
    assert!(stderr(&j).contains("the run's time budget ran out at tick 0"), "{}", stderr(&j));
}

#[test]
fn the_judge_refuses_what_it_cannot_run() {
    let ok = js("process.stdout.write('0\\n')");
    let j = run("--plant cartpole --tick 0.00001 --stop 1000", "c.js", ok.as_bytes());
    assert_eq!(j.exit, EXIT_USAGE);
    assert!(
        stderr(&j).starts_with("100000000 ticks (stop 1000 / tick 0.00001) is over the limit of 1000000"),
        "{}",
        stderr(&j)
    );
    let j = run("--plant buck --jac --stop 0.001", "c.js", ok.as_bytes());
    assert_eq!(j.exit, 0, "buck has a state Jacobian: {}", stderr(&j));
    let j = run("--plant cartpole --params 0.2,-1,1", "c.js", ok.as_bytes());
    assert_eq!(j.exit, 0, "a negative length is the plant's to judge, and it runs: {}", stderr(&j));
    let j = run(
        "--plant slits --tick 1 --stop 5",
        "c.js",
        js("process.stdout.write(Array(16).fill(0).join(' ') + '\\n')").as_bytes(),
    );
    assert_eq!(j.exit, 0, "{}", stderr(&j));
    // round(1 / 0.4) = 3 ticks, and the third would end at 1.2, past the stop time.
    let j = run("--plant cartpole --tick 0.4 --stop 1", "c.js", ok.as_bytes());
    assert_fault(&j, EXIT_PLANT, "plant step failed at tick 2: the step would end past the stop time");
}
