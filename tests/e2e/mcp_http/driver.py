"""The HTTPS mode of plimsoll's MCP server, driven as its owner and its clients
would: headless Chromium with a virtual authenticator (CDP's WebAuthn domain)
registers the owner's passkey with the console's setup code and signs in; the
official MCP Python SDK connects over TLS through OAuth (its redirect goes to
the browser, where the owner approves or denies); the approved client lists and
calls the tools; scoping, revocation, and the refused inputs follow.

Environment: PUBLIC (https://localhost:PORT), CODE (the setup code), SPKI (the
certificate's SPKI SHA-256, base64, for Chromium), CA (the certificate, PEM, for
the SDK). Prints one line per stage; any failed check raises.
"""

import asyncio
import http.server
import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Chromium  # noqa: E402

PUBLIC = os.environ["PUBLIC"]
CODE = os.environ["CODE"]
CTX = ssl.create_default_context(cafile=os.environ["CA"])


def stage(text):
    print(text, flush=True)


def raw(method, path, body=b"", headers=None):
    """One request with nothing added: (status, headers, body)."""
    req = urllib.request.Request(PUBLIC + path, data=body if method != "GET" else None, method=method,
                                 headers=headers or {})
    try:
        with urllib.request.urlopen(req, context=CTX) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class Callback:
    """A loopback listener for the client's redirect URI, as a native client's."""

    def __init__(self, host="127.0.0.1"):
        self.host = host
        self.got = None
        self.event = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                if url.path != "/callback":  # the browser's favicon, say
                    self.send_response(404)
                    self.end_headers()
                    return
                outer.got = dict(urllib.parse.parse_qsl(url.query))
                outer.event.set()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"done")

            def log_message(self, *a):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://{host}:{self.server.server_port}/callback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, timeout=30):
        assert self.event.wait(timeout), "the browser never reached the client's redirect URI"
        self.event.clear()
        got, self.got = self.got, None
        return got


class Memory:
    """TokenStorage in memory; the test reads the tokens it holds."""

    def __init__(self):
        self.tokens = None
        self.client = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info):
        self.client = info


