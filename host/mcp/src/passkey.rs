//! The owner's passkeys and browser sessions, for the MCP server's HTTPS mode.
//!
//! The server has one owner, who signs in with a passkey (WebAuthn, user
//! verification required) to approve or revoke the assistants that connect.
//!
//! 1. [`Owner::open`] takes the public URL (whose host is the passkey's RP ID)
//!    and a state directory, and loads `owner.json`, the registered passkeys.
//! 2. With none registered it mints a one-time setup code; the console shows
//!    [`Owner::setup_code`], and the setup page sends it to
//!    [`Owner::start_registration`]. A second passkey is added by the signed-in
//!    owner with [`Owner::start_registration_signed_in`].
//! 3. [`Owner::start_signin`] and [`Owner::finish_signin`] are a sign-in; each
//!    finish that succeeds returns a session token for [`Owner::set_cookie`].
//! 4. Every request after that passes its `Cookie` header to [`Owner::session`],
//!    and every form it posts carries [`Owner::csrf`], checked by
//!    [`Owner::check_csrf`].
//!
//! This module is the state and its rules, with no network I/O: every function
//! takes the time, so every expiry is tested. Only the passkeys (public keys
//! and counters) are written to disk; ceremonies and sessions live in memory,
//! so a restart signs everyone out. Session tokens are 256 random bits, kept
//! only as their SHA-256. (webauthn-rs's `danger-allow-state-serialisation`
//! is on only so the tests can load ceremony states recorded from a browser;
//! nothing here serialises a state.)

use std::collections::HashMap;
use std::fs;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use webauthn_rs::prelude::{
    Passkey, PasskeyAuthentication, PasskeyRegistration, PublicKeyCredential, RegisterPublicKeyCredential, Url, Uuid,
    Webauthn, WebauthnBuilder, WebauthnError,
};

use crate::rate::PerAddress;

#[cfg(test)]
mod tests;

/// The session cookie's name. `__Host-` makes the browser refuse it unless it
/// was set `Secure`, with `Path=/` and no `Domain`, by this very host.
pub const COOKIE: &str = "__Host-plimsoll-session";
/// How long a session lasts from sign-in; it is not extended by use.
pub const SESSION_LIFE: Duration = Duration::from_secs(15 * 60);
/// How long a started registration or sign-in waits for the browser's answer.
pub const CEREMONY_LIFE: Duration = Duration::from_secs(5 * 60);
/// Ceremonies held at once; the oldest goes first. Sign-in starts need no
/// credential, so they must not grow without bound (the rate limit keeps a
/// stranger well under this).
pub const MAX_CEREMONIES: usize = 64;
/// Sessions held at once; the one nearest its end goes first.
pub const MAX_SESSIONS: usize = 16;
/// Passkeys the owner may register.
pub const MAX_PASSKEYS: usize = 10;
/// Sign-in starts taken from one address per [`RATE_WINDOW`].
pub const SIGNIN_STARTS: usize = 20;
/// Failed proofs (wrong setup codes, sign-in answers that fail verification)
/// taken from one address per [`RATE_WINDOW`]; past that, that address's
/// proofs are refused before they are checked. Kept per address, so a
/// stranger's failures never lock the owner out; against a 60-bit setup code
/// this leaves guessing hopeless, so a wrong code never burns it.
pub const FAILED_TRIES: usize = 5;
/// The sliding window of both sign-in rate limits.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);
/// The file in the state directory that holds the registered passkeys.
pub const OWNER_FILE: &str = "owner.json";

/// The setup code's alphabet: no 0/O, 1/I; 32 letters, so each is 5 bits.
const CODE_ALPHABET: &[u8; 32] = b"23456789ABCDEFGHJKLMNPQRSTUVWXYZ";
/// Three groups of four: 60 bits.
const CODE_GROUPS: usize = 3;
const CODE_GROUP_LEN: usize = 4;
/// What a CSRF value is the digest of, before the session token.
const CSRF_DOMAIN: &[u8] = b"plimsoll passkey csrf v1\0";

