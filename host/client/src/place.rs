//! Placement: one caller, several daemons, each with its own credential.
//!
//! A [`Placer`] holds the daemons in the caller's order of preference and what each
//! one's `Describe` last stated. A run goes to the first daemon whose description
//! fits it ([`fit`]: the payload kind, grant support, the tier against the floor,
//! the environment's identity) and, when that daemon refuses it without running
//! anything for a reason another daemon may not share (unsupported, isolation,
//! capacity, environment: [`retry_elsewhere`]), to the next. Anything that may have
//! run ends placement there: the same request is never sent twice where it could run
//! twice. A daemon that cannot be reached before a byte is sent counts as an
//! environment refusal.
//!
//! Placement is advice for one client, not a wall: every daemon still checks
//! everything, and every answer is checked by the [`Client`] that received it.
//! A session is placed once, on a daemon that states sessions; its calls then go to
//! that daemon only.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use plimsoll_core::wire::{DescribeResponse, Kind, PayloadEnvironment, RunRequest, RunResponse};
use plimsoll_core::{Floor, Reason, Tier};

use crate::{Client, Error, Session, SessionOptions};

/// How long a description is believed before it is asked for again.
pub const DESCRIPTION_TTL: Duration = Duration::from_secs(60);

/// The most daemons one call is sent to: in a large set that is saturated, a call
/// that walked every daemon would add a refused round trip to each of them.
/// Daemons passed over by their description do not count.
pub const MAX_TRIES: usize = 8;

/// One daemon of a placement set: a name for reports and its own client.
#[derive(Clone, Debug)]
pub struct Backend {
    /// Unique within the set; reports and errors name the daemon by it.
    pub name: String,
    /// The daemon's client, with its URL and credential.
    pub client: Client,
}

/// What a run needs beyond its request.
#[derive(Clone, Debug, Default)]
pub struct Need {
    /// A floor of the caller's own; the stronger of it and the request's applies.
    pub floor: Option<Floor>,
    /// The identity the daemon must state for the payload's environment
    /// (`quickjs-wasm:sha256:…`, an image ID). A daemon that states none never
    /// matches it.
    pub environment: Option<String>,
    /// Only daemons of this provider (`wasm`, `docker`, …).
    pub provider: Option<String>,
}

/// Why one daemon did not run a request: filtered out by its description, or
/// refused by it with the not-dispatched mark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Passed {
    /// The daemon's name.
    pub backend: String,
    /// The reason, as a refusal would carry it.
    pub reason: Reason,
    /// What did not fit, or the daemon's words.
    pub message: String,
}

/// A placed call: the daemon that answered, what it answered, and every daemon
/// passed over before it, in order.
#[derive(Debug)]
pub struct Placed<T> {
    /// The daemon that answered.
    pub backend: String,
    /// Its checked answer.
    pub value: T,
    /// The daemons passed over, filtered or refused, in the order they were met.
    pub passed: Vec<Passed>,
}

/// A call that was not placed: the error, which daemon gave it (none when no daemon
/// fitted), and the daemons passed over before it.
#[derive(Debug, thiserror::Error)]
#[error("{}{error}{}", backend.as_ref().map(|b| format!("{b}: ")).unwrap_or_default(), passed_suffix(passed))]
pub struct Unplaced {
    /// The daemon whose answer ended placement; `None` when none was asked.
    pub backend: Option<String>,
    /// The error. [`Error::may_have_run`] says whether the code may have run there.
    pub error: Error,
    /// The daemons passed over before it.
    pub passed: Vec<Passed>,
}

fn passed_suffix(passed: &[Passed]) -> String {
    if passed.is_empty() {
        return String::new();
    }
    let each: Vec<String> = passed.iter().map(|p| format!("{} ({}: {})", p.backend, p.reason, p.message)).collect();
    format!(" [passed over: {}]", each.join("; "))
}

