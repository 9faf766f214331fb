//! `deploy/kubernetes`, the manifests that run the daemon in a cluster: every
//! Kubernetes object in them checked against the Kubernetes schema (PyPI's
//! `kubernetes-validate`, strict), the pieces checked against each other, and the
//! sandbox templates applied to the Kubernetes fake as an operator wrote them.

use std::path::{Path, PathBuf};

use plimsoll_client::{Client, Options, SessionOptions};
use plimsoll_core::Floor;

use super::agentsandbox::TOKEN;
use super::fakes::{Fake, daemon_env, pairs};
use super::{Daemon, refused_start, rt, scratch};

/// The Kubernetes version the manifests are checked against.
const KUBERNETES: &str = "1.33.0";

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/kubernetes")
}

/// The manifests, by path (every YAML file but the kustomization).
fn manifests() -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in [deploy(), deploy().join("sandboxes")] {
        for entry in std::fs::read_dir(&dir).expect("deploy/kubernetes") {
            let path = entry.expect("entry").path();
            let yaml = path.extension().is_some_and(|e| e == "yaml");
            if yaml && path.file_name().is_some_and(|n| n != "kustomization.yaml") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The pieces agree: the kustomization lists every manifest and the daemon's
/// configuration; each pool's template and each template's runtime class is
/// there; the daemon's pool, namespace and mounted files are the manifests';
/// the Role grants exactly what the plugin uses.
const CONSISTENT: &str = r#"
import os, sys, tomllib, yaml
root = os.environ["DEPLOY"]
docs = {}
for path in sys.argv[1:]:
    for d in yaml.safe_load_all(open(path)):
        docs[(d["kind"], d["metadata"]["name"])] = d
kustomization = yaml.safe_load(open(os.path.join(root, "kustomization.yaml")))
listed = sorted(os.path.join(root, r) for r in kustomization["resources"])
assert listed == sorted(sys.argv[1:]), (listed, sys.argv[1:])
assert kustomization["configMapGenerator"][0]["files"] == ["plimsoll.toml"]
config = tomllib.load(open(os.path.join(root, "plimsoll.toml"), "rb"))
plugin = config["plugins"]["agentsandbox"]
assert config["sandbox"]["provider"] == "agentsandbox"
pool = docs[("SandboxWarmPool", plugin["warm-pool"])]
assert pool["metadata"]["namespace"] == plugin["namespace"]
for (kind, name), d in docs.items():
    if kind == "SandboxWarmPool":
        assert ("SandboxTemplate", d["spec"]["sandboxTemplateRef"]["name"]) in docs, name
    if kind == "SandboxTemplate":
        assert ("RuntimeClass", d["spec"]["podTemplate"]["spec"]["runtimeClassName"]) in docs, name
        assert d["spec"]["podTemplate"]["metadata"]["labels"]["app"] == "plimsoll-sandbox", name
    if d["metadata"].get("namespace") not in (None, plugin["namespace"]):
        raise AssertionError(f"{kind} {name} is outside the namespace")
deployment = docs[("Deployment", "plimsoll-daemon")]
pod = deployment["spec"]["template"]["spec"]
assert pod["serviceAccountName"] == "plimsoll-daemon" and pod["securityContext"]["runAsNonRoot"] is True
container = pod["containers"][0]
assert container["securityContext"]["readOnlyRootFilesystem"] is True and "limits" in container["resources"]
mounts = {m["mountPath"] for m in container["volumeMounts"]}
named = [config["daemon"][k] for k in ("token-file", "tls-cert", "tls-key")] + [
    plugin[k] for k in ("ca-file", "token-file", "sandboxd-token-file")]
for path in named:
    assert os.path.dirname(path) in mounts, path
assert config["daemon"]["cache-dir"] in mounts
assert deployment["spec"]["strategy"]["type"] == "Recreate" and deployment["spec"]["replicas"] == 1
rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): r["verbs"] for r in docs[("Role", "plimsoll-daemon")]["rules"]}
assert rules == {
    (("extensions.agents.x-k8s.io",), ("sandboxclaims",)): ["get", "list", "watch", "create", "delete"],
    (("extensions.agents.x-k8s.io",), ("sandboxwarmpools", "sandboxtemplates")): ["get"],
    (("agents.x-k8s.io",), ("sandboxes",)): ["get"],
    (("",), ("pods",)): ["get"],
    (("",), ("pods/proxy",)): ["create"],
    (("networking.k8s.io",), ("networkpolicies",)): ["list"],
}, rules
print(len(docs))
"#;

