//! The published Python client, `plimsoll-client` 0.23.0, against our daemon: a
//! client written by someone else that recomputes every record and checks every tier.
//!
//! The interpreter comes from `PLIMSOLL_E2E_PYTHON`, else `.venv-e2e/bin/python` at
//! the workspace root (`.ci/install` creates it). Missing, the suite fails.

use std::process::Command;

use super::Daemon;

pub fn python() -> String {
    if let Ok(p) = std::env::var("PLIMSOLL_E2E_PYTHON") {
        return p;
    }
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.venv-e2e/bin/python");
    assert!(
        std::path::Path::new(venv).exists(),
        "the published client's virtualenv is missing: run .ci/install (or set PLIMSOLL_E2E_PYTHON)"
    );
    venv.to_string()
}

/// Takes `PYTHONOPTIMIZE` out of `cmd`'s environment. Set (in the shell that runs
/// the tests, say), it strips every `assert` statement, and a script whose checks
/// are asserts would pass without checking anything.
pub fn keep_asserts(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("PYTHONOPTIMIZE")
}

/// The published client's interpreter as a command whose asserts always run
/// ([`keep_asserts`]).
pub fn python_cmd() -> Command {
    let mut cmd = Command::new(python());
    keep_asserts(&mut cmd);
    cmd
}

/// Runs `script` with the published client's interpreter and `env`, and returns its
/// stdout; a failing script fails the test with both streams. Its asserts always run.
pub fn run_script(script: &str, env: &[(&str, &str)]) -> String {
    let o =
        keep_asserts(Command::new(python()).arg("-c").arg(script).envs(env.iter().copied())).output().expect("python");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{}", String::from_utf8_lossy(&o.stderr));
    out
}

const SCRIPT: &str = r#"
import os, sys, threading
import plimsoll_client
from plimsoll_client import Client
from plimsoll_client.errors import (InsufficientIsolationError, UnsupportedError, InvalidRequestError,
    PlimsollError, AtCapacityError)
assert plimsoll_client.__version__ == "0.23.0", plimsoll_client.__version__
url, token = os.environ["URL"], os.environ["TOKEN"]
c = Client(url, token=token)
info = c.describe()
assert (info.provider, info.isolation, info.protocol) == ("wasm", "process", 4), info
assert info.javascript_environment.identity.startswith("quickjs-wasm:sha256:")
r = c.run_javascript("console.log(6*7)", minimum_isolation="process", trace_id="py-1", timeout=2)
assert (r.stdout, r.exit_code, r.isolation) == (b"42\n", 0, "process"), r
assert r.record is not None and r.record.version == 4 and r.record.environment == info.javascript_environment.identity
r = c.run_javascript("throw new Error('boom')")
assert r.exit_code == 1 and b"Uncaught Error: boom" in r.stderr, r
r = c.run_javascript("for(;;){}", timeout=0.3)
assert (r.exit_code, r.timed_out) == (124, True), r
r = c.run_javascript("console.log('x'.repeat(1 << 20))")
assert len(r.stdout) == 65536 and r.stdout_truncated, len(r.stdout)
print("runs ok")

def refused(fn, cls, reason):
    try:
        fn()
    except cls as e:
        assert e.not_dispatched == reason, (e, e.not_dispatched)
        return str(e)
    raise AssertionError("not refused")

refused(lambda: c.run_javascript("1", minimum_isolation="vm"), InsufficientIsolationError, "isolation")
refused(lambda: c.run_project({"a.txt": "x"}, ["cat a.txt"]), UnsupportedError, "unsupported")
refused(lambda: c.open_session(), UnsupportedError, "unsupported")
refused(lambda: Client(url, token="wrong").run_javascript("1"), PlimsollError, "permission")
refused(lambda: c.run_javascript("1", grant_profile="crm"), PlimsollError, "permission")
refused(lambda: c.run_javascript(""), InvalidRequestError, "request")
print("refusals ok")

