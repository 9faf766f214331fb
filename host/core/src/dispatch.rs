//! The run pipeline's provider-facing half, shared by the daemon and the CLI:
//! [`prepare`] (validation, the floor against current evidence, the budget) runs
//! before admission; [`execute`] dispatches and stamps the response's record.
//!
//! Everything [`prepare`] refuses ran nothing. [`execute`] either answers with a
//! result and its record, or says whether the code may have run.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::provider::{
    Description, Evidence, Grant, GrantSupport, KindSupport, Provider, Ran, RunError, Snippet, check_floor,
};
use crate::record::{self, VERSION};
use crate::refusal::{Reason, Refusal};
use crate::session::{Call, CallError, Cell, Ending, Output, Session};
use crate::tier::{Floor, Tier};
use crate::validate::{self, Language};
use crate::wire::{Payload, PayloadError, RunRecord, RunRequest, RunResponse, SessionRunRequest, SoftwareRule};

/// A request that passed every check before admission.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The request as received.
    pub request: RunRequest,
    /// Its floor, parsed.
    pub floor: Option<Floor>,
    /// The budget the provider gets.
    pub timeout: Duration,
    /// The digest of what the caller sent.
    pub request_sha256: String,
}

impl Prepared {
    /// The grant profile the request names, or "".
    pub fn grant_profile(&self) -> &str {
        match self.payload() {
            Payload::JavaScript(js) => &js.grant_profile,
            Payload::Project(p) => &p.grant_profile,
            Payload::Module(_) | Payload::Cell(_) => "",
        }
    }

    /// The payload (checked to be exactly one in [`prepare`]).
    fn payload(&self) -> Payload<'_> {
        match self.request.payload() {
            Ok(p) => p,
            Err(_) => unreachable!("prepare accepted a request without exactly one payload"),
        }
    }
}

fn kind_support<'d>(
    desc: &'d Description,
    support: &'d Option<KindSupport>,
    what: &str,
) -> Result<&'d KindSupport, Refusal> {
    support.as_ref().ok_or_else(|| Refusal::unsupported(format!("the {} provider does not run {what}", desc.name)))
}

/// Checks that a request naming a grant profile goes to a provider that can carry
/// a grant for its kind; the caller's right to the profile is the daemon's to check.
///
/// # Errors
///
/// An `unsupported` refusal naming the provider and the kind.
pub fn check_grant_support(provider: &str, support: GrantSupport, prepared: &Prepared) -> Result<(), Refusal> {
    let (carried, kind) = match prepared.payload() {
        Payload::JavaScript(_) => (support.snippets, "snippets"),
        Payload::Project(_) => (support.projects, "projects"),
        Payload::Module(_) | Payload::Cell(_) => (true, ""),
    };
    if prepared.grant_profile().is_empty() || carried {
        return Ok(());
    }
    Err(Refusal::unsupported(format!(
        "the {provider} provider cannot carry a grant for {kind}; run it without grant_profile, or on a provider whose Describe says it supports {kind} grants"
    )))
}

/// Checks a `Run` request before admission: its payload, its limits, its software
/// rule, its floor against `tier` (the provider's current evidence), and the kind
/// against what the provider runs. The protocol number is checked earlier, before
/// the payload is read.
///
/// # Errors
///
/// A [`Refusal`]: nothing ran.
pub fn prepare(desc: &Description, tier: Tier, request: RunRequest) -> Result<Prepared, Refusal> {
    let payload = request.payload().map_err(|e| match e {
        PayloadError::Missing | PayloadError::Several => Refusal::request(format!("invalid request: {e}")),
    })?;
    let floor = validate::floor(&request.minimum_isolation)?;
    if let Some(rule) = &request.software_rule {
        validate::software_rule(rule)?;
    }
    let support = match payload {
        Payload::JavaScript(js) => {
            validate::javascript(js)?;
            kind_support(desc, &desc.snippet, "snippets")?
        }
        Payload::Project(p) => {
            validate::project(p)?;
            kind_support(desc, &desc.project, "projects")?
        }
        Payload::Module(m) => {
            validate::module(m)?;
            kind_support(desc, &desc.module, "module tables")?
        }
        Payload::Cell(c) => {
            validate::cell(c)?;
            return Err(Refusal::request("invalid request: a cell runs only in a session (SessionRun)"));
        }
    };
    check_floor(tier, floor)?;
    if let Some(rule) = request.software_rule.as_ref().filter(|r| !r.identities.is_empty())
        && !rule.identities.contains(&support.software_identity)
    {
        return Err(Refusal::new(
            Reason::Environment,
            "the software this provider would run is outside the request's software rule",
        ));
    }
    let timeout = support.resolve_timeout(request.timeout_ms).min(crate::limits::MAX_RUN_TIMEOUT);
    let request_sha256 = record::request_digest(&request);
    Ok(Prepared { request, floor, timeout, request_sha256 })
}

