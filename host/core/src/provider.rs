//! The contract between the host and a provider: what it says about itself, what it
//! is asked to run, and what comes back.
//!
//! A provider receives requests the host has already validated, floor-checked and
//! bounded. It enforces the floor once more against the boundary it is about to use
//! (defence in depth), and returns a result with the evidence it ran under, or an
//! error that says whether anything may have run.

use std::time::Duration;

use crate::refusal::{Reason, Refusal};
use crate::session::Opened;
use crate::tier::{Floor, Tier};
use crate::validate::Language;
use crate::wire::{JavaScriptResult, ModuleResult, ModuleRun, PayloadEnvironment, ProjectResult, ProjectRun};

/// What a run stood behind, as the host may state it: evidence, never attestation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Evidence {
    /// The tier the run executed behind.
    pub tier: Tier,
    /// The outer artifact that ran, content-addressed (`quickjs-wasm:sha256:...`).
    pub environment: String,
    /// The selected executable manifest, when established.
    pub software_identity: String,
    /// A typed reference to the sandbox instance, when there is one.
    pub instance: String,
    /// The verified policy digest, when the provider has a policy object.
    pub policy: String,
}

/// How one payload kind runs on a provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindSupport {
    /// The content-addressed artifact runs of this kind use, if any.
    pub identity: String,
    /// The selected executable manifest, if established.
    pub software_identity: String,
    /// The budget a request that states none gets.
    pub default_timeout: Duration,
    /// The longest run of this kind the provider allows.
    pub max_timeout: Duration,
    /// The languages its interpreters run.
    pub languages: Vec<Language>,
}

impl KindSupport {
    /// The budget for a request's `timeout_ms`: 0 or less takes the default, more
    /// than the ceiling is clamped to it (the protocol's rule).
    pub fn resolve_timeout(&self, requested_ms: i32) -> Duration {
        if requested_ms <= 0 {
            return self.default_timeout;
        }
        Duration::from_millis(requested_ms as u64).min(self.max_timeout)
    }

    /// Checks an explicit budget, as the CLI does: zero and anything over the ceiling
    /// are refused instead of adjusted, since the caller asked for that number.
    ///
    /// # Errors
    ///
    /// A `request` refusal naming the bound.
    pub fn check_explicit_timeout(&self, ms: u64) -> Result<Duration, Refusal> {
        let max = self.max_timeout.as_millis() as u64;
        if ms == 0 {
            return Err(Refusal::request("invalid request: a timeout of 0 ms allows nothing to run; use 1 or more"));
        }
        if ms > max {
            return Err(Refusal::request(format!(
                "invalid request: a timeout of {ms} ms is over this provider's ceiling of {max} ms"
            )));
        }
        Ok(Duration::from_millis(ms))
    }

    /// The wire form for `Describe`.
    pub fn environment(&self) -> PayloadEnvironment {
        PayloadEnvironment {
            identity: self.identity.clone(),
            max_timeout_ms: u32::try_from(self.max_timeout.as_millis()).unwrap_or(u32::MAX),
            software_identity: self.software_identity.clone(),
            languages: self.languages.iter().map(|l| l.as_str().to_string()).collect(),
        }
    }
}

/// What a provider states about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    /// The provider's wire name (`wasm`, `docker`).
    pub name: String,
    /// Snippets: always present for a provider that runs anything.
    pub snippet: Option<KindSupport>,
    /// Projects, when supported.
    pub project: Option<KindSupport>,
    /// Module tables, when supported.
    pub module: Option<KindSupport>,
    /// Memory per run, in MiB, as enforced.
    pub memory_mb: u32,
    /// The verified policy digest, if any.
    pub policy: String,
}

/// One brokered call's answer as the guest sees it: the upstream's status, content
/// type and body, or the broker's own refusal in the same shape. No other header
/// crosses into the sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostAnswer {
    /// HTTP status (the broker's 400, 403, 413, 429, 502 or 503, or the upstream's).
    pub status: u16,
    /// The content type, sanitised.
    pub content_type: String,
    /// The body.
    pub body: Vec<u8>,
}

