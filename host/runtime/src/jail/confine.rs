//! The worker's walls: what the daemon does between fork and exec, and what the
//! worker does to itself once its engine is loaded.

use std::collections::BTreeMap;
use std::ffi::CStr;
use std::io;
use std::path::Path;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule, TargetArch,
};

/// The user the worker is inside its own user namespace: not root there either.
const INNER_ID: u32 = 1000;

/// What the daemon prepares before forking a worker, so the child does nothing but
/// system calls between fork and exec (no allocation there): the id map lines.
#[derive(Debug)]
pub struct Confinement {
    uid_line: Vec<u8>,
    gid_line: Vec<u8>,
}

impl Default for Confinement {
    fn default() -> Confinement {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Confinement {
            uid_line: format!("{INNER_ID} {uid} 1\n").into_bytes(),
            gid_line: format!("{INNER_ID} {gid} 1\n").into_bytes(),
        }
    }
}

/// Writes `bytes` to the file at `path`; only system calls.
fn write_file(path: &CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a valid C string; the descriptor is closed before returning.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `bytes` is valid for its length; `fd` is ours.
    let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    let err = io::Error::last_os_error();
    // SAFETY: `fd` is ours to close.
    unsafe { libc::close(fd) };
    if n < 0 { Err(err) } else { Ok(()) }
}

impl Confinement {
    /// Runs in the child between fork and exec: no new privileges, then new user,
    /// mount, network, IPC and UTS namespaces with the daemon's user mapped to an
    /// unprivileged inner one. Where the machine refuses a user namespace, the other
    /// namespaces alone (they need the daemon's privilege), else none: the worker
    /// reports which it got.
    ///
    /// # Errors
    ///
    /// `prctl` failed: the worker does not start.
    pub fn in_child(&self) -> io::Result<()> {
        // SAFETY: prctl with these arguments touches no memory.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Every descriptor past stderr closes at exec, whoever opened it without
        // close-on-exec (a jobserver pipe, a caller's leftovers). Linux 5.11 and later;
        // older kernels keep what std already marked.
        // SAFETY: close_range takes plain integers and touches no memory.
        let _ = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
        let others = libc::CLONE_NEWNS | libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
        // SAFETY: unshare touches no memory; the child is single-threaded here.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | others) } == 0 {
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &self.uid_line)?;
            write_file(c"/proc/self/gid_map", &self.gid_line)?;
            return Ok(());
        }
        // SAFETY: as above.
        let _ = unsafe { libc::unshare(others) };
        Ok(())
    }
}

/// The namespaces this process is in that its parent's are not, as the worker
/// sees them: a user namespace maps a single id; a network namespace has only `lo`.
pub fn namespaces_seen() -> Vec<String> {
    let mut walls = Vec::new();
    let map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    let fields: Vec<&str> = map.split_whitespace().collect();
    if fields.len() == 3 && fields[0] == INNER_ID.to_string() && fields[2] == "1" {
        walls.push(format!("its own user namespace (uid {INNER_ID} inside, no capability outside)"));
    }
    let dev = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
    let interfaces: Vec<&str> = dev.lines().skip(2).filter_map(|l| l.split(':').next()).map(str::trim).collect();
    if interfaces == ["lo"] {
        walls.push("its own network namespace (no interface but a down loopback)".into());
    }
    walls
}

/// Denies this thread and every thread it starts the whole file system but
/// `cache`, read-only. Returns whether the kernel enforces it.
///
/// # Errors
///
/// The ruleset could not be built or applied.
pub fn landlock(cache: Option<&Path>) -> Result<bool, String> {
    use landlock::{
        ABI, Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
    };
    let abi = ABI::V2;
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .and_then(|r| r.create())
        .map_err(|e| format!("landlock: {e}"))?;
    if let Some(dir) = cache.filter(|d| d.is_dir()) {
        let fd = PathFd::new(dir).map_err(|e| format!("landlock: {}: {e}", dir.display()))?;
        ruleset =
            ruleset.add_rule(PathBeneath::new(fd, AccessFs::from_read(abi))).map_err(|e| format!("landlock: {e}"))?;
    }
    let status = ruleset.restrict_self().map_err(|e| format!("landlock: {e}"))?;
    Ok(status.ruleset != RulesetStatus::NotEnforced)
}

