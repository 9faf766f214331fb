//! The local docker engine over bollard. Only a local socket is used: a remote
//! `DOCKER_HOST` would move the wall onto a machine the operator did not name, so
//! it is refused before any connection is made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::{AttachContainerResults, LogOutput};
use bollard::errors::Error as BollardError;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::instance::{INSTANCE_LABEL, Instance, Proc};
use crate::lockdown::{LIFETIME_LABEL, Lockdown, Spec, Violation};

/// How many times a SIGKILLed container is inspected again for a late OOM record.
const OOM_RECHECKS: u32 = 5;
/// The pause between those inspections.
const OOM_RECHECK_EVERY: Duration = Duration::from_millis(100);
/// The label every container plimsoll creates carries, with the daemon's instance.
pub const OWNER_LABEL: &str = "dev.plimsoll.owner";

/// Why the engine did not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// `DOCKER_HOST` names something other than a local unix socket.
    #[error(
        "DOCKER_HOST={0:?} is refused: plimsoll drives only the local engine (unset DOCKER_HOST or use unix:///var/run/docker.sock)"
    )]
    Remote(String),
    /// The spec broke a lockdown invariant; nothing was created.
    #[error(transparent)]
    Lockdown(#[from] Violation),
    /// The engine answered with an error or could not be reached.
    #[error("docker engine: {0}")]
    Docker(#[from] BollardError),
    /// The engine's answer lacked something plimsoll needs.
    #[error("docker engine: {0}")]
    Unexpected(String),
}

/// What the host needs to know about an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageFacts {
    /// The content ID.
    pub id: String,
    /// `VOLUME` entries; any is a reason to refuse the image.
    pub volumes: Vec<String>,
    /// The image's configured environment.
    pub env: Vec<String>,
    /// `os/arch`.
    pub platform: String,
}

/// A read-back of a container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inspection {
    /// The image's content ID.
    pub image_id: String,
    /// The runtime it was created with.
    pub runtime: String,
    /// Read-only root.
    pub read_only_root: bool,
    /// The network mode.
    pub network: String,
    /// The networks it is attached to, sorted (`none` only, for plimsoll's).
    pub networks: Vec<String>,
    /// `target:options`, sorted.
    pub mounts: Vec<String>,
    /// Memory, MiB.
    pub memory_mb: u32,
    /// The pids limit.
    pub pids: u32,
    /// CPU in billionths of a core.
    pub nano_cpus: i64,
    /// The user processes run as.
    pub user: String,
    /// Whether the main process runs.
    pub running: bool,
    /// Whether it is frozen.
    pub paused: bool,
    /// The main process's exit code, once it ended.
    pub exit_code: Option<i64>,
    /// Whether the kernel's OOM killer ended a process.
    pub oom_killed: bool,
}

impl Inspection {
    /// Where this read-back differs from an earlier one of the same container in
    /// what the lockdown set (image, runtime, root, network, mounts, limits, user),
    /// in words; None when those are equal. Running and paused are not compared.
    pub fn changes_from(&self, before: &Inspection) -> Option<String> {
        let fields: [(&str, String, String); 9] = [
            ("image", before.image_id.clone(), self.image_id.clone()),
            ("runtime", before.runtime.clone(), self.runtime.clone()),
            ("read-only root", before.read_only_root.to_string(), self.read_only_root.to_string()),
            ("network mode", before.network.clone(), self.network.clone()),
            ("networks", before.networks.join(","), self.networks.join(",")),
            ("mounts", before.mounts.join(" "), self.mounts.join(" ")),
            ("memory limit", format!("{} MiB", before.memory_mb), format!("{} MiB", self.memory_mb)),
            ("pids limit", before.pids.to_string(), self.pids.to_string()),
            ("user", before.user.clone(), self.user.clone()),
        ];
        let mut diffs: Vec<String> =
            fields.into_iter().filter(|(_, a, b)| a != b).map(|(n, a, b)| format!("{n} {a:?} became {b:?}")).collect();
        if before.nano_cpus != self.nano_cpus {
            diffs.push(format!("cpu limit {} became {}", before.nano_cpus, self.nano_cpus));
        }
        (!diffs.is_empty()).then(|| diffs.join("; "))
    }
}

/// How a process ended and what it printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutcome {
    /// None when it did not exit by itself (killed at the deadline).
    pub exit_code: Option<i32>,
    /// Killed at the deadline.
    pub timed_out: bool,
    /// The OOM killer ended a process in the container.
    pub oom_killed: bool,
    /// The kept prefix of stdout.
    pub stdout: Vec<u8>,
    /// Stdout was cut at the cap.
    pub stdout_truncated: bool,
    /// The kept prefix of stderr.
    pub stderr: Vec<u8>,
    /// Stderr was cut at the cap.
    pub stderr_truncated: bool,
}