/// The broker one run's code calls through. The host holds the credential behind
/// it; a provider only carries calls in and answers out.
pub trait HostApi: Send + Sync {
    /// One call: `method`, an absolute `path` (a concrete path, never a template),
    /// and an optional JSON body.
    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer;
}

/// The broker a session's sandbox reaches: the current call's, installed by the
/// host for the call's length, and none between calls (503). A session's sandbox
/// exists before its calls, so what it can reach is swapped, never remounted.
#[derive(Default)]
pub struct GrantSlot {
    current: std::sync::Mutex<Option<std::sync::Arc<dyn HostApi>>>,
}

impl std::fmt::Debug for GrantSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantSlot").field("armed", &self.armed()).finish()
    }
}

impl GrantSlot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<std::sync::Arc<dyn HostApi>>> {
        self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Serves `api` until [`GrantSlot::clear`].
    pub fn set(&self, api: std::sync::Arc<dyn HostApi>) {
        *self.lock() = Some(api);
    }

    /// Serves nothing: every call is answered 503.
    pub fn clear(&self) {
        *self.lock() = None;
    }

    /// Whether a call's broker is installed.
    pub fn armed(&self) -> bool {
        self.lock().is_some()
    }
}

impl HostApi for GrantSlot {
    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer {
        // Cloned out, so a slow upstream never holds the lock against `clear`.
        let api = self.lock().clone();
        match api {
            Some(api) => api.call(method, path, body),
            None => HostAnswer {
                status: 503,
                content_type: "application/json".into(),
                body: br#"{"error":"no granted call of this session is running"}"#.to_vec(),
            },
        }
    }
}

/// What a session's sandbox may reach, fixed when it opens: a running sandbox
/// cannot gain a way out later.
#[derive(Clone, Copy, Debug)]
pub enum SessionReach<'a> {
    /// Nothing: none of its calls may name a grant.
    Nothing,
    /// One grant every call holds: its client for every interpreter, its `api`
    /// a [`GrantSlot`] the host fills for each call's length.
    Held(&'a Grant),
    /// The grant a call names, during that call only (the original's way).
    PerCall,
}

/// A grant as a run's code sees it: the client installed as `globalThis[global]`,
/// the routes it may call (for the client's local refusal; the broker decides),
/// an optional SDK, and the broker behind it.
#[derive(Clone)]
pub struct Grant {
    /// The global the client is installed as (`host` by default).
    pub global: String,
    /// "METHOD /path" lines, `*` a whole segment.
    pub routes: Vec<String>,
    /// Extra JavaScript evaluated after the client is installed.
    pub preamble: String,
    /// The run's broker.
    pub api: std::sync::Arc<dyn HostApi>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant").field("global", &self.global).field("routes", &self.routes).finish_non_exhaustive()
    }
}

/// Which payload kinds can carry a grant on a provider.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrantSupport {
    /// Snippets.
    pub snippets: bool,
    /// Projects.
    pub projects: bool,
}

/// A snippet to run, validated and bounded by the host.
#[derive(Clone, Copy, Debug)]
pub struct Snippet<'a> {
    /// The language.
    pub language: Language,
    /// The source (validated: non-empty, no NUL, within limits).
    pub code: &'a str,
    /// The whole run's budget.
    pub timeout: Duration,
    /// The floor the request set; the provider checks it against its boundary too.
    pub floor: Option<Floor>,
    /// The run's grant, when it holds one.
    pub grant: Option<&'a Grant>,
}

/// A result with the evidence it ran under.
#[derive(Clone, Debug, PartialEq)]
pub struct Ran<T> {
    /// The guest's result.
    pub result: T,
    /// What it ran behind.
    pub evidence: Evidence,
}

/// Why a provider produced no result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// Nothing ran.
    #[error("{0}")]
    Refused(Refusal),
    /// The code may have run; the detail is for the log, never the caller.
    #[error("the run failed after it may have started: {0}")]
    MayHaveRun(String),
}

