//! The escape-probe matrix: one attempt per attack (`tests/fixtures/probes/escape.py`,
//! and its JavaScript counterpart below), run as the guest at every tier this
//! machine has (QuickJS in the daemon and in a jailed engine worker and CPython at
//! the process tier, runc at container, runsc at kernel) and on the remote
//! backends' fakes (the e2b, dockercloud and openshell plugins against
//! `plimsoll-fake`, whose sandboxes are local containers standing in for the
//! vendors' microVMs and the gateway's docker sandboxes). Each attempt must fail and
//! each run must report. What stopped it is read
//! from the run (the errno or the missing facility) and named as a wall; the table
//! that results is SPECIFICATION.md's, checked here byte for byte
//! (`PLIMSOLL_WRITE_PROBE_TABLE=1` writes it instead).

use std::collections::BTreeMap;
use std::net::TcpListener;

use plimsoll_client::{Client, Options};
use plimsoll_core::wire::{ProjectOutcome, ProjectResult};

use super::docker::{TOKEN, docker_env, fixture, signed_plugin, start};
use super::fakes::Fake;
use super::{Daemon, callers, dockercloud, e2b, openshell, scratch};

/// The columns of the remote plugins against their fakes: the walls are the
/// plugin's and the fake's containers', standing in for the vendor's microVM.
const E2B_FAKE: &str = "e2b plugin, on its fake";
const DOCKERCLOUD_FAKE: &str = "dockercloud plugin, on its fake";
const OPENSHELL_FAKE: &str = "openshell plugin, on its fake";
/// What both remote columns are matched as: the same walls stop the same attacks.
const REMOTE: &str = "a remote plugin, on its fake";

const PROBE: &str = include_str!("../fixtures/probes/escape.py");

/// The same attacks in the QuickJS engine, with what a snippet there has.
const JS_PROBE: &str = r#"
const r = {};
const name = (e) => (e && e.name) || String(e);
const t = (k, f) => { try { f(); r[k] = 'SUCCEEDED'; } catch (e) { r[k] = name(e); } };
t('write_outside', () => require('fs').writeFileSync('/etc/plimsoll-probe', 'x'));
t('read_host_file', () => std.loadFile(HOST_FILE));
t('network_loopback', () => fetch('http://127.0.0.1:' + PORT + '/'));
t('network_out', () => new XMLHttpRequest());
t('metadata', () => fetch('http://169.254.169.254/'));
t('resolve_name', () => require('dns').lookup('plimsoll-probe.invalid'));
t('setuid_root', () => process.setuid(0));
t('raise_capability', () => os.exec(['capsh']));
t('ptrace', () => os.kill(1, 9));
t('mount', () => require('child_process').execSync('mount'));
t('symlink_out', () => os.symlink('/etc/passwd', 'leak.txt'));
t('daemon_env', () => { if (!JSON.stringify(globalThis).includes(CANARY)) throw new RangeError('not found'); });
if (r.daemon_env === 'RangeError') r.daemon_env = 'not found';
t('fork_bomb', () => { for (;;) require('child_process').fork('bomb.js'); });
t('disk_fill', () => { const f = std.open('fill', 'w'); for (;;) f.puts('x'.repeat(1 << 20)); });
r.other_run_files = globalThis.planted === PLANTED ? 'FOUND' : 'not found';
console.log(JSON.stringify(r));
"#;

/// What one tier showed: attack -> evidence.
type Seen = BTreeMap<String, String>;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn opts(timeout_ms: i32) -> Options {
    Options { timeout_ms, ..Options::default() }
}

/// The one step of `p`, which must have run and reported.
fn step_json(p: &ProjectResult, what: &str) -> serde_json::Map<String, serde_json::Value> {
    assert_eq!(p.outcome, ProjectOutcome::Completed, "{what}: {}", p.outcome_detail);
    let out = text(&p.steps[0].stdout);
    let v: serde_json::Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("{what}: not the probe's JSON ({e}): {out} {}", text(&p.steps[0].stderr)));
    v.as_object().cloned().unwrap_or_default()
}

