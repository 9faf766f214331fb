//! agent-sandbox's controllers and the garbage collector, as far as the fake
//! needs them: the warm pool kept full, claims adopting a warm Sandbox (or
//! cold-starting one), each Sandbox's and claim's status following its pod,
//! and deletion (foreground: dependents first, the owner last; background:
//! the owner at once, dependents a second later; orphan: dependents kept).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::objects::{self, NAMESPACE, POOL};
use super::pods::{self, PodState};
use super::store::{Key, Resource, Store, uid_of};
use super::{Fake, Mode, lock};
use crate::util::random;

/// How long a background deletion's dependents outlive their owner.
const GC_DELAY: Duration = Duration::from_secs(1);

/// `generateName`'s suffix: five of `[a-z0-9]` (Kubernetes leaves out vowels
/// and look-alikes; any five lowercase alphanumerics are valid).
pub fn suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    random(5).iter().map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char).collect()
}

fn key(resource: Resource, name: &str) -> Key {
    Key::new(resource, NAMESPACE, name)
}

/// The uid of the object's controller (its ownerReference with `controller`).
fn controller_uid(v: &Value) -> Option<&str> {
    v.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r["controller"] == json!(true))
        .and_then(|r| r["uid"].as_str())
}

fn deleting(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some()
}

/// A Ready condition's status and reason.
fn ready_of(v: &Value) -> (bool, String) {
    let c = v
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
    (c.is_some_and(|c| c["status"] == "True"), c.and_then(|c| c["reason"].as_str()).unwrap_or_default().to_string())
}

impl Fake {
    /// Makes a Sandbox of the template owned by `owner` and its pod (unless
    /// the RuntimeClass is gone: the pod is refused admission), and starts
    /// the pod unless `start` is false (`never-ready`'s pending pods).
    fn make_sandbox(
        self: &Arc<Self>,
        store: &mut Store,
        owner: &Value,
        name: &str,
        claim: Option<&str>,
        start: bool,
    ) -> bool {
        let Some(template) = store.get(&key(Resource::SandboxTemplates, self.cluster.template_name())).cloned() else {
            return false;
        };
        let Ok(sandbox) =
            store.create(&key(Resource::Sandboxes, name), objects::sandbox(&template, owner, name, claim))
        else {
            return false;
        };
        let class = self.cluster.runtime_class();
        if store.get(&Key::new(Resource::RuntimeClasses, "", class)).is_none() {
            eprintln!("plimsoll-fake kubernetes: pod {name} refused: pod rejected: RuntimeClass \"{class}\" not found");
            return true;
        }
        let pod = match pods::pod(&self.cluster, &sandbox, &suffix()) {
            Ok(pod) => pod,
            Err(e) => {
                eprintln!("plimsoll-fake kubernetes: pod {name} refused: Pod \"{name}\" is invalid: {e}");
                return true;
            }
        };
        if store.create(&key(Resource::Pods, name), pod).is_ok() {
            let n = self.next_ip.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            lock(&self.pod_ips).insert(name.to_string(), (pods::pod_ip(n), crate::util::now()));
            if start {
                tokio::spawn(Arc::clone(self).kubelet(name.to_string()));
            }
        }
        true
    }

    /// Keeps the pool at its size: a Sandbox (and pod) for each one short.
    pub(super) fn reconcile_pool(self: &Arc<Self>) {
        let mut store = self.lock_store();
        let Some(pool) = store.get(&key(Resource::SandboxWarmPools, POOL)).cloned() else { return };
        let want = pool.pointer("/spec/replicas").and_then(Value::as_u64).unwrap_or(0);
        let have = store.keys(Resource::Sandboxes, |s| controller_uid(s) == Some(uid_of(&pool)) && !deleting(s)).len();
        for _ in have..usize::try_from(want).unwrap_or(0) {
            // generateName: a fresh suffix until one is free.
            let name = (0..16)
                .map(|_| format!("{POOL}-{}", suffix()))
                .find(|n| store.get(&key(Resource::Sandboxes, n)).is_none());
            if let Some(name) = name {
                self.make_sandbox(&mut store, &pool, &name, None, true);
            }
        }
        drop(store);
        self.sync_pool();
    }

