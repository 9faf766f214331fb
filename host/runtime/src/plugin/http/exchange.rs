//! A short-lived bearer the host trades the operator's long-lived credential for
//! (Docker Hub's personal access token exchange: `{"identifier", "secret"}` in,
//! `{"access_token": JWT}` out), kept until a minute before the JWT's `exp` says it
//! ends and renewed then. The plugin sees neither: the host attaches the bearer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;

/// The operator's credential and where to trade it.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenExchange {
    /// The exchange's URL (`https://hub.docker.com/v2/auth/token`).
    pub url: String,
    /// The account (`DOCKER_SBX_USERNAME`).
    pub identifier: String,
    /// The long-lived secret (`DOCKER_SBX_TOKEN`).
    pub secret: String,
}

impl std::fmt::Debug for TokenExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenExchange").field("url", &self.url).field("identifier", &self.identifier).finish()
    }
}

/// How long before its end a bearer is renewed.
pub const RENEW_BEFORE: Duration = Duration::from_secs(60);
/// A bearer's life when its `exp` cannot be read.
pub const UNREADABLE_LIFE: Duration = Duration::from_secs(300);
/// The largest exchange answer read.
pub const MAX_ANSWER: usize = 64 << 10;

/// The body the exchange takes.
pub(super) fn request_body(x: &TokenExchange) -> Vec<u8> {
    serde_json::json!({"identifier": x.identifier.trim(), "secret": x.secret.trim()}).to_string().into_bytes()
}

/// The bearer in an exchange's answer.
pub(super) fn bearer(answer: &[u8]) -> Result<String, String> {
    let v: serde_json::Value =
        serde_json::from_slice(answer).map_err(|_| "the token exchange's answer is not JSON".to_string())?;
    let token = v.get("access_token").and_then(|t| t.as_str()).unwrap_or_default();
    if token.is_empty() || !token.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err("the token exchange's answer has no usable access_token".into());
    }
    Ok(token.to_string())
}

/// How long `token` may be used from now: until a minute before its JWT `exp`
/// (unverified: it only schedules the renewal), or [`UNREADABLE_LIFE`].
pub(super) fn usable_for(token: &str, now: SystemTime) -> Duration {
    let exp = token
        .split('.')
        .nth(1)
        .and_then(|p| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(p.trim_end_matches('=')).ok())
        .and_then(|p| serde_json::from_slice::<serde_json::Value>(&p).ok())
        .and_then(|c| c.get("exp").and_then(serde_json::Value::as_u64));
    let now = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    match exp {
        Some(exp) => Duration::from_secs(exp.saturating_sub(now)).saturating_sub(RENEW_BEFORE),
        None => UNREADABLE_LIFE.saturating_sub(RENEW_BEFORE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: &str) -> String {
        let b = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        format!("{}.{}.sig", b(r#"{"alg":"RS256"}"#), b(claims))
    }

    #[test]
    fn a_bearer_is_used_until_a_minute_before_its_exp() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(usable_for(&jwt(r#"{"exp":1000900}"#), now), Duration::from_secs(840));
        assert_eq!(usable_for(&jwt(r#"{"exp":1000030}"#), now), Duration::ZERO);
        assert_eq!(usable_for("opaque-token", now), Duration::from_secs(240));
        assert_eq!(usable_for(&jwt(r#"{"sub":"x"}"#), now), Duration::from_secs(240));
    }

    #[test]
    fn the_answer_must_carry_a_token_and_the_debug_never_shows_the_secret() {
        assert_eq!(bearer(br#"{"access_token":"abc.def.ghi"}"#), Ok("abc.def.ghi".into()));
        assert_eq!(bearer(b"<html>"), Err("the token exchange's answer is not JSON".into()));
        assert_eq!(bearer(br#"{"token":"x"}"#), Err("the token exchange's answer has no usable access_token".into()));
        let x = TokenExchange { url: "https://hub".into(), identifier: "me".into(), secret: "dckr_pat_s3cret".into() };
        assert!(!format!("{x:?}").contains("s3cret"));
        assert_eq!(request_body(&x), br#"{"identifier":"me","secret":"dckr_pat_s3cret"}"#);
    }
}