errors = []
def worker(i):
    try:
        res = Client(url, token=token).run_javascript(f"console.log({i} * 2)")
        assert res.stdout == f"{i * 2}\n".encode(), res
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
[t.start() for t in threads]
[t.join() for t in threads]
assert not errors, errors
print("concurrent ok")
"#;

fn wasm_daemon(name: &str, extra: &[(&str, &str)]) -> (Daemon, String) {
    super::wasm_daemon(name, "py", extra)
}

#[test]
fn the_published_client_accepts_our_answers_and_refusals() {
    let (d, token) = wasm_daemon("python", &[("SANDBOX_MAX_CONCURRENT", "32"), ("SANDBOX_PER_KEY_CONCURRENT", "32")]);
    let out = run_script(SCRIPT, &[("URL", &d.url()), ("TOKEN", &token)]);
    assert_eq!(out, "runs ok\nrefusals ok\nconcurrent ok\n");
}

/// Python at the process tier through the published client: a project of
/// `python3 FILE` steps with an artifact, and cells in a wasm session that keep state.
const PYTHON_ON_WASM: &str = r#"
import os
from plimsoll_client import Client
from plimsoll_client.errors import UnsupportedError
c = Client(os.environ["URL"], token=os.environ["TOKEN"])
info = c.describe()
assert info.project_environment.identity.startswith("cpython-wasm:sha256:"), info.project_environment
assert list(info.project_environment.languages) == ["python"], info.project_environment
r = c.run_project({"main.py": "import sys\nopen('out.txt', 'w').write(sys.argv[1] * 2)\nprint(6*7)\n"},
                  ["python3 -I main.py ab"], ["out.txt"], minimum_isolation="process")
assert (r.outcome, r.isolation, r.steps[0].stdout, r.steps[0].exit_code) == ("completed", "process", b"42\n", 0), r
assert [(a.path, a.content) for a in r.artifacts] == [("out.txt", b"abab")], r.artifacts
assert r.record is not None and r.record.environment == info.project_environment.identity, r.record
try:
    c.run_project({"main.py": "print(1)"}, ["python3 main.py | tee log"])
    raise AssertionError("a shell step ran")
except UnsupportedError as e:
    assert "the docker provider runs shell steps" in str(e), e
s = c.open_session(minimum_isolation="process")
r = s.run_cell("import statistics\nxs = [3, 1, 2]", language="python")
assert r.exit_code == 0 and r.interpreter_started, r
r = s.run_cell("statistics.median(xs)", language="python")
assert (r.stdout, r.interpreter_started) == (b"2\n", False), r
r = s.run_cell("xs[10]", language="python")
assert r.exit_code == 1 and b'File "<cell 3>"' in r.stderr and b"IndexError" in r.stderr, r
r = s.run_cell("let j = 1; j + 1", language="javascript")
assert r.stdout == b"2\n", r
summary = s.close()
assert (summary.calls, summary.end) == (4, "closed"), summary
print("python on wasm ok")
"#;

#[test]
fn the_published_client_runs_python_projects_and_cells_on_wasm() {
    let (d, token) = wasm_daemon("python-wasm", &[("SANDBOX_MAX_SESSIONS", "2")]);
    let out = run_script(PYTHON_ON_WASM, &[("URL", &d.url()), ("TOKEN", &token)]);
    assert_eq!(out, "python on wasm ok\n");
}

#[test]
fn a_failed_assert_fails_the_script_even_under_pythonoptimize() {
    // Set on the command only: the variable as a developer's shell might export it.
    let optimized = || {
        let mut cmd = Command::new(python());
        cmd.args(["-c", "assert False, 'marker-9'"]).env("PYTHONOPTIMIZE", "1");
        cmd
    };
    // The hazard is real: this interpreter skips the assert under the variable.
    let o = optimized().output().expect("python");
    assert!(o.status.success(), "PYTHONOPTIMIZE=1 kept the assert: {}", String::from_utf8_lossy(&o.stderr));
    // With it taken out, as every script of this suite runs, the assert fails the script.
    let o = keep_asserts(&mut optimized()).output().expect("python");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("AssertionError: marker-9"), "{err}");
}
