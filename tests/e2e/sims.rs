//! Simulation runs end to end: `plimsoll-host sim run` on the embedded default and
//! through daemons (wasm in-process; docker under runc and runsc, with the judge in
//! the sandbox image), the published Python client driving a simulation run and a
//! module table unchanged, and one fingerprint on every tier.

use std::path::Path;
use std::process::Output;

use plimsoll_client::{Client, Options};
use plimsoll_core::wire::{ModuleRow, ModuleRun, ProjectOutcome, RunRequest};
use sha2::{Digest, Sha256};

use super::docker::{docker_env, fixture, signed_plugin, start};
use super::python::run_script;
use super::{host, rt, scratch, wasm_daemon};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The original's published fingerprints (balance from 0.2 rad, 20 s at 10 ms).
const ORACLE_ACCEPTED: &str = "63cfd676924a3896127d60c97333677f3b3c804dd764dba001121f6c234a937f";
const ORACLE_DRAFT: &str = "060d98e8140c03800347c4c947c07b2ab0011c3e6017e9a84529793afbbb53b9";
/// The original's buck s1 fingerprint (its C and JavaScript laws agree).
const BUCK_S1: &str = "9bcc0a3a963d11853ba0bd1a7bc3850a00d55115b6a2ee3de2cdd51ad69006f7";
/// The original's VanDerPol table checksum (100 rows, mu 0.1..5, 20 s at 10 ms).
const VAN_DER_POL: &str = "d1109d62b94796946a2b5a706d45e6259a005b63ee392fed918f39945c980815";

fn example(rel: &str) -> String {
    Path::new(ROOT).join("examples/sims").join(rel).display().to_string()
}

/// `plimsoll-host sim run ARGS` with `env`.
fn sim(args: &[&str], env: &[(&str, &str)]) -> Output {
    host().args(["sim", "run"]).args(args).envs(env.iter().copied()).output().expect("sim run")
}

/// The summary JSON, the last line of a completed `sim run`.
fn summary(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "status {:?}\nstdout:\n{out}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let last = out.lines().last().expect("a last line");
    serde_json::from_str(last).expect("the last line is the summary JSON")
}

#[test]
fn the_oracle_gives_one_fingerprint_twice_on_the_embedded_default() {
    let accepted = example("cartpole/accepted.js");
    let a = summary(&sim(&["--plant", "cartpole", "--controller", &accepted], &[]));
    let b = summary(&sim(&["--plant", "cartpole", "--controller", &accepted], &[]));
    assert_eq!(a["fingerprint"], ORACLE_ACCEPTED);
    assert_eq!(a["fingerprint"], b["fingerprint"]);
    assert_eq!(
        (&a["tier"], &a["provider"], &a["fell_at"], &a["passed"]),
        (&"process".into(), &"wasm".into(), &serde_json::Value::Null, &true.into())
    );
    let draft = summary(&sim(&["--plant", "cartpole", "--controller", &example("cartpole/draft.js")], &[]));
    assert_eq!(
        (&draft["fingerprint"], &draft["fell_at"], &draft["passed"]),
        (&ORACLE_DRAFT.into(), &5.96.into(), &false.into())
    );
}

#[test]
fn a_c_controller_on_the_embedded_default_is_refused_naming_the_fix() {
    let o = sim(&["--plant", "buck", "--controller", &example("buck/accepted.c")], &[]);
    assert_eq!(o.status.code(), Some(69));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("not dispatched (unsupported): accepted.c is C: the run's first step compiles it with clang"),
        "{err}"
    );
}

/// The summary of a judge step's stdout.
fn step_summary(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    serde_json::from_str(text.lines().last().expect("a summary line")).expect("summary JSON")
}

/// The original tests' sweep rows and the checksum layout they hashed.
pub(super) fn van_der_pol_table() -> ModuleRun {
    let rows = (0..100).map(|i| ModuleRow { values: vec![0.1 + (4.9 * f64::from(i)) / 99.0, 2.0, 0.0] }).collect();
    ModuleRun { model: "vanderpol".into(), rows, end_time: 20.0, step: 0.01 }
}

