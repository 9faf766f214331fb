//! The agentsandbox provider end to end: `plimsoll-host serve` with the signed
//! agentsandbox plugin against the fake Kubernetes API server (`plimsoll-fake
//! kubernetes`: agent-sandbox's warm pool, claims and templates, pods backed by
//! local containers under the runtime class's runtime, sandboxd in each), using
//! exactly the settings the fake prints. The conformance suite at the kernel
//! tier (runsc) and the container tier (runc), read from the runtime class;
//! every misbehaviour refused before code runs; the API's faults survived or
//! refused by name; the credentials kept out of the log.

use plimsoll_client::{Client, Error, Options, SessionOptions};
use plimsoll_core::wire::SessionEnd;
use plimsoll_core::{Floor, Reason};

use super::fakes::{Fake, daemon_env, for_sessions, pairs};
use super::session_suite::{self, Target};
use super::{Daemon, refused_start, rt, scratch};

pub(super) const TOKEN: &str = "agentsandbox-suite-token-agentsandbox-0123";

/// The warm pool's size the fake keeps.
const POOL: usize = super::fakes::KUBERNETES_POOL;

/// The fake serving runtime class handler `class`, misbehaving as `mode`.
fn start(class: &str, mode: Option<&str>) -> Option<Fake> {
    Fake::start_with("kubernetes", mode, &["--runtime-class", class])
}

/// The daemon's settings for `fake` with the plugin signed in `dir`, and `extra`.
fn env(fake: &Fake, dir: &std::path::Path, extra: &[(&str, &str)]) -> Option<Vec<(String, String)>> {
    daemon_env(fake, "agentsandbox", dir, TOKEN, extra)
}

