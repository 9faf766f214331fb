//! The broker's HTTP client: no proxy, no redirects, a size cap on every answer,
//! and its own runtime so a blocking caller (a wasm host call) and an async one (a
//! container's socket) share one connection pool.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client as Hyper;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;

/// An upstream's answer, within its size cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// Status.
    pub status: u16,
    /// The content type as sent (unsanitised).
    pub content_type: Option<String>,
    /// `Retry-After`, as sent.
    pub retry_after: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// Why no usable answer came back. Each is a 502 to the guest.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// No connection or no response.
    #[error("the upstream did not answer")]
    Unreachable,
    /// A 3xx, which is never followed.
    #[error("the upstream answered with a redirect ({0}), which is not followed")]
    Redirect(u16),
    /// The body went over the cap.
    #[error("the upstream's answer is over {0} bytes")]
    TooLarge(u32),
    /// Too slow.
    #[error("the upstream did not answer within {0} ms")]
    Timeout(u128),
}

/// The client.
pub struct Upstream {
    client: Hyper<Connector, Full<Bytes>>,
    rt: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").finish_non_exhaustive()
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which an async caller may not; let it wind down alone.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Upstream {
    /// A client trusting the system's roots.
    ///
    /// # Errors
    ///
    /// TLS or the runtime could not be set up.
    pub fn new() -> Result<Upstream, String> {
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
        connector.set_connect_timeout(Some(Duration::from_secs(10)));
        // A request's head and body may go out in two writes; Nagle would hold the second.
        connector.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("plimsoll-broker")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the broker's runtime: {e}"))?;
        Ok(Upstream { client: Hyper::builder(TokioExecutor::new()).build(https), rt: Some(rt) })
    }

    fn spawn(
        &self,
        req: http::Request<Full<Bytes>>,
        limit: u32,
        timeout: Duration,
    ) -> Option<tokio::task::JoinHandle<Result<Sent, UpstreamError>>> {
        let client = self.client.clone();
        let work = async move {
            let resp = client.request(req).await.map_err(|_| UpstreamError::Unreachable)?;
            let status = resp.status().as_u16();
            if resp.status().is_redirection() {
                return Err(UpstreamError::Redirect(status));
            }
            let header = |name| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
            let content_type = header(http::header::CONTENT_TYPE);
            let retry_after = header(http::header::RETRY_AFTER);
            let body = Limited::new(resp.into_body(), limit as usize)
                .collect()
                .await
                .map_err(|_| UpstreamError::TooLarge(limit))?
                .to_bytes()
                .to_vec();
            Ok(Sent { status, content_type, retry_after, body })
        };
        let rt = self.rt.as_ref()?;
        Some(rt.spawn(async move {
            tokio::time::timeout(timeout, work).await.unwrap_or(Err(UpstreamError::Timeout(timeout.as_millis())))
        }))
    }

    /// Runs `f` to its end from a thread that may block (never from async code):
    /// a wasm host call, a socket's blocking worker.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        match &self.rt {
            Some(rt) => rt.handle().block_on(f),
            None => unreachable!("the broker's runtime is taken only in drop"),
        }
    }

    /// Sends `req` from async code on any runtime.
    ///
    /// # Errors
    ///
    /// [`UpstreamError`].
    pub async fn send(
        &self,
        req: http::Request<Full<Bytes>>,
        limit: u32,
        timeout: Duration,
    ) -> Result<Sent, UpstreamError> {
        match self.spawn(req, limit, timeout) {
            Some(handle) => handle.await.unwrap_or(Err(UpstreamError::Unreachable)),
            None => Err(UpstreamError::Unreachable),
        }
    }
}
