//! The docker provider end to end: `plimsoll-host serve` with the signed docker
//! plugin against the local engine, the same conformance suite under runc
//! (container tier) and runsc (kernel tier), plugin loading refusals, and bad input.
//!
//! Needs dockerd, the sandbox image (`images/build.sh`) and the built plugin
//! (`plugins/build.sh`). Outside required mode a missing piece skips these tests,
//! each printing a `SKIPPED` line to stderr that the harness does not swallow; with
//! `CI=true` (or `PLIMSOLL_DOCKER_TESTS=required`) it fails them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use plimsoll_client::{Client, Options};
use plimsoll_core::wire::ProjectOutcome;
use plimsoll_core::{Floor, Reason};

use super::raw;
use super::{Daemon, host, refused_start, rt, scratch};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
pub(super) const TOKEN: &str = "docker-suite-token-docker-suite-token-0123";

pub(super) fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("PLIMSOLL_DOCKER_TESTS").is_ok_and(|v| v == "required")
}

/// What the suite needs: the image ID and the unsigned plugin directory.
pub(super) struct Fixture {
    image: String,
    plugin: PathBuf,
}

impl Fixture {
    /// The sandbox image's ID.
    pub(super) fn image(&self) -> &str {
        &self.image
    }
}

/// Says that the calling test skipped `what` and why, on the process's own stderr:
/// the test harness captures `eprintln!` and shows it only for a failing test, so a
/// skipped test that passes would otherwise say nothing in any mode.
pub(super) fn skipped(what: &str) {
    use std::io::Write as _;
    let current = std::thread::current();
    // The harness names each test's thread after the test.
    let test = current.name().unwrap_or("a docker test");
    let _ = writeln!(
        std::io::stderr().lock(),
        "\nSKIPPED {test}: {what} (set CI=true or PLIMSOLL_DOCKER_TESTS=required to fail instead)"
    );
}

/// The fixture, or None (with a [`skipped`] line) when something is missing outside
/// required mode.
pub(super) fn fixture(runtime: &str) -> Option<Fixture> {
    let missing = |what: String| {
        assert!(!required(), "required mode: {what}");
        skipped(&what);
        None
    };
    let info =
        Command::new("docker").args(["info", "--format", "{{range $k, $v := .Runtimes}}{{$k}} {{end}}"]).output();
    let runtimes = match info {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => return missing("no docker engine answers (images/install-runtimes.sh starts one)".into()),
    };
    if !runtimes.split_whitespace().any(|r| r == runtime) {
        return missing(format!("docker does not list runtime {runtime} (it lists {runtimes:?})"));
    }
    let id_file = Path::new(ROOT).join("images/out/sandbox.id");
    let image = match std::fs::read_to_string(&id_file) {
        Ok(s) => s.trim().to_string(),
        Err(_) => return missing(format!("no sandbox image ({} is missing; run images/build.sh)", id_file.display())),
    };
    let plugin = Path::new(ROOT).join("plugins/out/docker");
    if !plugin.join("docker.wasm").exists() {
        return missing(format!("no docker plugin in {} (run plugins/build.sh)", plugin.display()));
    }
    Some(Fixture { image, plugin })
}

/// Copies the built plugin into `dir/plugin`, makes a throwaway key pair with
/// `plimsoll-host plugin keygen` and signs the copy with it.
pub(super) fn signed_plugin(fx: &Fixture, dir: &Path) -> (PathBuf, PathBuf) {
    signed_plugin_with(fx, dir, |manifest| manifest)
}

/// [`signed_plugin`], with the manifest changed by `edit` before signing.
fn signed_plugin_with(fx: &Fixture, dir: &Path, edit: impl FnOnce(String) -> String) -> (PathBuf, PathBuf) {
    let plugin = dir.join("plugin");
    std::fs::create_dir_all(&plugin).expect("mkdir");
    std::fs::copy(fx.plugin.join("docker.wasm"), plugin.join("docker.wasm")).expect("copy plugin");
    let manifest = std::fs::read_to_string(fx.plugin.join("plugin.toml")).expect("manifest");
    std::fs::write(plugin.join("plugin.toml"), edit(manifest)).expect("write manifest");
    let key = dir.join("ci");
    let o = host().args(["plugin", "keygen"]).arg(&key).output().expect("keygen");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o =
        host().args(["plugin", "sign", "--key"]).arg(key.with_extension("key")).arg(&plugin).output().expect("sign");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (plugin, key.with_extension("pub"))
}

