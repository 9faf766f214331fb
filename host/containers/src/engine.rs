//! The local docker engine over bollard. Only a local socket is used: a remote
//! `DOCKER_HOST` would move the wall onto a machine the operator did not name, so
//! it is refused before any connection is made.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, KillContainerOptionsBuilder,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::task::JoinHandle;

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
}

/// The local engine.
#[derive(Clone, Debug)]
pub struct Engine {
    docker: Docker,
    owner: String,
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
        Ok(Engine { docker, owner: owner.to_string() })
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
        body.labels.get_or_insert_default().insert(OWNER_LABEL.into(), self.owner.clone());
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
        let opts = AttachContainerOptionsBuilder::default().stdin(true).stdout(true).stderr(true).stream(true).build();
        let attached = self.docker.attach_container(id, Some(opts)).await?;
        self.docker.start_container(id, None).await?;
        let collected = Arc::new(Mutex::new(Collected::default()));
        let sink = Arc::clone(&collected);
        let mut input = attached.input;
        let mut output = attached.output;
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
                }
            };
            tokio::join!(writer, reader);
        });
        Ok(Started { collector, collected })
    }

    /// Waits for the main process up to `timeout`, kills it at the deadline, and
    /// returns how it ended with its output.
    ///
    /// # Errors
    ///
    /// The container vanished or the engine failed: the code may have run, and no
    /// exit status can be trusted.
    pub async fn wait(&self, id: &str, started: Started, timeout: Duration) -> Result<ExecOutcome, EngineError> {
        let mut waiter = self.docker.wait_container(id, None);
        let timed_out = match tokio::time::timeout(timeout, waiter.next()).await {
            Ok(Some(Ok(_))) => false,
            // A non-zero exit arrives as an error carrying the code; the inspection below reads it.
            Ok(Some(Err(BollardError::DockerContainerWaitError { .. }))) => false,
            Ok(Some(Err(e))) => return Err(e.into()),
            Ok(None) => return Err(EngineError::Unexpected("the wait stream ended without a status".into())),
            Err(_) => {
                self.kill(id).await?;
                true
            }
        };
        // The output stream ends when the container's process does; bound it anyway.
        let mut collector = started.collector;
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
        let c = std::mem::take(&mut *started.collected.lock().map_err(|_| EngineError::Unexpected("poisoned".into()))?);
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

    /// Removes a container, killing it first. A container already gone is not an error.
    ///
    /// # Errors
    ///
    /// The engine failed.
    pub async fn remove(&self, id: &str) -> Result<(), EngineError> {
        let opts = RemoveContainerOptionsBuilder::default().force(true).v(true).build();
        match self.docker.remove_container(id, Some(opts)).await {
            Ok(()) | Err(BollardError::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// IDs of the containers plimsoll created (any daemon instance), with their expiry.
    ///
    /// # Errors
    ///
    /// The engine failed.
    pub async fn ours(&self) -> Result<Vec<(String, Option<u64>)>, EngineError> {
        let filters: HashMap<&str, Vec<&str>> = [("label", vec![LIFETIME_LABEL])].into();
        let opts = ListContainersOptionsBuilder::default().all(true).filters(&filters).build();
        let list = self.docker.list_containers(Some(opts)).await?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let expires = c.labels.as_ref().and_then(|l| l.get(LIFETIME_LABEL)).and_then(|v| v.parse().ok());
                Some((c.id?, expires))
            })
            .collect())
    }

    /// Removes every container of ours whose lifetime label is past (or unreadable),
    /// so a daemon killed mid-run leaves nothing behind once another starts. Returns
    /// the IDs removed.
    ///
    /// # Errors
    ///
    /// The engine failed to list; a failed removal is retried on the next sweep.
    pub async fn sweep(&self, now_unix: u64) -> Result<Vec<String>, EngineError> {
        let mut removed = Vec::new();
        for (id, expires) in self.ours().await? {
            if expires.is_none_or(|e| e <= now_unix) && self.remove(&id).await.is_ok() {
                removed.push(id);
            }
        }
        Ok(removed)
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
mod tests {
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