/// Why [`execute`] produced no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// Nothing ran.
    #[error("{0}")]
    Refused(Refusal),
    /// The code may have run; the detail is for the log only.
    #[error("the run failed after it may have started: {0}")]
    MayHaveRun(String),
}

impl From<RunError> for Failure {
    fn from(e: RunError) -> Failure {
        match e {
            RunError::Refused(r) => Failure::Refused(r),
            RunError::MayHaveRun(d) => Failure::MayHaveRun(d),
        }
    }
}

/// A wall-clock start read once, and the monotonic clock that measures from it, so
/// a record's end is never a second wall-clock read (it cannot run backwards).
#[derive(Clone, Copy, Debug)]
pub struct Started {
    /// Unix milliseconds at the start.
    pub unix_ms: i64,
    at: Instant,
}

impl Started {
    /// Reads the clocks now.
    pub fn now() -> Started {
        let unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        Started { unix_ms, at: Instant::now() }
    }

    /// Time since the start.
    pub fn elapsed(&self) -> Duration {
        self.at.elapsed()
    }

    /// The start plus the monotonic elapsed time, in Unix milliseconds.
    pub fn end_unix_ms(&self) -> i64 {
        self.unix_ms.saturating_add(self.elapsed().as_millis() as i64)
    }
}

/// Fills in the evidence fields of `resp` and stamps its record: version 4, both
/// digests, the evidence as stated, the times. `chain` carries a session call's
/// fingerprint, sequence and previous digest (all empty for a single run).
pub fn answer(
    mut resp: RunResponse,
    provider: &str,
    evidence: &Evidence,
    request_sha256: String,
    rule_id: String,
    started: &Started,
    chain: (String, u64, String),
) -> RunResponse {
    resp.sandbox = provider.to_string();
    resp.isolation = evidence.tier.as_str().to_string();
    resp.environment = evidence.environment.clone();
    resp.software_identity = evidence.software_identity.clone();
    resp.instance = evidence.instance.clone();
    resp.duration_ms = started.elapsed().as_millis() as i64;
    let (session, sequence, previous_sha256) = chain;
    let record = RunRecord {
        version: VERSION,
        request_sha256,
        result_sha256: record::result_digest(&resp),
        provider: resp.sandbox.clone(),
        isolation: resp.isolation.clone(),
        environment: resp.environment.clone(),
        policy: evidence.policy.clone(),
        software_identity: resp.software_identity.clone(),
        software_rule_id: rule_id,
        instance: resp.instance.clone(),
        started_unix_ms: started.unix_ms,
        ended_unix_ms: started.end_unix_ms().max(started.unix_ms),
        session,
        sequence,
        previous_sha256,
        ..RunRecord::default()
    };
    resp.record = Some(match record::seal(record) {
        Ok(r) => r,
        Err(_) => unreachable!("record version {VERSION} is always known"),
    });
    resp
}

