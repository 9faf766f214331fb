//! E2B's control plane, through the host's `api` endpoint (which attaches the API
//! key and takes each sandbox's envd access token out of the answers).

use serde_json::{Value, json};

use crate::plimsoll::host::http::{self, Request};

/// How long one control-plane call may take.
const TIMEOUT_MS: u32 = 30_000;

/// A sandbox E2B made for us.
#[derive(Debug)]
pub struct Created {
    /// Its ID: lowercase letters and digits.
    pub id: String,
    /// Its envd's version.
    pub envd_version: String,
}

/// A vendor's answer, cut and scrubbed for plimsoll's words.
pub fn vendor_error(what: &str, status: u16, body: &[u8]) -> String {
    format!("e2b answered {what} with {status}: {}", plimsoll_plugin_remote::vendor_text(body))
}

fn call(method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Vec<u8>), String> {
    let r = http::send(&Request {
        endpoint: "api".into(),
        target: None,
        method: method.into(),
        path: path.into(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
        timeout_ms: TIMEOUT_MS,
    })?;
    Ok((r.status, r.body))
}

/// Whether `id` is a sandbox ID as E2B makes them (and a DNS label for envd's host).
pub fn is_sandbox_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 63 && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A granted run's one way out: the host's guard, whose requests E2B's proxy
/// gives the run's credential in `header` on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub host: String,
    pub header: String,
    pub credential: String,
}

impl Guard {
    /// The network rules that let the sandbox reach the guard and nothing else.
    fn rules(&self) -> (Value, Value) {
        let rule = json!([{"transform": {"headers": {self.header.as_str(): self.credential}}}]);
        (json!([self.host]), json!({self.host.as_str(): rule}))
    }
}

