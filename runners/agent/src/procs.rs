//! Processes: the sweep that leaves only the kept interpreters, reaping the
//! orphans the agent inherits (as PID 1, or as a subreaper where a vendor's
//! process manager started it), and starting children in their own session.

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where the agent runs, which decides what its sweep may leave alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seat {
    /// The container's PID 1 (`serve`): every other process is the session's.
    Init,
    /// Started by a vendor's process manager inside the sandbox (`attach`): the
    /// manager and the agent's other ancestors, and every process the guest may
    /// not signal (another user's), are the sandbox's, not the session's.
    Hosted,
}

static SEAT: OnceLock<Seat> = OnceLock::new();
/// The processes other than the agent's that a hosted agent found at its start,
/// before anything of the caller's existed: the sandbox's own (its main process,
/// the vendor's supervisor), which no sweep touches.
static BASELINE: OnceLock<HashSet<Identity>> = OnceLock::new();
/// The work directory every child starts in, fixed at the agent's start.
static WORK_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Sets where the agent runs, once, before the first sweep. Seated
/// [`Seat::Hosted`], every process already there is taken as the sandbox's own.
pub fn seat_at(seat: Seat) {
    if SEAT.set(seat).is_ok() && seat == Seat::Hosted {
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        let _ = BASELINE.set(pids().into_iter().filter(|&p| p != me).filter_map(identity).collect());
    }
}

/// Sets the work directory, once, before the first child starts.
pub fn work_at(dir: PathBuf) {
    let _ = WORK_DIR.set(dir);
}

/// The work directory every child starts in ([`WORK`] until told).
pub fn work() -> &'static Path {
    WORK_DIR.get().map_or(Path::new(WORK), PathBuf::as_path)
}

/// Where the agent runs ([`Seat::Init`] until told).
pub fn seat() -> Seat {
    *SEAT.get().unwrap_or(&Seat::Init)
}

/// How many times the sweep looks again for processes that outlived a kill.
const SWEEP_ROUNDS: usize = 50;

/// The environment every child gets; nothing of the agent's own but [`GRANT_ENV`].
pub const ENV: [(&str, &str); 3] = [("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", "/tmp"), ("LANG", "C.UTF-8")];

/// What the host sets on a container whose session holds a grant (its broker
/// socket, token, client and routes), or a remote plugin on the agent of one
/// (the guard's URL, the client, the trust store); passed on to every child when
/// present. A snippet's own grant may name these and nothing else.
pub const GRANT_ENV: [&str; 9] = [
    "PLIMSOLL_HOST_API",
    "PLIMSOLL_HOST_TOKEN",
    "PLIMSOLL_HOST_GUARD",
    "PLIMSOLL_HOST_GUARD_TOKEN",
    "PLIMSOLL_HOST_GLOBAL",
    "PLIMSOLL_HOST_ROUTES",
    "NODE_OPTIONS",
    "NODE_EXTRA_CA_CERTS",
    "PYTHONPATH",
];

/// The work directory of a docker session container, and of an agent not told another.
pub const WORK: &str = "/work";

/// The exit status of a cell, snippet or project stopped at its deadline.
pub const EXIT_TIMEOUT: i32 = 124;

/// A process as the sweep tells it apart from a later one with the same pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub pid: i32,
    /// Start time in clock ticks since boot.
    pub start: u64,
}

/// What `/proc/PID/stat` says of a process.
struct Stat {
    /// The state letter (`R`, `S`, `T`, `Z`, ...).
    state: u8,
    /// The kernel's task flags.
    flags: u64,
    zombie: bool,
    parent: i32,
    start: u64,
}