pub(super) fn docker_env(fx: &Fixture, plugin: &Path, key: &Path, runtime: &str) -> Vec<(String, String)> {
    [
        ("SANDBOX_PROVIDER", "docker".to_string()),
        ("SANDBOX_DOCKER_IMAGE", fx.image.clone()),
        ("SANDBOX_DOCKER_RUNTIME", runtime.to_string()),
        ("SANDBOX_DOCKER_PLUGIN", plugin.display().to_string()),
        ("SANDBOX_DOCKER_PLUGIN_KEYS", key.display().to_string()),
        ("SANDBOX_DOCKER_PLUGIN_APPROVE", "containers,log".to_string()),
        ("SANDBOX_RATE_PER_MIN", "0".to_string()),
        ("SANDBOX_MAX_CONCURRENT", "4".to_string()),
        ("PLIMSOLL_TOKEN", TOKEN.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

pub(super) fn start(env: &[(String, String)]) -> Daemon {
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Daemon::start(&pairs)
}

fn opts(timeout_ms: i32) -> Options {
    Options { timeout_ms, ..Options::default() }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The daemon's PID, from its owner label's value in the containers it creates.
pub(super) fn owner(d: &Daemon) -> String {
    format!("plimsoll-host-{}", d.pid())
}

/// Container IDs created by `owner` between `since` and now.
pub(super) fn created_since(owner: &str, since: u64) -> Vec<String> {
    let until = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() + 1).unwrap_or(0);
    let o = Command::new("docker")
        .args(["events", "--since", &since.to_string(), "--until", &until.to_string()])
        .args(["--filter", "type=container", "--filter", "event=create"])
        .args(["--filter", &format!("label=dev.plimsoll.owner={owner}"), "--format", "{{.ID}}"])
        .output()
        .expect("docker events");
    text(&o.stdout).lines().map(str::to_string).collect()
}

/// The first whole second after everything created so far (engine events have
/// one-second resolution).
pub(super) fn now() -> u64 {
    std::thread::sleep(Duration::from_millis(1100));
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The escape probes, run as the guest: each must fail, and the run must report.
const ESCAPES: &str = r#"
import ctypes, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
r = {}
def attempt(name, f):
    try:
        f()
        r[name] = "succeeded"
    except Exception as e:
        r[name] = "failed: " + type(e).__name__
def write_root():
    open("/escape", "w").write("x")
def connect_addr():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(("172.17.0.1", 2375))
def connect_name():
    socket.getaddrinfo("plimsoll-escape-probe.invalid", 80)
def setuid_root():
    os.setuid(0)
def mount():
    os.makedirs("/tmp/m", exist_ok=True)
    if libc.mount(b"none", b"/tmp/m", b"tmpfs", 0, None) != 0:
        raise OSError(ctypes.get_errno(), "mount")
def ptrace():
    if libc.ptrace(16, 1, None, None) != 0:  # PTRACE_ATTACH to pid 1
        raise OSError(ctypes.get_errno(), "ptrace")
def raise_capability():
    # PR_CAP_AMBIENT_RAISE CAP_NET_RAW
    if libc.prctl(47, 2, 13, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl")
for n, f in [("write_root", write_root), ("connect_addr", connect_addr), ("connect_name", connect_name),
             ("setuid_root", setuid_root), ("mount", mount), ("ptrace", ptrace),
             ("raise_capability", raise_capability)]:
    attempt(n, f)
r["interfaces"] = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else ["?"]
try:
    env = open("/proc/1/environ", "rb").read().decode(errors="replace")
except OSError as e:
    env = "unreadable"
r["host_env_visible"] = "PLIMSOLL_TOKEN" in env or "HOME=/root" in env
print(json.dumps(r, sort_keys=True))
"#;

/// The conformance suite against one running daemon, then docker's own walls.
fn suite(d: &Daemon, runtime: &str) {
    let tier = if runtime == "runsc" { "kernel" } else { "container" };
    let backend = super::conformance::Backend {
        provider: "docker",
        tier,
        environment: "docker-image:sha256:",
        above: Some(Floor::Vm),
        output_cap: 1 << 20,
    };
    super::conformance::suite(d, TOKEN, &backend);
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();

    // Escape probes fail, and the run still reports.
    let r = rt.block_on(client.run_project(&[("escape.py", ESCAPES)], &["python3 escape.py"], &[], &opts(60_000)));
    let p = r.expect("escape probes").project.expect("project");
    assert_eq!(p.outcome, ProjectOutcome::Completed, "{}", p.outcome_detail);
    let seen: serde_json::Value = serde_json::from_slice(&p.steps[0].stdout).expect("probe json");
    for probe in ["write_root", "connect_addr", "connect_name", "setuid_root", "mount", "ptrace", "raise_capability"] {
        assert!(seen[probe].as_str().is_some_and(|s| s.starts_with("failed")), "{runtime}: {probe}: {seen}");
    }
    assert_eq!(seen["interfaces"], serde_json::json!(["lo"]), "{seen}");
    assert_eq!(seen["host_env_visible"], false, "{seen}");

    // A fork bomb, a memory bomb and a disk filler are bounded and reported.
    let bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n";
    let r = rt.block_on(client.run_project(&[("bomb.py", bomb)], &["python3 bomb.py"], &[], &opts(5000)));
    assert!(r.expect("fork bomb reports").project.is_some());
    // The memory bomb is a step result under every runtime: the runner ends the
    // step below the sandbox's limit (gVisor would end the whole sandbox, runner and
    // report with it), and says so. Alone, and as processes that left its group.
    let mem = "a = []\nwhile True:\n    a.append(bytearray(16 << 20))\n";
    // Under runc the kernel's OOM killer may win the race at the limit itself; the
    // runner reads that from the cgroup's count and says so instead.
    let (ours, past) =
        ("its processes and files held ", " MiB a step may use (the sandbox's limit is 256 MiB); plimsoll ended it\n");
    let kernel = "the kernel's OOM killer ended it at the sandbox's limit of 256 MiB\n";
    let oom = "\nplimsoll: the step ran out of memory: ";
    for step in ["python3 mem.py", "for i in 1 2 3; do setsid python3 mem.py & done; wait"] {
        let r = rt.block_on(client.run_project(&[("mem.py", mem)], &[step, "echo after"], &[], &opts(30_000)));
        let p = r.expect("memory bomb reports").project.expect("project");
        // Under runsc several processes allocating at once can outrun the wall: each
        // costs gVisor host memory that the sandbox's own measure does not show. Then
        // the sandbox itself ends, and the run says so (SPECIFICATION 75).
        if runtime == "runsc" && step.starts_with("for") && p.steps.is_empty() {
            assert_eq!(p.outcome, ProjectOutcome::ProtocolError, "{}", p.outcome_detail);
            assert!(p.outcome_detail.contains("after running out of memory"), "{}", p.outcome_detail);
            continue;
        }
        assert_eq!(p.outcome, ProjectOutcome::Completed, "{runtime}: {step}: {}", p.outcome_detail);
        assert_eq!(p.steps.len(), 1, "{runtime}: {step}: the run stops at the failed step");
        let err = text(&p.steps[0].stderr);
        assert_eq!(p.steps[0].exit_code, 137, "{runtime}: {step}: {err}");
        let said = err.split_once(oom).map(|(_, why)| why).unwrap_or_default();
        let by_runner = said.starts_with(ours) && said.ends_with(past);
        assert!(by_runner || (runtime == "runc" && said == kernel), "{runtime}: {step}: {err}");
    }
    let fill = "dd if=/dev/zero of=/work/fill bs=1M count=4096";
    let r = rt.block_on(client.run_project(&[], &[fill], &[], &opts(30_000)));
    let p = r.expect("disk filler reports").project.expect("project");
    assert!(text(&p.steps[0].stderr).contains("No space left"), "{}", text(&p.steps[0].stderr));

    // The host is fine afterwards.
    let r = rt.block_on(client.run_javascript("console.log('still here')", &opts(0))).expect("after bombs");
    assert_eq!(text(&r.javascript.expect("js").stdout), "still here\n");

    // A vm floor is refused before any container exists.
    let since = now();
    let vm = Options { floor: Some(Floor::Vm), ..Options::default() };
    let err = rt.block_on(client.run_javascript("console.log(1)", &vm)).expect_err("vm floor");
    assert_eq!(err.not_dispatched(), Some(Reason::Isolation), "{err}");
    assert_eq!(created_since(&owner(d), since), Vec::<String>::new(), "a container was created for a refused run");

    // A container removed from outside mid-run: may have run, never a result. It
    // is removed once the code has started (it leaves a file), not before: a
    // container removed before its interpreter said it was waiting ran nothing,
    // and is refused as such.
    let url = d.url();
    let who = owner(d);
    let killer = std::thread::spawn(move || {
        for _ in 0..600 {
            let o = Command::new("docker")
                .args(["ps", "-q", "--filter", &format!("label=dev.plimsoll.owner={who}")])
                .output()
                .expect("docker ps");
            for id in text(&o.stdout).lines() {
                let started = Command::new("docker").args(["exec", id, "test", "-f", "/tmp/started"]).output();
                if started.is_ok_and(|o| o.status.success()) {
                    let _ = Command::new("docker").args(["rm", "-f", id]).output();
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    });
    let slow = Client::new(&url, Some(TOKEN.into())).expect("client");
    let code = "require('fs').writeFileSync('/tmp/started', '1'); setTimeout(() => console.log('done'), 20000)";
    let err = rt.block_on(slow.run_javascript(code, &opts(60_000)));
    assert!(killer.join().expect("killer"), "the running container was never seen");
    let err = err.expect_err("a removed container gives no result");
    assert!(err.may_have_run(), "{err}");
}

/// The conformance suite against a fresh daemon under `runtime`.
fn conformance(runtime: &str) {
    let Some(fx) = fixture(runtime) else { return };
    let dir = scratch(&format!("docker-{runtime}"));
    let (plugin, key) = signed_plugin(&fx, &dir);
    let d = start(&docker_env(&fx, &plugin, &key, runtime));
    suite(&d, runtime);
}

#[test]
fn conformance_under_runc() {
    conformance("runc");
}

#[test]
fn conformance_under_runsc() {
    conformance("runsc");
}

/// Expects `serve` to refuse to start with `needle` in its error.
fn refuses(env: &[(String, String)], needle: &str) {
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, err) = refused_start(&pairs);
    assert_ne!(code, Some(0));
    assert!(err.contains(needle), "expected {needle:?} in: {err}");
}

#[test]
fn unsigned_tampered_and_unapproved_plugins_do_not_load() {
    let Some(fx) = fixture("runc") else { return };
    let dir = scratch("docker-plugins");
    let (plugin, key) = signed_plugin(&fx, &dir);
    let env = docker_env(&fx, &plugin, &key, "runc");
    let with = |k: &str, v: &str| {
        let mut e: Vec<(String, String)> = env.iter().filter(|(n, _)| n != k).cloned().collect();
        e.push((k.into(), v.into()));
        e
    };

    // Unapproved: the operator approves only log.
    refuses(
        &with("SANDBOX_DOCKER_PLUGIN_APPROVE", "log"),
        "requests the containers capability, which the operator has not approved",
    );

    // Untrusted: another key.
    let other = dir.join("other");
    let o = host().args(["plugin", "keygen"]).arg(&other).output().expect("keygen");
    assert!(o.status.success());
    let other_pub = other.with_extension("pub").display().to_string();
    refuses(&with("SANDBOX_DOCKER_PLUGIN_KEYS", &other_pub), "which is not among the trusted keys");

    // Tampered: one byte of the component changed after signing.
    let tampered = dir.join("tampered");
    std::fs::create_dir_all(&tampered).expect("mkdir");
    for f in ["plugin.toml", "docker.wasm", "plugin.sig"] {
        std::fs::copy(plugin.join(f), tampered.join(f)).expect("copy");
    }
    let mut wasm = std::fs::read(tampered.join("docker.wasm")).expect("read");
    let last = wasm.len() - 1;
    wasm[last] ^= 1;
    std::fs::write(tampered.join("docker.wasm"), wasm).expect("write");
    refuses(
        &with("SANDBOX_DOCKER_PLUGIN", &tampered.display().to_string()),
        "does not match this component and manifest",
    );

    // Unsigned.
    std::fs::remove_file(tampered.join("plugin.sig")).expect("rm");
    refuses(&with("SANDBOX_DOCKER_PLUGIN", &tampered.display().to_string()), "unsigned (no plugin.sig)");

    // A reference the engine cannot resolve to an image ID. (A tag that resolves is
    // accepted: startup pins the ID it names then, and only that ID ever runs.)
    // The engine's 404 is the reason; the words between vary with its version.
    let missing = with("SANDBOX_DOCKER_IMAGE", "no-such-image:latest");
    let pairs: Vec<(&str, &str)> = missing.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, err) = refused_start(&pairs);
    assert_ne!(code, Some(0));
    let (what, why) = (
        "building the docker provider: SANDBOX_DOCKER_IMAGE=\"no-such-image:latest\": docker engine: \
         Docker responded with status code 404: ",
        "No such image: no-such-image:latest (build it with images/build.sh and use the ID it prints)",
    );
    assert!(err.contains(what) && err.contains(why), "{err}");
    // A remote engine.
    let mut remote = env.clone();
    remote.push(("DOCKER_HOST".into(), "tcp://127.0.0.1:2375".into()));
    let pairs: Vec<(&str, &str)> = remote.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (_, err) = refused_start(&pairs);
    assert!(err.contains("plimsoll drives only the local engine"), "{err}");
}

#[test]
fn bad_project_input_is_refused_as_request_before_anything_runs() {
    let Some(fx) = fixture("runc") else { return };
    let dir = scratch("docker-bad-input");
    let (plugin, key) = signed_plugin(&fx, &dir);
    let d = start(&docker_env(&fx, &plugin, &key, "runc"));
    let file = |p: &str, c: String| serde_json::json!({"path": p, "content": c});
    let project = |files: Vec<serde_json::Value>, steps: Vec<String>| {
        serde_json::json!({"protocol": 4, "project": {"files": files, "steps": steps}}).to_string()
    };
    let since = now();
    let cases: Vec<(&str, String, &str)> = vec![
        ("a path with ..", project(vec![file("../escape", "x".into())], vec!["true".into()]), "\"..\""),
        ("an absolute path", project(vec![file("/etc/x", "x".into())], vec!["true".into()]), "\"/etc/x\""),
        ("a duplicate path", project(vec![file("a", "1".into()), file("a", "2".into())], vec!["true".into()]), "\"a\""),
        (
            "201 files",
            project((0..201).map(|i| file(&format!("f{i}"), "x".into())).collect(), vec!["true".into()]),
            "201",
        ),
        ("4 MiB + 1 of content", project(vec![file("big", "x".repeat((4 << 20) + 1))], vec!["true".into()]), "4194304"),
        ("a step of 16 KiB + 1", project(vec![], vec!["x".repeat((16 << 10) + 1)]), "16384"),
    ];
    for (what, body, needle) in cases {
        let reply = raw::run(&d.addr, TOKEN, &body);
        let (code, message, reason) = reply.error();
        assert_eq!(
            (reply.status, code.as_str(), reason.as_deref()),
            (400, "invalid_argument", Some("request")),
            "{what}: {message}"
        );
        assert!(message.starts_with("invalid request: ") && message.contains(needle), "{what}: {message}");
    }
    assert_eq!(created_since(&owner(&d), since), Vec::<String>::new(), "bad input created a container");
}

#[test]
fn containers_past_their_lifetime_are_swept_at_startup() {
    let Some(fx) = fixture("runc") else { return };
    // What a daemon killed mid-run leaves behind, once its lifetime label has passed.
    let o = Command::new("docker")
        .args(["create", "--label", "dev.plimsoll.expires=1", "--label", "dev.plimsoll.owner=plimsoll-host-0"])
        .args(["--network", "none", "--entrypoint", "/bin/true", &fx.image])
        .output()
        .expect("docker create");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let left = text(&o.stdout).trim().to_string();
    // One of ours that has not expired, and one that is not ours: both stay.
    let o = Command::new("docker")
        .args(["create", "--label", &format!("dev.plimsoll.expires={}", now() + 3600)])
        .args(["--network", "none", "--entrypoint", "/bin/true", &fx.image])
        .output()
        .expect("docker create");
    let live = text(&o.stdout).trim().to_string();
    let o = Command::new("docker")
        .args(["create", "--network", "none", "--entrypoint", "/bin/true", &fx.image])
        .output()
        .expect("docker create");
    let foreign = text(&o.stdout).trim().to_string();

    let dir = scratch("docker-sweep");
    let (plugin, key) = signed_plugin(&fx, &dir);
    let d = start(&docker_env(&fx, &plugin, &key, "runc"));
    let exists = |id: &str| Command::new("docker").args(["inspect", id]).output().expect("inspect").status.success();
    let (gone, kept, untouched) = (!exists(&left), exists(&live), exists(&foreign));
    for id in [&live, &foreign] {
        let _ = Command::new("docker").args(["rm", "-f", id]).output();
    }
    drop(d);
    assert!(gone, "the expired container {left} was not swept");
    assert!(kept, "a container of ours that had not expired was removed");
    assert!(untouched, "a container that is not ours was removed");
}

#[test]
fn a_failed_recheck_lowers_the_tier_until_it_passes() {
    use plimsoll_containers::{Ceilings, Engine, Lockdown};
    use plimsoll_core::Tier;
    use plimsoll_runtime::plugin::Wall;

    let Some(fx) = fixture("runc") else { return };
    let rt = rt();
    let engine = rt.block_on(Engine::connect(None, "plimsoll-recheck-test")).expect("engine");
    let real = rt.block_on(engine.image(&fx.image)).expect("image").id;
    let wall = |image: &str| {
        let lockdown = Lockdown {
            guest_uid: 61000,
            runtimes: ["runc".to_string()].into(),
            images: [(image.to_string(), "sandbox".to_string())].into(),
            resolv_conf: "/nonexistent".into(),
            seccomp: None,
            ceilings: Ceilings::default(),
        };
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("rt");
        Wall::new(engine.clone(), lockdown, [("runc".to_string(), Tier::Container)].into(), rt)
    };
    // An image that vanished since startup: the re-check fails and the tier drops to none.
    let gone = wall(&format!("sha256:{}", "0".repeat(64)));
    assert_eq!(gone.tier_of("runc"), Tier::Container);
    let err = gone.recheck().expect_err("a missing image fails the re-check");
    assert!(err.contains("image sha256:000"), "{err}");
    assert_eq!((gone.tier_of("runc"), gone.healthy()), (Tier::None, false));
    // The proven image still there: the re-check passes and the tier stands.
    let ok = wall(&real);
    ok.recheck().expect("the re-check passes");
    assert_eq!((ok.tier_of("runc"), ok.healthy()), (Tier::Container, true));
    drop((gone, ok));
}

#[test]
fn the_manifest_max_tier_caps_what_the_host_states() {
    let Some(fx) = fixture("runsc") else { return };
    let dir = scratch("docker-max-tier");
    let (plugin, key) = signed_plugin_with(&fx, &dir, |manifest| {
        assert!(manifest.contains("max-tier = \"kernel\""), "{manifest}");
        manifest.replace("max-tier = \"kernel\"", "max-tier = \"container\"")
    });
    // gVisor would justify kernel; the signed manifest says container at most.
    let d = start(&docker_env(&fx, &plugin, &key, "runsc"));
    let client = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
    let rt = rt();
    assert_eq!(rt.block_on(client.describe()).expect("describe").isolation, "container");
    let r = rt.block_on(client.run_javascript("console.log(1)", &opts(0))).expect("run");
    assert_eq!(r.record.expect("record").isolation, "container");
    let kernel = Options { floor: Some(Floor::Kernel), ..Options::default() };
    let err = rt.block_on(client.run_javascript("1", &kernel)).expect_err("a kernel floor");
    assert_eq!(err.not_dispatched(), Some(Reason::Isolation), "{err}");
}
