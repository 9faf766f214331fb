// A session's kept Node interpreter, owned by the session agent (runners/agent).
//
// It reads one JSON cell per line on stdin ({"code", "cell"}), runs it in the
// global context every cell shares, and writes {"exit": N} as one line to the descriptor its last argument
// names
// once the cell's output is written. A trailing expression's value is printed with
// util.inspect, as a notebook shows it, and awaited first when it is a promise; a
// thrown error prints its stack (the cell named `<cell N>`) and is exit 1.
// Top-level let, const and class are rewritten to var bindings of the global
// object so a later cell can declare them again (the same rewrite the wasm
// guest's redeclare.rs makes); top-level `await` is not supported.
'use strict';

const fs = require('fs');
const util = require('util');
const vm = require('vm');

// The agent passes the descriptor it reads cell ends from as the last argument.
const DONE = Number(process.argv[process.argv.length - 1]);

const isIdentStart = (c) => /[\p{L}_$]/u.test(c);
const isIdent = (c) => /[\p{L}\p{N}_$]/u.test(c);
const OPERATOR_WORDS = new Set(['return', 'typeof', 'instanceof', 'in', 'of', 'new', 'delete', 'void', 'throw',
  'case', 'do', 'else', 'yield', 'await']);

// Rewrites top-level let/const/class; every other token is kept byte for byte.
function redeclarable(code) {
  const chars = Array.from(code);
  let out = '';
  const nest = [];
  let prev = 'start';
  let newlineSincePrev = false;
  let classPending = false;
  let i = 0;
  while (i < chars.length) {
    const c = chars[i];
    if (c === '\n') { newlineSincePrev = true; out += c; i++; continue; }
    if (/\s/u.test(c)) { out += c; i++; continue; }
    if (c === '/' && chars[i + 1] === '/') {
      while (i < chars.length && chars[i] !== '\n') out += chars[i++];
      continue;
    }
    if (c === '/' && chars[i + 1] === '*') {
      out += '/*'; i += 2;
      while (i < chars.length && !(chars[i] === '*' && chars[i + 1] === '/')) {
        if (chars[i] === '\n') newlineSincePrev = true;
        out += chars[i++];
      }
      if (i < chars.length) { out += '*/'; i += 2; }
      continue;
    }
    const top = nest.length === 0;
    const atStatement = prev === 'start' || (newlineSincePrev && prev === 'value');
    newlineSincePrev = false;
    if (c === '"' || c === "'") {
      out += chars[i++];
      while (i < chars.length && chars[i] !== c && chars[i] !== '\n') {
        if (chars[i] === '\\' && i + 1 < chars.length) out += chars[i++];
        out += chars[i++];
      }
      if (i < chars.length) out += chars[i++];
      prev = 'value';
      continue;
    }
    if (c === '`' || (c === '}' && nest[nest.length - 1] === 'interpolation')) {
      if (c === '}') nest.pop();
      out += chars[i++];
      let opened = false;
      while (i < chars.length && chars[i] !== '`') {
        if (chars[i] === '\\' && i + 1 < chars.length) {
          out += chars[i++];
        } else if (chars[i] === '$' && chars[i + 1] === '{') {
          out += '${'; i += 2; nest.push('interpolation'); opened = true;
          break;
        }
        out += chars[i++];
      }
      if (opened) { prev = 'operator'; continue; }
      if (i < chars.length) out += chars[i++];
      prev = 'value';
      continue;
    }
    if (c === '/' && prev !== 'value') {
      out += chars[i++];
      let inClass = false;
      while (i < chars.length && chars[i] !== '\n' && (inClass || chars[i] !== '/')) {
        if (chars[i] === '\\' && i + 1 < chars.length) out += chars[i++];
        else if (chars[i] === '[') inClass = true;
        else if (chars[i] === ']') inClass = false;
        out += chars[i++];
      }
      if (i < chars.length && chars[i] === '/') {
        out += chars[i++];
        while (i < chars.length && isIdent(chars[i])) out += chars[i++];
      }
      prev = 'value';
      continue;
    }
    if (isIdentStart(c)) {
      const start = i;
      while (i < chars.length && isIdent(chars[i])) i++;
      const word = chars.slice(start, i).join('');
      let j = i;
      while (j < chars.length && /\s/u.test(chars[j])) j++;
      const next = chars[j];
      const declares = top && atStatement && next !== undefined && (isIdentStart(next) || next === '[' || next === '{');
      if (word === 'let' && declares) {
        out += 'var';
      } else if (word === 'const' && declares) {
        out += 'var  ';
      } else if (word === 'class' && top && atStatement && next !== undefined && isIdentStart(next)) {
        let end = j;
        while (end < chars.length && isIdent(chars[end])) end++;
        const name = chars.slice(j, end).join('');
        if (name === 'extends') {
          out += word;
        } else {
          out += `var ${name} = class`;
          classPending = true;
        }
      } else {
        out += word;
      }
      prev = OPERATOR_WORDS.has(word) ? 'operator' : 'value';
      continue;
    }
    if (/[0-9]/.test(c)) {
      while (i < chars.length && (isIdent(chars[i]) || chars[i] === '.')) out += chars[i++];
      prev = 'value';
      continue;
    }
    out += c;
    i++;
    if (c === '(' || c === '[') {
      nest.push('bracket'); prev = 'operator';
    } else if (c === '{') {
      if (top && classPending) { classPending = false; nest.push('class'); } else { nest.push('bracket'); }
      prev = 'start';
    } else if (c === ')' || c === ']') {
      nest.pop(); prev = 'value';
    } else if (c === '}') {
      if (nest.pop() === 'class') out += ';';
      prev = 'start';
    } else if (c === ';') {
      prev = 'start';
    } else {
      prev = 'operator';
    }
  }
  return out;
}

function report(exit) {
  fs.writeSync(DONE, JSON.stringify({ exit }) + '\n');
}

function shown(err) {
  if (err instanceof Error && typeof err.stack === 'string') return err.stack;
  return 'Uncaught ' + util.inspect(err);
}

async function runCell(ask) {
  const filename = `<cell ${ask.cell || 0}>`;
  try {
    let value = vm.runInThisContext(redeclarable(String(ask.code || '')), { filename });
    if (value !== null && typeof value === 'object' && typeof value.then === 'function') value = await value;
    if (value !== undefined) process.stdout.write(util.inspect(value) + '\n');
    return 0;
  } catch (err) {
    process.stderr.write(shown(err) + '\n');
    return 1;
  }
}

function main() {
  // Cells run as scripts in the global context: `require` resolves from the work
  // directory, as it would for a file there.
  globalThis.require = require('module').createRequire('/work/');
  // A callback that throws between or during cells is reported, not fatal: the
  // interpreter is kept, as a notebook's kernel is.
  process.on('uncaughtException', (err) => process.stderr.write(shown(err) + '\n'));
  process.on('unhandledRejection', (err) => process.stderr.write(shown(err) + '\n'));
  let pending = '';
  let queue = Promise.resolve();
  process.stdin.on('data', (chunk) => {
    pending += chunk.toString('utf8');
    let nl;
    while ((nl = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      let ask;
      try { ask = JSON.parse(line); } catch { continue; }
      // Microtasks the cell queued run before its end is reported.
      queue = queue.then(() => runCell(ask)).then((exit) => new Promise((r) => setImmediate(() => r(exit))))
        .then(report);
    }
  });
  process.stdin.on('end', () => process.exit(0));
}

if (require.main === module) main();
module.exports = { redeclarable };
