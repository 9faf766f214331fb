//! SSH sessions and ForwardTcp: the gateway's way in to a loopback port inside a
//! sandbox. `CreateSshSession` issues a token for one sandbox, `RevokeSshSession`
//! withdraws it, and `ForwardTcp` (a bidirectional stream: an init frame naming
//! the sandbox, a loopback TCP target and the token, then the connection's bytes
//! both ways) is checked as the gateway checks it (the same order, codes and
//! words) and bridged to the target from inside the sandbox, as the gateway's
//! supervisor dials it: here a small program `docker exec`s in as root (as the
//! supervisor runs, so no guest process can signal it), connects to the target
//! and pipes the bytes. A token carries at most 3 forwards at once, a
//! sandbox 20.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use prost::Message as _;
use tokio::sync::mpsc;

use super::grpc::{self, Code, Sink, Status};
use super::proto::{
    CreateSshSessionRequest, CreateSshSessionResponse, ForwardPayload, ForwardTarget, RevokeSshSessionRequest,
    RevokeSshSessionResponse, SandboxPhase, TcpForwardFrame, TcpForwardInit,
};
use super::{Fake, HOST, docker, lock};
use crate::backing::{Chunk, Process};
use crate::server::Body;
use crate::util::now;

/// How long a session token lives (the gateway's `ssh_session_ttl_secs`).
const SESSION_TTL_MS: i64 = 3_600_000;
/// Forwards one token may carry at once, and one sandbox.
const PER_TOKEN: u32 = 3;
const PER_SANDBOX: u32 = 20;

/// Connects to `host:port` and pipes its standard input and output to the
/// connection; exit 2 when the target cannot be reached.
const BRIDGE: &str = r#"
import os, socket, sys, threading
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=15)
    s.settimeout(None)
except OSError as e:
    sys.stderr.write(str(e))
    sys.exit(2)
def up():
    while True:
        b = os.read(0, 65536)
        if not b:
            break
        s.sendall(b)
    try:
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
threading.Thread(target=up, daemon=True).start()
while True:
    b = s.recv(65536)
    if not b:
        break
    os.write(1, b)
"#;

/// An issued session token.
#[derive(Debug, Clone)]
pub(super) struct SshSession {
    sandbox_id: String,
    revoked: bool,
    expires_at_ms: i64,
}

/// The forwards in flight, by token and by sandbox.
#[derive(Debug, Default)]
pub(super) struct Forwards {
    by_token: std::collections::HashMap<String, u32>,
    by_sandbox: std::collections::HashMap<String, u32>,
}

/// One forward's slots, given back when it ends.
struct Slots {
    fake: Arc<Fake>,
    token: String,
    sandbox: String,
}

