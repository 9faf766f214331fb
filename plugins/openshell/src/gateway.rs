//! The OpenShell gateway's API (`openshell.v1.OpenShell`, its published protos)
//! as this plugin speaks it: the messages it writes, the read-back it takes
//! strictly, and one function per call.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::grpc::{self, Failed, NOT_FOUND, Next};
use crate::pb::{Fields, Json, Writer, parse};

/// How long one unary call may take.
const CALL: Duration = Duration::from_secs(20);

/// `SandboxPhase`.
pub const READY: i32 = 2;
pub const ERROR: i32 = 3;
/// `PolicySource::SANDBOX`: the policy is the sandbox's own, not a global one.
const SOURCE_SANDBOX: i32 = 1;

/// `FilesystemPolicy`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filesystem {
    pub include_workdir: bool,
    pub read_only: Vec<String>,
    pub read_write: Vec<String>,
}

/// `SandboxPolicy`, with its network rules and middlewares by name only: the
/// only policy plimsoll accepts has none.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policy {
    pub version: u32,
    pub filesystem: Option<Filesystem>,
    /// `LandlockPolicy.compatibility`.
    pub landlock: Option<String>,
    /// `ProcessPolicy`: user and group.
    pub process: Option<(String, String)>,
    pub network_policies: Vec<String>,
    pub network_middlewares: Vec<String>,
}

/// `SandboxTemplate`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Template {
    pub image: String,
    pub runtime_class_name: String,
    pub agent_socket: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub environment: BTreeMap<String, String>,
    pub resources: Option<Json>,
    pub user_namespaces: Option<bool>,
    pub driver_config: Option<Json>,
}

/// `SandboxSpec`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spec {
    pub log_level: String,
    pub environment: BTreeMap<String, String>,
    pub template: Option<Template>,
    pub policy: Option<Policy>,
    pub providers: Vec<String>,
    /// Whether it carries `resource_requirements` (GPUs) at all.
    pub gpu: bool,
    pub command: Vec<String>,
    pub tty: bool,
}

/// A sandbox as the gateway reads it back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sandbox {
    /// `metadata.id`: what exec and the config take.
    pub id: String,
    /// `metadata.name`: what get and delete take.
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub created_ms: i64,
    pub spec: Spec,
    pub phase: i32,
    /// The `Ready` condition's reason and message, if any.
    pub why: String,
}

impl Policy {
    fn write(&self) -> Writer {
        let mut w = Writer::default();
        w.uint(1, u64::from(self.version));
        if let Some(f) = &self.filesystem {
            let mut fw = Writer::default();
            fw.boolean(1, f.include_workdir).strings(2, &f.read_only).strings(3, &f.read_write);
            w.message(2, &fw);
        }
        if let Some(c) = &self.landlock {
            let mut lw = Writer::default();
            lw.string(1, c);
            w.message(3, &lw);
        }
        if let Some((user, group)) = &self.process {
            let mut pw = Writer::default();
            pw.string(1, user).string(2, group);
            w.message(4, &pw);
        }
        w
    }

    fn read(bytes: &[u8]) -> Result<Policy, String> {
        let mut f = parse(bytes, "sandbox policy")?;
        let mut p = Policy { version: f.uint(1)? as u32, ..Policy::default() };
        if let Some(b) = f.message(2)? {
            let mut fs = parse(b, "filesystem policy")?;
            p.filesystem = Some(Filesystem {
                include_workdir: fs.boolean(1)?,
                read_only: fs.strings(2)?,
                read_write: fs.strings(3)?,
            });
            fs.done()?;
        }
        if let Some(b) = f.message(3)? {
            let mut l = parse(b, "landlock policy")?;
            p.landlock = Some(l.string(1)?);
            l.done()?;
        }
        if let Some(b) = f.message(4)? {
            let mut pr = parse(b, "process policy")?;
            p.process = Some((pr.string(1)?, pr.string(2)?));
            pr.done()?;
        }
        p.network_policies = f.map_entries(5, "network policy")?.into_keys().collect();
        p.network_middlewares = f.map_entries(6, "network middleware")?.into_keys().collect();
        f.done()?;
        Ok(p)
    }
}

