//! The MCP endpoint, `/mcp`: the bearer token names an approval, the gate's
//! checks run, a named session must be that approval's, and only then does
//! rmcp's Streamable HTTP transport see the request, carrying the approval's
//! [`Scope`] for the tools. A session the transport opens is bound to the
//! approval that opened it.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request};
use http_body_util::Full;
use hyper::body::Body;
use rmcp::transport::streamable_http_server::session::SessionManager as _;

use super::app::{App, BoxError, Reply, header_str, json_reply, lock, log, read_body};
use crate::gate;
use crate::oauth::Bearer;
use crate::tools::Scope;

/// The header the transport names its sessions in.
const SESSION: &str = "mcp-session-id";

fn refused(r: &gate::Refused) -> Reply {
    json_reply(r.status, &r.body)
}

impl App {
    /// Serves a request to `/mcp`.
    pub(super) async fn mcp<B>(&self, req: Request<B>) -> Reply
    where
        B: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        let h = req.headers();
        if let Err(r) = gate::origin(header_str(h, header::ORIGIN), self.public()) {
            return refused(&r);
        }
        let checked = lock(&self.auth).check(header_str(h, header::AUTHORIZATION), Instant::now(), SystemTime::now());
        let approval = match checked {
            Ok(a) => a,
            Err(why) => return self.unauthorized(why),
        };
        let method = req.method().clone();
        // Accept may come as several header lines; they are one list.
        let accept: Vec<&str> = h.get_all(header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).collect();
        let accept = (!accept.is_empty()).then(|| accept.join(","));
        if let Err(r) = gate::media(method.as_str(), accept.as_deref(), header_str(h, header::CONTENT_TYPE)) {
            return refused(&r);
        }
        let session = header_str(h, SESSION).map(str::to_string);
        if let Some(s) = &session
            && let Err(r) = lock(&self.sessions).check(s, &approval)
        {
            return refused(&r);
        }
        let (mut parts, body) = req.into_parts();
        let body = if method == Method::POST {
            let declared = header_str(&parts.headers, header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
            if let Err(r) = gate::length(declared) {
                return refused(&r);
            }
            let bytes = match read_body(body, gate::MAX_BODY).await {
                Ok(b) => b,
                Err(r) => return r.reply(),
            };
            if let Err(r) = gate::message(&bytes) {
                return refused(&r);
            }
            // Revoked while the body arrived: refused as if it were revoked first.
            if !lock(&self.auth).stands(&approval) {
                return self.unauthorized(Bearer::Invalid);
            }
            bytes
        } else {
            Bytes::new()
        };
        parts.extensions.insert(Scope::approval(&approval));
        let reply = self.mcp.handle(Request::from_parts(parts, Full::new(body))).await;
        self.after(&method, session, &approval, reply).await
    }

    /// 401 with the challenge the MCP authorization specification names
    /// (`error="invalid_token"` for a token that opens nothing).
    fn unauthorized(&self, why: Bearer) -> Reply {
        let challenge = lock(&self.auth).urls().challenge(why == Bearer::Invalid);
        let message = match why {
            Bearer::Missing => "the MCP endpoint needs a bearer token: connect through OAuth",
            Bearer::Invalid => "the bearer token is unknown, expired or revoked",
        };
        let mut r = json_reply(401, &serde_json::json!({"error": message}));
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }

    /// Binds a session the transport just opened, or forgets one it closed.
    async fn after(&self, method: &Method, named: Option<String>, approval: &str, reply: Reply) -> Reply {
        let ok = reply.status().is_success();
        match (method, named) {
            (&Method::POST, None) if ok => {
                let Some(opened) = header_str(reply.headers(), SESSION).map(str::to_string) else {
                    return reply;
                };
                let bound = lock(&self.sessions).bind(&opened, approval);
                if let Err(r) = bound {
                    // Full: first forget sessions the transport has ended itself (idle ones).
                    let known = lock(&self.sessions).ids();
                    let mut gone = Vec::new();
                    for id in known {
                        if !self.manager.has_session(&Arc::from(id.as_str())).await.unwrap_or(false) {
                            gone.push(id);
                        }
                    }
                    let bound = {
                        let mut sessions = lock(&self.sessions);
                        for id in &gone {
                            sessions.close(id);
                        }
                        sessions.bind(&opened, approval).is_ok()
                    };
                    if !bound {
                        let _ = self.manager.close_session(&Arc::from(opened.as_str())).await;
                        log(format_args!("refused an MCP session for connection {approval}: too many open"));
                        return refused(&r);
                    }
                }
                reply
            }
            (&Method::DELETE, Some(s)) if ok => {
                lock(&self.sessions).close(&s);
                // rmcp says 202; the session is gone, which the official SDK
                // reads from 200 or 204 only (it warns on anything else).
                let mut gone = http::Response::new(super::app::full(Bytes::new()));
                *gone.status_mut() = http::StatusCode::NO_CONTENT;
                gone
            }
            _ => reply,
        }
    }
}