/// Dispatches a prepared request to `provider` with the run's `grant` (the one the
/// request's profile opened) and answers it with its record.
///
/// # Errors
///
/// [`Failure::Refused`] when the provider refused (nothing ran), and
/// [`Failure::MayHaveRun`] when it failed after the code may have started.
pub fn execute(
    provider: &dyn Provider,
    prepared: Prepared,
    grant: Option<&Grant>,
    started: &Started,
) -> Result<RunResponse, Failure> {
    let name = provider.describe().name;
    // A named profile without its grant, or a grant nobody asked for, never runs.
    if prepared.grant_profile().is_empty() != grant.is_none() {
        return Err(Failure::Refused(Refusal::new(
            Reason::Permission,
            format!("grant_profile {:?} is not available to this caller", prepared.grant_profile()),
        )));
    }
    check_grant_support(&name, provider.grant_support(), &prepared).map_err(Failure::Refused)?;
    let mut resp = RunResponse::default();
    let evidence = match prepared.payload() {
        Payload::JavaScript(js) => {
            let Ran { result, evidence } = provider.run_snippet(&Snippet {
                language: Language::JavaScript,
                code: &js.code,
                timeout: prepared.timeout,
                floor: prepared.floor,
                grant,
            })?;
            resp.javascript = Some(result);
            evidence
        }
        Payload::Project(p) => {
            let Ran { result, evidence } = provider.run_project(p, prepared.timeout, prepared.floor, grant)?;
            resp.project = Some(result);
            evidence
        }
        Payload::Module(m) => {
            let Ran { mut result, evidence } = provider.run_module(m, prepared.timeout, prepared.floor)?;
            // JSON clients can only hash the quiet NaN with no sign or payload.
            for run in &mut result.runs {
                for v in &mut run.outputs {
                    if v.is_nan() {
                        *v = f64::from_bits(0x7ff8_0000_0000_0000);
                    }
                }
            }
            resp.module = Some(result);
            evidence
        }
        Payload::Cell(_) => {
            return Err(Failure::Refused(Refusal::request(
                "invalid request: a cell runs only in a session (SessionRun)",
            )));
        }
    };
    // The host states no more than it can justify: never above the provider's
    // current tier, and a result below the floor is a provider fault, not an answer.
    let mut evidence = evidence;
    evidence.tier = evidence.tier.min(provider.tier());
    if let Some(floor) = prepared.floor
        && !evidence.tier.meets(floor)
    {
        return Err(Failure::MayHaveRun(format!(
            "the {name} provider ran a request with floor {floor} at {} (its evidence fell during the run)",
            evidence.tier
        )));
    }
    let rule_id = record::rule_id(prepared.request.software_rule.as_ref().filter(|r| !r.mode.is_empty()));
    Ok(answer(resp, &name, &evidence, prepared.request_sha256, rule_id, started, (String::new(), 0, String::new())))
}

/// What a session stated at open, which every call is checked against.
#[derive(Clone, Debug)]
pub struct SessionFacts {
    /// The provider's name.
    pub provider: String,
    /// Where the session's calls run.
    pub support: KindSupport,
    /// Whether the provider runs projects in its sessions.
    pub projects: bool,
    /// The evidence measured at open.
    pub evidence: Evidence,
    /// The floor the open set, which every call meets too.
    pub floor: Option<Floor>,
    /// The software rule the open carried (with a mode), which every call must carry.
    pub rule: Option<SoftwareRule>,
    /// The session's fingerprint.
    pub fingerprint: String,
}

/// A session call that passed every check before it waits for its turn.
#[derive(Clone, Debug)]
pub struct PreparedCall {
    /// The call in its stored form, without the session ID.
    pub request: RunRequest,
    /// Its floor, parsed.
    pub floor: Option<Floor>,
    /// A cell's language.
    pub language: Option<Language>,
    /// The budget the session gets for it.
    pub timeout: Duration,
    /// The digest of what the caller sent (the session ID is not part of it).
    pub request_sha256: String,
}

impl PreparedCall {
    /// The grant profile the call names, or "".
    pub fn grant_profile(&self) -> &str {
        match self.request.payload() {
            Ok(Payload::JavaScript(js)) => &js.grant_profile,
            Ok(Payload::Project(p)) => &p.grant_profile,
            _ => "",
        }
    }
}

/// The text a call gets when the open carried a software rule and the call does not.
pub const RULE_OMITTED: &str = "invalid request: session call omitted the software rule established at open";

