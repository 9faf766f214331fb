//! The read-back: what a pod, its template, its runtime class and the network
//! policies selecting it must be before any code goes in. Pure checks over the
//! API's JSON, so every refusal is tested without a cluster.
//!
//! The template is held to the walls ([`walls`]); each claimed pod is held to
//! the template proved at startup, field by field, with nothing beyond it but
//! what the API server and scheduler default ([`held_to`]), and to the walls
//! again. A field neither names is refused: a newer Kubernetes may have added
//! a way to weaken the pod that this check cannot judge.

use serde_json::{Map, Value};

use crate::plimsoll::types::types::Tier;
use crate::quantity::Quantity;

/// The Kata Containers handlers, as agent-sandbox's examples (2fd412d5) and
/// kata-deploy register them: QEMU (`kata-qemu`, GKE), Firecracker (`kata-fc`),
/// Cloud Hypervisor, and AKS's Pod Sandboxing (`kata`, or `kata-mshv` on
/// Hyper-V, under the RuntimeClass `kata-vm-isolation`).
const KATA: [&str; 6] = ["kata", "kata-qemu", "kata-fc", "kata-clh", "kata-clh-runtime-rs", "kata-mshv"];

/// The tier a runtime class handler stands for: gVisor is a kernel of its own,
/// runc shares the node's, Kata runs each pod in a VM. Any other is refused.
pub fn tier_of(handler: &str) -> Result<Tier, String> {
    match handler {
        "runsc" => Ok(Tier::Kernel),
        "runc" => Ok(Tier::Container),
        h if KATA.contains(&h) => Ok(Tier::Vm),
        other => Err(format!(
            "the runtime class's handler {other:?} is not one plimsoll reads a tier from \
             (runsc: kernel, runc: container, {}: vm)",
            KATA.join(", ")
        )),
    }
}

/// What the pod's one container must run: sandboxd, listening on `port`,
/// knowing only the SHA-256 of the token the host holds.
pub struct Sandboxd<'a> {
    pub token_sha256: &'a str,
    pub port: u16,
}

/// Fields of a pod's spec the API server or scheduler sets when the template
/// leaves them out; any value of these is judged by [`walls`] where it matters.
const DEFAULTED_SPEC: &[&str] = &[
    "nodeName",
    "serviceAccountName",
    "serviceAccount",
    "schedulerName",
    "terminationGracePeriodSeconds",
    "tolerations",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
    "enableServiceLinks",
    "securityContext",
    "dnsPolicy",
    "restartPolicy",
    "hostname",
    "subdomain",
    "overhead",
    "nodeSelector",
];

/// Fields of a container the API server defaults.
const DEFAULTED_CONTAINER: &[&str] =
    &["terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy", "resources"];

/// Fields of a probe the API server defaults.
const DEFAULTED_PROBE: &[&str] = &["timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"];

/// Every field of a pod spec this check knows; any other is refused.
const KNOWN_SPEC: &[&str] = &[
    "containers",
    "volumes",
    "runtimeClassName",
    "automountServiceAccountToken",
    "dnsConfig",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "hostUsers",
    "initContainers",
    "ephemeralContainers",
    "shareProcessNamespace",
    "imagePullSecrets",
    "affinity",
    "topologySpreadConstraints",
    "activeDeadlineSeconds",
    "setHostnameAsFQDN",
];

/// Every field of a container this check knows.
const KNOWN_CONTAINER: &[&str] = &[
    "name",
    "image",
    "command",
    "args",
    "ports",
    "env",
    "envFrom",
    "workingDir",
    "securityContext",
    "readinessProbe",
    "livenessProbe",
    "startupProbe",
    "lifecycle",
    "volumeMounts",
    "volumeDevices",
    "stdin",
    "stdinOnce",
    "tty",
];

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

fn truthy(v: &Value, key: &str) -> bool {
    get(v, key).and_then(Value::as_bool) == Some(true)
}

fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    get(v, key).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    get(v, key).and_then(Value::as_str).unwrap_or_default()
}

