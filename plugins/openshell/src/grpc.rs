//! gRPC over the host's `plimsoll:host/http` (HTTP/2 to the gateway, whose
//! client certificate the host holds): unary calls and server streams, each
//! message in gRPC's five-byte frame, the status read from the trailers (or,
//! for an answer with no messages, from the head).

use std::time::{Duration, Instant};

use crate::plimsoll::host::http::{self, Incoming, Request};

/// The endpoint alias the host maps to the operator's gateway.
const ENDPOINT: &str = "gateway";
/// The largest message plimsoll takes from the gateway.
pub const MAX_MESSAGE: usize = 4 << 20;
/// The longest one piece of a stream is waited for before the deadline is looked at again.
const POLL: Duration = Duration::from_millis(500);

/// Why a call gave no answer.
#[derive(Debug, PartialEq, Eq)]
pub enum Failed {
    /// The gateway answered with a gRPC status other than OK.
    Status { code: u32, message: String },
    /// No gRPC answer: refused by the host, unreachable, not gRPC, cut short.
    Transport(String),
}

/// gRPC's name for a status code.
fn code_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(code as usize).copied().unwrap_or("an unknown status")
}

/// `NOT_FOUND`.
pub const NOT_FOUND: u32 = 5;

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Status { code, message } => write!(f, "the gateway answered {}: {message}", code_name(*code)),
            Failed::Transport(e) => f.write_str(e),
        }
    }
}

impl From<Failed> for String {
    fn from(f: Failed) -> String {
        f.to_string()
    }
}

/// A message in its frame.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// Takes every whole frame off the front of `buf`.
fn unframe(buf: &mut Vec<u8>) -> Result<Vec<Vec<u8>>, Failed> {
    let mut out = Vec::new();
    while let Some(head) = buf.get(..5) {
        if head[0] != 0 {
            return Err(Failed::Transport(
                "the gateway sent a compressed message, which plimsoll did not ask for".into(),
            ));
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > MAX_MESSAGE {
            return Err(Failed::Transport(format!(
                "the gateway sent a message of {len} bytes, over plimsoll's {MAX_MESSAGE}"
            )));
        }
        if buf.len() < 5 + len {
            break;
        }
        out.push(buf[5..5 + len].to_vec());
        buf.drain(..5 + len);
    }
    Ok(out)
}

/// Percent-decodes a `grpc-message`.
fn decode_message(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(x) = v.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(x);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    plimsoll_plugin_remote::vendor_text(&out)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// The status in `headers`, if they carry one: Ok for OK.
fn status(headers: &[(String, String)]) -> Option<Result<(), Failed>> {
    let code = header(headers, "grpc-status")?;
    let Ok(code) = code.trim().parse::<u32>() else {
        return Some(Err(Failed::Transport(format!("the gateway's grpc-status {code:?} is not a number"))));
    };
    if code == 0 {
        return Some(Ok(()));
    }
    let message = header(headers, "grpc-message").map(decode_message).unwrap_or_default();
    Some(Err(Failed::Status { code, message }))
}

/// A server stream's messages as they arrive. Dropping it cancels the call: the
/// host resets the HTTP/2 stream, which the gateway takes as a cancel.
pub struct Stream {
    incoming: Incoming,
    buf: Vec<u8>,
    ready: std::collections::VecDeque<Vec<u8>>,
    ended: bool,
    method: &'static str,
}

/// What waiting on a stream gave.
pub enum Next {
    Message(Vec<u8>),
    /// The stream ended with OK.
    End,
    /// The deadline passed first; the stream is still open.
    Late,
}

fn timeout_ms(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX).max(1)
}

/// The HTTP/2 request of a call of `method` with `message`.
fn request(method: &str, message: &[u8], budget: Duration) -> Request {
    Request {
        endpoint: ENDPOINT.into(),
        target: None,
        method: "POST".into(),
        path: format!("/openshell.v1.OpenShell/{method}"),
        headers: vec![("content-type".into(), "application/grpc".into())],
        body: frame(message),
        timeout_ms: timeout_ms(budget),
    }
}

/// Asks the host to carry the run's grant in through `count` streams of
/// `method` (a bidirectional byte stream), each opening with `init`, its bytes
/// in field `field` of each later message.
pub fn relay(method: &'static str, init: &[u8], field: u32, count: u32) -> Result<(), String> {
    // The host keeps the streams for the plugin's call; each lives as long as it may.
    // The host frames each message of the stream itself, the first too.
    let req = Request { body: init.to_vec(), ..request(method, &[], Duration::from_secs(24 * 3600)) };
    http::relay(&req, field, count).map_err(|e| format!("{method}: {e}"))
}

/// Opens a call of `method` (`CreateSandbox`) with `message`, allowed `budget` in all.
pub fn open(method: &'static str, message: &[u8], budget: Duration) -> Result<Stream, Failed> {
    let incoming =
        http::open(&request(method, message, budget)).map_err(|e| Failed::Transport(format!("{method}: {e}")))?;
    let code = incoming.status();
    let headers = incoming.headers();
    if code != 200 {
        return Err(Failed::Transport(format!("{method}: the gateway answered HTTP {code}, not gRPC")));
    }
    if !header(&headers, "content-type").is_some_and(|t| t.starts_with("application/grpc")) {
        return Err(Failed::Transport(format!("{method}: the gateway's answer is not gRPC (its content-type)")));
    }
    // A trailers-only answer: the status is in the head.
    let mut s = Stream { incoming, buf: Vec::new(), ready: Default::default(), ended: false, method };
    if let Some(st) = status(&headers) {
        st.map_err(|e| s.named(e))?;
        s.ended = true;
    }
    Ok(s)
}

impl Stream {
    fn named(&self, f: Failed) -> Failed {
        match f {
            Failed::Transport(e) if !e.starts_with(self.method) => Failed::Transport(format!("{}: {e}", self.method)),
            other => other,
        }
    }

    /// The next message, waiting until `deadline` at most.
    pub fn next(&mut self, deadline: Instant) -> Result<Next, Failed> {
        loop {
            if let Some(m) = self.ready.pop_front() {
                return Ok(Next::Message(m));
            }
            if self.ended {
                return Ok(Next::End);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Next::Late);
            }
            match self.incoming.read(timeout_ms(left.min(POLL))) {
                Ok(Some(piece)) => {
                    self.buf.extend_from_slice(&piece);
                    let whole = unframe(&mut self.buf).map_err(|e| self.named(e))?;
                    self.ready.extend(whole);
                }
                Ok(None) => {
                    if !self.buf.is_empty() {
                        return Err(self.named(Failed::Transport("the gateway's stream ended inside a message".into())));
                    }
                    let trailers = self.incoming.trailers();
                    let st = status(&trailers).unwrap_or_else(|| {
                        Err(Failed::Transport("the gateway's stream ended without a gRPC status".into()))
                    });
                    st.map_err(|e| self.named(e))?;
                    self.ended = true;
                }
                Err(e) => return Err(self.named(Failed::Transport(e))),
            }
        }
    }
}

