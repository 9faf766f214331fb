#!/usr/bin/python3 -I
"""plimsoll's project runner: runs inside a sandbox image as the guest user.

Started ahead of its run (the host may keep it in its warm pool) as
`runner.py --waiting READY`, it writes READY to stdout and waits on stdin, whose
first line holds the run's start and end markers and whose rest is one JSON plan.
It writes the start marker to stderr, takes the report key out of the plan before
anything else exists, writes the files under its work directory (the plan's
`workDir`, else /work), runs the steps with `sh -c` there, in
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
import resource
import selectors
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


class Capped:
    """One output stream of a step: keeps at most `cap` bytes and counts the rest,
    so a step that floods its output never grows the runner's memory."""

    def __init__(self, cap):
        self.cap, self.data, self.cut = cap, bytearray(), False

    def take(self, chunk):
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.cut = True
        self.data += chunk[:max(room, 0)]


PAGE = os.sysconf("SC_PAGE_SIZE")
# Where a run's files live in memory: tmpfs pages count against the sandbox's limit.
MEMORY_MOUNTS = ("/work", "/tmp", "/dev/shm")


def private_bytes():
    """Every process's private resident memory (resident less file-backed pages)."""
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/statm", "rb") as f:
                fields = f.read().split()
            total += max(int(fields[1]) - int(fields[2]), 0) * PAGE
        except (OSError, ValueError, IndexError):
            pass
    return total


def tmpfs_mounts():
    try:
        with open("/proc/self/mounts") as f:
            found = {parts[1] for parts in (line.split() for line in f) if len(parts) > 2 and parts[2] == "tmpfs"}
    except OSError:
        return []
    return [m for m in MEMORY_MOUNTS if m in found]


def tmpfs_bytes(mounts):
    total = 0
    for m in mounts:
        try:
            st = os.statvfs(m)
            total += (st.f_blocks - st.f_bfree) * st.f_frsize
        except OSError:
            pass
    return total


