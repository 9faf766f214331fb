//! Startup (in the original's order: configuration, callers, provider, preflight,
//! the startup floor, hardened rules, listeners), serving HTTP/1.1 and HTTP/2 (h2c
//! prior knowledge in cleartext, ALPN under TLS), and a draining shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use plimsoll_core::protocol;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::admission::Limiter;
use crate::auth::{ClientsFile, Verifier};
use crate::config::{AuthSource, Config};
use crate::grants::DaemonGrants;
use crate::http;
use crate::log::Log;
use crate::providers;
use crate::service::Daemon;

/// How long shutdown waits for runs in flight.
pub const DRAIN: Duration = Duration::from_secs(6 * 60);

/// Connections served at once (RPC and metrics each).
const MAX_CONNECTIONS: usize = 4096;

/// Why the daemon did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Configuration was refused.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The clients file was refused.
    #[error(transparent)]
    Clients(#[from] crate::auth::ClientsError),
    /// The provider could not be built.
    #[error(transparent)]
    Provider(#[from] providers::BuildError),
    /// The provider's preflight failed.
    #[error("sandbox preflight: {0}")]
    Preflight(String),
    /// The provider's evidence is below `SANDBOX_MIN_ISOLATION`.
    #[error("SANDBOX_MIN_ISOLATION={floor}: the {provider} provider proved {tier}, so the daemon refuses to start")]
    Floor {
        /// The configured floor.
        floor: String,
        /// The provider.
        provider: String,
        /// Its evidence.
        tier: String,
    },
    /// Hardened mode found violations.
    #[error("PLIMSOLL_HARDENED=1 refuses to start:\n  - {}", .0.join("\n  - "))]
    Hardened(Vec<String>),
    /// TLS material could not be loaded.
    #[error("TLS: {0}")]
    Tls(#[from] plimsoll_serve::tls::TlsError),
    /// The grant profiles were refused, or no grant can travel to the provider.
    #[error("PLIMSOLL_GRANTS_FILE: {0}")]
    Grants(String),
    /// A listener could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
}

fn listen_addr(addr: &str) -> String {
    // Go's ":8746" means every interface.
    if let Some(port) = addr.strip_prefix(':') { format!("0.0.0.0:{port}") } else { addr.to_string() }
}

/// A started daemon: listeners bound, ready to serve.
pub struct Server {
    daemon: Arc<Daemon>,
    rpc: TcpListener,
    metrics: Option<TcpListener>,
    tls: Option<TlsAcceptor>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("daemon", &self.daemon).field("tls", &self.tls.is_some()).finish()
    }
}

impl Server {
    /// Checks the configuration, builds and proves the provider, and binds.
    ///
    /// # Errors
    ///
    /// [`StartError`] naming what is wrong; nothing is served.
    pub async fn start(config: Config, log: Log) -> Result<Server, StartError> {
        config.check_auth()?;
        let verifier = match &config.auth {
            AuthSource::ClientsFile(p) => Verifier::clients(&ClientsFile::read(p)?),
            AuthSource::SharedToken(t) => Verifier::shared(t),
            AuthSource::Open => Verifier::Open,
        };
        if verifier.is_open() && config.insecure {
            log.warn("PLIMSOLL_INSECURE=1: the daemon runs code for anyone who can reach it", &[]);
        }
        // Building and preflight block (a plugin drives its engine synchronously), so
        // both run off the async workers.
        let providers::Built { provider, guard, .. } = {
            let config = config.clone();
            tokio::task::spawn_blocking(move || {
                let built = providers::build(&config, log)?;
                built.provider.preflight().map_err(|r| StartError::Preflight(r.message))?;
                Ok::<_, StartError>(built)
            })
            .await
            .map_err(|e| StartError::Preflight(e.to_string()))??
        };
        let tier = provider.tier();
        let name = provider.describe().name;
        if let Some(floor) = config.min_isolation
            && !tier.meets(floor)
        {
            return Err(StartError::Floor { floor: floor.to_string(), provider: name, tier: tier.to_string() });
        }
        if config.hardened {
            let v = config.hardened_violations(tier);
            if !v.is_empty() {
                return Err(StartError::Hardened(v));
            }
        }
        let tls = match &config.tls {
            Some((c, k)) => Some(plimsoll_serve::tls::acceptor(c, k)?),
            None => None,
        };
        if let (Some(guard), Some(g)) = (guard, config.remote().and_then(|r| r.guard.as_ref())) {
            let listener = TcpListener::bind(g.addr)
                .await
                .map_err(|source| StartError::Bind { addr: g.addr.to_string(), source })?;
            log.info("the guard listens", &[("addr", json!(g.addr.to_string())), ("url", json!(g.url))]);
            tokio::spawn(guard.serve(listener));
        }
        let rpc_addr = listen_addr(&config.addr);
        let rpc = TcpListener::bind(&rpc_addr).await.map_err(|source| StartError::Bind { addr: rpc_addr, source })?;
        let metrics = match &config.metrics_addr {
            Some(a) => {
                let addr = listen_addr(a);
                if !crate::config::is_loopback(a) {
                    log.warn("the metrics listener is not on loopback", &[("addr", json!(a))]);
                }
                Some(TcpListener::bind(&addr).await.map_err(|source| StartError::Bind { addr, source })?)
            }
            None => None,
        };
        let grants = match &config.grants_file {
            None => None,
            Some(path) => {
                let plugins = crate::grants::load_plugins(&config.broker_plugins, log).map_err(StartError::Grants)?;
                for name in plugins.keys() {
                    log.info("broker plugin loaded", &[("plugin", json!(name))]);
                }
                let grants =
                    DaemonGrants::load(path, &|name| plugins.get(name).cloned()).map_err(StartError::Grants)?;
                let support = provider.grant_support();
                if !grants.profiles().is_empty() && !support.snippets && !support.projects {
                    // A plugin whose manifest declares a guard reaches the broker through it, once it has one.
                    let hint = match config.remote().and_then(|r| r.guard_variable.as_deref()) {
                        Some(var) => format!(" until it has the host's guard ({var}, PLIMSOLL_GUARD_ADDR)"),
                        None => String::new(),
                    };
                    return Err(StartError::Grants(format!(
                        "profiles are configured but the {name} provider has no credential-safe way to carry a grant{hint}; \
                         unset PLIMSOLL_GRANTS_FILE or use the wasm provider"
                    )));
                }
                for p in grants.profiles().iter().filter(|p| p.callers == plimsoll_grants::profile::Callers::Any) {
                    log.warn(
                        "a grant profile admits every authenticated caller (allowed_callers \"*\")",
                        &[("grant_profile", json!(p.name))],
                    );
                }
                Some(Arc::new(grants))
            }
        };
        let limiter = Limiter::new(config.admission.clone());
        let mut daemon = Daemon::new(provider, verifier, limiter, Arc::default(), log);
        if let Some(g) = grants {
            daemon = daemon.with_grants(g);
        }
        let daemon = Arc::new(daemon.with_sessions(config.sessions));
        if config.sessions.max > 0 && daemon.sessions().is_none() {
            log.warn(
                "SANDBOX_MAX_SESSIONS is set but the provider keeps no sessions; session calls are refused",
                &[("provider", json!(name))],
            );
        }
        let local = rpc.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let metrics_local = metrics.as_ref().and_then(|m| m.local_addr().ok()).map(|a| a.to_string());
        log.info(
            "listening",
            &[
                ("addr", json!(local)),
                ("metrics_addr", json!(metrics_local)),
                ("tls", json!(tls.is_some())),
                ("provider", json!(name)),
                ("isolation", json!(tier.to_string())),
                ("protocol", json!(protocol::NUMBER)),
                ("auth", json!(config.auth_kind())),
            ],
        );
        Ok(Server { daemon, rpc, metrics, tls })
    }

    /// The RPC listener's address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.rpc.local_addr().ok()
    }

    /// Serves until `shutdown` resolves, then stops accepting and waits up to
    /// [`DRAIN`] for requests in flight.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let graceful = GracefulShutdown::new();
        let log = *self.daemon.log();
        let mut builder = Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new()).header_read_timeout(Duration::from_secs(5)).max_buf_size(64 << 10);
        builder.http2().max_header_list_size(32 << 10).timer(TokioTimer::new());
        let builder = Arc::new(builder);
        let conns = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        if let Some(metrics) = self.metrics {
            let daemon = Arc::clone(&self.daemon);
            let builder = Arc::clone(&builder);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = metrics.accept().await else { continue };
                    let daemon = Arc::clone(&daemon);
                    let builder = Arc::clone(&builder);
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| {
                            let d = Arc::clone(&daemon);
                            async move {
                                Ok::<_, std::convert::Infallible>(
                                    plimsoll_serve::answer(req, |req| http::serve_metrics(d, req)).await,
                                )
                            }
                        });
                        let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                    });
                }
            });
        }
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                () = &mut shutdown => break,
                a = self.rpc.accept() => a,
            };
            let Ok((stream, _peer)) = accepted else { continue };
            let Ok(permit) = Arc::clone(&conns).try_acquire_owned() else {
                // Over the connection cap: close at once rather than queue.
                drop(stream);
                continue;
            };
            let _ = stream.set_nodelay(true);
            let daemon = Arc::clone(&self.daemon);
            let svc = service_fn(move |req| {
                let d = Arc::clone(&daemon);
                async move {
                    Ok::<_, std::convert::Infallible>(plimsoll_serve::answer(req, |req| http::serve(d, req)).await)
                }
            });
            let builder = Arc::clone(&builder);
            match &self.tls {
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), svc).into_owned();
                    let conn = graceful.watch(conn);
                    tokio::spawn(async move {
                        let _ = conn.await;
                        drop(permit);
                    });
                }
                Some(acceptor) => {
                    let acceptor = acceptor.clone();
                    let watcher = graceful.watcher();
                    tokio::spawn(async move {
                        let Ok(Ok(tls)) = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await
                        else {
                            return;
                        };
                        let conn = builder.serve_connection(TokioIo::new(tls), svc).into_owned();
                        let _ = watcher.watch(conn).await;
                        drop(permit);
                    });
                }
            }
        }
        drop(self.rpc);
        log.info(
            "shutting down: draining requests in flight",
            &[("inflight", json!(self.daemon.limiter().inflight()))],
        );
        if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
            log.warn("shutdown: requests still in flight after the drain period", &[]);
        }
        if let Some(sessions) = self.daemon.sessions() {
            log.info("shutdown: ending sessions", &[("sessions", json!(sessions.live()))]);
            if tokio::time::timeout(DRAIN, sessions.shutdown()).await.is_err() {
                log.warn("shutdown: sessions still ending after the drain period", &[]);
            }
        }
        // What the provider left off the result path (a remote backend's deletes).
        let provider = std::sync::Arc::clone(self.daemon.provider());
        let drained = tokio::task::spawn_blocking(move || provider.drain());
        if tokio::time::timeout(DRAIN, drained).await.is_err() {
            log.warn("shutdown: the provider's deletes still under way after the drain period", &[]);
        }
        log.info("stopped", &[]);
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
