//! Credentials: minted once per run by the host, attached by the broker, never
//! handed to a sandbox.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac as _};
use sha2::Sha256;

/// Grace added to a run's budget when bounding a JWT's lifetime.
pub const JWT_GRACE: Duration = Duration::from_secs(5);
/// A JWT's lifetime when its profile states none.
pub const DEFAULT_JWT_TTL: Duration = Duration::from_secs(60);
/// The shortest HS256 secret accepted.
pub const MIN_JWT_SECRET: usize = 32;

/// A secret read from the operator's environment. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: String) -> Secret {
        Secret(value)
    }

    /// The value, for the one place that must use it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// A minted credential: the `Authorization` header value and when it expires.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// `Bearer <token>`.
    pub authorization: Secret,
    /// When it stops being valid, if it does.
    pub expires: Option<SystemTime>,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential").field("expires", &self.expires).finish_non_exhaustive()
    }
}

/// What a credential is minted for.
#[derive(Clone, Debug)]
pub struct MintScope<'a> {
    /// The authenticated caller the run belongs to.
    pub subject: &'a str,
    /// The run's budget; the credential must not outlive it by more than [`JWT_GRACE`].
    pub budget: Duration,
    /// The profile's scopes.
    pub scopes: &'a [String],
}

/// Why no credential was minted: the run is refused, nothing ran.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MintError {
    /// The caller has no stable subject to bind a credential to.
    #[error("a subject-bound credential needs an authenticated caller; {0}")]
    Subject(&'static str),
    /// The minted value cannot travel in a header.
    #[error("the minted credential is not printable ASCII")]
    Unprintable,
    /// Already expired when minted.
    #[error("the minted credential had already expired")]
    Expired,
    /// A broker plugin refused or failed.
    #[error("the broker plugin did not mint a credential: {0}")]
    Plugin(String),
}

/// Mints one run's credential.
pub trait Minter: Send + Sync + fmt::Debug {
    /// Mints a credential for `scope`.
    ///
    /// # Errors
    ///
    /// [`MintError`]: the run does not start.
    fn mint(&self, scope: &MintScope<'_>) -> Result<Credential, MintError>;
}

/// A call as a broker plugin may reshape it: the path (which must still match the
/// same route), extra headers (never the host's own), and the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shaped {
    /// The path sent upstream.
    pub path: String,
    /// Headers added to the request.
    pub headers: Vec<(String, String)>,
    /// The body sent upstream.
    pub body: Option<Vec<u8>>,
}

/// Reshapes calls for a vendor's API (a broker plugin's `shape`).
pub trait Shaper: Send + Sync + fmt::Debug {
    /// Shapes one call that matched `route`.
    ///
    /// # Errors
    ///
    /// The plugin's refusal: nothing is sent.
    fn shape(&self, route: &crate::route::Route, path: &str, body: Option<&[u8]>) -> Result<Shaped, String>;
}

/// What a loaded broker plugin offers profiles: its minter, the routes it serves
/// (a profile may open only these), and its shaper.
#[derive(Clone, Debug)]
pub struct PluginBroker {
    /// Mints each run's credential through the vendor's token endpoint.
    pub minter: Arc<dyn Minter>,
    /// The routes the plugin declares.
    pub routes: Vec<crate::route::Route>,
    /// Shapes each call.
    pub shaper: Arc<dyn Shaper>,
    /// Request body schemas the plugin declares, by route.
    pub schemas: Vec<(crate::route::Route, crate::schema::Schema)>,
}

/// Checks a minted header value: non-empty printable ASCII without spaces inside the token.
///
/// # Errors
///
/// [`MintError::Unprintable`].
pub fn check_token(token: &str) -> Result<(), MintError> {
    if token.is_empty() || !token.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(MintError::Unprintable);
    }
    Ok(())
}

/// The degenerate minter: the same secret for every run.
#[derive(Debug)]
pub struct StaticToken(pub Secret);

impl Minter for StaticToken {
    fn mint(&self, _: &MintScope<'_>) -> Result<Credential, MintError> {
        check_token(self.0.expose())?;
        Ok(Credential { authorization: Secret(format!("Bearer {}", self.0.expose())), expires: None })
    }
}

/// An HS256 JWT bound to the run's caller: `sub`, `aud`, `iat`, `nbf`, `exp`, a
/// random `jti`, and `iss`, `kid` and `scope` when set.
#[derive(Debug)]
pub struct JwtMinter {
    /// The shared secret, at least [`MIN_JWT_SECRET`] bytes.
    pub secret: Secret,
    /// The longest lifetime.
    pub ttl: Duration,
    /// `aud`.
    pub audience: String,
    /// `iss`, when set.
    pub issuer: Option<String>,
    /// `kid`, when set.
    pub key_id: Option<String>,
}

/// Checks a subject is stable: non-empty, trimmed, not `*`, no control characters.
fn check_subject(subject: &str) -> Result<(), MintError> {
    if subject.is_empty() {
        return Err(MintError::Subject("the caller has no ID"));
    }
    if subject == "*" || subject.trim() != subject || subject.chars().any(char::is_control) {
        return Err(MintError::Subject("the caller's ID is not a stable subject"));
    }
    Ok(())
}

