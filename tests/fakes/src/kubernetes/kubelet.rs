//! The fake's kubelet: each pod runs as one docker container made from the
//! pod's own spec (so a pod that asks for a writable root or an extra
//! capability really gets it), is Ready once its sandboxd answers its
//! readiness probe, and turns Failed when its container dies.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::objects::{self, TOKEN_DIR};
use super::pods::{self, PodState};
use super::store::{Key, Resource};
use super::{Fake, Mode, lock};
use crate::backing::{PodContainer, Tmpfs};
use crate::util::{now, random};

/// How often a starting pod is probed.
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// The pods' process and thread limit, as a kubelet's `--pod-max-pids` sets
/// it (clusters commonly choose 1024 to 4096; unset, there is none). Under
/// gVisor the sandbox's own threads and its ptrace stubs count against it, as
/// on a real node: at 256, a granted run's relays and node's threads ran the
/// sentry out of threads and the sandbox ended.
pub const POD_MAX_PIDS: u32 = 1024;

/// How long one probe may take: a `docker exec` on a loaded machine is slow.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a Ready pod's container is checked.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// A Kubernetes quantity (`512Mi`, `1G`, `64Mi`, `1000`) in bytes.
pub fn bytes(q: &str) -> Option<u64> {
    let split = q.find(|c: char| !c.is_ascii_digit()).unwrap_or(q.len());
    let (n, unit) = q.split_at(split);
    let n: u64 = n.parse().ok()?;
    let scale: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// A CPU quantity (`1`, `500m`) as docker's `--cpus` takes it.
pub fn cpus(q: &str) -> Option<String> {
    match q.strip_suffix('m') {
        Some(milli) => milli.parse::<u32>().ok().map(|m| format!("{}", f64::from(m) / 1000.0)),
        None => q.parse::<f64>().ok().filter(|c| *c > 0.0).map(|_| q.to_string()),
    }
}

/// The docker runtime a RuntimeClass handler runs on: gVisor for `runsc`,
/// runc for anything else (no VM runs here, so `kata` is runc too). In
/// `remapped` the other one: runsc and runc trade places, others stay runc.
pub fn runtime(handler: &str, remapped: bool) -> &'static str {
    match (handler, remapped) {
        ("runsc", false) | ("runc", true) => "runsc",
        _ => "runc",
    }
}

/// The container a pod's spec asks for; `tokens`, where the pod's service
/// account files are on this machine (for a spec that mounts them).
pub fn container_for(spec: &Value, runtime: &str, tokens: Option<&std::path::Path>) -> Result<PodContainer, String> {
    let c = spec.pointer("/containers/0").ok_or("the pod has no container")?;
    let sc = &c["securityContext"];
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect()).unwrap_or_default()
    };
    let limits = &c["resources"]["limits"];
    let memory = limits["memory"].as_str().unwrap_or("512Mi");
    let memory_bytes = bytes(memory).ok_or_else(|| format!("memory limit {memory:?} is not a quantity"))?;
    let cpus = match limits["cpu"].as_str() {
        Some(q) => Some(cpus(q).ok_or_else(|| format!("cpu limit {q:?} is not a quantity"))?),
        None => None,
    };
    let mut tmpfs = Vec::new();
    let mut binds = Vec::new();
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let (Some(name), Some(path)) = (m["name"].as_str(), m["mountPath"].as_str()) else { continue };
        let volume = spec["volumes"].as_array().and_then(|vs| vs.iter().find(|v| v["name"] == name));
        let Some(volume) = volume else { return Err(format!("volume {name:?} is not in the pod")) };
        if let Some(dir) = volume.get("emptyDir") {
            // Memory or not, a tmpfs: the fake puts nothing of a pod's on disk.
            let size = dir["sizeLimit"].as_str().and_then(bytes);
            let options = ["exec", "nosuid", "nodev"].map(String::from).to_vec();
            tmpfs.push(Tmpfs { target: path.into(), size_bytes: size, mode: Some(0o1777), options });
        } else if volume.get("projected").is_some() && path == TOKEN_DIR {
            let dir = tokens.ok_or("the pod mounts a service account token the fake did not write")?;
            binds.push((dir.to_path_buf(), path.to_string()));
        } else {
            return Err(format!("volume {name:?}: only emptyDir and the service account token are backed"));
        }
    }
    let mut argv = strings(&c["command"]);
    argv.extend(strings(&c["args"]));
    Ok(PodContainer {
        runtime: runtime.to_string(),
        hostname: String::new(),
        read_only: sc["readOnlyRootFilesystem"] == json!(true),
        user: sc["runAsUser"].as_u64().unwrap_or(0).to_string(),
        cap_drop_all: strings(&sc["capabilities"]["drop"]).iter().any(|c| c == "ALL"),
        cap_add: strings(&sc["capabilities"]["add"]),
        no_new_privileges: sc["allowPrivilegeEscalation"] == json!(false),
        memory_bytes,
        cpus,
        tmpfs,
        binds,
        argv,
        pids: POD_MAX_PIDS,
    })
}

