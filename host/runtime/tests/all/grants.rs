//! A grant's client inside the QuickJS guest, over the engine's host import. The
//! broker here records what reached it and answers from a script, so these tests
//! pin the transport and the client; the real broker is tested in its own crate and
//! end to end.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use plimsoll_core::provider::{Grant, GrantSlot, HostAnswer, HostApi, Provider, SessionReach, Snippet};
use plimsoll_core::session::{Call, Cell, Output, Session};
use plimsoll_core::validate::Language;
use plimsoll_core::wire::{CellResult, JavaScriptResult};

use super::{text, wasm};

/// What reached the host: method, path, body.
type Calls = Arc<Mutex<Vec<(String, String, Option<String>)>>>;

struct Recorder {
    calls: Calls,
}

impl HostApi for Recorder {
    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer {
        let body = body.map(|b| String::from_utf8_lossy(b).into_owned());
        self.calls.lock().expect("calls").push((method.into(), path.into(), body.clone()));
        let json = |status: u16, body: String| HostAnswer {
            status,
            content_type: "application/json".into(),
            body: body.into_bytes(),
        };
        match (method, path) {
            ("GET", "/items/42") => json(200, r#"{"id":42,"name":"bolt"}"#.into()),
            ("POST", "/items") => json(201, format!(r#"{{"created":{}}}"#, body.unwrap_or_default())),
            ("GET", "/items/404") => json(404, r#"{"error":"no such item"}"#.into()),
            ("GET", "/text") => {
                HostAnswer { status: 200, content_type: "text/plain".into(), body: b"plain words".to_vec() }
            }
            _ => json(403, r#"{"error":"forbidden by sandbox capability allowlist"}"#.into()),
        }
    }
}

fn granted(code: &str, routes: &[&str], preamble: &str) -> (JavaScriptResult, Vec<(String, String, Option<String>)>) {
    let calls: Calls = Arc::default();
    let grant = Grant {
        global: "host".into(),
        routes: routes.iter().map(|r| r.to_string()).collect(),
        preamble: preamble.into(),
        api: Arc::new(Recorder { calls: calls.clone() }),
    };
    let r = wasm()
        .run_snippet(&Snippet {
            language: Language::JavaScript,
            code,
            timeout: Duration::from_secs(5),
            floor: None,
            grant: Some(&grant),
        })
        .expect("a result")
        .result;
    let seen = calls.lock().expect("calls").clone();
    (r, seen)
}

const ROUTES: [&str; 4] = ["GET /items/*", "POST /items", "GET /text", "DELETE /items/*"];

#[test]
fn the_client_calls_through_the_host_and_parses_json_answers() {
    let (r, calls) = granted(
        r#"host.get("/items/*", [42]).then((item) => console.log(item.name));
           host.post("/items", { name: "nut" }).then((c) => console.log(JSON.stringify(c)));
           host.get("/text").then((t) => console.log(t));"#,
        &ROUTES,
        "",
    );
    assert_eq!(text(&r.stderr), "");
    assert_eq!(text(&r.stdout), "bolt\n{\"created\":{\"name\":\"nut\"}}\nplain words\n");
    assert_eq!(
        calls,
        [
            ("GET".into(), "/items/42".into(), None),
            ("POST".into(), "/items".into(), Some(r#"{"name":"nut"}"#.into())),
            ("GET".into(), "/text".into(), None),
        ]
    );
}

#[test]
fn answers_outside_2xx_reject_with_status_and_parsed_body() {
    let (r, _) =
        granted(r#"host.get("/items/404").catch((e) => console.log(e.status, e.body.error, e.message));"#, &ROUTES, "");
    assert_eq!(text(&r.stdout), "404 no such item host api 404: {\"error\":\"no such item\"}\n");
}

#[test]
fn the_client_refuses_unlisted_routes_and_bad_params_before_the_host_sees_them() {
    let (r, calls) = granted(
        r#"host.del("/admin").catch((e) => console.log(e.message));
           host.get("/items/*", ["a", "b"]).catch((e) => console.log(e.message));
           host.get("/items/*", "a/b").catch((e) => console.log(e.message));
           host.get("/items/7:undo").catch((e) => console.log(e.message));"#,
        &ROUTES,
        "",
    );
    assert_eq!(
        text(&r.stdout),
        "host api call not permitted by sandbox capability: DELETE /admin\n\
         route /items/* has 1 * segment(s) but 2 param(s) were given\n\
         a param fills one segment: it must be non-empty and hold no /\n\
         host api call not permitted by sandbox capability: GET /items/7:undo\n"
    );
    assert!(calls.is_empty(), "nothing reached the host: {calls:?}");
}

#[test]
fn the_client_cannot_be_replaced_and_no_other_way_out_exists() {
    // The import is reachable only through the client's closure; code that wants
    // around the client finds nothing to call (the container tier, where a socket
    // can be dialled by hand, tests the broker refusing such calls).
    let (r, calls) = granted(
        r#"const forged = Object.getOwnPropertyDescriptor(globalThis, "host");
           console.log(forged.writable, forged.configurable);
           try { globalThis.host = { get: () => "hijacked" }; } catch (e) { console.log("frozen"); }
           console.log(typeof fetch, typeof XMLHttpRequest, typeof require);"#,
        &ROUTES,
        "",
    );
    assert_eq!(text(&r.stdout), "false false\nundefined undefined undefined\n");
    assert!(calls.is_empty());
}

#[test]
fn a_preamble_runs_after_the_client_and_can_wrap_it() {
    let (r, calls) = granted(
        r#"inventory.item(42).then((i) => console.log(i.id));"#,
        &ROUTES,
        r#"globalThis.inventory = { item: (id) => host.get("/items/*", [id]) };"#,
    );
    assert_eq!(text(&r.stdout), "42\n");
    assert_eq!(calls.len(), 1);
}

#[test]
fn without_a_grant_there_is_no_client() {
    let r = super::run(r#"console.log(typeof host)"#, Duration::from_secs(5));
    assert_eq!(text(&r.stdout), "undefined\n");
}

/// A cell's stdout and stderr through the session's own `call`.
fn session_cell(s: &mut dyn Session, language: Language, code: &str, timeout: Duration) -> CellResult {
    let call = Call::Cell(Cell { language, code, files: &[], timeout, floor: None });
    match s.call(call).expect("answered").output {
        Output::Cell(c) => c,
        other => panic!("not a cell: {other:?}"),
    }
}

#[test]
fn a_session_holding_a_grant_gives_each_interpreter_its_client_served_only_while_a_call_runs() {
    let slot = Arc::new(GrantSlot::default());
    let held = Grant {
        global: "inventory".into(),
        routes: ROUTES.iter().map(|r| r.to_string()).collect(),
        preamble: "globalThis.sdk = 'ready';".into(),
        api: slot.clone(),
    };
    let calls: Calls = Arc::default();
    let mut s = super::python::py().open_session(None, SessionReach::Held(&held)).expect("opened").session;
    let (js, py, budget) = (Language::JavaScript, Language::Python, Duration::from_secs(10));
    let show = |c: &CellResult| text(&c.stdout) + &text(&c.stderr);

    // The daemon arms the slot only for a call; outside one the API answers 503.
    let r = session_cell(s.as_mut(), js, "await inventory.get('/items/*', [42]).catch((e) => e.status)", budget);
    assert_eq!(show(&r), "503\n");
    slot.set(Arc::new(Recorder { calls: calls.clone() }));
    let r = session_cell(s.as_mut(), js, "[(await inventory.get('/items/*', [42])).name, sdk]", budget);
    assert_eq!(show(&r), "[ 'bolt', 'ready' ]\n");
    let r = session_cell(s.as_mut(), py, "import plimsoll_host as h\nh.get('/items/*', [42])['name']", budget);
    assert_eq!(show(&r), "'bolt'\n");
    let r =
        session_cell(s.as_mut(), py, "try:\n    h.get('/admin')\nexcept PermissionError as e:\n    print(e)", budget);
    assert_eq!(show(&r), "host api call not permitted by sandbox capability: GET /admin\n", "its routes are checked");

    // A restarted interpreter gets the client again.
    let r = session_cell(s.as_mut(), js, "while (true) {}", Duration::from_millis(200));
    assert!(r.interpreter_ended, "{}", show(&r));
    let r = session_cell(s.as_mut(), js, "typeof inventory.get", budget);
    assert_eq!((show(&r).as_str(), r.interpreter_started), ("'function'\n", true));
    slot.clear();
    let r = session_cell(
        s.as_mut(),
        py,
        "try:\n    h.get('/items/*', [42])\nexcept h.HostApiError as e:\n    print(e.status)",
        budget,
    );
    assert_eq!(show(&r), "503\n");
    let reached: Vec<String> = calls.lock().expect("calls").iter().map(|(m, p, _)| format!("{m} {p}")).collect();
    assert_eq!(reached, ["GET /items/42", "GET /items/42"]);
}