/// Why a passkey operation was refused. Messages name the fix and never
/// contain a secret (a setup code, a session token).
#[derive(Debug, thiserror::Error)]
pub enum PasskeyError {
    /// `--public-url` is not `https://HOST[:PORT]`.
    #[error("the public URL {url:?} cannot carry passkeys: {reason}")]
    PublicUrl { url: String, reason: String },
    /// The public URL's host is an IP address, which WebAuthn does not take as an RP ID.
    #[error(
        "the public URL's host {host} is an IP address, and a passkey is bound to a domain name; use a name such as localhost (https://localhost:PORT)"
    )]
    IpHost { host: String },
    /// The state directory may be read or entered by others.
    #[error("the state directory {} has mode {mode:o}, open to other users; run chmod 700 on it", path.display())]
    StateDirOpen { path: PathBuf, mode: u32 },
    /// Reading or writing the state failed.
    #[error("could not {action} {}: {source}", path.display())]
    Storage {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `owner.json` is not one plimsoll wrote.
    #[error("{} is not a passkey file plimsoll wrote ({reason}); move it aside to register a passkey again", path.display())]
    StateFile { path: PathBuf, reason: String },
    /// The webauthn library refused the configuration.
    #[error("the passkey relying party for {origin} could not be set up: {reason}")]
    Config { origin: String, reason: String },
    /// A setup code that is not the one printed at startup.
    #[error("wrong setup code; copy the code printed on the console where plimsoll started")]
    WrongSetupCode,
    /// A passkey exists, so the setup code is gone.
    #[error("a passkey is already registered, so the setup code is spent; sign in with that passkey")]
    AlreadyRegistered,
    /// Nothing to sign in with.
    #[error("no passkey is registered yet; register one with the setup code printed on plimsoll's console")]
    NoPasskey,
    /// The owner already has [`MAX_PASSKEYS`].
    #[error("the owner already has {MAX_PASSKEYS} passkeys, the most kept; remove one from owner.json to add another")]
    TooManyPasskeys,
    /// Adding a passkey needs a signed-in owner.
    #[error("adding a passkey needs a signed-in owner: {0}")]
    NotSignedIn(SessionRefusal),
    /// The ceremony id names nothing held.
    #[error("no such passkey ceremony (the server may have restarted); start again")]
    UnknownCeremony,
    /// The ceremony waited longer than [`CEREMONY_LIFE`].
    #[error("the passkey ceremony expired after {} minutes; start again", CEREMONY_LIFE.as_secs() / 60)]
    CeremonyExpired,
    /// Another sign-in finished while this one waited; its view of the
    /// passkeys' counters is stale.
    #[error("another sign-in finished while this one waited; start again")]
    CeremonySuperseded,
    /// The ceremony was already finished once (a replay).
    #[error("this passkey ceremony was already used and a response counts only once; start again")]
    CeremonyUsed,
    /// The response answers another ceremony's challenge (a replay).
    #[error("this passkey response answers another ceremony's challenge, so it is a replay; start again")]
    ChallengeMismatch,
    /// The signature does not verify under the registered key (a forgery).
    #[error("the passkey signature does not verify; this response was not made by the registered passkey")]
    BadSignature,
    /// The signature counter went back or stayed (a replay or a cloned authenticator).
    #[error(
        "the passkey's signature counter did not increase, which a replayed response or a cloned authenticator shows; sign in again with the authenticator you registered"
    )]
    CounterNotIncreased,
    /// The authenticator did not verify the user.
    #[error(
        "the authenticator did not verify the user; passkeys here need user verification (a PIN, a fingerprint or a face)"
    )]
    NotVerified,
    /// The browser signed for another origin or RP ID.
    #[error("the passkey response was made for another site; open plimsoll at {origin}")]
    WrongOrigin { origin: String },
    /// The credential is not one registered here.
    #[error("this passkey is not registered here; use the one registered for this server")]
    UnknownPasskey,
    /// The body's `credential` is not a WebAuthn response.
    #[error("the credential is not a WebAuthn response: {reason}")]
    BadCredential { reason: String },
    /// The response is a WebAuthn response and was refused for another reason.
    #[error("the passkey response was refused: {reason}")]
    Rejected { reason: String },
    /// Too many sign-in attempts, or failed ones, from one address.
    #[error("too many sign-in attempts from this address; try again in {} seconds", retry_after.as_secs().max(1))]
    RateLimited { retry_after: Duration },
}

