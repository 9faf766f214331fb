// The engine's JavaScript side, evaluated once per context before any caller code.
// It receives the native functions (`write`, `call`, `readFile`) and the grant
// client's shared route checks and shape (`routes`, runners/host-api/routes.js),
// and returns the helpers the Rust side drives: `inspect` (notebook display),
// `describe` (uncaught errors), `nextTimer` (virtual-time timers) and `installHost`
// (a grant's client).
// The native object is not reachable from caller code after this returns.
(function (native) {
  'use strict';

  const STDOUT = 0;
  const STDERR = 1;
  const MAX_DEPTH = 2;
  const MAX_ITEMS = 100;
  const MAX_STRING = 10000;

  const wellFormed = (s) => (typeof s.toWellFormed === 'function' ? s.toWellFormed() : s);
  const emit = (channel, text) => native.write(channel, wellFormed(text));

  const isIdentifier = (k) => /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(k);
  const quote = (s) => "'" + s.replace(/\\/g, '\\\\').replace(/'/g, "\\'").replace(/\n/g, '\\n') + "'";

  function keyText(k) {
    if (typeof k === 'symbol') return '[' + k.toString() + ']';
    return isIdentifier(k) ? k : quote(k);
  }

  function constructorName(v) {
    try {
      const proto = Object.getPrototypeOf(v);
      if (proto === null) return '[Object: null prototype]';
      const c = proto.constructor;
      return c && typeof c.name === 'string' ? c.name : '';
    } catch (_) {
      return '';
    }
  }

  function errorText(e) {
    const head = String(e);
    const stack = typeof e.stack === 'string' ? e.stack.replace(/\n+$/, '') : '';
    return stack ? head + '\n' + stack : head;
  }

  // A readable rendering in the spirit of Node's util.inspect: strings quoted when
  // nested, objects and arrays expanded to a fixed depth, cycles named.
  function inspect(value, depth, seen, nested) {
    depth = depth === undefined ? 0 : depth;
    seen = seen || [];
    switch (typeof value) {
      case 'string': {
        if (!nested) return value;
        const s = value.length > MAX_STRING ? value.slice(0, MAX_STRING) + '...' : value;
        return quote(s);
      }
      case 'number':
        return Object.is(value, -0) ? '-0' : String(value);
      case 'bigint':
        return String(value) + 'n';
      case 'boolean':
      case 'undefined':
        return String(value);
      case 'symbol':
        return value.toString();
      case 'function': {
        const name = value.name ? ': ' + value.name : ' (anonymous)';
        const kind = /^class\s/.test(Function.prototype.toString.call(value)) ? 'class' : 'Function';
        return '[' + kind + name + ']';
      }
    }
    if (value === null) return 'null';
    if (seen.indexOf(value) !== -1) return '[Circular]';
    if (value instanceof Error) return nested ? '[' + String(value) + ']' : errorText(value);
    if (value instanceof Date) return isNaN(value.getTime()) ? 'Invalid Date' : value.toISOString();
    if (value instanceof RegExp) return String(value);
    if (value instanceof Promise) return 'Promise { <pending> }';
    if (value instanceof WeakMap) return 'WeakMap { <items unknown> }';
    if (value instanceof WeakSet) return 'WeakSet { <items unknown> }';
    if (depth > MAX_DEPTH) return Array.isArray(value) ? '[Array]' : '[Object]';

    const inner = seen.concat([value]);
    const show = (v) => inspect(v, depth + 1, inner, true);
    let parts = [];
    let open = '{';
    let close = '}';
    let prefix = '';

    if (Array.isArray(value) || ArrayBuffer.isView(value)) {
      open = '[';
      close = ']';
      if (!Array.isArray(value)) prefix = constructorName(value) + '(' + value.length + ') ';
      const n = Math.min(value.length, MAX_ITEMS);
      let holes = 0;
      for (let i = 0; i < n; i++) {
        if (Array.isArray(value) && !(i in value)) {
          holes++;
          continue;
        }
        if (holes) {
          parts.push('<' + holes + ' empty item' + (holes > 1 ? 's' : '') + '>');
          holes = 0;
        }
        parts.push(show(value[i]));
      }
      if (holes) parts.push('<' + holes + ' empty item' + (holes > 1 ? 's' : '') + '>');
      if (value.length > MAX_ITEMS) parts.push('... ' + (value.length - MAX_ITEMS) + ' more items');
      if (Array.isArray(value)) {
        for (const k of Object.keys(value)) {
          if (!/^(0|[1-9][0-9]*)$/.test(k)) parts.push(keyText(k) + ': ' + show(value[k]));
        }
      }
    } else if (value instanceof Map) {
      prefix = 'Map(' + value.size + ') ';
      let i = 0;
      for (const [k, v] of value) {
        if (i++ >= MAX_ITEMS) {
          parts.push('...');
          break;
        }
        parts.push(show(k) + ' => ' + show(v));
      }
    } else if (value instanceof Set) {
      prefix = 'Set(' + value.size + ') ';
      let i = 0;
      for (const v of value) {
        if (i++ >= MAX_ITEMS) {
          parts.push('...');
          break;
        }
        parts.push(show(v));
      }
    } else {
      const name = constructorName(value);
      if (name && name !== 'Object') prefix = name + ' ';
      const keys = Object.keys(value).concat(Object.getOwnPropertySymbols(value));
      for (const k of keys.slice(0, MAX_ITEMS)) {
        let v;
        try {
          v = value[k];
        } catch (e) {
          v = '[Getter threw]';
        }
        parts.push(keyText(k) + ': ' + show(v));
      }
      if (keys.length > MAX_ITEMS) parts.push('... ' + (keys.length - MAX_ITEMS) + ' more properties');
    }

    if (parts.length === 0) return prefix + open + close;
    const oneLine = prefix + open + ' ' + parts.join(', ') + ' ' + close;
    if (oneLine.length <= 72 && oneLine.indexOf('\n') === -1) return oneLine;
    const pad = '  '.repeat(depth + 1);
    return prefix + open + '\n' + pad + parts.join(',\n' + pad) + '\n' + '  '.repeat(depth) + close;
  }

  // console.log's format: printf-style directives when the first argument is a string.
  function format(args) {
    if (args.length === 0) return '';
    let out = [];
    let rest = args;
    if (typeof args[0] === 'string' && args.length > 1 && args[0].indexOf('%') !== -1) {
      let i = 1;
      const text = args[0].replace(/%([sdifjoOc%])/g, (m, d) => {
        if (d === '%') return '%';
        if (i >= args.length) return m;
        const a = args[i++];
        switch (d) {
          case 's':
            return typeof a === 'string' ? a : inspect(a, 1, [], true);
          case 'd':
          case 'i':
            return typeof a === 'bigint' ? a + 'n' : String(d === 'i' ? parseInt(a) : Number(a));
          case 'f':
            return String(parseFloat(a));
          case 'j':
            try {
              return JSON.stringify(a);
            } catch (_) {
              return '[Circular]';
            }
          case 'c':
            return '';
          default:
            return inspect(a, 0, [], true);
        }
      });
      out.push(text);
      rest = args.slice(i);
    } else {
      out.push(inspect(args[0]));
      rest = args.slice(1);
    }
    for (const a of rest) out.push(inspect(a));
    return out.join(' ');
  }

  const counts = new Map();
  const line = (channel) => (...args) => emit(channel, format(args) + '\n');
  const console = {
    log: line(STDOUT),
    info: line(STDOUT),
    debug: line(STDOUT),
    error: line(STDERR),
    warn: line(STDERR),
    trace: (...args) => emit(STDERR, 'Trace: ' + format(args) + '\n'),
    dir: (v) => emit(STDOUT, inspect(v) + '\n'),
    assert: (ok, ...args) => {
      if (!ok) emit(STDERR, 'Assertion failed' + (args.length ? ': ' + format(args) : '') + '\n');
    },
    count: (label) => {
      const k = label === undefined ? 'default' : String(label);
      const n = (counts.get(k) || 0) + 1;
      counts.set(k, n);
      emit(STDOUT, k + ': ' + n + '\n');
    },
  };
  Object.defineProperty(globalThis, 'console', { value: console, writable: true, configurable: true });

  // Timers run in virtual time: once the code and its promise jobs are done, the
  // earliest timer fires, its jobs run, and so on. Nothing waits on a real clock,
  // so a timer costs no wall time; a timer that re-arms forever meets the deadline.
  let clock = 0;
  let nextId = 1;
  const timers = new Map();
  function arm(fn, ms, args, repeat) {
    if (typeof fn !== 'function') throw new TypeError('the callback must be a function');
    const delay = Math.max(0, Number(ms) || 0);
    const id = nextId++;
    timers.set(id, { fn, args, at: clock + delay, delay, repeat, seq: id });
    return id;
  }
  globalThis.setTimeout = (fn, ms, ...args) => arm(fn, ms, args, false);
  globalThis.setInterval = (fn, ms, ...args) => arm(fn, ms, args, true);
  globalThis.setImmediate = (fn, ...args) => arm(fn, 0, args, false);
  globalThis.clearTimeout = globalThis.clearInterval = globalThis.clearImmediate = (id) => {
    timers.delete(id);
  };

  function nextTimer() {
    let best = null;
    for (const [id, t] of timers) {
      if (best === null || t.at < best[1].at || (t.at === best[1].at && t.seq < best[1].seq)) best = [id, t];
    }
    if (best === null) return false;
    const [id, t] = best;
    clock = t.at;
    if (t.repeat) {
      t.at = clock + Math.max(1, t.delay);
      t.seq = nextId++;
    } else {
      timers.delete(id);
    }
    t.fn(...t.args);
    return true;
  }

  // Describes what an uncaught throw or rejection left, for stderr.
  function describe(e, inPromise) {
    const lead = inPromise ? 'Uncaught (in promise) ' : 'Uncaught ';
    if (e instanceof Error) return lead + errorText(e) + '\n';
    return lead + inspect(e, 0, [], true) + '\n';
  }

  // A grant's client: host.get(route, params), host.post(route, body, params), ...
  // `params` fill the route's `*` segments in order (an array, or one value for
  // one `*`). Calls outside the granted routes are refused here first; the host's
  // broker refuses them anyway, and it alone holds the credential.
  function installHost(name, routes, preamble) {
    const permitted = native.routes.permitter(routes);
    const fill = native.routes.fill;
    const request = (method, route, body, params) => {
      let path;
      try {
        path = fill(route, params);
      } catch (e) {
        return Promise.reject(e);
      }
      if (!permitted(method, path)) {
        return Promise.reject(new Error('host api call not permitted by sandbox capability: ' + method + ' ' + path));
      }
      // The native side takes two arguments, or three with a body.
      const answer = body === undefined ? native.call(method, path) : native.call(method, path, JSON.stringify(body));
      let data = answer.body;
      if (/json/.test(answer.contentType)) {
        try {
          data = JSON.parse(answer.body);
        } catch (_) {
          // not JSON after all: the text is returned as it came
        }
      }
      if (answer.status < 200 || answer.status > 299) {
        const err = new Error('host api ' + answer.status + ': ' + answer.body);
        err.status = answer.status;
        err.body = data;
        return Promise.reject(err);
      }
      return Promise.resolve(data);
    };
    Object.defineProperty(globalThis, name, {
      value: native.routes.client(request),
      writable: false,
      configurable: false,
    });
    if (preamble) (0, eval)(preamble);
  }

  if (native.readFile) {
    const readFile = native.readFile;
    globalThis.readFile = (path) => {
      const text = readFile(String(path));
      if (text === undefined) throw new Error("ENOENT: no such file '" + path + "'");
      return text;
    };
  }

  // `display` is a cell's trailing value as a REPL shows it: strings quoted too.
  return { inspect: (v) => inspect(v), display: (v) => inspect(v, 0, [], true), describe, nextTimer, installHost };
});
