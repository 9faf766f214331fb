use std::io::{Read as _, Write as _};
use std::sync::Mutex;

use http_body_util::StreamBody;
use hyper::body::Frame;

use super::*;

/// A one-route server answering every request with `response`; returns its URL.
fn server(response: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(response.as_bytes());
        }
    });
    url
}

fn endpoint(base: &str) -> Endpoint {
    Endpoint {
        base: base.into(),
        headers: vec![("authorization".into(), "Bearer s3cret".into())],
        ..Endpoint::default()
    }
}

fn gate(base: &str) -> HttpGate {
    HttpGate::new([("kms".to_string(), endpoint(base))].into()).expect("gate")
}

/// A gate whose call records land in the returned list.
pub(super) fn logged(endpoints: BTreeMap<String, Endpoint>) -> (HttpGate, Arc<Mutex<Vec<CallRecord>>>) {
    let records = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&records);
    let gate = HttpGate::new(endpoints).expect("gate").logging(Arc::new(move |r: &CallRecord| {
        sink.lock().expect("records").push(r.clone());
    }));
    (gate, records)
}

pub(super) fn allowed(endpoints: &[&str]) -> Allowed {
    Allowed {
        endpoints: endpoints.iter().map(|e| (*e).to_string()).collect(),
        headers: vec!["content-type".into(), "x-run".into()],
        runs_code_at: None,
    }
}

fn ask(path: &str) -> Ask {
    Ask {
        endpoint: "kms".into(),
        target: None,
        method: "GET".into(),
        path: path.into(),
        headers: vec![],
        body: vec![],
        timeout: Duration::from_secs(5),
    }
}

#[test]
fn a_request_to_a_named_and_configured_endpoint_is_answered_and_logged_without_secrets() {
    let url = server("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
    let (g, records) = logged([("kms".to_string(), endpoint(&url))].into());
    let a =
        g.send(&allowed(&["kms"]), Ask { body: b"ping".to_vec(), ..ask("/v1/key?token=hidden") }).expect("answered");
    assert_eq!((a.status, a.body), (200, b"ok".to_vec()));
    let records = records.lock().expect("records").clone();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(
        (r.endpoint.as_str(), r.method.as_str(), r.path.as_str(), r.status, r.sent, r.received, r.streamed),
        ("kms", "GET", "/v1/key", Some(200), 4, 2, false)
    );
    assert_eq!(r.error, None);
    // Neither the record nor the gate's own description shows the credential or the query.
    let shown = format!("{records:?} {g:?} {:?}", endpoint(&url));
    assert!(!shown.contains("s3cret") && !shown.contains("hidden"), "{shown}");
}

#[test]
fn every_refusal_names_why_and_sends_nothing() {
    let g = gate("http://127.0.0.1:9");
    let kms = allowed(&["kms"]);
    let none = allowed(&[]);
    let cases = [
        (
            Ask { endpoint: "other".into(), ..ask("/") },
            &kms,
            "endpoint \"other\" is not named in the plugin's manifest; no request was sent",
        ),
        (ask("/"), &none, "endpoint \"kms\" is not named in the plugin's manifest; no request was sent"),
        (ask("relative"), &kms, "path \"relative\" must be absolute; no request was sent"),
        (ask("//evil.example/x"), &kms, "path \"//evil.example/x\" must be absolute; no request was sent"),
        (Ask { method: "CONNECT".into(), ..ask("/") }, &kms, "method \"CONNECT\" is not allowed; no request was sent"),
        (
            Ask { headers: vec![("Authorization".into(), "Bearer mine".into())], ..ask("/") },
            &kms,
            "header \"Authorization\" is the host's to set; no request was sent",
        ),
        (
            Ask { headers: vec![("X-Smuggled".into(), "1".into())], ..ask("/") },
            &kms,
            "header \"X-Smuggled\" is not declared in the plugin's manifest; no request was sent",
        ),
        (
            Ask { body: vec![0; MAX_REQUEST_BYTES + 1], ..ask("/") },
            &kms,
            "a body of 4194305 bytes is over 4194304; no request was sent",
        ),
        (
            Ask { target: Some("sbx1".into()), ..ask("/") },
            &kms,
            "endpoint \"kms\" has no host per target; no request was sent",
        ),
    ];
    for (a, allowed, expected) in cases {
        assert_eq!(g.send(allowed, a.clone()).expect_err("refused"), expected);
        assert_eq!(g.open(allowed, a).expect_err("refused"), expected);
    }
    let unconfigured = HttpGate::new(BTreeMap::new()).expect("gate");
    assert_eq!(
        unconfigured.send(&kms, ask("/")).expect_err("refused"),
        "endpoint \"kms\" is not configured by the operator; no request was sent"
    );
}

#[test]
fn an_operator_header_cannot_be_overridden_by_the_plugin() {
    let mut e = endpoint("http://127.0.0.1:9");
    e.headers.push(("x-api-key".into(), "k3y".into()));
    let g = HttpGate::new([("kms".to_string(), e)].into()).expect("gate");
    let mut a = allowed(&["kms"]);
    a.headers.push("x-api-key".into());
    let err = g.send(&a, Ask { headers: vec![("X-Api-Key".into(), "mine".into())], ..ask("/") }).expect_err("refused");
    assert_eq!(err, "header \"X-Api-Key\" is the host's to set; no request was sent");
}

/// A server that answers with the Host header it was asked for, to show where a
/// per-target request went; returns its port.
fn echo_host() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap_or(0);
            let text = String::from_utf8_lossy(&buf[..n]).into_owned();
            let host = text.lines().find_map(|l| l.strip_prefix("host: ")).unwrap_or("none").to_string();
            let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{host}", host.len());
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    port
}