fn stat(pid: i32) -> Option<Stat> {
    let raw = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let close = raw.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(raw.get(close + 2..)?).ok()?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let state = *fields.first()?.as_bytes().first()?;
    Some(Stat {
        state,
        flags: fields.get(6)?.parse().ok()?,
        zombie: state == b'Z',
        parent: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// The live (not zombie) process `pid` is, if any.
pub fn identity(pid: i32) -> Option<Identity> {
    stat(pid).filter(|s| !s.zombie).map(|s| Identity { pid, start: s.start })
}

fn pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// Kills every process but this one and `keep`, and reaps the zombies it was left
/// as parent of, except `children` (whose owners wait for them). Returns how many
/// processes survived every round: 0 unless something resists a SIGKILL.
///
/// Seated [`Seat::Hosted`], the agent's ancestors and the processes there at its
/// start are spared, and a process the kill is not permitted to reach (another
/// user's: the vendor's own) is not counted: only what the guest could signal,
/// and started since, is the session's.
pub fn sweep(keep: &HashSet<Identity>, children: &HashSet<i32>) -> u32 {
    // SAFETY: getpid has no preconditions.
    let me = unsafe { libc::getpid() };
    let hosted = seat() == Seat::Hosted;
    let spared = if hosted { ancestors(me) } else { HashSet::new() };
    let baseline = BASELINE.get();
    let mut left = Vec::new();
    for _ in 0..SWEEP_ROUNDS {
        left.clear();
        for pid in pids() {
            if pid == me || pid == 1 || spared.contains(&pid) {
                continue;
            }
            let Some(s) = stat(pid) else {
                // Unreadable but listed (gVisor can fail a read, and even a lookup of
                // /proc/PID, mid-exec): not one of ours to keep, so it is sent the kill
                // too; only the kill's ESRCH says it is gone.
                if !children.contains(&pid) {
                    left.push(pid);
                }
                continue;
            };
            if s.zombie {
                if s.parent == me && !children.contains(&pid) {
                    reap(pid);
                }
                continue;
            }
            let id = Identity { pid, start: s.start };
            if keep.contains(&id) || baseline.is_some_and(|b| b.contains(&id)) {
                continue;
            }
            left.push(pid);
        }
        // SAFETY: kill has no memory preconditions; a pid gone since is ESRCH.
        left.retain(|&pid| unsafe { libc::kill(pid, libc::SIGKILL) } == 0 || !(gone_since() || (hosted && denied())));
        if left.is_empty() {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    u32::try_from(left.len()).unwrap_or(u32::MAX)
}

/// Whether the last failed call's error was ESRCH: no such process.
fn gone_since() -> bool {
    std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Whether the last failed call's error was EPERM: another user's process.
fn denied() -> bool {
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// `pid`'s parent, its parent's parent, and so on up to (not including) PID 0.
fn ancestors(pid: i32) -> HashSet<i32> {
    let mut seen = HashSet::new();
    let mut at = stat(pid).map_or(0, |s| s.parent);
    while at > 0 && seen.insert(at) {
        at = stat(at).map_or(0, |s| s.parent);
    }
    seen
}

/// `pid` and its ancestors, each as its identity now.
pub fn lineage(pid: i32) -> HashSet<Identity> {
    let mut line = ancestors(pid);
    line.insert(pid);
    line.into_iter().filter_map(identity).collect()
}

/// Makes the agent the reaper of every orphan its descendants leave, as PID 1
/// is in a container: a detached child cannot slip out of its sweep's reach by
/// being reparented to the vendor's init.
pub fn subreaper() -> io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes plain integers.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The kernel's flag on a task that has begun to exit (`PF_EXITING`).
const PF_EXITING: u64 = 0x4;
/// SIGKILL's bit in `/proc/PID/status` signal masks.
const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);

/// Whether `pid` is gone, a zombie, exiting, or has a SIGKILL pending: a kill sent
/// before now will end it, however long its exit takes (a large process's can
/// take milliseconds, longer than the gap between two calls).
pub fn doomed(pid: i32) -> bool {
    let Some(s) = stat(pid) else { return true };
    if s.zombie || s.state == b'X' || s.flags & PF_EXITING != 0 {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return true };
    status.lines().any(|l| {
        let mask = l.strip_prefix("SigPnd:").or_else(|| l.strip_prefix("ShdPnd:"));
        mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok()).is_some_and(|m| m & SIGKILL_BIT != 0)
    })
}

/// How long [`freeze`] waits for the kernel to stop a group.
const FREEZE_WITHIN: Duration = Duration::from_millis(200);

/// Stops each process group led by `leaders` (SIGSTOP) and waits, briefly, until
/// each leader shows as stopped: while a call runs, only that call's code runs.
pub fn freeze(leaders: &[i32]) {
    for &pid in leaders {
        // SAFETY: killpg has no memory preconditions.
        unsafe { libc::killpg(pid, libc::SIGSTOP) };
    }
    let give_up = Instant::now() + FREEZE_WITHIN;
    for &pid in leaders {
        while stat(pid).is_some_and(|s| !matches!(s.state, b'T' | b't' | b'Z' | b'X')) && Instant::now() < give_up {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Resumes the groups [`freeze`] stopped.
pub fn thaw(leaders: &[i32]) {
    for &pid in leaders {
        // SAFETY: killpg has no memory preconditions.
        unsafe { libc::killpg(pid, libc::SIGCONT) };
    }
}

fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer for the call.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
}

/// Kills a child's whole process group (it leads its own session) and waits for it.
pub fn kill_group(child: &mut Child) -> Option<i32> {
    let pid = i32::try_from(child.id()).unwrap_or(0);
    if pid > 0 {
        // SAFETY: killpg has no memory preconditions.
        unsafe { libc::killpg(pid, libc::SIGKILL) };
    }
    child.wait().ok().map(exit_status)
}

/// A shell-style exit status: the code, or 128 plus the signal that ended it.
pub fn exit_status(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// Starts `argv` in [`work`] with [`ENV`], in a session of its own (so its group
/// can be killed whole), with piped stdin and stdout, and `stderr`. With `done`,
/// that descriptor becomes the child's fd 3.
pub fn spawn(
    argv: &[&str],
    stderr: Stdio,
    done: Option<&OwnedFd>,
    extra: &BTreeMap<String, String>,
) -> io::Result<Child> {
    let (program, args) = argv.split_first().ok_or_else(|| io::Error::other("an empty command"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(work())
        .env_clear()
        .envs(ENV)
        .envs(GRANT_ENV.iter().filter_map(|k| std::env::var(k).ok().map(|v| (*k, v))))
        .envs(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    let done: Option<RawFd> = done.map(AsRawFd::as_raw_fd);
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (setsid, dup2, fcntl) on descriptors it owns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = done {
                // dup2 onto itself would keep close-on-exec: clear it instead.
                let ok = if fd == 3 { libc::fcntl(3, libc::F_SETFD, 0) } else { libc::dup2(fd, 3) };
                if ok < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Waits for `child` until `deadline`; None when it is still running then.
pub fn wait_until(child: &mut Child, deadline: Instant) -> Option<i32> {
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(exit_status(s));
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Marks this process non-dumpable: a process of the same uid can then read
/// neither its memory nor its descriptors (`/proc/1/fd/*` is root's).
pub fn undumpable() -> io::Result<()> {
    // SAFETY: PR_SET_DUMPABLE takes plain integers.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_has_an_identity_and_a_reaped_one_has_none() {
        let mut child = Command::new("sleep").arg("30").spawn().expect("sleep");
        let pid = i32::try_from(child.id()).expect("pid");
        let id = identity(pid).expect("a live child");
        assert_eq!(id.pid, pid);
        // SAFETY: getpid has no preconditions.
        assert_eq!(identity(unsafe { libc::getpid() }).map(|i| i.pid), Some(unsafe { libc::getpid() }));
        child.kill().expect("kill");
        child.wait().expect("wait");
        assert_eq!(identity(pid), None);
    }

    #[test]
    fn a_process_has_its_parents_as_ancestors_and_not_itself() {
        // SAFETY: getpid and getppid have no preconditions.
        let (me, parent) = unsafe { (libc::getpid(), libc::getppid()) };
        let up = ancestors(me);
        assert!(up.contains(&parent), "{up:?} lacks the parent {parent}");
        assert!(!up.contains(&me) && !up.contains(&0));
        let mut child = spawn_here(&["sleep", "30"]);
        let pid = i32::try_from(child.id()).expect("pid");
        let child_up = ancestors(pid);
        assert!(child_up.contains(&me) && child_up.is_superset(&up));
        kill_group(&mut child);
    }

    #[test]
    fn a_group_kill_reports_the_signal_as_a_shell_does() {
        let mut child = spawn_here(&["sleep", "30"]);
        assert_eq!(kill_group(&mut child), Some(137));
        let mut quick = spawn_here(&["sh", "-c", "exit 3"]);
        assert_eq!(wait_until(&mut quick, Instant::now() + Duration::from_secs(10)), Some(3));
    }

    #[test]
    fn a_frozen_group_is_stopped_until_thawed() {
        let mut child = spawn_here(&["sleep", "30"]);
        let pid = i32::try_from(child.id()).expect("pid");
        freeze(&[pid]);
        assert_eq!(stat(pid).map(|s| s.state), Some(b'T'));
        thaw(&[pid]);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(stat(pid).map(|s| s.state), Some(b'S'));
        kill_group(&mut child);
    }

    #[test]
    fn a_stopped_process_sent_a_kill_is_doomed_before_it_is_gone() {
        let mut child = spawn_here(&["sleep", "30"]);
        let pid = i32::try_from(child.id()).expect("pid");
        assert!(!doomed(pid));
        freeze(&[pid]);
        assert!(!doomed(pid), "stopped is not doomed");
        // SAFETY: kill has no memory preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        assert!(doomed(pid), "killed, whether or not it has exited yet");
        child.wait().expect("wait");
        assert!(doomed(pid), "reaped");
    }

    fn spawn_here(argv: &[&str]) -> Child {
        let mut cmd = Command::new(argv[0]);
        cmd.args(&argv[1..]).process_group(0);
        cmd.spawn().expect("spawn")
    }
}
