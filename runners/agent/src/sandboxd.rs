//! `plimsoll-agent sandboxd`: the daemon in an agent-sandbox pod. It is the
//! pod's one container's main process (PID 1), started as root with only
//! CAP_SETUID and CAP_SETGID, and runs each exec it is asked for as the guest
//! uid, never as itself.
//!
//! It serves HTTP/1.1 on `--listen`, one request per connection, one thread per
//! connection (at most [`MAX_CONNECTIONS`]):
//!
//! - `GET /v1/health`: 200 `{"status":"ok"}`, no token needed (a readiness probe).
//! - `POST /v1/exec`: runs a command as the guest (see [`exec`]); at most
//!   [`MAX_EXECS`] at once, more are answered 429 `{"error":"busy"}`.
//! - `POST /v1/relay?port=N`: an HTTP/1.1 upgrade carried to the guest's
//!   broker relay on loopback port `N` (see [`relay`]), a granted run's way to
//!   the host's broker.
//!
//! Every request but the health check carries [`TOKEN_HEADER`], whose SHA-256
//! must be `--token-sha256` (401 `{"error":"unauthenticated"}` otherwise); the
//! pod's spec holds only the hash, so reading the spec gives no way in.

mod exec;
mod http;
mod relay;

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use sha2::{Digest as _, Sha256};

use crate::procs;
use exec::{Children, ExecRequest, RunAs};
use http::{Answer, Refusal};

/// The guest's uid (and gid) when `--guest-uid` is not given.
pub const DEFAULT_GUEST_UID: u32 = 61000;

/// The most execs running at once.
pub const MAX_EXECS: usize = 16;

/// The most connections served at once (each a thread; the pod's pids limit
/// counts threads, and the guest's processes need most of it).
pub const MAX_CONNECTIONS: usize = 64;

/// How long a request head may take to arrive.
pub const HEAD_WITHIN: Duration = Duration::from_secs(10);

/// The header carrying the token.
pub const TOKEN_HEADER: &str = "X-Plimsoll-Sandboxd-Token";

/// How long one write of an answer may wait for the client to read.
const WRITE_WITHIN: Duration = Duration::from_secs(30);

/// How long, after its answer, a connection is read and dropped: closing a
/// socket with unread bytes resets it, which could lose the answer (a 413
/// sent before the body).
const LINGER: Duration = Duration::from_secs(2);

const HEALTH: &str = "/v1/health";
const EXEC: &str = "/v1/exec";
const RELAY: &str = "/v1/relay";

/// What a request comes to: an answer, or a relay to carry once the 101 is sent.
enum Outcome {
    Answer(Answer),
    /// The guest's relay, and the bytes read past the request's head.
    Relay(TcpStream, Vec<u8>),
}

/// What `sandboxd` was started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub listen: SocketAddr,
    pub token: TokenHash,
    pub guest_uid: u32,
}

/// Parses `--listen ADDR:PORT --token-sha256 HEX64 [--guest-uid UID]`.
///
/// # Errors
///
/// A flag unknown, repeated, missing or without a valid value.
pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let (mut listen, mut token, mut guest_uid) = (None, None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let repeated = match flag.as_str() {
            "--listen" => {
                let addr = value.parse().map_err(|_| format!("--listen {value:?} is not ADDR:PORT"))?;
                listen.replace(addr).is_some()
            }
            "--token-sha256" => token.replace(TokenHash::parse(value)?).is_some(),
            "--guest-uid" => {
                let uid: u32 = value.parse().map_err(|_| format!("--guest-uid {value:?} is not a uid"))?;
                if uid == 0 || uid == u32::MAX {
                    return Err(format!("--guest-uid {uid} is not a guest: execs would run as root or fail"));
                }
                guest_uid.replace(uid).is_some()
            }
            other => return Err(format!("unknown flag {other:?}")),
        };
        if repeated {
            return Err(format!("{flag} is given twice"));
        }
    }
    Ok(Options {
        listen: listen.ok_or("--listen ADDR:PORT is required")?,
        token: token.ok_or("--token-sha256 HEX64 is required")?,
        guest_uid: guest_uid.unwrap_or(DEFAULT_GUEST_UID),
    })
}

