//! `plimsoll-host mcp` driven by the official Python MCP client (`mcp` from PyPI)
//! over stdio, exactly as an AI application starts it, against a live wasm daemon:
//! the tool list, each tool, the sandbox cap, failures that say whether code ran
//! (`no` on bad arguments or a refused floor, `maybe` when the daemon dies mid-call),
//! and a tool list checked against its digest.

use super::python::run_script;
use super::{Daemon, callers, scratch};

const SCRIPT: &str = r#"
import asyncio, hashlib, json, os, signal, threading
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HOST = os.environ["HOST"]

def server(url, token, floor="process"):
    env = {"PLIMSOLL_URL": url, "PLIMSOLL_CALLER_TOKEN": token, "PLIMSOLL_MIN_ISOLATION": floor,
           "PLIMSOLL_RUN_TIMEOUT_MS": "20000", "PATH": os.environ["PATH"]}
    return stdio_client(StdioServerParameters(command=HOST, args=["mcp"], env=env))

async def call(s, name, args):
    r = await s.call_tool(name, args)
    return r.is_error, r.structured_content

def canonical_tools(tools):
    out = []
    for t in tools:
        a = t.annotations
        out.append({"name": t.name, "description": t.description, "inputSchema": t.input_schema,
                    "outputSchema": t.output_schema,
                    "annotations": {"readOnlyHint": a.read_only_hint, "destructiveHint": a.destructive_hint,
                                    "idempotentHint": a.idempotent_hint, "openWorldHint": a.open_world_hint}})
    return json.dumps(out, sort_keys=True, separators=(",", ":"))

