//! The bundle: one JSON object per line, each signed and linked to the line before,
//! ending in a checkpoint that states how many lines precede it.
//!
//! Line kinds: a call (`request`, `response`, `envelope`, `link`); an unanswered
//! session call (`request`, `envelope`, `link`); a session close (`envelope`,
//! `link`); a checkpoint (`link` only). `request` and `response` are the base64 of
//! the exact JSON bytes that crossed the wire (a session call's request is stored
//! as the equivalent `RunRequest`, without the session ID, which is a capability).
//!
//! A line must be byte-identical to its entry re-encoded (no whitespace, no
//! unknown or repeated keys, no CR, the file ending in a newline), so what is
//! signed is exactly what is stored.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use plimsoll_core::record;
use plimsoll_core::wire::{RunRecord, RunRequest, RunResponse};
use plimsoll_keys::VerifyingKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::AttestError;
use crate::dsse::Envelope;
use crate::signer::Signer;
use crate::statement::{self, CLOSE_PREDICATE, ClosePredicate, LinkPredicate};

/// The longest line, newline included.
pub const MAX_LINE_BYTES: usize = 64 << 20;
/// How long an append waits for another writer's lock.
pub const LOCK_WAIT: Duration = Duration::from_secs(120);

/// One line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Base64 of the request's JSON bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// Base64 of the response's JSON bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
    /// The signed record or close statement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envelope: Option<Envelope>,
    /// The signed link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<Envelope>,
}

fn encode(entry: &Entry) -> Result<Vec<u8>, AttestError> {
    serde_json::to_vec(entry).map_err(|e| AttestError::Line(format!("encoding: {e}")))
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// SHA-256 of the line without its `link`.
pub fn content_digest(entry: &Entry) -> Result<String, AttestError> {
    Ok(sha256_hex(&encode(&Entry { link: None, ..entry.clone() })?))
}

impl Entry {
    /// A checked single run or session call, signed.
    ///
    /// # Errors
    ///
    /// The exchange fails the client's checks ([`AttestError::Stored`]), or signing failed.
    pub fn call(signer: &dyn Signer, request: &[u8], response: &[u8], in_session: bool) -> Result<Entry, AttestError> {
        let rec = check_stored(request, response, in_session)?;
        Ok(Entry {
            request: Some(STANDARD.encode(request)),
            response: Some(STANDARD.encode(response)),
            envelope: Some(statement::sign_record(signer, &rec)?),
            link: None,
        })
    }

    /// A session call that may have run without an answer: its request and the
    /// daemon's unanswered record.
    ///
    /// # Errors
    ///
    /// The record is not an unanswered session record for this request.
    pub fn unanswered(signer: &dyn Signer, request: &[u8], rec: &RunRecord) -> Result<Entry, AttestError> {
        check_unanswered(request, rec)?;
        Ok(Entry {
            request: Some(STANDARD.encode(request)),
            response: None,
            envelope: Some(statement::sign_record(signer, rec)?),
            link: None,
        })
    }

    /// A session's close.
    ///
    /// # Errors
    ///
    /// Signing failed.
    pub fn close(signer: &dyn Signer, close: &ClosePredicate) -> Result<Entry, AttestError> {
        Ok(Entry { envelope: Some(statement::sign_close(signer, close)?), ..Entry::default() })
    }
}

fn decode_b64(field: &str, v: &str) -> Result<Vec<u8>, AttestError> {
    STANDARD.decode(v).map_err(|e| AttestError::Stored(format!("the stored {field} is not base64: {e}")))
}

fn parse_request(bytes: &[u8]) -> Result<RunRequest, AttestError> {
    serde_json::from_slice(bytes)
        .map_err(|e| AttestError::Stored(format!("the stored request is not a RunRequest: {e}")))
}

/// Checks a stored exchange exactly as the client checks a live one; returns its record.
fn check_stored(request: &[u8], response: &[u8], in_session: bool) -> Result<RunRecord, AttestError> {
    let req = parse_request(request)?;
    let resp: RunResponse = serde_json::from_slice(response)
        .map_err(|e| AttestError::Stored(format!("the stored response is not a RunResponse: {e}")))?;
    let resp = plimsoll_client::check_exchange(&req, resp, in_session)
        .map_err(|e| AttestError::Stored(format!("the exchange fails the client's checks: {e}")))?;
    resp.record.ok_or_else(|| AttestError::Stored("the response carries no record".into()))
}

fn check_unanswered(request: &[u8], rec: &RunRecord) -> Result<(), AttestError> {
    let req = parse_request(request)?;
    if rec.unanswered.is_empty() || rec.session.is_empty() || !rec.result_sha256.is_empty() {
        return Err(AttestError::Stored(
            "only a session call's unanswered record (no result) is kept without a response".into(),
        ));
    }
    let digest = record::request_digest(&req);
    if digest != rec.request_sha256 {
        return Err(AttestError::Stored(format!(
            "the stored request's digest {digest} is not the record's {}",
            rec.request_sha256
        )));
    }
    Ok(())
}

/// A line as read: its bytes (no newline) and its entry.
#[derive(Clone, Debug)]
pub struct Line {
    /// The line's bytes.
    pub bytes: Vec<u8>,
    /// What it decodes to.
    pub entry: Entry,
}

/// Reads a bundle's lines strictly (see the module's doc).
///
/// # Errors
///
/// [`AttestError::Line`] or [`AttestError::Link`], at the line.
pub fn read_lines(bytes: &[u8]) -> Result<Vec<Line>, AttestError> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let Some(body) = bytes.strip_suffix(b"\n") else {
        let n = bytes.iter().filter(|b| **b == b'\n').count() + 1;
        return Err(AttestError::Line("the last line has no newline (the bundle was cut mid-line)".into()).at(n));
    };
    let mut lines = Vec::new();
    for (i, raw) in body.split(|b| *b == b'\n').enumerate() {
        let n = i + 1;
        if raw.len() + 1 > MAX_LINE_BYTES {
            return Err(AttestError::Line(format!("over {MAX_LINE_BYTES} bytes")).at(n));
        }
        if raw.is_empty() || raw.contains(&b'\r') {
            return Err(AttestError::Line("blank, or with a carriage return".into()).at(n));
        }
        let entry: Entry = serde_json::from_slice(raw).map_err(|e| AttestError::Line(e.to_string()).at(n))?;
        if encode(&entry)? != raw {
            return Err(AttestError::Line("not byte-identical to its entry re-encoded".into()).at(n));
        }
        if entry.link.is_none() {
            return Err(AttestError::Link("the line has no link".into()).at(n));
        }
        lines.push(Line { bytes: raw.to_vec(), entry });
    }
    Ok(lines)
}

