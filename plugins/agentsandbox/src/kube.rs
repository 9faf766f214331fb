//! The Kubernetes API, through the host's `api` endpoint (which attaches the
//! service account's bearer or presents the client certificate, and trusts the
//! cluster's CA): the objects the plugin reads, the claims it makes and
//! deletes in the foreground, and the watch it waits on.
//!
//! A read that meets 429 or a 5xx is sent again (a 429's `Retry-After`
//! honoured, at most 5 s); a create that meets a 5xx is sent again under the
//! same name, and an `AlreadyExists` then is taken for the first attempt's only
//! when the claim carries this run's nonce.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::plimsoll::host::http::{self, Request};

/// How long one API call may take.
const TIMEOUT_MS: u32 = 30_000;
/// How often a call that met 429 or a 5xx is tried in all.
const TRIES: u32 = 5;
/// The label stamping a claim with this daemon's instance.
pub const INSTANCE: &str = "plimsoll.dev/instance";
/// The label carrying the run's nonce, so a create sent twice is known as ours.
pub const RUN: &str = "plimsoll.dev/run";
/// The agent-sandbox extensions' group and version.
pub const EXTENSIONS: &str = "/apis/extensions.agents.x-k8s.io/v1beta1";
/// The agent-sandbox core group and version.
pub const SANDBOXES: &str = "/apis/agents.x-k8s.io/v1beta1";

/// An answer from the API server.
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// The API server's refusal in plimsoll's words: its code, reason and message
/// (a `metav1.Status`), or the start of whatever else it sent.
pub fn refusal(what: &str, status: u16, body: &[u8]) -> String {
    let said = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
        let reason = v.get("reason").and_then(Value::as_str).unwrap_or_default().to_string();
        v.get("message").and_then(Value::as_str).map(|m| (reason, m.to_string()))
    });
    match said {
        Some((reason, message)) if !reason.is_empty() => format!(
            "the Kubernetes API answered {what} with {status} {reason}: {}",
            plimsoll_plugin_remote::vendor_text(message.as_bytes())
        ),
        Some((_, message)) => format!(
            "the Kubernetes API answered {what} with {status}: {}",
            plimsoll_plugin_remote::vendor_text(message.as_bytes())
        ),
        None => {
            format!("the Kubernetes API answered {what} with {status}: {}", plimsoll_plugin_remote::vendor_text(body))
        }
    }
}

/// A `metav1.Status`'s reason, if the body is one.
fn reason(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

fn send_once(method: &str, path: &str, body: Option<&Value>) -> Result<(Answer, Option<Duration>), String> {
    let headers =
        if body.is_some() { vec![("content-type".to_string(), "application/json".to_string())] } else { Vec::new() };
    let r = http::send(&Request {
        endpoint: "api".into(),
        target: None,
        method: method.into(),
        path: path.into(),
        headers,
        body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
        timeout_ms: TIMEOUT_MS,
    })?;
    let wait = retry_after(&r.headers);
    Ok((Answer { status: r.status, body: r.body }, wait))
}

/// How long an answer's `Retry-After` (in seconds) asks to wait, at most 5 s.
pub fn retry_after(headers: &[(String, String)]) -> Option<Duration> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
        .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        .map(|s| Duration::from_secs(s.min(5)))
}

/// Whether an answer says to try again: throttled, or the server's own failure.
fn again(status: u16) -> bool {
    status == 429 || (500..=504).contains(&status)
}

/// Sends until an answer is not 429 or a 5xx, or [`TRIES`] are spent.
fn send(method: &str, path: &str, body: Option<&Value>) -> Result<Answer, String> {
    let mut wait = Duration::from_millis(200);
    for attempt in 1..=TRIES {
        let (a, retry_after) = send_once(method, path, body)?;
        if !again(a.status) || attempt == TRIES {
            return Ok(a);
        }
        std::thread::sleep(retry_after.unwrap_or(wait));
        wait = (wait * 2).min(Duration::from_secs(2));
    }
    unreachable!("the last try returns")
}