/// The system calls a loaded engine makes while it serves runs: memory, threads'
/// futexes, the deadline's clock and signals, the socket, and exiting. Any other
/// fails with `EPERM` ([`seccomp`]): a guest reaches some of them through WASI
/// (a socket, a file, a clock's resolution) and must see an error it can catch,
/// never the end of the worker that serves other runs.
const ALLOWED: &[i64] = &[
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_recvfrom,
    libc::SYS_sendto,
    libc::SYS_recvmsg,
    libc::SYS_sendmsg,
    libc::SYS_close,
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_madvise,
    libc::SYS_mremap,
    libc::SYS_brk,
    libc::SYS_futex,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_clock_nanosleep,
    libc::SYS_nanosleep,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_sigaltstack,
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_tgkill,
    libc::SYS_getrandom,
    libc::SYS_membarrier,
    libc::SYS_exit,
    libc::SYS_exit_group,
    // What a new thread does as it starts (the judge runs a module table's rows
    // on threads).
    libc::SYS_set_robust_list,
    libc::SYS_rseq,
    // A compiled controller's memory image (see `seccomp`).
    libc::SYS_memfd_create,
    libc::SYS_ftruncate,
    libc::SYS_pwrite64,
    // A guest that waits (Python's `time.sleep`, a poll with a timeout) blocks in
    // WASI's poll, which waits on the worker's own event loop.
    libc::SYS_epoll_wait,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_ctl,
];

/// System calls no path of the engine makes and an escaped engine would want:
/// running a program, debugging or reading another process, mounting, entering
/// or making namespaces, loading kernel code, and the kernel interfaces most
/// often used to attack it. Any of them kills the worker at once ([`seccomp`]),
/// and so does `clone` without `CLONE_THREAD` (a new process).
const KILLED: &[i64] = &[
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_fork,
    libc::SYS_vfork,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_setns,
    libc::SYS_unshare,
    libc::SYS_open_by_handle_at,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
];

/// Installs three filters on every thread of the process (the kernel takes the
/// strictest answer of all three):
/// - [`ALLOWED`] passes, and any other call fails with `EPERM`;
/// - [`KILLED`] kills the worker, and so does `clone` without `CLONE_THREAD`:
///   the engine starts threads, never a process;
/// - `clone3` (whose flags a filter cannot read) is answered `ENOSYS`, so the C
///   library falls back to `clone`.
///
/// # Errors
///
/// The filter could not be built or installed.
pub fn seccomp() -> Result<(), String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp: {e}"))?;
    let e = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let fallback: BTreeMap<i64, Vec<SeccompRule>> = [(libc::SYS_clone3, Vec::new())].into();
    let fallback = SeccompFilter::new(fallback, SeccompAction::Allow, SeccompAction::Errno(libc::ENOSYS as u32), arch)
        .map_err(|e| format!("seccomp: {e}"))?;
    let thread = CLONE_THREAD as u64;
    let not_a_thread = SeccompRule::new(vec![
        SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(thread), 0).map_err(e)?,
    ])
    .map_err(e)?;
    let mut killed: BTreeMap<i64, Vec<SeccompRule>> = KILLED.iter().map(|n| (*n, Vec::new())).collect();
    killed.insert(libc::SYS_clone, vec![not_a_thread]);
    let killed = SeccompFilter::new(killed, SeccompAction::Allow, SeccompAction::KillProcess, arch)
        .map_err(|e| format!("seccomp: {e}"))?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED.iter().map(|n| (*n, Vec::new())).collect();
    // Threads only: the filter above kills a clone that makes a process.
    rules.insert(libc::SYS_clone, Vec::new());
    // A controller compiled in the worker gets its memory image in a sealed memfd
    // (anonymous memory, no file system): fcntl only to seal it and to read a
    // descriptor's flags (what closing one checks in a debug build).
    let mut fcntl = Vec::new();
    for cmd in [libc::F_GETFD, libc::F_ADD_SEALS, libc::F_GET_SEALS] {
        let cmd = u64::try_from(cmd).map_err(|e| format!("seccomp: {e}"))?;
        fcntl.push(
            SeccompRule::new(vec![
                SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, cmd).map_err(e)?,
            ])
            .map_err(e)?,
        );
    }
    rules.insert(libc::SYS_fcntl, fcntl);
    // Allowed here; the filter above answers it ENOSYS first (the strictest wins).
    rules.insert(libc::SYS_clone3, Vec::new());
    let filter = SeccompFilter::new(rules, SeccompAction::Errno(libc::EPERM as u32), SeccompAction::Allow, arch)
        .map_err(|e| format!("seccomp: {e}"))?;
    for f in [fallback, killed, filter] {
        let program: BpfProgram = f.try_into().map_err(e)?;
        seccompiler::apply_filter_all_threads(&program).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}

