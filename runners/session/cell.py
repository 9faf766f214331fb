#!/usr/bin/python3 -I
"""A session's kept Python interpreter, owned by the session agent (runners/agent).

It reads one JSON cell per line on stdin ({"code", "cell"}), runs it in one
namespace that every cell shares, and writes {"exit": N} as one line to the descriptor its last argument names
once the cell's output is flushed. A trailing expression's value is printed with
`repr`, as a notebook shows it; a raised error prints its traceback (the cell's
frames named `<cell N>`) and is exit 1; `SystemExit` is its code. Top-level
`await` works. Started with `-I`, so nothing in /work can shadow the standard
library at start; /work is then appended to the import path.
"""

import ast
import asyncio
import json
import linecache
import os
import sys
import traceback
import types

# The agent passes the descriptor it reads cell ends from as the last argument.
DONE = int(sys.argv[-1])
sys.path.append("/work")
# A session holding a grant: its client (`import plimsoll_host`) sits beside the
# socket it talks to (mounted on docker, written by the plugin where the host
# relays in), or, in a remote sandbox reaching the guard, is written where
# PYTHONPATH says (which the agent alone sets); `-I` drops PYTHONPATH.
if os.environ.get("PLIMSOLL_HOST_API"):
    sys.path.insert(0, os.path.dirname(os.environ["PLIMSOLL_HOST_API"]))
elif os.environ.get("PLIMSOLL_HOST_GUARD"):
    sys.path[0:0] = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
loop = asyncio.new_event_loop()


def run(code, name):
    """Compiles and runs one cell; returns the trailing expression's value or None."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(code, name, "exec", flags=ast.PyCF_ONLY_AST | flags)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    for compiled in (compile(tree, name, "exec", flags=flags),
                     compile(last, name, "eval", flags=flags) if last else None):
        if compiled is None:
            continue
        value = eval(compiled, namespace)
        if isinstance(value, types.CoroutineType):
            value = loop.run_until_complete(value)
    return value if last is not None else None


def report(exit_code):
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(DONE, json.dumps({"exit": exit_code}).encode() + b"\n")


def main():
    for line in sys.stdin:
        try:
            ask = json.loads(line)
        except ValueError:
            continue
        name = f"<cell {ask.get('cell', 0)}>"
        code = ask.get("code", "")
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        exit_code = 0
        try:
            value = run(code, name)
            if value is not None:
                namespace["_"] = value
                print(repr(value))
        except SystemExit as e:
            exit_code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if e.code is not None and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException as e:  # the cell's error is its result, never the interpreter's end
            tb = e.__traceback__
            # Drop this file's frames: the traceback starts in the cell.
            while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
                tb = tb.tb_next
            traceback.print_exception(type(e), e, tb)
            exit_code = 1
        report(exit_code)


if __name__ == "__main__":
    main()