/// Checks a `SessionRun` call against what the session stated at open, before it
/// waits for the session's turn, so an impossible call is never reported as busy.
///
/// # Errors
///
/// A [`Refusal`]: nothing ran, and the session is unchanged.
///
/// `grants` checks a grant profile a call names (never called with "").
pub fn prepare_call(
    facts: &SessionFacts,
    tier: Tier,
    request: &SessionRunRequest,
    grants: &dyn Fn(&str) -> Result<(), Refusal>,
) -> Result<PreparedCall, Refusal> {
    let payload = request.payload().map_err(|e| {
        Refusal::request(match e {
            PayloadError::Missing => "invalid request: a session call carries exactly one of javascript, project, or cell",
            PayloadError::Several => {
                "invalid request: a session call carries exactly one of javascript, project, or cell; this one sets several"
            }
        })
    })?;
    let floor = Floor::stronger(validate::floor(&request.minimum_isolation)?, facts.floor);
    if let Some(rule) = &request.software_rule {
        validate::software_rule(rule)?;
    }
    let mut language = None;
    match payload {
        Payload::JavaScript(js) => {
            validate::javascript(js)?;
            if !js.grant_profile.is_empty() {
                grants(&js.grant_profile)?;
            }
        }
        Payload::Project(p) => {
            validate::project(p)?;
            if !p.grant_profile.is_empty() {
                grants(&p.grant_profile)?;
            }
            if !facts.projects {
                return Err(Refusal::unsupported(format!(
                    "the {} provider's sessions run cells and snippets, not projects; the docker provider runs projects in sessions",
                    facts.provider
                )));
            }
        }
        Payload::Module(_) => return Err(Refusal::request("invalid request: module tables do not run in sessions")),
        Payload::Cell(c) => {
            let l = validate::cell(c)?;
            if !facts.support.languages.contains(&l) {
                let stated: Vec<&str> = facts.support.languages.iter().map(|l| l.as_str()).collect();
                return Err(Refusal::unsupported(format!(
                    "the {} provider's sessions run {} cells, not {}",
                    facts.provider,
                    stated.join(" and "),
                    l.as_str()
                )));
            }
            language = Some(l);
        }
    }
    check_floor(tier.min(facts.evidence.tier), floor)?;
    match (&facts.rule, request.software_rule.as_ref().filter(|r| !r.mode.is_empty())) {
        (Some(_), None) => return Err(Refusal::request(RULE_OMITTED)),
        (_, Some(rule))
            if !rule.identities.is_empty() && !rule.identities.contains(&facts.evidence.software_identity) =>
        {
            return Err(Refusal::new(
                Reason::Environment,
                "the software this session runs is outside the call's software rule",
            ));
        }
        _ => {}
    }
    let timeout = facts.support.resolve_timeout(request.timeout_ms).min(crate::limits::MAX_RUN_TIMEOUT);
    let stored = request.as_run_request();
    let request_sha256 = record::request_digest(&stored);
    Ok(PreparedCall { request: stored, floor, language, timeout, request_sha256 })
}

/// Why a session call produced no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallFailure {
    /// Nothing ran; the session goes on.
    Refused(Refusal),
    /// Nothing ran, and the session is over.
    Ended(Ending),
    /// The call may have run: it takes its place in the chain with `record`, which
    /// states no result; the detail is for the log.
    Unanswered {
        /// The chained record the error carries.
        record: Box<RunRecord>,
        /// For the log only.
        detail: String,
        /// The session's end, if the failure took the sandbox.
        ended: Option<Ending>,
    },
}

/// A session call's place in its chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The call's number, from 1.
    pub sequence: u64,
    /// The previous record's digest, empty for the first call.
    pub previous_sha256: String,
}

