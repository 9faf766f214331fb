//! The HTTPS mode's router, in process: each bad input the issue names gets
//! the status and error the specifications name, and the server keeps serving.
//! The passkey ceremonies themselves are driven by a real browser in the
//! end-to-end suite (`tests/e2e/mcp_http.rs`).

use std::net::SocketAddr;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt as _, Full};
use serde_json::{Value, json};

use super::app::lock;
use super::{App, Options, StartError};
use crate::config::Config;
use crate::oauth::s256;
use crate::tools::Tools;

const PUBLIC: &str = "https://localhost:8443";
const HOST: &str = "localhost:8443";
const CALLBACK: &str = "http://127.0.0.1:33418/callback";
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const BOTH: &str = "application/json, text/event-stream";

fn peer() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 50000))
}

fn app(dir: &std::path::Path, behind_proxy: bool) -> App {
    let config = Config::from(|k| (k == "PLIMSOLL_URL").then(|| "http://127.0.0.1:9".to_string())).expect("config");
    App::new(PUBLIC, behind_proxy, Tools::new(config).expect("tools"), dir).expect("app")
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("plimsoll-mcp-http-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn header(&self, k: &str) -> String {
        self.headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
    }
}

async fn send(app: &App, req: http::request::Builder, body: impl Into<Bytes>) -> Answer {
    let req = req.body(Full::new(body.into())).expect("request");
    let r = app.handle(req, peer()).await;
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let body = r.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    Answer { status, headers, body }
}

// Each request also carries what a proxy would forward: a server behind none
// ignores it, and one behind a proxy reads it.
fn get(uri: &str) -> http::request::Builder {
    Request::builder()
        .method("GET")
        .uri(uri)
        .header("host", HOST)
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", HOST)
}

fn post(uri: &str) -> http::request::Builder {
    Request::builder()
        .method("POST")
        .uri(uri)
        .header("host", HOST)
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", HOST)
}

/// A client registered, approved by the owner and holding tokens: the
/// approval's id and its access token.
async fn connect(app: &App, name: &str) -> (String, String) {
    let reg = send(
        app,
        post("/register").header("content-type", "application/json"),
        json!({"client_name": name, "redirect_uris": [CALLBACK]}).to_string(),
    )
    .await;
    assert_eq!(reg.status, 201, "{}", reg.text());
    let client = reg.json()["client_id"].as_str().expect("client_id").to_string();
    let q = format!(
        "/authorize?response_type=code&client_id={client}&redirect_uri={}&code_challenge={}&code_challenge_method=S256&state=s1",
        CALLBACK.replace(':', "%3A").replace('/', "%2F"),
        s256(VERIFIER)
    );
    let held = send(app, get(&q), Bytes::new()).await;
    assert_eq!(held.status, 303, "{}", held.text());
    let id = held.header("location").trim_start_matches("/approve/").to_string();
    // The owner's decision (its page and passkey are the browser suite's).
    let (to, approval) = lock(&app.auth).decide(&id, true, Instant::now(), SystemTime::now()).expect("decided");
    let code = to.split(['?', '&']).find_map(|p| p.strip_prefix("code=")).expect("code").to_string();
    let form = format!(
        "grant_type=authorization_code&code={code}&client_id={client}&redirect_uri={}&code_verifier={VERIFIER}",
        CALLBACK.replace(':', "%3A").replace('/', "%2F")
    );
    let tok = send(app, post("/token").header("content-type", "application/x-www-form-urlencoded"), form).await;
    assert_eq!(tok.status, 200, "{}", tok.text());
    (approval.expect("approved").id, tok.json()["access_token"].as_str().expect("token").to_string())
}

fn mcp(token: &str) -> http::request::Builder {
    post("/mcp")
        .header("authorization", format!("Bearer {token}"))
        .header("accept", BOTH)
        .header("content-type", "application/json")
}

fn initialize() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    .to_string()
}

