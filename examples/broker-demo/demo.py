#!/usr/bin/env python3
"""The broker demo: agent-style code reads and writes a small inventory API
through plimsoll's broker, at the process tier (JavaScript on wasm) and at the
container tier (Python on docker), and the credential never enters a sandbox.

    python3 demo.py [--host PATH] [--docker] [--out DIR]

It starts `api.py` on 127.0.0.1 (the API verifies an HS256 JWT on every call),
writes a grant profile for it, starts `plimsoll-host serve` with that profile
(wasm; with --docker also the docker provider, using the checkout's image and
plugin, signed here with a throwaway key), runs one agent task per tier with the
published client `plimsoll-client`, and writes the operator's efficiency report
(`plimsoll-host advise`) for the container run into --out. Every step is
checked; a failed check exits 1.
"""

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from plimsoll_client import Client

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# Agent-style JavaScript: read the whole inventory in one call, reorder what is low.
JS_TASK = """(async () => {
  const { items } = await host.get("/items");
  const low = items.filter((i) => i.stock < 50);
  const made = [];
  for (const i of low) made.push(await host.post("/items", { name: i.name + "-reorder" }));
  console.log(JSON.stringify({ checked: items.length, reordered: made.map((m) => m.name), by: made[0].created_by }));
})()"""

# Agent-style Python: look items up one by one (the advisor will point at the batch
# route), then record a stock check.
PY_TASK = """import json
import plimsoll_host as host
items = [host.get("/items/*", [i]) for i in range(1, 9)]
total = sum(i["stock"] for i in items)
made = host.post("/items", {"name": f"stock-check-{total}"})
try:
    host.get("/items/*", [999])
except host.HostApiError as e:
    missing = e.status
print(json.dumps({"items": len(items), "total_stock": total, "recorded": made["name"], "by": made["created_by"], "missing": missing}))
"""


def check(cond, what):
    if not cond:
        print(f"demo: check failed: {what}", file=sys.stderr)
        sys.exit(1)


def host_binary(given):
    if given:
        return given
    for p in (ROOT / "target/debug/plimsoll-host", ROOT / "target/release/plimsoll-host"):
        if p.exists():
            return str(p)
    return "plimsoll-host"


