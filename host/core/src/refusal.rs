//! Refusals: answers that prove nothing ran.
//!
//! Every refusal carries a [`Reason`]. An error without one means the code may have
//! run, whatever its status code, and is never retried automatically.

use std::fmt;

/// Why nothing ran, in the terms a caller acts on (protocol `NotDispatchedReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Malformed or out of bounds; every daemon refuses it the same way.
    Request,
    /// Authentication, scope, or a grant profile's caller list.
    Permission,
    /// The daemon serves another protocol number.
    Protocol,
    /// The provider cannot do it, or is disabled.
    Unsupported,
    /// The provider's current evidence is below the request's floor.
    Isolation,
    /// Shed by admission or a rate limit; retry later or elsewhere.
    Capacity,
    /// The environment is not what was asked for or proved.
    Environment,
}

impl Reason {
    /// Every reason, in wire-number order.
    pub const ALL: [Reason; 7] = [
        Reason::Request,
        Reason::Permission,
        Reason::Protocol,
        Reason::Unsupported,
        Reason::Isolation,
        Reason::Capacity,
        Reason::Environment,
    ];

    /// The short name (`request`, `isolation`), as the `Plimsoll-Not-Dispatched`
    /// header and the CLI print it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Request => "request",
            Reason::Permission => "permission",
            Reason::Protocol => "protocol",
            Reason::Unsupported => "unsupported",
            Reason::Isolation => "isolation",
            Reason::Capacity => "capacity",
            Reason::Environment => "environment",
        }
    }

    /// The protobuf enum number (`NOT_DISPATCHED_REASON_*`).
    pub fn number(self) -> u32 {
        match self {
            Reason::Request => 1,
            Reason::Permission => 2,
            Reason::Protocol => 3,
            Reason::Unsupported => 4,
            Reason::Isolation => 5,
            Reason::Capacity => 6,
            Reason::Environment => 7,
        }
    }

    /// The reason for a protobuf enum number; 0 and unknown numbers have none.
    pub fn from_number(n: u32) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.number() == n)
    }

    /// The reason for a short name.
    pub fn from_name(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: nothing ran, and `message` says why in plimsoll's own words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    /// Why nothing ran.
    pub reason: Reason,
    /// Plimsoll's text for the caller; never guest output.
    pub message: String,
}

impl Refusal {
    /// A refusal with the given reason and message.
    pub fn new(reason: Reason, message: impl Into<String>) -> Refusal {
        Refusal { reason, message: message.into() }
    }

    /// A malformed or out-of-bounds request.
    pub fn request(message: impl Into<String>) -> Refusal {
        Refusal::new(Reason::Request, message)
    }

    /// Something the provider cannot do.
    pub fn unsupported(message: impl Into<String>) -> Refusal {
        Refusal::new(Reason::Unsupported, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_names_round_trip() {
        for r in Reason::ALL {
            assert_eq!(Reason::from_number(r.number()), Some(r));
            assert_eq!(Reason::from_name(r.as_str()), Some(r));
        }
        assert_eq!(Reason::from_number(0), None);
        assert_eq!(Reason::from_name("unknown"), None);
    }
}