/// Runs a prepared call in `session` and answers it with its chained record.
///
/// # Errors
///
/// [`CallFailure`]: refused or ended (nothing ran, no record, no number), or
/// unanswered (a record without a result, numbered in the chain).
pub fn execute_call(
    session: &mut dyn Session,
    facts: &SessionFacts,
    tier: Tier,
    prepared: &PreparedCall,
    grant: Option<&Grant>,
    link: Link,
    started: &Started,
) -> Result<(RunResponse, Option<Ending>), CallFailure> {
    let req = &prepared.request;
    if prepared.grant_profile().is_empty() != grant.is_none() {
        return Err(CallFailure::Refused(Refusal::new(
            Reason::Permission,
            format!("grant_profile {:?} is not available to this caller", prepared.grant_profile()),
        )));
    }
    let call = match req.payload() {
        Ok(Payload::JavaScript(js)) => Call::Snippet(Snippet {
            language: Language::JavaScript,
            code: &js.code,
            timeout: prepared.timeout,
            floor: prepared.floor,
            grant,
        }),
        Ok(Payload::Project(p)) => {
            Call::Project { project: p, timeout: prepared.timeout, floor: prepared.floor, grant }
        }
        Ok(Payload::Cell(c)) => Call::Cell(Cell {
            language: prepared.language.unwrap_or(Language::JavaScript),
            code: &c.code,
            files: &c.files,
            timeout: prepared.timeout,
            floor: prepared.floor,
        }),
        Ok(Payload::Module(_)) | Err(_) => {
            return Err(CallFailure::Refused(Refusal::request("invalid request: not a session call")));
        }
    };
    let rule_id = record::rule_id(req.software_rule.as_ref().filter(|r| !r.mode.is_empty()));
    let chain = (facts.fingerprint.clone(), link.sequence, link.previous_sha256.clone());
    let unanswered = |detail: String, ended: Option<Ending>| CallFailure::Unanswered {
        record: Box::new(unanswered_record(facts, prepared.request_sha256.clone(), rule_id.clone(), started, &link)),
        detail,
        ended,
    };
    let answered = match session.call(call) {
        Ok(a) => a,
        Err(CallError::Refused(r)) => return Err(CallFailure::Refused(r)),
        Err(CallError::Ended(e)) => return Err(CallFailure::Ended(e)),
        Err(CallError::MayHaveRun { detail, ended }) => return Err(unanswered(detail, ended)),
    };
    let mut evidence = answered.evidence;
    evidence.tier = evidence.tier.min(tier).min(facts.evidence.tier);
    if let Some(floor) = prepared.floor
        && !evidence.tier.meets(floor)
    {
        let detail = format!(
            "the {} provider ran a session call with floor {floor} at {} (its evidence fell during the call)",
            facts.provider, evidence.tier
        );
        return Err(unanswered(detail, answered.ended));
    }
    let mut resp = RunResponse::default();
    match answered.output {
        Output::JavaScript(r) => resp.javascript = Some(r),
        Output::Project(r) => resp.project = Some(r),
        Output::Cell(r) => resp.cell = Some(r),
    }
    let resp = answer(resp, &facts.provider, &evidence, prepared.request_sha256.clone(), rule_id, started, chain);
    Ok((resp, answered.ended))
}

