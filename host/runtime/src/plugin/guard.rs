//! The egress guard: a remote sandbox's way to the broker. A remote backend's
//! sandbox cannot be handed a host socket, so a granted run's code reaches the
//! broker over HTTPS at the guard, the one host its network rules let it reach,
//! presenting the run's guard credential (`crg_` and 64 hex digits: 32 random
//! bytes). Where the vendor's proxy can add a header on the way out, the
//! credential never enters the sandbox; where it cannot, the guest
//! holds it, and it opens nothing but this run's broker.
//!
//! The guard holds only each credential's SHA-256, and a run's entry only while
//! its [`Ticket`] lives: the run's grant ends with its code, and so does its
//! credential. It answers `POST` at its one path and nothing else; it admits a
//! call on its credential before it reads a byte of the body, runs at most
//! [`RUN_IN_FLIGHT`] calls of one run at once, and lets at most
//! [`RUN_READING`] of those read their bodies together (each within 10 s), so
//! one run's slow sender cannot hold the guard. Behind admission the call is the
//! broker socket's: the same envelope, the same limits, the same answers.
//!
//! The guard lives in the process that issued its credentials, so it cannot
//! sit behind a load balancer that spreads calls over several daemons.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use plimsoll_core::provider::HostApi;
use plimsoll_serve::RequestBody;
use sha2::{Digest as _, Sha256};
use tokio::sync::Semaphore;

use super::socket::{carry, error, read_body};

/// What every guard credential starts with.
pub const CREDENTIAL_PREFIX: &str = "crg_";
/// The header a vendor's proxy (or the guest) presents the credential in; an
/// `Authorization: Bearer` header is taken as well.
pub const HEADER: &str = "x-plimsoll-guard";
/// The most calls of one run the guard serves at once.
pub const RUN_IN_FLIGHT: usize = 16;
/// The most calls of one run reading their bodies at once.
pub const RUN_READING: usize = 2;

/// The answer to a credential the guard does not hold (unknown, or its run over).
const UNKNOWN: &str = "unknown or expired egress guard credential";

/// One run's place at the guard.
struct Run {
    api: Arc<dyn HostApi>,
    in_flight: Arc<Semaphore>,
    reading: Arc<Semaphore>,
}

/// The guard: the runs whose credentials it admits, and its one path.
pub struct Guard {
    path: String,
    runs: Mutex<HashMap<[u8; 32], Run>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("path", &self.path).field("runs", &self.runs().len()).finish()
    }
}

/// One run's credential; dropping it closes the guard to the run.
pub struct Ticket {
    credential: String,
    digest: [u8; 32],
    guard: Weak<Guard>,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ticket(..)")
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.upgrade() {
            guard.runs().remove(&self.digest);
        }
    }
}

impl Ticket {
    /// The credential, for the vendor's header rule or the guest's client.
    pub fn credential(&self) -> &str {
        &self.credential
    }
}

fn digest(credential: &[u8]) -> [u8; 32] {
    Sha256::digest(credential).into()
}