fn checksum(runs: &[plimsoll_core::wire::ModuleRowResult]) -> String {
    let mut bytes = Vec::new();
    for r in runs {
        bytes.extend_from_slice(&r.status.to_le_bytes());
        for v in &r.outputs {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    hex::encode(Sha256::digest(&bytes))
}

/// The same checks against any daemon: the oracle through `sim run --daemon`, a
/// judge step and a module table through the Rust client, and a memory-bomb row.
fn suite(url: &str, token: &str, tier: &str) {
    let env = [("PLIMSOLL_CALLER_TOKEN", token)];
    let accepted = example("cartpole/accepted.js");
    let s = summary(&sim(&["--plant", "cartpole", "--controller", &accepted, "--daemon", url], &env));
    assert_eq!((&s["fingerprint"], &s["tier"]), (&ORACLE_ACCEPTED.into(), &tier.into()), "{s}");
    let rust = Path::new(ROOT).join("guests/sims/controllers/buck/buck.wasm").display().to_string();
    let s = summary(&sim(&["--plant", "buck", "--controller", &rust, "--daemon", url], &env));
    assert_eq!((&s["fingerprint"], &s["passed"]), (&BUCK_S1.into(), &true.into()), "the Rust form: {s}");

    let client = Client::new(url, Some(token.to_string())).expect("client");
    let rt = rt();
    let js = std::fs::read_to_string(example("buck/accepted.js")).expect("example");
    let step = "plimsoll-judge --plant buck --scenario s1 --controller c.js";
    let opts = Options { timeout_ms: 60_000, ..Options::default() };
    let r = rt
        .block_on(client.run_project(&[("c.js", &js)], &[step], &["trajectory.bin"], &opts))
        .expect("a judge project");
    let p = r.project.expect("project result");
    assert_eq!((p.outcome, p.steps.len()), (ProjectOutcome::Completed, 1), "{p:?}");
    let s = step_summary(&p.steps[0].stdout);
    assert_eq!(s["fingerprint"], BUCK_S1, "the JavaScript form");
    let err = String::from_utf8_lossy(&p.steps[0].stderr);
    assert!(!err.contains("was not precompiled"), "the judge compiled what the image should hold: {err}");
    assert_eq!(hex::encode(Sha256::digest(&p.artifacts[0].content)), BUCK_S1);

    let module = RunRequest { module: Some(van_der_pol_table()), timeout_ms: 60_000, ..RunRequest::default() };
    let r = rt.block_on(client.run(module)).expect("a module table");
    assert_eq!(r.isolation, tier);
    let m = r.module.expect("module result");
    assert_eq!((m.outcome, m.width, m.runs.len()), (ProjectOutcome::Completed, 2, 100));
    assert_eq!(checksum(&m.runs), VAN_DER_POL);

    let greedy = ModuleRun {
        model: "greedy".into(),
        rows: [[1.0, 7.0, 0.0], [64.0, 8.0, 0.0], [2.0, 9.0, 0.0]]
            .iter()
            .map(|r| ModuleRow { values: r.to_vec() })
            .collect(),
        end_time: 1.0,
        step: 1.0,
    };
    let r = rt.block_on(client.run(RunRequest { module: Some(greedy), ..RunRequest::default() })).expect("greedy");
    let statuses: Vec<i32> = r.module.expect("module").runs.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [1, -7, 1], "a row past the 16 MiB instance cap fails alone");
}

/// Every bad input of a simulation run, through a daemon: each is a step result with
/// the judge's exit code and its reason, and the daemon keeps serving.
#[test]
fn bad_inputs_are_step_results_with_their_reason_and_the_daemon_keeps_serving() {
    let (d, token) = wasm_daemon("sims-bad", "bad", &[]);
    let client = Client::new(&d.url(), Some(token)).expect("client");
    let rt = rt();
    let opts = Options { timeout_ms: 60_000, ..Options::default() };
    let answer = |body: &str| {
        format!("require('readline').createInterface({{ input: process.stdin }}).on('line', () => {{ {body} }});")
    };
    let ok = answer("process.stdout.write('0\\n')");
    let import = "(module (import \"env\" \"cos\" (func (param f64) (result f64))) (func (export \"control\") \
                  (param f64 f64 f64 f64 i32) (result f64) (f64.const 0)))";
    let cases: [(&str, &str, String, i32, &str); 12] = [
        ("c.js", "--plant pendulum", ok.clone(), 2, "unknown plant \"pendulum\": the plants are"),
        ("c.js", "--plant cartpole --params 1,2", ok.clone(), 2, "--params takes three finite numbers"),
        ("c.js", "--plant cartpole --tick 0", ok.clone(), 2, "--tick must be a finite number greater than 0"),
        ("c.js", "--plant cartpole --stop -5", ok.clone(), 2, "--stop must be a finite number greater than 0"),
        (
            "c.js",
            "--plant cartpole --tick 0.00001 --stop 1000",
            ok.clone(),
            2,
            "100000000 ticks (stop 1000 / tick 0.00001) is over the limit of 1000000",
        ),
        (
            "c.js",
            "--plant cartpole --stop 1",
            answer(""),
            3,
            "controller answered nothing (it wrote no line) at tick 0",
        ),
        (
            "c.js",
            "--plant cartpole --stop 1 --answer-ms 300",
            answer("for (;;) {}"),
            3,
            "controller did not answer within 300 ms at tick 0",
        ),
        (
            "c.js",
            "--plant cartpole --stop 1",
            answer("process.stdout.write('1 2\\n')"),
            3,
            "controller answered 2 value(s); the plant takes 1 at tick 0",
        ),
        (
            "c.js",
            "--plant cartpole --stop 1",
            answer("process.stdout.write('NaN\\n')"),
            3,
            "controller answered \"NaN\", which is not a finite number at tick 0",
        ),
        (
            "c.js",
            "--plant cartpole --stop 1",
            answer("process.stdout.write('x'.repeat(2 << 20))"),
            3,
            "controller flooded its output (more than 1048576 bytes beyond its answers) at tick 0",
        ),
        (
            "c.js",
            "--plant cartpole --stop 1 --answer-ms 30000",
            answer("const a = []; for (;;) a.push(new Array(1 << 16).fill(1.5));"),
            3,
            "out of memory",
        ),
        ("c.wat", "--plant cartpole --stop 1", import.to_string(), 3, "imports env.cos (function)"),
    ];
    for (file, args, source, exit, reason) in cases {
        let step = format!("plimsoll-judge {args} --controller {file}");
        let r = rt
            .block_on(client.run_project(&[(file, &source)], &[&step], &["trajectory.bin"], &opts))
            .unwrap_or_else(|e| panic!("{step}: {e}"));
        let p = r.project.expect("project result");
        assert_eq!((p.outcome, p.steps.len()), (ProjectOutcome::Completed, 1), "{step}: {p:?}");
        let err = String::from_utf8_lossy(&p.steps[0].stderr);
        assert_eq!(p.steps[0].exit_code, exit, "{step}: {err}");
        assert!(err.contains(reason), "{step}: want {reason:?} in {err}");
        assert!(p.artifacts.is_empty(), "{step}: a failed run writes no trajectory");
    }
    // Still serving: the oracle, unchanged.
    let src = std::fs::read_to_string(example("cartpole/accepted.js")).expect("example");
    let step = "plimsoll-judge --plant cartpole --controller accepted.js";
    let r = rt.block_on(client.run_project(&[("accepted.js", &src)], &[step], &[], &opts)).expect("after the faults");
    assert_eq!(step_summary(&r.project.expect("project").steps[0].stdout)["fingerprint"], ORACLE_ACCEPTED);
}

#[test]
fn simulation_runs_through_a_wasm_daemon() {
    let (d, token) = wasm_daemon("sims-wasm", "sim", &[]);
    suite(&d.url(), &token, "process");
    let log = d.log().join("\n");
    let line = log.lines().find(|l| l.contains("\"module run\"") && l.contains("vanderpol")).expect("an audit line");
    for needle in ["\"rows\":100", "\"row_width\":3", "\"max_steps\":2002", "\"outcome\":\"completed\"", "\"width\":2"]
    {
        assert!(line.contains(needle), "{needle} in {line}");
    }
    assert!(!line.contains("0.1,") && !line.contains("4.95"), "the audit line carries no parameter value: {line}");
}

const PYTHON: &str = r#"
import hashlib, json, os
from plimsoll_client import Client
c = Client(os.environ["URL"], token=os.environ["TOKEN"])
src = open(os.environ["CONTROLLER"]).read()
r = c.run_project({"accepted.js": src}, ["plimsoll-judge --plant cartpole --controller accepted.js"], ["trajectory.bin"],
                  minimum_isolation=os.environ["TIER"], timeout=60)
assert r.outcome == "completed" and len(r.steps) == 1 and r.steps[0].exit_code == 0, r
s = json.loads(r.steps[0].stdout.decode().splitlines()[-1])
art = r.artifacts[0]
data = art.content if isinstance(art.content, bytes) else art[1]
assert hashlib.sha256(data).hexdigest() == s["fingerprint"], s
print(s["fingerprint"], r.isolation)
m = c.run_module("lorenz", [[20.0, 10.0, 8.0 / 3.0]], end_time=60, step=0.01, timeout=60)
print(m.outcome, m.width, m.runs[0].status)
"#;

#[test]
fn the_published_client_drives_a_simulation_run_and_a_table_unchanged() {
    let (d, token) = wasm_daemon("sims-python", "py", &[]);
    let out = run_script(
        PYTHON,
        &[("URL", &d.url()), ("TOKEN", &token), ("CONTROLLER", &example("cartpole/accepted.js")), ("TIER", "process")],
    );
    assert_eq!(out, format!("{ORACLE_ACCEPTED} process\ncompleted 3 6000\n"));
}

fn docker_sims(runtime: &str, tier: &str) {
    let Some(fx) = fixture(runtime) else { return };
    let dir = scratch(&format!("sims-{runtime}"));
    let (plugin, key) = signed_plugin(&fx, &dir);
    let d = start(&docker_env(&fx, &plugin, &key, runtime));
    let token = super::docker::TOKEN;
    suite(&d.url(), token, tier);
    // A C controller is compiled by the run's first step, with clang in the image.
    let env = [("PLIMSOLL_CALLER_TOKEN", token)];
    let s =
        summary(&sim(&["--plant", "buck", "--controller", &example("buck/accepted.c"), "--daemon", &d.url()], &env));
    assert_eq!((&s["fingerprint"], &s["tier"]), (&BUCK_S1.into(), &tier.into()), "the C form: {s}");
    let out = run_script(
        PYTHON,
        &[("URL", &d.url()), ("TOKEN", token), ("CONTROLLER", &example("cartpole/accepted.js")), ("TIER", tier)],
    );
    assert_eq!(out, format!("{ORACLE_ACCEPTED} {tier}\ncompleted 3 6000\n"));
}

#[test]
fn simulation_runs_under_runc_give_the_same_fingerprints() {
    docker_sims("runc", "container");
}

#[test]
fn simulation_runs_under_runsc_give_the_same_fingerprints() {
    docker_sims("runsc", "kernel");
}
