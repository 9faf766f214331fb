//! The agentsandbox provider plugin. It runs code in pods that Kubernetes'
//! agent-sandbox keeps warm, through the host's `plimsoll:host/http` capability
//! only, at two endpoints the host maps to the API server: `api` (the host
//! attaches the service account's bearer or presents its client certificate,
//! and trusts the cluster's CA) and `pods` (the same, through the API server's
//! pod proxy, with sandboxd's token attached as well). The plugin holds no
//! secret.
//!
//! Every run claims one pod from the operator's `SandboxWarmPool` with a
//! `SandboxClaim` stamped with this daemon's instance, waits for it to be
//! ready, and reads back before any code goes in: the pool's template and its
//! runtime class (whose handler is the tier: never configured), the pod held to
//! that template and to the walls ([`readback`]), the network policies that
//! select it (all egress denied), and, as the guest, the tier's markers. What
//! the startup proof read (the template, the handler, the policies) is pinned:
//! the host hands it back to every later call, and a change is refused. The
//! claim is deleted in the foreground on every path, so the pod is gone before
//! the run's capacity is returned.

mod grant;
mod kube;
mod quantity;
mod readback;
mod sandboxd;
mod session;

wit_bindgen::generate!({
    world: "plimsoll:provider/provider-plugin",
    path: ["../../wit/types", "../../wit/host", "../../wit/provider"],
    generate_all,
});

use std::time::{Duration, Instant};

use exports::plimsoll::provider::provider::{Description, Grant, GrantWay, GuardGrant, Guest, RelayGrant, RunError};
use plimsoll::host::{config, log};
use plimsoll::types::types::{
    Evidence, File, Limits, ModuleRequest, ModuleResult, Output, ProjectOutcome, ProjectResult, Refusal, RefusalReason,
    SnippetResult, StepResult, Tier,
};
use plimsoll_plugin_remote::{self as remote, Remote};
use serde_json::Value;

/// Where a run's files go: the pod's memory-backed `/tmp`.
const RUN_DIR: &str = "/tmp/plimsoll/run";
/// A project's work directory.
const PROJECT_DIR: &str = "/tmp/plimsoll/project";
/// The longest run.
const MAX_TIMEOUT_MS: u32 = 300_000;
/// How long a claim may take to be ready: inside the host's 30 s of grace past
/// a run's budget, so a pool that cannot serve is refused by name and the
/// claim still deleted.
const READY_WITHIN: Duration = Duration::from_secs(20);
/// How long a foreground delete is waited for before the run returns.
const DELETE_WITHIN: Duration = Duration::from_secs(15);
/// The annotation naming a Sandbox's pod.
const POD_NAME: &str = "agents.x-k8s.io/pod-name";

/// The settings the host pins after the startup proof (the smoke test's
/// evidence claims under these names come back as settings).
const PIN_TEMPLATE: &str = "pin:template";
const PIN_HANDLER: &str = "pin:handler";
const PIN_POLICIES: &str = "pin:policies";

struct Plugin;

fn refused(reason: RefusalReason, message: impl Into<String>) -> Refusal {
    Refusal { reason, message: message.into() }
}

/// The operator's and the host's settings this plugin reads.
struct Settings {
    namespace: String,
    pool: String,
    instance: String,
    token_sha256: String,
    port: u16,
}

fn settings() -> Result<Settings, Refusal> {
    let get = |key: &str| config::get(key).filter(|v| !v.is_empty());
    let missing = |what: &str| refused(RefusalReason::Environment, format!("the host gave no {what}"));
    Ok(Settings {
        namespace: get("namespace").ok_or_else(|| missing("namespace"))?,
        pool: get("warm-pool").ok_or_else(|| missing("warm pool"))?,
        instance: get("instance").ok_or_else(|| missing("instance to stamp"))?,
        token_sha256: get("sandboxd-token-sha256").ok_or_else(|| missing("sandboxd token digest"))?,
        port: get("sandboxd-port").and_then(|p| p.parse().ok()).ok_or_else(|| missing("sandboxd port"))?,
    })
}

/// What a call read of the pool's template and its runtime class.
struct Proof {
    template: String,
    spec: Value,
    handler: String,
    tier: Tier,
}

fn env(what: &str, e: String) -> Refusal {
    refused(RefusalReason::Environment, format!("{what}: {e}"))
}

