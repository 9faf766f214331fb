//! The daemon's side: a pool of started workers, each serving one job at a time,
//! and workers of their own for sessions.

use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use plimsoll_core::provider::{HostAnswer, HostApi, RunError};
use plimsoll_core::{Reason, Refusal};

use super::confine::Confinement;
use super::frame::{self, Answer, Down, GrantClient, Hello, Job, Ready, Up};

/// How long a worker may take past its run's budget before it counts as hung: the
/// worker keeps the budget itself (the engine's epoch deadline).
const GRACE: Duration = Duration::from_secs(2);
/// How long a new worker may take to load its engine and say ready.
const STARTUP: Duration = Duration::from_secs(60);

/// How the pool starts its workers.
#[derive(Clone, Debug)]
pub struct JailConfig {
    /// The `plimsoll-host` binary (the worker is its `engine-worker` subcommand).
    pub exe: PathBuf,
    /// Workers kept started; at most this many runs at once.
    pub workers: usize,
    /// What each worker's engine gets.
    pub hello: Hello,
}

/// One started worker.
#[derive(Debug)]
struct Worker {
    child: Child,
    sock: UnixStream,
}

impl Worker {
    /// How the worker ended, waiting a moment for it to finish exiting after it
    /// closed the socket.
    fn exit_status(&mut self) -> String {
        for _ in 0..50 {
            if let Some(status) = self.child.try_wait().ok().flatten() {
                return status.to_string();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        "still running".into()
    }

    /// Ends the worker for good.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pool: idle workers, and how many exist in all.
#[derive(Debug)]
pub struct Jail {
    config: JailConfig,
    idle: Mutex<(Vec<Worker>, usize)>,
    freed: Condvar,
    ready: Ready,
}

impl Jail {
    /// Starts `config.workers` workers; each must load and say ready.
    ///
    /// # Errors
    ///
    /// A worker did not start or said something else: the text names why.
    pub fn start(config: JailConfig) -> Result<Arc<Jail>, String> {
        let (first, ready) = spawn(&config)?;
        let mut idle = vec![first];
        for _ in 1..config.workers {
            idle.push(spawn(&config)?.0);
        }
        let count = idle.len();
        Ok(Arc::new(Jail { config, idle: Mutex::new((idle, count)), freed: Condvar::new(), ready }))
    }

    /// The process IDs of the idle workers (for the daemon's diagnostics and tests).
    pub fn idle_pids(&self) -> Vec<u32> {
        self.idle.lock().map(|g| g.0.iter().map(|w| w.child.id()).collect()).unwrap_or_default()
    }

    /// How many workers the pool keeps started.
    pub fn workers(&self) -> usize {
        self.config.workers
    }

    /// What the first worker said about itself.
    pub fn ready(&self) -> &Ready {
        &self.ready
    }

    /// Runs `job` in a worker, serving its grant calls with `api`; `pick` takes the
    /// answer the job expects. A worker that fails in any way (or answers another
    /// kind) is killed and a new one started in its place; the job "may have run".
    ///
    /// # Errors
    ///
    /// Refused as the worker refused it, or [`RunError::MayHaveRun`].
    pub fn run<T>(
        self: &Arc<Self>,
        job: Job,
        api: Option<&dyn HostApi>,
        timeout: Duration,
        pick: impl FnOnce(Answer) -> Result<T, Answer>,
    ) -> Result<T, RunError> {
        let mut worker = self.take(timeout)?;
        match exchange(&mut worker, job, api, timeout).and_then(|a| settle(a, pick)) {
            Ok(outcome) => {
                self.give_back(worker);
                outcome
            }
            Err(why) => {
                let pid = worker.child.id();
                worker.kill();
                self.replace();
                Err(RunError::MayHaveRun(format!("the engine worker (pid {pid}) {why}; it was replaced")))
            }
        }
    }

    /// A worker of its own for a session, holding `held`'s client: an idle one
    /// (a new one takes its place in the pool) or, when none is idle, a new one.
    ///
    /// # Errors
    ///
    /// `environment` when no worker could be started or it would not open the session.
    pub fn session(self: &Arc<Self>, held: Option<GrantClient>) -> Result<JailedSession, Refusal> {
        let idle = self.idle.lock().ok().and_then(|mut g| g.0.pop());
        let mut worker = match idle {
            Some(w) => {
                let jail = Arc::clone(self);
                std::thread::spawn(move || jail.replace());
                w
            }
            None => spawn(&self.config).map_err(|e| environment(&e))?.0,
        };
        let job = Job::OpenSession { held };
        match exchange(&mut worker, job, None, STARTUP).and_then(|a| {
            settle(a, |a| match a {
                Answer::Opened => Ok(()),
                other => Err(other),
            })
        }) {
            Ok(Ok(())) => Ok(JailedSession { worker: Some(worker) }),
            Ok(Err(e)) => {
                worker.kill();
                Err(match e {
                    RunError::Refused(r) => r,
                    RunError::MayHaveRun(d) => environment(&d),
                })
            }
            Err(why) => {
                let pid = worker.child.id();
                worker.kill();
                Err(environment(&format!("the session's engine worker (pid {pid}) {why}")))
            }
        }
    }

    /// An idle worker, waiting for one at most `patience`; past it the run is shed
    /// (`capacity`), never queued longer than its own budget.
    fn take(&self, patience: Duration) -> Result<Worker, RunError> {
        let until = std::time::Instant::now() + patience;
        let mut guard = self.idle.lock().map_err(|_| environment("the worker pool is poisoned"))?;
        loop {
            if let Some(w) = guard.0.pop() {
                return Ok(w);
            }
            if guard.1 == 0 {
                return Err(environment("no engine worker could be started; see the daemon's log").into());
            }
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                let all = guard.1;
                return Err(Refusal::new(
                    Reason::Capacity,
                    format!("all {all} engine workers are busy; retry shortly"),
                )
                .into());
            }
            guard = self.freed.wait_timeout(guard, left).map_err(|_| environment("the worker pool is poisoned"))?.0;
        }
    }

    fn give_back(&self, worker: Worker) {
        if let Ok(mut guard) = self.idle.lock() {
            guard.0.push(worker);
        }
        self.freed.notify_one();
    }

    /// Starts a worker in place of one that was killed; if that fails, the pool is
    /// one smaller (and says so on stderr).
    fn replace(&self) {
        match spawn(&self.config) {
            Ok((w, _)) => self.give_back(w),
            Err(e) => {
                eprintln!("plimsoll: replacing an engine worker failed: {e}");
                if let Ok(mut guard) = self.idle.lock() {
                    guard.1 = guard.1.saturating_sub(1);
                }
                self.freed.notify_all();
            }
        }
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        if let Ok(mut guard) = self.idle.lock() {
            for w in guard.0.drain(..) {
                w.kill();
            }
        }
    }
}

fn environment(message: &str) -> Refusal {
    Refusal::new(Reason::Environment, message)
}

/// A worker's answer as the caller's result: its refusal or "may have run" as
/// errors, the expected kind through `pick`; any other kind is garbage (`Err`).
fn settle<T>(answer: Answer, pick: impl FnOnce(Answer) -> Result<T, Answer>) -> Result<Result<T, RunError>, String> {
    match answer {
        Answer::Refused { reason, message } => {
            let reason = Reason::from_name(&reason).unwrap_or(Reason::Environment);
            Ok(Err(Refusal::new(reason, message).into()))
        }
        Answer::MayHaveRun { detail } => Ok(Err(RunError::MayHaveRun(format!("in the engine worker: {detail}")))),
        other => pick(other).map(Ok).map_err(|a| format!("answered another kind of job ({})", kind(&a))),
    }
}

fn kind(answer: &Answer) -> &'static str {
    match answer {
        Answer::Ran(_) => "a snippet's result",
        Answer::Project(_) => "a project's result",
        Answer::Module(_) => "a module table's result",
        Answer::Cell(_) => "a cell's result",
        Answer::Opened => "a session opened",
        Answer::Refused { .. } => "a refusal",
        Answer::MayHaveRun { .. } => "may have run",
    }
}

/// Sends one job and reads frames until its answer, serving the guest's grant
/// calls with `api` on the way. The worker has the budget and the grace to answer;
/// time the daemon spends serving a call is the daemon's, not the worker's.
fn exchange(worker: &mut Worker, job: Job, api: Option<&dyn HostApi>, timeout: Duration) -> Result<Answer, String> {
    let mut left = timeout + GRACE;
    frame::write(&mut worker.sock, &Down::Job(job)).map_err(|e| format!("did not take the job ({e})"))?;
    loop {
        let waited = Instant::now();
        worker
            .sock
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .map_err(|e| format!("could not be given a deadline ({e})"))?;
        let up = match frame::read::<Up>(&mut worker.sock) {
            Ok(up) => up,
            Err(frame::FrameError::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
            {
                return Err(format!("did not answer within the run's budget and {} s", GRACE.as_secs()));
            }
            Err(frame::FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(format!("ended without answering ({})", worker.exit_status()));
            }
            Err(e) => return Err(format!("answered garbage ({e})")),
        };
        left = left.saturating_sub(waited.elapsed());
        match up {
            Up::Answer(answer) => return Ok(answer),
            Up::Call { method, path, body } => {
                let answer = match api {
                    Some(api) => api.call(&method, &path, body.as_deref()),
                    None => HostAnswer {
                        status: 403,
                        content_type: "application/json".into(),
                        body: serde_json::json!({
                            "error": format!("forbidden: this run holds no grant, so {method} {path} is not allowed")
                        })
                        .to_string()
                        .into_bytes(),
                    },
                };
                let reply = Down::Reply { status: answer.status, content_type: answer.content_type, body: answer.body };
                frame::write(&mut worker.sock, &reply).map_err(|e| format!("did not take a call's reply ({e})"))?;
            }
        }
    }
}

/// Starts one worker and waits for it to say ready.
fn spawn(config: &JailConfig) -> Result<(Worker, Ready), String> {
    let (mine, theirs) = UnixStream::pair().map_err(|e| format!("socket pair: {e}"))?;
    let confinement = Confinement::default();
    let mut cmd = Command::new(&config.exe);
    cmd.arg("engine-worker").env_clear().stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs))).stdout(Stdio::null());
    // SAFETY: the hook only makes system calls on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || confinement.in_child());
    }
    let child = cmd.spawn().map_err(|e| format!("starting {}: {e}", config.exe.display()))?;
    let mut worker = Worker { child, sock: mine };
    let said = (|| {
        worker.sock.set_read_timeout(Some(STARTUP)).map_err(|e| e.to_string())?;
        frame::write(&mut worker.sock, &config.hello).map_err(|e| e.to_string())?;
        frame::read::<Ready>(&mut worker.sock).map_err(|e| e.to_string())
    })();
    match said {
        Ok(ready) => Ok((worker, ready)),
        Err(e) => {
            worker.kill();
            Err(format!("an engine worker did not start: {e} (its own words are in the daemon's log)"))
        }
    }
}

