#!/usr/bin/python3 -I
"""plimsoll's session agent: runs inside a session's container as the guest user.

    agent.py init         the container's main process: reaps orphans, nothing else
    agent.py              one session call: a JSON request on stdin
    agent.py keep LANG    a kept interpreter's keeper (started by a call, detached)

A call sweeps first (every process but PID 1, itself and the kept keepers and
interpreters the request names is killed), writes the request's files under /work,
runs the payload, sweeps again and measures the session's storage. The payload's
stdout and stderr go to the agent's own, capped; the last thing on stderr is the
trailer, which only a reader who knows the call's nonce can find:

    \\n<nonce> <JSON status>\\n

The agent makes itself non-dumpable before it reads the request, so code running
beside it (same uid) can read neither its memory nor its descriptors, and never
learns the nonce.

A keeper owns one interpreter (`cell.py` or `cell.js`) and its pipes, listens on
/tmp/.plimsoll-interp/LANG.sock, runs one cell per connection and enforces the
cell's deadline by killing the interpreter's process group. Frames to the agent:
one type byte (o stdout, e stderr, x status), a 4-byte big-endian length, the body.
"""

import base64
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The project runner sits beside the agent in the image (/opt/plimsoll, read-only);
# `-I` keeps the script's directory off the path, so it is added here, by name.
sys.path.insert(0, HERE)
from runner import WORK, safe_path, undumpable  # noqa: E402

MOUNTS = ("/work", "/tmp", "/dev/shm")
SOCKETS = "/tmp/.plimsoll-interp"
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
INTERPRETERS = {
    "python": ["/usr/bin/python3", "-I", HERE + "/cell.py", "plimsoll-interp/python"],
    "javascript": ["/usr/bin/node", HERE + "/cell.js", "plimsoll-interp/javascript"],
}
SNIPPETS = {"python": ["/usr/bin/python3", "-I", "-"], "javascript": ["/usr/bin/node", "-"]}
KEEPER_START = 10.0
SWEEP_ROUNDS = 50


def start_time(pid):
    """The process's start time in clock ticks, or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    if fields[0] == b"Z":
        return None
    return int(fields[19])


def identity(pid):
    st = start_time(pid)
    return None if st is None else [pid, st]


def sweep(keep):
    """Kills every process but PID 1, this one and `keep` ([pid, start] pairs).
    Returns how many survived every round (0 unless something resists)."""
    kept = {tuple(k) for k in keep}
    me = os.getpid()
    left = []
    for _ in range(SWEEP_ROUNDS):
        left = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in (1, me):
                continue
            st = start_time(pid)
            if st is None or (pid, st) in kept:
                continue
            left.append(pid)
        if not left:
            return 0
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except PermissionError:
                pass
        time.sleep(0.002)
    return len(left)


def disk_used_kb():
    used = 0
    for m in MOUNTS:
        try:
            s = os.statvfs(m)
        except OSError:
            continue
        used += (s.f_blocks - s.f_bfree) * s.f_frsize
    return used // 1024


def write_files(files):
    """Writes each file in order; the first that fails stops and is named."""
    for f in files:
        path = f["path"]
        try:
            full = safe_path(path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as out:
                out.write(base64.b64decode(f["content"]))
        except ValueError as e:
            return str(e)
        except OSError as e:
            return f"writing {path}: {e.strerror or e} (errno {e.errno})"
    return None


class Sink:
    """The agent's stdout and stderr, each capped at `cap` bytes."""

    def __init__(self, cap):
        self.cap = cap
        self.sent = {1: 0, 2: 0}
        self.cut = {1: False, 2: False}

    def write(self, fd, data):
        room = self.cap - self.sent[fd]
        if len(data) > room:
            self.cut[fd] = True
            data = data[:max(room, 0)]
        self.sent[fd] += len(data)
        while data:
            n = os.write(fd, data)
            data = data[n:]


def pump(streams, deadline, sink):
    """Copies {fd: sink_fd} until every stream ends or the deadline. True if it ended."""
    open_fds = dict(streams)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                del open_fds[fd]
            else:
                sink.write(open_fds[fd], data)
    return True


def exit_status(code):
    return 128 - code if code < 0 else code


