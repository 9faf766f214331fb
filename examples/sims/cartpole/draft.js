// The same law with the position and speed gains of the wrong sign: the cart moves
// away from under the pole instead of under it, and the pole falls.
const { createInterface } = require('readline');

const kp = 40, kd = 5, kx = -1, kv = -1;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [x, v, theta, omega] = line.split(' ').map(Number);
  const u = kp * theta + kd * omega + kx * x + kv * v;
  process.stdout.write(u + '\n');
});
