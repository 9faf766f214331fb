//! Pods as the API server stores them: the template's spec changed as a
//! misbehaviour says, then the API server's and scheduler's defaults filled
//! in; and a pod's status as its container goes.

use serde_json::{Value, json};

use super::objects::{
    APP_LABEL, Cluster, HOST_IP, NODE, POD_NET, SANDBOX_NAME_HASH, TEMPLATE_REF_HASH, TOKEN_DIR, name_hash, owner_ref,
};
use super::{Mode, quantity};
use crate::util::{now, rfc3339};

/// A pod IP: the `n`th of the node's pod range.
pub fn pod_ip(n: u32) -> String {
    format!("{POD_NET}.{}", n % 250 + 2)
}

/// Appends `item` to the list at `v` (made a list if it is not one).
fn push(v: &mut Value, item: Value) {
    if !v.is_array() {
        *v = json!([]);
    }
    if let Some(list) = v.as_array_mut() {
        list.push(item);
    }
}

/// Probe defaults the API server fills in.
fn default_probe(probe: &mut Value) {
    for (k, v) in [("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1), ("failureThreshold", 3)] {
        if probe.get(k).is_none() {
            probe[k] = json!(v);
        }
    }
    if let Some(get) = probe.get_mut("httpGet")
        && get.get("scheme").is_none()
    {
        get["scheme"] = json!("HTTP");
    }
}

/// The API server's defaults for a container.
fn default_container(c: &mut Value) {
    let image = c["image"].as_str().unwrap_or_default();
    let tagged =
        image.contains('@') || image.rsplit('/').next().is_some_and(|n| n.contains(':') && !n.ends_with(":latest"));
    for (k, v) in [
        ("terminationMessagePath", json!("/dev/termination-log")),
        ("terminationMessagePolicy", json!("File")),
        ("imagePullPolicy", json!(if tagged { "IfNotPresent" } else { "Always" })),
    ] {
        if c.get(k).is_none() {
            c[k] = v;
        }
    }
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe) {
            default_probe(p);
        }
    }
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports {
            if p.get("protocol").is_none() {
                p["protocol"] = json!("TCP");
            }
        }
    }
}

