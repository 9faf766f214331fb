//! The {{name}} broker plugin, as `plimsoll-host plugin new` wrote it: it
//! declares one API's routes, and mints each granted run's short-lived
//! credential at the API's token endpoint (endpoint alias `token`, which the
//! operator maps to a URL and the long-lived client secret this plugin never
//! sees). The host matches routes, checks every call, enforces the budgets and
//! sends every request itself.

wit_bindgen::generate!({
    world: "plimsoll:broker/broker-plugin",
    path: ["wit/types", "wit/host", "wit/broker"],
    generate_all,
});

use exports::plimsoll::broker::broker::{Call, Credential, Description, Guest, MintRequest, Route, Shaped};
use plimsoll::host::http::{Request, send};
use plimsoll::types::types::{Refusal, RefusalReason};

/// The endpoint alias the manifest names.
const ENDPOINT: &str = "token";
/// The budget of one token request.
const TIMEOUT_MS: u32 = 10_000;
/// The longest credential minted, in seconds.
const MAX_TTL_S: u32 = 300;

struct Plugin;

fn refused(reason: RefusalReason, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

impl Guest for Plugin {
    fn describe() -> Description {
        Description {
            name: "{{name}}".into(),
            api: "the {{name}} API".into(),
            routes: vec![Route { method: "GET".into(), path: "/items".into() }],
            batch_of: vec![],
            schemas: vec![],
        }
    }

    fn mint(req: MintRequest) -> Result<Credential, Refusal> {
        let ttl_s = (req.ttl_ms / 1000).clamp(1, MAX_TTL_S);
        let r = send(&Request {
            endpoint: ENDPOINT.into(),
            target: None,
            method: "POST".into(),
            path: "/oauth/token".into(),
            headers: vec![("content-type".into(), "application/x-www-form-urlencoded".into())],
            body: format!("ttl={ttl_s}").into_bytes(),
            timeout_ms: TIMEOUT_MS,
        })
        .map_err(|e| refused(RefusalReason::Environment, format!("the token endpoint did not answer: {e}")))?;
        if r.status != 200 {
            return Err(refused(RefusalReason::Permission, format!("the token endpoint answered {}", r.status)));
        }
        let token = String::from_utf8(r.body)
            .ok()
            .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic()))
            .ok_or_else(|| refused(RefusalReason::Environment, "the token endpoint's answer is not a token"))?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Ok(Credential { authorization: format!("Bearer {token}"), expires_unix_ms: now_ms + u64::from(ttl_s) * 1000 })
    }

    fn shape(call: Call) -> Result<Shaped, Refusal> {
        Ok(Shaped { path: call.path, headers: vec![], body: call.body })
    }
}

export!(Plugin);
