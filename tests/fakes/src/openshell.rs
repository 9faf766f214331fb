//! A fake of an NVIDIA OpenShell gateway: gRPC (`openshell.v1.OpenShell`) over
//! HTTP/2 with mutual TLS, its docker compute driver's sandboxes backed by
//! local containers, as the gateway's published protos and server source
//! define them (see README.md).

mod docker;
mod exec;
mod forward;
mod grpc;
mod proto;
mod validate;

#[cfg(test)]
mod live;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prost::Message as _;
use sha2::{Digest as _, Sha256};

use crate::backing::{Backing, Shape};
use crate::pki::Pki;
use crate::server::{self, Body, Handler, Request};
use crate::util::random;
use grpc::{Code, Status};
use proto::{
    CreateSandboxRequest, DeleteSandboxRequest, DeleteSandboxResponse, EffectiveSetting, GetSandboxRequest,
    ListSandboxesRequest, ListSandboxesResponse, NetworkEndpoint, NetworkPolicyRule, ObjectMeta, PolicySource, Sandbox,
    SandboxCondition, SandboxPhase, SandboxPolicy, SandboxResponse, SandboxStatus, Setting, SettingScope, SettingValue,
};

/// Each way this fake can misbehave, and what it does.
pub const MODES: [(&str, &str); 14] = [
    ("redirect", "every answer is a 307 redirect elsewhere, with no gRPC body"),
    ("weaker", "the read-back grants more than asked: 8 CPUs, 16Gi and a network rule to any host on 443"),
    ("foreign-driver", "GetGatewayInfo reports the kubernetes compute driver"),
    ("proposals", "GetGatewayConfig reports agent_policy_proposals_enabled = true"),
    ("policy-drift", "GetSandboxConfig's policy has a rule the submitted one lacks, from the GLOBAL source"),
    (
        "late-drift",
        "as policy-drift, but only from a sandbox's third GetSandboxConfig on (a session's sandbox changed after its open)",
    ),
    ("unknown-field", "the read-back's spec.template carries field 99, which the protos do not define"),
    ("malformed", "GetSandbox answers bytes that are not protobuf, in a well-formed gRPC frame"),
    ("truncated", "ExecSandbox streams the output but no exit event, then status OK"),
    ("never-ready", "sandboxes stay PROVISIONING: Ready=False, SupervisorNotConnected"),
    ("undeletable", "DeleteSandbox answers INTERNAL and the sandbox stays"),
    ("slow-delete", "DeleteSandbox takes 8 s before it removes the sandbox (a driver slow to remove a container)"),
    ("slow", "every unary answer comes after 35 s"),
    ("forward-refused", "ForwardTcp refuses every forward UNAVAILABLE: supervisor relay failed"),
];

/// A misbehaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Redirect,
    Weaker,
    ForeignDriver,
    Proposals,
    PolicyDrift,
    LateDrift,
    UnknownField,
    Malformed,
    Truncated,
    NeverReady,
    Undeletable,
    SlowDelete,
    Slow,
    ForwardRefused,
}

impl Mode {
    /// The mode named `s`.
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "redirect" => Mode::Redirect,
            "weaker" => Mode::Weaker,
            "foreign-driver" => Mode::ForeignDriver,
            "proposals" => Mode::Proposals,
            "policy-drift" => Mode::PolicyDrift,
            "late-drift" => Mode::LateDrift,
            "unknown-field" => Mode::UnknownField,
            "malformed" => Mode::Malformed,
            "truncated" => Mode::Truncated,
            "never-ready" => Mode::NeverReady,
            "undeletable" => Mode::Undeletable,
            "slow-delete" => Mode::SlowDelete,
            "slow" => Mode::Slow,
            "forward-refused" => Mode::ForwardRefused,
            _ => return None,
        })
    }
}

/// How long a delete takes in mode `slow-delete`.
const SLOW_DELETE: std::time::Duration = std::time::Duration::from_secs(8);

