'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { sum } = require('../sum.js');

test('adds what it is given', () => {
  assert.strictEqual(sum([1, 2, 3]), 6);
});

test('the sum of nothing is 0', () => {
  assert.strictEqual(sum([]), 0);
});