/// The first 12 characters of a digest, for messages (whatever the text holds).
pub fn short(s: &str) -> String {
    s.chars().take(12).collect()
}

/// What a verified bundle holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Lines, checkpoints included.
    pub lines: usize,
    /// Single runs.
    pub runs: usize,
    /// Sessions in first-appearance order, with their calls.
    pub sessions: Vec<(String, u64)>,
    /// The key every line is signed by.
    pub key_id: String,
}

fn verify_links(lines: &[Line], key: &VerifyingKey) -> Result<(), AttestError> {
    let mut previous = String::new();
    let mut ends_in_checkpoint = false;
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        let Some(link) = &line.entry.link else { return Err(AttestError::Link("the line has no link".into()).at(n)) };
        let p = statement::verify_link(link, key).map_err(|e| e.at(n))?;
        if p.index != n as u64 {
            return Err(AttestError::Link(format!("the line says it is line {}", p.index)).at(n));
        }
        if p.previous_sha256 != previous {
            return Err(AttestError::Link("the line does not follow the line before it".into()).at(n));
        }
        let e = &line.entry;
        if p.checkpoint {
            if p.lines != n as u64 - 1
                || !p.entry_sha256.is_empty()
                || e.request.is_some()
                || e.response.is_some()
                || e.envelope.is_some()
            {
                return Err(AttestError::Link("a malformed checkpoint".into()).at(n));
            }
        } else if p.lines != 0 || p.entry_sha256 != content_digest(e)? {
            return Err(AttestError::Link("the line's content is not what its link signed".into()).at(n));
        }
        previous = sha256_hex(&line.bytes);
        ends_in_checkpoint = p.checkpoint;
    }
    match (lines.is_empty(), ends_in_checkpoint) {
        (true, _) => Err(AttestError::Incomplete("the bundle is empty".into())),
        (false, true) => Ok(()),
        (false, false) => Err(AttestError::Incomplete(
            "the last line is not a checkpoint: the bundle was cut, or a write did not finish".into(),
        )),
    }
}

#[derive(Default)]
struct Chain {
    calls: u64,
    last: String,
    closed: bool,
}

/// Verifies a whole bundle under `key`: every link and signature, every stored
/// exchange re-checked as the client checks it, every session chain, and the final
/// checkpoint.
///
/// # Errors
///
/// The first failure, at its line.
pub fn verify_bundle(bytes: &[u8], key: &VerifyingKey) -> Result<Report, AttestError> {
    verify(bytes, key, Completeness::Whole)
}

/// How much a verification requires of the bundle's sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completeness {
    /// Every session ends with its close: nothing could have been cut.
    Whole,
    /// Sessions may still be open (a receipts file while its writer runs); every
    /// other check holds.
    Progress,
}

/// [`verify_bundle`], allowing sessions still open: for a bundle its writer
/// appends to while sessions run (the MCP server's receipts).
///
/// # Errors
///
/// The first failure, at its line.
pub fn verify_progress(bytes: &[u8], key: &VerifyingKey) -> Result<Report, AttestError> {
    verify(bytes, key, Completeness::Progress)
}

fn verify(bytes: &[u8], key: &VerifyingKey, completeness: Completeness) -> Result<Report, AttestError> {
    verified(bytes, key, completeness).map(|(report, _, _)| report)
}

