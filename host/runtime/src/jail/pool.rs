//! The daemon's side: a pool of started workers, each serving one run at a time.

use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use plimsoll_core::provider::RunError;
use plimsoll_core::wire::JavaScriptResult;
use plimsoll_core::{Reason, Refusal};

use super::confine::Confinement;
use super::frame::{self, Answer, Hello, Ready, Run};

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

    /// What the first worker said about itself.
    pub fn ready(&self) -> &Ready {
        &self.ready
    }

    /// Runs `code` in a worker. A worker that fails in any way is killed and a new
    /// one started in its place; the run is "may have run".
    ///
    /// # Errors
    ///
    /// Refused as the worker refused it, or [`RunError::MayHaveRun`].
    pub fn run(&self, code: &str, timeout: Duration) -> Result<JavaScriptResult, RunError> {
        let mut worker = self.take(timeout)?;
        let outcome = exchange(&mut worker, code, timeout);
        match outcome {
            Ok(answer) => {
                self.give_back(worker);
                match answer {
                    Answer::Ran(result) => Ok(result),
                    Answer::Refused { reason, message } => {
                        let reason = Reason::from_name(&reason).unwrap_or(Reason::Environment);
                        Err(Refusal::new(reason, message).into())
                    }
                }
            }
            Err(why) => {
                let pid = worker.child.id();
                worker.kill();
                self.replace();
                Err(RunError::MayHaveRun(format!("the engine worker (pid {pid}) {why}; it was replaced")))
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

/// Sends one run and reads its answer within the budget and the grace.
fn exchange(worker: &mut Worker, code: &str, timeout: Duration) -> Result<Answer, String> {
    let budget = timeout + GRACE;
    worker.sock.set_read_timeout(Some(budget)).map_err(|e| format!("could not be given a deadline ({e})"))?;
    let run = Run { code: code.to_string(), timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX) };
    frame::write(&mut worker.sock, &run).map_err(|e| format!("did not take the run ({e})"))?;
    match frame::read::<Answer>(&mut worker.sock) {
        Ok(a) => Ok(a),
        Err(frame::FrameError::Io(e))
            if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
        {
            Err(format!("did not answer within the run's budget and {} s", GRACE.as_secs()))
        }
        Err(frame::FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            // It closed the socket; give it a moment to finish exiting, to say how.
            let mut status = None;
            for _ in 0..50 {
                status = worker.child.try_wait().ok().flatten();
                if status.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let how = status.map(|s| s.to_string()).unwrap_or_else(|| "still running".into());
            Err(format!("ended without answering ({how})"))
        }
        Err(e) => Err(format!("answered garbage ({e})")),
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
