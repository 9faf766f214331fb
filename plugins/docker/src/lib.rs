//! The docker provider plugin. It drives containers only through the host's
//! `plimsoll:host/containers` capability, which checks every spec against the
//! lockdown; this plugin chooses commands, sizes and how to read results.
//!
//! Two rules from the original docker provider hold here:
//! - **the start marker**: a fresh random marker reaches stderr before any of the
//!   guest's code runs (a project's shell prints it before the runner exists; a
//!   snippet's interpreter, started ahead of the run, prints it when the run hands
//!   it its code); without it, nothing the container printed is a guest result
//!   (the engine, not the guest, failed);
//! - **authenticated reports**: a project's result is only what the runner reports
//!   in a frame whose HMAC verifies under a key no step can read.

mod session;

wit_bindgen::generate!({
    world: "plimsoll:provider/provider-plugin",
    path: ["../../wit/types", "../../wit/host", "../../wit/provider"],
    generate_all,
});

use exports::plimsoll::provider::provider::{Description, Grant, GrantWay, Guest, RunError};
use plimsoll::host::containers::{self, Container, Mount};
use plimsoll::host::log;
use plimsoll::types::types::{
    Evidence, File, Limits, ModuleRequest, ModuleResult, Output, ProjectOutcome, ProjectResult, Refusal, RefusalReason,
    SnippetResult, Tier,
};
use plimsoll_plugin_agent::runner;

/// Defaults for a limit the host left at zero.
const MEMORY_MB: u32 = 256;
const CPUS_MILLI: u32 = 1000;
const PIDS: u32 = 256;
const DISK_MB: u32 = 160;
const TMP_MB: u32 = 16;
const SHM_MB: u32 = 16;
const GUEST_UID: u32 = 61000;
/// The environment every guest process starts with (nothing from the image or host).
const GUEST_ENV: [&str; 3] = ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"];
const RUNNER: &str = "/opt/plimsoll/runner.py";
/// Exit code of a snippet its deadline ended.
const EXIT_TIMEOUT: i32 = 124;
/// Exit status of a process ended by SIGKILL.
const EXIT_SIGKILL: i32 = 137;

struct Plugin;

fn refused(reason: RefusalReason, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    // The WASI random source is the host's; without it no marker or key can be trusted.
    if getrandom::fill(&mut b).is_err() {
        return String::new();
    }
    hex::encode(b)
}

/// The runtime and image to use: the host lists only what it proved.
fn target() -> Result<(String, String), Refusal> {
    let runtime = containers::runtimes().into_iter().next();
    let image = containers::images().into_iter().next();
    match (runtime, image) {
        (Some(r), Some((id, _))) => Ok((r, id)),
        (None, _) => Err(refused(RefusalReason::Environment, "no container runtime was verified at startup")),
        (_, None) => Err(refused(RefusalReason::Environment, "no sandbox image was proven at startup")),
    }
}

fn or(v: u32, default: u32) -> u32 {
    if v == 0 { default } else { v }
}

fn evidence(image: &str, runtime: &str) -> Evidence {
    Evidence {
        tier: if runtime == "runsc" { Tier::Kernel } else { Tier::Container },
        environment: format!("docker-image:{image}"),
        software_identity: None,
        instance: None,
        claims: vec![("runtime".into(), runtime.into())],
    }
}

/// The size of a project's `/work`: what the disk budget leaves after `/tmp` and `/dev/shm`.
fn project_work_mb(limits: &Limits) -> Result<u32, Refusal> {
    let disk = or(limits.disk_mb, DISK_MB);
    match disk.saturating_sub(TMP_MB + SHM_MB) {
        0 => Err(refused(
            RefusalReason::Environment,
            format!(
                "a disk budget of {disk} MiB leaves no room for /work after /tmp and /dev/shm ({} MiB)",
                TMP_MB + SHM_MB
            ),
        )),
        rest => Ok(rest),
    }
}