impl Template {
    fn write(&self) -> Writer {
        let mut w = Writer::default();
        w.string(1, &self.image).string(2, &self.runtime_class_name).string(3, &self.agent_socket);
        w.map(4, &self.labels).map(5, &self.annotations).map(6, &self.environment);
        if let Some(r) = &self.resources {
            w.message(7, &r.write_struct());
        }
        if let Some(u) = self.user_namespaces {
            w.present_bool(10, u);
        }
        if let Some(d) = &self.driver_config {
            w.message(11, &d.write_struct());
        }
        w
    }

    fn read(bytes: &[u8]) -> Result<Template, String> {
        let mut f = parse(bytes, "sandbox template")?;
        let struct_at = |f: &mut Fields<'_>, n: u32| f.message(n)?.map(Json::read_struct).transpose();
        let t = Template {
            image: f.string(1)?,
            runtime_class_name: f.string(2)?,
            agent_socket: f.string(3)?,
            labels: f.map(4, "template label")?,
            annotations: f.map(5, "template annotation")?,
            environment: f.map(6, "template environment")?,
            resources: struct_at(&mut f, 7)?,
            user_namespaces: f.present_uint(10)?.map(|v| v != 0),
            driver_config: struct_at(&mut f, 11)?,
        };
        f.done()?;
        Ok(t)
    }
}

impl Spec {
    fn write(&self) -> Writer {
        let mut w = Writer::default();
        w.string(1, &self.log_level).map(5, &self.environment);
        if let Some(t) = &self.template {
            w.message(6, &t.write());
        }
        if let Some(p) = &self.policy {
            w.message(7, &p.write());
        }
        w.strings(8, &self.providers).strings(12, &self.command).boolean(13, self.tty);
        w
    }

    fn read(bytes: &[u8]) -> Result<Spec, String> {
        let mut f = parse(bytes, "sandbox spec")?;
        let s = Spec {
            log_level: f.string(1)?,
            environment: f.map(5, "sandbox environment")?,
            template: f.message(6)?.map(Template::read).transpose()?,
            policy: f.message(7)?.map(Policy::read).transpose()?,
            providers: f.strings(8)?,
            gpu: f.message(9)?.is_some(),
            command: f.strings(12)?,
            tty: f.boolean(13)?,
        };
        f.done()?;
        Ok(s)
    }
}

/// The metadata of a sandbox, read leniently (the gateway adds to it freely).
fn metadata(bytes: &[u8]) -> Result<(String, String, BTreeMap<String, String>, i64), String> {
    let mut m = parse(bytes, "sandbox metadata")?;
    Ok((m.string(1)?, m.string(2)?, m.map(4, "sandbox label")?, m.uint(3)? as i64))
}

impl Sandbox {
    /// A `Sandbox`: its spec strictly, the rest leniently.
    fn read(bytes: &[u8]) -> Result<Sandbox, String> {
        let mut f = parse(bytes, "sandbox")?;
        let (id, name, labels, created_ms) = metadata(f.message(1)?.unwrap_or_default())?;
        let spec = Spec::read(f.message(2)?.unwrap_or_default())?;
        let mut s = Sandbox { id, name, labels, created_ms, spec, ..Sandbox::default() };
        if let Some(st) = f.message(3)? {
            let mut st = parse(st, "sandbox status")?;
            s.phase = st.int32(6)?;
            for c in st.messages(5)? {
                let mut c = parse(c, "sandbox condition")?;
                if c.string(1)? == "Ready" {
                    let (reason, message) = (c.string(3)?, c.string(4)?);
                    s.why = if message.is_empty() { reason } else { format!("{reason}: {message}") };
                }
            }
        }
        Ok(s)
    }

