//! `plimsoll-host attest` against a live wasm daemon: runs signed into a bundle,
//! the bundle verified whole and line by line, replayed, checked by an independent
//! DSSE implementation (securesystemslib, from PyPI), and refused when tampered.

use std::path::Path;
use std::process::Output;

use super::python::run_script;
use super::{Daemon, host, scratch};

const TOKEN: &str = "attest-suite-token-attest-suite-token-0123";

fn attest(dir: &Path, args: &[&str]) -> Output {
    host().current_dir(dir).arg("attest").args(args).env("PLIMSOLL_CALLER_TOKEN", TOKEN).output().expect("attest")
}

/// A wasm daemon with sessions, no rate limit, and the suite's token.
fn wasm_daemon() -> Daemon {
    Daemon::start(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_TOKEN", TOKEN),
        ("SANDBOX_RATE_PER_MIN", "0"),
        ("SANDBOX_MAX_SESSIONS", "2"),
    ])
}

fn ok(o: &Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "stdout:\n{out}\nstderr:\n{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// Verifies every envelope of the bundle with securesystemslib's DSSE, computing the
/// key ID itself from the public key.
const INDEPENDENT: &str = r#"
import hashlib, json, os
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey
pub = serialization.load_pem_public_key(open(os.environ["PUB"], "rb").read())
der = pub.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
key = SSlibKey.from_crypto(pub, keyid=hashlib.sha256(der).hexdigest())
n = 0
for line in open(os.environ["BUNDLE"], "rb"):
    entry = json.loads(line)
    for name in ("envelope", "link"):
        if name in entry:
            env = Envelope.from_dict(entry[name])
            env.verify([key], 1)
            assert env.payload_type == "application/vnd.in-toto+json"
            assert json.loads(env.payload)["_type"] == "https://in-toto.io/Statement/v1"
            n += 1
print(f"{n} envelopes verified")
"#;

#[test]
fn runs_are_signed_verified_replayed_and_tampering_is_refused() {
    let dir = scratch("attest");
    let d = wasm_daemon();
    let url = d.url();
    let keygen = ok(&attest(&dir, &["keygen", "--out", "harness.key"]));
    assert!(keygen.contains("key ID       "), "{keygen}");
    std::fs::write(dir.join("req.json"), r#"{"javascript":{"code":"console.log(6*7)"}}"#).expect("request");
    for _ in 0..2 {
        let out =
            ok(&attest(&dir, &["run", "--daemon", &url, "--key", "harness.key", "--bundle", "runs.jsonl", "req.json"]));
        assert!(out.starts_with("ran on wasm (process): exit 0\nrecord "), "{out}");
    }
    let verified = ok(&attest(&dir, &["verify", "--pub", "harness.key.pub", "runs.jsonl"]));
    assert!(verified.starts_with("verified 4 lines signed by key "), "{verified}");
    assert!(verified.ends_with("whole to its last checkpoint: 2 single runs\n"), "{verified}");
    let entry = ok(&attest(&dir, &["verify-entry", "--pub", "harness.key.pub", "--line", "3", "runs.jsonl"]));
    assert!(entry.starts_with("line 3 is a single run on wasm (process)"), "{entry}");
    let replayed = ok(&attest(&dir, &["replay", "--daemon", &url, "--pub", "harness.key.pub", "runs.jsonl"]));
    assert_eq!(replayed.lines().filter(|l| l.contains(": same result (")).count(), 2, "{replayed}");

    // A standard DSSE implementation accepts every envelope, and not a tampered one.
    let (pub_path, bundle) = (dir.join("harness.key.pub"), dir.join("runs.jsonl"));
    let env = [("PUB", pub_path.to_str().expect("utf8")), ("BUNDLE", bundle.to_str().expect("utf8"))];
    assert_eq!(run_script(INDEPENDENT, &env), "6 envelopes verified\n");
    let text = std::fs::read_to_string(&bundle).expect("bundle");
    let at = text.find("\"payload\":\"").expect("payload") + 12;
    let mut tampered = text.clone().into_bytes();
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let bad = dir.join("tampered.jsonl");
    std::fs::write(&bad, &tampered).expect("write");
    let o = super::python::python_cmd()
        .arg("-c")
        .arg(INDEPENDENT)
        .env("PUB", &pub_path)
        .env("BUNDLE", &bad)
        .output()
        .expect("python");
    assert!(!o.status.success(), "the independent verifier accepted a tampered payload");

    // Our verifier names what is wrong: the tampered payload, another key.
    let o = attest(&dir, &["verify", "--pub", "harness.key.pub", "tampered.jsonl"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("line 1: signature: no signature verifies"), "{o:?}");
    ok(&attest(&dir, &["keygen", "--out", "other.key"]));
    let o = attest(&dir, &["verify", "--pub", "other.key.pub", "runs.jsonl"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("signature: no signature verifies under key"), "{o:?}");

    // A session: each call signed as it comes, the close signing the count and last digest.
    let calls =
        r#"[{"cell":{"language":"javascript","code":"let x = 41"}},{"cell":{"language":"javascript","code":"x + 1"}}]"#;
    std::fs::write(dir.join("calls.json"), calls).expect("calls");
    let out =
        ok(&attest(&dir, &["session", "--daemon", &url, "--key", "harness.key", "--bundle", "s.jsonl", "calls.json"]));
    assert!(out.starts_with("call 1: exit 0, a fresh interpreter\ncall 2: exit 0\nsession "), "{out}");
    let verified = ok(&attest(&dir, &["verify", "--pub", "harness.key.pub", "s.jsonl"]));
    assert!(verified.starts_with("verified 4 lines signed by key "), "{verified}");
    assert!(
        verified.contains(": 0 single runs; session ") && verified.ends_with(", 2 calls, chain closed\n"),
        "{verified}"
    );
    let entry = ok(&attest(&dir, &["verify-entry", "--pub", "harness.key.pub", "--line", "3", "s.jsonl"]));
    assert!(entry.starts_with("line 3 closes session ") && entry.contains("after 2 calls"), "{entry}");

    // A refused run leaves the bundle byte for byte; so does a key the bundle is not signed by.
    std::fs::write(dir.join("vm.json"), r#"{"javascript":{"code":"1"},"minimumIsolation":"vm"}"#).expect("request");
    let o = attest(&dir, &["run", "--daemon", &url, "--key", "harness.key", "--bundle", "runs.jsonl", "vm.json"]);
    assert_eq!(o.status.code(), Some(69), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("refused before anything ran"), "{o:?}");
    let o = attest(&dir, &["run", "--daemon", &url, "--key", "other.key", "--bundle", "runs.jsonl", "req.json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).ends_with("nothing was run\n"), "{o:?}");
    assert_eq!(std::fs::read_to_string(&bundle).expect("bundle"), text, "the bundle is unchanged");
}

/// A small signing service holding an Ed25519 key: `GET /v1/key` returns its SPKI
/// DER, `POST /v1/sign` signs the body; both want `Authorization: Bearer <token>`.
/// Returns its base URL and the public key's PEM.
fn signing_service(token: &'static str) -> (String, String) {
    use plimsoll_keys::Signer as _;
    use std::io::{Read as _, Write as _};
    let key = plimsoll_keys::generate().expect("key");
    let public = plimsoll_keys::public_pem(&key.verifying_key()).expect("pem");
    let der = plimsoll_keys::public_der(&key.verifying_key());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                let Ok(n) = conn.read(&mut chunk) else { break None };
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(i + 4);
                }
            };
            let Some(head_end) = head_end else { continue };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buf.len() < head_end + length {
                let Ok(n) = conn.read(&mut chunk) else { break };
                if n == 0 {
                    break;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = &buf[head_end..(head_end + length).min(buf.len())];
            let authorized = head.lines().any(|l| l.trim() == format!("authorization: bearer {token}"));
            let (status, out) = match (authorized, head.split_whitespace().take(2).collect::<Vec<_>>().as_slice()) {
                (false, _) => ("401 Unauthorized", b"no credential".to_vec()),
                (true, ["get", "/v1/key"]) => ("200 OK", der.clone()),
                (true, ["post", "/v1/sign"]) => ("200 OK", key.sign(body).to_bytes().to_vec()),
                _ => ("404 Not Found", b"no such route".to_vec()),
            };
            let _ = conn.write_all(
                format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", out.len()).as_bytes(),
            );
            let _ = conn.write_all(&out);
        }
    });
    (url, public)
}

#[test]
fn a_signer_plugin_signs_with_a_key_only_the_signing_service_holds() {
    let dir = scratch("attest-signer");
    let built = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugins/out/kms-signer"));
    assert!(built.join("kms-signer.wasm").exists(), "no signer plugin in {} (run plugins/build.sh)", built.display());
    let plugin = dir.join("kms-signer");
    std::fs::create_dir_all(&plugin).expect("mkdir");
    for f in ["plugin.toml", "kms-signer.wasm"] {
        std::fs::copy(built.join(f), plugin.join(f)).expect("copy");
    }
    let o = host().arg("plugin").arg("keygen").arg(dir.join("vendor")).output().expect("keygen");
    assert!(o.status.success());
    let o = host().args(["plugin", "sign", "--key"]).arg(dir.join("vendor.key")).arg(&plugin).output().expect("sign");
    assert!(o.status.success(), "{o:?}");
    let (url, public) = signing_service("kms-token");
    std::fs::write(dir.join("service.pub"), public).expect("pub");

    let d = Daemon::start(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_TOKEN", TOKEN), ("SANDBOX_RATE_PER_MIN", "0")]);
    std::fs::write(dir.join("req.json"), r#"{"javascript":{"code":"console.log(6*7)"}}"#).expect("request");
    let endpoint = format!("kms={url}");
    let daemon = d.url();
    let run = |token: &str, extra: &[&str]| {
        let mut args = vec![
            "run",
            "--daemon",
            &daemon,
            "--bundle",
            "runs.jsonl",
            "--signer-plugin",
            "kms-signer",
            "--plugin-trusted-key",
            "vendor.pub",
            "--plugin-approve",
            "http,log",
        ];
        args.extend_from_slice(extra);
        args.push("req.json");
        host()
            .current_dir(&dir)
            .arg("attest")
            .args(&args)
            .env("PLIMSOLL_CALLER_TOKEN", TOKEN)
            .env("PLIMSOLL_SIGNER_TOKEN", token)
            .output()
            .expect("attest")
    };
    ok(&run("kms-token", &["--signer-endpoint", &endpoint]));
    let verified = ok(&attest(&dir, &["verify", "--pub", "service.pub", "runs.jsonl"]));
    assert!(verified.ends_with("whole to its last checkpoint: 1 single runs\n"), "{verified}");

    // Without the credential the service refuses; without the endpoint mapped the
    // plugin cannot reach it; either way nothing runs and the bundle is unchanged.
    let before = std::fs::read(dir.join("runs.jsonl")).expect("bundle");
    let o = run("wrong", &["--signer-endpoint", &endpoint]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("the signing service answered 401"), "{o:?}");
    let o = run("kms-token", &[]);
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("the signer plugin calls endpoint \"kms\": map it with --signer-endpoint kms=URL"),
        "{o:?}"
    );
    assert_eq!(std::fs::read(dir.join("runs.jsonl")).expect("bundle"), before);
}

#[test]
fn a_failed_append_cuts_the_bundle_back_and_keeps_the_signed_entry_aside() {
    let dir = scratch("attest-cut");
    let d = Daemon::start(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_TOKEN", TOKEN), ("SANDBOX_RATE_PER_MIN", "0")]);
    let url = d.url();
    ok(&attest(&dir, &["keygen", "--out", "harness.key"]));
    std::fs::write(dir.join("req.json"), r#"{"javascript":{"code":"console.log(6*7)"}}"#).expect("request");
    let args = ["run", "--daemon", &url, "--key", "harness.key", "--bundle", "runs.jsonl", "req.json"];
    ok(&attest(&dir, &args));
    let before = std::fs::read(dir.join("runs.jsonl")).expect("bundle");
    // A file-size limit a little past the bundle makes the next append fail midway
    // (EFBIG, with SIGXFSZ ignored so the harness sees the error).
    let blocks = before.len() / 512 + 3;
    let script = format!("trap '' XFSZ; ulimit -f {blocks}; exec \"$0\" attest \"$@\"");
    let o = std::process::Command::new("sh")
        .current_dir(&dir)
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_plimsoll-host"))
        .args(args)
        .env("PLIMSOLL_CALLER_TOKEN", TOKEN)
        .output()
        .expect("sh");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("(cut back to its last checkpoint)"), "{err}");
    assert!(err.contains("the signed entries are kept, unlinked, in "), "{err}");
    assert_eq!(std::fs::read(dir.join("runs.jsonl")).expect("bundle"), before, "cut back byte for byte");
    ok(&attest(&dir, &["verify", "--pub", "harness.key.pub", "runs.jsonl"]));
    let aside: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("runs.jsonl.unsealed-"))
        .collect();
    assert_eq!(aside.len(), 1);
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(aside[0].metadata().expect("meta").permissions().mode() & 0o777, 0o600);
}

/// Validates the BOM at `BOM` against the vendored CycloneDX 1.6 schema (draft-07,
/// format checks on), resolving its two references from the vendored folder only.
const SCHEMA_CHECK: &str = r#"
import json, os, pathlib, sys
from urllib.parse import urljoin
import jsonschema
from referencing import Registry
from referencing.jsonschema import DRAFT7
here = pathlib.Path(os.environ["SCHEMAS"])
def load(name):
    return json.loads((here / name).read_text())
schema = load("bom-1.6.SNAPSHOT.schema.json")
# The references resolve against the schema's own $id; nothing is fetched.
registry = Registry().with_resources(
    (urljoin(schema["$id"], name), DRAFT7.create_resource(load(name)))
    for name in ("spdx.SNAPSHOT.schema.json", "jsf-0.82.SNAPSHOT.schema.json")
)
validator = jsonschema.Draft7Validator(schema, registry=registry, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
errors = sorted(validator.iter_errors(json.loads(pathlib.Path(os.environ["BOM"]).read_text())), key=lambda e: list(e.path))
for e in errors[:5]:
    print("/".join(map(str, e.path)), e.message[:200])
sys.exit(1 if errors else 0)
"#;

fn schema_check(bom: &Path) -> Output {
    let schemas = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/cyclonedx-1.6");
    super::python::python_cmd()
        .arg("-c")
        .arg(SCHEMA_CHECK)
        .env("SCHEMAS", schemas)
        .env("BOM", bom)
        .output()
        .expect("python")
}

#[test]
fn signed_runs_become_a_bom_the_official_schema_accepts_and_check_refuses_any_change() {
    let dir = scratch("attest-bom");
    let d = wasm_daemon();
    let url = d.url();
    ok(&attest(&dir, &["keygen", "--out", "k"]));
    std::fs::write(dir.join("req.json"), r#"{"javascript":{"code":"console.log(6*7)"}}"#).expect("request");
    ok(&attest(&dir, &["run", "--daemon", &url, "--key", "k", "--bundle", "b.jsonl", "req.json"]));
    let calls =
        r#"[{"cell":{"language":"javascript","code":"let x = 41"}},{"cell":{"language":"javascript","code":"x + 1"}}]"#;
    std::fs::write(dir.join("calls.json"), calls).expect("calls");
    ok(&attest(&dir, &["session", "--daemon", &url, "--key", "k", "--bundle", "b.jsonl", "calls.json"]));

    ok(&attest(&dir, &["bom", "--pub", "k.pub", "b.jsonl", "-o", "bom.json"]));
    let bom: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("bom.json")).expect("bom")).expect("json");
    assert_eq!(bom["formulation"].as_array().map(Vec::len), Some(3), "one run and two session calls");
    let tiers: Vec<&str> = bom["formulation"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["workflows"][0]["properties"].as_array())
        .flat_map(|p| p.iter().filter(|x| x["name"] == "plimsoll:isolation").filter_map(|x| x["value"].as_str()))
        .collect();
    assert_eq!(tiers, ["process"; 3]);
    let o = schema_check(&dir.join("bom.json"));
    assert!(
        o.status.success(),
        "the schema refused the BOM:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let checked = ok(&attest(&dir, &["bom", "--pub", "k.pub", "--check", "b.jsonl", "bom.json"]));
    assert_eq!(checked, "bom.json is the bill of materials of b.jsonl: 3 signed runs\n");

    // The validator refuses what the schema does (so its pass above means something).
    let mut wrong = bom.clone();
    wrong["formulation"][0]["components"][0]["type"] = serde_json::json!("sandbox");
    std::fs::write(dir.join("wrong.json"), wrong.to_string()).expect("write");
    let o = schema_check(&dir.join("wrong.json"));
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stdout).contains("formulation/0/components/0/type"),
        "{o:?}"
    );

    // A BOM whose attached record was tampered with.
    let place = "/formulation/1/workflows/0/outputs/1/data/content";
    let mut tampered = bom.clone();
    let content = tampered.pointer_mut(place).expect("attached record");
    let flipped: String = content.as_str().expect("b64").chars().rev().collect();
    *content = serde_json::Value::String(flipped);
    std::fs::write(dir.join("tampered.json"), tampered.to_string()).expect("write");
    let o = attest(&dir, &["bom", "--pub", "k.pub", "--check", "b.jsonl", "tampered.json"]);
    assert_eq!(o.status.code(), Some(1));
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(
        said.contains(&format!("bill of materials: the BOM differs from what its bundle gives at {place}")),
        "{said}"
    );

    // A bundle that lost a line gives no BOM.
    let text = std::fs::read_to_string(dir.join("b.jsonl")).expect("bundle");
    let kept: Vec<&str> = text.lines().enumerate().filter(|(i, _)| *i != 1).map(|(_, l)| l).collect();
    std::fs::write(dir.join("cut.jsonl"), kept.join("\n") + "\n").expect("write");
    let o = attest(&dir, &["bom", "--pub", "k.pub", "cut.jsonl", "-o", "cut.json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("broken bundle chain"), "{o:?}");
    assert!(!dir.join("cut.json").exists(), "nothing is written from a bundle that does not verify");
}
