//! agentsandbox sessions: one claimed pod held for many calls, served by the
//! session agent from the sandbox image's programs. sandboxd takes an exec's
//! input whole, up front, so the agent is reached one exec per call
//! ([`plimsoll_plugin_agent::relayed`]): the first starts it, listening on a
//! Unix socket in the pod's `/tmp`, and every later one relays to it. The agent
//! keeps the interpreters between calls, sweeps every process of the guest's
//! but itself and them (sandboxd, the pod's main process, runs as root and is
//! not the guest's), and walks the guest's storage against the session's
//! budget, which the pod's memory-backed `/tmp` bounds.
//!
//! Before each call the pod and the network policies that select it are read
//! back: a pod that is gone, being deleted, replaced or no longer running, or
//! policies that are no longer those proved, end the session as
//! `sandbox_changed` before anything runs. Closing the session drops the claim,
//! deleted in the foreground; a daemon that crashed leaves a claim stamped
//! with its instance, which the next daemon's sweep deletes.

use std::time::{Duration, Instant};

use plimsoll_plugin_agent::relayed::{Done, ExecChannel, Execs};
use plimsoll_plugin_agent::runner::MemorySource;
use plimsoll_plugin_agent::session::{self as agent, Agent};
use plimsoll_plugin_remote::Remote;
use serde_json::Value;

use crate::exports::plimsoll::provider::provider::{
    Answer, CallError, Ending, Grant, GuestSession, RelayGrant, Session, SessionEnd,
};
use crate::plimsoll::types::types::{Evidence, File, Limits, Refusal, RefusalReason};
use crate::quantity::Quantity;
use crate::{
    Claimed, kube, readback, refused, relay_grant, session_cell, session_described, session_language,
    session_runner_project, session_snippet,
};

/// The session's work directory, in the pod's memory-backed `/tmp`.
const WORK: &str = "/tmp/plimsoll/work";
/// What a step of a session's project sees of its environment.
const GUEST_ENV: [&str; 3] = ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"];
/// The largest request one exec carries: sandboxd reads at most 64 MiB of
/// JSON, and the input travels in it as base64.
const MAX_STDIN: usize = 32 << 20;
/// What the agent's storage budget leaves free of `/tmp` for its socket, the
/// staged requests and the interpreters' own files.
const TMP_MARGIN_MIB: u32 = 8;

impl Execs for Claimed {
    fn exec(&self, argv: Vec<String>, stdin: &[u8], deadline: Instant, cap: usize) -> Result<Done, String> {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let e = self.sandboxd().exec(&argv, Some(stdin), left)?;
        let keep = |mut b: Vec<u8>| {
            b.truncate(cap);
            b
        };
        Ok(Done { exit_code: (!e.timed_out).then_some(e.exit_code), stdout: keep(e.stdout), stderr: keep(e.stderr) })
    }

    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        Remote::upload(self, path, bytes)
    }

    fn max_stdin(&self) -> usize {
        MAX_STDIN
    }

    fn exports(&self) -> &str {
        &self.exports
    }
}

/// One session: its claimed pod (the claim deleted when dropped), served by
/// the agent.
pub struct PodSession {
    agent: Agent<ExecChannel<Claimed>>,
    /// The pod's memory limit, which the runner keeps a project's steps under.
    memory_mib: u32,
    /// Where the guest's memory use is read: the container's cgroup under
    /// runc, the sandbox kernel's own accounting under gVisor and Kata.
    source: MemorySource,
}

fn ended(end: SessionEnd, detail: String) -> CallError {
    CallError::Ended(Ending { end, detail })
}

/// The pod's one container's memory limit, in MiB.
fn memory_mib(spec: &Value) -> Option<u32> {
    let limit = spec.pointer("/containers/0/resources/limits/memory")?;
    u32::try_from(Quantity::of(limit).ok()?.units() >> 20).ok().filter(|m| *m > 0)
}

/// The size of the memory-backed volume mounted at `/tmp`, in MiB.
fn tmp_mib(spec: &Value) -> Option<u32> {
    let mounts = spec.pointer("/containers/0/volumeMounts")?.as_array()?;
    let name = mounts.iter().find(|m| m.get("mountPath").and_then(Value::as_str) == Some("/tmp"))?.get("name")?;
    let volume = spec.get("volumes")?.as_array()?.iter().find(|v| v.get("name") == Some(name))?;
    let size = Quantity::of(volume.pointer("/emptyDir/sizeLimit")?).ok()?;
    u32::try_from(size.units() >> 20).ok()
}

impl PodSession {
    /// Claims a pod, reads it back as a run's, carries `grant` in (its relay
    /// started before the agent, whose sweep spares what was there before it),
    /// and starts the agent in it with a storage budget that fits the pod's `/tmp`.
    fn open(limits: &Limits, grant: Option<&RelayGrant>) -> Result<PodSession, Refusal> {
        let environment = |m: String| refused(RefusalReason::Environment, m);
        let asked = agent::disk_budget(limits.disk_mb).map_err(environment)?;
        let pod = Claimed::open_carrying(grant)?;
        let spec = &pod.proof.spec;
        let template = &pod.proof.template;
        let memory_mib = memory_mib(spec).ok_or_else(|| {
            environment(format!(
                "template {template} sets no memory limit on its container, which a session's project runner needs"
            ))
        })?;
        let tmp = tmp_mib(spec).ok_or_else(|| {
            environment(format!("template {template} mounts no memory-backed emptyDir with a sizeLimit at /tmp"))
        })?;
        let room = tmp.saturating_sub(TMP_MARGIN_MIB);
        if room < agent::MIN_DISK_MB {
            return Err(environment(format!(
                "template {template}'s /tmp holds {tmp} MiB; a session needs at least {} MiB",
                agent::MIN_DISK_MB + TMP_MARGIN_MIB
            )));
        }
        let source = match pod.proof.handler.as_str() {
            "runc" => MemorySource::Cgroup,
            _ => MemorySource::Meminfo,
        };
        let name = pod.pod.clone();
        let agent = Agent::start(ExecChannel::new(pod, WORK), asked.min(room)).map_err(|e| {
            environment(format!(
                "the session agent did not start in pod {name} ({e}); sessions need the sandbox image's programs under /opt/plimsoll (docs/providers/agentsandbox.md)"
            ))
        })?;
        Ok(PodSession { agent, memory_mib, source })
    }

