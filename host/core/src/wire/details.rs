//! The three error details of the protocol (`plimsoll.v1.NotDispatched`,
//! `plimsoll.v1.SessionEnded`, `plimsoll.v1.UnansweredCall`) in protobuf's binary
//! form, which Connect carries base64-encoded in an error's `details`.
//!
//! Hand-written, since they are tiny: field 1 an enum or a message, field 2 a string.

use crate::refusal::Reason;
use crate::wire::RunRecord;

/// Type name of the not-dispatched detail.
pub const NOT_DISPATCHED: &str = "plimsoll.v1.NotDispatched";
/// Type name of the session-ended detail.
pub const SESSION_ENDED: &str = "plimsoll.v1.SessionEnded";
/// Type name of the unanswered-call detail.
pub const UNANSWERED_CALL: &str = "plimsoll.v1.UnansweredCall";

/// Why a detail could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed protobuf detail: {0}")]
pub struct DetailError(pub &'static str);

fn varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    if s.is_empty() {
        return;
    }
    tag(out, field, 2);
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v == 0 {
        return;
    }
    tag(out, field, 0);
    varint(out, v);
}

/// Encodes `NotDispatched{reason}`.
pub fn encode_not_dispatched(reason: Reason) -> Vec<u8> {
    let mut out = Vec::with_capacity(2);
    uint(&mut out, 1, u64::from(reason.number()));
    out
}

/// Encodes `SessionEnded{reason, detail}` (`reason` a `SessionEnd` number).
pub fn encode_session_ended(reason: u32, detail: &str) -> Vec<u8> {
    let mut out = Vec::new();
    uint(&mut out, 1, u64::from(reason));
    string(&mut out, 2, detail);
    out
}

/// Encodes a `RunRecord`.
pub fn encode_record(r: &RunRecord) -> Vec<u8> {
    let mut out = Vec::new();
    uint(&mut out, 1, u64::from(r.version));
    string(&mut out, 2, &r.request_sha256);
    string(&mut out, 3, &r.result_sha256);
    string(&mut out, 4, &r.provider);
    string(&mut out, 5, &r.isolation);
    string(&mut out, 6, &r.environment);
    string(&mut out, 7, &r.policy);
    // int64 on the wire is the two's-complement varint.
    uint(&mut out, 8, r.started_unix_ms as u64);
    uint(&mut out, 9, r.ended_unix_ms as u64);
    string(&mut out, 10, &r.session);
    uint(&mut out, 11, r.sequence);
    string(&mut out, 12, &r.previous_sha256);
    string(&mut out, 13, &r.record_sha256);
    string(&mut out, 14, &r.software_identity);
    string(&mut out, 15, &r.software_rule_id);
    string(&mut out, 16, &r.unanswered);
    string(&mut out, 17, &r.instance);
    out
}

/// Encodes `UnansweredCall{record}`.
pub fn encode_unanswered(r: &RunRecord) -> Vec<u8> {
    let rec = encode_record(r);
    let mut out = Vec::with_capacity(rec.len() + 4);
    tag(&mut out, 1, 2);
    varint(&mut out, rec.len() as u64);
    out.extend_from_slice(&rec);
    out
}

/// One decoded field: its number and value.
enum Field<'a> {
    Varint(u32, u64),
    Bytes(u32, &'a [u8]),
    Fixed(u32),
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, DetailError> {
        let mut v: u64 = 0;
        for shift in (0..70).step_by(7) {
            let c = *self.b.get(self.i).ok_or(DetailError("truncated varint"))?;
            self.i += 1;
            if shift == 63 && c > 1 {
                return Err(DetailError("varint overflows 64 bits"));
            }
            v |= u64::from(c & 0x7f) << shift;
            if c & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DetailError("varint longer than 10 bytes"))
    }

    fn next(&mut self) -> Result<Option<Field<'a>>, DetailError> {
        if self.i >= self.b.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| DetailError("field number out of range"))?;
        if field == 0 {
            return Err(DetailError("field number 0"));
        }
        match key & 7 {
            0 => Ok(Some(Field::Varint(field, self.varint()?))),
            2 => {
                let n = usize::try_from(self.varint()?).map_err(|_| DetailError("length out of range"))?;
                let end = self.i.checked_add(n).filter(|e| *e <= self.b.len()).ok_or(DetailError("field overruns"))?;
                let v = &self.b[self.i..end];
                self.i = end;
                Ok(Some(Field::Bytes(field, v)))
            }
            w @ (1 | 5) => {
                self.i += if w == 1 { 8 } else { 4 };
                if self.i > self.b.len() {
                    return Err(DetailError("fixed-width field overruns"));
                }
                Ok(Some(Field::Fixed(field)))
            }
            _ => Err(DetailError("unsupported wire type")),
        }
    }
}

