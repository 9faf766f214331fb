//! The dockercloud provider end to end: `plimsoll-host serve` with the signed
//! dockercloud plugin against the dockercloud fake (`plimsoll-fake dockercloud`,
//! Docker Hub's token exchange and the Sandboxes REST API backed by local
//! containers), using exactly the settings the fake prints. The conformance suite
//! at tier vm; every misbehaviour the fake can show, refused or survived by name;
//! the operator's token and every bearer and credential kept out of the log.

use plimsoll_client::{Client, Options};

use super::fakes::{Fake, daemon_env, pairs};
use super::{Daemon, refused_start, rt, scratch};

pub(super) const TOKEN: &str = "dockercloud-suite-token-dockercloud-suite-0123";

/// The daemon's settings for `fake` with the plugin signed in `dir`, and `extra`.
pub(super) fn env(fake: &Fake, dir: &std::path::Path, extra: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
    daemon_env(fake, "dockercloud", dir, TOKEN, extra)
}

#[test]
fn the_conformance_suite_passes_against_the_dockercloud_fake_at_tier_vm() {
    let Some(fake) = Fake::start("dockercloud", None) else { return };
    let dir = scratch("dockercloud");
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let d = Daemon::start(&pairs(&env));
    let environment = format!("dockercloud-image:{}", fake.get("SANDBOX_DOCKERCLOUD_IMAGE"));
    let backend = super::conformance::Backend {
        provider: "dockercloud",
        tier: "vm",
        environment: &environment,
        above: None,
        output_cap: 1 << 20,
    };
    super::conformance::suite(&d, TOKEN, &backend);
    // Every sandbox was deleted, on every path (the timed-out ones included).
    assert_eq!(super::fakes::settle(&fake, 0), 0, "sandboxes left behind");
    // The host traded the operator's token and held every sandbox's credential:
    // neither they nor a bearer is in the log, whose call lines name endpoints.
    let log = d.log();
    let pat = fake.get("DOCKER_SBX_TOKEN");
    assert!(
        log.iter().all(|l| !l.contains(pat) && !l.contains("sbxe_") && !l.contains("eyJ")),
        "a credential was logged"
    );
    assert!(log.iter().any(|l| l.contains(r#""msg":"plugin http call""#) && l.contains(r#""endpoint":"endpoint""#)));
}

/// The session suite against the dockercloud fake: the agent, reached one
/// exec per call with each request staged in a file (Docker's exec takes no
/// input), keeps the interpreters, sweeps between calls and walks the storage;
/// the sandbox and its policy are read back before every call and deleted
/// with the session.
#[test]
fn the_session_suite_passes_against_the_dockercloud_fake_at_tier_vm() {
    let Some(fake) = Fake::start("dockercloud", None) else { return };
    let dir = scratch("dockercloud-sessions");
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let (env, tokens) = super::fakes::for_sessions(env, &dir);
    let d = Daemon::start(&pairs(&env));
    let target = super::session_suite::Target::full(d.url(), tokens, "dockercloud", "vm");
    if let Err(failed) = std::panic::catch_unwind(|| super::session_suite::run(&target)) {
        eprintln!("the daemon's log:\n{}", d.log().join("\n"));
        std::panic::resume_unwind(failed);
    }
    assert_eq!(super::fakes::settle(&fake, 0), 0, "sandboxes left behind");
}

/// Starts a daemon against the fake misbehaving as `mode`; returns why it refused to start.
fn refused(mode: &str) -> Option<String> {
    let fake = Fake::start("dockercloud", Some(mode))?;
    let dir = scratch(&format!("dockercloud-{mode}"));
    let env = env(&fake, &dir, &[])?;
    let (code, err) = refused_start(&pairs(&env));
    assert_ne!(code, Some(0), "{mode}: the daemon started: {err}");
    assert!(!err.contains(fake.get("DOCKER_SBX_TOKEN")), "{mode}: the token is in the error: {err}");
    assert!(!err.contains("eyJ"), "{mode}: a bearer is in the error: {err}");
    Some(err)
}

#[test]
fn every_misbehaviour_of_the_dockercloud_fake_is_refused_by_name() {
    let cases = [
        ("redirect", "the token exchange at https://hub.dockercloud.test"),
        (
            "open-policy",
            "the sandbox's effective network policy is \\\"allowAll\\\", not denyAll (run `sbx --cloud policy init deny-all` once for the account)",
        ),
        ("allow-rule", "the sandbox's network policy allows api.example.com:443 (owner)"),
        ("weaker", "the sandbox has 8 CPUs and 16384 MiB, not the 1 and 2048 asked"),
        ("unpinned", "the sandbox's image is \\\"plimsoll-sandbox\\\", not the pinned"),
        ("foreign-endpoint", "where SANDBOX_DOCKERCLOUD_ENDPOINT_URL says endpoints are"),
        ("malformed", "creating a dockercloud sandbox: Docker's answer to the create is not JSON"),
        ("leaky", "upstream refused the request from bearer <redacted>"),
    ];
    for (mode, why) in cases {
        let Some(err) = refused(mode) else { return };
        assert!(err.contains(why), "{mode}: {err}");
        if mode == "redirect" {
            assert!(err.contains("answered with a redirect (307 Temporary Redirect), which is not followed"), "{err}");
        }
    }
}

#[test]
fn a_slow_dockercloud_management_plane_is_refused_at_the_hosts_time_limit() {
    let Some(err) = refused("slow") else { return };
    assert!(err.contains("endpoint \\\"api\\\" did not answer within 30000 ms"), "{err}");
}

#[test]
fn moved_etags_expired_credentials_and_cut_output_are_survived_and_said() {
    let rt = rt();
    for mode in ["stale-etag", "expired-credential", "incomplete"] {
        let Some(fake) = Fake::start("dockercloud", Some(mode)) else { return };
        let dir = scratch(&format!("dockercloud-{mode}"));
        let Some(env) = env(&fake, &dir, &[]) else { return };
        let d = Daemon::start(&pairs(&env));
        let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
        let code = "console.log('x'.repeat(100)); console.error('e')";
        let r = rt.block_on(client.run_javascript(code, &Options::default())).expect("run");
        let js = r.javascript.expect("js");
        if mode == "incomplete" {
            // Docker kept 64 bytes and said so: the result says its output was cut.
            assert!(js.stdout.len() <= 64 && js.stdout_truncated, "{mode}: {js:?}");
        } else {
            assert_eq!((js.exit_code, js.stdout.len(), js.stdout_truncated), (0, 101, false), "{mode}");
        }
        drop(d);
        assert_eq!(super::fakes::settle(&fake, 0), 0, "{mode}: sandboxes left behind");
    }
}

#[test]
fn dockercloud_sandboxes_that_will_not_delete_hold_capacity() {
    let Some(fake) = Fake::start("dockercloud", Some("undeletable")) else { return };
    let dir = scratch("dockercloud-undeletable");
    let cap = [("SANDBOX_MAX_CONCURRENT", "2"), ("SANDBOX_PER_KEY_CONCURRENT", "2")];
    let Some(env) = env(&fake, &dir, &cap) else { return };
    let d = Daemon::start(&pairs(&env));
    super::fakes::undeletable_sandboxes_hold_capacity(&fake, &d, TOKEN, 1);
    assert!(d.log().iter().any(|l| l.contains("deleting dockercloud sandbox") && l.contains("failed")));
}

#[test]
fn a_killed_daemons_dockercloud_sandboxes_are_swept_by_the_next_with_its_instance() {
    let Some(fake) = Fake::start("dockercloud", None) else { return };
    let dir = scratch("dockercloud-sweep");
    let Some(env) = env(&fake, &dir, &[("SANDBOX_DOCKERCLOUD_INSTANCE", "plimsoll@sweep-test")]) else { return };
    super::fakes::a_killed_daemons_sandboxes_are_swept(&fake, &pairs(&env), TOKEN);
}

/// A granted run on dockercloud: its sandbox is bound at create to a policy
/// that allows the host's guard and nothing else (read back from the policy's
/// `attached` layer), and the guest sends its own guard-only credential, since
/// Docker's proxy sets no header; the API's credential stays in the broker.
#[test]
fn a_granted_dockercloud_run_reaches_the_api_through_the_guard() {
    let carried = super::fakes::Carried::Guard { url_var: "SANDBOX_DOCKERCLOUD_GUARD_URL", in_guest: true };
    super::fakes::a_granted_run_reaches_the_api("dockercloud", "vm", carried, TOKEN);
}

/// A sandbox whose inline policy Docker did not bind (the effective policy
/// allows nothing from the `attached` layer) is refused before any code goes in,
/// and deleted.
#[test]
fn a_granted_run_whose_policy_is_not_bound_is_refused_before_any_code() {
    let guard = (Some("SANDBOX_DOCKERCLOUD_GUARD_URL"), Some("unbound"));
    let Some(g) = super::fakes::guarded("dockercloud", guard, TOKEN, &[]) else { return };
    let out = g.as_alice(
        r#"
try:
    alice.run_javascript("console.log(1)", grant_profile="inventory")
    raise AssertionError("ran")
except PlimsollError as e:
    assert e.not_dispatched == "isolation", (e, e.not_dispatched)
    print(e)
r = alice.run_javascript("console.log(1)")
assert r.stdout == b"1\n" and r.isolation == "vm", r
"#,
    );
    assert!(
        out.contains(
            "the dockercloud sandbox is not what was asked: the sandbox's network policy allows [], not exactly the guard's guard.dockercloud.test (attached)"
        ),
        "{out}"
    );
    assert!(g.api.seen().iter().all(|s| !s.1.starts_with("/items")), "the API was reached");
    assert_eq!(super::fakes::settle(&g.fake, 0), 0, "sandboxes left behind");
}

/// A session opened with a grant on dockercloud: its sandbox is created with
/// the guard its one way out, and every cell and snippet reaches the broker
/// (the shared session grant suite).
#[test]
fn a_dockercloud_session_opened_with_a_grant_reaches_the_broker_from_every_cell() {
    let sessions = [("SANDBOX_MAX_SESSIONS", "2")];
    let guard = (Some("SANDBOX_DOCKERCLOUD_GUARD_URL"), None);
    let Some(g) = super::fakes::guarded("dockercloud", guard, TOKEN, &sessions) else { return };
    super::grants::session_grants_on(g.daemon, &g.api, &g.alice, super::grants::Reach::Guard);
    assert_eq!(super::fakes::settle(&g.fake, 0), 0, "the sessions' sandboxes were deleted");
}

/// Docker binds a sandbox's network policy at its create: a call of a session
/// opened without a grant cannot open the guard for itself, and is refused by
/// name with nothing run; the session goes on.
#[test]
fn a_dockercloud_session_call_naming_its_own_grant_is_refused_by_name() {
    let sessions = [("SANDBOX_MAX_SESSIONS", "2")];
    let guard = (Some("SANDBOX_DOCKERCLOUD_GUARD_URL"), None);
    let Some(g) = super::fakes::guarded("dockercloud", guard, TOKEN, &sessions) else { return };
    let out = g.as_alice(
        r#"
with alice.open_session() as s:
    for call in (lambda: s.run_javascript("console.log(1)", grant_profile="inventory-per-call"),
                 lambda: s.run_project({"a.py": "print(1)"}, ["python3 a.py"], [], grant_profile="inventory-per-call")):
        try:
            call()
            raise AssertionError("ran")
        except PlimsollError as e:
            print(e.not_dispatched, e)
    print(s.run_javascript("console.log(2)").stdout.decode().strip())
"#,
    );
    let why = "Docker binds a dockercloud sandbox's network policy at its create, so a session's call cannot open the guard for itself; open the session with the grant";
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[..2].iter().all(|l| l.starts_with("unsupported ") && l.contains(why)), "{out}");
    assert_eq!(lines[2], "2");
    assert!(g.api.seen().iter().all(|s| !s.1.starts_with("/items")), "the API was reached");
}

#[test]
fn a_dockercloud_daemon_with_grant_profiles_and_no_guard_refuses_to_start() {
    let Some(fake) = Fake::start("dockercloud", None) else { return };
    let Some(env) = env(&fake, &scratch("dockercloud-grants"), &[]) else { return };
    let err = super::fakes::grant_profiles_stop_the_start("dockercloud", &pairs(&env));
    assert!(
        err.contains("until it has the host's guard (SANDBOX_DOCKERCLOUD_GUARD_URL, PLIMSOLL_GUARD_ADDR)"),
        "{err}"
    );
}

/// The live suite: the same conformance suite against Docker Cloud Sandboxes. It
/// runs only when asked (`cargo test -p plimsoll-host --test e2e -- --ignored
/// dockercloud::live`) and then fails, never skips, without the account's
/// settings. It is billed to that account.
#[test]
#[ignore = "live: runs against Docker Cloud Sandboxes and is billed; needs DOCKER_SBX_USERNAME, DOCKER_SBX_TOKEN, SANDBOX_DOCKERCLOUD_IMAGE and SANDBOX_DOCKERCLOUD_ENDPOINT_URL"]
fn live_conformance_against_dockercloud() {
    let needed =
        ["DOCKER_SBX_USERNAME", "DOCKER_SBX_TOKEN", "SANDBOX_DOCKERCLOUD_IMAGE", "SANDBOX_DOCKERCLOUD_ENDPOINT_URL"];
    let how = "set them for the account to bill (the image pinned by digest, with node and python3; the endpoint URL with {target} where a sandbox's uid goes)";
    let env = super::fakes::live_env("dockercloud", &needed, &[], how, &scratch("dockercloud-live"), TOKEN);
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let d = Daemon::start(&pairs(&env));
    let environment = format!("dockercloud-image:{}", var("SANDBOX_DOCKERCLOUD_IMAGE"));
    let backend = super::conformance::Backend {
        provider: "dockercloud",
        tier: "vm",
        environment: &environment,
        above: None,
        output_cap: 1 << 20,
    };
    super::conformance::suite(&d, TOKEN, &backend);
}