/// A container's spec for `command`, with a `/work` tmpfs of `work_mb` when set; the
/// host's orphan sweep removes it `lifetime_s` after creation.
fn spec(
    limits: &Limits,
    runtime: &str,
    image: &str,
    command: Vec<String>,
    work_mb: Option<u32>,
    lifetime_s: u32,
) -> containers::Spec {
    let mut tmpfs =
        vec![Mount { target: "/tmp".into(), size_mb: TMP_MB }, Mount { target: "/dev/shm".into(), size_mb: SHM_MB }];
    if let Some(size_mb) = work_mb {
        tmpfs.push(Mount { target: "/work".into(), size_mb });
    }
    containers::Spec {
        image_id: image.into(),
        runtime: runtime.into(),
        user: GUEST_UID,
        memory_mb: or(limits.memory_mb, MEMORY_MB),
        cpus_milli: or(limits.cpus_milli, CPUS_MILLI),
        pids: or(limits.pids, PIDS),
        tmpfs,
        workdir: if work_mb.is_some() { "/work".into() } else { "/tmp".into() },
        command,
        env: Vec::new(),
        labels: vec![("dev.plimsoll.plugin.provider".into(), "docker".into())],
        lifetime_s,
    }
}

/// A single run's container lifetime: its budget and five minutes.
fn run_lifetime(limits: &Limits) -> u32 {
    (limits.timeout_ms / 1000).saturating_add(300)
}

/// Variables the host sets on a granted run's container (its broker socket, run
/// token, client and routes); the guest keeps these and [`GUEST_ENV`], nothing else.
const GRANT_ENV: [&str; 6] = [
    "PLIMSOLL_HOST_API",
    "PLIMSOLL_HOST_TOKEN",
    "PLIMSOLL_HOST_GLOBAL",
    "PLIMSOLL_HOST_ROUTES",
    "NODE_OPTIONS",
    "PYTHONPATH",
];

/// The shell script that execs `"$@"` under `env -i` with [`GUEST_ENV`], plus
/// [`GRANT_ENV`] when the host mounted a broker: nothing of the image's environment
/// reaches the guest. `before` runs first.
fn scrubbing(before: &str) -> String {
    let keep: Vec<String> = GUEST_ENV.iter().map(|kv| format!("'{kv}'")).collect();
    let grant: Vec<String> = GRANT_ENV.iter().map(|k| format!("\"{k}=${k}\"")).collect();
    format!(
        "{before}if [ -n \"${{PLIMSOLL_HOST_API-}}\" ]; then exec /usr/bin/env -i {keep} {grant} \"$@\"; fi\n\
         exec /usr/bin/env -i {keep} \"$@\"",
        keep = keep.join(" "),
        grant = grant.join(" ")
    )
}

/// Node, started ahead of its run: it writes its first argument ([`READY`]) to
/// stdout; reads stdin to its end, whose first line holds the run's start and end
/// markers; writes the start marker to stderr; and runs the rest as `node -` runs
/// stdin (module `[stdin]` in the working directory, `process.argv` `[node, "-"]`).
/// After every `exit` listener, unless an exception no handler took is ending it,
/// it writes its last words for `wait-for-end`: the end marker on stdout; the end
/// marker, its exit status and the end marker on stderr.
const NODE_WAITING: &str = r#"(() => {
const fs = require("fs");
fs.writeSync(1, process.argv[1]);
const input = fs.readFileSync(0);
const nl = input.indexOf(10);
if (nl < 0) process.exit(125);
const [start, end] = input.subarray(0, nl).toString().split(" ");
fs.writeSync(2, start);
const body = input.subarray(nl + 1).toString();
if (end) {
  let fatal = false;
  process.on("uncaughtExceptionMonitor", () => { fatal = process.listenerCount("uncaughtException") === 0; });
  const emit = process.emit;
  process.emit = function (event) {
    const r = Reflect.apply(emit, this, arguments);
    if (event === "exit" && !fatal) {
      try {
        fs.writeSync(1, end);
        fs.writeSync(2, end + (((process.exitCode || 0) | 0) & 255) + end);
      } catch {}
    }
    return r;
  };
}
const path = require("path"), vm = require("vm"), Module = require("module");
new vm.Script(body, { filename: "[stdin]" });
process.argv.splice(1, Infinity, "-");
process.execArgv.splice(0, Infinity);
const file = path.join(process.cwd(), "[stdin]");
const m = new Module("[stdin]");
m.filename = file;
m.paths = Module._nodeModulePaths(process.cwd());
Object.assign(globalThis, { module: m, exports: m.exports, __dirname: ".", require: Module.createRequire(file) });
globalThis.__filename = "[stdin]";
const wrap = Module.wrap;
Module.wrap = (script) => {
  Module.wrap = wrap;
  return script + "\n;(function () {})";
};
m._compile(body, file);
})();"#;

