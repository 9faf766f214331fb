//! What the HTTPS mode checks before it serves (the listener, TLS, the public
//! URL, the daemon's tier, receipts), and the accept loop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use plimsoll_core::Floor;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::App;
use crate::config::Config;
use crate::tools::Tools;

/// Connections served at once; more are closed on accept.
const MAX_CONNECTIONS: usize = 256;
/// Connections one remote address may hold at once (not behind a proxy, where
/// every connection is the proxy's, nor from this machine).
const MAX_PER_ADDRESS: usize = 32;
/// Requests one HTTP/2 connection may have open at once.
const MAX_STREAMS: u32 = 32;

/// Counts each client's connections (an IPv6 client by its /64, as
/// [`crate::rate::client`] keys it); a connection gives its slot back when dropped.
#[derive(Clone, Default)]
struct Connections(Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>);

struct Slot(Connections, std::net::IpAddr);

impl Connections {
    fn take(&self, ip: std::net::IpAddr) -> Option<Slot> {
        let ip = crate::rate::client(ip);
        let mut m = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = m.entry(ip).or_insert(0);
        if *n >= MAX_PER_ADDRESS {
            return None;
        }
        *n += 1;
        Some(Slot(self.clone(), ip))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = (self.0).0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = m.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.1);
            }
        }
    }
}

/// How `serve-http` listens and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The address to bind (`--listen`; loopback unless the operator says otherwise).
    pub listen: SocketAddr,
    /// The certificate chain and key, PEM (`--tls-cert`, `--tls-key`): TLS served here.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Plain HTTP on loopback for a TLS reverse proxy (`--behind-proxy`).
    pub behind_proxy: bool,
    /// `https://HOST[:PORT]` as browsers and clients reach the server
    /// (`--public-url`); `https://localhost:PORT` by default on loopback.
    pub public_url: Option<String>,
    /// Where the owner's passkeys are kept (`--state-dir`).
    pub state_dir: PathBuf,
}

/// Why the HTTPS mode would not start; each says what to change.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// Neither TLS nor a proxy: the cookie and the passkeys need HTTPS.
    #[error("serve-http needs TLS: give --tls-cert and --tls-key, or --behind-proxy with a TLS reverse proxy in front")]
    NoTls,
    /// `--tls-cert` without `--tls-key`, or the reverse.
    #[error("--tls-cert and --tls-key go together")]
    HalfTls,
    /// TLS and a proxy both named.
    #[error("--behind-proxy serves plain HTTP to the proxy; drop --tls-cert and --tls-key, or --behind-proxy")]
    TlsAndProxy,
    /// Plain HTTP on a non-loopback address.
    #[error("--behind-proxy serves plain HTTP, so it binds loopback only; {0} is not (put the proxy on this machine)")]
    ProxyNotLoopback(SocketAddr),
    /// A non-loopback address with no public URL to check requests against.
    #[error("--listen {0} is not loopback: give --public-url https://NAME[:PORT], the name clients and browsers use")]
    NoPublicUrl(SocketAddr),
    /// The public URL is not one a passkey can be bound to.
    #[error("--public-url: {0}")]
    PublicUrl(String),
    /// Receipts not configured.
    #[error(
        "serve-http signs every call: set PLIMSOLL_SIGNING_KEY_FILE and PLIMSOLL_RECEIPTS_DIR (plimsoll-host attest keygen makes a key)"
    )]
    NoReceipts,
    /// A floor below kernel.
    #[error("PLIMSOLL_MIN_ISOLATION={0}: serve-http runs code for remote connections, so its floor is kernel or vm")]
    WeakFloor(Floor),
    /// The daemon's own tier is below kernel.
    #[error(
        "the daemon at {url} runs at the {tier} tier: serve-http needs a daemon at kernel or vm (gVisor, a Kata VM, a microVM provider)"
    )]
    WeakDaemon { url: String, tier: String },
    /// The daemon could not be asked.
    #[error("asking the daemon at {url} for its tier: {why}")]
    Daemon { url: String, why: String },
    /// The certificate or key.
    #[error("TLS: {0}")]
    Tls(String),
    /// The state directory or the passkey store.
    #[error("{0}")]
    State(String),
    /// Binding the address.
    #[error("binding {addr}: {why}")]
    Bind { addr: SocketAddr, why: String },
    /// The client to the daemon.
    #[error("{0}")]
    Client(String),
}

