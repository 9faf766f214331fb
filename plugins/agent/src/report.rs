//! The project runner's authenticated report frame (`runners/project/runner.py`):
//!
//! ```text
//! \n<<<PLIMSOLL_REPORT_V2>>> <body length> <hex HMAC-SHA256(key, body)>\n<body>
//! ```
//!
//! Steps cannot read the key, so a frame whose MAC verifies came from the runner.
//! The first verifying frame wins; forged frames are skipped.

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

const MARKER: &[u8] = b"\n<<<PLIMSOLL_REPORT_V2>>> ";

/// One step as the runner reports it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub command: String,
    pub exit_code: i32,
    pub timed_out: bool,
    pub duration_ms: u32,
    pub stdout: String,
    pub stderr: String,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
}

/// An artifact as the runner reports it (content base64).
#[derive(Debug, Deserialize)]
pub struct Artifact {
    pub path: String,
    pub content: String,
}

/// The runner's report.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    #[serde(default)]
    pub artifacts_truncated: bool,
}

/// What the runner's stdout held.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// The first frame whose MAC verified: its body.
    Authentic(Vec<u8>),
    /// Frames, none authentic.
    Forged,
    /// No frame at all.
    Missing,
}

/// Finds the first authentic frame in `out`.
pub fn find(out: &[u8], key: &[u8]) -> Found {
    let mut seen = false;
    let mut at = 0;
    while let Some(pos) = find_from(out, MARKER, at) {
        seen = true;
        at = pos + 1;
        let rest = &out[pos + MARKER.len()..];
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else { continue };
        let Ok(header) = std::str::from_utf8(&rest[..nl]) else { continue };
        let mut parts = header.split(' ');
        let (Some(len), Some(mac), None) = (parts.next(), parts.next(), parts.next()) else { continue };
        let (Ok(len), Ok(mac)) = (len.parse::<usize>(), hex::decode(mac)) else { continue };
        let body = &rest[nl + 1..];
        if body.len() < len {
            continue;
        }
        let body = &body[..len];
        let Ok(mut m) = Hmac::<Sha256>::new_from_slice(key) else { continue };
        m.update(body);
        if m.verify_slice(&mac).is_ok() {
            return Found::Authentic(body.to_vec());
        }
    }
    if seen { Found::Forged } else { Found::Missing }
}

fn find_from(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    hay.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(key: &[u8], body: &[u8]) -> Vec<u8> {
        let mut m = Hmac::<Sha256>::new_from_slice(key).expect("key");
        m.update(body);
        let mac = hex::encode(m.finalize().into_bytes());
        let mut out = format!("\n<<<PLIMSOLL_REPORT_V2>>> {} {mac}\n", body.len()).into_bytes();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn the_authentic_frame_is_found() {
        let out = [b"noise".as_slice(), &frame(b"k", b"{\"steps\":[]}")].concat();
        assert_eq!(find(&out, b"k"), Found::Authentic(b"{\"steps\":[]}".to_vec()));
    }

    #[test]
    fn a_forged_frame_is_skipped_for_the_real_one() {
        let out = [frame(b"guess", b"{\"forged\":1}"), frame(b"k", b"{}")].concat();
        assert_eq!(find(&out, b"k"), Found::Authentic(b"{}".to_vec()));
        assert_eq!(find(&frame(b"guess", b"{}"), b"k"), Found::Forged);
    }

    #[test]
    fn no_frame_is_missing_and_a_short_body_is_not_accepted() {
        assert_eq!(find(b"plain output", b"k"), Found::Missing);
        let mut f = frame(b"k", b"{\"steps\":[]}");
        f.truncate(f.len() - 2);
        assert_eq!(find(&f, b"k"), Found::Forged);
    }
}