/// Whether a failed call may be sent to the next daemon: only when nothing ran and
/// the reason is one another daemon may not share. A malformed request, a missing
/// permission or a protocol mismatch would fail the same way everywhere.
pub fn retry_elsewhere(error: &Error) -> bool {
    matches!(
        error.not_dispatched(),
        Some(Reason::Unsupported | Reason::Isolation | Reason::Capacity | Reason::Environment)
    )
}

/// Whether a daemon described as `desc` can take a payload of `kind` (with a grant
/// when `grant`) under `floor` and `need`; `Err` says why not, with the reason its
/// own refusal would carry.
///
/// # Errors
///
/// A [`Passed`] without the backend's name (the caller fills it in).
pub fn fit(desc: &DescribeResponse, kind: Kind, grant: bool, floor: Option<Floor>, need: &Need) -> Result<(), Passed> {
    let refuse = |reason, message: String| Err(Passed { backend: String::new(), reason, message });
    if let Some(provider) = &need.provider
        && desc.sandbox != *provider
    {
        return refuse(Reason::Unsupported, format!("its provider is {}, not {provider}", desc.sandbox));
    }
    let (supported, grants, environment) = match kind {
        Kind::JavaScript => (true, desc.supports_javascript_grants, &desc.javascript_environment),
        Kind::Project => (desc.supports_project, desc.supports_project_grants, &desc.project_environment),
        Kind::Module => (desc.supports_module, false, &desc.module_environment),
        Kind::Cell => (desc.supports_sessions, false, &desc.session_environment),
    };
    if !supported {
        let what = if kind == Kind::Cell { "sessions".to_string() } else { format!("{} runs", kind.as_str()) };
        return refuse(Reason::Unsupported, format!("it states no support for {what}"));
    }
    if grant && !grants {
        return refuse(Reason::Unsupported, format!("it states no grants for {} runs", kind.as_str()));
    }
    let tier = Tier::from_wire(&desc.isolation);
    if let Some(floor) = floor
        && !tier.meets(floor)
    {
        return refuse(Reason::Isolation, format!("it states tier {tier}, below the floor {floor}"));
    }
    if let Some(want) = &need.environment {
        let stated = environment.as_ref().map(|e: &PayloadEnvironment| e.identity.as_str()).unwrap_or_default();
        if stated.is_empty() || stated != want {
            let stated = if stated.is_empty() { "none" } else { stated };
            return refuse(Reason::Environment, format!("its {} environment is {stated}, not {want}", kind.as_str()));
        }
    }
    Ok(())
}

/// How long a daemon may take to answer `Describe` before it is passed over: one
/// that accepts connections and never answers must not hold every call for the
/// client's whole timeout.
pub const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a daemon that did not describe itself is passed over without asking it
/// again: in a large set some daemon is always down, and each call would otherwise
/// pay for finding that out.
pub const DOWN_FOR: Duration = Duration::from_secs(5);

/// What the placer knows of one daemon.
#[derive(Clone, Debug)]
enum Described {
    /// Nothing yet.
    Unknown,
    /// Its description, and when it was taken.
    Answered(Instant, Box<DescribeResponse>),
    /// It did not describe itself at that time: why.
    Down(Instant, String),
}

/// Which daemon a call tries first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Order {
    /// The first in the caller's order, every time: a preference.
    #[default]
    Given,
    /// The next one along at each call, wrapping: spreads calls evenly over daemons
    /// that are alike; a refused call still moves on to the one after.
    RoundRobin,
}

/// Daemons in the caller's order of preference, and what each last described.
#[derive(Debug)]
pub struct Placer {
    backends: Vec<Backend>,
    described: Mutex<Vec<Described>>,
    ttl: Duration,
    order: Order,
    turn: AtomicUsize,
    max_tries: usize,
}

