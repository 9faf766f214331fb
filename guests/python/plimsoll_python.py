"""The Python engine's `plimsoll-python` interface: one interpreter per instance.

Code sees a work directory, `/work`, that lives in this instance's memory (so it
counts against the run's memory limit) and is reached through `open`, `io.open`,
`os` and `pathlib`. Nothing else of a filesystem exists: the host preopens no
directory, so a path outside `/work` is an ordinary `FileNotFoundError`. Output
goes to the host's console import, which keeps a capped prefix of each stream.
None of this is a wall: the walls are the host's (memory, deadline, no preopens,
no sockets). Code that undoes these patches only loses its own conveniences.
"""

import ast
import builtins
import importlib.util
import errno
import io
import linecache
import os
import posixpath
import stat as stat_module
import sys
import time
import traceback
import types

from wit_world.exports import plimsoll_python
from wit_world.imports import console

import plimsoll_host  # the grant's client (runners/host-api), built in; `grant` arms it

WORK = "/work"


class ConsoleRaw(io.RawIOBase):
    """A write-only raw stream into one of the host's console channels."""

    def __init__(self, channel):
        super().__init__()
        self.channel = channel

    def writable(self):
        return True

    def write(self, b):
        data = bytes(b)
        console.write(self.channel, data)
        return len(data)


def console_stream(channel):
    return io.TextIOWrapper(io.BufferedWriter(ConsoleRaw(channel)), encoding="utf-8", errors="backslashreplace",
                            write_through=True)


class Files:
    """The work directory: relative path -> bytes, plus the directories that exist."""

    def __init__(self):
        self.files = {}
        self.dirs = {""}
        self.cwd = ""

    def rel(self, path):
        """The work-relative path of `path`, or None when it lies outside the work directory."""
        path = os.fspath(path)
        if isinstance(path, bytes):
            path = path.decode("utf-8", "surrogateescape")
        if not isinstance(path, str):
            raise TypeError(f"expected str, bytes or os.PathLike object, not {type(path).__name__}")
        full = posixpath.normpath(posixpath.join(WORK, self.cwd, path))
        if full == WORK:
            return ""
        if not full.startswith(WORK + "/"):
            return None
        return full[len(WORK) + 1:]

    def parent_exists(self, rel):
        return posixpath.dirname(rel) in self.dirs

    def write(self, rel, content):
        parts = rel.split("/")
        for i in range(1, len(parts)):
            self.dirs.add("/".join(parts[:i]))
        self.files[rel] = bytes(content)


FILES = Files()


def _missing(path):
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


class MemFile(io.BytesIO):
    """A work-directory file open for reading and/or writing; writes land on flush and close."""

    def __init__(self, rel, name, content, readable, writable, append):
        super().__init__(content)
        self.rel, self.name = rel, name
        self._readable, self._writable, self._append = readable, writable, append
        if append:
            self.seek(0, io.SEEK_END)

    def readable(self):
        return self._readable

    def writable(self):
        return self._writable

    def read(self, *a):
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        return super().read(*a)

    def read1(self, *a):
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        return super().read1(*a)

    def readinto(self, b):
        if not self._readable:
            raise io.UnsupportedOperation("not readable")
        return super().readinto(b)

    def write(self, b):
        if not self._writable:
            raise io.UnsupportedOperation("not writable")
        if self._append:
            self.seek(0, io.SEEK_END)
        return super().write(b)

    def flush(self):
        if self._writable and not self.closed:
            FILES.write(self.rel, self.getvalue())
        super().flush()

    def close(self):
        if not self.closed:
            self.flush()
        super().close()


_real_open = io.open


def work_open(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None, closefd=True, opener=None):
    """`open` over the work directory; file descriptors go to the real `open`."""
    if isinstance(file, int):
        return _real_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
    if not isinstance(mode, str) or set(mode) - set("rwaxbt+") or len(set(mode) & set("rwax")) != 1:
        raise ValueError(f"invalid mode: {mode!r}")
    rel = FILES.rel(file)
    name = os.fspath(file)
    if rel is None:
        raise _missing(name)
    if rel in FILES.dirs:
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
    kind = (set(mode) & set("rwax")).pop()
    plus = "+" in mode
    exists = rel in FILES.files
    if kind == "r" and not exists:
        raise _missing(name)
    if kind == "x" and exists:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), name)
    if kind != "r" and not FILES.parent_exists(rel):
        raise _missing(name)
    content = FILES.files.get(rel, b"") if kind in "ra" else b""
    raw = MemFile(rel, name, content, kind == "r" or plus, kind != "r" or plus, kind == "a")
    if kind != "r":
        FILES.write(rel, raw.getvalue())
    if "b" in mode:
        if encoding is not None or errors is not None or newline is not None:
            raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
        return raw
    if buffering == 0:
        raise ValueError("can't have unbuffered text I/O")
    text = io.TextIOWrapper(raw, encoding=encoding or "utf-8", errors=errors, newline=newline,
                            write_through=True)
    text.mode = mode
    return text