impl Guard {
    /// A guard answering at `path` (absolute, as the operator's URL names it).
    pub fn new(path: &str) -> Arc<Guard> {
        Arc::new(Guard { path: path.to_string(), runs: Mutex::new(HashMap::new()) })
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Run>> {
        self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens the guard to one run whose calls go to `api`, under a fresh credential.
    ///
    /// # Errors
    ///
    /// No randomness for the credential.
    pub fn issue(self: &Arc<Self>, api: Arc<dyn HostApi>) -> std::io::Result<Ticket> {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| std::io::Error::other(e.to_string()))?;
        let credential = format!("{CREDENTIAL_PREFIX}{}", hex::encode(secret));
        let digest = digest(credential.as_bytes());
        let run = Run {
            api,
            in_flight: Arc::new(Semaphore::new(RUN_IN_FLIGHT)),
            reading: Arc::new(Semaphore::new(RUN_READING)),
        };
        self.runs().insert(digest, run);
        Ok(Ticket { credential, digest, guard: Arc::downgrade(self) })
    }

    /// How many runs the guard admits now.
    #[cfg(test)]
    fn open_runs(&self) -> usize {
        self.runs().len()
    }

    /// The credential `req` presents, if any.
    fn presented(req: &Request<RequestBody>) -> Option<Vec<u8>> {
        let headers = req.headers();
        if let Some(v) = headers.get(HEADER) {
            return Some(v.as_bytes().to_vec());
        }
        let bearer = headers.get(hyper::header::AUTHORIZATION)?.as_bytes();
        bearer.strip_prefix(b"Bearer ").map(<[u8]>::to_vec)
    }

    /// Answers one request: admission on the credential, then the broker's call.
    pub async fn answer(self: Arc<Self>, req: Request<RequestBody>) -> Response<Full<Bytes>> {
        if req.method() != hyper::Method::POST || req.uri().path() != self.path {
            return error(404, &format!("the guard answers POST {} only", self.path));
        }
        let Some(credential) = Guard::presented(&req) else { return error(401, UNKNOWN) };
        let found = {
            let runs = self.runs();
            runs.get(&digest(&credential)).map(|r| (r.api.clone(), r.in_flight.clone(), r.reading.clone()))
        };
        let Some((api, in_flight, reading)) = found else { return error(401, UNKNOWN) };
        let Ok(_slot) = in_flight.try_acquire_owned() else {
            return error(429, "host api broker is at capacity");
        };
        // Only a few of the run's calls read their bodies at once; a call lets
        // its reading slot go once its body is in.
        let Ok(reader) = reading.acquire_owned().await else { return error(503, "the guard is closing") };
        let body = match read_body(req.into_body()).await {
            Ok(b) => b,
            Err(refused) => return refused,
        };
        drop(reader);
        carry(api, body).await
    }

    /// Serves `listener` until it fails: one HTTP/1.1 or HTTP/2 connection per
    /// peer, each request through [`Guard::answer`].
    pub async fn serve(self: Arc<Self>, listener: tokio::net::TcpListener) {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let _ = tcp.set_nodelay(true);
            let guard = Arc::clone(&self);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let guard = Arc::clone(&guard);
                    async move { Ok::<_, Infallible>(plimsoll_serve::answer(req, |req| guard.answer(req)).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service)
                    .await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::{SocketAddr, TcpStream};
    use std::sync::mpsc;

    use plimsoll_core::provider::HostAnswer;

    use super::*;
    use crate::plugin::socket::tests::Echo;

    const PATH: &str = "/v1/guard";

    fn echo() -> Arc<Echo> {
        Arc::new(Echo(Mutex::default()))
    }

    /// A guard served on a loopback port, and the runtime serving it.
    fn served() -> (Arc<Guard>, SocketAddr, tokio::runtime::Runtime) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("rt");
        let guard = Guard::new(PATH);
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        rt.spawn(Arc::clone(&guard).serve(listener));
        (guard, addr, rt)
    }

    /// One HTTP/1.1 request; the status and the body. A refusal (which reached no
    /// broker) is asked again over HTTP/2 and must come back the same.
    fn send(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        let answer = send_h1(addr, method, path, headers, body);
        if answer.0 >= 400 {
            assert_eq!(send_h2(addr, method, path, headers, body), answer, "{method} {path} over HTTP/2");
        }
        answer
    }

    /// One HTTP/2 request (prior knowledge); the status and the body.
    fn send_h2(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        use http_body_util::BodyExt as _;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build_http::<Full<Bytes>>();
            let mut req = Request::builder().method(method).uri(format!("http://{addr}{path}"));
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            let req = req.body(Full::new(Bytes::from(body.to_string()))).expect("request");
            let resp = client.request(req).await.expect("an answer over HTTP/2");
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.expect("body").to_bytes();
            (status, String::from_utf8_lossy(&bytes).into_owned())
        })
    }

