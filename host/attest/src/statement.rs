//! in-toto Statement v1 over plimsoll's three predicates (run records, session
//! closes, bundle links), and statements of a caller's own predicate type.

use std::collections::BTreeMap;

use plimsoll_core::record;
use plimsoll_core::wire::{CloseSessionResponse, RunRecord};
use plimsoll_keys::VerifyingKey;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::AttestError;
use crate::dsse::Envelope;
use crate::signer::Signer;

/// The statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// A checked run record.
pub const RECORD_PREDICATE: &str = "https://plimsollmark.github.io/plimsoll/run-record/v1";
/// The end of a session's chain.
pub const CLOSE_PREDICATE: &str = "https://plimsollmark.github.io/plimsoll/session-close/v1";
/// One bundle line's place.
pub const LINK_PREDICATE: &str = "https://plimsollmark.github.io/plimsoll/bundle-link/v1";
/// The predicate types only the harness's own checks may sign.
pub const RESERVED: [&str; 3] = [RECORD_PREDICATE, CLOSE_PREDICATE, LINK_PREDICATE];

/// What a statement is about: a name and its SHA-256.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Subject {
    /// The subject's name.
    pub name: String,
    /// `{"sha256": hex}`.
    pub digest: BTreeMap<String, String>,
}

impl Subject {
    /// A subject named `name` with SHA-256 `hex`.
    pub fn sha256(name: &str, hex: &str) -> Subject {
        Subject { name: name.into(), digest: [("sha256".to_string(), hex.to_string())].into() }
    }
}

/// An in-toto Statement v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement<P> {
    /// [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// What it is about.
    pub subject: Vec<Subject>,
    /// The predicate's type.
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// What it says.
    pub predicate: P,
}

fn is_empty(s: &str) -> bool {
    s.is_empty()
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A run record as a predicate (JSON key order fixed here; the digest's own field
/// order is the record encoding's).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordPredicate {
    /// The record's version.
    pub version: u32,
    /// Digest of the request.
    pub request_sha256: String,
    /// Digest of the result (empty when unanswered).
    pub result_sha256: String,
    /// The provider.
    pub provider: String,
    /// The tier the run stood behind.
    pub isolation: String,
    /// The artifact it ran in.
    pub environment: String,
    /// The selected software, when established.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub software_identity: String,
    /// The rule it was checked against.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub software_rule_id: String,
    /// The sandbox instance.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub instance: String,
    /// The policy in force.
    pub policy: String,
    /// Start, Unix milliseconds.
    pub started_unix_ms: i64,
    /// End, Unix milliseconds.
    pub ended_unix_ms: i64,
    /// The session's fingerprint, for a session call.
    pub session: String,
    /// Its place in the session.
    pub sequence: u64,
    /// The previous call's record digest.
    pub previous_sha256: String,
    /// Why a call that may have run has no answer.
    #[serde(default, skip_serializing_if = "is_empty")]
    pub unanswered: String,
    /// The record's own digest.
    pub record_sha256: String,
}

impl RecordPredicate {
    fn from_record(r: &RunRecord) -> RecordPredicate {
        RecordPredicate {
            version: r.version,
            request_sha256: r.request_sha256.clone(),
            result_sha256: r.result_sha256.clone(),
            provider: r.provider.clone(),
            isolation: r.isolation.clone(),
            environment: r.environment.clone(),
            software_identity: r.software_identity.clone(),
            software_rule_id: r.software_rule_id.clone(),
            instance: r.instance.clone(),
            policy: r.policy.clone(),
            started_unix_ms: r.started_unix_ms,
            ended_unix_ms: r.ended_unix_ms,
            session: r.session.clone(),
            sequence: r.sequence,
            previous_sha256: r.previous_sha256.clone(),
            unanswered: r.unanswered.clone(),
            record_sha256: r.record_sha256.clone(),
        }
    }

    /// The record this predicate states.
    pub fn record(&self) -> RunRecord {
        RunRecord {
            version: self.version,
            request_sha256: self.request_sha256.clone(),
            result_sha256: self.result_sha256.clone(),
            provider: self.provider.clone(),
            isolation: self.isolation.clone(),
            environment: self.environment.clone(),
            software_identity: self.software_identity.clone(),
            software_rule_id: self.software_rule_id.clone(),
            instance: self.instance.clone(),
            policy: self.policy.clone(),
            started_unix_ms: self.started_unix_ms,
            ended_unix_ms: self.ended_unix_ms,
            session: self.session.clone(),
            sequence: self.sequence,
            previous_sha256: self.previous_sha256.clone(),
            unanswered: self.unanswered.clone(),
            record_sha256: self.record_sha256.clone(),
        }
    }
}

/// The end of a session's chain: how many calls, and the last record's digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClosePredicate {
    /// The session's fingerprint.
    pub session: String,
    /// Its calls.
    pub calls: u64,
    /// The last call's record digest (empty with no calls).
    pub last_record_sha256: String,
}

