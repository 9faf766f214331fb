//! `plimsoll-host record digest` against the golden vectors.

use super::{err, exec, out, scratch};

const VECTORS: &str = include_str!("../../../core/testdata/records.json");

#[test]
fn every_vector_digests_as_published() {
    let doc: serde_json::Value = serde_json::from_str(VECTORS).expect("vectors");
    for v in doc["vectors"].as_array().expect("list") {
        let kind = v["kind"].as_str().expect("kind");
        if kind == "session" {
            continue;
        }
        let name = v["name"].as_str().expect("name");
        let path = scratch(&format!("{}.json", name.replace(' ', "-")), v["input"].to_string().as_bytes());
        let o = exec(&["record", "digest", "--kind", kind, &path], b"");
        assert_eq!(o.status.code(), Some(0), "{name}: {}", err(&o));
        assert_eq!(out(&o).trim(), v["sha256"].as_str().expect("digest"), "{name}");
    }
}

#[test]
fn a_record_whose_stated_digest_differs_is_flagged() {
    let o = exec(
        &["record", "digest", "--kind", "record", "-"],
        br#"{"version":4,"requestSha256":"a","recordSha256":"0000"}"#,
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).starts_with("the record states recordSha256 0000, but its fields digest to "), "{}", err(&o));
}

#[test]
fn malformed_input_is_an_error_naming_the_file() {
    let o = exec(&["record", "digest", "--kind", "request", "-"], b"[1,2]");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(err(&o), "plimsoll-host: - is not a RunRequest: the message is not a JSON object\n");
    let o = exec(&["record", "digest", "--kind", "record", "-"], br#"{"version":9}"#);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(err(&o), "plimsoll-host: run record version 9 is not one this build knows (1 to 4)\n");
}
