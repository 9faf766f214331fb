//! The API server's routes: paths parsed into a resource and verb, then
//! GET, LIST (and watch), the claim's POST and DELETE, the RuntimeClass's
//! DELETE and the pod proxy.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::controller::{self, suffix};
use super::objects::{NAMESPACE, SANDBOXD_PORT};
use super::select::{Fields, Labels};
use super::status::Status;
use super::store::{Key, Resource, uid_of};
use super::watch::{self, Selection};
use super::{Fake, Mode, proxy};
use crate::server::{self, Body, Request};

/// What a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// A resource's collection (`namespace` None: across namespaces, or
    /// cluster-scoped).
    Collection { resource: Resource, namespace: Option<String> },
    /// One object.
    Object { resource: Resource, namespace: String, name: String },
    /// A pod's proxy subresource: its `[scheme:]name[:port]` segment and the
    /// path after `/proxy`.
    Proxy { namespace: String, target: String, rest: String },
}

/// The route `path` names, if any.
pub fn route(path: &str) -> Option<Route> {
    let (group, version, rest) = if let Some(rest) = path.strip_prefix("/api/v1/") {
        ("", "v1", rest)
    } else {
        let rest = path.strip_prefix("/apis/")?;
        let mut s = rest.splitn(3, '/');
        (s.next()?, s.next()?, s.next()?)
    };
    let segs: Vec<&str> = rest.strip_suffix('/').unwrap_or(rest).split('/').collect();
    let (namespace, segs) = match segs.as_slice() {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
        _ => (None, segs.as_slice()),
    };
    let (plural, tail) = segs.split_first()?;
    let resource =
        Resource::ALL.into_iter().find(|r| r.plural() == *plural && r.group() == group && r.version() == version)?;
    if namespace.is_some() && !resource.namespaced() {
        return None;
    }
    match (tail, namespace) {
        ([], ns) => Some(Route::Collection { resource, namespace: ns.map(str::to_string) }),
        ([name], Some(ns)) if !name.is_empty() => {
            Some(Route::Object { resource, namespace: ns.into(), name: (*name).into() })
        }
        ([name], None) if !resource.namespaced() && !name.is_empty() => {
            Some(Route::Object { resource, namespace: String::new(), name: (*name).into() })
        }
        ([target, "proxy", ..], Some(ns)) if resource == Resource::Pods => {
            let prefix = format!("/api/v1/namespaces/{ns}/pods/{target}/proxy");
            let rest = path.strip_prefix(&prefix).unwrap_or_default().to_string();
            Some(Route::Proxy { namespace: ns.into(), target: (*target).into(), rest })
        }
        _ => None,
    }
}

/// Whether `name` is a DNS-1123 subdomain, the rule for a custom resource's name.
fn dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Metadata a client may not set on create.
const SYSTEM_METADATA: [&str; 8] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// A built-in resource's list items carry no `kind` or `apiVersion` (a
/// custom resource's do).
fn list_item(resource: Resource, mut v: Value) -> Value {
    if matches!(resource, Resource::Pods | Resource::Nodes | Resource::RuntimeClasses | Resource::NetworkPolicies)
        && let Some(o) = v.as_object_mut()
    {
        o.remove("kind");
        o.remove("apiVersion");
    }
    v
}

