//! Answers written before the request body was read (a refusal of the token, of
//! the headers, of a too-large body) reach the client over HTTP/1.1 and HTTP/2,
//! cleartext and TLS, with their status and their mark, for every server the
//! host runs: the daemon, `mcp serve-http` and the guard.
//!
//! The client is curl, as a user would try it: it drops an answer whose stream
//! was reset before it finished sending, which is how these answers were lost.
//! Each body is either small (sent with the headers) or larger than HTTP/2's
//! first flow-control window, so the client is still sending when the answer
//! is written.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use super::{scratch, wasm_daemon};

/// Requests per server and version.
pub const ROUNDS: usize = 200;

/// How a request travels.
#[derive(Clone, Copy, Debug)]
pub enum Http {
    /// HTTP/1.1.
    One,
    /// HTTP/2 with prior knowledge (cleartext) or by ALPN (TLS).
    Two,
}

/// One curl answer: the status line's code and the headers (lowercased names).
#[derive(Debug)]
pub struct Seen {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// What curl said when it got no answer.
    pub failure: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// POSTs `body` to `url` with `headers` over `http`, trusting `ca` for https.
pub fn curl(url: &str, http: Http, ca: Option<&Path>, headers: &[(&str, &str)], body: &Path) -> Seen {
    let mut c = Command::new("curl");
    c.args(["-sS", "-o", "/dev/null", "-D", "-", "--max-time", "20", "-X", "POST"]);
    c.arg(match (http, url.starts_with("https:")) {
        (Http::One, _) => "--http1.1",
        (Http::Two, false) => "--http2-prior-knowledge",
        (Http::Two, true) => "--http2",
    });
    if let Some(ca) = ca {
        c.arg("--cacert").arg(ca);
    }
    for (k, v) in headers {
        c.arg("-H").arg(format!("{k}: {v}"));
    }
    c.arg("--data-binary").arg(format!("@{}", body.display())).arg(url);
    let o = c.output().expect("curl (Debian's curl package) runs");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut lines = text.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Seen { status, headers, failure: String::from_utf8_lossy(&o.stderr).trim().to_string() }
}

/// Two bodies: a small one, and one larger than HTTP/2's first window (64 KiB).
pub fn bodies(dir: &Path, small: &str) -> [PathBuf; 2] {
    let (s, l) = (dir.join("small.json"), dir.join("large.json"));
    std::fs::write(&s, small).expect("write");
    let padding = "x".repeat(256 << 10);
    std::fs::write(&l, format!(r#"{{"protocol":4,"javascript":{{"code":"1"}},"traceId":"{padding}"}}"#))
        .expect("write");
    [s, l]
}

/// Sends [`ROUNDS`] requests over each version, alternating the bodies, and
/// checks each answer with `ok`; panics naming every answer that did not arrive
/// or did not pass, with the count.
pub fn stress(
    name: &str,
    url: &str,
    ca: Option<&Path>,
    headers: &[(&str, &str)],
    bodies: &[PathBuf; 2],
    ok: impl Fn(&Seen) -> bool,
) {
    for http in [Http::One, Http::Two] {
        let mut bad = Vec::new();
        for i in 0..ROUNDS {
            let seen = curl(url, http, ca, headers, &bodies[i % 2]);
            if !ok(&seen) {
                let body = if i % 2 == 0 { "small" } else { "large" };
                bad.push(format!(
                    "#{i} ({body} body): status {} {:?}; curl said {:?}",
                    seen.status, seen.headers, seen.failure
                ));
            }
        }
        assert!(
            bad.is_empty(),
            "{name} over {http:?}: {} of {ROUNDS} answers lost or wrong:\n{}",
            bad.len(),
            bad.join("\n")
        );
    }
}

fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.cert.pem()).expect("write cert");
    std::fs::write(&k, cert.signing_key.serialize_pem()).expect("write key");
    (c, k)
}

/// The marks of a refused token: 401, `permission`, the request ID echoed.
fn refused_token(s: &Seen) -> bool {
    s.status == 401
        && s.header("plimsoll-not-dispatched") == Some("permission")
        && s.header("plimsoll-request-id") == Some("0123456789abcdef0123456789abcdef")
}

const RUN_HEADERS: [(&str, &str); 3] = [
    ("Content-Type", "application/json"),
    ("Authorization", "Bearer not-the-token"),
    ("Plimsoll-Request-Id", "0123456789abcdef0123456789abcdef"),
];

#[test]
fn the_daemons_refusals_before_the_body_arrive_over_h2_cleartext_and_tls() {
    let dir = scratch("early-daemon");
    let bodies = bodies(&dir, r#"{"protocol":4,"javascript":{"code":"console.log(1)"}}"#);
    let (d, _token) = wasm_daemon("early-daemon-plain", "ci", &[]);
    let url = format!("{}/plimsoll.v1.SandboxService/Run", d.url());
    stress("the daemon (cleartext)", &url, None, &RUN_HEADERS, &bodies, refused_token);
    // A refusal of the headers, before the body: an authenticated caller's content type.
    let (d2, token) = wasm_daemon("early-daemon-ctype", "ci", &[]);
    let bearer = format!("Bearer {token}");
    let wrong_type = [("Content-Type", "text/plain"), ("Authorization", bearer.as_str()), RUN_HEADERS[2]];
    let url2 = format!("{}/plimsoll.v1.SandboxService/Run", d2.url());
    stress("the daemon (content type)", &url2, None, &wrong_type, &bodies, |s| {
        s.status == 400 && s.header("plimsoll-not-dispatched") == Some("request")
    });
    let (cert, key) = self_signed(&dir);
    let (c, k) = (cert.display().to_string(), key.display().to_string());
    let (tls, _) = wasm_daemon("early-daemon-tls", "ci", &[("PLIMSOLL_TLS_CERT", &c), ("PLIMSOLL_TLS_KEY", &k)]);
    let url =
        format!("https://localhost:{}/plimsoll.v1.SandboxService/Run", tls.addr.rsplit(':').next().expect("port"));
    stress("the daemon (TLS)", &url, Some(&cert), &RUN_HEADERS, &bodies, refused_token);
}

#[test]
fn the_guards_refusals_before_the_body_arrive_over_h2() {
    let dir = scratch("early-guard");
    let bodies = bodies(&dir, r#"{"method":"GET","path":"/items","body":null}"#);
    let rt = super::rt();
    let guard = plimsoll_runtime::plugin::guard::Guard::new("/v1/guard");
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
    let addr = listener.local_addr().expect("addr");
    rt.spawn(Arc::clone(&guard).serve(listener));
    let url = format!("http://{addr}/v1/guard");
    let headers = [("Content-Type", "application/json"), ("Authorization", "Bearer no-such-run")];
    stress("the guard", &url, None, &headers, &bodies, |s| s.status == 401);
}
