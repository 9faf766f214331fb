//! What backs a fake's sandboxes: local docker containers (no network, the
//! resources asked), so the code a plugin sends really runs.

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::Command;

/// The guest's uid and gid, as in plimsoll's own containers.
pub const GUEST_UID: u32 = 61000;
/// The most processes a sandbox holds: the backing container's stand-in for a
/// microVM's own limits, low enough that a fork bomb ends before its memory.
const PIDS: u32 = 256;
/// The label every container a fake makes carries, with the fake's pid.
const LABEL: &str = "dev.plimsoll.fake";

/// The image `images/build.sh` wrote down, from the checkout this runs in.
pub fn default_image() -> Option<String> {
    let here = std::env::current_dir().ok()?;
    for dir in here.ancestors() {
        if let Ok(id) = std::fs::read_to_string(dir.join("images/out/sandbox.id")) {
            return Some(id.trim().to_string());
        }
    }
    None
}

/// The docker containers of one fake.
#[derive(Debug)]
pub struct Backing {
    image: String,
    /// Held shared while a container is being made and taken whole by
    /// [`Backing::remove_all`], which sets it: a container whose `docker run`
    /// was under way at shutdown is waited for and removed, not left behind,
    /// and none is made after.
    closed: tokio::sync::RwLock<bool>,
}

/// What a sandbox's container gets.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Its memory (and memory with swap), in bytes.
    pub memory_bytes: u64,
    /// Its CPUs, as docker's `--cpus` takes them (`None`: no limit).
    pub cpus: Option<String>,
    /// The size of the guest's home, a tmpfs counted in its memory.
    pub disk_mb: u32,
    /// Tmpfs mounts beyond the home; when none is `/tmp`, a 64 MiB one is.
    pub tmpfs: Vec<Tmpfs>,
    /// Variables every process in it sees.
    pub env: Vec<(String, String)>,
    /// Its way out, when its rules allow any (none: no network at all).
    pub egress: Option<crate::egress::Mount>,
}

impl Shape {
    /// `memory_mb` and `cpus`, a home of `disk_mb` and the small `/tmp`.
    pub fn plain(memory_mb: u32, cpus: u32, disk_mb: u32) -> Shape {
        Shape {
            memory_bytes: u64::from(memory_mb) << 20,
            cpus: Some(cpus.to_string()),
            disk_mb,
            tmpfs: Vec::new(),
            env: Vec::new(),
            egress: None,
        }
    }
}

/// A tmpfs mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tmpfs {
    /// Where: an absolute path without `:` or `,`.
    pub target: String,
    /// Its size (`None`: docker's default).
    pub size_bytes: Option<u64>,
    /// Its permission bits (`None`: docker's default).
    pub mode: Option<u32>,
    /// Mount flags such as `noexec`, or `key=value`, none with `,` or `:`.
    pub options: Vec<String>,
}

impl Tmpfs {
    /// The mount as docker's `--tmpfs` takes it. Flags not given are docker's
    /// defaults (noexec, nosuid, nodev).
    fn docker(&self) -> String {
        let mut opts = vec!["rw".to_string()];
        if let Some(size) = self.size_bytes {
            opts.push(format!("size={size}"));
        }
        if let Some(mode) = self.mode {
            opts.push(format!("mode={mode:o}"));
        }
        opts.extend(self.options.iter().cloned());
        format!("{}:{}", self.target, opts.join(","))
    }
}

/// A container shaped by a pod's spec rather than by a sandbox's [`Shape`]:
/// its own command and user, the runtime its RuntimeClass names, the
/// capabilities it asks, its volumes; no guest home.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodContainer {
    /// docker's `--runtime` (`runc`, `runsc`).
    pub runtime: String,
    /// Its host name (a pod's is its name).
    pub hostname: String,
    /// The root file system read-only.
    pub read_only: bool,
    /// Who its main process runs as (`0`).
    pub user: String,
    /// Every capability dropped before `cap_add` adds some back.
    pub cap_drop_all: bool,
    /// Capabilities added, without `CAP_`.
    pub cap_add: Vec<String>,
    /// `no-new-privileges` (the spec's `allowPrivilegeEscalation: false`).
    pub no_new_privileges: bool,
    /// Its memory (and memory with swap), in bytes.
    pub memory_bytes: u64,
    /// Its CPUs, as docker's `--cpus` takes them (`None`: no limit).
    pub cpus: Option<String>,
    /// Tmpfs mounts (memory-backed volumes).
    pub tmpfs: Vec<Tmpfs>,
    /// Host directories mounted read-only: (host path, container path).
    pub binds: Vec<(std::path::PathBuf, String)>,
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Its processes' (and threads') limit: the pod's, as a kubelet's
    /// `--pod-max-pids` sets it.
    pub pids: u32,
}

