//! A granted container's way to the broker: a per-run Unix socket in a fresh host
//! directory, bind-mounted read-only at `/run/plimsoll` with the in-sandbox
//! clients beside it. The container keeps `--network none`; the socket answers
//! only `POST /call` with the run's token, and every call goes through the run's
//! broker, which alone holds the credential.

use std::convert::Infallible;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::Body;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use plimsoll_containers::{BROKER_TARGET, BrokerMount, broker_root};
use plimsoll_core::provider::{Grant, HostAnswer, HostApi};
use plimsoll_serve::RequestBody;
use serde::Deserialize;

/// The Node client, preloaded into every Node process of a granted container.
pub(super) const NODE_CLIENT: &str = include_str!("../../../../runners/host-api/host.js");
/// The route checks the Node client shares with the QuickJS engine.
pub(super) const ROUTE_CHECKS: &str = include_str!("../../../../runners/host-api/routes.js");
/// The Python module `plimsoll_host`.
pub(super) const PYTHON_CLIENT: &str = include_str!("../../../../runners/host-api/plimsoll_host.py");
/// The most connections one run's socket serves at once.
pub const MAX_CONNECTIONS: usize = 32;
/// The largest envelope: a 1 MiB body, JSON-escaped, and its method and path.
pub const MAX_ENVELOPE_BYTES: usize = (2 << 20) + (64 << 10);
/// The socket's name in the run's directory.
pub(super) const SOCKET: &str = "host-api.sock";
/// How long a request body may take to arrive.
const BODY_DEADLINE: Duration = Duration::from_secs(10);

/// One call as a client sends it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope {
    method: String,
    path: String,
    #[serde(default)]
    body: Option<String>,
}

/// A run's socket; dropping it stops serving and removes the directory.
pub struct BrokerSocket {
    dir: PathBuf,
    mount: BrokerMount,
    token: Arc<str>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for BrokerSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerSocket").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl Drop for BrokerSocket {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn answer(a: HostAnswer) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(a.body)));
    *r.status_mut() = hyper::StatusCode::from_u16(a.status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
    if let Ok(v) = hyper::header::HeaderValue::from_str(&a.content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// A JSON error answer `{"error": message}` with `status`.
pub(super) fn error(status: u16, message: &str) -> Response<Full<Bytes>> {
    answer(HostAnswer {
        status,
        content_type: "application/json".into(),
        body: serde_json::json!({ "error": message }).to_string().into_bytes(),
    })
}

/// Compares without stopping at the first difference.
pub(super) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A call's body: at most [`MAX_ENVELOPE_BYTES`], within [`BODY_DEADLINE`];
/// otherwise the broker's answer.
pub(super) async fn read_body<B>(body: B) -> Result<Bytes, Response<Full<Bytes>>>
where
    B: Body<Data = Bytes, Error: Into<Box<dyn std::error::Error + Send + Sync>>>,
{
    match tokio::time::timeout(BODY_DEADLINE, Limited::new(body, MAX_ENVELOPE_BYTES).collect()).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(_)) => Err(error(413, "host api request body too large")),
        Err(_) => Err(error(408, "the call's body did not arrive within 10 s")),
    }
}

/// Puts the call whose envelope is `body` to `api`; a malformed envelope is
/// refused before it reaches the broker.
pub(super) async fn carry(api: Arc<dyn HostApi>, body: Bytes) -> Response<Full<Bytes>> {
    let env: Envelope = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(_) => {
            return error(400, "the call must be JSON {\"method\", \"path\", \"body\"} with body a string or null");
        }
    };
    let blocking =
        tokio::task::spawn_blocking(move || api.call(&env.method, &env.path, env.body.as_deref().map(str::as_bytes)));
    match blocking.await {
        Ok(a) => answer(a),
        Err(_) => error(502, "host api unavailable"),
    }
}

async fn serve_one(api: Arc<dyn HostApi>, token: Arc<str>, req: Request<RequestBody>) -> Response<Full<Bytes>> {
    if req.method() != hyper::Method::POST || req.uri().path() != "/call" {
        return error(404, "the broker socket answers POST /call only");
    }
    let presented = req.headers().get(hyper::header::AUTHORIZATION).map(|v| v.as_bytes().to_vec()).unwrap_or_default();
    if !same(&presented, format!("Bearer {token}").as_bytes()) {
        return error(401, "unknown or missing run token");
    }
    match read_body(req.into_body()).await {
        Ok(body) => carry(api, body).await,
        Err(refused) => refused,
    }
}

/// The client description `host.js` reads before its environment.
const DESCRIPTION: &str = "grant.json";
/// Extra JavaScript `host.js` evaluates after installing the client.
pub(super) const PREAMBLE: &str = "preamble.js";

