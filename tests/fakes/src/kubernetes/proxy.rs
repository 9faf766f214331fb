//! The pod proxy subresource (`pods/{name}:{port}/proxy/{path}`) and the
//! readiness probe: both reach sandboxd over HTTP/1.1 through `plimsoll-agent
//! dial` run in the pod's container, since the fake's pods have no network.

use std::time::Duration;

use bytes::Bytes;

use super::AGENT;
use super::objects::SANDBOXD_PORT;
use super::status::Status;
use crate::backing::Backing;
use crate::server::{self, Body, Request};

/// How long a relayed request may take: sandboxd's own longest exec is a
/// day, and the client's deadline ends it sooner (the fake drops the
/// `docker exec` when the client goes).
const RELAY_LIMIT: Duration = Duration::from_secs(86_400 + 60);

/// Headers that end at each hop, never relayed either way (RFC 9110 §7.6.1),
/// with the ones the proxy sets itself.
const HOP_BY_HOP: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// The target of a proxy path's pod segment: `[scheme:]name[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    /// The port asked (none: the default, 80).
    pub port: Option<u16>,
}

/// Parses a proxy path's pod segment.
pub fn target(segment: &str) -> Result<Target, String> {
    let parts: Vec<&str> = segment.split(':').collect();
    let (name, port) = match parts.as_slice() {
        [name] => (*name, None),
        [name, port] if !matches!(*name, "http" | "https") => (*name, Some(*port)),
        [_, name] => (*name, None),
        [_, name, port] => (*name, Some(*port)),
        _ => return Err(format!("invalid pod proxy target {segment:?}")),
    };
    let port = match port {
        Some(p) => Some(p.parse::<u16>().map_err(|_| format!("invalid port {p:?}"))?),
        None => None,
    };
    Ok(Target { name: name.to_string(), port })
}

