//! The agent's channel: the main process's stdin and stdout/stderr, attached by the
//! host for the session's life. Nothing else can reach them: the agent is PID 1 and
//! non-dumpable, so `/proc/1/fd/*` is closed to the guest uid, and every child gets
//! fresh pipes.
//!
//! Under gVisor a non-dumpable process's descriptors are not closed to its uid,
//! so the channel itself is not trusted: both directions are authenticated with a
//! session key the host sends in the first request, read before any code of the
//! caller's exists (the key then lives only in the agent's memory, which neither
//! runtime lets the guest read).
//!
//! A request is a 4-byte big-endian length, the 32-byte HMAC-SHA256 of the body
//! under the session key, and that many bytes of JSON. The answer is the payload's
//! output on stdout and stderr (each capped), then on stderr the status line
//! `\n<nonce> <JSON> <MAC>\n`, then on both streams the end marker `\n<nonce>.\n`.
//! The MAC (hex) is the HMAC-SHA256 under the session key of [`ANSWER_CONTEXT`],
//! the nonce, a zero byte, the SHA-256 of all the call's stdout, that of its
//! stderr before the status line, and the status JSON: bytes anything else wrote
//! into the channel fail it.

use std::io::{self, Read, Write};

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::files::File;

/// The largest request the agent reads (files are sent inline, in base64).
pub const MAX_REQUEST: usize = 256 << 20;
/// What an answer's MAC covers first, so it can be taken for nothing else.
pub const ANSWER_CONTEXT: &[u8] = b"plimsoll-agent answer v1\0";

/// The session key: 32 bytes, from the first request.
#[derive(Clone)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// The key a first request carries (64 hex digits).
    pub fn from_hex(hex_key: &str) -> Option<Key> {
        let mut k = [0u8; 32];
        hex::decode_to_slice(hex_key, &mut k).ok()?;
        Some(Key(k))
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes a key of any length.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"))
    }
}

/// One call from the host.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Fresh per call: names the status line and the end marker.
    pub nonce: String,
    /// The session key, in the first request only.
    #[serde(default)]
    pub key: Option<String>,
    pub kind: String,
    #[serde(default = "ten_seconds")]
    pub timeout_ms: u64,
    #[serde(default = "one_mib")]
    pub max_output: usize,
    #[serde(default)]
    pub language: String,
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub cell: u64,
    #[serde(default)]
    pub files: Vec<File>,
    /// A project's plan, for the project runner (its report key is inside).
    #[serde(default)]
    pub plan: serde_json::Value,
    /// A snippet's grant client settings ([`crate::procs::GRANT_ENV`] names only),
    /// for its process alone: a remote session's call that names its own grant.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(default = "thirty_two_mib")]
    pub report_cap: usize,
}

fn ten_seconds() -> u64 {
    10_000
}
fn one_mib() -> usize {
    1 << 20
}
fn thirty_two_mib() -> usize {
    32 << 20
}

/// Reads one request and checks its MAC under `key`, or, for the first request
/// (`key` empty), under the key it carries, which it then sets. `Ok(None)` at the
/// end of stdin (the host let go). Any failure leaves the channel unusable.
pub fn read_request(input: &mut impl Read, key: &mut Option<Key>) -> io::Result<Option<Request>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_REQUEST {
        return Err(io::Error::other(format!("a request of {len} bytes is over {MAX_REQUEST}")));
    }
    let mut mac = [0u8; 32];
    input.read_exact(&mut mac)?;
    let mut body = vec![0; len];
    input.read_exact(&mut body)?;
    let req: Request =
        serde_json::from_slice(&body).map_err(|e| io::Error::other(format!("a malformed request: {e}")))?;
    let k = match (key.as_ref(), req.key.as_deref()) {
        (None, Some(carried)) => {
            Key::from_hex(carried).ok_or_else(|| io::Error::other("the session key is not 64 hex digits"))?
        }
        (None, None) => return Err(io::Error::other("the first request carries no session key")),
        (Some(_), Some(_)) => return Err(io::Error::other("a request tried to set the session key again")),
        (Some(k), None) => k.clone(),
    };
    let mut m = k.mac();
    m.update(&body);
    m.verify_slice(&mac).map_err(|_| io::Error::other("a request failed its MAC"))?;
    *key = Some(k);
    Ok(Some(req))
}

/// How a call went, as the status line says it.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub exit: i32,
    pub timed_out: bool,
    /// The cell's interpreter was started for it.
    pub started: bool,
    /// The cell's interpreter ended (timed out, killed, or exited).
    pub ended: bool,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub disk_used_kb: u64,
    /// Processes the sweeps could not kill.
    pub leftover: u32,
    /// Nothing ran, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Milliseconds the agent spent on the call.
    pub ms: u64,
}

/// The payload's stdout and stderr on their way to the host, each capped.
#[derive(Debug)]
pub struct Sink<W: Write> {
    out: W,
    err: W,
    cap: usize,
    sent: [usize; 2],
    cut: [bool; 2],
    /// What was written to each stream, for the answer's MAC.
    hashes: [Sha256; 2],
}

/// Which stream a chunk belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Out = 0,
    Err = 1,
}

impl<W: Write> Sink<W> {
    pub fn new(out: W, err: W, cap: usize) -> Self {
        Sink { out, err, cap, sent: [0; 2], cut: [false; 2], hashes: [Sha256::new(), Sha256::new()] }
    }

