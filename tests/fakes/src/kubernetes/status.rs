//! `metav1.Status`: how the API server answers an error, with the reasons,
//! codes and message wording kube-apiserver uses.

use serde_json::{Value, json};

use super::store::Resource;
use crate::server::{self, Body};

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// The HTTP status, repeated as `code`.
    pub code: u16,
    /// The `StatusReason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// What went wrong, in the API server's words.
    pub message: String,
    /// `details`, when the reason names an object.
    pub details: Option<Value>,
    /// Seconds a throttled client should wait (`Retry-After`).
    pub retry_after: Option<u32>,
}

impl Status {
    fn new(code: u16, reason: &'static str, message: String) -> Status {
        Status { code, reason, message, details: None, retry_after: None }
    }

    fn about(mut self, resource: Resource, name: &str) -> Status {
        let mut d = json!({"name": name, "kind": resource.plural()});
        if !resource.group().is_empty() {
            d["group"] = json!(resource.group());
        }
        self.details = Some(d);
        self
    }

    /// 404: `resource` has no object `name`.
    pub fn not_found(resource: Resource, name: &str) -> Status {
        Status::new(404, "NotFound", format!("{} \"{name}\" not found", resource.qualified())).about(resource, name)
    }

    /// 404: no namespace `name` (this fake has one).
    pub fn namespace_not_found(name: &str) -> Status {
        let mut s = Status::new(404, "NotFound", format!("namespaces \"{name}\" not found"));
        s.details = Some(json!({"name": name, "kind": "namespaces"}));
        s
    }

    /// 404: no such path.
    pub fn no_route() -> Status {
        let mut s = Status::new(404, "NotFound", "the server could not find the requested resource".into());
        s.details = Some(json!({}));
        s
    }

    /// 409: `name` is taken.
    pub fn already_exists(resource: Resource, name: &str) -> Status {
        Status::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", resource.qualified()))
            .about(resource, name)
    }