def _stat_result(mode, size):
    now = int(time.time())
    return os.stat_result((mode, 0, 0, 1, 0, 0, size, now, now, now))


_real_stat = os.stat


def work_stat(path, *, dir_fd=None, follow_symlinks=True):
    if isinstance(path, int):
        return _real_stat(path)
    rel = FILES.rel(path)
    if rel is not None and rel in FILES.files:
        return _stat_result(stat_module.S_IFREG | 0o644, len(FILES.files[rel]))
    if rel is not None and rel in FILES.dirs:
        return _stat_result(stat_module.S_IFDIR | 0o755, 0)
    raise _missing(os.fspath(path))


def _children(rel, path):
    if rel is None or rel not in FILES.dirs:
        if rel is not None and rel in FILES.files:
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        raise _missing(path)
    prefix = rel + "/" if rel else ""
    names = set()
    for p in list(FILES.files) + list(FILES.dirs):
        if p and p.startswith(prefix):
            names.add(p[len(prefix):].split("/")[0])
    return sorted(names)


def work_listdir(path="."):
    return _children(FILES.rel(path), os.fspath(path))


class DirEntry:
    """What `os.scandir` yields, for the work directory."""

    def __init__(self, parent, name):
        self.name = name
        self.path = posixpath.join(parent, name)
        self._rel = FILES.rel(self.path)

    def is_dir(self, *, follow_symlinks=True):
        return self._rel in FILES.dirs

    def is_file(self, *, follow_symlinks=True):
        return self._rel in FILES.files

    def is_symlink(self):
        return False

    def stat(self, *, follow_symlinks=True):
        return work_stat(self.path)

    def inode(self):
        return 0

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"<DirEntry {self.name!r}>"


class _Scandir:
    def __init__(self, entries):
        self._it = iter(entries)

    def __iter__(self):
        return self._it

    def __next__(self):
        return next(self._it)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def close(self):
        pass


def work_scandir(path="."):
    parent = os.fspath(path)
    return _Scandir([DirEntry(parent, n) for n in _children(FILES.rel(parent), parent)])


def work_remove(path, *, dir_fd=None):
    rel = FILES.rel(path)
    if rel is None or rel not in FILES.files:
        if rel in FILES.dirs:
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        raise _missing(os.fspath(path))
    del FILES.files[rel]


def work_rename(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
    a, b = FILES.rel(src), FILES.rel(dst)
    if a is None or a not in FILES.files:
        raise _missing(os.fspath(src))
    if b is None or not FILES.parent_exists(b):
        raise _missing(os.fspath(dst))
    FILES.files[b] = FILES.files.pop(a)


def work_mkdir(path, mode=0o777, *, dir_fd=None):
    rel = FILES.rel(path)
    name = os.fspath(path)
    if rel is None or not FILES.parent_exists(rel):
        raise _missing(name)
    if rel in FILES.dirs or rel in FILES.files:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), name)
    FILES.dirs.add(rel)


def work_makedirs(name, mode=0o777, exist_ok=False):
    rel = FILES.rel(name)
    if rel is None:
        raise _missing(os.fspath(name))
    if rel in FILES.files:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(name))
    if rel in FILES.dirs and not exist_ok:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(name))
    parts = rel.split("/")
    for i in range(1, len(parts) + 1):
        FILES.dirs.add("/".join(parts[:i]))


def work_rmdir(path, *, dir_fd=None):
    rel = FILES.rel(path)
    if rel is None or rel not in FILES.dirs or rel == "":
        raise _missing(os.fspath(path))
    if _children(rel, os.fspath(path)):
        raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), os.fspath(path))
    FILES.dirs.discard(rel)


def work_getcwd():
    return posixpath.join(WORK, FILES.cwd) if FILES.cwd else WORK


def work_chdir(path):
    rel = FILES.rel(path)
    if rel is None or rel not in FILES.dirs:
        raise _missing(os.fspath(path))
    FILES.cwd = rel


# The build's environment must not reach a run through anything that caches it.
os.environ.clear()