impl PodContainer {
    /// `docker run`'s arguments for it, named `name`, labelled `label`, of `image`.
    fn args(&self, name: &str, label: &str, image: &str) -> Vec<String> {
        let mut a: Vec<String> = ["run", "-d", "--name", name, "--label", label, "--network", "none", "--runtime"]
            .into_iter()
            .map(String::from)
            .collect();
        a.push(self.runtime.clone());
        if !self.hostname.is_empty() {
            a.extend(["--hostname".into(), self.hostname.clone()]);
        }
        if self.read_only {
            a.push("--read-only".into());
        }
        for t in &self.tmpfs {
            a.extend(["--tmpfs".into(), t.docker()]);
        }
        a.extend(["--user".into(), self.user.clone()]);
        if self.cap_drop_all {
            a.extend(["--cap-drop".into(), "ALL".into()]);
        }
        for c in &self.cap_add {
            a.extend(["--cap-add".into(), c.clone()]);
        }
        if self.no_new_privileges {
            a.extend(["--security-opt".into(), "no-new-privileges".into()]);
        }
        let memory = format!("{}b", self.memory_bytes);
        a.extend(["--memory".into(), memory.clone(), "--memory-swap".into(), memory]);
        if let Some(cpus) = &self.cpus {
            a.extend(["--cpus".into(), cpus.clone()]);
        }
        a.extend(["--pids-limit".into(), self.pids.to_string()]);
        for (host, inside) in &self.binds {
            a.extend(["--volume".into(), format!("{}:{inside}:ro", host.display())]);
        }
        a.push(image.to_string());
        a.extend(self.argv.iter().cloned());
        a
    }
}

/// Where a container is, as `docker inspect` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    /// Its process runs.
    pub running: bool,
    /// Its exit status once ended.
    pub exit_code: i64,
    /// docker's own error starting it, if any.
    pub error: String,
}

/// A process to run as the guest, and how.
#[derive(Debug, Default)]
pub struct Process {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Where it starts.
    pub cwd: String,
    /// Variables beyond the guest's `HOME` and `PATH`.
    pub env: Vec<(String, String)>,
    /// All of its standard input, then end of file (`None`: none at all).
    pub stdin: Option<Bytes>,
    /// Its standard input as it arrives, end of file when the sender is dropped
    /// (taken instead of `stdin`).
    pub input: Option<tokio::sync::mpsc::UnboundedReceiver<Bytes>>,
    /// When to give up and kill: every guest process, or with `marker` only
    /// this process and what it started that kept its environment.
    pub deadline: Option<Duration>,
    /// A name for this process alone, so it can be killed without the rest of
    /// the guest's (see [`Backing::kill_marked`]).
    pub marker: Option<String>,
    /// Run as root, as a vendor's in-sandbox supervisor runs what it serves
    /// (OpenShell's forwards): no guest process can signal it.
    pub supervisor: bool,
}

/// The variable that carries a process's [`Process::marker`].
const MARKER: &str = "PLIMSOLL_FAKE_PROCESS";

/// Output of a process as it runs.
#[derive(Debug)]
pub enum Chunk {
    Stdout(Bytes),
    Stderr(Bytes),
    /// It ended, with this exit status (None: killed by a signal).
    Exit(Option<i32>),
}

