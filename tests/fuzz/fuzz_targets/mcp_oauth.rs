//! What the MCP server's HTTPS mode reads before anyone is signed in: a client
//! registration (the first line of the input), an authorization request's query
//! (the second), a token request's form (the third), an `Accept` value (the
//! fourth), and the whole input as a POST body to `/mcp` and as a saved
//! connections file. `CLIENT` in the query or the form stands for the client ID
//! the registration got, so the checks past the client lookup are reached.
//! Whatever the bytes, nothing panics; a connections file taken back saves to
//! one that is taken back again; a registration keeps only redirect URIs a
//! client may have; with no approval, no token request gets a token; once the
//! client is approved, an authorization request is held only for a redirect URI
//! a registered one admits, and a refusal redirects only there (never an open
//! redirect); and a body passes the gate only as one JSON-RPC 2.0 message.
#![no_main]

use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use plimsoll_mcp_auth::gate;
use plimsoll_mcp_auth::oauth::{self, AuthServer, AuthorizeRefusal, Urls};

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = gate::message(data) {
        assert_eq!(m.value["jsonrpc"], "2.0", "the gate passed a body that is not JSON-RPC 2.0");
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.splitn(4, '\n');
    let (registration, query, form, accept) =
        (lines.next().unwrap_or(""), lines.next().unwrap_or(""), lines.next().unwrap_or(""), lines.next());
    let _ = gate::media("POST", accept, Some("application/json"));
    let _ = gate::media("GET", accept, None);

    let now = Instant::now();
    let wall = std::time::SystemTime::now();
    let urls = Urls::new("https://localhost:8443").expect("urls");
    // A connections file, whatever its bytes, is taken back whole or refused.
    let mut restored = AuthServer::new(urls.clone());
    if restored.restore(data, now, wall).is_ok() {
        let mut again = AuthServer::new(urls.clone());
        assert!(again.restore(&restored.saved(now, wall), now, wall).is_ok(), "a restored file does not restore");
    }
    let mut server = AuthServer::new(urls);
    let mut registered: Vec<String> = Vec::new();
    let mut client_id = String::new();
    if let Ok(client) = server.register(registration.as_bytes(), now) {
        client_id = client["client_id"].as_str().expect("a client ID").to_string();
        for uri in client["redirect_uris"].as_array().into_iter().flatten() {
            let uri = uri.as_str().expect("a redirect URI is a string");
            assert!(oauth::redirect_host(uri).is_some(), "registered a redirect URI {uri:?} no client may have");
            registered.push(uri.to_string());
        }
    }
    let with_client =
        |text: &str| if client_id.is_empty() { text.to_string() } else { text.replace("CLIENT", &client_id) };
    if let Ok(f) = oauth::form(&with_client(form)) {
        assert!(server.token(&f, now).is_err(), "a token was minted with no approval");
        let bearer = f.get("access_token").map(|t| format!("Bearer {t}"));
        assert!(server.check(bearer.as_deref(), now, wall).is_err());
    }
    // The owner approves the client once, so its faulty requests are sent back
    // to it (an unapproved client's are shown on a page).
    if let Some(first) = registered.first() {
        let approve: std::collections::BTreeMap<String, String> = [
            ("response_type", "code"),
            ("client_id", client_id.as_str()),
            ("redirect_uri", first.as_str()),
            ("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"),
            ("code_challenge_method", "S256"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let held = server.authorize(&approve, now).expect("a well-formed request for a registered URI is held");
        server.decide(&held.id, true, now, wall).expect("approved");
    }
    if let Ok(q) = oauth::form(&with_client(query)) {
        let admitted = |asked: &str| registered.iter().any(|r| oauth::redirect_matches(r, asked));
        match server.authorize(&q, now) {
            Ok(held) => assert!(admitted(&held.redirect_uri), "held for an unregistered {held:?}"),
            Err(AuthorizeRefusal::Redirect(to)) => {
                let asked = q.get("redirect_uri").or(registered.first()).map(String::as_str).unwrap_or_default();
                assert!(
                    admitted(asked) && to.starts_with(asked),
                    "refused by redirecting to {to:?}, which no client registered"
                );
            }
            Err(AuthorizeRefusal::Page(_)) => {}
        }
    }
});