/// A verified bundle: its report, its lines, and what each line's statement
/// established (None for a checkpoint).
type Verified = (Report, Vec<Line>, Vec<Option<Checked>>);

/// Verifies a bundle, keeping what the checks established.
fn verified(bytes: &[u8], key: &VerifyingKey, completeness: Completeness) -> Result<Verified, AttestError> {
    let lines = read_lines(bytes)?;
    // Each line's own statement first, so a changed line is named for what changed;
    // then the links (order, completeness); then the session chains.
    let mut statements = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let Some(env) = &line.entry.envelope else {
            statements.push(None);
            continue;
        };
        let checked = if statement::peek_predicate_type(env).as_deref() == Some(CLOSE_PREDICATE) {
            if line.entry.request.is_some() || line.entry.response.is_some() {
                return Err(AttestError::Stored("a close line carries an exchange".into()).at(i + 1));
            }
            statement::verify_close(env, key).map(Checked::Close)
        } else {
            check_line(line, key).map(|r| Checked::Call(Box::new(r)))
        };
        statements.push(Some(checked.map_err(|e| e.at(i + 1))?));
    }
    verify_links(&lines, key)?;
    let mut runs = 0;
    let mut order: Vec<String> = Vec::new();
    let mut chains: std::collections::HashMap<String, Chain> = Default::default();
    for (i, checked) in statements.iter().enumerate() {
        let n = i + 1;
        let session = match checked {
            None => continue,
            Some(Checked::Call(rec)) if rec.session.is_empty() => {
                runs += 1;
                continue;
            }
            Some(Checked::Call(rec)) => rec.session.clone(),
            Some(Checked::Close(c)) => c.session.clone(),
        };
        if !order.contains(&session) {
            order.push(session.clone());
        }
        let chain = chains.entry(session).or_default();
        match checked {
            Some(Checked::Close(close)) => {
                if chain.closed {
                    return Err(AttestError::Chain("the session is closed a second time".into()).at(n));
                }
                if close.calls != chain.calls || close.last_record_sha256 != chain.last {
                    return Err(AttestError::Chain(format!(
                        "the close states {} calls, the bundle holds {} before it",
                        close.calls, chain.calls
                    ))
                    .at(n));
                }
                chain.closed = true;
            }
            Some(Checked::Call(rec)) => {
                if chain.closed {
                    return Err(AttestError::Chain("a call after the session's close".into()).at(n));
                }
                if rec.sequence != chain.calls + 1 || rec.previous_sha256 != chain.last {
                    return Err(AttestError::Chain(format!(
                        "call {} follows call {} (a call was dropped, repeated or moved)",
                        rec.sequence, chain.calls
                    ))
                    .at(n));
                }
                chain.calls += 1;
                chain.last = rec.record_sha256.clone();
            }
            None => {}
        }
    }
    let mut sessions = Vec::new();
    for s in order {
        let chain = &chains[&s];
        if !chain.closed && completeness == Completeness::Whole {
            return Err(AttestError::Chain(format!(
                "session {}… has no close; its last calls could have been cut",
                short(&s)
            )));
        }
        sessions.push((s, chain.calls));
    }
    let report = Report { lines: lines.len(), runs, sessions, key_id: plimsoll_keys::key_id(key) };
    Ok((report, lines, statements))
}

/// A verified single run a replay can send again.
#[derive(Clone, Debug)]
pub struct Replayable {
    /// Its line.
    pub line: usize,
    /// The stored request.
    pub request: RunRequest,
    /// The signed record (its `result_sha256` is what a replay must reproduce).
    pub record: RunRecord,
}

/// The single runs of a bundle that verifies whole under `key`; nothing is
/// returned from a bundle that does not.
///
/// # Errors
///
/// The bundle does not verify.
pub fn replayable(bytes: &[u8], key: &VerifyingKey) -> Result<Vec<Replayable>, AttestError> {
    let (_, lines, statements) = verified(bytes, key, Completeness::Whole)?;
    let mut out = Vec::new();
    for (i, (line, checked)) in lines.iter().zip(statements).enumerate() {
        let (Some(Checked::Call(record)), Some(request)) = (checked, &line.entry.request) else { continue };
        if record.session.is_empty() {
            let request = parse_request(&decode_b64("request", request)?)?;
            out.push(Replayable { line: i + 1, request, record: *record });
        }
    }
    Ok(out)
}

/// A verified run of a bundle, single or a session's call, as a BOM states it.
#[derive(Clone, Debug)]
pub struct SignedRun {
    /// Its line.
    pub line: usize,
    /// The signed record.
    pub record: RunRecord,
    /// The line's signed statement, as the bundle holds it.
    pub envelope: Envelope,
}

/// Every run of a bundle that verifies whole under `key`, in bundle order, and
/// the bundle's report; nothing from a bundle that does not.
///
/// # Errors
///
/// The bundle does not verify.
pub fn signed_runs(bytes: &[u8], key: &VerifyingKey) -> Result<(Report, Vec<SignedRun>), AttestError> {
    let (report, lines, statements) = verified(bytes, key, Completeness::Whole)?;
    let mut runs = Vec::new();
    for (i, (line, checked)) in lines.into_iter().zip(statements).enumerate() {
        if let (Some(Checked::Call(record)), Some(envelope)) = (checked, line.entry.envelope) {
            runs.push(SignedRun { line: i + 1, record: *record, envelope });
        }
    }
    Ok((report, runs))
}