fn isolation(message: String) -> Refusal {
    refused(RefusalReason::Isolation, message)
}

/// Reads the pool, its template and the template's runtime class, and holds
/// them to the walls and to what startup pinned.
fn prove(s: &Settings) -> Result<Proof, Refusal> {
    let ns = &s.namespace;
    let pool_path = format!("{}/namespaces/{ns}/sandboxwarmpools/{}", kube::EXTENSIONS, s.pool);
    let pool = kube::get("the warm pool", &pool_path)
        .map_err(|e| env("reading the warm pool", e))?
        .ok_or_else(|| refused(RefusalReason::Environment, format!("warm pool {ns}/{} is not there", s.pool)))?;
    let template = pool.pointer("/spec/sandboxTemplateRef/name").and_then(Value::as_str).unwrap_or_default();
    if template.is_empty() {
        return Err(refused(RefusalReason::Environment, format!("warm pool {} names no template", s.pool)));
    }
    let path = format!("{}/namespaces/{ns}/sandboxtemplates/{template}", kube::EXTENSIONS);
    let t = kube::get("the template", &path)
        .map_err(|e| env("reading the template", e))?
        .ok_or_else(|| refused(RefusalReason::Environment, format!("template {ns}/{template} is not there")))?;
    let spec = t.pointer("/spec/podTemplate/spec").cloned().unwrap_or(Value::Null);
    let class = spec.get("runtimeClassName").and_then(Value::as_str).unwrap_or_default();
    if class.is_empty() {
        return Err(isolation(format!(
            "template {template} names no runtimeClassName, so its pods' tier cannot be read"
        )));
    }
    let rc = kube::get("the runtime class", &format!("/apis/node.k8s.io/v1/runtimeclasses/{class}"))
        .map_err(|e| env("reading the runtime class", e))?
        .ok_or_else(|| isolation(format!("runtime class {class}, which template {template} names, is not there")))?;
    let handler = rc.get("handler").and_then(Value::as_str).unwrap_or_default().to_string();
    let tier = readback::tier_of(&handler).map_err(|e| isolation(format!("runtime class {class}: {e}")))?;
    let sandboxd = readback::Sandboxd { token_sha256: &s.token_sha256, port: s.port };
    readback::walls(&spec, &handler, &sandboxd).map_err(|e| isolation(format!("template {template}: {e}")))?;
    if let Some(pinned) = config::get(PIN_HANDLER)
        && pinned != handler
    {
        return Err(isolation(format!(
            "runtime class {class}'s handler is now {handler:?}, not the {pinned:?} proved at startup; restart the daemon to prove it"
        )));
    }
    let written = spec.to_string();
    if let Some(pinned) = config::get(PIN_TEMPLATE)
        && pinned != written
    {
        return Err(isolation(format!(
            "template {template}'s pod spec changed since startup; restart the daemon to prove the new one"
        )));
    }
    Ok(Proof { template: template.to_string(), spec, handler, tier })
}

/// A pod of this run, claimed; its claim is deleted in the foreground when
/// dropped, whatever happened.
struct Claimed {
    namespace: String,
    claim: String,
    pod: String,
    port: u16,
    pod_uid: String,
    image: String,
    proof: Proof,
    policies: String,
    /// What every command exports first: a grant's client settings, or "".
    exports: String,
    /// Whether a broker relay runs in the pod, joined to the host ([`grant`]).
    relaying: bool,
}

impl Drop for Claimed {
    fn drop(&mut self) {
        match kube::delete_claim(&self.namespace, &self.claim, Instant::now() + DELETE_WITHIN) {
            Ok(true) => {}
            Ok(false) => log::warn(&format!(
                "claim {} was deleted but its pod had not gone within {} s; the next sweep deletes it again",
                self.claim,
                DELETE_WITHIN.as_secs()
            )),
            Err(e) => log::warn(&format!(
                "deleting claim {} failed ({e}); it holds capacity until a sweep deletes it",
                self.claim
            )),
        }
    }
}