/// Creates a secured sandbox that denies all egress (but to `guard`, when a
/// grant asks for it) and takes no public traffic, stamped with this daemon's
/// instance, living `timeout_s` unless deleted sooner.
pub fn create(template: &str, timeout_s: u32, instance: &str, guard: Option<&Guard>) -> Result<Created, String> {
    let mut network = json!({"denyOut": ["0.0.0.0/0"], "allowPublicTraffic": false});
    if let Some(g) = guard {
        let (allow, rules) = g.rules();
        network["allowOut"] = allow;
        network["rules"] = rules;
    }
    let body = json!({
        "templateID": template,
        "timeout": timeout_s,
        "secure": true,
        "allow_internet_access": false,
        "network": network,
        "metadata": {"plimsoll-instance": instance},
    });
    let (status, answer) = call("POST", "/sandboxes", Some(&body))?;
    if status != 201 {
        return Err(vendor_error("the create", status, &answer));
    }
    let v: Value = serde_json::from_slice(&answer).map_err(|_| "e2b's create answer is not JSON".to_string())?;
    let id = v.get("sandboxID").and_then(Value::as_str).unwrap_or_default().to_string();
    if !is_sandbox_id(&id) {
        return Err(format!("e2b's create answer names sandbox {id:?}, not an ID of lowercase letters and digits"));
    }
    let envd_version = v.get("envdVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    Ok(Created { id, envd_version })
}

/// Sets the sandbox's egress to deny all but, with `guard`, the guard with its
/// header rule: E2B replaces the rules whole, clearing what the body omits.
pub fn set_network(id: &str, guard: Option<&Guard>) -> Result<(), String> {
    let mut body = json!({"denyOut": ["0.0.0.0/0"], "allow_internet_access": false});
    if let Some(g) = guard {
        let (allow, rules) = g.rules();
        body["allowOut"] = allow;
        body["rules"] = rules;
    }
    let (status, answer) = call("PUT", &format!("/sandboxes/{id}/network"), Some(&body))?;
    if status != 204 {
        return Err(vendor_error("the network update", status, &answer));
    }
    Ok(())
}

/// The sandbox as E2B reports it now.
pub fn detail(id: &str) -> Result<Value, String> {
    read_back(id)?.ok_or_else(|| format!("e2b has no sandbox {id}"))
}

/// The sandbox as E2B reports it now; None when E2B says it does not exist.
pub fn read_back(id: &str) -> Result<Option<Value>, String> {
    let (status, answer) = call("GET", &format!("/sandboxes/{id}"), None)?;
    match status {
        200 => serde_json::from_slice(&answer).map(Some).map_err(|_| "e2b's read-back is not JSON".to_string()),
        404 => Ok(None),
        _ => Err(vendor_error("the read-back", status, &answer)),
    }
}

/// Pauses the sandbox (its memory and files kept, its compute not billed). A
/// conflict counts as paused only when the sandbox then reads back paused.
pub fn pause(id: &str) -> Result<(), String> {
    let (status, answer) = call("POST", &format!("/sandboxes/{id}/pause"), Some(&json!({"memory": true})))?;
    match status {
        204 => Ok(()),
        409 if read_back(id)?.and_then(|v| v.get("state").cloned()) == Some(json!("paused")) => Ok(()),
        _ => Err(vendor_error("the pause", status, &answer)),
    }
}

/// Resumes a paused sandbox (or, running, sets its timeout again), living
/// `timeout_s` from now unless deleted sooner.
pub fn resume(id: &str, timeout_s: u32) -> Result<(), String> {
    let (status, answer) = call("POST", &format!("/sandboxes/{id}/connect"), Some(&json!({"timeout": timeout_s})))?;
    if status != 200 && status != 201 {
        return Err(vendor_error("the resume", status, &answer));
    }
    let v: Value = serde_json::from_slice(&answer).map_err(|_| "e2b's resume answer is not JSON".to_string())?;
    match v.get("sandboxID").and_then(Value::as_str) {
        Some(got) if got == id => Ok(()),
        other => Err(format!("e2b's resume answer names sandbox {other:?}, not {id}")),
    }
}

/// Kills the sandbox; one already gone counts as deleted.
pub fn delete(id: &str) -> Result<(), String> {
    let (status, answer) = call("DELETE", &format!("/sandboxes/{id}"), None)?;
    match status {
        204 | 404 => Ok(()),
        _ => Err(vendor_error("the delete", status, &answer)),
    }
}

/// The most pages of a listing read in one sweep (100 sandboxes each).
const MAX_PAGES: usize = 50;

/// Percent-encodes a query value.
fn encode(v: &str) -> String {
    plimsoll_plugin_remote::percent(v, b"")
}

/// The IDs of every sandbox, running or paused, stamped with `instance`.
pub fn stamped(instance: &str) -> Result<Vec<String>, String> {
    let metadata = encode(&format!("plimsoll-instance={}", encode(instance)));
    let mut ids = Vec::new();
    let mut next: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut path = format!("/v2/sandboxes?metadata={metadata}&state=running,paused&limit=100");
        if let Some(token) = &next {
            path.push_str(&format!("&nextToken={}", encode(token)));
        }
        let r = http::send(&Request {
            endpoint: "api".into(),
            target: None,
            method: "GET".into(),
            path,
            headers: vec![],
            body: vec![],
            timeout_ms: TIMEOUT_MS,
        })?;
        if r.status != 200 {
            return Err(vendor_error("the listing", r.status, &r.body));
        }
        let v: Value = serde_json::from_slice(&r.body).map_err(|_| "e2b's listing is not JSON".to_string())?;
        for item in v.as_array().ok_or("e2b's listing is not a list")? {
            // Only what carries our stamp is ours, whatever the filter matched.
            let stamp = item.get("metadata").and_then(|m| m.get("plimsoll-instance")).and_then(Value::as_str);
            let id = item.get("sandboxID").and_then(Value::as_str).unwrap_or_default();
            if stamp == Some(instance) && is_sandbox_id(id) {
                ids.push(id.to_string());
            }
        }
        next = r
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("x-next-token"))
            .map(|(_, v)| v.clone())
            .filter(|t| !t.is_empty());
        if next.is_none() {
            return Ok(ids);
        }
    }
    Err(format!("e2b's listing of this daemon's sandboxes runs past {MAX_PAGES} pages"))
}

/// What a run may use, as the operator set it (0: no maximum).
#[derive(Clone, Copy, Debug)]
pub struct Maxima {
    pub memory_mb: u32,
    pub cpus_milli: u32,
    pub disk_mb: u32,
}

/// Fields E2B's network read-back may carry; any other is refused, since
/// plimsoll cannot tell whether it opens a way out.
const NETWORK_FIELDS: [&str; 6] =
    ["allowOut", "denyOut", "allowPublicTraffic", "maskRequestHost", "egressProxy", "rules"];

fn number(v: &Value, field: &str) -> Result<u64, String> {
    v.get(field).and_then(Value::as_u64).ok_or_else(|| format!("the read-back has no {field}"))
}

