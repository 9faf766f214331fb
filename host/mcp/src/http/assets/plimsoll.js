// The owner's passkey ceremonies in the browser: registration with the setup
// code, and sign-in. Served as /plimsoll.js under `script-src 'self'`; it wires
// whichever of #register (with #setup-code) and #signin the page has. The server
// (webauthn-rs) sends options as {"publicKey": {...}} with base64url binary
// fields, and takes credential.toJSON()'s shape back.
"use strict";

(function () {
  const b64u = {
    decode(s) {
      const text = atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));
      return Uint8Array.from(text, (c) => c.charCodeAt(0)).buffer;
    },
    encode(buf) {
      const bytes = new Uint8Array(buf);
      let text = "";
      for (const b of bytes) text += String.fromCharCode(b);
      return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    },
  };

  // Browsers without parse*OptionsFromJSON (before 2024): decode the binary fields by hand.
  function creationOptions(json) {
    if (PublicKeyCredential.parseCreationOptionsFromJSON) {
      return PublicKeyCredential.parseCreationOptionsFromJSON(json);
    }
    const o = structuredClone(json);
    o.challenge = b64u.decode(o.challenge);
    o.user.id = b64u.decode(o.user.id);
    for (const c of o.excludeCredentials || []) c.id = b64u.decode(c.id);
    return o;
  }

  function requestOptions(json) {
    if (PublicKeyCredential.parseRequestOptionsFromJSON) {
      return PublicKeyCredential.parseRequestOptionsFromJSON(json);
    }
    const o = structuredClone(json);
    o.challenge = b64u.decode(o.challenge);
    for (const c of o.allowCredentials || []) c.id = b64u.decode(c.id);
    return o;
  }

  // credential.toJSON() where the browser has it, else the same shape by hand.
  function credentialJSON(cred) {
    if (typeof cred.toJSON === "function") return cred.toJSON();
    const r = cred.response;
    const response = { clientDataJSON: b64u.encode(r.clientDataJSON) };
    if (r.attestationObject) {
      response.attestationObject = b64u.encode(r.attestationObject);
      if (r.getTransports) response.transports = r.getTransports();
    } else {
      response.authenticatorData = b64u.encode(r.authenticatorData);
      response.signature = b64u.encode(r.signature);
      if (r.userHandle) response.userHandle = b64u.encode(r.userHandle);
    }
    return {
      id: cred.id,
      rawId: b64u.encode(cred.rawId),
      type: cred.type,
      response,
      clientExtensionResults: cred.getClientExtensionResults(),
    };
  }

  const status = (text) => {
    const p = document.getElementById("status");
    if (p) p.textContent = text;
  };

  async function post(path, body) {
    const r = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    let answer = null;
    try {
      answer = await r.json();
    } catch (_) {
      // Not JSON: said below with the status.
    }
    if (!r.ok) {
      throw new Error((answer && answer.error) || `the server answered ${r.status} ${r.statusText}`);
    }
    return answer || {};
  }

  // One ceremony: start, ask the authenticator, finish; reload on success.
  // `start` is where it begins when not /passkey/KIND/start (adding a passkey).
  async function ceremony(kind, startBody, button, start) {
    if (button) button.disabled = true;
    document.body.dataset.state = "busy";
    status(kind === "register" ? "Creating a passkey…" : "Signing in…");
    try {
      if (!window.PublicKeyCredential || !navigator.credentials) {
        throw new Error("this browser has no passkey support (WebAuthn); use a current browser over https");
      }
      const started = await post(start || `/passkey/${kind}/start`, startBody);
      const publicKey = kind === "register"
        ? creationOptions(started.options.publicKey)
        : requestOptions(started.options.publicKey);
      const cred = kind === "register"
        ? await navigator.credentials.create({ publicKey })
        : await navigator.credentials.get({ publicKey });
      if (!cred) throw new Error("the authenticator returned no credential");
      await post(`/passkey/${kind}/finish`, { ceremony: started.ceremony, credential: credentialJSON(cred) });
      document.body.dataset.state = "signed-in";
      status("Signed in.");
      location.reload();
    } catch (e) {
      document.body.dataset.state = "error";
      const name = e && e.name && e.name !== "Error" ? `${e.name}: ` : "";
      status(name + (e && e.message ? e.message : String(e)));
      if (button) button.disabled = false;
    }
  }

  function wire() {
    const register = document.getElementById("register");
    if (register) {
      register.addEventListener("click", () => {
        const input = document.getElementById("setup-code");
        ceremony("register", { code: input ? input.value.trim() : "" }, register);
      });
    }
    const add = document.getElementById("add-passkey");
    if (add) {
      add.addEventListener("click", () => ceremony("register", {}, add, "/passkey/add/start"));
    }
    const signin = document.getElementById("signin");
    if (signin) {
      signin.addEventListener("click", () => ceremony("signin", {}, signin));
    }
    // The buttons work from here on (a script driving the page waits for this).
    document.body.dataset.ready = "true";
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", wire);
  } else {
    wire();
  }
})();