/// Output collected from an attached stream, capped per channel.
#[derive(Debug, Default)]
struct Collected {
    stdout: Vec<u8>,
    stdout_truncated: bool,
    stderr: Vec<u8>,
    stderr_truncated: bool,
}

impl Collected {
    /// The exit status a process wrote as its last words (see [`Engine::wait`]):
    /// stdout ends with `end`, stderr with `end`, 1 to 3 digits, `end`. None
    /// when either stream lacks them or was cut.
    fn last_words(&self, end: &[u8]) -> Option<i32> {
        self.last_words_at(end).map(|(status, _)| status)
    }

    /// [`Collected::last_words`], with the length of the last words on stderr.
    fn last_words_at(&self, end: &[u8]) -> Option<(i32, usize)> {
        if end.is_empty() || self.stdout_truncated || self.stderr_truncated || !self.stdout.ends_with(end) {
            return None;
        }
        let rest = self.stderr.strip_suffix(end)?;
        // `end` may itself end in a digit: try each length of status, shortest first.
        (1..=3).find_map(|n| {
            let (before, status) = rest.split_at_checked(rest.len().checked_sub(n)?)?;
            if !before.ends_with(end) || !status.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let status = std::str::from_utf8(status).ok()?.parse::<u8>().ok()?;
            Some((i32::from(status), 2 * end.len() + n))
        })
    }

    /// Takes the last words off both streams when they are there.
    fn strip_last_words(&mut self, end: &[u8]) {
        if let Some((_, on_stderr)) = self.last_words_at(end) {
            self.stdout.truncate(self.stdout.len() - end.len());
            self.stderr.truncate(self.stderr.len() - on_stderr);
        }
    }

    fn push(&mut self, out: LogOutput, cap: usize) {
        let (buf, cut, bytes) = match out {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                (&mut self.stdout, &mut self.stdout_truncated, message)
            }
            LogOutput::StdErr { message } => (&mut self.stderr, &mut self.stderr_truncated, message),
            LogOutput::StdIn { .. } => return,
        };
        let room = cap.saturating_sub(buf.len());
        if bytes.len() > room {
            *cut = true;
        }
        buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

/// A started container: its output is being collected until [`Engine::wait`].
#[derive(Debug)]
pub struct Started {
    collector: JoinHandle<()>,
    collected: Arc<Mutex<Collected>>,
    /// Signalled after each chunk of output.
    progress: Arc<Notify>,
}

/// A started container whose stdin is still open: its main process waits for what
/// [`Launched::feed`] writes, and nothing it printed has been read yet.
#[derive(Debug)]
pub struct Launched {
    attached: AttachContainerResults,
}

impl Launched {
    /// Reads the main process's output until stdout has said exactly `token` (its
    /// word that it now waits on stdin), for at most `within`.
    ///
    /// # Errors
    ///
    /// The process wrote anything else first, ended, or said nothing in time.
    pub async fn ready(&mut self, token: &[u8], within: Duration) -> Result<(), EngineError> {
        let mut said = Vec::new();
        let read = async {
            while said.len() < token.len() {
                match self.attached.output.next().await {
                    Some(Ok(LogOutput::StdOut { message })) => said.extend_from_slice(&message),
                    Some(Ok(LogOutput::StdErr { message })) => {
                        return Err(format!("it wrote {:?} to stderr first", String::from_utf8_lossy(&message)));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(format!("its output failed: {e}")),
                    None => return Err("it ended first".into()),
                }
                if !token.starts_with(&said[..said.len().min(token.len())]) || said.len() > token.len() {
                    return Err(format!("it wrote {:?} instead", String::from_utf8_lossy(&said)));
                }
            }
            Ok(())
        };
        match tokio::time::timeout(within, read).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(EngineError::Unexpected(format!("the container did not say it was waiting: {why}"))),
            Err(_) => Err(EngineError::Unexpected(format!(
                "the container did not say it was waiting within {} ms",
                within.as_millis()
            ))),
        }
    }

    /// The attach itself, for a process that serves many exchanges.
    pub(crate) fn into_attached(self) -> AttachContainerResults {
        self.attached
    }

    /// A `Launched` that no container holds, whose process says `said`, for tests
    /// of what surrounds it.
    #[cfg(test)]
    pub(crate) fn in_memory(said: Vec<LogOutput>) -> Launched {
        let output = Box::pin(futures_util::stream::iter(said.into_iter().map(Ok)));
        Launched { attached: AttachContainerResults { output, input: Box::pin(tokio::io::sink()) } }
    }

