//! Python at the process tier: the CPython guest (`guests/python/python.wasm`, built
//! by `guests/python/build.sh`, which `tests/run.sh` runs) through the wasm
//! provider: projects of `python3 FILE` steps, session cells, and the limits.

use std::sync::OnceLock;
use std::time::Duration;

use plimsoll_core::provider::Provider;
use plimsoll_core::wire::{ProjectFile, ProjectOutcome, ProjectResult, ProjectRun};
use plimsoll_core::{Reason, Tier};
use plimsoll_runtime::wasm::{EXIT_TIMEOUT, WasmSession};
use plimsoll_runtime::{Engine, EngineConfig, PythonGuest, WasmConfig, WasmProvider};

use super::text;

const BUDGET: Duration = Duration::from_secs(10);

/// One provider with the CPython guest for the whole suite.
pub(super) fn py() -> &'static WasmProvider {
    static P: OnceLock<WasmProvider> = OnceLock::new();
    P.get_or_init(|| {
        let path = plimsoll_runtime::python::component_path(None)
            .expect("checkout path")
            .expect("no CPython component: run guests/python/build.sh (tests/run.sh does)");
        let engine = Engine::new(&EngineConfig::default()).expect("engine");
        let guest = PythonGuest::from_file(&engine, &path).expect("the CPython component loads");
        WasmProvider::new(&engine, WasmConfig { memory_mb: 128, ..WasmConfig::default() })
            .expect("provider")
            .with_python(guest)
    })
}

fn project(files: &[(&str, &str)], steps: &[&str], artifacts: &[&str]) -> ProjectRun {
    ProjectRun {
        files: files.iter().map(|(p, c)| ProjectFile { path: (*p).into(), content: (*c).into() }).collect(),
        steps: steps.iter().map(|s| (*s).to_string()).collect(),
        artifacts: artifacts.iter().map(|s| (*s).to_string()).collect(),
        ..ProjectRun::default()
    }
}

fn run(code: &str) -> ProjectResult {
    let p = project(&[("main.py", code)], &["python3 main.py"], &[]);
    py().run_project(&p, BUDGET, None, None).expect("a result").result
}

#[test]
fn a_project_runs_at_the_process_tier_under_the_components_identity() {
    let p = project(&[("main.py", "print(6*7)")], &["python3 main.py"], &[]);
    let ran = py().run_project(&p, BUDGET, None, None).expect("a result");
    assert_eq!(ran.evidence.tier, Tier::Process);
    assert!(ran.evidence.environment.starts_with("cpython-wasm:sha256:"), "{}", ran.evidence.environment);
    assert_eq!(ran.result.outcome, ProjectOutcome::Completed);
    assert_eq!((text(&ran.result.steps[0].stdout), ran.result.steps[0].exit_code), ("42\n".into(), 0));
    let described = py().describe().project.expect("projects are described");
    assert_eq!(described.identity, ran.evidence.environment);
}

#[test]
fn steps_share_the_work_directory_and_artifacts_come_back() {
    let p = project(
        &[
            ("helper.py", "def double(x):\n    return 2 * x\n"),
            ("write.py", "import sys, helper\nopen('out/n.txt', 'w').write(str(helper.double(int(sys.argv[1]))))\n"),
            ("read.py", "import os\nprint(open('out/n.txt').read(), sorted(os.listdir('out')))\n"),
            ("out/.keep", ""),
        ],
        &["python3 write.py 21", "python3 -I read.py"],
        &["out/n.txt", "missing.txt"],
    );
    let r = py().run_project(&p, BUDGET, None, None).expect("a result").result;
    assert_eq!(r.outcome, ProjectOutcome::Completed, "{r:?}");
    assert_eq!(text(&r.steps[1].stdout), "42 ['.keep', 'n.txt']\n", "{}", text(&r.steps[1].stderr));
    assert_eq!(r.artifacts.len(), 1);
    assert_eq!((r.artifacts[0].path.as_str(), r.artifacts[0].content.as_slice()), ("out/n.txt", b"42".as_slice()));
}

