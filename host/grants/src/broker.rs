//! The broker: the only way a run's code reaches an API. Per call it takes a slot
//! (calls in flight), charges the budget (refused calls count too), matches the
//! exact route, gates on the upstream's circuit, checks the body size, attaches
//! the run's credential itself and sends. Only the status, a sanitised content type
//! and the body come back; the trace keeps metadata only.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::Full;
use plimsoll_core::provider::{HostAnswer, HostApi};
use plimsoll_core::{Reason, Refusal};

use crate::breaker::{Gate, retry_after};
use crate::profile::Profile;
use crate::route::{self, Method, Route};
use crate::token::{Credential, MintScope};
use crate::trace::{CallRow, CallTrace, MAX_ROWS};
use crate::upstream::{Sent, Upstream, UpstreamError};

/// The longest one upstream call may take (less when the run has less left).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a health probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest guest-chosen text echoed back in a refusal.
const ECHO_BYTES: usize = 200;

/// The shared broker: one upstream client for every run.
#[derive(Debug)]
pub struct Broker {
    upstream: Upstream,
}

impl Broker {
    /// A broker with its own client.
    ///
    /// # Errors
    ///
    /// The client could not be set up.
    pub fn new() -> Result<Arc<Broker>, String> {
        Ok(Arc::new(Broker { upstream: Upstream::new()? }))
    }

    /// Opens one run's grant over `profile` for `subject`, minting its credential.
    ///
    /// # Errors
    ///
    /// A `permission` refusal when no credential could be minted: nothing ran.
    pub fn open(
        self: &Arc<Self>,
        profile: Arc<Profile>,
        subject: &str,
        budget: Duration,
    ) -> Result<Arc<RunGrant>, Refusal> {
        self.open_counting(profile, subject, budget, Spent::fresh("run"), None)
    }

    /// Opens one call's grant whose call budget is `spent`, shared with the other
    /// calls that count against it (a session's); with `held`, its credential is
    /// the session's, minted again only when it would expire within `budget`.
    ///
    /// # Errors
    ///
    /// As [`Broker::open`].
    pub fn open_counting(
        self: &Arc<Self>,
        profile: Arc<Profile>,
        subject: &str,
        budget: Duration,
        spent: Spent,
        held: Option<&HeldCredential>,
    ) -> Result<Arc<RunGrant>, Refusal> {
        let credential =
            match &profile.minter {
                None => None,
                Some(m) => {
                    let mint = |budget| m.mint(&MintScope { subject, budget, scopes: &profile.scopes });
                    let minted = match held {
                        None => mint(budget),
                        Some(h) => h.for_call(budget, mint),
                    };
                    Some(minted.map_err(|e| {
                        Refusal::new(Reason::Permission, format!("grant_profile {:?}: {e}", profile.name))
                    })?)
                }
            };
        Ok(Arc::new(RunGrant {
            broker: self.clone(),
            profile,
            credential,
            deadline: Instant::now() + budget,
            spent,
            state: Mutex::new(State::default()),
            in_flight: AtomicU32::new(0),
            closed: AtomicBool::new(false),
        }))
    }
}

/// A session's one credential, shared by its calls' grants (a profile with
/// `session_credential: "session"`).
#[derive(Debug)]
pub struct HeldCredential {
    /// What it is minted for: the session's remaining lifetime at open.
    lifetime: Duration,
    current: Mutex<Option<Credential>>,
}

impl HeldCredential {
    /// None minted yet; the first call mints one for `lifetime`.
    pub fn new(lifetime: Duration) -> HeldCredential {
        HeldCredential { lifetime, current: Mutex::new(None) }
    }

    /// The held credential when it outlasts a call of `budget`, else a new one
    /// minted for the longer of the lifetime and the budget (the minter's own
    /// TTL may cut it shorter).
    fn for_call(
        &self,
        budget: Duration,
        mint: impl FnOnce(Duration) -> Result<Credential, crate::token::MintError>,
    ) -> Result<Credential, crate::token::MintError> {
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let needed = SystemTime::now() + budget;
        if let Some(c) = current.as_ref().filter(|c| c.expires.is_none_or(|at| at >= needed)) {
            return Ok(c.clone());
        }
        let fresh = mint(self.lifetime.max(budget))?;
        *current = Some(fresh.clone());
        Ok(fresh)
    }
}

