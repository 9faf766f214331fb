//! The vendor fakes (`tests/fakes`, the `plimsoll-fake` binary) as the remote
//! backends' suites start them: a fake per test, its `KEY=VALUE` settings read from
//! its stdout exactly as an operator would, stopped (and its containers removed)
//! when dropped.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::docker::{required, skipped};
use super::host;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// How many pods the Kubernetes fake's warm pool keeps.
pub(super) const KUBERNETES_POOL: usize = 2;

/// A running fake.
pub(super) struct Fake {
    child: Child,
    /// The settings it printed, in order.
    pub settings: Vec<(String, String)>,
    /// How many sandboxes it keeps with nothing running (a warm pool's).
    pub idle: usize,
}

impl Fake {
    /// The setting `key` printed.
    pub fn get(&self, key: &str) -> &str {
        self.settings.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str()).unwrap_or_default()
    }

    /// Starts the `vendor` fake, misbehaving as `mode` says; None (with a skipped
    /// line) when the binary, docker or the image is missing outside required mode.
    pub fn start(vendor: &str, mode: Option<&str>) -> Option<Fake> {
        Fake::start_with(vendor, mode, &[])
    }

    /// As [`Fake::start`], with `extra` flags (`--route NAME=ADDR`).
    pub fn start_with(vendor: &str, mode: Option<&str>, extra: &[&str]) -> Option<Fake> {
        let missing = |what: String| {
            assert!(!required(), "required mode: {what}");
            skipped(&what);
            None
        };
        let binary = binary();
        if !binary.exists() {
            return missing(format!("no {} (cargo build -p plimsoll-fakes)", binary.display()));
        }
        let image = match std::fs::read_to_string(Path::new(ROOT).join("images/out/sandbox.id")) {
            Ok(id) => id.trim().to_string(),
            Err(_) => return missing("no sandbox image (run images/build.sh)".into()),
        };
        if !Command::new("docker").arg("info").output().is_ok_and(|o| o.status.success()) {
            return missing("no docker engine answers".into());
        }
        let mut cmd = Command::new(&binary);
        cmd.args([vendor, "--listen", "127.0.0.1:0", "--image", &image]);
        if let Some(m) = mode {
            cmd.args(["--misbehave", m]);
        }
        cmd.args(extra);
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("start the fake");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut settings = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line == "READY=1" {
                    let _ = tx.send(settings);
                    return;
                }
                if let Some((k, v)) = line.split_once('=') {
                    settings.push((k.to_string(), v.to_string()));
                }
            }
        });
        let settings = rx.recv_timeout(Duration::from_secs(60)).expect("the fake printed its settings and READY=1");
        let idle = if vendor == "kubernetes" { KUBERNETES_POOL } else { 0 };
        Some(Fake { child, settings, idle })
    }

    /// How many containers back its sandboxes now.
    pub fn sandboxes(&self) -> usize {
        self.containers(&[])
    }

    /// How many of its sandboxes' containers are frozen (its sandboxes paused).
    pub fn paused(&self) -> usize {
        self.containers(&["--filter", "status=paused"])
    }

    fn containers(&self, filters: &[&str]) -> usize {
        let o = Command::new("docker")
            .args(["ps", "-q", "--filter", &format!("label=dev.plimsoll.fake={}", self.child.id())])
            .args(filters)
            .output()
            .expect("docker ps");
        String::from_utf8_lossy(&o.stdout).lines().count()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

/// The fakes' binary, built beside the test binaries by `cargo build -p plimsoll-fakes`.
fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    // target/<profile>/deps/e2e-<hash>
    exe.parent().and_then(Path::parent).map(|p| p.join("plimsoll-fake")).expect("target directory")
}

/// Copies the built plugin `name` into `dir/<name>`, signs it with a throwaway key
/// and returns its directory and the public key.
pub(super) fn signed(name: &str, dir: &Path) -> Option<(PathBuf, PathBuf)> {
    let plugin = copy_built(name, &dir.join(name))?;
    let key = sign(&plugin, dir);
    Some((plugin, key))
}

