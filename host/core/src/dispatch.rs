//! The run pipeline's provider-facing half, shared by the daemon and the CLI:
//! [`prepare`] (validation, the floor against current evidence, the budget) runs
//! before admission; [`execute`] dispatches and stamps the response's record.
//!
//! Everything [`prepare`] refuses ran nothing. [`execute`] either answers with a
//! result and its record, or says whether the code may have run.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::provider::{Description, Evidence, KindSupport, Provider, Ran, RunError, Snippet, check_floor};
use crate::record::{self, VERSION};
use crate::refusal::{Reason, Refusal};
use crate::tier::{Floor, Tier};
use crate::validate::{self, Language};
use crate::wire::{Payload, PayloadError, RunRecord, RunRequest, RunResponse};

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
    if let Payload::JavaScript(js) = payload
        && !js.grant_profile.is_empty()
    {
        return Err(Refusal::new(
            Reason::Permission,
            format!("grant_profile {:?} is not available to this caller", js.grant_profile),
        ));
    }
    if let Payload::Project(p) = payload
        && !p.grant_profile.is_empty()
    {
        return Err(Refusal::new(
            Reason::Permission,
            format!("grant_profile {:?} is not available to this caller", p.grant_profile),
        ));
    }
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

/// Dispatches a prepared request to `provider` and answers it with its record.
///
/// # Errors
///
/// [`Failure::Refused`] when the provider refused (nothing ran), and
/// [`Failure::MayHaveRun`] when it failed after the code may have started.
pub fn execute(provider: &dyn Provider, prepared: Prepared, started: &Started) -> Result<RunResponse, Failure> {
    let name = provider.describe().name;
    let mut resp = RunResponse::default();
    let evidence = match prepared.payload() {
        Payload::JavaScript(js) => {
            let Ran { result, evidence } = provider.run_snippet(&Snippet {
                language: Language::JavaScript,
                code: &js.code,
                timeout: prepared.timeout,
                floor: prepared.floor,
            })?;
            resp.javascript = Some(result);
            evidence
        }
        Payload::Project(p) => {
            let Ran { result, evidence } = provider.run_project(p, prepared.timeout, prepared.floor)?;
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
                r#"{"protocol":4,"javascript":{"code":"1","grantProfile":"crm"}}"#,
                Reason::Permission,
                "grant_profile \"crm\" is not available to this caller",
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
    fn an_answer_carries_a_record_the_caller_can_recompute() {
        let fake = Fake::new(Tier::Container);
        let r = req(
            r#"{"protocol":4,"minimumIsolation":"container","timeoutMs":90000,"softwareRule":{"mode":"exact","identities":["oci-manifest:x"]},"javascript":{"code":"console.log(6*7)"}}"#,
        );
        let started = Started::now();
        let p = prepare(&fake.describe(), fake.tier(), r.clone()).expect("prepared");
        assert_eq!(p.timeout, Duration::from_secs(30), "clamped to the provider's ceiling");
        let resp = execute(&fake, p, &started).expect("answered");
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
        assert_eq!(execute(&fake, p, &Started::now()), Err(Failure::Refused(Refusal::new(Reason::Capacity, "full"))));
        fake.answer = Err(RunError::MayHaveRun("lost".into()));
        let p = prepare(&fake.describe(), fake.tier(), r.clone()).expect("prepared");
        assert_eq!(execute(&fake, p, &Started::now()), Err(Failure::MayHaveRun("lost".into())));
    }

    #[test]
    fn evidence_below_the_floor_is_never_an_answer() {
        let mut fake = Fake::new(Tier::Kernel);
        fake.evidence_tier = Tier::Container;
        let r = req(r#"{"protocol":4,"minimumIsolation":"kernel","javascript":{"code":"1"}}"#);
        let p = prepare(&fake.describe(), fake.tier(), r.clone()).expect("prepared");
        assert!(matches!(execute(&fake, p, &Started::now()), Err(Failure::MayHaveRun(_))));
    }

    #[test]
    fn the_stated_tier_never_exceeds_the_providers() {
        let mut fake = Fake::new(Tier::Container);
        fake.evidence_tier = Tier::Vm;
        let r = req(r#"{"protocol":4,"javascript":{"code":"1"}}"#);
        let p = prepare(&fake.describe(), fake.tier(), r.clone()).expect("prepared");
        let resp = execute(&fake, p, &Started::now()).expect("answered");
        assert_eq!(resp.isolation, "container");
    }
}