#[test]
fn isolated_mode_keeps_the_work_directory_off_the_import_path() {
    let p = project(&[("helper.py", "X = 1\n"), ("main.py", "import helper\n")], &["python3 -I main.py"], &[]);
    let r = py().run_project(&p, BUDGET, None, None).expect("a result").result;
    assert_eq!(r.steps[0].exit_code, 1);
    assert!(text(&r.steps[0].stderr).contains("No module named 'helper'"), "{}", text(&r.steps[0].stderr));
}

#[test]
fn the_first_failing_step_stops_the_run_with_its_exit_code() {
    let p = project(
        &[("fail.py", "import sys\nsys.exit(3)\n"), ("never.py", "print('ran')\n")],
        &["python3 fail.py", "python3 never.py"],
        &[],
    );
    let r = py().run_project(&p, BUDGET, None, None).expect("a result").result;
    assert_eq!(r.steps.len(), 1);
    assert_eq!(r.steps[0].exit_code, 3);
}

#[test]
fn any_step_but_python3_file_is_refused_before_anything_runs() {
    let p = project(&[("main.py", "open('ran', 'w')")], &["python3 main.py", "ls -l"], &[]);
    let r = py().run_project(&p, BUDGET, None, None).expect_err("refused");
    let plimsoll_core::provider::RunError::Refused(r) = r else { panic!("refused, not may-have-run") };
    assert_eq!(r.reason, Reason::Unsupported);
    assert_eq!(
        r.message,
        "step 2 (\"ls -l\") is not a python3 command: the wasm provider runs only `python3 [-I] FILE [ARG...]` \
         steps (or `plimsoll-judge ARGS` steps for a simulation run); the docker provider runs shell steps"
    );
}

#[test]
fn an_uncaught_exception_is_exit_1_with_the_traceback() {
    let r = run("def f():\n    raise ValueError('boom')\nf()\n");
    assert_eq!(r.steps[0].exit_code, 1);
    let err = text(&r.steps[0].stderr);
    assert!(err.starts_with("Traceback (most recent call last):\n  File \"/work/main.py\", line 3"), "{err}");
    assert!(err.ends_with("ValueError: boom\n"), "{err}");
}

#[test]
fn memory_past_the_limit_is_a_memory_error_and_the_run_reports() {
    let r = run("try:\n    x = bytearray(1 << 30)\nexcept MemoryError:\n    print('MemoryError caught')\n");
    assert_eq!((r.steps[0].exit_code, text(&r.steps[0].stdout)), (0, "MemoryError caught\n".into()));
    let r = run("x = bytearray(1 << 30)\n");
    assert_eq!(r.steps[0].exit_code, 1);
    assert!(text(&r.steps[0].stderr).ends_with("MemoryError\n"), "{}", text(&r.steps[0].stderr));
}

#[test]
fn a_loop_is_stopped_at_the_deadline_with_exit_124() {
    let p = project(&[("main.py", "print('started', flush=True)\nwhile True:\n    pass\n")], &["python3 main.py"], &[]);
    let r = py().run_project(&p, Duration::from_millis(300), None, None).expect("a result").result;
    assert_eq!((r.steps[0].exit_code, r.steps[0].timed_out), (EXIT_TIMEOUT, true));
    assert_eq!(r.outcome, ProjectOutcome::TimedOut);
    assert_eq!(text(&r.steps[0].stdout), "started\n");
}

#[test]
fn output_past_the_cap_is_cut_and_flagged() {
    let r = run("print('x' * (1 << 20))");
    assert_eq!(r.steps[0].stdout.len(), 64 << 10);
    assert!(r.steps[0].stdout_truncated);
}