impl Options {
    /// The public URL these options serve at, after checking they hang together.
    ///
    /// # Errors
    ///
    /// The [`StartError`] naming what to change.
    pub fn public(&self) -> Result<String, StartError> {
        match (&self.tls, self.behind_proxy) {
            (None, false) => return Err(StartError::NoTls),
            (Some(_), true) => return Err(StartError::TlsAndProxy),
            (None, true) if !self.listen.ip().is_loopback() => {
                return Err(StartError::ProxyNotLoopback(self.listen));
            }
            _ => {}
        }
        if let Some((cert, key)) = &self.tls
            && (cert.as_os_str().is_empty() || key.as_os_str().is_empty())
        {
            return Err(StartError::HalfTls);
        }
        let public = match &self.public_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None if self.listen.ip().is_loopback() => format!("https://localhost:{}", self.listen.port()),
            None => return Err(StartError::NoPublicUrl(self.listen)),
        };
        crate::oauth::Urls::new(&public).map_err(StartError::PublicUrl)?;
        Ok(public)
    }
}

/// Checks what the original checked before serving remote connections: a
/// floor and a daemon at kernel or vm, and receipts.
async fn preflight(config: &Config, tools: &Tools) -> Result<(), StartError> {
    if config.receipts.is_none() {
        return Err(StartError::NoReceipts);
    }
    if config.floor < Floor::Kernel {
        return Err(StartError::WeakFloor(config.floor));
    }
    let described = tools.describe().await.map_err(|why| StartError::Daemon { url: config.url.clone(), why })?;
    if !matches!(described.as_str(), "kernel" | "vm") {
        return Err(StartError::WeakDaemon { url: config.url.clone(), tier: described });
    }
    Ok(())
}

/// Serves the HTTPS mode until the process is stopped.
///
/// # Errors
///
/// A [`StartError`]; once serving, nothing ends it but a signal.
pub async fn serve_http(config: Config, opts: Options) -> Result<(), StartError> {
    let public = opts.public()?;
    let acceptor = match &opts.tls {
        Some((cert, key)) => {
            Some(plimsoll_serve::tls::acceptor(cert, key).map_err(|e| StartError::Tls(e.to_string()))?)
        }
        None => None,
    };
    let tools = Tools::new(config.clone()).map_err(StartError::Client)?;
    preflight(&config, &tools).await?;
    let app = App::new(&public, opts.behind_proxy, tools, &opts.state_dir)?;
    let listener =
        TcpListener::bind(opts.listen).await.map_err(|e| StartError::Bind { addr: opts.listen, why: e.to_string() })?;
    let bound = listener.local_addr().map_err(|e| StartError::Bind { addr: opts.listen, why: e.to_string() })?;
    app.announce(bound);
    let app = Arc::new(app);
    // One protocol per connection, chosen by ALPN (HTTP/1.1 to a proxy):
    // no version sniffing, which waits on a silent peer with no deadline.
    let mut h1 = Builder::new(TokioExecutor::new()).http1_only();
    h1.http1().timer(TokioTimer::new()).header_read_timeout(Duration::from_secs(10)).max_buf_size(64 << 10);
    let mut h2 = Builder::new(TokioExecutor::new()).http2_only();
    h2.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(32 << 10)
        .max_concurrent_streams(MAX_STREAMS)
        .max_pending_accept_reset_streams(Some(32))
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    let (h1, h2) = (Arc::new(h1), Arc::new(h2));
    let conns = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let per_address = Connections::default();
    loop {
        let Ok((stream, peer)) = listener.accept().await else { continue };
        let Ok(permit) = Arc::clone(&conns).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        // A loopback peer is this machine (a local proxy, local clients), which
        // holds idle keep-alive connections for each of its clients. `::1`, or
        // 127.0.0.1 as a dual-stack socket writes it (`::ffff:127.0.0.1`).
        let ip = peer.ip();
        let exempt = opts.behind_proxy || ip.is_loopback() || crate::rate::client(ip).is_loopback();
        let slot = if exempt { None } else { Some(per_address.take(ip)) };
        if matches!(slot, Some(None)) {
            drop(stream);
            continue;
        }
        let _ = stream.set_nodelay(true);
        let app = Arc::clone(&app);
        let svc = service_fn(move |req| {
            let app = Arc::clone(&app);
            async move { Ok::<_, std::convert::Infallible>(plimsoll_serve::answer(req, |req| app.handle(req, peer)).await) }
        });
        let (h1, h2) = (Arc::clone(&h1), Arc::clone(&h2));
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            match acceptor {
                None => {
                    let _ = h1.serve_connection(TokioIo::new(stream), svc).await;
                }
                Some(acceptor) => {
                    let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let builder = if tls.get_ref().1.alpn_protocol() == Some(b"h2") { h2 } else { h1 };
                    let _ = builder.serve_connection(TokioIo::new(tls), svc).await;
                }
            }
            drop((permit, slot));
        });
    }
}
