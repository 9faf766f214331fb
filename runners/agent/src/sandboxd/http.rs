//! The little HTTP/1.1 sandboxd speaks: one request per connection, a head of
//! at most [`MAX_HEAD`] read within a deadline, a body framed by
//! `Content-Length` only, and answers that always carry `Connection: close` and
//! a `Content-Length`. It only parses and frames; what a request means is
//! decided in [`super`].

use std::fmt;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The most bytes a request head may take, its closing blank line included:
/// the head is buffered whole before anyone is authenticated.
pub const MAX_HEAD: usize = 16 << 10;

/// The largest body accepted (an exec's stdin, base64, in JSON): bodies are
/// buffered whole, and a pod has 512 MiB for everything.
pub const MAX_BODY: u64 = 64 << 20;

/// How long a body may go without a byte arriving before the request is dropped.
pub const BODY_IDLE: Duration = Duration::from_secs(10);

/// A request refused with an HTTP status; its answer is `{"error": message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl Refusal {
    /// A refusal with `status` saying `message`.
    pub fn new(status: u16, message: impl Into<String>) -> Refusal {
        Refusal { status, message: message.into() }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status, reason(self.status), self.message)
    }
}

impl std::error::Error for Refusal {}

/// A source of request bytes that can bound how long one read waits.
pub trait Source: Read {
    /// Makes the next reads wait at most `d` for a byte.
    ///
    /// # Errors
    ///
    /// The timeout could not be set.
    fn wait_at_most(&mut self, d: Duration) -> io::Result<()>;
}

impl Source for TcpStream {
    fn wait_at_most(&mut self, d: Duration) -> io::Result<()> {
        // A zero timeout means "never" to the socket; the caller's deadline has passed anyway.
        self.set_read_timeout(Some(d.max(Duration::from_millis(1))))
    }
}

impl Source for &[u8] {
    fn wait_at_most(&mut self, _: Duration) -> io::Result<()> {
        Ok(())
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    /// The request target as sent (path and query).
    pub target: String,
    /// The header fields in order, names as sent.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The target's path, without its query.
    pub fn path(&self) -> &str {
        self.target.split_once('?').map_or(self.target.as_str(), |(p, _)| p)
    }

    /// Every value of the header `name` (case-insensitive), in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
    }

    /// How long the body is, by `Content-Length`; 0 without one unless
    /// `required`.
    ///
    /// # Errors
    ///
    /// 411 for a `Transfer-Encoding` (chunked bodies are not read) or, when
    /// `required`, no `Content-Length`; 400 for a malformed or ambiguous one;
    /// 413 past [`MAX_BODY`].
    pub fn body_length(&self, required: bool) -> Result<u64, Refusal> {
        if !self.all("transfer-encoding").is_empty() {
            return Err(Refusal::new(
                411,
                "a body sent with Transfer-Encoding is not read: send it with Content-Length",
            ));
        }
        let lengths = self.all("content-length");
        let Some(first) = lengths.first() else {
            return if required { Err(Refusal::new(411, "the request has no Content-Length")) } else { Ok(0) };
        };
        if lengths.iter().any(|l| l != first) {
            return Err(Refusal::new(400, "the request has conflicting Content-Length headers"));
        }
        if first.is_empty() || !first.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Refusal::new(400, format!("Content-Length {first:?} is not a number")));
        }
        // All digits: only an overflow fails, and that is too large too.
        let n = first.parse::<u64>().unwrap_or(u64::MAX);
        if n > MAX_BODY {
            return Err(Refusal::new(413, format!("the body is {n} bytes; at most {MAX_BODY} are read")));
        }
        Ok(n)
    }
}

/// Reads a request head, which must end by `deadline`; returns it and the body
/// bytes that came with it.
///
/// # Errors
///
/// 431 past [`MAX_HEAD`], 408 at the deadline, 400 when it is malformed or the
/// connection ends first.
pub fn read_head(conn: &mut impl Source, deadline: Instant) -> Result<(Head, Vec<u8>), Refusal> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        // The terminator may straddle two reads: look from three bytes back.
        let from = buf.len().saturating_sub(3);
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Refusal::new(408, "the request head did not arrive in time"));
        }
        conn.wait_at_most(left).map_err(|e| Refusal::new(500, format!("setting the read timeout: {e}")))?;
        let n = match conn.read(&mut chunk) {
            Ok(0) => return Err(Refusal::new(400, "the connection ended inside the request head")),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Refusal::new(408, "the request head did not arrive in time"));
            }
            Err(e) => return Err(Refusal::new(400, format!("reading the request head: {e}"))),
        };
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + at + 4;
            if end > MAX_HEAD {
                break;
            }
            let rest = buf.split_off(end);
            return Ok((parse_head(&buf[..end - 4])?, rest));
        }
        if buf.len() >= MAX_HEAD {
            break;
        }
    }
    Err(Refusal::new(431, format!("the request head is over {MAX_HEAD} bytes")))
}