/// Python, started ahead of its run: it writes its first argument ([`READY`]) to
/// stdout; reads stdin to its end, whose first line holds the run's start and end
/// markers; writes the start marker to stderr; and runs the rest as `python3 -I -`
/// runs stdin (`__main__`, file `<stdin>`, `sys.argv == ["-"]`), with the same
/// tracebacks and exit statuses. Its first `atexit` handler, so the last to run,
/// flushes and writes its last words for `wait-for-end` (see [`NODE_WAITING`]).
const PYTHON_WAITING: &str = r#"import sys
def _plimsoll_run(sys=sys):
    sys.stdout.write(sys.argv[1])
    sys.stdout.flush()
    data = sys.stdin.buffer.read()
    head, nl, src = data.partition(b"\n")
    if not nl:
        sys.exit(125)
    start, _, end = head.partition(b" ")
    sys.stderr.write(start.decode("ascii", "replace"))
    sys.stderr.flush()
    status = [1]
    if end:
        import atexit, os
        def last_words():
            for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                try:
                    s.flush()
                except Exception:
                    pass
            try:
                os.write(1, end)
                os.write(2, end + str(status[0] & 255).encode() + end)
            except OSError:
                pass
        atexit.register(last_words)
    sys.argv[:] = ["-"]
    sys.orig_argv[2:] = ["-"]
    main = sys.modules["__main__"].__dict__
    del main["_plimsoll_run"], main["sys"]
    main.update(__file__="<stdin>", __cached__=None)
    try:
        code = compile(src, "<stdin>", "exec")
    except (SyntaxError, ValueError) as e:
        e.__traceback__ = None
        sys.excepthook(type(e), e, None)
        sys.exit(1)
    try:
        exec(code, main)
    except SystemExit as e:
        c = e.code
        status[0] = 0 if c is None else c if isinstance(c, int) else 1
        raise
    except BaseException as e:
        # The traceback starts at the guest's code, as the interpreter's own would.
        e.__traceback__ = e.__traceback__.tb_next
        sys.excepthook(type(e), e, e.__traceback__)
        status[0] = 130 if isinstance(e, KeyboardInterrupt) else 1
        sys.exit(status[0])
    status[0] = 0
_plimsoll_run()
"#;

/// What a waiting interpreter writes to stdout once it is loaded and waits on
/// stdin (the host reads it before the run, so the run's stdout starts after it).
const READY: &str = "plimsoll: waiting\n";

/// An interpreter for `language`, started with a scrubbed environment, that says
/// [`READY`] and waits
/// on stdin for its start marker and code (see [`NODE_WAITING`], [`PYTHON_WAITING`]).
fn waiting(language: &str) -> Option<Vec<String>> {
    let argv: &[&str] = match language {
        "javascript" => &["node", "-e", NODE_WAITING, READY],
        "python" => &["python3", "-I", "-c", PYTHON_WAITING, READY],
        _ => return None,
    };
    let mut cmd: Vec<String> = vec!["/bin/sh".into(), "-c".into(), scrubbing(""), "plimsoll".into()];
    cmd.extend(argv.iter().map(|s| s.to_string()));
    Some(cmd)
}

/// Splits the marker off stderr. None: the guest's command never ran.
fn strip_marker(stderr: &[u8], marker: &str) -> Option<Vec<u8>> {
    stderr.strip_prefix(marker.as_bytes()).map(<[u8]>::to_vec)
}

fn output(bytes: Vec<u8>, truncated: bool) -> Output {
    Output { bytes, truncated }
}