#[test]
fn no_files_sockets_processes_or_environment_only_ordinary_errors() {
    for (code, error) in [
        ("open('/etc/passwd').read()", "FileNotFoundError: [Errno 44] No such file or directory: '/etc/passwd'"),
        ("import _io\n_io.FileIO('/etc/passwd')", "FileNotFoundError"),
        ("open('../escape.txt', 'w')", "FileNotFoundError"),
        ("import socket\ns = socket.socket()\ns.connect(('127.0.0.1', 22))", "PermissionError"),
        ("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)", "socket.gaierror"),
        ("import subprocess\nsubprocess.run(['ls'])", "OSError: [Errno 58] wasi does not support processes."),
        ("import os\nos.system('ls')", "AttributeError"),
        ("import numpy", "No module named 'numpy': this Python (wasm, the process tier) imports only"),
    ] {
        let r = run(code);
        assert_eq!(r.steps[0].exit_code, 1, "{code}: {}", text(&r.steps[0].stderr));
        assert!(text(&r.steps[0].stderr).contains(error), "{code}: {}", text(&r.steps[0].stderr));
    }
    let r = run("import os\nprint(dict(os.environ), os.getcwd())");
    assert_eq!(text(&r.steps[0].stdout), "{} /work\n");
}

#[test]
fn each_run_draws_its_own_random_seed() {
    let a = run("import random\nprint(random.random())");
    let b = run("import random\nprint(random.random())");
    assert_ne!(a.steps[0].stdout, b.steps[0].stdout, "every instance starts from one snapshot");
}

fn cell(s: &mut WasmSession, code: &str) -> plimsoll_core::wire::CellResult {
    s.python_cell(code, &[], BUDGET).expect("a cell result")
}

#[test]
fn python_cells_keep_state_show_values_and_name_the_cell() {
    let mut s = py().session();
    let r = s.python_cell("x = 41", &[("in.txt".into(), b"41".to_vec())], BUDGET).expect("cell");
    assert!(r.interpreter_started && r.exit_code == 0, "{}", text(&r.stderr));
    let r = cell(&mut s, "x + 1");
    assert_eq!((text(&r.stdout), r.interpreter_started), ("42\n".into(), false));
    assert_eq!(text(&cell(&mut s, "{'a': [1, 2]}").stdout), "{'a': [1, 2]}\n");
    assert_eq!(text(&cell(&mut s, "None").stdout), "");
    assert_eq!(text(&cell(&mut s, "int(open('in.txt').read()) + 1").stdout), "42\n");
    let r = cell(&mut s, "def f():\n    return 1 / 0\nf()");
    assert_eq!(r.exit_code, 1);
    let err = text(&r.stderr);
    assert!(
        err.contains("File \"<cell 6>\", line 3") && err.ends_with("ZeroDivisionError: division by zero\n"),
        "{err}"
    );
    assert_eq!(text(&cell(&mut s, "x").stdout), "41\n");
    let r = cell(&mut s, "x = (");
    assert_eq!(r.exit_code, 1);
    assert!(text(&r.stderr).contains("SyntaxError"), "{}", text(&r.stderr));
}

#[test]
fn a_python_deadline_ends_only_the_python_interpreter() {
    let mut s = py().session();
    cell(&mut s, "kept = 1");
    s.cell("var js = 2", &[], BUDGET).expect("js cell");
    let r = s.python_cell("while True:\n    pass", &[], Duration::from_millis(300)).expect("cell");
    assert_eq!((r.exit_code, r.timed_out, r.interpreter_ended), (EXIT_TIMEOUT, true, true));
    let r = cell(&mut s, "'kept' in globals()");
    assert_eq!((text(&r.stdout), r.interpreter_started), ("False\n".into(), true));
    let r = s.cell("js", &[], BUDGET).expect("js cell");
    assert_eq!((text(&r.stdout), r.interpreter_started), ("2\n".into(), false));
}

#[test]
fn without_the_component_python_is_refused_naming_the_build() {
    let engine = Engine::new(&EngineConfig::default()).expect("engine");
    let js_only = WasmProvider::new(&engine, WasmConfig::default()).expect("provider");
    let p = project(&[("main.py", "print(1)")], &["python3 main.py"], &[]);
    let plimsoll_core::provider::RunError::Refused(r) =
        js_only.run_project(&p, BUDGET, None, None).expect_err("refused")
    else {
        panic!("refused, not may-have-run")
    };
    assert_eq!(r.reason, Reason::Unsupported);
    assert!(r.message.contains("guests/python/build.sh"), "{}", r.message);
    let r = js_only.session().python_cell("1", &[], BUDGET).expect_err("refused");
    assert_eq!(r.reason, Reason::Unsupported);
}