#[test]
fn options_refuse_what_cannot_be_served_safely() {
    let base = Options {
        listen: "127.0.0.1:8443".parse().expect("addr"),
        tls: None,
        behind_proxy: false,
        public_url: None,
        state_dir: "/tmp/x".into(),
    };
    assert_eq!(base.public(), Err(StartError::NoTls));
    let tls = Options { tls: Some(("c.pem".into(), "k.pem".into())), ..base.clone() };
    assert_eq!(tls.public().as_deref(), Ok("https://localhost:8443"));
    let both = Options { behind_proxy: true, ..tls.clone() };
    assert_eq!(both.public(), Err(StartError::TlsAndProxy));
    let open = Options { listen: "0.0.0.0:443".parse().expect("addr"), behind_proxy: true, ..base.clone() };
    assert_eq!(open.public(), Err(StartError::ProxyNotLoopback("0.0.0.0:443".parse().expect("addr"))));
    let unnamed = Options { listen: "0.0.0.0:443".parse().expect("addr"), ..tls.clone() };
    assert_eq!(
        unnamed.public().expect_err("no url").to_string(),
        "--listen 0.0.0.0:443 is not loopback: give --public-url https://NAME[:PORT], the name clients and browsers use"
    );
    let http = Options { public_url: Some("http://mcp.example".into()), ..tls.clone() };
    assert!(matches!(http.public(), Err(StartError::PublicUrl(_))));
    let named = Options { public_url: Some("https://mcp.example/".into()), ..unnamed };
    assert_eq!(named.public().as_deref(), Ok("https://mcp.example"));
}

#[tokio::test]
async fn another_host_or_an_unforwarded_request_is_refused() {
    let dir = scratch("host");
    let a = app(&dir, false);
    let r = send(&a, Request::builder().uri("/").header("host", "evil.example:8443"), Bytes::new()).await;
    assert_eq!(
        (r.status, r.json()["error"].as_str()),
        (421, Some("this server answers for localhost:8443, not \"evil.example:8443\""))
    );
    // Forwarded headers mean nothing to a server with no proxy in front.
    let r = send(&a, get("/").header("x-forwarded-host", "evil.example"), Bytes::new()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-frame-options"), "DENY");
    assert!(r.header("content-security-policy").contains("frame-ancestors 'none'"));
    let p = app(&scratch("proxy"), true);
    let r = send(&p, Request::builder().uri("/").header("host", "127.0.0.1:8080"), Bytes::new()).await;
    assert_eq!(r.status, 421);
    assert!(r.text().contains("X-Forwarded-Proto: https"), "{}", r.text());
    let fwd = |host: &str| {
        Request::builder()
            .uri("/.well-known/oauth-authorization-server")
            .header("host", "127.0.0.1:8080")
            .header("x-forwarded-proto", "https")
            .header("x-forwarded-host", host.to_string())
    };
    assert_eq!(send(&p, fwd("evil.example"), Bytes::new()).await.status, 421);
    let r = send(&p, fwd(HOST), Bytes::new()).await;
    assert_eq!((r.status, r.json()["issuer"].as_str()), (200, Some(PUBLIC)));
    // A proxy that rewrites Host to its upstream's still reaches the MCP transport.
    let (_, token) = connect(&p, "behind a proxy").await;
    let rewritten = mcp(&token).header("host", "127.0.0.1:8080");
    let r = send(&p, rewritten, initialize()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // HSTS holds for every port of a host, so none is sent for localhost's.
    assert_eq!(r.header("strict-transport-security"), "");
    let config = Config::from(|k| (k == "PLIMSOLL_URL").then(|| "http://127.0.0.1:9".to_string())).expect("config");
    let named =
        App::new("https://mcp.example", false, Tools::new(config).expect("tools"), &scratch("named")).expect("app");
    let req = Request::builder().uri("/.well-known/oauth-authorization-server").header("host", "mcp.example");
    assert_eq!(send(&named, req, Bytes::new()).await.header("strict-transport-security"), "max-age=31536000");
}

#[tokio::test]
async fn one_address_is_limited_before_sign_in_and_a_revoked_scope_keeps_nothing() {
    let a = app(&scratch("limits"), false);
    let body = json!({"client_name": "c", "redirect_uris": [CALLBACK]}).to_string();
    for _ in 0..super::app::OPEN_PER_ADDRESS {
        let r = send(&a, post("/register").header("content-type", "application/json"), body.clone()).await;
        assert_eq!(r.status, 201);
    }
    let r = send(&a, post("/register").header("content-type", "application/json"), body).await;
    assert_eq!(r.status, 429);
    assert!(matches!(r.header("retry-after").parse::<u64>(), Ok(1..=60)), "{}", r.header("retry-after"));
    // Signed-in or token-bearing routes are not counted.
    assert_eq!(send(&a, get("/.well-known/oauth-authorization-server"), Bytes::new()).await.status, 200);
    let scope = crate::tools::Scope::approval("revoked");
    a.tools.forget(&scope).await;
    let r = a.tools.call(&scope, "open_sandbox", json!({})).await;
    assert_eq!(
        (r.error, r.value["reason"].as_str(), r.value["message"].as_str()),
        (true, Some("permission"), Some("this connection was revoked; nothing ran"))
    );
}

#[tokio::test]
async fn the_endpoint_challenges_and_the_documents_agree() {
    let a = app(&scratch("docs"), false);
    let r = send(&a, mcp("").header("authorization", ""), initialize()).await;
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        "Bearer resource_metadata=\"https://localhost:8443/.well-known/oauth-protected-resource/mcp\", scope=\"mcp:tools\""
    );
    let r = send(&a, mcp("not-a-token"), initialize()).await;
    assert_eq!(r.status, 401);
    assert!(r.header("www-authenticate").starts_with("Bearer error=\"invalid_token\""));
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let r = send(&a, get(path), Bytes::new()).await;
        assert_eq!(r.json()["authorization_servers"], json!([PUBLIC]), "{path}");
    }
    let r = send(&a, get("/.well-known/oauth-authorization-server"), Bytes::new()).await;
    assert_eq!(r.json()["code_challenge_methods_supported"], json!(["S256"]));
}