def oom_kills():
    """The sandbox's OOM-kill count, where the cgroup shows it (v2, then v1)."""
    for path, key in (("/sys/fs/cgroup/memory.events", "oom_kill"),
                      ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill")):
        try:
            with open(path) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def meminfo_bytes():
    """The sandbox's anonymous memory, where /proc/meminfo is the sandbox's own
    (gVisor). File pages are left out, as the sandbox gives them back (a C compile
    maps some 220 MiB of LLVM and lives), and so are the tmpfs files, which their own
    size limits bound (a disk filler meets ENOSPC)."""
    with open("/proc/meminfo") as f:
        fields = {line.split(":")[0]: int(line.split()[1]) for line in f if line.count(":") == 1}
    return fields["AnonPages"] * 1024


def cgroup_reader():
    """The container's anonymous and shared memory from its cgroup (v2, then v1): what
    the kernel's OOM killer weighs, counted once however many processes map it."""
    for path, keys in (("/sys/fs/cgroup/memory.stat", ("anon", "shmem")),
                       ("/sys/fs/cgroup/memory/memory.stat", ("total_rss", "total_shmem"))):
        def read(path=path, keys=keys):
            with open(path) as f:
                fields = dict(line.split() for line in f if len(line.split()) == 2)
            return sum(int(fields[k]) for k in keys)
        try:
            read()
        except (OSError, KeyError, ValueError):
            continue
        return read
    return None


class Memory:
    """The step's memory wall inside the sandbox. The sandbox's own limit ends the
    whole sandbox under gVisor (the runner with it, and no report), so the runner
    keeps the sandbox's memory in use below that limit less a reserve (the sandbox
    kernel and growth between two samples), and ends the step itself first. Samples
    come faster as the headroom shrinks."""

    # The fastest growth to expect between samples (bytes per second) under gVisor,
    # for a few processes allocating at once.
    RATE = 2 << 30

    def __init__(self, limit, source):
        self.limit = limit
        # The reserve: growth between two samples, and what the measure leaves out
        # (the sandbox's kernel, file pages not yet given back).
        reserve = max(48 << 20, limit // 8)
        self.budget = limit - reserve if limit else 0
        # The best measure the sandbox offers: gVisor's /proc/meminfo is the sandbox's
        # own; a runc container's cgroup counts a page once however many processes map
        # it. Summing processes is the last resort: it counts copy-on-write pages again
        # in every fork.
        if source == "meminfo":
            self.read = meminfo_bytes
        else:
            mounts = tmpfs_mounts()
            self.read = cgroup_reader() or (lambda: private_bytes() + tmpfs_bytes(mounts))

    def used(self):
        try:
            return self.read()
        except (OSError, KeyError, ValueError):
            return 0

    def next_check(self, used):
        """Seconds until the next sample."""
        return min(0.05, max(0.002, (self.budget - used) / self.RATE))

    def note(self, used):
        mib = 1 << 20
        return ("\nplimsoll: the step ran out of memory: its processes and files held %d MiB, past the %d MiB a "
                "step may use (the sandbox's limit is %d MiB); plimsoll ended it\n"
                % (used // mib, self.budget // mib, self.limit // mib)).encode()

    def unknown_kill_note(self):
        return ("\nplimsoll: the step was killed (SIGKILL), not by plimsoll; the sandbox's memory limit is %d MiB "
                "and this sandbox does not show whether its OOM killer acted\n" % (self.limit >> 20)).encode()

    def kernel_note(self):
        return ("\nplimsoll: the step ran out of memory: the kernel's OOM killer ended it at the sandbox's limit "
                "of %d MiB\n" % (self.limit >> 20)).encode()


def processes():
    """Every process now, as (pid, start time): a pid reused later is another process."""
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat", "rb") as f:
                found.add((int(name), int(f.read().rsplit(b")", 1)[1].split()[19])))
        except (OSError, ValueError, IndexError):
            pass
    return found


def kill_started_since(before):
    """SIGKILL to every process that did not exist before the step (but the runner):
    a process the step started outside its group holds memory as well."""
    me = os.getpid()
    # Again while any is left: one may have forked between the listing and its kill.
    for _ in range(3):
        left = [pid for pid, _ in processes() - before if pid != me]
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        if not left:
            break


def task_cap(n):
    """In the step's child before exec: at most `n` tasks of this user (0: no cap)."""
    def cap():
        if n > 0:
            resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    return cap


def run_step(command, plan, left, out, err, memory):
    """Runs one step until its output ends and it exits, the deadline passes, or it
    outgrows the memory wall. Returns (exit code, timed out, out of memory note)."""
    kills_before = oom_kills()
    # Taken before the step starts: everything it starts is not in it.
    before = processes() if memory.budget else set()
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=WORK, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=step_env(plan),
                            start_new_session=True, preexec_fn=task_cap(int(plan.get("stepProcesses", 0))))
    deadline = time.monotonic() + left
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    sel.register(proc.stderr, selectors.EVENT_READ, err)
    check_at, note, timed_out = 0.0, b"", False
    while sel.get_map() or proc.poll() is None:
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            break
        if memory.budget and now >= check_at:
            used = memory.used()
            if used > memory.budget:
                note = memory.note(used)
                break
            check_at = now + memory.next_check(used)
        wait = deadline - now
        if memory.budget:
            wait = min(wait, max(check_at - now, 0.0))
        if not sel.get_map():
            time.sleep(min(wait, 0.01))
            continue
        for key, _ in sel.select(timeout=wait):
            chunk = os.read(key.fd, 1 << 16)
            if chunk:
                key.data.take(chunk)
            else:
                sel.unregister(key.fileobj)
                key.fileobj.close()
    stopped = timed_out or bool(note)
    if stopped:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        if note:
            kill_started_since(before)
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    sel.close()
    code = proc.wait()
    if code < 0:
        code = 128 - code
    if stopped:
        code = 124 if timed_out else 137
    elif code == 137 and memory.budget:
        kills = oom_kills()
        if kills_before is not None and kills is not None and kills > kills_before:
            note = memory.kernel_note()
        elif kills_before is None:
            note = memory.unknown_kill_note()
    return code, timed_out, note


def run_steps(plan, deadline):
    per_stream = int(plan.get("maxOutput", 1 << 20))
    memory = Memory(int(plan.get("memoryBytes", 0)), plan.get("memorySource", ""))
    left_total = TOTAL_OUTPUT
    steps = []
    for command in plan.get("steps", []):
        left = deadline - time.monotonic()
        if left <= 0:
            steps.append({"command": command, "exitCode": 124, "timedOut": True, "durationMs": 0,
                          "stdout": "", "stderr": "", "stdoutTruncated": False, "stderrTruncated": False})
            break
        started = time.monotonic()
        out = Capped(min(per_stream, left_total))
        err = Capped(min(per_stream, max(left_total - out.cap, 0)))
        code, timed_out, note = run_step(command, plan, left, out, err, memory)
        left_total -= len(out.data) + len(err.data)
        # The note is the runner's own words: it is kept whatever the step wrote.
        stderr = bytes(err.data) + note
        steps.append({
            "command": command, "exitCode": code, "timedOut": timed_out,
            "durationMs": int((time.monotonic() - started) * 1000),
            "stdout": base64.b64encode(bytes(out.data)).decode(), "stderr": base64.b64encode(stderr).decode(),
            "stdoutTruncated": out.cut, "stderrTruncated": err.cut,
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
    global WORK
    key = bytes.fromhex(plan.pop("reportKey"))
    WORK = plan.get("workDir") or WORK
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