impl ClosePredicate {
    /// The end a client's checked `CloseSession` answer states (the client compared
    /// its session fingerprint, calls and last digest with the chain it followed).
    pub fn closed(done: &CloseSessionResponse) -> ClosePredicate {
        ClosePredicate {
            session: done.session.clone(),
            calls: done.calls,
            last_record_sha256: done.last_record_sha256.clone(),
        }
    }
}

/// One bundle line's place: its index, the previous line's digest, and this line's
/// content digest; a checkpoint states how many lines precede it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkPredicate {
    /// 1-based line number.
    pub index: u64,
    /// The previous line's digest (empty on line 1).
    pub previous_sha256: String,
    /// This line's content digest (absent on a checkpoint).
    #[serde(default, skip_serializing_if = "is_empty")]
    pub entry_sha256: String,
    /// This line is a checkpoint.
    #[serde(default, skip_serializing_if = "is_false")]
    pub checkpoint: bool,
    /// Lines before a checkpoint.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lines: u64,
}

fn seal<P: Serialize>(signer: &dyn Signer, statement: &Statement<P>) -> Result<Envelope, AttestError> {
    let payload = serde_json::to_vec(statement).map_err(|e| AttestError::Statement(format!("encoding: {e}")))?;
    Envelope::seal(signer, &payload)
}

/// Opens an envelope and decodes its statement strictly, checking its types and
/// that it has exactly one subject named `name` with exactly one digest.
fn open<P: DeserializeOwned>(
    env: &Envelope,
    key: &VerifyingKey,
    strict: bool,
    predicate_type: &str,
    name: &str,
) -> Result<(Statement<P>, String), AttestError> {
    let payload = env.open(key, strict)?;
    let st: Statement<P> = serde_json::from_slice(&payload)
        .map_err(|e| AttestError::Statement(format!("not a {predicate_type} statement: {e}")))?;
    if st.statement_type != STATEMENT_TYPE {
        return Err(AttestError::Statement(format!("statement type {:?}", st.statement_type)));
    }
    if st.predicate_type != predicate_type {
        return Err(AttestError::Statement(format!(
            "predicate type {:?}, expected {predicate_type}",
            st.predicate_type
        )));
    }
    let digest = match st.subject.as_slice() {
        [s] if s.name == name && s.digest.len() == 1 => s.digest.get("sha256").cloned(),
        _ => None,
    };
    let digest = digest.ok_or_else(|| {
        AttestError::Statement(format!("the statement must have one subject {name:?} with one sha256"))
    })?;
    Ok((st, digest))
}

/// The predicate type an envelope states, read without verifying it (to pick the
/// right check).
pub fn peek_predicate_type(env: &Envelope) -> Option<String> {
    use base64::Engine as _;
    let payload = base64::engine::general_purpose::STANDARD.decode(&env.payload).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&payload).ok()?;
    v.get("predicateType")?.as_str().map(str::to_string)
}

