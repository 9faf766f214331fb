//! What every request to the HTTPS mode's MCP endpoint must pass before the
//! MCP transport sees it, as pure checks: the `Origin` (DNS-rebinding and
//! cross-site requests), the `Accept` and `Content-Type` the Streamable HTTP
//! transport names, the body's size and JSON-RPC shape, and the binding of
//! each `Mcp-Session-Id` to the approval whose token opened it. The transport
//! itself binds a session to no one, so without this one connection could use
//! or close another's session.

use std::collections::HashMap;

use serde_json::{Value, json};

/// The largest request body: a project's 4 MiB of files, with room for JSON's escaping.
pub const MAX_BODY: usize = 8 << 20;
/// Sessions bound at once across all approvals.
pub const MAX_SESSIONS: usize = 256;
/// Sessions bound at once to one approval.
pub const MAX_SESSIONS_PER_APPROVAL: usize = 32;

/// A request turned away, with the status and body the specifications name.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub status: u16,
    /// A JSON-RPC error object, or `{"error": ...}`.
    pub body: Value,
}

impl Refused {
    fn plain(status: u16, message: impl Into<String>) -> Refused {
        Refused { status, body: json!({"error": message.into()}) }
    }

    fn rpc(code: i64, message: &str, data: impl Into<String>) -> Refused {
        Refused {
            status: 400,
            body: json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message, "data": data.into()}}),
        }
    }
}

/// Whether a media range list (an `Accept` value) admits `wanted`: named
/// exactly or by a wildcard, with a weight above zero.
fn admits(accept: &str, wanted: &str) -> bool {
    let (kind, _) = wanted.split_once('/').unwrap_or((wanted, ""));
    accept.split(',').any(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let zero = parts.any(|p| p.strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)));
        !zero && (media == wanted || media == "*/*" || media == format!("{kind}/*"))
    })
}

/// The `Origin` check: a browser's request must come from the server's own
/// public origin (`https://HOST[:PORT]`); a request with no `Origin` is not a
/// browser's cross-site one.
///
/// # Errors
///
/// 403 for any other origin, `null` included.
pub fn origin(origin: Option<&str>, public: &str) -> Result<(), Refused> {
    match origin {
        None => Ok(()),
        Some(o) if o.trim_end_matches('/') == public.trim_end_matches('/') => Ok(()),
        Some(o) => Err(Refused::plain(403, format!("origin {o:?} is not this server's"))),
    }
}

/// The `Accept` and `Content-Type` checks of a `POST` (both JSON and an event
/// stream accepted, a JSON body) or a `GET` (an event stream accepted).
///
/// # Errors
///
/// 406 for an `Accept` that leaves a type out, 415 for another content type,
/// 405 for another method.
pub fn media(method: &str, accept: Option<&str>, content_type: Option<&str>) -> Result<(), Refused> {
    let accept = accept.unwrap_or_default();
    match method {
        "POST" => {
            if !admits(accept, "application/json") || !admits(accept, "text/event-stream") {
                return Err(Refused::plain(
                    406,
                    "a POST to the MCP endpoint must accept both application/json and text/event-stream",
                ));
            }
            let ct = content_type.unwrap_or_default().split(';').next().unwrap_or_default().trim();
            if !ct.eq_ignore_ascii_case("application/json") {
                return Err(Refused::plain(415, format!("the body must be application/json, not {ct:?}")));
            }
            Ok(())
        }
        "GET" if admits(accept, "text/event-stream") => Ok(()),
        "GET" => Err(Refused::plain(406, "a GET to the MCP endpoint must accept text/event-stream")),
        "DELETE" => Ok(()),
        other => Err(Refused::plain(405, format!("the MCP endpoint takes POST, GET and DELETE, not {other}"))),
    }
}

/// A declared body length over [`MAX_BODY`], refused before a byte is read.
///
/// # Errors
///
/// 413.
pub fn length(declared: Option<u64>) -> Result<(), Refused> {
    match declared {
        Some(n) if n > MAX_BODY as u64 => Err(too_large()),
        _ => Ok(()),
    }
}

/// 413: a body over [`MAX_BODY`] (also when it turns out so while read).
pub fn too_large() -> Refused {
    Refused::plain(413, format!("the body is over {MAX_BODY} bytes"))
}

