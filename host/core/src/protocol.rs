//! The protocol number and the headers that bind an answer to its request.

/// The protocol this daemon serves and its clients speak. 4 is the number the
/// published `plimsoll-client` 0.23 speaks: record version 4 (with `instance`).
pub const NUMBER: u32 = 4;

/// The header a client sends with 32 lowercase hex characters and the daemon echoes,
/// so a client ignores an answer that is not bound to its request.
pub const REQUEST_ID_HEADER: &str = "Plimsoll-Request-Id";

/// The header on answers written before any procedure's handler ran, naming the
/// not-dispatched reason.
pub const NOT_DISPATCHED_HEADER: &str = "Plimsoll-Not-Dispatched";

/// Why a request's protocol number was refused (reason `protocol`, nothing ran).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// The request states no number (invalid argument).
    #[error("protocol must be stated; this daemon serves protocol {NUMBER}")]
    Missing,
    /// The request states another number (unimplemented).
    #[error("this daemon serves protocol {NUMBER} and the request states {0}; nothing ran")]
    Other(u32),
}

/// Checks a request's protocol number before anything else of it is read.
///
/// # Errors
///
/// [`Mismatch`] when it is absent or not [`NUMBER`].
pub fn check(protocol: u32) -> Result<(), Mismatch> {
    match protocol {
        0 => Err(Mismatch::Missing),
        NUMBER => Ok(()),
        other => Err(Mismatch::Other(other)),
    }
}

/// Whether a request ID has the form clients send: 32 lowercase hex characters.
pub fn request_id_ok(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_name_the_number() {
        assert_eq!(check(NUMBER), Ok(()));
        assert_eq!(
            check(0).expect_err("refused").to_string(),
            "protocol must be stated; this daemon serves protocol 4"
        );
        assert_eq!(
            check(3).expect_err("refused").to_string(),
            "this daemon serves protocol 4 and the request states 3; nothing ran"
        );
    }

    #[test]
    fn request_ids() {
        assert!(request_id_ok("0123456789abcdef0123456789abcdef"));
        assert!(!request_id_ok("0123456789ABCDEF0123456789abcdef"));
        assert!(!request_id_ok("0123"));
        assert!(!request_id_ok("0123456789abcdef0123456789abcdeg"));
    }
}
