//! Run-record digests, bit-identical to the original system's encoding.
//!
//! Every digest is lowercase hex SHA-256 over a length-prefixed encoding, never over
//! protobuf or JSON bytes: `value = u64 big-endian length || bytes`, `field =
//! value(name) || value(content)`, `digest = SHA-256(value(domain) || fields...)`.
//! Integers are decimal ASCII, booleans `true`/`false`, doubles IEEE-754 big-endian
//! (concatenated for a list), repeated groups preceded by a count field.
//!
//! The daemon only hashes; it holds no key. A harness outside it recomputes both
//! digests from its own copy of the exchange and signs.

use sha2::{Digest, Sha256};

use crate::wire::{RunRecord, RunRequest, RunResponse, SoftwareRule};

/// The record version this daemon stamps on answers (protocol 4).
pub const VERSION: u32 = 4;

/// The fields each record version's digest covers, in order. A version leaves this
/// table only by a dated, announced decision, since old records must still verify.
const FIELDS: [(u32, &[&str]); 4] = [
    (
        1,
        &[
            "request_sha256",
            "result_sha256",
            "provider",
            "isolation",
            "environment",
            "policy",
            "started_unix_ms",
            "ended_unix_ms",
            "session",
            "sequence",
            "previous_sha256",
        ],
    ),
    (
        2,
        &[
            "request_sha256",
            "result_sha256",
            "provider",
            "isolation",
            "environment",
            "policy",
            "software_identity",
            "software_rule_id",
            "started_unix_ms",
            "ended_unix_ms",
            "session",
            "sequence",
            "previous_sha256",
        ],
    ),
    (
        3,
        &[
            "request_sha256",
            "result_sha256",
            "unanswered",
            "provider",
            "isolation",
            "environment",
            "policy",
            "software_identity",
            "software_rule_id",
            "started_unix_ms",
            "ended_unix_ms",
            "session",
            "sequence",
            "previous_sha256",
        ],
    ),
    (
        4,
        &[
            "request_sha256",
            "result_sha256",
            "unanswered",
            "provider",
            "isolation",
            "environment",
            "policy",
            "software_identity",
            "software_rule_id",
            "instance",
            "started_unix_ms",
            "ended_unix_ms",
            "session",
            "sequence",
            "previous_sha256",
        ],
    ),
];

/// The length-prefixed encoder behind every digest.
#[derive(Debug)]
pub struct Encoder {
    hash: Sha256,
}

impl Encoder {
    /// Starts a digest in `domain`.
    pub fn new(domain: &str) -> Encoder {
        let mut e = Encoder { hash: Sha256::new() };
        e.value(domain.as_bytes());
        e
    }

    fn value(&mut self, b: &[u8]) {
        self.hash.update((b.len() as u64).to_be_bytes());
        self.hash.update(b);
    }

    /// A raw bytes field.
    pub fn bytes(&mut self, name: &str, v: &[u8]) {
        self.value(name.as_bytes());
        self.value(v);
    }

    /// A UTF-8 string field.
    pub fn str(&mut self, name: &str, v: &str) {
        self.bytes(name, v.as_bytes());
    }

    /// An integer field, in decimal.
    pub fn int(&mut self, name: &str, v: impl Into<i128>) {
        self.str(name, &v.into().to_string());
    }

    /// A boolean field.
    pub fn bool(&mut self, name: &str, v: bool) {
        self.str(name, if v { "true" } else { "false" });
    }

    /// A list of doubles, big-endian, concatenated (an empty list is an empty value).
    pub fn floats(&mut self, name: &str, vs: &[f64]) {
        let mut b = Vec::with_capacity(vs.len() * 8);
        for v in vs {
            b.extend_from_slice(&v.to_bits().to_be_bytes());
        }
        self.bytes(name, &b);
    }

    /// A count field before a repeated group.
    pub fn count(&mut self, name: &str, n: usize) {
        self.int(name, n as i128);
    }

    /// The lowercase hex digest.
    pub fn finish(self) -> String {
        hex::encode(self.hash.finalize())
    }
}

