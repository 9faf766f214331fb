//! Docker sessions end to end, under runc and runsc: the shared conformance suite
//! (`session_suite`: kept Python and Node interpreters, the sweep between calls,
//! deadlines, idle, lifetime, ownership, the cap), then what only a container
//! session has (one container per session, a shared work directory across
//! languages and kinds, the paused container, the host's read-back ending a changed
//! session, the disk budget), the published Python client, and Python through the
//! MCP server. Needs what the docker suite needs (see `docker.rs`).

use std::process::Command;
use std::time::Duration;

use plimsoll_client::{Client, Error, Options, SessionOptions};
use plimsoll_core::wire::{CellResult, ProjectFile, ProjectRun, RunRequest, RunResponse, SessionEnd};

use super::docker::{Fixture, created_since, docker_env, fixture, now, owner, signed_plugin, start};
use super::python::run_script;
use super::session_suite::{self, Target};
use super::{Daemon, callers, rt, scratch};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A docker daemon with sessions on (at most two, idle after 2 s, 32 MiB of
/// storage) and two callers.
fn daemon(fx: &Fixture, runtime: &str) -> (Daemon, [String; 2]) {
    let dir = scratch(&format!("docker-sessions-{runtime}"));
    let (plugin, key) = signed_plugin(fx, &dir);
    let (file, tokens) = callers(&dir, &["ana", "ben"]);
    let mut env: Vec<(String, String)> =
        docker_env(fx, &plugin, &key, runtime).into_iter().filter(|(k, _)| k != "PLIMSOLL_TOKEN").collect();
    for (k, v) in [
        ("PLIMSOLL_CLIENTS_FILE", file.display().to_string()),
        ("SANDBOX_MAX_SESSIONS", "2".into()),
        ("SANDBOX_SESSION_IDLE", "2s".into()),
        ("SANDBOX_SESSION_DISK_MB", "32".into()),
    ] {
        env.push((k.into(), v));
    }
    (start(&env), [tokens[0].clone(), tokens[1].clone()])
}

/// Asserts that `e` says the session ended as `want`, its detail holding `part`.
fn assert_ended(e: &Error, want: SessionEnd, part: &str) {
    match e {
        Error::SessionEnded { end, detail, .. } => {
            assert_eq!(*end, want, "{detail}");
            assert!(detail.contains(part), "{detail}");
        }
        other => panic!("expected the session to have ended as {want:?}: {other:?}"),
    }
}

fn docker(args: &[&str]) -> String {
    let o = Command::new("docker").args(args).output().expect("docker");
    assert!(o.status.success(), "docker {args:?}: {}", text(&o.stderr));
    text(&o.stdout).trim().to_string()
}

/// What only a container session has: one container per session, removed on close;
/// Python and Node sharing one work directory with snippets and projects; a paused
/// idle container; the read-back ending a changed session; the disk budget.
fn docker_cases(d: &Daemon, token: &str, runtime: &str) {
    let c = Client::new(&d.url(), Some(token.into())).expect("client");
    rt().block_on(async {
        let since = now();
        let s = c.open_session(&SessionOptions::default()).await.expect("open");
        let containers = created_since(&owner(d), since);
        assert_eq!(containers.len(), 1, "one container per session: {containers:?}");
        let container = containers[0].clone();
        let plain = Options::default();
        let cell = |language: &'static str, code: &'static str| s.run_cell(language, code, &[], &plain);
        let result = |r: Result<RunResponse, Error>| -> CellResult { r.expect("a cell").cell.expect("a cell result") };

        // Both languages, snippets and projects share /work.
        result(cell("python", "open('shared.txt', 'w').write('from python')").await);
        let r = result(cell("javascript", "require('fs').readFileSync('shared.txt', 'utf8')").await);
        assert_eq!(text(&r.stdout), "'from python'\n", "{}", text(&r.stderr));
        let r = s.run_javascript("require('fs').writeFileSync('snip.txt', 'from a snippet')", &plain).await;
        assert_eq!(r.expect("snippet").javascript.expect("js").exit_code, 0);
        let project = ProjectRun {
            files: vec![ProjectFile { path: "p.sh".into(), content: "cat snip.txt shared.txt".into() }],
            steps: vec!["sh p.sh".into()],
            artifacts: vec![],
            grant_profile: String::new(),
        };
        let r = s.call(RunRequest { project: Some(project), timeout_ms: 30_000, ..RunRequest::default() }).await;
        let p = r.expect("project").project.expect("project result");
        assert_eq!(text(&p.steps[0].stdout), "from a snippetfrom python", "{p:?}");

        // Idle: the container is paused; the next call thaws it with state kept.
        result(cell("python", "kept = 'through the pause'").await);
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert_eq!(docker(&["inspect", "--format", "{{.State.Paused}}", &container]), "true");
        assert_eq!(text(&result(cell("python", "kept").await).stdout), "'through the pause'\n");

        // Close removes the container.
        s.close().await.expect("close");
        let gone = Command::new("docker").args(["inspect", &container]).output().expect("docker");
        assert!(!gone.status.success(), "close removes the container");

        // A container changed from outside between calls ends the session, nothing run.
        let since = now();
        let s = c.open_session(&SessionOptions::default()).await.expect("open again");
        result(s.run_cell("python", "1", &[], &plain).await);
        let changed = created_since(&owner(d), since);
        let target = changed.last().expect("the new session's container");
        // gVisor cannot change a running container's limits; removing it is the change there.
        let expected = if runtime == "runsc" {
            docker(&["rm", "-f", target]);
            "is gone"
        } else {
            docker(&["update", "--memory", "300m", "--memory-swap", "300m", target]);
            "memory limit \"256 MiB\" became \"300 MiB\""
        };
        let e = s.run_cell("python", "1", &[], &plain).await.expect_err("changed");
        assert_ended(&e, SessionEnd::SandboxChanged, expected);
        assert!(!e.may_have_run());
        assert_eq!(s.close().await.expect("close").ended, SessionEnd::SandboxChanged);

        // Past the disk budget the call is answered and the session ends.
        let s = c.open_session(&SessionOptions::default()).await.expect("open for the disk");
        let fill = "open('/work/big', 'wb').write(b'x' * (30 << 20))\nopen('/tmp/big', 'wb').write(b'x' * (8 << 20))";
        let r = s.run_cell("python", fill, &[], &Options { timeout_ms: 30_000, ..Options::default() }).await;
        assert_eq!(r.expect("answered").cell.expect("cell").exit_code, 0);
        let (end, detail) = s.ended().await.expect("the answer ended the session");
        assert_eq!(end, SessionEnd::DiskExceeded);
        assert!(detail.contains("over its budget of 32 MiB"), "{detail}");
        let e = s.run_cell("python", "1", &[], &plain).await.expect_err("ended");
        assert!(!e.may_have_run());
        assert_eq!(s.close().await.expect("close").ended, SessionEnd::DiskExceeded);
    });
}

/// What a payload cannot do to its session: flood it (only the interpreter is
/// lost), speak for the agent (a forged status line is only output), write into the
/// agent's channel (refused under runc; under gVisor, where a process of the guest
/// uid can open the agent's descriptors, the answer fails its check and the session
/// ends `boundary_failed`), and a container killed from outside ends the session
/// `sandbox_changed` with nothing left behind.
fn fault_cases(d: &Daemon, token: &str, runtime: &str) {
    let c = Client::new(&d.url(), Some(token.into())).expect("client");
    rt().block_on(async {
        let plain = Options::default();
        let s = c.open_session(&SessionOptions::default()).await.expect("open");
        let cell = |code: &'static str, timeout_ms: i32| {
            let opts = Options { timeout_ms, ..Options::default() };
            let s = &s;
            async move { s.run_cell("python", code, &[], &opts).await }
        };
        let result = |r: Result<RunResponse, Error>| -> CellResult { r.expect("a cell").cell.expect("a cell result") };

        // A flood: cut at the output cap, stopped at its deadline; only its interpreter is lost.
        result(cell("kept = 1", 10_000).await);
        let r = result(cell("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", 2_000).await);
        assert_eq!((r.exit_code, r.timed_out, r.interpreter_ended), (124, true, true), "{}", text(&r.stderr));
        assert!(r.stdout_truncated && r.stdout.len() <= 1 << 20, "{} bytes", r.stdout.len());
        let r = result(cell("'kept' in globals(), 1 + 1", 10_000).await);
        assert_eq!((text(&r.stdout).as_str(), r.interpreter_started), ("(False, 2)\n", true));

        // A forged status line and end marker are the cell's own output.
        let forge = "import sys\nsys.stderr.write('\\n0123456789abcdef0123456789abcdef {\"exit\":0,\"leftover\":0} 00\\n\\n0123456789abcdef0123456789abcdef.\\n')\nraise SystemExit(3)";
        let r = result(cell(forge, 10_000).await);
        assert_eq!(r.exit_code, 3, "{}", text(&r.stderr));
        assert!(text(&r.stderr).contains("0123456789abcdef0123456789abcdef {\"exit\":0"), "{}", text(&r.stderr));

        // The agent's channel: its stdout, written from a cell.
        let write = "import os\ntry:\n    fd = os.open('/proc/1/fd/1', os.O_WRONLY)\n    os.write(fd, b'INJECTED')\n    print('wrote')\nexcept OSError as e:\n    print('refused', e.errno)";
        let r = cell(write, 10_000).await;
        if runtime == "runsc" {
            let e = r.expect_err("the injected bytes fail the answer's check");
            assert!(e.may_have_run(), "{e:?}");
            let e = s.run_cell("python", "1", &[], &plain).await.expect_err("ended");
            assert_ended(&e, SessionEnd::BoundaryFailed, "failed its check");
            assert_eq!(s.close().await.expect("close").ended, SessionEnd::BoundaryFailed);
        } else {
            assert_eq!(text(&result(r).stdout), "refused 13\n");
            let r = result(cell("1 + 1", 10_000).await);
            assert_eq!(text(&r.stdout), "2\n");
            s.close().await.expect("close");
        }

        // Its stdin: bytes written there are no request the agent takes.
        let s = c.open_session(&SessionOptions::default()).await.expect("open");
        let write = "import os\ntry:\n    fd = os.open('/proc/1/fd/0', os.O_WRONLY)\n    os.write(fd, b'\\x00\\x00\\x00\\x02' + bytes(32) + b'{}')\n    print('wrote')\nexcept OSError as e:\n    print('refused', e.errno)";
        let r = s.run_cell("python", write, &[], &plain).await.expect("the writing cell is answered");
        let wrote = text(&r.cell.expect("cell").stdout);
        let next = s.run_cell("python", "2 + 2", &[], &plain).await;
        if wrote == "wrote\n" {
            assert!(next.is_err(), "a request the host did not send was taken: {next:?}");
            let ended = s.close().await.expect("close").ended;
            assert_ne!(ended, SessionEnd::Closed, "the session ended by itself");
        } else {
            // runc: EACCES (the agent is not dumpable); gVisor opens it, but it takes no writes (EBADF).
            assert!(matches!(wrote.as_str(), "refused 13\n" | "refused 9\n"), "{wrote}");
            assert_eq!(text(&next.expect("answered").cell.expect("cell").stdout), "4\n");
            s.close().await.expect("close");
        }

        // Killed from outside: the next call finds the sandbox changed; nothing is left.
        let since = now();
        let s = c.open_session(&SessionOptions::default()).await.expect("open");
        result(s.run_cell("python", "1", &[], &plain).await);
        let container = created_since(&owner(d), since).last().cloned().expect("the session's container");
        docker(&["kill", &container]);
        let e = s.run_cell("python", "1", &[], &plain).await.expect_err("killed");
        assert_ended(&e, SessionEnd::SandboxChanged, "stopped from outside");
        assert_eq!(s.close().await.expect("close").ended, SessionEnd::SandboxChanged);
        let left = Command::new("docker").args(["ps", "-aq", "--filter", &format!("id={container}")]).output();
        assert_eq!(text(&left.expect("docker ps").stdout).trim(), "", "the killed session's container is removed");
    });
}

