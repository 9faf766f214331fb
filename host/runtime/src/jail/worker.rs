//! The worker's side: `plimsoll-host engine-worker`, run only by the daemon's
//! [`super::Jail`] with the socket as its stdin.

use std::collections::HashMap;
use std::os::fd::FromRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use plimsoll_core::provider::{Grant, HostAnswer, HostApi, Provider as _, RunError, Snippet};
use plimsoll_core::validate::Language;
use plimsoll_core::wire::{ProjectFile, ProjectRun};
use plimsoll_core::{Refusal, wire};

use super::frame::{self, Answer, Down, FrameError, GrantClient, Hello, Job, Ready, Up};
use super::{confine, lock};
use crate::wasm::WasmSession;
use crate::{Engine, EngineConfig, PythonGuest, WasmConfig, WasmProvider};

/// Serves jobs until the daemon closes the socket. Returns the exit status: 0 when
/// the daemon hung up, 1 when setup or the socket failed (said on stderr).
pub fn serve() -> i32 {
    // SAFETY: the daemon starts the worker with its end of a socket pair as fd 0,
    // and nothing else in this process uses fd 0.
    let mut sock = unsafe { UnixStream::from_raw_fd(0) };
    match setup_and_serve(&mut sock) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("plimsoll engine worker: {e}");
            1
        }
    }
}

/// The worker's way back to the daemon: one writer for every job's frames, and the
/// jobs waiting for a reply to a call.
struct Line {
    out: Mutex<UnixStream>,
    waiting: Mutex<HashMap<u64, mpsc::Sender<Reply>>>,
}

/// A reply to one call, as the daemon sent it.
type Reply = (u16, String, Vec<u8>);

impl Line {
    fn send(&self, frame: &Up) -> Result<(), FrameError> {
        frame::write(&mut *lock(&self.out), frame)
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::Sender<Reply>>> {
        lock(&self.waiting)
    }
}

/// One job's grant calls, carried to the daemon over the socket: the worker holds
/// no credential and reaches no network; the daemon's broker checks each call.
struct Proxy {
    /// The job the calls travel as: a run's own, or for a session's held grant the
    /// session's current call.
    id: Arc<AtomicU64>,
    line: Arc<Line>,
}

impl HostApi for Proxy {
    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer {
        let failed = |why: &str| HostAnswer {
            status: 502,
            content_type: "application/json".into(),
            body: serde_json::json!({ "error": format!("plimsoll engine worker: {why}") }).to_string().into_bytes(),
        };
        let id = self.id.load(Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        self.line.waiting().insert(id, tx);
        let call = Up::Call { id, method: method.into(), path: path.into(), body: body.map(<[u8]>::to_vec) };
        if let Err(e) = self.line.send(&call) {
            self.line.waiting().remove(&id);
            return failed(&format!("sending the call: {e}"));
        }
        match rx.recv() {
            Ok((status, content_type, body)) => HostAnswer { status, content_type, body },
            Err(_) => failed("the daemon hung up before it replied"),
        }
    }
}

/// What a worker serves with: its provider, and the session it belongs to once it
/// was given one (with the ID of the session's call in flight).
struct Served {
    provider: WasmProvider,
    session: Mutex<Option<WasmSession>>,
    session_call: Arc<AtomicU64>,
}

impl Served {
    fn grant(line: &Arc<Line>, id: Arc<AtomicU64>, client: Option<GrantClient>) -> Option<Grant> {
        client.map(|c| Grant {
            global: c.global,
            routes: c.routes,
            preamble: c.preamble,
            api: Arc::new(Proxy { id, line: Arc::clone(line) }),
        })
    }