/// What a line's statement established.
enum Checked {
    Call(Box<RunRecord>),
    Close(ClosePredicate),
}

/// One record line on its own: the signature, the statement, and the stored
/// exchange re-checked; returns the signed record.
fn check_line(line: &Line, key: &VerifyingKey) -> Result<RunRecord, AttestError> {
    let e = &line.entry;
    let env = e.envelope.as_ref().ok_or_else(|| AttestError::Stored("the line has no statement".into()))?;
    let rec = statement::verify_record(env, key)?;
    let request =
        decode_b64("request", e.request.as_deref().ok_or_else(|| AttestError::Stored("no stored request".into()))?)?;
    if !rec.unanswered.is_empty() {
        if e.response.is_some() {
            return Err(AttestError::Stored("an unanswered call with a stored response".into()));
        }
        check_unanswered(&request, &rec)?;
        return Ok(rec);
    }
    if rec.session.is_empty() && (rec.sequence != 0 || !rec.previous_sha256.is_empty()) {
        return Err(AttestError::Chain("a single run's record carries chain fields".into()));
    }
    let response =
        decode_b64("response", e.response.as_deref().ok_or_else(|| AttestError::Stored("no stored response".into()))?)?;
    let stored = check_stored(&request, &response, !rec.session.is_empty())?;
    if stored != rec {
        return Err(AttestError::Stored("the stored response's record is not the signed record".into()));
    }
    Ok(rec)
}

/// Checks one line on its own and says what that establishes and what it does not.
///
/// # Errors
///
/// The line fails its own checks.
pub fn verify_entry(bytes: &[u8], number: usize, key: &VerifyingKey) -> Result<String, AttestError> {
    let lines = read_lines(bytes)?;
    let line = lines
        .get(number.wrapping_sub(1))
        .ok_or_else(|| AttestError::Line(format!("the bundle has {} lines, not a line {number}", lines.len())))?;
    let at = |e: AttestError| e.at(number);
    let link = line.entry.link.as_ref().ok_or_else(|| at(AttestError::Link("no link".into())))?;
    let p = statement::verify_link(link, key).map_err(at)?;
    if p.index != number as u64 {
        return Err(at(AttestError::Link(format!("the line says it is line {}", p.index))));
    }
    let not = "It does not establish the line's place in the bundle, that no line was dropped before or after it, or that the bundle is complete: verify the whole bundle for those.";
    if p.checkpoint {
        return Ok(format!("line {number} is a checkpoint signed by key {}. {not}", plimsoll_keys::key_id(key)));
    }
    // The statement first, so a changed line is named for what changed.
    let env = line.entry.envelope.as_ref().ok_or_else(|| at(AttestError::Stored("no statement".into())))?;
    let close = statement::peek_predicate_type(env).as_deref() == Some(CLOSE_PREDICATE);
    let checked = if close {
        statement::verify_close(env, key).map(Checked::Close)
    } else {
        check_line(line, key).map(|r| Checked::Call(Box::new(r)))
    };
    let checked = checked.map_err(at)?;
    if p.entry_sha256 != content_digest(&line.entry)? {
        return Err(at(AttestError::Link("the line's content is not what its link signed".into())));
    }
    if let Checked::Close(c) = checked {
        return Ok(format!(
            "line {number} closes session {}… after {} calls, signed by key {}. {not} Nor that the calls it counts are in the bundle.",
            short(&c.session),
            c.calls,
            plimsoll_keys::key_id(key)
        ));
    }
    let Checked::Call(rec) = checked else { unreachable!("a close returned above") };
    let what = if rec.session.is_empty() {
        "a single run".to_string()
    } else {
        format!("call {} of session {}…", rec.sequence, short(&rec.session))
    };
    Ok(format!(
        "line {number} is {what} on {} ({}), record {}, its stored request and response re-checked, signed by key {}. {not}",
        rec.provider,
        rec.isolation,
        rec.record_sha256,
        plimsoll_keys::key_id(key)
    ))
}

fn file_err(path: &Path, what: &str, e: impl std::fmt::Display) -> AttestError {
    AttestError::File(format!("{what} {}: {e}", path.display()))
}

fn check_private(path: &Path, meta: &std::fs::Metadata, shared: bool) -> Result<(), AttestError> {
    if !shared && meta.permissions().mode() & 0o077 != 0 {
        return Err(AttestError::File(format!(
            "{} is readable or writable by others (mode {:o}); make it 0600 or pass --shared-bundle; nothing was run",
            path.display(),
            meta.permissions().mode() & 0o777
        )));
    }
    Ok(())
}

