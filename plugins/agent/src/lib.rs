//! The sandbox image's programs as the provider plugins speak them, whatever
//! carries the bytes (docker's attached stream, a vendor's process input and
//! output). The resident session agent's channel (`runners/agent`, its `wire`
//! module): a request is its length, its HMAC under the session key and its JSON
//! body; an answer ends with a status line whose MAC covers the call's nonce,
//! both streams and the status, and one that fails the check was not the agent's
//! (something in the sandbox wrote to the channel). [`session`] serves a session
//! over it, [`relayed`] carries it one exec per call; [`runner`] plans a project runner's run and [`report`] finds its
//! authenticated report; [`session_glue!`] maps them to a plugin's WIT types.

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// `n` random bytes in hex; empty when the system has no randomness.
fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    if getrandom::fill(&mut b).is_err() {
        return String::new();
    }
    hex::encode(b)
}

mod glue;
pub mod relayed;
pub mod report;
pub mod runner;
pub mod session;

/// What an answer's MAC covers first (the agent's `wire::ANSWER_CONTEXT`).
pub const ANSWER_CONTEXT: &[u8] = b"plimsoll-agent answer v1\0";

/// The agent's status line: how the call went and what the sandbox holds now.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Trailer {
    pub exit: i32,
    pub timed_out: bool,
    pub started: bool,
    pub ended: bool,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub disk_used_kb: u64,
    /// Processes the sweep could not kill.
    pub leftover: u32,
    /// Nothing ran: a file could not be written, or no interpreter started.
    pub refused: Option<String>,
}

/// HMAC-SHA256 under `key`.
pub fn hmac(key: &[u8; 32]) -> Hmac<Sha256> {
    // HMAC takes a key of any length.
    <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC accepts any key length"))
}

/// A request as the agent reads it: length, HMAC of the body, body.
pub fn frame(key: &[u8; 32], body: &[u8]) -> Vec<u8> {
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    let mut m = hmac(key);
    m.update(body);
    let mut f = Vec::with_capacity(36 + body.len());
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&m.finalize().into_bytes());
    f.extend_from_slice(body);
    f
}

/// Why an answer is not the agent's.
#[derive(Debug, PartialEq, Eq)]
pub enum Unchecked {
    /// No status line under the call's nonce.
    Missing,
    /// A status line whose MAC does not hold.
    Forged,
}

/// Takes the status line `\n<nonce> <json> <mac>\n` off the end of `stderr` and
/// checks its MAC over the nonce, both streams and the status.
pub fn check_answer(key: &[u8; 32], nonce: &str, stdout: &[u8], stderr: &mut Vec<u8>) -> Result<Trailer, Unchecked> {
    let needle = format!("\n{nonce} ");
    let at = stderr.windows(needle.len()).rposition(|w| w == needle.as_bytes()).ok_or(Unchecked::Missing)?;
    let line = stderr.get(at + needle.len()..).and_then(|l| l.strip_suffix(b"\n")).ok_or(Unchecked::Missing)?;
    let line = std::str::from_utf8(line).map_err(|_| Unchecked::Forged)?;
    let (status, mac) = line.rsplit_once(' ').ok_or(Unchecked::Forged)?;
    let mac = hex::decode(mac).map_err(|_| Unchecked::Forged)?;
    let mut m = hmac(key);
    for part in [ANSWER_CONTEXT, nonce.as_bytes(), b"\0", &Sha256::digest(stdout), &Sha256::digest(&stderr[..at])] {
        m.update(part);
    }
    m.update(status.as_bytes());
    m.verify_slice(&mac).map_err(|_| Unchecked::Forged)?;
    let trailer = serde_json::from_str(status).map_err(|_| Unchecked::Forged)?;
    stderr.truncate(at);
    Ok(trailer)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    /// An answer as the agent writes it (its `wire::Sink::finish`).
    pub(crate) fn answered(key: &[u8; 32], nonce: &str, stdout: &[u8], stderr: &[u8], status: &str) -> Vec<u8> {
        let mut m = hmac(key);
        for part in [ANSWER_CONTEXT, nonce.as_bytes(), b"\0", &Sha256::digest(stdout), &Sha256::digest(stderr)] {
            m.update(part);
        }
        m.update(status.as_bytes());
        let mac = hex::encode(m.finalize().into_bytes());
        let mut e = stderr.to_vec();
        e.extend_from_slice(format!("\n{nonce} {status} {mac}\n").as_bytes());
        e
    }

    #[test]
    fn an_answer_is_the_agents_only_under_the_nonce_and_the_session_key() {
        let status = r#"{"exit":1,"started":true,"refused":"a b"}"#;
        let mut stderr = answered(&KEY, "abcd", b"out", b"boom\n", status);
        let t = check_answer(&KEY, "abcd", b"out", &mut stderr).expect("checked");
        assert_eq!((t.exit, t.started, t.refused.as_deref()), (1, true, Some("a b")));
        assert_eq!(stderr, b"boom\n", "the status line is taken off");

        let mut other_nonce = answered(&KEY, "abcd", b"out", b"", status);
        assert_eq!(check_answer(&KEY, "feed", b"out", &mut other_nonce).err(), Some(Unchecked::Missing));
        let mut other_key = answered(&[8; 32], "abcd", b"out", b"", status);
        assert_eq!(check_answer(&KEY, "abcd", b"out", &mut other_key).err(), Some(Unchecked::Forged));
        // Bytes something else wrote into either stream fail the MAC.
        let mut good = answered(&KEY, "abcd", b"out", b"", status);
        assert_eq!(check_answer(&KEY, "abcd", b"out INJECTED", &mut good).err(), Some(Unchecked::Forged));
        let mut injected = b"INJECTED".to_vec();
        injected.extend(answered(&KEY, "abcd", b"out", b"", status));
        assert_eq!(check_answer(&KEY, "abcd", b"out", &mut injected).err(), Some(Unchecked::Forged));
        let mut changed = answered(&KEY, "abcd", b"out", b"", status);
        let at = changed.windows(8).position(|w| w == b"\"exit\":1").expect("exit");
        changed[at + 7] = b'0';
        assert_eq!(check_answer(&KEY, "abcd", b"out", &mut changed).err(), Some(Unchecked::Forged));
        let mut cut = answered(&KEY, "abcd", b"out", b"", status);
        cut.pop();
        assert_eq!(check_answer(&KEY, "abcd", b"out", &mut cut).err(), Some(Unchecked::Missing));
    }

    #[test]
    fn a_request_frame_is_its_length_its_mac_and_its_body() {
        let f = frame(&KEY, b"{}");
        assert_eq!(&f[..4], &[0, 0, 0, 2]);
        let mut m = hmac(&KEY);
        m.update(b"{}");
        assert_eq!(&f[4..36], m.finalize().into_bytes().as_slice());
        assert_eq!(&f[36..], b"{}");
    }
}
