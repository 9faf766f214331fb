//! The JSON of each kind the fake serves but pods (see `pods`), as the real
//! API server and agent-sandbox's controllers write it: the template and what
//! is managed from it, the warm pool, Sandboxes, the Node and the
//! RuntimeClass. Metadata the store assigns (uid, resourceVersion,
//! generation, creationTimestamp) is added there.

use serde_json::{Value, json};

use super::Mode;
use crate::util::{now, rfc3339};

/// The one namespace.
pub const NAMESPACE: &str = "plimsoll";
/// The SandboxTemplate's name.
pub const TEMPLATE: &str = "plimsoll";
/// The SandboxWarmPool's name.
pub const POOL: &str = "plimsoll";
/// The RuntimeClass the template names.
pub const RUNTIME_CLASS: &str = "plimsoll-sandbox";
/// The one Node.
pub const NODE: &str = "fake-node-1";
/// Where sandboxd listens in a pod.
pub const SANDBOXD_PORT: u16 = 8787;
/// The node's address.
pub const HOST_IP: &str = "10.0.0.2";
/// The first three octets of the pods' addresses (the node's pod CIDR).
pub const POD_NET: &str = "10.244.0";

/// The template's pod labels.
pub const APP_LABEL: (&str, &str) = ("app", "plimsoll-sandbox");
/// The label agent-sandbox puts on a template and what is made from it: the
/// template name's hash.
pub const TEMPLATE_REF_HASH: &str = "agents.x-k8s.io/sandbox-template-ref-hash";
/// A pod's label: its Sandbox name's hash.
pub const SANDBOX_NAME_HASH: &str = "agents.x-k8s.io/sandbox-name-hash";
/// A warm Sandbox's label: its pool name's hash (gone once adopted).
pub const WARM_POOL_LABEL: &str = "agents.x-k8s.io/warm-pool-sandbox";
/// A Sandbox's label: `warm` (made by the pool) or `cold` (for a claim).
pub const LAUNCH_TYPE: &str = "agents.x-k8s.io/launch-type";
/// A Sandbox's label: who made it (`controller`).
pub const CREATED_BY: &str = "agents.x-k8s.io/created-by";
/// A claimed Sandbox's label: the claim's uid.
pub const CLAIM_UID: &str = "agents.x-k8s.io/claim-uid";
/// A Sandbox's annotation: its pod's name.
pub const POD_NAME: &str = "agents.x-k8s.io/pod-name";
/// A Sandbox's annotation: the template it was made from.
pub const TEMPLATE_REF: &str = "agents.x-k8s.io/sandbox-template-ref";
/// Where a service account token is mounted.
pub const TOKEN_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// agent-sandbox's name hash: 32-bit FNV-1a, eight lowercase hex digits.
pub fn name_hash(name: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

/// What the cluster's objects are made from.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The RuntimeClass's handler (`--runtime-class`).
    pub handler: String,
    /// The sandbox image's ID, hex without `sha256:`.
    pub image_hex: String,
    /// SHA-256 (hex) of the sandboxd token the fake prints.
    pub token_sha256: String,
    /// SHA-256 (hex) of a token nobody is told: mode `foreign-hash`.
    pub foreign_sha256: String,
    pub mode: Option<Mode>,
    /// The operator's SandboxTemplate (`--template FILE`, see [`written`]);
    /// None: the fake's own ([`template_pod_spec`]).
    pub written: Option<Value>,
}

impl Cluster {
    pub fn is(&self, m: Mode) -> bool {
        self.mode == Some(m)
    }

    /// The SandboxTemplate's name: the operator's, or [`TEMPLATE`].
    pub fn template_name(&self) -> &str {
        self.written.as_ref().and_then(|t| t.pointer("/metadata/name")).and_then(Value::as_str).unwrap_or(TEMPLATE)
    }

    /// The RuntimeClass the template names, which the fake makes with the
    /// handler `--runtime-class` gives.
    pub fn runtime_class(&self) -> &str {
        self.written
            .as_ref()
            .and_then(|t| t.pointer("/spec/podTemplate/spec/runtimeClassName"))
            .and_then(Value::as_str)
            .unwrap_or(RUNTIME_CLASS)
    }