#[tokio::test]
async fn bad_bodies_headers_and_sessions_are_refused_and_serving_goes_on() {
    let a = app(&scratch("mcp"), false);
    let (approval_a, token_a) = connect(&a, "client A").await;
    let (_, token_b) = connect(&a, "client B").await;

    let r = send(&a, mcp(&token_a), "{\"jsonrpc\":\"2.0\",").await;
    assert_eq!((r.status, r.json()["error"]["code"].as_i64()), (400, Some(-32700)));
    let r = send(&a, mcp(&token_a), "{\"jsonrpc\":\"2.0\",\"id\":1}").await;
    assert_eq!((r.status, r.json()["error"]["code"].as_i64()), (400, Some(-32600)));
    let big = vec![b' '; crate::gate::MAX_BODY + 1];
    let r = send(&a, mcp(&token_a), big).await;
    assert_eq!(r.status, 413);
    let r = send(&a, mcp(&token_a).header("content-length", "99999999"), Bytes::new()).await;
    assert_eq!(r.status, 413);
    for accept in [None, Some("application/json"), Some("text/event-stream")] {
        let mut req = post("/mcp")
            .header("authorization", format!("Bearer {token_a}"))
            .header("content-type", "application/json");
        if let Some(v) = accept {
            req = req.header("accept", v);
        }
        assert_eq!(send(&a, req, initialize()).await.status, 406, "{accept:?}");
    }
    let split = post("/mcp")
        .header("authorization", format!("Bearer {token_a}"))
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("accept", "text/event-stream");
    assert_eq!(send(&a, split, initialize()).await.status, 200, "Accept over two lines is one list");
    let r = send(&a, mcp(&token_a).header("origin", "https://evil.example"), initialize()).await;
    assert_eq!(r.status, 403);

    // A session opened by A is A's alone: B naming it is told it does not exist.
    let r = send(&a, mcp(&token_a), initialize()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let session = r.header("mcp-session-id");
    assert!(!session.is_empty());
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let theirs = send(&a, mcp(&token_b).header("mcp-session-id", session.clone()), list.clone()).await;
    let unknown = send(&a, mcp(&token_b).header("mcp-session-id", "no-such-session"), list.clone()).await;
    assert_eq!((theirs.status, theirs.text()), (404, unknown.text()));
    let delete = Request::builder()
        .method("DELETE")
        .uri("/mcp")
        .header("host", HOST)
        .header("authorization", format!("Bearer {token_b}"))
        .header("mcp-session-id", session.clone());
    assert_eq!(send(&a, delete, Bytes::new()).await.status, 404);
    assert_eq!(lock(&a.sessions).check(&session, &approval_a), Ok(()));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let r = send(
        &a,
        mcp(&token_a).header("mcp-session-id", session.clone()).header("mcp-protocol-version", "2025-11-25"),
        note,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.text());

    // A closes a session of its own: 204, and the session is gone for it too.
    let second = send(&a, mcp(&token_a), initialize()).await.header("mcp-session-id");
    let close = |token: &str, session: &str| {
        Request::builder()
            .method("DELETE")
            .uri("/mcp")
            .header("host", HOST)
            .header("authorization", format!("Bearer {token}"))
            .header("mcp-session-id", session.to_string())
    };
    assert_eq!(send(&a, close(&token_a, &second), Bytes::new()).await.status, 204);
    assert_eq!(send(&a, close(&token_a, &second), Bytes::new()).await.status, 404);

    // Revoked: the next call is refused at once, and its sessions are gone.
    assert!(lock(&a.auth).revoke(&approval_a));
    let r = send(&a, mcp(&token_a).header("mcp-session-id", session), list).await;
    assert_eq!(r.status, 401);
}

#[tokio::test]
async fn the_token_endpoint_refuses_a_wrong_verifier_and_authorize_an_unknown_redirect() {
    let a = app(&scratch("token"), false);
    let reg = send(
        &a,
        post("/register").header("content-type", "application/json"),
        json!({"client_name": "c", "redirect_uris": [CALLBACK]}).to_string(),
    )
    .await;
    let client = reg.json()["client_id"].as_str().expect("client").to_string();
    let enc = |s: &str| s.replace(':', "%3A").replace('/', "%2F");
    let q = format!(
        "/authorize?response_type=code&client_id={client}&redirect_uri={}&code_challenge={}&code_challenge_method=S256",
        enc("https://evil.example/cb"),
        s256(VERIFIER)
    );
    let r = send(&a, get(&q), Bytes::new()).await;
    assert_eq!((r.status, r.header("location")), (400, String::new()));
    assert!(r.text().contains("not one its client registered"), "{}", r.text());
    let q = q.replace(&enc("https://evil.example/cb"), &enc(CALLBACK));
    let r = send(&a, get(&q), Bytes::new()).await;
    let id = r.header("location").trim_start_matches("/approve/").to_string();
    let (to, _) = lock(&a.auth).decide(&id, true, Instant::now(), SystemTime::now()).expect("decided");
    let code = to.split(['?', '&']).find_map(|p| p.strip_prefix("code=")).expect("code").to_string();
    let wrong = "x".repeat(43);
    let form = format!(
        "grant_type=authorization_code&code={code}&client_id={client}&redirect_uri={}&code_verifier={wrong}",
        enc(CALLBACK)
    );
    let r = send(&a, post("/token").header("content-type", "application/x-www-form-urlencoded"), form).await;
    assert_eq!((r.status, r.json()["error"].as_str()), (400, Some("invalid_grant")));
    let r = send(&a, post("/token").header("content-type", "application/json"), "{}").await;
    assert_eq!((r.status, r.json()["error"].as_str()), (400, Some("invalid_request")));
}

#[tokio::test]
async fn the_owners_forms_need_the_origin_and_a_live_cookie() {
    let a = app(&scratch("forms"), false);
    let (approval, _) = connect(&a, "client A").await;
    let revoke = format!("/approvals/{approval}/revoke");
    let form = |origin: Option<&str>, cookie: &str| {
        let mut r = post(&revoke)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("cookie", cookie.to_string());
        if let Some(o) = origin {
            r = r.header("origin", o.to_string());
        }
        r
    };
    let cross = send(&a, form(Some("https://evil.example"), "__Host-plimsoll-session=x"), "csrf=x").await;
    assert_eq!(cross.status, 403);
    let none = send(&a, form(None, "__Host-plimsoll-session=x"), "csrf=x").await;
    assert_eq!(none.status, 403);
    let tampered = send(&a, form(Some(PUBLIC), "__Host-plimsoll-session=tampered"), "csrf=x").await;
    assert_eq!(tampered.status, 401);
    assert!(tampered.text().contains("id=\"signin\""), "{}", tampered.text());
    assert_eq!(lock(&a.auth).approvals().len(), 1, "nothing was revoked");
    let r = send(&a, post("/passkey/signin/start").header("origin", "https://evil.example"), "{}").await;
    assert_eq!(r.status, 403);
    // Another passkey is the signed-in owner's to add, never a stranger's.
    let r = send(
        &a,
        post("/passkey/add/start").header("origin", PUBLIC).header("cookie", "__Host-plimsoll-session=x"),
        "{}",
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.text());
    let r = send(&a, get("/approve/nope"), Bytes::new()).await;
    assert!(r.text().contains("id=\"signin\""), "not signed in: the sign-in page");
}

#[tokio::test]
async fn a_restart_keeps_the_connections_in_a_private_file() {
    let dir = scratch("restart");
    let (approval, token) = {
        let a = app(&dir, false);
        connect(&a, "client A").await
    };
    let file = dir.join(super::app::CONNECTIONS);
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).expect("kept").permissions());
    assert_eq!(mode & 0o777, 0o600);
    assert!(!std::fs::read_to_string(&file).expect("read").contains(&token), "the token is kept in the clear");
    let a = app(&dir, false);
    let r = send(&a, mcp(&token), initialize()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(lock(&a.auth).approvals()[0].id, approval);
    std::fs::write(&file, b"{").expect("corrupt");
    let config = Config::from(|k| (k == "PLIMSOLL_URL").then(|| "http://127.0.0.1:9".to_string())).expect("config");
    let e = App::new(PUBLIC, false, Tools::new(config).expect("tools"), &dir).expect_err("corrupt");
    assert!(e.to_string().ends_with("(move it away to start with no connections)"), "{e}");
}

