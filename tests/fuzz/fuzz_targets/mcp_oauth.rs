//! What the MCP server's HTTPS mode reads before anyone is signed in: a client
//! registration (the first line of the input), an authorization request's query
//! (the second), a token request's form (the third), an `Accept` value (the
//! fourth), and the whole input as a POST body to `/mcp` and as a saved
//! connections file. Whatever the bytes, nothing panics; a connections file
//! taken back saves to one that is taken back again; a registration keeps only redirect URIs a client may have;
//! an authorization request is held only for a registered redirect URI, and a
//! refusal redirects only to one (never an open redirect); with no approval,
//! no token request gets a token; and a body passes the gate only as one
//! JSON-RPC 2.0 message.
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
    if let Ok(client) = server.register(registration.as_bytes(), now) {
        for uri in client["redirect_uris"].as_array().into_iter().flatten() {
            let uri = uri.as_str().expect("a redirect URI is a string");
            assert!(oauth::redirect_host(uri).is_some(), "registered a redirect URI {uri:?} no client may have");
            registered.push(uri.to_string());
        }
    }
    if let Ok(q) = oauth::form(query) {
        match server.authorize(&q, now) {
            Ok(held) => assert!(registered.contains(&held.redirect_uri), "held for an unregistered {held:?}"),
            Err(AuthorizeRefusal::Redirect(to)) => assert!(
                registered.iter().any(|r| to.starts_with(r.as_str())),
                "refused by redirecting to {to:?}, which no client registered"
            ),
            Err(AuthorizeRefusal::Page(_)) => {}
        }
    }
    if let Ok(f) = oauth::form(form) {
        assert!(server.token(&f, now).is_err(), "a token was minted with no approval");
        let bearer = f.get("access_token").map(|t| format!("Bearer {t}"));
        assert!(server.check(bearer.as_deref(), now, std::time::SystemTime::now()).is_err());
    }
});
