//! What the host reads of a gRPC exchange to book a plugin's sandboxes itself:
//! the status, and one string field of a message by its path of field numbers;
//! and the framing of a relay stream's messages, each carrying a piece of a
//! byte stream in one field. Nothing else of a body is looked at.

/// How the host books the targets of an endpoint spoken in gRPC: a create
/// method whose OK answer names what it made, and a delete method whose request
/// names what it deleted (an OK or `NOT_FOUND` answer forgets it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrpcBooking {
    /// The create method's path (`/openshell.v1.OpenShell/CreateSandbox`).
    pub create: String,
    /// Field numbers from the create's answer to the target's name.
    pub made_at: Vec<u32>,
    /// The delete method's path.
    pub delete: String,
    /// Field numbers from the delete's request to the target's name.
    pub deleted_at: Vec<u32>,
}

/// gRPC's `NOT_FOUND`.
const NOT_FOUND: u32 = 5;

/// The gRPC status of an answer: from its trailers, or from its head when it
/// carried no message.
fn status(headers: &[(String, String)], trailers: &[(String, String)]) -> Option<u32> {
    let find = |h: &[(String, String)]| {
        h.iter().find(|(k, _)| k.eq_ignore_ascii_case("grpc-status")).and_then(|(_, v)| v.trim().parse().ok())
    };
    find(trailers).or_else(|| find(headers))
}

