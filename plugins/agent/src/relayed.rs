//! The agent's channel where a vendor runs one command at a time and takes its
//! input whole, up front (OpenShell's exec, sandboxd's in an agent-sandbox
//! pod), so the agent cannot be kept attached. The exec that starts it
//! (`plimsoll-agent listen`) carries the first request, which hands it the
//! session key; the agent answers on that exec's streams and goes into the
//! background, listening on a Unix socket. Every later call is one exec of
//! `plimsoll-agent relay`, which hands the agent its own streams over the
//! socket: the request arrives on the exec's input and the answer leaves on its
//! output, authenticated as on every other channel ([`crate::session`]).

use std::cell::Cell;
use std::time::{Duration, Instant};

use crate::random_hex;
use crate::session::{Channel, Reply, ReplyEnd};

/// Where the sandbox image keeps the agent.
pub const AGENT: &str = "/opt/plimsoll/plimsoll-agent";
/// Where the agent's socket and a large request's staging file go: the
/// guest's `/tmp`, writable on every backend.
const AGENT_DIR: &str = "/tmp/plimsoll";

/// What one exec did.
#[derive(Debug, Default)]
pub struct Done {
    /// None when the vendor ended it at its deadline.
    pub exit_code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// A sandbox whose vendor runs a command with its input given whole.
pub trait Execs {
    /// Runs `argv` as the guest with `stdin` until it ends or `deadline`
    /// passes; each stream keeps `cap` bytes.
    ///
    /// # Errors
    ///
    /// The vendor did not answer: whether the command ran is unknown.
    fn exec(&self, argv: Vec<String>, stdin: &[u8], deadline: Instant, cap: usize) -> Result<Done, String>;

    /// Writes `bytes` to `path` as the guest.
    ///
    /// # Errors
    ///
    /// Why the file was not written.
    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String>;

    /// The largest input one exec takes; a larger request is staged in a file.
    fn max_stdin(&self) -> usize;

    /// The shell line every process of the session exports first (a granted
    /// session's client settings), or "".
    fn exports(&self) -> &str {
        ""
    }
}

/// The channel: one exec per call on `sandbox`, the agent working in `work`.
#[derive(Debug)]
pub struct ExecChannel<S> {
    sandbox: S,
    work: &'static str,
    socket: String,
    /// Whether the starting exec has been answered: from then on calls relay.
    started: Cell<bool>,
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| (*s).to_string()).collect()
}

impl<S: Execs> ExecChannel<S> {
    /// A channel whose first call starts the agent in `work` (made if missing).
    pub fn new(sandbox: S, work: &'static str) -> ExecChannel<S> {
        let socket = format!("{AGENT_DIR}/agent-{}.sock", random_hex(8));
        ExecChannel { sandbox, work, socket, started: Cell::new(false) }
    }

    /// The sandbox the agent runs in.
    pub fn sandbox(&self) -> &S {
        &self.sandbox
    }