/// What a POST's body is, once it is JSON-RPC.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The method, for a request or notification (none for a response).
    pub method: Option<String>,
    /// The message as parsed.
    pub value: Value,
}

/// Reads a POST's body as one JSON-RPC 2.0 message (a request, notification
/// or response; batches are gone from MCP).
///
/// # Errors
///
/// 400 with -32700 for a body that is not JSON, -32600 for JSON that is no
/// JSON-RPC message.
pub fn message(body: &[u8]) -> Result<Message, Refused> {
    if body.len() > MAX_BODY {
        return Err(too_large());
    }
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Refused::rpc(-32700, "Parse error", format!("the body is not JSON: {e}")))?;
    let invalid = |why: &str| Refused::rpc(-32600, "Invalid Request", why);
    let obj = value.as_object().ok_or_else(|| invalid("the body is not one JSON-RPC message object"))?;
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("the message's jsonrpc is not \"2.0\""));
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) if !m.is_empty() => Some(m.clone()),
        Some(_) => return Err(invalid("the message's method is not a string")),
        None if obj.contains_key("result") || obj.contains_key("error") => None,
        None => return Err(invalid("the message is neither a request nor a response")),
    };
    if let Some(id) = obj.get("id")
        && !(id.is_string() || id.is_i64() || id.is_u64() || (id.is_null() && method.is_none()))
    {
        return Err(invalid("the message's id is not a string or an integer"));
    }
    Ok(Message { method, value })
}

/// Which approval each MCP session belongs to.
#[derive(Debug, Default)]
pub struct Sessions {
    owners: HashMap<String, String>,
}

impl Sessions {
    /// Binds the session the transport just opened to `approval`.
    ///
    /// # Errors
    ///
    /// 503 past [`MAX_SESSIONS`] (the caller closes the session it opened).
    pub fn bind(&mut self, session: &str, approval: &str) -> Result<(), Refused> {
        if self.owners.contains_key(session) {
            return Ok(());
        }
        if self.owners.len() >= MAX_SESSIONS {
            return Err(Refused::plain(503, format!("{MAX_SESSIONS} MCP sessions are open; close one first")));
        }
        if self.owners.values().filter(|a| *a == approval).count() >= MAX_SESSIONS_PER_APPROVAL {
            return Err(Refused::plain(
                503,
                format!("this connection has {MAX_SESSIONS_PER_APPROVAL} MCP sessions open; close one first"),
            ));
        }
        self.owners.insert(session.to_string(), approval.to_string());
        Ok(())
    }

    /// Lets a request naming `session` through only for the approval that
    /// opened it: another's, or one not known, is not found (404), the same
    /// answer for both so none can be probed for.
    ///
    /// # Errors
    ///
    /// 404.
    pub fn check(&self, session: &str, approval: &str) -> Result<(), Refused> {
        match self.owners.get(session) {
            Some(owner) if owner == approval => Ok(()),
            _ => Err(Refused::plain(404, "no such MCP session")),
        }
    }

    /// Every session bound.
    pub fn ids(&self) -> Vec<String> {
        self.owners.keys().cloned().collect()
    }

    /// Forgets a session closed by its owner.
    pub fn close(&mut self, session: &str) {
        self.owners.remove(session);
    }