/// Parses a head (without its closing blank line).
fn parse_head(raw: &[u8]) -> Result<Head, Refusal> {
    let text = std::str::from_utf8(raw).map_err(|_| Refusal::new(400, "the request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts.as_slice() else {
        return Err(Refusal::new(400, format!("malformed request line {line:?}")));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) || !target.starts_with('/') {
        return Err(Refusal::new(400, format!("malformed request line {line:?}")));
    }
    if !matches!(*version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(Refusal::new(400, format!("unsupported protocol {version:?}: HTTP/1.1 only")));
    }
    let mut headers = Vec::new();
    for line in lines {
        if line.starts_with([' ', '\t']) {
            return Err(Refusal::new(400, "folded header lines are not accepted"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Refusal::new(400, format!("malformed header line {line:?}")));
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Refusal::new(400, format!("malformed header name {name:?}")));
        }
        headers.push((name.to_owned(), value.trim_matches([' ', '\t']).to_owned()));
    }
    Ok(Head { method: (*method).to_owned(), target: (*target).to_owned(), headers })
}

/// Reads a body of `len` bytes, `started` of which came with the head.
///
/// # Errors
///
/// 408 when no byte arrives for [`BODY_IDLE`], 400 when the connection ends first.
pub fn read_body(conn: &mut impl Source, mut started: Vec<u8>, len: u64) -> Result<Vec<u8>, Refusal> {
    // Anything past the body would be a second request, which is not served.
    started.truncate(usize::try_from(len).unwrap_or(usize::MAX));
    let missing = len - started.len() as u64;
    conn.wait_at_most(BODY_IDLE).map_err(|e| Refusal::new(500, format!("setting the read timeout: {e}")))?;
    let mut body = started;
    match conn.take(missing).read_to_end(&mut body) {
        Ok(_) => {}
        Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
            return Err(Refusal::new(408, format!("the body stalled after {} of {len} bytes", body.len())));
        }
        Err(e) => return Err(Refusal::new(400, format!("reading the body: {e}"))),
    }
    if (body.len() as u64) < len {
        return Err(Refusal::new(400, format!("the connection ended after {} of {len} body bytes", body.len())));
    }
    Ok(body)
}

/// An answer: a status, extra header fields, and a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    /// Fields beside the ones every answer carries.
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    /// A JSON answer of `value`.
    pub fn json(status: u16, value: &impl serde::Serialize) -> Answer {
        // Our own answer types serialise infallibly; an error body stands in otherwise.
        let body = serde_json::to_vec(value).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}").into_bytes());
        Answer { status, headers: Vec::new(), body }
    }

    /// The bytes on the wire: status line, `Content-Type`, `Content-Length`,
    /// `Connection: close`, the extra fields, and the body.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.body.len()
        );
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut bytes = head.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }

    /// Writes the answer.
    ///
    /// # Errors
    ///
    /// The connection would not take it.
    pub fn write_to(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&self.to_bytes())?;
        out.flush()
    }
}

impl From<Refusal> for Answer {
    fn from(r: Refusal) -> Answer {
        Answer::json(r.status, &serde_json::json!({ "error": r.message }))
    }
}

