// The in-sandbox clients' local route checks and their shape, shared by the QuickJS
// engine's prelude (guests/quickjs) and the Node client (host.js): one expression
// that evaluates to { permitter, fill, client }. The checks only spare a round trip;
// the host's broker decides.
(() => {
  'use strict';
  // permitter(["GET /items/*", ...]) -> (method, path) => whether a route matches;
  // `*` is one non-empty segment without `:`.
  const permitter = (routes) => {
    const allowed = routes.map((r) => {
      const sp = r.indexOf(' ');
      return { method: r.slice(0, sp), segments: r.slice(sp + 1).split('/') };
    });
    return (method, path) =>
      allowed.some(
        (r) =>
          r.method === method &&
          r.segments.length === path.split('/').length &&
          path.split('/').every((s, i) => (r.segments[i] === '*' ? s !== '' && !s.includes(':') : r.segments[i] === s)),
      );
  };
  // fill("/items/*", [42]) -> "/items/42": params fill the `*` segments in order
  // (an array, or one value for one `*`).
  const fill = (route, params) => {
    if (typeof route !== 'string') throw new TypeError('the route must be a string such as "/items/*"');
    if (params === undefined) return route;
    const values = Array.isArray(params) ? params : [params];
    const segments = route.split('/');
    const wild = segments.filter((s) => s === '*').length;
    if (wild !== values.length) {
      throw new TypeError('route ' + route + ' has ' + wild + ' * segment(s) but ' + values.length + ' param(s) were given');
    }
    let i = 0;
    return segments
      .map((s) => {
        if (s !== '*') return s;
        const v = String(values[i++]);
        if (v === '' || v.includes('/')) throw new TypeError('a param fills one segment: it must be non-empty and hold no /');
        return v;
      })
      .join('/');
  };
  // client(request) -> the frozen object both clients install: `call(method, route,
  // body, params)` and one method per verb, each a `request` of the same arguments.
  const client = (request) =>
    Object.freeze({
      call: (method, route, body, params) => request(method, route, body, params),
      get: (route, params) => request('GET', route, undefined, params),
      del: (route, params) => request('DELETE', route, undefined, params),
      post: (route, body, params) => request('POST', route, body, params),
      put: (route, body, params) => request('PUT', route, body, params),
      patch: (route, body, params) => request('PATCH', route, body, params),
    });
  return { permitter, fill, client };
})()