impl PasskeyError {
    /// The HTTP status this refusal is answered with: 400 bad input (a
    /// ceremony that is unknown or expired, a body that is no credential), 401
    /// a failed verification or no session, 403 a wrong or burned setup code,
    /// 409 a state that does not allow it, 429 rate limited, 500 the server's
    /// own state.
    pub fn status(&self) -> u16 {
        use PasskeyError::*;
        match self {
            UnknownCeremony | CeremonyExpired | CeremonySuperseded | BadCredential { .. } => 400,
            NotSignedIn(_)
            | CeremonyUsed
            | ChallengeMismatch
            | BadSignature
            | CounterNotIncreased
            | NotVerified
            | WrongOrigin { .. }
            | UnknownPasskey
            | Rejected { .. } => 401,
            WrongSetupCode => 403,
            AlreadyRegistered | NoPasskey | TooManyPasskeys => 409,
            RateLimited { .. } => 429,
            PublicUrl { .. }
            | IpHost { .. }
            | StateDirOpen { .. }
            | Storage { .. }
            | StateFile { .. }
            | Config { .. } => 500,
        }
    }

    /// How long to wait before trying again, for a `Retry-After` header.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            PasskeyError::RateLimited { retry_after } => Some(*retry_after),
            _ => None,
        }
    }

    fn from_webauthn(e: WebauthnError, origin: &str) -> PasskeyError {
        match e {
            WebauthnError::MismatchedChallenge => PasskeyError::ChallengeMismatch,
            WebauthnError::AuthenticationFailure | WebauthnError::SignatureInvalid => PasskeyError::BadSignature,
            WebauthnError::CredentialPossibleCompromise => PasskeyError::CounterNotIncreased,
            WebauthnError::UserNotVerified => PasskeyError::NotVerified,
            WebauthnError::InvalidRPOrigin | WebauthnError::InvalidRPIDHash => {
                PasskeyError::WrongOrigin { origin: origin.to_string() }
            }
            WebauthnError::CredentialNotFound => PasskeyError::UnknownPasskey,
            other => PasskeyError::Rejected { reason: other.to_string().to_lowercase() },
        }
    }
}

/// Why a request's `Cookie` header is no session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SessionRefusal {
    /// No session cookie was sent.
    #[error("not signed in; sign in with your passkey")]
    Missing,
    /// The cookie names no session: tampered with, signed out, or from before a restart.
    #[error("the session is not known (signed out, or the server restarted); sign in again")]
    Unknown,
    /// The session outlived [`SESSION_LIFE`].
    #[error("the session expired after {} minutes; sign in again", SESSION_LIFE.as_secs() / 60)]
    Expired,
}

/// What `owner.json` holds: the WebAuthn user handle and the passkeys.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    /// 16 bytes, hex: the user handle every passkey was registered under.
    user: String,
    passkeys: Vec<Passkey>,
}

#[derive(Debug)]
enum Setup {
    /// No passkey yet: the code.
    Open { code: String },
    /// A passkey is registered.
    Done,
}

enum Step {
    /// Registration; `by_code` when the setup code started it, else the signed-in owner.
    Register {
        state: PasskeyRegistration,
        by_code: bool,
    },
    SignIn(PasskeyAuthentication),
}

struct Ceremony {
    step: Step,
    started: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Used,
    Expired,
    Superseded,
}

type Digest = [u8; 32];