    fn serve(&self, line: &Arc<Line>, id: u64, job: Job) -> Answer {
        let ms = Duration::from_millis;
        match job {
            Job::Snippet { code, timeout_ms, grant } => {
                let grant = Self::grant(line, Arc::new(AtomicU64::new(id)), grant);
                let snippet = Snippet {
                    language: Language::JavaScript,
                    code: &code,
                    timeout: ms(timeout_ms),
                    floor: None,
                    grant: grant.as_ref(),
                };
                ran(self.provider.run_snippet(&snippet).map(|r| Answer::Ran(r.result)))
            }
            Job::Project { project, timeout_ms, grant } => {
                let grant = Self::grant(line, Arc::new(AtomicU64::new(id)), grant);
                ran(self
                    .provider
                    .run_project(&project, ms(timeout_ms), None, grant.as_ref())
                    .map(|r| Answer::Project(r.result)))
            }
            Job::Module { module, timeout_ms } => {
                ran(self.provider.run_module(&module, ms(timeout_ms), None).map(|r| Answer::Module(r.result)))
            }
            Job::OpenSession { held } => {
                let mut session = lock(&self.session);
                if session.is_some() {
                    return refused(Refusal::new(plimsoll_core::Reason::Environment, "this worker has a session"));
                }
                // The held grant's calls travel as the session's call in flight, which
                // the daemon serves with the session's grant.
                let held = Self::grant(line, Arc::clone(&self.session_call), held);
                *session = Some(self.provider.session_holding(held));
                Answer::Opened
            }
            Job::SessionProject { project, timeout_ms, grant } => {
                let mut session = lock(&self.session);
                let Some(session) = session.as_mut() else {
                    return refused(Refusal::new(plimsoll_core::Reason::Environment, "this worker has no session"));
                };
                // The held grant's calls travel as this job; the call's own grant as well.
                self.session_call.store(id, Ordering::Relaxed);
                let grant = Self::grant(line, Arc::new(AtomicU64::new(id)), grant);
                match session.python_project(&project, ms(timeout_ms), grant.as_ref()) {
                    Ok(r) => Answer::Project(r),
                    Err(r) => refused(r),
                }
            }
            Job::Cell { python, code, files, timeout_ms } => {
                let mut session = lock(&self.session);
                let Some(session) = session.as_mut() else {
                    return refused(Refusal::new(plimsoll_core::Reason::Environment, "this worker has no session"));
                };
                self.session_call.store(id, Ordering::Relaxed);
                let files: Vec<(String, Vec<u8>)> = files.into_iter().map(|f| (f.path, f.content)).collect();
                let cell = if python {
                    session.python_cell(&code, &files, ms(timeout_ms))
                } else {
                    session.cell(&code, &files, ms(timeout_ms))
                };
                match cell {
                    Ok(c) => Answer::Cell(c),
                    Err(r) => refused(r),
                }
            }
        }
    }
}

fn refused(r: Refusal) -> Answer {
    Answer::Refused { reason: r.reason.as_str().to_string(), message: r.message }
}

fn ran(outcome: Result<Answer, RunError>) -> Answer {
    match outcome {
        Ok(a) => a,
        Err(RunError::Refused(r)) => refused(r),
        Err(RunError::MayHaveRun(detail)) => Answer::MayHaveRun { detail },
    }
}

fn setup_and_serve(sock: &mut UnixStream) -> Result<(), String> {
    let hello: Hello = frame::read(sock).map_err(|e| format!("reading the daemon's hello: {e}"))?;
    let mut walls = vec!["an empty environment, no new privileges".to_string()];
    walls.extend(confine::namespaces_seen());
    // The CPython component may live outside the cache: read it before Landlock.
    let python = match &hello.python {
        Some(path) => Some(std::fs::read(path).map_err(|e| format!("reading the CPython component {path}: {e}"))?),
        None => None,
    };
    // Up to `slots` jobs at once, a judge's three instances each at most, and a
    // module table's rows on every core. (Read before Landlock: it reads cgroup files.)
    let cores = plimsoll_sim::model::cores();
    let cache = hello.cache_dir.as_ref().map(PathBuf::from);
    if confine::landlock(cache.as_deref())? {
        walls.push("landlock: no file system but the component cache, read-only".into());
    }
    let slots = usize::try_from(hello.slots).unwrap_or(usize::MAX).max(1);
    let wanted = cores.saturating_mul(2).saturating_add(slots.saturating_mul(3));
    let max_instances = u32::try_from(wanted).unwrap_or(u32::MAX).max(16);
    let engine = Engine::new(&EngineConfig { max_instances, cache_dir: cache }).map_err(|e| e.to_string())?;
    let config = WasmConfig {
        memory_mb: hello.memory_mb,
        output_cap: usize::try_from(hello.output_cap).unwrap_or(usize::MAX),
        ..WasmConfig::default()
    };
    let mut provider = WasmProvider::new(&engine, config).map_err(|e| e.to_string())?;
    if let Some(bytes) = python {
        let digest: Option<[u8; 32]> =
            hello.python_sha256.as_deref().and_then(|h| hex::decode(h).ok()).and_then(|d| d.try_into().ok());
        let guest = match digest {
            Some(d) => PythonGuest::digested(&engine, &bytes, &d),
            None => PythonGuest::new(&engine, &bytes),
        };
        provider = provider.with_python(guest.map_err(|e| e.to_string())?);
    }
    // Everything the worker will run must be loaded before the filter: after it,
    // the worker cannot open a file.
    provider.sims().library().preload().map_err(|e| format!("loading the simulation components: {e}"))?;
    warm(&provider)?;
    fix_malloc_arenas(cores);
    let line = Arc::new(Line {
        out: Mutex::new(sock.try_clone().map_err(|e| format!("the socket: {e}"))?),
        waiting: Mutex::new(HashMap::new()),
    });
    confine::seccomp()?;
    walls.push("seccomp: the engine's own system calls only (others fail with EPERM); exec, ptrace, mount, namespaces or a new process kill it".into());
    let identity = provider.identity().to_string();
    frame::write(sock, &Ready { identity, walls }).map_err(|e| format!("saying ready: {e}"))?;
    let served = Arc::new(Served { provider, session: Mutex::new(None), session_call: Arc::new(AtomicU64::new(0)) });
    loop {
        match frame::read::<Down>(sock) {
            Ok(Down::Job { id, job }) => {
                let (served, line) = (Arc::clone(&served), Arc::clone(&line));
                std::thread::spawn(move || {
                    let answer = served.serve(&line, id, job);
                    // A failed write is the daemon's to notice: it hung up.
                    let _ = line.send(&Up::Answer { id, answer });
                });
            }
            Ok(Down::Reply { id, status, content_type, body }) => {
                let Some(waiting) = line.waiting().remove(&id) else {
                    return Err(format!("the daemon replied to job {id}, which made no call"));
                };
                let _ = waiting.send((status, content_type, body));
            }
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading a job: {e}")),
        }
    }
}

/// Fixes how many malloc arenas the C library may make. Without a fixed number it
/// reads the core count from a file the first time more threads than that malloc
/// at once: a worker running many jobs would then die of its filter.
fn fix_malloc_arenas(cores: usize) {
    #[cfg(target_env = "gnu")]
    {
        let arenas = i32::try_from(cores.saturating_mul(2)).unwrap_or(i32::MAX).max(2);
        // SAFETY: mallopt takes two integers and changes only the allocator's settings.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = cores;
}

/// One run of each kind before the filter, so every lazy first-use path
/// (thread-locals, the signal handlers' stacks, the judge's threads) has happened
/// when the filter is drawn.
fn warm(provider: &WasmProvider) -> Result<(), String> {
    let budget = Duration::from_secs(30);
    // WASI's poll and sockets reach for the event loop wasmtime-wasi starts on
    // first use; made here, its epoll instance and threads exist before the
    // filter, which would refuse to make them.
    wasmtime_wasi::runtime::in_tokio(async { tokio::time::sleep(Duration::from_millis(1)).await });
    provider.run_javascript_with("0", budget, None).map_err(|r| r.message)?;
    if provider.python().is_some() {
        let project = ProjectRun {
            files: vec![ProjectFile { path: "m.py".into(), content: "pass\n".into() }],
            steps: vec!["python3 m.py".into()],
            ..ProjectRun::default()
        };
        let r = provider.run_project(&project, budget, None, None).map_err(|e| e.to_string())?;
        if r.result.outcome != wire::ProjectOutcome::Completed {
            return Err(format!("the CPython warm-up run ended {:?}", r.result.outcome));
        }
    }
    Ok(())
}