/// A session's own worker: it keeps the session's interpreters and files, and is
/// killed when the session ends (its memory held one caller's state).
#[derive(Debug)]
pub struct JailedSession {
    worker: Option<Worker>,
}

impl JailedSession {
    /// Runs one of the session's jobs (a cell, or a snippet in a fresh store), its
    /// grant calls served by `api`. A worker that fails is killed and the session
    /// with it: every later call is refused.
    ///
    /// # Errors
    ///
    /// Refused as the worker refused it; [`SessionLost`] when the worker failed
    /// (the job may have run) or was already gone.
    pub fn call<T>(
        &mut self,
        job: Job,
        api: Option<&dyn HostApi>,
        timeout: Duration,
        pick: impl FnOnce(Answer) -> Result<T, Answer>,
    ) -> Result<Result<T, RunError>, SessionLost> {
        let Some(worker) = self.worker.as_mut() else {
            return Err(SessionLost { may_have_run: false, detail: "its engine worker ended earlier".into() });
        };
        match exchange(worker, job, api, timeout).and_then(|a| settle(a, pick)) {
            Ok(outcome) => Ok(outcome),
            Err(why) => {
                let pid = worker.child.id();
                self.close();
                Err(SessionLost {
                    may_have_run: true,
                    detail: format!("the session's engine worker (pid {pid}) {why}"),
                })
            }
        }
    }

    /// The worker's process ID, while it lives.
    pub fn pid(&self) -> Option<u32> {
        self.worker.as_ref().map(|w| w.child.id())
    }

    /// Ends the worker.
    pub fn close(&mut self) {
        if let Some(w) = self.worker.take() {
            w.kill();
        }
    }
}

impl Drop for JailedSession {
    fn drop(&mut self) {
        self.close();
    }
}

/// A session's worker failed or is gone: the session cannot go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct SessionLost {
    /// Whether the call in flight may have run.
    pub may_have_run: bool,
    /// What happened, for the log.
    pub detail: String,
}
