//! Startup: what the daemon refuses to start with, and the disabled default.

use super::raw;
use super::{Daemon, callers, refused_start, scratch};

#[test]
fn a_real_provider_without_callers_does_not_start() {
    let (code, err) = refused_start(&[("SANDBOX_PROVIDER", "wasm")]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("the wasm provider runs code, so callers must authenticate: set PLIMSOLL_CLIENTS_FILE"),
        "{err}"
    );
}

#[test]
fn the_startup_floor_is_checked_against_the_proven_tier() {
    let (code, err) =
        refused_start(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_INSECURE", "1"), ("SANDBOX_MIN_ISOLATION", "kernel")]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("SANDBOX_MIN_ISOLATION=kernel: the wasm provider proved process, so the daemon refuses to start"),
        "{err}"
    );
}

#[test]
fn hardened_mode_lists_every_violation() {
    let dir = scratch("hardened");
    let (file, _) = callers(&dir, &["ci"]);
    let file = file.display().to_string();
    let (code, err) = refused_start(&[
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_CLIENTS_FILE", &file),
        ("PLIMSOLL_HARDENED", "1"),
        ("PLIMSOLL_ADDR", "0.0.0.0:0"),
    ]);
    assert_eq!(code, Some(2));
    for want in [
        "PLIMSOLL_HARDENED=1 refuses to start:",
        "isolation: the wasm provider proved process; hardened mode needs vm or a verified kernel tier",
        "TLS: PLIMSOLL_ADDR=0.0.0.0:0 is not loopback",
        "envelope: set SANDBOX_MEMORY_MB explicitly",
        "admission: set SANDBOX_PER_KEY_CONCURRENT explicitly",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
}

#[test]
fn typos_and_malformed_values_fail_startup_naming_them() {
    let (code, err) = refused_start(&[("SANDBOX_MIN_ISOLATON", "vm")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown variable SANDBOX_MIN_ISOLATON"), "{err}");
    let (code, err) = refused_start(&[("SANDBOX_MAX_CONCURRENT", "lots")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("SANDBOX_MAX_CONCURRENT=\"lots\" is not a whole number"), "{err}");
    let dir = scratch("badclients");
    let f = dir.join("clients.json");
    std::fs::write(&f, r#"{"clients":[]}"#).expect("write");
    let (code, err) =
        refused_start(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_CLIENTS_FILE", &f.display().to_string())]);
    assert_eq!(code, Some(2));
    assert!(err.contains("is invalid: it lists no clients"), "{err}");
    let toml = dir.join("plimsoll.toml");
    std::fs::write(&toml, "[sandbox]\nprovider = \"wasm\"\nmax-concurent = 4\n").expect("write");
    let (code, err) = refused_start(&[("PLIMSOLL_CONFIG", &toml.display().to_string())]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unknown field `max-concurent`"), "{err}");
}

#[test]
fn the_default_daemon_runs_nothing_and_says_so() {
    let d = Daemon::start(&[]);
    let r = raw::post(&d.addr, "/plimsoll.v1.SandboxService/Describe", &[("Content-Type", "application/json")], b"{}");
    let v = r.json();
    assert_eq!(
        (v["sandbox"].as_str(), v["isolation"].as_str(), v["protocol"].as_u64()),
        (Some("disabled"), Some("none"), Some(4))
    );
    let r = raw::post(
        &d.addr,
        "/plimsoll.v1.SandboxService/Run",
        &[("Content-Type", "application/json")],
        br#"{"protocol":4,"javascript":{"code":"1"}}"#,
    );
    let (code, message, reason) = r.error();
    assert_eq!(
        (r.status, code.as_str(), reason.as_deref(), message.as_str()),
        (400, "failed_precondition", Some("unsupported"), "code execution sandbox is not configured")
    );
}

#[test]
fn a_shared_token_shorter_than_32_characters_is_refused() {
    let (code, err) = refused_start(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_TOKEN", "short")]);
    assert_eq!(code, Some(2));
    assert!(err.contains("PLIMSOLL_TOKEN is shorter than 32 characters"), "{err}");
    let token = "a-shared-token-that-is-long-enough-0123";
    let d = Daemon::start(&[("SANDBOX_PROVIDER", "wasm"), ("PLIMSOLL_TOKEN", token), ("SANDBOX_RATE_PER_MIN", "0")]);
    assert_eq!(raw::run(&d.addr, token, r#"{"protocol":4,"javascript":{"code":"1"}}"#).status, 200);
    assert_eq!(raw::run(&d.addr, "a-shared-token-that-is-long-enough-0124", r#"{"protocol":4}"#).status, 401);
}
