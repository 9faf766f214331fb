use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;

use super::*;
use crate::profile::{LoadContext, Profiles};
use crate::token::{Credential, MintScope, Minter, PluginBroker};

/// What the fake API saw: method, path, and the Authorization header.
type Seen = Arc<Mutex<Vec<(String, String, Option<String>)>>>;

/// A fake API on loopback. Paths: `/items/N` (JSON), `/items` (POST echo size),
/// `/slow`, `/redirect`, `/big` (4 MiB + 1), `/busy` (503, Retry-After 10),
/// `/quota` (429), `/health` (200 once `healthy` is set).
fn api(healthy: Arc<AtomicBool>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen: Seen = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let log = log.clone();
            let healthy = healthy.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(conn);
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    return;
                }
                let mut parts = line.split_whitespace();
                let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
                let (mut auth, mut len) = (None, 0usize);
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                        break;
                    }
                    let (k, v) = h.split_once(':').unwrap_or(("", ""));
                    match k.to_ascii_lowercase().as_str() {
                        "authorization" => auth = Some(v.trim().to_string()),
                        "content-length" => len = v.trim().parse().unwrap_or(0),
                        _ => {}
                    }
                }
                let mut body = vec![0u8; len];
                let _ = r.read_exact(&mut body);
                log.lock().expect("log").push((method.clone(), path.clone(), auth));
                let (status, extra, payload): (&str, &str, Vec<u8>) = match path.as_str() {
                    "/slow" => {
                        std::thread::sleep(Duration::from_secs(3));
                        ("200 OK", "", b"{}".to_vec())
                    }
                    "/redirect" => ("302 Found", "Location: http://127.0.0.1:9/\r\n", Vec::new()),
                    "/big" => ("200 OK", "", vec![b'x'; (4 << 20) + 1]),
                    "/busy" => ("503 Service Unavailable", "Retry-After: 10\r\n", b"{}".to_vec()),
                    "/quota" => ("429 Too Many Requests", "Retry-After: 1\r\n", b"{}".to_vec()),
                    "/health" if healthy.load(Ordering::SeqCst) => ("200 OK", "", b"{}".to_vec()),
                    "/health" => ("503 Service Unavailable", "", b"{}".to_vec()),
                    "/items" => ("201 Created", "", format!("{{\"received\":{len}}}").into_bytes()),
                    p if p.starts_with("/items/") => ("200 OK", "", format!("{{\"id\":\"{}\"}}", &p[7..]).into_bytes()),
                    _ => ("404 Not Found", "", b"{\"error\":\"no such route\"}".to_vec()),
                };
                let mut out = r.into_inner();
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
                    payload.len()
                );
                let _ = out.write_all(head.as_bytes());
                let _ = out.write_all(&payload);
            });
        }
    });
    (url, seen)
}

fn env(var: &str) -> Option<String> {
    (var == "API_TOKEN").then(|| "s3cret-operator-token".into())
}

fn no_plugins(_: &str) -> Option<PluginBroker> {
    None
}

fn profile(url: &str, extra: &str) -> Arc<Profile> {
    let text = format!(
        r#"{{"profiles": {{"demo": {{"base_url": "{url}", "allowed_callers": ["alice"],
            "allow": ["GET /items/*", "POST /items", "GET /slow", "GET /redirect", "GET /big", "GET /busy", "GET /quota"],
            "token": {{"type": "static", "env": "API_TOKEN"}} {extra}}}}}}}"#
    );
    let p = Profiles::parse(&text, &LoadContext { env: &env, dir: None, plugins: &no_plugins }).expect("profiles");
    p.select("demo", "alice").expect("selected")
}

fn grant(url: &str, extra: &str, budget: Duration) -> Arc<RunGrant> {
    let broker = Broker::new().expect("broker");
    broker.open(profile(url, extra), "alice", budget).expect("opened")
}

fn error_of(a: &HostAnswer) -> String {
    let v: serde_json::Value = serde_json::from_slice(&a.body).expect("json");
    v["error"].as_str().expect("error").to_string()
}

