// Tests of cell.js's rewrite of top-level declarations: `node --test runners/session/`.
'use strict';

const test = require('node:test');
const assert = require('node:assert');
const { redeclarable } = require('./cell.js');

test('top-level declarations become globals', () => {
  assert.strictEqual(redeclarable('let base = 40'), 'var base = 40');
  assert.strictEqual(redeclarable('const base = 41;'), 'var   base = 41;');
  assert.strictEqual(redeclarable('const {a, b} = o; let [c] = d'), 'var   {a, b} = o; var [c] = d');
  assert.strictEqual(redeclarable('class C { m() { return 1 } }\n(1)'), 'var C = class C { m() { return 1 } };\n(1)');
  assert.strictEqual(redeclarable('class D extends C {}'), 'var D = class D extends C {};');
  assert.strictEqual(redeclarable('x = 1\nlet y = 2'), 'x = 1\nvar y = 2');
  assert.strictEqual(redeclarable('s = `${1}`; let z = 3'), 's = `${1}`; var z = 3');
  assert.strictEqual(redeclarable('r = /}/g; let q = 1'), 'r = /}/g; var q = 1');
});

test('nothing below the top level or inside literals changes', () => {
  for (const code of [
    'for (let i = 0; i < 3; i++) {}',
    'function f() { let x = 1; const y = 2; class Z {} }',
    '{ let inner = 1 }',
    "'let a = 1'; \"const b\"",
    '`let ${ {let: 1}.let } const c`',
    '/let x/.test(s)',
    '// let commented\n/* const c = 1 */',
    'let = 5',
    'a = b / c; let',
    'x.let = 1; y.class',
  ]) {
    assert.ok(!redeclarable(code).includes('var'), `${code} became ${redeclarable(code)}`);
  }
});

test('a rewritten cell runs twice in one context', () => {
  const vm = require('node:vm');
  const ctx = vm.createContext({});
  vm.runInContext(redeclarable('let base = 40; class K {}'), ctx);
  assert.strictEqual(vm.runInContext(redeclarable('let base = 41; class K {}; base + 1'), ctx), 42);
});