#[test]
fn a_per_target_endpoint_takes_a_dns_label_and_connects_where_the_operator_says() {
    let port = echo_host();
    let base = format!("http://49983-{{target}}.sandbox.test:{port}");
    let pinned = Endpoint { base, connect_to: Some([127, 0, 0, 1].into()), ..Endpoint::default() };
    let g = HttpGate::new([("envd".to_string(), pinned)].into()).expect("gate");
    let a = allowed(&["envd"]);
    let envd =
        |target: Option<&str>| Ask { endpoint: "envd".into(), target: target.map(String::from), ..ask("/health") };
    // The name stays the server's (its Host header), the connection goes to the
    // operator's address.
    let answer = g.send(&a, envd(Some("i4x9k2"))).expect("answered");
    assert_eq!(String::from_utf8_lossy(&answer.body), format!("49983-i4x9k2.sandbox.test:{port}"));
    assert_eq!(g.send(&a, envd(None)).expect_err("no target"), "endpoint \"envd\" needs a target; no request was sent");
    for bad in ["", "UPPER", "a.b", "a/b", "-a", "a-", "a@b", &"x".repeat(64)] {
        assert_eq!(
            g.send(&a, envd(Some(bad))).expect_err(bad),
            format!("target {bad:?} must be lowercase letters, digits and dashes (at most 63); no request was sent")
        );
    }
}