#[derive(Debug, Default)]
struct State {
    trace: CallTrace,
}

/// Calls charged to a budget (refused ones too), shared by every grant opened on
/// it: one run's, or a whole session's.
#[derive(Clone, Debug)]
pub struct Spent {
    attempts: Arc<AtomicU32>,
    /// What the budget belongs to, as refusals name it (`run`, `session`).
    scope: &'static str,
}

impl Spent {
    /// A budget nothing has spent yet.
    pub fn fresh(scope: &'static str) -> Spent {
        Spent { attempts: Arc::new(AtomicU32::new(0)), scope }
    }

    /// Calls charged so far.
    pub fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::Acquire)
    }
}

/// One run's grant: its credential, budgets and trace. It ends with the run's code.
pub struct RunGrant {
    broker: Arc<Broker>,
    profile: Arc<Profile>,
    credential: Option<Credential>,
    deadline: Instant,
    spent: Spent,
    state: Mutex<State>,
    in_flight: AtomicU32,
    closed: AtomicBool,
}

impl std::fmt::Debug for RunGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunGrant").field("profile", &self.profile.name).finish_non_exhaustive()
    }
}

/// A call that passed every check before the upstream.
struct Plan<'g> {
    route: Route,
    path: String,
    body: Option<Vec<u8>>,
    probe: bool,
    _slot: Slot<'g>,
}

/// A request ready to send: the URL, the plugin's extra headers, the body.
struct Outgoing {
    url: String,
    headers: Vec<(String, String)>,
    body: Option<Vec<u8>>,
}

/// Headers only the host sets; a broker plugin's shaping may not add them.
const HOST_HEADERS: [&str; 10] = [
    "authorization",
    "host",
    "cookie",
    "proxy-authorization",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "te",
    "accept",
];

struct Slot<'g>(&'g AtomicU32);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn json_error(status: u16, message: &str) -> HostAnswer {
    HostAnswer {
        status,
        content_type: "application/json".into(),
        body: serde_json::json!({ "error": message }).to_string().into_bytes(),
    }
}

fn echo(s: &str) -> String {
    let mut end = s.len().min(ECHO_BYTES);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let cut = &s[..end];
    cut.escape_debug().to_string()
}

/// A content type the guest may see: short visible ASCII, else octet-stream.
fn sanitise_content_type(v: Option<&str>) -> String {
    match v {
        Some(v) if !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| (0x20..0x7f).contains(&b)) => v.to_string(),
        _ => "application/octet-stream".into(),
    }
}