fn empty(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    }
}

/// Checks the read-back against what was asked: this sandbox, running, ours,
/// within the operator's maxima, and denying all egress but, with `guard`, to
/// the guard with exactly its header rule. Returns why not.
pub fn verify(v: &Value, id: &str, instance: &str, max: Maxima, guard: Option<&Guard>) -> Result<(), String> {
    if v.get("sandboxID").and_then(Value::as_str) != Some(id) {
        return Err(format!("the read-back is not of sandbox {id}"));
    }
    let state = v.get("state").and_then(Value::as_str).unwrap_or_default();
    if state != "running" {
        return Err(format!("the sandbox is {state:?}, not running"));
    }
    let stamp = v.get("metadata").and_then(|m| m.get("plimsoll-instance")).and_then(Value::as_str);
    if stamp != Some(instance) {
        return Err("the sandbox does not carry this daemon's instance stamp".into());
    }
    let memory = number(v, "memoryMB")?;
    if max.memory_mb > 0 && memory > u64::from(max.memory_mb) {
        return Err(format!("the sandbox has {memory} MiB of memory, above SANDBOX_MEMORY_MB={}", max.memory_mb));
    }
    let cpus = number(v, "cpuCount")?;
    if max.cpus_milli > 0 && cpus * 1000 > u64::from(max.cpus_milli) {
        return Err(format!("the sandbox has {cpus} CPUs, above SANDBOX_CPUS={}", f64::from(max.cpus_milli) / 1000.0));
    }
    let disk = number(v, "diskSizeMB")?;
    if max.disk_mb > 0 && disk > u64::from(max.disk_mb) {
        return Err(format!("the sandbox has {disk} MiB of disk, above SANDBOX_DISK_MB={}", max.disk_mb));
    }
    if v.get("allowInternetAccess").and_then(Value::as_bool) == Some(true) {
        return Err("the sandbox allows internet access".into());
    }
    let network = v.get("network").and_then(Value::as_object).ok_or("the read-back has no network rules")?;
    if let Some(k) = network.keys().find(|k| !NETWORK_FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "the network read-back has a field plimsoll does not know ({k:?}); refusing rather than guess what it opens"
        ));
    }
    let (allow, rules) = match guard {
        Some(g) => g.rules(),
        None => (json!([]), json!({})),
    };
    let allowed = network.get("allowOut").filter(|a| !empty(Some(a))).cloned().unwrap_or_else(|| json!([]));
    if allowed != allow {
        return Err(format!("the sandbox allows egress to {allowed}"));
    }
    let denies_all = network
        .get("denyOut")
        .and_then(Value::as_array)
        .is_some_and(|d| d.iter().any(|x| x.as_str() == Some("0.0.0.0/0")));
    if !denies_all {
        return Err("the sandbox does not deny all egress (no 0.0.0.0/0 in denyOut)".into());
    }
    // Asked false: the sandbox's URLs answer only with its access token.
    match network.get("allowPublicTraffic").and_then(Value::as_bool) {
        Some(false) => {}
        Some(true) => return Err("the sandbox's URLs take public traffic (allowPublicTraffic is true)".into()),
        None => return Err("the read-back does not say the sandbox's URLs are closed to public traffic".into()),
    }
    if !empty(network.get("egressProxy")) {
        return Err("the sandbox's network has egressProxy set".into());
    }
    let got = network.get("rules").filter(|r| !empty(Some(r))).cloned().unwrap_or_else(|| json!({}));
    if got != rules {
        // The rule carries the run's credential: its value is not repeated here.
        return Err("the sandbox's network rules are not exactly the guard's header rule".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> Value {
        json!({
            "sandboxID": "abc123", "state": "running", "templateID": "base",
            "metadata": {"plimsoll-instance": "me"},
            "memoryMB": 512, "cpuCount": 1, "diskSizeMB": 1024,
            "allowInternetAccess": false,
            "network": {"denyOut": ["0.0.0.0/0"], "allowOut": [], "allowPublicTraffic": false},
        })
    }

    const MAX: Maxima = Maxima { memory_mb: 512, cpus_milli: 1000, disk_mb: 2048 };

    #[test]
    fn a_read_back_that_is_what_was_asked_passes() {
        assert_eq!(verify(&good(), "abc123", "me", MAX, None), Ok(()));
        assert_eq!(verify(&good(), "abc123", "me", Maxima { memory_mb: 0, cpus_milli: 0, disk_mb: 0 }, None), Ok(()));
    }

    #[test]
    fn every_weaker_read_back_is_refused_by_name() {
        let cases: [(&str, Value, &str); 10] = [
            (
                "/network/allowPublicTraffic",
                json!(true),
                "the sandbox's URLs take public traffic (allowPublicTraffic is true)",
            ),
            ("/memoryMB", json!(1024), "the sandbox has 1024 MiB of memory, above SANDBOX_MEMORY_MB=512"),
            ("/cpuCount", json!(2), "the sandbox has 2 CPUs, above SANDBOX_CPUS=1"),
            ("/diskSizeMB", json!(4096), "the sandbox has 4096 MiB of disk, above SANDBOX_DISK_MB=2048"),
            ("/allowInternetAccess", json!(true), "the sandbox allows internet access"),
            ("/network/allowOut", json!(["0.0.0.0/0"]), "the sandbox allows egress to [\"0.0.0.0/0\"]"),
            ("/network/denyOut", json!([]), "the sandbox does not deny all egress (no 0.0.0.0/0 in denyOut)"),
            (
                "/network/allowAll",
                json!(true),
                "the network read-back has a field plimsoll does not know (\"allowAll\"); refusing rather than guess what it opens",
            ),
            ("/state", json!("paused"), "the sandbox is \"paused\", not running"),
            ("/metadata/plimsoll-instance", json!("other"), "the sandbox does not carry this daemon's instance stamp"),
        ];
        for (pointer, value, why) in cases {
            let mut v = good();
            let (parent, field) = pointer.rsplit_once('/').expect("pointer");
            let target = if parent.is_empty() { &mut v } else { v.pointer_mut(parent).expect("parent") };
            target[field] = value;
            assert_eq!(verify(&v, "abc123", "me", MAX, None), Err(why.to_string()), "{pointer}");
        }
        assert_eq!(verify(&good(), "zzz", "me", MAX, None), Err("the read-back is not of sandbox zzz".into()));
        let mut ruled = good();
        ruled["network"]["rules"] = json!({"x.test": [{"transform": {"headers": {"a": "b"}}}]});
        let why = "the sandbox's network rules are not exactly the guard's header rule";
        assert_eq!(verify(&ruled, "abc123", "me", MAX, None), Err(why.into()));
    }

    #[test]
    fn a_granted_sandbox_reaches_the_guard_with_exactly_its_rule_and_nothing_else() {
        let guard = Guard { host: "guard.test".into(), header: "x-plimsoll-guard".into(), credential: "crg_1".into() };
        let (allow, rules) = guard.rules();
        let mut v = good();
        v["network"]["allowOut"] = allow.clone();
        v["network"]["rules"] = rules.clone();
        assert_eq!(verify(&v, "abc123", "me", MAX, Some(&guard)), Ok(()));
        assert_eq!(verify(&good(), "abc123", "me", MAX, Some(&guard)), Err("the sandbox allows egress to []".into()));
        let mut wider = v.clone();
        wider["network"]["allowOut"] = json!(["guard.test", "evil.test"]);
        assert_eq!(
            verify(&wider, "abc123", "me", MAX, Some(&guard)),
            Err("the sandbox allows egress to [\"guard.test\",\"evil.test\"]".into())
        );
        let mut other = v.clone();
        other["network"]["rules"]["guard.test"][0]["transform"]["headers"]["x-plimsoll-guard"] = json!("crg_2");
        let why = "the sandbox's network rules are not exactly the guard's header rule";
        assert_eq!(verify(&other, "abc123", "me", MAX, Some(&guard)), Err(why.into()));
        assert_eq!(verify(&v, "abc123", "me", MAX, None), Err("the sandbox allows egress to [\"guard.test\"]".into()));
    }

    #[test]
    fn vendor_text_is_cut_and_scrubbed() {
        let long = format!("{{\"message\":\"{}\n\"}}", "x".repeat(600));
        let e = vendor_error("the create", 500, long.as_bytes());
        assert!(e.starts_with("e2b answered the create with 500: {\"message\":\"xxx"), "{e}");
        assert_eq!(e.chars().count(), "e2b answered the create with 500: ".len() + 512);
        assert!(
            is_sandbox_id("i8n4c2y7l0s3k9v1x6qa")
                && !is_sandbox_id("Abc")
                && !is_sandbox_id("a.b")
                && !is_sandbox_id("")
        );
    }
}
