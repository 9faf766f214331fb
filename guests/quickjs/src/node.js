// The part of node's API that line programs use (the simulation judge's controllers).
// An ES module: the build compiles it to bytecode once, when it pre-initialises the
// component, and only a line program's context evaluates it, after the prelude;
// snippets and cells never do. Its default export installs the API. It receives the
// native functions (`write`, `writeBytes`, `exit`), the program's absolute path (its
// name, under `/` when relative: the working directory is `/`) and the end of a
// missing module's message, and returns what the Rust side drives:
//   feed(line, plain)
//                delivers one line of standard input; `plain` says it holds no
//                `\n` or `\r` (the Rust side scans the bytes, far faster than a
//                `String.prototype.indexOf` here)
//   close()      ends standard input
//   commonjs(fn) runs a CommonJS main (the compiled wrapper function)
//   esm(promise) watches an ES main's evaluation: a rejection is thrown by `step`
//   step()       runs one due callback (an immediate, or a timeout due now) and returns
//                1; or returns 0 when nothing is due and the program still lives, -1
//                when nothing is due and nothing keeps it alive
//   finish()     the exit status of a program that ended by itself ('exit' listeners run)
//   meta(object) fills an ES main's `import.meta` (url, filename, dirname)
//   modules      the built-in modules, for `import` (the Rust side declares them)
// feed, close, commonjs and esm return what `step` would, running nothing, so a call
// whose callbacks queued no promise job needs no second entry.
// Time stands still: immediates, `queueMicrotask`, `process.nextTick` and a timeout
// node rounds to its 1 ms minimum run after each call; a longer timeout or any
// interval never fires but keeps the program alive, as it would keep node alive.
// The native object is not reachable from the program after this returns. (Module
// code is strict.)
export default function (native, filename, provided) {
  const dirname = filename.slice(0, Math.max(1, filename.lastIndexOf('/')));
  const url = 'file://' + encodeURI(filename).replace(/[?#]/g, encodeURIComponent);

  const STDOUT = 0;
  const STDERR = 1;
  const TIMEOUT_MAX = 2 ** 31 - 1;

  function nodeError(Kind, code, message) {
    const e = new Kind(message);
    e.code = code;
    return e;
  }

  function received(v) {
    if (v === null || v === undefined) return ' Received ' + v;
    if (typeof v === 'function') return ' Received function ' + (v.name || '<anonymous>');
    if (typeof v === 'object') return ' Received an instance of ' + ((v.constructor && v.constructor.name) || 'Object');
    let shown = typeof v === 'string' ? "'" + v + "'" : String(v);
    if (shown.length > 28) shown = shown.slice(0, 25) + '...';
    return ' Received type ' + typeof v + ' (' + shown + ')';
  }

  function argType(name, expected, v) {
    const message = 'The "' + name + '" argument must be ' + expected + '.' + received(v);
    return nodeError(TypeError, 'ERR_INVALID_ARG_TYPE', message);
  }

  function checkCallback(fn) {
    if (typeof fn !== 'function') throw argType('callback', 'of type function', fn);
  }

  // ---- events: node's EventEmitter, as far as streams and readline use it ----

  class EventEmitter {
    constructor() {
      this._events = Object.create(null);
      this._maxListeners = undefined;
    }
    _add(type, fn, prepend) {
      checkCallback(fn);
      if (this._events === undefined) this._events = Object.create(null);
      if (this._events.newListener !== undefined) this.emit('newListener', type, fn.listener ? fn.listener : fn);
      const list = this._events[type];
      if (list === undefined) this._events[type] = [fn];
      else if (prepend) list.unshift(fn);
      else list.push(fn);
      return this;
    }
    on(type, fn) {
      return this._add(type, fn, false);
    }
    addListener(type, fn) {
      return this.on(type, fn);
    }
    prependListener(type, fn) {
      return this._add(type, fn, true);
    }
    once(type, fn) {
      checkCallback(fn);
      return this.on(type, onceWrapper(this, type, fn));
    }
    prependOnceListener(type, fn) {
      checkCallback(fn);
      return this.prependListener(type, onceWrapper(this, type, fn));
    }
    removeListener(type, fn) {
      const list = this._events === undefined ? undefined : this._events[type];
      if (list === undefined) return this;
      for (let i = list.length - 1; i >= 0; i--) {
        if (list[i] === fn || list[i].listener === fn) {
          list.splice(i, 1);
          if (list.length === 0) delete this._events[type];
          if (this._events.removeListener !== undefined) this.emit('removeListener', type, fn);
          break;
        }
      }
      return this;
    }
    off(type, fn) {
      return this.removeListener(type, fn);
    }
    removeAllListeners(type) {
      if (this._events === undefined) return this;
      if (type === undefined) this._events = Object.create(null);
      else delete this._events[type];
      return this;
    }
    emit(type, ...args) {
      const list = this._events === undefined ? undefined : this._events[type];
      if (list === undefined) {
        if (type === 'error') {
          const er = args[0];
          if (er instanceof Error) throw er;
          throw nodeError(Error, 'ERR_UNHANDLED_ERROR', 'Unhandled error. (' + String(er) + ')');
        }
        return false;
      }
      if (list.length === 1) {
        list[0].apply(this, args);
      } else {
        for (const fn of list.slice()) fn.apply(this, args);
      }
      return true;
    }
    listeners(type) {
      const list = this._events === undefined ? undefined : this._events[type];
      return list === undefined ? [] : list.map((fn) => (fn.listener ? fn.listener : fn));
    }
    rawListeners(type) {
      const list = this._events === undefined ? undefined : this._events[type];
      return list === undefined ? [] : list.slice();
    }
    listenerCount(type) {
      const list = this._events === undefined ? undefined : this._events[type];
      return list === undefined ? 0 : list.length;
    }
    eventNames() {
      return this._events === undefined ? [] : Reflect.ownKeys(this._events);
    }
    setMaxListeners(n) {
      this._maxListeners = n;
      return this;
    }
    getMaxListeners() {
      return this._maxListeners === undefined ? 10 : this._maxListeners;
    }
  }

  const baseEmit = EventEmitter.prototype.emit;

  // `target.emit(type, arg)` without the rest array, for the per-line path.
  function emitOne(target, type, arg) {
    if (target.emit !== baseEmit) return target.emit(type, arg);
    const list = target._events[type];
    if (list === undefined) return false;
    if (list.length === 1) list[0].call(target, arg);
    else for (const fn of list.slice()) fn.call(target, arg);
    return true;
  }

  function onceWrapper(target, type, fn) {
    let fired = false;
    const wrapped = function (...args) {
      if (fired) return undefined;
      fired = true;
      target.removeListener(type, wrapped);
      return fn.apply(this, args);
    };
    wrapped.listener = fn;
    return wrapped;
  }

  // ---- the task queues: ticks, immediates, timers; time stands still ----

  // `process.nextTick` callbacks run when the current callback returns, before any
  // promise job (each entry point below ends with `runTicks`); one queued from a
  // promise job runs from a microtask.
  const ticks = [];
  let ticking = false;
  function runTicks() {
    // Ticks queued by a tick run in the same drain, as in node.
    for (let i = 0; i < ticks.length; i += 2) {
      const fn = ticks[i];
      const args = ticks[i + 1];
      ticks[i] = ticks[i + 1] = undefined;
      fn(...args);
    }
    ticks.length = 0;
    ticking = false;
  }
  function nextTick(fn, ...args) {
    checkCallback(fn);
    ticks.push(fn, args);
    if (!ticking) {
      ticking = true;
      queueMicrotask(runTicks);
    }
  }

  // Callbacks due now, in the order they run: immediates first, then timeouts (a
  // controller's calls are I/O callbacks, after which node runs immediates first).
  let immediates = [];
  let immediateAt = 0;
  let timeouts = [];
  let timeoutAt = 0;
  // Timers that never fire but keep the program alive (longer timeouts, intervals).
  let sleepers = 0;
  let nextId = 1;
  const active = new Map();

  class Timeout {
    constructor(fn, args, due) {
      this._fn = fn;
      this._args = args;
      this._due = due;
      this._refed = true;
      this._active = true;
      this._id = nextId++;
      active.set(this._id, this);
      if (!due) sleepers++;
    }
    ref() {
      if (!this._refed && this._active && !this._due) sleepers++;
      this._refed = true;
      return this;
    }
    unref() {
      if (this._refed && this._active && !this._due) sleepers--;
      this._refed = false;
      return this;
    }
    hasRef() {
      return this._refed;
    }
    refresh() {
      return this;
    }
    close() {
      cancel(this);
      return this;
    }
    [Symbol.toPrimitive]() {
      return this._id;
    }
  }

  class Immediate {
    constructor(fn, args) {
      this._onImmediate = fn;
      this._args = args;
      this._refed = true;
      this._active = true;
    }
    ref() {
      this._refed = true;
      return this;
    }
    unref() {
      this._refed = false;
      return this;
    }
    hasRef() {
      return this._refed;
    }
  }

  function cancel(t) {
    if (typeof t === 'number' || typeof t === 'string') t = active.get(Number(t));
    if (!(t instanceof Timeout) || !t._active) return;
    t._active = false;
    active.delete(t._id);
    if (!t._due && t._refed) sleepers--;
  }

  // node rounds a delay outside [1, TIMEOUT_MAX] to its 1 ms minimum: those are due now.
  function dueNow(ms) {
    const after = Number(ms);
    return !(after > 1 && after <= TIMEOUT_MAX);
  }

  function setTimeout(fn, ms, ...args) {
    checkCallback(fn);
    const t = new Timeout(fn, args, dueNow(ms));
    if (t._due) timeouts.push(t);
    return t;
  }
  function setInterval(fn, ms, ...args) {
    checkCallback(fn);
    return new Timeout(fn, args, false);
  }
  function setImmediate(fn, ...args) {
    checkCallback(fn);
    const i = new Immediate(fn, args);
    immediates.push(i);
    return i;
  }
  function clearImmediate(i) {
    if (i instanceof Immediate) i._active = false;
  }

  // ---- standard input ----

  // A marker on readline's own `data` listener: a fed line goes to the interface
  // whole, without building `line + '\n'` and splitting it again.
  const LINES = Symbol('readline interface');

  class Stdin extends EventEmitter {
    constructor() {
      super();
      this.fd = 0;
      this.isTTY = false;
      // null: never asked to flow (node's initial state); true: flowing; false: paused.
      this.flowing = null;
      this.readableEnded = false;
      this.destroyed = false;
      this._refed = true;
      this._pending = [];
      this._flushing = false;
    }
    on(type, fn) {
      super.on(type, fn);
      if (type === 'data' && this.flowing !== false) this.resume();
      if (type === 'readable') this.flowing = false;
      return this;
    }
    addListener(type, fn) {
      return this.on(type, fn);
    }
    resume() {
      this.flowing = true;
      if (this._pending.length && !this._flushing) {
        this._flushing = true;
        nextTick(flushPending);
      }
      return this;
    }
    pause() {
      this.flowing = false;
      return this;
    }
    isPaused() {
      return this.flowing === false;
    }
    setEncoding() {
      return this;
    }
    ref() {
      this._refed = true;
      return this;
    }
    unref() {
      this._refed = false;
      return this;
    }
    destroy() {
      this.destroyed = true;
      this.flowing = false;
      return this;
    }
    read(n) {
      if (this._pending.length === 0) return null;
      const all = this._pending.join('');
      if (n === undefined || n >= all.length) {
        this._pending = [];
        return all;
      }
      this._pending = [all.slice(n)];
      return all.slice(0, n);
    }
    pipe(dest) {
      this.on('data', (chunk) => dest.write(chunk));
      return dest;
    }
    [Symbol.asyncIterator]() {
      const queue = [];
      let waiting = null;
      let done = false;
      const ondata = (chunk) => {
        if (waiting !== null) {
          const w = waiting;
          waiting = null;
          w({ value: chunk, done: false });
        } else {
          queue.push(chunk);
        }
      };
      const onend = () => {
        done = true;
        if (waiting !== null) waiting({ value: undefined, done: true });
      };
      this.on('data', ondata);
      this.on('end', onend);
      const stream = this;
      return {
        next() {
          if (queue.length) return Promise.resolve({ value: queue.shift(), done: false });
          if (done) return Promise.resolve({ value: undefined, done: true });
          return new Promise((resolve) => {
            waiting = resolve;
          });
        },
        return() {
          // Leaving the loop destroys the stream, as in node.
          done = true;
          stream.removeListener('data', ondata);
          stream.removeListener('end', onend);
          stream.destroy();
          return Promise.resolve({ value: undefined, done: true });
        },
        [Symbol.asyncIterator]() {
          return this;
        },
      };
    }
  }

  const stdin = new Stdin();

  // Is anything reading standard input? That keeps node alive.
  function reading() {
    return (
      !stdin.readableEnded &&
      !stdin.destroyed &&
      stdin._refed &&
      (stdin.flowing === true || stdin.listenerCount('readable') > 0)
    );
  }

  // One line to the `data` listeners (readline's take the line itself).
  function deliver(line, plain) {
    const list = stdin._events.data;
    if (list === undefined) return;
    if (list.length === 1) {
      const fn = list[0];
      if (fn[LINES] !== undefined) fn[LINES]._fed(line, plain);
      else fn.call(stdin, line + '\n');
      return;
    }
    let chunk;
    for (const fn of list.slice()) {
      if (fn[LINES] !== undefined) fn[LINES]._fed(line, plain);
      else fn.call(stdin, chunk === undefined ? (chunk = line + '\n') : chunk);
    }
  }

  // Lines fed while nothing read them wait, as a pipe keeps them, until input flows.
  function flushPending() {
    stdin._flushing = false;
    while (stdin._pending.length && stdin.flowing === true && !stdin.destroyed) {
      const chunk = stdin._pending.shift();
      const list = stdin._events.data;
      if (list !== undefined) for (const fn of list.slice()) fn.call(stdin, chunk);
    }
  }

  function feed(line, plain) {
    if (stdin.readableEnded || stdin.destroyed) return status();
    if (stdin.flowing === true && stdin._pending.length === 0) {
      deliver(line, plain);
    } else {
      stdin._pending.push(line + '\n');
      if (stdin.listenerCount('readable') > 0) stdin.emit('readable');
    }
    if (ticks.length) runTicks();
    return status();
  }

  function close() {
    if (stdin.readableEnded || stdin.destroyed) return status();
    if (stdin.flowing === true && stdin._pending.length) flushPending();
    if (stdin.listenerCount('readable') > 0) stdin.emit('readable');
    stdin.readableEnded = true;
    stdin.emit('end');
    stdin.emit('close');
    runTicks();
    return status();
  }

  // ---- standard output and error ----

  function writer(fd, channel) {
    const out = new EventEmitter();
    out.fd = fd;
    out.isTTY = false;
    out.writable = true;
    out.write = function write(chunk, encoding, cb) {
      if (typeof encoding === 'function') cb = encoding;
      if (typeof chunk === 'string') {
        native.write(channel, chunk.toWellFormed());
      } else if (ArrayBuffer.isView(chunk)) {
        native.writeBytes(channel, new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      } else {
        throw argType('chunk', 'of type string or an instance of Buffer, TypedArray, or DataView', chunk);
      }
      if (typeof cb === 'function') nextTick(cb, null);
      return true;
    };
    out.end = function end(chunk, encoding, cb) {
      if (typeof chunk === 'function') cb = chunk;
      else if (chunk !== undefined && chunk !== null) out.write(chunk, encoding);
      if (typeof encoding === 'function') cb = encoding;
      if (typeof cb === 'function') nextTick(cb);
      return out;
    };
    out.cork = out.uncork = () => {};
    return out;
  }

  // ---- readline ----

  const lineEnding = /\r?\n|\r(?!\n)/g;

  class Interface extends EventEmitter {
    constructor(input, output, completer, terminal) {
      super();
      let prompt = '> ';
      if (input && input.input !== undefined) {
        const options = input;
        input = options.input;
        output = options.output;
        if (options.prompt !== undefined) prompt = options.prompt;
      }
      this.input = input;
      this.output = output;
      this.terminal = false;
      this.closed = false;
      this.paused = false;
      this.line = '';
      this.cursor = 0;
      this.history = [];
      this._prompt = prompt;
      this._buffer = '';
      this._sawReturn = false;
      this._question = null;
      this._iterator = null;
      const ondata = (chunk) => this._write(String(chunk));
      ondata[LINES] = this;
      const onend = () => {
        if (this._buffer.length > 0) this._line(this._buffer);
        this._buffer = '';
        this.close();
      };
      input.on('data', ondata);
      input.on('end', onend);
      this.once('close', () => {
        input.removeListener('data', ondata);
        input.removeListener('end', onend);
      });
      input.resume();
    }
    // A fed line: the chunk `line + '\n'`, taken whole when nothing is buffered
    // and it holds no line ending of its own (`plain`).
    _fed(line, plain) {
      if (plain === true && this._buffer === '' && !this._sawReturn) {
        this._line(line);
      } else {
        this._write(line + '\n');
      }
    }
    // node's readline splitting: \n, \r\n and a lone \r end a line.
    _write(text) {
      if (this._sawReturn) {
        // A \r ended the last chunk: a \n opening this one belongs to it (node's
        // crlfDelay; time stands still, so it is always within the delay).
        if (text.charCodeAt(0) === 10) text = text.slice(1);
        this._sawReturn = false;
      }
      lineEnding.lastIndex = 0;
      if (!lineEnding.test(text)) {
        this._buffer += text;
        return;
      }
      const all = this._buffer + text;
      this._buffer = '';
      this._sawReturn = all.endsWith('\r');
      lineEnding.lastIndex = 0;
      let start = 0;
      let m;
      while ((m = lineEnding.exec(all)) !== null) {
        const end = m.index;
        const next = lineEnding.lastIndex;
        // Every line of the chunk goes out, even after a listener closes the
        // interface, as node 20 does.
        this._line(all.slice(start, end));
        start = next;
      }
      this._buffer = all.slice(start);
    }
    _line(line) {
      if (this._question !== null) {
        const answer = this._question;
        this._question = null;
        this._prompt = this._oldPrompt;
        answer(line);
      } else {
        emitOne(this, 'line', line);
      }
    }
    _output(text) {
      if (this.output !== null && this.output !== undefined) this.output.write(text);
    }
    setPrompt(prompt) {
      this._prompt = prompt;
    }
    getPrompt() {
      return this._prompt;
    }
    prompt() {
      if (this.closed) throw nodeError(Error, 'ERR_USE_AFTER_CLOSE', 'readline was closed');
      if (this.paused) this.resume();
      this._output(this._prompt);
    }
    question(query, options, cb) {
      if (typeof options === 'function') cb = options;
      if (this.closed) throw nodeError(Error, 'ERR_USE_AFTER_CLOSE', 'readline was closed');
      if (typeof cb !== 'function') return;
      if (this._question !== null) {
        this.prompt();
        return;
      }
      this._oldPrompt = this._prompt;
      this._prompt = String(query);
      this._question = cb;
      this.prompt();
    }
    write(data) {
      if (this.closed) throw nodeError(Error, 'ERR_USE_AFTER_CLOSE', 'readline was closed');
      if (this.paused) this.resume();
      if (data !== undefined && data !== null) this._write(String(data));
    }
    pause() {
      if (this.paused) return undefined;
      this.input.pause();
      this.paused = true;
      this.emit('pause');
      return this;
    }
    resume() {
      if (!this.paused) return undefined;
      this.input.resume();
      this.paused = false;
      this.emit('resume');
      return this;
    }
    close() {
      if (this.closed) return;
      this.pause();
      this.closed = true;
      this.emit('close');
    }
    getCursorPos() {
      return { rows: 0, cols: this.cursor };
    }
    [Symbol.asyncIterator]() {
      if (this._iterator !== null) return this._iterator;
      const queue = [];
      let waiting = null;
      let done = this.closed;
      this.on('line', (line) => {
        if (waiting !== null) {
          const w = waiting;
          waiting = null;
          w({ value: line, done: false });
        } else {
          queue.push(line);
        }
      });
      this.on('close', () => {
        done = true;
        if (waiting !== null) {
          const w = waiting;
          waiting = null;
          w({ value: undefined, done: true });
        }
      });
      const rl = this;
      this._iterator = {
        next() {
          if (queue.length) return Promise.resolve({ value: queue.shift(), done: false });
          if (done) return Promise.resolve({ value: undefined, done: true });
          return new Promise((resolve) => {
            waiting = resolve;
          });
        },
        return() {
          // Leaving the loop closes the interface, as in node.
          done = true;
          rl.close();
          return Promise.resolve({ value: undefined, done: true });
        },
        [Symbol.asyncIterator]() {
          return this;
        },
      };
      return this._iterator;
    }
  }

  const readline = {
    Interface,
    createInterface: (input, output, completer, terminal) => new Interface(input, output, completer, terminal),
    clearLine: (stream, dir, cb) => (typeof cb === 'function' && nextTick(cb), true),
    clearScreenDown: (stream, cb) => (typeof cb === 'function' && nextTick(cb), true),
    cursorTo: (stream, x, y, cb) => (typeof cb === 'function' && nextTick(cb), true),
    moveCursor: (stream, dx, dy, cb) => (typeof cb === 'function' && nextTick(cb), true),
    emitKeypressEvents: () => {},
  };

  // ---- process ----

  let exiting = false;
  // The status the operating system would report for `code` (node's exit codes
  // are a byte).
  const exitStatus = (code) => (code === undefined || code === null ? 0 : Number(code) | 0) & 0xff;

  function exitCodeOf(code) {
    if (code === undefined || code === null) return code;
    if (typeof code === 'string' && /^\s*-?\d+\s*$/.test(code)) return Number(code);
    if (typeof code !== 'number') throw argType('code', 'of type number', code);
    if (!Number.isInteger(code)) {
      const message = 'The value of "code" is out of range. It must be an integer. Received ' + code;
      throw nodeError(RangeError, 'ERR_OUT_OF_RANGE', message);
    }
    return code;
  }

  const process = new EventEmitter();
  Object.assign(process, {
    title: 'node',
    argv: ['node', filename],
    argv0: 'node',
    execArgv: [],
    env: {},
    exitCode: undefined,
    stdin,
    stdout: writer(1, STDOUT),
    stderr: writer(2, STDERR),
    nextTick,
    cwd: () => '/',
    uptime: () => performance.now() / 1000,
    hrtime: Object.assign(
      (prev) => {
        const ns = BigInt(Math.round(performance.now() * 1e6));
        let s = Number(ns / 1000000000n);
        let n = Number(ns % 1000000000n);
        if (Array.isArray(prev)) {
          s -= prev[0];
          n -= prev[1];
          if (n < 0) {
            s--;
            n += 1e9;
          }
        }
        return [s, n];
      },
      { bigint: () => BigInt(Math.round(performance.now() * 1e6)) },
    ),
    exit(code) {
      // Validated as node validates, before anything ends.
      code = exitCodeOf(code);
      if (code !== undefined) process.exitCode = code;
      if (!exiting) {
        exiting = true;
        process.emit('exit', process.exitCode === undefined || process.exitCode === null ? 0 : process.exitCode);
      }
      // Throws the uncatchable exit sentinel: nothing after this runs.
      native.exit(exitStatus(process.exitCode));
    },
  });

  const modules = { readline, process };

  function require(name) {
    if (typeof name !== 'string') throw argType('id', 'of type string', name);
    const bare = name.startsWith('node:') ? name.slice(5) : name;
    if (Object.prototype.hasOwnProperty.call(modules, bare)) return modules[bare];
    throw nodeError(Error, 'MODULE_NOT_FOUND', "Cannot find module '" + name + "': " + provided);
  }

  // ---- the globals node gives every program ----

  const globals = {
    process,
    setTimeout,
    setInterval,
    setImmediate,
    clearTimeout: cancel,
    clearInterval: cancel,
    clearImmediate,
  };
  for (const [name, value] of Object.entries(globals)) {
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true });
  }
  Object.defineProperty(globalThis, 'global', { value: globalThis, writable: true, configurable: true });

  // ---- what the Rust side drives ----

  let main = null; // an ES main's evaluation: { settled, failed, error }

  function step() {
    if (main !== null && main.failed) {
      main.failed = false;
      throw main.error;
    }
    while (immediateAt < immediates.length) {
      const i = immediates[immediateAt];
      immediates[immediateAt++] = undefined;
      if (!i._active) continue;
      i._active = false;
      i._onImmediate(...i._args);
      runTicks();
      return 1;
    }
    if (immediateAt) {
      immediates = [];
      immediateAt = 0;
    }
    while (timeoutAt < timeouts.length) {
      const t = timeouts[timeoutAt];
      timeouts[timeoutAt++] = undefined;
      if (!t._active) continue;
      t._active = false;
      active.delete(t._id);
      t._fn(...t._args);
      runTicks();
      return 1;
    }
    if (timeoutAt) {
      timeouts = [];
      timeoutAt = 0;
    }
    return sleepers > 0 || reading() ? 0 : -1;
  }

  // What `step` would return, running nothing: 1 when something is due.
  function status() {
    if (main !== null && main.failed) return 1;
    if (immediateAt < immediates.length || timeoutAt < timeouts.length) return 1;
    return sleepers > 0 || reading() ? 0 : -1;
  }

  function finish() {
    if (main !== null && !main.settled && (process.exitCode === undefined || process.exitCode === null)) {
      // node's status for an ES main whose top-level await never settled.
      native.write(STDERR, 'Warning: Detected unsettled top-level await at ' + url + '\n');
      process.exitCode = 13;
    }
    if (!exiting) {
      exiting = true;
      process.emit('exit', process.exitCode === undefined || process.exitCode === null ? 0 : process.exitCode);
    }
    return exitStatus(process.exitCode);
  }

  function commonjs(fn) {
    const module = { id: '.', path: dirname, exports: {}, filename, loaded: false, children: [], paths: [] };
    const req = (name) => require(name);
    req.main = module;
    req.cache = Object.create(null);
    module.require = req;
    fn.call(module.exports, module.exports, req, module, filename, dirname);
    module.loaded = true;
    runTicks();
    return status();
  }

  function esm(promise) {
    main = { settled: false, failed: false, error: undefined };
    const watched = main;
    promise.then(
      () => {
        watched.settled = true;
      },
      (e) => {
        watched.settled = true;
        watched.failed = true;
        watched.error = e;
      },
    );
    runTicks();
    return status();
  }

  function meta(m) {
    m.url = url;
    m.filename = filename;
    m.dirname = dirname;
  }

  return { feed, close, step, finish, commonjs, esm, meta, modules };
}
