//! gRPC over HTTP/2 by hand, as the gateway's tonic server speaks it: each
//! message framed with a 5-byte prefix (a compressed flag, then a big-endian
//! u32 length), `content-type: application/grpc`, and the call's end as
//! `grpc-status` / `grpc-message` trailers; an error before any message is
//! "trailers-only" (HTTP 200, the status in the headers, no body).

use bytes::Bytes;
use hyper::body::Frame;
use tokio::sync::mpsc;

use crate::server::{self, Body};

/// The most a request message may be: the gateway's `MAX_GRPC_DECODE_SIZE`.
pub const MAX_MESSAGE: usize = 1 << 20;

/// gRPC status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    Ok = 0,
    InvalidArgument = 3,
    NotFound = 5,
    AlreadyExists = 6,
    FailedPrecondition = 9,
    ResourceExhausted = 8,
    OutOfRange = 11,
    Unimplemented = 12,
    Internal = 13,
    Unavailable = 14,
    Unauthenticated = 16,
}

/// How a call ended (or ends).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub message: String,
}

impl Status {
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status { code, message: message.into() }
    }
    pub fn ok() -> Status {
        Status::new(Code::Ok, "")
    }
    pub fn invalid_argument(message: impl Into<String>) -> Status {
        Status::new(Code::InvalidArgument, message)
    }
    pub fn not_found(message: impl Into<String>) -> Status {
        Status::new(Code::NotFound, message)
    }
    pub fn failed_precondition(message: impl Into<String>) -> Status {
        Status::new(Code::FailedPrecondition, message)
    }
    pub fn internal(message: impl Into<String>) -> Status {
        Status::new(Code::Internal, message)
    }
    pub fn unauthenticated(message: impl Into<String>) -> Status {
        Status::new(Code::Unauthenticated, message)
    }
    pub fn resource_exhausted(message: impl Into<String>) -> Status {
        Status::new(Code::ResourceExhausted, message)
    }

    /// The status as `grpc-status` and (when there is one) a percent-encoded
    /// `grpc-message`.
    fn headers(&self) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", http::HeaderValue::from(self.code as u16));
        if !self.message.is_empty()
            && let Ok(v) = http::HeaderValue::from_str(&percent_encode(&self.message))
        {
            h.insert("grpc-message", v);
        }
        h
    }
}

/// `grpc-message`'s encoding: every byte outside printable ASCII, and `%`, as
/// `%XX` (gRPC's PROTOCOL-HTTP2, "Percent-Encoded").
pub fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `message` with its 5-byte prefix.
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&u32::try_from(message.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// The message bytes of every frame in `body`, or why it is not a run of
/// whole uncompressed frames.
#[cfg(test)]
pub fn unframe(body: &[u8]) -> Result<Vec<Bytes>, Status> {
    let mut messages = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (message, after) = first_frame(rest)?;
        messages.push(message);
        rest = after;
    }
    Ok(messages)
}

/// A client stream's messages, read off its body as the pieces arrive.
pub struct Incoming {
    body: mpsc::Receiver<Bytes>,
    pending: Vec<u8>,
    ready: std::collections::VecDeque<Bytes>,
}

impl Incoming {
    pub fn new(body: mpsc::Receiver<Bytes>) -> Incoming {
        Incoming { body, pending: Vec::new(), ready: std::collections::VecDeque::new() }
    }