    /// Writes `stdin` and closes it, and collects output (each stream capped at
    /// `max_output` bytes) until [`Engine::wait`]. Spawns onto the current runtime.
    pub fn feed(self, stdin: Vec<u8>, max_output: usize) -> Started {
        let collected = Arc::new(Mutex::new(Collected::default()));
        let sink = Arc::clone(&collected);
        let progress = Arc::new(Notify::new());
        let told = Arc::clone(&progress);
        let AttachContainerResults { mut input, mut output } = self.attached;
        let collector = tokio::spawn(async move {
            let writer = async move {
                // A guest that exits before reading all of stdin closes the pipe; that is its business.
                let _ = input.write_all(&stdin).await;
                let _ = input.shutdown().await;
            };
            let reader = async move {
                while let Some(Ok(chunk)) = output.next().await {
                    if let Ok(mut c) = sink.lock() {
                        c.push(chunk, max_output);
                    }
                    told.notify_one();
                }
            };
            tokio::join!(writer, reader);
        });
        Started { collector, collected, progress }
    }
}

/// What ended a wait first.
enum Waited {
    /// The engine's wait answered.
    Engine(Option<Result<bollard::models::ContainerWaitResponse, BollardError>>),
    /// The process wrote its last words with this exit status.
    Said(i32),
}

/// The local engine.
#[derive(Clone, Debug)]
pub struct Engine {
    docker: Docker,
    owner: String,
    /// This daemon process, labelled on every container it makes.
    instance: Option<Instance>,
}

impl Engine {
    /// Connects to the local engine named by `docker_host` (the value of
    /// `DOCKER_HOST`; `None` for the default socket) and negotiates the API version.
    ///
    /// # Errors
    ///
    /// [`EngineError::Remote`] for anything but a unix socket; a docker error when
    /// the engine does not answer.
    pub async fn connect(docker_host: Option<&str>, owner: &str) -> Result<Engine, EngineError> {
        let socket = match docker_host.map(str::trim) {
            None | Some("") => "/var/run/docker.sock".to_string(),
            Some(h) => match h.strip_prefix("unix://") {
                Some(path) if path.starts_with('/') => path.to_string(),
                _ => return Err(EngineError::Remote(h.to_string())),
            },
        };
        let docker = Docker::connect_with_unix(&socket, 120, bollard::API_DEFAULT_VERSION)?;
        let docker = docker.negotiate_version().await?;
        Ok(Engine { docker, owner: owner.to_string(), instance: Proc::default().current() })
    }

    /// Runtimes the engine lists.
    ///
    /// # Errors
    ///
    /// The engine did not answer.
    pub async fn runtimes(&self) -> Result<Vec<String>, EngineError> {
        let info = self.docker.info().await?;
        let mut names: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
        names.sort();
        Ok(names)
    }

    /// The engine's `os/arch`.
    ///
    /// # Errors
    ///
    /// The engine did not answer.
    pub async fn platform(&self) -> Result<String, EngineError> {
        let v = self.docker.version().await?;
        Ok(format!("{}/{}", v.os.unwrap_or_default(), v.arch.unwrap_or_default()))
    }

    /// Reads an image's facts by ID or name.
    ///
    /// # Errors
    ///
    /// The image does not exist, or the engine did not answer.
    pub async fn image(&self, reference: &str) -> Result<ImageFacts, EngineError> {
        let img = self.docker.inspect_image(reference).await?;
        let id = img.id.ok_or_else(|| EngineError::Unexpected(format!("image {reference} has no ID")))?;
        let config = img.config.unwrap_or_default();
        Ok(ImageFacts {
            id,
            volumes: config.volumes.unwrap_or_default(),
            env: config.env.unwrap_or_default(),
            platform: format!("{}/{}", img.os.unwrap_or_default(), img.architecture.unwrap_or_default()),
        })
    }

    /// Builds the create body from `spec` under `lockdown`, checks it, and creates
    /// (does not start) the container. Returns its ID.
    ///
    /// # Errors
    ///
    /// [`EngineError::Lockdown`] when the spec breaks an invariant (nothing reached
    /// the engine), or the engine's error.
    pub async fn create(&self, lockdown: &Lockdown, spec: &Spec, now_unix: u64) -> Result<String, EngineError> {
        let mut body: ContainerCreateBody = lockdown.create_body(spec, now_unix)?;
        let labels = body.labels.get_or_insert_default();
        labels.insert(OWNER_LABEL.into(), self.owner.clone());
        if let Some(me) = &self.instance {
            labels.insert(INSTANCE_LABEL.into(), me.label());
        }
        lockdown.check_body(&body)?;
        let name = format!("plimsoll-{}", random_suffix());
        let opts = CreateContainerOptionsBuilder::default().name(&name).build();
        let created = self.docker.create_container(Some(opts), body).await?;
        Ok(created.id)
    }