impl Claimed {
    fn sandboxd(&self) -> sandboxd::Pod<'_> {
        sandboxd::Pod { namespace: &self.namespace, name: &self.pod, port: self.port }
    }

    /// Claims a pod, waits for it, and reads it back; nothing of the caller's is
    /// in it yet, so every failure is a refusal.
    fn open() -> Result<Claimed, Refusal> {
        let s = settings()?;
        let proof = prove(&s)?;
        let ns = s.namespace.clone();
        let nonce = remote::random_hex(8);
        let mut made = None;
        for _ in 0..3 {
            let name = format!("plimsoll-{}", remote::random_hex(12));
            match kube::create_claim(&ns, &name, &s.pool, &s.instance, &nonce)
                .map_err(|e| env("claiming a sandbox", e))?
            {
                kube::Created::Made(v) => {
                    made = Some((name, v));
                    break;
                }
                kube::Created::Taken => log::info(&format!("claim name {name} is taken; trying another")),
            }
        }
        let (name, claim) = made.ok_or_else(|| {
            refused(RefusalReason::Environment, "three claim names in a row were taken; nothing was claimed")
        })?;
        let mut c = Claimed {
            namespace: ns.clone(),
            claim: name.clone(),
            pod: String::new(),
            port: s.port,
            pod_uid: String::new(),
            image: String::new(),
            proof,
            policies: String::new(),
            exports: String::new(),
            relaying: false,
        };
        let standing = kube::await_ready(&ns, &name, claim, Instant::now() + READY_WITHIN)
            .map_err(|e| env("waiting for the claim", e))?;
        let sandbox = match standing {
            kube::Standing::Ready(sandbox) => sandbox,
            kube::Standing::Waiting(why) => {
                return Err(refused(
                    RefusalReason::Capacity,
                    format!(
                        "no sandbox of warm pool {} was ready within {} s (claim {name}: {why}); the claim is deleted",
                        s.pool,
                        READY_WITHIN.as_secs()
                    ),
                ));
            }
            kube::Standing::Failed(why) => {
                return Err(refused(RefusalReason::Environment, format!("claim {name} failed: {why}")));
            }
        };
        c.read_back(&s, &sandbox)?;
        Ok(c)
    }

    /// [`Claimed::open`], with `grant` carried in before anything of the caller's.
    fn open_carrying(grant: Option<&RelayGrant>) -> Result<Claimed, Refusal> {
        let mut c = Claimed::open()?;
        if let Some(g) = grant {
            c.carry(g)?;
        }
        Ok(c)
    }

    /// Reads back the claimed Sandbox's pod, its node and the policies that
    /// select it, and runs the tier markers as the guest.
    fn read_back(&mut self, s: &Settings, sandbox: &str) -> Result<(), Refusal> {
        let ns = &s.namespace;
        let sb =
            kube::must_get("the claimed Sandbox", &format!("{}/namespaces/{ns}/sandboxes/{sandbox}", kube::SANDBOXES))
                .map_err(|e| env("reading the claimed Sandbox", e))?;
        if !controlled_by(&sb, "SandboxClaim", &self.claim) {
            return Err(isolation(format!("Sandbox {sandbox} is not controlled by claim {}", self.claim)));
        }
        let pod_name = sb
            .pointer(&format!("/metadata/annotations/{}", POD_NAME.replace('/', "~1")))
            .and_then(Value::as_str)
            .unwrap_or(sandbox)
            .to_string();
        let pod = kube::must_get("the claimed pod", &format!("/api/v1/namespaces/{ns}/pods/{pod_name}"))
            .map_err(|e| env("reading the claimed pod", e))?;
        if !controlled_by(&pod, "Sandbox", sandbox) {
            return Err(isolation(format!("pod {pod_name} is not controlled by Sandbox {sandbox}")));
        }
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
        if phase != "Running" {
            return Err(refused(
                RefusalReason::Capacity,
                format!("the claimed pod {pod_name} is {phase:?}, not Running"),
            ));
        }
        let spec = pod.get("spec").cloned().unwrap_or(Value::Null);
        let differs = |e: String| {
            isolation(format!("the claimed pod {pod_name} differs from template {}: {e}", self.proof.template))
        };
        readback::held_to(&spec, &self.proof.spec).map_err(differs)?;
        let sandboxd = readback::Sandboxd { token_sha256: &s.token_sha256, port: s.port };
        readback::walls(&spec, &self.proof.handler, &sandboxd)
            .map_err(|e| isolation(format!("the claimed pod {pod_name}: {e}")))?;
        let labels = pod.pointer("/metadata/labels").and_then(Value::as_object).cloned().unwrap_or_default();
        let policies =
            kube::list("the network policies", &format!("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"))
                .map_err(|e| env("reading the network policies", e))?;
        let selecting = readback::denies_egress(&policies, &labels)
            .map_err(|e| isolation(format!("the claimed pod {pod_name}: {e}")))?;
        if let Some(pinned) = config::get(PIN_POLICIES)
            && pinned != selecting
        {
            return Err(isolation(format!(
                "the network policies selecting pod {pod_name} are not those proved at startup; restart the daemon to prove them"
            )));
        }
        let node = spec.get("nodeName").and_then(Value::as_str).unwrap_or_default();
        let boot_id = kube::must_get("the pod's node", &format!("/api/v1/nodes/{node}"))
            .map_err(|e| env("reading the pod's node", e))?
            .pointer("/status/nodeInfo/bootID")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        self.pod = pod_name;
        self.pod_uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_string();
        self.image = spec.pointer("/containers/0/image").and_then(Value::as_str).unwrap_or_default().to_string();
        self.policies = selecting;
        let printed = self
            .sandboxd()
            .run(readback::MARKERS, "/", Instant::now() + Duration::from_secs(20), 4096)
            .map_err(|e| env("reading the tier markers", e))?;
        readback::markers(&self.proof.handler, &String::from_utf8_lossy(&printed.stdout.bytes), &boot_id)
            .map_err(|e| isolation(format!("pod {}: {e}", self.pod)))
    }

    fn evidence(&self) -> Evidence {
        Evidence {
            tier: self.proof.tier,
            environment: format!("agentsandbox-image:{}", self.image),
            software_identity: None,
            instance: Some(format!("k8s-pod-uid:{}", self.pod_uid)),
            claims: vec![
                ("runtime-handler".into(), self.proof.handler.clone()),
                (PIN_TEMPLATE.into(), self.proof.spec.to_string()),
                (PIN_HANDLER.into(), self.proof.handler.clone()),
                (PIN_POLICIES.into(), self.policies.clone()),
            ],
        }
    }
}