    /// The NetworkPolicy agent-sandbox manages from the template.
    pub fn network_policy_name(&self) -> String {
        format!("{}-network-policy", self.template_name())
    }

    /// The template's image: the sandbox image pinned by digest.
    pub fn image(&self) -> String {
        format!("plimsoll-sandbox@sha256:{}", self.image_hex)
    }
}

/// A condition as `metav1.Condition` has it.
pub fn condition(kind: &str, ok: bool, reason: &str, message: &str, generation: u64) -> Value {
    json!({
        "type": kind,
        "status": if ok { "True" } else { "False" },
        "observedGeneration": generation,
        "lastTransitionTime": rfc3339(now()),
        "reason": reason,
        "message": message,
    })
}

/// Sets `new` in a list of conditions by type, keeping the old
/// `lastTransitionTime` when its status did not change (so an unchanged
/// condition writes nothing).
pub fn set_condition(list: &mut Value, mut new: Value) {
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(items) = list.as_array_mut() else { return };
    match items.iter_mut().find(|c| c["type"] == new["type"]) {
        Some(old) => {
            if old["status"] == new["status"] {
                new["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
            *old = new;
        }
        None => items.push(new),
    }
}

/// An `ownerReferences` entry naming `owner` as the controller.
pub fn owner_ref(owner: &Value) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The template's pod spec, exactly as the spec's SandboxTemplate states it.
pub fn template_pod_spec(c: &Cluster) -> Value {
    json!({
        "runtimeClassName": RUNTIME_CLASS,
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "dnsPolicy": "None",
        "dnsConfig": {"nameservers": ["127.0.0.1"]},
        "restartPolicy": "Never",
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "sandbox",
            "image": c.image(),
            "command": ["/opt/plimsoll/plimsoll-agent"],
            "args": ["sandboxd", "--listen", format!("0.0.0.0:{SANDBOXD_PORT}"), "--token-sha256", c.token_sha256],
            "ports": [{"name": "sandboxd", "containerPort": SANDBOXD_PORT, "protocol": "TCP"}],
            "resources": {"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "1", "memory": "512Mi"}},
            "securityContext": {
                "runAsUser": 0,
                "allowPrivilegeEscalation": false,
                "privileged": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"], "add": ["SETUID", "SETGID"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "readinessProbe": {"httpGet": {"path": "/v1/health", "port": SANDBOXD_PORT}},
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}],
    })
}

/// The SandboxTemplate: the operator's as written, or the fake's own named
/// `plimsoll`; either with its ref-hash label as agent-sandbox's template
/// controller stamps it.
pub fn template(c: &Cluster) -> Value {
    let hash = name_hash(c.template_name());
    match &c.written {
        Some(w) => {
            let mut t = json!({"metadata": {}, "spec": w["spec"].clone()});
            for field in ["labels", "annotations"] {
                if let Some(v) = w.pointer(&format!("/metadata/{field}")) {
                    t["metadata"][field] = v.clone();
                }
            }
            t["metadata"]["labels"][TEMPLATE_REF_HASH] = json!(hash);
            t
        }
        None => json!({
            "metadata": {"labels": {TEMPLATE_REF_HASH: hash}},
            "spec": {
                "podTemplate": {"metadata": {"labels": {APP_LABEL.0: APP_LABEL.1}}, "spec": template_pod_spec(c)},
                "networkPolicy": {"ingress": [], "egress": []},
            },
        }),
    }
}

/// The NetworkPolicy agent-sandbox manages from the template, owned by it, as
/// its template controller (2fd412d5) builds it: none when the template says
/// `networkPolicyManagement: Unmanaged`; the "secure by default" one (ingress
/// from the sandbox router, egress to every public address) when it names no
/// `networkPolicy`; else the template's rules. Mode `permissive-policy` allows
/// all egress.
pub fn network_policy(c: &Cluster, template: &Value) -> Option<Value> {
    let spec = &template["spec"];
    if spec.get("networkPolicyManagement").and_then(Value::as_str) == Some("Unmanaged") {
        return None;
    }
    let (ingress, egress) = match spec.get("networkPolicy").filter(|p| !p.is_null()) {
        Some(p) => (p.get("ingress").cloned(), p.get("egress").cloned()),
        None => {
            let router = json!([{"from": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agent-sandbox-system"}},
                "podSelector": {"matchLabels": {"app": "sandbox-router"}},
            }]}]);
            let public = json!([{"to": [
                {"ipBlock": {"cidr": "0.0.0.0/0",
                             "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"]}},
                {"ipBlock": {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10"]}},
            ]}]);
            (Some(router), Some(public))
        }
    };
    let egress = if c.is(Mode::PermissivePolicy) { Some(json!([{}])) } else { egress };
    let mut policy = json!({
        "metadata": {"ownerReferences": [owner_ref(template)]},
        "spec": {
            "podSelector": {"matchLabels": {TEMPLATE_REF_HASH: name_hash(c.template_name())}},
            "policyTypes": ["Ingress", "Egress"],
        },
    });
    // An empty list is omitted, as the typed object writes it.
    for (field, rules) in [("ingress", ingress), ("egress", egress)] {
        if let Some(r) = rules.filter(|r| r.as_array().is_some_and(|a| !a.is_empty())) {
            policy["spec"][field] = r;
        }
    }
    Some(policy)
}

/// The SandboxWarmPool, `replicas` warm sandboxes of the template.
pub fn warm_pool(c: &Cluster, replicas: u32) -> Value {
    json!({
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": c.template_name()}},
        "status": {"replicas": 0, "readyReplicas": 0, "selector": format!("{WARM_POOL_LABEL}={}", name_hash(POOL))},
    })
}

/// The RuntimeClass, whose handler is `handler`.
pub fn runtime_class(handler: &str) -> Value {
    json!({"handler": handler})
}

/// What the Node reports about the machine it stands for.
#[derive(Debug, Clone, Default)]
pub struct NodeInfo {
    pub boot_id: String,
    pub kernel: String,
    pub os_image: String,
    pub docker_version: String,
    pub machine_id: String,
}

/// The Node `fake-node-1`.
pub fn node(info: &NodeInfo) -> Value {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let cpus = std::thread::available_parallelism().map(usize::from).unwrap_or(1);
    json!({
        "metadata": {"labels": {
            "kubernetes.io/hostname": NODE,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch,
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": arch,
        }},
        "spec": {"podCIDR": format!("{POD_NET}.0/24"), "podCIDRs": [format!("{POD_NET}.0/24")]},
        "status": {
            "capacity": {"cpu": cpus.to_string(), "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": cpus.to_string(), "memory": "16Gi", "pods": "110"},
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": rfc3339(now()), "lastTransitionTime": rfc3339(now()),
            }],
            "addresses": [{"type": "InternalIP", "address": HOST_IP}, {"type": "Hostname", "address": NODE}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": info.machine_id,
                "systemUUID": info.machine_id,
                "bootID": info.boot_id,
                "kernelVersion": info.kernel,
                "osImage": info.os_image,
                "containerRuntimeVersion": format!("docker://{}", info.docker_version),
                "kubeletVersion": "v1.33.1",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": arch,
            },
        },
    })
}

