//! Callers: who may call, and with which scopes.
//!
//! Three verifiers, in order of precedence: a clients file (each caller a principal
//! with its own token, stored only as a SHA-256 fingerprint), one shared token
//! (principal `static`), or open mode (principal `anon`, only for the disabled
//! provider or with `PLIMSOLL_INSECURE=1`). Tokens are compared as digests in
//! constant time and never logged.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The one scope every procedure requires.
pub const SCOPE_RUN: &str = "code:run";

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The caller's ID (`static` for the shared token, `anon` in open mode).
    pub id: String,
    scopes: Vec<String>,
}

impl Principal {
    /// Whether the caller holds `scope` (or `*`).
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope || s == "*")
    }
}

/// Why a request was not authenticated. Both are refusals (nothing ran).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header.
    #[error("missing bearer token")]
    Missing,
    /// A token that matches no caller, or a malformed header.
    #[error("invalid or expired token")]
    Invalid,
}

/// One entry of the clients file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientEntry {
    /// The caller's ID.
    pub id: String,
    /// Lowercase hex SHA-256 of the caller's token.
    pub token_sha256: String,
    /// The caller's scopes.
    pub scopes: Vec<String>,
    /// Paid seconds per day (metered providers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paid_seconds_per_day: Option<u64>,
}

/// The clients file: `{"clients": [...]}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientsFile {
    /// The callers.
    pub clients: Vec<ClientEntry>,
}

/// Why a clients file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClientsError {
    /// Not readable.
    #[error("reading the clients file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Not valid, with the reason.
    #[error("the clients file {path} is invalid: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Checks an ID: non-empty, trimmed, no control characters, not `*`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.trim() == id && id != "*" && !id.chars().any(char::is_control)
}

impl ClientsFile {
    /// Parses and checks a clients file's text.
    ///
    /// # Errors
    ///
    /// A message naming the first problem: unknown fields or trailing data, an empty
    /// list, a bad or repeated ID, a fingerprint that is not 64 hex characters or is
    /// shared, bad or repeated scopes.
    pub fn parse(text: &str) -> Result<ClientsFile, String> {
        let mut file: ClientsFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if file.clients.is_empty() {
            return Err("it lists no clients".into());
        }
        for (i, c) in file.clients.iter_mut().enumerate() {
            c.token_sha256 = c.token_sha256.trim().to_ascii_lowercase();
            if !valid_id(&c.id) {
                return Err(format!(
                    "client {i}: the id must be non-empty, trimmed, without control characters, and not *"
                ));
            }
            if c.token_sha256.len() != 64 || !c.token_sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("client {:?}: token_sha256 must be 64 hex characters", c.id));
            }
            if c.scopes.is_empty() {
                return Err(format!("client {:?}: it has no scopes", c.id));
            }
            for (j, s) in c.scopes.iter().enumerate() {
                if s.is_empty() || s.chars().any(char::is_whitespace) || c.scopes[..j].contains(s) {
                    return Err(format!("client {:?}: scope {s:?} is empty, has whitespace or repeats", c.id));
                }
            }
        }
        for (i, c) in file.clients.iter().enumerate() {
            if file.clients[..i].iter().any(|d| d.id == c.id) {
                return Err(format!("client id {:?} appears twice", c.id));
            }
            if file.clients[..i].iter().any(|d| d.token_sha256 == c.token_sha256) {
                return Err(format!("client {:?} shares its token fingerprint with another client", c.id));
            }
        }
        Ok(file)
    }

    /// Reads and checks a clients file.
    ///
    /// # Errors
    ///
    /// [`ClientsError`] naming the file and the problem.
    pub fn read(path: &Path) -> Result<ClientsFile, ClientsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ClientsError::Read { path: path.display().to_string(), source })?;
        ClientsFile::parse(&text).map_err(|message| ClientsError::Invalid { path: path.display().to_string(), message })
    }
}