impl Placer {
    /// A placement set over `backends`, in order of preference, believing each
    /// description for `ttl`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty set or a name used twice.
    pub fn new(backends: Vec<Backend>, ttl: Duration) -> Result<Placer, Error> {
        if backends.is_empty() {
            return Err(Error::Config("a placement set needs at least one daemon".into()));
        }
        for (i, b) in backends.iter().enumerate() {
            if b.name.is_empty() {
                return Err(Error::Config(format!("daemon {} of the placement set has no name", i + 1)));
            }
            if backends[..i].iter().any(|a| a.name == b.name) {
                return Err(Error::Config(format!("two daemons of the placement set are named {:?}", b.name)));
            }
        }
        let described = Mutex::new(vec![Described::Unknown; backends.len()]);
        // Clients that start together should not all begin their rounds at the same daemon.
        let mut seed = [0u8; 8];
        let turn = getrandom::fill(&mut seed).map(|()| u64::from_le_bytes(seed) as usize).unwrap_or(0);
        let turn = AtomicUsize::new(turn);
        Ok(Placer { backends, described, ttl, order: Order::Given, turn, max_tries: MAX_TRIES })
    }

    /// The same set, trying daemons in `order`.
    pub fn with_order(self, order: Order) -> Placer {
        Placer { order, ..self }
    }

    /// The same set, sending one call to at most `tries` daemons (at least one;
    /// [`MAX_TRIES`] by default).
    pub fn with_max_tries(self, tries: usize) -> Placer {
        Placer { max_tries: tries.max(1), ..self }
    }

    /// The daemons' indices in the order this call tries them.
    fn turns(&self) -> impl Iterator<Item = usize> + use<> {
        let n = self.backends.len();
        let start = match self.order {
            Order::Given => 0,
            Order::RoundRobin => self.turn.fetch_add(1, Ordering::Relaxed) % n,
        };
        (0..n).map(move |k| (start + k) % n)
    }