fn snippet(language: &str, code: &str, limits: &Limits) -> Result<(SnippetResult, Evidence), RunError> {
    let Some(command) = waiting(language) else {
        return Err(RunError::Refused(refused(
            RefusalReason::Unsupported,
            format!("the docker provider runs javascript and python, not {language}"),
        )));
    };
    let (runtime, image) = target().map_err(RunError::Refused)?;
    let (marker, end) = (random_hex(16), random_hex(16));
    if marker.is_empty() || end.is_empty() {
        return Err(RunError::Refused(refused(RefusalReason::Environment, "no randomness for the start marker")));
    }
    // The interpreter may have been started ahead of this run (the host's warm
    // pool); it does nothing before its stdin, which carries this run's markers.
    let spec = spec(limits, &runtime, &image, command, None, run_lifetime(limits));
    let c = Container::launch(&spec, READY.as_bytes())
        .map_err(|e| RunError::Refused(refused(RefusalReason::Environment, e)))?;
    let stdin = [marker.as_bytes(), b" ", end.as_bytes(), b"\n", code.as_bytes()].concat();
    c.start(&stdin).map_err(|e| RunError::MayHaveRun(format!("starting the container: {e}")))?;
    let r = c
        .wait_for_end(end.as_bytes(), limits.timeout_ms, limits.max_output_bytes)
        .map_err(|e| RunError::MayHaveRun(format!("waiting for the container: {e}")));
    c.remove();
    let r = r?;
    let Some(mut stderr) = strip_marker(&r.stderr, &marker) else {
        return Err(RunError::MayHaveRun(format!(
            "docker did not run the container's command (no start marker; exit {:?}, timed out {})",
            r.exit_code, r.timed_out
        )));
    };
    let exit_code = match (r.timed_out, r.exit_code) {
        (true, _) => EXIT_TIMEOUT,
        // SIGKILL that was neither the deadline nor the OOM killer came from outside
        // the sandbox (an operator, the engine). A guest that SIGKILLs its own main
        // process lands here too: an error, never a result the engine may have faked.
        (false, Some(EXIT_SIGKILL)) if !r.oom_killed => {
            return Err(RunError::MayHaveRun(
                "the sandbox's main process was killed from outside (SIGKILL, not the deadline or the OOM killer)"
                    .into(),
            ));
        }
        (false, Some(code)) => code,
        (false, None) => return Err(RunError::MayHaveRun("the container ended without an exit status".into())),
    };
    if r.oom_killed {
        let note =
            format!("\nplimsoll: the sandbox ran out of memory (limit {} MiB)\n", or(limits.memory_mb, MEMORY_MB));
        stderr.extend_from_slice(note.as_bytes());
    }
    let result = SnippetResult {
        exit_code,
        timed_out: r.timed_out,
        stdout: output(r.stdout, r.stdout_truncated),
        stderr: output(stderr, r.stderr_truncated),
    };
    Ok((result, evidence(&image, &runtime)))
}

/// The runner's plan for a container of `memory_mb` under `runtime`.
fn plan(
    files: &[File],
    steps: &[String],
    artifacts: &[String],
    limits: &Limits,
    (memory_mb, runtime): (u32, &str),
    key: &str,
) -> serde_json::Value {
    let runsc = runtime == "runsc";
    // Under gVisor, /proc/meminfo is the sandbox's own. Its ptrace platform spends
    // host threads and memory on every guest task, so a fork bomb of some 30 to 40
    // tasks ends the whole sandbox (exit 2) before the container's pids limit says
    // no: a step's tasks are capped below that.
    let (source, processes) = if runsc {
        (runner::MemorySource::Meminfo, runner::RUNSC_STEP_PROCESSES)
    } else {
        (runner::MemorySource::Cgroup, 0)
    };
    runner_plan((files, steps, artifacts), limits, (memory_mb, source), processes, (&GUEST_ENV, None), key)
}

plimsoll_plugin_agent::session_glue!();

