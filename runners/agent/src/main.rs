//! plimsoll's resident session agent: a docker session container's main process.
//!
//! `plimsoll-agent serve WORD` makes itself non-dumpable, says `WORD` on stdout
//! (the host waits for it), and then serves the session's calls, one at a time,
//! over its stdin and stdout/stderr, which the host keeps attached (see [`wire`]).
//! Each call sweeps first (every process but the agent and its kept interpreters
//! is killed), writes the call's files under `/work`, runs the cell, snippet or
//! project, sweeps again, measures the session's storage, and ends with a status
//! line and the end marker. As PID 1 it also reaps the orphans calls leave, and no
//! process in the container can signal it.
//!
//! `plimsoll-agent attach WORD` serves the same calls where a vendor's process
//! manager started it inside a remote sandbox (E2B's envd, an OpenShell exec):
//! it makes itself the subreaper of what its calls leave, its sweep spares its
//! ancestors and what the guest may not signal (the vendor's processes), and the
//! storage is the guest's files under the writable mounts, walked. The channel is
//! the same authenticated one: under a shared uid, a process of the guest's could
//! otherwise write into it.

mod files;
mod interp;
mod pipes;
mod procs;
mod run;
mod wire;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use interp::{Interpreter, Language};
use wire::{Request, Sink, Status};

/// The longest call budget the agent keeps (a day); the host's are hours at most.
const MAX_CALL_MS: u64 = 24 * 3600 * 1000;

/// The session's state between calls: its kept interpreters.
#[derive(Debug, Default)]
struct Agent {
    kept: HashMap<Language, Interpreter>,
    /// Set by the first request.
    key: Option<wire::Key>,
}

/// The channel's two output streams, written unbuffered.
#[derive(Debug)]
struct Channel {
    out: File,
    err: File,
}

impl Agent {
    fn keep(&self) -> HashSet<procs::Identity> {
        self.kept.values().map(Interpreter::identity).collect()
    }

    fn children(&self) -> HashSet<i32> {
        self.kept.values().map(Interpreter::pid).collect()
    }

    fn sweep(&self) -> u32 {
        procs::sweep(&self.keep(), &self.children())
    }

    /// Waits for the next request on fd 0, meanwhile dropping what idle
    /// interpreters print and letting go of any that ends.
    fn idle(&mut self, stdin: &File) {
        loop {
            let watched: Vec<(Language, i32)> =
                self.kept.iter().flat_map(|(l, it)| it.idle_fds().into_iter().map(move |fd| (*l, fd))).collect();
            let mut fds = vec![pipes::readable(std::os::fd::AsRawFd::as_raw_fd(stdin))];
            fds.extend(watched.iter().map(|(_, fd)| pipes::readable(*fd)));
            pipes::poll(&mut fds, None);
            let mut ending = HashSet::new();
            for (p, (language, _)) in fds.iter().skip(1).zip(&watched) {
                if pipes::ready(p) && !ending.contains(language) {
                    let open = self.kept.get_mut(language).is_some_and(Interpreter::drop_output);
                    if !open {
                        ending.insert(*language);
                    }
                }
            }
            for language in ending {
                if let Some(it) = self.kept.remove(&language) {
                    it.kill();
                }
            }
            if pipes::ready(&fds[0]) {
                return;
            }
        }
    }

    /// Serves one call and ends its answer.
    fn call(&mut self, req: Request, chan: &Channel) -> std::io::Result<()> {
        let key = self.key.clone().ok_or_else(|| std::io::Error::other("no session key"))?;
        let started = Instant::now();
        // The host's budgets are hours at most; a larger one is taken as a day.
        let deadline = started + Duration::from_millis(req.timeout_ms.min(MAX_CALL_MS));
        let cap = if req.kind == "project" { req.report_cap } else { req.max_output };
        let mut sink = Sink::new(&chan.out, &chan.err, cap);
        let language = Language::named(&req.language);
        // A project's report key is in flight while its runner starts: the kept
        // interpreters are stopped for the call's length, so no background thread of
        // an earlier cell can race the runner for it.
        let frozen: Vec<i32> =
            if req.kind == "project" { self.kept.values().map(Interpreter::pid).collect() } else { Vec::new() };
        procs::freeze(&frozen);
        let mut status = Status { leftover: self.sweep(), ..Status::default() };
        let refused = match req.kind.as_str() {
            "ready" | "project" => None,
            "cell" | "snippet" if language.is_none() => Some(format!("no kept interpreter for {:?}", req.language)),
            "cell" | "snippet" => files::write_files(Path::new(procs::WORK), &req.files).err(),
            other => Some(format!("unknown call kind {other:?}")),
        };
        status.refused = refused;
        if status.refused.is_none() {
            match (req.kind.as_str(), language) {
                ("cell", Some(language)) => {
                    let mut kept = self.kept.remove(&language);
                    interp::cell(&mut kept, language, &req.code, req.cell, deadline, &mut sink, &mut status);
                    if let Some(it) = kept {
                        self.kept.insert(language, it);
                    }
                }
                ("snippet", Some(language)) => run::snippet(language, &req.code, deadline, &mut sink, &mut status),
                ("project", _) => run::project(&req.plan, deadline, &mut sink, &mut status),
                _ => {}
            }
        }
        status.leftover = status.leftover.max(self.sweep());
        procs::thaw(&frozen);
        status.disk_used_kb = files::disk_used_kb(procs::seat());
        status.ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        sink.finish(&key, &req.nonce, status)
    }
}

fn serve(word: &str, seat: procs::Seat) -> Result<(), String> {
    // Before anything the host sends arrives: nothing beside the agent may read it.
    procs::undumpable().map_err(|e| format!("prctl(PR_SET_DUMPABLE, 0): {e}"))?;
    // SAFETY: getuid has no preconditions.
    if seat == procs::Seat::Hosted && unsafe { libc::getuid() } == 0 {
        // Every process of the sandbox would be its sweep's to kill, the vendor's too.
        return Err("attach refuses to run as root: start it as the sandbox's guest user".into());
    }
    procs::seat_at(seat);
    if seat == procs::Seat::Hosted {
        procs::subreaper().map_err(|e| format!("prctl(PR_SET_CHILD_SUBREAPER, 1): {e}"))?;
    }
    let dup = |f: std::os::fd::BorrowedFd<'_>| f.try_clone_to_owned().map(File::from);
    let stdin = dup(std::io::stdin().as_fd()).map_err(|e| format!("stdin: {e}"))?;
    let chan = Channel {
        out: dup(std::io::stdout().as_fd()).map_err(|e| format!("stdout: {e}"))?,
        err: dup(std::io::stderr().as_fd()).map_err(|e| format!("stderr: {e}"))?,
    };
    (&chan.out).write_all(word.as_bytes()).map_err(|e| format!("saying it is ready: {e}"))?;
    let mut agent = Agent::default();
    loop {
        agent.idle(&stdin);
        match wire::read_request(&mut &stdin, &mut agent.key) {
            Ok(Some(req)) => agent.call(req, &chan).map_err(|e| format!("answering: {e}"))?,
            // The host let go of the session.
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("reading a request: {e}")),
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.as_slice() {
        [verb, word] if verb == "serve" && !word.is_empty() => serve(word, procs::Seat::Init),
        [verb, word] if verb == "attach" && !word.is_empty() => serve(word, procs::Seat::Hosted),
        _ => Err("usage: plimsoll-agent serve WORD | plimsoll-agent attach WORD".into()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plimsoll-agent: {e}");
            ExitCode::from(2)
        }
    }
}