/// The fake's API at `path`, as the operator's `curl` with the printed settings
/// sees it: the status and body, sent again while it answers 429 (mode `throttle`).
pub(super) fn api(fake: &Fake, method: &str, path: &str) -> (u16, String) {
    for _ in 0..5 {
        let (code, body) = send(fake, method, path, None);
        if code != 429 {
            return (code, body);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    send(fake, method, path, None)
}

/// One request to the fake's API, with a JSON `body`.
fn send(fake: &Fake, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let url = fake.get("SANDBOX_AGENTSANDBOX_API_URL");
    let authority = url.trim_start_matches("https://");
    let (host, port) = authority.rsplit_once(':').expect("host:port");
    let o = std::process::Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "-X", method, "--cacert", fake.get("SANDBOX_AGENTSANDBOX_CA_FILE")])
        .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
        .args(["-H", &format!("Authorization: Bearer {}", fake.get("SANDBOX_AGENTSANDBOX_TOKEN"))])
        .args(body.map(|b| ["-H", "Content-Type: application/json", "--data-binary", b]).into_iter().flatten())
        .arg(format!("{url}{path}"))
        .output()
        .expect("curl");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// How many claims the fake holds.
fn claims(fake: &Fake) -> usize {
    let (code, body) = api(fake, "GET", "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/plimsoll/sandboxclaims");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("a list");
    v["items"].as_array().map_or(0, Vec::len)
}

fn conformance(class: &str, tier: &str, above: Floor) {
    let Some(fake) = start(class, None) else { return };
    let dir = scratch(&format!("agentsandbox-{class}"));
    let Some(env) = env(&fake, &dir, &[("SANDBOX_MAX_SESSIONS", "2")]) else { return };
    let d = Daemon::start(&pairs(&env));
    let backend = super::conformance::Backend {
        provider: "agentsandbox",
        tier,
        environment: "agentsandbox-image:",
        above: Some(above),
        output_cap: 1 << 20,
    };
    super::conformance::suite(&d, TOKEN, &backend);
    // The vm floor is refused before anything is claimed.
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let vm = Options { floor: Some(Floor::Vm), ..Options::default() };
    let err = rt().block_on(client.run_javascript("console.log(1)", &vm)).expect_err("below vm");
    assert_eq!(err.not_dispatched(), Some(Reason::Isolation), "{err}");
    // Every claim was deleted in the foreground, and the pool refilled.
    assert_eq!(claims(&fake), 0, "claims left behind");
    assert_eq!(super::fakes::settle(&fake, POOL), POOL, "pods left behind");
    // Neither the service account's token nor sandboxd's is in the log; the pod
    // proxy was reached through the `pods` endpoint.
    let log = d.log();
    for secret in [fake.get("SANDBOX_AGENTSANDBOX_TOKEN"), fake.get("SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN")] {
        assert!(log.iter().all(|l| !l.contains(secret)), "a credential was logged");
    }
    assert!(log.iter().any(|l| l.contains(r#""msg":"plugin http call""#) && l.contains(r#""endpoint":"pods""#)));
}

#[test]
fn the_conformance_suite_passes_against_the_kubernetes_fake_at_kernel_under_runsc() {
    conformance("runsc", "kernel", Floor::Vm);
}

#[test]
fn the_conformance_suite_passes_against_the_kubernetes_fake_at_container_under_runc() {
    conformance("runc", "container", Floor::Kernel);
}

/// Starts a daemon against the fake serving `class` and misbehaving as `mode`;
/// returns why it refused to start.
fn refused(class: &str, mode: Option<&str>) -> Option<String> {
    let fake = start(class, mode)?;
    let dir = scratch(&format!("agentsandbox-{class}-{}", mode.unwrap_or("none")));
    let env = env(&fake, &dir, &[])?;
    let (code, err) = refused_start(&pairs(&env));
    assert_ne!(code, Some(0), "{mode:?}: the daemon started: {err}");
    for secret in [fake.get("SANDBOX_AGENTSANDBOX_TOKEN"), fake.get("SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN")] {
        assert!(!err.contains(secret), "{mode:?}: a credential is in the error: {err}");
    }
    // The claim the smoke test made is gone, whatever refused it (behind a
    // redirect nothing could be claimed, nor listed).
    if mode != Some("redirect") {
        assert_eq!(claims(&fake), 0, "{mode:?}: claims left behind");
    }
    Some(err)
}

#[test]
fn every_misbehaviour_of_the_kubernetes_fake_is_refused_before_code_runs() {
    let cases = [
        ("redirect", "endpoint \\\"api\\\" answered with a redirect (307), which is not followed"),
        (
            "weaker",
            "differs from template plimsoll: its spec.automountServiceAccountToken is true, the template's false",
        ),
        (
            "token-mounted",
            "differs from template plimsoll: its spec.automountServiceAccountToken is true, the template's false",
        ),
        (
            "writable-root",
            "its spec.containers[0].securityContext.readOnlyRootFilesystem is false, the template's true",
        ),
        ("extra-container", "its spec.containers has 2 entries, the template's 1"),
        ("extra-field", "its spec.futureIsolation is \\\"off\\\", which the template does not set"),
        ("exec-probe", "its spec.containers[0].livenessProbe is {\\\"exec\\\":{\\\"command\\\":[\\\"true\\\"]},"),
        ("host-namespace", "its spec.hostPID is true, which the template does not set"),
        ("permissive-policy", "network policy plimsoll-network-policy allows the pod egress ([{}])"),
        ("remapped", "the runtime class says runc, but the sandbox's seccomp mode is"),
        ("unpinned", "its spec.containers[0].image is \\\"plimsoll-sandbox:latest\\\""),
        ("foreign-hash", "its spec.containers[0].args[4] is"),
        ("capabilities", "its spec.containers[0].securityContext.capabilities.add has 3 entries, the template's 2"),
        ("disk-volume", "its spec.volumes[0].emptyDir.medium is missing, the template's is \\\"Memory\\\""),
        (
            "no-judge",
            "smoke test, the judge: the pod's image has no plimsoll-judge with its components in /opt/plimsoll/sims, which module tables run",
        ),
    ];
    for (mode, why) in cases {
        let Some(err) = refused("runc", Some(mode)) else { return };
        assert!(err.contains(why), "{mode}: {err}");
    }
    // A handler that is no tier, and a Kata class whose pods share the node's kernel.
    let Some(err) = refused("crun", None) else { return };
    assert!(
        err.contains("runtime class plimsoll-sandbox: the runtime class's handler \\\"crun\\\" is not one plimsoll reads a tier from"),
        "{err}"
    );
    let Some(err) = refused("kata", None) else { return };
    assert!(err.contains("the runtime class says kata, but the sandbox's boot ID"), "{err}");
    assert!(err.contains("is its node's: no VM of its own"), "{err}");
    let Some(err) = refused("runsc", Some("remapped")) else { return };
    assert!(err.contains("the runtime class says runsc, but the kernel log's first line is"), "{err}");
}

#[test]
fn conflicts_expired_watches_throttling_and_lost_answers_are_survived() {
    let rt = rt();
    for mode in ["conflict", "gone", "throttle", "flaky"] {
        let Some(fake) = start("runc", Some(mode)) else { return };
        let dir = scratch(&format!("agentsandbox-{mode}"));
        let Some(env) = env(&fake, &dir, &[]) else { return };
        let d = Daemon::start(&pairs(&env));
        let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
        let r = rt.block_on(client.run_javascript("console.log(6*7)", &Options::default())).expect(mode);
        assert_eq!(r.javascript.expect("js").stdout, b"42\n", "{mode}");
        drop(d);
        assert_eq!(claims(&fake), 0, "{mode}: claims left behind");
    }
}

#[test]
fn a_pod_that_never_becomes_ready_is_refused_capacity_and_its_claim_deleted() {
    let Some(fake) = start("runc", Some("never-ready")) else { return };
    let dir = scratch("agentsandbox-never-ready");
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let d = Daemon::start(&pairs(&env));
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let err = rt().block_on(client.run_javascript("console.log(1)", &Options::default())).expect_err("never ready");
    assert_eq!(err.not_dispatched(), Some(Reason::Capacity), "{err}");
    assert!(err.to_string().contains("no sandbox of warm pool plimsoll was ready within 20 s"), "{err}");
    assert!(err.to_string().contains("the claim is deleted"), "{err}");
    assert_eq!(claims(&fake), 0, "the claim was left behind");
}

/// A claimed pod that fails (Ready False, `PodFailed`, as agent-sandbox's
/// controller forwards it to the claim) is refused `environment` as soon as the
/// claim says so, not waited out as a pod that is still starting.
#[test]
fn a_pod_that_fails_is_refused_environment_at_once_and_its_claim_deleted() {
    let Some(fake) = start("runc", Some("pod-fails")) else { return };
    let dir = scratch("agentsandbox-pod-fails");
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let d = Daemon::start(&pairs(&env));
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let asked = std::time::Instant::now();
    let err = rt().block_on(client.run_javascript("console.log(1)", &Options::default())).expect_err("a failed pod");
    let took = asked.elapsed();
    assert_eq!(err.not_dispatched(), Some(Reason::Environment), "{err}");
    assert!(err.to_string().contains("failed: PodFailed: Pod failed"), "{err}");
    assert!(!err.to_string().contains("within 20 s"), "waited out as a pod still starting: {err}");
    eprintln!("a failed pod refused in {} ms", took.as_millis());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while claims(&fake) != 0 {
        assert!(std::time::Instant::now() < deadline, "the failed pod's claim was left behind");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn a_runtime_class_that_disappears_refuses_the_next_run_before_anything_is_claimed() {
    let Some(fake) = start("runc", None) else { return };
    let dir = scratch("agentsandbox-class-gone");
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let d = Daemon::start(&pairs(&env));
    let (code, body) = api(&fake, "DELETE", "/apis/node.k8s.io/v1/runtimeclasses/plimsoll-sandbox");
    assert_eq!(code, 200, "{body}");
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let err = rt().block_on(client.run_javascript("console.log(1)", &Options::default())).expect_err("no class");
    assert_eq!(err.not_dispatched(), Some(Reason::Isolation), "{err}");
    assert!(
        err.to_string().contains("runtime class plimsoll-sandbox, which template plimsoll names, is not there"),
        "{err}"
    );
    assert_eq!(claims(&fake), 0, "a claim was made");
}

#[test]
fn a_template_changed_after_startup_refuses_runs_until_the_daemon_proves_it_again() {
    let Some(fake) = start("runc", None) else { return };
    let dir = scratch("agentsandbox-template-changed");
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let d = Daemon::start(&pairs(&env));
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    let r = rt.block_on(client.run_javascript("console.log(6*7)", &Options::default())).expect("before the change");
    assert_eq!(r.javascript.expect("js").stdout, b"42\n");
    // The operator edits the template: still within the walls, but not what was proved.
    let path = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/plimsoll/sandboxtemplates/plimsoll";
    let (code, body) = api(&fake, "GET", path);
    assert_eq!(code, 200, "{body}");
    let mut template: serde_json::Value = serde_json::from_str(&body).expect("the template");
    template["spec"]["podTemplate"]["spec"]["terminationGracePeriodSeconds"] = serde_json::json!(1);
    let (code, body) = send(&fake, "PUT", path, Some(&template.to_string()));
    assert_eq!(code, 200, "{body}");
    let err = rt.block_on(client.run_javascript("console.log(1)", &Options::default())).expect_err("changed");
    assert_eq!(err.not_dispatched(), Some(Reason::Isolation), "{err}");
    assert!(
        err.to_string()
            .contains("template plimsoll's pod spec changed since startup; restart the daemon to prove the new one"),
        "{err}"
    );
    assert_eq!(claims(&fake), 0, "a claim was made");
}

/// The session suite against the fake serving `class`: each session holds one
/// claimed pod, whose agent keeps the interpreters, sweeps between calls and
/// walks the pod's `/tmp`; every claim goes with its session.
fn sessions(class: &str, tier: &'static str) {
    let Some(fake) = start(class, None) else { return };
    let dir = scratch(&format!("agentsandbox-sessions-{class}"));
    let Some(env) = env(&fake, &dir, &[]) else { return };
    let (env, tokens) = for_sessions(env, &dir);
    let d = Daemon::start(&pairs(&env));
    let target = Target::full(d.url(), tokens, "agentsandbox", tier);
    if let Err(failed) = std::panic::catch_unwind(|| session_suite::run(&target)) {
        eprintln!("the daemon's log:\n{}", d.log().join("\n"));
        std::panic::resume_unwind(failed);
    }
    assert_eq!(claims(&fake), 0, "claims left behind");
    assert_eq!(super::fakes::settle(&fake, POOL), POOL, "pods left behind");
}

#[test]
fn the_session_suite_passes_against_the_kubernetes_fake_at_kernel_under_runsc() {
    sessions("runsc", "kernel");
}

#[test]
fn the_session_suite_passes_against_the_kubernetes_fake_at_container_under_runc() {
    sessions("runc", "container");
}

/// A session's pod deleted under it ends the session as `sandbox_changed`
/// before the next call runs; a daemon killed with a session open leaves its
/// claim, which the next daemon of its instance deletes before it serves.
#[test]
fn a_session_whose_pod_goes_ends_and_a_killed_daemons_claim_is_swept() {
    let Some(fake) = start("runc", None) else { return };
    let dir = scratch("agentsandbox-session-ends");
    let Some(env) = env(&fake, &dir, &[("SANDBOX_MAX_SESSIONS", "2")]) else { return };
    let d = Daemon::start(&pairs(&env));
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    let s = rt.block_on(client.open_session(&SessionOptions::default())).expect("open");
    rt.block_on(s.run_cell("javascript", "globalThis.kept = 1", &[], &Options::default())).expect("cell");
    assert_eq!(claims(&fake), 1, "the session holds one claim");
    let claimed = claimed_pod(&fake).expect("the session's pod");
    let (code, body) = api(&fake, "DELETE", &format!("/api/v1/namespaces/plimsoll/pods/{claimed}"));
    assert_eq!(code, 200, "{body}");
    match rt.block_on(s.run_cell("javascript", "kept", &[], &Options::default())) {
        Err(Error::SessionEnded { end, detail, .. }) => {
            assert_eq!(end, SessionEnd::SandboxChanged, "{detail}");
            assert!(detail.starts_with(&format!("the session's pod {claimed} ")), "{detail}");
        }
        other => panic!("expected the session to have ended: {other:?}"),
    }
    drop(s);
    // A session open when the daemon is killed.
    let s = rt.block_on(client.open_session(&SessionOptions::default())).expect("open");
    rt.block_on(s.run_cell("python", "x = 1", &[], &Options::default())).expect("cell");
    let _ = d.kill();
    assert_eq!(claims(&fake), 1, "the killed daemon's claim outlives it");
    let next = Daemon::start(&pairs(&env));
    assert_eq!(claims(&fake), 0, "the next daemon of the instance deleted it before serving");
    let log = next.log();
    let swept = log.iter().find(|l| l.contains("swept this instance's sandboxes")).expect("logged");
    assert!(swept.contains(r#""count":1"#), "{swept}");
}

/// The pod a claim of this fake holds: the Sandbox's pod-name annotation.
fn claimed_pod(fake: &Fake) -> Option<String> {
    let (_, body) = api(fake, "GET", "/apis/agents.x-k8s.io/v1beta1/namespaces/plimsoll/sandboxes");
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["items"].as_array()?.iter().find_map(|sb| {
        let claimed = sb["metadata"]["ownerReferences"].as_array()?.iter().any(|r| r["kind"] == "SandboxClaim");
        let name =
            sb["metadata"]["annotations"]["agents.x-k8s.io/pod-name"].as_str().or(sb["metadata"]["name"].as_str());
        claimed.then(|| name.map(str::to_string)).flatten()
    })
}

/// A granted run on agentsandbox, whose pod has no way out: the plugin starts
/// the relay inside, and the host dials in through the API server's pod proxy
/// to sandboxd's `/v1/relay` (an HTTP/1.1 upgrade) and joins each connection to
/// the run's broker socket. The guest holds the run's broker token and nothing
/// of the API's.
#[test]
fn a_granted_agentsandbox_run_reaches_the_api_through_the_pod_proxy_under_runc() {
    let carried = super::fakes::Carried::Relay("/v1/relay");
    super::fakes::a_granted_run_reaches_the_api("agentsandbox", "container", carried, TOKEN);
}

/// As under runc, with the pods under gVisor: sandboxd joins the upgraded
/// connection to the relay on the sandbox kernel's loopback.
#[test]
fn a_granted_agentsandbox_run_reaches_the_api_through_the_pod_proxy_under_runsc() {
    let carried = super::fakes::Carried::Relay("/v1/relay");
    super::fakes::a_granted_run_reaches_the_api("agentsandbox@runsc", "kernel", carried, TOKEN);
}

/// A pod proxy that drops upgrades (a load balancer in front of the API
/// server that does not pass them): the granted run ends before its code runs,
/// the daemon's log names sandboxd's 426, and the claim is deleted; a run
/// without a grant still runs. The plugin had already run the relay in the
/// pod, so the host does not take its refusal as "nothing ran": the caller
/// gets no result and no not-dispatched reason.
#[test]
fn a_granted_run_whose_upgrade_is_stripped_ends_before_its_code_and_says_why() {
    let Some(g) = super::fakes::guarded("agentsandbox", (None, Some("upgrade-stripped")), TOKEN, &[]) else { return };
    let out = g.as_alice(
        r#"
try:
    alice.run_javascript("console.log('ran')", grant_profile="inventory")
    raise AssertionError("ran")
except PlimsollError as e:
    print(type(e).__name__, e.not_dispatched)
print(alice.run_javascript("console.log(2)").stdout.decode().strip())
"#,
    );
    assert_eq!(out, "PlimsollError None\n2\n");
    let log = g.daemon.log();
    let why = "opening the grant's relay: endpoint \\\"pods\\\" answered HTTP 426 Upgrade Required, not 101 Switching Protocols: {\\\"error\\\":\\\"/v1/relay is an HTTP/1.1 upgrade to plimsoll-relay (Connection: Upgrade)\\\"}";
    assert!(log.iter().any(|l| l.contains(why)), "{why}\n{log:?}");
    assert_eq!(claims(&g.fake), 0, "the claim was deleted");
    assert!(g.api.seen().is_empty(), "the API was never called");
}

/// A session opened without a grant on agentsandbox, whose calls name one:
/// each holds it for that call alone (the shared relayed-session case).
#[test]
fn an_agentsandbox_session_call_naming_its_grant_reaches_the_broker_for_that_call_alone() {
    let sessions = [("SANDBOX_MAX_SESSIONS", "2")];
    let Some(g) = super::fakes::guarded("agentsandbox", (None, None), TOKEN, &sessions) else { return };
    super::fakes::a_session_call_naming_its_grant_holds_it_for_that_call_alone(&g, "container");
    assert_eq!(claims(&g.fake), 0, "the session's claim was deleted");
}

/// A session opened with a grant on agentsandbox: the relay is started in the
/// pod before the session's agent, and every cell and snippet reaches the
/// broker (the shared session grant suite).
#[test]
fn an_agentsandbox_session_opened_with_a_grant_reaches_the_broker_from_every_cell() {
    let sessions = [("SANDBOX_MAX_SESSIONS", "2")];
    let Some(g) = super::fakes::guarded("agentsandbox", (None, None), TOKEN, &sessions) else { return };
    super::grants::session_grants_on(g.daemon, &g.api, &g.alice, super::grants::Reach::Relay);
    assert_eq!(claims(&g.fake), 0, "the sessions' claims were deleted");
}

/// The live suite: the conformance suite against a real cluster with
/// agent-sandbox installed. It runs only when asked (`cargo test -p plimsoll-host
/// --test e2e -- --ignored agentsandbox::live`) and then fails, never skips,
/// without its settings. The API server's URL, CA and credential come from
/// `KUBECONFIG`'s current context (read with kubectl).
#[test]
#[ignore = "live: needs a cluster with agent-sandbox; KUBECONFIG, SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN, _NAMESPACE, _WARM_POOL and PLIMSOLL_LIVE_AGENTSANDBOX_TIER"]
fn live_conformance_against_agentsandbox() {
    let needed = [
        "KUBECONFIG",
        "SANDBOX_AGENTSANDBOX_SANDBOXD_TOKEN",
        "SANDBOX_AGENTSANDBOX_NAMESPACE",
        "SANDBOX_AGENTSANDBOX_WARM_POOL",
        "PLIMSOLL_LIVE_AGENTSANDBOX_TIER",
    ];
    let how = "set them for the cluster to run in (docs/providers/agentsandbox.md: the template, pool, runtime class \
               and network policy it needs; the tier the runtime class's handler stands for)";
    let dir = scratch("agentsandbox-live");
    let mut env = super::fakes::live_env("agentsandbox", &needed, &[], how, &dir, TOKEN);
    env.retain(|(k, _)| k != "KUBECONFIG" && k != "PLIMSOLL_LIVE_AGENTSANDBOX_TIER");
    let o = std::process::Command::new("kubectl")
        .args(["config", "view", "--minify", "--raw", "-o", "json"])
        .output()
        .expect("kubectl, to read KUBECONFIG");
    assert!(o.status.success(), "kubectl config view: {}", String::from_utf8_lossy(&o.stderr));
    let kc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("kubeconfig as JSON");
    let server = kc["clusters"][0]["cluster"]["server"].as_str().expect("the current cluster's server");
    let ca = kc["clusters"][0]["cluster"]["certificate-authority-data"].as_str().expect("the cluster's CA data");
    let ca_pem = base64_decode(ca);
    std::fs::write(dir.join("ca.pem"), ca_pem).expect("write the CA");
    let user = &kc["users"][0]["user"];
    env.push(("SANDBOX_AGENTSANDBOX_API_URL".into(), server.into()));
    env.push(("SANDBOX_AGENTSANDBOX_CA_FILE".into(), dir.join("ca.pem").display().to_string()));
    match (user["token"].as_str(), user["client-certificate-data"].as_str(), user["client-key-data"].as_str()) {
        (Some(token), _, _) => env.push(("SANDBOX_AGENTSANDBOX_TOKEN".into(), token.into())),
        (None, Some(cert), Some(key)) => {
            std::fs::write(dir.join("client.pem"), base64_decode(cert)).expect("write the certificate");
            std::fs::write(dir.join("client.key"), base64_decode(key)).expect("write the key");
            env.push(("SANDBOX_AGENTSANDBOX_CERT_FILE".into(), dir.join("client.pem").display().to_string()));
            env.push(("SANDBOX_AGENTSANDBOX_KEY_FILE".into(), dir.join("client.key").display().to_string()));
        }
        _ => panic!("KUBECONFIG's current user has neither a token nor client certificate data"),
    }
    let tier = std::env::var("PLIMSOLL_LIVE_AGENTSANDBOX_TIER").unwrap_or_default();
    let above = match tier.as_str() {
        "container" => Some(Floor::Kernel),
        "kernel" => Some(Floor::Vm),
        "vm" => None,
        other => panic!("PLIMSOLL_LIVE_AGENTSANDBOX_TIER={other:?}: use container, kernel or vm"),
    };
    let d = Daemon::start(&pairs(&env));
    let backend = super::conformance::Backend {
        provider: "agentsandbox",
        tier: &tier,
        environment: "agentsandbox-image:",
        above,
        output_cap: 1 << 20,
    };
    super::conformance::suite(&d, TOKEN, &backend);
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text.trim()).expect("base64 in the kubeconfig")
}

/// A session needs to size itself from the template: one without a memory
/// limit, or whose `/tmp` holds less than a session needs, is refused
/// `environment` at the open, by name, and its claim deleted; runs go on.
#[test]
fn a_session_on_a_template_it_cannot_size_is_refused_by_name() {
    let written = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/kubernetes/sandboxes/template-runsc.yaml"
    ))
    .expect("the deploy template");
    let cases = [
        (
            written.replace("              memory: 512Mi\n", ""),
            "template plimsoll-runsc sets no memory limit on its container, which a session's project runner needs",
        ),
        (
            written.replace("sizeLimit: 128Mi", "sizeLimit: 16Mi"),
            "template plimsoll-runsc's /tmp holds 16 MiB; a session needs at least 24 MiB",
        ),
    ];
    for (i, (template, why)) in cases.into_iter().enumerate() {
        let dir = scratch(&format!("agentsandbox-unsized-{i}"));
        let path = dir.join("template.yaml");
        std::fs::write(&path, template).expect("write");
        let path = path.display().to_string();
        let Some(fake) = Fake::start_with("kubernetes", None, &["--runtime-class", "runc", "--template", &path]) else {
            return;
        };
        let Some(env) = env(&fake, &dir, &[("SANDBOX_MAX_SESSIONS", "2")]) else { return };
        let d = Daemon::start(&pairs(&env));
        let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
        let rt = rt();
        let err = rt.block_on(client.open_session(&SessionOptions::default())).expect_err("refused");
        assert_eq!(err.not_dispatched(), Some(Reason::Environment), "{err}");
        assert!(err.to_string().contains(why), "{err}");
        assert_eq!(claims(&fake), 0, "the claim was deleted");
        let r = rt.block_on(client.run_javascript("console.log(1)", &Options::default())).expect("a run goes on");
        assert_eq!(r.javascript.expect("js").stdout, b"1\n");
    }
}