fn json(what: &str, body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body).map_err(|_| format!("the Kubernetes API's answer to {what} is not JSON"))
}

/// Reads one object; None when it is not there (404).
pub fn get(what: &str, path: &str) -> Result<Option<Value>, String> {
    let a = send("GET", path, None)?;
    match a.status {
        200 => json(what, &a.body).map(Some),
        404 => Ok(None),
        s => Err(refusal(what, s, &a.body)),
    }
}

/// Reads one object that must be there.
pub fn must_get(what: &str, path: &str) -> Result<Value, String> {
    get(what, path)?.ok_or_else(|| format!("{what} is not there ({path})"))
}

/// A list's items.
pub fn list(what: &str, path: &str) -> Result<Vec<Value>, String> {
    let v = must_get(what, path)?;
    Ok(v.get("items").and_then(Value::as_array).cloned().unwrap_or_default())
}

/// A claim's collection in `ns`.
pub fn claims(ns: &str) -> String {
    format!("{EXTENSIONS}/namespaces/{ns}/sandboxclaims")
}

/// Claims a sandbox of warm pool `pool` as `name`, stamped with `instance` and
/// the run's `nonce`; returns the claim as stored. A name another holds is
/// refused `AlreadyExists`: the caller picks another.
pub fn create_claim(ns: &str, name: &str, pool: &str, instance: &str, nonce: &str) -> Result<Created, String> {
    let body = json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": name, "labels": {INSTANCE: instance, RUN: nonce}},
        "spec": {"warmPoolRef": {"name": pool}},
    });
    let path = claims(ns);
    let mut lost = false;
    let mut wait = Duration::from_millis(200);
    for attempt in 1..=TRIES {
        let (a, retry_after) = send_once("POST", &path, Some(&body))?;
        match a.status {
            200..=202 => return json("the claim's create", &a.body).map(Created::Made),
            409 if reason(&a.body) == "AlreadyExists" => {
                // A create whose answer was lost may have landed: ours if it has our nonce.
                if lost
                    && let Some(v) = get("the claim", &format!("{path}/{name}"))?
                    && v.pointer(&format!("/metadata/labels/{}", RUN.replace('/', "~1"))).and_then(Value::as_str)
                        == Some(nonce)
                {
                    return Ok(Created::Made(v));
                }
                return Ok(Created::Taken);
            }
            s if again(s) && attempt < TRIES => {
                lost |= s >= 500;
                std::thread::sleep(retry_after.unwrap_or(wait));
                wait = (wait * 2).min(Duration::from_secs(2));
            }
            s => return Err(refusal("the claim's create", s, &a.body)),
        }
    }
    unreachable!("the last try returns")
}

/// What a claim's create came to.
pub enum Created {
    /// The claim, as stored.
    Made(Value),
    /// The name is another's.
    Taken,
}

/// Where a claim stands.
#[derive(Debug, PartialEq, Eq)]
pub enum Standing {
    /// Ready, bound to this Sandbox.
    Ready(String),
    /// Not yet: the Ready condition's reason and message.
    Waiting(String),
    /// Never will be: the reason and message.
    Failed(String),
}

/// Reasons a claim's Ready condition turns False for good: the claim
/// controller's own, and the Sandbox's it forwards (agent-sandbox 2fd412d5:
/// a pod that ended, several pods, an error reconciling).
const TERMINAL: &[&str] = &[
    "PodFailed",
    "PodSucceeded",
    "MultiplePods",
    "ReconcilerError",
    "InvalidMetadata",
    "EnvVarsInjectionRejected",
    "VolumeClaimTemplatesError",
    "ClaimExpired",
    "SandboxExpired",
    "TemplateNotFound",
    "WarmPoolNotFound",
];