class Owner:
    """The owner's browser."""

    def __init__(self):
        self.browser = Chromium(spki=os.environ["SPKI"])
        self.page = self.browser.new_page()
        self.authenticator = self.page.add_virtual_authenticator()
        self.lock = threading.Lock()

    def open(self, url):
        self.page.navigate(url)

    def js(self, expr):
        return self.page.evaluate(expr)

    def wait_for(self, expr, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                v = self.js(f"!!({expr})")
            except Exception:  # a navigation in progress
                v = None
            if v:
                return v
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {expr}; page: {self.js('document.body.innerText')!r}")

    def status(self):
        return self.js("document.getElementById('status') ? document.getElementById('status').textContent : ''")

    def click(self, selector):
        # A page's buttons do nothing until its script has wired them.
        self.wait_for(f"document.body.dataset.ready === 'true' && document.querySelector({json.dumps(selector)})")
        self.js(f"document.querySelector({json.dumps(selector)}).click()")


def decide(owner, callback, approve):
    """The redirect handler's work: the owner's browser goes to the authorization
    URL, signed in, and approves or denies. Once only: a client that asks again
    (after its revocation) is not approved again."""
    asked = []

    async def redirect(url):
        asked.append(url)
        if len(asked) > 1:
            raise RuntimeError("the client asked to be authorized again; the owner does not approve it")

        def go():
            owner.open(url)
            owner.wait_for("location.pathname.startsWith('/approve/') && document.getElementById('approve')")
            name = owner.js("document.querySelector('#client .client').textContent")
            host = owner.js("document.querySelector('#client .redirect strong').textContent")
            assert host == callback.host, (host, callback.host)
            owner.click("#approve" if approve else "#deny")
            return name

        await asyncio.to_thread(go)

    async def back():
        got = await asyncio.to_thread(callback.wait)
        if "error" in got:
            raise RuntimeError(f"authorization refused: {got['error']}")
        return AuthorizationCodeResult(code=got["code"], state=got.get("state"), iss=got.get("iss"))

    return redirect, back


def client(owner, name, approve=True, host="127.0.0.1"):
    """An SDK client whose redirect URI is a loopback listener on `host`
    (Codex's is 127.0.0.1, Claude Code's localhost)."""
    callback = Callback(host)
    storage = Memory()
    redirect, back = decide(owner, callback, approve)
    meta = OAuthClientMetadata(client_name=name, redirect_uris=[callback.uri], grant_types=["authorization_code", "refresh_token"],
                               response_types=["code"], token_endpoint_auth_method="none", scope="mcp:tools")
    auth = OAuthClientProvider(PUBLIC + "/mcp", meta, storage, redirect_handler=redirect, callback_handler=back)
    http = httpx2.AsyncClient(auth=auth, verify=CTX, timeout=httpx2.Timeout(60, read=120))
    return http, storage


def flatten(e):
    """The leaves of an exception group (the SDK raises from its task groups)."""
    if isinstance(e, BaseExceptionGroup):
        return [leaf for sub in e.exceptions for leaf in flatten(sub)]
    return [e]


async def call(s, tool, args):
    r = await s.call_tool(tool, args)
    return r.is_error, r.structured_content


def register_and_sign_in(owner):
    owner.open(PUBLIC + "/")
    owner.wait_for("document.getElementById('register')")
    # A wrong setup code is refused by name, and no passkey is made.
    owner.js("document.getElementById('setup-code').value = 'WRONG-CODE-0000'")
    owner.click("#register")
    owner.wait_for("document.body.dataset.state === 'error'")
    assert "setup code" in owner.status(), owner.status()
    assert owner.browser.credentials(owner.authenticator) == [], "a passkey was made with a wrong code"
    owner.js(f"document.getElementById('setup-code').value = {json.dumps(CODE)}")
    owner.click("#register")
    owner.wait_for("document.getElementById('signout')")
    creds = owner.browser.credentials(owner.authenticator)
    assert len(creds) == 1, creds
    stage("passkey registered with the console's code; a wrong code refused")
    # The setup code is spent: registering again is refused.
    s, _, b = raw("POST", "/passkey/register/start", json.dumps({"code": CODE}).encode(),
                  {"Origin": PUBLIC, "Content-Type": "application/json"})
    assert s in (403, 409), (s, b)


def sign_in_refusals(owner):
    """A forged assertion (a bad signature) and a replayed one are refused; a
    real one signs in."""
    owner.click("#signout")
    owner.wait_for("document.getElementById('signin')")
    owner.browser.bogus_signature(owner.authenticator, True)
    owner.click("#signin")
    owner.wait_for("document.body.dataset.state === 'error'")
    forged = owner.status()
    owner.browser.bogus_signature(owner.authenticator, False)
    assert owner.js("!!document.getElementById('signin')"), "a forged assertion signed in"
    stage(f"forged assertion refused: {forged}")

    owner.page.capture_requests("/passkey/signin/finish")
    owner.click("#signin")
    owner.wait_for("document.getElementById('none') || document.getElementById('approvals')")
    finish = owner.page.captured("/passkey/signin/finish")
    assert finish, "the sign-in's finish request was not seen"
    headers = {"Origin": PUBLIC, "Content-Type": "application/json"}
    s, h, same = raw("POST", "/passkey/signin/finish", finish[-1].encode(), headers)
    assert s == 401 and "set-cookie" not in {k.lower() for k in h}, (s, same)
    again = json.loads(finish[-1])
    s, _, started = raw("POST", "/passkey/signin/start", b"{}", headers)
    assert s == 200, (s, started)
    again["ceremony"] = json.loads(started)["ceremony"]
    s, h, fresh = raw("POST", "/passkey/signin/finish", json.dumps(again).encode(), headers)
    assert s == 401 and "set-cookie" not in {k.lower() for k in h}, (s, fresh)
    stage(f"replayed assertion refused: to its own ceremony ({json.loads(same)['error']}), "
          f"to a new one ({json.loads(fresh)['error']})")


def add_passkey(owner):
    """The signed-in owner adds a passkey on a second device (a second virtual
    authenticator, the first removed), and the second one signs in."""
    owner.page.send("WebAuthn.removeVirtualAuthenticator", {"authenticatorId": owner.authenticator})
    owner.authenticator = owner.page.add_virtual_authenticator()
    owner.click("#add-passkey")
    owner.wait_for("(document.getElementById('passkeys') || {}).textContent.includes('2 passkeys')")
    assert len(owner.browser.credentials(owner.authenticator)) == 1
    owner.click("#signout")
    owner.wait_for("document.getElementById('signin')")
    owner.click("#signin")
    owner.wait_for("document.getElementById('add-passkey')")
    stage("a second passkey added by the signed-in owner signs in")


async def main():
    owner = Owner()
    try:
        register_and_sign_in(owner)
        sign_in_refusals(owner)
        add_passkey(owner)

        # Client A: approved, lists and calls the tools over TLS.
        http_a, tokens_a = client(owner, "client-A")
        # A revoked client's next request is refused 401; the SDK then asks to
        # be authorized again, which the owner does not do, so its session fails.
        revoked = []
        try:
            async with http_a, streamable_http_client(PUBLIC + "/mcp", http_client=http_a) as (r, w, *_):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    tools = [t.name for t in (await s.list_tools()).tools]
                    assert tools == ["run_code", "open_sandbox", "close_sandbox", "get_record", "server_info"], tools
                    err, info = await call(s, "server_info", {})
                    assert not err and info["isolation"] in ("kernel", "vm") and info["receipts"], info
                    err, ran = await call(s, "run_code", {"language": "python", "code": "6*7"})
                    assert not err and (ran["stdout"], ran["isolation"]) == ("42\n", info["isolation"]), ran
                    assert "receipt" in ran, ran
                    err, opened = await call(s, "open_sandbox", {})
                    assert not err, opened
                    handle_a = opened["handle"]
                    err, r1 = await call(s, "run_code", {"language": "python", "code": "x = 41", "handle": handle_a})
                    assert not err, r1
                    stage(f"client A approved: tools listed, code ran at {ran['isolation']}, sandbox {handle_a} open")

                    # Client B: the owner denies it; it gets no token.
                    http_b, tokens_b = client(owner, "client-B", approve=False)
                    try:
                        async with http_b, streamable_http_client(PUBLIC + "/mcp", http_client=http_b) as (rb, wb, *_):
                            async with ClientSession(rb, wb) as sb:
                                await sb.initialize()
                        raise AssertionError("a denied client connected")
                    except AssertionError:
                        raise
                    except BaseException as e:  # the SDK raises inside its task group
                        assert tokens_b.tokens is None, "a denied client holds tokens"
                        stage(f"client B denied and refused ({type(e).__name__})")

                    # Client C: approved, but sees nothing of A's.
                    http_c, _ = client(owner, "client-C", host="localhost")
                    async with http_c, streamable_http_client(PUBLIC + "/mcp", http_client=http_c) as (rc, wc, *_):
                        async with ClientSession(rc, wc) as sc:
                            await sc.initialize()
                            err, r2 = await call(sc, "run_code", {"language": "python", "code": "x", "handle": handle_a})
                            assert err and r2["ran"] == "no" and "no open sandbox has handle" in r2["message"], r2
                            err, r3 = await call(sc, "close_sandbox", {"handle": handle_a})
                            assert not err and r3["closed"] is False, r3
                            err, r4 = await call(sc, "get_record", {"sha256": ran["recordSha256"]})
                            assert err and r4["ran"] == "no", r4
                    stage("client C cannot use, close or read client A's sandbox and record")
                    err, r5 = await call(s, "run_code", {"language": "python", "code": "x + 1", "handle": handle_a})
                    assert not err and r5["stdout"] == "42\n", r5

                    # The owner revokes A on the dashboard; A's next call is refused.
                    owner.open(PUBLIC + "/")
                    owner.wait_for("document.getElementById('approvals')")
                    rows = owner.js("[...document.querySelectorAll('#approvals tbody tr')].map(r => r.querySelector('.client').textContent)")
                    assert sorted(rows) == ["client-A", "client-C"], rows
                    # A cross-origin revoke (a page elsewhere posting the form) is refused.
                    approval_a = owner.js("[...document.querySelectorAll('#approvals tbody tr')].find(r => r.querySelector('.client').textContent === 'client-A').dataset.approval")
                    st, _, _ = raw("POST", f"/approvals/{approval_a}/revoke", b"csrf=x",
                                   {"Origin": "https://evil.example", "Content-Type": "application/x-www-form-urlencoded"})
                    assert st == 403, st
                    old, old_refresh = tokens_a.tokens.access_token, tokens_a.tokens.refresh_token or ""
                    owner.js("[...document.querySelectorAll('#approvals tbody tr')].find(r => r.querySelector('.client').textContent === 'client-A').querySelector('.revoke').click()")
                    owner.wait_for("![...document.querySelectorAll('#approvals tbody tr .client')].some(c => c.textContent === 'client-A')")
                    st, h, _ = raw("POST", "/mcp", json.dumps({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}).encode(),
                                   {"Authorization": f"Bearer {old}", "Accept": "application/json, text/event-stream",
                                    "Content-Type": "application/json"})
                    assert st == 401 and "invalid_token" in h.get("www-authenticate", h.get("WWW-Authenticate", "")), (st, h)
                    stage(f"secrets: {old} {old_refresh}")
                    revoked.append(True)
                    await asyncio.wait_for(call(s, "server_info", {}), 30)
                    raise AssertionError("a revoked connection's call went through")
        except BaseException as e:
            if not revoked:
                raise
            leaves = flatten(e)
            assert any("asked to be authorized again" in str(x) for x in leaves), leaves
            stage("client A revoked: its next call refused, and it was not approved again")
        assert revoked, "client A's session ended before its revocation"
    finally:
        owner.browser.close()


if __name__ == "__main__":
    asyncio.run(main())
    stage("done")
