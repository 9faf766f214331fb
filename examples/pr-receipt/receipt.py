#!/usr/bin/env python3
"""The pieces of a pull-request receipt that are plain data work (standard library only).

    receipt.py request DIR STEP...   the RunRequest that runs DIR's files through STEPs,
                                     at the kernel tier or above, on stdout
    receipt.py outcome BUNDLE        the single run's outcome and each step's exit code;
                                     exit 0 only when every step passed at the kernel
                                     tier or above
    receipt.py matches BUNDLE DIR STEP...
                                     exit 0 when the bundle's signed request is exactly
                                     the one DIR and STEPs give (the receipt is this tree's)

The files are the project's tracked files (`git ls-files`) when DIR is the top of a
git work tree, else every file below DIR but `.git` and `node_modules`, in sorted
order, as UTF-8 text:
the same tree always gives the same request bytes.
"""

import base64
import json
import os
import subprocess
import sys

FLOOR = "kernel"


def git(root, *args):
    try:
        return subprocess.run(["git", "-C", root, *args], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def files(root):
    top = git(root, "rev-parse", "--show-toplevel")
    if top is not None and os.path.realpath(top.decode().strip()) == os.path.realpath(root):
        paths = [p.decode() for p in git(root, "ls-files", "-z").split(b"\0") if p]
    else:
        paths = []
        for here, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in (".git", "node_modules"))
            paths += [os.path.relpath(os.path.join(here, n), root) for n in names]
    if not paths:
        sys.exit(f"receipt.py: {root} holds no files to run")
    out = []
    for rel in sorted(paths):
        with open(os.path.join(root, rel), "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            sys.exit(f"receipt.py: {rel} is not UTF-8 text; a project's files travel as text")
        out.append({"path": rel.replace(os.sep, "/"), "content": text})
    return out


def request(root, steps):
    return {"project": {"files": files(root), "steps": list(steps)}, "minimumIsolation": FLOOR}


def single_run(bundle):
    """The stored request and response of the bundle's one single run."""
    runs = []
    with open(bundle, "rb") as f:
        for line in f:
            entry = json.loads(line)
            if "request" in entry and "response" in entry:
                runs.append((json.loads(base64.b64decode(entry["request"])), json.loads(base64.b64decode(entry["response"]))))
    if len(runs) != 1:
        sys.exit(f"receipt.py: a receipt holds one run; {bundle} holds {len(runs)}")
    return runs[0]


def outcome(bundle):
    _, resp = single_run(bundle)
    project = resp.get("project") or {}
    steps = project.get("steps") or []
    # The wire names the enum as protobuf JSON does (PROJECT_OUTCOME_COMPLETED).
    ended = str(project.get("outcome", "")).lower().removeprefix("project_outcome_")
    print(f"isolation {resp.get('isolation', '')}, outcome {ended}")
    for s in steps:
        print(f"  exit {s.get('exitCode', 0)}  {s.get('command', '')}")
    if resp.get("isolation") not in ("kernel", "vm"):
        print(f"receipt.py: the run stood behind the {resp.get('isolation')!r} tier, below {FLOOR!r}", file=sys.stderr)
        return 1
    passed = ended == "completed" and steps and all(s.get("exitCode", 0) == 0 for s in steps)
    if not passed:
        print("receipt.py: the steps did not all pass", file=sys.stderr)
    return 0 if passed else 1


def matches(bundle, root, steps):
    signed, _ = single_run(bundle)
    want = request(root, steps)
    mine = {k: signed.get(k) for k in want}
    if mine != want:
        print("receipt.py: the receipt's signed request is not this tree and these steps", file=sys.stderr)
        have = {f["path"]: f["content"] for f in (signed.get("project") or {}).get("files", [])}
        here = {f["path"]: f["content"] for f in want["project"]["files"]}
        for path in sorted(set(have) | set(here)):
            if have.get(path) != here.get(path):
                what = "only in the receipt" if path not in here else "only in the tree" if path not in have else "differs"
                print(f"  {path}: {what}", file=sys.stderr)
        if (signed.get("project") or {}).get("steps") != want["project"]["steps"]:
            print("  the steps differ", file=sys.stderr)
        if signed.get("minimumIsolation") != FLOOR:
            print(f"  the floor was {signed.get('minimumIsolation')!r}, not {FLOOR!r}", file=sys.stderr)
        return 1
    return 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "request":
        json.dump(request(argv[2], argv[3:]), sys.stdout, sort_keys=True)
        return 0
    if len(argv) == 3 and argv[1] == "outcome":
        return outcome(argv[2])
    if len(argv) >= 4 and argv[1] == "matches":
        return matches(argv[2], argv[3], argv[4:])
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
