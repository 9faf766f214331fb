//! `POST /v1/exec`: the request, running it as the guest, and the answer; and
//! the children sandboxd waits for, kept apart from the orphans it reaps as
//! PID 1.

use std::collections::HashSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use super::http::Refusal;
use crate::pipes::{self, Read};

/// The longest an exec may run: a day.
pub const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

/// The most of each of stdout and stderr kept; the rest is read and dropped.
/// Sixteen execs at once each keep both: the cap bounds what a guest can make
/// sandboxd hold.
pub const MAX_STREAM: usize = 16 << 20;

/// The environment every exec starts from; the request's `env` is added to it.
pub const BASE_ENV: [(&str, &str); 3] =
    [("HOME", "/tmp"), ("PATH", "/usr/local/bin:/usr/bin:/bin"), ("LANG", "C.UTF-8")];

/// How often a running exec looks whether its process has ended.
const TICK: Duration = Duration::from_millis(10);

/// How long, once the process has ended and its group was killed, its output
/// pipes may take to close (the killed processes' exits) before they are let go.
const DRAIN_WITHIN: Duration = Duration::from_millis(200);

/// How long the stray reaper sleeps when it has no child at all, or only an
/// exec's ended process that its handler is about to collect.
const STRAY_IDLE: Duration = Duration::from_millis(100);
const OURS_PENDING: Duration = Duration::from_millis(5);

/// Who an exec runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAs {
    /// The guest: groups dropped, then the gid, then the uid set, in the child
    /// before exec. The only choice outside tests.
    Guest { uid: u32, gid: u32 },
    /// Whoever runs the tests (no switch), so the server can be tested unprivileged.
    #[cfg(test)]
    Caller,
}

/// The body of `POST /v1/exec`, as sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Body {
    argv: Vec<String>,
    cwd: String,
    #[serde(default)]
    env: Option<Vec<(String, String)>>,
    #[serde(default)]
    stdin: Option<String>,
    /// Any number, so a negative or fractional one is refused by name.
    timeout_ms: serde_json::Number,
}

/// A checked exec request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub argv: Vec<String>,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    /// None: the process reads `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    pub timeout: Duration,
}

impl ExecRequest {
    /// Parses and checks a request body.
    ///
    /// # Errors
    ///
    /// 400 naming what is wrong: not the JSON shape, an empty `argv`, a
    /// relative `cwd`, `timeoutMs` outside 1..=86400000, `stdin` not base64, an
    /// `env` name that is empty or holds `=`, or a NUL anywhere.
    pub fn parse(body: &[u8]) -> Result<ExecRequest, Refusal> {
        let bad = |m: String| Refusal::new(400, m);
        let b: Body = serde_json::from_slice(body).map_err(|e| bad(format!("the body is not an exec request: {e}")))?;
        if b.argv.is_empty() {
            return Err(bad("argv is empty".into()));
        }
        if b.argv[0].is_empty() {
            return Err(bad("argv[0] is empty".into()));
        }
        if let Some(i) = b.argv.iter().position(|a| a.contains('\0')) {
            return Err(bad(format!("argv[{i}] holds a NUL byte")));
        }
        if !b.cwd.starts_with('/') || b.cwd.contains('\0') {
            return Err(bad(format!("cwd {:?} is not an absolute path", b.cwd)));
        }
        let timeout_ms = b.timeout_ms.as_u64().filter(|ms| (1..=MAX_TIMEOUT_MS).contains(ms));
        let Some(timeout_ms) = timeout_ms else {
            return Err(bad(format!("timeoutMs {} is not a whole number in 1..={MAX_TIMEOUT_MS}", b.timeout_ms)));
        };
        let env = b.env.unwrap_or_default();
        for (k, v) in &env {
            if k.is_empty() || k.contains(['=', '\0']) {
                return Err(bad(format!("env name {k:?} is empty or holds '=' or NUL")));
            }
            if v.contains('\0') {
                return Err(bad(format!("env {k:?} holds a NUL byte")));
            }
        }
        let stdin = match b.stdin {
            None => None,
            Some(s) => Some(BASE64.decode(s).map_err(|e| bad(format!("stdin is not base64: {e}")))?),
        };
        Ok(ExecRequest { argv: b.argv, cwd: b.cwd, env, stdin, timeout: Duration::from_millis(timeout_ms) })
    }
}