/// Whether `image` names its content: `<name>@sha256:<64 lowercase hex>`.
pub fn pinned(image: &str) -> bool {
    image.rsplit_once("@sha256:").is_some_and(|(name, digest)| {
        !name.is_empty()
            && digest.len() == 64
            && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The walls a pod spec (a template's or a claimed pod's) must stand behind
/// under `handler`, each refusal naming the field.
pub fn walls(spec: &Value, handler: &str, sandboxd: &Sandboxd<'_>) -> Result<(), String> {
    if let Some(field) = spec
        .as_object()
        .and_then(|m| m.keys().find(|k| !KNOWN_SPEC.contains(&k.as_str()) && !DEFAULTED_SPEC.contains(&k.as_str())))
    {
        return Err(format!("its spec.{field} is a field plimsoll does not know, so cannot judge"));
    }
    if get(spec, "automountServiceAccountToken").and_then(Value::as_bool) != Some(false) {
        return Err("it does not set automountServiceAccountToken: false, so an API token may be mounted".into());
    }
    for ns in ["hostNetwork", "hostPID", "hostIPC"] {
        if truthy(spec, ns) {
            return Err(format!("it shares the node's namespace ({ns}: true)"));
        }
    }
    if truthy(spec, "shareProcessNamespace") {
        return Err("it shares one process namespace across containers (shareProcessNamespace: true)".into());
    }
    for extra in ["initContainers", "ephemeralContainers"] {
        if !array(spec, extra).is_empty() {
            return Err(format!("it has {extra}; plimsoll runs pods of one container only"));
        }
    }
    let containers = array(spec, "containers");
    let [container] = containers else {
        let names: Vec<&str> = containers.iter().map(|c| text(c, "name")).collect();
        return Err(format!("it has {} containers ({}), not one", containers.len(), names.join(", ")));
    };
    if text(spec, "dnsPolicy") != "None"
        || array(get(spec, "dnsConfig").unwrap_or(&Value::Null), "nameservers").is_empty()
    {
        return Err("its resolver is not fixed (dnsPolicy None with dnsConfig.nameservers)".into());
    }
    if !array(spec, "imagePullSecrets").is_empty() {
        return Err("it holds image pull secrets".into());
    }
    container_walls(container, spec, handler, sandboxd)?;
    volume_walls(spec, container)
}

fn container_walls(c: &Value, spec: &Value, handler: &str, sandboxd: &Sandboxd<'_>) -> Result<(), String> {
    let name = text(c, "name");
    if let Some(field) = c.as_object().and_then(|m| {
        m.keys().find(|k| !KNOWN_CONTAINER.contains(&k.as_str()) && !DEFAULTED_CONTAINER.contains(&k.as_str()))
    }) {
        return Err(format!("its container {name}'s {field} is a field plimsoll does not know, so cannot judge"));
    }
    let image = text(c, "image");
    if !pinned(image) {
        return Err(format!("its container {name}'s image {image:?} is not pinned by digest (<name>@sha256:<64 hex>)"));
    }
    let argv: Vec<&str> = array(c, "command").iter().chain(array(c, "args")).filter_map(Value::as_str).collect();
    let hash_at = argv.iter().position(|a| *a == "--token-sha256").map(|i| argv.get(i + 1).copied());
    let listens = argv
        .windows(2)
        .any(|w| w[0] == "--listen" && w[1].rsplit_once(':').is_some_and(|(_, p)| p == sandboxd.port.to_string()));
    if !argv.contains(&"sandboxd") || !listens {
        return Err(format!(
            "its container {name} does not start sandboxd listening on port {} (it runs {argv:?})",
            sandboxd.port
        ));
    }
    if hash_at != Some(Some(sandboxd.token_sha256)) {
        return Err(format!(
            "its sandboxd is not started with the SHA-256 of this host's sandboxd token (--token-sha256 {})",
            sandboxd.token_sha256
        ));
    }
    if !array(c, "env").is_empty() || !array(c, "envFrom").is_empty() {
        return Err(format!(
            "its container {name} is given environment variables; sandboxd's runs take none from the pod"
        ));
    }
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
        if let Some(p) = get(c, probe)
            && get(p, "exec").is_some()
        {
            return Err(format!("its container {name} has an exec {probe}: a command the kubelet runs inside"));
        }
    }
    if get(c, "lifecycle").is_some() {
        return Err(format!("its container {name} has lifecycle hooks: commands the kubelet runs inside"));
    }
    if !array(c, "volumeDevices").is_empty() {
        return Err(format!("its container {name} is given block devices"));
    }
    let sc = get(c, "securityContext").unwrap_or(&Value::Null);
    if truthy(sc, "privileged") {
        return Err(format!("its container {name} is privileged"));
    }
    if get(sc, "allowPrivilegeEscalation").and_then(Value::as_bool) != Some(false) {
        return Err(format!("its container {name} does not set allowPrivilegeEscalation: false"));
    }
    if get(sc, "readOnlyRootFilesystem").and_then(Value::as_bool) != Some(true) {
        return Err(format!("its container {name}'s root is writable (readOnlyRootFilesystem is not true)"));
    }
    let caps = get(sc, "capabilities").unwrap_or(&Value::Null);
    let drop: Vec<&str> = array(caps, "drop").iter().filter_map(Value::as_str).collect();
    if !drop.contains(&"ALL") {
        return Err(format!("its container {name} does not drop ALL capabilities"));
    }
    let added: Vec<&str> = array(caps, "add").iter().filter_map(Value::as_str).collect();
    if let Some(cap) = added.iter().find(|c| !matches!(c.trim_start_matches("CAP_"), "SETUID" | "SETGID")) {
        return Err(format!("its container {name} adds capability {cap}; only SETUID and SETGID are allowed"));
    }
    if handler == "runc" {
        let profile = |v: &Value| get(v, "seccompProfile").map(|p| text(p, "type").to_string());
        let pod = get(spec, "securityContext").and_then(profile);
        let effective = profile(sc).or(pod).unwrap_or_default();
        if !matches!(effective.as_str(), "RuntimeDefault" | "Localhost") {
            return Err(format!(
                "its container {name} has no seccomp profile under runc (seccompProfile.type {effective:?}; \
                 RuntimeDefault or Localhost is required)"
            ));
        }
    }
    Ok(())
}

fn volume_walls(spec: &Value, c: &Value) -> Result<(), String> {
    for v in array(spec, "volumes") {
        let name = text(v, "name");
        let kinds: Vec<&String> =
            v.as_object().map(|m| m.keys().filter(|k| *k != "name").collect()).unwrap_or_default();
        let Some(dir) = get(v, "emptyDir").filter(|_| kinds.len() == 1) else {
            let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
            return Err(format!("its volume {name} is {}, not an emptyDir", kinds.join(", ")));
        };
        if text(dir, "medium") != "Memory" || get(dir, "sizeLimit").is_none() {
            return Err(format!("its volume {name} is not a memory-backed emptyDir with a sizeLimit"));
        }
    }
    let mounts: Vec<&str> = array(c, "volumeMounts").iter().map(|m| text(m, "mountPath")).collect();
    for m in array(c, "volumeMounts") {
        let path = text(m, "mountPath");
        if get(m, "subPath").is_some() || get(m, "subPathExpr").is_some() {
            return Err(format!("its mount at {path} takes a subPath"));
        }
        if path.starts_with("/var/run/secrets") || path.starts_with("/run/secrets") {
            return Err(format!("it mounts {path}, where Kubernetes puts API tokens"));
        }
        if let Some(outer) =
            mounts.iter().find(|o| **o != path && path.starts_with(&format!("{}/", o.trim_end_matches('/'))))
        {
            return Err(format!("its mount at {path} lies beneath the mount at {outer}"));
        }
    }
    Ok(())
}

/// Holds a claimed pod's spec to its template's: every field the template sets
/// is the pod's too, and the pod has nothing beyond it but what the API server
/// defaults. `at` names where, for the refusal.
pub fn held_to(pod: &Value, template: &Value) -> Result<(), String> {
    within(pod, template, "spec", Level::Spec)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Spec,
    Container,
    Probe,
    Other,
}

fn child_level(parent: Level, key: &str) -> Level {
    match (parent, key) {
        (Level::Spec, "containers") => Level::Container,
        (Level::Container, "readinessProbe" | "livenessProbe" | "startupProbe") => Level::Probe,
        _ => Level::Other,
    }
}

fn defaulted(level: Level, key: &str, at: &str) -> bool {
    match level {
        Level::Spec => DEFAULTED_SPEC.contains(&key),
        Level::Container => DEFAULTED_CONTAINER.contains(&key),
        Level::Probe => DEFAULTED_PROBE.contains(&key),
        // A port's protocol and an HTTP probe's scheme.
        Level::Other => (key == "protocol" && at.contains(".ports[")) || (key == "scheme" && at.ends_with(".httpGet")),
    }
}

fn within(pod: &Value, template: &Value, at: &str, level: Level) -> Result<(), String> {
    match (pod, template) {
        (Value::Object(p), Value::Object(t)) => object_within(p, t, at, level),
        (Value::Array(p), Value::Array(t)) => {
            if p.len() != t.len() {
                return Err(format!("its {at} has {} entries, the template's {}", p.len(), t.len()));
            }
            let level = if level == Level::Container { Level::Container } else { Level::Other };
            p.iter().zip(t).enumerate().try_for_each(|(i, (p, t))| within(p, t, &format!("{at}[{i}]"), level))
        }
        (p, t) if p == t => Ok(()),
        (p, t) => Err(format!("its {at} is {p}, the template's {t}")),
    }
}

fn object_within(p: &Map<String, Value>, t: &Map<String, Value>, at: &str, level: Level) -> Result<(), String> {
    for (key, tv) in t {
        let here = format!("{at}.{key}");
        match p.get(key) {
            Some(pv) if level == Level::Container && key == "resources" => resources_within(pv, tv, &here)?,
            Some(pv) => within(pv, tv, &here, child_level(level, key))?,
            None if tv.is_null() => {}
            None => return Err(format!("its {here} is missing, the template's is {tv}")),
        }
    }
    for (key, pv) in p {
        if !t.contains_key(key) && !pv.is_null() && !defaulted(level, key, at) {
            return Err(format!("its {at}.{key} is {pv}, which the template does not set"));
        }
    }
    Ok(())
}

/// Holds a container's resources to the template's as the API server keeps
/// them: every amount by value (`cpu: 1` comes back `"1"`, `0.5` as
/// `"500m"`), and `requests` filled from `limits` for each resource the
/// template gives a limit and no request.
fn resources_within(pod: &Value, template: &Value, at: &str) -> Result<(), String> {
    let empty = Map::new();
    let table = |v: &Value, key: &str| v.get(key).and_then(Value::as_object).unwrap_or(&empty).clone();
    let limits = table(template, "limits");
    let mut requests = table(template, "requests");
    for (resource, amount) in &limits {
        requests.entry(resource.clone()).or_insert_with(|| amount.clone());
    }
    amounts_within(&table(pod, "limits"), &limits, &format!("{at}.limits"))?;
    amounts_within(&table(pod, "requests"), &requests, &format!("{at}.requests"))?;
    let (p, t) = (pod.as_object().unwrap_or(&empty), template.as_object().unwrap_or(&empty));
    let rest = |m: &Map<String, Value>| -> Map<String, Value> {
        m.iter()
            .filter(|(k, _)| !matches!(k.as_str(), "limits" | "requests"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    object_within(&rest(p), &rest(t), at, Level::Other)
}

/// One table of amounts: the same resources, each the same by value.
fn amounts_within(pod: &Map<String, Value>, template: &Map<String, Value>, at: &str) -> Result<(), String> {
    for (resource, tv) in template {
        let pv = pod.get(resource).ok_or_else(|| format!("its {at}.{resource} is missing, the template's is {tv}"))?;
        let (pq, tq) = (Quantity::of(pv), Quantity::of(tv));
        match (pq, tq) {
            (Ok(a), Ok(b)) if a == b => {}
            (_, Err(e)) => return Err(format!("the template's {at}.{resource}: {e}")),
            _ => return Err(format!("its {at}.{resource} is {pv}, the template's {tv}")),
        }
    }
    if let Some((resource, pv)) = pod.iter().find(|(r, _)| !template.contains_key(*r)) {
        return Err(format!("its {at}.{resource} is {pv}, which the template does not set"));
    }
    Ok(())
}

/// Whether a `podSelector` selects a pod with `labels`. A selector this check
/// cannot read is taken to select it, so its rules are judged.
fn selects(selector: &Value, labels: &Map<String, Value>) -> bool {
    let matches_labels = get(selector, "matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)));
    let expressions = array(selector, "matchExpressions").iter().all(|e| {
        let key = text(e, "key");
        let values: Vec<&Value> = array(e, "values").iter().collect();
        let has = labels.get(key);
        match text(e, "operator") {
            "In" => has.is_some_and(|v| values.contains(&v)),
            "NotIn" => has.is_none_or(|v| !values.contains(&v)),
            "Exists" => has.is_some(),
            "DoesNotExist" => has.is_none(),
            _ => true,
        }
    });
    matches_labels && expressions
}

/// Checks that the network policies (a `NetworkPolicyList`'s items) selecting a
/// pod with `labels` deny it all egress: at least one selects it for egress,
/// and none allows any (policies add up, so one rule anywhere opens a way out).
/// Returns the policies that select it, as pinned text.
pub fn denies_egress(items: &[Value], labels: &Map<String, Value>) -> Result<String, String> {
    let mut selecting: Vec<(String, &Value)> = Vec::new();
    for p in items {
        let meta = get(p, "metadata").unwrap_or(&Value::Null);
        let name = text(meta, "name").to_string();
        let spec = get(p, "spec").unwrap_or(&Value::Null);
        if !selects(get(spec, "podSelector").unwrap_or(&Value::Null), labels) {
            continue;
        }
        let types: Vec<&str> = array(spec, "policyTypes").iter().filter_map(Value::as_str).collect();
        let egress_type = types.contains(&"Egress") || (types.is_empty() && get(spec, "egress").is_some());
        if egress_type && !array(spec, "egress").is_empty() {
            return Err(format!(
                "network policy {name} allows the pod egress ({})",
                Value::from(array(spec, "egress"))
            ));
        }
        if egress_type {
            selecting.push((name, spec));
        }
    }
    if selecting.is_empty() {
        return Err("no network policy selects the pod for egress, so it may reach anything".into());
    }
    selecting.sort_by(|a, b| a.0.cmp(&b.0));
    let pinned: Vec<Value> =
        selecting.into_iter().map(|(name, spec)| Value::from(vec![Value::from(name), spec.clone()])).collect();
    Ok(Value::from(pinned).to_string())
}

/// The tier markers a run's first command reads as the guest: the boot ID, the
/// seccomp mode, and the kernel log's first line.
pub const MARKERS: &str = r#"b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null); s=$(sed -n 's/^Seccomp:[[:space:]]*//p' /proc/self/status 2>/dev/null); k=$(dmesg 2>/dev/null | head -n 1); printf '%s\n%s\n%s\n' "$b" "$s" "$k""#;

/// Judges what [`MARKERS`] printed against the tier `handler` stands for:
/// gVisor's kernel log under runsc, seccomp filtering under runc, a boot ID
/// other than the node's under Kata.
pub fn markers(handler: &str, printed: &str, node_boot_id: &str) -> Result<(), String> {
    let mut lines = printed.lines();
    let boot_id = lines.next().unwrap_or_default().trim();
    let seccomp = lines.next().unwrap_or_default().trim();
    let kernel_log = lines.next().unwrap_or_default().trim();
    let gvisor = kernel_log.contains("Starting gVisor");
    match tier_of(handler)? {
        Tier::Kernel if !gvisor => Err(format!(
            "the runtime class says runsc, but the kernel log's first line is {kernel_log:?}, not gVisor's"
        )),
        Tier::Container if gvisor || seccomp != "2" => Err(format!(
            "the runtime class says runc, but the sandbox's seccomp mode is {seccomp:?} and its kernel log says {kernel_log:?}"
        )),
        Tier::Vm if boot_id.is_empty() || boot_id == node_boot_id.trim() => Err(format!(
            "the runtime class says {handler}, but the sandbox's boot ID {boot_id:?} is its node's: no VM of its own"
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