    /// Forwards what fits under the cap; the rest is dropped and flagged.
    pub fn write(&mut self, stream: Stream, data: &[u8]) -> io::Result<()> {
        let i = stream as usize;
        let room = self.cap.saturating_sub(self.sent[i]);
        if data.len() > room {
            self.cut[i] = true;
        }
        let data = &data[..data.len().min(room)];
        self.sent[i] += data.len();
        if data.is_empty() {
            return Ok(());
        }
        self.hashes[i].update(data);
        match stream {
            Stream::Out => self.out.write_all(data),
            Stream::Err => self.err.write_all(data),
        }
    }

    /// Ends the call: the status line with its MAC on stderr, then the end marker on both.
    pub fn finish(mut self, key: &Key, nonce: &str, mut status: Status) -> io::Result<()> {
        status.stdout_truncated |= self.cut[0];
        status.stderr_truncated |= self.cut[1];
        let line = serde_json::to_string(&status).map_err(io::Error::other)?;
        let [out, err] = self.hashes;
        let mac = answer_mac(key, nonce, &out.finalize().into(), &err.finalize().into(), &line);
        let end = end_marker(nonce);
        self.err.write_all(format!("\n{nonce} {line} {mac}\n{end}").as_bytes())?;
        self.out.write_all(end.as_bytes())?;
        self.out.flush()?;
        self.err.flush()
    }
}

/// The hex MAC of an answer (see the module's documentation).
pub fn answer_mac(key: &Key, nonce: &str, stdout: &[u8; 32], stderr: &[u8; 32], status: &str) -> String {
    let mut m = key.mac();
    for part in [ANSWER_CONTEXT, nonce.as_bytes(), b"\0", stdout, stderr, status.as_bytes()] {
        m.update(part);
    }
    hex::encode(m.finalize().into_bytes())
}

/// The bytes that end a call's answer on both streams.
pub fn end_marker(nonce: &str) -> String {
    format!("\n{nonce}.\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    fn key() -> Key {
        Key::from_hex(KEY).expect("key")
    }

    fn framed(json: &str, key: &Key) -> Vec<u8> {
        let mut v = u32::try_from(json.len()).expect("len").to_be_bytes().to_vec();
        let mut m = key.mac();
        m.update(json.as_bytes());
        v.extend_from_slice(&m.finalize().into_bytes());
        v.extend_from_slice(json.as_bytes());
        v
    }

    fn read(bytes: &[u8], key: &mut Option<Key>) -> io::Result<Option<Request>> {
        read_request(&mut &bytes[..], key)
    }

    #[test]
    fn the_first_request_sets_the_key_and_every_request_is_checked_under_it() {
        let first = format!(r#"{{"nonce":"ab","kind":"ready","key":"{KEY}"}}"#);
        let mut input = framed(&first, &key());
        input.extend(framed(r#"{"nonce":"cd","kind":"cell","code":"1","cell":3}"#, &key()));
        let mut r = input.as_slice();
        let mut k = None;
        assert_eq!(read_request(&mut r, &mut k).expect("read").map(|q| q.kind), Some("ready".into()));
        assert!(k.is_some());
        let q = read_request(&mut r, &mut k).expect("read").expect("a request");
        assert_eq!((q.nonce.as_str(), q.kind.as_str(), q.cell, q.timeout_ms), ("cd", "cell", 3, 10_000));
        assert!(read_request(&mut r, &mut k).expect("read").is_none(), "the end of stdin");

        let other = Key::from_hex(&"11".repeat(32)).expect("key");
        let forged = framed(r#"{"nonce":"ef","kind":"cell"}"#, &other);
        assert_eq!(read(&forged, &mut k).expect_err("forged").to_string(), "a request failed its MAC");
        let again = framed(&first, &key());
        assert_eq!(
            read(&again, &mut k).expect_err("again").to_string(),
            "a request tried to set the session key again"
        );
        let keyless = framed(r#"{"nonce":"ab","kind":"ready"}"#, &key());
        assert_eq!(
            read(&keyless, &mut None).expect_err("keyless").to_string(),
            "the first request carries no session key"
        );
        assert!(read(&framed(&first, &key())[..40], &mut None).is_err(), "a cut frame");
        let huge = [0xff, 0xff, 0xff, 0xff];
        assert!(read(&huge, &mut None).is_err_and(|e| e.to_string().contains("over")));
    }

    #[test]
    fn output_is_capped_per_stream_and_the_answer_ends_with_the_marker_on_both() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut sink = Sink::new(&mut out, &mut err, 4);
        sink.write(Stream::Out, b"abc").expect("write");
        sink.write(Stream::Out, b"def").expect("write");
        sink.write(Stream::Err, b"xy").expect("write");
        sink.finish(&key(), "n0nce", Status { exit: 3, ..Status::default() }).expect("finish");
        assert_eq!(out, b"abcd\nn0nce.\n");
        let err = String::from_utf8(err).expect("utf8");
        assert!(err.starts_with("xy\nn0nce {\"exit\":3,"), "{err}");
        assert!(err.contains("\"stdoutTruncated\":true,\"stderrTruncated\":false"), "{err}");
        assert!(err.ends_with("\n\nn0nce.\n"), "{err}");
        // The MAC covers exactly what each stream carried.
        let line = err.strip_prefix("xy\nn0nce ").and_then(|l| l.strip_suffix("\n\nn0nce.\n")).expect("line");
        let (status, mac) = line.rsplit_once(' ').expect("mac");
        let (o, e): ([u8; 32], [u8; 32]) = (Sha256::digest(b"abcd").into(), Sha256::digest(b"xy").into());
        assert_eq!(mac, answer_mac(&key(), "n0nce", &o, &e, status));
        let shifted: [u8; 32] = Sha256::digest(b"abc").into();
        assert_ne!(mac, answer_mac(&key(), "n0nce", &shifted, &e, status));
    }
}