def spawn(argv, stdin, stderr):
    """Starts `argv` in /work in its own session, with `stdin` written and closed."""
    proc = subprocess.Popen(argv, cwd=WORK, env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                            start_new_session=True)
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_snippet(req, sink, deadline):
    proc = spawn(SNIPPETS[req["language"]], req["code"].encode(), subprocess.PIPE)
    ended = pump({proc.stdout.fileno(): 1, proc.stderr.fileno(): 2}, deadline, sink)
    if ended:
        try:
            code = proc.wait(max(deadline - time.monotonic(), 0))
            return {"exit": exit_status(code), "timedOut": False}
        except subprocess.TimeoutExpired:
            pass
    kill_group(proc)
    return {"exit": 124, "timedOut": True}


def run_project(req, deadline):
    """Runs the project runner; its authenticated report frame is the result."""
    proc = spawn(["/usr/bin/python3", "-I", HERE + "/runner.py"], json.dumps(req["plan"]).encode(), subprocess.DEVNULL)
    sink = Sink(int(req.get("reportCap", 32 << 20)))
    # The runner keeps its own deadline; this one only bounds a runner that hangs.
    if pump({proc.stdout.fileno(): 1}, deadline + 5, sink):
        proc.wait()
        return {"exit": 0, "timedOut": False}
    kill_group(proc)
    return {"exit": 124, "timedOut": True}


def try_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return s
    except OSError:
        s.close()
        return None