/// Reads a claim's standing from its status.
pub fn standing(claim: &Value) -> Standing {
    let ready = claim
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(Value::as_str) == Some("Ready")));
    let field = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let sandbox = claim.pointer("/status/sandbox/name").and_then(Value::as_str).unwrap_or_default();
    match ready {
        Some(c) if field(c, "status") == "True" && !sandbox.is_empty() => Standing::Ready(sandbox.to_string()),
        Some(c) => {
            let why = format!("{}: {}", field(c, "reason"), field(c, "message"));
            if TERMINAL.contains(&field(c, "reason").as_str()) { Standing::Failed(why) } else { Standing::Waiting(why) }
        }
        None => Standing::Waiting("no Ready condition yet".into()),
    }
}

fn resource_version(v: &Value) -> String {
    v.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default().to_string()
}

/// Waits until claim `name` (as created, `claim`) is Ready or fails, or `until`
/// passes, watching it from the version it was read at. A watch the server
/// ends or expires (410) is taken up again from a fresh read.
pub fn await_ready(ns: &str, name: &str, claim: Value, until: Instant) -> Result<Standing, String> {
    let mut seen = claim;
    loop {
        let st = standing(&seen);
        if !matches!(st, Standing::Waiting(_)) || Instant::now() >= until {
            return Ok(st);
        }
        let left = until.saturating_duration_since(Instant::now());
        let path = format!(
            "{}?watch=true&fieldSelector=metadata.name%3D{name}&resourceVersion={}&timeoutSeconds={}",
            claims(ns),
            resource_version(&seen),
            left.as_secs().max(1)
        );
        match watch(&path, left, &mut seen)? {
            Watched::Changed | Watched::Ended => {}
            Watched::Expired => {
                seen = get("the claim", &format!("{}/{name}", claims(ns)))?
                    .ok_or_else(|| format!("claim {name} vanished while waiting to be ready"))?;
            }
            Watched::Deleted => return Err(format!("claim {name} was deleted while waiting to be ready")),
        }
    }
}

enum Watched {
    /// The claim changed to something that is no longer waiting.
    Changed,
    /// The stream ended (its timeout, or the server's); watch again.
    Ended,
    /// The version watched from is too old (410 Expired): read again.
    Expired,
    Deleted,
}

fn watch(path: &str, left: Duration, seen: &mut Value) -> Result<Watched, String> {
    let started = Instant::now();
    let stream = http::open(&Request {
        endpoint: "api".into(),
        target: None,
        method: "GET".into(),
        path: path.into(),
        headers: Vec::new(),
        body: Vec::new(),
        timeout_ms: u32::try_from((left + Duration::from_secs(5)).as_millis()).unwrap_or(u32::MAX),
    })?;
    let status = stream.status();
    if status == 410 {
        return Ok(Watched::Expired);
    }
    if again(status) {
        std::thread::sleep(Duration::from_millis(500));
        return Ok(Watched::Ended);
    }
    if status != 200 {
        let mut body = Vec::new();
        while let Ok(Some(piece)) = stream.read(1000) {
            body.extend(piece);
            if body.len() > 4096 {
                break;
            }
        }
        return Err(refusal("the claim's watch", status, &body));
    }
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let wait = left.saturating_sub(started.elapsed());
        if wait.is_zero() {
            return Ok(Watched::Ended);
        }
        let piece = match stream.read(u32::try_from(wait.as_millis()).unwrap_or(u32::MAX).min(1000)) {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(Watched::Ended),
            Err(e) => return Err(format!("the claim's watch broke off: {e}")),
        };
        buf.extend(piece);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Err("the claim's watch sent a line that is not JSON".into());
            };
            let object = event.get("object").cloned().unwrap_or(Value::Null);
            match event.get("type").and_then(Value::as_str) {
                Some("ADDED" | "MODIFIED") => {
                    *seen = object;
                    if !matches!(standing(seen), Standing::Waiting(_)) {
                        return Ok(Watched::Changed);
                    }
                }
                Some("DELETED") => return Ok(Watched::Deleted),
                Some("BOOKMARK") => {
                    if let Some(rv) = object.pointer("/metadata/resourceVersion") {
                        seen["metadata"]["resourceVersion"] = rv.clone();
                    }
                }
                Some("ERROR") if object.get("code").and_then(Value::as_u64) == Some(410) => {
                    return Ok(Watched::Expired);
                }
                Some("ERROR") => {
                    let code = object.get("code").and_then(Value::as_u64).unwrap_or(0) as u16;
                    return Err(refusal("the claim's watch", code, object.to_string().as_bytes()));
                }
                _ => return Err("the claim's watch sent an event of no known type".into()),
            }
        }
        if buf.len() > 1 << 20 {
            return Err("the claim's watch sent a line over 1 MiB".into());
        }
    }
}

