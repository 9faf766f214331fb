// A first draft: cancel the relativistic rate and remove the measured error within
// one 30 s tick (a gain of 1/30 per second). It forgets that the ground's measurement
// is 600 s old: for twenty ticks it keeps correcting an error it has already removed,
// so the clock swings past zero, each swing larger, until the correction pins at its
// 1e-8 limit and the error oscillates by microseconds: past 1 us, unhealthy.
const { createInterface } = require('readline');

const rateGr = 38.6e-6 / 86400, h = 30;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [error] = line.split(' ').map(Number);
  const u = -rateGr - error / h;
  process.stdout.write(u + '\n');
});
