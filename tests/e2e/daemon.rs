//! The daemon answering over the wire: results, every refusal that can occur with
//! the wasm provider, transport refusals, bad input, concurrency, TLS, h2c, drain.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::Version;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use plimsoll_client::{Client, Error, Options, Settings};
use plimsoll_core::protocol::REQUEST_ID_HEADER;
use plimsoll_core::wire::{JavaScriptRun, RunRequest, RunResponse, from_json};
use plimsoll_core::{Floor, Reason};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use super::raw::{self, Reply};
use super::{Daemon, rt, scratch};

const ID: &str = "0123456789abcdef0123456789abcdef";

fn wasm_daemon(name: &str, extra: &[(&str, &str)]) -> (Daemon, String) {
    super::wasm_daemon(name, "ci", extra)
}

fn assert_refused(r: &Reply, status: u16, code: &str, reason: &str, message: &str) {
    let (c, m, why) = r.error();
    assert_eq!((r.status, c.as_str(), why.as_deref(), m.as_str()), (status, code, Some(reason), message), "{r:?}");
}

#[test]
fn describe_and_run_through_the_checked_client() {
    let (d, token) = wasm_daemon("describe", &[]);
    let client = Client::new(&d.url(), Some(token)).expect("client");
    let rt = rt();
    let desc = rt.block_on(client.describe()).expect("describe");
    assert_eq!((desc.sandbox.as_str(), desc.isolation.as_str(), desc.protocol), ("wasm", "process", 4));
    let js = desc.javascript_environment.expect("javascript environment");
    assert!(js.identity.starts_with("quickjs-wasm:sha256:"));
    assert_eq!(js.max_timeout_ms, 30_000);
    let opts = Options { floor: Some(Floor::Process), trace_id: Some("job-7".into()), ..Options::default() };
    let resp = rt.block_on(client.run_javascript("console.log(6*7)", &opts)).expect("a checked run");
    assert_eq!(resp.javascript.as_ref().map(|j| j.stdout.as_slice()), Some(&b"42\n"[..]));
    let rec = resp.record.expect("record");
    assert_eq!((rec.version, rec.provider.as_str(), rec.isolation.as_str()), (4, "wasm", "process"));
    assert_eq!(rec.environment, js.identity);
}