/// The owner's passkeys, setup code, ceremonies and sessions.
pub struct Owner {
    webauthn: Webauthn,
    rp_id: String,
    origin: String,
    file: PathBuf,
    user: Uuid,
    passkeys: Vec<Passkey>,
    setup: Setup,
    ceremonies: HashMap<String, Ceremony>,
    /// Ceremonies finished or expired, kept until `Instant` so a second
    /// answer is told it is a replay rather than unknown.
    ended: HashMap<String, (Ended, Instant)>,
    /// SHA-256 of each session token, and when it ends.
    sessions: HashMap<Digest, Instant>,
    starts: PerAddress,
    failures: PerAddress,
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("rp_id", &self.rp_id)
            .field("origin", &self.origin)
            .field("file", &self.file)
            .field("passkeys", &self.passkeys.len())
            .field("ceremonies", &self.ceremonies.len())
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

/// 256 random bits, base64url: a ceremony id, a session token.
fn secret() -> String {
    URL_SAFE_NO_PAD.encode(random::<32>())
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // Without randomness no code, token or challenge may be minted at all.
    if getrandom::fill(&mut b).is_err() {
        panic!("the system's random source failed; no secret can be minted");
    }
    b
}

fn digest(parts: &[&[u8]]) -> Digest {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh setup code, `XXXX-XXXX-XXXX`.
fn mint_code() -> String {
    let bytes = random::<{ CODE_GROUPS * CODE_GROUP_LEN }>();
    let chars: Vec<char> = bytes.iter().map(|b| char::from(CODE_ALPHABET[usize::from(b & 31)])).collect();
    chars.chunks(CODE_GROUP_LEN).map(|g| g.iter().collect::<String>()).collect::<Vec<_>>().join("-")
}

/// A typed code as compared: upper case, without dashes or spaces.
fn normal_code(code: &str) -> String {
    code.chars().filter(|c| !matches!(c, '-' | ' ' | '\t')).flat_map(char::to_uppercase).collect()
}

/// The values of every `name` cookie in a `Cookie` header.
fn cookies<'a>(header: Option<&'a str>, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    header.into_iter().flat_map(|h| h.split(';')).filter_map(move |pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == name).then(|| v.trim())
    })
}

