// A first draft, the same law as draft.c: proportional control of the voltage
// alone, no current loop and no ramp; the inductor current overshoots at start-up.
const { createInterface } = require('readline');

createInterface({ input: process.stdin }).on('line', (line) => {
  const [v] = line.split(' ').map(Number);
  let u = 2 * (5 - v);
  if (u < 0) u = 0;
  if (u > 1) u = 1;
  process.stdout.write(u + '\n');
});