/// Signs a checked run record. Only a current-version record whose own digest
/// recomputes is signed; the exchange it came from must have been checked first.
///
/// # Errors
///
/// [`AttestError::SigningVersion`] for another version; [`AttestError::Unchecked`]
/// when its digest does not recompute.
pub fn sign_record(signer: &dyn Signer, rec: &RunRecord) -> Result<Envelope, AttestError> {
    if rec.version != record::VERSION {
        return Err(AttestError::SigningVersion(rec.version));
    }
    let recomputed = record::record_digest(rec).map_err(|e| AttestError::Unchecked(e.to_string()))?;
    if recomputed != rec.record_sha256 {
        return Err(AttestError::Unchecked(format!(
            "the record's digest {} does not recompute ({recomputed})",
            rec.record_sha256
        )));
    }
    let statement = Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject: vec![Subject::sha256("run-record", &rec.record_sha256)],
        predicate_type: RECORD_PREDICATE.into(),
        predicate: RecordPredicate::from_record(rec),
    };
    seal(signer, &statement)
}

/// Verifies a run-record envelope and returns the record it states.
///
/// # Errors
///
/// [`AttestError::Signature`] or [`AttestError::Statement`], naming what failed.
pub fn verify_record(env: &Envelope, key: &VerifyingKey) -> Result<RunRecord, AttestError> {
    let (st, digest) = open::<RecordPredicate>(env, key, false, RECORD_PREDICATE, "run-record")?;
    let rec = st.predicate.record();
    if rec.version != record::VERSION {
        return Err(AttestError::Statement(format!("record version {}, expected {}", rec.version, record::VERSION)));
    }
    let recomputed = record::record_digest(&rec).map_err(|e| AttestError::Statement(e.to_string()))?;
    if digest != rec.record_sha256 || recomputed != rec.record_sha256 {
        return Err(AttestError::Statement(format!(
            "the subject {digest}, the record's digest {} and the recomputed {recomputed} differ",
            rec.record_sha256
        )));
    }
    Ok(rec)
}

/// Signs a session's close.
///
/// # Errors
///
/// The signer failed.
pub fn sign_close(signer: &dyn Signer, close: &ClosePredicate) -> Result<Envelope, AttestError> {
    let statement = Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject: vec![Subject::sha256("session", &close.session)],
        predicate_type: CLOSE_PREDICATE.into(),
        predicate: close.clone(),
    };
    seal(signer, &statement)
}

/// Verifies a close envelope.
///
/// # Errors
///
/// [`AttestError::Signature`] or [`AttestError::Statement`].
pub fn verify_close(env: &Envelope, key: &VerifyingKey) -> Result<ClosePredicate, AttestError> {
    let (st, digest) = open::<ClosePredicate>(env, key, false, CLOSE_PREDICATE, "session")?;
    if digest != st.predicate.session {
        return Err(AttestError::Statement("the close's subject is not its session".into()));
    }
    Ok(st.predicate)
}

/// Signs a bundle link.
///
/// # Errors
///
/// The signer failed.
pub fn sign_link(signer: &dyn Signer, link: &LinkPredicate) -> Result<Envelope, AttestError> {
    let subject = if link.checkpoint { &link.previous_sha256 } else { &link.entry_sha256 };
    let statement = Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject: vec![Subject::sha256("bundle-line", subject)],
        predicate_type: LINK_PREDICATE.into(),
        predicate: link.clone(),
    };
    seal(signer, &statement)
}

/// Verifies a link envelope: exactly one signature, by this key.
///
/// # Errors
///
/// [`AttestError::Signature`] or [`AttestError::Statement`].
pub fn verify_link(env: &Envelope, key: &VerifyingKey) -> Result<LinkPredicate, AttestError> {
    let (st, digest) = open::<LinkPredicate>(env, key, true, LINK_PREDICATE, "bundle-line")?;
    let expected = if st.predicate.checkpoint { &st.predicate.previous_sha256 } else { &st.predicate.entry_sha256 };
    if &digest != expected {
        return Err(AttestError::Statement("the link's subject is not the line it names".into()));
    }
    Ok(st.predicate)
}