#[tokio::test]
async fn a_strangers_wrong_setup_codes_limit_only_its_own_address() {
    let a = app(&scratch("setup-limit"), true);
    let code = lock(&a.owner).setup_code().expect("a setup code").to_string();
    let start = |from: &'static str| {
        post("/passkey/register/start")
            .header("origin", PUBLIC)
            .header("content-type", "application/json")
            // The proxy appends the address it saw last; what comes before is the client's word.
            .header("x-forwarded-for", format!("198.51.100.1, {from}"))
    };
    for _ in 0..crate::passkey::FAILED_TRIES {
        let r = send(&a, start("192.0.2.7"), json!({"code": "WRNG-CODE-2345"}).to_string()).await;
        assert_eq!(r.status, 403, "{}", r.text());
        assert_eq!(r.json()["error"], "wrong setup code; copy the code printed on the console where plimsoll started");
    }
    let r = send(&a, start("192.0.2.7"), json!({ "code": code }).to_string()).await;
    assert_eq!(r.status, 429, "even the right code, from that address: {}", r.text());
    assert!(matches!(r.header("retry-after").parse::<u64>(), Ok(1..=60)), "{}", r.header("retry-after"));
    // The code is not burned, and the owner's address registers with it.
    let r = send(&a, start("192.0.2.8"), json!({ "code": code }).to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["options"]["publicKey"]["challenge"].is_string(), "{}", r.text());
    assert_eq!(send(&a, get("/"), Bytes::new()).await.status, 200, "the setup page is still served");
}