fn text(b: &[u8]) -> Result<String, DetailError> {
    String::from_utf8(b.to_vec()).map_err(|_| DetailError("string is not UTF-8"))
}

/// Decodes a message of shape `{1: enum, 2: string}` (NotDispatched, SessionEnded).
///
/// # Errors
///
/// [`DetailError`] where protobuf's own decoder would refuse the bytes.
pub fn decode_enum_and_string(b: &[u8]) -> Result<(u32, String), DetailError> {
    let mut r = Reader { b, i: 0 };
    let (mut n, mut s) = (0u32, String::new());
    while let Some(f) = r.next()? {
        match f {
            Field::Varint(1, v) => n = v as u32,
            Field::Bytes(2, v) => s = text(v)?,
            Field::Varint(2, _) | Field::Bytes(1, _) | Field::Fixed(1 | 2) => {
                return Err(DetailError("a known field has the wrong wire type"));
            }
            _ => {}
        }
    }
    Ok((n, s))
}

/// Decodes the record inside an `UnansweredCall`.
///
/// # Errors
///
/// [`DetailError`] where protobuf's own decoder would refuse the bytes.
pub fn decode_unanswered(b: &[u8]) -> Result<Option<RunRecord>, DetailError> {
    let mut r = Reader { b, i: 0 };
    let mut out = None;
    while let Some(f) = r.next()? {
        match f {
            Field::Bytes(1, v) => out = Some(decode_record(v)?),
            Field::Varint(1, _) | Field::Fixed(1) => return Err(DetailError("record is not length-delimited")),
            _ => {}
        }
    }
    Ok(out)
}

/// Decodes a `RunRecord`.
///
/// # Errors
///
/// [`DetailError`] where protobuf's own decoder would refuse the bytes.
pub fn decode_record(b: &[u8]) -> Result<RunRecord, DetailError> {
    let mut r = Reader { b, i: 0 };
    let mut rec = RunRecord::default();
    while let Some(f) = r.next()? {
        match f {
            Field::Varint(1, v) => rec.version = v as u32,
            Field::Varint(8, v) => rec.started_unix_ms = v as i64,
            Field::Varint(9, v) => rec.ended_unix_ms = v as i64,
            Field::Varint(11, v) => rec.sequence = v,
            Field::Bytes(n, v) => {
                let s = text(v)?;
                match n {
                    2 => rec.request_sha256 = s,
                    3 => rec.result_sha256 = s,
                    4 => rec.provider = s,
                    5 => rec.isolation = s,
                    6 => rec.environment = s,
                    7 => rec.policy = s,
                    10 => rec.session = s,
                    12 => rec.previous_sha256 = s,
                    13 => rec.record_sha256 = s,
                    14 => rec.software_identity = s,
                    15 => rec.software_rule_id = s,
                    16 => rec.unanswered = s,
                    17 => rec.instance = s,
                    1 | 8 | 9 | 11 => return Err(DetailError("an integer field is length-delimited")),
                    _ => {}
                }
            }
            Field::Varint(2..=7 | 10 | 12..=17, _) => return Err(DetailError("a string field is a varint")),
            _ => {}
        }
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_dispatched_is_field_1_varint() {
        assert_eq!(encode_not_dispatched(Reason::Isolation), vec![0x08, 5]);
        assert_eq!(decode_enum_and_string(&[0x08, 5]), Ok((5, String::new())));
    }

    #[test]
    fn session_ended_round_trips() {
        let b = encode_session_ended(6, "image changed");
        assert_eq!(decode_enum_and_string(&b), Ok((6, "image changed".into())));
    }

    #[test]
    fn records_round_trip_including_negative_times() {
        let r = RunRecord {
            version: 4,
            request_sha256: "ab".into(),
            started_unix_ms: -5,
            ended_unix_ms: 1_790_000_004_210,
            sequence: 3,
            unanswered: "unavailable".into(),
            instance: "k8s-pod-uid:x".into(),
            ..Default::default()
        };
        assert_eq!(decode_unanswered(&encode_unanswered(&r)), Ok(Some(r)));
    }

    #[test]
    fn malformed_bytes_are_refused_not_misread() {
        assert_eq!(decode_enum_and_string(&[0x08]), Err(DetailError("truncated varint")));
        assert_eq!(decode_enum_and_string(&[0x12, 5, b'a']), Err(DetailError("field overruns")));
        assert_eq!(decode_enum_and_string(&[0x0a, 0]), Err(DetailError("a known field has the wrong wire type")));
        assert_eq!(decode_record(&[0x00]).map(|_| ()), Err(DetailError("field number 0")));
        assert_eq!(decode_enum_and_string(&[0x12, 2, 0xff, 0xfe]), Err(DetailError("string is not UTF-8")));
        // Unknown fields are skipped, as protobuf skips them.
        assert_eq!(decode_enum_and_string(&[0x08, 1, 0x18, 9]), Ok((1, String::new())));
    }
}
