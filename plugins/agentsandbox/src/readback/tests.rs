use serde_json::json;

use super::*;

const HASH: &str = "4d967a30111bf29f0eba01c448b375c1629b2fed01cdfcc3aed91f1b57d5dd5e";

fn sandboxd() -> Sandboxd<'static> {
    Sandboxd { token_sha256: HASH, port: 8787 }
}

/// A template's pod spec as an operator writes it (deploy/kubernetes/sandboxes/template-runsc.yaml).
fn template() -> Value {
    json!({
        "runtimeClassName": "gvisor",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "dnsPolicy": "None",
        "dnsConfig": {"nameservers": ["127.0.0.1"]},
        "restartPolicy": "Never",
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "sandbox",
            "image": format!("registry.example/plimsoll-sandbox@sha256:{}", "a".repeat(64)),
            "command": ["/opt/plimsoll/plimsoll-agent"],
            "args": ["sandboxd", "--listen", "0.0.0.0:8787", "--token-sha256", HASH],
            "ports": [{"name": "sandboxd", "containerPort": 8787}],
            "resources": {"limits": {"cpu": "1", "memory": "512Mi"}},
            "securityContext": {
                "runAsUser": 0, "allowPrivilegeEscalation": false, "privileged": false,
                "readOnlyRootFilesystem": true,
                "capabilities": {"drop": ["ALL"], "add": ["SETUID", "SETGID"]},
            },
            "readinessProbe": {"httpGet": {"path": "/v1/health", "port": 8787}},
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}}],
    })
}

