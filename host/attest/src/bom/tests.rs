use plimsoll_keys::SigningKey;

use super::*;
use crate::bundle::read_lines;

/// The golden bundle (two single runs, a session of two calls and its close, all
/// signed by the fixed test key) and that key's public half.
fn golden() -> (Vec<u8>, VerifyingKey) {
    let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/golden.jsonl")).expect("golden bundle");
    (bytes, SigningKey::from_bytes(&[7u8; 32]).verifying_key())
}

fn refusal(bundle: &[u8], bom: &[u8], key: &VerifyingKey) -> String {
    check(bundle, bom, key).expect_err("refused").to_string()
}

#[test]
fn a_bundle_gives_one_bom_and_it_states_each_signed_run() {
    let (bundle, key) = golden();
    let bom = build(&bundle, &key).expect("built");
    assert_eq!(bom, build(&bundle, &key).expect("again"), "the same bundle, the same BOM");
    assert_eq!((bom["bomFormat"].as_str(), bom["specVersion"].as_str()), (Some("CycloneDX"), Some("1.6")));
    let serial = bom["serialNumber"].as_str().expect("serial");
    assert_eq!(serial, serial_number(&hex::encode(Sha256::digest(&bundle))));
    assert_eq!(&serial[23..24], "8", "a version 8 UUID: {serial}");
    assert_eq!(bom["metadata"]["timestamp"], "2026-11-30T00:53:20.002Z", "the last run's end");

    let lines = read_lines(&bundle).expect("lines");
    let formulas = bom["formulation"].as_array().expect("formulation");
    assert_eq!(formulas.len(), 4, "two single runs and two session calls; the close is not a run");
    let (_, runs) = bundle::signed_runs(&bundle, &key).expect("runs");
    for (formula, run) in formulas.iter().zip(&runs) {
        let w = &formula["workflows"][0];
        assert_eq!(w["uid"].as_str(), Some(run.record.record_sha256.as_str()));
        assert_eq!(formula["components"][1]["hashes"][0]["content"].as_str(), Some(run.record.request_sha256.as_str()));
        assert_eq!(formula["components"][2]["hashes"][0]["content"].as_str(), Some(run.record.result_sha256.as_str()));
        let attached = STANDARD.decode(w["outputs"][1]["data"]["content"].as_str().expect("content")).expect("b64");
        let line_envelope = serde_json::to_vec(&lines[run.line - 1].entry.envelope).expect("envelope");
        assert_eq!(attached, line_envelope, "the line's signed statement, byte for byte");
        assert_eq!(w["outputs"][1]["type"], "attestation");
    }
    let session_call = &formulas[1]["workflows"][0]["properties"];
    let names: Vec<&str> = session_call.as_array().expect("props").iter().filter_map(|p| p["name"].as_str()).collect();
    assert!(names.contains(&"plimsoll:session") && names.contains(&"plimsoll:sequence"), "{names:?}");
    assert_eq!(check(&bundle, &serde_json::to_vec_pretty(&bom).expect("json"), &key), Ok(4));
}

#[test]
fn a_bom_that_is_not_its_bundles_is_refused_naming_the_first_difference() {
    let (bundle, key) = golden();
    let bom = build(&bundle, &key).expect("built");
    let at = |edit: &dyn Fn(&mut Value)| {
        let mut b = bom.clone();
        edit(&mut b);
        refusal(&bundle, &serde_json::to_vec(&b).expect("json"), &key)
    };
    let differs = |place: &str| {
        format!(
            "bill of materials: the BOM differs from what its bundle gives at {place} (rebuild it with `attest bom`)"
        )
    };
    let envelope = "/formulation/0/workflows/0/outputs/1/data/content";
    let tampered = at(&|b| {
        let content = b.pointer_mut(envelope).expect("content");
        let mut raw = STANDARD.decode(content.as_str().expect("str")).expect("b64");
        raw[40] ^= 1;
        *content = Value::String(STANDARD.encode(raw));
    });
    assert_eq!(tampered, differs(envelope), "an attached record changed");
    assert_eq!(
        at(&|b| b["formulation"][2]["workflows"][0]["properties"][4]["value"] = json!("vm")),
        differs("/formulation/2/workflows/0/properties/4/value"),
        "a stronger tier claimed"
    );
    assert_eq!(
        at(&|b| {
            b["formulation"].as_array_mut().expect("runs").pop();
        }),
        differs("/formulation (another number of entries)"),
        "a run left out"
    );
    assert_eq!(
        at(&|b| b["metadata"]["supplier"] = json!({"name": "someone"})),
        differs("/metadata/supplier (not in the bundle's BOM)")
    );
    assert_eq!(
        at(&|b| {
            b.as_object_mut().expect("object").remove("serialNumber");
        }),
        differs("/serialNumber (missing)")
    );
    assert!(refusal(&bundle, b"<bom/>", &key).starts_with("bill of materials: the BOM is not JSON: "));
}

#[test]
fn nothing_is_built_from_a_bundle_that_does_not_verify() {
    let (bundle, key) = golden();
    let mut lines: Vec<&[u8]> = bundle.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
    lines.remove(1);
    let cut: Vec<u8> = lines.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
    let e = build(&cut, &key).expect_err("refused");
    assert!(matches!(e.kind(), AttestError::Link(_)), "{e}");
    let other = SigningKey::from_bytes(&[9u8; 32]).verifying_key();
    assert!(matches!(build(&bundle, &other).expect_err("refused").kind(), AttestError::Signature(_)));
}

#[test]
fn times_are_rfc3339_utc_and_digests_are_found_in_identities() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
    assert_eq!(rfc3339(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999Z");
    let hexes = "ab".repeat(32);
    assert_eq!(sha256_in(&format!("docker-image:sha256:{hexes}")), Some(hexes.as_str()));
    assert_eq!(sha256_in("wasm-component:sha256:00"), None, "too short to be a digest");
    assert_eq!(sha256_in(&format!("x:sha256:{}", "AB".repeat(32))), None, "not lowercase hex");
}
