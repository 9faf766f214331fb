//! The protocol decoder: every message a caller or a daemon sends, in protobuf's
//! JSON form, and the binary error details a daemon attaches. Whatever the bytes,
//! decoding never panics; what decodes writes out in a canonical form that decodes
//! to the same message, and writes out the same again (a fixed point), so a digest
//! taken over a re-encoded message cannot drift.
#![no_main]

use libfuzzer_sys::fuzz_target;
use plimsoll_core::wire::{self, details};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Decodes `data` as `T`; if it decodes, its canonical JSON must decode and
/// re-encode to the same bytes.
fn round_trip<T: DeserializeOwned + Serialize>(data: &[u8]) {
    let Ok(first) = wire::from_json::<T>(data) else { return };
    let written = serde_json::to_vec(&first).expect("a decoded message encodes");
    let again: T = match wire::from_json(&written) {
        Ok(m) => m,
        Err(e) => panic!(
            "the canonical form of a decoded message does not decode: {e}: {}",
            String::from_utf8_lossy(&written)
        ),
    };
    let rewritten = serde_json::to_vec(&again).expect("encodes");
    assert_eq!(written, rewritten, "the canonical form is not a fixed point");
}

fuzz_target!(|data: &[u8]| {
    round_trip::<wire::RunRequest>(data);
    round_trip::<wire::RunResponse>(data);
    round_trip::<wire::SessionRunRequest>(data);
    round_trip::<wire::SessionRunResponse>(data);
    round_trip::<wire::OpenSessionRequest>(data);
    round_trip::<wire::OpenSessionResponse>(data);
    round_trip::<wire::CloseSessionRequest>(data);
    round_trip::<wire::RunRecord>(data);

    // The binary details: what decodes encodes to bytes that decode to it again.
    if let Ok(rec) = details::decode_record(data) {
        let bytes = details::encode_record(&rec);
        assert_eq!(details::decode_record(&bytes).ok().as_ref(), Some(&rec), "a record's details do not round-trip");
    }
    if let Ok(Some(rec)) = details::decode_unanswered(data) {
        let bytes = details::encode_unanswered(&rec);
        assert_eq!(details::decode_unanswered(&bytes).ok().flatten().as_ref(), Some(&rec), "unanswered details");
    }
    if let Ok((reason, detail)) = details::decode_enum_and_string(data) {
        let bytes = details::encode_session_ended(reason, &detail);
        assert_eq!(details::decode_enum_and_string(&bytes), Ok((reason, detail)), "a reason and detail");
    }
});