/// The record of a session call that may have run without an answer: no result
/// digest, `unanswered` naming the Connect code the caller gets (`internal`), and
/// the evidence the session stated at open.
pub fn unanswered_record(
    facts: &SessionFacts,
    request_sha256: String,
    rule_id: String,
    started: &Started,
    link: &Link,
) -> RunRecord {
    let ev = &facts.evidence;
    let record = RunRecord {
        version: VERSION,
        request_sha256,
        unanswered: "internal".into(),
        provider: facts.provider.clone(),
        isolation: ev.tier.as_str().to_string(),
        environment: ev.environment.clone(),
        policy: ev.policy.clone(),
        software_identity: ev.software_identity.clone(),
        software_rule_id: rule_id,
        instance: ev.instance.clone(),
        started_unix_ms: started.unix_ms,
        ended_unix_ms: started.end_unix_ms().max(started.unix_ms),
        session: facts.fingerprint.clone(),
        sequence: link.sequence,
        previous_sha256: link.previous_sha256.clone(),
        ..RunRecord::default()
    };
    match record::seal(record) {
        Ok(r) => r,
        Err(_) => unreachable!("record version {VERSION} is always known"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::wire::{JavaScriptResult, from_json};

    /// A provider that records what it was asked and answers from a script.
    struct Fake {
        tier: Tier,
        asked: Mutex<Vec<(String, Duration, Option<Floor>)>>,
        answer: Result<JavaScriptResult, RunError>,
        evidence_tier: Tier,
    }

    impl Fake {
        fn new(tier: Tier) -> Fake {
            Fake {
                tier,
                asked: Mutex::new(Vec::new()),
                answer: Ok(JavaScriptResult { stdout: b"42\n".to_vec(), ..Default::default() }),
                evidence_tier: tier,
            }
        }
    }

    impl Provider for Fake {
        fn describe(&self) -> Description {
            Description {
                name: "fake".into(),
                snippet: Some(KindSupport {
                    identity: "fake:1".into(),
                    software_identity: "oci-manifest:x".into(),
                    default_timeout: Duration::from_secs(5),
                    max_timeout: Duration::from_secs(30),
                    languages: vec![Language::JavaScript],
                }),
                project: None,
                module: None,
                memory_mb: 256,
                policy: String::new(),
            }
        }
        fn tier(&self) -> Tier {
            self.tier
        }
        fn preflight(&self) -> Result<(), Refusal> {
            Ok(())
        }
        fn run_snippet(&self, s: &Snippet<'_>) -> Result<Ran<JavaScriptResult>, RunError> {
            self.asked.lock().expect("lock").push((s.code.to_string(), s.timeout, s.floor));
            let result = self.answer.clone()?;
            Ok(Ran {
                result,
                evidence: Evidence {
                    tier: self.evidence_tier,
                    environment: "fake:1".into(),
                    software_identity: "oci-manifest:x".into(),
                    ..Default::default()
                },
            })
        }
    }

    fn req(json: &str) -> RunRequest {
        from_json(json.as_bytes()).expect("request json")
    }

    fn refusal(fake: &Fake, json: &str) -> Refusal {
        let err = prepare(&fake.describe(), fake.tier(), req(json)).expect_err("refused");
        assert!(fake.asked.lock().expect("lock").is_empty(), "the provider was called");
        err
    }

    #[test]
    fn refusals_before_admission_carry_their_reasons() {
        let fake = Fake::new(Tier::Container);
        let cases = [
            (
                r#"{"protocol":4}"#,
                Reason::Request,
                "invalid request: payload must be exactly one of javascript, project, or module",
            ),
            (r#"{"protocol":4,"javascript":{"code":""}}"#, Reason::Request, "invalid request: code is required"),
            (
                r#"{"protocol":4,"minimumIsolation":"none","javascript":{"code":"1"}}"#,
                Reason::Request,
                "invalid request: minimum isolation \"none\" is not a floor; use process, container, kernel or vm, or leave it empty",
            ),
            (
                r#"{"protocol":4,"minimumIsolation":"vm","javascript":{"code":"1"}}"#,
                Reason::Isolation,
                "sandbox isolation requirement not met: this provider runs at container, the request requires vm",
            ),
            (
                r#"{"protocol":4,"cell":{"language":"python","code":"1"}}"#,
                Reason::Request,
                "invalid request: a cell runs only in a session (SessionRun)",
            ),
            (
                r#"{"protocol":4,"project":{"steps":["true"]}}"#,
                Reason::Unsupported,
                "the fake provider does not run projects",
            ),
            (
                r#"{"protocol":4,"softwareRule":{"mode":"exact","identities":["oci-manifest:y"]},"javascript":{"code":"1"}}"#,
                Reason::Environment,
                "the software this provider would run is outside the request's software rule",
            ),
            (
                r#"{"protocol":4,"softwareRule":{"mode":"exact","identities":["a","b"]},"javascript":{"code":"1"}}"#,
                Reason::Request,
                "invalid request: software rule needs mode exact with one identity, or approved with 1 to 32 identities",
            ),
        ];
        for (json, reason, message) in cases {
            let r = refusal(&fake, json);
            assert_eq!((r.reason, r.message.as_str()), (reason, message), "{json}");
        }
    }

    #[test]
    fn a_named_profile_never_runs_without_its_grant_nor_on_a_provider_that_cannot_carry_it() {
        let fake = Fake::new(Tier::Container);
        let req: RunRequest =
            crate::wire::from_json(br#"{"protocol":4,"javascript":{"code":"1","grantProfile":"crm"}}"#)
                .expect("decodes");
        let p = prepare(&fake.describe(), fake.tier(), req).expect("the name alone is not refused here");
        assert_eq!(p.grant_profile(), "crm");
        let r = execute(&fake, p.clone(), None, &Started::now()).expect_err("refused");
        assert_eq!(
            r,
            Failure::Refused(Refusal::new(Reason::Permission, "grant_profile \"crm\" is not available to this caller"))
        );
        let r = check_grant_support("fake", GrantSupport { snippets: false, projects: true }, &p).expect_err("refused");
        assert_eq!(
            (r.reason, r.message.as_str()),
            (
                Reason::Unsupported,
                "the fake provider cannot carry a grant for snippets; run it without grant_profile, or on a provider whose Describe says it supports snippets grants"
            )
        );
        assert!(check_grant_support("fake", GrantSupport { snippets: true, projects: false }, &p).is_ok());
    }

    #[test]
    fn an_answer_carries_a_record_the_caller_can_recompute() {
        let fake = Fake::new(Tier::Container);
        let r = req(
            r#"{"protocol":4,"minimumIsolation":"container","timeoutMs":90000,"softwareRule":{"mode":"exact","identities":["oci-manifest:x"]},"javascript":{"code":"console.log(6*7)"}}"#,
        );
        let started = Started::now();
        let p = prepare(&fake.describe(), fake.tier(), r.clone()).expect("prepared");
        assert_eq!(p.timeout, Duration::from_secs(30), "clamped to the provider's ceiling");
        let resp = execute(&fake, p, None, &started).expect("answered");
        let rec = resp.record.clone().expect("a record");
        assert_eq!(rec.version, 4);
        assert_eq!(rec.request_sha256, record::request_digest(&r));
        assert_eq!(rec.result_sha256, record::result_digest(&resp));
        assert_eq!(rec.record_sha256, record::record_digest(&rec).expect("v4"));
        assert_eq!((rec.provider.as_str(), rec.isolation.as_str()), ("fake", "container"));
        assert_eq!(rec.environment, "fake:1");
        assert_eq!(rec.software_rule_id, "exact:oci-manifest:x");
        assert!(rec.ended_unix_ms >= rec.started_unix_ms);
        assert!(rec.session.is_empty() && rec.sequence == 0 && rec.previous_sha256.is_empty());
        let asked = fake.asked.lock().expect("lock");
        assert_eq!(asked[0], ("console.log(6*7)".to_string(), Duration::from_secs(30), Some(Floor::Container)));
    }

    #[test]
    fn a_provider_refusal_stays_a_refusal_and_a_failure_may_have_run() {
        let mut fake = Fake::new(Tier::Process);
        fake.answer = Err(RunError::Refused(Refusal::new(Reason::Capacity, "full")));
        let r = req(r#"{"protocol":4,"javascript":{"code":"1"}}"#);
        let p = prepare(&fake.describe(), fake.tier(), r.clone()).expect("prepared");
        assert_eq!(
            execute(&fake, p, None, &Started::now()),
            Err(Failure::Refused(Refusal::new(Reason::Capacity, "full")))
        );
        fake.answer = Err(RunError::MayHaveRun("lost".into()));
        let p = prepare(&fake.describe(), fake.tier(), r.clone()).expect("prepared");
        assert_eq!(execute(&fake, p, None, &Started::now()), Err(Failure::MayHaveRun("lost".into())));
    }

    #[test]
    fn evidence_below_the_floor_is_never_an_answer() {
        let mut fake = Fake::new(Tier::Kernel);
        let r = req(r#"{"protocol":4,"minimumIsolation":"kernel","javascript":{"code":"1"}}"#);
        // Current evidence below the floor: refused before dispatch, marked `isolation`.
        let refused = prepare(&fake.describe(), Tier::Container, r.clone()).expect_err("below the floor");
        assert_eq!(
            refused,
            Refusal::new(
                Reason::Isolation,
                "sandbox isolation requirement not met: this provider runs at container, the request requires kernel"
            )
        );
        assert!(fake.asked.lock().expect("lock").is_empty(), "a refused request reached the provider");
        // Evidence that fell during the run: the code ran, so this is no refusal (no
        // not-dispatched reason) but a failure that may have run, naming both tiers.
        fake.evidence_tier = Tier::Container;
        let p = prepare(&fake.describe(), fake.tier(), r).expect("prepared");
        assert_eq!(
            execute(&fake, p, None, &Started::now()),
            Err(Failure::MayHaveRun(
                "the fake provider ran a request with floor kernel at container (its evidence fell during the run)"
                    .into()
            ))
        );
        assert_eq!(fake.asked.lock().expect("lock").len(), 1);
    }

    #[test]
    fn the_stated_tier_never_exceeds_the_providers() {
        let mut fake = Fake::new(Tier::Container);
        fake.evidence_tier = Tier::Vm;
        let r = req(r#"{"protocol":4,"javascript":{"code":"1"}}"#);
        let p = prepare(&fake.describe(), fake.tier(), r.clone()).expect("prepared");
        let resp = execute(&fake, p, None, &Started::now()).expect("answered");
        assert_eq!(resp.isolation, "container");
    }

    /// A session that records its calls: whether each carried a grant.
    struct Counting(Vec<bool>);

    impl Session for Counting {
        fn call(&mut self, call: Call<'_>) -> Result<crate::session::Answered, CallError> {
            self.0.push(match call {
                Call::Snippet(s) => s.grant.is_some(),
                Call::Project { grant, .. } => grant.is_some(),
                Call::Cell(_) => false,
            });
            Err(CallError::Refused(Refusal::request("not used")))
        }
        fn close(&mut self) {}
    }

    struct NoBroker;

    impl crate::provider::HostApi for NoBroker {
        fn call(&self, _: &str, _: &str, _: Option<&[u8]>) -> crate::provider::HostAnswer {
            crate::provider::HostAnswer { status: 403, content_type: String::new(), body: Vec::new() }
        }
    }

    #[test]
    fn a_session_project_carries_its_grant_and_a_named_profile_needs_its_grant() {
        let fake = Fake::new(Tier::Container);
        let support = fake.describe().snippet.expect("snippets");
        let facts = SessionFacts {
            provider: "fake".into(),
            support,
            projects: true,
            evidence: Evidence { tier: Tier::Container, ..Evidence::default() },
            floor: None,
            rule: None,
            fingerprint: "f".into(),
        };
        let grant = Grant {
            global: "host".into(),
            routes: vec![],
            preamble: String::new(),
            api: std::sync::Arc::new(NoBroker),
        };
        let call = |json: &str| {
            let r: SessionRunRequest = from_json(json.as_bytes()).expect("decodes");
            prepare_call(&facts, Tier::Container, &r, &|_| Ok(())).expect("prepared")
        };
        let link = || Link { sequence: 1, previous_sha256: String::new() };
        let mut session = Counting(Vec::new());
        let project = call(r#"{"protocol":4,"sessionId":"s","project":{"steps":["true"],"grantProfile":"p"}}"#);
        let r = execute_call(&mut session, &facts, Tier::Container, &project, Some(&grant), link(), &Started::now());
        assert_eq!(r, Err(CallFailure::Refused(Refusal::request("not used"))));
        assert_eq!(session.0, [true], "the project reached the session with its grant");
        let snippet = call(r#"{"protocol":4,"sessionId":"s","javascript":{"code":"1","grantProfile":"p"}}"#);
        let r = execute_call(&mut session, &facts, Tier::Container, &snippet, None, link(), &Started::now());
        assert_eq!(
            r,
            Err(CallFailure::Refused(Refusal::new(
                Reason::Permission,
                "grant_profile \"p\" is not available to this caller"
            )))
        );
        // A project naming a profile without the grant it names never reaches the session either.
        let r = execute_call(&mut session, &facts, Tier::Container, &project, None, link(), &Started::now());
        assert_eq!(
            r,
            Err(CallFailure::Refused(Refusal::new(
                Reason::Permission,
                "grant_profile \"p\" is not available to this caller"
            )))
        );
        assert_eq!(session.0, [true], "nothing else reached the session");
    }
}