async def main():
    url, token = os.environ["URL"], os.environ["TOKEN"]
    async with server(url, token) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = (await s.list_tools()).tools
            assert [t.name for t in tools] == ["run_code", "open_sandbox", "close_sandbox", "get_record", "server_info"]
            for t in tools:
                assert t.input_schema["additionalProperties"] is False and t.output_schema["additionalProperties"] is False, t.name
            hints = {t.name: (t.annotations.read_only_hint, t.annotations.destructive_hint, t.annotations.idempotent_hint) for t in tools}
            assert hints["close_sandbox"] == (False, True, True) and hints["get_record"] == (True, False, True), hints

            # The tool list a host shows can be checked against the server's own digest.
            err, info = await call(s, "server_info", {})
            assert not err and (info["provider"], info["isolation"], info["floor"]) == ("wasm", "process", "process"), info
            assert hashlib.sha256(canonical_tools(tools).encode()).hexdigest() == info["toolsSha256"]
            tools[0].description += " (edited)"
            assert hashlib.sha256(canonical_tools(tools).encode()).hexdigest() != info["toolsSha256"]

            # A fresh run keeps nothing; its record can be fetched by digest.
            err, r = await call(s, "run_code", {"language": "javascript", "code": "6*7"})
            assert not err and (r["ran"], r["stdout"], r["exitCode"], r["isolation"]) == ("yes", "42\n", 0, "process"), r
            assert (r["freshSandbox"], r["stateKept"], r["filesPersist"]) == (True, False, False), r
            err, rec = await call(s, "get_record", {"sha256": r["recordSha256"]})
            assert not err and rec["record"]["recordSha256"] == r["recordSha256"], rec

            # A kept sandbox: files first, state across calls, a deadline loses the interpreter only.
            err, opened = await call(s, "open_sandbox", {})
            h = opened["handle"]
            err, r = await call(s, "run_code", {"language": "javascript", "code": "let n = JSON.parse(readFile('in.json')).n",
                                                "files": [{"path": "in.json", "content": "{\"n\": 41}"}], "handle": h})
            assert not err and r["freshInterpreter"] and r["filesPersist"], r
            err, r = await call(s, "run_code", {"language": "javascript", "code": "n + 1", "handle": h})
            assert (r["stdout"], r["stateKept"], r["freshInterpreter"]) == ("42\n", True, False), r
            err, r = await call(s, "run_code", {"language": "javascript", "code": "for(;;){}", "timeout_ms": 300, "handle": h})
            assert (r["exitCode"], r["timedOut"]) == (124, True), r
            err, r = await call(s, "run_code", {"language": "javascript", "code": "typeof n", "handle": h})
            assert (r["freshInterpreter"], r["stateKept"], r["stdout"]) == (True, False, "'undefined'\n"), r

            # The cap: a fourth sandbox is refused, names the open ones, deletes nothing.
            others = [(await call(s, "open_sandbox", {}))[1]["handle"] for _ in range(2)]
            err, r = await call(s, "open_sandbox", {})
            assert err and (r["ran"], r["reason"]) == ("no", "capacity"), r
            assert sorted(o["handle"] for o in r["open"]) == sorted([h] + others), r
            err, r = await call(s, "run_code", {"language": "javascript", "code": "typeof n", "handle": h})
            assert not err, r
            err, r = await call(s, "close_sandbox", {"handle": others[0]})
            assert (err, r["closed"]) == (False, True), r
            err, r = await call(s, "close_sandbox", {"handle": others[0]})
            assert (err, r["closed"]) == (False, False), r
            err, r = await call(s, "open_sandbox", {})
            assert not err, r

            # Bad arguments are refused before anything reaches the daemon.
            for args, needle in [
                ({"language": "javascript", "code": "1", "extra": 1}, "unknown field `extra`"),
                ({"language": "javascript", "code": 5}, "invalid type"),
                ({"language": "ruby", "code": "1"}, "is not python or javascript"),
                ({"language": "javascript", "code": "1", "files": [{"path": "../x", "content": ""}]}, "nothing ran"),
                ({"language": "javascript", "code": "1", "files": [{"path": f"f{i}", "content": ""} for i in range(201)]}, "201 files is over 200"),
                ({"language": "javascript", "code": "1", "handle": "sbx-nope"}, "no open sandbox has handle"),
            ]:
                err, r = await call(s, "run_code", args)
                assert err and r["ran"] == "no" and needle in r["message"], (args, r)
            # Python runs on the wasm daemon too (the CPython guest), fresh and kept.
            err, r = await call(s, "run_code", {"language": "python", "code": "6*7"})
            assert not err and (r["stdout"], r["isolation"], r["freshSandbox"]) == ("42\n", "process", True), r
            await call(s, "close_sandbox", {"handle": h})
            err, opened = await call(s, "open_sandbox", {})
            assert not err, opened
            for code, out in [("x = 41", ""), ("x + 1", "42\n")]:
                err, r = await call(s, "run_code", {"language": "python", "code": code, "handle": opened["handle"]})
                assert not err and r["stdout"] == out, r
            assert r["stateKept"], r

    # Receipts: each checked exchange is signed into a bundle as it comes; each result
    # names its line, which verify-entry checks on its own; once every sandbox is
    # closed the whole bundle verifies.
    receipts_env = {"PLIMSOLL_SIGNING_KEY_FILE": os.environ["KEY"], "PLIMSOLL_RECEIPTS_DIR": os.environ["RECEIPTS"]}
    env = {"PLIMSOLL_URL": url, "PLIMSOLL_CALLER_TOKEN": token, "PLIMSOLL_MIN_ISOLATION": "process",
           "PATH": os.environ["PATH"], **receipts_env}
    async with stdio_client(StdioServerParameters(command=HOST, args=["mcp"], env=env)) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            err, info = await call(s, "server_info", {})
            assert info["receipts"] is True, info
            lines = []
            err, r = await call(s, "run_code", {"language": "javascript", "code": "6*7"})
            lines.append(r["receipt"])
            err, opened = await call(s, "open_sandbox", {})
            for code in ["let k = 1", "k + 1"]:
                err, r = await call(s, "run_code", {"language": "javascript", "code": code, "handle": opened["handle"]})
                assert not err and "receipt" in r, r
                lines.append(r["receipt"])
            await call(s, "close_sandbox", {"handle": opened["handle"]})
    assert [l["line"] for l in lines] == [1, 4, 6], lines
    import subprocess
    for l in lines:
        out = subprocess.run([HOST, "attest", "verify-entry", "--pub", os.environ["KEY"] + ".pub", "--line", str(l["line"]), l["file"]],
                             capture_output=True, text=True)
        assert out.returncode == 0 and "on wasm (process)" in out.stdout, out
    out = subprocess.run([HOST, "attest", "verify", "--pub", os.environ["KEY"] + ".pub", lines[0]["file"]], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.count("chain closed") == 2, out

    # A floor above the provider's tier: refused, nothing ran.
    async with server(url, token, floor="kernel") as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            err, r = await call(s, "run_code", {"language": "javascript", "code": "1"})
            assert err and (r["ran"], r["reason"]) == ("no", "isolation"), r

    # A software-identity rule the provider cannot meet: refused, nothing ran.
    env = {"PLIMSOLL_URL": url, "PLIMSOLL_CALLER_TOKEN": token, "PLIMSOLL_MIN_ISOLATION": "process",
           "PLIMSOLL_SOFTWARE_IDENTITY": "sha256:" + "ab" * 32, "PATH": os.environ["PATH"]}
    async with stdio_client(StdioServerParameters(command=HOST, args=["mcp"], env=env)) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            err, info = await call(s, "server_info", {})
            assert info["softwareIdentity"] == "sha256:" + "ab" * 32, info
            err, r = await call(s, "run_code", {"language": "javascript", "code": "1"})
            assert err and (r["ran"], r["reason"]) == ("no", "environment"), r
            assert "outside the request's software rule" in r["message"], r

    # The daemon dies mid-call: the code may have run.
    async with server(os.environ["DOOMED_URL"], token) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            err, opened = await call(s, "open_sandbox", {})
            threading.Timer(1.0, lambda: os.kill(int(os.environ["DOOMED_PID"]), signal.SIGKILL)).start()
            err, r = await call(s, "run_code", {"language": "javascript", "code": "for(;;){}", "timeout_ms": 10000, "handle": opened["handle"]})
            assert err and r["ran"] == "maybe", r
    print("mcp ok")

asyncio.run(main())
"#;

#[test]
fn the_official_python_client_drives_every_tool_and_failures_say_whether_code_ran() {
    let dir = scratch("mcp");
    let (file, tokens) = callers(&dir, &["assistant"]);
    let file = file.display().to_string();
    let env = [
        ("SANDBOX_PROVIDER", "wasm"),
        ("PLIMSOLL_CLIENTS_FILE", file.as_str()),
        ("SANDBOX_RATE_PER_MIN", "0"),
        ("SANDBOX_MAX_SESSIONS", "8"),
    ];
    let d = Daemon::start(&env);
    let doomed = Daemon::start(&env);
    let key = dir.join("receipts.key");
    let o = super::host().args(["attest", "keygen", "--out"]).arg(&key).output().expect("keygen");
    assert!(o.status.success(), "{o:?}");
    let receipts = dir.join("receipts");
    let pid = doomed.pid().to_string();
    let out = run_script(
        SCRIPT,
        &[
            ("HOST", env!("CARGO_BIN_EXE_plimsoll-host")),
            ("URL", &d.url()),
            ("TOKEN", &tokens[0]),
            ("DOOMED_URL", &doomed.url()),
            ("DOOMED_PID", &pid),
            ("KEY", key.to_str().expect("utf8")),
            ("RECEIPTS", receipts.to_str().expect("utf8")),
        ],
    );
    assert_eq!(out, "mcp ok\n");
}
