//! A verified bundle's signed runs as a CycloneDX 1.6 bill of materials, and the
//! check that a BOM is exactly what its bundle says.
//!
//! Each run (a single run or a session's call) is one `formulation` entry: the
//! environment it ran in as a component (by its SHA-256 when the identity names
//! one), its request and result as `data` components by digest, and one workflow
//! whose `uid` is the record's digest, with the provider, tier, software identity,
//! policy and session place as properties, the request as input, the result as an
//! `artifact` output and the line's signed statement (its DSSE envelope) attached
//! as an `attestation` output. Nothing in it comes from anywhere but the bundle:
//! the serial number is derived from the bundle's SHA-256 and the timestamp is the
//! last run's end, so the same bundle always gives the same bytes, and `--check`
//! rebuilds and compares.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use plimsoll_core::wire::RunRecord;
use plimsoll_keys::VerifyingKey;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::AttestError;
use crate::bundle::{self, SignedRun};

/// The CycloneDX version written.
pub const SPEC_VERSION: &str = "1.6";
/// The media type of an attached statement.
pub const ENVELOPE_MEDIA_TYPE: &str = "application/vnd.dsse.envelope.v1+json";

/// The bill of materials of a bundle that verifies whole under `key`.
///
/// # Errors
///
/// The bundle does not verify (nothing is built from it), or a run's envelope
/// cannot be encoded.
pub fn build(bundle_bytes: &[u8], key: &VerifyingKey) -> Result<Value, AttestError> {
    let (report, runs) = bundle::signed_runs(bundle_bytes, key)?;
    let bundle_sha256 = hex::encode(Sha256::digest(bundle_bytes));
    let mut formulation = Vec::with_capacity(runs.len());
    for run in &runs {
        formulation.push(formula(run)?);
    }
    let last_end = runs.iter().map(|r| r.record.ended_unix_ms).max().unwrap_or(0);
    Ok(json!({
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": serial_number(&bundle_sha256),
        "version": 1,
        "metadata": {
            "timestamp": rfc3339(last_end),
            "tools": {"components": [{"type": "application", "name": "plimsoll-host attest bom"}]},
            "component": {
                "type": "data",
                "bom-ref": "bundle",
                "name": "plimsoll attest bundle",
                "hashes": [sha256(&bundle_sha256)],
            },
            "properties": [
                property("plimsoll:signing_key_id", &report.key_id),
                property("plimsoll:runs", &runs.len().to_string()),
                property("plimsoll:single_runs", &report.runs.to_string()),
                property("plimsoll:sessions", &report.sessions.len().to_string()),
            ],
        },
        "formulation": formulation,
    }))
}

/// Checks that `bom_bytes` is exactly the BOM `bundle_bytes` gives; the number of
/// runs it states.
///
/// # Errors
///
/// The bundle does not verify, the BOM is not JSON, or the first place where the
/// BOM differs from the rebuilt one ([`AttestError::Bom`]).
pub fn check(bundle_bytes: &[u8], bom_bytes: &[u8], key: &VerifyingKey) -> Result<usize, AttestError> {
    let want = build(bundle_bytes, key)?;
    let got: Value =
        serde_json::from_slice(bom_bytes).map_err(|e| AttestError::Bom(format!("the BOM is not JSON: {e}")))?;
    if let Some(place) = first_difference(&want, &got, String::new()) {
        return Err(AttestError::Bom(format!(
            "the BOM differs from what its bundle gives at {place} (rebuild it with `attest bom`)"
        )));
    }
    Ok(want["formulation"].as_array().map_or(0, Vec::len))
}

/// The JSON pointer of the first place `got` differs from `want`.
fn first_difference(want: &Value, got: &Value, at: String) -> Option<String> {
    let here = || Some(if at.is_empty() { "/".to_string() } else { at.clone() });
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            if let Some(extra) = g.keys().find(|k| !w.contains_key(*k)) {
                return Some(format!("{at}/{extra} (not in the bundle's BOM)"));
            }
            w.iter().find_map(|(k, wv)| match g.get(k) {
                None => Some(format!("{at}/{k} (missing)")),
                Some(gv) => first_difference(wv, gv, format!("{at}/{k}")),
            })
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            w.iter().zip(g).enumerate().find_map(|(i, (wv, gv))| first_difference(wv, gv, format!("{at}/{i}")))
        }
        (Value::Array(_), Value::Array(_)) => here().map(|p| format!("{p} (another number of entries)")),
        _ if want == got => None,
        _ => here(),
    }
}

