//! A fake Kubernetes API server running agent-sandbox (v1beta1): the JSON of
//! the objects it serves (SandboxTemplate, SandboxWarmPool, SandboxClaim,
//! Sandbox, Pod, Node, RuntimeClass, NetworkPolicy), `metav1.Status` errors,
//! resourceVersion and watch, foreground deletion and the pod proxy, with
//! each pod backed by a local docker container running sandboxd from the
//! sandbox image (see README.md).

mod api;
mod controller;
mod kubelet;
mod objects;
mod pods;
mod proxy;
mod quantity;
mod select;
mod status;
mod store;
mod watch;
mod written;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::backing::Backing;
use crate::pki::Pki;
use crate::server::{self, Body, Handler, Request};
use crate::util::random;
use objects::{Cluster, NodeInfo};
use status::Status;
use store::{Key, Resource, Store};

/// The host name the API server's certificate is for.
pub const HOST: &str = "kubernetes.agentsandbox.test";
/// sandboxd, and `plimsoll-agent dial`, in the sandbox image.
pub const AGENT: &str = "/opt/plimsoll/plimsoll-agent";
/// How long the warm pool may take to fill at startup.
const STARTUP_LIMIT: Duration = Duration::from_secs(180);

/// Each way this fake can misbehave, and what it does.
pub const MODES: [(&str, &str); 22] = [
    ("redirect", "every answer is a 307 to https://elsewhere.agentsandbox.test/..."),
    ("weaker", "pods differ from the template: a service account token mounted, a writable root, a sidecar"),
    ("token-mounted", "pods mount a service account token (automountServiceAccountToken true, and the file is there)"),
    ("writable-root", "pods' root file system is writable (readOnlyRootFilesystem false, and really)"),
    ("extra-container", "pods carry an extra container, sidecar (in the spec only)"),
    ("extra-field", "pods' spec carries an unknown field, futureIsolation: off"),
    ("exec-probe", "the sandbox container has an exec livenessProbe"),
    ("host-namespace", "pods' spec has hostPID: true (in the spec only)"),
    ("permissive-policy", "the managed NetworkPolicy's egress is [{}]: everything allowed"),
    ("remapped", "the RuntimeClass names --runtime-class but pods run under the other runtime"),
    ("unpinned", "pods' image is plimsoll-sandbox:latest, no digest"),
    ("foreign-hash", "pods' sandboxd takes another token's hash (and really started with it)"),
    ("capabilities", "the sandbox container adds NET_ADMIN (and really has it)"),
    ("disk-volume", "the tmp volume is an emptyDir without medium: Memory (backed by a tmpfs all the same)"),
    ("never-ready", "every claim after the first never becomes Ready: its pod stays Pending"),
    ("pod-fails", "every claim after the first gets a pod that fails at once (Ready False, reason PodFailed)"),
    (
        "conflict",
        "every other create (the 1st, 3rd, ...) answers 409 AlreadyExists without storing it: a name another holds",
    ),
    ("gone", "the first watch of each claim answers 410 Expired"),
    ("throttle", "every second request answers 429 TooManyRequests, Retry-After: 1"),
    ("flaky", "a claim's first create is stored but answers 500; a pod's first GET answers 503"),
    (
        "upgrade-stripped",
        "the pod proxy drops a request's Upgrade (as a load balancer without upgrades does): sandboxd's relay answers 426",
    ),
    ("no-judge", "pods' image carries no plimsoll-judge (its /usr/local/bin hidden, in the container only)"),
];

/// A misbehaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Redirect,
    Weaker,
    TokenMounted,
    WritableRoot,
    ExtraContainer,
    ExtraField,
    ExecProbe,
    HostNamespace,
    PermissivePolicy,
    Remapped,
    Unpinned,
    ForeignHash,
    Capabilities,
    DiskVolume,
    NeverReady,
    PodFails,
    Conflict,
    Gone,
    Throttle,
    Flaky,
    UpgradeStripped,
    NoJudge,
}

impl Mode {
    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "redirect" => Mode::Redirect,
            "weaker" => Mode::Weaker,
            "token-mounted" => Mode::TokenMounted,
            "writable-root" => Mode::WritableRoot,
            "extra-container" => Mode::ExtraContainer,
            "extra-field" => Mode::ExtraField,
            "exec-probe" => Mode::ExecProbe,
            "host-namespace" => Mode::HostNamespace,
            "permissive-policy" => Mode::PermissivePolicy,
            "remapped" => Mode::Remapped,
            "unpinned" => Mode::Unpinned,
            "foreign-hash" => Mode::ForeignHash,
            "capabilities" => Mode::Capabilities,
            "disk-volume" => Mode::DiskVolume,
            "never-ready" => Mode::NeverReady,
            "pod-fails" => Mode::PodFails,
            "conflict" => Mode::Conflict,
            "gone" => Mode::Gone,
            "throttle" => Mode::Throttle,
            "flaky" => Mode::Flaky,
            "upgrade-stripped" => Mode::UpgradeStripped,
            "no-judge" => Mode::NoJudge,
            _ => return None,
        })
    }
}