const SCRIPT: &str = r#"
import os
from plimsoll_client import Client
c = Client(os.environ["URL"], token=os.environ["TOKEN"])
tier = os.environ["TIER"]
with c.open_session(minimum_isolation=tier) as s:
    assert (s.provider, s.isolation) == ("docker", tier), (s.provider, s.isolation)
    r = s.run_cell("x = 41", language="python")
    assert r.exit_code == 0 and r.interpreter_started, r
    r = s.run_cell("x + 1", language="python")
    assert r.stdout == b"42\n" and not r.interpreter_started, r
    r = s.run_cell("const y = 1; y + 1", language="javascript")
    assert r.stdout == b"2\n", r
    r = s.run_cell("import time\nwhile True: pass", language="python", timeout=1)
    assert (r.exit_code, r.timed_out, r.interpreter_ended) == (124, True, True), r
    assert r.record.sequence == 4 and s.calls == 4
summary = s.close()
assert (summary.calls, summary.end) == (4, "closed"), summary
print("docker sessions ok")
"#;

/// The published client's helpers built on sessions, unchanged: `Workspace` (a
/// shell, files, search, save and restore over one session's project calls) and
/// `AsyncClient`'s `AsyncSession`.
const HELPERS_SCRIPT: &str = r#"
import asyncio, io, os, tarfile
from plimsoll_client import Client
from plimsoll_client.aio import AsyncClient
from plimsoll_client.workspace import Workspace, WorkspacePathError
url, token, tier = os.environ["URL"], os.environ["TOKEN"], os.environ["TIER"]
c = Client(url, token=token)
with Workspace(c.open_session(minimum_isolation=tier), timeout=60) as ws:
    assert ws.session.isolation == tier, ws.session.isolation
    assert ws.root == "/work", ws.root
    o = ws.exec("mkdir -p sub && cd sub && export GREETING=hi && echo $GREETING")
    assert (o.stdout, o.exit_code, o.cwd) == (b"hi\n", 0, "/work/sub"), o
    o = ws.exec("echo $GREETING from $(pwd) >&2; exit 3")
    assert (o.stderr, o.exit_code) == (b"hi from /work/sub\n", 3), o
    ws.write("notes/a.txt", "alpha\nbeta\n")
    assert ws.read("notes/a.txt") == b"alpha\nbeta\n"
    assert ws.edit("notes/a.txt", "beta", "gamma") == 1
    assert ws.read("/work/notes/a.txt") == b"alpha\ngamma\n"
    assert ws.glob("**/*.txt") == ["notes/a.txt"], ws.glob("**/*.txt")
    assert ws.glob("*", "notes") == ["a.txt"], ws.glob("*", "notes")
    assert ws.grep("gam") == "notes/a.txt:2:gamma", ws.grep("gam")
    big = os.urandom(5 << 20)
    ws.write("big.bin", big)
    assert ws.read("big.bin", max_bytes=6 << 20) == big
    tree = ws.persist()
    names = tarfile.open(fileobj=io.BytesIO(tree)).getnames()
    assert "./notes/a.txt" in names and not any(".plimsoll-shell" in n for n in names), names
    ws.exec("rm -rf /work/notes")
    try:
        ws.read("notes/a.txt")
        raise AssertionError("a removed file was read")
    except FileNotFoundError:
        pass
    ws.hydrate(tree)
    assert ws.read("notes/a.txt") == b"alpha\ngamma\n"
    o = ws.exec("sleep 30", timeout=2)
    assert o.timed_out, o
    assert ws.exec("echo $GREETING").stdout == b"hi\n", "the shell's state survives a timed-out command"
    for bad in ("../etc/passwd", "/etc/passwd"):
        try:
            ws.read(bad)
            raise AssertionError(f"{bad} was read")
        except WorkspacePathError:
            pass
