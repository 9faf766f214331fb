//! A sandbox's way out, as a vendor's egress proxy gives it (E2B's network
//! rules): the container itself has no network. Each name its rules allow
//! resolves, inside it, to its own loopback, where a forwarder (this binary, run
//! as root in the container: `plimsoll-fake forward`) hands every connection to
//! the fake over a Unix socket mounted into the container. The fake reads the
//! name the guest asked for (TLS SNI), refuses one the rules do not allow, and
//! terminates TLS with a certificate its CA issues for that name: the sandbox's
//! trust store holds that CA, as a vendor installs its intercepting proxy's. It
//! then adds each header the rules transform onto requests to that name, and
//! forwards the request to where `--route NAME=ADDR` says that name is, in plain
//! HTTP on loopback, standing in for the internet. A name with no route answers
//! 502. Every routed name resolves in a sandbox with a way out, as the internet's
//! names do; the rules, which a vendor may change while the sandbox runs, decide
//! which of them pass.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;

use crate::pki::Pki;

/// Where the socket's directory is mounted in the container.
pub const MOUNT: &str = "/run/plimsoll-egress";
/// Where this binary is mounted in the container, for the forwarder.
pub const BINARY: &str = "/run/plimsoll-egress-bin/plimsoll-fake";
/// The socket's name in its directory.
pub const SOCKET: &str = "egress.sock";
/// Where the forwarder listens in the container: HTTPS's port on loopback.
pub const FORWARD_FROM: &str = "127.0.0.1:443";
/// The most bytes of one request or answer passed through.
const MAX_BODY: usize = 8 << 20;

/// What a sandbox's network rules let out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// The names it may reach (`*.example.com` for any name under one).
    pub allow: Vec<String>,
    /// Headers set on every request to a name, by name.
    pub headers: BTreeMap<String, Vec<(String, String)>>,
}

impl Rules {
    /// Whether `name` may be reached.
    pub fn allows(&self, name: &str) -> bool {
        self.allow.iter().any(|a| match a.strip_prefix("*.") {
            Some(suffix) => name.strip_suffix(suffix).is_some_and(|head| head.ends_with('.') && head.len() > 1),
            None => a == name,
        })
    }

    /// The names that resolve in the sandbox: the allowed ones without a wildcard.
    pub fn names(&self) -> Vec<String> {
        self.allow.iter().filter(|a| !a.contains('*')).cloned().collect()
    }
}

/// Where each name of the "internet" is: `--route NAME=ADDR`.
#[derive(Debug, Clone, Default)]
pub struct Routes(pub HashMap<String, SocketAddr>);

impl Routes {
    /// Parses one `NAME=ADDR` (a loopback address only: a fake reaches nothing else).
    ///
    /// # Errors
    ///
    /// Why the flag's value is not a route.
    pub fn add(&mut self, flag: &str) -> Result<(), String> {
        let (name, addr) = flag.split_once('=').ok_or_else(|| format!("--route {flag}: expected NAME=ADDR"))?;
        let addr: SocketAddr =
            addr.parse().map_err(|_| format!("--route {flag}: {addr} is not an IP address and port"))?;
        if !addr.ip().is_loopback() {
            return Err(format!("--route {flag}: a route goes to a loopback address only"));
        }
        self.0.insert(name.to_ascii_lowercase(), addr);
        Ok(())
    }
}

/// The fake's egress: its CA and its routes.
#[derive(Clone)]
pub struct Egress {
    pki: Arc<Pki>,
    routes: Arc<Routes>,
}

/// One sandbox's egress, served until dropped.
#[derive(Debug)]
pub struct Opened {
    /// What passes now.
    rules: Arc<std::sync::RwLock<Rules>>,
    /// The directory holding the socket, mounted at [`MOUNT`].
    pub dir: PathBuf,
    /// The trust store the sandbox gets: the fake's CA.
    pub bundle: PathBuf,
    /// The names that resolve to the forwarder.
    pub names: Vec<String>,
    task: tokio::task::JoinHandle<()>,
}

