//! The Connect protocol's streaming envelope, as envd speaks it with the JSON
//! codec: each message is one flag byte, a four-byte big-endian length and the
//! JSON; flag 2 marks the one end-of-stream message, which carries the call's
//! error if it failed.

/// The largest message accepted (envd's data events are at most 32 KiB of
/// output, base64-encoded).
pub const MAX_MESSAGE: usize = 1 << 20;

/// One decoded envelope.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A response message.
    Message(Vec<u8>),
    /// The end-of-stream message.
    End(Vec<u8>),
}

/// Bytes read so far, cut into envelopes as they complete.
#[derive(Debug, Default)]
pub struct Frames {
    buf: Vec<u8>,
}

impl Frames {
    /// Adds bytes read from the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole envelope, if one has arrived.
    ///
    /// # Errors
    ///
    /// A compressed or unknown flag, or a length over [`MAX_MESSAGE`].
    pub fn next(&mut self) -> Result<Option<Frame>, String> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_MESSAGE {
            return Err(format!("a stream message of {len} bytes is over {MAX_MESSAGE}"));
        }
        if flags & !0x02 != 0 {
            return Err(format!("a stream message with flags {flags:#04x} (only 0x00 and 0x02 are spoken here)"));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        let body = self.buf[5..5 + len].to_vec();
        self.buf.drain(..5 + len);
        Ok(Some(if flags == 0x02 { Frame::End(body) } else { Frame::Message(body) }))
    }

    /// Whether bytes of an unfinished envelope are waiting.
    pub fn pending(&self) -> bool {
        !self.buf.is_empty()
    }
}

/// One request message in an envelope.
pub fn envelope(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The error an end-of-stream message carries, as `code: message`.
pub fn end_error(end: &[u8]) -> Result<Option<String>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(end).map_err(|_| "the end-of-stream message is not JSON".to_string())?;
    Ok(v.get("error").map(|e| {
        let code = e.get("code").and_then(|c| c.as_str()).unwrap_or("unknown");
        let message = e.get("message").and_then(|m| m.as_str()).unwrap_or("");
        format!("{code}: {message}")
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_cut_where_they_end_whatever_the_reads() {
        let mut wire = envelope(br#"{"event":{"start":{"pid":7}}}"#);
        wire.extend([0x02, 0, 0, 0, 2]);
        wire.extend(b"{}");
        let mut f = Frames::default();
        let mut got = Vec::new();
        for byte in &wire {
            f.push(&[*byte]);
            while let Some(frame) = f.next().expect("frame") {
                got.push(frame);
            }
        }
        assert_eq!(got, [Frame::Message(br#"{"event":{"start":{"pid":7}}}"#.to_vec()), Frame::End(b"{}".to_vec())]);
        assert!(!f.pending());
    }

    #[test]
    fn a_compressed_or_oversized_message_is_refused() {
        let mut f = Frames::default();
        f.push(&[0x01, 0, 0, 0, 1, b'x']);
        assert_eq!(
            f.next().expect_err("compressed"),
            "a stream message with flags 0x01 (only 0x00 and 0x02 are spoken here)"
        );
        let mut f = Frames::default();
        f.push(&[0x00, 0x7f, 0, 0, 0]);
        assert_eq!(f.next().expect_err("big"), "a stream message of 2130706432 bytes is over 1048576");
    }

    #[test]
    fn an_end_of_stream_error_is_read() {
        assert_eq!(end_error(b"{}"), Ok(None));
        assert_eq!(
            end_error(br#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#),
            Ok(Some("deadline_exceeded: context deadline exceeded".into()))
        );
        assert!(end_error(b"nope").is_err());
    }
}