/// Copies the built plugin `name`'s component and manifest into `to`; None (with
/// a skipped line) when it is not built, outside required mode.
pub(super) fn copy_built(name: &str, to: &Path) -> Option<PathBuf> {
    let built = Path::new(ROOT).join("plugins/out").join(name);
    if !built.join(format!("{name}.wasm")).exists() {
        assert!(!required(), "required mode: no {name} plugin (run plugins/build.sh)");
        skipped(&format!("no {name} plugin in {} (run plugins/build.sh)", built.display()));
        return None;
    }
    std::fs::create_dir_all(to).expect("mkdir");
    for f in [format!("{name}.wasm"), "plugin.toml".into()] {
        std::fs::copy(built.join(&f), to.join(&f)).expect("copy the plugin");
    }
    Some(to.to_path_buf())
}

/// Signs the plugin directory `plugin` with a throwaway key made in `dir` (as
/// `plimsoll-host plugin keygen` and `plugin sign` do); the public key's path.
pub(super) fn sign(plugin: &Path, dir: &Path) -> PathBuf {
    let key = dir.join("vendor");
    if !key.with_extension("pub").exists() {
        let o = host().args(["plugin", "keygen"]).arg(&key).output().expect("keygen");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let o = host().args(["plugin", "sign", "--key"]).arg(key.with_extension("key")).arg(plugin).output().expect("sign");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    key.with_extension("pub")
}

/// Waits up to 30 s for `fake` to hold `n` sandboxes; how many it holds then.
pub(super) fn settle(fake: &Fake, n: usize) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while fake.sandboxes() != n && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    fake.sandboxes()
}

/// A daemon killed mid-run leaves its sandbox at the vendor; the next daemon of
/// its instance deletes it before it makes anything, and says so.
pub(super) fn a_killed_daemons_sandboxes_are_swept(fake: &Fake, env: &[(&str, &str)], token: &str) {
    let _ = killed_daemons_sandboxes_are_swept(fake, env, token, 1);
}

