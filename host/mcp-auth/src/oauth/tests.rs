use super::*;

const PUBLIC: &str = "https://localhost:8443";
const CALLBACK: &str = "http://127.0.0.1:33418/callback";
/// RFC 7636 Appendix B.
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

fn server() -> AuthServer {
    AuthServer::new(Urls::new(PUBLIC).expect("urls"))
}

fn register(s: &mut AuthServer, now: Instant) -> String {
    let body = json!({"client_name": "Claude Code", "redirect_uris": [CALLBACK]}).to_string();
    let v = s.register(body.as_bytes(), now).expect("registered");
    v["client_id"].as_str().expect("client_id").to_string()
}

fn query(client: &str) -> BTreeMap<String, String> {
    [
        ("response_type", "code"),
        ("client_id", client),
        ("redirect_uri", CALLBACK),
        ("state", "s t&ate"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("resource", "https://localhost:8443/mcp"),
        ("scope", SCOPE),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into()
}

fn param(url: &str, name: &str) -> Option<String> {
    let q = url.split_once('?')?.1;
    form(q).expect("query").remove(name)
}

/// Registers, authorizes, approves: the approval and the code.
fn approved(s: &mut AuthServer, now: Instant) -> (String, String, String) {
    let client = register(s, now);
    let held = s.authorize(&query(&client), now).expect("held");
    let (back, approval) = s.decide(&held.id, true, now, SystemTime::now()).expect("decided");
    assert!(back.starts_with(&format!("{CALLBACK}?code=")), "{back}");
    (client, approval.expect("approval").id, param(&back, "code").expect("code"))
}

fn exchange(client: &str, code: &str, verifier: &str) -> BTreeMap<String, String> {
    [
        ("grant_type", "authorization_code"),
        ("client_id", client),
        ("code", code),
        ("redirect_uri", CALLBACK),
        ("code_verifier", verifier),
        ("resource", "https://localhost:8443/mcp"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into()
}

#[test]
fn s256_is_rfc_7636s() {
    assert_eq!(s256(VERIFIER), CHALLENGE);
    assert!(verifier_shape(VERIFIER));
    assert!(!verifier_shape("short") && !verifier_shape(&"a".repeat(129)) && !verifier_shape(&"a b".repeat(20)));
}

#[test]
fn the_documents_and_the_challenge_name_one_issuer_and_resource() {
    let u = Urls::new("https://localhost:8443/").expect("urls");
    assert_eq!(u.resource(), "https://localhost:8443/mcp");
    assert_eq!(u.resource_document()["authorization_servers"], json!(["https://localhost:8443"]));
    assert_eq!(u.resource_document()["resource"], json!("https://localhost:8443/mcp"));
    let d = u.server_document();
    assert_eq!(d["issuer"], json!("https://localhost:8443"));
    assert_eq!(d["code_challenge_methods_supported"], json!(["S256"]));
    assert_eq!(d["token_endpoint"], json!("https://localhost:8443/token"));
    assert_eq!(
        u.challenge(false),
        "Bearer resource_metadata=\"https://localhost:8443/.well-known/oauth-protected-resource/mcp\", scope=\"mcp:tools\""
    );
    assert!(u.challenge(true).starts_with("Bearer error=\"invalid_token\", resource_metadata="));
    for bad in ["http://localhost:8443", "https://localhost:8443/mcp", "https://", "https://a@b"] {
        assert!(Urls::new(bad).is_err(), "{bad}");
    }
}

#[test]
fn redirect_uris_are_https_or_loopback_http_with_no_fragment() {
    assert_eq!(redirect_host("https://app.example/cb").as_deref(), Some("app.example"));
    assert_eq!(redirect_host("http://127.0.0.1:9/cb").as_deref(), Some("127.0.0.1"));
    assert_eq!(redirect_host("http://[::1]:9/cb").as_deref(), Some("[::1]"));
    assert_eq!(redirect_origin("http://127.0.0.1:9/callback/x?a=1").as_deref(), Some("http://127.0.0.1:9"));
    assert_eq!(redirect_origin("https://claude.ai/api/mcp/auth_callback").as_deref(), Some("https://claude.ai"));
    assert_eq!(redirect_origin("http://evil.example/cb"), None);
    assert_eq!(redirect_host("http://localhost/cb").as_deref(), Some("localhost"));
    for bad in [
        "http://evil.example/cb",
        "https://a.example/cb#x",
        "https://u@a.example/",
        "javascript:alert(1)",
        "https:///x",
    ] {
        assert_eq!(redirect_host(bad), None, "{bad}");
    }
}

#[test]
fn registration_takes_public_clients_and_refuses_the_rest_by_name() {
    let mut s = server();
    let now = Instant::now();
    let v = s.register(json!({"redirect_uris": [CALLBACK]}).to_string().as_bytes(), now).expect("minimal");
    assert_eq!(
        (v["token_endpoint_auth_method"].as_str(), v["client_name"].as_str()),
        (Some("none"), Some("an unnamed client"))
    );
    assert!(v.get("client_secret").is_none());
    let refused = |s: &mut AuthServer, body: Value| s.register(body.to_string().as_bytes(), now).expect_err("refused");
    let e = refused(&mut s, json!({"redirect_uris": ["http://evil.example/cb"]}));
    assert_eq!(e.error, "invalid_redirect_uri");
    assert!(e.description.starts_with("\"http://evil.example/cb\" is not a redirect URI this server takes"), "{e:?}");
    assert_eq!(refused(&mut s, json!({})).error, "invalid_redirect_uri");
    let e = refused(&mut s, json!({"redirect_uris": [CALLBACK], "token_endpoint_auth_method": "client_secret_basic"}));
    assert_eq!(e.error, "invalid_client_metadata");
    let e = refused(&mut s, json!({"redirect_uris": [CALLBACK], "grant_types": ["implicit"]}));
    assert_eq!(e.description, "grant type \"implicit\" is not offered: authorization_code and refresh_token are");
    assert_eq!(s.register(b"[1,2", now).expect_err("not json").error, "invalid_client_metadata");
}

#[test]
fn unapproved_registrations_are_capped_oldest_first_and_expire() {
    let mut s = server();
    let start = Instant::now();
    let first = register(&mut s, start);
    for i in 1..=MAX_UNAPPROVED_CLIENTS {
        register(&mut s, start + Duration::from_millis(i as u64));
    }
    assert_eq!(s.clients.len(), MAX_UNAPPROVED_CLIENTS);
    assert!(!s.clients.contains_key(&first), "the oldest went first");
    let later = start + CLIENT_LIFE + Duration::from_secs(1);
    register(&mut s, later);
    assert_eq!(s.clients.len(), 1);
}

#[test]
fn an_unknown_client_or_redirect_uri_gets_a_page_never_a_redirect() {
    let mut s = server();
    let now = Instant::now();
    let client = register(&mut s, now);
    let mut q = query("nobody");
    assert!(
        matches!(s.authorize(&q, now), Err(AuthorizeRefusal::Page(p)) if p.contains("a client this server does not know"))
    );
    q = query(&client);
    q.insert("redirect_uri".into(), "https://evil.example/cb".into());
    assert!(
        matches!(s.authorize(&q, now), Err(AuthorizeRefusal::Page(p)) if p.contains("not one its client registered"))
    );
}

#[test]
fn other_faults_go_back_to_the_client_with_state_and_issuer() {
    let mut s = server();
    let now = Instant::now();
    // A client nobody approved yet may be anyone's: its faults are shown, not
    // sent on, so a registration cannot make this server an open redirector.
    let stranger = register(&mut s, now);
    let mut q = query(&stranger);
    q.insert("response_type".into(), "token".into());
    assert!(matches!(
        s.authorize(&q, now),
        Err(AuthorizeRefusal::Page(p)) if p.contains("unsupported_response_type") && p.contains("Nothing was sent back")
    ));
    let (client, _, _) = approved(&mut s, now);
    let cases = [
        ("code_challenge_method", Some("plain"), "invalid_request"),
        ("code_challenge", None, "invalid_request"),
        ("response_type", Some("token"), "unsupported_response_type"),
        ("resource", Some("https://elsewhere.example/mcp"), "invalid_target"),
        ("scope", Some("mcp:tools admin"), "invalid_scope"),
    ];
    for (key, value, error) in cases {
        let mut q = query(&client);
        match value {
            Some(v) => q.insert(key.into(), v.into()),
            None => q.remove(key),
        };
        let Err(AuthorizeRefusal::Redirect(url)) = s.authorize(&q, now) else { panic!("{key}: not redirected") };
        assert!(url.starts_with(CALLBACK), "{url}");
        assert_eq!(param(&url, "error").as_deref(), Some(error), "{key}");
        assert_eq!(param(&url, "state").as_deref(), Some("s t&ate"));
        assert_eq!(param(&url, "iss").as_deref(), Some(PUBLIC));
    }
    assert!(s.pending.is_empty(), "nothing was held for a refused request");
    // No resource named: this server's own is meant (RFC 8707 leaves it optional).
    let mut q = query(&client);
    q.remove("resource");
    assert!(s.authorize(&q, now).is_ok());
}

#[test]
fn a_denied_request_goes_back_access_denied_and_holds_nothing() {
    let mut s = server();
    let now = Instant::now();
    let client = register(&mut s, now);
    let held = s.authorize(&query(&client), now).expect("held");
    assert_eq!((held.client_name.as_str(), held.redirect_host.as_str()), ("Claude Code", "127.0.0.1"));
    assert_eq!(s.held(&held.id, now), Some(held.clone()));
    let (back, approval) = s.decide(&held.id, false, now, SystemTime::now()).expect("decided");
    assert_eq!((param(&back, "error").as_deref(), approval), (Some("access_denied"), None));
    assert!(s.approvals().is_empty());
    assert!(matches!(s.decide(&held.id, true, now, SystemTime::now()), Err(AuthorizeRefusal::Page(_))));
    // A request the owner never decides expires.
    let held = s.authorize(&query(&client), now).expect("held");
    assert_eq!(s.held(&held.id, now + PENDING_LIFE), None);
}

#[test]
fn a_code_is_exchanged_once_with_its_verifier_for_tokens_that_open_the_endpoint() {
    let mut s = server();
    let now = Instant::now();
    let wall = SystemTime::now();
    let (client, approval, code) = approved(&mut s, now);
    // A wrong verifier is refused, and the code is then dead.
    let wrong = "x".repeat(43);
    let e = s.token(&exchange(&client, &code, &wrong), now).expect_err("mismatch");
    assert_eq!(
        (e.error, e.description.as_str()),
        ("invalid_grant", "the code_verifier does not match the code_challenge")
    );
    let e = s.token(&exchange(&client, &code, VERIFIER), now).expect_err("spent");
    assert_eq!(e.error, "invalid_grant");
    // A fresh code, the right verifier.
    let (client, approval2, code) = approved(&mut s, now);
    assert_ne!(approval, approval2);
    let mut other_redirect = exchange(&client, &code, VERIFIER);
    other_redirect.insert("redirect_uri".into(), "http://127.0.0.1:1/other".into());
    assert_eq!(s.token(&other_redirect, now).expect_err("redirect").error, "invalid_grant");
    let (client, approval, code) = approved(&mut s, now);
    let mut wrong_target = exchange(&client, &code, VERIFIER);
    wrong_target.insert("resource".into(), "https://elsewhere.example/mcp".into());
    assert_eq!(s.token(&wrong_target, now).expect_err("target").error, "invalid_target");
    let (client, approval3, code) = approved(&mut s, now);
    let t = s.token(&exchange(&client, &code, VERIFIER), now).expect("tokens");
    let access = t["access_token"].as_str().expect("access").to_string();
    assert_eq!(s.check(Some(&format!("Bearer {access}")), now, wall), Ok(approval3.clone()));
    assert_eq!(s.check(None, now, wall), Err(Bearer::Missing));
    assert_eq!(s.check(Some("Bearer forged"), now, wall), Err(Bearer::Invalid));
    let refresh = t["refresh_token"].as_str().expect("refresh").to_string();
    assert_eq!(
        s.check(Some(&format!("Bearer {refresh}")), now, wall),
        Err(Bearer::Invalid),
        "a refresh token opens nothing"
    );
    assert_eq!(s.check(Some(&format!("Bearer {access}")), now + ACCESS_LIFE, wall), Err(Bearer::Invalid));
    // The code presented again withdraws the tokens it got.
    let e = s.token(&exchange(&client, &code, VERIFIER), now).expect_err("replayed");
    assert_eq!(e.description, "the code was used already; the tokens it got are revoked");
    assert_eq!(s.check(Some(&format!("Bearer {access}")), now, wall), Err(Bearer::Invalid));
    let _ = approval;
}

#[test]
fn refresh_tokens_rotate_and_revocation_ends_everything_at_once() {
    let mut s = server();
    let now = Instant::now();
    let wall = SystemTime::now();
    let (client, approval, code) = approved(&mut s, now);
    let t = s.token(&exchange(&client, &code, VERIFIER), now).expect("tokens");
    let refresh = t["refresh_token"].as_str().expect("refresh").to_string();
    let later = now + ACCESS_LIFE + Duration::from_secs(1);
    let t2 = s.token(&refreshing(&client, &refresh), later).expect("refreshed");
    let access = t2["access_token"].as_str().expect("access").to_string();
    assert_eq!(s.check(Some(&format!("Bearer {access}")), later, wall), Ok(approval.clone()));
    assert!(s.approvals()[0].last_used.is_some());
    assert!(s.revoke(&approval));
    assert!(!s.revoke(&approval));
    assert_eq!(s.check(Some(&format!("Bearer {access}")), later, wall), Err(Bearer::Invalid));
    let refresh2 = t2["refresh_token"].as_str().expect("refresh").to_string();
    assert_eq!(s.token(&refreshing(&client, &refresh2), later).expect_err("revoked").error, "invalid_grant");
    assert!(s.approvals().is_empty());
}

fn refreshing(client: &str, token: &str) -> BTreeMap<String, String> {
    [("grant_type", "refresh_token"), ("client_id", client), ("refresh_token", token)]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into()
}

#[test]
fn a_rotated_refresh_token_presented_again_revokes_the_connections_tokens() {
    let mut s = server();
    let now = Instant::now();
    let wall = SystemTime::now();
    let (client, approval, code) = approved(&mut s, now);
    let t = s.token(&exchange(&client, &code, VERIFIER), now).expect("tokens");
    let spent = t["refresh_token"].as_str().expect("refresh").to_string();
    let t2 = s.token(&refreshing(&client, &spent), now).expect("refreshed");
    let access = t2["access_token"].as_str().expect("access").to_string();
    let e = s.token(&refreshing(&client, &spent), now).expect_err("reused");
    assert_eq!(
        (e.error, e.description.as_str()),
        ("invalid_grant", "the refresh token was used already; the connection's tokens are revoked")
    );
    assert_eq!(s.check(Some(&format!("Bearer {access}")), now, wall), Err(Bearer::Invalid));
    let current = t2["refresh_token"].as_str().expect("refresh").to_string();
    assert_eq!(s.token(&refreshing(&client, &current), now).expect_err("revoked").error, "invalid_grant");
    // The approval stands: the client authorizes again, and the owner decides again.
    assert_eq!(s.approvals().len(), 1);
    assert!(s.revoke(&approval));
}

#[test]
fn connections_survive_a_restart_as_digests_and_expired_ones_do_not() {
    let mut s = server();
    let now = Instant::now();
    let wall = SystemTime::now();
    let (client, approval, code) = approved(&mut s, now);
    let t = s.token(&exchange(&client, &code, VERIFIER), now).expect("tokens");
    assert!(s.take_changed() && !s.take_changed());
    let bytes = s.saved(now, wall);
    let text = String::from_utf8(bytes.clone()).expect("utf8");
    for secret in [&t["access_token"], &t["refresh_token"]] {
        assert!(!text.contains(secret.as_str().expect("token")), "a token is kept in the clear");
    }
    let mut back = server();
    back.restore(&bytes, now, wall).expect("restored");
    let access = t["access_token"].as_str().expect("access");
    assert_eq!(back.check(Some(&format!("Bearer {access}")), now, wall), Ok(approval.clone()));
    assert_eq!(back.approvals()[0].client_id, client);
    let refresh = t["refresh_token"].as_str().expect("refresh");
    back.token(&refreshing(&client, refresh), now).expect("the refresh token still works");
    // An hour and more later, the access token is gone and the refresh token stands.
    let mut later = server();
    let (later_now, later_wall) = (now + ACCESS_LIFE, wall + ACCESS_LIFE);
    later.restore(&bytes, later_now, later_wall).expect("restored");
    assert_eq!(later.check(Some(&format!("Bearer {access}")), later_now, later_wall), Err(Bearer::Invalid));
    later.token(&refreshing(&client, refresh), later_now).expect("refresh after the access token ended");
    let mut bad = server();
    assert!(bad.restore(b"{}", now, wall).expect_err("not one").starts_with("not a connections file"));
    let old = text.replace("\"version\": 1", "\"version\": 0");
    assert_eq!(bad.restore(old.as_bytes(), now, wall).expect_err("version"), "layout version 0 is not 1");
}

#[test]
fn a_rotated_refresh_token_presented_after_a_restart_still_revokes() {
    let mut s = server();
    let now = Instant::now();
    let wall = SystemTime::now();
    let (client, _, code) = approved(&mut s, now);
    let t = s.token(&exchange(&client, &code, VERIFIER), now).expect("tokens");
    let spent = t["refresh_token"].as_str().expect("refresh").to_string();
    let t2 = s.token(&refreshing(&client, &spent), now).expect("refreshed");
    let bytes = s.saved(now, wall);
    assert!(!String::from_utf8_lossy(&bytes).contains(&spent), "a spent token is kept in the clear");
    let mut back = server();
    back.restore(&bytes, now, wall).expect("restored");
    let e = back.token(&refreshing(&client, &spent), now).expect_err("reused after the restart");
    assert_eq!(e.description, "the refresh token was used already; the connection's tokens are revoked");
    let current = t2["refresh_token"].as_str().expect("refresh");
    assert_eq!(back.token(&refreshing(&client, current), now).expect_err("revoked").error, "invalid_grant");
    // A file written before spent tokens were kept still loads.
    let mut old: Value = serde_json::from_slice(&bytes).expect("json");
    old.as_object_mut().expect("object").remove("spent_refresh");
    server().restore(&serde_json::to_vec(&old).expect("bytes"), now, wall).expect("an older file");
    // A digest that is not one is named.
    old["spent_refresh"] = json!([{"sha256": "zz", "approval": "a"}]);
    let e = server().restore(&serde_json::to_vec(&old).expect("bytes"), now, wall).expect_err("bad digest");
    assert_eq!(e, "token digest \"zz\" is not 64 hex digits");
}

#[test]
fn the_token_endpoint_names_a_missing_or_unknown_grant() {
    let mut s = server();
    let now = Instant::now();
    assert_eq!(s.token(&BTreeMap::new(), now).expect_err("none").error, "invalid_request");
    let f: BTreeMap<String, String> = [("grant_type".to_string(), "password".to_string())].into();
    assert_eq!(s.token(&f, now).expect_err("password").error, "unsupported_grant_type");
}

#[test]
fn forms_decode_and_refuse_a_repeated_parameter() {
    let f = form("a=1&b=x+y%21&c=").expect("form");
    assert_eq!((f["a"].as_str(), f["b"].as_str(), f["c"].as_str()), ("1", "x y!", ""));
    assert_eq!(form("a=1&a=2").expect_err("repeated"), "the parameter \"a\" is given more than once");
    assert_eq!(form("a=%zz").expect_err("%zz"), "\"%zz\" has a malformed percent escape");
    assert_eq!(form("a=%ff").expect_err("%ff"), "\"%ff\" does not decode to UTF-8");
    assert_eq!(form("a=%+1").expect_err("%+1"), "\"%+1\" has a malformed percent escape");
    assert_eq!(with_query("https://a/cb?x=1", &[("s", "a b&c")]), "https://a/cb?x=1&s=a%20b%26c");
}

#[test]
fn a_loopback_redirect_may_change_port_and_nothing_else() {
    let mut s = server();
    let now = Instant::now();
    let client = register(&mut s, now);
    let mut q = query(&client);
    q.insert("redirect_uri".into(), "http://127.0.0.1:5000/callback".into());
    assert_eq!(s.authorize(&q, now).expect("another port").redirect_uri, "http://127.0.0.1:5000/callback");
    for other in ["http://127.0.0.1:5000/other", "http://localhost:5000/callback", "https://127.0.0.1:33418/callback"] {
        q.insert("redirect_uri".into(), other.into());
        assert!(matches!(s.authorize(&q, now), Err(AuthorizeRefusal::Page(_))), "{other}");
    }
    assert!(redirect_matches("http://[::1]:1/cb", "http://[::1]:2/cb"));
    assert!(!redirect_matches("https://a.example:1/cb", "https://a.example:2/cb"));
    for bad in [
        "https://a.example/c\\b",
        "https://a.example/é",
        "https://a;b.example/",
        "https://a.example/\"x",
        "https://a,b/",
    ] {
        assert_eq!(redirect_host(bad), None, "{bad}");
    }
}

#[test]
fn the_token_endpoint_tells_a_forgotten_client_to_register_again() {
    let mut s = server();
    let now = Instant::now();
    let (client, _, code) = approved(&mut s, now);
    let mut f = exchange("no-such-client", &code, VERIFIER);
    let e = s.token(&f, now).expect_err("unknown client");
    assert_eq!((e.status, e.error), (401, "invalid_client"));
    // A redirect URI the authorization request left out may be left out here too.
    let mut q = query(&client);
    q.remove("redirect_uri");
    let held = s.authorize(&q, now).expect("held");
    let (back, _) = s.decide(&held.id, true, now, SystemTime::now()).expect("decided");
    f = exchange(&client, &param(&back, "code").expect("code"), VERIFIER);
    f.remove("redirect_uri");
    s.token(&f, now).expect("no redirect_uri on either side");
    assert_eq!(
        s.check(Some(&format!("bearer {}", "x")), now, SystemTime::now()),
        Err(Bearer::Invalid),
        "the scheme is case-insensitive"
    );
}

#[test]
fn no_client_can_fill_the_queue_of_held_requests() {
    let mut s = server();
    let now = Instant::now();
    let noisy = register(&mut s, now);
    let first = s.authorize(&query(&noisy), now).expect("held").id;
    for _ in 0..MAX_PENDING {
        s.authorize(&query(&noisy), now).expect("held");
    }
    assert_eq!(s.pending.len(), MAX_PENDING_PER_CLIENT, "one client keeps its newest requests only");
    assert!(s.held(&first, now).is_none(), "its oldest went first");
    let quiet = register(&mut s, now);
    s.authorize(&query(&quiet), now).expect("another client is still held");
    assert_eq!(Urls::new("https://LocalHost:443/").expect("url").issuer(), "https://localhost");
    assert_eq!(
        Urls::new("https://a.example:8443;x").map(|_| ()),
        Err("the public URL \"https://a.example:8443;x\" must be https://HOST[:PORT], with no path".into())
    );
}