/// A Sandbox of the template owned by `owner` (the pool's, or a claim's when
/// cold-started for it), named `name` (for the pool: `plimsoll-` and five
/// random characters, as `generateName` makes).
pub fn sandbox(template: &Value, owner: &Value, name: &str, claim_uid: Option<&str>) -> Value {
    let template_name = template.pointer("/metadata/name").and_then(Value::as_str).unwrap_or(TEMPLATE);
    let mut pod_labels = template.pointer("/spec/podTemplate/metadata/labels").cloned().unwrap_or_else(|| json!({}));
    pod_labels[TEMPLATE_REF_HASH] = json!(name_hash(template_name));
    let mut labels = json!({TEMPLATE_REF_HASH: name_hash(template_name), CREATED_BY: "controller"});
    match claim_uid {
        Some(uid) => {
            labels[LAUNCH_TYPE] = json!("cold");
            labels[CLAIM_UID] = json!(uid);
            pod_labels[CLAIM_UID] = json!(uid);
        }
        None => {
            labels[LAUNCH_TYPE] = json!("warm");
            labels[WARM_POOL_LABEL] = json!(name_hash(POOL));
            pod_labels[WARM_POOL_LABEL] = json!(name_hash(POOL));
        }
    }
    let mut metadata = json!({
        "labels": labels,
        "annotations": {POD_NAME: name, TEMPLATE_REF: template_name},
        "ownerReferences": [owner_ref(owner)],
    });
    if claim_uid.is_none() {
        metadata["generateName"] = json!(format!("{POOL}-"));
    }
    json!({
        "metadata": metadata,
        "spec": {"podTemplate": {
            "metadata": {"labels": pod_labels},
            "spec": template.pointer("/spec/podTemplate/spec").cloned().unwrap_or(Value::Null),
        }},
        "status": {"selector": format!("{SANDBOX_NAME_HASH}={}", name_hash(name)), "nodeName": NODE},
    })
}