    /// Forgets every session of a revoked approval; returns them, for the
    /// transport to close.
    pub fn revoke(&mut self, approval: &str) -> Vec<String> {
        let gone: Vec<String> = self.owners.iter().filter(|(_, a)| *a == approval).map(|(s, _)| s.clone()).collect();
        for s in &gone {
            self.owners.remove(s);
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PUBLIC: &str = "https://localhost:8443";

    #[test]
    fn only_the_servers_own_origin_or_none_passes() {
        assert_eq!(origin(None, PUBLIC), Ok(()));
        assert_eq!(origin(Some("https://localhost:8443"), PUBLIC), Ok(()));
        for other in ["https://evil.example", "null", "http://localhost:8443", "https://127.0.0.1:8443"] {
            let e = origin(Some(other), PUBLIC).expect_err(other);
            assert_eq!(e.status, 403, "{other}");
        }
    }

    #[test]
    fn accept_and_content_type_are_the_transports() {
        let both = "application/json, text/event-stream";
        assert_eq!(media("POST", Some(both), Some("application/json; charset=utf-8")), Ok(()));
        assert_eq!(media("POST", Some("*/*"), Some("application/json")), Ok(()));
        assert_eq!(media("POST", Some("application/*, text/*"), Some("application/json")), Ok(()));
        for accept in
            [None, Some("application/json"), Some("text/event-stream"), Some("application/json, text/event-stream;q=0")]
        {
            let e = media("POST", accept, Some("application/json")).expect_err("406");
            assert_eq!(e.status, 406, "{accept:?}");
        }
        assert_eq!(media("POST", Some(both), Some("text/plain")).expect_err("415").status, 415);
        assert_eq!(media("POST", Some(both), None).expect_err("415").status, 415);
        assert_eq!(media("GET", Some("text/event-stream"), None), Ok(()));
        assert_eq!(media("GET", Some("application/json"), None).expect_err("406").status, 406);
        assert_eq!(media("DELETE", None, None), Ok(()));
        assert_eq!(media("PUT", Some(both), None).expect_err("405").status, 405);
    }

    #[test]
    fn bodies_are_one_json_rpc_message_within_the_limit() {
        let m = message(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).expect("request");
        assert_eq!(m.method.as_deref(), Some("tools/list"));
        assert_eq!(
            message(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).expect("note").value["id"],
            Value::Null
        );
        assert_eq!(message(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).expect("response").method, None);
        let code = |body: &[u8]| {
            let e = message(body).expect_err("refused");
            (e.status, e.body["error"]["code"].as_i64())
        };
        assert_eq!(code(br#"{"jsonrpc":"2.0","#), (400, Some(-32700)));
        assert_eq!(code(b"\xff\xfe"), (400, Some(-32700)));
        for invalid in [
            &b"[]"[..],
            b"{\"foo\":1}",
            b"{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"x\"}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}",
            b"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"x\"}",
        ] {
            assert_eq!(code(invalid), (400, Some(-32600)), "{}", String::from_utf8_lossy(invalid));
        }
        let e = message(br#"{"jsonrpc":"2.0","#).expect_err("parse");
        assert_eq!((e.body["jsonrpc"].as_str(), e.body["id"].clone()), (Some("2.0"), Value::Null));
        assert_eq!(length(Some(MAX_BODY as u64)), Ok(()));
        assert_eq!(length(Some(MAX_BODY as u64 + 1)).expect_err("413").status, 413);
        assert_eq!(message(&vec![b' '; MAX_BODY + 1]).expect_err("413").status, 413);
    }

    #[test]
    fn a_session_answers_only_the_approval_that_opened_it() {
        let mut s = Sessions::default();
        s.bind("s-a", "approval-a").expect("bound");
        s.bind("s-b", "approval-b").expect("bound");
        assert_eq!(s.check("s-a", "approval-a"), Ok(()));
        let theirs = s.check("s-a", "approval-b").expect_err("another's");
        let unknown = s.check("s-x", "approval-b").expect_err("unknown");
        assert_eq!((theirs.status, theirs), (404, unknown));
        assert_eq!(s.revoke("approval-a"), vec!["s-a".to_string()]);
        assert_eq!(s.check("s-a", "approval-a").expect_err("revoked").status, 404);
        s.close("s-b");
        assert_eq!(s.check("s-b", "approval-b").expect_err("closed").status, 404);
        for i in 0..MAX_SESSIONS_PER_APPROVAL {
            s.bind(&format!("a{i}"), "a").expect("room");
        }
        let e = s.bind("one-more", "a").expect_err("this approval's are full");
        assert_eq!(
            (e.status, e.body["error"].as_str()),
            (503, Some("this connection has 32 MCP sessions open; close one first"))
        );
        s.bind("b0", "b").expect("another approval still has room");
        for i in 0..MAX_SESSIONS {
            let _ = s.bind(&format!("s{i}"), &format!("x{}", i % 64));
        }
        assert_eq!(s.bind("one-more", "y").expect_err("full").status, 503);
    }
}