def connect_keeper(language):
    """A connection to the language's keeper, started first when none answers."""
    path = f"{SOCKETS}/{language}.sock"
    s = try_connect(path)
    if s is not None:
        return s
    os.makedirs(SOCKETS, mode=0o700, exist_ok=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    subprocess.Popen(["/usr/bin/python3", "-I", os.path.abspath(__file__), "keep", language], cwd=WORK, env=ENV,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    give_up = time.monotonic() + KEEPER_START
    while time.monotonic() < give_up:
        s = try_connect(path)
        if s is not None:
            return s
        time.sleep(0.003)
    return None


def read_exact(s, n, deadline):
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        s.settimeout(left)
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def run_cell(req, sink, deadline, status):
    language = req["language"]
    conn = connect_keeper(language)
    if conn is None:
        status["refused"] = f"the {language} interpreter's keeper did not start within {KEEPER_START:.0f} s"
        return None
    ask = {"code": req["code"], "cell": req.get("cell", 0), "timeoutMs": req["timeoutMs"]}
    conn.sendall(json.dumps(ask).encode() + b"\n")
    # The keeper kills the interpreter at the deadline; this only bounds a keeper that hangs.
    hard = deadline + 3
    try:
        while True:
            kind, size = struct.unpack(">cI", read_exact(conn, 5, hard))
            body = read_exact(conn, size, hard)
            if kind == b"o":
                sink.write(1, body)
            elif kind == b"e":
                sink.write(2, body)
            elif kind == b"x":
                x = json.loads(body)
                break
    except (TimeoutError, EOFError, OSError, ValueError):
        status["lost"] = f"the {language} interpreter's keeper stopped answering"
        return None
    finally:
        conn.close()
    # The keeper names itself: gVisor's SO_PEERCRED does not name the listener.
    kept = [x.get("keeper")] + ([] if x.get("ended") else [x.get("interp")])
    status.update({"exit": x["exit"], "timedOut": x["timedOut"], "started": x["started"], "ended": x["ended"]})
    return [k for k in kept if k]


def call():
    undumpable()
    req = json.loads(sys.stdin.buffer.read())
    nonce = req.pop("nonce")
    os.close(0)
    os.open(os.devnull, os.O_RDONLY)
    started = time.monotonic()
    deadline = started + req.get("timeoutMs", 10000) / 1000.0
    keep = req.get("keep", {})
    status = {"leftover": 0}
    sink = Sink(int(req.get("maxOutput", 1 << 20)))
    status["leftover"] = sweep([k for ks in keep.values() for k in ks])
    kind = req["kind"]
    refused = None if kind == "project" else write_files(req.get("files", []))
    if refused:
        status["refused"] = refused
    elif kind == "cell":
        kept = run_cell(req, sink, deadline, status)
        if kept is None:
            keep.pop(req["language"], None)
        else:
            keep[req["language"]] = kept
    elif kind == "snippet":
        status.update(run_snippet(req, sink, deadline))
    elif kind == "project":
        status.update(run_project(req, deadline))
    elif kind != "ready":
        status["refused"] = f"unknown call kind {kind!r}"
    # A keeper that died since it was named is not kept.
    keep = {lang: ks for lang, ks in keep.items() if all(identity(k[0]) == k for k in ks)}
    status["leftover"] = max(status["leftover"], sweep([k for ks in keep.values() for k in ks]))
    status["keep"] = keep
    status["diskUsedKb"] = disk_used_kb()
    status["stdoutTruncated"] = sink.cut[1]
    status["stderrTruncated"] = sink.cut[2]
    status["ms"] = int((time.monotonic() - started) * 1000)
    os.write(2, b"\n" + nonce.encode() + b" " + json.dumps(status, separators=(",", ":")).encode() + b"\n")


def frame(conn, kind, body):
    conn.sendall(struct.pack(">cI", kind, len(body)) + body)


class Keeper:
    def __init__(self, language):
        self.language = language
        self.proc = None
        self.done = None
        # No cell has run in this interpreter yet.
        self.fresh = False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def spawn(self):
        done_r, done_w = os.pipe()
        self.proc = subprocess.Popen(INTERPRETERS[self.language] + [str(done_w)], cwd=WORK, env=ENV, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(done_w,),
                                     start_new_session=True)
        os.close(done_w)
        self.done = done_r
        self.fresh = True
        for f in (self.proc.stdout, self.proc.stderr):
            os.set_blocking(f.fileno(), False)

    def kill(self):
        kill_group(self.proc)
        os.close(self.done)
        self.proc = None

    def drain(self, conn):
        """Reads what the interpreter's pipes hold now; to `conn`, or dropped."""
        for kind, f in ((b"o", self.proc.stdout), (b"e", self.proc.stderr)):
            while True:
                try:
                    data = os.read(f.fileno(), 65536)
                except BlockingIOError:
                    break
                if not data:
                    break
                if conn is not None:
                    frame(conn, kind, data)

    def cell(self, conn, ask):
        if not self.alive():
            if self.proc is not None:
                self.kill()
            self.spawn()
        started, self.fresh = self.fresh, False
        interp = identity(self.proc.pid)
        deadline = time.monotonic() + ask["timeoutMs"] / 1000.0
        self.drain(None)
        try:
            self.proc.stdin.write(json.dumps({"code": ask["code"], "cell": ask["cell"]}).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        line = b""
        result = None
        while result is None:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([self.done, self.proc.stdout, self.proc.stderr], [], [], left)
            if self.done in ready:
                chunk = os.read(self.done, 4096)
                if not chunk:
                    break
                line += chunk
                if line.endswith(b"\n"):
                    result = json.loads(line)
                    break
            self.drain(conn)
        if result is not None:
            self.drain(conn)
            frame(conn, b"x", json.dumps({"exit": result["exit"], "timedOut": False, "started": started,
                                           "ended": False, "interp": interp,
                                           "keeper": identity(os.getpid())}).encode())
            return
        timed_out = time.monotonic() >= deadline and self.proc.poll() is None
        self.drain(conn)
        self.kill_and_report(conn, timed_out, started)

    def kill_and_report(self, conn, timed_out, started):
        self.proc.poll()
        code = self.proc.returncode
        self.kill()
        status = 124 if timed_out or code is None else exit_status(code)
        frame(conn, b"x", json.dumps({"exit": status, "timedOut": timed_out, "started": started,
                                       "ended": True, "keeper": identity(os.getpid())}).encode())


def keep(language):
    os.makedirs(SOCKETS, mode=0o700, exist_ok=True)
    path = f"{SOCKETS}/{language}.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)
    keeper = Keeper(language)
    keeper.spawn()
    while True:
        watch = [server]
        if keeper.alive():
            watch += [keeper.proc.stdout, keeper.proc.stderr]
        ready, _, _ = select.select(watch, [], [])
        if server not in ready:
            # Output between cells is nobody's: dropped.
            keeper.drain(None)
            continue
        conn, _ = server.accept()
        try:
            ask = json.loads(conn.makefile("rb").readline())
            keeper.cell(conn, ask)
        except (OSError, ValueError, KeyError):
            pass
        finally:
            conn.close()


def init():
    """PID 1: reaps every orphan the calls leave, so none lingers as a zombie."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while True:
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        signal.sigtimedwait({signal.SIGCHLD}, 60)


if __name__ == "__main__":
    if sys.argv[1:2] == ["init"]:
        init()
    elif sys.argv[1:2] == ["keep"]:
        keep(sys.argv[2])
    else:
        call()
