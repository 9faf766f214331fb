'use strict';

/** The sum of a list of numbers; 0 for none. */
function sum(values) {
  return values.reduce((total, v) => total + v, 0);
}

module.exports = { sum };