impl From<Refusal> for RunError {
    fn from(r: Refusal) -> RunError {
        RunError::Refused(r)
    }
}

/// The refusal for a payload kind (`projects`, `module tables`) a provider does not run.
pub fn unsupported_kind(provider: &str, kind: &str) -> Refusal {
    Refusal::unsupported(format!("the {provider} provider does not run {kind}"))
}

/// The refusal for a floor above the boundary a provider would use.
pub fn isolation_refusal(tier: Tier, floor: Floor) -> Refusal {
    Refusal::new(
        Reason::Isolation,
        format!("sandbox isolation requirement not met: this provider runs at {tier}, the request requires {floor}"),
    )
}

/// Checks a floor against a tier; `None` passes.
///
/// # Errors
///
/// An `isolation` refusal when the tier does not meet the floor.
pub fn check_floor(tier: Tier, floor: Option<Floor>) -> Result<(), Refusal> {
    match floor {
        Some(f) if !tier.meets(f) => Err(isolation_refusal(tier, f)),
        _ => Ok(()),
    }
}

/// A number a provider reports on the daemon's `/metrics`, beside the daemon's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Figure {
    /// The metric's name (`plimsoll_...`).
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// A counter (only grows) or, when false, a gauge.
    pub counter: bool,
    /// One label, fixed by the provider (never anything a caller chose).
    pub label: Option<(&'static str, &'static str)>,
    /// The value now.
    pub value: u64,
}

/// A backend that runs payloads. The built-in ones live in the host; plugin-backed
/// ones adapt a wasm component to this trait.
pub trait Provider: Send + Sync {
    /// What the provider states about itself.
    fn describe(&self) -> Description;

    /// The tier the provider can justify now (it may drop at runtime).
    fn tier(&self) -> Tier;

    /// Which payload kinds can carry a grant here; none unless the provider says so.
    fn grant_support(&self) -> GrantSupport {
        GrantSupport::default()
    }

    /// Finishes what the provider left off the result path (a remote backend's
    /// deletes) before the daemon exits; bounded by the provider's own limits.
    fn drain(&self) {}

    /// A cheap, repeatable readiness check.
    ///
    /// # Errors
    ///
    /// A refusal saying what is not ready.
    fn preflight(&self) -> Result<(), Refusal>;