/// The request digest of a `RunRequest` (or a session call as
/// [`crate::wire::SessionRunRequest::as_run_request`] gives it). The trace ID and the
/// session ID are never part of it, so a retry has the same digest.
pub fn request_digest(req: &RunRequest) -> String {
    let first = req.protocol < 2;
    let mut e = Encoder::new(if first { "plimsoll.run-request.v1" } else { "plimsoll.run-request.v2" });
    e.int("protocol", req.protocol);
    e.str("minimum_isolation", &req.minimum_isolation);
    e.int("timeout_ms", req.timeout_ms);
    if !first {
        let empty = SoftwareRule::default();
        let rule = req.software_rule.as_ref().unwrap_or(&empty);
        e.str("software_mode", &rule.mode);
        e.count("software_identities", rule.identities.len());
        for id in &rule.identities {
            e.str("software_identity", id);
        }
    }
    // The same precedence as the published clients when a malformed request sets
    // several payloads: such a request is refused anyway, but its digest is defined.
    if let Some(js) = &req.javascript {
        e.str("kind", "javascript");
        e.str("code", &js.code);
        e.str("grant_profile", &js.grant_profile);
    } else if let Some(cell) = &req.cell {
        e.str("kind", "cell");
        e.str("language", &cell.language);
        e.str("code", &cell.code);
        e.count("files", cell.files.len());
        for f in &cell.files {
            e.str("file_path", &f.path);
            e.str("file_content", &f.content);
        }
    } else if let Some(p) = &req.project {
        e.str("kind", "project");
        e.str("grant_profile", &p.grant_profile);
        e.count("files", p.files.len());
        for f in &p.files {
            e.str("file_path", &f.path);
            e.str("file_content", &f.content);
        }
        e.count("steps", p.steps.len());
        for s in &p.steps {
            e.str("step_command", s);
        }
        e.count("artifacts", p.artifacts.len());
        for a in &p.artifacts {
            e.str("artifact_path", a);
        }
    } else if let Some(m) = &req.module {
        e.str("kind", "module");
        e.str("model", &m.model);
        e.floats("end_time", &[m.end_time]);
        e.floats("step", &[m.step]);
        e.count("rows", m.rows.len());
        for r in &m.rows {
            e.floats("row_values", &r.values);
        }
    } else {
        e.str("kind", "");
    }
    e.finish()
}

/// The result digest of a `RunResponse`: the result only, never durations, advice or
/// the evidence fields.
pub fn result_digest(resp: &RunResponse) -> String {
    let mut e = Encoder::new("plimsoll.run-result.v1");
    if let Some(c) = &resp.cell {
        e.str("kind", "cell");
        e.int("exit_code", c.exit_code);
        e.bool("timed_out", c.timed_out);
        e.bytes("stdout", &c.stdout);
        e.bytes("stderr", &c.stderr);
        e.bool("stdout_truncated", c.stdout_truncated);
        e.bool("stderr_truncated", c.stderr_truncated);
        e.bool("interpreter_started", c.interpreter_started);
        e.bool("interpreter_ended", c.interpreter_ended);
    } else if let Some(j) = &resp.javascript {
        e.str("kind", "javascript");
        e.int("exit_code", j.exit_code);
        e.bool("timed_out", j.timed_out);
        e.bytes("stdout", &j.stdout);
        e.bytes("stderr", &j.stderr);
        e.bool("stdout_truncated", j.stdout_truncated);
        e.bool("stderr_truncated", j.stderr_truncated);
    } else if let Some(p) = &resp.project {
        e.str("kind", "project");
        e.int("outcome", p.outcome.number());
        e.str("outcome_detail", &p.outcome_detail);
        e.bool("artifacts_truncated", p.artifacts_truncated);
        e.count("steps", p.steps.len());
        for s in &p.steps {
            e.str("step_command", &s.command);
            e.int("step_exit_code", s.exit_code);
            e.bool("step_timed_out", s.timed_out);
            e.bytes("step_stdout", &s.stdout);
            e.bytes("step_stderr", &s.stderr);
            e.bool("step_stdout_truncated", s.stdout_truncated);
            e.bool("step_stderr_truncated", s.stderr_truncated);
        }
        e.count("artifacts", p.artifacts.len());
        for a in &p.artifacts {
            e.str("artifact_path", &a.path);
            e.bytes("artifact_content", &a.content);
        }
    } else if let Some(m) = &resp.module {
        e.str("kind", "module");
        e.int("outcome", m.outcome.number());
        e.str("outcome_detail", &m.outcome_detail);
        e.int("width", m.width);
        e.bytes("stdout", &m.stdout);
        e.bytes("stderr", &m.stderr);
        e.count("runs", m.runs.len());
        for r in &m.runs {
            e.int("run_status", r.status);
            e.floats("run_outputs", &r.outputs);
        }
    } else {
        e.str("kind", "");
    }
    e.finish()
}

/// Why a record's own digest cannot be computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("run record version {0} is not one this build knows (1 to {VERSION})")]
pub struct UnknownVersion(pub u32);

/// A record's own digest over the fields its version covers.
///
/// # Errors
///
/// [`UnknownVersion`] for a version outside 1 to [`VERSION`]: a verifier refuses it.
pub fn record_digest(r: &RunRecord) -> Result<String, UnknownVersion> {
    let fields = FIELDS.iter().find(|(v, _)| *v == r.version).map(|(_, f)| *f).ok_or(UnknownVersion(r.version))?;
    let mut e = Encoder::new(&format!("plimsoll.run-record.v{}", r.version));
    for name in fields {
        match *name {
            "request_sha256" => e.str(name, &r.request_sha256),
            "result_sha256" => e.str(name, &r.result_sha256),
            "unanswered" => e.str(name, &r.unanswered),
            "provider" => e.str(name, &r.provider),
            "isolation" => e.str(name, &r.isolation),
            "environment" => e.str(name, &r.environment),
            "policy" => e.str(name, &r.policy),
            "software_identity" => e.str(name, &r.software_identity),
            "software_rule_id" => e.str(name, &r.software_rule_id),
            "instance" => e.str(name, &r.instance),
            "started_unix_ms" => e.int(name, r.started_unix_ms),
            "ended_unix_ms" => e.int(name, r.ended_unix_ms),
            "session" => e.str(name, &r.session),
            "sequence" => e.int(name, r.sequence),
            "previous_sha256" => e.str(name, &r.previous_sha256),
            other => unreachable!("record field {other} has no encoding"),
        }
    }
    Ok(e.finish())
}

