//! The Sandboxes API's management plane, through the host's `api` endpoint (which
//! attaches the Hub bearer it traded the operator's token for, and takes each
//! sandbox's scoped endpoint credential out of the answers).

use serde_json::{Value, json};

use crate::plimsoll::host::http::{self, Request};

/// How long one management call may take.
const TIMEOUT_MS: u32 = 30_000;
/// The most pages of a listing read in one sweep.
const MAX_PAGES: usize = 50;
/// The label that stamps a sandbox with this daemon's instance.
pub const STAMP: &str = "plimsoll-instance";

/// A vendor's answer, cut and scrubbed for plimsoll's words.
pub fn vendor_error(what: &str, status: u16, body: &[u8]) -> String {
    format!("Docker answered {what} with {status}: {}", plimsoll_plugin_remote::vendor_text(body))
}

/// An answer: status, the ETag header, the body.
pub struct Answer {
    pub status: u16,
    pub etag: Option<String>,
    pub body: Vec<u8>,
}

fn call(method: &str, path: &str, headers: Vec<(String, String)>, body: Option<&Value>) -> Result<Answer, String> {
    let mut headers = headers;
    if body.is_some() {
        headers.push(("content-type".into(), "application/json".into()));
    }
    let r = http::send(&Request {
        endpoint: "api".into(),
        target: None,
        method: method.into(),
        path: format!("/v1/{path}"),
        headers,
        body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
        timeout_ms: TIMEOUT_MS,
    })?;
    let etag = r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("etag")).map(|(_, v)| v.clone());
    Ok(Answer { status: r.status, etag, body: r.body })
}

fn json(what: &str, body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|_| format!("Docker's answer to {what} is not JSON"))
}

/// Whether `uid` can name a host: one DNS label of lowercase letters, digits and
/// dashes (the host puts it in the endpoint's name).
pub fn is_uid(uid: &str) -> bool {
    !uid.is_empty()
        && uid.len() <= 63
        && uid.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !uid.starts_with('-')
        && !uid.ends_with('-')
}

/// What a create asks for.
pub struct Wanted<'a> {
    pub display_name: &'a str,
    pub image: &'a str,
    pub cpus: u32,
    pub memory_mib: u32,
    pub lifetime_s: u32,
    pub instance: &'a str,
    /// The one host a granted run may reach (the host's guard).
    pub allow: Option<&'a str>,
}

/// Creates a sandbox of the pinned image at the asked size, idling until runs
/// come, deleted by Docker `lifetime_s` from now should every delete be lost,
/// stamped with this daemon's instance; with `allow`, bound to an inline policy
/// that denies all egress but to that host; returns its uid.
pub fn create(w: &Wanted<'_>) -> Result<String, String> {
    let mut body = json!({
        "displayName": w.display_name,
        "imageRef": w.image,
        "platform": {"os": "linux", "architecture": "amd64"},
        "resources": {"cpus": w.cpus, "memoryMib": w.memory_mib},
        "startupExecution": {"rawImage": {"start": {"argv": ["tail", "-f", "/dev/null"]}}},
        "features": {"timeouts": {"timeout": format!("{}s", w.lifetime_s), "onTimeout": "delete", "autoResume": false}},
        "labels": {STAMP: w.instance},
    });
    if let Some(host) = w.allow {
        body["networkPolicies"] = json!([{"mode": "denyAll", "allowNetworks": [host]}]);
    }
    let key = vec![("idempotency-key".to_string(), w.display_name.to_string())];
    let a = call("POST", "sandboxes", key, Some(&body))?;
    if a.status != 201 && a.status != 202 {
        return Err(vendor_error("the create", a.status, &a.body));
    }
    let v = json("the create", &a.body)?;
    let uid = v.get("uid").and_then(Value::as_str).unwrap_or_default().to_string();
    if !is_uid(&uid) {
        return Err(format!(
            "Docker's create answer names sandbox {uid:?}, not a uid of lowercase letters, digits and dashes"
        ));
    }
    Ok(uid)
}