/// The Python probe as project runs on `c`: the attacks, another run's files, and
/// the three bombs. `python` is the step's interpreter command.
fn python_tier(c: &Client, python: &str, host_file: &str, canary: &str, port: u16) -> Seen {
    let rt = super::rt();
    let files = [("probe.py", PROBE)];
    let run = |args: &str, artifacts: &[&str], timeout: i32| {
        let step = format!("{python} probe.py {args}");
        rt.block_on(c.run_project(&files, &[step.as_str()], artifacts, &opts(timeout)))
            .unwrap_or_else(|e| panic!("{args}: no answer: {e}"))
            .project
            .expect("a project result")
    };
    let mut seen = Seen::new();
    let tac: String = canary.chars().rev().collect();
    let p = run(&format!("probe {host_file} {tac} {port}"), &["leak.txt"], 60_000);
    for (k, v) in step_json(&p, "probe") {
        seen.insert(k, v.as_str().unwrap_or_default().to_string());
    }
    // The link to /etc/passwd was made (where links exist); its read-back is the wall.
    if p.artifacts.iter().any(|a| a.path == "leak.txt") {
        seen.insert("symlink_out".into(), "SUCCEEDED: the artifact came back".into());
    } else if seen["symlink_out"] == "EPERM" {
        seen.insert("symlink_out".into(), "not read back".into());
    }
    let nonce = format!("{:x}", std::process::id() as u64 * 7919 + port as u64);
    let planted = run(&format!("plant {nonce}"), &[], 30_000);
    assert_eq!(planted.outcome, ProjectOutcome::Completed, "{}", planted.outcome_detail);
    for (k, v) in step_json(&run(&format!("look {nonce}"), &[], 30_000), "look") {
        seen.insert(k, v.as_str().unwrap_or_default().to_string());
    }
    // The bombs: each a step result, never a lost run.
    let p = run("memory", &[], 60_000);
    assert_eq!(p.outcome, ProjectOutcome::Completed, "memory bomb: {}", p.outcome_detail);
    let err = text(&p.steps[0].stderr);
    let memory = if err.contains("plimsoll: the step ran out of memory: the sandbox's kernel's OOM killer") {
        format!("a step result: exit {}, the plugin's note of the kernel's OOM kill", p.steps[0].exit_code)
    } else if err.contains("plimsoll: the step ran out of memory") {
        "a step result: exit 137, the runner's memory note".to_string()
    } else if err.contains("MemoryError") {
        format!("a step result: exit {}, MemoryError", p.steps[0].exit_code)
    } else if err.contains("out of memory") {
        format!("a step result: exit {}, out of memory", p.steps[0].exit_code)
    } else {
        format!("UNEXPLAINED exit {}: {err}", p.steps[0].exit_code)
    };
    seen.insert("memory_bomb".into(), memory);
    for (mode, key) in [("fork", "fork_bomb"), ("disk", "disk_fill")] {
        let p = run(mode, &[], 60_000);
        let v = step_json(&p, mode);
        seen.insert(key.into(), v[key].as_str().unwrap_or_default().to_string());
    }
    // The host is fine afterwards.
    let p = run("look none", &[], 30_000);
    assert_eq!(p.outcome, ProjectOutcome::Completed, "after the bombs: {}", p.outcome_detail);
    seen
}

/// The JavaScript probe as a snippet on `c`, and a memory bomb.
fn js_tier(c: &Client, host_file: &str, canary: &str, port: u16) -> Seen {
    let rt = super::rt();
    let tac: String = canary.chars().rev().collect();
    // An earlier run leaves a value behind in its engine, for the probe to look for.
    let planted = format!("planted-{port}");
    let plant = format!("globalThis.planted = {planted:?};");
    rt.block_on(c.run_javascript(&plant, &opts(30_000))).expect("plant").javascript.expect("js");
    let code = format!(
        "const HOST_FILE = {host_file:?}, CANARY = {tac:?}.split('').reverse().join(''), PORT = {port}, PLANTED = {planted:?};\n{JS_PROBE}"
    );
    let r = rt.block_on(c.run_javascript(&code, &opts(30_000))).expect("js probe").javascript.expect("js");
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&r.stderr)));
    let mut seen: Seen =
        v.as_object().expect("object").iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").into())).collect();
    let bomb = "const a = []; for (;;) a.push(new Array(1 << 20).fill(7));";
    let r = rt.block_on(c.run_javascript(bomb, &opts(30_000))).expect("js memory bomb").javascript.expect("js");
    let err = text(&r.stderr);
    seen.insert(
        "memory_bomb".into(),
        if err.contains("out of memory") {
            format!("a result: exit {}, out of memory", r.exit_code)
        } else {
            format!("UNEXPLAINED exit {}: {err}", r.exit_code)
        },
    );
    seen
}