/// The first message of a gRPC body, uncompressed.
fn first_message(body: &[u8]) -> Option<&[u8]> {
    let (head, rest) = body.split_at_checked(5)?;
    if head[0] != 0 {
        return None;
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    rest.get(..len)
}

fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The last length-delimited field `n` of `msg` (protobuf's last one wins).
fn field(msg: &[u8], n: u32) -> Option<&[u8]> {
    let mut at = 0;
    let mut found = None;
    while at < msg.len() {
        let key = varint(msg, &mut at)?;
        match key & 7 {
            0 => {
                varint(msg, &mut at)?;
            }
            1 => at = at.checked_add(8)?,
            2 => {
                let len = usize::try_from(varint(msg, &mut at)?).ok()?;
                let value = msg.get(at..at.checked_add(len)?)?;
                if key >> 3 == u64::from(n) {
                    found = Some(value);
                }
                at += len;
            }
            5 => at = at.checked_add(4)?,
            _ => return None,
        }
    }
    (at == msg.len()).then_some(found).flatten()
}

/// `msg` as one gRPC message: uncompressed, its length before it.
pub(super) fn framed(msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 5);
    out.push(0);
    out.extend_from_slice(&u32::try_from(msg.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(msg);
    out
}

/// Takes every whole message off the front of `buf`, leaving a part one.
///
/// # Errors
///
/// A compressed message, or one over `max` bytes: the stream is unusable.
pub(super) fn take_messages(buf: &mut Vec<u8>, max: usize) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(head) = buf.get(at..at + 5) {
        if head[0] != 0 {
            return Err("a compressed message, which was not asked for".into());
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > max {
            return Err(format!("a message of {len} bytes, over the {max} a relay takes"));
        }
        let Some(msg) = buf.get(at + 5..at + 5 + len) else { break };
        out.push(msg.to_vec());
        at += 5 + len;
    }
    buf.drain(..at);
    Ok(out)
}

/// A message whose one field `n` holds `data`, length-delimited.
pub(super) fn bytes_message(n: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 12);
    for mut v in [u64::from(n) << 3 | 2, data.len() as u64] {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    out.extend_from_slice(data);
    out
}

/// The bytes of a message whose only field is `n`, length-delimited; empty for
/// an empty message (proto3 leaves empty bytes out). None for any other field.
pub(super) fn only_bytes(msg: &[u8], n: u32) -> Option<&[u8]> {
    let mut at = 0;
    let mut found: &[u8] = &[];
    while at < msg.len() {
        let key = varint(msg, &mut at)?;
        if key != u64::from(n) << 3 | 2 {
            return None;
        }
        let len = usize::try_from(varint(msg, &mut at)?).ok()?;
        found = msg.get(at..at.checked_add(len)?)?;
        at += len;
    }
    Some(found)
}

/// The string at `path` in `msg`.
fn string_at(msg: &[u8], path: &[u32]) -> Option<String> {
    let mut here = msg;
    for n in path {
        here = field(here, *n)?;
    }
    String::from_utf8(here.to_vec()).ok()
}

/// A path without its query: a server routes a method by its path alone.
fn without_query(path: &str) -> &str {
    path.split('?').next().unwrap_or_default()
}

impl GrpcBooking {
    /// The target an answer to `path` says it made.
    pub(super) fn made(&self, path: &str, headers: &[(String, String)], answer: &super::Answer) -> Option<String> {
        if without_query(path) != self.create || answer.status != 200 || status(headers, &answer.trailers) != Some(0) {
            return None;
        }
        string_at(first_message(&answer.body)?, &self.made_at)
    }

    /// The target a delete request to `path` named, once its answer says it is gone.
    pub(super) fn deleted(&self, path: &str, request: &[u8], answer: &super::Answer) -> Option<String> {
        if without_query(path) != self.delete || answer.status != 200 {
            return None;
        }
        let code = status(&answer.headers, &answer.trailers)?;
        if code != 0 && code != NOT_FOUND {
            return None;
        }
        string_at(first_message(request)?, &self.deleted_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(n: u8, v: &[u8]) -> Vec<u8> {
        let mut out = vec![n << 3 | 2, v.len() as u8];
        out.extend_from_slice(v);
        out
    }

    fn answer(body: Vec<u8>, code: &str) -> super::super::Answer {
        super::super::Answer {
            status: 200,
            headers: vec![("content-type".into(), "application/grpc".into())],
            body,
            trailers: vec![("grpc-status".into(), code.into())],
            captured: vec![],
        }
    }

    fn booking() -> GrpcBooking {
        GrpcBooking {
            create: "/s/Create".into(),
            made_at: vec![1, 1, 2],
            delete: "/s/Delete".into(),
            deleted_at: vec![1],
        }
    }

    #[test]
    fn a_create_books_the_name_its_answer_gives_and_only_when_ok() {
        // SandboxResponse{sandbox{metadata{id=1 "u", name=2 "plimsoll-1"}, a varint before}}.
        let meta = [len_field(1, b"u"), len_field(2, b"plimsoll-1")].concat();
        let sandbox = [vec![0x18, 0x96, 0x01], len_field(1, &meta)].concat();
        let body = framed(&len_field(1, &sandbox));
        let b = booking();
        let a = answer(body.clone(), "0");
        assert_eq!(b.made("/s/Create", &a.headers, &a), Some("plimsoll-1".into()));
        assert_eq!(b.made("/s/Other", &a.headers, &a), None);
        assert_eq!(b.made("/s/Create?x=1", &a.headers, &a), Some("plimsoll-1".into()), "a query hides nothing");
        assert_eq!(b.made("/s/Create", &a.headers, &answer(body.clone(), "13")), None);
        assert_eq!(b.made("/s/Create", &a.headers, &answer(body[..body.len() - 2].to_vec(), "0")), None);
    }

    #[test]
    fn a_delete_forgets_the_name_it_asked_for_once_gone_or_not_found() {
        let req = framed(&len_field(1, b"plimsoll-1"));
        let b = booking();
        assert_eq!(b.deleted("/s/Delete", &req, &answer(vec![], "0")), Some("plimsoll-1".into()));
        assert_eq!(b.deleted("/s/Delete", &req, &answer(vec![], "5")), Some("plimsoll-1".into()));
        assert_eq!(b.deleted("/s/Delete", &req, &answer(vec![], "13")), None, "a failed delete is still held");
    }

    #[test]
    fn a_relay_message_carries_one_field_and_messages_are_taken_whole() {
        let big = vec![7u8; 300];
        let msg = bytes_message(2, &big);
        assert_eq!(only_bytes(&msg, 2), Some(big.as_slice()));
        assert_eq!(only_bytes(&[], 2), Some(&[][..]), "an empty message is an empty piece");
        assert_eq!(only_bytes(&msg, 1), None, "another field is not the stream's bytes");
        assert_eq!(only_bytes(&[msg.clone(), len_field(1, b"x")].concat(), 2), None);
        assert_eq!(only_bytes(&msg[..msg.len() - 1], 2), None, "a cut message");
        let mut buf = [framed(b"ab"), framed(&msg)].concat();
        let tail = buf.split_off(buf.len() - 3);
        assert_eq!(take_messages(&mut buf, 1024), Ok(vec![b"ab".to_vec()]));
        buf.extend_from_slice(&tail);
        assert_eq!(take_messages(&mut buf, 1024), Ok(vec![msg]));
        assert!(buf.is_empty());
        let mut huge = framed(&[0u8; 40]);
        assert!(take_messages(&mut huge, 32).is_err_and(|e| e.contains("over the 32")));
        let mut compressed = framed(b"z");
        compressed[0] = 1;
        assert_eq!(
            take_messages(&mut compressed, 32).expect_err("compressed"),
            "a compressed message, which was not asked for"
        );
    }
}