async fn docker(args: &[&str], stdin: Option<&[u8]>) -> Result<Vec<u8>, String> {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("docker: {e}"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input).await.map_err(|e| format!("docker stdin: {e}"))?;
    }
    let out = child.wait_with_output().await.map_err(|e| format!("docker: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(format!(
            "docker {} exited {}: {}",
            args.first().copied().unwrap_or_default(),
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Backing {
    /// Containers of `image`.
    pub fn new(image: String) -> Backing {
        Backing { image, closed: tokio::sync::RwLock::new(false) }
    }

    /// The image every sandbox runs.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// Starts a container for sandbox `id` shaped as `shape` says: a read-only
    /// root, its guest's home `/home/user` a tmpfs the guest owns, and tmpfs
    /// mounts (a small `/tmp` unless one is asked), so nothing the guest writes
    /// lands on the host's disk.
    pub async fn create(&self, id: &str, shape: &Shape) -> Result<(), String> {
        let gate = self.closed.read().await;
        if *gate {
            return Err("the fake is shutting down".into());
        }
        let label = format!("{LABEL}={}", std::process::id());
        let memory = format!("{}b", shape.memory_bytes);
        let name = format!("plimsoll-fake-{id}");
        let home = format!("/home/user:rw,exec,size={}m,uid={GUEST_UID},gid={GUEST_UID},mode=0755", shape.disk_mb);
        let pids = PIDS.to_string();
        let mut args: Vec<String> = ["run", "-d", "--name", &name, "--label", &label, "--network", "none"]
            .into_iter()
            .map(String::from)
            .collect();
        args.extend(["--memory".into(), memory.clone(), "--memory-swap".into(), memory]);
        if let Some(cpus) = &shape.cpus {
            args.extend(["--cpus".into(), cpus.clone()]);
        }
        args.extend(["--pids-limit".into(), pids, "--read-only".into(), "--tmpfs".into(), home]);
        for t in &shape.tmpfs {
            args.extend(["--tmpfs".into(), t.docker()]);
        }
        if !shape.tmpfs.iter().any(|t| t.target == "/tmp") {
            args.extend(["--tmpfs".into(), "/tmp:rw,exec,size=64m,mode=1777".into()]);
        }
        for (k, v) in &shape.env {
            args.extend(["--env".into(), format!("{k}={v}")]);
        }
        if let Some(way) = &shape.egress {
            let me = crate::egress::binary()?;
            args.extend([
                "--volume".into(),
                format!("{}:{}", way.dir.display(), crate::egress::MOUNT),
                "--volume".into(),
                format!("{}:{}:ro", me.display(), crate::egress::BINARY),
                "--volume".into(),
                format!("{}:/etc/ssl/certs/ca-certificates.crt:ro", way.bundle.display()),
                // OpenSSL's default file, which Debian links to the bundle.
                "--volume".into(),
                format!("{}:/usr/lib/ssl/cert.pem:ro", way.bundle.display()),
            ]);
            for name in &way.names {
                args.extend(["--add-host".into(), format!("{name}:127.0.0.1")]);
            }
        }
        args.extend([self.image.clone(), "sleep".into(), "infinity".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&args, None).await?;
        drop(gate);
        if shape.egress.is_some()
            && let Err(e) = self.start_forwarder(&name).await
        {
            // A sandbox that cannot get out as its rules say is not made at all.
            let _ = self.remove(id).await;
            return Err(e);
        }
        Ok(())
    }

    /// Starts a container for `id` shaped by a pod's spec; its docker ID.
    pub async fn create_pod(&self, id: &str, shape: &PodContainer) -> Result<String, String> {
        let gate = self.closed.read().await;
        if *gate {
            return Err("the fake is shutting down".into());
        }
        let label = format!("{LABEL}={}", std::process::id());
        let args = shape.args(&format!("plimsoll-fake-{id}"), &label, &self.image);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = docker(&args, None).await?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// Whether `id`'s container runs, and how it ended if not.
    pub async fn state(&self, id: &str) -> Result<ContainerState, String> {
        let format = "{{.State.Running}} {{.State.ExitCode}} {{.State.Error}}";
        let out = docker(&["inspect", "--format", format, &format!("plimsoll-fake-{id}")], None).await?;
        let out = String::from_utf8_lossy(&out);
        let mut words = out.trim().splitn(3, ' ');
        Ok(ContainerState {
            running: words.next() == Some("true"),
            exit_code: words.next().and_then(|c| c.parse().ok()).unwrap_or(-1),
            error: words.next().unwrap_or_default().to_string(),
        })
    }

    /// The last `lines` lines `id`'s container wrote, stdout and stderr.
    pub async fn logs(&self, id: &str, lines: u32) -> String {
        let name = format!("plimsoll-fake-{id}");
        let out = Command::new("docker")
            .args(["logs", "--tail", &lines.to_string(), &name])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await;
        match out {
            Ok(o) => format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)),
            Err(e) => format!("docker logs: {e}"),
        }
    }

    /// Runs `argv` in `id`'s container as its own user with `input` as its
    /// whole standard input; its standard output. Fails when it cannot run,
    /// exits other than 0, or outlasts `deadline` (then it is killed).
    pub async fn pipe(&self, id: &str, argv: &[&str], input: Bytes, deadline: Duration) -> Result<Vec<u8>, String> {
        let name = format!("plimsoll-fake-{id}");
        let mut child = Command::new("docker")
            .args(["exec", "-i", &name])
            .args(argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("docker exec: {e}"))?;
        if let Some(mut pipe) = child.stdin.take() {
            // Written alongside the read: a large request must not wait on a
            // full output pipe.
            tokio::spawn(async move {
                let _ = pipe.write_all(&input).await;
            });
        }
        let out = tokio::time::timeout(deadline, child.wait_with_output())
            .await
            .map_err(|_| format!("no answer within {} s", deadline.as_secs()))?
            .map_err(|e| format!("docker exec: {e}"))?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(format!("exited {}: {}", out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    /// Starts `argv` in sandbox `id`'s container with its input and output
    /// piped to the caller, for a connection carried as long as it lasts.
    pub fn attach(&self, id: &str, argv: &[&str]) -> Result<tokio::process::Child, String> {
        Command::new("docker")
            .args(["exec", "-i", &format!("plimsoll-fake-{id}")])
            .args(argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("docker exec: {e}"))
    }

    /// Freezes every process of sandbox `id` (`docker pause`): memory and files kept.
    pub async fn pause(&self, id: &str) -> Result<(), String> {
        docker(&["pause", &format!("plimsoll-fake-{id}")], None).await.map(|_| ())
    }

    /// Thaws what [`Backing::pause`] froze.
    pub async fn unpause(&self, id: &str) -> Result<(), String> {
        docker(&["unpause", &format!("plimsoll-fake-{id}")], None).await.map(|_| ())
    }

    /// Starts the egress forwarder in container `name` as root, so nothing of
    /// the guest's can stop it, and returns once it listens (127.0.0.1:443 in
    /// `/proc/net/tcp`, state LISTEN): the guest's first connection finds it.
    async fn start_forwarder(&self, name: &str) -> Result<(), String> {
        let socket = format!("{}/{}", crate::egress::MOUNT, crate::egress::SOCKET);
        let forward =
            ["exec", "-d", "-u", "0", name, crate::egress::BINARY, "forward", crate::egress::FORWARD_FROM, &socket];
        docker(&forward, None).await?;
        let listening = || async {
            let tcp = docker(&["exec", name, "cat", "/proc/net/tcp"], None).await.unwrap_or_default();
            String::from_utf8_lossy(&tcp).lines().any(|l| l.contains(" 0100007F:01BB ") && l.contains(" 0A "))
        };
        // A loaded machine (the suites run many sandboxes at once) is slow to exec.
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !listening().await {
            if std::time::Instant::now() > give_up {
                return Err("the sandbox's egress forwarder did not start listening within 30 s".into());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Removes sandbox `id`'s container: `Ok(false)` when there was none.
    pub async fn remove(&self, id: &str) -> Result<bool, String> {
        match docker(&["rm", "-f", &format!("plimsoll-fake-{id}")], None).await {
            Ok(_) => Ok(true),
            Err(e) if e.contains("No such container") => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The image's content ID (`sha256:` and hex), which also checks it is here.
    pub async fn image_id(&self) -> Result<String, String> {
        let out = docker(&["image", "inspect", "--format", "{{.Id}}", &self.image], None).await?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// The docker daemon's version.
    pub async fn docker_version(&self) -> Result<String, String> {
        let out = docker(&["version", "--format", "{{.Server.Version}}"], None).await?;
        Ok(String::from_utf8_lossy(&out).trim().to_string())
    }

    /// Removes every container this fake made, once any being made is up,
    /// and refuses to make more.
    pub async fn remove_all(&self) {
        *self.closed.write().await = true;
        let filter = format!("label={LABEL}={}", std::process::id());
        if let Ok(out) = docker(&["ps", "-aq", "--filter", &filter], None).await {
            for id in String::from_utf8_lossy(&out).split_whitespace() {
                let _ = docker(&["rm", "-f", id], None).await;
            }
        }
    }

    /// `docker exec` as the guest in `cwd`, with `HOME`, `PATH` and `env`, up to
    /// the container's name: the command follows.
    fn user_exec(&self, id: &str, cwd: &str, env: &[(String, String)]) -> Vec<String> {
        self.exec_as(&format!("{GUEST_UID}:{GUEST_UID}"), id, cwd, env)
    }

    /// As [`Backing::user_exec`], as `user`.
    fn exec_as(&self, user: &str, id: &str, cwd: &str, env: &[(String, String)]) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            "exec".into(),
            "-i".into(),
            "-u".into(),
            user.into(),
            "-w".into(),
            cwd.into(),
            "-e".into(),
            "HOME=/home/user".into(),
            "-e".into(),
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
        ];
        for (k, v) in env {
            argv.extend(["-e".into(), format!("{k}={v}")]);
        }
        argv.push(format!("plimsoll-fake-{id}"));
        argv
    }

    /// Writes a file as the guest, making its directories.
    pub async fn write(&self, id: &str, path: &str, bytes: &[u8]) -> Result<(), String> {
        let mut args = self.user_exec(id, "/", &[]);
        args.extend(["sh".into(), "-c".into(), "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"".into(), "sh".into()]);
        args.push(path.into());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&args, Some(bytes)).await.map(|_| ())
    }

    /// Reads a file as the guest: `Ok(None)` when it is missing, `Err` for a directory.
    pub async fn read(&self, id: &str, path: &str) -> Result<Option<Vec<u8>>, String> {
        let mut args = self.user_exec(id, "/", &[]);
        let script = "if [ -d \"$1\" ]; then exit 45; fi; if [ ! -f \"$1\" ]; then exit 44; fi; cat \"$1\"";
        args.extend(["sh".into(), "-c".into(), script.into(), "sh".into(), path.into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match docker(&args, None).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.contains("exited 44") => Ok(None),
            Err(e) if e.contains("exited 45") => Err(format!("path '{path}' is a directory")),
            Err(e) => Err(e),
        }
    }

    /// Where `path` really leads in sandbox `id` (links resolved), if it exists.
    pub async fn resolve(&self, id: &str, path: &str) -> Option<String> {
        let mut args = self.user_exec(id, "/", &[]);
        args.extend(["realpath".into(), "-e".into(), "--".into(), path.into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = docker(&args, None).await.ok()?;
        Some(String::from_utf8_lossy(&out).trim_end_matches('\n').to_string())
    }

    /// Runs `process` as the guest in sandbox `id`; its output and end go to
    /// `out`. When its deadline passes first, every guest process is killed and
    /// `Ok(false)` returned.
    pub async fn run(&self, id: &str, process: Process, out: tokio::sync::mpsc::Sender<Chunk>) -> Result<bool, String> {
        let mut env = process.env.clone();
        if let Some(m) = &process.marker {
            env.push((MARKER.into(), m.clone()));
        }
        let user = if process.supervisor { "0".to_string() } else { format!("{GUEST_UID}:{GUEST_UID}") };
        let mut argv = self.exec_as(&user, id, &process.cwd, &env);
        argv.extend(process.argv.iter().cloned());
        let piped = process.stdin.is_some() || process.input.is_some();
        let mut child = Command::new("docker")
            .args(&argv)
            .stdin(if piped { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("docker exec: {e}"))?;
        match (process.input, process.stdin, child.stdin.take()) {
            (Some(mut input), _, Some(mut pipe)) => {
                tokio::spawn(async move {
                    while let Some(bytes) = input.recv().await {
                        if pipe.write_all(&bytes).await.is_err() {
                            break;
                        }
                    }
                });
            }
            (None, Some(all), Some(mut pipe)) => {
                // All of it, then end of file; a process that stops reading early
                // just closes the pipe on the rest.
                tokio::spawn(async move {
                    let _ = pipe.write_all(&all).await;
                });
            }
            _ => {}
        }
        let (Some(mut so), Some(mut se)) = (child.stdout.take(), child.stderr.take()) else {
            return Err("docker exec gave no pipes".into());
        };
        let o = out.clone();
        let pump_out = tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            while let Ok(n) = so.read(&mut buf).await {
                if n == 0 || o.send(Chunk::Stdout(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                    break;
                }
            }
        });
        let e = out.clone();
        let pump_err = tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            while let Ok(n) = se.read(&mut buf).await {
                if n == 0 || e.send(Chunk::Stderr(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                    break;
                }
            }
        });
        let waited = match process.deadline {
            Some(d) => tokio::time::timeout(d, child.wait()).await.ok(),
            None => Some(child.wait().await),
        };
        match waited {
            Some(status) => {
                let _ = pump_out.await;
                let _ = pump_err.await;
                let status = status.map_err(|e| format!("docker exec: {e}"))?;
                let _ = out.send(Chunk::Exit(status.code())).await;
                Ok(true)
            }
            None => {
                match &process.marker {
                    Some(m) => self.kill_marked(id, m).await,
                    None => self.kill_guest(id).await,
                }
                let _ = child.kill().await;
                Ok(false)
            }
        }
    }

    /// SIGKILLs the processes in sandbox `id` that carry `marker` in their
    /// environment: one process and those of its descendants that kept it.
    pub async fn kill_marked(&self, id: &str, marker: &str) {
        let name = format!("plimsoll-fake-{id}");
        let needle = format!("{MARKER}={marker}");
        let script = r#"for e in /proc/[0-9]*/environ; do if tr '\0' '\n' < "$e" 2>/dev/null | grep -qxF "$1"; then p=${e#/proc/}; kill -9 "${p%/environ}" 2>/dev/null; fi; done; true"#;
        let _ = docker(&["exec", "-u", "0", &name, "sh", "-c", script, "sh", &needle], None).await;
    }

    /// Kills every process of the guest in sandbox `id`.
    pub async fn kill_guest(&self, id: &str) {
        let name = format!("plimsoll-fake-{id}");
        let uid = format!("{GUEST_UID}:{GUEST_UID}");
        let _ = docker(&["exec", "-u", &uid, &name, "sh", "-c", "kill -9 -1"], None).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_container_is_run_as_its_spec_says() {
        let pod = PodContainer {
            runtime: "runsc".into(),
            hostname: "p".into(),
            read_only: true,
            user: "0".into(),
            cap_drop_all: true,
            cap_add: vec!["SETUID".into(), "SETGID".into()],
            no_new_privileges: true,
            memory_bytes: 512 << 20,
            cpus: Some("1".into()),
            tmpfs: vec![Tmpfs {
                target: "/tmp".into(),
                size_bytes: Some(64 << 20),
                mode: Some(0o1777),
                options: vec!["exec".into(), "nosuid".into(), "nodev".into()],
            }],
            binds: vec![],
            argv: vec!["/opt/plimsoll/plimsoll-agent".into(), "sandboxd".into()],
            pids: 256,
        };
        let args = pod.args("plimsoll-fake-k8s-1-p", "dev.plimsoll.fake=1", "sha256:ab");
        let expected = "run -d --name plimsoll-fake-k8s-1-p --label dev.plimsoll.fake=1 --network none --runtime runsc \
             --hostname p --read-only --tmpfs /tmp:rw,size=67108864,mode=1777,exec,nosuid,nodev --user 0 --cap-drop ALL \
             --cap-add SETUID --cap-add SETGID --security-opt no-new-privileges --memory 536870912b \
             --memory-swap 536870912b --cpus 1 --pids-limit 256 sha256:ab /opt/plimsoll/plimsoll-agent sandboxd";
        assert_eq!(args.join(" "), expected);
        let loose = PodContainer {
            read_only: false,
            binds: vec![("/d".into(), "/var/run/secrets/kubernetes.io/serviceaccount".into())],
            ..pod
        };
        let args = loose.args("n", "l", "i").join(" ");
        assert!(!args.contains("--read-only"));
        assert!(args.contains("--volume /d:/var/run/secrets/kubernetes.io/serviceaccount:ro i "), "{args}");
    }
}
