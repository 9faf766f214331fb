#!/usr/bin/python3 -I
"""plimsoll's project runner: runs inside a sandbox image as the guest user.

Started ahead of its run (the host may keep it in its warm pool) as
`runner.py --waiting READY`, it writes READY to stdout and waits on stdin, whose
first line holds the run's start and end markers and whose rest is one JSON plan.
It writes the start marker to stderr, takes the report key out of the plan before
anything else exists, writes the files under /work, runs the steps with `sh -c` in
order (stopping at the first failure or timeout), reads back the artifacts, and
writes one report frame to stdout:

    \n<<<PLIMSOLL_REPORT_V2>>> <body length> <hex HMAC-SHA256(key, body)>\n<body>

then its last words, which let the host stop waiting before docker confirms the
exit: the end marker on stdout, and the end marker, its exit status and the end
marker on stderr. Run without `--waiting`, it reads the plan alone from stdin.

Steps share the runner's uid, so the runner makes itself non-dumpable first: a
step can then open neither /proc/<runner>/mem nor /proc/<runner>/environ, and the
plan descriptor is closed before the first step starts.
"""

import base64
import ctypes
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time

PR_SET_DUMPABLE = 4
MARKER = b"<<<PLIMSOLL_REPORT_V2>>>"
WORK = "/work"


def undumpable():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


def capped(data, cap):
    if len(data) > cap:
        return data[:cap], True
    return data, False


def safe_path(rel):
    if rel.startswith("/") or any(seg in ("", ".", "..") for seg in rel.split("/")):
        raise ValueError("illegal file path: " + rel)
    full = os.path.realpath(os.path.join(WORK, rel))
    if not full.startswith(WORK + "/"):
        raise ValueError("illegal file path: " + rel)
    return full


def report(key, body):
    raw = json.dumps(body, separators=(",", ":")).encode()
    mac = hmac.new(key, raw, hashlib.sha256).hexdigest()
    out = sys.stdout.buffer
    out.write(b"\n" + MARKER + b" " + str(len(raw)).encode() + b" " + mac.encode() + b"\n" + raw)
    out.flush()


# All steps' output together, so the report frame stays within the host's transport cap.
TOTAL_OUTPUT = 16 << 20


# What the host sets on a granted run's container so its code reaches the broker;
# steps get these and the plan's variables, nothing else of the runner's environment.
GRANT_ENV = ("PLIMSOLL_HOST_API", "PLIMSOLL_HOST_TOKEN", "PLIMSOLL_HOST_GLOBAL", "PLIMSOLL_HOST_ROUTES",
             "NODE_OPTIONS", "PYTHONPATH")


def step_env(plan):
    env = dict(plan.get("env") or {})
    if os.environ.get("PLIMSOLL_HOST_API"):
        env.update({k: os.environ[k] for k in GRANT_ENV if k in os.environ})
    return env


def run_steps(plan, deadline):
    per_stream = int(plan.get("maxOutput", 1 << 20))
    left_total = TOTAL_OUTPUT
    steps = []
    for command in plan.get("steps", []):
        left = deadline - time.monotonic()
        if left <= 0:
            steps.append({"command": command, "exitCode": 124, "timedOut": True, "durationMs": 0,
                          "stdout": "", "stderr": "", "stdoutTruncated": False, "stderrTruncated": False})
            break
        started = time.monotonic()
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=WORK, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=step_env(plan),
                                start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            out, err = proc.communicate()
        code = 124 if timed_out else proc.returncode
        if code < 0:
            code = 128 - code
        out, out_cut = capped(out, min(per_stream, left_total))
        left_total -= len(out)
        err, err_cut = capped(err, min(per_stream, left_total))
        left_total -= len(err)
        steps.append({
            "command": command, "exitCode": code, "timedOut": timed_out,
            "durationMs": int((time.monotonic() - started) * 1000),
            "stdout": base64.b64encode(out).decode(), "stderr": base64.b64encode(err).decode(),
            "stdoutTruncated": out_cut, "stderrTruncated": err_cut,
        })
        if timed_out or code != 0:
            break
    return steps


def artifacts(plan):
    cap = int(plan.get("maxArtifactBytes", 8 << 20))
    got, total, truncated = [], 0, False
    for rel in plan.get("artifacts", []):
        try:
            full = safe_path(rel)
            with open(full, "rb") as f:
                data = f.read(cap - total + 1)
        except (OSError, ValueError):
            continue
        if total + len(data) > cap:
            truncated = True
            break
        total += len(data)
        got.append({"path": rel, "content": base64.b64encode(data).decode()})
    return got, truncated


def waiting(ready):
    """Says READY, then reads the run's markers; writes the start marker to stderr."""
    sys.stdout.buffer.write(ready.encode())
    sys.stdout.buffer.flush()
    marker, end = sys.stdin.buffer.readline().split()
    sys.stderr.buffer.write(marker)
    sys.stderr.buffer.flush()
    return end


def last_words(end):
    sys.stdout.buffer.write(end)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(end + b"0" + end)
    sys.stderr.buffer.flush()


def main():
    undumpable()
    end = waiting(sys.argv[2]) if sys.argv[1:2] == ["--waiting"] and len(sys.argv) == 3 else None
    run(json.loads(sys.stdin.buffer.read()))
    if end is not None:
        last_words(end)


def run(plan):
    key = bytes.fromhex(plan.pop("reportKey"))
    os.close(0)
    os.open(os.devnull, os.O_RDONLY)
    deadline = time.monotonic() + plan.get("timeoutMs", 60000) / 1000.0
    try:
        for f in plan.get("files", []):
            full = safe_path(f["path"])
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as out:
                out.write(base64.b64decode(f["content"]))
    except (OSError, ValueError) as e:
        report(key, {"error": str(e)})
        return
    steps = run_steps(plan, deadline)
    arts, cut = artifacts(plan)
    report(key, {"steps": steps, "artifacts": arts, "artifactsTruncated": cut})


if __name__ == "__main__":
    main()
