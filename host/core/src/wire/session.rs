//! The session messages of protocol 4: `OpenSession`, `SessionRun`'s answer and
//! `CloseSession`, with the session-end enum. Field names and numbers follow the
//! published client (`plimsoll-client` 0.23.0), which reads them.

use serde::{Deserialize, Serialize};

use super::json::{de_i64, de_string, de_u32, de_u64, de_vec, is_zero, ser_i64, ser_u64};
use super::{RunResponse, SoftwareRule};

/// Why a session ended (`SessionEnd`); `Open` while it has not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SessionEnd {
    /// Not ended (`SESSION_END_UNSPECIFIED`).
    #[default]
    Open,
    /// Closed by its caller.
    Closed,
    /// Its lifetime passed.
    Expired,
    /// Its files outgrew the disk budget.
    DiskExceeded,
    /// The sandbox's main process ended (out of memory, say).
    MainProcessEnded,
    /// A wall could no longer be verified.
    BoundaryFailed,
    /// The sandbox changed between calls (a read-back differed).
    SandboxChanged,
    /// The daemon shut down.
    Shutdown,
    /// A newer session of the same owner replaced it at the per-owner cap.
    Replaced,
    /// The provider no longer knows the sandbox.
    NotFound,
    /// Opened, but never claimed by its caller.
    Unclaimed,
}

impl SessionEnd {
    const NAMES: [(&'static str, &'static str, SessionEnd); 11] = [
        ("SESSION_END_UNSPECIFIED", "open", SessionEnd::Open),
        ("SESSION_END_CLOSED", "closed", SessionEnd::Closed),
        ("SESSION_END_EXPIRED", "expired", SessionEnd::Expired),
        ("SESSION_END_DISK_EXCEEDED", "disk_exceeded", SessionEnd::DiskExceeded),
        ("SESSION_END_MAIN_PROCESS_ENDED", "main_process_ended", SessionEnd::MainProcessEnded),
        ("SESSION_END_BOUNDARY_FAILED", "boundary_failed", SessionEnd::BoundaryFailed),
        ("SESSION_END_SANDBOX_CHANGED", "sandbox_changed", SessionEnd::SandboxChanged),
        ("SESSION_END_SHUTDOWN", "shutdown", SessionEnd::Shutdown),
        ("SESSION_END_REPLACED", "replaced", SessionEnd::Replaced),
        ("SESSION_END_NOT_FOUND", "not_found", SessionEnd::NotFound),
        ("SESSION_END_UNCLAIMED", "unclaimed", SessionEnd::Unclaimed),
    ];

    /// The wire number.
    pub fn number(self) -> u32 {
        Self::NAMES.iter().position(|(_, _, e)| *e == self).map_or(0, |i| i as u32)
    }

    /// The enum from its wire number.
    pub fn from_number(n: u32) -> Option<SessionEnd> {
        Self::NAMES.get(n as usize).map(|(_, _, e)| *e)
    }

    /// The short name clients and logs use (`closed`, `sandbox_changed`).
    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, _, e)| *e == self).map_or("open", |(_, n, _)| n)
    }

    fn wire_name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, _, e)| *e == self).map_or("SESSION_END_UNSPECIFIED", |(w, _, _)| w)
    }
}

impl Serialize for SessionEnd {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.wire_name())
    }
}

impl<'de> Deserialize<'de> for SessionEnd {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Number(i64),
        }
        match Option::<Raw>::deserialize(d)? {
            None => Ok(SessionEnd::Open),
            Some(Raw::Name(n)) => Self::NAMES
                .iter()
                .find(|(w, _, _)| *w == n)
                .map(|(_, _, e)| *e)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown session end {n:?}"))),
            Some(Raw::Number(n)) => u32::try_from(n)
                .ok()
                .and_then(SessionEnd::from_number)
                .ok_or_else(|| serde::de::Error::custom(format!("unknown session end {n}"))),
        }
    }
}

/// `OpenSessionRequest`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpenSessionRequest {
    /// The protocol number the client speaks; required.
    #[serde(default, deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub protocol: u32,
    /// The floor for every call of the session.
    #[serde(
        default,
        alias = "minimum_isolation",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub minimum_isolation: String,
    /// An opaque correlation ID for the audit line.
    #[serde(default, alias = "trace_id", deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub trace_id: String,
    /// Shortens the daemon's session lifetime; 0 keeps it.
    #[serde(
        default,
        alias = "lifetime_ms",
        deserialize_with = "de_i64",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub lifetime_ms: i64,
    /// Shortens the daemon's idle timeout; 0 keeps it.
    #[serde(default, alias = "idle_timeout_ms", deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub idle_timeout_ms: u32,
    /// A rule for the session's selected software.
    #[serde(default, alias = "software_rule", skip_serializing_if = "Option::is_none")]
    pub software_rule: Option<SoftwareRule>,
    /// A warm-pool hint: the languages the cells will use.
    #[serde(default, deserialize_with = "de_vec", skip_serializing_if = "Vec::is_empty")]
    pub languages: Vec<String>,
    /// The caller's end user, as a keyed digest; feeds the per-owner cap.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// A grant profile (one that allows sessions) every call of the session holds:
    /// its sandbox reaches the profile's broker during each call and nothing
    /// between calls. plimsoll's extension of protocol 4; empty, none.
    #[serde(
        default,
        alias = "grant_profile",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub grant_profile: String,
}