/// A pod's spec: the template's, changed as the misbehaviour says, then
/// defaulted as the API server and scheduler do. `suffix` names the
/// service-account volume a token-mounting mode adds.
pub fn pod_spec(c: &Cluster, template_spec: &Value, suffix: &str) -> Value {
    let mut spec = template_spec.clone();
    let weaker = c.is(Mode::Weaker);
    let sandbox = &mut spec["containers"][0];
    if weaker || c.is(Mode::TokenMounted) {
        let volume = format!("kube-api-access-{suffix}");
        push(&mut sandbox["volumeMounts"], json!({"name": volume, "readOnly": true, "mountPath": TOKEN_DIR}));
        spec["automountServiceAccountToken"] = json!(true);
        push(
            &mut spec["volumes"],
            json!({"name": volume, "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}}),
        );
    }
    let sandbox = &mut spec["containers"][0];
    if weaker || c.is(Mode::WritableRoot) {
        sandbox["securityContext"]["readOnlyRootFilesystem"] = json!(false);
    }
    if c.is(Mode::Capabilities) {
        push(&mut sandbox["securityContext"]["capabilities"]["add"], json!("NET_ADMIN"));
    }
    if c.is(Mode::ExecProbe) {
        sandbox["livenessProbe"] = json!({"exec": {"command": ["true"]}});
    }
    if c.is(Mode::Unpinned) {
        sandbox["image"] = json!("plimsoll-sandbox:latest");
    }
    if c.is(Mode::ForeignHash)
        && let Some(args) = sandbox["args"].as_array_mut()
        && let Some(hash) = args.last_mut()
    {
        *hash = json!(c.foreign_sha256);
    }
    if weaker || c.is(Mode::ExtraContainer) {
        push(&mut spec["containers"], json!({"name": "sidecar", "image": c.image(), "command": ["sleep", "infinity"]}));
    }
    if c.is(Mode::ExtraField) {
        spec["futureIsolation"] = json!("off");
    }
    if c.is(Mode::HostNamespace) {
        spec["hostPID"] = json!(true);
    }
    if c.is(Mode::DiskVolume)
        && let Some(tmp) = spec["volumes"].as_array_mut().and_then(|v| v.iter_mut().find(|v| v["name"] == "tmp"))
    {
        tmp["emptyDir"] = json!({"sizeLimit": "64Mi"});
    }
    if let Some(cs) = spec["containers"].as_array_mut() {
        cs.iter_mut().for_each(default_container);
    }
    let defaults = [
        ("nodeName", json!(NODE)),
        ("serviceAccountName", json!("default")),
        ("serviceAccount", json!("default")),
        ("schedulerName", json!("default-scheduler")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("priority", json!(0)),
        ("preemptionPolicy", json!("PreemptLowerPriority")),
        (
            "tolerations",
            json!([
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ]),
        ),
    ];
    for (k, v) in defaults {
        if spec.get(k).is_none() {
            spec[k] = v;
        }
    }
    spec
}

/// A Pod for `sandbox`: named after it, owned by it, labelled with the
/// template's labels and the two hashes, status Pending, its spec as the API
/// server keeps it ([`quantity::pod_defaults`]).
///
/// # Errors
///
/// What the API server would refuse the pod for (an amount that is no quantity).
pub fn pod(c: &Cluster, sandbox: &Value, suffix: &str) -> Result<Value, String> {
    let name = sandbox["metadata"]["name"].as_str().unwrap_or_default();
    let mut labels = json!({APP_LABEL.0: APP_LABEL.1});
    if let Some(l) = sandbox.pointer("/spec/podTemplate/metadata/labels").and_then(Value::as_object) {
        // The template's own labels (not agent-sandbox's bookkeeping ones).
        for (k, v) in l.iter().filter(|(k, _)| !k.starts_with("agents.x-k8s.io/")) {
            labels[k] = v.clone();
        }
    }
    labels[TEMPLATE_REF_HASH] = json!(name_hash(c.template_name()));
    labels[SANDBOX_NAME_HASH] = json!(name_hash(name));
    let template_spec = sandbox.pointer("/spec/podTemplate/spec").cloned().unwrap_or(Value::Null);
    let mut spec = pod_spec(c, &template_spec, suffix);
    quantity::pod_defaults(&mut spec)?;
    let status = pod_status(c, &spec, &PodState::Pending, "", now());
    Ok(json!({
        "metadata": {"labels": labels, "ownerReferences": [owner_ref(sandbox)]},
        "spec": spec,
        "status": status,
    }))
}

/// Where a pod's container is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Scheduled, no container yet (or never, in `never-ready`).
    Pending,
    /// Its container runs; sandboxd not yet answering.
    Running { container: String, started: u64 },
    /// sandboxd answers its readiness probe.
    Ready { container: String, started: u64 },
    /// Its container ended (or could not start): `exit` and why.
    Failed { container: String, started: u64, finished: u64, exit: i64, why: String },
}

/// A pod's `status` for `state`; `spec` is its spec (Null: none yet), `ip`
/// its address once its container started.
pub fn pod_status(c: &Cluster, spec: &Value, state: &PodState, ip: &str, start_time: u64) -> Value {
    let t = |s: u64| json!(rfc3339(s));
    let cond = |kind: &str, ok: bool, reason: Option<&str>, msg: Option<&str>| {
        let mut v = json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastProbeTime": null,
                           "lastTransitionTime": rfc3339(start_time)});
        if let (Some(r), Some(m)) = (reason, msg) {
            v["reason"] = json!(r);
            v["message"] = json!(m);
        }
        v
    };
    let names: Vec<String> = spec["containers"]
        .as_array()
        .map(|cs| cs.iter().filter_map(|c| c["name"].as_str()).map(str::to_string).collect())
        .unwrap_or_else(|| vec!["sandbox".into()]);
    let unready = format!("containers with unready status: [{}]", names.join(" "));
    let (phase, ready, started) = match state {
        PodState::Pending => ("Pending", false, false),
        PodState::Running { .. } => ("Running", false, true),
        PodState::Ready { .. } => ("Running", true, true),
        PodState::Failed { .. } => ("Failed", false, false),
    };
    let why = if matches!(state, PodState::Failed { .. }) { "PodFailed" } else { "ContainersNotReady" };
    let (r, m) = if ready { (None, None) } else { (Some(why), Some(unready.as_str())) };
    let mut status = json!({
        "phase": phase,
        "conditions": [
            cond("PodReadyToStartContainers", started || ready, None, None),
            cond("Initialized", true, None, None),
            cond("Ready", ready, r, m),
            cond("ContainersReady", ready, r, m),
            cond("PodScheduled", true, None, None),
        ],
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "startTime": t(start_time),
        "qosClass": "Guaranteed",
    });
    if !ip.is_empty() && phase == "Running" {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    let image_id = format!("docker-pullable://plimsoll-sandbox@sha256:{}", c.image_hex);
    let image = spec.pointer("/containers/0/image").cloned().unwrap_or_else(|| json!(c.image()));
    let statuses: Vec<Value> = names
        .iter()
        .map(|name| {
            let (id, st) = match state {
                PodState::Pending => (None, json!({"waiting": {"reason": "ContainerCreating"}})),
                PodState::Running { container, started } | PodState::Ready { container, started } => {
                    (Some(container), json!({"running": {"startedAt": t(*started)}}))
                }
                PodState::Failed { container, started, finished, exit, why } => (
                    Some(container),
                    json!({"terminated": {"exitCode": exit, "reason": "Error", "message": why,
                                          "startedAt": t(*started), "finishedAt": t(*finished),
                                          "containerID": format!("docker://{container}")}}),
                ),
            };
            let mut s = json!({"name": name, "ready": ready, "started": started, "restartCount": 0,
                               "image": image, "imageID": image_id, "state": st});
            if let Some(id) = id.filter(|id| !id.is_empty()) {
                s["containerID"] = json!(format!("docker://{id}"));
            } else if !matches!(state, PodState::Pending) {
                s["imageID"] = json!("");
            }
            s
        })
        .collect();
    status["containerStatuses"] = Value::Array(statuses);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::objects::{template_pod_spec, test_cluster as cluster};

    /// Every JSON pointer at which `a` and `b` differ (leaves, or a whole
    /// subtree present on one side only).
    fn diff(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let here = format!("{at}/{k}");
                    match (x.get(k), y.get(k)) {
                        (Some(p), Some(q)) => diff(p, q, &here, out),
                        _ => out.push(here),
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) => {
                for i in 0..x.len().max(y.len()) {
                    let here = format!("{at}/{i}");
                    match (x.get(i), y.get(i)) {
                        (Some(p), Some(q)) => diff(p, q, &here, out),
                        _ => out.push(here),
                    }
                }
            }
            _ if a != b => out.push(at.to_string()),
            _ => {}
        }
    }

    fn differences(mode: Mode) -> Vec<String> {
        let t = template_pod_spec(&cluster(None));
        let plain = pod_spec(&cluster(None), &t, "abcde");
        let odd = pod_spec(&cluster(Some(mode)), &t, "abcde");
        let mut out = Vec::new();
        diff(&plain, &odd, "", &mut out);
        out
    }

    #[test]
    fn a_well_behaved_pod_is_the_template_plus_only_the_api_servers_defaults() {
        let c = cluster(None);
        let t = template_pod_spec(&c);
        let p = pod_spec(&c, &t, "abcde");
        let mut out = Vec::new();
        diff(&t, &p, "", &mut out);
        let expected = [
            "/containers/0/imagePullPolicy",
            "/containers/0/readinessProbe/failureThreshold",
            "/containers/0/readinessProbe/httpGet/scheme",
            "/containers/0/readinessProbe/periodSeconds",
            "/containers/0/readinessProbe/successThreshold",
            "/containers/0/readinessProbe/timeoutSeconds",
            "/containers/0/terminationMessagePath",
            "/containers/0/terminationMessagePolicy",
            "/nodeName",
            "/preemptionPolicy",
            "/priority",
            "/schedulerName",
            "/serviceAccount",
            "/serviceAccountName",
            "/terminationGracePeriodSeconds",
            "/tolerations",
        ];
        assert_eq!(out, expected);
        assert_eq!(p["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(p["tolerations"][1]["tolerationSeconds"], 300);
    }

    #[test]
    fn each_mode_changes_the_pod_exactly_as_it_says() {
        let token = ["/automountServiceAccountToken", "/containers/0/volumeMounts/1", "/volumes/1"];
        let cases: Vec<(Mode, Vec<&str>)> = vec![
            (Mode::TokenMounted, token.to_vec()),
            (Mode::WritableRoot, vec!["/containers/0/securityContext/readOnlyRootFilesystem"]),
            (Mode::ExtraContainer, vec!["/containers/1"]),
            (
                Mode::Weaker,
                vec![
                    "/automountServiceAccountToken",
                    "/containers/0/securityContext/readOnlyRootFilesystem",
                    "/containers/0/volumeMounts/1",
                    "/containers/1",
                    "/volumes/1",
                ],
            ),
            (Mode::ExtraField, vec!["/futureIsolation"]),
            (Mode::ExecProbe, vec!["/containers/0/livenessProbe"]),
            (Mode::HostNamespace, vec!["/hostPID"]),
            (Mode::Unpinned, vec!["/containers/0/image", "/containers/0/imagePullPolicy"]),
            (Mode::ForeignHash, vec!["/containers/0/args/4"]),
            (Mode::Capabilities, vec!["/containers/0/securityContext/capabilities/add/2"]),
            (Mode::DiskVolume, vec!["/volumes/0/emptyDir/medium"]),
        ];
        for (mode, expected) in cases {
            assert_eq!(differences(mode), expected, "{mode:?}");
        }
        for (name, _) in super::super::MODES {
            let mode = Mode::parse(name).expect("mode");
            let pod_modes = [
                Mode::TokenMounted,
                Mode::WritableRoot,
                Mode::ExtraContainer,
                Mode::Weaker,
                Mode::ExtraField,
                Mode::ExecProbe,
                Mode::HostNamespace,
                Mode::Unpinned,
                Mode::ForeignHash,
                Mode::Capabilities,
                Mode::DiskVolume,
            ];
            if !pod_modes.contains(&mode) {
                assert_eq!(differences(mode), Vec::<String>::new(), "{name} leaves pods as the template says");
            }
        }
    }

    #[test]
    fn mode_values_are_the_ones_the_spec_names() {
        let t = template_pod_spec(&cluster(None));
        let p = pod_spec(&cluster(Some(Mode::Weaker)), &t, "abcde");
        assert_eq!(p["containers"][0]["volumeMounts"][1]["mountPath"], TOKEN_DIR);
        assert_eq!(p["volumes"][1]["name"], "kube-api-access-abcde");
        assert_eq!(p["containers"][1]["name"], "sidecar");
        let p = pod_spec(&cluster(Some(Mode::Unpinned)), &t, "x");
        assert_eq!(
            (p["containers"][0]["image"].as_str(), p["containers"][0]["imagePullPolicy"].as_str()),
            (Some("plimsoll-sandbox:latest"), Some("Always"))
        );
        let p = pod_spec(&cluster(Some(Mode::ForeignHash)), &t, "x");
        assert_eq!(p["containers"][0]["args"][4], "22".repeat(32));
        let p = pod_spec(&cluster(Some(Mode::ExecProbe)), &t, "x");
        assert_eq!(p["containers"][0]["livenessProbe"]["exec"], json!({"command": ["true"]}));
        let p = pod_spec(&cluster(Some(Mode::Capabilities)), &t, "x");
        assert_eq!(
            p["containers"][0]["securityContext"]["capabilities"]["add"],
            json!(["SETUID", "SETGID", "NET_ADMIN"])
        );
    }

    #[test]
    fn a_pods_status_follows_its_container() {
        let c = cluster(None);
        let t = template_pod_spec(&c);
        let spec = pod_spec(&c, &t, "x");
        let ready = pod_status(&c, &spec, &PodState::Ready { container: "cid".into(), started: 1 }, "10.244.0.2", 1);
        assert_eq!(ready["phase"], "Running");
        assert_eq!(ready["podIPs"], json!([{"ip": "10.244.0.2"}]));
        assert_eq!(
            ready["conditions"][2],
            json!({"type": "Ready", "status": "True", "lastProbeTime": null,
                                                  "lastTransitionTime": rfc3339(1)})
        );
        let s = &ready["containerStatuses"][0];
        assert_eq!(s["containerID"], "docker://cid");
        assert_eq!(s["imageID"], format!("docker-pullable://plimsoll-sandbox@sha256:{}", "ab".repeat(32)));
        assert_eq!((s["ready"].as_bool(), s["started"].as_bool()), (Some(true), Some(true)));
        let pending = pod_status(&c, &spec, &PodState::Pending, "", 1);
        assert_eq!(pending["phase"], "Pending");
        assert!(pending.get("podIP").is_none());
        let failed = PodState::Failed { container: "cid".into(), started: 1, finished: 2, exit: 1, why: "x".into() };
        let failed = pod_status(&c, &spec, &failed, "10.244.0.2", 1);
        assert_eq!(failed["phase"], "Failed");
        assert_eq!(failed["containerStatuses"][0]["state"]["terminated"]["exitCode"], 1);
    }
}
