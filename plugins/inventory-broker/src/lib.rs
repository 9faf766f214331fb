//! An example broker plugin for the broker demo's inventory API
//! (`examples/broker-demo/api.py`). It declares the API's routes, mints each run's
//! credential at the API's token endpoint (`POST /oauth/token`, endpoint alias
//! `token`), declares the body `POST /items` takes (the host checks it), and tags
//! each call. The operator's long-lived client secret is the
//! `Authorization` header the host attaches to the token request; this plugin never
//! sees it. The host matches routes, checks every shaped call again, enforces the
//! budgets and sends every request itself.

wit_bindgen::generate!({
    world: "plimsoll:broker/broker-plugin",
    path: ["../../wit/types", "../../wit/host", "../../wit/broker"],
    generate_all,
});

use exports::plimsoll::broker::broker::{
    Call, Credential, Description, Guest, MintRequest, Route, RouteSchema, Shaped,
};
use plimsoll::host::http::{Request, send};
use plimsoll::types::types::{Refusal, RefusalReason};

/// The endpoint alias the manifest names.
const ENDPOINT: &str = "token";
/// The budget of one token request.
const TIMEOUT_MS: u32 = 10_000;
/// The longest token the API issues, in seconds.
const MAX_TTL_S: u32 = 300;

struct Plugin;

fn route(method: &str, path: &str) -> Route {
    Route { method: method.into(), path: path.into() }
}

fn refused(reason: RefusalReason, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

/// Form-encodes a value (RFC 3986 unreserved bytes stay as they are).
fn form(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Guest for Plugin {
    fn describe() -> Description {
        Description {
            name: "inventory-broker".into(),
            api: "the broker demo's inventory API (examples/broker-demo/api.py)".into(),
            routes: vec![route("GET", "/items"), route("GET", "/items/*"), route("POST", "/items")],
            batch_of: vec![(route("GET", "/items"), vec![route("GET", "/items/*")])],
            schemas: vec![RouteSchema {
                route: route("POST", "/items"),
                request: r#"{"type": "object", "required": ["name"], "additionalProperties": false,
                    "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 64}}}"#
                    .into(),
            }],
        }
    }

    fn mint(req: MintRequest) -> Result<Credential, Refusal> {
        if req.subject.is_empty() {
            return Err(refused(RefusalReason::Permission, "a token needs the caller's ID as its subject"));
        }
        let ttl_s = (req.ttl_ms / 1000).clamp(1, MAX_TTL_S);
        let r = send(&Request {
            endpoint: ENDPOINT.into(),
            target: None,
            method: "POST".into(),
            path: "/oauth/token".into(),
            headers: vec![("content-type".into(), "application/x-www-form-urlencoded".into())],
            body: format!("subject={}&ttl={ttl_s}", form(&req.subject)).into_bytes(),
            timeout_ms: TIMEOUT_MS,
        })
        .map_err(|e| refused(RefusalReason::Environment, format!("the token endpoint did not answer: {e}")))?;
        if r.status != 200 {
            return Err(refused(RefusalReason::Permission, format!("the token endpoint answered {}", r.status)));
        }
        let v: serde_json::Value = serde_json::from_slice(&r.body)
            .map_err(|_| refused(RefusalReason::Environment, "the token endpoint's answer is not JSON"))?;
        let token = v["access_token"]
            .as_str()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| refused(RefusalReason::Environment, "the token endpoint's answer has no access_token"))?;
        let expires_in = v["expires_in"].as_u64().unwrap_or(u64::from(ttl_s));
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Ok(Credential { authorization: format!("Bearer {token}"), expires_unix_ms: now_ms + expires_in * 1000 })
    }

    fn shape(call: Call) -> Result<Shaped, Refusal> {
        Ok(Shaped { path: call.path, headers: vec![("x-demo-client".into(), "plimsoll".into())], body: call.body })
    }
}

export!(Plugin);