#[test]
fn the_escape_probe_matrix_holds_on_every_tier() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a host listener");
    let port = listener.local_addr().expect("addr").port();
    let dir = scratch("probes");
    let host_file = dir.join("host-secret.txt");
    std::fs::write(&host_file, "host secret").expect("host file");
    let host_file = host_file.display().to_string();
    let canary = format!("canary-{}-{port}", std::process::id());

    let mut tiers: Vec<(&str, Seen)> = Vec::new();
    let (clients, tokens) = callers(&dir, &["prober"]);
    // A wasm daemon with its engine `engine` (in-process or jailed), holding the canary.
    let wasm_daemon = |engine: &str| {
        Daemon::start(&[
            ("SANDBOX_PROVIDER", "wasm"),
            ("SANDBOX_WASM_ENGINE", engine),
            ("PLIMSOLL_CLIENTS_FILE", &clients.display().to_string()),
            ("SANDBOX_RATE_PER_MIN", "0"),
            ("PROBE_CANARY_SECRET", &canary),
        ])
    };
    let wasm = wasm_daemon("in-process");
    let c = Client::new(&wasm.url(), Some(tokens[0].clone())).expect("client");
    tiers.push(("process, QuickJS", js_tier(&c, &host_file, &canary, port)));
    tiers.push(("process, CPython", python_tier(&c, "python3 -I", &host_file, &canary, port)));
    drop(wasm);
    let jailed = wasm_daemon("jailed");
    let c = Client::new(&jailed.url(), Some(tokens[0].clone())).expect("client");
    tiers.push(("process, QuickJS, jailed worker", js_tier(&c, &host_file, &canary, port)));
    drop(jailed);
    for runtime in ["runc", "runsc"] {
        let Some(fx) = fixture(runtime) else { return };
        let (plugin, key) = signed_plugin(&fx, &scratch(&format!("probes-{runtime}")));
        let mut env = docker_env(&fx, &plugin, &key, runtime);
        env.push(("PROBE_CANARY_SECRET".into(), canary.clone()));
        let d = start(&env);
        let c = Client::new(&d.url(), Some(TOKEN.into())).expect("client");
        let label = if runtime == "runc" { "container, runc" } else { "kernel, runsc" };
        tiers.push((label, python_tier(&c, "python3", &host_file, &canary, port)));
    }
    let Some(fake) = Fake::start("e2b", None) else { return };
    let canary_env = [("PROBE_CANARY_SECRET", canary.as_str())];
    let Some(env) = e2b::env(&fake, &scratch("probes-e2b"), &canary_env) else { return };
    let d = Daemon::start(&super::fakes::pairs(&env));
    let c = Client::new(&d.url(), Some(e2b::TOKEN.into())).expect("client");
    tiers.push((E2B_FAKE, python_tier(&c, "python3", &host_file, &canary, port)));
    drop(d);
    assert_eq!(fake.sandboxes(), 0, "the e2b fake's sandboxes were left behind");
    let Some(fake) = Fake::start("dockercloud", None) else { return };
    let Some(env) = dockercloud::env(&fake, &scratch("probes-dockercloud"), &canary_env) else { return };
    let d = Daemon::start(&super::fakes::pairs(&env));
    let c = Client::new(&d.url(), Some(dockercloud::TOKEN.into())).expect("client");
    tiers.push((DOCKERCLOUD_FAKE, python_tier(&c, "python3", &host_file, &canary, port)));
    drop(d);
    assert_eq!(super::fakes::settle(&fake, 0), 0, "the dockercloud fake's sandboxes were left behind");
    let Some(fake) = Fake::start("openshell", None) else { return };
    let Some(env) = openshell::env(&fake, &scratch("probes-openshell"), &canary_env) else { return };
    let d = Daemon::start(&super::fakes::pairs(&env));
    let c = Client::new(&d.url(), Some(openshell::TOKEN.into())).expect("client");
    tiers.push((OPENSHELL_FAKE, python_tier(&c, "python3", &host_file, &canary, port)));
    // Its last run's delete may still be under way: a stop lets it finish.
    let _ = d.terminate();
    assert_eq!(super::fakes::settle(&fake, 0), 0, "the openshell fake's sandboxes were left behind");
    drop(listener);

    let table = matrix(&tiers);
    let spec_path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../SPECIFICATION.md");
    let spec = std::fs::read_to_string(spec_path).expect("SPECIFICATION.md");
    let (begin, end) = (spec.find(BEGIN).expect("the table's begin marker"), spec.find(END).expect("its end marker"));
    let written = &spec[begin + BEGIN.len()..end];
    if std::env::var_os("PLIMSOLL_WRITE_PROBE_TABLE").is_some() {
        std::fs::write(spec_path, format!("{}{table}{}", &spec[..begin + BEGIN.len()], &spec[end..])).expect("write");
    } else {
        assert_eq!(
            written, table,
            "SPECIFICATION.md's probe table is not what this run saw (PLIMSOLL_WRITE_PROBE_TABLE=1 rewrites it)"
        );
    }
}