fn formula(run: &SignedRun) -> Result<Value, AttestError> {
    let r = &run.record;
    let id = |part: &str| format!("run-{}-{part}", run.line);
    let envelope =
        serde_json::to_vec(&run.envelope).map_err(|e| AttestError::Bom(format!("encoding line {}: {e}", run.line)))?;
    let mut environment = json!({
        "type": if r.provider == "wasm" { "application" } else { "container" },
        "bom-ref": id("environment"),
        "name": r.environment,
    });
    if let Some(digest) = sha256_in(&r.environment) {
        environment["hashes"] = json!([sha256(digest)]);
    }
    if !r.software_identity.is_empty() {
        environment["properties"] = json!([property("plimsoll:software_identity", &r.software_identity)]);
    }
    let mut components = vec![environment, data(&id("request"), "request", &r.request_sha256)];
    let mut outputs = Vec::new();
    if r.unanswered.is_empty() {
        components.push(data(&id("result"), "result", &r.result_sha256));
        outputs.push(json!({"type": "artifact", "resource": {"ref": id("result")}}));
    }
    outputs.push(json!({
        "type": "attestation",
        "data": {"contentType": ENVELOPE_MEDIA_TYPE, "encoding": "base64", "content": STANDARD.encode(envelope)},
    }));
    Ok(json!({
        "bom-ref": id("formula"),
        "components": components,
        "workflows": [{
            "bom-ref": id("workflow"),
            "uid": r.record_sha256,
            "name": format!("{} run at the {} tier", r.provider, r.isolation),
            "taskTypes": ["other"],
            "timeStart": rfc3339(r.started_unix_ms),
            "timeEnd": rfc3339(r.ended_unix_ms),
            "inputs": [{"resource": {"ref": id("request")}}],
            "outputs": outputs,
            "properties": run_properties(run.line, r),
        }],
    }))
}

fn run_properties(line: usize, r: &RunRecord) -> Vec<Value> {
    let mut out = vec![
        property("plimsoll:bundle_line", &line.to_string()),
        property("plimsoll:record_version", &r.version.to_string()),
        property("plimsoll:record_sha256", &r.record_sha256),
        property("plimsoll:provider", &r.provider),
        property("plimsoll:isolation", &r.isolation),
        property("plimsoll:environment", &r.environment),
        property("plimsoll:policy", &r.policy),
    ];
    let optional = [
        ("plimsoll:software_identity", &r.software_identity),
        ("plimsoll:software_rule_id", &r.software_rule_id),
        ("plimsoll:instance", &r.instance),
        ("plimsoll:session", &r.session),
        ("plimsoll:previous_sha256", &r.previous_sha256),
        ("plimsoll:unanswered", &r.unanswered),
    ];
    out.extend(optional.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| property(k, v)));
    if r.sequence > 0 {
        out.push(property("plimsoll:sequence", &r.sequence.to_string()));
    }
    out
}

fn data(bom_ref: &str, name: &str, digest: &str) -> Value {
    json!({"type": "data", "bom-ref": bom_ref, "name": name, "hashes": [sha256(digest)]})
}

fn sha256(hex: &str) -> Value {
    json!({"alg": "SHA-256", "content": hex})
}

fn property(name: &str, value: &str) -> Value {
    json!({"name": name, "value": value})
}

/// The 64 hex digits after the last `sha256:` in an identity, if any.
fn sha256_in(identity: &str) -> Option<&str> {
    let (_, tail) = identity.rsplit_once("sha256:")?;
    let digest = tail.get(..64)?;
    digest.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()).then_some(digest)
}

/// A UUID (version 8, RFC 9562) from the bundle's SHA-256: the same bundle always
/// gets the same serial number, another bundle another.
fn serial_number(bundle_sha256: &str) -> String {
    let mut b: Vec<u8> = hex::decode(bundle_sha256).unwrap_or_default();
    b.resize(16, 0);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(&b[..16]);
    format!("urn:uuid:{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Unix milliseconds as RFC 3339 UTC (`2026-12-05T12:00:00.123Z`).
fn rfc3339(unix_ms: i64) -> String {
    let (secs, ms) = (unix_ms.div_euclid(1000), unix_ms.rem_euclid(1000));
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = plimsoll_core::date::civil(days);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests;