/// The gateway's host name, as its certificate names it.
pub const HOST: &str = "gateway.openshell.test";
const SERVICE: &str = "/openshell.v1.OpenShell/";
const VERSION: &str = "0.0.111-fake";
const WORKSPACE: &str = "default";
/// The most memory a backing container gets, whatever was asked: a fake
/// cannot give each sandbox gigabytes on a shared test machine.
const MAX_MEMORY: u64 = 1024 << 20;
/// The guest's home (the workspace) is a tmpfs counted in the container's
/// memory: this much, or half the memory when that is less.
const HOME_MB: u32 = 256;
/// Field 99, varint 1: a field no OpenShell message defines.
const UNKNOWN_FIELD: [u8; 3] = [0x98, 0x06, 0x01];

/// Where a sandbox's backing container is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Backend {
    Starting,
    Running,
    Failed { reason: String, message: String },
}

struct Record {
    /// Metadata and spec as stored (the spec as submitted, normalised).
    sandbox: Sandbox,
    backend: Backend,
    /// GetSandboxConfig calls answered for it.
    config_reads: u32,
}

/// The fake.
pub struct Fake {
    backing: Arc<Backing>,
    mode: Option<Mode>,
    sandboxes: Mutex<BTreeMap<String, Record>>,
    driver_version: tokio::sync::OnceCell<String>,
    /// Execs started, to name each one's processes apart.
    execs: std::sync::atomic::AtomicU64,
    /// SSH session tokens issued, by token.
    ssh: Mutex<std::collections::HashMap<String, forward::SshSession>>,
    /// The forwards in flight.
    forwards: Mutex<forward::Forwards>,
    /// The port it listens on, for the sessions it issues.
    port: std::sync::atomic::AtomicU16,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A random (version 4) UUID.
fn uuid4() -> String {
    let mut b = random(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// A two-word name, as the gateway makes one when none is asked.
fn petname() -> String {
    const FIRST: [&str; 16] = [
        "brave", "calm", "eager", "fancy", "gentle", "happy", "jolly", "kind", "lively", "merry", "proud", "quiet",
        "swift", "witty", "zesty", "bold",
    ];
    const SECOND: [&str; 16] = [
        "otter", "falcon", "badger", "heron", "lynx", "marten", "osprey", "panda", "quokka", "raven", "salmon",
        "tapir", "walrus", "yak", "zebra", "gecko",
    ];
    let r = random(2);
    format!("{}-{}", FIRST[usize::from(r[0]) % FIRST.len()], SECOND[usize::from(r[1]) % SECOND.len()])
}

fn now_ms() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The one workspace this gateway has.
fn workspace(asked: &str) -> Result<(), Status> {
    if asked.is_empty() || asked == WORKSPACE {
        Ok(())
    } else {
        Err(Status::not_found(format!("workspace '{asked}' not found")))
    }
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited field `tag` holding `bytes`.
fn len_field(tag: u32, bytes: &[u8], out: &mut Vec<u8>) {
    varint(u64::from(tag << 3 | 2), out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// A sandbox's encoding built by hand, so its template carries a field the
/// protos do not define.
fn with_unknown_field(s: &Sandbox) -> Vec<u8> {
    let mut spec = s.spec.clone().unwrap_or_default();
    let mut template = spec.template.take().unwrap_or_default().encode_to_vec();
    template.extend_from_slice(&UNKNOWN_FIELD);
    let mut spec_bytes = spec.encode_to_vec();
    len_field(6, &template, &mut spec_bytes);
    let mut out = Vec::new();
    if let Some(m) = &s.metadata {
        len_field(1, &m.encode_to_vec(), &mut out);
    }
    len_field(2, &spec_bytes, &mut out);
    if let Some(st) = &s.status {
        len_field(3, &st.encode_to_vec(), &mut out);
    }
    out
}

/// Lower-case hex SHA-256 of the policy's encoding (its maps sorted).
fn policy_hash(p: &SandboxPolicy) -> String {
    hex::encode(Sha256::digest(p.encode_to_vec()))
}

/// A rule to `host` on 443.
fn rule(name: &str, host: &str) -> NetworkPolicyRule {
    NetworkPolicyRule {
        name: name.into(),
        endpoints: vec![NetworkEndpoint { host: host.into(), port: 443, ..NetworkEndpoint::default() }],
        ..NetworkPolicyRule::default()
    }
}

fn string_value(s: &str) -> prost_types::Value {
    prost_types::Value { kind: Some(prost_types::value::Kind::StringValue(s.into())) }
}

/// Docker's `--cpus` for `nano` billionths of a core, at most the host's CPUs.
fn docker_cpus(nano: i64) -> String {
    let host = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let host = i64::try_from(host).unwrap_or(1).saturating_mul(1_000_000_000);
    let milli = nano.clamp(10_000_000, host) / 1_000_000;
    format!("{}.{:03}", milli / 1000, milli % 1000)
}

impl Fake {
    /// A fake over `backing`, misbehaving as `mode` says.
    pub fn new(backing: Arc<Backing>, mode: Option<Mode>) -> Fake {
        Fake {
            backing,
            mode,
            sandboxes: Mutex::new(BTreeMap::new()),
            driver_version: tokio::sync::OnceCell::new(),
            execs: std::sync::atomic::AtomicU64::new(0),
            ssh: Mutex::new(std::collections::HashMap::new()),
            forwards: Mutex::new(forward::Forwards::default()),
            port: std::sync::atomic::AtomicU16::new(0),
        }
    }

    /// The image every sandbox runs, pinned by its ID.
    fn image(&self) -> String {
        format!("plimsoll-sandbox@{}", self.backing.image())
    }

    /// A record as the gateway shows it: its status derived from its backend.
    fn view(&self, r: &Record) -> Sandbox {
        let (phase, status, reason, message) = match &r.backend {
            Backend::Starting => (SandboxPhase::Provisioning, "False", "Starting", "Docker container is starting"),
            Backend::Running if self.mode == Some(Mode::NeverReady) => (
                SandboxPhase::Provisioning,
                "False",
                "SupervisorNotConnected",
                "Backend ready; waiting for supervisor session",
            ),
            Backend::Running => (SandboxPhase::Ready, "True", "BackendReady", "Container is running"),
            Backend::Failed { reason, message } => (SandboxPhase::Error, "False", reason.as_str(), message.as_str()),
        };
        let id = r.sandbox.metadata.as_ref().map(|m| m.id.as_str()).unwrap_or_default();
        let has_policy = r.sandbox.spec.as_ref().is_some_and(|s| s.policy.is_some());
        let mut s = r.sandbox.clone();
        s.status = Some(SandboxStatus {
            sandbox_name: format!("plimsoll-fake-{id}"),
            conditions: vec![SandboxCondition {
                r#type: "Ready".into(),
                status: status.into(),
                reason: reason.into(),
                message: message.into(),
                last_transition_time: String::new(),
            }],
            phase: phase as i32,
            current_policy_version: u32::from(phase == SandboxPhase::Ready && has_policy),
            ..SandboxStatus::default()
        });
        s
    }

    /// A record as a read-back shows it, weakened in `weaker` mode.
    fn read_back(&self, r: &Record) -> Sandbox {
        let mut s = self.view(r);
        if self.mode == Some(Mode::Weaker)
            && let Some(spec) = s.spec.as_mut()
        {
            let t = spec.template.get_or_insert_with(Default::default);
            let limits = prost_types::Struct {
                fields: [("cpu".to_string(), string_value("8")), ("memory".to_string(), string_value("16Gi"))].into(),
            };
            let resources = t.resources.get_or_insert_with(Default::default);
            resources.fields.insert(
                "limits".into(),
                prost_types::Value { kind: Some(prost_types::value::Kind::StructValue(limits)) },
            );
            let policy = spec.policy.get_or_insert_with(|| SandboxPolicy { version: 1, ..SandboxPolicy::default() });
            policy.network_policies.insert("egress".into(), rule("egress", "*"));
        }
        s
    }

    /// A `SandboxResponse` with the read-back of `r`.
    fn sandbox_response(&self, r: &Record) -> Vec<u8> {
        let sandbox = self.read_back(r);
        if self.mode != Some(Mode::UnknownField) {
            return SandboxResponse { sandbox: Some(sandbox) }.encode_to_vec();
        }
        let mut out = Vec::new();
        len_field(1, &with_unknown_field(&sandbox), &mut out);
        out
    }

    async fn driver_version(&self) -> String {
        let v = self.driver_version.get_or_init(|| async { self.backing.docker_version().await.unwrap_or_default() });
        let v = v.await;
        if v.is_empty() { "unknown".into() } else { v.clone() }
    }

    async fn gateway_info(&self) -> Vec<u8> {
        let driver = if self.mode == Some(Mode::ForeignDriver) { "kubernetes" } else { "docker" };
        proto::GetGatewayInfoResponse {
            status: proto::ServiceStatus::Healthy as i32,
            gateway_version: VERSION.into(),
            compute_drivers: vec![proto::ComputeDriverInfo {
                name: driver.into(),
                capabilities: Some(proto::ComputeDriverCapabilities {
                    driver_name: driver.into(),
                    driver_version: self.driver_version().await,
                }),
            }],
        }
        .encode_to_vec()
    }

    /// The gateway's settings, as configured for this fake.
    fn gateway_settings(&self) -> BTreeMap<String, SettingValue> {
        let v = |s: Setting| SettingValue { value: Some(s) };
        [
            ("agent_policy_proposals_enabled", v(Setting::BoolValue(self.mode == Some(Mode::Proposals)))),
            ("proposal_approval_mode", v(Setting::StringValue("manual".into()))),
            ("providers_v2_enabled", v(Setting::BoolValue(false))),
            ("ocsf_json_enabled", v(Setting::BoolValue(false))),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// CreateSandbox's checks and normalisation, as the gateway makes them:
    /// the sandbox to store and the container to back it.
    fn plan(&self, req: CreateSandboxRequest) -> Result<(Sandbox, Shape), Status> {
        let mut spec = req.spec.ok_or_else(|| Status::invalid_argument("spec is required"))?;
        if spec.command.is_empty() {
            spec.command = vec!["/bin/bash".into(), "-l".into()];
            spec.tty = true;
        }
        validate::spec(&req.name, &spec)?;
        for (k, v) in &req.labels {
            validate::label_key(k)?;
            validate::label_value(v)?;
        }
        validate::annotations(&req.annotations)?;
        workspace(&req.workspace)?;
        if let Some(p) = spec.providers.first() {
            return Err(Status::failed_precondition(format!("provider '{p}' not found")));
        }
        let template = spec.template.get_or_insert_with(Default::default);
        if template.image.is_empty() {
            template.image = self.image();
        }
        if let Some(policy) = spec.policy.as_mut() {
            // Provider-credentialed markers are the gateway's own, never the caller's.
            for r in policy.network_policies.values_mut() {
                r.endpoints.iter_mut().for_each(|e| e.provider_credentialed = false);
            }
            validate::policy(policy)?;
        }
        let docker = docker::read(&spec)?;
        let memory = docker.memory_bytes.and_then(|m| u64::try_from(m).ok()).unwrap_or(MAX_MEMORY).min(MAX_MEMORY);
        let memory_mb = u32::try_from(memory >> 20).unwrap_or(u32::MAX);
        let id = uuid4();
        let name = if req.name.is_empty() { self.free_name() } else { req.name };
        let mut env: Vec<(String, String)> = spec
            .template
            .iter()
            .flat_map(|t| t.environment.clone())
            .filter(|(k, _)| !spec.environment.contains_key(k))
            .chain(spec.environment.clone())
            .collect();
        env.extend([("OPENSHELL_SANDBOX_ID".into(), id.clone()), ("OPENSHELL_SANDBOX".into(), name.clone())]);
        let shape = Shape {
            memory_bytes: memory,
            cpus: docker.nano_cpus.map(docker_cpus),
            disk_mb: HOME_MB.min(memory_mb / 2).max(16),
            tmpfs: docker.tmpfs,
            env,
            egress: None,
        };
        let sandbox = Sandbox {
            metadata: Some(ObjectMeta {
                id,
                name,
                created_at_ms: now_ms(),
                labels: req.labels,
                resource_version: 1,
                annotations: req.annotations,
                workspace: WORKSPACE.into(),
                deletion_timestamp_ms: 0,
            }),
            spec: Some(spec),
            status: None,
        };
        Ok((sandbox, shape))
    }

    /// Whether `image` is the backing image: `<name>@sha256:<64 hex>` with its ID.
    fn runs(&self, image: &str) -> bool {
        image.split_once('@').is_some_and(|(name, digest)| {
            let hex = digest.strip_prefix("sha256:").unwrap_or_default();
            !name.is_empty()
                && hex.len() == 64
                && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && digest == self.backing.image()
        })
    }

    /// A generated name no sandbox has.
    fn free_name(&self) -> String {
        let all = lock(&self.sandboxes);
        let mut name = petname();
        while Fake::by_name(&all, &name).is_some() {
            name = format!("{}-{}", petname(), hex::encode(random(1)));
        }
        name
    }

    async fn create(self: Arc<Self>, req: CreateSandboxRequest) -> Result<Vec<u8>, Status> {
        let (sandbox, shape) = self.plan(req)?;
        let image = sandbox.spec.as_ref().and_then(|s| s.template.as_ref()).map(|t| t.image.clone());
        let (id, name) = sandbox.metadata.as_ref().map(|m| (m.id.clone(), m.name.clone())).unwrap_or_default();
        let answer = {
            let mut all = lock(&self.sandboxes);
            if Fake::by_name(&all, &name).is_some() {
                return Err(Status::new(Code::AlreadyExists, format!("sandbox '{name}' already exists")));
            }
            let image = image.unwrap_or_default();
            if !self.runs(&image) {
                return Err(Status::failed_precondition(format!(
                    "pull Docker image '{image}' failed: image not found (this gateway runs only {})",
                    self.image()
                )));
            }
            let record = Record { sandbox, backend: Backend::Starting, config_reads: 0 };
            // The answer is the sandbox as stored; the modes that lie do so in
            // the read-backs.
            let answer = SandboxResponse { sandbox: Some(self.view(&record)) }.encode_to_vec();
            all.insert(id.clone(), record);
            answer
        };
        // The container starts after the answer, as the driver's does: the
        // caller reads the sandbox until it is READY.
        let me = Arc::clone(&self);
        tokio::spawn(async move {
            let placed = me.backing.create(&id, &shape).await;
            let started = placed.is_ok();
            let kept = match lock(&me.sandboxes).get_mut(&id) {
                None => false,
                Some(r) => {
                    r.backend = match placed {
                        Ok(()) => Backend::Running,
                        Err(e) => {
                            eprintln!("plimsoll-fake openshell: starting {id} failed: {e}");
                            Backend::Failed { reason: "ContainerCreateFailed".into(), message: e }
                        }
                    };
                    if let Some(m) = r.sandbox.metadata.as_mut() {
                        m.resource_version += 1;
                    }
                    true
                }
            };
            if started && !kept {
                // Deleted while it started: its container goes too.
                let _ = me.backing.remove(&id).await;
            }
        });
        Ok(answer)
    }

    fn by_name<'a>(all: &'a BTreeMap<String, Record>, name: &str) -> Option<(&'a String, &'a Record)> {
        all.iter().find(|(_, r)| r.sandbox.metadata.as_ref().is_some_and(|m| m.name == name))
    }

    fn get(&self, req: &GetSandboxRequest) -> Result<Vec<u8>, Status> {
        if req.name.is_empty() {
            return Err(Status::invalid_argument("name is required"));
        }
        workspace(&req.workspace)?;
        let all = lock(&self.sandboxes);
        let (_, r) = Fake::by_name(&all, &req.name).ok_or_else(|| Status::not_found("sandbox not found"))?;
        if self.mode == Some(Mode::Malformed) {
            // Field 1, length-delimited, its length a varint that never ends.
            return Ok(vec![0x0a, 0x80]);
        }
        Ok(self.sandbox_response(r))
    }

    fn list(&self, req: &ListSandboxesRequest) -> Result<Vec<u8>, Status> {
        if req.all_workspaces && !req.workspace.is_empty() {
            return Err(Status::invalid_argument("all_workspaces and workspace are mutually exclusive"));
        }
        workspace(&req.workspace)?;
        let wanted = validate::selector(&req.label_selector)?;
        let limit = if req.limit == 0 { 100 } else { req.limit.min(1000) };
        let all = lock(&self.sandboxes);
        let mut matching: Vec<&Record> = all
            .values()
            .filter(|r| {
                let labels = r.sandbox.metadata.as_ref().map(|m| &m.labels);
                wanted.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
            })
            .collect();
        matching.sort_by_key(|r| r.sandbox.metadata.as_ref().map(|m| (m.created_at_ms, m.name.clone())));
        let page = matching.into_iter().skip(req.offset as usize).take(limit as usize).map(|r| self.read_back(r));
        if self.mode != Some(Mode::UnknownField) {
            return Ok(ListSandboxesResponse { sandboxes: page.collect() }.encode_to_vec());
        }
        let mut out = Vec::new();
        for s in page {
            len_field(1, &with_unknown_field(&s), &mut out);
        }
        Ok(out)
    }

    async fn delete(&self, req: &DeleteSandboxRequest) -> Result<Vec<u8>, Status> {
        if req.name.is_empty() {
            return Err(Status::invalid_argument("name is required"));
        }
        workspace(&req.workspace)?;
        let (id, starting) = {
            let all = lock(&self.sandboxes);
            let (id, r) = Fake::by_name(&all, &req.name).ok_or_else(|| Status::not_found("sandbox not found"))?;
            (id.clone(), r.backend == Backend::Starting)
        };
        if self.mode == Some(Mode::Undeletable) {
            return Err(Status::internal(format!(
                "delete sandbox failed: removing container plimsoll-fake-{id}: device or resource busy"
            )));
        }
        if self.mode == Some(Mode::SlowDelete) {
            tokio::time::sleep(SLOW_DELETE).await;
        }
        let removed =
            self.backing.remove(&id).await.map_err(|e| Status::internal(format!("delete sandbox failed: {e}")))?;
        lock(&self.sandboxes).remove(&id);
        // A sandbox still starting is deleted by cancelling its start.
        Ok(DeleteSandboxResponse { deleted: removed || starting }.encode_to_vec())
    }

    fn sandbox_config(&self, req: &proto::GetSandboxConfigRequest) -> Result<Vec<u8>, Status> {
        let (policy, reads) = {
            let mut all = lock(&self.sandboxes);
            let r = all.get_mut(&req.sandbox_id).ok_or_else(|| Status::not_found("sandbox not found"))?;
            r.config_reads += 1;
            (r.sandbox.spec.as_ref().and_then(|s| s.policy.clone()), r.config_reads)
        };
        let drift = match self.mode {
            Some(Mode::PolicyDrift) => true,
            Some(Mode::LateDrift) => reads >= 3,
            _ => false,
        };
        let policy = if drift {
            let mut p = policy.unwrap_or(SandboxPolicy { version: 1, ..SandboxPolicy::default() });
            p.network_policies.insert("drift".into(), rule("drift", "drift.openshell.test"));
            Some(p)
        } else {
            policy
        };
        let settings = self
            .gateway_settings()
            .into_iter()
            .map(|(k, v)| (k, EffectiveSetting { value: Some(v), scope: SettingScope::Global as i32 }))
            .collect();
        Ok(proto::GetSandboxConfigResponse {
            version: u32::from(policy.is_some()),
            policy_hash: policy.as_ref().map(policy_hash).unwrap_or_default(),
            policy,
            settings,
            config_revision: 1,
            policy_source: if drift { PolicySource::Global } else { PolicySource::Sandbox } as i32,
            global_policy_version: u32::from(drift),
            workspace: WORKSPACE.into(),
            policy_validation_failure_mode: "fail_closed".into(),
            ..proto::GetSandboxConfigResponse::default()
        }
        .encode_to_vec())
    }

    /// Answers one unary call with its encoded response.
    async fn unary(self: Arc<Self>, method: &str, body: &[u8]) -> Result<Vec<u8>, Status> {
        match method {
            "Health" => {
                grpc::request::<proto::HealthRequest>(body)?;
                Ok(proto::HealthResponse { status: proto::ServiceStatus::Healthy as i32, version: VERSION.into() }
                    .encode_to_vec())
            }
            "GetGatewayInfo" => {
                grpc::request::<proto::GetGatewayInfoRequest>(body)?;
                Ok(self.gateway_info().await)
            }
            "GetGatewayConfig" => {
                grpc::request::<proto::GetGatewayConfigRequest>(body)?;
                Ok(proto::GetGatewayConfigResponse { settings: self.gateway_settings(), settings_revision: 1 }
                    .encode_to_vec())
            }
            "CreateSandbox" => self.create(grpc::request(body)?).await,
            "GetSandbox" => self.get(&grpc::request(body)?),
            "ListSandboxes" => self.list(&grpc::request(body)?),
            "DeleteSandbox" => self.delete(&grpc::request(body)?).await,
            "GetSandboxConfig" => self.sandbox_config(&grpc::request(body)?),
            "CreateSshSession" => self.create_ssh_session(&grpc::request(body)?),
            "RevokeSshSession" => self.revoke_ssh_session(&grpc::request(body)?),
            _ => Err(Status::new(Code::Unimplemented, "")),
        }
    }
}

impl Handler for Fake {
    fn settings(&self, port: u16, pki: &Pki) -> Vec<(String, String)> {
        self.port.store(port, std::sync::atomic::Ordering::Relaxed);
        vec![
            ("SANDBOX_PROVIDER".into(), "openshell".into()),
            ("SANDBOX_OPENSHELL_GATEWAY_URL".into(), format!("https://{HOST}:{port}")),
            ("SANDBOX_OPENSHELL_CA_FILE".into(), pki.ca_file.display().to_string()),
            ("SANDBOX_OPENSHELL_CERT_FILE".into(), pki.client_cert_file.display().to_string()),
            ("SANDBOX_OPENSHELL_KEY_FILE".into(), pki.client_key_file.display().to_string()),
            // The image every sandbox runs, pinned as an operator pins theirs.
            ("SANDBOX_OPENSHELL_IMAGE".into(), self.image()),
            ("SANDBOX_OPENSHELL_CONNECT_TO".into(), "127.0.0.1".into()),
        ]
    }

    /// ForwardTcp is a bidirectional stream: its frames are read as they come.
    fn streams(&self, path: &str) -> bool {
        path.strip_prefix(SERVICE) == Some("ForwardTcp")
    }

    fn handle(self: Arc<Self>, req: Request) -> std::pin::Pin<Box<dyn Future<Output = http::Response<Body>> + Send>> {
        Box::pin(async move {
            if self.mode == Some(Mode::Redirect) {
                return server::redirect("https://elsewhere.openshell.test/");
            }
            if let Some(refused) = grpc::refusal(&req.headers) {
                return refused;
            }
            let Some(method) = req.path.strip_prefix(SERVICE).map(str::to_string) else {
                return grpc::trailers_only(&Status::new(Code::Unimplemented, ""));
            };
            if method == "ExecSandbox" {
                return self.exec(&req.body);
            }
            if method == "ForwardTcp" {
                return self.forward(req.stream).await;
            }
            if self.mode == Some(Mode::Slow) {
                tokio::time::sleep(Duration::from_secs(35)).await;
            }
            match self.unary(&method, &req.body).await {
                Ok(answer) => grpc::unary(&answer),
                Err(e) => grpc::trailers_only(&e),
            }
        })
    }
}
