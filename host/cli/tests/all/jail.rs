//! The jailed engine worker, driven through its pool as the daemon drives it: real
//! workers run snippets behind their walls, and fake ones that crash, hang or
//! answer garbage are killed, replaced, and their runs reported "may have run".

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use plimsoll_core::provider::{Grant, HostAnswer, HostApi, Provider as _, RunError, SessionReach, Snippet};
use plimsoll_core::session::{Call, CallError, Cell, Output, Session};
use plimsoll_core::validate::Language;
use plimsoll_core::wire::{
    JavaScriptResult, ModuleRow, ModuleRun, ProjectFile, ProjectOutcome, ProjectRun, SessionEnd,
};
use plimsoll_runtime::jail::frame::{Answer, Hello, Job};
use plimsoll_runtime::jail::{Jail, JailConfig};
use plimsoll_runtime::{Engine, EngineConfig, JAILED_INSTANCE, PythonGuest, WasmConfig, WasmProvider};

fn config(exe: PathBuf, workers: usize) -> JailConfig {
    JailConfig {
        exe,
        workers,
        hello: Hello {
            memory_mb: 64,
            output_cap: 1 << 20,
            cache_dir: None,
            python: None,
            python_sha256: None,
            slots: 1,
        },
    }
}

fn real(workers: usize) -> Arc<Jail> {
    Jail::start(config(PathBuf::from(env!("CARGO_BIN_EXE_plimsoll-host")), workers)).expect("workers start")
}

/// A snippet without a grant through the pool.
fn js(jail: &Arc<Jail>, code: &str, timeout: Duration) -> Result<JavaScriptResult, RunError> {
    let job = Job::Snippet { code: code.into(), timeout_ms: timeout.as_millis() as u64, grant: None };
    jail.run(job, None, timeout, |a| match a {
        Answer::Ran(r) => Ok(r),
        other => Err(other),
    })
}

#[test]
fn a_jailed_worker_runs_snippets_behind_its_walls() {
    let jail = real(1);
    let said = jail.ready();
    assert!(said.identity.starts_with("quickjs-wasm:sha256:"), "{said:?}");
    for wall in ["no new privileges", "landlock", "seccomp"] {
        assert!(said.walls.iter().any(|w| w.contains(wall)), "{wall} missing from {:?}", said.walls);
    }
    for i in 0..20 {
        let r = js(&jail, &format!("console.log({i} * 2)"), Duration::from_secs(5)).expect("a run");
        assert_eq!((r.exit_code, r.stdout.as_slice()), (0, format!("{}\n", i * 2).as_bytes()));
    }
    let r = js(&jail, "for (;;) {}", Duration::from_millis(300)).expect("a spinning run is a result");
    assert_eq!((r.exit_code, r.timed_out), (124, true));
    let r =
        js(&jail, "const a = []; for (;;) a.push(new Array(1 << 20).fill(7));", Duration::from_secs(10)).expect("oom");
    assert!(String::from_utf8_lossy(&r.stderr).contains("out of memory"), "{r:?}");
    let r = js(&jail, "console.log('after')", Duration::from_secs(5)).expect("the worker serves on");
    assert_eq!(r.stdout, b"after\n");
}