/// Whether `handler` can name a RuntimeClass handler: a DNS label.
pub fn valid_handler(handler: &str) -> bool {
    !handler.is_empty()
        && handler.len() <= 63
        && handler.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !handler.starts_with('-')
        && !handler.ends_with('-')
}

/// How the fake is started.
#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Option<Mode>,
    /// The RuntimeClass's handler (`--runtime-class`).
    pub handler: String,
    /// The warm pool's size (`--pool-size`).
    pub pool_size: u32,
    /// Where the fake writes files (pods' service account tokens).
    pub dir: PathBuf,
    /// The operator's SandboxTemplate, as the file `--template` names holds it.
    pub template: Option<String>,
}

/// What a misbehaviour remembers, and the claims seen.
#[derive(Debug, Default)]
struct Quirks {
    /// Requests served (`throttle`).
    requests: u64,
    /// Claim creates seen (`conflict` refuses the odd ones).
    creates: u64,
    /// Claim names whose create's answer was lost once (`flaky`).
    lost: HashSet<String>,
    /// Pods read once (`flaky`).
    read: HashSet<String>,
    /// Claim names watched once (`gone`).
    watched: HashSet<String>,
    /// Claims reconciled so far (`never-ready`).
    claims: u64,
}

/// The fake.
pub struct Fake {
    backing: Arc<Backing>,
    cluster: Cluster,
    dir: PathBuf,
    /// The CA a pod's mounted service account files carry.
    ca_pem: String,
    /// The bearer every request must carry.
    token: String,
    /// The token sandboxd takes (the template's args carry its SHA-256).
    sandboxd_token: String,
    store: Mutex<Store>,
    quirks: Mutex<Quirks>,
    /// Each pod's address and start time.
    pod_ips: Mutex<HashMap<String, (String, u64)>>,
    next_ip: AtomicU32,
    /// Wakes the pool's controller.
    refill: tokio::sync::Notify,
}