/// The template's pod as the API server and scheduler leave it.
fn pod() -> Value {
    let mut p = template();
    let extra = json!({
        "nodeName": "node-1", "serviceAccountName": "default", "serviceAccount": "default",
        "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30, "priority": 0,
        "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
    });
    for (k, v) in extra.as_object().expect("object") {
        p[k] = v.clone();
    }
    let c = &mut p["containers"][0];
    c["terminationMessagePath"] = json!("/dev/termination-log");
    c["terminationMessagePolicy"] = json!("File");
    c["imagePullPolicy"] = json!("IfNotPresent");
    // The API server fills each request from its limit.
    c["resources"]["requests"] = c["resources"]["limits"].clone();
    c["ports"][0]["protocol"] = json!("TCP");
    for (k, v) in [("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)] {
        c["readinessProbe"][k] = json!(v);
    }
    c["readinessProbe"]["httpGet"]["scheme"] = json!("HTTP");
    p
}

fn wall(edit: impl FnOnce(&mut Value)) -> String {
    let mut p = pod();
    edit(&mut p);
    walls(&p, "runc", &sandboxd()).expect_err("refused")
}

#[test]
fn handlers_are_tiers_and_others_are_refused() {
    assert_eq!(tier_of("runsc"), Ok(Tier::Kernel));
    assert_eq!(tier_of("runc"), Ok(Tier::Container));
    for vm in ["kata", "kata-qemu", "kata-fc", "kata-clh", "kata-clh-runtime-rs", "kata-mshv"] {
        assert_eq!(tier_of(vm), Ok(Tier::Vm), "{vm}");
    }
    assert_eq!(
        tier_of("crun").expect_err("unknown"),
        "the runtime class's handler \"crun\" is not one plimsoll reads a tier from \
         (runsc: kernel, runc: container, kata, kata-qemu, kata-fc, kata-clh, kata-clh-runtime-rs, kata-mshv: vm)"
    );
}

#[test]
fn the_template_and_its_defaulted_pod_pass() {
    walls(&template(), "runc", &sandboxd()).expect("template");
    walls(&pod(), "runc", &sandboxd()).expect("pod");
    held_to(&pod(), &template()).expect("held");
}

#[test]
fn every_wall_is_refused_by_name() {
    type Edit = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(String, Edit)> = vec![
        ("it does not set automountServiceAccountToken: false, so an API token may be mounted".into(),
            Box::new(|p| p["automountServiceAccountToken"] = json!(true))),
        ("it shares the node's namespace (hostPID: true)".into(), Box::new(|p| p["hostPID"] = json!(true))),
        ("it has 2 containers (sandbox, sidecar), not one".into(), Box::new(|p| {
            let mut c = p["containers"][0].clone();
            c["name"] = json!("sidecar");
            p["containers"].as_array_mut().expect("array").push(c);
        })),
        ("it has initContainers; plimsoll runs pods of one container only".into(),
            Box::new(|p| p["initContainers"] = json!([{"name": "init"}]))),
        ("its resolver is not fixed (dnsPolicy None with dnsConfig.nameservers)".into(),
            Box::new(|p| p["dnsPolicy"] = json!("ClusterFirst"))),
        ("its spec.futureIsolation is a field plimsoll does not know, so cannot judge".into(),
            Box::new(|p| p["futureIsolation"] = json!("off"))),
        ("its container sandbox's resizePolicy is a field plimsoll does not know, so cannot judge".into(),
            Box::new(|p| p["containers"][0]["resizePolicy"] = json!([]))),
        ("its container sandbox's image \"plimsoll-sandbox:latest\" is not pinned by digest (<name>@sha256:<64 hex>)".into(),
            Box::new(|p| p["containers"][0]["image"] = json!("plimsoll-sandbox:latest"))),
        (format!("its sandboxd is not started with the SHA-256 of this host's sandboxd token (--token-sha256 {HASH})"),
            Box::new(|p| p["containers"][0]["args"][4] = json!("0".repeat(64)))),
        ("its container sandbox does not start sandboxd listening on port 8787 (it runs [\"sleep\", \"1d\"])".into(),
            Box::new(|p| { p["containers"][0]["command"] = json!(["sleep"]); p["containers"][0]["args"] = json!(["1d"]); })),
        ("its container sandbox has an exec livenessProbe: a command the kubelet runs inside".into(),
            Box::new(|p| p["containers"][0]["livenessProbe"] = json!({"exec": {"command": ["true"]}}))),
        ("its container sandbox has lifecycle hooks: commands the kubelet runs inside".into(),
            Box::new(|p| p["containers"][0]["lifecycle"] = json!({"postStart": {"httpGet": {"port": 1}}}))),
        ("its container sandbox's root is writable (readOnlyRootFilesystem is not true)".into(),
            Box::new(|p| p["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = json!(false))),
        ("its container sandbox adds capability NET_ADMIN; only SETUID and SETGID are allowed".into(),
            Box::new(|p| p["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["SETUID", "NET_ADMIN"]))),
        ("its container sandbox does not drop ALL capabilities".into(),
            Box::new(|p| p["containers"][0]["securityContext"]["capabilities"]["drop"] = json!(["NET_RAW"]))),
        ("its container sandbox is privileged".into(),
            Box::new(|p| p["containers"][0]["securityContext"]["privileged"] = json!(true))),
        ("its container sandbox does not set allowPrivilegeEscalation: false".into(),
            Box::new(|p| p["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true))),
        ("its container sandbox has no seccomp profile under runc (seccompProfile.type \"Unconfined\"; RuntimeDefault or Localhost is required)".into(),
            Box::new(|p| p["securityContext"]["seccompProfile"]["type"] = json!("Unconfined"))),
        ("its container sandbox is given environment variables; sandboxd's runs take none from the pod".into(),
            Box::new(|p| p["containers"][0]["env"] = json!([{"name": "K", "value": "V"}]))),
        ("its volume tmp is not a memory-backed emptyDir with a sizeLimit".into(),
            Box::new(|p| p["volumes"][0]["emptyDir"] = json!({}))),
        ("its volume tmp is hostPath, not an emptyDir".into(),
            Box::new(|p| p["volumes"][0] = json!({"name": "tmp", "hostPath": {"path": "/tmp"}}))),
        ("it mounts /var/run/secrets/kubernetes.io/serviceaccount, where Kubernetes puts API tokens".into(),
            Box::new(|p| {
                p["volumes"].as_array_mut().expect("array").push(json!({"name": "t", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}));
                p["containers"][0]["volumeMounts"].as_array_mut().expect("array")
                    .push(json!({"name": "t", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}));
            })),
        ("its mount at /tmp/inner lies beneath the mount at /tmp".into(),
            Box::new(|p| {
                p["volumes"].as_array_mut().expect("array").push(json!({"name": "t", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}));
                p["containers"][0]["volumeMounts"].as_array_mut().expect("array").push(json!({"name": "t", "mountPath": "/tmp/inner"}));
            })),
    ];
    for (want, edit) in cases {
        assert_eq!(wall(edit), want);
    }
    // Under gVisor the seccomp filter is gVisor's own business.
    let mut p = pod();
    p["securityContext"] = json!({});
    walls(&p, "runsc", &sandboxd()).expect("runsc without a profile");
}

#[test]
fn a_pod_is_held_to_its_template_beyond_the_defaults() {
    let mut p = pod();
    p["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = json!(false);
    assert_eq!(
        held_to(&p, &template()).expect_err("differs"),
        "its spec.containers[0].securityContext.readOnlyRootFilesystem is false, the template's true"
    );
    let mut p = pod();
    p["containers"][0]["image"] = json!(format!("other@sha256:{}", "b".repeat(64)));
    assert!(
        held_to(&p, &template()).expect_err("image").starts_with("its spec.containers[0].image is \"other@sha256:")
    );
    let mut p = pod();
    p["hostPID"] = json!(true);
    assert_eq!(
        held_to(&p, &template()).expect_err("extra"),
        "its spec.hostPID is true, which the template does not set"
    );
    let mut p = pod();
    p["containers"][0]["readinessProbe"]["exec"] = json!({"command": ["true"]});
    assert_eq!(
        held_to(&p, &template()).expect_err("probe"),
        "its spec.containers[0].readinessProbe.exec is {\"command\":[\"true\"]}, which the template does not set"
    );
    let mut p = pod();
    p["volumes"].as_array_mut().expect("array").push(json!({"name": "x", "emptyDir": {}}));
    assert_eq!(held_to(&p, &template()).expect_err("volumes"), "its spec.volumes has 2 entries, the template's 1");
    let mut p = pod();
    p["runtimeClassName"] = json!("runc");
    assert_eq!(
        held_to(&p, &template()).expect_err("class"),
        "its spec.runtimeClassName is \"runc\", the template's \"gvisor\""
    );
}

fn policy(name: &str, selector: Value, egress: Option<Value>) -> Value {
    let mut spec = json!({"podSelector": selector, "policyTypes": ["Ingress", "Egress"], "ingress": []});
    if let Some(e) = egress {
        spec["egress"] = e;
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

#[test]
fn resources_are_compared_by_value_with_requests_filled_from_limits() {
    let mut t = template();
    t["containers"][0]["resources"] = json!({"limits": {"cpu": 1, "memory": "0.5Gi"}, "requests": {"cpu": 0.5}});
    let mut p = pod();
    p["containers"][0]["resources"] =
        json!({"limits": {"cpu": "1", "memory": "512Mi"}, "requests": {"cpu": "500m", "memory": "512Mi"}});
    held_to(&p, &t).expect("the same amounts, spelled as the API server spells them");
    let refused = |edit: fn(&mut Value)| {
        let mut p = p.clone();
        edit(&mut p["containers"][0]["resources"]);
        held_to(&p, &t).expect_err("refused")
    };
    assert_eq!(
        refused(|r| r["limits"]["cpu"] = json!("2")),
        "its spec.containers[0].resources.limits.cpu is \"2\", the template's 1"
    );
    assert_eq!(
        refused(|r| r["requests"]["memory"] = json!("256Mi")),
        "its spec.containers[0].resources.requests.memory is \"256Mi\", the template's \"0.5Gi\""
    );
    assert_eq!(
        refused(|r| r["requests"] = json!({"cpu": "500m"})),
        "its spec.containers[0].resources.requests.memory is missing, the template's is \"0.5Gi\""
    );
    assert_eq!(
        refused(|r| r["limits"]["nvidia.com/gpu"] = json!("1")),
        "its spec.containers[0].resources.limits.nvidia.com/gpu is \"1\", which the template does not set"
    );
    assert_eq!(
        refused(|r| r["claims"] = json!([{"name": "gpu"}])),
        "its spec.containers[0].resources.claims is [{\"name\":\"gpu\"}], which the template does not set"
    );
    t["containers"][0]["resources"]["limits"]["cpu"] = json!("lots");
    assert_eq!(
        held_to(&p, &t).expect_err("unreadable"),
        "the template's spec.containers[0].resources.limits.cpu: \"lots\" is not a quantity"
    );
}

#[test]
fn the_policies_selecting_a_pod_must_deny_it_all_egress() {
    let labels = json!({"agents.x-k8s.io/sandbox-template-ref-hash": "abc", "app": "x"});
    let labels = labels.as_object().expect("labels");
    let ours = policy(
        "plimsoll-network-policy",
        json!({"matchLabels": {"agents.x-k8s.io/sandbox-template-ref-hash": "abc"}}),
        Some(json!([])),
    );
    let other = policy("elsewhere", json!({"matchLabels": {"app": "y"}}), Some(json!([{}])));
    let pinned = denies_egress(&[ours.clone(), other.clone()], labels).expect("denied");
    assert!(pinned.contains("plimsoll-network-policy") && !pinned.contains("elsewhere"), "{pinned}");
    let open = policy("allow-dns", json!({}), Some(json!([{"ports": [{"port": 53, "protocol": "UDP"}]}])));
    assert_eq!(
        denies_egress(&[ours.clone(), open], labels).expect_err("open"),
        "network policy allow-dns allows the pod egress ([{\"ports\":[{\"port\":53,\"protocol\":\"UDP\"}]}])"
    );
    assert_eq!(
        denies_egress(&[other], labels).expect_err("none"),
        "no network policy selects the pod for egress, so it may reach anything"
    );
    let ingress_only = json!({"metadata": {"name": "in"}, "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}});
    assert_eq!(
        denies_egress(&[ingress_only], labels).expect_err("ingress only"),
        "no network policy selects the pod for egress, so it may reach anything"
    );
    let by_expression = policy(
        "expr",
        json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]}),
        Some(json!([{}])),
    );
    assert!(denies_egress(&[ours, by_expression], labels).expect_err("expr").starts_with("network policy expr allows"));
}

#[test]
fn tier_markers_must_agree_with_the_handler() {
    let node = "0d6d4c8e-5f1c-4c35-9d4b-6d4c2f3c9a11";
    let gvisor = "1b2c\n0\n[   0.000000] Starting gVisor...\n".to_string();
    let runc = format!("{node}\n2\n\n");
    markers("runsc", &gvisor, node).expect("runsc");
    markers("runc", &runc, node).expect("runc");
    assert_eq!(
        markers("runsc", &runc, node).expect_err("remapped"),
        "the runtime class says runsc, but the kernel log's first line is \"\", not gVisor's"
    );
    assert_eq!(
        markers("runc", &gvisor, node).expect_err("remapped"),
        "the runtime class says runc, but the sandbox's seccomp mode is \"0\" and its kernel log says \"[   0.000000] Starting gVisor...\""
    );
    assert_eq!(
        markers("kata", &runc, node).expect_err("no vm"),
        format!("the runtime class says kata, but the sandbox's boot ID \"{node}\" is its node's: no VM of its own")
    );
    markers("kata-clh", "ffff\n0\n[0.0] Linux version\n", node).expect("vm");
}