summary = ws.session.ended
async def main():
    ac = AsyncClient(url, token=token)
    async with await ac.open_session(minimum_isolation=tier) as s:
        r = await s.run_cell("x = 41", language="python")
        r = await s.run_cell("x + 1", language="python")
        assert r.stdout == b"42\n", r
        r = await s.run_javascript("console.log(6 * 7)")
        assert r.stdout == b"42\n", r
        p = await s.run_project({"m.py": "print(open('m.py').read().count('m'))"}, ["python3 m.py"], [])
        assert p.steps[0].stdout == b"2\n", p
        assert s.calls == 4, s.calls
    assert s.ended is None or s.ended.reason == "closed", s.ended
asyncio.run(main())
print("workspace ok")
"#;

/// The client's Claude Managed Agents worker tools (`anthropic_worker`): the six
/// tools over one session, a staged skill with its executable bit, the shell's
/// directory and variables kept, a failing command as a tool error, and the session
/// closed when the runner lets go of `bash`. No model is called: the tools are
/// called as the SDK's worker calls them.
const ANTHROPIC_SCRIPT: &str = r#"
import asyncio, os, pathlib, tempfile, types
from anthropic.lib.tools._beta_functions import ToolError, aclose_runnable_tool
from plimsoll_client import Client
from plimsoll_client.anthropic_worker import PlimsollTools
url, token, tier = os.environ["URL"], os.environ["TOKEN"], os.environ["TIER"]
workdir = pathlib.Path(tempfile.mkdtemp())
skill = workdir / "skills" / "demo" / "run.sh"
skill.parent.mkdir(parents=True)
skill.write_text("echo skill ran\n")
skill.chmod(0o755)
ctx = types.SimpleNamespace(session_id="sesn_e2e", workdir=str(workdir))
tools = PlimsollTools(Client(url, token=token), minimum_isolation=tier)
by_name = {t.name: t for t in tools.tools(ctx)}
assert sorted(by_name) == ["bash", "edit", "glob", "grep", "read", "write"], sorted(by_name)
async def call(name, **args):
    return str(await by_name[name].call(args))