    /// 409: a precondition on `name` does not hold.
    pub fn conflict(resource: Resource, name: &str, why: &str) -> Status {
        Status::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {} \"{name}\": {why}", resource.qualified()),
        )
        .about(resource, name)
    }

    /// 422: the object `name` of `kind` fails validation at `field`.
    pub fn invalid(resource: Resource, name: &str, field: &str, detail: &str) -> Status {
        let kind = match resource.group() {
            "" => resource.kind().to_string(),
            group => format!("{}.{group}", resource.kind()),
        };
        let mut s = Status::new(422, "Invalid", format!("{kind} \"{name}\" is invalid: {field}: {detail}"));
        let mut d = json!({
            "name": name,
            "kind": resource.kind(),
            "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}],
        });
        if !resource.group().is_empty() {
            d["group"] = json!(resource.group());
        }
        s.details = Some(d);
        s
    }

    /// 422 for a field a CRD's structural schema requires and the object lacks,
    /// as kube-apiserver's schema validation words it (`FieldValueRequired`).
    pub fn required(resource: Resource, name: &str, field: &str) -> Status {
        let mut s = Status::invalid(resource, name, field, "Required value");
        if let Some(d) = s.details.as_mut() {
            d["causes"] = json!([{"reason": "FieldValueRequired", "message": "Required value", "field": field}]);
        }
        s
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Status {
        Status::new(400, "BadRequest", message.into())
    }

    /// 401: no bearer, or not this cluster's.
    pub fn unauthorized() -> Status {
        Status::new(401, "Unauthorized", "Unauthorized".into())
    }

    /// 405: the resource exists but does not take this verb.
    pub fn method_not_allowed() -> Status {
        let mut s = Status::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".into(),
        );
        s.details = Some(json!({}));
        s
    }

    /// 429, as API Priority and Fairness answers.
    pub fn too_many_requests() -> Status {
        let mut s = Status::new(429, "TooManyRequests", "Too many requests, please try again later.".into());
        s.details = Some(json!({"retryAfterSeconds": 1}));
        s.retry_after = Some(1);
        s
    }

    /// 500.
    pub fn internal(cause: &str) -> Status {
        let mut s = Status::new(500, "InternalError", format!("Internal error occurred: {cause}"));
        s.details = Some(json!({"causes": [{"message": cause}]}));
        s
    }

    /// 503.
    pub fn unavailable(message: impl Into<String>) -> Status {
        Status::new(503, "ServiceUnavailable", message.into())
    }

    /// 410: a watch asked for history this server no longer keeps.
    pub fn expired(asked: u64, now: u64) -> Status {
        Status::new(410, "Expired", format!("too old resource version: {asked} ({now})"))
    }

    /// The `Status` object.
    pub fn json(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }

    /// The answer: the `Status` with its code (and `Retry-After`).
    pub fn response(&self) -> http::Response<Body> {
        let mut r = server::json(self.code, &self.json());
        if let Some(s) = self.retry_after
            && let Ok(v) = http::HeaderValue::from_str(&s.to_string())
        {
            r.headers_mut().insert(http::header::RETRY_AFTER, v);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_qualified_resource_as_kube_apiserver_does() {
        let s = Status::not_found(Resource::SandboxClaims, "x");
        assert_eq!(
            s.json(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "sandboxclaims.extensions.agents.x-k8s.io \"x\" not found", "reason": "NotFound",
                   "details": {"name": "x", "group": "extensions.agents.x-k8s.io", "kind": "sandboxclaims"},
                   "code": 404})
        );
        let core = Status::not_found(Resource::Pods, "p").json();
        assert_eq!(core["message"], "pods \"p\" not found");
        assert_eq!(core["details"], json!({"name": "p", "kind": "pods"}));
    }

    #[test]
    fn a_missing_required_field_is_invalid_as_the_schema_says() {
        let s = Status::required(Resource::SandboxClaims, "c1", "spec.warmPoolRef").json();
        assert_eq!(s["code"], 422);
        assert_eq!(s["reason"], "Invalid");
        assert_eq!(
            s["message"],
            "SandboxClaim.extensions.agents.x-k8s.io \"c1\" is invalid: spec.warmPoolRef: Required value"
        );
        assert_eq!(
            s["details"]["causes"],
            json!([{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.warmPoolRef"}])
        );
    }

    #[test]
    fn every_reason_carries_its_code() {
        let cases = [
            (Status::already_exists(Resource::SandboxClaims, "a"), 409_u64, "AlreadyExists"),
            (Status::conflict(Resource::SandboxClaims, "a", "why"), 409, "Conflict"),
            (Status::bad_request("b"), 400, "BadRequest"),
            (Status::unauthorized(), 401, "Unauthorized"),
            (Status::method_not_allowed(), 405, "MethodNotAllowed"),
            (Status::too_many_requests(), 429, "TooManyRequests"),
            (Status::internal("boom"), 500, "InternalError"),
            (Status::unavailable("gone"), 503, "ServiceUnavailable"),
            (Status::expired(3, 9), 410, "Expired"),
            (Status::no_route(), 404, "NotFound"),
        ];
        for (s, code, reason) in cases {
            let v = s.json();
            assert_eq!((v["code"].as_u64(), v["reason"].as_str()), (Some(code), Some(reason)), "{v}");
            assert_eq!(v["status"], "Failure");
        }
        assert_eq!(Status::unauthorized().json()["message"], "Unauthorized");
        assert_eq!(Status::expired(3, 9).json()["message"], "too old resource version: 3 (9)");
        assert_eq!(Status::too_many_requests().json()["message"], "Too many requests, please try again later.");
        assert_eq!(
            Status::already_exists(Resource::SandboxClaims, "a").json()["message"],
            "sandboxclaims.extensions.agents.x-k8s.io \"a\" already exists"
        );
    }

    #[test]
    fn invalid_names_the_kind_and_the_field() {
        let v = Status::invalid(Resource::SandboxClaims, "Bad", "metadata.name", "Invalid value: \"Bad\"").json();
        assert_eq!(
            v["message"],
            "SandboxClaim.extensions.agents.x-k8s.io \"Bad\" is invalid: metadata.name: Invalid value: \"Bad\""
        );
        assert_eq!(v["code"], 422);
        assert_eq!(v["details"]["causes"][0]["field"], "metadata.name");
    }

    #[test]
    fn throttling_says_when_to_come_back() {
        let r = Status::too_many_requests().response();
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    }
}
