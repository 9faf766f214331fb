//! Relay streams: a granted run's way to the broker where its sandbox has no
//! way out (a gateway whose sandboxes have no network rule at all). The plugin starts a relay
//! inside and names a vendor's port forward (a bidirectional gRPC stream that
//! opens with an init message and then carries a connection's bytes, each
//! piece in one field of a message); the host opens those streams itself and
//! joins each, once the sandbox's first bytes arrive through it, to a fresh
//! connection to the run's broker socket. It joins them to nothing else, so a
//! plugin can open no way in but to the broker of the run it serves, and no
//! byte of the broker's traffic passes through the plugin.
//!
//! Where the vendor's only way in is an HTTP/1.1 upgrade (Kubernetes' pod
//! proxy to sandboxd's `/v1/relay`), a stream is instead one upgraded
//! connection: the request sent with `Connection: Upgrade`, answered `101
//! Switching Protocols`, then raw bytes both ways, joined to the broker the
//! same way.
//!
//! A stream that ends is opened again, after [`FIRST_BACKOFF`] doubling to
//! [`MAX_BACKOFF`] while they fail, until the plugin's call returns and its
//! [`Relays`] drop.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::{mpsc, watch};

use super::{Allowed, Ask, HttpGate, grpc};

/// The most relay streams one plugin call holds.
pub const MAX_RELAY_STREAMS: usize = 18;
/// The wait before a failed stream is opened again, doubling while they fail.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_millis(6400);
/// How long a stream's head may take.
const HEAD_WITHIN: Duration = Duration::from_secs(20);
/// The largest message a relay stream takes (the gateway's own cap is 1 MiB).
const MAX_MESSAGE: usize = 4 << 20;
/// The most bytes of the broker's answer one message carries.
const PIECE: usize = 64 << 10;

/// A request body fed piece by piece.
pub(crate) struct Piped(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Piped {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|piece| piece.map(|b| Ok(Frame::data(b))))
    }
}

/// The relay streams one plugin call holds; dropping them ends every one
/// (each is logged as it ends, cancelled).
#[derive(Debug)]
pub struct Relays {
    held: usize,
    /// Dropped with the relays: every worker sees it go.
    stop: watch::Sender<()>,
}

impl Default for Relays {
    fn default() -> Relays {
        Relays { held: 0, stop: watch::channel(()).0 }
    }
}

impl Relays {
    /// How many streams are held.
    pub fn len(&self) -> usize {
        self.held
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.held == 0
    }
}

/// One open gRPC stream: its request's remaining body, and its response's.
struct Duplex {
    send: mpsc::Sender<Bytes>,
    body: hyper::body::Incoming,
}

/// How a relay's streams carry bytes.
#[derive(Clone, Debug)]
pub enum Way {
    /// A bidirectional gRPC stream, each piece a message whose one field is this.
    Grpc(u32),
    /// An HTTP/1.1 upgrade to this protocol, then raw bytes.
    Upgrade(String),
}

/// One open stream of either way.
enum Opened {
    Grpc(Duplex),
    Upgraded(TokioIo<hyper::upgrade::Upgraded>),
}

/// Whether `p` may name an upgrade's protocol: an HTTP token, and none of the
/// protocols a server gives meaning of its own.
fn protocol_token(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 64
        && p.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'/'))
        && !p.eq_ignore_ascii_case("h2c")
}

/// A stream's messages as they arrive, each whole.
struct Messages {
    body: hyper::body::Incoming,
    buf: Vec<u8>,
    ready: std::collections::VecDeque<Vec<u8>>,
}

impl Messages {
    /// The next message; None once the stream has ended well.
    async fn next(&mut self) -> Result<Option<Vec<u8>>, String> {
        loop {
            if let Some(m) = self.ready.pop_front() {
                return Ok(Some(m));
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(format!("the stream broke off ({e})")),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        self.buf.extend_from_slice(&data);
                        self.ready.extend(grpc::take_messages(&mut self.buf, MAX_MESSAGE)?);
                    }
                    Err(frame) => {
                        let trailers = frame.into_trailers().ok();
                        let get = |k: &str| {
                            trailers.as_ref().and_then(|t| t.get(k)).and_then(|v| v.to_str().ok()).unwrap_or("")
                        };
                        return match get("grpc-status") {
                            "" | "0" => Ok(None),
                            code => Err(format!("the stream ended with gRPC status {code}: {}", get("grpc-message"))),
                        };
                    }
                },
            }
        }
    }

    /// The next piece of the byte stream in field `field`.
    async fn piece(&mut self, field: u32) -> Result<Option<Vec<u8>>, String> {
        match self.next().await? {
            None => Ok(None),
            Some(m) => grpc::only_bytes(&m, field)
                .map(|b| Some(b.to_vec()))
                .ok_or_else(|| "a message that is not the stream's bytes".to_string()),
        }
    }
}