const BEGIN: &str = "<!-- probe matrix: written by e2e probes::the_escape_probe_matrix_holds_on_every_tier -->\n";
const END: &str = "<!-- end of the probe matrix -->";

/// The attacks, in the table's order, with the words a row gets.
const ATTACKS: [(&str, &str); 16] = [
    ("write_outside", "write outside the allowed directories"),
    ("read_host_file", "read a file of the host"),
    ("network_loopback", "reach the host's loopback"),
    ("network_out", "reach the network"),
    ("metadata", "reach the metadata address"),
    ("resolve_name", "resolve a name"),
    ("setuid_root", "become root"),
    ("raise_capability", "raise a capability"),
    ("ptrace", "ptrace another process"),
    ("mount", "mount a file system"),
    ("symlink_out", "a link out of the work directory, as an artifact"),
    ("other_run_files", "read another run's files"),
    ("daemon_env", "read the daemon's environment"),
    ("fork_bomb", "fork bomb"),
    ("memory_bomb", "memory bomb"),
    ("disk_fill", "fill the disk"),
];

/// The wall that stopped `attack` at `tier`, given what the run showed; None for
/// evidence nobody has explained (a new behaviour to look at, or an escape).
fn wall(tier: &str, attack: &str, seen: &str) -> Option<&'static str> {
    let process = tier.starts_with("process");
    // A jailed worker runs the same engine: the same walls, behind its own.
    let tier = if tier == "process, QuickJS, jailed worker" { "process, QuickJS" } else { tier };
    let tier = if [E2B_FAKE, DOCKERCLOUD_FAKE, OPENSHELL_FAKE].contains(&tier) { REMOTE } else { tier };
    Some(match (tier, attack, seen) {
        (_, _, s) if s.starts_with("SUCCEEDED") || s.starts_with("FOUND") || s.contains("UNEXPLAINED") => return None,
        ("process, QuickJS", "memory_bomb", s) if s.ends_with("out of memory") => "the run's linear memory limit",
        ("process, QuickJS", _, "ReferenceError") => "the QuickJS component has no such API",
        ("process, QuickJS", "other_run_files", "not found") => "a fresh store per run",
        ("process, QuickJS", "daemon_env", "not found") => "the component has no environment",
        ("process, CPython", "write_outside" | "read_host_file" | "symlink_out", "ENOENT") => {
            "WASI: only the run's work directory is preopened"
        }
        ("process, CPython", "network_loopback" | "network_out" | "metadata", "EACCES") => {
            "WASI: the component is granted no sockets"
        }
        ("process, CPython", "resolve_name", "gaierror") => "WASI: the component is granted no name lookup",
        ("process, CPython", _, s) if s.starts_with("no such facility") => {
            "CPython on WASI has no ctypes, fork or setuid"
        }
        ("process, CPython", "memory_bomb", s) if s.ends_with("MemoryError") => "the run's linear memory limit",
        ("process, CPython", "disk_fill", "MemoryError") => "the work directory lives in the run's memory limit",
        (REMOTE, "write_outside", "EROFS") => "the sandbox's read-only root (the fake's --read-only)",
        (REMOTE, "read_host_file", "ENOENT") => "the sandbox is elsewhere: no path of the host is in it",
        (REMOTE, "network_loopback", "ECONNREFUSED") => "the sandbox's loopback is its own",
        (REMOTE, "network_out" | "metadata", "ENETUNREACH") => {
            "deny-all egress, read back before the run (the fake: no network)"
        }
        (REMOTE, "resolve_name", "gaierror") => "deny-all egress: no resolver is reachable",
        (REMOTE, "setuid_root" | "raise_capability" | "mount", "EPERM") => "the guest user holds no capability",
        (REMOTE, "ptrace", "EPERM") => "the guest user cannot trace root's processes",
        (REMOTE, "symlink_out", "not read back") => {
            "the plugin resolves each artifact in the guest and reads only inside the project"
        }
        (REMOTE, "other_run_files", "ENOENT") => "a fresh sandbox per run",
        (REMOTE, "daemon_env", "not found") => "the sandbox is remote: the daemon's environment never enters it",
        (REMOTE, "fork_bomb", "EAGAIN") => "the sandbox's process limit (the fake's pids limit)",
        (REMOTE, "memory_bomb", s) if s.ends_with("the plugin's note of the kernel's OOM kill") => {
            "the sandbox's memory; the plugin names the kernel's OOM kill (a step result)"
        }
        (REMOTE, "disk_fill", "ENOSPC") => "the sandbox's sized disk (the fake: a sized tmpfs)",
        (_, "other_run_files", "ENOENT") if process => "a fresh store and work directory per run",
        (_, "daemon_env", "not found") if process => "the component sees the run's environment only",
        (_, "other_run_files", "ENOENT") => "a fresh container per run",
        (_, "daemon_env", "not found") => {
            "the container's environment is the plan's, and /proc shows its own processes"
        }
        (_, "read_host_file", "ENOENT") => "the container's own root: no host path is mounted",
        (_, "resolve_name", "gaierror") => "network none, and the fixed resolver is unreachable",
        (_, "symlink_out", "not read back") => "the runner reads artifacts back only inside /work, links resolved",
        (_, "memory_bomb", s) if s.ends_with("the runner's memory note") => "the runner's memory wall (a step result)",
        (_, "disk_fill", "ENOSPC") => "the sized tmpfs",
        (_, "setuid_root", "EPERM") => "cap-drop ALL, the guest uid",
        ("container, runc", "write_outside", "EROFS") => "the read-only root",
        ("container, runc", "network_loopback" | "network_out" | "metadata", "EPERM") => {
            "the seccomp profile: no internet sockets"
        }
        ("container, runc", "ptrace" | "mount", "EPERM") => "the seccomp profile",
        ("container, runc", "raise_capability", "EPERM") => "cap-drop ALL, no-new-privileges",
        ("container, runc", "fork_bomb", "EAGAIN") => "the pids limit",
        ("kernel, runsc", "write_outside", "EACCES") => {
            "the guest uid owns nothing outside /work (and the root is read-only)"
        }
        ("kernel, runsc", "network_loopback", "ECONNREFUSED") => "network none: the sandbox's loopback is its own",
        ("kernel, runsc", "network_out" | "metadata", "EHOSTUNREACH") => {
            "network none: gVisor's netstack has no route out"
        }
        ("kernel, runsc", "raise_capability", "EINVAL") => "gVisor's kernel refuses ambient capabilities",
        ("kernel, runsc", "ptrace", "EPERM") => "gVisor's kernel: no CAP_SYS_PTRACE",
        ("kernel, runsc", "mount", "EPERM") => "cap-drop ALL: no CAP_SYS_ADMIN",
        ("kernel, runsc", "fork_bomb", "EAGAIN") => "the runner's task cap (RLIMIT_NPROC 24)",
        _ => return None,
    })
}

/// The Markdown table: a row per attack, a column per tier, each cell the wall and
/// the evidence. Fails on any attack that succeeded or any unexplained evidence.
fn matrix(tiers: &[(&str, Seen)]) -> String {
    let mut out = String::from("| attack |");
    for (tier, _) in tiers {
        out.push_str(&format!(" {tier} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(tiers.len()));
    out.push('\n');
    let mut unexplained = Vec::new();
    for (attack, words) in ATTACKS {
        out.push_str(&format!("| {words} |"));
        for (tier, seen) in tiers {
            let evidence = seen.get(attack).map(String::as_str).unwrap_or("no answer");
            match wall(tier, attack, evidence) {
                Some(w) => out.push_str(&format!(" {w} (`{evidence}`) |")),
                None => {
                    unexplained.push(format!("{tier}: {attack}: {evidence}"));
                    out.push_str(" ? |");
                }
            }
        }
        out.push('\n');
    }
    assert!(unexplained.is_empty(), "escaped, or stopped by something unexplained:\n{}", unexplained.join("\n"));
    out
}
