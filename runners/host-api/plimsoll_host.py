"""plimsoll's in-sandbox client for a run's grant (Python).

    import plimsoll_host as host
    item = host.get("/items/*", [42])
    made = host.post("/items", {"name": "flange"})

Each call goes to the host's broker over the run's Unix socket
(PLIMSOLL_HOST_API), or from a remote sandbox to the host's guard over HTTPS
(PLIMSOLL_HOST_GUARD); the broker matches the route, attaches the credential (which
never enters this sandbox) and enforces the budgets. `params` fill the route's `*`
segments in order. An answer outside 2xx raises HostApiError with `status` and
`body` (parsed JSON when the answer is JSON). Calls outside the granted routes are
refused here first, as a courtesy; the broker refuses them anyway. The routes are
PLIMSOLL_HOST_ROUTES, or, in a session whose call names its own grant, the
grant.json the host writes beside this module for that call.

It is importable from /run/plimsoll (on PYTHONPATH in a granted container); with
`python3 -I`, add `sys.path.insert(0, "/run/plimsoll")` first. The CPython guest
on the wasm provider carries this same module, built in: there the broker is the
host's `host-api` import and the routes are the ones the host installs (`GRANTED`).
"""

import http.client
import json
import os
import socket
import urllib.parse

__all__ = ["HostApiError", "call", "get", "post", "put", "patch", "delete"]

try:  # the CPython guest on the wasm provider
    from wit_world.imports import host_api as _host_import
except ImportError:  # a container: the broker is the run's Unix socket
    _host_import = None

#: On the wasm provider, the run's granted routes ("METHOD /path" lines), set by the
#: host before the run's code starts; None when the run holds no grant.
GRANTED = None


def _described():
    """The current call's grant where a session's calls name their own: the host
    describes it in grant.json beside this module while the call runs (the
    process reads it as it starts, as the Node client does). None otherwise."""
    if _host_import is not None:
        return None
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "grant.json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


_DESCRIBED = _described()


class HostApiError(Exception):
    """A call answered outside 2xx: by the API, or by the broker (403 not granted,
    413 too large, 429 budget or capacity, 502 upstream unavailable, 503 shedding)."""

    def __init__(self, status, body, text):
        super().__init__(f"host api {status}: {text}")
        self.status = status
        self.body = body


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=120)
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def _routes():
    out = []
    if _host_import is not None:
        lines = GRANTED or []
    elif isinstance(_DESCRIBED, dict) and isinstance(_DESCRIBED.get("routes"), list):
        lines = [r for r in _DESCRIBED["routes"] if isinstance(r, str)]
    else:
        lines = os.environ.get("PLIMSOLL_HOST_ROUTES", "").split("\n")
    for line in lines:
        if " " in line:
            method, path = line.split(" ", 1)
            out.append((method, path.split("/")))
    return out


def _permitted(method, path):
    segments = path.split("/")
    for m, want in _routes():
        if m != method or len(want) != len(segments):
            continue
        if all((w == "*" and s != "" and ":" not in s) or w == s for w, s in zip(want, segments)):
            return True
    return False


def _fill(route, params):
    if not isinstance(route, str):
        raise TypeError('the route must be a string such as "/items/*"')
    if params is None:
        return route
    values = list(params) if isinstance(params, (list, tuple)) else [params]
    segments = route.split("/")
    wild = segments.count("*")
    if wild != len(values):
        raise TypeError(f"route {route} has {wild} * segment(s) but {len(values)} param(s) were given")
    it = iter(values)
    out = []
    for s in segments:
        if s == "*":
            v = str(next(it))
            if v == "" or "/" in v:
                raise TypeError("a param fills one segment: it must be non-empty and hold no /")
            s = v
        out.append(s)
    return "/".join(out)


def call(method, route, body=None, params=None):
    """One call; returns the parsed JSON answer (or its text)."""
    path = _fill(route, params)
    if not _permitted(method, path):
        raise PermissionError(f"host api call not permitted by sandbox capability: {method} {path}")
    if _host_import is not None:
        answer = _host_import.call(method, path, None if body is None else json.dumps(body).encode())
        status, ctype, raw = answer.status, answer.content_type, bytes(answer.body)
    else:
        status, ctype, raw = _over_socket(method, path, body)
    text = raw.decode("utf-8", "replace")
    data = text
    if "json" in ctype:
        try:
            data = json.loads(text)
        except ValueError:
            pass
    if not 200 <= status <= 299:
        raise HostApiError(status, data, text)
    return data


def _over_socket(method, path, body):
    envelope = json.dumps({"method": method, "path": path, "body": None if body is None else json.dumps(body)})
    guard = os.environ.get("PLIMSOLL_HOST_GUARD")
    sock = os.environ.get("PLIMSOLL_HOST_API")
    headers = {"Content-Type": "application/json"}
    if guard:
        # A remote sandbox: the host's guard over HTTPS (the vendor's proxy adds
        # the run's credential on the way out); redirects are never followed.
        url = urllib.parse.urlsplit(guard)
        conn = http.client.HTTPSConnection(url.hostname, url.port or 443, timeout=120)
        target = url.path
        # Where no proxy can add the credential (dockercloud), the run's own
        # guard-only credential travels with the request.
        if os.environ.get("PLIMSOLL_HOST_GUARD_TOKEN"):
            headers["X-Plimsoll-Guard"] = os.environ["PLIMSOLL_HOST_GUARD_TOKEN"]
    elif sock:
        conn = _UnixConnection(sock)
        target = "/call"
        headers["Authorization"] = "Bearer " + os.environ.get("PLIMSOLL_HOST_TOKEN", "")
    else:
        raise RuntimeError("this run holds no grant (PLIMSOLL_HOST_API is unset)")
    try:
        conn.request("POST", target, body=envelope.encode(), headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


def get(route, params=None):
    return call("GET", route, None, params)


def delete(route, params=None):
    return call("DELETE", route, None, params)


def post(route, body=None, params=None):
    return call("POST", route, body, params)


def put(route, body=None, params=None):
    return call("PUT", route, body, params)


def patch(route, body=None, params=None):
    return call("PATCH", route, body, params)