/// Whether a run may later be appended to `path` under `key`: absent, or private
/// (unless `shared`) and verifying whole to its last checkpoint. Call before running.
///
/// # Errors
///
/// Why not, ending "nothing was run".
pub fn check_appendable(path: &Path, key: &VerifyingKey, shared: bool) -> Result<(), AttestError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(file_err(path, "reading", e)),
    };
    check_private(path, &meta, shared)?;
    let bytes = std::fs::read(path).map_err(|e| file_err(path, "reading", e))?;
    if !bytes.is_empty() {
        verify_bundle(&bytes, key).map_err(|e| {
            AttestError::File(format!(
                "{} does not verify under this key ({e}); a bundle signed by another key needs a new file, and a tail a crash damaged can be cut back to its last checkpoint; nothing was run",
                path.display()
            ))
        })?;
    }
    Ok(())
}

/// Appends `entries` (unlinked) and a checkpoint to the bundle at `path`, under an
/// exclusive lock: the file is created 0600, re-read and verified under the signer's
/// key, the new lines are linked and written at once and synced. On any failure
/// the file is cut back to its length before the append.
///
/// # Errors
///
/// The lock was not had within [`LOCK_WAIT`], the bundle does not verify, or a
/// write failed (the message says whether the cut-back succeeded).
pub fn append(path: &Path, signer: &dyn Signer, shared: bool, entries: &[Entry]) -> Result<Report, AttestError> {
    append_with(path, signer, shared, entries, Completeness::Whole).map(|(report, _)| report)
}

/// [`append`], requiring `completeness` of the result, and also returning the line
/// number of each entry appended (a receipt names its line).
///
/// # Errors
///
/// As [`append`].
pub fn append_with(
    path: &Path,
    signer: &dyn Signer,
    shared: bool,
    entries: &[Entry],
    completeness: Completeness,
) -> Result<(Report, Vec<usize>), AttestError> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| file_err(path, "opening", e))?;
    let meta = file.metadata().map_err(|e| file_err(path, "reading", e))?;
    check_private(path, &meta, shared)?;
    let started = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(AttestError::File(format!(
                    "another run has held the lock on {} for {} s",
                    path.display(),
                    LOCK_WAIT.as_secs()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(file_err(path, "locking", e)),
        }
    }
    let mut existing = Vec::new();
    file.read_to_end(&mut existing).map_err(|e| file_err(path, "reading", e))?;
    let (mut index, mut previous) = (0u64, String::new());
    if !existing.is_empty() {
        let report = verify(&existing, signer.key(), completeness)?;
        index = report.lines as u64;
        previous = existing
            .strip_suffix(b"\n")
            .and_then(|b| b.rsplit(|c| *c == b'\n').next())
            .map(sha256_hex)
            .unwrap_or_default();
    }
    let first = index as usize + 1;
    let out = linked(signer, index, previous, entries)?;
    let mut all = existing.clone();
    all.extend_from_slice(&out);
    // Nothing that would not verify is written.
    let report = verify(&all, signer.key(), completeness)?;
    let before = existing.len() as u64;
    let written = file.seek(SeekFrom::Start(before)).and_then(|_| file.write_all(&out)).and_then(|()| file.sync_all());
    if let Err(e) = written {
        let cut = file.set_len(before).and_then(|()| file.sync_all());
        return Err(match cut {
            Ok(()) => file_err(path, "appending to (cut back to its last checkpoint)", e),
            Err(c) => AttestError::File(format!(
                "appending to {} failed ({e}) and cutting it back failed too ({c}): verify it before the next run",
                path.display()
            )),
        });
    }
    Ok((report, (first..first + entries.len()).collect()))
}