/// A JWT-shaped token, as a projected service account token looks.
fn service_account_token(pod: &str) -> String {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","kid":"fake"}"#);
    let claims = json!({"aud": ["https://kubernetes.default.svc"], "exp": now() + 3607, "iat": now(),
                        "iss": "https://kubernetes.default.svc",
                        "kubernetes.io": {"namespace": objects::NAMESPACE, "pod": {"name": pod}},
                        "sub": format!("system:serviceaccount:{}:default", objects::NAMESPACE)});
    let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
    format!("{header}.{claims}.{}", URL_SAFE_NO_PAD.encode(random(64)))
}

impl Fake {
    /// The fake's name for pod `pod`'s container (`plimsoll-fake-` and this):
    /// with the fake's pid, so two fakes' pods never share one.
    pub(super) fn container_id(pod: &str) -> String {
        format!("k8s-{}-{pod}", std::process::id())
    }

    /// Writes pod `pod`'s service account files (token, the CA, the
    /// namespace), readable by the guest as a projected volume's are.
    fn write_tokens(&self, pod: &str) -> Result<std::path::PathBuf, String> {
        let dir = self.dir.join("serviceaccounts").join(pod);
        let err = |e: std::io::Error| format!("{}: {e}", dir.display());
        std::fs::create_dir_all(&dir).map_err(err)?;
        std::fs::write(dir.join("token"), service_account_token(pod)).map_err(err)?;
        std::fs::write(dir.join("ca.crt"), &self.ca_pem).map_err(err)?;
        std::fs::write(dir.join("namespace"), objects::NAMESPACE).map_err(err)?;
        Ok(dir)
    }

    /// Records pod `pod`'s new state and what follows from it for its Sandbox,
    /// claim and pool.
    pub(super) fn set_pod_state(&self, pod: &str, state: PodState) {
        let key = Key::new(Resource::Pods, objects::NAMESPACE, pod);
        {
            let mut store = self.lock_store();
            let Some(p) = store.get(&key) else { return };
            if p.pointer("/metadata/deletionTimestamp").is_some() {
                return;
            }
            let (ip, started) = lock(&self.pod_ips).get(pod).cloned().unwrap_or_default();
            let status = pods::pod_status(&self.cluster, &p["spec"], &state, &ip, started);
            let _ = store.update(&key, |p| p["status"] = status);
        }
        self.sync_sandbox(pod);
    }

