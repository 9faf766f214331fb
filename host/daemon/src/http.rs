//! The HTTP layer: routes, headers, authentication before the body is read, body
//! limits, and writing answers. It parses and bounds; [`crate::service`] decides.
//!
//! Answers written before a procedure's handler runs carry the
//! `Plimsoll-Not-Dispatched` header with their reason (404 `unsupported`, anything
//! else `request`, authentication `permission`). Every answer echoes the caller's
//! `Plimsoll-Request-Id` when exactly one well-formed value was sent.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use plimsoll_core::Reason;
use plimsoll_core::limits::MAX_REQUEST_BYTES;
use plimsoll_core::protocol::{NOT_DISPATCHED_HEADER, REQUEST_ID_HEADER, request_id_ok};
use plimsoll_core::wire::connect::Code;
use plimsoll_serve::RequestBody;

use crate::service::{Daemon, Procedure, RpcError};

/// How long a request body may take to arrive.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// The response type every handler returns.
pub type Answer = Response<Full<Bytes>>;

fn plain(status: StatusCode, text: &'static str) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

fn json(status: StatusCode, body: Vec<u8>) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error(e: &RpcError) -> Answer {
    let status = StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(status, serde_json::to_vec(&e.body).unwrap_or_else(|_| br#"{"code":"internal"}"#.to_vec()))
}

/// An answer written before the handler: marked in the header too, and the
/// connection closed, since the request's body may not have been read.
fn before_handler(e: &RpcError) -> Answer {
    let mut r = error(e);
    mark(&mut r, e.reason().unwrap_or(Reason::Request));
    r.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

fn mark(r: &mut Answer, reason: Reason) {
    r.headers_mut().insert(NOT_DISPATCHED_HEADER, HeaderValue::from_static(reason.as_str()));
}

/// The request ID to echo: exactly one value, 32 lowercase hex characters.
fn request_id(req: &Request<RequestBody>) -> Option<HeaderValue> {
    let mut values = req.headers().get_all(REQUEST_ID_HEADER).iter();
    let (Some(v), None) = (values.next(), values.next()) else {
        return None;
    };
    v.to_str().ok().filter(|s| request_id_ok(s)).map(|_| v.clone())
}

/// Answers one HTTP request.
pub async fn serve(daemon: Arc<Daemon>, req: Request<RequestBody>) -> Answer {
    let id = request_id(&req);
    let mut answer = route(&daemon, req).await;
    if let Some(id) = id {
        answer.headers_mut().insert(REQUEST_ID_HEADER, id);
    }
    answer
}

async fn route(daemon: &Arc<Daemon>, req: Request<RequestBody>) -> Answer {
    let path = req.uri().path().to_string();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz") => return plain(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readyz") => {
            let d = Arc::clone(daemon);
            let ready = tokio::task::spawn_blocking(move || d.ready()).await.unwrap_or(false);
            return if ready {
                plain(StatusCode::OK, "ready\n")
            } else {
                plain(StatusCode::SERVICE_UNAVAILABLE, "not ready")
            };
        }
        _ => {}
    }
    let Some(procedure) = Procedure::from_path(&path) else {
        let mut r = plain(StatusCode::NOT_FOUND, "404 page not found\n");
        mark(&mut r, Reason::Unsupported);
        return r;
    };
    if req.method() != Method::POST {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "405 method not allowed: Connect unary calls are POST\n");
        r.headers_mut().insert(http::header::ALLOW, HeaderValue::from_static("POST"));
        mark(&mut r, Reason::Request);
        return r;
    }
    // Authentication first: before the body is read, and before an unauthenticated
    // caller learns anything about its request.
    let auth = req.headers().get(http::header::AUTHORIZATION).map(HeaderValue::as_bytes);
    let caller = match daemon.authorize(auth) {
        Ok(p) => p,
        Err(e) => return before_handler(&e),
    };
    if let Err(e) = check_headers(&req) {
        return before_handler(&e);
    }
    let body = match read_body(req).await {
        Ok(b) => b,
        Err(e) => return before_handler(&e),
    };
    match daemon.handle(procedure, &caller, &body).await {
        Ok(bytes) => json(StatusCode::OK, bytes),
        Err(e) => error(&e),
    }
}

fn too_large() -> RpcError {
    RpcError::refused(
        Code::ResourceExhausted,
        Reason::Request,
        format!("invalid request: the request body exceeds {MAX_REQUEST_BYTES} bytes (8 MiB)"),
    )
}

fn check_headers(req: &Request<RequestBody>) -> Result<(), RpcError> {
    let ctype = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media = ctype.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if media != "application/json" {
        return Err(RpcError::refused(
            Code::InvalidArgument,
            Reason::Request,
            format!(
                "invalid request: content type {ctype:?} is not supported; send application/json (Connect's JSON codec)"
            ),
        ));
    }
    if let Some(v) = req.headers().get("connect-protocol-version")
        && v.as_bytes() != b"1"
    {
        return Err(RpcError::refused(
            Code::InvalidArgument,
            Reason::Request,
            "invalid request: Connect-Protocol-Version must be 1",
        ));
    }
    if let Some(v) = req.headers().get(CONTENT_ENCODING)
        && !v.as_bytes().eq_ignore_ascii_case(b"identity")
    {
        return Err(RpcError::refused(
            Code::Unimplemented,
            Reason::Request,
            "invalid request: compressed request bodies are not supported; send identity",
        ));
    }
    let declared = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_REQUEST_BYTES as u64) {
        return Err(too_large());
    }
    Ok(())
}

async fn read_body(req: Request<RequestBody>) -> Result<Bytes, RpcError> {
    let limited = Limited::new(req.into_body(), MAX_REQUEST_BYTES);
    match tokio::time::timeout(BODY_TIMEOUT, limited.collect()).await {
        Err(_) => Err(RpcError::refused(
            Code::InvalidArgument,
            Reason::Request,
            format!("invalid request: the request body did not arrive within {} s", BODY_TIMEOUT.as_secs()),
        )),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err(RpcError::refused(
            Code::InvalidArgument,
            Reason::Request,
            format!("invalid request: the request body could not be read: {e}"),
        )),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}

/// Answers the metrics listener's requests.
pub async fn serve_metrics(daemon: Arc<Daemon>, req: Request<RequestBody>) -> Answer {
    if req.method() == Method::GET && req.uri().path() == "/metrics" {
        let mut r = plain(StatusCode::OK, "");
        *r.body_mut() =
            Full::new(Bytes::from(daemon.metrics().render(daemon.limiter().inflight(), &daemon.provider().figures())));
        r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
        return r;
    }
    plain(StatusCode::NOT_FOUND, "404 page not found\n")
}