/// The SHA-256 of a session ID, which records carry instead of the ID.
pub fn session_fingerprint(session_id: &str) -> String {
    hex::encode(Sha256::digest(session_id.as_bytes()))
}

/// A software rule's ID: `exact:<identity>`, or `approved:sha256:<hex>` over the
/// unique identities sorted bytewise and joined with one zero byte. Empty for no rule.
pub fn rule_id(rule: Option<&SoftwareRule>) -> String {
    let Some(rule) = rule else {
        return String::new();
    };
    match rule.mode.as_str() {
        "exact" => format!("exact:{}", rule.identities.first().map(String::as_str).unwrap_or("")),
        "approved" => {
            let mut ids: Vec<&str> = rule.identities.iter().map(String::as_str).collect();
            ids.sort_unstable();
            ids.dedup();
            format!("approved:sha256:{}", hex::encode(Sha256::digest(ids.join("\0").as_bytes())))
        }
        _ => String::new(),
    }
}

/// Stamps `record` with its own digest.
///
/// # Errors
///
/// [`UnknownVersion`] when the record's version is not known.
pub fn seal(mut record: RunRecord) -> Result<RunRecord, UnknownVersion> {
    record.record_sha256 = record_digest(&record)?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::from_json;

    /// The golden vectors: the original system's, plus digests the published Python
    /// client computed for the inputs the original withheld.
    const VECTORS: &str = include_str!("../testdata/records.json");

    #[test]
    fn every_golden_vector_matches() {
        let doc: serde_json::Value = serde_json::from_str(VECTORS).expect("vectors parse");
        let vectors = doc["vectors"].as_array().expect("a vector list");
        assert!(vectors.len() >= 20, "the vector file lost entries");
        for v in vectors {
            let name = v["name"].as_str().expect("name");
            let want = v["sha256"].as_str().expect("digest");
            let input = serde_json::to_vec(&v["input"]).expect("input");
            let got = match v["kind"].as_str().expect("kind") {
                "request" => {
                    // Session calls carry a session ID the digest leaves out.
                    if v["input"].get("sessionId").is_some() {
                        let call: crate::wire::SessionRunRequest = from_json(&input).expect(name);
                        request_digest(&call.as_run_request())
                    } else {
                        request_digest(&from_json(&input).expect(name))
                    }
                }
                "result" => result_digest(&from_json(&input).expect(name)),
                "record" => record_digest(&from_json(&input).expect(name)).expect(name),
                "session" => session_fingerprint(v["input"]["sessionId"].as_str().expect(name)),
                other => panic!("unknown vector kind {other}"),
            };
            assert_eq!(got, want, "vector {name:?}");
        }
    }

    #[test]
    fn rule_ids_follow_the_published_rule() {
        let exact = SoftwareRule { mode: "exact".into(), identities: vec!["a:b".into()] };
        assert_eq!(rule_id(Some(&exact)), "exact:a:b");
        let one = SoftwareRule { mode: "approved".into(), identities: vec!["b".into(), "a".into()] };
        let two = SoftwareRule { mode: "approved".into(), identities: vec!["a".into(), "b".into(), "a".into()] };
        assert_eq!(rule_id(Some(&one)), rule_id(Some(&two)));
        assert_eq!(rule_id(Some(&one)), format!("approved:sha256:{}", hex::encode(Sha256::digest(b"a\0b"))));
        assert_eq!(rule_id(None), "");
    }

    #[test]
    fn unknown_versions_have_no_digest() {
        let r = RunRecord { version: 5, ..Default::default() };
        assert_eq!(record_digest(&r), Err(UnknownVersion(5)));
        let r = RunRecord { version: 0, ..Default::default() };
        assert_eq!(record_digest(&r), Err(UnknownVersion(0)));
    }

    #[test]
    fn every_version_covers_a_different_field_set() {
        let base = RunRecord {
            request_sha256: "a".into(),
            result_sha256: "b".into(),
            provider: "wasm".into(),
            isolation: "process".into(),
            ..Default::default()
        };
        let digests: Vec<String> =
            (1..=4).map(|v| record_digest(&RunRecord { version: v, ..base.clone() }).expect("known version")).collect();
        for (i, a) in digests.iter().enumerate() {
            for b in &digests[i + 1..] {
                assert_ne!(a, b);
            }
        }
        // The instance field counts from version 4 on, not before.
        let with_instance = RunRecord { instance: "k8s-pod-uid:x".into(), ..base.clone() };
        assert_eq!(
            record_digest(&RunRecord { version: 3, ..with_instance.clone() }),
            record_digest(&RunRecord { version: 3, ..base.clone() })
        );
        assert_ne!(
            record_digest(&RunRecord { version: 4, ..with_instance }),
            record_digest(&RunRecord { version: 4, ..base })
        );
    }
}