/// The sandbox as Docker reports it now, with its ETag; None once it is gone.
pub fn get(uid: &str) -> Result<Option<(Value, String)>, String> {
    let a = call("GET", &format!("sandboxes/{uid}"), Vec::new(), None)?;
    match a.status {
        200 => {
            let v = json("the read-back", &a.body)?;
            let etag = a
                .etag
                .or_else(|| v.pointer("/core/etag").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_default();
            Ok(Some((v, etag)))
        }
        404 => Ok(None),
        s => Err(vendor_error("the read-back", s, &a.body)),
    }
}

/// The sandbox's effective network policy.
pub fn policy(uid: &str) -> Result<Value, String> {
    let a = call("GET", &format!("sandboxes/{uid}/network-policies"), Vec::new(), None)?;
    if a.status != 200 {
        return Err(vendor_error("the network policy read", a.status, &a.body));
    }
    let v = json("the network policy read", &a.body)?;
    v.get("effective").cloned().ok_or_else(|| "the network policy read has no effective policy".into())
}

/// Mints a scoped credential for the sandbox's endpoint (exec and files), which
/// the host keeps and attaches; checks the answer names this sandbox.
pub fn mint(uid: &str) -> Result<(), String> {
    let body = json!({
        "permissions": ["sandboxesExec", "sandboxesFilesRead", "sandboxesFilesWrite"],
        "ttl": "300s",
    });
    let a = call("POST", &format!("sandboxes/{uid}/endpoint-credentials"), Vec::new(), Some(&body))?;
    if a.status != 200 {
        return Err(vendor_error("the endpoint credential", a.status, &a.body));
    }
    let v = json("the endpoint credential", &a.body)?;
    if v.get("sandbox").and_then(Value::as_str) != Some(format!("sandboxes/{uid}").as_str()) {
        return Err("the endpoint credential is not for this sandbox".into());
    }
    Ok(())
}

/// Deletes the sandbox: its current ETag in `If-Match`, re-read and tried again
/// when it moved. One already gone still gets its DELETE (Docker answers 204
/// whatever the tag): that answer is what tells the host it is gone, so it stops
/// holding capacity for it.
pub fn delete(uid: &str) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..5 {
        let etag = get(uid)?.map_or_else(|| "\"gone\"".to_string(), |(_, etag)| etag);
        let a = call("DELETE", &format!("sandboxes/{uid}?force=true"), vec![("if-match".into(), etag)], None)?;
        match a.status {
            200 | 202 | 204 | 404 => return Ok(()),
            412 => last = vendor_error("the delete", a.status, &a.body),
            s => return Err(vendor_error("the delete", s, &a.body)),
        }
    }
    Err(format!("the sandbox kept changing under its delete: {last}"))
}

/// The uids of every sandbox labelled with `instance`.
pub fn stamped(instance: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut token = String::new();
    for _ in 0..MAX_PAGES {
        let mut path = "sandboxes?pageSize=100".to_string();
        if !token.is_empty() {
            path.push_str(&format!("&pageToken={}", encode(&token)));
        }
        let a = call("GET", &path, Vec::new(), None)?;
        if a.status != 200 {
            return Err(vendor_error("the listing", a.status, &a.body));
        }
        let v = json("the listing", &a.body)?;
        for s in v.get("sandboxes").and_then(Value::as_array).into_iter().flatten() {
            let stamp = s.pointer(&format!("/core/labels/{STAMP}")).and_then(Value::as_str);
            if stamp == Some(instance)
                && let Some(uid) = s.get("uid").and_then(Value::as_str).filter(|u| is_uid(u))
            {
                out.push(uid.to_string());
            }
        }
        token = v.get("nextPageToken").and_then(Value::as_str).unwrap_or_default().to_string();
        if token.is_empty() {
            return Ok(out);
        }
    }
    Err(format!("the listing went past {MAX_PAGES} pages; the rest waits for the next sweep"))
}

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    plimsoll_plugin_remote::percent(v, b"")
}

/// What the read-back must show.
pub struct Expected<'a> {
    pub uid: &'a str,
    pub display_name: &'a str,
    pub image: &'a str,
    pub cpus: u32,
    pub memory_mib: u32,
    pub instance: &'a str,
    /// The endpoint the operator approved, `{target}` where the uid goes.
    pub endpoint_url: &'a str,
}

