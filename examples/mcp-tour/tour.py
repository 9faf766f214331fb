"""The MCP tour: `plimsoll-host mcp` started over stdio exactly as an AI application
starts it, driven by the official Python MCP client (`mcp` from PyPI) through the
original's eight calls plus the refused fourth sandbox. Every answer is checked
here; the calls and answers are written to a recording (JSON) and to a
self-contained page that replays them (page.html with the recording inside).

    PLIMSOLL_URL=http://127.0.0.1:8746 PLIMSOLL_TOKEN_FILE=token \\
        python tour.py --host target/debug/plimsoll-host --out tour-out

The daemon must run Python and JavaScript sessions (the docker provider; see
README.md). The server's other settings come from this environment; the tour
sets its own run budget (5 s) and turns receipts on with a key it makes.
Exit status: 0 when every check passed, 1 when one failed (the recording is
still written, with the failure named), 2 on bad usage.
"""

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = Path(__file__).resolve().parent
RUN_BUDGET_MS = 5000
# Passed through to the server when set; nothing else of this environment reaches it.
PASSED = ["PLIMSOLL_URL", "PLIMSOLL_CALLER_TOKEN", "PLIMSOLL_TOKEN_FILE", "PLIMSOLL_MIN_ISOLATION",
          "PLIMSOLL_SOFTWARE_IDENTITY", "PLIMSOLL_MAX_SANDBOXES", "PLIMSOLL_SANDBOX_LIFETIME", "PATH", "HOME"]

PRIMES = """def is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True

print(is_prime(2**31 - 1), [n for n in range(90, 110) if is_prime(n)])
"""

SALES = "region,units\nnorth,12\nsouth,7\nnorth,5\neast,9\n"

TABLE = """import csv
from collections import Counter

units = Counter()
for row in csv.DictReader(open("sales.csv")):
    units[row["region"]] += int(row["units"])
for region in sorted(units):
    print(region, units[region])
"""

BROKEN_MEDIAN = """def median(xs):
    xs = sorted(xs)
    return xs[len(xs) / 2]

median(readings)"""

FIXED_MEDIAN = """def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

median(readings)"""

# 192.0.2.1 is TEST-NET-1, reserved for documentation: never routed anywhere.
FETCH = """import urllib.request
urllib.request.urlopen("http://192.0.2.1/", timeout=5)
print("fetched")
"""


class CheckFailed(Exception):
    """One expectation of the tour did not hold."""


class Tour:
    """The calls made so far, and what each was checked for."""

    def __init__(self, session):
        self.session = session
        self.steps = []

    def step(self, title, note):
        self.steps.append({"title": title, "note": note, "calls": [], "checks": []})

    async def call(self, tool, arguments):
        started = time.monotonic()
        answer = await self.session.call_tool(tool, arguments)
        ms = round((time.monotonic() - started) * 1000, 1)
        result = answer.structured_content or {}
        self.steps[-1]["calls"].append({"tool": tool, "arguments": arguments, "isError": bool(answer.is_error),
                                        "result": result, "ms": ms})
        return bool(answer.is_error), result

    async def ok(self, tool, arguments):
        err, result = await self.call(tool, arguments)
        if err:
            raise CheckFailed(f"step {len(self.steps)} ({self.steps[-1]['title']}): {tool} failed: {result!r}")
        return result

    def check(self, cond, what, detail=None):
        self.steps[-1]["checks"].append(what)
        if not cond:
            raise CheckFailed(f"step {len(self.steps)} ({self.steps[-1]['title']}): {what}; got {detail!r}")