/// `entries` as lines linked after line `index` (whose digest is `previous`),
/// followed by a checkpoint.
///
/// # Errors
///
/// Signing failed, or a line is over [`MAX_LINE_BYTES`].
pub fn linked(
    signer: &dyn Signer,
    mut index: u64,
    mut previous: String,
    entries: &[Entry],
) -> Result<Vec<u8>, AttestError> {
    let mut out = Vec::new();
    for entry in entries {
        index += 1;
        let link = LinkPredicate {
            index,
            previous_sha256: previous.clone(),
            entry_sha256: content_digest(entry)?,
            checkpoint: false,
            lines: 0,
        };
        let line = encode(&Entry { link: Some(statement::sign_link(signer, &link)?), ..entry.clone() })?;
        if line.len() + 1 > MAX_LINE_BYTES {
            return Err(AttestError::Line(format!("a line of {} bytes is over {MAX_LINE_BYTES}", line.len() + 1)));
        }
        previous = sha256_hex(&line);
        out.extend_from_slice(&line);
        out.push(b'\n');
    }
    index += 1;
    let checkpoint = LinkPredicate {
        index,
        previous_sha256: previous,
        entry_sha256: String::new(),
        checkpoint: true,
        lines: index - 1,
    };
    out.extend_from_slice(&encode(&Entry {
        link: Some(statement::sign_link(signer, &checkpoint)?),
        ..Entry::default()
    })?);
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use plimsoll_core::wire::{CellResult, CellRun, JavaScriptResult, JavaScriptRun};
    use plimsoll_keys::SigningKey;

    use super::*;
    use crate::signer::KeySigner;

    /// A fixed key, so signatures (Ed25519 is deterministic) and lines are too.
    fn signer() -> KeySigner {
        KeySigner::new(SigningKey::from_bytes(&[7u8; 32]))
    }

    /// A request and its answer with a sealed record; `chain` makes it call
    /// `sequence` of session `fingerprint` after `previous`.
    fn exchange(code: &str, chain: Option<(&str, u64, &str)>) -> (Vec<u8>, Vec<u8>, RunRecord) {
        let mut req = RunRequest { protocol: 4, ..RunRequest::default() };
        let mut resp = RunResponse {
            sandbox: "wasm".into(),
            isolation: "process".into(),
            environment: "wasm-component:sha256:00".into(),
            ..RunResponse::default()
        };
        if chain.is_some() {
            req.cell = Some(CellRun { language: "javascript".into(), code: code.into(), files: vec![] });
            resp.cell = Some(CellResult { stdout: format!("{code}\n").into_bytes(), ..CellResult::default() });
        } else {
            req.javascript = Some(JavaScriptRun { code: code.into(), grant_profile: String::new() });
            resp.javascript =
                Some(JavaScriptResult { stdout: format!("{code}\n").into_bytes(), ..JavaScriptResult::default() });
        }
        let (session, sequence, previous) = chain.unwrap_or(("", 0, ""));
        let rec = RunRecord {
            version: record::VERSION,
            request_sha256: record::request_digest(&req),
            result_sha256: record::result_digest(&resp),
            provider: resp.sandbox.clone(),
            isolation: resp.isolation.clone(),
            environment: resp.environment.clone(),
            started_unix_ms: 1_796_000_000_000,
            ended_unix_ms: 1_796_000_000_002,
            session: session.into(),
            sequence,
            previous_sha256: previous.into(),
            ..RunRecord::default()
        };
        let rec = record::seal(rec).expect("seal");
        resp.record = Some(rec.clone());
        (serde_json::to_vec(&req).expect("req"), serde_json::to_vec(&resp).expect("resp"), rec)
    }

    const SESSION: &str = "5e55105e55105e55105e55105e55105e55105e55105e55105e55105e55105e55";

    /// Two single runs, and a session of two calls and its close.
    fn entries(s: &KeySigner) -> Vec<Entry> {
        let (q1, a1, _) = exchange("1", None);
        let (q2, a2, r2) = exchange("2", Some((SESSION, 1, "")));
        let (q3, a3, r3) = exchange("3", Some((SESSION, 2, &r2.record_sha256)));
        let (q4, a4, _) = exchange("4", None);
        let close = ClosePredicate { session: SESSION.into(), calls: 2, last_record_sha256: r3.record_sha256 };
        vec![
            Entry::call(s, &q1, &a1, false).expect("call 1"),
            Entry::call(s, &q2, &a2, true).expect("call 2"),
            Entry::call(s, &q3, &a3, true).expect("call 3"),
            Entry::close(s, &close).expect("close"),
            Entry::call(s, &q4, &a4, false).expect("call 4"),
        ]
    }

    fn bundle() -> Vec<u8> {
        let s = signer();
        linked(&s, 0, String::new(), &entries(&s)).expect("lines")
    }

    fn lines(b: &[u8]) -> Vec<Vec<u8>> {
        b.split(|c| *c == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec).collect()
    }

    fn join(ls: &[Vec<u8>]) -> Vec<u8> {
        ls.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect()
    }

    fn refused(b: &[u8]) -> AttestError {
        verify_bundle(b, signer().key()).expect_err("must be refused")
    }

    #[test]
    fn a_bundle_verifies_and_reports_its_runs_and_sessions() {
        let report = verify_bundle(&bundle(), signer().key()).expect("verifies");
        assert_eq!((report.lines, report.runs), (6, 2));
        assert_eq!(report.sessions, vec![(SESSION.to_string(), 2)]);
    }

    #[test]
    fn a_fixed_key_and_fixed_exchanges_give_the_golden_bytes() {
        let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/golden.jsonl");
        let made = bundle();
        assert_eq!(made, bundle(), "the same lines twice");
        if std::env::var("PLIMSOLL_UPDATE_GOLDEN").is_ok() {
            std::fs::write(golden, &made).expect("write golden");
        }
        let stored = std::fs::read(golden).expect("testdata/golden.jsonl (PLIMSOLL_UPDATE_GOLDEN=1 writes it)");
        assert_eq!(String::from_utf8_lossy(&made), String::from_utf8_lossy(&stored));
    }

    /// Flips one character inside member `field` of line `n` (1-based).
    fn flip(b: &[u8], n: usize, field: &str) -> Vec<u8> {
        let mut ls = lines(b);
        let line = String::from_utf8(ls[n - 1].clone()).expect("utf8");
        let at = line.find(&format!("\"{field}\":\"")).expect("field") + field.len() + 8;
        let mut bytes = line.into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        ls[n - 1] = bytes;
        join(&ls)
    }

    #[test]
    fn every_tampering_is_refused_naming_its_reason() {
        let b = bundle();
        let kind = |e: &AttestError| std::mem::discriminant(e.kind());
        let sig = std::mem::discriminant(&AttestError::Signature(String::new()));
        let stored = std::mem::discriminant(&AttestError::Stored(String::new()));
        let link = std::mem::discriminant(&AttestError::Link(String::new()));
        // A flipped byte in a statement's payload, or in its signature.
        let e = refused(&flip(&b, 1, "payload"));
        assert_eq!((kind(&e), e.to_string().starts_with("line 1: signature")), (sig, true), "{e}");
        let e = refused(&flip(&b, 2, "sig"));
        assert_eq!((kind(&e), e.to_string().starts_with("line 2: signature")), (sig, true), "{e}");
        // A flipped byte in a stored request or response.
        for field in ["request", "response"] {
            let e = refused(&flip(&b, 5, field));
            assert_eq!(kind(&e), stored, "{field}: {e}");
            assert!(e.to_string().starts_with("line 5: stored exchange"), "{e}");
        }
        // A dropped line, two lines swapped, a line replayed.
        let ls = lines(&b);
        let mut dropped = ls.clone();
        dropped.remove(1);
        let mut swapped = ls.clone();
        swapped.swap(0, 4);
        let mut replayed = ls.clone();
        replayed.insert(1, ls[0].clone());
        for (what, t) in [("dropped", dropped), ("swapped", swapped), ("replayed", replayed)] {
            let e = refused(&join(&t));
            assert_eq!(kind(&e), link, "{what}: {e}");
        }
        // Cut before its checkpoint.
        let e = refused(&join(&ls[..5]));
        assert_eq!(
            e,
            AttestError::Incomplete(
                "the last line is not a checkpoint: the bundle was cut, or a write did not finish".into()
            )
        );
        let e = refused(&b[..b.len() - 1]);
        assert!(matches!(e.kind(), AttestError::Line(m) if m.contains("no newline")), "{e}");
        // Another key.
        let other = plimsoll_keys::generate().expect("key").verifying_key();
        let e = verify_bundle(&b, &other).expect_err("another key");
        assert_eq!(kind(&e), sig, "{e}");
        // An empty bundle.
        assert_eq!(refused(b""), AttestError::Incomplete("the bundle is empty".into()));
    }

    #[test]
    fn a_session_call_after_its_close_and_a_close_with_the_wrong_count_are_refused() {
        let s = signer();
        let (q2, a2, r2) = exchange("2", Some((SESSION, 1, "")));
        let (q3, a3, _) = exchange("3", Some((SESSION, 2, &r2.record_sha256)));
        let early = ClosePredicate { session: SESSION.into(), calls: 1, last_record_sha256: r2.record_sha256.clone() };
        let es = vec![
            Entry::call(&s, &q2, &a2, true).expect("call 1"),
            Entry::close(&s, &early).expect("close"),
            Entry::call(&s, &q3, &a3, true).expect("call 2"),
        ];
        let e = refused(&linked(&s, 0, String::new(), &es).expect("lines"));
        assert_eq!(e, AttestError::Chain("a call after the session's close".into()).at(3));
        let mut es = entries(&s);
        let late = es.remove(2);
        es.insert(3, late);
        let e = refused(&linked(&s, 0, String::new(), &es).expect("lines"));
        assert_eq!(e, AttestError::Chain("the close states 2 calls, the bundle holds 1 before it".into()).at(3));
        let mut es = entries(&s);
        es.remove(3);
        let e = refused(&linked(&s, 0, String::new(), &es).expect("lines"));
        assert!(matches!(e.kind(), AttestError::Chain(m) if m.contains("has no close")), "{e}");
        let mut es = entries(&s);
        let close = es[3].clone();
        es.push(close);
        let e = refused(&linked(&s, 0, String::new(), &es).expect("lines"));
        assert_eq!(e, AttestError::Chain("the session is closed a second time".into()).at(6));
    }

    #[test]
    fn a_record_is_signed_only_when_its_exchange_passes_the_clients_checks() {
        let s = signer();
        let (q, a, _) = exchange("1", None);
        let mut resp: RunResponse = serde_json::from_slice(&a).expect("resp");
        if let Some(js) = resp.javascript.as_mut() {
            js.stdout = b"forged\n".to_vec();
        }
        let forged = serde_json::to_vec(&resp).expect("json");
        let e = Entry::call(&s, &q, &forged, false).expect_err("forged stdout");
        assert!(matches!(&e, AttestError::Stored(m) if m.contains("result digest")), "{e}");
        let (q2, a2, _) = exchange("2", Some((SESSION, 1, "")));
        let e = Entry::call(&s, &q2, &a2, false).expect_err("a session call as a single run");
        assert!(matches!(&e, AttestError::Stored(m) if m.contains("session fields")), "{e}");
        let mut rec = resp.record.clone().expect("record");
        rec.version = 3;
        assert_eq!(statement::sign_record(&s, &rec), Err(AttestError::SigningVersion(3)));
        let mut rec = resp.record.expect("record");
        rec.provider = "docker".into();
        assert!(matches!(statement::sign_record(&s, &rec), Err(AttestError::Unchecked(_))));
    }

    #[test]
    fn non_canonical_lines_and_lines_without_links_are_refused() {
        let b = bundle();
        let mut spaced = b.clone();
        spaced.splice(1..1, b" ".iter().copied());
        assert!(matches!(refused(&spaced).kind(), AttestError::Line(_)));
        let crlf: Vec<u8> = b.iter().flat_map(|c| if *c == b'\n' { vec![b'\r', b'\n'] } else { vec![*c] }).collect();
        assert!(matches!(refused(&crlf).kind(), AttestError::Line(_)));
        let e = refused(b"{}\n{}\n");
        assert_eq!(e, AttestError::Link("the line has no link".into()).at(1));
        let e = refused(b"{\"extra\":1}\n");
        assert!(matches!(e.kind(), AttestError::Line(m) if m.contains("unknown field")), "{e}");
    }

    #[test]
    fn one_line_verifies_on_its_own_and_says_what_it_does_not_establish() {
        let b = bundle();
        let said = verify_entry(&b, 2, signer().key()).expect("line 2");
        assert!(said.starts_with("line 2 is call 1 of session 5e55105e5510… on wasm (process)"), "{said}");
        assert!(said.contains("does not establish the line's place"), "{said}");
        assert!(verify_entry(&b, 6, signer().key()).expect("checkpoint").starts_with("line 6 is a checkpoint"));
        let e = verify_entry(&flip(&b, 5, "response"), 5, signer().key()).expect_err("tampered");
        assert!(matches!(e.kind(), AttestError::Stored(_)), "{e}");
    }

    #[test]
    fn appending_locks_links_after_the_last_checkpoint_and_keeps_the_file_private() {
        let dir = std::env::temp_dir().join(format!("plimsoll-attest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("runs.jsonl");
        let s = signer();
        let es = entries(&s);
        check_appendable(&path, s.key(), false).expect("an absent bundle is fine");
        let first = append(&path, &s, false, &es[..1]).expect("append");
        assert_eq!((first.lines, first.runs), (2, 1));
        let second = append(&path, &s, false, &es[1..]).expect("append again");
        assert_eq!((second.lines, second.runs, second.sessions.len()), (7, 2, 1));
        assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        // Others may not read it unless the caller says it is shared; nothing changes.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let before = std::fs::read(&path).expect("read");
        let e = append(&path, &s, false, &es[..1]).expect_err("group-readable");
        assert!(e.to_string().contains("make it 0600 or pass --shared-bundle"), "{e}");
        assert_eq!(std::fs::read(&path).expect("read"), before);
        append(&path, &s, true, &es[..1]).expect("shared");
        // A writer holding the lock makes the append wait; it proceeds once released.
        let holder = std::fs::File::open(&path).expect("open");
        holder.lock().expect("lock");
        let waiter = {
            let (path, es) = (path.clone(), es.clone());
            std::thread::spawn(move || append(&path, &signer(), true, &es[..1]).map(|r| r.lines))
        };
        std::thread::sleep(Duration::from_millis(300));
        assert!(!waiter.is_finished(), "the append waits for the lock");
        holder.unlock().expect("unlock");
        assert_eq!(waiter.join().expect("thread").expect("append after the lock"), 11);
        // Another key's bundle is refused before anything runs.
        let other = KeySigner::new(plimsoll_keys::generate().expect("key"));
        let e = check_appendable(&path, other.key(), true).expect_err("another key");
        assert!(e.to_string().ends_with("nothing was run"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_bundle_with_a_session_still_open_verifies_only_as_progress() {
        let s = signer();
        let mut es = entries(&s);
        es.remove(3);
        let b = linked(&s, 0, String::new(), &es).expect("lines");
        assert!(matches!(refused(&b).kind(), AttestError::Chain(m) if m.contains("has no close")));
        let report = verify_progress(&b, s.key()).expect("progress");
        assert_eq!(report.sessions, vec![(SESSION.to_string(), 2)]);
    }

    #[test]
    fn an_unanswered_session_call_is_kept_with_its_request_alone() {
        let s = signer();
        let (q, _, mut rec) = exchange("1", Some((SESSION, 1, "")));
        rec.result_sha256 = String::new();
        rec.unanswered = "internal".into();
        let rec = record::seal(rec).expect("seal");
        let close = ClosePredicate { session: SESSION.into(), calls: 1, last_record_sha256: rec.record_sha256.clone() };
        let es = vec![Entry::unanswered(&s, &q, &rec).expect("unanswered"), Entry::close(&s, &close).expect("close")];
        let report = verify_bundle(&linked(&s, 0, String::new(), &es).expect("lines"), s.key()).expect("verifies");
        assert_eq!(report.sessions, vec![(SESSION.to_string(), 1)]);
    }
}
