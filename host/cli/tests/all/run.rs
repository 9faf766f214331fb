//! `plimsoll-host run`: results, refusals, limits and exit statuses.

use std::time::{Duration, Instant};

use super::{err, exec, out, scratch};

const REFUSED: i32 = 69;

/// Asserts a refusal: exit 69, nothing on stdout, and exactly this line on stderr.
fn assert_refused(args: &[&str], stdin: &[u8], reason: &str, message: &str) {
    let o = exec(args, stdin);
    assert_eq!(o.status.code(), Some(REFUSED), "{args:?}: {}", err(&o));
    assert_eq!(out(&o), "", "{args:?}");
    assert_eq!(err(&o), format!("not dispatched ({reason}): {message}\n"), "{args:?}");
}

#[test]
fn the_readme_snippet_prints_the_tier_and_42() {
    let o = exec(&["run", "-c", "console.log(6*7)"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "provider wasm");
    assert_eq!(lines[1], "isolation process");
    assert_eq!(lines[2], "exit code 0");
    assert_eq!(lines[3], "timed out false");
    assert_eq!(lines[4], "truncated stdout=false stderr=false");
    assert!(lines[5].starts_with("duration ") && lines[5].ends_with("ms"), "{}", lines[5]);
    assert_eq!(lines[6], "stdout 42");
    assert_eq!(lines.len(), 7, "{text}");
}

#[test]
fn code_comes_from_a_file_or_standard_input() {
    let path = scratch("snippet.js", b"console.log('from a file')");
    let o = exec(&["run", &path], b"");
    assert!(out(&o).ends_with("stdout from a file\n"), "{}", out(&o));
    let o = exec(&["run", "-"], b"console.error('from stdin'); console.log(1)");
    assert_eq!(o.status.code(), Some(0));
    assert!(out(&o).ends_with("stdout 1\nstderr from stdin\n"), "{}", out(&o));
}

#[test]
fn the_guests_exit_code_is_the_status() {
    let o = exec(&["run", "-c", "throw new Error('x')"], b"");
    assert_eq!(o.status.code(), Some(1));
    assert!(out(&o).contains("exit code 1\n"));
    assert!(out(&o).contains("stderr Uncaught Error: x\n"), "{}", out(&o));
}

#[test]
fn json_prints_a_response_whose_record_checks() {
    let o = exec(&["run", "--json", "--min-isolation", "process", "-c", "console.log(6*7)"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let resp: plimsoll_core::wire::RunResponse = plimsoll_core::wire::from_json(&o.stdout).expect("a RunResponse");
    let rec = resp.record.clone().expect("a record");
    assert_eq!(resp.isolation, "process");
    assert_eq!(resp.javascript.as_ref().map(|j| j.stdout.as_slice()), Some(&b"42\n"[..]));
    let sent = plimsoll_core::wire::RunRequest {
        protocol: plimsoll_core::protocol::NUMBER,
        minimum_isolation: "process".into(),
        javascript: Some(plimsoll_core::wire::JavaScriptRun {
            code: "console.log(6*7)".into(),
            grant_profile: String::new(),
        }),
        ..Default::default()
    };
    assert_eq!(rec.request_sha256, plimsoll_core::record::request_digest(&sent));
    assert_eq!(rec.result_sha256, plimsoll_core::record::result_digest(&resp));
    assert_eq!(rec.record_sha256, plimsoll_core::record::record_digest(&rec).expect("v4"));
    assert!(rec.environment.starts_with("quickjs-wasm:sha256:"));
}

#[test]
fn a_vm_floor_runs_nothing() {
    assert_refused(
        &["run", "--min-isolation", "vm", "-c", "console.log(6*7)"],
        b"",
        "isolation",
        "sandbox isolation requirement not met: this provider runs at process, the request requires vm",
    );
    let o = exec(&["run", "--json", "--min-isolation", "kernel", "-c", "1"], b"");
    assert_eq!(o.status.code(), Some(REFUSED));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["notDispatched"], "isolation");
}

#[test]
fn bad_input_is_refused_marked_request() {
    assert_refused(&["run", "-c", ""], b"", "request", "invalid request: code is required");
    assert_refused(&["run", "-"], b"", "request", "invalid request: code is required");
    let big = vec![b'1'; (256 << 10) + 1];
    assert_refused(
        &["run", "-"],
        &big,
        "request",
        "invalid request: code is 262145 bytes, over the 262144 byte (256 KiB) limit",
    );
    let path = scratch("latin1.js", b"console.log('caf\xe9')");
    assert_refused(
        &["run", &path],
        b"",
        "request",
        "invalid request: code must be valid UTF-8 (invalid byte at offset 16)",
    );
    assert_refused(
        &["run", "-"],
        b"console.log(1)\0",
        "request",
        "invalid request: code must be valid UTF-8 without NUL bytes",
    );
    assert_refused(
        &["run", "--lang", "ruby", "-c", "puts 1"],
        b"",
        "request",
        "invalid request: unknown language \"ruby\" (want javascript or python)",
    );
    assert_refused(
        &["run", "--timeout-ms", "0", "-c", "1"],
        b"",
        "request",
        "invalid request: a timeout of 0 ms allows nothing to run; use 1 or more",
    );
    assert_refused(
        &["run", "--timeout-ms", "30001", "-c", "1"],
        b"",
        "request",
        "invalid request: a timeout of 30001 ms is over this provider's ceiling of 30000 ms",
    );
    assert_refused(
        &["run", "--min-isolation", "hypervisor", "-c", "1"],
        b"",
        "request",
        "invalid request: minimum isolation \"hypervisor\" is not a tier; use process, container, kernel or vm",
    );
    assert_refused(
        &["run", "--min-isolation", "none", "-c", "1"],
        b"",
        "request",
        "invalid request: minimum isolation \"none\" is not a floor; use process, container, kernel or vm, or leave it empty",
    );
}

#[test]
fn python_runs_on_the_embedded_default_as_python3_main_py() {
    // Needs guests/python/python.wasm (guests/python/build.sh; tests/run.sh builds it).
    let o = exec(&["run", "--lang", "python", "-c", "print(6*7)"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let text = out(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!((lines[0], lines[1], lines[2]), ("provider wasm", "isolation process", "exit code 0"), "{text}");
    assert_eq!(lines.last(), Some(&"stdout 42"), "{text}");
    let o = exec(&["run", "--lang", "python", "-"], b"import sys\nprint('to stderr', file=sys.stderr)\nsys.exit(3)");
    assert_eq!(o.status.code(), Some(3), "{}", err(&o));
    assert!(out(&o).ends_with("stdout\nstderr to stderr\n"), "{}", out(&o));
}

#[test]
fn a_configured_python_component_that_is_missing_names_the_build() {
    let o = super::host()
        .env("SANDBOX_WASM_PYTHON", "/nonexistent/python.wasm")
        .args(["run", "--lang", "python", "-c", "print(1)"])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(
        err(&o).contains(
            "SANDBOX_WASM_PYTHON names /nonexistent/python.wasm, which is not a file; build the CPython component \
             with guests/python/build.sh"
        ),
        "{}",
        err(&o)
    );
}

#[test]
fn an_endless_loop_stops_at_the_budget_with_exit_124() {
    // Warm the component cache so the measured run is the loop, not a compile.
    exec(&["run", "-c", "1"], b"");
    let start = Instant::now();
    let o = exec(&["run", "--timeout-ms", "500", "-c", "for(;;){}"], b"");
    let took = start.elapsed();
    assert_eq!(o.status.code(), Some(124), "{}", err(&o));
    assert!(out(&o).contains("timed out true\n"));
    // The deadline, not something else, ended it; precision is the bench's business.
    assert!(took < Duration::from_secs(15), "{took:?}");
}

#[test]
fn a_memory_bomb_is_a_result() {
    let o = exec(&["run", "-c", "let a=[]; for(;;) a.push(new Array(1e5).fill(1))"], b"");
    let code = o.status.code();
    assert!(code == Some(1) || code == Some(134), "{code:?}: {}", err(&o));
    assert!(out(&o).contains("out of memory"), "{}", out(&o));
}

#[test]
fn memory_is_configurable_and_a_bad_value_names_the_variable() {
    let mut cmd = super::host();
    let o = cmd.env("SANDBOX_MEMORY_MB", "lots").args(["run", "-c", "1"]).output().expect("run");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(err(&o), "plimsoll-host: SANDBOX_MEMORY_MB=\"lots\" is not a whole number of MiB from 1 to 4096\n");
    let o = super::host()
        .env("SANDBOX_MEMORY_MB", "16")
        .args(["run", "-c", "let s = 'x'.repeat(32 << 20); console.log(s.length)"])
        .output()
        .expect("run");
    assert_ne!(o.status.code(), Some(0), "32 MiB fit in a 16 MiB run: {}", out(&o));
    assert!(out(&o).contains("out of memory"), "{}", out(&o));
}

#[test]
fn ten_mib_of_output_keeps_64_kib() {
    let o = exec(&["run", "--json", "-c", "console.log('x'.repeat(10 << 20))"], b"");
    assert_eq!(o.status.code(), Some(0));
    let resp: plimsoll_core::wire::RunResponse = plimsoll_core::wire::from_json(&o.stdout).expect("json");
    let js = resp.javascript.expect("result");
    assert_eq!(js.stdout.len(), 64 << 10);
    assert!(js.stdout_truncated);
    let o = exec(&["run", "-c", "console.log('x'.repeat(10 << 20))"], b"");
    assert!(out(&o).contains("truncated stdout=true stderr=false\n"));
}

#[test]
fn usage_errors_exit_2() {
    let o = exec(&["run", "--provider", "docker", "-c", "1"], b"");
    assert_eq!(o.status.code(), Some(2));
    let o = exec(&["run"], b"");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(err(&o), "plimsoll-host: give the code with -c CODE, a FILE, or - for standard input\n");
}

#[test]
fn help_and_version() {
    for args in [&["--help"][..], &["run", "--help"], &["record", "digest", "--help"]] {
        let o = exec(args, b"");
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert!(out(&o).contains("Usage: plimsoll-host"), "{args:?}");
    }
    let o = exec(&["--version"], b"");
    assert_eq!(out(&o), format!("plimsoll-host {}\n", env!("CARGO_PKG_VERSION")));
}
