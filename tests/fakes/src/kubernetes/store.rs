//! The fake's etcd: every object as JSON, one global resourceVersion bumped on
//! every write, the last [`HISTORY`] events kept for watches (an older
//! resourceVersion is 410 Expired), and the owner graph that garbage
//! collection and foreground deletion walk.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::util::{now, random, rfc3339};

/// How many events a watch can resume from.
pub const HISTORY: usize = 256;
/// How far a watcher may fall behind before its stream is ended (it then
/// resumes from its last resourceVersion, or re-lists on 410).
const BACKLOG: usize = 1024;

/// A kind of object the fake serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Pods,
    Nodes,
    RuntimeClasses,
    NetworkPolicies,
    Sandboxes,
    SandboxClaims,
    SandboxTemplates,
    SandboxWarmPools,
}

impl Resource {
    /// Every resource, for routing.
    pub const ALL: [Resource; 8] = [
        Resource::Pods,
        Resource::Nodes,
        Resource::RuntimeClasses,
        Resource::NetworkPolicies,
        Resource::Sandboxes,
        Resource::SandboxClaims,
        Resource::SandboxTemplates,
        Resource::SandboxWarmPools,
    ];

    /// Its API group (`""`: the core group).
    pub fn group(self) -> &'static str {
        match self {
            Resource::Pods | Resource::Nodes => "",
            Resource::RuntimeClasses => "node.k8s.io",
            Resource::NetworkPolicies => "networking.k8s.io",
            Resource::Sandboxes => "agents.x-k8s.io",
            Resource::SandboxClaims | Resource::SandboxTemplates | Resource::SandboxWarmPools => {
                "extensions.agents.x-k8s.io"
            }
        }
    }

    /// The one version served.
    pub fn version(self) -> &'static str {
        match self {
            Resource::Sandboxes | Resource::SandboxClaims | Resource::SandboxTemplates | Resource::SandboxWarmPools => {
                "v1beta1"
            }
            _ => "v1",
        }
    }

    /// `apiVersion`: group/version, or the version alone for the core group.
    pub fn api_version(self) -> String {
        match self.group() {
            "" => self.version().to_string(),
            g => format!("{g}/{}", self.version()),
        }
    }

    /// The path segment, plural.
    pub fn plural(self) -> &'static str {
        match self {
            Resource::Pods => "pods",
            Resource::Nodes => "nodes",
            Resource::RuntimeClasses => "runtimeclasses",
            Resource::NetworkPolicies => "networkpolicies",
            Resource::Sandboxes => "sandboxes",
            Resource::SandboxClaims => "sandboxclaims",
            Resource::SandboxTemplates => "sandboxtemplates",
            Resource::SandboxWarmPools => "sandboxwarmpools",
        }
    }

    /// `kind`.
    pub fn kind(self) -> &'static str {
        match self {
            Resource::Pods => "Pod",
            Resource::Nodes => "Node",
            Resource::RuntimeClasses => "RuntimeClass",
            Resource::NetworkPolicies => "NetworkPolicy",
            Resource::Sandboxes => "Sandbox",
            Resource::SandboxClaims => "SandboxClaim",
            Resource::SandboxTemplates => "SandboxTemplate",
            Resource::SandboxWarmPools => "SandboxWarmPool",
        }
    }

    /// Whether its objects live in a namespace.
    pub fn namespaced(self) -> bool {
        !matches!(self, Resource::Nodes | Resource::RuntimeClasses)
    }

    /// `plural.group`, as error messages name it (`pods` for the core group).
    pub fn qualified(self) -> String {
        match self.group() {
            "" => self.plural().to_string(),
            g => format!("{}.{g}", self.plural()),
        }
    }
}

/// Where an object lives.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub resource: Resource,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    pub name: String,
}

impl Key {
    /// `name` of `resource` in `namespace` (ignored when cluster-scoped).
    pub fn new(resource: Resource, namespace: &str, name: &str) -> Key {
        let namespace = if resource.namespaced() { namespace.to_string() } else { String::new() };
        Key { resource, namespace, name: name.to_string() }
    }
}

/// A watch event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    /// As a watch stream spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One write.
#[derive(Clone, Debug)]
pub struct Event {
    /// The resourceVersion it made.
    pub rv: u64,
    pub kind: EventType,
    pub key: Key,
    /// The object after the write (for a deletion, as it went, with `rv`).
    pub object: Arc<Value>,
    /// The object before it (none for an addition): a watch with a selector
    /// turns a change that leaves or enters the selection into DELETED or ADDED.
    pub old: Option<Arc<Value>>,
}

/// A watch asked for history older than what is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub asked: u64,
    pub now: u64,
}

/// A write refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    AlreadyExists,
    NotFound,
}