    /// The command and input of the exec that carries `request`. A request over
    /// the sandbox's input cap (any, where its exec takes no input) is written to
    /// a file first, which the exec opens as its input and unlinks before the
    /// agent reads it.
    fn exec_for(&self, request: &[u8]) -> Result<(Vec<String>, Vec<u8>), String> {
        let (stage, staged, stdin) = if request.len() <= self.sandbox.max_stdin() {
            ("", String::new(), request.to_vec())
        } else {
            let staged = format!("{AGENT_DIR}/request-{}", random_hex(8));
            self.sandbox.upload(&staged, request)?;
            (r#"exec 0<"$4" && rm -f -- "$4" && "#, staged, Vec::new())
        };
        let script = if self.started.get() {
            format!(r#"{stage}exec "$2" relay "$3""#)
        } else {
            // A granted session's client settings, which the agent passes on to every process.
            format!(r#"{}{stage}mkdir -p -- "$1" && cd -- "$1" && exec "$2" listen "$3""#, self.sandbox.exports())
        };
        let mut argv = words(&["sh", "-c", &script, "sh", self.work, AGENT, &self.socket]);
        if !staged.is_empty() {
            argv.push(staged);
        }
        Ok((argv, stdin))
    }
}

impl<S: Execs> Channel for ExecChannel<S> {
    fn converse(&self, request: &[u8], end: &[u8], timeout_ms: u32, cap: u32) -> Result<Reply, String> {
        let (argv, stdin) = self.exec_for(request)?;
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        let cap = (cap as usize).saturating_add(end.len());
        let done = self.sandbox.exec(argv, &stdin, deadline, cap)?;
        let (mut stdout, mut stderr) = (done.stdout, done.stderr);
        let strip = |b: &mut Vec<u8>| {
            let whole = b.ends_with(end);
            if whole {
                b.truncate(b.len() - end.len());
            }
            whole
        };
        let (out_whole, err_whole) = (strip(&mut stdout), strip(&mut stderr));
        let end = match done.exit_code {
            _ if out_whole && err_whole => ReplyEnd::Said,
            None => ReplyEnd::TimedOut,
            Some(_) => ReplyEnd::Ended,
        };
        if end == ReplyEnd::Said {
            self.started.set(true);
        }
        Ok(Reply { end, stdout, stderr })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// A sandbox that records each exec and answers from a script.
    struct Scripted {
        execs: RefCell<Vec<(Vec<String>, Vec<u8>)>>,
        uploads: RefCell<Vec<String>>,
        answers: RefCell<Vec<Done>>,
        max: usize,
    }

    impl Execs for Scripted {
        fn exec(&self, argv: Vec<String>, stdin: &[u8], _: Instant, _: usize) -> Result<Done, String> {
            self.execs.borrow_mut().push((argv, stdin.to_vec()));
            Ok(self.answers.borrow_mut().remove(0))
        }

        fn upload(&self, path: &str, _: &[u8]) -> Result<(), String> {
            self.uploads.borrow_mut().push(path.to_string());
            Ok(())
        }

        fn max_stdin(&self) -> usize {
            self.max
        }

        fn exports(&self) -> &str {
            "export A=1; "
        }
    }

    fn said(b: &[u8]) -> Done {
        let mut out = b.to_vec();
        out.extend_from_slice(b"<END>");
        Done { exit_code: Some(0), stdout: out, stderr: b"<END>".to_vec() }
    }

    #[test]
    fn the_first_call_starts_the_agent_and_later_ones_relay_or_stage() {
        let answers = vec![said(b"ready"), said(b"one"), Done { exit_code: None, ..Done::default() }];
        let sandbox =
            Scripted { execs: RefCell::default(), uploads: RefCell::default(), answers: answers.into(), max: 8 };
        let channel = ExecChannel::new(sandbox, "/tmp/plimsoll/work");
        let first = channel.converse(b"hello", b"<END>", 1000, 100).expect("first");
        assert_eq!((first.end, first.stdout.as_slice()), (ReplyEnd::Said, &b"ready"[..]));
        let second = channel.converse(b"small", b"<END>", 1000, 100).expect("second");
        assert_eq!(second.end, ReplyEnd::Said);
        let third = channel.converse(b"over eight bytes", b"<END>", 1000, 100).expect("third");
        assert_eq!(third.end, ReplyEnd::TimedOut);
        let execs = channel.sandbox().execs.borrow();
        assert_eq!(execs[0].0[..2], words(&["sh", "-c"]));
        assert_eq!(execs[0].0[2], r#"export A=1; mkdir -p -- "$1" && cd -- "$1" && exec "$2" listen "$3""#);
        assert_eq!(execs[0].0[3..6], words(&["sh", "/tmp/plimsoll/work", AGENT]));
        assert_eq!(execs[0].1, b"hello");
        assert_eq!(execs[1].0[2], r#"exec "$2" relay "$3""#);
        assert_eq!(execs[1].1, b"small");
        let staged = &channel.sandbox().uploads.borrow()[0];
        assert!(staged.starts_with("/tmp/plimsoll/request-"), "{staged}");
        assert_eq!(execs[2].0[2], r#"exec 0<"$4" && rm -f -- "$4" && exec "$2" relay "$3""#);
        assert_eq!(execs[2].0.last(), Some(staged));
        assert!(execs[2].1.is_empty());
    }

    #[test]
    fn where_an_exec_takes_no_input_even_the_first_request_is_staged() {
        let sandbox = Scripted {
            execs: RefCell::default(),
            uploads: RefCell::default(),
            answers: vec![said(b"r")].into(),
            max: 0,
        };
        let channel = ExecChannel::new(sandbox, "/w");
        channel.converse(b"k", b"<END>", 1000, 100).expect("first");
        let execs = channel.sandbox().execs.borrow();
        assert_eq!(
            execs[0].0[2],
            r#"export A=1; exec 0<"$4" && rm -f -- "$4" && mkdir -p -- "$1" && cd -- "$1" && exec "$2" listen "$3""#
        );
        assert!(execs[0].1.is_empty());
        assert_eq!(channel.sandbox().uploads.borrow().len(), 1);
    }

    #[test]
    fn an_agent_that_never_answered_is_started_again_and_one_that_ended_says_so() {
        let answers = vec![Done { exit_code: Some(1), stdout: b"no".to_vec(), ..Done::default() }, said(b"ready")];
        let sandbox =
            Scripted { execs: RefCell::default(), uploads: RefCell::default(), answers: answers.into(), max: 8 };
        let channel = ExecChannel::new(sandbox, "/w");
        assert_eq!(channel.converse(b"k", b"<END>", 1000, 100).expect("first").end, ReplyEnd::Ended);
        channel.converse(b"k", b"<END>", 1000, 100).expect("second");
        let execs = channel.sandbox().execs.borrow();
        assert!(execs[1].0[2].contains("listen"), "not started yet, so it starts: {:?}", execs[1].0);
    }
}