def canonical(value):
    """The digest's encoding: keys sorted, no whitespace (what the server hashes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tool_list(tools):
    out = []
    for t in tools:
        a = t.annotations
        out.append({"name": t.name, "description": t.description, "inputSchema": t.input_schema,
                    "outputSchema": t.output_schema,
                    "annotations": {"readOnlyHint": a.read_only_hint, "destructiveHint": a.destructive_hint,
                                    "idempotentHint": a.idempotent_hint, "openWorldHint": a.open_world_hint}})
    return out


async def play(t, tools, info):
    tier = info["isolation"]
    py = lambda code, **kw: {"language": "python", "code": code, **kw}

    t.step("A primality check", "A fresh sandbox: nothing is kept after the call.")
    r = await t.ok("run_code", py(PRIMES))
    t.check(r["stdout"] == "True [97, 101, 103, 107, 109]\n" and r["exitCode"] == 0, "2^31-1 is prime, and the primes near 100 are listed", r)
    t.check((r["freshSandbox"], r["stateKept"], r["filesPersist"]) == (True, False, False), "a fresh sandbox that keeps nothing", r)
    t.check(r["isolation"] == tier, f"the answer states the daemon's tier ({tier})", r)
    first_record = r["recordSha256"]

    t.step("A table passed as a file", "The file is written into the working directory before the code runs.")
    r = await t.ok("run_code", py(TABLE, files=[{"path": "sales.csv", "content": SALES}]))
    t.check(r["stdout"] == "east 9\nnorth 17\nsouth 7\n", "units summed by region from sales.csv", r)

    t.step("Three calls in one interpreter", "A kept sandbox: a variable defined in one call exists in the next.")
    a = (await t.ok("open_sandbox", {}))["handle"]
    r = await t.ok("run_code", py("import statistics\nreadings = [12.5, 9.75, 14.0, 11.25]", handle=a))
    t.check(r["freshInterpreter"] and r["filesPersist"], "the first cell starts the interpreter", r)
    r = await t.ok("run_code", py("readings.append(10.5)\nlen(readings)", handle=a))
    t.check((r["stdout"], r["stateKept"]) == ("5\n", True), "the second cell sees readings (a trailing expression is displayed)", r)
    r = await t.ok("run_code", py("round(statistics.mean(readings), 2)", handle=a))
    t.check((r["stdout"], r["stateKept"]) == ("11.6\n", True), "the third cell sees the import and the appended reading", r)

    t.step("A failing median, then a fixed one", "A program that fails is a result with its exit code; the traceback names the cell.")
    r = await t.ok("run_code", py(BROKEN_MEDIAN, handle=a))
    t.check(r["exitCode"] == 1 and "TypeError" in r["stderr"] and "<cell 4>" in r["stderr"], "exit 1, a TypeError naming <cell 4>", r)
    r = await t.ok("run_code", py(FIXED_MEDIAN, handle=a))
    t.check((r["exitCode"], r["stdout"], r["stateKept"]) == (0, "11.25\n", True), "the median of the five readings", r)

    t.step("A refused network fetch", "The sandbox has no network: the fetch fails inside it and the run still reports.")
    r = await t.ok("run_code", py(FETCH))
    t.check(r["exitCode"] == 1 and "URLError" in r["stderr"] and "fetched" not in r["stdout"], "the fetch fails with URLError", r)

    t.step("Python writes a file that JavaScript reads", "One kept sandbox, two interpreters, one working directory.")
    b = (await t.ok("open_sandbox", {}))["handle"]
    await t.ok("run_code", py('import json\njson.dump({"primes": [97, 101, 103]}, open("result.json", "w"))', handle=b))
    r = await t.ok("run_code", {"language": "javascript", "handle": b,
                                "code": "JSON.parse(require('fs').readFileSync('result.json', 'utf8')).primes.reduce((x, y) => x + y)"})
    t.check((r["stdout"], r["filesPersist"]) == ("301\n", True), "JavaScript reads what Python wrote", r)

    t.step("An endless loop, stopped", f"Stopped at the run budget ({RUN_BUDGET_MS // 1000} s here; 50 s by default): exit 124, and the interpreter is lost but the files are not.")
    r = await t.ok("run_code", py("n = 0\nwhile True:\n    n += 1", handle=b))
    t.check((r["exitCode"], r["timedOut"]) == (124, True), "exit 124, timedOut", r)
    r = await t.ok("run_code", py("import os\n('n' in globals(), os.path.exists('result.json'))", handle=b))
    t.check((r["stdout"], r["freshInterpreter"]) == ("(False, True)\n", True), "a fresh interpreter; result.json still there", r)

    t.step("A record fetched by digest", "The checked run record of the first call, by its SHA-256.")
    r = await t.ok("get_record", {"sha256": first_record})
    rec = r["record"]
    t.check(rec["recordSha256"] == first_record and rec["isolation"] == tier, "the record names the digest and the tier", rec)

    t.step("A fourth sandbox, refused", "At most three sandboxes: a fourth open is refused, nothing ran, nothing is deleted, and the open handles are listed so the model decides which work to lose.")
    c = (await t.ok("open_sandbox", {}))["handle"]
    err, r = await t.call("open_sandbox", {})
    t.check(err and (r["ran"], r["reason"]) == ("no", "capacity"), "refused as capacity, ran: no", r)
    t.check(sorted(o["handle"] for o in r["open"]) == sorted([a, b, c]), "the three open handles are listed", r)
    r = await t.ok("run_code", py("len(readings)", handle=a))
    t.check((r["stdout"], r["stateKept"]) == ("5\n", True), "the first sandbox lost nothing", r)
    for h in (a, b, c):
        r = await t.ok("close_sandbox", {"handle": h})
        t.check(r["closed"] is True, f"{h} closed", r)


def receipts(host, pub, t):
    """Each receipt on its own, then the whole bundle (every sandbox is closed)."""
    lines = [c["result"]["receipt"] for s in t.steps for c in s["calls"] if "receipt" in c["result"]]
    if not lines:
        raise CheckFailed("no call carried a receipt")
    for line in lines:
        o = subprocess.run([host, "attest", "verify-entry", "--pub", str(pub), "--line", str(line["line"]), line["file"]],
                           capture_output=True, text=True)
        if o.returncode != 0:
            raise CheckFailed(f"receipt {line['file']}:{line['line']} did not verify: {o.stderr.strip()}")
    bundle = lines[0]["file"]
    o = subprocess.run([host, "attest", "verify", "--pub", str(pub), bundle], capture_output=True, text=True)
    if o.returncode != 0:
        raise CheckFailed(f"the receipts bundle did not verify: {o.stderr.strip()}")
    # The recording names the bundle by its file name only: the directory is this machine's.
    for line in lines:
        line["file"] = Path(line["file"]).name
    return {"receipts": len(lines), "bundle": Path(bundle).name, "verify": o.stdout.strip().splitlines()}


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="plimsoll-host", help="the plimsoll-host binary (default: from PATH)")
    ap.add_argument("--out", default="tour-out", help="where the recording, the page and the receipts go")
    args = ap.parse_args()
    if not os.environ.get("PLIMSOLL_URL"):
        print("tour: set PLIMSOLL_URL (and PLIMSOLL_CALLER_TOKEN or PLIMSOLL_TOKEN_FILE) to a daemon that runs docker sessions",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # The receipts directory is the tour's own: each tour starts one bundle afresh.
    shutil.rmtree(out / "receipts", ignore_errors=True)
    key = out / "receipts.key"
    if not key.exists():
        subprocess.run([args.host, "attest", "keygen", "--out", str(key)], check=True, capture_output=True)
    env = {k: os.environ[k] for k in PASSED if k in os.environ}
    env.update({"PLIMSOLL_RUN_TIMEOUT_MS": str(RUN_BUDGET_MS), "PLIMSOLL_SIGNING_KEY_FILE": str(key),
                "PLIMSOLL_RECEIPTS_DIR": str(out / "receipts")})
    recording = {"tour": "plimsoll MCP tour", "recordedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "server": ["plimsoll-host", "mcp"], "runBudgetMs": RUN_BUDGET_MS}
    failure = None
    t = None
    params = StdioServerParameters(command=args.host, args=["mcp"], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            # Caught here: escaping the client's task group would wrap it in an ExceptionGroup.
            try:
                init = await session.initialize()
                recording["serverInfo"] = {"name": init.server_info.name, "version": init.server_info.version}
                tools = tool_list((await session.list_tools()).tools)
                recording["tools"] = tools
                t = Tour(session)
                t.step("What the server runs on", "server_info: the provider, its tier, the floor in force, and the digest of the tool list.")
                info = await t.ok("server_info", {})
                recording["info"] = info
                digest = hashlib.sha256(canonical(tools).encode()).hexdigest()
                t.check(digest == info["toolsSha256"], "the listed tools match the server's own digest", digest)
                t.check(info["receipts"] is True, "receipts are on", info)
                await play(t, tools, info)
            except CheckFailed as e:
                failure = str(e)
    if failure is None:
        try:
            recording["receiptsCheck"] = receipts(args.host, Path(f"{key}.pub"), t)
        except CheckFailed as e:
            failure = str(e)
    recording["steps"] = t.steps if t else []
    recording["failure"] = failure
    token = env.get("PLIMSOLL_CALLER_TOKEN") or (Path(env["PLIMSOLL_TOKEN_FILE"]).read_text().strip()
                                                 if env.get("PLIMSOLL_TOKEN_FILE") else "")
    text = json.dumps(recording, indent=1, ensure_ascii=False)
    if token and token in text:
        print("tour: the caller token appears in the recording; nothing written", file=sys.stderr)
        return 1
    (out / "recording.json").write_text(text + "\n")
    page = (HERE / "page.html").read_text()
    # "<" only occurs inside JSON strings, so \u003c keeps the JSON equal and the script element closed.
    embedded = json.dumps(recording, ensure_ascii=False).replace("<", "\\u003c")
    (out / "tour.html").write_text(page.replace("{{RECORDING}}", embedded, 1))
    calls = sum(len(s["calls"]) for s in recording["steps"])
    if failure:
        print(f"tour: FAILED at {failure}", file=sys.stderr)
        return 1
    print(f"tour: {len(recording['steps'])} steps, {calls} calls, every check passed; "
          f"{recording['receiptsCheck']['receipts']} receipts verified; wrote {out}/recording.json and {out}/tour.html")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