#[test]
fn the_manifests_validate_against_the_kubernetes_schema_and_agree_with_each_other() {
    let files = manifests();
    let o = super::python::python_cmd()
        .args(["-m", "kubernetes_validate", "--strict", "-k", KUBERNETES])
        .args(&files)
        .output()
        .expect("kubernetes-validate (run .ci/install)");
    let out = String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{out}");
    // Only agent-sandbox's kinds, which its CRDs define, are unknown to the schema;
    // every other object passed.
    let warned: Vec<&str> = out.lines().filter(|l| l.starts_with("WARN")).collect();
    assert!(warned.iter().all(|l| l.contains("extensions.agents.x-k8s.io/v1beta1")), "{out}");
    assert_eq!(warned.len(), 4, "two templates and two pools: {out}");
    let passed = out.lines().filter(|l| l.starts_with("INFO") && l.contains(" passed for resource ")).count();
    let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let dir = deploy().display().to_string();
    let mut args = vec!["-c", CONSISTENT];
    args.extend(files.iter().map(String::as_str));
    let o = super::python::python_cmd().args(&args).env("DEPLOY", &dir).output().expect("python");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", String::from_utf8_lossy(&o.stderr));
    let objects: usize = stdout.trim().parse().expect("a count");
    assert_eq!(passed + warned.len(), objects, "every object was checked: {out}");
}

/// The Kubernetes fake serving `template` (a file of deploy/kubernetes/sandboxes)
/// under `handler`.
fn fake_with(template: &str, handler: &str) -> Option<Fake> {
    let path = deploy().join("sandboxes").join(template);
    Fake::start_with("kubernetes", None, &["--runtime-class", handler, "--template", &path.display().to_string()])
}

/// The runsc template as written (limits only, `cpu: 1` a number) serves runs
/// and sessions at `kernel`; the template comes back as written, its pods with
/// every amount canonical and their requests filled from the limits.
#[test]
fn the_runsc_template_as_written_runs_at_kernel_on_the_kubernetes_fake() {
    let Some(fake) = fake_with("template-runsc.yaml", "runsc") else { return };
    let dir = scratch("deploy-runsc");
    let Some(env) = daemon_env(&fake, "agentsandbox", &dir, TOKEN, &[("SANDBOX_MAX_SESSIONS", "2")]) else { return };
    let d = Daemon::start(&pairs(&env));
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    let kernel = Options { floor: Some(Floor::Kernel), ..Options::default() };
    let r = rt.block_on(client.run_javascript("console.log(6*7)", &kernel)).expect("ran");
    assert_eq!(r.javascript.expect("js").stdout, b"42\n");
    assert_eq!(r.record.expect("record").isolation, "kernel");
    let s = rt.block_on(client.open_session(&SessionOptions::default())).expect("open");
    rt.block_on(s.run_cell("python", "x = 41", &[], &Options::default())).expect("cell");
    let cell = rt.block_on(s.run_cell("python", "print(x + 1)", &[], &Options::default())).expect("cell");
    assert_eq!(cell.cell.expect("cell").stdout, b"42\n");
    rt.block_on(s.close()).expect("close");
    let get = |path: &str| -> serde_json::Value {
        let (code, body) = super::agentsandbox::api(&fake, "GET", path);
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("JSON")
    };
    let template = get("/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/plimsoll/sandboxtemplates/plimsoll-runsc");
    let written = &template["spec"]["podTemplate"]["spec"]["containers"][0]["resources"];
    assert_eq!(written, &serde_json::json!({"limits": {"cpu": 1, "memory": "512Mi"}}), "stored as written");
    let pods = get("/api/v1/namespaces/plimsoll/pods");
    let pod = &pods["items"][0]["spec"];
    assert_eq!(
        pod["containers"][0]["resources"],
        serde_json::json!({"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "1", "memory": "512Mi"}}),
        "canonical, the requests filled"
    );
    assert_eq!(pod["volumes"][0]["emptyDir"]["sizeLimit"], "128Mi");
}

/// The Kata template passes every check a template and its pods meet on the
/// fake; only the tier's marker refuses it, as the fake's pods are containers
/// sharing the node's kernel, not VMs.
#[test]
fn the_kata_template_passes_every_wall_but_the_vm_marker_on_the_kubernetes_fake() {
    let Some(fake) = fake_with("template-kata.yaml", "kata-qemu") else { return };
    let dir = scratch("deploy-kata");
    let Some(env) = daemon_env(&fake, "agentsandbox", &dir, TOKEN, &[]) else { return };
    let (code, err) = refused_start(&pairs(&env));
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("the runtime class says kata-qemu, but the sandbox's boot ID"), "{err}");
    assert!(err.contains("is its node's: no VM of its own"), "{err}");
}