    /// The pool's status: its Sandboxes, and how many are Ready.
    fn sync_pool(&self) {
        let mut store = self.lock_store();
        let pool_key = key(Resource::SandboxWarmPools, POOL);
        let Some(pool) = store.get(&pool_key) else { return };
        let uid = uid_of(pool).to_string();
        let mine = store.keys(Resource::Sandboxes, |s| controller_uid(s) == Some(uid.as_str()) && !deleting(s));
        let ready = mine.iter().filter(|k| store.get(k).is_some_and(|s| ready_of(s).0)).count();
        let _ = store.update(&pool_key, |p| {
            p["status"]["replicas"] = json!(mine.len());
            p["status"]["readyReplicas"] = json!(ready);
            p["status"]["observedGeneration"] = p["metadata"]["generation"].clone();
        });
    }

    /// Sandbox `name`'s status from its pod, then its owner's.
    pub(super) fn sync_sandbox(&self, name: &str) {
        let mut store = self.lock_store();
        let sb_key = key(Resource::Sandboxes, name);
        let Some(sandbox) = store.get(&sb_key).cloned() else { return };
        let pod = store.get(&key(Resource::Pods, name)).cloned();
        let phase = pod.as_ref().and_then(|p| p.pointer("/status/phase")).and_then(Value::as_str).unwrap_or_default();
        let pod_ready = pod.as_ref().is_some_and(|p| ready_of(p).0);
        // As agent-sandbox's controller (2fd412d5, computeReadyCondition) says it.
        let (ok, reason, message) = match (&pod, phase) {
            (None, _) => (false, "DependenciesNotReady", "Pod does not exist".to_string()),
            (Some(_), "Failed") => (false, "PodFailed", "Pod failed".to_string()),
            (Some(_), "Succeeded") => (false, "PodSucceeded", "Pod completed successfully".to_string()),
            (Some(_), "Pending") => (false, "DependenciesNotReady", "Pod exists with phase: Pending".to_string()),
            (Some(_), _) if pod_ready => (true, "DependenciesReady", "Pod is Ready".to_string()),
            (Some(_), _) => (false, "DependenciesNotReady", "Pod is Running but not Ready".to_string()),
        };
        let generation = sandbox.pointer("/metadata/generation").and_then(Value::as_u64).unwrap_or(1);
        let ips: Vec<Value> = pod
            .as_ref()
            .and_then(|p| p.pointer("/status/podIPs"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|ip| ip.get("ip").cloned()).collect())
            .unwrap_or_default();
        let _ = store.update(&sb_key, |s| {
            let st = &mut s["status"];
            objects::set_condition(
                &mut st["conditions"],
                objects::condition("Ready", ok, reason, &message, generation),
            );
            objects::set_condition(
                &mut st["conditions"],
                objects::condition("Suspended", false, "NotSuspended", "", generation),
            );
            if ips.is_empty() {
                if let Some(o) = st.as_object_mut() {
                    o.remove("podIPs");
                }
            } else {
                st["podIPs"] = json!(ips);
            }
        });
        let owner = controller_uid(&sandbox).map(str::to_string);
        let claim = owner.and_then(|uid| {
            store.keys(Resource::SandboxClaims, |c| uid_of(c) == uid).into_iter().next().map(|k| k.name)
        });
        drop(store);
        match claim {
            Some(c) => self.sync_claim(&c),
            None => self.sync_pool(),
        }
    }

    /// Claim `name`'s status from its Sandbox: `status.sandbox` and the Ready
    /// condition (True once the Sandbox is; a failed pod's reason forwarded;
    /// otherwise False `SandboxNotReady`).
    pub(super) fn sync_claim(&self, name: &str) {
        let mut store = self.lock_store();
        let claim_key = key(Resource::SandboxClaims, name);
        let Some(claim) = store.get(&claim_key).cloned() else { return };
        if deleting(&claim) {
            return;
        }
        let generation = claim.pointer("/metadata/generation").and_then(Value::as_u64).unwrap_or(1);
        let sandbox = store
            .dependents(uid_of(&claim))
            .into_iter()
            .find(|k| k.resource == Resource::Sandboxes)
            .and_then(|k| store.get(&k).cloned());
        let ready = match &sandbox {
            Some(s) => {
                let c = s
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"));
                // The claim forwards its Sandbox's Ready condition as it is
                // (agent-sandbox 2fd412d5, sandboxclaim_controller.go).
                match c {
                    Some(c) => {
                        let mut c = c.clone();
                        c["observedGeneration"] = json!(generation);
                        c
                    }
                    None => objects::condition("Ready", false, "SandboxNotReady", "Sandbox is not ready", generation),
                }
            }
            None => objects::condition("Ready", false, "SandboxNotReady", "Sandbox is not ready", generation),
        };
        let _ = store.update(&claim_key, |c| {
            objects::set_condition(&mut c["status"]["conditions"], ready);
            if let Some(s) = &sandbox {
                let mut sb = json!({"name": s["metadata"]["name"]});
                if let Some(ips) = s.pointer("/status/podIPs") {
                    sb["podIPs"] = ips.clone();
                }
                c["status"]["sandbox"] = sb;
            }
        });
    }