/// What a sandbox's container gets for its egress.
#[derive(Debug, Clone)]
pub struct Mount {
    pub dir: PathBuf,
    pub bundle: PathBuf,
    pub names: Vec<String>,
}

impl Opened {
    /// Lets out what `rules` allow from now on (a vendor's network update).
    pub fn set(&self, rules: Rules) {
        *self.rules.write().unwrap_or_else(std::sync::PoisonError::into_inner) = rules;
    }

    /// The container's side of it.
    pub fn mount(&self) -> Mount {
        Mount { dir: self.dir.clone(), bundle: self.bundle.clone(), names: self.names.clone() }
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Egress {
    /// Egress through `pki`'s CA to `routes`.
    pub fn new(pki: Arc<Pki>, routes: Routes) -> Egress {
        Egress { pki, routes: Arc::new(routes) }
    }

    /// Whether any name is routed (else nothing can be reached whatever the rules).
    pub fn routes_any(&self) -> bool {
        !self.routes.0.is_empty()
    }

    /// Serves sandbox `id`'s way out under `rules`, from a fresh directory under `root`.
    ///
    /// # Errors
    ///
    /// The directory, the trust store or the socket could not be made.
    pub fn open(&self, root: &Path, id: &str, rules: Rules) -> std::io::Result<Opened> {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = root.join(format!("egress-{id}"));
        std::fs::create_dir_all(&dir)?;
        // Only root (the forwarder) in the container may reach the socket.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        let bundle = root.join(format!("egress-{id}.pem"));
        std::fs::write(&bundle, self.pki.ca_pem())?;
        std::fs::set_permissions(&bundle, std::fs::Permissions::from_mode(0o644))?;
        let listener = tokio::net::UnixListener::bind(dir.join(SOCKET))?;
        let mut names = rules.names();
        names.extend(self.routes.0.keys().filter(|n| !names.contains(n)).cloned().collect::<Vec<_>>());
        names.sort();
        let rules = Arc::new(std::sync::RwLock::new(rules));
        let (pki, routes, shared) = (Arc::clone(&self.pki), Arc::clone(&self.routes), Arc::clone(&rules));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                // Each connection passes under the rules as they are when it opens.
                let now = Arc::new(shared.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone());
                let (pki, routes) = (Arc::clone(&pki), Arc::clone(&routes));
                tokio::spawn(async move { passage(stream, pki, routes, now).await });
            }
        });
        Ok(Opened { rules, dir, bundle, names, task })
    }
}