    fn pod(&self) -> &Claimed {
        self.agent.channel().sandbox()
    }

    /// Reads the pod and the policies that select it back before a call:
    /// refused when the API server does not answer (the session goes on),
    /// ended when the pod is gone, going, replaced or not running, or the
    /// policies changed.
    fn check(&self) -> Result<(), CallError> {
        let c = self.pod();
        let unanswered = |what: &str, e: String| {
            CallError::Refused(refused(
                RefusalReason::Environment,
                format!("reading the session's pod back failed ({what}: {e}); nothing ran"),
            ))
        };
        let changed =
            |why: String| ended(SessionEnd::SandboxChanged, format!("the session's pod {} {why}; nothing ran", c.pod));
        let path = format!("/api/v1/namespaces/{}/pods/{}", c.namespace, c.pod);
        let pod = kube::get("the session's pod", &path)
            .map_err(|e| unanswered("the pod", e))?
            .ok_or_else(|| changed("is gone".into()))?;
        if pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(c.pod_uid.as_str()) {
            return Err(changed("was replaced by another of the same name".into()));
        }
        if pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
            return Err(changed("is being deleted".into()));
        }
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
        if phase != "Running" {
            return Err(changed(format!("is {phase:?}, not Running")));
        }
        let labels = pod.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
        let policies = kube::list(
            "the network policies",
            &format!("/apis/networking.k8s.io/v1/namespaces/{}/networkpolicies", c.namespace),
        )
        .map_err(|e| unanswered("the network policies", e))?;
        match readback::denies_egress(&policies, &labels) {
            Ok(selecting) if selecting == c.policies => Ok(()),
            Ok(_) => Err(changed("is selected by network policies other than those proved at its claim".into())),
            Err(e) => Err(changed(format!("is no longer walled: {e}"))),
        }
    }
}

impl PodSession {
    /// A call naming its own grant, in a session whose relay the host started
    /// at the open to serve each call's: the call's client described beside the
    /// relay's, `call` run, the description removed.
    fn described(&self, g: &RelayGrant, call: impl FnOnce() -> Result<Answer, CallError>) -> Result<Answer, CallError> {
        let pod = self.pod();
        if !pod.relaying {
            return Err(CallError::Refused(refused(
                RefusalReason::Unsupported,
                "this agentsandbox session was opened without a relay to the broker, so its calls cannot name a grant",
            )));
        }
        let write = || pod.write_call_description(&g.client);
        let remove = || pod.remove_call_description(&g.client);
        session_described("pod", write, remove, call)
    }
}

impl GuestSession for PodSession {
    /// With a grant, every process of the session reaches the broker through
    /// the relay, started at the open: the session's grant, or, when the
    /// grant describes no client (the host serves each call's), the grant of
    /// a call that names one, described for that call.
    fn open(limits: Limits, _lifetime_s: u32, grant: Option<Grant>) -> Result<Session, Refusal> {
        let grant = relay_grant(grant)?;
        PodSession::open(&limits, grant.as_ref()).map(Session::new)
    }

    fn evidence(&self) -> Evidence {
        self.pod().evidence()
    }

    fn cell(&self, language: String, code: String, files: Vec<File>, limits: Limits) -> Result<Answer, CallError> {
        session_language("agentsandbox", &language)?;
        self.check()?;
        session_cell(&self.agent, (&language, &code, &files), &limits, self.memory_mib)
    }

    fn snippet(
        &self,
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        let grant = relay_grant(grant).map_err(CallError::Refused)?;
        session_language("agentsandbox", &language)?;
        self.check()?;
        let snippet = || session_snippet(&self.agent, (&language, &code), &[], &limits);
        match &grant {
            None => snippet(),
            Some(g) => self.described(g, snippet),
        }
    }

    fn project(
        &self,
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<Answer, CallError> {
        let grant = relay_grant(grant).map_err(CallError::Refused)?;
        self.check()?;
        // The runner ends a step before the pod's memory runs out, so the kept
        // interpreters and the agent live on.
        let memory = (self.memory_mib, self.source);
        let project = || {
            session_runner_project(&self.agent, (&files, &steps, &artifacts), &limits, memory, (&GUEST_ENV, Some(WORK)))
        };
        match &grant {
            None => project(),
            Some(g) => self.described(g, project),
        }
    }

    /// A pod cannot be paused: an idle session's pod keeps running.
    fn suspend(&self) -> Result<bool, String> {
        Ok(false)
    }

    fn close(&self) {
        // Deleting the claim is the pod's drop, when the host drops this.
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_runner_and_the_agent_are_sized_from_the_pods_spec() {
        let spec = json!({
            "containers": [{
                "resources": {"limits": {"memory": "0.5Gi"}},
                "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
            }],
            "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}],
        });
        assert_eq!(memory_mib(&spec), Some(512));
        assert_eq!(tmp_mib(&spec), Some(64));
        let bare = json!({"containers": [{"volumeMounts": [{"name": "x", "mountPath": "/work"}]}]});
        assert_eq!((memory_mib(&bare), tmp_mib(&bare)), (None, None));
    }
}