impl Minter for JwtMinter {
    fn mint(&self, scope: &MintScope<'_>) -> Result<Credential, MintError> {
        check_subject(scope.subject)?;
        let now = SystemTime::now();
        let iat = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let life = self.ttl.min(scope.budget + JWT_GRACE).max(Duration::from_secs(1));
        let exp = iat + life.as_secs().max(1);
        let mut jti = [0u8; 16];
        getrandom::fill(&mut jti).map_err(|_| MintError::Plugin("no randomness for the token ID".into()))?;
        let mut header = serde_json::json!({"alg": "HS256", "typ": "JWT"});
        if let Some(kid) = &self.key_id {
            header["kid"] = kid.clone().into();
        }
        let mut claims = serde_json::json!({
            "sub": scope.subject, "aud": self.audience, "iat": iat, "nbf": iat, "exp": exp, "jti": hex::encode(jti),
        });
        if let Some(iss) = &self.issuer {
            claims["iss"] = iss.clone().into();
        }
        if !scope.scopes.is_empty() {
            claims["scope"] = scope.scopes.join(" ").into();
        }
        let signing_input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let mut mac = Hmac::<Sha256>::new_from_slice(self.secret.expose().as_bytes())
            .map_err(|_| MintError::Plugin("the HMAC key was refused".into()))?;
        mac.update(signing_input.as_bytes());
        let token = format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes()));
        check_token(&token)?;
        let expires = UNIX_EPOCH + Duration::from_secs(exp);
        if expires <= now {
            return Err(MintError::Expired);
        }
        Ok(Credential { authorization: Secret(format!("Bearer {token}")), expires: Some(expires) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt() -> JwtMinter {
        JwtMinter {
            secret: Secret::new("k".repeat(32)),
            ttl: Duration::from_secs(60),
            audience: "demo".into(),
            issuer: Some("plimsoll".into()),
            key_id: None,
        }
    }

    fn decode(part: &str) -> serde_json::Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).expect("base64url")).expect("json")
    }

    #[test]
    fn a_jwt_is_bound_to_the_caller_and_the_run_and_verifies_with_the_secret() {
        let scopes = ["items:read".to_string()];
        let c = jwt()
            .mint(&MintScope { subject: "alice", budget: Duration::from_secs(10), scopes: &scopes })
            .expect("minted");
        let token = c.authorization.expose().strip_prefix("Bearer ").expect("bearer");
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(decode(parts[0])["alg"], "HS256");
        let claims = decode(parts[1]);
        assert_eq!(
            (claims["sub"].as_str(), claims["aud"].as_str(), claims["iss"].as_str()),
            (Some("alice"), Some("demo"), Some("plimsoll"))
        );
        assert_eq!(claims["scope"], "items:read");
        let life = claims["exp"].as_u64().expect("exp") - claims["iat"].as_u64().expect("iat");
        assert_eq!(life, 15, "the run's 10 s budget plus 5 s grace, under the 60 s ttl");
        let mut mac = Hmac::<Sha256>::new_from_slice(&[b'k'; 32]).expect("key");
        mac.update(format!("{}.{}", parts[0], parts[1]).as_bytes());
        mac.verify_slice(&URL_SAFE_NO_PAD.decode(parts[2]).expect("sig")).expect("the signature verifies");
        let again =
            jwt().mint(&MintScope { subject: "alice", budget: Duration::from_secs(10), scopes: &[] }).expect("minted");
        assert_ne!(again.authorization, c.authorization, "each run gets its own token ID");
    }

    #[test]
    fn a_jwt_needs_a_stable_subject() {
        for (subject, want) in [
            ("", "a subject-bound credential needs an authenticated caller; the caller has no ID"),
            ("*", "a subject-bound credential needs an authenticated caller; the caller's ID is not a stable subject"),
            (
                " bob",
                "a subject-bound credential needs an authenticated caller; the caller's ID is not a stable subject",
            ),
        ] {
            let e = jwt().mint(&MintScope { subject, budget: Duration::from_secs(1), scopes: &[] }).expect_err(subject);
            assert_eq!(e.to_string(), want);
        }
    }

    #[test]
    fn a_static_token_must_be_printable_and_debug_never_shows_it() {
        let s = StaticToken(Secret::new("s3cr3t-value".into()));
        let c = s.mint(&MintScope { subject: "", budget: Duration::from_secs(1), scopes: &[] }).expect("minted");
        assert_eq!(c.authorization.expose(), "Bearer s3cr3t-value");
        assert!(!format!("{s:?} {c:?}").contains("s3cr3t"));
        let bad = StaticToken(Secret::new("two words".into()));
        assert_eq!(
            bad.mint(&MintScope { subject: "", budget: Duration::from_secs(1), scopes: &[] }),
            Err(MintError::Unprintable)
        );
    }
}