#[test]
fn a_granted_call_carries_the_credential_and_returns_only_status_type_and_body() {
    let (url, seen) = api(Arc::default());
    let g = grant(&url, "", Duration::from_secs(10));
    let a = g.call_blocking("GET", "/items/42", None);
    assert_eq!(
        (a.status, a.content_type.as_str(), a.body.as_slice()),
        (200, "application/json", &b"{\"id\":\"42\"}"[..])
    );
    let posted = g.call_blocking("POST", "/items", Some(b"{\"name\":\"x\"}"));
    assert_eq!((posted.status, posted.body.as_slice()), (201, &b"{\"received\":12}"[..]));
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen[0], ("GET".into(), "/items/42".into(), Some("Bearer s3cret-operator-token".into())));
    let trace = g.close();
    assert_eq!(trace.calls.len(), 2);
    assert_eq!(
        (trace.calls[0].route.as_str(), trace.calls[0].status, trace.calls[0].delivered),
        ("/items/*", 200, true)
    );
    assert_eq!((trace.calls[1].req_bytes, trace.calls[1].resp_bytes), (12, 15));
    let text = serde_json::to_string(&trace).expect("json");
    assert!(!text.contains("42") || !text.contains("/items/42"), "the trace holds templates, never paths: {text}");
    assert!(!text.contains("s3cret"), "never the credential");
}

#[test]
fn unlisted_routes_and_tricky_encodings_are_refused_counted_and_never_sent() {
    let (url, seen) = api(Arc::default());
    let g = grant(&url, "", Duration::from_secs(10));
    for (m, p, why) in [
        ("GET", "/admin", "GET /admin: it is not a granted route"),
        ("DELETE", "/items/1", "DELETE /items/1: it is not a granted route"),
        ("GET", "/items/1/../../admin", "GET /items/1/../../admin: a dot segment (. or ..) is not allowed"),
        ("GET", "/items/%2e%2e", "GET /items/%2e%2e: percent-encoding (%) is not allowed; send the path decoded"),
        ("GET", "/items/1;x=y", "GET /items/1;x=y: a ; in a segment is not allowed"),
        ("GET", "/items/1?all=1", "GET /items/1?all=1: a query (?) is not allowed"),
        ("TRACE", "/items/1", "TRACE /items/1: \"TRACE\" is not a method a grant can open"),
    ] {
        let a = g.call_blocking(m, p, None);
        assert_eq!(a.status, 403, "{m} {p}");
        assert_eq!(error_of(&a), format!("forbidden by sandbox capability allowlist: {why}"));
    }
    assert!(seen.lock().expect("seen").is_empty(), "nothing reached the API");
    let trace = g.close();
    assert_eq!((trace.calls.len(), trace.denied), (0, 7));
}