    /// The daemons, in order of preference.
    pub fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// Asks every daemon for its description now, all at once, each within
    /// [`DESCRIBE_TIMEOUT`]. A daemon that does not answer is passed over for
    /// [`DOWN_FOR`].
    pub async fn refresh(&self) -> Vec<Result<DescribeResponse, String>> {
        futures_util::future::join_all((0..self.backends.len()).map(|i| self.ask(i))).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Described>> {
        // A panic while holding the lock leaves descriptions that are still whole.
        self.described.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Daemon `i`'s description: the one held while fresh; `Err` while it is noted
    /// down; else asked for again.
    async fn describe(&self, i: usize) -> Result<DescribeResponse, String> {
        match &self.lock()[i] {
            Described::Answered(at, d) if at.elapsed() < self.ttl => return Ok((**d).clone()),
            Described::Down(at, why) if at.elapsed() < DOWN_FOR => return Err(why.clone()),
            _ => {}
        }
        self.ask(i).await
    }

    /// Asks daemon `i` for its description and notes the answer, or that there was none.
    async fn ask(&self, i: usize) -> Result<DescribeResponse, String> {
        let answer = match tokio::time::timeout(DESCRIBE_TIMEOUT, self.backends[i].client.describe()).await {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => Err(format!("it does not describe itself: {e}")),
            Err(_) => Err(format!("it did not describe itself within {} s", DESCRIBE_TIMEOUT.as_secs())),
        };
        self.lock()[i] = match &answer {
            Ok(d) => Described::Answered(Instant::now(), Box::new(d.clone())),
            Err(why) => Described::Down(Instant::now(), why.clone()),
        };
        answer
    }

    /// Runs `req` on the first daemon that fits it and does not refuse it, with the
    /// stronger of `need.floor` and the request's own floor stamped on the request.
    ///
    /// # Errors
    ///
    /// [`Unplaced`]: no daemon fitted (a not-dispatched error whose reason is the
    /// one every daemon shared, else `unsupported`), or the error that ended
    /// placement, naming the daemon that gave it.
    pub async fn run(&self, mut req: RunRequest, need: &Need) -> Result<Placed<RunResponse>, Unplaced> {
        let unplaced = |error: Error| Unplaced { backend: None, error, passed: Vec::new() };
        let own = Floor::parse_optional(&req.minimum_isolation).map_err(|e| {
            unplaced(Error::NotDispatched { reason: Reason::Request, code: None, message: e.to_string() })
        })?;
        let floor = Floor::stronger(own, need.floor);
        req.minimum_isolation = floor.map(|f| f.as_str().to_string()).unwrap_or_default();
        let payload = req.payload().map_err(|e| {
            unplaced(Error::NotDispatched { reason: Reason::Request, code: None, message: e.to_string() })
        })?;
        let kind = payload.kind();
        let grant = match (&req.javascript, &req.project) {
            (Some(js), _) => !js.grant_profile.is_empty(),
            (_, Some(p)) => !p.grant_profile.is_empty(),
            _ => false,
        };
        let wanted = Wanted { kind, grant, floor, need };
        self.place(&wanted, |client| client.run(req.clone())).await
    }

    /// Opens a session on the first daemon that states sessions (and, when `need`
    /// names one, the session environment's identity) and does not refuse the open.
    /// The session is bound to that daemon for its life.
    ///
    /// # Errors
    ///
    /// [`Unplaced`], as for [`Placer::run`].
    pub async fn open_session(&self, opts: &SessionOptions, need: &Need) -> Result<Placed<Session>, Unplaced> {
        let floor = Floor::stronger(opts.floor, need.floor);
        let opts = SessionOptions { floor, ..opts.clone() };
        let wanted = Wanted { kind: Kind::Cell, grant: false, floor, need };
        self.place(&wanted, |client| client.open_session(&opts)).await
    }

    /// Sends a call with `send` to the first daemon, in this call's turn, whose
    /// description fits `wanted`, moving on after a refusal another daemon may not
    /// share, to at most `max_tries` daemons.
    async fn place<'a, T, F, Fut>(&'a self, wanted: &Wanted<'_>, send: F) -> Result<Placed<T>, Unplaced>
    where
        F: Fn(&'a Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>>,
    {
        let (mut passed, mut sent) = (Vec::new(), 0);
        for i in self.turns() {
            let backend = &self.backends[i];
            let fits = match self.describe(i).await {
                Ok(desc) => fit(&desc, wanted.kind, wanted.grant, wanted.floor, wanted.need),
                Err(message) => Err(Passed { backend: String::new(), reason: Reason::Environment, message }),
            };
            if let Err(why) = fits {
                passed.push(Passed { backend: backend.name.clone(), ..why });
                continue;
            }
            if sent == self.max_tries {
                return Err(nowhere(passed, Some(self.max_tries)));
            }
            sent += 1;
            match send(&backend.client).await {
                Ok(value) => return Ok(Placed { backend: backend.name.clone(), value, passed }),
                Err(error) if retry_elsewhere(&error) => passed.push(refused(&backend.name, &error)),
                Err(error) => return Err(Unplaced { backend: Some(backend.name.clone()), error, passed }),
            }
        }
        Err(nowhere(passed, None))
    }
}

/// What a call asks of a daemon's description.
struct Wanted<'a> {
    kind: Kind,
    grant: bool,
    floor: Option<Floor>,
    need: &'a Need,
}

fn refused(backend: &str, error: &Error) -> Passed {
    Passed {
        backend: backend.to_string(),
        reason: error.not_dispatched().unwrap_or(Reason::Unsupported),
        message: error.to_string(),
    }
}

/// No daemon took the call (or `budget` sends were refused first): refused with
/// the reason they all shared, else `unsupported`, listing each.
fn nowhere(passed: Vec<Passed>, budget: Option<usize>) -> Unplaced {
    let reason = match passed.first() {
        Some(first) if passed.iter().all(|p| p.reason == first.reason) => first.reason,
        _ => Reason::Unsupported,
    };
    let tried = match budget {
        Some(n) => format!(" before the budget of {n} daemon{} to send to ran out", if n == 1 { "" } else { "s" }),
        None => String::new(),
    };
    let error = Error::NotDispatched {
        reason,
        code: None,
        message: format!("no daemon of the placement set took it ({} passed over{tried}); nothing ran", passed.len()),
    };
    Unplaced { backend: None, error, passed }
}

#[cfg(test)]
mod tests {
    use plimsoll_core::wire::connect::Code;

    use super::*;

    fn wasm() -> DescribeResponse {
        DescribeResponse {
            sandbox: "wasm".into(),
            isolation: "process".into(),
            supports_project: true,
            supports_javascript_grants: true,
            supports_sessions: true,
            javascript_environment: Some(PayloadEnvironment {
                identity: "quickjs-wasm:sha256:ab".into(),
                ..PayloadEnvironment::default()
            }),
            ..DescribeResponse::default()
        }
    }

    fn why(r: Result<(), Passed>) -> (Reason, String) {
        let p = r.expect_err("a misfit");
        (p.reason, p.message)
    }

    #[test]
    fn a_description_fits_or_says_which_refusal_it_would_meet() {
        let d = wasm();
        let none = Need::default();
        assert!(fit(&d, Kind::JavaScript, true, Some(Floor::Process), &none).is_ok());
        assert_eq!(
            why(fit(&d, Kind::JavaScript, false, Some(Floor::Kernel), &none)),
            (Reason::Isolation, "it states tier process, below the floor kernel".into())
        );
        assert_eq!(
            why(fit(&d, Kind::Module, false, None, &none)),
            (Reason::Unsupported, "it states no support for module runs".into())
        );
        assert_eq!(
            why(fit(&d, Kind::Project, true, None, &none)),
            (Reason::Unsupported, "it states no grants for project runs".into())
        );
        let docker = Need { provider: Some("docker".into()), ..Need::default() };
        assert_eq!(
            why(fit(&d, Kind::JavaScript, false, None, &docker)),
            (Reason::Unsupported, "its provider is wasm, not docker".into())
        );
        let pinned = Need { environment: Some("quickjs-wasm:sha256:ab".into()), ..Need::default() };
        assert!(fit(&d, Kind::JavaScript, false, None, &pinned).is_ok());
        // A kind whose environment states no identity never matches a pinned one.
        assert_eq!(
            why(fit(&d, Kind::Project, false, None, &pinned)),
            (Reason::Environment, "its project environment is none, not quickjs-wasm:sha256:ab".into())
        );
        let other = Need { environment: Some("sha256:cd".into()), ..Need::default() };
        assert_eq!(
            why(fit(&d, Kind::JavaScript, false, None, &other)),
            (Reason::Environment, "its javascript environment is quickjs-wasm:sha256:ab, not sha256:cd".into())
        );
        let no_sessions = DescribeResponse { supports_sessions: false, ..wasm() };
        assert_eq!(
            why(fit(&no_sessions, Kind::Cell, false, None, &none)),
            (Reason::Unsupported, "it states no support for sessions".into())
        );
        // A daemon stating no tier (or `none`) meets no floor.
        let unknown = DescribeResponse { isolation: String::new(), ..wasm() };
        assert_eq!(why(fit(&unknown, Kind::JavaScript, false, Some(Floor::Process), &none)).0, Reason::Isolation);
    }

    #[test]
    fn only_a_refusal_another_daemon_may_not_share_goes_elsewhere() {
        let refusal =
            |reason| Error::NotDispatched { reason, code: Some(Code::FailedPrecondition), message: String::new() };
        for reason in [Reason::Unsupported, Reason::Isolation, Reason::Capacity, Reason::Environment] {
            assert!(retry_elsewhere(&refusal(reason)), "{reason}");
        }
        for reason in [Reason::Request, Reason::Permission, Reason::Protocol] {
            assert!(!retry_elsewhere(&refusal(reason)), "{reason}");
        }
        // Unreachable before a byte left: nothing ran, so the next daemon is tried.
        assert!(retry_elsewhere(&Error::Transport { sent: false, message: "connection refused".into() }));
        // Anything that may have run stays where it is.
        for e in [
            Error::Transport { sent: true, message: "reset".into() },
            Error::Failed { code: Code::Internal, message: "boom".into() },
            Error::AnswerNotBound { status: 200 },
            Error::DataLoss { kind: crate::Mismatch::Record, message: String::new(), response: None },
        ] {
            assert!(e.may_have_run() && !retry_elsewhere(&e), "{e}");
        }
    }

    #[test]
    fn a_set_needs_daemons_with_distinct_names() {
        let client = || Client::new("http://127.0.0.1:1", None).expect("client");
        let b = |name: &str| Backend { name: name.into(), client: client() };
        let msg = |r: Result<Placer, Error>| r.expect_err("refused").to_string();
        assert_eq!(
            msg(Placer::new(vec![], DESCRIPTION_TTL)),
            "client configuration: a placement set needs at least one daemon"
        );
        assert_eq!(
            msg(Placer::new(vec![b("a"), b("a")], DESCRIPTION_TTL)),
            "client configuration: two daemons of the placement set are named \"a\""
        );
        assert_eq!(
            msg(Placer::new(vec![b("a"), b("")], DESCRIPTION_TTL)),
            "client configuration: daemon 2 of the placement set has no name"
        );
        assert!(Placer::new(vec![b("a"), b("b")], DESCRIPTION_TTL).is_ok());
    }

    #[test]
    fn round_robin_starts_one_further_along_at_each_call() {
        let b = |name: &str| Backend {
            name: name.into(),
            client: Client::new("http://127.0.0.1:1", None).expect("client"),
        };
        let placer = Placer::new(vec![b("a"), b("b"), b("c")], DESCRIPTION_TTL).expect("placer");
        assert_eq!(placer.turns().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(placer.turns().collect::<Vec<_>>(), [0, 1, 2]);
        let placer = placer.with_order(Order::RoundRobin);
        // The first call starts anywhere (each placer draws its start); each next
        // call one further along, and every call still tries them all.
        let calls: Vec<Vec<usize>> = (0..4).map(|_| placer.turns().collect()).collect();
        let first = calls[0][0];
        for (k, call) in calls.iter().enumerate() {
            let start = (first + k) % 3;
            assert_eq!(*call, [start, (start + 1) % 3, (start + 2) % 3], "{calls:?}");
        }
    }

    #[test]
    fn a_daemon_that_never_answers_is_passed_over_in_time_and_then_left_alone() {
        // Accepts connections and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let count = std::sync::Arc::clone(&accepted);
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for conn in listener.incoming() {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(conn);
            }
        });
        let silent = Backend { name: "silent".into(), client: Client::new(&url, None).expect("client") };
        let placer = Placer::new(vec![silent], DESCRIPTION_TTL).expect("placer");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let req = RunRequest {
            javascript: Some(plimsoll_core::wire::JavaScriptRun { code: "1".into(), grant_profile: String::new() }),
            ..RunRequest::default()
        };
        for _ in 0..3 {
            let u = rt.block_on(placer.run(req.clone(), &Need::default())).expect_err("nothing answers");
            assert_eq!(u.error.not_dispatched(), Some(Reason::Environment));
            assert_eq!(u.passed[0].message, "it did not describe itself within 2 s");
        }
        // Asked once; noted down for the calls after.
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn with_nothing_taken_the_shared_reason_is_kept() {
        let p = |backend: &str, reason| Passed { backend: backend.into(), reason, message: "m".into() };
        let u = nowhere(vec![p("a", Reason::Isolation), p("b", Reason::Isolation)], None);
        assert_eq!(u.error.not_dispatched(), Some(Reason::Isolation));
        assert_eq!(
            u.to_string(),
            "not dispatched (isolation): no daemon of the placement set took it (2 passed over); nothing ran \
             [passed over: a (isolation: m); b (isolation: m)]"
        );
        let u = nowhere(vec![p("a", Reason::Isolation), p("b", Reason::Capacity)], None);
        assert_eq!(u.error.not_dispatched(), Some(Reason::Unsupported));
        let u = nowhere(vec![p("a", Reason::Capacity)], Some(1));
        assert_eq!(
            u.error.to_string(),
            "not dispatched (capacity): no daemon of the placement set took it (1 passed over before the budget \
             of 1 daemon to send to ran out); nothing ran"
        );
    }
}