impl HttpGate {
    /// Opens one relay stream for `ask`, its body the first message.
    async fn duplex(&self, allowed: &Allowed, ask: &Ask) -> Result<Duplex, String> {
        let (send, pipe) = mpsc::channel(8);
        let alias = &ask.endpoint;
        let (req, client) = self.request(allowed, ask, http_body_util::Either::Right(Piped(pipe)))?;
        send.send(Bytes::from(grpc::framed(&ask.body)))
            .await
            .map_err(|_| format!("endpoint {alias:?}: the stream's body closed before its first message"))?;
        let resp = match tokio::time::timeout(HEAD_WITHIN, client.request(req)).await {
            Err(_) => return Err(format!("endpoint {alias:?} did not answer within {} s", HEAD_WITHIN.as_secs())),
            Ok(Err(e)) => return Err(format!("endpoint {alias:?} did not answer: {e}")),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if status != http::StatusCode::OK {
            return Err(format!("endpoint {alias:?} answered HTTP {status}, not gRPC (a redirect is not followed)"));
        }
        let head = |k: &str| resp.headers().get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
        if !head("content-type").is_some_and(|t| t.starts_with("application/grpc")) {
            return Err(format!("endpoint {alias:?}: the answer is not gRPC (its content-type)"));
        }
        // A trailers-only answer refused the stream.
        if let Some(code) = head("grpc-status") {
            let message = head("grpc-message").unwrap_or_default();
            return Err(format!("endpoint {alias:?} refused the stream: gRPC status {code}: {message}"));
        }
        Ok(Duplex { send, body: resp.into_body() })
    }

    /// Opens one upgraded connection for `ask` over HTTP/1.1.
    async fn upgraded(&self, allowed: &Allowed, ask: &Ask, protocol: &str) -> Result<Opened, String> {
        let alias = &ask.endpoint;
        let (mut req, _) = self.request(allowed, ask, super::whole(Vec::new()))?;
        let Some(route) = self.routes.get(alias) else { unreachable!("request refuses an unconfigured endpoint") };
        let client = match route.upgrading.get() {
            Some(c) => c.clone(),
            None => {
                let c = super::build_client(alias, &route.endpoint, true)?;
                route.upgrading.get_or_init(|| c).clone()
            }
        };
        let headers = req.headers_mut();
        headers.remove("te");
        headers.insert(http::header::CONNECTION, http::HeaderValue::from_static("Upgrade"));
        let upgrade = http::HeaderValue::from_str(protocol).map_err(|_| "the protocol is not a header value")?;
        headers.insert(http::header::UPGRADE, upgrade);
        let resp = match tokio::time::timeout(HEAD_WITHIN, client.request(req)).await {
            Err(_) => return Err(format!("endpoint {alias:?} did not answer within {} s", HEAD_WITHIN.as_secs())),
            Ok(Err(e)) => return Err(format!("endpoint {alias:?} did not answer: {e}")),
            Ok(Ok(r)) => r,
        };
        let status = resp.status();
        if status != http::StatusCode::SWITCHING_PROTOCOLS {
            let body = Limited::new(resp.into_body(), 4096).collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let said = String::from_utf8_lossy(&body);
            return Err(format!(
                "endpoint {alias:?} answered HTTP {status}, not 101 Switching Protocols: {}",
                said.chars().take(300).collect::<String>().trim()
            ));
        }
        let to = resp.headers().get(http::header::UPGRADE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !to.eq_ignore_ascii_case(protocol) {
            return Err(format!("endpoint {alias:?} switched to {to:?}, not {protocol:?}"));
        }
        let io = hyper::upgrade::on(resp).await.map_err(|e| format!("endpoint {alias:?}: the upgrade failed: {e}"))?;
        Ok(Opened::Upgraded(TokioIo::new(io)))
    }

    /// Opens one stream of `way` for `ask`.
    async fn open_stream(&self, allowed: &Allowed, ask: &Ask, way: &Way) -> Result<Opened, String> {
        match way {
            Way::Grpc(_) => self.duplex(allowed, ask).await.map(Opened::Grpc),
            Way::Upgrade(protocol) => self.upgraded(allowed, ask, protocol).await,
        }
    }

    /// Opens `count` relay streams of `way` for `ask` (a `POST`: of a gRPC
    /// method, its body the first message; or of the vendor's upgrade) and
    /// keeps them in `relays`, each joined to a fresh connection to `broker`
    /// once its first bytes arrive, and opened again when it ends. Returns once
    /// every stream's head came.
    ///
    /// # Errors
    ///
    /// Why no stream is kept: a refusal (nothing sent), or a stream that did
    /// not open.
    pub fn relay(
        self: &Arc<Self>,
        relays: &mut Relays,
        allowed: &Allowed,
        ask: Ask,
        (way, count): (Way, u32),
        broker: PathBuf,
    ) -> Result<(), String> {
        let alias = ask.endpoint.clone();
        if ask.method != "POST" {
            return Err(format!("a relay stream is a POST, not {}; no request was sent", ask.method));
        }
        if count == 0 || relays.len() + count as usize > MAX_RELAY_STREAMS {
            return Err(format!(
                "a call keeps 1 to {MAX_RELAY_STREAMS} relay streams (it holds {}, asked {count}); no request was sent",
                relays.len()
            ));
        }
        match &way {
            Way::Grpc(0) => return Err("a relay stream's bytes travel in a field above 0; no request was sent".into()),
            Way::Upgrade(p) if !protocol_token(p) => {
                return Err(format!("{p:?} is not a protocol a relay may upgrade to; no request was sent"));
            }
            Way::Upgrade(_) if !ask.body.is_empty() => {
                return Err("an upgraded relay's request carries no body; no request was sent".into());
            }
            _ => {}
        }
        if self.routes.get(&alias).is_some_and(|r| r.endpoint.exchange.is_some()) {
            return Err(format!(
                "endpoint {alias:?} trades a token for each bearer, which a relay stream cannot renew; no request was sent"
            ));
        }
        self.admits(allowed, &ask)?;
        let opened = self.rt.block_on(async {
            let mut opened = Vec::new();
            for _ in 0..count {
                opened.push(self.open_stream(allowed, &ask, &way).await?);
            }
            Ok::<_, String>(opened)
        });
        let opened = opened.inspect_err(|e| {
            let mut record = Self::record(&ask, true);
            record.error = Some(e.clone());
            self.log(&record);
        })?;
        for first in opened {
            let worker = Worker {
                gate: Arc::clone(self),
                allowed: allowed.clone(),
                ask: ask.clone(),
                way: way.clone(),
                broker: broker.clone(),
            };
            self.rt.spawn(worker.run(first, relays.stop.subscribe()));
            relays.held += 1;
        }
        Ok(())
    }
}

/// What keeps one relay stream open.
struct Worker {
    gate: Arc<HttpGate>,
    allowed: Allowed,
    ask: Ask,
    way: Way,
    broker: PathBuf,
}

impl Worker {
    /// Carries `first`, then stream after stream, until `stop` goes; logs
    /// each stream as it ends.
    async fn run(self, first: Opened, mut stop: watch::Receiver<()>) {
        let mut next = Some(first);
        let mut backoff = FIRST_BACKOFF;
        loop {
            let started = Instant::now();
            let counts = Counts::default();
            let outcome = tokio::select! {
                r = self.stream(next.take(), &counts) => Some(r),
                _ = stop.changed() => None,
            };
            let mut record = HttpGate::record(&self.ask, true);
            let head = match self.way {
                Way::Grpc(_) => 200,
                Way::Upgrade(_) => 101,
            };
            record.status = counts.opened.load(Ordering::Relaxed).then_some(head);
            record.sent = counts.sent.load(Ordering::Relaxed);
            record.received = counts.received.load(Ordering::Relaxed);
            record.elapsed = started.elapsed();
            match &outcome {
                None => record.cancelled = true,
                Some(Err(e)) => record.error = Some(e.clone()),
                Some(Ok(())) => {}
            }
            self.gate.log(&record);
            if outcome.is_none() {
                return;
            }
            if record.received > 0 {
                backoff = FIRST_BACKOFF;
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Carries one stream: `opened`, or one opened now.
    async fn stream(&self, opened: Option<Opened>, counts: &Counts) -> Result<(), String> {
        let opened = match opened {
            Some(o) => o,
            None => self.gate.open_stream(&self.allowed, &self.ask, &self.way).await?,
        };
        counts.opened.store(true, Ordering::Relaxed);
        match (opened, &self.way) {
            (Opened::Grpc(d), Way::Grpc(field)) => self.carry(d, *field, counts).await,
            (Opened::Upgraded(io), _) => self.carry_upgraded(io, counts).await,
            (Opened::Grpc(_), Way::Upgrade(_)) => Err("a gRPC stream opened for an upgraded relay".into()),
        }
    }

    /// A fresh connection to the run's broker.
    async fn broker(&self) -> Result<tokio::net::UnixStream, String> {
        tokio::net::UnixStream::connect(&self.broker)
            .await
            .map_err(|e| format!("the run's broker socket did not take a connection: {e}"))
    }

    /// Waits for the upgraded connection's first bytes, then carries them and
    /// the rest to a fresh connection to the broker, and the broker's answers
    /// back, until both ways have ended.
    async fn carry_upgraded(&self, mut io: TokioIo<hyper::upgrade::Upgraded>, counts: &Counts) -> Result<(), String> {
        let mut first = vec![0u8; PIECE];
        let n = io.read(&mut first).await.map_err(|e| format!("the stream broke off ({e})"))?;
        if n == 0 {
            return Ok(());
        }
        let conn = self.broker().await?;
        let (mut from_broker, mut to_broker) = conn.into_split();
        to_broker.write_all(&first[..n]).await.map_err(|e| format!("the broker did not take the first bytes: {e}"))?;
        counts.received.fetch_add(n as u64, Ordering::Relaxed);
        let (mut from_sandbox, mut to_sandbox) = tokio::io::split(io);
        // Each way ends when its reader does (a peer that goes without closing
        // its TLS is an end too), and passes the end on.
        let up = async {
            pump(&mut from_sandbox, &mut to_broker, &counts.received).await;
            let _ = to_broker.shutdown().await;
        };
        let down = async {
            pump(&mut from_broker, &mut to_sandbox, &counts.sent).await;
            let _ = to_sandbox.shutdown().await;
        };
        tokio::join!(up, down);
        Ok(())
    }

    /// Waits for the stream's first piece, then carries it and the rest to a
    /// fresh connection to the broker, and the broker's answers back, until
    /// both ways have ended, counting the bytes each way.
    async fn carry(&self, d: Duplex, field: u32, counts: &Counts) -> Result<(), String> {
        let Duplex { send, body } = d;
        let mut messages = Messages { body, buf: Vec::new(), ready: Default::default() };
        let Some(first) = messages.piece(field).await? else { return Ok(()) };
        let conn = self.broker().await?;
        let (mut from_broker, mut to_broker) = conn.into_split();
        let up = async move {
            let mut piece = Some(first);
            while let Some(p) = piece.take() {
                counts.received.fetch_add(p.len() as u64, Ordering::Relaxed);
                if to_broker.write_all(&p).await.is_err() {
                    break;
                }
                match messages.piece(field).await {
                    Ok(Some(p)) => piece = Some(p),
                    Ok(None) | Err(_) => break,
                }
            }
            let _ = to_broker.shutdown().await;
        };
        let down = async move {
            let mut buf = vec![0u8; PIECE];
            loop {
                let n = match from_broker.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let msg = grpc::framed(&grpc::bytes_message(field, &buf[..n]));
                if send.send(Bytes::from(msg)).await.is_err() {
                    break;
                }
                counts.sent.fetch_add(n as u64, Ordering::Relaxed);
            }
            // Dropping the sender ends the request's body: the sandbox side's end.
            drop(send);
        };
        tokio::join!(up, down);
        Ok(())
    }
}

/// Copies `from` into `to` until `from` ends or either fails, counting the bytes.
async fn pump(
    from: &mut (impl tokio::io::AsyncRead + Unpin),
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    count: &AtomicU64,
) {
    let mut buf = vec![0u8; PIECE];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// What one stream did, readable however it ends.
#[derive(Default)]
struct Counts {
    opened: AtomicBool,
    sent: AtomicU64,
    received: AtomicU64,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use http_body_util::{Full, StreamBody};

    use super::super::tests::{allowed, logged, mtls_server, pki, serve};
    use super::super::{CallRecord, Endpoint, EndpointTls, TokenExchange};
    use super::*;

    /// What the fake gateway saw of each stream: its first message, and the
    /// bytes that came back through it.
    type Seen = Arc<Mutex<Vec<(Vec<u8>, Vec<u8>)>>>;

    /// A gateway over mutual TLS and HTTP/2 whose `/svc/Forward` plays the
    /// sandbox's side of a relay stream: it sends one piece, `ping`, reads the
    /// pieces that come back until the client's side ends, then ends its own.
    /// `/svc/Refused` refuses a stream in its head.
    fn gateway(tls: Arc<rustls::ServerConfig>, seen: Seen) -> u16 {
        serve(Some(tls), move |req| forward(req, seen.clone()))
    }

    type Piece = Poll<Option<Result<Frame<Bytes>, std::io::Error>>>;
    type Poller = Box<dyn FnMut(&mut Context<'_>) -> Piece + Send>;
    type Out = StreamBody<futures_util::stream::PollFn<Poller>>;

    fn forward(req: http::Request<hyper::body::Incoming>, seen: Seen) -> http::Response<Out> {
        let (send, mut recv) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
        let refused = req.uri().path() == "/svc/Refused";
        let poll: Poller = Box::new(move |cx| recv.poll_recv(cx));
        let mut resp = http::Response::new(StreamBody::new(futures_util::stream::poll_fn(poll)));
        resp.headers_mut().insert("content-type", http::HeaderValue::from_static("application/grpc"));
        if refused {
            resp.headers_mut().insert("grpc-status", http::HeaderValue::from_static("16"));
            resp.headers_mut().insert("grpc-message", http::HeaderValue::from_static("token%20not%20valid"));
            return resp;
        }
        tokio::spawn(async move {
            let mut messages = Messages { body: req.into_body(), buf: Vec::new(), ready: Default::default() };
            let Ok(Some(init)) = messages.next().await else { return };
            let ping = grpc::framed(&grpc::bytes_message(2, b"ping"));
            if send.send(Ok(Frame::data(Bytes::from(ping)))).await.is_err() {
                return;
            }
            let mut back = Vec::new();
            while let Ok(Some(piece)) = messages.piece(2).await {
                back.extend_from_slice(&piece);
            }
            seen.lock().expect("seen").push((init, back));
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            let _ = send.send(Ok(Frame::trailers(trailers))).await;
        });
        resp
    }

    /// A broker that reads four bytes and answers `pong:` and them.
    fn broker(dir: &std::path::Path) -> PathBuf {
        let path = dir.join("host-api.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut got = [0u8; 4];
                if std::io::Read::read_exact(&mut conn, &mut got).is_ok() {
                    let _ = std::io::Write::write_all(&mut conn, &[b"pong:".as_slice(), &got].concat());
                }
            }
        });
        path
    }

    fn relay_ask(path: &str) -> Ask {
        Ask {
            endpoint: "gw".into(),
            target: None,
            method: "POST".into(),
            path: path.into(),
            headers: vec![("content-type".into(), "application/grpc".into())],
            body: b"init-bytes".to_vec(),
            timeout: Duration::from_secs(60),
        }
    }

    /// A gate whose endpoint `gw` is the server `serve` starts over mutual TLS,
    /// its call log, a scratch directory named for `test`, and a broker socket in it.
    fn relaying(
        test: &str,
        serve: impl FnOnce(Arc<rustls::ServerConfig>) -> u16,
    ) -> (Arc<HttpGate>, Arc<Mutex<Vec<CallRecord>>>, PathBuf, PathBuf) {
        let pki = pki();
        let port = serve(mtls_server(&pki));
        let tls = EndpointTls {
            ca_pem: Some(pki.ca.clone().into_bytes()),
            client_pem: Some((pki.client.0.clone().into_bytes(), pki.client.1.clone().into_bytes())),
        };
        let endpoint = Endpoint { base: format!("https://127.0.0.1:{port}"), tls, ..Endpoint::default() };
        let (gate, log) = logged(BTreeMap::from([("gw".to_string(), endpoint)]));
        let dir = std::env::temp_dir().join(format!("plimsoll-{test}-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let socket = broker(&dir);
        (Arc::new(gate), log, dir, socket)
    }

    fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
        let until = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < until, "{what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn records(log: &Arc<Mutex<Vec<CallRecord>>>) -> Vec<CallRecord> {
        log.lock().expect("records").clone()
    }

    #[test]
    fn each_stream_is_joined_to_a_fresh_broker_connection_reopened_and_logged_as_it_ends() {
        let seen = Seen::default();
        let seen_by = Arc::clone(&seen);
        let (gate, log, dir, socket) = relaying("relay", move |tls| gateway(tls, seen_by));
        let mut relays = Relays::default();
        let way = (Way::Grpc(2), 2);
        gate.relay(&mut relays, &allowed(&["gw"]), relay_ask("/svc/Forward"), way, socket).expect("relayed");
        assert_eq!(relays.len(), 2);
        // Each stream carried the sandbox's `ping` to its own broker connection
        // and the answer back, and ended; each was opened again at once.
        // The gateway sees a stream's end before the host has logged it.
        let ended = || records(&log).into_iter().filter(|r| r.error.is_none() && !r.cancelled).collect::<Vec<_>>();
        wait_for("four streams carried and logged", || seen.lock().expect("seen").len() >= 4 && ended().len() >= 4);
        for (init, back) in seen.lock().expect("seen").iter() {
            assert_eq!(init, b"init-bytes", "the first message is the plugin's, framed once");
            assert_eq!(back, b"pong:ping");
        }
        let done = ended();
        assert!(done.iter().all(|r| r.path == "/svc/Forward" && r.streamed && r.status == Some(200)));
        assert!(done.iter().all(|r| (r.sent, r.received) == (9, 4)), "{done:?}");
        // Dropping the relays ends every stream, each logged as cancelled.
        drop(relays);
        wait_for("both streams logged as cancelled", || records(&log).iter().filter(|r| r.cancelled).count() >= 2);
        // A stream cut mid-way reaches the gateway's end a moment later.
        std::thread::sleep(Duration::from_millis(300));
        let before = seen.lock().expect("seen").len();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(seen.lock().expect("seen").len(), before, "no stream opened after the relays went");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn every_refusal_of_a_relay_names_why_and_keeps_no_stream() {
        let pki = pki();
        let port = gateway(mtls_server(&pki), Seen::default());
        let tls = EndpointTls {
            ca_pem: Some(pki.ca.clone().into_bytes()),
            client_pem: Some((pki.client.0.clone().into_bytes(), pki.client.1.clone().into_bytes())),
        };
        let base = format!("https://127.0.0.1:{port}");
        let exchange = TokenExchange { url: format!("{base}/token"), identifier: "me".into(), secret: "s3cret".into() };
        let endpoints = BTreeMap::from([
            ("gw".to_string(), Endpoint { base: base.clone(), tls: tls.clone(), ..Endpoint::default() }),
            ("traded".to_string(), Endpoint { base, tls, exchange: Some(exchange), ..Endpoint::default() }),
        ]);
        let (gate, _) = logged(endpoints);
        let gate = Arc::new(gate);
        let a = allowed(&["gw", "traded"]);
        let broker = PathBuf::from("/nonexistent/host-api.sock");
        let refuse = |ask: Ask, shape: (Way, u32)| {
            let mut relays = Relays::default();
            let e = gate.relay(&mut relays, &a, ask, shape, broker.clone()).expect_err("refused");
            assert!(relays.is_empty());
            e
        };
        let grpc = |count| (Way::Grpc(2), count);
        let get = Ask { method: "GET".into(), ..relay_ask("/svc/Forward") };
        assert_eq!(refuse(get, grpc(1)), "a relay stream is a POST, not GET; no request was sent");
        assert_eq!(
            refuse(relay_ask("/svc/Forward"), grpc(0)),
            "a call keeps 1 to 18 relay streams (it holds 0, asked 0); no request was sent"
        );
        assert_eq!(
            refuse(relay_ask("/svc/Forward"), grpc(19)),
            "a call keeps 1 to 18 relay streams (it holds 0, asked 19); no request was sent"
        );
        assert_eq!(
            refuse(relay_ask("/svc/Forward"), (Way::Grpc(0), 1)),
            "a relay stream's bytes travel in a field above 0; no request was sent"
        );
        let upgrade = |p: &str| (Way::Upgrade(p.into()), 1);
        for p in ["", "h2c", "a b", "x\r\ny"] {
            assert_eq!(
                refuse(relay_ask("/relay"), upgrade(p)),
                format!("{p:?} is not a protocol a relay may upgrade to; no request was sent")
            );
        }
        assert_eq!(
            refuse(relay_ask("/relay"), upgrade("plimsoll-relay")),
            "an upgraded relay's request carries no body; no request was sent"
        );
        let traded = Ask { endpoint: "traded".into(), ..relay_ask("/svc/Forward") };
        assert_eq!(
            refuse(traded, grpc(1)),
            "endpoint \"traded\" trades a token for each bearer, which a relay stream cannot renew; no request was sent"
        );
        let unknown = Ask { endpoint: "elsewhere".into(), ..relay_ask("/svc/Forward") };
        assert!(refuse(unknown, grpc(1)).contains("elsewhere"));
        assert_eq!(
            refuse(relay_ask("/svc/Refused"), grpc(1)),
            "endpoint \"gw\" refused the stream: gRPC status 16: token%20not%20valid"
        );
    }

    /// A pod proxy over mutual TLS (offering HTTP/2 and HTTP/1.1) whose
    /// `/relay` plays sandboxd's side of an upgraded relay: it answers 101 to
    /// an upgrade to `plimsoll-relay` over HTTP/1.1, sends `ping`, and keeps
    /// what comes back until the host's side ends. `/refused` answers 403.
    fn pod_proxy(tls: Arc<rustls::ServerConfig>, seen: Arc<Mutex<Vec<Vec<u8>>>>) -> u16 {
        serve(Some(tls), move |mut req: http::Request<hyper::body::Incoming>| {
            let asked = req.headers().get("upgrade").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
            let upgrading = req.uri().path() == "/relay"
                && req.version() == http::Version::HTTP_11
                && asked == "plimsoll-relay"
                && req.headers().get("te").is_none();
            if !upgrading {
                let mut r = http::Response::new(Full::new(Bytes::from_static(b"{\"message\":\"forbidden\"}")));
                *r.status_mut() = http::StatusCode::FORBIDDEN;
                return r;
            }
            let on = hyper::upgrade::on(&mut req);
            let seen = Arc::clone(&seen);
            tokio::spawn(async move {
                let Ok(io) = on.await else { return };
                let mut io = TokioIo::new(io);
                if io.write_all(b"ping").await.is_err() {
                    return;
                }
                let mut back = Vec::new();
                let _ = io.read_to_end(&mut back).await;
                seen.lock().expect("seen").push(back);
            });
            let mut r = http::Response::new(Full::new(Bytes::new()));
            *r.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
            r.headers_mut().insert("connection", http::HeaderValue::from_static("upgrade"));
            r.headers_mut().insert("upgrade", http::HeaderValue::from_static("plimsoll-relay"));
            r
        })
    }

    #[test]
    fn an_upgraded_relay_speaks_http1_and_carries_raw_bytes_to_the_broker() {
        let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let seen_by = Arc::clone(&seen);
        let (gate, log, dir, socket) = relaying("upgrade", move |tls| pod_proxy(tls, seen_by));
        let ask = |path: &str| Ask { headers: vec![], body: vec![], ..relay_ask(path) };
        let way = || (Way::Upgrade("plimsoll-relay".into()), 2);
        let mut relays = Relays::default();
        let e = gate.relay(&mut relays, &allowed(&["gw"]), ask("/refused"), way(), socket.clone()).expect_err("403");
        assert_eq!(
            e,
            "endpoint \"gw\" answered HTTP 403 Forbidden, not 101 Switching Protocols: {\"message\":\"forbidden\"}"
        );
        assert!(relays.is_empty());
        gate.relay(&mut relays, &allowed(&["gw"]), ask("/relay"), way(), socket).expect("relayed");
        assert_eq!(relays.len(), 2);
        // Each connection carried the sandbox's `ping` to its own broker
        // connection and the answer back, and was opened again.
        let ended = || records(&log).into_iter().filter(|r| r.error.is_none() && !r.cancelled).collect::<Vec<_>>();
        wait_for("four connections carried and logged", || seen.lock().expect("seen").len() >= 4 && ended().len() >= 4);
        assert!(seen.lock().expect("seen").iter().all(|back| back == b"pong:ping"));
        let done = ended();
        assert!(done.iter().all(|r| r.path == "/relay" && r.streamed && r.status == Some(101)), "{done:?}");
        assert!(done.iter().all(|r| (r.sent, r.received) == (9, 4)), "{done:?}");
        drop(relays);
        wait_for("both connections logged as cancelled", || records(&log).iter().filter(|r| r.cancelled).count() >= 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
