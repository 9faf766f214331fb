//! The DSSE and bundle verifier: a receipts file as a harness reads it, under the
//! key of the committed golden bundle. Nothing the fuzzer writes can carry a new
//! signature by that key, so whatever verifies must be the golden bundle or one of
//! its own prefixes that ends in a checkpoint: an accepted forgery fails here.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plimsoll_attest::{Envelope, bundle};
use plimsoll_keys::{SigningKey, VerifyingKey};

/// Signed by [`key`] (`host/attest`'s golden test writes it).
const GOLDEN: &[u8] = include_bytes!("../../../host/attest/testdata/golden.jsonl");

/// The golden bundle's key: the attest tests' fixed one.
fn key() -> VerifyingKey {
    SigningKey::from_bytes(&[7u8; 32]).verifying_key()
}

fn genuine(data: &[u8]) -> bool {
    GOLDEN.starts_with(data) && data.ends_with(b"\n")
}

fuzz_target!(|data: &[u8]| {
    let key = key();
    if let Ok(report) = bundle::verify_bundle(data, &key) {
        assert!(genuine(data), "a bundle the fuzzer wrote verified: {report:?}");
        assert_eq!(bundle::verify_progress(data, &key).as_ref(), Ok(&report), "a whole bundle is valid progress");
        let (again, runs) = bundle::signed_runs(data, &key).expect("a verified bundle has signed runs");
        assert_eq!(again, report);
        assert!(runs.len() <= report.lines);
    }
    if bundle::verify_progress(data, &key).is_ok() {
        assert!(genuine(data), "a partial bundle the fuzzer wrote verified");
    }
    if bundle::verify_entry(data, 1, &key).is_ok() {
        let first = data.split_inclusive(|b| *b == b'\n').next().unwrap_or_default();
        assert!(GOLDEN.starts_with(first) && first.ends_with(b"\n"), "a forged first line verified");
    }
    if let Ok(envelope) = serde_json::from_slice::<Envelope>(data) {
        for strict in [true, false] {
            if let Ok(payload) = envelope.open(&key, strict) {
                assert!(golden_payloads().contains(&payload), "a forged envelope opened");
            }
        }
    }
});

/// Every payload the golden bundle's envelopes and links sign.
fn golden_payloads() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for line in GOLDEN.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let entry: bundle::Entry = serde_json::from_slice(line).expect("a golden line");
        for env in entry.envelope.iter().chain(entry.link.iter()) {
            out.push(env.open(&key(), false).expect("a golden envelope opens"));
        }
    }
    out
}