/// Runs a project whose runner authenticates its report with `key` (hex).
fn project(
    files: &[File],
    steps: &[String],
    artifacts: &[String],
    limits: &Limits,
    key: &str,
) -> Result<(ProjectResult, Evidence), RunError> {
    let (runtime, image) = target().map_err(RunError::Refused)?;
    let marker = random_hex(16);
    if marker.is_empty() {
        return Err(RunError::Refused(refused(RefusalReason::Environment, "no randomness for the start marker")));
    }
    let end = random_hex(16);
    if end.is_empty() {
        return Err(RunError::Refused(refused(RefusalReason::Environment, "no randomness for the end marker")));
    }
    let plan = plan(files, steps, artifacts, limits, (or(limits.memory_mb, MEMORY_MB), &runtime), key);
    let work = project_work_mb(limits).map_err(RunError::Refused)?;
    // The runner may have been started ahead of this run (the host's warm pool); it
    // does nothing before its stdin, which carries this run's markers and plan.
    let mut command: Vec<String> = vec!["/bin/sh".into(), "-c".into(), scrubbing(""), "plimsoll".into()];
    command.extend(["python3", "-I", RUNNER, "--waiting", READY].map(String::from));
    let spec = spec(limits, &runtime, &image, command, Some(work), run_lifetime(limits));
    let c = Container::launch(&spec, READY.as_bytes())
        .map_err(|e| RunError::Refused(refused(RefusalReason::Environment, e)))?;
    let stdin = [marker.as_bytes(), b" ", end.as_bytes(), b"\n", plan.to_string().as_bytes()].concat();
    c.start(&stdin).map_err(|e| RunError::MayHaveRun(format!("starting the container: {e}")))?;
    // The runner's own deadline is the budget; the container gets a little more to report.
    let wait_ms = limits.timeout_ms.saturating_add(5000);
    let r = c
        .wait_for_end(end.as_bytes(), wait_ms, report_room(limits, steps.len()))
        .map_err(|e| RunError::MayHaveRun(format!("waiting for the container: {e}")));
    c.remove();
    let r = r?;
    if strip_marker(&r.stderr, &marker).is_none() {
        return Err(RunError::MayHaveRun(format!(
            "docker did not run the container's command (no start marker; exit {:?})",
            r.exit_code
        )));
    }
    let ended = runner::Ended { timed_out: r.timed_out, oom_killed: r.oom_killed, exit_code: r.exit_code };
    Ok((read_report(&r.stdout, key, &ended), evidence(&image, &runtime)))
}

/// A step that hunts for the runner's report key.
fn key_probe() -> File {
    let script = r#"
import os, re
me = os.getpid()
hexes, probed = set(), []
def scan(data):
    for m in re.finditer(rb"[0-9a-f]{64}", data):
        hexes.add(m.group().decode())
def hunt(pid):
    for name in ("environ", "cmdline"):
        try:
            scan(open(f"/proc/{pid}/{name}", "rb").read()); probed.append(f"{pid}/{name}")
        except OSError:
            pass
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = []
    for fd in fds:
        try:
            f = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
            scan(os.read(f, 1 << 20)); os.close(f); probed.append(f"{pid}/fd/{fd}")
        except OSError:
            pass
    try:
        mem = open(f"/proc/{pid}/mem", "rb")
        maps = open(f"/proc/{pid}/maps").read().splitlines()
    except OSError:
        return
    for line in maps:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        try:
            mem.seek(lo); scan(mem.read(hi - lo)); probed.append(f"{pid}/mem")
        except (OSError, ValueError, OverflowError):
            pass
# Every process but this one: the runner (PID 1), the shell that started this step.
for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me):
    hunt(pid)
print("probed " + ",".join(sorted(set(probed))))
for h in sorted(hexes):
    print(h)
"#;
    File { path: "keyprobe.py".into(), content: script.as_bytes().to_vec() }
}

