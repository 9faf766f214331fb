//! The daemon's sessions: who owns each one, whose turn it is, its chain of
//! records, its lifetime and idle timer, and the caps.
//!
//! A session belongs to the caller that opened it; an unknown ID and another
//! caller's get the same answer. One call runs at a time and one more (a call or
//! the close) may wait; every check that can refuse a call runs before it waits, so
//! an impossible call is never reported as busy. A session that ended by itself
//! stays collectable for [`TOMBSTONE_TTL`] so its owner's close still gets the count.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plimsoll_core::Reason;
use plimsoll_core::dispatch::{self, CallFailure, Link, SessionFacts, Started};
use plimsoll_core::provider::{GrantSlot, KindSupport, Provider, RunError, SessionReach, check_floor};
use plimsoll_core::record;
use plimsoll_core::session::{Ending, Session, Suspension};
use plimsoll_core::validate::{self, Language};
use plimsoll_core::wire::connect::{Code, ErrorBody};
use plimsoll_core::wire::session::{SessionTimes, check_owner};
use plimsoll_core::wire::{
    CloseSessionRequest, CloseSessionResponse, OpenSessionRequest, OpenSessionResponse, SessionEnd, SessionRunRequest,
    SessionRunResponse, from_json,
};
use serde_json::{Value, json};
use tokio::sync::Mutex as TurnLock;

use crate::admission::Limiter;
use crate::auth::Principal;
use crate::config::SessionSettings;
use crate::grants::{self, DaemonGrants};
use crate::log::{Log, cut};
use crate::metrics::Metrics;
use crate::service::{RpcError, admit};

/// How long an ended session's count stays collectable by its owner's close.
pub const TOMBSTONE_TTL: Duration = Duration::from_secs(10 * 60);

/// The text for an unknown ID and another caller's alike.
pub const NOT_FOUND: &str = "no such session for this caller";

/// The text for a call past the one that may wait.
pub const BUSY: &str = "another call is already waiting for this session's turn";

/// How often the reaper looks for expired, idle and collectable sessions.
const REAP_EVERY: Duration = Duration::from_millis(250);

/// A turn count that no call can join: the session is being ended.
const TAKEN: u32 = 1 << 16;

/// What a session holds between calls, behind its turn.
struct State {
    sandbox: Option<Box<dyn Session>>,
    calls: u64,
    last: String,
    suspended: bool,
}

/// A grant every call of a session holds, fixed at its open.
struct HeldGrant {
    profile: Arc<plimsoll_grants::Profile>,
    /// What the session's sandbox reaches: each call's broker, none between calls.
    slot: Arc<GrantSlot>,
    /// The profile's call budget, counted across the session's calls.
    spent: plimsoll_grants::Spent,
    /// The session's credential, when the profile mints one per session.
    credential: plimsoll_grants::HeldCredential,
}

/// One session, live or ended.
struct Entry {
    caller: String,
    owner: Option<String>,
    facts: SessionFacts,
    expires: Instant,
    idle: Duration,
    /// Calls running or waiting, plus the close; [`TAKEN`] once it is being ended.
    queue: AtomicU32,
    turn: Arc<TurnLock<State>>,
    last_used: Mutex<Instant>,
    end: Mutex<Option<(Ending, Instant, u64, String)>>,
    /// The grant its calls hold, when it was opened with one.
    grant: Option<Arc<HeldGrant>>,
}

impl Entry {
    fn ended(&self) -> Option<(Ending, u64, String)> {
        lock(&self.end).as_ref().map(|(e, _, calls, last)| (e.clone(), *calls, last.clone()))
    }

    fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        lock(&self.last_used).elapsed()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A place in the queue for a session's turn; leaving it frees the place.
struct Place<'a>(&'a AtomicU32);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Default)]
struct Table {
    by_id: HashMap<String, Arc<Entry>>,
    opening: u32,
    shutting_down: bool,
}

impl Table {
    fn live(&self) -> impl Iterator<Item = &Arc<Entry>> {
        self.by_id.values().filter(|e| lock(&e.end).is_none())
    }
}

/// An open in progress, counted against the daemon-wide cap until it lands or fails.
struct Opening<'a>(&'a Sessions);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        let mut t = lock(&self.0.table);
        t.opening = t.opening.saturating_sub(1);
    }
}

/// The daemon's sessions.
pub struct Sessions {
    provider: Arc<dyn Provider>,
    grants: Option<Arc<DaemonGrants>>,
    name: String,
    support: KindSupport,
    projects: bool,
    settings: SessionSettings,
    limiter: Arc<Limiter>,
    metrics: Arc<Metrics>,
    log: Log,
    table: Mutex<Table>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").field("provider", &self.name).field("settings", &self.settings).finish()
    }
}

fn refused(code: Code, reason: Reason, message: impl Into<String>) -> RpcError {
    RpcError::refused(code, reason, message)
}

fn not_found() -> RpcError {
    RpcError {
        code: Code::NotFound,
        body: ErrorBody::new(Code::NotFound, NOT_FOUND)
            .not_dispatched(Reason::Request)
            .session_ended(SessionEnd::NotFound.number(), NOT_FOUND),
    }
}

/// A call on a session that has ended: nothing ran.
fn ended_error(ending: &Ending, reason: Reason) -> RpcError {
    let message = if ending.detail.is_empty() {
        format!("the session has ended ({}); nothing ran", ending.end.name())
    } else {
        format!("the session has ended ({}): {}; nothing ran", ending.end.name(), ending.detail)
    };
    RpcError {
        code: Code::FailedPrecondition,
        body: ErrorBody::new(Code::FailedPrecondition, message)
            .not_dispatched(reason)
            .session_ended(ending.end.number(), &ending.detail),
    }
}

fn decode<T: serde::de::DeserializeOwned + serde::Serialize>(body: &[u8], message: &str) -> Result<T, RpcError> {
    from_json(body)
        .map_err(|e| refused(Code::InvalidArgument, Reason::Request, format!("invalid request: {message}: {e}")))
}

fn session_id() -> Result<String, String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| format!("no randomness for a session ID: {e}"))?;
    Ok(hex::encode(b))
}