#[test]
fn every_refusal_reason_the_wasm_provider_can_meet_arrives_marked() {
    let (d, token) = wasm_daemon("reasons", &[]);
    let a = d.addr.as_str();
    // request
    assert_refused(
        &raw::run(a, &token, r#"{"protocol":4,"javascript":{"code":""}}"#),
        400,
        "invalid_argument",
        "request",
        "invalid request: code is required",
    );
    // protocol
    assert_refused(
        &raw::run(a, &token, r#"{"protocol":3,"javascript":{"code":"1"}}"#),
        501,
        "unimplemented",
        "protocol",
        "this daemon serves protocol 4 and the request states 3; nothing ran",
    );
    assert_refused(
        &raw::run(a, &token, r#"{"javascript":{"code":"1"}}"#),
        400,
        "invalid_argument",
        "protocol",
        "protocol must be stated; this daemon serves protocol 4",
    );
    // isolation
    assert_refused(
        &raw::run(a, &token, r#"{"protocol":4,"minimumIsolation":"vm","javascript":{"code":"1"}}"#),
        400,
        "failed_precondition",
        "isolation",
        "sandbox isolation requirement not met: this provider runs at process, the request requires vm",
    );
    // unsupported
    assert_refused(
        &raw::run(a, &token, r#"{"protocol":4,"project":{"steps":["true"]}}"#),
        501,
        "unimplemented",
        "unsupported",
        "step 1 (\"true\") is not a python3 command: the wasm provider runs only `python3 [-I] FILE [ARG...]` \
         steps (or `plimsoll-judge ARGS` steps for a simulation run); the docker provider runs shell steps",
    );
    let r = raw::post(
        a,
        "/plimsoll.v1.SandboxService/OpenSession",
        &[("Content-Type", "application/json"), ("Authorization", &format!("Bearer {token}"))],
        br#"{"protocol":4}"#,
    );
    assert_eq!((r.status, r.error().2.as_deref()), (501, Some("unsupported")));
    // permission: a grant profile the caller may not use, and authentication
    assert_refused(
        &raw::run(a, &token, r#"{"protocol":4,"javascript":{"code":"1","grantProfile":"crm"}}"#),
        403,
        "permission_denied",
        "permission",
        "grant_profile \"crm\" is not available to this caller",
    );
    let missing = raw::post(
        a,
        "/plimsoll.v1.SandboxService/Run",
        &[("Content-Type", "application/json"), ("Plimsoll-Request-Id", ID)],
        b"{}",
    );
    assert_refused(&missing, 401, "unauthenticated", "permission", "missing bearer token");
    assert_eq!(missing.header("plimsoll-not-dispatched"), Some("permission"));
    assert_eq!(missing.header("plimsoll-request-id"), Some(ID));
    assert_refused(
        &raw::run(a, "not-the-token", r#"{"protocol":4}"#),
        401,
        "unauthenticated",
        "permission",
        "invalid or expired token",
    );
}

#[test]
fn capacity_refusals_shed_instead_of_queueing() {
    let (d, token) = wasm_daemon("capacity", &[("SANDBOX_MAX_CONCURRENT", "1")]);
    let addr = d.addr.clone();
    let t = token.clone();
    let slow = std::thread::spawn(move || {
        raw::run(
            &addr,
            &t,
            r#"{"protocol":4,"timeoutMs":3000,"javascript":{"code":"const e = Date.now() + 1500; while (Date.now() < e) {}"}}"#,
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_refused(
        &raw::run(&d.addr, &token, r#"{"protocol":4,"javascript":{"code":"1"}}"#),
        429,
        "resource_exhausted",
        "capacity",
        "sandbox is at capacity, retry shortly",
    );
    assert_eq!(slow.join().expect("slow run").status, 200);
    let metrics = raw::get(d.metrics.as_deref().expect("metrics"), "/metrics");
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(text.contains("plimsoll_shed_total{reason=\"at_capacity\"} 1"), "{text}");
    drop(d);

    let (d, token) = wasm_daemon("rate", &[("SANDBOX_RATE_PER_MIN", "1")]);
    assert_eq!(raw::run(&d.addr, &token, r#"{"protocol":4,"javascript":{"code":"1"}}"#).status, 200);
    assert_refused(
        &raw::run(&d.addr, &token, r#"{"protocol":4,"javascript":{"code":"1"}}"#),
        429,
        "resource_exhausted",
        "capacity",
        "rate limit: 1 runs/min per caller",
    );
}

#[test]
fn transport_refusals_are_marked_before_the_handler() {
    let (d, token) = wasm_daemon("transport", &[]);
    let a = d.addr.as_str();
    let auth = format!("Bearer {token}");
    let big = vec![b' '; (10 << 20) + 1];
    let r = raw::post(
        a,
        "/plimsoll.v1.SandboxService/Run",
        &[("Content-Type", "application/json"), ("Authorization", &auth), ("Plimsoll-Request-Id", ID)],
        &big,
    );
    assert_refused(
        &r,
        429,
        "resource_exhausted",
        "request",
        "invalid request: the request body exceeds 8388608 bytes (8 MiB)",
    );
    assert_eq!(r.header("plimsoll-not-dispatched"), Some("request"));
    assert_eq!(r.header("plimsoll-request-id"), Some(ID));

    let r = raw::post(
        a,
        "/plimsoll.v1.SandboxService/Run",
        &[("Content-Type", "application/proto"), ("Authorization", &auth)],
        b"\x08\x04",
    );
    assert_refused(
        &r,
        400,
        "invalid_argument",
        "request",
        "invalid request: content type \"application/proto\" is not supported; send application/json (Connect's JSON codec)",
    );
    assert_eq!(r.header("plimsoll-not-dispatched"), Some("request"));

    let r = raw::post(
        a,
        "/plimsoll.v1.SandboxService/Explode",
        &[("Content-Type", "application/json"), ("Authorization", &auth)],
        b"{}",
    );
    assert_eq!((r.status, r.header("plimsoll-not-dispatched")), (404, Some("unsupported")));
    let r = raw::get(a, "/plimsoll.v1.SandboxService/Run");
    assert_eq!((r.status, r.header("plimsoll-not-dispatched")), (405, Some("request")));

    // Authentication comes before the body is read: an unauthenticated oversize body
    // is refused as permission, unread.
    let r = raw::post(a, "/plimsoll.v1.SandboxService/Run", &[("Content-Type", "application/json")], &big);
    assert_eq!((r.status, r.header("plimsoll-not-dispatched")), (401, Some("permission")));
}

#[test]
fn bad_input_is_refused_and_the_daemon_keeps_serving() {
    let (d, token) = wasm_daemon("badinput", &[]);
    let a = d.addr.as_str();
    let cases: [(&str, &str); 7] = [
        ("{", "invalid request: RunRequest is not JSON"),
        ("[1,2]", "invalid request: RunRequest must be a JSON object"),
        (
            r#"{"protocol":4,"javascript":{"code":"1"},"bogus":true}"#,
            "invalid request: RunRequest: unknown field `bogus`",
        ),
        (r#"{"protocol":4,"timeoutMs":1e40,"javascript":{"code":"1"}}"#, "is not an integer"),
        (
            r#"{"protocol":4,"timeoutMs":2147483648,"javascript":{"code":"1"}}"#,
            "invalid request: RunRequest: 2147483648 is out of range for int32",
        ),
        (
            r#"{"protocol":4,"javascript":["console.log(1)"]}"#,
            "invalid request: RunRequest: javascript is not a JSON object",
        ),
        (
            r#"{"protocol":4,"javascript":{"code":"1"},"project":{"steps":["x"]}}"#,
            "invalid request: payload must be exactly one of javascript, project, or module; the request sets several",
        ),
    ];
    for (body, want) in cases {
        let r = raw::run(a, &token, body);
        let (code, message, reason) = r.error();
        assert_eq!((r.status, code.as_str(), reason.as_deref()), (400, "invalid_argument", Some("request")), "{body}");
        assert!(message.starts_with("invalid request: ") && message.contains(want), "{body}: {message}");
    }
    // A request ID of the wrong form, or two of them, is never echoed.
    let auth = format!("Bearer {token}");
    let body = br#"{"protocol":4,"javascript":{"code":"1"}}"#;
    for ids in [&["ABCDEF0123456789ABCDEF0123456789"][..], &["0123"], &[ID, ID]] {
        let mut headers = vec![("Content-Type", "application/json"), ("Authorization", auth.as_str())];
        headers.extend(ids.iter().map(|i| ("Plimsoll-Request-Id", *i)));
        let r = raw::post(a, "/plimsoll.v1.SandboxService/Run", &headers, body);
        assert_eq!(r.status, 200);
        assert!(r.all("plimsoll-request-id").is_empty(), "{ids:?} was echoed");
    }
    // Header injection: CR/LF inside a value splits nothing into the answer.
    let injected = format!(
        "POST /plimsoll.v1.SandboxService/Run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: {auth}\r\nPlimsoll-Request-Id: {ID}\rX-Evil: 1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut bytes = injected.into_bytes();
    bytes.extend_from_slice(body);
    let r = raw::send(a, &bytes);
    assert!(r.status == 400 || r.all("plimsoll-request-id").is_empty(), "{r:?}");
    assert!(r.all("x-evil").is_empty());
    // Still serving.
    assert_eq!(raw::get(a, "/healthz").body, b"ok\n");
    assert_eq!(raw::run(a, &token, r#"{"protocol":4,"javascript":{"code":"console.log(1)"}}"#).status, 200);
}

#[test]
fn a_hundred_concurrent_runs_see_no_crosstalk() {
    let (d, token) =
        wasm_daemon("concurrent", &[("SANDBOX_MAX_CONCURRENT", "128"), ("SANDBOX_PER_KEY_CONCURRENT", "128")]);
    let client = Client::new(&d.url(), Some(token)).expect("client");
    let rt = rt();
    let results = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..100 {
            let c = client.clone();
            tasks.push(tokio::spawn(async move {
                let code = format!("globalThis.mine = {i}; for (let k = 0; k < 20000; k++); console.log('run', mine)");
                (i, c.run_javascript(&code, &Options::default()).await)
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("task"));
        }
        out
    });
    for (i, r) in results {
        let resp = r.unwrap_or_else(|e| panic!("run {i}: {e}; the daemon said {:?}", d.log()));
        assert_eq!(resp.javascript.expect("js").stdout, format!("run {i}\n").into_bytes());
    }
}

#[test]
fn health_readiness_and_metrics() {
    let (d, token) = wasm_daemon("health", &[]);
    assert_eq!(
        (raw::get(&d.addr, "/healthz").status, raw::get(&d.addr, "/readyz").body.as_slice()),
        (200, &b"ready\n"[..])
    );
    raw::run(&d.addr, &token, r#"{"protocol":4,"javascript":{"code":"1"}}"#);
    let m = raw::get(d.metrics.as_deref().expect("metrics"), "/metrics");
    let text = String::from_utf8_lossy(&m.body).into_owned();
    assert!(text.contains("plimsoll_runs_total 1\n"), "{text}");
    assert!(text.contains("plimsoll_inflight 0\n"), "{text}");
    // The RPC listener does not serve metrics.
    assert_eq!(raw::get(&d.addr, "/metrics").status, 404);
}

#[test]
fn the_audit_log_never_holds_code_or_tokens() {
    let (d, token) = wasm_daemon("audit", &[]);
    let marker = "SECRET-CODE-MARKER-41";
    raw::run(
        &d.addr,
        &token,
        &format!(r#"{{"protocol":4,"traceId":"t-1","javascript":{{"code":"console.log('{marker}')"}}}}"#),
    );
    raw::run(&d.addr, &token, r#"{"protocol":4,"traceId":"has space","javascript":{"code":"1"}}"#);
    std::thread::sleep(Duration::from_millis(100));
    let log = d.log().join("\n");
    assert!(!log.contains(marker), "code reached the log");
    assert!(!log.contains(&token), "a token reached the log");
    assert!(
        log.contains(r#""msg":"code run""#) && log.contains(r#""caller":"ci""#) && log.contains(r#""trace_id":"t-1""#),
        "{log}"
    );
    assert!(log.contains(r#""trace_id_rejected":true"#), "{log}");
}

#[test]
fn h2c_prior_knowledge_is_served() {
    let (d, token) = wasm_daemon("h2c", &[]);
    let client =
        Client::with_settings(&d.url(), Some(token), Settings { h2c: true, ..Settings::default() }).expect("client");
    let resp = rt().block_on(client.run_javascript("console.log('h2')", &Options::default())).expect("h2c run");
    assert_eq!(resp.javascript.expect("js").stdout, b"h2\n");
}

/// One `Run` of `code` over TLS, trusting only `ca`, with ALPN offering only
/// `offered` (HTTP/1.1 or HTTP/2): the version the answer came back in, and the
/// answer checked exactly as the Rust client checks every answer (record included).
fn run_over_tls(url: &str, ca: &Path, token: &str, offered: Version, code: &str) -> (Version, RunResponse) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(ca).expect("CA file")).expect("a root");
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tcp = HttpConnector::new();
    // The TLS layer wraps it, so the URLs it sees are https.
    tcp.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_only();
    // The builder sets ALPN from the versions enabled: exactly one here, so the
    // server cannot pick the other.
    let https = if offered == Version::HTTP_2 {
        https.enable_http2().wrap_connector(tcp)
    } else {
        assert_eq!(offered, Version::HTTP_11);
        https.enable_http1().wrap_connector(tcp)
    };
    let http: Hyper<_, Full<Bytes>> = Hyper::builder(TokioExecutor::new()).build(https);
    let req = RunRequest {
        protocol: 4,
        javascript: Some(JavaScriptRun { code: code.into(), grant_profile: String::new() }),
        ..RunRequest::default()
    };
    let call = hyper::Request::post(format!("{url}/plimsoll.v1.SandboxService/Run"))
        .header("content-type", "application/json")
        .header("connect-protocol-version", "1")
        .header("authorization", format!("Bearer {token}"))
        .header(REQUEST_ID_HEADER, ID)
        .body(Full::from(serde_json::to_vec(&req).expect("request JSON")))
        .expect("request");
    rt().block_on(async {
        let resp = http.request(call).await.expect("an answer over TLS");
        let (status, version) = (resp.status(), resp.version());
        let ids: Vec<_> = resp.headers().get_all(REQUEST_ID_HEADER).iter().cloned().collect();
        let body = resp.into_body().collect().await.expect("the body").to_bytes();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(ids, [ID], "the answer is bound to the request");
        let answer = from_json::<RunResponse>(&body).expect("a RunResponse");
        (version, plimsoll_client::check_exchange(&req, answer, false).expect("an answer that checks"))
    })
}

#[test]
fn tls_serves_http1_and_h2_with_a_checked_record() {
    let dir = scratch("tls");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).expect("cert");
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).expect("write cert");
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).expect("write key");
    let (cert_s, key_s) = (cert_path.display().to_string(), key_path.display().to_string());
    let (d, token) = wasm_daemon("tls-daemon", &[("PLIMSOLL_TLS_CERT", &cert_s), ("PLIMSOLL_TLS_KEY", &key_s)]);
    let url = format!("https://localhost:{}", d.addr.rsplit(':').next().expect("port"));
    // Each version forced by ALPN, and answered in that version with a record that checks.
    for offered in [Version::HTTP_11, Version::HTTP_2] {
        let (version, resp) = run_over_tls(&url, &cert_path, &token, offered, "console.log('tls')");
        assert_eq!(version, offered);
        assert_eq!(resp.javascript.as_ref().map(|j| j.stdout.as_slice()), Some(&b"tls\n"[..]), "{offered:?}");
        let rec = resp.record.expect("record");
        assert_eq!((rec.provider.as_str(), rec.isolation.as_str()), ("wasm", "process"), "{offered:?}");
    }
    // The Rust client itself, trusting the certificate through its settings.
    let client = Client::with_settings(
        &url,
        Some(token.clone()),
        Settings { ca_file: Some(cert_path.clone()), ..Settings::default() },
    )
    .expect("client");
    let resp = rt().block_on(client.run_javascript("console.log('tls')", &Options::default())).expect("tls run");
    assert_eq!(resp.javascript.expect("js").stdout, b"tls\n");
    // Without trusting the certificate, nothing is sent.
    let untrusting = Client::new(&url, Some(token)).expect("client");
    let err = rt().block_on(untrusting.run_javascript("1", &Options::default())).expect_err("untrusted");
    // The reason is the certificate, not only the stage that failed.
    assert!(matches!(&err, Error::Transport { sent: false, .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "transport: client error (Connect): invalid peer certificate: UnknownIssuer (nothing was sent)"
    );
}

#[test]
fn sigterm_drains_a_run_in_flight() {
    let (d, token) = wasm_daemon("drain", &[]);
    let addr = d.addr.clone();
    let run = std::thread::spawn(move || {
        raw::run(
            &addr,
            &token,
            r#"{"protocol":4,"timeoutMs":5000,"javascript":{"code":"const e = Date.now() + 1000; while (Date.now() < e) {} console.log('done')"}}"#,
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let (code, log) = d.terminate();
    let r = run.join().expect("run");
    assert_eq!(r.status, 200, "the run in flight was cut: {r:?}");
    assert_eq!(code, Some(0));
    assert!(log.iter().any(|l| l.contains("draining")), "{log:?}");
}

#[test]
fn the_client_refuses_bad_requests_before_sending() {
    let (d, token) = wasm_daemon("client-side", &[]);
    let client = Client::new(&d.url(), Some(token)).expect("client");
    let err = rt().block_on(client.run_javascript("", &Options::default())).expect_err("empty");
    assert!(matches!(&err, Error::NotDispatched { reason: Reason::Request, code: None, .. }), "{err}");
    let err = rt()
        .block_on(client.run_javascript("1", &Options { trace_id: Some("has space".into()), ..Options::default() }))
        .expect_err("trace id");
    assert_eq!(err.not_dispatched(), Some(Reason::Request));
    let refused = rt()
        .block_on(client.run_javascript("1", &Options { floor: Some(Floor::Kernel), ..Options::default() }))
        .expect_err("floor");
    assert_eq!(refused.not_dispatched(), Some(Reason::Isolation));
    assert!(!refused.may_have_run());
    // Nothing listening: nothing was sent.
    let gone = Client::new("http://127.0.0.1:9", None).expect("client");
    let err = rt().block_on(gone.run_javascript("1", &Options::default())).expect_err("no daemon");
    assert!(matches!(err, Error::Transport { sent: false, .. }), "{err}");
}
