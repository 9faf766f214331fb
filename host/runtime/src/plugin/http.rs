//! The host's side of `plimsoll:host/http`: outbound HTTP for plugins, only to the
//! endpoints their manifest names and the operator mapped to a URL. The host adds
//! the operator's headers (a credential the plugin never holds), refuses redirects,
//! and caps request and response sizes and time.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The largest request body a plugin may send.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
/// The largest response body a plugin may receive.
pub const MAX_RESPONSE_BYTES: usize = 4 << 20;
/// The longest one request may take.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);
/// Headers only the host sets.
const HOST_HEADERS: [&str; 8] = [
    "authorization",
    "host",
    "cookie",
    "proxy-authorization",
    "content-length",
    "transfer-encoding",
    "connection",
    "te",
];

/// Where an alias points, and what the host adds to every request there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The base URL (`http` or `https`); a request's path is appended.
    pub base: String,
    /// Headers the host adds (the operator's credential); never shown to the plugin.
    pub headers: Vec<(String, String)>,
}

/// What a plugin asked for.
#[derive(Clone, Debug)]
pub struct Ask {
    /// The endpoint's alias.
    pub endpoint: String,
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE` or `HEAD`.
    pub method: String,
    /// Absolute path, with a query if any.
    pub path: String,
    /// The plugin's own headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// Its budget, at most [`MAX_TIMEOUT`].
    pub timeout: Duration,
}

/// The upstream's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// The body, within [`MAX_RESPONSE_BYTES`].
    pub body: Vec<u8>,
}

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// The gate every plugin request passes.
pub struct HttpGate {
    endpoints: BTreeMap<String, Endpoint>,
    client: Hyper<Connector, Full<Bytes>>,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for HttpGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpGate")
            .field("endpoints", &self.endpoints.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl HttpGate {
    /// A gate over `endpoints` (alias to URL and headers).
    ///
    /// # Errors
    ///
    /// An endpoint's URL is not an absolute http or https URL, or TLS could not be set up.
    pub fn new(endpoints: BTreeMap<String, Endpoint>) -> Result<HttpGate, String> {
        for (alias, e) in &endpoints {
            let uri: http::Uri =
                e.base.parse().map_err(|err| format!("endpoint {alias}: {:?} is not a URL: {err}", e.base))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() || uri.query().is_some() {
                return Err(format!(
                    "endpoint {alias}: {:?} must be an absolute http or https URL without a query",
                    e.base
                ));
            }
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut connector = HttpConnector::new();
        connector.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("plimsoll-plugin-http")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the plugin HTTP runtime: {e}"))?;
        Ok(HttpGate { endpoints, client: Hyper::builder(TokioExecutor::new()).build(https), rt })
    }

    /// Sends `ask` for a plugin whose manifest names `allowed` endpoints.
    ///
    /// # Errors
    ///
    /// Plimsoll's words for why no response came back: a refusal (nothing sent), or
    /// the upstream unreachable, too slow, redirecting or over a cap.
    pub fn send(&self, allowed: &[String], ask: Ask) -> Result<Answer, String> {
        let alias = &ask.endpoint;
        if !allowed.contains(alias) {
            return Err(format!("endpoint {alias:?} is not named in the plugin's manifest; no request was sent"));
        }
        let Some(endpoint) = self.endpoints.get(alias) else {
            return Err(format!("endpoint {alias:?} is not configured by the operator; no request was sent"));
        };
        if !ask.path.starts_with('/') || ask.path.starts_with("//") || ask.path.chars().any(char::is_control) {
            return Err(format!("path {:?} must be absolute; no request was sent", ask.path));
        }
        if !matches!(ask.method.as_str(), "GET" | "POST" | "PUT" | "PATCH" | "DELETE" | "HEAD") {
            return Err(format!("method {:?} is not allowed; no request was sent", ask.method));
        }
        if ask.body.len() > MAX_REQUEST_BYTES {
            return Err(format!("a body of {} bytes is over {MAX_REQUEST_BYTES}; no request was sent", ask.body.len()));
        }
        let mut req = http::Request::builder().method(ask.method.as_str()).uri(format!(
            "{}{}",
            endpoint.base.trim_end_matches('/'),
            ask.path
        ));
        for (k, v) in &ask.headers {
            if HOST_HEADERS.contains(&k.to_ascii_lowercase().as_str()) {
                return Err(format!("header {k:?} is the host's to set; no request was sent"));
            }
            req = req.header(k.as_str(), v.as_str());
        }
        for (k, v) in &endpoint.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req
            .body(Full::new(Bytes::from(ask.body)))
            .map_err(|e| format!("a malformed request ({e}); no request was sent"))?;
        let timeout = ask.timeout.min(MAX_TIMEOUT);
        let client = self.client.clone();
        let work = async move {
            let resp = client.request(req).await.map_err(|e| format!("endpoint {alias:?} did not answer: {e}"))?;
            let status = resp.status().as_u16();
            if resp.status().is_redirection() {
                return Err(format!("endpoint {alias:?} answered with a redirect ({status}), which is not followed"));
            }
            let headers = resp
                .headers()
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                .collect();
            let body = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| {
                    format!(
                        "endpoint {alias:?}: the response body is over {MAX_RESPONSE_BYTES} bytes or broke off ({e})"
                    )
                })?
                .to_bytes()
                .to_vec();
            Ok(Answer { status, headers, body })
        };
        self.rt.block_on(async move {
            tokio::time::timeout(timeout, work)
                .await
                .unwrap_or_else(|_| Err(format!("endpoint {alias:?} did not answer within {} ms", timeout.as_millis())))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;

    /// A one-route server answering every request with `response`; returns its URL.
    fn server(response: &'static str) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(response.as_bytes());
            }
        });
        url
    }

    fn gate(base: &str) -> HttpGate {
        let endpoint = Endpoint { base: base.into(), headers: vec![("authorization".into(), "Bearer s3cret".into())] };
        HttpGate::new([("kms".to_string(), endpoint)].into()).expect("gate")
    }

    fn ask(path: &str) -> Ask {
        Ask {
            endpoint: "kms".into(),
            method: "GET".into(),
            path: path.into(),
            headers: vec![],
            body: vec![],
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn a_request_to_a_named_and_configured_endpoint_is_answered() {
        let g = gate(&server("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"));
        let a = g.send(&["kms".into()], ask("/v1/key")).expect("answered");
        assert_eq!((a.status, a.body), (200, b"ok".to_vec()));
    }

    #[test]
    fn every_refusal_names_why_and_sends_nothing() {
        let g = gate("http://127.0.0.1:9");
        let allowed = ["kms".to_string()];
        let cases = [
            (
                Ask { endpoint: "other".into(), ..ask("/") },
                &allowed[..],
                "endpoint \"other\" is not named in the plugin's manifest; no request was sent",
            ),
            (ask("/"), &[][..], "endpoint \"kms\" is not named in the plugin's manifest; no request was sent"),
            (ask("relative"), &allowed[..], "path \"relative\" must be absolute; no request was sent"),
            (ask("//evil.example/x"), &allowed[..], "path \"//evil.example/x\" must be absolute; no request was sent"),
            (
                Ask { method: "CONNECT".into(), ..ask("/") },
                &allowed[..],
                "method \"CONNECT\" is not allowed; no request was sent",
            ),
            (
                Ask { headers: vec![("Authorization".into(), "Bearer mine".into())], ..ask("/") },
                &allowed[..],
                "header \"Authorization\" is the host's to set; no request was sent",
            ),
            (
                Ask { body: vec![0; MAX_REQUEST_BYTES + 1], ..ask("/") },
                &allowed[..],
                "a body of 1048577 bytes is over 1048576; no request was sent",
            ),
        ];
        for (a, allowed, expected) in cases {
            assert_eq!(g.send(allowed, a).expect_err("refused"), expected);
        }
        let unconfigured = HttpGate::new(BTreeMap::new()).expect("gate");
        assert_eq!(
            unconfigured.send(&allowed, ask("/")).expect_err("refused"),
            "endpoint \"kms\" is not configured by the operator; no request was sent"
        );
    }

    #[test]
    fn a_redirect_is_not_followed_and_bad_urls_are_refused() {
        let g = gate(&server(
            "HTTP/1.1 302 Found\r\nLocation: http://10.0.0.1/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        ));
        assert_eq!(
            g.send(&["kms".into()], ask("/")).expect_err("redirect"),
            "endpoint \"kms\" answered with a redirect (302), which is not followed"
        );
        // A wrong scheme, no scheme at all (it parses as a bare authority), and a query
        // (the plugin's path is appended, so a query in the base would end up mid-path).
        for base in ["ftp://127.0.0.1/", "127.0.0.1:80", "http://127.0.0.1/?q=1"] {
            let e = HttpGate::new([("x".to_string(), Endpoint { base: base.into(), headers: vec![] })].into())
                .expect_err(base);
            assert_eq!(e, format!("endpoint x: {base:?} must be an absolute http or https URL without a query"));
        }
        let e = HttpGate::new([("x".to_string(), Endpoint { base: "http://a b/".into(), headers: vec![] })].into())
            .expect_err("not a URL");
        assert_eq!(e, "endpoint x: \"http://a b/\" is not a URL: invalid uri character");
    }
}