/// Deletes claim `name` in the foreground (its Sandbox and pod go first) and
/// waits, until `until`, for it to be gone. Ok(false) when it is still there.
pub fn delete_claim(ns: &str, name: &str, until: Instant) -> Result<bool, String> {
    let path = format!("{}/{name}", claims(ns));
    let options = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"});
    let a = send("DELETE", &path, Some(&options))?;
    match a.status {
        200 | 202 => {}
        404 => return Ok(true),
        s => return Err(refusal("the claim's delete", s, &a.body)),
    }
    loop {
        let a = send("GET", &path, None)?;
        match a.status {
            404 => return Ok(true),
            200 if Instant::now() < until => std::thread::sleep(Duration::from_millis(200)),
            200 => return Ok(false),
            s => return Err(refusal("the deleted claim's read", s, &a.body)),
        }
    }
}

/// The names of the claims stamped with `instance`.
pub fn stamped(ns: &str, instance: &str) -> Result<Vec<String>, String> {
    let items = list("the claims", &format!("{}?labelSelector={}%3D{instance}", claims(ns), INSTANCE))?;
    Ok(items.iter().filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claims_standing_is_read_from_its_ready_condition() {
        let c = json!({"status": {"sandbox": {"name": "plimsoll-abcde"}, "conditions": [
            {"type": "Ready", "status": "True", "reason": "DependenciesReady", "message": ""}]}});
        assert_eq!(standing(&c), Standing::Ready("plimsoll-abcde".into()));
        let c = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "SandboxNotReady", "message": "pod pending"}]}});
        assert_eq!(standing(&c), Standing::Waiting("SandboxNotReady: pod pending".into()));
        let c = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "WarmPoolNotFound", "message": "no pool"}]}});
        assert_eq!(standing(&c), Standing::Failed("WarmPoolNotFound: no pool".into()));
        assert_eq!(standing(&json!({})), Standing::Waiting("no Ready condition yet".into()));
        // A pod still starting waits; one that ended, or several, fail at once.
        let ready_false = |reason: &str, message: &str| json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": message}]}});
        let pending = ready_false("DependenciesNotReady", "Pod exists with phase: Pending");
        assert_eq!(
            standing(&pending),
            Standing::Waiting("DependenciesNotReady: Pod exists with phase: Pending".into())
        );
        for (reason, message) in [
            ("PodFailed", "Pod failed"),
            ("PodSucceeded", "Pod completed successfully"),
            ("MultiplePods", "2 pods"),
            ("ReconcilerError", "Error seen: x"),
        ] {
            assert_eq!(standing(&ready_false(reason, message)), Standing::Failed(format!("{reason}: {message}")));
        }
        // Ready without a Sandbox named is not ready.
        let c = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(matches!(standing(&c), Standing::Waiting(_)));
    }

    #[test]
    fn refusals_quote_the_status_reason_and_message() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"sandboxclaims.extensions.agents.x-k8s.io \"x\" already exists","reason":"AlreadyExists","code":409}"#;
        assert_eq!(
            refusal("the claim's create", 409, body),
            "the Kubernetes API answered the claim's create with 409 AlreadyExists: sandboxclaims.extensions.agents.x-k8s.io \"x\" already exists"
        );
        assert_eq!(refusal("x", 502, b"bad gateway"), "the Kubernetes API answered x with 502: bad gateway");
        assert_eq!(reason(body), "AlreadyExists");
        assert!(again(429) && again(503) && !again(409) && !again(404));
    }
}