    /// Attaches, starts the container, writes `stdin` and closes it, and collects
    /// output (each stream capped at `max_output` bytes) until [`Engine::wait`].
    ///
    /// # Errors
    ///
    /// The engine refused to attach or start.
    pub async fn start(&self, id: &str, stdin: Vec<u8>, max_output: usize) -> Result<Started, EngineError> {
        Ok(self.launch(id).await?.feed(stdin, max_output))
    }

    /// Creates a container from `spec` under `lockdown`, starts it, and waits (up to
    /// `within`) for its main process to say `ready_word` on stdout: it now waits
    /// on stdin. A container that fails any step is removed.
    ///
    /// # Errors
    ///
    /// [`EngineError::Lockdown`] when the spec breaks an invariant, the engine's
    /// error, or what [`Launched::ready`] says.
    pub async fn launch_new(
        &self,
        lockdown: &Lockdown,
        spec: &Spec,
        ready_word: &[u8],
        within: Duration,
        now_unix: u64,
    ) -> Result<(String, Launched), EngineError> {
        let id = self.create(lockdown, spec, now_unix).await?;
        let launched = async {
            let mut launched = self.launch(&id).await?;
            launched.ready(ready_word, within).await?;
            Ok(launched)
        };
        match launched.await {
            Ok(launched) => Ok((id, launched)),
            Err(e) => {
                remove_or_log(self, &id).await;
                Err(e)
            }
        }
    }

    /// Attaches and starts the container, keeping its stdin open: the main process
    /// runs, waiting on stdin, until [`Launched::feed`] writes to it.
    ///
    /// # Errors
    ///
    /// The engine refused to attach or start.
    pub async fn launch(&self, id: &str) -> Result<Launched, EngineError> {
        let opts = AttachContainerOptionsBuilder::default().stdin(true).stdout(true).stderr(true).stream(true).build();
        let attached = self.docker.attach_container(id, Some(opts)).await?;
        self.docker.start_container(id, None).await?;
        Ok(Launched { attached })
    }

    /// Waits for the main process up to `timeout`, kills it at the deadline, and
    /// returns how it ended with its output.
    ///
    /// With `end`, the wait also ends once the process has written its last words
    /// (stdout ending with `end`; stderr ending with `end`, its exit status in
    /// decimal, `end`), without waiting for the engine to confirm the exit; the
    /// status is then the one written. The last words are taken off both streams
    /// whichever way the wait ended.
    ///
    /// # Errors
    ///
    /// The container vanished or the engine failed: the code may have run, and no
    /// exit status can be trusted.
    pub async fn wait(
        &self,
        id: &str,
        started: Started,
        timeout: Duration,
        end: Option<&[u8]>,
    ) -> Result<ExecOutcome, EngineError> {
        let Started { mut collector, collected, progress } = started;
        let take = |collected: &Mutex<Collected>| -> Result<Collected, EngineError> {
            let mut c = std::mem::take(&mut *collected.lock().map_err(|_| EngineError::Unexpected("poisoned".into()))?);
            if let Some(end) = end {
                c.strip_last_words(end);
            }
            Ok(c)
        };
        let mut waiter = self.docker.wait_container(id, None);
        let watch = async {
            loop {
                tokio::select! {
                    status = waiter.next() => return Waited::Engine(status),
                    () = progress.notified(), if end.is_some() => {
                        let said = collected.lock().ok().and_then(|c| end.and_then(|e| c.last_words(e)));
                        if let Some(status) = said {
                            return Waited::Said(status);
                        }
                    }
                }
            }
        };
        let timed_out = match tokio::time::timeout(timeout, watch).await {
            Ok(Waited::Said(status)) => {
                collector.abort();
                let c = take(&collected)?;
                return Ok(ExecOutcome {
                    exit_code: Some(status),
                    timed_out: false,
                    oom_killed: false,
                    stdout: c.stdout,
                    stdout_truncated: c.stdout_truncated,
                    stderr: c.stderr,
                    stderr_truncated: c.stderr_truncated,
                });
            }
            Ok(Waited::Engine(Some(Ok(_)))) => false,
            // A non-zero exit arrives as an error carrying the code; the inspection below reads it.
            Ok(Waited::Engine(Some(Err(BollardError::DockerContainerWaitError { .. })))) => false,
            Ok(Waited::Engine(Some(Err(e)))) => return Err(e.into()),
            Ok(Waited::Engine(None)) => {
                return Err(EngineError::Unexpected("the wait stream ended without a status".into()));
            }
            Err(_) => {
                self.kill(id).await?;
                true
            }
        };
        // The output stream ends when the container's process does; bound it anyway.
        if tokio::time::timeout(Duration::from_secs(5), &mut collector).await.is_err() {
            collector.abort();
        }
        let mut inspected = self.inspect(id).await?;
        if inspected.running {
            return Err(EngineError::Unexpected("the container still runs after its process was waited for".into()));
        }
        // The engine may record an OOM kill after the exit it caused (its OOM and exit
        // events race under load); look again before a SIGKILL is called anything else.
        if !timed_out && inspected.exit_code == Some(137) && !inspected.oom_killed {
            for _ in 0..OOM_RECHECKS {
                tokio::time::sleep(OOM_RECHECK_EVERY).await;
                let again = self.inspect(id).await?;
                if again.oom_killed {
                    inspected = again;
                    break;
                }
            }
        }
        let c = take(&collected)?;
        Ok(ExecOutcome {
            exit_code: if timed_out { None } else { inspected.exit_code.map(|c| c as i32) },
            timed_out,
            oom_killed: inspected.oom_killed,
            stdout: c.stdout,
            stdout_truncated: c.stdout_truncated,
            stderr: c.stderr,
            stderr_truncated: c.stderr_truncated,
        })
    }