/// The answer to an exec that ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecAnswer {
    /// The exit code, when the process exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// The kept stdout, base64.
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub timed_out: bool,
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Code(i32),
    Signal(i32),
    /// Its status was lost (someone else collected it); never expected.
    Unknown,
}

impl Ended {
    fn from_wait_status(status: i32) -> Ended {
        if libc::WIFEXITED(status) {
            Ended::Code(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            Ended::Signal(libc::WTERMSIG(status))
        } else {
            Ended::Unknown
        }
    }
}

/// The exec children sandboxd has started and not yet collected. Each exec's
/// handler collects its own child; the stray reaper (PID 1's duty) collects
/// every other child that ends and never one of these, so no handler loses
/// its child's status.
#[derive(Debug, Default)]
pub struct Children {
    ours: Mutex<HashSet<i32>>,
}

impl Children {
    fn ours(&self) -> MutexGuard<'_, HashSet<i32>> {
        // The set stays consistent whatever a panicking holder was doing.
        self.ours.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts `cmd` and counts its child as ours before the stray reaper can
    /// look at it (it looks under the same lock).
    fn spawn(&self, cmd: &mut Command) -> io::Result<(i32, Child)> {
        let mut ours = self.ours();
        let child = cmd.spawn()?;
        // Pids are positive i32s on Linux.
        let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        ours.insert(pid);
        Ok((pid, child))
    }

    /// Collects `pid` if it has ended, first killing what is left of its
    /// process group as `run_as`: its zombie still holds the group's id, so the
    /// kill cannot reach anyone else's group.
    fn try_reap(&self, pid: i32, run_as: RunAs) -> Option<Ended> {
        // SAFETY: an all-zero siginfo_t is a valid value of a plain C struct.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid out-pointer; WNOWAIT leaves the child to collect below.
        let r = unsafe {
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT)
        };
        if r < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                return None;
            }
            self.ours().remove(&pid);
            return Some(Ended::Unknown);
        }
        // SAFETY: waitid filled `info` (or left it zeroed, si_pid 0, when nothing ended).
        if unsafe { info.si_pid() } == 0 {
            return None;
        }
        Some(self.collect(pid, run_as))
    }

    /// Kills `pid`'s group as `run_as` and collects `pid`, waiting for it to end.
    fn collect(&self, pid: i32, run_as: RunAs) -> Ended {
        // Most execs leave nothing running: then no killer need be forked.
        if group_is_live(pid) {
            self.kill_group(pid, run_as);
        }
        let ended = match wait(pid) {
            Some(status) => Ended::from_wait_status(status),
            None => Ended::Unknown,
        };
        self.ours().remove(&pid);
        ended
    }

    /// Sends SIGKILL to the process group `pgid`, whose leader is not yet
    /// collected, as `run_as`.
    ///
    /// sandboxd is root with no capability but CAP_SETUID and CAP_SETGID, so it
    /// may not signal another uid's processes (that takes CAP_KILL): a child of
    /// its own takes the guest's ids, sends the kill, and exits. The child
    /// counts as ours while it lives, so the stray reaper cannot collect it and
    /// free its pid for a later exec before it is waited for here.
    fn kill_group(&self, pgid: i32, run_as: RunAs) {
        let (uid, gid) = match run_as {
            RunAs::Guest { uid, gid } => (uid, gid),
            #[cfg(test)]
            RunAs::Caller => {
                // SAFETY: killpg has no memory preconditions.
                unsafe { libc::killpg(pgid, libc::SIGKILL) };
                return;
            }
        };
        let mut ours = self.ours();
        // SAFETY: the child runs only raw system calls and _exit, all
        // async-signal-safe, as a fork of a threaded process must.
        let killer = unsafe { libc::fork() };
        if killer == 0 {
            // SAFETY: raw system calls on plain integers, in the forked child;
            // the raw setgid/setuid change only this (the child's one) thread,
            // without the C library's bookkeeping for the threads it no longer has.
            unsafe {
                let as_guest = libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) == 0
                    && libc::syscall(libc::SYS_setgid, gid) == 0
                    && libc::syscall(libc::SYS_setuid, uid) == 0;
                libc::_exit(if as_guest && libc::kill(-pgid, libc::SIGKILL) == 0 { 0 } else { 1 });
            }
        }
        if killer < 0 {
            return;
        }
        ours.insert(killer);
        drop(ours);
        wait(killer);
        self.ours().remove(&killer);
    }

    /// Reaps every child that ends and is not an exec's, forever: sandboxd is
    /// the pod's PID 1, so what the guest's processes leave behind becomes its.
    pub fn reap_strays(&self) -> ! {
        loop {
            // SAFETY: an all-zero siginfo_t is a valid value of a plain C struct.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: `info` is a valid out-pointer; WNOWAIT only looks.
            let r = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
            if r < 0 {
                if io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                    // ECHILD: no child yet.
                    std::thread::sleep(STRAY_IDLE);
                }
                continue;
            }
            // SAFETY: waitid succeeded without WNOHANG, so it filled `info`.
            let pid = unsafe { info.si_pid() };
            let ours = self.ours();
            if ours.contains(&pid) {
                drop(ours);
                // Its handler collects it within a tick.
                std::thread::sleep(OURS_PENDING);
                continue;
            }
            let mut status = 0;
            // SAFETY: `status` is a valid out-pointer; the lock keeps a new exec
            // from taking this pid before it is collected.
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            drop(ours);
        }
    }
}

