//! Kept interpreters: one Python and one Node process per session, each running
//! cells in one shared namespace (`cell.py`, `cell.js`). The agent owns their
//! pipes: it sends one JSON cell per line on stdin, forwards what they print while
//! the cell runs, and learns the cell's end from one line on fd 3. At a cell's
//! deadline it kills the interpreter's whole process group; the next cell starts a
//! fresh one.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Stdio};
use std::time::Instant;

use serde::Deserialize;

use crate::pipes::{self, Read};
use crate::procs::{self, EXIT_TIMEOUT, Identity};
use crate::wire::{Sink, Status, Stream};

/// Where the runners live in the image.
pub const DIR: &str = "/opt/plimsoll";

/// A language with a kept interpreter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Language {
    Python,
    JavaScript,
}

impl Language {
    /// The language a request names; None for any other.
    pub fn named(name: &str) -> Option<Language> {
        match name {
            "python" => Some(Language::Python),
            "javascript" => Some(Language::JavaScript),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "javascript",
        }
    }

    fn argv(self) -> Vec<String> {
        match self {
            Language::Python => vec!["/usr/bin/python3".into(), "-I".into(), format!("{DIR}/cell.py")],
            Language::JavaScript => vec!["/usr/bin/node".into(), format!("{DIR}/cell.js")],
        }
    }
}

/// One kept interpreter and its pipes.
#[derive(Debug)]
pub struct Interpreter {
    child: Child,
    me: Identity,
    stdin: ChildStdin,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    /// Cell ends, one JSON line each.
    done: OwnedFd,
    /// No cell has run in it yet.
    fresh: bool,
}

/// What the interpreter writes on fd 3 when a cell's output is flushed.
#[derive(Deserialize)]
struct Done {
    exit: i32,
}

impl Interpreter {
    /// Starts `language`'s interpreter.
    pub fn start(language: Language) -> std::io::Result<Interpreter> {
        let (done, done_w) = pipes::pipe()?;
        let mut argv = language.argv();
        argv.extend([format!("plimsoll-interp/{}", language.name()), "3".into()]);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut child = procs::spawn(&argv, Stdio::piped(), Some(&done_w), &std::collections::BTreeMap::new())?;
        drop(done_w);
        let pid = i32::try_from(child.id()).unwrap_or(0);
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            procs::kill_group(&mut child);
            return Err(std::io::Error::other("the interpreter's pipes are missing"));
        };
        for fd in [stdin.as_raw_fd(), stdout.as_raw_fd(), stderr.as_raw_fd(), done.as_raw_fd()] {
            pipes::nonblocking(&fd)?;
        }
        // Its start time cannot change while the agent has not reaped it.
        let me = procs::identity(pid).unwrap_or(Identity { pid, start: 0 });
        Ok(Interpreter { child, me, stdin, stdout: Some(stdout), stderr: Some(stderr), done, fresh: true })
    }

    /// The process the sweep must spare.
    pub fn identity(&self) -> Identity {
        self.me
    }

    /// Its pid, which only the agent may reap.
    pub fn pid(&self) -> i32 {
        self.me.pid
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
            && self.stdout.is_some()
            && self.stderr.is_some()
            && !procs::doomed(self.me.pid)
    }

    /// The descriptors an idle agent watches, so what the interpreter prints
    /// between cells (nobody's) is read and dropped.
    pub fn idle_fds(&self) -> Vec<RawFd> {
        let mut fds = vec![self.done.as_raw_fd()];
        fds.extend(self.stdout.as_ref().map(AsRawFd::as_raw_fd));
        fds.extend(self.stderr.as_ref().map(AsRawFd::as_raw_fd));
        fds
    }

    /// Reads and drops what the interpreter printed between cells; false once one
    /// of its pipes ended (it is ending).
    pub fn drop_output(&mut self) -> bool {
        let mut open = true;
        for fd in self.idle_fds() {
            loop {
                match pipes::read_some(fd) {
                    Read::Data(_) => {}
                    Read::Empty => break,
                    Read::Eof => {
                        open = false;
                        break;
                    }
                }
            }
        }
        open
    }

    /// Forwards what `stream` holds now; false at its end.
    fn forward<W: Write>(&mut self, which: Stream, sink: &mut Sink<W>) -> bool {
        let fd = match which {
            Stream::Out => self.stdout.as_ref().map(AsRawFd::as_raw_fd),
            Stream::Err => self.stderr.as_ref().map(AsRawFd::as_raw_fd),
        };
        let Some(fd) = fd else { return false };
        loop {
            match pipes::read_some(fd) {
                Read::Data(d) => {
                    // The channel failing ends the agent's loop at its next write.
                    let _ = sink.write(which, &d);
                }
                Read::Empty => return true,
                Read::Eof => {
                    match which {
                        Stream::Out => self.stdout = None,
                        Stream::Err => self.stderr = None,
                    }
                    return false;
                }
            }
        }
    }

    /// Kills the interpreter's process group and reaps it; its exit status.
    pub fn kill(mut self) -> Option<i32> {
        procs::kill_group(&mut self.child)
    }
}

