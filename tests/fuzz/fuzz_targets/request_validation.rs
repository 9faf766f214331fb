//! Request validation: a `Run` request as the daemon reads it, checked by
//! `dispatch::prepare` against a provider that runs every kind, and a session call
//! checked by `dispatch::prepare_call`. Whatever the request, the check never
//! panics and refuses only for a reason a request can earn (`request`, the floor,
//! the software rule, an unsupported kind), with a message; what it admits has the
//! digest of its own canonical re-encoding, the digest a client recomputes.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use plimsoll_core::dispatch::{self, SessionFacts};
use plimsoll_core::provider::{Description, Evidence, KindSupport};
use plimsoll_core::record;
use plimsoll_core::validate::Language;
use plimsoll_core::wire::{self, RunRequest, SessionRunRequest};
use plimsoll_core::{Reason, Refusal, Tier};

fn kind(identity: &str) -> Option<KindSupport> {
    Some(KindSupport {
        identity: identity.into(),
        software_identity: "oci-manifest:sha256:00".into(),
        default_timeout: Duration::from_secs(5),
        max_timeout: Duration::from_secs(30),
        languages: vec![Language::JavaScript, Language::Python],
    })
}

fn description() -> Description {
    Description {
        name: "fuzz".into(),
        snippet: kind("snippet:1"),
        project: kind("project:1"),
        module: kind("module:1"),
        memory_mb: 256,
        policy: String::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = wire::from_json::<RunRequest>(data) {
        let digest = record::request_digest(&req);
        match dispatch::prepare(&description(), Tier::Container, req.clone()) {
            Ok(prepared) => {
                assert_eq!(prepared.request_sha256, digest, "prepare digests what it was given");
                let written = serde_json::to_vec(&req).expect("encodes");
                let again: RunRequest = wire::from_json(&written).expect("the canonical form decodes");
                assert_eq!(record::request_digest(&again), digest, "the digest survives the wire");
                assert!(prepared.timeout <= Duration::from_secs(30), "the timeout is clamped");
            }
            Err(refusal) => {
                let allowed = [Reason::Request, Reason::Isolation, Reason::Environment, Reason::Unsupported];
                assert!(allowed.contains(&refusal.reason), "refused for {:?}: {}", refusal.reason, refusal.message);
                assert!(!refusal.message.is_empty(), "a refusal says why");
            }
        }
    }
    if let Ok(call) = wire::from_json::<SessionRunRequest>(data) {
        let facts = session_facts();
        // A grant profile is the daemon's to check; here every name is refused.
        let grants = |name: &str| Err(Refusal::new(Reason::Permission, format!("no profile {name:?}")));
        match dispatch::prepare_call(&facts, Tier::Container, &call, &grants) {
            Ok(prepared) => {
                assert_eq!(prepared.request, call.as_run_request(), "the stored form is the call without its ID");
                assert_eq!(prepared.request_sha256, record::request_digest(&prepared.request));
                assert!(prepared.timeout <= Duration::from_secs(30), "the timeout is clamped");
            }
            Err(refusal) => {
                let allowed =
                    [Reason::Request, Reason::Isolation, Reason::Environment, Reason::Unsupported, Reason::Permission];
                assert!(allowed.contains(&refusal.reason), "refused for {:?}: {}", refusal.reason, refusal.message);
                assert!(!refusal.message.is_empty(), "a refusal says why");
            }
        }
    }
});

fn session_facts() -> SessionFacts {
    SessionFacts {
        provider: "fuzz".into(),
        support: kind("session:1").expect("kind"),
        projects: true,
        evidence: Evidence {
            tier: Tier::Container,
            environment: "oci:sha256:00".into(),
            software_identity: "oci-manifest:sha256:00".into(),
            instance: String::new(),
            policy: String::new(),
        },
        floor: None,
        rule: None,
        fingerprint: "00".repeat(32),
    }
}