impl Fake {
    /// Answers an authenticated request.
    pub(super) async fn dispatch(self: Arc<Self>, mut req: Request) -> http::Response<Body> {
        let Some(route) = route(&req.path) else { return Status::no_route().response() };
        let method = req.method.as_str();
        match route {
            Route::Collection { resource, namespace } => match method {
                "GET" if matches!(req.param("watch").as_deref(), Some("true" | "1")) => {
                    match self.selection(resource, namespace, &req) {
                        Ok(s) => watch::serve(Arc::clone(&self), s, &req).await,
                        Err(refused) => refused.response(),
                    }
                }
                "GET" => self.list(resource, namespace, &req),
                "POST" if resource == Resource::SandboxClaims => {
                    self.create_claim(namespace.as_deref().unwrap_or_default(), &req)
                }
                _ => Status::method_not_allowed().response(),
            },
            Route::Object { resource, namespace, name } => match (method, resource) {
                ("GET", _) => self.get(&Key::new(resource, &namespace, &name)),
                ("DELETE", Resource::SandboxClaims) => self.delete_claim(&Key::new(resource, &namespace, &name), &req),
                ("DELETE", Resource::Pods) => self.delete_pod(&Key::new(resource, &namespace, &name)),
                ("PUT", Resource::SandboxTemplates) => self.replace(&Key::new(resource, &namespace, &name), &req),
                ("DELETE", Resource::RuntimeClasses) => {
                    match self.lock_store().remove(&Key::new(resource, "", &name)) {
                        Some(gone) => server::json(200, &gone),
                        None => Status::not_found(resource, &name).response(),
                    }
                }
                _ => Status::method_not_allowed().response(),
            },
            Route::Proxy { namespace, target, rest } => match method {
                "GET" | "POST" | "PUT" => self.proxy(&namespace, &target, &rest, &mut req).await,
                _ => Status::method_not_allowed().response(),
            },
        }
    }

    /// The selection a LIST or watch names; a selector it cannot read answers 400.
    fn selection(
        &self,
        resource: Resource,
        namespace: Option<String>,
        req: &Request,
    ) -> Result<Selection, Box<Status>> {
        let bad = |e: String| Box::new(Status::bad_request(e));
        let labels = Labels::parse(&req.param("labelSelector").unwrap_or_default()).map_err(bad)?;
        let fields = Fields::parse(&req.param("fieldSelector").unwrap_or_default()).map_err(bad)?;
        Ok(Selection { resource, namespace, labels, fields })
    }

    fn list(&self, resource: Resource, namespace: Option<String>, req: &Request) -> http::Response<Body> {
        let s = match self.selection(resource, namespace, req) {
            Ok(s) => s,
            Err(refused) => return refused.response(),
        };
        let store = self.lock_store();
        let items: Vec<Value> = store
            .list(resource, s.namespace.as_deref())
            .into_iter()
            .filter(|o| s.labels.matches(o) && s.fields.matches(o))
            .map(|o| list_item(resource, o))
            .collect();
        server::json(
            200,
            &json!({
                "apiVersion": resource.api_version(),
                "kind": format!("{}List", resource.kind()),
                "metadata": {"resourceVersion": store.rv().to_string()},
                "items": items,
            }),
        )
    }

    fn get(&self, key: &Key) -> http::Response<Body> {
        if key.resource == Resource::Pods
            && self.cluster.mode == Some(Mode::Flaky)
            && self.quirks().read.insert(key.name.clone())
        {
            return Status::unavailable("the server is currently unable to handle the request").response();
        }
        match self.lock_store().get(key) {
            Some(v) => server::json(200, v),
            None => Status::not_found(key.resource, &key.name).response(),
        }
    }