/// The SHA-256 of the token requests must carry.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenHash([u8; 32]);

impl std::fmt::Debug for TokenHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenHash({})", hex::encode(self.0))
    }
}

impl TokenHash {
    /// Parses the hash as given on the command line: 64 lowercase hex digits.
    ///
    /// # Errors
    ///
    /// Any other text.
    pub fn parse(text: &str) -> Result<TokenHash, String> {
        let bad = || format!("--token-sha256 {text:?} is not 64 lowercase hex digits");
        if text.len() != 64 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(bad());
        }
        let mut hash = [0u8; 32];
        hex::decode_to_slice(text, &mut hash).map_err(|_| bad())?;
        Ok(TokenHash(hash))
    }

    /// The hash of `token`.
    #[cfg(test)]
    pub fn of(token: &str) -> TokenHash {
        TokenHash(Sha256::digest(token.as_bytes()).into())
    }

    /// Whether `presented` (every value of the token header) is exactly one
    /// token with this hash. The hashes are compared in constant time.
    pub fn admits(&self, presented: &[&str]) -> bool {
        let [token] = presented else { return false };
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let diff = hash.iter().zip(&self.0).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(diff) == 0
    }
}

/// Holds one of a limited number of places until dropped.
struct Slot<'a>(&'a AtomicUsize);

impl<'a> Slot<'a> {
    fn take(count: &'a AtomicUsize, max: usize) -> Option<Slot<'a>> {
        // Built only once the place is taken: dropping a Slot gives one back.
        acquire(count, max).then(|| Slot(count))
    }
}

/// Counts one more place taken in `count`, if fewer than `max` are.
fn acquire(count: &AtomicUsize, max: usize) -> bool {
    count.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < max).then(|| n + 1)).is_ok()
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The server's state, shared by the connection threads.
#[derive(Debug)]
pub struct Server {
    token: TokenHash,
    run_as: RunAs,
    children: Children,
    execs: AtomicUsize,
    max_execs: usize,
    connections: AtomicUsize,
    /// The port sandboxd listens on, which a relay may not name.
    own_port: u16,
}

impl Server {
    fn new(token: TokenHash, run_as: RunAs, max_execs: usize, own_port: u16) -> Server {
        Server {
            token,
            run_as,
            children: Children::default(),
            execs: AtomicUsize::new(0),
            max_execs,
            connections: AtomicUsize::new(0),
            own_port,
        }
    }