    /// The next whole message; None once the client has ended its side.
    pub async fn next(&mut self) -> Option<Result<Bytes, Status>> {
        loop {
            if let Some(m) = self.ready.pop_front() {
                return Some(Ok(m));
            }
            let piece = self.body.recv().await?;
            self.pending.extend_from_slice(&piece);
            match take_messages(&mut self.pending) {
                Ok(m) => self.ready.extend(m),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// Takes each whole message off the front of `pending` (a client stream's bytes
/// as they arrive), leaving a partial one there for more.
pub fn take_messages(pending: &mut Vec<u8>) -> Result<Vec<Bytes>, Status> {
    let mut messages = Vec::new();
    loop {
        let Some(head) = pending.first_chunk::<5>() else { return Ok(messages) };
        let len = usize::try_from(u32::from_be_bytes([head[1], head[2], head[3], head[4]])).unwrap_or(usize::MAX);
        if pending.len() < 5 || (len <= MAX_MESSAGE && pending.len() < 5 + len) {
            return Ok(messages);
        }
        let (message, rest) = first_frame(pending)?;
        let used = pending.len() - rest.len();
        messages.push(message);
        pending.drain(..used);
    }
}

/// The first message of `body` and what follows it, checked as tonic checks a
/// request: the flag, the size limit, then the length.
fn first_frame(body: &[u8]) -> Result<(Bytes, &[u8]), Status> {
    let Some((head, rest)) = body.split_first_chunk::<5>() else {
        return Err(Status::internal("Unexpected EOF decoding stream."));
    };
    match head[0] {
        0 => {}
        1 => {
            return Err(Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            ));
        }
        f => {
            return Err(Status::internal(format!(
                "protocol error: received message with invalid compression flag: {f} (valid flags are 0 and 1), while sending request"
            )));
        }
    }
    let len = usize::try_from(u32::from_be_bytes([head[1], head[2], head[3], head[4]])).unwrap_or(usize::MAX);
    if len > MAX_MESSAGE {
        return Err(Status::new(
            Code::OutOfRange,
            format!("Error, decoded message length too large: found {len} bytes, the limit is: {MAX_MESSAGE} bytes"),
        ));
    }
    if rest.len() < len {
        return Err(Status::internal("Unexpected EOF decoding stream."));
    }
    let (message, after) = rest.split_at(len);
    Ok((Bytes::copy_from_slice(message), after))
}

/// Why a request is not a gRPC call this server takes: not `application/grpc`
/// (HTTP 415), or compressed with an encoding it does not accept.
pub fn refusal(headers: &http::HeaderMap) -> Option<http::Response<Body>> {
    let content_type = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let grpc = content_type == "application/grpc"
        || content_type.starts_with("application/grpc+")
        || content_type.starts_with("application/grpc;");
    if !grpc {
        return Some(server::whole(415, "text/plain", format!("invalid gRPC request content-type {content_type:?}")));
    }
    match headers.get("grpc-encoding").map(http::HeaderValue::as_bytes) {
        None | Some(b"identity") => None,
        Some(other) => {
            let other = String::from_utf8_lossy(other);
            let mut r = trailers_only(&Status::new(
                Code::Unimplemented,
                format!("Content is compressed with `{other}` which isn't supported"),
            ));
            r.headers_mut().insert("grpc-accept-encoding", http::HeaderValue::from_static("identity"));
            Some(r)
        }
    }
}

/// A unary call's one request message, decoded.
pub fn request<M: prost::Message + Default>(body: &[u8]) -> Result<M, Status> {
    if body.is_empty() {
        return Err(Status::internal("Missing request message."));
    }
    let (message, _) = first_frame(body)?;
    M::decode(message).map_err(|e| Status::internal(e.to_string()))
}

/// A response that is only its status, in the headers.
pub fn trailers_only(status: &Status) -> http::Response<Body> {
    let mut r = server::whole(200, "application/grpc", Bytes::new());
    r.headers_mut().extend(status.headers());
    r
}

/// A unary call's answer: `message` (already encoded), then status OK.
pub fn unary(message: &[u8]) -> http::Response<Body> {
    let (r, tx) = server::framed("application/grpc");
    // The channel holds both frames, so neither send can wait.
    let _ = tx.try_send(Frame::data(frame(message)));
    let _ = tx.try_send(Frame::trailers(Status::ok().headers()));
    r
}

/// A server-streaming call's answer and the sink that feeds it.
pub fn streaming() -> (http::Response<Body>, Sink) {
    let (r, tx) = server::framed("application/grpc");
    (r, Sink(tx))
}

/// Where a streaming call's messages go.
#[derive(Debug)]
pub struct Sink(mpsc::Sender<Frame<Bytes>>);

impl Sink {
    /// Sends one message; false once the client has gone (the stream was reset
    /// or the connection closed).
    pub async fn send(&self, message: &impl prost::Message) -> bool {
        self.0.send(Frame::data(frame(&message.encode_to_vec()))).await.is_ok()
    }

    /// Ends the call with `status`.
    pub async fn finish(&self, status: Status) {
        let _ = self.0.send(Frame::trailers(status.headers())).await;
    }

    /// Resolves once the client has gone.
    pub async fn gone(&self) {
        self.0.closed().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode("sandbox not found"), "sandbox not found");
        assert_eq!(percent_encode("100% ünïcode\n"), "100%25 %C3%BCn%C3%AFcode%0A");
    }

    #[test]
    fn frames_round_trip_and_the_prefix_is_big_endian() {
        let f = frame(b"hello");
        assert_eq!(&f[..5], &[0, 0, 0, 0, 5]);
        let both = [frame(b"hello"), frame(b"")].concat();
        assert_eq!(unframe(&both).expect("frames"), vec![Bytes::from_static(b"hello"), Bytes::new()]);
    }

    #[test]
    fn bad_frames_are_refused_as_tonic_refuses_them() {
        let compressed = [1, 0, 0, 0, 1, 0];
        assert_eq!(first_frame(&compressed).map(|_| ()).expect_err("refused").code, Code::Internal);
        let short = [0, 0, 0, 0, 9, 1, 2];
        assert_eq!(first_frame(&short).map(|_| ()).expect_err("refused").message, "Unexpected EOF decoding stream.");
        let big = (u32::try_from(MAX_MESSAGE).expect("fits") + 1).to_be_bytes();
        let huge = [0, big[0], big[1], big[2], big[3]];
        assert_eq!(first_frame(&huge).map(|_| ()).expect_err("refused").code, Code::OutOfRange);
        let limit = u32::try_from(MAX_MESSAGE).expect("fits").to_be_bytes();
        let at_limit = [&[0, limit[0], limit[1], limit[2], limit[3]][..], &vec![0u8; MAX_MESSAGE]].concat();
        assert!(first_frame(&at_limit).is_ok());
        assert_eq!(
            request::<crate::openshell::proto::HealthRequest>(&[]).expect_err("refused").message,
            "Missing request message."
        );
        // A field 1 whose length varint never ends.
        let truncated = frame(&[0x0a, 0x80]);
        assert_eq!(
            request::<crate::openshell::proto::GetSandboxRequest>(&truncated).expect_err("refused").code,
            Code::Internal
        );
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        pairs.iter().map(|(k, v)| (http::HeaderName::from_static(k), http::HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn only_uncompressed_grpc_is_taken() {
        assert!(refusal(&headers(&[("content-type", "application/grpc")])).is_none());
        assert!(
            refusal(&headers(&[("content-type", "application/grpc+proto"), ("grpc-encoding", "identity")])).is_none()
        );
        let json = refusal(&headers(&[("content-type", "application/json")])).expect("refused");
        assert_eq!(json.status(), 415);
        let gzip =
            refusal(&headers(&[("content-type", "application/grpc"), ("grpc-encoding", "gzip")])).expect("refused");
        assert_eq!(gzip.status(), 200);
        assert_eq!(gzip.headers()["grpc-status"], "12");
    }

    #[tokio::test]
    async fn a_unary_answer_is_one_frame_then_ok_trailers() {
        let r = unary(b"\x08\x01");
        assert_eq!(r.headers()["content-type"], "application/grpc");
        let body = r.into_body().collect().await.expect("body");
        let trailers = body.trailers().cloned().expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
        assert_eq!(unframe(&body.to_bytes()).expect("frames"), vec![Bytes::from_static(b"\x08\x01")]);
    }

    #[tokio::test]
    async fn an_error_is_trailers_only() {
        let r = trailers_only(&Status::not_found("sandbox not found"));
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["grpc-status"], "5");
        assert_eq!(r.headers()["grpc-message"], "sandbox not found");
        let body = r.into_body().collect().await.expect("body");
        assert!(body.trailers().is_none() && body.to_bytes().is_empty());
    }
}