fn number(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Where the sandbox stands: Ok(true) running, Ok(false) still coming up, Err
/// a state it will not run from (with Docker's failure, if it gave one).
pub fn running(v: &Value) -> Result<bool, String> {
    match v.pointer("/core/status").and_then(Value::as_str).unwrap_or_default() {
        "running" => Ok(true),
        "creating" | "starting" => Ok(false),
        other => {
            let why = v.pointer("/failure/message").and_then(Value::as_str).unwrap_or_default();
            Err(format!(
                "the sandbox is {other:?}, not running{}",
                if why.is_empty() { String::new() } else { format!(": {why}") }
            ))
        }
    }
}

/// Checks a running sandbox's read-back against what was asked: this sandbox,
/// ours, the pinned image, the asked size, and its endpoint where the operator
/// said it would be, with the operations plimsoll uses. Returns why not.
pub fn verify(v: &Value, e: &Expected<'_>) -> Result<(), String> {
    if v.get("uid").and_then(Value::as_str) != Some(e.uid) {
        return Err(format!("the read-back is not of sandbox {}", e.uid));
    }
    if v.get("displayName").and_then(Value::as_str) != Some(e.display_name) {
        return Err(format!("the sandbox's display name is not {:?}", e.display_name));
    }
    if v.pointer(&format!("/core/labels/{STAMP}")).and_then(Value::as_str) != Some(e.instance) {
        return Err("the sandbox does not carry this daemon's instance stamp".into());
    }
    let image = v.pointer("/core/imageRef").and_then(Value::as_str).unwrap_or_default();
    if image != e.image {
        return Err(format!("the sandbox's image is {image:?}, not the pinned {:?}", e.image));
    }
    let cpus = number(v.pointer("/core/resources/cpus")).unwrap_or(0);
    let memory = number(v.pointer("/core/resources/memoryMib")).unwrap_or(0);
    if cpus == 0 || memory == 0 || cpus > u64::from(e.cpus) || memory > u64::from(e.memory_mib) {
        return Err(format!(
            "the sandbox has {cpus} CPUs and {memory} MiB, not the {} and {} asked",
            e.cpus, e.memory_mib
        ));
    }
    let endpoint = v.pointer("/core/endpoint").ok_or("the sandbox has no endpoint")?;
    if endpoint.get("protocol").and_then(Value::as_str) != Some("http") {
        return Err(format!(
            "the sandbox's endpoint speaks {}, not http",
            endpoint.get("protocol").cloned().unwrap_or_default()
        ));
    }
    let want = e.endpoint_url.replacen("{target}", e.uid, 1);
    let uri = endpoint.get("uri").and_then(Value::as_str).unwrap_or_default();
    if uri.trim_end_matches('/') != want.trim_end_matches('/') {
        return Err(format!(
            "the sandbox's endpoint is {uri:?}, not {want:?} where SANDBOX_DOCKERCLOUD_ENDPOINT_URL says endpoints are"
        ));
    }
    if endpoint.get("sandboxUid").and_then(Value::as_str) != Some(e.uid) {
        return Err("the sandbox's endpoint is another sandbox's".into());
    }
    let offered: Vec<&str> = endpoint
        .get("capabilities")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if let Some(missing) = ["exec", "upload", "download"].into_iter().find(|c| !offered.contains(c)) {
        return Err(format!("the sandbox's endpoint does not offer {missing}"));
    }
    Ok(())
}

/// The layer Docker reports a policy bound at create under.
const ATTACHED: &str = "attached";

/// Checks an effective network policy denies all egress, with no network
/// allowed from any layer but, with `allow`, exactly that host from the policy
/// bound at create. Returns why not.
pub fn denies_all(effective: &Value, allow: Option<&str>) -> Result<(), String> {
    let mode = effective.get("mode").and_then(Value::as_str).unwrap_or_default();
    if mode != "denyAll" {
        return Err(format!(
            "the sandbox's effective network policy is {mode:?}, not denyAll (run `sbx --cloud policy init deny-all` once for the account)"
        ));
    }
    let rules: Vec<(&str, &str)> = effective
        .get("allowNetworks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            let network = r.get("network").and_then(Value::as_str).unwrap_or("?");
            let layer = r.get("layer").and_then(Value::as_str).unwrap_or("?");
            (network, layer)
        })
        .collect();
    let wanted: Vec<(&str, &str)> = allow.map(|host| (host, ATTACHED)).into_iter().collect();
    if rules == wanted {
        return Ok(());
    }
    let list = |rules: &[(&str, &str)]| rules.iter().map(|(n, l)| format!("{n} ({l})")).collect::<Vec<_>>().join(", ");
    match allow {
        None => Err(format!("the sandbox's network policy allows {}", list(&rules))),
        Some(host) => Err(format!(
            "the sandbox's network policy allows [{}], not exactly the guard's {host} ({ATTACHED})",
            list(&rules)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str = "python@sha256:0000000000000000000000000000000000000000000000000000000000000000";

    fn good() -> Value {
        json!({
            "uid": "abc123", "name": "sandboxes/abc123", "displayName": "plimsoll-1",
            "core": {
                "status": "running", "imageRef": IMAGE, "etag": "\"e2\"",
                "resources": {"cpus": 1, "memoryMib": "2048"}, "labels": {STAMP: "me"},
                "endpoint": {"uri": "https://abc123.sbx.test", "protocol": "http", "sandboxUid": "abc123",
                             "capabilities": ["exec", "upload", "download"]},
            },
        })
    }

    fn expected() -> Expected<'static> {
        Expected {
            uid: "abc123",
            display_name: "plimsoll-1",
            image: IMAGE,
            cpus: 1,
            memory_mib: 2048,
            instance: "me",
            endpoint_url: "https://{target}.sbx.test",
        }
    }

    #[test]
    fn a_faithful_read_back_passes() {
        assert_eq!(verify(&good(), &expected()), Ok(()));
        assert_eq!(running(&good()), Ok(true));
    }

    #[test]
    fn every_difference_in_the_read_back_is_named() {
        let cases: [(&str, Value, &str); 8] = [
            ("/uid", json!("zzz"), "the read-back is not of sandbox abc123"),
            ("/core/labels", json!({}), "the sandbox does not carry this daemon's instance stamp"),
            (
                "/core/imageRef",
                json!("python"),
                &format!("the sandbox's image is \"python\", not the pinned {IMAGE:?}"),
            ),
            (
                "/core/resources/memoryMib",
                json!("16384"),
                "the sandbox has 1 CPUs and 16384 MiB, not the 1 and 2048 asked",
            ),
            ("/core/resources/cpus", json!(0), "the sandbox has 0 CPUs and 2048 MiB, not the 1 and 2048 asked"),
            ("/core/endpoint/protocol", json!("unixSocket"), "the sandbox's endpoint speaks \"unixSocket\", not http"),
            (
                "/core/endpoint/uri",
                json!("https://abc123.elsewhere.test"),
                "the sandbox's endpoint is \"https://abc123.elsewhere.test\", not \"https://abc123.sbx.test\" where SANDBOX_DOCKERCLOUD_ENDPOINT_URL says endpoints are",
            ),
            ("/core/endpoint/capabilities", json!(["exec"]), "the sandbox's endpoint does not offer upload"),
        ];
        for (pointer, value, want) in cases {
            let mut v = good();
            *v.pointer_mut(pointer).expect(pointer) = value;
            assert_eq!(verify(&v, &expected()), Err(want.to_string()), "{pointer}");
        }
    }

    #[test]
    fn states_that_will_not_run_are_refused_with_dockers_reason() {
        let mut v = good();
        v["core"]["status"] = json!("creating");
        assert_eq!(running(&v), Ok(false));
        v["core"]["status"] = json!("failed");
        v["failure"] = json!({"code": "resourceExhausted", "message": "quota"});
        assert_eq!(running(&v), Err("the sandbox is \"failed\", not running: quota".into()));
    }

    #[test]
    fn only_a_deny_all_policy_with_nothing_allowed_passes() {
        assert_eq!(denies_all(&json!({"mode": "denyAll", "allowNetworks": []}), None), Ok(()));
        assert!(
            denies_all(&json!({"mode": "allowAll"}), None)
                .expect_err("allow")
                .starts_with("the sandbox's effective network policy is \"allowAll\", not denyAll")
        );
        assert_eq!(
            denies_all(
                &json!({"mode": "denyAll", "allowNetworks": [{"network": "api.example.com:443", "layer": "owner"}]}),
                None
            ),
            Err("the sandbox's network policy allows api.example.com:443 (owner)".into())
        );
    }

    #[test]
    fn a_granted_sandbox_allows_exactly_the_guard_from_its_own_policy() {
        let guard = |layer: &str| json!({"network": "guard.test", "layer": layer});
        let with = |rules: Value| json!({"mode": "denyAll", "allowNetworks": rules});
        assert_eq!(denies_all(&with(json!([guard("attached")])), Some("guard.test")), Ok(()));
        let why = |rules: &str| {
            Err(format!("the sandbox's network policy allows [{rules}], not exactly the guard's guard.test (attached)"))
        };
        assert_eq!(denies_all(&with(json!([])), Some("guard.test")), why(""));
        assert_eq!(denies_all(&with(json!([guard("owner")])), Some("guard.test")), why("guard.test (owner)"));
        let wider = with(json!([guard("attached"), {"network": "api.example.com", "layer": "owner"}]));
        assert_eq!(denies_all(&wider, Some("guard.test")), why("guard.test (attached), api.example.com (owner)"));
        assert_eq!(
            denies_all(&with(json!([guard("attached")])), None),
            Err("the sandbox's network policy allows guard.test (attached)".into())
        );
    }

    #[test]
    fn uids_must_be_dns_labels() {
        assert!(is_uid("vq5wulw3quj4ov960wrj5jnwf2"));
        assert!(!is_uid("Sbx_01"));
        assert!(!is_uid(""));
        assert!(!is_uid("-a"));
    }
}