/// As [`a_killed_daemons_sandboxes_are_swept`], with `runs` runs in flight
/// when the daemon is killed (their callers' per-key cap must allow them);
/// the next daemon's log.
pub(super) fn killed_daemons_sandboxes_are_swept(
    fake: &Fake,
    env: &[(&str, &str)],
    token: &str,
    runs: usize,
) -> Vec<String> {
    use plimsoll_client::{Client, Options};
    let first = super::Daemon::start(env);
    assert_eq!(settle(fake, 0), 0, "the smoke test's sandbox");
    let url = first.url();
    let slow: Vec<_> = (0..runs)
        .map(|_| {
            let (url, token) = (url.clone(), token.to_string());
            std::thread::spawn(move || {
                let client = Client::new(&url, Some(token)).expect("client");
                let opts = Options { timeout_ms: 60_000, ..Options::default() };
                super::rt().block_on(client.run_javascript("setTimeout(() => console.log('done'), 50000)", &opts))
            })
        })
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while fake.sandboxes() < runs && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(fake.sandboxes(), runs, "the runs' sandboxes");
    std::thread::sleep(Duration::from_millis(500));
    let _ = first.kill();
    for run in slow {
        let err = run.join().expect("join").expect_err("the daemon was killed");
        assert!(err.may_have_run(), "{err}");
    }
    assert_eq!(fake.sandboxes(), runs, "the killed daemon's sandboxes outlive it");
    let next = super::Daemon::start(env);
    assert_eq!(settle(fake, 0), 0, "the next daemon of the instance deletes them");
    let log = next.log();
    let swept = log.iter().find(|l| l.contains("swept this instance's sandboxes")).expect("logged");
    assert!(swept.contains(&format!(r#""count":{runs}"#)), "{swept}");
    log
}

/// A daemon serving grants on a remote vendor's fake, and what its tests read.
pub(super) struct Guarded {
    pub fake: Fake,
    pub api: super::grants::DemoApi,
    pub daemon: super::Daemon,
    pub alice: String,
    /// The guard's address; none where the grants travel by relay.
    pub guard_addr: Option<String>,
}

/// Starts a daemon serving grants on the remote `vendor`'s fake (misbehaving as
/// `mode`), with `extra` settings. With `url_var`, through the host's guard,
/// its URL set there: the fake's egress proxy stands in for the vendor's,
/// routing `guard.<vendor>.test` to the guard's address; without, the way the
/// plugin names (openshell's relay). One caller, alice, may use the demo API's
/// profiles (`inventory`, and `inventory-session` and `inventory-per-call` in
/// sessions).
pub(super) fn guarded(
    vendor: &str,
    (url_var, mode): (Option<&str>, Option<&str>),
    token: &str,
    extra: &[(&str, &str)],
) -> Option<Guarded> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let guard = format!("guard.{vendor}.test");
    let route = format!("{guard}=127.0.0.1:{port}");
    let mut flags = if url_var.is_some() { vec!["--route", route.as_str()] } else { vec![] };
    // The agentsandbox plugin's vendor is a Kubernetes cluster, its pods under
    // runc, or under the handler `agentsandbox@HANDLER` names.
    let (fake_name, plugin) = match vendor.split_once('@').unwrap_or((vendor, "runc")) {
        ("agentsandbox", handler) => {
            flags.extend(["--runtime-class", handler]);
            ("kubernetes", "agentsandbox")
        }
        _ => (vendor, vendor),
    };
    let fake = Fake::start_with(fake_name, mode, &flags)?;
    // Tests of one vendor and mode run at once: each daemon gets a directory of its own.
    static DAEMONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = DAEMONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = super::scratch(&format!("{vendor}-guarded-grants-{}-{n}", mode.unwrap_or("faithful")));
    let (guard_addr, url) = (format!("127.0.0.1:{port}"), format!("https://{guard}/v1/guard"));
    let mut settings = extra.to_vec();
    if let Some(var) = url_var {
        settings.extend([(var, url.as_str()), ("PLIMSOLL_GUARD_ADDR", guard_addr.as_str())]);
    }
    let (env, alice, api) = for_grants(daemon_env(&fake, plugin, &dir, token, &settings)?, &dir);
    let daemon = super::Daemon::start(&pairs(&env));
    let guard_addr = url_var.map(|_| guard_addr);
    Some(Guarded { fake, api, daemon, alice, guard_addr })
}

/// `env` serving grants to one caller, alice, on a fresh demo API (its
/// profiles `inventory`, and `inventory-session` and `inventory-per-call` in
/// sessions): the settings, alice's token and the API.
pub(super) fn for_grants(
    env: Vec<(String, String)>,
    dir: &Path,
) -> (Vec<(String, String)>, String, super::grants::DemoApi) {
    let api = super::grants::DemoApi::start(&[]);
    let (clients, tokens) = super::callers(dir, &["alice"]);
    let profiles = super::grants::session_profiles(dir, &api.url);
    let mut env: Vec<(String, String)> = env.into_iter().filter(|(k, _)| k != "PLIMSOLL_TOKEN").collect();
    env.extend([
        ("PLIMSOLL_CLIENTS_FILE".to_string(), clients.display().to_string()),
        ("PLIMSOLL_GRANTS_FILE".to_string(), profiles.display().to_string()),
        ("DEMO_JWT_SECRET".to_string(), super::grants::JWT_SECRET.to_string()),
    ]);
    (env, tokens[0].clone(), api)
}

impl Guarded {
    /// Runs the Python `body` with the published client, `alice` its client of
    /// the daemon (`os`, `Client` and `PlimsollError` imported); its stdout.
    pub(super) fn as_alice(&self, body: &str) -> String {
        self.as_alice_with(body, &[])
    }

    /// As [`Guarded::as_alice`], with `env` in the script's environment too.
    pub(super) fn as_alice_with(&self, body: &str, env: &[(&str, &str)]) -> String {
        let script = format!(
            "import os\nfrom plimsoll_client import Client, PlimsollError\nalice = Client(os.environ[\"URL\"], token=os.environ[\"ALICE\"])\n{body}"
        );
        let url = self.daemon.url();
        let mut vars = vec![("URL", url.as_str()), ("ALICE", self.alice.as_str())];
        vars.extend_from_slice(env);
        super::python::run_script(&script, &vars)
    }
}

/// The original's way in a relayed backend's session: opened without a grant,
/// its snippet and project name one. The relay the host started at the open
/// serves the call's grant, described beside the client for that call and
/// removed after, so between calls no process holds a client (the socket
/// answers 503); a profile not allowed in sessions is refused.
pub(super) fn a_session_call_naming_its_grant_holds_it_for_that_call_alone(g: &Guarded, tier: &str) {
    let out = g.as_alice_with(
        r#"
with alice.open_session() as s:
    r = s.run_javascript('host.get("/items/*", [3]).then((i) => console.log(i.name))', grant_profile="inventory-per-call")
    assert (r.stdout, r.exit_code, r.isolation) == (b"washer\n", 0, os.environ["TIER"]), r
    r = s.run_javascript("console.log(typeof host)")
    assert r.stdout == b"undefined\n", r
    granted = """
import plimsoll_host as host
name = host.get("/items/*", [2])["name"]
open("seen.txt", "w").write(name)
print(name)
"""
    r = s.run_project({"main.py": granted}, ["python3 main.py"], ["seen.txt"], grant_profile="inventory-per-call")
    assert (r.outcome, r.steps[0].stdout) == ("completed", b"nut\n"), r
    assert [(a.path, a.content) for a in r.artifacts] == [("seen.txt", b"nut")], r.artifacts
    after = """
import os
print(open("seen.txt").read(), os.path.exists(os.path.join(os.environ["PYTHONPATH"], "grant.json")))
try:
    import plimsoll_host as host
    host.get("/items/*", [2])
    print("reached")
except PermissionError as e:
    print(type(e).__name__)
status, _, body = host._over_socket("GET", "/items/2", None)
print(status, body.decode())
"""
    r = s.run_project({"after.py": after}, ["python3 after.py"], [])
    print(r.steps[0].stdout.decode(), end="")
    try:
        s.run_javascript("1", grant_profile="inventory")
        raise AssertionError("a profile without allow_in_sessions ran")
    except PlimsollError as e:
        print("refused", e.not_dispatched)
print("ok")
"#,
        &[("TIER", tier)],
    );
    let want = "nut False\nPermissionError\n503 {\"error\":\"no granted call of this session is running\"}\nrefused permission\nok\n";
    assert_eq!(out, want);
    let seen = g.api.seen();
    assert_eq!(seen.iter().filter(|s| s.1.starts_with("/items") && s.2 == "alice").count(), 2, "{seen:?}");
}

/// How a remote vendor's granted runs reach the broker.
pub(super) enum Carried<'a> {
    /// Through the host's guard, its URL in this setting; `in_guest`: the
    /// guest holds its run's guard credential (no proxy sets it).
    Guard { url_var: &'a str, in_guest: bool },
    /// Through the host's relay, the guest holding its run's broker token; the
    /// relay's streams are logged at this path.
    Relay(&'a str),
}

/// The grant suite ([`super::conformance::grants`]) on the remote `vendor`'s
/// fake, its runs at `tier`, their grants `carried` as named. The way was
/// used, and no sandbox is left.
pub(super) fn a_granted_run_reaches_the_api(vendor: &str, tier: &str, carried: Carried<'_>, token: &str) {
    let url_var = match carried {
        Carried::Guard { url_var, .. } => Some(url_var),
        Carried::Relay(_) => None,
    };
    let Some(g) = guarded(vendor, (url_var, None), token, &[]) else { return };
    let in_env = match carried {
        Carried::Guard { in_guest: true, .. } => "PLIMSOLL_HOST_GUARD_TOKEN",
        Carried::Guard { in_guest: false, .. } => "none",
        Carried::Relay(_) => "PLIMSOLL_HOST_TOKEN",
    };
    let grants = super::conformance::Grants { tier, in_env, guard_addr: g.guard_addr.as_deref() };
    let suite = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        super::conformance::grants(&g.daemon, &g.alice, &g.api, &grants);
    }));
    let log = g.daemon.log();
    if let Err(failed) = suite {
        eprintln!("the daemon's log:\n{}", log.join("\n"));
        std::panic::resume_unwind(failed);
    }
    let used = match carried {
        Carried::Guard { .. } => log.iter().any(|l| l.contains(r#""msg":"the guard listens""#)),
        Carried::Relay(path) => {
            log.iter().any(|l| l.contains(path) && l.contains("received_bytes") && !l.contains(r#""received_bytes":0"#))
        }
    };
    assert!(used, "the grants' way was not used: {log:?}");
    assert_eq!(settle(&g.fake, g.fake.idle), g.fake.idle, "sandboxes left behind");
}

/// A daemon of the remote provider `name` with grant profiles refuses to start,
/// naming why: no grant can reach that provider's sandboxes yet.
pub(super) fn grant_profiles_stop_the_start(name: &str, env: &[(&str, &str)]) -> String {
    let dir = super::scratch(&format!("{name}-grant-profiles"));
    let profiles = dir.join("grants.json");
    std::fs::write(
        &profiles,
        r#"{"profiles": {"p": {"base_url": "https://api.example.com", "allowed_callers": ["a"]}}}"#,
    )
    .expect("write");
    let profiles = profiles.display().to_string();
    let mut env = env.to_vec();
    env.push(("PLIMSOLL_GRANTS_FILE", &profiles));
    let (code, err) = super::refused_start(&env);
    assert_ne!(code, Some(0), "{err}");
    let want = format!(
        "PLIMSOLL_GRANTS_FILE: profiles are configured but the {name} provider has no credential-safe way to carry a grant"
    );
    assert!(err.contains(&want), "{err}");
    err
}

/// The daemon's settings for the `vendor` fake `fake`: what it printed, the
/// vendor's plugin signed in `dir` and approved `http,log`, no rate limit, four
/// runs at once, `token` as the callers' token, then `extra`.
pub(super) fn daemon_env(
    fake: &Fake,
    vendor: &str,
    dir: &Path,
    token: &str,
    extra: &[(&str, &str)],
) -> Option<Vec<(String, String)>> {
    let (plugin, key) = signed(vendor, dir)?;
    let prefix = format!("SANDBOX_{}_PLUGIN", vendor.to_ascii_uppercase());
    let mut env = fake.settings.clone();
    env.extend([
        (prefix.clone(), plugin.display().to_string()),
        (format!("{prefix}_KEYS"), key.display().to_string()),
        (format!("{prefix}_APPROVE"), "http,log".to_string()),
        ("SANDBOX_RATE_PER_MIN".to_string(), "0".to_string()),
        ("SANDBOX_MAX_CONCURRENT".to_string(), "4".to_string()),
        ("PLIMSOLL_TOKEN".to_string(), token.to_string()),
    ]);
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Some(env)
}

/// Settings as the pairs `Daemon::start` takes.
/// `env` for the session suite: two callers (`ana`, `ben`, in a callers file in
/// `dir`) instead of the one token, two sessions at most, idle after 2 s, a 32 MiB
/// disk budget. Returns the settings and the callers' tokens.
pub(super) fn for_sessions(env: Vec<(String, String)>, dir: &Path) -> (Vec<(String, String)>, [String; 2]) {
    let (file, tokens) = super::callers(dir, &["ana", "ben"]);
    let mut env: Vec<(String, String)> = env.into_iter().filter(|(k, _)| k != "PLIMSOLL_TOKEN").collect();
    env.extend(
        [
            ("PLIMSOLL_CLIENTS_FILE", file.display().to_string()),
            ("SANDBOX_MAX_SESSIONS", "2".into()),
            ("SANDBOX_SESSION_IDLE", "2s".into()),
            ("SANDBOX_SESSION_DISK_MB", "32".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    (env, [tokens[0].clone(), tokens[1].clone()])
}

pub(super) fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Against `fake` in mode `undeletable`, served by `d` whose cap is `runs` + 1:
/// each of `runs` runs answers, and then the smoke test's sandbox and the runs'
/// are still at the vendor and fill the cap until a sweep deletes them, so the
/// next run is shed `capacity`, naming them, and makes nothing.
pub(super) fn undeletable_sandboxes_hold_capacity(fake: &Fake, d: &super::Daemon, token: &str, runs: usize) {
    use plimsoll_client::{Client, Options};
    let client = Client::new(&d.url(), Some(token.into())).expect("client");
    let rt = super::rt();
    for _ in 0..runs {
        let r = rt.block_on(client.run_javascript("console.log(6*7)", &Options::default())).expect("run");
        assert_eq!(r.javascript.expect("js").stdout, b"42\n");
    }
    let held = runs + 1;
    assert_eq!(settle(fake, held), held);
    let err = rt.block_on(client.run_javascript("console.log(1)", &Options::default())).expect_err("at capacity");
    assert_eq!(err.not_dispatched(), Some(plimsoll_core::Reason::Capacity), "{err}");
    let want = format!(
        "{held} sandbox(es) not yet deleted (a delete under way or failed) count against SANDBOX_MAX_CONCURRENT={held}"
    );
    assert!(err.to_string().contains(&want), "{err}");
    assert_eq!(fake.sandboxes(), held, "a shed run made a sandbox");
}

/// A live suite's daemon settings for `vendor`: each of `needed` from this
/// process's environment (without one the suite fails, never skips, saying
/// which and `how` to set them), each of `optional` that is set, then the
/// vendor's plugin signed in `dir`, no rate limit and `token` for callers.
pub(super) fn live_env(
    vendor: &str,
    needed: &[&str],
    optional: &[&str],
    how: &str,
    dir: &Path,
    token: &str,
) -> Vec<(String, String)> {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let missing: Vec<&str> = needed.iter().copied().filter(|k| var(k).is_empty()).collect();
    assert!(missing.is_empty(), "the live {vendor} suite was asked to run without {}: {how}", missing.join(", "));
    let (plugin, key) =
        signed(vendor, dir).unwrap_or_else(|| panic!("the {vendor} plugin is built (plugins/build.sh)"));
    let prefix = format!("SANDBOX_{}_PLUGIN", vendor.to_ascii_uppercase());
    let mut env: Vec<(String, String)> =
        needed.iter().chain(optional).map(|k| (k.to_string(), var(k))).filter(|(_, v)| !v.is_empty()).collect();
    env.extend([
        ("SANDBOX_PROVIDER".to_string(), vendor.to_string()),
        (prefix.clone(), plugin.display().to_string()),
        (format!("{prefix}_KEYS"), key.display().to_string()),
        (format!("{prefix}_APPROVE"), "http,log".to_string()),
        ("SANDBOX_RATE_PER_MIN".to_string(), "0".to_string()),
        ("PLIMSOLL_TOKEN".to_string(), token.to_string()),
    ]);
    env
}