/// The files that describe `grant`'s client to the processes that start while
/// they are there (the clients read them as they load): its global and routes,
/// and its preamble when it has one. By bare name, for the client's directory.
pub(super) fn description(grant: &Grant) -> Vec<(&'static str, String)> {
    let mut files =
        vec![(DESCRIPTION, serde_json::json!({ "global": grant.global, "routes": grant.routes }).to_string())];
    if !grant.preamble.is_empty() {
        files.push((PREAMBLE, grant.preamble.clone()));
    }
    files
}

/// Writes `text` to `dir/name` readable by the container's user; whole or not at
/// all (renamed into place), so a process starting meanwhile never reads half.
fn write_public(dir: &std::path::Path, name: &str, text: &str) -> std::io::Result<()> {
    let staged = dir.join(format!(".{name}.new"));
    std::fs::write(&staged, text)?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o644))?;
    std::fs::rename(&staged, dir.join(name))
}

fn remove_if_there(path: &std::path::Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl BrokerSocket {
    /// Opens a run's directory and socket for `grant`, served on `rt`.
    ///
    /// # Errors
    ///
    /// The directory or socket could not be made.
    pub fn open(grant: &Grant, rt: &tokio::runtime::Handle) -> std::io::Result<BrokerSocket> {
        BrokerSocket::start(grant.api.clone(), Some(grant), rt)
    }

    /// Opens a directory and socket serving `api` that describe no client: no
    /// process installs one (and `plimsoll_host` knows no routes) until
    /// [`BrokerSocket::describe`] names a call's grant. For a session whose calls
    /// name their own grants.
    ///
    /// # Errors
    ///
    /// The directory or socket could not be made.
    pub fn open_undescribed(api: Arc<dyn HostApi>, rt: &tokio::runtime::Handle) -> std::io::Result<BrokerSocket> {
        BrokerSocket::start(api, None, rt)
    }

    fn start(
        api: Arc<dyn HostApi>,
        described: Option<&Grant>,
        rt: &tokio::runtime::Handle,
    ) -> std::io::Result<BrokerSocket> {
        let root = broker_root();
        std::fs::create_dir_all(&root)?;
        let mut id = [0u8; 12];
        let mut token = [0u8; 32];
        getrandom::fill(&mut id)
            .and_then(|()| getrandom::fill(&mut token))
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let dir = root.join(format!("run-{}", hex::encode(id)));
        std::fs::create_dir(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        write_public(&dir, "host.js", NODE_CLIENT)?;
        write_public(&dir, "routes.js", ROUTE_CHECKS)?;
        write_public(&dir, "plimsoll_host.py", PYTHON_CLIENT)?;
        if let Some(grant) = described.filter(|g| !g.preamble.is_empty()) {
            write_public(&dir, PREAMBLE, &grant.preamble)?;
        }
        let path = dir.join(SOCKET);
        let std_listener = std::os::unix::net::UnixListener::bind(&path)?;
        // The guest's uid is not the host's: anyone inside may connect; the run token decides.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
        std_listener.set_nonblocking(true)?;
        let listener = {
            let _enter = rt.enter();
            tokio::net::UnixListener::from_std(std_listener)?
        };
        let token: Arc<str> = hex::encode(token).into();
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let serve_token = token.clone();
        let task = rt.spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    drop(stream);
                    continue;
                };
                let (api, token) = (api.clone(), serve_token.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (api, token) = (api.clone(), token.clone());
                        async move {
                            Ok::<_, Infallible>(plimsoll_serve::answer(req, |req| serve_one(api, token, req)).await)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    drop(slot);
                });
            }
        });
        let target = |name: &str| format!("{BROKER_TARGET}/{name}");
        let mut env = vec![
            ("PLIMSOLL_HOST_API".to_string(), target(SOCKET)),
            ("PLIMSOLL_HOST_TOKEN".to_string(), token.to_string()),
            ("NODE_OPTIONS".to_string(), format!("--require={}", target("host.js"))),
            ("PYTHONPATH".to_string(), BROKER_TARGET.to_string()),
        ];
        if let Some(grant) = described {
            env.push(("PLIMSOLL_HOST_GLOBAL".to_string(), grant.global.clone()));
            env.push(("PLIMSOLL_HOST_ROUTES".to_string(), grant.routes.join("\n")));
        }
        Ok(BrokerSocket { mount: BrokerMount { dir: dir.clone(), env }, dir, token, task })
    }

    /// Describes `grant`'s client (its global, routes and preamble) to the
    /// processes that start from now on, until [`BrokerSocket::undescribe`].
    ///
    /// # Errors
    ///
    /// A file could not be written.
    pub fn describe(&self, grant: &Grant) -> std::io::Result<()> {
        if grant.preamble.is_empty() {
            remove_if_there(&self.dir.join(PREAMBLE))?;
        }
        for (name, text) in description(grant) {
            write_public(&self.dir, name, &text)?;
        }
        Ok(())
    }

    /// Describes no client again.
    ///
    /// # Errors
    ///
    /// A file could not be removed.
    pub fn undescribe(&self) -> std::io::Result<()> {
        remove_if_there(&self.dir.join(DESCRIPTION))?;
        remove_if_there(&self.dir.join(PREAMBLE))
    }

    /// The socket's path on this host.
    pub fn path(&self) -> PathBuf {
        self.dir.join(SOCKET)
    }

    /// The run token the socket admits calls on.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The bind and variables a container of this run gets.
    pub fn mount(&self) -> BrokerMount {
        self.mount.clone()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::io::{Read as _, Write as _};
    use std::os::unix::net::UnixStream;
    use std::sync::Mutex;

    use super::*;

    /// A broker that records its calls (`METHOD path body`) and answers 201.
    pub(in crate::plugin) struct Echo(pub(in crate::plugin) Mutex<Vec<String>>);

    impl HostApi for Echo {
        fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer {
            let body = body.map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
            self.0.lock().expect("calls").push(format!("{method} {path} {body}"));
            HostAnswer { status: 201, content_type: "application/json".into(), body: b"{\"ok\":true}".to_vec() }
        }
    }

    fn post(sock: &std::path::Path, path: &str, token: &str, body: &str) -> (u16, String) {
        let mut s = UnixStream::connect(sock).expect("connect");
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).expect("read");
        let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (status, out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string())
    }

    #[test]
    fn the_socket_serves_the_runs_token_only_and_removes_its_directory() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
        let echo = Arc::new(Echo(Mutex::default()));
        let grant = Grant {
            global: "host".into(),
            routes: vec!["GET /items/*".into()],
            preamble: "globalThis.sdk = 1;".into(),
            api: echo.clone(),
        };
        let socket = BrokerSocket::open(&grant, rt.handle()).expect("opened");
        let mount = socket.mount();
        let env: std::collections::BTreeMap<_, _> = mount.env.iter().cloned().collect();
        assert_eq!(env["PLIMSOLL_HOST_API"], "/run/plimsoll/host-api.sock");
        assert_eq!(env["NODE_OPTIONS"], "--require=/run/plimsoll/host.js");
        assert_eq!(env["PLIMSOLL_HOST_ROUTES"], "GET /items/*");
        let token = env["PLIMSOLL_HOST_TOKEN"].clone();
        assert_eq!(token.len(), 64);
        for f in ["host.js", "routes.js", "plimsoll_host.py", "preamble.js", "host-api.sock"] {
            assert!(mount.dir.join(f).exists(), "{f}");
        }
        let sock = mount.dir.join("host-api.sock");
        let call = r#"{"method":"POST","path":"/items","body":"{\"a\":1}"}"#;
        assert_eq!(post(&sock, "/call", &token, call), (201, "{\"ok\":true}".into()));
        assert_eq!(echo.0.lock().expect("calls").as_slice(), ["POST /items {\"a\":1}"]);
        assert_eq!(post(&sock, "/call", "guess", call), (401, r#"{"error":"unknown or missing run token"}"#.into()));
        assert_eq!(post(&sock, "/other", &token, call).0, 404);
        let (status, body) = post(&sock, "/call", &token, r#"{"method":"GET","path":"/x","extra":1}"#);
        assert_eq!(status, 400, "{body}");
        assert_eq!(echo.0.lock().expect("calls").len(), 1, "refused envelopes never reach the broker");
        let dir = mount.dir.clone();
        drop(socket);
        assert!(!dir.exists(), "the run's directory is removed with its socket");
    }

    #[test]
    fn an_undescribed_socket_names_no_client_until_a_call_describes_its_grant() {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
        let echo = Arc::new(Echo(Mutex::default()));
        let socket = BrokerSocket::open_undescribed(echo.clone(), rt.handle()).expect("opened");
        let mount = socket.mount();
        let names: Vec<&str> = mount.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PLIMSOLL_HOST_API", "PLIMSOLL_HOST_TOKEN", "NODE_OPTIONS", "PYTHONPATH"]);
        assert!(!mount.dir.join("grant.json").exists() && !mount.dir.join("preamble.js").exists());
        let grant = Grant {
            global: "inventory".into(),
            routes: vec!["GET /items".into()],
            preamble: "globalThis.sdk = 1;".into(),
            api: echo,
        };
        socket.describe(&grant).expect("described");
        let read = |name: &str| std::fs::read_to_string(mount.dir.join(name)).expect(name);
        assert_eq!(read("grant.json"), r#"{"global":"inventory","routes":["GET /items"]}"#);
        assert_eq!(read("preamble.js"), "globalThis.sdk = 1;");
        socket.describe(&Grant { preamble: String::new(), ..grant }).expect("described again");
        assert!(!mount.dir.join("preamble.js").exists(), "a grant without a preamble leaves none behind");
        socket.undescribe().expect("undescribed");
        socket.undescribe().expect("twice is harmless");
        let left: Vec<_> = std::fs::read_dir(&mount.dir).expect("dir").flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 4, "the clients and the socket stay, nothing else: {left:?}");
    }
}