/// `OpenSessionResponse`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpenSessionResponse {
    /// The session's capability: 128 random bits as 32 hex digits.
    #[serde(default, alias = "session_id", deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    /// SHA-256 of the session ID, as the session's records carry it.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub session: String,
    /// The provider.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    /// The tier measured at open.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub isolation: String,
    /// When the session's lifetime ends.
    #[serde(
        default,
        alias = "expires_unix_ms",
        deserialize_with = "de_i64",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub expires_unix_ms: i64,
    /// The idle timeout in force.
    #[serde(default, alias = "idle_timeout_ms", deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub idle_timeout_ms: u32,
    /// The session's selected executable manifest.
    #[serde(
        default,
        alias = "software_identity",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub software_identity: String,
}

/// `SessionRunResponse`: the call's run, and whether the call ended the session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SessionRunResponse {
    /// The call's answer, record included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunResponse>,
    /// Set when this call ended the session.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ended: SessionEnd,
    /// Plimsoll's words on why, when it ended.
    #[serde(default, alias = "end_detail", deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub end_detail: String,
}

/// `CloseSessionRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CloseSessionRequest {
    /// The protocol number the client speaks; required.
    #[serde(default, deserialize_with = "de_u32", skip_serializing_if = "is_zero")]
    pub protocol: u32,
    /// The session's capability.
    #[serde(default, alias = "session_id", deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub session_id: String,
}

/// `CloseSessionResponse`: what the daemon counted, for the client to compare with
/// the chain it followed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CloseSessionResponse {
    /// SHA-256 of the session ID.
    #[serde(default, deserialize_with = "de_string", skip_serializing_if = "String::is_empty")]
    pub session: String,
    /// Calls that executed (answered or not).
    #[serde(default, deserialize_with = "de_u64", serialize_with = "ser_u64", skip_serializing_if = "is_zero")]
    pub calls: u64,
    /// The last call's record digest.
    #[serde(
        default,
        alias = "last_record_sha256",
        deserialize_with = "de_string",
        skip_serializing_if = "String::is_empty"
    )]
    pub last_record_sha256: String,
    /// `CLOSED`, or the earlier end.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ended: SessionEnd,
}

/// A session's timing, as the operator configured it and a request shortened it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionTimes {
    /// The whole session's lifetime, in milliseconds.
    pub lifetime_ms: u64,
    /// Idle time before the session is suspended, in milliseconds.
    pub idle_ms: u32,
}

/// The shortest idle timeout a request can ask for; shorter requests are raised to it.
pub const MIN_IDLE_MS: u32 = 1000;

impl SessionTimes {
    /// Applies a request's `lifetime_ms` and `idle_timeout_ms`: they may only
    /// shorten the operator's; zero keeps the operator's; an idle timeout under
    /// one second is raised to one second.
    ///
    /// # Errors
    ///
    /// A negative lifetime, in the protocol's words.
    pub fn shortened_by(self, lifetime_ms: i64, idle_timeout_ms: u32) -> Result<SessionTimes, String> {
        let lifetime_ms = match lifetime_ms {
            l if l < 0 => return Err(format!("invalid request: lifetimeMs {l} is negative")),
            0 => self.lifetime_ms,
            l => (l as u64).min(self.lifetime_ms),
        };
        let idle_ms = match idle_timeout_ms {
            0 => self.idle_ms,
            i => i.min(self.idle_ms).max(MIN_IDLE_MS.min(self.idle_ms)),
        };
        Ok(SessionTimes { lifetime_ms, idle_ms })
    }
}