/// Whether the process group `pgid` may have a member that is not a zombie.
/// Under gVisor's ptrace platform every process costs the sandbox host
/// threads against the pod's pids limit, so the killer is forked only when
/// there is something to kill. A process whose stat cannot be read counts as
/// a live member.
fn group_is_live(pgid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else { return true };
    for entry in dir {
        let Ok(entry) = entry else { return true };
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let stat = match std::fs::read(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat,
            // Gone since it was listed.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(_) => return true,
        };
        // The command name may hold anything: the fields after it are state, ppid, pgrp.
        let Some(close) = stat.iter().rposition(|&b| b == b')') else { return true };
        let rest = String::from_utf8_lossy(stat.get(close + 1..).unwrap_or_default());
        let mut fields = rest.split_ascii_whitespace();
        let (state, pgrp) = (fields.next(), fields.nth(1).and_then(|g| g.parse::<i32>().ok()));
        match (state, pgrp) {
            (Some("Z" | "X"), Some(_)) => {}
            (Some(_), Some(g)) if g != pgid => {}
            _ => return true,
        }
    }
    false
}

/// Waits for the child `pid` to end and collects it; its wait status, or
/// None when it is not (or no longer) a child to wait for.
fn wait(pid: i32) -> Option<i32> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Some(status);
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
}

/// An exec's child until it is collected; dropped early (a panic), it kills
/// the group and collects the child, so no zombie is left for the stray
/// reaper to wait on forever.
struct Running<'a> {
    children: &'a Children,
    pid: i32,
    run_as: RunAs,
    ended: Option<Ended>,
}

impl Running<'_> {
    fn poll(&mut self) -> Option<Ended> {
        if self.ended.is_none() {
            self.ended = self.children.try_reap(self.pid, self.run_as);
        }
        self.ended
    }

    /// Kills the group at the timeout; the child is not yet collected.
    fn kill(&self) {
        if self.ended.is_none() {
            self.children.kill_group(self.pid, self.run_as);
        }
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.ended.is_none() {
            self.children.collect(self.pid, self.run_as);
        }
    }
}