/// A body whose chunks arrive when the test sends them.
struct Arriving(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for Arriving {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|chunk| chunk.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

#[tokio::test]
async fn a_connection_revoked_while_its_body_arrives_is_refused_as_a_revoked_token() {
    let a = app(&scratch("revoked-midway"), false);
    let (approval, token) = connect(&a, "client A").await;
    let body = initialize();
    let (half, rest) = body.split_at(body.len() / 2);
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let req = mcp(&token).body(Arriving(rx)).expect("request");
    let feed = async {
        tx.send(Bytes::copy_from_slice(half.as_bytes())).await.expect("first half");
        // The channel holds one chunk: this send waits until the router took
        // the first, so its bearer check is past.
        tx.send(Bytes::copy_from_slice(rest.as_bytes())).await.expect("second half");
        assert!(lock(&a.auth).revoke(&approval));
        drop(tx);
    };
    let (r, ()) = tokio::join!(a.handle(req, peer()), feed);
    assert_eq!(r.status(), 401);
    let challenge = r.headers().get("www-authenticate").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(challenge.starts_with("Bearer error=\"invalid_token\""), "{challenge}");
    let body = r.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    assert_eq!(body["error"], "the bearer token is unknown, expired or revoked");
    assert!(a.manager.sessions.read().await.is_empty(), "no session was opened");
}