async def main():
    # The staged skill keeps its executable bit; /work is noexec, so it runs through sh.
    # (gVisor's statx fails on this tmpfs, so `ls -l` cannot show the mode there.)
    mode = "python3 -c 'import os; print(oct(os.stat(\"skills/demo/run.sh\").st_mode & 0o777))'"
    out = await call("bash", command=mode + " && sh skills/demo/run.sh && mkdir -p src && cd src && export GREETING=hi")
    assert out.startswith("0o755") and "skill ran" in out, out
    out = await call("bash", command="echo $GREETING from $(pwd)")
    assert "hi from /work/src" in out, out
    await call("write", file_path="/work/src/a.txt", content="alpha\nbeta\n")
    out = await call("read", file_path="src/a.txt")
    assert "alpha" in out and "beta" in out, out
    await call("edit", file_path="src/a.txt", old_string="beta", new_string="gamma")
    out = await call("grep", pattern="gam")
    assert "src/a.txt" in out and "gamma" in out, out
    out = await call("glob", pattern="**/*.txt")
    assert "src/a.txt" in out, out
    try:
        await call("bash", command="echo failing >&2; exit 3")
        raise AssertionError("a failing command was not a tool error")
    except ToolError as e:
        assert "failing" in str(e), e
    assert tools.open_sessions == ["sesn_e2e"], tools.open_sessions
    await aclose_runnable_tool(by_name["bash"])
    assert tools.open_sessions == [], tools.open_sessions
