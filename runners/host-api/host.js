// plimsoll's in-sandbox client for a run's grant, preloaded into every Node process
// of a granted container (NODE_OPTIONS=--require=/run/plimsoll/host.js). It installs
// globalThis[PLIMSOLL_HOST_GLOBAL] (default `host`): host.get(route, params),
// host.post(route, body, params), put, patch, del and call. Each call goes to the
// host's broker over the run's Unix socket, or from a remote sandbox to the host's
// guard over HTTPS (PLIMSOLL_HOST_GUARD); the broker matches the route, attaches
// the credential (which never enters this container) and enforces the budgets.
// Calls outside the granted routes are refused here first, as a courtesy.
'use strict';
(function install() {
  const http = require('http');
  const fs = require('fs');
  const socketPath = process.env.PLIMSOLL_HOST_API;
  // A remote sandbox reaches the broker at the host's guard, over HTTPS; the
  // vendor's proxy adds the run's credential on the way out, or, where no proxy
  // can (dockercloud), the client sends the run's guard-only credential itself.
  const guard = process.env.PLIMSOLL_HOST_GUARD ? new URL(process.env.PLIMSOLL_HOST_GUARD) : null;
  const guardToken = process.env.PLIMSOLL_HOST_GUARD_TOKEN || '';
  const token = process.env.PLIMSOLL_HOST_TOKEN || '';
  // A session whose calls name their own grants describes the current call's in
  // grant.json; otherwise the container's environment describes the run's grant,
  // and with neither there is no client to install.
  let described = null;
  try {
    described = JSON.parse(fs.readFileSync(require('path').join(__dirname, 'grant.json'), 'utf8'));
  } catch (_) {
    // no call's grant is described
  }
  const routeLines = described
    ? described.routes
    : process.env.PLIMSOLL_HOST_ROUTES === undefined
      ? null
      : process.env.PLIMSOLL_HOST_ROUTES.split('\n').filter(Boolean);
  const name = (described ? described.global : process.env.PLIMSOLL_HOST_GLOBAL) || 'host';
  if ((!socketPath && !guard) || !Array.isArray(routeLines) || Object.prototype.hasOwnProperty.call(globalThis, name)) {
    return;
  }
  const { permitter, fill, client } = require('vm').runInThisContext(
    fs.readFileSync(require('path').join(__dirname, 'routes.js'), 'utf8'),
    { filename: 'routes.js' },
  );
  const permitted = permitter(routeLines);
  const request = (method, route, body, params) =>
    new Promise((resolve, reject) => {
      const path = fill(route, params);
      if (!permitted(method, path)) {
        throw new Error('host api call not permitted by sandbox capability: ' + method + ' ' + path);
      }
      const envelope = JSON.stringify({ method, path, body: body === undefined ? null : JSON.stringify(body) });
      const headers = { 'content-type': 'application/json', 'content-length': Buffer.byteLength(envelope) };
      const target = guard
        ? {
            hostname: guard.hostname,
            port: guard.port || 443,
            path: guard.pathname,
            method: 'POST',
            headers: guardToken ? { ...headers, 'x-plimsoll-guard': guardToken } : headers,
          }
        : { socketPath, path: '/call', method: 'POST', headers: { ...headers, authorization: 'Bearer ' + token } };
      // Neither follows a redirect: an answer is the broker's, whatever it says.
      const req = (guard ? require('https') : http).request(
        target,
        (res) => {
          const chunks = [];
          res.on('data', (c) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            let data = text;
            if (/json/.test(res.headers['content-type'] || '')) {
              try {
                data = JSON.parse(text);
              } catch (_) {
                // not JSON after all: the text is returned as it came
              }
            }
            if (res.statusCode < 200 || res.statusCode > 299) {
              const err = new Error('host api ' + res.statusCode + ': ' + text);
              err.status = res.statusCode;
              err.body = data;
              reject(err);
            } else {
              resolve(data);
            }
          });
        },
      );
      req.on('error', reject);
      req.end(envelope);
    });
  Object.defineProperty(globalThis, name, { value: client(request), writable: false, configurable: false });
  const preamble = require('path').join(__dirname, 'preamble.js');
  if (fs.existsSync(preamble)) require(preamble);
})();