#[test]
fn a_redirect_is_not_followed_and_bad_urls_are_refused() {
    let url =
        server("HTTP/1.1 302 Found\r\nLocation: http://10.0.0.1/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let (g, records) = logged([("kms".to_string(), endpoint(&url))].into());
    let expected = "endpoint \"kms\" answered with a redirect (302), which is not followed";
    assert_eq!(g.send(&allowed(&["kms"]), ask("/")).expect_err("redirect"), expected);
    assert_eq!(g.open(&allowed(&["kms"]), ask("/")).expect_err("redirect"), expected);
    let records = records.lock().expect("records").clone();
    assert_eq!(
        records.iter().map(|r| (r.status, r.error.as_deref())).collect::<Vec<_>>(),
        [(Some(302), Some(expected)), (Some(302), Some(expected))]
    );
    // A wrong scheme, no scheme at all (it parses as a bare authority), and a query
    // (the plugin's path is appended, so a query in the base would end up mid-path).
    for base in ["ftp://127.0.0.1/", "127.0.0.1:80", "http://127.0.0.1/?q=1"] {
        let e = HttpGate::new([("x".to_string(), Endpoint { base: base.into(), ..Endpoint::default() })].into())
            .expect_err(base);
        assert_eq!(e, format!("endpoint x: {base:?} must be an absolute http or https URL without a query"));
    }
    for base in ["https://a.example/{target}", "https://{target}.{target}.example", "https://a.example?{target}"] {
        let e = HttpGate::new([("x".to_string(), Endpoint { base: base.into(), ..Endpoint::default() })].into())
            .expect_err(base);
        assert_eq!(e, format!("endpoint x: {base:?} may name {{target}} once, in its host"));
    }
    for base in ["https://{target}", "https://{target}.e2b.app", "https://49983-{target}.e2b.app:8443/v1"] {
        assert!(
            HttpGate::new([("x".to_string(), Endpoint { base: base.into(), ..Endpoint::default() })].into()).is_ok(),
            "{base}"
        );
    }
    let e = HttpGate::new([("x".to_string(), Endpoint { base: "http://a b/".into(), ..Endpoint::default() })].into())
        .expect_err("not a URL");
    assert_eq!(e, "endpoint x: \"http://a b/\" is not a URL: invalid uri character");
}

/// The streams a test server can send, one per path.
fn stream_body(path: &str) -> (http::HeaderMap, Vec<(Duration, Frame<Bytes>)>) {
    let data = |ms: u64, s: &'static str| (Duration::from_millis(ms), Frame::data(Bytes::from_static(s.as_bytes())));
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    match path {
        "/pieces" => (http::HeaderMap::new(), vec![data(0, "one "), data(50, "two "), data(50, "three")]),
        "/slow" => (http::HeaderMap::new(), vec![data(0, "first"), data(2_000, "late")]),
        // HTTP/1.1 carries only the trailers the head announced.
        "/trailers" => (
            [(http::header::TRAILER, http::HeaderValue::from_static("grpc-status"))].into_iter().collect(),
            vec![data(0, "msg"), (Duration::ZERO, Frame::trailers(trailers))],
        ),
        // gRPC: a create answering SandboxResponse{sandbox{metadata{name}}}, and a delete.
        "/s/Create" | "/s/Delete" => {
            let name = b"plimsoll-1";
            let meta = [&[0x12, name.len() as u8][..], name].concat();
            let sandbox = [&[0x0a, meta.len() as u8][..], &meta].concat();
            let message =
                if path == "/s/Create" { [&[0x0a, sandbox.len() as u8][..], &sandbox].concat() } else { vec![] };
            let framed = [&[0u8, 0, 0, 0, message.len() as u8][..], &message].concat();
            let mut t = http::HeaderMap::new();
            t.insert("grpc-status", http::HeaderValue::from_static("0"));
            let head = [
                (http::header::TRAILER, http::HeaderValue::from_static("grpc-status")),
                (http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc")),
            ];
            (
                head.into_iter().collect(),
                vec![(Duration::ZERO, Frame::data(Bytes::from(framed))), (Duration::ZERO, Frame::trailers(t))],
            )
        }
        _ => (http::HeaderMap::new(), vec![]),
    }
}

#[test]
fn a_grpc_create_books_what_its_answer_names_and_only_a_delete_that_succeeded_forgets_it() {
    let (port, _) = stream_server(None);
    let booking = GrpcBooking {
        create: "/s/Create".into(),
        made_at: vec![1, 1, 2],
        delete: "/s/Delete".into(),
        deleted_at: vec![1],
    };
    let g = gate(&format!("http://127.0.0.1:{port}")).booking_grpc("kms", booking).expect("booking");
    let a = allowed(&["kms"]);
    let post = |path: &str, body: &[u8]| Ask { method: "POST".into(), body: body.to_vec(), ..ask(path) };
    let created = g.send(&a, post("/s/Create", b"")).expect("created");
    assert_eq!(created.trailers, [("grpc-status".to_string(), "0".to_string())]);
    assert_eq!((created.captured, g.holds("plimsoll-1")), (vec!["plimsoll-1".to_string()], true));
    // DeleteSandboxRequest{name}: an OK answer forgets it (a failed one is
    // grpc.rs's to test).
    let request = [&[0u8, 0, 0, 0, 12, 0x0a, 10][..], b"plimsoll-1"].concat();
    g.send(&a, post("/s/Delete", &request)).expect("deleted");
    assert!(!g.holds("plimsoll-1"));
    // A create or delete sent as a stream would hide it from the book: refused.
    for path in ["/s/Create", "/s/Delete"] {
        let Err(e) = g.open(&a, post(path, b"")) else { panic!("{path}: streamed") };
        assert_eq!(
            e,
            format!(
                "a POST of {path} at endpoint \"kms\" may make or delete a sandbox the host books, so it is read whole: use send; no request was sent"
            )
        );
    }
    assert!(g.open(&a, post("/pieces", b"")).is_ok(), "other methods stream");
    let e = HttpGate::new(BTreeMap::new())
        .expect("gate")
        .booking_grpc(
            "api",
            GrpcBooking { create: String::new(), made_at: vec![], delete: String::new(), deleted_at: vec![] },
        )
        .expect_err("unconfigured");
    assert_eq!(e, "targets are booked from endpoint \"api\", which is not configured");
}

/// Serves `answer` for each request on a loopback port (HTTP/1.1 and HTTP/2,
/// over TLS when `tls` is given), on a thread of its own; returns the port.
pub(super) fn serve<B>(
    tls: Option<Arc<rustls::ServerConfig>>,
    answer: impl Fn(http::Request<hyper::body::Incoming>) -> http::Response<B> + Send + Sync + 'static,
) -> u16
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    use hyper_util::rt::TokioIo;
    let answer = Arc::new(answer);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            tx.send(listener.local_addr().expect("addr").port()).expect("port");
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let (tls, answer) = (tls.clone(), Arc::clone(&answer));
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let resp = answer(req);
                        async move { Ok::<_, std::convert::Infallible>(resp) }
                    });
                    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    match tls {
                        None => {
                            let _ = builder.serve_connection_with_upgrades(TokioIo::new(tcp), service).await;
                        }
                        Some(cfg) => {
                            let Ok(stream) = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await else { return };
                            let _ = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).await;
                        }
                    }
                });
            }
        });
    });
    rx.recv().expect("port")
}