    fn send_h1(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        let mut s = TcpStream::connect(addr).expect("connect");
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: guard\r\nContent-Length: {}\r\n", body.len());
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("Connection: close\r\n\r\n");
        req.push_str(body);
        s.write_all(req.as_bytes()).expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string())
    }

    const CALL: &str = r#"{"method":"GET","path":"/items/1","body":null}"#;
    const UNKNOWN_BODY: &str = r#"{"error":"unknown or expired egress guard credential"}"#;

    #[test]
    fn a_runs_credential_opens_its_broker_until_its_ticket_is_dropped() {
        let (guard, addr, _rt) = served();
        let api = echo();
        let ticket = guard.issue(api.clone()).expect("issued");
        let credential = ticket.credential().to_string();
        assert!(credential.starts_with("crg_") && credential.len() == 68, "{credential}");
        assert_eq!(send(addr, "POST", PATH, &[(HEADER, &credential)], CALL), (201, "{\"ok\":true}".into()));
        let bearer = format!("Bearer {credential}");
        assert_eq!(send(addr, "POST", PATH, &[("Authorization", &bearer)], CALL).0, 201);
        assert_eq!(api.0.lock().expect("calls").as_slice(), ["GET /items/1 ", "GET /items/1 "]);
        let forged = format!("crg_{}", "0".repeat(64));
        assert_eq!(send(addr, "POST", PATH, &[(HEADER, &forged)], CALL), (401, UNKNOWN_BODY.into()));
        assert_eq!(send(addr, "POST", PATH, &[], CALL), (401, UNKNOWN_BODY.into()));
        let (status, body) = send(addr, "GET", PATH, &[(HEADER, &credential)], "");
        assert_eq!((status, body.as_str()), (404, r#"{"error":"the guard answers POST /v1/guard only"}"#));
        assert_eq!(send(addr, "POST", "/v1/other", &[(HEADER, &credential)], CALL).0, 404);
        assert_eq!(api.0.lock().expect("calls").len(), 2, "refused calls never reach the broker");
        drop(ticket);
        assert_eq!(guard.open_runs(), 0);
        assert_eq!(send(addr, "POST", PATH, &[(HEADER, &credential)], CALL), (401, UNKNOWN_BODY.into()));
    }

    #[test]
    fn each_run_reaches_only_its_own_broker() {
        let (guard, addr, _rt) = served();
        let (a, b) = (echo(), echo());
        let (ta, tb) = (guard.issue(a.clone()).expect("a"), guard.issue(b.clone()).expect("b"));
        assert_ne!(ta.credential(), tb.credential());
        assert_eq!(send(addr, "POST", PATH, &[(HEADER, ta.credential())], CALL).0, 201);
        assert_eq!(send(addr, "POST", PATH, &[(HEADER, tb.credential())], CALL).0, 201);
        assert_eq!(send(addr, "POST", PATH, &[(HEADER, tb.credential())], CALL).0, 201);
        assert_eq!((a.0.lock().expect("a").len(), b.0.lock().expect("b").len()), (1, 2));
    }

    #[test]
    fn a_malformed_or_oversized_call_never_reaches_the_broker() {
        let (guard, addr, _rt) = served();
        let api = echo();
        let ticket = guard.issue(api.clone()).expect("issued");
        let h = [(HEADER, ticket.credential())];
        let (status, body) = send(addr, "POST", PATH, &h, r#"{"method":"GET","path":"/x","extra":1}"#);
        assert_eq!(status, 400, "{body}");
        let huge = format!(
            r#"{{"method":"POST","path":"/x","body":"{}"}}"#,
            "a".repeat(super::super::socket::MAX_ENVELOPE_BYTES)
        );
        assert_eq!(send(addr, "POST", PATH, &h, &huge), (413, r#"{"error":"host api request body too large"}"#.into()));
        assert!(api.0.lock().expect("calls").is_empty());
    }

    /// A broker whose calls wait until the test lets them go.
    struct Held {
        started: Mutex<mpsc::Sender<()>>,
        release: Mutex<mpsc::Receiver<()>>,
    }

    impl HostApi for Held {
        fn call(&self, _: &str, _: &str, _: Option<&[u8]>) -> HostAnswer {
            let _ = self.started.lock().expect("started").send(());
            let _ = self.release.lock().expect("release").recv();
            HostAnswer { status: 200, content_type: "application/json".into(), body: b"{}".to_vec() }
        }
    }

    #[test]
    fn a_run_past_its_calls_in_flight_is_refused_at_capacity() {
        let (guard, addr, _rt) = served();
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let api = Arc::new(Held { started: Mutex::new(started_tx), release: Mutex::new(release_rx) });
        let ticket = guard.issue(api).expect("issued");
        let credential = ticket.credential().to_string();
        let callers: Vec<_> = (0..RUN_IN_FLIGHT)
            .map(|_| {
                let c = credential.clone();
                std::thread::spawn(move || send(addr, "POST", PATH, &[(HEADER, &c)], CALL).0)
            })
            .collect();
        // The broker serves one call at a time here, so the others wait holding
        // their slots; the first has reached it.
        started.recv_timeout(std::time::Duration::from_secs(10)).expect("a call reached the broker");
        let free = || guard.runs().values().map(|r| r.in_flight.available_permits()).sum::<usize>();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while free() > 0 && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(free(), 0, "every call holds its slot");
        let over = send(addr, "POST", PATH, &[(HEADER, &credential)], CALL);
        assert_eq!(over, (429, r#"{"error":"host api broker is at capacity"}"#.into()));
        for _ in 0..RUN_IN_FLIGHT {
            let _ = release.send(());
        }
        let statuses: Vec<u16> = callers.into_iter().map(|c| c.join().expect("caller")).collect();
        assert_eq!(statuses, vec![200; RUN_IN_FLIGHT]);
    }
}