    /// From a `SandboxResponse`.
    fn from_response(bytes: &[u8]) -> Result<Sandbox, String> {
        let mut f = parse(bytes, "sandbox response")?;
        Sandbox::read(f.message(1)?.ok_or("the gateway's sandbox response carries no sandbox")?)
    }
}

/// The gateway's compute driver: (name, the driver's own name, its version).
pub fn driver() -> Result<(String, String, String), String> {
    let answer = grpc::call("GetGatewayInfo", &[], CALL)?;
    let mut f = parse(&answer, "gateway info")?;
    let drivers = f.messages(3)?;
    let [one] = drivers.as_slice() else {
        return Err(format!("the gateway names {} compute drivers, not one", drivers.len()));
    };
    let mut d = parse(one, "compute driver")?;
    let name = d.string(1)?;
    let mut caps = parse(d.message(2)?.unwrap_or_default(), "driver capabilities")?;
    Ok((name, caps.string(1)?, caps.string(2)?))
}

/// Whether agent policy proposals are provably off: the setting is there, and
/// `false` or without a value. Anything else is refused.
pub fn proposals_off() -> Result<(), String> {
    const KEY: &str = "agent_policy_proposals_enabled";
    let answer = grpc::call("GetGatewayConfig", &[], CALL)?;
    let mut f = parse(&answer, "gateway config")?;
    let settings = f.map_entries(1, "gateway setting")?;
    let value = settings.get(KEY).ok_or_else(|| {
        format!("the gateway does not report {KEY}, so agents' policy proposals cannot be shown to be off")
    })?;
    let mut v = parse(value, "setting value")?;
    let on = v.present_uint(2)?;
    match (on, v.done().is_ok()) {
        (Some(0) | None, true) => Ok(()),
        (Some(_), true) => Err(format!("the gateway has {KEY} on: an agent could propose loosening its own policy")),
        (_, false) => Err(format!("the gateway's {KEY} is not a boolean")),
    }
}

/// Creates sandbox `name` with `labels` and `spec`; the gateway's answer.
pub fn create(name: &str, labels: &BTreeMap<String, String>, spec: &Spec) -> Result<Sandbox, String> {
    let mut w = Writer::default();
    w.message(1, &spec.write()).string(2, name).map(3, labels);
    let answer = grpc::call("CreateSandbox", &w.into_bytes(), CALL)?;
    Sandbox::from_response(&answer)
}