/// A hyper server (HTTP/1.1 and HTTP/2, over TLS when `tls` is given) that
/// streams [`stream_body`] for each path and says on `/version` which protocol
/// it spoke. Returns its port and a flag raised when a stream's client went away.
fn stream_server(tls: Option<Arc<rustls::ServerConfig>>) -> (u16, Arc<std::sync::atomic::AtomicBool>) {
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&gone);
    let port = serve(tls, move |req| {
        let flag = Arc::clone(&flag);
        let version = format!("{:?}", req.version());
        let (head, frames) = stream_body(req.uri().path());
        let (send, recv) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
        tokio::spawn(async move {
            if frames.is_empty() {
                let _ = send.send(Ok(Frame::data(Bytes::from(version)))).await;
            }
            for (wait, frame) in frames {
                tokio::time::sleep(wait).await;
                if send.send(Ok(frame)).await.is_err() {
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
            }
        });
        let mut resp = http::Response::new(StreamBody::new(tokio_stream(recv)));
        *resp.headers_mut() = head;
        resp
    });
    (port, gone)
}

/// The receiving end of a channel as a stream of frames.
fn tokio_stream(
    mut rx: tokio::sync::mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Frame<Bytes>, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[test]
fn a_stream_is_read_in_pieces_with_its_trailers_and_logged_once() {
    let (port, _) = stream_server(None);
    let (g, records) = logged([("kms".to_string(), endpoint(&format!("http://127.0.0.1:{port}")))].into());
    let a = allowed(&["kms"]);
    let mut s = g.open(&a, ask("/pieces")).expect("head");
    assert_eq!(s.status, 200);
    let mut got = Vec::new();
    while let Some(piece) = s.read(Duration::from_secs(5)).expect("piece") {
        got.extend(piece);
    }
    assert_eq!(got, b"one two three");
    assert_eq!(s.read(Duration::from_secs(1)).expect("still ended"), None);
    let mut s = g.open(&a, ask("/trailers")).expect("head");
    assert_eq!(s.read(Duration::from_secs(5)).expect("piece"), Some(b"msg".to_vec()));
    assert_eq!(s.read(Duration::from_secs(5)).expect("end"), None);
    assert_eq!(s.trailers(), [("grpc-status".to_string(), "0".to_string())]);
    drop(s);
    let records = records.lock().expect("records").clone();
    assert_eq!(
        records.iter().map(|r| (r.path.as_str(), r.received, r.streamed, r.error.clone())).collect::<Vec<_>>(),
        [("/pieces", 13, true, None), ("/trailers", 3, true, None)]
    );
}

#[test]
fn a_slow_stream_waits_no_longer_than_asked_and_ends_at_its_time_and_a_dropped_one_is_cancelled() {
    let (port, gone) = stream_server(None);
    let (g, records) = logged([("kms".to_string(), endpoint(&format!("http://127.0.0.1:{port}")))].into());
    let a = allowed(&["kms"]);
    let mut s = g.open(&a, Ask { timeout: Duration::from_millis(800), ..ask("/slow") }).expect("head");
    assert_eq!(s.read(Duration::from_secs(5)).expect("first"), Some(b"first".to_vec()));
    // A short wait comes back empty-handed; the stream goes on.
    assert_eq!(s.read(Duration::from_millis(50)).expect("nothing yet"), Some(Vec::new()));
    // The request's own time ends it, for good.
    let expected = "endpoint \"kms\": the stream outlived the request's time";
    assert_eq!(s.read(Duration::from_secs(5)).expect_err("over time"), expected);
    assert_eq!(s.read(Duration::from_secs(5)).expect_err("ended"), expected);
    // Dropping a stream mid-way resets it: the server's next send finds nobody.
    let s = g.open(&a, ask("/slow")).expect("head");
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone.load(std::sync::atomic::Ordering::SeqCst), "the server still had a reader");
    let records = records.lock().expect("records").clone();
    assert_eq!(
        records.iter().map(|r| (r.error.clone(), r.cancelled)).collect::<Vec<_>>(),
        [(Some(expected.to_string()), false), (None, true)],
        "a stream the plugin let go of is cancelled, not failed"
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM.
pub(super) struct Pki {
    pub(super) ca: String,
    server: (String, String),
    pub(super) client: (String, String),
}

pub(super) fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("ca");
    let leaf = |names: Vec<String>| {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(names).expect("params").signed_by(&key, &ca).expect("leaf");
        (cert.pem(), key.serialize_pem())
    };
    Pki { ca: ca.pem(), server: leaf(vec!["127.0.0.1".into()]), client: leaf(vec!["plimsoll-host".into()]) }
}

/// A server configuration that demands a client certificate from `pki`'s CA.
pub(super) fn mtls_server(pki: &Pki) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile_certs(pki.ca.as_bytes()).expect("ca") {
        roots.add(c).expect("root");
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
        .build()
        .expect("verifier");
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            rustls_pemfile_certs(pki.server.0.as_bytes()).expect("chain"),
            PrivateKeyDer::from_pem_slice(pki.server.1.as_bytes()).expect("key"),
        )
        .expect("server config");
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(cfg)
}

