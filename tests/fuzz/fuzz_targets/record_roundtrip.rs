//! The record encoder, against the digests: a record, request or response as the
//! daemon writes it. A record seals to the digest a verifier recomputes, after a
//! JSON round trip and after the binary details round trip; a version outside the
//! known ones is refused, never digested; and the canonical encoding keeps field
//! boundaries (moving a character from one field to the next changes the digest).
#![no_main]

use libfuzzer_sys::fuzz_target;
use plimsoll_core::record::{self, UnknownVersion};
use plimsoll_core::wire::{self, RunRecord, RunRequest, RunResponse, details};

fuzz_target!(|data: &[u8]| {
    if let Ok(rec) = wire::from_json::<RunRecord>(data) {
        match record::seal(rec.clone()) {
            Err(UnknownVersion(v)) => {
                assert_eq!(v, rec.version);
                assert!(v == 0 || v > record::VERSION, "version {v} is known but refused");
            }
            Ok(sealed) => {
                let digest = sealed.record_sha256.clone();
                assert_eq!(record::record_digest(&sealed).as_ref(), Ok(&digest), "sealing is stable");
                let json = serde_json::to_vec(&sealed).expect("encodes");
                let back: RunRecord = wire::from_json(&json).expect("the canonical form decodes");
                assert_eq!(record::record_digest(&back).as_ref(), Ok(&digest), "the digest survives JSON");
                let binary = details::decode_record(&details::encode_record(&sealed)).expect("details decode");
                assert_eq!(record::record_digest(&binary).as_ref(), Ok(&digest), "the digest survives details");
                if let Some(c) = sealed.request_sha256.chars().last() {
                    let mut moved = sealed.clone();
                    moved.request_sha256.pop();
                    moved.result_sha256.insert(0, c);
                    assert_ne!(record::record_digest(&moved).as_ref(), Ok(&digest), "a field boundary was lost");
                }
            }
        }
    }
    if let Ok(req) = wire::from_json::<RunRequest>(data) {
        let json = serde_json::to_vec(&req).expect("encodes");
        let back: RunRequest = wire::from_json(&json).expect("the canonical form decodes");
        assert_eq!(record::request_digest(&back), record::request_digest(&req), "request digest drifted");
    }
    if let Ok(resp) = wire::from_json::<RunResponse>(data) {
        let json = serde_json::to_vec(&resp).expect("encodes");
        let back: RunResponse = wire::from_json(&json).expect("the canonical form decodes");
        assert_eq!(record::result_digest(&back), record::result_digest(&resp), "result digest drifted");
    }
});