/// A unary call of `method` with `message`: exactly one message back. Sent
/// whole, so the host reads the answer too (it books the sandbox a create made).
pub fn call(method: &'static str, message: &[u8], budget: Duration) -> Result<Vec<u8>, Failed> {
    let named = |e: String| Failed::Transport(format!("{method}: {e}"));
    let r = http::send(&request(method, message, budget)).map_err(named)?;
    if r.status != 200 {
        return Err(named(format!("the gateway answered HTTP {}, not gRPC", r.status)));
    }
    if !header(&r.headers, "content-type").is_some_and(|t| t.starts_with("application/grpc")) {
        return Err(named("the gateway's answer is not gRPC (its content-type)".into()));
    }
    let mut body = r.body;
    let mut messages = unframe(&mut body).map_err(|e| named(e.to_string()))?;
    if !body.is_empty() {
        return Err(named("the gateway's answer ended inside a message".into()));
    }
    let st = status(&r.trailers)
        .or_else(|| status(&r.headers))
        .unwrap_or_else(|| Err(Failed::Transport("the gateway's answer carries no gRPC status".into())));
    st.map_err(|e| match e {
        Failed::Transport(t) => named(t),
        other => other,
    })?;
    match messages.len() {
        1 => Ok(messages.remove(0)),
        0 => Err(named("the gateway answered OK with no message".into())),
        n => Err(named(format!("the gateway answered a unary call with {n} messages"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_taken_whole_and_a_compressed_or_huge_one_is_refused() {
        let mut buf = frame(b"abc");
        buf.extend_from_slice(&frame(b"")[..]);
        buf.extend_from_slice(&frame(b"defg")[..6]);
        assert_eq!(unframe(&mut buf), Ok(vec![b"abc".to_vec(), vec![]]));
        assert_eq!(buf, frame(b"defg")[..6].to_vec(), "the partial frame waits for the rest");
        let mut compressed = vec![1, 0, 0, 0, 0];
        assert!(matches!(unframe(&mut compressed), Err(Failed::Transport(e)) if e.contains("compressed")));
        let mut huge = vec![0, 0xff, 0xff, 0xff, 0xff];
        assert!(matches!(unframe(&mut huge), Err(Failed::Transport(e)) if e.contains("over plimsoll's")));
    }

    #[test]
    fn the_status_is_read_with_its_message() {
        let h = |code: &str, msg: &str| {
            vec![("grpc-status".to_string(), code.to_string()), ("grpc-message".into(), msg.into())]
        };
        assert_eq!(status(&h("0", "")), Some(Ok(())));
        assert_eq!(
            status(&h("5", "sandbox%20not%20found")),
            Some(Err(Failed::Status { code: 5, message: "sandbox not found".into() }))
        );
        assert_eq!(status(&[]), None);
        assert_eq!(
            Failed::Status { code: 9, message: "sandbox is not ready".into() }.to_string(),
            "the gateway answered FAILED_PRECONDITION: sandbox is not ready"
        );
        assert!(matches!(status(&h("x", "")), Some(Err(Failed::Transport(_)))));
    }
}
