//! Raw HTTP/1.1 against the daemon, for what a well-behaved client never sends,
//! with every refusal that changed nothing asked again over HTTP/2.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

/// An answer as it came off the wire.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Header names (lowercased) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Reply {
    /// Every value of header `name`.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers.iter().filter(|(k, _)| k == &name.to_ascii_lowercase()).map(|(_, v)| v.as_str()).collect()
    }

    /// The one value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.all(name).first().copied()
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The Connect error's code, message and not-dispatched reason.
    pub fn error(&self) -> (String, String, Option<String>) {
        let body: plimsoll_core::wire::connect::ErrorBody =
            serde_json::from_slice(&self.body).expect("a Connect error body");
        (body.code.clone(), body.message.clone(), body.reason().map(|r| r.as_str().to_string()))
    }
}

/// Sends `request` as is and reads the answer until the connection closes.
pub fn send(addr: &str, request: &[u8]) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    // A refusal may come before the whole body was sent; the answer still counts.
    let _ = s.write_all(request);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a header block");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        body = dechunk(&body);
    }
    Reply { status, headers, body }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else { return out };
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
}

/// POSTs `body` to `path` with `headers` (plus Host, Content-Length, Connection:
/// close) over HTTP/1.1. A refusal that ran nothing and changed nothing (its
/// reason is not `capacity`, which counts what is in flight) is asked again over
/// HTTP/2 with prior knowledge, and must arrive the same there: status, mark,
/// request ID and body.
pub fn post(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut req =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    let reply = send(addr, &bytes);
    if matches!(reply.header("plimsoll-not-dispatched"), Some(r) if r != "capacity") {
        let again = post_h2(addr, path, headers, body);
        let seen = |r: &Reply| {
            let h = |n: &str| r.all(n).into_iter().map(str::to_string).collect::<Vec<_>>();
            (r.status, h("plimsoll-not-dispatched"), h("plimsoll-request-id"), r.body.clone())
        };
        assert_eq!(seen(&again), seen(&reply), "POST {path} over HTTP/2 answered differently:\n{again:?}\n{reply:?}");
    }
    reply
}

/// POSTs `body` to `path` with `headers` over HTTP/2 (cleartext, prior knowledge).
pub fn post_h2(addr: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    use http_body_util::{BodyExt as _, Full};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http::<Full<hyper::body::Bytes>>();
        let mut req = hyper::Request::post(format!("http://{addr}{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(hyper::body::Bytes::copy_from_slice(body))).expect("a request");
        let resp = tokio::time::timeout(Duration::from_secs(60), client.request(req))
            .await
            .expect("an answer within 60 s")
            .unwrap_or_else(|e| panic!("POST {path} over HTTP/2 got no answer: {e:?}"));
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let body = resp.into_body().collect().await.expect("the body").to_bytes().to_vec();
        Reply { status, headers, body }
    })
}

/// A `Run` call with JSON, a token and a request ID.
pub fn run(addr: &str, token: &str, body: &str) -> Reply {
    rpc(addr, token, "Run", body)
}

/// A call of `procedure` with JSON, a token and a request ID.
pub fn rpc(addr: &str, token: &str, procedure: &str, body: &str) -> Reply {
    post(
        addr,
        &format!("/plimsoll.v1.SandboxService/{procedure}"),
        &[
            ("Content-Type", "application/json"),
            ("Authorization", &format!("Bearer {token}")),
            ("Plimsoll-Request-Id", "0123456789abcdef0123456789abcdef"),
        ],
        body.as_bytes(),
    )
}

/// A GET.
pub fn get(addr: &str, path: &str) -> Reply {
    send(addr, format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
}
