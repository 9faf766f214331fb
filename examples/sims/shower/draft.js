// A first draft: a thermostat. Full hot while the head is below 38 C, full cold
// once it is above. It ignores the ~4.5 s the water takes from the valve to the
// head: by the time the head reads 38 C the pipe is full of nearly 60 C water, so
// the head keeps heating past the 43 C scald line (and then swings cold again).
const { createInterface } = require('readline');

const target = 38;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [tHead] = line.split(' ').map(Number);
  const u = tHead < target ? 1 : 0;
  process.stdout.write(u + '\n');
});
