//! One-off processes of a call: a snippet in a fresh interpreter, and a project
//! through the project runner, whose authenticated report is the result.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::interp::{DIR, Language};
use crate::pipes::{self, Read};
use crate::procs::{self, EXIT_TIMEOUT};
use crate::wire::{Sink, Status, Stream};

/// How long past its own deadline the project runner (which keeps that deadline
/// itself) may take before it counts as hung.
const RUNNER_GRACE: Duration = Duration::from_secs(5);

/// Runs `code` as `python3 -I -` or `node -` would, with `env` beside the
/// agent's; fills `status`.
pub fn snippet<W: Write>(
    (language, code): (Language, &str),
    env: &BTreeMap<String, String>,
    deadline: Instant,
    sink: &mut Sink<W>,
    status: &mut Status,
) {
    let argv: &[&str] = match language {
        Language::Python => &["/usr/bin/python3", "-I", "-"],
        Language::JavaScript => &["/usr/bin/node", "-"],
    };
    let mut child = match procs::spawn(argv, Stdio::piped(), None, env) {
        Ok(c) => c,
        Err(e) => {
            status.refused = Some(format!("the snippet's interpreter did not start: {e}"));
            return;
        }
    };
    if pump(&mut child, code.as_bytes(), sink, deadline)
        && let Some(exit) = procs::wait_until(&mut child, deadline)
    {
        status.exit = exit;
        return;
    }
    procs::kill_group(&mut child);
    status.exit = EXIT_TIMEOUT;
    status.timed_out = true;
}

/// Runs the project runner on `plan`; its stdout (the report frame) goes to the sink.
pub fn project<W: Write>(plan: &serde_json::Value, deadline: Instant, sink: &mut Sink<W>, status: &mut Status) {
    let runner = format!("{DIR}/runner.py");
    let mut child = match procs::spawn(&["/usr/bin/python3", "-I", &runner], Stdio::null(), None, &BTreeMap::new()) {
        Ok(c) => c,
        Err(e) => {
            status.refused = Some(format!("the project runner did not start: {e}"));
            return;
        }
    };
    let plan = plan.to_string();
    let hung = deadline + RUNNER_GRACE;
    if pump(&mut child, plan.as_bytes(), sink, hung) && procs::wait_until(&mut child, hung).is_some() {
        // The report says how the steps went; the runner's own status says nothing more.
        status.exit = 0;
        return;
    }
    procs::kill_group(&mut child);
    status.exit = EXIT_TIMEOUT;
    status.timed_out = true;
}

/// Writes `input` to the child's stdin (then closes it) while forwarding its
/// stdout and stderr, until both end or `deadline`. True when both ended.
fn pump<W: Write>(child: &mut Child, input: &[u8], sink: &mut Sink<W>, deadline: Instant) -> bool {
    let mut stdin = child.stdin.take();
    let mut streams: Vec<(Stream, std::os::fd::OwnedFd)> = Vec::new();
    if let Some(out) = child.stdout.take() {
        streams.push((Stream::Out, out.into()));
    }
    if let Some(err) = child.stderr.take() {
        streams.push((Stream::Err, err.into()));
    }
    for fd in streams.iter().map(|(_, f)| f.as_raw_fd()).chain(stdin.as_ref().map(AsRawFd::as_raw_fd)) {
        if pipes::nonblocking(&fd).is_err() {
            return false;
        }
    }
    let mut pending = input;
    if pending.is_empty() {
        stdin = None;
    }
    while !streams.is_empty() {
        if Instant::now() >= deadline {
            return false;
        }
        let mut fds: Vec<libc::pollfd> = streams.iter().map(|(_, f)| pipes::readable(f.as_raw_fd())).collect();
        if let Some(s) = &stdin {
            fds.push(pipes::writable(s.as_raw_fd()));
        }
        pipes::poll(&mut fds, Some(deadline));
        if let Some(s) = &stdin
            && fds.last().is_some_and(pipes::ready)
        {
            match pipes::write_some(s.as_raw_fd(), pending) {
                Ok(n) => pending = &pending[n..],
                Err(_) => pending = &[],
            }
            if pending.is_empty() {
                // Closing stdin is the end of the input.
                stdin = None;
            }
        }
        let mut ended = Vec::new();
        for (i, p) in fds.iter().enumerate().take(streams.len()) {
            if !pipes::ready(p) {
                continue;
            }
            let (which, fd) = &streams[i];
            loop {
                match pipes::read_some(fd.as_raw_fd()) {
                    Read::Data(d) => {
                        let _ = sink.write(*which, &d);
                    }
                    Read::Empty => break,
                    Read::Eof => {
                        ended.push(i);
                        break;
                    }
                }
            }
        }
        for i in ended.into_iter().rev() {
            streams.remove(i);
        }
    }
    true
}