/// Locks `m`, whatever a panicking holder left.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// This machine, as the Node reports it.
async fn node_info(backing: &Backing) -> Result<NodeInfo, String> {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    let boot_id = read("/proc/sys/kernel/random/boot_id").map_err(|e| format!("the boot id: {e}"))?;
    let os_image = read("/etc/os-release")
        .ok()
        .and_then(|r| r.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=").map(|v| v.trim_matches('"').to_string())))
        .unwrap_or_else(|| "Linux".into());
    Ok(NodeInfo {
        boot_id,
        kernel: read("/proc/sys/kernel/osrelease").unwrap_or_default(),
        os_image,
        docker_version: backing.docker_version().await?,
        machine_id: read("/etc/machine-id").unwrap_or_else(|_| hex::encode(random(16))),
    })
}

impl Fake {
    /// Starts the cluster: its objects made, the warm pool filled and every
    /// pool pod's sandboxd answering. `Err` says why it could not (the
    /// caller removes what was made).
    pub async fn start(backing: Arc<Backing>, pki: &Pki, options: Options) -> Result<Arc<Fake>, String> {
        let image = backing.image_id().await?;
        let image_hex = image.strip_prefix("sha256:").unwrap_or(&image).to_string();
        let node = node_info(&backing).await?;
        let sandboxd_token = hex::encode(random(32));
        let mut cluster = Cluster {
            handler: options.handler.clone(),
            image_hex,
            token_sha256: sha256_hex(&sandboxd_token),
            foreign_sha256: sha256_hex(&hex::encode(random(32))),
            mode: options.mode,
            written: None,
        };
        if let Some(text) = &options.template {
            let fill = written::placeholders(&cluster.image(), &cluster.token_sha256);
            cluster.written = Some(written::read(text, &fill).map_err(|e| format!("--template: {e}"))?);
        }
        let fake = Arc::new(Fake {
            backing,
            cluster,
            dir: options.dir,
            ca_pem: pki.ca_pem().to_string(),
            token: format!("{}.{}", hex::encode(random(16)), hex::encode(random(32))),
            sandboxd_token,
            store: Mutex::new(Store::new()),
            quirks: Mutex::new(Quirks::default()),
            pod_ips: Mutex::new(HashMap::new()),
            next_ip: AtomicU32::new(0),
            refill: tokio::sync::Notify::new(),
        });
        fake.seed(&node, options.pool_size)?;
        let me = Arc::clone(&fake);
        tokio::spawn(async move {
            loop {
                me.reconcile_pool();
                me.refill.notified().await;
            }
        });
        fake.pool_ready(STARTUP_LIMIT).await?;
        Ok(fake)
    }

    /// The objects that exist before any claim: the RuntimeClass, the Node,
    /// the template, the NetworkPolicy managed from it, and the pool.
    fn seed(&self, node: &NodeInfo, pool_size: u32) -> Result<(), String> {
        let mut store = self.lock_store();
        let ns = objects::NAMESPACE;
        let made = |r: Result<serde_json::Value, store::Refused>| r.map_err(|e| format!("seeding the store: {e:?}"));
        made(store.create(
            &Key::new(Resource::RuntimeClasses, "", self.cluster.runtime_class()),
            objects::runtime_class(&self.cluster.handler),
        ))?;
        made(store.create(&Key::new(Resource::Nodes, "", objects::NODE), objects::node(node)))?;
        let c = &self.cluster;
        let template =
            made(store.create(&Key::new(Resource::SandboxTemplates, ns, c.template_name()), objects::template(c)))?;
        if let Some(policy) = objects::network_policy(c, &template) {
            made(store.create(&Key::new(Resource::NetworkPolicies, ns, &c.network_policy_name()), policy))?;
        }
        made(store.create(&Key::new(Resource::SandboxWarmPools, ns, objects::POOL), objects::warm_pool(c, pool_size)))?;
        Ok(())
    }

    fn lock_store(&self) -> std::sync::MutexGuard<'_, Store> {
        lock(&self.store)
    }

    fn quirks(&self) -> std::sync::MutexGuard<'_, Quirks> {
        lock(&self.quirks)
    }

    fn authorized(&self, req: &Request) -> bool {
        let given = req.header("authorization").and_then(|a| a.strip_prefix("Bearer ")).unwrap_or_default();
        // Compared in constant time: the bearer is the cluster's credential.
        given.len() == self.token.len()
            && given.bytes().zip(self.token.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    async fn serve(self: Arc<Self>, req: Request) -> http::Response<Body> {
        if self.cluster.mode == Some(Mode::Redirect) {
            let query = if req.query.is_empty() { String::new() } else { format!("?{}", req.query) };
            let mut r = server::whole(307, "", bytes::Bytes::new());
            if let Ok(v) =
                http::HeaderValue::from_str(&format!("https://elsewhere.agentsandbox.test{}{query}", req.path))
            {
                r.headers_mut().insert(http::header::LOCATION, v);
            }
            return r;
        }
        if !self.authorized(&req) {
            return Status::unauthorized().response();
        }
        if self.cluster.mode == Some(Mode::Throttle) {
            let mut q = self.quirks();
            q.requests += 1;
            if q.requests.is_multiple_of(2) {
                return Status::too_many_requests().response();
            }
        }
        self.dispatch(req).await
    }
}

impl Handler for Fake {
    fn settings(&self, port: u16, pki: &Pki) -> Vec<(String, String)> {
        vec![
            ("SANDBOX_PROVIDER".into(), "agentsandbox".into()),
            ("SANDBOX_AGENTSANDBOX_API_URL".into(), format!("https://{HOST}:{port}")),
            ("SANDBOX_AGENTSANDBOX_CONNECT_TO".into(), "127.0.0.1".into()),
            ("SANDBOX_AGENTSANDBOX_CA_FILE".into(), pki.ca_file.display().to_string()),
            ("SANDBOX_AGENTSANDBOX_TOKEN".into(), self.token.clone()),
            ("SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN".into(), self.sandboxd_token.clone()),
            ("SANDBOX_AGENTSANDBOX_NAMESPACE".into(), objects::NAMESPACE.into()),
            ("SANDBOX_AGENTSANDBOX_WARM_POOL".into(), objects::POOL.into()),
        ]
    }

    fn handle(self: Arc<Self>, req: Request) -> std::pin::Pin<Box<dyn Future<Output = http::Response<Body>> + Send>> {
        Box::pin(self.serve(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_parses() {
        for (m, _) in MODES {
            assert!(Mode::parse(m).is_some(), "{m}");
        }
        assert_eq!(Mode::parse("nope"), None);
        let mut names: Vec<&str> = MODES.iter().map(|(m, _)| *m).collect();
        names.dedup();
        assert_eq!(names.len(), MODES.len());
    }

    #[test]
    fn handlers_are_dns_labels() {
        for h in ["runsc", "runc", "kata", "kata-qemu"] {
            assert!(valid_handler(h), "{h}");
        }
        for h in ["", "RunSC", "-x", "x-", "a b", &"a".repeat(64)] {
            assert!(!valid_handler(h), "{h}");
        }
    }
}