/// Signs a statement of the caller's own predicate type about `subjects`. The
/// harness's own types are refused, so a generic signature never passes for a
/// checked run, a close or a link.
///
/// # Errors
///
/// [`AttestError::Statement`] for a reserved or empty type, or no subject.
pub fn sign_statement(
    signer: &dyn Signer,
    predicate_type: &str,
    subjects: Vec<Subject>,
    predicate: serde_json::Value,
) -> Result<Envelope, AttestError> {
    check_own_type(predicate_type)?;
    if subjects.is_empty() {
        return Err(AttestError::Statement("a statement needs at least one subject".into()));
    }
    let statement = Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject: subjects,
        predicate_type: predicate_type.into(),
        predicate,
    };
    seal(signer, &statement)
}

/// Opens a statement of the caller's own predicate type; the harness's own types
/// are refused (they have their own checks).
///
/// # Errors
///
/// [`AttestError::Signature`] or [`AttestError::Statement`].
pub fn open_statement(env: &Envelope, key: &VerifyingKey) -> Result<Statement<serde_json::Value>, AttestError> {
    let payload = env.open(key, false)?;
    let st: Statement<serde_json::Value> =
        serde_json::from_slice(&payload).map_err(|e| AttestError::Statement(format!("not a statement: {e}")))?;
    if st.statement_type != STATEMENT_TYPE {
        return Err(AttestError::Statement(format!("statement type {:?}", st.statement_type)));
    }
    check_own_type(&st.predicate_type)?;
    Ok(st)
}

fn check_own_type(predicate_type: &str) -> Result<(), AttestError> {
    if predicate_type.is_empty() || RESERVED.contains(&predicate_type) {
        return Err(AttestError::Statement(format!(
            "predicate type {predicate_type:?} is the harness's own or empty; a generic statement cannot use it"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use plimsoll_keys::SigningKey;

    use super::*;
    use crate::signer::KeySigner;

    fn signer() -> KeySigner {
        KeySigner::new(SigningKey::from_bytes(&[9u8; 32]))
    }

    #[test]
    fn a_callers_own_statement_signs_and_opens_but_never_as_the_harnesss_types() {
        let s = signer();
        let subject = vec![Subject::sha256("report.pdf", &"ab".repeat(32))];
        let env = sign_statement(&s, "https://example.com/review/v1", subject.clone(), serde_json::json!({"ok": true}))
            .expect("sign");
        let st = open_statement(&env, s.key()).expect("open");
        assert_eq!(
            (st.predicate_type.as_str(), st.subject, st.predicate),
            ("https://example.com/review/v1", subject.clone(), serde_json::json!({"ok": true}))
        );
        for reserved in RESERVED {
            let e = sign_statement(&s, reserved, subject.clone(), serde_json::json!({})).expect_err("reserved");
            assert!(e.to_string().contains("is the harness's own"), "{e}");
        }
        // A run record's envelope does not open as a generic statement, nor a generic one as a record.
        let close =
            sign_close(&s, &ClosePredicate { session: "ab".repeat(32), calls: 0, last_record_sha256: String::new() })
                .expect("close");
        assert!(matches!(open_statement(&close, s.key()), Err(AttestError::Statement(_))));
        assert!(matches!(verify_record(&env, s.key()), Err(AttestError::Statement(_))));
        assert!(matches!(verify_close(&env, s.key()), Err(AttestError::Statement(_))));
        assert!(matches!(verify_record(&close, s.key()), Err(AttestError::Statement(_))));
    }

    #[test]
    fn a_link_must_carry_exactly_one_signature_by_the_key() {
        let s = signer();
        let link = LinkPredicate {
            index: 1,
            previous_sha256: String::new(),
            entry_sha256: "cd".repeat(32),
            checkpoint: false,
            lines: 0,
        };
        let mut env = sign_link(&s, &link).expect("link");
        assert_eq!(verify_link(&env, s.key()).expect("verifies"), link);
        env.signatures.push(env.signatures[0].clone());
        assert!(matches!(verify_link(&env, s.key()), Err(AttestError::Signature(_))));
    }
}