    /// PUT of an object (a template an operator edits): its `spec` replaced,
    /// the body's resourceVersion, when it names one, the one stored (else 409).
    fn replace(&self, key: &Key, req: &Request) -> http::Response<Body> {
        let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
            return Status::bad_request("the request body is not JSON").response();
        };
        let mut store = self.lock_store();
        let Some(stored) = store.get(key).cloned() else {
            return Status::not_found(key.resource, &key.name).response();
        };
        if let Some(want) = body.pointer("/metadata/resourceVersion").and_then(Value::as_str)
            && Some(want) != stored.pointer("/metadata/resourceVersion").and_then(Value::as_str)
        {
            let why = "the object has been modified; please apply your changes to the latest version and try again";
            return Status::conflict(key.resource, &key.name, why).response();
        }
        let spec = body.get("spec").cloned().unwrap_or(Value::Null);
        match store.update(key, |v| v["spec"] = spec) {
            Ok(v) => server::json(200, &v),
            Err(_) => Status::not_found(key.resource, &key.name).response(),
        }
    }

    /// POST of a SandboxClaim: checked, stored (201), then reconciled.
    fn create_claim(self: &Arc<Self>, namespace: &str, req: &Request) -> http::Response<Body> {
        let resource = Resource::SandboxClaims;
        if namespace != NAMESPACE {
            return Status::namespace_not_found(namespace).response();
        }
        let body: Value = match serde_json::from_slice(&req.body) {
            Ok(Value::Object(o)) => Value::Object(o),
            Ok(_) => {
                return Status::bad_request("couldn't get version/kind; json parse error: not an object").response();
            }
            Err(e) => {
                return Status::bad_request(format!("couldn't get version/kind; json parse error: {e}")).response();
            }
        };
        let wanted = resource.api_version();
        if let Some(v) = body["apiVersion"].as_str().filter(|v| *v != wanted) {
            let m = format!("the API version in the data ({v}) does not match the expected API version ({wanted})");
            return Status::bad_request(m).response();
        }
        if let Some(k) = body["kind"].as_str().filter(|k| *k != resource.kind()) {
            let m = format!("the kind in the data ({k}) does not match the expected kind ({})", resource.kind());
            return Status::bad_request(m).response();
        }
        if body.pointer("/metadata/namespace").and_then(Value::as_str).is_some_and(|n| n != namespace) {
            let m = "the namespace of the provided object does not match the namespace sent on the request";
            return Status::bad_request(m).response();
        }
        let given = body.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let generate = body.pointer("/metadata/generateName").and_then(Value::as_str).unwrap_or_default();
        let name = match (given, generate) {
            ("", "") => {
                let why = "Required value: name or generateName is required";
                return Status::invalid(resource, "", "metadata.name", why).response();
            }
            ("", prefix) => format!("{prefix}{}", suffix()),
            (name, _) => name.to_string(),
        };
        if !dns_subdomain(&name) {
            let why = format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric \
                 characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', \
                 regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            );
            return Status::invalid(resource, &name, "metadata.name", &why).response();
        }
        // The CRD's structural schema (agent-sandbox 2fd412d5) requires
        // spec.warmPoolRef and its name: kube-apiserver answers 422 Invalid.
        match body.pointer("/spec/warmPoolRef") {
            None | Some(Value::Null) => return Status::required(resource, &name, "spec.warmPoolRef").response(),
            Some(r) if r.get("name").is_none_or(Value::is_null) => {
                return Status::required(resource, &name, "spec.warmPoolRef.name").response();
            }
            Some(_) => {}
        }
        if self.cluster.mode == Some(Mode::Conflict) {
            let mut q = self.quirks();
            q.creates += 1;
            if q.creates % 2 == 1 {
                return Status::already_exists(resource, &name).response();
            }
        }
        let mut metadata = body.get("metadata").and_then(Value::as_object).cloned().unwrap_or_else(Map::new);
        for k in SYSTEM_METADATA {
            metadata.remove(k);
        }
        let object = json!({"metadata": metadata, "spec": body["spec"]});
        let stored = match self.lock_store().create(&Key::new(resource, namespace, &name), object) {
            Ok(v) => v,
            Err(_) => return Status::already_exists(resource, &name).response(),
        };
        tokio::spawn(Arc::clone(self).reconcile_claim(name.clone()));
        if self.cluster.mode == Some(Mode::Flaky) && self.quirks().lost.insert(name) {
            return Status::internal("etcdserver: request timed out").response();
        }
        server::json(201, &stored)
    }

    /// DELETE of a SandboxClaim with its DeleteOptions.
    fn delete_claim(self: &Arc<Self>, key: &Key, req: &Request) -> http::Response<Body> {
        let options: Value = if req.body.is_empty() {
            json!({})
        } else {
            match serde_json::from_slice(&req.body) {
                Ok(v @ Value::Object(_)) => v,
                _ => return Status::bad_request("the body of the request was not DeleteOptions JSON").response(),
            }
        };
        let policy = options["propagationPolicy"]
            .as_str()
            .map(str::to_string)
            .or_else(|| req.param("propagationPolicy"))
            .unwrap_or_else(|| "Background".into());
        if !matches!(policy.as_str(), "Foreground" | "Background" | "Orphan") {
            let m = format!(
                "propagationPolicy: Unsupported value: \"{policy}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            );
            return Status::bad_request(m).response();
        }
        let mut store = self.lock_store();
        let Some(claim) = store.get(key).cloned() else {
            return Status::not_found(key.resource, &key.name).response();
        };
        if let Some(want) = options.pointer("/preconditions/uid").and_then(Value::as_str)
            && want != uid_of(&claim)
        {
            let why =
                format!("Precondition failed: UID in precondition: {want}, UID in object meta: {}", uid_of(&claim));
            return Status::conflict(key.resource, &key.name, &why).response();
        }
        if let Some(want) = options.pointer("/preconditions/resourceVersion").and_then(Value::as_str)
            && Some(want) != claim.pointer("/metadata/resourceVersion").and_then(Value::as_str)
        {
            let why = "the object has been modified; please apply your changes to the latest version and try again";
            return Status::conflict(key.resource, &key.name, why).response();
        }
        if claim.pointer("/metadata/deletionTimestamp").is_some() {
            return server::json(200, &claim);
        }
        match policy.as_str() {
            "Foreground" => match store.mark_deleting(key, Some("foregroundDeletion"), 0) {
                Ok(marked) => {
                    drop(store);
                    tokio::spawn(Arc::clone(self).foreground(key.clone()));
                    server::json(200, &marked)
                }
                Err(_) => Status::not_found(key.resource, &key.name).response(),
            },
            "Orphan" => {
                controller::orphan(&mut store, uid_of(&claim));
                let gone = store.remove(key);
                server::json(200, &gone.unwrap_or(claim))
            }
            _ => {
                let gone = store.remove(key);
                drop(store);
                tokio::spawn(Arc::clone(self).background());
                server::json(200, &gone.unwrap_or(claim))
            }
        }
    }

    /// DELETE of a pod, as an operator's `kubectl delete pod`: marked
    /// terminating at once, its container removed, then the pod, and its
    /// Sandbox's status says so. (agent-sandbox's controller would make the
    /// pod again; the fake leaves it gone, which a session must meet as well.)
    fn delete_pod(self: &Arc<Self>, key: &Key) -> http::Response<Body> {
        let marked = match self.lock_store().mark_deleting(key, None, 30) {
            Ok(marked) => marked,
            Err(_) => return Status::not_found(key.resource, &key.name).response(),
        };
        let (fake, key) = (Arc::clone(self), key.clone());
        tokio::spawn(async move {
            fake.collect(&key).await;
            fake.sync_sandbox(&key.name);
        });
        server::json(200, &marked)
    }

    /// The pod proxy: relays to sandboxd in a Running pod on its port.
    async fn proxy(&self, namespace: &str, target: &str, rest: &str, req: &mut Request) -> http::Response<Body> {
        let t = match proxy::target(target) {
            Ok(t) => t,
            Err(e) => return Status::bad_request(e).response(),
        };
        let pod = self.lock_store().get(&Key::new(Resource::Pods, namespace, &t.name)).cloned();
        let Some(pod) = pod else { return Status::not_found(Resource::Pods, &t.name).response() };
        let port = t.port.unwrap_or(80);
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
        let ip = pod.pointer("/status/podIP").and_then(Value::as_str).unwrap_or_default();
        if phase != "Running" {
            let m = format!("error trying to reach service: pod {} is not running (phase {phase})", t.name);
            return Status::unavailable(m).response();
        }
        if port != SANDBOXD_PORT {
            let m = format!("error trying to reach service: dial tcp {ip}:{port}: connect: connection refused");
            return Status::unavailable(m).response();
        }
        let id = Fake::container_id(&t.name);
        if self.cluster.mode == Some(Mode::UpgradeStripped) && req.upgrade.take().is_some() {
            req.headers.remove(http::header::UPGRADE);
        }
        if req.upgrade.is_some() {
            return proxy::upgrade(&self.backing, &id, (ip, port), rest, req).await;
        }
        proxy::relay(&self.backing, &id, ip, port, rest, req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_collections_objects_and_the_pod_proxy() {
        let claims = |ns: Option<&str>| Route::Collection {
            resource: Resource::SandboxClaims,
            namespace: ns.map(str::to_string),
        };
        assert_eq!(
            route("/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/plimsoll/sandboxclaims"),
            Some(claims(Some("plimsoll")))
        );
        assert_eq!(route("/apis/extensions.agents.x-k8s.io/v1beta1/sandboxclaims"), Some(claims(None)));
        assert_eq!(
            route("/apis/agents.x-k8s.io/v1beta1/namespaces/plimsoll/sandboxes/s1"),
            Some(Route::Object { resource: Resource::Sandboxes, namespace: "plimsoll".into(), name: "s1".into() })
        );
        assert_eq!(
            route("/apis/node.k8s.io/v1/runtimeclasses/plimsoll-sandbox"),
            Some(Route::Object {
                resource: Resource::RuntimeClasses,
                namespace: String::new(),
                name: "plimsoll-sandbox".into()
            })
        );
        assert_eq!(
            route("/api/v1/nodes/fake-node-1"),
            Some(Route::Object { resource: Resource::Nodes, namespace: String::new(), name: "fake-node-1".into() })
        );
        assert_eq!(
            route("/api/v1/namespaces/plimsoll/pods/p:8787/proxy/v1/exec"),
            Some(Route::Proxy { namespace: "plimsoll".into(), target: "p:8787".into(), rest: "/v1/exec".into() })
        );
        assert_eq!(
            route("/api/v1/namespaces/plimsoll/pods/p/proxy"),
            Some(Route::Proxy { namespace: "plimsoll".into(), target: "p".into(), rest: String::new() })
        );
        for none in [
            "/",
            "/version",
            "/api/v1/namespaces/plimsoll",
            "/api/v1/namespaces/plimsoll/nodes/n",
            "/apis/extensions.agents.x-k8s.io/v1alpha1/namespaces/plimsoll/sandboxclaims",
            "/apis/agents.x-k8s.io/v1beta1/namespaces/plimsoll/sandboxes/s/status",
            "/apis/agents.x-k8s.io/v1beta1/namespaces/plimsoll/sandboxes/s/proxy/x",
            "/api/v1/pods/p",
            "/api/v1/namespaces/plimsoll/secrets",
        ] {
            assert_eq!(route(none), None, "{none}");
        }
    }

    #[test]
    fn claim_names_are_dns_subdomains() {
        for ok in ["plimsoll-0af3", "a", "a.b-c", &"a".repeat(253)] {
            assert!(dns_subdomain(ok), "{ok}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", "a_b", &"a".repeat(254)] {
            assert!(!dns_subdomain(bad), "{bad}");
        }
    }

    #[test]
    fn built_in_list_items_drop_their_type() {
        let v = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {}});
        assert_eq!(list_item(Resource::Pods, v.clone()), json!({"metadata": {}}));
        let c = json!({"kind": "SandboxClaim", "apiVersion": "extensions.agents.x-k8s.io/v1beta1"});
        assert_eq!(list_item(Resource::SandboxClaims, c.clone()), c);
    }
}