/// Every object, the resourceVersion counter and the recent history.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: VecDeque<Event>,
    /// The newest resourceVersion no longer in `history` (0: nothing dropped).
    compacted: u64,
    events: broadcast::Sender<Event>,
}

impl Default for Store {
    fn default() -> Store {
        Store::new()
    }
}

/// A new object's UID: a random version-4 UUID.
pub fn uid() -> String {
    let mut b = random(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// An object's `metadata.uid`.
pub fn uid_of(v: &Value) -> &str {
    v.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default()
}

/// The UIDs an object's `ownerReferences` name.
pub fn owners(v: &Value) -> Vec<String> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| refs.iter().filter_map(|r| r.get("uid").and_then(Value::as_str)).map(str::to_string).collect())
        .unwrap_or_default()
}

impl Store {
    /// An empty store at resourceVersion 1 (the first write makes 2).
    pub fn new() -> Store {
        let (events, _) = broadcast::channel(BACKLOG);
        Store { rv: 1, objects: BTreeMap::new(), history: VecDeque::new(), compacted: 0, events }
    }

    /// The current resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    fn record(&mut self, kind: EventType, key: &Key, object: Value, old: Option<Value>) {
        let e = Event { rv: self.rv, kind, key: key.clone(), object: Arc::new(object), old: old.map(Arc::new) };
        self.history.push_back(e.clone());
        while self.history.len() > HISTORY {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted = dropped.rv;
            }
        }
        // No watcher is no error.
        let _ = self.events.send(e);
    }

    /// Stores a new object at `key`: its metadata gets the name, namespace,
    /// a uid, the next resourceVersion, generation 1 and the creation time.
    pub fn create(&mut self, key: &Key, mut object: Value) -> Result<Value, Refused> {
        if self.objects.contains_key(key) {
            return Err(Refused::AlreadyExists);
        }
        self.rv += 1;
        if !object.get("metadata").is_some_and(Value::is_object) {
            object["metadata"] = json!({});
        }
        let m = &mut object["metadata"];
        m["name"] = json!(key.name);
        if key.resource.namespaced() {
            m["namespace"] = json!(key.namespace);
        } else if let Some(m) = m.as_object_mut() {
            m.remove("namespace");
        }
        m["uid"] = json!(uid());
        m["resourceVersion"] = json!(self.rv.to_string());
        m["generation"] = json!(1);
        m["creationTimestamp"] = json!(rfc3339(now()));
        object["apiVersion"] = json!(key.resource.api_version());
        object["kind"] = json!(key.resource.kind());
        self.objects.insert(key.clone(), object.clone());
        self.record(EventType::Added, key, object.clone(), None);
        Ok(object)
    }

    /// The object at `key`.
    pub fn get(&self, key: &Key) -> Option<&Value> {
        self.objects.get(key)
    }

    /// Every object of `resource` (in `namespace`, when given), by name.
    pub fn list(&self, resource: Resource, namespace: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|(k, _)| {
                k.resource == resource && namespace.is_none_or(|n| !resource.namespaced() || k.namespace == n)
            })
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The keys of `resource`'s objects for which `pick` holds.
    pub fn keys(&self, resource: Resource, pick: impl Fn(&Value) -> bool) -> Vec<Key> {
        self.objects.iter().filter(|(k, v)| k.resource == resource && pick(v)).map(|(k, _)| k.clone()).collect()
    }

    /// Changes the object at `key` with `change`; a change that changes
    /// nothing writes nothing. The object as it now is.
    pub fn update(&mut self, key: &Key, change: impl FnOnce(&mut Value)) -> Result<Value, Refused> {
        let Some(old) = self.objects.get(key).cloned() else { return Err(Refused::NotFound) };
        let mut new = old.clone();
        change(&mut new);
        if new == old {
            return Ok(old);
        }
        self.rv += 1;
        new["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.objects.insert(key.clone(), new.clone());
        self.record(EventType::Modified, key, new.clone(), Some(old));
        Ok(new)
    }

    /// Removes the object at `key`: the DELETED event carries it at the new
    /// resourceVersion (a deletion's finalizers done, so none left).
    pub fn remove(&mut self, key: &Key) -> Option<Value> {
        let mut gone = self.objects.remove(key)?;
        let old = gone.clone();
        self.rv += 1;
        gone["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        if let Some(m) = gone["metadata"].as_object_mut()
            && m.contains_key("deletionTimestamp")
        {
            m.remove("finalizers");
        }
        self.record(EventType::Deleted, key, gone.clone(), Some(old));
        Some(gone)
    }

    /// Marks the object at `key` as being deleted (`deletionTimestamp`, a
    /// grace period, the generation raised) with `finalizer` added, as the
    /// API server does for a foreground deletion before the garbage collector
    /// removes its dependents.
    pub fn mark_deleting(&mut self, key: &Key, finalizer: Option<&str>, grace_s: u64) -> Result<Value, Refused> {
        self.update(key, |o| {
            let m = &mut o["metadata"];
            if m.get("deletionTimestamp").is_none() {
                m["deletionTimestamp"] = json!(rfc3339(now() + grace_s));
                m["deletionGracePeriodSeconds"] = json!(grace_s);
                let g = m.get("generation").and_then(Value::as_u64).unwrap_or(1);
                m["generation"] = json!(g + 1);
            }
            if let Some(f) = finalizer {
                let list = m.get("finalizers").and_then(Value::as_array).cloned().unwrap_or_default();
                if !list.iter().any(|x| x == f) {
                    let mut list = list;
                    list.push(json!(f));
                    m["finalizers"] = Value::Array(list);
                }
            }
        })
    }

    /// The objects whose `ownerReferences` name `uid`.
    pub fn dependents(&self, uid: &str) -> Vec<Key> {
        self.objects.iter().filter(|(_, v)| owners(v).iter().any(|o| o == uid)).map(|(k, _)| k.clone()).collect()
    }

    /// Every object that depends on the one at `key`, transitively, leaves
    /// first: the order a foreground deletion removes them in before it
    /// removes `key` itself.
    pub fn deletion_order(&self, key: &Key) -> Vec<Key> {
        let mut out = Vec::new();
        let Some(v) = self.objects.get(key) else { return out };
        self.walk(uid_of(v), &mut out);
        out
    }

    fn walk(&self, uid: &str, out: &mut Vec<Key>) {
        for k in self.dependents(uid) {
            if out.contains(&k) {
                continue;
            }
            if let Some(v) = self.objects.get(&k) {
                self.walk(uid_of(v), out);
            }
            out.push(k);
        }
    }

    /// Objects every owner of which is gone, and what depends on them, leaves
    /// first: what the garbage collector removes after a background deletion.
    pub fn orphans(&self) -> Vec<Key> {
        let uids: std::collections::HashSet<&str> = self.objects.values().map(uid_of).collect();
        let mut out = Vec::new();
        for (k, v) in &self.objects {
            let o = owners(v);
            if !o.is_empty() && o.iter().all(|u| !uids.contains(u.as_str())) && !out.contains(k) {
                self.walk(uid_of(v), &mut out);
                out.push(k.clone());
            }
        }
        out
    }

    /// The events of `resource` after resourceVersion `rv` and a receiver for
    /// those to come, with no gap or overlap between them: 410 when `rv` is
    /// older than the kept history.
    pub fn watch(&self, resource: Resource, rv: u64) -> Result<(Vec<Event>, broadcast::Receiver<Event>), Expired> {
        if rv < self.compacted {
            return Err(Expired { asked: rv, now: self.rv });
        }
        let past = self.history.iter().filter(|e| e.rv > rv && e.key.resource == resource).cloned().collect();
        Ok((past, self.events.subscribe()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(r: Resource, name: &str) -> Key {
        Key::new(r, "plimsoll", name)
    }

    fn owned_by(owner: &Value) -> Value {
        json!({"metadata": {"ownerReferences": [{"uid": uid_of(owner), "controller": true}]}})
    }

    #[test]
    fn every_write_raises_the_one_counter_and_a_no_op_writes_nothing() {
        let mut s = Store::new();
        let a = s.create(&key(Resource::SandboxClaims, "a"), json!({"spec": {}})).expect("create");
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        assert_eq!(a["metadata"]["generation"], 1);
        assert_eq!(a["kind"], "SandboxClaim");
        assert_eq!(a["apiVersion"], "extensions.agents.x-k8s.io/v1beta1");
        let rc = s.create(&Key::new(Resource::RuntimeClasses, "plimsoll", "rc"), json!({})).expect("rc");
        assert_eq!(rc["metadata"]["resourceVersion"], "3");
        assert!(rc["metadata"].get("namespace").is_none());
        assert_eq!(s.create(&key(Resource::SandboxClaims, "a"), json!({})), Err(Refused::AlreadyExists));
        let same = s.update(&key(Resource::SandboxClaims, "a"), |_| {}).expect("no-op");
        assert_eq!((same["metadata"]["resourceVersion"].as_str(), s.rv()), (Some("2"), 3));
        let b = s.update(&key(Resource::SandboxClaims, "a"), |o| o["status"] = json!({"x": 1})).expect("update");
        assert_eq!((b["metadata"]["resourceVersion"].as_str(), s.rv()), (Some("4"), 4));
        let gone = s.remove(&key(Resource::SandboxClaims, "a")).expect("remove");
        assert_eq!(gone["metadata"]["resourceVersion"], "5");
        assert_eq!(s.update(&key(Resource::SandboxClaims, "a"), |_| {}), Err(Refused::NotFound));
    }

    #[test]
    fn a_watch_resumes_after_its_rv_and_an_rv_older_than_the_history_is_expired() {
        let mut s = Store::new();
        let k = key(Resource::SandboxClaims, "a");
        s.create(&k, json!({})).expect("create");
        s.create(&key(Resource::Sandboxes, "a"), json!({})).expect("other resource");
        for i in 0..3 {
            s.update(&k, |o| o["n"] = json!(i)).expect("update");
        }
        // rv 2: ADDED claim, 3: ADDED sandbox, 4..=6: MODIFIED claim.
        let (past, _) = s.watch(Resource::SandboxClaims, 4).expect("kept");
        assert_eq!(
            past.iter().map(|e| (e.rv, e.kind)).collect::<Vec<_>>(),
            [(5, EventType::Modified), (6, EventType::Modified)]
        );
        let (past, _) = s.watch(Resource::SandboxClaims, 1).expect("from the start");
        assert_eq!(past.len(), 4);
        for i in 0..HISTORY {
            s.update(&k, |o| o["n"] = json!(100 + i)).expect("update");
        }
        let now = s.rv();
        assert_eq!(now, 6 + HISTORY as u64);
        // The oldest kept event is now rv 7, so a watch from 6 still sees all
        // it missed, and one from 5 does not.
        assert!(s.watch(Resource::SandboxClaims, 6).is_ok());
        assert_eq!(s.watch(Resource::SandboxClaims, 5).map(|_| ()), Err(Expired { asked: 5, now }));
        let (past, _) = s.watch(Resource::SandboxClaims, now).expect("current");
        assert!(past.is_empty());
    }

    #[tokio::test]
    async fn a_watch_sees_the_writes_after_it_subscribed() {
        let mut s = Store::new();
        let (_, mut rx) = s.watch(Resource::SandboxClaims, s.rv()).expect("watch");
        s.create(&key(Resource::SandboxClaims, "a"), json!({})).expect("create");
        let e = rx.recv().await.expect("event");
        assert_eq!((e.rv, e.kind, e.key.name.as_str()), (2, EventType::Added, "a"));
    }

    #[test]
    fn foreground_deletion_removes_dependents_leaves_first_and_the_owner_last() {
        let mut s = Store::new();
        let claim_key = key(Resource::SandboxClaims, "c");
        let claim = s.create(&claim_key, json!({})).expect("claim");
        let sandbox = s.create(&key(Resource::Sandboxes, "c"), owned_by(&claim)).expect("sandbox");
        s.create(&key(Resource::Pods, "c"), owned_by(&sandbox)).expect("pod");
        s.create(&key(Resource::Sandboxes, "other"), json!({})).expect("unrelated");
        let marked = s.mark_deleting(&claim_key, Some("foregroundDeletion"), 0).expect("mark");
        assert_eq!(marked["metadata"]["finalizers"], json!(["foregroundDeletion"]));
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(marked["metadata"]["generation"], 2);
        let order = s.deletion_order(&claim_key);
        assert_eq!(order, [key(Resource::Pods, "c"), key(Resource::Sandboxes, "c")]);
        let (_, mut rx) = s.watch(Resource::Pods, s.rv()).expect("watch");
        for k in order.iter().chain([&claim_key]) {
            let gone = s.remove(k).expect("remove");
            assert!(gone["metadata"].get("finalizers").is_none(), "{gone}");
        }
        let mut seen = Vec::new();
        while let Ok(e) = rx.try_recv() {
            seen.push((e.kind, e.key.resource, e.key.name));
        }
        assert_eq!(
            seen,
            [
                (EventType::Deleted, Resource::Pods, "c".to_string()),
                (EventType::Deleted, Resource::Sandboxes, "c".to_string()),
                (EventType::Deleted, Resource::SandboxClaims, "c".to_string()),
            ]
        );
        assert!(s.get(&key(Resource::Sandboxes, "other")).is_some());
    }

    #[test]
    fn once_an_owner_is_gone_its_dependents_are_orphans_leaves_first() {
        let mut s = Store::new();
        let claim_key = key(Resource::SandboxClaims, "c");
        let claim = s.create(&claim_key, json!({})).expect("claim");
        let sandbox = s.create(&key(Resource::Sandboxes, "c"), owned_by(&claim)).expect("sandbox");
        s.create(&key(Resource::Pods, "c"), owned_by(&sandbox)).expect("pod");
        assert!(s.orphans().is_empty());
        s.remove(&claim_key);
        assert_eq!(s.orphans(), [key(Resource::Pods, "c"), key(Resource::Sandboxes, "c")]);
    }

    #[test]
    fn uids_are_version_4_uuids() {
        let u = uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(u.split('-').map(str::len).eq([8, 4, 4, 4, 12]));
    }
}
