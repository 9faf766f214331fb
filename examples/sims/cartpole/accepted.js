// Cart-pole balance: linear state feedback on the pole's angle and rate and the
// cart's position and speed. Only + and *, so the arithmetic is plain IEEE doubles.
const { createInterface } = require('readline');

const kp = 40, kd = 5, kx = 1, kv = 1;

createInterface({ input: process.stdin }).on('line', (line) => {
  const [x, v, theta, omega] = line.split(' ').map(Number);
  const u = kp * theta + kd * omega + kx * x + kv * v;
  process.stdout.write(u + '\n');
});