class WorkFinder:
    """Imports `name.py` from the work directory, as `python3 FILE` does from FILE's directory."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        rel = fullname.replace(".", "/")
        for candidate, package in ((rel + ".py", False), (rel + "/__init__.py", True)):
            if candidate in FILES.files:
                spec = importlib.util.spec_from_loader(fullname, WorkLoader(candidate), is_package=package)
                if package:
                    spec.submodule_search_locations = [posixpath.join(WORK, rel)]
                return spec
        return None


# Modules imported from the work directory, dropped before the next program runs
# (a fresh `python3` would import them afresh).
WORK_MODULES = set()


class WorkLoader:
    def __init__(self, rel):
        self.rel = rel

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        WORK_MODULES.add(module.__name__)
        path = posixpath.join(WORK, self.rel)
        module.__file__ = path
        source = FILES.files[self.rel].decode("utf-8")
        exec(compile(source, path, "exec"), module.__dict__)


def _exit_status(e):
    """A SystemExit's status, as the interpreter's exit would set it."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


def _print_exception(e, first_frame):
    """The traceback from the user's first frame on, as the interpreter prints it."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != first_frame:
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(e), e, tb)))


def _status(run, first_frame):
    """Calls `run` and returns the exit status the interpreter would: 0, the
    `sys.exit` code, or 1 with the traceback (from `first_frame` on) on stderr."""
    try:
        run()
        status = 0
    except SystemExit as e:
        status = _exit_status(e)
    except BaseException as e:
        _print_exception(e, first_frame)
        status = 1
    _flush()
    return status


def _flush():
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass


class Unavailable:
    """Last on `sys.meta_path`: says why a module that is not built in cannot be imported."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        raise ModuleNotFoundError(
            f"No module named {fullname!r}: this Python (wasm, the process tier) imports only the standard "
            "library built into it, and no packages; the docker provider runs any Python",
            name=fullname)


def snapshot_done():
    """Called once the build has imported everything it snapshots: from here on the
    work directory replaces the filesystem (the build needed the real one to find
    the standard library)."""
    os.environ.clear()
    builtins.open = io.open = work_open
    os.stat, os.lstat = work_stat, work_stat
    os.listdir, os.scandir = work_listdir, work_scandir
    os.remove = os.unlink = work_remove
    os.rename = os.replace = work_rename
    os.mkdir, os.makedirs, os.rmdir = work_mkdir, work_makedirs, work_rmdir
    os.getcwd, os.chdir = work_getcwd, work_chdir
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")
    sys.meta_path.append(Unavailable)


class Interpreter(plimsoll_python.Interpreter):
    def __init__(self):
        # The snapshot holds one random state for every instance: draw a fresh seed
        # from the host's randomness (WASI random) for each interpreter.
        import random
        random.seed()
        self.main = types.ModuleType("__main__")
        self.main.__builtins__ = builtins
        self.namespace = self.main.__dict__

    def write_file(self, path, content):
        rel = FILES.rel(path)
        if rel is None or rel == "":
            raise ValueError(f"{path!r} is not a path inside the work directory")
        FILES.write(rel, content)

    def read_file(self, path):
        rel = FILES.rel(path)
        if rel is None:
            return None
        return FILES.files.get(rel)

    def run_file(self, path, args, isolated):
        sys.stdout, sys.stderr = console_stream(console.Channel.STDOUT), console_stream(console.Channel.STDERR)
        rel = FILES.rel(path)
        if rel is None or rel not in FILES.files:
            sys.stderr.write(f"python3: can't open file {path!r}: [Errno 2] No such file or directory\n")
            _flush()
            return 2
        filename = posixpath.join(WORK, rel)
        for name in WORK_MODULES:
            sys.modules.pop(name, None)
        WORK_MODULES.clear()
        sys.argv = [path, *args]
        finder_on = not isolated and WorkFinder not in sys.meta_path
        if finder_on:
            # Before Unavailable, which answers every name it is asked about.
            sys.meta_path.insert(sys.meta_path.index(Unavailable), WorkFinder)
        main = types.ModuleType("__main__")
        main.__file__ = filename
        sys.modules["__main__"] = main
        try:
            return _status(lambda: exec(compile(FILES.files[rel].decode("utf-8"), filename, "exec"), main.__dict__),
                           filename)
        finally:
            if finder_on:
                sys.meta_path.remove(WorkFinder)

    def grant(self, routes):
        plimsoll_host.GRANTED = None if routes is None else list(routes)

    def cell(self, code, number):
        sys.stdout, sys.stderr = console_stream(console.Channel.STDOUT), console_stream(console.Channel.STDERR)
        name = f"<cell {number}>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        sys.modules["__main__"] = self.main

        def run():
            tree = ast.parse(code, name, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            exec(compile(tree, name, "exec"), self.namespace)
            if last is not None:
                value = eval(compile(last, name, "eval"), self.namespace)
                if value is not None:
                    self.namespace["_"] = value
                    print(repr(value))

        return _status(run, name)