/// Checks an `owner` as the daemon receives it: `[A-Za-z0-9._:-]{1,64}` (clients
/// send a keyed digest, 64 hex digits).
///
/// # Errors
///
/// The rule it breaks, in the protocol's words.
pub fn check_owner(owner: &str) -> Result<(), String> {
    if owner.is_empty() || owner.len() > 64 {
        return Err(format!("invalid request: owner must be 1 to 64 characters, not {}", owner.len()));
    }
    if let Some(c) = owner.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))) {
        return Err(format!("invalid request: owner holds {c:?}; use letters, digits and . _ : -"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::from_json;

    #[test]
    fn session_ends_round_trip_by_name_and_number() {
        for n in 0..11 {
            let e = SessionEnd::from_number(n).expect("known");
            assert_eq!(e.number(), n);
            let json = serde_json::to_string(&e).expect("json");
            assert_eq!(serde_json::from_str::<SessionEnd>(&json).expect("by name"), e);
            assert_eq!(serde_json::from_str::<SessionEnd>(&n.to_string()).expect("by number"), e);
        }
        assert_eq!(SessionEnd::SandboxChanged.name(), "sandbox_changed");
        assert_eq!(serde_json::to_string(&SessionEnd::Replaced).expect("json"), "\"SESSION_END_REPLACED\"");
        assert_eq!(serde_json::from_str::<SessionEnd>("11").expect_err("e1").to_string(), "unknown session end 11");
        assert_eq!(
            serde_json::from_str::<SessionEnd>("\"SESSION_END_LOST\"").expect_err("e2").to_string(),
            "unknown session end \"SESSION_END_LOST\""
        );
    }

    #[test]
    fn the_messages_read_what_the_published_client_sends_and_expects() {
        let open: OpenSessionRequest = from_json(
            br#"{"protocol":4,"minimumIsolation":"kernel","lifetimeMs":"60000","idleTimeoutMs":5000,"languages":["python"],"owner":"ab12"}"#,
        )
        .expect("open");
        assert_eq!((open.lifetime_ms, open.idle_timeout_ms, open.owner.as_str()), (60_000, 5000, "ab12"));
        let resp = OpenSessionResponse {
            session_id: "0123456789abcdef0123456789abcdef".into(),
            session: "f".repeat(64),
            sandbox: "wasm".into(),
            isolation: "process".into(),
            expires_unix_ms: 1_796_000_000_000,
            idle_timeout_ms: 300_000,
            software_identity: String::new(),
        };
        let json = serde_json::to_string(&resp).expect("json");
        assert!(json.contains(r#""sessionId":"0123456789abcdef0123456789abcdef""#), "{json}");
        assert!(json.contains(r#""expiresUnixMs":"1796000000000""#), "{json}");
        assert_eq!(from_json::<OpenSessionResponse>(json.as_bytes()).expect("back"), resp);
        let close = CloseSessionResponse {
            session: "f".repeat(64),
            calls: 3,
            last_record_sha256: "e".repeat(64),
            ended: SessionEnd::Closed,
        };
        let json = serde_json::to_string(&close).expect("json");
        assert!(json.contains(r#""calls":"3""#) && json.contains(r#""ended":"SESSION_END_CLOSED""#), "{json}");
        let run: SessionRunResponse =
            from_json(br#"{"run":{"sandbox":"wasm"},"ended":"SESSION_END_EXPIRED","endDetail":"lifetime"}"#)
                .expect("run");
        assert_eq!((run.ended, run.end_detail.as_str()), (SessionEnd::Expired, "lifetime"));
        let extra = from_json::<CloseSessionRequest>(br#"{"protocol":4,"sessionId":"x","extra":1}"#).expect_err("e3");
        assert!(
            format!("{extra:?}")
                .contains("unknown field `extra`, expected one of `protocol`, `sessionId`, `session_id`"),
            "{extra:?}"
        );
    }

    #[test]
    fn requested_times_only_shorten_the_operators() {
        let op = SessionTimes { lifetime_ms: 3_600_000, idle_ms: 300_000 };
        assert_eq!(op.shortened_by(0, 0), Ok(op));
        assert_eq!(op.shortened_by(60_000, 10_000), Ok(SessionTimes { lifetime_ms: 60_000, idle_ms: 10_000 }));
        assert_eq!(op.shortened_by(7_200_000, 900_000), Ok(op));
        assert_eq!(op.shortened_by(0, 10).map(|t| t.idle_ms), Ok(1000));
        assert_eq!(op.shortened_by(-1, 0), Err("invalid request: lifetimeMs -1 is negative".into()));
    }

    #[test]
    fn owners_are_short_and_plain() {
        assert_eq!(check_owner(&"a".repeat(64)), Ok(()));
        assert_eq!(check_owner("user:42.x_y-z"), Ok(()));
        assert_eq!(check_owner(""), Err("invalid request: owner must be 1 to 64 characters, not 0".into()));
        assert_eq!(
            check_owner(&"a".repeat(65)),
            Err("invalid request: owner must be 1 to 64 characters, not 65".to_string())
        );
        assert_eq!(check_owner("a b"), Err("invalid request: owner holds ' '; use letters, digits and . _ : -".into()));
    }
}