/// The hex SHA-256 of a token, as the clients file stores it.
pub fn fingerprint(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Decides who a request is from.
#[derive(Clone)]
pub enum Verifier {
    /// A clients file: (fingerprint, principal) pairs.
    Clients(Vec<([u8; 32], Principal)>),
    /// One shared token, by its digest.
    Shared([u8; 32]),
    /// No authentication.
    Open,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verifier::Clients(c) => write!(f, "Verifier::Clients({} callers)", c.len()),
            Verifier::Shared(_) => f.write_str("Verifier::Shared"),
            Verifier::Open => f.write_str("Verifier::Open"),
        }
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Verifier {
    /// A verifier over a checked clients file.
    pub fn clients(file: &ClientsFile) -> Verifier {
        let entries = file
            .clients
            .iter()
            .filter_map(|c| {
                let mut fp = [0u8; 32];
                hex::decode_to_slice(&c.token_sha256, &mut fp).ok()?;
                Some((fp, Principal { id: c.id.clone(), scopes: c.scopes.clone() }))
            })
            .collect();
        Verifier::Clients(entries)
    }

    /// A verifier for one shared token.
    pub fn shared(token: &str) -> Verifier {
        Verifier::Shared(digest(token))
    }

    /// Whether requests are authenticated at all.
    pub fn is_open(&self) -> bool {
        matches!(self, Verifier::Open)
    }

    /// Authenticates an `Authorization` header value (`None` when absent).
    ///
    /// # Errors
    ///
    /// [`AuthError::Missing`] without a header, [`AuthError::Invalid`] for a
    /// malformed header or a token no caller holds.
    pub fn verify(&self, authorization: Option<&[u8]>) -> Result<Principal, AuthError> {
        if let Verifier::Open = self {
            return Ok(Principal { id: "anon".into(), scopes: vec!["*".into()] });
        }
        let header = authorization.ok_or(AuthError::Missing)?;
        let header = std::str::from_utf8(header).map_err(|_| AuthError::Invalid)?;
        let mut fields = header.split_ascii_whitespace();
        let (Some(scheme), Some(token), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(AuthError::Invalid);
        };
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthError::Invalid);
        }
        let presented = digest(token);
        match self {
            Verifier::Open => unreachable!("handled above"),
            Verifier::Shared(want) => {
                if bool::from(want.ct_eq(&presented)) {
                    Ok(Principal { id: "static".into(), scopes: vec![SCOPE_RUN.into()] })
                } else {
                    Err(AuthError::Invalid)
                }
            }
            Verifier::Clients(entries) => {
                // Every entry is compared, so the time does not depend on which matched.
                let mut found = None;
                for (fp, p) in entries {
                    if bool::from(fp.ct_eq(&presented)) {
                        found = Some(p);
                    }
                }
                found.cloned().ok_or(AuthError::Invalid)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

    fn file() -> ClientsFile {
        ClientsFile::parse(&format!(
            r#"{{"clients":[{{"id":"ci","token_sha256":"{}","scopes":["code:run"]}},{{"id":"reader","token_sha256":"{}","scopes":["other"]}}]}}"#,
            fingerprint(TOKEN).to_uppercase(),
            fingerprint("another token of some length")
        ))
        .expect("valid file")
    }

    #[test]
    fn bearer_tokens_authenticate_their_caller() {
        let v = Verifier::clients(&file());
        let p = v.verify(Some(format!("Bearer {TOKEN}").as_bytes())).expect("ci");
        assert_eq!(p.id, "ci");
        assert!(p.has_scope(SCOPE_RUN));
        let r = v.verify(Some(b"bearer another token of some length")).expect_err("three fields");
        assert_eq!(r, AuthError::Invalid);
        let p = v.verify(Some(b"BEARER   another")).expect_err("unknown token");
        assert_eq!(p, AuthError::Invalid);
        assert_eq!(v.verify(None), Err(AuthError::Missing));
        assert_eq!(v.verify(Some(format!("Basic {TOKEN}").as_bytes())), Err(AuthError::Invalid));
        assert_eq!(v.verify(Some(b"Bearer")), Err(AuthError::Invalid));
    }

    #[test]
    fn scopes_are_per_caller() {
        let v = Verifier::clients(&file());
        let reader = v.verify(Some(b"Bearer another token of some length"));
        // Three whitespace-separated fields: refused before any lookup.
        assert_eq!(reader, Err(AuthError::Invalid));
        let mut f = file();
        f.clients[1].token_sha256 = fingerprint("reader-token");
        let p = Verifier::clients(&f).verify(Some(b"Bearer reader-token")).expect("reader");
        assert_eq!(p.id, "reader");
        assert!(!p.has_scope(SCOPE_RUN));
    }

    #[test]
    fn the_shared_token_is_principal_static() {
        let v = Verifier::shared(TOKEN);
        assert_eq!(v.verify(Some(format!("Bearer {TOKEN}").as_bytes())).expect("ok").id, "static");
        assert_eq!(v.verify(Some(b"Bearer nope")), Err(AuthError::Invalid));
    }

    #[test]
    fn bad_clients_files_are_refused_with_the_reason() {
        let fp = fingerprint(TOKEN);
        let cases = [
            (r#"{"clients":[]}"#.to_string(), "it lists no clients"),
            (
                format!(r#"{{"clients":[{{"id":"*","token_sha256":"{fp}","scopes":["code:run"]}}]}}"#),
                "client 0: the id must be",
            ),
            (
                r#"{"clients":[{"id":"a","token_sha256":"abc","scopes":["code:run"]}]}"#.to_string(),
                "token_sha256 must be 64 hex",
            ),
            (format!(r#"{{"clients":[{{"id":"a","token_sha256":"{fp}","scopes":[]}}]}}"#), "it has no scopes"),
            (format!(r#"{{"clients":[{{"id":"a","token_sha256":"{fp}","scopes":["a b"]}}]}}"#), "has whitespace"),
            (
                format!(
                    r#"{{"clients":[{{"id":"a","token_sha256":"{fp}","scopes":["x"]}},{{"id":"a","token_sha256":"{}","scopes":["x"]}}]}}"#,
                    fingerprint("z")
                ),
                "appears twice",
            ),
            (
                format!(
                    r#"{{"clients":[{{"id":"a","token_sha256":"{fp}","scopes":["x"]}},{{"id":"b","token_sha256":"{fp}","scopes":["x"]}}]}}"#
                ),
                "shares its token fingerprint",
            ),
            (
                format!(r#"{{"clients":[{{"id":"a","token_sha256":"{fp}","scopes":["x"],"role":"admin"}}]}}"#),
                "unknown field",
            ),
            (
                format!(r#"{{"clients":[{{"id":"a","token_sha256":"{fp}","scopes":["x"]}}]}} trailing"#),
                "trailing characters",
            ),
        ];
        for (text, want) in cases {
            let e = ClientsFile::parse(&text).expect_err(want);
            assert!(e.contains(want), "{want}: {e}");
        }
    }
}