/// Sandbox `name` read back; None when the gateway has none.
pub fn get(name: &str) -> Result<Option<Sandbox>, String> {
    let mut w = Writer::default();
    w.string(1, name);
    match grpc::call("GetSandbox", &w.into_bytes(), CALL) {
        Ok(answer) => Sandbox::from_response(&answer).map(Some),
        Err(Failed::Status { code: NOT_FOUND, .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Deletes sandbox `name`; Ok also when it was already gone.
pub fn delete(name: &str) -> Result<(), String> {
    let mut w = Writer::default();
    w.string(1, name);
    match grpc::call("DeleteSandbox", &w.into_bytes(), CALL) {
        Ok(_) | Err(Failed::Status { code: NOT_FOUND, .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The most sandboxes one sweep lists.
const LIST_PAGE: u32 = 100;
const MAX_PAGES: u32 = 20;

/// A sandbox as a listing names it.
pub struct Listed {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// When it was made, in milliseconds since the epoch.
    pub created_ms: i64,
}

/// The sandboxes whose labels hold every pair of `selector`.
pub fn list(selector: &str) -> Result<Vec<Listed>, String> {
    let mut out = Vec::new();
    for page in 0..MAX_PAGES {
        let mut w = Writer::default();
        w.uint(1, u64::from(LIST_PAGE)).uint(2, u64::from(page * LIST_PAGE)).string(3, selector);
        let answer = grpc::call("ListSandboxes", &w.into_bytes(), CALL)?;
        let mut f = parse(&answer, "sandbox list")?;
        let sandboxes = f.messages(1)?;
        for s in &sandboxes {
            let mut s = parse(s, "listed sandbox")?;
            let (_, name, labels, created_ms) = metadata(s.message(1)?.unwrap_or_default())?;
            out.push(Listed { name, labels, created_ms });
        }
        if sandboxes.len() < LIST_PAGE as usize {
            break;
        }
    }
    Ok(out)
}

/// The policy the sandbox's supervisor enforces, as the gateway reports it.
#[derive(Debug, PartialEq)]
pub struct Effective {
    pub policy: Option<Policy>,
    /// The gateway's SHA-256 of it, in hex.
    pub hash: String,
    /// Whether it is the sandbox's own policy (not a global one).
    pub own: bool,
}

/// The effective policy of the sandbox whose id is `id`.
pub fn effective(id: &str) -> Result<Effective, String> {
    let mut w = Writer::default();
    w.string(1, id);
    let answer = grpc::call("GetSandboxConfig", &w.into_bytes(), CALL)?;
    let mut f = parse(&answer, "sandbox config")?;
    Ok(Effective {
        policy: f.message(1)?.map(Policy::read).transpose()?,
        hash: f.string(3)?,
        own: f.int32(6)? == SOURCE_SANDBOX,
    })
}

/// What one exec gave.
#[derive(Debug, Default)]
pub struct Exec {
    /// None when the deadline passed first (the stream was cancelled).
    pub exit_code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// A stream went past the cap (its rest was dropped).
    pub cut: bool,
}

/// A token for forwards into sandbox `id` (`CreateSshSession`); the gateway
/// lets one token carry 3 forwards at once.
pub fn forward_token(id: &str) -> Result<String, String> {
    let mut w = Writer::default();
    w.string(1, id);
    let answer = grpc::call("CreateSshSession", &w.into_bytes(), CALL)?;
    let mut f = parse(&answer, "SSH session")?;
    let (for_id, token) = (f.string(1)?, f.string(2)?);
    if for_id != id || token.is_empty() {
        return Err(format!("the gateway's SSH session is for sandbox {for_id:?}, or carries no token"));
    }
    Ok(token)
}

/// Withdraws a forward token (`RevokeSshSession`).
pub fn revoke(token: &str) -> Result<(), String> {
    let mut w = Writer::default();
    w.string(1, token);
    grpc::call("RevokeSshSession", &w.into_bytes(), CALL).map(|_| ()).map_err(String::from)
}

/// The field of a `TcpForwardFrame` that carries a connection's bytes.
pub const FORWARD_DATA: u32 = 2;

/// Has the host carry the run's grant in: `count` forwards (`ForwardTcp`) on
/// `token` to loopback port `port` of sandbox `id`.
pub fn forward(id: &str, port: u16, token: &str, count: u32) -> Result<(), String> {
    grpc::relay("ForwardTcp", &forward_init(id, port, token), FORWARD_DATA, count)
}

/// The first frame of a forward: `TcpForwardFrame { init: TcpForwardInit {
/// sandbox_id, tcp: { host 127.0.0.1, port }, authorization_token } }`.
fn forward_init(id: &str, port: u16, token: &str) -> Vec<u8> {
    let mut target = Writer::default();
    target.string(1, "127.0.0.1").uint(2, u64::from(port));
    let mut init = Writer::default();
    init.string(1, id).message(6, &target).string(7, token);
    let mut frame = Writer::default();
    frame.message(1, &init);
    frame.into_bytes()
}

/// Runs `argv` in sandbox `id` (by metadata id) with `stdin`, until `deadline`
/// (then the stream is cancelled, which ends the command's process group);
/// each stream keeps `cap` bytes.
pub fn exec(id: &str, argv: &[String], stdin: &[u8], deadline: Instant, cap: usize) -> Result<Exec, String> {
    let mut w = Writer::default();
    w.string(1, id).strings(2, argv).bytes(6, stdin);
    let budget = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(5);
    let mut stream = grpc::open("ExecSandbox", &w.into_bytes(), budget)?;
    let mut out = Exec::default();
    loop {
        match stream.next(deadline)? {
            Next::Message(m) => {
                let mut f = parse(&m, "exec event")?;
                let keep = |buf: &mut Vec<u8>, data: Vec<u8>, cut: &mut bool| {
                    let room = cap.saturating_sub(buf.len());
                    *cut |= data.len() > room;
                    buf.extend_from_slice(&data[..data.len().min(room)]);
                };
                if let Some(b) = f.message(1)? {
                    keep(&mut out.stdout, parse(b, "exec stdout")?.bytes(1)?, &mut out.cut);
                } else if let Some(b) = f.message(2)? {
                    keep(&mut out.stderr, parse(b, "exec stderr")?.bytes(1)?, &mut out.cut);
                } else if let Some(b) = f.message(3)? {
                    if out.exit_code.is_some() {
                        return Err("the gateway sent the command's exit twice".into());
                    }
                    out.exit_code = Some(parse(b, "exec exit")?.int32(1)?);
                }
            }
            Next::End if out.exit_code.is_some() => return Ok(out),
            Next::End => return Err("the gateway's exec stream ended without the command's exit".into()),
            // Dropping the stream cancels it.
            Next::Late => return Ok(Exec { exit_code: None, ..out }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwards_first_frame_names_the_sandbox_a_loopback_port_and_the_token() {
        let frame = forward_init("sb", 40001, "tok");
        let mut f = parse(&frame, "frame").expect("a message");
        let mut init = parse(f.message(1).expect("init").expect("present"), "init").expect("a message");
        assert_eq!(init.string(1).expect("id"), "sb");
        let mut tcp = parse(init.message(6).expect("tcp").expect("present"), "tcp").expect("a message");
        assert_eq!(init.string(7).expect("token"), "tok");
        assert_eq!(tcp.string(1).expect("host"), "127.0.0.1");
        assert_eq!(tcp.uint(2).expect("port"), 40001);
        assert!(tcp.done().is_ok() && init.done().is_ok() && f.done().is_ok(), "nothing else");
    }

    fn spec() -> Spec {
        Spec {
            template: Some(Template {
                image: "img@sha256:00".into(),
                labels: BTreeMap::from([("a".into(), "b".into())]),
                resources: Some(Json::object([("limits", Json::object([("cpu", Json::String("1".into()))]))])),
                user_namespaces: Some(false),
                ..Template::default()
            }),
            policy: Some(Policy {
                version: 1,
                filesystem: Some(Filesystem {
                    include_workdir: false,
                    read_only: vec!["/usr".into()],
                    read_write: vec!["/tmp".into()],
                }),
                landlock: Some("hard_requirement".into()),
                process: Some(("61000".into(), "61000".into())),
                ..Policy::default()
            }),
            command: vec!["sleep".into(), "infinity".into()],
            ..Spec::default()
        }
    }

    #[test]
    fn a_spec_reads_back_as_written_even_an_explicit_false() {
        let s = spec();
        assert_eq!(Spec::read(&s.write().into_bytes()), Ok(s));
    }

    #[test]
    fn a_read_back_with_an_unknown_setting_or_a_network_rule_is_not_the_spec_sent() {
        let mut bytes = spec().write().into_bytes();
        // An unknown field 99 in the spec.
        bytes.extend_from_slice(&[0x98, 0x06, 0x01]);
        assert!(Spec::read(&bytes).is_err_and(|e| e.contains("field 99")));
        // A network rule named "egress".
        let mut rule = Writer::default();
        rule.string(1, "egress");
        let mut entry = Writer::default();
        entry.string(1, "egress").message(2, &rule);
        let mut policy = spec().policy.expect("policy").write();
        policy.message(5, &entry);
        let read = Policy::read(&policy.into_bytes()).expect("read");
        assert_eq!(read.network_policies, ["egress"]);
        assert_ne!(Some(read), spec().policy);
    }
}
