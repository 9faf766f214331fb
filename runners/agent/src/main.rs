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
//!
//! `plimsoll-agent listen SOCKET` serves where a vendor's exec takes its input
//! whole, up front (an OpenShell exec): the exec that starts it carries the
//! first request, which it answers on that exec's streams before going into the
//! background (its own session, seated as `attach` is, its work directory the
//! one it started in); each later call is an exec of `plimsoll-agent relay
//! SOCKET`, which hands the agent that exec's streams (see [`listen`]).
//!
//! `plimsoll-agent broker-relay SOCKET` carries a granted run's calls to the
//! host's broker where the sandbox has no way out (see [`broker`]): it binds
//! the clients' socket and a loopback port, says the port on stdout, and goes
//! into the background.
//!
//! `plimsoll-agent sandboxd --listen ADDR:PORT --token-sha256 HEX64 [--guest-uid
//! UID]` is an agent-sandbox pod's main process (see [`sandboxd`]): started as
//! root, it serves `GET /v1/health` and token-checked `POST /v1/exec` over
//! HTTP, running each exec as the guest uid (61000 unless told) in a process
//! group of its own, killed at its timeout and when its main process ends.
//!
//! `plimsoll-agent dial HOST:PORT` carries stdin to a TCP connection and the
//! connection to stdout (see [`dial`]): the way into a pod with no network,
//! through `docker exec -i`.

mod broker;
mod dial;
mod files;
mod interp;
mod listen;
mod pipes;
mod procs;
mod run;
mod sandboxd;
mod wire;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read as _, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
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
    /// During a relayed call, the relay and its ancestors: what carries the
    /// answer out must outlive the call's sweeps.
    carriers: HashSet<procs::Identity>,
}

/// The channel's two output streams, written unbuffered.
#[derive(Debug)]
struct Channel {
    out: File,
    err: File,
}

impl Agent {
    fn keep(&self) -> HashSet<procs::Identity> {
        self.kept.values().map(Interpreter::identity).chain(self.carriers.iter().copied()).collect()
    }

    fn children(&self) -> HashSet<i32> {
        self.kept.values().map(Interpreter::pid).collect()
    }

    fn sweep(&self) -> u32 {
        procs::sweep(&self.keep(), &self.children())
    }