impl RunGrant {
    /// The profile.
    pub fn profile(&self) -> &Arc<Profile> {
        &self.profile
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn deny(&self, status: u16, message: &str) -> HostAnswer {
        self.state().trace.denied += 1;
        json_error(status, message)
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    fn admit(&self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Plan<'_>, HostAnswer> {
        if self.closed.load(Ordering::Acquire) {
            return Err(self.deny(403, "host api grant has ended with the run"));
        }
        let slot = Slot(&self.in_flight);
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.profile.max_in_flight {
            drop(slot);
            return Err(self.deny(
                429,
                &format!(
                    "host api broker is at capacity: {} calls of this run are in flight",
                    self.profile.max_in_flight
                ),
            ));
        }
        // Saturating: a session's refused calls keep counting and must never wrap to zero.
        let before =
            self.spent.attempts.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_add(1)));
        if before.unwrap_or(u32::MAX) >= self.profile.max_calls {
            self.state().trace.denied += 1;
            return Err(json_error(
                429,
                &format!(
                    "host api call budget for this {} is exhausted ({} calls)",
                    self.spent.scope, self.profile.max_calls
                ),
            ));
        }
        let matched: Route = match route::find(&self.profile.allow, method, path) {
            Ok(r) => r.clone(),
            Err(why) => {
                return Err(self.deny(
                    403,
                    &format!("forbidden by sandbox capability allowlist: {} {}: {why}", echo(method), echo(path)),
                ));
            }
        };
        let gate = self
            .profile
            .breaker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .gate(Instant::now(), self.profile.health_check.is_some());
        if gate == Gate::Shed {
            self.state().trace.shed += 1;
            return Err(json_error(503, "host api is shedding load: upstream reported degraded"));
        }
        let size = body.map_or(0, <[u8]>::len);
        if size > self.profile.max_request_bytes as usize {
            return Err(self.deny(
                413,
                &format!("host api request body too large: {size} bytes is over {}", self.profile.max_request_bytes),
            ));
        }
        if let Some((_, schema)) = self.profile.schemas.iter().find(|(r, _)| *r == matched)
            && let Err(why) = schema.check(body)
        {
            return Err(self.deny(
                400,
                &format!("host api request body does not match the API's schema for {matched}: {}", echo(&why)),
            ));
        }
        Ok(Plan {
            route: matched,
            path: path.to_string(),
            body: body.map(<[u8]>::to_vec),
            probe: gate == Gate::Probe,
            _slot: slot,
        })
    }

    /// The request as it goes upstream: shaped by the profile's broker plugin, if
    /// any, and checked again to still match the same route.
    fn outgoing(&self, plan: &Plan<'_>) -> Result<Outgoing, HostAnswer> {
        let Some(shaper) = &self.profile.shaper else {
            return Ok(Outgoing {
                url: format!("{}{}", self.profile.base_url, plan.path),
                headers: Vec::new(),
                body: plan.body.clone(),
            });
        };
        let shaped = shaper
            .shape(&plan.route, &plan.path, plan.body.as_deref())
            .map_err(|e| self.deny(403, &format!("forbidden by the API's broker plugin: {}", echo(&e))))?;
        let escaped =
            route::check_request_path(&shaped.path).is_err() || !plan.route.matches(plan.route.method(), &shaped.path);
        let host_header = shaped.headers.iter().any(|(k, _)| HOST_HEADERS.contains(&k.to_ascii_lowercase().as_str()));
        if escaped || host_header {
            return Err(self.deny(
                502,
                "host api unavailable: the broker plugin shaped the call outside its route or set a header only the host sets",
            ));
        }
        if shaped.body.as_ref().map_or(0, Vec::len) > self.profile.max_request_bytes as usize {
            return Err(self.deny(413, "host api request body too large after the broker plugin shaped it"));
        }
        Ok(Outgoing {
            url: format!("{}{}", self.profile.base_url, shaped.path),
            headers: shaped.headers,
            body: shaped.body,
        })
    }

    fn request(
        &self,
        method: Method,
        url: &str,
        headers: &[(String, String)],
        body: Option<Vec<u8>>,
    ) -> Option<http::Request<Full<Bytes>>> {
        let mut b =
            http::Request::builder().method(method.as_str()).uri(url).header(http::header::ACCEPT, "application/json");
        for (k, v) in headers {
            b = b.header(k.as_str(), v.as_str());
        }
        if body.is_some() {
            b = b.header(http::header::CONTENT_TYPE, "application/json");
        }
        if let Some(c) = &self.credential {
            b = b.header(http::header::AUTHORIZATION, c.authorization.expose());
        }
        b.body(Full::new(Bytes::from(body.unwrap_or_default()))).ok()
    }

    fn probe_request(&self) -> Option<http::Request<Full<Bytes>>> {
        let health = self.profile.health_check.as_ref()?;
        self.request(Method::Get, &format!("{}{}", self.profile.base_url, health.template()), &[], None)
    }