/// The plugin's own smoke test: the real snippet path for each language, and a
/// project whose step tries to read the runner's report key.
fn smoke() -> Result<Evidence, Refusal> {
    let limits =
        Limits { timeout_ms: 60_000, memory_mb: 0, cpus_milli: 0, pids: 0, disk_mb: 0, max_output_bytes: 65536 };
    let fail = |check: &str, detail: String| refused(RefusalReason::Environment, format!("{check}: {detail}"));
    for (lang, code) in [("javascript", "console.log(6*7)"), ("python", "print(6*7)")] {
        match snippet(lang, code, &limits) {
            Ok((r, _)) if r.exit_code == 0 && r.stdout.bytes == b"42\n" => {}
            Ok((r, _)) => {
                let got = String::from_utf8_lossy(&r.stderr.bytes).into_owned();
                return Err(fail(&format!("{lang} snippet"), format!("exit {}, stderr {got:?}", r.exit_code)));
            }
            Err(RunError::Refused(r)) => return Err(r),
            Err(RunError::MayHaveRun(e)) => return Err(fail(&format!("{lang} snippet"), e)),
        }
    }
    // The step tries every way to the runner's key it might have (environment,
    // command line, open descriptors, memory) and prints each 64-hex string it
    // finds; the key must not be among them. Files a step may open are fine as long
    // as the key is not in them (gVisor, for one, lets a same-uid step read the
    // runner's environment, but not its memory).
    let key = report_key()?;
    let (r, evidence) = match project(&[key_probe()], &["python3 -I keyprobe.py".to_string()], &[], &limits, &key) {
        Ok(ok) => ok,
        Err(RunError::Refused(r)) => return Err(r),
        Err(RunError::MayHaveRun(e)) => return Err(fail("runner", e)),
    };
    if r.outcome != ProjectOutcome::Completed {
        return Err(fail("runner", format!("outcome {:?}: {}", r.outcome, r.detail)));
    }
    let Some(step) = r.steps.first().filter(|s| s.exit_code == 0) else {
        let why = r
            .steps
            .first()
            .map(|s| format!("exit {}, stderr {:?}", s.exit_code, String::from_utf8_lossy(&s.stderr.bytes)));
        return Err(fail("report key", format!("the key probe did not run to its end ({})", why.unwrap_or_default())));
    };
    let seen = String::from_utf8_lossy(&step.stdout.bytes).into_owned();
    if !seen.contains("probed ") {
        return Err(fail("report key", format!("the key probe printed {seen:?}")));
    }
    if seen.lines().any(|l| l == key) {
        return Err(fail("report key", "a step read the runner's report key".into()));
    }
    session::smoke(&limits).map_err(|detail| fail("session", detail))?;
    log::info(&format!(
        "smoke test passed: javascript, python, runner report key not found ({}), a session kept state in both languages and swept a leftover",
        seen.lines().next().unwrap_or("")
    ));
    Ok(evidence)
}

impl Guest for Plugin {
    type Session = session::DockerSession;

    fn describe() -> Description {
        Description {
            name: "docker".into(),
            languages: vec!["javascript".into(), "python".into()],
            projects: true,
            modules: false,
            sessions: true,
            grants: GrantWay::None,
            max_timeout_ms: 300_000,
            max_project_timeout_ms: 1_800_000,
        }
    }

    fn preflight() -> Result<Evidence, Refusal> {
        let (runtime, image) = target()?;
        Ok(evidence(&image, &runtime))
    }

    fn smoke_test() -> Result<Evidence, Refusal> {
        smoke()
    }

    fn sweep(_keep: Vec<String>) -> Result<Vec<String>, String> {
        // The host sweeps containers itself (their owner and lifetime labels).
        Ok(Vec::new())
    }

    fn release(_targets: Vec<String>) -> Vec<String> {
        // The host removes every container a call created when the call ends.
        Vec::new()
    }

