//! Connect's unary error form: a status code name, a message, and typed details,
//! sent as JSON with the HTTP status the code maps to.

use serde::{Deserialize, Serialize};

use crate::refusal::Reason;
use crate::wire::details;
use crate::wire::json::{de_string, de_vec, decode_base64};

/// Connect's status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// `canceled`
    Canceled,
    /// `unknown`
    Unknown,
    /// `invalid_argument`
    InvalidArgument,
    /// `deadline_exceeded`
    DeadlineExceeded,
    /// `not_found`
    NotFound,
    /// `already_exists`
    AlreadyExists,
    /// `permission_denied`
    PermissionDenied,
    /// `resource_exhausted`
    ResourceExhausted,
    /// `failed_precondition`
    FailedPrecondition,
    /// `aborted`
    Aborted,
    /// `out_of_range`
    OutOfRange,
    /// `unimplemented`
    Unimplemented,
    /// `internal`
    Internal,
    /// `unavailable`
    Unavailable,
    /// `data_loss`
    DataLoss,
    /// `unauthenticated`
    Unauthenticated,
}

impl Code {
    const ALL: [Code; 16] = [
        Code::Canceled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Canceled => "canceled",
            Code::Unknown => "unknown",
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Aborted => "aborted",
            Code::OutOfRange => "out_of_range",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::DataLoss => "data_loss",
            Code::Unauthenticated => "unauthenticated",
        }
    }

    /// Reads a wire name.
    pub fn from_name(s: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The HTTP status Connect sends with this code.
    pub fn http_status(self) -> u16 {
        match self {
            Code::Canceled => 499,
            Code::Unknown | Code::Internal | Code::DataLoss => 500,
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
            Code::DeadlineExceeded => 504,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::PermissionDenied => 403,
            Code::ResourceExhausted => 429,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
            Code::Unauthenticated => 401,
        }
    }

    /// Connect's code for an HTTP answer that carries no Connect error body.
    pub fn from_http_status(status: u16) -> Code {
        match status {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502 | 503 | 504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }

    /// The code a refusal with `reason` is sent with, for refusals made in a handler.
    pub fn for_reason(reason: Reason) -> Code {
        match reason {
            Reason::Request => Code::InvalidArgument,
            Reason::Permission => Code::PermissionDenied,
            Reason::Protocol | Reason::Unsupported => Code::Unimplemented,
            Reason::Isolation | Reason::Environment => Code::FailedPrecondition,
            Reason::Capacity => Code::ResourceExhausted,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One error detail: a message type name and its binary form (base64, unpadded).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detail {
    /// The message's full type name.
    #[serde(rename = "type", default, deserialize_with = "de_string")]
    pub type_name: String,
    /// The message's binary encoding, base64.
    #[serde(default, deserialize_with = "de_string")]
    pub value: String,
}

/// A Connect error body.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The code's wire name.
    #[serde(default, deserialize_with = "de_string")]
    pub code: String,
    /// What went wrong, in plimsoll's words.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Typed details.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<Detail>,
}

fn b64(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(b)
}

impl ErrorBody {
    /// An error body with no details.
    pub fn new(code: Code, message: impl Into<String>) -> ErrorBody {
        ErrorBody { code: code.as_str().to_string(), message: message.into(), details: Vec::new() }
    }

    /// Adds the not-dispatched detail.
    pub fn not_dispatched(mut self, reason: Reason) -> ErrorBody {
        self.details.push(Detail {
            type_name: details::NOT_DISPATCHED.into(),
            value: b64(&details::encode_not_dispatched(reason)),
        });
        self
    }

    /// Adds the session-ended detail.
    pub fn session_ended(mut self, end: u32, detail: &str) -> ErrorBody {
        self.details.push(Detail {
            type_name: details::SESSION_ENDED.into(),
            value: b64(&details::encode_session_ended(end, detail)),
        });
        self
    }

    /// Adds the unanswered-call detail with its record.
    pub fn unanswered(mut self, record: &crate::wire::RunRecord) -> ErrorBody {
        self.details.push(Detail {
            type_name: details::UNANSWERED_CALL.into(),
            value: b64(&details::encode_unanswered(record)),
        });
        self
    }

    fn detail(&self, name: &str) -> Option<Vec<u8>> {
        self.details.iter().find(|d| d.type_name.rsplit('/').next() == Some(name)).and_then(|d| decode_base64(&d.value))
    }

    /// The not-dispatched reason, if the body carries a decodable one.
    pub fn reason(&self) -> Option<Reason> {
        let b = self.detail(details::NOT_DISPATCHED)?;
        let (n, _) = details::decode_enum_and_string(&b).ok()?;
        Reason::from_number(n)
    }

    /// The session-ended detail (end number and text), if present.
    pub fn session_end(&self) -> Option<(u32, String)> {
        details::decode_enum_and_string(&self.detail(details::SESSION_ENDED)?).ok()
    }

    /// The record of an unanswered call, if present.
    pub fn unanswered_record(&self) -> Option<crate::wire::RunRecord> {
        details::decode_unanswered(&self.detail(details::UNANSWERED_CALL)?).ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip_with_their_details() {
        let body = ErrorBody::new(Code::FailedPrecondition, "floor not met").not_dispatched(Reason::Isolation);
        let json = serde_json::to_string(&body).expect("json");
        assert_eq!(
            json,
            r#"{"code":"failed_precondition","message":"floor not met","details":[{"type":"plimsoll.v1.NotDispatched","value":"CAU"}]}"#
        );
        let back: ErrorBody = serde_json::from_str(&json).expect("read");
        assert_eq!(back.reason(), Some(Reason::Isolation));
        assert_eq!(Code::from_name(&back.code), Some(Code::FailedPrecondition));
    }

    #[test]
    fn codes_map_to_connects_http_statuses() {
        assert_eq!(Code::InvalidArgument.http_status(), 400);
        assert_eq!(Code::Unauthenticated.http_status(), 401);
        assert_eq!(Code::ResourceExhausted.http_status(), 429);
        assert_eq!(Code::Unimplemented.http_status(), 501);
        assert_eq!(Code::from_http_status(404), Code::Unimplemented);
        for c in Code::ALL {
            assert_eq!(Code::from_name(c.as_str()), Some(c));
        }
    }
}