#[test]
fn the_call_budget_counts_refused_calls_too_and_then_refuses_everything() {
    let (url, seen) = api(Arc::default());
    let g = grant(&url, r#", "max_calls": 3"#, Duration::from_secs(10));
    assert_eq!(g.call_blocking("GET", "/nope", None).status, 403);
    assert_eq!(g.call_blocking("GET", "/items/1", None).status, 200);
    assert_eq!(g.call_blocking("GET", "/items/2", None).status, 200);
    let spent = g.call_blocking("GET", "/items/3", None);
    assert_eq!(
        (spent.status, error_of(&spent).as_str()),
        (429, "host api call budget for this run is exhausted (3 calls)")
    );
    assert_eq!(seen.lock().expect("seen").len(), 2);
    let trace = g.close();
    assert_eq!((trace.calls.len(), trace.denied), (2, 2));
}

#[test]
fn calls_of_one_session_share_its_budget_across_their_grants() {
    let (url, seen) = api(Arc::default());
    let broker = Broker::new().expect("broker");
    let spent = Spent::fresh("session");
    let p = profile(&url, r#", "max_calls": 3"#);
    let first = broker.open_counting(p.clone(), "alice", Duration::from_secs(10), spent.clone(), None).expect("first");
    assert_eq!(first.call_blocking("GET", "/items/1", None).status, 200);
    assert_eq!(first.call_blocking("GET", "/nope", None).status, 403);
    first.close();
    let second = broker.open_counting(p, "alice", Duration::from_secs(10), spent.clone(), None).expect("second");
    assert_eq!(second.call_blocking("GET", "/items/2", None).status, 200);
    let over = second.call_blocking("GET", "/items/3", None);
    assert_eq!(
        (over.status, error_of(&over).as_str()),
        (429, "host api call budget for this session is exhausted (3 calls)")
    );
    assert_eq!((spent.attempts(), seen.lock().expect("seen").len()), (4, 2));
    assert_eq!(second.close().denied, 1, "each call's trace has its own refusals");
}

/// Mints `Bearer n-K` for the K-th call, valid for the asked budget capped at `ttl`.
fn numbered(count: &AtomicU32, ttl: Duration, asked: &Mutex<Vec<Duration>>, budget: Duration) -> Credential {
    let k = count.fetch_add(1, Ordering::SeqCst) + 1;
    asked.lock().expect("asked").push(budget);
    Credential {
        authorization: crate::token::Secret::new(format!("Bearer n-{k}")),
        expires: Some(SystemTime::now() + budget.min(ttl)),
    }
}

#[test]
fn a_session_credential_is_minted_once_for_the_lifetime_and_again_only_when_a_call_would_outlast_it() {
    let (count, asked) = (AtomicU32::new(0), Mutex::new(Vec::new()));
    let call = Duration::from_secs(30);
    let long = HeldCredential::new(Duration::from_secs(3600));
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let c = long.for_call(call, |b| Ok(numbered(&count, Duration::from_secs(7200), &asked, b))).expect("minted");
        tokens.push(c.authorization.expose().to_string());
    }
    assert_eq!(tokens, ["Bearer n-1"; 3], "one credential serves every call");
    assert_eq!(*asked.lock().expect("asked"), [Duration::from_secs(3600)], "minted for the session's lifetime");

    // A minter whose TTL (10 s) is shorter than a call's budget: each call needs its own.
    let short = HeldCredential::new(Duration::from_secs(3600));
    let a = short.for_call(call, |b| Ok(numbered(&count, Duration::from_secs(10), &asked, b))).expect("a");
    let b = short.for_call(call, |b| Ok(numbered(&count, Duration::from_secs(10), &asked, b))).expect("b");
    assert_ne!(a.authorization.expose(), b.authorization.expose());

    let failing = HeldCredential::new(Duration::from_secs(60));
    let e = failing.for_call(call, |_| Err(crate::token::MintError::Expired)).expect_err("refused");
    assert_eq!(e, crate::token::MintError::Expired);
}

#[test]
fn a_body_over_the_profile_cap_is_refused_413_and_not_sent() {
    let (url, seen) = api(Arc::default());
    let g = grant(&url, r#", "max_request_bytes": 8"#, Duration::from_secs(10));
    let a = g.call_blocking("POST", "/items", Some(b"{\"x\":12345}"));
    assert_eq!((a.status, error_of(&a).as_str()), (413, "host api request body too large: 11 bytes is over 8"));
    assert!(seen.lock().expect("seen").is_empty());
}

#[test]
fn redirects_oversize_answers_and_slow_upstreams_are_502_and_traced_undelivered() {
    let (url, _) = api(Arc::default());
    let g = grant(&url, "", Duration::from_millis(1500));
    let r = g.call_blocking("GET", "/redirect", None);
    assert_eq!(
        (r.status, error_of(&r).as_str()),
        (502, "host api unavailable: the upstream answered with a redirect (302), which is not followed")
    );
    let big = g.call_blocking("GET", "/big", None);
    assert_eq!(
        (big.status, error_of(&big).as_str()),
        (502, "host api unavailable: the upstream's answer is over 4194304 bytes")
    );
    let slow = g.call_blocking("GET", "/slow", None);
    assert_eq!(slow.status, 502);
    assert!(
        error_of(&slow).starts_with("host api unavailable: the upstream did not answer within "),
        "{}",
        error_of(&slow)
    );
    let trace = g.close();
    assert_eq!(
        trace.calls.iter().map(|c| (c.status, c.delivered)).collect::<Vec<_>>(),
        [(0, false), (0, false), (0, false)]
    );
    let spent = g.call_blocking("GET", "/items/1", None);
    assert_eq!((spent.status, error_of(&spent).as_str()), (403, "host api grant has ended with the run"));
}

#[test]
fn an_upstream_429_opens_the_circuit_and_later_calls_are_shed_not_sent() {
    let (url, seen) = api(Arc::default());
    let g = grant(&url, "", Duration::from_secs(10));
    assert_eq!(g.call_blocking("GET", "/quota", None).status, 429);
    let shed = g.call_blocking("GET", "/items/1", None);
    assert_eq!((shed.status, error_of(&shed).as_str()), (503, "host api is shedding load: upstream reported degraded"));
    assert_eq!(seen.lock().expect("seen").len(), 1);
    let trace = g.close();
    assert_eq!((trace.calls.len(), trace.shed, trace.denied), (1, 1, 0));
}

#[test]
fn a_503_window_is_probed_on_the_health_route_and_a_healthy_answer_closes_it() {
    let healthy = Arc::new(AtomicBool::new(false));
    let (url, seen) = api(healthy.clone());
    let g = grant(&url, r#", "health_check": "GET /health""#, Duration::from_secs(10));
    assert_eq!(g.call_blocking("GET", "/busy", None).status, 503);
    assert_eq!(g.call_blocking("GET", "/items/1", None).status, 503, "the probe failed, so the call is shed");
    healthy.store(true, Ordering::SeqCst);
    assert_eq!(g.call_blocking("GET", "/items/2", None).status, 503, "one probe a second");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(g.call_blocking("GET", "/items/3", None).status, 200, "the probe passed and closed the circuit");
    let paths: Vec<String> = seen.lock().expect("seen").iter().map(|s| s.1.clone()).collect();
    assert_eq!(paths, ["/busy", "/health", "/health", "/items/3"]);
}

#[test]
fn concurrent_runs_with_different_grants_never_see_each_others_credential_or_calls() {
    // One upstream per grant, so each upstream's log is exactly what one run sent.
    let (url_a, seen_a) = api(Arc::default());
    let (url_b, seen_b) = api(Arc::default());
    let broker = Broker::new().expect("broker");
    let text = format!(
        r#"{{"profiles": {{
            "a": {{"base_url": "{url_a}", "allowed_callers": ["alice"], "allow": ["GET /items/*"], "token": {{"type": "static", "env": "A"}}}},
            "b": {{"base_url": "{url_b}", "allowed_callers": ["bob"], "allow": ["GET /items/*"], "token": {{"type": "static", "env": "B"}}}}}}}}"#
    );
    let env = |v: &str| match v {
        "A" => Some("token-a".to_string()),
        "B" => Some("token-b".to_string()),
        _ => None,
    };
    let profiles =
        Profiles::parse(&text, &LoadContext { env: &env, dir: None, plugins: &no_plugins }).expect("profiles");
    let runs: Vec<_> = [("a", "alice"), ("b", "bob")]
        .into_iter()
        .map(|(name, who)| {
            let g =
                broker.open(profiles.select(name, who).expect("select"), who, Duration::from_secs(10)).expect("open");
            std::thread::spawn(move || {
                for i in 0..20 {
                    let a = g.call_blocking("GET", &format!("/items/{name}{i}"), None);
                    // The answer is to this run's own call.
                    assert_eq!((a.status, a.body.as_slice()), (200, format!("{{\"id\":\"{name}{i}\"}}").as_bytes()));
                }
                g.close()
            })
        })
        .collect();
    let traces: Vec<CallTrace> = runs.into_iter().map(|h| h.join().expect("run")).collect();
    for t in &traces {
        let rows: Vec<(u32, &str, u16, bool)> =
            t.calls.iter().map(|c| (c.seq, c.route.as_str(), c.status, c.delivered)).collect();
        assert_eq!(rows, (1..=20).map(|seq| (seq, "/items/*", 200, true)).collect::<Vec<_>>());
        assert_eq!((t.dropped, t.denied, t.shed), (0, 0, 0));
    }
    for (name, seen) in [("a", &seen_a), ("b", &seen_b)] {
        let seen = seen.lock().expect("seen");
        // Each upstream saw exactly its own run's paths, in the order the run sent them...
        let paths: Vec<&str> = seen.iter().map(|(_, path, _)| path.as_str()).collect();
        let want: Vec<String> = (0..20).map(|i| format!("/items/{name}{i}")).collect();
        assert_eq!(paths, want, "upstream {name}");
        assert!(seen.iter().all(|(method, _, _)| method == "GET"), "upstream {name}");
        // ...and exactly one credential: its own run's.
        let credentials: BTreeSet<Option<&str>> = seen.iter().map(|(_, _, auth)| auth.as_deref()).collect();
        let own = format!("Bearer token-{name}");
        assert_eq!(credentials, BTreeSet::from([Some(own.as_str())]), "upstream {name}");
    }
}