    /// After a probe: a 2xx closes the circuit; anything else sheds this call.
    fn probed(&self, answer: &Result<Sent, UpstreamError>) -> Result<(), HostAnswer> {
        if matches!(answer, Ok(s) if (200..300).contains(&s.status)) {
            self.profile.breaker.lock().unwrap_or_else(std::sync::PoisonError::into_inner).close();
            return Ok(());
        }
        self.state().trace.shed += 1;
        Err(json_error(503, "host api is shedding load: upstream reported degraded"))
    }

    fn finish(&self, plan: &Plan<'_>, started: Instant, sent: Result<Sent, UpstreamError>) -> HostAnswer {
        let latency_us = started.elapsed().as_micros().min(u128::from(u64::MAX)) as u64;
        let req_bytes = plan.body.as_ref().map_or(0, Vec::len) as u64;
        let (method, template) = (plan.route.method(), plan.route.template().to_string());
        let (row_status, delivered, resp_bytes, answer) = match sent {
            Ok(s) => {
                if s.status == 429 || s.status == 503 {
                    let wait = s.retry_after.as_deref().and_then(|v| retry_after(v, SystemTime::now()));
                    self.profile.breaker.lock().unwrap_or_else(std::sync::PoisonError::into_inner).trip(
                        s.status,
                        wait,
                        Instant::now(),
                    );
                }
                let len = s.body.len() as u64;
                let answer = HostAnswer {
                    status: s.status,
                    content_type: sanitise_content_type(s.content_type.as_deref()),
                    body: s.body,
                };
                (answer.status, true, len, answer)
            }
            Err(e) => {
                let len = if matches!(e, UpstreamError::TooLarge(_)) {
                    u64::from(self.profile.max_response_bytes)
                } else {
                    0
                };
                (0, false, len, json_error(502, &format!("host api unavailable: {e}")))
            }
        };
        let mut st = self.state();
        if st.trace.calls.len() < MAX_ROWS {
            let seq = st.trace.calls.len() as u32 + 1;
            st.trace.calls.push(CallRow {
                seq,
                method,
                route: template,
                status: row_status,
                delivered,
                req_bytes,
                resp_bytes,
                latency_us,
            });
        } else {
            st.trace.dropped += 1;
        }
        answer
    }

    fn timeout(&self) -> Result<Duration, HostAnswer> {
        let left = self.remaining();
        if left.is_zero() {
            return Err(json_error(502, "host api unavailable: the run's budget is spent"));
        }
        Ok(left.min(CALL_TIMEOUT))
    }

    /// One call, from a thread that may block (a wasm host call); never from async code.
    pub fn call_blocking(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer {
        self.broker.upstream.block_on(self.call(method, path, body))
    }

    /// One call, from async code (a container's socket).
    pub async fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer {
        let plan = match self.admit(method, path, body) {
            Ok(p) => p,
            Err(a) => return a,
        };
        let timeout = match self.timeout() {
            Ok(t) => t,
            Err(a) => return a,
        };
        let up = &self.broker.upstream;
        if plan.probe {
            let sent = match self.probe_request() {
                Some(req) => up.send(req, 64 << 10, PROBE_TIMEOUT.min(timeout)).await,
                None => Err(UpstreamError::Unreachable),
            };
            if let Err(a) = self.probed(&sent) {
                return a;
            }
        }
        let out = match self.outgoing(&plan) {
            Ok(o) => o,
            Err(a) => return a,
        };
        let started = Instant::now();
        let Some(req) = self.request(plan.route.method(), &out.url, &out.headers, out.body) else {
            return self.finish(&plan, started, Err(UpstreamError::Unreachable));
        };
        let sent = up.send(req, self.profile.max_response_bytes, timeout).await;
        self.finish(&plan, started, sent)
    }

    /// Ends the grant (later calls are refused) and returns the complete trace.
    pub fn close(&self) -> CallTrace {
        self.closed.store(true, Ordering::Release);
        self.state().trace.clone()
    }
}

impl HostApi for RunGrant {
    fn call(&self, method: &str, path: &str, body: Option<&[u8]>) -> HostAnswer {
        self.call_blocking(method, path, body)
    }
}

#[cfg(test)]
mod tests;