#[test]
fn mutual_tls_uses_the_operators_ca_and_client_certificate_and_speaks_http2() {
    let pki = pki();
    let (port, _) = stream_server(Some(mtls_server(&pki)));
    let base = format!("https://127.0.0.1:{port}");
    let with = |tls: EndpointTls| {
        HttpGate::new([("gw".to_string(), Endpoint { base: base.clone(), tls, ..Endpoint::default() })].into())
            .expect("gate")
    };
    let a = allowed(&["gw"]);
    let version = Ask { endpoint: "gw".into(), ..ask("/version") };
    let full = EndpointTls {
        ca_pem: Some(pki.ca.clone().into_bytes()),
        client_pem: Some((pki.client.0.clone().into_bytes(), pki.client.1.clone().into_bytes())),
    };
    // The gate's runtime drives the stream: it lives while the stream is read.
    let gate = with(full);
    let mut s = gate.open(&a, version.clone()).expect("mutual TLS");
    assert_eq!(s.read(Duration::from_secs(5)).expect("body"), Some(b"HTTP/2.0".to_vec()));
    // Without the client certificate the server ends the handshake; without the
    // operator's CA the host does not trust the server.
    let no_client = with(EndpointTls { ca_pem: Some(pki.ca.clone().into_bytes()), client_pem: None });
    let e = no_client.send(&a, version.clone()).expect_err("no client certificate");
    assert!(e.starts_with("endpoint \"gw\" did not answer: "), "{e}");
    let e = with(EndpointTls::default()).send(&a, version).expect_err("untrusted server");
    assert!(e.starts_with("endpoint \"gw\" did not answer: "), "{e}");
    // Files that hold no certificate are refused when the gate is made.
    let empty = EndpointTls { ca_pem: Some(b"not a pem".to_vec()), client_pem: None };
    let e = HttpGate::new([("gw".to_string(), Endpoint { base, tls: empty, ..Endpoint::default() })].into())
        .expect_err("no CA");
    assert_eq!(e, "endpoint gw: its CA file holds no certificate");
}

/// A request as [`route_server`] hands it to its handler: method, path, headers
/// (lowercase names).
type Seen = (String, String, Vec<(String, String)>);

/// A small HTTP/1.1 server answering each request with `answer(request)`'s
/// status and body; returns its port.
fn route_server(answer: impl Fn(&Seen) -> (u16, String) + Send + 'static) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let text = String::from_utf8_lossy(&buf).into_owned();
            let mut lines = text.lines();
            let mut first = lines.next().unwrap_or_default().split(' ');
            let (method, path) =
                (first.next().unwrap_or_default().to_string(), first.next().unwrap_or_default().to_string());
            let headers = lines
                .take_while(|l| !l.is_empty())
                .filter_map(|l| l.split_once(": "))
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
                .collect();
            let (status, body) = answer(&(method, path, headers));
            let reply = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    port
}

