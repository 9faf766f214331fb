//! The attest harness: the daemon never holds a signing key (it runs hostile code,
//! the wasm provider in-process), so a harness outside it recomputes every record
//! from its own copy of the request and response, refuses a mismatch, and signs.
//!
//! - [`dsse`]: DSSE envelopes over the pre-authentication encoding.
//! - [`statement`]: in-toto Statement v1 for run records, session closes, bundle
//!   links, and statements of a caller's own predicate type.
//! - [`signer`]: who signs (a key file; any [`signer::Signer`]).
//! - [`bom`]: a verified bundle's runs as a CycloneDX bill of materials, and its check.
//! - [`bundle`]: the JSON Lines bundle, its canonical lines, links and checkpoints,
//!   verification, and appending under a lock with truncate-back on failure.

pub mod bom;
pub mod bundle;
pub mod dsse;
pub mod signer;
pub mod statement;

pub use bundle::{
    Completeness, Entry, Replayable, Report, append, append_with, check_appendable, replayable, verify_bundle,
    verify_entry, verify_progress,
};
pub use dsse::{Envelope, PAYLOAD_TYPE, pae};
pub use signer::{KeySigner, Signer};

/// Why something was not signed or did not verify. Each names what failed.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttestError {
    /// No signature verifies under the key.
    #[error("signature: {0}")]
    Signature(String),
    /// The statement is malformed or of the wrong kind.
    #[error("statement: {0}")]
    Statement(String),
    /// The record's own digest does not recompute; it was not signed.
    #[error("unchecked record: {0}")]
    Unchecked(String),
    /// Only the current record version is signed.
    #[error("only signs run record version {current}, not version {0}", current = plimsoll_core::record::VERSION)]
    SigningVersion(u32),
    /// A session's chain is broken.
    #[error("broken session chain: {0}")]
    Chain(String),
    /// A stored request or response does not match the signed record.
    #[error("stored exchange: {0}")]
    Stored(String),
    /// The bundle's links are broken.
    #[error("broken bundle chain: {0}")]
    Link(String),
    /// The bundle does not end in a checkpoint.
    #[error("incomplete bundle: {0}")]
    Incomplete(String),
    /// A line is not canonical.
    #[error("non-canonical line: {0}")]
    Line(String),
    /// A bill of materials is not what its bundle gives.
    #[error("bill of materials: {0}")]
    Bom(String),
    /// A key could not be read.
    #[error(transparent)]
    Key(#[from] plimsoll_keys::KeyError),
    /// The bundle file could not be read, locked or written.
    #[error("{0}")]
    File(String),
    /// One line's failure.
    #[error("line {line}: {error}")]
    At {
        /// 1-based.
        line: usize,
        /// What failed there.
        error: Box<AttestError>,
    },
}

impl AttestError {
    /// This error, at `line`.
    pub fn at(self, line: usize) -> AttestError {
        AttestError::At { line, error: Box::new(self) }
    }

    /// The error without its line.
    pub fn kind(&self) -> &AttestError {
        match self {
            AttestError::At { error, .. } => error.kind(),
            other => other,
        }
    }
}