/// The reason phrase of the statuses sandboxd answers with.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_of(raw: &[u8]) -> Result<(Head, Vec<u8>), Refusal> {
        read_head(&mut &raw[..], Instant::now() + Duration::from_secs(10))
    }

    fn status(r: Result<impl fmt::Debug, Refusal>) -> u16 {
        r.expect_err("a refusal").status
    }

    #[test]
    fn a_head_is_parsed_and_the_body_bytes_after_it_are_kept() {
        let raw = b"POST /v1/exec?x=1 HTTP/1.1\r\nHost: x\r\ncontent-length:  5 \r\nX-Plimsoll-Sandboxd-Token: tok\r\n\r\nhel";
        let (head, rest) = head_of(raw).expect("a head");
        assert_eq!(head.method, "POST");
        assert_eq!(head.target, "/v1/exec?x=1");
        assert_eq!(head.path(), "/v1/exec");
        assert_eq!(head.all("X-PLIMSOLL-SANDBOXD-TOKEN"), ["tok"]);
        assert_eq!(head.body_length(true), Ok(5));
        assert_eq!(rest, b"hel");
        let body = read_body(&mut &b"lo and more"[..], rest, 5).expect("the body");
        assert_eq!(body, b"hello");
    }

    #[test]
    fn a_head_over_16_kib_is_refused_with_431() {
        let mut raw = b"GET /v1/health HTTP/1.1\r\nX-Pad: ".to_vec();
        raw.resize(MAX_HEAD + 10, b'a');
        raw.extend_from_slice(b"\r\n\r\n");
        assert_eq!(status(head_of(&raw)), 431);
        // The limit counts the closing blank line: exactly 16 KiB passes, one byte more does not.
        let mut exact = b"GET /v1/health HTTP/1.1\r\nX-Pad: ".to_vec();
        exact.resize(MAX_HEAD - 4, b'a');
        exact.extend_from_slice(b"\r\n\r\n");
        assert!(head_of(&exact).is_ok());
        let mut over = b"GET /v1/health HTTP/1.1\r\nX-Pad: a".to_vec();
        over.resize(MAX_HEAD - 3, b'a');
        over.extend_from_slice(b"\r\n\r\n");
        assert_eq!(status(head_of(&over)), 431);
    }

    #[test]
    fn a_head_that_does_not_arrive_by_the_deadline_is_refused_with_408() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        client.write_all(b"GET /v1/health HTTP/1.1\r\n").expect("write");
        let (mut server, _) = listener.accept().expect("accept");
        let started = Instant::now();
        let r = read_head(&mut server, Instant::now() + Duration::from_millis(200));
        assert_eq!(status(r), 408);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn malformed_heads_are_refused_with_400() {
        for raw in [
            &b"GET /v1/health\r\n\r\n"[..],
            b"GET /v1/health HTTP/2.0\r\n\r\n",
            b"GET v1/health HTTP/1.1\r\n\r\n",
            b"GET /v1/health HTTP/1.1\r\nno colon\r\n\r\n",
            b"GET /v1/health HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
            b"GET /v1/health HTTP/1.1\r\nA: \xff\r\n\r\n",
            b"GET /v1/health HTTP/1.1\r\n",
        ] {
            assert_eq!(status(head_of(raw)), 400, "{}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn a_post_without_content_length_is_refused_with_411() {
        let (head, _) = head_of(b"POST /v1/exec HTTP/1.1\r\nHost: x\r\n\r\n").expect("a head");
        assert_eq!(status(head.body_length(true)), 411);
        assert_eq!(head.body_length(false), Ok(0));
    }

    #[test]
    fn a_chunked_body_is_refused_with_411() {
        let (head, _) = head_of(b"POST /v1/exec HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n")
            .expect("head");
        assert_eq!(status(head.body_length(true)), 411);
    }

    #[test]
    fn a_body_over_64_mib_is_refused_with_413_and_bad_lengths_with_400() {
        let length = |v: &str| {
            let raw = format!("POST /v1/exec HTTP/1.1\r\nContent-Length: {v}\r\n\r\n");
            head_of(raw.as_bytes()).expect("a head").0.body_length(true)
        };
        assert_eq!(length(&MAX_BODY.to_string()), Ok(MAX_BODY));
        assert_eq!(status(length(&(MAX_BODY + 1).to_string())), 413);
        assert_eq!(status(length("99999999999999999999999")), 413);
        assert_eq!(status(length("-1")), 400);
        assert_eq!(status(length("1, 2")), 400);
        let (twice, _) = head_of(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n").expect("head");
        assert_eq!(status(twice.body_length(true)), 400);
    }

    #[test]
    fn a_body_cut_short_is_refused_with_400() {
        assert_eq!(status(read_body(&mut &b"abc"[..], Vec::new(), 10)), 400);
    }

    #[test]
    fn an_answer_carries_its_length_and_connection_close() {
        let answer: Answer = Refusal::new(404, "no such path \"/x\"").into();
        let text = String::from_utf8(answer.to_bytes()).expect("utf-8");
        let body = r#"{"error":"no such path \"/x\""}"#;
        assert_eq!(
            text,
            format!(
                "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        );
        let mut with = Answer::json(405, &serde_json::json!({"error": "x"}));
        with.headers.push(("Allow", "POST".into()));
        assert!(
            String::from_utf8(with.to_bytes()).expect("utf-8").contains("\r\nConnection: close\r\nAllow: POST\r\n\r\n")
        );
    }
}