asyncio.run(main())
print("anthropic worker ok")
"#;

/// The client's OpenAI Agents SDK sandbox provider (`openai_sandbox`): create and
/// start a session, exec, write, read, persist the workspace, delete, and restore
/// the saved tree into a new session. No model is called.
const OPENAI_SCRIPT: &str = r#"
import asyncio, io, os
from pathlib import Path
from plimsoll_client import Client
from plimsoll_client.openai_sandbox import PlimsollSandboxClient, PlimsollSandboxClientOptions
url, token, tier = os.environ["URL"], os.environ["TOKEN"], os.environ["TIER"]
client = PlimsollSandboxClient(Client(url, token=token))
options = PlimsollSandboxClientOptions(minimum_isolation=tier)
async def main():
    s = await client.create(options=options)
    await s.start()
    r = await s.exec("echo hello from $(pwd)")
    assert (r.exit_code, r.stdout) == (0, b"hello from /work\n"), (r.exit_code, r.stdout, r.stderr)
    await s.write(Path("/work/notes/a.txt"), io.BytesIO(b"alpha\n"))
    got = await s.read(Path("/work/notes/a.txt"))
    assert got.read() == b"alpha\n"
    r = await s.exec("cat notes/a.txt; exit 4")
    assert (r.exit_code, r.stdout) == (4, b"alpha\n"), (r.exit_code, r.stdout)
    snapshot = await s.persist_workspace()
    data = snapshot.read()
    await client.delete(s)
    # A new session restores the saved tree.
    t = await client.create(options=options)
    await t.start()
    await t.hydrate_workspace(io.BytesIO(data))
    r = await t.exec("cat notes/a.txt")
    assert r.stdout == b"alpha\n", (r.stdout, r.stderr)
    await client.delete(t)