impl Drop for Slots {
    fn drop(&mut self) {
        let mut f = lock(&self.fake.forwards);
        let Forwards { by_token, by_sandbox } = &mut *f;
        for (map, key) in [(by_token, &self.token), (by_sandbox, &self.sandbox)] {
            if let Some(n) = map.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

fn now_ms() -> i64 {
    i64::try_from(now()).unwrap_or(i64::MAX).saturating_mul(1000)
}

impl Fake {
    fn ready(&self, sandbox_id: &str) -> Result<(), Status> {
        let ready = match lock(&self.sandboxes).get(sandbox_id) {
            None => return Err(Status::not_found("sandbox not found")),
            Some(r) => self.view(r).status.is_some_and(|s| s.phase == SandboxPhase::Ready as i32),
        };
        if ready { Ok(()) } else { Err(Status::failed_precondition("sandbox is not ready")) }
    }

    /// `CreateSshSession`: a token for one ready sandbox.
    pub(super) fn create_ssh_session(&self, req: &CreateSshSessionRequest) -> Result<Vec<u8>, Status> {
        if req.sandbox_id.is_empty() {
            return Err(Status::invalid_argument("sandbox_id is required"));
        }
        self.ready(&req.sandbox_id)?;
        let token = super::uuid4();
        let expires_at_ms = now_ms() + SESSION_TTL_MS;
        let session = SshSession { sandbox_id: req.sandbox_id.clone(), revoked: false, expires_at_ms };
        lock(&self.ssh).insert(token.clone(), session);
        Ok(CreateSshSessionResponse {
            sandbox_id: req.sandbox_id.clone(),
            token,
            gateway_host: HOST.into(),
            gateway_port: u32::from(self.port.load(Ordering::Relaxed)),
            gateway_scheme: "https".into(),
            host_key_fingerprint: String::new(),
            expires_at_ms,
        }
        .encode_to_vec())
    }

    /// `RevokeSshSession`: true when a token was withdrawn.
    pub(super) fn revoke_ssh_session(&self, req: &RevokeSshSessionRequest) -> Result<Vec<u8>, Status> {
        if req.token.is_empty() {
            return Err(Status::invalid_argument("token is required"));
        }
        let revoked = match lock(&self.ssh).get_mut(&req.token) {
            Some(s) => {
                s.revoked = true;
                true
            }
            None => false,
        };
        Ok(RevokeSshSessionResponse { revoked }.encode_to_vec())
    }

    /// `ForwardTcp`: the first frame checked, then the stream bridged to the
    /// target inside the sandbox. A refusal ends the call before any message.
    pub(super) async fn forward(self: Arc<Self>, stream: Option<mpsc::Receiver<Bytes>>) -> http::Response<Body> {
        let Some(stream) = stream else {
            return grpc::trailers_only(&Status::internal("the request body was not streamed"));
        };
        let mut incoming = grpc::Incoming::new(stream);
        let first = match incoming.next().await {
            Some(Err(e)) => return grpc::trailers_only(&e),
            Some(Ok(m)) => Some(m),
            None => None,
        };
        let init = match first.as_deref().map(TcpForwardFrame::decode) {
            None => return grpc::trailers_only(&Status::invalid_argument("empty ForwardTcp stream")),
            Some(Err(e)) => {
                return grpc::trailers_only(&Status::internal(format!("failed to decode Protobuf message: {e}")));
            }
            Some(Ok(TcpForwardFrame { payload: Some(ForwardPayload::Init(init)) })) => init,
            Some(Ok(_)) => return grpc::trailers_only(&Status::invalid_argument("first TcpForwardFrame must be init")),
        };
        let (host, port) = match self.admit(&init) {
            Ok(target) => target,
            Err(e) => return grpc::trailers_only(&e),
        };
        let slots = match Arc::clone(&self).slots(&init) {
            Ok(s) => s,
            Err(e) => return grpc::trailers_only(&e),
        };
        let (response, sink) = grpc::streaming();
        tokio::spawn(async move { self.bridge((init.sandbox_id.clone(), host, port), incoming, sink, slots).await });
        response
    }

    /// The init's target, checked as the gateway checks it, and the sandbox and
    /// token it names.
    fn admit(&self, init: &TcpForwardInit) -> Result<(String, u32), Status> {
        if init.sandbox_id.is_empty() {
            return Err(Status::invalid_argument("sandbox_id is required"));
        }
        let (host, port) = match &init.target {
            None => return Err(Status::invalid_argument("tcp forward target is required")),
            Some(ForwardTarget::Ssh(_)) => (None, 0),
            Some(ForwardTarget::Tcp(t)) => {
                if t.port == 0 || t.port > u32::from(u16::MAX) {
                    return Err(Status::invalid_argument("tcp target port must be between 1 and 65535"));
                }
                let host = t.host.trim();
                if host.is_empty() {
                    return Err(Status::invalid_argument("tcp target host is required"));
                }
                let host = if host.eq_ignore_ascii_case("localhost") {
                    "127.0.0.1".to_string()
                } else {
                    match host.parse::<std::net::IpAddr>() {
                        Ok(ip) if ip.is_loopback() => ip.to_string(),
                        _ => return Err(Status::invalid_argument("tcp target host must be loopback")),
                    }
                };
                (Some(host), t.port)
            }
        };
        self.ready(&init.sandbox_id)?;
        let token = init.authorization_token.trim();
        if token.is_empty() {
            return Err(Status::unauthenticated("authorization_token is required for ForwardTcp"));
        }
        let session = lock(&self.ssh)
            .get(token)
            .cloned()
            .ok_or_else(|| Status::unauthenticated("SSH session token not found"))?;
        if session.revoked || session.sandbox_id != init.sandbox_id {
            return Err(Status::unauthenticated("SSH session token is not valid"));
        }
        if session.expires_at_ms > 0 && now_ms() > session.expires_at_ms {
            return Err(Status::unauthenticated("SSH session token expired"));
        }
        if self.mode == Some(super::Mode::ForwardRefused) {
            return Err(Status::new(Code::Unavailable, "supervisor relay failed: connection refused"));
        }
        // The supervisor's SSH server is not part of this fake.
        let host = host.ok_or_else(|| {
            Status::new(Code::Unavailable, "supervisor relay failed: this fake serves TCP targets only")
        })?;
        Ok((host, port))
    }

    /// Takes a slot of the token's and of the sandbox's.
    fn slots(self: Arc<Self>, init: &TcpForwardInit) -> Result<Slots, Status> {
        let token = init.authorization_token.trim().to_string();
        let sandbox = init.sandbox_id.clone();
        {
            let mut f = lock(&self.forwards);
            if f.by_token.get(&token).copied().unwrap_or(0) >= PER_TOKEN {
                return Err(Status::resource_exhausted("SSH session connection limit reached"));
            }
            if f.by_sandbox.get(&sandbox).copied().unwrap_or(0) >= PER_SANDBOX {
                return Err(Status::resource_exhausted("sandbox SSH connection limit reached"));
            }
            *f.by_token.entry(token.clone()).or_insert(0) += 1;
            *f.by_sandbox.entry(sandbox.clone()).or_insert(0) += 1;
        }
        Ok(Slots { fake: self, token, sandbox })
    }

    /// Pipes the client's data frames to a connection to `host:port` made inside
    /// the sandbox, and what comes back as data frames, until either side ends.
    /// The slots are given back before the call's status is sent, so a client
    /// that has seen a forward end can open the next one at once.
    async fn bridge(
        self: Arc<Self>,
        (id, host, port): (String, String, u32),
        mut incoming: grpc::Incoming,
        sink: Sink,
        slots: Slots,
    ) {
        let (to_target, input) = mpsc::unbounded_channel::<Bytes>();
        // The client's side: data frames to the target's input; anything else,
        // or the client's end, closes it.
        tokio::spawn(async move {
            while let Some(Ok(m)) = incoming.next().await {
                match TcpForwardFrame::decode(m) {
                    Ok(TcpForwardFrame { payload: Some(ForwardPayload::Data(d)) }) => {
                        if !d.is_empty() && to_target.send(Bytes::from(d)).is_err() {
                            return;
                        }
                    }
                    _ => return,
                }
            }
        });
        let marker = format!("{id}-forward-{}", self.execs.fetch_add(1, Ordering::Relaxed));
        let process = Process {
            argv: ["python3", "-c", BRIDGE, host.as_str(), &port.to_string()].map(String::from).to_vec(),
            cwd: docker::WORKSPACE.into(),
            input: Some(input),
            marker: Some(marker.clone()),
            supervisor: true,
            ..Process::default()
        };
        let (tx, mut rx) = mpsc::channel(16);
        let me = Arc::clone(&self);
        let run_id = id.clone();
        let run = tokio::spawn(async move { me.backing.run(&run_id, process, tx).await });
        let (mut sent, mut refused) = (false, Vec::new());
        let mut code = None;
        loop {
            tokio::select! {
                chunk = rx.recv() => match chunk {
                    Some(Chunk::Stdout(b)) => {
                        sent = true;
                        if !sink.send(&TcpForwardFrame { payload: Some(ForwardPayload::Data(b.to_vec())) }).await {
                            break;
                        }
                    }
                    Some(Chunk::Stderr(b)) => refused.extend_from_slice(&b),
                    Some(Chunk::Exit(c)) => code = Some(c),
                    None => break,
                },
                () = sink.gone() => break,
            }
        }
        run.abort();
        self.backing.kill_marked(&id, &marker).await;
        drop(slots);
        match code {
            Some(Some(2)) if !sent => {
                let why = String::from_utf8_lossy(&refused).trim().to_string();
                sink.finish(Status::new(Code::Unavailable, format!("supervisor relay failed: {why}"))).await;
            }
            _ => sink.finish(Status::ok()).await,
        }
    }
}
