//! Writes the seed corpora from the project's own test material: the record
//! vectors, the golden bundle, the plugins' manifests (signed over the fuzz
//! component by the fuzz key), and grant routes. Run from anywhere:
//! `cargo run --example seeds --manifest-path tests/fuzz/Cargo.toml`. Seeds are
//! named `seed-<name>`, so a rerun replaces them and leaves what fuzzing found.

use std::path::{Path, PathBuf};

use plimsoll_keys::SigningKey;
use plimsoll_plugin_trust::signature;

/// As `fuzz_targets/plugin_manifest.rs`.
const COMPONENT: &[u8] = b"\0asm fuzz component";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
    std::fs::create_dir_all(&dir).expect("corpus directory");
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("seed");
}

fn main() {
    // Requests, results and records: the digest vectors' inputs, each as the wire sends it.
    let vectors: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("host/core/testdata/records.json")).expect("vectors"))
            .expect("json");
    for (i, v) in vectors["vectors"].as_array().expect("vectors").iter().enumerate() {
        if v["input"].is_object() {
            let bytes = serde_json::to_vec(&v["input"]).expect("json");
            for target in ["wire_decode", "request_validation", "record_roundtrip"] {
                write(target, &format!("vector-{i:02}"), &bytes);
            }
        }
    }
    let session_call = br#"{"protocol":4,"sessionId":"s-1","cell":{"language":"python","code":"x = 1"}}"#;
    let open = br#"{"protocol":4,"minimumIsolation":"container","grantProfile":"inventory","idleTimeoutMs":60000}"#;
    for target in ["wire_decode", "request_validation"] {
        write(target, "session-call", session_call);
        write(target, "open-session", open);
    }

    // The golden bundle, whole, line by line, and each envelope on its own.
    let golden = std::fs::read(root().join("host/attest/testdata/golden.jsonl")).expect("golden");
    write("bundle_verify", "golden", &golden);
    for (i, line) in golden.split_inclusive(|b| *b == b'\n').enumerate() {
        write("bundle_verify", &format!("line-{i:02}"), line);
        let entry: serde_json::Value = serde_json::from_slice(line).expect("a line");
        for part in ["envelope", "link"] {
            if entry[part].is_object() {
                write("bundle_verify", &format!("{part}-{i:02}"), &serde_json::to_vec(&entry[part]).expect("json"));
            }
        }
    }

    // Each plugin's manifest, then a NUL, then its signature by the fuzz key.
    let key = SigningKey::from_bytes(&[7u8; 32]);
    for plugin in ["docker", "e2b", "dockercloud", "openshell", "agentsandbox", "inventory-broker", "kms-signer"] {
        let manifest = std::fs::read(root().join("plugins").join(plugin).join("plugin.toml")).expect("manifest");
        let sig = signature::sign(&key, COMPONENT, &manifest).expect("sign");
        let mut seed = manifest.clone();
        seed.push(0);
        seed.extend_from_slice(sig.as_bytes());
        write("plugin_manifest", plugin, &seed);
    }

    // Routes and calls: granted, refused for each rule, and wildcards.
    let routes: &[(&str, &str)] = &[
        ("concrete", "GET /items\nGET /items"),
        ("wildcard", "GET /items/*\nGET /items/3"),
        ("nested", "PATCH /v1/*/items/*\nPATCH /v1/a/items/b"),
        ("colon", "GET /items/*\nGET /items/a:b"),
        ("dots", "GET /items/*\nGET /items/.."),
        ("escape", "GET /items/*\nGET /items/%2e%2e"),
        ("query", "GET /items\nGET /items?x=1"),
        ("method", "get /items\nHEAD /items"),
        ("root", "DELETE /\nDELETE /"),
        ("trailing", "GET /items/*\nGET /items/3/"),
    ];
    for (name, text) in routes {
        write("grant_route", name, text.as_bytes());
    }

    // The MCP HTTPS mode: registration, authorization query, token form, Accept.
    let registration = r#"{"client_name":"c","redirect_uris":["http://127.0.0.1:9/callback","https://a.example/cb"]}"#;
    let challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
    let oauth: &[(&str, String)] = &[
        (
            "authorize",
            format!(
                "{registration}\nresponse_type=code&client_id=CLIENT&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcallback&\
                 code_challenge={challenge}&code_challenge_method=S256&state=s\ngrant_type=authorization_code&client_id=CLIENT&code=c&\
                 code_verifier=dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk\napplication/json, text/event-stream"
            ),
        ),
        ("refresh", format!("{registration}\n\ngrant_type=refresh_token&client_id=CLIENT&refresh_token=r\n*/*")),
        // A faulty request to another port of a loopback redirect URI, once approved: sent back there.
        (
            "port",
            format!(
                "{registration}\nresponse_type=token&client_id=CLIENT&redirect_uri=http%3A%2F%2F127.0.0.1%3A10%2Fcallback&state=s\n\n*/*"
            ),
        ),
        ("rpc", r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_string()),
        ("fragment", r#"{"redirect_uris":["https://a.example/cb#x","http://evil.example/"]}"#.to_string()),
    ];
    for (name, text) in oauth {
        write("mcp_oauth", name, text.as_bytes());
    }
}