fn unix_ms_in(d: Duration) -> i64 {
    Started::now().unix_ms.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Sessions {
    /// Sessions over `provider`, or `None` when sessions are off
    /// (`SANDBOX_MAX_SESSIONS` is 0) or the provider keeps none.
    pub fn new(
        provider: Arc<dyn Provider>,
        grants: Option<Arc<DaemonGrants>>,
        settings: SessionSettings,
        limiter: Arc<Limiter>,
        metrics: Arc<Metrics>,
        log: Log,
    ) -> Option<Arc<Sessions>> {
        if settings.max == 0 {
            return None;
        }
        let support = provider.session_support()?;
        let desc = provider.describe();
        Some(Arc::new(Sessions {
            name: desc.name,
            projects: desc.project.is_some(),
            provider,
            grants,
            support,
            settings,
            limiter,
            metrics,
            log,
            table: Mutex::new(Table::default()),
        }))
    }

    /// Where sessions run, as `Describe` states it.
    pub fn support(&self) -> &KindSupport {
        &self.support
    }

    /// The settings in force.
    pub fn settings(&self) -> &SessionSettings {
        &self.settings
    }

    /// Live sessions now.
    pub fn live(&self) -> usize {
        lock(&self.table).live().count()
    }

    fn lookup(&self, caller: &Principal, id: &str) -> Result<Arc<Entry>, RpcError> {
        let t = lock(&self.table);
        match t.by_id.get(id) {
            Some(e) if e.caller == caller.id => Ok(Arc::clone(e)),
            _ => Err(not_found()),
        }
    }

    /// Ends a session whose turn `state` is held: records the end, then deletes the
    /// sandbox (on a blocking thread) before returning, so a close answers only once
    /// the sandbox is gone.
    async fn finish(&self, entry: &Entry, state: &mut State, ending: Ending) {
        {
            let mut end = lock(&entry.end);
            if end.is_some() {
                return;
            }
            *end = Some((ending.clone(), Instant::now(), state.calls, state.last.clone()));
        }
        entry.queue.fetch_or(TAKEN, Ordering::AcqRel);
        if let Some(mut sandbox) = state.sandbox.take() {
            let closed = tokio::task::spawn_blocking(move || sandbox.close()).await;
            if let Err(e) = closed {
                self.log.error(
                    "session sandbox close failed",
                    &[("session", json!(entry.facts.fingerprint)), ("detail", json!(cut(&e.to_string())))],
                );
            }
        }
        let event = if ending.end == SessionEnd::Closed { "session closed" } else { "session ended" };
        self.log.info(
            event,
            &[
                ("caller", json!(entry.caller)),
                ("session", json!(entry.facts.fingerprint)),
                ("end", json!(ending.end.name())),
                ("calls", json!(state.calls)),
            ],
        );
    }

    /// `OpenSession`.
    pub async fn open(self: &Arc<Self>, caller: &Principal, body: &[u8]) -> Result<Vec<u8>, RpcError> {
        let mut req: OpenSessionRequest = decode(body, "OpenSessionRequest")?;
        if !req.trace_id.is_empty() && !validate::trace_id_ok(&req.trace_id) {
            req.trace_id.clear();
        }
        let floor = validate::floor(&req.minimum_isolation).map_err(RpcError::from_refusal)?;
        let rule = req.software_rule.clone().filter(|r| !r.mode.is_empty());
        if let Some(rule) = &rule {
            validate::software_rule(rule).map_err(RpcError::from_refusal)?;
        }
        for l in &req.languages {
            Language::parse(l).map_err(RpcError::from_refusal)?;
        }
        let owner = if req.owner.is_empty() {
            None
        } else {
            check_owner(&req.owner).map_err(|m| refused(Code::InvalidArgument, Reason::Request, m))?;
            Some(req.owner.clone())
        };
        let operator = SessionTimes {
            lifetime_ms: self.settings.lifetime.as_millis() as u64,
            idle_ms: u32::try_from(self.settings.idle.as_millis()).unwrap_or(u32::MAX),
        };
        let times = operator
            .shortened_by(req.lifetime_ms, req.idle_timeout_ms)
            .map_err(|m| refused(Code::InvalidArgument, Reason::Request, m))?;
        check_floor(self.provider.tier(), floor).map_err(RpcError::from_refusal)?;
        self.check_rule(rule.as_ref(), &self.support.software_identity)?;
        let lifetime = Duration::from_millis(times.lifetime_ms);
        let held = self.held_grant(&req.grant_profile, &caller.id, lifetime)?;
        let session_grant = held.as_ref().map(|h| grants::client(&h.profile, h.slot.clone()));
        // Calls may name their own grants only if the sandbox has a socket from its open.
        let per_call = self.provider.per_call_session_grants()
            && self.grants.as_ref().is_some_and(|g| g.sessions_possible(&caller.id));

        let (opening, victims) = self.admit(caller, owner.as_deref())?;
        for victim in victims {
            let mut state = Arc::clone(&victim.turn).lock_owned().await;
            let detail = "a newer session of the same owner replaced it at the per-owner cap";
            self.finish(&victim, &mut state, Ending::new(SessionEnd::Replaced, detail)).await;
        }
        let limiter_permit = admit(&self.limiter, &self.metrics, &caller.id)?;
        let provider = Arc::clone(&self.provider);
        let opened = tokio::task::spawn_blocking(move || {
            let reach = match &session_grant {
                Some(g) => SessionReach::Held(g),
                None if per_call => SessionReach::PerCall,
                None => SessionReach::Nothing,
            };
            let out = provider.open_session(floor, reach);
            drop(limiter_permit);
            out
        })
        .await;
        let opened = match opened {
            Ok(Ok(o)) => o,
            Ok(Err(RunError::Refused(r))) => return Err(RpcError::from_refusal(r)),
            Ok(Err(RunError::MayHaveRun(detail))) => return Err(self.internal(&detail)),
            Err(e) => return Err(self.internal(&format!("the open's thread ended abnormally: {e}"))),
        };
        let mut sandbox = opened.session;
        let mut evidence = opened.evidence;
        evidence.tier = evidence.tier.min(self.provider.tier());
        // Checked again on the sandbox made: the provider may have moved on since.
        let recheck = check_floor(evidence.tier, floor)
            .map_err(RpcError::from_refusal)
            .and_then(|()| self.check_rule(rule.as_ref(), &evidence.software_identity));
        if let Err(e) = recheck {
            let _ = tokio::task::spawn_blocking(move || sandbox.close()).await;
            return Err(e);
        }
        let id = match session_id() {
            Ok(id) => id,
            Err(detail) => {
                let _ = tokio::task::spawn_blocking(move || sandbox.close()).await;
                return Err(self.internal(&detail));
            }
        };
        let fingerprint = record::session_fingerprint(&id);
        let idle =
            if self.settings.idle.is_zero() { Duration::ZERO } else { Duration::from_millis(times.idle_ms.into()) };
        let resp = OpenSessionResponse {
            session_id: id.clone(),
            session: fingerprint.clone(),
            sandbox: self.name.clone(),
            isolation: evidence.tier.as_str().to_string(),
            expires_unix_ms: unix_ms_in(lifetime),
            idle_timeout_ms: u32::try_from(idle.as_millis()).unwrap_or(u32::MAX),
            software_identity: evidence.software_identity.clone(),
        };
        let facts = SessionFacts {
            provider: self.name.clone(),
            support: self.support.clone(),
            projects: self.projects,
            evidence,
            floor,
            rule,
            fingerprint: fingerprint.clone(),
        };
        let entry = Arc::new(Entry {
            caller: caller.id.clone(),
            owner,
            facts,
            expires: Instant::now() + lifetime,
            idle,
            queue: AtomicU32::new(0),
            turn: Arc::new(TurnLock::new(State {
                sandbox: Some(sandbox),
                calls: 0,
                last: String::new(),
                suspended: false,
            })),
            last_used: Mutex::new(Instant::now()),
            end: Mutex::new(None),
            grant: held.map(Arc::new),
        });
        let bytes =
            serde_json::to_vec(&resp).map_err(|e| self.internal(&format!("encoding OpenSessionResponse: {e}")))?;
        lock(&self.table).by_id.insert(id, entry);
        // Counted twice for a moment (live and opening): the cap errs on the safe side.
        drop(opening);
        let mut audit = vec![
            ("op", json!("OpenSession")),
            ("caller", json!(caller.id)),
            ("session", json!(fingerprint)),
            ("isolation", json!(resp.isolation)),
            ("lifetime_ms", json!(times.lifetime_ms)),
        ];
        if !req.trace_id.is_empty() {
            audit.push(("trace_id", json!(req.trace_id)));
        }
        self.log.info("session opened", &audit);
        Ok(bytes)
    }

    /// The grant a session's open names, checked: a profile this caller may use
    /// that allows sessions, on a provider whose sessions carry one.
    fn held_grant(&self, name: &str, caller: &str, lifetime: Duration) -> Result<Option<HeldGrant>, RpcError> {
        if name.is_empty() {
            return Ok(None);
        }
        if name.len() > 128 {
            return Err(refused(
                Code::InvalidArgument,
                Reason::Request,
                "invalid request: grant_profile exceeds 128 bytes",
            ));
        }
        let profile = match &self.grants {
            Some(g) => g.for_session(name, caller),
            None => Err(grants::no_profiles(name)),
        }
        .map_err(RpcError::from_refusal)?;
        if !self.provider.session_grants() {
            return Err(RpcError::from_refusal(plimsoll_core::Refusal::unsupported(format!(
                "the {} provider's sessions cannot carry a grant from their open; name grant_profile in a Run call",
                self.name
            ))));
        }
        Ok(Some(HeldGrant {
            profile,
            slot: Arc::new(GrantSlot::default()),
            spent: plimsoll_grants::Spent::fresh("session"),
            credential: plimsoll_grants::HeldCredential::new(lifetime),
        }))
    }

    fn check_rule(&self, rule: Option<&plimsoll_core::wire::SoftwareRule>, identity: &str) -> Result<(), RpcError> {
        match rule {
            Some(r) if !r.identities.is_empty() && !r.identities.iter().any(|i| i == identity) => Err(refused(
                Code::FailedPrecondition,
                Reason::Environment,
                "the software a session here would run is outside the request's software rule",
            )),
            _ => Ok(()),
        }
    }

    /// The caps, under one lock: the daemon's, the caller's, the owner's. At the
    /// owner's cap the owner's least recently used idle sessions are taken (their
    /// turns closed to calls) to be replaced; too few idle ones refuses the open.
    fn admit(&self, caller: &Principal, owner: Option<&str>) -> Result<(Opening<'_>, Vec<Arc<Entry>>), RpcError> {
        let mut t = lock(&self.table);
        if t.shutting_down {
            return Err(refused(Code::Unavailable, Reason::Capacity, "the daemon is shutting down; no new sessions"));
        }
        let s = &self.settings;
        let mut victims = Vec::new();
        if let Some(owner) = owner
            && s.per_owner > 0
        {
            let mut theirs: Vec<&Arc<Entry>> =
                t.live().filter(|e| e.caller == caller.id && e.owner.as_deref() == Some(owner)).collect();
            let over = (theirs.len() + 1).saturating_sub(s.per_owner as usize);
            if over > 0 {
                theirs.sort_by_key(|e| std::cmp::Reverse(e.idle_for()));
                for e in theirs {
                    if victims.len() == over {
                        break;
                    }
                    if e.queue.compare_exchange(0, TAKEN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                        victims.push(Arc::clone(e));
                    }
                }
                if victims.len() < over {
                    for v in &victims {
                        v.queue.fetch_and(!TAKEN, Ordering::AcqRel);
                    }
                    return Err(refused(
                        Code::ResourceExhausted,
                        Reason::Capacity,
                        format!(
                            "this owner holds {} sessions, the cap (SANDBOX_MAX_SESSIONS_PER_OWNER), and none is idle to replace; close one or retry when a call ends; nothing was opened or closed",
                            s.per_owner
                        ),
                    ));
                }
            }
        }
        let replaced = victims.len();
        let mine = t.live().filter(|e| e.caller == caller.id).count() - replaced;
        let release = |victims: &[Arc<Entry>]| {
            for v in victims {
                v.queue.fetch_and(!TAKEN, Ordering::AcqRel);
            }
        };
        if s.per_caller > 0 && mine >= s.per_caller as usize {
            release(&victims);
            return Err(refused(
                Code::ResourceExhausted,
                Reason::Capacity,
                format!(
                    "this caller holds {mine} sessions, its cap (SANDBOX_MAX_SESSIONS_PER_CALLER); close one first; nothing was opened or closed"
                ),
            ));
        }
        let all = t.live().count() - replaced + t.opening as usize;
        if all >= s.max as usize {
            release(&victims);
            return Err(refused(
                Code::ResourceExhausted,
                Reason::Capacity,
                format!(
                    "this daemon holds its maximum of {} sessions (SANDBOX_MAX_SESSIONS); close one or retry later; nothing was opened or closed",
                    s.max
                ),
            ));
        }
        t.opening += 1;
        drop(t);
        Ok((Opening(self), victims))
    }

    /// `SessionRun`.
    pub async fn call(self: &Arc<Self>, caller: &Principal, body: &[u8]) -> Result<Vec<u8>, RpcError> {
        let started = Started::now();
        let mut req: SessionRunRequest = decode(body, "SessionRunRequest")?;
        if !req.trace_id.is_empty() && !validate::trace_id_ok(&req.trace_id) {
            req.trace_id.clear();
        }
        if req.session_id.is_empty() {
            return Err(refused(Code::InvalidArgument, Reason::Request, "invalid request: sessionId is required"));
        }
        let entry = self.lookup(caller, &req.session_id)?;
        if let Some((ending, _, _)) = entry.ended() {
            return Err(ended_error(&ending, Reason::Request));
        }
        let session_profile = |name: &str| match &self.grants {
            Some(g) => g.for_session(name, &caller.id),
            None => Err(grants::no_profiles(name)),
        };
        let prepared =
            dispatch::prepare_call(&entry.facts, self.provider.tier(), &req, &|n| session_profile(n).map(|_| ()))
                .map_err(RpcError::from_refusal)?;
        let profile = match (prepared.grant_profile(), &entry.grant) {
            ("", _) => None,
            (name, Some(h)) => {
                return Err(refused(
                    Code::InvalidArgument,
                    Reason::Request,
                    format!(
                        "this session holds grant_profile {:?} for every call; send its calls without grant_profile (naming {name:?} here is refused)",
                        h.profile.name
                    ),
                ));
            }
            (_, None) if !self.provider.per_call_session_grants() => {
                return Err(RpcError::from_refusal(plimsoll_core::Refusal::unsupported(format!(
                    "the {} provider's session calls cannot name a grant; open the session with grant_profile, or name it in a Run call outside a session",
                    self.name
                ))));
            }
            (name, None) => Some(session_profile(name).map_err(RpcError::from_refusal)?),
        };
        let before = entry.queue.fetch_add(1, Ordering::AcqRel);
        let place = Place(&entry.queue);
        if before >= TAKEN {
            drop(place);
            let ending = entry.ended().map(|(e, _, _)| e).unwrap_or_else(|| Ending::new(SessionEnd::Closed, ""));
            return Err(ended_error(&ending, Reason::Request));
        }
        if before >= 2 {
            return Err(refused(Code::ResourceExhausted, Reason::Capacity, BUSY));
        }
        let mut state = Arc::clone(&entry.turn).lock_owned().await;
        if let Some((ending, _, _)) = entry.ended() {
            return Err(ended_error(&ending, Reason::Request));
        }
        if Instant::now() >= entry.expires {
            self.finish(&entry, &mut state, Ending::new(SessionEnd::Expired, "the session's lifetime passed")).await;
            let ending = entry.ended().map(|(e, _, _)| e).unwrap_or_else(|| Ending::new(SessionEnd::Expired, ""));
            return Err(ended_error(&ending, Reason::Request));
        }
        let permit = admit(&self.limiter, &self.metrics, &caller.id)?;
        self.metrics.run();
        let link = Link { sequence: state.calls + 1, previous_sha256: state.last.clone() };
        let facts = entry.facts.clone();
        let tier = self.provider.tier();
        let grants = self.grants.clone();
        let subject = caller.id.clone();
        let held = entry.grant.clone();
        let ran = tokio::task::spawn_blocking(move || {
            let opened = match (profile, &grants, &held) {
                (Some(p), Some(g), _) => match g.open(p, &subject, prepared.timeout) {
                    Ok(o) => Some(o),
                    Err(r) => return (state, Err(CallFailure::Refused(r)), None),
                },
                // The session's own grant: minted for this call, charged to the session.
                (None, Some(g), Some(h)) => {
                    match g.open_in_session(
                        h.profile.clone(),
                        &subject,
                        prepared.timeout,
                        h.spent.clone(),
                        &h.credential,
                    ) {
                        Ok(o) => Some(o),
                        Err(r) => return (state, Err(CallFailure::Refused(r)), None),
                    }
                }
                _ => None,
            };
            // A held grant reaches the sandbox through its slot, not the call.
            let through_slot = held.is_some();
            let grant = opened.as_ref().filter(|_| !through_slot).map(|o| &o.grant);
            if let (true, Some(h), Some(o)) = (through_slot, &held, &opened) {
                h.slot.set(o.run.clone());
            }
            let out = match state.sandbox.as_mut() {
                Some(sandbox) => {
                    dispatch::execute_call(sandbox.as_mut(), &facts, tier, &prepared, grant, link, &started)
                }
                None => Err(CallFailure::Ended(Ending::new(SessionEnd::NotFound, "the session's sandbox is gone"))),
            };
            if let Some(h) = &held {
                h.slot.clear();
            }
            // The grant ends with the call's code, so the trace is complete.
            let closed = opened.as_ref().map(grants::close);
            drop(permit);
            (state, out, closed)
        })
        .await;
        let (mut state, out, closed) = match ran {
            Ok(r) => r,
            Err(e) => {
                // The turn went with the thread; take it again to end the session,
                // since whether the call ran is unknown and the chain cannot go on.
                let mut state = Arc::clone(&entry.turn).lock_owned().await;
                let detail = "the session's call ended abnormally; the session cannot be trusted to continue";
                self.finish(&entry, &mut state, Ending::new(SessionEnd::BoundaryFailed, detail)).await;
                self.metrics.failed();
                return Err(self.internal(&format!("a session call's thread ended abnormally: {e}")));
            }
        };
        state.suspended = false;
        let mut audit: Vec<(&str, Value)> = vec![
            ("op", json!("SessionRun")),
            ("caller", json!(caller.id)),
            ("session", json!(entry.facts.fingerprint)),
        ];
        if !req.trace_id.is_empty() {
            audit.push(("trace_id", json!(req.trace_id)));
        }
        if let Some(c) = &closed {
            audit.extend(c.log_fields());
            self.metrics.granted(c);
        }
        let reply = match out {
            Ok((mut resp, ended)) => {
                if let Some(c) = &closed {
                    c.advise(&mut resp);
                }
                entry.touch();
                state.calls += 1;
                state.last = resp.record.as_ref().map(|r| r.record_sha256.clone()).unwrap_or_default();
                audit.push(("session_call", json!(state.calls)));
                audit.push(("isolation", json!(resp.isolation)));
                if let Some(c) = &resp.cell {
                    audit.push(("exit_code", json!(c.exit_code)));
                    audit.push(("timed_out", json!(c.timed_out)));
                }
                let mut answer = SessionRunResponse { run: Some(resp), ..SessionRunResponse::default() };
                if let Some(ending) = ended {
                    answer.ended = ending.end;
                    answer.end_detail = ending.detail.clone();
                    self.finish(&entry, &mut state, ending).await;
                }
                self.log.info("session call", &audit);
                serde_json::to_vec(&answer).map_err(|e| self.internal(&format!("encoding SessionRunResponse: {e}")))
            }
            Err(CallFailure::Refused(r)) => Err(RpcError::from_refusal(r)),
            Err(CallFailure::Ended(ending)) => {
                self.finish(&entry, &mut state, ending.clone()).await;
                Err(ended_error(&ending, Reason::Environment))
            }
            Err(CallFailure::Unanswered { record, detail, ended }) => {
                entry.touch();
                state.calls += 1;
                state.last = record.record_sha256.clone();
                if let Some(ending) = ended {
                    self.finish(&entry, &mut state, ending).await;
                }
                self.metrics.failed();
                audit.push(("session_call", json!(state.calls)));
                self.log.info("session call unanswered", &audit);
                let mut e = self.internal(&detail);
                e.body = e.body.unanswered(&record);
                Err(e)
            }
        };
        drop(state);
        drop(place);
        reply
    }

    /// `CloseSession`.
    pub async fn close(self: &Arc<Self>, caller: &Principal, body: &[u8]) -> Result<Vec<u8>, RpcError> {
        let req: CloseSessionRequest = decode(body, "CloseSessionRequest")?;
        if req.session_id.is_empty() {
            return Err(refused(Code::InvalidArgument, Reason::Request, "invalid request: sessionId is required"));
        }
        let entry = self.lookup(caller, &req.session_id)?;
        if entry.ended().is_none() {
            let before = entry.queue.fetch_add(1, Ordering::AcqRel);
            let place = Place(&entry.queue);
            if (2..TAKEN).contains(&before) {
                return Err(refused(Code::ResourceExhausted, Reason::Capacity, BUSY));
            }
            let mut state = Arc::clone(&entry.turn).lock_owned().await;
            self.finish(&entry, &mut state, Ending::new(SessionEnd::Closed, "")).await;
            drop(state);
            drop(place);
        }
        let (ending, calls, last) =
            entry.ended().ok_or_else(|| self.internal("a closed session has no end recorded"))?;
        let resp = CloseSessionResponse {
            session: entry.facts.fingerprint.clone(),
            calls,
            last_record_sha256: last,
            ended: ending.end,
        };
        serde_json::to_vec(&resp).map_err(|e| self.internal(&format!("encoding CloseSessionResponse: {e}")))
    }

    fn internal(&self, detail: &str) -> RpcError {
        crate::service::internal_error(&self.log, detail)
    }

    /// One pass of housekeeping: ends expired sessions, suspends idle ones and
    /// forgets tombstones past [`TOMBSTONE_TTL`]. A session whose turn is held is
    /// left for the next pass (its call sees the lifetime itself).
    pub async fn reap(self: &Arc<Self>) {
        let entries: Vec<Arc<Entry>> = {
            let mut t = lock(&self.table);
            t.by_id.retain(|_, e| lock(&e.end).as_ref().is_none_or(|(_, at, _, _)| at.elapsed() < TOMBSTONE_TTL));
            t.live().cloned().collect()
        };
        for entry in entries {
            let expired = Instant::now() >= entry.expires;
            let idle = !entry.idle.is_zero() && entry.idle_for() >= entry.idle;
            if !expired && !idle {
                continue;
            }
            if entry.queue.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
                continue;
            }
            let place = Place(&entry.queue);
            let Ok(mut state) = Arc::clone(&entry.turn).try_lock_owned() else {
                continue;
            };
            if expired {
                self.finish(&entry, &mut state, Ending::new(SessionEnd::Expired, "the session's lifetime passed"))
                    .await;
            } else if !state.suspended
                && let Some(mut sandbox) = state.sandbox.take()
            {
                let (sandbox, suspended) = match tokio::task::spawn_blocking(move || {
                    let r = sandbox.suspend();
                    (sandbox, r)
                })
                .await
                {
                    Ok(r) => r,
                    Err(e) => {
                        self.log.error("session suspend ended abnormally", &[("detail", json!(e.to_string()))]);
                        continue;
                    }
                };
                state.sandbox = Some(sandbox);
                match suspended {
                    Ok(Suspension::Released) => {
                        state.suspended = true;
                        self.log.info("session suspended", &[("session", json!(entry.facts.fingerprint))]);
                    }
                    Ok(Suspension::KeptRunning) => {
                        // Marked, so the reaper does not ask again each pass.
                        state.suspended = true;
                        self.log.info(
                            "session idle; the provider cannot suspend its sandbox, which keeps running until the next call, the close or the lifetime",
                            &[("session", json!(entry.facts.fingerprint))],
                        );
                    }
                    Err(why) => {
                        let detail = format!("the idle session could not be suspended: {why}");
                        self.finish(&entry, &mut state, Ending::new(SessionEnd::BoundaryFailed, detail)).await;
                    }
                }
            }
            drop(state);
            drop(place);
        }
    }

    /// Runs [`Sessions::reap`] until the daemon stops.
    pub fn spawn_reaper(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(REAP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(me) = me.upgrade() else { return };
                me.reap().await;
            }
        })
    }

    /// Refuses new sessions and ends every live one (`shutdown`), each after its
    /// call in flight.
    pub async fn shutdown(self: &Arc<Self>) {
        let entries: Vec<Arc<Entry>> = {
            let mut t = lock(&self.table);
            t.shutting_down = true;
            t.live().cloned().collect()
        };
        for entry in entries {
            let mut state = Arc::clone(&entry.turn).lock_owned().await;
            self.finish(&entry, &mut state, Ending::new(SessionEnd::Shutdown, "the daemon shut down")).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    use plimsoll_core::Tier;
    use plimsoll_core::provider::HostApi;
    use plimsoll_core::provider::{Description, Evidence, Ran, Snippet};
    use plimsoll_core::session::{Answered, Call, CallError, Opened, Output};
    use plimsoll_core::wire::{CellResult, JavaScriptResult, RunRecord};

    use super::*;
    use crate::auth::{ClientEntry, ClientsFile, Verifier, fingerprint};
    use crate::config::{Admission, LogFormat};
    use crate::service::{Daemon, Procedure};

    /// What the fake sessions did, shared with the test.
    #[derive(Default)]
    struct Seen {
        closed: AtomicU32,
        suspended: AtomicBool,
        /// How many times a suspend was asked for.
        suspends: AtomicU32,
        /// Whether the sandbox cannot be suspended (a remote backend's).
        keeps_running: AtomicBool,
        /// While set, a `hold` cell waits for a message here.
        hold: Mutex<Option<mpsc::Receiver<()>>>,
        started: Mutex<Option<mpsc::Sender<()>>>,
        /// Whether the provider gives sessions a way to the broker.
        grants: AtomicBool,
        /// What each open was given to reach.
        reach: Mutex<Vec<&'static str>>,
        /// The last held grant's broker (the daemon's slot).
        slot: Mutex<Option<Arc<dyn HostApi>>>,
    }

    struct FakeSession(Arc<Seen>);

    fn evidence() -> Evidence {
        Evidence {
            tier: Tier::Container,
            environment: "fake-image:sha256:ab".into(),
            software_identity: "fake-manifest:1".into(),
            ..Evidence::default()
        }
    }

    impl Session for FakeSession {
        fn call(&mut self, call: Call<'_>) -> Result<Answered, CallError> {
            let Call::Cell(c) = call else {
                return Err(plimsoll_core::Refusal::unsupported("cells only").into());
            };
            let mut ended = None;
            match c.code {
                "hold" => {
                    if let Some(tx) = lock(&self.0.started).as_ref() {
                        let _ = tx.send(());
                    }
                    let rx = lock(&self.0.hold).take();
                    if let Some(rx) = rx {
                        let _ = rx.recv();
                    }
                }
                "disk" => {
                    ended = Some(Ending::new(SessionEnd::DiskExceeded, "the session's files hold 2 MiB, over 1 MiB"))
                }
                "changed" => {
                    return Err(CallError::Ended(Ending::new(
                        SessionEnd::SandboxChanged,
                        "the container's memory limit is 1 GiB, it was opened with 512 MiB",
                    )));
                }
                "lost" => return Err(CallError::MayHaveRun { detail: "the relay vanished".into(), ended: None }),
                "api" => {
                    // What the sandbox would reach through its socket during this call.
                    let status = lock(&self.0.slot).as_ref().map(|s| s.call("GET", "/a", None).status);
                    let stdout = format!("{status:?}").into_bytes();
                    let output = Output::Cell(CellResult { stdout, ..CellResult::default() });
                    return Ok(Answered { output, evidence: evidence(), ended: None });
                }
                _ => {}
            }
            Ok(Answered {
                output: Output::Cell(CellResult { stdout: c.code.as_bytes().to_vec(), ..CellResult::default() }),
                evidence: evidence(),
                ended,
            })
        }

        fn suspend(&mut self) -> Result<Suspension, String> {
            self.0.suspends.fetch_add(1, Ordering::SeqCst);
            if self.0.keeps_running.load(Ordering::SeqCst) {
                return Ok(Suspension::KeptRunning);
            }
            self.0.suspended.store(true, Ordering::SeqCst);
            Ok(Suspension::Released)
        }

        fn close(&mut self) {
            self.0.closed.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Fake(Arc<Seen>);

    impl Provider for Fake {
        fn describe(&self) -> Description {
            Description {
                name: "fake".into(),
                snippet: self.session_support(),
                project: None,
                module: None,
                memory_mb: 256,
                policy: String::new(),
            }
        }
        fn tier(&self) -> Tier {
            Tier::Container
        }
        fn preflight(&self) -> Result<(), plimsoll_core::Refusal> {
            Ok(())
        }
        fn run_snippet(&self, _: &Snippet<'_>) -> Result<Ran<JavaScriptResult>, RunError> {
            Err(plimsoll_core::Refusal::unsupported("sessions only").into())
        }
        fn session_grants(&self) -> bool {
            self.0.grants.load(Ordering::SeqCst)
        }
        fn session_support(&self) -> Option<KindSupport> {
            Some(KindSupport {
                identity: "fake-image:sha256:ab".into(),
                software_identity: "fake-manifest:1".into(),
                default_timeout: Duration::from_secs(5),
                max_timeout: Duration::from_secs(30),
                languages: vec![Language::JavaScript, Language::Python],
            })
        }
        fn open_session(
            &self,
            floor: Option<plimsoll_core::Floor>,
            reach: SessionReach<'_>,
        ) -> Result<Opened, RunError> {
            check_floor(Tier::Container, floor)?;
            let kind = match reach {
                SessionReach::Nothing => "nothing",
                SessionReach::Held(g) => {
                    *lock(&self.0.slot) = Some(g.api.clone());
                    "held"
                }
                SessionReach::PerCall => "per-call",
            };
            lock(&self.0.reach).push(kind);
            Ok(Opened { session: Box::new(FakeSession(Arc::clone(&self.0))), evidence: evidence() })
        }
    }

    fn settings() -> SessionSettings {
        SessionSettings { max: 8, ..SessionSettings::default() }
    }

    /// Callers `ids`, each with the token `token-of-<id>` and scope code:run.
    fn clients(ids: &[&str]) -> ClientsFile {
        let mut file = ClientsFile::default();
        for id in ids {
            file.clients.push(ClientEntry {
                id: id.to_string(),
                token_sha256: fingerprint(&format!("token-of-{id}")),
                scopes: vec!["code:run".into()],
                paid_seconds_per_day: None,
            });
        }
        file
    }

    /// A daemon over the fake provider that knows `callers`, without sessions yet.
    fn daemon_for(seen: &Arc<Seen>, callers: &[&str]) -> Daemon {
        let limiter =
            Limiter::new(Admission { max_concurrent: 8, per_key_concurrent: 8, rate_per_min: 0, rate_burst: 0 });
        Daemon::new(
            Arc::new(Fake(Arc::clone(seen))),
            Verifier::clients(&clients(callers)),
            limiter,
            Arc::default(),
            Log::new(LogFormat::Json),
        )
    }

    fn daemon_with(seen: &Arc<Seen>, settings: SessionSettings) -> Arc<Daemon> {
        Arc::new(daemon_for(seen, &["alice", "bob"]).with_sessions(settings))
    }

    /// A daemon over the fake provider with two profiles for alice: `sessions`
    /// (allowed in sessions) and `runs-only`; bob may use neither.
    fn granted_daemon(seen: &Arc<Seen>) -> Arc<Daemon> {
        let text = r#"{"profiles": {
            "sessions": {"base_url": "http://127.0.0.1:9", "allowed_callers": ["alice"], "allow": ["GET /a"], "allow_in_sessions": true},
            "runs-only": {"base_url": "http://127.0.0.1:9", "allowed_callers": ["alice"], "allow": ["GET /a"]}}}"#;
        let none = |_: &str| None;
        let profiles = plimsoll_grants::Profiles::parse(
            text,
            &plimsoll_grants::LoadContext { env: &|_| None, dir: None, plugins: &none },
        )
        .expect("profiles");
        let grants = Arc::new(crate::grants::DaemonGrants::new(profiles).expect("grants"));
        Arc::new(daemon_for(seen, &["alice", "bob"]).with_grants(grants).with_sessions(settings()))
    }

    #[tokio::test]
    async fn a_session_call_with_a_grant_needs_the_profiles_consent() {
        let d = granted_daemon(&Arc::default());
        let id = open(&d, "alice", json!({})).await;
        let call = |payload: Value| {
            let mut body = json!({"protocol": 4, "sessionId": id});
            if let (Some(b), Some(p)) = (body.as_object_mut(), payload.as_object()) {
                b.extend(p.clone());
            }
            body
        };
        let e = rpc(
            &d,
            "alice",
            Procedure::SessionRun,
            call(json!({"javascript": {"code": "1", "grantProfile": "runs-only"}})),
        )
        .await
        .expect_err("refused");
        assert_eq!(e.reason(), Some(Reason::Permission));
        assert_eq!(
            e.body.message,
            "grant_profile \"runs-only\" does not allow sessions; use it in a Run call, or set allow_in_sessions in the profile"
        );
        let e =
            rpc(&d, "alice", Procedure::SessionRun, call(json!({"javascript": {"code": "1", "grantProfile": "nope"}})))
                .await
                .expect_err("refused");
        assert_eq!(
            (e.reason(), e.body.message.as_str()),
            (Some(Reason::Permission), "grant_profile \"nope\" is not available to this caller")
        );
        // Refusals ran nothing and broke nothing: the session goes on.
        assert!(cell(&d, "alice", &id, "1").await.is_ok());
    }

    #[tokio::test]
    async fn a_held_grant_is_served_during_each_call_only_and_its_calls_name_no_other() {
        let seen = Arc::new(Seen::default());
        seen.grants.store(true, Ordering::SeqCst);
        let d = granted_daemon(&seen);
        let held = open(&d, "alice", json!({"grantProfile": "sessions"})).await;
        let _plain = open(&d, "alice", json!({})).await;
        let _bobs = open(&d, "bob", json!({})).await;
        assert_eq!(
            *lock(&seen.reach),
            ["held", "per-call", "nothing"],
            "only a caller who may name a profile gets a socket"
        );
        let slot = lock(&seen.slot).clone().expect("the held grant's slot");
        assert_eq!(slot.call("GET", "/a", None).status, 503, "nothing is served before a call");
        // During the call the profile's broker answers (its upstream at port 9 refuses: 502).
        let out = cell(&d, "alice", &held, "api").await.expect("answered");
        let stdout = out["run"]["cell"]["stdout"].as_str().unwrap_or_default();
        use base64::Engine as _;
        assert_eq!(base64::engine::general_purpose::STANDARD.decode(stdout).expect("base64"), b"Some(502)");
        assert_eq!(slot.call("GET", "/a", None).status, 503, "nor after it");
        let body = json!({"protocol": 4, "sessionId": held, "javascript": {"code": "1", "grantProfile": "sessions"}});
        let e = rpc(&d, "alice", Procedure::SessionRun, body).await.expect_err("refused");
        assert_eq!(
            (e.reason(), e.body.message.as_str()),
            (
                Some(Reason::Request),
                "this session holds grant_profile \"sessions\" for every call; send its calls without grant_profile (naming \"sessions\" here is refused)"
            )
        );
        assert!(cell(&d, "alice", &held, "1").await.is_ok(), "the refusal ran nothing and the session goes on");
    }

    fn who(d: &Daemon, id: &str) -> Principal {
        d.authorize(Some(format!("Bearer token-of-{id}").as_bytes())).expect("a caller")
    }

    async fn rpc(d: &Arc<Daemon>, caller: &str, p: Procedure, body: Value) -> Result<Value, RpcError> {
        let who = who(d, caller);
        let bytes = d.handle(p, &who, body.to_string().as_bytes()).await?;
        Ok(serde_json::from_slice(&bytes).expect("JSON"))
    }

    #[tokio::test]
    async fn an_open_naming_a_grant_is_refused_by_name_unless_the_profile_and_provider_allow_it() {
        let d = granted_daemon(&Arc::default());
        let open_with = |profile: String| {
            let d = d.clone();
            async move {
                let body = json!({"protocol": 4, "grantProfile": profile});
                rpc(&d, "alice", Procedure::OpenSession, body).await.expect_err("refused")
            }
        };
        for (profile, reason, message) in [
            ("x".repeat(129), Reason::Request, "invalid request: grant_profile exceeds 128 bytes".to_string()),
            ("nope".into(), Reason::Permission, "grant_profile \"nope\" is not available to this caller".into()),
            (
                "runs-only".into(),
                Reason::Permission,
                "grant_profile \"runs-only\" does not allow sessions; use it in a Run call, or set allow_in_sessions in the profile".into(),
            ),
            (
                "sessions".into(),
                Reason::Unsupported,
                "the fake provider's sessions cannot carry a grant from their open; name grant_profile in a Run call".into(),
            ),
        ] {
            let e = open_with(profile.clone()).await;
            assert_eq!((e.reason(), e.body.message.as_str()), (Some(reason), message.as_str()), "{profile}");
        }
    }

    async fn open(d: &Arc<Daemon>, caller: &str, extra: Value) -> String {
        let mut body = json!({"protocol": 4});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        let v = rpc(d, caller, Procedure::OpenSession, body).await.expect("opened");
        v["sessionId"].as_str().expect("an ID").to_string()
    }

    async fn cell(d: &Arc<Daemon>, caller: &str, id: &str, code: &str) -> Result<Value, RpcError> {
        let body = json!({"protocol": 4, "sessionId": id, "cell": {"language": "javascript", "code": code}});
        rpc(d, caller, Procedure::SessionRun, body).await
    }

    async fn close(d: &Arc<Daemon>, caller: &str, id: &str) -> Result<Value, RpcError> {
        rpc(d, caller, Procedure::CloseSession, json!({"protocol": 4, "sessionId": id})).await
    }

    fn record(run: &Value) -> RunRecord {
        serde_json::from_value(run["run"]["record"].clone()).expect("a record")
    }

    #[tokio::test]
    async fn calls_are_chained_and_close_returns_the_count_and_last_digest() {
        let seen = Arc::default();
        let d = daemon_with(&seen, settings());
        let id = open(&d, "alice", json!({})).await;
        let first = record(&cell(&d, "alice", &id, "1").await.expect("call 1"));
        let second = record(&cell(&d, "alice", &id, "2").await.expect("call 2"));
        assert_eq!(first.session, record::session_fingerprint(&id));
        assert_eq!((first.sequence, first.previous_sha256.as_str()), (1, ""));
        assert_eq!((second.sequence, second.previous_sha256.as_str()), (2, first.record_sha256.as_str()));
        assert_eq!(record::record_digest(&second).expect("v4"), second.record_sha256);
        let closed = close(&d, "alice", &id).await.expect("closed");
        assert_eq!(closed["calls"], "2");
        assert_eq!(closed["lastRecordSha256"], second.record_sha256.as_str());
        assert_eq!(closed["ended"], "SESSION_END_CLOSED");
        assert_eq!(seen.closed.load(Ordering::SeqCst), 1, "the sandbox was deleted before close answered");
        // A call after close is refused, marked, naming the end; close again collects.
        let e = cell(&d, "alice", &id, "3").await.expect_err("ended");
        assert_eq!((e.code, e.reason()), (Code::FailedPrecondition, Some(Reason::Request)));
        assert_eq!(e.body.message, "the session has ended (closed); nothing ran");
        assert_eq!(e.body.session_end().map(|(n, _)| n), Some(SessionEnd::Closed.number()));
        assert_eq!(close(&d, "alice", &id).await.expect("again")["calls"], "2");
    }

    #[tokio::test]
    async fn another_callers_id_and_an_unknown_id_get_the_same_answer() {
        let d = daemon_with(&Arc::default(), settings());
        let id = open(&d, "alice", json!({})).await;
        for (caller, id) in [("bob", id.as_str()), ("alice", "00112233445566778899aabbccddeeff")] {
            let e = cell(&d, caller, id, "1").await.expect_err("not theirs");
            assert_eq!(
                (e.code, e.reason(), e.body.message.as_str()),
                (Code::NotFound, Some(Reason::Request), NOT_FOUND)
            );
            assert_eq!(e.body.session_end(), Some((SessionEnd::NotFound.number(), NOT_FOUND.into())));
            let e = close(&d, caller, id).await.expect_err("not theirs");
            assert_eq!(e.body.message, NOT_FOUND);
        }
        assert!(cell(&d, "alice", &id, "1").await.is_ok(), "bob's attempt changed nothing");
    }

    #[tokio::test]
    async fn one_call_runs_one_waits_and_a_third_is_refused_busy() {
        let seen: Arc<Seen> = Arc::default();
        let (release, hold) = mpsc::channel();
        let (started_tx, started) = mpsc::channel();
        *lock(&seen.hold) = Some(hold);
        *lock(&seen.started) = Some(started_tx);
        let d = daemon_with(&seen, settings());
        let id = open(&d, "alice", json!({})).await;
        let (d1, id1) = (Arc::clone(&d), id.clone());
        let running = tokio::spawn(async move { cell(&d1, "alice", &id1, "hold").await });
        tokio::task::spawn_blocking(move || started.recv()).await.expect("join").expect("the call started");
        let (d2, id2) = (Arc::clone(&d), id.clone());
        let waiting = tokio::spawn(async move { cell(&d2, "alice", &id2, "second").await });
        let sessions = Arc::clone(d.sessions().expect("on"));
        let entry = sessions.lookup(&who(&d, "alice"), &id).expect("entry");
        while entry.queue.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        // Checks run before the turn: a bad call is refused as bad, not as busy.
        let e = rpc(
            &d,
            "alice",
            Procedure::SessionRun,
            json!({"protocol":4,"sessionId":id,"cell":{"language":"cobol","code":"1"}}),
        )
        .await
        .expect_err("bad language");
        assert_eq!(e.reason(), Some(Reason::Request));
        let e = cell(&d, "alice", &id, "third").await.expect_err("busy");
        assert_eq!(
            (e.code, e.reason(), e.body.message.as_str()),
            (Code::ResourceExhausted, Some(Reason::Capacity), BUSY)
        );
        release.send(()).expect("release");
        let first = record(&running.await.expect("join").expect("answered"));
        let second = record(&waiting.await.expect("join").expect("answered"));
        assert_eq!((first.sequence, second.sequence), (1, 2), "in arrival order");
        assert_eq!(close(&d, "alice", &id).await.expect("closed")["calls"], "2", "the busy refusal took no number");
    }

    #[tokio::test]
    async fn the_daemon_and_caller_caps_refuse_and_delete_nothing() {
        let seen: Arc<Seen> = Arc::default();
        let d = daemon_with(&seen, SessionSettings { max: 2, per_caller: 1, ..SessionSettings::default() });
        let a = open(&d, "alice", json!({})).await;
        let e = rpc(&d, "alice", Procedure::OpenSession, json!({"protocol":4})).await.expect_err("caller cap");
        assert_eq!((e.code, e.reason()), (Code::ResourceExhausted, Some(Reason::Capacity)));
        assert_eq!(
            e.body.message,
            "this caller holds 1 sessions, its cap (SANDBOX_MAX_SESSIONS_PER_CALLER); close one first; nothing was opened or closed"
        );
        let _b = open(&d, "bob", json!({})).await;
        let e = rpc(&d, "bob", Procedure::OpenSession, json!({"protocol":4})).await.expect_err("caps");
        assert_eq!(e.reason(), Some(Reason::Capacity));
        let d3 = daemon_with(&seen, SessionSettings { max: 1, ..SessionSettings::default() });
        let _ = open(&d3, "alice", json!({})).await;
        let e = rpc(&d3, "bob", Procedure::OpenSession, json!({"protocol":4})).await.expect_err("daemon cap");
        assert_eq!(
            e.body.message,
            "this daemon holds its maximum of 1 sessions (SANDBOX_MAX_SESSIONS); close one or retry later; nothing was opened or closed"
        );
        assert_eq!(seen.closed.load(Ordering::SeqCst), 0, "no session was deleted");
        assert!(cell(&d, "alice", &a, "1").await.is_ok());
    }

    #[tokio::test]
    async fn at_the_owner_cap_an_open_replaces_the_least_recently_used_idle_session() {
        let seen: Arc<Seen> = Arc::default();
        let d = daemon_with(&seen, SessionSettings { max: 8, per_owner: 2, ..SessionSettings::default() });
        let owner = json!({"owner": "a".repeat(64)});
        let old = open(&d, "alice", owner.clone()).await;
        let newer = open(&d, "alice", owner.clone()).await;
        cell(&d, "alice", &newer, "1").await.expect("used");
        cell(&d, "alice", &old, "1").await.expect("used last");
        let other = open(&d, "alice", json!({"owner": "b"})).await;
        let third = open(&d, "alice", owner.clone()).await;
        let e = cell(&d, "alice", &newer, "2").await.expect_err("replaced");
        assert_eq!(e.body.session_end().map(|(n, _)| n), Some(SessionEnd::Replaced.number()));
        assert_eq!(
            e.body.message,
            "the session has ended (replaced): a newer session of the same owner replaced it at the per-owner cap; nothing ran"
        );
        assert_eq!(close(&d, "alice", &newer).await.expect("collect")["ended"], "SESSION_END_REPLACED");
        for id in [&old, &third, &other] {
            assert!(cell(&d, "alice", id, "1").await.is_ok());
        }
        assert_eq!(seen.closed.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn an_unanswered_call_takes_its_place_in_the_chain_and_the_session_goes_on() {
        let d = daemon_with(&Arc::default(), settings());
        let id = open(&d, "alice", json!({})).await;
        let e = cell(&d, "alice", &id, "lost").await.expect_err("unanswered");
        assert_eq!((e.code, e.reason()), (Code::Internal, None), "unmarked: it may have run");
        let r = e.body.unanswered_record().expect("a record");
        assert_eq!((r.sequence, r.unanswered.as_str(), r.result_sha256.as_str()), (1, "internal", ""));
        assert_eq!((r.provider.as_str(), r.isolation.as_str()), ("fake", "container"));
        assert_eq!(record::record_digest(&r).expect("v4"), r.record_sha256);
        let next = record(&cell(&d, "alice", &id, "2").await.expect("goes on"));
        assert_eq!((next.sequence, next.previous_sha256), (2, r.record_sha256));
        assert_eq!(close(&d, "alice", &id).await.expect("closed")["calls"], "2");
    }

    #[tokio::test]
    async fn a_call_that_ends_the_session_says_so_and_close_collects_it() {
        let seen: Arc<Seen> = Arc::default();
        let d = daemon_with(&seen, settings());
        let id = open(&d, "alice", json!({})).await;
        let v = cell(&d, "alice", &id, "disk").await.expect("answered");
        assert_eq!(v["ended"], "SESSION_END_DISK_EXCEEDED");
        assert_eq!(v["endDetail"], "the session's files hold 2 MiB, over 1 MiB");
        assert_eq!(seen.closed.load(Ordering::SeqCst), 1);
        let closed = close(&d, "alice", &id).await.expect("collected");
        assert_eq!(
            (closed["calls"].as_str(), closed["ended"].as_str()),
            (Some("1"), Some("SESSION_END_DISK_EXCEEDED"))
        );

        let id = open(&d, "alice", json!({})).await;
        cell(&d, "alice", &id, "1").await.expect("call 1");
        let e = cell(&d, "alice", &id, "changed").await.expect_err("changed");
        assert_eq!((e.code, e.reason()), (Code::FailedPrecondition, Some(Reason::Environment)));
        assert_eq!(e.body.session_end().map(|(n, _)| n), Some(SessionEnd::SandboxChanged.number()));
        let closed = close(&d, "alice", &id).await.expect("collected");
        assert_eq!(
            (closed["calls"].as_str(), closed["ended"].as_str()),
            (Some("1"), Some("SESSION_END_SANDBOX_CHANGED"))
        );
    }

    #[tokio::test]
    async fn the_lifetime_ends_a_session_and_idle_sessions_are_suspended() {
        let seen: Arc<Seen> = Arc::default();
        let d = daemon_with(&seen, settings());
        let id = open(&d, "alice", json!({"lifetimeMs": 1})).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let e = cell(&d, "alice", &id, "1").await.expect_err("expired");
        assert_eq!(e.body.session_end().map(|(n, _)| n), Some(SessionEnd::Expired.number()));
        assert_eq!(close(&d, "alice", &id).await.expect("collected")["ended"], "SESSION_END_EXPIRED");

        let id = open(&d, "alice", json!({"idleTimeoutMs": 1})).await;
        let sessions = Arc::clone(d.sessions().expect("on"));
        let entry = sessions.lookup(&who(&d, "alice"), &id).expect("entry");
        assert_eq!(entry.idle, Duration::from_secs(1), "raised to the 1 s minimum");
        *lock(&entry.last_used) = Instant::now() - Duration::from_secs(2);
        sessions.reap().await;
        assert!(seen.suspended.load(Ordering::SeqCst));
        assert!(cell(&d, "alice", &id, "1").await.is_ok(), "a suspended session resumes on its next call");
    }

    #[tokio::test]
    async fn an_idle_session_whose_sandbox_keeps_running_is_asked_once_and_goes_on() {
        let seen: Arc<Seen> = Arc::default();
        seen.keeps_running.store(true, Ordering::SeqCst);
        let d = daemon_with(&seen, settings());
        let id = open(&d, "alice", json!({"idleTimeoutMs": 1})).await;
        let sessions = Arc::clone(d.sessions().expect("on"));
        let entry = sessions.lookup(&who(&d, "alice"), &id).expect("entry");
        *lock(&entry.last_used) = Instant::now() - Duration::from_secs(2);
        sessions.reap().await;
        sessions.reap().await;
        assert_eq!(seen.suspends.load(Ordering::SeqCst), 1, "marked after the first ask, not asked every pass");
        assert!(cell(&d, "alice", &id, "1").await.is_ok(), "the idle session goes on");
    }

    #[tokio::test]
    async fn calls_are_checked_against_what_the_open_stated() {
        let d = daemon_with(&Arc::default(), settings());
        let e = rpc(&d, "alice", Procedure::OpenSession, json!({"protocol":4,"minimumIsolation":"vm"}))
            .await
            .expect_err("floor");
        assert_eq!(e.reason(), Some(Reason::Isolation));
        for (body, message) in [
            (json!({"protocol":4,"owner":"a b"}), "invalid request: owner holds ' '; use letters, digits and . _ : -"),
            (json!({"protocol":4,"lifetimeMs":-5}), "invalid request: lifetimeMs -5 is negative"),
        ] {
            let e = rpc(&d, "alice", Procedure::OpenSession, body).await.expect_err("bad open");
            assert_eq!((e.reason(), e.body.message.as_str()), (Some(Reason::Request), message));
        }
        let e = rpc(&d, "alice", Procedure::OpenSession, json!({"protocol":4,"languages":["cobol"]}))
            .await
            .expect_err("lang");
        assert_eq!(e.reason(), Some(Reason::Request));

        let id = open(&d, "alice", json!({"minimumIsolation": "container", "softwareRule": {"mode": "approved", "identities": ["fake-manifest:1"]}})).await;
        let e = cell(&d, "alice", &id, "1").await.expect_err("rule omitted");
        assert_eq!((e.reason(), e.body.message.as_str()), (Some(Reason::Request), dispatch::RULE_OMITTED));
        let body = json!({"protocol":4,"sessionId":id,"minimumIsolation":"kernel","softwareRule":{"mode":"approved","identities":["fake-manifest:1"]},"cell":{"language":"javascript","code":"1"}});
        let e = rpc(&d, "alice", Procedure::SessionRun, body).await.expect_err("floor");
        assert_eq!(e.reason(), Some(Reason::Isolation));
        let body = json!({"protocol":4,"sessionId":id,"softwareRule":{"mode":"approved","identities":["fake-manifest:1"]},"cell":{"language":"javascript","code":"1"}});
        let ok = record(&rpc(&d, "alice", Procedure::SessionRun, body).await.expect("a call with the rule"));
        assert_eq!(ok.sequence, 1, "refused calls took no number");
    }

    #[tokio::test]
    async fn shutdown_ends_every_session_and_refuses_new_ones() {
        let seen: Arc<Seen> = Arc::default();
        let d = daemon_with(&seen, settings());
        let id = open(&d, "alice", json!({})).await;
        let _ = open(&d, "bob", json!({})).await;
        d.sessions().expect("on").shutdown().await;
        assert_eq!(seen.closed.load(Ordering::SeqCst), 2);
        assert_eq!(close(&d, "alice", &id).await.expect("collected")["ended"], "SESSION_END_SHUTDOWN");
        let e = rpc(&d, "alice", Procedure::OpenSession, json!({"protocol":4})).await.expect_err("shutting down");
        assert_eq!((e.code, e.reason()), (Code::Unavailable, Some(Reason::Capacity)));
    }

    #[tokio::test]
    async fn describe_states_sessions_and_a_daemon_without_them_refuses_unsupported() {
        let seen: Arc<Seen> = Arc::default();
        let d = daemon_with(&seen, SessionSettings { max: 4, per_caller: 2, ..SessionSettings::default() });
        let v = rpc(&d, "alice", Procedure::Describe, json!({})).await.expect("describe");
        assert_eq!(v["supportsSessions"], true);
        assert_eq!(
            (v["sessionLifetimeMs"].as_u64(), v["sessionIdleTimeoutMs"].as_u64()),
            (Some(1_800_000), Some(300_000))
        );
        assert_eq!(v["sessionEnvironment"]["languages"], json!(["javascript", "python"]));
        assert_eq!(v["maxSessionsPerCaller"], 2);
        let off = daemon_with(&seen, SessionSettings::default());
        let v = rpc(&off, "alice", Procedure::Describe, json!({})).await.expect("describe");
        assert!(v.get("supportsSessions").is_none());
        let e = rpc(&off, "alice", Procedure::OpenSession, json!({"protocol":4})).await.expect_err("off");
        assert_eq!(
            (e.code, e.reason(), e.body.message.as_str()),
            (Code::Unimplemented, Some(Reason::Unsupported), crate::service::NO_SESSIONS)
        );
    }
}