/// Checks `public_url` and returns its RP ID (the host) and origin.
fn relying_party(public_url: &str) -> Result<(String, Url), PasskeyError> {
    let refuse = |reason: &str| PasskeyError::PublicUrl { url: public_url.to_string(), reason: reason.to_string() };
    let url = Url::parse(public_url).map_err(|e| refuse(&e.to_string()))?;
    if url.scheme() != "https" {
        return Err(refuse("browsers offer passkeys only to https:// origins"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(refuse("it must not carry a user name or password"));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err(refuse("it must be https://HOST[:PORT], with no path, query or fragment"));
    }
    // `domain` is None for an IP address, which the URL parser has already
    // normalised (`127.1` is `127.0.0.1`).
    match (url.domain(), url.host_str()) {
        (Some(d), _) => Ok((d.to_string(), url.clone())),
        (None, Some(ip)) => Err(PasskeyError::IpHost { host: ip.to_string() }),
        (None, None) => Err(refuse("it has no host")),
    }
}

impl Owner {
    /// Opens the owner's state in `state_dir` for the server at `public_url`
    /// (`https://HOST[:PORT]`; HOST is the passkeys' RP ID). The directory is
    /// created with mode 0700 if missing; `owner.json` in it holds the
    /// registered passkeys. With none, a setup code is minted.
    ///
    /// # Errors
    ///
    /// The URL is not https, has a path, or its host is an IP address; the
    /// directory is open to other users or cannot be created; `owner.json`
    /// cannot be read or is not one plimsoll wrote.
    ///
    /// `_now` keeps the shape every call here has; nothing in opening
    /// depends on the time yet (the setup code lasts until it is used or the
    /// server restarts).
    pub fn open(public_url: &str, state_dir: &Path, _now: Instant) -> Result<Owner, PasskeyError> {
        let (rp_id, url) = relying_party(public_url)?;
        let origin = url.origin().ascii_serialization();
        let config = |e: WebauthnError| PasskeyError::Config { origin: origin.clone(), reason: e.to_string() };
        let webauthn = WebauthnBuilder::new(&rp_id, &url)
            .map_err(config)?
            .rp_name("plimsoll")
            .timeout(CEREMONY_LIFE)
            .build()
            .map_err(config)?;

        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .map_err(|source| PasskeyError::Storage { action: "create", path: state_dir.to_path_buf(), source })?;
        let mode = fs::metadata(state_dir)
            .map_err(|source| PasskeyError::Storage { action: "inspect", path: state_dir.to_path_buf(), source })?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(PasskeyError::StateDirOpen { path: state_dir.to_path_buf(), mode: mode & 0o7777 });
        }

        let file = state_dir.join(OWNER_FILE);
        let (user, passkeys) = match fs::read(&file) {
            Ok(bytes) => {
                let bad = |reason: String| PasskeyError::StateFile { path: file.clone(), reason };
                let stored: Stored = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
                let user: [u8; 16] = hex::decode(&stored.user)
                    .ok()
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(|| bad("the user handle is not 16 bytes of hex".to_string()))?;
                (Uuid::from_bytes(user), stored.passkeys)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Uuid::from_bytes(random::<16>()), Vec::new()),
            Err(source) => return Err(PasskeyError::Storage { action: "read", path: file, source }),
        };
        let setup = if passkeys.is_empty() { Setup::Open { code: mint_code() } } else { Setup::Done };
        Ok(Owner {
            webauthn,
            rp_id,
            origin,
            file,
            user,
            passkeys,
            setup,
            ceremonies: HashMap::new(),
            ended: HashMap::new(),
            sessions: HashMap::new(),
            starts: PerAddress::new(SIGNIN_STARTS, RATE_WINDOW),
            failures: PerAddress::new(FAILED_TRIES, RATE_WINDOW),
        })
    }

    /// The `Set-Cookie` value that starts a session with `token`.
    pub fn set_cookie(token: &str) -> String {
        format!("{COOKIE}={token}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={}", SESSION_LIFE.as_secs())
    }

    /// The `Set-Cookie` value that ends the browser's session.
    pub fn clear_cookie() -> String {
        format!("{COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0")
    }

    /// The one-time setup code, for the console, while no passkey is
    /// registered.
    pub fn setup_code(&self) -> Option<&str> {
        match &self.setup {
            Setup::Open { code } => Some(code),
            Setup::Done => None,
        }
    }

    /// How many passkeys are registered; none means the setup page is shown.
    pub fn passkeys(&self) -> usize {
        self.passkeys.len()
    }

    /// The RP ID: the public URL's host.
    pub fn rp_id(&self) -> &str {
        &self.rp_id
    }

    /// The origin passkey responses must come from, `https://HOST[:PORT]`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Starts registering the first passkey with the setup code printed at
    /// startup (dashes, spaces and case are ignored), typed at address
    /// `from`. Returns the ceremony id and the options for
    /// `navigator.credentials.create` (a webauthn-rs
    /// `CreationChallengeResponse`: `{"publicKey": {...}}`).
    ///
    /// # Errors
    ///
    /// [`FAILED_TRIES`] failures from `from` in [`RATE_WINDOW`] (429, checked
    /// first); a passkey is already registered (409); the code is wrong (403,
    /// counted against `from`).
    pub fn start_registration(
        &mut self,
        code: &str,
        from: IpAddr,
        now: Instant,
    ) -> Result<(String, Value), PasskeyError> {
        self.failures.check(from, now).map_err(|retry_after| PasskeyError::RateLimited { retry_after })?;
        let Setup::Open { code: expected } = &self.setup else {
            return Err(PasskeyError::AlreadyRegistered);
        };
        let typed = digest(&[normal_code(code).as_bytes()]);
        if !same(&typed, &digest(&[normal_code(expected).as_bytes()])) {
            self.failures.record(from, now);
            return Err(PasskeyError::WrongSetupCode);
        }
        self.begin_registration(true, now)
    }

    /// Starts registering another passkey, for the signed-in owner (the
    /// request's `Cookie` header); its options exclude the passkeys already
    /// registered, so an authenticator is not registered twice.
    ///
    /// # Errors
    ///
    /// No valid session (401); [`MAX_PASSKEYS`] already registered (409).
    pub fn start_registration_signed_in(
        &mut self,
        cookie_header: Option<&str>,
        now: Instant,
    ) -> Result<(String, Value), PasskeyError> {
        self.session(cookie_header, now).map_err(PasskeyError::NotSignedIn)?;
        if self.passkeys.len() >= MAX_PASSKEYS {
            return Err(PasskeyError::TooManyPasskeys);
        }
        self.begin_registration(false, now)
    }

    fn begin_registration(&mut self, by_code: bool, now: Instant) -> Result<(String, Value), PasskeyError> {
        let exclude = self.passkeys.iter().map(|p| p.cred_id().clone()).collect::<Vec<_>>();
        let exclude = (!exclude.is_empty()).then_some(exclude);
        let (options, state) = self
            .webauthn
            .start_passkey_registration(self.user, "owner", "plimsoll owner", exclude)
            .map_err(|e| PasskeyError::from_webauthn(e, &self.origin))?;
        let options = serde_json::to_value(options)
            .map_err(|e| PasskeyError::Rejected { reason: format!("the options could not be encoded: {e}") })?;
        Ok((self.hold(Step::Register { state, by_code }, now), options))
    }

    /// Finishes a registration with the browser's `credential.toJSON()`. The
    /// ceremony is used up whatever the outcome; on success the passkey is
    /// written to `owner.json`, the setup code is spent, and a session token
    /// is returned for [`Owner::set_cookie`].
    ///
    /// # Errors
    ///
    /// The ceremony is unknown, expired or used; the credential is malformed
    /// or fails verification (user verification is required); a passkey was
    /// registered meanwhile with the setup code; `owner.json` cannot be written.
    pub fn finish_registration(
        &mut self,
        ceremony: &str,
        credential: &Value,
        now: Instant,
    ) -> Result<String, PasskeyError> {
        let Step::Register { state, by_code } = self.take(ceremony, now, |s| matches!(s, Step::Register { .. }))?
        else {
            return Err(PasskeyError::UnknownCeremony);
        };
        if by_code && !self.passkeys.is_empty() {
            return Err(PasskeyError::AlreadyRegistered);
        }
        if self.passkeys.len() >= MAX_PASSKEYS {
            return Err(PasskeyError::TooManyPasskeys);
        }
        let credential: RegisterPublicKeyCredential = serde_json::from_value(credential.clone())
            .map_err(|e| PasskeyError::BadCredential { reason: e.to_string() })?;
        let passkey = self
            .webauthn
            .finish_passkey_registration(&credential, &state)
            .map_err(|e| PasskeyError::from_webauthn(e, &self.origin))?;
        if self.passkeys.iter().any(|p| p.cred_id() == passkey.cred_id()) {
            return Err(PasskeyError::Rejected { reason: "this passkey is already registered".to_string() });
        }
        self.passkeys.push(passkey);
        if let Err(e) = self.save() {
            self.passkeys.pop();
            return Err(e);
        }
        self.setup = Setup::Done;
        self.ceremonies.retain(|_, c| !matches!(c.step, Step::Register { by_code: true, .. }));
        Ok(self.mint_session(now))
    }

    /// Starts a sign-in: the ceremony id and the options for
    /// `navigator.credentials.get` (a webauthn-rs `RequestChallengeResponse`:
    /// `{"publicKey": {...}}`), naming every registered passkey.
    ///
    /// # Errors
    ///
    /// More than [`SIGNIN_STARTS`] from `from` in [`RATE_WINDOW`] (429); no
    /// passkey is registered (409).
    pub fn start_signin(&mut self, from: IpAddr, now: Instant) -> Result<(String, Value), PasskeyError> {
        self.starts.hit(from, now).map_err(|retry_after| PasskeyError::RateLimited { retry_after })?;
        if self.passkeys.is_empty() {
            return Err(PasskeyError::NoPasskey);
        }
        let (options, state) = self
            .webauthn
            .start_passkey_authentication(&self.passkeys)
            .map_err(|e| PasskeyError::from_webauthn(e, &self.origin))?;
        let options = serde_json::to_value(options)
            .map_err(|e| PasskeyError::Rejected { reason: format!("the options could not be encoded: {e}") })?;
        Ok((self.hold(Step::SignIn(state), now), options))
    }

    /// Finishes a sign-in with the browser's `credential.toJSON()`. The
    /// ceremony is used up whatever the outcome; a passkey whose counter
    /// moved is written back to `owner.json`; on success a session token is
    /// returned for [`Owner::set_cookie`].
    ///
    /// # Errors
    ///
    /// [`FAILED_TRIES`] failures from `from` in [`RATE_WINDOW`] (429, checked first);
    /// the ceremony is unknown, expired, or used (a replay); the response
    /// answers another challenge (a replay), has a bad signature (a forgery),
    /// lacks user verification, comes from another origin, or names an
    /// unknown passkey; the counter did not increase; `owner.json` cannot be
    /// written. Each failure of a live ceremony counts against `from`.
    pub fn finish_signin(
        &mut self,
        ceremony: &str,
        credential: &Value,
        from: IpAddr,
        now: Instant,
    ) -> Result<String, PasskeyError> {
        self.failures.check(from, now).map_err(|retry_after| PasskeyError::RateLimited { retry_after })?;
        let result = self.verify_signin(ceremony, credential, now);
        // Only a response checked against a live ceremony counts: rejecting
        // one for no ceremony costs nothing, and counting those would let
        // anyone lock the owner out with junk.
        if let Err(e) = &result
            && !matches!(
                e,
                PasskeyError::UnknownCeremony
                    | PasskeyError::CeremonyExpired
                    | PasskeyError::CeremonyUsed
                    | PasskeyError::CeremonySuperseded
            )
        {
            self.failures.record(from, now);
        }
        result
    }

    fn verify_signin(&mut self, ceremony: &str, credential: &Value, now: Instant) -> Result<String, PasskeyError> {
        let Step::SignIn(state) = self.take(ceremony, now, |s| matches!(s, Step::SignIn(_)))? else {
            return Err(PasskeyError::UnknownCeremony);
        };
        let credential: PublicKeyCredential = serde_json::from_value(credential.clone())
            .map_err(|e| PasskeyError::BadCredential { reason: e.to_string() })?;
        let result = self
            .webauthn
            .finish_passkey_authentication(&credential, &state)
            .map_err(|e| PasskeyError::from_webauthn(e, &self.origin))?;
        if !result.user_verified() {
            return Err(PasskeyError::NotVerified);
        }
        let before = self.passkeys.clone();
        let changed = self.passkeys.iter_mut().any(|p| p.update_credential(&result) == Some(true));
        if changed && let Err(e) = self.save() {
            self.passkeys = before;
            return Err(e);
        }
        // Each sign-in's state holds the counters as they were when it
        // started, and webauthn-rs checks the answer against those: a sign-in
        // started before this one finished would take a counter that did not
        // pass this one's. So those end here.
        let stale: Vec<String> = self
            .ceremonies
            .iter()
            .filter(|(_, c)| matches!(c.step, Step::SignIn(_)))
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            self.ceremonies.remove(&id);
            self.end(id, Ended::Superseded, now);
        }
        Ok(self.mint_session(now))
    }

    /// Holds a new ceremony and returns its id.
    fn hold(&mut self, step: Step, now: Instant) -> String {
        self.sweep(now);
        while self.ceremonies.len() >= MAX_CEREMONIES {
            let Some(oldest) = self.ceremonies.iter().min_by_key(|(_, c)| c.started).map(|(id, _)| id.clone()) else {
                break;
            };
            self.ceremonies.remove(&oldest);
        }
        let id = secret();
        self.ceremonies.insert(id.clone(), Ceremony { step, started: now });
        id
    }

    /// Moves expired ceremonies to `ended`, and forgets ended ones and
    /// sessions long past.
    fn sweep(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .ceremonies
            .iter()
            .filter(|(_, c)| now.saturating_duration_since(c.started) >= CEREMONY_LIFE)
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            self.ceremonies.remove(&id);
            self.end(id, Ended::Expired, now);
        }
        self.ended.retain(|_, (_, forget)| *forget > now);
        // An expired session is kept one more life, to be told apart from a
        // tampered one; the browser's cookie has gone by then anyway.
        self.sessions.retain(|_, until| now.saturating_duration_since(*until) < SESSION_LIFE);
    }

    fn end(&mut self, id: String, how: Ended, now: Instant) {
        if self.ended.len() >= 4 * MAX_CEREMONIES
            && let Some(first) = self.ended.iter().min_by_key(|(_, (_, f))| *f).map(|(id, _)| id.clone())
        {
            self.ended.remove(&first);
        }
        self.ended.insert(id, (how, now + CEREMONY_LIFE));
    }

    /// Takes the ceremony `id` out (it is used up), if it is one `wanted` accepts.
    fn take(&mut self, id: &str, now: Instant, wanted: impl Fn(&Step) -> bool) -> Result<Step, PasskeyError> {
        match self.ceremonies.get(id) {
            Some(c) if wanted(&c.step) => {}
            Some(_) => return Err(PasskeyError::UnknownCeremony),
            None => {
                return Err(match self.ended.get(id) {
                    Some((Ended::Used, _)) => PasskeyError::CeremonyUsed,
                    Some((Ended::Expired, _)) => PasskeyError::CeremonyExpired,
                    Some((Ended::Superseded, _)) => PasskeyError::CeremonySuperseded,
                    None => PasskeyError::UnknownCeremony,
                });
            }
        }
        let Some(c) = self.ceremonies.remove(id) else {
            return Err(PasskeyError::UnknownCeremony);
        };
        if now.saturating_duration_since(c.started) >= CEREMONY_LIFE {
            self.end(id.to_string(), Ended::Expired, now);
            return Err(PasskeyError::CeremonyExpired);
        }
        self.end(id.to_string(), Ended::Used, now);
        Ok(c.step)
    }

    /// Writes `owner.json`: a 0600 temporary file, synced, renamed over it.
    fn save(&self) -> Result<(), PasskeyError> {
        let stored = Stored { user: hex::encode(self.user.as_bytes()), passkeys: self.passkeys.clone() };
        let mut text = serde_json::to_vec_pretty(&stored)
            .map_err(|e| PasskeyError::StateFile { path: self.file.clone(), reason: e.to_string() })?;
        text.push(b'\n');
        crate::private_file::write(&self.file, &text).map_err(|e| PasskeyError::Storage {
            action: e.action,
            path: e.path,
            source: e.source,
        })?;
        Ok(())
    }

    fn mint_session(&mut self, now: Instant) -> String {
        self.sweep(now);
        while self.sessions.len() >= MAX_SESSIONS {
            let Some(first) = self.sessions.iter().min_by_key(|(_, until)| **until).map(|(d, _)| *d) else {
                break;
            };
            self.sessions.remove(&first);
        }
        let token = secret();
        self.sessions.insert(digest(&[token.as_bytes()]), now + SESSION_LIFE);
        token
    }

    /// The session cookie's token and digest, if it names a session held
    /// (live or expired); with several session cookies, the first held one.
    fn current<'a>(&self, cookie_header: Option<&'a str>) -> Option<(&'a str, Digest)> {
        cookies(cookie_header, COOKIE)
            .map(|t| (t, digest(&[t.as_bytes()])))
            .find(|(_, d)| self.sessions.contains_key(d))
    }

    /// Whether the request's `Cookie` header carries a live session.
    ///
    /// # Errors
    ///
    /// No session cookie; one naming no session (tampered with, signed out,
    /// from before a restart); one whose session ended.
    pub fn session(&mut self, cookie_header: Option<&str>, now: Instant) -> Result<(), SessionRefusal> {
        self.sweep(now);
        if cookies(cookie_header, COOKIE).next().is_none() {
            return Err(SessionRefusal::Missing);
        }
        let (_, d) = self.current(cookie_header).ok_or(SessionRefusal::Unknown)?;
        match self.sessions.get(&d) {
            Some(until) if now < *until => Ok(()),
            Some(_) => Err(SessionRefusal::Expired),
            None => Err(SessionRefusal::Unknown),
        }
    }

    /// Ends the session the `Cookie` header names; whether there was one.
    /// Answer with [`clear_cookie`] either way.
    pub fn sign_out(&mut self, cookie_header: Option<&str>) -> bool {
        match self.current(cookie_header) {
            Some((_, d)) => self.sessions.remove(&d).is_some(),
            None => false,
        }
    }

    /// Ends every session (after a passkey is removed, say).
    pub fn sign_out_all(&mut self) {
        self.sessions.clear();
    }

    /// The anti-forgery value the signed-in owner's forms carry: the hex
    /// SHA-256 of the session token, domain-separated, so it is fixed for the
    /// session and useless without the cookie. `None` without a session held;
    /// check the session itself with [`Owner::session`].
    pub fn csrf(&self, cookie_header: Option<&str>) -> Option<String> {
        self.current(cookie_header).map(|(token, _)| hex::encode(digest(&[CSRF_DOMAIN, token.as_bytes()])))
    }

    /// Whether `presented` is the anti-forgery value of the session the
    /// `Cookie` header names (compared in constant time).
    pub fn check_csrf(&self, cookie_header: Option<&str>, presented: &str) -> bool {
        self.csrf(cookie_header).is_some_and(|expected| same(expected.as_bytes(), presented.as_bytes()))
    }
}