/// Whether `object`'s controller owner is the `kind` named `name`.
fn controlled_by(object: &Value, kind: &str, name: &str) -> bool {
    object.pointer("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|refs| {
        refs.iter().any(|r| {
            r.get("controller").and_then(Value::as_bool) == Some(true)
                && r.get("kind").and_then(Value::as_str) == Some(kind)
                && r.get("name").and_then(Value::as_str) == Some(name)
        })
    })
}

impl Remote for Claimed {
    fn run(&self, script: &str, cwd: &str, deadline: Instant, max_output: usize) -> Result<remote::Ran, String> {
        self.sandboxd().run(&remote::exported(&self.exports, script), cwd, deadline, max_output)
    }

    fn upload(&self, path: &str, bytes: &[u8]) -> Result<(), String> {
        self.sandboxd().upload(path, bytes)
    }

    fn download(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        self.sandboxd().download(path)
    }

    /// The wrapper makes the work directory of every command.
    fn make_dir(&self, _: &str) -> Result<(), String> {
        Ok(())
    }

    /// Nothing the steps left may swap a path between its check and its read.
    fn before_artifacts(&self) -> &'static str {
        remote::KILL_THE_REST
    }
}

fn budget(limits: &Limits) -> Duration {
    Duration::from_millis(u64::from(limits.timeout_ms.clamp(1, MAX_TIMEOUT_MS)))
}

/// The behavioural proof at startup: a claimed pod, read back, runs node and
/// python in its directory, and reaches nothing outside.
fn smoke() -> Result<Evidence, Refusal> {
    let pod = Claimed::open()?;
    let node = remote::smoke(&pod, RUN_DIR)
        .map_err(|(check, why)| refused(RefusalReason::Environment, format!("smoke test, {check}: {why}")))?;
    judge_is_there(&pod)?;
    log::info(&format!(
        "smoke test passed in pod {} (runtime handler {}): node {node}, python, no egress",
        pod.pod, pod.proof.handler
    ));
    Ok(pod.evidence())
}