    /// Where an in-host engine runs guests, for a provider that has one (`jailed`:
    /// confined worker processes; `in-process`: the daemon's own); `Describe`
    /// states it.
    fn engine_mode(&self) -> Option<&'static str> {
        None
    }

    /// Runs a snippet in a fresh sandbox.
    ///
    /// # Errors
    ///
    /// [`RunError`]: refused (nothing ran) or may have run.
    fn run_snippet(&self, snippet: &Snippet<'_>) -> Result<Ran<JavaScriptResult>, RunError>;

    /// Runs a project in a fresh sandbox.
    ///
    /// # Errors
    ///
    /// Refused `unsupported` unless the provider runs projects.
    fn run_project(
        &self,
        project: &ProjectRun,
        timeout: Duration,
        floor: Option<Floor>,
        grant: Option<&Grant>,
    ) -> Result<Ran<ProjectResult>, RunError> {
        let _ = (project, timeout, floor, grant);
        Err(unsupported_kind(&self.describe().name, "projects").into())
    }

    /// Runs a module table.
    ///
    /// # Errors
    ///
    /// Refused `unsupported` unless the provider runs modules.
    fn run_module(
        &self,
        module: &ModuleRun,
        timeout: Duration,
        floor: Option<Floor>,
    ) -> Result<Ran<ModuleResult>, RunError> {
        let _ = (module, timeout, floor);
        Err(unsupported_kind(&self.describe().name, "module tables").into())
    }

    /// Where a session's calls run, when the provider keeps sessions: the
    /// environment `Describe` states, its budgets and its cell languages.
    fn session_support(&self) -> Option<KindSupport> {
        None
    }

    /// Whether a session's sandbox can be given a way to the broker at its open
    /// ([`SessionReach::Held`] and [`SessionReach::PerCall`]); without it, a
    /// session open naming a grant is refused.
    fn session_grants(&self) -> bool {
        false
    }

    /// Whether a session opened without a grant can carry one named by a call
    /// ([`SessionReach::PerCall`]); by default, whenever it carries session
    /// grants at all.
    fn per_call_session_grants(&self) -> bool {
        self.session_grants()
    }

    /// Opens a session: one sandbox kept for many calls, reaching what `reach`
    /// says.
    ///
    /// # Errors
    ///
    /// Refused `unsupported` unless the provider keeps sessions (and, for a held
    /// grant, carries session grants); refused when the floor is above its
    /// boundary; may-have-run when the sandbox was made and lost.
    fn open_session(&self, floor: Option<Floor>, reach: SessionReach<'_>) -> Result<Opened, RunError> {
        let _ = (floor, reach);
        Err(unsupported_kind(&self.describe().name, "sessions").into())
    }

    /// What the provider reports on `/metrics` (its warm pool, for one); none by default.
    fn figures(&self) -> Vec<Figure> {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn support() -> KindSupport {
        KindSupport {
            identity: String::new(),
            software_identity: String::new(),
            default_timeout: Duration::from_secs(5),
            max_timeout: Duration::from_secs(30),
            languages: vec![Language::JavaScript],
        }
    }

    struct Answers(u16);

    impl HostApi for Answers {
        fn call(&self, _: &str, path: &str, _: Option<&[u8]>) -> HostAnswer {
            HostAnswer { status: self.0, content_type: "text/plain".into(), body: path.as_bytes().to_vec() }
        }
    }

    #[test]
    fn a_grant_slot_serves_the_current_calls_broker_and_nothing_between_calls() {
        let slot = GrantSlot::default();
        let idle = slot.call("GET", "/items", None);
        assert_eq!(idle.status, 503);
        assert_eq!(idle.body, br#"{"error":"no granted call of this session is running"}"#);
        slot.set(std::sync::Arc::new(Answers(200)));
        assert!(slot.armed());
        assert_eq!(
            slot.call("GET", "/items", None),
            HostAnswer { status: 200, content_type: "text/plain".into(), body: b"/items".to_vec() }
        );
        slot.set(std::sync::Arc::new(Answers(201)));
        assert_eq!(slot.call("POST", "/x", None).status, 201, "the next call's broker replaces the last");
        slot.clear();
        assert_eq!(slot.call("GET", "/items", None).status, 503);
    }

    #[test]
    fn wire_timeouts_default_and_clamp() {
        let s = support();
        assert_eq!(s.resolve_timeout(0), Duration::from_secs(5));
        assert_eq!(s.resolve_timeout(-7), Duration::from_secs(5));
        assert_eq!(s.resolve_timeout(1500), Duration::from_millis(1500));
        assert_eq!(s.resolve_timeout(i32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn explicit_timeouts_are_refused_not_adjusted() {
        let s = support();
        let zero = s.check_explicit_timeout(0).expect_err("refused");
        assert_eq!(zero.reason, Reason::Request);
        assert_eq!(zero.message, "invalid request: a timeout of 0 ms allows nothing to run; use 1 or more");
        let over = s.check_explicit_timeout(30_001).expect_err("refused");
        assert_eq!(over.message, "invalid request: a timeout of 30001 ms is over this provider's ceiling of 30000 ms");
        assert_eq!(s.check_explicit_timeout(30_000), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn floors_above_the_tier_are_refused_with_isolation() {
        assert!(check_floor(Tier::Process, None).is_ok());
        assert!(check_floor(Tier::Process, Some(Floor::Process)).is_ok());
        let r = check_floor(Tier::Process, Some(Floor::Vm)).expect_err("refused");
        assert_eq!(r.reason, Reason::Isolation);
        assert_eq!(
            r.message,
            "sandbox isolation requirement not met: this provider runs at process, the request requires vm"
        );
        assert_eq!(check_floor(Tier::Unknown, Some(Floor::Process)).expect_err("refused").reason, Reason::Isolation);
    }
}