/// One connection out: the name asked, checked, TLS ended with a certificate for
/// it, then each request forwarded with the rules' headers.
async fn passage(stream: tokio::net::UnixStream, pki: Arc<Pki>, routes: Arc<Routes>, rules: Arc<Rules>) {
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream);
    let Ok(start) = acceptor.await else { return };
    let Some(name) = start.client_hello().server_name().map(str::to_ascii_lowercase) else { return };
    if !rules.allows(&name) {
        return;
    }
    let Ok(config) = pki.leaf_config(&name) else { return };
    let Ok(tls) = start.into_stream(config).await else { return };
    let headers = rules.headers.get(&name).cloned().unwrap_or_default();
    let target = routes.0.get(&name).copied();
    let service = hyper::service::service_fn(move |req| {
        let (name, headers) = (name.clone(), headers.clone());
        async move { Ok::<_, std::convert::Infallible>(onward(req, &name, &headers, target).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).await;
}

fn text(status: u16, message: String) -> http::Response<Full<Bytes>> {
    let mut r = http::Response::new(Full::new(Bytes::from(message)));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::BAD_GATEWAY);
    r
}

/// Forwards one request to `name`'s route with `headers` set on it.
async fn onward(
    req: http::Request<hyper::body::Incoming>,
    name: &str,
    headers: &[(String, String)],
    target: Option<SocketAddr>,
) -> http::Response<Full<Bytes>> {
    let Some(addr) = target else { return text(502, format!("the fake routes nowhere for {name}")) };
    let (parts, body) = req.into_parts();
    let Ok(body) = Limited::new(body, MAX_BODY).collect().await.map(|b| b.to_bytes()) else {
        return text(413, "request body too large for the fake's egress".into());
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    let mut onward = http::Request::builder().method(parts.method).uri(path);
    for (k, v) in &parts.headers {
        if k != http::header::HOST && k != http::header::CONNECTION {
            onward = onward.header(k, v);
        }
    }
    let Ok(mut onward) = onward.header(http::header::HOST, name).body(Full::new(body)) else {
        return text(400, "the request cannot be forwarded".into());
    };
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (http::HeaderName::from_bytes(k.as_bytes()), http::HeaderValue::from_str(v)) {
            onward.headers_mut().insert(k, v);
        }
    }
    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
        return text(502, format!("{name} ({addr}) does not answer"));
    };
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await else {
        return text(502, format!("{name} ({addr}) does not speak HTTP"));
    };
    tokio::spawn(conn);
    let Ok(answer) = sender.send_request(onward).await else {
        return text(502, format!("{name} ({addr}) failed the request"));
    };
    let (parts, body) = answer.into_parts();
    let Ok(body) = Limited::new(body, MAX_BODY).collect().await.map(|b| b.to_bytes()) else {
        return text(502, format!("{name} answered more than the fake's egress passes"));
    };
    http::Response::from_parts(parts, Full::new(body))
}

/// This binary, whose `forward` the container runs: under `cargo test` (a test
/// harness in `deps/`), the `plimsoll-fake` built beside it.
pub fn binary() -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
    let Some(dir) = me.parent().filter(|d| d.ends_with("deps")) else { return Ok(me) };
    let built = dir.parent().map(|t| t.join("plimsoll-fake")).unwrap_or_default();
    if built.exists() {
        Ok(built)
    } else {
        Err(format!("no {} to forward with (cargo build -p plimsoll-fakes)", built.display()))
    }
}

/// `plimsoll-fake forward ADDR SOCKET`, in the container: every connection to
/// `listen` is passed to the fake's egress on `socket`.
pub async fn forward(listen: SocketAddr, socket: PathBuf) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("{listen}: {e}"))?;
    loop {
        let Ok((mut tcp, _)) = listener.accept().await else { continue };
        let socket = socket.clone();
        tokio::spawn(async move {
            if let Ok(mut out) = tokio::net::UnixStream::connect(&socket).await {
                let _ = tokio::io::copy_bidirectional(&mut tcp, &mut out).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_allows_its_name_and_a_wildcard_the_names_under_it() {
        let rules = Rules { allow: vec!["guard.e2b.test".into(), "*.api.test".into()], headers: BTreeMap::new() };
        assert!(rules.allows("guard.e2b.test") && rules.allows("v1.api.test") && rules.allows("a.b.api.test"));
        assert!(!rules.allows("api.test") && !rules.allows("xguard.e2b.test") && !rules.allows("evilapi.test"));
        assert_eq!(rules.names(), ["guard.e2b.test"]);
    }

    #[test]
    fn a_route_goes_to_loopback_only() {
        let mut routes = Routes::default();
        assert!(routes.add("Guard.e2b.test=127.0.0.1:9").is_ok());
        assert_eq!(routes.0["guard.e2b.test"], "127.0.0.1:9".parse().expect("addr"));
        assert_eq!(
            routes.add("x=10.0.0.1:443"),
            Err("--route x=10.0.0.1:443: a route goes to a loopback address only".into())
        );
        assert_eq!(routes.add("x"), Err("--route x: expected NAME=ADDR".into()));
    }
}