    /// Runs pod `pod`: makes its container, probes its sandboxd until it
    /// answers, then watches that the container stays up.
    pub(super) async fn kubelet(self: Arc<Self>, pod: String) {
        let key = Key::new(Resource::Pods, objects::NAMESPACE, &pod);
        let Some(spec) = self.lock_store().get(&key).map(|p| p["spec"].clone()) else { return };
        let remapped = self.cluster.mode == Some(Mode::Remapped);
        let mounts_token = spec["automountServiceAccountToken"] == json!(true);
        let tokens = if mounts_token { self.write_tokens(&pod).map(Some) } else { Ok(None) };
        let shape = tokens
            .and_then(|t| container_for(&spec, runtime(&self.cluster.handler, remapped), t.as_deref()))
            .map(|shape| PodContainer { hostname: pod.clone(), ..shape })
            .map(|mut shape| {
                if self.cluster.mode == Some(Mode::NoJudge) {
                    // An image without the judge: its directory hidden, in the container only.
                    let options = vec!["nosuid".into(), "nodev".into()];
                    shape.tmpfs.push(Tmpfs { target: "/usr/local/bin".into(), size_bytes: None, mode: None, options });
                }
                shape
            });
        let id = Fake::container_id(&pod);
        let made = match shape {
            Ok(shape) => self.backing.create_pod(&id, &shape).await,
            Err(e) => Err(e),
        };
        let started = now();
        let container = match made {
            Ok(c) => c,
            Err(why) => {
                eprintln!("plimsoll-fake kubernetes: pod {pod}: its container could not start: {why}");
                self.set_pod_state(
                    &pod,
                    PodState::Failed { container: String::new(), started, finished: now(), exit: 128, why },
                );
                return;
            }
        };
        self.set_pod_state(&pod, PodState::Running { container: container.clone(), started });
        loop {
            if !self.pod_live(&key) {
                return;
            }
            if super::proxy::health(&self.backing, &id, PROBE_TIMEOUT).await {
                break;
            }
            if let Some(failed) = self.died(&pod, &id, &container, started).await {
                self.set_pod_state(&pod, failed);
                return;
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
        self.set_pod_state(&pod, PodState::Ready { container: container.clone(), started });
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            if !self.pod_live(&key) {
                return;
            }
            if let Some(failed) = self.died(&pod, &id, &container, started).await {
                self.set_pod_state(&pod, failed);
                return;
            }
        }
    }

    /// Whether pod `key` is still there and not being deleted.
    fn pod_live(&self, key: &Key) -> bool {
        self.lock_store().get(key).is_some_and(|p| p.pointer("/metadata/deletionTimestamp").is_none())
    }

    /// The Failed state of a container that is no longer running (reported
    /// on stderr with its last output), or `None` while it runs.
    async fn died(&self, pod: &str, id: &str, container: &str, started: u64) -> Option<PodState> {
        let (exit, why) = match self.backing.state(id).await {
            Ok(s) if s.running => return None,
            Ok(s) => {
                let logs = self.backing.logs(id, 5).await;
                let why = if s.error.is_empty() { logs.trim().to_string() } else { s.error };
                (s.exit_code, why)
            }
            Err(e) => (137, e),
        };
        eprintln!("plimsoll-fake kubernetes: pod {pod}: its container exited {exit}: {why}");
        Some(PodState::Failed { container: container.into(), started, finished: now(), exit, why })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubernetes::objects::{template_pod_spec, test_cluster as cluster};
    use crate::kubernetes::pods::pod_spec;

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        assert_eq!(bytes("512Mi"), Some(512 << 20));
        assert_eq!(bytes("64Mi"), Some(64 << 20));
        assert_eq!(bytes("1G"), Some(1_000_000_000));
        assert_eq!(bytes("1000"), Some(1000));
        assert_eq!(bytes("1.5Gi"), None);
        assert_eq!(bytes("Mi"), None);
        assert_eq!(cpus("1").as_deref(), Some("1"));
        assert_eq!(cpus("500m").as_deref(), Some("0.5"));
        assert_eq!(cpus("x"), None);
    }

    #[test]
    fn runtimes_follow_the_handler_unless_remapped() {
        assert_eq!(runtime("runsc", false), "runsc");
        assert_eq!(runtime("runc", false), "runc");
        assert_eq!(runtime("kata", false), "runc");
        assert_eq!(runtime("runsc", true), "runc");
        assert_eq!(runtime("runc", true), "runsc");
        assert_eq!(runtime("kata", true), "runc");
    }

    #[test]
    fn the_templates_pod_becomes_the_specs_container() {
        let c = cluster(None);
        let spec = pod_spec(&c, &template_pod_spec(&c), "x");
        let shape = container_for(&spec, "runsc", None).expect("shape");
        assert_eq!(
            shape,
            PodContainer {
                runtime: "runsc".into(),
                hostname: String::new(),
                read_only: true,
                user: "0".into(),
                cap_drop_all: true,
                cap_add: vec!["SETUID".into(), "SETGID".into()],
                no_new_privileges: true,
                memory_bytes: 512 << 20,
                cpus: Some("1".into()),
                tmpfs: vec![Tmpfs {
                    target: "/tmp".into(),
                    size_bytes: Some(64 << 20),
                    mode: Some(0o1777),
                    options: vec!["exec".into(), "nosuid".into(), "nodev".into()],
                }],
                binds: vec![],
                argv: ["/opt/plimsoll/plimsoll-agent", "sandboxd", "--listen", "0.0.0.0:8787", "--token-sha256"]
                    .map(String::from)
                    .into_iter()
                    .chain(["11".repeat(32)])
                    .collect(),
                pids: POD_MAX_PIDS,
            }
        );
    }

    #[test]
    fn a_weaker_pod_really_gets_what_its_spec_says() {
        let c = cluster(Some(Mode::Weaker));
        let spec = pod_spec(&c, &template_pod_spec(&c), "x");
        assert!(container_for(&spec, "runc", None).is_err(), "a token mount needs the token written");
        let shape = container_for(&spec, "runc", Some(std::path::Path::new("/t"))).expect("shape");
        assert!(!shape.read_only);
        assert_eq!(shape.binds, vec![(std::path::PathBuf::from("/t"), TOKEN_DIR.to_string())]);
        let c = cluster(Some(Mode::Capabilities));
        let shape = container_for(&pod_spec(&c, &template_pod_spec(&c), "x"), "runc", None).expect("caps");
        assert_eq!(shape.cap_add, ["SETUID", "SETGID", "NET_ADMIN"]);
        let c = cluster(Some(Mode::ForeignHash));
        let shape = container_for(&pod_spec(&c, &template_pod_spec(&c), "x"), "runc", None).expect("hash");
        assert_eq!(shape.argv.last(), Some(&"22".repeat(32)));
    }

    #[test]
    fn service_account_tokens_look_like_jwts() {
        let t = service_account_token("p");
        assert_eq!(t.split('.').count(), 3);
        assert!(t.starts_with("eyJ"));
    }
}