    /// Gives a new claim its Sandbox: a warm one adopted (Ready first, else
    /// one still starting), or with none warm a cold one named after the
    /// claim; in `never-ready`, every claim after the first gets a cold one
    /// whose pod stays Pending, and in `pod-fails` one whose pod fails at once.
    pub(super) async fn reconcile_claim(self: Arc<Self>, name: String) {
        let claim_key = key(Resource::SandboxClaims, &name);
        self.sync_claim(&name);
        let nth = {
            let mut q = self.quirks();
            q.claims += 1;
            q.claims - 1
        };
        let stuck = self.cluster.mode == Some(Mode::NeverReady) && nth > 0;
        let fails = self.cluster.mode == Some(Mode::PodFails) && nth > 0;
        let adopted = {
            let mut store = self.lock_store();
            let Some(claim) = store.get(&claim_key).cloned() else { return };
            let pool_name = claim.pointer("/spec/warmPoolRef/name").and_then(Value::as_str).unwrap_or_default();
            let Some(pool) = store.get(&key(Resource::SandboxWarmPools, pool_name)).cloned() else {
                let generation = claim.pointer("/metadata/generation").and_then(Value::as_u64).unwrap_or(1);
                let message = format!("SandboxWarmPool \"{pool_name}\" not found");
                let c = objects::condition("Ready", false, "WarmPoolNotFound", &message, generation);
                let _ = store.update(&claim_key, |v| objects::set_condition(&mut v["status"]["conditions"], c));
                return;
            };
            let pool_uid = uid_of(&pool).to_string();
            let warm = |ready: bool| {
                store.keys(Resource::Sandboxes, |s| {
                    controller_uid(s) == Some(pool_uid.as_str()) && !deleting(s) && {
                        let (ok, reason) = ready_of(s);
                        if ready { ok } else { reason != "PodFailed" }
                    }
                })
            };
            let candidate = if stuck || fails {
                None
            } else {
                warm(true).into_iter().next().or_else(|| warm(false).into_iter().next())
            };
            match candidate {
                Some(k) => {
                    let _ = store.update(&k, |s| objects::adopt(s, &claim));
                    Some(k.name)
                }
                None => {
                    let uid = uid_of(&claim).to_string();
                    if !self.make_sandbox(&mut store, &claim, &name, Some(&uid), !stuck && !fails) {
                        let generation = claim.pointer("/metadata/generation").and_then(Value::as_u64).unwrap_or(1);
                        let message = format!("Error seen: sandboxes.agents.x-k8s.io \"{name}\" already exists");
                        let c = objects::condition("Ready", false, "ReconcilerError", &message, generation);
                        let _ = store.update(&claim_key, |v| objects::set_condition(&mut v["status"]["conditions"], c));
                        return;
                    }
                    None
                }
            }
        };
        match adopted {
            Some(sandbox) => {
                self.sync_sandbox(&sandbox);
                self.refill.notify_one();
            }
            None if fails => {
                let now = crate::util::now();
                let why = "the sandbox's container exited".to_string();
                let failed = PodState::Failed { container: String::new(), started: now, finished: now, exit: 1, why };
                self.set_pod_state(&name, failed);
            }
            None => self.sync_sandbox(&name),
        }
    }

    /// Removes one object as the garbage collector does: a pod is marked
    /// terminating, its container removed, and only then the pod.
    pub(super) async fn collect(&self, k: &Key) {
        if k.resource == Resource::Pods {
            let _ = self.lock_store().mark_deleting(k, None, 30);
            let id = Fake::container_id(&k.name);
            let mut removed = self.backing.remove(&id).await;
            if removed.is_err() {
                tokio::time::sleep(Duration::from_millis(500)).await;
                removed = self.backing.remove(&id).await;
            }
            if let Err(e) = removed {
                eprintln!("plimsoll-fake kubernetes: removing pod {}'s container: {e}", k.name);
            }
            lock(&self.pod_ips).remove(&k.name);
        }
        self.lock_store().remove(k);
    }