#[test]
fn calls_over_the_in_flight_limit_are_refused_at_capacity() {
    let (url, _) = api(Arc::default());
    let g = grant(&url, r#", "max_in_flight": 1"#, Duration::from_secs(10));
    let slow = {
        let g = g.clone();
        std::thread::spawn(move || g.call_blocking("GET", "/slow", None).status)
    };
    while g.in_flight.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    let a = g.call_blocking("GET", "/items/1", None);
    assert_eq!(
        (a.status, error_of(&a).as_str()),
        (429, "host api broker is at capacity: 1 calls of this run are in flight")
    );
    assert_eq!(slow.join().expect("slow"), 200);
}

#[test]
fn a_mint_failure_refuses_the_run_with_permission() {
    let (url, _) = api(Arc::default());
    let text = format!(
        r#"{{"profiles": {{"j": {{"base_url": "{url}", "allowed_callers": ["*"], "token": {{"type": "jwt", "secret_env": "S", "audience": "demo"}}}}}}}}"#
    );
    let env = |v: &str| (v == "S").then(|| "k".repeat(32));
    let profiles =
        Profiles::parse(&text, &LoadContext { env: &env, dir: None, plugins: &no_plugins }).expect("profiles");
    let broker = Broker::new().expect("broker");
    let r = broker.open(profiles.select("j", "*").expect("select"), "*", Duration::from_secs(1)).expect_err("refused");
    assert_eq!(r.reason, Reason::Permission);
    assert_eq!(
        r.message,
        "grant_profile \"j\": a subject-bound credential needs an authenticated caller; the caller's ID is not a stable subject"
    );
}

/// A shaper that does what `mode` says.
#[derive(Debug)]
struct TestShaper(&'static str);

impl crate::token::Shaper for TestShaper {
    fn shape(&self, _route: &Route, path: &str, body: Option<&[u8]>) -> Result<crate::token::Shaped, String> {
        let body = body.map(<[u8]>::to_vec);
        let shaped = |path: &str, headers: Vec<(String, String)>| crate::token::Shaped {
            path: path.into(),
            headers,
            body: body.clone(),
        };
        match self.0 {
            "tag" => Ok(shaped(path, vec![("x-demo-client".into(), "plimsoll".into())])),
            "escape" => Ok(shaped("/admin", vec![])),
            "auth" => Ok(shaped(path, vec![("Authorization".into(), "Bearer forged".into())])),
            _ => Err("this vendor does not serve that call".into()),
        }
    }
}

#[derive(Debug)]
struct NoMint;

impl Minter for NoMint {
    fn mint(&self, _: &MintScope<'_>) -> Result<Credential, crate::token::MintError> {
        Ok(Credential { authorization: crate::token::Secret::new("Bearer minted-by-plugin".into()), expires: None })
    }
}

#[test]
fn a_broker_plugin_shapes_calls_but_cannot_leave_the_route_or_set_host_headers() {
    let (url, seen) = api(Arc::default());
    let broker = Broker::new().expect("broker");
    for (mode, status, error) in [
        ("tag", 200, None),
        (
            "escape",
            502,
            Some(
                "host api unavailable: the broker plugin shaped the call outside its route or set a header only the host sets",
            ),
        ),
        (
            "auth",
            502,
            Some(
                "host api unavailable: the broker plugin shaped the call outside its route or set a header only the host sets",
            ),
        ),
        ("refuse", 403, Some("forbidden by the API's broker plugin: this vendor does not serve that call")),
    ] {
        let plugin = PluginBroker {
            minter: Arc::new(NoMint),
            routes: vec![Route::parse("GET /items/*").expect("route"), Route::parse("GET /admin").expect("route")],
            shaper: Arc::new(TestShaper(mode)),
            schemas: vec![],
        };
        let plugins = move |name: &str| (name == "vendor").then(|| plugin.clone());
        let text = format!(
            r#"{{"profiles": {{"v": {{"base_url": "{url}", "allowed_callers": ["alice"], "allow": ["GET /items/*"], "token": {{"type": "plugin", "plugin": "vendor"}}}}}}}}"#
        );
        let profiles =
            Profiles::parse(&text, &LoadContext { env: &env, dir: None, plugins: &plugins }).expect("profiles");
        let g =
            broker.open(profiles.select("v", "alice").expect("select"), "alice", Duration::from_secs(5)).expect("open");
        let a = g.call_blocking("GET", "/items/7", None);
        assert_eq!(a.status, status, "{mode}");
        if let Some(e) = error {
            assert_eq!(error_of(&a), e, "{mode}");
        }
        assert_eq!(g.close().denied, u32::from(error.is_some()), "{mode}");
    }
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen, [("GET".to_string(), "/items/7".to_string(), Some("Bearer minted-by-plugin".to_string()))]);
}

#[test]
fn a_profile_may_open_only_routes_its_broker_plugin_serves() {
    let plugin = PluginBroker {
        minter: Arc::new(NoMint),
        routes: vec![Route::parse("GET /items/*").expect("route")],
        shaper: Arc::new(TestShaper("tag")),
        schemas: vec![],
    };
    let plugins = move |name: &str| (name == "vendor").then(|| plugin.clone());
    let text = r#"{"profiles": {"v": {"base_url": "https://api.example.com", "allowed_callers": ["a"], "allow": ["GET /items/*", "DELETE /items/*"], "token": {"type": "plugin", "plugin": "vendor"}}}}"#;
    let e = Profiles::parse(text, &LoadContext { env: &env, dir: None, plugins: &plugins }).expect_err("refused");
    assert_eq!(
        e.to_string(),
        "grant profile \"v\": allow: route \"DELETE /items/*\" is not one the broker plugin \"vendor\" serves"
    );
}

#[test]
fn a_body_that_breaks_the_plugins_schema_is_refused_400_and_not_sent() {
    let (url, seen) = api(Arc::default());
    let plugin = PluginBroker {
        minter: Arc::new(NoMint),
        routes: vec![Route::parse("POST /items").expect("route")],
        shaper: Arc::new(TestShaper("tag")),
        schemas: vec![(
            Route::parse("POST /items").expect("route"),
            crate::schema::Schema::parse(
                r#"{"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}"#,
            )
            .expect("schema"),
        )],
    };
    let plugins = move |name: &str| (name == "vendor").then(|| plugin.clone());
    let text = format!(
        r#"{{"profiles": {{"v": {{"base_url": "{url}", "allowed_callers": ["alice"], "allow": ["POST /items"], "token": {{"type": "plugin", "plugin": "vendor"}}}}}}}}"#
    );
    let profiles = Profiles::parse(&text, &LoadContext { env: &env, dir: None, plugins: &plugins }).expect("profiles");
    let broker = Broker::new().expect("broker");
    let g = broker.open(profiles.select("v", "alice").expect("select"), "alice", Duration::from_secs(5)).expect("open");
    let bad = g.call_blocking("POST", "/items", Some(br#"{"name": 7}"#));
    assert_eq!(
        (bad.status, error_of(&bad).as_str()),
        (
            400,
            "host api request body does not match the API's schema for POST /items: $.name: must be string, not integer"
        )
    );
    assert_eq!(g.call_blocking("POST", "/items", Some(br#"{"name": "nut"}"#)).status, 201);
    assert_eq!(seen.lock().expect("seen").len(), 1, "only the valid body was sent");
    assert_eq!(g.close().denied, 1);
}