/// What adoption does to a warm Sandbox: the claim becomes its controller,
/// it leaves the pool's selection, and it carries the claim's identity.
pub fn adopt(sandbox: &mut Value, claim: &Value) {
    let name = sandbox["metadata"]["name"].clone();
    let m = &mut sandbox["metadata"];
    m["ownerReferences"] = json!([owner_ref(claim)]);
    if let Some(l) = m["labels"].as_object_mut() {
        l.remove(WARM_POOL_LABEL);
        l.insert(LAUNCH_TYPE.into(), json!("warm"));
        l.insert(CLAIM_UID.into(), claim["metadata"]["uid"].clone());
    }
    m["annotations"][POD_NAME] = name;
    if let Some(l) = sandbox.pointer_mut("/spec/podTemplate/metadata/labels").and_then(Value::as_object_mut) {
        l.remove(WARM_POOL_LABEL);
        l.insert(CLAIM_UID.into(), claim["metadata"]["uid"].clone());
    }
}

/// A cluster for tests, misbehaving as `mode`.
#[cfg(test)]
pub fn test_cluster(mode: Option<Mode>) -> Cluster {
    Cluster {
        handler: "runsc".into(),
        image_hex: "ab".repeat(32),
        token_sha256: "11".repeat(32),
        foreign_sha256: "22".repeat(32),
        mode,
        written: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(mode: Option<Mode>) -> Cluster {
        test_cluster(mode)
    }

    #[test]
    fn name_hash_is_fnv1a_in_eight_hex_digits() {
        assert_eq!(name_hash(""), "811c9dc5");
        assert_eq!(name_hash("a"), "e40c292c");
        assert_eq!(name_hash("plimsoll").len(), 8);
    }

    #[test]
    fn the_managed_policy_denies_all_unless_permissive() {
        let ours = template(&cluster(None));
        let np = network_policy(&cluster(Some(Mode::PermissivePolicy)), &ours).expect("managed");
        assert_eq!(np["spec"]["egress"], json!([{}]));
        let np = network_policy(&cluster(None), &ours).expect("managed");
        assert_eq!((np["spec"].get("egress"), &np["spec"]["policyTypes"]), (None, &json!(["Ingress", "Egress"])));
    }

    #[test]
    fn adoption_moves_the_controller_and_leaves_the_pool() {
        let c = cluster(None);
        let mut t = template(&c);
        t["metadata"]["name"] = json!(TEMPLATE);
        let pool = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
                          "metadata": {"name": POOL, "uid": "pool-uid"}});
        let claim = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
                           "metadata": {"name": "plimsoll-c", "uid": "claim-uid"}});
        let mut s = sandbox(&t, &pool, "plimsoll-abcde", None);
        s["metadata"]["name"] = json!("plimsoll-abcde");
        assert_eq!(s["metadata"]["ownerReferences"][0]["uid"], "pool-uid");
        assert_eq!(s["metadata"]["labels"][WARM_POOL_LABEL], name_hash(POOL));
        assert_eq!(s["metadata"]["annotations"][POD_NAME], "plimsoll-abcde");
        adopt(&mut s, &claim);
        assert_eq!(
            s["metadata"]["ownerReferences"],
            json!([{"apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim", "name": "plimsoll-c", "uid": "claim-uid", "controller": true, "blockOwnerDeletion": true}])
        );
        assert!(s["metadata"]["labels"].get(WARM_POOL_LABEL).is_none());
        assert_eq!(s["metadata"]["labels"][CLAIM_UID], "claim-uid");
        assert_eq!(s["metadata"]["name"], "plimsoll-abcde");
    }
}