#[test]
fn a_per_target_secret_is_held_by_the_host_attached_for_its_target_and_forgotten_with_it() {
    let api = route_server(|(method, path, _)| match (method.as_str(), path.as_str()) {
        ("POST", "/sandboxes") => {
            (201, r#"{"sandboxID":"abc123","envdAccessToken":"tok-s3cret","domain":"sandbox.test"}"#.into())
        }
        ("DELETE", "/sandboxes/abc123") => (204, String::new()),
        _ => (404, r#"{"code":404,"message":"not found"}"#.into()),
    });
    let envd = route_server(|(_, _, headers)| {
        let token = headers.iter().find(|(k, _)| k == "x-access-token").map(|(_, v)| v.as_str());
        (200, format!("{{\"token\":{}}}", token == Some("tok-s3cret")))
    });
    let endpoints = [
        ("api".to_string(), Endpoint { base: format!("http://127.0.0.1:{api}"), ..Endpoint::default() }),
        (
            "envd".to_string(),
            Endpoint {
                base: format!("http://49983-{{target}}.sandbox.test:{envd}"),
                connect_to: Some([127, 0, 0, 1].into()),
                ..Endpoint::default()
            },
        ),
    ];
    let kind = HeldSecret {
        from: "api".into(),
        field: "envdAccessToken".into(),
        target_field: "sandboxID".into(),
        target_prefix: String::new(),
        to: "envd".into(),
        header: "x-access-token".into(),
        value_prefix: String::new(),
    };
    let g = HttpGate::new(endpoints.clone().into()).expect("gate").holding(vec![kind.clone()]).expect("holding");
    let mut a = allowed(&["api", "envd"]);
    a.headers.push("x-access-token".into());
    let call = |endpoint: &str, method: &str, path: &str, target: Option<&str>| Ask {
        endpoint: endpoint.into(),
        target: target.map(String::from),
        method: method.into(),
        ..ask(path)
    };
    let created = g.send(&a, call("api", "POST", "/sandboxes", None)).expect("created");
    let created: serde_json::Value = serde_json::from_slice(&created.body).expect("json");
    assert_eq!(created, serde_json::json!({"domain": "sandbox.test", "sandboxID": "abc123"}));
    assert_eq!(g.held(), 1);
    let health = g.send(&a, call("envd", "GET", "/health", Some("abc123"))).expect("envd");
    assert_eq!(health.body, br#"{"token":true}"#);
    // Another target gets nothing; the plugin can neither set the header nor stream
    // the answers that carry the secret.
    let other = g.send(&a, call("envd", "GET", "/health", Some("zzz999"))).expect("envd");
    assert_eq!(other.body, br#"{"token":false}"#);
    let forged =
        Ask { headers: vec![("X-Access-Token".into(), "guess".into())], ..call("envd", "GET", "/", Some("abc123")) };
    assert_eq!(
        g.send(&a, forged).expect_err("forged"),
        "header \"X-Access-Token\" is the host's to set; no request was sent"
    );
    assert_eq!(
        g.open(&a, call("api", "GET", "/sandboxes", None)).expect_err("streamed"),
        "endpoint \"api\" answers with secrets the host holds, so it is read whole: use send; no request was sent"
    );
    // Deleting the sandbox forgets its secret.
    g.send(&a, call("api", "DELETE", "/sandboxes/abc123", None)).expect("deleted");
    assert_eq!(g.held(), 0);
    let after = g.send(&a, call("envd", "GET", "/health", Some("abc123"))).expect("envd");
    assert_eq!(after.body, br#"{"token":false}"#);
    // A secret can only go to an endpoint with a host per target.
    let e = HttpGate::new(endpoints.into())
        .expect("gate")
        .holding(vec![HeldSecret { to: "api".into(), ..kind }])
        .expect_err("no target host");
    assert_eq!(e, "a held secret goes to endpoint \"api\", which has no host per target");
}

#[test]
fn a_scoped_bearer_named_by_a_resource_name_is_attached_with_its_scheme_and_creates_are_booked() {
    // Docker's endpoint credential: `{"token", "sandbox": "sandboxes/<uid>"}`, sent
    // to that sandbox's endpoint as `Authorization: Bearer <token>`.
    let api = route_server(|(method, path, _)| match (method.as_str(), path.as_str()) {
        ("POST", "/v1/sandboxes/abc123/endpoint-credentials") => {
            (200, r#"{"token":"scoped-0123456789","sandbox":"sandboxes/abc123","audience":"x"}"#.into())
        }
        ("POST", "/v1/sandboxes") => (202, r#"{"uid":"abc123","name":"sandboxes/abc123"}"#.into()),
        ("GET", "/v1/sandboxes/zzz999") => (200, r#"{"uid":"zzz999"}"#.into()),
        ("DELETE", "/v1/sandboxes/abc123") => (204, String::new()),
        _ => (200, r#"{"token":"stray-0123456789","sandbox":"images/abc123"}"#.into()),
    });
    let sandbox = route_server(|(_, _, headers)| {
        let auth = headers.iter().find(|(k, _)| k == "authorization").map(|(_, v)| v.clone()).unwrap_or_default();
        (200, format!("{{\"auth\":{auth:?}}}"))
    });
    let endpoints = [
        ("api".to_string(), Endpoint { base: format!("http://127.0.0.1:{api}"), ..Endpoint::default() }),
        (
            "endpoint".to_string(),
            Endpoint {
                base: format!("http://{{target}}.sandbox.test:{sandbox}"),
                connect_to: Some([127, 0, 0, 1].into()),
                ..Endpoint::default()
            },
        ),
    ];
    let kind = HeldSecret {
        from: "api".into(),
        field: "token".into(),
        target_field: "sandbox".into(),
        target_prefix: "sandboxes/".into(),
        to: "endpoint".into(),
        header: "authorization".into(),
        value_prefix: "Bearer ".into(),
    };
    let g = HttpGate::new(endpoints.into())
        .expect("gate")
        .holding(vec![kind])
        .expect("holding")
        .booking("api", "uid")
        .expect("booking");
    let a = allowed(&["api", "endpoint"]);
    let call = |endpoint: &str, path: &str, target: Option<&str>| Ask {
        endpoint: endpoint.into(),
        target: target.map(String::from),
        method: "POST".into(),
        ..ask(path)
    };
    // The create books its sandbox before any secret of it is held; a read does not.
    let created = g.send(&a, call("api", "/v1/sandboxes", None)).expect("created");
    assert_eq!((created.captured, g.holds("abc123"), g.held()), (vec!["abc123".to_string()], true, 0));
    g.send(&a, Ask { method: "GET".into(), ..call("api", "/v1/sandboxes/zzz999", None) }).expect("read");
    assert!(!g.holds("zzz999"));
    let minted = g.send(&a, call("api", "/v1/sandboxes/abc123/endpoint-credentials", None)).expect("minted");
    let minted: serde_json::Value = serde_json::from_slice(&minted.body).expect("json");
    assert_eq!(minted, serde_json::json!({"sandbox": "sandboxes/abc123", "audience": "x"}));
    let used = g.send(&a, call("endpoint", "/v1/processes/exec", Some("abc123"))).expect("exec");
    assert_eq!(used.body, br#"{"auth":"Bearer scoped-0123456789"}"#);
    // A field naming another kind of resource names no target: the token is still
    // taken out of the answer, and held for nobody.
    let stray = g.send(&a, call("api", "/v1/other", None)).expect("stray");
    assert_eq!(stray.body, br#"{"sandbox":"images/abc123"}"#);
    assert_eq!(g.held(), 1);
    // Its delete forgets the sandbox and its credential.
    g.send(&a, Ask { method: "DELETE".into(), ..call("api", "/v1/sandboxes/abc123", None) }).expect("deleted");
    assert_eq!((g.holds("abc123"), g.held()), (false, 0));
    let e = HttpGate::new(BTreeMap::new()).expect("gate").booking("api", "uid").expect_err("unconfigured");
    assert_eq!(e, "targets are booked from endpoint \"api\", which is not configured");
}

#[test]
fn a_kubernetes_collection_books_what_a_post_makes_until_a_read_says_it_is_gone() {
    let api = route_server(|(method, path, _)| match (method.as_str(), path.as_str()) {
        ("POST", "/ns/p/sandboxclaims") => (201, r#"{"metadata":{"name":"plimsoll-abc"}}"#.into()),
        ("POST", _) => (201, r#"{"metadata":{"name":"elsewhere"}}"#.into()),
        // A foreground delete answers the object, still there with its deletionTimestamp.
        ("DELETE", "/ns/p/sandboxclaims/plimsoll-abc") => (200, r#"{"metadata":{"name":"plimsoll-abc"}}"#.into()),
        ("GET", "/ns/p/sandboxclaims/plimsoll-abc?x=1") => (404, "{}".into()),
        _ => (404, "{}".into()),
    });
    let endpoints = [("api".to_string(), Endpoint { base: format!("http://127.0.0.1:{api}"), ..Endpoint::default() })];
    let g = HttpGate::new(endpoints.into())
        .expect("gate")
        .booking_collection("api", "/sandboxclaims", "/metadata/name")
        .expect("booking");
    let a = allowed(&["api"]);
    let call = |method: &str, path: &str| Ask { endpoint: "api".into(), method: method.into(), ..ask(path) };
    let made = g.send(&a, call("POST", "/ns/p/sandboxclaims")).expect("created");
    assert_eq!((made.captured, g.holds("plimsoll-abc")), (vec!["plimsoll-abc".to_string()], true));
    // A POST elsewhere makes nothing booked; a 404 elsewhere forgets nothing.
    g.send(&a, call("POST", "/ns/p/pods/x:1/proxy/v1/exec")).expect("exec");
    assert!(!g.holds("elsewhere"));
    g.send(&a, call("GET", "/ns/p/pods/plimsoll-abc")).expect("pod read");
    assert!(g.holds("plimsoll-abc"));
    // The foreground delete's 200 is not yet gone; the read's 404 is.
    g.send(&a, call("DELETE", "/ns/p/sandboxclaims/plimsoll-abc")).expect("deleted");
    assert!(g.holds("plimsoll-abc"));
    g.send(&a, call("GET", "/ns/p/sandboxclaims/plimsoll-abc?x=1")).expect("gone");
    assert!(!g.holds("plimsoll-abc"));
}

#[test]
fn every_credential_the_gate_attaches_is_redacted_from_text_a_plugin_passes_on() {
    let api = route_server(|_| (201, r#"{"sandboxID":"abc123","envdAccessToken":"tok-s3cret-0123"}"#.into()));
    let mut e = endpoint(&format!("http://127.0.0.1:{api}"));
    e.headers.push(("x-api-key".into(), "e2b_0123456789".into()));
    e.headers.push(("x-short".into(), "1".into()));
    let envd = Endpoint { base: "http://{target}.sandbox.test:9".into(), ..Endpoint::default() };
    let kind = HeldSecret {
        from: "kms".into(),
        field: "envdAccessToken".into(),
        target_field: "sandboxID".into(),
        target_prefix: String::new(),
        to: "envd".into(),
        header: "x-access-token".into(),
        value_prefix: String::new(),
    };
    let g = HttpGate::new([("kms".to_string(), e), ("envd".to_string(), envd)].into())
        .expect("gate")
        .holding(vec![kind])
        .expect("holding");
    g.send(&allowed(&["kms"]), Ask { method: "POST".into(), ..ask("/sandboxes") }).expect("created");
    let said = "the vendor said: key e2b_0123456789, bearer Bearer s3cret, token s3cret, envd tok-s3cret-0123, 1 item";
    assert_eq!(
        g.redact(said),
        "the vendor said: key <redacted>, bearer <redacted>, token s3cret, envd <redacted>, 1 item",
        "the operator's headers and the held token go; a value under 8 bytes (\"1\", \"s3cret\") is no credential"
    );
}

/// A JWT whose `exp` is `secs` from now (unsigned: the host reads `exp` only to
/// schedule the renewal).
fn jwt_expiring_in(secs: u64) -> String {
    use base64::Engine as _;
    let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    format!("{}.{}.sig", b(r#"{"alg":"RS256"}"#), b(&format!("{{\"exp\":{}}}", now + secs)))
}

#[test]
fn the_host_trades_the_operators_token_for_a_bearer_and_renews_it_before_it_ends() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let trades = Arc::new(AtomicUsize::new(0));
    let life = Arc::new(std::sync::atomic::AtomicU64::new(900));
    let (t, l) = (Arc::clone(&trades), Arc::clone(&life));
    let hub = route_server(move |(method, path, _)| {
        if (method.as_str(), path.as_str()) != ("POST", "/v2/auth/token") {
            return (404, "{}".into());
        }
        t.fetch_add(1, Ordering::SeqCst);
        (200, format!("{{\"access_token\":\"{}\"}}", jwt_expiring_in(l.load(Ordering::SeqCst))))
    });
    let api = route_server(|(_, _, headers)| {
        let auth = headers.iter().find(|(k, _)| k == "authorization").map(|(_, v)| v.clone()).unwrap_or_default();
        (200, format!("{{\"bearer\":{}}}", auth.starts_with("Bearer ey")))
    });
    let exchange = TokenExchange {
        url: format!("http://127.0.0.1:{hub}/v2/auth/token"),
        identifier: "me".into(),
        secret: "dckr_pat_s3cret".into(),
    };
    let e =
        Endpoint { base: format!("http://127.0.0.1:{api}"), exchange: Some(exchange.clone()), ..Endpoint::default() };
    let g = HttpGate::new([("kms".to_string(), e)].into()).expect("gate");
    let a = allowed(&["kms"]);
    for _ in 0..3 {
        assert_eq!(g.send(&a, ask("/v1/sandboxes")).expect("answered").body, br#"{"bearer":true}"#);
    }
    assert_eq!(trades.load(Ordering::SeqCst), 1, "a bearer good for 15 minutes is traded once");
    assert!(!g.redact("pat dckr_pat_s3cret").contains("s3cret"), "the operator's token is redacted");
    // A bearer within a minute of its end is renewed before the next request.
    life.store(30, Ordering::SeqCst);
    let g = HttpGate::new(
        [(
            "kms".to_string(),
            Endpoint {
                base: format!("http://127.0.0.1:{api}"),
                exchange: Some(exchange.clone()),
                ..Endpoint::default()
            },
        )]
        .into(),
    )
    .expect("gate");
    g.send(&a, ask("/")).expect("first");
    g.send(&a, ask("/")).expect("second");
    assert_eq!(trades.load(Ordering::SeqCst), 3);
    // A refused exchange sends nothing, and never echoes what the exchange said.
    let refusing =
        route_server(|_| (401, r#"{"detail":"incorrect authentication credentials dckr_pat_s3cret"}"#.into()));
    let bad = TokenExchange { url: format!("http://127.0.0.1:{refusing}/v2/auth/token"), ..exchange };
    let g = HttpGate::new(
        [(
            "kms".to_string(),
            Endpoint { base: "http://127.0.0.1:9".into(), exchange: Some(bad.clone()), ..Endpoint::default() },
        )]
        .into(),
    )
    .expect("gate");
    assert_eq!(
        g.send(&a, ask("/")).expect_err("refused"),
        format!(
            "endpoint \"kms\": the token exchange at {} refused the operator's credential (401 Unauthorized); no request was sent",
            bad.url
        )
    );
}

#[test]
fn a_gate_dropped_inside_an_async_runtime_does_not_panic() {
    // A daemon whose startup fails after building a remote provider drops its
    // gate inside the daemon's own runtime.
    let gate = HttpGate::new([("x".to_string(), endpoint("http://127.0.0.1:9"))].into()).expect("gate");
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("rt");
    rt.block_on(async move { drop(gate) });
}