    /// Waits until `next` (the request's input, or the listening socket) is
    /// readable, meanwhile dropping what idle interpreters print and letting go
    /// of any that ends.
    fn idle(&mut self, next: RawFd) {
        loop {
            let watched: Vec<(Language, i32)> =
                self.kept.iter().flat_map(|(l, it)| it.idle_fds().into_iter().map(move |fd| (*l, fd))).collect();
            let mut fds = vec![pipes::readable(next)];
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
            _ if !req.env.is_empty() && req.kind != "snippet" => Some(format!("a {} call takes no env", req.kind)),
            _ if req.env.keys().any(|k| !procs::GRANT_ENV.contains(&k.as_str())) => Some(format!(
                "the snippet's env names {:?}; only a grant's client settings ({}) may be set",
                req.env.keys().find(|k| !procs::GRANT_ENV.contains(&k.as_str())).map_or("", |k| k.as_str()),
                procs::GRANT_ENV.join(", ")
            )),
            "cell" | "snippet" => files::write_files(procs::work(), &req.files).err(),
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
                ("snippet", Some(language)) => {
                    run::snippet((language, &req.code), &req.env, deadline, &mut sink, &mut status);
                }
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

/// What every seat does first: nothing beside the agent may read what the host
/// sends, and a hosted agent runs as the guest, never as root.
fn guard(seat: procs::Seat) -> Result<(), String> {
    procs::undumpable().map_err(|e| format!("prctl(PR_SET_DUMPABLE, 0): {e}"))?;
    // SAFETY: getuid has no preconditions.
    if seat == procs::Seat::Hosted && unsafe { libc::getuid() } == 0 {
        // Every process of the sandbox would be its sweep's to kill, the vendor's too.
        return Err(
            "a hosted agent (attach, listen) refuses to run as root: start it as the sandbox's guest user".into()
        );
    }
    Ok(())
}

/// Takes the seat: from here on the sweep spares what it must.
fn seat(seat: procs::Seat) -> Result<(), String> {
    procs::seat_at(seat);
    if seat == procs::Seat::Hosted {
        match procs::subreaper() {
            Ok(()) => {}
            // A sandbox kernel without subreapers (gVisor before 2023): orphans go
            // to the sandbox's init, which reaps them (sandboxd does). The sweep
            // finds the guest's processes by scanning, not by parentage, so
            // none slips out of its reach; only their zombies are not ours to reap.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(format!("prctl(PR_SET_CHILD_SUBREAPER, 1): {e}")),
        }
    }
    Ok(())
}

/// This process's stdin, stdout and stderr as owned files.
fn own_streams() -> Result<(File, Channel), String> {
    let dup = |f: std::os::fd::BorrowedFd<'_>| f.try_clone_to_owned().map(File::from);
    let stdin = dup(std::io::stdin().as_fd()).map_err(|e| format!("stdin: {e}"))?;
    let chan = Channel {
        out: dup(std::io::stdout().as_fd()).map_err(|e| format!("stdout: {e}"))?,
        err: dup(std::io::stderr().as_fd()).map_err(|e| format!("stderr: {e}"))?,
    };
    Ok((stdin, chan))
}

fn serve(word: &str, at: procs::Seat) -> Result<(), String> {
    guard(at)?;
    seat(at)?;
    let (stdin, chan) = own_streams()?;
    (&chan.out).write_all(word.as_bytes()).map_err(|e| format!("saying it is ready: {e}"))?;
    let mut agent = Agent::default();
    loop {
        agent.idle(stdin.as_raw_fd());
        match wire::read_request(&mut &stdin, &mut agent.key) {
            Ok(Some(req)) => agent.call(req, &chan).map_err(|e| format!("answering: {e}"))?,
            // The host let go of the session.
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("reading a request: {e}")),
        }
    }
}

/// Points fds 0, 1 and 2 at `/dev/null`: the starting exec's streams must close
/// once the first answer is out, or its stream would never end.
fn let_go_of_streams() -> Result<(), String> {
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").map_err(|e| e.to_string())?;
    for fd in 0..3 {
        // SAFETY: dup2 onto a standard descriptor this process owns.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
            return Err(std::io::Error::last_os_error().to_string());
        }
    }
    Ok(())
}

fn listen(socket: &Path) -> Result<(), String> {
    guard(procs::Seat::Hosted)?;
    procs::work_at(std::env::current_dir().map_err(|e| format!("the work directory: {e}"))?);
    let listener = listen::bind(socket).map_err(|e| format!("listening on {}: {e}", socket.display()))?;
    let (done_r, done_w) = pipes::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (done_r, done_w) = (File::from(done_r), File::from(done_w));
    // SAFETY: the agent has started no thread, so the child is a whole copy of
    // a single-threaded process and may go on running Rust.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            drop(done_r);
            // SAFETY: setsid has no preconditions; the child leads no group yet.
            if unsafe { libc::setsid() } < 0 {
                return Err(format!("setsid: {}", std::io::Error::last_os_error()));
            }
            seat(procs::Seat::Hosted)?;
            let mut agent = Agent::default();
            let mut served = HashSet::new();
            let (stdin, chan) = own_streams()?;
            let first = wire::read_request(&mut &stdin, &mut agent.key)
                .map_err(|e| format!("reading the first request: {e}"))?
                .ok_or("the first request never came")?;
            served.insert(first.nonce.clone());
            agent.call(first, &chan).map_err(|e| format!("answering: {e}"))?;
            drop((stdin, chan));
            let_go_of_streams()?;
            (&done_w).write_all(b".").map_err(|e| e.to_string())?;
            drop(done_w);
            loop {
                agent.idle(listener.as_raw_fd());
                let Some(mut call) = listen::accept(&listener) else { continue };
                let chan = Channel { out: call.out, err: call.err };
                // A stranger's connection, or a request already served, is dropped.
                if let Ok(Some(req)) = wire::read_request(&mut call.input, &mut agent.key)
                    && served.insert(req.nonce.clone())
                {
                    agent.carriers = procs::lineage(call.peer);
                    // An exec cancelled mid-answer leaves nothing to write to; the
                    // next call's sweep clears what it ran.
                    let _ = agent.call(req, &chan);
                    agent.carriers.clear();
                }
            }
        }
        _ => {
            drop(done_w);
            drop(listener);
            let mut said = Vec::new();
            let _ = (&done_r).read_to_end(&mut said);
            if said.is_empty() { Err("the session agent ended before it took the session".into()) } else { Ok(()) }
        }
    }
}