    /// Runs a process in a running container as `user`, with `stdin`, up to `timeout`.
    ///
    /// # Errors
    ///
    /// The engine failed; the process may have run.
    pub async fn exec(
        &self,
        id: &str,
        user: u32,
        command: Vec<String>,
        stdin: Vec<u8>,
        timeout: Duration,
        max_output: usize,
    ) -> Result<ExecOutcome, EngineError> {
        let config = CreateExecOptions {
            cmd: Some(command),
            user: Some(format!("{user}:{user}")),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            privileged: Some(false),
            working_dir: Some("/work".to_string()),
            ..CreateExecOptions::default()
        };
        let exec = self.docker.create_exec(id, config).await?;
        let StartExecResults::Attached { mut output, mut input } = self.docker.start_exec(&exec.id, None).await? else {
            return Err(EngineError::Unexpected("exec started detached".into()));
        };
        let mut c = Collected::default();
        let run = async {
            let _ = input.write_all(&stdin).await;
            let _ = input.shutdown().await;
            while let Some(Ok(chunk)) = output.next().await {
                c.push(chunk, max_output);
            }
        };
        let timed_out = tokio::time::timeout(timeout, run).await.is_err();
        let state = self.docker.inspect_exec(&exec.id).await?;
        Ok(ExecOutcome {
            exit_code: if timed_out { None } else { state.exit_code.map(|c| c as i32) },
            timed_out,
            oom_killed: false,
            stdout: c.stdout,
            stdout_truncated: c.stdout_truncated,
            stderr: c.stderr,
            stderr_truncated: c.stderr_truncated,
        })
    }

    /// The engine's events from `since_unix` on, for as long as the engine streams them.
    pub fn events(
        &self,
        since_unix: u64,
    ) -> impl futures_util::Stream<Item = Result<bollard::models::EventMessage, BollardError>> + use<> {
        let opts = bollard::query_parameters::EventsOptionsBuilder::default().since(&since_unix.to_string()).build();
        self.docker.events(Some(opts))
    }

    /// Reads a container back.
    ///
    /// # Errors
    ///
    /// The container does not exist or the engine failed.
    pub async fn inspect(&self, id: &str) -> Result<Inspection, EngineError> {
        let c = self.docker.inspect_container(id, None).await?;
        let hc = c.host_config.unwrap_or_default();
        let state = c.state.unwrap_or_default();
        let mut networks: Vec<String> =
            c.network_settings.and_then(|n| n.networks).map(|n| n.into_keys().collect()).unwrap_or_default();
        networks.sort();
        let mut mounts: Vec<String> =
            hc.tmpfs.unwrap_or_default().into_iter().map(|(target, opts)| format!("{target}:{opts}")).collect();
        mounts.sort();
        Ok(Inspection {
            image_id: c.image.unwrap_or_default(),
            runtime: hc.runtime.unwrap_or_default(),
            read_only_root: hc.readonly_rootfs.unwrap_or(false),
            network: hc.network_mode.unwrap_or_default(),
            networks,
            mounts,
            memory_mb: u32::try_from(hc.memory.unwrap_or(0) / (1024 * 1024)).unwrap_or(u32::MAX),
            pids: u32::try_from(hc.pids_limit.unwrap_or(0)).unwrap_or(0),
            nano_cpus: hc.nano_cpus.unwrap_or(0),
            user: c.config.and_then(|c| c.user).unwrap_or_default(),
            running: state.running.unwrap_or(false),
            paused: state.paused.unwrap_or(false),
            exit_code: state.exit_code,
            oom_killed: state.oom_killed.unwrap_or(false),
        })
    }

