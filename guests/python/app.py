"""The Python engine guest's world module.

componentize-py runs this module once, at build time, and snapshots the
interpreter it leaves. At run time the guest has no filesystem at all, so a
module that is not in the snapshot cannot be imported: this module therefore
imports the whole standard library that can run here (every top-level module and
its submodules), and a run starts with all of it loaded.
"""

import plimsoll_python  # first: it clears the build's environment before anything caches it

import importlib
import pkgutil
import sys
import warnings

import wit_world

# Not code for a sandbox: GUI, test suites, tools that print on import or want a
# terminal, and packaging helpers.
SKIP = {"this", "antigravity", "idlelib", "turtledemo", "turtle", "tkinter", "test", "__hello__", "__phello__",
        "ensurepip", "venv", "lib2to3", "pydoc_data", "_pyrepl", "pydoc", "webbrowser", "curses", "readline",
        "dbm", "sqlite3", "ctypes", "multiprocessing"}


def _load(name):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(name)
    except BaseException:  # a module this platform lacks (no threads, no processes)
        return None


for top in sorted(sys.stdlib_module_names):
    if top in SKIP or top.startswith("_test"):
        continue
    module = _load(top)
    path = getattr(module, "__path__", None)
    if path is None:
        continue
    for info in pkgutil.walk_packages(path, top + ".", onerror=lambda _name: None):
        if not any(part in SKIP or part.startswith("test") for part in info.name.split(".")):
            _load(info.name)

plimsoll_python.snapshot_done()


class WitWorld(wit_world.WitWorld):
    """The world exports no free functions; the interface holds everything."""