fn broker_relay(socket: &Path) -> Result<(), String> {
    guard(procs::Seat::Hosted)?;
    let listeners = broker::Listeners::bind(socket).map_err(|e| format!("listening on {}: {e}", socket.display()))?;
    let port = listeners.port().map_err(|e| format!("the relay's port: {e}"))?;
    let (ready_r, ready_w) = pipes::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (ready_r, ready_w) = (File::from(ready_r), File::from(ready_w));
    // SAFETY: the relay has started no thread, so the child is a whole copy of
    // a single-threaded process and may go on running Rust.
    match unsafe { libc::fork() } {
        -1 => Err(format!("fork: {}", std::io::Error::last_os_error())),
        0 => {
            drop(ready_r);
            // SAFETY: setsid has no preconditions; the child leads no group yet.
            if unsafe { libc::setsid() } < 0 {
                return Err(format!("setsid: {}", std::io::Error::last_os_error()));
            }
            // The starting exec's streams must end with the parent.
            let_go_of_streams()?;
            // Out of the exec's process group now: a vendor that kills the
            // group once the exec's process ends (sandboxd does) no longer
            // reaches it, so the parent may say the port.
            (&ready_w).write_all(b".").map_err(|e| e.to_string())?;
            drop(ready_w);
            listeners.serve();
            Ok(())
        }
        _ => {
            drop(ready_w);
            drop(listeners);
            let mut said = Vec::new();
            let _ = (&ready_r).read_to_end(&mut said);
            if said.is_empty() {
                return Err("the relay ended before it left the exec's process group".into());
            }
            println!("{port}");
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = match args.as_slice() {
        [verb, word] if verb == "serve" && !word.is_empty() => serve(word, procs::Seat::Init),
        [verb, word] if verb == "attach" && !word.is_empty() => serve(word, procs::Seat::Hosted),
        [verb, socket] if verb == "listen" && !socket.is_empty() => listen(Path::new(socket)),
        [verb, socket] if verb == "relay" && !socket.is_empty() => listen::relay(Path::new(socket)),
        [verb, socket] if verb == "broker-relay" && !socket.is_empty() => broker_relay(Path::new(socket)),
        [verb, rest @ ..] if verb == "sandboxd" => sandboxd::main(rest),
        [verb, addr] if verb == "dial" && !addr.is_empty() => return dial::main(addr),
        _ => Err(
            "usage: plimsoll-agent serve WORD | plimsoll-agent attach WORD | plimsoll-agent listen SOCKET | plimsoll-agent relay SOCKET | plimsoll-agent broker-relay SOCKET | plimsoll-agent sandboxd --listen ADDR:PORT --token-sha256 HEX64 [--guest-uid UID] | plimsoll-agent dial HOST:PORT"
                .into(),
        ),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("plimsoll-agent: {e}");
            ExitCode::from(2)
        }
    }
}