/// Module tables run as projects of the sandbox image's judge: the pod's
/// image must carry it and the components it precompiled.
fn judge_is_there(pod: &Claimed) -> Result<(), Refusal> {
    let script = r#"command -v plimsoll-judge && test -d /opt/plimsoll/sims && echo found"#;
    let ran = pod
        .run(script, RUN_DIR, Instant::now() + Duration::from_secs(20), 4096)
        .map_err(|e| env("smoke test, the judge", e))?;
    let printed = String::from_utf8_lossy(&ran.stdout.bytes);
    if ran.exit_code != 0 || !printed.trim_end().ends_with("found") {
        return Err(refused(
            RefusalReason::Environment,
            "smoke test, the judge: the pod's image has no plimsoll-judge with its components in /opt/plimsoll/sims, which module tables run; build the pod's image from the sandbox image (images/build.sh, docs/providers/agentsandbox.md)",
        ));
    }
    Ok(())
}

plimsoll_plugin_remote::wit_glue!("agentsandbox");
plimsoll_plugin_agent::session_glue!();
plimsoll_plugin_remote::grant_ways!("agentsandbox");

impl Guest for Plugin {
    type Session = session::PodSession;

    fn describe() -> Description {
        Description {
            name: "agentsandbox".into(),
            languages: vec!["javascript".into(), "python".into()],
            projects: true,
            // Each runs as a project of the image's judge (the smoke test checks it).
            modules: true,
            sessions: true,
            // Through the pod proxy into a relay in the pod ([`grant`]).
            grants: GrantWay::Relay,
            max_timeout_ms: MAX_TIMEOUT_MS,
            max_project_timeout_ms: MAX_TIMEOUT_MS,
        }
    }

    /// The tier is read from the runtime class before anything is claimed.
    fn preflight() -> Result<Evidence, Refusal> {
        let s = settings()?;
        let proof = prove(&s)?;
        Ok(Evidence {
            tier: proof.tier,
            environment: String::new(),
            software_identity: None,
            instance: None,
            claims: vec![("runtime-handler".into(), proof.handler)],
        })
    }

    fn smoke_test() -> Result<Evidence, Refusal> {
        smoke()
    }

    fn sweep(keep: Vec<String>) -> Result<Vec<String>, String> {
        let s = settings().map_err(|r| r.message)?;
        let listed = kube::stamped(&s.namespace, &s.instance)?;
        let delete =
            |name: &str| kube::delete_claim(&s.namespace, name, Instant::now() + Duration::from_secs(5)).map(|_| ());
        let (deleted, failed) = remote::sweep(listed, &keep, delete);
        if !failed.is_empty() {
            log::warn(&format!("the sweep could not delete {} claim(s): {}", failed.len(), failed.join("; ")));
        }
        Ok(deleted)
    }

    fn release(targets: Vec<String>) -> Vec<String> {
        let Ok(s) = settings() else { return Vec::new() };
        let delete = |name: &str| match kube::delete_claim(&s.namespace, name, Instant::now() + DELETE_WITHIN) {
            Ok(true) => Ok(()),
            Ok(false) => Err("its pod had not gone yet".to_string()),
            Err(e) => Err(e),
        };
        remote::release("agentsandbox", targets, delete, log::warn)
    }

    fn run_snippet(
        language: String,
        code: String,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(SnippetResult, Evidence), RunError> {
        let grant = relay_grant(grant).map_err(RunError::Refused)?;
        let open = |_| Claimed::open_carrying(grant.as_ref());
        snippet_on(&language, &code, &limits, budget(&limits), RUN_DIR, open, |c| c.evidence())
    }

    fn run_project(
        files: Vec<File>,
        steps: Vec<String>,
        artifacts: Vec<String>,
        limits: Limits,
        grant: Option<Grant>,
    ) -> Result<(ProjectResult, Evidence), RunError> {
        let grant = relay_grant(grant).map_err(RunError::Refused)?;
        let open = |_| Claimed::open_carrying(grant.as_ref());
        project_on((&files, &steps, &artifacts), &limits, budget(&limits), PROJECT_DIR, open, |c| c.evidence())
    }

    /// The host runs a module table as a project of the judge, never here.
    fn run_module(_request: ModuleRequest, _limits: Limits) -> Result<(ModuleResult, Evidence), RunError> {
        Err(RunError::Refused(refused(
            RefusalReason::Unsupported,
            "the agentsandbox provider takes module tables as projects of the judge",
        )))
    }
}

export!(Plugin);