#[test]
fn the_worker_process_has_no_privileges_namespaces_or_environment_of_the_daemon() {
    let jail = real(1);
    let pid = jail.pids()[0];
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| status.lines().find(|l| l.starts_with(name)).unwrap_or_default().to_string();
    assert_eq!(field("NoNewPrivs:"), "NoNewPrivs:\t1");
    assert_eq!(field("Seccomp:"), "Seccomp:\t2", "a filter, not strict mode or none");
    assert_eq!(field("CapEff:"), "CapEff:\t0000000000000000", "no capability outside its namespace");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    assert!(environ.is_empty(), "the worker's environment: {:?}", String::from_utf8_lossy(&environ));
    for ns in ["user", "net", "mnt", "ipc", "uts"] {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).expect("ns");
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).expect("ns");
        assert_ne!(theirs, ours, "the worker shares the daemon's {ns} namespace");
    }
    // The socket, /dev/null, the daemon's stderr for its last words, and what the
    // worker made for itself (memory images, its event loop's epoll, eventfd and
    // socket pair, its socket's copy): nothing the daemon (this process) holds
    // leaks in, so no socket or file past stderr is one the daemon has open.
    // Each descriptor: its number, what it names, and the object's device and inode.
    let fds = |pid: &str| -> Vec<(u32, String, (u64, u64))> {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .expect("fds")
            .filter_map(|e| {
                let e = e.ok()?;
                let meta = std::fs::metadata(e.path()).ok()?;
                let target = std::fs::read_link(e.path()).ok()?.display().to_string();
                Some((e.file_name().to_str()?.parse().ok()?, target, (meta.dev(), meta.ino())))
            })
            .collect()
    };
    let worker = fds(&pid.to_string());
    let daemon: Vec<(u64, u64)> = fds("self").into_iter().map(|(_, _, object)| object).collect();
    for (fd, target, object) in &worker {
        let expected = match fd {
            0 => target.starts_with("socket:"),
            1 => target == "/dev/null",
            2 => true,
            // Every anonymous inode (an epoll, an eventfd) is the kernel's one
            // inode: nothing to compare, as the test has always allowed them.
            _ if target.starts_with("anon_inode:") => true,
            _ => {
                !daemon.contains(object)
                    && (target.starts_with("socket:") || target.starts_with("/memfd:wasm-memory-image"))
            }
        };
        assert!(expected, "fd {fd} -> {target} {object:?} in {worker:?}; the daemon holds {daemon:?}");
    }
}

/// A stand-in worker, `behaviour` after it says ready (Python, like the daemon's
/// own speaks the frames).
fn fake(dir: &std::path::Path, name: &str, behaviour: &str) -> PathBuf {
    let path = dir.join(name);
    let script = format!(
        r#"#!/usr/bin/python3
import json, os, struct, sys, time
def exactly(n):
    b = b""
    while len(b) < n:
        b += os.read(0, n - len(b))
    return b
def read():
    return json.loads(exactly(struct.unpack("<I", exactly(4))[0]))
def write(raw):
    os.write(0, struct.pack("<I", len(raw)) + raw)
read()
{behaviour}
"#
    );
    std::fs::write(&path, script).expect("fake");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    path
}

const READY: &str = r#"write(json.dumps({"identity": "fake", "walls": []}).encode())"#;