    /// Kills the main process (and with it the container's processes).
    ///
    /// # Errors
    ///
    /// The engine failed for a reason other than the container having stopped.
    pub async fn kill(&self, id: &str) -> Result<(), EngineError> {
        let opts = KillContainerOptionsBuilder::default().signal("KILL").build();
        match self.docker.kill_container(id, Some(opts)).await {
            Ok(()) | Err(BollardError::DockerResponseServerError { status_code: 409, .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Freezes a container.
    ///
    /// # Errors
    ///
    /// The engine failed.
    pub async fn pause(&self, id: &str) -> Result<(), EngineError> {
        Ok(self.docker.pause_container(id).await?)
    }

    /// Thaws a container.
    ///
    /// # Errors
    ///
    /// The engine failed.
    pub async fn unpause(&self, id: &str) -> Result<(), EngineError> {
        Ok(self.docker.unpause_container(id).await?)
    }

    /// Removes a container, thawing and killing it first. A container already gone
    /// is not an error.
    ///
    /// # Errors
    ///
    /// The engine failed.
    pub async fn remove(&self, id: &str) -> Result<(), EngineError> {
        // A frozen container (an idle session, or one frozen from outside) holds up
        // a forced removal under runsc for ten seconds; not frozen is the usual
        // answer, and not an error here.
        let _ = self.docker.unpause_container(id).await;
        let opts = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match self.docker.remove_container(id, Some(opts)).await {
            Ok(()) | Err(BollardError::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The containers plimsoll created (any daemon instance), with their expiry and maker.
    ///
    /// # Errors
    ///
    /// The engine failed.
    pub async fn ours(&self) -> Result<Vec<Ours>, EngineError> {
        let filters: HashMap<&str, Vec<&str>> = [("label", vec![LIFETIME_LABEL])].into();
        let opts = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        let list = self.docker.list_containers(Some(opts)).await?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let label = |name: &str| c.labels.as_ref().and_then(|l| l.get(name)).cloned();
                Some(Ours {
                    expires: label(LIFETIME_LABEL).and_then(|v| v.parse().ok()),
                    maker: label(INSTANCE_LABEL).as_deref().and_then(Instance::parse),
                    id: c.id?,
                })
            })
            .collect())
    }

    /// Removes every container of ours whose lifetime label is past (or unreadable),
    /// or whose maker, a daemon process on this machine, has ended, so a daemon
    /// killed mid-run leaves nothing behind once another starts. Returns the IDs
    /// removed.
    ///
    /// # Errors
    ///
    /// The engine failed to list; a failed removal is retried on the next sweep.
    pub async fn sweep(&self, now_unix: u64) -> Result<Vec<String>, EngineError> {
        let proc = Proc::default();
        let mut removed = Vec::new();
        for c in self.ours().await? {
            let expired = c.expires.is_none_or(|e| e <= now_unix);
            let orphaned = match (&c.maker, &self.instance) {
                (Some(maker), Some(me)) => proc.has_ended(maker, me),
                _ => false,
            };
            if (expired || orphaned) && self.remove(&c.id).await.is_ok() {
                removed.push(c.id);
            }
        }
        Ok(removed)
    }
}

/// One of our containers, as the sweep sees it.
#[derive(Clone, Debug)]
pub struct Ours {
    /// Its ID.
    pub id: String,
    /// Its lifetime label (unix seconds), if readable.
    pub expires: Option<u64>,
    /// The daemon process that made it, if labelled.
    pub maker: Option<Instance>,
}

/// Removes a container now; a failure is logged, and the orphan sweep retries it.
pub async fn remove_or_log(engine: &Engine, id: &str) {
    if let Err(e) = engine.remove(id).await {
        eprintln!("removing container {id} failed ({e}); the orphan sweep will retry");
    }
}

/// Removals off the path of the run that asked for them: each runs in the
/// background on the engine's runtime, and [`Reaper::drain`] waits for them all.
#[derive(Debug)]
pub struct Reaper {
    engine: Engine,
    runtime: tokio::runtime::Handle,
    tasks: Mutex<tokio::task::JoinSet<()>>,
    /// When the latest removal was asked for, and how many wait.
    queue: Arc<Mutex<(Instant, usize)>>,
}

/// A burst's quiet spell: how long the reaper waits after the latest removal was
/// asked for before it removes, and the warm pool after a shape's latest claim
/// before it refills one that still has a container ready. During a burst of runs,
/// removals and makes would compete with the next runs for the engine and the
/// cores. Every container waiting for removal is past its run.
pub const QUIET: Duration = Duration::from_millis(300);
/// The most removals that may wait for a quiet spell; past this they go at once.
pub const REAPER_BACKLOG: usize = 32;

/// How long a removal still waits at `now`: nothing once the reaper has been
/// asked for nothing since `latest` for [`QUIET`], or once `waiting` removals are
/// queued.
fn reaper_wait(latest: Instant, waiting: usize, now: Instant) -> Duration {
    if waiting >= REAPER_BACKLOG {
        return Duration::ZERO;
    }
    (latest + QUIET).saturating_duration_since(now)
}

impl Reaper {
    /// A reaper removing through `engine`, its tasks on `runtime`.
    pub fn new(engine: Engine, runtime: tokio::runtime::Handle) -> Reaper {
        Reaper {
            engine,
            runtime,
            tasks: Mutex::new(tokio::task::JoinSet::new()),
            queue: Arc::new(Mutex::new((Instant::now(), 0))),
        }
    }

    /// Removes `id` in the background, once no removal was asked for in
    /// [`QUIET`] (or [`REAPER_BACKLOG`] wait).
    pub fn remove(&self, id: String) {
        let engine = self.engine.clone();
        let queue = Arc::clone(&self.queue);
        {
            let mut q = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            *q = (Instant::now(), q.1 + 1);
        }
        let mut tasks = self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while tasks.try_join_next().is_some() {}
        tasks.spawn_on(
            async move {
                loop {
                    let wait = {
                        let q = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        reaper_wait(q.0, q.1, Instant::now())
                    };
                    if wait.is_zero() {
                        break;
                    }
                    tokio::time::sleep(wait).await;
                }
                queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).1 -= 1;
                remove_or_log(&engine, &id).await;
            },
            &self.runtime,
        );
    }

    /// Waits for every removal asked for so far (each still waits for its quiet spell).
    pub async fn drain(&self) {
        let mut tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        while tasks.join_next().await.is_some() {}
    }
}

/// 16 hex digits from the OS's randomness, for container names.
fn random_suffix() -> String {
    let mut b = [0u8; 8];
    // Names need only be unique; a failed read falls back to the time, which is.
    if getrandom::fill(&mut b).is_err() {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        b = (t.as_nanos() as u64).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[tokio::test]
    async fn a_remote_docker_host_is_refused_before_connecting() {
        for host in ["tcp://10.0.0.1:2375", "ssh://user@host", "unix://relative.sock", "npipe:////./pipe/docker"] {
            let err = Engine::connect(Some(host), "t").await.expect_err("must fail");
            assert_eq!(
                err.to_string(),
                format!(
                    "DOCKER_HOST={host:?} is refused: plimsoll drives only the local engine (unset DOCKER_HOST or use unix:///var/run/docker.sock)"
                )
            );
        }
    }

    #[tokio::test]
    async fn a_launched_container_is_ready_only_once_stdout_said_exactly_the_word() {
        let out = |s: &str| LogOutput::StdOut { message: s.to_string().into() };
        let err = |s: &str| LogOutput::StdErr { message: s.to_string().into() };
        let within = Duration::from_secs(5);
        let ready = |said: Vec<LogOutput>| async move { Launched::in_memory(said).ready(b"waiting\n", within).await };
        assert!(ready(vec![out("waiting\n")]).await.is_ok());
        assert!(ready(vec![out("wait"), out("ing\n")]).await.is_ok(), "the word may come in pieces");
        for (said, why) in [
            (vec![err("oops")], "it wrote \"oops\" to stderr first"),
            (vec![out("hello")], "it wrote \"hello\" instead"),
            (vec![out("waiting\nmore")], "it wrote \"waiting\\nmore\" instead"),
            (vec![out("wait")], "it ended first"),
        ] {
            let e = ready(said).await.expect_err(why);
            assert_eq!(e.to_string(), format!("docker engine: the container did not say it was waiting: {why}"));
        }
        let (input, _) = tokio::io::duplex(64);
        let mut silent = Launched {
            attached: AttachContainerResults {
                output: Box::pin(futures_util::stream::pending()),
                input: Box::pin(input),
            },
        };
        let e = silent.ready(b"waiting\n", Duration::from_millis(20)).await.expect_err("silent");
        assert_eq!(e.to_string(), "docker engine: the container did not say it was waiting within 20 ms");
    }

    /// A read-back of a snippet's container as the lockdown builds it.
    pub(crate) fn inspection() -> Inspection {
        Inspection {
            image_id: format!("sha256:{}", "a".repeat(64)),
            runtime: "runc".into(),
            read_only_root: true,
            network: "none".into(),
            networks: vec!["none".into()],
            mounts: vec!["/tmp:rw,noexec,nosuid,nodev,size=16m".into()],
            memory_mb: 256,
            pids: 256,
            nano_cpus: 1_000_000_000,
            user: "61000:61000".into(),
            running: true,
            ..Inspection::default()
        }
    }

    #[test]
    fn removals_wait_for_a_quiet_spell_unless_too_many_wait() {
        let latest = Instant::now();
        assert_eq!(reaper_wait(latest, 1, latest), QUIET);
        assert_eq!(reaper_wait(latest, 1, latest + QUIET / 3), QUIET - QUIET / 3);
        assert_eq!(reaper_wait(latest, 1, latest + QUIET), Duration::ZERO);
        assert_eq!(reaper_wait(latest, REAPER_BACKLOG, latest), Duration::ZERO);
    }

    #[test]
    fn an_equal_read_back_is_no_change_and_a_paused_or_stopped_one_is_not_a_change() {
        let frozen = Inspection { paused: true, ..inspection() };
        let ended = Inspection { running: false, exit_code: Some(0), ..inspection() };
        assert_eq!(inspection().changes_from(&inspection()), None);
        assert_eq!(frozen.changes_from(&inspection()), None);
        assert_eq!(ended.changes_from(&inspection()), None);
    }

    #[test]
    fn every_changed_field_is_named() {
        let now = Inspection { memory_mb: 512, networks: vec!["bridge".into(), "none".into()], ..inspection() };
        assert_eq!(
            now.changes_from(&inspection()).as_deref(),
            Some(r#"networks "none" became "bridge,none"; memory limit "256 MiB" became "512 MiB""#)
        );
        let now = Inspection { image_id: "sha256:bb".into(), nano_cpus: 2_000_000_000, ..inspection() };
        assert_eq!(
            now.changes_from(&inspection()).as_deref(),
            Some(
                format!(
                    r#"image "sha256:{}" became "sha256:bb"; cpu limit 1000000000 became 2000000000"#,
                    "a".repeat(64)
                )
                .as_str()
            )
        );
    }

    fn collected(stdout: &str, stderr: &str) -> Collected {
        Collected { stdout: stdout.into(), stderr: stderr.into(), ..Collected::default() }
    }

    #[test]
    fn last_words_need_both_streams_and_a_status_between_two_ends() {
        let end = b"E9f";
        assert_eq!(collected("out\nE9f", "M errE9f0E9f").last_words(end), Some(0));
        assert_eq!(collected("E9f", "E9f255E9f").last_words(end), Some(255));
        assert_eq!(collected("", "errE9f1E9f").last_words(end), None, "stdout lacks them");
        assert_eq!(collected("E9f", "err1E9f").last_words(end), None, "no first end");
        assert_eq!(collected("E9f", "E9fE9f").last_words(end), None, "no status");
        assert_eq!(collected("E9f", "E9f1000E9f").last_words(end), None, "four digits");
        assert_eq!(collected("E9f", "E9f256E9f").last_words(end), None, "over 255");
        assert_eq!(collected("E9f", "E9f1E9f").last_words(b""), None, "an empty end is never one");
        assert_eq!(collected("ab1", "xab10ab1").last_words(b"ab1"), Some(0), "an end that ends in a digit");
        assert_eq!(collected("ab1", "xab1ab1").last_words(b"ab1"), None, "no status after that end");
        let mut cut = collected("E9f", "E9f1E9f");
        cut.stdout_truncated = true;
        assert_eq!(cut.last_words(end), None, "a cut stream may have lost them");
    }

    #[test]
    fn stripping_last_words_leaves_exactly_what_the_guest_wrote() {
        let mut c = collected("4\nE9f", "MARK12E9f3E9f");
        c.strip_last_words(b"E9f");
        assert_eq!((c.stdout.as_slice(), c.stderr.as_slice()), (&b"4\n"[..], &b"MARK12"[..]));
        let mut plain = collected("4\n", "MARK");
        plain.strip_last_words(b"E9f");
        assert_eq!((plain.stdout.as_slice(), plain.stderr.as_slice()), (&b"4\n"[..], &b"MARK"[..]));
    }

    #[test]
    fn output_is_capped_per_stream_and_flagged() {
        let mut c = Collected::default();
        c.push(LogOutput::StdOut { message: "abcdef".into() }, 4);
        c.push(LogOutput::StdOut { message: "gh".into() }, 4);
        c.push(LogOutput::StdErr { message: "xy".into() }, 4);
        assert_eq!((c.stdout.as_slice(), c.stdout_truncated), (&b"abcd"[..], true));
        assert_eq!((c.stderr.as_slice(), c.stderr_truncated), (&b"xy"[..], false));
    }
}