    /// Finishes a foreground deletion of `owner` (already marked): each
    /// dependent marked too, then removed leaves first (a pod's container
    /// before the pod), and the owner last.
    pub(super) async fn foreground(self: Arc<Self>, owner: Key) {
        let order = self.lock_store().deletion_order(&owner);
        for k in order.iter().rev().filter(|k| k.resource != Resource::Pods) {
            let _ = self.lock_store().mark_deleting(k, Some("foregroundDeletion"), 0);
        }
        for k in &order {
            self.collect(k).await;
        }
        self.lock_store().remove(&owner);
    }

    /// The garbage collector after a background deletion: a moment later,
    /// every object whose owners are all gone, leaves first.
    pub(super) async fn background(self: Arc<Self>) {
        tokio::time::sleep(GC_DELAY).await;
        let orphans = self.lock_store().orphans();
        for k in &orphans {
            self.collect(k).await;
        }
    }

    /// Waits until the pool is full and every pod in it Ready: `Err` naming
    /// a pod that failed, or the wait's end.
    pub(super) async fn pool_ready(&self, limit: Duration) -> Result<(), String> {
        let give_up = tokio::time::Instant::now() + limit;
        loop {
            let (want, states) = {
                let store = self.lock_store();
                let Some(pool) = store.get(&key(Resource::SandboxWarmPools, POOL)) else {
                    return Err("no pool".into());
                };
                let want = pool.pointer("/spec/replicas").and_then(Value::as_u64).unwrap_or(0);
                let uid = uid_of(pool).to_string();
                let pods: Vec<Value> = store
                    .keys(Resource::Sandboxes, |s| controller_uid(s) == Some(uid.as_str()))
                    .iter()
                    .filter_map(|k| store.get(&key(Resource::Pods, &k.name)).cloned())
                    .collect();
                (want, pods)
            };
            if let Some(p) = states.iter().find(|p| p.pointer("/status/phase") == Some(&json!("Failed"))) {
                let why = p.pointer("/status/containerStatuses/0/state/terminated/message").and_then(Value::as_str);
                return Err(format!(
                    "warm pool pod {} failed: {}",
                    p["metadata"]["name"].as_str().unwrap_or_default(),
                    why.unwrap_or("its container did not start")
                ));
            }
            let ready = states.iter().filter(|p| ready_of(p).0).count();
            if u64::try_from(ready).unwrap_or(0) >= want {
                return Ok(());
            }
            if tokio::time::Instant::now() > give_up {
                return Err(format!("the warm pool has {ready} of {want} pods Ready after {} s", limit.as_secs()));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// Strips `owner`'s uid from its dependents' ownerReferences (an orphaning
/// deletion).
pub fn orphan(store: &mut Store, owner_uid: &str) {
    for k in store.dependents(owner_uid) {
        let _ = store.update(&k, |v| {
            if let Some(refs) = v.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) {
                refs.retain(|r| r["uid"] != owner_uid);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_suffixes_are_five_lowercase_alphanumerics() {
        let s = suffix();
        assert_eq!(s.len(), 5);
        assert!(s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    }

    #[test]
    fn orphaning_strips_only_the_owners_reference() {
        let mut s = Store::new();
        let claim = s.create(&key(Resource::SandboxClaims, "c"), json!({})).expect("claim");
        let sb = json!({"metadata": {"ownerReferences": [
            {"uid": uid_of(&claim), "controller": true}, {"uid": "other", "controller": false}]}});
        s.create(&key(Resource::Sandboxes, "c"), sb).expect("sandbox");
        orphan(&mut s, uid_of(&claim));
        let after = s.get(&key(Resource::Sandboxes, "c")).expect("kept");
        assert_eq!(after["metadata"]["ownerReferences"], json!([{"uid": "other", "controller": false}]));
        assert_eq!(controller_uid(after), None);
    }

    #[test]
    fn ready_reads_the_ready_condition() {
        let v = json!({"status": {"conditions": [{"type": "Suspended", "status": "True"},
                                                 {"type": "Ready", "status": "False", "reason": "PodFailed"}]}});
        assert_eq!(ready_of(&v), (false, "PodFailed".to_string()));
        assert_eq!(ready_of(&json!({})), (false, String::new()));
    }
}