    /// Accepts connections forever, each served on its own thread.
    fn serve(self: &Arc<Self>, listener: &TcpListener) -> ! {
        loop {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                // Out of descriptors or memory, or a connection gone before it was
                // taken: the listener itself is fine, so wait and go on.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            };
            if !acquire(&self.connections, MAX_CONNECTIONS) {
                let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                let _ = Answer::from(Refusal::new(503, "too many connections")).write_to(&mut &stream);
                continue;
            }
            let server = Arc::clone(self);
            let spawned = std::thread::Builder::new().name("sandboxd-conn".into()).spawn(move || {
                // Gives back the place taken above when the connection is done.
                let _held = Slot(&server.connections);
                server.handle(stream);
            });
            if spawned.is_err() {
                // No thread (the pids limit): the connection is dropped unanswered.
                self.connections.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// Serves one connection: one request, one answer, then the close; or a
    /// relay, carried until both its ways end.
    fn handle(&self, mut stream: TcpStream) {
        let _ = stream.set_write_timeout(Some(WRITE_WITHIN));
        let answer = match self.respond(&mut stream) {
            Ok(Outcome::Answer(a)) => a,
            Ok(Outcome::Relay(to, started)) => {
                if (&stream).write_all(&relay::switching()).is_ok() {
                    relay::carry(&stream, to, &started);
                }
                return;
            }
            Err(refused) => Answer::from(refused),
        };
        if answer.write_to(&mut stream).is_err() {
            return;
        }
        let _ = stream.shutdown(Shutdown::Write);
        let until = Instant::now() + LINGER;
        let mut sink = [0u8; 16 << 10];
        while let Some(left) = until.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()) {
            let _ = stream.set_read_timeout(Some(left));
            if !matches!(stream.read(&mut sink), Ok(n) if n > 0) {
                break;
            }
        }
    }

    /// Reads the request and decides the answer.
    fn respond(&self, stream: &mut TcpStream) -> Result<Outcome, Refusal> {
        let (head, started) = http::read_head(stream, Instant::now() + HEAD_WITHIN)?;
        let path = head.path();
        if head.method == "GET" && path == HEALTH {
            return Ok(Outcome::Answer(Answer::json(200, &json!({"status": "ok"}))));
        }
        if !self.token.admits(&head.all(TOKEN_HEADER)) {
            return Err(Refusal::new(401, "unauthenticated"));
        }
        let answer = match path {
            EXEC if head.method == "POST" => self.exec(stream, &head, started)?,
            RELAY if head.method == "POST" => {
                return relay::open(&head, self.own_port).map(|to| Outcome::Relay(to, started));
            }
            EXEC | RELAY => not_allowed(&head.method, path, "POST"),
            HEALTH => not_allowed(&head.method, path, "GET"),
            _ => {
                return Err(Refusal::new(
                    404,
                    format!("no such path {path:?}: the paths are {HEALTH}, {EXEC} and {RELAY}"),
                ));
            }
        };
        Ok(Outcome::Answer(answer))
    }

    /// `POST /v1/exec`.
    fn exec(&self, stream: &mut TcpStream, head: &http::Head, started: Vec<u8>) -> Result<Answer, Refusal> {
        let len = head.body_length(true)?;
        // Taken before the body is read: at most MAX_EXECS bodies are held at once.
        let _slot = Slot::take(&self.execs, self.max_execs).ok_or_else(|| Refusal::new(429, "busy"))?;
        let body = http::read_body(stream, started, len)?;
        let req = ExecRequest::parse(&body)?;
        drop(body);
        Ok(Answer::json(200, &exec::run(&self.children, &req, self.run_as)?))
    }
}

/// 405 for `method` on `path`, which takes only `allow`.
fn not_allowed(method: &str, path: &str, allow: &'static str) -> Answer {
    let mut answer = Answer::from(Refusal::new(405, format!("{path} takes {allow}, not {method}")));
    answer.headers.push(("Allow", allow.into()));
    answer
}

/// Refuses an effective uid other than root's: without it the guest's ids
/// cannot be taken, and an exec would run as sandboxd's own user.
fn require_root(euid: u32) -> Result<(), String> {
    if euid != 0 {
        return Err(format!(
            "sandboxd must start as root (uid 0, with CAP_SETUID and CAP_SETGID) to run each exec as the guest uid; it runs as uid {euid}"
        ));
    }
    Ok(())
}

extern "C" fn stop(_: libc::c_int) {
    // SAFETY: _exit is async-signal-safe and ends the process at once.
    unsafe { libc::_exit(0) }
}

/// `plimsoll-agent sandboxd ARGS`: runs the daemon until it is stopped.
///
/// # Errors
///
/// It could not start: not root, bad arguments, or the address cannot be bound.
pub fn main(args: &[String]) -> Result<(), String> {
    procs::undumpable().map_err(|e| format!("prctl(PR_SET_DUMPABLE, 0): {e}"))?;
    // SAFETY: geteuid has no preconditions.
    require_root(unsafe { libc::geteuid() })?;
    let options = parse_args(args)?;
    // As PID 1 it gets no signal it has no handler for: without these, a pod's
    // deletion would wait out its whole grace period.
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: `stop` only calls _exit, which is async-signal-safe.
        unsafe { libc::signal(signal, stop as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    }
    let listener = TcpListener::bind(options.listen).map_err(|e| format!("listening on {}: {e}", options.listen))?;
    let uid = options.guest_uid;
    let server = Arc::new(Server::new(options.token, RunAs::Guest { uid, gid: uid }, MAX_EXECS, options.listen.port()));
    let reaper = Arc::clone(&server);
    std::thread::Builder::new()
        .name("sandboxd-reaper".into())
        .spawn(move || reaper.children.reap_strays())
        .map_err(|e| format!("starting the reaper: {e}"))?;
    eprintln!("plimsoll-agent sandboxd: listening on {}, execs run as uid {uid} gid {uid}", options.listen);
    server.serve(&listener)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as BASE64;

    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    const HASH: &str = "1a7674eb4ee78df7e1ac439a93c3fa8e3c945784d4dec9fd8e3011738b2f1d62";

    #[test]
    fn the_arguments_are_parsed_with_the_default_guest() {
        let o = parse_args(&args(&["--listen", "0.0.0.0:8787", "--token-sha256", HASH])).expect("options");
        assert_eq!(o.listen, "0.0.0.0:8787".parse().expect("addr"));
        assert_eq!(o.guest_uid, 61000);
        let o = parse_args(&args(&["--token-sha256", HASH, "--guest-uid", "1234", "--listen", "127.0.0.1:1"]))
            .expect("options");
        assert_eq!(o.guest_uid, 1234);
    }

    #[test]
    fn bad_arguments_are_refused() {
        for bad in [
            &["--listen", "0.0.0.0:8787"][..],
            &["--token-sha256", HASH],
            &["--listen", "0.0.0.0", "--token-sha256", HASH],
            &["--listen", "0.0.0.0:8787", "--token-sha256", HASH, "--guest-uid", "0"],
            &["--listen", "0.0.0.0:8787", "--token-sha256", HASH, "--guest-uid", "-5"],
            &["--listen", "0.0.0.0:8787", "--token-sha256", HASH, "--listen", "0.0.0.0:1"],
            &["--listen", "0.0.0.0:8787", "--token-sha256", HASH, "--verbose"],
            &["--listen", "0.0.0.0:8787", "--token-sha256"],
        ] {
            assert!(parse_args(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_configured_hash_must_be_64_lowercase_hex_digits() {
        assert!(TokenHash::parse(HASH).is_ok());
        for bad in [HASH.to_uppercase(), HASH[1..].to_string(), format!("{HASH}0"), HASH.replace('c', "g")] {
            assert_eq!(
                TokenHash::parse(&bad),
                Err(format!("--token-sha256 {bad:?} is not 64 lowercase hex digits")),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_token_is_admitted_only_when_its_hash_matches() {
        // HASH is sha256("tok").
        let hash = TokenHash::parse(HASH).expect("hash");
        assert_eq!(hash, TokenHash::of("tok"));
        assert!(hash.admits(&["tok"]));
        assert!(!hash.admits(&[]), "missing");
        assert!(!hash.admits(&["tok2"]), "wrong");
        assert!(!hash.admits(&[""]), "empty");
        assert!(!hash.admits(&[HASH]), "the hash itself");
        assert!(!hash.admits(&["tok", "tok"]), "twice");
    }

    #[test]
    fn only_root_may_start() {
        assert!(require_root(0).is_ok());
        let e = require_root(1000).expect_err("refused");
        assert!(e.contains("must start as root") && e.contains("uid 1000"), "{e}");
    }

    /// A server on a loopback port whose execs run as the test's own user.
    fn server(max_execs: usize) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = Arc::new(Server::new(TokenHash::of("tok"), RunAs::Caller, max_execs, addr.port()));
        std::thread::spawn(move || server.serve(&listener));
        addr
    }

    /// Sends `raw` and returns the status, the head and the JSON body.
    fn call(addr: SocketAddr, raw: &[u8]) -> (u16, String, serde_json::Value) {
        let mut c = TcpStream::connect(addr).expect("connect");
        c.write_all(raw).expect("write");
        c.shutdown(Shutdown::Write).expect("half-close");
        let mut answer = Vec::new();
        c.read_to_end(&mut answer).expect("read");
        let text = String::from_utf8(answer).expect("utf-8");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head");
        let head = format!("{head}\r\n");
        let status = head[9..12].parse().expect("status");
        assert!(head.contains("\r\nConnection: close\r\n"), "{head}");
        assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())), "{head}");
        (status, head, serde_json::from_str(body).expect("JSON"))
    }

    fn exec_request(token: Option<&str>, body: &serde_json::Value) -> Vec<u8> {
        let body = body.to_string();
        let token = token.map(|t| format!("{TOKEN_HEADER}: {t}\r\n")).unwrap_or_default();
        format!("POST /v1/exec HTTP/1.1\r\nHost: x\r\n{token}Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    #[test]
    fn health_needs_no_token() {
        let addr = server(1);
        let (status, _, body) = call(addr, b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!((status, body), (200, json!({"status": "ok"})));
    }

    #[test]
    fn an_exec_without_the_right_token_is_unauthenticated() {
        let addr = server(1);
        let req = json!({"argv": ["true"], "cwd": "/", "timeoutMs": 1000});
        for token in [None, Some("wrong"), Some("")] {
            let (status, _, body) = call(addr, &exec_request(token, &req));
            assert_eq!((status, body), (401, json!({"error": "unauthenticated"})), "{token:?}");
        }
        // Even a path that does not exist is not told apart without the token.
        let (status, _, _) = call(addr, b"GET /v2/nothing HTTP/1.1\r\n\r\n");
        assert_eq!(status, 401);
    }

    #[test]
    fn an_exec_runs_and_answers_its_output() {
        let addr = server(1);
        let req = json!({
            "argv": ["sh", "-c", "cat; echo \"$GREETING\" >&2; exit 3"],
            "cwd": "/",
            "env": [["GREETING", "hi"]],
            "stdin": BASE64.encode("from stdin"),
            "timeoutMs": 10000,
        });
        let (status, head, body) = call(addr, &exec_request(Some("tok"), &req));
        assert_eq!(status, 200, "{body}");
        assert!(head.contains("\r\nContent-Type: application/json\r\n"));
        assert_eq!(
            body,
            json!({
                "exitCode": 3, "signal": null,
                "stdout": BASE64.encode("from stdin"), "stderr": BASE64.encode("hi\n"),
                "stdoutTruncated": false, "stderrTruncated": false, "timedOut": false,
            })
        );
    }

    #[test]
    fn unknown_paths_wrong_methods_and_bad_bodies_are_refused_by_name() {
        let addr = server(1);
        let token = format!("{TOKEN_HEADER}: tok\r\n");
        let (status, _, body) = call(addr, format!("GET /v1/other HTTP/1.1\r\n{token}\r\n").as_bytes());
        assert_eq!(status, 404);
        assert!(body["error"].as_str().expect("error").contains("/v1/other"));
        let (status, head, _) = call(addr, format!("GET /v1/exec HTTP/1.1\r\n{token}\r\n").as_bytes());
        assert_eq!(status, 405);
        assert!(head.contains("\r\nAllow: POST"));
        let (status, head, _) = call(addr, format!("POST /v1/health HTTP/1.1\r\n{token}\r\n").as_bytes());
        assert_eq!(status, 405);
        assert!(head.contains("\r\nAllow: GET"));
        let (status, _, _) = call(addr, format!("POST /v1/exec HTTP/1.1\r\n{token}\r\n").as_bytes());
        assert_eq!(status, 411);
        let (status, _, body) =
            call(addr, &exec_request(Some("tok"), &json!({"argv": [], "cwd": "/", "timeoutMs": 1})));
        assert_eq!((status, body), (400, json!({"error": "argv is empty"})));
        let big = format!("POST /v1/exec HTTP/1.1\r\n{token}Content-Length: {}\r\n\r\n", http::MAX_BODY + 1);
        let (status, _, _) = call(addr, big.as_bytes());
        assert_eq!(status, 413);
    }

    #[test]
    fn execs_past_the_limit_are_busy() {
        let addr = server(1);
        let slow = std::thread::spawn(move || {
            call(addr, &exec_request(Some("tok"), &json!({"argv": ["sleep", "1"], "cwd": "/", "timeoutMs": 5000})))
        });
        std::thread::sleep(Duration::from_millis(300));
        let quick = json!({"argv": ["true"], "cwd": "/", "timeoutMs": 5000});
        let (status, _, body) = call(addr, &exec_request(Some("tok"), &quick));
        assert_eq!((status, body), (429, json!({"error": "busy"})));
        assert_eq!(slow.join().expect("the slow exec").0, 200);
        assert_eq!(call(addr, &exec_request(Some("tok"), &quick)).0, 200, "the place is free again");
    }
}
