//! The daemon's side: a pool of started workers, each running up to its `slots`
//! jobs at once, and workers of their own for sessions (one kept started ahead).
//!
//! Each worker has one socket. A thread per worker reads its frames and hands each
//! to the job it names; the jobs' own threads write. A worker that fails any job
//! (ends, hangs past a job's budget, answers garbage or another kind) is killed
//! and replaced, and every job it held "may have run".

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

use plimsoll_core::provider::{HostApi, RunError};
use plimsoll_core::{Reason, Refusal};

use super::confine::Confinement;
use super::frame::{self, Answer, Down, FrameError, GrantClient, Hello, Job, Ready, Up};
use super::lock;

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
    /// Workers kept started for runs (sessions' workers come on top).
    pub workers: usize,
    /// What each worker's engine gets; its `slots` is how many runs one worker
    /// holds at once, so the pool runs `workers * slots` at most.
    pub hello: Hello,
}

/// One started worker process.
#[derive(Debug)]
struct Worker {
    pid: u32,
    child: Mutex<Child>,
    out: Mutex<UnixStream>,
    /// The jobs in flight, each waiting for its frames.
    waiting: Mutex<HashMap<u64, mpsc::Sender<Up>>>,
    /// Why it serves no more, once it does not.
    ended: Mutex<Option<String>>,
}

impl Worker {
    fn ended(&self) -> Option<String> {
        lock(&self.ended).clone()
    }

    /// Marks the worker ended for `why` (the first reason stays) and wakes every
    /// job waiting on it.
    fn end(&self, why: String) {
        lock(&self.ended).get_or_insert(why);
        lock(&self.waiting).clear();
    }

    /// Ends the process for good.
    fn kill(&self) {
        let mut child = lock(&self.child);
        let _ = child.kill();
        let _ = child.wait();
    }