#[test]
fn a_worker_that_crashes_hangs_or_answers_garbage_is_replaced_and_its_run_may_have_run() {
    let dir = std::env::temp_dir().join(format!("plimsoll-jail-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cases = [
        ("crash", "read()\nsys.exit(3)", "ended without answering (exit status: 3)"),
        ("hang", "read()\ntime.sleep(60)", "did not answer within the run's budget and 2 s"),
        ("garbage", "read()\nwrite(b'not json')\ntime.sleep(60)", "answered garbage (not a frame of the protocol: "),
    ];
    for (name, behaviour, why) in cases {
        let exe = fake(&dir, name, &format!("{READY}\n{behaviour}"));
        let jail = Jail::start(config(exe, 1)).expect("the fake says ready");
        let before = jail.pids();
        let err = js(&jail, "console.log(1)", Duration::from_millis(200)).expect_err("no answer");
        let RunError::MayHaveRun(detail) = &err else { panic!("{name}: {err:?}") };
        let expected = format!("the engine worker (pid {}) {why}", before[0]);
        assert!(detail.starts_with(&expected), "{name}: {detail}");
        assert!(detail.ends_with("; it was replaced"), "{name}: {detail}");
        let after = jail.pids();
        assert_eq!(after.len(), 1, "{name}: the pool is whole again");
        assert_ne!(after, before, "{name}: a new worker took the old one's place");
        let gone = std::fs::read_to_string(format!("/proc/{}/status", before[0])).unwrap_or_default();
        assert!(gone.is_empty() || gone.contains("State:\tZ"), "{name}: the old worker is gone");
    }
    // A worker that says something else than ready never joins the pool.
    let exe = fake(&dir, "babble", "write(b'hello there')");
    let err = Jail::start(config(exe, 1)).expect_err("no ready");
    assert!(err.starts_with("an engine worker did not start: not a frame of the protocol: "), "{err}");
    std::fs::remove_dir_all(&dir).expect("clean");
}

#[test]
fn a_run_that_finds_every_worker_busy_past_its_budget_is_shed_not_queued() {
    let dir = std::env::temp_dir().join(format!("plimsoll-jail-busy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let exe = fake(&dir, "slow", &format!("{READY}\nread()\ntime.sleep(60)"));
    let jail = Jail::start(config(exe, 1)).expect("ready");
    let busy = std::thread::spawn({
        let jail = std::sync::Arc::clone(&jail);
        move || js(&jail, "1", Duration::from_millis(1500))
    });
    std::thread::sleep(Duration::from_millis(300));
    let err = js(&jail, "2", Duration::from_millis(200)).expect_err("shed");
    let RunError::Refused(r) = &err else { panic!("{err:?}") };
    assert_eq!(
        (r.reason, r.message.as_str()),
        (plimsoll_core::Reason::Capacity, "all 1 engine workers are busy (1 run each); retry shortly")
    );
    assert!(matches!(busy.join().expect("join"), Err(RunError::MayHaveRun(_))));
    std::fs::remove_dir_all(&dir).expect("clean");
}

/// A wasm provider whose engine runs in two real workers, CPython and the judge
/// included; the components are precompiled into a cache of its own first.
fn jailed_provider(dir: &std::path::Path) -> WasmProvider {
    let cache = dir.join("cache");
    let engine = Engine::new(&EngineConfig { max_instances: 16, cache_dir: Some(cache.clone()) }).expect("engine");
    let config = WasmConfig { memory_mb: 128, ..WasmConfig::default() };
    let python = plimsoll_runtime::python::component_path(None)
        .expect("checkout path")
        .expect("no CPython component: run guests/python/build.sh (tests/run.sh does)");
    let guest = PythonGuest::from_file(&engine, &python).expect("CPython loads");
    let python_sha256 = Some(hex::encode(guest.digest()));
    let provider = WasmProvider::new(&engine, config.clone()).expect("provider").with_python(guest);
    provider.sims().library().preload().expect("the judge's components");
    let hello = Hello {
        memory_mb: config.memory_mb,
        output_cap: config.output_cap as u64,
        cache_dir: Some(cache.display().to_string()),
        python: Some(python.display().to_string()),
        python_sha256,
        slots: 2,
    };
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_plimsoll-host"));
    let jail = Jail::start(JailConfig { exe, workers: 2, hello }).expect("workers start");
    provider.with_jail(jail)
}

/// A broker stand-in: records each call and answers the one route it knows.
struct Recorder {
    calls: std::sync::Mutex<Vec<(String, String, Option<String>)>>,
}

impl HostApi for Recorder {
    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer {
        let body = body.map(|b| String::from_utf8_lossy(b).into_owned());
        self.calls.lock().expect("calls").push((method.into(), path.into(), body));
        let (status, body) = match (method, path) {
            ("GET", "/items/42") => (200, r#"{"name":"bolt"}"#),
            _ => (404, r#"{"error":"no such item"}"#),
        };
        HostAnswer { status, content_type: "application/json".into(), body: body.as_bytes().to_vec() }
    }
}

fn recorder_grant() -> (Grant, Arc<Recorder>) {
    let recorder = Arc::new(Recorder { calls: std::sync::Mutex::default() });
    let grant = Grant {
        global: "host".into(),
        routes: vec!["GET /items/*".into(), "POST /items".into()],
        preamble: String::new(),
        api: recorder.clone(),
    };
    (grant, recorder)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_jailed_provider_runs_every_kind_in_its_workers_and_its_records_say_so() {
    let dir = tempdir("kinds");
    let wasm = jailed_provider(&dir);
    assert_eq!(wasm.engine_mode(), Some("jailed"));
    let snippet = |code: &str, grant: Option<&Grant>| {
        wasm.run_snippet(&Snippet {
            language: Language::JavaScript,
            code,
            timeout: Duration::from_secs(10),
            floor: None,
            grant,
        })
    };

    let r = snippet("console.log(6 * 7)", None).expect("a snippet");
    assert_eq!((r.result.exit_code, text(&r.result.stdout).as_str()), (0, "42\n"));
    assert_eq!(r.evidence.instance, JAILED_INSTANCE);

    // A granted snippet's calls come back to this process's broker, one by one.
    let (grant, recorder) = recorder_grant();
    let r = snippet(
        r#"host.get("/items/*", [42]).then((i) => console.log(i.name));
           host.post("/items", {n: 1}).catch((e) => console.log(e.status));"#,
        Some(&grant),
    )
    .expect("a granted snippet");
    assert_eq!(text(&r.result.stdout), "bolt\n404\n", "{}", text(&r.result.stderr));
    assert_eq!(
        *recorder.calls.lock().expect("calls"),
        [("GET".into(), "/items/42".into(), None), ("POST".into(), "/items".into(), Some(r#"{"n":1}"#.into()))]
    );

    // A Python project, its grant's calls through the same way.
    let (grant, recorder) = recorder_grant();
    let project = ProjectRun {
        files: vec![ProjectFile {
            path: "m.py".into(),
            content: "import plimsoll_host as host\nprint(host.get('/items/*', [42])['name'])\nopen('out.txt', 'w').write('kept')\n"
                .into(),
        }],
        steps: vec!["python3 m.py".into()],
        artifacts: vec!["out.txt".into()],
        ..ProjectRun::default()
    };
    let r = wasm.run_project(&project, Duration::from_secs(30), None, Some(&grant)).expect("a project");
    let step = &r.result.steps[0];
    assert_eq!((step.exit_code, text(&step.stdout).as_str()), (0, "bolt\n"), "{}", text(&step.stderr));
    assert_eq!(r.result.artifacts[0].content, b"kept");
    assert_eq!(r.evidence.instance, JAILED_INSTANCE);
    assert!(r.evidence.environment.starts_with("cpython-wasm:sha256:"), "{:?}", r.evidence);
    assert_eq!(recorder.calls.lock().expect("calls").len(), 1);

    // A controller compiled in the worker (its memory image a sealed memfd), and a
    // JavaScript one on the preloaded engine: simulation runs complete.
    let wat = "(module (memory (export \"memory\") 1) (data (i32.const 0) \"gain\") \
               (func (export \"control\") (param f64 f64 f64 f64 i32) (result f64) (f64.const 0)))";
    let js =
        "require('readline').createInterface({ input: process.stdin }).on('line', () => process.stdout.write('0\\n'));";
    for (file, code) in [("c.wat", wat), ("c.js", js)] {
        let project = ProjectRun {
            files: vec![ProjectFile { path: file.into(), content: code.into() }],
            steps: vec![format!("plimsoll-judge --plant cartpole --stop 1 --controller {file}")],
            ..ProjectRun::default()
        };
        let r = wasm.run_project(&project, Duration::from_secs(30), None, None).expect("a simulation run");
        let step = &r.result.steps[0];
        assert_eq!(r.result.outcome, ProjectOutcome::Completed, "{file}: {}", text(&step.stderr));
        assert!(text(&step.stdout).contains("\"ticks\":100"), "{file}: {}", text(&step.stdout));
        assert_eq!(r.evidence.instance, JAILED_INSTANCE);
    }

    // A module table: the judge's threads start behind the filter.
    let module = ModuleRun {
        model: "vanderpol".into(),
        rows: (0..4).map(|i| ModuleRow { values: vec![0.5 + f64::from(i), 2.0, 0.0] }).collect(),
        end_time: 2.0,
        step: 0.01,
    };
    let r = wasm.run_module(&module, Duration::from_secs(30), None).expect("a module table");
    assert_eq!(r.result.runs.len(), 4, "{}", r.result.outcome_detail);
    let statuses: Vec<i32> = r.result.runs.iter().map(|row| row.status).collect();
    assert_eq!(statuses, [200; 4]);
    assert_eq!(r.evidence.instance, JAILED_INSTANCE);
    std::fs::remove_dir_all(&dir).expect("clean");
}

#[test]
fn a_jailed_session_keeps_its_interpreters_in_a_worker_of_its_own_and_ends_with_it() {
    let dir = tempdir("session");
    let wasm = jailed_provider(&dir);
    let jail = wasm.jail().expect("jailed");
    let pool = jail.pids();
    let own = jail.spare_pid().expect("a worker started ahead for sessions");
    let opened = wasm.open_session(None, SessionReach::Nothing).expect("a session");
    // The session took the spare for its own, not one of the pool's.
    assert!(!pool.contains(&own));
    assert_eq!(jail.pids(), pool);
    let mut session = opened.session;
    assert_eq!(opened.evidence.instance, JAILED_INSTANCE);
    let cell = |session: &mut Box<dyn Session>, language: Language, code: &str, files: &[ProjectFile]| {
        session.call(Call::Cell(Cell { language, code, files, timeout: Duration::from_secs(20), floor: None }))
    };
    let file = [ProjectFile { path: "data.txt".into(), content: "seven".into() }];
    let a = cell(&mut session, Language::JavaScript, "globalThis.n = 41; console.log(readFile('data.txt'))", &file)
        .expect("a cell");
    let Output::Cell(c) = &a.output else { panic!("{a:?}") };
    assert_eq!((text(&c.stdout).as_str(), c.interpreter_started), ("seven\n", true));
    let b = cell(&mut session, Language::JavaScript, "console.log(n + 1)", &[]).expect("a cell");
    let Output::Cell(c) = &b.output else { panic!("{b:?}") };
    assert_eq!((text(&c.stdout).as_str(), c.interpreter_started), ("42\n", false));
    assert_eq!(b.evidence.instance, JAILED_INSTANCE);
    let p = cell(&mut session, Language::Python, "x = open('data.txt').read()\nx.upper()", &[]).expect("python");
    let Output::Cell(c) = &p.output else { panic!("{p:?}") };
    assert_eq!(text(&c.stdout), "'SEVEN'\n", "{}", text(&c.stderr));
    assert!(p.evidence.environment.starts_with("cpython-wasm:sha256:"));

    // When its worker dies, the session ends with it, saying so.
    kill(own);
    let err = cell(&mut session, Language::JavaScript, "console.log(n)", &[]).expect_err("the worker is gone");
    let CallError::MayHaveRun { detail, ended: Some(ending) } = &err else { panic!("{err:?}") };
    assert!(
        detail.starts_with(&format!("the session's engine worker (pid {own}) ended without answering (signal: 9")),
        "{detail}"
    );
    assert_eq!(ending.end, SessionEnd::MainProcessEnded);
    assert_eq!(
        ending.detail,
        "the session's engine worker ended (its interpreters and files with it); open a new session"
    );
    let err = cell(&mut session, Language::JavaScript, "1", &[]).expect_err("still gone");
    assert!(matches!(&err, CallError::Ended(e) if e.end == SessionEnd::MainProcessEnded), "{err:?}");
    session.close();

    // A session holding a grant: every cell's calls, in either language, come back
    // to this process's broker as that cell's.
    let (grant, recorder) = recorder_grant();
    let mut held = wasm.open_session(None, SessionReach::Held(&grant)).expect("a session").session;
    let a = cell(&mut held, Language::JavaScript, "host.get('/items/*', [42]).then((i) => console.log(i.name))", &[])
        .expect("a cell");
    let Output::Cell(c) = &a.output else { panic!("{a:?}") };
    assert_eq!(text(&c.stdout), "bolt\n", "{}", text(&c.stderr));
    let p = cell(&mut held, Language::Python, "import plimsoll_host as host\nhost.get('/items/*', [42])['name']", &[])
        .expect("a python cell");
    let Output::Cell(c) = &p.output else { panic!("{p:?}") };
    assert_eq!(text(&c.stdout), "'bolt'\n", "{}", text(&c.stderr));
    assert_eq!(recorder.calls.lock().expect("calls").len(), 2);
    held.close();
    std::fs::remove_dir_all(&dir).expect("clean");
}

fn kill(pid: u32) {
    // SAFETY: kill takes plain integers.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    std::thread::sleep(Duration::from_millis(100));
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("plimsoll-jail-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
    dir
}

#[test]
fn a_worker_that_answers_another_kind_or_calls_without_a_grant_is_held_to_the_protocol() {
    let dir = tempdir("kinds-fake");
    // Answers a snippet with a cell's result: garbage, killed and replaced.
    let exe = fake(
        &dir,
        "wrong",
        &format!(
            "{READY}\nid = read()['job']['id']\n\
             write(json.dumps({{\"answer\": {{\"id\": id, \"answer\": {{\"cell\": {{}}}}}}}}).encode())\ntime.sleep(60)"
        ),
    );
    let jail = Jail::start(config(exe, 1)).expect("ready");
    let before = jail.pids();
    let err = js(&jail, "1", Duration::from_secs(2)).expect_err("wrong kind");
    let RunError::MayHaveRun(detail) = &err else { panic!("{err:?}") };
    assert_eq!(
        detail,
        &format!(
            "the engine worker (pid {}) answered another kind of job (a cell's result); it was replaced",
            before[0]
        )
    );
    // Calls an API its run holds no grant for: the daemon answers 403 itself,
    // and the worker shows the body it got as its result.
    let exe = fake(
        &dir,
        "caller",
        &format!(
            "{READY}\nid = read()['job']['id']\n\
             write(json.dumps({{\"call\": {{\"id\": id, \"method\": \"GET\", \"path\": \"/secrets\", \"body\": None}}}}).encode())\n\
             reply = read()['reply']\n\
             write(json.dumps({{\"answer\": {{\"id\": id, \"answer\": {{\"ran\": {{\"stdout\": reply['body'], \"exitCode\": reply['status']}}}}}}}}).encode())\ntime.sleep(60)"
        ),
    );
    let jail = Jail::start(config(exe, 1)).expect("ready");
    let r = js(&jail, "1", Duration::from_secs(2)).expect("an answer");
    assert_eq!(r.exit_code, 403);
    assert_eq!(text(&r.stdout), r#"{"error":"forbidden: this run holds no grant, so GET /secrets is not allowed"}"#);
    std::fs::remove_dir_all(&dir).expect("clean");
}

#[test]
fn one_worker_runs_its_slots_at_once_and_a_crash_takes_every_job_it_held() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_plimsoll-host"));
    let mut cfg = config(exe, 1);
    cfg.hello.slots = 4;
    let jail = Jail::start(cfg).expect("workers start");
    // Four guests that each spin 800 ms within a 1.5 s budget: one after another
    // the later ones would wait past their budgets; side by side all four finish.
    let spin = "const t = Date.now(); while (Date.now() - t < 800) {} console.log('done')";
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let jail = Arc::clone(&jail);
            std::thread::spawn(move || js(&jail, spin, Duration::from_millis(1500)))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // A fifth finds every slot taken and is shed.
    let err = js(&jail, "1", Duration::from_millis(100)).expect_err("shed");
    let RunError::Refused(r) = &err else { panic!("{err:?}") };
    assert_eq!(r.message, "all 1 engine workers are busy (4 runs each); retry shortly");
    for run in runs {
        let r = run.join().expect("join").expect("a result");
        assert_eq!((r.exit_code, text(&r.stdout).as_str()), (0, "done\n"), "{}", text(&r.stderr));
    }

    // Two jobs in flight when the worker is killed: both may have run, and one
    // worker takes its place.
    let before = jail.pids();
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let jail = Arc::clone(&jail);
            std::thread::spawn(move || js(&jail, "for (;;) {}", Duration::from_secs(20)))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    kill(before[0]);
    for run in runs {
        let err = run.join().expect("join").expect_err("the worker died");
        let RunError::MayHaveRun(detail) = &err else { panic!("{err:?}") };
        assert!(
            detail.starts_with(&format!("the engine worker (pid {}) ended without answering (signal: 9", before[0])),
            "{detail}"
        );
    }
    let after = jail.pids();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, before);
    let r = js(&jail, "console.log('after')", Duration::from_secs(5)).expect("served after");
    assert_eq!(r.stdout, b"after\n");
}