/// One output stream's kept bytes.
#[derive(Debug, Default)]
struct Capture {
    kept: Vec<u8>,
    truncated: bool,
}

impl Capture {
    fn push(&mut self, data: &[u8]) {
        let room = MAX_STREAM - self.kept.len();
        if data.len() > room {
            self.truncated = true;
        }
        self.kept.extend_from_slice(&data[..data.len().min(room)]);
    }
}

/// The command for `req`: a new session (so a new process group, its id the
/// child's pid), `run_as`'s ids, then `cwd`, entered as the guest, so a
/// directory the guest may not enter is refused.
fn command(req: &ExecRequest, run_as: RunAs) -> Result<Command, Refusal> {
    let cwd = CString::new(req.cwd.as_bytes()).map_err(|_| Refusal::new(400, "cwd holds a NUL byte"))?;
    let mut cmd = Command::new(&req.argv[0]);
    cmd.args(&req.argv[1..])
        .env_clear()
        .envs(BASE_ENV)
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .stdin(if req.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec and makes
    // only async-signal-safe system calls (setsid, setgroups, setgid, setuid,
    // chdir) on values prepared before the fork; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            match run_as {
                RunAs::Guest { uid, gid } => {
                    if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                #[cfg(test)]
                RunAs::Caller => {}
            }
            if libc::chdir(cwd.as_ptr()) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(cmd)
}

/// Runs `req` as `run_as` to its end or its timeout, and answers.
///
/// # Errors
///
/// The process could not be started: 400 when the request names what cannot
/// run (a missing program or directory, or one the guest may not use), 500
/// otherwise (no memory, no pids).
pub fn run(children: &Children, req: &ExecRequest, run_as: RunAs) -> Result<ExecAnswer, Refusal> {
    let mut cmd = command(req, run_as)?;
    let (pid, mut child) = children.spawn(&mut cmd).map_err(|e| {
        let status = match e.raw_os_error() {
            Some(libc::ENOENT | libc::EACCES | libc::ENOTDIR | libc::ENOEXEC | libc::E2BIG | libc::ELOOP) => 400,
            _ => 500,
        };
        Refusal::new(status, format!("could not start {:?} in {:?}: {e}", req.argv[0], req.cwd))
    })?;
    let deadline = Instant::now() + req.timeout;
    let mut running = Running { children, pid, run_as, ended: None };
    let mut stdin: Option<OwnedFd> = child.stdin.take().map(OwnedFd::from);
    let mut outputs: Vec<(usize, OwnedFd)> = Vec::new();
    outputs.extend(child.stdout.take().map(|f| (0, OwnedFd::from(f))));
    outputs.extend(child.stderr.take().map(|f| (1, OwnedFd::from(f))));
    // The handle neither waits nor kills when dropped; `running` collects the child.
    drop(child);
    for fd in outputs.iter().map(|(_, f)| f).chain(stdin.as_ref()) {
        pipes::nonblocking(fd).map_err(|e| Refusal::new(500, format!("making the pipes non-blocking: {e}")))?;
    }
    let input = req.stdin.as_deref().unwrap_or_default();
    let mut written = 0;
    if input.is_empty() {
        stdin = None;
    }
    let mut captures = [Capture::default(), Capture::default()];
    let mut timed_out = false;
    // Once the process has ended: how long its pipes may still take to close.
    let mut drain_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if drain_until.is_none() && running.poll().is_some() {
            // Its group is dead too: what is still in the pipes is all there is to read.
            drain_until = Some(now + DRAIN_WITHIN);
            stdin = None;
        }
        if drain_until.is_none() && now >= deadline && !timed_out {
            running.kill();
            timed_out = true;
        }
        if (outputs.is_empty() && drain_until.is_some()) || drain_until.is_some_and(|d| now >= d) {
            break;
        }
        let mut wake = now + TICK;
        if let Some(d) = drain_until {
            wake = wake.min(d);
        } else if !timed_out {
            wake = wake.min(deadline);
        }
        let mut fds: Vec<libc::pollfd> = outputs.iter().map(|(_, f)| pipes::readable(f.as_raw_fd())).collect();
        fds.extend(stdin.iter().map(|f| pipes::writable(f.as_raw_fd())));
        pipes::poll(&mut fds, Some(wake));
        if let Some(s) = &stdin
            && fds.last().is_some_and(pipes::ready)
        {
            match pipes::write_some(s.as_raw_fd(), &input[written..]) {
                Ok(n) => written += n,
                // The process closed its stdin: the rest is not wanted.
                Err(_) => written = input.len(),
            }
            if written == input.len() {
                // Closing the pipe is the end of the input.
                stdin = None;
            }
        }
        let mut ended = Vec::new();
        for (i, p) in fds.iter().enumerate().take(outputs.len()) {
            if !pipes::ready(p) {
                continue;
            }
            let (which, fd) = &outputs[i];
            loop {
                match pipes::read_some(fd.as_raw_fd()) {
                    Read::Data(d) => captures[*which].push(&d),
                    Read::Empty => break,
                    Read::Eof => {
                        ended.push(i);
                        break;
                    }
                }
            }
        }
        for i in ended.into_iter().rev() {
            outputs.remove(i);
        }
    }
    // The loop leaves only once the child was collected.
    let ended = running.poll().unwrap_or(Ended::Unknown);
    let [out, err] = captures;
    Ok(ExecAnswer {
        exit_code: if let Ended::Code(c) = ended { Some(c) } else { None },
        signal: if let Ended::Signal(s) = ended { Some(s) } else { None },
        stdout: BASE64.encode(&out.kept),
        stderr: BASE64.encode(&err.kept),
        stdout_truncated: out.truncated,
        stderr_truncated: err.truncated,
        timed_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: serde_json::Value) -> Result<ExecRequest, Refusal> {
        ExecRequest::parse(v.to_string().as_bytes())
    }

    fn refused(v: serde_json::Value) -> String {
        let r = parse(v).expect_err("refused");
        assert_eq!(r.status, 400);
        r.message
    }

    fn run_here(argv: &[&str], timeout_ms: u64) -> ExecAnswer {
        let req = ExecRequest {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            cwd: "/".into(),
            env: Vec::new(),
            stdin: None,
            timeout: Duration::from_millis(timeout_ms),
        };
        run(&Children::default(), &req, RunAs::Caller).expect("ran")
    }

    fn text(b64: &str) -> String {
        String::from_utf8(BASE64.decode(b64).expect("base64")).expect("utf-8")
    }

    #[test]
    fn a_full_request_is_parsed() {
        let req = parse(serde_json::json!({
            "argv": ["sh", "-c", "cat"], "cwd": "/tmp", "env": [["A", "1"], ["B", ""]],
            "stdin": "aGk=", "timeoutMs": 30000,
        }))
        .expect("parsed");
        assert_eq!(req.argv, ["sh", "-c", "cat"]);
        assert_eq!(req.cwd, "/tmp");
        assert_eq!(req.env, [("A".to_owned(), "1".to_owned()), ("B".to_owned(), String::new())]);
        assert_eq!(req.stdin.as_deref(), Some(&b"hi"[..]));
        assert_eq!(req.timeout, Duration::from_secs(30));
        let bare = parse(serde_json::json!({"argv": ["true"], "cwd": "/", "timeoutMs": 1})).expect("parsed");
        assert_eq!((bare.env.len(), bare.stdin), (0, None));
        let nulls = serde_json::json!({"argv": ["true"], "cwd": "/", "env": null, "stdin": null, "timeoutMs": 1});
        assert!(parse(nulls).is_ok());
    }

    #[test]
    fn bad_requests_are_refused_saying_what_is_wrong() {
        let e = ExecRequest::parse(b"{not json").expect_err("refused");
        assert_eq!(e.status, 400);
        assert!(e.message.starts_with("the body is not an exec request: "), "{}", e.message);
        assert!(refused(serde_json::json!({"argv": ["true"], "cwd": "/"})).contains("timeoutMs"));
        assert!(
            refused(serde_json::json!({"argv": "true", "cwd": "/", "timeoutMs": 1})).contains("expected a sequence")
        );
        let extra = serde_json::json!({"argv": ["true"], "cwd": "/", "timeoutMs": 1, "user": "root"});
        assert!(refused(extra).contains("user"));
        assert_eq!(refused(serde_json::json!({"argv": [], "cwd": "/", "timeoutMs": 1})), "argv is empty");
        assert_eq!(refused(serde_json::json!({"argv": [""], "cwd": "/", "timeoutMs": 1})), "argv[0] is empty");
        assert_eq!(
            refused(serde_json::json!({"argv": ["true"], "cwd": "tmp", "timeoutMs": 1})),
            "cwd \"tmp\" is not an absolute path"
        );
        assert_eq!(
            refused(serde_json::json!({"argv": ["true"], "cwd": "/", "timeoutMs": 0})),
            "timeoutMs 0 is not a whole number in 1..=86400000"
        );
        assert_eq!(
            refused(serde_json::json!({"argv": ["true"], "cwd": "/", "timeoutMs": 86_400_001})),
            "timeoutMs 86400001 is not a whole number in 1..=86400000"
        );
        for odd in [serde_json::json!(-1), serde_json::json!(1.5), serde_json::json!(1e30)] {
            let e = refused(serde_json::json!({"argv": ["true"], "cwd": "/", "timeoutMs": odd}));
            assert!(e.starts_with("timeoutMs ") && e.ends_with(" is not a whole number in 1..=86400000"), "{e}");
        }
        assert!(refused(serde_json::json!({"argv": ["true"], "cwd": "/", "timeoutMs": "1"})).contains("expected"));
        assert!(parse(serde_json::json!({"argv": ["true"], "cwd": "/", "timeoutMs": 86_400_000})).is_ok());
        assert!(
            refused(serde_json::json!({"argv": ["true"], "cwd": "/", "stdin": "!!", "timeoutMs": 1}))
                .starts_with("stdin is not base64")
        );
        for env in
            [serde_json::json!([["A=B", "1"]]), serde_json::json!([["", "1"]]), serde_json::json!([["A", "\u{0}"]])]
        {
            let e = refused(serde_json::json!({"argv": ["true"], "cwd": "/", "env": env, "timeoutMs": 1}));
            assert!(e.starts_with("env "), "{e}");
        }
        assert_eq!(
            refused(serde_json::json!({"argv": ["true", "a\u{0}"], "cwd": "/", "timeoutMs": 1})),
            "argv[1] holds a NUL byte"
        );
    }

    #[test]
    fn the_answer_has_exactly_the_spec_fields() {
        let answer = ExecAnswer {
            exit_code: None,
            signal: Some(9),
            stdout: "aGk=".into(),
            stderr: String::new(),
            stdout_truncated: true,
            stderr_truncated: false,
            timed_out: true,
        };
        assert_eq!(
            serde_json::to_value(&answer).expect("JSON"),
            serde_json::json!({
                "exitCode": null, "signal": 9, "stdout": "aGk=", "stderr": "",
                "stdoutTruncated": true, "stderrTruncated": false, "timedOut": true,
            })
        );
    }

    #[test]
    fn an_exec_gets_exactly_the_base_environment_plus_its_own_in_its_cwd() {
        let req = ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "pwd; env | sort".into()],
            cwd: "/tmp".into(),
            env: vec![("EXTRA".into(), "x y".into())],
            stdin: None,
            timeout: Duration::from_secs(10),
        };
        let a = run(&Children::default(), &req, RunAs::Caller).expect("ran");
        // sh itself adds PWD (and dash adds nothing else) to what it was given.
        let seen = text(&a.stdout);
        let lines: Vec<&str> = seen.lines().filter(|l| !l.starts_with("PWD=") && !l.starts_with("SHLVL=")).collect();
        assert_eq!(
            lines,
            ["/tmp", "EXTRA=x y", "HOME=/tmp", "LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin"],
            "{seen}"
        );
        assert_eq!((a.exit_code, a.signal, a.timed_out), (Some(0), None, false));
    }

    #[test]
    fn stdin_is_fed_and_both_streams_are_kept_apart() {
        let req = ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "tr a-z A-Z; echo err >&2; exit 7".into()],
            cwd: "/".into(),
            env: Vec::new(),
            stdin: Some(b"abc".repeat(100_000)),
            timeout: Duration::from_secs(10),
        };
        let a = run(&Children::default(), &req, RunAs::Caller).expect("ran");
        assert_eq!(text(&a.stdout), "ABC".repeat(100_000));
        assert_eq!(text(&a.stderr), "err\n");
        assert_eq!(a.exit_code, Some(7));
        // Without stdin the process reads /dev/null.
        assert_eq!(text(&run_here(&["sh", "-c", "wc -c"], 10_000).stdout).trim(), "0");
    }

    #[test]
    fn a_timeout_kills_the_whole_group() {
        let started = Instant::now();
        let a = run_here(&["sh", "-c", "sleep 30 & echo $!; sleep 30"], 300);
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert_eq!((a.exit_code, a.signal, a.timed_out), (None, Some(libc::SIGKILL), true));
        let bg: i32 = text(&a.stdout).trim().parse().expect("a pid");
        assert!(crate::procs::doomed(bg), "the background sleep was killed with its group");
    }

    #[test]
    fn what_the_process_leaves_running_is_killed_when_it_exits() {
        let started = Instant::now();
        // The background sleep holds stdout open: the answer must not wait for it.
        let a = run_here(&["sh", "-c", "sleep 30 & echo $!"], 20_000);
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert_eq!((a.exit_code, a.timed_out), (Some(0), false));
        let bg: i32 = text(&a.stdout).trim().parse().expect("a pid");
        assert!(crate::procs::doomed(bg), "the background sleep was killed");
    }

    #[test]
    fn a_group_is_live_until_only_its_zombie_leader_is_left() {
        let mut child = Command::new("sleep").arg("30").process_group(0).spawn().expect("sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        assert!(group_is_live(pid));
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        // SAFETY: an all-zero siginfo_t is a valid value; WNOWAIT leaves the zombie in place.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is a valid out-pointer.
        let r = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
        assert_eq!(r, 0);
        assert!(!group_is_live(pid), "a zombie leader alone is not live");
        child.wait().expect("reaped");
        assert!(!group_is_live(pid));
    }

    #[test]
    fn output_past_16_mib_is_dropped_and_flagged() {
        let a = run_here(&["sh", "-c", "head -c 16777300 /dev/zero; head -c 10 /dev/zero >&2"], 30_000);
        assert_eq!(BASE64.decode(&a.stdout).expect("base64").len(), MAX_STREAM);
        assert!(a.stdout_truncated);
        assert_eq!(BASE64.decode(&a.stderr).expect("base64").len(), 10);
        assert!(!a.stderr_truncated);
        assert_eq!(a.exit_code, Some(0), "the rest was read, so the writer never blocked");
    }

    #[test]
    fn a_signal_ends_an_exec_with_no_exit_code() {
        let a = run_here(&["sh", "-c", "kill -TERM $$"], 10_000);
        assert_eq!((a.exit_code, a.signal, a.timed_out), (None, Some(libc::SIGTERM), false));
    }

    #[test]
    fn a_program_or_directory_that_is_not_there_is_a_bad_request() {
        let mut req = ExecRequest {
            argv: vec!["/nonexistent/program".into()],
            cwd: "/".into(),
            env: Vec::new(),
            stdin: None,
            timeout: Duration::from_secs(10),
        };
        let children = Children::default();
        let e = run(&children, &req, RunAs::Caller).expect_err("refused");
        assert_eq!(e.status, 400);
        assert!(e.message.starts_with("could not start \"/nonexistent/program\" in \"/\": "), "{}", e.message);
        req.argv = vec!["true".into()];
        req.cwd = "/nonexistent/dir".into();
        assert_eq!(run(&children, &req, RunAs::Caller).expect_err("refused").status, 400);
        assert!(children.ours().is_empty(), "nothing is left waiting to be collected");
    }

    /// Drops CAP_KILL from this thread (capabilities are per thread, and each
    /// test has its own), as the pod has it dropped.
    fn drop_cap_kill_on_this_thread() {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        const VERSION_3: u32 = 0x2008_0522;
        const CAP_KILL: u32 = 5;
        let mut header = Header { version: VERSION_3, pid: 0 };
        let mut data = [Data::default(); 2];
        // SAFETY: capget fills two Data for version 3, which `data` has room for.
        let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
        assert_eq!(got, 0, "capget: {}", io::Error::last_os_error());
        data[0].effective &= !(1 << CAP_KILL);
        data[0].permitted &= !(1 << CAP_KILL);
        // SAFETY: as above; pid 0 is the calling thread only.
        let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
        assert_eq!(set, 0, "capset: {}", io::Error::last_os_error());
    }

    #[test]
    fn as_root_without_cap_kill_the_guest_group_is_still_killed() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: switching to the guest needs root");
            return;
        }
        drop_cap_kill_on_this_thread();
        let guest = RunAs::Guest { uid: 61000, gid: 61000 };
        let mut req = ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "sleep 30 & echo $!; sleep 30".into()],
            cwd: "/".into(),
            env: Vec::new(),
            stdin: None,
            timeout: Duration::from_millis(300),
        };
        let started = Instant::now();
        let a = run(&Children::default(), &req, guest).expect("ran");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert_eq!((a.exit_code, a.signal, a.timed_out), (None, Some(libc::SIGKILL), true));
        let bg: i32 = text(&a.stdout).trim().parse().expect("a pid");
        assert!(crate::procs::doomed(bg), "the background sleep was killed with its group");
        // And what a finished exec leaves running.
        req.argv[2] = "sleep 30 & echo $!".into();
        req.timeout = Duration::from_secs(20);
        let a = run(&Children::default(), &req, guest).expect("ran");
        assert_eq!((a.exit_code, a.timed_out), (Some(0), false));
        let bg: i32 = text(&a.stdout).trim().parse().expect("a pid");
        assert!(crate::procs::doomed(bg), "the background sleep was killed");
    }

    #[test]
    fn as_root_an_exec_runs_as_the_guest_with_no_groups() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: switching to the guest needs root");
            return;
        }
        let guest = RunAs::Guest { uid: 61000, gid: 61000 };
        let mut req = ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "id -u; id -g; id -G".into()],
            cwd: "/".into(),
            env: Vec::new(),
            stdin: None,
            timeout: Duration::from_secs(10),
        };
        let children = Children::default();
        let a = run(&children, &req, guest).expect("ran");
        assert_eq!(text(&a.stdout), "61000\n61000\n61000\n");
        // The cwd is entered as the guest: a directory only root may enter is refused.
        let dir = std::env::temp_dir().join(format!("plimsoll-sandboxd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        req.cwd = dir.to_string_lossy().into_owned();
        let e = run(&children, &req, guest).expect_err("refused");
        assert_eq!(e.status, 400);
        assert!(e.message.contains("Permission denied"), "{}", e.message);
        let _ = std::fs::remove_dir(&dir);
    }
}