    /// How the process ended, waiting a moment for it to finish exiting after it
    /// closed the socket.
    fn exit_status(&self) -> String {
        for _ in 0..50 {
            if let Some(status) = lock(&self.child).try_wait().ok().flatten() {
                return status.to_string();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        "still running".into()
    }
}

/// Reads `worker`'s frames and hands each to the job it names, until the socket
/// ends or carries something that is not the protocol's.
fn listen(worker: &Worker, mut input: UnixStream) {
    let why = loop {
        let up = match frame::read::<Up>(&mut input) {
            Ok(up) => up,
            // A peer that ended with bytes unread resets the socket instead.
            Err(FrameError::Io(e))
                if matches!(e.kind(), std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset) =>
            {
                break format!("ended without answering ({})", worker.exit_status());
            }
            Err(FrameError::Io(e)) => break format!("failed on its socket ({e})"),
            Err(e) => break format!("answered garbage ({e})"),
        };
        let (id, last) = match &up {
            Up::Call { id, .. } => (*id, false),
            Up::Answer { id, .. } => (*id, true),
        };
        let job = {
            let mut waiting = lock(&worker.waiting);
            if last { waiting.remove(&id) } else { waiting.get(&id).cloned() }
        };
        match job {
            Some(job) => {
                let _ = job.send(up);
            }
            None => break format!("answered garbage (a frame for job {id}, which it does not hold)"),
        }
    };
    worker.end(why);
}

/// A run's place in a worker: the pool's worker and how many jobs each holds.
#[derive(Debug)]
struct Member {
    worker: Arc<Worker>,
    busy: usize,
}

/// The pool: workers for runs, and one started ahead for the next session.
#[derive(Debug)]
pub struct Jail {
    config: JailConfig,
    members: Mutex<Vec<Member>>,
    freed: Condvar,
    spare: Mutex<Option<Arc<Worker>>>,
    ready: Ready,
}

impl Jail {
    /// Starts `config.workers` workers and one spare for sessions; each must load
    /// and say ready.
    ///
    /// # Errors
    ///
    /// A worker did not start or said something else: the text names why.
    pub fn start(config: JailConfig) -> Result<Arc<Jail>, String> {
        let (first, ready) = spawn(&config.exe, &config.hello)?;
        let mut members = vec![Member { worker: first, busy: 0 }];
        for _ in 1..config.workers {
            members.push(Member { worker: spawn(&config.exe, &config.hello)?.0, busy: 0 });
        }
        let spare = spawn(&config.exe, &session_hello(&config.hello))?.0;
        Ok(Arc::new(Jail {
            config,
            members: Mutex::new(members),
            freed: Condvar::new(),
            spare: Mutex::new(Some(spare)),
            ready,
        }))
    }

    /// The process IDs of the pool's workers (for diagnostics and tests).
    pub fn pids(&self) -> Vec<u32> {
        lock(&self.members).iter().map(|m| m.worker.pid).collect()
    }

    /// The process ID of the worker the next session will take, when one is started.
    pub fn spare_pid(&self) -> Option<u32> {
        lock(&self.spare).as_ref().map(|w| w.pid)
    }

    /// How many workers the pool keeps started for runs.
    pub fn workers(&self) -> usize {
        self.config.workers
    }

    /// How many runs one worker holds at once.
    pub fn slots(&self) -> usize {
        slots(&self.config.hello)
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
        let worker = self.take(timeout)?;
        let outcome = exchange(&worker, job, api, timeout).and_then(|a| settle(a, pick));
        self.give_back(&worker);
        outcome.unwrap_or_else(|why| {
            self.fail(&worker, &why);
            Err(RunError::MayHaveRun(format!("the engine worker (pid {}) {why}; it was replaced", worker.pid)))
        })
    }

    /// A worker of its own for a session, holding `held`'s client: the spare (a new
    /// one starts in the background) or, when none is ready, a new one.
    ///
    /// # Errors
    ///
    /// `environment` when no worker could be started or it would not open the session.
    pub fn session(self: &Arc<Self>, held: Option<GrantClient>) -> Result<JailedSession, Refusal> {
        let spare = lock(&self.spare).take().filter(|w| w.ended().is_none());
        let worker = match spare {
            Some(w) => w,
            None => spawn(&self.config.exe, &session_hello(&self.config.hello)).map_err(|e| environment(&e))?.0,
        };
        let jail = Arc::clone(self);
        std::thread::spawn(move || jail.restock());
        let opened = exchange(&worker, Job::OpenSession { held }, None, STARTUP).and_then(|a| {
            settle(a, |a| match a {
                Answer::Opened => Ok(()),
                other => Err(other),
            })
        });
        match opened {
            Ok(Ok(())) => Ok(JailedSession { worker: Some(worker) }),
            Ok(Err(e)) => {
                worker.kill();
                Err(match e {
                    RunError::Refused(r) => r,
                    RunError::MayHaveRun(d) => environment(&d),
                })
            }
            Err(why) => {
                worker.kill();
                Err(environment(&format!("the session's engine worker (pid {}) {why}", worker.pid)))
            }
        }
    }

    /// Starts a spare for the next session when there is none.
    fn restock(&self) {
        if lock(&self.spare).is_some() {
            return;
        }
        match spawn(&self.config.exe, &session_hello(&self.config.hello)) {
            Ok((w, _)) => {
                let mut spare = lock(&self.spare);
                match spare.as_ref() {
                    Some(_) => w.kill(),
                    None => *spare = Some(w),
                }
            }
            Err(e) => eprintln!("plimsoll: starting a spare engine worker for sessions failed: {e}"),
        }
    }

    /// The least busy worker with a free slot, waiting for one at most `patience`;
    /// past it the run is shed (`capacity`), never queued longer than its budget.
    fn take(&self, patience: Duration) -> Result<Arc<Worker>, RunError> {
        let until = Instant::now() + patience;
        let slots = self.slots();
        let mut members = lock(&self.members);
        loop {
            if members.is_empty() {
                return Err(environment("no engine worker could be started; see the daemon's log").into());
            }
            let free =
                members.iter_mut().filter(|m| m.busy < slots && m.worker.ended().is_none()).min_by_key(|m| m.busy);
            if let Some(m) = free {
                m.busy += 1;
                return Ok(Arc::clone(&m.worker));
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let n = members.len();
                let runs = if slots == 1 { "1 run".to_string() } else { format!("{slots} runs") };
                return Err(Refusal::new(
                    Reason::Capacity,
                    format!("all {n} engine workers are busy ({runs} each); retry shortly"),
                )
                .into());
            }
            members = self.freed.wait_timeout(members, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    fn give_back(&self, worker: &Arc<Worker>) {
        if let Some(m) = lock(&self.members).iter_mut().find(|m| Arc::ptr_eq(&m.worker, worker)) {
            m.busy = m.busy.saturating_sub(1);
        }
        self.freed.notify_one();
    }

    /// Kills a worker that failed a job and starts one in its place (once, however
    /// many of its jobs fail with it); if that fails, the pool is one smaller (and
    /// says so on stderr).
    fn fail(&self, worker: &Arc<Worker>, why: &str) {
        worker.end(why.to_string());
        worker.kill();
        let removed = {
            let mut members = lock(&self.members);
            let before = members.len();
            members.retain(|m| !Arc::ptr_eq(&m.worker, worker));
            members.len() < before
        };
        if !removed {
            return;
        }
        match spawn(&self.config.exe, &self.config.hello) {
            Ok((w, _)) => lock(&self.members).push(Member { worker: w, busy: 0 }),
            Err(e) => eprintln!("plimsoll: replacing an engine worker failed: {e}"),
        }
        self.freed.notify_all();
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        for m in lock(&self.members).drain(..) {
            m.worker.kill();
        }
        if let Some(w) = lock(&self.spare).take() {
            w.kill();
        }
    }
}

fn environment(message: &str) -> Refusal {
    Refusal::new(Reason::Environment, message)
}

fn slots(hello: &Hello) -> usize {
    usize::try_from(hello.slots).unwrap_or(usize::MAX).max(1)
}

/// A session's worker: the pool's settings, one job at a time.
fn session_hello(pool: &Hello) -> Hello {
    Hello { slots: 1, ..pool.clone() }
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

/// Job IDs, unique in this process.
static NEXT_JOB: AtomicU64 = AtomicU64::new(1);

/// Sends one job and waits for its frames until its answer, serving the guest's
/// grant calls with `api` on the way. The worker has the budget and the grace to
/// answer; time the daemon spends serving a call is the daemon's, not the worker's.
fn exchange(worker: &Worker, job: Job, api: Option<&dyn HostApi>, timeout: Duration) -> Result<Answer, String> {
    let id = NEXT_JOB.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = mpsc::channel();
    lock(&worker.waiting).insert(id, tx);
    let forget = || {
        lock(&worker.waiting).remove(&id);
    };
    // A worker that ended before the job was registered cleared nothing of it.
    if let Some(why) = worker.ended() {
        forget();
        return Err(why);
    }
    if let Err(e) = frame::write(&mut *lock(&worker.out), &Down::Job { id, job }) {
        forget();
        return Err(format!("did not take the job ({e})"));
    }
    let mut left = timeout + GRACE;
    loop {
        let waited = Instant::now();
        let up = match rx.recv_timeout(left) {
            Ok(up) => up,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                forget();
                return Err(format!("did not answer within the run's budget and {} s", GRACE.as_secs()));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(worker.ended().unwrap_or_else(|| "ended without answering".into()));
            }
        };
        left = left.saturating_sub(waited.elapsed());
        match up {
            Up::Answer { answer, .. } => return Ok(answer),
            Up::Call { method, path, body, .. } => {
                let answer = match api {
                    Some(api) => api.call(&method, &path, body.as_deref()),
                    None => crate::wasm::no_grant(&method, &path),
                };
                let reply =
                    Down::Reply { id, status: answer.status, content_type: answer.content_type, body: answer.body };
                if let Err(e) = frame::write(&mut *lock(&worker.out), &reply) {
                    forget();
                    return Err(format!("did not take a call's reply ({e})"));
                }
            }
        }
    }
}

/// Starts one worker, waits for it to say ready, and starts its listener.
fn spawn(exe: &Path, hello: &Hello) -> Result<(Arc<Worker>, Ready), String> {
    let (mut mine, theirs) = UnixStream::pair().map_err(|e| format!("socket pair: {e}"))?;
    let confinement = Confinement::default();
    let mut cmd = Command::new(exe);
    cmd.arg("engine-worker").env_clear().stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs))).stdout(Stdio::null());
    // SAFETY: the hook only makes system calls on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || confinement.in_child());
    }
    let mut child = cmd.spawn().map_err(|e| format!("starting {}: {e}", exe.display()))?;
    let said = (|| {
        mine.set_read_timeout(Some(STARTUP)).map_err(|e| e.to_string())?;
        frame::write(&mut mine, hello).map_err(|e| e.to_string())?;
        let ready = frame::read::<Ready>(&mut mine).map_err(|e| e.to_string())?;
        mine.set_read_timeout(None).map_err(|e| e.to_string())?;
        let input = mine.try_clone().map_err(|e| e.to_string())?;
        Ok::<_, String>((ready, input))
    })();
    let (ready, input) = match said {
        Ok(r) => r,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("an engine worker did not start: {e} (its own words are in the daemon's log)"));
        }
    };
    let worker = Arc::new(Worker {
        pid: child.id(),
        child: Mutex::new(child),
        out: Mutex::new(mine),
        waiting: Mutex::new(HashMap::new()),
        ended: Mutex::new(None),
    });
    let listener = Arc::clone(&worker);
    std::thread::Builder::new()
        .name(format!("engine-worker-{}", worker.pid))
        .spawn(move || listen(&listener, input))
        .map_err(|e| format!("starting the worker's listener: {e}"))?;
    Ok((worker, ready))
}

/// A session's own worker: it keeps the session's interpreters and files, and is
/// killed when the session ends (its memory held one caller's state).
#[derive(Debug)]
pub struct JailedSession {
    worker: Option<Arc<Worker>>,
}

impl JailedSession {
    /// Runs one of the session's jobs (a cell), its grant calls served by `api`. A
    /// worker that fails is killed and the session with it: every later call is
    /// refused.
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
        let Some(worker) = self.worker.as_ref() else {
            return Err(SessionLost { may_have_run: false, detail: "its engine worker ended earlier".into() });
        };
        match exchange(worker, job, api, timeout).and_then(|a| settle(a, pick)) {
            Ok(outcome) => Ok(outcome),
            Err(why) => {
                let pid = worker.pid;
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
        self.worker.as_ref().map(|w| w.pid)
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
