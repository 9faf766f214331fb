#!/usr/bin/env python3
"""A small inventory API for the broker demo: a token endpoint and the routes a
grant opens. Standard library only. It verifies every call's bearer token itself
(an HS256 JWT with its audience, expiry and subject), so a call that reaches it
without the host's credential is refused here too.

    DEMO_JWT_SECRET=... python3 api.py [--port N]

Routes:
    POST /oauth/token   client credentials (HTTP Basic, the operator's long-lived
                        secret DEMO_CLIENT_SECRET) -> a short-lived JWT for `subject`
    GET  /items         every item (the batch route)
    GET  /items/{id}    one item
    POST /items         {"name": ...} -> the new item, `created_by` = the token's subject
    GET  /health        200

It prints `listening http://127.0.0.1:PORT` on stdout once it accepts calls, and one
JSON line per request on stderr (method, path, subject, status and the token's jti; never
a token).
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import secrets
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = os.environ.get("DEMO_JWT_SECRET", "")
CLIENT_SECRET = os.environ.get("DEMO_CLIENT_SECRET", "")
AUDIENCE = os.environ.get("DEMO_AUDIENCE", "inventory")
LOCK = threading.Lock()
ITEMS = {str(i): {"id": str(i), "name": name, "stock": stock}
         for i, (name, stock) in enumerate([("bolt", 120), ("nut", 300), ("washer", 75), ("gear", 12),
                                            ("spring", 40), ("pin", 500), ("rivet", 220), ("screw", 90)], 1)}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint(subject: str, ttl: int = 60) -> str:
    now = int(time.time())
    header = {"alg": "HS256", "typ": "JWT"}
    claims = {"sub": subject, "aud": AUDIENCE, "iat": now, "nbf": now, "exp": now + ttl, "jti": secrets.token_hex(8)}
    signing = b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode())
    sig = hmac.new(SECRET.encode(), signing.encode(), hashlib.sha256).digest()
    return signing + "." + b64url(sig)


def verify(authorization: str):
    """The token's claims, or None with why."""
    if not authorization.startswith("Bearer "):
        return None, "no bearer token"
    parts = authorization[len("Bearer "):].split(".")
    if len(parts) != 3:
        return None, "not a JWT"
    try:
        header = json.loads(unb64url(parts[0]))
        claims = json.loads(unb64url(parts[1]))
        sig = unb64url(parts[2])
    except ValueError:
        return None, "not a JWT"
    if header.get("alg") != "HS256":
        return None, "not HS256"
    want = hmac.new(SECRET.encode(), (parts[0] + "." + parts[1]).encode(), hashlib.sha256).digest()
    if not hmac.compare_digest(sig, want):
        return None, "bad signature"
    now = time.time()
    if claims.get("aud") != AUDIENCE:
        return None, "wrong audience"
    if not (claims.get("nbf", 0) - 5 <= now < claims.get("exp", 0)):
        return None, "expired or not yet valid"
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        return None, "no subject"
    return claims, ""


LOG_LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are written separately; without this, Nagle holds the body
    # for a delayed ACK (about 40 ms a call on a kept-alive connection).
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def answer(self, status, body, subject=""):
        data = json.dumps(body).encode()
        # The token's ID (never the token) tells one credential's calls from another's.
        # Logged before the answer, so a caller that has its answer finds the line.
        line = {"method": self.command, "path": self.path, "subject": subject, "status": status,
                "jti": getattr(self, "token_id", "")}
        # One write under a lock: print's separate newline lets two threads' lines
        # interleave into one that is not JSON.
        with LOG_LOCK:
            sys.stderr.write(json.dumps(line) + "\n")
            sys.stderr.flush()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def authorised(self):
        self.token_id = ""
        claims, why = verify(self.headers.get("Authorization", ""))
        if claims is None:
            self.answer(401, {"error": "unauthorised: " + why})
            return None
        self.token_id = str(claims.get("jti", ""))
        return claims["sub"]

    def do_GET(self):
        if self.path == "/health":
            return self.answer(200, {"ok": True})
        sub = self.authorised()
        if sub is None:
            return
        if self.path == "/items":
            with LOCK:
                return self.answer(200, {"items": list(ITEMS.values())}, sub)
        if self.path.startswith("/items/") and self.path.count("/") == 2:
            with LOCK:
                item = ITEMS.get(self.path[len("/items/"):])
            if item is None:
                return self.answer(404, {"error": "no such item"}, sub)
            return self.answer(200, item, sub)
        self.answer(404, {"error": "no such route"}, sub)

    def do_POST(self):
        if self.path == "/oauth/token":
            return self.token()
        sub = self.authorised()
        if sub is None:
            return
        if self.path != "/items":
            return self.answer(404, {"error": "no such route"}, sub)
        try:
            req = json.loads(self.body() or b"null")
        except ValueError:
            return self.answer(400, {"error": "the body is not JSON"}, sub)
        if not isinstance(req, dict) or not isinstance(req.get("name"), str) or not req["name"]:
            return self.answer(400, {"error": "send {\"name\": \"...\"}"}, sub)
        with LOCK:
            new_id = str(len(ITEMS) + 1)
            ITEMS[new_id] = {"id": new_id, "name": req["name"], "stock": 0, "created_by": sub}
            item = ITEMS[new_id]
        self.answer(201, item, sub)

    def token(self):
        """Client credentials: Basic base64(client_id:secret), form `subject=...`."""
        auth = self.headers.get("Authorization", "")
        body = self.body().decode(errors="replace")
        ok = False
        if auth.startswith("Basic ") and CLIENT_SECRET:
            try:
                _, _, given = base64.b64decode(auth[6:]).decode().partition(":")
                ok = hmac.compare_digest(given, CLIENT_SECRET)
            except ValueError:
                ok = False
        if not ok:
            return self.answer(401, {"error": "invalid_client"})
        fields = dict(p.split("=", 1) for p in body.split("&") if "=" in p)
        subject = fields.get("subject", "")
        ttl = min(int(fields.get("ttl", "60") or 60), 300)
        if not subject:
            return self.answer(400, {"error": "invalid_request: subject"})
        self.answer(200, {"access_token": mint(subject, ttl), "token_type": "Bearer", "expires_in": ttl})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    if len(SECRET) < 32:
        sys.exit("DEMO_JWT_SECRET must hold at least 32 bytes")
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