/// How one cell went.
enum Outcome {
    Done(i32),
    /// The interpreter ended or broke the protocol.
    Ended,
    TimedOut,
}

/// Runs one cell in `kept` (started first when there is none or it died); fills
/// `status`. Leaves `kept` empty when the interpreter ended.
pub fn cell<W: Write>(
    kept: &mut Option<Interpreter>,
    language: Language,
    code: &str,
    cell: u64,
    deadline: Instant,
    sink: &mut Sink<W>,
    status: &mut Status,
) {
    let alive = kept.take().and_then(|mut old| {
        if old.alive() {
            return Some(old);
        }
        old.kill();
        None
    });
    let mut it = match alive {
        Some(it) => it,
        None => match Interpreter::start(language) {
            Ok(it) => it,
            Err(e) => {
                status.refused = Some(format!("the {} interpreter did not start: {e}", language.name()));
                return;
            }
        },
    };
    status.started = std::mem::replace(&mut it.fresh, false);
    it.drop_output();
    let mut ask = serde_json::json!({"code": code, "cell": cell}).to_string().into_bytes();
    ask.push(b'\n');
    let outcome = converse(&mut it, &ask, deadline, sink);
    // What the cell printed before its end line, or before it ended.
    it.forward(Stream::Out, sink);
    it.forward(Stream::Err, sink);
    match outcome {
        Outcome::Done(exit) => {
            status.exit = exit;
            *kept = Some(it);
        }
        Outcome::Ended | Outcome::TimedOut => {
            let code = it.kill();
            status.timed_out = matches!(outcome, Outcome::TimedOut);
            status.exit = if status.timed_out { EXIT_TIMEOUT } else { code.unwrap_or(EXIT_TIMEOUT) };
            status.ended = true;
        }
    }
}

/// Sends `ask` and forwards output until the cell's end line, the interpreter's
/// end, or the deadline.
fn converse<W: Write>(it: &mut Interpreter, ask: &[u8], deadline: Instant, sink: &mut Sink<W>) -> Outcome {
    let mut pending = ask;
    let mut line = Vec::new();
    loop {
        if Instant::now() >= deadline {
            return if it.alive() { Outcome::TimedOut } else { Outcome::Ended };
        }
        // Entries are told apart by position: gVisor rewrites `events` on return.
        let mut fds = vec![pipes::readable(it.done.as_raw_fd())];
        let mut streams = Vec::new();
        for (which, fd) in [
            (Stream::Out, it.stdout.as_ref().map(AsRawFd::as_raw_fd)),
            (Stream::Err, it.stderr.as_ref().map(AsRawFd::as_raw_fd)),
        ] {
            if let Some(fd) = fd {
                streams.push((which, fds.len()));
                fds.push(pipes::readable(fd));
            }
        }
        let input = (!pending.is_empty()).then(|| {
            fds.push(pipes::writable(it.stdin.as_raw_fd()));
            fds.len() - 1
        });
        pipes::poll(&mut fds, Some(deadline));
        if let Some(i) = input
            && pipes::ready(&fds[i])
        {
            match pipes::write_some(it.stdin.as_raw_fd(), pending) {
                Ok(n) => pending = &pending[n..],
                // It stopped reading: its end shows on the done pipe.
                Err(_) => pending = &[],
            }
        }
        for (which, i) in streams {
            if pipes::ready(&fds[i]) {
                it.forward(which, sink);
            }
        }
        if pipes::ready(&fds[0]) {
            match pipes::read_some(it.done.as_raw_fd()) {
                Read::Data(d) => line.extend_from_slice(&d),
                Read::Empty => {}
                Read::Eof => return Outcome::Ended,
            }
            if line.ends_with(b"\n") {
                return match serde_json::from_slice::<Done>(&line) {
                    Ok(d) => Outcome::Done(d.exit),
                    // Something in the cell wrote to fd 3: the interpreter cannot be trusted.
                    Err(_) => Outcome::Ended,
                };
            }
        }
    }
}
