//! The HTTPS server every fake shares: TLS, HTTP/1.1 and HTTP/2, one handler.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::pki::Pki;

/// A response body: whole, or streamed from a channel.
pub type Body = BoxBody<Bytes, std::io::Error>;

/// A request as a handler sees it: head and whole body, or, on a path the
/// handler streams ([`Handler::streams`]), the body as it arrives.
pub struct Request {
    pub method: String,
    /// The host the client asked for (`:authority` or `Host`), without its port.
    pub host: String,
    pub path: String,
    pub query: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    /// A streamed body's pieces; the channel closes when the client ends its
    /// side (or the stream breaks).
    pub stream: Option<tokio::sync::mpsc::Receiver<Bytes>>,
    /// An HTTP/1.1 request asking to upgrade: its connection once a 101 is sent.
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
}

impl Request {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A query parameter, percent-decoded.
    pub fn param(&self, name: &str) -> Option<String> {
        self.query.split('&').filter_map(|kv| kv.split_once('=')).find(|(k, _)| *k == name).map(|(_, v)| decode(v))
    }
}

/// Percent-decodes a query value (`+` as a space).
pub fn decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&v[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A vendor's fake.
pub trait Handler: Send + Sync + 'static {
    /// The daemon's settings to use this fake listening on `port`.
    fn settings(&self, port: u16, pki: &Pki) -> Vec<(String, String)>;
    /// Answers one request.
    fn handle(self: Arc<Self>, req: Request) -> std::pin::Pin<Box<dyn Future<Output = http::Response<Body>> + Send>>;
    /// Whether requests to `path` are handed over as their body arrives (a
    /// client-streaming call) rather than whole.
    fn streams(&self, _path: &str) -> bool {
        false
    }
}

/// A whole response.
pub fn whole(status: u16, content_type: &str, body: impl Into<Bytes>) -> http::Response<Body> {
    let mut r = http::Response::new(Full::new(body.into()).map_err(|never: Infallible| match never {}).boxed());
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    if !content_type.is_empty()
        && let Ok(v) = http::HeaderValue::from_str(content_type)
    {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    r
}

/// A 307 to `location`, with no body: every fake's `redirect` mode.
pub fn redirect(location: &'static str) -> http::Response<Body> {
    let mut r = whole(307, "", Bytes::new());
    r.headers_mut().insert(http::header::LOCATION, http::HeaderValue::from_static(location));
    r
}

/// A JSON response.
pub fn json(status: u16, v: &serde_json::Value) -> http::Response<Body> {
    whole(status, "application/json", v.to_string())
}

/// A streamed response and the sender that feeds it.
pub fn streamed(content_type: &str) -> (http::Response<Body>, tokio::sync::mpsc::Sender<Bytes>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let stream = futures_util::stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|b| b.map(|b| Ok::<_, std::io::Error>(Frame::data(b))))
    });
    let mut r = http::Response::new(StreamBody::new(stream).boxed());
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    (r, tx)
}

/// A streamed response fed frame by frame, data or trailers (gRPC ends a call
/// with a trailers frame). The body ends when the sender is dropped, and the
/// sender's `closed()` resolves once the client has gone (the body dropped).
pub fn framed(content_type: &str) -> (http::Response<Body>, tokio::sync::mpsc::Sender<Frame<Bytes>>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Frame<Bytes>>(16);
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|f| f.map(Ok::<_, std::io::Error>)));
    let mut r = http::Response::new(StreamBody::new(stream).boxed());
    if let Ok(v) = http::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    (r, tx)
}

/// Serves `listener` over TLS with `handler` until the listener fails.
pub async fn serve(listener: tokio::net::TcpListener, tls: Arc<rustls::ServerConfig>, handler: Arc<dyn Handler>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        // As the vendors' servers do (Go's and tonic's set it by default).
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let handler = Arc::clone(&handler);
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else { return };
            let service = hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
                let handler = Arc::clone(&handler);
                async move {
                    let upgrade =
                        req.headers().contains_key(http::header::UPGRADE).then(|| hyper::upgrade::on(&mut req));
                    let (parts, mut body) = req.into_parts();
                    let (body, stream) = if handler.streams(parts.uri.path()) {
                        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
                        tokio::spawn(async move {
                            while let Some(Ok(frame)) = body.frame().await {
                                if let Ok(data) = frame.into_data()
                                    && tx.send(data).await.is_err()
                                {
                                    return;
                                }
                            }
                        });
                        (Bytes::new(), Some(rx))
                    } else {
                        (body.collect().await.map(|b| b.to_bytes()).unwrap_or_default(), None)
                    };
                    let authority = parts
                        .uri
                        .authority()
                        .map(|a| a.host().to_string())
                        .or_else(|| {
                            parts
                                .headers
                                .get(http::header::HOST)
                                .and_then(|h| h.to_str().ok())
                                .map(|h| h.rsplit_once(':').map_or(h, |(n, _)| n).to_string())
                        })
                        .unwrap_or_default();
                    let request = Request {
                        method: parts.method.as_str().to_string(),
                        host: authority,
                        path: parts.uri.path().to_string(),
                        query: parts.uri.query().unwrap_or_default().to_string(),
                        headers: parts.headers,
                        body,
                        stream,
                        upgrade,
                    };
                    Ok::<_, Infallible>(handler.handle(request).await)
                }
            });
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await;
        });
    }
}