asyncio.run(main())
print("openai sandbox ok")
"#;

/// Python through the MCP server on docker: a fresh run, a kept sandbox whose
/// Python and JavaScript cells share state and files, and a loop stopped at its
/// budget with only its interpreter lost.
const MCP_SCRIPT: &str = r#"
import asyncio, os
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
async def main():
    env = {"PLIMSOLL_URL": os.environ["URL"], "PLIMSOLL_CALLER_TOKEN": os.environ["TOKEN"],
           "PLIMSOLL_MIN_ISOLATION": os.environ["TIER"], "PATH": os.environ["PATH"]}
    async with stdio_client(StdioServerParameters(command=os.environ["HOST"], args=["mcp"], env=env)) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            async def call(name, args):
                x = await s.call_tool(name, args)
                assert not x.is_error, x.structured_content
                return x.structured_content
            r = await call("run_code", {"language": "python", "code": "6*7"})
            assert (r["stdout"], r["isolation"], r["freshSandbox"]) == ("42\n", os.environ["TIER"], True), r
            h = (await call("open_sandbox", {}))["handle"]
            await call("run_code", {"language": "python", "code": "x = 41\nopen('from_py.txt', 'w').write('py')", "handle": h})
            r = await call("run_code", {"language": "python", "code": "x + 1", "handle": h})
            assert (r["stdout"], r["stateKept"]) == ("42\n", True), r
            r = await call("run_code", {"language": "javascript", "code": "require('fs').readFileSync('from_py.txt', 'utf8')", "handle": h})
            assert (r["stdout"], r["filesPersist"]) == ("'py'\n", True), r
            r = await call("run_code", {"language": "python", "code": "while True: pass", "timeout_ms": 1000, "handle": h})
            assert (r["exitCode"], r["timedOut"]) == (124, True), r
            r = await call("run_code", {"language": "python", "code": "'x' in globals()", "handle": h})
            assert (r["stdout"], r["freshInterpreter"]) == ("False\n", True), r
            await call("close_sandbox", {"handle": h})
    print("mcp on docker ok")
asyncio.run(main())
"#;

fn sessions(runtime: &str) {
    let Some(fx) = fixture(runtime) else { return };
    let (d, tokens) = daemon(&fx, runtime);
    let tier = if runtime == "runsc" { "kernel" } else { "container" };
    session_suite::run(&Target::full(d.url(), tokens.clone(), "docker", tier));
    docker_cases(&d, &tokens[0], runtime);
    fault_cases(&d, &tokens[0], runtime);
    let out = run_script(SCRIPT, &[("URL", &d.url()), ("TOKEN", &tokens[0]), ("TIER", tier)]);
    assert_eq!(out, "docker sessions ok\n");
    let out = run_script(HELPERS_SCRIPT, &[("URL", &d.url()), ("TOKEN", &tokens[0]), ("TIER", tier)]);
    assert_eq!(out, "workspace ok\n");
    let env = [("URL", d.url()), ("TOKEN", tokens[0].clone()), ("TIER", tier.to_string())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(run_script(ANTHROPIC_SCRIPT, &env), "anthropic worker ok\n");
    assert_eq!(run_script(OPENAI_SCRIPT, &env), "openai sandbox ok\n");
    let host = env!("CARGO_BIN_EXE_plimsoll-host");
    let out = run_script(MCP_SCRIPT, &[("URL", &d.url()), ("TOKEN", &tokens[0]), ("TIER", tier), ("HOST", host)]);
    assert_eq!(out, "mcp on docker ok\n");
}

#[test]
fn docker_sessions_under_runc() {
    sessions("runc");
}

#[test]
fn docker_sessions_under_runsc() {
    sessions("runsc");
}