/// `CLONE_THREAD`: the new task shares the thread group (a thread, not a process).
const CLONE_THREAD: i32 = libc::CLONE_THREAD;

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    /// Set in the copy of this test binary that installs the filter.
    const CHILD: &str = "PLIMSOLL_SECCOMP_TEST_CHILD";

    /// Runs this test binary's `test` again with the filter installed, doing `what`.
    fn in_filtered_child(test: &str, what: &str) -> std::process::Output {
        let exe = std::env::current_exe().expect("this test binary");
        std::process::Command::new(exe)
            .args(["--exact", test, "--nocapture"])
            .env(CHILD, what)
            .output()
            .expect("the child")
    }

    #[test]
    fn a_system_call_outside_the_list_fails_with_eperm_and_the_process_lives_on() {
        const TEST: &str =
            "jail::confine::tests::a_system_call_outside_the_list_fails_with_eperm_and_the_process_lives_on";
        if std::env::var_os(CHILD).is_some() {
            super::seccomp().expect("installed");
            // Allowed: memory and the clocks.
            let v: Vec<u8> = vec![1; 1 << 20];
            let _ = std::time::Instant::now();
            assert_eq!(v.len(), 1 << 20);
            // Not allowed: opening a file, making a socket. Each fails; the process goes on.
            let open = std::fs::File::open("/etc/hostname").expect_err("refused");
            // SAFETY: socket takes plain integers and touches no memory.
            let socket = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
            let socket_errno = std::io::Error::last_os_error().raw_os_error();
            println!("open {:?} socket {socket} {socket_errno:?}", open.raw_os_error());
            std::process::exit(7);
        }
        let out = in_filtered_child(TEST, "open");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(7), "{:?} {}", out.status, String::from_utf8_lossy(&out.stderr));
        let expected = format!("open Some({}) socket -1 Some({})", libc::EPERM, libc::EPERM);
        assert!(stdout.contains(&expected), "{stdout}");
    }

    #[test]
    fn running_a_program_kills_the_process() {
        const TEST: &str = "jail::confine::tests::running_a_program_kills_the_process";
        if std::env::var_os(CHILD).is_some() {
            super::seccomp().expect("installed");
            let prog = c"/bin/true";
            let argv = [prog.as_ptr(), std::ptr::null()];
            let envp = [std::ptr::null()];
            // SAFETY: valid, NUL-terminated argument and environment arrays; the
            // filter ends the process here.
            unsafe { libc::execve(prog.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
            std::process::exit(0);
        }
        let out = in_filtered_child(TEST, "exec");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGSYS),
            "{:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn threads_start_but_a_new_process_kills_the_worker() {
        const TEST: &str = "jail::confine::tests::threads_start_but_a_new_process_kills_the_worker";
        if let Some(what) = std::env::var_os(CHILD) {
            super::seccomp().expect("installed");
            let sum: u64 = std::thread::scope(|s| {
                let parts: Vec<_> = (0..4u64).map(|i| s.spawn(move || i * 10)).collect();
                parts.into_iter().map(|p| p.join().expect("a thread")).sum()
            });
            assert_eq!(sum, 60);
            if what == "fork" {
                // SAFETY: the child (if the filter let one start) exits at once.
                if unsafe { libc::fork() } == 0 {
                    // SAFETY: ends the child without running anything of the parent's.
                    unsafe { libc::_exit(0) };
                }
            }
            std::process::exit(7);
        }
        let threads = in_filtered_child(TEST, "threads");
        assert_eq!(
            threads.status.code(),
            Some(7),
            "threads: {:?} {}",
            threads.status,
            String::from_utf8_lossy(&threads.stderr)
        );
        let fork = in_filtered_child(TEST, "fork");
        assert_eq!(
            fork.status.signal(),
            Some(libc::SIGSYS),
            "fork: {:?} {}",
            fork.status,
            String::from_utf8_lossy(&fork.stderr)
        );
    }
}