    fn run_snippet(
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(SnippetResult, Evidence), RunError> {
        no_remote_grant(grant.as_ref()).map_err(RunError::Refused)?;
        snippet(&language, &code, &limits)
    }

    fn run_project(
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(ProjectResult, Evidence), RunError> {
        no_remote_grant(grant.as_ref()).map_err(RunError::Refused)?;
        project(&files, &steps, &artifacts, &limits, &report_key().map_err(RunError::Refused)?)
    }

    fn run_module(_request: ModuleRequest, _limits: Limits) -> Result<(ModuleResult, Evidence), RunError> {
        Err(RunError::Refused(refused(
            RefusalReason::Unsupported,
            "the docker provider does not run module tables yet",
        )))
    }
}

/// Refuses a remote backend's grant: this provider's containers reach the
/// broker through the socket the host mounts (its `describe` says so, and the
/// host never sends one).
pub(crate) fn no_remote_grant(grant: Option<&Grant>) -> Result<(), Refusal> {
    match grant {
        None => Ok(()),
        Some(_) => Err(refused(
            RefusalReason::Unsupported,
            "the docker provider's containers reach the broker through the host's socket, not a remote grant",
        )),
    }
}

export!(Plugin);

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::process::{Command, Stdio};

    use super::{GUEST_ENV, Limits, READY, plan, waiting};

    /// An end marker without digits, so the status between two is plain to read.
    const END: &str = "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";

    struct Ran {
        status: i32,
        stdout: Vec<u8>,
        stderr: Vec<u8>,
    }

    fn run(argv: &[String], stdin: &[u8]) -> Ran {
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .envs(GUEST_ENV.iter().filter_map(|kv| kv.split_once('=')))
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{argv:?} did not start: {e}"));
        child.stdin.take().expect("stdin").write_all(stdin).expect("write stdin");
        let out = child.wait_with_output().expect("wait");
        Ran { status: out.status.code().unwrap_or(-1), stdout: out.stdout, stderr: out.stderr }
    }

    /// Takes the start marker and last words off a waiting run's output; returns
    /// the status its last words gave, if it wrote them.
    fn unwrap(r: &mut Ran) -> Option<i32> {
        r.stdout = r.stdout.strip_prefix(READY.as_bytes()).expect("the ready word comes first").to_vec();
        r.stderr = r.stderr.strip_prefix(b"START").expect("the start marker comes first").to_vec();
        let out = r.stdout.strip_suffix(END.as_bytes())?.to_vec();
        let err = r.stderr.strip_suffix(END.as_bytes())?;
        let at = err.windows(END.len()).rposition(|w| w == END.as_bytes())?;
        let status = std::str::from_utf8(&err[at + END.len()..]).ok()?.parse().ok()?;
        r.stderr = err[..at].to_vec();
        r.stdout = out;
        Some(status)
    }

    #[test]
    fn the_waiting_runner_reads_its_markers_then_its_plan_and_speaks_last() {
        let runner = concat!(env!("CARGO_MANIFEST_DIR"), "/../../runners/project/runner.py");
        // The runner writes under /work, which only a sandbox has; a plan with no
        // files and no steps still reports.
        let plan = serde_json::json!({"files": [], "steps": [], "artifacts": [], "reportKey": "00".repeat(32)});
        let argv: Vec<String> = ["python3", "-I", runner, "--waiting", READY].map(String::from).into();
        let mut r = run(&argv, format!("START {END}\n{plan}").as_bytes());
        assert_eq!(r.status, 0, "{}", String::from_utf8_lossy(&r.stderr));
        assert_eq!(unwrap(&mut r), Some(0), "the last words give status 0");
        let out = String::from_utf8_lossy(&r.stdout);
        assert!(out.starts_with("\n<<<PLIMSOLL_REPORT_V2>>> "), "the report follows the ready word: {out}");
        assert!(out.ends_with(r#"{"steps":[],"artifacts":[],"artifactsTruncated":false}"#), "{out}");
    }

    /// Stderr without stack frames and file lines, which name the bootstrap's
    /// frames and the module's path and so differ by design.
    fn gist(stderr: &[u8]) -> String {
        String::from_utf8_lossy(stderr)
            .lines()
            .filter(|l| !l.starts_with("    at ") && !l.contains("[stdin]") && !l.starts_with("Node.js v"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Runs `code` both ways and checks they agree; returns the last words' status.
    fn same(language: &str, reference: &[&str], code: &str) -> Option<i32> {
        let plain: Vec<String> = reference.iter().map(|s| s.to_string()).collect();
        let want = run(&plain, code.as_bytes());
        let mut got = run(&waiting(language).expect("a waiting command"), format!("START {END}\n{code}").as_bytes());
        let said = unwrap(&mut got);
        assert_eq!(got.status, want.status, "{language} {code:?}: exit status; stderr {}", gist(&got.stderr));
        assert_eq!(got.stdout, want.stdout, "{language} {code:?}: stdout");
        assert_eq!(gist(&got.stderr), gist(&want.stderr), "{language} {code:?}: stderr");
        if let Some(status) = said {
            assert_eq!(status, got.status, "{language} {code:?}: the last words name the exit status");
        }
        said
    }

    #[test]
    fn waiting_node_runs_stdin_as_node_dash_does_and_speaks_last() {
        let js = |code: &str| same("javascript", &["node", "-"], code);
        for code in [
            "console.log(6*7)",
            "process.exit(3)",
            "process.exitCode = 4",
            "process.exit(300)",
            "process.on('exit', c => console.log('bye', c)); console.log(1)",
            "process.on('exit', () => { process.exitCode = 9 }); process.exit(2)",
            "setTimeout(() => console.log('later'), 20); console.log('now')",
            "console.log(process.argv.length, process.argv[1], process.execArgv, __filename, typeof require, this === globalThis)",
            "var top = 1; console.log(globalThis.top)",
            "import('fs').then(m => console.log(typeof m.readFileSync))",
            "process.on('uncaughtException', e => console.log('caught', e.message)); throw new Error('x')",
            "console.error('only stderr')",
        ] {
            assert!(js(code).is_some(), "{code:?}: no last words on a clean exit");
        }
        // Ended by an exception no handler took: the engine's exit is awaited instead.
        for code in ["throw new Error('boom')", "1 +", "Promise.reject(new Error('rejected'))"] {
            assert_eq!(js(code), None, "{code:?}: last words before the error is printed");
        }
    }

    #[test]
    fn waiting_python_runs_stdin_as_python_dash_does_and_speaks_last() {
        let py = |code: &str| same("python", &["python3", "-I", "-"], code);
        for code in [
            "print(6*7)",
            "1/0",
            "import sys; sys.exit(3)",
            "import sys; sys.exit('bye')",
            "import sys; sys.exit(300)",
            "def f(:",
            "def g():\n    raise ValueError('deep')\ng()",
            "import atexit; atexit.register(lambda: print('bye')); 1/0",
            "import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.05), print('t'))).start()\nprint('main')",
            "import sys; sys.stdout.write('no newline')",
            "import sys; print(sys.argv, sys.orig_argv[1:], __name__, __file__, sorted(globals()))",
            "import sys; print(len(sys.stdin.read()))",
        ] {
            assert!(py(code).is_some(), "{code:?}: no last words");
        }
        assert_eq!(py("import os; print(1, flush=True); os._exit(5)"), None, "os._exit skips atexit");
        // `raise KeyboardInterrupt` is left out: python3 then kills itself with
        // SIGINT, which PID 1 (the interpreter, in a container) ignores and exits
        // 130, as the waiting one does; here, not PID 1, the signal ends it.
    }

    #[test]
    fn the_plan_tells_the_runner_the_memory_its_steps_live_in() {
        let limits =
            Limits { timeout_ms: 5_000, memory_mb: 0, cpus_milli: 0, pids: 0, disk_mb: 0, max_output_bytes: 1024 };
        let p = plan(&[], &["true".into()], &[], &limits, (256, "runsc"), "00");
        assert_eq!(p["memoryBytes"], serde_json::json!(256u64 << 20));
        assert_eq!(p["memorySource"], "meminfo", "gVisor's /proc/meminfo is the sandbox's own");
        assert_eq!(p["stepProcesses"], 24, "a fork bomb under runsc stops at EAGAIN");
        let runc = plan(&[], &[], &[], &limits, (256, "runc"), "00");
        assert_eq!((runc["memorySource"].as_str(), runc["stepProcesses"].as_u64()), (Some("cgroup"), Some(0)));
        assert_eq!((p["timeoutMs"].as_u64(), p["maxOutput"].as_u64()), (Some(5_000), Some(1024)));
    }

    #[test]
    fn a_waiting_interpreter_without_its_marker_line_runs_nothing() {
        for (language, code) in [("javascript", "console.log(1)"), ("python", "print(1)")] {
            let r = run(&waiting(language).expect("command"), code.as_bytes());
            assert_eq!(
                (r.status, r.stdout.as_slice(), r.stderr.as_slice()),
                (125, READY.as_bytes(), &b""[..]),
                "{language}"
            );
        }
        assert_eq!(waiting("ruby"), None);
    }
}
