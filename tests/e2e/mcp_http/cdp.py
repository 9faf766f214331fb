"""A small Chrome DevTools Protocol client over --remote-debugging-pipe, standard
library only: headless Chromium, a page, and the WebAuthn domain's virtual
authenticator, for driving the owner's passkey pages as a browser would.

The pipe: Chromium reads commands on its fd 3 and writes replies and events on
its fd 4, each message one JSON object ended by a NUL byte.

    with Chromium(spki=SPKI) as browser:
        page = browser.new_page()
        auth = page.add_virtual_authenticator()
        page.navigate("https://localhost:8443/")
        page.evaluate("document.getElementById('signin').click()")
        browser.credentials(auth)
"""

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


class CdpError(Exception):
    """A command answered with an error, or a script that threw."""


class Chromium:
    """Headless Chromium on a pipe. `spki` is the base64 SHA-256 of the server
    certificate's SubjectPublicKeyInfo, the one certificate it then accepts
    without a CA (the flag only works with a profile of its own, which each
    instance gets in a temporary directory)."""

    def __init__(self, spki=None, binary=CHROMIUM, args=(), timeout=30):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="plimsoll-chromium-")
        flags = [
            "--headless=new",
            "--no-sandbox",
            "--remote-debugging-pipe",
            f"--user-data-dir={self.profile}",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--password-store=basic",
        ]
        if spki:
            flags.append(f"--ignore-certificate-errors-spki-list={spki}")
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        # Above 4, so putting them at 3 and 4 in the child overwrites neither.
        child_in = fcntl.fcntl(cmd_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_out = fcntl.fcntl(out_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(cmd_r)
        os.close(out_w)

        def to_3_and_4():
            os.dup2(child_in, 3)  # dup2 leaves the copies inheritable
            os.dup2(child_out, 4)

        self.log = open(os.path.join(self.profile, "chromium.log"), "wb")
        self.proc = subprocess.Popen([binary, *flags, *args], stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, preexec_fn=to_3_and_4, close_fds=False)
        os.close(child_in)
        os.close(child_out)

        self._lock = threading.Condition()
        self._next = 0
        self._replies = {}
        self.events = []  # (method, params, sessionId), in arrival order
        self._listeners = []
        self._closed = False
        self._reader = threading.Thread(target=self._read, name="cdp-reader", daemon=True)
        self._reader.start()
        self._authenticators = {}  # authenticator id -> session id
        self.send("Target.setDiscoverTargets", {"discover": False})

    # The pipe.

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._out_r, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                line, buf = buf.split(b"\0", 1)
                if not line:
                    continue
                msg = json.loads(line)
                with self._lock:
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self.events.append((msg.get("method"), msg.get("params", {}), msg.get("sessionId")))
                        listeners = list(self._listeners)
                    self._lock.notify_all()
                if "id" not in msg:
                    for fn in listeners:
                        fn(msg.get("method"), msg.get("params", {}), msg.get("sessionId"))
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    def send(self, method, params=None, session_id=None, timeout=None):
        """Sends one command and waits for its reply's `result`; raises
        CdpError with the protocol's message on an `error`."""
        with self._lock:
            self._next += 1
            mid = self._next
        msg = {"id": mid, "method": method, "params": params or {}}
        if session_id:
            msg["sessionId"] = session_id
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self._cmd_w, data)
            data = data[n:]
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._lock:
            while mid not in self._replies:
                if self._closed:
                    raise CdpError(f"{method}: Chromium closed the pipe (exit {self.proc.poll()})")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CdpError(f"{method}: no reply in {timeout or self.timeout} s")
                self._lock.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error'].get('message')} {reply['error'].get('data', '')}".strip())
        return reply.get("result", {})

    def mark(self):
        """A position in the event list, for `wait_event(..., since=)`."""
        with self._lock:
            return len(self.events)

    def wait_event(self, method, session_id=None, since=0, predicate=None, timeout=None):
        """The first event `method` (of `session_id`, if given) at or after
        position `since` for which `predicate(params)` holds; its params."""
        deadline = time.monotonic() + (timeout or self.timeout)
        i = since
        with self._lock:
            while True:
                while i < len(self.events):
                    m, p, s = self.events[i]
                    i += 1
                    if m == method and (session_id is None or s == session_id) and (predicate is None or predicate(p)):
                        return p
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise CdpError(f"no {method} event in {timeout or self.timeout} s")
                self._lock.wait(left)

    def listen(self, fn):
        """Calls fn(method, params, session_id) for every later event, on the reader thread."""
        with self._lock:
            self._listeners.append(fn)

    # Pages and the virtual authenticator.

    def new_page(self, url="about:blank"):
        """A new tab, attached with a flat session."""
        target = self.send("Target.createTarget", {"url": url})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        page.send("Page.enable")
        page.send("Runtime.enable")
        return page

    def credentials(self, authenticator_id):
        """The credentials the virtual authenticator holds (the WebAuthn
        domain's Credential objects: credentialId, isResidentCredential,
        rpId, signCount, ...)."""
        session = self._authenticators[authenticator_id]
        return self.send("WebAuthn.getCredentials", {"authenticatorId": authenticator_id}, session)["credentials"]

    def bogus_signature(self, authenticator_id, on=True):
        """While on, the authenticator's assertions carry a signature that does not verify (a forgery)."""
        session = self._authenticators[authenticator_id]
        self.send("WebAuthn.setResponseOverrideBits", {"authenticatorId": authenticator_id, "isBogusSignature": on},
                  session)

    def user_verified(self, authenticator_id, on=True):
        """Whether the authenticator says it verified the user."""
        session = self._authenticators[authenticator_id]
        self.send("WebAuthn.setUserVerified", {"authenticatorId": authenticator_id, "isUserVerified": on}, session)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("Browser.close", timeout=5)
            except CdpError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for fd in (self._cmd_w,):
            try:
                os.close(fd)
            except OSError:
                pass
        self._reader.join(timeout=5)
        try:
            os.close(self._out_r)
        except OSError:
            pass
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Page:
    """One tab, reached through its flat session."""

    def __init__(self, browser, target_id, session_id):
        self.browser = browser
        self.target_id = target_id
        self.session_id = session_id
        self._captures = {}  # url substring -> [post bodies]
        self._network = False

    def send(self, method, params=None, timeout=None):
        return self.browser.send(method, params, self.session_id, timeout)

    def navigate(self, url, timeout=None):
        """Opens url and waits for its load event."""
        since = self.browser.mark()
        r = self.send("Page.navigate", {"url": url})
        if r.get("errorText"):
            raise CdpError(f"navigating to {url}: {r['errorText']}")
        self.browser.wait_event("Page.loadEventFired", self.session_id, since, timeout=timeout)

    def evaluate(self, expr, timeout=None):
        """The value of a JavaScript expression (a promise is awaited); raises
        CdpError with the exception's text if it threw."""
        r = self.send("Runtime.evaluate", {"expression": expr, "awaitPromise": True, "returnByValue": True,
                                           "userGesture": True}, timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text")
            raise CdpError(f"{expr[:80]!r} threw: {text}")
        return r.get("result", {}).get("value")

    def add_virtual_authenticator(self, **options):
        """Enables the WebAuthn domain and adds a CTAP2 platform authenticator
        that holds resident keys and verifies its user (a passkey provider
        with a PIN or biometric); `options` override those. Its id."""
        self.send("WebAuthn.enable", {"enableUI": False})
        opts = {"protocol": "ctap2", "transport": "internal", "hasResidentKey": True, "hasUserVerification": True,
                "isUserVerified": True, "automaticPresenceSimulation": True}
        opts.update(options)
        aid = self.send("WebAuthn.addVirtualAuthenticator", {"options": opts})["authenticatorId"]
        self.browser._authenticators[aid] = self.session_id
        return aid

    def capture_requests(self, url_part):
        """From now on, keeps the body of every request whose URL contains url_part."""
        if not self._network:
            self.send("Network.enable", {"maxPostDataSize": 1 << 20})
            self._network = True
            self.browser.listen(self._on_event)
        self._captures.setdefault(url_part, [])

    def _on_event(self, method, params, session_id):
        if method != "Network.requestWillBeSent" or session_id != self.session_id:
            return
        req = params.get("request", {})
        for part, bodies in self._captures.items():
            if part in req.get("url", "") and "postData" in req:
                bodies.append(req["postData"])

    def captured(self, url_part):
        """The bodies kept for url_part, oldest first."""
        return list(self._captures.get(url_part, []))

    def screenshot(self, path):
        import base64

        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