/// The HTTP/1.1 request to relay: method, path and query, the client's
/// headers but for the hop-by-hop ones and its credentials, the body by
/// Content-Length, and `Connection: close` (sandboxd answers one request
/// per connection).
pub fn encode(method: &str, path: &str, query: &str, headers: &http::HeaderMap, body: &[u8], host: &str) -> Vec<u8> {
    let mut out = head(method, path, query, headers, host);
    if !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH") {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("Connection: close\r\n\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A relayed request's request line, `Host` and the client's headers but for
/// the hop-by-hop ones and its credentials; the caller ends the head.
fn head(method: &str, path: &str, query: &str, headers: &http::HeaderMap, host: &str) -> String {
    let target = if query.is_empty() { path.to_string() } else { format!("{path}?{query}") };
    let mut out = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\n");
    for (name, value) in headers {
        let n = name.as_str();
        if HOP_BY_HOP.contains(&n) || n == "authorization" {
            continue;
        }
        if let Ok(v) = value.to_str() {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
    }
    out
}

/// A parsed HTTP/1.1 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Parses an HTTP/1.1 answer read to its end: the body by Content-Length,
/// chunked, or to the end of the stream.
pub fn parse(raw: &[u8]) -> Result<Answer, String> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or("the answer has no complete head")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "the answer's head is not text")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut words = status_line.splitn(3, ' ');
    let (Some(version), Some(code)) = (words.next(), words.next()) else {
        return Err(format!("malformed status line {status_line:?}"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("malformed status line {status_line:?}"));
    }
    let status: u16 = code.parse().map_err(|_| format!("malformed status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for l in lines {
        let (k, v) = l.split_once(':').ok_or_else(|| format!("malformed header {l:?}"))?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let rest = &raw[end + 4..];
    let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    let body = if header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = header("content-length") {
        let len: usize = len.parse().map_err(|_| format!("malformed Content-Length {len:?}"))?;
        rest.get(..len).ok_or_else(|| format!("the body ended at {} of its {len} bytes", rest.len()))?.to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Answer { status, headers, body })
}

/// A chunked body's bytes.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n").ok_or("a chunk size line does not end")?;
        let size = std::str::from_utf8(&rest[..eol]).map_err(|_| "a chunk size is not text")?;
        let size = size.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size, 16).map_err(|_| format!("malformed chunk size {size:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).ok_or("a chunk ends early")?;
        out.extend_from_slice(chunk);
        rest = rest.get(size + 2..).ok_or("a chunk ends early")?;
    }
}

/// Sends `request` to `port` in container `id` and reads the whole answer.
async fn exchange(backing: &Backing, id: &str, port: u16, request: Vec<u8>, limit: Duration) -> Result<Answer, String> {
    let to = format!("127.0.0.1:{port}");
    let raw = backing.pipe(id, &[AGENT, "dial", &to], Bytes::from(request), limit).await?;
    parse(&raw)
}

/// The readiness probe: whether sandboxd in container `id` answers
/// `GET /v1/health` with 200.
pub async fn health(backing: &Backing, id: &str, limit: Duration) -> bool {
    let host = format!("127.0.0.1:{SANDBOXD_PORT}");
    let request = encode("GET", "/v1/health", "", &http::HeaderMap::new(), b"", &host);
    matches!(exchange(backing, id, SANDBOXD_PORT, request, limit).await, Ok(a) if a.status == 200)
}

/// Relays `req` (its path past `/proxy` is `rest`) to `port` of the pod whose
/// container is `id` and address `ip`, answering with what sandboxd answers;
/// 503 when it cannot be reached.
pub async fn relay(
    backing: &Backing,
    id: &str,
    ip: &str,
    port: u16,
    rest: &str,
    req: &Request,
) -> http::Response<Body> {
    let host = format!("{ip}:{port}");
    let path = if rest.is_empty() { "/" } else { rest };
    let request = encode(&req.method, path, &req.query, &req.headers, &req.body, &host);
    match exchange(backing, id, port, request, RELAY_LIMIT).await {
        Ok(a) => answer(a),
        Err(e) => Status::unavailable(format!("error trying to reach service: dial tcp {host}: {e}")).response(),
    }
}

/// The head of an upgrade request to relay: as [`encode`], but the
/// connection is kept (`Connection: Upgrade` and the `Upgrade` asked), and
/// there is no body.
pub fn encode_upgrade(method: &str, path: &str, query: &str, headers: &http::HeaderMap, host: &str) -> Vec<u8> {
    let mut out = head(method, path, query, headers, host);
    let upgrade = headers.get(http::header::UPGRADE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    out.push_str(&format!("Connection: Upgrade\r\nUpgrade: {upgrade}\r\n\r\n"));
    out.into_bytes()
}

/// The most bytes an upgrade's answer head may take.
const MAX_UPGRADE_HEAD: usize = 16 << 10;
/// How long sandboxd may take to answer an upgrade.
const UPGRADE_WITHIN: Duration = Duration::from_secs(20);

/// Relays an upgrade request to `port` of the pod whose container is `id`, as
/// the API server's upgrade-aware proxy does: the head goes through
/// `plimsoll-agent dial` in the pod; a `101` answer is passed back and the
/// connection carried both ways until either side ends; any other answer is
/// passed back whole.
pub async fn upgrade(
    backing: &Backing,
    id: &str,
    (ip, port): (&str, u16),
    rest: &str,
    req: &mut Request,
) -> http::Response<Body> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let host = format!("{ip}:{port}");
    let unreachable = |e: String| Status::unavailable(format!("error trying to reach service: dial tcp {host}: {e}"));
    let Some(on) = req.upgrade.take() else {
        return Status::bad_request("an upgrade over HTTP/2 is not possible; use HTTP/1.1").response();
    };
    let to = format!("127.0.0.1:{port}");
    let mut child = match backing.attach(id, &[AGENT, "dial", &to]) {
        Ok(c) => c,
        Err(e) => return unreachable(e).response(),
    };
    let (Some(mut input), Some(mut output)) = (child.stdin.take(), child.stdout.take()) else {
        return unreachable("no pipes to the dial".into()).response();
    };
    let path = if rest.is_empty() { "/" } else { rest };
    let head = encode_upgrade(&req.method, path, &req.query, &req.headers, &host);
    if let Err(e) = input.write_all(&head).await {
        return unreachable(e.to_string()).response();
    }
    // Sandboxd's answer head, and whatever came after it.
    let mut got = Vec::new();
    let read_head = async {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                return Ok(end + 4);
            }
            if got.len() > MAX_UPGRADE_HEAD {
                return Err("the answer's head is too long".to_string());
            }
            match output.read(&mut chunk).await {
                Ok(0) => return Err("the connection closed before an answer".into()),
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(e.to_string()),
            }
        }
    };
    let end = match tokio::time::timeout(UPGRADE_WITHIN, read_head).await {
        Ok(Ok(end)) => end,
        Ok(Err(e)) => return unreachable(e).response(),
        Err(_) => return unreachable("no answer in time".into()).response(),
    };
    let switched = got.starts_with(b"HTTP/1.1 101 ");
    if !switched {
        // Any other answer is read to its end and passed back whole.
        drop(input);
        let _ = tokio::time::timeout(UPGRADE_WITHIN, output.read_to_end(&mut got)).await;
        return match parse(&got) {
            Ok(a) => answer(a),
            Err(e) => unreachable(e).response(),
        };
    }
    let Ok(parsed) = parse(&got[..end]) else { return unreachable("a malformed 101".into()).response() };
    let early = got[end..].to_vec();
    tokio::spawn(async move {
        let Ok(upgraded) = on.await else { return };
        let (mut from_client, mut to_client) = tokio::io::split(hyper_util::rt::TokioIo::new(upgraded));
        let up = async {
            let _ = tokio::io::copy(&mut from_client, &mut input).await;
            drop(input);
        };
        let down = async {
            if to_client.write_all(&early).await.is_ok() {
                let _ = tokio::io::copy(&mut output, &mut to_client).await;
            }
            let _ = to_client.shutdown().await;
        };
        tokio::join!(up, down);
        let _ = child.wait().await;
    });
    let mut r = server::whole(101, "", Bytes::new());
    for (k, v) in parsed.headers.iter().filter(|(k, _)| matches!(k.as_str(), "connection" | "upgrade")) {
        if let (Ok(k), Ok(v)) = (http::HeaderName::from_bytes(k.as_bytes()), http::HeaderValue::from_str(v)) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

/// Sandboxd's answer as the proxy's, its hop-by-hop headers left behind.
fn answer(a: Answer) -> http::Response<Body> {
    let mut r = server::whole(a.status, "", Bytes::from(a.body));
    for (k, v) in a.headers.iter().filter(|(k, _)| !HOP_BY_HOP.contains(&k.as_str())) {
        if let (Ok(k), Ok(v)) = (http::HeaderName::from_bytes(k.as_bytes()), http::HeaderValue::from_str(v)) {
            r.headers_mut().append(k, v);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_targets_take_an_optional_scheme_and_port() {
        assert_eq!(target("p:8787"), Ok(Target { name: "p".into(), port: Some(8787) }));
        assert_eq!(target("p"), Ok(Target { name: "p".into(), port: None }));
        assert_eq!(target("http:p:8787"), Ok(Target { name: "p".into(), port: Some(8787) }));
        assert_eq!(target("https:p"), Ok(Target { name: "p".into(), port: None }));
        assert_eq!(target("p:x"), Err("invalid port \"x\"".to_string()));
        assert_eq!(target("a:b:c:d"), Err("invalid pod proxy target \"a:b:c:d\"".to_string()));
    }

    #[test]
    fn a_relayed_request_drops_credentials_and_hop_by_hop_headers() {
        let mut h = http::HeaderMap::new();
        h.insert("authorization", http::HeaderValue::from_static("Bearer secret"));
        h.insert("connection", http::HeaderValue::from_static("keep-alive"));
        h.insert("content-length", http::HeaderValue::from_static("99"));
        h.insert("x-plimsoll-sandboxd-token", http::HeaderValue::from_static("t"));
        h.insert("content-type", http::HeaderValue::from_static("application/json"));
        let raw = encode("POST", "/v1/exec", "a=1", &h, b"{}", "10.244.0.2:8787");
        let text = String::from_utf8(raw).expect("text");
        assert!(text.starts_with("POST /v1/exec?a=1 HTTP/1.1\r\nHost: 10.244.0.2:8787\r\n"), "{text}");
        assert!(text.contains("x-plimsoll-sandboxd-token: t\r\n"));
        assert!(text.contains("content-type: application/json\r\n"));
        assert!(text.ends_with("Content-Length: 2\r\nConnection: close\r\n\r\n{}"), "{text}");
        assert!(!text.contains("secret") && !text.contains("keep-alive") && !text.contains("99"));
        let get = String::from_utf8(encode("GET", "/v1/health", "", &http::HeaderMap::new(), b"", "h")).expect("get");
        assert_eq!(get, "GET /v1/health HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    }

    #[test]
    fn answers_parse_by_length_chunks_or_end_of_stream() {
        let a = parse(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\nConnection: close\r\n\r\n{\"status\":\"ok\"}")
            .expect("length");
        assert_eq!(a.status, 200);
        assert_eq!(a.body, b"{\"status\":\"ok\"}");
        assert!(a.headers.contains(&("content-type".into(), "application/json".into())));
        let c = parse(
            b"HTTP/1.1 401 Unauthorized\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .expect("chunked");
        assert_eq!((c.status, c.body.as_slice()), (401, b"abcde".as_slice()));
        let e = parse(b"HTTP/1.0 404 Not Found\r\n\r\nrest of it").expect("eof");
        assert_eq!(e.body, b"rest of it");
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"),
            Err("the body ended at 5 of its 10 bytes".to_string())
        );
        assert_eq!(parse(b"garbage"), Err("the answer has no complete head".to_string()));
        assert_eq!(parse(b"SSH-2.0 x\r\n\r\n"), Err("malformed status line \"SSH-2.0 x\"".to_string()));
    }
}