def start_daemon(host, env, log_path):
    log = open(log_path, "w")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PLIMSOLL_", "SANDBOX_"))}
    full.update(env, PLIMSOLL_ADDR="127.0.0.1:0", PLIMSOLL_METRICS_ADDR="off")
    proc = subprocess.Popen([host, "serve"], env=full, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.time() + 120
    while time.time() < deadline:
        for line in open(log_path):
            if '"msg":"listening"' in line:
                return proc, "http://" + json.loads(line)["addr"]
        if proc.poll() is not None:
            sys.exit("demo: the daemon did not start:\n" + open(log_path).read())
        time.sleep(0.05)
    sys.exit("demo: the daemon did not listen within 120 s")


def caller(host, clients, name):
    out = subprocess.run([host, "callers", "create", "--file", str(clients), "--id", name],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def signed_docker_plugin(host, work):
    plugin = work / "docker-plugin"
    plugin.mkdir()
    for f in ("docker.wasm", "plugin.toml"):
        (plugin / f).write_bytes((ROOT / "plugins/out/docker" / f).read_bytes())
    subprocess.run([host, "plugin", "keygen", str(work / "demo-key")], check=True, capture_output=True)
    subprocess.run([host, "plugin", "sign", "--key", str(work / "demo-key.key"), str(plugin)], check=True,
                   capture_output=True)
    return plugin, work / "demo-key.pub"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", help="the plimsoll-host binary (default: the checkout's build, then PATH)")
    ap.add_argument("--docker", action="store_true", help="also run the container-tier task (needs dockerd, "
                    "images/build.sh and plugins/build.sh)")
    ap.add_argument("--runtime", default="runc", help="the docker runtime: runc (container) or runsc (kernel)")
    ap.add_argument("--out", default=".", help="where report.html goes")
    args = ap.parse_args()
    host = host_binary(args.host)
    work = Path(tempfile.mkdtemp(prefix="plimsoll-broker-demo-"))
    jwt_secret = secrets.token_hex(32)

    api = subprocess.Popen([sys.executable, str(HERE / "api.py")], env={**os.environ, "DEMO_JWT_SECRET": jwt_secret},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    api_url = api.stdout.readline().strip().removeprefix("listening ")
    print(f"demo API at {api_url}; its JWT secret is in the daemon's environment only")

    grants = work / "grants.json"
    grants.write_text(json.dumps({"profiles": {"inventory": {
        "base_url": api_url,
        "allow": ["GET /items", "GET /items/*", "POST /items"],
        "allowed_callers": ["agent"],
        "token": {"type": "jwt", "secret_env": "DEMO_JWT_SECRET", "audience": "inventory"},
        "batch_of": {"GET /items": ["GET /items/*"]},
        "advice": "caller",
        "advice_retention": "detailed",
    }}}))
    clients = work / "clients.json"
    token = caller(host, clients, "agent")
    base = {"PLIMSOLL_CLIENTS_FILE": str(clients), "PLIMSOLL_GRANTS_FILE": str(grants), "DEMO_JWT_SECRET": jwt_secret}
    procs = [api]
    try:
        wasm, wasm_url = start_daemon(host, {**base, "SANDBOX_PROVIDER": "wasm"}, work / "wasm.log")
        procs.append(wasm)
        r = Client(wasm_url, token=token).run_javascript(JS_TASK, grant_profile="inventory", minimum_isolation="process")
        check(r.exit_code == 0, f"the JavaScript task ran: {r.stderr!r}")
        out = json.loads(r.stdout)
        check(out["checked"] == 8 and out["by"] == "agent", f"the JavaScript task's answer: {out}")
        print(f"[{r.isolation}] JavaScript on wasm: read {out['checked']} items in one call, reordered "
              f"{', '.join(out['reordered'])} as {out['by']!r}; record {r.record.sha256[:16]}...")

        if args.docker:
            plugin, key = signed_docker_plugin(host, work)
            image = (ROOT / "images/out/sandbox.id").read_text().strip()
            docker_env = {**base, "SANDBOX_PROVIDER": "docker", "SANDBOX_DOCKER_IMAGE": image,
                          "SANDBOX_DOCKER_RUNTIME": args.runtime, "SANDBOX_DOCKER_PLUGIN": str(plugin),
                          "SANDBOX_DOCKER_PLUGIN_KEYS": str(key), "SANDBOX_DOCKER_PLUGIN_APPROVE": "containers,log"}
            docker, docker_url = start_daemon(host, docker_env, work / "docker.log")
            procs.append(docker)
            r = Client(docker_url, token=token).run_project({"task.py": PY_TASK}, ["python3 task.py"],
                                                            grant_profile="inventory", minimum_isolation="container")
            check(r.outcome == "completed" and r.steps[0].exit_code == 0, f"the Python task ran: {r.steps}")
            out = json.loads(r.steps[0].stdout)
            check(out["items"] == 8 and out["by"] == "agent" and out["missing"] == 404, f"the Python task: {out}")
            print(f"[{r.isolation}] Python on docker: looked up {out['items']} items one by one, recorded "
                  f"{out['recorded']!r} as {out['by']!r}; a missing item answered {out['missing']}")
            for f in r.advice:
                print(f"  advice: {f.pattern} ({f.severity}) on {f.method} {f.route}: {f.detail}")
            check([(f.pattern, f.suggested_route) for f in r.advice] == [("fan_out", "/items")], "the advice")
            docker.terminate()
            docker.wait()
            report = Path(args.out) / "report.html"
            subprocess.run([host, "advise", str(work / "docker.log"), "--record", r.record.sha256[:16],
                            "--out", str(report)], check=True)
            print(f"operator's report: {report}")
            logs = (work / "docker.log").read_text()
            check(jwt_secret not in logs, "the secret never reaches the daemon's log")
        check(jwt_secret not in (work / "wasm.log").read_text(), "the secret never reaches the daemon's log")
        print("the credential stayed with the host: no sandbox, caller or log saw it")
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
