//! The worker's side: `plimsoll-host engine-worker`, run only by the daemon's
//! [`super::Jail`] with the socket as its stdin.

use std::os::fd::FromRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use plimsoll_core::provider::{Grant, HostAnswer, HostApi, Provider as _, RunError, Snippet};
use plimsoll_core::validate::Language;
use plimsoll_core::wire::{ProjectFile, ProjectRun};
use plimsoll_core::{Refusal, wire};

use super::confine;
use super::frame::{self, Answer, Down, FrameError, GrantClient, Hello, Job, Ready, Up};
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

/// The guest's grant calls, carried to the daemon over the socket: the worker
/// holds no credential and reaches no network; the daemon's broker checks each call.
struct Proxy {
    sock: Mutex<UnixStream>,
}

impl HostApi for Proxy {
    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer {
        let failed = |why: String| HostAnswer {
            status: 502,
            content_type: "application/json".into(),
            body: serde_json::json!({ "error": format!("plimsoll engine worker: {why}") }).to_string().into_bytes(),
        };
        let mut sock = self.sock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let call = Up::Call { method: method.into(), path: path.into(), body: body.map(<[u8]>::to_vec) };
        if let Err(e) = frame::write(&mut *sock, &call) {
            return failed(format!("sending the call: {e}"));
        }
        match frame::read::<Down>(&mut *sock) {
            Ok(Down::Reply { status, content_type, body }) => HostAnswer { status, content_type, body },
            Ok(Down::Job(_)) => failed("the daemon sent a job in place of the call's reply".into()),
            Err(e) => failed(format!("reading the reply: {e}")),
        }
    }
}

/// What a worker serves with: its provider, the proxy its grants call through,
/// and the session it belongs to once it was given one.
struct Served {
    provider: WasmProvider,
    proxy: Arc<Proxy>,
    session: Option<WasmSession>,
}

impl Served {
    fn grant(&self, client: Option<GrantClient>) -> Option<Grant> {
        client.map(|c| Grant { global: c.global, routes: c.routes, preamble: c.preamble, api: self.proxy.clone() })
    }

    fn serve(&mut self, job: Job) -> Answer {
        let ms = Duration::from_millis;
        match job {
            Job::Snippet { code, timeout_ms, grant } => {
                let grant = self.grant(grant);
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
                let grant = self.grant(grant);
                ran(self
                    .provider
                    .run_project(&project, ms(timeout_ms), None, grant.as_ref())
                    .map(|r| Answer::Project(r.result)))
            }
            Job::Module { module, timeout_ms } => {
                ran(self.provider.run_module(&module, ms(timeout_ms), None).map(|r| Answer::Module(r.result)))
            }
            Job::OpenSession { held } => {
                if self.session.is_some() {
                    return refused(Refusal::new(plimsoll_core::Reason::Environment, "this worker has a session"));
                }
                let held = self.grant(held);
                self.session = Some(self.provider.session_holding(held));
                Answer::Opened
            }
            Job::Cell { python, code, files, timeout_ms } => {
                let Some(session) = self.session.as_mut() else {
                    return refused(Refusal::new(plimsoll_core::Reason::Environment, "this worker has no session"));
                };
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
    // A run at a time, but a module table runs its rows on every core, each row a
    // model instance beside the judge's own. (Read before Landlock: it reads cgroup files.)
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let cache = hello.cache_dir.as_ref().map(PathBuf::from);
    if confine::landlock(cache.as_deref())? {
        walls.push("landlock: no file system but the component cache, read-only".into());
    }
    let max_instances = u32::try_from(cores.saturating_mul(2)).unwrap_or(u32::MAX).max(16);
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
    let proxy = Arc::new(Proxy { sock: Mutex::new(sock.try_clone().map_err(|e| format!("the socket: {e}"))?) });
    confine::seccomp()?;
    walls.push("seccomp: any system call but the engine's own kills it; threads, never processes".into());
    let identity = provider.identity().to_string();
    frame::write(sock, &Ready { identity, walls }).map_err(|e| format!("saying ready: {e}"))?;
    let mut served = Served { provider, proxy, session: None };
    loop {
        let job = match frame::read::<Down>(sock) {
            Ok(Down::Job(job)) => job,
            Ok(Down::Reply { .. }) => return Err("the daemon sent a reply when no call was waiting".into()),
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(format!("reading a job: {e}")),
        };
        let answer = served.serve(job);
        frame::write(sock, &Up::Answer(answer)).map_err(|e| format!("answering: {e}"))?;
    }
}

/// One run of each kind before the filter, so every lazy first-use path
/// (thread-locals, the signal handlers' stacks, the judge's threads) has happened
/// when the filter is drawn.
fn warm(provider: &WasmProvider) -> Result<(), String> {
    let budget = Duration::from_secs(30);
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
