//! A resident main process: a container whose main process serves many exchanges
//! over its attached stdin, stdout and stderr (a session's agent), so a call costs
//! one write and the reads of its answer instead of an `exec`.
//!
//! The host keeps the attach for the container's life; the engine created every
//! container with `StdinOnce`, so the process's stdin ends when the host lets go.
//! An exchange writes the request, then reads both streams until each ends with the
//! exchange's end marker. Anything else (a deadline, the process's end, a broken
//! stream) leaves the stream's position unknown, so the container takes no more
//! exchanges.

use std::time::Duration;

use bollard::container::{AttachContainerResults, LogOutput};
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use crate::engine::{EngineError, Launched};

/// How an exchange ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyEnd {
    /// Both streams ended with the end marker (taken off).
    Said,
    /// The deadline passed first.
    TimedOut,
    /// The main process's streams ended first: it is gone.
    Ended,
}

/// One stream of an answer: the prefix kept under the cap, and the last bytes
/// seen whatever the cap, so an end marker past the cap is still found.
#[derive(Debug, Default)]
struct Kept {
    bytes: Vec<u8>,
    cut: bool,
    tail: Vec<u8>,
}

impl Kept {
    fn push(&mut self, data: &[u8], cap: usize, tail: usize) {
        let room = cap.saturating_sub(self.bytes.len());
        if data.len() > room {
            self.cut = true;
        }
        self.bytes.extend_from_slice(&data[..data.len().min(room)]);
        self.tail.extend_from_slice(data);
        let over = self.tail.len().saturating_sub(tail);
        self.tail.drain(..over);
    }

    /// The kept bytes without the end marker, when nothing was cut.
    fn strip(&mut self, end: &[u8]) {
        if !self.cut && self.bytes.ends_with(end) {
            self.bytes.truncate(self.bytes.len() - end.len());
        }
    }
}

/// An exchange's answer, each stream capped.
#[derive(Debug)]
pub struct Reply {
    pub end: ReplyEnd,
    pub stdout: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr: Vec<u8>,
    pub stderr_truncated: bool,
}

/// A started container's attached main process, serving exchanges.
pub struct Resident {
    attached: AttachContainerResults,
    /// Set once an exchange did not end with its marker.
    spent: Option<&'static str>,
}

impl std::fmt::Debug for Resident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resident").field("spent", &self.spent).finish_non_exhaustive()
    }
}

impl Resident {
    /// Takes over a launched container's attach (its process said its ready word).
    pub fn new(launched: Launched) -> Resident {
        Resident { attached: launched.into_attached(), spent: None }
    }

    /// Writes `send` to the main process's stdin and reads its stdout and stderr
    /// until each ends with `end`, the streams end, or `timeout`; each stream keeps
    /// at most `cap` bytes.
    ///
    /// # Errors
    ///
    /// The container already failed an exchange, or the request could not be written.
    pub async fn converse(
        &mut self,
        send: &[u8],
        end: &[u8],
        timeout: Duration,
        cap: usize,
    ) -> Result<Reply, EngineError> {
        if let Some(why) = self.spent {
            return Err(EngineError::Unexpected(format!("the resident process takes no more exchanges: {why}")));
        }
        if end.is_empty() {
            return Err(EngineError::Unexpected("an empty end marker".into()));
        }
        if let Err(e) = async {
            self.attached.input.write_all(send).await?;
            self.attached.input.flush().await
        }
        .await
        {
            self.spent = Some("a request could not be written");
            return Err(EngineError::Unexpected(format!("writing to the resident process: {e}")));
        }
        let (mut out, mut err) = (Kept::default(), Kept::default());
        let read = async {
            loop {
                let chunk = match self.attached.output.next().await {
                    Some(Ok(c)) => c,
                    Some(Err(_)) | None => return ReplyEnd::Ended,
                };
                match chunk {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        out.push(&message, cap, end.len());
                    }
                    LogOutput::StdErr { message } => err.push(&message, cap, end.len()),
                    LogOutput::StdIn { .. } => {}
                }
                if out.tail == end && err.tail == end {
                    return ReplyEnd::Said;
                }
            }
        };
        let ended = tokio::time::timeout(timeout, read).await.unwrap_or(ReplyEnd::TimedOut);
        match ended {
            ReplyEnd::Said => {
                out.strip(end);
                err.strip(end);
            }
            ReplyEnd::TimedOut => self.spent = Some("an exchange passed its deadline"),
            ReplyEnd::Ended => self.spent = Some("its streams ended"),
        }
        Ok(Reply {
            end: ended,
            stdout: out.bytes,
            stdout_truncated: out.cut,
            stderr: err.bytes,
            stderr_truncated: err.cut,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(chunks: Vec<LogOutput>) -> Resident {
        Resident::new(Launched::in_memory(chunks))
    }

    fn out(s: &str) -> LogOutput {
        LogOutput::StdOut { message: s.to_string().into() }
    }

    fn err(s: &str) -> LogOutput {
        LogOutput::StdErr { message: s.to_string().into() }
    }

    const END: &[u8] = b"\n0123456789abcdef.\n";

    #[tokio::test]
    async fn an_answer_ends_when_both_streams_said_the_end_marker() {
        let mut r = said(vec![
            out("4"),
            err("oops\n0123456789abcdef"),
            out("2\n\n0123456789abcdef.\n"),
            err(".\n"),
            out("next call"),
        ]);
        let reply = r.converse(b"ask", END, Duration::from_secs(5), 1 << 20).await.expect("reply");
        assert_eq!(reply.end, ReplyEnd::Said);
        assert_eq!((reply.stdout.as_slice(), reply.stderr.as_slice()), (&b"42\n"[..], &b"oops"[..]));
    }

    #[tokio::test]
    async fn a_marker_past_the_cap_is_still_found_and_the_stream_is_flagged() {
        let mut r = said(vec![out("abcdefgh"), out("\n0123456789abcdef.\n"), err("\n0123456789abcdef.\n")]);
        let reply = r.converse(b"ask", END, Duration::from_secs(5), 20).await.expect("reply");
        assert_eq!(reply.end, ReplyEnd::Said);
        assert_eq!((reply.stdout.as_slice(), reply.stdout_truncated), (&b"abcdefgh\n0123456789a"[..], true));
        assert_eq!((reply.stderr.as_slice(), reply.stderr_truncated), (&b""[..], false));
    }

    #[tokio::test]
    async fn a_process_that_ends_mid_answer_takes_no_more_exchanges() {
        let mut r = said(vec![out("half"), err("\n0123456789abcdef.\n")]);
        let reply = r.converse(b"ask", END, Duration::from_secs(5), 1 << 20).await.expect("reply");
        assert_eq!((reply.end, reply.stdout.as_slice()), (ReplyEnd::Ended, &b"half"[..]));
        let again = r.converse(b"ask", END, Duration::from_secs(5), 1 << 20).await.expect_err("spent");
        assert_eq!(again.to_string(), "docker engine: the resident process takes no more exchanges: its streams ended");
    }
}
